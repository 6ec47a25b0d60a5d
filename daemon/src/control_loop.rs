//! The main lcore's loop while the workers run: the control plane's event loop.
//!
//! It applies health verdicts as they arrive, reloads on SIGHUP (once the next hops of the
//! backends the new file adds are resolved, at most `controller::RESOLVE_AHEAD` later), feeds the measured load to
//! the controller every second, keeps the backends' next hops resolved (the resolver sends
//! its requests through worker 0's outbox), frees retired snapshots, prints live counters, and
//! returns when the stop flag is set or `--duration` has passed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use spillway_control::config;
use spillway_control::config::AnnounceConfig;
use spillway_control::controller::{Controller, ResolveAhead};
use spillway_control::view::DataplaneView;
use spillway_core::addr::Addr;
use spillway_core::counters::{KernelPathCounters, PathDrop, Reason};
use spillway_dataplane::dpdk::LcoreId;
use spillway_dataplane::neighbour::{RequestSender, Resolver};
use spillway_dataplane::node::Node;
use spillway_dataplane::stats::LivePrinter;
use spillway_dataplane::worker::WorkerCounters;

use crate::systemd::Watchdog;

/// How often the loop wakes when no health event arrives.
const TICK: Duration = Duration::from_millis(20);

/// How often the workers' load is fed to the controller (advanced load balancing).
const LOAD_PERIOD: Duration = Duration::from_secs(1);

/// Flags set by signal handlers.
#[derive(Debug, Clone, Copy)]
pub struct Signals<'a> {
    /// SIGINT / SIGTERM: stop.
    pub stop: &'a AtomicBool,
    /// SIGHUP: reload the configuration.
    pub reload: &'a AtomicBool,
}

/// What the loop drives besides printing counters (all `None` in io-forward mode).
pub struct ControlPlane<'a> {
    /// The controller, shared with the admin API.
    pub control: Option<Arc<Mutex<Controller>>>,
    /// What the control plane sees of the workers.
    pub view: Arc<dyn DataplaneView>,
    /// The node's addresses (load-balance mode).
    pub node: Option<&'a Node>,
    /// The neighbour resolver.
    pub resolver: &'a mut Resolver,
    /// Where the resolver's requests go (load-balance mode).
    pub sender: Option<&'a mut dyn RequestSender>,
    /// The data ports' link state, for the fleet's readiness.
    pub link: LinkWatch<'a>,
    /// Copies every port's driver counters for the metrics (every [`LOAD_PERIOD`]).
    pub refresh_ports: &'a dyn Fn(),
    /// With VIP announcement: SIGTERM withdraws first and stops once traffic has stopped
    /// (or the grace period ends).
    pub announce: Option<&'a AnnounceConfig>,
}

/// The data ports' link state, read every [`LINK_PERIOD`] into a flag the fleet loop reads.
pub struct LinkWatch<'a> {
    /// True when every data port's link is up.
    pub check: &'a dyn Fn() -> bool,
    /// Where the answer goes.
    pub up: Arc<AtomicBool>,
}

/// How often the links are read.
const LINK_PERIOD: Duration = Duration::from_millis(500);

/// A stop in progress (since the instance's `stopping_since`): SIGTERM withdrew every VIP; the
/// loop ends once no packet has arrived for `quiet`, or after `grace`, or at a second signal.
struct Stopping {
    grace: Duration,
    quiet: Duration,
}

