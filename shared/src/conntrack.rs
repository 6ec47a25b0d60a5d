//! Per-worker connection-tracking shard (CT): stores tracking entries and finds them again.
//!
//! # What it owns, and what it must never do
//!
//! A [`Shard`] is one worker's table of `tracking key -> (backend, epoch, flags, last seen)`
//! (CT-6). It is a *mechanism*: it never decides whether an entry is still valid. Expiry
//! (CT-8), draining (CD), flushes (FO-9) and persistence (CP) are decided by the caller against
//! the current snapshot, from what [`Shard::get`] returns: the stored value, opaque to the
//! shard, and the entry's idle time. [`Shard::sweep`] only reclaims memory, with a predicate the
//! caller supplies.
//!
//! The shard must never return an entry for a different key, never lose or alter an entry the
//! caller did not remove except by evicting it from a full set (counted), never allocate after
//! [`Shard::with_capacity`], and never fail an insert or a lookup because it is full.
//!
//! # Layout
//!
//! Set-associative: a power-of-two number of 8-way buckets. A [`Bucket`] is 512 bytes aligned
//! to 64 (one cache line of header, then eight 56-byte records):
//!
//! ```text
//! offset   0  sig: [u16; 8]        16-bit signature per way, 0 = empty way
//! offset  16  last_seen: [u32; 8]  milliseconds, wrapping u32
//! offset  48  reserved: [u8; 16]   zero (room for an overflow hint, see below)
//! offset  64  records: [Record; 8] 56 B each: FlowKey (40) + backend u32 + epoch u32 + flags u8 + 7 pad
//! ```
//!
//! That is exactly [`BYTES_PER_ENTRY`] = 64 bytes per tracked connection: 1M connections at
//! 100% load are 64 MiB. The hash (from [`crate::flow::FlowHasher`]) picks the bucket with its
//! low bits and the signature with its top 16 bits (0 is mapped to 1), so they are independent
//! for any table below 2^48 buckets.
//!
//! A lookup reads the header line, compares the eight signatures at once, and compares the
//! full 40-byte key only on a signature match (a false signature match costs one key compare
//! and is rare: 8/65536 per full bucket). A hit touches the header line plus the record, which
//! straddles two lines for six ways out of eight (56-byte stride); a miss usually touches the
//! header line only.
//!
//! # Eviction and sizing
//!
//! An insert takes an empty way of its bucket, else evicts the way with the oldest
//! `last_seen` (LRU within the set) and reports it ([`InsertOutcome::evicted`],
//! [`ShardStats::evictions`]). Because a key can live in one bucket only, a bucket can fill up
//! before the table does: with uniformly hashed keys, filling a table to 50% evicts about 0.8%
//! of the inserted keys, to 75% about 5% and to 90% about 10% (the `eviction_rate_by_load`
//! test prints the figures). The evicted entry is the oldest of its set, so an expired entry
//! not yet swept goes first; only a set of eight live entries loses a live connection.
//! Size the capacity at about twice the connections a worker must hold.
//! [`Shard::with_capacity`] rounds up to a power of two buckets, so it often does that for you.
//!
//! # Time
//!
//! Callers pass `now` as a [`Time`]; the shard keeps `now` in milliseconds truncated to a
//! wrapping `u32`, and an entry's idle time is `now32.wrapping_sub(last_seen)`. That is exact
//! while the entry has been idle for less than 2^32 ms (~49.7 days), and `now` must not go
//! backwards. **Invariant the caller keeps:** every entry is removed by [`Shard::sweep`] (or
//! replaced) well before it has been idle 2^31 ms (~24.8 days). The worker sweeps the whole
//! table once per few seconds and removes entries idle for at least the largest configured idle
//! timeout (at most 57 600 s = 16 h, CT-9), so an entry never sits anywhere near that bound.
//! LRU eviction compares idle times with the same wrapping arithmetic.
//!
//! # Slots
//!
//! [`Shard::find`] and [`Shard::insert`] return a [`Slot`], a handle to one way. A slot stays
//! valid until the next [`Shard::insert`], [`Shard::remove`] or [`Shard::sweep`] (any of which
//! may empty or reuse that way); [`Shard::get`], [`Shard::touch`] and [`Shard::replace`] keep
//! it valid. The usual per-packet sequence is `find` -> `get` -> (`touch` | `replace`), or
//! `insert` on a miss.
//!
//! # Prefetch
//!
//! This crate forbids `unsafe`, and the prefetch intrinsics take raw pointers, so
//! [`Shard::prefetch`] is a plain load of the bucket's header line through
//! [`std::hint::black_box`]: the load is issued and the CPU runs on out of order, so
//! several of them overlap; it is not a non-blocking prefetch hint (a load that misses still
//! occupies the reorder buffer until it completes). [`Shard::find_batch`] uses the same idea.

