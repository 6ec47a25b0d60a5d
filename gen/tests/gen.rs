//! The traffic generator (`gen::FrameFactory`, `spillway-gen`).
//!
//! Pure tests parse every frame with the balancer's own classifier and check the checksums
//! with an independent verifier written here; they need no privileges. The `cli_*` tests run
//! the `spillway-gen` binary on DPDK virtual devices (hugepages when free, root) as a child process,
//! like the other data-plane tests: they need root, so they are `#[ignore]`d in a plain
//! `cargo test` and run by `scripts/test.sh` (`--include-ignored`, as root).

#[path = "../../daemon/tests/common/mod.rs"]
mod common;

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::Command;

use spillway_core::wire::{classify, FrameKind};
use spillway_gen::{FrameFactory, Order, SpecError, TrafficSpec};

// ---- an independent checksum verifier -------------------------------------------------------

/// One's-complement sum of big-endian words, folded (odd length: zero-padded).
fn ones_sum(chunks: &[&[u8]]) -> u16 {
    let mut all = Vec::new();
    for c in chunks {
        all.extend_from_slice(c);
    }
    if all.len() % 2 == 1 {
        all.push(0);
    }
    let mut s: u32 = 0;
    for w in all.chunks(2) {
        s += u32::from(w[0]) << 8 | u32::from(w[1]);
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// A parsed generated frame, read byte by byte (not through the generator's code).
#[derive(Debug, Clone)]
struct Parsed {
    v6: bool,
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    /// IPv4 identification and flags/offset word.
    id: u16,
    frag_word: u16,
    ttl: u8,
    /// The IP payload (L4 bytes, or fragment data).
    payload: Vec<u8>,
}

fn parse(f: &[u8]) -> Parsed {
    let et = u16::from_be_bytes([f[12], f[13]]);
    if et == 0x0800 {
        let ip = &f[14..34];
        assert_eq!(ip[0], 0x45, "version/IHL");
        assert_eq!(ones_sum(&[ip]), 0xffff, "IPv4 header checksum of {f:02x?}");
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        assert!(14 + total <= f.len());
        // Whatever follows the IP packet is Ethernet padding: zero.
        assert!(f[14 + total..].iter().all(|&b| b == 0), "padding");
        Parsed {
            v6: false,
            src: IpAddr::V4(Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15])),
            dst: IpAddr::V4(Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19])),
            proto: ip[9],
            id: u16::from_be_bytes([ip[4], ip[5]]),
            frag_word: u16::from_be_bytes([ip[6], ip[7]]),
            ttl: ip[8],
            payload: f[34..14 + total].to_vec(),
        }
    } else {
        assert_eq!(et, 0x86dd, "ethertype");
        let ip = &f[14..54];
        assert_eq!(ip[0] >> 4, 6);
        let plen = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
        assert_eq!(54 + plen, f.len(), "IPv6 frames are never padded (>= 70 bytes)");
        let mut s = [0u8; 16];
        s.copy_from_slice(&ip[8..24]);
        let mut d = [0u8; 16];
        d.copy_from_slice(&ip[24..40]);
        Parsed {
            v6: true,
            src: IpAddr::V6(Ipv6Addr::from(s)),
            dst: IpAddr::V6(Ipv6Addr::from(d)),
            proto: ip[6],
            id: 0,
            frag_word: 0,
            ttl: ip[7],
            payload: f[54..].to_vec(),
        }
    }
}

/// Checks the TCP/UDP checksum of a whole L4 segment with its pseudo-header.
fn l4_checksum_ok(src: IpAddr, dst: IpAddr, proto: u8, seg: &[u8]) -> bool {
    let len = seg.len() as u32;
    let pseudo: Vec<u8> = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut p = s.octets().to_vec();
            p.extend_from_slice(&d.octets());
            p.extend_from_slice(&[0, proto]);
            p.extend_from_slice(&(len as u16).to_be_bytes());
            p
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let mut p = s.octets().to_vec();
            p.extend_from_slice(&d.octets());
            p.extend_from_slice(&len.to_be_bytes());
            p.extend_from_slice(&[0, 0, 0, proto]);
            p
        }
        _ => panic!("mixed families"),
    };
    if proto == 17 && seg[6..8] == [0, 0] {
        return false; // the generator always sends UDP checksums
    }
    ones_sum(&[&pseudo, seg]) == 0xffff
}

fn frames(spec: &TrafficSpec, n: usize) -> (FrameFactory, Vec<Vec<u8>>) {
    let mut f = FrameFactory::new(spec).expect("valid spec");
    let mut buf = vec![0xa5u8; f.max_frame_len()];
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let len = f.next_frame(&mut buf, 0x0102_0304_0506_0700 + i as u64);
        out.push(buf[..len].to_vec());
    }
    (f, out)
}

fn established(f: &FrameFactory) -> HashSet<(IpAddr, u16)> {
    (0..f.spec().flows).map(|i| f.flow_tuple(i)).collect()
}

