//! Spillway's decision core: everything that decides where a packet goes, as plain Rust with
//! no DPDK types, so that the data-plane workers, the `simulate` what-if tool and the tests
//! run the same code.
//!
//! Reading order: [`addr`] and [`flow`] (what a packet is, SA/CT tuples and hashing),
//! [`maglev`] (consistent hashing, CH), [`conntrack`] (the per-worker table, CT).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod addr;
pub mod conntrack;
pub mod flow;
pub mod maglev;
pub mod policy;
pub mod time;
