//! Health checker against real sockets on loopback (SPEC section 6, HC-1 and HC-3).
//!
//! Every test runs on a current-thread runtime, like the control plane, with the probed servers
//! on the same runtime. Intervals are short (50-100 ms); timing assertions leave a margin for a
//! loaded 2-core machine.

use spillway_control::health::{
    CheckKind, CheckSpec, HealthChecker, HealthEvent, ProbeResult, Target, TargetStatus,
};
use spillway_shared::addr::Addr;
use spillway_shared::model::{BackendKey, Endpoint};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio::time::{sleep, timeout, Instant};

const LO4: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const LO6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);

fn key(service: &str, ip: IpAddr, port: u16) -> BackendKey {
    BackendKey { service: service.into(), endpoint: Endpoint { addr: Addr::from(ip), port } }
}

fn spec(kind: CheckKind, interval_ms: u64, healthy: u32, unhealthy: u32) -> CheckSpec {
    CheckSpec {
        name: "check".into(),
        kind,
        port: None,
        interval: Duration::from_millis(interval_ms),
        timeout: Duration::from_millis(500),
        healthy_threshold: healthy,
        unhealthy_threshold: unhealthy,
        initial_healthy: false,
    }
}

fn target(key: &BackendKey, spec: CheckSpec) -> Target {
    Target { key: key.clone(), check: Arc::new(spec) }
}

fn http(expected_status: u16) -> CheckKind {
    CheckKind::Http { path: "/healthz".into(), expected_status, host: None }
}

fn status_of(hc: &HealthChecker, key: &BackendKey) -> TargetStatus {
    hc.status().into_iter().find(|s| &s.key == key).expect("target present")
}

/// The next event, failing the test after `within`.
async fn next_event(rx: &mut UnboundedReceiver<HealthEvent>, within: Duration) -> HealthEvent {
    timeout(within, rx.recv()).await.expect("event in time").expect("channel open")
}

/// Asserts that no event arrives during `d`.
async fn no_event(rx: &mut UnboundedReceiver<HealthEvent>, d: Duration) {
    if let Ok(ev) = timeout(d, rx.recv()).await {
        panic!("unexpected event {ev:?}");
    }
}

/// A TCP listener that accepts and counts connections, then closes them.
async fn tcp_server(ip: IpAddr) -> (u16, Arc<AtomicU64>) {
    let l = TcpListener::bind(SocketAddr::new(ip, 0)).await.unwrap();
    let port = l.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicU64::new(0));
    let a = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            a.fetch_add(1, Ordering::Relaxed);
            drop(s);
        }
    });
    (port, accepted)
}

/// A port with nothing listening (bound, then released).
async fn closed_tcp_port(ip: IpAddr) -> u16 {
    let l = TcpListener::bind(SocketAddr::new(ip, 0)).await.unwrap();
    l.local_addr().unwrap().port()
}

/// An HTTP server answering every request with the current value of `status`; keeps the last
/// request head.
struct HttpServer {
    port: u16,
    status: Arc<AtomicU16>,
    requests: Arc<AtomicU64>,
    last_request: Arc<Mutex<String>>,
}

async fn http_server(initial: u16) -> HttpServer {
    let l = TcpListener::bind(SocketAddr::new(LO4, 0)).await.unwrap();
    let port = l.local_addr().unwrap().port();
    let status = Arc::new(AtomicU16::new(initial));
    let requests = Arc::new(AtomicU64::new(0));
    let last_request = Arc::new(Mutex::new(String::new()));
    let (st, rq, last) = (Arc::clone(&status), Arc::clone(&requests), Arc::clone(&last_request));
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let (st, rq, last) = (Arc::clone(&st), Arc::clone(&rq), Arc::clone(&last));
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                rq.fetch_add(1, Ordering::Relaxed);
                *last.lock().unwrap() = String::from_utf8_lossy(&buf).into_owned();
                let code = st.load(Ordering::Relaxed);
                let reply = format!(
                    "HTTP/1.1 {code} Whatever\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                );
                let _ = s.write_all(reply.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    HttpServer { port, status, requests, last_request }
}

/// A TCP server that accepts and holds every connection without ever answering.
async fn hung_server() -> u16 {
    let l = TcpListener::bind(SocketAddr::new(LO4, 0)).await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
        }
    });
    port
}

