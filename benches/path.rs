//! The packet path without DPDK I/O: frames already in memory through `path::process`
//! (classify, rule match, conntrack, Maglev, IPIP/GUE encapsulation), one core. This is the
//! per-packet cost the worker adds on top of rx/tx; the whole-pipeline numbers (generator ->
//! ring -> worker -> null) are the performance issue's.
//!
//! The `quic` group is QUIC-LB's (QL-3): established QUIC flows against established UDP ones,
//! and packets of connections that moved (new 4-tuples whose connection ID names the backend)
//! per mode against new UDP flows, and established flows with one packet in ten from a
//! connection that just moved.
//!
//! `cargo bench -p spillway-dataplane --bench path`

mod fixture;
#[path = "../shared/tests/common/quic_issue.rs"]
mod quic_issue;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
// `std::hint::black_box`: criterion's own reads the value back byte by byte (a volatile read),
// which for a classified frame cost more than classifying it.
use crossbeam::queue::ArrayQueue;
use fixture::{model, node, path_ctx, service, snapshot, tcp_frame};
use spillway_core::addr::Addr;
use spillway_core::conntrack::{key_hash, Shard};
use spillway_core::counters::WorkerCounters;
use spillway_core::flow::{tracking_key, FlowKey};
use spillway_core::model::{Encap, RuleProtocol};
use spillway_core::wire::classify::{classify, Frame, FrameKind};
use spillway_dataplane::neighbour::{NeighbourTable, NextHopCache};
use spillway_dataplane::path::{process, process_burst, Outcome, PathCtx, MAX_BURST};
use spillway_dataplane::vecbuf::VecBuf;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// SYNs of `n` distinct flows: sources from 198.18.`third`.0 on, source ports from 1024.
fn syn_frames(n: usize, third: u8) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            tcp_frame(
                [198, 18, third + (i / 60000) as u8, (i % 250) as u8],
                1024 + (i % 60000) as u16,
                0x02,
            )
        })
        .collect()
}

