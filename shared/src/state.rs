//! The policy state: the control plane's memory between snapshots.
//!
//! [`PolicyState`] owns the current [`Model`], the health verdicts, the stable backend slots
//! (with their generation and draining deadline, CD-1..CD-4), the stable service ids and the
//! failover-flip bookkeeping (FO-9). From these it builds immutable [`Snapshot`]s. The
//! control thread and the simulator both drive it, so the two can never disagree.
//!
//! It never touches a connection table: removing, draining or flushing only changes what
//! the snapshot says, and entries are judged against it at lookup (`decide`).

use crate::advanced::{
    allocate, endpoint_weight, ewma, exceeds_band, ClientDemand, ClientLoad, Distances, DrainInput,
    DrainTracker, GroupLoad, GroupState, Load, LoadUnit, Topology,
};
use crate::eligible::{eligible, Candidate, Eligible};
use crate::flow::FlowHasher;
use crate::lpm::Lpm;
use crate::maglev::{backend_identity, MaglevMember, MaglevTable};
use crate::model::{
    AdvancedPolicy, BackendKey, Capacity, GroupAdvanced, Model, QuicLbPolicy, RuleDest, Service,
};
use crate::quic_lb::{Routes, ServerId};
use crate::snapshot::{
    AdvancedClientView, AdvancedGroupView, AdvancedView, BackendStatus, BackendView, Choice,
    PreviousChoices, RuleEntry, RuleTable, ServiceView, Snapshot,
};
use crate::time::Time;
use crate::zonal::zonal_adjust;
use hashbrown::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Builds (or reuses) the table for weighted members.
type TableFor<'a> = dyn FnMut(&[(u16, u32)]) -> Arc<MaglevTable> + 'a;

/// What a Maglev table was built from: reused while this stays the same.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct TableKey {
    size: u32,
    members: Vec<(u16, u64, u32)>,
}

/// Stable per-service bookkeeping.
#[derive(Clone, Debug)]
struct ServiceState {
    id: u16,
    epoch: u32,
    /// Last non-empty side (FO-9): `Some(false)` primary, `Some(true)` failover.
    last_side: Option<bool>,
    /// The choices of the last snapshot (default, per zone), to tell when the tables change.
    last_choices: Option<(Arc<Choice>, Vec<Arc<Choice>>)>,
    /// FS-11: the choices before the last change, while they apply.
    previous: Option<Arc<PreviousChoices>>,
}

/// Section 7 bookkeeping of one service: measured load (raw and smoothed), the AL-6 drain
/// timers, and the weights last published per client (hysteresis).
#[derive(Debug, Default, Clone)]
struct AdvancedRuntime {
    client_sample: HashMap<Option<String>, ClientLoad>,
    group_sample: HashMap<String, GroupLoad>,
    client_smooth: HashMap<Option<String>, ClientLoad>,
    group_smooth: HashMap<String, GroupLoad>,
    last_fold: Option<Time>,
    drain: DrainTracker,
    signature: Option<Signature>,
    /// Published fractions per client index (zone ids, then the zone-less client).
    published: Vec<Vec<f64>>,
}

/// The discrete inputs of a service's weights: when these change, weights are republished
/// at once (no hysteresis).
#[derive(Clone, Debug, PartialEq)]
struct Signature {
    algorithm: crate::model::Algorithm,
    threshold: u8,
    zones: Vec<String>,
    /// (name, zone, in A and healthy, healthy, configured, auto-drained, settings)
    groups: Vec<(String, u16, usize, usize, usize, bool, GroupAdvanced)>,
}

/// Errors of the policy state (capacity limits only: the model is already validated).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// More than 65 535 backends would be configured or draining at once.
    #[error("too many backends: at most 65535 may be configured or draining at once")]
    TooManyBackends,
    /// More than 65 534 distinct service names over the life of the process.
    #[error("too many services over the life of the process (65534)")]
    TooManyServices,
}

/// What a model change did to the backends, for the control plane's log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelChange {
    /// Newly configured backends (fresh slots or fresh generations).
    pub added: Vec<BackendKey>,
    /// Removed backends, with their draining deadline.
    pub removed: Vec<(BackendKey, Time)>,
    /// Backends re-added while still draining (CD-4: their entries stay valid).
    pub undrained: Vec<BackendKey>,
}

