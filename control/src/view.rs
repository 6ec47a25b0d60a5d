//! What the control plane can see of the data plane, without depending on DPDK.
//!
//! The daemon implements [`DataplaneView`] over its workers: their counters (written by each
//! worker alone, read here at any time) and a per-worker mailbox for connection-table
//! queries, which each worker answers between two bursts (the table is never read from
//! another thread). The admin API and the metrics read only through this trait, so they can be
//! tested with a fake.

use std::sync::Arc;

use spillway_core::addr::Addr;
use spillway_core::capture::TapSlot;
use spillway_core::counters::{
    KernelPathCounters, NeighbourCounters, PortCounters, TrafficCounters, WorkerCounters,
};
use spillway_core::flow::FlowKey;
pub use spillway_core::mailbox::{LookupReply, SliceReply};

/// The data plane as the control plane sees it.
pub trait DataplaneView: Send + Sync + 'static {
    /// Number of workers.
    fn workers(&self) -> usize;

    /// One worker's counters.
    fn counters(&self, worker: usize) -> &WorkerCounters;

    /// Ask every worker for the entry of `key` (bucket hash `hash`); one reply per worker
    /// (a worker whose mailbox is full answers nothing: its reply is cancelled).
    fn lookup(&self, key: FlowKey, hash: u64) -> Vec<LookupReply>;

    /// Ask worker `worker` for the slice of its table from bucket `from` (a table dump);
    /// `None` where there is no table to list.
    fn slice(&self, worker: usize, from: usize) -> Option<SliceReply> {
        let _ = (worker, from);
        None
    }

    /// Every worker's capture slot, in worker order ([`spillway_core::capture`]); empty where
    /// no worker can capture.
    fn tap_slots(&self) -> &[Arc<TapSlot>] {
        &[]
    }

    /// Asks for the next hops of `backends` to be resolved now (a reload that adds them waits
    /// for their MACs before it publishes: [`crate::controller::RESOLVE_AHEAD`]); the next
    /// hops among them that have no MAC yet. Default: nothing to wait for.
    fn resolve_ahead(&self, backends: &[Addr]) -> Vec<Addr> {
        let _ = backends;
        Vec::new()
    }

    /// Of `next_hops`, those that still have no MAC.
    fn unresolved(&self, next_hops: &[Addr]) -> Vec<Addr> {
        let known = self.neighbours();
        next_hops.iter().filter(|h| !known.iter().any(|(a, _)| a == *h)).copied().collect()
    }

    /// The resolved neighbours (next hop, MAC).
    fn neighbours(&self) -> Vec<(Addr, [u8; 6])>;

    /// The neighbour resolver's counters; `None` where no resolver runs.
    fn neighbour_counters(&self) -> Option<&NeighbourCounters> {
        None
    }
    /// The exception path's counters; `None` without a kernel interface.
    fn kernel_counters(&self) -> Option<&KernelPathCounters> {
        None
    }
    /// Every port's driver counters, by port name (the kernel interface's port included).
    fn port_counters(&self) -> Vec<(&str, &PortCounters)> {
        Vec::new()
    }
}

/// One traffic counter set (a service's or a backend's) summed over the workers: packets,
/// bytes, new connections.
pub fn traffic(
    view: &dyn DataplaneView,
    pick: impl Fn(&WorkerCounters) -> Option<&TrafficCounters>,
) -> [u64; 3] {
    let mut t = [0u64; 3];
    for w in 0..view.workers() {
        if let Some(c) = pick(view.counters(w)) {
            t[0] = t[0].wrapping_add(c.packets.get());
            t[1] = t[1].wrapping_add(c.bytes.get());
            t[2] = t[2].wrapping_add(c.new_connections.get());
        }
    }
    t
}