/// `frames` through `process_burst` in bursts of `MAX_BURST` (each loaded into `bufs` first);
/// the time it took.
fn bursts(frames: &[Vec<u8>], bufs: &mut [VecBuf], ctx: &mut PathCtx<'_>) -> Duration {
    let mut out = [Outcome::Consumed; MAX_BURST];
    let start = Instant::now();
    for chunk in frames.chunks(MAX_BURST) {
        for (buf, f) in bufs.iter_mut().zip(chunk) {
            buf.load(f);
        }
        process_burst(&mut bufs[..chunk.len()], ctx, &mut out);
        black_box(&out);
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let backends = || (1..=16).map(|i| Addr::v4(198, 18, 1, i));
    let services =
        [("ipip", Encap::Ipip, "198.18.0.100"), ("gue", Encap::Gue { port: 6080 }, "198.18.0.101")]
            .map(|(name, encap, vip)| {
                service(name, encap, RuleProtocol::Tcp, &[vip], "g", backends())
            });
    let snap = snapshot(model("", services));
    let node = node(false);
    let neighbours =
        NeighbourTable::from_pairs((1..=16).map(|i| (Addr::v4(198, 18, 1, i), [2, 0, 0, 0, 1, i])));
    let events = ArrayQueue::new(16);
    let mut next_hops = NextHopCache::new();
    next_hops.refresh(&snap, &neighbours, &node);
    let counters = WorkerCounters::new();

    // `wire::classify` of a 64-byte TCP frame: the general parser and the fast path (which
    // `classify` tries first), in the same run; and `wire::classify_ip_fast`, what the packet
    // path calls for such a frame (the flow fields and placement, not a whole `Frame`).
    let mut g = c.benchmark_group("classify");
    g.measurement_time(Duration::from_secs(2)).sample_size(20);
    let frames: Vec<Vec<u8>> =
        (0..1024u16).map(|i| tcp_frame([198, 18, 10, 1], 1024 + i, 0x10)).collect();
    g.throughput(Throughput::Elements(frames.len() as u64));
    g.bench_function("general_64B_tcp", |b| {
        b.iter(|| {
            for f in &frames {
                black_box(spillway_core::wire::classify_general(black_box(f)).ok());
            }
        })
    });
    g.bench_function("classify_64B_tcp", |b| {
        b.iter(|| {
            for f in &frames {
                black_box(classify(black_box(f)).ok());
            }
        })
    });
    g.bench_function("classify_ip_64B_tcp", |b| {
        b.iter(|| {
            for f in &frames {
                black_box(spillway_core::wire::classify_ip_fast(black_box(f)));
            }
        })
    });
    g.finish();

    let mut g = c.benchmark_group("path");
    g.measurement_time(Duration::from_secs(3)).sample_size(10);
    // Each size runs twice: frame by frame with `process` on a table in 4 KiB pages (the path
    // before the performance work), and in bursts of `MAX_BURST` with `process_burst` (staged,
    // with prefetch) on a table advised to use transparent huge pages (what the worker does).
    // SPILLWAY_BENCH_FLOWS=1000 limits the run to one size (for profiling: every size's
    // setup inserts all its flows).
    let only: Option<usize> =
        std::env::var("SPILLWAY_BENCH_FLOWS").ok().and_then(|v| v.parse().ok());
    for flows in [1_000usize, 100_000, 1_000_000] {
        if only.is_some_and(|n| n != flows) {
            continue;
        }
        let syns = syn_frames(flows, 10);
        let acks: Vec<Vec<u8>> = syns
            .iter()
            .map(|f| {
                let mut f = f.clone();
                f[47] = 0x10;
                f
            })
            .collect();
        for staged in [false, true] {
            let mut shard = if staged {
                Shard::with_capacity_advised(flows * 2, |p, n| {
                    spillway_dataplane::dpdk::advise_huge_pages(p, n);
                })
            } else {
                Shard::with_capacity(flows * 2)
            };
            let mut ctx =
                path_ctx(&snap, &mut shard, &node, &neighbours, &next_hops, &events, &counters);
            let mut buf = VecBuf::new();
            for f in &syns {
                buf.load(f);
                assert_eq!(process(&mut buf, &mut ctx), Outcome::Transmit);
            }
            let how = if staged { "burst" } else { "single" };
            g.throughput(Throughput::Elements(flows as u64));
            for (what, frames) in [("established_ipip", &acks), ("new_connections", &syns)] {
                g.bench_function(format!("{what}_{flows}_flows_{how}"), |b| {
                    b.iter_batched_ref(
                        || vec![VecBuf::new(); MAX_BURST],
                        |bufs| {
                            if staged {
                                let mut out = [Outcome::Consumed; MAX_BURST];
                                for chunk in frames.chunks(MAX_BURST) {
                                    for (buf, f) in bufs.iter_mut().zip(chunk) {
                                        buf.load(f);
                                    }
                                    process_burst(&mut bufs[..chunk.len()], &mut ctx, &mut out);
                                    black_box(&out);
                                }
                            } else {
                                for f in frames.iter() {
                                    bufs[0].load(f);
                                    black_box(process(&mut bufs[0], &mut ctx));
                                }
                            }
                        },
                        BatchSize::LargeInput,
                    )
                });
                // With `--features phase-clock`: where the burst path's time went.
                let phases = spillway_dataplane::path::phase_clock::take();
                if phases.packets > 0 {
                    println!("{what}_{flows}_flows_{how}: {phases}");
                }
            }
        }
    }

    // New connections that are new to the table: 65,536 SYNs of distinct flows, each inserted
    // into a table with room (256K entries, emptied before each round, outside the timing).
    let fresh = syn_frames(65_536, 20);
    let mut shard = Shard::with_capacity_advised(fresh.len() * 4, |p, n| {
        spillway_dataplane::dpdk::advise_huge_pages(p, n);
    });
    g.throughput(Throughput::Elements(fresh.len() as u64));
    g.bench_function(format!("fresh_syn_{}_flows_burst", fresh.len()), |b| {
        b.iter_custom(|rounds| {
            let mut bufs = vec![VecBuf::new(); MAX_BURST];
            let mut timed = Duration::ZERO;
            for _ in 0..rounds {
                shard.clear();
                let mut ctx =
                    path_ctx(&snap, &mut shard, &node, &neighbours, &next_hops, &events, &counters);
                timed += bursts(&fresh, &mut bufs, &mut ctx);
            }
            timed
        })
    });
    // (Empty when a filter left the benchmark out.)
    assert!(shard.is_empty() || shard.len() == fresh.len(), "every SYN made its entry");

    // New connections into a loaded table larger than the caches (4M entries, 272 MiB): the
    // table is filled to `load` with other keys first, and each round's 65,536 SYNs are
    // removed again after it (outside the timing), so every round inserts at that load.
    let syn_keys: Vec<FlowKey> = fresh
        .iter()
        .map(|f| {
            let Ok(Frame { kind: FrameKind::Ip { info, .. }, .. }) = classify(f) else {
                panic!("a TCP frame");
            };
            let svc = snap.service_for(&info).expect("the frame's service");
            tracking_key(&info, svc.tracking, svc.affinity, svc.symmetric_hashing, svc.id)
        })
        .collect();
    for load in [0usize, 50, 90] {
        let mut big = Shard::with_capacity_advised(1 << 22, |p, n| {
            spillway_dataplane::dpdk::advise_huge_pages(p, n);
        });
        fixture::fill_to(&mut big, load, load as u64);
        let filled = big.len();
        g.bench_function(format!("new_connections_{load}pct_full_burst"), |b| {
            b.iter_custom(|rounds| {
                let mut bufs = vec![VecBuf::new(); MAX_BURST];
                let mut timed = Duration::ZERO;
                for _ in 0..rounds {
                    let mut ctx = path_ctx(
                        &snap,
                        &mut big,
                        &node,
                        &neighbours,
                        &next_hops,
                        &events,
                        &counters,
                    );
                    timed += bursts(&fresh, &mut bufs, &mut ctx);
                    // (In a nearly full table a SYN may have evicted an earlier one.)
                    for k in &syn_keys {
                        if let Some(slot) = big.find(k, key_hash(k)) {
                            big.remove(slot);
                        }
                    }
                }
                timed
            })
        });
        // With `--features phase-clock`: where the burst path's time went.
        let phases = spillway_dataplane::path::phase_clock::take();
        if phases.packets > 0 {
            println!("new_connections_{load}pct_full_burst: {phases}");
        }
        // Each round left the load where it found it (an eviction takes one entry away).
        assert!(big.len() <= filled && big.len() + filled / 1000 >= filled, "the load held");
    }
    g.finish();
}

/// The `quic` group (see the module doc): ns per packet in bursts of `MAX_BURST`.
fn quic(c: &mut Criterion) {
    use fixture::{quic_frames, QUIC_MODES, QUIC_VIP, UDP_VIP};
    let snap = fixture::quic_snapshot();
    let node = node(false);
    let neighbours =
        NeighbourTable::from_pairs((1..=16).map(|i| (Addr::v4(198, 18, 1, i), [2, 0, 0, 0, 1, i])));
    let events = ArrayQueue::new(16);
    let mut next_hops = NextHopCache::new();
    next_hops.refresh(&snap, &neighbours, &node);
    let counters = WorkerCounters::new();
    let cid = |mode: usize, i: usize| fixture::quic_cid(quic_issue::issue, mode, i);
    const FLOWS: usize = 1000;
    const MOVED: usize = 65_536;
    let established = [QUIC_VIP, UDP_VIP].map(|vip| quic_frames(vip, 30, FLOWS, 2, &cid));
    let mut shard = Shard::with_capacity_advised(MOVED * 4, |p, n| {
        spillway_dataplane::dpdk::advise_huge_pages(p, n);
    });
    let mut bufs = vec![VecBuf::new(); MAX_BURST];
    let mut g = c.benchmark_group("quic");
    g.measurement_time(Duration::from_secs(2)).sample_size(10);
    // Established: every flow has its entry (the QUIC ones made by their IDs); each round
    // sends every flow's packet once more.
    {
        let mut ctx =
            path_ctx(&snap, &mut shard, &node, &neighbours, &next_hops, &events, &counters);
        for frames in &established {
            bursts(frames, &mut bufs, &mut ctx);
        }
        g.throughput(Throughput::Elements(FLOWS as u64));
        for (name, frames) in
            [("established_quic", &established[0]), ("established_udp", &established[1])]
        {
            g.bench_function(format!("{name}_{FLOWS}_flows_burst"), |b| {
                b.iter_custom(|rounds| {
                    (0..rounds).map(|_| bursts(frames, &mut bufs, &mut ctx)).sum()
                })
            });
        }
    }
    // Moved connections (or new UDP flows): each round into an emptied table.
    let mut cases = vec![("new_udp".to_string(), quic_frames(UDP_VIP, 40, MOVED, 2, &cid))];
    for (mode, (name, ..)) in QUIC_MODES.iter().enumerate() {
        cases.push((format!("moved_{name}"), quic_frames(QUIC_VIP, 40, MOVED, mode, &cid)));
    }
    // One packet in ten from a connection that just moved (four-pass IDs), the others
    // established; the table emptied and the established flows back in before each round.
    let moved = &cases[3].1;
    let mix: Vec<Vec<u8>> = (0..MOVED)
        .map(
            |k| if k % 10 == 9 { moved[k / 10].clone() } else { established[0][k % FLOWS].clone() },
        )
        .collect();
    cases.push(("mix_10pct_moving".to_string(), mix));
    g.throughput(Throughput::Elements(MOVED as u64));
    for (name, frames) in &cases {
        g.bench_function(format!("{name}_{MOVED}_burst"), |b| {
            b.iter_custom(|rounds| {
                let mut timed = Duration::ZERO;
                for _ in 0..rounds {
                    shard.clear();
                    let mut ctx = path_ctx(
                        &snap,
                        &mut shard,
                        &node,
                        &neighbours,
                        &next_hops,
                        &events,
                        &counters,
                    );
                    bursts(&established[0], &mut bufs, &mut ctx);
                    timed += bursts(frames, &mut bufs, &mut ctx);
                }
                timed
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench, quic);
criterion_main!(benches);
