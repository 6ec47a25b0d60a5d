//! What the host gives the pipeline, measured apart from it: the processor, the TSC rate and a
//! cache line's round trip between the two vCPUs (`host:`), the memory latency by array size,
//! and the process's peak memory (the `memory` row).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use spillway_core::conntrack::{rounded_capacity, BYTES_PER_ENTRY};
use spillway_dataplane::dpdk::{self, Eal, LcoreId};

use crate::floor::Line;
use crate::report::{Extra, MemoryExtra, Row};

/// The host's processor (`/proc/cpuinfo`), TSC rate, and what a cache line costs to move
/// between the two vCPUs: the round trip of a counter that the main lcore (vCPU 0) and
/// `other` (vCPU 1) increment in turn, in TSC cycles. Every frame of the pipeline crosses
/// between them (written by the generator, read and freed by the worker, its mbuf reused by
/// the generator), so this is what bounds io-forward, and what makes a share of io-forward
/// differ between hosts.
pub fn print_host(eal: &Eal, other: LcoreId, tsc_hz: u64) {
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
pub fn print_memory_latency() {
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

/// Prints the peak RSS and what 10M connections cost per worker; returns the `memory` row,
/// which also says whether DPDK ran on `hugepages`.
pub fn memory_row(hugepages: bool) -> Row {
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
    Row {
        name: "memory".into(),
        workers: 1,
        extra: Some(Extra::Memory(MemoryExtra {
            peak_rss_kib: hwm,
            bytes_per_connection: BYTES_PER_ENTRY,
            ten_million_entries: entries_10m,
            ten_million_mib: (entries_10m * BYTES_PER_ENTRY) >> 20,
            hugepages,
        })),
        ..Row::default()
    }
}

/// A field of `/proc/self/status` in KiB (0 when missing).
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
