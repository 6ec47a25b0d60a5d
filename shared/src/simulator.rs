//! The what-if simulator: the real decision code on a virtual clock.
//!
//! A [`Simulator`] holds a [`PolicyState`], the snapshot it last built, one conntrack
//! [`Shard`] and a virtual clock. Steps are packets, time advances, health changes and model
//! replacements; every packet goes through [`decide`] exactly as a worker's would, and the
//! answer says which backend, why, and what eligible set the packet saw. `spillwayctl
//! simulate` and the scenario tests drive it.

use crate::addr::Addr;
use crate::advanced::{Load, Topology};
use crate::conntrack::Shard;
use crate::decide::{decide, Decision};
use crate::eligible::EligibleKind;
use crate::flow::{proto, tcp_flags, PacketInfo};
use crate::model::{BackendKey, Endpoint, Model, Ports, RuleDest, RuleProtocol, ZoneId};
use crate::snapshot::Snapshot;
use crate::state::{ModelChange, PolicyState, StateError};
use crate::sync::{self, Examined, Installed, PeerEntry, PeerIndex, Removed};
use crate::time::Time;
use std::time::Duration;

/// The eligible set a packet saw (for every packet that matched a service).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EligibleView {
    /// FO-7 kind of the original set.
    pub kind: EligibleKind,
    /// ZA-2 predicate.
    pub zonal_match: bool,
    /// Size of the final set the hash chooses from.
    pub size: usize,
}

/// The result of one packet step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The decision, as a worker would have made it.
    pub decision: Decision,
    /// The matched service's name.
    pub service: Option<String>,
    /// The chosen backend.
    pub backend: Option<Endpoint>,
    /// The eligible set at that moment.
    pub eligible: Option<EligibleView>,
    /// For a QUIC short-header packet of a service with QUIC-LB: what its destination
    /// connection ID says (QL-3), whether or not the packet needed it.
    pub quic: Option<crate::explain::QuicDecode>,
}

/// Default conntrack capacity of a simulator shard.
pub const DEFAULT_SIM_CAPACITY: usize = 1 << 16;

/// The decision core on a virtual clock.
#[derive(Debug)]
pub struct Simulator {
    state: PolicyState,
    snapshot: Snapshot,
    shard: Shard,
    now: Time,
    /// Connections opened by [`Simulator::traffic`] and still held.
    live: Vec<LiveFlow>,
    /// Flows generated so far (each gets a distinct source address and port).
    flows: u64,
}

/// A simulated connection held until `until`.
#[derive(Clone, Copy, Debug)]
struct LiveFlow {
    until: Time,
    service: u16,
    slot: u16,
    client: Option<ZoneId>,
}

/// Why a traffic step could not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// No zone of that name.
    #[error("unknown zone {0:?}")]
    UnknownZone(String),
    /// The zone has no client subnet to take source addresses from.
    #[error("zone {0:?} has no client subnet")]
    NoClientSubnet(String),
    /// No such service, or it has no forwarding rule to send to.
    #[error("no service {0:?} with a forwarding rule")]
    NoService(String),
}

/// One source of a traffic step: new connections per second from a client zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrafficSource {
    /// Client zone name (source addresses come from its first client subnet).
    pub zone: String,
    /// New connections per second.
    pub rate: u32,
}

/// A traffic step: several zones at once, for `seconds`, each connection held `hold_secs`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrafficPlan {
    /// The service to send to (its first forwarding rule); `None`: the model's first service.
    pub service: Option<String>,
    /// The sources.
    pub sources: Vec<TrafficSource>,
    /// Duration in whole seconds (one control interval each).
    pub seconds: u32,
    /// How long each connection stays open (counts as tracked load), in seconds.
    pub hold_secs: u32,
}

/// What one group received in one interval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupTraffic {
    /// Group name.
    pub group: String,
    /// Its zone's name.
    pub zone: String,
    /// New connections in the interval.
    pub new_connections: u64,
    /// Connections held at the end of the interval (from every traffic step so far).
    pub live_connections: u64,
    /// New connections by client zone name (`"-"`: clients without a zone), zones in model
    /// order, only non-zero counts.
    pub from_zones: Vec<(String, u64)>,
}

/// One control interval (one virtual second) of a traffic step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrafficInterval {
    /// Virtual time at its start.
    pub start: Time,
    /// New connections dropped (no eligible backend).
    pub dropped: u64,
    /// Per group of the service, in configuration order.
    pub groups: Vec<GroupTraffic>,
}

