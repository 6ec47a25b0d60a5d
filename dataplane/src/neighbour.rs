//! Neighbours: the MAC addresses of next hops (backends on the node's own subnets, or the
//! gateways), as the workers read them, and the control-side resolver that keeps them fresh.
//!
//! Workers never resolve anything themselves. They read a [`NeighbourTable`] published by
//! pointer swap (like the snapshot, once per burst), and when a next hop is missing they keep
//! the packet waiting for it ([`crate::unresolved`]) and post a [`NeighbourEvent::Wanted`]; when
//! they receive an ARP reply or a neighbour advertisement they post
//! [`NeighbourEvent::Learned`]. The [`Resolver`] on the control thread consumes those events,
//! sends ARP requests and neighbour solicitations on its own TX queue, refreshes known entries
//! before they go stale, and publishes new tables. So a worker never blocks, and never waits
//! for an answer.
//!
//! **Only what was asked for is learned.** Anyone on the segment can send an ARP reply, so the
//! resolver believes an answer only while one of its own requests for that address is
//! outstanding (for [`ResolverTimers::answer`] after it was sent), and it only ever asks for
//! configured next hops (backends on-link, gateways) and the next hops workers needed. Every
//! other answer is ignored and counted ([`NeighbourCounters`]):
//! - an answer nobody asked for (`ignored_unsolicited`);
//! - a different MAC for a known next hop, outside a request's window (`ignored_conflict`): it
//!   triggers a fresh resolution, rate-limited by [`ResolverTimers::retry`];
//! - a different MAC inside the window becomes a candidate change, applied when the window
//!   closes only if the known MAC did not answer the same request (a host that moved does
//!   not; a host that is still there does, and the claim is ignored as a conflict); and at
//!   most once per [`ResolverTimers::min_change`] per next hop (`rate_limited`).
//!
//! So a forged reply changes nothing while the real host answers, and a real move (a new MAC,
//! the old one silent) is picked up within one request window. A first resolution has nothing
//! to compare with: the first answer to the request wins, as with any ARP.

use crate::node::Node;
use arc_swap::ArcSwap;
use crossbeam::queue::ArrayQueue;
use hashbrown::HashMap;
use spillway_core::addr::Addr;
use spillway_core::counters::NeighbourCounters;
use spillway_core::snapshot::Snapshot;
use spillway_core::wire::build::{EncapKind, OuterV4, OuterV6};
use spillway_core::wire::{MacAddr, MacDisplay};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Next hop -> MAC, read by the workers.
#[derive(Debug, Default, Clone)]
pub struct NeighbourTable {
    entries: HashMap<Addr, MacAddr>,
    /// One more for every table the resolver publishes: a reader tells a new table from the
    /// one it saw last by this number.
    generation: u64,
}

impl NeighbourTable {
    /// The MAC of `next_hop`, if resolved.
    #[inline]
    pub fn get(&self, next_hop: &Addr) -> Option<MacAddr> {
        self.entries.get(next_hop).copied()
    }

    /// The table's generation (one more per table published).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// This table with generation `g` (tests, static neighbours).
    pub fn with_generation(self, g: u64) -> NeighbourTable {
        NeighbourTable { generation: g, ..self }
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
        NeighbourTable { entries: pairs.into_iter().collect(), generation: 0 }
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
    hops: Vec<Option<NextHop>>,
}

/// How packets leave for one backend: its next hop's MAC and the outer Ethernet and IP
/// headers of its encapsulation, prebuilt ([`OuterV4`] for an IPv4 backend, [`OuterV6`] for
/// an IPv6 one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NextHop {
    /// The next hop's MAC.
    pub mac: MacAddr,
    /// The outer headers (an IPv4 backend, and the node has an IPv4 address).
    pub outer_v4: Option<OuterV4>,
    /// The outer headers of IP-in-IPv6 (an IPv6 backend, and the node has an IPv6 address).
    pub outer_v6: Option<OuterV6>,
}

