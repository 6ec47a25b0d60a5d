//! A worker's end of fleet sync (`spillway_dataplane::sync`), without DPDK: the entries at risk
//! its passes find after a table change, however often snapshots change meanwhile; the removals
//! of shared entries that left, changed or stopped being at risk (FS-8); the peers' copies it
//! stores and drops; its bulk answers (FS-5), counted, one per ticket, ended even while
//! snapshots change; and the pace a full queue sets.

#[path = "../../benches/fixture.rs"]
mod fixture;

use fixture::{a, model, service};
use spillway_core::conntrack::Shard;
use spillway_core::counters::WorkerCounters;
use spillway_core::decide::decide;
use spillway_core::flow::{proto, tcp_flags, PacketInfo};
use spillway_core::model::{Encap, Model, RuleProtocol};
use spillway_core::snapshot::Snapshot;
use spillway_core::state::PolicyState;
use spillway_core::sync::{
    self, Inbound, Installed, Outbound, PeerEntry, PeerIndex, Removed, SyncLink, Ticket,
};
use spillway_core::time::Time;
use spillway_dataplane::sync::{WorkerSync, MIN_QUEUE, SCAN_BUCKETS_PER_POLL};

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

fn ack(i: u32) -> PacketInfo {
    PacketInfo { tcp_flags: tcp_flags::ACK, ..syn(i) }
}

/// An instance's table with `n` connections opened under four backends, its policy state, and
/// the snapshots before and after a fifth is added.
fn opened(n: u32, capacity: usize) -> (Shard, PolicyState, Snapshot, Snapshot) {
    let mut st = PolicyState::new(true);
    st.apply_model(web(4), Time::ZERO).unwrap();
    let before = st.snapshot(NOW);
    let mut shard = Shard::with_capacity(capacity);
    for i in 0..n {
        decide(&syn(i), &before, &mut shard, NOW);
    }
    st.apply_model(web(5), NOW).unwrap();
    let after = st.snapshot(NOW);
    (shard, st, before, after)
}

/// The connections of `0..n` that a fresh instance with `snap` would send elsewhere than
/// `shard` does: (source, port), sorted.
fn expected_at_risk(n: u32, shard: &mut Shard, snap: &Snapshot) -> Vec<(String, u16)> {
    let mut fresh = Shard::with_capacity(shard.capacity());
    let mut want: Vec<(String, u16)> = (0..n)
        .filter_map(|i| {
            let was = decide(&ack(i), snap, shard, NOW);
            let now = decide(&syn(i), snap, &mut fresh, NOW);
            (was.backend() != now.backend()).then(|| (syn(i).src.to_string(), syn(i).sport))
        })
        .collect();
    want.sort();
    want
}

fn keys(entries: &[PeerEntry]) -> Vec<(String, u16)> {
    let mut got: Vec<(String, u16)> =
        entries.iter().map(|e| (e.key.src.to_string(), e.key.sport)).collect();
    got.sort();
    got
}

/// What one step handed over, sorted by kind.
#[derive(Default, Debug)]
struct Taken {
    shares: Vec<PeerEntry>,
    removes: Vec<PeerEntry>,
    answers: Vec<(Ticket, PeerEntry)>,
    ends: Vec<(Ticket, u64)>,
}

fn drain(link: &SyncLink, into: &mut Taken) {
    while let Some(o) = link.outbound.pop() {
        match o {
            Outbound::Share(e) => into.shares.push(e),
            Outbound::Remove(e) => into.removes.push(e),
            Outbound::Answer(t, e) => into.answers.push((t, e)),
            Outbound::AnswerEnd(t, n) => into.ends.push((t, n)),
        }
    }
}

/// Runs the worker's sync steps until it has nothing left to do, taking what it hands over.
fn run(sync: &mut WorkerSync, link: &SyncLink, shard: &mut Shard, snap: &Snapshot) -> Taken {
    run_counted(sync, link, shard, snap, &WorkerCounters::new())
}

/// [`run`], counting into `c`.
fn run_counted(
    sync: &mut WorkerSync,
    link: &SyncLink,
    shard: &mut Shard,
    snap: &Snapshot,
    c: &WorkerCounters,
) -> Taken {
    let mut out = Taken::default();
    while sync.has_work(shard) {
        sync.step(shard, snap, NOW, &c.sync);
        drain(link, &mut out);
    }
    out
}

