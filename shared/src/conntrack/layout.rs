//! A bucket's two parts, its header ([`Head`]: signatures, overflow counter, coarse last seen
//! per way) and its records ([`Record`], one cache line each), and what is read from them.
//!
//! On x86-64 a bucket's sixteen signatures are compared in two SSE2 compares and one pack
//! (through `safe_arch`, which wraps the intrinsics safely for targets that have them);
//! elsewhere in four 64-bit words (SWAR).

#[cfg(doc)]
use super::MAX_CAPACITY;
use super::{idle_ms, Entry, EntryValue, WAYS};
use crate::addr::Addr;
use crate::flow::FlowKey;

/// One stored entry: 64 bytes, one cache line (aligned), so that a hit reads one line of
/// records.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Record {
    pub(super) key: FlowKey,
    pub(super) backend: u32,
    pub(super) epoch: u32,
    pub(super) flags: u8,
    /// 1 when the entry is stored in its secondary bucket (counted in its primary's
    /// `overflow`), 0 when in its primary.
    pub(super) in_secondary: u8,
    /// The way's signature, as in the bucket's header (0 for an empty way): a lookup that
    /// reads the record of the key's home way (the burst pipeline's `Home` lookups) can tell from the record
    /// alone whether it holds the key, without the header.
    pub(super) sig: u16,
    /// The key's other candidate bucket: its primary when `in_secondary`, else its secondary.
    pub(super) other: u32,
    /// When the entry was inserted, touched or replaced: milliseconds, wrapping `u32`. In the
    /// record's line, which a hit has just read, so that the per-packet write leaves the
    /// signature line clean.
    pub(super) last_seen: u32,
    pub(super) _reserved: [u8; 4],
}

impl Record {
    pub(super) const EMPTY: Record = Record {
        key: FlowKey {
            src: Addr::UNSPECIFIED,
            dst: Addr::UNSPECIFIED,
            sport: 0,
            dport: 0,
            proto: 0,
            kind: 0,
            service: 0,
        },
        backend: 0,
        epoch: 0,
        flags: 0,
        in_secondary: 0,
        sig: 0,
        other: 0,
        last_seen: 0,
        _reserved: [0; 4],
    };

    pub(super) fn value(&self) -> EntryValue {
        EntryValue { backend: self.backend, epoch: self.epoch, flags: self.flags }
    }

    pub(super) fn set_value(&mut self, v: EntryValue) {
        self.backend = v.backend;
        self.epoch = v.epoch;
        self.flags = v.flags;
    }

    /// The primary bucket whose `overflow` counts this entry, if it is in its secondary.
    pub(super) fn overflowed_from(&self) -> Option<usize> {
        (self.in_secondary != 0).then_some(self.other as usize)
    }

    pub(super) fn entry(&self, now32: u32) -> Entry {
        Entry { key: self.key, value: self.value(), idle_ms: idle_ms(now32, self.last_seen) }
    }
}

/// One bucket's header: the signatures of its sixteen ways and its overflow counter. 64 bytes,
/// one cache line, in an array apart from the records.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Head {
    pub(super) sig: [u16; WAYS],
    /// Entries whose primary is this bucket and that are stored in their secondary. A `u32`
    /// cannot overflow: it is at most the number of entries, at most [`MAX_CAPACITY`].
    pub(super) overflow: u32,
    /// Each way's *coarse last seen*: a time in units of [`SEEN_UNIT_MS`] (wrapping at 256)
    /// that is never later than the coarse time of the record's `last_seen`, except for an
    /// entry idle for [`SEEN_CAP`] units or more, where it says only that ([`seen_stamp`]).
    /// Written by the insert, by a move, by the sweep and by the eviction, never by a hit: the
    /// header stays clean. Meaningless for an empty way.
    pub(super) seen: [u8; WAYS],
    pub(super) _reserved: [u8; 12],
}

/// The records of one bucket's sixteen ways: 1 KiB, sixteen lines.
pub(super) type Ways = [Record; WAYS];

const _: () = assert!(size_of::<Record>() == 64);

const _: () = assert!(align_of::<Record>() == 64);

const _: () = assert!(size_of::<Head>() == 64);

const _: () = assert!(align_of::<Head>() == 64);

const _: () = assert!(std::mem::offset_of!(Record, last_seen) == 56);

