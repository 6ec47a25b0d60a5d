//! The immutable snapshot: everything a worker needs to decide, in flat tables.
//!
//! Built by [`crate::state::PolicyState::snapshot`] off the hot path, published by pointer
//! swap, read by workers once per burst. It holds the forwarding rules (exact VIPs and
//! next-hop prefixes, FR-1), the client-subnet table (ZA-1), every service's policy and its
//! precomputed choices (one Maglev table per client zone that has a zonal match, plus the
//! default one, CH-3), and the backend table indexed by stable slot (address, generation,
//! health, draining deadline). The data path only indexes: client zone -> choice -> table ->
//! backend slot.

use crate::addr::Addr;
use crate::eligible::{Eligible, EligibleKind};
use crate::flow::{FlowHasher, PacketInfo};
use crate::lpm::Lpm;
use crate::maglev::MaglevTable;
use crate::model::{Encap, Endpoint, Ports, RuleProtocol, ZoneId};
use crate::policy::{Affinity, Persistence, TrackingMode};
use crate::time::Time;
use hashbrown::HashMap;
use std::sync::Arc;

/// An immutable decision snapshot.
#[derive(Debug)]
pub struct Snapshot {
    /// Increases by one with every snapshot the policy state builds.
    pub generation: u64,
    /// CH-4 keyed hash for backend selection (identical on every instance).
    pub hasher: FlowHasher,
    /// Forwarding rules.
    pub rules: RuleTable,
    /// Services by id (`None` for ids of removed services).
    pub services: Vec<Option<ServiceView>>,
    /// Backends by slot.
    pub backends: Vec<BackendView>,
    /// Client subnets: source prefix -> compatible zone, or `None` (incompatible, ZA-1).
    pub client_zones: Lpm<Option<ZoneId>>,
    /// Zone names by id.
    pub zone_names: Vec<String>,
    /// Fleet sync: how much longer than its idle timeout a peer's copy lasts (FS-2,
    /// [`crate::model::Model::copy_grace_ms`]).
    pub copy_grace_ms: u64,
    /// The configuration the snapshot was built from, in one number
    /// ([`crate::model::Model::fingerprint`]):
    /// the same for the same configuration whatever the health verdicts (the table file is
    /// written and read under it).
    pub config_fingerprint: u64,
}

/// Where a backend slot stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendStatus {
    /// Configured.
    Active,
    /// Removed from the configuration; its entries stay valid until `deadline` (CD-3).
    Draining {
        /// The first instant at which its entries are invalid.
        deadline: Time,
    },
    /// Unused slot.
    Free,
}

/// One backend slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendView {
    /// Address and port.
    pub endpoint: Endpoint,
    /// Owning service id.
    pub service: u16,
    /// Generation of the slot: bumped each time the slot starts afresh (CD-4).
    pub gen: u16,
    /// Configured, draining or free.
    pub status: BackendStatus,
    /// Health as the policy sees it (probes plus overrides, HC-2).
    pub healthy: bool,
    /// Zone of its group.
    pub zone: ZoneId,
    /// True when its group is a failover group.
    pub failover: bool,
    /// Name of its group.
    pub group: Arc<str>,
}

impl BackendView {
    /// True while entries that point at this slot may still be valid at `now` (CD-2, CD-3).
    #[inline]
    pub fn is_live(&self, now: Time) -> bool {
        match self.status {
            BackendStatus::Active => true,
            BackendStatus::Draining { deadline } => now < deadline,
            BackendStatus::Free => false,
        }
    }
}

/// The reference a conntrack entry stores: slot and generation in one `u32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BackendRef {
    /// Slot in [`Snapshot::backends`].
    pub slot: u16,
    /// Generation of the slot when the entry was made.
    pub gen: u16,
}

impl BackendRef {
    /// Pack into the conntrack value.
    pub fn to_u32(self) -> u32 {
        (u32::from(self.slot) << 16) | u32::from(self.gen)
    }

