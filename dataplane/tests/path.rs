//! The packet path without DPDK: frames in a plain buffer through `path::process`, with a real
//! snapshot and conntrack shard. Expected bytes are written out by hand (header offsets from
//! the RFCs), never produced by the builders under test.

#[path = "../../benches/fixture.rs"]
mod fixture;

use crossbeam::queue::ArrayQueue;
use fixture::{a, model, service, snapshot, NODE_MAC};
use spillway_core::addr::Addr;
use spillway_core::conntrack::{key_hash, Shard};
use spillway_core::counters::{PathDrop, Reason, WorkerCounters};
use spillway_core::decide::{decide, DropReason, ForwardReason};
use spillway_core::flow::FlowKey;
use spillway_core::model::{Encap, RuleProtocol};
use spillway_core::policy::{Affinity, TrackingMode};
use spillway_core::snapshot::{BackendRef, Snapshot};
use spillway_core::time::Time;
use spillway_core::wire::{self, FrameKind, Malformed};
use spillway_dataplane::neighbour::{NeighbourEvent, NeighbourTable, NextHopCache};
use spillway_dataplane::node::Node;
use spillway_dataplane::path::{
    process, process_burst, Outcome, PacketBuf, PathCtx, WaitingSlots, MAX_BURST,
};
use spillway_dataplane::vecbuf::VecBuf;

const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0c];
const B1_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xb1];
const B6_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xb6];

fn snap(encap: Encap) -> Snapshot {
    let l3 = RuleProtocol::L3Default;
    snapshot(model(
        "r",
        [
            service("web", encap, l3, &["198.18.0.100", "fd00::100"], "g", [a("198.18.1.1")]),
            service("web6", encap, l3, &["fd00::200"], "g6", [a("fd00::1:1")]),
        ],
    ))
}

struct Rig {
    snap: Snapshot,
    shard: Shard,
    node: Node,
    neighbours: NeighbourTable,
    events: ArrayQueue<NeighbourEvent>,
    next_hops: NextHopCache,
    counters: WorkerCounters,
    kernel: bool,
    now: Time,
}

impl Rig {
    fn new(encap: Encap) -> Rig {
        Rig {
            snap: snap(encap),
            shard: Shard::with_capacity(1024),
            node: fixture::node(true),
            neighbours: NeighbourTable::from_pairs([
                (a("198.18.1.1"), B1_MAC),
                (a("fd00::1:1"), B6_MAC),
            ]),
            events: ArrayQueue::new(64),
            next_hops: NextHopCache::new(),
            counters: WorkerCounters::new(),
            kernel: false,
            now: Time::ZERO,
        }
    }

    /// The same, with an exception path to the kernel.
    fn with_kernel(encap: Encap) -> Rig {
        Rig { kernel: true, ..Rig::new(encap) }
    }

    /// The path's context over this rig, at its time (0 unless a test moves it), with the
    /// next hops refreshed.
    fn ctx(&mut self) -> PathCtx<'_> {
        self.next_hops.refresh(&self.snap, &self.neighbours, &self.node);
        PathCtx {
            snap: &self.snap,
            shard: &mut self.shard,
            now: self.now,
            node: &self.node,
            neighbours: &self.neighbours,
            next_hops: &self.next_hops,
            events: &self.events,
            counters: &self.counters,
            kernel: self.kernel,
            waiting: WaitingSlots::default(),
        }
    }

    fn run(&mut self, frame: &[u8]) -> (Outcome, Vec<u8>) {
        let mut b = VecBuf::with_frame(frame);
        let o = process(&mut b, &mut self.ctx());
        (o, b.data().to_vec())
    }

    /// The frames as one burst ([`process_burst`]): what each became.
    fn run_burst(&mut self, frames: &[Vec<u8>]) -> Vec<(Outcome, Vec<u8>)> {
        let mut bufs: Vec<VecBuf> = frames.iter().map(|f| VecBuf::with_frame(f)).collect();
        let mut out = [Outcome::Consumed; MAX_BURST];
        process_burst(&mut bufs, &mut self.ctx(), &mut out);
        out.iter().zip(&bufs).map(|(o, b)| (*o, b.data().to_vec())).collect()
    }

    fn count(&self, r: Reason) -> u64 {
        self.counters.reason(r).get()
    }

    /// Every reason's count, then every service's and backend's traffic counters.
    fn all_counters(&self) -> Vec<u64> {
        let c = &self.counters;
        let traffic = c.services.iter().chain(c.backends.iter()).flat_map(|t| {
            [t.packets.get(), t.bytes.get(), t.new_connections.get(), t.tracked.get()]
        });
        Reason::all().map(|r| self.count(r)).chain(traffic).collect()
    }
}

fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn csum(data: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in data.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// IPv4 header (20 bytes) + payload.
fn ipv4(src: &str, dst: &str, proto: u8, df: bool, payload: &[u8]) -> Vec<u8> {
    let total = (20 + payload.len()) as u16;
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&[0x12, 0x34, if df { 0x40 } else { 0 }, 0, 64, proto, 0, 0]);
    h.extend_from_slice(&a(src).v4_bytes().unwrap());
    h.extend_from_slice(&a(dst).v4_bytes().unwrap());
    let c = csum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(payload);
    h
}

fn ipv6(src: &str, dst: &str, next: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    h.extend_from_slice(&[next, 64]);
    h.extend_from_slice(&a(src).0);
    h.extend_from_slice(&a(dst).0);
    h.extend_from_slice(payload);
    h
}

/// A TCP header (20 bytes, no options) + data; checksum left 0 (not checked on the path).
fn tcp(sport: u16, dport: u16, flags: u8, data: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(data);
    t
}

fn udp(sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + data.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(data);
    u
}

fn syn_to_vip() -> (Vec<u8>, Vec<u8>) {
    let ip = ipv4("198.18.10.5", "198.18.0.100", 6, true, &tcp(40000, 80, 0x02, b""));
    (eth(NODE_MAC, CLIENT_MAC, 0x0800, &ip), ip)
}

#[test]
fn ipip_v4_encapsulates_to_the_backend() {
    let mut r = Rig::new(Encap::Ipip);
    let (frame, inner) = syn_to_vip();
    let (o, out) = r.run(&frame);
    assert_eq!(o, Outcome::Transmit);
    assert_eq!(&out[0..6], &B1_MAC, "dst MAC: the backend's");
    assert_eq!(&out[6..12], &NODE_MAC);
    assert_eq!(&out[12..14], &[0x08, 0x00]);
    let outer = &out[14..34];
    assert_eq!(outer[0], 0x45);
    assert_eq!(u16::from_be_bytes([outer[2], outer[3]]) as usize, 20 + inner.len());
    assert_eq!(outer[9], 4, "protocol 4: IPv4 in IPv4");
    assert_eq!(&outer[12..16], &[198, 18, 0, 2], "outer source: the node");
    assert_eq!(&outer[16..20], &[198, 18, 1, 1], "outer destination: the backend");
    assert_eq!(csum(outer), 0, "outer header checksum valid");
    assert_eq!(&out[34..], &inner[..], "inner packet untouched");
    assert_eq!(r.count(Reason::Forward(ForwardReason::NewConnection)), 1);
    assert_eq!(r.counters.backends[0].new_connections.get(), 1);
    // The next packet of the flow hits the entry.
    let ack = ipv4("198.18.10.5", "198.18.0.100", 6, true, &tcp(40000, 80, 0x10, b"hi"));
    let (o, _) = r.run(&eth(NODE_MAC, CLIENT_MAC, 0x0800, &ack));
    assert_eq!(o, Outcome::Transmit);
    assert_eq!(r.count(Reason::Forward(ForwardReason::ConntrackHit)), 1);
}

#[test]
fn gue_v4_wraps_in_udp_with_flow_source_port() {
    let mut r = Rig::new(Encap::Gue { port: 6080 });
    let (frame, inner) = syn_to_vip();
    let (o, out) = r.run(&frame);
    assert_eq!(o, Outcome::Transmit);
    assert_eq!(out[14 + 9], 17, "outer protocol UDP");
    let udp_h = &out[34..42];
    let sport = u16::from_be_bytes([udp_h[0], udp_h[1]]);
    assert!(sport >= 49152, "source port from the flow hash, in the dynamic range: {sport}");
    assert_eq!(u16::from_be_bytes([udp_h[2], udp_h[3]]), 6080);
    assert_eq!(u16::from_be_bytes([udp_h[4], udp_h[5]]) as usize, 8 + inner.len());
    assert_eq!(&out[42..], &inner[..]);
    // Same flow, same source port; another flow usually another.
    let (_, again) = r.run(&frame);
    assert_eq!(&again[34..36], &out[34..36]);
}