use std::fmt;
use std::hint::black_box;

use crate::addr::Addr;
use crate::flow::FlowKey;
use crate::time::Time;

/// Ways (entries) per bucket.
pub const WAYS: usize = 8;

/// Size of one bucket in bytes: a 64-byte header line and eight 56-byte records.
pub const BUCKET_BYTES: usize = size_of::<Bucket>();

/// Alignment of a bucket: a cache line.
pub const BUCKET_ALIGN: usize = align_of::<Bucket>();

/// Memory per tracked connection: [`BUCKET_BYTES`] / [`WAYS`] = 64 bytes.
pub const BYTES_PER_ENTRY: usize = BUCKET_BYTES / WAYS;

/// Largest capacity [`Shard::with_capacity`] accepts (a [`Slot`] is a `u32`).
pub const MAX_CAPACITY: usize = 1 << 31;

/// Largest idle time the shard measures exactly; see the module doc for the invariant.
pub const MAX_EXACT_IDLE_MS: u64 = 1 << 31;

/// The value stored with a key. Opaque to the shard: it stores and returns it unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct EntryValue {
    /// The caller's backend reference (e.g. slot and generation in the snapshot's table).
    pub backend: u32,
    /// The service flush epoch when the entry was created (FO-9).
    pub epoch: u32,
    /// Caller-defined bits (e.g. "created while its backend was unhealthy", CP-5).
    pub flags: u8,
}

/// An entry as read from the shard at some `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The tracking key.
    pub key: FlowKey,
    /// The stored value.
    pub value: EntryValue,
    /// Milliseconds since the entry was inserted, touched or replaced (CT-8).
    pub idle_ms: u64,
}

/// A handle to one way of the table: `bucket * 8 + way`. See the module doc for how long it
/// stays valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Slot(u32);

impl Slot {
    fn new(bucket: usize, way: usize) -> Slot {
        // with_capacity bounds the table to MAX_CAPACITY ways, so this fits.
        Slot((bucket * WAYS + way) as u32)
    }

    /// The way's index in the table, `0..capacity`.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The bucket this way belongs to.
    pub fn bucket(self) -> usize {
        self.index() / WAYS
    }

    fn way(self) -> usize {
        self.index() % WAYS
    }
}

/// What [`Shard::insert`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InsertOutcome {
    /// Where the entry now is.
    pub slot: Slot,
    /// The key was already present: its value and idle clock were overwritten in place
    /// (e.g. a new-connection SYN replacing an entry, CT-2).
    pub overwritten: bool,
    /// The bucket was full and this entry, its least recently seen, was evicted to make room.
    /// Whether that entry was still valid is for the caller to judge (e.g. `idle_ms` against the
    /// idle timeout): evicting a valid entry loses a tracked connection.
    pub evicted: Option<Entry>,
}

/// The shard's counters. Lookups and hits are not counted here ([`Shard::find`] takes `&self`);
/// the worker counts them with its other per-packet counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShardStats {
    /// Entries currently stored.
    pub entries: u64,
    /// Table capacity in entries.
    pub capacity: u64,
    /// New keys stored by [`Shard::insert`] (into an empty way or by eviction).
    pub inserts: u64,
    /// Values overwritten in place: [`Shard::insert`] on a present key, and [`Shard::replace`].
    pub updates: u64,
    /// Entries evicted from a full bucket to make room for an insert.
    pub evictions: u64,
    /// Entries removed by [`Shard::remove`].
    pub removals: u64,
    /// Entries removed by [`Shard::sweep`].
    pub swept: u64,
}

