//! SPEC rules SA-1..SA-8, CT-1a..CT-1e, CT-2, CH-1 and CH-4 for `flow.rs`: the selection
//! tuple, the tracking key, the new-connection SYN test and keyed hashing.
//!
//! Every expected value is written out by hand: tuples as literal `FlowKey`s, byte images as
//! literal bytes, and the pinned hash values were computed once with the reference C xxHash
//! library (`libxxhash.so.0`, `XXH3_64bits_withSeed`) over the hand-written byte images below,
//! not with this crate.

use spillway_core::addr::Addr;
use spillway_core::flow::{
    is_new_connection_syn, proto, selection_tuple, tcp_flags, tracking_key, tracks_five_tuple,
    FlowHasher, FlowKey, PacketInfo, DEFAULT_HASH_SEED, FLOW_KEY_BYTES,
};
use spillway_core::policy::{Affinity, TrackingMode};

const CLIENT: Addr = Addr::v4(192, 0, 2, 1);
const VIP: Addr = Addr::v4(198, 51, 100, 7);
const SERVICE: u16 = 7;

const ALL_AFFINITIES: [Affinity; 5] = [
    Affinity::None,
    Affinity::ClientIpPortProto,
    Affinity::ClientIpProto,
    Affinity::ClientIp,
    Affinity::ClientIpNoDestination,
];

/// Every tracking mode and affinity, and whether a SYN is a new connection there (CT-2): per
/// connection, or per session with no affinity or the 5-tuple's. The same configurations
/// track a TCP or UDP packet by its 5-tuple (CT-1a, CT-1b).
const SYN_IS_NEW: [(TrackingMode, Affinity, bool); 10] = {
    use Affinity::*;
    use TrackingMode::*;
    [
        (PerConnection, None, true),
        (PerConnection, ClientIpPortProto, true),
        (PerConnection, ClientIpProto, true),
        (PerConnection, ClientIp, true),
        (PerConnection, ClientIpNoDestination, true),
        (PerSession, None, true),
        (PerSession, ClientIpPortProto, true),
        (PerSession, ClientIpProto, false),
        (PerSession, ClientIp, false),
        (PerSession, ClientIpNoDestination, false),
    ]
};

fn tcp(flags: u8) -> PacketInfo {
    PacketInfo {
        src: CLIENT,
        dst: VIP,
        proto: proto::TCP,
        sport: 40000,
        dport: 443,
        fragment: false,
        tcp_flags: flags,
        icmp_error: false,
    }
}

fn udp() -> PacketInfo {
    PacketInfo { proto: proto::UDP, sport: 5353, dport: 53, tcp_flags: 0, ..tcp(0) }
}

fn icmp() -> PacketInfo {
    PacketInfo { proto: proto::ICMP, sport: 0, dport: 0, tcp_flags: 0, ..tcp(0) }
}

fn fragment_of(p: PacketInfo) -> PacketInfo {
    // Later fragments carry no ports; the parser reports 0.
    PacketInfo { fragment: true, sport: 0, dport: 0, tcp_flags: 0, ..p }
}

fn v6(s: &str) -> Addr {
    s.parse().unwrap()
}

/// A key spelled out field by field.
fn key(src: Addr, dst: Addr, sport: u16, dport: u16, proto: u8, kind: u8, service: u16) -> FlowKey {
    FlowKey { src, dst, sport, dport, proto, kind, service }
}

const NOWHERE: Addr = Addr::UNSPECIFIED;

