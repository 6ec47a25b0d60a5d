//! Per-worker counters: written by one worker, read by the control thread.
//!
//! Every counter is a [`Counter`]: an `AtomicU64` that only its owning worker writes, with a
//! relaxed load and store (never a locked read-modify-write), so the hot path pays a plain
//! add and the control thread can read at any time. Every reason the data path can drop or
//! forward a packet has its own counter ([`Reason`]), so the metrics explain every packet.
//! Per-service and per-backend counters are indexed by the snapshot's stable service ids and
//! backend slots.

use crate::decide::{DropReason, ForwardReason};
use crate::wire::Malformed;
use std::sync::atomic::{AtomicU64, Ordering};

/// A single-writer counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Add `n`. Only the owning worker may call this (single writer).
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    /// Subtract `n` (for up/down gauges; the owner never takes more than it added).
    #[inline]
    pub fn sub(&self, n: u64) {
        self.0.store(self.0.load(Ordering::Relaxed).wrapping_sub(n), Ordering::Relaxed);
    }

    /// Add one.
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }

    /// Overwrite (for gauges such as the conntrack entry count).
    #[inline]
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }

    /// Read.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Why the data path dropped a packet (beyond the decision core's own reasons).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PathDrop {
    /// The next hop's MAC is not resolved yet (a resolution was requested).
    NeighbourUnresolved,
    /// No room in the mbuf for the encapsulation headers.
    NoHeadroom,
    /// Too big for the egress MTU once encapsulated (when DF was set, an ICMP
    /// fragmentation-needed / packet-too-big was sent back).
    TooBig,
    /// An ICMP error for a flow we cannot route (no rule, no backend).
    IcmpUnroutable,
    /// Not IP, ARP or neighbour discovery for us (e.g. LLDP, foreign ARP).
    NotForUs,
    /// The driver refused it on TX (queue full); counted after the forward decision.
    TxFull,
    /// The driver handed over a buffer that is not exclusively ours (shared, indirect or
    /// external): rewriting it would change another owner's packet.
    SharedBuffer,
    /// For the kernel (the exception path), but the queue to it was full: the kernel side is
    /// slower than what arrives for it (a flood to the node's address). Never waited for.
    KernelBusy,
}

impl PathDrop {
    /// Every value.
    pub const ALL: [PathDrop; 8] = [
        PathDrop::NeighbourUnresolved,
        PathDrop::NoHeadroom,
        PathDrop::TooBig,
        PathDrop::IcmpUnroutable,
        PathDrop::NotForUs,
        PathDrop::TxFull,
        PathDrop::SharedBuffer,
        PathDrop::KernelBusy,
    ];

    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            PathDrop::NeighbourUnresolved => "neighbour_unresolved",
            PathDrop::NoHeadroom => "no_headroom",
            PathDrop::TooBig => "too_big",
            PathDrop::IcmpUnroutable => "icmp_unroutable",
            PathDrop::NotForUs => "not_for_us",
            PathDrop::TxFull => "tx_full",
            PathDrop::SharedBuffer => "shared_buffer",
            PathDrop::KernelBusy => "kernel_busy",
        }
    }
}

/// Every reason a packet can end, one counter each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Forwarded to a backend.
    Forward(ForwardReason),
    /// Dropped by the decision core.
    Decision(DropReason),
    /// Dropped as malformed (NX-2).
    Malformed(Malformed),
    /// Dropped by the data path.
    Path(PathDrop),
}

const N_FORWARD: usize = ForwardReason::ALL.len();
const N_DECISION: usize = DropReason::ALL.len();
const N_MALFORMED: usize = Malformed::ALL.len();
const N_PATH: usize = PathDrop::ALL.len();
/// Number of distinct [`Reason`]s.
pub const N_REASONS: usize = N_FORWARD + N_DECISION + N_MALFORMED + N_PATH;

impl Reason {
    /// Dense index in `0..N_REASONS`.
    #[inline]
    pub fn index(self) -> usize {
        match self {
            Reason::Forward(r) => r as usize,
            Reason::Decision(r) => N_FORWARD + r as usize,
            Reason::Malformed(r) => N_FORWARD + N_DECISION + r as usize,
            Reason::Path(r) => N_FORWARD + N_DECISION + N_MALFORMED + r as usize,
        }
    }