    /// Unpack from the conntrack value.
    pub fn from_u32(v: u32) -> BackendRef {
        BackendRef { slot: (v >> 16) as u16, gen: (v & 0xffff) as u16 }
    }
}

/// A service as the data path sees it.
#[derive(Debug)]
pub struct ServiceView {
    /// Stable id (never reused within a process).
    pub id: u16,
    /// Name.
    pub name: Arc<str>,
    /// Session affinity: which tuple the backend-selection hash uses (SA-1..SA-4).
    pub affinity: Affinity,
    /// Both directions of a flow hash alike: the tuple is put in canonical order before hashing (SA-8).
    pub symmetric_hashing: bool,
    /// Tracking mode: what the tracking key holds (CT-1).
    pub tracking: TrackingMode,
    /// Its TCP and UDP packets are tracked by their 5-tuple as received
    /// ([`crate::flow::tracks_five_tuple`] of the three fields above): the data plane's short
    /// way for tracked flows applies.
    pub tracks_five_tuple: bool,
    /// Whether entries persist on a backend that became unhealthy (CP-1..CP-4).
    pub persistence: Persistence,
    /// CT-8: idle timeout in milliseconds.
    pub idle_timeout_ms: u64,
    /// How packets reach its backends.
    pub encap: Encap,
    /// FO-9 flush epoch: entries made under an older epoch are invalid.
    pub epoch: u32,
    /// The original eligible set A (section 3).
    pub eligible: Eligible,
    /// The choice for clients without a zonal match.
    pub default_choice: Arc<Choice>,
    /// The choice per client zone id; zones without a match share `default_choice`.
    pub zone_choices: Vec<Arc<Choice>>,
    /// Section 7: what the advanced load balancing computed (`None` without `advanced`).
    /// Then `zone_choices` holds one weighted choice per client zone (every region) and
    /// `default_choice` is the one for clients without a zone.
    pub advanced: Option<Arc<AdvancedView>>,
    /// Its identity across the instances of a fleet ([`crate::sync::service_identity`] of its
    /// name): how a peer's entry names it (FS-2).
    pub identity: u64,
    /// QUIC-LB: the backend slot each server ID names, per configuration, for its configured
    /// and draining backends (`None` without `quic_lb`).
    pub quic: Option<Arc<crate::quic_lb::Routes>>,
    /// FS-11: the choices in force before its tables last changed, while they still apply
    /// (`None` once they do not, or without fleet sync).
    pub previous: Option<Arc<PreviousChoices>>,
}

/// FS-11: a service's choices before its tables last changed, and until when a TCP packet
/// that finds no entry and opens no connection is given their backend.
#[derive(Debug)]
pub struct PreviousChoices {
    /// Packets are given their backend while `now < until`.
    pub until: Time,
    /// Entries whose backend they would not give are shared (FS-1) while `now < shared_until`:
    /// as long again, so that a peer whose tables changed a little later still finds them.
    pub shared_until: Time,
    /// As [`ServiceView::default_choice`] was.
    pub default_choice: Arc<Choice>,
    /// As [`ServiceView::zone_choices`] were.
    pub zone_choices: Vec<Arc<Choice>>,
}

impl PreviousChoices {
    /// The previous choice for a client in `zone` ([`ServiceView::choice`]).
    pub fn choice(&self, zone: Option<ZoneId>) -> &Choice {
        match zone.and_then(|z| self.zone_choices.get(usize::from(z))) {
            Some(c) => c,
            None => &self.default_choice,
        }
    }
}

/// Section 7 state of one service in a snapshot, for metrics, the admin API and the simulator.
#[derive(Clone, Debug, PartialEq)]
pub struct AdvancedView {
    /// AL-1..AL-4.
    pub algorithm: crate::model::Algorithm,
    /// The unit of capacities, demand and expected load.
    pub unit: crate::advanced::LoadUnit,
    /// AL-7 threshold (percent).
    pub failover_health_threshold: u8,
    /// Per group, in configuration order.
    pub groups: Vec<AdvancedGroupView>,
    /// Per client zone id, then one last entry for clients without a zone (`zone: None`).
    pub clients: Vec<AdvancedClientView>,
}