impl Head {
    pub(super) const EMPTY: Head =
        Head { sig: [0; WAYS], overflow: 0, seen: [0; WAYS], _reserved: [0; 12] };

    /// The way whose coarse last seen is the oldest as of the coarse time `now` (lowest way on
    /// ties): where the eviction looks first. (Over all sixteen ways: called on full buckets.)
    ///
    /// On x86-64 the sixteen ages are one SSE2 register: one subtraction, the greatest age
    /// found in four shifts and maxima, its lowest way by a compare and a move-mask (about 15
    /// instructions; the loop below takes about 100).
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[inline]
    pub(super) fn oldest_way(&self, now: u8) -> usize {
        use safe_arch::{
            byte_shr_imm_u128_m128i as shift, cmp_eq_mask_i8_m128i, m128i, max_u8_m128i,
            move_mask_i8_m128i, set_splat_i8_m128i, sub_i8_m128i,
        };
        const _: () = assert!(WAYS == 16);
        // Wrapping byte subtraction: each way's age in units, as `seen_age` computes it.
        let ages = sub_i8_m128i(set_splat_i8_m128i(now as i8), m128i::from(self.seen));
        let mut oldest = max_u8_m128i(ages, shift::<8>(ages));
        oldest = max_u8_m128i(oldest, shift::<4>(oldest));
        oldest = max_u8_m128i(oldest, shift::<2>(oldest));
        oldest = max_u8_m128i(oldest, shift::<1>(oldest));
        let oldest = <[u8; 16]>::from(oldest)[0];
        let at = move_mask_i8_m128i(cmp_eq_mask_i8_m128i(ages, set_splat_i8_m128i(oldest as i8)));
        at.trailing_zeros() as usize
    }

    /// The way whose coarse last seen is the oldest as of the coarse time `now` (lowest way on
    /// ties): where the eviction looks first. (Over all sixteen ways: called on full buckets.)
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    #[inline]
    pub(super) fn oldest_way(&self, now: u8) -> usize {
        let mut best = (0, 0);
        for (w, &seen) in self.seen.iter().enumerate() {
            let age = seen_age(now, seen);
            if w == 0 || age > best.1 {
                best = (w, age);
            }
        }
        best.0
    }

    /// Bit `w` set when way `w` has signature `sig` (`sig` 0 gives the empty ways).
    ///
    /// On x86-64 the sixteen 16-bit signatures are two SSE2 registers: two compares, one pack
    /// and one move-mask, about 10 instructions with the broadcast of `sig` (with eight ways,
    /// the SWAR version below took about 30 in the compiled probe for half as many).
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[inline(always)]
    pub(super) fn match_mask(&self, sig: u16) -> u32 {
        use safe_arch::{
            cmp_eq_mask_i16_m128i, m128i, move_mask_i8_m128i, pack_i16_to_i8_m128i,
            set_splat_i16_m128i,
        };
        let half = |i: usize| {
            let s = &self.sig;
            m128i::from([
                s[i],
                s[i + 1],
                s[i + 2],
                s[i + 3],
                s[i + 4],
                s[i + 5],
                s[i + 6],
                s[i + 7],
            ])
        };
        let want = set_splat_i16_m128i(sig as i16);
        let lo = cmp_eq_mask_i16_m128i(half(0), want);
        let hi = cmp_eq_mask_i16_m128i(half(8), want);
        // Each lane is 0 or -1; packed to bytes, byte `w` is way `w`.
        move_mask_i8_m128i(pack_i16_to_i8_m128i(lo, hi)) as u32
    }

    /// Bit `w` set when way `w` has signature `sig` (`sig` 0 gives the empty ways).
    ///
    /// Elsewhere the sixteen 16-bit signatures are compared four at a time in four 64-bit
    /// words (SWAR), without a branch (with eight ways, in two words: about 20 instructions,
    /// where a loop over the ways took about 28).
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    #[inline(always)]
    pub(super) fn match_mask(&self, sig: u16) -> u32 {
        const _: () = assert!(WAYS == 16);
        let s = &self.sig;
        let word = |i: usize| {
            u64::from(s[i])
                | u64::from(s[i + 1]) << 16
                | u64::from(s[i + 2]) << 32
                | u64::from(s[i + 3]) << 48
        };
        let want = u64::from(sig) * LANES_LOW;
        lanes_zero(word(0) ^ want)
            | lanes_zero(word(4) ^ want) << 4
            | lanes_zero(word(8) ^ want) << 8
            | lanes_zero(word(12) ^ want) << 12
    }

