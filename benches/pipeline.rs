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
//! Results are printed as a table and, with `--json`, written as one JSON object per line.

mod fixture;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use fixture::{a, model, service, NODE_MAC};
use spillway_core::addr::Addr;
use spillway_core::conntrack::{rounded_capacity, Shard, BYTES_PER_ENTRY};
use spillway_core::counters::Reason;
use spillway_core::decide::ForwardReason;
use spillway_core::mailbox::Mailbox;
use spillway_core::model::{Encap, RuleProtocol};
use spillway_core::publish::Publisher;
use spillway_core::snapshot::Snapshot;
use spillway_dataplane::dpdk::{
    self, Eal, LcoreId, MbufBurst, Mempool, Port, PortSetup, RxQueue, TxQueue,
};
use spillway_dataplane::neighbour::{NeighbourTable, NextHopCache};
use spillway_dataplane::worker::{
    Balancer, CounterValues, PortQueues, Worker, WorkerCounters, WorkerParams,
};
use spillway_gen::{self as gen, FrameFactory, Limit, Order, TrafficSpec};

const VIP_IPIP: &str = "198.18.0.100";
const VIP_GUE: &str = "198.18.0.101";
const VIP6: &str = "fd00::100";
const BACKENDS: u8 = 16;

/// Three services over 16 backends each: IPIP and GUE on IPv4 VIPs, IP6IP6 on an IPv6 VIP.
fn snapshot() -> Snapshot {
    let services: [(&str, Encap, &str, bool); 3] = [
        ("ipip", Encap::Ipip, VIP_IPIP, false),
        ("gue", Encap::Gue { port: 6080 }, VIP_GUE, false),
        ("v6", Encap::Ipip, VIP6, true),
    ];
    fixture::snapshot(model(
        "",
        services.map(|(name, encap, vip, v6)| {
            let backends = (1..=BACKENDS).map(|i| backend(v6, i));
            service(name, encap, RuleProtocol::L3Default, &[vip], "g", backends)
        }),
    ))
}

fn backend(v6: bool, i: u8) -> Addr {
    if v6 {
        a(&format!("fd00::1:{i}"))
    } else {
        Addr::v4(198, 18, 1, i)
    }
}

/// What one scenario asks for.
#[derive(Debug, Clone)]
struct Scenario {
    name: &'static str,
    balance: bool,
    /// Instead of the worker, the floor loop ([`floor_loop`]) over this table.
    floor: Option<Floor>,
    spec: TrafficSpec,
    /// Conntrack capacity of the worker.
    capacity: usize,
    /// Flood guard rate (new entries per second per worker).
    guard: Option<u32>,
    /// Packets sent before the measured window (flows get their entries).
    warm: Duration,
}

fn spec(flows: u32) -> TrafficSpec {
    TrafficSpec {
        flows,
        dst_v4: VIP_IPIP.parse().expect("vip"),
        dst_v6: VIP6.parse().expect("vip"),
        dst_mac: NODE_MAC,
        src_mac: [0x02, 0, 0, 0, 0, 0x0c],
        order: Order::Random,
        seed: 7,
        ..TrafficSpec::default()
    }
}

/// One measured result.
#[derive(Debug, Clone, Default)]
struct Row {
    name: String,
    workers: usize,
    mpps: f64,
    baseline_mpps: f64,
    /// Share of the generator's bursts the ring refused (the worker was the bottleneck when
    /// this is well above zero; near zero, the generator was).
    refused_share: f64,
    hits: u64,
    new: u64,
    bypassed: u64,
    evictions: u64,
    entries: u64,
    extra: String,
}

impl Row {
    /// A one-worker scenario's rate, its baseline, and how much of the generator's output the
    /// ring refused.
    fn one_worker(name: &str, mpps: f64, baseline_mpps: f64, report: &gen::SendReport) -> Row {
        Row {
            name: name.to_owned(),
            workers: 1,
            mpps,
            baseline_mpps,
            refused_share: report.refused as f64 / (report.sent + report.refused).max(1) as f64,
            ..Row::default()
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1));
    let seconds: f64 = flag("--seconds").and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let quick = args.iter().any(|a| a == "--quick");
    let json = flag("--json").cloned();
    let policy = flag("--hugepages").map_or(dpdk::HugepagePolicy::Preferred, |p| {
        dpdk::HugepagePolicy::from_name(p).expect("--hugepages: required, preferred or off")
    });
    let by_load = args.iter().any(|a| a == "--by-load");
    let burst: u16 = flag("--burst").map_or(dpdk::MAX_BURST as u16, |b| {
        b.parse()
            .ok()
            .filter(|b| (1..=dpdk::MAX_BURST as u16).contains(b))
            .unwrap_or_else(|| panic!("--burst: 1..={}", dpdk::MAX_BURST))
    });
    let big: u32 = if quick { 100_000 } else { 1_000_000 };
    let measure = Duration::from_secs_f64(seconds);

