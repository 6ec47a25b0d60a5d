//! IPv4 headers (RFC 791), options and fragments included.

use super::view::{view, Field};
use super::{checksum, Malformed};

/// Byte offsets of the header fields.
#[allow(missing_docs)]
pub mod field {
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLG_OFF: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
    pub const OPTIONS: usize = 20;
}

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = field::OPTIONS;

/// The largest IPv4 datagram (and the largest reassembled fragment end).
pub const MAX_PACKET_LEN: usize = 65535;

const DF: u16 = 0x4000;
const MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

view! {
    /// A view of an IPv4 packet.
    ///
    /// After [`Ipv4Packet::check_len`]: `20 <= header_len() <= total_len() <= buffer length`,
    /// so [`Ipv4Packet::options`] and [`Ipv4Packet::payload`] cannot panic. The version nibble
    /// is not checked (the classifier does that, to count it separately).
    Ipv4Packet;
    fields {
        /// The DSCP/ECN byte (old TOS).
        dscp_ecn, set_dscp_ecn: u8 = field::DSCP_ECN;
        /// Total length field.
        total_len, set_total_len: u16 = field::LENGTH;
        /// Identification.
        ident, set_ident: u16 = field::IDENT;
        /// The flags (DF, MF) and fragment offset word; see [`Ipv4Packet::set_frag`].
        flags_and_offset: u16 = field::FLG_OFF;
        /// Time to live.
        ttl, set_ttl: u8 = field::TTL;
        /// Protocol of the payload.
        protocol, set_protocol: u8 = field::PROTOCOL;
        /// Header checksum field.
        checksum, set_checksum: u16 = field::CHECKSUM;
        /// Source address.
        src_addr, set_src_addr: [u8; 4] = field::SRC;
        /// Destination address.
        dst_addr, set_dst_addr: [u8; 4] = field::DST;
    }
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// `Truncated` when shorter than 20 bytes; `BadIhl` when IHL < 5; `BadLength` when the
    /// total length is smaller than the header or larger than the buffer.
    pub fn check_len(&self) -> Result<(), Malformed> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        let header_len = self.header_len();
        if header_len < HEADER_LEN {
            return Err(Malformed::BadIhl);
        }
        let total = usize::from(self.total_len());
        if total < header_len || total > len {
            return Err(Malformed::BadLength);
        }
        Ok(())
    }

    /// Version nibble.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL * 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// Don't Fragment.
    pub fn dont_frag(&self) -> bool {
        self.flags_and_offset() & DF != 0
    }

    /// More Fragments.
    pub fn more_frags(&self) -> bool {
        self.flags_and_offset() & MF != 0
    }

    /// Fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        self.flags_and_offset() & OFFSET_MASK
    }

    /// True for any fragment (MF set or offset non-zero), SA-6.
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }

    /// True when the header checksum is right.
    pub fn verify_checksum(&self) -> bool {
        checksum::data(&self.buffer.as_ref()[..self.header_len()]) == 0xffff
    }

    /// The options (between the fixed header and the payload).
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::OPTIONS..self.header_len()]
    }

    /// The payload, up to the total length (Ethernet padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Set version 4 and the header length in bytes (a multiple of 4, 20..=60).
    pub fn set_version_and_header_len(&mut self, header_len: usize) {
        let ihl = u8::try_from(header_len / 4).unwrap_or(5) & 0x0f;
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | ihl;
    }

    /// Set DF, MF and the fragment offset (8-byte units).
    pub fn set_frag(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        let mut v = offset & OFFSET_MASK;
        if dont_frag {
            v |= DF;
        }
        if more_frags {
            v |= MF;
        }
        v.set(self.buffer.as_mut(), field::FLG_OFF);
    }

    /// Compute and write the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len();
        let c = !checksum::data(&self.buffer.as_ref()[..hl]);
        self.set_checksum(c);
    }

    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, tl) = (self.header_len(), usize::from(self.total_len()));
        &mut self.buffer.as_mut()[hl..tl]
    }
}
