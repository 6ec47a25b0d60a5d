//! Weighted Maglev consistent-hash tables (CH-1..CH-3).
//!
//! A [`MaglevTable`] maps a flow hash to one member of an eligible set in O(1): the control
//! plane builds it off the hot path (allocation is fine there) and the data path only indexes
//! it. It owns nothing else: no health, no conntrack, no clock.
//!
//! # Method
//!
//! The fill is the Maglev paper's *Pseudocode 1* (Eisenbud et al., "Maglev: A Fast and Reliable
//! Software Network Load Balancer", NSDI'16, section 3.4) with the weighted turn rule of
//! Envoy's `MaglevTable` (`source/extensions/load_balancing_policies/maglev/maglev_lb.cc`):
//!
//! 1. Members with weight 0 are dropped. The rest are sorted by `(identity, id)`, so the table
//!    depends on the members as a *set*, never on the order the caller listed them in (CH-1).
//! 2. Each member gets a permutation of `[0, M)` from its `identity` alone, with explicit
//!    arithmetic (no `RandomState`, nothing machine-dependent):
//!    `offset = xxh3_64(identity.to_le_bytes(), OFFSET_SEED) % M`,
//!    `skip = xxh3_64(identity.to_le_bytes(), SKIP_SEED) % (M - 1) + 1`, and
//!    `permutation[j] = (offset + j * skip) % M`. `M` is prime, so every `skip` in `[1, M)` is
//!    coprime with it and the permutation visits every position.
//! 3. Rounds `r = 1, 2, ...`: in each round the members take turns in sorted order; member `i`
//!    takes a turn only while `count_i < r * weight_i / max_weight`, evaluated exactly in
//!    integers as `count_i * max_weight < r * weight_i` (u64, no overflow for any `u32` weight
//!    and `M < 2^32`). A turn claims the next free position of the member's permutation.
//!    The fill stops when all `M` positions are taken.
//!
//! After round `r` member `i` owns exactly `ceil(r * w_i / w_max)` entries (Envoy's
//! invariant), so shares are *proportional* to weights. The last round is partial, so with
//! `S = sum(w)` and `N` members the final count `c_i` differs from `M * w_i / S` by less than
//! `1 + w_i / w_max` above and less than `w_i / w_max + N * w_i / S` below (from
//! `ceil((r-1) * w_i / w_max) <= c_i <= ceil(r * w_i / w_max)` and the same for the sum, `M`):
//! a few entries (fewer than 5 for weights 1..=4). With equal
//! weights every member takes a turn every round and this is exactly the paper's unweighted
//! algorithm: each member owns `floor(M/N)` or `ceil(M/N)` entries. (Katran's "V1" weighting,
//! which repeats a member `weight` times per round, is *not* what is built here.)
//!
//! # Lookup
//!
//! `lookup(hash)` maps the 64-bit flow hash to a position with a multiply-high, no division:
//! `position = (hash as u128 * M as u128) >> 64`, one 64x64->128 multiply (`mul` on x86-64,
//! `umulh` on AArch64). It uses all 64 hash bits and is uniform to within `M / 2^64`.
//!
//! # Sizes
//!
//! `M` must be prime (see [`TABLE_SIZES`], default [`DEFAULT_TABLE_SIZE`] = 65537) and at least
//! the number of members. Pick `M > 100 * N` for shares within 1% of each other (the paper's
//! rule). Build cost is O(M log M) on average (O(M^2) worst case).

use std::fmt;

use crate::addr::Addr;
use crate::flow::FlowHasher;

/// Default table size (prime), as in the Maglev paper, Katran and Envoy.
pub const DEFAULT_TABLE_SIZE: u32 = 65537;

/// Table sizes an operator may choose from: all prime, ascending, roughly doubling.
pub const TABLE_SIZES: &[u32] = &[
    251, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65537, 131071, 262139, 524287, 655373, 1048573,
];

/// Fixed seed for the offset hash of a member's identity (ASCII "mgl-offs").
pub const OFFSET_SEED: u64 = 0x6d67_6c2d_6f66_6673;
/// Fixed seed for the skip hash of a member's identity (ASCII "mgl-skip").
pub const SKIP_SEED: u64 = 0x6d67_6c2d_736b_6970;

/// One member of a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MaglevMember {
    /// What [`MaglevTable::lookup`] returns for this member (the caller's backend slot).
    pub id: u16,
    /// A stable hash of the backend's identity (see [`backend_identity`]), the same on every
    /// balancer instance of a deployment (CH-1, CH-4); it alone decides the permutation.
    pub identity: u64,
    /// Relative weight, 1 by default; 0 means "not in the table" (CH-3).
    pub weight: u32,
}