#[test]
fn fs_1_a_new_snapshot_scans_the_table_for_the_entries_at_risk() {
    let (mut shard, mut st, before, after) = opened(2_000, 4_096);
    let link = SyncLink::new(256);
    let mut sync = WorkerSync::new(link.clone());
    let c = WorkerCounters::new();
    // The first snapshot a worker sees starts nothing.
    sync.check(&before, shard.bucket_count(), Time::ZERO, &c.sync);
    assert!(!sync.has_work(&shard));
    sync.check(&after, shard.bucket_count(), Time::ZERO, &c.sync);
    let mut sent = Taken::default();
    while sync.has_work(&shard) {
        sync.step(&mut shard, &after, NOW, &c.sync);
        drain(&link, &mut sent);
    }
    // Exactly the connections a fresh instance with the new table sends elsewhere.
    let want = expected_at_risk(2_000, &mut shard, &after);
    assert_eq!(keys(&sent.shares), want);
    assert!(want.len() > 200, "{} at risk", want.len());
    assert!(sent.removes.is_empty() && sent.answers.is_empty());
    assert_eq!(c.sync.exported.get(), want.len() as u64);
    assert_eq!((c.sync.scans.get(), c.sync.scanned_generation.get()), (1, after.generation));
    assert_eq!(c.sync.queue_full.get(), 0);
    // Each of them is now marked shared (its departure will be reported).
    let shared = shard.iter(NOW).filter(|(_, e)| e.value.is_shared()).count();
    assert_eq!(shared, want.len());
    // A new snapshot with the same tables: nothing changed, nothing sent again (a service whose
    // snapshots change every second costs the peers nothing)...
    let again = st.snapshot(NOW);
    sync.check(&again, shard.bucket_count(), Time::ZERO, &c.sync);
    let out = run_counted(&mut sync, &link, &mut shard, &again, &c);
    assert!(out.shares.is_empty() && out.removes.is_empty(), "{out:?}");
    // ...and a refresh sends every entry at risk again, so that the peers' copies last.
    link.requests.ask_refresh();
    sync.check(&again, shard.bucket_count(), Time::ZERO, &c.sync);
    let out = run_counted(&mut sync, &link, &mut shard, &again, &c);
    assert_eq!(keys(&out.shares), want);
}

#[test]
fn fs_1_snapshots_that_change_faster_than_a_pass_never_hide_the_last_buckets() {
    // A table of 16,384 buckets: a pass is 8,192 polls. A new snapshot every 1,000 polls
    // (an eighth of a pass), as advanced load balancing or a flapping health check makes them.
    let (mut shard, mut st, before, _) = opened(60_000, 1 << 18);
    let buckets = shard.bucket_count();
    let link = SyncLink::new(4_096);
    let mut sync = WorkerSync::new(link.clone());
    let c = WorkerCounters::new();
    sync.check(&before, buckets, Time::ZERO, &c.sync);
    let mut snap = st.snapshot(NOW);
    sync.check(&snap, buckets, Time::ZERO, &c.sync);
    let mut sent = Taken::default();
    let polls = buckets / SCAN_BUCKETS_PER_POLL;
    for poll in 0..2 * polls {
        if poll % 1_000 == 999 {
            // Same tables, a new snapshot: the kind of change that restarted a scan at 0.
            snap = st.snapshot(NOW);
            sync.check(&snap, buckets, Time::ZERO, &c.sync);
        }
        sync.step(&mut shard, &snap, NOW, &c.sync);
        drain(&link, &mut sent);
    }
    // Every entry at risk went, the ones in the last buckets too, within one pass's polls of
    // the change, although no pass could finish meanwhile.
    let want = expected_at_risk(60_000, &mut shard, &snap);
    let got: std::collections::BTreeSet<_> = keys(&sent.shares).into_iter().collect();
    let missing: Vec<_> = want.iter().filter(|k| !got.contains(k)).collect();
    assert!(missing.is_empty(), "{} of {} at risk never sent", missing.len(), want.len());
    assert!(want.len() > 5_000, "{} at risk", want.len());
}

