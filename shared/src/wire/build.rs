//! Header writers: encapsulation, L2 rewrite, local answers and new control packets.
//!
//! Everything writes into a caller-provided `&mut [u8]` (mbuf data), allocates nothing and
//! returns `Err(`[`BuildError`]`)` instead of panicking, whatever the inputs.
//!
//! # Encapsulation
//!
//! The worker prepends [`encap_len`] bytes before the inner IP packet (mbuf headroom) and
//! calls [`write_encap`] on the whole new frame. Decisions:
//! - outer IPv4: **DF always set, identification 0** (RFC 6864 atomic datagram). The balancer
//!   never lets its tunnel packets be fragmented: backends would have to reassemble them and
//!   outer fragments lose the inner ports (RSS, ECMP). A packet that does not fit after
//!   encapsulation is answered with [`icmp_frag_needed`] / [`icmpv6_packet_too_big`] by the
//!   worker (Katran does the same); TTL 64; protocol 4 (IPv4 inner) or 41 (IPv6 inner);
//! - outer IPv6: hop limit 64, next header 4 or 41, flow label from the flow hash
//!   ([`flow_label`]) so that ECMP and RSS spread tunnels per flow;
//! - the inner DSCP/ECN byte (traffic class) is copied to the outer header (RFC 6040 normal
//!   mode);
//! - GUE is variant 1 (RFC 8086 / draft-ietf-intarea-gue §5: the inner IP header follows the
//!   UDP header directly, as Katran does); UDP source port from the flow hash in
//!   49152..=65535 ([`gue_source_port`]), destination port configurable; the UDP checksum is
//!   0 over IPv4 and computed over the whole datagram over IPv6 (Linux drops zero-checksum
//!   UDP over IPv6 by default, RFC 6936);
//! - no VLAN tag is written: tagging on egress is the NIC's job (TX VLAN insert offload).
//!
//! # Local answers
//!
//! The worker decides *whether* to answer (the target is its own address or a VIP); these
//! functions only write. Replies are built in place in the received frame, VLAN tags kept.

use super::arp::{self, ArpPacket};
use super::classify::{Frame, FrameKind};
use super::ethernet::{self, EthernetFrame, MIN_FRAME_LEN};
use super::icmp::{self, IcmpPacket};
use super::icmpv6::{self, na_flags, nd_option, Icmpv6Packet, NdiscPacket};
use super::ipv4::{self, Ipv4Packet};
use super::ipv6::{self, Ipv6Packet};
use super::udp::{self, UdpPacket};
use super::{checksum, ethertype, ip_proto, MacAddr, BROADCAST_MAC};
use crate::addr::Addr;

/// Why a packet could not be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BuildError {
    /// The buffer is too small for what must be written.
    BufferTooSmall,
    /// The result would exceed the IP length limit (65535).
    TooLong,
    /// The frame is not of the kind this function answers (e.g. not an ARP request), or the
    /// inner packet is not IP.
    WrongKind,
    /// An address of the wrong family (outer source and destination must match).
    AddressFamily,
    /// RFC 1122 §3.2.2 / RFC 4443 §2.4(e) forbid this ICMP error: the offending packet is an
    /// ICMP error, a non-first IPv4 fragment, or comes from a multicast, broadcast or
    /// unspecified address.
    NotAllowed,
}

impl BuildError {
    /// Every value, for counter tables.
    pub const ALL: [BuildError; 5] = [
        BuildError::BufferTooSmall,
        BuildError::TooLong,
        BuildError::WrongKind,
        BuildError::AddressFamily,
        BuildError::NotAllowed,
    ];

    /// The name used in metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            BuildError::BufferTooSmall => "buffer_too_small",
            BuildError::TooLong => "too_long",
            BuildError::WrongKind => "wrong_kind",
            BuildError::AddressFamily => "address_family",
            BuildError::NotAllowed => "not_allowed",
        }
    }
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// TTL / hop limit of every packet the balancer originates or encapsulates.
pub const DEFAULT_TTL: u8 = 64;

/// Katran's default GUE destination port.
pub const DEFAULT_GUE_PORT: u16 = 6080;

/// IPv4 ICMP errors are at most this long (RFC 1812 §4.3.2.3).
pub const ICMP_ERROR_MAX_V4: usize = 576;

/// ICMPv6 errors are at most this long (the IPv6 minimum MTU, RFC 4443 §2.4(c)).
pub const ICMP_ERROR_MAX_V6: usize = 1280;

/// The encapsulation a service uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EncapKind {
    /// IP in IP: IPIP, IP6IP6, 4in6 or 6in4, by the families.
    Ipip,
    /// GUE variant 1: outer IP + UDP, then the inner IP packet.
    Gue,
}

/// Bytes written before the inner IP packet: Ethernet + outer IP (+ UDP for GUE).
pub fn encap_len(kind: EncapKind, outer_v6: bool) -> usize {
    let ip = if outer_v6 { ipv6::HEADER_LEN } else { ipv4::HEADER_LEN };
    let udp = match kind {
        EncapKind::Ipip => 0,
        EncapKind::Gue => udp::HEADER_LEN,
    };
    ethernet::HEADER_LEN + ip + udp
}

