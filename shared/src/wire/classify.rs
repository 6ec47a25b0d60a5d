//! [`classify`]: the parser of every received frame.
//!
//! The packet path first tries [`classify_ip_fast`], which reads the common frame (untagged
//! IPv4 TCP/UDP, no options, not a fragment) at fixed offsets into an [`IpFrame`], just what
//! forwarding needs; every other frame goes through [`classify`]. [`classify`] parses the
//! frame once, through the views, and returns a `Copy` [`Frame`] with
//! everything the decision core and the rewrite need: the L2 addresses and VLAN tags, the
//! offsets of the L3 and L4 headers, and a [`FrameKind`]. It never allocates and never
//! panics; everything it rejects is one [`Malformed`] reason (NX-2). The rules it applies
//! are listed in the [module doc](super).

use std::ops::Range;

use super::arp::{self, ArpPacket};
use super::ethernet::{self, EthernetFrame, VlanHeader};
use super::icmp::{self, IcmpPacket};
use super::icmpv6::{self, nd_option, Icmpv6Packet, NdiscPacket};
use super::ipv4::{self, Ipv4Packet};
use super::ipv6::{self, Ipv6Packet};
use super::tcp::{self, TcpPacket};
use super::udp::{self, UdpPacket};
use super::{ethertype, ip_proto, MacAddr, Malformed};
use crate::addr::Addr;
use crate::flow::PacketInfo;

/// A classified frame: L2 fields, where L3 starts, and what the frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Destination MAC.
    pub dst_mac: MacAddr,
    /// Source MAC.
    pub src_mac: MacAddr,
    /// Tag control information of the outer VLAN tag (802.1Q or 802.1ad), if any.
    pub vlan: Option<u16>,
    /// Tag control information of a second (inner, QinQ) tag, if any.
    pub inner_vlan: Option<u16>,
    /// The ethertype after the VLAN tags.
    pub ethertype: u16,
    /// Offset of the L3 header in the frame (14, 18 or 22).
    pub l3_offset: u16,
    /// What the frame is.
    pub kind: FrameKind,
}

/// Where an IP packet sits in the frame, and the header fields the rewrite copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpMeta {
    /// Offset of the IP header in the frame.
    pub l3_offset: u16,
    /// IP total length (IPv4), or 40 + payload length (IPv6). Ethernet padding after it is
    /// not part of the packet.
    pub l3_len: u32,
    /// Offset in the frame of the transport header: after IPv4 options and IPv6 extension
    /// headers. For a non-first IPv6 fragment, the start of the fragment data.
    pub l4_offset: u32,
    /// IPv4 (else IPv6).
    pub is_v4: bool,
    /// IPv4 Don't Fragment; always true for IPv6 (routers never fragment it).
    pub df: bool,
    /// TTL or hop limit.
    pub ttl: u8,
    /// IPv4 DSCP/ECN byte or IPv6 traffic class.
    pub tos: u8,
}

impl IpMeta {
    /// The IP packet's byte range in the frame (padding excluded).
    pub fn l3_range(&self) -> Range<usize> {
        let start = usize::from(self.l3_offset);
        start..start + to_usize(self.l3_len)
    }

    /// Offset of the transport header in the frame.
    pub fn l4(&self) -> usize {
        to_usize(self.l4_offset)
    }

    /// L2 header + IP packet: the frame length without Ethernet padding.
    pub fn frame_len(&self) -> usize {
        self.l3_range().end
    }
}