/// The control plane's state between snapshots.
#[derive(Debug, Clone)]
pub struct PolicyState {
    model: Model,
    /// [`Model::fingerprint`] of `model`, worked out once per model.
    config_fingerprint: u64,
    backends: Vec<BackendView>,
    slot_keys: Vec<Option<BackendKey>>,
    /// Each slot's QUIC-LB server IDs (configuration id, server ID), from the last model that
    /// configured it: a draining backend keeps them until its slot is freed, so that its QUIC
    /// connections still reach it (CD-3).
    slot_quic: Vec<Vec<(u8, ServerId)>>,
    by_key: HashMap<BackendKey, u16>,
    free: Vec<u16>,
    health: HashMap<BackendKey, bool>,
    drained: hashbrown::HashSet<BackendKey>,
    default_healthy: bool,
    /// The verdicts are settled (the instance is ready, or verdicts default to healthy): from
    /// then on the tables are the ones this instance serves with, and a change keeps the
    /// previous ones (FS-11). Before, they are placeholders that the first verdicts replace.
    settled: bool,
    services: HashMap<String, ServiceState>,
    next_service_id: u16,
    generation: u64,
    tables: HashMap<TableKey, Arc<MaglevTable>>,
    topology: Topology,
    advanced: HashMap<String, AdvancedRuntime>,
}

impl PolicyState {
    /// An empty state. Backends without a health verdict count as `default_healthy`
    /// (false in the daemon, HC-3; true in the simulator).
    pub fn new(default_healthy: bool) -> PolicyState {
        PolicyState {
            config_fingerprint: Model::empty().fingerprint(),
            model: Model::empty(),
            backends: Vec::new(),
            slot_keys: Vec::new(),
            slot_quic: Vec::new(),
            by_key: HashMap::new(),
            free: Vec::new(),
            health: HashMap::new(),
            drained: hashbrown::HashSet::new(),
            default_healthy,
            settled: default_healthy,
            services: HashMap::new(),
            next_service_id: 1,
            generation: 0,
            tables: HashMap::new(),
            topology: Topology::default(),
            advanced: HashMap::new(),
        }
    }

    /// Set the locality topology (section 7: latencies and region order). Takes effect at the
    /// next snapshot.
    pub fn set_topology(&mut self, topology: Topology) {
        self.topology = topology;
    }

    /// The locality topology.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// True when some service of the model sets `advanced` (then the control plane feeds
    /// load, calls [`Self::advance_load`] and rebuilds the snapshot on a timer, e.g. every
    /// second).
    pub fn has_advanced(&self) -> bool {
        self.model.services.iter().any(|s| s.advanced.is_some())
    }

    /// Record the latest measured load of a group of an advanced service (new connections per
    /// second over the measurement window, and tracked connections). Folded into the smoothed
    /// estimate by [`Self::advance_load`]. Ignored for services without `advanced`.
    pub fn set_group_load(&mut self, service: &str, group: &str, load: GroupLoad) {
        if let Some(rt) = self.runtime(service) {
            rt.group_sample.insert(group.to_string(), load);
        }
    }

    /// Record the latest offered load of the clients of one zone (`None`: clients without a
    /// zone) for an advanced service. When no client load was ever recorded for a service,
    /// the sum of its groups' loads counts as offered by clients without a zone.
    pub fn set_client_load(&mut self, service: &str, client_zone: Option<&str>, load: ClientLoad) {
        if let Some(rt) = self.runtime(service) {
            rt.client_sample.insert(client_zone.map(str::to_string), load);
        }
    }

    fn runtime(&mut self, service: &str) -> Option<&mut AdvancedRuntime> {
        let advanced =
            self.model.services.iter().any(|s| s.name == service && s.advanced.is_some());
        advanced.then(|| self.advanced.entry(service.to_string()).or_default())
    }

    /// Fold the latest samples into the smoothed loads (exponential smoothing with each
    /// service's `damping.time_constant_ms`; the first fold takes the samples as they are).
    /// Call it on the recompute timer, before [`Self::snapshot`].
    pub fn advance_load(&mut self, now: Time) {
        for svc in &self.model.services {
            let Some(adv) = &svc.advanced else { continue };
            let Some(rt) = self.advanced.get_mut(&svc.name) else { continue };
            let tau = adv.damping.time_constant_ms;
            let dt = rt.last_fold.map(|t| now.as_millis().saturating_sub(t.as_millis()));
            rt.last_fold = Some(now);
            fold(&mut rt.client_smooth, &rt.client_sample, dt, tau);
            fold(&mut rt.group_smooth, &rt.group_sample, dt, tau);
        }
    }

