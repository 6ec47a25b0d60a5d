//! Health checker against real sockets on loopback (SPEC section 6, HC-1 and HC-3).
//!
//! Every test runs on a current-thread runtime, like the control plane, with the probed servers
//! on the same runtime, and in virtual time ([`Clock`]): the runtime's clock is paused and moves
//! only when the test lets it, one millisecond at a time, and between two steps the probes'
//! loopback I/O runs to completion. So probe rates, detection times and timeouts are exact
//! consequences of the intervals (50-100 ms, +-5 % jitter) and thresholds, whatever the load on
//! the machine, and every wait has a deadline in virtual time: a test fails, it never hangs.

use spillway_control::health::{
    CheckKind, CheckSpec, HealthChecker, HealthEvent, ProbeResult, Target, TargetStatus,
};
use spillway_core::addr::Addr;
use spillway_core::model::{BackendKey, Endpoint};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio::time::Instant;

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

/// Yields per virtual millisecond: each lets the runtime poll its I/O driver once without moving
/// the clock (`yield_now`), enough for a probe's whole loopback exchange (connect, accept,
/// request, reply: the kernel completes each within the system call) to finish at one instant.
const SETTLE_YIELDS: usize = 24;

/// Virtual time for one test. The test's runtime starts paused (`start_paused = true`); on its
/// own, tokio would then auto-advance the clock to the next timer whenever the runtime waits,
/// also while a probe's socket I/O is still on its way (a connect would seem to take as long as
/// the probe's timeout). A blocking task held for the life of the `Clock` inhibits that (as the
/// docs of `tokio::time::pause` describe), so the clock moves only in [`Clock::step`]: 1 ms at a
/// time, with the I/O of every instant completed before the next. Waits are bounded in virtual
/// time and fail with a message: nothing here can hang.
struct Clock {
    start: Instant,
    _hold: std::sync::mpsc::Sender<()>,
}

impl Clock {
    fn start() -> Clock {
        let (hold, release) = std::sync::mpsc::channel::<()>();
        // Ends when `hold` is dropped (also when the test panics).
        drop(tokio::task::spawn_blocking(move || release.recv()));
        Clock { start: Instant::now(), _hold: hold }
    }

    /// Virtual time since the clock started.
    fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// One virtual millisecond: timers due fire, then their I/O completes.
    async fn step(&self) {
        tokio::time::advance(Duration::from_millis(1)).await;
        for _ in 0..SETTLE_YIELDS {
            tokio::task::yield_now().await;
        }
    }

    /// Lets `d` of virtual time pass.
    async fn run_for(&self, d: Duration) {
        let end = Instant::now() + d;
        while Instant::now() < end {
            self.step().await;
        }
    }