/// One stored entry: 56 bytes.
#[derive(Clone, Copy)]
#[repr(C)]
struct Record {
    key: FlowKey,
    backend: u32,
    epoch: u32,
    flags: u8,
    _pad: [u8; 7],
}

impl Record {
    const EMPTY: Record = Record {
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
        _pad: [0; 7],
    };

    fn value(&self) -> EntryValue {
        EntryValue {
            backend: self.backend,
            epoch: self.epoch,
            flags: self.flags,
        }
    }

    fn set_value(&mut self, v: EntryValue) {
        self.backend = v.backend;
        self.epoch = v.epoch;
        self.flags = v.flags;
    }
}

/// One 8-way set: a 64-byte header line and eight records; 512 bytes, 64-byte aligned.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Bucket {
    sig: [u16; WAYS],
    last_seen: [u32; WAYS],
    _reserved: [u8; 16],
    records: [Record; WAYS],
}

const _: () = assert!(size_of::<Record>() == 56);
const _: () = assert!(size_of::<Bucket>() == 512);
const _: () = assert!(align_of::<Bucket>() == 64);
const _: () = assert!(std::mem::offset_of!(Bucket, records) == 64);

impl Bucket {
    const EMPTY: Bucket = Bucket {
        sig: [0; WAYS],
        last_seen: [0; WAYS],
        _reserved: [0; 16],
        records: [Record::EMPTY; WAYS],
    };

    /// Bit `w` set when way `w` has signature `sig` (`sig` 0 gives the empty ways).
    #[inline(always)]
    fn match_mask(&self, sig: u16) -> u32 {
        let mut m = 0u32;
        for (w, &s) in self.sig.iter().enumerate() {
            m |= u32::from(s == sig) << w;
        }
        m
    }

    /// The way holding `key` among the ways whose signature is `sig`.
    #[inline(always)]
    fn find_way(&self, key: &FlowKey, sig: u16) -> Option<usize> {
        let mut m = self.match_mask(sig);
        while m != 0 {
            let w = m.trailing_zeros() as usize;
            if self.records[w].key == *key {
                return Some(w);
            }
            m &= m - 1;
        }
        None
    }

    /// The way seen longest ago (lowest index on ties).
    fn lru_way(&self, now32: u32) -> usize {
        let mut best = 0;
        let mut best_idle = 0u32;
        for (w, &seen) in self.last_seen.iter().enumerate() {
            let idle = now32.wrapping_sub(seen);
            if w == 0 || idle > best_idle {
                best = w;
                best_idle = idle;
            }
        }
        best
    }

    fn entry(&self, w: usize, now32: u32) -> Entry {
        let r = &self.records[w];
        Entry {
            key: r.key,
            value: r.value(),
            idle_ms: idle_ms(now32, self.last_seen[w]),
        }
    }

    fn clear(&mut self, w: usize) {
        self.sig[w] = 0;
        self.last_seen[w] = 0;
        self.records[w] = Record::EMPTY;
    }
}

#[inline(always)]
fn sig_of(hash: u64) -> u16 {
    let s = (hash >> 48) as u16;
    s | u16::from(s == 0)
}

#[inline(always)]
fn stamp(now: Time) -> u32 {
    now.as_millis() as u32
}

#[inline(always)]
fn idle_ms(now32: u32, seen: u32) -> u64 {
    u64::from(now32.wrapping_sub(seen))
}

/// One worker's connection-tracking table. See the module doc.
pub struct Shard {
    buckets: Box<[Bucket]>,
    len: usize,
    cursor: usize,
    stats: ShardStats,
}

