//! The per-lcore worker: one poll loop that owns its queues and its counters.
//!
//! A [`Worker`] owns one RX and one TX queue on every port and runs to completion on its EAL
//! lcore: receive a burst, [`Worker::process`] it, buffer the packets for TX, flush full TX
//! buffers at once and the others when the TSC drain deadline passes (DPDK l3fwd style).
//! Today `process` is io-forward: every packet goes back out of the port it came in on.
//! Later it will load the snapshot once per burst, parse, decide and rewrite.
//!
//! It must never allocate, lock, log, or do a shared atomic read-modify-write per packet. Its
//! counters are written only by itself, with relaxed loads and stores once per burst, and read
//! by the main thread.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::dpdk::{self, LcoreId, MbufBurst, RxQueue, TxQueue, TxResult};

/// One worker's packet counters, on their own cache line. Written only by the owning worker
/// (plain relaxed `store(load + n)`, never `fetch_add`), read by anyone.
#[repr(align(64))]
#[derive(Debug, Default)]
pub struct WorkerCounters {
    rx: AtomicU64,
    tx: AtomicU64,
    dropped: AtomicU64,
}

/// A reading of [`WorkerCounters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CounterValues {
    /// Packets received.
    pub rx: u64,
    /// Packets handed to the driver for transmission.
    pub tx: u64,
    /// Packets dropped (the driver refused them on TX).
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
}

impl WorkerCounters {
    /// Single-writer add: only the owning worker calls this, so load + store cannot lose
    /// updates, and readers never make the writer's cache line bounce with a locked RMW.
    #[inline]
    fn add(counter: &AtomicU64, n: u64) {
        if n != 0 {
            counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
        }
    }

    #[inline]
    fn add_tx(&self, t: TxTally) {
        Self::add(&self.tx, t.sent);
        Self::add(&self.dropped, t.dropped);
    }

    /// Reads the counters (each one atomically; the three together are not a snapshot).
    pub fn read(&self) -> CounterValues {
        CounterValues {
            rx: self.rx.load(Ordering::Relaxed),
            tx: self.tx.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
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

/// Settings fixed when the worker is built.
#[derive(Debug, Clone, Copy)]
pub struct WorkerParams {
    /// Packets per RX poll (1..=32).
    pub burst_size: u16,
    /// TSC ticks a buffered TX packet may wait before the buffers are flushed.
    pub drain_ticks: u64,
}

/// One poll-mode worker. Build it on the main thread, move it to its lcore, call
/// [`Worker::run`].
#[derive(Debug)]
pub struct Worker<'p, 'c> {
    index: usize,
    lcore: LcoreId,
    ports: Vec<PortQueues<'p>>,
    params: WorkerParams,
    counters: &'c WorkerCounters,
}

impl<'p, 'c> Worker<'p, 'c> {
    /// A worker numbered `index`, to run on `lcore`, owning `ports[i]` queues for port index
    /// `i`, publishing into `counters`.
    pub fn new(
        index: usize,
        lcore: LcoreId,
        ports: Vec<PortQueues<'p>>,
        params: WorkerParams,
        counters: &'c WorkerCounters,
    ) -> Self {
        Worker { index, lcore, ports, params, counters }
    }

    /// The worker's number.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The lcore it is meant to run on.
    pub fn lcore(&self) -> LcoreId {
        self.lcore
    }

    /// Polls until `stop` is set, then flushes its TX buffers.
    pub fn run(&mut self, stop: &AtomicBool) {
        let mut last_drain = dpdk::tsc();
        while !stop.load(Ordering::Relaxed) {
            for port in 0..self.ports.len() {
                let burst = self.ports[port].rx.rx_burst(self.params.burst_size);
                if !burst.is_empty() {
                    self.process(port, burst);
                }
            }
            let now = dpdk::tsc();
            if now.wrapping_sub(last_drain) >= self.params.drain_ticks {
                self.drain();
                last_drain = now;
            }
        }
        self.drain();
    }

    /// Handles one received burst from port index `port`: io-forward, back out of the same
    /// port, through the TX buffer.
    #[inline]
    pub fn process(&mut self, port: usize, burst: MbufBurst<'p>) {
        WorkerCounters::add(&self.counters.rx, burst.len() as u64);
        let tx = &mut self.ports[port].tx;
        let mut tally = TxTally::default();
        for m in burst {
            tally.add(tx.push(m));
        }
        self.counters.add_tx(tally);
    }

    /// Transmits everything buffered on every port.
    pub fn drain(&mut self) {
        let mut tally = TxTally::default();
        for q in &mut self.ports {
            tally.add(q.tx.flush());
        }
        self.counters.add_tx(tally);
    }
}