/// A UDP echo server.
async fn udp_echo(ip: IpAddr) -> u16 {
    let sock = UdpSocket::bind(SocketAddr::new(ip, 0)).await.unwrap();
    let port = sock.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut buf = [0u8; 2048];
        while let Ok((n, peer)) = sock.recv_from(&mut buf).await {
            let _ = sock.send_to(&buf[..n], peer).await;
        }
    });
    port
}

/// HC-1 (TCP) and HC-3: a listening port turns healthy after exactly `healthy_threshold`
/// consecutive successes, not before; the event comes once.
#[tokio::test]
async fn hc_1_hc_3_tcp_listening_turns_healthy_after_threshold() {
    let (tx, mut rx) = unbounded_channel();
    let mut hc = HealthChecker::new(tx);
    let (port, accepted) = tcp_server(LO4).await;
    let k = key("web", LO4, port);
    hc.set_targets(vec![target(&k, spec(CheckKind::Tcp, 100, 3, 2))]);

    // HC-3: unhealthy before the first probe.
    assert_eq!(hc.verdict(&k), Some(false));
    let st = status_of(&hc, &k);
    assert_eq!((st.last_result, st.probes.total()), (None, 0));

    let start = Instant::now();
    let ev = next_event(&mut rx, Duration::from_secs(3)).await;
    assert_eq!(ev, HealthEvent { key: k.clone(), healthy: true });
    let st = status_of(&hc, &k);
    // Turned healthy on the third success, not before.
    assert_eq!(st.probes.get(ProbeResult::Success), 3, "{st:?}");
    assert_eq!(st.consecutive_ok, 3);
    assert!(st.healthy && st.last_result == Some(ProbeResult::Success));
    assert!(st.last_latency.is_some() && st.latency_count == 3);
    assert!(accepted.load(Ordering::Relaxed) >= 3);
    // First probe within one interval, then two intervals: at most ~300 ms + noise.
    eprintln!("tcp: healthy after {:?}", start.elapsed());
    assert!(start.elapsed() < Duration::from_millis(1000));

    // Exactly one event per change: staying healthy sends nothing more.
    no_event(&mut rx, Duration::from_millis(400)).await;
    assert!(status_of(&hc, &k).probes.get(ProbeResult::Success) >= 5);
}

/// HC-3 and HC-1 (TCP): a closed port stays unhealthy, with `Refused` as last result.
#[tokio::test]
async fn hc_3_tcp_closed_port_stays_unhealthy_refused() {
    let (tx, mut rx) = unbounded_channel();
    let mut hc = HealthChecker::new(tx);
    let port = closed_tcp_port(LO4).await;
    let k = key("web", LO4, port);
    hc.set_targets(vec![target(&k, spec(CheckKind::Tcp, 50, 2, 2))]);
    no_event(&mut rx, Duration::from_millis(500)).await;
    let st = status_of(&hc, &k);
    assert!(!st.healthy);
    assert_eq!(hc.verdict(&k), Some(false));
    assert_eq!(st.last_result, Some(ProbeResult::Refused));
    assert!(st.probes.get(ProbeResult::Refused) >= 4, "{st:?}");
    assert_eq!(st.probes.get(ProbeResult::Refused), st.probes.total());
    assert_eq!(u64::from(st.consecutive_fail), st.probes.total());
}

/// HC-1 over IPv6, and `check.port` overriding the endpoint's port; a target without any port
/// reports `Error` on every probe.
#[tokio::test]
async fn hc_1_tcp_ipv6_check_port_and_missing_port() {
    let (tx, mut rx) = unbounded_channel();
    let mut hc = HealthChecker::new(tx);
    let (port, _) = tcp_server(LO6).await;
    // Endpoint without a port; the check names it.
    let with_check_port = key("v6", LO6, 0);
    let mut sp = spec(CheckKind::Tcp, 50, 1, 1);
    sp.port = Some(port);
    let no_port = key("noport", LO6, 0);
    hc.set_targets(vec![
        target(&with_check_port, sp),
        target(&no_port, spec(CheckKind::Tcp, 50, 1, 1)),
    ]);
    let ev = next_event(&mut rx, Duration::from_secs(2)).await;
    assert_eq!(ev, HealthEvent { key: with_check_port.clone(), healthy: true });
    sleep(Duration::from_millis(200)).await;
    let st = status_of(&hc, &no_port);
    assert!(!st.healthy);
    assert_eq!(st.last_result, Some(ProbeResult::Error));
    assert!(st.probes.get(ProbeResult::Error) >= 2);
}