#[test]
fn ipv6_vip_goes_over_ip6ip6() {
    let mut r = Rig::new(Encap::Ipip);
    let inner = ipv6("fd00::10:5", "fd00::200", 17, &udp(5000, 53, b"q"));
    let (o, out) = r.run(&eth(NODE_MAC, CLIENT_MAC, 0x86dd, &inner));
    assert_eq!(o, Outcome::Transmit);
    assert_eq!(&out[0..6], &B6_MAC);
    assert_eq!(&out[12..14], &[0x86, 0xdd]);
    let outer = &out[14..54];
    assert_eq!(outer[0] >> 4, 6);
    assert_eq!(outer[6], 41, "next header 41: IPv6 in IPv6");
    assert_eq!(u16::from_be_bytes([outer[4], outer[5]]) as usize, inner.len());
    assert_eq!(&outer[8..24], &a("fd00::2").0);
    assert_eq!(&outer[24..40], &a("fd00::1:1").0);
    assert_eq!(&out[54..], &inner[..]);
    // The flow's next datagram finds its entry and leaves by the short way (the prebuilt
    // IP-in-IPv6 headers): byte for byte what the first, decided in full, became.
    let (o2, again) = r.run(&eth(NODE_MAC, CLIENT_MAC, 0x86dd, &inner));
    assert_eq!((o2, &again), (Outcome::Transmit, &out));
    assert_eq!(r.count(Reason::Forward(ForwardReason::ConntrackHit)), 1);
}

#[test]
fn l2_dsr_rewrites_macs_only() {
    // L2 DSR: the frame is the same but for the MACs.
    let mut r = Rig::new(Encap::L2);
    let (frame, _) = syn_to_vip();
    let (o, out) = r.run(&frame);
    assert_eq!(o, Outcome::Transmit);
    assert_eq!(&out[0..6], &B1_MAC);
    assert_eq!(&out[6..12], &NODE_MAC);
    assert_eq!(&out[12..], &frame[12..]);
}

#[test]
fn unresolved_next_hop_waits_built_but_for_its_mac_and_asks() {
    // Resolved: the frame as it leaves.
    let (frame, _) = syn_to_vip();
    let (o, resolved) = Rig::new(Encap::Ipip).run(&frame);
    assert_eq!(o, Outcome::Transmit);
    // Unresolved: the same frame, but for a destination MAC the worker writes when the answer
    // comes; it waits (the backend's slot), is counted as forwarded, not dropped, and the
    // resolver is asked.
    let mut r = Rig::new(Encap::Ipip);
    r.neighbours = NeighbourTable::default();
    let mut b = VecBuf::with_frame(&frame);
    let mut ctx = r.ctx();
    let o = process(&mut b, &mut ctx);
    let slots = ctx.waiting.slots().to_vec();
    let waiting = b.data().to_vec();
    assert_eq!(o, Outcome::Wait);
    assert_eq!(slots.len(), 1);
    assert_eq!(r.snap.backend(slots[0]).map(|b| b.endpoint.addr), Some(a("198.18.1.1")));
    assert_eq!((&waiting[..6], &waiting[6..]), (&[0u8; 6][..], &resolved[6..]));
    assert_eq!(r.count(Reason::Path(PathDrop::NeighbourUnresolved)), 0);
    assert_eq!(r.count(Reason::Forward(ForwardReason::NewConnection)), 1);
    assert_eq!(r.events.pop(), Some(NeighbourEvent::Wanted(a("198.18.1.1"))));
}

fn arp(op: u16, sender_mac: [u8; 6], sender: &str, target: &str) -> Vec<u8> {
    let mut p = vec![0, 1, 8, 0, 6, 4];
    p.extend_from_slice(&op.to_be_bytes());
    p.extend_from_slice(&sender_mac);
    p.extend_from_slice(&a(sender).v4_bytes().unwrap());
    p.extend_from_slice(&[0; 6]);
    p.extend_from_slice(&a(target).v4_bytes().unwrap());
    eth([0xff; 6], sender_mac, 0x0806, &p)
}

#[test]
fn arp_for_vip_and_node_is_answered_others_not() {
    let mut r = Rig::new(Encap::Ipip);
    for target in ["198.18.0.100", "198.18.0.2"] {
        let (o, out) = r.run(&arp(1, CLIENT_MAC, "198.18.10.5", target));
        assert_eq!(o, Outcome::Transmit, "{target}");
        assert_eq!(&out[0..6], &CLIENT_MAC);
        assert_eq!(&out[12..14], &[0x08, 0x06]);
        assert_eq!(&out[20..22], &[0, 2], "ARP reply");
        assert_eq!(&out[22..28], &NODE_MAC, "sender MAC: ours");
        assert_eq!(&out[28..32], &a(target).v4_bytes().unwrap());
        assert_eq!(&out[32..38], &CLIENT_MAC);
        assert_eq!(&out[38..42], &[198, 18, 10, 5]);
    }
    let (o, _) = r.run(&arp(1, CLIENT_MAC, "198.18.10.5", "198.18.0.77"));
    assert_eq!(o, Outcome::Drop(Reason::Path(PathDrop::NotForUs)));
    // Requests teach nothing (anyone can send one); a reply goes to the resolver, which
    // believes it only as the answer to its own request (neighbour.rs), also when it repeats
    // the MAC the table has (that keeps the entry fresh).
    assert_eq!(r.events.pop(), None);
    for _ in 0..2 {
        let (o, _) = r.run(&arp(2, B1_MAC, "198.18.1.9", "198.18.0.2"));
        assert_eq!(o, Outcome::Consumed);
        assert_eq!(r.events.pop(), Some(NeighbourEvent::Learned(a("198.18.1.9"), B1_MAC)));
    }
}

#[test]
fn echo_to_vip_is_answered_locally() {
    let mut r = Rig::new(Encap::Ipip);
    let mut icmp = vec![8, 0, 0, 0, 0x12, 0x34, 0, 1, b'p', b'i', b'n', b'g'];
    let c = csum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let ip = ipv4("198.18.10.5", "198.18.0.100", 1, false, &icmp);
    let (o, out) = r.run(&eth(NODE_MAC, CLIENT_MAC, 0x0800, &ip));
    assert_eq!(o, Outcome::Transmit);
    assert_eq!(&out[0..6], &CLIENT_MAC);
    assert_eq!(&out[26..30], &[198, 18, 0, 100], "from the VIP");
    assert_eq!(&out[30..34], &[198, 18, 10, 5]);
    assert_eq!(out[34], 0, "echo reply");
    assert_eq!(csum(&out[34..]), 0, "ICMP checksum valid");
    assert_eq!(&out[38..], &icmp[4..]);
    assert_eq!(r.counters.echo_replies.get(), 1);
}

#[test]
fn df_packet_too_big_after_encap_gets_frag_needed() {
    let mut r = Rig::new(Encap::Ipip);
    let data = vec![0xab; 1500 - 40];
    let ip = ipv4("198.18.10.5", "198.18.0.100", 6, true, &tcp(40000, 80, 0x10, &data));
    assert_eq!(ip.len(), 1500);
    let (o, out) = r.run(&eth(NODE_MAC, CLIENT_MAC, 0x0800, &ip));
    assert_eq!(o, Outcome::Transmit);
    assert_eq!(&out[0..6], &CLIENT_MAC, "back to the client");
    assert_eq!(out[23], 1, "ICMP");
    assert_eq!(&out[26..30], &[198, 18, 0, 2], "from the node");
    assert_eq!(&out[30..34], &[198, 18, 10, 5]);
    assert_eq!((out[34], out[35]), (3, 4), "fragmentation needed");
    assert_eq!(u16::from_be_bytes([out[40], out[41]]), 1480, "MTU minus the 20-byte outer header");
    assert_eq!(&out[42..62], &ip[..20], "quotes the offending header");
    assert_eq!(r.count(Reason::Path(PathDrop::TooBig)), 1);
    // Without DF it cannot be sent either (the outer packet carries DF and the port would
    // refuse it): dropped and counted, not forwarded.
    let ip = ipv4("198.18.10.5", "198.18.0.100", 6, false, &tcp(40001, 80, 0x10, &data));
    let (o, _) = r.run(&eth(NODE_MAC, CLIENT_MAC, 0x0800, &ip));
    assert_eq!(o, Outcome::Drop(Reason::Path(PathDrop::TooBig)));
    assert_eq!(r.count(Reason::Path(PathDrop::TooBig)), 2);
    assert_eq!(r.count(Reason::Forward(ForwardReason::NewConnection)), 0);
    // One byte less than the limit goes through.
    let data = vec![0xab; 1480 - 40];
    let ip = ipv4("198.18.10.5", "198.18.0.100", 6, true, &tcp(40002, 80, 0x10, &data));
    let (o, out) = r.run(&eth(NODE_MAC, CLIENT_MAC, 0x0800, &ip));
    assert_eq!(o, Outcome::Transmit);
    assert_eq!(out.len(), 14 + 1500);
}

/// An ICMPv4 error (`icmp_type`, `code`, the rest-of-header word `rest`) quoting the first 28
/// bytes of `quoted` (its IP header and 8 bytes), with a valid checksum.
fn icmp_error(icmp_type: u8, code: u8, rest: [u8; 4], quoted: &[u8]) -> Vec<u8> {
    let mut icmp = vec![icmp_type, code, 0, 0];
    icmp.extend_from_slice(&rest);
    icmp.extend_from_slice(&quoted[..28]);
    let c = csum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    icmp
}

