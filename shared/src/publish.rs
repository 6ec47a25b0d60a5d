//! Publishing snapshots to the workers, RCU style.
//!
//! The control thread builds a new [`Snapshot`] off the hot path and swaps it in with one
//! pointer store ([`arc_swap::ArcSwap`]). Each worker holds an [`arc_swap::Cache`] and loads
//! the current snapshot once per burst: one atomic pointer read when nothing changed.
//!
//! Reclamation: the publisher keeps every retired snapshot until its reference count shows that
//! no worker still holds it (a worker's cache lets go of the old one at its next burst, its
//! quiescent point), and only then drops it, on the control thread. So workers never see a
//! half-built state, and never pay for freeing a snapshot on the hot path.

use crate::snapshot::Snapshot;
use arc_swap::ArcSwap;
use std::sync::Arc;

/// What workers read: the shared pointer to the current snapshot.
pub type SnapshotCell = Arc<ArcSwap<Snapshot>>;

/// A worker's view: loads the current snapshot with one pointer comparison.
pub type SnapshotReader = arc_swap::Cache<SnapshotCell, Arc<Snapshot>>;

/// The control thread's side of snapshot publication.
#[derive(Debug)]
pub struct Publisher {
    cell: SnapshotCell,
    retired: Vec<Arc<Snapshot>>,
    stats: PublishStats,
}

/// What the publisher did since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PublishStats {
    /// Snapshots published after the first.
    pub published: u64,
    /// Retired snapshots freed (no reader held them any more).
    pub reclaimed: u64,
    /// Retired snapshots still held by a reader (not freed yet).
    pub retained: u64,
}

impl Publisher {
    /// Start with `initial` as the current snapshot.
    pub fn new(initial: Snapshot) -> Publisher {
        Publisher {
            cell: Arc::new(ArcSwap::from_pointee(initial)),
            retired: Vec::new(),
            stats: PublishStats::default(),
        }
    }

    /// A reader for one worker.
    pub fn reader(&self) -> SnapshotReader {
        arc_swap::Cache::new(Arc::clone(&self.cell))
    }

    /// The current snapshot.
    pub fn current(&self) -> Arc<Snapshot> {
        self.cell.load_full()
    }

    /// Make `next` current. The previous snapshot is retired, and freed later by
    /// [`Publisher::reclaim`] once no reader holds it.
    pub fn publish(&mut self, next: Snapshot) {
        let old = self.cell.swap(Arc::new(next));
        self.retired.push(old);
        self.stats.published += 1;
        self.reclaim();
    }

    /// Drop the retired snapshots no reader holds any more; returns how many remain.
    pub fn reclaim(&mut self) -> usize {
        let before = self.retired.len();
        self.retired.retain(|s| Arc::strong_count(s) > 1);
        self.stats.reclaimed += (before - self.retired.len()) as u64;
        self.stats.retained = self.retired.len() as u64;
        self.retired.len()
    }

    /// What it published and freed so far.
    pub fn stats(&self) -> PublishStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(generation: u64) -> Snapshot {
        let mut s = Snapshot::empty();
        s.generation = generation;
        s
    }

    #[test]
    fn readers_see_whole_snapshots_and_old_ones_wait_for_readers() {
        let mut p = Publisher::new(snap(1));
        let mut worker = p.reader();
        assert_eq!(worker.load().generation, 1);
        p.publish(snap(2));
        // The worker has not passed a quiescent point: snapshot 1 is kept.
        assert_eq!(p.reclaim(), 1);
        assert_eq!(p.stats(), PublishStats { published: 1, reclaimed: 0, retained: 1 });
        assert_eq!(worker.load().generation, 2);
        // Its next load released snapshot 1.
        assert_eq!(p.reclaim(), 0);
        assert_eq!(p.stats(), PublishStats { published: 1, reclaimed: 1, retained: 0 });
    }

    #[test]
    fn concurrent_readers_never_see_a_torn_snapshot() {
        let mut p = Publisher::new(snap(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let mut r = p.reader();
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut last = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let s = r.load();
                        // A snapshot's generation and zone_names were built together.
                        assert_eq!(s.zone_names.len() as u64, s.generation % 7);
                        assert!(s.generation >= last, "generations never go back");
                        last = s.generation;
                    }
                })
            })
            .collect();
        for g in 1..2000u64 {
            let mut s = snap(g);
            s.zone_names = (0..g % 7).map(|i| i.to_string()).collect();
            p.publish(s);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for h in handles {
            h.join().unwrap();
        }
        drop(p.reader());
    }
}
