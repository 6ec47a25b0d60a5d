//! Under systemd (`Type=notify`, `WatchdogSec`): `spillway` says READY=1 once its workers
//! poll, feeds the watchdog (WATCHDOG=1 every half period) while they do, and says STOPPING=1
//! when it stops. The test plays systemd: a Unix datagram socket named by `NOTIFY_SOCKET`.
//! (That a stalled worker stops the pings is the unit test in `src/systemd.rs`.)

mod common;

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use common::*;

/// Datagrams received until `until` says stop or `timeout` passes.
fn receive(
    sock: &UnixDatagram,
    timeout: Duration,
    until: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline && !until(&got) {
        if let Ok(n) = sock.recv(&mut buf) {
            got.extend(String::from_utf8_lossy(&buf[..n]).lines().map(str::to_owned));
        }
    }
    got
}

#[test]
#[ignore = "needs root: DPDK EAL, network namespaces, tap devices (scripts/test.sh runs it)"]
fn ready_watchdog_and_stopping_reach_systemd() {
    require_root("ready_watchdog_and_stopping_reach_systemd");
    let t = tag("spwnotify");
    let _runtime_dir = RuntimeDir(t.clone());
    let path = std::env::temp_dir().join(format!("{t}.notify"));
    let _ = std::fs::remove_file(&path);
    let sock = UnixDatagram::bind(&path).expect("bind the notify socket");
    sock.set_read_timeout(Some(Duration::from_millis(50))).expect("timeout");
    // This test binary runs this one test: the environment is the child's to inherit.
    std::env::set_var("NOTIFY_SOCKET", &path);
    std::env::set_var("WATCHDOG_USEC", "200000");
    let config = TempFile::new(
        &t,
        &format!(
            "dataplane:\n  eal_args: {}\n  ports: [net_null0]\n  workers: 1\n",
            eal_args(&t, "0@0,1@0", "net_null0")
        ),
    );
    let mut spw = Spillway::start(None, &config, &["--stats-interval", "0"]);
    let got = receive(&sock, Duration::from_secs(60), |g| g.iter().any(|l| l == "READY=1"));
    assert!(got.iter().any(|l| l == "READY=1"), "no READY=1: {got:?}");
    spw.wait_for("spillway: running 1 worker(s)", Duration::from_secs(5));
    // 100 ms pings for 1.5 s.
    let pings = receive(&sock, Duration::from_millis(1500), |_| false);
    let n = pings.iter().filter(|l| *l == "WATCHDOG=1").count();
    assert!((5..=20).contains(&n), "{n} WATCHDOG=1 in 1.5 s at a 100 ms period: {pings:?}");
    spw.signal("INT");
    let got = receive(&sock, Duration::from_secs(20), |g| g.iter().any(|l| l == "STOPPING=1"));
    assert!(got.iter().any(|l| l == "STOPPING=1"), "no STOPPING=1: {got:?}");
    let (ok, stdout, stderr) = spw.finish(Duration::from_secs(30));
    assert!(ok, "spillway failed: {stdout:?}\n{stderr}");
    assert!(stderr.contains("systemd watchdog on"), "{stderr}");
    let _ = std::fs::remove_file(&path);
}
