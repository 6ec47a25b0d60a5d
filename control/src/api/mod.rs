//! The operator API: JSON over HTTP/1.1 on `admin.listen` (a Unix socket by default, or TCP
//! with a token), plus `GET /metrics` (see [`crate::metrics`]). `spillwayctl` is a thin client
//! of it (`spillway_api::client`); `docs/operations.md` is the reference of every endpoint. Who
//! may connect and the bounds on every connection: [`server`].
//!
//! It owns the HTTP server (axum on the control plane's tokio current-thread runtime) and the
//! translation of controller and data-plane state into the request and reply shapes, which
//! live in [`spillway_api::types`] (the client reads the same definitions). It changes state
//! only through the [`Controller`] (health overrides, HC-2; drains; reloads, NX-3) and reads
//! the data plane only through [`DataplaneView`].
//!
//! It must never block the runtime it shares with the health checks and the daemon's main
//! loop: the controller's mutex is held only for short, non-awaiting sections (never across an
//! `.await`), a reload parses and validates the file on the blocking pool before taking the
//! lock, and conntrack queries wait for the workers' replies at most [`LOOKUP_TIMEOUT`].
//!
//! Where things are: the state every handler shares (`Api`) and the controller's lock here, the
//! route table in `routes.rs`, the handlers in `handlers.rs`, request parsing (flows from query
//! strings, JSON bodies) in `query.rs`, the replies filled from the controller's state in
//! `replies.rs`, values as text in `format.rs`, error replies in `error.rs`.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::controller::Controller;
use crate::view::DataplaneView;

mod capture;
mod counters;
mod error;
mod flows;
mod format;
mod handlers;
mod preview;
mod query;
mod replies;
mod routes;
mod server;

pub use capture::CAPTURE_HEADER;
pub use routes::router;
pub use server::{read_token, serve, spawn, ApiOptions, ApiServer, Limits, MIN_TOKEN_LEN};
/// Where the server listens (`admin.listen`); defined with the client, which connects there.
pub use spillway_api::Listen;

/// The longest an API request waits for the workers' conntrack replies (a worker answers
/// between two bursts; one that does not answer in time is reported as `no_answer`).
pub const LOOKUP_TIMEOUT: Duration = Duration::from_millis(500);

/// What every handler shares. It lives here, above the handlers' modules and the route table,
/// so that they all use it without importing each other.
#[derive(Clone)]
struct Api {
    controller: Arc<Mutex<Controller>>,
    view: Arc<dyn DataplaneView>,
    /// The capture under way or the last one (`/v1/capture`).
    captures: Arc<Mutex<capture::Captures>>,
}

/// Lock the controller. Sections under the lock never await and never panic on their own, so
/// a poisoned lock (a panic elsewhere, in tests) still holds consistent state.
fn lock(c: &Mutex<Controller>) -> MutexGuard<'_, Controller> {
    c.lock().unwrap_or_else(PoisonError::into_inner)
}

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
