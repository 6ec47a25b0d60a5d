//! The daemon's life cycle: configuration in, running workers, clean teardown out.
//!
//! [`run`] reads in order: start EAL and open the ports (the data plane), start the control
//! plane on the main lcore (a tokio current-thread runtime: controller, health checks, admin
//! API), give every worker its queues and its lcore, run the control loop until a signal or
//! `--duration`, then print the final counters and tear down in the reverse order of setup.
//! Setup errors name the configuration field they come from.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use spillway_control::announcer::{self, FleetOptions};
use spillway_control::api::{ApiError, ApiOptions};
use spillway_control::config::{self, Config, ConfigError};
use spillway_control::controller::{ControlError, Controller};
use spillway_control::netlink::{Netlink, RouteTable};
use spillway_control::table_file;
use spillway_control::view::DataplaneView;
use spillway_core::addr::{mask, Prefix};
use spillway_core::capture::TapSlot;
use spillway_core::conntrack::Shard;
use spillway_core::counters::{KernelPathCounters, PortCounters};
use spillway_core::mailbox::Mailbox;
use spillway_core::sync::SyncLink;
use spillway_core::wire::MacDisplay;
use spillway_dataplane::capture::WorkerTap;
use spillway_dataplane::dpdk::memory::{self, describe_areas};
use spillway_dataplane::dpdk::{
    self, DpdkError, Eal, HugepagePolicy, Hugepages, Mempool, PollGate, PortSetup,
};
use spillway_dataplane::kernel::{kernel_queue, KernelLink, KernelPath, KernelQueue};
use spillway_dataplane::neighbour::{NextHopCache, Resolver, ResolverTimers};
use spillway_dataplane::node::Node;
use spillway_dataplane::outbox::{outbox, OutboxSender};
use spillway_dataplane::setup;
use spillway_dataplane::stats;
use spillway_dataplane::sync::WorkerSync;
use spillway_dataplane::worker::{time_since, Balancer, Worker, WorkerCounters, WorkerParams};

use crate::check;
use crate::control_loop::{self, ControlPlane, LinkWatch, Signals};
use crate::kernel;
use crate::systemd;
use crate::view::DaemonView;

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

