//! The node: this balancer's own addresses on the data network, and where a destination's
//! next hop is (on-link, or the gateway of its family). The path answers for these addresses
//! and the neighbour resolver resolves the next hops they imply.

use spillway_core::addr::{Addr, Prefix};
use spillway_core::wire::MacAddr;

/// The node's own addresses and link facts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node {
    /// The port's MAC.
    pub mac: MacAddr,
    /// IPv4 address and its on-link prefix.
    pub ipv4: Option<(Addr, Prefix)>,
    /// IPv6 address and its on-link prefix.
    pub ipv6: Option<(Addr, Prefix)>,
    /// Next hop for IPv4 destinations off the node's subnet.
    pub gateway_v4: Option<Addr>,
    /// Next hop for IPv6 destinations off the node's subnet.
    pub gateway_v6: Option<Addr>,
    /// Egress MTU (IP bytes).
    pub mtu: u32,
}

impl Node {
    fn family(&self, a: &Addr) -> Option<(Addr, Prefix)> {
        if a.is_v4() {
            self.ipv4
        } else {
            self.ipv6
        }
    }

    /// True for one of the node's own addresses.
    #[inline]
    pub fn owns(&self, a: &Addr) -> bool {
        self.family(a).is_some_and(|(own, _)| own == *a)
    }

    /// The node's address of `dst`'s family (outer source, ICMP source).
    #[inline]
    pub fn source_for(&self, dst: &Addr) -> Option<Addr> {
        self.family(dst).map(|(own, _)| own)
    }

    /// `dst` itself when on-link, else the gateway of its family.
    #[inline]
    pub fn next_hop(&self, dst: &Addr) -> Option<Addr> {
        match self.family(dst) {
            Some((_, net)) if net.contains(*dst) => Some(*dst),
            _ if dst.is_v4() => self.gateway_v4,
            _ => self.gateway_v6,
        }
    }
}
