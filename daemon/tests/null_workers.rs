//! Queue setup with two workers on `net_null`: each worker owns its own RX/TX queue pair,
//! both receive traffic, and the per-worker counters agree with the port's hardware counters.
//! Also checks that SIGINT stops the daemon cleanly and that live counters are printed.

mod common;

use std::time::Duration;

use common::*;

#[test]
#[ignore = "needs root: DPDK EAL, network namespaces, tap devices (scripts/test.sh runs it)"]
fn two_workers_each_get_packets_and_counters_agree() {
    require_root("two_workers_each_get_packets_and_counters_agree");
    let t = tag("spwnull");
    let _runtime_dir = RuntimeDir(t.clone());
    let config = TempFile::new(
        &t,
        &format!(
            "dataplane:\n  eal_args: {}\n  ports: [net_null0]\n  workers: 2\n  \
             rx_queue_size: 512\n  tx_queue_size: 512\n",
            eal_args(&t, "0@0,1@0,2@0", "net_null0")
        ),
    );
    let mut spw = Spillway::start(None, &config, &["--stats-interval", "0.3"]);
    spw.wait_for("spillway: running 2 worker(s) on lcore(s) 1, 2", Duration::from_secs(60));
    spw.wait_for("stats t=", Duration::from_secs(10));
    spw.wait_for("stats total mpps=", Duration::from_secs(10));
    // Until each worker's stats line shows packets received.
    let mut received = [false; 2];
    spw.wait_for_line("no stats line with rx > 0 from each worker", Duration::from_secs(10), |l| {
        let field = |name: &str| {
            l.split_whitespace()
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')?.parse::<u64>().ok())
        };
        if let (true, Some(w @ 0..=1), Some(rx)) =
            (l.starts_with("stats t="), field("worker"), field("rx"))
        {
            received[w as usize] |= rx > 0;
        }
        received == [true; 2]
    });
    spw.signal("INT");
    let (ok, stdout, stderr) = spw.finish(Duration::from_secs(30));
    assert!(ok, "spillway failed after SIGINT: {stdout:?}\n{stderr}");
    assert!(stderr.contains("rx_queues=2"), "{stderr}");

    let workers = finals(&stdout, "worker");
    assert_eq!(workers.len(), 2, "{stdout:?}");
    let (mut rx, mut tx) = (0, 0);
    for (id, w) in &workers {
        assert!(num(w, "rx") > 0, "worker {id} received nothing: {w:?}");
        // Every received packet was transmitted or dropped: the TX buffers were flushed.
        assert_eq!(num(w, "rx"), num(w, "tx") + num(w, "dropped"), "worker {id}: {w:?}");
        rx += num(w, "rx");
        tx += num(w, "tx");
    }
    let ports = finals(&stdout, "port");
    assert_eq!(ports.len(), 1, "{stdout:?}");
    let p = &ports[0].1;
    assert_eq!(num(p, "ipackets"), rx, "{stdout:?}");
    assert_eq!(num(p, "opackets"), tx, "{stdout:?}");
    assert_eq!(num(p, "rx_nombuf"), 0, "{stdout:?}");
}
