//! One frame kind's prebuilt bytes and partial checksums ([`Template`]), and the code that
//! writes a frame from one: copy, patch the source, finish the checksums.

use spillway_core::wire::{
    checksum, ethernet, ethertype, ip_proto, ipv4, ipv6, tcp, udp, EthernetFrame, Ipv4Packet,
    Ipv6Packet, TcpPacket, UdpPacket,
};

use crate::sources::SourcePool;
use crate::spec::{TrafficSpec, MIN_FRAME_LEN, MIN_PAYLOAD};

pub(crate) const ETH_LEN: usize = ethernet::HEADER_LEN;
/// Offset of the IPv4 source address in a frame (the destination follows it).
const V4_SRC: usize = ETH_LEN + ipv4::field::SRC;
/// Offset of the IPv4 header checksum in a frame.
const V4_CSUM: usize = ETH_LEN + ipv4::field::CHECKSUM;
/// Offset of the low 64 bits of the IPv6 source address in a frame.
const V6_SRC_LO: usize = ETH_LEN + ipv6::field::SRC + 8;
/// Bytes of a template copied as one fixed-size block: every header field, up to the IPv6 TCP
/// checksum. No frame is shorter than 60 bytes and every buffer is at least
/// [`FrameFactory::max_frame_len`](crate::FrameFactory::max_frame_len) >= 82 bytes long (IPv6
/// TCP), so the copy always fits.
pub(crate) const HEAD: usize = 80;

/// One frame kind's prebuilt bytes and partial checksums.
#[derive(Debug, Clone)]
pub(crate) struct Template {
    /// The first [`HEAD`] bytes of the frame (zero after its end): every field written per
    /// frame but the stamp lies in them, so they are copied and patched with fixed offsets.
    pub(crate) head: [u8; HEAD],
    /// The rest of the frame (payload zeros), when it is longer than [`HEAD`].
    pub(crate) tail: Box<[u8]>,
    /// Frame length.
    pub(crate) len: usize,
    pub(crate) v6: bool,
    pub(crate) udp: bool,
    pub(crate) syn: bool,
    /// Offset of the TCP/UDP header.
    pub(crate) l4: usize,
    /// Offset of the TCP/UDP checksum.
    pub(crate) l4_csum: usize,
    /// Where the per-frame address word goes: the IPv4 source and destination (the
    /// destination is constant), or the low 64 bits of the IPv6 source.
    pub(crate) addr_at: usize,
    /// Where the IPv4 header checksum goes. IPv6 has none: its value is written over the
    /// TCP/UDP checksum, which is written afterwards (one code path, no branch).
    pub(crate) ip_csum: usize,
    /// The address word is `(first + host) << addr_shift | addr_or`: IPv4 `first` is the
    /// first source, shifted up by 32 above the destination; IPv6 `first` is the low 64 bits
    /// of the first source.
    pub(crate) first: u64,
    pub(crate) addr_shift: u32,
    pub(crate) addr_or: u64,
    /// Unfolded sum of the IPv4 header without the address word and the checksum (IPv4 only).
    pub(crate) ip_sum: u64,
    /// Unfolded sum of the pseudo-header and the L4 segment without the address word, the
    /// source port, the stamp and the checksum.
    pub(crate) l4_sum: u64,
    /// The time stamp starts at an odd offset of the L4 segment (its sum is byte-swapped).
    pub(crate) stamp_odd: bool,
}

/// The sum of the 16-bit words of a 64-bit value, unfolded (for [`checksum::fold`]).
#[inline]
fn sum64(x: u64) -> u64 {
    (x >> 32) + (x & 0xffff_ffff)
}

/// The sum of the 16-bit words of `b`, for adding to an unfolded sum.
fn sum_bytes(b: &[u8]) -> u64 {
    u64::from(checksum::data(b))
}