/// Every kind of packet the parser produces, for rules that must hold for all of them.
fn packet_zoo() -> Vec<PacketInfo> {
    let mut v = vec![
        tcp(tcp_flags::SYN),
        tcp(tcp_flags::ACK),
        tcp(tcp_flags::SYN | tcp_flags::ACK),
        tcp(tcp_flags::FIN | tcp_flags::ACK),
        udp(),
        icmp(),
        fragment_of(tcp(0)),
        fragment_of(udp()),
        PacketInfo { fragment: true, ..udp() }, // first fragment, ports still visible
        PacketInfo { proto: 47, sport: 0, dport: 0, ..tcp(0) }, // GRE
        PacketInfo { icmp_error: true, ..tcp(tcp_flags::ACK) },
        PacketInfo { src: v6("2001:db8::1"), dst: v6("2001:db8::2"), ..udp() },
        PacketInfo {
            src: v6("2001:db8::1"),
            dst: v6("2001:db8::2"),
            proto: proto::ICMPV6,
            sport: 0,
            dport: 0,
            ..tcp(0)
        },
    ];
    v.push(PacketInfo { proto: proto::UDP, tcp_flags: 0, ..v[0] });
    v
}

// ---------------------------------------------------------------- SA-1

#[test]
fn sa_1_unfragmented_tcp_and_udp_use_the_5_tuple() {
    for a in [Affinity::None, Affinity::ClientIpPortProto] {
        assert_eq!(
            selection_tuple(&tcp(tcp_flags::ACK), a, false),
            key(CLIENT, VIP, 40000, 443, 6, 5, 0)
        );
        assert_eq!(selection_tuple(&udp(), a, false), key(CLIENT, VIP, 5353, 53, 17, 5, 0));
    }
}

#[test]
fn sa_1_icmp_and_other_protocols_use_the_3_tuple() {
    for a in [Affinity::None, Affinity::ClientIpPortProto] {
        assert_eq!(selection_tuple(&icmp(), a, false), key(CLIENT, VIP, 0, 0, 1, 3, 0));
        let gre = PacketInfo { proto: 47, sport: 0, dport: 0, ..tcp(0) };
        assert_eq!(selection_tuple(&gre, a, false), key(CLIENT, VIP, 0, 0, 47, 3, 0));
        let icmp6 = PacketInfo {
            src: v6("2001:db8::1"),
            dst: v6("2001:db8::2"),
            proto: proto::ICMPV6,
            ..icmp()
        };
        assert_eq!(
            selection_tuple(&icmp6, a, false),
            key(v6("2001:db8::1"), v6("2001:db8::2"), 0, 0, 58, 3, 0)
        );
    }
}

#[test]
fn sa_1_fragmented_tcp_and_udp_use_the_3_tuple() {
    for a in [Affinity::None, Affinity::ClientIpPortProto] {
        assert_eq!(
            selection_tuple(&fragment_of(udp()), a, false),
            key(CLIENT, VIP, 0, 0, 17, 3, 0)
        );
        assert_eq!(
            selection_tuple(&fragment_of(tcp(0)), a, false),
            key(CLIENT, VIP, 0, 0, 6, 3, 0)
        );
    }
}

// ---------------------------------------------------------------- SA-2..SA-4

#[test]
fn sa_2_client_ip_proto_uses_the_3_tuple_for_all_protocols() {
    let a = Affinity::ClientIpProto;
    assert_eq!(selection_tuple(&tcp(tcp_flags::ACK), a, false), key(CLIENT, VIP, 0, 0, 6, 3, 0));
    assert_eq!(selection_tuple(&udp(), a, false), key(CLIENT, VIP, 0, 0, 17, 3, 0));
    assert_eq!(selection_tuple(&icmp(), a, false), key(CLIENT, VIP, 0, 0, 1, 3, 0));
    assert_eq!(selection_tuple(&fragment_of(udp()), a, false), key(CLIENT, VIP, 0, 0, 17, 3, 0));
}

#[test]
fn sa_3_client_ip_uses_the_2_tuple() {
    let a = Affinity::ClientIp;
    for p in [tcp(tcp_flags::ACK), udp(), icmp(), fragment_of(udp())] {
        assert_eq!(selection_tuple(&p, a, false), key(CLIENT, VIP, 0, 0, 0, 2, 0), "{p:?}");
    }
}

#[test]
fn sa_4_client_ip_no_destination_uses_the_source_only() {
    let a = Affinity::ClientIpNoDestination;
    for p in [tcp(tcp_flags::ACK), udp(), icmp(), fragment_of(udp())] {
        assert_eq!(selection_tuple(&p, a, false), key(CLIENT, NOWHERE, 0, 0, 0, 1, 0), "{p:?}");
    }
}

