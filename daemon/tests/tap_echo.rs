//! End to end through a real kernel tap: frames sent from a kernel AF_PACKET socket into a
//! `net_tap` port come back, byte for byte, after io-forward by a `spillway` worker.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

/// Sends frames with a private ethertype and unique payloads into the tap interface and waits
/// until every one comes back byte for byte (the demo uses the same script).
const TAP_TRAFFIC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/tap_traffic.py");

#[test]
#[ignore = "needs root: DPDK EAL, network namespaces, tap devices (scripts/test.sh runs it)"]
fn tap_frames_are_echoed_back_byte_for_byte() {
    require_root("tap_frames_are_echoed_back_byte_for_byte");
    const FRAMES: u64 = 50;
    let t = tag("spwtap");
    let _runtime_dir = RuntimeDir(t.clone());
    let ns = Netns::new(&t);
    let iface = t.clone(); // at most 11 characters, below IFNAMSIZ
    let config = TempFile::new(
        &t,
        &format!(
            "dataplane:\n  eal_args: {}\n  ports: [net_tap0]\n  workers: 1\n  \
             rx_queue_size: 256\n  tx_queue_size: 256\n  mempool_size: 2047\n",
            eal_args(&t, "0@0,1@0", &format!("net_tap0,iface={iface}"))
        ),
    );
    let mut spw = Spillway::start(Some(&ns), &config, &["--stats-interval", "0"]);
    spw.wait_for("spillway: running 1 worker", Duration::from_secs(60));

    let out = Command::new("ip")
        .args(["netns", "exec", &ns.name, "python3", TAP_TRAFFIC, &iface, "--count"])
        .arg(FRAMES.to_string())
        .output()
        .expect("run python3");
    let py = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "not every frame came back: {py}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(py.contains(&format!("sent {FRAMES} echoed {FRAMES}/{FRAMES}")), "{py}");

    spw.signal("TERM");
    let (ok, stdout, stderr) = spw.finish(Duration::from_secs(30));
    assert!(ok, "spillway failed after SIGTERM: {stdout:?}\n{stderr}");
    let workers = finals(&stdout, "worker");
    assert_eq!(workers.len(), 1, "{stdout:?}");
    let w = &workers[0].1;
    // The kernel adds its own frames (IPv6 ND/MLD), so at least ours were received and sent.
    assert!(num(w, "rx") >= FRAMES, "{w:?}");
    assert!(num(w, "tx") >= FRAMES, "{w:?}");
    assert_eq!(num(w, "rx"), num(w, "tx") + num(w, "dropped"), "{w:?}");
    let ports = finals(&stdout, "port");
    assert_eq!(ports.len(), 1, "{stdout:?}");
    assert_eq!(ports[0].0, "net_tap0");
    assert_eq!(num(&ports[0].1, "ipackets"), num(w, "rx"), "{stdout:?}");
    assert_eq!(num(&ports[0].1, "opackets"), num(w, "tx"), "{stdout:?}");
}