/// What a frame is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// An Ethernet/IPv4 ARP packet (any operation; the worker answers requests for its own
    /// address or a VIP).
    Arp {
        /// Operation ([`arp::op`]).
        op: u16,
        /// Sender hardware address.
        sender_mac: MacAddr,
        /// Sender protocol address (IPv4, v4-mapped).
        sender_ip: Addr,
        /// Target hardware address.
        target_mac: MacAddr,
        /// Target protocol address (IPv4, v4-mapped).
        target_ip: Addr,
    },
    /// An ordinary IP packet, fragments included (`info.fragment`, ports 0).
    Ip {
        /// The flow fields.
        info: PacketInfo,
        /// Where it is.
        ip: IpMeta,
    },
    /// An unfragmented ICMP echo request (type 8) or ICMPv6 echo request (type 128).
    IcmpEchoRequest {
        /// The flow fields (protocol ICMP or ICMPv6, ports 0).
        info: PacketInfo,
        /// Where it is.
        ip: IpMeta,
    },
    /// An unfragmented ICMP error quoting a packet of one of our flows.
    IcmpError {
        /// The quoted packet's tuple **reversed** (src = inner dst, dst = inner src, sport =
        /// inner dport, dport = inner sport, proto = inner proto), `icmp_error = true`; ports
        /// are 0 and `fragment` true when the quote is a non-first fragment.
        info: PacketInfo,
        /// Where the ICMP error packet is (it is forwarded whole).
        ip: IpMeta,
        /// Who sent the error (the outer source).
        from: Addr,
        /// ICMP type.
        icmp_type: u8,
        /// ICMP code.
        icmp_code: u8,
        /// The MTU of a fragmentation-needed (IPv4 type 3 code 4) or packet-too-big (ICMPv6
        /// type 2) message.
        mtu: Option<u32>,
    },
    /// An ICMPv6 neighbour solicitation (135) that passed RFC 4861 validation.
    NeighborSolicitation {
        /// Where it is.
        ip: IpMeta,
        /// Its IPv6 source (unspecified during duplicate address detection).
        src: Addr,
        /// The address asked about.
        target: Addr,
        /// The source link-layer address option.
        source_mac: Option<MacAddr>,
    },
    /// An ICMPv6 neighbour advertisement (136) that passed RFC 4861 validation.
    NeighborAdvertisement {
        /// Where it is.
        ip: IpMeta,
        /// Its IPv6 source.
        src: Addr,
        /// The address advertised.
        target: Addr,
        /// The target link-layer address option.
        target_mac: Option<MacAddr>,
        /// Router / Solicited / Override flags ([`icmpv6::na_flags`]).
        flags: u8,
    },
    /// Not for the balancer, and not an error: unknown ethertypes, LLDP, non-Ethernet/IPv4
    /// ARP, MLD and router discovery, more than two VLAN tags.
    Other {
        /// The ethertype after the VLAN tags.
        ethertype: u16,
    },
}

impl FrameKind {
    /// The IP placement, for every IP kind.
    pub fn ip(&self) -> Option<&IpMeta> {
        match self {
            FrameKind::Ip { ip, .. }
            | FrameKind::IcmpEchoRequest { ip, .. }
            | FrameKind::IcmpError { ip, .. }
            | FrameKind::NeighborSolicitation { ip, .. }
            | FrameKind::NeighborAdvertisement { ip, .. } => Some(ip),
            FrameKind::Arp { .. } | FrameKind::Other { .. } => None,
        }
    }

    /// The flow fields the decision core uses, for the kinds that carry them.
    pub fn packet_info(&self) -> Option<&PacketInfo> {
        match self {
            FrameKind::Ip { info, .. }
            | FrameKind::IcmpEchoRequest { info, .. }
            | FrameKind::IcmpError { info, .. } => Some(info),
            _ => None,
        }
    }
}

fn to_usize(v: u32) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

fn to_u32(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// Parse one Ethernet frame (see the [module doc](super) for the rules).
///
/// The common case, an untagged IPv4 packet without options that is not a fragment and
/// carries TCP or UDP, is read in one pass over fixed offsets ([`classify_fast`]); every other
/// frame, malformed ones included, goes through the general parser. Both give the same
/// answer for every frame (`shared/tests/wire_classify.rs` checks it on arbitrary frames).
#[inline]
pub fn classify(frame: &[u8]) -> Result<Frame, Malformed> {
    match classify_fast(frame) {
        Some(f) => Ok(f),
        None => classify_general(frame),
    }
}

/// What the packet path needs of a frame it forwards: its flow fields, where the IP packet
/// is, and the sender's MAC (for an ICMP error back). [`classify_ip_fast`] returns it for the
/// common frame without building a whole [`Frame`] (about 100 bytes fewer to write and copy
/// per packet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpFrame {
    /// Source MAC.
    pub src_mac: MacAddr,
    /// The flow fields.
    pub info: PacketInfo,
    /// Where the IP packet is.
    pub ip: IpMeta,
}

