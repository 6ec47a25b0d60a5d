//! `--slices N` (with `--only SCENARIO`): one setup, and the worker's lcore alternates an
//! io-forwarding worker and the balancing one on the same queues and the same traffic,
//! `--slice-ms` each (default 500), N balancing slices between N + 1 baseline ones.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use spillway_core::counters::Reason;
use spillway_core::decide::ForwardReason;
use spillway_dataplane::dpdk::{Eal, LcoreId, Mempool, TxQueue};
use spillway_dataplane::path::phase_clock::Phases;
use spillway_dataplane::worker::{
    Balancer, CounterValues, PortQueues, Worker, WorkerCounters, WorkerParams,
};
use spillway_gen::{self as gen, FrameFactory, Limit, TrafficSpec};

use crate::report::{print_pairs, Row};
use crate::rig::Rig;
use crate::scenarios::Scenario;

/// Runs `slices` balancing slices of `slice` of the scenario `--only` names (`only`), prints
/// their shares of the baselines around them (`pair:` and `pairs:` lines) and returns a row per
/// slice, baselines included.
pub fn run(
    rig: &mut Rig<'_>,
    scenarios: &[Scenario],
    only: Option<&str>,
    slices: usize,
    slice: Duration,
) -> Vec<Row> {
    let Some(sc) = only.and_then(|o| scenarios.iter().find(|s| s.name == o && s.balance)) else {
        panic!("--slices needs --only with the name of a balancing scenario");
    };
    // New connections fill the table as the run goes on (`syn_100`'s 16M-entry table is
    // 70-99% full after 2.3 s): the slices would not measure the same thing.
    assert!(
        sc.spec.syn_share == 0.0,
        "--slices: {} makes new entries all along, its slices would differ; use --pairs",
        sc.name
    );
    let queues = PortQueues { rx: rig.ring0_rx.remove(0), tx: rig.null_tx.remove(0) };
    let balancer = rig.balancer(sc.capacity, sc.guard);
    let rates = interleaved(
        rig.eal,
        (rig.worker_lcore, rig.gen_lcore),
        queues,
        (&mut rig.ring0_tx[0], rig.pool),
        balancer,
        (&sc.spec, rig.params),
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
    rows
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
    print_slice_phases(&phases.into_inner().expect("phases"), &rates);
    rates
}

/// With `--features phase-clock`: each balancer slice's burst path (`phases`, one per balancer
/// slice after the warm-up) beside its rate in `rates`, and their sum.
fn print_slice_phases(phases: &[Phases], rates: &[f64]) {
    let mut all = Phases::default();
    for (i, p) in phases.iter().enumerate().filter(|(_, p)| p.packets > 0) {
        let mpps = rates.get(2 * i + 1).copied().unwrap_or(0.0);
        println!("slice {}: {mpps:.2} Mpps, {p}", 2 * i + 1);
        all = Phases {
            first: all.first + p.first,
            tail: all.tail + p.tail,
            last: all.last + p.last,
            packets: all.packets + p.packets,
        };
    }
    if all.packets > 0 {
        println!("worker (balancer slices): {all}");
    }
}
