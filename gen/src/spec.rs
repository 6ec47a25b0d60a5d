//! What traffic to make: [`TrafficSpec`], its limits, and why a spec is refused
//! ([`SpecError`]).

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use spillway_core::wire::ethernet;

/// The largest frame: an untagged Ethernet frame of a 1500-byte MTU, without the FCS.
pub const MAX_FRAME_LEN: u16 = 1514;
/// The smallest Ethernet frame without the FCS; shorter frames are padded to this.
pub const MIN_FRAME_LEN: u16 = ethernet::MIN_FRAME_LEN as u16;
/// The most established flows a spec may ask for.
pub const MAX_FLOWS: u32 = 10_000_000;
/// The first source port of established flows.
pub const FIRST_PORT: u16 = 1024;
/// Source ports per host (1024..=65535).
pub const PORTS_PER_HOST: u32 = 65536 - FIRST_PORT as u32;
/// Every frame carries at least this many payload bytes (room for the time stamp).
pub const MIN_PAYLOAD: usize = 8;
/// The longest [`TrafficSpec::udp_payload`]: what an IPv6 UDP frame of [`MAX_FRAME_LEN`] holds
/// besides the time stamp's room.
pub const MAX_UDP_PAYLOAD: usize = MAX_FRAME_LEN as usize - 14 - 40 - 8 - MIN_PAYLOAD;

/// In which order established flows are used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Uniformly at random (with the spec's seeded generator).
    #[default]
    Random,
    /// Round robin: flow 0, 1, ..., flows - 1, 0, ...
    Sequential,
}

impl FromStr for Order {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "random" => Ok(Order::Random),
            "sequential" | "seq" | "round-robin" => Ok(Order::Sequential),
            _ => Err(format!("'{s}' is not an order (random or sequential)")),
        }
    }
}

impl fmt::Display for Order {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Order::Random => "random",
            Order::Sequential => "sequential",
        })
    }
}

/// What traffic to generate. `Default` gives 1024 established IPv4 TCP flows of 64-byte
/// frames from 198.18.128.0/17 to 198.18.0.100:80.
#[derive(Debug, Clone, PartialEq)]
pub struct TrafficSpec {
    /// Distinct established flows, `1..=10_000_000`.
    pub flows: u32,
    /// Share (0..=1) of packets that are IPv6.
    pub ipv6_share: f64,
    /// Share (0..=1) of packets that are UDP; the rest are TCP.
    pub udp_share: f64,
    /// Share (0..=1) of packets that open a new connection: a TCP SYN (or a first UDP
    /// packet) from a fresh random source that no established flow uses.
    pub syn_share: f64,
    /// Share (0..=1) of IPv4 packets sent as two fragments (the first with MF set).
    pub fragment_share: f64,
    /// Ethernet frame length without the FCS. Raised to 60 and to what each kind's headers
    /// plus an 8-byte payload need (IPv4 TCP 62, IPv6 UDP 70, IPv6 TCP 82); at most 1514.
    pub frame_len: u16,
    /// The IPv4 client prefix the sources come from (host bits are ignored).
    pub src_v4: (Ipv4Addr, u8),
    /// The IPv6 client prefix the sources come from (host bits are ignored).
    pub src_v6: (Ipv6Addr, u8),
    /// The IPv4 destination (VIP).
    pub dst_v4: Ipv4Addr,
    /// The IPv6 destination (VIP).
    pub dst_v6: Ipv6Addr,
    /// The destination port.
    pub dst_port: u16,
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC (the balancer's port, or the router in front of it).
    pub dst_mac: [u8; 6],
    /// Which established flow comes next.
    pub order: Order,
    /// Seed of the generator: the same spec gives the same bytes.
    pub seed: u64,
    /// Write the time stamp given to [`FrameFactory::next_frame`](crate::FrameFactory::next_frame)
    /// as 8 little-endian bytes at the end of the L4 payload (for latency measurement); else the
    /// payload is all zero.
    pub stamp: bool,
    /// The first octets of every UDP packet's payload (the rest zero, the stamp at the end):
    /// for example a QUIC short header whose destination connection ID a QUIC-LB service
    /// routes by. Empty by default; at most [`MAX_UDP_PAYLOAD`] octets.
    pub udp_payload: Vec<u8>,
}

impl Default for TrafficSpec {
    fn default() -> Self {
        TrafficSpec {
            flows: 1024,
            ipv6_share: 0.0,
            udp_share: 0.0,
            syn_share: 0.0,
            fragment_share: 0.0,
            frame_len: 64,
            src_v4: (Ipv4Addr::new(198, 18, 128, 0), 17),
            src_v6: (Ipv6Addr::new(0xfd00, 0, 0, 1, 0, 0, 0, 0), 64),
            dst_v4: Ipv4Addr::new(198, 18, 0, 100),
            dst_v6: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x100),
            dst_port: 80,
            src_mac: [0x02, 0, 0, 0, 0, 0x01],
            dst_mac: [0x02, 0, 0, 0, 0, 0x02],
            order: Order::Random,
            seed: 1,
            stamp: false,
            udp_payload: Vec::new(),
        }
    }
}