    let prefix = format!("spw-pipeline-{}", std::process::id());
    // EAL's runtime directory for this prefix goes when the run ends (after EAL: declared first,
    // dropped last), however it ends: each run has its own, and /var/run is memory.
    let _runtime = RuntimeDir(format!("/var/run/dpdk/{prefix}"));
    let eal_args: Vec<String> = [
        "--no-pci",
        "--lcores",
        "0@0,1@1,2@0",
        "--file-prefix",
        &prefix,
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
    // 8191 mbufs: enough for the 1024-slot rings, the per-lcore caches and the bursts in flight.
    // Without hugepages (`--no-huge`: DPDK's memory is a memfd in 4 KiB pages, out of reach of
    // transparent huge pages) a larger pool spreads the mbufs over more pages than the TLB
    // covers; 65535 mbufs measured less than half the io-forward rate of 8191.
    let pool = Mempool::create(&eal, "pipeline", 8191, 256).expect("mempool");
    let setup = |q: u16| PortSetup {
        rx_queues: q,
        tx_queues: q,
        extra_tx_queues: 0,
        rx_desc: 1024,
        tx_desc: 1024,
    };
    let ring0 = Port::open(&eal, "net_ring0", setup(1), &pool).expect("net_ring0");
    let ring1 = Port::open(&eal, "net_ring1", setup(1), &pool).expect("net_ring1");
    let null0 = Port::open(&eal, "net_null0", setup(2), &pool).expect("net_null0");
    let (mut ring0_rx, mut ring0_tx) = ring0.take_queues().expect("queues");
    let (mut ring1_rx, mut ring1_tx) = ring1.take_queues().expect("queues");
    let (_null_rx, mut null_tx) = null0.take_queues().expect("queues");
    let tsc_hz = eal.tsc_hz();
    let lcores = eal.worker_lcores();
    let (worker_lcore, gen_lcore) = (lcores[0], lcores[1]);
    // Every run says which host it ran on: the VM moves between hosts whose pipelines differ
    // threefold (docs/performance.md, "The machine").
    print_host(&eal, worker_lcore, tsc_hz);
    let params =
        WorkerParams { burst_size: burst, drain_ticks: (tsc_hz / 1_000_000).max(1) * 100, tsc_hz };
    let snap = snapshot();
    let publisher = Publisher::new(snap);
    let neighbours = NeighbourTable::from_pairs((1..=BACKENDS).flat_map(|i| {
        [(backend(false, i), [2, 0, 0, 0, 1, i]), (backend(true, i), [2, 0, 0, 0, 6, i])]
    }));
    let neighbour_cell = Arc::new(ArcSwap::from_pointee(neighbours));
    let balancer = |capacity: usize, guard: Option<u32>| Balancer {
        mailbox: Mailbox::default(),
        outbox: None,
        snapshots: publisher.reader(),
        neighbours: arc_swap::Cache::new(Arc::clone(&neighbour_cell)),
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
    };

    let mut rows: Vec<Row> = Vec::new();
    let mut scenarios = vec![Scenario {
        name: "io_forward",
        balance: false,
        floor: None,
        spec: spec(1024),
        capacity: 0,
        guard: None,
        warm: Duration::from_millis(300),
    }];
    let lb = |name, spec: TrafficSpec, capacity: usize, warm_ms| Scenario {
        name,
        balance: true,
        floor: None,
        spec,
        capacity,
        guard: None,
        warm: Duration::from_millis(warm_ms),
    };
    scenarios.push(lb("established_ipip_1k", spec(1024), 4096, 300));
    scenarios.push(lb("established_ipip_1m", spec(big), big as usize * 2, 3000));
    // Run only when named by `--only` (OPT_IN): 1.68M flows in the same 2M-entry table, 80%
    // full, where 8% of the entries are in their secondary bucket (1% at half load).
    scenarios.push(lb("established_ipip_1m_80", spec(1_677_721), big as usize * 2, 4000));
    scenarios.push(lb(
        "established_gue_1k",
        TrafficSpec { dst_v4: VIP_GUE.parse().expect("vip"), ..spec(1024) },
        4096,
        300,
    ));
    scenarios.push(lb(
        "established_ipv6_1k",
        TrafficSpec { ipv6_share: 1.0, ..spec(1024) },
        4096,
        300,
    ));
    // A 16M-entry table (1 GiB), the largest this benchmark allocates: at 5-8 Mpps a run of
    // 2.3 s fills 70-99% of it, so the figure includes inserts into a filling table (the row's
    // `entries` says how full; docs/performance.md, ninth pass). A full table under a flood
    // is the guarded scenario below.
    scenarios.push(lb("syn_100", TrafficSpec { syn_share: 1.0, ..spec(1024) }, 1 << 24, 300));
    // Run only when named by `--only` (OPT_IN): the same with a 64M-entry table (4.3 GiB), room
    // for every SYN of the run (it ends about a third full): new connections alone, without
    // the inserts into a nearly full table that `syn_100` ends with.
    scenarios.push(lb("syn_100_room", TrafficSpec { syn_share: 1.0, ..spec(1024) }, 1 << 26, 300));
    // And with an 8M-entry table (512 MiB), full after about a second: a SYN flood with no
    // flood guard, where most crowded inserts evict.
    scenarios.push(lb("syn_100_full", TrafficSpec { syn_share: 1.0, ..spec(1024) }, 1 << 23, 300));
    scenarios.push(lb(
        "mix",
        TrafficSpec { syn_share: 0.05, udp_share: 0.2, ipv6_share: 0.2, ..spec(big) },
        big as usize * 2,
        3000,
    ));
    // The floor (`floor_loop`): what any encapsulating balancer must do per packet, without
    // Spillway's code: touch each frame and write its outer header; then the same with one
    // cache line of a table the size of the 1M-flow scenario's read and written per packet.
    let floor = |name, lines: usize, heads: usize| Scenario {
        name,
        balance: false,
        floor: Some(Floor { lines, heads }),
        spec: spec(big),
        capacity: 0,
        guard: None,
        warm: Duration::from_millis(300),
    };
    let lines_1m = (big as usize * 2).next_power_of_two();
    scenarios.push(floor("floor_touch", 0, 0));
    scenarios.push(floor("floor_table_1m", lines_1m, 0));
    // The 1M-flow connection table's two lines per packet: a line of an array as large as its
    // bucket headers (8 MiB, 32 bytes per 8 entries), whose content names a line of one as
    // large as its records (128 MiB), prefetched 16 packets later as the worker's probe does in
    // bursts of up to 32.
    scenarios.push(floor("floor_two_lines_1m", lines_1m, lines_1m / 16));
    // One line per packet of a table as large as `syn_100`'s (16M lines, 1 GiB): the least a
    // new connection costs in memory when the table has room for every SYN of the run.
    scenarios.push(floor("floor_table_1g", 1 << 24, 0));
    // The same two lines in `syn_100`'s table: a header in 64 MiB, a record in 1 GiB.
    scenarios.push(floor("floor_two_lines_1g", 1 << 24, 1 << 20));
    scenarios.push(Scenario {
        guard: Some(200_000),
        ..lb("syn_flood_guarded", TrafficSpec { syn_share: 0.95, ..spec(1024) }, 1 << 16, 300)
    });
    // The baseline again, last: on this shared VM the generator's core changes speed under a
    // run (2-4x, the host's doing), so a ratio means something only when the two baselines
    // agree (`baseline drift` below).
    scenarios.push(Scenario { name: "io_forward_end", ..scenarios[0].clone() });

    // --only NAME: that scenario between the baselines, nothing else (for profiling); `--only
    // scaling`: the replay-source scaling run alone (one worker on its own core, no
    // cross-core traffic: the steadiest measure of the worker on this machine).
    let only = flag("--only").map(String::as_str);
    const OPT_IN: [&str; 3] = ["established_ipip_1m_80", "syn_100_room", "syn_100_full"];
    scenarios.retain(|s| !OPT_IN.contains(&s.name) || only == Some(s.name));
    if let Some(only) = only {
        scenarios.retain(|s| {
            only != "scaling"
                && (s.name == "io_forward"
                    || s.name == "io_forward_end"
                    || s.name == only
                    || (only == "floor"
                        && (s.floor.is_some()
                            || s.name == "established_ipip_1m"
                            || s.name == "syn_100")))
        });
    }
    // The whole run and the floor's: how much cache the machine has, and its memory latency.
    if matches!(only, None | Some("floor")) {
        print_memory_latency();
    }
    // --pairs N (with --only SCENARIO): the baseline and the scenario alternate N times, each
    // scenario between two baselines of its own, and the shares are summarised over the pairs
    // (`pairs:` below): on a host whose speed changes from one second to the next, the median
    // of N neighbouring pairs says more than one share against the run's first baseline.
    let pairs: usize = flag("--pairs").map_or(0, |n| n.parse().expect("--pairs N: a count"));
    if pairs > 0 {
        let Some(name) = only.filter(|o| !["floor", "flood", "scaling"].contains(o)) else {
            panic!("--pairs needs --only with one scenario's name");
        };
        let pick = |n: &str| scenarios.iter().find(|s| s.name == n).cloned();
        let (Some(base), Some(sc)) = (pick("io_forward"), pick(name)) else {
            panic!("--only {name}: no such scenario");
        };
        scenarios = vec![base.clone()];
        for _ in 0..pairs {
            scenarios.push(sc.clone());
            scenarios.push(base.clone());
        }
        scenarios.push(Scenario { name: "io_forward_end", ..base });
    }
    // --slices N (with --only SCENARIO): one setup, and the worker's lcore alternates an
    // io-forwarding worker and the balancing one on the same queues and the same traffic,
    // `--slice-ms` each (default 500), N balancing slices between N + 1 baseline ones.
    let slices: usize = flag("--slices").map_or(0, |n| n.parse().expect("--slices N: a count"));
    if slices > 0 {
        let Some(sc) = only.and_then(|o| scenarios.iter().find(|s| s.name == o && s.balance))
        else {
            panic!("--slices needs --only with the name of a balancing scenario");
        };
        // New connections fill the table as the run goes on (`syn_100`'s 16M-entry table is
        // 70-99% full after 2.3 s): the slices would not measure the same thing.
        assert!(
            sc.spec.syn_share == 0.0,
            "--slices: {} makes new entries all along, its slices would differ; use --pairs",
            sc.name
        );
        let slice = Duration::from_millis(
            flag("--slice-ms").map_or(500, |m| m.parse().expect("--slice-ms: milliseconds")),
        );
        let queues = PortQueues { rx: ring0_rx.remove(0), tx: null_tx.remove(0) };
        let rates = interleaved(
            &eal,
            (worker_lcore, gen_lcore),
            queues,
            (&mut ring0_tx[0], &pool),
            balancer(sc.capacity, sc.guard),
            (&sc.spec, params),
            (sc.warm, slice, slices),
        );
        let rows: Vec<Row> = rates
            .iter()
            .enumerate()
            .map(|(i, &mpps)| Row {
                name: if i % 2 == 0 { "io_forward" } else { sc.name }.to_owned(),
                workers: 1,
                mpps,
                ..Row::default()
            })
            .collect();
        print_pairs(&rows);
        write_json(json.as_deref(), &rows);
        return;
    }
    let mut baseline = 0.0;
    for sc in &scenarios {
        if let Some(Floor { lines, heads }) = sc.floor {
            let mut factory = FrameFactory::new(&sc.spec).expect("traffic spec");
            let mut table = vec![Line([0; 8]); lines];
            dpdk::advise_huge_pages(table.as_ptr().cast(), size_of_val(&*table));
            table.fill(Line([1; 8]));
            let mut head_table = vec![Line([0; 8]); heads];
            dpdk::advise_huge_pages(head_table.as_ptr().cast(), size_of_val(&*head_table));
            // Words that look random, so that each packet's line follows from its header's.
            let mut x = 0x9e37_79b9_7f4a_7c15_u64;
            for w in head_table.iter_mut().flat_map(|l| l.0.iter_mut()) {
                x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
                *w = (x ^ (x >> 31)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            }
            let (mpps, report) = floor_run(
                &eal,
                (worker_lcore, gen_lcore),
                (&mut ring0_rx[0], &mut null_tx[0]),
                (&mut ring0_tx[0], &pool),
                &mut factory,
                (&mut table, &head_table),
                (sc.warm, measure),
                tsc_hz,
            );
            let row = Row::one_worker(sc.name, mpps, baseline, &report);
            print_row(&row);
            rows.push(row);
            drain(&mut ring0_rx[0]);
            continue;
        }
        let counters = WorkerCounters::new();
        let b = sc.balance.then(|| balancer(sc.capacity, sc.guard));
        let queues = vec![PortQueues { rx: ring0_rx.remove(0), tx: null_tx.remove(0) }];
        let mut worker = Worker::new(0, worker_lcore, queues, params, &counters, b);
        let mut factory = FrameFactory::new(&sc.spec).expect("traffic spec");
        let stop = AtomicBool::new(false);
        let mut warm_factory = None;
        if sc.name == "syn_flood_guarded" {
            // The established flows first, alone, so that they have their entries.
            warm_factory = Some(FrameFactory::new(&spec(1024)).expect("spec"));
        }
        let report = std::sync::Mutex::new(None);
        let report_ref = &report;
        let (window, ct_hits_before) = eal
            .scope(|scope| {
                let stop = &stop;
                let worker = &mut worker;
                scope
                    .launch(worker_lcore, move || {
                        worker.run(stop);
                        print_phases("worker");
                    })
                    .expect("launch worker");
                if let Some(f) = warm_factory.as_mut() {
                    let limit = Limit { count: Some(20_000), ..Limit::default() };
                    let _ = gen::send(
                        &mut ring0_tx[0],
                        &pool,
                        f,
                        limit,
                        &AtomicBool::new(false),
                        tsc_hz,
                    );
                    std::thread::sleep(Duration::from_millis(50));
                }
                let tx = &mut ring0_tx[0];
                let pool = &pool;
                let factory = &mut factory;
                scope
                    .launch(gen_lcore, move || {
                        let r = gen::send(tx, pool, factory, Limit::default(), stop, tsc_hz);
                        *report_ref.lock().expect("report") = Some(r);
                    })
                    .expect("launch generator");
                std::thread::sleep(sc.warm);
                let before = CounterValues::read(&counters);
                let hits_before =
                    counters.reason(Reason::Forward(ForwardReason::ConntrackHit)).get();
                let t0 = Instant::now();
                if by_load && sc.spec.syn_share > 0.0 {
                    print_rate_by_load(&counters, sc.capacity, measure);
                } else {
                    std::thread::sleep(measure);
                }
                let after = CounterValues::read(&counters);
                let elapsed = t0.elapsed().as_secs_f64();
                stop.store(true, Ordering::Relaxed);
                // The scope waits for both lcores.
                ((after.since(&before), elapsed), hits_before)
            })
            .expect("the benchmark runs on the main lcore");
        let report = report.into_inner().expect("report").expect("generator reported");
        let (delta, elapsed) = window;
        let mpps = delta.rx as f64 / elapsed / 1e6;
        if sc.name == "io_forward" {
            baseline = mpps;
        }
        let hits = counters.reason(Reason::Forward(ForwardReason::ConntrackHit)).get();
        let new = counters.reason(Reason::Forward(ForwardReason::NewConnection)).get();
        let row = Row {
            hits,
            new,
            bypassed: counters.ct_bypassed.get(),
            evictions: counters.ct_evictions.get(),
            entries: counters.ct_entries.get(),
            extra: if sc.name == "syn_flood_guarded" {
                // 5% of the packets belong to the established flows: did they all still hit?
                let expected = delta.rx as f64 * (1.0 - sc.spec.syn_share);
                let kept = (hits - ct_hits_before) as f64 / expected.max(1.0);
                format!("\"established_hit_share\":{kept:.4}")
            } else {
                String::new()
            },
            ..Row::one_worker(sc.name, mpps, baseline, &report)
        };
        print_row(&row);
        if sc.name == "io_forward_end" && baseline > 0.0 {
            println!(
                "baseline drift: io_forward {baseline:.2} Mpps first, {mpps:.2} last ({:.2}x); \
                 the ratios are to the first, and mean little when the two differ by more than \
                 10%",
                mpps / baseline
            );
        }
        rows.push(row);
        let mut q = worker.into_queues();
        let PortQueues { rx, tx } = q.remove(0);
        ring0_rx.insert(0, rx);
        null_tx.insert(0, tx);
        drain(&mut ring0_rx[0]);
    }

    if pairs > 0 {
        print_pairs(&rows);
    }

    // SYN floods against 10,000 established flows, with the flood guard on: a table with
    // room for the whole flood, then a small table filled to the brim before the flood.
    if only.is_none_or(|o| o == "flood") {
        for (name, capacity, prefill) in
            [("flood_room", 1usize << 22, false), ("flood_full", 1 << 16, true)]
        {
            let counters = WorkerCounters::new();
            let queues = vec![PortQueues { rx: ring0_rx.remove(0), tx: null_tx.remove(0) }];
            let b = Some(balancer(capacity, Some(FLOOD_GUARD)));
            let mut worker = Worker::new(0, worker_lcore, queues, params, &counters, b);
            let stop = AtomicBool::new(false);
            let f = eal
                .scope(|scope| {
                    let worker = &mut worker;
                    let stop_ref = &stop;
                    scope
                        .launch(worker_lcore, move || worker.run(stop_ref))
                        .expect("launch worker");
                    let run =
                        flood_run(&mut ring0_tx[0], &pool, &counters, tsc_hz, prefill, measure);
                    stop.store(true, Ordering::Relaxed);
                    run
                })
                .expect("the benchmark runs on the main lcore");
            let row = f.row(name, capacity);
            print_flood(&row, &f);
            rows.push(row);
            let mut q = worker.into_queues();
            let PortQueues { rx, tx } = q.remove(0);
            ring0_rx.insert(0, rx);
            null_tx.insert(0, tx);
            drain(&mut ring0_rx[0]);
        }
    }

    if only.is_some_and(|o| o != "scaling") {
        write_json(json.as_deref(), &rows);
        return;
    }
    if only.is_none() {
        // Latency at a low rate: generator -> ring0 -> worker -> ring1 -> main thread.
        let mut latency = Vec::new();
        for balance in [false, true] {
            let counters = WorkerCounters::new();
            let b = balance.then(|| balancer(4096, None));
            let queues = vec![PortQueues { rx: ring0_rx.remove(0), tx: ring1_tx.remove(0) }];
            let low = WorkerParams { drain_ticks: 1, ..params };
            let mut worker = Worker::new(0, worker_lcore, queues, low, &counters, b);
            let mut factory = FrameFactory::new(&TrafficSpec { stamp: true, ..spec(1024) })
                .expect("traffic spec");
            let stop = AtomicBool::new(false);
            let samples = std::sync::Mutex::new(Vec::new());
            let out = &samples;
            eal.scope(|scope| {
                let stop = &stop;
                let worker = &mut worker;
                scope.launch(worker_lcore, move || worker.run(stop)).expect("launch worker");
                // The generator lcore both sends (paced, one frame at a time) and receives, so that
                // the main thread, which shares its core, sleeps.
                let (tx, rx, pool, factory) =
                    (&mut ring0_tx[0], &mut ring1_rx[0], &pool, &mut factory);
                scope
                    .launch(gen_lcore, move || {
                        let mut v: Vec<u64> = Vec::with_capacity(1 << 20);
                        let gap = tsc_hz / 100_000;
                        let end = dpdk::tsc() + (measure.as_secs_f64() * tsc_hz as f64) as u64;
                        let mut next = dpdk::tsc();
                        let max = factory.max_frame_len();
                        while dpdk::tsc() < end {
                            let now = dpdk::tsc();
                            if now >= next {
                                next += gap;
                                let mut burst = MbufBurst::new();
                                if pool.alloc_bulk(&mut burst, 1) {
                                    for m in burst.iter_mut() {
                                        let data = m.reset(max as u16).expect("room");
                                        let len = factory.next_frame(data, dpdk::tsc());
                                        m.trim((max - len) as u16).expect("trim");
                                    }
                                    tx.send(burst);
                                }
                            }
                            let burst = rx.rx_burst(32);
                            let now = dpdk::tsc();
                            for m in &burst {
                                let d = m.data();
                                if d.len() >= 8 {
                                    let stamp =
                                        u64::from_le_bytes(d[d.len() - 8..].try_into().expect("8"));
                                    v.push(now.wrapping_sub(stamp));
                                }
                            }
                        }
                        *out.lock().expect("samples") = v;
                    })
                    .expect("launch generator");
                std::thread::sleep(measure + Duration::from_millis(100));
                stop.store(true, Ordering::Relaxed);
            })
            .expect("the benchmark runs on the main lcore");
            let samples = samples.into_inner().expect("samples");
            let mut q = worker.into_queues();
            let PortQueues { rx, tx } = q.remove(0);
            ring0_rx.insert(0, rx);
            ring1_tx.insert(0, tx);
            drain(&mut ring1_rx[0]);
            drain(&mut ring0_rx[0]);
            latency.push(percentiles(samples));
        }
        let (io, lb) = (&latency[0], &latency[1]);
        println!(
            "latency cycles (p50/p99) at 100 kpps: io_forward {}/{}, balancer {}/{}, added p50 {} \
             cycles = {:.0} ns",
            io.0,
            io.1,
            lb.0,
            lb.1,
            lb.0 as i64 - io.0 as i64,
            (lb.0 as f64 - io.0 as f64) / tsc_hz as f64 * 1e9
        );
        rows.push(Row {
            name: "latency".into(),
            workers: 1,
            extra: format!(
                "\"io_p50_cycles\":{},\"io_p99_cycles\":{},\"lb_p50_cycles\":{},\"lb_p99_cycles\":{},\
                 \"added_p50_ns\":{:.1},\"tsc_hz\":{tsc_hz}",
                io.0,
                io.1,
                lb.0,
                lb.1,
                (lb.0 as f64 - io.0 as f64) / tsc_hz as f64 * 1e9
            ),
            ..Row::default()
        });
    }

    // Scaling: replay sources on the workers' own cores, one worker then two.
    let mut null_rx = _null_rx;
    let mut scale = Vec::new();
    for workers in [1usize, 2] {
        let counters: Vec<WorkerCounters> = (0..workers).map(|_| WorkerCounters::new()).collect();
        let lc = [worker_lcore, gen_lcore];
        let mut ws: Vec<Worker<'_, '_>> = counters
            .iter()
            .enumerate()
            .map(|(w, c)| {
                let q = vec![PortQueues { rx: null_rx.remove(0), tx: null_tx.remove(0) }];
                Worker::new(w, lc[w], q, params, c, Some(balancer(big as usize * 2, None)))
            })
            .collect();
        let stop = AtomicBool::new(false);
        let rates = eal
            .scope(|scope| {
                let stop = &stop;
                for (w, worker) in ws.iter_mut().enumerate() {
                    let pool = &pool;
                    let spec = TrafficSpec { seed: 7 + w as u64, ..spec(big) };
                    scope
                        .launch(lc[w], move || replay(worker, pool, &spec, burst, stop))
                        .expect("launch replay worker");
                }
                std::thread::sleep(Duration::from_secs(3));
                let before: Vec<_> = counters.iter().map(CounterValues::read).collect();
                let t0 = Instant::now();
                std::thread::sleep(measure);
                let after: Vec<_> = counters.iter().map(CounterValues::read).collect();
                let elapsed = t0.elapsed().as_secs_f64();
                stop.store(true, Ordering::Relaxed);
                after
                    .iter()
                    .zip(&before)
                    .map(|(a, b)| a.since(b).rx as f64 / elapsed / 1e6)
                    .collect::<Vec<f64>>()
            })
            .expect("the benchmark runs on the main lcore");
        for w in ws {
            for PortQueues { rx, tx } in w.into_queues() {
                null_rx.push(rx);
                null_tx.push(tx);
            }
        }
        let total: f64 = rates.iter().sum();
        println!(
            "scaling {workers} worker(s), replay source, {big} flows each: {total:.2} Mpps ({})",
            rates.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(" + ")
        );
        scale.push(total);
    }
    rows.push(Row {
        name: "scaling_replay".into(),
        workers: 2,
        mpps: scale[1],
        baseline_mpps: scale[0],
        extra: format!("\"one_worker_mpps\":{:.3},\"ratio\":{:.3}", scale[0], scale[1] / scale[0]),
        ..Row::default()
    });

    // Memory.
    let hwm = status_kib("VmHWM");
    let cap_10m = (10_000_000f64 * 1.25) as usize;
    let entries_10m = rounded_capacity(cap_10m);
    println!(
        "memory: peak RSS {} MiB; {BYTES_PER_ENTRY} bytes per tracked connection; 10M \
         connections at 80% load: {} entries = {} MiB per worker",
        hwm / 1024,
        entries_10m,
        (entries_10m * BYTES_PER_ENTRY) >> 20
    );
    rows.push(Row {
        name: "memory".into(),
        workers: 1,
        extra: format!(
            "\"peak_rss_kib\":{hwm},\"bytes_per_connection\":{BYTES_PER_ENTRY},\
             \"ten_million_entries\":{},\"ten_million_mib\":{},\"hugepages\":{}",
            entries_10m,
            (entries_10m * BYTES_PER_ENTRY) >> 20,
            plan.hugepages
        ),
        ..Row::default()
    });

    write_json(json.as_deref(), &rows);
    drop((ring0_rx, ring0_tx, ring1_rx, ring1_tx, null_tx, null_rx));
    drop((ring0, ring1, null0));
}

/// A worker fed by its own replay source: each burst is `burst` fresh mbufs written from the
/// generator's templates on this core, then handed to [`Worker::process`] as a received burst
/// would be (decided, encapsulated, sent to `net_null`).
fn replay<'p>(
    worker: &mut Worker<'p, '_>,
    pool: &Mempool<'p>,
    spec: &TrafficSpec,
    burst_size: u16,
    stop: &AtomicBool,
) {
    let mut factory = FrameFactory::new(spec).expect("traffic spec");
    let max = factory.max_frame_len();
    while !stop.load(Ordering::Relaxed) {
        let mut burst = MbufBurst::new();
        if !pool.alloc_bulk(&mut burst, usize::from(burst_size)) {
            continue;
        }
        let now = dpdk::tsc();
        for m in burst.iter_mut() {
            let data = m.reset(max as u16).expect("room for a frame");
            let len = factory.next_frame(data, now);
            m.trim((max - len) as u16).expect("trim");
        }
        worker.process(0, &mut burst);
    }
    print_phases(&format!("replay worker {}", worker.index()));
    worker.drain();
}

/// `--slices`: the worker's lcore runs `balancer` alone for `warm` (its flows' first packets make
/// their entries), then alternates an io-forwarding worker and the balancing one on the same
/// queues, `slice` each, starting and ending with io-forwarding, while the generator sends
/// `spec`'s traffic throughout. Returns the rate of each measured slice in Mpps (baseline,
/// balancer, baseline, ...; `count` balancer slices), each measured after a tenth of a slice
/// for the queues to settle. Slices of a fraction of a second put each balancer figure between
/// two baselines measured within a second of it, with the same frames.
fn interleaved<'p>(
    eal: &Eal,
    (worker_lcore, gen_lcore): (LcoreId, LcoreId),
    queues: PortQueues<'p>,
    (tx, pool): (&mut TxQueue<'p>, &Mempool<'p>),
    balancer: Balancer<'p>,
    (spec, params): (&TrafficSpec, WorkerParams),
    (warm, slice, count): (Duration, Duration, usize),
) -> Vec<f64> {
    let (io_counters, lb_counters) = (WorkerCounters::new(), WorkerCounters::new());
    let mut lb = Worker::new(0, worker_lcore, vec![queues], params, &lb_counters, Some(balancer));
    let mut io = Worker::new(0, worker_lcore, Vec::new(), params, &io_counters, None);
    let mut factory = FrameFactory::new(spec).expect("traffic spec");
    let tsc_hz = params.tsc_hz;
    // `stop` ends the current slice; the lcore then moves the queues to the other worker,
    // counts the slice in `turn`, and waits for `stop` to clear (or ends on `done`).
    let (stop, done, turn, gen_stop) =
        (AtomicBool::new(false), AtomicBool::new(false), AtomicU64::new(0), AtomicBool::new(false));
    let phases = std::sync::Mutex::new(Vec::new());
    let rates = eal
        .scope(|scope| {
            let (stop, done, turn) = (&stop, &done, &turn);
            let (lb, io) = (&mut lb, &mut io);
            let phases = &phases;
            scope
                .launch(worker_lcore, move || {
                    let mut k = 0u64;
                    loop {
                        let (from, to) =
                            if k % 2 == 0 { (&mut *lb, &mut *io) } else { (&mut *io, &mut *lb) };
                        from.run(stop);
                        from.move_queues_to(to);
                        // The balancer's cycles per slice (the warm-up's, mostly new entries,
                        // are left out).
                        let ph = spillway_dataplane::path::phase_clock::take();
                        if k > 0 && k % 2 == 0 {
                            phases.lock().expect("phases").push(ph);
                        }
                        k += 1;
                        turn.store(k, Ordering::Release);
                        if done.load(Ordering::Acquire) {
                            break;
                        }
                        while stop.load(Ordering::Acquire) {
                            std::hint::spin_loop();
                        }
                    }
                })
                .expect("launch worker");
            let factory = &mut factory;
            let gen_stop = &gen_stop;
            scope
                .launch(gen_lcore, move || {
                    let _ = gen::send(tx, pool, factory, Limit::default(), gen_stop, tsc_hz);
                })
                .expect("launch generator");
            let mut switches = 0u64;
            let mut switch = |last: bool| {
                switches += 1;
                done.store(last, Ordering::Release);
                stop.store(true, Ordering::Release);
                while turn.load(Ordering::Acquire) < switches {
                    std::thread::sleep(Duration::from_micros(50));
                }
                stop.store(false, Ordering::Release);
            };
            std::thread::sleep(warm);
            switch(false);
            let new = || lb_counters.reason(Reason::Forward(ForwardReason::NewConnection)).get();
            let new_before = new();
            let mut rates = Vec::with_capacity(2 * count + 1);
            for j in 0..=2 * count {
                let counters = if j % 2 == 0 { &io_counters } else { &lb_counters };
                std::thread::sleep(slice / 10);
                let before = CounterValues::read(counters);
                let t0 = Instant::now();
                std::thread::sleep(slice);
                let delta = CounterValues::read(counters).since(&before);
                rates.push(delta.rx as f64 / t0.elapsed().as_secs_f64() / 1e6);
                switch(j == 2 * count);
            }
            gen_stop.store(true, Ordering::Relaxed);
            // Established flows only: after the warm-up no packet should have made an entry.
            println!(
                "slices: {count} of {} ms; entries made after the warm-up: {}",
                slice.as_millis(),
                new() - new_before
            );
            rates
        })
        .expect("the benchmark runs on the main lcore");
    // With `--features phase-clock`: each balancer slice's burst path, beside its rate.
    let phases = phases.into_inner().expect("phases");
    let mut all = spillway_dataplane::path::phase_clock::Phases::default();
    for (i, p) in phases.iter().enumerate().filter(|(_, p)| p.packets > 0) {
        let mpps = rates.get(2 * i + 1).copied().unwrap_or(0.0);
        println!("slice {}: {mpps:.2} Mpps, {p}", 2 * i + 1);
        all = spillway_dataplane::path::phase_clock::Phases {
            first: all.first + p.first,
            tail: all.tail + p.tail,
            last: all.last + p.last,
            packets: all.packets + p.packets,
        };
    }
    if all.packets > 0 {
        println!("worker (balancer slices): {all}");
    }
    rates
}

