//! The `spillway` daemon: configuration in, running workers, clean teardown out.
//!
//! This module owns the process's life cycle: load the config, start EAL, create the mempool,
//! open the ports, give every worker its queues and its lcore, print live counters from the
//! main lcore, stop everything on SIGINT/SIGTERM (or after `--duration`) and tear down in the
//! reverse order of setup, printing the final counters. Setup errors name the config field
//! they come from. It must never touch packets itself or call DPDK other than through
//! [`crate::dpdk`].

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use spillway_control::config::{self, Config, ConfigError, DataplaneConfig};
use spillway_control::controller::{ControlError, Controller};
use spillway_shared::addr::{mask, Addr, Prefix};
use spillway_shared::conntrack::Shard;
use spillway_shared::wire::build;

use crate::dpdk::{self, DpdkError, Eal, LcoreId, Mempool, PollGate, Port, PortSetup};
use crate::neighbour::{NextHopCache, RequestSender, Resolver, ResolverTimers};
use crate::path::{Node, PacketBuf};
use crate::worker::{
    Balancer, CounterValues, Mailbox, Outbox, PortQueues, Worker, WorkerCounters, WorkerParams,
    MAILBOX_CAPACITY, OUTBOX_CAPACITY,
};
use crossbeam::queue::ArrayQueue;

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

/// Counters at the end of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Per worker, in worker order.
    pub workers: Vec<CounterValues>,
}

/// Runs the daemon until SIGINT/SIGTERM or the configured duration.
pub fn run(options: &Options) -> Result<Summary, DaemonError> {
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

/// Flags set by signal handlers.
#[derive(Debug, Clone, Copy)]
pub struct Signals<'a> {
    /// SIGINT / SIGTERM: stop.
    pub stop: &'a AtomicBool,
    /// SIGHUP: reload the configuration.
    pub reload: &'a AtomicBool,
}