    /// Every reason, in index order.
    pub fn all() -> impl Iterator<Item = Reason> {
        ForwardReason::ALL
            .into_iter()
            .map(Reason::Forward)
            .chain(DropReason::ALL.into_iter().map(Reason::Decision))
            .chain(Malformed::ALL.into_iter().map(Reason::Malformed))
            .chain(PathDrop::ALL.into_iter().map(Reason::Path))
    }

    /// (kind, label): kind is `forward` or `drop`, label the reason's snake_case name.
    pub fn labels(self) -> (&'static str, &'static str) {
        match self {
            Reason::Forward(r) => ("forward", r.as_str()),
            Reason::Decision(r) => ("drop", r.as_str()),
            Reason::Malformed(r) => ("drop", r.as_str()),
            Reason::Path(r) => ("drop", r.as_str()),
        }
    }
}

/// Packets, bytes and new connections of one service or backend.
#[derive(Debug, Default)]
pub struct TrafficCounters {
    /// Packets sent on.
    pub packets: Counter,
    /// Bytes sent on (before encapsulation).
    pub bytes: Counter,
    /// New connection entries made (new connections and replacements).
    pub new_connections: Counter,
    /// Gauge: this worker's connection-table entries that point at it (backends only; entries
    /// are counted until replaced, evicted or swept).
    pub tracked: Counter,
}

/// Highest number of service ids a worker counts (ids are never reused within a process).
pub const MAX_SERVICES: usize = 4096;
/// Client zones counted per service for advanced load balancing (zone ids above are not).
pub const MAX_ZONES: usize = 64;
/// Slots per service in [`WorkerCounters::zone_new_connections`]: one per zone, then one for
/// clients without a zone.
pub const ZONE_SLOTS: usize = MAX_ZONES + 1;
/// Number of backend slots a worker counts (slots are `u16`).
pub const MAX_BACKENDS: usize = 1 << 16;

/// Everything one worker counts.
#[derive(Debug)]
#[repr(align(64))]
pub struct WorkerCounters {
    /// Packets received.
    pub rx_packets: Counter,
    /// Bytes received.
    pub rx_bytes: Counter,
    /// Packets handed to the driver.
    pub tx_packets: Counter,
    /// Per-reason packet counts, indexed by [`Reason::index`].
    pub reasons: [Counter; N_REASONS],
    /// ARP replies and neighbour advertisements sent for our addresses and VIPs.
    pub neighbour_replies: Counter,
    /// Echo replies sent for our addresses and VIPs.
    pub echo_replies: Counter,
    /// ARP replies and neighbour advertisements received and handed to the resolver (used,
    /// neither forwarded nor dropped). With the forward and drop reasons (`tx_full` aside: it
    /// counts forwarded packets the driver then refused) and the replies sent, every received
    /// packet is counted exactly once.
    pub neighbour_answers_heard: Counter,
    /// ICMP errors for VIP flows sent on to the flow's backend.
    pub icmp_errors_forwarded: Counter,
    /// Frames for the node handed to the exception path (the kernel interface): BGP, SSH,
    /// replies to the health checks, ARP replies and neighbour advertisements (those are
    /// heard by the resolver too). Neither forwarded nor dropped: counted once, here.
    pub kernel_frames: Counter,
    /// Frames that waited for their next hop's MAC and were then sent (the first packets to a
    /// next hop not yet resolved); those that found no room or whose next hop stayed silent
    /// are the drop reason `neighbour_unresolved`.
    pub neighbour_waited: Counter,
    /// Conntrack gauge: entries in this worker's shard.
    pub ct_entries: Counter,
    /// Conntrack: inserts (new entries, not replacements in place).
    pub ct_inserts: Counter,
    /// Conntrack: live entries evicted because their set was full.
    pub ct_evictions: Counter,
    /// Conntrack: capacity of the shard.
    pub ct_capacity: Counter,
    /// Copies of peers' entries (fleet sync) in the connection table now.
    pub ct_copies: Counter,
    /// Conntrack: new connections the flood guard forwarded without an entry.
    pub ct_bypassed: Counter,
    /// QUIC short-header packets their connection ID could not route (QL-4), indexed by
    /// [`crate::decide::QuicFallback::index`].
    pub quic_fallback: [Counter; crate::decide::QuicFallback::NAMES.len()],
    /// Heartbeat: goes up each time the worker passes its TX drain deadline (every
    /// `tx_drain_us`), traffic or not; the systemd watchdog pings only while every worker's
    /// moves.
    pub heartbeat: Counter,
    /// The generation of the snapshot the worker decided its last burst with (also refreshed
    /// when it sweeps its table, so an idle worker reports it too): a reload is in force once
    /// every worker's is at least the reload's generation.
    pub snapshot_generation: Counter,
    /// Per service id.
    pub services: Box<[TrafficCounters]>,
    /// Per backend slot.
    pub backends: Box<[TrafficCounters]>,
    /// New connections per (service id, client zone): index `service * ZONE_SLOTS + zone`,
    /// zone `MAX_ZONES` for clients without a (compatible) zone. The offered load per client
    /// zone that advanced load balancing (SPEC section 7) steers by.
    pub zone_new_connections: Box<[Counter]>,
    /// Fleet sync (FS), as the worker sees it.
    pub sync: SyncCounters,
}