    /// The current model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// A service's QUIC-LB routes: its configured backends' server IDs first, then its
    /// draining backends' (a server ID the configuration gave to another backend stays with
    /// that one); a server ID its configuration no longer fits is left out.
    fn quic_routes(&self, svc: &Service, q: &QuicLbPolicy) -> Routes {
        let mut routes = Routes::new(q.configs.clone());
        let of_service =
            |slot: usize| self.slot_keys[slot].as_ref().is_some_and(|k| k.service == svc.name);
        let active = |slot: usize| self.backends[slot].status == BackendStatus::Active;
        for pass_active in [true, false] {
            for (slot, ids) in self.slot_quic.iter().enumerate() {
                if of_service(slot) && active(slot) == pass_active {
                    let Ok(s) = u16::try_from(slot) else { continue };
                    for &(config, server_id) in ids {
                        routes.add(config, server_id, s);
                    }
                }
            }
        }
        routes
    }

    /// Replace the model at `now` (a reload). Backends no longer configured start draining
    /// with the draining timeout of the *new* configuration of their service (CD-3; 0 when
    /// the service is gone). Backends re-added before their deadline resume with their old
    /// generation (CD-4); later ones start afresh.
    pub fn apply_model(&mut self, model: Model, now: Time) -> Result<ModelChange, StateError> {
        self.reclaim(now);
        let mut change = ModelChange::default();
        let wanted: HashMap<BackendKey, ()> = model.backends().map(|(k, _, _)| (k, ())).collect();
        // Removed backends start draining.
        for slot in 0..self.backends.len() {
            let Some(key) = self.slot_keys[slot].clone() else { continue };
            if wanted.contains_key(&key) || self.backends[slot].status != BackendStatus::Active {
                continue;
            }
            let timeout = model
                .services
                .iter()
                .find(|s| s.name == key.service)
                .map_or(0, |s| s.draining_timeout_secs);
            let deadline = now + Duration::from_secs(u64::from(timeout));
            self.backends[slot].status = BackendStatus::Draining { deadline };
            change.removed.push((key, deadline));
        }
        // New services get ids.
        for s in &model.services {
            if !self.services.contains_key(&s.name) {
                if self.next_service_id == u16::MAX {
                    return Err(StateError::TooManyServices);
                }
                let id = self.next_service_id;
                self.next_service_id += 1;
                self.services.insert(
                    s.name.clone(),
                    ServiceState {
                        id,
                        epoch: 0,
                        last_side: None,
                        last_choices: None,
                        previous: None,
                    },
                );
            }
        }
        // Configured backends: keep, undrain, or start afresh.
        for (key, service, group) in model.backends() {
            let sid = self.services[&service.name].id;
            let zone = group.zone;
            let view = |gen| BackendView {
                endpoint: key.endpoint,
                service: sid,
                gen,
                status: BackendStatus::Active,
                healthy: false,
                zone,
                failover: group.failover,
                group: Arc::from(group.name.as_str()),
            };
            match self.by_key.get(&key).copied() {
                Some(slot) => {
                    let b = &mut self.backends[usize::from(slot)];
                    match b.status {
                        BackendStatus::Draining { deadline } if now < deadline => {
                            change.undrained.push(key.clone());
                            *b = view(b.gen);
                        }
                        BackendStatus::Active => *b = view(b.gen),
                        BackendStatus::Draining { .. } | BackendStatus::Free => {
                            change.added.push(key.clone());
                            *b = view(b.gen.wrapping_add(1));
                        }
                    }
                }
                None => {
                    let slot = self.allocate_slot()?;
                    let i = usize::from(slot);
                    let gen = self.backends[i].gen.wrapping_add(1);
                    self.backends[i] = view(gen);
                    self.slot_keys[i] = Some(key.clone());
                    self.by_key.insert(key.clone(), slot);
                    change.added.push(key);
                }
            }
        }
        // Configured backends take their QUIC-LB server IDs from this model; draining ones
        // keep theirs.
        for (key, _, _) in model.backends() {
            if let Some(&slot) = self.by_key.get(&key) {
                self.slot_quic[usize::from(slot)].clear();
            }
        }
        for svc in &model.services {
            for q in svc.quic_lb.iter().flat_map(|p| &p.server_ids) {
                let key = BackendKey { service: svc.name.clone(), endpoint: q.endpoint };
                if let Some(&slot) = self.by_key.get(&key) {
                    self.slot_quic[usize::from(slot)].push((q.config, q.server_id));
                }
            }
        }
        self.advanced.retain(|name, _| {
            model.services.iter().any(|s| &s.name == name && s.advanced.is_some())
        });
        self.config_fingerprint = model.fingerprint();
        self.model = model;
        Ok(change)
    }