/// Runs the data plane described by `config` until `stop` is set or the duration passes.
pub fn run_config(
    config: &Config,
    options: &Options,
    signals: &Signals<'_>,
) -> Result<Summary, DaemonError> {
    let stop = signals.stop;
    let dp = &config.dataplane;
    // The load balancer when services are configured; io-forward (the baseline) otherwise.
    let balance = !config.services.is_empty();
    if balance && dp.ports.len() != 1 {
        return Err(DaemonError::Setting {
            field: "dataplane.ports".to_owned(),
            message: "the load balancer runs one-armed: exactly one port".to_owned(),
        });
    }
    // Setup, in order; teardown is the reverse, by drop order: ports, then EAL.
    remove_stale_memif_sockets(&dp.eal_args);
    let eal = Eal::init(&dp.eal_args).map_err(dpdk_err("dataplane.eal_args"))?;
    let lcores = worker_lcores(&eal, dp)?;
    let workers = u16::try_from(lcores.len()).expect("validated worker count fits u16");
    let pool = Mempool::create(&eal, "spillway_mbufs", dp.mempool_size, dp.mempool_cache_size)
        .map_err(dpdk_err("dataplane.mempool_size"))?;
    let setup = PortSetup {
        rx_queues: workers,
        tx_queues: workers,
        extra_tx_queues: 0,
        rx_desc: dp.rx_queue_size,
        tx_desc: dp.tx_queue_size,
    };
    let mut ports = Vec::with_capacity(dp.ports.len());
    for (i, name) in dp.ports.iter().enumerate() {
        let port = Port::open(&eal, name, setup, &pool)
            .map_err(dpdk_err(format!("dataplane.ports[{i}]")))?;
        log_port(&port);
        ports.push(port);
    }

    let counters: Arc<[WorkerCounters]> = lcores.iter().map(|_| WorkerCounters::new()).collect();
    let mailboxes: Vec<Mailbox> =
        lcores.iter().map(|_| Arc::new(ArrayQueue::new(MAILBOX_CAPACITY))).collect();
    let params = WorkerParams {
        burst_size: dp.burst_size,
        drain_ticks: (eal.tsc_hz() / 1_000_000).max(1) * u64::from(dp.tx_drain_us),
        tsc_hz: eal.tsc_hz(),
    };
    let mut queues: Vec<Vec<PortQueues<'_>>> = lcores.iter().map(|_| Vec::new()).collect();
    for port in &ports {
        let (rx, tx) = port.take_queues().expect("queues are taken once, here");
        for (w, (rx, tx)) in rx.into_iter().zip(tx).enumerate() {
            queues[w].push(PortQueues { rx, tx });
        }
    }

    // The control plane: a current-thread runtime on the main lcore.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)?;
    let _enter = runtime.enter();
    let origin = Instant::now();
    let mut resolver = Resolver::new(ResolverTimers::default());
    let mut control = None;
    if balance {
        let mac = ports[0].mac().map_err(dpdk_err("dataplane.ports[0]"))?.0;
        let node = node_of(config, mac);
        let mtu = u16::try_from(node.mtu).unwrap_or(u16::MAX);
        match ports[0].set_mtu(mtu) {
            // net_memif (among others) has no MTU setting; node.mtu still bounds what we send.
            Err(DpdkError::Call { errno, .. }) if errno == libc::ENOTSUP => tracing::info!(
                port = ports[0].name(),
                driver = ports[0].driver(),
                mtu,
                "the driver cannot set the port MTU (ENOTSUP); dataplane.node.mtu still applies"
            ),
            r => r.map(drop).map_err(dpdk_err("dataplane.node.mtu"))?,
        }
        let controller = Controller::start(&options.config, config.clone(), origin)?;
        resolver.set_wanted(next_hops(&controller, &node));
        control = Some((Arc::new(Mutex::new(controller)), node));
    }
    // Frames the control thread sends (ARP/ND requests) go out through worker 0's TX queue:
    // not every driver takes a TX queue without an RX queue (net_tap does not).
    let outbox: Outbox<'_> = Arc::new(ArrayQueue::new(OUTBOX_CAPACITY));
    let mut balancers: Vec<Option<Balancer<'_>>> = lcores
        .iter()
        .enumerate()
        .map(|(i, _)| {
            control.as_ref().map(|(c, node)| Balancer {
                snapshots: lock(c).reader(),
                mailbox: Arc::clone(&mailboxes[i]),
                outbox: (i == 0).then(|| Arc::clone(&outbox)),
                neighbours: arc_swap::Cache::new(resolver.cell()),
                next_hops: NextHopCache::new(),
                events: resolver.events(),
                shard: {
                    // Huge pages for the table when the kernel allows them (module doc of
                    // spillway_shared::conntrack; docs/performance.md).
                    let mut s =
                        Shard::with_capacity_advised(dp.conntrack_capacity as usize, |p, n| {
                            dpdk::advise_huge_pages(p, n);
                        });
                    s.set_flood_guard(Some(dp.conntrack_max_inserts_per_sec).filter(|&r| r > 0));
                    s
                },
                node: *node,
                origin,
            })
        })
        .collect();
    let mut workers: Vec<Worker<'_, '_>> = queues
        .into_iter()
        .zip(counters.iter())
        .zip(&lcores)
        .enumerate()
        .map(|(i, ((q, c), &lcore))| Worker::new(i, lcore, q, params, c, balancers[i].take()))
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
    // What the admin API and metrics see of the workers; the API serves on this runtime.
    let view: Arc<dyn spillway_control::view::DataplaneView> = Arc::new(crate::view::DaemonView {
        counters: Arc::clone(&counters),
        mailboxes: if balance { mailboxes.clone() } else { Vec::new() },
        neighbours: resolver.cell(),
    });
    let api = match &control {
        Some((c, _)) => Some(
            spillway_control::api::spawn(&config.admin.listen, Arc::clone(c), Arc::clone(&view))
                .map_err(|e| DaemonError::Setting {
                    field: "admin.listen".to_owned(),
                    message: e.to_string(),
                })?,
        ),
        None => None,
    };
    let mut sender = control.as_ref().map(|(_, node)| ControlTx {
        outbox: Arc::clone(&outbox),
        pool: &pool,
        node: *node,
    });

    let ran_for = eal.scope(|scope| -> Result<Duration, DaemonError> {
        // Whatever happens below, the workers are told to stop before the scope waits.
        let _stop_workers = SetOnDrop(stop);
        for mut worker in workers {
            let lcore = worker.lcore();
            scope
                .launch(lcore, move || worker.run(stop))
                .map_err(dpdk_err(format!("launching a worker on lcore {lcore}")))?;
        }
        println!(
            "spillway: running {} worker(s) on lcore(s) {} over port(s) {}",
            lcores.len(),
            join(&lcores),
            dp.ports.join(", ")
        );
        flush_stdout();
        let ctl = control.as_ref().map(|(c, _)| Arc::clone(c));
        let sender = sender.as_mut().map(|s| s as &mut dyn RequestSender);
        Ok(runtime.block_on(monitor(
            &lcores,
            &counters,
            options,
            signals,
            ControlPlane {
                control: ctl,
                view: Arc::clone(&view),
                node: control.as_ref().map(|(_, n)| n),
                resolver: &mut resolver,
                sender,
            },
        )))
    })?;

    let summary = Summary { workers: counters.iter().map(CounterValues::read).collect() };
    let secs = ran_for.as_secs_f64();
    for (i, (c, lcore)) in summary.workers.iter().zip(&lcores).enumerate() {
        println!(
            "final worker={i} lcore={lcore} rx={} tx={} dropped={} secs={secs:.2} mpps={:.3}",
            c.rx,
            c.tx,
            c.dropped,
            mpps(c.rx, secs)
        );
    }
    for r in spillway_shared::counters::Reason::all() {
        let n: u64 = counters.iter().map(|c| c.reason(r).get()).sum();
        if n > 0 {
            let (kind, label) = r.labels();
            println!("final {kind}={label} packets={n}");
        }
    }
    for (name, n) in [
        ("neighbour_replies", counters.iter().map(|c| c.neighbour_replies.get()).sum::<u64>()),
        ("echo_replies", counters.iter().map(|c| c.echo_replies.get()).sum()),
        ("icmp_errors_forwarded", counters.iter().map(|c| c.icmp_errors_forwarded.get()).sum()),
        ("conntrack_entries", counters.iter().map(|c| c.ct_entries.get()).sum()),
        ("memif_gate_closings", PollGate::closings()),
    ] {
        if n > 0 {
            println!("final {name}={n}");
        }
    }
    for port in &ports {
        match port.stats() {
            Ok(s) => println!(
                "final port={} ipackets={} opackets={} imissed={} ierrors={} oerrors={} \
                 rx_nombuf={}",
                port.name(),
                s.ipackets,
                s.opackets,
                s.imissed,
                s.ierrors,
                s.oerrors,
                s.rx_nombuf
            ),
            Err(e) => tracing::warn!(port = port.name(), "cannot read port counters: {e}"),
        }
    }
    flush_stdout();
    // Teardown in reverse order of setup.
    drop(sender);
    drop(outbox);
    drop(balancers);
    drop(api);
    drop(control);
    drop(_enter);
    drop(runtime);
    drop(ports);
    drop(memif_gate);
    drop(eal);
    Ok(summary)
}

