//! Inserts: the upsert that never fails ([`Shard::insert`]), the new connection's insert and
//! the flood guard that may refuse it ([`Shard::insert_new`]). Making room in two full buckets
//! is in `room.rs`.

use super::layout::{coarse, home_way, Record};
use super::room::EVICT_TREND_MAX;
use super::{sig_of, stamp, EntryValue, InsertOutcome, Shard, Slot, FLAG_COPY, WAYS};
use crate::flow::FlowKey;
use crate::time::Time;

/// Why [`Shard::insert_absent`] stored nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Absent {
    /// The key is stored already.
    Present,
    /// Both candidate buckets are full (and nothing could move).
    Full,
    /// The value is a copy and [`Shard::copy_limit`] copies are stored.
    CopyLimit,
}

/// An insert that found both candidate buckets full and no entry able to move out of the
/// primary: what the eviction then needs.
#[derive(Clone, Copy, Debug)]
pub(super) struct Crowded {
    primary: usize,
    secondary: usize,
    now32: u32,
}

/// The flood guard's token bucket (milli-tokens, refilled per millisecond).
#[derive(Clone, Copy, Debug)]
pub(super) struct FloodGuard {
    per_sec: u64,
    tokens_milli: u64,
    last: Option<Time>,
}

impl Shard {
    /// Turn the flood guard on with at most `per_second` new entries per second (a token
    /// bucket of one second's worth), or off with `None` (the default). With the guard on,
    /// [`Shard::admit_new`] also refuses while the table is full, and [`Shard::insert_new`]
    /// refuses when the key's two candidate buckets are full, instead of evicting an entry:
    /// under a SYN flood established connections keep their entries (Katran's approach), and
    /// the flood's packets are forwarded by the consistent hash alone.
    pub fn set_flood_guard(&mut self, per_second: Option<u32>) {
        self.guard = per_second.filter(|&r| r > 0).map(|r| FloodGuard {
            per_sec: u64::from(r),
            tokens_milli: u64::from(r) * 1000,
            last: None,
        });
    }

    /// May a new connection get an entry now? Always true without a flood guard; with one,
    /// false when the table is full or the rate is spent (counted in `bypassed`).
    pub fn admit_new(&mut self, now: Time) -> bool {
        // Copies do not count: a new entry takes a copy's way when it must (FLAG_COPY).
        let full = self.len - self.copies >= self.capacity();
        let Some(g) = &mut self.guard else { return true };
        let cap = g.per_sec * 1000;
        let elapsed = g.last.map_or(0, |t| now.as_millis().saturating_sub(t.as_millis()));
        g.tokens_milli = (g.tokens_milli + elapsed.saturating_mul(g.per_sec)).min(cap);
        g.last = Some(now);
        if !full && g.tokens_milli >= 1000 {
            g.tokens_milli -= 1000;
            true
        } else {
            self.stats.bypassed += 1;
            false
        }
    }

    /// Will [`Shard::admit_new`] most likely refuse the next new connection? With a flood
    /// guard, when the table is full or the last call spent the tokens (a flood): the stages
    /// then name nothing for an insert, as no insert will read or write those lines. (A guess
    /// only: the tokens refill with time, which this does not count.)
    #[inline]
    pub(super) fn likely_refused(&self) -> bool {
        self.guard
            .as_ref()
            .is_some_and(|g| self.len - self.copies >= self.capacity() || g.tokens_milli < 1000)
    }

    /// Store `key -> value` with `now` as last seen (CT-6), and return where.
    ///
    /// An upsert: if `key` is present (in either candidate bucket) its value and idle clock are
    /// overwritten in place (CT-2: a new-connection SYN replaces the entry). Otherwise the entry
    /// takes an empty way of its primary bucket, else of its secondary bucket. If both are full,
    /// one entry of the primary that has room in its own other candidate bucket is moved there
    /// (one move at most, no chain) and the new entry takes its way; only if none has room is
    /// the least recently seen entry of the primary's 16 ways (to within [`SEEN_UNIT_MS`])
    /// evicted, returned and counted. Never fails.
    #[inline]
    pub fn insert(
        &mut self,
        key: &FlowKey,
        hash: u64,
        value: EntryValue,
        now: Time,
    ) -> InsertOutcome {
        match self.try_insert(key, hash, value, now) {
            Ok(out) => out,
            Err(crowded) => self.evict_for(key, hash, value, crowded),
        }
    }

