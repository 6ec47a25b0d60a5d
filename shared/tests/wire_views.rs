//! The zero-copy views on real frames captured from Linux (`wire_fixtures`): every exposed
//! field checked against what tcpdump decoded from the same bytes.

mod wire_fixtures;

use spillway_core::wire::ipv6::{walk_chain, FragInfo};
use spillway_core::wire::{
    arp, checksum, icmpv6, tcp, ArpPacket, EthernetFrame, IcmpPacket, Icmpv6Packet, Ipv4Packet,
    Ipv6ExtHeader, Ipv6FragHeader, Ipv6Packet, Malformed, NdiscPacket, TcpPacket, UdpPacket,
    VlanHeader,
};
use wire_fixtures::*;

const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0x0c, 1];
const ROUTER_MAC: [u8; 6] = [2, 0, 0, 0, 0x0a, 1];

fn v6(s: &str) -> [u8; 16] {
    s.parse::<std::net::Ipv6Addr>().unwrap().octets()
}

#[test]
fn ethernet_and_arp_request() {
    let f = hex(ARP_REQUEST);
    let e = EthernetFrame::new_checked(&f[..]).unwrap();
    assert_eq!(e.dst_addr(), [0xff; 6]);
    assert_eq!(e.src_addr(), CLIENT_MAC);
    assert_eq!(e.ethertype(), 0x0806);
    let a = ArpPacket::new_checked(e.payload()).unwrap();
    assert!(a.is_ethernet_ipv4());
    assert_eq!(a.hardware_type(), 1);
    assert_eq!(a.protocol_type(), 0x0800);
    assert_eq!((a.hardware_len(), a.protocol_len()), (6, 4));
    assert_eq!(a.operation(), arp::op::REQUEST);
    assert_eq!(a.sender_mac(), CLIENT_MAC);
    assert_eq!(a.sender_ip(), [10, 9, 1, 2]);
    assert_eq!(a.target_mac(), [0; 6]);
    assert_eq!(a.target_ip(), [10, 9, 1, 1]);

    let r = hex(ARP_REPLY);
    let a = ArpPacket::new_checked(&r[14..]).unwrap();
    assert_eq!(a.operation(), arp::op::REPLY);
    assert_eq!(a.sender_mac(), ROUTER_MAC);
    assert_eq!(a.sender_ip(), [10, 9, 1, 1]);
    assert_eq!(a.target_mac(), CLIENT_MAC);
    assert_eq!(a.target_ip(), [10, 9, 1, 2]);
}

#[test]
fn vlan_tag_fields() {
    // TCI 0x2064: PCP 1, DEI 0, VID 100; then IPv4.
    let b = [0x20, 0x64, 0x08, 0x00];
    let v = VlanHeader::new_checked(&b[..]).unwrap();
    assert_eq!(v.tci(), 0x2064);
    assert_eq!(v.pcp(), 1);
    assert_eq!(v.vid(), 100);
    assert_eq!(v.ethertype(), 0x0800);
    assert_eq!(VlanHeader::new_checked(&b[..3]).unwrap_err(), Malformed::Truncated);
}

#[test]
fn ipv4_and_tcp_syn() {
    let f = hex(TCP_SYN_V4);
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    assert_eq!(ip.version(), 4);
    assert_eq!(ip.header_len(), 20);
    assert_eq!(ip.dscp_ecn(), 0);
    assert_eq!(ip.total_len(), 60);
    assert_eq!(ip.ident(), 16907);
    assert!(ip.dont_frag());
    assert!(!ip.more_frags());
    assert_eq!(ip.frag_offset(), 0);
    assert!(!ip.is_fragment());
    assert_eq!(ip.ttl(), 64);
    assert_eq!(ip.protocol(), 6);
    assert!(ip.verify_checksum());
    assert_eq!(ip.src_addr(), [10, 9, 1, 2]);
    assert_eq!(ip.dst_addr(), [10, 9, 2, 2]);
    assert!(ip.options().is_empty());
    assert_eq!(ip.payload().len(), 40);

    let t = TcpPacket::new_checked(ip.payload()).unwrap();
    assert_eq!(t.src_port(), 40000);
    assert_eq!(t.dst_port(), 80);
    assert_eq!(t.seq_number(), 240234352);
    assert_eq!(t.ack_number(), 0);
    assert_eq!(t.header_len(), 40);
    assert_eq!(t.flags(), tcp::flags::SYN);
    assert_eq!(t.window(), 64240);
    assert_eq!(t.checksum(), 0xf093);
    assert_eq!(t.urgent(), 0);
    assert_eq!(&t.options()[..4], &[2, 4, 0x05, 0xb4]); // MSS 1460
    assert!(t.payload().is_empty());
}