/// The GUE UDP source port for a flow: its hash mapped into 49152..=65535.
pub fn gue_source_port(flow_hash: u64) -> u16 {
    let low = u16::try_from(flow_hash & 0x3fff).unwrap_or(0);
    0xc000 | low
}

/// The outer IPv6 flow label for a flow: 20 bits of its hash.
pub fn flow_label(flow_hash: u64) -> u32 {
    let folded = flow_hash ^ (flow_hash >> 32);
    u32::try_from(folded & 0x000f_ffff).unwrap_or(0)
}

/// Inputs of [`write_encap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncapParams {
    /// IPIP or GUE.
    pub kind: EncapKind,
    /// Next-hop MAC.
    pub dst_mac: MacAddr,
    /// Our MAC.
    pub src_mac: MacAddr,
    /// Outer source (the balancer's tunnel address).
    pub outer_src: Addr,
    /// Outer destination (the backend).
    pub outer_dst: Addr,
    /// The flow's hash (GUE source port, IPv6 flow label).
    pub flow_hash: u64,
    /// GUE destination port (ignored for IPIP).
    pub gue_dport: u16,
}

/// Write the Ethernet header.
pub fn write_ethernet(
    buf: &mut [u8],
    dst: MacAddr,
    src: MacAddr,
    ethertype: u16,
) -> Result<(), BuildError> {
    let b = buf.get_mut(..ethernet::HEADER_LEN).ok_or(BuildError::BufferTooSmall)?;
    let mut e = EthernetFrame::new_unchecked(b);
    e.set_dst_addr(dst);
    e.set_src_addr(src);
    e.set_ethertype(ethertype);
    Ok(())
}

/// Write a 20-byte IPv4 header (no options, identification 0, DF set) with its checksum.
pub fn write_ipv4_header(
    buf: &mut [u8],
    src: Addr,
    dst: Addr,
    proto: u8,
    payload_len: usize,
    tos: u8,
    ttl: u8,
) -> Result<(), BuildError> {
    let (Some(s), Some(d)) = (src.v4_bytes(), dst.v4_bytes()) else {
        return Err(BuildError::AddressFamily);
    };
    let total = u16::try_from(ipv4::HEADER_LEN + payload_len).map_err(|_| BuildError::TooLong)?;
    let b = buf.get_mut(..ipv4::HEADER_LEN).ok_or(BuildError::BufferTooSmall)?;
    // The ten 16-bit words of the header, checksummed from the values rather than read back
    // from the buffer: a word load over bytes just stored one by one would wait for them all
    // (no store forwarding), which cost a third of the encapsulation's time.
    let pair = |hi: u8, lo: u8| u16::from_be_bytes([hi, lo]);
    let mut words = [
        pair(0x45, tos), // version 4, header length 5 words; DSCP/ECN
        total,
        0,      // identification
        0x4000, // DF, not a fragment
        pair(ttl, proto),
        0, // checksum, below
        pair(s[0], s[1]),
        pair(s[2], s[3]),
        pair(d[0], d[1]),
        pair(d[2], d[3]),
    ];
    words[5] = !checksum::fold(words.iter().map(|&w| u64::from(w)).sum());
    for (at, w) in b.chunks_exact_mut(2).zip(words) {
        at.copy_from_slice(&w.to_be_bytes());
    }
    Ok(())
}

/// Write a 40-byte IPv6 header.
#[allow(clippy::too_many_arguments)]
pub fn write_ipv6_header(
    buf: &mut [u8],
    src: Addr,
    dst: Addr,
    next_header: u8,
    payload_len: usize,
    traffic_class: u8,
    flow_label: u32,
    hop_limit: u8,
) -> Result<(), BuildError> {
    if src.is_v4() || dst.is_v4() {
        return Err(BuildError::AddressFamily);
    }
    let plen = u16::try_from(payload_len).map_err(|_| BuildError::TooLong)?;
    let b = buf.get_mut(..ipv6::HEADER_LEN).ok_or(BuildError::BufferTooSmall)?;
    let mut ip = Ipv6Packet::new_unchecked(b);
    ip.set_version_tc_flow(traffic_class, flow_label);
    ip.set_payload_len(plen);
    ip.set_next_header(next_header);
    ip.set_hop_limit(hop_limit);
    ip.set_src_addr(src.0);
    ip.set_dst_addr(dst.0);
    Ok(())
}

