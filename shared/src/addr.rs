//! Addresses and prefixes in one fixed-size form.
//!
//! Every address the decision core handles is an [`Addr`]: 16 bytes, IPv4 stored v4-mapped
//! (`::ffff:a.b.c.d`). One representation means one key layout for conntrack and hashing,
//! whatever the family. Conversions to and from `std::net` types are lossless.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IPv4 or IPv6 address in 16 bytes (IPv4 is v4-mapped).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Addr(pub [u8; 16]);

const V4_MAPPED_PREFIX: [u8; 12] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];

impl Addr {
    /// The all-zero address (`::`).
    pub const UNSPECIFIED: Addr = Addr([0; 16]);

    /// An IPv4 address from its four octets.
    pub const fn v4(a: u8, b: u8, c: u8, d: u8) -> Addr {
        Addr::from_v4_bytes([a, b, c, d])
    }

    /// An IPv4 address from its 4 network-order bytes.
    ///
    /// Built as one 128-bit value, so the address is written with whole-word stores: the
    /// packet path reads it back in 8-byte words (hashes, comparisons), and a word read over
    /// bytes stored one by one stalls the load until they all retire (no store forwarding).
    #[inline]
    pub const fn from_v4_bytes(b: [u8; 4]) -> Addr {
        Addr(((0xffff_u128 << 32) | u32::from_be_bytes(b) as u128).to_be_bytes())
    }

    /// True for an IPv4 (v4-mapped) address.
    pub fn is_v4(&self) -> bool {
        self.0[..12] == V4_MAPPED_PREFIX
    }

    /// The 4 IPv4 bytes, if this is an IPv4 address.
    pub fn v4_bytes(&self) -> Option<[u8; 4]> {
        self.is_v4().then(|| [self.0[12], self.0[13], self.0[14], self.0[15]])
    }

    /// Back to a `std::net::IpAddr`.
    pub fn to_ip(&self) -> IpAddr {
        match self.v4_bytes() {
            Some(b) => IpAddr::V4(Ipv4Addr::from(b)),
            None => IpAddr::V6(Ipv6Addr::from(self.0)),
        }
    }

    /// True for an IPv6 link-local unicast address (`fe80::/10`).
    pub fn is_link_local_v6(&self) -> bool {
        self.0[0] == 0xfe && self.0[1] & 0xc0 == 0x80
    }

    /// Width in bits of this address's family (32 or 128).
    pub fn family_bits(&self) -> u8 {
        if self.is_v4() {
            32
        } else {
            128
        }
    }
}

impl From<IpAddr> for Addr {
    fn from(ip: IpAddr) -> Addr {
        match ip {
            IpAddr::V4(v4) => Addr::from_v4_bytes(v4.octets()),
            IpAddr::V6(v6) => Addr(v6.octets()),
        }
    }
}

impl From<Ipv4Addr> for Addr {
    fn from(ip: Ipv4Addr) -> Addr {
        Addr::from_v4_bytes(ip.octets())
    }
}

impl From<Ipv6Addr> for Addr {
    fn from(ip: Ipv6Addr) -> Addr {
        Addr(ip.octets())
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.to_ip().fmt(f)
    }
}

impl fmt::Debug for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.to_ip().fmt(f)
    }
}

impl FromStr for Addr {
    type Err = std::net::AddrParseError;
    fn from_str(s: &str) -> Result<Addr, Self::Err> {
        s.parse::<IpAddr>().map(Addr::from)
    }
}

/// An address prefix (`198.18.0.0/15`, `fd00::/8`). The length counts bits of the address's
/// own family (0..=32 for IPv4, 0..=128 for IPv6); bits past it are zero.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Prefix {
    addr: Addr,
    len: u8,
}

/// Why a prefix string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// The address part is not an IP address.
    #[error("`{0}` is not an IP address")]
    BadAddress(String),
    /// The length is missing, not a number, or too long for the family.
    #[error("prefix length `{0}` is not valid for this address family")]
    BadLength(String),
    /// Bits are set past the prefix length.
    #[error("`{0}` has host bits set past the prefix length")]
    HostBitsSet(String),
}