    /// The entry for a new connection: [`Shard::insert`] without a flood guard. With one, only
    /// if [`Shard::admit_new`] admits it and a way is free without evicting anyone: under a
    /// flood, an established connection never loses its entry to a new one. `None` (counted
    /// in `bypassed`): no entry was made; the caller forwards by the hash alone.
    ///
    /// The common case, inlined into the caller: no flood guard, and the key's primary bucket
    /// has an empty way, no way with the key's signature and nothing overflowed to its
    /// secondary (so the key is in neither); the entry then takes that way without a call.
    #[inline(always)]
    pub fn insert_new(
        &mut self,
        key: &FlowKey,
        hash: u64,
        value: EntryValue,
        now: Time,
    ) -> Option<InsertOutcome> {
        if self.guard.is_none() {
            let p = self.bucket_index(hash);
            let head = &self.heads[p];
            if head.overflow == 0 && head.match_mask(sig_of(hash)) == 0 {
                if let Some(w) = head.free_way(home_way(hash)) {
                    self.place(key, hash, value, stamp(now), (p, self.secondary_index(p, hash)), w);
                    return Some(InsertOutcome {
                        slot: Slot::new(p, w),
                        overwritten: None,
                        evicted: None,
                    });
                }
            }
            return Some(self.insert(key, hash, value, now));
        }
        if !self.admit_new(now) {
            return None;
        }
        match self.try_insert(key, hash, value, now) {
            Ok(out) => Some(out),
            Err(crowded) => {
                if let Some(out) = self.displace_copy(key, hash, value, crowded) {
                    return Some(out);
                }
                // It stays full: the insert that found no room leaves it as it was.
                self.mark_full(crowded.primary);
                self.stats.bypassed += 1;
                None
            }
        }
    }

    /// Store `key -> value` as last seen at `seen` only if the key is absent and a way is free
    /// without evicting anyone (a move that makes room is made): what a caller that must never
    /// displace another entry uses (a peer's entry, FS-2). A copy ([`FLAG_COPY`]) is stored
    /// only while fewer than [`Shard::copy_limit`] are. Nothing changes when it is refused.
    pub fn insert_absent(
        &mut self,
        key: &FlowKey,
        hash: u64,
        value: EntryValue,
        seen: Time,
    ) -> Result<Slot, Absent> {
        if self.find(key, hash).is_some() {
            return Err(Absent::Present);
        }
        if value.is_copy() && self.copies >= self.copy_limit {
            return Err(Absent::CopyLimit);
        }
        match self.try_insert(key, hash, value, seen) {
            Ok(out) => {
                if value.is_copy() {
                    self.copies += 1;
                }
                Ok(out.slot)
            }
            Err(Crowded { primary, .. }) => {
                self.mark_full(primary);
                Err(Absent::Full)
            }
        }
    }

    /// [`Shard::insert`] short of an eviction: the key updated in place, or stored in a free
    /// way of either candidate bucket, or in the way a move out of the full primary left; else
    /// both buckets full and nothing able to move, `Err` with what the eviction needs.
    ///
    /// Inlined into the decision, so that its outcome stays in registers: returned through
    /// memory, the caller's wide load of it could not be forwarded from the narrower stores
    /// that wrote it and waited for every store before them, the new record's included.
    #[inline]
    pub(super) fn try_insert(
        &mut self,
        key: &FlowKey,
        hash: u64,
        value: EntryValue,
        now: Time,
    ) -> Result<InsertOutcome, Crowded> {
        let now32 = stamp(now);
        self.clock = now32;
        if let Some(slot) = self.find(key, hash) {
            let r = self.record_mut(slot);
            let previous = r.value();
            r.set_value(value);
            r.last_seen = now32;
            self.stats.updates += 1;
            self.changed(key, previous, value);
            return Ok(InsertOutcome { slot, overwritten: Some(previous), evicted: None });
        }
        let (p, s) = self.candidate_buckets(hash);
        let (b, w) = if let Some(w) = self.heads[p].free_way(home_way(hash)) {
            (p, w)
        } else if let Some(w) = self.heads[s].empty_way().filter(|_| s != p) {
            (s, w)
        } else {
            // Both candidate buckets full; the secondary stays so (a move goes elsewhere), and
            // the primary will be again once the new entry takes the way a move or an eviction
            // empties.
            self.mark_full(s);
            let Some(w) = self.relocate_one(p, hash) else {
                return Err(Crowded { primary: p, secondary: s, now32 });
            };
            self.evict_trend = self.evict_trend.saturating_sub(1);
            self.place(key, hash, value, now32, (p, s), w);
            self.mark_full(p);
            return Ok(InsertOutcome { slot: Slot::new(p, w), overwritten: None, evicted: None });
        };
        if b == p {
            self.place(key, hash, value, now32, (p, s), w);
        } else {
            self.heads[p].overflow += 1;
            self.place(key, hash, value, now32, (s, p), w);
        }
        Ok(InsertOutcome { slot: Slot::new(b, w), overwritten: None, evicted: None })
    }

