//! ARP for Ethernet and IPv4 (RFC 826). Other hardware or protocol types are not ours.

use super::view::{view, Field};
use super::MacAddr;

mod field {
    pub const HTYPE: usize = 0;
    pub const PTYPE: usize = 2;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: usize = 6;
    pub const SHA: usize = 8;
    pub const SPA: usize = 14;
    pub const THA: usize = 18;
    pub const TPA: usize = 24;
    pub const END: usize = 28;
}

/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = field::END;

/// Length of the fixed part that says which hardware and protocol types follow.
pub const FIXED_LEN: usize = 8;

/// ARP operation codes.
pub mod op {
    /// Request (who-has).
    pub const REQUEST: u16 = 1;
    /// Reply (is-at).
    pub const REPLY: u16 = 2;
}

/// Hardware type Ethernet.
pub const HTYPE_ETHERNET: u16 = 1;

view! {
    /// A view of an Ethernet/IPv4 ARP packet.
    ArpPacket;
    check_len: PACKET_LEN => Truncated;
    fields {
        /// Hardware type.
        hardware_type: u16 = field::HTYPE;
        /// Protocol type (an ethertype).
        protocol_type: u16 = field::PTYPE;
        /// Hardware address length.
        hardware_len: u8 = field::HLEN;
        /// Protocol address length.
        protocol_len: u8 = field::PLEN;
        /// Operation ([`op`]).
        operation, set_operation: u16 = field::OPER;
        /// Sender hardware address.
        sender_mac, set_sender_mac: MacAddr = field::SHA;
        /// Sender protocol address.
        sender_ip, set_sender_ip: [u8; 4] = field::SPA;
        /// Target hardware address.
        target_mac, set_target_mac: MacAddr = field::THA;
        /// Target protocol address.
        target_ip, set_target_ip: [u8; 4] = field::TPA;
    }
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// True when the hardware and protocol types are Ethernet (6-byte) and IPv4 (4-byte).
    pub fn is_ethernet_ipv4(&self) -> bool {
        self.hardware_type() == HTYPE_ETHERNET
            && self.protocol_type() == super::ethertype::IPV4
            && self.hardware_len() == 6
            && self.protocol_len() == 4
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// Write the fixed part for Ethernet/IPv4 and the operation.
    pub fn set_ethernet_ipv4(&mut self, operation: u16) {
        let b = self.buffer.as_mut();
        HTYPE_ETHERNET.set(b, field::HTYPE);
        super::ethertype::IPV4.set(b, field::PTYPE);
        b[field::HLEN] = 6;
        b[field::PLEN] = 4;
        operation.set(b, field::OPER);
    }
}
