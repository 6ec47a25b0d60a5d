//! The admin API's request handling must answer any request with a reply, never a panic and
//! never a server error: arbitrary methods, paths, queries and bodies through the real router
//! (the same handlers, extractors and JSON parsing the daemon serves), against a real
//! controller started from a configuration file (no health checks: nothing is probed) and a
//! data-plane view with one worker.
//!
//! Input: the first byte picks the method; the rest up to the first newline is the request
//! target (path and query); what follows is the body. Corpus: `fuzz/corpus/api`.

#![no_main]

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use libfuzzer_sys::fuzz_target;
use spillway_control::api::router;
use spillway_control::config;
use spillway_control::controller::Controller;
use spillway_control::view::DataplaneView;
use tower::ServiceExt;

/// The configuration and the one-worker view the control-plane tests use.
#[path = "../../control/tests/common/mod.rs"]
mod common;

fn setup() -> &'static (tokio::runtime::Runtime, Router) {
    static S: OnceLock<(tokio::runtime::Runtime, Router)> = OnceLock::new();
    S.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("spillway-fuzz-api-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path: PathBuf = dir.join("spillway.yaml");
        std::fs::write(&path, common::one_service(&["10.0.1.1", "10.0.1.2:8080"]))
            .expect("write the config");
        let cfg = config::load(&path).expect("the config is valid");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        let controller = rt.block_on(async {
            Controller::start(&path, cfg, Instant::now()).expect("controller")
        });
        let view: Arc<dyn DataplaneView> = Arc::new(common::OneWorker::new());
        (rt, router(Arc::new(Mutex::new(controller)), view))
    })
}

const METHODS: [Method; 5] = [Method::GET, Method::POST, Method::PUT, Method::DELETE, Method::HEAD];

fuzz_target!(|data: &[u8]| {
    let Some((&m, rest)) = data.split_first() else { return };
    let (target, body) = match rest.iter().position(|&b| b == b'\n') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let Ok(target) = std::str::from_utf8(target) else { return };
    let Ok(req) = Request::builder()
        .method(METHODS[usize::from(m) % METHODS.len()].clone())
        .uri(target)
        .header("content-type", "application/json")
        .body(Body::from(body.to_vec()))
    else {
        return;
    };
    let (rt, app) = setup();
    let reply = rt.block_on(app.clone().oneshot(req)).expect("the router is infallible");
    assert!(
        reply.status() != StatusCode::INTERNAL_SERVER_ERROR,
        "a server error for {target:?}"
    );
});
