//! `GET /v1/conntrack/flows`: the connection table dump (`spillwayctl flows`).
//!
//! Every worker's table is read a slice at a time through its mailbox
//! ([`spillway_core::mailbox::SliceQuery`]: 16 buckets, at most 256 entries, copied between
//! two bursts into a buffer the query brings), so that a dump of a table of millions of entries
//! never holds a worker for more than one slice. Each entry is judged against the current
//! snapshot (its service, its backend, its state) and kept when it passes the filters; the
//! first `limit` are listed, and every match is counted (per backend or service with
//! `count_by`).
//!
//! A table that changes during the dump is listed as it is when each slice is read: an entry
//! that moves between two slices (a relocation by an insert) can be missed or seen twice,
//! which a dump for an operator accepts (`ipvsadm -Lnc` reads a live table the same way).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::Json;
use serde::Deserialize;
use spillway_core::addr::Addr;
use spillway_core::conntrack::Entry;
use spillway_core::decide::{judge_entry, EntryFate, SYNCED_EPOCH};
use spillway_core::filter::FlowFilter;
use spillway_core::snapshot::{BackendRef, BackendStatus, BackendView, ServiceView, Snapshot};
use spillway_core::time::Time;

use super::error::HttpError;
use super::format::{protocol_name, sock};
use super::query;
use super::{lock, Api};
use spillway_api::types::{FlowInfo, FlowsReply};

/// The most flows one reply lists (`limit`); every match is counted all the same.
pub const MAX_LIMIT: usize = 100_000;

/// Listed when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 1_000;

/// How long one slice may take to come back before its worker counts as not answering.
const SLICE_TIMEOUT: Duration = Duration::from_secs(2);

/// `GET /v1/conntrack/flows?...`: every parameter optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FlowsQuery {
    /// The VIP (the flow's destination address).
    vip: Option<String>,
    /// The service, by name.
    service: Option<String>,
    /// The backend: an address (any port), or `address:port`.
    backend: Option<String>,
    /// The client: an address or a prefix (`198.18.10.0/24`).
    client: Option<String>,
    /// The client's port (the flow's source port; 0 in an entry that tracks no ports).
    sport: Option<u16>,
    /// The VIP's port (the flow's destination port).
    dport: Option<u16>,
    /// `tcp`, `udp`, `icmp`, `icmpv6` or a protocol number.
    proto: Option<String>,
    /// `live`, `draining` or `expired` (idle past its timeout or otherwise invalid, not yet
    /// swept).
    state: Option<String>,
    /// How many flows to list (default 1,000, at most 100,000).
    limit: Option<usize>,
    /// `backend` or `service`: count the matches per backend or per service.
    count_by: Option<String>,
}

/// What an entry is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FlowState {
    Live,
    Draining,
    Expired,
}

impl FlowState {
    fn as_str(self) -> &'static str {
        match self {
            FlowState::Live => "live",
            FlowState::Draining => "draining",
            FlowState::Expired => "expired",
        }
    }

    fn parse(s: &str) -> Result<FlowState, HttpError> {
        match s {
            "live" => Ok(FlowState::Live),
            "draining" => Ok(FlowState::Draining),
            "expired" => Ok(FlowState::Expired),
            _ => Err(HttpError::bad_request(format!(
                "state: `{s}` is not live, draining or expired"
            ))),
        }
    }
}

/// The filters of a query, parsed: the flow filter capture uses too, with the service by name
/// (its id may change with a reload during the dump) and the entry's state.
#[derive(Debug, Default)]
struct Filter {
    flow: FlowFilter,
    service: Option<String>,
    state: Option<FlowState>,
}

/// What to count by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CountBy {
    Backend,
    Service,
}

pub(super) async fn flows(
    State(api): State<Api>,
    q: Result<Query<FlowsQuery>, QueryRejection>,
) -> Result<Json<FlowsReply>, HttpError> {
    let q = query::query(q)?;
    let filter = parse_filter(&q)?;
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if limit > MAX_LIMIT {
        return Err(HttpError::bad_request(format!("limit: at most {MAX_LIMIT}")));
    }
    let count_by = match q.count_by.as_deref() {
        None => None,
        Some("backend") => Some(CountBy::Backend),
        Some("service") => Some(CountBy::Service),
        Some(other) => {
            return Err(HttpError::bad_request(format!(
                "count_by: `{other}` is not backend or service"
            )))
        }
    };
    let t0 = Instant::now();
    let mut reply = FlowsReply {
        flows: Vec::new(),
        matched: 0,
        scanned: 0,
        counts: count_by.map(|_| BTreeMap::new()),
        incomplete_workers: Vec::new(),
        duration_ms: 0,
    };
    reply.incomplete_workers = scan(&api, |w, e, snap, now| {
        reply.scanned += 1;
        let Some(flow) = flow_info(w, e, snap, now, &filter) else { return };
        reply.matched += 1;
        if let Some(counts) = reply.counts.as_mut() {
            let by = match count_by {
                Some(CountBy::Service) => flow.service.clone(),
                _ => flow.backend.clone(),
            };
            *counts.entry(by.unwrap_or_else(|| "(none)".into())).or_default() += 1;
        }
        if reply.flows.len() < limit {
            reply.flows.push(flow);
        }
    })
    .await;
    reply.duration_ms = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok(Json(reply))
}

