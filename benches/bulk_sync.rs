//! A bulk sync at production scale (FS-5), in one process over loopback: the answering instance
//! holds 1M connections in one worker's table (capacity 2M, as configured for that many), a
//! fifth backend is added so that about a fifth of them are at risk, and a second instance
//! starts and asks for them. Both instances run the real parts: the sync thread (sockets,
//! sealing, sessions, tickets, pacing), each worker's end of sync (`WorkerSync`) between
//! bursts, and, on the answering worker, the packet path at full load on the same table when
//! traffic is on. The figures: how long the joiner's bulk sync took, the datagrams and bytes
//! sent, the entries at risk and how many the joiner stored (any difference is a loss), the
//! kernel drops and sequence gaps it saw, and the packets the answering worker forwarded
//! meanwhile.
//!
//! `cargo bench -p spillway --bench bulk_sync` (SPILLWAY_BULK_FLOWS=100000 for a smaller table).
//! Each worker spins like a real one: run it where two cores are free.

#[path = "fixture.rs"]
mod fixture;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::queue::ArrayQueue;
use fixture::{model, node, path_ctx, service, tcp_frame};
use spillway_control::sync::{spawn, Key, KeyRing, SyncSettings, SyncShared};
use spillway_core::addr::Addr;
use spillway_core::conntrack::{key_hash, Shard};
use spillway_core::counters::WorkerCounters;
use spillway_core::model::{Encap, Model, RuleProtocol};
use spillway_core::publish::{Publisher, SnapshotReader};
use spillway_core::snapshot::BackendRef;
use spillway_core::state::PolicyState;
use spillway_core::sync::SyncLink;
use spillway_core::time::Time;
use spillway_dataplane::neighbour::{NeighbourTable, NextHopCache};
use spillway_dataplane::path::{process_burst, Outcome, MAX_BURST};
use spillway_dataplane::sync::WorkerSync;
use spillway_dataplane::vecbuf::VecBuf;

/// The table's capacity: twice the connections, as an operator sizes it.
const CAPACITY_PER_FLOW: usize = 2;
/// The sync queue between a worker and the sync thread (`fleet.sync.queue_size`'s default).
const QUEUE: usize = 4096;
/// `fleet.sync.copy_share`'s default, as the daemon applies it.
const COPY_SHARE: f64 = 0.5;
const KEY: [u8; 32] = [9; 32];

fn web(backends: u8) -> Model {
    let addrs = (1..=backends).map(|i| Addr::v4(198, 18, 1, i));
    model("r", [service("web", Encap::Ipip, RuleProtocol::Tcp, &["198.18.0.100"], "g", addrs)])
}

/// The frame of connection `i` with TCP `flags`: sources from 198.18.10.0 on, ports from 1024.
fn frame(i: usize, flags: u8) -> Vec<u8> {
    let (hi, lo) = (i / 60_000, i % 60_000);
    tcp_frame([198, 18, 10 + (hi / 250) as u8, (hi % 250) as u8], 1024 + lo as u16, flags)
}

fn port(p: u16) -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], p))
}

fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The parts the packet path needs besides the table: the node, every backend's MAC known.
struct PathParts {
    node: spillway_dataplane::node::Node,
    neighbours: NeighbourTable,
    next_hops: NextHopCache,
    events: ArrayQueue<spillway_dataplane::neighbour::NeighbourEvent>,
    counters: WorkerCounters,
}

impl PathParts {
    fn new(snap: &spillway_core::snapshot::Snapshot) -> PathParts {
        let node = node(false);
        let neighbours = NeighbourTable::from_pairs(
            (1..=5).map(|i| (Addr::v4(198, 18, 1, i), [2, 0, 0, 0, 1, i])),
        );
        let mut next_hops = NextHopCache::new();
        next_hops.refresh(snap, &neighbours, &node);
        PathParts {
            node,
            neighbours,
            next_hops,
            events: ArrayQueue::new(64),
            counters: WorkerCounters::new(),
        }
    }

    /// `frames` through the packet path at `now`, in bursts; every one must be forwarded.
    fn forward(
        &self,
        frames: &[Vec<u8>],
        bufs: &mut [VecBuf],
        snap: &spillway_core::snapshot::Snapshot,
        shard: &mut Shard,
        now: Time,
    ) {
        let mut out = [Outcome::Consumed; MAX_BURST];
        let mut ctx = path_ctx(
            snap,
            shard,
            &self.node,
            &self.neighbours,
            &self.next_hops,
            &self.events,
            &self.counters,
        );
        ctx.now = now;
        for chunk in frames.chunks(MAX_BURST) {
            for (buf, f) in bufs.iter_mut().zip(chunk) {
                buf.load(f);
            }
            process_burst(&mut bufs[..chunk.len()], &mut ctx, &mut out);
            assert!(out[..chunk.len()].iter().all(|o| *o == Outcome::Transmit), "{out:?}");
        }
    }
}

