//! NX-2: malformed frames are dropped with one counted reason, never a panic.
//!
//! Every `Malformed` variant is produced by at least one crafted frame (each made by
//! breaking one field of a real captured frame), and a property test feeds random bytes and
//! random truncations/mutations of every seed frame to `classify`.

mod wire_fixtures;

use proptest::prelude::*;
use spillway_core::wire::{classify, FrameKind, Malformed};
use wire_fixtures::*;

fn set16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// (name, frame, expected reason) for every rule of the module doc.
fn cases() -> Vec<(&'static str, Vec<u8>, Malformed)> {
    let mut v = Vec::new();
    let syn4 = hex(TCP_SYN_V4);
    let syn6 = hex(TCP_SYN_V6);
    let udp4 = hex(UDP_DNS_V4);

    // --- Truncated: the frame ends inside a fixed L2/L3 header.
    v.push(("ethernet 13 bytes", syn4[..13].to_vec(), Malformed::Truncated));
    let mut vlan = syn4[..12].to_vec();
    vlan.extend_from_slice(&[0x81, 0x00, 0x00]);
    v.push(("vlan tag cut", vlan, Malformed::Truncated));
    v.push(("arp 20 bytes", hex(ARP_REQUEST)[..34].to_vec(), Malformed::Truncated));
    v.push(("arp fixed part cut", hex(ARP_REQUEST)[..18].to_vec(), Malformed::Truncated));
    v.push(("ipv4 19 bytes", syn4[..33].to_vec(), Malformed::Truncated));
    v.push(("ipv6 39 bytes", syn6[..53].to_vec(), Malformed::Truncated));

    // --- BadVersion.
    let mut b = syn4.clone();
    b[14] = 0x65;
    v.push(("ipv4 ethertype, version 6", b, Malformed::BadVersion));
    let mut b = syn6.clone();
    b[14] = 0x45;
    v.push(("ipv6 ethertype, version 4", b, Malformed::BadVersion));

    // --- BadIhl.
    let mut b = syn4.clone();
    b[14] = 0x44;
    v.push(("ihl 4", b, Malformed::BadIhl));
    let mut b = syn4.clone();
    b[14] = 0x40;
    v.push(("ihl 0", b, Malformed::BadIhl));

    // --- BadLength.
    let mut b = syn4.clone();
    set16(&mut b, 16, 61);
    v.push(("total length past the frame", b, Malformed::BadLength));
    let mut b = syn4.clone();
    set16(&mut b, 16, 19);
    v.push(("total length below the header", b, Malformed::BadLength));
    let mut b = syn4.clone();
    b[14] = 0x4f; // a 60-byte header
    set16(&mut b, 16, 56);
    v.push(("total length below an IHL-15 header", b, Malformed::BadLength));
    let mut b = syn6.clone();
    set16(&mut b, 18, 41);
    v.push(("ipv6 payload length past the frame", b, Malformed::BadLength));

    // --- BadFragment (rules 1-4 of the module doc), IPv4 then IPv6.
    let mut b = hex(V4_FRAG_LAST);
    set16(&mut b, 20, 8191); // 65528 + 528 > 65535
    v.push(("v4 fragment end past 65535", b, Malformed::BadFragment));
    let mut b = hex(V4_FRAG_FIRST);
    set16(&mut b, 16, 1500 - 4); // 1476 data bytes, MF set
    v.push(("v4 non-last fragment not a multiple of 8", b, Malformed::BadFragment));
    let mut b = syn4.clone();
    set16(&mut b, 16, 20);
    set16(&mut b, 20, 0x2000); // MF, no data
    v.push(("v4 non-last fragment without data", b, Malformed::BadFragment));
    let mut b = syn4.clone();
    set16(&mut b, 16, 20 + 16); // 16 bytes of TCP header only
    set16(&mut b, 20, 0x2000);
    v.push(("v4 tiny first TCP fragment (RFC 1858)", b, Malformed::BadFragment));
    let mut b = syn4.clone();
    set16(&mut b, 20, 1); // TCP at offset 1 (8 bytes)
    v.push(("v4 TCP fragment at offset 1 (RFC 1858)", b, Malformed::BadFragment));
    let mut b = hex(HBH_FRAG_LAST);
    set16(&mut b, 14 + 40 + 8 + 2, 8191 << 3);
    v.push(("v6 fragment end past 65535", b, Malformed::BadFragment));
    let mut b = hex(HBH_FRAG_FIRST);
    set16(&mut b, 18, 1240 - 4);
    v.push(("v6 non-last fragment not a multiple of 8", b, Malformed::BadFragment));
    let mut b = hex(HBH_FRAG_FIRST);
    set16(&mut b, 18, 16); // UDP would start at the end of the chain
    b.truncate(14 + 40 + 16);
    set16(&mut b, 14 + 40 + 8 + 2, 0); // and make it a last (atomic) fragment
    v.push(("v6 first fragment without the UDP header", b, Malformed::BadFragment));

    // --- BadExtensionHeader.
    let mut b = syn6[..54].to_vec();
    b[20] = 60; // destination options, 9 times
    for i in 0..9 {
        b.extend_from_slice(&[if i == 8 { 6 } else { 60 }, 0, 1, 4, 0, 0, 0, 0]);
    }
    b.extend_from_slice(&syn6[54..]);
    let plen = u16::try_from(b.len() - 54).unwrap();
    set16(&mut b, 18, plen);
    v.push(("nine extension headers", b, Malformed::BadExtensionHeader));
    let mut b = hex(HBH_FRAG_FIRST);
    b[14 + 6] = 60; // destination options first, then the hop-by-hop header
    b[14 + 40] = 0;
    v.push(("hop-by-hop not first", b, Malformed::BadExtensionHeader));
    let mut b = hex(HBH_FRAG_FIRST);
    b[14 + 40 + 1] = 200; // hop-by-hop header of 1608 bytes
    v.push(("extension header past the payload", b, Malformed::BadExtensionHeader));
    let mut b = hex(HBH_FRAG_FIRST);
    b[14 + 40 + 8] = 44; // Fragment header says a Fragment header follows
    v.push(("two fragment headers", b, Malformed::BadExtensionHeader));

    // --- BadTransportHeader.
    let mut b = syn4.clone();
    b[14 + 20 + 12] = 0x40;
    v.push(("tcp data offset 4", b, Malformed::BadTransportHeader));
    let mut b = syn4.clone();
    b[14 + 20 + 12] = 0xf0; // 60-byte header in a 40-byte segment
    v.push(("tcp data offset past the packet", b, Malformed::BadTransportHeader));
    let mut b = syn4.clone();
    set16(&mut b, 16, 20 + 12);
    v.push(("tcp header cut by the IP length", b, Malformed::BadTransportHeader));
    let mut b = udp4.clone();
    set16(&mut b, 14 + 20 + 4, 7);
    v.push(("udp length 7", b, Malformed::BadTransportHeader));
    let mut b = udp4.clone();
    set16(&mut b, 14 + 20 + 4, 38);
    v.push(("udp length past the IP payload", b, Malformed::BadTransportHeader));
    let mut b = hex(UDP_DNS_V6);
    set16(&mut b, 14 + 40 + 4, 0);
    v.push(("udp length 0 (jumbogram) over IPv6", b, Malformed::BadTransportHeader));

    // --- BadIcmp.
    let mut b = hex(ICMP_ECHO_V4);
    set16(&mut b, 16, 24);
    v.push(("icmp header cut", b, Malformed::BadIcmp));
    let mut b = hex(PORT_UNREACH_V4);
    set16(&mut b, 16, 20 + 8 + 20 + 7);
    v.push(("icmp error quoting 7 transport bytes", b, Malformed::BadIcmp));
    let mut b = hex(PORT_UNREACH_V4);
    b[14 + 28] = 0x65;
    v.push(("icmp error quoting a non-IPv4 packet", b, Malformed::BadIcmp));
    let mut b = hex(PORT_UNREACH_V6);
    set16(&mut b, 18, 8 + 40 + 4);
    v.push(("icmpv6 error quoting 4 transport bytes", b, Malformed::BadIcmp));
    let mut b = hex(NS);
    b[21] = 64;
    v.push(("neighbor solicitation with hop limit 64", b, Malformed::BadIcmp));
    let mut b = hex(NS);
    b[14 + 40 + 25] = 0;
    v.push(("nd option of length 0", b, Malformed::BadIcmp));
    let mut b = hex(NA);
    b[14 + 40 + 8] = 0xff;
    v.push(("nd multicast target", b, Malformed::BadIcmp));
    v
}

