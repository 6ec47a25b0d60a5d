//! `/metrics` byte for byte: one representative state (two workers with counters, ports, the
//! exception path, the neighbour resolver, a fleet instance, zonal affinity with a failover
//! group, an advanced service, an override, a drained and a draining backend, a probed
//! backend) rendered by `metrics::render` and compared with the whole expected text in
//! `tests/expected/metrics.txt`. The other tests check single samples; this one pins the
//! order of the families and samples, every name, help text and label, so that a change to
//! how the exposition is assembled cannot change what a scraper reads without this failing.

use spillway_control::config::Config;
use spillway_control::controller::{Controller, Override};
use spillway_control::health::HealthEvent;
use spillway_control::view::{DataplaneView, LookupReply};
use spillway_core::addr::Addr;
use spillway_core::counters::{
    KernelPathCounters, NeighbourCounters, PortCounters, Reason, WorkerCounters,
};
use spillway_core::decide::{DropReason, ForwardReason};
use spillway_core::flow::FlowKey;
use spillway_core::model::{BackendKey, Endpoint};
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

/// The probed group's check must not probe during the test, or its counts and latencies would
/// vary: the test body never awaits, so on its current-thread runtime the probe tasks are never
/// polled, and the check runs only once an hour in case that changes.
const CONFIG: &str = "dataplane:
  ports: [net_null0]
  workers: 2
  node:
    ipv4: 10.0.0.2/8
    gateway_ipv4: 10.0.0.1
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
announce:
  table: 100
health_checks:
  hourly:
    type: TCP
    port: 9
    check_interval_sec: 3600
    timeout_sec: 1
    initial: healthy
services:
  - name: web
    forwarding_rules:
      - {vip: 198.51.100.10, protocol: TCP, ports: [80, 443]}
    backend_service:
      zonal_affinity:
        spillover: ZONAL_AFFINITY_SPILL_CROSS_ZONE
        spillover_ratio: 0.5
      backends:
        - group: web-a
          zone: zone-a
          health_check: hourly
          endpoints: [10.0.1.1, 10.0.1.2]
        - group: web-b
          zone: zone-b
          endpoints: [10.0.2.1]
        - group: web-f
          zone: zone-b
          failover: true
          endpoints: [10.0.3.1]
  - name: api
    forwarding_rules:
      - {vip: 198.51.100.20, protocol: TCP, ports: [443]}
    backend_service:
      advanced:
        algorithm: WATERFALL_BY_REGION
        auto_capacity_drain: true
      backends:
        - group: api-a
          zone: zone-a
          capacity: {max_rate_per_endpoint: 500}
          preferred: true
          endpoints: [10.0.5.1, 10.0.5.2]
        - group: api-b
          zone: zone-b
          endpoints: [10.0.6.1]
  - name: dns
    announce: always
    forwarding_rules:
      - {vip: 198.51.100.53, protocol: UDP, ports: [53]}
    backend_service:
      connection_draining:
        draining_timeout_sec: 300
      backends:
        - group: dns-a
          zone: zone-a
          endpoints: ['10.0.4.1:5353', '10.0.4.2:5353']
";

/// Two workers, two ports, an exception path and a neighbour resolver, all counters set by
/// hand.
struct View {
    workers: Vec<WorkerCounters>,
    ports: Vec<(String, PortCounters)>,
    kernel: KernelPathCounters,
    neighbour: NeighbourCounters,
}

impl DataplaneView for View {
    fn workers(&self) -> usize {
        self.workers.len()
    }
    fn counters(&self, worker: usize) -> &WorkerCounters {
        &self.workers[worker]
    }
    fn lookup(&self, _: FlowKey, _: u64) -> Vec<LookupReply> {
        Vec::new()
    }
    fn neighbours(&self) -> Vec<(Addr, [u8; 6])> {
        Vec::new()
    }
    fn neighbour_counters(&self) -> Option<&NeighbourCounters> {
        Some(&self.neighbour)
    }
    fn kernel_counters(&self) -> Option<&KernelPathCounters> {
        Some(&self.kernel)
    }
    fn port_counters(&self) -> Vec<(&str, &PortCounters)> {
        self.ports.iter().map(|(n, c)| (n.as_str(), c)).collect()
    }
}

fn addr(s: &str) -> Addr {
    s.parse().expect("address")
}

fn key(service: &str, endpoint: &str) -> BackendKey {
    let endpoint: Endpoint = match endpoint.rsplit_once(':') {
        Some((a, p)) => Endpoint { addr: addr(a), port: p.parse().expect("port") },
        None => Endpoint { addr: addr(endpoint), port: 0 },
    };
    BackendKey { service: service.to_owned(), endpoint }
}