#[test]
fn icmp_error_for_a_flow_reaches_that_flows_backend() {
    let mut r = Rig::new(Encap::Ipip);
    let (frame, _) = syn_to_vip();
    r.run(&frame);
    // A router tells the VIP (the backend's DSR reply source) that the client path is smaller.
    let quoted = ipv4("198.18.0.100", "198.18.10.5", 6, true, &tcp(80, 40000, 0x12, b""));
    let icmp = icmp_error(3, 4, [0, 0, 0x05, 0x00], &quoted);
    let ip = ipv4("198.18.9.1", "198.18.0.100", 1, false, &icmp);
    let (o, out) = r.run(&eth(NODE_MAC, CLIENT_MAC, 0x0800, &ip));
    assert_eq!(o, Outcome::Transmit);
    assert_eq!(&out[30..34], &[198, 18, 1, 1], "to the flow's backend");
    assert_eq!(&out[34..], &ip[..]);
    assert_eq!(r.counters.icmp_errors_forwarded.get(), 1);
    assert_eq!(r.count(Reason::Forward(ForwardReason::ConntrackHit)), 1);
}

/// `web` (198.18.0.100 and fd00::100) over b1 and b2 with a QUIC-LB configuration 0 (plaintext,
/// 3-octet server IDs, 4-octet nonces): server ID 0a0001 is b1's, 0a0002 b2's.
fn quic_snap() -> Snapshot {
    use spillway_core::model::{QuicLbPolicy, QuicServerId};
    use spillway_core::quic_lb::{Config, Configs, ServerId};
    let vips = ["198.18.0.100", "fd00::100"];
    let mut s = service(
        "web",
        Encap::Ipip,
        RuleProtocol::L3Default,
        &vips,
        "g",
        [a("198.18.1.1"), a("198.18.1.2")],
    );
    let mut configs = Configs::new();
    configs.insert(Config::new(0, 3, 4, None).unwrap());
    let server_ids = [("198.18.1.1", "0a0001"), ("198.18.1.2", "0a0002")]
        .map(|(e, h)| QuicServerId {
            endpoint: spillway_core::model::Endpoint { addr: a(e), port: 0 },
            config: 0,
            server_id: ServerId::from_hex(h).unwrap(),
        })
        .to_vec();
    s.quic_lb = Some(QuicLbPolicy { configs, server_ids });
    snapshot(model("r", [s]))
}

#[test]
fn ql_5_a_packet_too_big_for_quic_reaches_the_server_its_quoted_source_id_names() {
    let mut r = Rig::new(Encap::Ipip);
    r.snap = quic_snap();
    r.neighbours =
        NeighbourTable::from_pairs([(a("198.18.1.1"), B1_MAC), (a("198.18.1.2"), B6_MAC)]);
    for (sid, to) in [([0x0a, 0x00, 0x01], [198, 18, 1, 1]), ([0x0a, 0x00, 0x02], [198, 18, 1, 2])]
    {
        // The server's Handshake to the client, from its own connection ID: first octet
        // (config 0, length 7), server ID, nonce.
        let mut quic = vec![0xe3, 0, 0, 0, 1, 8, 9, 9, 9, 9, 9, 9, 9, 9, 8, 0x07];
        quic.extend_from_slice(&sid);
        quic.extend_from_slice(&[1, 2, 3, 4, 0x41, 0x20]);
        quic.resize(1400, 0x5a);
        let quoted = ipv4("198.18.0.100", "198.18.10.5", 17, true, &udp(443, 40000, &quic));
        // A router's fragmentation-needed (MTU 1280), quoting 548 octets of it (RFC 1812).
        let mut icmp = vec![3, 4, 0, 0, 0, 0, 0x05, 0x00];
        icmp.extend_from_slice(&quoted[..548]);
        let c = csum(&icmp);
        icmp[2..4].copy_from_slice(&c.to_be_bytes());
        let ip = ipv4("198.18.9.1", "198.18.0.100", 1, false, &icmp);
        let (o, out) = r.run(&eth(NODE_MAC, CLIENT_MAC, 0x0800, &ip));
        assert_eq!(o, Outcome::Transmit);
        assert_eq!(&out[30..34], &to, "to the server the quoted source connection ID names");
        assert_eq!(&out[34..], &ip[..], "the error itself, whole");
    }
    assert_eq!(r.count(Reason::Forward(ForwardReason::QuicCid)), 2);
    assert_eq!(r.counters.icmp_errors_forwarded.get(), 2);
    // The same error quoting only 28 octets (no QUIC header): by the 4-tuple, not counted.
    let before = r.count(Reason::Forward(ForwardReason::QuicCid));
    let quoted = ipv4("198.18.0.100", "198.18.10.5", 17, true, &udp(443, 40000, &[0xe3; 64]));
    let ip = ipv4("198.18.9.1", "198.18.0.100", 1, false, &icmp_error(3, 4, [0, 0, 5, 0], &quoted));
    let (o, _) = r.run(&eth(NODE_MAC, CLIENT_MAC, 0x0800, &ip));
    assert_eq!(o, Outcome::Transmit);
    assert_eq!(r.count(Reason::Forward(ForwardReason::QuicCid)), before);
    assert_eq!(r.counters.quic_fallback.iter().map(|c| c.get()).sum::<u64>(), 0);

    // IPv6: a Packet Too Big quoting the server's packet, whose UDP header follows a
    // Destination Options header.
    for (sid, to) in [([0x0a, 0x00, 0x01], [198, 18, 1, 1]), ([0x0a, 0x00, 0x02], [198, 18, 1, 2])]
    {
        let mut quic = vec![0xe3, 0, 0, 0, 1, 8, 9, 9, 9, 9, 9, 9, 9, 9, 8, 0x07];
        quic.extend_from_slice(&sid);
        quic.extend_from_slice(&[1, 2, 3, 4, 0x41, 0x20]);
        quic.resize(1400, 0x5a);
        let dest_opts = [17, 0, 1, 4, 0, 0, 0, 0]; // next: UDP; 8 octets; PadN
        let l4: Vec<u8> = dest_opts.iter().copied().chain(udp(443, 40001, &quic)).collect();
        let quoted = ipv6("fd00::100", "fd00::10:5", 60, &l4);
        // ICMPv6 Packet Too Big (MTU 1280), quoting as much as fits in 1,280 octets.
        let mut icmp = vec![2, 0, 0, 0, 0, 0, 0x05, 0x00];
        icmp.extend_from_slice(&quoted[..1280 - 40 - 8]);
        let ip = ipv6("fd00::9:1", "fd00::100", 58, &icmp);
        let before = r.count(Reason::Forward(ForwardReason::QuicCid));
        let (o, out) = r.run(&eth(NODE_MAC, CLIENT_MAC, 0x86dd, &ip));
        assert_eq!(o, Outcome::Transmit);
        assert_eq!(&out[30..34], &to, "to the server the quoted source connection ID names");
        assert_eq!(&out[34..], &ip[..], "the error itself, whole");
        assert_eq!(r.count(Reason::Forward(ForwardReason::QuicCid)), before + 1);
    }
}

#[test]
fn malformed_and_unmatched_are_counted() {
    let mut r = Rig::new(Encap::Ipip);
    let (mut frame, _) = syn_to_vip();
    frame[14] = 0x44; // IHL 4
    let (o, _) = r.run(&frame);
    assert_eq!(o, Outcome::Drop(Reason::Malformed(Malformed::BadIhl)));
    let (o, _) = r.run(&frame[..20]);
    assert_eq!(o, Outcome::Drop(Reason::Malformed(Malformed::Truncated)));
    let ip = ipv4("198.18.10.5", "198.18.0.99", 6, true, &tcp(1, 80, 0x02, b""));
    let (o, _) = r.run(&eth(NODE_MAC, CLIENT_MAC, 0x0800, &ip));
    assert_eq!(o, Outcome::Drop(Reason::Decision(DropReason::NoMatchingRule)));
    assert_eq!(r.count(Reason::Malformed(Malformed::BadIhl)), 1);
    assert_eq!(r.count(Reason::Decision(DropReason::NoMatchingRule)), 1);
}

