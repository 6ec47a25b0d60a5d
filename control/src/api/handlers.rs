//! The handlers: read the request, take the controller's lock for a short, non-awaiting
//! section (or ask the workers, with [`LOOKUP_TIMEOUT`]), reply. Parsing is in
//! [`super::query`], the replies' contents in [`super::replies`].

use super::error::{config_error, HttpError};
use super::format::{flow_str, hex, key_str};
use super::query::{self, flow_packet, json_body, parse_addr, BackendsQuery, FlowQuery};
use super::replies::*;
use super::LOOKUP_TIMEOUT;
use super::{lock, Api};
use crate::config;
use crate::controller::{Override, ResolveAhead};
use crate::instance::Phase;
use crate::view::DataplaneView;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use spillway_api::types::*;
use spillway_core::conntrack::Entry;
use spillway_core::explain::explain;
use spillway_core::flow::{FlowKey, PacketInfo};
use spillway_core::wire::MacDisplay;
use std::time::{Duration, Instant};

/// How often a reload checks whether the next hops it waits for are resolved.
const RESOLVE_POLL: Duration = Duration::from_millis(5);

// ---- state ------------------------------------------------------------------------------

pub(super) async fn status(State(api): State<Api>) -> Json<StatusReply> {
    let (mut reply, snap) = {
        let c = lock(&api.controller);
        let snap = c.snapshot();
        (status_reply(&c, &snap, api.view.workers()), snap)
    };
    drop(snap);
    for w in 0..api.view.workers() {
        let c = api.view.counters(w);
        reply.conntrack.entries += c.ct_entries.get();
        reply.conntrack.capacity += c.ct_capacity.get();
        reply.worker_generations.push(c.snapshot_generation.get());
    }
    Json(reply)
}

pub(super) async fn services(State(api): State<Api>) -> Json<ServicesReply> {
    let c = lock(&api.controller);
    let snap = c.snapshot();
    let model = c.state().model();
    let services = snap.services().map(|svc| service_info(&snap, model, svc)).collect();
    Json(ServicesReply { generation: snap.generation, services })
}

pub(super) async fn backends(
    State(api): State<Api>,
    q: Result<Query<BackendsQuery>, QueryRejection>,
) -> Result<Json<BackendsReply>, HttpError> {
    let q = query::query(q)?;
    let c = lock(&api.controller);
    let rows = backend_rows(&c, |k| q.service.as_deref().is_none_or(|s| s == k.service));
    Ok(Json(BackendsReply { generation: c.snapshot().generation, backends: rows }))
}

/// `GET /v1/instance`: the instance's phase, announced VIPs and table fingerprints.
pub(super) async fn instance(State(api): State<Api>) -> Json<InstanceReply> {
    Json(instance_reply(&lock(&api.controller)))
}

// ---- overrides and drains ----------------------------------------------------------------

pub(super) async fn set_health(
    State(api): State<Api>,
    UrlPath(addr): UrlPath<String>,
    body: Bytes,
) -> Result<Json<ActionReply>, HttpError> {
    let addr = parse_addr(&addr)?;
    let req: HealthRequest = json_body(&body)?;
    let Some(health) = req.health else {
        return Err(HttpError::bad_request("missing `health` (healthy, unhealthy or auto)"));
    };
    let value = Override::parse(&health).map_err(HttpError::bad_request)?;
    let mut c = lock(&api.controller);
    let keys = c.set_override(addr, req.service.as_deref(), value)?;
    Ok(Json(action_reply(&c, &keys)))
}

/// `POST /v1/instance/drain`: withdraw every VIP, keep forwarding what arrives.
pub(super) async fn drain_instance(
    State(api): State<Api>,
    body: Bytes,
) -> Result<Json<InstanceReply>, HttpError> {
    set_instance_drained(&api, &body, true)
}

/// `POST /v1/instance/undrain`: announce again (once ready).
pub(super) async fn undrain_instance(
    State(api): State<Api>,
    body: Bytes,
) -> Result<Json<InstanceReply>, HttpError> {
    set_instance_drained(&api, &body, false)
}