/// What a worker counts of fleet sync (FS): its scans for entries at risk, its bulk answers,
/// and the peers' entries it stores or drops.
#[derive(Debug, Default)]
pub struct SyncCounters {
    /// Entries at risk handed to the sync thread (FS-1), for the peers or a bulk answer.
    pub exported: Counter,
    /// Removals handed to the sync thread (FS-8): shared entries that left the table,
    /// changed, or stopped being at risk.
    pub removes: Counter,
    /// Items not handed over: the worker's sync queue was full (the scan makes room first, so
    /// this stays 0; departures come in bursts of at most a burst's overwrites).
    pub queue_full: Counter,
    /// Peers' entries by what became of them, indexed like [`crate::sync::Installed::ALL`].
    pub installed: [Counter; crate::sync::Installed::ALL.len()],
    /// Peers' removals by what became of them, indexed like [`crate::sync::Removed::ALL`].
    pub removed: [Counter; crate::sync::Removed::ALL.len()],
    /// Own passes (a whole table's worth of buckets) finished.
    pub scans: Counter,
    /// The snapshot generation the last finished own pass ended under.
    pub scanned_generation: Counter,
    /// Bulk answers finished (their ends handed over).
    pub bulk_answers: Counter,
    /// Bulk answers refused: as many under way as a worker runs at once.
    pub bulk_refused: Counter,
}

impl WorkerCounters {
    /// Zeroed counters.
    pub fn new() -> WorkerCounters {
        WorkerCounters {
            rx_packets: Counter::default(),
            rx_bytes: Counter::default(),
            tx_packets: Counter::default(),
            reasons: std::array::from_fn(|_| Counter::default()),
            neighbour_replies: Counter::default(),
            echo_replies: Counter::default(),
            neighbour_answers_heard: Counter::default(),
            icmp_errors_forwarded: Counter::default(),
            kernel_frames: Counter::default(),
            neighbour_waited: Counter::default(),
            ct_entries: Counter::default(),
            ct_inserts: Counter::default(),
            ct_evictions: Counter::default(),
            ct_capacity: Counter::default(),
            ct_copies: Counter::default(),
            ct_bypassed: Counter::default(),
            quic_fallback: Default::default(),
            heartbeat: Counter::default(),
            snapshot_generation: Counter::default(),
            services: (0..MAX_SERVICES).map(|_| TrafficCounters::default()).collect(),
            backends: (0..MAX_BACKENDS).map(|_| TrafficCounters::default()).collect(),
            zone_new_connections: (0..MAX_SERVICES * ZONE_SLOTS)
                .map(|_| Counter::default())
                .collect(),
            sync: SyncCounters::default(),
        }
    }

    /// The new-connection counter of (service, client zone).
    #[inline]
    pub fn zone_new(&self, service: u16, zone: Option<u16>) -> &Counter {
        let z = zone.map_or(MAX_ZONES, |z| usize::from(z).min(MAX_ZONES));
        &self.zone_new_connections[(usize::from(service) % MAX_SERVICES) * ZONE_SLOTS + z]
    }

