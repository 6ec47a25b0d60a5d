//! Per worker: its own counters (traffic, heartbeat, connection table, neighbour and ICMP
//! replies, the exception path), and the decision reasons summed over the workers.

use super::scrape::Scrape;
use crate::view::DataplaneView;
use prometheus_client::metrics::MetricType::{self, Counter, Gauge};
use spillway_core::counters::{Reason, WorkerCounters};
use spillway_core::decide::QuicFallback;

/// Picks one counter of a worker.
type Pick = fn(&WorkerCounters) -> u64;

/// The families with one sample per worker, in the order they are exposed.
const PER_WORKER: [(&str, &str, MetricType, Pick); 16] = [
    (
        "spillway_conntrack_bypassed",
        "New connections the flood guard forwarded by the hash alone, without an entry.",
        Counter,
        |c| c.ct_bypassed.get(),
    ),
    (
        "spillway_worker_heartbeat",
        "Goes up every time the worker passes its TX drain deadline, traffic or not: a \
         worker whose heartbeat stops has stopped polling.",
        Counter,
        |c| c.heartbeat.get(),
    ),
    (
        "spillway_worker_snapshot_generation",
        "Generation of the snapshot the worker decides with (a reload is in force once every \
         worker's is at least its generation).",
        Gauge,
        |c| c.snapshot_generation.get(),
    ),
    ("spillway_worker_rx_packets", "Packets received by the worker.", Counter, |c| {
        c.rx_packets.get()
    }),
    ("spillway_worker_rx_bytes", "Bytes received by the worker.", Counter, |c| c.rx_bytes.get()),
    ("spillway_worker_tx_packets", "Packets the worker handed to the driver.", Counter, |c| {
        c.tx_packets.get()
    }),
    ("spillway_conntrack_entries", "Entries in the worker's connection table.", Gauge, |c| {
        c.ct_entries.get()
    }),
    ("spillway_conntrack_capacity", "Capacity of the worker's connection table.", Gauge, |c| {
        c.ct_capacity.get()
    }),
    (
        "spillway_conntrack_inserts",
        "New connection-table entries (not in-place replacements).",
        Counter,
        |c| c.ct_inserts.get(),
    ),
    (
        "spillway_conntrack_evictions",
        "Live entries evicted because their set was full.",
        Counter,
        |c| c.ct_evictions.get(),
    ),
    (
        "spillway_neighbour_replies",
        "ARP replies and neighbour advertisements sent.",
        Counter,
        |c| c.neighbour_replies.get(),
    ),
    (
        "spillway_neighbour_answers_heard",
        "ARP replies and neighbour advertisements received (handed to the resolver).",
        Counter,
        |c| c.neighbour_answers_heard.get(),
    ),
    ("spillway_echo_replies", "Echo replies sent for node addresses and VIPs.", Counter, |c| {
        c.echo_replies.get()
    }),
    (
        "spillway_icmp_errors_forwarded",
        "ICMP errors for VIP flows sent on to the flow's backend.",
        Counter,
        |c| c.icmp_errors_forwarded.get(),
    ),
    (
        "spillway_kernel_frames",
        "Frames for the node handed to the exception path (the kernel interface); a full \
         queue to it is the drop reason kernel_busy.",
        Counter,
        |c| c.kernel_frames.get(),
    ),
    (
        "spillway_neighbour_waited_frames",
        "Frames that waited for their next hop's MAC (the first packets to a next hop not yet \
         resolved) and were then sent; those that found no room or waited in vain are the drop \
         reason neighbour_unresolved.",
        Counter,
        |c| c.neighbour_waited.get(),
    ),
];

/// Every [`PER_WORKER`] family, one sample per worker.
pub(super) fn per_worker(s: &mut Scrape, view: &dyn DataplaneView) {
    for (name, help, kind, pick) in PER_WORKER {
        let f = s.family(name, help, kind);
        for i in 0..view.workers() {
            f.add(vec![("worker", i.to_string())], pick(view.counters(i)));
        }
    }
}

/// Packets forwarded and dropped by reason, summed over the workers: every reason has its
/// sample, zero or not, so that every drop is counted somewhere.
pub(super) fn reasons(s: &mut Scrape, view: &dyn DataplaneView) {
    let sum = |r: Reason| {
        (0..view.workers()).map(|i| view.counters(i).reason(r).get()).fold(0u64, u64::wrapping_add)
    };
    let fwd =
        s.family("spillway_forwarded_packets", "Packets forwarded, by decision reason.", Counter);
    for r in Reason::all().filter(|r| r.labels().0 == "forward") {
        fwd.add(vec![("reason", r.labels().1.to_owned())], sum(r));
    }
    let dropped = s.family("spillway_dropped_packets", "Packets dropped, by reason.", Counter);
    for r in Reason::all().filter(|r| r.labels().0 == "drop") {
        dropped.add(vec![("reason", r.labels().1.to_owned())], sum(r));
    }
    let quic = s.family(
        "spillway_quic_fallback",
        "QUIC short-header packets without a valid entry that their connection ID could not \
         route (QL-4): forwarded by the 4-tuple's choice instead, by reason.",
        Counter,
    );
    for (i, name) in QuicFallback::NAMES.iter().enumerate() {
        let n = (0..view.workers())
            .map(|w| view.counters(w).quic_fallback[i].get())
            .fold(0u64, u64::wrapping_add);
        quic.add(vec![("reason", (*name).to_owned())], n);
    }
}
