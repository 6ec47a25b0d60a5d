//! The daemon's life cycle: configuration in, running workers, clean teardown out.
//!
//! [`run`] goes through its stages in order, each an owner of what it set up:
//!
//! 1. [`Platform`]: EAL, on the memory the configuration asks for;
//! 2. [`Resources`]: the worker lcores, the mbuf pool, the ports (the kernel interface's too),
//!    the control plane's runtime and netlink;
//! 3. [`Plane`]: the control plane on the main lcore: the controller, the node, the neighbour
//!    resolver, the kernel interface's addresses;
//! 4. [`WorkerShared`] and the [`Worker`]s: what the workers share with the control plane
//!    (counters, mailboxes, capture slots, sync queues, the outbox, the exception path's
//!    queues) and the workers themselves, each with its connection table;
//! 5. [`Services`]: what runs beside the workers: fleet sync's thread, the announcer, the admin
//!    API, the resolver's sender;
//! 6. [`run_workers`]: every worker on its lcore, the exception path on a thread, the control
//!    loop here until a signal or `--duration`; then the services stop, the tables are saved,
//!    the final counters are printed.
//!
//! Teardown is the reverse order, by `Drop`: each stage is a local of [`run_config`], declared
//! after the one it borrows from, and a stage's fields are declared in the order they must go.
//! A new feature adds a field to the stage that owns it and a call in that stage. Setup errors
//! name the configuration field they come from.

mod plane;
mod resources;
mod services;
mod workers;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use spillway_control::config::{self, Config, ConfigError, SyncConfig};
use spillway_control::controller::ControlError;
use spillway_control::table_file;
use spillway_core::conntrack::Shard;
use spillway_dataplane::dpdk::{self, DpdkError};
use spillway_dataplane::kernel::KernelPath;
use spillway_dataplane::setup as dp_setup;
use spillway_dataplane::stats;
use spillway_dataplane::worker::{time_since, Worker};

use crate::control_loop::{self, ControlPlane, LinkWatch, Signals};
use crate::systemd;

use plane::Plane;
use resources::{Platform, Resources};
use services::Services;
use workers::WorkerShared;

// The config's burst limit is the size of the safe layer's on-stack burst array.
const _: () = assert!(config::MAX_BURST as usize == dpdk::MAX_BURST);

/// What the command line asks for.
#[derive(Debug, Clone)]
pub struct Options {
    /// The YAML configuration file.
    pub config: PathBuf,
    /// How often to print live counters; zero disables them.
    pub stats_interval: Duration,
    /// Stop by itself after this long (tests, benchmarks); `None` runs until a signal.
    pub duration: Option<Duration>,
}

/// Why the daemon could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The configuration file is unreadable or invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A setting is impossible on this system (checked once DPDK is up).
    #[error("{field}: {message}")]
    Setting {
        /// Dotted config field path.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// DPDK refused a step; `context` names the config field or the step.
    #[error("{context}: {source}")]
    Dpdk {
        /// Config field or step.
        context: String,
        /// DPDK's error.
        source: DpdkError,
    },
    /// Installing the signal handlers failed.
    #[error("cannot install signal handlers: {0}")]
    Signal(std::io::Error),
    /// The control plane could not start.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The control thread's runtime could not start.
    #[error("cannot start the control runtime: {0}")]
    Runtime(std::io::Error),
}

fn dpdk_err(context: impl Into<String>) -> impl FnOnce(DpdkError) -> DaemonError {
    let context = context.into();
    move |source| DaemonError::Dpdk { context, source }
}

fn setting(field: impl Into<String>, message: impl ToString) -> DaemonError {
    DaemonError::Setting { field: field.into(), message: message.to_string() }
}

/// What every stage reads: the configuration, the command line, and what follows from them.
struct Setup<'a> {
    config: &'a Config,
    options: &'a Options,
    signals: &'a Signals<'a>,
    /// The load balancer when services are configured; io-forward (the baseline) otherwise.
    balance: bool,
    /// Fleet sync's settings, when it is configured (load-balance mode only).
    sync: Option<SyncConfig>,
}

/// Runs the daemon until SIGINT/SIGTERM or the configured duration.
pub fn run(options: &Options) -> Result<(), DaemonError> {
    let config = config::load(&options.config)?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop)).map_err(DaemonError::Signal)?;
    }
    let reload = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&reload))
        .map_err(DaemonError::Signal)?;
    run_config(&config, options, &Signals { stop: &stop, reload: &reload })
}

