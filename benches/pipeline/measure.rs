//! The scenarios run on the daemon's worker (balancing, or io-forwarding for the baseline):
//! the generator on its lcore, the worker on the other, and the worker's counters read around
//! a measured window.

use spillway_core::sync::SyncLink;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use spillway_core::conntrack::rounded_capacity;
use spillway_core::counters::Reason;
use spillway_core::decide::ForwardReason;
use spillway_dataplane::worker::{CounterValues, Worker, WorkerCounters};
use spillway_gen::{self as gen, FrameFactory, Limit};

use crate::floor;
use crate::report::{print_phases, print_row, Extra, Row};
use crate::rig::Rig;
use crate::scenarios::{spec, Scenario};

/// Runs `scenarios` in turn, each measured for `measure` after its warm-up, and prints and
/// returns their rows; each row's baseline is the rate of the last `io_forward` before it.
/// With `by_load`, scenarios that make new connections print their rate by table load.
pub fn run_all(
    rig: &mut Rig<'_>,
    scenarios: &[Scenario],
    measure: Duration,
    by_load: bool,
) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut baseline = 0.0;
    for sc in scenarios {
        if let Some(f) = sc.floor {
            rows.push(floor::run(rig, sc, f, measure, baseline));
            continue;
        }
        let row = run(rig, sc, measure, by_load, &mut baseline);
        print_row(&row);
        let mpps = row.mpps;
        if sc.name == "io_forward_end" && baseline > 0.0 {
            println!(
                "baseline drift: io_forward {baseline:.2} Mpps first, {mpps:.2} last ({:.2}x); \
                 the ratios are to the first, and mean little when the two differ by more than \
                 10%",
                mpps / baseline
            );
        }
        rows.push(row);
    }
    rows
}

/// One scenario on the worker: its row. An `io_forward` scenario sets `baseline` to its rate
/// first, so that its row is its own baseline.
fn run(
    rig: &mut Rig<'_>,
    sc: &Scenario,
    measure: Duration,
    by_load: bool,
    baseline: &mut f64,
) -> Row {
    let counters = WorkerCounters::new();
    let b = sc.balance.then(|| rig.balancer(sc.capacity, sc.guard));
    let queues = rig.lend_queues();
    let mut worker = Worker::new(0, rig.worker_lcore, queues, rig.params, &counters, b);
    let ((delta, elapsed), ct_hits_before, report) =
        window(rig, &mut worker, &counters, sc, measure, by_load);
    let mpps = delta.rx as f64 / elapsed / 1e6;
    if sc.name == "io_forward" {
        *baseline = mpps;
    }
    let hits = counters.reason(Reason::Forward(ForwardReason::ConntrackHit)).get();
    let new = counters.reason(Reason::Forward(ForwardReason::NewConnection)).get();
    let row = Row {
        hits,
        new,
        bypassed: counters.ct_bypassed.get(),
        evictions: counters.ct_evictions.get(),
        entries: counters.ct_entries.get(),
        extra: (sc.name == "syn_flood_guarded").then(|| {
            // 5% of the packets belong to the established flows: did they all still hit?
            let expected = delta.rx as f64 * (1.0 - sc.spec.syn_share);
            let kept = (hits - ct_hits_before) as f64 / expected.max(1.0);
            Extra::Guarded { established_hit_share: kept }
        }),
        ..Row::one_worker(sc.name, mpps, *baseline, &report)
    };
    rig.return_queues(worker);
    row
}

/// The worker on its lcore and the generator on the other (after the established flows alone,
/// for `syn_flood_guarded`), for the scenario's warm-up then `measure`: what the worker
/// received in the measured window and for how long, its conntrack hits before that window,
/// and the generator's report.
fn window<'p>(
    rig: &mut Rig<'p>,
    worker: &mut Worker<'p, '_>,
    counters: &WorkerCounters,
    sc: &Scenario,
    measure: Duration,
    by_load: bool,
) -> ((CounterValues, f64), u64, gen::SendReport) {
    let (worker_lcore, gen_lcore, tsc_hz, pool) =
        (rig.worker_lcore, rig.gen_lcore, rig.tsc_hz, rig.pool);
    let sync = rig.sync.clone();
    let sync = sync.as_ref();
    let tx = &mut rig.ring0_tx[0];
    let mut factory = FrameFactory::new(&sc.spec).expect("traffic spec");
    let stop = AtomicBool::new(false);
    let mut warm_factory = None;
    if sc.name == "syn_flood_guarded" {
        // The established flows first, alone, so that they have their entries.
        warm_factory = Some(FrameFactory::new(&spec(1024)).expect("spec"));
    }
    let report = std::sync::Mutex::new(None);
    let report_ref = &report;
    let (window, ct_hits_before) = rig
        .eal
        .scope(|scope| {
            let stop = &stop;
            let worker = &mut *worker;
            scope
                .launch(worker_lcore, move || {
                    worker.run(stop);
                    print_phases("worker");
                })
                .expect("launch worker");
            if let Some(f) = warm_factory.as_mut() {
                let limit = Limit { count: Some(20_000), ..Limit::default() };
                let _ = gen::send(&mut *tx, pool, f, limit, &AtomicBool::new(false), tsc_hz);
                std::thread::sleep(Duration::from_millis(50));
            }
            let factory = &mut factory;
            scope
                .launch(gen_lcore, move || {
                    let r = gen::send(tx, pool, factory, Limit::default(), stop, tsc_hz);
                    *report_ref.lock().expect("report") = Some(r);
                })
                .expect("launch generator");
            std::thread::sleep(sc.warm);
            let before = CounterValues::read(counters);
            let hits_before = counters.reason(Reason::Forward(ForwardReason::ConntrackHit)).get();
            let t0 = Instant::now();
            if by_load && sc.spec.syn_share > 0.0 {
                print_rate_by_load(counters, sc.capacity, measure);
            } else if let Some(link) = sync.filter(|_| sc.balance) {
                stand_in_for_sync(link, counters, measure);
            } else {
                std::thread::sleep(measure);
            }
            let after = CounterValues::read(counters);
            let elapsed = t0.elapsed().as_secs_f64();
            stop.store(true, Ordering::Relaxed);
            // The scope waits for both lcores.
            ((after.since(&before), elapsed), hits_before)
        })
        .expect("the benchmark runs on the main lcore");
    let report = report.into_inner().expect("report").expect("generator reported");
    (window, ct_hits_before, report)
}

/// `--sync`, for `window`: the sync thread's part, as far as the worker sees it: a refresh
/// scan asked for as soon as the one before has finished (the worker scans all the time), the
/// entries handed over taken (counted, not sent); prints what the scans did.
fn stand_in_for_sync(link: &SyncLink, counters: &WorkerCounters, window: Duration) {
    let scans = || counters.sync.scans.get();
    let (scans0, t0) = (scans(), Instant::now());
    let (mut taken, mut asked_at) = (0u64, scans0);
    link.requests.ask_refresh();
    while t0.elapsed() < window {
        if scans() > asked_at {
            asked_at = scans();
            link.requests.ask_refresh();
        }
        while link.outbound.pop().is_some() {
            taken += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let (done, secs) = (scans() - scans0, t0.elapsed().as_secs_f64());
    println!(
        "sync: {done} scans of the whole table back to back in {secs:.2} s ({:.0} ms each), \
         {taken} entries at risk handed over",
        secs * 1000.0 / done.max(1) as f64
    );
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