// ---------------------------------------------------------------- SA-5

#[test]
fn sa_5_none_is_client_ip_port_proto_for_every_packet_kind() {
    let h = FlowHasher::default();
    for p in packet_zoo() {
        for sym in [false, true] {
            let none = selection_tuple(&p, Affinity::None, sym);
            let cipp = selection_tuple(&p, Affinity::ClientIpPortProto, sym);
            assert_eq!(none, cipp, "{p:?}");
            assert_eq!(h.hash(&none), h.hash(&cipp));
            for mode in [TrackingMode::PerConnection, TrackingMode::PerSession] {
                assert_eq!(
                    tracking_key(&p, mode, Affinity::None, sym, SERVICE),
                    tracking_key(&p, mode, Affinity::ClientIpPortProto, sym, SERVICE),
                    "{p:?} {mode:?}"
                );
                assert_eq!(
                    is_new_connection_syn(&p, mode, Affinity::None),
                    is_new_connection_syn(&p, mode, Affinity::ClientIpPortProto)
                );
            }
        }
    }
}

// ---------------------------------------------------------------- SA-6

#[test]
fn sa_6_every_fragment_of_a_udp_datagram_gets_one_3_tuple() {
    // First fragment (MF set, offset 0): the UDP header is in it, ports may be visible.
    let first = PacketInfo { fragment: true, ..udp() };
    let middle = fragment_of(udp());
    let last = fragment_of(udp());
    let expected = key(CLIENT, VIP, 0, 0, 17, 3, 0);
    for a in [Affinity::None, Affinity::ClientIpPortProto, Affinity::ClientIpProto] {
        for p in [first, middle, last] {
            assert_eq!(selection_tuple(&p, a, false), expected, "{a:?} {p:?}");
        }
    }
    // And one tracking entry for the whole datagram (CT-1a).
    for p in [first, middle, last] {
        assert_eq!(
            tracking_key(&p, TrackingMode::PerConnection, Affinity::None, false, SERVICE),
            key(CLIENT, VIP, 0, 0, 17, 3, SERVICE)
        );
    }
}

#[test]
fn sa_6_tcp_fragments_use_the_3_tuple_too() {
    let first = PacketInfo { fragment: true, ..tcp(tcp_flags::SYN) };
    let later = fragment_of(tcp(0));
    let h = FlowHasher::default();
    for p in [first, later] {
        assert_eq!(selection_tuple(&p, Affinity::None, false), key(CLIENT, VIP, 0, 0, 6, 3, 0));
    }
    assert_eq!(
        h.hash(&selection_tuple(&first, Affinity::None, false)),
        h.hash(&selection_tuple(&later, Affinity::None, false))
    );
    // IPv6 Fragment header: same rule.
    let f6 = PacketInfo { src: v6("2001:db8::1"), dst: v6("2001:db8::2"), ..first };
    assert_eq!(
        selection_tuple(&f6, Affinity::None, false),
        key(v6("2001:db8::1"), v6("2001:db8::2"), 0, 0, 6, 3, 0)
    );
}

// ---------------------------------------------------------------- SA-7