#[test]
fn unicast_for_another_host_is_not_ours() {
    let mut r = Rig::new(Encap::Ipip);
    let (mut frame, _) = syn_to_vip();
    frame[..6].copy_from_slice(&[0x02, 9, 9, 9, 9, 9]);
    let (o, _) = r.run(&frame);
    assert_eq!(o, Outcome::Drop(Reason::Path(PathDrop::NotForUs)));
    assert_eq!(r.shard.len(), 0, "not decided, not tracked");
    // Any one bit of the six bytes differing from ours (the check reads them as one word).
    for byte in 0..6 {
        for bit in 1..8 {
            let (mut frame, _) = syn_to_vip();
            frame[byte] ^= 1 << bit;
            let (o, _) = r.run(&frame);
            let want = Outcome::Drop(Reason::Path(PathDrop::NotForUs));
            assert_eq!(o, want, "byte {byte} bit {bit}");
        }
    }
    assert_eq!(r.shard.len(), 0);
    // Group frames (the lowest bit of the first byte: multicast, broadcast) are not filtered:
    // decided and forwarded like ours.
    for dst in [[0x01, 0, 0x5e, 0, 0, 1], [0xff; 6], NODE_MAC] {
        let (mut frame, _) = syn_to_vip();
        frame[..6].copy_from_slice(&dst);
        let (o, _) = r.run(&frame);
        assert_eq!(o, Outcome::Transmit, "{dst:02x?}");
    }
    assert_eq!(r.shard.len(), 1, "one flow, sent three times");
    // Too short to hold a whole header: malformed, whatever the destination (6, 7 and 8 bytes
    // are read differently).
    for len in [5, 6, 7, 8] {
        for dst in [NODE_MAC, [0x02, 9, 9, 9, 9, 9]] {
            let (mut frame, _) = syn_to_vip();
            frame[..6].copy_from_slice(&dst);
            let (o, _) = r.run(&frame[..len]);
            let mine = dst == NODE_MAC || len < 6;
            match o {
                Outcome::Drop(Reason::Malformed(_)) => assert!(mine, "{len} {dst:02x?}"),
                Outcome::Drop(Reason::Path(PathDrop::NotForUs)) => assert!(!mine, "{len}"),
                other => panic!("{len} bytes to {dst:02x?}: {other:?}"),
            }
        }
    }
}

#[test]
fn tracked_gauges_follow_the_table() {
    let mut r = Rig::new(Encap::Ipip);
    let total = |r: &Rig| -> u64 { r.counters.backends.iter().map(|t| t.tracked.get()).sum() };
    for sport in 0..50u16 {
        let ip = ipv4("198.18.10.5", "198.18.0.100", 6, true, &tcp(1000 + sport, 80, 0x02, b""));
        r.run(&eth(NODE_MAC, CLIENT_MAC, 0x0800, &ip));
    }
    assert_eq!((r.shard.len(), total(&r)), (50, 50));
    // Hits and a SYN that overwrites its own entry change nothing.
    for flags in [0x10, 0x02, 0x10] {
        let ip = ipv4("198.18.10.5", "198.18.0.100", 6, true, &tcp(1000, 80, flags, b""));
        r.run(&eth(NODE_MAC, CLIENT_MAC, 0x0800, &ip));
    }
    assert_eq!((r.shard.len(), total(&r)), (50, 50));
    assert_eq!(r.counters.backends[0].tracked.get(), 50, "one backend in this model");
    // Entries made while the next hop is unresolved are tracked too (the table holds them).
    r.neighbours = NeighbourTable::default();
    let ip = ipv4("198.18.10.6", "198.18.0.100", 6, true, &tcp(7, 80, 0x02, b""));
    r.run(&eth(NODE_MAC, CLIENT_MAC, 0x0800, &ip));
    assert_eq!((r.shard.len(), total(&r)), (51, 51));
}

#[test]
fn a_burst_is_decided_in_order_exactly_like_frame_by_frame() {
    let flow = |flags| ipv4("198.18.10.5", "198.18.0.100", 6, true, &tcp(40000, 80, flags, b""));
    let (mut bad, _) = syn_to_vip();
    bad[14] = 0x44; // IHL 4
    let mut other_host = eth(NODE_MAC, CLIENT_MAC, 0x0800, &flow(0x10));
    other_host[..6].copy_from_slice(&[0x02, 9, 9, 9, 9, 9]);
    let frames: Vec<Vec<u8>> = vec![
        eth(NODE_MAC, CLIENT_MAC, 0x0800, &flow(0x02)),
        // The same flow's next packet, in the same burst: it must find the entry just made.
        eth(NODE_MAC, CLIENT_MAC, 0x0800, &flow(0x10)),
        arp(1, CLIENT_MAC, "198.18.10.5", "198.18.0.100"),
        bad,
        other_host,
        eth(
            NODE_MAC,
            CLIENT_MAC,
            0x0800,
            &ipv4("198.18.10.5", "198.18.0.99", 6, true, &tcp(1, 80, 2, b"")),
        ),
        eth(NODE_MAC, CLIENT_MAC, 0x86dd, &ipv6("fd00::5", "fd00::200", 17, &udp(5, 53, b"q"))),
        eth(
            NODE_MAC,
            CLIENT_MAC,
            0x0800,
            &ipv4("198.18.10.6", "198.18.0.100", 6, true, &tcp(40001, 80, 0x10, b"")),
        ),
    ];
    let mut one_by_one = Rig::new(Encap::Ipip);
    let expected: Vec<(Outcome, Vec<u8>)> = frames.iter().map(|f| one_by_one.run(f)).collect();

    let mut r = Rig::new(Encap::Ipip);
    r.next_hops.refresh(&r.snap, &r.neighbours, &r.node);
    let mut bufs: Vec<VecBuf> = frames.iter().map(|f| VecBuf::with_frame(f)).collect();
    let mut out = [Outcome::Consumed; MAX_BURST];
    let mut ctx = PathCtx {
        snap: &r.snap,
        shard: &mut r.shard,
        now: Time::ZERO,
        node: &r.node,
        neighbours: &r.neighbours,
        next_hops: &r.next_hops,
        events: &r.events,
        counters: &r.counters,
        kernel: false,
        waiting: WaitingSlots::default(),
    };
    process_burst(&mut bufs, &mut ctx, &mut out);
    for (i, ((o, bytes), b)) in expected.iter().zip(&bufs).enumerate() {
        assert_eq!((out[i], b.data()), (*o, &bytes[..]), "frame {i}");
    }
    // Not vacuous: the burst forwarded, answered and dropped what it should.
    assert_eq!(&out[..3], &[Outcome::Transmit; 3]);
    assert_eq!(out[3], Outcome::Drop(Reason::Malformed(Malformed::BadIhl)));
    assert_eq!(out[4], Outcome::Drop(Reason::Path(PathDrop::NotForUs)));
    assert_eq!(out[5], Outcome::Drop(Reason::Decision(DropReason::NoMatchingRule)));
    assert_eq!(r.count(Reason::Forward(ForwardReason::ConntrackHit)), 1);
    assert_eq!(r.count(Reason::Forward(ForwardReason::NewConnection)), 3);
    assert_eq!(r.shard.len(), 3);
}

/// Packets of flows tracked in an earlier burst take the burst's short way (the entry where
/// its bucket's hint says, still valid, prebuilt outer headers); all others, and those whose
/// entry has expired, take the full decision. Either way, every packet leaves with the bytes,
/// outcome and counts that deciding it alone gives: over IPIP, GUE and L2, for IPv4 and IPv6
/// flows, TCP and UDP, a DF packet too big once encapsulated, and entries past their idle
/// timeout.
#[test]
fn a_later_burst_of_tracked_flows_is_decided_exactly_like_frame_by_frame() {
    let v4 = |src: &str, proto, l4: &[u8]| {
        eth(NODE_MAC, CLIENT_MAC, 0x0800, &ipv4(src, "198.18.0.100", proto, true, l4))
    };
    let v6 = |l4: &[u8]| eth(NODE_MAC, CLIENT_MAC, 0x86dd, &ipv6("fd00::5", "fd00::200", 6, l4));
    let clients = ["198.18.10.5", "198.18.10.6", "198.18.20.7", "198.18.30.8"];
    let packets = |flags: u8, big: bool| -> Vec<Vec<u8>> {
        let mut f: Vec<Vec<u8>> =
            clients.iter().map(|c| v4(c, 6, &tcp(40000, 80, flags, b"x"))).collect();
        f.push(v4("198.18.10.9", 17, &udp(5353, 53, b"query")));
        f.push(v6(&tcp(41000, 80, flags, b"y")));
        if big {
            // 1,481 bytes of IP with DF: over the 1,500-byte MTU once encapsulated.
            f.push(v4(clients[0], 6, &tcp(40000, 80, flags, &[7u8; 1481 - 20 - 20])));
        }
        f
    };
    for encap in [Encap::Ipip, Encap::Gue { port: 6080 }, Encap::L2] {
        let mut one_by_one = Rig::new(encap);
        let mut burst = Rig::new(encap);
        let idle = burst.snap.services().map(|s| s.idle_timeout_ms).max().expect("a service");
        let bursts = [
            (Time::ZERO, packets(0x02, false)),
            (Time(1_000), packets(0x10, true)),
            // A millisecond short of the timeout since burst 1, which restarted the clocks.
            (Time(1_000 + idle - 1), packets(0x10, false)),
            // Every entry idle for its whole timeout: replaced.
            (Time(1_000 + 2 * idle - 1), packets(0x10, false)),
        ];
        for (n, (now, frames)) in bursts.iter().enumerate() {
            one_by_one.now = *now;
            burst.now = *now;
            let want: Vec<_> = frames.iter().map(|f| one_by_one.run(f)).collect();
            assert_eq!(burst.run_burst(frames), want, "{encap:?}, burst {n}");
            assert_eq!(burst.all_counters(), one_by_one.all_counters(), "{encap:?}, burst {n}");
        }
        // Not vacuous: bursts 1 and 2 hit the entries burst 0 made; burst 3 replaced them.
        let hits = burst.count(Reason::Forward(ForwardReason::ConntrackHit));
        assert_eq!(hits, if encap == Encap::L2 { 2 * 6 + 1 } else { 2 * 6 }, "{encap:?}");
        assert_eq!(burst.count(Reason::Forward(ForwardReason::ReplacedExpired)), 6);
        let too_big = burst.count(Reason::Path(PathDrop::TooBig));
        assert_eq!(too_big, if encap == Encap::L2 { 0 } else { 1 }, "{encap:?}");
    }
}

