//! TCP headers (RFC 9293).

use super::view::{check_announced, view};
use super::Malformed;

/// Byte offsets of the header fields.
#[allow(missing_docs)]
pub mod field {
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

view! {
    /// A view of a TCP segment. After [`TcpPacket::check_len`]:
    /// `20 <= header_len() <= buffer length`.
    TcpPacket;
    fields {
        /// Source port.
        src_port, set_src_port: u16 = field::SRC_PORT;
        /// Destination port.
        dst_port, set_dst_port: u16 = field::DST_PORT;
        /// Sequence number.
        seq_number, set_seq_number: u32 = field::SEQ;
        /// Acknowledgement number.
        ack_number, set_ack_number: u32 = field::ACK;
        /// The flags byte ([`flags`]).
        flags, set_flags: u8 = field::FLAGS;
        /// Window.
        window, set_window: u16 = field::WINDOW;
        /// Checksum field.
        checksum, set_checksum: u16 = field::CHECKSUM;
        /// Urgent pointer.
        urgent: u16 = field::URGENT;
    }
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// `BadTransportHeader` when shorter than 20 bytes, data offset < 5, or the header with
    /// its options longer than the buffer.
    pub fn check_len(&self) -> Result<(), Malformed> {
        let len = self.buffer.as_ref().len();
        check_announced(len, HEADER_LEN, || self.header_len(), Malformed::BadTransportHeader)
    }

    /// Header length in bytes (data offset * 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::OFFSET] >> 4) * 4
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
    /// Set the header length in bytes (a multiple of 4, 20..=60), clearing the reserved bits.
    pub fn set_header_len(&mut self, header_len: usize) {
        let offset = u8::try_from(header_len / 4).unwrap_or(5) & 0x0f;
        self.buffer.as_mut()[field::OFFSET] = offset << 4;
    }
}