#[test]
fn sa_7_next_hop_destination_is_hashed_except_with_no_destination() {
    // One source sending to two destinations inside a next-hop prefix 203.0.113.0/24.
    let to_a = PacketInfo { dst: Addr::v4(203, 0, 113, 10), ..tcp(tcp_flags::ACK) };
    let to_b = PacketInfo { dst: Addr::v4(203, 0, 113, 20), ..tcp(tcp_flags::ACK) };
    let h = FlowHasher::default();

    let a = Affinity::ClientIpNoDestination;
    let (ta, tb) = (selection_tuple(&to_a, a, false), selection_tuple(&to_b, a, false));
    assert_eq!(ta, key(CLIENT, NOWHERE, 0, 0, 0, 1, 0));
    assert_eq!(ta, tb);
    assert_eq!(h.hash(&ta), h.hash(&tb));

    let expected = [
        (Affinity::None, 40000, 443, 6, 5),
        (Affinity::ClientIpPortProto, 40000, 443, 6, 5),
        (Affinity::ClientIpProto, 0, 0, 6, 3),
        (Affinity::ClientIp, 0, 0, 0, 2),
    ];
    for (a, sp, dp, pr, kind) in expected {
        let (ta, tb) = (selection_tuple(&to_a, a, false), selection_tuple(&to_b, a, false));
        assert_eq!(ta, key(CLIENT, Addr::v4(203, 0, 113, 10), sp, dp, pr, kind, 0), "{a:?}");
        assert_eq!(tb, key(CLIENT, Addr::v4(203, 0, 113, 20), sp, dp, pr, kind, 0), "{a:?}");
        assert_ne!(h.hash(&ta), h.hash(&tb), "{a:?}");
    }
}

// ---------------------------------------------------------------- SA-8

#[test]
fn sa_8_symmetric_hashing_gives_both_directions_one_tuple() {
    let h = FlowHasher::default();
    // 192.0.2.1:40000 -> 198.51.100.7:443 and its reply. 192.0.2.1 < 198.51.100.7.
    let fwd = tcp(tcp_flags::ACK);
    let rev = PacketInfo { src: VIP, dst: CLIENT, sport: 443, dport: 40000, ..fwd };
    let expected = [
        (Affinity::None, key(CLIENT, VIP, 40000, 443, 6, 5, 0)),
        (Affinity::ClientIpProto, key(CLIENT, VIP, 0, 0, 6, 3, 0)),
        (Affinity::ClientIp, key(CLIENT, VIP, 0, 0, 0, 2, 0)),
    ];
    for (a, canonical) in expected {
        let (f, r) = (selection_tuple(&fwd, a, true), selection_tuple(&rev, a, true));
        assert_eq!(f, canonical, "{a:?}");
        assert_eq!(r, canonical, "{a:?}");
        assert_eq!(h.hash(&f), h.hash(&r));
        // Off: the two directions differ.
        let (f, r) = (selection_tuple(&fwd, a, false), selection_tuple(&rev, a, false));
        assert_ne!(f, r, "{a:?}");
        assert_ne!(h.hash(&f), h.hash(&r), "{a:?}");
    }
    // The reply, hashed without symmetry, is the reversed tuple.
    assert_eq!(selection_tuple(&rev, Affinity::None, false), key(VIP, CLIENT, 443, 40000, 6, 5, 0));
    // Tracking keys follow the same canonical order.
    assert_eq!(
        tracking_key(&rev, TrackingMode::PerConnection, Affinity::None, true, SERVICE),
        key(CLIENT, VIP, 40000, 443, 6, 5, SERVICE)
    );
}

#[test]
fn sa_8_equal_addresses_are_ordered_by_port() {
    let a = Addr::v4(10, 0, 0, 1);
    let p = PacketInfo { src: a, dst: a, sport: 9000, dport: 80, ..udp() };
    let q = PacketInfo { src: a, dst: a, sport: 80, dport: 9000, ..udp() };
    let canonical = key(a, a, 80, 9000, 17, 5, 0);
    assert_eq!(selection_tuple(&p, Affinity::None, true), canonical);
    assert_eq!(selection_tuple(&q, Affinity::None, true), canonical);
}

#[test]
fn sa_8_one_tuple_is_unchanged_by_symmetry() {
    // A 1-tuple has one endpoint: the source stays the source (no canonical swap).
    let rev = PacketInfo { src: VIP, dst: CLIENT, ..udp() };
    assert_eq!(
        selection_tuple(&rev, Affinity::ClientIpNoDestination, true),
        key(VIP, NOWHERE, 0, 0, 0, 1, 0)
    );
}

// ---------------------------------------------------------------- CT-1

