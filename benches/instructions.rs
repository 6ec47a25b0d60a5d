//! Instructions per packet, counted by valgrind's callgrind: the stable measure of the packet
//! path's code on a shared VM without hardware counters (docs/performance.md, "Instructions per
//! packet").
//!
//! `cargo bench -p spillway-dataplane --bench instructions` runs each case below twice under
//! `valgrind --tool=callgrind`, with N1 and N2 packets, and reports (Ir(N2) - Ir(N1)) / (N2 - N1):
//! the set-up (building the snapshot, filling the connection table) cancels out, what is left
//! is the cost of one more packet. The figures go to `target/bench/instructions.json`.
//!
//! - `classify`: `wire::classify` of a 64-byte Ethernet/IPv4/TCP frame (an ACK), the whole
//!   classified `Frame`;
//! - `classify_ip`: `wire::classify_ip_fast` of the same frame, what the packet path calls for
//!   it (the flow fields and placement only);
//! - `decide_hit`: `decide::prepare` + `decide_prepared` of a packet of an established flow
//!   (1,000 flows in turn);
//! - `decide_insert`: the same for a new connection's SYN into a table with room;
//! - `encap`: the IPIP rewrite of a classified 64-byte frame with the backend's prebuilt outer
//!   headers (`build::OuterV4::write` after the buffer moves: what the path does for an IPv4
//!   backend), including reloading the frame (`reload`, per packet here);
//! - `encap_general`: the same with `build::write_encap`, which builds every header field;
//! - `burst_established` / `burst_syn`: `path::process_burst` over bursts of `MAX_BURST` (64)
//!   frames of 1,000 established flows (ACKs) or new connections (SYNs), the whole path in
//!   memory; each burst reloads its buffers first, which `reload` alone measures (subtract it);
//! - `burst_syn_crowded`: `burst_syn` into a table of 1M entries filled to 90% with other keys
//!   first (94% after the longer run): the inserts that find both candidate buckets full and
//!   move an entry to make room (a third of them at 90%), and the prefetches that prepare them;
//! - `burst_established_v6`: the same for 1,000 established IPv6 flows (IP6IP6 to IPv6
//!   backends: the general way, which the IPv4 packets' short way must not slow down).
//!
//! - `tap_idle` / `tap_miss` / `tap_captured`: `burst_established` through the worker's capture
//!   wrapper (`capture::WorkerTap::process_burst`): with no capture under way (the cost when
//!   nobody captures: one test per burst), with a capture whose filter matches no packet (every
//!   packet classified and run alone), and with one that keeps every packet as received and as
//!   sent (the cost while capturing everything).
//!
//! - `quic_established_udp` / `quic_established`: 1,000 established UDP flows to port 443 of a
//!   service without QUIC-LB, and of one with it (short headers, conntrack hits: the QUIC
//!   packet's established path, which must cost what any UDP packet's does);
//! - `quic_new_udp`: UDP packets of new 4-tuples to the service without QUIC-LB (a miss, the
//!   hash, an insert): the baseline of the next three;
//! - `quic_migrated_plaintext` / `_single_pass` / `_four_pass`: short headers of new 4-tuples
//!   (a connection that moved) to the QUIC-LB service, each connection ID naming a backend
//!   under that configuration: a miss, the decode, an insert (QL-3);
//! - `quic_mix_10pct_migrating`: the QUIC-LB service's established flows with one packet in
//!   ten from a connection that just moved (four-pass IDs).
//!
//! `--fill PERCENT` (default 90) sets how full `burst_syn_crowded`'s table is before its
//! first SYN: `cargo bench -p spillway-dataplane --bench instructions -- crowded --fill 70` is
//! the instructions of a new connection at 70-74% load (docs/performance.md, "Instructions per
//! packet", has them from 50% to 95%).
//!
//! Run one case (what the driver does under valgrind):
//! `target/release/deps/instructions-* --case classify --packets 100000`.

mod fixture;
#[path = "../shared/tests/common/quic_issue.rs"]
mod quic_issue;

use std::hint::black_box;
use std::process::Command;
use std::sync::Arc;

