//! UDP headers (RFC 768).

use super::view::{check_announced, view};
use super::Malformed;

/// Byte offsets of the header fields.
#[allow(missing_docs)]
pub mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
    pub const PAYLOAD: usize = 8;
}

/// Length of a UDP header.
pub const HEADER_LEN: usize = field::PAYLOAD;

view! {
    /// A view of a UDP datagram. After [`UdpPacket::check_len`]:
    /// `8 <= len() <= buffer length`.
    UdpPacket;
    fields {
        /// Source port.
        src_port, set_src_port: u16 = field::SRC_PORT;
        /// Destination port.
        dst_port, set_dst_port: u16 = field::DST_PORT;
        /// Length field (header + payload).
        len, set_len: u16 = field::LENGTH;
        /// Checksum field (0: none, IPv4 only).
        checksum, set_checksum: u16 = field::CHECKSUM;
    }
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// `BadTransportHeader` when shorter than 8 bytes, or the length field is below 8 or
    /// beyond the buffer (a length shorter than the buffer is accepted, as Linux does).
    pub fn check_len(&self) -> Result<(), Malformed> {
        let len = self.buffer.as_ref().len();
        check_announced(len, HEADER_LEN, || usize::from(self.len()), Malformed::BadTransportHeader)
    }

    /// True when the length field says there is no payload.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }

    /// The payload, up to the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }
}
