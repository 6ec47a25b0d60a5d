//! Neighbours: the MAC addresses of next hops (backends on the node's own subnets, or the
//! gateways), as the workers read them, and the control-side resolver that keeps them fresh.
//!
//! Workers never resolve anything themselves. They read a [`NeighbourTable`] published by
//! pointer swap (like the snapshot, once per burst), and when a next hop is missing they drop
//! the packet (counted as `neighbour_unresolved`) and post a [`NeighbourEvent::Wanted`]; when
//! they receive an ARP reply or a neighbour advertisement (or a request from a host, which
//! tells its mapping) they post [`NeighbourEvent::Learned`]. The [`Resolver`] on the control
//! thread consumes those events, sends ARP requests and neighbour solicitations on its own TX
//! queue, refreshes known entries before they go stale, and publishes new tables. So a worker
//! never blocks, and never waits for an answer.

use crate::node::Node;
use arc_swap::ArcSwap;
use crossbeam::queue::ArrayQueue;
use hashbrown::HashMap;
use spillway_core::addr::Addr;
use spillway_core::snapshot::Snapshot;
use spillway_core::wire::MacAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Next hop -> MAC, read by the workers.
#[derive(Debug, Default, Clone)]
pub struct NeighbourTable {
    entries: HashMap<Addr, MacAddr>,
}

impl NeighbourTable {
    /// The MAC of `next_hop`, if resolved.
    #[inline]
    pub fn get(&self, next_hop: &Addr) -> Option<MacAddr> {
        self.entries.get(next_hop).copied()
    }

    /// Number of resolved next hops.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is resolved.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every entry (for the API).
    pub fn iter(&self) -> impl Iterator<Item = (&Addr, &MacAddr)> {
        self.entries.iter()
    }

    /// A table with one entry per pair (tests, static neighbours).
    pub fn from_pairs(pairs: impl IntoIterator<Item = (Addr, MacAddr)>) -> NeighbourTable {
        NeighbourTable { entries: pairs.into_iter().collect() }
    }
}

/// Per backend slot, the MAC of the backend's next hop, worked out once per change of the
/// snapshot or of the neighbour table rather than per packet (a hash lookup and the next-hop
/// choice per packet otherwise). A worker keeps one and calls [`NextHopCache::refresh`] once
/// per burst with what it loaded; a slot without a resolved next hop reads `None`, and the
/// packet path then takes the slow way (which asks the resolver).
///
/// The cache recognises the snapshot and the table by address. That is sound because the
/// worker holds both (through its `arc_swap` caches) until it loads newer ones: a newer
/// snapshot or table is allocated while the one it replaces is still alive, so it never
/// reuses the address the cache was built for.
#[derive(Debug, Default)]
pub struct NextHopCache {
    built_for: (usize, usize),
    macs: Vec<Option<MacAddr>>,
}

impl NextHopCache {
    /// An empty cache (every slot reads `None` until the first refresh).
    pub fn new() -> NextHopCache {
        NextHopCache::default()
    }

    /// Rebuild when `snap` or `table` is not the pair the cache was built for. Allocates only
    /// when the snapshot has more backend slots than any before.
    #[inline]
    pub fn refresh(&mut self, snap: &Snapshot, table: &NeighbourTable, node: &Node) {
        let key = (std::ptr::from_ref(snap) as usize, std::ptr::from_ref(table) as usize);
        if key == self.built_for {
            return;
        }
        self.built_for = key;
        self.macs.clear();
        self.macs.extend(
            snap.backends
                .iter()
                .map(|b| node.next_hop(&b.endpoint.addr).and_then(|hop| table.get(&hop))),
        );
    }

    /// The next hop's MAC for the backend in `slot`, when resolved.
    #[inline]
    pub fn get(&self, slot: u16) -> Option<MacAddr> {
        self.macs.get(usize::from(slot)).copied().flatten()
    }
}

/// What workers tell the resolver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NeighbourEvent {
    /// A packet needed this next hop and it was not resolved.
    Wanted(Addr),
    /// This address is at this MAC (from an ARP reply/request or an NA/NS).
    Learned(Addr, MacAddr),
}

/// The events queue between workers and the resolver: bounded, lock-free; a full queue drops
/// events (they are hints, repeated by the next packet).
pub type NeighbourEvents = Arc<ArrayQueue<NeighbourEvent>>;

/// Capacity of the events queue.
pub const EVENTS_CAPACITY: usize = 4096;

/// A shared cell for the current table.
pub type NeighbourCell = Arc<ArcSwap<NeighbourTable>>;

/// A worker's view of the table: loads the current one with one pointer comparison.
pub type NeighbourReader = arc_swap::Cache<NeighbourCell, Arc<NeighbourTable>>;

/// How the resolver sends a request: build the frame into the buffer and transmit it.
pub trait RequestSender {
    /// Send an ARP request / neighbour solicitation for `target`; false when it could not.
    fn send(&mut self, target: Addr) -> bool;
}

#[derive(Debug, Clone, Copy)]
struct Known {
    mac: MacAddr,
    confirmed: Instant,
}

/// Timers of the resolver.
#[derive(Debug, Clone, Copy)]
pub struct ResolverTimers {
    /// Re-ask a known neighbour after this long without confirmation.
    pub refresh: Duration,
    /// Forget it after this long without confirmation.
    pub expire: Duration,
    /// Ask again for an unresolved next hop at most this often.
    pub retry: Duration,
}

impl Default for ResolverTimers {
    fn default() -> Self {
        ResolverTimers {
            refresh: Duration::from_secs(30),
            expire: Duration::from_secs(120),
            retry: Duration::from_millis(500),
        }
    }
}