/// The result of a traffic step: per-group connection counts per interval.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrafficReport {
    /// The service the traffic went to.
    pub service: String,
    /// One entry per second.
    pub intervals: Vec<TrafficInterval>,
}

impl TrafficReport {
    /// New connections to `group` over intervals `range`.
    pub fn new_connections(&self, group: &str, range: std::ops::Range<usize>) -> u64 {
        self.intervals[range]
            .iter()
            .flat_map(|i| &i.groups)
            .filter(|g| g.group == group)
            .map(|g| g.new_connections)
            .sum()
    }

    /// New connections from client zone `zone` to `group` over intervals `range`.
    pub fn from_zone(&self, group: &str, zone: &str, range: std::ops::Range<usize>) -> u64 {
        self.intervals[range]
            .iter()
            .flat_map(|i| &i.groups)
            .filter(|g| g.group == group)
            .flat_map(|g| &g.from_zones)
            .filter(|(z, _)| z == zone)
            .map(|(_, n)| *n)
            .sum()
    }

    /// Group names in configuration order.
    pub fn groups(&self) -> Vec<String> {
        self.intervals
            .first()
            .map(|i| i.groups.iter().map(|g| g.group.clone()).collect())
            .unwrap_or_default()
    }
}

impl Simulator {
    /// A simulator over `model`; every backend starts healthy, the clock at zero.
    pub fn new(model: Model) -> Result<Simulator, StateError> {
        Simulator::with_capacity(model, DEFAULT_SIM_CAPACITY)
    }

    /// Same, with a conntrack shard of `capacity` entries.
    pub fn with_capacity(model: Model, capacity: usize) -> Result<Simulator, StateError> {
        let mut state = PolicyState::new(true);
        state.apply_model(model, Time::ZERO)?;
        let snapshot = state.snapshot(Time::ZERO);
        Ok(Simulator {
            state,
            snapshot,
            shard: Shard::with_capacity(capacity),
            now: Time::ZERO,
            live: Vec::new(),
            flows: 0,
        })
    }

    /// Set the locality topology (section 7) and publish a new snapshot.
    pub fn set_topology(&mut self, topology: Topology) {
        self.state.set_topology(topology);
        self.rebuild();
    }

    /// `rate` new connections per second from client zone `from_zone` to the model's first
    /// service, for `seconds`, each held `hold_secs` (see [`Simulator::run_traffic`]).
    pub fn traffic(
        &mut self,
        from_zone: &str,
        rate: u32,
        seconds: u32,
        hold_secs: u32,
    ) -> Result<TrafficReport, SimError> {
        self.run_traffic(&TrafficPlan {
            service: None,
            sources: vec![TrafficSource { zone: from_zone.to_string(), rate }],
            seconds,
            hold_secs,
        })
    }