/// The socket files of the `net_memif` server ports in `eal_args` (`--vdev net_memif...`
/// with `role=server`, the default, and a `socket=` path; DPDK's default path otherwise).
fn memif_server_sockets(eal_args: &[String]) -> Vec<PathBuf> {
    let vdevs = eal_args.windows(2).filter(|w| w[0] == "--vdev").map(|w| w[1].as_str());
    let inline = eal_args.iter().filter_map(|a| a.strip_prefix("--vdev="));
    vdevs
        .chain(inline)
        .filter(|v| v.starts_with("net_memif"))
        .filter_map(|v| {
            let mut socket = "/run/memif.sock";
            for kv in v.split(',').skip(1) {
                match kv.split_once('=') {
                    Some(("role", role)) if role != "server" => return None,
                    Some(("socket", path)) => socket = path,
                    _ => {}
                }
            }
            Some(PathBuf::from(socket))
        })
        .collect()
}

/// A Spillway that was killed leaves its memif socket file behind, and DPDK then fails to
/// create the port (`Address already in use`). Before EAL starts, remove such a file when it is
/// a socket nobody listens on (a connection is refused); leave it when a process answers (two
/// servers on one socket is an operator error that DPDK reports).
fn remove_stale_memif_sockets(eal_args: &[String]) {
    use std::os::unix::fs::FileTypeExt;
    for path in memif_server_sockets(eal_args) {
        let is_socket = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket());
        if !is_socket {
            continue;
        }
        match std::os::unix::net::UnixStream::connect(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                match std::fs::remove_file(&path) {
                    Ok(()) => tracing::info!(
                        socket = %path.display(),
                        "removed a stale memif socket (no process listens on it)"
                    ),
                    Err(e) => tracing::warn!(
                        socket = %path.display(),
                        "cannot remove a stale memif socket: {e}"
                    ),
                }
            }
            _ => {}
        }
    }
}