    fn allocate_slot(&mut self) -> Result<u16, StateError> {
        if let Some(s) = self.free.pop() {
            return Ok(s);
        }
        let slot = u16::try_from(self.backends.len()).map_err(|_| StateError::TooManyBackends)?;
        if slot == u16::MAX {
            return Err(StateError::TooManyBackends);
        }
        self.backends.push(BackendView {
            endpoint: crate::model::Endpoint { addr: crate::addr::Addr::UNSPECIFIED, port: 0 },
            service: 0,
            gen: 0,
            status: BackendStatus::Free,
            healthy: false,
            zone: 0,
            failover: false,
            group: Arc::from(""),
        });
        self.slot_keys.push(None);
        self.slot_quic.push(Vec::new());
        Ok(slot)
    }

    /// Free the slots whose draining deadline has passed. Their entries are already invalid
    /// (the deadline is checked at lookup); this only makes the slot reusable, with a new
    /// generation so that old entries can never point at a new backend.
    pub fn reclaim(&mut self, now: Time) {
        for slot in 0..self.backends.len() {
            if let BackendStatus::Draining { deadline } = self.backends[slot].status {
                if now >= deadline {
                    self.backends[slot].status = BackendStatus::Free;
                    self.slot_quic[slot].clear();
                    if let Some(key) = self.slot_keys[slot].take() {
                        self.by_key.remove(&key);
                        self.health.remove(&key);
                        self.drained.remove(&key);
                    }
                    self.free.push(u16::try_from(slot).unwrap_or(u16::MAX));
                }
            }
        }
    }

    /// The health verdicts are settled (FS-11): tables built from now on served, so a change
    /// keeps the previous ones. Once set, it stays.
    pub fn settle(&mut self) {
        self.settled = true;
    }

    /// Whether [`PolicyState::settle`] was called (or verdicts default to healthy).
    pub fn is_settled(&self) -> bool {
        self.settled
    }

    /// Set the health verdict of one backend (probe result with overrides applied).
    /// Returns true when it changed.
    pub fn set_health(&mut self, key: &BackendKey, healthy: bool) -> bool {
        let before = self.is_healthy(key);
        self.health.insert(key.clone(), healthy);
        before != healthy
    }

    /// Drain (or undrain) a backend by operator request: it takes no new connections and
    /// does not count as configured for the failover ratio, while its existing entries stay
    /// valid (no deadline). Returns true when it changed.
    pub fn set_drained(&mut self, key: &BackendKey, drained: bool) -> bool {
        if drained {
            self.drained.insert(key.clone())
        } else {
            self.drained.remove(key)
        }
    }

    /// True when the operator drained this backend.
    pub fn is_drained(&self, key: &BackendKey) -> bool {
        self.drained.contains(key)
    }

    /// The health verdict of a backend.
    pub fn is_healthy(&self, key: &BackendKey) -> bool {
        self.health.get(key).copied().unwrap_or(self.default_healthy)
    }

    /// The stable id of a service.
    pub fn service_id(&self, name: &str) -> Option<u16> {
        self.services.get(name).map(|s| s.id)
    }

    /// The slot of a configured or draining backend.
    pub fn slot_of(&self, key: &BackendKey) -> Option<u16> {
        self.by_key.get(key).copied()
    }

    /// The key of the backend in `slot`, if the slot is in use.
    pub fn key_of(&self, slot: u16) -> Option<&BackendKey> {
        self.slot_keys.get(usize::from(slot)).and_then(Option::as_ref)
    }

