//! Spillway data plane: the daemon that owns DPDK, its ports and the per-lcore workers.
//!
//! `dpdk` is the only module allowed to use `unsafe` (every block documented); everything
//! else builds on its safe API. `daemon` turns a configuration into a running set of workers
//! and tears it down; `worker` is the per-lcore poll loop.

#![deny(unsafe_code)]

pub mod daemon;
#[allow(unsafe_code)]
pub mod dpdk;
pub mod gen;
pub mod neighbour;
pub mod path;
pub mod vecbuf;
pub mod view;
pub mod worker;