    /// Steps until `f` returns `Some`, at most `within` of virtual time; panics naming `what`.
    async fn until<T>(&self, within: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let end = Instant::now() + within;
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(Instant::now() < end, "no {what} within {within:?} (virtual time)");
            self.step().await;
        }
    }

    /// The next event, failing the test after `within`.
    async fn event(
        &self,
        rx: &mut UnboundedReceiver<HealthEvent>,
        within: Duration,
    ) -> HealthEvent {
        self.until(within, "health event", || match rx.try_recv() {
            Ok(ev) => Some(ev),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => panic!("event channel closed"),
        })
        .await
    }

    /// Asserts that no event arrives during `d`.
    async fn no_event(&self, rx: &mut UnboundedReceiver<HealthEvent>, d: Duration) {
        let end = Instant::now() + d;
        loop {
            if let Ok(ev) = rx.try_recv() {
                panic!("unexpected event {ev:?} at {:?}", self.elapsed());
            }
            if Instant::now() >= end {
                return;
            }
            self.step().await;
        }
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

/// The fewest probes of one target with interval `interval_ms` that can start within `d`, and
/// the most, from the moment its task starts (HC-4: the first at the next slot, within 105 % of
/// an interval, then one a slot, 90 % to 110 % of an interval apart; each deadline rounded up
/// to the next millisecond).
fn probes_within(interval_ms: u64, d: Duration) -> (u64, u64) {
    let d = u64::try_from(d.as_millis()).unwrap();
    let (short, long) = (interval_ms * 90 / 100, interval_ms * 110 / 100 + 1);
    (1 + d.saturating_sub(interval_ms * 105 / 100 + 1) / long, 1 + d / short)
}

/// HC-1 (TCP) and HC-3: a listening port turns healthy after exactly `healthy_threshold`
/// consecutive successes, not before; the event comes once.
#[tokio::test(start_paused = true)]
async fn hc_1_hc_3_tcp_listening_turns_healthy_after_threshold() {
    let clock = Clock::start();
    let (tx, mut rx) = unbounded_channel();
    let mut hc = HealthChecker::new(tx);
    let (port, accepted) = tcp_server(LO4).await;
    let k = key("web", LO4, port);
    hc.set_targets(vec![target(&k, spec(CheckKind::Tcp, 100, 3, 2))]);

    // HC-3: unhealthy before the first probe.
    assert_eq!(hc.verdict(&k), Some(false));
    let st = status_of(&hc, &k);
    assert_eq!((st.last_result, st.probes.total()), (None, 0));

    let ev = clock.event(&mut rx, Duration::from_secs(1)).await;
    let healthy_after = clock.elapsed();
    assert_eq!(ev, HealthEvent { key: k.clone(), healthy: true });
    let st = status_of(&hc, &k);
    // Turned healthy on the third success, not before.
    assert_eq!(st.probes.get(ProbeResult::Success), 3, "{st:?}");
    assert_eq!(st.consecutive_ok, 3);
    assert!(st.healthy && st.last_result == Some(ProbeResult::Success));
    assert!(st.last_latency.is_some() && st.latency_count == 3);
    assert_eq!(accepted.load(Ordering::Relaxed), 3);
    // First probe at the next slot on the wall clock (HC-4: within 105 ms), then two slots
    // later (90 to 110 ms each): 180 ms to 105 + 2 x 110 ms.
    eprintln!("tcp: healthy after {healthy_after:?}");
    assert!(
        (Duration::from_millis(180)..=Duration::from_millis(325)).contains(&healthy_after),
        "{healthy_after:?}"
    );

    // Exactly one event per change: staying healthy sends nothing more, and probing goes on at
    // its interval: 3 or 4 more probes in 400 ms.
    clock.no_event(&mut rx, Duration::from_millis(400)).await;
    let n = status_of(&hc, &k).probes.get(ProbeResult::Success);
    assert!((6..=7).contains(&n), "{n} probes");
}

/// HC-3 and HC-1 (TCP): a closed port stays unhealthy, with `Refused` as last result.
#[tokio::test(start_paused = true)]
async fn hc_3_tcp_closed_port_stays_unhealthy_refused() {
    let clock = Clock::start();
    let (tx, mut rx) = unbounded_channel();
    let mut hc = HealthChecker::new(tx);
    let port = closed_tcp_port(LO4).await;
    let k = key("web", LO4, port);
    hc.set_targets(vec![target(&k, spec(CheckKind::Tcp, 50, 2, 2))]);
    let d = Duration::from_millis(500);
    clock.no_event(&mut rx, d).await;
    let st = status_of(&hc, &k);
    assert!(!st.healthy);
    assert_eq!(hc.verdict(&k), Some(false));
    assert_eq!(st.last_result, Some(ProbeResult::Refused));
    // Every probe of the 500 ms was refused, at the check's rate.
    let (least, most) = probes_within(50, d);
    let refused = st.probes.get(ProbeResult::Refused);
    assert!((least..=most).contains(&refused), "{refused} not in {least}..={most}: {st:?}");
    assert_eq!(refused, st.probes.total());
    assert_eq!(u64::from(st.consecutive_fail), st.probes.total());
}

/// HC-1 over IPv6, and `check.port` overriding the endpoint's port; a target without any port
/// reports `Error` on every probe.
#[tokio::test(start_paused = true)]
async fn hc_1_tcp_ipv6_check_port_and_missing_port() {
    let clock = Clock::start();
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
    let ev = clock.event(&mut rx, Duration::from_millis(60)).await;
    assert_eq!(ev, HealthEvent { key: with_check_port.clone(), healthy: true });
    clock.run_for(Duration::from_millis(200)).await;
    let st = status_of(&hc, &no_port);
    assert!(!st.healthy);
    assert_eq!(st.last_result, Some(ProbeResult::Error));
    let (least, most) = probes_within(50, clock.elapsed());
    let errors = st.probes.get(ProbeResult::Error);
    assert!((least..=most).contains(&errors), "{errors} not in {least}..={most}: {st:?}");
    assert_eq!(errors, st.probes.total());
}

/// HC-1 (HTTP): 200 turns healthy, then 500 turns unhealthy after `unhealthy_threshold`
/// failures, within `interval × unhealthy_threshold + interval` (no margin: virtual time).
#[tokio::test(start_paused = true)]
async fn hc_1_http_status_drives_verdict_and_detection_time() {
    let clock = Clock::start();
    let (tx, mut rx) = unbounded_channel();
    let mut hc = HealthChecker::new(tx);
    let srv = http_server(200).await;
    let k = key("api", LO4, srv.port);
    let interval = Duration::from_millis(100);
    let unhealthy_threshold = 3;
    hc.set_targets(vec![target(&k, spec(http(200), 100, 2, unhealthy_threshold))]);

    let ev = clock.event(&mut rx, Duration::from_secs(1)).await;
    assert_eq!(ev, HealthEvent { key: k.clone(), healthy: true });
    let req = srv.last_request.lock().unwrap().clone();
    assert!(req.starts_with("GET /healthz HTTP/1.1\r\n"), "{req}");
    assert!(req.contains(&format!("\r\nHost: 127.0.0.1:{}\r\n", srv.port)), "{req}");
    assert!(req.contains("\r\nConnection: close\r\n"), "{req}");

    clock.no_event(&mut rx, Duration::from_millis(250)).await;
    srv.status.store(500, Ordering::Relaxed);
    let switched = clock.elapsed();
    let bound = interval * (unhealthy_threshold + 1);
    let ev = clock.event(&mut rx, bound).await;
    let detection = clock.elapsed() - switched;
    assert_eq!(ev, HealthEvent { key: k.clone(), healthy: false });
    eprintln!("http: 500 detected after {detection:?} (bound {bound:?})");
    assert!(detection <= bound, "{detection:?}");
    // And not before `unhealthy_threshold` failures: at least two intervals (-5 %).
    assert!(detection >= interval * (unhealthy_threshold - 1) * 95 / 100, "{detection:?}");
    let st = status_of(&hc, &k);
    assert_eq!(st.last_result, Some(ProbeResult::BadStatus(500)));
    assert_eq!(st.consecutive_fail, unhealthy_threshold, "{st:?}");
    assert_eq!(st.probes.get(ProbeResult::BadStatus(0)), u64::from(unhealthy_threshold));
    assert_eq!(srv.requests.load(Ordering::Relaxed), st.probes.total());
    assert!(st.probes.total() >= 2 + u64::from(unhealthy_threshold));

    // Exactly one event for the change; back to 200 gives exactly one more.
    clock.no_event(&mut rx, Duration::from_millis(250)).await;
    srv.status.store(200, Ordering::Relaxed);
    let ev = clock.event(&mut rx, Duration::from_secs(1)).await;
    assert_eq!(ev, HealthEvent { key: k.clone(), healthy: true });
    clock.no_event(&mut rx, Duration::from_millis(250)).await;
}

/// HC-1 (HTTP): a reply that is not HTTP is `BadReply`.
#[tokio::test(start_paused = true)]
async fn hc_1_http_garbage_reply_is_bad_reply() {
    let clock = Clock::start();
    let l = TcpListener::bind(SocketAddr::new(LO4, 0)).await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let _ = s.write_all(b"SSH-2.0-OpenSSH_9.6\r\n").await;
                // Read the request before closing: closing on unread data would reset the
                // connection, and the probe could see the reset instead of the reply.
                let mut sink = [0u8; 1024];
                while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {}
            });
        }
    });
    let (tx, mut rx) = unbounded_channel();
    let mut hc = HealthChecker::new(tx);
    let k = key("api", LO4, port);
    let mut sp = spec(http(200), 50, 1, 2);
    sp.initial_healthy = true;
    hc.set_targets(vec![target(&k, sp)]);
    let ev = clock.event(&mut rx, Duration::from_secs(1)).await;
    assert_eq!(ev, HealthEvent { key: k.clone(), healthy: false });
    let st = status_of(&hc, &k);
    assert_eq!(st.last_result, Some(ProbeResult::BadReply));
    assert_eq!((st.probes.get(ProbeResult::BadReply), st.probes.total()), (2, 2), "{st:?}");
}