/// With `--features phase-clock`: where this thread's burst path spent its time since the last
/// call, printed as `label: cycles per packet ...` (nothing without the feature).
fn print_phases(label: &str) {
    let phases = spillway_dataplane::path::phase_clock::take();
    if phases.packets > 0 {
        println!("{label}: {phases}");
    }
}

/// The flood guard of the flood experiments: new entries a worker admits per second.
const FLOOD_GUARD: u32 = 200_000;

/// Established flows in the flood experiments.
const ESTABLISHED: u32 = 10_000;

/// The worker's counters at one moment, for the flood phases.
#[derive(Debug, Clone, Copy, Default)]
struct Snap {
    rx: u64,
    hits: u64,
    new: u64,
    bypassed: u64,
    evictions: u64,
    entries: u64,
}

impl Snap {
    fn read(c: &WorkerCounters) -> Snap {
        Snap {
            rx: CounterValues::read(c).rx,
            hits: c.reason(Reason::Forward(ForwardReason::ConntrackHit)).get(),
            new: c.reason(Reason::Forward(ForwardReason::NewConnection)).get(),
            bypassed: c.ct_bypassed.get(),
            evictions: c.ct_evictions.get(),
            entries: c.ct_entries.get(),
        }
    }

    fn since(&self, e: &Snap) -> Snap {
        Snap {
            rx: self.rx - e.rx,
            hits: self.hits - e.hits,
            new: self.new - e.new,
            bypassed: self.bypassed - e.bypassed,
            evictions: self.evictions - e.evictions,
            entries: self.entries,
        }
    }
}

