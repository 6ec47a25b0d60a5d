//! Spillway's data plane: DPDK, the per-lcore workers and what they do to packets. It knows
//! nothing of the control plane's runtime: it reads snapshots and answers conntrack queries
//! through the core crate's [`spillway_core::publish`] and [`spillway_core::mailbox`].
//!
//! - [`dpdk`]: the `spillway-dpdk` crate, the safe layer over EAL, lcores, mempools, ports,
//!   queues, mbufs and bursts (the only Spillway code with `unsafe`, outside this crate);
//! - [`worker`]: the per-lcore poll loop; [`path`]: what happens to each frame of a burst;
//!   [`node`]: the balancer's own addresses; [`neighbour`]: next-hop MACs and their resolver;
//!   [`outbox`]: the control thread's frames out through worker 0; [`kernel`]: the exception
//!   path between the data port and a kernel interface;
//! - [`setup`]: lcores and ports before the workers start; [`stats`]: the counter lines;
//! - [`vecbuf`]: a `Vec`-backed packet buffer, so the path runs without DPDK in tests,
//!   benchmarks and the fuzzer.

#![forbid(unsafe_code)]

pub use spillway_dpdk as dpdk;
pub mod capture;
pub mod kernel;
pub mod neighbour;
pub mod node;
pub mod outbox;
pub mod path;
pub mod setup;
pub mod stats;
pub mod sync;
pub mod unresolved;
pub mod vecbuf;
pub mod worker;