#[test]
fn nx_2_every_malformed_variant_is_produced_by_a_crafted_frame() {
    let cases = cases();
    for (name, frame, want) in &cases {
        assert_eq!(classify(frame).err(), Some(*want), "{name}");
    }
    for reason in Malformed::ALL {
        assert!(cases.iter().any(|c| c.2 == reason), "no frame produces {reason:?}");
    }
}

#[test]
fn malformed_names_are_unique_snake_case_labels() {
    let names: std::collections::BTreeSet<_> = Malformed::ALL.iter().map(|m| m.as_str()).collect();
    assert_eq!(names.len(), Malformed::ALL.len());
    for (i, m) in Malformed::ALL.iter().enumerate() {
        assert_eq!(m.index(), i);
        assert!(m.as_str().bytes().all(|c| c.is_ascii_lowercase() || c == b'_'));
        assert_eq!(m.to_string(), m.as_str());
    }
}

/// The fragment rules accept what they must: a last fragment of any length, a first UDP
/// fragment holding exactly the UDP header.
#[test]
fn nx_2_fragment_rules_accept_legal_edges() {
    let mut b = hex(V4_FRAG_LAST);
    set16(&mut b, 16, 20 + 3);
    b.truncate(14 + 23);
    assert!(classify(&b).is_ok());
    let mut b = hex(UDP_DNS_V4);
    set16(&mut b, 16, 20 + 8);
    set16(&mut b, 20, 0x2000);
    assert!(matches!(classify(&b).unwrap().kind, FrameKind::Ip { info, .. } if info.fragment));
}