/// The fast path of [`classify`]: `Some` only for an untagged Ethernet frame with IPv4, IHL 5,
/// a consistent total length, no fragment, or with IPv6 whose next header is the transport
/// (no extension header) and whose payload length fits the frame, and in both a complete TCP
/// header (data offset 5..=15 within the packet) or UDP header (length 8..=the packet's);
/// `None` sends the frame to the general parser, which then also says what is wrong with a
/// malformed one.
#[inline(always)]
pub fn classify_fast(frame: &[u8]) -> Option<Frame> {
    let f = classify_ip_fast(frame).or_else(|| classify_ip6_fast(frame))?;
    let h = frame.get(..6)?;
    Some(Frame {
        dst_mac: [h[0], h[1], h[2], h[3], h[4], h[5]],
        src_mac: f.src_mac,
        vlan: None,
        inner_vlan: None,
        ethertype: if f.ip.is_v4 { ethertype::IPV4 } else { ethertype::IPV6 },
        l3_offset: f.ip.l3_offset,
        kind: FrameKind::Ip { info: f.info, ip: f.ip },
    })
}

/// [`classify_fast`] without the parts of a [`Frame`] the forwarding path does not use: for
/// the same frames it is `Some`, with the same flow fields and placement (the packet path
/// calls this first, and [`classify`] for everything else).
#[inline(always)]
pub fn classify_ip_fast(frame: &[u8]) -> Option<IpFrame> {
    const L3: usize = ethernet::HEADER_LEN;
    const L4: usize = L3 + ipv4::HEADER_LEN;
    // Ethernet, IPv4 without options and a UDP header at least.
    let h: &[u8; L4 + udp::HEADER_LEN] = frame.get(..L4 + udp::HEADER_LEN)?.try_into().ok()?;
    if u16::from_be_bytes([h[12], h[13]]) != ethertype::IPV4 || h[L3] != 0x45 {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([h[L3 + 2], h[L3 + 3]]));
    let flags_offset = u16::from_be_bytes([h[L3 + 6], h[L3 + 7]]);
    // MF or a fragment offset: a fragment.
    if total < ipv4::HEADER_LEN || total > frame.len() - L3 || flags_offset & 0x3fff != 0 {
        return None;
    }
    let proto = h[L3 + 9];
    let l4_len = total - ipv4::HEADER_LEN;
    let (sport, dport) =
        (u16::from_be_bytes([h[L4], h[L4 + 1]]), u16::from_be_bytes([h[L4 + 2], h[L4 + 3]]));
    let tcp_flags = fast_transport(frame, L4, proto, l4_len)?;
    let addr = |at: usize| Addr::from_v4_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
    Some(IpFrame {
        src_mac: [h[6], h[7], h[8], h[9], h[10], h[11]],
        info: PacketInfo {
            src: addr(L3 + 12),
            dst: addr(L3 + 16),
            proto,
            sport,
            dport,
            fragment: false,
            tcp_flags,
            icmp_error: false,
        },
        ip: IpMeta {
            l3_offset: L3 as u16,
            l3_len: total as u32,
            l4_offset: L4 as u32,
            is_v4: true,
            df: flags_offset & 0x4000 != 0,
            ttl: h[L3 + 8],
            tos: h[L3 + 1],
        },
    })
}

/// The TCP flags (0 for UDP) of a packet of the fast paths whose transport header starts at
/// `l4` in `frame` and whose IP payload is `l4_len` bytes: `None` unless TCP with a complete
/// header (data offset 5..=15 within the payload) or UDP with a length of 8..=the payload's.
#[inline(always)]
fn fast_transport(frame: &[u8], l4: usize, proto: u8, l4_len: usize) -> Option<u8> {
    match proto {
        ip_proto::TCP => {
            let t = frame.get(l4..l4 + tcp::HEADER_LEN)?;
            let data_offset = usize::from(t[12] >> 4) * 4;
            (tcp::HEADER_LEN..=l4_len).contains(&data_offset).then_some(t[13])
        }
        ip_proto::UDP => {
            let u = frame.get(l4..l4 + udp::HEADER_LEN)?;
            let len = usize::from(u16::from_be_bytes([u[4], u[5]]));
            (udp::HEADER_LEN..=l4_len).contains(&len).then_some(0)
        }
        _ => None,
    }
}