/// The lcores the workers run on: `dataplane.lcores`, or the first `workers` EAL worker
/// lcores.
fn worker_lcores(eal: &Eal, dp: &DataplaneConfig) -> Result<Vec<LcoreId>, DaemonError> {
    let available = eal.worker_lcores();
    let main = eal.main_lcore();
    if let Some(wanted) = &dp.lcores {
        let mut out = Vec::with_capacity(wanted.len());
        for (i, &l) in wanted.iter().enumerate() {
            let l = LcoreId(l);
            if !available.contains(&l) {
                return Err(DaemonError::Setting {
                    field: format!("dataplane.lcores[{i}]"),
                    message: format!(
                        "lcore {l} is not an EAL worker lcore (worker lcores: {}; main lcore \
                         {main} runs no worker)",
                        or_none(&available)
                    ),
                });
            }
            out.push(l);
        }
        return Ok(out);
    }
    let n = usize::from(dp.worker_count());
    if n > available.len() {
        return Err(DaemonError::Setting {
            field: "dataplane.workers".to_owned(),
            message: format!(
                "{n} worker(s) need {n} EAL worker lcore(s) but EAL has {} ({}; main lcore \
                 {main} runs no worker): widen -l/--lcores in dataplane.eal_args",
                available.len(),
                or_none(&available)
            ),
        });
    }
    Ok(available[..n].to_vec())
}

fn log_port(port: &Port<'_>) {
    let mac = port.mac().map(|m| m.to_string()).unwrap_or_else(|e| e.to_string());
    let link = port.link().map(|l| if l.up { "up" } else { "down" }).unwrap_or("unknown");
    let setup = port.setup();
    tracing::info!(
        port = port.name(),
        id = port.id().0,
        driver = port.driver(),
        %mac,
        link,
        rx_queues = setup.rx_queues,
        tx_queues = setup.tx_queues + setup.extra_tx_queues,
        rx_desc = setup.rx_desc,
        tx_desc = setup.tx_desc,
        rss = port.rss(),
        promiscuous = port.promiscuous(),
        "port started"
    );
}