impl Template {
    /// The template of one kind: IPv6 or IPv4, UDP or TCP, SYN or established.
    pub(crate) fn new(
        spec: &TrafficSpec,
        v4: &SourcePool,
        v6: &SourcePool,
        is_v6: bool,
        udp: bool,
        syn: bool,
    ) -> Template {
        let l3 = if is_v6 { ipv6::HEADER_LEN } else { ipv4::HEADER_LEN };
        let l4_hdr = if udp { udp::HEADER_LEN } else { tcp::HEADER_LEN };
        let given = if udp { spec.udp_payload.len() } else { 0 };
        let min = ETH_LEN + l3 + l4_hdr + given + MIN_PAYLOAD;
        let len = usize::from(spec.frame_len).max(usize::from(MIN_FRAME_LEN)).max(min);
        let l4 = ETH_LEN + l3;
        let l4_len = len - l4;
        let mut b = vec![0u8; len];
        let mut eth = EthernetFrame::new_unchecked(&mut b[..]);
        eth.set_dst_addr(spec.dst_mac);
        eth.set_src_addr(spec.src_mac);
        eth.set_ethertype(if is_v6 { ethertype::IPV6 } else { ethertype::IPV4 });
        let proto = if udp { ip_proto::UDP } else { ip_proto::TCP };
        // The pseudo-header without the address word: for IPv4 only the protocol and length
        // (source and destination are in the word), for IPv6 also the source's high 64 bits
        // and the destination.
        let mut pseudo = u64::from(proto) + l4_len as u64;
        let mut ip_sum = 0;
        let ip = &mut b[ETH_LEN..l4];
        if is_v6 {
            let mut ip = Ipv6Packet::new_unchecked(ip);
            ip.set_version_tc_flow(0, 0);
            ip.set_payload_len(l4_len as u16);
            ip.set_next_header(proto);
            ip.set_hop_limit(64);
            // The low 64 bits of the source are the address word, written per frame.
            let src_hi = (v6.first >> 64 << 64).to_be_bytes();
            ip.set_src_addr(src_hi);
            ip.set_dst_addr(spec.dst_v6.octets());
            pseudo += sum_bytes(&src_hi) + sum_bytes(&spec.dst_v6.octets());
        } else {
            let mut ip = Ipv4Packet::new_unchecked(ip);
            ip.set_version_and_header_len(ipv4::HEADER_LEN);
            ip.set_total_len((len - ETH_LEN) as u16);
            ip.set_frag(true, false, 0);
            ip.set_ttl(64);
            ip.set_protocol(proto);
            // The source and destination are the address word, written per frame.
            ip_sum = sum_bytes(ip.into_inner());
        }
        let seg = &mut b[l4..];
        if udp {
            let mut u = UdpPacket::new_unchecked(&mut *seg);
            u.set_dst_port(spec.dst_port);
            u.set_len(l4_len as u16);
            seg[l4_hdr..l4_hdr + given].copy_from_slice(&spec.udp_payload);
        } else {
            // seq 1; ack 1 on established segments; no options; window 65535.
            let mut t = TcpPacket::new_unchecked(&mut *seg);
            t.set_dst_port(spec.dst_port);
            t.set_seq_number(1);
            if !syn {
                t.set_ack_number(1);
            }
            t.set_header_len(tcp::HEADER_LEN);
            t.set_flags(if syn { tcp::flags::SYN } else { tcp::flags::ACK });
            t.set_window(0xffff);
        }
        let l4_sum = pseudo + sum_bytes(seg);
        let mut head = [0u8; HEAD];
        let n = len.min(HEAD);
        head[..n].copy_from_slice(&b[..n]);
        let l4_csum = l4 + l4_checksum_at(udp);
        let (addr_at, ip_csum, first, addr_shift, addr_or) = if is_v6 {
            (V6_SRC_LO, l4_csum, v6.first as u64, 0, 0)
        } else {
            (V4_SRC, V4_CSUM, v4.first as u64, 32, u64::from(u32::from(spec.dst_v4)))
        };
        Template {
            head,
            tail: b[n..].into(),
            len,
            v6: is_v6,
            udp,
            syn,
            l4,
            l4_csum,
            addr_at,
            ip_csum,
            first,
            addr_shift,
            addr_or,
            ip_sum,
            l4_sum,
            stamp_odd: l4_len % 2 == 1,
        }
    }
}

