//! The operator API: JSON over HTTP/1.1 on `admin.listen` (a Unix socket by default, or TCP
//! with a token), plus `GET /metrics` (see [`crate::metrics`]). `spillwayctl` is a thin client
//! of it ([`client`]); `docs/operations.md` is the reference of every endpoint. Who may connect
//! and the bounds on every connection: [`server`].
//!
//! It owns the HTTP server (axum on the control plane's tokio current-thread runtime), the
//! request and reply shapes ([`types`]) and the translation of controller and data-plane state
//! into them. It changes state only through the [`Controller`] (health overrides, HC-2; drains;
//! reloads, NX-3) and reads the data plane only through [`DataplaneView`].
//!
//! It must never block the runtime it shares with the health checks and the daemon's main
//! loop: the controller's mutex is held only for short, non-awaiting sections (never across an
//! `.await`), a reload parses and validates the file on the blocking pool before taking the
//! lock, and conntrack queries wait for the workers' replies at most [`LOOKUP_TIMEOUT`].

use crate::config::{self, ConfigError};
use crate::controller::{ControlError, Controller, Override};
use crate::fleet::Phase;
use crate::view::DataplaneView;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hashbrown::HashMap;
use serde::Deserialize;
use spillway_core::addr::Addr;
use spillway_core::advanced::LoadUnit;
use spillway_core::conntrack::Entry;
use spillway_core::decide::FLAG_CREATED_UNHEALTHY;
use spillway_core::explain::explain;
use spillway_core::flow::{proto, tcp_flags, FlowKey, PacketInfo};
use spillway_core::model::{BackendKey, Encap, Endpoint, Ports, RuleDest, RuleProtocol};
use spillway_core::policy::ZonalAffinity;
use spillway_core::snapshot::{
    AdvancedClientView, AdvancedView, BackendRef, BackendStatus, ServiceView, Snapshot,
};
use spillway_core::wire::MacDisplay;
use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use types::*;

pub mod client;
mod server;
pub mod types;

pub use server::{read_token, serve, spawn, ApiOptions, ApiServer, Limits, MIN_TOKEN_LEN};

/// The longest an API request waits for the workers' conntrack replies (a worker answers
/// between two bursts; one that does not answer in time is reported as `no_answer`).
pub const LOOKUP_TIMEOUT: Duration = Duration::from_millis(500);

/// Why the API server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// `admin.listen` is not an address the server can listen on.
    #[error("`{0}` is neither `ip:port` nor `unix:/absolute/path`")]
    BadListen(String),
    /// Binding the socket failed (in use, permission denied, ...).
    #[error("cannot listen on `{listen}`: {source}")]
    Bind {
        /// The configured address.
        listen: String,
        /// The OS error.
        source: io::Error,
    },
    /// `admin.token_file` cannot be used.
    #[error("{path}: {message}")]
    Token {
        /// The file.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// `admin.socket_group` names no group of this host.
    #[error("no group `{0}` in /etc/group")]
    Group(String),
    /// The server stopped with an I/O error.
    #[error("admin API on `{listen}` stopped: {source}")]
    Serve {
        /// The address it listened on.
        listen: String,
        /// The OS error.
        source: io::Error,
    },
}

/// Where the API listens (server) or where a client connects: `ip:port` or `unix:/path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// TCP, `host:port` (the server only accepts a literal `ip:port`).
    Tcp(String),
    /// A Unix stream socket at this absolute path.
    Unix(PathBuf),
}

impl Listen {
    /// Parse `ip:port`, `host:port` or `unix:/absolute/path`.
    pub fn parse(s: &str) -> Option<Listen> {
        match s.strip_prefix("unix:") {
            Some(p) if p.starts_with('/') => Some(Listen::Unix(PathBuf::from(p))),
            Some(_) => None,
            None if s
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok()) =>
            {
                Some(Listen::Tcp(s.to_owned()))
            }
            None => None,
        }
    }
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Listen::Tcp(a) => f.write_str(a),
            Listen::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// What every handler shares.
#[derive(Clone)]
struct Api {
    controller: Arc<Mutex<Controller>>,
    view: Arc<dyn DataplaneView>,
}

