//! Making room for a new entry whose two candidate buckets are full.
//!
//! **The move.** The insert moves *one* entry of the primary to that entry's other candidate
//! bucket, if one has an empty way there (the first found; at most 16 headers read, none of a
//! bucket already known to be full, then the one record that moves, and never a chain of moves),
//! and takes the way it left ([`Shard::relocate_one`]). Only the primary's 16 entries are
//! candidates: searching the secondary's too would read 32 headers for a move that the
//! primary's alone find for all but a few inserts below 97% load. The burst pipeline finds the
//! move a few packets ahead and remembers it (`planned`); the insert takes it if it still holds.
//!
//! **The eviction.** Only if none can move does the insert evict the least recently seen of the
//! primary's 16 entries, to within [`SEEN_UNIT_MS`](super::SEEN_UNIT_MS) (ties go to the lowest way). It finds that
//! entry from the header, reading one record rather than sixteen: each way has a one-byte
//! *coarse last seen* there (units of 1,024 ms), written when the entry is made, moved or swept,
//! never by a hit (the header stays clean, and a hit writes one line). It is never later than
//! the record's `last_seen`, so the way whose header is the oldest is the oldest entry unless it
//! has been seen since; the eviction reads that way's record, and if it has, brings the header
//! up to date and reads the next oldest (at most sixteen, each read correcting a header for
//! good). Entries made and not seen again since (a flood of SYNs, or any table swept since its
//! last hits) cost one record read; in a full table that halves the time of an insert against
//! reading the sixteen. Coarse times wrap every 256 units (about 4.4 minutes), so the sweep
//! writes the header of an entry idle for `SEEN_CAP` units (about 2.2 minutes) or more as
//! exactly that old: to the eviction all such entries are equally old, and a table that is not
//! swept for minutes can pass over an entry idle for more than 4.4 minutes (the worker sweeps
//! every bucket every 10 s). (A 12-bit time in units of 256 ms, which the header has room for,
//! cost 17 more instructions per new connection, for packing the high bits two ways to a byte.)
//!
//! **Buckets known to be full.** A bitmap beside the table, one bit per bucket (`known_full`:
//! 128 KiB for 16M entries, which stays in the caches where the headers do not): a bit is set
//! when the move's search reads a full header or a crowded insert leaves its two buckets full,
//! and cleared whenever a way of the bucket is emptied, so a set bit is always true. The search
//! and its prefetch skip those headers: past 95% load most of the sixteen, and new connections
//! there run a third faster. Which entry moves, and whether an insert evicts, is the same as
//! without it.

use super::layout::{coarse, seen_age, seen_stamp, SEEN_CAP};
use super::{Shard, WAYS};

/// The most [`Shard::evict_trend`] counts to: the table is taken to be evicting while more
/// than half of this many of the latest crowded inserts evicted, net of those that moved an
/// entry. (A load threshold said it less well with sixteen ways: at 97% load a move out of
/// the primary still finds room for most inserts.)
pub(super) const EVICT_TREND_MAX: u8 = 8;

/// Places in [`Shard::planned`]: a burst's worth of crowded inserts (at most 64 new
/// connections per burst; two with the same low hash bits share one, and the second's insert
/// searches again).
pub(super) const PLANNED_MOVES: usize = 256;

/// A move that makes room for the insert of the key of hash `hash`: the entry of signature
/// `sig` in way `way` of the key's primary bucket to the empty way `to_way` of its other
/// bucket `to`. It still holds while that way has that signature and the target way is empty
/// ([`Shard::planned_move`]): the entry there then has the same other bucket, `to` (a function
/// of the primary and the signature alone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct PlannedMove {
    pub(super) hash: u64,
    pub(super) to: u32,
    pub(super) sig: u16,
    pub(super) way: u8,
    pub(super) to_way: u8,
}

impl PlannedMove {
    /// Holds for no key: signature 0 is an empty way's.
    pub(super) const NONE: PlannedMove = PlannedMove { hash: 0, to: 0, sig: 0, way: 0, to_way: 0 };
}

impl Shard {
    /// Is bucket `b` known to be full (`known_full`)? False says nothing.
    #[inline(always)]
    pub(super) fn known_full(&self, b: usize) -> bool {
        self.known_full[b / 64] >> (b % 64) & 1 != 0
    }

    #[inline(always)]
    pub(super) fn mark_full(&mut self, b: usize) {
        self.known_full[b / 64] |= 1 << (b % 64);
    }

    /// Is the table without a flood guard and evicting: did more than half of the latest
    /// inserts into two full buckets evict ([`EVICT_TREND_MAX`])? A crowded insert then
    /// prefetches the record the eviction reads first.
    #[inline]
    pub(super) fn evicting(&self) -> bool {
        self.guard.is_none() && self.evict_trend > EVICT_TREND_MAX / 2
    }

