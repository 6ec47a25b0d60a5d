//! The API test rig: a real API server ([`api::spawn`]) over a real [`Controller`] started from
//! a YAML file and a fake data plane ([`FakeView`]: hand-set counters, a fake mailbox answering
//! conntrack lookups), with a client of it. Shared by this crate's `tests/api.rs` (the API) and
//! spillway-ctl's `tests/cli.rs` (`spillwayctl` run as a process against the same server),
//! which includes this file by its path.

#![allow(dead_code)]

use hyper::Method;
use spillway_api::client::Client;
use spillway_api::types::{ActionReply, BackendInfo, BackendsReply, ServiceInfo, ServicesReply};
use spillway_control::api::{self, ApiOptions, ApiServer};
use spillway_control::config;
use spillway_control::controller::Controller;
use spillway_control::view::{DataplaneView, LookupReply};
use spillway_core::addr::Addr;
use spillway_core::conntrack::Entry;
use spillway_core::counters::WorkerCounters;
use spillway_core::flow::FlowKey;
use spillway_core::mailbox::{reply_channel, ReplySender};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// A test configuration. `web`: PER_SESSION with CLIENT_IP affinity (2-tuple tracking keys,
/// CT-1d), primaries in zone-a and zone-b, a failover group in zone-c, SPILL_CROSS_ZONE at
/// 0.6, no health checks (healthy). `dns`: one backend probed by TCP on a closed loopback port.
pub fn yaml(closed_port: u16) -> String {
    format!(
        r#"dataplane:
  ports: [net_null0]
  workers: 3
  node:
    ipv4: 10.0.0.2/8
    gateway_ipv4: 10.0.0.1
admin:
  listen: unix:/run/spillway-api-test/unused.sock
topology:
  region: r1
  zones:
    - name: zone-a
    - name: zone-b
    - name: zone-c
  client_subnets:
    - prefix: 192.0.2.0/25
      zone: zone-a
    - prefix: 192.0.2.128/25
      zone: zone-b
health_checks:
  tcp-closed:
    type: TCP
    check_interval_sec: 0.05
    timeout_sec: 0.04
    initial: healthy
services:
  - name: web
    forwarding_rules:
      - vip: 198.51.100.10
        protocol: TCP
        ports: [80]
    backend_service:
      session_affinity: CLIENT_IP
      connection_tracking_policy:
        tracking_mode: PER_SESSION
      zonal_affinity:
        spillover: ZONAL_AFFINITY_SPILL_CROSS_ZONE
        spillover_ratio: 0.6
      backends:
        - group: web-a
          zone: zone-a
          endpoints: [10.0.1.1, 10.0.1.2]
        - group: web-b
          zone: zone-b
          weight: 3
          endpoints: [10.0.2.1, 10.0.2.2]
        - group: web-c
          zone: zone-c
          failover: true
          endpoints: [10.0.3.1]
  - name: dns
    forwarding_rules:
      - vip: 198.51.100.53
        protocol: UDP
        ports: [53]
    backend_service:
      backends:
        - group: dns-a
          zone: zone-a
          health_check: tcp-closed
          endpoints: ["127.0.0.1:{closed_port}"]
"#
    )
}

/// QUIC-LB: `h3` on UDP 443 over two backends with a plaintext configuration 0 (3-octet server
/// IDs, 4-octet nonces): server ID 0a0001 is 10.0.1.1's, 0a0002 10.0.1.2's; no health checks.
pub fn quic_yaml(_: u16) -> String {
    r#"dataplane:
  ports: [net_null0]
  workers: 3
  node:
    ipv4: 10.0.0.2/8
    gateway_ipv4: 10.0.0.1
admin:
  listen: unix:/run/spillway-api-test/unused.sock
topology:
  region: r1
  zones:
    - name: zone-a
services:
  - name: h3
    forwarding_rules:
      - vip: 198.51.100.30
        protocol: UDP
        ports: [443]
    backend_service:
      backends:
        - group: h3-a
          zone: zone-a
          endpoints: [10.0.1.1, 10.0.1.2]
      quic_lb:
        configs:
          - {id: 0, server_id_length: 3, nonce_length: 4}
        server_ids:
          - {endpoint: 10.0.1.1, config: 0, server_id: "0a0001"}
          - {endpoint: 10.0.1.2, config: 0, server_id: "0a0002"}
"#
    .to_owned()
}

/// Section 7: one advanced service (`WATERFALL_BY_ZONE`), capacity 10 new connections/s per
/// endpoint, three endpoints in zone-a and two in zone-b, no health checks (healthy).
pub fn advanced_yaml(_: u16) -> String {
    r#"dataplane:
  ports: [net_null0]
  workers: 3
  node:
    ipv4: 10.0.0.2/8
    gateway_ipv4: 10.0.0.1
admin:
  listen: unix:/run/spillway-api-test/unused.sock
topology:
  region: r1
  zones:
    - name: zone-a
    - name: zone-b
  client_subnets:
    - prefix: 192.0.2.0/25
      zone: zone-a
    - prefix: 192.0.2.128/25
      zone: zone-b
services:
  - name: mesh
    forwarding_rules:
      - vip: 198.51.100.20
        protocol: TCP
        ports: [443]
    backend_service:
      advanced:
        algorithm: WATERFALL_BY_ZONE
      backends:
        - group: mesh-a
          zone: zone-a
          capacity:
            max_rate_per_endpoint: 10
          endpoints: [10.0.5.1, 10.0.5.2, 10.0.5.3]
        - group: mesh-b
          zone: zone-b
          capacity:
            max_rate_per_endpoint: 10
          endpoints: [10.0.6.1, 10.0.6.2]
"#
    .to_owned()
}

