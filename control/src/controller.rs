//! The controller: the control thread's state machine.
//!
//! It owns the running [`Config`], the [`PolicyState`], the snapshot [`Publisher`], the
//! [`HealthChecker`] and the operator's overrides, and turns every event into at most one new
//! snapshot: a health verdict changing (HC-1), an override or a drain from the API (HC-2), a
//! reload (NX-3, NX-4: validated first; a rejected file changes nothing), a draining deadline
//! passing (CD-3). Each publication is logged at info level with what changed: eligible-set
//! kinds (failover), zonal spill, set sizes and Maglev slots moved.
//!
//! It never touches packets or DPDK; the daemon drives it from its main loop (a tokio
//! current-thread runtime on the main lcore) and the admin API reads it.

use crate::config::{self, Config, ConfigError};
use crate::health::{HealthChecker, HealthEvent, TargetStatus};
use crate::instance::Instance;
use crate::view::DataplaneView;
use hashbrown::HashMap;
use spillway_core::addr::Addr;
use spillway_core::advanced::Load;
use spillway_core::counters::MAX_ZONES;
use spillway_core::maglev::slots_moved;
use spillway_core::model::BackendKey;
use spillway_core::publish::{PublishStats, Publisher, SnapshotReader};
use spillway_core::snapshot::Snapshot;
use spillway_core::state::{ModelChange, PolicyState, StateError};
use spillway_core::time::Time;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// An operator's health override (HC-2); `None` elsewhere means `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Override {
    /// Force healthy.
    Healthy,
    /// Force unhealthy.
    Unhealthy,
}

impl Override {
    /// `healthy` / `unhealthy` / `auto` (None).
    pub fn parse(s: &str) -> Result<Option<Override>, String> {
        match s {
            "healthy" => Ok(Some(Override::Healthy)),
            "unhealthy" => Ok(Some(Override::Unhealthy)),
            "auto" => Ok(None),
            other => Err(format!("unknown health override `{other}` (healthy, unhealthy, auto)")),
        }
    }
}

/// Verdict changes logged per backend and [`FLAP_WINDOW`]; the rest are only counted.
pub const FLAP_LOG_LINES: u32 = 5;

/// The window of [`FLAP_LOG_LINES`].
pub const FLAP_WINDOW: Duration = Duration::from_secs(60);

/// How long a reload that adds backends waits for their next hops' MACs before it publishes
/// the new snapshot (without it their first packets wait for the MAC in the workers,
/// [`spillway_core`]'s data path queue); past it the reload applies all the same, logged.
pub const RESOLVE_AHEAD: Duration = Duration::from_millis(500);

/// A reload's wait for the next hops of the backends it adds ([`RESOLVE_AHEAD`]).
#[derive(Debug, Clone)]
pub struct ResolveAhead {
    hops: Vec<Addr>,
    started: Instant,
}

impl ResolveAhead {
    /// Asks `view` to resolve the next hops of the backends at `added`; waits for those that
    /// have no MAC yet.
    pub fn start(view: &dyn DataplaneView, added: &[Addr], now: Instant) -> ResolveAhead {
        ResolveAhead { hops: view.resolve_ahead(added), started: now }
    }

    /// `None` while some next hop has no MAC and the wait is not over; then the next hops
    /// still without one (empty when every one resolved).
    pub fn poll(&self, view: &dyn DataplaneView, now: Instant) -> Option<Vec<Addr>> {
        if self.hops.is_empty() {
            return Some(Vec::new());
        }
        let missing = view.unresolved(&self.hops);
        (missing.is_empty() || now.duration_since(self.started) >= RESOLVE_AHEAD).then_some(missing)
    }

    /// Logs how the wait ended (only when there was something to wait for).
    pub fn log(&self, missing: &[Addr], now: Instant) {
        let waited_ms = now.duration_since(self.started).as_millis();
        if !missing.is_empty() {
            let list: Vec<String> = missing.iter().map(Addr::to_string).collect();
            tracing::warn!(
                waited_ms,
                next_hops = %list.join(", "),
                "reload: next hops not resolved in time, applying all the same (the first \
                 packets to them wait for their MACs)"
            );
        } else if !self.hops.is_empty() {
            tracing::info!(
                waited_ms,
                next_hops = self.hops.len(),
                "reload: new next hops resolved"
            );
        }
    }
}

