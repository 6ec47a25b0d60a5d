//! The operator API and `/metrics` over real HTTP (hyper client, axum server) on a Unix socket
//! and on loopback TCP, against a real
//! [`Controller`](spillway_control::controller::Controller) started from a YAML file and a fake
//! data plane (hand-set counters, a fake mailbox answering conntrack lookups): the rig in
//! `api_rig/`. spillway-ctl's `tests/cli.rs` runs `spillwayctl` against the same rig.

mod api_rig;

use api_rig::*;
use spillway_api::client::Client;
use spillway_api::types::*;
use spillway_control::api::{self, ApiOptions, Listen};
use spillway_core::addr::Addr;
use spillway_core::conntrack::{Entry, EntryValue};
use spillway_core::counters::Reason;
use spillway_core::decide::{DropReason, ForwardReason};
use spillway_core::flow::FlowKey;
use spillway_core::snapshot::BackendRef;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Fixture {
    async fn metrics(&self) -> prometheus_parse::Scrape {
        let (status, text) = self.client.get("/metrics").await.unwrap();
        assert_eq!(status, 200, "{text}");
        prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap()
    }
}

/// The value of the one sample of `name` whose labels include `labels`.
fn sample(s: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<_> = s
        .samples
        .iter()
        .filter(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .collect();
    assert_eq!(found.len(), 1, "{name} {labels:?}: {found:?}");
    match &found[0].value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => *v,
        other => panic!("{name}: unexpected {other:?}"),
    }
}

fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.contains(needle)).expect("needle in text") + 1
}

#[tokio::test]
async fn status_services_and_backends_reflect_the_state() {
    let f = fixture(true).await;
    f.view.counters[0].ct_entries.set(10);
    f.view.counters[1].ct_entries.set(5);
    for c in &f.view.counters {
        c.ct_capacity.set(1024);
    }
    let s: StatusReply = f.get("/v1/status").await;
    assert_eq!(s.generation, f.controller.lock().unwrap().snapshot().generation);
    assert_eq!(s.workers, 3);
    assert_eq!(s.services, 2);
    // Six backends; five unchecked (healthy) and one probed with `initial: healthy` (HC-3).
    assert_eq!(s.backends, BackendCounts { total: 6, healthy: 6, drained: 0, draining: 0 });
    assert_eq!(s.conntrack, ConntrackTotals { entries: 15, capacity: 3072 });
    assert_eq!(s.config, f.path.display().to_string());

    let web = f.service("web").await;
    assert_eq!(web.eligible_kind, "HealthyPrimary");
    assert_eq!(web.eligible_size, 4);
    assert_eq!(web.eligible, ["10.0.1.1", "10.0.1.2", "10.0.2.1", "10.0.2.2"]);
    assert_eq!(web.policy.session_affinity, "CLIENT_IP");
    assert_eq!(web.policy.tracking_mode, "PER_SESSION");
    assert_eq!(web.policy.zonal_affinity, "ZONAL_AFFINITY_SPILL_CROSS_ZONE");
    assert_eq!(web.policy.spillover_ratio, Some(0.6));
    assert_eq!(
        web.rules,
        [RuleInfo {
            destination: "198.51.100.10".into(),
            protocol: "TCP".into(),
            ports: "80".into()
        }]
    );
    let zone = |n: &str| web.zones.iter().find(|z| z.zone == n).unwrap().clone();
    // ZA-2: zone-a and zone-b match (2 of 2 in zone: 1.0 >= 0.6), zone-c has no primary.
    assert_eq!(
        zone("zone-a"),
        ZoneChoiceInfo { zone: "zone-a".into(), zonal_match: true, spilled: false, size: 2 }
    );
    assert_eq!(
        zone("zone-c"),
        ZoneChoiceInfo { zone: "zone-c".into(), zonal_match: false, spilled: false, size: 4 }
    );

    let b = f.backend("10.0.2.2").await;
    assert_eq!((b.service.as_str(), b.group.as_str(), b.zone.as_str()), ("web", "web-b", "zone-b"));
    assert_eq!(
        (b.role.as_str(), b.probe.as_str(), b.health_override.as_str()),
        ("primary", "healthy", "auto")
    );
    assert!(b.healthy && !b.drained && b.eligible);
    assert_eq!((b.status.as_str(), b.weight), ("active", Some(3)));
    let fo = f.backend("10.0.3.1").await;
    assert_eq!((fo.role.as_str(), fo.eligible), ("failover", false));
    let dns = f.backend("127.0.0.1").await;
    assert_eq!((dns.port, dns.check.as_deref()), (f.closed_port, Some("tcp-closed")));
    // Filtered by service.
    let r: BackendsReply = f.get("/v1/backends?service=dns").await;
    assert_eq!(r.backends.len(), 1);

    // Unknown endpoints and methods are JSON errors.
    let (st, body) = f.client.get("/v1/nope").await.unwrap();
    assert_eq!(st, 404);
    assert!(serde_json::from_str::<ErrorReply>(&body).is_ok(), "{body}");
    let (st, body) = f.client.get("/v1/reload").await.unwrap();
    assert_eq!(st, 405, "{body}");
    assert!(serde_json::from_str::<ErrorReply>(&body).unwrap().error.contains("method"));
}