fn view() -> View {
    let v = View {
        workers: (0..2).map(|_| WorkerCounters::new()).collect(),
        ports: vec![
            ("net_null0".into(), PortCounters::default()),
            ("net_tap_kernel".into(), PortCounters::default()),
        ],
        kernel: KernelPathCounters::default(),
        neighbour: NeighbourCounters::default(),
    };
    for (i, w) in v.workers.iter().enumerate() {
        let n = i as u64 + 1;
        w.rx_packets.add(1000 * n);
        w.rx_bytes.add(64_000 * n);
        w.tx_packets.add(990 * n);
        w.heartbeat.add(50 + n);
        w.snapshot_generation.set(4);
        w.ct_entries.set(10 * n);
        w.ct_capacity.set(4096);
        w.ct_inserts.add(20 * n);
        w.ct_evictions.add(n - 1);
        w.ct_bypassed.add(3 * n);
        w.neighbour_replies.add(n);
        w.neighbour_answers_heard.add(2 * n);
        w.echo_replies.add(5 * n);
        w.icmp_errors_forwarded.add(n);
        w.kernel_frames.add(7 * n);
        w.reason(Reason::Forward(ForwardReason::ConntrackHit)).add(400 * n);
        w.reason(Reason::Decision(DropReason::NoEligibleBackend)).add(n);
    }
    v.ports[0].1.ipackets.set(2000);
    v.ports[0].1.opackets.set(1990);
    v.ports[0].1.imissed.set(40);
    v.ports[0].1.rx_nombuf.set(2);
    v.ports[1].1.opackets.set(7);
    v.ports[1].1.oerrors.set(1);
    v.kernel.to_kernel.set(90);
    v.kernel.to_kernel_dropped.set(3);
    v.kernel.from_kernel.set(12);
    v.neighbour.learned.set(4);
    v.neighbour.confirmed.set(30);
    v.neighbour.ignored_unsolicited.set(2);
    v.neighbour.publishes.set(5);
    v.neighbour.unresolved.set(1);
    v
}

#[tokio::test(flavor = "current_thread")]
async fn the_exposition_of_a_representative_state_is_exactly_the_expected_text() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("spillway.yaml");
    std::fs::write(&path, CONFIG).expect("write");
    let config = Config::from_yaml(&path, CONFIG).expect("valid");
    let mut c = Controller::start(&path, config, Instant::now()).expect("controller");
    c.instance_mut().set_waiting_for(None, Instant::now());
    // One health verdict change each way on 10.0.1.1 (the probes), an override on 10.0.1.2,
    // an operator drain of 10.0.2.1.
    for healthy in [false, true] {
        c.on_health_event(HealthEvent { key: key("web", "10.0.1.1"), healthy });
    }
    c.set_override(addr("10.0.1.2"), Some("web"), Some(Override::Unhealthy)).expect("override");
    c.set_drained(addr("10.0.2.1"), Some("web"), true).expect("drain");
    // A reload that removes 10.0.4.2:5353 (draining), and a rejected one.
    let reloaded = CONFIG.replace("['10.0.4.1:5353', '10.0.4.2:5353']", "['10.0.4.1:5353']");
    let config = Config::from_yaml(Path::new(&path), &reloaded).expect("valid");
    c.apply_config(config).expect("reload");
    c.note_rejected_reload();

    let v = view();
    let snap = c.snapshot();
    let web = snap.services().find(|s| &*s.name == "web").expect("web").id;
    let slot = |k: &BackendKey| {
        (0..snap.backends.len())
            .find(|&s| c.state().key_of(u16::try_from(s).unwrap()) == Some(k))
            .expect("slot")
    };
    let b1 = slot(&key("web", "10.0.1.1"));
    let dns2 = slot(&key("dns", "10.0.4.2:5353"));
    for (i, w) in v.workers.iter().enumerate() {
        let n = i as u64 + 1;
        w.services[usize::from(web)].packets.add(300 * n);
        w.services[usize::from(web)].bytes.add(30_000 * n);
        w.services[usize::from(web)].new_connections.add(6 * n);
        w.backends[b1].packets.add(100 * n);
        w.backends[b1].bytes.add(10_000 * n);
        w.backends[b1].new_connections.add(2 * n);
        w.backends[dns2].packets.add(n);
    }
    drop(snap);

    let c = Mutex::new(c);
    let text = spillway_control::metrics::render(&c, &v).expect("render");
    let expected = include_str!("expected/metrics.txt");
    // `SPILLWAY_BLESS=1` writes the new text in place of the expected one, for a change that
    // means to change the exposition (review the diff before committing it).
    if std::env::var_os("SPILLWAY_BLESS").is_some() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/expected/metrics.txt");
        std::fs::write(path, &text).expect("write the expected text");
        return;
    }
    if text != expected {
        let first = text
            .lines()
            .zip(expected.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| text.lines().count().min(expected.lines().count()));
        panic!(
            "the exposition differs from tests/expected/metrics.txt from line {}:\n{text}",
            first + 1
        );
    }
}