#[test]
fn fs_8_a_shared_entry_that_is_replaced_or_no_longer_at_risk_is_removed_from_the_peers() {
    let (mut shard, mut st, before, after) = opened(2_000, 4_096);
    let link = SyncLink::new(4_096);
    let mut sync = WorkerSync::new(link.clone());
    let c = WorkerCounters::new();
    let buckets = shard.bucket_count();
    sync.check(&before, buckets, Time::ZERO, &c.sync);
    sync.check(&after, buckets, Time::ZERO, &c.sync);
    let shared = run(&mut sync, &link, &mut shard, &after).shares;
    assert!(shared.len() > 100);
    // A reused tuple: the connection of the first shared entry ends, and a new one opens from
    // the same port (a SYN replaces the entry, with the table's current pick, CT-2).
    let first = shared[0];
    let i = (0..2_000).find(|&i| syn(i).sport == first.key.sport && syn(i).src == first.key.src);
    let i = i.expect("the connection");
    decide(&syn(i), &after, &mut shard, NOW);
    let out = run(&mut sync, &link, &mut shard, &after);
    assert_eq!(keys(&out.removes), keys(&[first]), "the peers are told at once");
    assert_eq!(out.removes[0].backend, first.backend, "naming the backend they hold");
    assert_eq!(c.sync.queue_full.get(), 0);
    // The tables go back (b5 removed at once): every other shared entry is the table's pick
    // again; the next pass removes them all.
    st.apply_model(web(4), NOW).unwrap();
    let back = st.snapshot(NOW);
    sync.check(&back, buckets, Time::ZERO, &c.sync);
    let out = run(&mut sync, &link, &mut shard, &back);
    assert!(out.shares.is_empty());
    assert_eq!(keys(&out.removes), keys(&shared[1..]));
    assert_eq!(shard.iter(NOW).filter(|(_, e)| e.value.is_shared()).count(), 0);
}

#[test]
fn fs_2_peers_copies_are_stored_dropped_by_removals_and_sent_on_only_in_bulk_answers() {
    // Instance A's entries at risk, in B's terms.
    let (mut a_shard, _, before, after) = opened(2_000, 4_096);
    let link_a = SyncLink::new(4_096);
    let mut a_sync = WorkerSync::new(link_a.clone());
    let ca = WorkerCounters::new();
    a_sync.check(&before, a_shard.bucket_count(), Time::ZERO, &ca.sync);
    a_sync.check(&after, a_shard.bucket_count(), Time::ZERO, &ca.sync);
    let shared = run(&mut a_sync, &link_a, &mut a_shard, &after).shares;
    assert!(!shared.is_empty());
    let index = PeerIndex::of(&after);
    let link = SyncLink::new(4_096);
    for e in &shared {
        link.inbound.push(Inbound::Store(sync::localize(e, &index, &after, NOW).unwrap())).unwrap();
    }
    let mut b_shard = Shard::with_capacity(4_096);
    let mut sync = WorkerSync::new(link.clone());
    let c = WorkerCounters::new();
    sync.check(&after, b_shard.bucket_count(), Time::ZERO, &c.sync);
    while sync.has_work(&b_shard) {
        sync.step(&mut b_shard, &after, NOW, &c.sync);
    }
    let new = c.sync.installed[Installed::New.index()].get();
    assert_eq!(
        (new, b_shard.len(), b_shard.copies()),
        (shared.len() as u64, shared.len(), shared.len())
    );
    // A refresh sends this instance's own entries at risk: none (the copies are their owner's).
    link.requests.ask_refresh();
    sync.check(&after, b_shard.bucket_count(), Time::ZERO, &c.sync);
    let out = run(&mut sync, &link, &mut b_shard, &after);
    assert!(out.shares.is_empty() && out.removes.is_empty());
    // A bulk answer (a peer joins) sends them on: their owner may be gone.
    let ticket = Ticket { peer: 3, request: 42, attempt: 0 };
    link.bulk.push(ticket).unwrap();
    sync.check(&after, b_shard.bucket_count(), Time::ZERO, &c.sync);
    let out = run(&mut sync, &link, &mut b_shard, &after);
    assert_eq!(out.ends, [(ticket, shared.len() as u64)], "one end, with the count");
    let answered: Vec<PeerEntry> = out
        .answers
        .iter()
        .map(|(t, e)| {
            assert_eq!(*t, ticket);
            *e
        })
        .collect();
    assert_eq!(keys(&answered), keys(&shared));
    // A removal drops the copy it names; one naming another backend drops nothing.
    let first = shared[0];
    let mut other = first;
    other.backend = shared.iter().find(|e| e.backend != first.backend).unwrap().backend;
    for e in [other, first] {
        link.inbound.push(Inbound::Remove(sync::localize_removal(&e, &index).unwrap())).unwrap();
    }
    run_counted(&mut sync, &link, &mut b_shard, &after, &c);
    assert_eq!(c.sync.removed[Removed::NotHeld.index()].get(), 1);
    assert_eq!(c.sync.removed[Removed::Dropped.index()].get(), 1);
    assert_eq!(b_shard.len(), shared.len() - 1);
}

