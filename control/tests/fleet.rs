//! The fleet side of one instance (`fleet.rs`, `announcer.rs`, `netlink.rs`): which VIPs it announces and
//! when, its phases (starting, serving, drained, stopping) through the admin API, readiness,
//! the BIRD liveness check, and the netlink handoff itself (the VIP routes in their table, in
//! a network namespace of its own; root).

mod common;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{eventually, OneWorker};
use hyper::Method;
use spillway_api::client::Client;
use spillway_api::types::InstanceReply;
use spillway_control::announcer::{self, FleetOptions};
use spillway_control::api::{self, ApiOptions};
use spillway_control::config::Config;
use spillway_control::controller::{Controller, Override};
use spillway_control::instance::{self, Instance, Phase};
use spillway_control::view::DataplaneView;
use spillway_core::addr::Addr;

/// Four services: `web` (when_healthy, two backends), `ssh` (always, on web's VIP port 22),
/// `quiet` (never) and `dns` (when_healthy, UDP, one backend). No health checks: backends
/// count healthy until an override says otherwise.
const FLEET: &str = "dataplane:
  ports: [net_null0]
  node:
    ipv4: 198.18.0.11/16
topology:
  region: r1
  zones: [{name: zone-a}]
announce:
  table: 100
services:
  - name: web
    forwarding_rules:
      - {vip: 198.19.200.1, protocol: TCP, ports: [80]}
    backend_service:
      backends:
        - {group: a, zone: zone-a, endpoints: [198.18.1.1, 198.18.1.2]}
  - name: ssh
    announce: always
    forwarding_rules:
      - {vip: 198.19.200.1, protocol: TCP, ports: [22]}
    backend_service:
      backends:
        - {group: a, zone: zone-a, endpoints: [198.18.1.3]}
  - name: quiet
    announce: never
    forwarding_rules:
      - {vip: 198.19.200.3, protocol: TCP}
    backend_service:
      backends:
        - {group: a, zone: zone-a, endpoints: [198.18.1.4]}
  - name: dns
    forwarding_rules:
      - {vip: fd00::53, protocol: UDP, ports: [53]}
    backend_service:
      backends:
        - {group: a, zone: zone-a, endpoints: [198.18.1.5]}
";

fn a(s: &str) -> Addr {
    s.parse::<IpAddr>().expect("address").into()
}

fn controller(text: &str) -> (tempfile::TempDir, Arc<Mutex<Controller>>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("spillway.yaml");
    std::fs::write(&path, text).expect("write");
    let config = Config::from_yaml(&path, text).expect("valid");
    let c = Controller::start(&path, config, Instant::now()).expect("controller");
    (dir, Arc::new(Mutex::new(c)))
}

fn wanted(c: &Controller, serving: bool) -> Vec<(String, Vec<String>)> {
    instance::wanted(c.config(), &c.snapshot(), serving)
        .into_iter()
        .map(|(a, s)| (a.to_string(), s))
        .collect()
}

fn set(c: &mut Controller, addr: &str, service: &str, o: Option<Override>) {
    c.set_override(a(addr), Some(service), o).expect("override");
}

#[tokio::test(flavor = "current_thread")]
async fn a_serving_instance_announces_each_vip_its_services_want() {
    let (_dir, c) = controller(FLEET);
    let mut c = c.lock().unwrap();
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        wanted(&c, true),
        vec![("198.19.200.1".into(), s(&["web", "ssh"])), ("fd00::53".into(), s(&["dns"]))],
        "`never` keeps 198.19.200.3 out; a VIP of two services lists both"
    );
    assert!(wanted(&c, false).is_empty(), "nothing while not serving");

    // One of web's two backends down: still a healthy backend, still announced for web.
    set(&mut c, "198.18.1.1", "web", Some(Override::Unhealthy));
    assert_eq!(wanted(&c, true)[0], ("198.19.200.1".into(), s(&["web", "ssh"])));
    // Both down: web no longer wants it, `ssh` (always) still does: the VIP stays.
    set(&mut c, "198.18.1.2", "web", Some(Override::Unhealthy));
    assert_eq!(wanted(&c, true)[0], ("198.19.200.1".into(), s(&["ssh"])));
    // The dns backend down: its VIP goes, the others stay as they were.
    set(&mut c, "198.18.1.5", "dns", Some(Override::Unhealthy));
    assert_eq!(wanted(&c, true), vec![("198.19.200.1".into(), s(&["ssh"]))]);
    // It recovers: announced again.
    set(&mut c, "198.18.1.5", "dns", None);
    assert_eq!(wanted(&c, true)[1], ("fd00::53".into(), s(&["dns"])));
}

