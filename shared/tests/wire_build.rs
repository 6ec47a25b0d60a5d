//! The builders, checked against frames written by someone else: replies and requests the
//! Linux kernel produced for the same inputs (`wire_fixtures`), and encapsulations computed
//! by the independent Python implementation in `fuzz/make_corpus.py --expect` (constants
//! below). Round trips then parse the output with `classify`.

mod wire_fixtures;

use spillway_core::addr::Addr;
use spillway_core::flow::proto;
use spillway_core::wire::build::{
    self, arp_reply, arp_request, encap_len, icmp_echo_reply, icmp_frag_needed,
    icmpv6_packet_too_big, neighbor_advertisement, neighbor_solicitation, set_macs, write_encap,
    BuildError, EncapKind, EncapParams, OuterV4, OuterV6,
};
use spillway_core::wire::{classify, FrameKind, Ipv4Packet};
use wire_fixtures::*;

const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0x0c, 1];
const ROUTER_MAC: [u8; 6] = [2, 0, 0, 0, 0x0a, 1];
const LB_MAC: [u8; 6] = [2, 0, 0, 0, 0x1b, 1];
const BACKEND_MAC: [u8; 6] = [2, 0, 0, 0, 0xbe, 1];
const FLOW_HASH: u64 = 0x1234_5678_9abc_def0;

fn a(s: &str) -> Addr {
    s.parse().unwrap()
}

/// Inner IPv4 TCP SYN, DSCP/ECN 0x2e.
const INNER_V4: &str = concat!(
    "452e003c1c4640004006b800cb007109c633640a9c4000500000000100000000a002faf04a350000020405b4",
    "0402080a000000010000000001030307",
);

/// Inner IPv6 TCP SYN, traffic class 0xb8.
const INNER_V6: &str = concat!(
    "6b8000000028064020010db8000c0000000000000000000920010db80100000000000000000000109c400050",
    "0000000100000000a002faf053e60000020405b40402080a000000010000000001030307",
);

/// IPIP: outer IPv4 (DF, id 0, TTL 64, proto 4) + inner.
const EXPECT_IPIP_V4: &str = concat!(
    "02000000be01020000001b010800452e00500000400040046e73c00002010a010007452e003c1c4640004006",
    "b800cb007109c633640a9c4000500000000100000000a002faf04a350000020405b40402080a000000010000",
    "000001030307",
);

/// GUE over IPv4, IPv6 inner: UDP checksum 0.
const EXPECT_GUE_V4_6IN4: &str = concat!(
    "02000000be01020000001b01080045b8006c0000400040116dc0c00002010a010007def017c0005800006b80",
    "00000028064020010db8000c0000000000000000000920010db80100000000000000000000109c4000500000",
    "000100000000a002faf053e60000020405b40402080a000000010000000001030307",
);

/// IPIP over IPv6 (next header 4), flow label from hash.
const EXPECT_IPIP_V6_4IN6: &str = concat!(
    "02000000be01020000001b0186dd62e88888003c044020010db8000200000000000000000001fd0000010000",
    "00000000000000000007452e003c1c4640004006b800cb007109c633640a9c4000500000000100000000a002",
    "faf04a350000020405b40402080a000000010000000001030307",
);

/// GUE over IPv6, IPv4 inner: full UDP checksum.
const EXPECT_GUE_V6: &str = concat!(
    "02000000be01020000001b0186dd62e888880044114020010db8000200000000000000000001fd0000010000",
    "00000000000000000007def017c000444467452e003c1c4640004006b800cb007109c633640a9c4000500000",
    "000100000000a002faf04a350000020405b40402080a000000010000000001030307",
);

/// NA fd09:1::1 -> fd09:1::2, S|O, TLLA 02:00:00:00:0a:01.
const EXPECT_NA: &str = concat!(
    "020000000c01020000000a0186dd6000000000203afffd090001000000000000000000000001fd0900010000",
    "000000000000000000028800127e60000000fd0900010000000000000000000000010201020000000a01",
);

fn params(kind: EncapKind, v6: bool) -> EncapParams {
    let (src, dst) =
        if v6 { (a("2001:db8:2::1"), a("fd00:1::7")) } else { (a("192.0.2.1"), a("10.1.0.7")) };
    EncapParams {
        kind,
        dst_mac: BACKEND_MAC,
        src_mac: LB_MAC,
        outer_src: src,
        outer_dst: dst,
        flow_hash: FLOW_HASH,
        gue_dport: build::DEFAULT_GUE_PORT,
    }
}

