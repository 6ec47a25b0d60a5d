//! The whole pipeline, in one process, on this machine's two cores: a generator lcore writes
//! frames (`spillway_gen`) into a `net_ring` port, a balancer worker
//! (`spillway_dataplane::worker`, the daemon's own loop) receives them from that ring,
//! decides, encapsulates and transmits on `net_null`. Every scenario is measured in the same
//! run as the io-forward baseline on the same ports (the same worker loop without the
//! balancer), so each result is also a ratio to what the machine and the generator can move.
//!
//! ```text
//! cargo bench -p spillway-gen --bench pipeline -- [--seconds S] [--quick] [--json FILE]
//!     [--hugepages required|preferred|off] [--only SCENARIO|flood|scaling] [--pairs N]
//!     [--slices N [--slice-ms MS]] [--burst N] [--by-load]
//! ```
//!
//! `--only` runs one scenario between the two io-forward baselines (for profiling and A/B runs),
//! or the flood experiments, or the replay-source scaling run alone; `--only floor` runs the
//! baselines, the floor loops, the established 1M-flow scenario and `syn_100`. `--pairs N` with
//! `--only SCENARIO` alternates the baseline and that scenario N times and reports each
//! scenario run's share of the two baselines around it, and their median. `--by-load` prints,
//! for a scenario that makes new connections, their rate every 100 ms of the measured window
//! against how full the connection table was (`by load:` lines): where a filling table slows
//! the inserts. `--slices N` with `--only SCENARIO` (established flows only) sets the scenario
//! up once and has the worker's lcore alternate an io-forwarding worker and the balancing one
//! on the same queues and the same frames, half a second each: N shares, each between two
//! baselines measured within a second of it (the steadiest ratio this host gives). `--burst N`
//! sets the balancing worker's burst size (1..=64; default 64, the configuration's default);
//! the generator sends bursts of 32 whatever it is.
//!
//! DPDK's memory is on hugepages when enough are free and mounted (`--hugepages preferred`, the
//! default), else on ordinary memory; the first line and the `memory` row say which.
//!
//! Scenarios (docs/performance.md explains the method and the results):
//! - `io_forward`: the baseline;
//! - established flows, IPIP, 1K and 1M distinct flows (random order, so a 1M-flow table is far
//!   larger than the caches); the same for GUE and for IPv6 (IP6IP6) with 1K flows;
//! - `syn_100`: every packet a SYN from a fresh random source (eligible set, hash, insert);
//! - only with `--only quic`: `udp_10pct_new` and `quic_10pct_moving`, UDP to port 443 of a
//!   service without QUIC-LB and of one with it (four-pass IDs), 1,024 established flows and
//!   one packet in ten from a new 4-tuple: a new flow, or a QUIC connection that moved (a
//!   miss, the decode, an insert; QL-3); the difference is the decode's;
//! - only with `--only`: `established_ipip_1m_80` (1.68M flows, the table 80% full) and
//!   `syn_100_room` (a 64M-entry, 4.3 GiB table: room for every SYN of the run) and
//!   `syn_100_full` (an 8M-entry table, full for most of the run: a flood with no guard, whose
//!   inserts evict);
//! - `mix`: 1M flows, 5% new connections, 20% UDP, 20% IPv6;
//! - `floor_touch`, `floor_table_1m`: not Spillway but the least any encapsulating balancer
//!   does per packet, a loop of a few lines in place of the worker (`floor_loop`): receive,
//!   read the frame, write a 34-byte outer header, transmit; the second also reads and writes
//!   one random line of a table as large as the 1M-flow scenario's (one cache miss per
//!   packet). What the machine and the generator leave for a balancer's own work;
//!   `floor_two_lines_1m` reads a line of an 8 MiB array first, whose content names that
//!   line (the 1M-flow connection table's bucket header, then its record: two dependent
//!   misses per packet); `floor_table_1g` one line of a table as large as `syn_100`'s (1 GiB),
//!   `floor_two_lines_1g` its header (in 64 MiB) and record;
//! - `syn_flood_guarded`: 1K established flows carry on while 95% of the packets are a SYN flood
//!   from random sources, with the flood guard at 200k new entries/s: how many flood packets
//!   were forwarded untracked, and whether the established flows kept their entries;
//! - `flood_room`, `flood_full`: 10,000 established flows, then a SYN flood (95% SYNs from random
//!   sources) at the highest rate the machine sends, with the flood guard at 200k new
//!   entries/s: the worker's rate before and during the flood, the established flows' hit share
//!   alone before and after it (exact: every packet of those phases is theirs), evictions (a
//!   single one would be an established entry lost), and what the guard bypassed; in a table
//!   with room for the whole flood, and in a 65,536-entry table filled to the brim first;
//! - latency: 100k packets/s, output to a second ring read by the main thread, cycles from the
//!   generator's timestamp to arrival, io-forward vs balancer (the difference is what the
//!   balancer adds);
//! - scaling: one then two workers, each fed by a replay source on its own core (it writes
//!   pre-built templates into fresh mbufs itself, no generator lcore: this machine has two
//!   cores), 1M flows each.
//!
//! Every run first prints its host (`host:`: the processor, the TSC rate, and a cache line's
//! round trip between the two vCPUs, which bounds what the generator-to-worker pipeline moves);
//! the whole run and `--only floor` then print the machine's memory latency: TSC cycles per
//! load when each waits for the one before, over arrays of 1 MiB to 1 GiB.
//!
//! `--sync` gives the balancer fleet sync (FS) and, in the measured window, stands in for the
//! sync thread: it asks for a refresh scan as soon as the one before has finished (the worker
//! scans all the time, the worst case; a fleet asks every `refresh_sec`, and at each snapshot
//! change) and takes what the scans hand over. With one snapshot nothing is at risk, so
//! this is the scans' cost: two buckets per poll, each entry judged (`decide::at_risk`).
//!
//! Results are printed as a table and, with `--json`, written as one JSON object per line.

