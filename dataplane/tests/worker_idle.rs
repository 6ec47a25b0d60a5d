//! `dataplane.idle_sleep_us` on real DPDK ports (EAL on ordinary memory, two `net_ring`
//! devices: the worker receives on the first and transmits on the second): a worker that
//! sleeps when a poll brings nothing uses a small share of the CPU a worker that polls without
//! pause uses over the same idle time, and still forwards every packet that arrives meanwhile.
//! One test function: EAL starts once per process.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use spillway_core::counters::WorkerCounters;
use spillway_dataplane::worker::{CounterValues, PortQueues, Worker, WorkerParams};
use spillway_dpdk::{
    Eal, LcoreId, MbufBurst, Mempool, Port, PortSetup, RxQueue, TxQueue, MAX_BURST,
};

/// The calling thread's CPU time.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec to the valid, exclusively borrowed `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// EAL's runtime directory for the test's file prefix, removed on drop (declared before EAL,
/// so dropped after it).
struct RuntimeDir(String);

impl Drop for RuntimeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One run of an io-forward worker from `rx` to `tx` with `idle_sleep_us`: idle for `idle`,
/// then 50 frames injected through `inject`, one a millisecond. Its thread's CPU time over the
/// whole run, and the frames that came out of `out`.
fn run<'p>(
    lcore: LcoreId,
    queues: PortQueues<'p>,
    mut inject: TxQueue<'p>,
    mut out: RxQueue<'p>,
    pool: &Mempool<'p>,
    idle_sleep_us: u32,
    idle: Duration,
) -> (Duration, usize) {
    const FRAMES: usize = 50;
    let counters = WorkerCounters::default();
    let stop = AtomicBool::new(false);
    let params =
        WorkerParams { burst_size: MAX_BURST as u16, drain_ticks: 1, tsc_hz: 1, idle_sleep_us };
    std::thread::scope(|s| {
        let worker = s.spawn(|| {
            let mut w = Worker::new(0, lcore, vec![queues], params, &counters, None);
            let start = thread_cpu();
            w.run(&stop);
            thread_cpu() - start
        });
        std::thread::sleep(idle);
        for k in 0..FRAMES {
            let mut burst = MbufBurst::new();
            assert!(pool.alloc_bulk(&mut burst, 1), "an mbuf");
            for m in burst.iter_mut() {
                m.reset(60).expect("room").fill(k as u8);
            }
            assert_eq!(inject.send(burst).sent, 1, "injected");
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut got = 0;
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut burst = MbufBurst::new();
        while got < FRAMES && Instant::now() < deadline {
            got += out.rx_burst_into(&mut burst, MAX_BURST as u16);
            burst.drain().for_each(drop);
        }
        stop.store(true, Ordering::Relaxed);
        let used = worker.join().expect("the worker");
        assert_eq!(CounterValues::read(&counters).rx, FRAMES as u64, "received");
        (used, got)
    })
}

#[test]
fn an_idle_worker_that_sleeps_spares_the_cpu_and_forwards_what_arrives() {
    let prefix = format!("spw-worker-idle-{}", std::process::id());
    let _runtime = RuntimeDir(format!("/var/run/dpdk/{prefix}"));
    let eal = Eal::init(&[
        "--no-huge",
        "-m",
        "128",
        "--no-pci",
        "--file-prefix",
        &prefix,
        "--vdev",
        "net_ring0",
        "--vdev",
        "net_ring1",
        "--vdev",
        "net_ring2",
        "--vdev",
        "net_ring3",
        "--log-level",
        "lib.eal:error",
        "--no-telemetry",
    ])
    .expect("EAL init on ordinary memory (run as root)");
    let pool = Mempool::create(&eal, "worker-idle", 1023, 0).expect("mempool");
    let setup =
        PortSetup { rx_queues: 1, tx_queues: 1, extra_tx_queues: 0, rx_desc: 256, tx_desc: 256 };
    // Each ring's transmit side feeds its own receive side.
    let ports: Vec<Port<'_>> = ["net_ring0", "net_ring1", "net_ring2", "net_ring3"]
        .iter()
        .map(|name| Port::open(&eal, name, setup, &pool).expect(name))
        .collect();
    let mut rings: Vec<(RxQueue<'_>, TxQueue<'_>)> = ports
        .iter()
        .map(|port| {
            let (mut rx, mut tx) = port.take_queues().expect("queues");
            (rx.remove(0), tx.remove(0))
        })
        .collect();
    let mut take = || rings.remove(0);
    let idle = Duration::from_millis(600);
    let lcore = eal.main_lcore();
    let (busy, sleepy) = {
        let ((rx0, inject0), (out0, tx0)) = (take(), take());
        let ((rx1, inject1), (out1, tx1)) = (take(), take());
        let (busy, got) =
            run(lcore, PortQueues { rx: rx0, tx: tx0 }, inject0, out0, &pool, 0, idle);
        assert_eq!(got, 50, "the polling worker forwards every frame");
        let (sleepy, got) =
            run(lcore, PortQueues { rx: rx1, tx: tx1 }, inject1, out1, &pool, 1_000, idle);
        assert_eq!(got, 50, "the sleeping worker forwards every frame that arrives");
        (busy, sleepy)
    };
    println!("CPU over {idle:?} idle and 50 frames: polling {busy:?}, sleeping 1 ms {sleepy:?}");
    // Polling takes the thread's whole share of a core (less when the machine is busy); the
    // sleeping worker wakes a thousand times a second for a poll of a few microseconds.
    assert!(
        sleepy * 5 < busy,
        "a sleeping worker used {sleepy:?} of CPU, a polling one {busy:?}: not a fifth"
    );
}
