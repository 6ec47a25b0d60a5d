//! A worker's end of fleet sync (FS): it scans its own connection table for the entries at risk
//! (FS-1) and hands them to the sync thread, and it stores the peers' entries the sync thread
//! hands it (FS-2). Both ways are bounded queues of the worker's own; the worker never waits on
//! either, and does this work between bursts, a few buckets per poll.
//!
//! A scan starts when the worker sees a new snapshot (a reload, a health change: the tables may
//! have changed, and with them which entries are at risk), and when the sync thread asks: for a
//! refresh (an entry at risk is sent again while it stays so, so that a peer's copy does not
//! expire), or for a peer that joins (a bulk request: the peers' entries this worker holds are
//! sent too, since their owner may be gone). A scan of the instance's own entries skips the
//! peers' entries it holds: their owner sends them.
//!
//! The scan pauses while the queue to the sync thread has no room for a whole poll's worth, so
//! that a bulk answer of a large table is paced by the thread that sends it rather than
//! dropped; an entry that finds the queue full all the same is counted (`queue_full`).

use std::sync::atomic::Ordering;

use spillway_core::conntrack::{Shard, WAYS};
pub use spillway_core::peer::MIN_QUEUE;

const _: () = assert!(MIN_QUEUE >= 2 * SCAN_BUCKETS_PER_POLL * WAYS);
use spillway_core::counters::SyncCounters;
use spillway_core::decide::SYNCED_EPOCH;
use spillway_core::peer::{self, SyncLink};
use spillway_core::snapshot::Snapshot;
use spillway_core::time::Time;

/// Buckets a scan examines per poll (sixteen entries each at most): a few microseconds.
pub const SCAN_BUCKETS_PER_POLL: usize = 2;

/// Peers' entries a worker stores per poll at most.
pub const STORE_PER_POLL: usize = 64;

/// A scan in progress.
#[derive(Debug, Clone, Copy)]
struct Scan {
    /// The next bucket to examine.
    next: usize,
    /// Include the peers' entries this worker holds (a bulk answer).
    peers_too: bool,
    /// The snapshot generation it started with (reported when done).
    generation: u64,
}

/// A worker's sync state.
#[derive(Debug)]
pub struct WorkerSync {
    link: SyncLink,
    scan: Option<Scan>,
    generation: u64,
    refresh_seen: u64,
    bulk_seen: u64,
}

impl WorkerSync {
    /// The worker's end of `link`. The first snapshot it sees starts no scan: a table just
    /// made holds nothing at risk (its first scan comes with the first change).
    pub fn new(link: SyncLink) -> WorkerSync {
        WorkerSync { link, scan: None, generation: u64::MAX, refresh_seen: 0, bulk_seen: 0 }
    }

    /// Called at the sweep's pace with the current snapshot: starts a scan when the snapshot
    /// is new or the sync thread asked for one.
    pub fn check(&mut self, snap: &Snapshot) {
        let r = &self.link.requests;
        let (refresh, bulk) = (r.refresh.load(Ordering::Relaxed), r.bulk.load(Ordering::Relaxed));
        let generation = snap.generation;
        if bulk != self.bulk_seen {
            self.bulk_seen = bulk;
            self.refresh_seen = refresh;
            self.scan = Some(Scan { next: 0, peers_too: true, generation });
        } else if refresh != self.refresh_seen
            || (generation != self.generation && self.generation != u64::MAX)
        {
            self.refresh_seen = refresh;
            // A bulk scan under way covers a refresh: it restarts only to judge against the
            // new snapshot.
            let peers_too = self.scan.is_some_and(|s| s.peers_too);
            self.scan = Some(Scan { next: 0, peers_too, generation });
        }
        self.generation = generation;
    }

    /// One poll's sync work: store at most [`STORE_PER_POLL`] peers' entries, and examine
    /// [`SCAN_BUCKETS_PER_POLL`] buckets of a scan under way.
    pub fn step(&mut self, shard: &mut Shard, snap: &Snapshot, now: Time, c: &SyncCounters) {
        for _ in 0..STORE_PER_POLL {
            let Some(e) = self.link.inbound.pop() else { break };
            let got = peer::store(shard, &e, now);
            c.installed[got.index()].inc();
        }
        let Some(scan) = &mut self.scan else { return };
        let out = &self.link.outbound;
        // Paced by the sync thread: a scan never drops an entry for want of room.
        if out.len() + SCAN_BUCKETS_PER_POLL * WAYS > out.capacity() {
            return;
        }
        let end = scan.next + SCAN_BUCKETS_PER_POLL;
        for (_, e) in shard.entries_in(scan.next..end, now) {
            if !scan.peers_too && e.value.epoch == SYNCED_EPOCH {
                continue;
            }
            if let Some(pe) = peer::export_at_risk(&e.key, &e.value, e.idle_ms, snap, now) {
                match out.push(pe) {
                    Ok(()) => c.exported.inc(),
                    Err(_) => c.queue_full.inc(),
                }
            }
        }
        scan.next = end;
        if end >= shard.bucket_count() {
            c.scans.inc();
            c.scanned_generation.set(scan.generation);
            self.scan = None;
        }
    }

    /// True while a scan is under way or peers' entries wait to be stored (one atomic load
    /// and a test when there is nothing to do).
    #[inline]
    pub fn has_work(&self) -> bool {
        self.scan.is_some() || !self.link.inbound.is_empty()
    }
}