#[path = "../fixture.rs"]
mod fixture;
mod flood;
mod floor;
mod latency;
mod measure;
mod probe;
#[path = "../../shared/tests/common/quic_issue.rs"]
mod quic_issue;
mod report;
mod rig;
mod scaling;
mod scenarios;
mod slices;

use std::time::Duration;

use spillway_dataplane::dpdk;

use crate::report::{print_pairs, write_json};
use crate::rig::{Ports, Rig, RuntimeDir};

/// The command line (see the module doc).
#[derive(Debug)]
struct Options {
    /// `--seconds`: each measured window.
    measure: Duration,
    /// `--quick`: 100k flows instead of 1M in the large-table scenarios.
    quick: bool,
    json: Option<String>,
    policy: dpdk::HugepagePolicy,
    by_load: bool,
    burst: u16,
    only: Option<String>,
    pairs: usize,
    slices: usize,
    /// `--slice-ms`.
    slice: Duration,
    /// `--sync`: the balancer carries fleet sync, its scans asked for continuously.
    sync: bool,
}

impl Options {
    fn parse() -> Options {
        let args: Vec<String> = std::env::args().collect();
        let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1));
        let seconds: f64 = flag("--seconds").and_then(|s| s.parse().ok()).unwrap_or(2.0);
        let policy = flag("--hugepages").map_or(dpdk::HugepagePolicy::Preferred, |p| {
            dpdk::HugepagePolicy::from_name(p).expect("--hugepages: required, preferred or off")
        });
        let burst: u16 = flag("--burst").map_or(dpdk::MAX_BURST as u16, |b| {
            b.parse()
                .ok()
                .filter(|b| (1..=dpdk::MAX_BURST as u16).contains(b))
                .unwrap_or_else(|| panic!("--burst: 1..={}", dpdk::MAX_BURST))
        });
        let count = |name: &str, what: &str| flag(name).map_or(0, |n| n.parse().expect(what));
        Options {
            measure: Duration::from_secs_f64(seconds),
            quick: args.iter().any(|a| a == "--quick"),
            json: flag("--json").cloned(),
            policy,
            by_load: args.iter().any(|a| a == "--by-load"),
            burst,
            only: flag("--only").cloned(),
            pairs: count("--pairs", "--pairs N: a count"),
            slices: count("--slices", "--slices N: a count"),
            slice: Duration::from_millis(
                flag("--slice-ms").map_or(500, |m| m.parse().expect("--slice-ms: milliseconds")),
            ),
            sync: args.iter().any(|a| a == "--sync"),
        }
    }

    /// Flows of the large-table scenarios.
    fn big(&self) -> u32 {
        if self.quick {
            100_000
        } else {
            1_000_000
        }
    }
}

fn main() {
    let opts = Options::parse();
    let prefix = format!("spw-pipeline-{}", std::process::id());
    // EAL's runtime directory for this prefix goes when the run ends (after EAL: declared first,
    // dropped last), however it ends: each run has its own, and /var/run is memory.
    let _runtime = RuntimeDir(format!("/var/run/dpdk/{prefix}"));
    let (eal, hugepages) = rig::init_eal(&prefix, opts.policy);
    let pool = rig::mempool(&eal);
    let ports = Ports::open(&eal, &pool);
    let mut rig = Rig::new(&eal, &pool, &ports, opts.burst);
    if opts.sync {
        rig.sync = Some(spillway_core::sync::SyncLink::new(rig::SYNC_QUEUE));
    }
    // Every run says which host it ran on: the VM moves between hosts whose pipelines differ
    // threefold, and the cross-core round trip printed here tells them apart.
    probe::print_host(&eal, rig.worker_lcore, rig.tsc_hz);
    run(&mut rig, &opts, hugepages);
    drop(rig);
    drop(ports);
}

/// Everything after the setup: the scenarios `--only` selects (or all), then, as the options
/// ask, the flood experiments, latency, scaling and memory; the rows go to `--json`.
fn run(rig: &mut Rig<'_>, opts: &Options, hugepages: bool) {
    let only = opts.only.as_deref();
    let json = opts.json.as_deref();
    let mut scenarios = scenarios::list(opts.big());
    scenarios::select(&mut scenarios, only);
    // The whole run and the floor's: how much cache the machine has, and its memory latency.
    if matches!(only, None | Some("floor")) {
        probe::print_memory_latency();
    }
    if opts.pairs > 0 {
        scenarios = scenarios::pairs(&scenarios, only, opts.pairs);
    }
    if opts.slices > 0 {
        let rows = slices::run(rig, &scenarios, only, opts.slices, opts.slice);
        write_json(json, &rows);
        return;
    }
    let mut rows = measure::run_all(rig, &scenarios, opts.measure, opts.by_load);
    if opts.pairs > 0 {
        print_pairs(&rows);
    }
    if only.is_none_or(|o| o == "flood") {
        rows.extend(flood::run_all(rig, opts.measure));
    }
    if only.is_some_and(|o| o != "scaling") {
        write_json(json, &rows);
        return;
    }
    if only.is_none() {
        rows.push(latency::run(rig, opts.measure));
    }
    rows.push(scaling::run(rig, opts.big(), opts.burst, opts.measure));
    rows.push(probe::memory_row(hugepages));
    write_json(json, &rows);
}