/// HC-2: an override shows in backends (override and effective health) and in the eligible
/// set; `auto` gives the backend back to its probes.
#[tokio::test]
async fn hc_2_set_health_then_backends_shows_override_and_effective_health() {
    let f = fixture(true).await;
    let r = f.set_health("10.0.1.1", "unhealthy").await;
    assert_eq!(r.backends.len(), 1);
    let b = f.backend("10.0.1.1").await;
    assert_eq!(
        (b.health_override.as_str(), b.probe.as_str(), b.healthy, b.eligible),
        ("unhealthy", "healthy", false, false)
    );
    assert_eq!(f.service("web").await.eligible_size, 3);
    let s: StatusReply = f.get("/v1/status").await;
    assert_eq!((s.backends.healthy, s.backends.total), (5, 6));

    // The dns backend's probes fail (closed port); forcing it healthy wins (HC-2).
    let r: ActionReply = f
        .post(
            "/v1/backends/127.0.0.1/health",
            serde_json::json!({"health": "healthy", "service": "dns"}),
        )
        .await;
    assert_eq!(r.backends[0].health_override, "healthy");
    assert!(r.backends[0].healthy);

    f.set_health("10.0.1.1", "auto").await;
    let b = f.backend("10.0.1.1").await;
    assert_eq!((b.health_override.as_str(), b.healthy, b.eligible), ("auto", true, true));

    // Errors: bad value, unknown backend, not an address.
    let bad = |path: &str, body: serde_json::Value| {
        let c = f.client.clone();
        let path = path.to_owned();
        async move { c.post(&path, Some(&body)).await.unwrap() }
    };
    let (st, body) =
        bad("/v1/backends/10.0.1.1/health", serde_json::json!({"health": "sick"})).await;
    assert_eq!(st, 400);
    assert!(body.contains("unknown health override `sick`"), "{body}");
    let (st, body) =
        bad("/v1/backends/10.9.9.9/health", serde_json::json!({"health": "healthy"})).await;
    assert_eq!(st, 404);
    assert!(body.contains("no backend 10.9.9.9"), "{body}");
    let (st, _) =
        bad("/v1/backends/not-an-ip/health", serde_json::json!({"health": "healthy"})).await;
    assert_eq!(st, 400);
}

#[tokio::test]
async fn drain_excludes_the_backend_from_the_eligible_set_until_undrained() {
    let f = fixture(false).await; // over TCP
    assert!(matches!(f.server.local_addr(), Listen::Tcp(_)));
    let before: StatusReply = f.get("/v1/status").await;
    let r: ActionReply = f.post("/v1/backends/10.0.2.2/drain", serde_json::json!({})).await;
    assert!(r.backends[0].drained);
    assert_eq!(r.generation, before.generation + 1);
    let b = f.backend("10.0.2.2").await;
    assert!(b.drained && b.healthy && !b.eligible);
    let web = f.service("web").await;
    assert_eq!(web.eligible_size, 3);
    assert!(!web.eligible.contains(&"10.0.2.2".to_owned()));
    assert_eq!(web.zones.iter().find(|z| z.zone == "zone-b").unwrap().size, 1);
    let s: StatusReply = f.get("/v1/status").await;
    assert_eq!(s.backends.drained, 1);

    let r: ActionReply = f.post("/v1/backends/10.0.2.2/undrain", serde_json::json!(null)).await;
    assert!(!r.backends[0].drained);
    assert_eq!(f.service("web").await.eligible_size, 4);
}

/// NX-3: an invalid file is rejected with its field and line and changes nothing; a valid
/// one reports the backends it added and removed.
#[tokio::test]
async fn nx_3_reload_rejects_an_invalid_file_and_reports_a_valid_change() {
    let f = fixture(true).await;
    let before: StatusReply = f.get("/v1/status").await;
    let good = yaml(f.closed_port);
    let bad = good.replace("spillover_ratio: 0.6", "spillover_ratio: 1.6");
    std::fs::write(&f.path, &bad).unwrap();
    let (st, body) = f.client.post("/v1/reload", None).await.unwrap();
    assert_eq!(st, 400, "{body}");
    let e: ErrorReply = serde_json::from_str(&body).unwrap();
    let line = line_of(&bad, "spillover_ratio: 1.6");
    let field = "services[0].backend_service.zonal_affinity.spillover_ratio";
    assert!(e.error.contains(field), "{}", e.error);
    assert!(e.error.contains(&format!("api.yaml:{line}:")), "{}", e.error);
    assert_eq!(e.errors.len(), 1);
    assert_eq!((e.errors[0].field.as_str(), e.errors[0].line), (field, Some(line)));
    let after: StatusReply = f.get("/v1/status").await;
    assert_eq!(after.generation, before.generation, "a rejected file publishes nothing");
    assert_eq!(f.service("web").await.policy.spillover_ratio, Some(0.6));

    let changed = good
        .replace("[10.0.2.1, 10.0.2.2]", "[10.0.2.1]")
        .replace("[10.0.1.1, 10.0.1.2]", "[10.0.1.1, 10.0.1.2, 10.0.1.3]");
    std::fs::write(&f.path, &changed).unwrap();
    let r: ReloadReply = f.post("/v1/reload", serde_json::Value::Null).await;
    assert_eq!(r.added, ["web/10.0.1.3"]);
    assert_eq!(r.removed.len(), 1);
    assert_eq!(r.removed[0].backend, "web/10.0.2.2");
    assert!(r.undrained.is_empty());
    assert_eq!(r.services, 2);
    assert!(r.generation > before.generation);
    let s: StatusReply = f.get("/v1/status").await;
    assert_eq!(s.generation, r.generation);
    assert!(f.service("web").await.eligible.contains(&"10.0.1.3".to_owned()));
    // Both outcomes counted for the alert on rejected reloads.
    let (_, text) = f.client.get("/metrics").await.unwrap();
    assert!(text.contains("spillway_reloads_total{result=\"applied\"} 1"), "{text}");
    assert!(text.contains("spillway_reloads_total{result=\"rejected\"} 1"), "{text}");
}

