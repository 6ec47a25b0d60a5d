//! The per-lcore worker: one poll loop that owns its queues, its connection table and its
//! counters.
//!
//! A [`Worker`] owns one RX and one TX queue on every port and runs to completion on its EAL
//! lcore: receive a burst, [`Worker::process`] it, buffer the packets for TX, flush full TX
//! buffers at once and the others when the TSC drain deadline passes (DPDK l3fwd style; a
//! full burst of packets to send, with nothing buffered, goes to the driver as it is).
//! In [`Mode::LoadBalance`] it loads the current snapshot and neighbour table once per burst
//! hands the burst to [`crate::path::process_burst`] (to the capture's
//! [`WorkerTap::process_burst`](crate::capture::WorkerTap::process_burst) while a capture is
//! active, one test per burst); in [`Mode::IoForward`] (the
//! baseline for benchmarks and the foundation tests) every packet goes back out unchanged.
//! It sweeps its connection table at a steady pace, one bucket at a time, so that every bucket
//! is visited once per [`SWEEP_PERIOD_SECS`] (memory reclamation only: an entry invalid for
//! every packet is removed; until then its next packet reports why it was replaced), at most
//! one bucket per poll, each sweep prefetching the lines of the next
//! ([`Shard::sweep_lines`]).
//!
//! It polls without pause unless `dataplane.idle_sleep_us` is set
//! ([`WorkerParams::idle_sleep_us`]): then a poll that received nothing, with no fleet-sync
//! work under way, flushes the TX buffers and sleeps that long, so that an idle worker leaves
//! its core to others (a VM, a shared host, a test rig).
//!
//! It must never allocate, lock, log, or do a shared atomic read-modify-write per packet. Its
//! counters ([`WorkerCounters`]) are written only by itself, with relaxed loads and stores,
//! and read by the main thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use spillway_core::conntrack::Shard;
pub use spillway_core::counters::WorkerCounters;
use spillway_core::counters::{PathDrop, Reason};
use spillway_core::decide::is_reclaimable;
use spillway_core::mailbox::{Mailbox, Query};
use spillway_core::publish::SnapshotReader;
use spillway_core::time::Time;

use crate::capture::WorkerTap;
use crate::dpdk::{self, LcoreId, Mbuf, MbufBurst, RxQueue, TxQueue, TxResult};
use crate::kernel::KernelLink;
use crate::neighbour::{NeighbourEvents, NeighbourReader, NextHopCache};
use crate::node::Node;
use crate::outbox::Outbox;
use crate::path::{self, Outcome, PacketBuf, PathCtx};
use crate::sync::WorkerSync;
use crate::unresolved::WaitQueue;

// A received burst fits the staged path's arrays.
const _: () = assert!(path::MAX_BURST == dpdk::MAX_BURST);

/// A reading of a worker's main counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CounterValues {
    /// Packets received.
    pub rx: u64,
    /// Packets handed to the driver for transmission.
    pub tx: u64,
    /// Packets dropped, for any reason (the driver refusing them on TX included).
    pub dropped: u64,
}

impl CounterValues {
    /// The change from `earlier` to `self`.
    pub fn since(&self, earlier: &CounterValues) -> CounterValues {
        CounterValues {
            rx: self.rx.saturating_sub(earlier.rx),
            tx: self.tx.saturating_sub(earlier.tx),
            dropped: self.dropped.saturating_sub(earlier.dropped),
        }
    }

    /// Read a worker's counters (each one atomically; together they are not a snapshot).
    pub fn read(c: &WorkerCounters) -> CounterValues {
        let dropped = Reason::all()
            .filter(|r| !matches!(r, Reason::Forward(_)))
            .map(|r| c.reason(r).get())
            .sum();
        CounterValues { rx: c.rx_packets.get(), tx: c.tx_packets.get(), dropped }
    }
}

/// TX results summed over a burst, published once.
#[derive(Debug, Clone, Copy, Default)]
struct TxTally {
    sent: u64,
    dropped: u64,
}

impl TxTally {
    #[inline]
    fn add(&mut self, r: TxResult) {
        self.sent += u64::from(r.sent);
        self.dropped += u64::from(r.dropped);
    }
}