use crossbeam::queue::ArrayQueue;
use fixture::{model, node, path_ctx, service, snapshot, tcp_frame};
use spillway_core::addr::Addr;
use spillway_core::capture::{self, Filter, Points, TapSlot, SNAP_MAX};
use spillway_core::conntrack::Shard;
use spillway_core::counters::WorkerCounters;
use spillway_core::decide::{decide_prepared, prepare};
use spillway_core::filter::FlowFilter;
use spillway_core::model::{Encap, RuleProtocol};
use spillway_core::time::Time;
use spillway_core::wire::build::{self, EncapKind, EncapParams, OuterV4};
use spillway_core::wire::{self, FrameKind};
use spillway_dataplane::capture::WorkerTap;
use spillway_dataplane::neighbour::{NeighbourTable, NextHopCache};
use spillway_dataplane::path::{process_burst, Outcome, PacketBuf, MAX_BURST};
use spillway_dataplane::vecbuf::VecBuf;

const CASES: [&str; 21] = [
    "classify",
    "classify_ip",
    "decide_hit",
    "decide_insert",
    "encap",
    "encap_general",
    "reload",
    "burst_established",
    "burst_syn",
    "burst_syn_crowded",
    "burst_established_v6",
    "tap_idle",
    "tap_miss",
    "tap_captured",
    "quic_established_udp",
    "quic_established",
    "quic_new_udp",
    "quic_migrated_plaintext",
    "quic_migrated_single_pass",
    "quic_migrated_four_pass",
    "quic_mix_10pct_migrating",
];

/// Flows cycled through by the established cases.
const FLOWS: usize = 1000;

/// Entries of the connection table (new connections of the insert cases fill it to at most
/// half).
const SHARD_CAPACITY: usize = 1 << 17;

/// Entries of the table of `burst_syn_crowded`, 90% full before its first SYN.
const CROWDED_CAPACITY: usize = 1 << 20;

/// Most packets a case runs (the new connections fill at most half the table).
const MAX_PACKETS: usize = SHARD_CAPACITY / 2 - FLOWS;

fn flow_frame(i: usize, flags: u8) -> Vec<u8> {
    tcp_frame([198, 18, 10 + (i / 60000) as u8, (i % 250) as u8], 1024 + (i % 60000) as u16, flags)
}

/// A 74-byte Ethernet/IPv6/TCP frame of flow `i` from fd00::a:(i % 250) to the IPv6 VIP.
fn flow_frame_v6(i: usize, flags: u8) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0xc, 0x86, 0xdd];
    f.extend_from_slice(&[0x60, 0, 0, 0, 0, 20, 6, 64]);
    f.extend_from_slice(&(V6_CLIENTS + (i % 250) as u128).to_be_bytes());
    f.extend_from_slice(&V6_VIP.to_be_bytes());
    f.extend_from_slice(&(1024 + (i % 60000) as u16).to_be_bytes());
    f.extend_from_slice(&80u16.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    f
}

/// fd00::a:0, the first IPv6 client.
const V6_CLIENTS: u128 = 0xfd00_0000_0000_0000_0000_0000_000a_0000;
/// fd00::100, the IPv6 VIP.
const V6_VIP: u128 = 0xfd00_0000_0000_0000_0000_0000_0000_0100;