/// HC-1 (UDP): an echo server is healthy when the reply contains `expect`, unhealthy with
/// `BadReply` when it does not; a closed UDP port is `Refused` (ICMP port unreachable).
#[tokio::test(start_paused = true)]
async fn hc_1_udp_request_reply() {
    let clock = Clock::start();
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
        events.push(clock.event(&mut rx, Duration::from_secs(1)).await);
    }
    let mut expected = vec![
        HealthEvent { key: good.clone(), healthy: true },
        HealthEvent { key: good6.clone(), healthy: true },
        HealthEvent { key: wrong.clone(), healthy: false },
    ];
    events.sort_by(|a, b| a.key.cmp(&b.key));
    expected.sort_by(|a, b| a.key.cmp(&b.key));
    assert_eq!(events, expected);
    clock.no_event(&mut rx, Duration::from_millis(300)).await;
    assert_eq!(status_of(&hc, &wrong).last_result, Some(ProbeResult::BadReply));
    let st = status_of(&hc, &refused);
    assert!(!st.healthy);
    assert_eq!(st.last_result, Some(ProbeResult::Refused), "{st:?}");
    assert_eq!(st.probes.get(ProbeResult::Refused), st.probes.total(), "{st:?}");
}

/// A hung backend (accepts, never answers HTTP) with a 500 ms timeout does not delay a healthy
/// target probed every 50 ms.
#[tokio::test(start_paused = true)]
async fn hung_backend_does_not_delay_others() {
    let clock = Clock::start();
    let (tx, _rx) = unbounded_channel();
    let mut hc = HealthChecker::new(tx);
    let hung = key("slow", LO4, hung_server().await);
    let (fast_port, _) = tcp_server(LO4).await;
    let fast = key("fast", LO4, fast_port);
    let mut hung_spec = spec(http(200), 100, 1, 1);
    hung_spec.initial_healthy = true;
    hc.set_targets(vec![target(&hung, hung_spec), target(&fast, spec(CheckKind::Tcp, 50, 1, 1))]);

    clock.run_for(Duration::from_millis(300)).await;
    let before = status_of(&hc, &fast).probes.total();
    let window = Duration::from_millis(1500);
    clock.run_for(window).await;
    let fast_st = status_of(&hc, &fast);
    let hung_st = status_of(&hc, &hung);
    let grew = fast_st.probes.total() - before;
    eprintln!(
        "hung: fast target ran {grew} probes in {window:?}; hung target: {:?} timeouts",
        hung_st.probes.get(ProbeResult::Timeout)
    );
    // At its own rate (every 47.5 to 52.5 ms, deadlines rounded up to the millisecond), far
    // above the 3 a 500 ms stall would allow.
    let (least, most) = (window.as_millis() / 54, window.as_millis() / 47 + 1);
    let grew_ms = u128::from(grew);
    assert!((least..=most).contains(&grew_ms), "{grew} probes in {window:?}: not {least}..={most}");
    assert!(fast_st.healthy && fast_st.probes.get(ProbeResult::Success) == fast_st.probes.total());
    // The hung target times out once per 500 ms (its probes never overlap): its first probe
    // starts within 100 ms, so exactly 3 timed out by 1.8 s.
    assert!(!hung_st.healthy);
    assert_eq!(hung_st.last_result, Some(ProbeResult::Timeout));
    let timeouts = hung_st.probes.get(ProbeResult::Timeout);
    assert_eq!(timeouts, 3, "timeouts in 1.8 s: {hung_st:?}");
    assert_eq!(timeouts, hung_st.probes.total());
    let lat = hung_st.last_latency.unwrap();
    assert!(lat >= Duration::from_millis(500) && lat <= Duration::from_millis(502), "{lat:?}");
}