fn in_prefix(a: IpAddr, spec: &TrafficSpec) -> bool {
    match a {
        IpAddr::V4(a) => {
            let (p, l) = spec.src_v4;
            let m = if l == 0 { 0 } else { u32::MAX << (32 - l) };
            u32::from(a) & m == u32::from(p) & m
        }
        IpAddr::V6(a) => {
            let (p, l) = spec.src_v6;
            let m = if l == 0 { 0 } else { u128::MAX << (128 - l) };
            u128::from(a) & m == u128::from(p) & m
        }
    }
}

// ---- kinds -----------------------------------------------------------------------------------

#[test]
fn every_kind_classifies_as_intended_with_valid_headers() {
    for v6 in [false, true] {
        for udp in [false, true] {
            for syn in [false, true] {
                let spec = TrafficSpec {
                    flows: 300,
                    ipv6_share: if v6 { 1.0 } else { 0.0 },
                    udp_share: if udp { 1.0 } else { 0.0 },
                    syn_share: if syn { 1.0 } else { 0.0 },
                    stamp: true,
                    dst_port: 443,
                    src_mac: [2, 1, 1, 1, 1, 1],
                    dst_mac: [2, 2, 2, 2, 2, 2],
                    ..TrafficSpec::default()
                };
                let (f, all) = frames(&spec, 2000);
                let est = established(&f);
                let want_len = match (v6, udp) {
                    (false, false) => 64,
                    (false, true) => 64,
                    (true, false) => 82,
                    (true, true) => 70,
                };
                let what = format!("v6={v6} udp={udp} syn={syn}");
                for (n, fr) in all.iter().enumerate() {
                    assert_eq!(fr.len(), want_len, "{what}");
                    let c = classify(fr).unwrap_or_else(|e| panic!("{what}: malformed {e:?}"));
                    assert_eq!(c.dst_mac, [2, 2, 2, 2, 2, 2]);
                    assert_eq!(c.src_mac, [2, 1, 1, 1, 1, 1]);
                    let FrameKind::Ip { info, ip } = c.kind else {
                        panic!("{what}: not an IP packet: {:?}", c.kind)
                    };
                    assert!(!info.fragment, "{what}");
                    assert_eq!(ip.is_v4, !v6, "{what}");
                    assert_eq!(ip.ttl, 64, "{what}");
                    assert!(ip.df, "{what}: DF");
                    assert_eq!(info.proto, if udp { 17 } else { 6 }, "{what}");
                    assert_eq!(info.dport, 443, "{what}");
                    let dst = if v6 { IpAddr::V6(spec.dst_v6) } else { IpAddr::V4(spec.dst_v4) };
                    assert_eq!(info.dst.to_ip(), dst, "{what}");
                    let src = (info.src.to_ip(), info.sport);
                    assert!(in_prefix(src.0, &spec), "{what}: {src:?} outside the prefix");
                    if udp {
                        assert_eq!(info.tcp_flags, 0, "{what}");
                    } else {
                        assert_eq!(info.tcp_flags, if syn { 0x02 } else { 0x10 }, "{what}");
                        assert_eq!(info.is_syn(), syn, "{what}");
                    }
                    assert_eq!(est.contains(&src), !syn, "{what}: {src:?} established?");
                    let p = parse(fr);
                    assert_eq!(p.ttl, 64);
                    if !v6 {
                        assert_eq!(p.frag_word, 0x4000, "{what}: DF, no fragment");
                    }
                    assert!(l4_checksum_ok(p.src, p.dst, p.proto, &p.payload), "{what}: L4 sum");
                    // The stamp is the last 8 bytes, little endian.
                    let stamp = u64::from_le_bytes(fr[fr.len() - 8..].try_into().unwrap());
                    assert_eq!(stamp, 0x0102_0304_0506_0700 + n as u64, "{what}");
                }
                let c = f.counts();
                assert_eq!(c.frames, 2000);
                assert_eq!(c.packets, 2000);
                assert_eq!(c.bytes, 2000 * want_len as u64);
                assert_eq!((c.ipv6, c.ipv4), if v6 { (2000, 0) } else { (0, 2000) });
                assert_eq!((c.udp, c.tcp), if udp { (2000, 0) } else { (0, 2000) });
                assert_eq!(c.syn, if syn { 2000 } else { 0 });
                assert_eq!(c.fragments, 0);
            }
        }
    }
}