/// The QUIC-LB cases (`quic_*`) over `packets` packets: a snapshot of their own, two UDP
/// services on port 443 over 16 backends, one with QUIC-LB ([`fixture::quic_service`]).
fn run_quic_case(case: &str, packets: usize) {
    use fixture::quic_frames;
    use spillway_core::counters::Reason;
    use spillway_core::decide::ForwardReason;
    let snap = fixture::quic_snapshot();
    let node = node(false);
    let neighbours =
        NeighbourTable::from_pairs((1..=16).map(|i| (Addr::v4(198, 18, 1, i), [2, 0, 0, 0, 1, i])));
    let events = ArrayQueue::new(16);
    let mut next_hops = NextHopCache::new();
    next_hops.refresh(&snap, &neighbours, &node);
    let counters = WorkerCounters::new();
    let cid = |mode: usize, i: usize| fixture::quic_cid(quic_issue::issue, mode, i);
    let (quic_vip, udp_vip) = (fixture::QUIC_VIP, fixture::UDP_VIP);
    let (quic_flows, udp_flows) =
        (quic_frames(quic_vip, 30, FLOWS, 2, &cid), quic_frames(udp_vip, 30, FLOWS, 2, &cid));
    let moved = |vip: [u8; 4], mode: usize| quic_frames(vip, 40, MAX_PACKETS, mode, &cid);
    let frames: Vec<Vec<u8>> = match case {
        "quic_established_udp" => udp_flows.clone(),
        "quic_established" => quic_flows.clone(),
        "quic_new_udp" => moved(udp_vip, 2),
        "quic_migrated_plaintext" => moved(quic_vip, 0),
        "quic_migrated_single_pass" => moved(quic_vip, 1),
        "quic_migrated_four_pass" => moved(quic_vip, 2),
        "quic_mix_10pct_migrating" => {
            // As many whatever `packets` is, so that building them cancels out.
            let m = moved(quic_vip, 2);
            (0..MAX_PACKETS)
                .map(
                    |k| if k % 10 == 9 { m[k / 10].clone() } else { quic_flows[k % FLOWS].clone() },
                )
                .collect()
        }
        other => panic!("unknown case {other} (cases: {CASES:?})"),
    };
    assert!(packets <= MAX_PACKETS, "at most {MAX_PACKETS} packets");
    let mut shard = Shard::with_capacity(SHARD_CAPACITY);
    let mut ctx = path_ctx(&snap, &mut shard, &node, &neighbours, &next_hops, &events, &counters);
    let mut bufs = vec![VecBuf::new(); MAX_BURST];
    let mut out = [Outcome::Consumed; MAX_BURST];
    // The established flows have their entries (the QUIC-LB ones made by their IDs).
    for chunk in quic_flows.chunks(MAX_BURST).chain(udp_flows.chunks(MAX_BURST)) {
        for (b, f) in bufs.iter_mut().zip(chunk) {
            b.load(f);
        }
        process_burst(&mut bufs[..chunk.len()], &mut ctx, &mut out);
        assert!(out[..chunk.len()].iter().all(|o| *o == Outcome::Transmit), "{out:?}");
    }
    let routed = counters.reason(Reason::Forward(ForwardReason::QuicCid)).get();
    assert_eq!(routed, FLOWS as u64, "every established QUIC flow's first packet went by its ID");
    let mut done = 0;
    while done < packets {
        let n = MAX_BURST.min(packets - done);
        for (k, b) in bufs[..n].iter_mut().enumerate() {
            b.load(&frames[(done + k) % frames.len()]);
        }
        process_burst(&mut bufs[..n], &mut ctx, &mut out);
        black_box(&bufs);
        done += n;
    }
    // What each case measures happened: the moved connections went by their IDs.
    let routed = counters.reason(Reason::Forward(ForwardReason::QuicCid)).get() - FLOWS as u64;
    let expected = match case {
        c if c.starts_with("quic_migrated") => packets,
        "quic_mix_10pct_migrating" => packets / 10,
        _ => 0,
    };
    assert_eq!(routed, expected as u64, "{case}: packets routed by their connection ID");
}