/// Fill the encapsulation header in `buf[..encap_len(p.kind, outer_v6)]`, in front of the
/// inner IP packet at `buf[encap_len..encap_len + inner_len]` (which must already be
/// there: its version and DSCP are read, and GUE over IPv6 checksums it). Returns the frame
/// length, `encap_len + inner_len`.
pub fn write_encap(buf: &mut [u8], p: &EncapParams, inner_len: usize) -> Result<usize, BuildError> {
    let outer_v6 = !p.outer_src.is_v4();
    if p.outer_dst.is_v4() == outer_v6 {
        return Err(BuildError::AddressFamily);
    }
    let hdr = encap_len(p.kind, outer_v6);
    let total = hdr + inner_len;
    if buf.len() < total {
        return Err(BuildError::BufferTooSmall);
    }
    if inner_len < 2 {
        return Err(BuildError::WrongKind);
    }
    let (inner_proto, tos) = match buf[hdr] >> 4 {
        4 => (ip_proto::IPIP, buf[hdr + 1]),
        6 => (ip_proto::IPV6, (buf[hdr] << 4) | (buf[hdr + 1] >> 4)),
        _ => return Err(BuildError::WrongKind),
    };
    let udp_len = match p.kind {
        EncapKind::Ipip => 0,
        EncapKind::Gue => udp::HEADER_LEN,
    };
    let ip_payload = udp_len + inner_len;
    let l4_proto = if udp_len == 0 { inner_proto } else { ip_proto::UDP };
    let et = if outer_v6 { ethertype::IPV6 } else { ethertype::IPV4 };
    write_ethernet(buf, p.dst_mac, p.src_mac, et)?;
    let ip_at = ethernet::HEADER_LEN;
    let ip_buf = &mut buf[ip_at..];
    if outer_v6 {
        let label = flow_label(p.flow_hash);
        write_ipv6_header(
            ip_buf,
            p.outer_src,
            p.outer_dst,
            l4_proto,
            ip_payload,
            tos,
            label,
            DEFAULT_TTL,
        )?;
    } else {
        write_ipv4_header(
            ip_buf,
            p.outer_src,
            p.outer_dst,
            l4_proto,
            ip_payload,
            tos,
            DEFAULT_TTL,
        )?;
    }
    if udp_len != 0 {
        let udp_at = hdr - udp::HEADER_LEN;
        let ulen = u16::try_from(ip_payload).map_err(|_| BuildError::TooLong)?;
        let seg = &mut buf[udp_at..total];
        let mut u = UdpPacket::new_unchecked(&mut *seg);
        u.set_src_port(gue_source_port(p.flow_hash));
        u.set_dst_port(p.gue_dport);
        u.set_len(ulen);
        u.set_checksum(0);
        if outer_v6 {
            let ph =
                checksum::pseudo_header(&p.outer_src, &p.outer_dst, ip_proto::UDP, u32::from(ulen));
            let c = checksum::finish_udp(&[ph, checksum::data(seg)]);
            UdpPacket::new_unchecked(seg).set_checksum(c);
        }
    }
    Ok(total)
}

/// The outer Ethernet and IPv4 headers towards one backend, built once per backend and next
/// hop (the worker keeps one per backend slot with the next hop's MAC) so that encapsulating
/// a packet over IPv4 copies 34 bytes and fills four fields, instead of building both headers
/// field by field ([`write_encap`], which it matches byte for byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OuterV4 {
    /// Ethernet (next-hop MAC, our MAC, IPv4), then IPv4 with version and header length, DF,
    /// TTL and both addresses; DSCP/ECN, total length, protocol and checksum are per packet.
    head: [u8; IPV4_HEAD],
    /// The one's-complement sum (unfolded) of the IPv4 header's fixed words.
    sum: u32,
}

impl OuterV4 {
    /// The headers from `src` (ours) to `dst` (the backend) through the next hop `dst_mac`;
    /// `None` unless both addresses are IPv4.
    pub fn new(dst_mac: MacAddr, src_mac: MacAddr, src: Addr, dst: Addr) -> Option<OuterV4> {
        let (s, d) = (src.v4_bytes()?, dst.v4_bytes()?);
        let mut head = [0u8; ethernet::HEADER_LEN + ipv4::HEADER_LEN];
        write_ethernet(&mut head, dst_mac, src_mac, ethertype::IPV4).ok()?;
        write_ipv4_header(&mut head[ethernet::HEADER_LEN..], src, dst, 0, 0, 0, DEFAULT_TTL)
            .ok()?;
        let pair = |b: [u8; 4], i: usize| u32::from(u16::from_be_bytes([b[i], b[i + 1]]));
        // Identification 0 and no fragment offset: DF; the TTL's half of the TTL/protocol word.
        let sum = 0x4000
            + (u32::from(DEFAULT_TTL) << 8)
            + pair(s, 0)
            + pair(s, 2)
            + pair(d, 0)
            + pair(d, 2);
        Some(OuterV4 { head, sum })
    }