/// A worker's queues on one port.
#[derive(Debug)]
pub struct PortQueues<'p> {
    /// The RX queue it polls.
    pub rx: RxQueue<'p>,
    /// The TX queue it transmits on.
    pub tx: TxQueue<'p>,
}

/// What the worker does with packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// The load balancer.
    #[default]
    LoadBalance,
    /// Receive and send back out unchanged (the benchmark baseline).
    IoForward,
}

/// Settings fixed when the worker is built.
#[derive(Debug, Clone, Copy)]
pub struct WorkerParams {
    /// Packets per RX poll (1..=[`dpdk::MAX_BURST`]).
    pub burst_size: u16,
    /// TSC ticks a buffered TX packet may wait before the buffers are flushed.
    pub drain_ticks: u64,
    /// TSC ticks per second.
    pub tsc_hz: u64,
    /// Microseconds to sleep after a poll that received nothing while no sync pass is under
    /// way (`dataplane.idle_sleep_us`); 0 polls without pause.
    pub idle_sleep_us: u32,
}

/// What a load-balancing worker reads and owns besides its queues.
#[derive(Debug)]
pub struct Balancer<'p> {
    /// Conntrack queries from the control thread, answered between bursts.
    pub mailbox: Mailbox,
    /// Frames from the control thread to send on the first port (worker 0 only).
    pub outbox: Option<Outbox<'p>>,
    /// The current snapshot, loaded once per burst.
    pub snapshots: SnapshotReader,
    /// The current neighbour table, loaded once per burst.
    pub neighbours: NeighbourReader,
    /// Per backend slot, its next hop's MAC, refreshed when the snapshot or table changes.
    pub next_hops: NextHopCache,
    /// Where to post neighbour events.
    pub events: NeighbourEvents,
    /// The worker's own connection table.
    pub shard: Shard,
    /// The node's addresses and MAC.
    pub node: Node,
    /// The origin of [`Time`], shared with the control thread.
    pub origin: Instant,
    /// The exception path to the kernel interface, when configured.
    pub kernel: Option<KernelLink<'p>>,
    /// Fleet sync (FS), when configured.
    pub sync: Option<WorkerSync>,
    /// Frames waiting for their next hop's MAC, with the port they leave by.
    pub waiting: WaitQueue<(Mbuf<'p>, usize)>,
    /// Packet capture (`spillwayctl capture`): the tap of a capture under way, if any.
    pub tap: WorkerTap,
}

/// [`crate::unresolved::WAIT`] in TSC ticks.
fn wait_ticks(tsc_hz: u64) -> u64 {
    let ms = u64::try_from(crate::unresolved::WAIT.as_millis()).unwrap_or(u64::MAX);
    tsc_hz.saturating_mul(ms) / 1000
}

/// Every conntrack bucket is swept once per this many seconds (the sweep also bounds how long
/// an untouched entry can sit, which keeps its 32-bit idle clock exact).
pub const SWEEP_PERIOD_SECS: u64 = 10;

/// One poll-mode worker. Build it on the main thread, move it to its lcore, call
/// [`Worker::run`].
#[derive(Debug)]
pub struct Worker<'p, 'c> {
    index: usize,
    lcore: LcoreId,
    ports: Vec<PortQueues<'p>>,
    params: WorkerParams,
    counters: &'c WorkerCounters,
    balancer: Option<Balancer<'p>>,
    gate: Option<dpdk::GateSlot>,
}

impl<'p, 'c> Worker<'p, 'c> {
    /// A worker numbered `index`, to run on `lcore`, owning `ports[i]` queues for port index
    /// `i`, publishing into `counters`; it load-balances with `balancer`, or io-forwards
    /// without one.
    pub fn new(
        index: usize,
        lcore: LcoreId,
        ports: Vec<PortQueues<'p>>,
        params: WorkerParams,
        counters: &'c WorkerCounters,
        balancer: Option<Balancer<'p>>,
    ) -> Self {
        if let Some(b) = &balancer {
            counters.ct_capacity.set(b.shard.capacity() as u64);
        }
        Worker { index, lcore, ports, params, counters, balancer, gate: None }
    }

