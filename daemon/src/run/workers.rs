//! Stage 4: what the workers share with the control plane ([`WorkerShared`]), and the workers
//! themselves ([`build`]), each with its queues, counters and, in load-balance mode, its own
//! connection table, snapshot reader, neighbour table reader and conntrack mailbox.

use std::sync::Arc;

use spillway_control::sync::{self, KeyRing};
use spillway_control::table_file;
use spillway_core::capture::TapSlot;
use spillway_core::conntrack::Shard;
use spillway_core::counters::KernelPathCounters;
use spillway_core::mailbox::Mailbox;
use spillway_core::sync::SyncLink;
use spillway_dataplane::capture::WorkerTap;
use spillway_dataplane::dpdk;
use spillway_dataplane::kernel::{kernel_queue, KernelLink, KernelPath, KernelQueue};
use spillway_dataplane::neighbour::NextHopCache;
use spillway_dataplane::outbox::{outbox, Outbox};
use spillway_dataplane::setup as dp_setup;
use spillway_dataplane::sync::WorkerSync;
use spillway_dataplane::unresolved::WaitQueue;
use spillway_dataplane::worker::{time_since, Balancer, Worker, WorkerCounters, WorkerParams};

use super::plane::Plane;
use super::resources::Resources;
use super::{setting, DaemonError, Setup};
use crate::control_loop;

/// Fleet sync's keys and this life's epoch, for its thread.
pub(super) type SyncKeys = Option<(KeyRing, u64)>;

/// What the workers share with the control plane and one another, one of each per worker
/// unless said otherwise.
pub(super) struct WorkerShared<'p> {
    // Fields go in this order: the queues that hold frames before the counters.
    /// The frames for the kernel interface.
    pub(super) to_kernel: Vec<KernelQueue<'p>>,
    /// The kernel interface's frames for the data port (one, worker 0's).
    pub(super) from_kernel: KernelQueue<'p>,
    /// The control thread's frames (ARP, neighbour solicitations), sent by worker 0.
    pub(super) outbox: Outbox<'p>,
    /// Counters, by worker index.
    pub(super) counters: Arc<[WorkerCounters]>,
    /// Conntrack queries from the control thread.
    pub(super) mailboxes: Vec<Mailbox>,
    /// Where `spillwayctl capture` offers each worker its tap.
    pub(super) tap_slots: Vec<Arc<TapSlot>>,
    /// Fleet sync's queues (none without fleet sync).
    pub(super) sync_links: Vec<SyncLink>,
    /// The exception path's counters.
    pub(super) kernel_counters: Arc<KernelPathCounters>,
}

impl<'p> WorkerShared<'p> {
    /// The shared parts, and fleet sync's keys and epoch: a start that cannot read its keys or
    /// keep its epoch stops here (FS).
    pub(super) fn new(
        setup: &Setup<'_>,
        res: &Resources<'_>,
    ) -> Result<(WorkerShared<'p>, SyncKeys), DaemonError> {
        let n = res.lcores.len();
        let keys = match &setup.sync {
            Some(s) => {
                let keys = KeyRing::read_file(&s.key_file)
                    .map_err(|e| setting("fleet.sync.key_file", e))?;
                let epoch = match test_epoch() {
                    Some(e) => e,
                    None => sync::next_epoch(&s.epoch_file, sync::epoch::clock_ms())
                        .map_err(|e| setting("fleet.sync.epoch_file", e))?,
                };
                Some((keys, epoch))
            }
            None => None,
        };
        let queue_size =
            setup.config.dataplane.kernel_interface.as_ref().map_or(0, |k| k.queue_size as usize);
        let shared = WorkerShared {
            to_kernel: (0..n).map(|_| kernel_queue(queue_size)).collect(),
            from_kernel: kernel_queue(queue_size),
            outbox: outbox(),
            counters: (0..n).map(|_| WorkerCounters::new()).collect(),
            mailboxes: (0..n).map(|_| Mailbox::default()).collect(),
            tap_slots: (0..n).map(|_| Arc::default()).collect(),
            sync_links: match &setup.sync {
                Some(s) => (0..n).map(|_| SyncLink::new(s.queue_size)).collect(),
                None => Vec::new(),
            },
            kernel_counters: Arc::new(KernelPathCounters::default()),
        };
        Ok((shared, keys))
    }

    /// The exception path: the kernel interface's queues and the workers' queues to and from
    /// it, moved by a thread of its own.
    pub(super) fn kernel_path(&self, res: &'p Resources<'_>) -> Option<KernelPath<'p>> {
        let port = res.kernel_port.as_ref()?;
        let (mut rx, mut tx) = port.take_queues().expect("the kernel port's queues, taken once");
        Some(KernelPath {
            rx: rx.remove(0),
            tx: tx.remove(0),
            to_kernel: self.to_kernel.clone(),
            from_kernel: Arc::clone(&self.from_kernel),
            counters: Arc::clone(&self.kernel_counters),
        })
    }
}