fn run_config(
    config: &Config,
    options: &Options,
    signals: &Signals<'_>,
) -> Result<(), DaemonError> {
    let dp = &config.dataplane;
    // The load balancer when services are configured; io-forward (the baseline) otherwise.
    let balance = !config.services.is_empty();
    if balance && dp.ports.len() != 1 {
        return Err(setting(
            "dataplane.ports",
            "the load balancer runs one-armed: exactly one port",
        ));
    }

    // 1. The data plane's resources: EAL (on hugepages, memory sized from the configuration),
    //    the worker lcores, the mbuf pool, the ports.
    let need = check::memory::Need::of(dp);
    let policy = hugepage_policy(dp.hugepages);
    let kernel_if = match &dp.kernel_interface {
        Some(k) if balance => {
            Some(kernel::plan(k).map_err(|m| setting("dataplane.kernel_interface.name", m))?)
        }
        _ => None,
    };
    let mut eal_args = dp.eal_args.clone();
    if let Some(k) = &kernel_if {
        eal_args.extend(["--vdev".to_owned(), k.vdev.clone()]);
    }
    let plan = memory::plan(&eal_args, need.total(), policy, &Hugepages::of_host())
        .map_err(|m| setting("dataplane.hugepages", m))?;
    if let Some(why) = &plan.fallback {
        tracing::warn!("dataplane.hugepages: preferred, running on ordinary memory: {why}");
    }
    setup::remove_stale_memif_sockets(&plan.args);
    let eal = Eal::init(&plan.args).map_err(dpdk_err("dataplane.eal_args"))?;
    // DPDK's capture framework: dpdk-dumpcap, a secondary process, captures any port (the
    // kernel interface's too). Nothing is paid until a capture starts.
    let prefix = file_prefix(&plan.args);
    // `--huge-unlink=existing` (the memory plan's default, so that dpdk-dumpcap can attach)
    // leaves EAL's hugepage files at exit: whatever way `run` ends, they go (unlinked while
    // still mapped, as `--huge-unlink` does; the pages return when the mappings go).
    let _huge_files =
        HugeFiles(plan.args.iter().any(|a| a == "--huge-unlink=existing").then(|| prefix.clone()));
    match eal.enable_capture() {
        Ok(()) if eal.has_hugepages() => tracing::info!(
            "packet capture: dpdk-dumpcap --file-prefix={prefix} -i PORT (docs/operations.md)"
        ),
        Ok(()) => tracing::info!(
            "packet capture: not with --no-huge (a capture process cannot share this one's \
             memory): run on hugepages to use dpdk-dumpcap"
        ),
        Err(e) => tracing::warn!("packet capture with dpdk-dumpcap is unavailable: {e}"),
    }
    let lcores = setup::worker_lcores(&eal, dp.lcores.as_deref(), usize::from(dp.worker_count()))
        .map_err(|(i, message)| match i {
        Some(i) => setting(format!("dataplane.lcores[{i}]"), message),
        None => setting("dataplane.workers", message),
    })?;
    let workers = u16::try_from(lcores.len()).expect("validated worker count fits u16");
    let pool = Mempool::create(&eal, "spillway_mbufs", dp.mempool_size, dp.mempool_cache_size)
        .map_err(dpdk_err("dataplane.mempool_size"))?;
    let port_setup = PortSetup {
        rx_queues: workers,
        tx_queues: workers,
        extra_tx_queues: 0,
        rx_desc: dp.rx_queue_size,
        tx_desc: dp.tx_queue_size,
    };
    let ports = setup::open_ports(&eal, &dp.ports, port_setup, &pool)
        .map_err(|(i, e)| dpdk_err(format!("dataplane.ports[{i}]"))(e))?;
    // The control plane's runtime, and netlink, before the kernel interface's port starts:
    // the interface gets the node's addresses while it is down (kernel::address_before_up).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)?;
    let _enter = runtime.enter();
    let netlink = if kernel_if.is_some() || config.announce.is_some() {
        Some(Netlink::connect().map_err(|e| setting("announce", format!("netlink: {e}")))?)
    } else {
        None
    };
    let kernel_port = match &kernel_if {
        Some(k) => {
            if let Some(nl) = &netlink {
                let n = config.node_addrs();
                let addrs: Vec<(std::net::IpAddr, u8)> = [n.ipv4, n.ipv6]
                    .into_iter()
                    .flatten()
                    .map(|(a, len)| (a.to_ip(), len))
                    .collect();
                runtime
                    .block_on(kernel::address_before_up(nl, &k.name, &addrs))
                    .map_err(|m| setting("dataplane.kernel_interface", m))?;
            }
            let one = PortSetup { rx_queues: 1, tx_queues: 1, ..port_setup };
            let port = setup::open_ports(&eal, std::slice::from_ref(&k.port), one, &pool)
                .map_err(|(_, e)| dpdk_err("dataplane.kernel_interface")(e))?;
            port.into_iter().next()
        }
        None => None,
    };
    report_memory(&eal, dp, &need, &plan, balance);

    // 2. The control plane, on this (the main) lcore: the current-thread runtime made above.
    let origin = Instant::now();
    let mut resolver = Resolver::new(ResolverTimers::default());
    let mut control = None;
    if balance {
        let mac = ports[0].mac().map_err(dpdk_err("dataplane.ports[0]"))?;
        let node = node_of(config, mac);
        let mtu = u16::try_from(node.mtu).unwrap_or(u16::MAX);
        setup::set_mtu(&ports[0], mtu).map_err(dpdk_err("dataplane.node.mtu"))?;
        let controller = Controller::start(&options.config, config.clone(), origin)?;
        resolver.set_wanted(control_loop::next_hops(&controller, &node));
        control = Some((Arc::new(Mutex::new(controller)), node));
    }
    // The exception interface: the data port's MAC, the node's MTU and addresses.
    let kernel_index = match (&kernel_if, &control, &netlink) {
        (Some(k), Some((_, node)), Some(nl)) => {
            let index = runtime
                .block_on(kernel::configure(nl, &k.name, node))
                .map_err(|m| setting("dataplane.kernel_interface", m))?;
            println!(
                "spillway: kernel interface {} ({}): the node's addresses, MAC {}; frames for \
                 the node that Spillway does not answer go to it",
                k.name,
                k.driver,
                MacDisplay(node.mac)
            );
            Some(index)
        }
        _ => None,
    };

    // 3. The workers: queues, counters, and in load-balance mode their own connection table,
    //    snapshot reader, neighbour table reader and conntrack mailbox.
    let counters: Arc<[WorkerCounters]> = lcores.iter().map(|_| WorkerCounters::new()).collect();
    let mailboxes: Vec<Mailbox> = lcores.iter().map(|_| Mailbox::default()).collect();
    // Where `spillwayctl capture` offers each worker its tap.
    let tap_slots: Vec<Arc<TapSlot>> = lcores.iter().map(|_| Arc::default()).collect();
    // Fleet sync (FS): the keys and this life's epoch first (a start that cannot read its keys
    // or keep its epoch stops here), then one pair of queues per worker.
    let sync_config = config.fleet_sync().filter(|_| balance);
    let sync_keys = match &sync_config {
        Some(s) => {
            let keys = spillway_control::sync::KeyRing::read_file(&s.key_file)
                .map_err(|e| setting("fleet.sync.key_file", e))?;
            let epoch = match test_epoch() {
                Some(e) => e,
                None => spillway_control::sync::next_epoch(
                    &s.epoch_file,
                    spillway_control::sync::epoch::clock_ms(),
                )
                .map_err(|e| setting("fleet.sync.epoch_file", e))?,
            };
            Some((keys, epoch))
        }
        None => None,
    };
    let sync_links: Vec<SyncLink> = match &sync_config {
        Some(s) => lcores.iter().map(|_| SyncLink::new(s.queue_size)).collect(),
        None => Vec::new(),
    };
    let outbox = outbox();
    let params = WorkerParams {
        burst_size: dp.burst_size,
        drain_ticks: (eal.tsc_hz() / 1_000_000).max(1) * u64::from(dp.tx_drain_us),
        tsc_hz: eal.tsc_hz(),
        idle_sleep_us: dp.idle_sleep_us,
    };
    let queues = setup::queues_by_worker(&ports, lcores.len());
    let kernel_counters = Arc::new(KernelPathCounters::default());
    let queue_size = dp.kernel_interface.as_ref().map_or(0, |k| k.queue_size as usize);
    let to_kernel: Vec<KernelQueue<'_>> = lcores.iter().map(|_| kernel_queue(queue_size)).collect();
    let from_kernel = kernel_queue(queue_size);
    let mut kernel_path = kernel_port.as_ref().map(|port| {
        let (mut rx, mut tx) = port.take_queues().expect("the kernel port's queues, taken once");
        KernelPath {
            rx: rx.remove(0),
            tx: tx.remove(0),
            to_kernel: to_kernel.clone(),
            from_kernel: Arc::clone(&from_kernel),
            counters: Arc::clone(&kernel_counters),
        }
    });
    // The connection tables, with the table file's entries when there is one (read once, before
    // any worker runs).
    let mut shards: Vec<Shard> = match &control {
        Some(_) => lcores.iter().map(|_| conntrack_shard(config)).collect(),
        None => Vec::new(),
    };
    if let Some(s) = &sync_config {
        for shard in &mut shards {
            let limit = shard.capacity() as u64 * u64::from(s.copy_permille) / 1000;
            shard.set_copy_limit(usize::try_from(limit).unwrap_or(usize::MAX));
        }
    }
    if let (Some(path), Some((c, _))) = (config.table_file(), &control) {
        let snap = control_loop::lock(c).snapshot();
        table_file::restore(path, &mut shards, &snap, time_since(origin));
    }
    let mut shards = shards.into_iter();
    let mut workers: Vec<Worker<'_, '_>> = queues
        .into_iter()
        .enumerate()
        .map(|(i, q)| {
            let balancer = control.as_ref().map(|(c, node)| Balancer {
                snapshots: control_loop::lock(c).reader(),
                mailbox: mailboxes[i].clone(),
                // Worker 0 transmits the control thread's frames.
                outbox: (i == 0).then(|| Arc::clone(&outbox)),
                neighbours: resolver.reader(),
                next_hops: NextHopCache::new(),
                events: resolver.events(),
                shard: shards.next().expect("one table per worker"),
                node: *node,
                origin,
                kernel: kernel_path.as_ref().map(|_| KernelLink {
                    to_kernel: Arc::clone(&to_kernel[i]),
                    from_kernel: (i == 0).then(|| Arc::clone(&from_kernel)),
                }),
                sync: sync_links.get(i).map(|l| WorkerSync::new(l.clone())),
                waiting: spillway_dataplane::unresolved::WaitQueue::new(),
                tap: WorkerTap::new(Arc::clone(&tap_slots[i])),
            });
            Worker::new(i, lcores[i], q, params, &counters[i], balancer)
        })
        .collect();
    // net_memif unmaps a port's memory when its peer goes away, under running bursts: the
    // workers pass a gate that DPDK's memif control messages close (dpdk::PollGate).
    let memif_gate = if ports.iter().any(|p| p.driver() == "net_memif") {
        let gate = PollGate::install(&eal).map_err(dpdk_err("net_memif poll gate"))?;
        workers.iter_mut().for_each(|w| w.set_poll_gate(gate.slot(w.index())));
        tracing::info!("net_memif port: workers pause while a memif peer connects or goes away");
        Some(gate)
    } else {
        None
    };

    // Every port's driver counters (the kernel interface's too), copied every second.
    let port_counters: Arc<[(String, PortCounters)]> = ports
        .iter()
        .chain(kernel_port.as_ref())
        .map(|p| (p.name().to_owned(), PortCounters::default()))
        .collect();
    let refresh_ports = || {
        for (p, (_, c)) in ports.iter().chain(kernel_port.as_ref()).zip(port_counters.iter()) {
            if let Ok(s) = p.stats() {
                c.ipackets.set(s.ipackets);
                c.opackets.set(s.opackets);
                c.imissed.set(s.imissed);
                c.ierrors.set(s.ierrors);
                c.oerrors.set(s.oerrors);
                c.rx_nombuf.set(s.rx_nombuf);
            }
        }
    };
    // What the admin API and metrics see of the workers; the API serves on this runtime.
    let view: Arc<dyn DataplaneView> = Arc::new(DaemonView {
        counters: Arc::clone(&counters),
        mailboxes: if balance { mailboxes } else { Vec::new() },
        tap_slots: if balance { tap_slots } else { Vec::new() },
        neighbours: resolver.cell(),
        neighbour_events: resolver.events(),
        node: control.as_ref().map(|(_, n)| *n),
        neighbour_counters: resolver.counters(),
        kernel: kernel_path.as_ref().map(|_| Arc::clone(&kernel_counters)),
        ports: port_counters.clone(),
    });
    // Fleet sync's thread, now that the kernel interface holds the node's addresses.
    let sync_stop = Arc::new(AtomicBool::new(false));
    let sync = match (&sync_config, sync_keys, &control) {
        (Some(s), Some((keys, epoch)), Some((c, _))) => {
            let settings = spillway_control::sync::SyncSettings {
                instance_id: s.instance_id,
                bind: s.local.clone(),
                peers: s.peers.iter().map(|p| (p.id, p.socket)).collect(),
                bulk_timeout: s.bulk_timeout,
                refresh: s.refresh,
                epoch,
                max_entries_per_sec: s.max_entries_per_sec,
            };
            let reader = control_loop::lock(c).reader();
            let (handle, shared) = spillway_control::sync::spawn(
                settings,
                keys,
                sync_links.clone(),
                Arc::clone(&counters),
                reader,
                Arc::clone(&sync_stop),
            )
            .map_err(|e| setting("fleet.sync.port", format!("binding {}: {e}", addrs(&s.local))))?;
            control_loop::lock(c).set_sync(Arc::clone(&shared));
            println!(
                "spillway: fleet sync as instance {} (epoch {epoch}) on {} with {} peer(s)",
                s.instance_id,
                addrs(&s.local),
                s.peers.len()
            );
            Some((handle, shared))
        }
        _ => None,
    };
    // The fleet: readiness, the announced VIPs, draining.
    let link_up = Arc::new(AtomicBool::new(false));
    let route_table = |nl: &Netlink| {
        config.announce.as_ref().map(|a| RouteTable {
            netlink: nl.clone(),
            table: a.table,
            oif: kernel_index,
        })
    };
    let fleet = match (&control, &netlink) {
        (Some((c, _)), Some(nl)) if config.announce.is_some() => {
            let flag = Arc::clone(&link_up);
            let sync_done = sync.as_ref().map(|(_, shared)| {
                let shared = Arc::clone(shared);
                Box::new(move || shared.bulk_done.load(Ordering::Relaxed)) as Box<_>
            });
            let options = FleetOptions {
                table: route_table(nl),
                link_up: Box::new(move || flag.load(Ordering::Relaxed)),
                sync_done,
            };
            Some(announcer::spawn(Arc::clone(c), Arc::clone(&view), options))
        }
        _ => None,
    };
    let api = match &control {
        Some((c, _)) => {
            let field = |e: &ApiError| match e {
                ApiError::Token { .. } => "admin.token_file",
                ApiError::Group(_) => "admin.socket_group",
                _ => "admin.listen",
            };
            let started = ApiOptions::from_config(&config.admin).and_then(|options| {
                spillway_control::api::spawn(&options, Arc::clone(c), Arc::clone(&view))
            });
            Some(started.map_err(|e| setting(field(&e), e))?)
        }
        None => None,
    };
    let mut sender = control.as_ref().map(|(_, node)| OutboxSender {
        outbox: Arc::clone(&outbox),
        pool: &pool,
        node: *node,
    });

    // 4. Run: every worker on its lcore, the exception path on a thread of its own, the
    //    control loop here until it returns (a signal, after the stop grace when announcing).
    let halt = AtomicBool::new(false);
    let stop = &halt;
    // The workers' tables, handed back as each worker stops (for the table file).
    let stopped_tables: Mutex<Vec<Shard>> = Mutex::new(Vec::new());
    let stopped = &stopped_tables;
    let ran_for = eal
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
                lcores.len(),
                setup::join(&lcores),
                dp.ports.join(", ")
            );
            stats::flush_stdout();
            systemd::ready();
            let check_link = || ports.iter().all(|p| p.link().is_ok_and(|l| l.up));
            let plane = ControlPlane {
                control: control.as_ref().map(|(c, _)| Arc::clone(c)),
                view: Arc::clone(&view),
                node: control.as_ref().map(|(_, n)| n),
                resolver: &mut resolver,
                sender: sender.as_mut().map(|s| s as _),
                link: LinkWatch { check: &check_link, up: Arc::clone(&link_up) },
                refresh_ports: &refresh_ports,
                announce: config.announce.as_ref().filter(|_| fleet.is_some()),
            };
            std::thread::scope(|threads| {
                let _stop_kernel_path = SetOnDrop(stop);
                if let Some(k) = kernel_path.as_mut() {
                    std::thread::Builder::new()
                        .name("spillway-kernel".into())
                        .spawn_scoped(threads, move || k.run(stop))
                        .map_err(|e| setting("dataplane.kernel_interface", e))?;
                }
                Ok(runtime.block_on(control_loop::run(
                    &lcores,
                    &counters,
                    (options.stats_interval, options.duration),
                    signals,
                    plane,
                )))
            })
        })
        .map_err(dpdk_err("running the workers"))??;
    // Nothing stays announced after a stop (without an exception interface the routes do not
    // go away with it).
    if let (Some(handle), Some(table)) = (fleet, netlink.as_ref().and_then(route_table)) {
        handle.abort();
        let nothing = std::collections::BTreeSet::new();
        let withdraw = table.apply(&nothing);
        match runtime.block_on(tokio::time::timeout(Duration::from_secs(2), withdraw)) {
            Ok(Ok(r)) if !r.removed.is_empty() => {
                tracing::info!(withdrawn = r.removed.len(), "VIP routes withdrawn at stop");
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::error!("withdrawing the VIP routes at stop: {e}"),
            Err(_) => tracing::error!("withdrawing the VIP routes at stop: no answer in 2 s"),
        }
    }

    sync_stop.store(true, Ordering::Relaxed);
    if let Some((handle, _)) = sync {
        let _ = handle.join();
    }
    // The workers stopped: their tables are final.
    if let (Some(path), Some((c, _))) = (config.table_file(), &control) {
        let tables = stopped_tables.into_inner().unwrap_or_else(|e| e.into_inner());
        let snap = control_loop::lock(c).snapshot();
        table_file::save(path, &tables, &snap, time_since(origin));
    }

    // 5. Report, then tear down in reverse order of setup.
    systemd::stopping();
    stats::print_final(&lcores, &counters, &ports, ran_for);
    drop(sender);
    drop(outbox);
    drop(api);
    drop(control);
    drop(_enter);
    drop(runtime);
    drop(kernel_path);
    drop(to_kernel);
    drop(from_kernel);
    drop(kernel_port);
    drop(ports);
    drop(memif_gate);
    drop(eal);
    Ok(())
}

