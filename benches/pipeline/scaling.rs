//! Scaling: one then two workers, each fed by a replay source on its own core (it writes the
//! generator's frames into fresh mbufs itself, no generator lcore: this machine has two
//! cores), with `big` flows each.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use spillway_dataplane::dpdk::{self, MbufBurst, Mempool};
use spillway_dataplane::worker::{CounterValues, PortQueues, Worker, WorkerCounters};
use spillway_gen::{FrameFactory, TrafficSpec};

use crate::report::{print_phases, Extra, Row};
use crate::rig::Rig;
use crate::scenarios::spec;

/// Measures one worker, then two, for `measure` each (after 3 s for their tables to fill),
/// the workers polling `burst` frames at a time; prints both and returns the `scaling_replay`
/// row.
pub fn run(rig: &mut Rig<'_>, big: u32, burst: u16, measure: Duration) -> Row {
    let mut scale = Vec::new();
    for workers in [1usize, 2] {
        let rates = rates(rig, workers, big, burst, measure);
        let total: f64 = rates.iter().sum();
        println!(
            "scaling {workers} worker(s), replay source, {big} flows each: {total:.2} Mpps ({})",
            rates.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(" + ")
        );
        scale.push(total);
    }
    Row {
        name: "scaling_replay".into(),
        workers: 2,
        mpps: scale[1],
        baseline_mpps: scale[0],
        extra: Some(Extra::Scaling { one_worker_mpps: scale[0], ratio: scale[1] / scale[0] }),
        ..Row::default()
    }
}

/// `workers` replay workers, one per lcore: each one's rate in Mpps.
fn rates(rig: &mut Rig<'_>, workers: usize, big: u32, burst: u16, measure: Duration) -> Vec<f64> {
    let counters: Vec<WorkerCounters> = (0..workers).map(|_| WorkerCounters::new()).collect();
    let lc = [rig.worker_lcore, rig.gen_lcore];
    let mut ws: Vec<Worker<'_, '_>> = Vec::with_capacity(workers);
    for (w, c) in counters.iter().enumerate() {
        let q = vec![PortQueues { rx: rig.null_rx.remove(0), tx: rig.null_tx.remove(0) }];
        let b = Some(rig.balancer(big as usize * 2, None));
        ws.push(Worker::new(w, lc[w], q, rig.params, c, b));
    }
    let stop = AtomicBool::new(false);
    let rates = rig
        .eal
        .scope(|scope| {
            let stop = &stop;
            for (w, worker) in ws.iter_mut().enumerate() {
                let pool = rig.pool;
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
            rig.null_rx.push(rx);
            rig.null_tx.push(tx);
        }
    }
    rates
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