/// HC-1 (HTTP): 200 turns healthy, then 500 turns unhealthy after `unhealthy_threshold`
/// failures, within `interval × unhealthy_threshold + interval` (plus a margin for noise).
#[tokio::test]
async fn hc_1_http_status_drives_verdict_and_detection_time() {
    let (tx, mut rx) = unbounded_channel();
    let mut hc = HealthChecker::new(tx);
    let srv = http_server(200).await;
    let k = key("api", LO4, srv.port);
    let interval = Duration::from_millis(100);
    let unhealthy_threshold = 3;
    hc.set_targets(vec![target(&k, spec(http(200), 100, 2, unhealthy_threshold))]);

    let ev = next_event(&mut rx, Duration::from_secs(3)).await;
    assert_eq!(ev, HealthEvent { key: k.clone(), healthy: true });
    let req = srv.last_request.lock().unwrap().clone();
    assert!(req.starts_with("GET /healthz HTTP/1.1\r\n"), "{req}");
    assert!(req.contains(&format!("\r\nHost: 127.0.0.1:{}\r\n", srv.port)), "{req}");
    assert!(req.contains("\r\nConnection: close\r\n"), "{req}");

    no_event(&mut rx, Duration::from_millis(250)).await;
    srv.status.store(500, Ordering::Relaxed);
    let switched = Instant::now();
    let ev = next_event(&mut rx, Duration::from_secs(3)).await;
    let detection = switched.elapsed();
    assert_eq!(ev, HealthEvent { key: k.clone(), healthy: false });
    let bound = interval * (unhealthy_threshold + 1);
    eprintln!("http: 500 detected after {detection:?} (bound {bound:?} + 250 ms margin)");
    assert!(detection <= bound + Duration::from_millis(250), "{detection:?}");
    // And not before `unhealthy_threshold` failures: at least two full intervals.
    assert!(detection >= interval * (unhealthy_threshold - 1) * 9 / 10, "{detection:?}");
    let st = status_of(&hc, &k);
    assert_eq!(st.last_result, Some(ProbeResult::BadStatus(500)));
    assert_eq!(st.consecutive_fail, unhealthy_threshold, "{st:?}");
    assert_eq!(st.probes.get(ProbeResult::BadStatus(0)), u64::from(unhealthy_threshold));
    assert!(srv.requests.load(Ordering::Relaxed) >= 2 + u64::from(unhealthy_threshold));

    // Exactly one event for the change; back to 200 gives exactly one more.
    no_event(&mut rx, Duration::from_millis(250)).await;
    srv.status.store(200, Ordering::Relaxed);
    let ev = next_event(&mut rx, Duration::from_secs(3)).await;
    assert_eq!(ev, HealthEvent { key: k.clone(), healthy: true });
    no_event(&mut rx, Duration::from_millis(250)).await;
}

/// HC-1 (HTTP): a reply that is not HTTP is `BadReply`.
#[tokio::test]
async fn hc_1_http_garbage_reply_is_bad_reply() {
    let l = TcpListener::bind(SocketAddr::new(LO4, 0)).await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let _ = s.write_all(b"SSH-2.0-OpenSSH_9.6\r\n").await;
        }
    });
    let (tx, mut rx) = unbounded_channel();
    let mut hc = HealthChecker::new(tx);
    let k = key("api", LO4, port);
    let mut sp = spec(http(200), 50, 1, 2);
    sp.initial_healthy = true;
    hc.set_targets(vec![target(&k, sp)]);
    let ev = next_event(&mut rx, Duration::from_secs(2)).await;
    assert_eq!(ev, HealthEvent { key: k.clone(), healthy: false });
    assert_eq!(status_of(&hc, &k).last_result, Some(ProbeResult::BadReply));
}