/// A new connection's SYN of a service that tracks the 5-tuple takes a short way of its own
/// (no lookup, the backend its hash selects, the entry, the prebuilt outer headers). Against
/// the decision function every other caller uses (`decide`, on a table of its own): each SYN
/// of a burst reaches the backend it selects, its entry points there, and the counters say
/// so (reason, per-backend new connections and tracked entries, the client zone's new
/// connections). A SYN again replaces its entry (no second entry, the gauges unchanged); with
/// the flood guard out of tokens a SYN is still forwarded by the hash but makes no entry; and
/// a SYN the short way cannot send (too big once encapsulated) is decided in full: answered,
/// its entry made.
#[test]
fn a_new_connections_syn_reaches_the_backend_the_decision_selects_and_makes_its_entry() {
    let backends: Vec<Addr> = (1..=8).map(|i| Addr::v4(198, 18, 1, i)).collect();
    let svc = service("web", Encap::Ipip, RuleProtocol::L3Default, &["198.18.0.100"], "g", {
        backends.clone()
    });
    let rig = || Rig {
        snap: snapshot(model("r", [svc.clone()])),
        neighbours: NeighbourTable::from_pairs(
            (1..=8u8).map(|i| (Addr::v4(198, 18, 1, i), [2, 0, 0, 0, 1, i])),
        ),
        ..Rig::new(Encap::Ipip)
    };
    let syn = |sport: u16, data: &[u8]| {
        let ip = ipv4("198.18.10.5", "198.18.0.100", 6, true, &tcp(sport, 80, 0x02, data));
        eth(NODE_MAC, CLIENT_MAC, 0x0800, &ip)
    };
    let frames: Vec<Vec<u8>> = (0..MAX_BURST as u16).map(|i| syn(30000 + i, b"")).collect();
    let mut r = rig();
    let id = r.snap.services().next().expect("a service").id;
    let key = |sport| FlowKey {
        src: a("198.18.10.5"),
        dst: a("198.18.0.100"),
        sport,
        dport: 80,
        proto: 6,
        kind: 5,
        service: id,
    };
    // What the decision function selects for each, and the slot of each backend.
    let mut reference = Shard::with_capacity(1024);
    let selected: Vec<u16> = frames
        .iter()
        .map(|f| {
            let FrameKind::Ip { info, .. } = wire::classify(f).expect("valid").kind else {
                panic!("not an IP frame")
            };
            decide(&info, &r.snap, &mut reference, Time::ZERO).backend().expect("forwarded")
        })
        .collect();
    let addr: Vec<Addr> =
        selected.iter().map(|&s| r.snap.backend(s).expect("backend").endpoint.addr).collect();

    let out = r.run_burst(&frames);
    // Per backend slot (the snapshot's first slots are the service's eight).
    let mut per_backend = vec![0u64; 16];
    for (i, ((o, bytes), &slot)) in out.iter().zip(&selected).enumerate() {
        assert_eq!(*o, Outcome::Transmit, "SYN {i}");
        let backend = addr[i];
        assert_eq!(&bytes[30..34], &backend.0[12..16], "SYN {i}: outer destination");
        let mac = [2, 0, 0, 0, 1, backend.0[15]];
        assert_eq!(&bytes[0..6], &mac, "SYN {i}: the backend's MAC");
        assert_eq!(&bytes[34..], &frames[i][14..], "SYN {i}: inner packet untouched");
        let k = key(30000 + i as u16);
        let (_, entry) = r.shard.lookup(&k, key_hash(&k), r.now).expect("its entry");
        assert_eq!(BackendRef::from_u32(entry.value.backend).slot, slot, "SYN {i}: entry");
        per_backend[usize::from(slot)] += 1;
    }
    // Not vacuous: the hash spread the SYNs over several backends.
    assert!(per_backend.iter().filter(|&&n| n > 0).count() >= 4, "{per_backend:?}");
    let count = |r: &Rig, f: fn(&spillway_core::counters::TrafficCounters) -> u64| -> Vec<u64> {
        r.counters.backends.iter().take(16).map(f).collect()
    };
    assert_eq!(count(&r, |t| t.new_connections.get()), per_backend);
    assert_eq!(count(&r, |t| t.tracked.get()), per_backend);
    assert_eq!(count(&r, |t| t.packets.get()), per_backend);
    let all_tracked: u64 = r.counters.backends.iter().map(|t| t.tracked.get()).sum();
    assert_eq!(all_tracked, MAX_BURST as u64, "no other slot");
    let n = MAX_BURST as u64;
    assert_eq!(r.count(Reason::Forward(ForwardReason::NewConnection)), n);
    assert_eq!(r.counters.services[usize::from(id)].new_connections.get(), n);
    assert_eq!(r.counters.zone_new(id, None).get(), n, "no client zone");
    assert_eq!(r.shard.len(), MAX_BURST);

    // The same SYNs again (retransmitted): each replaces its own entry.
    let again = r.run_burst(&frames);
    assert_eq!(again, out, "the same backends, the same bytes");
    assert_eq!(r.shard.len(), MAX_BURST);
    assert_eq!(count(&r, |t| t.tracked.get()), per_backend);
    assert_eq!(r.count(Reason::Forward(ForwardReason::NewConnection)), 2 * n);

    // The flood guard with three tokens: every SYN forwarded by the hash, three entries made.
    let mut guarded = rig();
    guarded.shard.set_flood_guard(Some(3));
    assert_eq!(guarded.run_burst(&frames[..10]), out[..10], "forwarded alike");
    assert_eq!(guarded.shard.len(), 3);
    assert_eq!(guarded.shard.stats().bypassed, 7);
    assert_eq!(count(&guarded, |t| t.tracked.get()).iter().sum::<u64>(), 3);
    assert_eq!(count(&guarded, |t| t.new_connections.get()).iter().sum::<u64>(), 10);

    // Too big once encapsulated, DF set: the full decision answers it and makes its entry.
    let big = syn(40000, &[7u8; 1481 - 40]);
    let (o, bytes) = r.run(&big);
    assert_eq!(o, Outcome::Transmit);
    assert_eq!(&bytes[0..6], &CLIENT_MAC, "back to the client");
    assert_eq!((bytes[34], bytes[35]), (3, 4), "fragmentation needed");
    assert_eq!(r.count(Reason::Path(PathDrop::TooBig)), 1);
    let k = key(40000);
    assert!(r.shard.lookup(&k, key_hash(&k), r.now).is_some(), "its entry");
    assert_eq!(r.count(Reason::Forward(ForwardReason::NewConnection)), 2 * n);
}

/// A service that tracks each connection by its 5-tuple may still select its backend by
/// fewer fields (its affinity): the SYN of every client and port reaches the backend the
/// decision function selects, whatever the affinity, in a burst as one by one. (The short
/// way for new connections hashes the tracking key itself when the selection tuple is the
/// 5-tuple; with a client-IP affinity that would scatter one client's connections.)
#[test]
fn a_new_connections_syn_reaches_the_selected_backend_whatever_the_affinity() {
    let backends: Vec<Addr> = (1..=8).map(|i| Addr::v4(198, 18, 1, i)).collect();
    let affinities = [
        Affinity::None,
        Affinity::ClientIpPortProto,
        Affinity::ClientIpProto,
        Affinity::ClientIp,
        Affinity::ClientIpNoDestination,
    ];
    for affinity in affinities {
        let mut svc =
            service("web", Encap::Ipip, RuleProtocol::L3Default, &["198.18.0.100"], "g", {
                backends.clone()
            });
        svc.affinity = affinity;
        let rig = || Rig {
            snap: snapshot(model("r", [svc.clone()])),
            neighbours: NeighbourTable::from_pairs(
                (1..=8u8).map(|i| (Addr::v4(198, 18, 1, i), [2, 0, 0, 0, 1, i])),
            ),
            ..Rig::new(Encap::Ipip)
        };
        // Eight clients, eight source ports each.
        let frames: Vec<Vec<u8>> = (0..MAX_BURST as u16)
            .map(|i| {
                let src = format!("198.18.10.{}", 1 + i / 8);
                let ip = ipv4(&src, "198.18.0.100", 6, true, &tcp(30000 + i % 8, 80, 0x02, b""));
                eth(NODE_MAC, CLIENT_MAC, 0x0800, &ip)
            })
            .collect();
        let (mut burst, mut one_by_one) = (rig(), rig());
        let mut reference = Shard::with_capacity(1024);
        let selected: Vec<Addr> = frames
            .iter()
            .map(|f| {
                let FrameKind::Ip { info, .. } = wire::classify(f).expect("valid").kind else {
                    panic!("not an IP frame")
                };
                let slot = decide(&info, &burst.snap, &mut reference, Time::ZERO)
                    .backend()
                    .expect("forwarded");
                burst.snap.backend(slot).expect("backend").endpoint.addr
            })
            .collect();
        let out = burst.run_burst(&frames);
        for (i, ((o, bytes), backend)) in out.iter().zip(&selected).enumerate() {
            assert_eq!(*o, Outcome::Transmit, "{affinity:?}, SYN {i}");
            assert_eq!(&bytes[30..34], &backend.0[12..16], "{affinity:?}, SYN {i}: backend");
        }
        let want: Vec<_> = frames.iter().map(|f| one_by_one.run(f)).collect();
        assert_eq!(out, want, "{affinity:?}: in a burst as one by one");
        assert_eq!(burst.shard.len(), MAX_BURST, "{affinity:?}: an entry per connection");
        // Not vacuous: the selections differ between connections (for client-IP affinities,
        // between clients), so a tuple of the wrong fields would reach other backends.
        let distinct: std::collections::BTreeSet<_> = selected.iter().collect();
        assert!(distinct.len() >= 3, "{affinity:?}: {distinct:?}");
    }
}