#[test]
fn checksums_are_right_for_odd_and_large_frames_with_stamps() {
    for len in [60u16, 61, 63, 64, 65, 71, 82, 83, 99, 128, 1513, 1514] {
        for stamp in [false, true] {
            let spec = TrafficSpec {
                flows: 5000,
                frame_len: len,
                ipv6_share: 0.5,
                udp_share: 0.5,
                syn_share: 0.3,
                stamp,
                seed: u64::from(len),
                ..TrafficSpec::default()
            };
            let mut f = FrameFactory::new(&spec).unwrap();
            let mut buf = vec![0u8; f.max_frame_len()];
            // Stamps with every byte value pattern, including ones that carry.
            let mut stamp_value = 0xffff_ffff_ffff_fff0u64;
            for _ in 0..3000 {
                stamp_value = stamp_value.wrapping_mul(6364136223846793005).wrapping_add(1);
                let n = f.next_frame(&mut buf, stamp_value);
                let fr = &buf[..n];
                let p = parse(fr);
                let min = match (p.v6, p.proto) {
                    (false, 6) => 62,
                    (false, _) => 60,
                    (true, 6) => 82,
                    (true, _) => 70,
                };
                assert_eq!(n, usize::from(len).max(min), "len {len} {p:?}");
                assert!(
                    l4_checksum_ok(p.src, p.dst, p.proto, &p.payload),
                    "bad L4 checksum: len {len} stamp {stamp} frame {fr:02x?}"
                );
                if stamp {
                    assert_eq!(fr[n - 8..], stamp_value.to_le_bytes());
                } else {
                    assert!(fr[n - 8..].iter().all(|&b| b == 0));
                }
                assert!(classify(fr).is_ok());
            }
        }
    }
}

#[test]
fn frame_length_is_raised_to_what_the_headers_need() {
    let f = FrameFactory::new(&TrafficSpec { frame_len: 10, ..TrafficSpec::default() }).unwrap();
    // IPv6 TCP needs 14 + 40 + 20 + 8 = 82 bytes; every template can be written.
    assert_eq!(f.max_frame_len(), 82);
    let (_, v4) = frames(&TrafficSpec { frame_len: 0, ..TrafficSpec::default() }, 10);
    assert!(v4.iter().all(|f| f.len() == 62), "IPv4 TCP: 54 + 8");
    let (_, v4u) =
        frames(&TrafficSpec { frame_len: 0, udp_share: 1.0, ..TrafficSpec::default() }, 10);
    assert!(v4u.iter().all(|f| f.len() == 60), "IPv4 UDP: raised to the Ethernet minimum");
    let big = FrameFactory::new(&TrafficSpec { frame_len: 1514, ..TrafficSpec::default() });
    assert_eq!(big.unwrap().max_frame_len(), 1514);
}

// ---- shares, flows, order --------------------------------------------------------------------

#[test]
fn shares_are_honoured_over_100k_packets() {
    let spec = TrafficSpec {
        flows: 20_000,
        ipv6_share: 0.3,
        udp_share: 0.4,
        syn_share: 0.2,
        fragment_share: 0.1,
        seed: 7,
        ..TrafficSpec::default()
    };
    let (f, all) = frames(&spec, 110_000);
    let est = established(&f);
    let (mut packets, mut v6, mut udp, mut syn, mut frag, mut v4) = (0u64, 0, 0, 0, 0, 0);
    for fr in &all {
        let c = classify(fr).expect("well formed");
        let FrameKind::Ip { info, ip } = c.kind else { panic!("not IP") };
        if info.fragment {
            let p = parse(fr);
            if p.frag_word & 0x1fff != 0 {
                continue; // the second fragment of a packet counted with its first
            }
            frag += 1;
        }
        packets += 1;
        v6 += u64::from(!ip.is_v4);
        v4 += u64::from(ip.is_v4);
        udp += u64::from(info.proto == 17);
        if !info.fragment {
            syn += u64::from(!est.contains(&(info.src.to_ip(), info.sport)));
        } else {
            // A fragment has no ports for the classifier: read them from the first fragment.
            let p = parse(fr);
            let sport = u16::from_be_bytes([p.payload[0], p.payload[1]]);
            syn += u64::from(!est.contains(&(p.src, sport)));
        }
    }
    let share = |n: u64, of: u64| n as f64 / of as f64;
    assert!((share(v6, packets) - 0.3).abs() < 0.01, "ipv6 {}", share(v6, packets));
    assert!((share(udp, packets) - 0.4).abs() < 0.01, "udp {}", share(udp, packets));
    assert!((share(syn, packets) - 0.2).abs() < 0.01, "syn {}", share(syn, packets));
    assert!((share(frag, v4) - 0.1).abs() < 0.01, "fragments {}", share(frag, v4));
    let c = f.counts();
    assert_eq!(c.frames, all.len() as u64);
    assert_eq!(c.bytes, all.iter().map(|f| f.len() as u64).sum::<u64>());
    // Every packet was counted once, a fragmented one with its first fragment.
    assert_eq!(c.packets, packets, "{c:?}");
    assert_eq!(c.ipv6, v6);
    assert_eq!(c.udp, udp);
    assert_eq!(c.syn, syn);
    assert_eq!(c.frames, c.packets + c.fragments / 2, "{c:?}");
}