/// [`classify_ip_fast`] for IPv6: an untagged frame whose next header is TCP or UDP (no
/// extension header). Separate, so that the IPv4 path stays as short as it was (the packet
/// path tries it only for frames that are not the IPv4 common case).
#[inline]
pub fn classify_ip6_fast(frame: &[u8]) -> Option<IpFrame> {
    const L3: usize = ethernet::HEADER_LEN;
    const L4: usize = L3 + ipv6::HEADER_LEN;
    let h: &[u8; L4 + udp::HEADER_LEN] = frame.get(..L4 + udp::HEADER_LEN)?.try_into().ok()?;
    if u16::from_be_bytes([h[12], h[13]]) != ethertype::IPV6 || h[L3] >> 4 != 6 {
        return None;
    }
    let l4_len = usize::from(u16::from_be_bytes([h[L3 + 4], h[L3 + 5]]));
    if l4_len > frame.len() - L4 {
        return None;
    }
    let proto = h[L3 + 6];
    let tcp_flags = fast_transport(frame, L4, proto, l4_len)?;
    let addr = |at: usize| {
        let mut a = [0u8; 16];
        a.copy_from_slice(&h[at..at + 16]);
        Addr(a)
    };
    Some(IpFrame {
        src_mac: [h[6], h[7], h[8], h[9], h[10], h[11]],
        info: PacketInfo {
            src: addr(L3 + 8),
            dst: addr(L3 + 24),
            proto,
            sport: u16::from_be_bytes([h[L4], h[L4 + 1]]),
            dport: u16::from_be_bytes([h[L4 + 2], h[L4 + 3]]),
            fragment: false,
            tcp_flags,
            icmp_error: false,
        },
        ip: IpMeta {
            l3_offset: L3 as u16,
            l3_len: (ipv6::HEADER_LEN + l4_len) as u32,
            l4_offset: L4 as u32,
            is_v4: false,
            df: true,
            ttl: h[L3 + 7],
            tos: (h[L3] << 4) | (h[L3 + 1] >> 4),
        },
    })
}

/// The general parser behind [`classify`]: every frame kind, VLAN tags, options, extension
/// headers, fragments, ICMP, and the reason a malformed frame is malformed.
pub fn classify_general(frame: &[u8]) -> Result<Frame, Malformed> {
    let eth = EthernetFrame::new_checked(frame)?;
    let mut et = eth.ethertype();
    let mut off = ethernet::HEADER_LEN;
    let mut tags = [None; 2];
    for tag in &mut tags {
        if et != ethertype::VLAN && et != ethertype::QINQ {
            break;
        }
        let v = VlanHeader::new_checked(frame.get(off..).ok_or(Malformed::Truncated)?)?;
        *tag = Some(v.tci());
        et = v.ethertype();
        off += ethernet::VLAN_HEADER_LEN;
    }
    let l3 = frame.get(off..).ok_or(Malformed::Truncated)?;
    let l3_offset = u16::try_from(off).unwrap_or(u16::MAX);
    let kind = match et {
        ethertype::ARP => classify_arp(l3)?,
        ethertype::IPV4 => classify_ipv4(l3, off)?,
        ethertype::IPV6 => classify_ipv6(l3, off)?,
        other => FrameKind::Other { ethertype: other },
    };
    Ok(Frame {
        dst_mac: eth.dst_addr(),
        src_mac: eth.src_addr(),
        vlan: tags[0],
        inner_vlan: tags[1],
        ethertype: et,
        l3_offset,
        kind,
    })
}

fn classify_arp(l3: &[u8]) -> Result<FrameKind, Malformed> {
    if l3.len() < arp::FIXED_LEN {
        return Err(Malformed::Truncated);
    }
    let a = ArpPacket::new_unchecked(l3);
    if !a.is_ethernet_ipv4() {
        return Ok(FrameKind::Other { ethertype: ethertype::ARP });
    }
    a.check_len()?;
    Ok(FrameKind::Arp {
        op: a.operation(),
        sender_mac: a.sender_mac(),
        sender_ip: Addr::from_v4_bytes(a.sender_ip()),
        target_mac: a.target_mac(),
        target_ip: Addr::from_v4_bytes(a.target_ip()),
    })
}