/// `frames` cut into bursts of the sizes whose first pass differs: a full burst (probes after the
/// whole first pass), one group and one more packet (probes one group behind, the second group
/// partial), two groups exactly, two groups and one packet, one packet, a group and a half.
fn bursts_of_varied_sizes(frames: &[Vec<u8>]) -> impl Iterator<Item = &[Vec<u8>]> {
    let sizes = [MAX_BURST, 17, 32, 33, 1, 24];
    let mut rest = frames;
    sizes.into_iter().cycle().map_while(move |size| {
        let (chunk, after) = rest.split_at(size.min(rest.len()));
        rest = after;
        (!chunk.is_empty()).then_some(chunk)
    })
}

/// In a nearly full table a new connection's two candidate buckets are often both full: the
/// burst then prefetches the headers its insert reads to move an entry (or it evicts one).
/// Bursts of SYNs into a 64-entry table filled far past its capacity leave the same bytes,
/// outcomes, counts and table as the same frames one by one.
#[test]
fn bursts_of_syns_into_a_crowded_table_are_decided_exactly_like_frame_by_frame() {
    let make = || Rig { shard: Shard::with_capacity(64), ..Rig::new(Encap::Ipip) };
    let (mut one_by_one, mut burst) = (make(), make());
    let frames: Vec<Vec<u8>> = (0..256u16)
        .map(|i| {
            let src = format!("198.18.{}.{}", 10 + i / 200, i % 200 + 1);
            let ip = ipv4(&src, "198.18.0.100", 6, true, &tcp(20000 + i, 80, 0x02, b""));
            eth(NODE_MAC, CLIENT_MAC, 0x0800, &ip)
        })
        .collect();
    for (n, chunk) in bursts_of_varied_sizes(&frames).enumerate() {
        let want: Vec<_> = chunk.iter().map(|f| one_by_one.run(f)).collect();
        assert_eq!(burst.run_burst(chunk), want, "burst {n}");
        assert_eq!(burst.all_counters(), one_by_one.all_counters(), "burst {n}");
    }
    let table = |r: &Rig| -> Vec<(FlowKey, u32)> {
        let mut t: Vec<_> = r.shard.iter(r.now).map(|(_, e)| (e.key, e.value.backend)).collect();
        t.sort_by_key(|(k, _)| (k.src, k.sport));
        t
    };
    assert_eq!(table(&burst), table(&one_by_one));
    // Not vacuous: the table filled, and inserts found both candidate buckets full.
    assert_eq!(burst.shard.len(), 64);
    assert!(burst.shard.stats().evictions >= 256 - 64, "{:?}", burst.shard.stats());
    assert_eq!(burst.count(Reason::Forward(ForwardReason::NewConnection)), 256);
}

/// In a nearly full table many entries are stored in their secondary bucket; a burst finds
/// those by a second probe after its first pass (the secondary's header, then the record).
/// Packets of flows whose entries are in either bucket, in bursts, reach their entries'
/// backends exactly as one by one: the same bytes, outcomes, counters and table.
#[test]
fn bursts_of_established_flows_in_a_crowded_table_are_decided_exactly_like_frame_by_frame() {
    let make = || Rig { shard: Shard::with_capacity(64), ..Rig::new(Encap::Ipip) };
    let (mut one_by_one, mut burst) = (make(), make());
    let frame = |i: u16, flags: u8| {
        let src = format!("198.18.10.{}", i + 1);
        let ip = ipv4(&src, "198.18.0.100", 6, true, &tcp(30000 + i, 80, flags, b""));
        eth(NODE_MAC, CLIENT_MAC, 0x0800, &ip)
    };
    // 60 connections into 64 ways: the same table in both.
    for i in 0..60 {
        one_by_one.run(&frame(i, 0x02));
        burst.run(&frame(i, 0x02));
    }
    let table = |r: &Rig| -> Vec<(FlowKey, u32)> {
        let mut t: Vec<_> = r.shard.iter(r.now).map(|(_, e)| (e.key, e.value.backend)).collect();
        t.sort_by_key(|(k, _)| (k.src, k.sport));
        t
    };
    let before = table(&burst);
    assert_eq!(before, table(&one_by_one));
    // Not vacuous: some entries are in their secondary bucket.
    let in_secondary = burst
        .shard
        .iter(burst.now)
        .filter(|(slot, e)| burst.shard.candidate_buckets(key_hash(&e.key)).0 != slot.bucket())
        .count();
    assert!(in_secondary >= 4, "{in_secondary} entries in their secondary");
    // Their ACKs, twice, in bursts of every shape the burst path takes.
    let acks: Vec<Vec<u8>> = (0..60).chain(0..60).map(|i| frame(i, 0x10)).collect();
    for (n, chunk) in bursts_of_varied_sizes(&acks).enumerate() {
        let want: Vec<_> = chunk.iter().map(|f| one_by_one.run(f)).collect();
        assert_eq!(burst.run_burst(chunk), want, "burst {n}");
        assert_eq!(burst.all_counters(), one_by_one.all_counters(), "burst {n}");
    }
    assert_eq!(table(&burst), before, "every entry kept, none made");
    let hits = burst.count(Reason::Forward(ForwardReason::ConntrackHit));
    assert_eq!(hits, 2 * before.len() as u64);
}

/// The short way builds a packet's tracking key from its 5-tuple as received; it is tried for
/// services whose keys are that 5-tuple, and a packet it cannot send is decided in full.
/// Beside such a service, a per-session service with client-IP affinity (one 2-tuple entry per
/// client) and one with symmetric hashing (the endpoints in canonical order) keep their own
/// keys and find their entries, in a burst as one by one. The keys are written out by hand
/// and looked up in the table. (A wrong key of the short way would only miss and be decided
/// in full; in a debug build, as here, the short way also checks each key it builds against
/// the general one, which a short way tried for "sess" or "sym" fails.)
#[test]
fn beside_the_short_way_services_with_other_keys_keep_them_and_find_their_entries() {
    let l3 = RuleProtocol::L3Default;
    let backend = || [a("198.18.1.1")];
    let conn = service("conn", Encap::Ipip, l3, &["198.18.0.100"], "g1", backend());
    let mut sess = service("sess", Encap::Ipip, l3, &["198.18.0.101"], "g2", backend());
    sess.tracking = TrackingMode::PerSession;
    sess.affinity = Affinity::ClientIp;
    let mut sym = service("sym", Encap::Ipip, l3, &["198.18.0.102"], "g3", backend());
    sym.symmetric_hashing = true;
    let make = || Rig {
        snap: snapshot(model("r", [conn.clone(), sess.clone(), sym.clone()])),
        ..Rig::new(Encap::Ipip)
    };
    let (mut one_by_one, mut burst) = (make(), make());
    let id = |name: &str| {
        burst.snap.services().find(|s| &*s.name == name).map(|s| s.id).expect("service")
    };
    let (conn_id, sess_id, sym_id) = (id("conn"), id("sess"), id("sym"));
    let client = a("198.18.10.5");
    let vip = |last: u8| Addr::v4(198, 18, 0, last);
    // ACKs (not SYNs, which are new connections and never take the short way), four source
    // ports to each service: the first burst makes the entries, the second finds them.
    let frames: Vec<Vec<u8>> = [100u8, 101, 102]
        .iter()
        .flat_map(|&v| {
            (0..4u16).map(move |i| {
                let ip = ipv4(
                    "198.18.10.5",
                    &format!("198.18.0.{v}"),
                    6,
                    true,
                    &tcp(40000 + i, 80, 0x10, b""),
                );
                eth(NODE_MAC, CLIENT_MAC, 0x0800, &ip)
            })
        })
        .collect();
    for round in 0..2 {
        let want: Vec<_> = frames.iter().map(|f| one_by_one.run(f)).collect();
        assert_eq!(burst.run_burst(&frames), want, "round {round}");
        assert_eq!(burst.all_counters(), one_by_one.all_counters(), "round {round}");
    }
    let key = |src, dst, sport, dport, proto, kind, service| FlowKey {
        src,
        dst,
        sport,
        dport,
        proto,
        kind,
        service,
    };
    let mut expected = vec![key(client, Addr::v4(198, 18, 0, 101), 0, 0, 0, 2, sess_id)];
    for i in 0..4u16 {
        expected.push(key(client, vip(100), 40000 + i, 80, 6, 5, conn_id));
        // 198.18.0.102 sorts before 198.18.10.5: the VIP's end first.
        expected.push(key(vip(102), client, 80, 40000 + i, 6, 5, sym_id));
    }
    for k in &expected {
        assert!(burst.shard.lookup(k, key_hash(k), burst.now).is_some(), "no entry for {k:?}");
    }
    assert_eq!(burst.shard.len(), expected.len());
    // Every packet of the second round found its entry, and in the first the client's later
    // packets to "sess" found the one entry its first packet made.
    assert_eq!(burst.count(Reason::Forward(ForwardReason::ConntrackHit)), 12 + 3);
}

