//! One instance of a fleet: when it serves, which VIPs it announces, how it leaves.
//!
//! Several Spillway instances sit behind routers that spread flows over them with ECMP; each
//! instance tells its routing daemon (BIRD) which VIPs to attract by keeping their host routes
//! in a kernel table ([`crate::netlink::RouteTable`]). This module decides that set:
//!
//! - **Phase** ([`Phase`]): `starting` until the instance is ready (every worker polling, the
//!   data port's link up, a first result of every health check in), then `serving`;
//!   `drained` while an operator has drained it (`spillwayctl drain-instance`); `stopping`
//!   from SIGTERM on. Only a serving instance announces anything.
//! - **Per VIP** ([`wanted`]): a serving instance announces a VIP while one of its services
//!   wants it: `announce: when_healthy` (the default) while the service has a healthy backend
//!   in its eligible set (not the all-unhealthy fallback, not empty), `always` regardless,
//!   `never` not at all.
//! - **Leaving**: drained or stopping, every VIP is withdrawn but packets that still arrive
//!   are forwarded as before; [`Instance::quiet_for`] says how long no packet has been
//!   forwarded, which is how `drain-instance --wait` and SIGTERM know the routers have moved
//!   the traffic away.
//!
//! [`spawn`] runs the loop on the control plane's runtime: it evaluates the phase and the
//! wanted set every [`PERIOD`], syncs the route table when they change (and every
//! [`RESYNC`] anyway, so a route someone deleted comes back), retries after an error, and
//! checks that BIRD answers on its control socket when `announce.bird_socket` is set. An error
//! never stops forwarding: it is logged, counted and shown in the status until a sync works.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use spillway_core::addr::Addr;
use spillway_core::counters::Reason;
use spillway_core::eligible::EligibleKind;
use spillway_core::snapshot::Snapshot;

pub use crate::api::types::BirdStatus;
use crate::api::types::InstanceReply;
use crate::config::Config;
use crate::controller::Controller;
use crate::netlink::RouteTable;
use crate::view::DataplaneView;

/// How often the loop looks at the instance.
pub const PERIOD: Duration = Duration::from_millis(100);
/// How often the table is re-read and repaired even when nothing changed.
pub const RESYNC: Duration = Duration::from_secs(10);
/// How long after a failed sync the next try comes.
pub const RETRY: Duration = Duration::from_secs(2);
/// How often BIRD's control socket is checked.
pub const BIRD_PERIOD: Duration = Duration::from_secs(2);

/// `services[].announce`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnnounceMode {
    /// While the service has a healthy backend in its eligible set.
    WhenHealthy,
    /// Whenever the instance serves.
    Always,
    /// Never.
    Never,
}

impl AnnounceMode {
    /// The configured mode (validated); `when_healthy` when not set.
    pub fn of(s: Option<&str>) -> AnnounceMode {
        match s {
            Some("always") => AnnounceMode::Always,
            Some("never") => AnnounceMode::Never,
            _ => AnnounceMode::WhenHealthy,
        }
    }
}

/// Where the instance is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not ready yet: nothing announced.
    Starting,
    /// Ready: its VIPs are announced as their services want.
    Serving,
    /// Drained by an operator: nothing announced, still forwarding what arrives.
    Drained,
    /// Stopping (SIGTERM): nothing announced, forwarding until traffic stops or the grace
    /// period ends.
    Stopping,
}

impl Phase {
    /// Every phase (metric labels).
    pub const ALL: [Phase; 4] = [Phase::Starting, Phase::Serving, Phase::Drained, Phase::Stopping];

    /// The name in the API and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Serving => "serving",
            Phase::Drained => "drained",
            Phase::Stopping => "stopping",
        }
    }
}