    /// Build the next snapshot at `now`. This is also where failover flips are detected
    /// (FO-9): the control plane builds a snapshot on every health or config change.
    ///
    /// Services with `advanced` (section 7) get one weighted choice per client zone from
    /// [`crate::advanced::allocate`]; this is also where AL-6 drain timers advance and where
    /// the hysteresis band decides whether a client zone's weights are republished.
    pub fn snapshot(&mut self, now: Time) -> Snapshot {
        self.reclaim(now);
        self.generation += 1;
        let settled = self.settled;
        let model = &self.model;
        let hasher = FlowHasher::new(model.hash_seed);
        for (slot, b) in self.backends.iter_mut().enumerate() {
            if let Some(key) = &self.slot_keys[slot] {
                if b.status == BackendStatus::Active {
                    b.healthy = self.health.get(key).copied().unwrap_or(self.default_healthy);
                }
            }
        }
        let any_advanced = model.services.iter().any(|s| s.advanced.is_some());
        let in_region =
            |z: u16| model.zones.get(usize::from(z)).is_some_and(|z| z.region == model.region);
        // Client subnets: only zones of our own region are compatible (ZA-1). With an advanced
        // service, clients of other regions keep their zone too (section 7 needs their
        // locality); services without `advanced` then map those zones to their default choice.
        let mut client_zones = Lpm::new();
        for cs in &model.client_subnets {
            let zone = cs.zone.filter(|&z| {
                if any_advanced {
                    usize::from(z) < model.zones.len()
                } else {
                    in_region(z)
                }
            });
            client_zones.insert(cs.prefix, zone);
        }
        let zone_count = model.zones.len();
        let distances = any_advanced.then(|| Distances::new(model, &self.topology));
        let mut rules = RuleTable::default();
        let max_id = self.services.values().map(|s| s.id).max().unwrap_or(0);
        let mut services: Vec<Option<ServiceView>> = (0..=max_id).map(|_| None).collect();
        let mut used_tables: HashMap<TableKey, Arc<MaglevTable>> = HashMap::new();

        for svc in &model.services {
            let quic = svc.quic_lb.as_ref().map(|q| Arc::new(self.quic_routes(svc, q)));
            let Some(st) = self.services.get_mut(&svc.name) else { continue };
            let id = st.id;
            for r in &svc.rules {
                let entry = RuleEntry { protocol: r.protocol, ports: r.ports.clone(), service: id };
                match r.dest {
                    RuleDest::Vip(a) => rules.add_vip(a, entry),
                    RuleDest::Prefix(p) => rules.add_prefix(p, entry),
                }
            }
            let mut candidates = Vec::new();
            let mut candidate_group = Vec::new();
            let mut weights: HashMap<u16, u32> = HashMap::new();
            for (gi, g) in svc.groups.iter().enumerate() {
                for e in &g.endpoints {
                    let key = BackendKey { service: svc.name.clone(), endpoint: *e };
                    let Some(&slot) = self.by_key.get(&key) else { continue };
                    if self.drained.contains(&key) {
                        continue;
                    }
                    let b = &self.backends[usize::from(slot)];
                    candidates.push(Candidate {
                        slot,
                        zone: g.zone,
                        failover: g.failover,
                        healthy: b.healthy,
                    });
                    candidate_group.push(gi);
                    weights.insert(slot, g.weight.max(1));
                }
            }
            let a: Eligible = eligible(&candidates, svc.has_failover_groups(), &svc.failover);
            let epoch_before = st.epoch;
            // FO-9: a flip between the primary and failover sides flushes when configured.
            if let Some(side) = a.kind.side() {
                if st.last_side.is_some_and(|last| last != side)
                    && svc.has_failover_groups()
                    && svc.failover.disable_connection_drain_on_failover
                {
                    st.epoch = crate::decide::next_epoch(st.epoch);
                }
                st.last_side = Some(side);
            }
            let mut table_for = |list: &[(u16, u32)]| -> Arc<MaglevTable> {
                let list: Vec<MaglevMember> = list
                    .iter()
                    .map(|&(slot, weight)| {
                        let e = self.backends[usize::from(slot)].endpoint;
                        MaglevMember {
                            id: slot,
                            identity: backend_identity(&hasher, e.addr, e.port),
                            weight,
                        }
                    })
                    .collect();
                let key = TableKey {
                    size: model.table_size,
                    members: list.iter().map(|m| (m.id, m.identity, m.weight)).collect(),
                };
                if let Some(t) = used_tables.get(&key).or_else(|| self.tables.get(&key)) {
                    let t = Arc::clone(t);
                    used_tables.insert(key, Arc::clone(&t));
                    return t;
                }
                let t = Arc::new(MaglevTable::build(&list, model.table_size));
                used_tables.insert(key, Arc::clone(&t));
                t
            };
            let make_choice =
                |members: Vec<u16>, zonal_match: bool, spilled: bool, t: &mut TableFor<'_>| {
                    let mut members = members;
                    members.sort_unstable();
                    let list: Vec<(u16, u32)> = members
                        .iter()
                        .map(|&slot| (slot, weights.get(&slot).copied().unwrap_or(1)))
                        .collect();
                    let table = t(&list);
                    Arc::new(Choice { kind: a.kind, zonal_match, spilled, members, table })
                };
            let a_choice = make_choice(a.members.clone(), false, false, &mut table_for);
            let (default_choice, zone_choices, advanced_view) = match (&svc.advanced, &distances) {
                (Some(adv), Some(dist)) => {
                    let rt = self.advanced.entry(svc.name.clone()).or_default();
                    let plan = advanced_plan(
                        svc,
                        adv,
                        model,
                        dist,
                        &candidates,
                        &candidate_group,
                        &a,
                        rt,
                        now,
                    );
                    let mut choices: Vec<Arc<Choice>> = plan
                        .members
                        .iter()
                        .map(|list| {
                            if list.is_empty() {
                                return Arc::clone(&a_choice);
                            }
                            let mut list = list.clone();
                            list.sort_unstable();
                            let table = table_for(&list);
                            let members = list.iter().map(|&(s, _)| s).collect();
                            Arc::new(Choice {
                                kind: a.kind,
                                zonal_match: false,
                                spilled: false,
                                members,
                                table,
                            })
                        })
                        .collect();
                    let default_choice = choices.pop().unwrap_or_else(|| Arc::clone(&a_choice));
                    (default_choice, choices, Some(Arc::new(plan.view)))
                }
                _ => {
                    let mut zone_choices = Vec::with_capacity(zone_count);
                    for z in 0..zone_count {
                        let zone = zone_id(z);
                        let zc = zonal_adjust(&candidates, &a, Some(zone), svc.zonal);
                        if zc.zonal_match && (!any_advanced || in_region(zone)) {
                            zone_choices.push(make_choice(
                                zc.members,
                                true,
                                zc.spilled,
                                &mut table_for,
                            ));
                        } else {
                            zone_choices.push(Arc::clone(&a_choice));
                        }
                    }
                    (a_choice, zone_choices, None)
                }
            };
            let previous = previous_choices(
                st,
                (&default_choice, &zone_choices),
                (st.epoch != epoch_before, settled),
                now,
                Duration::from_millis(model.previous_table_ms),
            );
            services[usize::from(id)] = Some(ServiceView {
                id,
                name: Arc::from(svc.name.as_str()),
                affinity: svc.affinity,
                symmetric_hashing: svc.symmetric_hashing,
                tracking: svc.tracking,
                tracks_five_tuple: crate::flow::tracks_five_tuple(
                    svc.tracking,
                    svc.affinity,
                    svc.symmetric_hashing,
                ),
                persistence: svc.persistence,
                idle_timeout_ms: u64::from(svc.idle_timeout_secs) * 1000,
                encap: svc.encap,
                epoch: st.epoch,
                eligible: a,
                default_choice,
                zone_choices,
                advanced: advanced_view,
                identity: crate::sync::service_identity(&svc.name),
                quic,
                previous,
            });
        }
        self.tables = used_tables;
        Snapshot {
            generation: self.generation,
            hasher,
            rules,
            services,
            backends: self.backends.clone(),
            client_zones,
            zone_names: model.zones.iter().map(|z| z.name.clone()).collect(),
            copy_grace_ms: model.copy_grace_ms,
            config_fingerprint: self.config_fingerprint,
        }
    }
}