#[tokio::test(flavor = "current_thread")]
async fn without_an_announce_section_nothing_is_announced() {
    let text = FLEET
        .replace("announce:\n  table: 100\n", "")
        .replace("    announce: always\n", "")
        .replace("    announce: never\n", "");
    let (_dir, c) = controller(&text);
    let c = c.lock().unwrap();
    assert!(wanted(&c, true).is_empty());
    assert!(instance::announceable(c.config()).is_empty());
}

#[test]
fn phases_follow_readiness_the_operator_and_the_stop() {
    let t0 = Instant::now();
    let mut i = Instance::new(t0);
    assert_eq!(i.phase(), Phase::Starting);
    i.set_waiting_for(Some("worker(s) 0 to poll".into()), t0);
    assert_eq!((i.phase(), i.waiting_for()), (Phase::Starting, Some("worker(s) 0 to poll")));
    i.set_waiting_for(None, t0 + Duration::from_secs(1));
    assert_eq!(i.phase(), Phase::Serving);
    // Ready once is ready: a later reason does not take it back to starting.
    i.set_waiting_for(Some("a first health result".into()), t0 + Duration::from_secs(2));
    assert_eq!(i.phase(), Phase::Serving);
    assert_eq!(i.set_drained(true, t0 + Duration::from_secs(3)), Phase::Drained);
    assert_eq!(i.set_drained(false, t0 + Duration::from_secs(4)), Phase::Serving);
    // A drain set while starting holds once ready.
    let mut j = Instance::new(t0);
    j.set_drained(true, t0);
    j.set_waiting_for(None, t0);
    assert_eq!(j.phase(), Phase::Drained);
    // Stopping wins over everything, for good.
    i.begin_stop(t0 + Duration::from_secs(5));
    assert_eq!(i.set_drained(false, t0 + Duration::from_secs(6)), Phase::Stopping);
    assert_eq!(i.stopping_since(), Some(t0 + Duration::from_secs(5)));
}

#[test]
fn traffic_has_stopped_once_nothing_was_forwarded_for_the_quiet_time_after_the_drain() {
    let t0 = Instant::now();
    let quiet = Duration::from_secs(2);
    let mut i = Instance::new(t0);
    i.set_waiting_for(None, t0);
    i.note_forwarded(100, t0 + Duration::from_secs(1));
    i.set_drained(true, t0 + Duration::from_secs(1));
    // Packets keep arriving for a while after the withdrawal (the routers converge).
    i.note_forwarded(150, t0 + Duration::from_secs(2));
    let at = |s: u64| t0 + Duration::from_secs(s);
    assert!(!i.traffic_stopped(at(3), quiet), "1 s quiet");
    i.note_forwarded(150, at(4)); // the same total: no traffic
    assert!(i.traffic_stopped(at(4), quiet), "2 s quiet and drained 3 s");
    assert_eq!(i.quiet_for(at(4)).as_secs_f64(), 2.0);
    // A serving instance never reports its traffic as stopped.
    i.set_drained(false, at(5));
    assert!(!i.traffic_stopped(at(10), quiet));
}

