//! `classify` on real frames (`wire_fixtures`, captured from Linux) and on frames crafted by
//! `fuzz/make_corpus.py`: the `Frame` each one yields, field by field.

mod wire_fixtures;

use spillway_core::addr::Addr;
use spillway_core::flow::{proto, tcp_flags, PacketInfo};
use spillway_core::wire::{classify, Frame, FrameKind, IpMeta};
use wire_fixtures::*;

const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0x0c, 1];
const ROUTER_MAC: [u8; 6] = [2, 0, 0, 0, 0x0a, 1];

fn a(s: &str) -> Addr {
    s.parse().unwrap()
}

fn cls(h: &str) -> Frame {
    classify(&hex(h)).unwrap()
}

fn corpus(name: &str) -> Vec<u8> {
    let path = format!("{}/../fuzz/corpus/parse/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e} (run fuzz/make_corpus.py)"))
}

fn ip_of(f: &Frame) -> (PacketInfo, IpMeta) {
    match f.kind {
        FrameKind::Ip { info, ip } => (info, ip),
        other => panic!("not Ip: {other:?}"),
    }
}

#[test]
fn tcp_syn_v4() {
    let f = cls(TCP_SYN_V4);
    assert_eq!(f.dst_mac, ROUTER_MAC);
    assert_eq!(f.src_mac, CLIENT_MAC);
    assert_eq!((f.vlan, f.inner_vlan), (None, None));
    assert_eq!(f.ethertype, 0x0800);
    assert_eq!(f.l3_offset, 14);
    let info = PacketInfo {
        src: a("10.9.1.2"),
        dst: a("10.9.2.2"),
        proto: proto::TCP,
        sport: 40000,
        dport: 80,
        fragment: false,
        tcp_flags: tcp_flags::SYN,
        icmp_error: false,
    };
    let ip =
        IpMeta { l3_offset: 14, l3_len: 60, l4_offset: 34, is_v4: true, df: true, ttl: 64, tos: 0 };
    assert_eq!(f.kind, FrameKind::Ip { info, ip });
    assert!(info.is_syn());
    assert_eq!(ip.l3_range(), 14..74);
    assert_eq!(ip.frame_len(), 74);
}

#[test]
fn tcp_syn_v6() {
    let (info, ip) = ip_of(&cls(TCP_SYN_V6));
    assert_eq!(info.src, a("fd09:1::2"));
    assert_eq!(info.dst, a("fd09:2::2"));
    assert_eq!((info.proto, info.sport, info.dport), (proto::TCP, 40001, 80));
    assert_eq!(info.tcp_flags, tcp_flags::SYN);
    assert!(!info.fragment && !info.icmp_error);
    let want = IpMeta {
        l3_offset: 14,
        l3_len: 80,
        l4_offset: 54,
        is_v4: false,
        df: true,
        ttl: 64,
        tos: 0,
    };
    assert_eq!(ip, want);
}

#[test]
fn udp_dns_v4_and_v6() {
    let (info, ip) = ip_of(&cls(UDP_DNS_V4));
    assert_eq!((info.src, info.dst), (a("10.9.1.2"), a("10.9.2.2")));
    assert_eq!((info.proto, info.sport, info.dport, info.tcp_flags), (proto::UDP, 53000, 53, 0));
    assert_eq!((ip.l3_len, ip.l4_offset, ip.df), (57, 34, true));
    let (info, ip) = ip_of(&cls(UDP_DNS_V6));
    assert_eq!((info.src, info.dst), (a("fd09:1::2"), a("fd09:2::2")));
    assert_eq!((info.proto, info.sport, info.dport), (proto::UDP, 53001, 53));
    assert_eq!((ip.l3_len, ip.l4_offset), (77, 54));
}

#[test]
fn arp_request_and_reply() {
    let f = cls(ARP_REQUEST);
    assert_eq!(f.dst_mac, [0xff; 6]);
    assert_eq!(f.l3_offset, 14);
    assert_eq!(
        f.kind,
        FrameKind::Arp {
            op: 1,
            sender_mac: CLIENT_MAC,
            sender_ip: a("10.9.1.2"),
            target_mac: [0; 6],
            target_ip: a("10.9.1.1"),
        }
    );
    let f = cls(ARP_REPLY);
    assert_eq!(
        f.kind,
        FrameKind::Arp {
            op: 2,
            sender_mac: ROUTER_MAC,
            sender_ip: a("10.9.1.1"),
            target_mac: CLIENT_MAC,
            target_ip: a("10.9.1.2"),
        }
    );
}

