//! The hash that places a tracking key in the table.

use crate::addr::Addr;
use crate::flow::FlowKey;

/// The hash of a tracking key that places it in this table: its signature (top 16 bits) and
/// its two candidate buckets (the low bits, and the signature).
///
/// The table is local to one worker, so this hash need not match any other instance or be
/// keyed by the deployment (the consistent hash that picks backends is, CH-4). It is
/// 64x64->128-bit multiplications folded to 64 bits over the key's words (the wyhash/xxh3
/// mixing step, without xxh3's length dispatch and byte copies), one for two IPv4 addresses
/// and three otherwise, and xxh3's final avalanche: about 25 instructions where xxh3 over the
/// key's 40-byte image took about 50 (and 12 fewer per IPv4 packet with the one).
/// The `key_hash_spreads_keys_that_differ_in_one_field` test checks its spread. Its constants are
/// public, like xxh3's fixed seed was: a sender who crafts colliding keys fills their two
/// candidate buckets, which the eviction rule and the new-entry guard bound.
#[inline(always)]
pub fn key_hash(key: &FlowKey) -> u64 {
    const K: [u64; 6] = [
        0xa076_1d64_78bd_642f,
        0xe703_7ed1_a0b4_28db,
        0x8ebc_6af0_9c88_c6e3,
        0x5899_65cc_7537_4cc3,
        0x1d8e_4e27_c47d_124f,
        0x9e37_79b9_7f4a_7c15,
    ];
    let fold = |a: u64, b: u64| {
        let p = u128::from(a) * u128::from(b);
        (p as u64) ^ ((p >> 64) as u64)
    };
    let word = |a: &Addr, half: usize| {
        let b = &a.0[half * 8..half * 8 + 8];
        u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
    };
    let tail = key.tail();
    let (src0, src1) = (word(&key.src, 0), word(&key.src, 1));
    let (dst0, dst1) = (word(&key.dst, 0), word(&key.dst, 1));
    // Both addresses with their first eight bytes zero, as every IPv4 (v4-mapped) address:
    // their last eight bytes in one word, one multiplication. (The word is a bijection of the
    // two IPv4 addresses; other such addresses, IPv4-compatible IPv6 ones, may share it.)
    let h = if (src0 | dst0) == 0 {
        fold((src1 ^ dst1.rotate_left(32)) ^ K[0], tail ^ K[1])
    } else {
        let src = fold(src0 ^ K[0], src1 ^ K[1]);
        let dst = fold(dst0 ^ K[2], dst1 ^ K[3]);
        fold(src ^ K[4], dst ^ tail ^ K[5])
    };
    // xxh3's final avalanche: without it, keys that differ only in a port would get hashes in
    // near arithmetic progression (one multiplication by a constant is linear).
    let h = (h ^ (h >> 37)).wrapping_mul(0x1656_6791_9e37_79f9);
    h ^ (h >> 32)
}

#[inline(always)]
pub(super) fn sig_of(hash: u64) -> u16 {
    let s = (hash >> 48) as u16;
    s | u16::from(s == 0)
}
