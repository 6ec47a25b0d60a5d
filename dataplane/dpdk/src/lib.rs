//! The safe DPDK layer: EAL, lcores, mempools, ports and queues, mbufs and bursts.
//!
//! This module owns every call into `dpdk-sys` and is, with `dpdk-sys` itself, the only code
//! in Spillway allowed to use `unsafe`; every unsafe block carries a `// SAFETY:` comment.
//! Its types tie DPDK objects to the lifetime of the [`Eal`] that created them, so nothing can
//! touch DPDK memory after `rte_eal_cleanup`.
//!
//! It must never contain packet-processing logic, allocate or log per packet, or expose raw
//! DPDK pointers outside this module.

mod cpu;
mod eal;
pub mod eal_args;
mod error;
mod lcore;
mod mbuf;
mod memif;
pub mod memory;
mod mempool;
mod port;

pub use cpu::{advise_huge_pages, prefetch, prefetch_write, tsc};
pub use eal::{Eal, LcoreId};
pub use error::DpdkError;
pub use lcore::LaunchScope;
pub use mbuf::{BurstIntoIter, Drain, Mbuf, MbufBurst, WriteError, MAX_BURST};
pub use memif::{GateSlot, PollGate};
pub use memory::{HugepagePolicy, Hugepages, MemoryArea, MemoryPlan};
pub use mempool::Mempool;
pub use port::{EthStats, LinkStatus, Port, PortId, PortSetup, RxQueue, TxQueue, TxResult};