/// HC-1 (UDP): an echo server is healthy when the reply contains `expect`, unhealthy with
/// `BadReply` when it does not; a closed UDP port is `Refused` (ICMP port unreachable).
#[tokio::test]
async fn hc_1_udp_request_reply() {
    let (tx, mut rx) = unbounded_channel();
    let mut hc = HealthChecker::new(tx);
    let port4 = udp_echo(LO4).await;
    let port6 = udp_echo(LO6).await;
    let closed = {
        let s = UdpSocket::bind(SocketAddr::new(LO4, 0)).await.unwrap();
        s.local_addr().unwrap().port()
    };
    let udp = |expect: Option<&[u8]>| CheckKind::Udp {
        request: b"PING spillway".to_vec(),
        expect: expect.map(<[u8]>::to_vec),
    };
    let good = key("dns", LO4, port4);
    let good6 = key("dns", LO6, port6);
    let wrong = key("dns-wrong", LO4, port4);
    let refused = key("dns-closed", LO4, closed);
    let mut wrong_spec = spec(udp(Some(b"PONG")), 50, 1, 2);
    wrong_spec.initial_healthy = true;
    hc.set_targets(vec![
        target(&good, spec(udp(Some(b"spillway")), 50, 2, 2)),
        target(&good6, spec(udp(None), 50, 2, 2)),
        target(&wrong, wrong_spec),
        target(&refused, spec(udp(None), 50, 1, 1)),
    ]);
    let mut events = Vec::new();
    for _ in 0..3 {
        events.push(next_event(&mut rx, Duration::from_secs(3)).await);
    }
    let mut expected = vec![
        HealthEvent { key: good.clone(), healthy: true },
        HealthEvent { key: good6.clone(), healthy: true },
        HealthEvent { key: wrong.clone(), healthy: false },
    ];
    events.sort_by(|a, b| a.key.cmp(&b.key));
    expected.sort_by(|a, b| a.key.cmp(&b.key));
    assert_eq!(events, expected);
    no_event(&mut rx, Duration::from_millis(300)).await;
    assert_eq!(status_of(&hc, &wrong).last_result, Some(ProbeResult::BadReply));
    let st = status_of(&hc, &refused);
    assert!(!st.healthy);
    assert_eq!(st.last_result, Some(ProbeResult::Refused), "{st:?}");
}

/// A hung backend (accepts, never answers HTTP) with a 500 ms timeout does not delay a healthy
/// target probed every 50 ms.
#[tokio::test]
async fn hung_backend_does_not_delay_others() {
    let (tx, _rx) = unbounded_channel();
    let mut hc = HealthChecker::new(tx);
    let hung = key("slow", LO4, hung_server().await);
    let (fast_port, _) = tcp_server(LO4).await;
    let fast = key("fast", LO4, fast_port);
    let mut hung_spec = spec(http(200), 100, 1, 1);
    hung_spec.initial_healthy = true;
    hc.set_targets(vec![target(&hung, hung_spec), target(&fast, spec(CheckKind::Tcp, 50, 1, 1))]);

    sleep(Duration::from_millis(300)).await;
    let t0 = Instant::now();
    let before = status_of(&hc, &fast).probes.total();
    sleep(Duration::from_millis(1500)).await;
    let elapsed = t0.elapsed();
    let fast_st = status_of(&hc, &fast);
    let hung_st = status_of(&hc, &hung);
    let grew = fast_st.probes.total() - before;
    let expected = u64::try_from(elapsed.as_millis() / 50).unwrap();
    eprintln!(
        "hung: fast target ran {grew} probes in {elapsed:?} (~{expected} expected); hung target: \
         {:?} timeouts",
        hung_st.probes.get(ProbeResult::Timeout)
    );
    // At its own rate (with margin for noise), far above the 3 a 500 ms stall would allow.
    assert!(grew >= expected * 7 / 10, "{grew} < 70% of {expected}");
    assert!(fast_st.healthy && fast_st.probes.get(ProbeResult::Success) == fast_st.probes.total());
    // The hung target times out, at most once per 500 ms (its probes never overlap).
    assert!(!hung_st.healthy);
    assert_eq!(hung_st.last_result, Some(ProbeResult::Timeout));
    let timeouts = hung_st.probes.get(ProbeResult::Timeout);
    assert!((2..=4).contains(&timeouts), "{timeouts} timeouts in ~1.8 s");
    let lat = hung_st.last_latency.unwrap();
    assert!(lat >= Duration::from_millis(500) && lat < Duration::from_millis(800), "{lat:?}");
}

/// HC-3 `initial: healthy`: a never-probed backend starts healthy, and a failing one leaves it
/// after `unhealthy_threshold` failures.
#[tokio::test]
async fn hc_3_initial_healthy_starts_healthy() {
    let (tx, mut rx) = unbounded_channel();
    let mut hc = HealthChecker::new(tx);
    let (up_port, _) = tcp_server(LO4).await;
    let up = key("web", LO4, up_port);
    let down = key("web", LO4, closed_tcp_port(LO4).await);
    let mut sp = spec(CheckKind::Tcp, 50, 2, 2);
    sp.initial_healthy = true;
    let sp = Arc::new(sp);
    hc.set_targets(vec![
        Target { key: up.clone(), check: Arc::clone(&sp) },
        Target { key: down.clone(), check: sp },
    ]);
    assert_eq!(hc.verdict(&up), Some(true));
    assert_eq!(hc.verdict(&down), Some(true));
    let ev = next_event(&mut rx, Duration::from_secs(2)).await;
    assert_eq!(ev, HealthEvent { key: down.clone(), healthy: false });
    no_event(&mut rx, Duration::from_millis(300)).await;
    assert_eq!(hc.verdict(&up), Some(true));
}

