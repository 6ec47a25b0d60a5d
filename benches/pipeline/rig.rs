//! The test rig: EAL on two lcores, the mempool, the `net_ring` and `net_null` ports and their
//! queues, and the balancer a worker is given (its services, neighbours and connection table).

use spillway_core::sync::SyncLink;
use spillway_dataplane::sync::WorkerSync;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use spillway_core::conntrack::Shard;
use spillway_core::mailbox::Mailbox;
use spillway_core::publish::Publisher;
use spillway_dataplane::dpdk::{self, Eal, LcoreId, Mempool, Port, PortSetup, RxQueue, TxQueue};
use spillway_dataplane::neighbour::{NeighbourTable, NextHopCache};
use spillway_dataplane::worker::{Balancer, PortQueues, Worker, WorkerParams};

use crate::fixture;
use crate::scenarios::{backend, snapshot, BACKENDS};

/// Starts EAL for `prefix` with the three ports' vdevs, on hugepages as `policy` allows, and
/// prints which memory it runs on; returns EAL and whether that is hugepages.
pub fn init_eal(prefix: &str, policy: dpdk::HugepagePolicy) -> (Eal, bool) {
    let eal_args: Vec<String> = [
        "--no-pci",
        "--lcores",
        "0@0,1@1,2@0",
        "--file-prefix",
        prefix,
        "--vdev",
        "net_ring0",
        "--vdev",
        "net_ring1",
        "--vdev",
        "net_null0",
        "--log-level",
        "lib.eal:error",
        "--no-telemetry",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    // The pool's 8191 mbufs (below) and 5 queues of 1024 + 1024 descriptors.
    let need = dpdk::memory::need(8191, 5 * 2048);
    let plan = dpdk::memory::plan(&eal_args, need, policy, &dpdk::Hugepages::of_host())
        .unwrap_or_else(|e| panic!("--hugepages {}: {e}", policy.name()));
    println!("memory: {plan}");
    let eal = Eal::init(&plan.args).expect("EAL init (run as root)");
    (eal, plan.hugepages)
}

/// The mbuf pool every port and the generator share.
pub fn mempool(eal: &Eal) -> Mempool<'_> {
    // 8191 mbufs: enough for the 1024-slot rings, the per-lcore caches and the bursts in flight.
    // Without hugepages (`--no-huge`: DPDK's memory is a memfd in 4 KiB pages, out of reach of
    // transparent huge pages) a larger pool spreads the mbufs over more pages than the TLB
    // covers; 65535 mbufs measured less than half the io-forward rate of 8191.
    Mempool::create(eal, "pipeline", 8191, 256).expect("mempool")
}

/// The three ports: `ring0` carries the generator's frames to the worker, `ring1` the worker's
/// output back to the main thread (latency), `null0` takes the worker's output otherwise.
#[derive(Debug)]
pub struct Ports<'e> {
    ring0: Port<'e>,
    ring1: Port<'e>,
    null0: Port<'e>,
}

impl<'e> Ports<'e> {
    pub fn open(eal: &'e Eal, pool: &Mempool<'e>) -> Ports<'e> {
        let setup = |q: u16| PortSetup {
            rx_queues: q,
            tx_queues: q,
            extra_tx_queues: 0,
            rx_desc: 1024,
            tx_desc: 1024,
        };
        Ports {
            ring0: Port::open(eal, "net_ring0", setup(1), pool).expect("net_ring0"),
            ring1: Port::open(eal, "net_ring1", setup(1), pool).expect("net_ring1"),
            null0: Port::open(eal, "net_null0", setup(2), pool).expect("net_null0"),
        }
    }
}

/// Everything a run needs: EAL, the pool, the ports' queues (each in a `Vec`, lent to a
/// worker and given back after its run), the two lcores, the worker's parameters, and what
/// each balancer is made from.
pub struct Rig<'p> {
    pub eal: &'p Eal,
    pub pool: &'p Mempool<'p>,
    pub ring0_rx: Vec<RxQueue<'p>>,
    pub ring0_tx: Vec<TxQueue<'p>>,
    pub ring1_rx: Vec<RxQueue<'p>>,
    pub ring1_tx: Vec<TxQueue<'p>>,
    pub null_rx: Vec<RxQueue<'p>>,
    pub null_tx: Vec<TxQueue<'p>>,
    pub worker_lcore: LcoreId,
    pub gen_lcore: LcoreId,
    pub tsc_hz: u64,
    pub params: WorkerParams,
    publisher: Publisher,
    neighbour_cell: Arc<ArcSwap<NeighbourTable>>,
    /// `--sync`: the link every balancer's fleet sync uses.
    pub sync: Option<SyncLink>,
}