/// HC-3 `initial: healthy`: a never-probed backend starts healthy, and a failing one leaves it
/// after `unhealthy_threshold` failures.
#[tokio::test(start_paused = true)]
async fn hc_3_initial_healthy_starts_healthy() {
    let clock = Clock::start();
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
    let ev = clock.event(&mut rx, Duration::from_secs(1)).await;
    assert_eq!(ev, HealthEvent { key: down.clone(), healthy: false });
    assert_eq!(status_of(&hc, &down).probes.get(ProbeResult::Refused), 2);
    clock.no_event(&mut rx, Duration::from_millis(300)).await;
    assert_eq!(hc.verdict(&up), Some(true));
}

/// Reconcile: an unchanged target keeps its state (verdict and counters, even when its check
/// comes in a new, equal `Arc`); a removed one is no longer probed and sends no event; a new
/// one starts from HC-3; a changed check keeps the verdict and restarts the counters.
#[tokio::test(start_paused = true)]
async fn reconcile_keeps_unchanged_and_drops_removed() {
    let clock = Clock::start();
    let (tx, mut rx) = unbounded_channel();
    let mut hc = HealthChecker::new(tx);
    let (kept_port, _) = tcp_server(LO4).await;
    let removed_srv = http_server(200).await;
    let kept = key("web", LO4, kept_port);
    let removed = key("api", LO4, removed_srv.port);
    let kept_spec = || spec(CheckKind::Tcp, 50, 2, 2);
    hc.set_targets(vec![target(&kept, kept_spec()), target(&removed, spec(http(200), 50, 1, 1))]);
    let mut evs = vec![
        clock.event(&mut rx, Duration::from_secs(1)).await,
        clock.event(&mut rx, Duration::from_secs(1)).await,
    ];
    evs.sort_by(|a, b| a.key.cmp(&b.key));
    assert_eq!(
        evs,
        vec![
            HealthEvent { key: removed.clone(), healthy: true },
            HealthEvent { key: kept.clone(), healthy: true },
        ]
    );
    clock.run_for(Duration::from_millis(100)).await;
    let before = status_of(&hc, &kept);

    // Reload: `kept` with an equal check in a new Arc, `removed` gone, `new` added.
    let (new_port, _) = tcp_server(LO4).await;
    let new = key("web", LO4, new_port);
    hc.set_targets(vec![target(&kept, kept_spec()), target(&new, kept_spec())]);
    let after = status_of(&hc, &kept);
    assert!(after.healthy);
    assert_eq!(after.probes.total(), before.probes.total());
    assert_eq!(after.consecutive_ok, before.consecutive_ok);
    assert_eq!(hc.verdict(&removed), None);
    assert_eq!(hc.verdict(&new), Some(false));
    assert_eq!(hc.len(), 2);
    assert!(hc.status().iter().all(|s| s.key != removed));

    // The removed target is no longer probed, and its failure sends nothing.
    clock.run_for(Duration::from_millis(100)).await;
    let requests = removed_srv.requests.load(Ordering::Relaxed);
    removed_srv.status.store(503, Ordering::Relaxed);
    let ev = clock.event(&mut rx, Duration::from_secs(1)).await;
    assert_eq!(ev, HealthEvent { key: new.clone(), healthy: true });
    clock.no_event(&mut rx, Duration::from_millis(300)).await;
    assert_eq!(removed_srv.requests.load(Ordering::Relaxed), requests);
    let counters_kept = status_of(&hc, &kept).probes.total();
    assert!(counters_kept > before.probes.total());

    // A changed check (other interval) on the same key: verdict kept, counters restart.
    let mut changed = kept_spec();
    changed.interval = Duration::from_millis(60);
    hc.set_targets(vec![target(&kept, changed), target(&new, kept_spec())]);
    let st = status_of(&hc, &kept);
    assert!(st.healthy);
    assert_eq!(st.probes.total(), 0, "{st:?}");
    clock.no_event(&mut rx, Duration::from_millis(300)).await;
    let (least, most) = probes_within(60, Duration::from_millis(300));
    let n = status_of(&hc, &kept).probes.total();
    assert!((least..=most).contains(&n), "{n} not in {least}..={most}");
}