/// Put `inner` behind `encap_len` bytes of headroom (with garbage in it) and encapsulate.
fn encap(kind: EncapKind, v6: bool, inner: &[u8]) -> Vec<u8> {
    let hdr = encap_len(kind, v6);
    let mut buf = vec![0xee; hdr];
    buf.extend_from_slice(inner);
    let n = write_encap(&mut buf, &params(kind, v6), inner.len()).unwrap();
    assert_eq!(n, buf.len());
    buf
}

#[test]
fn encap_lengths() {
    assert_eq!(encap_len(EncapKind::Ipip, false), 14 + 20);
    assert_eq!(encap_len(EncapKind::Gue, false), 14 + 20 + 8);
    assert_eq!(encap_len(EncapKind::Ipip, true), 14 + 40);
    assert_eq!(encap_len(EncapKind::Gue, true), 14 + 40 + 8);
}

#[test]
fn ipip_v4_matches_the_reference() {
    assert_eq!(encap(EncapKind::Ipip, false, &hex(INNER_V4)), hex(EXPECT_IPIP_V4));
}

#[test]
fn gue_v4_outer_v6_inner_has_zero_udp_checksum() {
    assert_eq!(encap(EncapKind::Gue, false, &hex(INNER_V6)), hex(EXPECT_GUE_V4_6IN4));
}

#[test]
fn ipip_4in6_matches_the_reference() {
    assert_eq!(encap(EncapKind::Ipip, true, &hex(INNER_V4)), hex(EXPECT_IPIP_V6_4IN6));
}

#[test]
fn gue_v6_outer_has_a_full_udp_checksum() {
    assert_eq!(encap(EncapKind::Gue, true, &hex(INNER_V4)), hex(EXPECT_GUE_V6));
}

/// Round trip: the outer packet classifies as the tunnel it is, with the GUE source port
/// derived from the flow hash, and the inner packet still classifies as the original flow.
#[test]
fn encapsulations_round_trip_through_classify() {
    let inner4 = hex(INNER_V4);
    let inner6 = hex(INNER_V6);
    for (kind, v6, inner, outer_proto) in [
        (EncapKind::Ipip, false, &inner4, 4),
        (EncapKind::Ipip, false, &inner6, 41),
        (EncapKind::Ipip, true, &inner4, 4),
        (EncapKind::Ipip, true, &inner6, 41),
        (EncapKind::Gue, false, &inner4, proto::UDP),
        (EncapKind::Gue, true, &inner6, proto::UDP),
    ] {
        let frame = encap(kind, v6, inner);
        let f = classify(&frame).unwrap();
        assert_eq!((f.dst_mac, f.src_mac), (BACKEND_MAC, LB_MAC));
        let FrameKind::Ip { info, ip } = f.kind else { panic!("{f:?}") };
        assert_eq!(info.proto, outer_proto);
        assert_eq!(info.src, params(kind, v6).outer_src);
        assert_eq!(info.dst, params(kind, v6).outer_dst);
        assert_eq!((ip.is_v4, ip.df, ip.ttl), (!v6, true, 64));
        assert_eq!(ip.frame_len(), frame.len());
        if kind == EncapKind::Gue {
            assert_eq!((info.sport, info.dport), (build::gue_source_port(FLOW_HASH), 6080));
            assert!((49152..=65535).contains(&info.sport));
        }
        // The inner packet, behind its own Ethernet header, is the original flow.
        let at = encap_len(kind, v6);
        let mut inner_frame = frame[..14].to_vec();
        let et: u16 = if inner[0] >> 4 == 4 { 0x0800 } else { 0x86dd };
        inner_frame[12..14].copy_from_slice(&et.to_be_bytes());
        inner_frame.extend_from_slice(&frame[at..]);
        let FrameKind::Ip { info, .. } = classify(&inner_frame).unwrap().kind else { panic!() };
        assert_eq!((info.sport, info.dport, info.proto), (40000, 80, proto::TCP));
    }
}