/// One backend's verdict changes and its log budget in the current window.
#[derive(Debug, Default, Clone, Copy)]
struct FlapLog {
    window: Duration,
    logged: u32,
    suppressed: u64,
    changes: u64,
}

/// Why the controller could not start or apply something.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The configuration was rejected; nothing changed.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A capacity limit of the policy state.
    #[error(transparent)]
    State(#[from] StateError),
    /// No backend matches the request.
    #[error("no backend {0}")]
    NoSuchBackend(String),
}

/// What a reload did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadReport {
    /// Backends added, removed (with deadlines) and undrained.
    pub change: ModelChange,
    /// Services after the reload.
    pub services: usize,
}

/// The control thread's state.
#[derive(Debug)]
pub struct Controller {
    path: PathBuf,
    config: Config,
    state: PolicyState,
    publisher: Publisher,
    /// Reloads applied and rejected.
    reloads: (u64, u64),
    /// Health verdict changes per backend, and their log budget.
    flaps: HashMap<BackendKey, FlapLog>,
    origin: Instant,
    overrides: HashMap<BackendKey, Override>,
    probes: HashMap<BackendKey, bool>,
    health: HealthChecker,
    events: Option<UnboundedReceiver<HealthEvent>>,
    next_deadline: Option<Time>,
    config_generation: u64,
    last_load: Option<LoadSample>,
    instance: Instance,
    sync: Option<Arc<crate::sync::SyncShared>>,
}

/// Cumulative new-connection counts at one instant, to turn into rates (advanced LB).
#[derive(Debug, Clone)]
struct LoadSample {
    at: Time,
    /// By backend slot.
    backends: Vec<u64>,
    /// Tracked connections by backend slot (a gauge, summed over workers).
    tracked: Vec<u64>,
    /// By (service id, zone slot).
    zones: HashMap<(u16, usize), u64>,
}

impl Controller {
    /// Start from a validated config: build the first snapshot and start probing. Must be
    /// called inside a tokio runtime (the health checker spawns its probes there).
    /// `origin` is the zero of [`Time`], shared with the workers.
    pub fn start(path: &Path, config: Config, origin: Instant) -> Result<Controller, ControlError> {
        let (tx, events) = unbounded_channel();
        let mut state = PolicyState::new(false);
        state.set_topology(config.advanced_topology());
        state.apply_model(config.to_model(), Time::ZERO)?;
        let first = state.snapshot(Time::ZERO);
        let mut c = Controller {
            path: path.to_path_buf(),
            config,
            state,
            publisher: Publisher::new(first),
            reloads: (0, 0),
            flaps: HashMap::new(),
            origin,
            overrides: HashMap::new(),
            probes: HashMap::new(),
            health: HealthChecker::new(tx),
            events: Some(events),
            next_deadline: None,
            config_generation: 1,
            last_load: None,
            instance: Instance::new(Instant::now()),
            sync: None,
        };
        c.start_probes();
        c.publish("start");
        Ok(c)
    }

    /// The instance's place in its fleet: phase, announced VIPs ([`crate::fleet`]).
    pub fn instance(&self) -> &Instance {
        &self.instance
    }

    /// The same, to change.
    pub fn instance_mut(&mut self) -> &mut Instance {
        &mut self.instance
    }

    /// Fleet sync's shared state, once its thread runs (the API and metrics read it).
    pub fn sync(&self) -> Option<&Arc<crate::sync::SyncShared>> {
        self.sync.as_ref()
    }

    /// Attach fleet sync's shared state (the daemon, when it starts the sync thread).
    pub fn set_sync(&mut self, shared: Arc<crate::sync::SyncShared>) {
        self.sync = Some(shared);
    }