#[test]
fn flow_sources_follow_the_documented_layout() {
    let spec = TrafficSpec { flows: 100_000, ..TrafficSpec::default() };
    let f = FrameFactory::new(&spec).unwrap();
    // 198.18.128.0/17: 32766 hosts (network and broadcast skipped).
    let hosts = 32766u32;
    for i in [0u32, 1, 2, 32765, 32766, 32767, 65532, 99_999] {
        let want = u32::from(Ipv4Addr::new(198, 18, 128, 1)) + i % hosts;
        assert_eq!(
            f.flow_tuple(i),
            (IpAddr::V4(Ipv4Addr::from(want)), (1024 + i / hosts) as u16),
            "flow {i}"
        );
    }
    assert_eq!(f.flow_tuple(0), ("198.18.128.1".parse().unwrap(), 1024));
    assert_eq!(f.flow_tuple(32765), ("198.18.255.254".parse().unwrap(), 1024));
    assert_eq!(f.flow_tuple(32766), ("198.18.128.1".parse().unwrap(), 1025));
    // IPv6 /64: only the network address is skipped; 10M flows all on port 1024.
    let spec6 = TrafficSpec { flows: 10_000_000, ipv6_share: 1.0, ..TrafficSpec::default() };
    let f6 = FrameFactory::new(&spec6).unwrap();
    assert_eq!(f6.flow_tuple(0), ("fd00:0:0:1::1".parse().unwrap(), 1024));
    assert_eq!(f6.flow_tuple(9_999_999), ("fd00:0:0:1::98:9680".parse().unwrap(), 1024));
    // 10M IPv4 flows fit in the /17 (32766 x 306 levels).
    let big = FrameFactory::new(&TrafficSpec { flows: 10_000_000, ..TrafficSpec::default() });
    let big = big.unwrap();
    assert_eq!(big.flow_tuple(9_999_999).1, 1024 + (9_999_999 / hosts) as u16);
    let distinct: HashSet<_> = (0..1_000_000).step_by(7).map(|i| big.flow_tuple(i)).collect();
    assert_eq!(distinct.len(), (0..1_000_000).step_by(7).count());
}

#[test]
fn random_order_hits_exactly_n_distinct_sources() {
    for (flows, v6, udp) in [(1000u32, 0.0, 0.0), (777, 0.5, 0.5), (3, 0.0, 0.0), (1, 1.0, 0.0)] {
        let spec = TrafficSpec {
            flows,
            ipv6_share: v6,
            udp_share: udp,
            order: Order::Random,
            ..TrafficSpec::default()
        };
        let (f, all) = frames(&spec, 40 * flows as usize + 100);
        let est = established(&f);
        assert_eq!(est.len(), flows as usize, "flow tuples are distinct");
        let mut seen = HashSet::new();
        for fr in &all {
            let FrameKind::Ip { info, .. } = classify(fr).unwrap().kind else { panic!() };
            let src = (info.src.to_ip(), info.sport);
            assert!(est.contains(&src), "{src:?} is not an established flow");
            seen.insert(src);
        }
        assert_eq!(seen.len(), flows as usize, "{flows} flows");
    }
}

#[test]
fn each_flow_keeps_its_family_and_protocol_and_shares_hold_over_flows() {
    let spec =
        TrafficSpec { flows: 10_000, ipv6_share: 0.25, udp_share: 0.6, ..TrafficSpec::default() };
    let f = FrameFactory::new(&spec).unwrap();
    let v6 = (0..10_000).filter(|&i| f.flow_tuple(i).0.is_ipv6()).count();
    let udp = (0..10_000).filter(|&i| f.flow_protocol(i) == 17).count();
    assert!((v6 as i64 - 2500).abs() <= 10, "{v6} IPv6 flows of 10000");
    assert!((udp as i64 - 6000).abs() <= 10, "{udp} UDP flows of 10000");
    // Family and protocol are independent: every combination has its share.
    for (want_v6, want_udp, share) in
        [(true, true, 0.15), (true, false, 0.10), (false, true, 0.45), (false, false, 0.30)]
    {
        let n = (0..10_000)
            .filter(|&i| {
                f.flow_tuple(i).0.is_ipv6() == want_v6 && (f.flow_protocol(i) == 17) == want_udp
            })
            .count();
        assert!(
            (n as f64 - share * 10_000.0).abs() < 150.0,
            "{n} flows with ipv6={want_v6} udp={want_udp}, expected about {}",
            share * 10_000.0
        );
    }
    let (_, all) = frames(&spec, 30_000);
    let proto: HashMap<(IpAddr, u16), u8> =
        (0..10_000).map(|i| (f.flow_tuple(i), f.flow_protocol(i))).collect();
    for fr in &all {
        let FrameKind::Ip { info, .. } = classify(fr).unwrap().kind else { panic!() };
        assert_eq!(proto[&(info.src.to_ip(), info.sport)], info.proto);
    }
}

#[test]
fn sequential_order_is_round_robin() {
    let spec = TrafficSpec { flows: 50, order: Order::Sequential, ..TrafficSpec::default() };
    let (f, all) = frames(&spec, 150);
    for (n, fr) in all.iter().enumerate() {
        let FrameKind::Ip { info, .. } = classify(fr).unwrap().kind else { panic!() };
        assert_eq!((info.src.to_ip(), info.sport), f.flow_tuple((n % 50) as u32), "frame {n}");
    }
}

