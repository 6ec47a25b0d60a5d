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
//! caller did not remove except by evicting it when both of the new key's candidate buckets
//! are full and none of their entries can move (counted), never allocate after
//! [`Shard::with_capacity`], and never fail an insert or a lookup because it is full.
//!
//! # Files
//!
//! | file | what it holds |
//! |---|---|
//! | `mod.rs` | the table, its public types, lookups, removal, iteration |
//! | `layout.rs` | a bucket's header and records, the signature compare (SSE2 or SWAR) |
//! | `hash.rs` | the key hash, and the signature and buckets it gives |
//! | `insert.rs` | inserts, the flood guard |
//! | `room.rs` | making room: the move out of a full primary, the eviction, the full-bucket bitmap |
//! | [`burst`] | the staged lookup/insert pipeline for a burst of packets |
//! | `sweep.rs` | the sweep that reclaims entries |
//!
//! # Layout
//!
//! Set-associative: a power-of-two number of 16-way buckets, kept in two arrays. A bucket's
//! *header* (64 bytes, one cache line) holds what a lookup scans; its sixteen *records*
//! (64 bytes each, one cache line each) hold the entries:
//!
//! ```text
//! Header: sig [u16; 16]   16-bit signature per way, 0 = empty way
//!         overflow u32    entries whose primary is this bucket, stored in their secondary
//!         seen [u8; 16]   coarse last seen per way (units of 1,024 ms; see Eviction)
//!         reserved 12 B   zero
//!
//! Record: key FlowKey (40) | backend u32 | epoch u32 | flags u8 | in_secondary u8
//!         | sig u16 (the header's signature of this way, 0 = empty)
//!         | other u32 (the key's other candidate bucket) | last_seen u32 (ms, wrapping)
//!         | reserved 4
//! ```
//!
//! That is [`BYTES_PER_ENTRY`] = 68 bytes per tracked connection (64 for the record, 4 for
//! its share of the header): 1M connections at 100% load are 68 MiB. A lookup that hits reads
//! one header and *one* record line, and writes only that record line (`last_seen`): the
//! headers, 1/17 of the table, stay clean and small enough to stay in the caches far longer
//! than the records. A hit in the key's home way (below) reads the record line alone. (A layout
//! with the header inline and records at a 56-byte stride took 64 bytes per connection, but a
//! hit read 2.75 lines on average and cost 25-30% more per packet at a million flows.)
//!
//! The key's hash ([`key_hash`]; the shard takes any well-mixed 64-bit hash) picks the
//! signature with its top 16 bits (0 is mapped to 1) and two candidate buckets (below).
//!
//! # Two choices (Cuckoo++-style, without displacement chains)
//!
//! A key has a *primary* bucket `p = hash & mask` (the low bits) and a *secondary* bucket `s =
//! (p ^ (spread(sig) | 1)) & mask` ([`Shard::candidate_buckets`]), where `spread` mixes the
//! 16-bit signature into 32 bits (a multiplication by the 64-bit golden-ratio constant, high
//! half). The XOR-ed value is odd, so `s != p` whenever the table has two buckets or more (a
//! one-bucket table has a single candidate), and the same formula leads back from `s` to `p`:
//! an entry's other candidate bucket follows from the bucket it is in and its signature, both in
//! the header (partial-key cuckoo hashing, as in cuckoo filters). A move that makes room for a
//! new key therefore finds where each of the primary's 16 entries could go from its header,
//! without reading their records. The signature's bits are disjoint from the bits of `p` for
//! any table size ([`MAX_CAPACITY`] is 2^27 buckets), so the keys sharing a primary spread over
//! up to 65,535 secondaries.
//!
//! Sixteen ways rather than eight: fewer inserts find both buckets full (a tenth at 80% load
//! against a fifth, a third at 90% against a half) and fewer evict (0.81% of the inserts that
//! fill a table, against 1.56%).
//!
//! # Home ways
//!
//! A new entry takes its key's *home way* (hash bits 32..36) of its primary bucket when that
//! way is empty, else the lowest empty way. Each record repeats its way's signature, so a lookup
//! can read the home way's record first, before or instead of the header: when the record's
//! signature (and then key) match, the lookup has read one line of the table, not two. With
//! uniformly hashed keys, three entries in four are in their home way at half load (87% at a
//! quarter, 60% at 80%); the others are found through the header.
//!
//! Each bucket's `overflow` counts the entries whose *primary* it is and that are stored in
//! their secondary. A lookup scans the primary's signatures; only if the key is not there **and**
//! the primary's `overflow` is non-zero does it scan the secondary. A miss on a table whose
//! buckets have not overflowed touches one header, as with one choice. Every record says whether
//! it is in its secondary and names the key's *other* candidate bucket (`other`), so removing,
//! evicting, sweeping or moving an entry keeps the counters exact without the key's hash.
//!
//! A lookup reads the header, compares the sixteen signatures at once, and compares the full
//! 40-byte key only on a signature match (a false signature match costs one key compare and
//! is rare: 16/65536 per full bucket).
//!
//! # Eviction and sizing
//!
//! An insert of a new key takes an empty way of its primary bucket (its home way when empty),
//! else an empty way of its secondary (incrementing the primary's `overflow`). If both are full,
//! it moves *one* entry of the primary to that entry's other candidate bucket, if one has an
//! empty way there, and takes the way it left; only if none can move does it evict the least
//! recently seen of the primary's 16 entries, to within [`SEEN_UNIT_MS`] (about a second), report
//! it ([`InsertOutcome::evicted`], [`ShardStats::evictions`]) and take its way (`room.rs` has
//! how). With uniformly hashed keys, filling a table to 90% evicts none of the inserted keys,
//! to 95% about 0.03% and to 100% about 0.8% (the `eviction_rate_by_load` test prints the
//! figures). The evicted entry is the oldest of the sixteen, so an expired entry not yet swept
//! goes first; only sixteen live entries with no room elsewhere lose a live connection.
//!
//! About a third of the buckets have a non-zero `overflow` at 90% load (0.1% at 50%, 10% at
//! 75%), so misses on a loaded table often read a second header. Size the capacity at about
//! 1.25x the connections a worker must hold; [`Shard::with_capacity`] rounds up to a power of
//! two buckets, so it often gives more.
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
//!
//! # Slots and hints
//!
//! [`Shard::find`] and [`Shard::insert`] return a [`Slot`], a handle to one way (of either
//! candidate bucket). A slot stays valid until the next [`Shard::insert`], [`Shard::remove`] or
//! [`Shard::sweep`] (any of which may empty or reuse that way; an insert may also move one
//! other entry to make room); [`Shard::get`], [`Shard::touch`] and [`Shard::replace`] keep it
//! valid. The usual per-packet sequence is `find` -> `get` -> (`touch` | `replace`), or
//! `insert` on a miss.
//!
//! A [`Hint`] is where a key's entry probably is, found by the burst pipeline ([`burst`]) when
//! the key's lines arrived; [`Shard::find_hinted`] and [`Shard::hinted_hit`] check that slot
//! first (its signature and the whole key, both in the record). A hint is never trusted: one
//! that no longer holds the key, after any insert, removal, move or sweep, only costs the check.