    /// Makes every poll iteration pass `gate` (set when a port is `net_memif`: the driver
    /// may unmap a port's memory under a burst, see [`dpdk::PollGate`]).
    pub fn set_poll_gate(&mut self, gate: dpdk::GateSlot) {
        self.gate = Some(gate);
    }

    /// The worker's number.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Moves the worker's queues to `other`, which has none (whatever is buffered for TX is
    /// sent first): the pipeline benchmark alternates a balancing and an io-forwarding worker
    /// on the same queues, a fraction of a second each, on one lcore.
    ///
    /// # Panics
    ///
    /// If `other` has queues of its own (they would be dropped).
    pub fn move_queues_to(&mut self, other: &mut Worker<'p, '_>) {
        assert!(other.ports.is_empty(), "move_queues_to: the other worker has queues");
        self.drain();
        other.ports = std::mem::take(&mut self.ports);
    }

    /// Gives the worker's queues back (to build another worker on them, as the benchmarks
    /// do between runs); whatever is buffered for TX is sent first.
    pub fn into_queues(mut self) -> Vec<PortQueues<'p>> {
        self.drain();
        std::mem::take(&mut self.ports)
    }

    /// The lcore it is meant to run on.
    pub fn lcore(&self) -> LcoreId {
        self.lcore
    }

    /// Hands back the worker's connection table (load-balance mode), once [`Worker::run`] has
    /// returned: a clean stop writes the tables to the table file after the workers stopped.
    pub fn take_shard(&mut self) -> Option<Shard> {
        self.balancer.take().map(|b| b.shard)
    }

    /// Polls until `stop` is set, then flushes its TX buffers.
    pub fn run(&mut self, stop: &AtomicBool) {
        let mut last_drain = dpdk::tsc();
        let buckets = self.balancer.as_ref().map_or(1, |b| b.shard.bucket_count()).max(1) as u64;
        let sweep_every = (self.params.tsc_hz * SWEEP_PERIOD_SECS / buckets).max(1);
        let mut next_sweep = last_drain;
        let gate = self.gate;
        // Every poll receives into this one burst, which `process` leaves empty.
        let mut rx = MbufBurst::new();
        while !stop.load(Ordering::Relaxed) {
            if gate.as_ref().is_some_and(|g| !g.enter()) {
                // A memif port is being connected or disconnected: touch no queue.
                if self.balancer.is_some() {
                    self.answer_mailbox();
                }
                std::hint::spin_loop();
                continue;
            }
            let mut received = false;
            for port in 0..self.ports.len() {
                if self.ports[port].rx.rx_burst_into(&mut rx, self.params.burst_size) > 0 {
                    received = true;
                    self.process(port, &mut rx);
                }
            }
            // One TSC read per poll serves the sweep pace and the TX drain deadline.
            let now = dpdk::tsc();
            if self.balancer.is_some() {
                if now >= next_sweep {
                    self.sweep(1);
                    next_sweep = next_sweep.wrapping_add(sweep_every).max(now);
                }
                self.send_outbox();
                self.answer_mailbox();
                self.poll_tap();
                self.sync_step();
                self.release_waiting(now);
            }
            if now.wrapping_sub(last_drain) >= self.params.drain_ticks {
                self.drain();
                self.counters.heartbeat.inc();
                last_drain = now;
            }
            // Per poll, not per packet: with idle sleep off this is one test.
            let idle = self.params.idle_sleep_us > 0 && !received && !self.sync_busy();
            if idle {
                // Nothing waits in the TX buffers through the sleep.
                self.drain();
            }
            if let Some(g) = &gate {
                g.leave();
            }
            if idle {
                std::thread::sleep(Duration::from_micros(u64::from(self.params.idle_sleep_us)));
            }
        }
        let Some(g) = gate else { return self.drain() };
        // Flush through the gate too; if it stays closed, the buffers are freed on drop.
        let deadline = dpdk::tsc().saturating_add(self.params.tsc_hz);
        while dpdk::tsc() < deadline {
            if g.enter() {
                self.drain();
                g.leave();
                return;
            }
            std::hint::spin_loop();
        }
    }

    /// Handles one received burst from port index `port` and leaves it empty; what goes out
    /// leaves by the same port, through the TX buffer.
    #[inline]
    pub fn process(&mut self, port: usize, burst: &mut MbufBurst<'p>) {
        let c = self.counters;
        c.rx_packets.add(burst.len() as u64);
        if self.balancer.is_some() {
            // Both lines of every descriptor, before the byte count below reads the first: the
            // path reads and writes the first, and freeing the mbuf after transmit reads the
            // second (`next`), which the path never touches; written by whichever core
            // allocated the mbuf (in the pipeline benchmark, the generator's), both miss
            // otherwise; issued here, before the count, they have longer to arrive than in
            // `process_burst` (docs/performance.md, "The staged burst"). Where the
            // worker's own driver allocated the mbuf, the lines are local and this costs hits.
            // (Not in io-forward mode, the benchmarks' baseline, left as it was.) The first line
            // is taken for writing (`prefetchw`): the path writes it (the new data offset and
            // lengths), and a line read from another core's cache had to be claimed again for
            // that write. The frame's data line, taken for writing too, measured slower, so it
            // is only read-prefetched.
            for m in burst.iter() {
                m.prefetch_descriptor_for_write();
                m.prefetch_second_line();
            }
        }
        c.rx_bytes.add(burst.iter().map(|m| m.pkt_len() as u64).sum());
        let tx = &mut self.ports[port].tx;
        let mut tally = TxTally::default();
        let tsc_hz = self.params.tsc_hz;
        let index = self.index;
        let Some(b) = &mut self.balancer else {
            for m in burst.drain() {
                tally.add(tx.push(m));
            }
            publish_tx(c, tally);
            return;
        };
        // Split the borrows: the caches are loaded once (one pointer compare each), the shard
        // is written.
        let Balancer {
            snapshots,
            neighbours,
            next_hops,
            events,
            shard,
            node,
            origin,
            kernel,
            waiting,
            tap,
            ..
        } = b;
        let snap = snapshots.load();
        c.snapshot_generation.set(snap.generation);
        let neighbours = neighbours.load();
        next_hops.refresh(snap, neighbours, node);
        let now = time_since(*origin);
        let mut ctx = PathCtx {
            snap,
            shard,
            now,
            node,
            neighbours,
            next_hops,
            events,
            counters: c,
            kernel: kernel.is_some(),
            waiting: path::WaitingSlots::default(),
        };
        let mut outcomes = [Outcome::Consumed; path::MAX_BURST];
        // The staged burst path; through the capture only while one is under way (one test).
        if tap.is_active() {
            tap.process_burst(burst.as_mut_slice(), &mut ctx, &mut outcomes, index, port);
        } else {
            path::process_burst(burst.as_mut_slice(), &mut ctx, &mut outcomes);
        }
        // A full burst with every packet to transmit goes to the driver as it is when nothing
        // is buffered: what pushing its packets one by one would do (the buffer holds a full
        // burst and flushes when full), without moving each into the buffer
        // (docs/performance.md, "The staged burst"). Not in io-forward mode, the benchmarks'
        // baseline, left as it was.
        if burst.is_full() && tx.buffered() == 0 && outcomes.iter().all(|&o| o == Outcome::Transmit)
        {
            tally.add(tx.send_now(burst));
        }
        // What is not sent is freed in bulk when `spent` goes out of scope.
        let mut spent = MbufBurst::new();
        let mut waits = ctx.waiting.slots().iter();
        for (m, &o) in burst.drain().zip(&outcomes) {
            match o {
                Outcome::Transmit => tally.add(tx.push(m)),
                Outcome::ToKernel => match kernel.as_ref().map(|k| k.to_kernel.push(m)) {
                    Some(Ok(())) => c.kernel_frames.inc(),
                    Some(Err(m)) => {
                        c.reason(Reason::Path(PathDrop::KernelBusy)).inc();
                        let _ = spent.push(m);
                    }
                    None => {}
                },
                Outcome::Wait => {
                    let until = dpdk::tsc().wrapping_add(wait_ticks(tsc_hz));
                    let backend = waits.next().and_then(|&slot| snap.backend(slot));
                    let hop = backend.and_then(|b| node.next_hop(&b.endpoint.addr));
                    let len = m.pkt_len();
                    let kept = match hop {
                        Some(hop) => waiting.push((m, port), len, hop, until).map_err(|(m, _)| m),
                        None => Err(m),
                    };
                    if let Err(m) = kept {
                        c.reason(Reason::Path(PathDrop::NeighbourUnresolved)).inc();
                        let _ = spent.push(m);
                    }
                }
                _ => {
                    let _ = spent.push(m);
                }
            }
        }
        let stats = shard.stats();
        c.ct_entries.set(stats.entries);
        c.ct_inserts.set(stats.inserts);
        c.ct_evictions.set(stats.evictions);
        c.ct_bypassed.set(stats.bypassed);
        c.ct_copies.set(stats.copies);
        publish_tx(c, tally);
    }

    /// Sends the frames whose next hop is now resolved, drops those that waited in vain
    /// ([`crate::unresolved`]); one length test when nothing waits. `now` is the TSC.
    pub fn release_waiting(&mut self, now: u64) {
        let Some(b) = self.balancer.as_mut().filter(|b| !b.waiting.is_empty()) else { return };
        let c = self.counters;
        let table = b.neighbours.load();
        let ports = &mut self.ports;
        let mut tally = TxTally::default();
        let mut spent = MbufBurst::new();
        let r = b.waiting.release(
            table,
            now,
            |(m, _), mac| {
                if let Some(dst) = m.data_mut().ok().and_then(|d| d.get_mut(..6)) {
                    dst.copy_from_slice(&mac);
                }
            },
            |(m, port)| tally.add(ports[port].tx.push(m)),
            |(m, _)| {
                let _ = spent.push(m);
            },
        );
        c.neighbour_waited.add(r.sent);
        c.reason(Reason::Path(PathDrop::NeighbourUnresolved)).add(r.expired);
        publish_tx(c, tally);
    }

    /// Takes the tap of a capture that starts, drops the one of a capture that ended
    /// ([`crate::capture`]; one empty queue and one flag when nothing changes).
    fn poll_tap(&mut self) {
        if let Some(b) = &mut self.balancer {
            b.tap.poll();
        }
    }

    /// Answers the control thread's conntrack queries: lookups, and slices of the table for a
    /// dump (rare; one atomic load when empty).
    fn answer_mailbox(&mut self) {
        let Some(b) = &mut self.balancer else { return };
        while let Some(q) = b.mailbox.take() {
            let now = time_since(b.origin);
            match q {
                Query::Lookup(q) => {
                    let entry = b.shard.lookup(&q.key, q.hash, now).map(|(_, e)| e);
                    let _ = q.reply.send(entry);
                }
                // A few buckets into the query's own buffer: a few microseconds.
                Query::Slice(q) => q.answer(&b.shard, now),
            }
        }
    }

    /// Transmits what the control thread queued (rare: neighbour requests) and, on worker 0
    /// with an exception path, what the kernel sent (at most a burst per poll).
    fn send_outbox(&mut self) {
        let Some(b) = self.balancer.as_ref() else { return };
        let mut tally = TxTally::default();
        if let Some(outbox) = &b.outbox {
            while let Some(m) = outbox.pop() {
                tally.add(self.ports[0].tx.push(m));
            }
        }
        if let Some(from_kernel) = b.kernel.as_ref().and_then(|k| k.from_kernel.as_ref()) {
            for _ in 0..dpdk::MAX_BURST {
                let Some(m) = from_kernel.pop() else { break };
                tally.add(self.ports[0].tx.push(m));
            }
        }
        publish_tx(self.counters, tally);
    }

    /// A sync pass is under way or peers' entries wait to be stored: the worker polls without
    /// sleeping, since that work advances a little per poll.
    fn sync_busy(&self) -> bool {
        self.balancer
            .as_ref()
            .and_then(|b| b.sync.as_ref().map(|s| s.has_work(&b.shard)))
            .unwrap_or(false)
    }

    /// Fleet sync's work between bursts: peers' entries stored, a scan for entries at risk
    /// advanced ([`WorkerSync::step`]); nothing to do costs a test and an atomic load.
    fn sync_step(&mut self) {
        let Some(b) = &mut self.balancer else { return };
        let Some(sync) = b.sync.as_mut().filter(|s| s.has_work(&b.shard)) else { return };
        let now = time_since(b.origin);
        sync.step(&mut b.shard, b.snapshots.load(), now, &self.counters.sync);
    }

    /// Reclaims the memory of entries that no packet can use any more.
    fn sweep(&mut self, buckets: usize) {
        let Some(b) = &mut self.balancer else { return };
        let c = self.counters;
        let snap = b.snapshots.load();
        c.snapshot_generation.set(snap.generation);
        let now = time_since(b.origin);
        if let Some(sync) = &mut b.sync {
            sync.check(snap, b.shard.bucket_count(), now, &c.sync);
        }
        b.shard.sweep(buckets, now, |e| {
            let dead = is_reclaimable(e.key.service, &e.value, e.idle_ms, snap, now);
            if dead {
                let slot = spillway_core::snapshot::BackendRef::from_u32(e.value.backend).slot;
                if let Some(t) = c.backends.get(usize::from(slot)) {
                    t.tracked.sub(1);
                }
            }
            dead
        });
        // What the next sweep reads, in cache by then (a table larger than the caches
        // otherwise costs a bucket's header and then each of its records, from DRAM).
        b.shard.sweep_lines(dpdk::prefetch);
    }

    /// Transmits everything buffered on every port.
    pub fn drain(&mut self) {
        let mut tally = TxTally::default();
        for q in &mut self.ports {
            tally.add(q.tx.flush());
        }
        publish_tx(self.counters, tally);
    }
}