/// One worker: its table, its end of sync, and (on the answering instance) traffic over the
/// table's own connections. Returns the table and the packets it forwarded when stopped.
fn worker(
    mut shard: Shard,
    link: SyncLink,
    mut snapshots: SnapshotReader,
    traffic: Option<Vec<Vec<u8>>>,
    origin: Instant,
    forwarded: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<Shard> {
    std::thread::spawn(move || {
        let parts = PathParts::new(snapshots.load());
        let mut sync = WorkerSync::new(link);
        let counters = WorkerCounters::new();
        let mut bufs: Vec<VecBuf> = (0..MAX_BURST).map(|_| VecBuf::new()).collect();
        let mut next = 0usize;
        while !stop.load(Ordering::Relaxed) {
            let snap = snapshots.load();
            let now = Time(origin.elapsed().as_millis() as u64);
            if let Some(frames) = &traffic {
                let burst = &frames[next..(next + MAX_BURST).min(frames.len())];
                parts.forward(burst, &mut bufs, snap, &mut shard, now);
                // The benchmark's own count (one writer), read at the bulk sync's start and end.
                forwarded.fetch_add(burst.len() as u64, Ordering::Relaxed);
                next = (next + MAX_BURST) % frames.len();
            }
            sync.check(snap, shard.bucket_count(), now, &counters.sync);
            if sync.has_work(&shard) {
                sync.step(&mut shard, snap, now, &counters.sync);
            } else if traffic.is_none() {
                std::hint::spin_loop();
            }
        }
        shard
    })
}

struct Figures {
    flows: usize,
    at_risk: usize,
    stored: usize,
    bulk_ms: u64,
    datagrams: u64,
    bytes: u64,
    retries: u64,
    kernel_drops: u64,
    sequence_gaps: u64,
    forwarded_per_sec: f64,
}

fn run(flows: usize, traffic: bool) -> Figures {
    let origin = Instant::now();
    // The answering instance's table: `flows` connections opened under four backends.
    let mut state = PolicyState::new(true);
    state.apply_model(web(4), Time::ZERO).unwrap();
    let before = state.snapshot(Time::ZERO);
    let capacity = flows * CAPACITY_PER_FLOW;
    let mut shard = Shard::with_capacity_advised(capacity, |p, n| {
        spillway_dataplane::dpdk::advise_huge_pages(p, n);
    });
    let syns: Vec<Vec<u8>> = (0..flows).map(|i| frame(i, 0x02)).collect();
    let mut bufs: Vec<VecBuf> = (0..MAX_BURST).map(|_| VecBuf::new()).collect();
    PathParts::new(&before).forward(&syns, &mut bufs, &before, &mut shard, Time::ZERO);
    assert_eq!(shard.len(), flows);
    // A fifth backend: the entries at risk are those a fresh table would send elsewhere.
    state.apply_model(web(5), Time::ZERO).unwrap();
    let after = state.snapshot(Time::ZERO);
    let mut fresh = Shard::with_capacity(capacity);
    let parts = PathParts::new(&after);
    parts.forward(&syns, &mut bufs, &after, &mut fresh, Time::ZERO);
    let at_risk = shard
        .entries_in(0..shard.bucket_count(), Time::ZERO)
        .filter(|(_, e)| {
            let now = fresh.lookup(&e.key, key_hash(&e.key), Time::ZERO);
            let slot = |v: u32| BackendRef::from_u32(v).slot;
            now.map(|(_, n)| slot(n.value.backend)) != Some(slot(e.value.backend))
        })
        .count();
    drop(fresh);
    let acks: Vec<Vec<u8>> = (0..flows).map(|i| frame(i, 0x10)).collect();

    let stop = Arc::new(AtomicBool::new(false));
    let (pa, pb) = (free_port(), free_port());
    let settings = |me: u16, bind: u16, peer: u16, to: u16| SyncSettings {
        instance_id: me,
        bind: vec![port(bind)],
        peers: vec![(peer, port(to))],
        bulk_timeout: Duration::from_secs(120),
        refresh: Duration::from_secs(20),
        epoch: 1_000 * u64::from(me),
        max_entries_per_sec: 1_000_000,
    };
    let keys = || KeyRing::one(Key::from_bytes(KEY));
    let instance = |s: SyncSettings, publisher: &Publisher, link: &SyncLink| -> Arc<SyncShared> {
        let counters: Arc<[WorkerCounters]> = vec![WorkerCounters::new()].into();
        spawn(s, keys(), vec![link.clone()], counters, publisher.reader(), Arc::clone(&stop))
            .unwrap()
            .1
    };
    let publisher_a = Publisher::new(after);
    let link_a = SyncLink::new(QUEUE);
    let forwarded = Arc::new(AtomicU64::new(0));
    let a_worker = worker(
        shard,
        link_a.clone(),
        publisher_a.reader(),
        traffic.then_some(acks),
        origin,
        Arc::clone(&forwarded),
        Arc::clone(&stop),
    );
    let a = instance(settings(1, pa, 2, pb), &publisher_a, &link_a);
    std::thread::sleep(Duration::from_millis(300));

    // The joiner: same configuration, an empty table.
    let mut state_b = PolicyState::new(true);
    state_b.apply_model(web(5), Time::ZERO).unwrap();
    let publisher_b = Publisher::new(state_b.snapshot(Time::ZERO));
    let link_b = SyncLink::new(QUEUE);
    let mut shard_b = Shard::with_capacity(capacity);
    shard_b.set_copy_limit((capacity as f64 * COPY_SHARE) as usize);
    let b_worker = worker(
        shard_b,
        link_b.clone(),
        publisher_b.reader(),
        None,
        origin,
        Arc::new(AtomicU64::new(0)),
        Arc::clone(&stop),
    );
    let sent_before = (
        a.stats.datagrams_sent.load(Ordering::Relaxed),
        a.stats.bytes_sent.load(Ordering::Relaxed),
    );
    let started = Instant::now();
    let forwarded_before = forwarded.load(Ordering::Relaxed);
    let b = instance(settings(2, pb, 1, pa), &publisher_b, &link_b);
    while !b.bulk_done.load(Ordering::Relaxed) {
        assert!(started.elapsed() < Duration::from_secs(150), "the bulk sync never ended");
        std::thread::sleep(Duration::from_millis(5));
    }
    let elapsed = started.elapsed();
    let forwarded = forwarded.load(Ordering::Relaxed) - forwarded_before;
    // Let the joiner's worker store what its queue still holds.
    while !link_b.inbound.is_empty() {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(50));
    let reply = b.reply();
    let (datagrams, bytes) = (
        a.stats.datagrams_sent.load(Ordering::Relaxed) - sent_before.0,
        a.stats.bytes_sent.load(Ordering::Relaxed) - sent_before.1,
    );
    stop.store(true, Ordering::Relaxed);
    a_worker.join().unwrap();
    let shard_b = b_worker.join().unwrap();
    let bulk_ms = reply.bulk_ms.unwrap_or(elapsed.as_millis() as u64);
    Figures {
        flows,
        at_risk,
        stored: shard_b.copies(),
        bulk_ms,
        datagrams,
        bytes,
        retries: reply.bulk_retries,
        kernel_drops: reply.lost.kernel_drops,
        sequence_gaps: reply.lost.sequence_gaps,
        forwarded_per_sec: forwarded as f64 / elapsed.as_secs_f64(),
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken.
    let flows: usize =
        std::env::var("SPILLWAY_BULK_FLOWS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    println!(
        "{:>9} {:>8} {:>8} {:>6} {:>8} {:>10} {:>11} {:>7} {:>12} {:>13} {:>14}",
        "flows",
        "traffic",
        "at_risk",
        "lost",
        "bulk_ms",
        "datagrams",
        "bytes",
        "retries",
        "kernel_drops",
        "sequence_gaps",
        "forwarded_pps"
    );
    for traffic in [false, true] {
        let f = run(flows, traffic);
        println!(
            "{:>9} {:>8} {:>8} {:>6} {:>8} {:>10} {:>11} {:>7} {:>12} {:>13} {:>14.0}",
            f.flows,
            if traffic { "yes" } else { "no" },
            f.at_risk,
            f.at_risk as i64 - f.stored as i64,
            f.bulk_ms,
            f.datagrams,
            f.bytes,
            f.retries,
            f.kernel_drops,
            f.sequence_gaps,
            f.forwarded_per_sec
        );
    }
}