use std::fmt;

use crate::flow::FlowKey;
use crate::time::Time;

pub mod burst;
mod hash;
mod insert;
mod layout;
mod room;
mod sweep;
#[cfg(test)]
mod tests;

pub use burst::{Ask, Burst, Pending};
pub use hash::key_hash;
pub use layout::{SEEN_CAP, SEEN_UNIT_MS};

use hash::sig_of;
pub use insert::Absent;
use insert::FloodGuard;
use layout::{find_in_mask, Head, Record, Ways};
use room::{PlannedMove, PLANNED_MOVES};

/// Ways (entries) per bucket.
pub const WAYS: usize = 16;

/// Size of one bucket in bytes: its 64-byte header (signatures and overflow counter) and its
/// sixteen 64-byte records.
pub const BUCKET_BYTES: usize = size_of::<Head>() + size_of::<Ways>();

/// Alignment of a record: a cache line.
pub const RECORD_ALIGN: usize = align_of::<Record>();

/// Memory per tracked connection: [`BUCKET_BYTES`] / [`WAYS`] = 68 bytes.
pub const BYTES_PER_ENTRY: usize = BUCKET_BYTES / WAYS;

/// Largest capacity [`Shard::with_capacity`] accepts (a [`Slot`] is a `u32`).
pub const MAX_CAPACITY: usize = 1 << 31;

