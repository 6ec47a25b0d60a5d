//! ICMP for IPv4 (RFC 792, RFC 1191).

use super::{be, Malformed};

mod field {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    pub const IDENT: usize = 4;
    pub const SEQ: usize = 6;
    pub const MTU: usize = 6;
    pub const DATA: usize = 8;
}

/// Length of the ICMP header (type, code, checksum and the 4 type-specific bytes).
pub const HEADER_LEN: usize = field::DATA;

/// ICMP message types the balancer handles.
pub mod types {
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 0;
    /// Destination unreachable.
    pub const DEST_UNREACHABLE: u8 = 3;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 8;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 11;
    /// Destination-unreachable code "fragmentation needed and DF set".
    pub const CODE_FRAG_NEEDED: u8 = 4;
}

/// A view of an ICMP message. After [`IcmpPacket::check_len`] the 8-byte header is there.
#[derive(Debug, Clone, Copy)]
pub struct IcmpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IcmpPacket<T> {
    /// Wrap a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        IcmpPacket { buffer }
    }

    /// Wrap a buffer and check it.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `BadIcmp` when shorter than 8 bytes.
    pub fn check_len(&self) -> Result<(), Malformed> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Malformed::BadIcmp)
        } else {
            Ok(())
        }
    }

    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// Message code.
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Echo identifier.
    pub fn echo_ident(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::IDENT)
    }

    /// Echo sequence number.
    pub fn echo_seq(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::SEQ)
    }

    /// Next-hop MTU of a fragmentation-needed message (RFC 1191).
    pub fn next_hop_mtu(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::MTU)
    }

    /// What follows the header (echo data, or the quoted packet of an error).
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IcmpPacket<T> {
    /// Set type and code.
    pub fn set_type_code(&mut self, msg_type: u8, code: u8) {
        let b = self.buffer.as_mut();
        b[field::TYPE] = msg_type;
        b[field::CODE] = code;
    }

    /// Set the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::CHECKSUM, v);
    }

    /// Set the 4 type-specific bytes (unused / ident+seq / MTU).
    pub fn set_rest_of_header(&mut self, v: u32) {
        be::set_u32(self.buffer.as_mut(), field::IDENT, v);
    }

    /// Fill the checksum over the whole buffer.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = !super::checksum::data(self.buffer.as_ref());
        self.set_checksum(c);
    }
}
