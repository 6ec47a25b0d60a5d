//! ICMP for IPv4 (RFC 792, RFC 1191).

use super::view::view;

mod field {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    pub const REST: usize = 4;
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

view! {
    /// A view of an ICMP message. After [`IcmpPacket::check_len`] the 8-byte header is there.
    IcmpPacket;
    check_len: HEADER_LEN => BadIcmp;
    fields {
        /// Message type.
        msg_type: u8 = field::TYPE;
        /// Message code.
        msg_code: u8 = field::CODE;
        /// Checksum field.
        checksum, set_checksum: u16 = field::CHECKSUM;
        /// Echo identifier.
        echo_ident: u16 = field::IDENT;
        /// Echo sequence number.
        echo_seq: u16 = field::SEQ;
        /// Next-hop MTU of a fragmentation-needed message (RFC 1191).
        next_hop_mtu: u16 = field::MTU;
        /// The 4 type-specific bytes (unused / ident+seq / MTU).
        rest_of_header, set_rest_of_header: u32 = field::REST;
    }
}

impl<T: AsRef<[u8]>> IcmpPacket<T> {
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

    /// Fill the checksum over the whole buffer.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = !super::checksum::data(self.buffer.as_ref());
        self.set_checksum(c);
    }
}
