//! The daemon's [`DataplaneView`]: the workers' counters and conntrack mailboxes, and the
//! neighbour table, for the control plane's admin API and metrics.

use std::sync::Arc;

use spillway_control::view::{DataplaneView, LookupReply, SliceReply};
use spillway_core::addr::Addr;
use spillway_core::capture::TapSlot;
use spillway_core::counters::{
    KernelPathCounters, NeighbourCounters, PortCounters, WorkerCounters,
};
use spillway_core::flow::FlowKey;
use spillway_core::mailbox::Mailbox;
use spillway_dataplane::neighbour::{NeighbourCell, NeighbourEvent, NeighbourEvents};
use spillway_dataplane::node::Node;

/// The data plane as the control plane sees it.
#[derive(Debug, Clone)]
pub struct DaemonView {
    /// Every worker's counters, by worker index.
    pub counters: Arc<[WorkerCounters]>,
    /// Every worker's conntrack mailbox (empty in io-forward mode).
    pub mailboxes: Vec<Mailbox>,
    /// Every worker's capture slot (empty in io-forward mode).
    pub tap_slots: Vec<Arc<TapSlot>>,
    /// The neighbour table.
    pub neighbours: NeighbourCell,
    /// Where the resolver hears which next hops to ask for (a reload's new backends).
    pub neighbour_events: NeighbourEvents,
    /// The node (its subnets and gateways: a backend's next hop); `None` in io-forward mode.
    pub node: Option<Node>,
    /// What the resolver did with the answers workers heard.
    pub neighbour_counters: Arc<NeighbourCounters>,
    /// The exception path's counters, when there is one.
    pub kernel: Option<Arc<KernelPathCounters>>,
    /// Every port's driver counters, refreshed by the control loop.
    pub ports: Arc<[(String, PortCounters)]>,
}

impl DataplaneView for DaemonView {
    fn workers(&self) -> usize {
        self.counters.len()
    }

    fn counters(&self, worker: usize) -> &WorkerCounters {
        &self.counters[worker]
    }

    fn lookup(&self, key: FlowKey, hash: u64) -> Vec<LookupReply> {
        self.mailboxes.iter().map(|m| m.ask(key, hash)).collect()
    }

    fn slice(&self, worker: usize, from: usize) -> Option<SliceReply> {
        self.mailboxes.get(worker).map(|m| m.ask_slice(from))
    }

    fn tap_slots(&self) -> &[Arc<TapSlot>] {
        &self.tap_slots
    }

    fn resolve_ahead(&self, backends: &[Addr]) -> Vec<Addr> {
        let Some(node) = &self.node else { return Vec::new() };
        let table = self.neighbours.load();
        let mut hops: Vec<Addr> = backends
            .iter()
            .filter_map(|b| node.next_hop(b))
            .filter(|h| table.get(h).is_none())
            .collect();
        hops.sort_unstable();
        hops.dedup();
        for h in &hops {
            // A full queue (a flood of misses from the workers) only delays this: the
            // workers ask for it again when a packet needs it.
            let _ = self.neighbour_events.push(NeighbourEvent::Wanted(*h));
        }
        hops
    }

    fn unresolved(&self, next_hops: &[Addr]) -> Vec<Addr> {
        let table = self.neighbours.load();
        next_hops.iter().filter(|h| table.get(h).is_none()).copied().collect()
    }

    fn neighbours(&self) -> Vec<(Addr, [u8; 6])> {
        self.neighbours.load().iter().map(|(a, m)| (*a, *m)).collect()
    }

    fn neighbour_counters(&self) -> Option<&NeighbourCounters> {
        Some(&self.neighbour_counters)
    }

    fn kernel_counters(&self) -> Option<&KernelPathCounters> {
        self.kernel.as_deref()
    }

    fn port_counters(&self) -> Vec<(&str, &PortCounters)> {
        self.ports.iter().map(|(n, c)| (n.as_str(), c)).collect()
    }
}