/// Copies template `t` into `buf`, writes the source (host index `host` of the family's pool,
/// port `sport`) and the stamp, and finishes the checksums from the template's partial sums.
///
/// One code path for every kind, driven by the template's offsets: with mixed families or
/// protocols no branch depends on the kind, so none is mispredicted. (An IPv6 template's
/// `ip_csum` points at its TCP/UDP checksum, which is written last.)
#[inline(always)]
pub(crate) fn write_any(
    t: &Template,
    stamping: bool,
    buf: &mut [u8],
    host: u64,
    sport: u16,
    stamp: u64,
) -> usize {
    let head = head_of(buf);
    *head = t.head;
    let word = (t.first + host) << t.addr_shift | t.addr_or;
    head[t.addr_at..t.addr_at + 8].copy_from_slice(&word.to_be_bytes());
    head[t.l4..t.l4 + 2].copy_from_slice(&sport.to_be_bytes());
    let word_sum = sum64(word);
    let ip = !checksum::fold(t.ip_sum + word_sum);
    head[t.ip_csum..t.ip_csum + 2].copy_from_slice(&ip.to_be_bytes());
    let l4_sum = t.l4_sum + word_sum + u64::from(sport);
    finish(t, stamping, buf, l4_sum, t.udp, t.l4_csum, stamp)
}

/// [`write_any`] for traffic of a single family and protocol: the kind's branch is always
/// predicted, and each kind's copy has constant offsets (fewer instructions).
#[inline(always)]
pub(crate) fn write_one(
    t: &Template,
    stamping: bool,
    buf: &mut [u8],
    host: u64,
    sport: u16,
    stamp: u64,
) -> usize {
    match (t.v6, t.udp) {
        (false, false) => write_kind::<false, false>(t, stamping, buf, host, sport, stamp),
        (false, true) => write_kind::<false, true>(t, stamping, buf, host, sport, stamp),
        (true, false) => write_kind::<true, false>(t, stamping, buf, host, sport, stamp),
        (true, true) => write_kind::<true, true>(t, stamping, buf, host, sport, stamp),
    }
}

/// [`write_any`] for one family and protocol, with constant offsets.
#[inline(always)]
fn write_kind<const V6: bool, const UDP: bool>(
    t: &Template,
    stamping: bool,
    buf: &mut [u8],
    host: u64,
    sport: u16,
    stamp: u64,
) -> usize {
    let l4 = ETH_LEN + if V6 { ipv6::HEADER_LEN } else { ipv4::HEADER_LEN };
    let addr_at = if V6 { V6_SRC_LO } else { V4_SRC };
    let head = head_of(buf);
    *head = t.head;
    let word = if V6 { t.first + host } else { (t.first + host) << 32 | t.addr_or };
    head[addr_at..addr_at + 8].copy_from_slice(&word.to_be_bytes());
    head[l4..l4 + 2].copy_from_slice(&sport.to_be_bytes());
    let word_sum = sum64(word);
    if !V6 {
        let ip = !checksum::fold(t.ip_sum + word_sum);
        head[V4_CSUM..V4_CSUM + 2].copy_from_slice(&ip.to_be_bytes());
    }
    let l4_sum = t.l4_sum + word_sum + u64::from(sport);
    finish(t, stamping, buf, l4_sum, UDP, l4 + l4_checksum_at(UDP), stamp)
}

/// Offset of the TCP or UDP checksum in its header.
#[inline(always)]
const fn l4_checksum_at(udp: bool) -> usize {
    if udp {
        udp::field::CHECKSUM
    } else {
        tcp::field::CHECKSUM
    }
}

/// The first [`HEAD`] bytes of a frame buffer.
#[inline(always)]
fn head_of(buf: &mut [u8]) -> &mut [u8; HEAD] {
    match buf.first_chunk_mut::<HEAD>() {
        Some(head) => head,
        None => panic!("the frame buffer is shorter than FrameFactory::max_frame_len()"),
    }
}

/// The end of a frame: the payload beyond [`HEAD`], the stamp, and the TCP/UDP checksum (at
/// `csum`) from the sum of everything else.
#[inline(always)]
fn finish(
    t: &Template,
    stamping: bool,
    buf: &mut [u8],
    mut l4_sum: u64,
    udp: bool,
    csum: usize,
    stamp: u64,
) -> usize {
    let len = t.len;
    if len > HEAD {
        buf[HEAD..len].copy_from_slice(&t.tail);
    }
    if stamping {
        buf[len - 8..len].copy_from_slice(&stamp.to_le_bytes());
        // The bytes read as big-endian words are the byte-swapped value.
        let s = checksum::fold(sum64(stamp.swap_bytes()));
        l4_sum += u64::from(if t.stamp_odd { s.swap_bytes() } else { s });
    }
    let c = !checksum::fold(l4_sum);
    let c = if udp { checksum::udp_field(c) } else { c };
    buf[csum..csum + 2].copy_from_slice(&c.to_be_bytes());
    len
}
