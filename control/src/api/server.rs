//! Serving the API: the listeners, who may use them, and the bounds on every connection.
//!
//! - **Where.** `admin.listen` is a Unix socket (the default, `unix:/run/spillway/admin.sock`)
//!   or a TCP address. A Unix socket is `0600` (its owner, the daemon's user), or `0660` and
//!   owned by `admin.socket_group` so that the group's members may use it: the file system is
//!   the access control.
//! - **A token over TCP.** Anyone who can connect to a TCP port could drain every backend, so a
//!   TCP `admin.listen` needs `admin.token_file`: every request but `GET /metrics` must carry
//!   `Authorization: Bearer <token>` (compared in constant time; `401` otherwise). A token
//!   configured with a Unix socket is required there too.
//! - **Metrics for scrapers.** `admin.metrics_listen` is a second listener that serves
//!   `GET /metrics` and nothing else, without a token: a Prometheus scraper gets read access
//!   and no more, while the API itself stays on the Unix socket.
//! - **Bounds** ([`Limits`]): a client has [`Limits::header_timeout`] to send its request
//!   headers (a slow-loris client is disconnected), [`Limits::request_timeout`] for the whole
//!   request (`408`), bodies above [`Limits::max_body`] are refused (`413`), one request per
//!   connection (no idle keep-alive connections), and at most [`Limits::max_connections`]
//!   connections at once (more are closed at once). Malformed JSON, unknown paths and bad
//!   addresses in paths are `400`/`404` with a JSON error, as everywhere in the API.

use super::error::HttpError;
use super::handlers::metrics;
use super::routes::router;
use super::{Api, ApiError, Listen};
use crate::config::AdminConfig;
use crate::controller::Controller;
use crate::view::DataplaneView;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use subtle::ConstantTimeEq;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

/// The bounds on every connection (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Time to send the request line and headers.
    pub header_timeout: Duration,
    /// Time for the whole request, body and handler included.
    pub request_timeout: Duration,
    /// Largest request body, in bytes.
    pub max_body: usize,
    /// Connections served at once.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            max_body: 64 * 1024,
            max_connections: 64,
        }
    }
}

/// Shortest token accepted from `admin.token_file`, in bytes.
pub const MIN_TOKEN_LEN: usize = 16;

/// How the API is served.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiOptions {
    /// `admin.listen`.
    pub listen: String,
    /// `admin.socket_group`: the group that may use the Unix socket.
    pub socket_group: Option<String>,
    /// The token every request but `GET /metrics` must carry (`admin.token_file`'s content).
    pub token: Option<String>,
    /// `admin.metrics_listen`: a listener for `GET /metrics` only.
    pub metrics_listen: Option<String>,
    /// Connection bounds.
    pub limits: Limits,
}

impl ApiOptions {
    /// The API on `listen`, with no group, token or metrics listener, default limits.
    pub fn new(listen: &str) -> ApiOptions {
        ApiOptions { listen: listen.to_owned(), ..ApiOptions::default() }
    }

    /// The options of an `admin:` section: reads the token file.
    pub fn from_config(admin: &AdminConfig) -> Result<ApiOptions, ApiError> {
        let token = match &admin.token_file {
            Some(path) => Some(read_token(Path::new(path))?),
            None => None,
        };
        Ok(ApiOptions {
            listen: admin.listen.clone(),
            socket_group: admin.socket_group.clone(),
            token,
            metrics_listen: admin.metrics_listen.clone(),
            limits: Limits::default(),
        })
    }
}