    /// The way of the full bucket `p` that the eviction empties: the entry seen longest ago, to
    /// within [`SEEN_UNIT_MS`] (lowest way on ties), or one idle for `SEEN_CAP` units or
    /// more. Found from the header: the way whose coarse last seen is the oldest, checked
    /// against its record. A header is never later than its record (only the insert, a move,
    /// the sweep and this write it, hits do not), so when the record agrees that way is the
    /// oldest; when the entry was seen since, its header is brought up to date and the next
    /// oldest is checked. One record read when the headers are up to date (the entries not hit
    /// since the last sweep), at most sixteen, each correcting a header for the next eviction.
    pub(super) fn least_recently_seen(&mut self, p: usize, now32: u32) -> usize {
        let now = coarse(now32);
        loop {
            let w = self.heads[p].oldest_way(now);
            let seen = seen_stamp(now32, self.records[p][w].last_seen);
            if seen_age(now, seen) >= seen_age(now, self.heads[p].seen[w]).min(SEEN_CAP) {
                return w;
            }
            self.heads[p].seen[w] = seen;
        }
    }

    /// The key's candidate buckets are both full: move the entry the burst pipeline
    /// (`Shard::plan_move`) planned for `hash` if that move still holds, else the first entry of the primary `p`
    /// whose other candidate bucket has an empty way there, and return the way of `p` it left.
    /// One move, never a chain: it reads at most 16 other header lines, on an insert that
    /// would otherwise evict.
    pub(super) fn relocate_one(&mut self, p: usize, hash: u64) -> Option<usize> {
        if self.len >= self.capacity() {
            // No empty way anywhere: nothing can move (and no header is read to learn it).
            return None;
        }
        let (w, to, to_w) = match self.planned_move(p, hash) {
            Some(m) => m,
            None => self.movable(p)?,
        };
        self.move_way(p, w, to, to_w);
        Some(w)
    }

    /// The move planned for the insert of `hash`, whose primary is `p`, as (way of `p`, to
    /// bucket, to way), if one was and it still holds: the way still has the signature it had
    /// (so the entry there, whichever it is, has the same other bucket) and the target way is
    /// still empty. Such a move always makes room correctly; it is the one [`Shard::movable`]
    /// would find now unless an earlier entry of the 16 has become movable since it was
    /// planned.
    #[inline]
    pub(super) fn planned_move(&self, p: usize, hash: u64) -> Option<(usize, usize, usize)> {
        let m = self.planned[(hash as usize) % PLANNED_MOVES];
        let (w, to, to_w) = (usize::from(m.way), m.to as usize, usize::from(m.to_way));
        (m.hash == hash
            && m.sig != 0
            && self.heads[p].sig[w] == m.sig
            && self.heads[to].sig[to_w] == 0)
            .then_some((w, to, to_w))
    }

    /// The entry [`Shard::relocate_one`] moves out of the full primary `p`, and where to: the
    /// first of its ways whose other candidate bucket, from its signature, has an empty way;
    /// as (way, to bucket, to way). Reads only headers. (Only the primary's entries
    /// are candidates, 16 of them: with eight ways, both buckets' 16 were; searching the
    /// secondary's too would read 32 headers for a move that the primary's alone find for all
    /// but a few inserts below 97% load.) Marks the buckets it finds full (`known_full`), and
    /// reads no header of one known full.
    pub(super) fn movable(&mut self, p: usize) -> Option<(usize, usize, usize)> {
        for w in 0..WAYS {
            let to = self.other_bucket(p, self.heads[p].sig[w]);
            // `to == p` only in a one-bucket table, which is full.
            if to == p || self.known_full(to) {
                continue;
            }
            match self.heads[to].empty_way() {
                Some(to_w) => return Some((w, to, to_w)),
                None => self.mark_full(to),
            }
        }
        None
    }

    /// Move the entry in way `w` of bucket `b` to the empty way `to_w` of its other candidate
    /// bucket `to`, keeping the `overflow` counters exact.
    pub(super) fn move_way(&mut self, b: usize, w: usize, to: usize, to_w: usize) {
        let (sig, seen, mut rec) =
            (self.heads[b].sig[w], self.heads[b].seen[w], self.records[b][w]);
        if rec.in_secondary != 0 {
            // Back to its primary, `to`.
            self.heads[to].overflow -= 1;
        } else {
            // Out to its secondary; `b` is its primary.
            self.heads[b].overflow += 1;
        }
        rec.in_secondary ^= 1;
        rec.other = b as u32;
        self.vacate(b, w);
        self.heads[to].sig[to_w] = sig;
        self.heads[to].seen[to_w] = seen;
        self.records[to][to_w] = rec;
    }
}