#[test]
fn encap_errors() {
    let inner = hex(INNER_V4);
    let hdr = encap_len(EncapKind::Gue, true);
    let mut buf = vec![0u8; hdr + inner.len()];
    buf[hdr..].copy_from_slice(&inner);
    let p = params(EncapKind::Gue, true);
    assert_eq!(write_encap(&mut buf[..hdr + 10], &p, inner.len()), Err(BuildError::BufferTooSmall));
    let mixed = EncapParams { outer_dst: a("10.1.0.7"), ..p };
    assert_eq!(write_encap(&mut buf, &mixed, inner.len()), Err(BuildError::AddressFamily));
    buf[hdr] = 0x55;
    assert_eq!(write_encap(&mut buf, &p, inner.len()), Err(BuildError::WrongKind));
    let mut big = vec![0u8; 14 + 20 + 65535];
    big[34] = 0x45;
    let p4 = params(EncapKind::Ipip, false);
    assert_eq!(write_encap(&mut big, &p4, 65535 - 10), Err(BuildError::TooLong));
}

/// The per-backend prebuilt headers give the reference frames too (IPIP with an IPv4 inner,
/// GUE with an IPv6 inner, several DSCP values and lengths), and refuse what `write_encap`
/// refuses.
#[test]
fn prebuilt_outer_v4_matches_the_reference() {
    let p = params(EncapKind::Ipip, false);
    let outer = OuterV4::new(p.dst_mac, p.src_mac, p.outer_src, p.outer_dst).unwrap();
    let with = |kind: EncapKind, inner: &[u8]| {
        let hdr = encap_len(kind, false);
        let mut buf = vec![0xee; hdr];
        buf.extend_from_slice(inner);
        let n = outer.write(&mut buf, kind, inner.len(), FLOW_HASH, build::DEFAULT_GUE_PORT);
        assert_eq!(n, Ok(buf.len()));
        buf
    };
    assert_eq!(with(EncapKind::Ipip, &hex(INNER_V4)), hex(EXPECT_IPIP_V4));
    assert_eq!(with(EncapKind::Gue, &hex(INNER_V6)), hex(EXPECT_GUE_V4_6IN4));
    // Other DSCP/ECN values and lengths: the same bytes as the general builder, whose outer
    // IPv4 checksum is recomputed here from the header.
    for (tos, pad) in [(0u8, 0usize), (0xff, 1), (0x10, 333), (0xb8, 1400)] {
        for kind in [EncapKind::Ipip, EncapKind::Gue] {
            let mut inner = hex(INNER_V4);
            inner[1] = tos;
            inner.resize(inner.len() + pad, 0x5a);
            let got = with(kind, &inner);
            assert_eq!(got, encap(kind, false, &inner), "tos {tos:#x} pad {pad} {kind:?}");
            let ip = &got[14..34];
            assert_eq!(ip[1], tos);
            let sum: u32 = ip.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
            assert_eq!((sum % 0xffff) as u16, 0, "header checksum");
        }
    }
    assert_eq!(OuterV4::new(p.dst_mac, p.src_mac, a("2001:db8:2::1"), p.outer_dst), None);
    assert_eq!(OuterV4::new(p.dst_mac, p.src_mac, p.outer_src, a("fd00:1::7")), None);
    let inner = hex(INNER_V4);
    let mut short = vec![0u8; 34 + 10];
    let w = outer.write(&mut short, EncapKind::Ipip, inner.len(), 0, 0);
    assert_eq!(w, Err(BuildError::BufferTooSmall));
    let mut buf = vec![0u8; 34 + inner.len()];
    buf[34..].copy_from_slice(&inner);
    buf[34] = 0x55;
    assert_eq!(
        outer.write(&mut buf, EncapKind::Ipip, inner.len(), 0, 0),
        Err(BuildError::WrongKind)
    );
    let mut big = vec![0u8; 14 + 20 + 65535];
    big[34] = 0x45;
    let w = outer.write(&mut big, EncapKind::Ipip, 65535 - 10, 0, 0);
    assert_eq!(w, Err(BuildError::TooLong));
}