/// The API's routes (without a listener: tests and the daemon bind it).
pub fn router(controller: Arc<Mutex<Controller>>, view: Arc<dyn DataplaneView>) -> Router {
    Router::new()
        .route("/v1/status", get(status))
        .route("/v1/services", get(services))
        .route("/v1/backends", get(backends))
        .route("/v1/backends/{addr}/health", post(set_health))
        .route("/v1/backends/{addr}/drain", post(drain))
        .route("/v1/backends/{addr}/undrain", post(undrain))
        .route("/v1/reload", post(reload))
        .route("/v1/instance", get(instance))
        .route("/v1/instance/drain", post(drain_instance))
        .route("/v1/instance/undrain", post(undrain_instance))
        .route("/v1/neighbours", get(neighbours))
        .route("/v1/conntrack", get(conntrack))
        .route("/v1/conntrack/lookup", get(lookup))
        .route("/v1/explain", get(explain_flow))
        .route("/metrics", get(metrics))
        .fallback(|| async { HttpError::new(StatusCode::NOT_FOUND, "no such endpoint") })
        .method_not_allowed_fallback(|| async {
            HttpError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this endpoint")
        })
        .with_state(Api { controller, view })
}

/// Lock the controller. Sections under the lock never await and never panic on their own, so
/// a poisoned lock (a panic elsewhere, in tests) still holds consistent state.
fn lock(c: &Mutex<Controller>) -> MutexGuard<'_, Controller> {
    c.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An error reply: `{"error": "...", "errors": [...]}` with a status code.
#[derive(Debug)]
struct HttpError {
    status: StatusCode,
    body: ErrorReply,
}

impl HttpError {
    fn new(status: StatusCode, message: impl Into<String>) -> HttpError {
        HttpError { status, body: ErrorReply { error: message.into(), errors: Vec::new() } }
    }

    fn bad_request(message: impl Into<String>) -> HttpError {
        HttpError::new(StatusCode::BAD_REQUEST, message)
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

impl From<ControlError> for HttpError {
    fn from(e: ControlError) -> HttpError {
        match e {
            ControlError::Config(e) => config_error(e),
            ControlError::NoSuchBackend(_) => HttpError::new(StatusCode::NOT_FOUND, e.to_string()),
            ControlError::State(_) => {
                HttpError::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string())
            }
        }
    }
}

/// A rejected configuration: 400 with the whole message (file, line, field, reason) and the
/// problems one by one.
fn config_error(e: ConfigError) -> HttpError {
    let errors = match &e {
        ConfigError::Io { .. } => Vec::new(),
        ConfigError::Parse { field, location, message, .. } => vec![ConfigProblem {
            field: field.clone(),
            line: location.map(|l| l.0),
            column: location.map(|l| l.1),
            message: message.clone(),
        }],
        ConfigError::Invalid { errors, .. } => errors
            .iter()
            .map(|f| ConfigProblem {
                field: f.field.clone(),
                line: f.location.map(|l| l.0),
                column: f.location.map(|l| l.1),
                message: f.message.clone(),
            })
            .collect(),
    };
    HttpError {
        status: StatusCode::BAD_REQUEST,
        body: ErrorReply { error: format!("configuration rejected, nothing changed: {e}"), errors },
    }
}

/// `addr:port` (`[v6]:port`).
fn sock(a: Addr, port: u16) -> String {
    if a.is_v4() {
        format!("{a}:{port}")
    } else {
        format!("[{a}]:{port}")
    }
}

fn protocol_name(p: u8) -> String {
    match p {
        proto::TCP => "tcp".into(),
        proto::UDP => "udp".into(),
        proto::ICMP => "icmp".into(),
        proto::ICMPV6 => "icmpv6".into(),
        n => n.to_string(),
    }
}

/// A tracking key as text: `2-tuple 198.51.100.7 -> 10.0.0.10`.
fn key_str(k: &FlowKey) -> String {
    let p = protocol_name(k.proto);
    match k.kind {
        1 => format!("1-tuple {}", k.src),
        2 => format!("2-tuple {} -> {}", k.src, k.dst),
        3 => format!("3-tuple {p} {} -> {}", k.src, k.dst),
        _ => format!("5-tuple {p} {} -> {}", sock(k.src, k.sport), sock(k.dst, k.dport)),
    }
}

fn hex(h: u64) -> String {
    format!("{h:#018x}")
}

fn zone_name(snap: &Snapshot, z: u16) -> String {
    snap.zone_names.get(usize::from(z)).cloned().unwrap_or_default()
}

/// The API name of a section 7 load unit.
fn unit_name(u: LoadUnit) -> &'static str {
    match u {
        LoadUnit::Rate => "new_connections_per_second",
        LoadUnit::Connections => "connections",
    }
}