/// Runs `case` over `packets` packets (`burst_syn_crowded` into a table `fill` percent full).
fn run_case(case: &str, packets: usize, fill: usize) {
    if case.starts_with("quic_") {
        return run_quic_case(case, packets);
    }
    let backends = || (1..=16).map(|i| Addr::v4(198, 18, 1, i));
    let backends_v6 = || {
        (1..=16u8).map(|i| {
            Addr((0xfd00_0000_0000_0000_0000_0000_0001_0000 + u128::from(i)).to_be_bytes())
        })
    };
    let svc = service("ipip", Encap::Ipip, RuleProtocol::Tcp, &["198.18.0.100"], "g", backends());
    let svc6 =
        service("ipip6", Encap::Ipip, RuleProtocol::Tcp, &["fd00::100"], "g6", backends_v6());
    let snap = snapshot(model("", [svc, svc6]));
    let node = node(true);
    let neighbours = NeighbourTable::from_pairs(
        (1..=16)
            .map(|i| (Addr::v4(198, 18, 1, i), [2, 0, 0, 0, 1, i]))
            .chain(backends_v6().zip(1..=16u8).map(|(a, i)| (a, [2, 0, 0, 0, 6, i]))),
    );
    let events = ArrayQueue::new(16);
    let mut next_hops = NextHopCache::new();
    next_hops.refresh(&snap, &neighbours, &node);
    let counters = WorkerCounters::new();
    let syns: Vec<Vec<u8>> = (0..FLOWS).map(|i| flow_frame(i, 0x02)).collect();
    let acks: Vec<Vec<u8>> = (0..FLOWS).map(|i| flow_frame(i, 0x10)).collect();
    let syns_v6: Vec<Vec<u8>> = (0..FLOWS).map(|i| flow_frame_v6(i, 0x02)).collect();
    let acks_v6: Vec<Vec<u8>> = (0..FLOWS).map(|i| flow_frame_v6(i, 0x10)).collect();
    // New connections, as many whatever `packets` is (their set-up cancels out too).
    let new: Vec<Vec<u8>> = (0..MAX_PACKETS).map(|i| flow_frame(FLOWS + i, 0x02)).collect();
    assert!(packets <= MAX_PACKETS, "at most {MAX_PACKETS} packets");
    // Room for every new connection of the insert cases; the same size whatever `packets` is,
    // so that its set-up cancels out.
    let mut shard = Shard::with_capacity(SHARD_CAPACITY);
    let mut ctx = path_ctx(&snap, &mut shard, &node, &neighbours, &next_hops, &events, &counters);
    // The established flows have their entries.
    let mut bufs = vec![VecBuf::new(); MAX_BURST];
    let mut out = [Outcome::Consumed; MAX_BURST];
    for chunk in syns.chunks(MAX_BURST).chain(syns_v6.chunks(MAX_BURST)) {
        for (b, f) in bufs.iter_mut().zip(chunk) {
            b.load(f);
        }
        process_burst(&mut bufs[..chunk.len()], &mut ctx, &mut out);
        // Every one made its flow's entry.
        assert!(out[..chunk.len()].iter().all(|o| *o == Outcome::Transmit), "{out:?}");
    }
    match case {
        "classify" => {
            for i in 0..packets {
                black_box(wire::classify(black_box(&acks[i % FLOWS])).ok());
            }
        }
        "decide_hit" | "decide_insert" => {
            let frames = if case == "decide_hit" { &acks } else { &new };
            let infos: Vec<_> = frames
                .iter()
                .map(|f| match wire::classify(f).expect("valid").kind {
                    FrameKind::Ip { info, .. } => info,
                    k => panic!("not an IP frame: {k:?}"),
                })
                .collect();
            for i in 0..packets {
                let info = &infos[i % infos.len()];
                let prep = prepare(info, &snap);
                black_box(decide_prepared(info, &prep, &snap, ctx.shard, Time::ZERO));
            }
        }
        "classify_ip" => {
            for i in 0..packets {
                black_box(wire::classify_ip_fast(black_box(&acks[i % FLOWS])));
            }
        }
        "encap" | "encap_general" => {
            let f = &acks[0];
            let params = EncapParams {
                kind: EncapKind::Ipip,
                dst_mac: [2, 0, 0, 0, 1, 1],
                src_mac: fixture::NODE_MAC,
                outer_src: Addr::v4(198, 18, 0, 2),
                outer_dst: Addr::v4(198, 18, 1, 1),
                flow_hash: 0x1234_5678,
                gue_dport: 0,
            };
            let outer =
                OuterV4::new(params.dst_mac, params.src_mac, params.outer_src, params.outer_dst)
                    .expect("IPv4");
            let hdr = build::encap_len(EncapKind::Ipip, false);
            let mut buf = VecBuf::with_frame(f);
            for _ in 0..packets {
                buf.load(f);
                let ok = buf.adj(14) && buf.truncate(40) && buf.prepend(hdr);
                let written = if case == "encap" {
                    outer.write(buf.data_mut(), EncapKind::Ipip, 40, params.flow_hash, 0)
                } else {
                    build::write_encap(buf.data_mut(), &params, 40)
                };
                black_box(ok && written.is_ok());
            }
        }
        "burst_syn_crowded" => {
            let mut crowded = Shard::with_capacity(CROWDED_CAPACITY);
            fixture::fill_to(&mut crowded, fill, 90);
            let mut ctx =
                path_ctx(&snap, &mut crowded, &node, &neighbours, &next_hops, &events, &counters);
            let mut done = 0;
            while done < packets {
                let n = MAX_BURST.min(packets - done);
                for (k, b) in bufs[..n].iter_mut().enumerate() {
                    b.load(&new[done + k]);
                }
                process_burst(&mut bufs[..n], &mut ctx, &mut out);
                black_box(&bufs);
                done += n;
            }
        }
        "tap_idle" | "tap_miss" | "tap_captured" => {
            let slot = Arc::new(TapSlot::default());
            let mut tap = WorkerTap::new(Arc::clone(&slot));
            // The ring holds every record of the longer run (2 per packet): nothing is lost.
            let _reader = (case != "tap_idle").then(|| {
                let filter = match case {
                    "tap_miss" => Filter {
                        flow: FlowFilter {
                            vip: Some(Addr::v4(198, 18, 0, 99)),
                            ..FlowFilter::default()
                        },
                        ..Filter::default()
                    },
                    _ => Filter::default(),
                };
                let points = Points { dropped: false, ..Points::ALL };
                let (r, _) = capture::start(&[slot], &filter, points, SNAP_MAX, 2 * MAX_PACKETS)
                    .expect("a tap");
                tap.poll();
                r
            });
            let mut done = 0;
            while done < packets {
                let n = MAX_BURST.min(packets - done);
                for (k, b) in bufs[..n].iter_mut().enumerate() {
                    b.load(&acks[(done + k) % acks.len()]);
                }
                tap.process_burst(&mut bufs[..n], &mut ctx, &mut out, 0, 0);
                black_box(&bufs);
                done += n;
            }
        }
        "reload" | "burst_established" | "burst_syn" | "burst_established_v6" => {
            let frames = match case {
                "burst_syn" => &new,
                "burst_established_v6" => &acks_v6,
                _ => &acks,
            };
            let mut done = 0;
            while done < packets {
                let n = MAX_BURST.min(packets - done);
                for (k, b) in bufs[..n].iter_mut().enumerate() {
                    b.load(&frames[(done + k) % frames.len()]);
                }
                if case != "reload" {
                    process_burst(&mut bufs[..n], &mut ctx, &mut out);
                }
                black_box(&bufs);
                done += n;
            }
        }
        other => panic!("unknown case {other} (cases: {CASES:?})"),
    }
}