    /// The counter of one reason.
    #[inline]
    pub fn reason(&self, r: Reason) -> &Counter {
        &self.reasons[r.index()]
    }
}

impl Default for WorkerCounters {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_indexes_are_dense_and_distinct() {
        let idx: Vec<usize> = Reason::all().map(Reason::index).collect();
        assert_eq!(idx, (0..N_REASONS).collect::<Vec<_>>());
        let labels: std::collections::BTreeSet<_> = Reason::all().map(|r| r.labels()).collect();
        assert_eq!(labels.len(), N_REASONS, "labels must be unique");
    }

    #[test]
    fn single_writer_counter_adds() {
        let c = WorkerCounters::new();
        c.reason(Reason::Path(PathDrop::TxFull)).add(3);
        c.reason(Reason::Path(PathDrop::TxFull)).inc();
        assert_eq!(c.reason(Reason::Path(PathDrop::TxFull)).get(), 4);
        assert_eq!(c.reason(Reason::Path(PathDrop::NotForUs)).get(), 0);
    }
}

/// One port's driver counters (`rte_eth_stats`), copied by the control thread every second:
/// what happened to frames before a worker saw them or after it handed them over.
#[derive(Debug, Default)]
pub struct PortCounters {
    /// Frames received by the port.
    pub ipackets: Counter,
    /// Frames transmitted.
    pub opackets: Counter,
    /// Frames the port dropped because no RX descriptor was free (the worker was behind).
    pub imissed: Counter,
    /// Erroneous frames received.
    pub ierrors: Counter,
    /// Failed transmissions.
    pub oerrors: Counter,
    /// RX buffer allocation failures (the mbuf pool was empty).
    pub rx_nombuf: Counter,
}

/// The exception path's thread: frames between the workers and the kernel interface (written by
/// that thread alone, read by the metrics). With the workers' `kernel_frames` and
/// `kernel_busy` drops, every frame for the kernel is counted once on each side.
#[derive(Debug, Default)]
pub struct KernelPathCounters {
    /// Frames written to the kernel interface.
    pub to_kernel: Counter,
    /// Frames for the kernel that its interface's driver refused (the kernel is not reading).
    pub to_kernel_dropped: Counter,
    /// Frames the kernel sent out of its interface, queued for the data port.
    pub from_kernel: Counter,
    /// Frames from the kernel dropped because the queue to the data port was full.
    pub from_kernel_dropped: Counter,
}

/// What the neighbour resolver did with the answers workers heard (written by the control
/// thread's resolver alone, read by the metrics). Every answer is counted once.
#[derive(Debug, Default)]
pub struct NeighbourCounters {
    /// A next hop resolved for the first time, by an answer to Spillway's own request.
    pub learned: Counter,
    /// An answer that repeats the known MAC (it stays fresh).
    pub confirmed: Counter,
    /// A known next hop's MAC changed: a fresh resolution got the new MAC and the old one
    /// did not answer it (the host moved).
    pub changed: Counter,
    /// An answer for an address Spillway did not ask about (not a configured next hop, or no
    /// request outstanding): ignored.
    pub ignored_unsolicited: Counter,
    /// A different MAC for a known next hop that a fresh resolution did not confirm (the known
    /// MAC answered): ignored. Someone else claims the address.
    pub ignored_conflict: Counter,
    /// A change that came sooner than the minimum interval between two changes of one next
    /// hop: ignored.
    pub rate_limited: Counter,
    /// New tables published to the workers.
    pub publishes: Counter,
    /// Gauge: configured next hops (backends on-link, gateways) with no MAC right now.
    pub unresolved: Counter,
}

impl NeighbourCounters {
    /// `(name, value)` of every counter, in declaration order (metric labels).
    pub fn values(&self) -> [(&'static str, u64); 7] {
        [
            ("learned", self.learned.get()),
            ("confirmed", self.confirmed.get()),
            ("changed", self.changed.get()),
            ("ignored_unsolicited", self.ignored_unsolicited.get()),
            ("ignored_conflict", self.ignored_conflict.get()),
            ("rate_limited", self.rate_limited.get()),
            ("publishes", self.publishes.get()),
        ]
    }
}