/// `write_ipip`, the packet path's way for IPIP over IPv4, writes what `write` does (the
/// reference frames, the general builder's bytes) with the inner length taken from the frame,
/// and refuses what it refuses.
#[test]
fn prebuilt_outer_v4_ipip_takes_the_inner_length_from_the_frame() {
    let p = params(EncapKind::Ipip, false);
    let outer = OuterV4::new(p.dst_mac, p.src_mac, p.outer_src, p.outer_dst).unwrap();
    let with = |inner: &[u8]| {
        let mut buf = vec![0xee; 34];
        buf.extend_from_slice(inner);
        assert_eq!(outer.write_ipip(&mut buf), Ok(buf.len()));
        buf
    };
    assert_eq!(with(&hex(INNER_V4)), hex(EXPECT_IPIP_V4));
    for (base, tc) in [(INNER_V4, 1usize), (INNER_V6, 0)] {
        for (tos, pad) in [(0u8, 0usize), (0xff, 1), (0x10, 333), (0xb8, 1400)] {
            let mut inner = hex(base);
            // The DSCP/ECN byte (IPv4), or the traffic class across the first two bytes (IPv6).
            if tc == 1 {
                inner[1] = tos;
            } else {
                inner[0] = 0x60 | (tos >> 4);
                inner[1] = (inner[1] & 0x0f) | (tos << 4);
            }
            inner.resize(inner.len() + pad, 0x5a);
            let got = with(&inner);
            assert_eq!(got, encap(EncapKind::Ipip, false, &inner), "tos {tos:#x} pad {pad}");
            assert_eq!(got[14 + 1], tos);
            assert_eq!(got[14 + 9], if tc == 1 { 4 } else { 41 }, "protocol");
            let total = u16::from_be_bytes([got[16], got[17]]);
            assert_eq!(usize::from(total), 20 + inner.len(), "total length");
        }
    }
    // Shorter than the headers' room, or no inner packet version to read.
    assert_eq!(outer.write_ipip(&mut [0u8; 33]), Err(BuildError::BufferTooSmall));
    assert_eq!(outer.write_ipip(&mut [0u8; 34]), Err(BuildError::WrongKind));
    let mut buf = vec![0u8; 34 + 40];
    buf[34] = 0x55;
    assert_eq!(outer.write_ipip(&mut buf), Err(BuildError::WrongKind));
    let mut big = vec![0u8; 34 + 65535 - 19];
    big[34] = 0x45;
    assert_eq!(outer.write_ipip(&mut big), Err(BuildError::TooLong));
    big.truncate(34 + 65535 - 20);
    assert_eq!(outer.write_ipip(&mut big), Ok(big.len()), "the largest IPv4 packet");
}

/// The prebuilt IPv6 headers (IP-in-IPv6) give the reference 4in6 frame, and the general
/// builder's bytes for IPv4 and IPv6 inners of several traffic classes, lengths and flow
/// hashes (the flow label); they refuse what `write_encap` refuses.
#[test]
fn prebuilt_outer_v6_matches_the_reference() {
    let p = params(EncapKind::Ipip, true);
    let outer = OuterV6::new(p.dst_mac, p.src_mac, p.outer_src, p.outer_dst).unwrap();
    let with = |inner: &[u8], hash: u64| {
        let mut buf = vec![0xee; 54];
        buf.extend_from_slice(inner);
        assert_eq!(outer.write(&mut buf, inner.len(), hash), Ok(buf.len()));
        buf
    };
    assert_eq!(with(&hex(INNER_V4), FLOW_HASH), hex(EXPECT_IPIP_V6_4IN6));
    for (tos, pad, hash) in
        [(0u8, 0usize, 0u64), (0xff, 1, u64::MAX), (0xb8, 1400, 0x1234_5678_9abc)]
    {
        let mut v4 = hex(INNER_V4);
        v4[1] = tos;
        v4.resize(v4.len() + pad, 0x5a);
        let mut v6 = hex(INNER_V6);
        v6[0] = 0x60 | (tos >> 4);
        v6[1] = (tos << 4) | (v6[1] & 0x0f);
        v6.resize(v6.len() + pad, 0x5a);
        for inner in [v4, v6] {
            let general = {
                let mut buf = vec![0xee; 54];
                buf.extend_from_slice(&inner);
                let q = EncapParams { flow_hash: hash, ..p };
                assert_eq!(write_encap(&mut buf, &q, inner.len()), Ok(buf.len()));
                buf
            };
            assert_eq!(with(&inner, hash), general, "tos {tos:#x} pad {pad} hash {hash:#x}");
        }
    }
    assert_eq!(OuterV6::new(p.dst_mac, p.src_mac, a("192.0.2.1"), p.outer_dst), None);
    assert_eq!(OuterV6::new(p.dst_mac, p.src_mac, p.outer_src, a("10.1.0.7")), None);
    let inner = hex(INNER_V4);
    let mut short = vec![0u8; 54 + 10];
    assert_eq!(outer.write(&mut short, inner.len(), 0), Err(BuildError::BufferTooSmall));
    let mut buf = vec![0u8; 54 + inner.len()];
    buf[54..].copy_from_slice(&inner);
    buf[54] = 0x55;
    assert_eq!(outer.write(&mut buf, inner.len(), 0), Err(BuildError::WrongKind));
    let mut big = vec![0u8; 54 + 65536];
    big[54] = 0x45;
    assert_eq!(outer.write(&mut big, 65536, 0), Err(BuildError::TooLong));
}