/// One phase: what the worker did while the sender ran, and for how long it sent.
#[derive(Debug, Clone, Copy, Default)]
struct Phase {
    d: Snap,
    secs: f64,
}

impl Phase {
    fn mpps(&self) -> f64 {
        self.d.rx as f64 / self.secs.max(1e-9) / 1e6
    }

    /// Conntrack hits per packet received: exact for a phase of established flows only.
    fn hit_share(&self) -> f64 {
        self.d.hits as f64 / self.d.rx.max(1) as f64
    }
}

/// The phases of one flood experiment.
#[derive(Debug, Clone, Copy, Default)]
struct Flood {
    before: Phase,
    fill: Option<Phase>,
    flood: Phase,
    after: Phase,
}

impl Flood {
    fn row(&self, name: &str, capacity: usize) -> Row {
        Row {
            name: name.to_owned(),
            workers: 1,
            mpps: self.flood.mpps(),
            baseline_mpps: self.before.mpps(),
            hits: self.flood.d.hits,
            new: self.flood.d.new,
            bypassed: self.flood.d.bypassed,
            evictions: self.flood.d.evictions + self.after.d.evictions,
            entries: self.flood.d.entries,
            extra: format!(
                "\"capacity\":{capacity},\"established_flows\":{ESTABLISHED},\
                 \"guard_per_sec\":{FLOOD_GUARD},\"before_mpps\":{:.4},\"flood_mpps\":{:.4},\
                 \"flood_over_before\":{:.4},\"before_hit_share\":{:.6},\
                 \"after_hit_share\":{:.6},\"entries_before_flood\":{}",
                self.before.mpps(),
                self.flood.mpps(),
                self.flood.mpps() / self.before.mpps().max(1e-9),
                self.before.hit_share(),
                self.after.hit_share(),
                self.fill.map_or(self.before.d.entries, |f| f.d.entries),
            ),
            ..Row::default()
        }
    }
}