#[tokio::test(flavor = "current_thread")]
async fn readiness_waits_for_the_workers_the_link_and_settled_health_verdicts() {
    // One backend probed every 100 ms on a port nothing listens on (refused at once): its
    // verdict, unhealthy from the start, is settled after 3 failures in a row.
    let text = FLEET.replace(
        "topology:",
        "health_checks:\n  hc: {type: TCP, port: 9, check_interval_sec: 0.1, timeout_sec: 0.1, unhealthy_threshold: 3}\ntopology:",
    )
    .replacen("        - {group: a, zone: zone-a, endpoints: [198.18.1.5]}", "        - {group: a, zone: zone-a, health_check: hc, endpoints: [127.0.0.1]}", 1)
    // The probe goes to loopback (refused at once); the other backends are never probed.
    .replacen("    ipv4: 198.18.0.11/16\n", "    ipv4: 127.0.0.2/8\n    gateway_ipv4: 127.0.0.3\n", 1);
    let (_dir, c) = controller(&text);
    let view = OneWorker::new();
    let beats = [view.counters(0).heartbeat.get()];
    let ready = |link: bool, waited: f64| {
        announcer::readiness(
            &view,
            &beats,
            link,
            &c.lock().unwrap(),
            Duration::from_secs_f64(waited),
        )
    };
    assert_eq!(ready(true, 0.0).as_deref(), Some("worker(s) 0 to poll"));
    view.0.heartbeat.inc();
    assert_eq!(ready(false, 0.0).as_deref(), Some("the data port's link to come up"));
    assert_eq!(ready(true, 0.0).as_deref(), Some("a first health result from 127.0.0.1"));
    // The probes' results come in; each one is applied as the control loop would.
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let why = ready(true, 0.0);
        let probes = c.lock().unwrap().health_status()[0].consecutive_fail;
        if seen.last() != Some(&(why.clone(), probes)) {
            seen.push((why.clone(), probes));
        }
        if why.is_none() {
            break;
        }
        assert!(Instant::now() < deadline, "never ready: {seen:?}");
    }
    // After a first failure it waited for the third in a row; ready with the third.
    let unsettled = "settled health verdicts (each check's thresholds in a row) from 127.0.0.1";
    assert!(
        seen.iter().any(|(w, n)| w.as_deref() == Some(unsettled) && (1..3).contains(n)),
        "{seen:?}"
    );
    assert_eq!(seen.last().map(|s| s.1), Some(3), "{seen:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_verdict_that_never_settles_is_waited_for_only_so_long() {
    // A backend that answers every probe (a listener here), under a check that needs 3
    // successes in a row: right after the first success it is unsettled; readiness waits the
    // check's thresholds x interval, then no longer.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let text = FLEET.replace(
        "topology:",
        &format!("health_checks:\n  hc: {{type: TCP, port: {port}, check_interval_sec: 1, timeout_sec: 0.5, healthy_threshold: 3, unhealthy_threshold: 3}}\ntopology:"),
    )
    .replacen("        - {group: a, zone: zone-a, endpoints: [198.18.1.5]}", "        - {group: a, zone: zone-a, health_check: hc, endpoints: [127.0.0.1]}", 1)
    .replacen("    ipv4: 198.18.0.11/16\n", "    ipv4: 127.0.0.2/8\n    gateway_ipv4: 127.0.0.3\n", 1);
    let (_dir, c) = controller(&text);
    let view = OneWorker::new();
    let beats = [0];
    view.0.heartbeat.inc();
    let deadline = Instant::now() + Duration::from_secs(5);
    while c.lock().unwrap().health_status()[0].last_result.is_none() {
        assert!(Instant::now() < deadline, "no first probe");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ready = |waited: f64| {
        announcer::readiness(
            &view,
            &beats,
            true,
            &c.lock().unwrap(),
            Duration::from_secs_f64(waited),
        )
    };
    let why = ready(0.5).expect("one success of three: unsettled");
    assert!(why.starts_with("settled health verdicts"), "{why}");
    // 3 + 1 intervals of 1 s, plus the 0.5 s timeout.
    assert!(ready(4.4).is_some());
    assert_eq!(ready(4.5), None);
    drop(listener);
}

/// One worker whose next hops resolve when the test says so: the backends themselves (all
/// on-link), none resolved at first.
struct Resolving {
    worker: OneWorker,
    resolved: Mutex<Vec<Addr>>,
    asked: Mutex<Vec<Addr>>,
}