/// The fixed transport header a first fragment must carry (RFC 1858 / RFC 3128).
fn min_first_fragment(proto: u8) -> usize {
    match proto {
        ip_proto::TCP => tcp::HEADER_LEN,
        ip_proto::UDP => udp::HEADER_LEN,
        ip_proto::ICMP => icmp::HEADER_LEN,
        ip_proto::ICMPV6 => icmpv6::HEADER_LEN,
        _ => 0,
    }
}

/// The one-packet fragment checks of the module doc. `proto` is the upper-layer protocol
/// when known, `data_len` the fragment data, `first_l4_len` the upper-layer bytes of a first
/// fragment.
fn check_fragment(
    proto: u8,
    offset: u16,
    more: bool,
    data_len: usize,
    first_l4_len: usize,
) -> Result<(), Malformed> {
    if usize::from(offset) * 8 + data_len > ipv4::MAX_PACKET_LEN {
        return Err(Malformed::BadFragment);
    }
    if more && (data_len == 0 || data_len % 8 != 0) {
        return Err(Malformed::BadFragment);
    }
    if offset == 0 && first_l4_len < min_first_fragment(proto) {
        return Err(Malformed::BadFragment);
    }
    if offset == 1 && proto == ip_proto::TCP {
        return Err(Malformed::BadFragment);
    }
    Ok(())
}

fn classify_ipv4(l3: &[u8], l3_offset: usize) -> Result<FrameKind, Malformed> {
    if l3.len() < ipv4::HEADER_LEN {
        return Err(Malformed::Truncated);
    }
    let ip = Ipv4Packet::new_unchecked(l3);
    if ip.version() != 4 {
        return Err(Malformed::BadVersion);
    }
    ip.check_len()?;
    let hl = ip.header_len();
    let total = usize::from(ip.total_len());
    let meta = IpMeta {
        l3_offset: u16::try_from(l3_offset).unwrap_or(u16::MAX),
        l3_len: to_u32(total),
        l4_offset: to_u32(l3_offset + hl),
        is_v4: true,
        df: ip.dont_frag(),
        ttl: ip.ttl(),
        tos: ip.dscp_ecn(),
    };
    let mut info = PacketInfo {
        src: Addr::from_v4_bytes(ip.src_addr()),
        dst: Addr::from_v4_bytes(ip.dst_addr()),
        proto: ip.protocol(),
        ..PacketInfo::default()
    };
    let payload = &l3[hl..total];
    if ip.is_fragment() {
        check_fragment(
            info.proto,
            ip.frag_offset(),
            ip.more_frags(),
            payload.len(),
            payload.len(),
        )?;
        info.fragment = true;
        return Ok(FrameKind::Ip { info, ip: meta });
    }
    classify_transport(info, meta, payload)
}

fn classify_ipv6(l3: &[u8], l3_offset: usize) -> Result<FrameKind, Malformed> {
    if l3.len() < ipv6::HEADER_LEN {
        return Err(Malformed::Truncated);
    }
    let ip = Ipv6Packet::new_unchecked(l3);
    if ip.version() != 6 {
        return Err(Malformed::BadVersion);
    }
    ip.check_len()?;
    let total = ip.total_len();
    let payload = &l3[ipv6::HEADER_LEN..total];
    let chain = ipv6::walk_chain(ip.next_header(), payload)?;
    let meta = IpMeta {
        l3_offset: u16::try_from(l3_offset).unwrap_or(u16::MAX),
        l3_len: to_u32(total),
        l4_offset: to_u32(l3_offset + ipv6::HEADER_LEN + chain.l4_offset),
        is_v4: false,
        df: true,
        ttl: ip.hop_limit(),
        tos: ip.traffic_class(),
    };
    let mut info = PacketInfo {
        src: Addr(ip.src_addr()),
        dst: Addr(ip.dst_addr()),
        proto: chain.proto,
        ..PacketInfo::default()
    };
    let l4 = payload.get(chain.l4_offset..).ok_or(Malformed::BadExtensionHeader)?;
    if let Some(f) = chain.frag {
        check_fragment(chain.proto, f.offset, f.more, f.data_len, l4.len())?;
        info.proto = f.next_header;
        info.fragment = true;
        return Ok(FrameKind::Ip { info, ip: meta });
    }
    classify_transport(info, meta, l4)
}