/// Sends `factory`'s traffic flat out (or `count` frames) from this lcore, waits for the
/// worker to drain the ring, and returns what the worker did meanwhile.
fn phase<'a>(
    tx: &mut TxQueue<'a>,
    pool: &Mempool<'a>,
    counters: &WorkerCounters,
    tsc_hz: u64,
    factory: &mut FrameFactory,
    limit: Limit,
) -> Phase {
    let s0 = Snap::read(counters);
    let t0 = Instant::now();
    let _ = gen::send(tx, pool, factory, limit, &AtomicBool::new(false), tsc_hz);
    let secs = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(50));
    Phase { d: Snap::read(counters).since(&s0), secs }
}

/// Warm the 10,000 established flows (every one gets its entry), measure them alone, fill
/// the table with SYNs from random sources when `prefill`, flood (95% SYNs from random
/// sources, 5% the established flows), then measure the established flows alone again.
fn flood_run<'a>(
    tx: &mut TxQueue<'a>,
    pool: &Mempool<'a>,
    counters: &WorkerCounters,
    tsc_hz: u64,
    prefill: bool,
    measure: Duration,
) -> Flood {
    let established = || FrameFactory::new(&spec(ESTABLISHED)).expect("spec");
    let flat = |d: Duration| Limit { duration: Some(d), ..Limit::default() };
    // The worker was just launched: let it reach its poll loop before the first frame.
    std::thread::sleep(Duration::from_millis(100));
    // Twice through every flow in turn, paced below the flood guard's rate (a new flow beyond
    // it is forwarded without an entry): every one has its entry.
    let warm = Limit {
        count: Some(u64::from(ESTABLISHED) * 2),
        rate: Some(f64::from(FLOOD_GUARD) / 2.0),
        ..Limit::default()
    };
    let mut in_turn =
        FrameFactory::new(&TrafficSpec { order: Order::Sequential, ..spec(ESTABLISHED) })
            .expect("spec");
    let _ = phase(tx, pool, counters, tsc_hz, &mut in_turn, warm);
    let before = phase(tx, pool, counters, tsc_hz, &mut established(), flat(measure));
    let fill = prefill.then(|| {
        // New connections only, until the table is full (the guard admits 200k a second).
        let mut syn =
            FrameFactory::new(&TrafficSpec { syn_share: 1.0, ..spec(ESTABLISHED) }).expect("spec");
        phase(tx, pool, counters, tsc_hz, &mut syn, flat(Duration::from_millis(1500)))
    });
    let mut flood_factory =
        FrameFactory::new(&TrafficSpec { syn_share: 0.95, ..spec(ESTABLISHED) }).expect("spec");
    let flood = phase(tx, pool, counters, tsc_hz, &mut flood_factory, flat(measure));
    let after = phase(tx, pool, counters, tsc_hz, &mut established(), flat(measure / 2));
    Flood { before, fill, flood, after }
}

