//! The replies' shapes ([`super::types`]) filled from the controller's state, the published
//! snapshot and the decision core's explanations. Nothing here locks or awaits: the handlers
//! pass what they read under the lock.

use super::format::*;
use crate::controller::{Controller, ReloadReport};
use crate::health::TargetStatus;
use hashbrown::HashMap;
use spillway_api::types::*;
use spillway_core::conntrack::Entry;
use spillway_core::decide::FLAG_CREATED_UNHEALTHY;
use spillway_core::explain::Explanation;
use spillway_core::flow::PacketInfo;
use spillway_core::model::{BackendKey, Endpoint, Model, Service};
use spillway_core::snapshot::{
    AdvancedClientView, AdvancedView, BackendRef, BackendStatus, ServiceView, Snapshot,
};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// `GET /v1/status` from the controller; the workers' conntrack totals and generations are
/// left for the caller to add, off the lock.
pub(super) fn status_reply(c: &Controller, snap: &Snapshot, workers: usize) -> StatusReply {
    let mut counts = BackendCounts::default();
    for (slot, b) in snap.backends.iter().enumerate() {
        match b.status {
            BackendStatus::Active => {
                counts.total += 1;
                counts.healthy += usize::from(b.healthy);
                let slot = u16::try_from(slot).unwrap_or(u16::MAX);
                if c.state().key_of(slot).is_some_and(|k| c.state().is_drained(k)) {
                    counts.drained += 1;
                }
            }
            BackendStatus::Draining { .. } => counts.draining += 1,
            BackendStatus::Free => {}
        }
    }
    StatusReply {
        uptime_ms: c.now().as_millis(),
        generation: snap.generation,
        config: c.path().display().to_string(),
        workers,
        services: snap.services().count(),
        advanced_services: snap.services().filter(|s| s.advanced.is_some()).count(),
        auto_drained_groups: snap
            .services()
            .filter_map(|s| s.advanced.as_ref())
            .map(|a| a.groups.iter().filter(|g| g.auto_drained).count())
            .sum(),
        backends: counts,
        conntrack: ConntrackTotals::default(),
        worker_generations: Vec::new(),
    }
}

/// One service of `GET /v1/services`: its rules and policy from the model, its eligible set
/// and zones from the snapshot.
pub(super) fn service_info(snap: &Snapshot, model: &Model, svc: &ServiceView) -> ServiceInfo {
    let m = model.services.iter().find(|s| *s.name == *svc.name);
    let rules = m.map(|m| m.rules.iter().map(rule_info).collect()).unwrap_or_default();
    let members = |slots: &[u16]| -> Vec<String> {
        let mut v: Vec<String> =
            slots.iter().filter_map(|&s| snap.backend(s).map(|b| b.endpoint.to_string())).collect();
        v.sort();
        v
    };
    let zones = svc
        .zone_choices
        .iter()
        .enumerate()
        .map(|(z, ch)| ZoneChoiceInfo {
            zone: zone_name(snap, u16::try_from(z).unwrap_or(u16::MAX)),
            zonal_match: ch.zonal_match,
            spilled: ch.spilled,
            size: ch.members.len(),
        })
        .collect();
    ServiceInfo {
        name: svc.name.to_string(),
        id: svc.id,
        rules,
        policy: policy_info(svc, m),
        epoch: svc.epoch,
        eligible_kind: svc.eligible.kind.as_str().to_owned(),
        eligible_size: svc.eligible.members.len(),
        eligible: members(&svc.eligible.members),
        default_size: svc.default_choice.members.len(),
        zones,
        advanced: svc.advanced.as_deref().map(|a| advanced_info(snap, a)),
        table_fingerprint: hex(snap.table_fingerprint(svc)),
    }
}

fn rule_info(r: &spillway_core::model::Rule) -> RuleInfo {
    RuleInfo {
        destination: rule_destination(&r.dest),
        protocol: rule_protocol(r.protocol).to_owned(),
        ports: rule_ports(&r.ports),
    }
}

/// The policy of a service: the snapshot's view, with what only the model has (draining
/// timeout, failover settings, zonal affinity) when the model has the service.
fn policy_info(svc: &ServiceView, m: Option<&Service>) -> PolicyInfo {
    let (zonal, ratio) = zonal_affinity(m.map(|m| m.zonal).unwrap_or_default());
    let failover = m.map(|m| m.failover).unwrap_or_default();
    PolicyInfo {
        session_affinity: svc.affinity.as_str().to_owned(),
        symmetric_hashing: svc.symmetric_hashing,
        tracking_mode: svc.tracking.as_str().to_owned(),
        persistence: svc.persistence.as_str().to_owned(),
        idle_timeout_sec: svc.idle_timeout_ms / 1000,
        draining_timeout_sec: m.map_or(0, |m| m.draining_timeout_secs),
        has_failover_groups: m.is_some_and(|m| m.has_failover_groups()),
        failover_ratio: failover.failover_ratio,
        drop_traffic_if_unhealthy: failover.drop_traffic_if_unhealthy,
        disable_connection_drain_on_failover: failover.disable_connection_drain_on_failover,
        zonal_affinity: zonal.to_owned(),
        spillover_ratio: ratio,
        encapsulation: encapsulation(svc.encap),
    }
}