    /// [`write_encap`] with these headers: `buf[encap_len(kind, false)..]` holds the inner
    /// packet of `inner_len` bytes; returns the frame length.
    #[inline]
    pub fn write(
        &self,
        buf: &mut [u8],
        kind: EncapKind,
        inner_len: usize,
        flow_hash: u64,
        gue_dport: u16,
    ) -> Result<usize, BuildError> {
        let hdr = encap_len(kind, false);
        let total = hdr + inner_len;
        let frame = buf.get_mut(..total).ok_or(BuildError::BufferTooSmall)?;
        let EncapKind::Gue = kind else {
            return self.write_ipip(frame);
        };
        let (head, rest) =
            frame.split_first_chunk_mut::<IPV4_HEAD>().ok_or(BuildError::BufferTooSmall)?;
        let (u, inner) = rest
            .split_first_chunk_mut::<{ udp::HEADER_LEN }>()
            .ok_or(BuildError::BufferTooSmall)?;
        let ip_total = self.fill(head, inner, udp::HEADER_LEN, inner_len)?;
        // Over IPv4 the UDP checksum is 0 (not computed), as `write_encap` leaves it.
        let ulen = ip_total - ipv4::HEADER_LEN as u16;
        u[0..2].copy_from_slice(&gue_source_port(flow_hash).to_be_bytes());
        u[2..4].copy_from_slice(&gue_dport.to_be_bytes());
        u[4..6].copy_from_slice(&ulen.to_be_bytes());
        u[6..8].copy_from_slice(&[0, 0]);
        Ok(total)
    }

    /// [`OuterV4::write`] for IPIP, where `frame` is exactly the headers' 34 bytes followed by
    /// the inner packet (as [`encap_len`] and the inner length make it); returns the frame
    /// length. The packet path's common case, with the header as a fixed-size array (no
    /// bounds checks on its stores) and the inner length that of the frame.
    #[inline(always)]
    pub fn write_ipip(&self, frame: &mut [u8]) -> Result<usize, BuildError> {
        let (head, inner) =
            frame.split_first_chunk_mut::<IPV4_HEAD>().ok_or(BuildError::BufferTooSmall)?;
        let inner_len = inner.len();
        self.fill(head, inner, 0, inner_len)?;
        Ok(IPV4_HEAD + inner_len)
    }

    /// Write the Ethernet and IPv4 headers before an inner packet of `inner_len` bytes that
    /// begins `inner` (its version and traffic class give the protocol and the DSCP/ECN
    /// byte), with `udp_len` bytes of UDP header between; returns the IPv4 total length.
    #[inline(always)]
    fn fill(
        &self,
        head: &mut [u8; IPV4_HEAD],
        inner: &[u8],
        udp_len: usize,
        inner_len: usize,
    ) -> Result<u16, BuildError> {
        const L3: usize = ethernet::HEADER_LEN;
        let (inner_proto, tos) = match inner.first_chunk::<2>() {
            Some([v, b1]) if v >> 4 == 4 => (ip_proto::IPIP, *b1),
            Some([v, b1]) if v >> 4 == 6 => (ip_proto::IPV6, (v << 4) | (b1 >> 4)),
            _ => return Err(BuildError::WrongKind),
        };
        let proto = if udp_len == 0 { inner_proto } else { ip_proto::UDP };
        let ip_total = u16::try_from(ipv4::HEADER_LEN + udp_len + inner_len)
            .map_err(|_| BuildError::TooLong)?;
        let sum = self.sum
            + u32::from(u16::from_be_bytes([0x45, tos]))
            + u32::from(ip_total)
            + u32::from(proto);
        *head = self.head;
        head[L3 + 1] = tos;
        head[L3 + 2..L3 + 4].copy_from_slice(&ip_total.to_be_bytes());
        head[L3 + 9] = proto;
        head[L3 + 10..L3 + 12].copy_from_slice(&(!checksum::fold(u64::from(sum))).to_be_bytes());
        Ok(ip_total)
    }
}

/// The Ethernet and IPv4 headers' length.
const IPV4_HEAD: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN;

/// The outer Ethernet and IPv6 headers towards one IPv6 backend, for IP-in-IPv6 (IPv6 or
/// IPv4 inside): like [`OuterV4`], built once per backend and next hop, so that encapsulating
/// a packet copies 54 bytes and fills four fields ([`write_encap`] with `EncapKind::Ipip`,
/// which it matches byte for byte). GUE over IPv6 checksums every packet's payload and is left
/// to [`write_encap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OuterV6 {
    /// Ethernet (next-hop MAC, our MAC, IPv6), then IPv6 with the hop limit and both addresses;
    /// version, traffic class and flow label, payload length and next header are per packet.
    head: [u8; ethernet::HEADER_LEN + ipv6::HEADER_LEN],
}

impl OuterV6 {
    /// The headers from `src` (ours) to `dst` (the backend) through the next hop `dst_mac`;
    /// `None` unless both addresses are IPv6.
    pub fn new(dst_mac: MacAddr, src_mac: MacAddr, src: Addr, dst: Addr) -> Option<OuterV6> {
        if src.is_v4() || dst.is_v4() {
            return None;
        }
        let mut head = [0u8; ethernet::HEADER_LEN + ipv6::HEADER_LEN];
        write_ethernet(&mut head, dst_mac, src_mac, ethertype::IPV6).ok()?;
        write_ipv6_header(&mut head[ethernet::HEADER_LEN..], src, dst, 0, 0, 0, 0, DEFAULT_TTL)
            .ok()?;
        Some(OuterV6 { head })
    }