fn print_flood(r: &Row, f: &Flood) {
    println!(
        "{:<22} before {:.2} Mpps (hit share {:.4}%: {} of {}, new {}), flood {:.2} Mpps ({:.1}% \
         of before): hits {} new {} bypassed {} evictions {} entries {}{}; after: hit share \
         {:.4}%",
        r.name,
        f.before.mpps(),
        f.before.hit_share() * 100.0,
        f.before.d.hits,
        f.before.d.rx,
        f.before.d.new,
        f.flood.mpps(),
        f.flood.mpps() / f.before.mpps().max(1e-9) * 100.0,
        f.flood.d.hits,
        f.flood.d.new,
        f.flood.d.bypassed,
        r.evictions,
        f.flood.d.entries,
        f.fill.map_or(String::new(), |p| format!(" (table filled first: {} entries)", p.d.entries)),
        f.after.hit_share() * 100.0,
    );
}

/// The floor loop's tables: `lines` lines, one of them read and written per packet (0: no
/// table); with `heads` > 0, found through a line of a second array of `heads` lines, as a
/// connection-table hit finds its record through its bucket's header.
#[derive(Debug, Clone, Copy)]
struct Floor {
    lines: usize,
    heads: usize,
}

/// One line of the floor loop's tables.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u64; 8]);