impl NextHop {
    /// The prebuilt IPv6 outer headers for an encapsulation of `kind`: IP-in-IPv6 only (GUE
    /// over IPv6 checksums each packet's whole payload: the general builder writes it).
    #[inline]
    pub fn outer_v6_for(&self, kind: EncapKind) -> Option<&OuterV6> {
        self.outer_v6.as_ref().filter(|_| kind == EncapKind::Ipip)
    }
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
        self.hops.clear();
        self.hops.extend(snap.backends.iter().map(|b| {
            let dst = b.endpoint.addr;
            let mac = table.get(&node.next_hop(&dst)?)?;
            let src = node.source_for(&dst);
            let outer_v4 = src.and_then(|src| OuterV4::new(mac, node.mac, src, dst));
            let outer_v6 = src.and_then(|src| OuterV6::new(mac, node.mac, src, dst));
            Some(NextHop { mac, outer_v4, outer_v6 })
        }));
    }

    /// How packets leave for the backend in `slot`, when its next hop is resolved.
    #[inline]
    pub fn hop(&self, slot: u16) -> Option<&NextHop> {
        self.hops.get(usize::from(slot)).and_then(Option::as_ref)
    }
}

/// What workers tell the resolver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NeighbourEvent {
    /// A packet needed this next hop and it was not resolved.
    Wanted(Addr),
    /// An answer heard: this address says it is at this MAC (an ARP reply or a neighbour
    /// advertisement). The resolver decides whether to believe it.
    Learned(Addr, MacAddr),
}

/// The events queue between workers and the resolver: bounded, lock-free; a full queue drops
/// events (they are hints, repeated by the next packet).
pub type EventQueue = ArrayQueue<NeighbourEvent>;

/// The events queue, shared.
pub type NeighbourEvents = Arc<EventQueue>;

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
    changed: Instant,
}

/// A different MAC heard inside a request's window, applied when the window closes unless the
/// known MAC answers meanwhile.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    mac: MacAddr,
    until: Instant,
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
    /// How long after a request its answers are believed.
    pub answer: Duration,
    /// The shortest time between two MAC changes of one next hop.
    pub min_change: Duration,
}