/// The sync queue's room, each way, with `--sync`.
pub const SYNC_QUEUE: usize = 4096;

impl<'p> Rig<'p> {
    /// Takes the ports' queues; the worker polls `burst` frames at a time.
    pub fn new(eal: &'p Eal, pool: &'p Mempool<'p>, ports: &'p Ports<'p>, burst: u16) -> Self {
        let (ring0_rx, ring0_tx) = ports.ring0.take_queues().expect("queues");
        let (ring1_rx, ring1_tx) = ports.ring1.take_queues().expect("queues");
        let (null_rx, null_tx) = ports.null0.take_queues().expect("queues");
        let tsc_hz = eal.tsc_hz();
        let lcores = eal.worker_lcores();
        let (worker_lcore, gen_lcore) = (lcores[0], lcores[1]);
        let params = WorkerParams {
            burst_size: burst,
            drain_ticks: (tsc_hz / 1_000_000).max(1) * 100,
            tsc_hz,
            idle_sleep_us: 0,
        };
        let snap = snapshot();
        let publisher = Publisher::new(snap);
        let neighbours = NeighbourTable::from_pairs((1..=BACKENDS).flat_map(|i| {
            [(backend(false, i), [2, 0, 0, 0, 1, i]), (backend(true, i), [2, 0, 0, 0, 6, i])]
        }));
        let neighbour_cell = Arc::new(ArcSwap::from_pointee(neighbours));
        Rig {
            eal,
            pool,
            ring0_rx,
            ring0_tx,
            ring1_rx,
            ring1_tx,
            null_rx,
            null_tx,
            worker_lcore,
            gen_lcore,
            tsc_hz,
            params,
            publisher,
            neighbour_cell,
            sync: None,
        }
    }

    /// A balancer with a connection table for `capacity` entries and flood guard `guard`.
    pub fn balancer(&self, capacity: usize, guard: Option<u32>) -> Balancer<'p> {
        Balancer {
            mailbox: Mailbox::default(),
            outbox: None,
            snapshots: self.publisher.reader(),
            neighbours: arc_swap::Cache::new(Arc::clone(&self.neighbour_cell)),
            next_hops: NextHopCache::new(),
            events: Arc::new(crossbeam::queue::ArrayQueue::new(64)),
            shard: {
                let mut s = Shard::with_capacity_advised(capacity, |p, n| {
                    dpdk::advise_huge_pages(p, n);
                });
                s.set_flood_guard(guard);
                s
            },
            node: fixture::node(true),
            origin: Instant::now(),
            kernel: None,
            sync: self.sync.as_ref().map(|l| WorkerSync::new(l.clone())),
            waiting: spillway_dataplane::unresolved::WaitQueue::new(),
            tap: Default::default(),
        }
    }

    /// The queues a worker of the pipeline polls and transmits on: `net_ring0`'s RX (the
    /// generator's frames), `net_null0`'s first TX.
    pub fn lend_queues(&mut self) -> Vec<PortQueues<'p>> {
        vec![PortQueues { rx: self.ring0_rx.remove(0), tx: self.null_tx.remove(0) }]
    }

    /// Takes back the queues of [`lend_queues`](Self::lend_queues) from `worker` and empties the
    /// ring of what the generator sent after the worker stopped.
    pub fn return_queues(&mut self, worker: Worker<'p, '_>) {
        let mut q = worker.into_queues();
        let PortQueues { rx, tx } = q.remove(0);
        self.ring0_rx.insert(0, rx);
        self.null_tx.insert(0, tx);
        drain(&mut self.ring0_rx[0]);
    }
}

/// A directory removed on drop.
pub struct RuntimeDir(pub String);

impl Drop for RuntimeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Receives and frees whatever is waiting on `rx`.
pub fn drain(rx: &mut RxQueue<'_>) {
    while !rx.rx_burst(32).is_empty() {}
}
