//! A worker's end of fleet sync (FS): it scans its own connection table for the entries at risk
//! (FS-1) and for shared entries that stopped being so (FS-8), answers the peers' bulk requests
//! (FS-5), reports the shared entries that left its table, and stores or drops the peers'
//! copies the sync thread hands it (FS-2). Both ways are bounded queues of the worker's own; the
//! worker never waits on either, and does this work between bursts, a few buckets per poll.
//!
//! # One cursor, several passes
//!
//! The worker walks its table with one cursor, bucket after bucket, round and round, while any
//! *pass* wants buckets examined; a pass is a number of buckets still to examine from wherever
//! the cursor is:
//!
//! - **The own pass** (this instance's entries, sent to every peer): a whole table's worth of
//!   buckets from the cursor whenever the worker sees a new snapshot (a reload, a health change:
//!   which entries are at risk may have changed) or the sync thread asks for a refresh (a copy on
//!   a peer lasts only so long, FS-2). A new snapshot never sends the cursor back: the pass
//!   simply runs a whole table again from where the cursor stands, judging every bucket against
//!   the newest snapshot, so the buckets at the end of the table are reached as surely as those
//!   at its start, however often snapshots change. A pass for a new snapshot sends only what
//!   changed: entries newly at risk, and removals of those no longer so; an entry at risk that
//!   was shared already is the peers' as it is, and a refresh sends it again in time. So a
//!   service whose snapshots change every second (advanced load balancing, a flapping check)
//!   costs the peers nothing but its real changes.
//! - **A bulk pass** per asking peer (every entry at risk this worker holds, the peers' copies
//!   too, sent to that peer alone, FS-5): a whole table's worth from the cursor, then as many
//!   more as the own pass still had left when it got there. Every bucket is so examined at
//!   least once under the snapshot of the latest change before the pass ends: a change in the
//!   first round starts an own pass whose rest the second round covers. Its end
//!   ([`Outbound::AnswerEnd`]) carries the count of entries it sent, which the requester
//!   checks against what it received. A repeated ticket (the same peer, request and attempt)
//!   is the pass already under way; a new one from the same peer replaces it.
//!
//! While a bulk pass runs, the own pass covers the copies too: a copy a peer holds for an owner
//! that has gone may become at risk with a new snapshot, and only a holder can send it.
//!
//! The scan pauses while the queue to the sync thread lacks room for a whole poll's worth, so
//! that a bulk answer of a large table is paced by the thread that sends it (and that thread by
//! the requester's acknowledgements) rather than dropped.

use std::sync::atomic::Ordering;

use arrayvec::ArrayVec;
use spillway_core::conntrack::{Shard, WAYS};
use spillway_core::counters::SyncCounters;
use spillway_core::snapshot::Snapshot;
pub use spillway_core::sync::MIN_QUEUE;
use spillway_core::sync::{self, Examined, Inbound, Outbound, OutboundQueue, SyncLink, Ticket};
use spillway_core::time::Time;

/// Buckets a scan examines per poll (sixteen entries each at most): a few microseconds.
pub const SCAN_BUCKETS_PER_POLL: usize = 2;

/// Peers' entries and removals a worker applies per poll at most.
pub const STORE_PER_POLL: usize = 64;

/// Bulk answers a worker runs at once (one per asking peer).
pub const MAX_BULK_PASSES: usize = 8;

/// Items one examined bucket may push: each entry to the peers and to every bulk answer, and
/// the answers' ends.
const PUSHES_PER_BUCKET: usize = WAYS * (1 + MAX_BULK_PASSES) + MAX_BULK_PASSES;

const _: () = assert!(MIN_QUEUE >= SCAN_BUCKETS_PER_POLL * WAYS * 2);

/// A bulk answer under way.
#[derive(Debug, Clone, Copy)]
struct BulkPass {
    ticket: Ticket,
    /// Buckets left to examine.
    left: usize,
    /// Still in its first round of the table (then the rest of the own pass, once).
    first_round: bool,
    /// Entries sent so far.
    sent: u64,
}