impl DataplaneView for Resolving {
    fn workers(&self) -> usize {
        1
    }
    fn counters(&self, w: usize) -> &spillway_core::counters::WorkerCounters {
        self.worker.counters(w)
    }
    fn lookup(
        &self,
        k: spillway_core::flow::FlowKey,
        h: u64,
    ) -> Vec<spillway_control::view::LookupReply> {
        self.worker.lookup(k, h)
    }
    fn resolve_ahead(&self, backends: &[Addr]) -> Vec<Addr> {
        self.asked.lock().unwrap().extend_from_slice(backends);
        let known = self.resolved.lock().unwrap();
        backends.iter().filter(|b| !known.contains(b)).copied().collect()
    }
    fn neighbours(&self) -> Vec<(Addr, [u8; 6])> {
        Vec::new()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn readiness_waits_for_every_configured_next_hop_whatever_its_health() {
    let (_dir, c) = controller(FLEET);
    let view = Resolving {
        worker: OneWorker::new(),
        resolved: Default::default(),
        asked: Default::default(),
    };
    view.worker.0.heartbeat.inc();
    let ready = |waited: f64| {
        announcer::readiness(&view, &[0], true, &c.lock().unwrap(), Duration::from_secs_f64(waited))
    };
    let a = |s: &str| -> Addr { s.parse::<IpAddr>().unwrap().into() };
    let why = ready(0.1).expect("nothing resolved yet");
    assert!(why.starts_with("the MACs of next hop(s) 198.18.1.1, 198.18.1.2, 198.18.1.3"), "{why}");
    // Every configured backend is asked for (the quiet service's too: any may get traffic).
    assert!(view.asked.lock().unwrap().contains(&a("198.18.1.4")));
    view.resolved.lock().unwrap().extend([a("198.18.1.1"), a("198.18.1.2"), a("198.18.1.3")]);
    let why = ready(0.2).expect("some still unresolved");
    assert!(!why.contains("198.18.1.1,") && why.contains("198.18.1.4"), "{why}");
    let all: Vec<Addr> = view.asked.lock().unwrap().clone();
    view.resolved.lock().unwrap().extend(all);
    assert_eq!(ready(0.3), None);
    // A next hop that never answers is waited for only so long.
    view.resolved.lock().unwrap().clear();
    assert!(ready(announcer::NEXT_HOP_PATIENCE.as_secs_f64() - 0.1).is_some());
    assert_eq!(ready(announcer::NEXT_HOP_PATIENCE.as_secs_f64()), None);
}

/// A fake BIRD control socket: sends `greeting` to whoever connects.
fn fake_bird(path: &Path, greeting: &'static str) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::UnixListener::bind(path).expect("bind");
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        while let Ok((mut s, _)) = listener.accept().await {
            let _ = s.write_all(greeting.as_bytes()).await;
        }
    })
}

#[tokio::test(flavor = "current_thread")]
async fn bird_is_up_when_its_socket_greets_and_down_otherwise() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("bird.ctl");
    let down = announcer::probe_bird(sock.to_str().unwrap()).await;
    assert!(!down.up);
    assert!(down.detail.contains("No such file"), "{}", down.detail);
    let bird = fake_bird(&sock, "0001 BIRD 2.0.12 ready.\n");
    let up = announcer::probe_bird(sock.to_str().unwrap()).await;
    assert_eq!((up.up, up.detail.as_str()), (true, "BIRD 2.0.12 ready."));
    bird.abort();
    let _ = std::fs::remove_file(&sock);
    let other = fake_bird(&sock, "220 an SMTP server\n");
    let wrong = announcer::probe_bird(sock.to_str().unwrap()).await;
    assert!(!wrong.up && wrong.detail.contains("unexpected greeting"), "{}", wrong.detail);
    other.abort();
}

