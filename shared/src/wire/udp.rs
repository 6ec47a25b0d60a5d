//! UDP headers (RFC 768).

use super::{be, Malformed};

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
    pub const PAYLOAD: usize = 8;
}

/// Length of a UDP header.
pub const HEADER_LEN: usize = field::PAYLOAD;

/// A view of a UDP datagram. After [`UdpPacket::check_len`]:
/// `8 <= len() <= buffer length`.
#[derive(Debug, Clone, Copy)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wrap a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// Wrap a buffer and check it (see [`UdpPacket::check_len`]).
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `BadTransportHeader` when shorter than 8 bytes, or the length field is below 8 or
    /// beyond the buffer (a length shorter than the buffer is accepted, as Linux does).
    pub fn check_len(&self) -> Result<(), Malformed> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Malformed::BadTransportHeader);
        }
        let l = usize::from(self.len());
        if l < HEADER_LEN || l > len {
            return Err(Malformed::BadTransportHeader);
        }
        Ok(())
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Length field (header + payload).
    pub fn len(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::LENGTH)
    }

    /// True when the length field says there is no payload.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }

    /// Checksum field (0: none, IPv4 only).
    pub fn checksum(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The payload, up to the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Set the source port.
    pub fn set_src_port(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::SRC_PORT, v);
    }

    /// Set the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::DST_PORT, v);
    }

    /// Set the length field.
    pub fn set_len(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::LENGTH, v);
    }

    /// Set the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::CHECKSUM, v);
    }
}