#[test]
fn new_connections_never_use_an_established_source() {
    // Small prefixes, so that the established flows use several ports per host; with a
    // single host, 64000 flows leave only 512 ports for new connections.
    for (v6, spec, min_ports) in [
        (
            false,
            TrafficSpec {
                flows: 50_000,
                src_v4: ("10.1.2.0".parse().unwrap(), 24),
                syn_share: 0.5,
                udp_share: 0.5,
                ..TrafficSpec::default()
            },
            10_000,
        ),
        (
            true,
            TrafficSpec {
                flows: 50_000,
                src_v6: ("fd00:9::".parse().unwrap(), 120),
                ipv6_share: 1.0,
                syn_share: 0.5,
                ..TrafficSpec::default()
            },
            10_000,
        ),
        (
            false,
            TrafficSpec {
                flows: 64_000,
                src_v4: ("10.9.9.9".parse().unwrap(), 32),
                syn_share: 0.5,
                ..TrafficSpec::default()
            },
            500,
        ),
    ] {
        let (f, all) = frames(&spec, 60_000);
        let est = established(&f);
        let mut syns = 0;
        let mut ports = HashSet::new();
        for fr in &all {
            let FrameKind::Ip { info, .. } = classify(fr).unwrap().kind else { panic!() };
            let src = (info.src.to_ip(), info.sport);
            assert!(in_prefix(src.0, &spec), "{src:?}");
            assert_eq!(src.0.is_ipv6(), v6);
            let is_new = info.tcp_flags == 0x02 || (info.proto == 17 && !est.contains(&src));
            if is_new {
                syns += 1;
                ports.insert(src.1);
                assert!(!est.contains(&src), "new connection from established source {src:?}");
            } else {
                assert!(est.contains(&src), "{src:?}");
            }
        }
        assert_eq!(syns, f.counts().syn);
        assert!(syns > 25_000, "{syns}");
        // Fresh sources spread over the ports above the established ones.
        assert!(ports.len() >= min_ports, "{} distinct ports", ports.len());
        // 10.1.2.0/24: network and broadcast are never sources.
        for fr in &all {
            let p = parse(fr);
            assert_ne!(p.src, IpAddr::V4("10.1.2.0".parse().unwrap()));
            assert_ne!(p.src, IpAddr::V4("10.1.2.255".parse().unwrap()));
            assert_ne!(p.src, IpAddr::V6("fd00:9::".parse().unwrap()));
        }
    }
}

// ---- determinism -----------------------------------------------------------------------------

#[test]
fn same_seed_gives_the_same_bytes_and_another_seed_does_not() {
    let spec = TrafficSpec {
        flows: 10_000,
        ipv6_share: 0.3,
        udp_share: 0.3,
        syn_share: 0.1,
        fragment_share: 0.1,
        stamp: true,
        seed: 42,
        ..TrafficSpec::default()
    };
    let (_, a) = frames(&spec, 5000);
    let (_, b) = frames(&spec, 5000);
    assert_eq!(a, b);
    let (_, c) = frames(&TrafficSpec { seed: 43, ..spec.clone() }, 5000);
    assert_ne!(a, c);
    let differing = a.iter().zip(&c).filter(|(x, y)| x != y).count();
    assert!(differing > 4000, "only {differing} of 5000 frames differ");
    // Without stamping the stamp argument does not matter.
    let plain = TrafficSpec { stamp: false, ..spec };
    let mut f1 = FrameFactory::new(&plain).unwrap();
    let mut f2 = FrameFactory::new(&plain).unwrap();
    let (mut b1, mut b2) = (vec![0u8; 128], vec![0u8; 128]);
    for i in 0..1000u64 {
        let n1 = f1.next_frame(&mut b1, i);
        let n2 = f2.next_frame(&mut b2, i * 977 + 5);
        assert_eq!(b1[..n1], b2[..n2]);
    }
}

// ---- fragments -------------------------------------------------------------------------------

