//! A worker's end of fleet sync (`spillway_dataplane::sync`), without DPDK: the entries at risk
//! its scans find after a table change, the peers' entries it stores, what a bulk scan sends on,
//! and the pace a full queue sets.

#[path = "../../benches/fixture.rs"]
mod fixture;

use fixture::{a, model, service};
use spillway_core::conntrack::Shard;
use spillway_core::counters::WorkerCounters;
use spillway_core::decide::decide;
use spillway_core::flow::{proto, tcp_flags, PacketInfo};
use spillway_core::model::{Encap, Model, RuleProtocol};
use spillway_core::peer::SyncLink;
use spillway_core::peer::{self, Installed, PeerEntry, PeerIndex};
use spillway_core::snapshot::Snapshot;
use spillway_core::state::PolicyState;
use spillway_core::time::Time;
use spillway_dataplane::sync::{WorkerSync, MIN_QUEUE};

const NOW: Time = Time(5_000);

fn web(backends: usize) -> Model {
    let l3 = RuleProtocol::L3Default;
    let addrs = (1..=backends).map(|i| a(&format!("198.18.1.{i}")));
    model("r", [service("web", Encap::Ipip, l3, &["198.18.0.100"], "g", addrs)])
}

fn syn(i: u32) -> PacketInfo {
    let [_, b, c, d] = i.to_be_bytes();
    PacketInfo {
        src: spillway_core::addr::Addr::v4(198, 18, 100 + b % 50, c),
        dst: a("198.18.0.100"),
        proto: proto::TCP,
        sport: 10_000 + u16::from(d),
        dport: 80,
        tcp_flags: tcp_flags::SYN,
        ..PacketInfo::default()
    }
}

/// An instance's table with `n` connections opened under four backends, and the snapshots
/// before and after a fifth is added.
fn opened(n: u32, capacity: usize) -> (Shard, Snapshot, Snapshot) {
    let mut st = PolicyState::new(true);
    st.apply_model(web(4), Time::ZERO).unwrap();
    let before = st.snapshot(NOW);
    let mut shard = Shard::with_capacity(capacity);
    for i in 0..n {
        decide(&syn(i), &before, &mut shard, NOW);
    }
    st.apply_model(web(5), NOW).unwrap();
    let after = st.snapshot(NOW);
    (shard, before, after)
}

/// Runs the worker's sync steps until it has nothing left to do, taking what it sends.
fn run(
    sync: &mut WorkerSync,
    link: &SyncLink,
    shard: &mut Shard,
    snap: &Snapshot,
) -> Vec<PeerEntry> {
    let c = WorkerCounters::new();
    let mut out = Vec::new();
    while sync.has_work() {
        sync.step(shard, snap, NOW, &c.sync);
        while let Some(e) = link.outbound.pop() {
            out.push(e);
        }
    }
    out
}

#[test]
fn a_new_snapshot_scans_the_table_for_the_entries_at_risk() {
    let (mut shard, before, after) = opened(2_000, 4_096);
    let link = SyncLink::new(256);
    let mut sync = WorkerSync::new(link.clone());
    let c = WorkerCounters::new();
    // The first snapshot a worker sees starts nothing.
    sync.check(&before);
    assert!(!sync.has_work());
    sync.check(&after);
    let mut sent = Vec::new();
    while sync.has_work() {
        sync.step(&mut shard, &after, NOW, &c.sync);
        while let Some(e) = link.outbound.pop() {
            sent.push(e);
        }
    }
    // Exactly the connections a fresh instance with the new table sends elsewhere.
    let mut fresh = Shard::with_capacity(4_096);
    let mut want: Vec<(u16, String)> = (0..2_000)
        .filter_map(|i| {
            let p = syn(i);
            let was =
                decide(&PacketInfo { tcp_flags: tcp_flags::ACK, ..p }, &after, &mut shard, NOW);
            let now = decide(&p, &after, &mut fresh, NOW);
            (was.backend() != now.backend()).then(|| (p.sport, p.src.to_string()))
        })
        .collect();
    let mut got: Vec<(u16, String)> =
        sent.iter().map(|e| (e.key.sport, e.key.src.to_string())).collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    assert!(got.len() > 200, "{} at risk", got.len());
    assert_eq!(c.sync.exported.get(), got.len() as u64);
    assert_eq!((c.sync.scans.get(), c.sync.scanned_generation.get()), (1, after.generation));
    assert_eq!(c.sync.queue_full.get(), 0);
}