/// The generator on its lcore and [`floor_loop`] on the worker's, for `warm` then `measure`:
/// the floor loop's rate in Mpps and the generator's report.
#[allow(clippy::too_many_arguments)]
fn floor_run<'p>(
    eal: &Eal,
    (worker_lcore, gen_lcore): (LcoreId, LcoreId),
    (rx, tx): (&mut RxQueue<'p>, &mut TxQueue<'p>),
    (gen_tx, pool): (&mut TxQueue<'p>, &Mempool<'p>),
    factory: &mut FrameFactory,
    (table, heads): (&mut [Line], &[Line]),
    (warm, measure): (Duration, Duration),
    tsc_hz: u64,
) -> (f64, gen::SendReport) {
    let stop = AtomicBool::new(false);
    let count = AtomicU64::new(0);
    let report = std::sync::Mutex::new(None);
    let mpps = eal
        .scope(|scope| {
            let (stop, count, report) = (&stop, &count, &report);
            scope
                .launch(worker_lcore, move || floor_loop(rx, tx, (table, heads), stop, count))
                .expect("launch floor loop");
            scope
                .launch(gen_lcore, move || {
                    let r = gen::send(gen_tx, pool, factory, Limit::default(), stop, tsc_hz);
                    *report.lock().expect("report") = Some(r);
                })
                .expect("launch generator");
            std::thread::sleep(warm);
            let before = count.load(Ordering::Relaxed);
            let t0 = Instant::now();
            std::thread::sleep(measure);
            let after = count.load(Ordering::Relaxed);
            let elapsed = t0.elapsed().as_secs_f64();
            stop.store(true, Ordering::Relaxed);
            (after - before) as f64 / elapsed / 1e6
        })
        .expect("the benchmark runs on the main lcore");
    (mpps, report.into_inner().expect("report").expect("generator reported"))
}

/// The least an encapsulating balancer does per packet, in place of the worker: what this
/// machine leaves for any balancer's own work. Receive a burst; prefetch each frame; with a
/// table, hash each frame's addresses and ports to one 64-byte line and prefetch it (one
/// cache miss per packet: the least a flow table far larger than the caches costs), then read
/// and write that line; prepend 20 bytes and write a 34-byte Ethernet + IPv4 outer header;
/// transmit. No classification, no checks, no counters but the packet count.
///
/// With `heads`, the hash names a line of `heads` instead, and [`FLOOR_LAG`] packets later the
/// word read there (with the hash) names the line of `table`, which is then prefetched: two
/// dependent misses per packet, overlapped across the burst the way the worker's probe does in
/// bursts of up to 32 (`path::record_lag`).
fn floor_loop<'p>(
    rx: &mut RxQueue<'p>,
    tx: &mut TxQueue<'p>,
    (table, heads): (&mut [Line], &[Line]),
    stop: &AtomicBool,
    count: &AtomicU64,
) {
    const OUTER: [u8; 34] = [
        2, 0, 0, 0, 1, 1, 2, 0, 0, 0, 0, 1, 0x08, 0x00, 0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 4, 0, 0,
        198, 18, 0, 1, 198, 18, 1, 1,
    ];
    let mask = table.len().saturating_sub(1);
    let head_mask = heads.len().saturating_sub(1);
    let mut burst = MbufBurst::new();
    let mut hash = [0u64; dpdk::MAX_BURST];
    let mut line = [0usize; dpdk::MAX_BURST];
    let mut total = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let n = rx.rx_burst_into(&mut burst, dpdk::MAX_BURST as u16);
        if n == 0 {
            continue;
        }
        for m in burst.iter() {
            m.prefetch_data();
        }
        if !table.is_empty() {
            for (i, m) in burst.iter().enumerate() {
                let d = m.data();
                let (a, p) = match (d.get(26..34), d.get(34..38)) {
                    (Some(a), Some(p)) => (a, p),
                    _ => (&[0u8; 8][..], &[0u8; 4][..]),
                };
                let k = u64::from_le_bytes(a.try_into().expect("8 bytes"))
                    ^ u64::from(u32::from_le_bytes(p.try_into().expect("4 bytes"))) << 17;
                let h = k.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                hash[i] = h;
                if heads.is_empty() {
                    line[i] = (h >> 20) as usize & mask;
                    dpdk::prefetch(table[line[i]].0.as_ptr().cast());
                } else {
                    line[i] = (h >> 20) as usize & head_mask;
                    dpdk::prefetch(heads[line[i]].0.as_ptr().cast());
                    if let Some(j) = i.checked_sub(FLOOR_LAG) {
                        line[j] = floor_resolve(table, heads, hash[j], line[j]);
                    }
                }
            }
            if !heads.is_empty() {
                for j in n.saturating_sub(FLOOR_LAG)..n {
                    line[j] = floor_resolve(table, heads, hash[j], line[j]);
                }
            }
        }
        for (i, mut m) in burst.drain().enumerate() {
            if let Some(t) = table.get_mut(line[i]) {
                t.0[1] = t.0[1].wrapping_add(t.0[0]);
            }
            let len = m.data().len();
            if m.prepend(20).is_ok() {
                if let Some(h) = m.data_mut().ok().and_then(|d| d.get_mut(..34)) {
                    h.copy_from_slice(&OUTER);
                    h[16..18].copy_from_slice(&((len + 6) as u16).to_be_bytes());
                }
            }
            tx.push(m);
        }
        total += n as u64;
        count.store(total, Ordering::Relaxed);
    }
    tx.flush();
}

/// The host's processor (`/proc/cpuinfo`), TSC rate, and what a cache line costs to move
/// between the two vCPUs: the round trip of a counter that the main lcore (vCPU 0) and
/// `other` (vCPU 1) increment in turn, in TSC cycles. Every frame of the pipeline crosses
/// between them (written by the generator, read and freed by the worker, its mbuf reused by
/// the generator), so this is what bounds io-forward, and what makes a share of io-forward
/// differ between hosts.
fn print_host(eal: &Eal, other: LcoreId, tsc_hz: u64) {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.split_once(':').filter(|(k, _)| k.trim() == name))
            .map_or("?", |(_, v)| v.trim())
    };
    #[repr(align(64))]
    struct Shared(AtomicU64);
    let turn = Shared(AtomicU64::new(0));
    const ROUNDS: u64 = 200_000;
    let cycles = eal
        .scope(|scope| {
            let turn = &turn.0;
            scope
                .launch(other, move || {
                    for i in (1..2 * ROUNDS).step_by(2) {
                        while turn.load(Ordering::Acquire) != i {
                            std::hint::spin_loop();
                        }
                        turn.store(i + 1, Ordering::Release);
                    }
                })
                .expect("launch the other side of the round trip");
            let t0 = dpdk::tsc();
            for i in (0..2 * ROUNDS).step_by(2) {
                while turn.load(Ordering::Acquire) != i {
                    std::hint::spin_loop();
                }
                turn.store(i + 1, Ordering::Release);
            }
            (dpdk::tsc() - t0) as f64 / ROUNDS as f64
        })
        .expect("the benchmark runs on the main lcore");
    println!(
        "host: {} family {} model {} ({}), TSC {:.2} GHz; a cache line's round trip between the \
         two vCPUs: {cycles:.0} TSC cycles",
        field("vendor_id"),
        field("cpu family"),
        field("model"),
        field("model name"),
        tsc_hz as f64 / 1e9
    );
}