/// The stages, in order; each is dropped after those declared below it.
fn run_config(
    config: &Config,
    options: &Options,
    signals: &Signals<'_>,
) -> Result<(), DaemonError> {
    let balance = !config.services.is_empty();
    if balance && config.dataplane.ports.len() != 1 {
        return Err(setting(
            "dataplane.ports",
            "the load balancer runs one-armed: exactly one port",
        ));
    }
    let sync = config.fleet_sync().filter(|_| balance);
    let setup = Setup { config, options, signals, balance, sync };
    let platform = Platform::start(&setup)?;
    let res = Resources::open(&setup, &platform)?;
    // The control plane's runtime is entered for the rest of the run (the API, the announcer
    // and netlink's tasks spawn on it).
    let _enter = res.runtime.enter();
    let mut plane = Plane::start(&setup, &res, &platform)?;
    let (shared, sync_keys) = WorkerShared::new(&setup, &res)?;
    let mut kernel_path = shared.kernel_path(&res);
    let workers = workers::build(&setup, &res, &plane, &shared)?;
    let mut services = Services::start(&setup, &res, &plane, &shared, sync_keys)?;
    let (ran_for, tables) = run_workers(
        &setup,
        &res,
        &mut plane,
        &shared,
        &mut services,
        workers,
        kernel_path.as_mut(),
    )?;
    services.stop(&setup, &res, &plane);
    // The workers stopped: their tables are final.
    if let (Some(path), Some(c)) = (config.table_file(), &plane.controller) {
        let snap = control_loop::lock(c).snapshot();
        table_file::save(path, &tables, &snap, time_since(plane.origin));
    }
    systemd::stopping();
    stats::print_final(&res.lcores, &shared.counters, &res.ports, ran_for);
    Ok(())
}

/// Every worker on its lcore, the exception path on a thread of its own, the control loop here
/// until it returns (a signal, after the stop grace when announcing). How long the workers
/// ran, and their tables, handed back as each stopped.
fn run_workers<'p, 'c>(
    setup: &Setup<'_>,
    res: &'p Resources<'_>,
    plane: &mut Plane,
    shared: &'c WorkerShared<'p>,
    services: &mut Services<'p>,
    workers: Vec<Worker<'p, 'c>>,
    mut kernel_path: Option<&mut KernelPath<'p>>,
) -> Result<(Duration, Vec<Shard>), DaemonError> {
    let Services { sender, view, link_up, fleet, port_counters, .. } = services;
    let halt = AtomicBool::new(false);
    let stop = &halt;
    let stopped_tables: Mutex<Vec<Shard>> = Mutex::new(Vec::new());
    let stopped = &stopped_tables;
    let ran_for = res
        .eal
        .scope(|scope| -> Result<Duration, DaemonError> {
            // Whatever happens below, the workers are told to stop before the scope waits.
            let _stop_workers = SetOnDrop(stop);
            for mut worker in workers {
                let lcore = worker.lcore();
                scope
                    .launch(lcore, move || {
                        worker.run(stop);
                        if let Some(shard) = worker.take_shard() {
                            stopped.lock().unwrap_or_else(|e| e.into_inner()).push(shard);
                        }
                    })
                    .map_err(dpdk_err(format!("launching a worker on lcore {lcore}")))?;
            }
            println!(
                "spillway: running {} worker(s) on lcore(s) {} over port(s) {}",
                res.lcores.len(),
                dp_setup::join(&res.lcores),
                setup.config.dataplane.ports.join(", ")
            );
            stats::flush_stdout();
            systemd::ready();
            let check_link = || res.ports.iter().all(|p| p.link().is_ok_and(|l| l.up));
            let refresh_ports = || services::refresh_port_counters(res, port_counters);
            let control = ControlPlane {
                control: plane.controller.clone(),
                view: Arc::clone(view),
                node: plane.node.as_ref(),
                resolver: &mut plane.resolver,
                sender: sender.as_mut().map(|s| s as _),
                link: LinkWatch { check: &check_link, up: Arc::clone(link_up) },
                refresh_ports: &refresh_ports,
                announce: setup.config.announce.as_ref().filter(|_| fleet.is_some()),
            };
            std::thread::scope(|threads| {
                let _stop_kernel_path = SetOnDrop(stop);
                if let Some(k) = kernel_path.take() {
                    std::thread::Builder::new()
                        .name("spillway-kernel".into())
                        .spawn_scoped(threads, move || k.run(stop))
                        .map_err(|e| setting("dataplane.kernel_interface", e))?;
                }
                Ok(res.runtime.block_on(control_loop::run(
                    &res.lcores,
                    &shared.counters,
                    (setup.options.stats_interval, setup.options.duration),
                    setup.signals,
                    control,
                )))
            })
        })
        .map_err(dpdk_err("running the workers"))??;
    Ok((ran_for, stopped_tables.into_inner().unwrap_or_else(|e| e.into_inner())))
}

/// Sets the flag when dropped.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