/// A [`TrafficSpec`] value is out of range. Every message starts with the field's name.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    /// `flows` is 0 or above [`MAX_FLOWS`].
    #[error("flows: {0} is out of range (1..=10000000)")]
    Flows(u32),
    /// A share is not a number between 0 and 1.
    #[error("{field}: {value} is not a share between 0 and 1")]
    Share {
        /// `ipv6_share`, `udp_share`, `syn_share` or `fragment_share`.
        field: &'static str,
        /// The value given.
        value: f64,
    },
    /// `frame_len` is above [`MAX_FRAME_LEN`].
    #[error("frame_len: {0} bytes is above 1514, the largest untagged Ethernet frame without FCS")]
    FrameLen(u16),
    /// A source prefix length is longer than the address.
    #[error("{field}: prefix length /{len} is longer than /{max}")]
    PrefixLen {
        /// `src_v4` or `src_v6`.
        field: &'static str,
        /// The length given.
        len: u8,
        /// 32 or 128.
        max: u8,
    },
    /// A source prefix is too small for the flows (or leaves no room for new connections).
    #[error(
        "{field}: {prefix} has {hosts} usable address(es) x 64512 ports = {capacity} sources, \
         {need}"
    )]
    PrefixTooSmall {
        /// `src_v4` or `src_v6`.
        field: &'static str,
        /// The prefix, as `addr/len`.
        prefix: String,
        /// Usable addresses in the prefix.
        hosts: u64,
        /// `hosts * 64512`.
        capacity: u128,
        /// What did not fit.
        need: String,
    },
    /// `dst_port` is 0.
    #[error("dst_port: 0 is not a usable TCP/UDP port")]
    DstPort,
    /// `udp_payload` is longer than [`MAX_UDP_PAYLOAD`].
    #[error("udp_payload: {0} octets is above 1444, what the largest IPv6 UDP frame holds")]
    UdpPayload(usize),
}

impl SpecError {
    /// The [`TrafficSpec`] field the error is about.
    pub fn field(&self) -> &'static str {
        match self {
            SpecError::Flows(_) => "flows",
            SpecError::Share { field, .. }
            | SpecError::PrefixLen { field, .. }
            | SpecError::PrefixTooSmall { field, .. } => field,
            SpecError::FrameLen(_) => "frame_len",
            SpecError::DstPort => "dst_port",
            SpecError::UdpPayload(_) => "udp_payload",
        }
    }
}

/// A share (0..=1) as a threshold out of 65536 for 16-bit random draws.
pub(crate) fn share(field: &'static str, value: f64) -> Result<u32, SpecError> {
    if !(0.0..=1.0).contains(&value) {
        return Err(SpecError::Share { field, value });
    }
    Ok((value * 65536.0).round() as u32)
}