/// The entries a table made for `entries` holds ([`Shard::with_capacity`]): whole buckets of
/// [`WAYS`], a power of two of them, at least one.
pub fn rounded_capacity(entries: usize) -> usize {
    entries.max(WAYS).div_ceil(WAYS).next_power_of_two() * WAYS
}

/// A flag bit of [`EntryValue::flags`] that the shard reads: the entry is a *copy* (a peer
/// instance's entry, fleet sync). Copies are counted and limited ([`Shard::set_copy_limit`],
/// [`Shard::insert_absent`]), do not count towards a full table for the flood guard, and give
/// their way to a new entry whose two candidate buckets are full (when no entry can move)
/// before any entry is evicted or the flood guard refuses: a copy never pushes out or blocks
/// an entry of the table's own.
pub const FLAG_COPY: u8 = 0x80;

/// A flag bit of [`EntryValue::flags`] that the shard reads: the entry's departure is reported.
/// When an entry with this bit is removed, evicted, swept, or has its value overwritten
/// ([`Shard::insert`] on its key, [`Shard::replace`]), its key and the value it had are kept
/// for [`Shard::take_departed`] (fleet sync tells the peers that held a copy of it).
pub const FLAG_SHARED: u8 = 0x40;

/// Departures kept for [`Shard::take_departed`] between two calls; more are counted as lost
/// ([`ShardStats::departures_lost`]). The worker drains them between bursts: a burst overwrites
/// at most one entry per packet.
pub const DEPARTED_CAPACITY: usize = 1024;

/// The value stored with a key. Opaque to the shard, which stores and returns it unchanged,
/// except for two bits of `flags` it reads ([`FLAG_COPY`], [`FLAG_SHARED`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct EntryValue {
    /// The caller's backend reference (e.g. slot and generation in the snapshot's table).
    pub backend: u32,
    /// The service flush epoch when the entry was created (FO-9).
    pub epoch: u32,
    /// Caller-defined bits (e.g. "created while its backend was unhealthy", CP-5), and the
    /// shard's two ([`FLAG_COPY`], [`FLAG_SHARED`]).
    pub flags: u8,
}

impl EntryValue {
    /// Is this a copy of a peer's entry ([`FLAG_COPY`])?
    #[inline(always)]
    pub fn is_copy(&self) -> bool {
        self.flags & FLAG_COPY != 0
    }

    /// Is its departure reported ([`FLAG_SHARED`])?
    #[inline(always)]
    pub fn is_shared(&self) -> bool {
        self.flags & FLAG_SHARED != 0
    }
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

/// A handle to one way of the table: `bucket * WAYS + way`. See the module doc for how long it
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

    /// The bucket this way belongs to (the key's primary or secondary bucket).
    pub fn bucket(self) -> usize {
        self.index() / WAYS
    }

    fn way(self) -> usize {
        self.index() % WAYS
    }
}

/// Where a key's record probably is (found by the [`burst`] pipeline), for
/// [`Shard::find_hinted`]: a slot,
/// or none. Four bytes, so that it fits in the padding of a lookup's prepared half.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hint(u32);

impl Hint {
    /// No hint: the lookup scans the signatures.
    pub const NONE: Hint = Hint(u32::MAX);
}