fn set_instance_drained(
    api: &Api,
    body: &[u8],
    drained: bool,
) -> Result<Json<InstanceReply>, HttpError> {
    query::no_parameters(body)?;
    let mut c = lock(&api.controller);
    if c.instance().phase() == Phase::Stopping {
        return Err(HttpError::new(
            StatusCode::CONFLICT,
            "the instance is stopping: its VIPs are withdrawn and stay so",
        ));
    }
    c.instance_mut().set_drained(drained, Instant::now());
    Ok(Json(instance_reply(&c)))
}

pub(super) async fn drain(
    State(api): State<Api>,
    UrlPath(addr): UrlPath<String>,
    body: Bytes,
) -> Result<Json<ActionReply>, HttpError> {
    set_drained(&api, &addr, &body, true)
}

pub(super) async fn undrain(
    State(api): State<Api>,
    UrlPath(addr): UrlPath<String>,
    body: Bytes,
) -> Result<Json<ActionReply>, HttpError> {
    set_drained(&api, &addr, &body, false)
}

fn set_drained(
    api: &Api,
    addr: &str,
    body: &[u8],
    drained: bool,
) -> Result<Json<ActionReply>, HttpError> {
    let addr = parse_addr(addr)?;
    let req: DrainRequest = json_body(body)?;
    let mut c = lock(&api.controller);
    let keys = c.set_drained(addr, req.service.as_deref(), drained)?;
    Ok(Json(action_reply(&c, &keys)))
}

// ---- reload -----------------------------------------------------------------------------