/// The workers, each with its queues on every port; in load-balance mode with its connection
/// table (the table file's entries when there is one, read once, before any worker runs).
pub(super) fn build<'p, 'c>(
    setup: &Setup<'_>,
    res: &'p Resources<'_>,
    plane: &Plane,
    shared: &'c WorkerShared<'p>,
) -> Result<Vec<Worker<'p, 'c>>, DaemonError> {
    let dp = &setup.config.dataplane;
    let tsc_hz = res.eal.tsc_hz();
    let params = WorkerParams {
        burst_size: dp.burst_size,
        drain_ticks: (tsc_hz / 1_000_000).max(1) * u64::from(dp.tx_drain_us),
        tsc_hz,
        idle_sleep_us: dp.idle_sleep_us,
    };
    let mut shards = tables(setup, res, plane).into_iter();
    let queues = dp_setup::queues_by_worker(&res.ports, res.lcores.len());
    let workers = queues
        .into_iter()
        .enumerate()
        .map(|(i, q)| {
            let balancer = match (&plane.controller, &plane.node) {
                (Some(c), Some(node)) => Some(Balancer {
                    snapshots: control_loop::lock(c).reader(),
                    mailbox: shared.mailboxes[i].clone(),
                    // Worker 0 transmits the control thread's frames.
                    outbox: (i == 0).then(|| Arc::clone(&shared.outbox)),
                    neighbours: plane.resolver.reader(),
                    next_hops: NextHopCache::new(),
                    events: plane.resolver.events(),
                    shard: shards.next().expect("one table per worker"),
                    node: *node,
                    origin: plane.origin,
                    kernel: res.kernel_port.as_ref().map(|_| KernelLink {
                        to_kernel: Arc::clone(&shared.to_kernel[i]),
                        from_kernel: (i == 0).then(|| Arc::clone(&shared.from_kernel)),
                    }),
                    sync: shared.sync_links.get(i).map(|l| WorkerSync::new(l.clone())),
                    waiting: WaitQueue::new(),
                    tap: WorkerTap::new(Arc::clone(&shared.tap_slots[i])),
                }),
                _ => None,
            };
            let mut w = Worker::new(i, res.lcores[i], q, params, &shared.counters[i], balancer);
            if let Some(gate) = &res.memif_gate {
                w.set_poll_gate(gate.slot(i));
            }
            w
        })
        .collect();
    Ok(workers)
}

/// The workers' connection tables (load-balance mode), sized and guarded as configured, with
/// fleet sync's limit on peers' copies and the table file's entries.
fn tables(setup: &Setup<'_>, res: &Resources<'_>, plane: &Plane) -> Vec<Shard> {
    let Some(c) = &plane.controller else { return Vec::new() };
    let mut shards: Vec<Shard> = res.lcores.iter().map(|_| conntrack_shard(setup)).collect();
    if let Some(s) = &setup.sync {
        for shard in &mut shards {
            let limit = shard.capacity() as u64 * u64::from(s.copy_permille) / 1000;
            shard.set_copy_limit(usize::try_from(limit).unwrap_or(usize::MAX));
        }
    }
    if let Some(path) = setup.config.table_file() {
        let snap = control_loop::lock(c).snapshot();
        table_file::restore(path, &mut shards, &snap, time_since(plane.origin));
    }
    shards
}

/// A worker's connection table, sized and guarded as configured, on huge pages when the
/// kernel allows them (module doc of `spillway_core::conntrack`).
fn conntrack_shard(setup: &Setup<'_>) -> Shard {
    let dp = &setup.config.dataplane;
    let mut s = Shard::with_capacity_advised(dp.conntrack_capacity as usize, |p, n| {
        dpdk::advise_huge_pages(p, n);
    });
    s.set_flood_guard(Some(dp.conntrack_max_inserts_per_sec).filter(|&r| r > 0));
    s
}

/// `SPILLWAY_TEST_SYNC_EPOCH`: the tests' way to start an instance with a given sync epoch
/// (lower than its peers have seen, as after a clock stepped back with the epoch file lost)
/// without touching the host's clock. Never for production: it bypasses the epoch file, so a
/// nonce could repeat (the random salt still keeps them apart); said loudly when used.
fn test_epoch() -> Option<u64> {
    let e = std::env::var("SPILLWAY_TEST_SYNC_EPOCH").ok()?.parse().ok()?;
    tracing::warn!(
        "SPILLWAY_TEST_SYNC_EPOCH set: fleet sync runs with epoch {e}, not the epoch file's (a \
         test-only setting)"
    );
    Some(e)
}