#[test]
fn fragments_reassemble_to_the_original_segment() {
    for (len, udp) in [(64u16, false), (64, true), (65, false), (200, true), (1514, false)] {
        let spec = TrafficSpec {
            flows: 100,
            frame_len: len,
            udp_share: if udp { 1.0 } else { 0.0 },
            fragment_share: 1.0,
            stamp: true,
            ..TrafficSpec::default()
        };
        let (f, all) = frames(&spec, 400);
        let est = established(&f);
        assert_eq!(f.counts().fragments, 400);
        assert_eq!(f.counts().packets, 200);
        let mut ids = HashSet::new();
        for pair in all.chunks(2) {
            let (a, b) = (parse(&pair[0]), parse(&pair[1]));
            for fr in pair {
                assert!(fr.len() >= 60, "fragment frames are padded to 60 bytes");
                let FrameKind::Ip { info, ip } = classify(fr).expect("valid fragment").kind else {
                    panic!("not IP")
                };
                assert!(info.fragment && !ip.df && ip.is_v4);
            }
            assert_eq!(a.frag_word, 0x2000, "first: MF, offset 0, no DF");
            assert_eq!(usize::from(b.frag_word) * 8, a.payload.len(), "second: offset, no MF");
            assert_eq!(a.payload.len() % 8, 0);
            assert!(a.payload.len() >= if udp { 8 } else { 20 }, "no tiny first fragment");
            assert_eq!((a.id, a.src, a.dst, a.proto), (b.id, b.src, b.dst, b.proto));
            assert_ne!(a.id, 0);
            assert!(ids.insert(a.id), "identification reused");
            let mut seg = a.payload.clone();
            seg.extend_from_slice(&b.payload);
            let want = usize::from(len.max(if udp { 60 } else { 62 })) - 34;
            assert_eq!(seg.len(), want, "reassembled length, frame_len {len}");
            assert!(l4_checksum_ok(a.src, a.dst, a.proto, &seg), "reassembled checksum");
            let sport = u16::from_be_bytes([seg[0], seg[1]]);
            assert!(est.contains(&(a.src, sport)));
        }
    }
}

// ---- errors ----------------------------------------------------------------------------------

#[test]
fn out_of_range_values_name_their_field() {
    let d = TrafficSpec::default;
    let cases: Vec<(TrafficSpec, &str)> = vec![
        (TrafficSpec { flows: 0, ..d() }, "flows"),
        (TrafficSpec { flows: 10_000_001, ..d() }, "flows"),
        (TrafficSpec { ipv6_share: -0.1, ..d() }, "ipv6_share"),
        (TrafficSpec { udp_share: 1.5, ..d() }, "udp_share"),
        (TrafficSpec { syn_share: f64::NAN, ..d() }, "syn_share"),
        (TrafficSpec { fragment_share: 2.0, ..d() }, "fragment_share"),
        (TrafficSpec { frame_len: 1515, ..d() }, "frame_len"),
        (TrafficSpec { src_v4: (Ipv4Addr::new(10, 0, 0, 0), 33), ..d() }, "src_v4"),
        (TrafficSpec { src_v6: (Ipv6Addr::LOCALHOST, 129), ipv6_share: 0.5, ..d() }, "src_v6"),
        // A /30 has 2 hosts: 129024 sources.
        (TrafficSpec { flows: 200_000, src_v4: (Ipv4Addr::new(10, 0, 0, 0), 30), ..d() }, "src_v4"),
        // A /32 with 64512 flows fills every port: none left for new connections.
        (
            TrafficSpec {
                flows: 64_512,
                syn_share: 0.1,
                src_v4: (Ipv4Addr::new(10, 0, 0, 1), 32),
                ..d()
            },
            "src_v4",
        ),
        (TrafficSpec { dst_port: 0, ..d() }, "dst_port"),
    ];
    for (spec, field) in cases {
        let e = FrameFactory::new(&spec).expect_err(field);
        assert_eq!(e.field(), field, "{e}");
        assert!(e.to_string().starts_with(field), "message does not name {field}: {e}");
    }
    assert!(matches!(
        FrameFactory::new(&TrafficSpec { ipv6_share: 1.01, ..d() }),
        Err(SpecError::Share { field: "ipv6_share", .. })
    ));
    // Boundaries are accepted.
    for spec in [
        TrafficSpec { flows: 1, ..d() },
        TrafficSpec { flows: 10_000_000, ..d() },
        TrafficSpec { flows: 64_512, src_v4: (Ipv4Addr::new(10, 0, 0, 1), 32), ..d() },
        TrafficSpec { frame_len: 1514, ipv6_share: 1.0, udp_share: 1.0, syn_share: 1.0, ..d() },
        // An unused family's prefix does not matter.
        TrafficSpec {
            flows: 200_000,
            src_v4: (Ipv4Addr::new(10, 0, 0, 0), 32),
            ipv6_share: 1.0,
            ..d()
        },
    ] {
        FrameFactory::new(&spec).unwrap_or_else(|e| panic!("{spec:?}: {e}"));
    }
}

// ---- the CLI on DPDK virtual devices ---------------------------------------------------------

fn gen_bin() -> &'static str {
    env!("CARGO_BIN_EXE_spillway-gen")
}