    /// The decision-core time now.
    pub fn now(&self) -> Time {
        Time(u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX))
    }

    /// A snapshot reader for one worker.
    pub fn reader(&self) -> SnapshotReader {
        self.publisher.reader()
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.publisher.current()
    }

    /// Snapshots published and freed so far.
    pub fn publish_stats(&self) -> PublishStats {
        self.publisher.stats()
    }

    /// The running configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Increases with every configuration applied (1 for the first).
    pub fn config_generation(&self) -> u64 {
        self.config_generation
    }

    /// The configuration file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The policy state (for the API).
    pub fn state(&self) -> &PolicyState {
        &self.state
    }

    /// Health-check status of every probed backend.
    pub fn health_status(&self) -> Vec<TargetStatus> {
        self.health.status()
    }

    /// The operator override of a backend.
    pub fn override_of(&self, key: &BackendKey) -> Option<Override> {
        self.overrides.get(key).copied()
    }

    /// The probes' verdict of a backend (`None`: not probed).
    pub fn probe_verdict(&self, key: &BackendKey) -> Option<bool> {
        self.probes.get(key).copied()
    }

    /// The stream of health verdict changes, for the main loop to wait on (once); feed each
    /// event back with [`Controller::on_health_event`].
    pub fn take_health_events(&mut self) -> Option<UnboundedReceiver<HealthEvent>> {
        self.events.take()
    }

    /// Apply a health verdict change; publishes when the effective health changed. Each
    /// change is counted per backend; at most [`FLAP_LOG_LINES`] are logged per backend and
    /// minute, the rest only counted (a flapping backend cannot flood the log), and the next
    /// window's first line says how many went unlogged.
    pub fn on_health_event(&mut self, ev: HealthEvent) {
        let now = Duration::from_millis(self.now().0);
        let log = self.flaps.entry(ev.key.clone()).or_default();
        log.changes += 1;
        if now.saturating_sub(log.window) >= FLAP_WINDOW {
            if log.suppressed > 0 {
                tracing::info!(
                    backend = %ev.key,
                    unlogged = log.suppressed,
                    "health verdict changes not logged in the last minute (flapping)"
                );
            }
            *log = FlapLog { window: now, logged: 0, suppressed: 0, changes: log.changes };
        }
        if log.logged < FLAP_LOG_LINES {
            log.logged += 1;
            tracing::info!(backend = %ev.key, healthy = ev.healthy, "health check verdict changed");
            if log.logged == FLAP_LOG_LINES {
                tracing::warn!(
                    backend = %ev.key,
                    "backend flapping: further verdict changes this minute are counted \
                     (spillway_backend_health_changes_total), not logged"
                );
            }
        } else {
            log.suppressed += 1;
        }
        self.probes.insert(ev.key.clone(), ev.healthy);
        if self.apply_health() {
            self.publish("health");
        }
    }

    fn start_probes(&mut self) {
        let targets = self.config.health_targets();
        for t in &targets {
            if !self.probes.contains_key(&t.key) {
                self.probes.insert(t.key.clone(), t.check.initial_healthy);
            }
        }
        for key in self.config.unchecked_backends() {
            self.probes.insert(key, true);
        }
        let wanted: hashbrown::HashSet<BackendKey> =
            targets.iter().map(|t| t.key.clone()).chain(self.config.unchecked_backends()).collect();
        self.probes.retain(|k, _| wanted.contains(k));
        self.overrides.retain(|k, _| wanted.contains(k)); // HC-2: kept for backends that stay
        self.health.set_targets(targets);
        for key in wanted {
            if let Some(v) = self.health.verdict(&key) {
                self.probes.insert(key, v);
            }
        }
        self.apply_health();
    }

    /// Push effective health (override, else probe verdict) into the policy state; true when
    /// something changed.
    fn apply_health(&mut self) -> bool {
        let keys: Vec<BackendKey> = self.state.model().backends().map(|(k, _, _)| k).collect();
        let mut changed = false;
        for k in keys {
            let healthy = match self.overrides.get(&k) {
                Some(Override::Healthy) => true,
                Some(Override::Unhealthy) => false,
                None => self.probes.get(&k).copied().unwrap_or(false),
            };
            changed |= self.state.set_health(&k, healthy);
        }
        changed
    }

    /// Re-read the configuration file and apply it if it is valid (NX-3). On error nothing
    /// changes and the error is returned (and logged by the caller).
    pub fn reload(&mut self) -> Result<ReloadReport, ControlError> {
        let config = config::load(&self.path).inspect_err(|_| self.reloads.1 += 1)?;
        self.apply_config(config)
    }

    /// A reload that was rejected before it reached the controller (the admin API validates
    /// the file off the runtime thread): counted with the others.
    pub fn note_rejected_reload(&mut self) {
        self.reloads.1 += 1;
    }

    /// Reloads applied and rejected since the start.
    pub fn reload_counts(&self) -> (u64, u64) {
        self.reloads
    }

    /// Health verdict changes of `key` since the start, and how many of the current minute's
    /// went unlogged.
    pub fn health_changes(&self, key: &BackendKey) -> (u64, u64) {
        self.flaps.get(key).map_or((0, 0), |f| (f.changes, f.suppressed))
    }

    /// The addresses of the backends `config` has and the running configuration has not: the
    /// ones whose next hops a reload resolves before it publishes.
    pub fn added_backend_addresses(&self, config: &Config) -> Vec<Addr> {
        let running: hashbrown::HashSet<Addr> =
            self.state.model().backends().map(|(k, _, _)| k.endpoint.addr).collect();
        let mut added: Vec<Addr> = config
            .to_model()
            .backends()
            .map(|(k, _, _)| k.endpoint.addr)
            .filter(|a| !running.contains(a))
            .collect();
        added.sort_unstable();
        added.dedup();
        added
    }

    /// Apply an already validated configuration (NX-4: backends that stay keep their slots,
    /// so their connections keep their entries).
    ///
    /// A configuration that changes a start-only setting (`fleet.sync`, `fleet.table_file`) is
    /// rejected whole, naming each such field.
    pub fn apply_config(&mut self, config: Config) -> Result<ReloadReport, ControlError> {
        if let Err(e) = self.refuse_start_only_changes(&config) {
            self.reloads.1 += 1;
            return Err(e);
        }
        // Fleet sync's keys are read again at every reload (a key rotation): a key file that
        // cannot be read rejects the reload, and the running keys stay.
        let keys = match self.reload_sync_keys(&config) {
            Ok(keys) => keys,
            Err(e) => {
                self.reloads.1 += 1;
                return Err(e);
            }
        };
        let now = self.now();
        self.state.set_topology(config.advanced_topology());
        let change =
            self.state.apply_model(config.to_model(), now).inspect_err(|_| self.reloads.1 += 1)?;
        self.config = config;
        self.config_generation += 1;
        self.reloads.0 += 1;
        self.start_probes();
        for (key, deadline) in &change.removed {
            tracing::info!(backend = %key, deadline_ms = deadline.as_millis(), "backend removed, draining");
        }
        for key in &change.added {
            tracing::info!(backend = %key, "backend added");
        }
        for key in &change.undrained {
            tracing::info!(backend = %key, "backend re-added while draining: entries kept");
        }
        self.publish("reload");
        if let (Some(keys), Some(sync)) = (keys, &self.sync) {
            if **sync.keys.load() != keys {
                sync.keys.store(Arc::new(keys));
            }
        }
        Ok(ReloadReport { change, services: self.config.services.len() })
    }

    /// The sync key file of `config`, read, when fleet sync runs: the keys a reload switches
    /// to. A file that cannot be read is the reload's error, on `fleet.sync.key_file`.
    fn reload_sync_keys(
        &self,
        config: &Config,
    ) -> Result<Option<crate::sync::KeyRing>, ControlError> {
        let Some(s) = config.fleet_sync().filter(|_| self.sync.is_some()) else { return Ok(None) };
        crate::sync::KeyRing::read_file(&s.key_file).map(Some).map_err(|e| {
            let errors = vec![config::InvalidField {
                field: "fleet.sync.key_file".into(),
                location: None,
                message: e.to_string(),
            }];
            ConfigError::Invalid { path: self.path.clone(), errors }.into()
        })
    }

    /// A configuration that changes a start-only setting (`fleet.sync`, `fleet.table_file`)
    /// cannot be applied: the error names each such field.
    fn refuse_start_only_changes(&self, config: &Config) -> Result<(), ControlError> {
        let restart = config::fleet::restart_needed(&self.config, config);
        if restart.is_empty() {
            return Ok(());
        }
        // The parsed file has no positions left; the field path alone says where.
        let errors = restart
            .into_iter()
            .map(|e| config::InvalidField { field: e.field, location: None, message: e.message })
            .collect();
        Err(ConfigError::Invalid { path: self.path.clone(), errors }.into())
    }

    /// The snapshot `config` would make if it were applied now, applying nothing (a reload
    /// preview): validated as a reload would be (a start-only setting changed is an error),
    /// with today's health verdicts, overrides and drains; the backends it adds are counted
    /// healthy (their checks have not run yet: this is the picture once they pass). Also what
    /// the reload would add and remove.
    pub fn preview(&self, config: &Config) -> Result<(Snapshot, ModelChange), ControlError> {
        self.refuse_start_only_changes(config)?;
        self.reload_sync_keys(config)?;
        let now = self.now();
        let mut state = self.state.clone();
        state.set_topology(config.advanced_topology());
        let change = state.apply_model(config.to_model(), now)?;
        for key in &change.added {
            state.set_health(key, true);
        }
        Ok((state.snapshot(now), change))
    }

    /// The configured or draining backends whose address is `addr` (and, when given, whose
    /// service is `service`).
    pub fn backends_matching(&self, addr: Addr, service: Option<&str>) -> Vec<BackendKey> {
        self.state
            .model()
            .backends()
            .map(|(k, _, _)| k)
            .filter(|k| k.endpoint.addr == addr && service.is_none_or(|s| s == k.service))
            .collect()
    }

    /// Set (or clear, with `None`) the override of every backend at `addr` (HC-2).
    pub fn set_override(
        &mut self,
        addr: Addr,
        service: Option<&str>,
        value: Option<Override>,
    ) -> Result<Vec<BackendKey>, ControlError> {
        let keys = self.backends_matching(addr, service);
        if keys.is_empty() {
            return Err(ControlError::NoSuchBackend(addr.to_string()));
        }
        for k in &keys {
            match value {
                Some(v) => self.overrides.insert(k.clone(), v),
                None => self.overrides.remove(k),
            };
            tracing::info!(backend = %k, ?value, "health override set");
        }
        if self.apply_health() {
            self.publish("override");
        }
        Ok(keys)
    }

    /// Drain (no new connections, existing ones kept) or undrain every backend at `addr`.
    pub fn set_drained(
        &mut self,
        addr: Addr,
        service: Option<&str>,
        drained: bool,
    ) -> Result<Vec<BackendKey>, ControlError> {
        let keys = self.backends_matching(addr, service);
        if keys.is_empty() {
            return Err(ControlError::NoSuchBackend(addr.to_string()));
        }
        let mut changed = false;
        for k in &keys {
            changed |= self.state.set_drained(k, drained);
            tracing::info!(backend = %k, drained, "operator drain");
        }
        if changed {
            self.publish("drain");
        }
        Ok(keys)
    }

    /// Periodic work: free retired snapshots; republish when a draining deadline has passed
    /// (the slot is freed; entries were already invalid at lookup).
    pub fn tick(&mut self) {
        self.publisher.reclaim();
        if self.next_deadline.is_some_and(|d| self.now() >= d) {
            self.publish("drain deadline");
        }
    }

    /// Advanced load balancing (SPEC section 7): turn the workers' counters into measured load
    /// (new connections per second per group, offered load per client zone), fold it into the
    /// smoothed estimates and republish. The daemon calls it every second; it does nothing when
    /// no service is advanced. Tracked connections per group are the workers' per-backend
    /// tracked-entry gauges; per client zone they are apportioned by new-connection share.
    pub fn feed_load(&mut self, view: &dyn DataplaneView) {
        if !self.state.has_advanced() {
            self.last_load = None;
            return;
        }
        let now = self.now();
        let snap = self.publisher.current();
        let mut sample = LoadSample {
            at: now,
            backends: vec![0; snap.backends.len()],
            tracked: vec![0; snap.backends.len()],
            zones: HashMap::new(),
        };
        let zones = snap.zone_names.len().min(MAX_ZONES);
        for w in 0..view.workers() {
            let c = view.counters(w);
            for (slot, (n, live)) in
                sample.backends.iter_mut().zip(sample.tracked.iter_mut()).enumerate()
            {
                if let Some(t) = c.backends.get(slot) {
                    *n += t.new_connections.get();
                    *live = live.wrapping_add(t.tracked.get());
                }
            }
            for svc in snap.services().filter(|s| s.advanced.is_some()) {
                for z in (0..zones).chain([MAX_ZONES]) {
                    let zone = (z < MAX_ZONES).then(|| u16::try_from(z).unwrap_or(u16::MAX));
                    *sample.zones.entry((svc.id, z)).or_insert(0) += c.zone_new(svc.id, zone).get();
                }
            }
        }
        if let Some(prev) = self.last_load.take() {
            let secs = now.as_millis().saturating_sub(prev.at.as_millis()) as f64 / 1000.0;
            if secs > 0.0 {
                let rate = |now: u64, before: u64| now.saturating_sub(before) as f64 / secs;
                // Per group: new connections per second, and tracked connections now.
                let mut groups: HashMap<(u16, Arc<str>), (f64, f64)> = HashMap::new();
                for (slot, b) in snap.backends.iter().enumerate() {
                    let before = prev.backends.get(slot).copied().unwrap_or(0);
                    let g = groups.entry((b.service, Arc::clone(&b.group))).or_insert((0.0, 0.0));
                    g.0 += rate(sample.backends[slot], before);
                    g.1 += sample.tracked[slot] as f64;
                }
                for svc in snap.services().filter(|s| s.advanced.is_some()) {
                    let mut total = (0.0, 0.0);
                    for ((_, group), (r, live)) in
                        groups.iter().filter(|((sid, _), _)| *sid == svc.id)
                    {
                        total = (total.0 + r, total.1 + live);
                        let load = Load { rate: *r, connections: *live };
                        self.state.set_group_load(&svc.name, group, load);
                    }
                    // Tracked connections are not counted per client zone: each zone is given
                    // the service's connections in proportion to its share of new connections.
                    for z in (0..zones).chain([MAX_ZONES]) {
                        let now_n = sample.zones.get(&(svc.id, z)).copied().unwrap_or(0);
                        let before = prev.zones.get(&(svc.id, z)).copied().unwrap_or(0);
                        let zone = snap.zone_names.get(z).map(String::as_str);
                        let r = rate(now_n, before);
                        let share = if total.0 > 0.0 { r / total.0 } else { 0.0 };
                        let load = Load { rate: r, connections: share * total.1 };
                        self.state.set_client_load(&svc.name, zone, load);
                    }
                }
            }
        }
        self.last_load = Some(sample);
        self.state.advance_load(now);
        self.publish("load");
    }

    /// Build and publish a snapshot, logging what changed.
    pub fn publish(&mut self, why: &str) {
        let now = self.now();
        // FS-11: tables become the ones served once the instance is ready (the announcer's
        // readiness: settled verdicts); without an announcer, once every check has a result.
        if !self.state.is_settled()
            && (self.instance.is_ready()
                || (self.config.announce.is_none()
                    && self.health_status().iter().all(|t| t.last_result.is_some())))
        {
            self.state.settle();
        }
        let next = self.state.snapshot(now);
        let prev = self.publisher.current();
        log_changes(why, &prev, &next);
        self.next_deadline = next
            .backends
            .iter()
            .filter_map(|b| match b.status {
                spillway_core::snapshot::BackendStatus::Draining { deadline } => Some(deadline),
                _ => None,
            })
            .min();
        self.publisher.publish(next);
    }
}