/// What the main loop drives besides printing counters (all `None` in io-forward mode).
struct ControlPlane<'a> {
    control: Option<Arc<Mutex<Controller>>>,
    view: Arc<dyn spillway_control::view::DataplaneView>,
    node: Option<&'a Node>,
    resolver: &'a mut Resolver,
    sender: Option<&'a mut dyn RequestSender>,
}

/// The main lcore's loop while workers run: the control plane's event loop. It applies health
/// verdicts as they come, reloads on SIGHUP, keeps neighbours resolved, frees old snapshots,
/// prints per-worker counters every `stats_interval`, and returns when the stop flag is set or
/// the duration has passed, with how long the workers ran.
async fn monitor(
    lcores: &[LcoreId],
    counters: &[WorkerCounters],
    options: &Options,
    signals: &Signals<'_>,
    plane: ControlPlane<'_>,
) -> Duration {
    let ControlPlane { control, view, node, resolver, mut sender } = plane;
    let mut last_load = Instant::now();
    const TICK: Duration = Duration::from_millis(20);
    let start = Instant::now();
    let mut last_print = start;
    let mut last: Vec<CounterValues> = counters.iter().map(CounterValues::read).collect();
    let mut events = control.as_ref().and_then(|c| lock(c).take_health_events());
    let mut tick = tokio::time::interval(TICK);
    let mut seen_config = 0;
    loop {
        tokio::select! {
            Some(ev) = async { match events.as_mut() { Some(e) => e.recv().await, None => None } } => {
                if let Some(c) = &control {
                    lock(c).on_health_event(ev);
                }
                continue;
            }
            _ = tick.tick() => {}
        }
        if signals.stop.load(Ordering::Relaxed) {
            break;
        }
        let now = Instant::now();
        if options.duration.is_some_and(|d| now - start >= d) {
            break;
        }
        if let Some(c) = &control {
            let mut c = lock(c);
            if signals.reload.swap(false, Ordering::Relaxed) {
                match c.reload() {
                    Ok(r) => tracing::info!(
                        services = r.services,
                        added = r.change.added.len(),
                        removed = r.change.removed.len(),
                        "configuration reloaded"
                    ),
                    Err(e) => tracing::error!("reload rejected, running configuration kept: {e}"),
                }
            }
            // Whatever changed the configuration (SIGHUP or the API), resolve the new set of
            // backends' next hops ahead of traffic.
            let generation = c.config_generation();
            if generation != seen_config {
                seen_config = generation;
                if let Some(node) = node {
                    resolver.set_wanted(next_hops(&c, node));
                }
            }
            c.tick();
            if now - last_load >= Duration::from_secs(1) {
                last_load = now;
                c.feed_load(&*view);
            }
        }
        if let Some(s) = sender.as_mut() {
            resolver.tick(now, &mut **s);
        }
        if options.stats_interval.is_zero() || now - last_print < options.stats_interval {
            continue;
        }
        let secs = (now - last_print).as_secs_f64();
        let mut total_rx = 0;
        for (i, (c, prev)) in counters.iter().zip(last.iter_mut()).enumerate() {
            let cur = CounterValues::read(c);
            let d = cur.since(prev);
            total_rx += d.rx;
            println!(
                "stats t={:.1}s worker={i} lcore={} rx={} tx={} dropped={} mpps={:.3}",
                (now - start).as_secs_f64(),
                lcores[i],
                cur.rx,
                cur.tx,
                cur.dropped,
                mpps(d.rx, secs)
            );
            *prev = cur;
        }
        if counters.len() > 1 {
            println!("stats total mpps={:.3}", mpps(total_rx, secs));
        }
        flush_stdout();
        last_print = now;
    }
    start.elapsed()
}

/// The node's addresses from the config and the port's MAC.
fn node_of(config: &Config, mac: [u8; 6]) -> Node {
    let n = config.node_addrs();
    let with_prefix = |a: Option<(Addr, u8)>| {
        a.and_then(|(a, len)| Some((a, Prefix::new(mask(a, len), len).ok()?)))
    };
    Node {
        mac,
        ipv4: with_prefix(n.ipv4),
        ipv6: with_prefix(n.ipv6),
        gateway_v4: n.gateway_ipv4,
        gateway_v6: n.gateway_ipv6,
        mtu: n.mtu,
    }
}

