//! The exception path: frames between the data port and a kernel network interface.
//!
//! Once the NIC belongs to DPDK the host's kernel has no interface on the data network. With
//! `dataplane.kernel_interface` Spillway opens a second DPDK port whose other side is a kernel
//! interface (`net_tap`, or `net_virtio_user` over vhost-net), and gives it the node's
//! addresses and the data port's MAC: the kernel, a BGP daemon, SSH and the health checks then
//! use the data network like on any host.
//!
//! - **To the kernel.** The path marks what is for the kernel ([`Outcome::ToKernel`]:
//!   IP to the node's addresses that the node does not answer itself, ARP replies and
//!   neighbour advertisements); each worker pushes those frames into its own bounded queue
//!   ([`KernelQueue`]) and never waits: a full queue is a `kernel_busy` drop.
//! - **From the kernel.** What the kernel sends out of its interface is queued for worker 0,
//!   which transmits it on the data port between bursts, like the control thread's outbox
//!   (a full queue is counted and the frame dropped).
//! - **In between**, [`KernelPath::run`] on a thread of its own (not a worker lcore) moves the
//!   frames: it is the only one making system calls (a tap's `read`/`write`), so a slow or
//!   flooded kernel costs the workers nothing but the drops. When idle it sleeps
//!   [`IDLE_SLEEP`] between polls.
//!
//! [`Outcome::ToKernel`]: crate::path::Outcome::ToKernel

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam::queue::ArrayQueue;
use spillway_core::counters::KernelPathCounters;

use crate::dpdk::{Mbuf, MbufBurst, RxQueue, TxQueue, MAX_BURST};

/// A bounded queue of frames between a worker and the exception path's thread.
pub type KernelQueue<'p> = Arc<ArrayQueue<Mbuf<'p>>>;

/// A new, empty queue of `capacity` frames.
pub fn kernel_queue<'p>(capacity: usize) -> KernelQueue<'p> {
    Arc::new(ArrayQueue::new(capacity.max(1)))
}

/// How long the thread sleeps when a poll found nothing to move either way. It bounds the
/// latency the exception path adds (BGP keepalives, health-check replies), and keeps the
/// thread off the CPU it shares with the control thread when there is nothing to do.
pub const IDLE_SLEEP: Duration = Duration::from_micros(200);

/// What a worker needs to hand frames to the kernel and (worker 0) to send the kernel's.
#[derive(Debug)]
pub struct KernelLink<'p> {
    /// This worker's frames for the kernel.
    pub to_kernel: KernelQueue<'p>,
    /// The kernel's frames for the data port (worker 0 only).
    pub from_kernel: Option<KernelQueue<'p>>,
}

/// The exception path's thread: the kernel port's queues and the queues to and from the
/// workers.
#[derive(Debug)]
pub struct KernelPath<'p> {
    /// The kernel port's only RX queue: what the kernel sends.
    pub rx: RxQueue<'p>,
    /// The kernel port's only TX queue: what the kernel receives.
    pub tx: TxQueue<'p>,
    /// One queue per worker, frames for the kernel.
    pub to_kernel: Vec<KernelQueue<'p>>,
    /// Frames from the kernel, for worker 0 to send on the data port.
    pub from_kernel: KernelQueue<'p>,
    /// Its counters.
    pub counters: Arc<KernelPathCounters>,
}

impl KernelPath<'_> {
    /// Moves frames both ways until `stop` is set.
    pub fn run(&mut self, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            if self.poll() == 0 {
                std::thread::sleep(IDLE_SLEEP);
            }
        }
    }

    /// One pass both ways; returns how many frames moved.
    pub fn poll(&mut self) -> usize {
        let c = &*self.counters;
        let mut moved = 0;
        for q in &self.to_kernel {
            // At most one burst per worker queue per pass: the way back is served as often.
            let mut burst = MbufBurst::new();
            while !burst.is_full() {
                let Some(m) = q.pop() else { break };
                let _ = burst.push(m);
            }
            if burst.is_empty() {
                continue;
            }
            moved += burst.len();
            let r = self.tx.send(burst);
            c.to_kernel.add(u64::from(r.sent));
            c.to_kernel_dropped.add(u64::from(r.dropped));
        }
        let burst = self.rx.rx_burst(u16::try_from(MAX_BURST).unwrap_or(32));
        moved += burst.len();
        for m in burst {
            match self.from_kernel.push(m) {
                Ok(()) => c.from_kernel.inc(),
                // Dropping the mbuf frees it.
                Err(_) => c.from_kernel_dropped.inc(),
            }
        }
        moved
    }
}