#[test]
fn icmp_echo_requests() {
    let f = cls(ICMP_ECHO_V4);
    let FrameKind::IcmpEchoRequest { info, ip } = f.kind else { panic!("{f:?}") };
    assert_eq!((info.src, info.dst, info.proto), (a("10.9.1.2"), a("10.9.1.1"), proto::ICMP));
    assert_eq!((info.sport, info.dport), (0, 0));
    assert_eq!((ip.l3_len, ip.l4_offset), (84, 34));

    // IPv4 options: the ICMP header starts after the 60-byte IP header.
    let f = cls(ICMP_ECHO_RR);
    let FrameKind::IcmpEchoRequest { ip, .. } = f.kind else { panic!("{f:?}") };
    assert_eq!((ip.l3_len, ip.l4_offset), (124, 74));

    let f = cls(ICMPV6_ECHO);
    let FrameKind::IcmpEchoRequest { info, ip } = f.kind else { panic!("{f:?}") };
    assert_eq!((info.src, info.dst, info.proto), (a("fd09:1::2"), a("fd09:2::2"), proto::ICMPV6));
    assert_eq!((ip.l3_len, ip.l4_offset, ip.is_v4), (104, 54, false));

    // Echo replies are ordinary packets.
    assert!(matches!(cls(ICMP_ECHO_V4_REPLY).kind, FrameKind::Ip { .. }));
    assert!(matches!(cls(ICMPV6_ECHO_REPLY).kind, FrameKind::Ip { .. }));
}

/// SA-6: every fragment of one datagram, the first included, reports the same 3-tuple, no
/// ports, and `fragment = true`.
#[test]
fn sa_6_fragments_share_the_3_tuple() {
    for (first, last, want_proto) in [
        (hex(V4_FRAG_FIRST), hex(V4_FRAG_LAST), proto::ICMP),
        (hex(V6_FRAG_FIRST), hex(V6_FRAG_LAST), proto::ICMPV6),
        (hex(HBH_FRAG_FIRST), hex(HBH_FRAG_LAST), proto::UDP),
        (corpus("ipv4_frag_first"), corpus("ipv4_frag_last"), proto::UDP),
        (corpus("ipv6_hbh_dst_frag_first"), corpus("ipv6_hbh_dst_frag_last"), proto::UDP),
    ] {
        let (i1, _) = ip_of(&classify(&first).unwrap());
        let (i2, _) = ip_of(&classify(&last).unwrap());
        assert_eq!(i1, i2);
        assert!(i1.fragment);
        assert_eq!((i1.sport, i1.dport, i1.proto), (0, 0, want_proto));
        assert!(!i1.has_ports());
    }
    // Offsets: a first IPv6 fragment points at the upper-layer header (after the hop-by-hop
    // and Fragment headers), a later one at the fragment data.
    let (_, ip) = ip_of(&cls(HBH_FRAG_FIRST));
    assert_eq!((ip.l4_offset, ip.l3_len), (14 + 40 + 16, 1280));
    let (_, ip) = ip_of(&cls(V4_FRAG_LAST));
    assert_eq!((ip.l4_offset, ip.l3_len, ip.df), (34, 548, false));
}

