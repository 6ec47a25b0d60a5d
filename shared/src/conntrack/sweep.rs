//! The sweep: reclaims the memory of entries the caller judges dead, a few buckets at a time
//! from a rolling cursor, and keeps the headers' coarse last seen from wrapping.

use super::layout::seen_stamp;
use super::{stamp, Entry, Shard};
use crate::time::Time;

impl Shard {
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
        let n = self.heads.len();
        let now32 = stamp(now);
        self.clock = now32;
        let mut removed = 0;
        for _ in 0..buckets.min(n) {
            let b = self.cursor;
            self.cursor = (self.cursor + 1) & (n - 1);
            let mut occupied = self.heads[b].used_ways();
            while occupied != 0 {
                let w = occupied.trailing_zeros() as usize;
                occupied &= occupied - 1;
                let record = &self.records[b][w];
                if dead(&record.entry(now32)) {
                    self.clear_way(b, w);
                    removed += 1;
                } else {
                    // Up to date, and never wrapped round (module doc, eviction).
                    let seen = seen_stamp(now32, record.last_seen);
                    if self.heads[b].seen[w] != seen {
                        self.heads[b].seen[w] = seen;
                    }
                }
            }
        }
        self.len -= removed;
        self.stats.swept += removed as u64;
        removed
    }

    /// The lines the next [`Shard::sweep`] of one bucket reads, one call ahead, for a caller
    /// that sweeps a bucket at a time between bursts (the worker): the records of the ways in
    /// use in the cursor's bucket, whose header the previous call named and which has had the
    /// time between two sweeps to arrive, and the header of the bucket after it. A sweep that
    /// found its lines in cache costs a few dozen cycles; one that read them on demand waited
    /// for a header and then, one after the other, for its records: in a table much larger than
    /// the caches, two or three DRAM latencies per bucket, every poll. Nothing is named in a
    /// one-bucket table, whose lines stay in cache.
    #[inline]
    pub fn sweep_lines(&self, mut prefetch: impl FnMut(*const u8)) {
        let n = self.heads.len();
        if n < 2 {
            return;
        }
        let b = self.cursor;
        prefetch(self.head_line((b + 1) & (n - 1)));
        let mut occupied = self.heads[b].used_ways();
        while occupied != 0 {
            prefetch(self.record_line(b, occupied.trailing_zeros() as usize));
            occupied &= occupied - 1;
        }
    }
}