/// EAL arguments without memory options: `--hugepages` (default `preferred`) adds them.
fn eal(prefix: &str, lcores: &str, vdev: &str) -> Vec<String> {
    [
        "--no-pci",
        "-l",
        lcores,
        "--file-prefix",
        prefix,
        "--vdev",
        vdev,
        "--log-level",
        "lib.eal:error",
        "--no-telemetry",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Runs spillway-gen; returns (exit code, stdout, stderr).
fn run_gen(args: &[&str], eal_args: &[String]) -> (i32, String, String) {
    let out = Command::new(gen_bin())
        .args(args)
        .arg("--")
        .args(eal_args)
        .output()
        .expect("run spillway-gen");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The report's numeric fields, from the one JSON line on stdout.
fn report(stdout: &str) -> HashMap<String, f64> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON report in {stdout:?}"));
    let body = line.trim().trim_start_matches('{').trim_end_matches('}');
    body.split(',')
        .filter_map(|kv| {
            let (k, v) = kv.split_once(':')?;
            Some((k.trim_matches('"').to_owned(), v.parse().ok()?))
        })
        .collect()
}

#[test]
#[ignore = "needs root: DPDK EAL, network namespaces, tap devices (scripts/test.sh runs it)"]
fn cli_sends_exactly_count_frames_on_net_null() {
    common::require_root("cli_sends_exactly_count_frames_on_net_null");
    let t = common::tag("spwgen");
    let _dir = common::RuntimeDir(t.clone());
    let (code, out, err) = run_gen(
        &[
            "--port",
            "net_null0",
            "--dst-mac",
            "self",
            "--count",
            "200k",
            "--flows",
            "5000",
            "--json",
            "--stats-interval",
            "0",
        ],
        &eal(&t, "0-1", "net_null0"),
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let r = report(&out);
    assert_eq!(r["sent"], 200_000.0, "{out}");
    assert_eq!(r["refused"], 0.0, "{out}");
    assert_eq!(r["frames"], 200_000.0, "{out}");
    assert_eq!(r["bytes"], 200_000.0 * 64.0, "{out}");
    assert_eq!(r["tcp"], 200_000.0, "{out}");
    assert!(r["mpps"] > 0.0 && r["elapsed_s"] > 0.0, "{out}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
#[ignore = "needs root: DPDK EAL, network namespaces, tap devices (scripts/test.sh runs it)"]
fn cli_loopback_on_net_ring_receives_every_frame_at_the_rate() {
    common::require_root("cli_loopback_on_net_ring_receives_every_frame_at_the_rate");
    let t = common::tag("spwgenring");
    let _dir = common::RuntimeDir(t.clone());
    let (code, out, err) = run_gen(
        &[
            "--port",
            "net_ring0",
            "--dst-mac",
            "self",
            "--count",
            "20000",
            "--rate",
            "100k",
            "--rx",
            "--json",
            "--ipv6-share",
            "0.5",
            "--udp-share",
            "0.5",
            "--syn-share",
            "0.1",
            "--fragment-share",
            "0.2",
            "--stamp",
            "--stats-interval",
            "0.05",
        ],
        &eal(&t, "0-1", "net_ring0"),
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let r = report(&out);
    assert_eq!(r["sent"], 20_000.0, "{out}");
    assert_eq!(r["received"], 20_000.0, "{out}");
    assert_eq!(r["refused"], 0.0, "{out}");
    // 20000 frames at 100k/s: 0.2 s (paced, not flat out).
    assert!((0.18..0.5).contains(&r["elapsed_s"]), "{out}");
    assert!(r["fragments"] > 0.0 && r["ipv6"] > 0.0 && r["syn"] > 0.0, "{out}");
    assert!(err.contains("spillway-gen: t="), "no progress lines: {err}");
}

#[test]
fn cli_errors_are_clear_and_never_panics() {
    // Checked before DPDK starts: no root needed.
    let none: Vec<String> = vec!["--no-huge".into()];
    for (args, want) in [
        (
            &["--port", "x", "--dst-mac", "self", "--flows", "0"][..],
            "--flows: flows: 0 is out of range",
        ),
        (&["--port", "x", "--dst-mac", "self", "--ipv6-share", "1.5"][..], "--ipv6-share"),
        (&["--port", "x", "--dst-mac", "self", "--size", "2000"][..], "--size: frame_len"),
        (&["--port", "x"][..], "--dst-mac is required"),
        (
            &["--port", "x", "--dst-mac", "self", "--dst", "198.18.0.1", "--ipv6-share", "0.5"][..],
            "no IPv6 destination",
        ),
    ] {
        let (code, out, err) = run_gen(args, &none);
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    for args in [
        &["--port", "x", "--dst-mac", "self", "--rate", "fast"][..],
        &["--port", "x", "--dst-mac", "nope"][..],
        &["--port", "x", "--dst-mac", "self", "--src-v4", "10.0.0.0/40"][..],
    ] {
        let (code, _, err) = run_gen(args, &none);
        assert_eq!(code, 2, "clap usage error for {args:?}: {err}");
        assert!(err.contains("invalid value"), "{err}");
    }
}

/// `--hugepages`: the report says which memory the run had; `required` without enough free
/// hugepages fails before EAL with the fix.
#[test]
#[ignore = "needs root: DPDK EAL, network namespaces, tap devices (scripts/test.sh runs it)"]
fn cli_reports_the_memory_it_ran_on() {
    common::require_root("cli_reports_the_memory_it_ran_on");
    common::reserve_hugepages(128);
    let send = ["--port", "net_null0", "--dst-mac", "self", "--count", "1000", "--json"];
    for (policy, on_hugepages) in [("required", true), ("off", false)] {
        let t = common::tag("spwgenmem");
        let _dir = common::RuntimeDir(t.clone());
        let mut args = send.to_vec();
        args.extend(["--hugepages", policy]);
        let (code, out, err) = run_gen(&args, &eal(&t, "0-1", "net_null0"));
        assert_eq!(code, 0, "{policy}: {out}\n{err}");
        assert!(out.contains(&format!("\"hugepages\":{on_hugepages}}}")), "{policy}: {out}");
        let on = if on_hugepages { "on hugepages" } else { "on ordinary memory (--no-huge)" };
        // 8191 mbufs x 2368 B + (512 + 1024) x 64 B + 64 MiB = 83 MiB.
        assert!(err.contains(&format!("memory: 83 MiB reserved at start {on}")), "{policy}: {err}");
    }
    let t = common::tag("spwgenmem");
    let _dir = common::RuntimeDir(t.clone());
    let mut args = send.to_vec();
    args.extend(["--hugepages", "required", "--mbufs", "4000000"]);
    let (code, out, err) = run_gen(&args, &eal(&t, "0-1", "net_null0"));
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(err.contains("--hugepages required: not enough hugepages"), "{err}");
    assert!(err.contains("/proc/sys/vm/nr_hugepages"), "{err}");
    let (code, _, err) = run_gen(&["--hugepages", "maybe"], &eal(&t, "0-1", "net_null0"));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`maybe` is not one of `required`, `preferred`, `off`"), "{err}");
}

/// The errors DPDK itself reports (unknown port, too few lcores, bad EAL flag): clear, no panic.
#[test]
#[ignore = "needs root: DPDK EAL, network namespaces, tap devices (scripts/test.sh runs it)"]
fn cli_dpdk_errors_are_clear_and_never_panic() {
    common::require_root("cli_dpdk_errors_are_clear_and_never_panic");
    let t = common::tag("spwgenerr");
    let _dir = common::RuntimeDir(t.clone());
    let (code, _, err) = run_gen(
        &["--port", "net_nope0", "--dst-mac", "self", "--count", "1"],
        &eal(&t, "0-1", "net_null0"),
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--port net_nope0") && err.contains("no DPDK port named"), "{err}");
    assert!(err.contains("net_null0"), "the ports found are listed: {err}");
    let t2 = common::tag("spwgenerr2");
    let _dir2 = common::RuntimeDir(t2.clone());
    let (code, _, err) = run_gen(
        &["--port", "net_null0", "--dst-mac", "self", "--count", "1"],
        &eal(&t2, "0", "net_null0"),
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("at least two"), "{err}");
    let (code, _, err) = run_gen(
        &["--port", "net_null0", "--dst-mac", "self", "--count", "1"],
        &["--definitely-not-an-eal-flag".to_owned()],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("DPDK EAL initialisation failed"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn udp_frames_carry_the_given_payload_and_tcp_frames_do_not() {
    // A QUIC short header: the fixed bit, then an 8-octet connection ID.
    let quic = [0x40, 0x07, 0x0a, 0x01, 0x02, 1, 2, 3, 4];
    for (len, stamp) in [(64u16, false), (64, true), (61, true), (300, true)] {
        let spec = TrafficSpec {
            flows: 100,
            frame_len: len,
            ipv6_share: 0.5,
            udp_share: 0.5,
            syn_share: 0.2,
            fragment_share: 0.0,
            stamp,
            udp_payload: quic.to_vec(),
            ..TrafficSpec::default()
        };
        let (_, out) = frames(&spec, 2000);
        let mut udp = 0;
        for fr in &out {
            let p = parse(fr);
            assert!(l4_checksum_ok(p.src, p.dst, p.proto, &p.payload), "{fr:02x?}");
            let data = &p.payload[if p.proto == 17 { 8 } else { 20 }..];
            if p.proto == 17 {
                udp += 1;
                assert_eq!(data[..quic.len()], quic, "{fr:02x?}");
                // Room for the stamp after it.
                assert!(data.len() >= quic.len() + 8, "{fr:02x?}");
            } else {
                assert!(data[..data.len() - 8].iter().all(|&b| b == 0), "{fr:02x?}");
            }
        }
        assert!(udp > 800, "{udp} UDP frames of 2000");
    }
    let too_long = TrafficSpec { udp_payload: vec![0; 1445], ..TrafficSpec::default() };
    let e = FrameFactory::new(&too_long).unwrap_err();
    assert_eq!(e, SpecError::UdpPayload(1445));
    assert!(e.to_string().starts_with("udp_payload: 1445 octets"), "{e}");
    let longest = TrafficSpec {
        udp_payload: vec![0x40; 1444],
        udp_share: 1.0,
        ipv6_share: 1.0,
        ..TrafficSpec::default()
    };
    let (_, out) = frames(&longest, 10);
    assert!(out.iter().all(|f| f.len() == 1514), "the longest IPv6 UDP frame");
}
