//! IPv6 headers (RFC 8200) and the extension-header chain.

use super::view::{view, Field};
use super::{ip_proto, Malformed};

/// Byte offsets of the base header fields.
#[allow(missing_docs)]
pub mod field {
    pub const VER_TC_FLOW: usize = 0;
    pub const LENGTH: usize = 4;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: usize = 8;
    pub const DST: usize = 24;
    pub const PAYLOAD: usize = 40;
}

/// Length of the IPv6 base header.
pub const HEADER_LEN: usize = field::PAYLOAD;

/// At most this many extension headers are walked; a longer chain is
/// [`Malformed::BadExtensionHeader`].
pub const MAX_EXT_HEADERS: usize = 8;

view! {
    /// A view of an IPv6 packet.
    ///
    /// After [`Ipv6Packet::check_len`]: `40 + payload_len() <= buffer length`.
    Ipv6Packet;
    fields {
        /// Payload length field.
        payload_len, set_payload_len: u16 = field::LENGTH;
        /// Next header (the first extension header or the upper-layer protocol).
        next_header, set_next_header: u8 = field::NXT_HDR;
        /// Hop limit.
        hop_limit, set_hop_limit: u8 = field::HOP_LIMIT;
        /// Source address.
        src_addr, set_src_addr: [u8; 16] = field::SRC;
        /// Destination address.
        dst_addr, set_dst_addr: [u8; 16] = field::DST;
    }
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// `Truncated` when shorter than 40 bytes; `BadLength` when 40 + payload length is larger
    /// than the buffer.
    pub fn check_len(&self) -> Result<(), Malformed> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        if self.total_len() > len {
            return Err(Malformed::BadLength);
        }
        Ok(())
    }

    /// Version nibble.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TC_FLOW] >> 4
    }

    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        let b = self.buffer.as_ref();
        (b[0] << 4) | (b[1] >> 4)
    }

    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        u32::get(self.buffer.as_ref(), field::VER_TC_FLOW) & 0x000f_ffff
    }

    /// 40 + payload length.
    pub fn total_len(&self) -> usize {
        HEADER_LEN + usize::from(self.payload_len())
    }

    /// The payload (extension headers included), up to the payload length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.total_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Set version 6, the traffic class and the flow label.
    pub fn set_version_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let v = (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff);
        v.set(self.buffer.as_mut(), field::VER_TC_FLOW);
    }

    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.total_len();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// A view of a generic extension header: hop-by-hop, routing, destination options (length in
/// 8-byte units, not counting the first 8) or AH (length in 4-byte units, not counting the
/// first 8).
#[derive(Debug, Clone, Copy)]
pub struct Ipv6ExtHeader<T: AsRef<[u8]>> {
    buffer: T,
    ah: bool,
}

impl<T: AsRef<[u8]>> Ipv6ExtHeader<T> {
    /// Wrap a buffer without checking it; `kind` is the next-header value that announced it.
    pub const fn new_unchecked(buffer: T, kind: u8) -> Self {
        Ipv6ExtHeader { buffer, ah: kind == ip_proto::AH }
    }

    /// Wrap a buffer and check that the whole header is in it.
    pub fn new_checked(buffer: T, kind: u8) -> Result<Self, Malformed> {
        let h = Self::new_unchecked(buffer, kind);
        h.check_len()?;
        Ok(h)
    }

    /// `BadExtensionHeader` when the buffer does not hold the whole header.
    pub fn check_len(&self) -> Result<(), Malformed> {
        let len = self.buffer.as_ref().len();
        if len < 2 || self.header_len() > len {
            return Err(Malformed::BadExtensionHeader);
        }
        Ok(())
    }

    /// Next header.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// Length of this header in bytes.
    pub fn header_len(&self) -> usize {
        let n = usize::from(self.buffer.as_ref()[1]);
        if self.ah {
            (n + 2) * 4
        } else {
            (n + 1) * 8
        }
    }

    /// The header's data (options, routing data, ...), after the first two bytes.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[2..self.header_len()]
    }
}