    /// [`write_encap`] with these headers and `EncapKind::Ipip`: `buf[encap_len(Ipip, true)..]`
    /// holds the inner packet of `inner_len` bytes; returns the frame length.
    #[inline]
    pub fn write(
        &self,
        buf: &mut [u8],
        inner_len: usize,
        flow_hash: u64,
    ) -> Result<usize, BuildError> {
        const L3: usize = ethernet::HEADER_LEN;
        const HDR: usize = L3 + ipv6::HEADER_LEN;
        let frame = buf.get_mut(..HDR + inner_len).ok_or(BuildError::BufferTooSmall)?;
        let (next_header, tc) = match frame.get(HDR..HDR + 2) {
            Some([v, b1]) if v >> 4 == 4 => (ip_proto::IPIP, *b1),
            Some([v, b1]) if v >> 4 == 6 => (ip_proto::IPV6, (v << 4) | (b1 >> 4)),
            _ => return Err(BuildError::WrongKind),
        };
        let plen = u16::try_from(inner_len).map_err(|_| BuildError::TooLong)?;
        let first = (6u32 << 28) | (u32::from(tc) << 20) | flow_label(flow_hash);
        frame[..HDR].copy_from_slice(&self.head);
        frame[L3..L3 + 4].copy_from_slice(&first.to_be_bytes());
        frame[L3 + 4..L3 + 6].copy_from_slice(&plen.to_be_bytes());
        frame[L3 + 6] = next_header;
        Ok(HDR + inner_len)
    }
}

/// Set the destination and source MACs of a frame (L2 rewrite).
pub fn set_macs(frame: &mut [u8], dst: MacAddr, src: MacAddr) -> Result<(), BuildError> {
    let b = frame.get_mut(..ethernet::HEADER_LEN).ok_or(BuildError::BufferTooSmall)?;
    let mut e = EthernetFrame::new_unchecked(b);
    e.set_dst_addr(dst);
    e.set_src_addr(src);
    Ok(())
}

/// Zero-pad an Ethernet frame of `len` bytes up to 60 when the buffer allows; returns the
/// length to transmit.
fn pad(frame: &mut [u8], len: usize) -> usize {
    let padded = len.max(MIN_FRAME_LEN).min(frame.len()).max(len);
    if let Some(p) = frame.get_mut(len..padded) {
        p.fill(0);
    }
    padded
}

/// Turn a received ARP request (classified as `f`) into the reply, in place: "target IP is
/// at `our_mac`". Returns the frame length (padded to 60 bytes when the buffer allows).
pub fn arp_reply(frame: &mut [u8], f: &Frame, our_mac: MacAddr) -> Result<usize, BuildError> {
    let FrameKind::Arp { op: arp::op::REQUEST, sender_mac, sender_ip, target_ip, .. } = f.kind
    else {
        return Err(BuildError::WrongKind);
    };
    let (Some(spa), Some(tpa)) = (sender_ip.v4_bytes(), target_ip.v4_bytes()) else {
        return Err(BuildError::AddressFamily);
    };
    let l3 = usize::from(f.l3_offset);
    let end = l3 + arp::PACKET_LEN;
    let b = frame.get_mut(l3..end).ok_or(BuildError::BufferTooSmall)?;
    let mut a = ArpPacket::new_unchecked(b);
    a.set_ethernet_ipv4(arp::op::REPLY);
    a.set_sender_mac(our_mac);
    a.set_sender_ip(tpa);
    a.set_target_mac(sender_mac);
    a.set_target_ip(spa);
    set_macs(frame, f.src_mac, our_mac)?;
    Ok(pad(frame, end))
}