/// `v` without a negative zero (smoothing can leave `-0.0`, which JSON would show).
fn unsigned_zero(v: f64) -> f64 {
    if v == 0.0 {
        0.0
    } else {
        v
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

// ---- status -------------------------------------------------------------------------------

async fn status(State(api): State<Api>) -> Json<StatusReply> {
    let (mut reply, snap) = {
        let c = lock(&api.controller);
        let snap = c.snapshot();
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
        let reply = StatusReply {
            uptime_ms: c.now().as_millis(),
            generation: snap.generation,
            config: c.path().display().to_string(),
            workers: api.view.workers(),
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
        };
        (reply, snap)
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

// ---- services -----------------------------------------------------------------------------

async fn services(State(api): State<Api>) -> Json<ServicesReply> {
    let c = lock(&api.controller);
    let snap = c.snapshot();
    let model = c.state().model();
    let services = snap
        .services()
        .map(|svc| {
            let m = model.services.iter().find(|s| *s.name == *svc.name);
            let rules = m
                .map(|m| {
                    m.rules
                        .iter()
                        .map(|r| RuleInfo {
                            destination: match r.dest {
                                RuleDest::Vip(a) => a.to_string(),
                                RuleDest::Prefix(p) => p.to_string(),
                            },
                            protocol: match r.protocol {
                                RuleProtocol::Tcp => "TCP",
                                RuleProtocol::Udp => "UDP",
                                RuleProtocol::L3Default => "L3_DEFAULT",
                            }
                            .to_owned(),
                            ports: match &r.ports {
                                Ports::All => "ALL".to_owned(),
                                Ports::List(l) => l
                                    .iter()
                                    .map(|&(lo, hi)| {
                                        if lo == hi {
                                            lo.to_string()
                                        } else {
                                            format!("{lo}-{hi}")
                                        }
                                    })
                                    .collect::<Vec<_>>()
                                    .join(","),
                            },
                        })
                        .collect()
                })
                .unwrap_or_default();
            let (zonal, ratio) = match m.map(|m| m.zonal).unwrap_or_default() {
                ZonalAffinity::Disabled => ("ZONAL_AFFINITY_DISABLED", None),
                ZonalAffinity::StayWithinZone => ("ZONAL_AFFINITY_STAY_WITHIN_ZONE", None),
                ZonalAffinity::SpillCrossZone { ratio } => {
                    ("ZONAL_AFFINITY_SPILL_CROSS_ZONE", Some(ratio))
                }
            };
            let failover = m.map(|m| m.failover).unwrap_or_default();
            let policy = PolicyInfo {
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
                encapsulation: match svc.encap {
                    Encap::Ipip => "IPIP".to_owned(),
                    Encap::Gue { port } => format!("GUE:{port}"),
                    Encap::L2 => "L2".to_owned(),
                },
            };
            let members = |slots: &[u16]| -> Vec<String> {
                let mut v: Vec<String> = slots
                    .iter()
                    .filter_map(|&s| snap.backend(s).map(|b| b.endpoint.to_string()))
                    .collect();
                v.sort();
                v
            };
            let zones = svc
                .zone_choices
                .iter()
                .enumerate()
                .map(|(z, ch)| ZoneChoiceInfo {
                    zone: zone_name(&snap, u16::try_from(z).unwrap_or(u16::MAX)),
                    zonal_match: ch.zonal_match,
                    spilled: ch.spilled,
                    size: ch.members.len(),
                })
                .collect();
            ServiceInfo {
                name: svc.name.to_string(),
                id: svc.id,
                rules,
                policy,
                epoch: svc.epoch,
                eligible_kind: svc.eligible.kind.as_str().to_owned(),
                eligible_size: svc.eligible.members.len(),
                eligible: members(&svc.eligible.members),
                default_size: svc.default_choice.members.len(),
                zones,
                advanced: svc.advanced.as_deref().map(|a| advanced_info(&snap, a)),
                table_fingerprint: hex(snap.table_fingerprint(svc)),
            }
        })
        .collect();
    Json(ServicesReply { generation: snap.generation, services })
}

// ---- backends -----------------------------------------------------------------------------

#[derive(Debug, Default, Deserialize)]
struct BackendsQuery {
    service: Option<String>,
}

async fn backends(
    State(api): State<Api>,
    q: Result<Query<BackendsQuery>, QueryRejection>,
) -> Result<Json<BackendsReply>, HttpError> {
    let Query(q) = q.map_err(|e| HttpError::bad_request(e.body_text()))?;
    let c = lock(&api.controller);
    let rows = backend_rows(&c, |k| q.service.as_deref().is_none_or(|s| s == k.service));
    Ok(Json(BackendsReply { generation: c.snapshot().generation, backends: rows }))
}

/// One row per configured or draining backend that `keep` accepts, in slot order.
fn backend_rows(c: &Controller, keep: impl Fn(&BackendKey) -> bool) -> Vec<BackendInfo> {
    let snap = c.snapshot();
    let state = c.state();
    let weights: HashMap<BackendKey, u32> =
        state.model().backends().map(|(k, _, g)| (k, g.weight.max(1))).collect();
    let checks: HashMap<BackendKey, crate::health::TargetStatus> =
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
            probe: match c.probe_verdict(key) {
                Some(true) => "healthy",
                Some(false) => "unhealthy",
                None => "unknown",
            }
            .to_owned(),
            health_override: match c.override_of(key) {
                Some(Override::Healthy) => "healthy",
                Some(Override::Unhealthy) => "unhealthy",
                None => "auto",
            }
            .to_owned(),
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

// ---- overrides and drains ------------------------------------------------------------------

/// Parse an optional JSON body (an empty body or `null` is `T::default()`).
fn json_body<T: for<'de> Deserialize<'de> + Default>(body: &[u8]) -> Result<T, HttpError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice::<Option<T>>(body)
        .map(Option::unwrap_or_default)
        .map_err(|e| HttpError::bad_request(format!("bad JSON body: {e}")))
}

fn parse_addr(s: &str) -> Result<Addr, HttpError> {
    s.parse().map_err(|_| HttpError::bad_request(format!("`{s}` is not an IP address")))
}

async fn set_health(
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

/// `GET /v1/instance`: the instance's phase, announced VIPs and table fingerprints.
async fn instance(State(api): State<Api>) -> Json<InstanceReply> {
    Json(instance_reply(&lock(&api.controller)))
}

fn instance_reply(c: &Controller) -> InstanceReply {
    let quiet = c.config().announce.as_ref().map_or(2.0, |a| a.quiet_sec);
    let mut reply = c.instance().status(Instant::now(), Duration::from_secs_f64(quiet));
    let snap = c.snapshot();
    reply.fingerprints =
        snap.services().map(|s| (s.name.to_string(), hex(snap.table_fingerprint(s)))).collect();
    reply
}

/// `POST /v1/instance/drain`: withdraw every VIP, keep forwarding what arrives.
async fn drain_instance(
    State(api): State<Api>,
    body: Bytes,
) -> Result<Json<InstanceReply>, HttpError> {
    set_instance_drained(&api, &body, true)
}

/// `POST /v1/instance/undrain`: announce again (once ready).
async fn undrain_instance(
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
    if !body.iter().all(u8::is_ascii_whitespace) {
        let _: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(body)
            .map_err(|e| HttpError::bad_request(format!("the body must be empty or {{}}: {e}")))?;
    }
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

async fn drain(
    State(api): State<Api>,
    UrlPath(addr): UrlPath<String>,
    body: Bytes,
) -> Result<Json<ActionReply>, HttpError> {
    set_drained(&api, &addr, &body, true)
}

async fn undrain(
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

fn action_reply(c: &Controller, keys: &[BackendKey]) -> ActionReply {
    ActionReply {
        generation: c.snapshot().generation,
        backends: backend_rows(c, |k| keys.contains(k)),
    }
}

// ---- reload -------------------------------------------------------------------------------

async fn reload(State(api): State<Api>) -> Result<Json<ReloadReply>, HttpError> {
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
    Ok(Json(ReloadReply {
        generation: c.snapshot().generation,
        services: report.services,
        added,
        removed,
        undrained,
    }))
}

// ---- conntrack ----------------------------------------------------------------------------

async fn neighbours(State(api): State<Api>) -> Json<NeighboursReply> {
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

async fn conntrack(State(api): State<Api>) -> Json<ConntrackReply> {
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

/// The flow of a lookup or explain request.
#[derive(Debug, Default, Deserialize)]
struct FlowQuery {
    src: Option<String>,
    dst: Option<String>,
    proto: Option<String>,
    sport: Option<String>,
    dport: Option<String>,
    syn: Option<String>,
}

fn flow_packet(q: &FlowQuery) -> Result<PacketInfo, HttpError> {
    let addr = |name: &str, v: &Option<String>| -> Result<Addr, HttpError> {
        let v = v.as_deref().ok_or_else(|| HttpError::bad_request(format!("missing `{name}`")))?;
        v.parse().map_err(|_| HttpError::bad_request(format!("{name}: `{v}` is not an IP address")))
    };
    let src = addr("src", &q.src)?;
    let dst = addr("dst", &q.dst)?;
    if src.is_v4() != dst.is_v4() {
        return Err(HttpError::bad_request("src and dst must be of one address family"));
    }
    let p = match q.proto.as_deref().unwrap_or("tcp").to_ascii_lowercase().as_str() {
        "tcp" => proto::TCP,
        "udp" => proto::UDP,
        "icmp" => proto::ICMP,
        "icmpv6" => proto::ICMPV6,
        other => other.parse().map_err(|_| {
            HttpError::bad_request(format!(
                "proto: `{other}` is not tcp, udp, icmp, icmpv6 or a protocol number"
            ))
        })?,
    };
    let ported = p == proto::TCP || p == proto::UDP;
    let port = |name: &str, v: &Option<String>| -> Result<u16, HttpError> {
        match v.as_deref() {
            Some(s) if ported => s
                .parse()
                .map_err(|_| HttpError::bad_request(format!("{name}: `{s}` is not a port"))),
            Some(_) => Err(HttpError::bad_request(format!("{name}: only tcp and udp have ports"))),
            None if ported => Err(HttpError::bad_request(format!("missing `{name}` (tcp, udp)"))),
            None => Ok(0),
        }
    };
    let sport = port("sport", &q.sport)?;
    let dport = port("dport", &q.dport)?;
    let syn = match q.syn.as_deref() {
        None | Some("false" | "0") => false,
        Some("true" | "1" | "") => true,
        Some(other) => {
            return Err(HttpError::bad_request(format!("syn: `{other}` is not a boolean")))
        }
    };
    if syn && p != proto::TCP {
        return Err(HttpError::bad_request("syn: only tcp has a SYN"));
    }
    let flags = match (p, syn) {
        (proto::TCP, true) => tcp_flags::SYN,
        (proto::TCP, false) => tcp_flags::ACK,
        _ => 0,
    };
    Ok(PacketInfo {
        src,
        dst,
        proto: p,
        sport,
        dport,
        fragment: false,
        tcp_flags: flags,
        icmp_error: false,
    })
}

fn flow_str(p: &PacketInfo) -> String {
    let proto = protocol_name(p.proto);
    if p.has_ports() {
        format!("{proto} {} -> {}", sock(p.src, p.sport), sock(p.dst, p.dport))
    } else {
        format!("{proto} {} -> {}", p.src, p.dst)
    }
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
    let x = explain(p, &snap, None, now);
    match (x.service, x.tracking_key) {
        (Some(s), Some(k)) => Ok((s, k, x.tracking_hash)),
        _ => Err(HttpError::new(
            StatusCode::NOT_FOUND,
            format!("no forwarding rule matches {}", flow_str(p)),
        )),
    }
}

fn entry_info(snap: &Snapshot, e: &Entry) -> EntryInfo {
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

async fn lookup(
    State(api): State<Api>,
    q: Result<Query<FlowQuery>, QueryRejection>,
) -> Result<Json<FlowLookupReply>, HttpError> {
    let Query(q) = q.map_err(|e| HttpError::bad_request(e.body_text()))?;
    let p = flow_packet(&q)?;
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

async fn explain_flow(
    State(api): State<Api>,
    q: Result<Query<FlowQuery>, QueryRejection>,
) -> Result<Json<ExplainReply>, HttpError> {
    let Query(q) = q.map_err(|e| HttpError::bad_request(e.body_text()))?;
    let p = flow_packet(&q)?;
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
    let x = explain(&p, &snap, best.map(|(_, e)| e), now);
    let endpoint = |e: Option<Endpoint>| e.map(|e| e.to_string());
    let (group_shares, backend_group) = match snap.service_for(&p) {
        Some(svc) => advanced_explain(&snap, svc, &p, x.backend),
        None => (None, None),
    };
    let entry = match (best, x.entry_valid) {
        (Some((w, e)), Some(valid)) => Some(ExplainEntry {
            worker: w,
            entry: entry_info(&snap, e),
            valid: valid.is_ok(),
            invalid_reason: valid.err().map(|r| r.as_str().to_owned()),
        }),
        _ => None,
    };
    Ok(Json(ExplainReply {
        flow: flow_str(&p),
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
        workers_asked: answers.len(),
        workers_answered: answers.iter().filter(|a| !matches!(a, Answer::Silent)).count(),
        entry,
        backend: endpoint(x.backend),
        reason: x.reason.to_owned(),
        group_shares,
        backend_group,
    }))
}

// ---- metrics ------------------------------------------------------------------------------

async fn metrics(State(api): State<Api>) -> Response {
    match crate::metrics::render(&api.controller, &*api.view) {
        Ok(text) => ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response(),
        Err(e) => HttpError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}
