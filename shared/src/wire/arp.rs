//! ARP for Ethernet and IPv4 (RFC 826). Other hardware or protocol types are not ours.

use super::{be, MacAddr, Malformed};

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

/// A view of an Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Wrap a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        ArpPacket { buffer }
    }

    /// Wrap a buffer and check that every accessor can read its field.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Err(Truncated)` when the buffer is shorter than an Ethernet/IPv4 ARP packet.
    pub fn check_len(&self) -> Result<(), Malformed> {
        if self.buffer.as_ref().len() < PACKET_LEN {
            Err(Malformed::Truncated)
        } else {
            Ok(())
        }
    }

    /// True when the hardware and protocol types are Ethernet (6-byte) and IPv4 (4-byte).
    pub fn is_ethernet_ipv4(&self) -> bool {
        self.hardware_type() == HTYPE_ETHERNET
            && self.protocol_type() == super::ethertype::IPV4
            && self.hardware_len() == 6
            && self.protocol_len() == 4
    }

    /// Hardware type.
    pub fn hardware_type(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::HTYPE)
    }

    /// Protocol type (an ethertype).
    pub fn protocol_type(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::PTYPE)
    }

    /// Hardware address length.
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }

    /// Protocol address length.
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }

    /// Operation ([`op`]).
    pub fn operation(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::OPER)
    }

    /// Sender hardware address.
    pub fn sender_mac(&self) -> MacAddr {
        be::array(self.buffer.as_ref(), field::SHA)
    }

    /// Sender protocol address.
    pub fn sender_ip(&self) -> [u8; 4] {
        be::array(self.buffer.as_ref(), field::SPA)
    }

    /// Target hardware address.
    pub fn target_mac(&self) -> MacAddr {
        be::array(self.buffer.as_ref(), field::THA)
    }

    /// Target protocol address.
    pub fn target_ip(&self) -> [u8; 4] {
        be::array(self.buffer.as_ref(), field::TPA)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// Write the fixed part for Ethernet/IPv4 and the operation.
    pub fn set_ethernet_ipv4(&mut self, operation: u16) {
        let b = self.buffer.as_mut();
        be::set_u16(b, field::HTYPE, HTYPE_ETHERNET);
        be::set_u16(b, field::PTYPE, super::ethertype::IPV4);
        b[field::HLEN] = 6;
        b[field::PLEN] = 4;
        be::set_u16(b, field::OPER, operation);
    }

    /// Set the operation.
    pub fn set_operation(&mut self, operation: u16) {
        be::set_u16(self.buffer.as_mut(), field::OPER, operation);
    }

    /// Set the sender hardware address.
    pub fn set_sender_mac(&mut self, mac: MacAddr) {
        self.buffer.as_mut()[field::SHA..field::SHA + 6].copy_from_slice(&mac);
    }

    /// Set the sender protocol address.
    pub fn set_sender_ip(&mut self, ip: [u8; 4]) {
        self.buffer.as_mut()[field::SPA..field::SPA + 4].copy_from_slice(&ip);
    }

    /// Set the target hardware address.
    pub fn set_target_mac(&mut self, mac: MacAddr) {
        self.buffer.as_mut()[field::THA..field::THA + 6].copy_from_slice(&mac);
    }

    /// Set the target protocol address.
    pub fn set_target_ip(&mut self, ip: [u8; 4]) {
        self.buffer.as_mut()[field::TPA..field::TPA + 4].copy_from_slice(&ip);
    }
}
