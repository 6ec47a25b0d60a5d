//! `POST /v1/reload/preview`: what a candidate configuration would do, applying nothing
//! (`spillwayctl reload --dry-run FILE`).
//!
//! The candidate is parsed and validated as a reload would be, and turned into the snapshot it
//! would make ([`crate::controller::Controller::preview`]: today's health, the backends it adds
//! counted healthy). Against the running snapshot it reports, per service, the share of its
//! consistent-hash table positions whose backend changes, and per backend its share of the
//! table (of new connections) before and after; then every live connection in the workers'
//! tables (read as `flows` reads them) is judged by what the candidate would do to it, with the
//! judgement the packet path applies to an entry it finds ([`judge_entry`]: the candidate
//! keeps the running state's service ids and backend slots, so an entry reads the same in
//! both):
//!
//! - **stays**: its entry stays valid and its backend is still the one its table position
//!   names;
//! - **moves**: its entry stays valid, but its table position now names another backend: it
//!   keeps its entry, and would change backend only if it lost it (idle timeout, an instance
//!   death without fleet sync);
//! - **drains**: its backend is removed with connection draining: it keeps its backend until
//!   the draining deadline (CD-3);
//! - **dropped**: its next packet would not find its entry valid and would be handled as a new
//!   connection (CT-12), with the reason the path would count: its backend removed without
//!   draining (`replaced_drained`), an idle timeout now shorter than its idle time
//!   (`replaced_expired`), a failover flush (`replaced_flushed`), its backend unhealthy while
//!   the service no longer persists (`replaced_unhealthy`); or its service or forwarding rule is
//!   gone (CD-5). A TCP connection's next packet is then reset or dropped.
//!
//! Connections whose entry is already invalid under the running snapshot (expired, not yet
//! swept) are not counted: the candidate changes nothing for them.
//!
//! It also lists, per service and client zone, the zonal choices the candidate changes (a zone
//! that would spill to every zone, lose its zonal match, or get another number of backends).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use spillway_core::conntrack::Entry;
use spillway_core::decide::{judge_entry, pick_now, EntryFate, ForwardReason};
use spillway_core::model::{Endpoint, ZoneId};
use spillway_core::snapshot::{BackendStatus, ServiceView, Snapshot};
use spillway_core::time::Time;

use super::error::{config_error, HttpError};
use super::flows::{pinned, scan};
use super::format::sock;
use super::{lock, Api};
use crate::config::Config;
use spillway_api::types::{
    BackendPreview, ConnectionFates, PreviewFlow, PreviewReply, ServicePreview, ZoneChoice,
    ZonePreview,
};

/// Flows of each fate listed as examples (`--verbose`).
const EXAMPLES: usize = 20;

/// The request: the candidate configuration's text.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PreviewRequest {
    /// The YAML of the candidate configuration.
    config: String,
}

/// What a candidate does to one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Stays,
    Moves,
    Drains { remaining_ms: u64 },
    Dropped(&'static str),
}

pub(super) async fn preview(
    State(api): State<Api>,
    body: Bytes,
) -> Result<Json<PreviewReply>, HttpError> {
    let req: PreviewRequest = serde_json::from_slice(&body)
        .map_err(|e| HttpError::bad_request(format!("bad JSON body: {e}")))?;
    let config =
        Config::from_yaml_with_keys(Path::new("(candidate)"), &req.config).map_err(config_error)?;
    let (old, new, change) = {
        let c = lock(&api.controller);
        let (new, change) = c.preview(&config).map_err(HttpError::from)?;
        (c.snapshot(), new, change)
    };
    let t0 = Instant::now();
    let mut reply = PreviewReply {
        added: change.added.iter().map(ToString::to_string).collect(),
        removed: change.removed.iter().map(|(k, _)| k.to_string()).collect(),
        services: services(&old, &new),
        backends: backends(&old, &new),
        zones: zones(&old, &new),
        connections: ConnectionFates::default(),
        by_backend: BTreeMap::new(),
        examples: Vec::new(),
        incomplete_workers: Vec::new(),
        would_drop: false,
        duration_ms: 0,
    };
    let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    reply.incomplete_workers = scan(&api, |_, e, running, now| {
        // An entry live under the snapshot of its slice (a reload since the preview's start is
        // the running state it leaves), judged against the candidate.
        if !matches!(
            judge_entry(&e.key, &e.value, e.idle_ms, running, now),
            EntryFate::Valid { .. }
        ) {
            return;
        }
        let (Some(svc), Some(b)) = pinned(e, running) else { return };
        let (svc_name, endpoint) = (svc.name.to_string(), b.endpoint);
        let f = fate(e, &new, now);
        tally(&mut reply.connections, f);
        let backend = endpoint.to_string();
        tally(reply.by_backend.entry(format!("{svc_name}/{backend}")).or_default(), f);
        let name = f.name();
        let n = counts.entry(name).or_default();
        if *n < EXAMPLES && f != Fate::Stays {
            *n += 1;
            let k = &e.key;
            reply.examples.push(PreviewFlow {
                fate: name.into(),
                why: match f {
                    Fate::Dropped(why) => Some(why.into()),
                    Fate::Drains { remaining_ms } => {
                        Some(format!("draining, {} s left", remaining_ms / 1000))
                    }
                    Fate::Moves => Some("its table position names another backend".into()),
                    Fate::Stays => None,
                },
                client: sock(k.src, k.sport),
                vip: sock(k.dst, k.dport),
                service: svc_name.clone(),
                backend,
            });
        }
    })
    .await;
    reply.would_drop = reply.connections.dropped > 0;
    reply.duration_ms = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok(Json(reply))
}