#[test]
fn peers_entries_are_stored_and_sent_on_only_by_a_bulk_scan() {
    // Instance A's entries at risk, in B's terms.
    let (mut a_shard, before, after) = opened(2_000, 4_096);
    let link_a = SyncLink::new(4_096);
    let mut a_sync = WorkerSync::new(link_a.clone());
    a_sync.check(&before);
    a_sync.check(&after);
    let shared = run(&mut a_sync, &link_a, &mut a_shard, &after);
    assert!(!shared.is_empty());
    let index = PeerIndex::of(&after);
    let link = SyncLink::new(4_096);
    for e in &shared {
        link.inbound.push(peer::localize(e, &index, &after, NOW).unwrap()).unwrap();
    }
    let mut b_shard = Shard::with_capacity(4_096);
    let mut sync = WorkerSync::new(link.clone());
    sync.check(&after);
    let c = WorkerCounters::new();
    while sync.has_work() {
        sync.step(&mut b_shard, &after, NOW, &c.sync);
    }
    let new =
        c.sync.installed[Installed::ALL.iter().position(|&i| i == Installed::New).unwrap()].get();
    assert_eq!((new, b_shard.len()), (shared.len() as u64, shared.len()));
    // A refresh sends this instance's own entries at risk: none (the peers' are their owner's).
    link.requests.ask_refresh();
    sync.check(&after);
    assert!(run(&mut sync, &link, &mut b_shard, &after).is_empty());
    // A bulk answer (a peer joins) sends them on: their owner may be gone.
    link.requests.ask_bulk();
    sync.check(&after);
    let mut bulk = run(&mut sync, &link, &mut b_shard, &after);
    let mut want = shared.clone();
    let order = |e: &PeerEntry| (e.key.src.0, e.key.sport);
    bulk.sort_by_key(order);
    want.sort_by_key(order);
    assert_eq!(bulk.len(), want.len());
    for (b, w) in bulk.iter().zip(&want) {
        assert_eq!((b.key, b.service, b.backend, b.flags), (w.key, w.service, w.backend, w.flags));
    }
}

#[test]
fn a_scan_waits_for_room_and_never_drops_an_entry() {
    let (mut shard, before, after) = opened(20_000, 32_768);
    let link = SyncLink::new(MIN_QUEUE);
    let mut sync = WorkerSync::new(link.clone());
    let c = WorkerCounters::new();
    sync.check(&before);
    sync.check(&after);
    // Nobody takes what it sends: it fills the queue no further than it has room, and waits.
    for _ in 0..10_000 {
        sync.step(&mut shard, &after, NOW, &c.sync);
    }
    assert!(sync.has_work(), "a 2,048-bucket scan cannot end with a queue of {MIN_QUEUE}");
    assert!(link.outbound.len() <= MIN_QUEUE);
    assert_eq!(c.sync.queue_full.get(), 0);
    // Taken as it goes: it ends, and nothing was lost.
    let mut sent = link.outbound.len();
    while link.outbound.pop().is_some() {}
    while sync.has_work() {
        sync.step(&mut shard, &after, NOW, &c.sync);
        while link.outbound.pop().is_some() {
            sent += 1;
        }
    }
    assert_eq!(c.sync.exported.get(), sent as u64);
    assert_eq!(c.sync.queue_full.get(), 0);
    assert!(sent > 2_000, "{sent} at risk of 20,000");
}