/// The VIPs a serving instance should announce, each with the services that want it (a VIP
/// can front several services: one port each). Empty when not `serving`, or when the
/// configuration has no `announce:` section.
pub fn wanted(config: &Config, snap: &Snapshot, serving: bool) -> BTreeMap<Addr, Vec<String>> {
    let mut out: BTreeMap<Addr, Vec<String>> = BTreeMap::new();
    if !serving || config.announce.is_none() {
        return out;
    }
    for s in &config.services {
        let want = match AnnounceMode::of(s.announce.as_deref()) {
            AnnounceMode::Never => false,
            AnnounceMode::Always => true,
            AnnounceMode::WhenHealthy => snap
                .services()
                .find(|v| *v.name == *s.name)
                .is_some_and(|v| has_healthy(v.eligible.kind)),
        };
        if !want {
            continue;
        }
        for vip in s.forwarding_rules.iter().filter_map(|r| r.vip.as_deref()) {
            if let Ok(ip) = vip.parse::<IpAddr>() {
                let names = out.entry(Addr::from(ip)).or_default();
                if !names.contains(&s.name) {
                    names.push(s.name.clone());
                }
            }
        }
    }
    out
}

/// True for an eligible set of healthy backends (not the all-unhealthy fallback, not empty).
fn has_healthy(kind: EligibleKind) -> bool {
    matches!(kind, EligibleKind::HealthyPrimary | EligibleKind::HealthyFailover)
}

/// Every VIP of the services that may announce (the metric shows each as 0 or 1).
pub fn announceable(config: &Config) -> BTreeSet<Addr> {
    if config.announce.is_none() {
        return BTreeSet::new();
    }
    config
        .services
        .iter()
        .filter(|s| AnnounceMode::of(s.announce.as_deref()) != AnnounceMode::Never)
        .flat_map(|s| s.forwarding_rules.iter().filter_map(|r| r.vip.as_deref()))
        .filter_map(|v| v.parse::<IpAddr>().ok().map(Addr::from))
        .collect()
}

/// The instance's fleet state, kept in the [`Controller`] (the API reads and changes it).
#[derive(Debug)]
pub struct Instance {
    ready: bool,
    drained: bool,
    stopping: Option<Instant>,
    phase_since: Instant,
    phase: Phase,
    waiting_for: Option<String>,
    wanted: BTreeMap<Addr, Vec<String>>,
    announced: BTreeSet<Addr>,
    sync_errors: u64,
    syncs: u64,
    last_error: Option<String>,
    bird: Option<BirdStatus>,
    forwarded: u64,
    last_traffic: Instant,
}

impl Instance {
    /// A starting instance.
    pub fn new(now: Instant) -> Instance {
        Instance {
            ready: false,
            drained: false,
            stopping: None,
            phase_since: now,
            phase: Phase::Starting,
            waiting_for: Some("the first look at the workers".into()),
            wanted: BTreeMap::new(),
            announced: BTreeSet::new(),
            sync_errors: 0,
            syncs: 0,
            last_error: None,
            bird: None,
            forwarded: 0,
            last_traffic: now,
        }
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    fn set_phase(&mut self, now: Instant) {
        let phase = if self.stopping.is_some() {
            Phase::Stopping
        } else if self.drained {
            Phase::Drained
        } else if !self.ready {
            Phase::Starting
        } else {
            Phase::Serving
        };
        if phase != self.phase {
            tracing::info!(from = self.phase.as_str(), to = phase.as_str(), "instance phase");
            self.phase = phase;
            self.phase_since = now;
        }
    }

    /// Records readiness: `None` when ready, else what it still waits for. Once ready it
    /// stays ready (a backend going down later withdraws its VIP, not the instance).
    pub fn set_waiting_for(&mut self, waiting: Option<String>, now: Instant) {
        if !self.ready {
            self.ready = waiting.is_none();
            self.waiting_for = waiting;
        }
        self.set_phase(now);
    }

    /// Drains (true) or undrains (false) the instance; returns the phase after.
    pub fn set_drained(&mut self, drained: bool, now: Instant) -> Phase {
        if self.drained != drained {
            tracing::info!(drained, "instance drain set by the operator");
        }
        self.drained = drained;
        self.set_phase(now);
        self.phase
    }

    /// Starts stopping (SIGTERM): withdraw everything, keep forwarding.
    pub fn begin_stop(&mut self, now: Instant) {
        self.stopping.get_or_insert(now);
        self.set_phase(now);
    }

    /// When the stop began.
    pub fn stopping_since(&self) -> Option<Instant> {
        self.stopping
    }

    /// Feeds the workers' total of forwarded packets; it moving is traffic arriving.
    pub fn note_forwarded(&mut self, total: u64, now: Instant) {
        if total != self.forwarded {
            self.forwarded = total;
            self.last_traffic = now;
        }
    }

    /// How long no packet has been forwarded.
    pub fn quiet_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.last_traffic)
    }

    /// How long the instance has been in its phase.
    pub fn in_phase_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.phase_since)
    }

    /// The VIPs wanted now (and by which services).
    pub fn wanted(&self) -> &BTreeMap<Addr, Vec<String>> {
        &self.wanted
    }

    /// The VIPs the route table holds (as of the last successful sync).
    pub fn announced(&self) -> &BTreeSet<Addr> {
        &self.announced
    }

    /// Syncs that failed, syncs that worked, the last error (cleared by a sync that works).
    pub fn sync_counts(&self) -> (u64, u64, Option<&str>) {
        (self.sync_errors, self.syncs, self.last_error.as_deref())
    }

    /// What BIRD's socket said last (`None` without `announce.bird_socket`).
    pub fn bird(&self) -> Option<&BirdStatus> {
        self.bird.as_ref()
    }

    /// What readiness still waits for.
    pub fn waiting_for(&self) -> Option<&str> {
        self.waiting_for.as_deref()
    }

    /// The status for the API (`fingerprints` from the snapshot, by the caller).
    pub fn status(&self, now: Instant, quiet_after: Duration) -> InstanceReply {
        let quiet = self.quiet_for(now);
        InstanceReply {
            phase: self.phase.as_str().to_owned(),
            in_phase_sec: self.in_phase_for(now).as_secs_f64(),
            waiting_for: self.waiting_for.clone(),
            quiet_for_sec: quiet.as_secs_f64(),
            traffic_stopped: self.phase != Phase::Serving
                && self.phase != Phase::Starting
                && quiet >= quiet_after
                && self.in_phase_for(now) >= quiet_after,
            wanted: self.wanted.iter().map(|(a, s)| (a.to_string(), s.clone())).collect(),
            announced: self.announced.iter().map(ToString::to_string).collect(),
            sync_errors: self.sync_errors,
            last_error: self.last_error.clone(),
            bird: self.bird.clone(),
            fingerprints: BTreeMap::new(),
        }
    }
}