fn seeds() -> &'static [Vec<u8>] {
    static SEEDS: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    SEEDS.get_or_init(load_seeds)
}

fn load_seeds() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = [
        ARP_REQUEST,
        ARP_REPLY,
        ICMP_ECHO_V4,
        ICMP_ECHO_RR,
        V4_FRAG_FIRST,
        V4_FRAG_LAST,
        TIME_EXCEEDED_ICMP,
        NS,
        NA,
        ICMPV6_ECHO,
        V6_FRAG_FIRST,
        PTB_V6,
        V6_FRAG_LAST,
        UDP_DNS_V4,
        PORT_UNREACH_V4,
        TIME_EXCEEDED_UDP,
        UDP_DNS_V6,
        PORT_UNREACH_V6,
        HBH_FRAG_FIRST,
        HBH_FRAG_LAST,
        TCP_SYN_V4,
        TCP_SYN_V6,
        FRAG_NEEDED_TCP,
    ]
    .iter()
    .map(|h| hex(h))
    .collect();
    let dir = format!("{}/../fuzz/corpus/parse", env!("CARGO_MANIFEST_DIR"));
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if let Ok(b) = std::fs::read(e.path()) {
                v.push(b);
            }
        }
    }
    v.extend(cases().into_iter().map(|c| c.1));
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

    /// NX-2: random bytes never panic.
    #[test]
    fn nx_2_random_bytes_never_panic(frame in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = classify(&frame);
    }

    /// NX-2: random bytes behind a valid Ethernet + IP header prefix never panic.
    #[test]
    fn nx_2_random_l4_never_panics(
        which in 0usize..4,
        proto in prop_oneof![Just(1u8), Just(6), Just(17), Just(58), Just(0), Just(44), Just(60), any::<u8>()],
        tail in proptest::collection::vec(any::<u8>(), 0..120),
    ) {
        let mut f = match which {
            0 | 1 => hex(TCP_SYN_V4)[..34].to_vec(),
            _ => hex(TCP_SYN_V6)[..54].to_vec(),
        };
        f.extend_from_slice(&tail);
        if f[14] >> 4 == 4 {
            f[23] = proto;
            let tl = u16::try_from(f.len() - 14).unwrap();
            f[16..18].copy_from_slice(&tl.to_be_bytes());
            if which == 1 { f[20] = 0x20; } // fragments too
        } else {
            f[20] = proto;
            let pl = u16::try_from(f.len() - 54).unwrap();
            f[18..20].copy_from_slice(&pl.to_be_bytes());
        }
        let _ = classify(&f);
    }

    /// NX-2: truncations and byte mutations of every seed frame never panic, and whatever
    /// classifies has its offsets inside the frame.
    #[test]
    fn nx_2_mutated_seed_frames_never_panic(
        pick in any::<prop::sample::Index>(),
        cut in any::<prop::sample::Index>(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
    ) {
        let seeds = seeds();
        let mut f = seeds[pick.index(seeds.len())].clone();
        for (at, byte) in edits {
            if !f.is_empty() {
                let i = at.index(f.len());
                f[i] = byte;
            }
        }
        let keep = cut.index(f.len() + 1);
        f.truncate(keep);
        if let Ok(fr) = classify(&f) {
            if let Some(ip) = fr.kind.ip() {
                prop_assert!(ip.frame_len() <= f.len());
                prop_assert!(ip.l4() <= ip.frame_len());
                prop_assert!(usize::from(ip.l3_offset) + 20 <= ip.l4());
            }
        }
    }
}
