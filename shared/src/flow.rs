//! Packets as the decision core sees them, and the two tuples made from them (SA, CT).
//!
//! A [`PacketInfo`] is the small `Copy` description the parser produces once per packet.
//! From it come the *selection tuple* (what the consistent hash chooses a backend with,
//! SA-1..SA-8) and the *tracking key* (what the connection table is keyed by, CT-1). Both are a
//! [`FlowKey`]: a fixed 40-byte layout, so hashing and key comparison are the same code for
//! every affinity, mode and address family. The selection tuple is hashed with xxh3 keyed by a
//! seed (CH-4) over an explicit little-endian byte image of the key, so every machine and
//! architecture computes the same value (instances of a fleet must agree). The tracking key is
//! hashed for the local connection table only ([`crate::conntrack::key_hash`]).

use crate::addr::Addr;
use crate::policy::{Affinity, TrackingMode};

/// IANA protocol numbers the core treats specially.
pub mod proto {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
}

/// TCP flag bits as they appear in the header's flags byte.
pub mod tcp_flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

/// What the decision core needs to know about one packet, parsed once.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct PacketInfo {
    /// Source address.
    pub src: Addr,
    /// Destination address.
    pub dst: Addr,
    /// IP protocol number (of the transport header, after IPv6 extension headers).
    pub proto: u8,
    /// TCP/UDP source port; 0 when the packet has none or it is a fragment.
    pub sport: u16,
    /// TCP/UDP destination port; 0 when the packet has none or it is a fragment.
    pub dport: u16,
    /// IPv4 MF set or offset non-zero, or an IPv6 Fragment header (SA-6).
    pub fragment: bool,
    /// The TCP flags byte (0 for other protocols).
    pub tcp_flags: u8,
    /// This describes the flow an ICMP error refers to (the embedded packet, reversed): it is
    /// looked up and hashed like that flow, but never creates or refreshes an entry.
    pub icmp_error: bool,
}

impl PacketInfo {
    /// True for an unfragmented TCP or UDP packet: the only packets with usable ports.
    pub fn has_ports(&self) -> bool {
        !self.fragment && (self.proto == proto::TCP || self.proto == proto::UDP)
    }

    /// True for an unfragmented TCP segment with SYN set and ACK clear.
    pub fn is_syn(&self) -> bool {
        !self.fragment
            && self.proto == proto::TCP
            && self.tcp_flags & tcp_flags::SYN != 0
            && self.tcp_flags & tcp_flags::ACK == 0
    }
}

/// Which fields of a [`FlowKey`] are meaningful; the others are zero.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
#[repr(u8)]
pub enum TupleKind {
    /// Source address only.
    One = 1,
    /// Source and destination addresses.
    Two = 2,
    /// Source and destination addresses and protocol.
    Three = 3,
    /// Addresses, protocol and both ports.
    Five = 5,
}

/// A selection tuple or tracking key: 40 bytes, unused fields zero.
///
/// `service` is 0 in selection tuples (the hash must not depend on this instance's local
/// ids, CH-1) and the service's id in tracking keys (two services never share an entry).
// `eq` (below) compares exactly the fields `Hash` hashes.
#[allow(clippy::derived_hash_with_manual_eq)]
#[derive(Clone, Copy, Eq, Hash, Debug, Default)]
#[repr(C)]
pub struct FlowKey {
    /// Source address (or the lower endpoint, with symmetric hashing).
    pub src: Addr,
    /// Destination address (zero for a 1-tuple).
    pub dst: Addr,
    /// Source port (zero unless 5-tuple).
    pub sport: u16,
    /// Destination port (zero unless 5-tuple).
    pub dport: u16,
    /// Protocol (zero for 1- and 2-tuples).
    pub proto: u8,
    /// The [`TupleKind`] as a number (0 only in an all-zero key).
    pub kind: u8,
    /// Service id for tracking keys, 0 for selection tuples.
    pub service: u16,
}

/// Size of [`FlowKey`] and of its byte image.
pub const FLOW_KEY_BYTES: usize = 40;

/// Where [`FlowKey::service`] sits in the byte image ([`FlowKey::to_bytes`]).
pub const FLOW_KEY_SERVICE_BYTES: std::ops::Range<usize> = 38..40;