/// The control-side neighbour resolver.
#[derive(Debug)]
pub struct Resolver {
    cell: NeighbourCell,
    events: NeighbourEvents,
    known: HashMap<Addr, Known>,
    asked: HashMap<Addr, Instant>,
    wanted: Vec<Addr>,
    timers: ResolverTimers,
}

impl Resolver {
    /// A resolver with an empty table.
    pub fn new(timers: ResolverTimers) -> Resolver {
        Resolver {
            cell: Arc::new(ArcSwap::from_pointee(NeighbourTable::default())),
            events: Arc::new(ArrayQueue::new(EVENTS_CAPACITY)),
            known: HashMap::new(),
            asked: HashMap::new(),
            wanted: Vec::new(),
            timers,
        }
    }

    /// The cell workers read.
    pub fn cell(&self) -> NeighbourCell {
        Arc::clone(&self.cell)
    }

    /// A reader for one worker.
    pub fn reader(&self) -> NeighbourReader {
        arc_swap::Cache::new(self.cell())
    }

    /// The queue workers post to.
    pub fn events(&self) -> NeighbourEvents {
        Arc::clone(&self.events)
    }

    /// The next hops to keep resolved (backends' next hops, gateways), e.g. on every config
    /// change: they are asked for proactively, so traffic rarely waits.
    pub fn set_wanted(&mut self, next_hops: impl IntoIterator<Item = Addr>) {
        self.wanted = next_hops.into_iter().collect();
        self.wanted.sort_unstable();
        self.wanted.dedup();
    }

    /// Consume worker events, ask for what is missing or stale, expire what is dead, and
    /// publish a new table when it changed. Call it every few milliseconds.
    pub fn tick(&mut self, now: Instant, sender: &mut dyn RequestSender) {
        let mut changed = false;
        let mut to_ask: Vec<Addr> = Vec::new();
        while let Some(ev) = self.events.pop() {
            match ev {
                NeighbourEvent::Learned(ip, mac) => {
                    let prev = self.known.insert(ip, Known { mac, confirmed: now });
                    changed |= prev.is_none_or(|k| k.mac != mac);
                    self.asked.remove(&ip);
                }
                NeighbourEvent::Wanted(ip) => to_ask.push(ip),
            }
        }
        for ip in &self.wanted {
            match self.known.get(ip) {
                None => to_ask.push(*ip),
                Some(k) if now.duration_since(k.confirmed) >= self.timers.refresh => {
                    to_ask.push(*ip)
                }
                Some(_) => {}
            }
        }
        let before = self.known.len();
        let expire = self.timers.expire;
        self.known.retain(|_, k| now.duration_since(k.confirmed) < expire);
        changed |= self.known.len() != before;
        to_ask.sort_unstable();
        to_ask.dedup();
        for ip in to_ask {
            let due =
                self.asked.get(&ip).is_none_or(|t| now.duration_since(*t) >= self.timers.retry);
            if due && sender.send(ip) {
                self.asked.insert(ip, now);
            }
        }
        if changed {
            let table =
                NeighbourTable { entries: self.known.iter().map(|(ip, k)| (*ip, k.mac)).collect() };
            self.cell.store(Arc::new(table));
        }
    }

    /// The current table.
    pub fn table(&self) -> Arc<NeighbourTable> {
        self.cell.load_full()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Recorder(Vec<Addr>);
    impl RequestSender for Recorder {
        fn send(&mut self, target: Addr) -> bool {
            self.0.push(target);
            true
        }
    }

    fn a(s: &str) -> Addr {
        s.parse().unwrap()
    }

    #[test]
    fn asks_for_wanted_learns_refreshes_and_expires() {
        let timers = ResolverTimers {
            refresh: Duration::from_secs(30),
            expire: Duration::from_secs(120),
            retry: Duration::from_secs(1),
        };
        let mut r = Resolver::new(timers);
        let t0 = Instant::now();
        let mut tx = Recorder::default();
        r.set_wanted([a("198.18.1.1"), a("fd00::1:1")]);
        r.tick(t0, &mut tx);
        assert_eq!(tx.0, vec![a("198.18.1.1"), a("fd00::1:1")]);
        // Not asked again before the retry interval.
        r.tick(t0 + Duration::from_millis(500), &mut tx);
        assert_eq!(tx.0.len(), 2);
        let mac = [2, 0, 0, 0, 0, 1];
        r.events().push(NeighbourEvent::Learned(a("198.18.1.1"), mac)).unwrap();
        r.tick(t0 + Duration::from_secs(1), &mut tx);
        assert_eq!(r.table().get(&a("198.18.1.1")), Some(mac));
        // Only the unresolved one is asked again.
        assert_eq!(tx.0[2..], [a("fd00::1:1")]);
        // Refresh after 30 s, expire after 120 s without confirmation.
        r.tick(t0 + Duration::from_secs(32), &mut tx);
        assert!(tx.0.contains(&a("198.18.1.1")));
        r.tick(t0 + Duration::from_secs(122), &mut tx);
        assert_eq!(r.table().get(&a("198.18.1.1")), None);
    }

    #[test]
    fn worker_wanted_events_are_asked_once_per_retry() {
        let mut r = Resolver::new(ResolverTimers::default());
        let mut tx = Recorder::default();
        let t0 = Instant::now();
        for _ in 0..10 {
            r.events().push(NeighbourEvent::Wanted(a("198.18.9.9"))).unwrap();
        }
        r.tick(t0, &mut tx);
        assert_eq!(tx.0, vec![a("198.18.9.9")]);
    }
}