/// FS-11: the choices a service's mid-connection TCP packets without an entry are still given
/// for `grace` after its tables change (to those of `now`, `current`), and record `current` as
/// the last. A flush (FO-9, `flushed`), tables not yet settled (before every backend's first
/// verdict) or a zero grace end them at once.
fn previous_choices(
    st: &mut ServiceState,
    current: (&Arc<Choice>, &[Arc<Choice>]),
    (flushed, settled): (bool, bool),
    now: Time,
    grace: Duration,
) -> Option<Arc<PreviousChoices>> {
    let (default_choice, zone_choices) = current;
    // The tables of an unchanged member set are the same `Arc` (the table cache).
    let same = |a: &Arc<Choice>, b: &Arc<Choice>| Arc::ptr_eq(&a.table, &b.table);
    let last = settled
        .then(|| st.last_choices.replace((Arc::clone(default_choice), zone_choices.to_vec())))
        .flatten();
    if flushed || !settled || grace.is_zero() {
        st.previous = None;
    } else if let Some((d, z)) = last {
        let changed = !same(&d, default_choice)
            || z.len() != zone_choices.len()
            || z.iter().zip(zone_choices).any(|(a, b)| !same(a, b));
        if changed {
            st.previous = Some(Arc::new(PreviousChoices {
                until: now + grace,
                shared_until: now + grace + grace,
                default_choice: d,
                zone_choices: z,
            }));
        }
    }
    if st.previous.as_ref().is_some_and(|p| now >= p.shared_until) {
        st.previous = None;
    }
    st.previous.clone()
}