/// Every field equal. The five small fields are compared as one 64-bit word (they are the
/// key's last eight bytes, which the compiler then loads at once): the connection table
/// compares a key per lookup, in about half the instructions of five separate compares.
impl PartialEq for FlowKey {
    #[inline]
    fn eq(&self, other: &FlowKey) -> bool {
        self.src == other.src && self.dst == other.dst && self.tail() == other.tail()
    }
}

impl FlowKey {
    /// The ports, protocol, kind and service as one word (little-endian field order).
    #[inline(always)]
    pub fn tail(&self) -> u64 {
        u64::from(self.sport)
            | u64::from(self.dport) << 16
            | u64::from(self.proto) << 32
            | u64::from(self.kind) << 40
            | u64::from(self.service) << 48
    }

    /// Build a key of the given kind from a packet, keeping only that kind's fields.
    #[inline]
    pub fn from_packet(p: &PacketInfo, kind: TupleKind) -> FlowKey {
        let mut k = FlowKey { src: p.src, kind: kind as u8, ..FlowKey::default() };
        if kind >= TupleKind::Two {
            k.dst = p.dst;
        }
        if kind >= TupleKind::Three {
            k.proto = p.proto;
        }
        if kind == TupleKind::Five {
            k.sport = p.sport;
            k.dport = p.dport;
        }
        k
    }

    /// The 5-tuple key of a packet with ports, with service id `service`: what
    /// [`tracking_key`] returns for it when its service [`tracks_five_tuple`].
    #[inline]
    pub fn five_tuple(p: &PacketInfo, service: u16) -> FlowKey {
        FlowKey {
            src: p.src,
            dst: p.dst,
            sport: p.sport,
            dport: p.dport,
            proto: p.proto,
            kind: TupleKind::Five as u8,
            service,
        }
    }

    /// Put the two endpoints in canonical order (lower (address, port) first), SA-8.
    /// A 1-tuple has one endpoint and is returned unchanged.
    #[inline]
    pub fn canonical(mut self) -> FlowKey {
        if self.kind >= TupleKind::Two as u8 && (self.dst, self.dport) < (self.src, self.sport) {
            std::mem::swap(&mut self.src, &mut self.dst);
            std::mem::swap(&mut self.sport, &mut self.dport);
        }
        self
    }

    /// The flow fields of a packet this key could have been made from (the key's addresses,
    /// ports and protocol; no flags): what the decision's selection reads of a tracked
    /// connection that has no packet at hand (FS-1).
    #[inline(always)]
    pub fn packet_info(&self) -> PacketInfo {
        PacketInfo {
            src: self.src,
            dst: self.dst,
            proto: self.proto,
            sport: self.sport,
            dport: self.dport,
            fragment: false,
            tcp_flags: 0,
            icmp_error: false,
        }
    }

    /// The key with its service id set.
    #[inline]
    pub fn with_service(mut self, service: u16) -> FlowKey {
        self.service = service;
        self
    }

    /// The explicit byte image hashed by [`FlowHasher`]: fields in declaration order,
    /// integers little-endian. Identical on every architecture.
    pub fn to_bytes(&self) -> [u8; FLOW_KEY_BYTES] {
        let mut b = [0u8; FLOW_KEY_BYTES];
        b[0..16].copy_from_slice(&self.src.0);
        b[16..32].copy_from_slice(&self.dst.0);
        b[32..34].copy_from_slice(&self.sport.to_le_bytes());
        b[34..36].copy_from_slice(&self.dport.to_le_bytes());
        b[36] = self.proto;
        b[37] = self.kind;
        b[FLOW_KEY_SERVICE_BYTES].copy_from_slice(&self.service.to_le_bytes());
        b
    }
}

/// The selection tuple of SA-1..SA-8 (service id 0).
///
/// SA-7 needs nothing special: a next-hop (prefix) rule hashes the destination address for
/// every affinity but `CLIENT_IP_NO_DESTINATION`, exactly like a VIP rule does.
pub fn selection_tuple(p: &PacketInfo, affinity: Affinity, symmetric: bool) -> FlowKey {
    let kind = match affinity {
        Affinity::None | Affinity::ClientIpPortProto => ported_kind(p.has_ports()),
        Affinity::ClientIpProto => TupleKind::Three,
        Affinity::ClientIp => TupleKind::Two,
        Affinity::ClientIpNoDestination => TupleKind::One,
    };
    let key = FlowKey::from_packet(p, kind);
    if symmetric {
        key.canonical()
    } else {
        key
    }
}