/// The phase clock (a benchmark diagnostic) records every burst's packets and cycles when
/// the data plane is built with `phase-clock`, and nothing at all without it (the default,
/// what the daemon runs). `scripts/test.sh` runs it both ways: in the workspace run, and
/// again with `cargo test -p spillway-dataplane --features phase-clock --test path`.
#[test]
fn the_phase_clock_counts_bursts_only_when_built_in() {
    use spillway_dataplane::path::phase_clock::{self, Phases};
    let mut r = Rig::new(Encap::Ipip);
    let (frame, _) = syn_to_vip();
    let mut ctx = r.ctx();
    let _ = phase_clock::take();
    let mut out = [Outcome::Consumed; MAX_BURST];
    for n in [3, 5] {
        let mut burst: Vec<VecBuf> = (0..n).map(|_| VecBuf::with_frame(&frame)).collect();
        process_burst(&mut burst, &mut ctx, &mut out);
        assert_eq!(&out[..n], &vec![Outcome::Transmit; n][..]);
    }
    let p = phase_clock::take();
    if cfg!(feature = "phase-clock") {
        assert_eq!(p.packets, 8);
        assert!(p.first > 0 && p.last > 0, "{p:?}");
        assert_eq!(phase_clock::take(), Phases::default(), "take() starts the sums again");
    } else {
        assert_eq!(p, Phases::default());
    }
}

/// A driver may hand over a buffer shared with another owner (reference count above one,
/// indirect or external mbuf). Rewriting it would change the other owner's packet, and the
/// old code asserted exclusivity, which aborts the process: the path drops it, counted as
/// `shared_buffer`, leaves its bytes alone, and creates no entry; the next exclusive buffer
/// of the same flow is forwarded as usual.
#[test]
fn a_shared_buffer_is_a_counted_drop_and_left_untouched() {
    let mut r = Rig::new(Encap::Ipip);
    let (frame, _) = syn_to_vip();
    let mut ctx = r.ctx();
    let mut shared = VecBuf::with_frame(&frame);
    shared.set_shared(true);
    assert_eq!(process(&mut shared, &mut ctx), Outcome::Drop(Reason::Path(PathDrop::SharedBuffer)));
    let mut burst = vec![VecBuf::with_frame(&frame), VecBuf::with_frame(&frame)];
    burst[0].set_shared(true);
    let mut out = [Outcome::Consumed; MAX_BURST];
    process_burst(&mut burst, &mut ctx, &mut out);
    assert_eq!(out[0], Outcome::Drop(Reason::Path(PathDrop::SharedBuffer)));
    assert_eq!(out[1], Outcome::Transmit, "the exclusive copy of the same frame is forwarded");
    assert_eq!(shared.data(), &frame[..], "the shared buffer's bytes are not written");
    assert_eq!(burst[0].data(), &frame[..]);
    assert_eq!(&burst[1].data()[0..6], &B1_MAC, "the exclusive one was encapsulated");
    assert_eq!(r.count(Reason::Path(PathDrop::SharedBuffer)), 2);
    assert_eq!(r.count(Reason::Forward(ForwardReason::NewConnection)), 1);
}

/// Every counter of the rig, to show that a frame for the kernel is counted by nobody here
/// (the worker counts it when it queues it).
fn all_counts(r: &Rig) -> u64 {
    Reason::all().map(|x| r.count(x)).sum::<u64>()
        + r.counters.neighbour_replies.get()
        + r.counters.echo_replies.get()
        + r.counters.neighbour_answers_heard.get()
}

#[test]
fn with_a_kernel_interface_the_nodes_own_traffic_goes_to_it_unchanged() {
    let mut r = Rig::with_kernel(Encap::Ipip);
    // BGP to the node, a health check's SYN-ACK back to the node, UDP to the node.
    let frames = [
        eth(
            NODE_MAC,
            CLIENT_MAC,
            0x0800,
            &ipv4("198.18.0.254", "198.18.0.2", 6, true, &tcp(40000, 179, 0x02, b"")),
        ),
        eth(
            NODE_MAC,
            B1_MAC,
            0x0800,
            &ipv4("198.18.1.1", "198.18.0.2", 6, true, &tcp(80, 51000, 0x12, b"")),
        ),
        eth(
            NODE_MAC,
            CLIENT_MAC,
            0x0800,
            &ipv4("198.18.10.5", "198.18.0.2", 17, false, &udp(5000, 53, b"q")),
        ),
        eth(
            NODE_MAC,
            CLIENT_MAC,
            0x86dd,
            &ipv6("fd00::10:5", "fd00::2", 6, &tcp(40000, 22, 0x02, b"")),
        ),
        // IPv6 link-local: the kernel's (BGP over link-local, its own neighbour discovery).
        eth(
            NODE_MAC,
            CLIENT_MAC,
            0x86dd,
            &ipv6("fe80::1", "fe80::2", 6, &tcp(40000, 179, 0x02, b"")),
        ),
    ];
    for (i, f) in frames.iter().enumerate() {
        let (o, out) = r.run(f);
        assert_eq!(o, Outcome::ToKernel, "frame {i}");
        assert_eq!(&out, f, "frame {i} reaches the kernel unchanged");
    }
    assert_eq!(all_counts(&r), 0, "counted by the worker when queued, not here");
    // Without the kernel interface the same packet to the node matches no rule.
    let mut plain = Rig::new(Encap::Ipip);
    let (o, _) = plain.run(&frames[0]);
    assert_eq!(o, Outcome::Drop(Reason::Decision(DropReason::NoMatchingRule)));
}

#[test]
fn with_a_kernel_interface_the_node_still_answers_arp_echo_and_forwards_vip_traffic() {
    let mut r = Rig::with_kernel(Encap::Ipip);
    // ARP requests for the node and a VIP: answered here; the kernel never sees them.
    for target in ["198.18.0.2", "198.18.0.100"] {
        let (o, out) = r.run(&arp(1, CLIENT_MAC, "198.18.10.5", target));
        assert_eq!(o, Outcome::Transmit, "{target}");
        assert_eq!(&out[20..22], &[0, 2], "an ARP reply");
    }
    // An echo request to the node: answered here.
    let mut icmp = vec![8, 0, 0, 0, 0x12, 0x34, 0, 1];
    let c = csum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let (o, out) = r.run(&eth(
        NODE_MAC,
        CLIENT_MAC,
        0x0800,
        &ipv4("198.18.10.5", "198.18.0.2", 1, false, &icmp),
    ));
    assert_eq!(o, Outcome::Transmit);
    assert_eq!(out[34], 0, "echo reply");
    // VIP traffic: encapsulated to the backend as without it.
    let (frame, _) = syn_to_vip();
    let (o, out) = r.run(&frame);
    assert_eq!(o, Outcome::Transmit);
    assert_eq!(&out[30..34], &[198, 18, 1, 1]);
    // An ARP reply (the kernel's own question, or the resolver's: the same node address
    // asks both) goes to the kernel and is heard by the resolver.
    let reply = arp(2, B1_MAC, "198.18.1.1", "198.18.0.2");
    let (o, out) = r.run(&reply);
    assert_eq!(o, Outcome::ToKernel);
    assert_eq!(out, reply);
    assert_eq!(r.events.pop(), Some(NeighbourEvent::Learned(a("198.18.1.1"), B1_MAC)));
}

