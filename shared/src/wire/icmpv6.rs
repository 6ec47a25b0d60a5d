//! ICMPv6 (RFC 4443) and neighbour discovery (RFC 4861).

use super::view::{view, Field};
use super::{MacAddr, Malformed};

mod field {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    pub const REST: usize = 4;
    pub const DATA: usize = 8;
    pub const ND_TARGET: usize = 8;
    pub const ND_OPTIONS: usize = 24;
}

/// Length of the ICMPv6 header (type, code, checksum and the 4 type-specific bytes).
pub const HEADER_LEN: usize = field::DATA;

/// Length of a neighbour solicitation/advertisement without options.
pub const ND_LEN: usize = field::ND_OPTIONS;

/// ICMPv6 message types the balancer handles.
pub mod types {
    /// Destination unreachable.
    pub const DEST_UNREACHABLE: u8 = 1;
    /// Packet too big.
    pub const PACKET_TOO_BIG: u8 = 2;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 3;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 128;
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 129;
    /// Neighbour solicitation.
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    /// Neighbour advertisement.
    pub const NEIGHBOR_ADVERT: u8 = 136;
}

/// Neighbour-discovery option types.
pub mod nd_option {
    /// Source link-layer address.
    pub const SOURCE_LL_ADDR: u8 = 1;
    /// Target link-layer address.
    pub const TARGET_LL_ADDR: u8 = 2;
}

/// Neighbour-advertisement flags (first byte after the checksum).
pub mod na_flags {
    /// Router.
    pub const ROUTER: u8 = 0x80;
    /// Solicited.
    pub const SOLICITED: u8 = 0x40;
    /// Override.
    pub const OVERRIDE: u8 = 0x20;
}

view! {
    /// A view of an ICMPv6 message. After [`Icmpv6Packet::check_len`] the 8-byte header is
    /// there.
    Icmpv6Packet;
    check_len: HEADER_LEN => BadIcmp;
    fields {
        /// Message type.
        msg_type: u8 = field::TYPE;
        /// Message code.
        msg_code: u8 = field::CODE;
        /// Checksum field.
        checksum, set_checksum: u16 = field::CHECKSUM;
        /// The 4 type-specific bytes.
        rest_of_header, set_rest_of_header: u32 = field::REST;
        /// The 4 type-specific bytes: the MTU of a packet-too-big message.
        mtu: u32 = field::REST;
        /// Echo identifier.
        echo_ident: u16 = field::REST;
        /// Echo sequence number.
        echo_seq: u16 = field::REST + 2;
    }
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    /// What follows the header (echo data, or the quoted packet of an error).
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    /// Set type and code.
    pub fn set_type_code(&mut self, msg_type: u8, code: u8) {
        let b = self.buffer.as_mut();
        b[field::TYPE] = msg_type;
        b[field::CODE] = code;
    }
}

view! {
    /// A view of a neighbour solicitation or advertisement. After [`NdiscPacket::check_len`]
    /// the 24-byte fixed part is there.
    NdiscPacket;
    check_len: ND_LEN => BadIcmp;
    fields {
        /// Message type (135 or 136).
        msg_type: u8 = field::TYPE;
        /// Message code (must be 0).
        msg_code: u8 = field::CODE;
        /// The advertisement flags byte ([`na_flags`]); reserved (0) in a solicitation.
        flags: u8 = field::REST;
        /// Target address.
        target_addr, set_target_addr: [u8; 16] = field::ND_TARGET;
    }
}

impl<T: AsRef<[u8]>> NdiscPacket<T> {
    /// The options area.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::ND_OPTIONS..]
    }

    /// The first link-layer address option of type `kind` ([`nd_option`]), validating every
    /// option on the way: `BadIcmp` for a zero length or an option past the end.
    pub fn link_layer_option(&self, kind: u8) -> Result<Option<MacAddr>, Malformed> {
        let mut opts = self.options();
        let mut found = None;
        while !opts.is_empty() {
            if opts.len() < 2 {
                return Err(Malformed::BadIcmp);
            }
            let len = usize::from(opts[1]) * 8;
            if len == 0 || len > opts.len() {
                return Err(Malformed::BadIcmp);
            }
            if opts[0] == kind && len == 8 && found.is_none() {
                found = Some(Field::get(opts, 2));
            }
            opts = &opts[len..];
        }
        Ok(found)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> NdiscPacket<T> {
    /// Set the flags byte and clear the other reserved bytes.
    pub fn set_flags(&mut self, flags: u8) {
        (u32::from(flags) << 24).set(self.buffer.as_mut(), field::REST);
    }
}