/// Turn a received ICMP or ICMPv6 echo request (classified as `f`) into the reply, in place:
/// MACs and addresses swapped, TTL / hop limit reset to 64, IPv4 options and IPv6 extension
/// headers removed, type 0 (checksum updated incrementally, RFC 1624) or 129 (checksum
/// recomputed with the pseudo-header). Returns the frame length.
pub fn icmp_echo_reply(frame: &mut [u8], f: &Frame) -> Result<usize, BuildError> {
    let FrameKind::IcmpEchoRequest { ip, .. } = f.kind else {
        return Err(BuildError::WrongKind);
    };
    let l3 = usize::from(ip.l3_offset);
    let l4 = ip.l4();
    let end = ip.frame_len();
    if frame.len() < end || l4 < l3 || l4 + 8 > end {
        return Err(BuildError::BufferTooSmall);
    }
    let hdr = if ip.is_v4 { ipv4::HEADER_LEN } else { ipv6::HEADER_LEN };
    if l4 < l3 + hdr {
        return Err(BuildError::WrongKind);
    }
    // Drop options / extension headers: the message moves right behind the base header.
    let msg_len = end - l4;
    let new_l4 = l3 + hdr;
    frame.copy_within(l4..end, new_l4);
    let new_end = new_l4 + msg_len;
    let l3_len = hdr + msg_len;
    let (eth_dst, eth_src) = (f.src_mac, f.dst_mac);
    set_macs(frame, eth_dst, eth_src)?;
    if ip.is_v4 {
        let mut p = Ipv4Packet::new_unchecked(&mut frame[l3..new_end]);
        let (s, d) = (p.src_addr(), p.dst_addr());
        p.set_version_and_header_len(ipv4::HEADER_LEN);
        p.set_total_len(u16::try_from(l3_len).map_err(|_| BuildError::TooLong)?);
        p.set_src_addr(d);
        p.set_dst_addr(s);
        p.set_ttl(DEFAULT_TTL);
        p.fill_checksum();
        let mut m = IcmpPacket::new_unchecked(&mut frame[new_l4..new_end]);
        let old = u16::from_be_bytes([m.msg_type(), m.msg_code()]);
        let new = u16::from_be_bytes([icmp::types::ECHO_REPLY, m.msg_code()]);
        let c = checksum::update16(m.checksum(), old, new);
        m.set_type_code(icmp::types::ECHO_REPLY, m.msg_code());
        m.set_checksum(c);
    } else {
        let mut p = Ipv6Packet::new_unchecked(&mut frame[l3..new_end]);
        let (s, d) = (p.src_addr(), p.dst_addr());
        p.set_payload_len(u16::try_from(msg_len).map_err(|_| BuildError::TooLong)?);
        p.set_next_header(ip_proto::ICMPV6);
        p.set_src_addr(d);
        p.set_dst_addr(s);
        p.set_hop_limit(DEFAULT_TTL);
        let mut m = Icmpv6Packet::new_unchecked(&mut frame[new_l4..new_end]);
        m.set_type_code(icmpv6::types::ECHO_REPLY, 0);
        fill_icmpv6_checksum(&mut frame[new_l4..new_end], Addr(d), Addr(s));
    }
    Ok(new_end)
}

fn fill_icmpv6_checksum(msg: &mut [u8], src: Addr, dst: Addr) {
    let len = u32::try_from(msg.len()).unwrap_or(u32::MAX);
    let mut m = Icmpv6Packet::new_unchecked(&mut *msg);
    m.set_checksum(0);
    let ph = checksum::pseudo_header(&src, &dst, ip_proto::ICMPV6, len);
    let c = checksum::finish(&[ph, checksum::data(msg)]);
    Icmpv6Packet::new_unchecked(msg).set_checksum(c);
}

/// All-nodes multicast `ff02::1`.
pub const ALL_NODES: Addr = Addr([0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);

/// The Ethernet multicast MAC of an IPv6 multicast address (RFC 2464 §7).
pub fn ipv6_multicast_mac(a: &Addr) -> MacAddr {
    [0x33, 0x33, a.0[12], a.0[13], a.0[14], a.0[15]]
}

/// The solicited-node multicast address of `a` (`ff02::1:ffXX:XXXX`, RFC 4291 §2.7.1).
pub fn solicited_node(a: &Addr) -> Addr {
    let mut s = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 0];
    s[13..].copy_from_slice(&a.0[13..]);
    Addr(s)
}

/// Length of an NS or NA with one link-layer address option.
const ND_WITH_LLA: usize = icmpv6::ND_LEN + 8;

/// Write an IPv6 neighbour solicitation or advertisement (one link-layer option) at
/// `frame[l3..]`; returns the end offset.
#[allow(clippy::too_many_arguments)]
fn write_nd(
    frame: &mut [u8],
    l3: usize,
    src: Addr,
    dst: Addr,
    msg_type: u8,
    flags: u8,
    target: Addr,
    opt: (u8, MacAddr),
) -> Result<usize, BuildError> {
    let end = l3 + ipv6::HEADER_LEN + ND_WITH_LLA;
    let b = frame.get_mut(l3..end).ok_or(BuildError::BufferTooSmall)?;
    write_ipv6_header(b, src, dst, ip_proto::ICMPV6, ND_WITH_LLA, 0, 0, 255)?;
    let msg = &mut b[ipv6::HEADER_LEN..];
    let mut m = Icmpv6Packet::new_unchecked(&mut *msg);
    m.set_type_code(msg_type, 0);
    let mut nd = NdiscPacket::new_unchecked(&mut *msg);
    nd.set_flags(flags);
    nd.set_target_addr(target.0);
    msg[icmpv6::ND_LEN] = opt.0;
    msg[icmpv6::ND_LEN + 1] = 1;
    msg[icmpv6::ND_LEN + 2..].copy_from_slice(&opt.1);
    fill_icmpv6_checksum(msg, src, dst);
    Ok(end)
}