/// One group's capacity, health and load.
#[derive(Clone, Debug, PartialEq)]
pub struct AdvancedGroupView {
    /// Group name.
    pub name: Arc<str>,
    /// Zone id.
    pub zone: ZoneId,
    /// A preferred group: filled up to its capacity first, in latency order (AL-5).
    pub preferred: bool,
    /// Configured endpoints (operator-drained ones excluded).
    pub endpoints: usize,
    /// Healthy endpoints.
    pub healthy: usize,
    /// Healthy endpoints in the eligible set A (those the capacity counts).
    pub in_eligible: usize,
    /// Capacity in `unit` (infinite when unbounded; 0 when drained or empty).
    pub capacity: f64,
    /// AL-6: drained by auto capacity drain.
    pub auto_drained: bool,
    /// AL-7: fraction of its traffic the group keeps (`min(1, h / T)`).
    pub retained: f64,
    /// Load the published weights send it, from the smoothed demand (in `unit`).
    pub expected_load: f64,
    /// Smoothed measured load.
    pub measured: crate::advanced::GroupLoad,
}

impl AdvancedGroupView {
    /// Measured utilisation in the service's unit (0 when unbounded).
    pub fn utilisation(&self, unit: crate::advanced::LoadUnit) -> f64 {
        if self.capacity.is_finite() && self.capacity > 0.0 {
            self.measured.get(unit) / self.capacity
        } else {
            0.0
        }
    }
}

/// One client zone's demand and weights.
#[derive(Clone, Debug, PartialEq)]
pub struct AdvancedClientView {
    /// Client zone (`None`: clients without a zone).
    pub zone: Option<ZoneId>,
    /// Smoothed offered load (in `unit`).
    pub demand: f64,
    /// Published share of its new connections per group (what the table does), sums to 1
    /// (or 0 when nothing can take traffic and the choice falls back to A).
    pub weights: Vec<f64>,
    /// The latest computed target (may differ from `weights` by up to the hysteresis band).
    pub target: Vec<f64>,
}

impl ServiceView {
    /// The choice for a client in `zone` (`None`: incompatible client).
    #[inline]
    pub fn choice(&self, zone: Option<ZoneId>) -> &Choice {
        match zone.and_then(|z| self.zone_choices.get(usize::from(z))) {
            Some(c) => c,
            None => &self.default_choice,
        }
    }

    /// CP-1..CP-4: do entries of this protocol persist on a backend that became unhealthy?
    pub fn persists_on_unhealthy(&self, proto: u8) -> bool {
        use crate::flow::proto::{TCP, UDP};
        match self.persistence {
            Persistence::NeverPersist => false,
            Persistence::AlwaysPersist => proto == TCP || proto == UDP,
            Persistence::DefaultForProtocol => {
                proto == TCP
                    && (self.tracking == TrackingMode::PerConnection
                        || matches!(self.affinity, Affinity::None | Affinity::ClientIpPortProto))
            }
        }
    }
}

/// The final eligible set for one (service, client zone) and its table.
#[derive(Debug)]
pub struct Choice {
    /// FO-7 kind of the original set A.
    pub kind: EligibleKind,
    /// ZA-2 predicate.
    pub zonal_match: bool,
    /// True when a zonal match spilled to A (SPILL_CROSS_ZONE below its ratio).
    pub spilled: bool,
    /// The modified eligible set, sorted by slot.
    pub members: Vec<u16>,
    /// Weighted Maglev table over `members` (empty when `members` is).
    pub table: Arc<MaglevTable>,
}

impl Choice {
    /// True when `slot` is in the final set (CP-5).
    pub fn contains(&self, slot: u16) -> bool {
        self.members.binary_search(&slot).is_ok()
    }
}