/// The sum of every worker's forwarded packets.
pub fn forwarded(view: &dyn DataplaneView) -> u64 {
    (0..view.workers())
        .map(|w| {
            let c = view.counters(w);
            Reason::all().filter(|r| matches!(r, Reason::Forward(_))).map(|r| c.reason(r).get()).sum::<u64>()
        })
        .sum()
}

/// What readiness waits for, or `None` when the instance is ready: every worker's heartbeat
/// moved since `heartbeats` (read when the loop started), the data port's link is up, every
/// health check has a first result.
pub fn readiness(
    view: &dyn DataplaneView,
    heartbeats: &[u64],
    link_up: bool,
    controller: &Controller,
) -> Option<String> {
    let stalled: Vec<String> = (0..view.workers())
        .filter(|&w| view.counters(w).heartbeat.get() <= heartbeats.get(w).copied().unwrap_or(0))
        .map(|w| w.to_string())
        .collect();
    if !stalled.is_empty() {
        return Some(format!("worker(s) {} to poll", stalled.join(", ")));
    }
    if !link_up {
        return Some("the data port's link to come up".into());
    }
    let pending: Vec<String> = controller
        .health_status()
        .into_iter()
        .filter(|t| t.last_result.is_none())
        .map(|t| t.key.endpoint.addr.to_string())
        .collect();
    if !pending.is_empty() {
        return Some(format!("a first health result from {}", pending.join(", ")));
    }
    None
}

/// Asks BIRD's control socket for its greeting (`0001 BIRD 2.0.12 ready.`).
pub async fn probe_bird(path: &str) -> BirdStatus {
    use tokio::io::AsyncBufReadExt;
    let attempt = async {
        let stream = tokio::net::UnixStream::connect(path).await?;
        let mut line = String::new();
        tokio::io::BufReader::new(stream).read_line(&mut line).await?;
        Ok::<_, std::io::Error>(line)
    };
    match tokio::time::timeout(Duration::from_secs(1), attempt).await {
        Ok(Ok(line)) if line.starts_with("0001 ") => {
            BirdStatus { up: true, detail: line[5..].trim().to_owned() }
        }
        Ok(Ok(line)) => BirdStatus { up: false, detail: format!("unexpected greeting {line:?}") },
        Ok(Err(e)) => BirdStatus { up: false, detail: format!("{path}: {e}") },
        Err(_) => BirdStatus { up: false, detail: format!("{path}: no greeting within 1 s") },
    }
}

