//! What several control-plane tests (and the `api` fuzz target) share: a one-service
//! configuration, a data-plane view with one worker, and [`eventually`], the wait for a
//! condition with a deadline.

#![allow(dead_code)]

use spillway_control::view::{DataplaneView, LookupReply};
use spillway_core::addr::Addr;
use spillway_core::counters::WorkerCounters;
use spillway_core::flow::FlowKey;
use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, Instant};

/// Waits for a condition, with a deadline: awaits `check` every 10 ms until it returns `Ok`,
/// and returns its value. After `within` it panics, saying `what` did not happen and showing
/// the last `Err` (the state seen instead). Tests wait through this rather than sleep for a
/// guessed time: a wait ends as soon as the condition holds, and fails rather than hangs.
pub async fn eventually<T, E, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    E: Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + within;
    loop {
        let last = match check().await {
            Ok(v) => return v,
            Err(e) => e,
        };
        assert!(Instant::now() < deadline, "{what}: not within {within:?}; last seen: {last:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A configuration with one service, `web` (TCP 198.51.100.10:80), over `endpoints` in one
/// group of zone `zone-a`; no health checks (nothing is probed).
pub fn one_service(endpoints: &[&str]) -> String {
    format!(
        "dataplane:
  ports: [net_null0]
  node:
    ipv4: 10.0.0.2/8
topology:
  region: r1
  zones: [{{name: zone-a}}]
services:
  - name: web
    forwarding_rules:
      - {{vip: 198.51.100.10, protocol: TCP, ports: [80]}}
    backend_service:
      backends:
        - {{group: a, zone: zone-a, endpoints: [{}]}}
",
        endpoints.join(", ")
    )
}

/// The data plane as one worker with its counters, no connection table entries and no
/// neighbours.
#[derive(Default)]
pub struct OneWorker(pub WorkerCounters);

impl OneWorker {
    pub fn new() -> OneWorker {
        OneWorker(WorkerCounters::new())
    }
}

impl DataplaneView for OneWorker {
    fn workers(&self) -> usize {
        1
    }
    fn counters(&self, _: usize) -> &WorkerCounters {
        &self.0
    }
    fn lookup(&self, _: FlowKey, _: u64) -> Vec<LookupReply> {
        Vec::new()
    }
    fn neighbours(&self) -> Vec<(Addr, [u8; 6])> {
        Vec::new()
    }
}