/// Lock the controller. A panic while it was held already aborted the process (release
/// builds abort on panic), so a poisoned lock only happens in tests: keep going.
fn lock(c: &Mutex<Controller>) -> MutexGuard<'_, Controller> {
    c.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Every backend's next hop, to resolve before traffic needs it.
fn next_hops(c: &Controller, node: &Node) -> Vec<Addr> {
    c.state().model().backends().filter_map(|(k, _, _)| node.next_hop(&k.endpoint.addr)).collect()
}

/// The control thread's frames (ARP requests, neighbour solicitations), handed to worker 0.
struct ControlTx<'p, 'e> {
    outbox: Outbox<'e>,
    pool: &'p Mempool<'e>,
    node: Node,
}

impl RequestSender for ControlTx<'_, '_> {
    fn send(&mut self, target: Addr) -> bool {
        let Some(our_ip) = self.node.source_for(&target) else { return false };
        let Some(mut m) = self.pool.alloc() else { return false };
        if !PacketBuf::reset(&mut m, 128) {
            return false;
        }
        let built = if target.is_v4() {
            build::arp_request(PacketBuf::data_mut(&mut m), self.node.mac, our_ip, target)
        } else {
            build::neighbor_solicitation(PacketBuf::data_mut(&mut m), self.node.mac, our_ip, target)
        };
        match built {
            Ok(len) if PacketBuf::truncate(&mut m, len) => self.outbox.push(m).is_ok(),
            _ => false,
        }
    }
}

fn mpps(packets: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        packets as f64 / secs / 1e6
    } else {
        0.0
    }
}

/// Sets the flag when dropped.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn join(lcores: &[LcoreId]) -> String {
    lcores.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

fn or_none(lcores: &[LcoreId]) -> String {
    if lcores.is_empty() {
        "none".to_owned()
    } else {
        format!("lcores {}", join(lcores))
    }
}

fn flush_stdout() {
    // Best effort: a closed stdout must not stop the data plane.
    let _ = std::io::stdout().flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn memif_server_sockets_come_from_the_vdev_arguments() {
        let a = args(&[
            "--no-huge",
            "--vdev",
            "net_memif0,role=server,socket=/tmp/a.sock,socket-abstract=no",
            "--vdev=net_memif1,socket=/tmp/b.sock",
            "--vdev",
            "net_memif2,role=client,socket=/tmp/c.sock",
            "--vdev",
            "net_tap0,iface=x",
            "--vdev",
            "net_memif3",
        ]);
        assert_eq!(
            memif_server_sockets(&a),
            ["/tmp/a.sock", "/run/memif.sock", "/tmp/b.sock"].map(PathBuf::from).to_vec()
        );
    }

    #[test]
    fn a_stale_memif_socket_is_removed_and_a_live_one_kept() {
        let dir = tempfile_dir();
        let stale = dir.join("stale.sock");
        let live = dir.join("live.sock");
        // A listener that went away without removing its file, as a killed process leaves it.
        drop(std::os::unix::net::UnixListener::bind(&stale).expect("bind"));
        let _listening = std::os::unix::net::UnixListener::bind(&live).expect("bind");
        let a = args(&[
            "--vdev",
            &format!("net_memif0,socket={},socket-abstract=no", stale.display()),
            "--vdev",
            &format!("net_memif1,socket={},socket-abstract=no", live.display()),
        ]);
        remove_stale_memif_sockets(&a);
        assert!(!stale.exists(), "the stale socket is removed");
        assert!(live.exists(), "a socket somebody listens on is kept");
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("spw-daemon-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("temp dir");
        d
    }
}