/// The loop (without a route table: it decides and reports) and the API: starting until the
/// worker polls, then serving with its VIPs; drained through the API withdraws them all and
/// undrained announces them again; BIRD's state shows in the status.
#[tokio::test(flavor = "current_thread")]
async fn the_api_drains_and_undrains_the_instance_and_shows_what_is_announced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("bird.ctl");
    let _bird = fake_bird(&sock, "0001 BIRD 2.0.12 ready.\n");
    let text = FLEET
        .replace("  table: 100\n", &format!("  table: 100\n  bird_socket: {}\n", sock.display()));
    let (_cdir, c) = controller(&text);
    let view = Arc::new(OneWorker::new());
    let options = FleetOptions { table: None, link_up: Box::new(|| true), sync_done: None };
    let task = announcer::spawn(Arc::clone(&c), view.clone(), options);
    let listen = format!("unix:{}", dir.path().join("api.sock").display());
    let server = api::spawn(&ApiOptions::new(&listen), Arc::clone(&c), view.clone()).expect("api");
    let client = Client::new(&server.local_addr().to_string(), Duration::from_secs(5)).unwrap();
    let get = || async {
        let body = client.call(Method::GET, "/v1/instance", None).await.expect("GET");
        serde_json::from_str::<InstanceReply>(&body).expect("json")
    };
    let wait = |want: &'static str| {
        let get = &get;
        async move {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let r = get().await;
                if r.phase == want && (want != "serving" || !r.announced.is_empty()) {
                    return r;
                }
                assert!(Instant::now() < deadline, "not {want}: {r:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let r = get().await;
    assert_eq!(r.phase, "starting");
    assert!(r.announced.is_empty());
    view.0.heartbeat.inc();
    let r = wait("serving").await;
    assert_eq!(r.announced, ["198.19.200.1", "fd00::53"]);
    assert_eq!(r.fingerprints.len(), 4, "{r:?}");
    assert!(r.fingerprints.values().all(|f| f.starts_with("0x") && f.len() == 18), "{r:?}");
    let body = client.call(Method::POST, "/v1/instance/drain", None).await.expect("drain");
    let r: InstanceReply = serde_json::from_str(&body).expect("json");
    assert_eq!(r.phase, "drained");
    wait("drained").await;
    // The loop's next tick withdraws every VIP, and the status shows BIRD up.
    let r = eventually(Duration::from_secs(5), "every VIP withdrawn once drained", || async {
        let r = get().await;
        match r.announced.is_empty() && r.wanted.is_empty() && r.bird.is_some() {
            true => Ok(r),
            false => Err(r),
        }
    })
    .await;
    assert_eq!(r.phase, "drained", "{r:?}");
    assert_eq!(r.bird.as_ref().map(|b| b.up), Some(true), "{r:?}");
    // A body that is not an empty object is refused, nothing changes.
    let e = client
        .call(Method::POST, "/v1/instance/undrain", Some(&serde_json::json!([1])))
        .await
        .expect_err("bad body");
    assert!(e.to_string().contains("400"), "{e}");
    client.call(Method::POST, "/v1/instance/undrain", None).await.expect("undrain");
    let r = wait("serving").await;
    assert_eq!(r.announced, ["198.19.200.1", "fd00::53"]);
    // Stopping: the API cannot undo it.
    c.lock().unwrap().instance_mut().begin_stop(Instant::now());
    let e = client.call(Method::POST, "/v1/instance/undrain", None).await.expect_err("stopping");
    assert!(e.to_string().contains("409"), "{e}");
    task.abort();
}

/// Two instances with the same configuration have the same fingerprints; another hash seed,
/// another backend set, or another health verdict changes the service's.
#[tokio::test(flavor = "current_thread")]
async fn table_fingerprints_agree_for_the_same_config_and_differ_otherwise() {
    let fp = |text: &str| {
        let (_d, c) = controller(text);
        let c = c.lock().unwrap();
        let snap = c.snapshot();
        snap.services().map(|s| (s.name.to_string(), snap.table_fingerprint(s))).collect::<Vec<_>>()
    };
    let base = fp(FLEET);
    assert_eq!(base, fp(FLEET));
    let seeded = fp(&FLEET.replace("dataplane:\n", "dataplane:\n  hash_seed: 7\n"));
    assert!(base.iter().zip(&seeded).all(|(x, y)| x.1 != y.1), "every table depends on the seed");
    let more =
        fp(&FLEET.replace("[198.18.1.1, 198.18.1.2]", "[198.18.1.1, 198.18.1.2, 198.18.1.9]"));
    assert_ne!(base[0].1, more[0].1, "web changed");
    assert_eq!(base[1..], more[1..], "the others did not");
    let (_d, c) = controller(FLEET);
    let mut c = c.lock().unwrap();
    set(&mut c, "198.18.1.1", "web", Some(Override::Unhealthy));
    let snap = c.snapshot();
    let web = snap.services().find(|s| &*s.name == "web").unwrap();
    assert_ne!(snap.table_fingerprint(web), base[0].1, "a health verdict changes the table");
}

/// The netlink handoff in a network namespace of its own (the test re-runs itself inside
/// one): the VIP routes appear in the table with protocol 252, only they are touched, a route
/// someone deleted comes back at the next sync, and an emptied set removes them all.
#[test]
#[ignore = "needs root: creates a network namespace (CI runs it)"]
fn the_route_table_holds_exactly_the_announced_vips() {
    if std::env::var_os("SPILLWAY_IN_NETNS").is_some() {
        return in_namespace();
    }
    let ns = format!("spwtest-{}", std::process::id());
    let ip = |args: &[&str]| std::process::Command::new("ip").args(args).status().expect("ip");
    assert!(ip(&["netns", "add", &ns]).success(), "ip netns add (root?)");
    let exe = std::env::current_exe().expect("exe");
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &ns])
        .arg(exe)
        .args([
            "--exact",
            "the_route_table_holds_exactly_the_announced_vips",
            "--include-ignored",
            "--nocapture",
        ])
        .env("SPILLWAY_IN_NETNS", "1")
        .output()
        .expect("run in the namespace");
    let _ = ip(&["netns", "del", &ns]);
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("1 passed"), "{text}");
}