/// An entry found by [`Shard::hinted_hit`]: its value and idle time, and its record, whose
/// idle clock [`Hit::touch`] restarts without looking the slot up again.
pub struct Hit<'a> {
    /// The entry's value.
    pub value: EntryValue,
    /// Milliseconds since the entry was last touched.
    pub idle_ms: u64,
    now32: u32,
    record: &'a mut Record,
}

impl fmt::Debug for Hit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hit").field("value", &self.value).field("idle_ms", &self.idle_ms).finish()
    }
}

impl Hit<'_> {
    /// Restart the entry's idle clock at the time of the lookup (CT-8).
    #[inline(always)]
    pub fn touch(self) {
        self.record.last_seen = self.now32;
    }
}

/// What [`Shard::insert`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InsertOutcome {
    /// Where the entry now is.
    pub slot: Slot,
    /// The key was already present: its value and idle clock were overwritten in place
    /// (e.g. a new-connection SYN replacing an entry, CT-2); this was its previous value.
    pub overwritten: Option<EntryValue>,
    /// Both candidate buckets of the key were full, no entry of its primary could move, and
    /// this entry, the least recently seen of the primary's 16 ways (to within
    /// [`SEEN_UNIT_MS`]), was evicted to make room. Whether that entry was still valid is for
    /// the caller to judge (e.g. `idle_ms` against the idle timeout): evicting a valid entry
    /// loses a tracked connection.
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
    /// Entries evicted to make room for an insert whose two candidate buckets were full.
    pub evictions: u64,
    /// Entries removed by [`Shard::remove`].
    pub removals: u64,
    /// Entries removed by [`Shard::sweep`].
    pub swept: u64,
    /// New connections the flood guard did not admit ([`Shard::admit_new`]): forwarded by the
    /// hash alone, untracked.
    pub bypassed: u64,
    /// Copies ([`FLAG_COPY`]) stored now.
    pub copies: u64,
    /// Copies whose way a new entry took because its candidate buckets were full.
    pub copies_displaced: u64,
    /// Departures ([`FLAG_SHARED`]) not kept: more than [`DEPARTED_CAPACITY`] between two
    /// [`Shard::take_departed`].
    pub departures_lost: u64,
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
    /// Bucket headers: signatures and overflow counters, 64 bytes each.
    heads: Box<[Head]>,
    /// Bucket `b`'s records are `records[b]`.
    records: Box<[Ways]>,
    len: usize,
    guard: Option<FloodGuard>,
    cursor: usize,
    stats: ShardStats,
    /// The moves the burst pipeline's move planning (`Shard::plan_move`) found for the inserts about to come, by key hash
    /// (its low bits pick the place): the insert takes its planned move if it still holds,
    /// instead of searching the 16 headers again.
    planned: [PlannedMove; PLANNED_MOVES],
    /// How the recent inserts into two full buckets ended, for [`Shard::evicting`]: one up
    /// (to [`EVICT_TREND_MAX`]) for each that evicted, one down for each that moved an entry.
    evict_trend: u8,
    /// Buckets known to be full, one bit each: set when the search for a move that makes room
    /// finds the bucket full, or an insert into two full buckets leaves them so, and cleared
    /// whenever one of its ways is emptied ([`Shard::vacate`]). A set bit is always true; a clear one says nothing.
    /// The search and its prefetch skip the headers of buckets known full: in a table past 90%
    /// load most of the 16 a crowded insert would read. (One bit per 16 entries: 128 KiB for
    /// 16M entries, which stays in the caches where the headers, 64 MiB, do not.)
    known_full: Box<[u64]>,
    /// The time (milliseconds, as stored) of the latest insert past the inlined common case,
    /// or sweep: the "now" by which the burst pipeline's move planning (`Shard::plan_move`) names the record the eviction
    /// reads first (a prefetch only; the eviction itself uses its own `now`).
    clock: u32,
    /// Copies ([`FLAG_COPY`]) stored, and the most [`Shard::insert_absent`] stores.
    copies: usize,
    copy_limit: usize,
    /// Entries with [`FLAG_SHARED`] that left or changed, oldest first, until
    /// [`Shard::take_departed`] (at most [`DEPARTED_CAPACITY`]; allocated once).
    departed: Vec<(FlowKey, EntryValue)>,
}

