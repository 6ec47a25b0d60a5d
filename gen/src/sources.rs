//! The source addresses and ports of a [`TrafficSpec`]'s flows: which addresses each family's
//! prefix offers, where established flow `i` comes from, and the ports left for new
//! connections.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::spec::{SpecError, TrafficSpec, FIRST_PORT, PORTS_PER_HOST};

/// Division of 32-bit values by a constant with two multiplies (Lemire, Kaser, Kurz 2019,
/// "Faster remainder by direct computation"): exact for every 32-bit dividend.
#[derive(Debug, Clone, Copy)]
struct FastDiv {
    d: u32,
    /// ceil(2^64 / d); unused for d == 1 (where it would not fit).
    m: u64,
}

impl FastDiv {
    fn new(d: u32) -> FastDiv {
        let d = d.max(1);
        FastDiv { d, m: if d == 1 { 0 } else { u64::MAX / u64::from(d) + 1 } }
    }

    /// `(n / d, n % d)`.
    #[inline]
    fn divmod(self, n: u32) -> (u32, u32) {
        if self.d == 1 {
            return (n, 0);
        }
        let q = (u128::from(self.m) * u128::from(n)) >> 64;
        let low = self.m.wrapping_mul(u64::from(n));
        let r = (u128::from(low) * u128::from(self.d)) >> 64;
        (q as u32, r as u32)
    }
}

/// The source addresses of one family.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SourcePool {
    /// Usable addresses (at most 2^64 - 1 for IPv6: only the low 64 bits vary).
    pub(crate) hosts: u64,
    /// The address of host 0 (the network address, plus one when it is skipped).
    pub(crate) first: u128,
    /// Division by `hosts` (clamped to u32::MAX, which is exact for flow indexes < 2^32).
    div: FastDiv,
    /// The first source port of new connections: above every port established flows use.
    pub(crate) syn_port_base: u32,
    /// How many ports new connections use (`65536 - syn_port_base`).
    pub(crate) syn_ports: u32,
}

impl SourcePool {
    pub(crate) fn new(
        field: &'static str,
        addr: u128,
        len: u8,
        bits: u8,
        spec: &TrafficSpec,
        used: bool,
    ) -> Result<SourcePool, SpecError> {
        if len > bits {
            return Err(SpecError::PrefixLen { field, len, max: bits });
        }
        let host_bits = u32::from(bits - len);
        let mask = if host_bits >= 128 { 0 } else { u128::MAX << host_bits };
        let network = addr & mask & (u128::MAX >> (128 - u32::from(bits)));
        let size: u128 = if host_bits >= 64 { 1 << 64 } else { 1 << host_bits };
        // Skip the network address (and the IPv4 broadcast address) when there is room.
        let (skip, hosts) = match (bits, host_bits) {
            (32, 0) | (128, 0) => (0, 1u128),
            (32, 1) | (128, 1) => (0, 2),
            (32, _) => (1, size - 2),
            _ => (1, size - 1),
        };
        let hosts = u64::try_from(hosts).unwrap_or(u64::MAX);
        let first = network + skip;
        let capacity = u128::from(hosts) * u128::from(PORTS_PER_HOST);
        let prefix = || {
            if bits == 32 {
                format!("{}/{len}", Ipv4Addr::from(network as u32))
            } else {
                format!("{}/{len}", Ipv6Addr::from(network))
            }
        };
        let flows = u64::from(spec.flows);
        // Port levels the established flows occupy: ceil(flows / hosts).
        let levels = flows.div_ceil(hosts);
        if used && u128::from(flows) > capacity {
            return Err(SpecError::PrefixTooSmall {
                field,
                prefix: prefix(),
                hosts,
                capacity,
                need: format!("fewer than the {flows} flows"),
            });
        }
        if used && spec.syn_share > 0.0 && levels >= u64::from(PORTS_PER_HOST) {
            return Err(SpecError::PrefixTooSmall {
                field,
                prefix: prefix(),
                hosts,
                capacity,
                need: format!(
                    "and the {flows} flows use every source port, leaving none for new \
                     connections (syn_share)"
                ),
            });
        }
        let syn_port_base = u32::from(FIRST_PORT).saturating_add(levels.min(65536) as u32);
        Ok(SourcePool {
            hosts,
            first,
            div: FastDiv::new(u32::try_from(hosts).unwrap_or(u32::MAX)),
            syn_port_base: syn_port_base.min(65535),
            syn_ports: 65536u32.saturating_sub(syn_port_base).max(1),
        })
    }

    /// Host index and source port of established flow `i`.
    #[inline]
    pub(crate) fn flow(&self, i: u32) -> (u64, u16) {
        let (level, host) = self.div.divmod(i);
        (u64::from(host), (u32::from(FIRST_PORT) + level) as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fastdiv_is_exact() {
        for d in [1u32, 2, 3, 7, 254, 32766, 65535, 1 << 20, u32::MAX - 1, u32::MAX] {
            let f = FastDiv::new(d);
            for n in [0u32, 1, 2, d - 1, d, d.wrapping_add(1), 12345, 9_999_999, u32::MAX] {
                assert_eq!(f.divmod(n), (n / d, n % d), "{n} / {d}");
            }
        }
    }
}