#[test]
fn gue_port_and_flow_label_spread() {
    assert_eq!(build::gue_source_port(0), 49152);
    assert_eq!(build::gue_source_port(u64::MAX), 65535);
    assert_eq!(build::gue_source_port(0x4001), 49153);
    assert!(build::flow_label(u64::MAX) <= 0xfffff);
    assert_ne!(build::flow_label(1), build::flow_label(2));
}

#[test]
fn l2_rewrite() {
    let mut f = hex(TCP_SYN_V4);
    set_macs(&mut f, BACKEND_MAC, LB_MAC).unwrap();
    assert_eq!(&f[..12], &[BACKEND_MAC, LB_MAC].concat()[..]);
    assert_eq!(&f[12..], &hex(TCP_SYN_V4)[12..]);
    assert_eq!(set_macs(&mut f[..10], BACKEND_MAC, LB_MAC), Err(BuildError::BufferTooSmall));
}

/// The router's kernel answered the captured request; so must we, byte for byte.
#[test]
fn arp_reply_matches_the_kernel() {
    let mut f = hex(ARP_REQUEST);
    let fr = classify(&f).unwrap();
    assert_eq!(arp_reply(&mut f, &fr, ROUTER_MAC), Ok(42));
    assert_eq!(f, hex(ARP_REPLY));
    // With room, the reply is padded to 60 bytes of zeros.
    let mut f = hex(ARP_REQUEST);
    f.resize(60, 0xaa);
    assert_eq!(arp_reply(&mut f, &fr, ROUTER_MAC), Ok(60));
    assert_eq!(&f[..42], &hex(ARP_REPLY)[..]);
    assert!(f[42..].iter().all(|&b| b == 0));
    // A reply is not answered.
    let mut r = hex(ARP_REPLY);
    let rf = classify(&r).unwrap();
    assert_eq!(arp_reply(&mut r, &rf, ROUTER_MAC), Err(BuildError::WrongKind));
}

#[test]
fn arp_request_matches_the_kernel() {
    let mut buf = [0xaau8; 64];
    assert_eq!(arp_request(&mut buf, CLIENT_MAC, a("10.9.1.2"), a("10.9.1.1")), Ok(60));
    assert_eq!(&buf[..42], &hex(ARP_REQUEST)[..]);
    assert!(buf[42..60].iter().all(|&b| b == 0));
    assert_eq!(
        arp_request(&mut buf, CLIENT_MAC, a("fd09::1"), a("10.9.1.1")),
        Err(BuildError::AddressFamily)
    );
}

#[test]
fn neighbor_solicitation_matches_the_kernel() {
    let mut buf = [0u8; 128];
    let n = neighbor_solicitation(&mut buf, CLIENT_MAC, a("fd09:1::2"), a("fd09:1::1")).unwrap();
    assert_eq!(&buf[..n], &hex(NS)[..]);
}

#[test]
fn neighbor_advertisement_answers_the_captured_solicitation() {
    let mut f = hex(NS);
    let fr = classify(&f).unwrap();
    let n = neighbor_advertisement(&mut f, &fr, ROUTER_MAC).unwrap();
    assert_eq!(&f[..n], &hex(EXPECT_NA)[..]);
    let back = classify(&f[..n]).unwrap();
    let FrameKind::NeighborAdvertisement { target, target_mac, flags, src, .. } = back.kind else {
        panic!("{back:?}")
    };
    assert_eq!(
        (src, target, target_mac, flags),
        (a("fd09:1::1"), a("fd09:1::1"), Some(ROUTER_MAC), 0x60)
    );
}