#[test]
fn ct_1a_per_connection_keys_are_5_or_3_tuples_for_every_affinity() {
    for a in ALL_AFFINITIES {
        let mode = TrackingMode::PerConnection;
        assert_eq!(
            tracking_key(&tcp(tcp_flags::ACK), mode, a, false, SERVICE),
            key(CLIENT, VIP, 40000, 443, 6, 5, SERVICE),
            "{a:?}"
        );
        assert_eq!(
            tracking_key(&udp(), mode, a, false, SERVICE),
            key(CLIENT, VIP, 5353, 53, 17, 5, SERVICE)
        );
        assert_eq!(
            tracking_key(&icmp(), mode, a, false, SERVICE),
            key(CLIENT, VIP, 0, 0, 1, 3, SERVICE)
        );
        assert_eq!(
            tracking_key(&fragment_of(udp()), mode, a, false, SERVICE),
            key(CLIENT, VIP, 0, 0, 17, 3, SERVICE)
        );
    }
}

#[test]
fn ct_1a_per_connection_with_client_ip_selects_by_2_tuple_but_tracks_by_5_tuple() {
    let p = tcp(tcp_flags::SYN);
    assert_eq!(selection_tuple(&p, Affinity::ClientIp, false), key(CLIENT, VIP, 0, 0, 0, 2, 0));
    assert_eq!(
        tracking_key(&p, TrackingMode::PerConnection, Affinity::ClientIp, false, SERVICE),
        key(CLIENT, VIP, 40000, 443, 6, 5, SERVICE)
    );
}

#[test]
fn ct_1b_per_session_none_and_client_ip_port_proto_are_like_ct_1a() {
    for a in [Affinity::None, Affinity::ClientIpPortProto] {
        let mode = TrackingMode::PerSession;
        assert_eq!(
            tracking_key(&tcp(tcp_flags::ACK), mode, a, false, SERVICE),
            key(CLIENT, VIP, 40000, 443, 6, 5, SERVICE)
        );
        assert_eq!(
            tracking_key(&icmp(), mode, a, false, SERVICE),
            key(CLIENT, VIP, 0, 0, 1, 3, SERVICE)
        );
        assert_eq!(
            tracking_key(&fragment_of(tcp(0)), mode, a, false, SERVICE),
            key(CLIENT, VIP, 0, 0, 6, 3, SERVICE)
        );
    }
}

#[test]
fn ct_1c_per_session_client_ip_proto_keys_are_3_tuples() {
    let (mode, a) = (TrackingMode::PerSession, Affinity::ClientIpProto);
    assert_eq!(
        tracking_key(&tcp(tcp_flags::ACK), mode, a, false, SERVICE),
        key(CLIENT, VIP, 0, 0, 6, 3, SERVICE)
    );
    assert_eq!(
        tracking_key(&udp(), mode, a, false, SERVICE),
        key(CLIENT, VIP, 0, 0, 17, 3, SERVICE)
    );
    assert_eq!(
        tracking_key(&icmp(), mode, a, false, SERVICE),
        key(CLIENT, VIP, 0, 0, 1, 3, SERVICE)
    );
}

#[test]
fn ct_1d_per_session_client_ip_keys_are_2_tuples() {
    let (mode, a) = (TrackingMode::PerSession, Affinity::ClientIp);
    for p in [tcp(tcp_flags::ACK), udp(), icmp(), fragment_of(udp())] {
        assert_eq!(
            tracking_key(&p, mode, a, false, SERVICE),
            key(CLIENT, VIP, 0, 0, 0, 2, SERVICE)
        );
    }
}

#[test]
fn ct_1e_per_session_no_destination_keys_are_1_tuples() {
    let (mode, a) = (TrackingMode::PerSession, Affinity::ClientIpNoDestination);
    for p in [tcp(tcp_flags::ACK), udp(), icmp(), fragment_of(udp())] {
        assert_eq!(
            tracking_key(&p, mode, a, false, SERVICE),
            key(CLIENT, NOWHERE, 0, 0, 0, 1, SERVICE)
        );
    }
}

