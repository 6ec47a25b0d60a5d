//! The floor: not Spillway but the least any encapsulating balancer does per packet, a loop of a
//! few lines ([`floor_loop`]) run in place of the worker, with or without a table whose lines
//! it reads and writes: what the machine and the generator leave for a balancer's own work.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use spillway_dataplane::dpdk::{self, MbufBurst, RxQueue, TxQueue};
use spillway_gen::{self as gen, FrameFactory, Limit};

use crate::report::{print_row, Row};
use crate::rig::{drain, Rig};
use crate::scenarios::Scenario;

/// The floor loop's tables: `lines` lines, one of them read and written per packet (0: no
/// table); with `heads` > 0, found through a line of a second array of `heads` lines, as a
/// connection-table hit finds its record through its bucket's header.
#[derive(Debug, Clone, Copy)]
pub struct Floor {
    pub lines: usize,
    pub heads: usize,
}

/// One line of the floor loop's tables.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub struct Line(pub [u64; 8]);

/// Runs floor scenario `sc` over the tables `floor` asks for, for `measure` after its warm-up:
/// its row, with `baseline` (io-forward's rate) beside its own.
pub fn run(
    rig: &mut Rig<'_>,
    sc: &Scenario,
    floor: Floor,
    measure: Duration,
    baseline: f64,
) -> Row {
    let Floor { lines, heads } = floor;
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
    let (mpps, report) =
        floor_run(rig, &mut factory, (&mut table, &head_table), (sc.warm, measure));
    let row = Row::one_worker(sc.name, mpps, baseline, &report);
    print_row(&row);
    drain(&mut rig.ring0_rx[0]);
    row
}

/// The generator on its lcore and [`floor_loop`] on the worker's, for `warm` then `measure`:
/// the floor loop's rate in Mpps and the generator's report.
fn floor_run(
    rig: &mut Rig<'_>,
    factory: &mut FrameFactory,
    (table, heads): (&mut [Line], &[Line]),
    (warm, measure): (Duration, Duration),
) -> (f64, gen::SendReport) {
    let (worker_lcore, gen_lcore, tsc_hz, pool) =
        (rig.worker_lcore, rig.gen_lcore, rig.tsc_hz, rig.pool);
    let (rx, tx, gen_tx) = (&mut rig.ring0_rx[0], &mut rig.null_tx[0], &mut rig.ring0_tx[0]);
    let stop = AtomicBool::new(false);
    let count = AtomicU64::new(0);
    let report = std::sync::Mutex::new(None);
    let mpps = rig
        .eal
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
pub fn floor_loop<'p>(
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