/// Ports and flags of an unfragmented packet; ICMP goes on to [`classify_icmp`] /
/// [`classify_icmpv6`].
fn classify_transport(
    mut info: PacketInfo,
    meta: IpMeta,
    l4: &[u8],
) -> Result<FrameKind, Malformed> {
    match info.proto {
        ip_proto::TCP => {
            let t = TcpPacket::new_checked(l4)?;
            info.sport = t.src_port();
            info.dport = t.dst_port();
            info.tcp_flags = t.flags();
        }
        ip_proto::UDP => {
            let u = UdpPacket::new_checked(l4)?;
            info.sport = u.src_port();
            info.dport = u.dst_port();
        }
        ip_proto::ICMP if meta.is_v4 => return classify_icmp(info, meta, l4),
        ip_proto::ICMPV6 if !meta.is_v4 => return classify_icmpv6(info, meta, l4),
        _ => {}
    }
    Ok(FrameKind::Ip { info, ip: meta })
}

fn classify_icmp(info: PacketInfo, meta: IpMeta, l4: &[u8]) -> Result<FrameKind, Malformed> {
    let m = IcmpPacket::new_checked(l4)?;
    match m.msg_type() {
        icmp::types::ECHO_REQUEST => Ok(FrameKind::IcmpEchoRequest { info, ip: meta }),
        t @ (icmp::types::DEST_UNREACHABLE | icmp::types::TIME_EXCEEDED) => {
            let code = m.msg_code();
            let mtu = (t == icmp::types::DEST_UNREACHABLE && code == icmp::types::CODE_FRAG_NEEDED)
                .then(|| u32::from(m.next_hop_mtu()));
            Ok(FrameKind::IcmpError {
                info: quoted_ipv4(&l4[icmp::HEADER_LEN..])?,
                ip: meta,
                from: info.src,
                icmp_type: t,
                icmp_code: code,
                mtu,
            })
        }
        _ => Ok(FrameKind::Ip { info, ip: meta }),
    }
}

fn classify_icmpv6(info: PacketInfo, meta: IpMeta, l4: &[u8]) -> Result<FrameKind, Malformed> {
    let m = Icmpv6Packet::new_checked(l4)?;
    match m.msg_type() {
        icmpv6::types::ECHO_REQUEST => Ok(FrameKind::IcmpEchoRequest { info, ip: meta }),
        t @ (icmpv6::types::DEST_UNREACHABLE
        | icmpv6::types::PACKET_TOO_BIG
        | icmpv6::types::TIME_EXCEEDED) => Ok(FrameKind::IcmpError {
            info: quoted_ipv6(&l4[icmpv6::HEADER_LEN..])?,
            ip: meta,
            from: info.src,
            icmp_type: t,
            icmp_code: m.msg_code(),
            mtu: (t == icmpv6::types::PACKET_TOO_BIG).then(|| m.mtu()),
        }),
        t @ (icmpv6::types::NEIGHBOR_SOLICIT | icmpv6::types::NEIGHBOR_ADVERT) => {
            // RFC 4861 §7.1.1 / §7.1.2 validation.
            if meta.ttl != 255 || m.msg_code() != 0 {
                return Err(Malformed::BadIcmp);
            }
            let nd = NdiscPacket::new_checked(l4)?;
            let target = Addr(nd.target_addr());
            if target.0[0] == 0xff {
                return Err(Malformed::BadIcmp);
            }
            if t == icmpv6::types::NEIGHBOR_SOLICIT {
                let source_mac = nd.link_layer_option(nd_option::SOURCE_LL_ADDR)?;
                if info.src == Addr::UNSPECIFIED && source_mac.is_some() {
                    return Err(Malformed::BadIcmp);
                }
                Ok(FrameKind::NeighborSolicitation { ip: meta, src: info.src, target, source_mac })
            } else {
                Ok(FrameKind::NeighborAdvertisement {
                    ip: meta,
                    src: info.src,
                    target,
                    target_mac: nd.link_layer_option(nd_option::TARGET_LL_ADDR)?,
                    flags: nd.flags(),
                })
            }
        }
        t if t >= 130 => Ok(FrameKind::Other { ethertype: ethertype::IPV6 }),
        _ => Ok(FrameKind::Ip { info, ip: meta }),
    }
}

