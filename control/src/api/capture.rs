//! `POST /v1/capture`: a capture that knows the load balancer, streamed as pcapng
//! ([`crate::pcapng`]); `GET /v1/capture`: the summary of the capture under way or the last.
//!
//! One capture runs at a time (a second is a `409`). Its parameters are in the query string:
//! the filters (`vip`, `dport`, `client`, `sport`, `proto`, `service`, `backend`, `port`), the points
//! (`point=received,sent,dropped`, all by default), the bounds (`count`, `duration_ms`,
//! `bytes`), `snaplen` and `ring` (records per worker's ring). The reply's header `spillway-capture` carries the capture's number.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use spillway_core::capture::{self as tap, Filter, Point, Points, SNAP_MAX};
use spillway_core::filter::FlowFilter;
use tokio::sync::mpsc;

use super::error::HttpError;
use super::query;
use super::{lock, Api};
use crate::pcapng::{self, points_str, Bounds, PcapngStream};
use spillway_api::types::CaptureSummary;

/// Packets written when `count` is not given.
pub const DEFAULT_COUNT: u64 = 1_000;
/// The most packets one capture writes.
pub const MAX_COUNT: u64 = 10_000_000;
/// How long a capture runs when `duration_ms` is not given.
pub const DEFAULT_DURATION_MS: u64 = 60_000;
/// The longest capture.
pub const MAX_DURATION_MS: u64 = 3_600_000;
/// Bytes written when `bytes` is not given.
pub const DEFAULT_BYTES: u64 = 64 << 20;
/// The most bytes one capture writes.
pub const MAX_BYTES: u64 = 4 << 30;

/// The smallest ring a capture may ask for (records per worker).
pub const MIN_RING: usize = 16;
/// The largest (about 130 MiB per worker).
pub const MAX_RING: usize = 65_536;

/// The header that carries the capture's number.
pub const CAPTURE_HEADER: &str = "spillway-capture";

/// The capture under way, or the last one.
#[derive(Debug, Default)]
pub(super) struct Captures {
    last_id: u64,
    current: Option<CaptureSummary>,
}

/// `POST /v1/capture?...`: every parameter optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CaptureQuery {
    vip: Option<String>,
    dport: Option<u16>,
    client: Option<String>,
    sport: Option<u16>,
    proto: Option<String>,
    service: Option<String>,
    backend: Option<String>,
    /// A data port, by name (as `dataplane.ports` names them).
    port: Option<String>,
    /// Comma-separated points.
    point: Option<String>,
    count: Option<u64>,
    duration_ms: Option<u64>,
    bytes: Option<u64>,
    snaplen: Option<usize>,
    /// Records each worker's ring holds.
    ring: Option<usize>,
}

/// A request's capture, checked.
struct Request {
    filter: Filter,
    points: Points,
    bounds: Bounds,
    snaplen: usize,
    ring: usize,
}

fn within(name: &str, v: Option<u64>, default: u64, lo: u64, hi: u64) -> Result<u64, HttpError> {
    match v.unwrap_or(default) {
        x if (lo..=hi).contains(&x) => Ok(x),
        x => Err(HttpError::bad_request(format!("{name}: {x} is not within {lo}..={hi}"))),
    }
}

fn parse(q: &CaptureQuery, api: &Api) -> Result<Request, HttpError> {
    let service = match q.service.as_deref() {
        None => None,
        Some(name) => {
            let snap = lock(&api.controller).snapshot();
            let id = snap.services().find(|s| &*s.name == name).map(|s| s.id);
            Some(id.ok_or_else(|| {
                HttpError::new(StatusCode::NOT_FOUND, format!("service: no service named `{name}`"))
            })?)
        }
    };
    let backend = q.backend.as_deref().map(query::backend_param).transpose()?;
    if let Some((addr, port)) = backend {
        // A filter that can match nothing is a mistake worth saying (a typo, a removed backend).
        let snap = lock(&api.controller).snapshot();
        let known = snap
            .backends()
            .any(|(_, b)| b.endpoint.addr == addr && port.is_none_or(|p| p == b.endpoint.port));
        if !known {
            let b = q.backend.as_deref().unwrap_or_default();
            return Err(HttpError::new(
                StatusCode::NOT_FOUND,
                format!("backend: no backend at `{b}`"),
            ));
        }
    }
    let port = match q.port.as_deref() {
        None => None,
        Some(name) => {
            // The data ports (the workers'); the kernel interface's port, listed last, is
            // moved by the exception path's thread: its frames are captured on the data port
            // they came in by, as `to_kernel`.
            let ports = api.view.port_counters();
            let data = ports.len() - usize::from(api.view.kernel_counters().is_some());
            let names: Vec<&str> = ports.iter().take(data).map(|(n, _)| *n).collect();
            let i = names.iter().position(|n| *n == name).ok_or_else(|| {
                HttpError::new(
                    StatusCode::NOT_FOUND,
                    format!("port: no port named `{name}` (ports: {})", names.join(", ")),
                )
            })?;
            Some(u16::try_from(i).unwrap_or(u16::MAX))
        }
    };
    let filter = Filter {
        flow: FlowFilter {
            service,
            backend,
            ..query::flow_filter(
                q.vip.as_deref(),
                q.dport,
                q.client.as_deref(),
                q.sport,
                q.proto.as_deref(),
            )?
        },
        port,
    };
    let points = match q.point.as_deref() {
        None => Points::ALL,
        Some(list) => list.split(',').map(str::trim).try_fold(Points::NONE, |ps, name| {
            Point::parse(name).map(|p| ps.with(p)).ok_or_else(|| {
                HttpError::bad_request(format!("point: `{name}` is not received, sent or dropped"))
            })
        })?,
    };
    let snaplen =
        within("snaplen", q.snaplen.map(|s| s as u64), SNAP_MAX as u64, 1, SNAP_MAX as u64)?;
    let bounds = Bounds {
        count: within("count", q.count, DEFAULT_COUNT, 1, MAX_COUNT)?,
        duration: Duration::from_millis(within(
            "duration_ms",
            q.duration_ms,
            DEFAULT_DURATION_MS,
            1,
            MAX_DURATION_MS,
        )?),
        bytes: within("bytes", q.bytes, DEFAULT_BYTES, 1024, MAX_BYTES)?,
    };
    let ring = within(
        "ring",
        q.ring.map(|r| r as u64),
        pcapng::RING_RECORDS as u64,
        MIN_RING as u64,
        MAX_RING as u64,
    )?;
    Ok(Request { filter, points, bounds, snaplen: snaplen as usize, ring: ring as usize })
}