impl fmt::Debug for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shard")
            .field("buckets", &self.heads.len())
            .field("len", &self.len)
            .field("cursor", &self.cursor)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Shard {
    /// A table holding at least `entries` entries (at least [`WAYS`]): the number of buckets
    /// is `entries / WAYS` rounded up to a power of two ([`rounded_capacity`]). All memory is allocated and written here
    /// (so its pages are faulted in before the first packet); nothing allocates afterwards.
    ///
    /// # Panics
    ///
    /// If `entries` exceeds [`MAX_CAPACITY`].
    pub fn with_capacity(entries: usize) -> Shard {
        Shard::with_capacity_advised(entries, |_, _| {})
    }

    /// [`Shard::with_capacity`], calling `advise(start, bytes)` on each of the table's two
    /// arrays after it is reserved and before it is first written. The data plane uses it to
    /// ask the kernel for transparent huge pages (`madvise(MADV_HUGEPAGE)`): a table much
    /// larger than the caches is then also much larger than what the TLB covers with 4 KiB
    /// pages, and a page walk per lookup costs as much as the lookup itself.
    ///
    /// # Panics
    ///
    /// If `entries` exceeds [`MAX_CAPACITY`].
    pub fn with_capacity_advised(
        entries: usize,
        mut advise: impl FnMut(*const u8, usize),
    ) -> Shard {
        assert!(entries <= MAX_CAPACITY, "conntrack capacity {entries} > {MAX_CAPACITY}");
        let n = rounded_capacity(entries) / WAYS;
        let mut heads: Vec<Head> = Vec::with_capacity(n);
        advise(heads.as_ptr().cast::<u8>(), n * size_of::<Head>());
        heads.resize(n, Head::EMPTY);
        let mut records: Vec<Ways> = Vec::with_capacity(n);
        advise(records.as_ptr().cast::<u8>(), n * size_of::<Ways>());
        records.resize(n, [Record::EMPTY; WAYS]);
        let capacity = (n * WAYS) as u64;
        Shard {
            heads: heads.into_boxed_slice(),
            records: records.into_boxed_slice(),
            len: 0,
            guard: None,
            cursor: 0,
            stats: ShardStats { capacity, ..ShardStats::default() },
            planned: [PlannedMove::NONE; PLANNED_MOVES],
            evict_trend: 0,
            clock: 0,
            known_full: vec![0; n.div_ceil(64)].into_boxed_slice(),
            copies: 0,
            copy_limit: (n * WAYS) / 2,
            departed: Vec::with_capacity(DEPARTED_CAPACITY),
        }
    }

    /// Remove every entry at once, keeping the memory (and the counters, which count what
    /// happened before). Benchmarks of fresh inserts start each round from an empty table
    /// this way without the page faults of a new one.
    pub fn clear(&mut self) {
        self.heads.fill(Head::EMPTY);
        self.records.fill([Record::EMPTY; WAYS]);
        self.len = 0;
        self.cursor = 0;
        self.planned = [PlannedMove::NONE; PLANNED_MOVES];
        self.evict_trend = 0;
        self.known_full.fill(0);
        self.copies = 0;
        self.departed.clear();
    }

    /// Entries the table can hold.
    pub fn capacity(&self) -> usize {
        self.heads.len() * WAYS
    }

    /// Number of buckets (a power of two).
    pub fn bucket_count(&self) -> usize {
        self.heads.len()
    }

    /// Entries stored.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no entry is stored.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Memory of the table in bytes: [`BYTES_PER_ENTRY`] × [`Shard::capacity`] (plus
    /// `known_full`'s bit per bucket, 1/8,704 of that, not counted).
    pub fn bytes(&self) -> usize {
        size_of_val(&*self.heads) + size_of_val(&*self.records)
    }

    /// The counters.
    pub fn stats(&self) -> ShardStats {
        ShardStats { entries: self.len as u64, copies: self.copies as u64, ..self.stats }
    }

    /// Copies ([`FLAG_COPY`]) stored.
    pub fn copies(&self) -> usize {
        self.copies
    }

    /// The most copies [`Shard::insert_absent`] stores (half the capacity unless set).
    pub fn copy_limit(&self) -> usize {
        self.copy_limit
    }

    /// Let [`Shard::insert_absent`] store at most `limit` copies (clamped to the capacity).
    pub fn set_copy_limit(&mut self, limit: usize) {
        self.copy_limit = limit.min(self.capacity());
    }

    /// Hand every departure kept since the last call ([`FLAG_SHARED`]: the key and the value
    /// the entry had) to `f`, oldest first, and forget them.
    pub fn take_departed(&mut self, mut f: impl FnMut(&FlowKey, EntryValue)) {
        for (key, value) in self.departed.drain(..) {
            f(&key, value);
        }
    }

    /// Are departures waiting for [`Shard::take_departed`]?
    #[inline]
    pub fn has_departed(&self) -> bool {
        !self.departed.is_empty()
    }

    /// An entry with `old` as its value (and `key`) left or got another value: keep its
    /// departure if it was shared, count it out if it was a copy. Only on the rare paths (an
    /// overwrite, a replacement, a removal): the common insert and hit never call it.
    #[inline]
    fn left(&mut self, key: &FlowKey, old: EntryValue) {
        if old.flags & (FLAG_COPY | FLAG_SHARED) == 0 {
            return;
        }
        if old.is_copy() {
            self.copies -= 1;
        }
        if old.is_shared() {
            if self.departed.len() < DEPARTED_CAPACITY {
                self.departed.push((*key, old));
            } else {
                self.stats.departures_lost += 1;
            }
        }
    }

    /// [`Shard::left`] of the old value, and a copy counted in if the new value is one.
    #[inline]
    fn changed(&mut self, key: &FlowKey, old: EntryValue, new: EntryValue) {
        self.left(key, old);
        if new.is_copy() {
            self.copies += 1;
        }
    }

    /// The bucket the next [`Shard::sweep`] starts at.
    pub fn sweep_cursor(&self) -> usize {
        self.cursor
    }

    /// The two buckets a key with this hash may be stored in: `(primary, secondary)` (module
    /// doc). They differ unless the table has a single bucket.
    pub fn candidate_buckets(&self, hash: u64) -> (usize, usize) {
        let p = self.bucket_index(hash);
        (p, self.secondary_index(p, hash))
    }

    #[inline(always)]
    fn bucket_index(&self, hash: u64) -> usize {
        (hash as usize) & (self.heads.len() - 1)
    }

    /// The secondary bucket of a key whose primary is `primary`: [`Shard::other_bucket`] of its
    /// signature.
    #[inline(always)]
    fn secondary_index(&self, primary: usize, hash: u64) -> usize {
        self.other_bucket(primary, sig_of(hash))
    }

    /// The other candidate bucket of an entry with signature `sig` stored in bucket `b`: `b`
    /// XOR an odd number spread from the signature, so it differs from `b` in a table of two
    /// buckets or more, and `other_bucket(other_bucket(b, sig), sig) == b`. From the header
    /// alone: a move that makes room finds where each of 16 entries could go without reading
    /// their records (partial-key cuckoo hashing).
    #[inline(always)]
    fn other_bucket(&self, b: usize, sig: u16) -> usize {
        let spread = (u64::from(sig).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize;
        (b ^ (spread | 1)) & (self.heads.len() - 1)
    }

    /// The rare half of a lookup: `key` is not in its primary bucket `primary`, whose
    /// `overflow` is non-zero; look in the secondary.
    #[inline(never)]
    fn find_secondary(&self, key: &FlowKey, hash: u64, primary: usize) -> Option<Slot> {
        let b = self.secondary_index(primary, hash);
        self.find_way(b, key, sig_of(hash)).map(|w| Slot::new(b, w))
    }

    /// Where `key` is stored, if it is. `hash` must be the key's hash, the same for every call
    /// with that key ([`key_hash`] in the product).
    #[inline(always)]
    pub fn find(&self, key: &FlowKey, hash: u64) -> Option<Slot> {
        let b = self.bucket_index(hash);
        match self.find_way(b, key, sig_of(hash)) {
            Some(w) => Some(Slot::new(b, w)),
            None if self.heads[b].overflow != 0 => self.find_secondary(key, hash, b),
            None => None,
        }
    }

    /// The way holding `key` in bucket `b` among the ways whose signature is `sig`.
    #[inline(always)]
    fn find_way(&self, b: usize, key: &FlowKey, sig: u16) -> Option<usize> {
        find_in_mask(&self.records[b], key, self.heads[b].match_mask(sig))
    }

    /// The slot `hint` points at, if it holds `key` (`hash` is the key's hash): its record
    /// holds the key's signature (so the way is occupied) and the key. The check every use of
    /// a hint makes: a hint is never trusted.
    #[inline(always)]
    fn hinted_slot(&self, key: &FlowKey, hash: u64, hint: Hint) -> Option<Slot> {
        if hint == Hint::NONE {
            return None;
        }
        let s = Slot(hint.0);
        let r = self.records.get(s.bucket())?.get(s.way())?;
        // The record's copy of the signature: the header is not read (a hit by the home way
        // never brings it into the cache).
        (r.sig == sig_of(hash) && r.key == *key).then_some(s)
    }

    /// [`Shard::find`], trying first the slot `hint` (found by the [`burst`] pipeline for the same hash, at
    /// any time before: a hint that no longer holds the key, after inserts, removals or
    /// moves, only costs the check). Exact whatever the hint: a key is stored at most once,
    /// and the slot is taken only if its way is occupied with the key's signature and holds
    /// the key.
    #[inline(always)]
    pub fn find_hinted(&self, key: &FlowKey, hash: u64, hint: Hint) -> Option<Slot> {
        self.hinted_slot(key, hash, hint).or_else(|| self.find(key, hash))
    }

    /// The entry in the hinted slot, if that slot holds `key` (`hash` is the key's hash), as
    /// a [`Hit`] that can restart its idle clock: [`Shard::lookup`] when the hint holds, else
    /// `None`, with no search (the caller then looks up in full, e.g. with
    /// [`Shard::find_hinted`]).
    #[inline(always)]
    pub fn hinted_hit(
        &mut self,
        key: &FlowKey,
        hash: u64,
        hint: Hint,
        now: Time,
    ) -> Option<Hit<'_>> {
        let slot = self.hinted_slot(key, hash, hint)?;
        let record = self.record_mut(slot);
        let now32 = stamp(now);
        Some(Hit {
            value: record.value(),
            idle_ms: idle_ms(now32, record.last_seen),
            now32,
            record,
        })
    }

    /// The entry in `slot` as of `now`. `slot` must be valid (module doc); in debug builds an
    /// empty slot panics, in release it reads as an all-zero entry.
    #[inline]
    pub fn get(&self, slot: Slot, now: Time) -> Entry {
        debug_assert!(self.occupied(slot), "conntrack get on an empty slot");
        self.record(slot).entry(stamp(now))
    }

    /// [`Shard::find`] then [`Shard::get`].
    #[inline]
    pub fn lookup(&self, key: &FlowKey, hash: u64, now: Time) -> Option<(Slot, Entry)> {
        let slot = self.find(key, hash)?;
        Some((slot, self.record(slot).entry(stamp(now))))
    }

    /// Restart the entry's idle clock at `now` (CT-8: every packet that hits it).
    #[inline]
    pub fn touch(&mut self, slot: Slot, now: Time) {
        debug_assert!(self.occupied(slot), "conntrack touch on an empty slot");
        self.record_mut(slot).last_seen = stamp(now);
    }

    /// Overwrite the entry's value in place and restart its idle clock: the replacement entry of
    /// CT-12 for the same key.
    #[inline]
    pub fn replace(&mut self, slot: Slot, value: EntryValue, now: Time) {
        debug_assert!(self.occupied(slot), "conntrack replace on an empty slot");
        let r = self.record_mut(slot);
        let (key, old) = (r.key, r.value());
        r.set_value(value);
        r.last_seen = stamp(now);
        self.stats.updates += 1;
        self.changed(&key, old, value);
    }

    /// Set the entry's flags, leaving its idle clock and the rest of its value as they are (a
    /// scan marking an entry shared, or no longer so). [`FLAG_COPY`] is kept as it was: an
    /// entry becomes or stops being a copy only through [`Shard::replace`].
    pub fn set_flags(&mut self, slot: Slot, flags: u8) {
        debug_assert!(self.occupied(slot), "conntrack set_flags on an empty slot");
        let r = self.record_mut(slot);
        r.flags = (flags & !FLAG_COPY) | (r.flags & FLAG_COPY);
    }

    #[inline(always)]
    fn record(&self, slot: Slot) -> &Record {
        &self.records[slot.bucket()][slot.way()]
    }

    #[inline(always)]
    fn record_mut(&mut self, slot: Slot) -> &mut Record {
        &mut self.records[slot.bucket()][slot.way()]
    }

    fn occupied(&self, slot: Slot) -> bool {
        self.heads[slot.bucket()].sig[slot.way()] != 0
    }

    /// Empty way `w` of bucket `b` (occupied), keeping its primary's `overflow` exact, the
    /// copies counted and a shared entry's departure kept.
    fn clear_way(&mut self, b: usize, w: usize) {
        let r = &self.records[b][w];
        let (home, key, old) = (r.overflowed_from(), r.key, r.value());
        self.vacate(b, w);
        if let Some(home) = home {
            self.heads[home].overflow -= 1;
        }
        self.left(&key, old);
    }

    /// Empty way `w` of bucket `b`, without any bookkeeping but `known_full`'s.
    fn vacate(&mut self, b: usize, w: usize) {
        self.heads[b].sig[w] = 0;
        self.records[b][w] = Record::EMPTY;
        self.known_full[b / 64] &= !(1 << (b % 64));
    }

    /// Remove the entry in `slot`. Removing an empty way does nothing.
    pub fn remove(&mut self, slot: Slot) {
        if self.occupied(slot) {
            self.clear_way(slot.bucket(), slot.way());
            self.len -= 1;
            self.stats.removals += 1;
        }
    }

    /// Every stored entry as of `now`, in slot order. Walks the whole table: for tests, the
    /// admin API and `explain`, never per packet.
    pub fn iter(&self, now: Time) -> impl Iterator<Item = (Slot, Entry)> + '_ {
        self.entries_in(0..self.heads.len(), now)
    }

    /// The entries stored in the buckets `buckets` (clamped to the table), as of `now`, in
    /// slot order: a walk of the table in slices, a few buckets between two bursts, so that
    /// no slice holds a worker up for long.
    pub fn entries_in(
        &self,
        buckets: std::ops::Range<usize>,
        now: Time,
    ) -> impl Iterator<Item = (Slot, Entry)> + '_ {
        let now32 = stamp(now);
        let end = buckets.end.min(self.heads.len());
        let start = buckets.start.min(end);
        (start..end).flat_map(move |b| {
            let (head, ways) = (&self.heads[b], &self.records[b]);
            (0..WAYS)
                .filter(move |&w| head.sig[w] != 0)
                .map(move |w| (Slot::new(b, w), ways[w].entry(now32)))
        })
    }
}