/// Duplicate address detection: the solicitation comes from `::` without a source
/// link-layer option; the answer goes to all-nodes with Solicited clear (RFC 4861 §7.2.4).
#[test]
fn neighbor_advertisement_for_dad_goes_to_all_nodes() {
    let mut f = hex(NS);
    f[22..38].fill(0); // source ::
    f[14 + 4..14 + 6].copy_from_slice(&24u16.to_be_bytes()); // drop the SLLA option
    f.truncate(14 + 40 + 24);
    let fr = classify(&f).unwrap();
    assert!(matches!(fr.kind, FrameKind::NeighborSolicitation { source_mac: None, .. }));
    // 78 bytes received; the reply needs 86: the mbuf has tailroom.
    assert_eq!(neighbor_advertisement(&mut f, &fr, ROUTER_MAC), Err(BuildError::BufferTooSmall));
    f.resize(128, 0);
    let n = neighbor_advertisement(&mut f, &fr, ROUTER_MAC).unwrap();
    assert_eq!(n, 86);
    assert_eq!(&f[..6], &[0x33, 0x33, 0, 0, 0, 1]);
    let back = classify(&f[..n]).unwrap();
    let FrameKind::NeighborAdvertisement { flags, .. } = back.kind else { panic!("{back:?}") };
    assert_eq!(flags, 0x20);
    assert_eq!(&f[14 + 24..14 + 40], &a("ff02::1").0);
}

/// The ICMP message equals the kernel's reply; the IP header is the request's with the
/// addresses swapped (the kernel's own checksum 0xaf39 stays valid under the swap).
#[test]
fn icmp_echo_reply_matches_the_kernel() {
    let req = hex(ICMP_ECHO_V4);
    let mut f = req.clone();
    let fr = classify(&f).unwrap();
    let n = icmp_echo_reply(&mut f, &fr).unwrap();
    assert_eq!(n, req.len());
    let kernel = hex(ICMP_ECHO_V4_REPLY);
    assert_eq!(&f[..12], &kernel[..12]); // MACs swapped
    assert_eq!(&f[34..], &kernel[34..]); // ICMP message, checksum included
    let mut want_ip = req[14..34].to_vec();
    want_ip[12..16].copy_from_slice(&req[30..34]);
    want_ip[16..20].copy_from_slice(&req[26..30]);
    assert_eq!(&f[14..34], &want_ip[..]);
}

#[test]
fn icmp_echo_reply_strips_ipv4_options() {
    let mut f = hex(ICMP_ECHO_RR);
    let fr = classify(&f).unwrap();
    let n = icmp_echo_reply(&mut f, &fr).unwrap();
    assert_eq!(n, 14 + 20 + 64);
    let kernel = hex(ICMP_ECHO_RR_REPLY);
    assert_eq!(&f[34..n], &kernel[74..]); // same ICMP reply as the kernel's
    let ip = Ipv4Packet::new_checked(&f[14..n]).unwrap();
    assert_eq!((ip.header_len(), ip.total_len(), ip.ttl()), (20, 84, 64));
    assert_eq!((ip.src_addr(), ip.dst_addr()), ([10, 9, 2, 2], [10, 9, 1, 2]));
    assert!(ip.verify_checksum());
}

#[test]
fn icmpv6_echo_reply_matches_the_kernel() {
    let req = hex(ICMPV6_ECHO);
    let mut f = req.clone();
    let fr = classify(&f).unwrap();
    let n = icmp_echo_reply(&mut f, &fr).unwrap();
    assert_eq!(n, req.len());
    let kernel = hex(ICMPV6_ECHO_REPLY);
    assert_eq!(&f[54..], &kernel[54..]); // ICMPv6 message, checksum included
    assert_eq!(&f[14 + 8..14 + 24], &req[14 + 24..14 + 40]);
    assert_eq!(&f[14 + 24..14 + 40], &req[14 + 8..14 + 24]);
    assert_eq!(f[14 + 7], 64);
    // Not an echo request: refused.
    let mut g = hex(TCP_SYN_V4);
    let gf = classify(&g).unwrap();
    assert_eq!(icmp_echo_reply(&mut g, &gf), Err(BuildError::WrongKind));
}