#[test]
fn with_a_kernel_interface_an_icmp_error_about_the_nodes_own_packet_goes_to_the_kernel() {
    let mut r = Rig::with_kernel(Encap::Ipip);
    // A router says the kernel's health probe (node -> backend) cannot be delivered.
    let quoted = ipv4("198.18.0.2", "198.18.1.1", 6, true, &tcp(51000, 80, 0x02, b""));
    let icmp = icmp_error(3, 1, [0; 4], &quoted);
    let frame =
        eth(NODE_MAC, CLIENT_MAC, 0x0800, &ipv4("198.18.0.254", "198.18.0.2", 1, false, &icmp));
    let (o, _) = r.run(&frame);
    assert_eq!(o, Outcome::ToKernel);
    // One about a VIP flow still goes to the flow's backend.
    let (syn, _) = syn_to_vip();
    r.run(&syn);
    let quoted = ipv4("198.18.0.100", "198.18.10.5", 6, true, &tcp(80, 40000, 0x12, b""));
    let icmp = icmp_error(3, 4, [0, 0, 0x05, 0x00], &quoted);
    let ip = ipv4("198.18.9.1", "198.18.0.100", 1, false, &icmp);
    let (o, out) = r.run(&eth(NODE_MAC, CLIENT_MAC, 0x0800, &ip));
    assert_eq!(o, Outcome::Transmit);
    assert_eq!(&out[30..34], &[198, 18, 1, 1]);
}

// ---- capture (spillway_core::capture, spillway_dataplane::capture) -------------------------

mod capture {
    use super::*;
    use spillway_core::capture::{self as tap, Filter, Point, Points, Record, TapSlot};
    use spillway_core::filter::FlowFilter;
    use spillway_core::model::Endpoint;
    use spillway_dataplane::capture::WorkerTap;
    use std::sync::Arc;

    /// A SYN and an ACK of one flow to web, a UDP datagram to web6, and a frame with a bad
    /// IPv4 header length.
    fn frames() -> Vec<Vec<u8>> {
        let ip = |flags| ipv4("198.18.10.5", "198.18.0.100", 6, true, &tcp(40000, 80, flags, b""));
        let v6 = ipv6("fd00::5", "fd00::200", 17, &udp(5, 53, b"q"));
        let mut bad = ipv4("198.18.10.5", "198.18.0.100", 6, false, &tcp(1, 80, 0x10, b""));
        bad[0] = 0x44;
        vec![
            eth(NODE_MAC, CLIENT_MAC, 0x0800, &ip(0x02)),
            eth(NODE_MAC, CLIENT_MAC, 0x0800, &ip(0x10)),
            eth(NODE_MAC, CLIENT_MAC, 0x86dd, &v6),
            eth(NODE_MAC, CLIENT_MAC, 0x0800, &bad),
        ]
    }

    /// A worker's tap for a capture of `filter` at `points` with a ring of `ring` records; the
    /// ring's reader and what the capture shares.
    fn tap(
        filter: Filter,
        points: Points,
        ring: usize,
    ) -> (WorkerTap, rtrb::Consumer<Record>, Arc<tap::TapShared>) {
        let slot = Arc::new(TapSlot::default());
        let (mut readers, shared) =
            tap::start(std::slice::from_ref(&slot), &filter, points, 96, ring).unwrap();
        let mut worker = WorkerTap::new(slot);
        assert!(!worker.is_active());
        worker.poll();
        assert!(worker.is_active(), "the worker took the tap between bursts");
        (worker, readers.remove(0), shared)
    }

    fn captured(
        rig: &mut Rig,
        worker: &mut WorkerTap,
        frames: &[Vec<u8>],
    ) -> Vec<(Outcome, Vec<u8>)> {
        let mut bufs: Vec<VecBuf> = frames.iter().map(|f| VecBuf::with_frame(f)).collect();
        let mut out = [Outcome::Consumed; MAX_BURST];
        worker.process_burst(&mut bufs, &mut rig.ctx(), &mut out, 0, 0);
        out.iter().zip(&bufs).map(|(o, b)| (*o, b.data().to_vec())).collect()
    }

    fn records(ring: &mut rtrb::Consumer<Record>) -> Vec<Record> {
        std::iter::from_fn(|| ring.pop().ok()).collect()
    }

    #[test]
    fn nx_5_a_capture_decides_as_the_burst_path_and_notes_each_decision() {
        let frames = frames();
        let expected = Rig::new(Encap::Ipip).run_burst(&frames);
        let mut rig = Rig::new(Encap::Ipip);
        let (mut worker, mut ring, shared) = tap(Filter::default(), Points::ALL, 64);
        let got = captured(&mut rig, &mut worker, &frames);
        assert_eq!(got, expected, "the same outcomes and bytes as the staged burst path");
        let web = rig.snap.services().find(|s| &*s.name == "web").unwrap().id;
        let web6 = rig.snap.services().find(|s| &*s.name == "web6").unwrap().id;
        let b1 = Endpoint { addr: a("198.18.1.1"), port: 0 };
        let b6 = Endpoint { addr: a("fd00::1:1"), port: 0 };
        let r = records(&mut ring);
        let seen: Vec<_> = r
            .iter()
            .map(|r| (r.point, r.note.decision.as_str(), r.note.service, r.note.backend, r.worker))
            .collect();
        assert_eq!(
            seen,
            vec![
                (Point::Received, "new_connection", Some(web), Some(b1), 0),
                (Point::Sent, "new_connection", Some(web), Some(b1), 0),
                (Point::Received, "conntrack_hit", Some(web), Some(b1), 0),
                (Point::Sent, "conntrack_hit", Some(web), Some(b1), 0),
                (Point::Received, "new_connection", Some(web6), Some(b6), 0),
                (Point::Sent, "new_connection", Some(web6), Some(b6), 0),
                (Point::Received, "bad_ihl", None, None, 0),
                (Point::Dropped, "bad_ihl", None, None, 0),
            ]
        );
        // Received: the bytes as they arrived; sent: as they left, the outer header first.
        assert_eq!(r[0].bytes(), &frames[0][..]);
        assert_eq!(r[1].bytes(), &expected[0].1[..]);
        assert_eq!(r[1].orig_len as usize, expected[0].1.len());
        assert_eq!(&r[1].bytes()[0..6], &B1_MAC);
        assert_eq!(r[7].bytes(), &frames[3][..]);
        assert_eq!(shared.lost_total(), 0);
        // The capture ends: the worker lets go at its next poll, and bursts run as before.
        shared.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        worker.poll();
        assert!(!worker.is_active());
        assert!(ring.is_abandoned());
        captured(&mut rig, &mut worker, &frames);
        assert!(records(&mut ring).is_empty());
    }

    #[test]
    fn a_capture_keeps_only_what_its_filter_and_points_ask_for() {
        let frames = frames();
        let mut rig = Rig::new(Encap::Ipip);
        let six = Filter {
            flow: FlowFilter { backend: Some((a("fd00::1:1"), None)), ..FlowFilter::default() },
            ..Filter::default()
        };
        let (mut worker, mut ring, _) = tap(six, Points::NONE.with(Point::Sent), 64);
        captured(&mut rig, &mut worker, &frames);
        let r = records(&mut ring);
        assert_eq!(r.len(), 1, "only web6's datagram, only as sent");
        assert_eq!((r[0].point, r[0].note.decision.as_str()), (Point::Sent, "new_connection"));
        assert_eq!(&r[0].bytes()[0..6], &B6_MAC);

        let mut rig = Rig::new(Encap::Ipip);
        let dropped = Points::NONE.with(Point::Dropped);
        let (mut worker, mut ring, _) = tap(Filter::default(), dropped, 64);
        captured(&mut rig, &mut worker, &frames);
        let r = records(&mut ring);
        assert_eq!(r.len(), 1, "only the malformed frame");
        assert_eq!((r[0].point, r[0].note.decision.as_str()), (Point::Dropped, "bad_ihl"));
        assert_eq!(r[0].bytes(), &frames[3][..]);

        let mut rig = Rig::new(Encap::Ipip);
        let client = Filter {
            flow: FlowFilter {
                client: Some("198.18.10.0/24".parse().unwrap()),
                ..FlowFilter::default()
            },
            ..Filter::default()
        };
        let (mut worker, mut ring, _) = tap(client, Points::NONE.with(Point::Received), 64);
        captured(&mut rig, &mut worker, &frames);
        assert_eq!(records(&mut ring).len(), 2, "the SYN and the ACK; the bad frame has no flow");
    }

    #[test]
    fn nx_5_a_full_ring_loses_records_counted_and_never_waits() {
        let frames = frames();
        let expected = Rig::new(Encap::Ipip).run_burst(&frames);
        let mut rig = Rig::new(Encap::Ipip);
        let (mut worker, mut ring, shared) = tap(Filter::default(), Points::ALL, 3);
        assert_eq!(captured(&mut rig, &mut worker, &frames), expected);
        assert_eq!(records(&mut ring).len(), 3);
        assert_eq!(shared.lost_total(), 5, "8 records, 3 places");
    }

    #[test]
    fn without_a_tap_a_burst_is_the_staged_burst_path() {
        let frames = frames();
        let expected = Rig::new(Encap::Ipip).run_burst(&frames);
        let mut rig = Rig::new(Encap::Ipip);
        let mut worker = WorkerTap::default();
        worker.poll();
        assert_eq!(captured(&mut rig, &mut worker, &frames), expected);
    }
}