/// What the loop needs besides the controller and the view.
pub struct FleetOptions {
    /// The route table the VIPs go to (`None`: decide and report only, e.g. in tests).
    pub table: Option<RouteTable>,
    /// Whether the data port's link is up.
    pub link_up: Box<dyn Fn() -> bool + Send>,
}

impl std::fmt::Debug for FleetOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetOptions").field("table", &self.table).finish_non_exhaustive()
    }
}

/// Runs the instance's fleet loop on the current runtime until the runtime stops.
pub fn spawn(
    controller: Arc<Mutex<Controller>>,
    view: Arc<dyn DataplaneView>,
    options: FleetOptions,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(controller, view, options))
}

async fn run(controller: Arc<Mutex<Controller>>, view: Arc<dyn DataplaneView>, options: FleetOptions) {
    let heartbeats: Vec<u64> =
        (0..view.workers()).map(|w| view.counters(w).heartbeat.get()).collect();
    let mut applied: Option<BTreeSet<IpAddr>> = None;
    let mut next_sync = Instant::now();
    let mut next_bird = Instant::now();
    let bird_socket = {
        let c = controller.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        c.config().announce.as_ref().and_then(|a| a.bird_socket.clone())
    };
    let mut tick = tokio::time::interval(PERIOD);
    loop {
        tick.tick().await;
        let now = Instant::now();
        let want: BTreeSet<IpAddr> = {
            let mut c = controller.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let waiting = readiness(&*view, &heartbeats, (options.link_up)(), &c);
            let snap = c.snapshot();
            let total = forwarded(&*view);
            let serving;
            {
                let inst = c.instance_mut();
                inst.set_waiting_for(waiting, now);
                inst.note_forwarded(total, now);
                serving = inst.phase() == Phase::Serving;
            }
            let w = wanted(c.config(), &snap, serving);
            let set = w.keys().map(Addr::to_ip).collect();
            c.instance_mut().wanted = w;
            set
        };
        if let Some(path) = &bird_socket {
            if now >= next_bird {
                next_bird = now + BIRD_PERIOD;
                let status = probe_bird(path).await;
                let mut c = controller.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let inst = c.instance_mut();
                let was = inst.bird.as_ref().map(|b| b.up);
                if was != Some(status.up) {
                    if status.up {
                        tracing::info!(socket = %path, "BIRD answers: {}", status.detail);
                    } else {
                        tracing::error!(
                            socket = %path,
                            "BIRD does not answer ({}): the VIP routes stay in the table, but no \
                             router hears of them until it does; forwarding goes on",
                            status.detail
                        );
                    }
                }
                inst.bird = Some(status);
            }
        }
        let Some(table) = &options.table else {
            let mut c = controller.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            c.instance_mut().announced = want.iter().map(|ip| Addr::from(*ip)).collect();
            continue;
        };
        if applied.as_ref() == Some(&want) && now < next_sync {
            continue;
        }
        let result = table.sync(&want).await;
        let mut c = controller.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let inst = c.instance_mut();
        match result {
            Ok(report) => {
                for a in &report.added {
                    tracing::info!(vip = %a, table = table.table, "VIP announced");
                }
                for a in &report.removed {
                    tracing::info!(vip = %a, table = table.table, "VIP withdrawn");
                }
                if inst.last_error.take().is_some() {
                    tracing::info!(table = table.table, "the VIP route table is in sync again");
                }
                inst.syncs += 1;
                inst.announced = want.iter().map(|ip| Addr::from(*ip)).collect();
                applied = Some(want);
                next_sync = now + RESYNC;
            }
            Err(e) => {
                inst.sync_errors += 1;
                let msg = e.to_string();
                if inst.last_error.as_deref() != Some(msg.as_str()) {
                    tracing::error!(
                        table = table.table,
                        "cannot update the VIP route table ({msg}); forwarding goes on, retrying \
                         every {} s",
                        RETRY.as_secs()
                    );
                }
                inst.last_error = Some(msg);
                applied = None;
                next_sync = now + RETRY;
            }
        }
    }
}
