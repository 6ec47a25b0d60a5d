//! NX-2 over the whole packet path: a burst of arbitrary frames through `process_burst`
//! (classify, answer, decide, rewrite, encapsulate) on in-memory buffers must never panic,
//! whatever the bytes; a buffer shared with another owner is dropped as `shared_buffer` and
//! left untouched.
//!
//! Input: one byte whose bit `i` marks frame `i` (of the first 8) as a shared buffer, then up
//! to `MAX_BURST` (64) frames, each preceded by its length (2 bytes, big-endian). Corpus:
//! `fuzz/make_corpus.py`.

#![no_main]

use std::sync::OnceLock;

use crossbeam_queue::ArrayQueue;
use libfuzzer_sys::fuzz_target;
use spillway_core::conntrack::Shard;
use spillway_core::counters::{PathDrop, Reason, WorkerCounters};
use spillway_core::model::{Encap, RuleProtocol};
use spillway_core::snapshot::Snapshot;
use spillway_core::time::Time;
use spillway_dataplane::neighbour::{NeighbourEvent, NeighbourTable, NextHopCache};
use spillway_dataplane::node::Node;
use spillway_dataplane::path::{process_burst, Outcome, PacketBuf, PathCtx, MAX_BURST};
use spillway_dataplane::vecbuf::VecBuf;

/// The model set-up the path's tests and benchmarks share.
#[path = "../../benches/fixture.rs"]
mod fixture;

/// Three services (IPIP and GUE over IPv4, IP6IP6), all protocols, so that most frames reach
/// the decision and the rewrite; every backend's MAC resolved.
fn snapshot() -> &'static (Snapshot, Node, NeighbourTable) {
    static S: OnceLock<(Snapshot, Node, NeighbourTable)> = OnceLock::new();
    S.get_or_init(|| {
        let backends =
            |prefix: &'static str| (1..=4).map(move |i| fixture::a(&format!("{prefix}{i}")));
        let l3 = RuleProtocol::L3Default;
        let services = [
            fixture::service(
                "ipip",
                Encap::Ipip,
                l3,
                &["198.18.0.100"],
                "g",
                backends("198.18.1."),
            ),
            fixture::service(
                "gue",
                Encap::Gue { port: 6080 },
                l3,
                &["198.18.0.101"],
                "g",
                backends("198.18.2."),
            ),
            fixture::service("v6", Encap::Ipip, l3, &["fd00::100"], "g", backends("fd00::1:")),
        ];
        let neighbours = services
            .iter()
            .flat_map(|s| s.groups[0].endpoints.iter().map(|e| (e.addr, [2, 0, 0, 0, 9, 9])))
            .collect::<Vec<_>>();
        let snap = fixture::snapshot(fixture::model("", services));
        (snap, fixture::node(true), NeighbourTable::from_pairs(neighbours))
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&shared_bits, mut rest)) = data.split_first() else { return };
    let mut bufs: Vec<VecBuf> = Vec::with_capacity(MAX_BURST);
    while bufs.len() < MAX_BURST && rest.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let mut b = VecBuf::with_frame(&rest[2..2 + len]);
        b.set_shared(bufs.len() < 8 && shared_bits & (1 << bufs.len()) != 0);
        bufs.push(b);
        rest = &rest[2 + len..];
    }
    let before: Vec<Vec<u8>> = bufs.iter().map(|b| b.data().to_vec()).collect();
    let (snap, node, neighbours) = snapshot();
    let mut shard = Shard::with_capacity(1024);
    let mut next_hops = NextHopCache::new();
    next_hops.refresh(snap, neighbours, node);
    let events = ArrayQueue::<NeighbourEvent>::new(64);
    // One set of counters for every input (making one writes several MiB: per-backend and
    // per-zone arrays); each input's checks read what it added.
    static COUNTERS: OnceLock<WorkerCounters> = OnceLock::new();
    let counters = COUNTERS.get_or_init(WorkerCounters::new);
    let reasons_before: Vec<u64> = Reason::all().map(|r| counters.reason(r).get()).collect();
    let answers = |c: &WorkerCounters| {
        c.neighbour_replies.get() + c.echo_replies.get() + c.neighbour_answers_heard.get()
    };
    let answers_before = answers(counters);
    let mut ctx = PathCtx {
        snap,
        shard: &mut shard,
        now: Time(1000),
        node,
        neighbours,
        next_hops: &next_hops,
        events: &events,
        counters,
        // The exception path on for odd-length inputs.
        kernel: data.len() % 2 == 1,
        waiting: spillway_dataplane::path::WaitingSlots::default(),
    };
    let mut out = [Outcome::Consumed; MAX_BURST];
    process_burst(&mut bufs, &mut ctx, &mut out);
    for (i, (b, o)) in bufs.iter().zip(out).enumerate() {
        if !b.is_writable() {
            assert_eq!(o, Outcome::Drop(Reason::Path(PathDrop::SharedBuffer)), "frame {i}");
            assert_eq!(b.data(), &before[i][..], "a shared buffer is never written");
        }
        if let Outcome::Drop(r) = o {
            assert!(
                counters.reason(r).get() > reasons_before[r.index()],
                "frame {i}: {r:?} is counted"
            );
        }
        if o == Outcome::ToKernel {
            assert_eq!(b.data(), &before[i][..], "frame {i}: the kernel gets it unchanged");
        }
    }
    // The worker counts the frames it hands to the kernel (kernel_frames).
    let to_kernel = out[..bufs.len()].iter().filter(|o| **o == Outcome::ToKernel).count() as u64;
    // Every frame is counted exactly once: a forward or drop reason, or an answer sent, or an
    // answer heard, or a frame for the kernel (the identity docs/operations.md gives; no TX
    // here, so no tx_full).
    let reasons: u64 = Reason::all().map(|r| counters.reason(r).get()).sum::<u64>()
        - reasons_before.iter().sum::<u64>();
    let accounted = reasons + answers(counters) - answers_before + to_kernel;
    assert_eq!(accounted, bufs.len() as u64, "{out:?}");
});