    /// Run a traffic step on virtual time. Every second, each source opens `rate` new
    /// connections (TCP SYNs, or UDP for a UDP rule) from distinct source addresses and ports
    /// of its zone's client subnet, evenly spaced over the second, each through [`decide`].
    /// At the end of each second the control loop runs as the daemon's would: per group of
    /// every advanced service, the new connections of the second (as a rate) and the
    /// connections still held; per client zone the same; then
    /// [`PolicyState::advance_load`] and a new snapshot.
    pub fn run_traffic(&mut self, plan: &TrafficPlan) -> Result<TrafficReport, SimError> {
        let model = self.state.model().clone();
        let svc_name =
            plan.service.clone().or_else(|| model.services.first().map(|s| s.name.clone()));
        let Some(svc) =
            svc_name.as_ref().and_then(|n| model.services.iter().find(|s| &s.name == n))
        else {
            return Err(SimError::NoService(svc_name.unwrap_or_default()));
        };
        let Some(rule) = svc.rules.first() else {
            return Err(SimError::NoService(svc.name.clone()));
        };
        let dst = match rule.dest {
            RuleDest::Vip(a) => a,
            RuleDest::Prefix(p) => p.addr(),
        };
        let (ip_proto, dport) = match (&rule.protocol, &rule.ports) {
            (RuleProtocol::Udp, Ports::List(l)) => (proto::UDP, l.first().map_or(53, |r| r.0)),
            (RuleProtocol::Udp, Ports::All) => (proto::UDP, 53),
            (_, Ports::List(l)) => (proto::TCP, l.first().map_or(80, |r| r.0)),
            (_, Ports::All) => (proto::TCP, 80),
        };
        let mut sources = Vec::new();
        for src in &plan.sources {
            let zid =
                model.zone_id(&src.zone).ok_or_else(|| SimError::UnknownZone(src.zone.clone()))?;
            let subnet = model
                .client_subnets
                .iter()
                .find(|cs| cs.zone == Some(zid))
                .ok_or_else(|| SimError::NoClientSubnet(src.zone.clone()))?;
            sources.push((subnet.prefix, src.rate));
        }
        let sid = self.state.service_id(&svc.name).unwrap_or(0);
        let zone_label = |z: Option<ZoneId>| {
            z.and_then(|z| model.zones.get(usize::from(z)))
                .map_or_else(|| "-".to_string(), |z| z.name.clone())
        };
        let mut report = TrafficReport { service: svc.name.clone(), intervals: Vec::new() };
        for _ in 0..plan.seconds {
            let start = self.now;
            // Events: (offset in ms, source index, sequence).
            let mut events: Vec<(u64, usize, u32)> = Vec::new();
            for (si, &(_, rate)) in sources.iter().enumerate() {
                for k in 0..rate {
                    events.push((u64::from(k) * 1000 / u64::from(rate), si, k));
                }
            }
            events.sort_unstable();
            let mut new_by: hashbrown::HashMap<(u16, u16, Option<ZoneId>), u64> =
                hashbrown::HashMap::new();
            let mut dropped = 0;
            for (offset, si, _) in events {
                self.now = start + Duration::from_millis(offset);
                let src = flow_source(sources[si].0, self.flows);
                let sport = flow_port(sources[si].0, self.flows);
                self.flows += 1;
                let p = PacketInfo {
                    src,
                    dst,
                    proto: ip_proto,
                    sport,
                    dport,
                    tcp_flags: if ip_proto == proto::TCP { tcp_flags::SYN } else { 0 },
                    ..PacketInfo::default()
                };
                let client = self.snapshot.client_zone(src);
                let d = decide(&p, &self.snapshot, &mut self.shard, self.now);
                match d.backend() {
                    Some(slot) => {
                        *new_by.entry((d.service, slot, client)).or_default() += 1;
                        self.live.push(LiveFlow {
                            until: self.now + Duration::from_secs(u64::from(plan.hold_secs)),
                            service: d.service,
                            slot,
                            client,
                        });
                    }
                    None => dropped += 1,
                }
            }
            self.now = start + Duration::from_secs(1);
            let end = self.now;
            self.live.retain(|f| f.until > end);
            // Report for the plan's service.
            let group_of = |slot: u16| self.snapshot.backend(slot).map(|b| b.group.clone());
            let mut groups = Vec::new();
            for g in &svc.groups {
                let mut from: Vec<(Option<ZoneId>, u64)> = Vec::new();
                for (&(s, slot, client), &n) in &new_by {
                    if s == sid && group_of(slot).as_deref() == Some(g.name.as_str()) {
                        match from.iter_mut().find(|(c, _)| *c == client) {
                            Some(e) => e.1 += n,
                            None => from.push((client, n)),
                        }
                    }
                }
                from.sort_by_key(|(c, _)| c.map_or(u32::MAX, u32::from));
                let live = self
                    .live
                    .iter()
                    .filter(|f| {
                        f.service == sid && group_of(f.slot).as_deref() == Some(g.name.as_str())
                    })
                    .count() as u64;
                groups.push(GroupTraffic {
                    group: g.name.clone(),
                    zone: zone_label(Some(g.zone)),
                    new_connections: from.iter().map(|(_, n)| n).sum(),
                    live_connections: live,
                    from_zones: from.into_iter().map(|(c, n)| (zone_label(c), n)).collect(),
                });
            }
            report.intervals.push(TrafficInterval { start, dropped, groups });
            // The control loop: feed every advanced service's measured load, recompute.
            for s in model.services.iter().filter(|s| s.advanced.is_some()) {
                let Some(id) = self.state.service_id(&s.name) else { continue };
                for g in &s.groups {
                    let mut load = Load::default();
                    for (&(sv, slot, _), &n) in &new_by {
                        if sv == id && group_of(slot).as_deref() == Some(g.name.as_str()) {
                            load.rate += n as f64;
                        }
                    }
                    load.connections = self
                        .live
                        .iter()
                        .filter(|f| {
                            f.service == id && group_of(f.slot).as_deref() == Some(g.name.as_str())
                        })
                        .count() as f64;
                    self.state.set_group_load(&s.name, &g.name, load);
                }
                let clients: Vec<Option<ZoneId>> = (0..model.zones.len())
                    .map(|z| ZoneId::try_from(z).ok())
                    .chain(std::iter::once(None))
                    .collect();
                for client in clients {
                    let rate: u64 = new_by
                        .iter()
                        .filter(|(&(sv, _, c), _)| sv == id && c == client)
                        .map(|(_, &n)| n)
                        .sum();
                    let conns =
                        self.live.iter().filter(|f| f.service == id && f.client == client).count();
                    let name = client.and_then(|z| model.zones.get(usize::from(z)));
                    self.state.set_client_load(
                        &s.name,
                        name.map(|z| z.name.as_str()),
                        Load { rate: rate as f64, connections: conns as f64 },
                    );
                }
            }
            self.state.advance_load(self.now);
            self.rebuild();
        }
        Ok(report)
    }