/// The reversed tuple of an IPv4 packet quoted by an ICMP error: needs the header and 8
/// bytes. The quoted total length is not checked (the quote is truncated by design).
fn quoted_ipv4(q: &[u8]) -> Result<PacketInfo, Malformed> {
    if q.len() < ipv4::HEADER_LEN {
        return Err(Malformed::BadIcmp);
    }
    let ip = Ipv4Packet::new_unchecked(q);
    let hl = ip.header_len();
    if ip.version() != 4 || hl < ipv4::HEADER_LEN {
        return Err(Malformed::BadIcmp);
    }
    let l4 = q.get(hl..hl + 8).ok_or(Malformed::BadIcmp)?;
    Ok(reversed(
        Addr::from_v4_bytes(ip.src_addr()),
        Addr::from_v4_bytes(ip.dst_addr()),
        ip.protocol(),
        ip.frag_offset() != 0,
        l4,
    ))
}

/// The reversed tuple of an IPv6 packet quoted by an ICMPv6 error: needs the header, its
/// extension headers and 8 bytes.
fn quoted_ipv6(q: &[u8]) -> Result<PacketInfo, Malformed> {
    if q.len() < ipv6::HEADER_LEN {
        return Err(Malformed::BadIcmp);
    }
    let ip = Ipv6Packet::new_unchecked(q);
    if ip.version() != 6 {
        return Err(Malformed::BadIcmp);
    }
    let rest = &q[ipv6::HEADER_LEN..];
    let chain = ipv6::walk_chain(ip.next_header(), rest).map_err(|_| Malformed::BadIcmp)?;
    let later_fragment = chain.frag.is_some_and(|f| f.offset != 0);
    let l4 = rest.get(chain.l4_offset..chain.l4_offset + 8).ok_or(Malformed::BadIcmp)?;
    Ok(reversed(Addr(ip.src_addr()), Addr(ip.dst_addr()), chain.proto, later_fragment, l4))
}

/// The transport payload of the packet an ICMP error quotes (after its 8-octet UDP header),
/// as far as the quote goes: for a UDP packet a QUIC server sent, its QUIC header (QL-5).
/// `ip` is the error's own [`IpMeta`], as [`classify`] gave it; empty when the quote ends
/// before the payload starts.
pub fn quoted_udp_payload<'f>(frame: &'f [u8], ip: &IpMeta) -> &'f [u8] {
    // ICMP and ICMPv6 headers are both 8 octets before the quote.
    let end = ip.l3_range().end.min(frame.len());
    let Some(q) = frame.get(ip.l4() + icmp::HEADER_LEN..end) else { return &[] };
    let l4 = if ip.is_v4 {
        q.first().map(|b| usize::from(b & 0x0f) * 4)
    } else {
        let next = q.get(6).copied().unwrap_or(0);
        q.get(ipv6::HEADER_LEN..)
            .and_then(|rest| ipv6::walk_chain(next, rest).ok())
            .map(|chain| ipv6::HEADER_LEN + chain.l4_offset)
    };
    l4.and_then(|l4| q.get(l4 + udp::HEADER_LEN..)).unwrap_or(&[])
}

fn reversed(src: Addr, dst: Addr, proto: u8, later_fragment: bool, l4: &[u8]) -> PacketInfo {
    let ported = !later_fragment && (proto == ip_proto::TCP || proto == ip_proto::UDP);
    let (sport, dport) = if ported {
        (u16::from_be_bytes([l4[0], l4[1]]), u16::from_be_bytes([l4[2], l4[3]]))
    } else {
        (0, 0)
    };
    PacketInfo {
        src: dst,
        dst: src,
        proto,
        sport: dport,
        dport: sport,
        fragment: later_fragment,
        tcp_flags: 0,
        icmp_error: true,
    }
}
