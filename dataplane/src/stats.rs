//! The counter lines the daemon prints: live per-worker rates while it runs
//! (`stats t=... worker=... mpps=...`) and the `final ...` lines when it stops, which scripts
//! and tests read.

use std::io::Write;
use std::time::{Duration, Instant};

use spillway_core::counters::{Reason, WorkerCounters};

use crate::dpdk::{LcoreId, PollGate, Port};
use crate::worker::CounterValues;

/// Prints each worker's counters and rate every `interval` (never when it is zero).
#[derive(Debug)]
pub struct LivePrinter {
    interval: Duration,
    start: Instant,
    last_print: Instant,
    last: Vec<CounterValues>,
}

impl LivePrinter {
    /// Starts counting from the workers' current counters.
    pub fn new(interval: Duration, counters: &[WorkerCounters]) -> LivePrinter {
        let start = Instant::now();
        let last = counters.iter().map(CounterValues::read).collect();
        LivePrinter { interval, start, last_print: start, last }
    }

    /// Prints a line per worker (and a total with several) when `interval` has passed.
    pub fn tick(&mut self, now: Instant, lcores: &[LcoreId], counters: &[WorkerCounters]) {
        if self.interval.is_zero() || now - self.last_print < self.interval {
            return;
        }
        let secs = (now - self.last_print).as_secs_f64();
        let mut total_rx = 0;
        for (i, (c, prev)) in counters.iter().zip(self.last.iter_mut()).enumerate() {
            let cur = CounterValues::read(c);
            let d = cur.since(prev);
            total_rx += d.rx;
            println!(
                "stats t={:.1}s worker={i} lcore={} rx={} tx={} dropped={} mpps={:.3}",
                (now - self.start).as_secs_f64(),
                lcores[i],
                cur.rx,
                cur.tx,
                cur.dropped,
                mpps(d.rx, secs)
            );
            *prev = cur;
        }
        if counters.len() > 1 {
            println!("stats total mpps={:.3}", mpps(total_rx, secs));
        }
        flush_stdout();
        self.last_print = now;
    }
}

/// Prints the `final` lines: per worker rx/tx/dropped and rate over `ran_for`, every non-zero
/// reason counter and side counter summed over the workers, and each port's driver counters.
pub fn print_final(
    lcores: &[LcoreId],
    counters: &[WorkerCounters],
    ports: &[Port<'_>],
    ran_for: Duration,
) {
    let secs = ran_for.as_secs_f64();
    for (i, (c, lcore)) in counters.iter().zip(lcores).enumerate() {
        let c = CounterValues::read(c);
        println!(
            "final worker={i} lcore={lcore} rx={} tx={} dropped={} secs={secs:.2} mpps={:.3}",
            c.rx,
            c.tx,
            c.dropped,
            mpps(c.rx, secs)
        );
    }
    for r in Reason::all() {
        let n: u64 = counters.iter().map(|c| c.reason(r).get()).sum();
        if n > 0 {
            let (kind, label) = r.labels();
            println!("final {kind}={label} packets={n}");
        }
    }
    let sum = |f: fn(&WorkerCounters) -> u64| counters.iter().map(f).sum::<u64>();
    for (name, n) in [
        ("neighbour_replies", sum(|c| c.neighbour_replies.get())),
        ("echo_replies", sum(|c| c.echo_replies.get())),
        ("neighbour_answers_heard", sum(|c| c.neighbour_answers_heard.get())),
        ("icmp_errors_forwarded", sum(|c| c.icmp_errors_forwarded.get())),
        ("conntrack_entries", sum(|c| c.ct_entries.get())),
        ("memif_gate_closings", PollGate::closings()),
    ] {
        if n > 0 {
            println!("final {name}={n}");
        }
    }
    for port in ports {
        match port.stats() {
            Ok(s) => println!(
                "final port={} ipackets={} opackets={} imissed={} ierrors={} oerrors={} \
                 rx_nombuf={}",
                port.name(),
                s.ipackets,
                s.opackets,
                s.imissed,
                s.ierrors,
                s.oerrors,
                s.rx_nombuf
            ),
            Err(e) => tracing::warn!(port = port.name(), "cannot read port counters: {e}"),
        }
    }
    flush_stdout();
}

fn mpps(packets: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        packets as f64 / secs / 1e6
    } else {
        0.0
    }
}

/// Best effort: a closed stdout must not stop the data plane.
pub fn flush_stdout() {
    let _ = std::io::stdout().flush();
}
