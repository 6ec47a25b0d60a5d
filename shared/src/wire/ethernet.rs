//! Ethernet II frames and 802.1Q / 802.1ad VLAN tags.

use super::{be, MacAddr, Malformed};

mod field {
    use core::ops::Range;
    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    pub const ETHERTYPE: usize = 12;
    pub const PAYLOAD: usize = 14;
}

/// Length of an Ethernet II header.
pub const HEADER_LEN: usize = field::PAYLOAD;

/// Minimum Ethernet frame length without the FCS; shorter frames are padded on the wire.
pub const MIN_FRAME_LEN: usize = 60;

/// A view of an Ethernet II frame.
#[derive(Debug, Clone, Copy)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wrap a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Wrap a buffer and check that every accessor can read its field.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// `Err(Truncated)` when the buffer is shorter than the header.
    pub fn check_len(&self) -> Result<(), Malformed> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Malformed::Truncated)
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination MAC.
    pub fn dst_addr(&self) -> MacAddr {
        be::array(self.buffer.as_ref(), field::DST.start)
    }

    /// Source MAC.
    pub fn src_addr(&self) -> MacAddr {
        be::array(self.buffer.as_ref(), field::SRC.start)
    }

    /// The ethertype (or a VLAN TPID).
    pub fn ethertype(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::ETHERTYPE)
    }

    /// Everything after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Set the destination MAC.
    pub fn set_dst_addr(&mut self, mac: MacAddr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&mac);
    }

    /// Set the source MAC.
    pub fn set_src_addr(&mut self, mac: MacAddr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&mac);
    }

    /// Set the ethertype.
    pub fn set_ethertype(&mut self, ethertype: u16) {
        be::set_u16(self.buffer.as_mut(), field::ETHERTYPE, ethertype);
    }

    /// Everything after the header, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

mod vlan_field {
    pub const TCI: usize = 0;
    pub const ETHERTYPE: usize = 2;
    pub const PAYLOAD: usize = 4;
}

/// Length of a VLAN tag (after the TPID, which is the previous header's ethertype).
pub const VLAN_HEADER_LEN: usize = vlan_field::PAYLOAD;

/// A view of the 4 bytes that follow a VLAN TPID: the tag control information and the next
/// ethertype.
#[derive(Debug, Clone, Copy)]
pub struct VlanHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VlanHeader<T> {
    /// Wrap a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        VlanHeader { buffer }
    }

    /// Wrap a buffer and check that every accessor can read its field.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }

    /// `Err(Truncated)` when the buffer is shorter than the tag.
    pub fn check_len(&self) -> Result<(), Malformed> {
        if self.buffer.as_ref().len() < VLAN_HEADER_LEN {
            Err(Malformed::Truncated)
        } else {
            Ok(())
        }
    }

    /// The whole tag control information (PCP, DEI, VID).
    pub fn tci(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), vlan_field::TCI)
    }

    /// The VLAN id (12 bits).
    pub fn vid(&self) -> u16 {
        self.tci() & 0x0fff
    }

    /// The priority code point (3 bits).
    pub fn pcp(&self) -> u8 {
        self.buffer.as_ref()[vlan_field::TCI] >> 5
    }

    /// The ethertype of what follows the tag.
    pub fn ethertype(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), vlan_field::ETHERTYPE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VlanHeader<T> {
    /// Set the tag control information.
    pub fn set_tci(&mut self, tci: u16) {
        be::set_u16(self.buffer.as_mut(), vlan_field::TCI, tci);
    }

    /// Set the inner ethertype.
    pub fn set_ethertype(&mut self, ethertype: u16) {
        be::set_u16(self.buffer.as_mut(), vlan_field::ETHERTYPE, ethertype);
    }
}