/// The tracking key of CT-1a..CT-1e for `service`.
#[inline]
pub fn tracking_key(
    p: &PacketInfo,
    mode: TrackingMode,
    affinity: Affinity,
    symmetric: bool,
    service: u16,
) -> FlowKey {
    let key = FlowKey::from_packet(p, tracking_kind(mode, affinity, p.has_ports()));
    let key = if symmetric { key.canonical() } else { key };
    key.with_service(service)
}

/// Which fields the tracking key of CT-1a..CT-1e holds, for a packet with usable ports
/// (`ported`: [`PacketInfo::has_ports`]) or without.
#[inline]
fn tracking_kind(mode: TrackingMode, affinity: Affinity, ported: bool) -> TupleKind {
    match (mode, affinity) {
        (TrackingMode::PerConnection, _)
        | (TrackingMode::PerSession, Affinity::None | Affinity::ClientIpPortProto) => {
            ported_kind(ported)
        }
        (TrackingMode::PerSession, Affinity::ClientIpProto) => TupleKind::Three,
        (TrackingMode::PerSession, Affinity::ClientIp) => TupleKind::Two,
        (TrackingMode::PerSession, Affinity::ClientIpNoDestination) => TupleKind::One,
    }
}

/// True when a service's TCP and UDP packets are tracked by their 5-tuple as received: then
/// [`tracking_key`] of such a packet is [`FlowKey::five_tuple`], and only a SYN
/// ([`PacketInfo::is_syn`]) is a new-connection SYN ([`is_new_connection_syn`]). The data
/// plane's short way for tracked flows relies on both (the snapshot keeps this per service).
pub fn tracks_five_tuple(mode: TrackingMode, affinity: Affinity, symmetric: bool) -> bool {
    !symmetric && tracking_kind(mode, affinity, true) == TupleKind::Five
}

/// CT-2: is this packet a new-connection SYN that skips the lookup and replaces any entry?
pub fn is_new_connection_syn(p: &PacketInfo, mode: TrackingMode, affinity: Affinity) -> bool {
    p.is_syn()
        && !p.icmp_error
        && (mode == TrackingMode::PerConnection
            || matches!(affinity, Affinity::None | Affinity::ClientIpPortProto))
}

/// The 5-tuple for a packet with usable ports, else the 3-tuple.
#[inline]
fn ported_kind(ported: bool) -> TupleKind {
    if ported {
        TupleKind::Five
    } else {
        TupleKind::Three
    }
}

/// Built-in hash key used when the configuration sets no `hash_seed` (CH-4): fixed, so that
/// simulations are reproducible; operators are told to set their own.
pub const DEFAULT_HASH_SEED: u64 = 0x5350_494c_4c57_4159; // "SPILLWAY"

/// Keyed flow hashing (CH-4): xxh3-64 with a seed over [`FlowKey::to_bytes`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FlowHasher {
    seed: u64,
}

impl FlowHasher {
    /// A hasher keyed by `seed`.
    pub const fn new(seed: u64) -> FlowHasher {
        FlowHasher { seed }
    }

    /// The seed.
    pub const fn seed(&self) -> u64 {
        self.seed
    }

    /// Hash a key.
    #[inline]
    pub fn hash(&self, key: &FlowKey) -> u64 {
        xxhash_rust::xxh3::xxh3_64_with_seed(&key.to_bytes(), self.seed)
    }

    /// Hash arbitrary bytes with the same key (backend identities for Maglev permutations).
    #[inline]
    pub fn hash_bytes(&self, bytes: &[u8]) -> u64 {
        xxhash_rust::xxh3::xxh3_64_with_seed(bytes, self.seed)
    }
}

impl Default for FlowHasher {
    fn default() -> Self {
        FlowHasher::new(DEFAULT_HASH_SEED)
    }
}