#[test]
fn ct_1_service_id_is_in_tracking_keys_and_not_in_selection_tuples() {
    // Two services never share an entry; the selection hash never depends on local ids (CH-1).
    let p = tcp(tcp_flags::ACK);
    let k1 = tracking_key(&p, TrackingMode::PerConnection, Affinity::None, false, 1);
    let k2 = tracking_key(&p, TrackingMode::PerConnection, Affinity::None, false, 2);
    assert_eq!((k1.service, k2.service), (1, 2));
    assert_ne!(k1, k2);
    assert_eq!(selection_tuple(&p, Affinity::None, false).service, 0);
}

// ---------------------------------------------------------------- CT-2

#[test]
fn ct_2_which_configurations_treat_a_syn_as_a_new_connection() {
    let syn = tcp(tcp_flags::SYN);
    for (mode, a, expected) in SYN_IS_NEW {
        assert_eq!(is_new_connection_syn(&syn, mode, a), expected, "{mode:?} {a:?}");
    }
}

#[test]
fn ct_2_only_an_unfragmented_tcp_syn_without_ack_is_new() {
    let (mode, a) = (TrackingMode::PerConnection, Affinity::None);
    assert!(is_new_connection_syn(&tcp(tcp_flags::SYN), mode, a));
    // SYN+ACK is the server's answer, not a new connection.
    assert!(!is_new_connection_syn(&tcp(tcp_flags::SYN | tcp_flags::ACK), mode, a));
    assert!(!is_new_connection_syn(&tcp(tcp_flags::ACK), mode, a));
    assert!(!is_new_connection_syn(&tcp(tcp_flags::RST), mode, a));
    // A fragment is never a new-connection SYN, even the first one carrying the SYN flag.
    let frag_syn = PacketInfo { fragment: true, ..tcp(tcp_flags::SYN) };
    assert!(!is_new_connection_syn(&frag_syn, mode, a));
    // An ICMP error about a SYN is looked up, never a new connection.
    let icmp_err = PacketInfo { icmp_error: true, ..tcp(tcp_flags::SYN) };
    assert!(!is_new_connection_syn(&icmp_err, mode, a));
    // Only TCP: a UDP packet with a stray flags byte is not a SYN.
    let udp_syn = PacketInfo { tcp_flags: tcp_flags::SYN, ..udp() };
    assert!(!is_new_connection_syn(&udp_syn, mode, a));
}

// ---------------------------------------------------------------- the data plane's short way

/// The packet path builds the key of a service that "tracks the 5-tuple" without the general
/// code, and looks up every packet of it but a SYN: which configurations promise that, and
/// that the promise holds for every TCP and UDP packet with ports, in both address families.
#[test]
fn tracks_five_tuple_is_exactly_the_configurations_whose_ported_keys_are_5_tuples() {
    let v6_udp = PacketInfo { src: v6("2001:db8::1"), dst: v6("2001:db8::2"), ..udp() };
    let ported = [tcp(tcp_flags::SYN), tcp(tcp_flags::ACK), tcp(tcp_flags::FIN), udp(), v6_udp];
    for (mode, a, expected) in SYN_IS_NEW {
        assert_eq!(tracks_five_tuple(mode, a, false), expected, "{mode:?} {a:?}");
        // Symmetric hashing orders the endpoints: never the packet's 5-tuple as received.
        assert!(!tracks_five_tuple(mode, a, true), "{mode:?} {a:?} symmetric");
        if !expected {
            continue;
        }
        for p in ported {
            let k = key(p.src, p.dst, p.sport, p.dport, p.proto, 5, SERVICE);
            assert_eq!(tracking_key(&p, mode, a, false, SERVICE), k, "{mode:?} {a:?} {p:?}");
            assert_eq!(FlowKey::five_tuple(&p, SERVICE), k);
            assert_eq!(is_new_connection_syn(&p, mode, a), p.is_syn(), "{mode:?} {a:?} {p:?}");
        }
    }
}

// ---------------------------------------------------------------- CH-1, CH-4