/// Every entry of every worker's table, a slice at a time, to `each` (worker, entry, the
/// snapshot and time of its slice); the workers that did not answer a slice.
pub(super) async fn scan(
    api: &Api,
    mut each: impl FnMut(usize, &Entry, &Snapshot, Time),
) -> Vec<usize> {
    let mut incomplete = Vec::new();
    for w in 0..api.view.workers() {
        let mut from = Some(0);
        while let Some(f) = from {
            let Some(rx) = api.view.slice(w, f) else {
                incomplete.push(w);
                break;
            };
            let Ok(Ok(slice)) = tokio::time::timeout(SLICE_TIMEOUT, rx).await else {
                incomplete.push(w);
                break;
            };
            // The snapshot and clock of each slice: a reload during the dump is seen.
            let (snap, now) = {
                let c = lock(&api.controller);
                (c.snapshot(), c.now())
            };
            for e in &slice.entries {
                each(w, e, &snap, now);
            }
            from = slice.next;
        }
    }
    incomplete
}

fn parse_filter(q: &FlowsQuery) -> Result<Filter, HttpError> {
    Ok(Filter {
        flow: FlowFilter {
            backend: q.backend.as_deref().map(query::backend_param).transpose()?,
            ..query::flow_filter(
                q.vip.as_deref(),
                q.dport,
                q.client.as_deref(),
                q.sport,
                q.proto.as_deref(),
            )?
        },
        service: q.service.clone(),
        state: q.state.as_deref().map(FlowState::parse).transpose()?,
    })
}

/// An entry's service and the backend it pins in `snap` (`None` for a service that is gone, or
/// a backend whose slot was freed or given to another).
pub(super) fn pinned<'s>(
    e: &Entry,
    snap: &'s Snapshot,
) -> (Option<&'s ServiceView>, Option<&'s BackendView>) {
    let svc = snap.service(e.key.service);
    let r = BackendRef::from_u32(e.value.backend);
    let backend =
        snap.backend(r.slot).filter(|b| b.gen == r.gen && svc.is_some_and(|s| b.service == s.id));
    (svc, backend)
}

/// The entry as a flow of the dump, when it passes `f`.
fn flow_info(worker: usize, e: &Entry, snap: &Snapshot, now: Time, f: &Filter) -> Option<FlowInfo> {
    let k = &e.key;
    if !f.flow.key_matches(k) {
        return None;
    }
    let (svc, backend) = pinned(e, snap);
    let service = svc.map(|s| s.name.to_string());
    if f.service.as_ref().is_some_and(|want| service.as_ref() != Some(want)) {
        return None;
    }
    if !f.flow.decision_matches(None, backend.map(|b| b.endpoint)) {
        return None;
    }
    // The judgement the packet path applies to an entry it finds: one whose next packet
    // would replace it is expired, whatever the reason (idle, drained, flushed, unhealthy).
    let state = match judge_entry(k, &e.value, e.idle_ms, snap, now) {
        EntryFate::Valid { .. } => match backend.map(|b| b.status) {
            Some(BackendStatus::Draining { .. }) => FlowState::Draining,
            _ => FlowState::Live,
        },
        EntryFate::Replaced(_) | EntryFate::Unreachable => FlowState::Expired,
    };
    if f.state.is_some_and(|s| s != state) {
        return None;
    }
    let ported = k.sport != 0 || k.dport != 0;
    let end = |a: Addr, p: u16| if ported { sock(a, p) } else { a.to_string() };
    Some(FlowInfo {
        worker,
        proto: protocol_name(k.proto),
        client: end(k.src, k.sport),
        vip: end(k.dst, k.dport),
        service,
        backend: backend.map(|b| b.endpoint.to_string()),
        idle_ms: e.idle_ms,
        state: state.as_str().into(),
        peer: e.value.epoch == SYNCED_EPOCH,
    })
}