/// The last rule match ([`Snapshot::service_for_cached`]): a burst's packets mostly go to a
/// few VIPs, and a packet like the one before skips the rule table's hash lookup.
#[derive(Clone, Copy, Debug)]
pub struct RuleCache<'s> {
    dst: Addr,
    proto: u8,
    /// The destination port, [`RuleCache::NO_PORT`] for a packet without one, or
    /// [`RuleCache::EMPTY`]'s value, which no packet has.
    port: u32,
    service: Option<&'s ServiceView>,
}

impl RuleCache<'_> {
    const NO_PORT: u32 = 1 << 16;
    /// Remembers nothing.
    pub const EMPTY: RuleCache<'static> =
        RuleCache { dst: Addr::UNSPECIFIED, proto: 0, port: u32::MAX, service: None };
}

/// Forwarding rules, most specific first (FR-1).
#[derive(Clone, Debug, Default)]
pub struct RuleTable {
    exact: HashMap<Addr, Vec<RuleEntry>>,
    prefixes: Lpm<Vec<RuleEntry>>,
}

/// One forwarding rule as matched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleEntry {
    /// Protocol.
    pub protocol: RuleProtocol,
    /// Ports.
    pub ports: Ports,
    /// Service id.
    pub service: u16,
}

impl RuleEntry {
    fn matches(&self, p: &PacketInfo) -> bool {
        use crate::flow::proto::{TCP, UDP};
        let proto_ok = match self.protocol {
            RuleProtocol::Tcp => p.proto == TCP,
            RuleProtocol::Udp => p.proto == UDP,
            RuleProtocol::L3Default => true,
        };
        proto_ok && self.ports.contains(p.has_ports().then_some(p.dport))
    }

    /// Sort key: named protocol before L3_DEFAULT, listed ports before ALL.
    fn specificity(&self) -> (u8, u8) {
        (u8::from(self.protocol == RuleProtocol::L3Default), u8::from(self.ports == Ports::All))
    }
}

impl RuleTable {
    /// Add a rule for an exact VIP.
    pub fn add_vip(&mut self, vip: Addr, rule: RuleEntry) {
        let v = self.exact.entry(vip).or_default();
        v.push(rule);
        v.sort_by_key(RuleEntry::specificity);
    }

    /// Add a next-hop rule for a destination prefix.
    pub fn add_prefix(&mut self, prefix: crate::addr::Prefix, rule: RuleEntry) {
        let mut v = self.prefixes.get(&prefix).cloned().unwrap_or_default();
        v.push(rule);
        v.sort_by_key(RuleEntry::specificity);
        self.prefixes.insert(prefix, v);
    }

    /// The service of the most specific rule matching `p` (FR-1): an exact VIP before any
    /// prefix, longer prefixes before shorter ones, and within one destination a named
    /// protocol before `L3_DEFAULT` and listed ports before ALL.
    #[inline]
    pub fn lookup(&self, p: &PacketInfo) -> Option<u16> {
        if let Some(rules) = self.exact.get(&p.dst) {
            if let Some(r) = rules.iter().find(|r| r.matches(p)) {
                return Some(r.service);
            }
        }
        if self.prefixes.is_empty() {
            return None;
        }
        self.prefixes
            .matches(p.dst)
            .find_map(|(_, rules)| rules.iter().find(|r| r.matches(p)).map(|r| r.service))
    }

    /// True when `a` is a configured VIP (the node answers ARP/ND and echo for it).
    pub fn is_vip(&self, a: &Addr) -> bool {
        self.exact.contains_key(a)
    }

    /// Every configured VIP.
    pub fn vips(&self) -> impl Iterator<Item = &Addr> {
        self.exact.keys()
    }
}

impl Snapshot {
    /// The service serving `p`, if any rule matches.
    #[inline]
    pub fn service_for(&self, p: &PacketInfo) -> Option<&ServiceView> {
        self.rules.lookup(p).and_then(|id| self.service(id))
    }