/// Runs until a stop signal or, when given, until `duration` has passed, printing live
/// counters every `stats_interval` (never when zero); returns how long the workers ran.
pub async fn run(
    lcores: &[LcoreId],
    counters: &[WorkerCounters],
    (stats_interval, duration): (Duration, Option<Duration>),
    signals: &Signals<'_>,
    plane: ControlPlane<'_>,
) -> Duration {
    let ControlPlane { control, view, node, resolver, mut sender, link, refresh_ports, announce } =
        plane;
    let start = Instant::now();
    let mut due = Due::new(start);
    refresh_ports();
    link.up.store((link.check)(), Ordering::Relaxed);
    let mut stopping: Option<Stopping> = None;
    let mut printer = LivePrinter::new(stats_interval, counters);
    let mut events = control.as_ref().and_then(|c| lock(c).take_health_events());
    let mut tick = tokio::time::interval(TICK);
    let mut reloads = Reloads::default();
    let mut watches = Watches::new(counters.len());
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
        let now = Instant::now();
        if signals.stop.swap(false, Ordering::Relaxed)
            && !begin_stop(announce, control.as_deref(), &mut stopping, now)
        {
            break;
        }
        if let (Some(st), Some(c)) = (&stopping, &control) {
            if st.over(&lock(c), now) {
                break;
            }
        }
        if duration.is_some_and(|d| now - start >= d) {
            break;
        }
        if due.ports(now) {
            refresh_ports();
        }
        if due.link(now) {
            link.up.store((link.check)(), Ordering::Relaxed);
        }
        if let Some(c) = &control {
            let mut c = lock(c);
            // Whatever changed the configuration (SIGHUP or the API), resolve the new set of
            // backends' next hops ahead of traffic.
            if reloads.tick(&mut c, signals.reload, &*view, now) {
                if let Some(node) = node {
                    resolver.set_wanted(next_hops(&c, node));
                }
            }
            c.tick();
            if due.load(now) {
                c.feed_load(&*view);
            }
        }
        if let Some(s) = sender.as_mut() {
            resolver.tick(now, &mut **s);
        }
        watches.tick(now, counters, &*view);
        printer.tick(now, lcores, counters);
    }
    start.elapsed()
}

/// At a stop signal: with VIPs announced, the first signal begins a stop (withdraw every VIP,
/// forward until traffic stops); false when the loop should end now (no announcement, or a
/// second signal).
fn begin_stop(
    announce: Option<&AnnounceConfig>,
    control: Option<&Mutex<Controller>>,
    stopping: &mut Option<Stopping>,
    now: Instant,
) -> bool {
    let (Some(a), Some(c), None) = (announce, control, &*stopping) else { return false };
    let grace = Duration::from_secs_f64(a.stop_grace_sec);
    let quiet = Duration::from_secs_f64(a.quiet_sec);
    tracing::info!(
        "stop requested: withdrawing every VIP, forwarding until no packet has arrived for \
         {:.1} s (at most {:.1} s; a second signal stops now)",
        quiet.as_secs_f64(),
        grace.as_secs_f64()
    );
    lock(c).instance_mut().begin_stop(now);
    *stopping = Some(Stopping { grace, quiet });
    true
}

impl Stopping {
    /// Whether the stop is over: every VIP withdrawn and no traffic for `quiet` since (a drain
    /// before the stop counts), or `grace` has passed.
    fn over(&self, c: &Controller, now: Instant) -> bool {
        let inst = c.instance();
        let since = inst.stopping_since().unwrap_or(now);
        let withdrawn = inst.announced().is_empty();
        let quiet = inst.quiet_for(now) >= self.quiet
            && inst.withdrawn_for(now).is_some_and(|w| w >= self.quiet);
        if !(withdrawn && quiet) && now - since < self.grace {
            return false;
        }
        tracing::info!(
            after_sec = (now - since).as_secs_f64(),
            quiet_for_sec = inst.quiet_for(now).as_secs_f64(),
            "stopping: {}",
            if withdrawn && quiet {
                "the VIPs are withdrawn and traffic has stopped arriving"
            } else {
                "the stop grace period (announce.stop_grace_sec) is over"
            }
        );
        true
    }
}

/// When the loop's periodic work is next due.
struct Due {
    ports: Instant,
    link: Instant,
    load: Instant,
}

impl Due {
    fn new(now: Instant) -> Due {
        Due { ports: now, link: now, load: now }
    }

    /// Whether `last` is `period` old, restarting it when it is.
    fn every(last: &mut Instant, period: Duration, now: Instant) -> bool {
        let due = now - *last >= period;
        if due {
            *last = now;
        }
        due
    }

    /// The ports' driver counters (every [`LOAD_PERIOD`]).
    fn ports(&mut self, now: Instant) -> bool {
        Due::every(&mut self.ports, LOAD_PERIOD, now)
    }

    /// The links (every [`LINK_PERIOD`]).
    fn link(&mut self, now: Instant) -> bool {
        Due::every(&mut self.link, LINK_PERIOD, now)
    }

    /// The workers' load, fed to the controller (every [`LOAD_PERIOD`]).
    fn load(&mut self, now: Instant) -> bool {
        Due::every(&mut self.load, LOAD_PERIOD, now)
    }
}

/// SIGHUP reloads: a configuration read and validated at the signal is applied once the next
/// hops of the backends it adds are resolved, or `RESOLVE_AHEAD` has passed (a later SIGHUP
/// replaces it).
#[derive(Default)]
struct Reloads {
    pending: Option<(config::Config, ResolveAhead)>,
    /// The controller's configuration generation last seen.
    seen: u64,
}