/// The identity of a backend for [`MaglevMember::identity`]: the deployment's keyed hash
/// (CH-4) of the 18-byte image `address (16 bytes) || port (2 bytes, little-endian)`.
pub fn backend_identity(hasher: &FlowHasher, addr: Addr, port: u16) -> u64 {
    let mut image = [0u8; 18];
    image[..16].copy_from_slice(&addr.0);
    image[16..].copy_from_slice(&port.to_le_bytes());
    hasher.hash_bytes(&image)
}

/// Why a table could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MaglevError {
    /// The size is not a prime number (a composite size breaks the permutations).
    #[error("Maglev table size {0} is not prime")]
    SizeNotPrime(u32),
    /// More members (with weight > 0) than table positions.
    #[error("{members} members do not fit a Maglev table of size {size}")]
    TooManyMembers {
        /// Members with a non-zero weight.
        members: usize,
        /// The table size.
        size: u32,
    },
}

/// True when `n` is prime (trial division; used to validate table sizes).
pub fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    if n % 2 == 0 {
        return n == 2;
    }
    let n = u64::from(n);
    let mut d = 3u64;
    while d * d <= n {
        if n % d == 0 {
            return false;
        }
        d += 2;
    }
    true
}

/// A built Maglev table: `size` positions, each owned by one member id.
#[derive(Clone, PartialEq, Eq)]
pub struct MaglevTable {
    size: u32,
    members: u32,
    entries: Box<[u16]>,
}

/// Build-time state of one member.
struct Builder {
    id: u16,
    weight: u64,
    /// Next position of the permutation to try.
    next: u32,
    skip: u32,
    count: u64,
}

impl MaglevTable {
    /// Build the table for `members` (weight-0 members are left out) at `size` positions.
    ///
    /// # Panics
    ///
    /// When `size` is not prime or is smaller than the number of members with a non-zero
    /// weight; use [`MaglevTable::try_build`] (or validate with [`is_prime`]) to get an error.
    pub fn build(members: &[MaglevMember], size: u32) -> MaglevTable {
        match MaglevTable::try_build(members, size) {
            Ok(t) => t,
            Err(e) => panic!("{e}"),
        }
    }

    /// Build the table, or say why `size` does not fit these members.
    pub fn try_build(members: &[MaglevMember], size: u32) -> Result<MaglevTable, MaglevError> {
        if !is_prime(size) {
            return Err(MaglevError::SizeNotPrime(size));
        }
        let mut sorted: Vec<MaglevMember> =
            members.iter().copied().filter(|m| m.weight > 0).collect();
        sorted.sort_unstable_by_key(|m| (m.identity, m.id));
        let n = sorted.len();
        if n > size as usize {
            return Err(MaglevError::TooManyMembers { members: n, size });
        }
        let members_u32 = u32::try_from(n).unwrap_or(u32::MAX);
        if n == 0 {
            return Ok(MaglevTable { size, members: 0, entries: Box::new([]) });
        }

        let m64 = u64::from(size);
        let max_weight = sorted.iter().map(|m| u64::from(m.weight)).max().unwrap_or(1);
        let mut builders: Vec<Builder> = sorted
            .iter()
            .map(|m| {
                let bytes = m.identity.to_le_bytes();
                let h1 = xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, OFFSET_SEED);
                let h2 = xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, SKIP_SEED);
                // Both results are < size <= u32::MAX, so the conversions cannot fail.
                let offset = u32::try_from(h1 % m64).unwrap_or(0);
                let skip = u32::try_from(h2 % (m64 - 1) + 1).unwrap_or(1);
                Builder { id: m.id, weight: u64::from(m.weight), next: offset, skip, count: 0 }
            })
            .collect();

        let len = size as usize;
        let mut entries = vec![0u16; len];
        // Which positions are taken: a bitset (8 KiB at M = 65537) so probing stays in L1.
        let mut taken = vec![0u64; len.div_ceil(64)];
        let mut filled = 0usize;
        let mut round = 0u64;
        while filled < len {
            round += 1;
            for b in builders.iter_mut() {
                // Envoy's weighted turn: count < round * weight / max_weight, exactly.
                if b.count * max_weight >= round * b.weight {
                    continue;
                }
                let mut pos = b.next;
                loop {
                    let p = pos as usize;
                    let (word, bit) = (p / 64, 1u64 << (p % 64));
                    // Advance along the permutation: pos = (pos + skip) mod M.
                    let step = size - b.skip;
                    pos = if pos >= step { pos - step } else { pos + b.skip };
                    if taken[word] & bit == 0 {
                        taken[word] |= bit;
                        entries[p] = b.id;
                        break;
                    }
                }
                b.next = pos;
                b.count += 1;
                filled += 1;
                if filled == len {
                    break;
                }
            }
        }
        Ok(MaglevTable { size, members: members_u32, entries: entries.into_boxed_slice() })
    }

    /// The member id owning `hash`'s position, or `None` for an empty table. O(1):
    /// one multiply-high and one load.
    #[inline]
    pub fn lookup(&self, hash: u64) -> Option<u16> {
        let len = self.entries.len() as u128;
        // (hash * len) >> 64 < len: the index is always in bounds (and 0..0 is empty).
        let pos = ((u128::from(hash) * len) >> 64) as usize;
        self.entries.get(pos).copied()
    }

    /// The table size M (also for an empty table).
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Number of members with a non-zero weight the table was built from.
    pub fn members(&self) -> usize {
        self.members as usize
    }

    /// The owner of each position: `size()` entries, or none for an empty table.
    pub fn entries(&self) -> &[u16] {
        &self.entries
    }

    /// True when the table has no members (every lookup returns `None`).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many positions each id owns, sorted by id (ids owning nothing are absent).
    pub fn entry_counts(&self) -> Vec<(u16, u32)> {
        let mut ids: Vec<u16> = self.entries.to_vec();
        ids.sort_unstable();
        let mut out: Vec<(u16, u32)> = Vec::new();
        for id in ids {
            match out.last_mut() {
                Some((last, c)) if *last == id => *c += 1,
                _ => out.push((id, 1)),
            }
        }
        out
    }
}