/// NX-3: a file with enum values the reader does not know (two of them, and a range error) is
/// rejected with every problem located, the accepted names listed, and changes nothing.
#[tokio::test]
async fn a_reload_with_unknown_enum_values_is_rejected_and_keeps_the_running_config() {
    let f = fixture(true).await;
    let before: StatusReply = f.get("/v1/status").await;
    let bad = yaml(f.closed_port)
        .replace("tracking_mode: PER_SESSION", "tracking_mode: PER_FLOW")
        .replace("spillover: ZONAL_AFFINITY_SPILL_CROSS_ZONE", "spillover: SPILL")
        .replace("weight: 3", "weight: 0");
    std::fs::write(&f.path, &bad).unwrap();
    let (st, body) = f.client.post("/v1/reload", None).await.unwrap();
    assert_eq!(st, 400, "{body}");
    let e: ErrorReply = serde_json::from_str(&body).unwrap();
    let problems: Vec<(&str, Option<usize>, Option<usize>)> =
        e.errors.iter().map(|p| (p.field.as_str(), p.line, p.column)).collect();
    let web = "services[0].backend_service";
    let mode = format!("{web}.connection_tracking_policy.tracking_mode");
    let spill = format!("{web}.zonal_affinity.spillover");
    let weight = format!("{web}.backends[1].weight");
    assert_eq!(
        problems,
        [
            (mode.as_str(), Some(line_of(&bad, "PER_FLOW")), Some(24)),
            (spill.as_str(), Some(line_of(&bad, "spillover: SPILL")), Some(20)),
            (weight.as_str(), Some(line_of(&bad, "weight: 0")), Some(19)),
        ],
        "{}",
        e.error
    );
    assert_eq!(e.errors[0].message, "`PER_FLOW` is not one of `PER_CONNECTION`, `PER_SESSION`");
    assert!(e.errors[1].message.contains("`ZONAL_AFFINITY_SPILL_CROSS_ZONE`"), "{}", e.error);
    let line = line_of(&bad, "PER_FLOW");
    assert!(
        e.error.contains(&format!("api.yaml:{line}:24: field `{mode}`: `PER_FLOW`")),
        "{}",
        e.error
    );
    let after: StatusReply = f.get("/v1/status").await;
    assert_eq!(after.generation, before.generation, "a rejected file publishes nothing");
    let policy = f.service("web").await.policy;
    assert_eq!(policy.tracking_mode, "PER_SESSION");
    assert_eq!(policy.spillover_ratio, Some(0.6));
    let (_, text) = f.client.get("/metrics").await.unwrap();
    assert!(text.contains("spillway_reloads_total{result=\"rejected\"} 1"), "{text}");
}

/// A reload that adds a backend asks for its next hop and publishes only once it has a MAC;
/// one whose next hop never answers is applied all the same after `RESOLVE_AHEAD`. Backends
/// the running configuration already has are not waited for.
#[tokio::test]
async fn a_reload_resolves_the_next_hops_of_the_backends_it_adds_before_it_publishes() {
    use spillway_control::controller::RESOLVE_AHEAD;
    let f = fixture(true).await;
    let generation = |f: &Fixture| f.controller.lock().unwrap().snapshot().generation;
    let before = generation(&f);
    let good = yaml(f.closed_port);
    let added = good.replace("[10.0.1.1, 10.0.1.2]", "[10.0.1.1, 10.0.1.2, 10.0.1.3]");
    std::fs::write(&f.path, &added).unwrap();
    let b3: Addr = "10.0.1.3".parse().unwrap();
    let view = Arc::clone(&f.view);
    let controller = Arc::clone(&f.controller);
    // The resolver's part: once the reload asked for 10.0.1.3, the new snapshot is not out
    // yet; then the answer comes.
    let resolver = tokio::spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(2);
        while !view.asked.lock().unwrap().contains(&b3) {
            assert!(Instant::now() < deadline, "the reload never asked for 10.0.1.3");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let unpublished = controller.lock().unwrap().snapshot().generation == before;
        view.resolved.lock().unwrap().push(b3);
        unpublished
    });
    let t0 = Instant::now();
    let r: ReloadReply = f.post("/v1/reload", serde_json::Value::Null).await;
    let took = t0.elapsed();
    assert!(resolver.await.unwrap(), "the snapshot with 10.0.1.3 waited for its MAC");
    assert_eq!(r.added, ["web/10.0.1.3"]);
    assert!(generation(&f) > before);
    assert_eq!(*f.view.asked.lock().unwrap(), [b3], "only the added backend is asked for");
    assert!(took < RESOLVE_AHEAD, "applied as soon as it resolved: {took:?}");

    // A next hop that never answers: applied after the bounded wait.
    let silent = added.replace("10.0.1.3]", "10.0.1.3, 10.0.1.4]");
    std::fs::write(&f.path, &silent).unwrap();
    let before = generation(&f);
    let t0 = Instant::now();
    let r: ReloadReply = f.post("/v1/reload", serde_json::Value::Null).await;
    let took = t0.elapsed();
    assert_eq!(r.added, ["web/10.0.1.4"]);
    assert!(generation(&f) > before);
    assert!(took >= RESOLVE_AHEAD, "waited for 10.0.1.4: {took:?}");
}