impl Reloads {
    /// Reads the file at a SIGHUP, applies a pending configuration when it is ready; true when
    /// the configuration changed since the last tick (by SIGHUP or the API).
    fn tick(
        &mut self,
        c: &mut Controller,
        reload: &AtomicBool,
        view: &dyn DataplaneView,
        now: Instant,
    ) -> bool {
        if reload.swap(false, Ordering::Relaxed) {
            match config::load(c.path()) {
                Ok(config) => {
                    let added = c.added_backend_addresses(&config);
                    let ahead = ResolveAhead::start(view, &added, now);
                    self.pending = Some((config, ahead));
                }
                Err(e) => {
                    c.note_rejected_reload();
                    tracing::error!("reload rejected, running configuration kept: {e}");
                }
            }
        }
        // Once resolved or past the wait: apply (taken only then; until then it waits).
        let ready = self.pending.as_ref().and_then(|(_, a)| a.poll(view, now));
        if let Some((missing, (config, ahead))) =
            ready.and_then(|m| self.pending.take().map(|p| (m, p)))
        {
            ahead.log(&missing, now);
            match c.apply_config(config) {
                Ok(r) => tracing::info!(
                    services = r.services,
                    added = r.change.added.len(),
                    removed = r.change.removed.len(),
                    "configuration reloaded"
                ),
                Err(e) => tracing::error!("reload rejected, running configuration kept: {e}"),
            }
        }
        let generation = c.config_generation();
        let changed = generation != self.seen;
        self.seen = generation;
        changed
    }
}

/// The loop's watches over the workers: the watchdog (systemd), the bypass and kernel-drop
/// logs.
struct Watches {
    watchdog: Option<Watchdog>,
    bypass: BypassWatch,
    kernel: KernelDropWatch,
}

impl Watches {
    fn new(workers: usize) -> Watches {
        Watches {
            watchdog: Watchdog::from_env(workers),
            bypass: BypassWatch::default(),
            kernel: KernelDropWatch::default(),
        }
    }

    fn tick(&mut self, now: Instant, counters: &[WorkerCounters], view: &dyn DataplaneView) {
        if let Some(w) = self.watchdog.as_mut() {
            w.tick(now, counters);
        }
        let _ = self.bypass.tick(now, counters);
        let _ = self.kernel.tick(now, counters, view.kernel_counters());
    }
}

/// Logs, at most once a minute per worker, that a worker forwards new connections without a
/// connection-table entry (its table is full, or the flood guard's rate is spent): the
/// operator's signal that the table is too small or a flood is on (metric
/// `spillway_conntrack_bypassed_total`).
#[derive(Debug, Default)]
struct BypassWatch {
    seen: Vec<u64>,
    logged: Vec<Option<Instant>>,
}

impl BypassWatch {
    /// Logs what is due; returns the lines (tests).
    fn tick(&mut self, now: Instant, counters: &[WorkerCounters]) -> Vec<String> {
        let mut lines = Vec::new();
        self.seen.resize(counters.len(), 0);
        self.logged.resize(counters.len(), None);
        for (w, c) in counters.iter().enumerate() {
            let bypassed = c.ct_bypassed.get();
            let due =
                self.logged[w].is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60));
            if bypassed > self.seen[w] && due {
                let line = format!(
                    "worker {w}: {} new connections forwarded by the hash alone, without a \
                     connection-table entry (table {} of {} entries; full, or the flood guard's \
                     dataplane.conntrack_max_inserts_per_sec spent): at most one such line a \
                     minute per worker",
                    bypassed - self.seen[w],
                    c.ct_entries.get(),
                    c.ct_capacity.get()
                );
                tracing::warn!("{line}");
                lines.push(line);
                self.logged[w] = Some(now);
                self.seen[w] = bypassed;
            } else if due {
                self.seen[w] = bypassed;
            }
        }
        lines
    }
}

/// Logs, at most once a minute, that the exception path dropped frames (metrics
/// `spillway_dropped_packets_total{reason="kernel_busy"}`, `spillway_kernel_path_dropped_total`):
/// BGP, SSH or the health checks' replies may be lost with them.
#[derive(Debug, Default)]
struct KernelDropWatch {
    /// Seen so far: workers' queue full, the kernel interface refusing, the way back full.
    seen: [u64; 3],
    logged: Option<Instant>,
}

