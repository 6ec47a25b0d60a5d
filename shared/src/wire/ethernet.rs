//! Ethernet II frames and 802.1Q / 802.1ad VLAN tags.

use super::view::view;
use super::MacAddr;

mod field {
    pub const DST: usize = 0;
    pub const SRC: usize = 6;
    pub const ETHERTYPE: usize = 12;
    pub const PAYLOAD: usize = 14;
}

/// Length of an Ethernet II header.
pub const HEADER_LEN: usize = field::PAYLOAD;

/// Minimum Ethernet frame length without the FCS; shorter frames are padded on the wire.
pub const MIN_FRAME_LEN: usize = 60;

view! {
    /// A view of an Ethernet II frame.
    EthernetFrame;
    check_len: HEADER_LEN => Truncated;
    fields {
        /// Destination MAC.
        dst_addr, set_dst_addr: MacAddr = field::DST;
        /// Source MAC.
        src_addr, set_src_addr: MacAddr = field::SRC;
        /// The ethertype (or a VLAN TPID).
        ethertype, set_ethertype: u16 = field::ETHERTYPE;
    }
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Everything after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
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

view! {
    /// A view of the 4 bytes that follow a VLAN TPID: the tag control information and the next
    /// ethertype.
    VlanHeader;
    check_len: VLAN_HEADER_LEN => Truncated;
    fields {
        /// The whole tag control information (PCP, DEI, VID).
        tci, set_tci: u16 = vlan_field::TCI;
        /// The ethertype of what follows the tag.
        ethertype, set_ethertype: u16 = vlan_field::ETHERTYPE;
    }
}

impl<T: AsRef<[u8]>> VlanHeader<T> {
    /// The VLAN id (12 bits).
    pub fn vid(&self) -> u16 {
        self.tci() & 0x0fff
    }

    /// The priority code point (3 bits).
    pub fn pcp(&self) -> u8 {
        self.buffer.as_ref()[vlan_field::TCI] >> 5
    }
}