/// A reload preview lists the client zones whose zonal choice the candidate changes: without
/// zone-a's backends, zone-a's clients lose their zonal match (ZA-2) and get zone-b's; zone-b's
/// clients keep theirs; nothing is applied.
#[tokio::test]
async fn a_reload_preview_lists_the_zonal_choices_a_candidate_changes() {
    let f = fixture(true).await;
    let generation = f.controller.lock().unwrap().snapshot().generation;
    let candidate = yaml(f.closed_port).replace(
        "        - group: web-a\n          zone: zone-a\n          endpoints: [10.0.1.1, 10.0.1.2]\n",
        "",
    );
    assert!(!candidate.contains("web-a"), "the candidate drops web-a");
    let r: PreviewReply =
        f.post("/v1/reload/preview", serde_json::json!({ "config": candidate })).await;
    let zone = |name: &str| r.zones.iter().find(|z| z.service == "web" && z.zone == name);
    let a = zone("zone-a").expect("zone-a changes");
    assert_eq!(a.before, Some(ZoneChoice { zonal_match: true, spilled: false, eligible: 2 }));
    assert_eq!(a.after.map(|c| c.zonal_match), Some(false), "{a:?}");
    assert_eq!(a.after.map(|c| c.eligible), Some(2), "zone-b's two: {a:?}");
    assert!(zone("zone-b").is_none(), "zone-b keeps its choice: {:?}", r.zones);
    assert!(r.zones.iter().all(|z| z.service == "web"), "dns has no zonal affinity: {:?}", r.zones);
    assert_eq!(f.controller.lock().unwrap().snapshot().generation, generation, "nothing applied");
}

/// `POST /v1/capture`'s parameters: each bad one a 400 (an unknown service a 404) that names
/// it; good ones reach the workers (none here: 503); `GET /v1/capture` before any is a 404.
#[tokio::test]
async fn a_capture_request_names_its_bad_parameter_and_needs_workers() {
    let f = fixture(true).await;
    let post = |q: &'static str| {
        let client = f.client.clone();
        async move { client.post(&format!("/v1/capture?{q}"), None).await.unwrap() }
    };
    for (q, status, says) in [
        ("point=received,lost", 400, "point: `lost` is not received, sent or dropped"),
        ("count=0", 400, "count: 0 is not within 1..=10000000"),
        ("snaplen=4096", 400, "snaplen: 4096 is not within 1..=2048"),
        ("ring=8", 400, "ring: 8 is not within 16..=65536"),
        ("bytes=10", 400, "bytes: 10 is not within 1024..=4294967296"),
        ("duration_ms=0", 400, "duration_ms: 0 is not within 1..=3600000"),
        ("backend=not-an-address", 400, "backend: `not-an-address` is not an IP address"),
        ("client=198.18.0.0/99", 400, "client: `198.18.0.0/99` is not a prefix"),
        ("vip=nowhere", 400, "vip: `nowhere` is not an IP address"),
        (
            "proto=sctpish",
            400,
            "proto: `sctpish` is not tcp, udp, icmp, icmpv6 or a protocol number",
        ),
        ("service=nope", 404, "service: no service named `nope`"),
        ("backend=10.9.9.9", 404, "backend: no backend at `10.9.9.9`"),
        ("backend=10.0.1.1:99", 404, "backend: no backend at `10.0.1.1:99`"),
        ("port=net_tap9", 404, "port: no port named `net_tap9`"),
        ("backend=10.0.1.1", 503, "capture needs load-balancing workers"),
        ("snap=1", 400, "unknown field `snap`"),
        (
            "vip=198.51.100.10&service=web&point=dropped",
            503,
            "capture needs load-balancing workers",
        ),
    ] {
        let (st, body) = post(q).await;
        assert_eq!(st, status, "{q}: {body}");
        assert!(body.contains(says), "{q}: {body}");
    }
    let (st, body) = f.client.get("/v1/capture").await.unwrap();
    assert_eq!(st, 404, "{body}");
}

/// [`yaml`] with an exception interface and a `fleet:` section.
fn fleet_yaml(closed_port: u16) -> String {
    let sync = "fleet:\n  sync:\n    instance_id: 1\n    key_file: /etc/spillway/sync.key\n    \
                peers: [{id: 2, address: 10.0.0.12}]\n  table_file: /var/lib/spillway/t\n";
    let text = yaml(closed_port).replacen(
        "  node:\n",
        "  kernel_interface: {name: spl0}\n  mempool_size: 16383\n  node:\n",
        1,
    );
    format!("{text}{sync}")
}