impl Fate {
    fn name(self) -> &'static str {
        match self {
            Fate::Stays => "stays",
            Fate::Moves => "moves",
            Fate::Drains { .. } => "drains",
            Fate::Dropped(_) => "dropped",
        }
    }
}

/// One connection more of fate `f`.
fn tally(c: &mut ConnectionFates, f: Fate) {
    match f {
        Fate::Stays => c.stay += 1,
        Fate::Moves => c.moves += 1,
        Fate::Drains { .. } => c.drain += 1,
        Fate::Dropped(_) => c.dropped += 1,
    }
}

/// What the candidate snapshot `new` does to a connection live under the running one
/// (module doc).
fn fate(e: &Entry, new: &Snapshot, now: Time) -> Fate {
    match judge_entry(&e.key, &e.value, e.idle_ms, new, now) {
        EntryFate::Unreachable if new.service(e.key.service).is_none() => {
            Fate::Dropped("its service is removed")
        }
        EntryFate::Unreachable => Fate::Dropped("its forwarding rule is removed"),
        EntryFate::Replaced(reason) => Fate::Dropped(match reason {
            ForwardReason::ReplacedExpired => "its idle time reaches the new idle timeout",
            ForwardReason::ReplacedDrained => "its backend is removed without draining",
            ForwardReason::ReplacedFlushed => "its service's failover flushes its entries",
            ForwardReason::ReplacedUnhealthy => {
                "its backend is unhealthy and the service no longer persists on it"
            }
            other => other.as_str(),
        }),
        EntryFate::Valid { backend } => match new.backend(backend).map(|b| b.status) {
            Some(BackendStatus::Draining { deadline }) => {
                Fate::Drains { remaining_ms: deadline.as_millis().saturating_sub(now.as_millis()) }
            }
            _ if pick_now(&e.key, new) == Some(backend) => Fate::Stays,
            _ => Fate::Moves,
        },
    }
}

/// The backend each position of a service's default table names, by endpoint.
fn positions(snap: &Snapshot, svc: &ServiceView) -> Vec<Option<Endpoint>> {
    svc.default_choice
        .table
        .entries()
        .iter()
        .map(|&slot| snap.backend(slot).map(|b| b.endpoint))
        .collect()
}

/// Per service: added, removed, or the share of its table positions whose backend changes.
fn services(old: &Snapshot, new: &Snapshot) -> Vec<ServicePreview> {
    let mut names: Vec<String> =
        old.services().chain(new.services()).map(|s| s.name.to_string()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let o = old.services().find(|s| *s.name == *name);
            let n = new.services().find(|s| *s.name == *name);
            let (change, moved) = match (o, n) {
                (Some(o), Some(n)) => {
                    let (a, b) = (positions(old, o), positions(new, n));
                    let moved = if a.len() == b.len() {
                        a.iter().zip(&b).filter(|(x, y)| x != y).count() as f64
                            / a.len().max(1) as f64
                    } else {
                        1.0
                    };
                    (if moved > 0.0 { "changed" } else { "same" }, moved)
                }
                (None, Some(_)) => ("added", 1.0),
                _ => ("removed", 1.0),
            };
            ServicePreview { service: name, change: change.into(), positions_changed: moved }
        })
        .collect()
}

/// Per service in both snapshots and client zone in either: the zonal choice before and after,
/// where they differ (a zone whose clients would now spill, lose their zonal match, or see
/// another number of backends).
fn zones(old: &Snapshot, new: &Snapshot) -> Vec<ZonePreview> {
    let mut names: Vec<&String> = old.zone_names.iter().chain(&new.zone_names).collect();
    names.sort();
    names.dedup();
    let choice = |snap: &Snapshot, svc: &ServiceView, zone: &str| {
        let id = snap.zone_names.iter().position(|z| z == zone)?;
        let c = svc.choice(Some(ZoneId::try_from(id).ok()?));
        Some(ZoneChoice {
            zonal_match: c.zonal_match,
            spilled: c.spilled,
            eligible: c.members.len(),
        })
    };
    let mut out = Vec::new();
    for n in new.services() {
        let Some(o) = old.services().find(|s| s.name == n.name) else { continue };
        for zone in &names {
            let (before, after) = (choice(old, o, zone), choice(new, n, zone));
            if before != after {
                let (service, zone) = (n.name.to_string(), (*zone).clone());
                out.push(ZonePreview { service, zone, before, after });
            }
        }
    }
    out
}

/// Per backend: its share of its service's table (its share of new connections) before and
/// after.
fn backends(old: &Snapshot, new: &Snapshot) -> Vec<BackendPreview> {
    let shares = |snap: &Snapshot| -> BTreeMap<(String, String), f64> {
        let mut out = BTreeMap::new();
        for svc in snap.services() {
            let pos = positions(snap, svc);
            let each = 1.0 / pos.len().max(1) as f64;
            for e in pos.iter().flatten() {
                *out.entry((svc.name.to_string(), e.to_string())).or_default() += each;
            }
        }
        out
    };
    let (before, after) = (shares(old), shares(new));
    let mut keys: Vec<&(String, String)> = before.keys().chain(after.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .map(|k| BackendPreview {
            service: k.0.clone(),
            backend: k.1.clone(),
            share_before: before.get(k).copied().unwrap_or(0.0),
            share_after: after.get(k).copied().unwrap_or(0.0),
        })
        .collect()
}