/// The data plane, faked: counters set by hand; worker `silent` never answers lookups, the
/// others answer from `entries` (from a task, like a worker between two bursts).
#[derive(Debug)]
pub struct FakeView {
    pub counters: Vec<WorkerCounters>,
    pub entries: Mutex<HashMap<(usize, FlowKey), Entry>>,
    pub silent: usize,
    pub parked: Mutex<Vec<ReplySender>>,
    pub queries: Mutex<Vec<(FlowKey, u64)>>,
    /// Backends a reload asked to resolve ahead (each on-link: its own next hop).
    pub asked: Mutex<Vec<Addr>>,
    /// Next hops with a MAC.
    pub resolved: Mutex<Vec<Addr>>,
}

impl DataplaneView for FakeView {
    fn workers(&self) -> usize {
        self.counters.len()
    }

    fn counters(&self, worker: usize) -> &WorkerCounters {
        &self.counters[worker]
    }

    fn lookup(&self, key: FlowKey, hash: u64) -> Vec<LookupReply> {
        self.queries.lock().unwrap().push((key, hash));
        (0..self.counters.len())
            .map(|w| {
                let (tx, rx) = reply_channel();
                if w == self.silent {
                    self.parked.lock().unwrap().push(tx);
                } else {
                    let found = self.entries.lock().unwrap().get(&(w, key)).copied();
                    tokio::spawn(async move {
                        let _ = tx.send(found);
                    });
                }
                rx
            })
            .collect()
    }

    fn resolve_ahead(&self, backends: &[Addr]) -> Vec<Addr> {
        self.asked.lock().unwrap().extend_from_slice(backends);
        self.unresolved(backends)
    }

    fn neighbours(&self) -> Vec<(Addr, [u8; 6])> {
        self.resolved.lock().unwrap().iter().map(|a| (*a, [2, 0, 0, 0, 0, 1])).collect()
    }
}

pub struct Fixture {
    pub dir: TempDir,
    pub path: PathBuf,
    pub closed_port: u16,
    pub controller: Arc<Mutex<Controller>>,
    pub view: Arc<FakeView>,
    pub server: ApiServer,
    pub client: Client,
}

/// A port nothing listens on.
pub fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

pub async fn fixture(unix: bool) -> Fixture {
    fixture_with(unix, yaml).await
}

/// A fixture on the configuration `config(closed_port)`.
pub async fn fixture_with(unix: bool, config: fn(u16) -> String) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("api.yaml");
    let closed_port = closed_port();
    std::fs::write(&path, config(closed_port)).unwrap();
    let cfg = config::load(&path).expect("test config is valid");
    let controller =
        Arc::new(Mutex::new(Controller::start(&path, cfg, Instant::now()).expect("controller")));
    let view = Arc::new(FakeView {
        counters: (0..3).map(|_| WorkerCounters::new()).collect(),
        entries: Mutex::new(HashMap::new()),
        silent: 2,
        parked: Mutex::new(Vec::new()),
        queries: Mutex::new(Vec::new()),
        asked: Mutex::new(Vec::new()),
        resolved: Mutex::new(Vec::new()),
    });
    let listen = if unix {
        format!("unix:{}", dir.path().join("api.sock").display())
    } else {
        "127.0.0.1:0".to_owned()
    };
    let server =
        api::spawn(&ApiOptions::new(&listen), Arc::clone(&controller), view.clone()).expect("bind");
    let client = Client::new(&server.local_addr().to_string(), Duration::from_secs(5)).unwrap();
    Fixture { dir, path, closed_port, controller, view, server, client }
}

impl Fixture {
    pub async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> T {
        let body = self.client.call(Method::GET, path, None).await.unwrap();
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
    }

    pub async fn post<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: serde_json::Value,
    ) -> T {
        let body = self.client.call(Method::POST, path, Some(&body)).await.unwrap();
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
    }

    pub async fn set_health(&self, addr: &str, health: &str) -> ActionReply {
        self.post(&format!("/v1/backends/{addr}/health"), serde_json::json!({ "health": health }))
            .await
    }

    pub async fn backend(&self, addr: &str) -> BackendInfo {
        let r: BackendsReply = self.get("/v1/backends").await;
        r.backends.into_iter().find(|b| b.address == addr).expect("backend listed")
    }

    pub async fn service(&self, name: &str) -> ServiceInfo {
        let r: ServicesReply = self.get("/v1/services").await;
        r.services.into_iter().find(|s| s.name == name).expect("service listed")
    }
}