/// Length of the IPv6 Fragment header.
pub const FRAG_HEADER_LEN: usize = 8;

view! {
    /// A view of the IPv6 Fragment header.
    Ipv6FragHeader;
    check_len: FRAG_HEADER_LEN => BadExtensionHeader;
    fields {
        /// Next header (of the fragmentable part).
        next_header: u8 = 0;
        /// Identification.
        ident: u32 = 4;
    }
}

impl<T: AsRef<[u8]>> Ipv6FragHeader<T> {
    fn offset_and_more(&self) -> u16 {
        u16::get(self.buffer.as_ref(), 2)
    }

    /// Fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        self.offset_and_more() >> 3
    }

    /// M flag (more fragments).
    pub fn more_frags(&self) -> bool {
        self.offset_and_more() & 1 != 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6FragHeader<T> {
    /// Write a whole Fragment header.
    pub fn set(&mut self, next_header: u8, offset: u16, more: bool, ident: u32) {
        let b = self.buffer.as_mut();
        b[0] = next_header;
        b[1] = 0;
        ((offset << 3) | u16::from(more)).set(b, 2);
        ident.set(b, 4);
    }
}

/// What a Fragment header said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragInfo {
    /// Its Next Header: the protocol every fragment of the datagram reports (SA-6).
    pub next_header: u8,
    /// Offset in 8-byte units.
    pub offset: u16,
    /// M flag.
    pub more: bool,
    /// Identification.
    pub ident: u32,
    /// Bytes of fragment data (after the Fragment header, to the end of the payload).
    pub data_len: usize,
}

/// The end of an extension-header walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chain {
    /// The upper-layer protocol (for a non-first fragment: the Fragment header's Next Header,
    /// since nothing after it can be parsed).
    pub proto: u8,
    /// Offset of the upper-layer header in the walked payload.
    pub l4_offset: usize,
    /// The Fragment header, if any.
    pub frag: Option<FragInfo>,
}

/// True for the next-header values the walk steps over.
pub fn is_extension_header(nh: u8) -> bool {
    matches!(
        nh,
        ip_proto::HOP_BY_HOP
            | ip_proto::ROUTING
            | ip_proto::FRAGMENT
            | ip_proto::DEST_OPTS
            | ip_proto::AH
    )
}

/// Walk the extension headers of `payload` (what follows the base header), starting with
/// `first` (the base header's Next Header). Bounded by [`MAX_EXT_HEADERS`]; stops after a
/// Fragment header with a non-zero offset.
// Always inlined, as it was before the views were declared by `view!`: as a call (LLVM stopped
// inlining it then) it costs IPv6 classification about 3 ns a packet.
#[inline(always)]
pub fn walk_chain(first: u8, payload: &[u8]) -> Result<Chain, Malformed> {
    let mut nh = first;
    let mut off = 0usize;
    let mut frag: Option<FragInfo> = None;
    let mut count = 0usize;
    while is_extension_header(nh) {
        if count == MAX_EXT_HEADERS {
            return Err(Malformed::BadExtensionHeader);
        }
        if nh == ip_proto::HOP_BY_HOP && count != 0 {
            return Err(Malformed::BadExtensionHeader);
        }
        count += 1;
        let rest = payload.get(off..).ok_or(Malformed::BadExtensionHeader)?;
        if nh == ip_proto::FRAGMENT {
            if frag.is_some() {
                return Err(Malformed::BadExtensionHeader);
            }
            let h = Ipv6FragHeader::new_checked(rest)?;
            let info = FragInfo {
                next_header: h.next_header(),
                offset: h.frag_offset(),
                more: h.more_frags(),
                ident: h.ident(),
                data_len: rest.len() - FRAG_HEADER_LEN,
            };
            off += FRAG_HEADER_LEN;
            nh = info.next_header;
            frag = Some(info);
            if info.offset != 0 {
                break;
            }
        } else {
            let h = Ipv6ExtHeader::new_checked(rest, nh)?;
            off += h.header_len();
            nh = h.next_header();
        }
    }
    Ok(Chain { proto: nh, l4_offset: off, frag })
}