/// Log, at info level, what a new snapshot changes for each service.
fn log_changes(why: &str, prev: &Snapshot, next: &Snapshot) {
    for svc in next.services() {
        let old = prev.services().find(|s| s.name == svc.name);
        let kind = svc.eligible.kind;
        let (old_kind, moved) = match old {
            Some(o) => (
                Some(o.eligible.kind),
                slots_moved(&o.default_choice.table, &svc.default_choice.table),
            ),
            None => (None, svc.default_choice.table.size() as usize),
        };
        if old_kind != Some(kind) || moved > 0 {
            tracing::info!(
                why,
                service = &*svc.name,
                eligible = kind.as_str(),
                previous = old_kind.map_or("none", |k| k.as_str()),
                size = svc.default_choice.members.len(),
                slots_moved = moved,
                "service eligible set"
            );
        }
        for (z, choice) in svc.zone_choices.iter().enumerate() {
            let was = old.and_then(|o| o.zone_choices.get(z)).map(|c| (c.zonal_match, c.spilled));
            if choice.zonal_match && was != Some((choice.zonal_match, choice.spilled)) {
                tracing::info!(
                    why,
                    service = &*svc.name,
                    zone = next.zone_names.get(z).map_or("?", String::as_str),
                    spilled = choice.spilled,
                    size = choice.members.len(),
                    "zonal affinity"
                );
            }
        }
    }
    for old in prev.services() {
        if !next.services().any(|s| s.name == old.name) {
            tracing::info!(why, service = &*old.name, "service removed");
        }
    }
}