/// What one load costs when it waits for the one before (a chase through a single random cycle
/// over every line of an array, on 2 MiB pages), for arrays from the size of the L2 cache to
/// that of `syn_100`'s table, in TSC cycles: where it jumps is how much cache this VM really
/// has, and the rest is the latency that the floor loops' and the worker's prefetches hide.
fn print_memory_latency() {
    let mut out = String::from("memory latency, TSC cycles per dependent load:");
    for mib in [1usize, 2, 4, 8, 64, 128, 1024] {
        let lines = mib << 14;
        let mut table: Vec<Line> = Vec::with_capacity(lines);
        dpdk::advise_huge_pages(table.as_ptr().cast(), lines * size_of::<Line>());
        table.resize(lines, Line([0; 8]));
        // Sattolo's shuffle: one cycle through every line.
        let mut next: Vec<u32> = (0..lines as u32).collect();
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        for i in (1..lines).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            next.swap(i, (x % i as u64) as usize);
        }
        for (l, n) in table.iter_mut().zip(&next) {
            l.0[0] = u64::from(*n);
        }
        let chase = |steps: u32, mut p: usize| {
            for _ in 0..steps {
                p = table[p].0[0] as usize;
            }
            p
        };
        let p = chase(100_000, 0);
        let steps = 1_000_000;
        let t0 = dpdk::tsc();
        std::hint::black_box(chase(steps, p));
        let cycles = (dpdk::tsc() - t0) as f64 / f64::from(steps);
        let _ = write!(out, " {mib} MiB {cycles:.0};");
    }
    println!("{}", out.trim_end_matches(';'));
}

/// The line of `table` that the word of `heads[head]` picked by hash `h` names, prefetched.
#[inline(always)]
fn floor_resolve(table: &[Line], heads: &[Line], h: u64, head: usize) -> usize {
    let w = heads[head].0[(h >> 61) as usize];
    let l = (w ^ h) as usize & (table.len() - 1);
    dpdk::prefetch(table[l].0.as_ptr().cast());
    l
}

/// How many packets behind its header's prefetch the two-line floor reads the header and
/// prefetches the line it names (what the worker's probe does in bursts of up to 32,
/// `path::record_lag`).
const FLOOR_LAG: usize = 16;

/// A directory removed on drop.
struct RuntimeDir(String);

impl Drop for RuntimeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn drain(rx: &mut RxQueue<'_>) {
    while !rx.rx_burst(32).is_empty() {}
}

fn percentiles(mut v: Vec<u64>) -> (u64, u64) {
    if v.is_empty() {
        return (0, 0);
    }
    v.sort_unstable();
    (v[v.len() / 2], v[v.len() * 99 / 100])
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

fn print_row(r: &Row) {
    println!(
        "{:<22} {:>7.2} Mpps  {:>5.1}% of io_forward  refused {:>5.1}%  hits {} new {} \
         bypassed {} evictions {} entries {} {}",
        r.name,
        r.mpps,
        if r.baseline_mpps > 0.0 { r.mpps / r.baseline_mpps * 100.0 } else { 0.0 },
        r.refused_share * 100.0,
        r.hits,
        r.new,
        r.bypassed,
        r.evictions,
        r.entries,
        r.extra
    );
}

/// The summary of a `--pairs` run: each scenario row's share of the mean of the baselines just
/// before and after it, and whether both of those ran at or above the median baseline of the
/// run. Such pairs say best what the goal asks: when the host slows the generator's core the
/// baseline falls further than the balancer and the share grows; when one of the two
/// baselines is slow, the host changed speed during the pair.
fn print_pairs(rows: &[Row]) {
    let is_base = |r: &Row| r.name.starts_with("io_forward");
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let typical = median(&mut rows.iter().filter(|r| is_base(r)).map(|r| r.mpps).collect());
    let mut all = Vec::new();
    let mut fast = Vec::new();
    for w in rows.windows(3) {
        let [before, r, after] = w else { continue };
        if is_base(r) || !is_base(before) || !is_base(after) {
            continue;
        }
        let share = r.mpps / ((before.mpps + after.mpps) / 2.0).max(f64::MIN_POSITIVE) * 100.0;
        let both_fast = before.mpps.min(after.mpps) >= typical;
        println!(
            "pair: {} {:.2} Mpps between io_forward {:.2} and {:.2}: {share:.1}%{}",
            r.name,
            r.mpps,
            before.mpps,
            after.mpps,
            if both_fast { "" } else { " (a baseline below the median)" }
        );
        all.push(share);
        if both_fast {
            fast.push(share);
        }
    }
    let (n, k) = (all.len(), fast.len());
    println!(
        "pairs: {n}; share of io_forward median {:.1}%; {k} with both baselines at or above \
         the median baseline ({typical:.2} Mpps): median {:.1}%",
        median(&mut all),
        median(&mut fast)
    );
    // A balancer within a fifth of io-forward's rate is not what the worker costs but what the
    // pipeline (generator, ring, the frames' cross-core transfers) lets through to either: on
    // the 2026-12-04 host, before the generator took its mbufs' lines ahead, io-forward ran
    // at 16-21 Mpps and the balancer at 96-99% of it (docs/performance.md, nineteenth pass).
    let share = median(&mut all);
    if share > 80.0 {
        println!(
            "pairs: the scenario runs at {share:.0}% of io_forward ({typical:.2} Mpps): the \
             pipeline, not the worker, sets both rates here, and the share says little of the \
             worker (see the host line above)"
        );
    }
}

/// Writes the rows, one JSON object per line, to `path` when given.
fn write_json(path: Option<&str>, rows: &[Row]) {
    let Some(path) = path else { return };
    let mut out = String::new();
    for r in rows {
        let _ = writeln!(out, "{}", to_json(r));
    }
    std::fs::write(path, out).expect("write --json file");
    println!("wrote {path}");
}

fn to_json(r: &Row) -> String {
    let extra = if r.extra.starts_with('"') { format!(",{}", r.extra) } else { String::new() };
    format!(
        "{{\"name\":\"{}\",\"workers\":{},\"mpps\":{:.4},\"baseline_mpps\":{:.4},\
         \"refused_share\":{:.4},\"hits\":{},\"new\":{},\"bypassed\":{},\"evictions\":{},\
         \"entries\":{}{extra}}}",
        r.name,
        r.workers,
        r.mpps,
        r.baseline_mpps,
        r.refused_share,
        r.hits,
        r.new,
        r.bypassed,
        r.evictions,
        r.entries
    )
}

/// `--by-load`: for `window`, every 100 ms, the new connections' rate and how full the
/// connection table made for `capacity` entries (`rounded_capacity` of them) was at the start
/// and the end of those 100 ms.
fn print_rate_by_load(counters: &WorkerCounters, capacity: usize, window: Duration) {
    let slots = rounded_capacity(capacity) as f64;
    let new = || counters.reason(Reason::Forward(ForwardReason::NewConnection)).get();
    let load = || counters.ct_entries.get() as f64 / slots * 100.0;
    let t0 = Instant::now();
    let (mut t_last, mut new_last, mut load_last) = (Instant::now(), new(), load());
    while t0.elapsed() < window {
        std::thread::sleep(Duration::from_millis(100).min(window.saturating_sub(t0.elapsed())));
        let (t, n, l) = (Instant::now(), new(), load());
        let secs = t.duration_since(t_last).as_secs_f64();
        println!(
            "by load: {load_last:5.1}% -> {l:5.1}% full: {:5.2} Mpps new connections, \
             {} evictions so far",
            (n - new_last) as f64 / secs / 1e6,
            counters.ct_evictions.get()
        );
        (t_last, new_last, load_last) = (t, n, l);
    }
}
