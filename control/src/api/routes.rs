//! The route table: which handler answers which method and path.

use super::error::HttpError;
use super::handlers::*;
use super::Api;
use crate::controller::Controller;
use crate::view::DataplaneView;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use std::sync::{Arc, Mutex};

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