impl fmt::Debug for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shard")
            .field("buckets", &self.buckets.len())
            .field("len", &self.len)
            .field("cursor", &self.cursor)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Shard {
    /// A table holding at least `entries` entries (at least 8): the number of buckets is
    /// `entries / 8` rounded up to a power of two. All memory is allocated and written here
    /// (so its pages are faulted in before the first packet); nothing allocates afterwards.
    ///
    /// # Panics
    ///
    /// If `entries` exceeds [`MAX_CAPACITY`].
    pub fn with_capacity(entries: usize) -> Shard {
        assert!(
            entries <= MAX_CAPACITY,
            "conntrack capacity {entries} > {MAX_CAPACITY}"
        );
        let buckets = entries.max(WAYS).div_ceil(WAYS).next_power_of_two();
        let buckets = vec![Bucket::EMPTY; buckets].into_boxed_slice();
        let capacity = (buckets.len() * WAYS) as u64;
        Shard {
            buckets,
            len: 0,
            cursor: 0,
            stats: ShardStats {
                capacity,
                ..ShardStats::default()
            },
        }
    }

    /// Entries the table can hold.
    pub fn capacity(&self) -> usize {
        self.buckets.len() * WAYS
    }

    /// Number of buckets (a power of two).
    pub fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    /// Entries stored.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no entry is stored.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Memory of the table in bytes: [`BYTES_PER_ENTRY`] × [`Shard::capacity`].
    pub fn bytes(&self) -> usize {
        size_of_val(&*self.buckets)
    }

    /// The counters.
    pub fn stats(&self) -> ShardStats {
        ShardStats {
            entries: self.len as u64,
            ..self.stats
        }
    }

    /// The bucket the next [`Shard::sweep`] starts at.
    pub fn sweep_cursor(&self) -> usize {
        self.cursor
    }

    #[inline(always)]
    fn bucket_index(&self, hash: u64) -> usize {
        (hash as usize) & (self.buckets.len() - 1)
    }

    /// Where `key` is stored, if it is. `hash` must be the key's [`crate::flow::FlowHasher`]
    /// hash (the same for every call with that key).
    #[inline]
    pub fn find(&self, key: &FlowKey, hash: u64) -> Option<Slot> {
        let b = self.bucket_index(hash);
        self.buckets[b]
            .find_way(key, sig_of(hash))
            .map(|w| Slot::new(b, w))
    }

    /// [`Shard::find`] for `N` keys at once: the bucket headers of all keys are read and their
    /// signatures compared first, then the candidate keys are compared, so the cache misses of
    /// the `N` lookups overlap (software pipelining, without prefetch intrinsics).
    /// `out[i]` is `find(&keys[i], hashes[i])`.
    ///
    /// Use `N = 8`: on a table much larger than the caches it is about 1.3-1.4× the rate of
    /// one-at-a-time `find` for hits and misses alike, and larger batches measured slower
    /// (`benches/conntrack.rs`, `CONNTRACK_AB=1`). A third stage that touches the candidate
    /// record before comparing did not help either.
    #[inline]
    pub fn find_batch<const N: usize>(
        &self,
        keys: &[FlowKey; N],
        hashes: &[u64; N],
        out: &mut [Option<Slot>; N],
    ) {
        let mut masks = [0u32; N];
        for i in 0..N {
            let b = self.bucket_index(hashes[i]);
            masks[i] = self.buckets[b].match_mask(sig_of(hashes[i]));
        }
        for i in 0..N {
            let b = self.bucket_index(hashes[i]);
            let bucket = &self.buckets[b];
            let mut m = masks[i];
            out[i] = None;
            while m != 0 {
                let w = m.trailing_zeros() as usize;
                if bucket.records[w].key == keys[i] {
                    out[i] = Some(Slot::new(b, w));
                    break;
                }
                m &= m - 1;
            }
        }
    }

    /// Start loading the header line of `hash`'s bucket, to be found by a later
    /// [`Shard::find`] or [`Shard::insert`]. A plain load kept alive by
    /// [`std::hint::black_box`], not a prefetch instruction (see the module doc).
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        black_box(self.buckets[self.bucket_index(hash)].sig[0]);
    }

    /// The entry in `slot` as of `now`. `slot` must be valid (module doc); in debug builds an
    /// empty slot panics, in release it reads as an all-zero entry.
    #[inline]
    pub fn get(&self, slot: Slot, now: Time) -> Entry {
        let bucket = &self.buckets[slot.bucket()];
        debug_assert!(
            bucket.sig[slot.way()] != 0,
            "conntrack get on an empty slot"
        );
        bucket.entry(slot.way(), stamp(now))
    }

    /// [`Shard::find`] then [`Shard::get`].
    #[inline]
    pub fn lookup(&self, key: &FlowKey, hash: u64, now: Time) -> Option<(Slot, Entry)> {
        let b = self.bucket_index(hash);
        let bucket = &self.buckets[b];
        let w = bucket.find_way(key, sig_of(hash))?;
        Some((Slot::new(b, w), bucket.entry(w, stamp(now))))
    }

    /// Restart the entry's idle clock at `now` (CT-8: every packet that hits it).
    #[inline]
    pub fn touch(&mut self, slot: Slot, now: Time) {
        let bucket = &mut self.buckets[slot.bucket()];
        debug_assert!(
            bucket.sig[slot.way()] != 0,
            "conntrack touch on an empty slot"
        );
        bucket.last_seen[slot.way()] = stamp(now);
    }

    /// Overwrite the entry's value in place and restart its idle clock: the replacement entry of
    /// CT-12 for the same key.
    #[inline]
    pub fn replace(&mut self, slot: Slot, value: EntryValue, now: Time) {
        let bucket = &mut self.buckets[slot.bucket()];
        debug_assert!(
            bucket.sig[slot.way()] != 0,
            "conntrack replace on an empty slot"
        );
        bucket.records[slot.way()].set_value(value);
        bucket.last_seen[slot.way()] = stamp(now);
        self.stats.updates += 1;
    }

    /// Remove the entry in `slot`. Removing an empty way does nothing.
    pub fn remove(&mut self, slot: Slot) {
        let bucket = &mut self.buckets[slot.bucket()];
        if bucket.sig[slot.way()] != 0 {
            bucket.clear(slot.way());
            self.len -= 1;
            self.stats.removals += 1;
        }
    }

    /// Store `key -> value` with `now` as last seen (CT-6), and return where.
    ///
    /// An upsert: if `key` is present its value and idle clock are overwritten in place (CT-2:
    /// a new-connection SYN replaces the entry). Otherwise the entry takes an empty way of its
    /// bucket, or, if the bucket is full, evicts the bucket's least recently seen entry, which is
    /// returned and counted. Never fails.
    pub fn insert(
        &mut self,
        key: &FlowKey,
        hash: u64,
        value: EntryValue,
        now: Time,
    ) -> InsertOutcome {
        let b = self.bucket_index(hash);
        let sig = sig_of(hash);
        let now32 = stamp(now);
        let bucket = &mut self.buckets[b];
        if let Some(w) = bucket.find_way(key, sig) {
            bucket.records[w].set_value(value);
            bucket.last_seen[w] = now32;
            self.stats.updates += 1;
            return InsertOutcome {
                slot: Slot::new(b, w),
                overwritten: true,
                evicted: None,
            };
        }
        let empty = bucket.match_mask(0);
        let (w, evicted) = if empty != 0 {
            (empty.trailing_zeros() as usize, None)
        } else {
            let w = bucket.lru_way(now32);
            (w, Some(bucket.entry(w, now32)))
        };
        bucket.sig[w] = sig;
        bucket.last_seen[w] = now32;
        bucket.records[w] = Record {
            key: *key,
            ..Record::EMPTY
        };
        bucket.records[w].set_value(value);
        self.stats.inserts += 1;
        if evicted.is_some() {
            self.stats.evictions += 1;
        } else {
            self.len += 1;
        }
        InsertOutcome {
            slot: Slot::new(b, w),
            overwritten: false,
            evicted,
        }
    }

    /// Examine the next `buckets` buckets (at most the whole table) from a rolling cursor and
    /// remove every entry for which `dead` returns true; returns how many were removed.
    /// Memory reclamation only: validity is decided at lookup by the caller, and `dead`
    /// typically says "idle for at least the largest idle timeout of its service, or its
    /// service/backend is gone". Calls with a total of [`Shard::bucket_count`] buckets visit
    /// every bucket exactly once.
    pub fn sweep(
        &mut self,
        buckets: usize,
        now: Time,
        mut dead: impl FnMut(&Entry) -> bool,
    ) -> usize {
        let n = self.buckets.len();
        let now32 = stamp(now);
        let mut removed = 0;
        for _ in 0..buckets.min(n) {
            let bucket = &mut self.buckets[self.cursor];
            self.cursor = (self.cursor + 1) & (n - 1);
            let mut occupied = !bucket.match_mask(0) & ((1 << WAYS) - 1);
            while occupied != 0 {
                let w = occupied.trailing_zeros() as usize;
                occupied &= occupied - 1;
                if dead(&bucket.entry(w, now32)) {
                    bucket.clear(w);
                    removed += 1;
                }
            }
        }
        self.len -= removed;
        self.stats.swept += removed as u64;
        removed
    }

    /// Every stored entry as of `now`, in slot order. Walks the whole table: for tests, the
    /// admin API and `explain`, never per packet.
    pub fn iter(&self, now: Time) -> impl Iterator<Item = (Slot, Entry)> + '_ {
        let now32 = stamp(now);
        self.buckets
            .iter()
            .enumerate()
            .flat_map(move |(b, bucket)| {
                (0..WAYS)
                    .filter(move |&w| bucket.sig[w] != 0)
                    .map(move |w| (Slot::new(b, w), bucket.entry(w, now32)))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::FlowHasher;

    fn key(i: u32) -> FlowKey {
        let [a, b, c, d] = i.to_be_bytes();
        FlowKey {
            src: Addr::v4(10, b, c, d),
            dst: Addr::v4(192, 0, 2, a),
            sport: 1024 + (i % 60000) as u16,
            dport: 443,
            proto: 6,
            kind: 5,
            service: 1,
        }
    }

    fn val(b: u32) -> EntryValue {
        EntryValue {
            backend: b,
            epoch: 7,
            flags: 1,
        }
    }

    #[test]
    fn layout_is_64_bytes_per_entry() {
        assert_eq!(size_of::<FlowKey>(), 40);
        assert_eq!(size_of::<Record>(), 56);
        assert_eq!(size_of::<Bucket>(), 512);
        assert_eq!(align_of::<Bucket>(), 64);
        assert_eq!(std::mem::offset_of!(Bucket, sig), 0);
        assert_eq!(std::mem::offset_of!(Bucket, last_seen), 16);
        assert_eq!(std::mem::offset_of!(Bucket, records), 64);
        assert_eq!(BYTES_PER_ENTRY, 64);
        let s = Shard::with_capacity(1000);
        assert_eq!(s.bucket_count(), 128);
        assert_eq!(s.capacity(), 1024);
        assert_eq!(s.bytes(), 1024 * 64);
    }

    #[test]
    fn capacity_rounds_up() {
        assert_eq!(Shard::with_capacity(0).capacity(), 8);
        assert_eq!(Shard::with_capacity(8).capacity(), 8);
        assert_eq!(Shard::with_capacity(9).capacity(), 16);
        assert_eq!(Shard::with_capacity(1_250_000).capacity(), 2 * 1024 * 1024);
    }

    #[test]
    fn ct_6_insert_then_find_returns_value_and_zero_idle() {
        let h = FlowHasher::default();
        let mut s = Shard::with_capacity(64);
        let k = key(1);
        let out = s.insert(&k, h.hash(&k), val(3), Time(1000));
        assert!(!out.overwritten && out.evicted.is_none());
        let slot = s.find(&k, h.hash(&k)).unwrap();
        assert_eq!(slot, out.slot);
        let e = s.get(slot, Time(1000));
        assert_eq!((e.key, e.value, e.idle_ms), (k, val(3), 0));
        assert_eq!(s.lookup(&k, h.hash(&k), Time(1500)).unwrap().1.idle_ms, 500);
        assert_eq!(s.find(&key(2), h.hash(&key(2))), None);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn ct_2_insert_on_present_key_overwrites_in_place() {
        let h = FlowHasher::default();
        let mut s = Shard::with_capacity(64);
        let k = key(1);
        let a = s.insert(&k, h.hash(&k), val(3), Time(0));
        let b = s.insert(&k, h.hash(&k), val(4), Time(900));
        assert_eq!(a.slot, b.slot);
        assert!(b.overwritten);
        assert_eq!(s.get(b.slot, Time(1000)).value, val(4));
        assert_eq!(s.get(b.slot, Time(1000)).idle_ms, 100);
        assert_eq!(s.len(), 1);
        let st = s.stats();
        assert_eq!((st.inserts, st.updates, st.evictions), (1, 1, 0));
    }

    #[test]
    fn ct_8_touch_restarts_idle_clock() {
        let h = FlowHasher::default();
        let mut s = Shard::with_capacity(64);
        let k = key(9);
        let slot = s.insert(&k, h.hash(&k), val(1), Time(10_000)).slot;
        assert_eq!(s.get(slot, Time(610_000)).idle_ms, 600_000);
        s.touch(slot, Time(400_000));
        assert_eq!(s.get(slot, Time(610_000)).idle_ms, 210_000);
    }

    #[test]
    fn ct_12_replace_overwrites_value_and_restarts_clock() {
        let h = FlowHasher::default();
        let mut s = Shard::with_capacity(64);
        let k = key(9);
        let slot = s.insert(&k, h.hash(&k), val(1), Time(0)).slot;
        s.replace(slot, val(2), Time(50));
        let e = s.get(slot, Time(60));
        assert_eq!((e.key, e.value, e.idle_ms), (k, val(2), 10));
    }

    #[test]
    fn full_bucket_evicts_least_recently_seen() {
        // A constant hash puts every key in bucket 0 with the same signature.
        let mut s = Shard::with_capacity(64);
        for i in 0..8 {
            s.insert(&key(i), 0, val(i), Time(u64::from(i) * 10));
        }
        s.touch(s.find(&key(0), 0).unwrap(), Time(100)); // key 1 is now the oldest
        let out = s.insert(&key(100), 0, val(100), Time(110));
        let ev = out.evicted.unwrap();
        assert_eq!((ev.key, ev.idle_ms), (key(1), 100));
        assert_eq!(s.find(&key(1), 0), None);
        assert!((0..8)
            .filter(|&i| i != 1)
            .all(|i| s.find(&key(i), 0).is_some()));
        assert_eq!(s.stats().evictions, 1);
        assert_eq!(s.len(), 8);
    }

    #[test]
    fn remove_empty_way_is_a_no_op() {
        let mut s = Shard::with_capacity(8);
        let slot = s.insert(&key(1), 5, val(1), Time(0)).slot;
        s.remove(slot);
        s.remove(slot);
        assert_eq!((s.len(), s.stats().removals), (0, 1));
        assert_eq!(s.find(&key(1), 5), None);
    }

    #[test]
    fn zero_key_is_found_only_when_inserted() {
        // Empty ways hold an all-zero record; the signature, never 0, keeps them from matching.
        let mut s = Shard::with_capacity(8);
        let zero = FlowKey::default();
        for hash in [0, 1, u64::MAX, 1 << 48] {
            assert_eq!(s.find(&zero, hash), None);
        }
        let slot = s.insert(&zero, 0, val(1), Time(0)).slot;
        assert_eq!(s.find(&zero, 0), Some(slot));
    }

    #[test]
    fn debug_does_not_dump_the_table() {
        let s = Shard::with_capacity(1 << 16);
        let d = format!("{s:?}");
        assert!(d.len() < 400, "{d}");
        assert!(d.contains("buckets: 8192"));
    }

    /// Sizing guidance for the module doc: the share of inserted keys that evict an entry
    /// when a table is filled to a given load with uniformly hashed keys.
    #[test]
    fn eviction_rate_by_load() {
        let h = FlowHasher::default();
        let cap = 1 << 14;
        for (load, max_rate) in [(0.25, 0.0005), (0.5, 0.01), (0.75, 0.06), (0.9, 0.15)] {
            let mut s = Shard::with_capacity(cap);
            let n = (cap as f64 * load) as u32;
            for i in 0..n {
                s.insert(&key(i), h.hash(&key(i)), val(i), Time(u64::from(i)));
            }
            let rate = s.stats().evictions as f64 / f64::from(n);
            println!("load {load}: {:.3}% of inserts evicted", rate * 100.0);
            assert!(rate <= max_rate, "load {load}: eviction rate {rate}");
        }
    }
}