/// Turn a received neighbour solicitation (classified as `f`) into the advertisement, in
/// place: from the target address, Solicited + Override, target link-layer address option
/// `our_mac`, to the solicitation's source, or to all-nodes (`ff02::1`) with Solicited clear
/// when the source is unspecified (duplicate address detection, RFC 4861 §7.2.4). The reply
/// is 72 bytes of IPv6, possibly more than the solicitation: `frame` may extend past the
/// received frame (mbuf tailroom). Returns the frame length.
pub fn neighbor_advertisement(
    frame: &mut [u8],
    f: &Frame,
    our_mac: MacAddr,
) -> Result<usize, BuildError> {
    let FrameKind::NeighborSolicitation { ip, src, target, source_mac } = f.kind else {
        return Err(BuildError::WrongKind);
    };
    let (dst, eth_dst, flags) = if src == Addr::UNSPECIFIED {
        (ALL_NODES, ipv6_multicast_mac(&ALL_NODES), na_flags::OVERRIDE)
    } else {
        (src, source_mac.unwrap_or(f.src_mac), na_flags::SOLICITED | na_flags::OVERRIDE)
    };
    let l3 = usize::from(ip.l3_offset);
    let end = write_nd(
        frame,
        l3,
        target,
        dst,
        icmpv6::types::NEIGHBOR_ADVERT,
        flags,
        target,
        (nd_option::TARGET_LL_ADDR, our_mac),
    )?;
    set_macs(frame, eth_dst, our_mac)?;
    Ok(end)
}

/// Write an ARP request "who has `target_ip`, tell `our_ip`" (broadcast), padded to 60
/// bytes. Returns the frame length.
pub fn arp_request(
    buf: &mut [u8],
    our_mac: MacAddr,
    our_ip: Addr,
    target_ip: Addr,
) -> Result<usize, BuildError> {
    let (Some(spa), Some(tpa)) = (our_ip.v4_bytes(), target_ip.v4_bytes()) else {
        return Err(BuildError::AddressFamily);
    };
    let b = buf.get_mut(..MIN_FRAME_LEN).ok_or(BuildError::BufferTooSmall)?;
    write_ethernet(b, BROADCAST_MAC, our_mac, ethertype::ARP)?;
    let end = ethernet::HEADER_LEN + arp::PACKET_LEN;
    let mut a = ArpPacket::new_unchecked(&mut b[ethernet::HEADER_LEN..end]);
    a.set_ethernet_ipv4(arp::op::REQUEST);
    a.set_sender_mac(our_mac);
    a.set_sender_ip(spa);
    a.set_target_mac([0; 6]);
    a.set_target_ip(tpa);
    b[end..].fill(0);
    Ok(MIN_FRAME_LEN)
}

/// Write a neighbour solicitation for `target` from `our_ip`, to the target's
/// solicited-node multicast address and MAC `33:33:ff:xx:xx:xx`, with our link-layer
/// address. Returns the frame length (86).
pub fn neighbor_solicitation(
    buf: &mut [u8],
    our_mac: MacAddr,
    our_ip: Addr,
    target: Addr,
) -> Result<usize, BuildError> {
    if our_ip.is_v4() || target.is_v4() {
        return Err(BuildError::AddressFamily);
    }
    let dst = solicited_node(&target);
    let end = write_nd(
        buf,
        ethernet::HEADER_LEN,
        our_ip,
        dst,
        icmpv6::types::NEIGHBOR_SOLICIT,
        0,
        target,
        (nd_option::SOURCE_LL_ADDR, our_mac),
    )?;
    write_ethernet(buf, ipv6_multicast_mac(&dst), our_mac, ethertype::IPV6)?;
    Ok(end)
}

/// How much of the offending packet an ICMP or ICMPv6 error written into `buf` quotes, after
/// `head` bytes of Ethernet, IP and ICMP headers: `want` bytes or what fits, but at least
/// `need` (the offending IP header and 8 bytes) when that much is wanted.
fn quote_len(buf: &[u8], head: usize, want: usize, need: usize) -> Result<usize, BuildError> {
    let quote = want.min(buf.len().saturating_sub(head));
    if quote < want.min(need) {
        return Err(BuildError::BufferTooSmall);
    }
    Ok(quote)
}

// ICMP and ICMPv6 headers have the same length: one helper places both messages.
const _: () = assert!(icmp::HEADER_LEN == icmpv6::HEADER_LEN);

/// The message of an ICMP or ICMPv6 error: its 8-byte header before `head`, followed by the
/// first `quote` bytes of `offending` (copied here).
fn quoted_message<'a>(
    buf: &'a mut [u8],
    head: usize,
    offending: &[u8],
    quote: usize,
) -> &'a mut [u8] {
    let msg = &mut buf[head - icmp::HEADER_LEN..head + quote];
    msg[icmp::HEADER_LEN..].copy_from_slice(&offending[..quote]);
    msg
}

fn is_icmpv4_error(t: u8) -> bool {
    // Destination unreachable, source quench, redirect, time exceeded, parameter problem.
    matches!(t, 3 | 4 | 5 | 11 | 12)
}

