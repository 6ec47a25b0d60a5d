//! TCP headers (RFC 9293).

use super::{be, Malformed};

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const SEQ: usize = 4;
    pub const ACK: usize = 8;
    pub const OFFSET: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WINDOW: usize = 14;
    pub const CHECKSUM: usize = 16;
    pub const URGENT: usize = 18;
    pub const OPTIONS: usize = 20;
}

/// Length of a TCP header without options.
pub const HEADER_LEN: usize = field::OPTIONS;

/// TCP flag bits (the low byte of the flags field).
pub mod flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
    /// URG.
    pub const URG: u8 = 0x20;
    /// ECE.
    pub const ECE: u8 = 0x40;
    /// CWR.
    pub const CWR: u8 = 0x80;
}

/// A view of a TCP segment. After [`TcpPacket::check_len`]:
/// `20 <= header_len() <= buffer length`.
#[derive(Debug, Clone, Copy)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Wrap a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        TcpPacket { buffer }
    }

    /// Wrap a buffer and check it (see [`TcpPacket::check_len`]).
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `BadTransportHeader` when shorter than 20 bytes, data offset < 5, or the header with
    /// its options longer than the buffer.
    pub fn check_len(&self) -> Result<(), Malformed> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Malformed::BadTransportHeader);
        }
        let hl = self.header_len();
        if hl < HEADER_LEN || hl > len {
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

    /// Sequence number.
    pub fn seq_number(&self) -> u32 {
        be::u32_at(self.buffer.as_ref(), field::SEQ)
    }

    /// Acknowledgement number.
    pub fn ack_number(&self) -> u32 {
        be::u32_at(self.buffer.as_ref(), field::ACK)
    }

    /// Header length in bytes (data offset * 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::OFFSET] >> 4) * 4
    }

    /// The flags byte ([`flags`]).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// Window.
    pub fn window(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::WINDOW)
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Urgent pointer.
    pub fn urgent(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::URGENT)
    }

    /// The options.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::OPTIONS..self.header_len()]
    }

    /// The payload (to the end of the buffer).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    /// Set the source port.
    pub fn set_src_port(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::SRC_PORT, v);
    }

    /// Set the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::DST_PORT, v);
    }

    /// Set the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::CHECKSUM, v);
    }
}