#[test]
fn fs_5_a_bulk_answer_is_one_pass_per_ticket_and_ends_while_snapshots_change() {
    let (mut shard, mut st, before, after) = opened(20_000, 65_536);
    let buckets = shard.bucket_count();
    let link = SyncLink::new(4_096);
    let mut sync = WorkerSync::new(link.clone());
    let c = WorkerCounters::new();
    sync.check(&before, buckets, Time::ZERO, &c.sync);
    sync.check(&after, buckets, Time::ZERO, &c.sync);
    let at_risk = run(&mut sync, &link, &mut shard, &after).shares;
    // The ticket, asked three times (the asker sends its request again until answered):
    // one pass.
    let ticket = Ticket { peer: 7, request: 1, attempt: 0 };
    let mut snap = after;
    let mut out = Taken::default();
    let mut polls = 0;
    for _ in 0..3 {
        link.bulk.push(ticket).unwrap();
    }
    sync.check(&snap, buckets, Time::ZERO, &c.sync);
    while out.ends.is_empty() {
        polls += 1;
        if polls % 500 == 0 {
            // A new snapshot (same tables) every 500 polls, a pass being 2,048: the answer
            // still ends, within two passes.
            snap = st.snapshot(NOW);
            sync.check(&snap, buckets, Time::ZERO, &c.sync);
        }
        sync.step(&mut shard, &snap, NOW, &c.sync);
        drain(&link, &mut out);
        assert!(polls <= 2 * buckets / SCAN_BUCKETS_PER_POLL + 1, "the answer did not end");
    }
    assert_eq!(out.ends.len(), 1, "one answer for the repeated ticket");
    let (t, count) = out.ends[0];
    assert_eq!(t, ticket);
    assert_eq!(count, out.answers.len() as u64, "its count is what it sent");
    let answered: std::collections::BTreeSet<_> =
        keys(&out.answers.iter().map(|a| a.1).collect::<Vec<_>>()).into_iter().collect();
    assert!(keys(&at_risk).iter().all(|k| answered.contains(k)), "every entry at risk answered");
    // A retry of that worker's part is a new pass; a ticket of another peer too, side by side.
    let retry = Ticket { attempt: 1, ..ticket };
    let other = Ticket { peer: 8, request: 9, attempt: 0 };
    link.bulk.push(retry).unwrap();
    link.bulk.push(other).unwrap();
    sync.check(&snap, buckets, Time::ZERO, &c.sync);
    let out = run(&mut sync, &link, &mut shard, &snap);
    let ends: std::collections::BTreeSet<_> = out.ends.iter().map(|e| e.0).collect();
    assert_eq!(ends, [retry, other].into_iter().collect());
    assert!(out.ends.iter().all(|e| e.1 == at_risk.len() as u64), "{:?}", out.ends);
    let _ = st;
}

#[test]
fn a_scan_waits_for_room_and_never_drops_an_entry() {
    let (mut shard, _, before, after) = opened(20_000, 32_768);
    let link = SyncLink::new(MIN_QUEUE);
    let mut sync = WorkerSync::new(link.clone());
    let c = WorkerCounters::new();
    sync.check(&before, shard.bucket_count(), Time::ZERO, &c.sync);
    sync.check(&after, shard.bucket_count(), Time::ZERO, &c.sync);
    // Nobody takes what it sends: it fills the queue no further than it has room, and waits.
    for _ in 0..10_000 {
        sync.step(&mut shard, &after, NOW, &c.sync);
    }
    assert!(sync.has_work(&shard), "a 2,048-bucket pass cannot end with a queue of {MIN_QUEUE}");
    assert!(link.outbound.len() <= MIN_QUEUE);
    assert_eq!(c.sync.queue_full.get(), 0);
    // Taken as it goes: it ends, and nothing was lost.
    let mut sent = link.outbound.len();
    while link.outbound.pop().is_some() {}
    while sync.has_work(&shard) {
        sync.step(&mut shard, &after, NOW, &c.sync);
        while link.outbound.pop().is_some() {
            sent += 1;
        }
    }
    assert_eq!(c.sync.exported.get(), sent as u64);
    assert_eq!(c.sync.queue_full.get(), 0);
    assert!(sent > 2_000, "{sent} at risk of 20,000");
}