#[test]
fn ipv4_options_record_route() {
    let f = hex(ICMP_ECHO_RR);
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    assert_eq!(ip.header_len(), 60);
    assert_eq!(ip.total_len(), 124);
    assert_eq!(ip.options().len(), 40);
    assert_eq!(&ip.options()[..3], &[1, 7, 39]); // NOP, then Record Route of 39 bytes
    assert!(ip.verify_checksum());
    let m = IcmpPacket::new_checked(ip.payload()).unwrap();
    assert_eq!((m.msg_type(), m.msg_code()), (8, 0));
    assert_eq!(m.echo_ident(), 6039);
    assert_eq!(m.echo_seq(), 1);
    assert_eq!(m.data().len(), 56);
}

#[test]
fn ipv4_fragments() {
    let f = hex(V4_FRAG_FIRST);
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    assert_eq!(ip.ident(), 4155);
    assert!(ip.more_frags() && !ip.dont_frag());
    assert_eq!(ip.frag_offset(), 0);
    assert_eq!(ip.total_len(), 1500);
    assert!(ip.is_fragment());
    let l = hex(V4_FRAG_LAST);
    let ip = Ipv4Packet::new_checked(&l[14..]).unwrap();
    assert_eq!(ip.ident(), 4155);
    assert!(!ip.more_frags());
    assert_eq!(ip.frag_offset(), 185); // 1480 bytes
    assert_eq!(ip.total_len(), 548);
    assert!(ip.is_fragment());
    assert!(ip.verify_checksum());
}

#[test]
fn udp_dns_query() {
    let f = hex(UDP_DNS_V4);
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    assert_eq!(ip.ident(), 38247);
    let u = UdpPacket::new_checked(ip.payload()).unwrap();
    assert_eq!(u.src_port(), 53000);
    assert_eq!(u.dst_port(), 53);
    assert_eq!(u.len(), 37);
    assert_eq!(&u.payload()[..4], &[0x12, 0x34, 0x01, 0x00]);
    assert_eq!(u.payload().len(), 29);
}

#[test]
fn icmp_echo_request() {
    let f = hex(ICMP_ECHO_V4);
    let m = IcmpPacket::new_checked(&f[34..]).unwrap();
    assert_eq!((m.msg_type(), m.msg_code()), (8, 0));
    assert_eq!(m.checksum(), 0x7357);
    assert_eq!(m.echo_ident(), 6037);
    assert_eq!(m.echo_seq(), 1);
    assert_eq!(m.data().len(), 56);
}

#[test]
fn icmp_frag_needed_next_hop_mtu() {
    let f = hex(FRAG_NEEDED_TCP);
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    assert_eq!(ip.dscp_ecn(), 0xc0);
    assert_eq!(ip.total_len(), 576);
    let m = IcmpPacket::new_checked(ip.payload()).unwrap();
    assert_eq!((m.msg_type(), m.msg_code()), (3, 4));
    assert_eq!(m.next_hop_mtu(), 1280);
    let inner = Ipv4Packet::new_unchecked(m.data());
    assert_eq!(inner.ident(), 16909);
    assert_eq!(inner.total_len(), 1500); // the quote is truncated: 548 bytes of it
    assert_eq!(m.data().len(), 548);
}

#[test]
fn ipv6_hop_by_hop_and_fragment_header() {
    let f = hex(HBH_FRAG_FIRST);
    let ip = Ipv6Packet::new_checked(&f[14..]).unwrap();
    assert_eq!(ip.version(), 6);
    assert_eq!(ip.traffic_class(), 0);
    assert_eq!(ip.flow_label(), 0x3c22a);
    assert_eq!(ip.payload_len(), 1240);
    assert_eq!(ip.next_header(), 0);
    assert_eq!(ip.hop_limit(), 64);
    assert_eq!(ip.src_addr(), v6("fd09:1::2"));
    assert_eq!(ip.dst_addr(), v6("fd09:2::2"));
    let hbh = Ipv6ExtHeader::new_checked(ip.payload(), 0).unwrap();
    assert_eq!(hbh.next_header(), 44);
    assert_eq!(hbh.header_len(), 8);
    assert_eq!(hbh.data(), &[1, 4, 0, 0, 0, 0]); // PadN
    let fr = Ipv6FragHeader::new_checked(&ip.payload()[8..]).unwrap();
    assert_eq!(fr.next_header(), 17);
    assert_eq!(fr.frag_offset(), 0);
    assert!(fr.more_frags());
    assert_eq!(fr.ident(), 0xab172afd);
    let chain = walk_chain(ip.next_header(), ip.payload()).unwrap();
    assert_eq!(chain.proto, 17);
    assert_eq!(chain.l4_offset, 16);
    let frag =
        FragInfo { next_header: 17, offset: 0, more: true, ident: 0xab172afd, data_len: 1224 };
    assert_eq!(chain.frag, Some(frag));
    let u = UdpPacket::new_unchecked(&ip.payload()[16..]);
    assert_eq!((u.src_port(), u.dst_port()), (53001, 53));

    let l = hex(HBH_FRAG_LAST);
    let ip = Ipv6Packet::new_checked(&l[14..]).unwrap();
    let chain = walk_chain(ip.next_header(), ip.payload()).unwrap();
    assert_eq!(chain.proto, 17);
    assert_eq!(chain.l4_offset, 16);
    let frag =
        FragInfo { next_header: 17, offset: 153, more: false, ident: 0xab172afd, data_len: 784 };
    assert_eq!(chain.frag, Some(frag));
}

