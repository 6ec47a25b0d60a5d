//! NX-2: `classify` and the in-place answers must never panic, whatever the frame.
//!
//! Every input is classified; frames that classify are also answered in place (ARP reply,
//! echo reply, neighbour advertisement) and complained about (frag-needed / packet-too-big),
//! and the offsets `classify` reports must lie inside the frame. An ICMP error's quoted UDP
//! payload (QL-5) must be a tail of its IP packet.

#![no_main]

use libfuzzer_sys::fuzz_target;
use spillway_core::addr::Addr;
use spillway_core::wire::build;
use spillway_core::wire::{classify, quoted_udp_payload, FrameKind};

const MAC: [u8; 6] = [2, 0, 0, 0, 0x1b, 1];

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = classify(data) else { return };
    if let Some(ip) = frame.kind.ip() {
        assert!(ip.frame_len() <= data.len());
        assert!(ip.l4() <= ip.frame_len());
        let mut out = [0u8; 1600];
        let l3 = &data[ip.l3_range()];
        let _ = if ip.is_v4 {
            build::icmp_frag_needed(&mut out, MAC, MAC, Addr::v4(192, 0, 2, 1), l3, 1400)
        } else {
            let me: Addr = Addr([0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            build::icmpv6_packet_too_big(&mut out, MAC, MAC, me, l3, 1280)
        };
    }
    if let FrameKind::IcmpError { ip, .. } = frame.kind {
        let quoted = quoted_udp_payload(data, &ip);
        let end = ip.l3_range().end;
        if !quoted.is_empty() {
            assert!(data[..end].ends_with(quoted), "a tail of the error's IP packet");
        }
    }
    let mut buf = data.to_vec();
    buf.resize(data.len() + 64, 0);
    let n = match frame.kind {
        FrameKind::Arp { .. } => build::arp_reply(&mut buf, &frame, MAC),
        FrameKind::IcmpEchoRequest { .. } => build::icmp_echo_reply(&mut buf, &frame),
        FrameKind::NeighborSolicitation { .. } => {
            build::neighbor_advertisement(&mut buf, &frame, MAC)
        }
        _ => return,
    };
    if let Ok(n) = n {
        assert!(n <= buf.len());
        // What we send must itself parse.
        assert!(classify(&buf[..n]).is_ok());
    }
});
