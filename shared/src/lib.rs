//! Spillway's decision core: everything that decides where a packet goes, as plain Rust with
//! no DPDK types, so that the data-plane workers, the `simulate` what-if tool and the tests
//! run the same code.
//!
//! Reading order:
//! - [`addr`], [`flow`]: what a packet is; SA selection tuples, CT tracking keys, CH-4 hashing;
//! - [`model`], [`policy`]: the validated configuration the control plane compiles YAML into;
//! - [`eligible`] (FO), [`zonal`] (ZA), [`maglev`] (CH), [`advanced`] (AL): the policy math,
//!   pure functions;
//! - [`state`] -> [`snapshot`]: the control plane's memory and the immutable tables it
//!   publishes (rules, services, per-client-zone Maglev tables, backend slots);
//! - [`conntrack`]: the per-worker connection table (a mechanism; validity is judged in
//!   [`decide`]);
//! - [`decide`]: the one decision function; [`simulator`]: the same on a virtual clock;
//! - [`publish`] (snapshots to the workers) and [`mailbox`] (conntrack queries to the workers):
//!   how the control plane and the data plane meet, with no async runtime in either;
//! - [`quic_lb`]: the server ID in a QUIC connection ID (QUIC-LB), for QUIC's conntrack misses;
//! - [`rng`]: the project's one seeded pseudo-random stream (generator, jitter, test data).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod addr;
pub mod advanced;
pub mod capture;
pub mod conntrack;
pub mod counters;
pub mod decide;
pub mod eligible;
pub mod explain;
pub mod filter;
pub mod flow;
pub mod lpm;
pub mod maglev;
pub mod mailbox;
pub mod model;
pub mod policy;
pub mod publish;
pub mod quic_lb;
pub mod rng;
pub mod simulator;
pub mod snapshot;
pub mod state;
pub mod sync;
pub mod time;
pub mod wire;
pub mod zonal;