/// The token in `path`: its first line, trimmed; at least [`MIN_TOKEN_LEN`] bytes, in a file
/// that only its owner (and group) may read.
pub fn read_token(path: &Path) -> Result<String, ApiError> {
    let bad = |message: String| ApiError::Token { path: path.display().to_string(), message };
    let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
    if meta.permissions().mode() & 0o004 != 0 {
        return Err(bad(format!(
            "every user may read it (mode {:o}): chmod 0600 (or 0640 for a group)",
            meta.permissions().mode() & 0o777
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let token = text.lines().next().unwrap_or("").trim().to_owned();
    if token.len() < MIN_TOKEN_LEN {
        return Err(bad(format!(
            "the token is {} bytes, fewer than {MIN_TOKEN_LEN} (e.g. `openssl rand -hex 32 > \
             FILE`)",
            token.len()
        )));
    }
    Ok(token)
}

/// A running API server; dropping it stops the server and removes its Unix socket file.
#[derive(Debug)]
pub struct ApiServer {
    local: Listen,
    metrics_local: Option<Listen>,
    tasks: Vec<JoinHandle<()>>,
}

impl ApiServer {
    /// Where it listens (with the actual port when `admin.listen` asked for port 0).
    pub fn local_addr(&self) -> &Listen {
        &self.local
    }

    /// Where the metrics-only listener listens, if there is one.
    pub fn metrics_addr(&self) -> Option<&Listen> {
        self.metrics_local.as_ref()
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        for l in std::iter::once(&self.local).chain(&self.metrics_local) {
            if let Listen::Unix(path) = l {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

/// A bound listening socket.
enum Bound {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

/// Bind the listeners now (so that a bad address, a port in use or an unknown group is a
/// startup error) and serve the API on the current tokio runtime until the returned
/// [`ApiServer`] is dropped.
///
/// # Panics
///
/// Outside a tokio runtime context with I/O enabled.
pub fn spawn(
    options: &ApiOptions,
    controller: Arc<Mutex<Controller>>,
    view: Arc<dyn DataplaneView>,
) -> Result<ApiServer, ApiError> {
    let (bound, local) = bind(&options.listen, options.socket_group.as_deref())?;
    let metrics_bound = match &options.metrics_listen {
        Some(l) => Some(bind(l, options.socket_group.as_deref())?),
        None => None,
    };
    let limits = options.limits;
    let app = guarded(router(Arc::clone(&controller), Arc::clone(&view)), options);
    let mut tasks = vec![serve_task(bound, app, limits, local.to_string())];
    let metrics_local = metrics_bound.map(|(bound, local)| {
        let app = guarded(
            Router::new()
                .route("/metrics", get(metrics))
                .fallback(|| async {
                    HttpError::new(StatusCode::NOT_FOUND, "this listener serves GET /metrics only")
                })
                .with_state(Api { controller, view, captures: Default::default() }),
            &ApiOptions { token: None, ..options.clone() },
        );
        tasks.push(serve_task(bound, app, limits, local.to_string()));
        tracing::info!(listen = %local, "metrics listening (GET /metrics only)");
        local
    });
    tracing::info!(
        listen = %local,
        token = options.token.is_some(),
        "admin API listening"
    );
    Ok(ApiServer { local, metrics_local, tasks })
}

/// Bind `listen` and serve the API until an I/O error stops the server.
pub async fn serve(
    options: &ApiOptions,
    controller: Arc<Mutex<Controller>>,
    view: Arc<dyn DataplaneView>,
) -> Result<(), ApiError> {
    let (bound, local) = bind(&options.listen, options.socket_group.as_deref())?;
    let app = guarded(router(controller, view), options);
    accept_loop(bound, app, options.limits)
        .await
        .map_err(|source| ApiError::Serve { listen: local.to_string(), source })
}

fn serve_task(bound: Bound, app: Router, limits: Limits, shown: String) -> JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(e) = accept_loop(bound, app, limits).await {
            tracing::error!(listen = shown, "admin API stopped: {e}");
        }
    })
}

/// `app` with the body limit, the request timeout and, with a token, the token check.
fn guarded(app: Router, options: &ApiOptions) -> Router {
    let limits = options.limits;
    let app = match &options.token {
        Some(t) => app.layer(middleware::from_fn_with_state(Arc::new(t.clone()), require_token)),
        None => app,
    };
    app.layer(middleware::from_fn_with_state(limits, bounded))
        .layer(DefaultBodyLimit::max(limits.max_body))
}

/// The request timeout and an early `413` for a declared body above the limit.
async fn bounded(State(limits): State<Limits>, req: Request, next: Next) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.max_body as u64) {
        return HttpError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is larger than {} bytes", limits.max_body),
        )
        .into_response();
    }
    match tokio::time::timeout(limits.request_timeout, next.run(req)).await {
        Ok(r) => r,
        Err(_) => HttpError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!("the request took longer than {:?}", limits.request_timeout),
        )
        .into_response(),
    }
}

/// Every request but `GET /metrics` carries `Authorization: Bearer <token>`.
async fn require_token(State(token): State<Arc<String>>, req: Request, next: Next) -> Response {
    if req.method() == Method::GET && req.uri().path() == "/metrics" {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match given {
        Some(g) if bool::from(g.as_bytes().ct_eq(token.as_bytes())) => next.run(req).await,
        Some(_) => unauthorized("the token is wrong"),
        None => unauthorized(
            "this endpoint needs `Authorization: Bearer <token>` (admin.token_file; spillwayctl \
             --token-file)",
        ),
    }
}

fn unauthorized(message: &str) -> Response {
    let mut r = HttpError::new(StatusCode::UNAUTHORIZED, message).into_response();
    r.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    r
}

/// Accept connections until the listener fails: each one on its own task, one request per
/// connection, headers within the limit, at most `max_connections` at once.
async fn accept_loop(bound: Bound, app: Router, limits: Limits) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let accepted = match &bound {
            Bound::Tcp(l) => l.accept().await.map(|(s, _)| Stream::Tcp(s)),
            Bound::Unix(l) => l.accept().await.map(|(s, _)| Stream::Unix(s)),
        };
        let io = match accepted {
            Ok(io) => io,
            Err(e) if transient(&e) => {
                tracing::warn!("admin API: cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            // Full: close it at once rather than queue it.
            continue;
        };
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .keep_alive(false)
                .serve_connection(TokioIo::new(io), service);
            let _ = conn.await;
        });
    }
}

/// An accept error a busy host recovers from (too many open files, a connection reset before
/// it was accepted): logged and waited out, not the end of the server.
fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    ) || matches!(e.raw_os_error(), Some(23 | 24)) // ENFILE, EMFILE
}