/// The worked example of the brief: a frag-needed quoting VIP:80 -> client:40000 is routed
/// like the client's flow.
#[test]
fn icmp_frag_needed_yields_the_reversed_inner_tuple() {
    let f = classify(&corpus("icmp_frag_needed_tcp")).unwrap();
    let FrameKind::IcmpError { info, ip, from, icmp_type, icmp_code, mtu } = f.kind else {
        panic!("{f:?}")
    };
    let want = PacketInfo {
        src: a("203.0.113.9"),
        dst: a("198.51.100.10"),
        proto: proto::TCP,
        sport: 40000,
        dport: 80,
        fragment: false,
        tcp_flags: 0,
        icmp_error: true,
    };
    assert_eq!(info, want);
    assert_eq!(mtu, Some(1400));
    assert_eq!((icmp_type, icmp_code), (3, 4));
    assert_eq!(from, a("198.18.0.1"));
    assert_eq!((ip.l3_len, ip.l4_offset, ip.tos), (576, 34, 0xc0));

    // The same from a real router, quoting 10.9.1.2:40000 -> 10.9.2.2:80.
    let f = cls(FRAG_NEEDED_TCP);
    let FrameKind::IcmpError { info, mtu, from, .. } = f.kind else { panic!("{f:?}") };
    assert_eq!((info.src, info.dst), (a("10.9.2.2"), a("10.9.1.2")));
    assert_eq!((info.sport, info.dport, info.proto), (80, 40000, proto::TCP));
    assert!(info.icmp_error && !info.fragment);
    assert_eq!(mtu, Some(1280));
    assert_eq!(from, a("10.9.1.1"));
}

#[test]
fn icmpv6_packet_too_big_yields_the_reversed_inner_tuple() {
    let f = classify(&corpus("icmpv6_packet_too_big_tcp")).unwrap();
    let FrameKind::IcmpError { info, mtu, icmp_type, .. } = f.kind else { panic!("{f:?}") };
    assert_eq!(icmp_type, 2);
    assert_eq!(mtu, Some(1280));
    assert_eq!((info.src, info.dst), (a("2001:db8:c::9"), a("2001:db8:100::10")));
    assert_eq!((info.sport, info.dport, info.proto), (40000, 80, proto::TCP));
    assert!(info.icmp_error);

    // Real: the router's PTB quoting the first fragment of an ICMPv6 echo.
    let f = cls(PTB_V6);
    let FrameKind::IcmpError { info, mtu, from, .. } = f.kind else { panic!("{f:?}") };
    assert_eq!(mtu, Some(1280));
    assert_eq!(from, a("fd09:1::1"));
    assert_eq!((info.src, info.dst, info.proto), (a("fd09:2::2"), a("fd09:1::2"), proto::ICMPV6));
    assert_eq!((info.sport, info.dport, info.fragment), (0, 0, false));
}

#[test]
fn other_icmp_errors_from_linux() {
    // Port unreachable quoting UDP 10.9.1.2:53000 -> 10.9.2.2:53.
    let f = cls(PORT_UNREACH_V4);
    let FrameKind::IcmpError { info, mtu, icmp_type, icmp_code, from, .. } = f.kind else {
        panic!("{f:?}")
    };
    assert_eq!((icmp_type, icmp_code, mtu), (3, 3, None));
    assert_eq!(from, a("10.9.2.2"));
    assert_eq!((info.src, info.dst), (a("10.9.2.2"), a("10.9.1.2")));
    assert_eq!((info.sport, info.dport, info.proto), (53, 53000, proto::UDP));

    let f = cls(TIME_EXCEEDED_UDP);
    let FrameKind::IcmpError { info, icmp_type, .. } = f.kind else { panic!("{f:?}") };
    assert_eq!(icmp_type, 11);
    assert_eq!((info.sport, info.dport, info.proto), (53, 53000, proto::UDP));

    let f = cls(TIME_EXCEEDED_ICMP);
    let FrameKind::IcmpError { info, .. } = f.kind else { panic!("{f:?}") };
    assert_eq!((info.src, info.dst, info.proto), (a("10.9.2.2"), a("10.9.1.2"), proto::ICMP));
    assert_eq!((info.sport, info.dport), (0, 0));

    let f = cls(PORT_UNREACH_V6);
    let FrameKind::IcmpError { info, icmp_type, icmp_code, mtu, .. } = f.kind else {
        panic!("{f:?}")
    };
    assert_eq!((icmp_type, icmp_code, mtu), (1, 4, None));
    assert_eq!((info.src, info.dst), (a("fd09:2::2"), a("fd09:1::2")));
    assert_eq!((info.sport, info.dport, info.proto), (53, 53001, proto::UDP));

    let f = classify(&corpus("icmp_time_exceeded_udp")).unwrap();
    let FrameKind::IcmpError { info, .. } = f.kind else { panic!("{f:?}") };
    assert_eq!(
        (info.src, info.sport, info.dst, info.dport),
        (a("203.0.113.9"), 53000, a("198.51.100.10"), 53)
    );
}

