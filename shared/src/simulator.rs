//! The what-if simulator: the real decision code on a virtual clock.
//!
//! A [`Simulator`] holds a [`PolicyState`], the snapshot it last built, one conntrack
//! [`Shard`] and a virtual clock. Steps are packets, time advances, health changes and model
//! replacements; every packet goes through [`decide`] exactly as a worker's would, and the
//! answer says which backend, why, and what eligible set the packet saw. `spillwayctl
//! simulate` and the scenario tests drive it.

use crate::addr::Addr;
use crate::conntrack::Shard;
use crate::decide::{decide, Decision};
use crate::eligible::EligibleKind;
use crate::flow::PacketInfo;
use crate::model::{BackendKey, Endpoint, Model};
use crate::snapshot::Snapshot;
use crate::state::{ModelChange, PolicyState, StateError};
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
        Ok(Simulator { state, snapshot, shard: Shard::with_capacity(capacity), now: Time::ZERO })
    }

    /// Run one packet through [`decide`].
    pub fn packet(&mut self, p: &PacketInfo) -> Outcome {
        let decision = decide(p, &self.snapshot, &mut self.shard, self.now);
        let svc = self.snapshot.service(decision.service);
        let eligible = svc.map(|s| {
            let c = s.choice(self.snapshot.client_zone(p.src));
            EligibleView { kind: c.kind, zonal_match: c.zonal_match, size: c.members.len() }
        });
        Outcome {
            decision,
            service: svc.map(|s| s.name.to_string()),
            backend: decision.backend().and_then(|b| self.snapshot.backend(b)).map(|b| b.endpoint),
            eligible,
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