/// A TCP or Unix stream, as one type for hyper.
enum Stream {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

impl tokio::io::AsyncRead for Stream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            Stream::Unix(s) => std::pin::Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for Stream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            Stream::Unix(s) => std::pin::Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => std::pin::Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => std::pin::Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => std::pin::Pin::new(s).poll_shutdown(cx),
        }
    }
}

fn bind(listen: &str, group: Option<&str>) -> Result<(Bound, Listen), ApiError> {
    let bind_err = |source| ApiError::Bind { listen: listen.to_owned(), source };
    match Listen::parse(listen) {
        Some(Listen::Tcp(a)) => {
            let addr: std::net::SocketAddr =
                a.parse().map_err(|_| ApiError::BadListen(listen.to_owned()))?;
            let l = std::net::TcpListener::bind(addr).map_err(bind_err)?;
            l.set_nonblocking(true).map_err(bind_err)?;
            let local = l.local_addr().map_err(bind_err)?;
            let l = tokio::net::TcpListener::from_std(l).map_err(bind_err)?;
            Ok((Bound::Tcp(l), Listen::Tcp(local.to_string())))
        }
        Some(Listen::Unix(path)) => {
            let gid = match group {
                Some(g) => Some(group_id(g).ok_or_else(|| ApiError::Group(g.to_owned()))?),
                None => None,
            };
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(bind_err)?;
            }
            remove_stale_socket(&path).map_err(bind_err)?;
            let l = std::os::unix::net::UnixListener::bind(&path).map_err(bind_err)?;
            // The API changes health and drains backends: its owner, or its group, only.
            let mode = match gid {
                Some(gid) => {
                    std::os::unix::fs::chown(&path, None, Some(gid)).map_err(bind_err)?;
                    0o660
                }
                None => 0o600,
            };
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                .map_err(bind_err)?;
            l.set_nonblocking(true).map_err(bind_err)?;
            let l = tokio::net::UnixListener::from_std(l).map_err(bind_err)?;
            Ok((Bound::Unix(l), Listen::Unix(path)))
        }
        None => Err(ApiError::BadListen(listen.to_owned())),
    }
}

/// The id of group `name` (a name from `/etc/group`, or a number).
fn group_id(name: &str) -> Option<u32> {
    if let Ok(gid) = name.parse() {
        return Some(gid);
    }
    let groups = std::fs::read_to_string("/etc/group").ok()?;
    groups.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == name).then_some(())?;
        f.nth(1)?.parse().ok()
    })
}

/// A socket file left by a process that is gone is removed; one that still accepts
/// connections, or a file that is not a socket, is an error.
fn remove_stale_socket(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else { return Ok(()) };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "the path exists and is not a socket",
        ));
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            "another process is listening on this socket",
        ));
    }
    std::fs::remove_file(path)
}
