//! The policy state: the control plane's memory between snapshots.
//!
//! [`PolicyState`] owns the current [`Model`], the health verdicts, the stable backend slots
//! (with their generation and draining deadline, CD-1..CD-4), the stable service ids and the
//! failover-flip bookkeeping (FO-9). From these it builds immutable [`Snapshot`]s. The
//! control thread and the simulator both drive it, so the two can never disagree.
//!
//! It never touches a connection table: removing, draining or flushing only changes what
//! the snapshot says, and entries are judged against it at lookup (`decide`).

use crate::eligible::{eligible, Candidate, Eligible};
use crate::flow::FlowHasher;
use crate::lpm::Lpm;
use crate::maglev::{backend_identity, MaglevMember, MaglevTable};
use crate::model::{BackendKey, Model, RuleDest};
use crate::snapshot::{
    BackendStatus, BackendView, Choice, RuleEntry, RuleTable, ServiceView, Snapshot,
};
use crate::time::Time;
use crate::zonal::zonal_adjust;
use hashbrown::HashMap;
use std::sync::Arc;
use std::time::Duration;

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
#[derive(Debug)]
pub struct PolicyState {
    model: Model,
    backends: Vec<BackendView>,
    slot_keys: Vec<Option<BackendKey>>,
    by_key: HashMap<BackendKey, u16>,
    free: Vec<u16>,
    health: HashMap<BackendKey, bool>,
    drained: hashbrown::HashSet<BackendKey>,
    default_healthy: bool,
    services: HashMap<String, ServiceState>,
    next_service_id: u16,
    generation: u64,
    tables: HashMap<TableKey, Arc<MaglevTable>>,
}

impl PolicyState {
    /// An empty state. Backends without a health verdict count as `default_healthy`
    /// (false in the daemon, HC-3; true in the simulator).
    pub fn new(default_healthy: bool) -> PolicyState {
        PolicyState {
            model: Model::empty(),
            backends: Vec::new(),
            slot_keys: Vec::new(),
            by_key: HashMap::new(),
            free: Vec::new(),
            health: HashMap::new(),
            drained: hashbrown::HashSet::new(),
            default_healthy,
            services: HashMap::new(),
            next_service_id: 1,
            generation: 0,
            tables: HashMap::new(),
        }
    }

    /// The current model.
    pub fn model(&self) -> &Model {
        &self.model
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
                self.services
                    .insert(s.name.clone(), ServiceState { id, epoch: 0, last_side: None });
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
    pub fn snapshot(&mut self, now: Time) -> Snapshot {
        self.reclaim(now);
        self.generation += 1;
        let model = &self.model;
        let hasher = FlowHasher::new(model.hash_seed);
        for (slot, b) in self.backends.iter_mut().enumerate() {
            if let Some(key) = &self.slot_keys[slot] {
                if b.status == BackendStatus::Active {
                    b.healthy = self.health.get(key).copied().unwrap_or(self.default_healthy);
                }
            }
        }
        // Client subnets: only zones of our own region are compatible (ZA-1).
        let mut client_zones = Lpm::new();
        for cs in &model.client_subnets {
            let zone = cs.zone.filter(|z| {
                model.zones.get(usize::from(*z)).is_some_and(|z| z.region == model.region)
            });
            client_zones.insert(cs.prefix, zone);
        }
        let zone_count = model.zones.len();
        let mut rules = RuleTable::default();
        let max_id = self.services.values().map(|s| s.id).max().unwrap_or(0);
        let mut services: Vec<Option<ServiceView>> = (0..=max_id).map(|_| None).collect();
        let mut used_tables: HashMap<TableKey, Arc<MaglevTable>> = HashMap::new();

        for svc in &model.services {
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
            let mut weights: HashMap<u16, u32> = HashMap::new();
            for g in &svc.groups {
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
                    weights.insert(slot, g.weight.max(1));
                }
            }
            let a: Eligible = eligible(&candidates, svc.has_failover_groups(), &svc.failover);
            // FO-9: a flip between the primary and failover sides flushes when configured.
            if let Some(side) = a.kind.side() {
                if st.last_side.is_some_and(|last| last != side)
                    && svc.has_failover_groups()
                    && svc.failover.disable_connection_drain_on_failover
                {
                    st.epoch = st.epoch.wrapping_add(1);
                }
                st.last_side = Some(side);
            }
            let mut table_for = |members: &[u16]| -> Arc<MaglevTable> {
                let list: Vec<MaglevMember> = members
                    .iter()
                    .map(|&slot| {
                        let e = self.backends[usize::from(slot)].endpoint;
                        MaglevMember {
                            id: slot,
                            identity: backend_identity(&hasher, e.addr, e.port),
                            weight: weights.get(&slot).copied().unwrap_or(1),
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
                |members: Vec<u16>,
                 zonal_match: bool,
                 spilled: bool,
                 t: &mut dyn FnMut(&[u16]) -> Arc<MaglevTable>| {
                    let mut members = members;
                    members.sort_unstable();
                    let table = t(&members);
                    Arc::new(Choice { kind: a.kind, zonal_match, spilled, members, table })
                };
            let default_choice = make_choice(a.members.clone(), false, false, &mut table_for);
            let mut zone_choices = Vec::with_capacity(zone_count);
            for z in 0..zone_count {
                let zone = zone_id(z);
                let zc = zonal_adjust(&candidates, &a, Some(zone), svc.zonal);
                if zc.zonal_match {
                    zone_choices.push(make_choice(zc.members, true, zc.spilled, &mut table_for));
                } else {
                    zone_choices.push(Arc::clone(&default_choice));
                }
            }
            services[usize::from(id)] = Some(ServiceView {
                id,
                name: Arc::from(svc.name.as_str()),
                affinity: svc.affinity,
                symmetric_hashing: svc.symmetric_hashing,
                tracking: svc.tracking,
                persistence: svc.persistence,
                idle_timeout_ms: u64::from(svc.idle_timeout_secs) * 1000,
                encap: svc.encap,
                epoch: st.epoch,
                eligible: a,
                default_choice,
                zone_choices,
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
        }
    }
}

fn zone_id(z: usize) -> crate::model::ZoneId {
    crate::model::ZoneId::try_from(z).unwrap_or(crate::model::ZoneId::MAX)
}