/// Dropping the checker stops every task: their event senders go, so the channel closes, and
/// the backend sees no more probes.
#[tokio::test(start_paused = true)]
async fn drop_stops_all_tasks() {
    let clock = Clock::start();
    let (tx, mut rx) = unbounded_channel();
    let mut hc = HealthChecker::new(tx);
    let (port, accepted) = tcp_server(LO4).await;
    let k = key("web", LO4, port);
    hc.set_targets(vec![target(&k, spec(CheckKind::Tcp, 50, 1, 1))]);
    let ev = clock.event(&mut rx, Duration::from_secs(1)).await;
    assert!(ev.healthy);
    drop(hc);
    clock
        .until(Duration::from_secs(1), "closed event channel", || match rx.try_recv() {
            Err(TryRecvError::Disconnected) => Some(()),
            Err(TryRecvError::Empty) => None,
            Ok(ev) => panic!("event after drop: {ev:?}"),
        })
        .await;
    let n = accepted.load(Ordering::Relaxed);
    clock.run_for(Duration::from_millis(250)).await;
    assert_eq!(accepted.load(Ordering::Relaxed), n);
}

/// An HTTP server whose n-th request (from 0) is answered with `pattern[n % len]`: a backend
/// that flaps in a fixed rhythm of probes, whatever the probes' jitter.
async fn flapping_server(pattern: &'static [u16]) -> (u16, Arc<AtomicU64>) {
    let l = TcpListener::bind(SocketAddr::new(LO4, 0)).await.unwrap();
    let port = l.local_addr().unwrap().port();
    let requests = Arc::new(AtomicU64::new(0));
    let rq = Arc::clone(&requests);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let rq = Arc::clone(&rq);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let n = rq.fetch_add(1, Ordering::Relaxed) as usize;
                let code = pattern[n % pattern.len()];
                let reply = format!(
                    "HTTP/1.1 {code} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                );
                let _ = s.write_all(reply.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    (port, requests)
}

/// HC-3 under flapping: a backend that changes its answer at every probe for a virtual
/// minute changes the verdict only as often as the thresholds allow. Alternating answers
/// with thresholds of 2: never (after turning unhealthy once it never has 2 successes in a
/// row); with thresholds of 1: at every probe; two good then two bad with thresholds of 2:
/// once every two probes at most.
#[tokio::test(start_paused = true)]
async fn hc_3_a_flapping_backend_changes_verdict_only_as_the_thresholds_allow() {
    const ALTERNATE: &[u16] = &[200, 500];
    const PAIRS: &[u16] = &[200, 200, 500, 500];
    let clock = Clock::start();
    let (tx, mut rx) = unbounded_channel();
    let mut hc = HealthChecker::new(tx);
    let mut cases = Vec::new();
    for (pattern, thresholds) in [(ALTERNATE, 2), (ALTERNATE, 1), (PAIRS, 2)] {
        let (port, requests) = flapping_server(pattern).await;
        let k = key(&format!("flap-{}-{thresholds}", pattern.len()), LO4, port);
        cases.push((k, requests, pattern, thresholds));
    }
    hc.set_targets(
        cases.iter().map(|(k, _, _, t)| target(k, spec(http(200), 50, *t, *t))).collect(),
    );
    clock.run_for(Duration::from_secs(60)).await;
    let mut changes: std::collections::HashMap<BackendKey, u64> = Default::default();
    while let Ok(ev) = rx.try_recv() {
        *changes.entry(ev.key).or_default() += 1;
    }
    for (k, requests, pattern, thresholds) in &cases {
        let probes = requests.load(Ordering::Relaxed);
        let n = changes.get(k).copied().unwrap_or(0);
        eprintln!("flapping {k}: {probes} probes, {n} verdict changes");
        // A minute at 50 ms +-5 %: about 1,200 probes.
        assert!((1100..=1300).contains(&probes), "{k}: {probes} probes");
        match (pattern.len(), thresholds) {
            // Starts unhealthy (HC-3); never two successes in a row.
            (2, 2) => assert_eq!(n, 0, "{k}"),
            // Every answer flips it (the first success turns it healthy).
            (2, 1) => assert!(n + 1 >= probes - 1 && n <= probes, "{k}: {n} of {probes}"),
            // Two in a row each way: a change every two probes, never more.
            _ => assert!(n <= probes / 2 && n + 2 >= probes / 2 - 1, "{k}: {n} of {probes}"),
        }
    }
}

/// HC-4, on the real clock: two checkers (two instances of a fleet) that start 130 ms apart
/// probe the same backend at the same moments, one slot of the wall clock after another, so
/// that their verdicts change together (FS-7). Each accepted connection's time is recorded;
/// they come in pairs a few milliseconds apart (without HC-4, each checker's probes would
/// keep the 130 ms of its start).
#[tokio::test]
async fn hc_4_fs_7_two_instances_probe_a_backend_at_the_same_moments() {
    let l = TcpListener::bind(SocketAddr::new(LO4, 0)).await.unwrap();
    let port = l.local_addr().unwrap().port();
    let times = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let t = Arc::clone(&times);
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            t.lock().unwrap().push(Instant::now());
            drop(s);
        }
    });
    let k = key("web", LO4, port);
    let (tx_a, _rx_a) = unbounded_channel();
    let (tx_b, _rx_b) = unbounded_channel();
    let mut a = HealthChecker::new(tx_a);
    let mut b = HealthChecker::new(tx_b);
    a.set_targets(vec![target(&k, spec(CheckKind::Tcp, 200, 1, 1))]);
    tokio::time::sleep(Duration::from_millis(130)).await;
    let both_from = Instant::now();
    b.set_targets(vec![target(&k, spec(CheckKind::Tcp, 200, 1, 1))]);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    drop((a, b));
    let seen: Vec<Instant> =
        times.lock().unwrap().iter().copied().filter(|t| *t >= both_from).collect();
    // Group the probes closer than 40 ms (slots are at least 180 ms apart).
    let mut groups: Vec<Vec<Instant>> = Vec::new();
    for t in seen {
        match groups.last_mut() {
            Some(g) if t - *g.last().unwrap() < Duration::from_millis(40) => g.push(t),
            _ => groups.push(vec![t]),
        }
    }
    let sizes: Vec<usize> = groups.iter().map(Vec::len).collect();
    let spreads: Vec<Duration> = groups.iter().map(|g| *g.last().unwrap() - g[0]).collect();
    eprintln!("probes per slot {sizes:?}, spread {spreads:?}");
    // Six slots or more in 1.5 s; every one probed by both (the last may be cut by the end).
    assert!(groups.len() >= 6, "{sizes:?}");
    assert!(sizes[..sizes.len() - 1].iter().all(|&n| n == 2), "{sizes:?} {spreads:?}");
    assert!(spreads.iter().all(|d| *d < Duration::from_millis(20)), "{spreads:?}");
}