#[test]
fn neighbor_discovery() {
    let f = cls(NS);
    assert_eq!(
        f.kind,
        FrameKind::NeighborSolicitation {
            ip: IpMeta {
                l3_offset: 14,
                l3_len: 72,
                l4_offset: 54,
                is_v4: false,
                df: true,
                ttl: 255,
                tos: 0
            },
            src: a("fd09:1::2"),
            target: a("fd09:1::1"),
            source_mac: Some(CLIENT_MAC),
        }
    );
    let f = cls(NA);
    let FrameKind::NeighborAdvertisement { src, target, target_mac, flags, .. } = f.kind else {
        panic!("{f:?}")
    };
    assert_eq!(
        (src, target, target_mac, flags),
        (a("fd09:1::1"), a("fd09:1::1"), Some(ROUTER_MAC), 0xe0)
    );
    // Router advertisement (type 134) and MLD (131) are not for us.
    for t in [131u8, 134] {
        let mut b = hex(NS);
        b[54] = t;
        assert_eq!(classify(&b).unwrap().kind, FrameKind::Other { ethertype: 0x86dd });
    }
}

#[test]
fn vlan_and_qinq() {
    let plain = classify(&corpus("eth_ipv4_tcp_syn")).unwrap();
    let tagged = classify(&corpus("vlan_ipv4_tcp_syn")).unwrap();
    assert_eq!((tagged.vlan, tagged.inner_vlan, tagged.l3_offset), (Some(100), None, 18));
    assert_eq!(ip_of(&tagged).0, ip_of(&plain).0);
    assert_eq!(ip_of(&tagged).1.l4_offset, 38);
    let qinq = classify(&corpus("qinq_ipv6_tcp_syn")).unwrap();
    assert_eq!((qinq.vlan, qinq.inner_vlan, qinq.l3_offset), (Some(0x2007), Some(100), 22));
    assert_eq!(qinq.ethertype, 0x86dd);
    assert_eq!(ip_of(&qinq).0.dport, 80);
    let arp = classify(&corpus("vlan_arp_request")).unwrap();
    assert_eq!((arp.vlan, arp.l3_offset), (Some(7), 18));
    assert!(matches!(arp.kind, FrameKind::Arp { op: 1, .. }));
    // A third tag is not ours.
    let mut three = corpus("qinq_ipv6_tcp_syn");
    three.splice(20..20, [0x81, 0x00, 0x00, 0x05]);
    assert_eq!(classify(&three).unwrap().kind, FrameKind::Other { ethertype: 0x8100 });
}

/// Ethernet padding after the IP packet is ignored: `l3_len` is the IP length.
#[test]
fn ethernet_padding_is_ignored() {
    let f = classify(&corpus("eth_ipv4_tcp_ack_padded")).unwrap();
    let (info, ip) = ip_of(&f);
    assert_eq!(corpus("eth_ipv4_tcp_ack_padded").len(), 60);
    assert_eq!((ip.l3_len, ip.frame_len()), (40, 54));
    assert_eq!(info.tcp_flags, tcp_flags::ACK);
    let mut padded = hex(UDP_DNS_V4);
    padded.extend_from_slice(&[0u8; 9]);
    assert_eq!(classify(&padded).unwrap(), cls(UDP_DNS_V4));
}

#[test]
fn not_for_us_is_other_not_malformed() {
    assert_eq!(classify(&corpus("lldp")).unwrap().kind, FrameKind::Other { ethertype: 0x88cc });
    // 802.3 length field + LLC.
    let mut llc = vec![0x01, 0x80, 0xc2, 0, 0, 0, 2, 0, 0, 0, 0, 1, 0x00, 0x26];
    llc.extend_from_slice(&[0x42; 46]);
    assert_eq!(classify(&llc).unwrap().kind, FrameKind::Other { ethertype: 0x0026 });
    // ARP for another protocol type.
    let mut b = hex(ARP_REQUEST);
    b[16] = 0x86;
    b[17] = 0xdd;
    assert_eq!(classify(&b).unwrap().kind, FrameKind::Other { ethertype: 0x0806 });
    // Tunnels and unknown protocols are ordinary IP packets without ports.
    let (info, _) = ip_of(&classify(&corpus("ipip_outer")).unwrap());
    assert_eq!((info.proto, info.sport, info.dport), (4, 0, 0));
    let (info, _) = ip_of(&classify(&corpus("gue_v6_outer")).unwrap());
    assert_eq!((info.proto, info.sport, info.dport), (proto::UDP, 0xc123, 6080));
}