/// A client zone's published split: `{group: share}`.
fn group_shares(a: &AdvancedView, c: &AdvancedClientView) -> BTreeMap<String, f64> {
    a.groups.iter().zip(&c.weights).map(|(g, w)| (g.name.to_string(), unsigned_zero(*w))).collect()
}

/// Section 7 state of a service, as `GET /v1/services` shows it.
fn advanced_info(snap: &Snapshot, a: &AdvancedView) -> AdvancedInfo {
    let groups = a
        .groups
        .iter()
        .map(|g| {
            let bounded = g.capacity.is_finite();
            AdvancedGroupInfo {
                name: g.name.to_string(),
                zone: zone_name(snap, g.zone),
                preferred: g.preferred,
                endpoints: g.endpoints,
                healthy: g.healthy,
                capacity: bounded.then_some(g.capacity),
                utilisation: (bounded && g.capacity > 0.0).then(|| g.utilisation(a.unit)),
                measured: unsigned_zero(g.measured.get(a.unit)),
                expected_load: unsigned_zero(g.expected_load),
                auto_drained: g.auto_drained,
                retained: g.retained,
            }
        })
        .collect();
    let clients = a
        .clients
        .iter()
        .map(|c| AdvancedClientInfo {
            zone: c.zone.map(|z| zone_name(snap, z)),
            demand: unsigned_zero(c.demand),
            shares: group_shares(a, c),
        })
        .collect();
    AdvancedInfo {
        algorithm: a.algorithm.as_str().to_owned(),
        unit: unit_name(a.unit).to_owned(),
        failover_health_threshold: a.failover_health_threshold,
        groups,
        clients,
    }
}

/// Section 7 part of an explanation: the client zone's split and the group of `backend`.
fn advanced_explain(
    snap: &Snapshot,
    svc: &ServiceView,
    p: &PacketInfo,
    backend: Option<Endpoint>,
) -> (Option<BTreeMap<String, f64>>, Option<String>) {
    let Some(a) = &svc.advanced else { return (None, None) };
    let zone = snap.client_zone(p.src);
    let client = a
        .clients
        .iter()
        .find(|c| c.zone == zone)
        .or_else(|| a.clients.iter().find(|c| c.zone.is_none()));
    let group = backend.and_then(|e| {
        snap.backends
            .iter()
            .find(|b| b.service == svc.id && b.endpoint == e && b.status != BackendStatus::Free)
            .map(|b| b.group.to_string())
    });
    (client.map(|c| group_shares(a, c)), group)
}

/// One row per configured or draining backend that `keep` accepts, in slot order.
pub(super) fn backend_rows(c: &Controller, keep: impl Fn(&BackendKey) -> bool) -> Vec<BackendInfo> {
    let snap = c.snapshot();
    let state = c.state();
    let weights: HashMap<BackendKey, u32> =
        state.model().backends().map(|(k, _, g)| (k, g.weight.max(1))).collect();
    let checks: HashMap<BackendKey, TargetStatus> =
        c.health_status().into_iter().map(|t| (t.key.clone(), t)).collect();
    let now = c.now();
    let mut rows = Vec::new();
    for (slot, b) in snap.backends.iter().enumerate() {
        let slot = u16::try_from(slot).unwrap_or(u16::MAX);
        let Some(key) = state.key_of(slot) else { continue };
        if b.status == BackendStatus::Free || !keep(key) {
            continue;
        }
        let svc = snap.service(b.service);
        let deadline = match b.status {
            BackendStatus::Draining { deadline } => Some(deadline),
            _ => None,
        };
        let check = checks.get(key);
        rows.push(BackendInfo {
            service: key.service.clone(),
            address: b.endpoint.addr.to_string(),
            port: b.endpoint.port,
            group: b.group.to_string(),
            zone: zone_name(&snap, b.zone),
            role: if b.failover { "failover" } else { "primary" }.to_owned(),
            probe: probe(c.probe_verdict(key)).to_owned(),
            health_override: health_override(c.override_of(key)).to_owned(),
            healthy: b.healthy,
            drained: state.is_drained(key),
            status: if deadline.is_some() { "draining" } else { "active" }.to_owned(),
            draining_deadline_ms: deadline.map(|d| d.as_millis()),
            draining_remaining_ms: deadline.map(|d| d.as_millis().saturating_sub(now.as_millis())),
            weight: weights.get(key).copied(),
            slot,
            generation: b.gen,
            eligible: svc.is_some_and(|s| s.default_choice.contains(slot)),
            check: check.map(|t| t.check.clone()),
            last_result: check.and_then(|t| t.last_result).map(|r| r.as_str().to_owned()),
            last_latency_ms: check.and_then(|t| t.last_latency).map(|d| d.as_secs_f64() * 1e3),
        });
    }
    rows
}

/// The reply to an override or a drain: the backends it changed, as they are now.
pub(super) fn action_reply(c: &Controller, keys: &[BackendKey]) -> ActionReply {
    ActionReply {
        generation: c.snapshot().generation,
        backends: backend_rows(c, |k| keys.contains(k)),
    }
}