impl KernelDropWatch {
    /// Logs what is due; returns the line (tests).
    fn tick(
        &mut self,
        now: Instant,
        counters: &[WorkerCounters],
        kernel: Option<&KernelPathCounters>,
    ) -> Option<String> {
        let busy =
            counters.iter().map(|c| c.reason(Reason::Path(PathDrop::KernelBusy)).get()).sum();
        let (refused, back) =
            kernel.map_or((0, 0), |k| (k.to_kernel_dropped.get(), k.from_kernel_dropped.get()));
        let now_seen = [busy, refused, back];
        let due = self.logged.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60));
        if !due {
            return None;
        }
        let d: Vec<u64> =
            now_seen.iter().zip(self.seen).map(|(n, s)| n.saturating_sub(s)).collect();
        self.seen = now_seen;
        if d.iter().all(|&x| x == 0) {
            return None;
        }
        let line = format!(
            "exception path: {} frame(s) dropped (for the kernel, the workers' queues full: {}; \
             refused by the kernel interface: {}; from the kernel, the queue to the data port \
             full: {}): a flood to the node's address, or a kernel that does not keep up; BGP, \
             SSH and health-check replies may be lost with them (at most one such line a minute)",
            d.iter().sum::<u64>(),
            d[0],
            d[1],
            d[2]
        );
        tracing::warn!("{line}");
        self.logged = Some(now);
        Some(line)
    }
}

/// Locks the controller. A panic while it was held already aborted the process (release
/// builds abort on panic), so a poisoned lock only happens in tests: keep going.
pub fn lock(c: &Mutex<Controller>) -> MutexGuard<'_, Controller> {
    c.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Every backend's next hop, to resolve before traffic needs it.
pub fn next_hops(c: &Controller, node: &Node) -> Vec<Addr> {
    c.state().model().backends().filter_map(|(k, _, _)| node.next_hop(&k.endpoint.addr)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bypassing_is_logged_at_most_once_a_minute_per_worker_with_the_count_since() {
        let counters = [WorkerCounters::new(), WorkerCounters::new()];
        let mut w = BypassWatch::default();
        let t0 = Instant::now();
        assert!(w.tick(t0, &counters).is_empty());
        counters[1].ct_bypassed.set(500);
        counters[1].ct_capacity.set(65536);
        counters[1].ct_entries.set(65536);
        let lines = w.tick(t0 + Duration::from_secs(1), &counters);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].starts_with("worker 1: 500 new connections"), "{}", lines[0]);
        assert!(lines[0].contains("table 65536 of 65536 entries"), "{}", lines[0]);
        // More within the minute: nothing; after it, the total since the last line.
        counters[1].ct_bypassed.set(900);
        assert!(w.tick(t0 + Duration::from_secs(30), &counters).is_empty());
        counters[1].ct_bypassed.set(1200);
        let lines = w.tick(t0 + Duration::from_secs(62), &counters);
        assert!(lines[0].starts_with("worker 1: 700 new connections"), "{}", lines[0]);
        // Quiet when nothing more is bypassed.
        assert!(w.tick(t0 + Duration::from_secs(200), &counters).is_empty());
    }

    #[test]
    fn exception_path_drops_are_logged_at_most_once_a_minute_with_their_causes() {
        let counters = [WorkerCounters::new(), WorkerCounters::new()];
        let kernel = KernelPathCounters::default();
        let mut w = KernelDropWatch::default();
        let t0 = Instant::now();
        assert_eq!(w.tick(t0, &counters, Some(&kernel)), None);
        counters[0].reason(Reason::Path(PathDrop::KernelBusy)).add(700);
        counters[1].reason(Reason::Path(PathDrop::KernelBusy)).add(300);
        kernel.to_kernel_dropped.add(5);
        let line = w.tick(t0 + Duration::from_secs(1), &counters, Some(&kernel)).expect("a line");
        assert!(line.starts_with("exception path: 1005 frame(s) dropped"), "{line}");
        assert!(line.contains("queues full: 1000; refused by the kernel interface: 5; "), "{line}");
        kernel.from_kernel_dropped.add(2);
        assert_eq!(w.tick(t0 + Duration::from_secs(30), &counters, Some(&kernel)), None);
        let line = w.tick(t0 + Duration::from_secs(61), &counters, Some(&kernel)).expect("due");
        assert!(line.starts_with("exception path: 2 frame(s) dropped"), "{line}");
        assert!(line.contains("to the data port full: 2)"), "{line}");
        assert_eq!(w.tick(t0 + Duration::from_secs(200), &counters, None), None);
    }
}
