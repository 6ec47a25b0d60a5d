//! `fleet.table_file` without DPDK: the entries of a table the decision core filled, exported
//! as a clean stop does, written and read back as a start does, stored into a fresh table;
//! the same connections reach the same backends under the same configuration (whatever the
//! health verdicts), a file from another configuration is refused, a file once read is
//! consumed, and a file that is not a private regular file is not read at all.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use spillway_control::config::Config;
use spillway_control::controller::{Controller, Override};
use spillway_control::table_file::{self as sync, TableFileError};
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
    assert!(entries.iter().all(|e| e.age_ms == 5000));
    let fingerprint = before.config_fingerprint;
    let written_ms = 1_000_000;
    let n = sync::save_table(&file, fingerprint, written_ms, entries).expect("saved");
    assert_eq!(n, u64::from(FLOWS));

    // The next start: the same configuration, a fresh controller (new slots), 2 s later, with
    // a clock that starts at zero again.
    let after = snapshot(dir.path(), FOUR);
    let expected = after.config_fingerprint;
    assert_eq!(expected, fingerprint, "the same configuration, the same fingerprint");
    let mut read = sync::load_table(&file, expected, 2 * 4096).expect("read back");
    read.age(written_ms + 2000);
    assert!(read.entries.iter().all(|e| e.age_ms == 7000), "the time on disk is idle time");
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
    sync::save_table(&file, before.config_fingerprint, 0, entries).expect("saved");

    // A fifth backend: other consistent-hash tables.
    let five = FOUR.replace("198.18.1.4]", "198.18.1.4, 198.18.1.5]");
    let after = snapshot(dir.path(), &five);
    let expected = after.config_fingerprint;
    match sync::load_table(&file, expected, 1024) {
        Err(e @ TableFileError::FingerprintMismatch { .. }) => {
            assert!(e.to_string().contains("another configuration"), "{e}");
        }
        other => panic!("not refused: {other:?}"),
    }
    // Too many entries for the tables is refused too, before anything is read.
    let same = before.config_fingerprint;
    assert!(matches!(
        sync::load_table(&file, same, 10),
        Err(TableFileError::TooManyEntries { count: 100, max: 10 })
    ));
}

#[tokio::test(flavor = "current_thread")]
async fn health_verdicts_are_not_part_of_the_fingerprint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = FOUR
        .replace("services:\n", "health_checks:\n  tcp: {type: TCP, port: 80}\nservices:\n")
        .replace("{group: a, zone: zone-a,", "{group: a, zone: zone-a, health_check: tcp,");
    let path = dir.path().join("spillway.yaml");
    std::fs::write(&path, &text).expect("write");
    let config = Config::from_yaml(&path, &text).expect("valid");
    let mut c = Controller::start(&path, config, Instant::now()).expect("controller");
    // No verdict yet: every backend unhealthy (HC-3).
    let unhealthy = c.snapshot();
    assert!(unhealthy.backends.iter().all(|b| !b.healthy));
    for (b, o) in [
        ("198.18.1.1", Override::Healthy),
        ("198.18.1.2", Override::Healthy),
        ("198.18.1.3", Override::Healthy),
        ("198.18.1.4", Override::Unhealthy),
    ] {
        let addr: Addr = b.parse::<IpAddr>().expect("address").into();
        c.set_override(addr, None, Some(o)).expect("a backend");
    }
    let healthy = c.snapshot();
    assert_eq!(healthy.backends.iter().filter(|b| b.healthy).count(), 3);
    assert_ne!(
        spillway_core::sync::tables_fingerprint(&unhealthy),
        spillway_core::sync::tables_fingerprint(&healthy),
        "the tables did change"
    );
    assert_eq!(unhealthy.config_fingerprint, healthy.config_fingerprint);
}

/// A table file of 100 entries under `snap`'s configuration at `file`, as a clean stop writes
/// it.
fn write_one(file: &Path, snap: &Snapshot) {
    let mut table = Shard::with_capacity(1024);
    for sport in 1000..1100 {
        sent_to(&packet(sport, tcp_flags::SYN), snap, &mut table, Time::ZERO);
    }
    sync::save(file, &[table], snap, Time::ZERO);
    assert!(file.exists());
}

#[tokio::test(flavor = "current_thread")]
async fn a_file_is_consumed_once_read_so_a_later_crash_brings_nothing_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("conntrack.table");
    let snap = snapshot(dir.path(), FOUR);
    write_one(&file, &snap);
    // The start after a clean stop: restored, and the file is gone.
    let mut tables = [Shard::with_capacity(1024)];
    sync::restore(&file, &mut tables, &snap, Time::ZERO);
    assert_eq!(tables[0].len(), 100);
    assert!(!file.exists(), "consumed");
    // Killed, started again: nothing to restore.
    let mut again = [Shard::with_capacity(1024)];
    sync::restore(&file, &mut again, &snap, Time::ZERO);
    assert!(again[0].is_empty());
    // A refused file (another configuration) is renamed aside, never read again.
    write_one(&file, &snap);
    let five = snapshot(dir.path(), &FOUR.replace("198.18.1.4]", "198.18.1.4, 198.18.1.5]"));
    let mut other = [Shard::with_capacity(1024)];
    sync::restore(&file, &mut other, &five, Time::ZERO);
    assert!(other[0].is_empty());
    assert!(!file.exists());
    assert!(dir.path().join("conntrack.table.refused").exists());
}

#[tokio::test(flavor = "current_thread")]
async fn only_a_private_regular_file_of_the_daemons_user_is_read() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let snap = snapshot(dir.path(), FOUR);
    let real = dir.path().join("real.table");
    write_one(&real, &snap);
    // A symbolic link to a good file: not followed.
    let link = dir.path().join("link.table");
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    match sync::load_table(&link, snap.config_fingerprint, 1024) {
        Err(e @ TableFileError::NotRegular(_)) => assert!(e.to_string().contains("link"), "{e}"),
        other => panic!("a link was read: {other:?}"),
    }
    // A FIFO: refused at once, without blocking for a writer.
    let fifo = dir.path().join("fifo.table");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let t = Instant::now();
    match sync::load_table(&fifo, snap.config_fingerprint, 1024) {
        Err(e @ TableFileError::NotRegular(_)) => assert!(e.to_string().contains("FIFO"), "{e}"),
        other => panic!("a FIFO was read: {other:?}"),
    }
    assert!(t.elapsed() < std::time::Duration::from_secs(1));
    // Readable by others: refused.
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    assert!(matches!(
        sync::load_table(&real, snap.config_fingerprint, 1024),
        Err(TableFileError::TooOpen(0o644))
    ));
    // None of them is consumed by a start: they were never read.
    let mut t = [Shard::with_capacity(1024)];
    for p in [&link, &fifo, &real] {
        sync::restore(p, &mut t, &snap, Time::ZERO);
        assert!(std::fs::symlink_metadata(p).is_ok(), "{} left in place", p.display());
    }
    assert!(t[0].is_empty());
}