#[test]
fn ipv6_fragment_of_icmpv6_echo() {
    let f = hex(V6_FRAG_FIRST);
    let ip = Ipv6Packet::new_checked(&f[14..]).unwrap();
    assert_eq!(ip.flow_label(), 0x1a5ac);
    assert_eq!(ip.payload_len(), 1456);
    assert_eq!(ip.next_header(), 44);
    let fr = Ipv6FragHeader::new_checked(ip.payload()).unwrap();
    assert_eq!((fr.next_header(), fr.frag_offset(), fr.more_frags()), (58, 0, true));
    assert_eq!(fr.ident(), 0x82b5f3fc);
    let l = hex(V6_FRAG_LAST);
    let ip = Ipv6Packet::new_checked(&l[14..]).unwrap();
    let fr = Ipv6FragHeader::new_checked(ip.payload()).unwrap();
    assert_eq!((fr.next_header(), fr.frag_offset(), fr.more_frags()), (58, 181, false));
}

#[test]
fn icmpv6_echo_and_packet_too_big() {
    let f = hex(ICMPV6_ECHO);
    let m = Icmpv6Packet::new_checked(&f[54..]).unwrap();
    assert_eq!((m.msg_type(), m.msg_code()), (128, 0));
    assert_eq!(m.echo_ident(), 6059);
    assert_eq!(m.echo_seq(), 1);
    let p = hex(PTB_V6);
    let m = Icmpv6Packet::new_checked(&p[54..]).unwrap();
    assert_eq!((m.msg_type(), m.msg_code()), (icmpv6::types::PACKET_TOO_BIG, 0));
    assert_eq!(m.mtu(), 1280);
    assert_eq!(m.data().len(), 1232);
}

#[test]
fn neighbor_solicitation_and_advertisement() {
    let f = hex(NS);
    let ip = Ipv6Packet::new_checked(&f[14..]).unwrap();
    assert_eq!(ip.hop_limit(), 255);
    assert_eq!(ip.dst_addr(), v6("ff02::1:ff00:1"));
    let nd = NdiscPacket::new_checked(ip.payload()).unwrap();
    assert_eq!((nd.msg_type(), nd.msg_code()), (135, 0));
    assert_eq!(nd.target_addr(), v6("fd09:1::1"));
    assert_eq!(nd.link_layer_option(1), Ok(Some(CLIENT_MAC)));
    assert_eq!(nd.link_layer_option(2), Ok(None));

    let f = hex(NA);
    let ip = Ipv6Packet::new_checked(&f[14..]).unwrap();
    let nd = NdiscPacket::new_checked(ip.payload()).unwrap();
    assert_eq!(nd.msg_type(), 136);
    assert_eq!(nd.flags(), 0xe0); // router, solicited, override
    assert_eq!(nd.target_addr(), v6("fd09:1::1"));
    assert_eq!(nd.link_layer_option(2), Ok(Some(ROUTER_MAC)));
}

/// Every IPv4 header the kernel wrote verifies; one flipped bit does not.
#[test]
fn ipv4_header_checksums_of_captured_frames_verify() {
    for h in [
        ICMP_ECHO_V4,
        ICMP_ECHO_RR,
        V4_FRAG_FIRST,
        V4_FRAG_LAST,
        TIME_EXCEEDED_ICMP,
        UDP_DNS_V4,
        PORT_UNREACH_V4,
        TIME_EXCEEDED_UDP,
        TCP_SYN_V4,
        FRAG_NEEDED_TCP,
        TCP_DATA_V4,
    ] {
        let mut f = hex(h);
        assert!(Ipv4Packet::new_checked(&f[14..]).unwrap().verify_checksum());
        f[14 + 8] ^= 1;
        assert!(!Ipv4Packet::new_checked(&f[14..]).unwrap().verify_checksum());
    }
}