/// `fleet.sync` and `fleet.table_file` are read at start only: a reload that changes them is
/// rejected whole, naming each field; one that keeps them applies the rest.
#[tokio::test]
async fn a_reload_that_changes_the_fleet_section_is_rejected() {
    let f = fixture_with(true, fleet_yaml).await;
    let before: StatusReply = f.get("/v1/status").await;
    let good = fleet_yaml(f.closed_port);
    let moved = good
        .replace("address: 10.0.0.12}", "address: 10.0.0.13}")
        .replace("/var/lib/spillway/t", "/srv/t")
        .replace("[10.0.1.1, 10.0.1.2]", "[10.0.1.1, 10.0.1.2, 10.0.1.3]");
    std::fs::write(&f.path, &moved).unwrap();
    let (st, body) = f.client.post("/v1/reload", None).await.unwrap();
    assert_eq!(st, 400, "{body}");
    let e: ErrorReply = serde_json::from_str(&body).unwrap();
    let fields: Vec<&str> = e.errors.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(fields, ["fleet.sync.peers", "fleet.table_file"], "{}", e.error);
    assert!(
        e.error.contains("is read at start only and this file changes it: restart Spillway"),
        "{}",
        e.error
    );
    let after: StatusReply = f.get("/v1/status").await;
    assert_eq!(after.generation, before.generation, "a rejected file publishes nothing");
    assert!(!f.service("web").await.eligible.contains(&"10.0.1.3".to_owned()));
    // Removing the section is a change too (SIGHUP's path, the same rule).
    std::fs::write(&f.path, good.split("fleet:").next().unwrap()).unwrap();
    let e = f.controller.lock().unwrap().reload().expect_err("fleet.sync removed");
    assert_eq!(e.to_string(), format!("{}: field `fleet.sync`: is read at start only and this file changes it: restart Spillway to apply it (the running configuration is kept, nothing of this file was applied)\n{}: field `fleet.table_file`: is read at start only and this file changes it: restart Spillway to apply it (the running configuration is kept, nothing of this file was applied)", f.path.display(), f.path.display()));
    // The same section with other changes applies.
    std::fs::write(&f.path, good.replace("[10.0.1.1, 10.0.1.2]", "[10.0.1.1, 10.0.1.2, 10.0.1.3]"))
        .unwrap();
    let r: ReloadReply = f.post("/v1/reload", serde_json::Value::Null).await;
    assert_eq!(r.added, ["web/10.0.1.3"]);
    let (_, text) = f.client.get("/metrics").await.unwrap();
    assert!(text.contains("spillway_reloads_total{result=\"rejected\"} 2"), "{text}");
}

#[tokio::test]
async fn conntrack_stats_lookup_and_explain_ask_the_workers() {
    let f = fixture(true).await;
    for (w, c) in f.view.counters.iter().enumerate() {
        c.ct_entries.set(10 * w as u64 + 1);
        c.ct_capacity.set(4096);
        c.ct_inserts.add(100 + w as u64);
        c.ct_evictions.add(w as u64);
    }
    let r: ConntrackReply = f.get("/v1/conntrack").await;
    assert_eq!(r.workers.len(), 3);
    assert_eq!(
        r.workers[1],
        WorkerConntrack { worker: 1, entries: 11, capacity: 4096, inserts: 101, evictions: 1 }
    );
    assert_eq!((r.total.entries, r.total.inserts, r.total.evictions), (33, 303, 3));

    // Worker 1 holds the flow's entry, on 10.0.2.1, idle 1234 ms.
    let web = f.service("web").await;
    let target = f.backend("10.0.2.1").await;
    // CT-1d: PER_SESSION with CLIENT_IP affinity tracks the 2-tuple (ports and protocol zero).
    let key = FlowKey {
        src: "192.0.2.7".parse().unwrap(),
        dst: "198.51.100.10".parse().unwrap(),
        sport: 0,
        dport: 0,
        proto: 0,
        kind: 2,
        service: web.id,
    };
    let entry = Entry {
        key,
        value: EntryValue {
            backend: BackendRef { slot: target.slot, gen: target.generation }.to_u32(),
            epoch: web.epoch,
            flags: 0,
        },
        idle_ms: 1234,
    };
    f.view.entries.lock().unwrap().insert((1, key), entry);
    let flow = "src=192.0.2.7&dst=198.51.100.10&proto=tcp&sport=40000&dport=80";
    let started = Instant::now();
    let r: FlowLookupReply = f.get(&format!("/v1/conntrack/lookup?{flow}")).await;
    // Worker 2 never answers: the API gives up after its timeout, not later.
    assert!(started.elapsed() >= api::LOOKUP_TIMEOUT);
    assert!(started.elapsed() < api::LOOKUP_TIMEOUT * 4);
    assert_eq!(f.view.queries.lock().unwrap()[0].0, key);
    assert_eq!(r.service, "web");
    assert_eq!(r.tracking_key, "2-tuple 192.0.2.7 -> 198.51.100.10");
    let states: Vec<&str> = r.workers.iter().map(|w| w.state.as_str()).collect();
    assert_eq!(states, ["absent", "found", "no_answer"]);
    let e = r.workers[1].entry.as_ref().unwrap();
    assert_eq!(
        (e.backend.as_deref(), e.idle_ms, e.current_generation),
        (Some("10.0.2.1"), 1234, true)
    );

    // Explain: the entry is valid, the packet follows it (NX-1).
    let x: ExplainReply = f.get(&format!("/v1/explain?{flow}")).await;
    assert_eq!(x.service.as_deref(), Some("web"));
    assert_eq!(x.client_zone.as_deref(), Some("zone-a"));
    assert_eq!(x.eligible_kind.as_deref(), Some("HealthyPrimary"));
    assert!(x.zonal_match && !x.spilled);
    assert_eq!(x.eligible_size, 2);
    assert_eq!((x.workers_asked, x.workers_answered), (3, 2));
    let xe = x.entry.as_ref().unwrap();
    assert_eq!((xe.worker, xe.valid), (1, true));
    assert_eq!(x.backend.as_deref(), Some("10.0.2.1"));
    assert_eq!(x.reason, ForwardReason::ConntrackHit.as_str());
    // Zonal affinity sends new connections of zone-a clients to zone-a (ZA-0: not this entry).
    let hashed = x.hashed_backend.unwrap();
    assert!(hashed.starts_with("10.0.1."), "{hashed}");

    // CP-1: PER_SESSION + CLIENT_IP TCP entries do not persist on an unhealthy backend.
    f.set_health("10.0.2.1", "unhealthy").await;
    let x: ExplainReply = f.get(&format!("/v1/explain?{flow}")).await;
    let xe = x.entry.as_ref().unwrap();
    assert!(!xe.valid);
    assert_eq!(xe.invalid_reason.as_deref(), Some("replaced_unhealthy"));
    assert_eq!(x.reason, "replaced_unhealthy");
    assert_eq!(x.backend, x.hashed_backend);

    // No rule: 404 for a lookup, no_matching_rule for explain.
    let (st, body) = f
        .client
        .get("/v1/conntrack/lookup?src=192.0.2.7&dst=198.51.100.99&proto=tcp&sport=1&dport=80")
        .await
        .unwrap();
    assert_eq!(st, 404, "{body}");
    let x: ExplainReply =
        f.get("/v1/explain?src=192.0.2.7&dst=198.51.100.99&proto=udp&sport=1&dport=80").await;
    assert_eq!((x.service, x.reason.as_str()), (None, "no_matching_rule"));
    // Bad flows are 400s that say what is wrong.
    let (st, body) =
        f.client.get("/v1/explain?src=192.0.2.7&dst=198.51.100.10&proto=tcp").await.unwrap();
    assert_eq!(st, 400);
    assert!(body.contains("missing `sport`"), "{body}");
    let (st, body) =
        f.client.get("/v1/explain?src=nope&dst=198.51.100.10&proto=icmp").await.unwrap();
    assert_eq!(st, 400);
    assert!(body.contains("src: `nope` is not an IP address"), "{body}");
}