impl fmt::Debug for MaglevTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head = &self.entries[..self.entries.len().min(8)];
        f.debug_struct("MaglevTable")
            .field("size", &self.size)
            .field("members", &self.members)
            .field("first_entries", &head)
            .finish_non_exhaustive()
    }
}

/// How many positions have a different owner in `a` and `b` (the slots that moved).
///
/// Meaningful for two tables of the same size. A position present in only one table (one is
/// empty, or the sizes differ) counts as moved.
pub fn slots_moved(a: &MaglevTable, b: &MaglevTable) -> usize {
    let (x, y) = (a.entries(), b.entries());
    let common = x.len().min(y.len());
    let differing = x[..common].iter().zip(&y[..common]).filter(|(p, q)| p != q).count();
    differing + x.len().max(y.len()) - common
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: u16) -> Vec<MaglevMember> {
        (0..n)
            .map(|i| MaglevMember { id: i, identity: u64::from(i) * 0x9e37_79b9, weight: 1 })
            .collect()
    }

    #[test]
    fn empty_table_looks_up_nothing() {
        let t = MaglevTable::build(&[], DEFAULT_TABLE_SIZE);
        assert!(t.is_empty());
        assert_eq!(t.size(), 65537);
        assert_eq!(t.lookup(12345), None);
        // Weight 0 is "not in the table".
        let t = MaglevTable::build(&[MaglevMember { id: 3, identity: 9, weight: 0 }], 251);
        assert!(t.is_empty());
    }

    #[test]
    fn single_member_owns_everything() {
        let t = MaglevTable::build(&[MaglevMember { id: 7, identity: 1, weight: 5 }], 251);
        assert_eq!(t.entries().len(), 251);
        assert!(t.entries().iter().all(|&e| e == 7));
        assert_eq!(t.lookup(0), Some(7));
        assert_eq!(t.lookup(u64::MAX), Some(7));
    }

    #[test]
    fn lookup_maps_hash_range_onto_positions() {
        // Multiply-high: hash 0 -> position 0, hash u64::MAX -> position M-1, and the
        // position of hash h is floor(h * M / 2^64).
        let t = MaglevTable::build(&members(10), 251);
        assert_eq!(t.lookup(0), Some(t.entries()[0]));
        assert_eq!(t.lookup(u64::MAX), Some(t.entries()[250]));
        assert_eq!(t.lookup(1u64 << 63), Some(t.entries()[125]));
    }

    #[test]
    fn bad_sizes_are_errors() {
        assert_eq!(
            MaglevTable::try_build(&members(3), 65536),
            Err(MaglevError::SizeNotPrime(65536))
        );
        assert_eq!(MaglevTable::try_build(&members(3), 1), Err(MaglevError::SizeNotPrime(1)));
        assert_eq!(
            MaglevTable::try_build(&members(4), 3),
            Err(MaglevError::TooManyMembers { members: 4, size: 3 })
        );
    }

    #[test]
    fn debug_is_short() {
        let t = MaglevTable::build(&members(10), DEFAULT_TABLE_SIZE);
        let s = format!("{t:?}");
        assert!(s.len() < 200, "{s}");
        assert!(s.contains("size: 65537"));
    }

    #[test]
    fn slots_moved_counts_differences() {
        let a = MaglevTable::build(&members(5), 251);
        assert_eq!(slots_moved(&a, &a.clone()), 0);
        let empty = MaglevTable::build(&[], 251);
        assert_eq!(slots_moved(&a, &empty), 251);
    }
}
