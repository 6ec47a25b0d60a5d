//! The Internet checksum (RFC 1071): one's-complement sums, pseudo-headers, and incremental
//! updates (RFC 1624).
//!
//! Sums are carried as folded `u16` values that are **not** complemented; a header's checksum
//! field holds `!combine(...)`. A packet whose checksum is right sums (checksum field
//! included) to `0xffff`.

use crate::addr::Addr;

/// The folded one's-complement sum of `bytes` (big-endian 16-bit words; an odd last byte is
/// padded with a zero byte).
pub fn data(bytes: &[u8]) -> u16 {
    let mut acc: u64 = 0;
    let mut words = bytes.chunks_exact(4);
    for w in &mut words {
        acc += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    let rest = words.remainder();
    let mut pairs = rest.chunks_exact(2);
    for p in &mut pairs {
        acc += u64::from(u16::from_be_bytes([p[0], p[1]]));
    }
    if let [last] = pairs.remainder() {
        acc += u64::from(*last) << 8;
    }
    fold(acc)
}

/// Fold a wide one's-complement accumulator (any sum of 16-bit words, unfolded) to 16 bits,
/// without a loop: adding a value to its half-rotation leaves the end-around-carry sum of its
/// two halves in the upper half (64 -> 32, then 32 -> 16 bits). A non-zero sum never folds
/// to 0.
#[inline]
pub fn fold(acc: u64) -> u16 {
    let s = (acc.wrapping_add(acc.rotate_left(32)) >> 32) as u32;
    (s.wrapping_add(s.rotate_left(16)) >> 16) as u16
}

/// One's-complement sum of several folded sums.
pub fn combine(sums: &[u16]) -> u16 {
    fold(sums.iter().map(|&s| u64::from(s)).sum())
}

/// The folded sum of the TCP/UDP/ICMPv6 pseudo-header: the IPv4 one (RFC 793) when both
/// addresses are IPv4, else the IPv6 one (RFC 8200 §8.1). `len` is the upper-layer length.
pub fn pseudo_header(src: &Addr, dst: &Addr, proto: u8, len: u32) -> u16 {
    let (s, d): (&[u8], &[u8]) =
        if src.is_v4() && dst.is_v4() { (&src.0[12..], &dst.0[12..]) } else { (&src.0, &dst.0) };
    let len_hi = u16::try_from(len >> 16).unwrap_or(0);
    let len_lo = u16::try_from(len & 0xffff).unwrap_or(0);
    combine(&[data(s), data(d), u16::from(proto), len_hi, len_lo])
}

/// The checksum field value for a message whose sums are `sums` (with the field zeroed).
pub fn finish(sums: &[u16]) -> u16 {
    !combine(sums)
}

/// Like [`finish`], for UDP (see [`udp_field`]).
pub fn finish_udp(sums: &[u16]) -> u16 {
    udp_field(finish(sums))
}

/// The UDP checksum field for a computed checksum `c`: a computed 0 is sent as `0xffff`
/// (0 means "no checksum", RFC 768).
#[inline]
pub fn udp_field(c: u16) -> u16 {
    if c == 0 {
        0xffff
    } else {
        c
    }
}

/// RFC 1624 eqn. 3: the new checksum after one 16-bit word of the covered data changes from
/// `old` to `new`: `HC' = ~(~HC + ~m + m')`.
pub fn update16(check: u16, old: u16, new: u16) -> u16 {
    !combine(&[!check, !old, new])
}

/// [`update16`] for a run of bytes (an address, a port pair) changing from `old` to `new`.
/// Both must have the same even length and sit at an even offset of the covered data.
pub fn update(check: u16, old: &[u8], new: &[u8]) -> u16 {
    !combine(&[!check, !data(old), data(new)])
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 1071 §3 worked example: bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2.
    #[test]
    fn rfc1071_example_sum() {
        assert_eq!(data(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]), 0xddf2);
        // Odd length: the last byte is the high byte of a zero-padded word.
        assert_eq!(data(&[0x00, 0x01, 0xf2]), 0xf201);
    }

    /// The obvious fold: add the carries back until the value fits.
    fn fold_by_loop(mut acc: u64) -> u64 {
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc
    }

    #[test]
    fn fold_matches_the_loop() {
        let mut rng = crate::rng::SplitMix64::new(3);
        let edge = [0u64, 1, 0xffff, 0x1_0000, 0x1_fffe, 0xffff_ffff, 0x1_0000_0000, u64::MAX];
        let random = (0..100_000).map(|i| rng.next_u64() >> (i % 64));
        for x in edge.into_iter().chain(random) {
            assert_eq!(u64::from(fold(x)), fold_by_loop(x), "{x:#x}");
        }
    }

    // RFC 1624 §4 example: HC = 0xdd2f, m = 0x5555 -> m' = 0x3285 gives HC' = 0x0000.
    #[test]
    fn rfc1624_example_update() {
        assert_eq!(update16(0xdd2f, 0x5555, 0x3285), 0x0000);
    }
}