/// The router's kernel sent this frag-needed for this TCP segment; ours carries the same
/// ICMP message (576-byte rule, same quote, same checksum).
#[test]
fn icmp_frag_needed_matches_the_kernel() {
    let seg = hex(TCP_DATA_V4);
    let mut buf = [0u8; 2048];
    let n = icmp_frag_needed(&mut buf, CLIENT_MAC, ROUTER_MAC, a("10.9.1.1"), &seg[14..], 1280)
        .unwrap();
    let kernel = hex(FRAG_NEEDED_TCP);
    assert_eq!(n, kernel.len());
    assert_eq!(&buf[..12], &kernel[..12]);
    assert_eq!(&buf[34..n], &kernel[34..]);
    let ip = Ipv4Packet::new_checked(&buf[14..n]).unwrap();
    assert_eq!((ip.total_len(), ip.protocol(), ip.ttl(), ip.dont_frag()), (576, 1, 64, true));
    assert_eq!((ip.src_addr(), ip.dst_addr()), ([10, 9, 1, 1], [10, 9, 1, 2]));
    assert!(ip.verify_checksum());
    // It classifies as an error for the segment's flow, reversed.
    let f = classify(&buf[..n]).unwrap();
    let FrameKind::IcmpError { info, mtu, .. } = f.kind else { panic!("{f:?}") };
    assert_eq!((info.sport, info.dport, mtu), (80, 40000, Some(1280)));
    // A small buffer quotes less, but at least the header and 8 bytes.
    let mut small = [0u8; 14 + 28 + 28];
    let n = icmp_frag_needed(&mut small, CLIENT_MAC, ROUTER_MAC, a("10.9.1.1"), &seg[14..], 1280);
    assert_eq!(n, Ok(70));
    let mut tiny = [0u8; 14 + 28 + 27];
    let r = icmp_frag_needed(&mut tiny, CLIENT_MAC, ROUTER_MAC, a("10.9.1.1"), &seg[14..], 1280);
    assert_eq!(r, Err(BuildError::BufferTooSmall));
}

#[test]
fn icmpv6_packet_too_big_matches_the_kernel() {
    let frag = hex(V6_FRAG_FIRST);
    let mut buf = [0u8; 2048];
    let n =
        icmpv6_packet_too_big(&mut buf, CLIENT_MAC, ROUTER_MAC, a("fd09:1::1"), &frag[14..], 1280)
            .unwrap();
    let kernel = hex(PTB_V6);
    assert_eq!(n, kernel.len());
    assert_eq!(&buf[54..n], &kernel[54..]);
    assert_eq!(&buf[14 + 4..14 + 40], &kernel[14 + 4..14 + 40]); // all but the flow label
}

/// RFC 1122 §3.2.2 / RFC 4443 §2.4(e): no ICMP error about an ICMP error, a later
/// fragment, or a multicast source.
#[test]
fn icmp_errors_about_errors_are_not_sent() {
    let mut buf = [0u8; 2048];
    let me4 = a("10.9.1.1");
    for off in [hex(PORT_UNREACH_V4), hex(V4_FRAG_LAST)] {
        let r = icmp_frag_needed(&mut buf, CLIENT_MAC, ROUTER_MAC, me4, &off[14..], 1280);
        assert_eq!(r, Err(BuildError::NotAllowed));
    }
    let mut mcast = hex(UDP_DNS_V4);
    mcast[26] = 224;
    let r = icmp_frag_needed(&mut buf, CLIENT_MAC, ROUTER_MAC, me4, &mcast[14..], 1280);
    assert_eq!(r, Err(BuildError::NotAllowed));
    let off = hex(PORT_UNREACH_V6);
    let r =
        icmpv6_packet_too_big(&mut buf, CLIENT_MAC, ROUTER_MAC, a("fd09:1::1"), &off[14..], 1280);
    assert_eq!(r, Err(BuildError::NotAllowed));
    // Echo requests are fine to complain about.
    let echo = hex(ICMP_ECHO_V4);
    assert!(icmp_frag_needed(&mut buf, CLIENT_MAC, ROUTER_MAC, me4, &echo[14..], 1280).is_ok());
    assert_eq!(
        icmp_frag_needed(&mut buf, CLIENT_MAC, ROUTER_MAC, me4, &echo[14..20], 1280),
        Err(BuildError::WrongKind)
    );
}

#[test]
fn build_errors_have_labels() {
    let names: std::collections::BTreeSet<_> = BuildError::ALL.iter().map(|e| e.as_str()).collect();
    assert_eq!(names.len(), BuildError::ALL.len());
}