/// A worker's sync state.
#[derive(Debug)]
pub struct WorkerSync {
    link: SyncLink,
    cursor: usize,
    /// Buckets left in the own pass.
    own_left: usize,
    /// The own pass sends every entry at risk (a refresh), not only those not shared yet.
    own_all: bool,
    /// The own pass covers the copies too (it started while a bulk answer ran).
    own_copies: bool,
    bulks: ArrayVec<BulkPass, MAX_BULK_PASSES>,
    generation: u64,
    refresh_seen: u64,
}

impl WorkerSync {
    /// The worker's end of `link`. The first snapshot it sees starts no scan: a table just
    /// made holds nothing at risk (its first scan comes with the first change).
    pub fn new(link: SyncLink) -> WorkerSync {
        WorkerSync {
            link,
            cursor: 0,
            own_left: 0,
            own_all: false,
            own_copies: false,
            bulks: ArrayVec::new(),
            generation: u64::MAX,
            refresh_seen: 0,
        }
    }

    /// Called at the sweep's pace with the current snapshot: starts the own pass when the
    /// snapshot is new or the sync thread asked for a refresh, and takes the bulk answers it
    /// asked for. `buckets` is the table's. While a service's previous tables still decide what
    /// is at risk (FS-11), passes follow each other: a new connection whose backend those
    /// tables would not give is shared within a pass of its making.
    pub fn check(&mut self, snap: &Snapshot, buckets: usize, now: Time, c: &SyncCounters) {
        let refresh = self.link.requests.refresh.load(Ordering::Relaxed);
        let changed = snap.generation != self.generation && self.generation != u64::MAX;
        if refresh != self.refresh_seen || changed {
            // A refresh during a pass for a change makes the rest of it a refresh too, and
            // the whole table goes again from here.
            self.own_all |= refresh != self.refresh_seen;
            self.refresh_seen = refresh;
            self.own_left = buckets;
            self.own_copies = !self.bulks.is_empty();
        }
        if self.own_left == 0
            && snap.services().any(|s| s.previous.as_ref().is_some_and(|p| now < p.shared_until))
        {
            self.own_left = buckets;
            self.own_copies = !self.bulks.is_empty();
        }
        self.generation = snap.generation;
        while let Some(ticket) = self.link.bulk.pop() {
            self.take_ticket(ticket, buckets, c);
        }
    }

    fn take_ticket(&mut self, ticket: Ticket, buckets: usize, c: &SyncCounters) {
        let pass = BulkPass { ticket, left: buckets, first_round: true, sent: 0 };
        match self.bulks.iter().position(|b| b.ticket.peer == ticket.peer) {
            // The pass already under way answers it.
            Some(i) if self.bulks[i].ticket == ticket => {}
            Some(i) => self.bulks[i] = pass,
            None if self.bulks.is_full() => c.bulk_refused.inc(),
            None => self.bulks.push(pass),
        }
        self.own_copies |= self.own_left > 0;
    }

    /// One poll's sync work: store or drop at most [`STORE_PER_POLL`] peers' entries, report
    /// the shared entries that left the table, and examine [`SCAN_BUCKETS_PER_POLL`] buckets
    /// for the passes under way.
    pub fn step(&mut self, shard: &mut Shard, snap: &Snapshot, now: Time, c: &SyncCounters) {
        for _ in 0..STORE_PER_POLL {
            match self.link.inbound.pop() {
                Some(Inbound::Store(e)) => c.installed[sync::store(shard, &e, now).index()].inc(),
                Some(Inbound::Remove(r)) => c.removed[sync::remove(shard, &r, now).index()].inc(),
                None => break,
            }
        }
        let out = &*self.link.outbound;
        if shard.has_departed() {
            shard.take_departed(|key, value| {
                match out.push(Outbound::Remove(sync::departure(key, &value, snap))) {
                    Ok(()) => c.removes.inc(),
                    Err(_) => c.queue_full.inc(),
                }
            });
        }
        if self.own_left == 0 && self.bulks.is_empty() {
            return;
        }
        let buckets = shard.bucket_count();
        for _ in 0..SCAN_BUCKETS_PER_POLL {
            // Paced by the sync thread: a scan never drops an entry for want of room.
            let out = &self.link.outbound;
            if out.len() + PUSHES_PER_BUCKET > out.capacity() {
                return;
            }
            self.examine_bucket(shard, snap, now, c);
            self.cursor = (self.cursor + 1) % buckets;
            if self.own_left > 0 {
                self.own_left -= 1;
                if self.own_left == 0 {
                    self.own_copies = false;
                    self.own_all = false;
                    c.scans.inc();
                    c.scanned_generation.set(self.generation);
                }
            }
            self.advance_bulks(c);
            if self.own_left == 0 && self.bulks.is_empty() {
                return;
            }
        }
    }