    /// The end of an insert that found both candidate buckets full and no entry able to move
    /// ([`Shard::try_insert`]): the least recently seen entry of the primary is evicted, and
    /// the new entry takes its way.
    fn evict_for(
        &mut self,
        key: &FlowKey,
        hash: u64,
        value: EntryValue,
        crowded: Crowded,
    ) -> InsertOutcome {
        if let Some(out) = self.displace_copy(key, hash, value, crowded) {
            return out;
        }
        let Crowded { primary: p, secondary: s, now32 } = crowded;
        self.evict_trend = (self.evict_trend + 1).min(EVICT_TREND_MAX);
        let w = self.least_recently_seen(p, now32);
        let evicted = self.records[p][w].entry(now32);
        self.clear_way(p, w);
        self.place(key, hash, value, now32, (p, s), w);
        self.mark_full(p);
        // `place` counted one more entry: the evicted one is gone.
        self.len -= 1;
        self.stats.evictions += 1;
        InsertOutcome { slot: Slot::new(p, w), overwritten: None, evicted: Some(evicted) }
    }

    /// Both candidate buckets are full and nothing can move: the new entry takes the way of a
    /// copy ([`FLAG_COPY`]) in either, if one holds one (the primary's first), and the copy
    /// is gone (counted in `copies_displaced`, not as an eviction). Reads the two buckets'
    /// records only when the table holds copies, on the rare path that would otherwise evict
    /// or refuse. A copy never displaces another.
    fn displace_copy(
        &mut self,
        key: &FlowKey,
        hash: u64,
        value: EntryValue,
        Crowded { primary: p, secondary: s, now32 }: Crowded,
    ) -> Option<InsertOutcome> {
        if self.copies == 0 || value.is_copy() {
            return None;
        }
        let (b, w) = [p, s].into_iter().find_map(|b| {
            let used = self.heads[b].used_ways();
            (0..WAYS)
                .find(|&w| used & (1 << w) != 0 && self.records[b][w].flags & FLAG_COPY != 0)
                .map(|w| (b, w))
        })?;
        self.clear_way(b, w);
        self.len -= 1;
        self.stats.copies_displaced += 1;
        if b == p {
            self.place(key, hash, value, now32, (p, s), w);
        } else {
            self.heads[p].overflow += 1;
            self.place(key, hash, value, now32, (s, p), w);
        }
        Some(InsertOutcome { slot: Slot::new(b, w), overwritten: None, evicted: None })
    }

    /// Store a new entry in the empty (or just emptied) way `w` of bucket `b`, whose other
    /// candidate bucket for the key is `other` (`(b, other)`: the key's (primary, secondary),
    /// or (secondary, primary) with the primary's `overflow` already counted), and count it.
    #[inline(always)]
    pub(super) fn place(
        &mut self,
        key: &FlowKey,
        hash: u64,
        value: EntryValue,
        now32: u32,
        (b, other): (usize, usize),
        w: usize,
    ) {
        let in_secondary = b != self.bucket_index(hash);
        self.heads[b].sig[w] = sig_of(hash);
        self.heads[b].seen[w] = coarse(now32);
        self.records[b][w] = Record {
            key: *key,
            backend: value.backend,
            epoch: value.epoch,
            flags: value.flags,
            in_secondary: u8::from(in_secondary),
            sig: sig_of(hash),
            // Below 2^27 buckets (MAX_CAPACITY / WAYS), so it fits.
            other: other as u32,
            last_seen: now32,
            ..Record::EMPTY
        };
        self.stats.inserts += 1;
        self.len += 1;
    }
}