impl Default for ResolverTimers {
    fn default() -> Self {
        ResolverTimers {
            refresh: Duration::from_secs(30),
            expire: Duration::from_secs(120),
            retry: Duration::from_millis(500),
            answer: Duration::from_millis(500),
            min_change: Duration::from_secs(5),
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
    candidates: HashMap<Addr, Candidate>,
    wanted: Vec<Addr>,
    timers: ResolverTimers,
    counters: Arc<NeighbourCounters>,
    /// When a conflict was last logged, per address (one line a minute at most).
    logged: HashMap<Addr, Instant>,
    /// Since when each unresolved wanted next hop has been so, and when that was last logged.
    missing: HashMap<Addr, (Instant, Option<Instant>)>,
}

/// A configured next hop unresolved this long is logged (then once a minute).
const UNRESOLVED_LOG_AFTER: Duration = Duration::from_secs(5);

/// At most one log line per address and this long about ignored claims.
const LOG_EVERY: Duration = Duration::from_secs(60);

impl Resolver {
    /// A resolver with an empty table.
    pub fn new(timers: ResolverTimers) -> Resolver {
        Resolver {
            cell: Arc::new(ArcSwap::from_pointee(NeighbourTable::default())),
            events: Arc::new(ArrayQueue::new(EVENTS_CAPACITY)),
            known: HashMap::new(),
            asked: HashMap::new(),
            candidates: HashMap::new(),
            wanted: Vec::new(),
            timers,
            counters: Arc::new(NeighbourCounters::default()),
            logged: HashMap::new(),
            missing: HashMap::new(),
        }
    }

    /// What the resolver did with the answers (for the metrics).
    pub fn counters(&self) -> Arc<NeighbourCounters> {
        Arc::clone(&self.counters)
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
                    changed |= self.heard(ip, mac, now, &mut to_ask);
                }
                NeighbourEvent::Wanted(ip) => to_ask.push(ip),
            }
        }
        changed |= self.close_windows(now);
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
            let table = NeighbourTable {
                entries: self.known.iter().map(|(ip, k)| (*ip, k.mac)).collect(),
                generation: self.cell.load().generation + 1,
            };
            self.cell.store(Arc::new(table));
            self.counters.publishes.inc();
        }
        self.watch_unresolved(now);
    }

    /// The unresolved gauge, and a log line for a configured next hop that stays unresolved.
    fn watch_unresolved(&mut self, now: Instant) {
        let known = &self.known;
        self.missing.retain(|ip, _| !known.contains_key(ip));
        for ip in &self.wanted {
            if self.known.contains_key(ip) {
                continue;
            }
            let (since, logged) = self.missing.entry(*ip).or_insert((now, None));
            let due = logged.is_none_or(|t| now.duration_since(t) >= LOG_EVERY);
            if now.duration_since(*since) >= UNRESOLVED_LOG_AFTER && due {
                *logged = Some(now);
                tracing::warn!(
                    "neighbour {ip}: a configured next hop has not answered ARP/ND for {} s: \
                     packets to its backends are dropped as neighbour_unresolved (metric \
                     spillway_neighbour_unresolved_next_hops)",
                    now.duration_since(*since).as_secs()
                );
            }
        }
        self.missing.retain(|ip, _| self.wanted.contains(ip));
        self.counters.unresolved.set(self.missing.len() as u64);
    }

    /// One answer heard (module doc); true when the table changed.
    fn heard(&mut self, ip: Addr, mac: MacAddr, now: Instant, to_ask: &mut Vec<Addr>) -> bool {
        let window = self.asked.get(&ip).map(|t| *t + self.timers.answer).filter(|end| now < *end);
        match (self.known.get_mut(&ip), window) {
            (Some(k), _) if k.mac == mac => {
                k.confirmed = now;
                self.counters.confirmed.inc();
                if let Some(c) = self.candidates.remove(&ip) {
                    // The known host answered the same request: the other claim was false.
                    self.counters.ignored_conflict.inc();
                    self.log_conflict(ip, c.mac, mac, now);
                }
                false
            }
            (Some(_), Some(until)) => {
                // The first different MAC of a window is the candidate (counted when the
                // window closes); any other answer of the window is ignored.
                if self.candidates.contains_key(&ip) {
                    self.counters.ignored_conflict.inc();
                } else {
                    self.candidates.insert(ip, Candidate { mac, until });
                }
                false
            }
            (Some(k), None) => {
                // A claim outside any request: check it with a fresh resolution.
                let known = k.mac;
                self.counters.ignored_conflict.inc();
                self.log_conflict(ip, mac, known, now);
                to_ask.push(ip);
                false
            }
            (None, Some(_)) => {
                self.known.insert(ip, Known { mac, confirmed: now, changed: now });
                self.asked.remove(&ip);
                self.counters.learned.inc();
                true
            }
            (None, None) => {
                self.counters.ignored_unsolicited.inc();
                false
            }
        }
    }

    /// Applies the candidate changes whose window closed without the known MAC answering;
    /// true when the table changed.
    fn close_windows(&mut self, now: Instant) -> bool {
        let mut changed = false;
        let closed: Vec<(Addr, Candidate)> =
            self.candidates.iter().filter(|(_, c)| now >= c.until).map(|(a, c)| (*a, *c)).collect();
        for (ip, c) in closed {
            self.candidates.remove(&ip);
            let asked_at = c.until - self.timers.answer;
            match self.known.get_mut(&ip) {
                Some(k) if k.confirmed >= asked_at => {
                    // The known MAC answered the same request (before or after the claim).
                    let known = k.mac;
                    self.counters.ignored_conflict.inc();
                    self.log_conflict(ip, c.mac, known, now);
                }
                Some(k) if now.duration_since(k.changed) < self.timers.min_change => {
                    self.counters.rate_limited.inc();
                }
                Some(k) => {
                    tracing::warn!(
                        "neighbour {ip}: moved from {} to {} (a fresh resolution got only the \
                         new MAC)",
                        MacDisplay(k.mac),
                        MacDisplay(c.mac)
                    );
                    *k = Known { mac: c.mac, confirmed: now, changed: now };
                    self.counters.changed.inc();
                    changed = true;
                }
                None => {
                    self.known.insert(ip, Known { mac: c.mac, confirmed: now, changed: now });
                    self.counters.learned.inc();
                    changed = true;
                }
            }
        }
        changed
    }

    fn log_conflict(&mut self, ip: Addr, claimed: MacAddr, known: MacAddr, now: Instant) {
        if self.logged.get(&ip).is_none_or(|t| now.duration_since(*t) >= LOG_EVERY) {
            self.logged.insert(ip, now);
            tracing::warn!(
                "neighbour {ip}: {} claims it, but it is at {}: ignored (at most one such line \
                 a minute per address; metric spillway_neighbour_answers_total)",
                MacDisplay(claimed),
                MacDisplay(known)
            );
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
        let timers = ResolverTimers { retry: Duration::from_secs(1), ..ResolverTimers::default() };
        let mut r = Resolver::new(timers);
        let t0 = Instant::now();
        let mut tx = Recorder::default();
        r.set_wanted([a("198.18.1.1"), a("fd00::1:1")]);
        r.tick(t0, &mut tx);
        assert_eq!(tx.0, vec![a("198.18.1.1"), a("fd00::1:1")]);
        // Not asked again before the retry interval.
        r.tick(t0 + Duration::from_millis(200), &mut tx);
        assert_eq!(tx.0.len(), 2);
        let mac = [2, 0, 0, 0, 0, 1];
        r.events().push(NeighbourEvent::Learned(a("198.18.1.1"), mac)).unwrap();
        r.tick(t0 + Duration::from_millis(300), &mut tx);
        assert_eq!(r.table().get(&a("198.18.1.1")), Some(mac));
        assert_eq!(r.counters().learned.get(), 1);
        // Only the unresolved one is asked again.
        r.tick(t0 + Duration::from_secs(1), &mut tx);
        assert_eq!(tx.0[2..], [a("fd00::1:1")]);
        // Refreshed after 30 s: the answer repeats the MAC and keeps the entry past 120 s.
        let refresh = t0 + Duration::from_secs(31);
        r.tick(refresh, &mut tx);
        assert_eq!(tx.0.iter().filter(|x| **x == a("198.18.1.1")).count(), 2);
        r.events().push(NeighbourEvent::Learned(a("198.18.1.1"), mac)).unwrap();
        r.tick(refresh + Duration::from_millis(10), &mut tx);
        assert_eq!(r.counters().confirmed.get(), 1);
        r.tick(t0 + Duration::from_secs(122), &mut tx);
        assert_eq!(r.table().get(&a("198.18.1.1")), Some(mac));
        // Expired 120 s after the last answer.
        r.tick(t0 + Duration::from_secs(152), &mut tx);
        assert_eq!(r.table().get(&a("198.18.1.1")), None);
    }

    const BACKEND: &str = "198.18.1.1";
    const REAL: MacAddr = [2, 0, 0, 0, 0, 1];
    const FORGED: MacAddr = [2, 0, 0, 0, 0, 0x66];

    /// A resolver that learned BACKEND at REAL through its own request at `t0`.
    fn resolved(t0: Instant, tx: &mut Recorder) -> Resolver {
        let mut r = Resolver::new(ResolverTimers::default());
        r.set_wanted([a(BACKEND)]);
        r.tick(t0, tx);
        r.events().push(NeighbourEvent::Learned(a(BACKEND), REAL)).unwrap();
        r.tick(t0 + Duration::from_millis(10), tx);
        assert_eq!(r.table().get(&a(BACKEND)), Some(REAL));
        r
    }

    #[test]
    fn a_forged_reply_for_a_backend_changes_nothing() {
        let t0 = Instant::now();
        let mut tx = Recorder::default();
        let mut r = resolved(t0, &mut tx);
        let publishes = r.counters().publishes.get();
        // Unsolicited: ignored, and checked with a fresh request.
        let t1 = t0 + Duration::from_secs(5);
        r.events().push(NeighbourEvent::Learned(a(BACKEND), FORGED)).unwrap();
        r.tick(t1, &mut tx);
        assert_eq!(r.table().get(&a(BACKEND)), Some(REAL));
        assert_eq!(r.counters().ignored_conflict.get(), 1);
        assert_eq!(tx.0, [a(BACKEND), a(BACKEND)], "a fresh resolution was asked");
        // The forger answers the request too, before and after the real host: still nothing.
        for mac in [FORGED, REAL, FORGED] {
            r.events().push(NeighbourEvent::Learned(a(BACKEND), mac)).unwrap();
        }
        r.tick(t1 + Duration::from_millis(10), &mut tx);
        r.tick(t1 + Duration::from_secs(1), &mut tx);
        assert_eq!(r.table().get(&a(BACKEND)), Some(REAL));
        assert_eq!(r.counters().changed.get(), 0);
        assert_eq!(r.counters().ignored_conflict.get(), 3);
        assert_eq!(r.counters().publishes.get(), publishes, "the workers' table never changed");
    }

    #[test]
    fn a_backend_that_moved_is_picked_up_by_a_fresh_resolution() {
        let t0 = Instant::now();
        let mut tx = Recorder::default();
        let mut r = resolved(t0, &mut tx);
        // The host moved: its gratuitous reply is only a hint...
        let t1 = t0 + Duration::from_secs(10);
        r.events().push(NeighbourEvent::Learned(a(BACKEND), FORGED)).unwrap();
        r.tick(t1, &mut tx);
        assert_eq!(r.table().get(&a(BACKEND)), Some(REAL));
        // ...and the fresh resolution gets only the new MAC: applied when the window closes.
        r.events().push(NeighbourEvent::Learned(a(BACKEND), FORGED)).unwrap();
        r.tick(t1 + Duration::from_millis(10), &mut tx);
        assert_eq!(r.table().get(&a(BACKEND)), Some(REAL), "not before the window closes");
        r.tick(t1 + Duration::from_millis(600), &mut tx);
        assert_eq!(r.table().get(&a(BACKEND)), Some(FORGED));
        assert_eq!(r.counters().changed.get(), 1);
        // Moving back within min_change (5 s) is rate-limited; after it, allowed.
        let t2 = t1 + Duration::from_secs(2);
        r.events().push(NeighbourEvent::Learned(a(BACKEND), REAL)).unwrap();
        r.tick(t2, &mut tx);
        r.events().push(NeighbourEvent::Learned(a(BACKEND), REAL)).unwrap();
        r.tick(t2 + Duration::from_millis(10), &mut tx);
        r.tick(t2 + Duration::from_millis(600), &mut tx);
        assert_eq!(r.table().get(&a(BACKEND)), Some(FORGED));
        assert_eq!(r.counters().rate_limited.get(), 1);
        let t3 = t1 + Duration::from_secs(6);
        r.events().push(NeighbourEvent::Learned(a(BACKEND), REAL)).unwrap();
        r.tick(t3, &mut tx);
        r.events().push(NeighbourEvent::Learned(a(BACKEND), REAL)).unwrap();
        r.tick(t3 + Duration::from_millis(10), &mut tx);
        r.tick(t3 + Duration::from_millis(600), &mut tx);
        assert_eq!(r.table().get(&a(BACKEND)), Some(REAL));
        assert_eq!(r.counters().changed.get(), 2);
    }

    #[test]
    fn answers_nobody_asked_for_are_ignored() {
        let mut r = Resolver::new(ResolverTimers::default());
        let mut tx = Recorder::default();
        let t0 = Instant::now();
        r.set_wanted([a(BACKEND)]);
        r.tick(t0, &mut tx);
        // Another address, never asked; and the backend after its request's window.
        r.events().push(NeighbourEvent::Learned(a("198.18.7.7"), FORGED)).unwrap();
        r.tick(t0 + Duration::from_millis(10), &mut tx);
        r.events().push(NeighbourEvent::Learned(a(BACKEND), FORGED)).unwrap();
        r.tick(t0 + Duration::from_millis(700), &mut tx);
        assert!(r.table().is_empty());
        assert_eq!(r.counters().ignored_unsolicited.get(), 2);
        assert_eq!(r.counters().unresolved.get(), 1, "the backend is still unresolved");
        assert_eq!(r.counters().publishes.get(), 0);
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