    /// Examine the bucket at the cursor for every pass under way.
    fn examine_bucket(&mut self, shard: &mut Shard, snap: &Snapshot, now: Time, c: &SyncCounters) {
        let out = &self.link.outbound;
        let b = self.cursor;
        let (own, copies) = (self.own_left > 0, self.own_left > 0 && self.own_copies);
        let all = self.own_all;
        let mut marks: ArrayVec<(spillway_core::conntrack::Slot, u8), WAYS> = ArrayVec::new();
        for (slot, e) in shard.entries_in(b..b + 1, now) {
            let copy = e.value.is_copy();
            let to_peers = own && (!copy || copies);
            if !to_peers && self.bulks.is_empty() {
                continue;
            }
            match sync::examine(&e.key, &e.value, e.idle_ms, snap, now) {
                Examined::Share(p) => {
                    // Shared already: the peers hold it; only a refresh sends it again.
                    if to_peers && (all || copy || !e.value.is_shared()) {
                        push(out, Outbound::Share(p), c);
                    }
                    for bulk in &mut self.bulks {
                        push(out, Outbound::Answer(bulk.ticket, p), c);
                        bulk.sent += 1;
                    }
                    if !copy && !e.value.is_shared() {
                        marks.push((slot, sync::shared_flags(&e.value, true)));
                    }
                }
                Examined::Unshare(p) => {
                    push(out, Outbound::Remove(p), c);
                    c.removes.inc();
                    marks.push((slot, sync::shared_flags(&e.value, false)));
                }
                Examined::Nothing => {}
            }
        }
        for (slot, flags) in marks {
            shard.set_flags(slot, flags);
        }
    }

    /// One bucket examined for every bulk pass: the ends of those that are over.
    fn advance_bulks(&mut self, c: &SyncCounters) {
        let own_left = self.own_left;
        let out = &self.link.outbound;
        self.bulks.retain(|b| {
            b.left = b.left.saturating_sub(1);
            if b.left == 0 && b.first_round {
                b.first_round = false;
                b.left = own_left;
            }
            if b.left > 0 {
                return true;
            }
            push(out, Outbound::AnswerEnd(b.ticket, b.sent), c);
            c.bulk_answers.inc();
            false
        });
    }

    /// True while a pass is under way, peers' entries wait, or the table has departures to
    /// report (two atomic loads and a few tests when there is nothing to do).
    #[inline]
    pub fn has_work(&self, shard: &Shard) -> bool {
        self.own_left > 0
            || !self.bulks.is_empty()
            || !self.link.inbound.is_empty()
            || shard.has_departed()
    }
}

/// Hand one item to the sync thread; the scan made room for it first, so a full queue is a
/// bug's count, never a silent loss.
fn push(out: &OutboundQueue, item: Outbound, c: &SyncCounters) {
    match out.push(item) {
        Ok(()) => {
            if matches!(item, Outbound::Share(_) | Outbound::Answer(..)) {
                c.exported.inc();
            }
        }
        Err(_) => c.queue_full.inc(),
    }
}
