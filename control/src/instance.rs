//! One instance of a fleet: when it serves, which VIPs it announces, how it leaves (the
//! `announce:` section's state and decisions; connection-state sync is [`crate::sync`]).
//!
//! Several Spillway instances sit behind routers that spread flows over them with ECMP; each
//! instance tells its routing daemon (BIRD) which VIPs to attract by keeping their host routes
//! in a kernel table ([`crate::netlink::RouteTable`]). This module decides that set:
//!
//! - **Phase** ([`Phase`]): `starting` until the instance is ready (every worker polling, the
//!   data port's link up, every health check's verdict settled: `crate::announcer::readiness`),
//!   then `serving`;
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
//! [`crate::announcer`] runs the loop that applies this: it evaluates the phase and the wanted
//! set, keeps the route table in step and checks that BIRD answers. This module is the state
//! and the decision alone (no I/O).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use spillway_api::types::BirdStatus;
use spillway_core::addr::Addr;
use spillway_core::eligible::EligibleKind;
use spillway_core::snapshot::Snapshot;

use crate::config::{AnnounceMode, Config};

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
        let want = match s.announce_mode() {
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
        .filter(|s| s.announce_mode() != AnnounceMode::Never)
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
    pub(crate) wanted: BTreeMap<Addr, Vec<String>>,
    pub(crate) announced: BTreeSet<Addr>,
    pub(crate) route_errors: u64,
    pub(crate) route_updates: u64,
    pub(crate) last_error: Option<String>,
    pub(crate) bird: Option<BirdStatus>,
    forwarded: u64,
    last_traffic: Instant,
    /// Since when nothing is announced because the instance is not serving.
    withdrawn_since: Option<Instant>,
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
            route_errors: 0,
            route_updates: 0,
            last_error: None,
            bird: None,
            forwarded: 0,
            last_traffic: now,
            withdrawn_since: Some(now),
        }
    }

    /// True once the instance has been ready (it stays so).
    pub fn is_ready(&self) -> bool {
        self.ready
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
            if phase == Phase::Serving {
                self.withdrawn_since = None;
            } else if self.phase == Phase::Serving {
                self.withdrawn_since = Some(now);
            }
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

    /// How long the instance has not been serving (drained, stopping or still starting);
    /// `None` while it serves.
    pub fn withdrawn_for(&self, now: Instant) -> Option<Duration> {
        self.withdrawn_since.map(|t| now.saturating_duration_since(t))
    }

    /// How long the instance has been in its phase.
    pub fn in_phase_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.phase_since)
    }

    /// The VIPs wanted now (and by which services).
    pub fn wanted(&self) -> &BTreeMap<Addr, Vec<String>> {
        &self.wanted
    }

    /// The VIPs the route table holds (as of the last update that worked).
    pub fn announced(&self) -> &BTreeSet<Addr> {
        &self.announced
    }

    /// Updates of the route table that failed, updates that worked, the last error (cleared
    /// by an update that works).
    pub fn route_updates(&self) -> (u64, u64, Option<&str>) {
        (self.route_errors, self.route_updates, self.last_error.as_deref())
    }

    /// What BIRD's socket said last (`None` without `announce.bird_socket`).
    pub fn bird(&self) -> Option<&BirdStatus> {
        self.bird.as_ref()
    }

    /// What readiness still waits for.
    pub fn waiting_for(&self) -> Option<&str> {
        self.waiting_for.as_deref()
    }

    /// Drained or stopping, and no packet forwarded for `quiet_after` (nor announced for as
    /// long): the routers have moved the traffic away.
    pub fn traffic_stopped(&self, now: Instant, quiet_after: Duration) -> bool {
        self.phase != Phase::Starting
            && self.quiet_for(now) >= quiet_after
            && self.withdrawn_for(now).is_some_and(|w| w >= quiet_after)
    }
}