#[tokio::test]
async fn metrics_parse_and_carry_the_counters_and_decision_gauges() {
    let f = fixture(true).await;
    let web = f.service("web").await;
    let b = f.backend("10.0.2.1").await;
    let v = &f.view.counters;
    v[0].services[usize::from(web.id)].packets.add(100);
    v[1].services[usize::from(web.id)].packets.add(23);
    v[2].services[usize::from(web.id)].new_connections.add(7);
    v[0].backends[usize::from(b.slot)].bytes.add(5000);
    v[2].backends[usize::from(b.slot)].bytes.add(1000);
    v[1].reason(Reason::Decision(DropReason::NoEligibleBackend)).add(7);
    v[0].reason(Reason::Forward(ForwardReason::ConntrackHit)).add(40);
    v[2].reason(Reason::Forward(ForwardReason::ConntrackHit)).add(2);
    v[1].rx_packets.add(999);
    v[1].tx_packets.add(990);
    v[2].ct_entries.set(17);
    v[2].ct_evictions.add(4);

    let m = f.metrics().await;
    let web_l = [("service", "web")];
    assert_eq!(sample(&m, "spillway_service_packets_total", &web_l), 123.0);
    assert_eq!(sample(&m, "spillway_service_new_connections_total", &web_l), 7.0);
    assert_eq!(
        sample(&m, "spillway_backend_bytes_total", &[("service", "web"), ("backend", "10.0.2.1")]),
        6000.0
    );
    assert_eq!(
        sample(&m, "spillway_dropped_packets_total", &[("reason", "no_eligible_backend")]),
        7.0
    );
    assert_eq!(
        sample(&m, "spillway_forwarded_packets_total", &[("reason", "conntrack_hit")]),
        42.0
    );
    assert_eq!(sample(&m, "spillway_dropped_packets_total", &[("reason", "tx_full")]), 0.0);
    assert_eq!(sample(&m, "spillway_worker_rx_packets_total", &[("worker", "1")]), 999.0);
    assert_eq!(sample(&m, "spillway_worker_tx_packets_total", &[("worker", "1")]), 990.0);
    assert_eq!(sample(&m, "spillway_conntrack_entries", &[("worker", "2")]), 17.0);
    assert_eq!(sample(&m, "spillway_conntrack_evictions_total", &[("worker", "2")]), 4.0);
    // Every reason has its sample (NX-2: every drop is counted somewhere).
    let reasons = m
        .samples
        .iter()
        .filter(|s| {
            s.metric == "spillway_dropped_packets_total"
                || s.metric == "spillway_forwarded_packets_total"
        })
        .count();
    assert_eq!(reasons, Reason::all().count());
    assert_eq!(sample(&m, "spillway_service_failover_active", &web_l), 0.0);
    assert_eq!(sample(&m, "spillway_service_eligible_backends", &web_l), 4.0);
    assert_eq!(
        sample(
            &m,
            "spillway_service_zone_eligible_backends",
            &[("service", "web"), ("zone", "zone-a")]
        ),
        2.0
    );
    let spill = |m: &prometheus_parse::Scrape, zone: &str| {
        sample(m, "spillway_service_zonal_spill_active", &[("service", "web"), ("zone", zone)])
    };
    assert_eq!((spill(&m, "zone-a"), spill(&m, "zone-b")), (0.0, 0.0));
    assert_eq!(sample(&m, "spillway_backend_healthy", &[("backend", "10.0.1.1")]), 1.0);

    // ZA-5: with 10.0.1.1 unhealthy, zone-a keeps 1 of 2 (0.5 < 0.6): zone-a spills.
    f.set_health("10.0.1.1", "unhealthy").await;
    let m = f.metrics().await;
    assert_eq!((spill(&m, "zone-a"), spill(&m, "zone-b")), (1.0, 0.0));
    assert_eq!(sample(&m, "spillway_backend_healthy", &[("backend", "10.0.1.1")]), 0.0);
    assert_eq!(
        sample(
            &m,
            "spillway_backend_health_override",
            &[("backend", "10.0.1.1"), ("override", "unhealthy")]
        ),
        1.0
    );
    assert_eq!(
        sample(
            &m,
            "spillway_service_zone_eligible_backends",
            &[("service", "web"), ("zone", "zone-a")]
        ),
        3.0
    );

    // FO-2: every primary unhealthy -> the healthy failover backends: failover active.
    for a in ["10.0.1.2", "10.0.2.1", "10.0.2.2"] {
        f.set_health(a, "unhealthy").await;
    }
    let m = f.metrics().await;
    assert_eq!(sample(&m, "spillway_service_failover_active", &web_l), 1.0);
    assert_eq!(
        sample(
            &m,
            "spillway_service_eligible_kind",
            &[("service", "web"), ("kind", "HealthyFailover")]
        ),
        1.0
    );
    assert_eq!(sample(&m, "spillway_service_eligible_backends", &web_l), 1.0);
    assert_eq!(sample(&m, "spillway_service_failover_active", &[("service", "dns")]), 0.0);
    let gen = f.controller.lock().unwrap().snapshot().generation;
    assert_eq!(sample(&m, "spillway_snapshot_generation", &[]), gen as f64);

    // Health checks: the dns backend's probes to a closed port are refused; wait for some.
    let deadline = Instant::now() + Duration::from_secs(5);
    let dns = [("service", "dns"), ("check", "tcp-closed"), ("result", "refused")];
    let m = loop {
        let m = f.metrics().await;
        if sample(&m, "spillway_health_check_probes_total", &dns) >= 2.0 {
            break m;
        }
        assert!(Instant::now() < deadline, "no refused probe counted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let count = sample(&m, "spillway_health_check_duration_seconds_count", &dns[..2]);
    let sum = sample(&m, "spillway_health_check_duration_seconds_sum", &dns[..2]);
    // One duration per probe, whatever its result (read from the same scrape).
    let probes: f64 = m
        .samples
        .iter()
        .filter(|x| {
            x.metric == "spillway_health_check_probes_total"
                && dns[..2].iter().all(|(k, v)| x.labels.get(k) == Some(*v))
        })
        .map(|x| match x.value {
            prometheus_parse::Value::Counter(v) => v,
            ref other => panic!("probes_total: {other:?}"),
        })
        .sum();
    assert!(count >= 2.0 && count == probes, "count {count}, probes {probes}");
    // Each probe took some time, and at most its 40 ms timeout (a timeout counts as the time
    // waited, which the runtime may measure a few milliseconds late).
    assert!(sum > 0.0 && sum <= count * 0.05, "count {count} sum {sum}");
    assert_eq!(
        sample(
            &m,
            "spillway_health_check_probes_total",
            &[("service", "dns"), ("result", "success")]
        ),
        0.0
    );
}

#[tokio::test]
async fn bind_errors_name_admin_listen_and_a_stale_socket_is_replaced() {
    let f = fixture(true).await;
    let Listen::Unix(path) = f.server.local_addr().clone() else { panic!() };
    // In use by a live server.
    let on = |l: String| ApiOptions::new(&l);
    let e = api::spawn(
        &on(format!("unix:{}", path.display())),
        Arc::clone(&f.controller),
        f.view.clone(),
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("cannot listen on `unix:/"), "{e}");
    let e =
        api::spawn(&on("localhost".into()), Arc::clone(&f.controller), f.view.clone()).unwrap_err();
    assert!(e.to_string().contains("`localhost` is neither"), "{e}");
    // A stale socket file (no process behind it) is removed and rebound; dropping the server
    // removes its socket.
    let stale: &Path = &f.dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(stale).unwrap());
    assert!(stale.exists());
    let s = api::spawn(
        &on(format!("unix:{}", stale.display())),
        Arc::clone(&f.controller),
        f.view.clone(),
    )
    .expect("stale socket replaced");
    let c = Client::new(&s.local_addr().to_string(), Duration::from_secs(5)).unwrap();
    assert_eq!(c.get("/v1/status").await.unwrap().0, 200);
    drop(s);
    assert!(!stale.exists());
}

fn assert_shares_sum_to_one(c: &AdvancedClientInfo) {
    let sum: f64 = c.shares.values().sum();
    assert!((sum - 1.0).abs() < 1e-6, "{c:?}");
    assert!(c.shares.values().all(|w| (0.0..=1.0).contains(w)), "{c:?}");
}

/// Section 7 in the API: groups with capacity (per endpoint x healthy endpoints), loads,
/// client-zone splits; the status counts; explain's split and backend group (spillway-ctl's
/// tests/cli.rs: spillwayctl's group table).
#[tokio::test]
async fn advanced_services_show_groups_capacity_and_client_splits() {
    let f = fixture_with(true, advanced_yaml).await;
    let s: StatusReply = f.get("/v1/status").await;
    assert_eq!((s.services, s.advanced_services, s.auto_drained_groups), (1, 1, 0));

    let mesh = f.service("mesh").await;
    let a = mesh.advanced.clone().expect("advanced object");
    assert_eq!(a.algorithm, "WATERFALL_BY_ZONE");
    assert_eq!(a.unit, "new_connections_per_second");
    assert_eq!(a.failover_health_threshold, 70);
    let names: Vec<&str> = a.groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["mesh-a", "mesh-b"]);
    for g in &a.groups {
        assert_eq!(g.healthy, g.endpoints, "{g:?}");
        #[allow(clippy::cast_precision_loss)]
        let expected = 10.0 * g.healthy as f64;
        assert_eq!(g.capacity, Some(expected), "{g:?}");
        assert!(!g.auto_drained && (g.retained - 1.0).abs() < 1e-9, "{g:?}");
        assert_eq!(g.utilisation, Some(0.0), "{g:?}");
    }
    assert_eq!((a.groups[0].zone.as_str(), a.groups[0].endpoints), ("zone-a", 3));
    assert_eq!((a.groups[1].zone.as_str(), a.groups[1].endpoints), ("zone-b", 2));
    // One entry per client zone, then clients without a zone.
    let zones: Vec<Option<&str>> = a.clients.iter().map(|c| c.zone.as_deref()).collect();
    assert_eq!(zones, [Some("zone-a"), Some("zone-b"), None]);
    for c in &a.clients {
        assert_eq!(c.shares.len(), 2, "{c:?}");
        assert_shares_sum_to_one(c);
    }
    // The plain JSON: capacity is a number, a missing zone is null.
    let (_, body) = f.client.get("/v1/services").await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let adv = &v["services"][0]["advanced"];
    assert_eq!(adv["groups"][0]["capacity"], serde_json::json!(30.0));
    assert!(adv["clients"][2]["zone"].is_null(), "{adv}");

    // An unhealthy endpoint leaves the capacity: 10 x 2 healthy.
    f.set_health("10.0.5.3", "unhealthy").await;
    let a = f.service("mesh").await.advanced.unwrap();
    assert_eq!((a.groups[0].healthy, a.groups[0].capacity), (2, Some(20.0)));
    // AL-7: 2 of 3 healthy (66.7%) is below T = 70: the group keeps (2/3) / 0.7 of its share.
    assert!((a.groups[0].retained - 2.0 / 3.0 / 0.7).abs() < 1e-9, "{:?}", a.groups[0]);
    for c in &a.clients {
        assert_shares_sum_to_one(c);
    }

    // Explain: the client zone's split and the chosen backend's group.
    let x: ExplainReply =
        f.get("/v1/explain?src=192.0.2.7&dst=198.51.100.20&sport=1000&dport=443&syn=1").await;
    let shares = x.group_shares.clone().expect("split for an advanced service");
    assert_eq!(shares, a.clients[0].shares);
    let group = x.backend_group.clone().expect("backend group");
    assert!(shares.get(&group).is_some_and(|w| *w > 0.0), "{x:?}");
    let backend = x.backend.clone().unwrap();
    let prefix = if group == "mesh-a" { "10.0.5." } else { "10.0.6." };
    assert!(backend.starts_with(prefix), "{x:?}");
}