/// Every captured and crafted seed classifies without error.
#[test]
fn whole_seed_corpus_classifies() {
    let dir = format!("{}/../fuzz/corpus/parse", env!("CARGO_MANIFEST_DIR"));
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') || name.len() == 40 {
            continue; // cargo-fuzz additions (hashes) are not seeds
        }
        let b = std::fs::read(&p).unwrap();
        assert!(classify(&b).is_ok(), "{name}: {:?}", classify(&b));
        n += 1;
    }
    assert!(n >= 40, "{n} seeds");
}

/// Quick sanity figure, not a benchmark: `cargo test -p spillway-core --release --test
/// wire_classify -- --ignored --nocapture classify_ns`.
#[test]
#[ignore]
fn classify_ns_per_64_byte_tcp_frame() {
    let frame = corpus("eth_ipv4_tcp_ack_padded"); // 60 bytes + FCS = 64 on the wire
    let n = 20_000_000u32;
    let mut acc = 0u64;
    let t = std::time::Instant::now();
    for _ in 0..n {
        let f = classify(std::hint::black_box(&frame)).unwrap();
        if let FrameKind::Ip { info, .. } = f.kind {
            acc += u64::from(info.sport);
        }
    }
    let ns = t.elapsed().as_nanos() as f64 / f64::from(n);
    std::hint::black_box(acc);
    let size = size_of::<Frame>();
    println!("classify: {ns:.2} ns per 64-byte TCP frame ({n} frames); Frame is {size} bytes");
}

// ---- the fast path: the same answer as the general parser, for every frame -----------------

mod fast_path {
    use super::*;
    use proptest::prelude::*;
    use spillway_core::wire::{classify_fast, classify_general};