impl Prefix {
    /// A prefix, or an error when `len` is too long or host bits are set.
    pub fn new(addr: Addr, len: u8) -> Result<Prefix, PrefixError> {
        if len > addr.family_bits() {
            return Err(PrefixError::BadLength(len.to_string()));
        }
        let p = Prefix { addr: mask(addr, len), len };
        if p.addr != addr {
            return Err(PrefixError::HostBitsSet(format!("{addr}/{len}")));
        }
        Ok(p)
    }

    /// The prefix that covers exactly one address (/32 or /128).
    pub fn host(addr: Addr) -> Prefix {
        Prefix { addr, len: addr.family_bits() }
    }

    /// The network address.
    pub fn addr(&self) -> Addr {
        self.addr
    }

    /// The length in bits of the address's own family.
    pub fn len(&self) -> u8 {
        self.len
    }

    /// True for a zero-length prefix (covers the whole family).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when `a` is of the same family and inside this prefix.
    pub fn contains(&self, a: Addr) -> bool {
        a.is_v4() == self.addr.is_v4() && mask(a, self.len) == self.addr
    }

    /// True when the two prefixes share at least one address.
    pub fn overlaps(&self, other: &Prefix) -> bool {
        let len = self.len.min(other.len);
        self.addr.is_v4() == other.addr.is_v4() && mask(self.addr, len) == mask(other.addr, len)
    }
}

/// Keep the first `len` bits of `a`'s own family, zero the rest.
pub fn mask(a: Addr, len: u8) -> Addr {
    let total = if a.is_v4() { 96 + u32::from(len) } else { u32::from(len) };
    let mut out = a.0;
    for (i, byte) in out.iter_mut().enumerate() {
        let bit0 = u32::try_from(i).unwrap_or(u32::MAX).saturating_mul(8);
        if bit0 >= total {
            *byte = 0;
        } else if bit0 + 8 > total {
            let keep = total - bit0;
            *byte &= 0xffu8 << (8 - keep);
        }
    }
    out.into()
}

impl From<[u8; 16]> for Addr {
    fn from(b: [u8; 16]) -> Addr {
        Addr(b)
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl fmt::Debug for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for Prefix {
    type Err = PrefixError;
    /// `a.b.c.d/len` or `x::y/len`; a bare address is a host prefix.
    fn from_str(s: &str) -> Result<Prefix, PrefixError> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: Addr = a.parse().map_err(|_| PrefixError::BadAddress(a.to_string()))?;
        match l {
            None => Ok(Prefix::host(addr)),
            Some(l) => {
                let len: u8 = l.parse().map_err(|_| PrefixError::BadLength(l.to_string()))?;
                Prefix::new(addr, len)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v4_is_mapped_and_round_trips() {
        let a: Addr = "198.18.0.1".parse().unwrap();
        assert!(a.is_v4());
        assert_eq!(a.v4_bytes(), Some([198, 18, 0, 1]));
        assert_eq!(a.to_string(), "198.18.0.1");
        let b: Addr = "fd00::1".parse().unwrap();
        assert!(!b.is_v4());
        assert_eq!(b.to_string(), "fd00::1");
    }

    #[test]
    fn prefixes_contain_and_reject_host_bits() {
        let p: Prefix = "198.18.0.0/15".parse().unwrap();
        assert!(p.contains("198.19.255.255".parse().unwrap()));
        assert!(!p.contains("198.20.0.0".parse().unwrap()));
        assert!(!p.contains("::ffff:0:0".parse::<Addr>().map(|_| Addr([0; 16])).unwrap()));
        assert!(matches!("198.18.0.1/15".parse::<Prefix>(), Err(PrefixError::HostBitsSet(_))));
        assert!(matches!("198.18.0.0/33".parse::<Prefix>(), Err(PrefixError::BadLength(_))));
        let v6: Prefix = "fd00::/8".parse().unwrap();
        assert!(v6.contains("fd12::5".parse().unwrap()));
        assert!(!v6.contains("fe80::1".parse().unwrap()));
        assert!(v6.overlaps(&"fd00:1::/32".parse().unwrap()));
        assert!(!v6.overlaps(&"fe00::/8".parse().unwrap()));
        let all4: Prefix = "0.0.0.0/0".parse().unwrap();
        assert!(all4.contains("1.2.3.4".parse().unwrap()));
        assert!(!all4.contains("fd00::1".parse().unwrap()));
    }
}