/// `GET /v1/instance`: the instance's phase, announced VIPs and table fingerprints.
pub(super) fn instance_reply(c: &Controller) -> InstanceReply {
    let quiet_after =
        Duration::from_secs_f64(c.config().announce.as_ref().map_or(2.0, |a| a.quiet_sec));
    let (i, now) = (c.instance(), Instant::now());
    let quiet = i.quiet_for(now);
    let snap = c.snapshot();
    InstanceReply {
        phase: i.phase().as_str().to_owned(),
        in_phase_sec: i.in_phase_for(now).as_secs_f64(),
        waiting_for: i.waiting_for().map(str::to_owned),
        quiet_for_sec: quiet.as_secs_f64(),
        traffic_stopped: i.traffic_stopped(now, quiet_after),
        wanted: i.wanted().iter().map(|(a, s)| (a.to_string(), s.clone())).collect(),
        announced: i.announced().iter().map(ToString::to_string).collect(),
        route_errors: i.route_updates().0,
        last_error: i.route_updates().2.map(str::to_owned),
        bird: i.bird().cloned(),
        fingerprints: snap
            .services()
            .map(|s| (s.name.to_string(), hex(snap.table_fingerprint(s))))
            .collect(),
        fleet_sync: c.sync().map(|s| s.reply()),
    }
}

/// What a reload changed, each list sorted.
pub(super) fn reload_reply(report: &ReloadReport, generation: u64) -> ReloadReply {
    let mut added: Vec<String> = report.change.added.iter().map(ToString::to_string).collect();
    added.sort();
    let mut undrained: Vec<String> =
        report.change.undrained.iter().map(ToString::to_string).collect();
    undrained.sort();
    let mut removed: Vec<RemovedBackend> = report
        .change
        .removed
        .iter()
        .map(|(k, d)| RemovedBackend {
            backend: k.to_string(),
            draining_deadline_ms: d.as_millis(),
        })
        .collect();
    removed.sort_by(|a, b| a.backend.cmp(&b.backend));
    ReloadReply { generation, services: report.services, added, removed, undrained }
}

/// A worker's connection-table entry, with the backend its reference names now.
pub(super) fn entry_info(snap: &Snapshot, e: &Entry) -> EntryInfo {
    let r = BackendRef::from_u32(e.value.backend);
    let b = snap.backend(r.slot);
    EntryInfo {
        backend: b.map(|b| b.endpoint.to_string()),
        backend_service: b.and_then(|b| snap.service(b.service)).map(|s| s.name.to_string()),
        slot: r.slot,
        generation: r.gen,
        current_generation: b.is_some_and(|b| b.gen == r.gen && b.status != BackendStatus::Free),
        idle_ms: e.idle_ms,
        epoch: e.value.epoch,
        created_unhealthy: e.value.flags & FLAG_CREATED_UNHEALTHY != 0,
    }
}

/// How many workers were asked about a flow and how many answered.
pub(super) struct Asked {
    pub(super) asked: usize,
    pub(super) answered: usize,
}

/// `GET /v1/explain`: the decision core's explanation `x` of `p`, with the entry it was given
/// (`best`: the worker and its entry) and the section 7 split.
pub(super) fn explain_reply(
    p: &PacketInfo,
    snap: &Snapshot,
    x: Explanation,
    best: Option<(usize, &Entry)>,
    workers: Asked,
) -> ExplainReply {
    let endpoint = |e: Option<Endpoint>| e.map(|e| e.to_string());
    let (group_shares, backend_group) = match snap.service_for(p) {
        Some(svc) => advanced_explain(snap, svc, p, x.backend),
        None => (None, None),
    };
    let entry = match (best, x.entry_valid) {
        (Some((w, e)), Some(valid)) => Some(ExplainEntry {
            worker: w,
            entry: entry_info(snap, e),
            valid: valid.is_ok(),
            invalid_reason: valid.err().map(|r| r.as_str().to_owned()),
        }),
        _ => None,
    };
    ExplainReply {
        flow: flow_str(p),
        generation: snap.generation,
        service: x.service,
        client_zone: x.client_zone,
        eligible_kind: x.kind.map(|k| k.as_str().to_owned()),
        zonal_match: x.zonal_match,
        spilled: x.spilled,
        eligible_size: x.eligible_size,
        new_connection_syn: x.new_connection_syn,
        tracking_key: x.tracking_key.as_ref().map(key_str),
        tracking_hash: hex(x.tracking_hash),
        selection_hash: hex(x.selection_hash),
        hashed_backend: endpoint(x.hashed_backend),
        workers_asked: workers.asked,
        workers_answered: workers.answered,
        entry,
        backend: endpoint(x.backend),
        reason: x.reason.to_owned(),
        group_shares,
        backend_group,
        quic: x.quic.map(|d| QuicDecodeInfo {
            config: d.config,
            server_id: d.server_id,
            backend: endpoint(d.backend),
            fallback: d.fallback.map(|f| f.as_str().to_owned()),
        }),
    }
}