fn in_namespace() {
    use spillway_control::netlink::{Netlink, RouteTable};
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let sh = |args: &[&str]| {
            let o = std::process::Command::new("ip").args(args).output().expect("ip");
            assert!(o.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&o.stderr));
            String::from_utf8_lossy(&o.stdout).into_owned()
        };
        // Someone else's route in the same table stays untouched.
        sh(&["link", "set", "lo", "up"]);
        sh(&["route", "add", "blackhole", "198.19.99.0/24", "table", "100"]);
        let nl = Netlink::connect().expect("netlink");
        let table = RouteTable { netlink: nl.clone(), table: 100, oif: None };
        let want: BTreeSet<IpAddr> = ["198.19.200.1", "198.19.200.2", "fd00::100"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let r = table.apply(&want).await.expect("apply");
        assert_eq!(r.added.len(), 3);
        let v4 = sh(&["route", "show", "table", "100"]);
        assert!(v4.contains("blackhole 198.19.200.1 proto 252"), "{v4}");
        assert!(v4.contains("blackhole 198.19.200.2 proto 252"), "{v4}");
        assert!(v4.contains("blackhole 198.19.99.0/24"), "{v4}");
        let v6 = sh(&["-6", "route", "show", "table", "100"]);
        assert!(v6.contains("blackhole fd00::100") && v6.contains("proto 252"), "{v6}");
        // Nothing to do when in sync; a deleted route comes back.
        assert!(table.apply(&want).await.expect("apply").added.is_empty());
        sh(&["route", "del", "198.19.200.2", "table", "100"]);
        assert_eq!(
            table.apply(&want).await.expect("apply").added,
            ["198.19.200.2".parse::<IpAddr>().unwrap()]
        );
        // Withdraw one, then all; the foreign route stays.
        let one: BTreeSet<IpAddr> = ["198.19.200.1".parse().unwrap()].into();
        let r = table.apply(&one).await.expect("apply");
        assert_eq!(r.removed.len(), 2);
        let r = table.apply(&BTreeSet::new()).await.expect("apply");
        assert_eq!(r.removed, ["198.19.200.1".parse::<IpAddr>().unwrap()]);
        let v4 = sh(&["route", "show", "table", "100"]);
        assert_eq!(v4.trim(), "blackhole 198.19.99.0/24", "{v4}");
        // Through an interface: a route that goes with it.
        sh(&["link", "add", "spl9", "type", "veth", "peer", "name", "spl9p"]);
        // The kernel's own announcements while it is configured, in order: the addresses must
        // be on before the link comes up (a routing daemon that sees the link up binds its BFD
        // socket to the address at once; see `configure_interface`). A thread collects what
        // `ip monitor` prints, line by line.
        let mut monitor = std::process::Command::new("ip")
            .args(["-o", "monitor", "link", "address"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("ip monitor");
        let events = Arc::new(Mutex::new(String::new()));
        let reader = std::thread::spawn({
            let (out, events) = (monitor.stdout.take().expect("piped"), Arc::clone(&events));
            move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                    let mut events = events.lock().unwrap();
                    events.push_str(&line);
                    events.push('\n');
                }
            }
        });
        let seen = || events.lock().unwrap().clone();
        // Until the monitor listens: the peer's MTU changes at every try, until it reports one.
        let mut mtu = 1500;
        eventually(Duration::from_secs(5), "ip monitor to report a change of spl9p", || {
            mtu = if mtu == 1500 { 1499 } else { 1500 };
            sh(&["link", "set", "dev", "spl9p", "mtu", &mtu.to_string()]);
            let e = seen();
            async move {
                match e.contains("spl9p@spl9") {
                    true => Ok(()),
                    false => Err(e),
                }
            }
        })
        .await;
        let index = nl.link_index("spl9").await.expect("link").expect("spl9 exists");
        assert_eq!(nl.link_index("nosuch0").await.expect("link"), None);
        nl.configure_interface(
            index,
            [2, 0, 0, 0, 0, 9],
            1400,
            &[("198.18.0.11".parse().unwrap(), 16), ("fd00::11".parse().unwrap(), 64)],
        )
        .await
        .expect("configure");
        let is_up = |l: &&str| {
            l.split_once('<')
                .and_then(|(_, rest)| rest.split_once('>'))
                .is_some_and(|(flags, _)| flags.split(',').any(|f| f == "UP"))
        };
        // Where the IPv4 address and the link coming up are among the link's events.
        let positions = |events: &str| {
            let ours: Vec<&str> =
                events.lines().filter(|l| l.starts_with(&format!("{index}: "))).collect();
            let addr_at = ours.iter().position(|l| l.contains("inet 198.18.0.11/16"));
            (addr_at, ours.iter().position(is_up))
        };
        let printed = eventually(
            Duration::from_secs(5),
            "ip monitor to report spl9's IPv4 address and the link up",
            || {
                let e = seen();
                async move {
                    match positions(&e) {
                        (Some(_), Some(_)) => Ok(e),
                        _ => Err(e),
                    }
                }
            },
        )
        .await;
        let _ = monitor.kill();
        let _ = monitor.wait();
        reader.join().expect("ip monitor reader");
        assert!(
            matches!(positions(&printed), (Some(a), Some(u)) if a < u),
            "the IPv4 address must be announced before the link comes up:\n{printed}"
        );
        let link = sh(&["addr", "show", "spl9"]);
        assert!(link.contains("02:00:00:00:00:09") && link.contains("mtu 1400"), "{link}");
        assert!(link.contains("198.18.0.11/16") && link.contains("fd00::11/64"), "{link}");
        let table = RouteTable { netlink: nl.clone(), table: 100, oif: Some(index) };
        table.apply(&one).await.expect("apply");
        let v4 = sh(&["route", "show", "table", "100"]);
        assert!(v4.contains("198.19.200.1 dev spl9 proto 252 scope link"), "{v4}");
        sh(&["link", "del", "spl9"]);
        let v4 = sh(&["route", "show", "table", "100"]);
        assert!(!v4.contains("198.19.200.1"), "the route went with its interface: {v4}");

        // The handoff failing: routes through an interface that is gone. The error names the
        // VIP and the kernel's reason.
        let gone = RouteTable { netlink: nl.clone(), table: 100, oif: Some(index) };
        let e = gone.apply(&one).await.expect_err("no such interface");
        assert!(
            e.to_string().contains("adding 198.19.200.1")
                && e.to_string().contains("No such device"),
            "{e}"
        );

        // The loop keeps trying, counts and shows the error, and recovers once it can.
        let (_dir, c) = controller(FLEET);
        let view = Arc::new(OneWorker::new());
        let options =
            FleetOptions { table: Some(gone), link_up: Box::new(|| true), sync_done: None };
        let task = announcer::spawn(Arc::clone(&c), view.clone(), options);
        let spawned = Instant::now();
        tokio::task::yield_now().await;
        view.0.heartbeat.inc(); // the worker polls: ready
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let g = c.lock().unwrap();
            let (errors, _, last) = g.instance().route_updates();
            if errors >= 2 {
                assert!(last.is_some_and(|m| m.contains("No such device")), "{last:?}");
                // A retry every 2 s, not at every 100 ms tick.
                assert!(
                    spawned.elapsed() >= Duration::from_millis(1900),
                    "{errors} errors too soon"
                );
                assert!(g.instance().announced().is_empty(), "nothing announced while failing");
                break;
            }
            assert!(Instant::now() < deadline, "the loop did not retry: {errors} error(s)");
        }
        task.abort();
        // Forwarding never depended on it; a table that works clears the error.
        let options = FleetOptions {
            table: Some(RouteTable { netlink: nl.clone(), table: 100, oif: None }),
            link_up: Box::new(|| true),
            sync_done: None,
        };
        let task = announcer::spawn(Arc::clone(&c), view.clone(), options);
        tokio::task::yield_now().await;
        view.0.heartbeat.inc();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !c.lock().unwrap().instance().announced().contains(&a("198.19.200.1")) {
            assert!(Instant::now() < deadline, "never announced after the error");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(c.lock().unwrap().instance().route_updates().2, None, "the error is cleared");
        let v4 = sh(&["route", "show", "table", "100"]);
        assert!(v4.contains("blackhole 198.19.200.1 proto 252"), "{v4}");
        task.abort();
    });
}