/// Reconcile: an unchanged target keeps its state (verdict and counters, even when its check
/// comes in a new, equal `Arc`); a removed one is no longer probed and sends no event; a new
/// one starts from HC-3; a changed check keeps the verdict and restarts the counters.
#[tokio::test]
async fn reconcile_keeps_unchanged_and_drops_removed() {
    let (tx, mut rx) = unbounded_channel();
    let mut hc = HealthChecker::new(tx);
    let (kept_port, _) = tcp_server(LO4).await;
    let removed_srv = http_server(200).await;
    let kept = key("web", LO4, kept_port);
    let removed = key("api", LO4, removed_srv.port);
    let kept_spec = || spec(CheckKind::Tcp, 50, 2, 2);
    hc.set_targets(vec![target(&kept, kept_spec()), target(&removed, spec(http(200), 50, 1, 1))]);
    let mut evs = vec![
        next_event(&mut rx, Duration::from_secs(2)).await,
        next_event(&mut rx, Duration::from_secs(2)).await,
    ];
    evs.sort_by(|a, b| a.key.cmp(&b.key));
    assert_eq!(
        evs,
        vec![
            HealthEvent { key: removed.clone(), healthy: true },
            HealthEvent { key: kept.clone(), healthy: true },
        ]
    );
    sleep(Duration::from_millis(100)).await;
    let before = status_of(&hc, &kept);

    // Reload: `kept` with an equal check in a new Arc, `removed` gone, `new` added.
    let (new_port, _) = tcp_server(LO4).await;
    let new = key("web", LO4, new_port);
    hc.set_targets(vec![target(&kept, kept_spec()), target(&new, kept_spec())]);
    let after = status_of(&hc, &kept);
    assert!(after.healthy);
    assert!(after.probes.total() >= before.probes.total());
    assert!(after.consecutive_ok >= before.consecutive_ok);
    assert_eq!(hc.verdict(&removed), None);
    assert_eq!(hc.verdict(&new), Some(false));
    assert_eq!(hc.len(), 2);
    assert!(hc.status().iter().all(|s| s.key != removed));

    // The removed target is no longer probed, and its failure sends nothing.
    sleep(Duration::from_millis(100)).await;
    let requests = removed_srv.requests.load(Ordering::Relaxed);
    removed_srv.status.store(503, Ordering::Relaxed);
    let ev = next_event(&mut rx, Duration::from_secs(2)).await;
    assert_eq!(ev, HealthEvent { key: new.clone(), healthy: true });
    no_event(&mut rx, Duration::from_millis(300)).await;
    assert_eq!(removed_srv.requests.load(Ordering::Relaxed), requests);
    let counters_kept = status_of(&hc, &kept).probes.total();
    assert!(counters_kept > before.probes.total());

    // A changed check (other interval) on the same key: verdict kept, counters restart.
    let mut changed = kept_spec();
    changed.interval = Duration::from_millis(60);
    hc.set_targets(vec![target(&kept, changed), target(&new, kept_spec())]);
    let st = status_of(&hc, &kept);
    assert!(st.healthy);
    assert!(st.probes.total() < counters_kept, "{st:?}");
    no_event(&mut rx, Duration::from_millis(300)).await;
    assert!(status_of(&hc, &kept).probes.total() >= 2);
}

/// Dropping the checker stops every task: their event senders go, so the channel closes, and
/// the backend sees no more probes.
#[tokio::test]
async fn drop_stops_all_tasks() {
    let (tx, mut rx) = unbounded_channel();
    let mut hc = HealthChecker::new(tx);
    let (port, accepted) = tcp_server(LO4).await;
    let k = key("web", LO4, port);
    hc.set_targets(vec![target(&k, spec(CheckKind::Tcp, 50, 1, 1))]);
    let ev = next_event(&mut rx, Duration::from_secs(2)).await;
    assert!(ev.healthy);
    drop(hc);
    assert_eq!(timeout(Duration::from_secs(1), rx.recv()).await, Ok(None));
    let n = accepted.load(Ordering::Relaxed);
    sleep(Duration::from_millis(250)).await;
    assert_eq!(accepted.load(Ordering::Relaxed), n);
}