fn publish_tx(c: &WorkerCounters, t: TxTally) {
    c.tx_packets.add(t.sent);
    c.reason(Reason::Path(PathDrop::TxFull)).add(t.dropped);
}

/// Milliseconds since the shared origin, as the decision core's [`Time`].
#[inline]
pub fn time_since(origin: Instant) -> Time {
    Time(u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX))
}

impl PacketBuf for Mbuf<'_> {
    #[inline]
    fn data(&self) -> &[u8] {
        Mbuf::data(self)
    }

    /// A shared buffer gives an empty slice: the path never writes one (it checks
    /// [`PacketBuf::is_writable`] first and drops the packet).
    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        Mbuf::data_mut(self).unwrap_or_default()
    }

    #[inline]
    fn prepend(&mut self, n: usize) -> bool {
        u16::try_from(n).is_ok_and(|n| Mbuf::prepend(self, n).is_ok())
    }

    #[inline]
    fn adj(&mut self, n: usize) -> bool {
        u16::try_from(n).is_ok_and(|n| Mbuf::adj(self, n).is_ok())
    }

    #[inline]
    fn truncate(&mut self, len: usize) -> bool {
        let have = self.data_len();
        len <= have && u16::try_from(have - len).is_ok_and(|n| self.trim(n).is_ok())
    }

    #[inline]
    fn reframe(&mut self, front: usize, len: usize, hdr: usize) -> Option<&mut [u8]> {
        let n = |v: usize| u16::try_from(v).ok();
        Mbuf::reframe(self, n(front)?, n(len)?, n(hdr)?).ok()
    }

    #[inline]
    fn extend_to(&mut self, len: usize) -> bool {
        let have = self.data_len();
        len <= have || u16::try_from(len - have).is_ok_and(|n| self.append(n).is_ok())
    }

    #[inline]
    fn reset(&mut self, len: usize) -> bool {
        u16::try_from(len).is_ok_and(|n| Mbuf::reset(self, n).is_ok())
    }

    #[inline]
    fn is_contiguous(&self) -> bool {
        self.segments() == 1
    }

    #[inline]
    fn is_writable(&self) -> bool {
        Mbuf::is_writable(self)
    }

    #[inline]
    fn prefetch_data(&self) {
        Mbuf::prefetch_data(self);
    }
}
