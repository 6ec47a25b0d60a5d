//! `fleet.table_file` without DPDK: the entries of a table the decision core filled, exported
//! as a clean stop does, written and read back as a start does, stored into a fresh table;
//! the same connections reach the same backends under the same configuration, and a file from
//! another configuration is refused.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use spillway_control::config::Config;
use spillway_control::controller::Controller;
use spillway_control::sync::{self, TableFileError};
use spillway_core::addr::Addr;
use spillway_core::conntrack::Shard;
use spillway_core::decide::{decide, ForwardReason, Verdict, SYNCED_EPOCH};
use spillway_core::flow::{proto, tcp_flags, PacketInfo};
use spillway_core::model::Endpoint;
use spillway_core::snapshot::Snapshot;
use spillway_core::time::Time;

/// One TCP service, four backends, no health checks (every backend counts healthy).
const FOUR: &str = "dataplane:
  ports: [net_null0]
  node:
    ipv4: 198.18.0.11/16
topology:
  region: r1
  zones: [{name: zone-a}]
services:
  - name: web
    forwarding_rules:
      - {vip: 198.19.200.1, protocol: TCP, ports: [80]}
    backend_service:
      backends:
        - {group: a, zone: zone-a, endpoints: [198.18.1.1, 198.18.1.2, 198.18.1.3, 198.18.1.4]}
";

const FLOWS: u16 = 400;

fn snapshot(dir: &Path, text: &str) -> Arc<Snapshot> {
    let path = dir.join("spillway.yaml");
    std::fs::write(&path, text).expect("write");
    let config = Config::from_yaml(&path, text).expect("valid");
    Controller::start(&path, config, Instant::now()).expect("controller").snapshot()
}

fn packet(sport: u16, flags: u8) -> PacketInfo {
    let client: Addr = "198.18.20.9".parse::<IpAddr>().expect("address").into();
    PacketInfo {
        src: client,
        dst: "198.19.200.1".parse::<IpAddr>().expect("address").into(),
        proto: proto::TCP,
        sport,
        dport: 80,
        tcp_flags: flags,
        ..PacketInfo::default()
    }
}

/// The backend a packet went to, and why.
fn sent_to(
    p: &PacketInfo,
    snap: &Snapshot,
    shard: &mut Shard,
    now: Time,
) -> (Endpoint, ForwardReason) {
    match decide(p, snap, shard, now).verdict {
        Verdict::Forward { backend, reason } => {
            (snap.backend(backend).expect("a live slot").endpoint, reason)
        }
        v => panic!("dropped: {v:?}"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_restart_keeps_every_connection_on_its_backend() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("conntrack.table");

    // The first run: FLOWS connections, spread over two workers.
    let before = snapshot(dir.path(), FOUR);
    let mut tables = [Shard::with_capacity(4096), Shard::with_capacity(4096)];
    let t0 = Time::from_secs(100);
    let mut pinned = Vec::new();
    for sport in 1000..1000 + FLOWS {
        let shard = &mut tables[usize::from(sport % 2)];
        let (backend, reason) = sent_to(&packet(sport, tcp_flags::SYN), &before, shard, t0);
        assert_eq!(reason, ForwardReason::NewConnection);
        pinned.push((sport, backend));
    }
    let backends: std::collections::BTreeSet<_> = pinned.iter().map(|p| p.1).collect();
    assert_eq!(backends.len(), 4, "the flows cover every backend");

    // The clean stop, 5 s after the last packet.
    let stop = t0 + std::time::Duration::from_secs(5);
    let entries = sync::export_tables(&tables, &before, stop);
    assert_eq!(entries.len(), usize::from(FLOWS));
    assert!(entries.iter().all(|e| e.idle_ms == 5000));
    let fingerprint = sync::table_file_fingerprint(&before);
    let written_ms = 1_000_000;
    let n = sync::save_table(&file, fingerprint, written_ms, entries).expect("saved");
    assert_eq!(n, u64::from(FLOWS));

    // The next start: the same configuration, a fresh controller (new slots), 2 s later, with
    // a clock that starts at zero again.
    let after = snapshot(dir.path(), FOUR);
    let expected = sync::table_file_fingerprint(&after);
    assert_eq!(expected, fingerprint, "the same configuration, the same fingerprint");
    let mut read = sync::load_table(&file, expected, 2 * 4096).expect("read back");
    read.age(written_ms + 2000);
    assert!(read.entries.iter().all(|e| e.idle_ms == 7000), "the time on disk is idle time");
    let mut fresh = [Shard::with_capacity(4096), Shard::with_capacity(4096)];
    let start = Time::from_millis(50);
    let r = sync::restore_tables(&read, &mut fresh, &after, start);
    assert_eq!(r.restored, u64::from(FLOWS), "{}", r.refusals());
    assert_eq!(r.refusals(), "none");
    for shard in &fresh {
        assert_eq!(shard.len(), usize::from(FLOWS), "every worker holds every entry");
        let web = after.services().next().expect("web");
        for (_, e) in shard.iter(start) {
            assert_eq!(e.value.epoch, web.epoch, "the instance's own entry, not a peer's");
            assert_ne!(e.value.epoch, SYNCED_EPOCH);
            // The idle time is the one written, not clipped to the new clock.
            assert_eq!(e.idle_ms, 7000);
        }
    }

    // Every connection continues on its backend, whichever worker its packets reach.
    for &(sport, backend) in &pinned {
        for shard in &mut fresh {
            let got = sent_to(&packet(sport, tcp_flags::ACK), &after, shard, start);
            assert_eq!(got, (backend, ForwardReason::ConntrackHit), "port {sport}");
        }
    }

    // The same file read long after: every entry idle past the idle timeout, none restored.
    let mut late = sync::load_table(&file, expected, 2 * 4096).expect("read back");
    let timeout = after.services().next().expect("web").idle_timeout_ms;
    late.age(written_ms + timeout);
    let mut empty = [Shard::with_capacity(4096)];
    let r = sync::restore_tables(&late, &mut empty, &after, start);
    assert_eq!((r.restored, r.expired), (0, u64::from(FLOWS)));
    assert!(empty[0].is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn a_file_from_another_configuration_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("conntrack.table");
    let before = snapshot(dir.path(), FOUR);
    let mut table = Shard::with_capacity(1024);
    for sport in 1000..1100 {
        sent_to(&packet(sport, tcp_flags::SYN), &before, &mut table, Time::ZERO);
    }
    let entries = sync::export_tables([&table], &before, Time::ZERO);
    sync::save_table(&file, sync::table_file_fingerprint(&before), 0, entries).expect("saved");

    // A fifth backend: other consistent-hash tables.
    let five = FOUR.replace("198.18.1.4]", "198.18.1.4, 198.18.1.5]");
    let after = snapshot(dir.path(), &five);
    let expected = sync::table_file_fingerprint(&after);
    match sync::load_table(&file, expected, 1024) {
        Err(e @ TableFileError::FingerprintMismatch { .. }) => {
            assert!(e.to_string().contains("another configuration"), "{e}");
        }
        other => panic!("not refused: {other:?}"),
    }
    // Too many entries for the tables is refused too, before anything is read.
    let same = sync::table_file_fingerprint(&before);
    assert!(matches!(
        sync::load_table(&file, same, 10),
        Err(TableFileError::TooManyEntries { count: 100, max: 10 })
    ));
}