/// The filter as the summary shows it.
fn describe(q: &CaptureQuery, points: Points) -> String {
    let mut parts: Vec<String> = [
        ("vip", q.vip.clone()),
        ("dport", q.dport.map(|p| p.to_string())),
        ("client", q.client.clone()),
        ("sport", q.sport.map(|p| p.to_string())),
        ("proto", q.proto.clone()),
        ("service", q.service.clone()),
        ("backend", q.backend.clone()),
        ("port", q.port.clone()),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| format!("{k}={v}")))
    .collect();
    parts.push(format!("point={}", points_str(points)));
    parts.join(" ")
}

pub(super) async fn start(
    State(api): State<Api>,
    q: Result<Query<CaptureQuery>, QueryRejection>,
) -> Result<Response, HttpError> {
    let q = query::query(q)?;
    let req = parse(&q, &api)?;
    let slots = api.view.tap_slots();
    if slots.is_empty() {
        return Err(HttpError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "capture needs load-balancing workers (this daemon has none)",
        ));
    }
    let summary = {
        let mut c = api.captures.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cur) = c.current.as_ref().filter(|c| c.running) {
            return Err(HttpError::new(
                StatusCode::CONFLICT,
                format!("capture {} is under way (one at a time)", cur.id),
            ));
        }
        c.last_id += 1;
        let summary = CaptureSummary {
            id: c.last_id,
            running: true,
            filter: describe(&q, req.points),
            ..CaptureSummary::default()
        };
        c.current = Some(summary.clone());
        summary
    };
    let id = summary.id;
    let (rings, shared) = match tap::start(slots, &req.filter, req.points, req.snaplen, req.ring) {
        Ok(started) => started,
        Err(w) => {
            let mut c = api.captures.lock().unwrap_or_else(PoisonError::into_inner);
            c.current = None;
            return Err(HttpError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("worker {w} has not taken the last capture's tap: is it running?"),
            ));
        }
    };
    let ports: Vec<String> = {
        let names: Vec<String> =
            api.view.port_counters().iter().map(|(n, _)| (*n).to_owned()).collect();
        if names.is_empty() {
            vec!["port0".to_owned()]
        } else {
            names
        }
    };
    let stream = PcapngStream::new(&ports, req.snaplen, req.bounds, summary);
    let (tx, rx) = mpsc::channel::<Vec<u8>>(16);
    let controller = Arc::clone(&api.controller);
    let captures: Arc<Mutex<Captures>> = Arc::clone(&api.captures);
    tokio::spawn(async move {
        let progress = |s: &CaptureSummary| {
            let mut c = captures.lock().unwrap_or_else(PoisonError::into_inner);
            c.current = Some(s.clone());
        };
        pcapng::run(rings, shared, stream, || lock(&controller).snapshot(), tx, progress).await;
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (Ok::<_, std::io::Error>(chunk), rx))
    });
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-pcapng".to_owned()),
            (header::HeaderName::from_static(CAPTURE_HEADER), id.to_string()),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

pub(super) async fn summary(State(api): State<Api>) -> Result<Json<CaptureSummary>, HttpError> {
    let c = api.captures.lock().unwrap_or_else(PoisonError::into_inner);
    c.current
        .clone()
        .map(Json)
        .ok_or_else(|| HttpError::new(StatusCode::NOT_FOUND, "no capture has run"))
}