/// Instructions callgrind counted for one run of `case` over `packets` packets.
fn count(exe: &str, case: &str, packets: usize, fill: usize) -> u64 {
    let out = Command::new("valgrind")
        .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
        .arg(exe)
        .args(["--case", case, "--packets", &packets.to_string(), "--fill", &fill.to_string()])
        .output()
        .expect("valgrind (Debian package `valgrind`)");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{case}: valgrind failed:\n{text}");
    text.lines()
        .find_map(|l| l.split("Collected :").nth(1))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{case}: no `Collected :` line in callgrind's output:\n{text}"))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1));
    let fill: usize = arg("--fill").map_or(90, |f| match f.parse() {
        Ok(f) if f < 100 => f,
        _ => panic!("--fill: a percentage below 100"),
    });
    if let Some(case) = arg("--case") {
        let packets = arg("--packets").and_then(|p| p.parse().ok()).unwrap_or(10_000);
        return run_case(case, packets, fill);
    }
    // `cargo bench` passes `--bench`; anything else selects cases by name (but `--fill`'s value).
    let only: Vec<&String> = args[1..]
        .iter()
        .enumerate()
        .filter(|&(i, a)| !a.starts_with("--") && args[i] != "--fill")
        .map(|(_, a)| a)
        .collect();
    let exe = std::env::current_exe().expect("own path");
    let exe = exe.to_str().expect("utf-8 path");
    let (n1, n2) = (4_000usize, 44_000usize);
    let mut rows = Vec::new();
    println!("{:<20} {:>14}", "case", "instr/packet");
    for case in CASES {
        if !only.is_empty() && !only.iter().any(|o| case.contains(o.as_str())) {
            continue;
        }
        let (a, b) = (count(exe, case, n1, fill), count(exe, case, n2, fill));
        let per = (b.saturating_sub(a)) as f64 / (n2 - n1) as f64;
        // A crowded table other than the default 90% says so.
        let case = match case {
            "burst_syn_crowded" if fill != 90 => format!("{case}@{fill}%"),
            _ => case.to_string(),
        };
        println!("{case:<20} {per:>14.1}");
        rows.push(format!("    {{\"case\": \"{case}\", \"instructions_per_packet\": {per:.1}}}"));
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    let _ = std::fs::create_dir_all(&dir);
    let json = format!(
        "{{\n  \"n1\": {n1},\n  \"n2\": {n2},\n  \"cases\": [\n{}\n  ]\n}}\n",
        rows.join(",\n")
    );
    let path = dir.join("instructions.json");
    if std::fs::write(&path, json).is_ok() {
        println!("written: {}", path.display());
    }
}