    /// Run one packet through [`decide`].
    pub fn packet(&mut self, p: &PacketInfo) -> Outcome {
        self.packet_with_payload(p, &[])
    }

    /// Run one packet with its transport payload (a UDP datagram: the QUIC header a service
    /// with QUIC-LB routes by, QL-3) through the decision.
    pub fn packet_with_payload(&mut self, p: &PacketInfo, payload: &[u8]) -> Outcome {
        let prep = crate::decide::prepare(p, &self.snapshot);
        let decision = crate::decide::decide_with_payload(
            p,
            &prep,
            &self.snapshot,
            &mut self.shard,
            self.now,
            payload,
        );
        let svc = self.snapshot.service(decision.service);
        let eligible = svc.map(|s| {
            let c = s.choice(self.snapshot.client_zone(p.src));
            EligibleView { kind: c.kind, zonal_match: c.zonal_match, size: c.members.len() }
        });
        let quic = match (svc, crate::wire::quic::parse(payload)) {
            (Some(s), Ok(crate::wire::quic::QuicHeader::Short { dcid_and_rest }))
                if !p.icmp_error =>
            {
                crate::explain::quic_decode(dcid_and_rest, s, &self.snapshot, p.proto, self.now)
            }
            _ => None,
        };
        Outcome {
            decision,
            service: svc.map(|s| s.name.to_string()),
            backend: decision.backend().and_then(|b| self.snapshot.backend(b)).map(|b| b.endpoint),
            eligible,
            quic,
        }
    }

    /// Advance the virtual clock.
    pub fn advance(&mut self, d: Duration) {
        self.now = self.now + d;
    }

    /// The virtual time.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Set one backend's health and publish a new snapshot.
    pub fn set_health(&mut self, key: &BackendKey, healthy: bool) {
        self.state.set_health(key, healthy);
        self.rebuild();
    }

    /// Set the health of every backend with address `addr` (in any service); returns how
    /// many backends that was.
    pub fn set_health_by_addr(&mut self, addr: Addr, healthy: bool) -> usize {
        let keys: Vec<BackendKey> = self
            .state
            .model()
            .backends()
            .filter(|(k, _, _)| k.endpoint.addr == addr)
            .map(|(k, _, _)| k)
            .collect();
        for k in &keys {
            self.state.set_health(k, healthy);
        }
        self.rebuild();
        keys.len()
    }

    /// Replace the model (a reload) and publish a new snapshot.
    pub fn replace_model(&mut self, model: Model) -> Result<ModelChange, StateError> {
        let change = self.state.apply_model(model, self.now)?;
        self.rebuild();
        Ok(change)
    }

    /// Remove one endpoint from a service (a reload without it).
    pub fn remove_backend(&mut self, service: &str, addr: Addr) -> Result<ModelChange, StateError> {
        let mut m = self.state.model().clone();
        for s in m.services.iter_mut().filter(|s| s.name == service) {
            for g in &mut s.groups {
                g.endpoints.retain(|e| e.addr != addr);
            }
        }
        self.replace_model(m)
    }

    /// Add one endpoint to a group of a service (a reload with it).
    pub fn add_backend(
        &mut self,
        service: &str,
        group: &str,
        endpoint: Endpoint,
    ) -> Result<ModelChange, StateError> {
        let mut m = self.state.model().clone();
        for s in m.services.iter_mut().filter(|s| s.name == service) {
            for g in s.groups.iter_mut().filter(|g| g.name == group) {
                g.endpoints.push(endpoint);
            }
        }
        self.replace_model(m)
    }