/// QL-3, QL-4 in `explain`: a short header's destination connection ID (`quic_cid`), decoded
/// (configuration, server ID, the backend it names) and where a packet of the flow without an
/// entry goes; a bad `quic_cid` is a 400 that says why.
#[tokio::test]
async fn ql_3_explain_shows_what_a_quic_connection_id_decodes_to_and_where_it_sends() {
    let f = fixture_with(true, quic_yaml).await;
    let flow = "src=192.0.2.7&dst=198.51.100.30&proto=udp&sport=40000&dport=443";
    let bare: ExplainReply = f.get(&format!("/v1/explain?{flow}")).await;
    assert_eq!((bare.quic.as_ref(), bare.reason.as_str()), (None, "new_connection"));
    let hashed = bare.backend.clone().unwrap();
    // Config 0 (first octet 0x07: rotation bits 000, length 7), server ID, 4-octet nonce.
    for (sid, backend) in [("0a0001", "10.0.1.1"), ("0a0002", "10.0.1.2")] {
        let x: ExplainReply = f.get(&format!("/v1/explain?{flow}&quic_cid=07{sid}01020304")).await;
        let want = QuicDecodeInfo {
            config: Some(0),
            server_id: Some(sid.into()),
            backend: Some(backend.into()),
            fallback: None,
        };
        assert_eq!(x.quic, Some(want));
        assert_eq!((x.backend.as_deref(), x.reason.as_str()), (Some(backend), "quic_cid"));
    }
    // A server ID of no backend, a reserved configuration: decoded as far as it goes, and the
    // packet goes by its 4-tuple for that reason.
    for (cid, config, sid, why) in [
        ("070a000901020304", Some(0), Some("0a0009"), "unknown_server_id"),
        ("e70a000101020304", None, None, "reserved"),
        ("270a000101020304", None, None, "unknown_config"),
        ("070a00", None, None, "too_short"),
    ] {
        let x: ExplainReply = f.get(&format!("/v1/explain?{flow}&quic_cid={cid}")).await;
        let q = x.quic.expect("a decode");
        assert_eq!((q.config, q.server_id.as_deref(), q.backend), (config, sid, None), "{cid}");
        assert_eq!(q.fallback.as_deref(), Some(why), "{cid}");
        assert_eq!((x.backend.as_deref(), x.reason.as_str()), (Some(&*hashed), "new_connection"));
    }
    for (query, why) in [
        (format!("{flow}&quic_cid=zz"), "quic_cid: `zz` is not hex octets"),
        (format!("{flow}&quic_cid=070"), "quic_cid: `070` is not hex octets"),
        (format!("{flow}&quic_cid={}", "07".repeat(21)), "quic_cid: 21 octets, not 1 to 20"),
        (flow.replace("udp", "tcp") + "&quic_cid=07", "quic_cid: only a udp flow carries QUIC"),
    ] {
        let (st, body) = f.client.get(&format!("/v1/explain?{query}")).await.unwrap();
        assert_eq!(st, 400, "{query}: {body}");
        assert!(body.contains(why), "{query}: {body}");
    }
}