/// `SPILLWAY_TEST_SYNC_EPOCH`: the tests' way to start an instance with a given sync epoch
/// (lower than its peers have seen, as after a clock stepped back with the epoch file lost)
/// without touching the host's clock. Never for production: it bypasses the epoch file, so a
/// nonce could repeat (the random salt still keeps them apart); said loudly when used.
fn test_epoch() -> Option<u64> {
    let e = std::env::var("SPILLWAY_TEST_SYNC_EPOCH").ok()?.parse().ok()?;
    tracing::warn!(
        "SPILLWAY_TEST_SYNC_EPOCH set: fleet sync runs with epoch {e}, not the epoch file's (a \
         test-only setting)"
    );
    Some(e)
}

/// Socket addresses as `a, b`.
fn addrs(a: &[std::net::SocketAddr]) -> String {
    a.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// `dataplane.hugepages` as the memory planner's policy: the same three values, in two
/// crates because the control plane does not link DPDK and DPDK's layer knows no
/// configuration.
fn hugepage_policy(p: config::HugepagePolicy) -> HugepagePolicy {
    match p {
        config::HugepagePolicy::Required => HugepagePolicy::Required,
        config::HugepagePolicy::Preferred => HugepagePolicy::Preferred,
        config::HugepagePolicy::Off => HugepagePolicy::Off,
    }
}

/// A worker's connection table, sized and guarded as configured, on huge pages when the
/// kernel allows them (module doc of `spillway_core::conntrack`).
/// Says how much memory the configuration needs and how much EAL got, on which pages.
fn report_memory(
    eal: &Eal,
    dp: &config::DataplaneConfig,
    need: &check::memory::Need,
    plan: &memory::MemoryPlan,
    balance: bool,
) {
    let got = describe_areas(&eal.memory());
    let pages = if eal.has_hugepages() { "hugepages" } else { "ordinary memory (--no-huge)" };
    let tables = if balance {
        let bytes =
            u64::from(dp.worker_count()) * check::memory::table_bytes(dp.conntrack_capacity);
        format!("; connection tables {} MiB in process memory", memory::mib(bytes))
    } else {
        String::new()
    };
    let line = format!(
        "memory: needs {}; asked EAL for {} MiB on {pages}, got {got}{tables}",
        need.explain(dp),
        plan.reserve_mib,
    );
    println!("spillway: {line}");
}

fn conntrack_shard(config: &Config) -> Shard {
    let dp = &config.dataplane;
    let mut s = Shard::with_capacity_advised(dp.conntrack_capacity as usize, |p, n| {
        dpdk::advise_huge_pages(p, n);
    });
    s.set_flood_guard(Some(dp.conntrack_max_inserts_per_sec).filter(|&r| r > 0));
    s
}

/// The node's addresses from the config and the port's MAC.
/// Removes EAL's hugepage files of its prefix when dropped.
struct HugeFiles(Option<String>);

impl Drop for HugeFiles {
    fn drop(&mut self) {
        if let Some(prefix) = &self.0 {
            memory::remove_hugepage_files(prefix);
        }
    }
}

/// The EAL file prefix of `args` (`--file-prefix X` or `--file-prefix=X`; EAL's default
/// `rte`).
fn file_prefix(args: &[String]) -> String {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if let Some(p) = a.strip_prefix("--file-prefix=") {
            return p.to_owned();
        }
        if a == "--file-prefix" {
            if let Some(p) = it.next() {
                return p.clone();
            }
        }
    }
    "rte".to_owned()
}

fn node_of(config: &Config, mac: [u8; 6]) -> Node {
    let n = config.node_addrs();
    let with_prefix =
        |a: Option<(_, u8)>| a.and_then(|(a, len)| Some((a, Prefix::new(mask(a, len), len).ok()?)));
    Node {
        mac,
        ipv4: with_prefix(n.ipv4),
        ipv6: with_prefix(n.ipv6),
        gateway_v4: n.gateway_ipv4,
        gateway_v6: n.gateway_ipv6,
        mtu: n.mtu,
    }
}

/// Sets the flag when dropped.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
