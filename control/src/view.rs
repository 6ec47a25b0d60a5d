//! What the control plane can see of the data plane, without depending on DPDK.
//!
//! The daemon implements [`DataplaneView`] over its workers: their counters (written by each
//! worker alone, read here at any time) and a per-worker mailbox for connection-table
//! queries, which each worker answers between two bursts (the table is never read from
//! another thread). The admin API and the metrics read only through this trait, so they can be
//! tested with a fake.

use spillway_shared::addr::Addr;
use spillway_shared::conntrack::Entry;
use spillway_shared::counters::WorkerCounters;
use spillway_shared::flow::FlowKey;
use tokio::sync::oneshot;

/// One worker's answer to a conntrack lookup: the entry, if the worker's shard holds the key.
pub type LookupReply = oneshot::Receiver<Option<Entry>>;

/// The data plane as the control plane sees it.
pub trait DataplaneView: Send + Sync + 'static {
    /// Number of workers.
    fn workers(&self) -> usize;

    /// One worker's counters.
    fn counters(&self, worker: usize) -> &WorkerCounters;

    /// Ask every worker for the entry of `key` (bucket hash `hash`); one reply per worker
    /// (a worker whose mailbox is full answers nothing: its receiver is closed).
    fn lookup(&self, key: FlowKey, hash: u64) -> Vec<LookupReply>;

    /// The resolved neighbours (next hop, MAC).
    fn neighbours(&self) -> Vec<(Addr, [u8; 6])>;
}

/// A conntrack query posted to a worker's mailbox.
#[derive(Debug)]
pub struct LookupQuery {
    /// The tracking key.
    pub key: FlowKey,
    /// Its conntrack bucket hash.
    pub hash: u64,
    /// Where to answer.
    pub reply: oneshot::Sender<Option<Entry>>,
}
