//! The route table: which handler answers which method and path, and the state they share.

use super::error::HttpError;
use super::handlers::*;
use crate::controller::Controller;
use crate::view::DataplaneView;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// What every handler shares.
#[derive(Clone)]
pub(super) struct Api {
    pub(super) controller: Arc<Mutex<Controller>>,
    pub(super) view: Arc<dyn DataplaneView>,
    /// The capture under way or the last one (`/v1/capture`).
    pub(super) captures: Arc<Mutex<super::capture::Captures>>,
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
        .route("/v1/reload/preview", post(super::preview::preview))
        .route("/v1/instance", get(instance))
        .route("/v1/instance/drain", post(drain_instance))
        .route("/v1/instance/undrain", post(undrain_instance))
        .route("/v1/neighbours", get(neighbours))
        .route("/v1/conntrack", get(conntrack))
        .route("/v1/counters", get(super::counters::counters))
        .route("/v1/conntrack/lookup", get(lookup))
        .route("/v1/conntrack/flows", get(super::flows::flows))
        .route("/v1/explain", get(explain_flow))
        .route("/v1/capture", post(super::capture::start).get(super::capture::summary))
        .route("/metrics", get(metrics))
        .fallback(|| async { HttpError::new(StatusCode::NOT_FOUND, "no such endpoint") })
        .method_not_allowed_fallback(|| async {
            HttpError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this endpoint")
        })
        .with_state(Api { controller, view, captures: Arc::default() })
}

/// Lock the controller. Sections under the lock never await and never panic on their own, so
/// a poisoned lock (a panic elsewhere, in tests) still holds consistent state.
pub(super) fn lock(c: &Mutex<Controller>) -> MutexGuard<'_, Controller> {
    c.lock().unwrap_or_else(PoisonError::into_inner)
}
