//! The flood experiments (`flood_room`, `flood_full`): 10,000 established flows, then a SYN
//! flood at the highest rate the machine sends, with the flood guard on: the worker's rate
//! before and during the flood, the established flows' hit share before and after it,
//! evictions, and what the guard bypassed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use spillway_core::counters::Reason;
use spillway_core::decide::ForwardReason;
use spillway_dataplane::dpdk::{Mempool, TxQueue};
use spillway_dataplane::worker::{CounterValues, Worker, WorkerCounters};
use spillway_gen::{self as gen, FrameFactory, Limit, Order, TrafficSpec};

use crate::report::{Extra, FloodExtra, Row};
use crate::rig::Rig;
use crate::scenarios::spec;

/// SYN floods against 10,000 established flows, with the flood guard on: a table with room for
/// the whole flood, then a small table filled to the brim before the flood. One row each.
pub fn run_all(rig: &mut Rig<'_>, measure: Duration) -> Vec<Row> {
    let mut rows = Vec::new();
    for (name, capacity, prefill) in
        [("flood_room", 1usize << 22, false), ("flood_full", 1 << 16, true)]
    {
        let counters = WorkerCounters::new();
        let queues = rig.lend_queues();
        let b = Some(rig.balancer(capacity, Some(FLOOD_GUARD)));
        let mut worker = Worker::new(0, rig.worker_lcore, queues, rig.params, &counters, b);
        let stop = AtomicBool::new(false);
        let (worker_lcore, tsc_hz, pool) = (rig.worker_lcore, rig.tsc_hz, rig.pool);
        let tx = &mut rig.ring0_tx[0];
        let f = rig
            .eal
            .scope(|scope| {
                let worker = &mut worker;
                let stop_ref = &stop;
                scope.launch(worker_lcore, move || worker.run(stop_ref)).expect("launch worker");
                let run = flood_run(tx, pool, &counters, tsc_hz, prefill, measure);
                stop.store(true, Ordering::Relaxed);
                run
            })
            .expect("the benchmark runs on the main lcore");
        let row = f.row(name, capacity);
        print_flood(&row, &f);
        rows.push(row);
        rig.return_queues(worker);
    }
    rows
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
            extra: Some(Extra::Flood(FloodExtra {
                capacity,
                established_flows: ESTABLISHED,
                guard_per_sec: FLOOD_GUARD,
                before_mpps: self.before.mpps(),
                flood_mpps: self.flood.mpps(),
                flood_over_before: self.flood.mpps() / self.before.mpps().max(1e-9),
                before_hit_share: self.before.hit_share(),
                after_hit_share: self.after.hit_share(),
                entries_before_flood: self.fill.map_or(self.before.d.entries, |f| f.d.entries),
            })),
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