    /// [`Snapshot::service_for`], answered from `last` when `p` has the same destination,
    /// protocol and destination port as the packet `last` remembers (all a rule match
    /// depends on), else looked up and remembered. `last` must only ever be used with this
    /// snapshot: the data plane keeps one per burst.
    #[inline]
    pub fn service_for_cached<'s>(
        &'s self,
        p: &PacketInfo,
        last: &mut RuleCache<'s>,
    ) -> Option<&'s ServiceView> {
        let port = if p.has_ports() { u32::from(p.dport) } else { RuleCache::NO_PORT };
        if last.port != port || last.proto != p.proto || last.dst != p.dst {
            self.remember_rule(*p, port, last);
        }
        last.service
    }

    /// [`Snapshot::service_for_cached`] when `last` does not answer. Out of line, with the
    /// packet by value: the caller then keeps the packet's fields in registers (a reference
    /// here made every caller store them all first, for every packet).
    #[inline(never)]
    fn remember_rule<'s>(&'s self, p: PacketInfo, port: u32, last: &mut RuleCache<'s>) {
        *last = RuleCache { dst: p.dst, proto: p.proto, port, service: self.service_for(&p) };
    }

    /// The service with id `id`.
    #[inline]
    pub fn service(&self, id: u16) -> Option<&ServiceView> {
        self.services.get(usize::from(id)).and_then(Option::as_ref)
    }

    /// The client zone of a source address, if it is zonally compatible (ZA-1).
    #[inline]
    pub fn client_zone(&self, src: Addr) -> Option<ZoneId> {
        if self.client_zones.is_empty() {
            return None;
        }
        self.client_zones.lookup(src).copied().flatten()
    }

    /// The backend in `slot`.
    #[inline]
    pub fn backend(&self, slot: u16) -> Option<&BackendView> {
        self.backends.get(usize::from(slot))
    }

    /// Every backend slot and what it holds (live, draining or free), in slot order.
    pub fn backends(&self) -> impl Iterator<Item = (u16, &BackendView)> {
        (0..=u16::MAX).zip(&self.backends)
    }

    /// Services in id order.
    pub fn services(&self) -> impl Iterator<Item = &ServiceView> {
        self.services.iter().flatten()
    }

    /// A fingerprint of a service's consistent-hash tables (CH-1): the backend address and port
    /// owning each position of its default table, then of each client zone's table, hashed in
    /// order with the flow hash key (CH-4). Backend slots are local to an instance; addresses
    /// are not, so two instances with the same configuration, `hash_seed` and health verdicts
    /// have the same fingerprint, and a flow moved between them by ECMP reaches the same
    /// backend. Off the packet path (the API and the metrics).
    pub fn table_fingerprint(&self, svc: &ServiceView) -> u64 {
        let mut h = xxhash_rust::xxh3::Xxh3::with_seed(self.hasher.seed());
        let mut buf = Vec::with_capacity(64 * 1024);
        for choice in std::iter::once(&svc.default_choice).chain(&svc.zone_choices) {
            buf.clear();
            buf.extend_from_slice(&choice.table.size().to_le_bytes());
            for &slot in choice.table.entries() {
                match self.backend(slot) {
                    Some(b) => {
                        buf.extend_from_slice(&b.endpoint.addr.0);
                        buf.extend_from_slice(&b.endpoint.port.to_le_bytes());
                    }
                    None => buf.extend_from_slice(&[0xff; 18]),
                }
                if buf.len() >= 60 * 1024 {
                    h.update(&buf);
                    buf.clear();
                }
            }
            h.update(&buf);
        }
        h.digest()
    }

    /// An empty snapshot (no rules: every packet is `no_matching_rule`).
    pub fn empty() -> Snapshot {
        Snapshot {
            generation: 0,
            hasher: FlowHasher::default(),
            rules: RuleTable::default(),
            services: Vec::new(),
            backends: Vec::new(),
            client_zones: Lpm::new(),
            zone_names: Vec::new(),
            copy_grace_ms: 0,
            config_fingerprint: 0,
        }
    }
}