    /// A valid untagged Ethernet/IPv4 frame with a 20-byte TCP (`tcp`) or 8-byte UDP header
    /// and `payload` bytes, padded to 60 bytes like Ethernet's minimum.
    fn frame(tcp: bool, payload: usize) -> Vec<u8> {
        let l4 = if tcp { 20 } else { 8 } + payload;
        let total = 20 + l4;
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0xc, 0x08, 0x00];
        f.extend_from_slice(&[0x45, 0x10, (total >> 8) as u8, total as u8, 0, 7, 0x40, 0, 61]);
        f.extend_from_slice(&[if tcp { 6 } else { 17 }, 0, 0, 198, 18, 10, 1, 198, 18, 0, 100]);
        f.extend_from_slice(&[0x9c, 0x40, 0, 80]);
        if tcp {
            f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x12, 0xff, 0xff, 0, 0, 0, 0]);
        } else {
            f.extend_from_slice(&[(l4 >> 8) as u8, l4 as u8, 0, 0]);
        }
        f.resize(14 + total, 0xab);
        if f.len() < 60 {
            f.resize(60, 0);
        }
        f
    }

    /// The same over IPv6: fd00::a:1 port 40000 to fd00::100 port 80, traffic class 0x12,
    /// hop limit 61, the transport header right after the fixed header.
    fn frame6(tcp: bool, payload: usize) -> Vec<u8> {
        let l4 = if tcp { 20 } else { 8 } + payload;
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0xc, 0x86, 0xdd];
        f.extend_from_slice(&[0x61, 0x20, 0, 0, (l4 >> 8) as u8, l4 as u8]);
        f.extend_from_slice(&[if tcp { 6 } else { 17 }, 61]);
        f.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xa, 0, 1]);
        f.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]);
        f.extend_from_slice(&[0x9c, 0x40, 0, 80]);
        if tcp {
            f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x12, 0xff, 0xff, 0, 0, 0, 0]);
        } else {
            f.extend_from_slice(&[(l4 >> 8) as u8, l4 as u8, 0, 0]);
        }
        f.resize(14 + 40 + l4, 0xab);
        f
    }

    #[test]
    fn the_common_ipv6_frames_take_the_fast_path_and_agree() {
        for (tcp, payload) in [(true, 0), (true, 1400), (false, 0), (false, 32)] {
            let f = frame6(tcp, payload);
            let fast = classify_fast(&f).expect("the common case is fast");
            assert_eq!(Ok(fast), classify_general(&f), "tcp={tcp} payload={payload}");
            let (info, ip) = ip_of(&fast);
            assert_eq!((info.sport, info.dport, info.src), (40000, 80, a("fd00::a:1")));
            assert_eq!(info.dst, a("fd00::100"));
            let l3_len = 40 + (u32::from(f[18]) << 8 | u32::from(f[19]));
            assert_eq!(
                (ip.is_v4, ip.df, ip.ttl, ip.tos, ip.l3_len),
                (false, true, 61, 0x12, l3_len)
            );
        }
        // Not the common case: the general parser answers.
        let mut vlan = frame6(true, 0);
        vlan.splice(12..12, [0x81, 0x00, 0, 5]);
        let mut hop_by_hop = frame6(false, 0);
        hop_by_hop[20] = 0;
        let mut icmp = frame6(false, 0);
        icmp[20] = 58;
        let mut short_header = frame6(true, 0);
        short_header[66] = 0x40; // data offset 4
        let mut long_payload = frame6(false, 0);
        long_payload[19] += 1; // one byte more than the frame holds
        for (what, f) in [
            ("vlan", vlan),
            ("hop-by-hop", hop_by_hop),
            ("icmpv6", icmp),
            ("bad tcp", short_header),
            ("payload length", long_payload),
        ] {
            assert_eq!(classify_fast(&f), None, "{what}");
        }
    }

    #[test]
    fn the_common_frames_take_the_fast_path_and_agree() {
        for (tcp, payload) in [(true, 0), (true, 1400), (false, 0), (false, 32)] {
            let f = frame(tcp, payload);
            let fast = classify_fast(&f).expect("the common case is fast");
            assert_eq!(Ok(fast), classify_general(&f), "tcp={tcp} payload={payload}");
            let (info, ip) = ip_of(&fast);
            assert_eq!((info.sport, info.dport, info.src), (40000, 80, a("198.18.10.1")));
            assert_eq!(
                (ip.df, ip.ttl, ip.tos, ip.l3_len),
                (true, 61, 0x10, u32::from(f[16]) << 8 | u32::from(f[17]))
            );
        }
        // Not the common case: the general parser answers.
        let mut vlan = frame(true, 0);
        vlan.splice(12..12, [0x81, 0x00, 0, 5]);
        let mut options = frame(true, 0);
        options[14] = 0x46;
        let mut fragment = frame(false, 0);
        fragment[20] = 0x20; // MF
        let mut icmp = frame(false, 0);
        icmp[23] = 1;
        let mut short_header = frame(true, 0);
        short_header[46] = 0x40; // data offset 4
        for (what, f) in [
            ("vlan", vlan),
            ("options", options),
            ("fragment", fragment),
            ("icmp", icmp),
            ("bad tcp", short_header),
        ] {
            assert_eq!(classify_fast(&f), None, "{what}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

        /// Arbitrary damage to a valid frame, IPv4 or IPv6 (bytes changed, the frame cut or
        /// extended): the fast path either declines or says exactly what the general parser
        /// says.
        #[test]
        fn the_fast_path_agrees_with_the_general_parser(
            v6 in any::<bool>(),
            tcp in any::<bool>(),
            payload in 0usize..64,
            edits in proptest::collection::vec((0usize..80, any::<u8>()), 0..4),
            cut in proptest::option::of(0usize..100),
        ) {
            let mut f = if v6 { frame6(tcp, payload) } else { frame(tcp, payload) };
            for (at, v) in edits {
                if let Some(b) = f.get_mut(at) {
                    // Bias the damage towards the fields the fast path reads.
                    *b = if v % 3 == 0 { b.wrapping_add(1) } else { v };
                }
            }
            if let Some(n) = cut {
                f.resize(n, 0);
            }
            if let Some(fast) = classify_fast(&f) {
                prop_assert_eq!(Ok(fast), classify_general(&f));
            }
            prop_assert_eq!(classify(&f), classify_general(&f));
        }
    }
}