/// The byte image of `key(CLIENT, VIP, 40000, 443, 6, 5, service)`, written by hand.
fn five_tuple_image(service: u8) -> [u8; 40] {
    [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1, // src ::ffff:192.0.2.1
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 51, 100, 7, // dst ::ffff:198.51.100.7
        0x40, 0x9c, // sport 40000, little-endian
        0xbb, 0x01, // dport 443, little-endian
        6,    // proto TCP
        5,    // kind: 5-tuple
        service, 0, // service, little-endian
    ]
}

#[test]
fn ch_1_byte_image_is_fixed() {
    assert_eq!(FLOW_KEY_BYTES, 40);
    assert_eq!(size_of::<FlowKey>(), 40);
    let k = selection_tuple(&tcp(tcp_flags::ACK), Affinity::None, false);
    assert_eq!(k.to_bytes(), five_tuple_image(0));
    let t =
        tracking_key(&tcp(tcp_flags::ACK), TrackingMode::PerConnection, Affinity::None, false, 7);
    assert_eq!(t.to_bytes(), five_tuple_image(7));
}

#[test]
fn ch_1_same_inputs_same_hash() {
    let a = FlowHasher::new(DEFAULT_HASH_SEED);
    let b = FlowHasher::default();
    for p in packet_zoo() {
        for aff in ALL_AFFINITIES {
            let k = selection_tuple(&p, aff, false);
            assert_eq!(a.hash(&k), b.hash(&k));
            assert_eq!(a.hash(&k), a.hash(&selection_tuple(&p, aff, false)));
            assert_eq!(a.hash(&k), a.hash_bytes(&k.to_bytes()));
        }
    }
}

#[test]
fn ch_1_hash_of_known_keys_is_pinned() {
    // Values from the reference C xxHash (XXH3_64bits_withSeed) over the images above: if
    // these change, every balancer instance running the old code picks other backends.
    let h = FlowHasher::default();
    let five = selection_tuple(&tcp(tcp_flags::ACK), Affinity::None, false);
    assert_eq!(h.hash(&five), 0x4265_5d96_a054_45dd);
    let tracked =
        tracking_key(&tcp(tcp_flags::ACK), TrackingMode::PerConnection, Affinity::None, false, 7);
    assert_eq!(h.hash(&tracked), 0x4b5f_9288_b88e_58a1);
    let one = selection_tuple(&tcp(0), Affinity::ClientIpNoDestination, false);
    assert_eq!(h.hash(&one), 0x4cff_d7c7_5563_7716);
    // IPv6 fragment, 3-tuple: 2001:db8::1 -> 2001:db8::2, UDP.
    let f6 = PacketInfo { src: v6("2001:db8::1"), dst: v6("2001:db8::2"), ..fragment_of(udp()) };
    assert_eq!(h.hash(&selection_tuple(&f6, Affinity::None, false)), 0xbad1_9443_e9a1_3a28);
}

#[test]
fn ch_4_default_seed_is_the_fixed_builtin_constant() {
    assert_eq!(DEFAULT_HASH_SEED, 0x5350_494c_4c57_4159);
    assert_eq!(DEFAULT_HASH_SEED, u64::from_be_bytes(*b"SPILLWAY"));
    assert_eq!(FlowHasher::default().seed(), DEFAULT_HASH_SEED);
}

#[test]
fn ch_4_different_seeds_give_different_hashes() {
    let k = selection_tuple(&tcp(tcp_flags::ACK), Affinity::None, false);
    let default = FlowHasher::default().hash(&k);
    let one = FlowHasher::new(1).hash(&k);
    assert_eq!(one, 0x10ae_cb58_7e8e_8040); // reference C xxHash, seed 1
    assert_ne!(default, one);
    // Over many keys and seeds: no two seeds agree on a key.
    for p in packet_zoo() {
        let k = selection_tuple(&p, Affinity::None, false);
        let hashes: Vec<u64> = (0..16u64).map(|s| FlowHasher::new(s).hash(&k)).collect();
        let mut dedup = hashes.clone();
        dedup.sort_unstable();
        dedup.dedup();
        assert_eq!(dedup.len(), hashes.len(), "{p:?}");
    }
}