/// Write an ICMP "fragmentation needed" (type 3 code 4, next-hop `mtu`) from `our_ip` to
/// the source of `offending` (an IPv4 packet from its header, e.g. the received frame's
/// `l3_range()`, or a prefix of it), quoting as much of it as fits in 576 bytes. Ethernet `dst_mac` is
/// normally the received frame's source MAC. Returns the frame length.
pub fn icmp_frag_needed(
    buf: &mut [u8],
    dst_mac: MacAddr,
    src_mac: MacAddr,
    our_ip: Addr,
    offending: &[u8],
    mtu: u16,
) -> Result<usize, BuildError> {
    // `offending` may be only the start of the packet (the quote): the fixed header fields
    // are read directly, never through lengths the packet announces.
    if offending.len() < ipv4::HEADER_LEN {
        return Err(BuildError::WrongKind);
    }
    let off = Ipv4Packet::new_unchecked(offending);
    let ihl = off.header_len();
    if off.version() != 4 || ihl < ipv4::HEADER_LEN || ihl > offending.len() {
        return Err(BuildError::WrongKind);
    }
    let src = off.src_addr();
    if off.frag_offset() != 0
        || src[0] >= 224
        || src == [0, 0, 0, 0]
        || (off.protocol() == ip_proto::ICMP
            && offending.get(ihl).is_none_or(|&t| is_icmpv4_error(t)))
    {
        return Err(BuildError::NotAllowed);
    }
    let head = ethernet::HEADER_LEN + ipv4::HEADER_LEN + icmp::HEADER_LEN;
    let want = usize::from(off.total_len())
        .min(offending.len())
        .min(ICMP_ERROR_MAX_V4 - ipv4::HEADER_LEN - 8);
    let quote = quote_len(buf, head, want, ihl + 8)?;
    write_ethernet(buf, dst_mac, src_mac, ethertype::IPV4)?;
    write_ipv4_header(
        &mut buf[ethernet::HEADER_LEN..],
        our_ip,
        Addr::from_v4_bytes(src),
        ip_proto::ICMP,
        icmp::HEADER_LEN + quote,
        0,
        DEFAULT_TTL,
    )?;
    let mut m = IcmpPacket::new_unchecked(quoted_message(buf, head, offending, quote));
    m.set_type_code(icmp::types::DEST_UNREACHABLE, icmp::types::CODE_FRAG_NEEDED);
    m.set_rest_of_header(u32::from(mtu));
    m.fill_checksum();
    Ok(head + quote)
}

/// Write an ICMPv6 "packet too big" (type 2, `mtu`) from `our_ip` to the source of
/// `offending` (an IPv6 packet from its header), quoting as much of it as fits in 1280
/// bytes. Returns the frame length.
pub fn icmpv6_packet_too_big(
    buf: &mut [u8],
    dst_mac: MacAddr,
    src_mac: MacAddr,
    our_ip: Addr,
    offending: &[u8],
    mtu: u32,
) -> Result<usize, BuildError> {
    if our_ip.is_v4() {
        return Err(BuildError::AddressFamily);
    }
    // `offending` may be only the start of the packet (the quote).
    if offending.len() < ipv6::HEADER_LEN {
        return Err(BuildError::WrongKind);
    }
    let off = Ipv6Packet::new_unchecked(offending);
    if off.version() != 6 {
        return Err(BuildError::WrongKind);
    }
    let src = Addr(off.src_addr());
    if src.0[0] == 0xff || src == Addr::UNSPECIFIED {
        return Err(BuildError::NotAllowed);
    }
    let have = off.total_len().min(offending.len());
    let payload = &offending[ipv6::HEADER_LEN..have];
    if let Ok(chain) = ipv6::walk_chain(off.next_header(), payload) {
        let first = chain.frag.is_none_or(|f| f.offset == 0);
        if chain.proto == ip_proto::ICMPV6 && first {
            let t = payload.get(chain.l4_offset).copied();
            if t.is_none_or(|t| t < 128) {
                return Err(BuildError::NotAllowed);
            }
        }
    }
    let head = ethernet::HEADER_LEN + ipv6::HEADER_LEN + icmpv6::HEADER_LEN;
    let want = have.min(ICMP_ERROR_MAX_V6 - ipv6::HEADER_LEN - 8);
    let quote = quote_len(buf, head, want, ipv6::HEADER_LEN + 8)?;
    write_ethernet(buf, dst_mac, src_mac, ethertype::IPV6)?;
    write_ipv6_header(
        &mut buf[ethernet::HEADER_LEN..],
        our_ip,
        src,
        ip_proto::ICMPV6,
        icmpv6::HEADER_LEN + quote,
        0,
        0,
        DEFAULT_TTL,
    )?;
    let msg = quoted_message(buf, head, offending, quote);
    let mut m = Icmpv6Packet::new_unchecked(&mut *msg);
    m.set_type_code(icmpv6::types::PACKET_TOO_BIG, 0);
    m.set_rest_of_header(mtu);
    fill_icmpv6_checksum(msg, our_ip, src);
    Ok(head + quote)
}
