//! Packet bytes: zero-copy views, the per-packet classifier and the header builders.
//!
//! This module owns everything that reads or writes wire formats. It never allocates, logs,
//! or panics on any input: it is called once per received frame by the data-plane worker,
//! and fed random bytes by the fuzzer (NX-2).
//!
//! # Views (the smoltcp contract)
//!
//! Every header has a view `Xxx<T: AsRef<[u8]>>` over a byte buffer ([`EthernetFrame`],
//! [`VlanHeader`], [`ArpPacket`], [`Ipv4Packet`], [`Ipv6Packet`], [`Ipv6ExtHeader`],
//! [`Ipv6FragHeader`], [`TcpPacket`], [`UdpPacket`], [`IcmpPacket`], [`Icmpv6Packet`],
//! [`NdiscPacket`]), declared with one macro (`view.rs`) so that each header module states
//! only its fields. Getters need `AsRef<[u8]>`, setters `AsMut<[u8]>`. Field offsets are
//! private, except those of IPv4, IPv6, TCP and UDP (`ipv4::field`, ...), for code that
//! patches prebuilt headers at fixed offsets (the traffic generator).
//!
//! - `new_unchecked` wraps a buffer without looking at it; accessors may then panic on a
//!   short buffer.
//! - `check_len` returns `Err(Malformed)` unless every accessor can read its field. For
//!   headers with a length field (IPv4 IHL and total length, IPv6 payload length, TCP data
//!   offset, UDP length) the check also covers the lengths the field announces.
//! - `new_checked` = `new_unchecked` + `check_len`: **after it succeeds no accessor panics**.
//!
//! Protocol numbers are plain constants ([`ethertype`], [`ip_proto`]); unknown values are
//! not errors, they are just numbers nobody handles.
//!
//! # Classification
//!
//! [`classify`] parses a whole frame once and returns a small `Copy` [`Frame`]: L2 addresses,
//! VLAN tags, the offsets of the L3 and L4 headers (so the worker rewrites without parsing
//! again), and a [`FrameKind`] saying what the frame is for: ARP, an ordinary IP packet with
//! its [`PacketInfo`], an ICMP echo request, an ICMP error (with the **reversed inner tuple**,
//! so it reaches the flow's backend), neighbour discovery, or `Other` (not for us, not an
//! error). A frame that cannot be trusted is `Err(`[`Malformed`]`)`: one variant per drop
//! counter.
//!
//! ## Decisions
//!
//! - **IPv4 header checksum: not verified** by [`classify`]. Like most load balancers we
//!   never terminate the packet: a corrupt header reaches the backend, whose kernel drops it.
//!   NICs verify it in hardware (DPDK `RTE_MBUF_F_RX_IP_CKSUM_BAD`); the worker can count
//!   that flag for free. [`Ipv4Packet::verify_checksum`] exists for callers that want it.
//!   Transport checksums are not verified either.
//! - **Ethernet padding**: frames shorter than 60 bytes are padded on the wire, so bytes after
//!   the IP packet are ignored. `l3_len` is the IP total length, never the frame length.
//! - **IPv4 total length** larger than the frame, or smaller than the header, is
//!   [`Malformed::BadLength`]; IHL < 5 is [`Malformed::BadIhl`].
//! - **IPv6** extension headers walked: hop-by-hop (first only), routing, fragment,
//!   destination options, AH; at most [`ipv6::MAX_EXT_HEADERS`] of them, else
//!   [`Malformed::BadExtensionHeader`]; a chain that runs past the payload, a second
//!   Fragment header or a hop-by-hop header that is not first is the same error. Jumbograms
//!   (payload length 0) are not supported. ESP, No-Next-Header and anything else end the walk:
//!   that number is the packet's protocol.
//! - **Fragments** (SA-6: IPv4 MF or offset != 0, or any IPv6 Fragment header, including an
//!   "atomic" one with offset 0 and M clear) are never reassembled; they come out as
//!   `FrameKind::Ip` with `fragment = true` and ports 0, whatever their protocol (a fragmented
//!   ICMP echo is not answered; a fragmented ICMP error is forwarded as a fragment). For IPv6
//!   the protocol reported is the Fragment header's Next Header, so every fragment of one
//!   datagram carries the same 3-tuple. One-packet checks, all [`Malformed::BadFragment`]:
//!   1. `offset * 8 + fragment data length > 65535` (RFC 791 / RFC 8200 §4.5);
//!   2. a non-last fragment (MF set) whose data length is 0 or not a multiple of 8;
//!   3. RFC 1858 / RFC 3128 tiny first fragment: a first fragment (offset 0) whose data
//!      (IPv6: from the upper-layer header on) is shorter than the transport protocol's
//!      fixed header: **TCP 20 bytes** (so SYN/ACK/RST flags and the data offset are always in
//!      the first fragment), UDP 8, ICMP / ICMPv6 8; other protocols have no minimum. For
//!      IPv6 the whole extension-header chain must also be in the first fragment (RFC 7112),
//!      else [`Malformed::BadExtensionHeader`];
//!   4. RFC 1858 overlap: a TCP fragment with offset 1 (8 bytes), which could only serve to
//!      overwrite the TCP flags of the first fragment.
//! - **Transport**: TCP data offset < 5 or a TCP/UDP header that does not fit in the IP payload
//!   is [`Malformed::BadTransportHeader`]; so is a UDP length < 8 or larger than the IP payload
//!   (a smaller one is accepted and the rest ignored, as Linux does).
//! - **ICMP**: an ICMP message shorter than 8 bytes, an error (IPv4 dest-unreachable any code,
//!   time-exceeded; ICMPv6 dest-unreachable, packet-too-big, time-exceeded) whose quote does
//!   not hold the inner IP header (+ IPv6 extension headers) and 8 bytes, or whose inner
//!   version is wrong, and neighbour-discovery messages failing RFC 4861 §7.1 (hop limit not
//!   255, code not 0, shorter than 24 bytes, a zero-length option, an option running past the
//!   end, a multicast target, a source link-layer option from the unspecified address) are
//!   [`Malformed::BadIcmp`]. Other ICMP types are ordinary `Ip` packets, except ICMPv6
//!   informational types >= 130 other than echo request and NS/NA (MLD, router
//!   solicitation/advertisement, redirect, ...), which are link-local control traffic: `Other`.
//!
//! # Builders
//!
//! [`build`] writes headers into caller-provided `&mut [u8]` (mbuf data): encapsulation (IPIP,
//! IP6IP6, 4in6, 6in4 and GUE variant 1), L2 rewrite, local answers in place (ARP reply, ICMP
//! and ICMPv6 echo reply, neighbour advertisement) and new packets (ARP request, neighbour
//! solicitation, ICMP fragmentation-needed, ICMPv6 packet-too-big). [`checksum`] has the
//! one's-complement arithmetic they use.