    /// Bit `w` set when way `w` holds an entry.
    #[inline(always)]
    pub(super) fn used_ways(&self) -> u32 {
        !self.match_mask(0) & ((1 << WAYS) - 1)
    }

    /// The lowest empty way, if any.
    #[inline(always)]
    pub(super) fn empty_way(&self) -> Option<usize> {
        let m = self.match_mask(0);
        (m != 0).then(|| m.trailing_zeros() as usize)
    }

    /// The way a new entry whose home way is `home` takes in this bucket: its home when empty,
    /// else the lowest empty way, if any.
    #[inline(always)]
    pub(super) fn free_way(&self, home: usize) -> Option<usize> {
        if self.sig[home] == 0 {
            Some(home)
        } else {
            self.empty_way()
        }
    }
}

/// The way of its primary bucket a key's entry takes when that way is empty (its *home* way):
/// hash bits 32..36, disjoint from the bucket's (below 27 bits) and the signature's (48..64).
#[inline(always)]
pub(super) fn home_way(hash: u64) -> usize {
    (hash >> 32) as usize & (WAYS - 1)
}

/// The way holding `key` among the ways of mask `m` (from [`Head::match_mask`]).
#[inline(always)]
pub(super) fn find_in_mask(ways: &Ways, key: &FlowKey, mut m: u32) -> Option<usize> {
    while m != 0 {
        let w = m.trailing_zeros() as usize;
        if ways[w].key == *key {
            return Some(w);
        }
        m &= m - 1;
    }
    None
}

/// The unit of a header's coarse last seen ([`Head::seen`]): 1,024 ms.
pub const SEEN_UNIT_MS: u64 = 1 << SEEN_SHIFT;

pub(super) const SEEN_SHIFT: u32 = 10;

/// Coarse idle times of this many units or more (about 2.2 minutes) are all the same to the
/// eviction: the header of such an entry says only "at least this old". (Coarse times are a
/// byte: they wrap every 256 units, about 4.4 minutes.)
pub const SEEN_CAP: u8 = 128;

/// The coarse time of the millisecond stamp `ms` (its low byte).
#[inline(always)]
pub(super) fn coarse(ms: u32) -> u8 {
    (ms >> SEEN_SHIFT) as u8
}

/// How many units before the coarse time `now` the coarse last seen `seen` is.
#[inline(always)]
pub(super) fn seen_age(now: u8, seen: u8) -> u8 {
    now.wrapping_sub(seen)
}

/// A header's coarse last seen for a record last seen at `last_seen`, as of `now32`: its
/// coarse time, or, idle for [`SEEN_CAP`] units or more, the coarse time `SEEN_CAP` units ago
/// (the sweep writes it so, every few seconds, so that an idle entry's header never wraps
/// round to look recent).
#[inline(always)]
pub(super) fn seen_stamp(now32: u32, last_seen: u32) -> u8 {
    // In 24 bits: the millisecond stamps wrap at 2^32.
    let units =
        (now32 >> SEEN_SHIFT).wrapping_sub(last_seen >> SEEN_SHIFT) & (u32::MAX >> SEEN_SHIFT);
    // Below SEEN_CAP, so it fits.
    coarse(now32).wrapping_sub(units.min(u32::from(SEEN_CAP)) as u8)
}

/// The lowest bit of each 16-bit lane of a word.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
const LANES_LOW: u64 = 0x0001_0001_0001_0001;

/// All but the highest bit of each 16-bit lane.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
const LANES_LOW15: u64 = 0x7fff_7fff_7fff_7fff;

/// Bit `i` (0..4) set when 16-bit lane `i` of `x` is zero. Exact: adding `0x7fff` to a lane's
/// low 15 bits carries into its top bit unless they are all zero, and never into the next lane.
/// The four top bits are then gathered into bits 45..49 by one multiplication (each partial
/// product lands on its own bit, so nothing carries).
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
fn lanes_zero(x: u64) -> u32 {
    let nonzero = ((x & LANES_LOW15) + LANES_LOW15) | x;
    let zero_tops = !nonzero & !LANES_LOW15;
    let gather = (1 << 45) | (1 << 30) | (1 << 15) | 1;
    (((zero_tops >> 15).wrapping_mul(gather) >> 45) & 0xf) as u32
}