#[test]
fn a_stop_after_a_drain_counts_the_quiet_time_from_the_drain() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let quiet = Duration::from_secs(1);
    let mut i = Instance::new(t0);
    assert_eq!(i.withdrawn_for(at(500)), Some(Duration::from_millis(500)), "never announced");
    i.set_waiting_for(None, at(1000));
    assert_eq!(i.withdrawn_for(at(1500)), None, "serving");
    i.note_forwarded(10, at(1500));
    i.set_drained(true, at(2000));
    // The stop comes long after the drain, traffic long gone: stopped already.
    i.begin_stop(at(9000));
    assert_eq!(i.withdrawn_for(at(9000)), Some(Duration::from_secs(7)));
    assert!(i.traffic_stopped(at(9000), quiet));
}

/// A worker and two ports with driver counters: the port and exception-path metrics show them.
struct PortsView {
    worker: OneWorker,
    ports: Vec<(String, spillway_core::counters::PortCounters)>,
    kernel: spillway_core::counters::KernelPathCounters,
}

impl DataplaneView for PortsView {
    fn workers(&self) -> usize {
        1
    }
    fn counters(&self, w: usize) -> &spillway_core::counters::WorkerCounters {
        self.worker.counters(w)
    }
    fn lookup(
        &self,
        k: spillway_core::flow::FlowKey,
        h: u64,
    ) -> Vec<spillway_control::view::LookupReply> {
        self.worker.lookup(k, h)
    }
    fn neighbours(&self) -> Vec<(Addr, [u8; 6])> {
        Vec::new()
    }
    fn kernel_counters(&self) -> Option<&spillway_core::counters::KernelPathCounters> {
        Some(&self.kernel)
    }
    fn port_counters(&self) -> Vec<(&str, &spillway_core::counters::PortCounters)> {
        self.ports.iter().map(|(n, c)| (n.as_str(), c)).collect()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn metrics_show_the_ports_the_exception_path_and_the_fleet() {
    let (_dir, c) = controller(FLEET);
    let view = PortsView {
        worker: OneWorker::new(),
        ports: vec![
            ("net_tap0".into(), Default::default()),
            ("net_tap_kernel".into(), Default::default()),
        ],
        kernel: Default::default(),
    };
    view.ports[0].1.ipackets.set(1000);
    view.ports[0].1.imissed.set(40);
    view.ports[1].1.opackets.set(7);
    view.kernel.to_kernel.set(90);
    view.kernel.to_kernel_dropped.set(3);
    view.worker.0.kernel_frames.set(93);
    c.lock().unwrap().instance_mut().set_waiting_for(None, Instant::now());
    let text = spillway_control::metrics::render(&c, &view).expect("render");
    for line in [
        "spillway_port_packets_total{port=\"net_tap0\",direction=\"rx\"} 1000",
        "spillway_port_dropped_total{port=\"net_tap0\",reason=\"missed\"} 40",
        "spillway_port_packets_total{port=\"net_tap_kernel\",direction=\"tx\"} 7",
        "spillway_kernel_path_frames_total{direction=\"to_kernel\"} 90",
        "spillway_kernel_path_dropped_total{direction=\"to_kernel\"} 3",
        "spillway_kernel_frames_total{worker=\"0\"} 93",
        "spillway_instance_phase{phase=\"serving\"} 1",
        "spillway_instance_phase{phase=\"starting\"} 0",
        "spillway_vip_announced{vip=\"198.19.200.1\"} 0",
        "spillway_announce_route_errors_total 0",
    ] {
        assert!(text.contains(line), "no `{line}` in\n{text}");
    }
    assert!(!text.contains("198.19.200.3"), "a `never` service's VIP is not listed");
    let info = text.lines().filter(|l| l.starts_with("spillway_service_table_info{")).count();
    assert_eq!(info, 4, "one fingerprint per service:\n{text}");
}