/// Fold samples into smoothed values (missing samples count as 0; `dt == None`: first fold).
fn fold<K: Clone + Eq + std::hash::Hash>(
    smooth: &mut HashMap<K, Load>,
    sample: &HashMap<K, Load>,
    dt: Option<u64>,
    tau: u32,
) {
    let Some(dt) = dt else {
        smooth.clone_from(sample);
        return;
    };
    let keys: Vec<K> = smooth.keys().chain(sample.keys()).cloned().collect();
    for k in keys {
        let s = sample.get(&k).copied().unwrap_or_default();
        let v = smooth.entry(k).or_default();
        v.rate = ewma(v.rate, s.rate, dt, tau);
        v.connections = ewma(v.connections, s.connections, dt, tau);
    }
}

/// Per client (zone ids, then the zone-less client): the weighted members; plus the view.
struct AdvancedPlan {
    members: Vec<Vec<(u16, u32)>>,
    view: AdvancedView,
}

/// Section 7 for one service: capacities, AL-6, allocation, hysteresis, weighted members.
#[allow(clippy::too_many_arguments, clippy::too_many_lines)]
fn advanced_plan(
    svc: &Service,
    adv: &AdvancedPolicy,
    model: &Model,
    dist: &Distances,
    candidates: &[Candidate],
    candidate_group: &[usize],
    a: &Eligible,
    rt: &mut AdvancedRuntime,
    now: Time,
) -> AdvancedPlan {
    let ng = svc.groups.len();
    let zone_count = model.zones.len();
    let in_a: hashbrown::HashSet<u16> = a.members.iter().copied().collect();
    let mut configured = vec![0usize; ng];
    let mut healthy = vec![0usize; ng];
    let mut usable: Vec<Vec<u16>> = vec![Vec::new(); ng];
    for (c, &gi) in candidates.iter().zip(candidate_group) {
        configured[gi] += 1;
        if c.healthy {
            healthy[gi] += 1;
            if in_a.contains(&c.slot) {
                usable[gi].push(c.slot);
            }
        }
    }
    let settings: Vec<GroupAdvanced> = svc.groups.iter().map(|g| adv.group(&g.name)).collect();
    // AL-6.
    let drain_in: Vec<DrainInput<'_>> = svc
        .groups
        .iter()
        .enumerate()
        .map(|(gi, g)| DrainInput {
            name: &g.name,
            healthy: healthy[gi],
            configured: configured[gi],
        })
        .collect();
    let drained = rt.drain.update(adv.auto_capacity_drain, &drain_in, now);
    // The unit: rate if any group has a rate capacity, else connections if any has one.
    let unit = if settings.iter().any(|s| matches!(s.capacity, Capacity::RatePerEndpoint(_))) {
        LoadUnit::Rate
    } else if settings.iter().any(|s| matches!(s.capacity, Capacity::ConnectionsPerEndpoint(_))) {
        LoadUnit::Connections
    } else {
        LoadUnit::Rate
    };
    // Demand per client; without any client sample, the groups' load counts as zone-less.
    let zone_name = |z: usize| model.zones[z].name.clone();
    let mut demand: Vec<f64> = (0..zone_count)
        .map(|z| rt.client_smooth.get(&Some(zone_name(z))).map_or(0.0, |l| l.get(unit)))
        .collect();
    demand.push(rt.client_smooth.get(&None).map_or(0.0, |l| l.get(unit)));
    if rt.client_smooth.is_empty() {
        if let Some(last) = demand.last_mut() {
            *last = rt.group_smooth.values().map(|l| l.get(unit)).sum();
        }
    }
    // Little's law, for connection capacities in a rate-unit service.
    let totals = rt.client_smooth.values().fold(Load::default(), |acc, l| Load {
        rate: acc.rate + l.rate,
        connections: acc.connections + l.connections,
    });
    let hold = if totals.rate > 0.0 { totals.connections / totals.rate } else { 0.0 };
    let groups: Vec<GroupState> = svc
        .groups
        .iter()
        .enumerate()
        .map(|(gi, g)| {
            #[allow(clippy::cast_precision_loss)]
            let n = usable[gi].len() as f64;
            let scaler = settings[gi].capacity_scaler.clamp(0.0, 1.0);
            let basis = n * scaler;
            let (capacity, size) = if drained[gi] || basis <= 0.0 {
                (0.0, 0.0)
            } else {
                match settings[gi].capacity {
                    Capacity::Unbounded => (f64::INFINITY, basis),
                    Capacity::RatePerEndpoint(c) => (c * basis, c * basis),
                    Capacity::ConnectionsPerEndpoint(c) => match unit {
                        LoadUnit::Connections => (c * basis, c * basis),
                        LoadUnit::Rate if hold > 0.0 => (c * basis / hold, c * basis / hold),
                        LoadUnit::Rate => (f64::INFINITY, c * basis),
                    },
                }
            };
            #[allow(clippy::cast_precision_loss)]
            let healthy_pct = if configured[gi] == 0 {
                0.0
            } else {
                100.0 * healthy[gi] as f64 / configured[gi] as f64
            };
            GroupState {
                zone: g.zone,
                capacity,
                size,
                healthy_pct,
                preferred: settings[gi].preferred,
            }
        })
        .collect();
    let clients: Vec<ClientDemand> = (0..=zone_count)
        .map(|c| ClientDemand { zone: (c < zone_count).then(|| zone_id(c)), demand: demand[c] })
        .collect();
    let threshold = adv.failover_health_threshold.clamp(1, 99);
    let alloc = allocate(adv.algorithm, threshold, &groups, &clients, dist);
    // Hysteresis: republish a client's weights when the discrete inputs changed, or when a
    // share moves by more than the band.
    let signature = Signature {
        algorithm: adv.algorithm,
        threshold,
        zones: model.zones.iter().map(|z| z.name.clone()).collect(),
        groups: svc
            .groups
            .iter()
            .enumerate()
            .map(|(gi, g)| {
                (
                    g.name.clone(),
                    g.zone,
                    usable[gi].len(),
                    healthy[gi],
                    configured[gi],
                    drained[gi],
                    settings[gi].clone(),
                )
            })
            .collect(),
    };
    if rt.signature.as_ref() != Some(&signature) || rt.published.len() != clients.len() {
        rt.published.clone_from(&alloc.fractions);
        rt.signature = Some(signature);
    } else {
        for (published, target) in rt.published.iter_mut().zip(&alloc.fractions) {
            if exceeds_band(published, target, adv.damping.band) {
                published.clone_from(target);
            }
        }
    }
    let members: Vec<Vec<(u16, u32)>> = rt
        .published
        .iter()
        .map(|f| {
            let mut list = Vec::new();
            for (gi, slots) in usable.iter().enumerate() {
                let w = endpoint_weight(f[gi], slots.len());
                if w > 0 {
                    list.extend(slots.iter().map(|&s| (s, w)));
                }
            }
            list
        })
        .collect();
    let expected: Vec<f64> =
        (0..ng).map(|gi| rt.published.iter().zip(&demand).map(|(f, d)| f[gi] * d).sum()).collect();
    let view = AdvancedView {
        algorithm: adv.algorithm,
        unit,
        failover_health_threshold: threshold,
        groups: svc
            .groups
            .iter()
            .enumerate()
            .map(|(gi, g)| AdvancedGroupView {
                name: Arc::from(g.name.as_str()),
                zone: g.zone,
                preferred: settings[gi].preferred,
                endpoints: configured[gi],
                healthy: healthy[gi],
                in_eligible: usable[gi].len(),
                capacity: groups[gi].capacity,
                auto_drained: drained[gi],
                retained: groups[gi].retained(threshold),
                expected_load: expected[gi],
                measured: rt.group_smooth.get(&g.name).copied().unwrap_or_default(),
            })
            .collect(),
        clients: clients
            .iter()
            .enumerate()
            .map(|(c, cd)| AdvancedClientView {
                zone: cd.zone,
                demand: cd.demand,
                weights: rt.published[c].clone(),
                target: alloc.fractions[c].clone(),
            })
            .collect(),
    };
    AdvancedPlan { members, view }
}

fn zone_id(z: usize) -> crate::model::ZoneId {
    crate::model::ZoneId::try_from(z).unwrap_or(crate::model::ZoneId::MAX)
}