/// Transport checksums computed with the pseudo-header equal the kernel's.
#[test]
fn pseudo_header_checksums_match_the_kernel() {
    // (frame, l3 offset, l4 offset, protocol, checksum field offset in L4)
    let cases: [(&str, usize, usize, u8, usize); 5] = [
        (TCP_SYN_V4, 14, 34, 6, 16),
        (UDP_DNS_V4, 14, 34, 17, 6),
        (TCP_SYN_V6, 14, 54, 6, 16),
        (UDP_DNS_V6, 14, 54, 17, 6),
        (ICMPV6_ECHO, 14, 54, 58, 2),
    ];
    for (h, l3, l4, proto, at) in cases {
        let mut f = hex(h);
        let (src, dst) = if f[l3] >> 4 == 4 {
            let ip = Ipv4Packet::new_checked(&f[l3..]).unwrap();
            (ip.src_addr().into(), ip.dst_addr().into())
        } else {
            let ip = Ipv6Packet::new_checked(&f[l3..]).unwrap();
            (
                std::net::Ipv6Addr::from(ip.src_addr()).into(),
                std::net::Ipv6Addr::from(ip.dst_addr()).into(),
            )
        };
        let (src, dst): (std::net::IpAddr, std::net::IpAddr) = (src, dst);
        let want = u16::from_be_bytes([f[l4 + at], f[l4 + at + 1]]);
        f[l4 + at] = 0;
        f[l4 + at + 1] = 0;
        let seg = &f[l4..];
        let len = u32::try_from(seg.len()).unwrap();
        let ph = checksum::pseudo_header(&src.into(), &dst.into(), proto, len);
        assert_eq!(checksum::finish(&[ph, checksum::data(seg)]), want, "{proto}");
    }
}

/// RFC 1624 incremental update, checked against two headers the kernel wrote: the same DNS
/// query sent with TTL 64 (id 38247, checksum 0x8e37) and TTL 1 (id 38248, checksum 0xcd36).
#[test]
fn incremental_update_matches_the_kernel() {
    let a = hex(UDP_DNS_V4);
    let ip = Ipv4Packet::new_checked(&a[14..]).unwrap();
    assert_eq!(ip.checksum(), 0x8e37);
    let c = checksum::update16(ip.checksum(), 0x4011, 0x0111); // TTL 64 -> 1, proto UDP
    let c = checksum::update(c, &38247u16.to_be_bytes(), &38248u16.to_be_bytes());
    assert_eq!(c, 0xcd36);
}

#[test]
fn checked_views_reject_short_buffers() {
    assert_eq!(EthernetFrame::new_checked(&[0u8; 13][..]).unwrap_err(), Malformed::Truncated);
    assert_eq!(ArpPacket::new_checked(&[0u8; 27][..]).unwrap_err(), Malformed::Truncated);
    assert_eq!(Ipv4Packet::new_checked(&[0x45u8; 19][..]).unwrap_err(), Malformed::Truncated);
    assert_eq!(Ipv6Packet::new_checked(&[0x60u8; 39][..]).unwrap_err(), Malformed::Truncated);
    assert_eq!(TcpPacket::new_checked(&[0u8; 19][..]).unwrap_err(), Malformed::BadTransportHeader);
    assert_eq!(UdpPacket::new_checked(&[0u8; 7][..]).unwrap_err(), Malformed::BadTransportHeader);
    assert_eq!(IcmpPacket::new_checked(&[0u8; 7][..]).unwrap_err(), Malformed::BadIcmp);
    assert_eq!(Icmpv6Packet::new_checked(&[0u8; 7][..]).unwrap_err(), Malformed::BadIcmp);
    assert_eq!(NdiscPacket::new_checked(&[0u8; 23][..]).unwrap_err(), Malformed::BadIcmp);
    assert_eq!(
        Ipv6FragHeader::new_checked(&[0u8; 7][..]).unwrap_err(),
        Malformed::BadExtensionHeader
    );
    // A hop-by-hop header announcing 16 bytes in 8.
    assert_eq!(
        Ipv6ExtHeader::new_checked(&[6u8, 1, 0, 0, 0, 0, 0, 0][..], 0).unwrap_err(),
        Malformed::BadExtensionHeader
    );
}
