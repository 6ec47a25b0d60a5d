//! Latency at a low rate: generator -> `net_ring0` -> worker -> `net_ring1` -> the generator's
//! lcore, in TSC cycles from each frame's time stamp to its arrival, io-forward against the
//! balancer (the difference is what the balancer adds).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use spillway_dataplane::dpdk::{self, MbufBurst, Mempool, RxQueue, TxQueue};
use spillway_dataplane::worker::{PortQueues, Worker, WorkerCounters, WorkerParams};
use spillway_gen::{FrameFactory, TrafficSpec};

use crate::report::{Extra, LatencyExtra, Row};
use crate::rig::{drain, Rig};
use crate::scenarios::spec;

/// Measures io-forward's then the balancer's latency for `measure` each, prints both and
/// returns the `latency` row.
pub fn run(rig: &mut Rig<'_>, measure: Duration) -> Row {
    let tsc_hz = rig.tsc_hz;
    let mut latency = Vec::new();
    for balance in [false, true] {
        latency.push(percentiles(samples(rig, balance, measure)));
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
    Row {
        name: "latency".into(),
        workers: 1,
        extra: Some(Extra::Latency(LatencyExtra {
            io_p50_cycles: io.0,
            io_p99_cycles: io.1,
            lb_p50_cycles: lb.0,
            lb_p99_cycles: lb.1,
            added_p50_ns: (lb.0 as f64 - io.0 as f64) / tsc_hz as f64 * 1e9,
            tsc_hz,
        })),
        ..Row::default()
    }
}

/// One latency run, with the balancer or io-forwarding: every frame's cycles from its stamp to
/// its return.
fn samples(rig: &mut Rig<'_>, balance: bool, measure: Duration) -> Vec<u64> {
    let (worker_lcore, gen_lcore, tsc_hz, pool) =
        (rig.worker_lcore, rig.gen_lcore, rig.tsc_hz, rig.pool);
    let counters = WorkerCounters::new();
    let b = balance.then(|| rig.balancer(4096, None));
    let queues = vec![PortQueues { rx: rig.ring0_rx.remove(0), tx: rig.ring1_tx.remove(0) }];
    let low = WorkerParams { drain_ticks: 1, ..rig.params };
    let mut worker = Worker::new(0, worker_lcore, queues, low, &counters, b);
    let mut factory =
        FrameFactory::new(&TrafficSpec { stamp: true, ..spec(1024) }).expect("traffic spec");
    let stop = AtomicBool::new(false);
    let samples = std::sync::Mutex::new(Vec::new());
    let out = &samples;
    rig.eal
        .scope(|scope| {
            let stop = &stop;
            let worker = &mut worker;
            scope.launch(worker_lcore, move || worker.run(stop)).expect("launch worker");
            // The generator lcore both sends (paced, one frame at a time) and receives, so that
            // the main thread, which shares its core, sleeps.
            let (tx, rx, factory) = (&mut rig.ring0_tx[0], &mut rig.ring1_rx[0], &mut factory);
            scope
                .launch(gen_lcore, move || {
                    *out.lock().expect("samples") = paced(tx, rx, pool, factory, measure, tsc_hz);
                })
                .expect("launch generator");
            std::thread::sleep(measure + Duration::from_millis(100));
            stop.store(true, Ordering::Relaxed);
        })
        .expect("the benchmark runs on the main lcore");
    let samples = samples.into_inner().expect("samples");
    let mut q = worker.into_queues();
    let PortQueues { rx, tx } = q.remove(0);
    rig.ring0_rx.insert(0, rx);
    rig.ring1_tx.insert(0, tx);
    drain(&mut rig.ring1_rx[0]);
    drain(&mut rig.ring0_rx[0]);
    samples
}

/// For `measure`, sends one stamped frame on `tx` every 10 us (100k a second) and receives
/// from `rx`: each arriving frame's cycles since its stamp.
fn paced<'p>(
    tx: &mut TxQueue<'p>,
    rx: &mut RxQueue<'p>,
    pool: &Mempool<'p>,
    factory: &mut FrameFactory,
    measure: Duration,
    tsc_hz: u64,
) -> Vec<u64> {
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
                let stamp = u64::from_le_bytes(d[d.len() - 8..].try_into().expect("8"));
                v.push(now.wrapping_sub(stamp));
            }
        }
    }
    v
}

/// The median and the 99th percentile of `v` (0, 0 when empty).
fn percentiles(mut v: Vec<u64>) -> (u64, u64) {
    if v.is_empty() {
        return (0, 0);
    }
    v.sort_unstable();
    (v[v.len() / 2], v[v.len() * 99 / 100])
}