pub(super) async fn reload(State(api): State<Api>) -> Result<Json<ReloadReply>, HttpError> {
    let path = lock(&api.controller).path().to_path_buf();
    // Read, parse and validate off the runtime thread; apply under the lock (NX-3: a rejected
    // file changes nothing).
    let loaded = tokio::task::spawn_blocking(move || config::load(&path))
        .await
        .map_err(|e| HttpError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let config = match loaded {
        Ok(c) => c,
        Err(e) => {
            lock(&api.controller).note_rejected_reload();
            tracing::error!("reload rejected (admin API), running configuration kept: {e}");
            return Err(config_error(e));
        }
    };
    // The backends it adds: their next hops resolved before the workers see them.
    let added = lock(&api.controller).added_backend_addresses(&config);
    let ahead = ResolveAhead::start(&*api.view, &added, Instant::now());
    let missing = loop {
        if let Some(m) = ahead.poll(&*api.view, Instant::now()) {
            break m;
        }
        tokio::time::sleep(RESOLVE_POLL).await;
    };
    ahead.log(&missing, Instant::now());
    let mut c = lock(&api.controller);
    let report = c.apply_config(config).inspect_err(|e| {
        tracing::error!("reload rejected (admin API), running configuration kept: {e}");
    })?;
    tracing::info!(
        services = report.services,
        added = report.change.added.len(),
        removed = report.change.removed.len(),
        "configuration reloaded (admin API)"
    );
    Ok(Json(reload_reply(&report, c.snapshot().generation)))
}

// ---- neighbours and conntrack -------------------------------------------------------------

pub(super) async fn neighbours(State(api): State<Api>) -> Json<NeighboursReply> {
    let mut table = api.view.neighbours();
    table.sort_unstable();
    let answers = api
        .view
        .neighbour_counters()
        .map(|c| c.values().iter().map(|(k, v)| ((*k).to_owned(), *v)).collect())
        .unwrap_or_default();
    Json(NeighboursReply {
        neighbours: table
            .into_iter()
            .map(|(a, m)| NeighbourEntry { addr: a.to_string(), mac: MacDisplay(m).to_string() })
            .collect(),
        answers,
    })
}

pub(super) async fn conntrack(State(api): State<Api>) -> Json<ConntrackReply> {
    let v = &*api.view;
    let workers: Vec<WorkerConntrack> = (0..v.workers())
        .map(|w| {
            let c = v.counters(w);
            WorkerConntrack {
                worker: w,
                entries: c.ct_entries.get(),
                capacity: c.ct_capacity.get(),
                inserts: c.ct_inserts.get(),
                evictions: c.ct_evictions.get(),
            }
        })
        .collect();
    let total = WorkerConntrack {
        worker: workers.len(),
        entries: workers.iter().map(|w| w.entries).sum(),
        capacity: workers.iter().map(|w| w.capacity).sum(),
        inserts: workers.iter().map(|w| w.inserts).sum(),
        evictions: workers.iter().map(|w| w.evictions).sum(),
    };
    Json(ConntrackReply { workers, total })
}

/// One worker's answer to a conntrack query.
enum Answer {
    Found(Entry),
    Absent,
    Silent,
}

/// Ask every worker for `key`, waiting at most [`LOOKUP_TIMEOUT`] in all.
async fn ask_workers(view: &dyn DataplaneView, key: FlowKey, hash: u64) -> Vec<Answer> {
    let replies = view.lookup(key, hash);
    let deadline = tokio::time::Instant::now() + LOOKUP_TIMEOUT;
    let mut out = Vec::with_capacity(replies.len());
    for r in replies {
        out.push(match tokio::time::timeout_at(deadline, r).await {
            Ok(Ok(Some(e))) => Answer::Found(e),
            Ok(Ok(None)) => Answer::Absent,
            // Closed (a full mailbox dropped the query) or too late.
            Ok(Err(_)) | Err(_) => Answer::Silent,
        });
    }
    out
}

/// The snapshot, the time and the tracking key (with its hash) of a flow; 404 when no rule
/// matches it.
fn tracking_key_of(api: &Api, p: &PacketInfo) -> Result<(String, FlowKey, u64), HttpError> {
    let (snap, now) = {
        let c = lock(&api.controller);
        (c.snapshot(), c.now())
    };
    let x = explain(p, &snap, None, now, None);
    match (x.service, x.tracking_key) {
        (Some(s), Some(k)) => Ok((s, k, x.tracking_hash)),
        _ => Err(HttpError::new(
            StatusCode::NOT_FOUND,
            format!("no forwarding rule matches {}", flow_str(p)),
        )),
    }
}

pub(super) async fn lookup(
    State(api): State<Api>,
    q: Result<Query<FlowQuery>, QueryRejection>,
) -> Result<Json<FlowLookupReply>, HttpError> {
    let p = flow_packet(&query::query(q)?)?;
    let (service, key, hash) = tracking_key_of(&api, &p)?;
    let answers = ask_workers(&*api.view, key, hash).await;
    let snap = lock(&api.controller).snapshot();
    let workers = answers
        .iter()
        .enumerate()
        .map(|(w, a)| match a {
            Answer::Found(e) => {
                WorkerEntry { worker: w, state: "found".into(), entry: Some(entry_info(&snap, e)) }
            }
            Answer::Absent => WorkerEntry { worker: w, state: "absent".into(), entry: None },
            Answer::Silent => WorkerEntry { worker: w, state: "no_answer".into(), entry: None },
        })
        .collect();
    Ok(Json(FlowLookupReply {
        flow: flow_str(&p),
        service,
        tracking_key: key_str(&key),
        tracking_hash: hex(hash),
        workers,
    }))
}

pub(super) async fn explain_flow(
    State(api): State<Api>,
    q: Result<Query<FlowQuery>, QueryRejection>,
) -> Result<Json<ExplainReply>, HttpError> {
    let q = query::query(q)?;
    let p = flow_packet(&q)?;
    let cid = query::quic_cid(&q, &p)?;
    // Without a rule there is nothing to look up: explain says no_matching_rule.
    let answers = match tracking_key_of(&api, &p) {
        Ok((_, key, hash)) => ask_workers(&*api.view, key, hash).await,
        Err(_) => Vec::new(),
    };
    // The freshest entry (a flow's packets land on one worker, unless RSS changed).
    let best = answers
        .iter()
        .enumerate()
        .filter_map(|(w, a)| match a {
            Answer::Found(e) => Some((w, e)),
            _ => None,
        })
        .min_by_key(|(_, e)| e.idle_ms);
    let (snap, now) = {
        let c = lock(&api.controller);
        (c.snapshot(), c.now())
    };
    let x = explain(&p, &snap, best.map(|(_, e)| e), now, cid.as_deref());
    let workers = Asked {
        asked: answers.len(),
        answered: answers.iter().filter(|a| !matches!(a, Answer::Silent)).count(),
    };
    Ok(Json(explain_reply(&p, &snap, x, best, workers)))
}

// ---- metrics ----------------------------------------------------------------------------

pub(super) async fn metrics(State(api): State<Api>) -> Response {
    match crate::metrics::render(&api.controller, &*api.view) {
        Ok(text) => ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response(),
        Err(e) => HttpError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}