    /// Change the policy state (an operator action, say) and publish a new snapshot.
    pub fn with_state(&mut self, f: impl FnOnce(&mut PolicyState)) {
        f(&mut self.state);
        self.rebuild();
    }

    /// One whole scan of this instance's own entries, as a worker's refresh makes it (FS-1,
    /// FS-8): the entries at risk (marked shared), and the removals of the shared entries
    /// that left the table, changed or are no longer at risk. The peers' copies it holds are
    /// sent by their owners.
    pub fn sync_scan(&mut self) -> SyncScan {
        let mut out = SyncScan::default();
        let snap = &self.snapshot;
        self.shard.take_departed(|key, value| out.removes.push(sync::departure(key, &value, snap)));
        let found: Vec<_> = self.shard.iter(self.now).filter(|(_, e)| !e.value.is_copy()).collect();
        for (slot, e) in found {
            match sync::examine(&e.key, &e.value, e.idle_ms, snap, self.now) {
                Examined::Share(p) => {
                    self.shard.set_flags(slot, sync::shared_flags(&e.value, true));
                    out.shares.push(p);
                }
                Examined::Unshare(p) => {
                    self.shard.set_flags(slot, sync::shared_flags(&e.value, false));
                    out.removes.push(p);
                }
                Examined::Nothing => {}
            }
        }
        out
    }

    /// This instance's own entries at risk, as its peers receive them at a refresh: the shares
    /// of [`Simulator::sync_scan`].
    pub fn entries_at_risk(&mut self) -> Vec<PeerEntry> {
        self.sync_scan().shares
    }

    /// Store peers' entries in this instance's table (FS-2, FS-4): what became of each.
    pub fn install_peer_entries(&mut self, entries: &[PeerEntry]) -> Vec<Installed> {
        let index = PeerIndex::of(&self.snapshot);
        entries
            .iter()
            .map(|e| sync::install(&mut self.shard, e, &index, &self.snapshot, self.now))
            .collect()
    }

    /// Apply peers' removals to this instance's table (FS-8): what became of each.
    pub fn apply_peer_removals(&mut self, removes: &[PeerEntry]) -> Vec<Removed> {
        let index = PeerIndex::of(&self.snapshot);
        removes
            .iter()
            .map(|e| match sync::localize_removal(e, &index) {
                Some(r) => sync::remove(&mut self.shard, &r, self.now),
                None => Removed::NotHeld,
            })
            .collect()
    }

    /// Rebuild the snapshot at the current virtual time (e.g. after [`Self::advance`]).
    pub fn rebuild(&mut self) {
        self.snapshot = self.state.snapshot(self.now);
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    /// The conntrack shard.
    pub fn shard(&self) -> &Shard {
        &self.shard
    }

    /// The policy state.
    pub fn state(&self) -> &PolicyState {
        &self.state
    }
}

/// The source address of flow `n` from `prefix`: host `1 + n mod hosts`.
fn flow_source(prefix: crate::addr::Prefix, n: u64) -> Addr {
    let hosts = host_count(prefix);
    let mut a = prefix.addr();
    let mut carry = 1 + n % hosts;
    for b in a.0.iter_mut().rev() {
        let v = u64::from(*b) + (carry & 0xff);
        *b = (v & 0xff) as u8;
        carry = (carry >> 8) + (v >> 8);
        if carry == 0 {
            break;
        }
    }
    a
}

/// The source port of flow `n` from `prefix`: distinct for the first `hosts x 60000` flows.
fn flow_port(prefix: crate::addr::Prefix, n: u64) -> u16 {
    1024 + u16::try_from((n / host_count(prefix)) % 60_000).unwrap_or(0)
}

fn host_count(prefix: crate::addr::Prefix) -> u64 {
    let host_bits = u32::from(prefix.addr().family_bits().saturating_sub(prefix.len()));
    if host_bits >= 16 {
        65_534
    } else if host_bits <= 1 {
        1
    } else {
        (1u64 << host_bits) - 2
    }
}

/// What one scan of [`Simulator::sync_scan`] tells the peers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncScan {
    /// Entries at risk (FS-1).
    pub shares: Vec<PeerEntry>,
    /// Removals (FS-8).
    pub removes: Vec<PeerEntry>,
}