pub mod arp;
pub mod build;
pub mod checksum;
pub mod classify;
pub mod ethernet;
pub mod icmp;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod quic;
pub mod tcp;
pub mod udp;
mod view;

pub use arp::ArpPacket;
pub use build::BuildError;
pub use classify::{
    classify, classify_fast, classify_general, classify_ip6_fast, classify_ip_fast,
    quoted_udp_payload, Frame, FrameKind, IpFrame, IpMeta,
};
pub use ethernet::{EthernetFrame, VlanHeader};
pub use icmp::IcmpPacket;
pub use icmpv6::{Icmpv6Packet, NdiscPacket};
pub use ipv4::Ipv4Packet;
pub use ipv6::{Ipv6ExtHeader, Ipv6FragHeader, Ipv6Packet};
pub use tcp::TcpPacket;
pub use udp::UdpPacket;

/// A MAC address.
pub type MacAddr = [u8; 6];

/// A [`MacAddr`] that prints itself (`Display` and `Debug`) as `02:00:00:00:00:01`: the one
/// formatting of MAC addresses, for logs and messages. Ports report their address as one.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MacDisplay(pub MacAddr);

impl std::fmt::Display for MacDisplay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

impl std::fmt::Debug for MacDisplay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// The Ethernet broadcast address.
pub const BROADCAST_MAC: MacAddr = [0xff; 6];

/// Why a frame was dropped as malformed (NX-2): one variant per drop counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Malformed {
    /// The frame ends inside a fixed-size L2/L3 header (Ethernet, VLAN tag, ARP, IPv4 base
    /// header, IPv6 base header).
    Truncated,
    /// The IP version nibble does not match the ethertype.
    BadVersion,
    /// IPv4 IHL below 5.
    BadIhl,
    /// IP total length (IPv4) or 40 + payload length (IPv6) larger than the frame, or an
    /// IPv4 total length smaller than the header.
    BadLength,
    /// A fragment that fails a one-packet check (see the module doc).
    BadFragment,
    /// IPv6 extension-header chain too long, truncated, or out of order.
    BadExtensionHeader,
    /// TCP data offset < 5, a TCP/UDP header that does not fit, or a bad UDP length.
    BadTransportHeader,
    /// A truncated ICMP/ICMPv6 message, an ICMP error whose quote is unusable, or a neighbour
    /// discovery message failing RFC 4861 validation.
    BadIcmp,
}

impl Malformed {
    /// Every value, for counter tables.
    pub const ALL: [Malformed; 8] = [
        Malformed::Truncated,
        Malformed::BadVersion,
        Malformed::BadIhl,
        Malformed::BadLength,
        Malformed::BadFragment,
        Malformed::BadExtensionHeader,
        Malformed::BadTransportHeader,
        Malformed::BadIcmp,
    ];

    /// The name used in metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Malformed::Truncated => "truncated",
            Malformed::BadVersion => "bad_version",
            Malformed::BadIhl => "bad_ihl",
            Malformed::BadLength => "bad_length",
            Malformed::BadFragment => "bad_fragment",
            Malformed::BadExtensionHeader => "bad_extension_header",
            Malformed::BadTransportHeader => "bad_transport_header",
            Malformed::BadIcmp => "bad_icmp",
        }
    }

    /// The position of this value in [`Malformed::ALL`], for indexing a counter array.
    pub fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Ethertypes the classifier knows.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// 802.1Q VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service tag (QinQ outer tag).
    pub const QINQ: u16 = 0x88a8;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// LLDP.
    pub const LLDP: u16 = 0x88cc;
}

/// IP protocol / IPv6 next-header numbers the wire code knows.
pub mod ip_proto {
    /// IPv6 hop-by-hop options.
    pub const HOP_BY_HOP: u8 = 0;
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// IPv4 in IP (IPIP).
    pub const IPIP: u8 = 4;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 in IP.
    pub const IPV6: u8 = 41;
    /// IPv6 routing header.
    pub const ROUTING: u8 = 43;
    /// IPv6 fragment header.
    pub const FRAGMENT: u8 = 44;
    /// IPsec ESP.
    pub const ESP: u8 = 50;
    /// IPsec AH.
    pub const AH: u8 = 51;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// IPv6 no next header.
    pub const NO_NEXT_HEADER: u8 = 59;
    /// IPv6 destination options.
    pub const DEST_OPTS: u8 = 60;
}
