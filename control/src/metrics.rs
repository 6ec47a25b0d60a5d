//! `GET /metrics`: the Prometheus text format (0.0.4), written with `prometheus-client`.
//!
//! Every scrape reads the current state: the workers' counters through [`DataplaneView`]
//! (single-writer relaxed counters, summed over workers by service id and backend slot), the
//! published snapshot (eligible sets, failover, zonal spill) and the health checker's status.
//! Nothing is accumulated between scrapes, so there is no registry to keep in sync with
//! reloads: a scrape is a [`Collector`] over values gathered just before.
//!
//! It holds the controller's lock only to copy what it needs (the snapshot is an `Arc`);
//! reading the counters happens after the lock is released. Names follow the Prometheus
//! conventions: `spillway_` prefix, `_total` on counters (added by the encoder), base units
//! (`_bytes`, `_seconds`). `docs/operations.md` lists every metric.

use crate::controller::{Controller, Override};
use crate::fleet::{self, Phase};
use crate::health::TargetStatus;
use crate::view::DataplaneView;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use spillway_core::addr::Addr;
use spillway_core::counters::{Reason, TrafficCounters, WorkerCounters};
use spillway_core::eligible::EligibleKind;
use spillway_core::model::BackendKey;
use spillway_core::publish::PublishStats;
use spillway_core::snapshot::{BackendStatus, Choice, Snapshot};
use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

/// The `Content-Type` of [`render`]'s output.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// One sample's value.
#[derive(Clone, Copy, Debug)]
enum Value {
    Int(u64),
    /// A gauge with a fractional value.
    Float(f64),
    /// A histogram from a sum and a count only (one `+Inf` bucket).
    Histogram {
        sum: f64,
        count: u64,
    },
}

/// Labels of one sample.
type Labels = Vec<(&'static str, String)>;

/// One metric family with its samples.
#[derive(Debug)]
struct Family {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
    samples: Vec<(Labels, Value)>,
}

/// Everything one scrape writes.
#[derive(Debug, Default)]
struct Scrape(Vec<Family>);

impl Scrape {
    fn family(&mut self, name: &'static str, help: &'static str, kind: MetricType) -> &mut Family {
        self.0.push(Family { name, help, kind, samples: Vec::new() });
        let last = self.0.len() - 1;
        &mut self.0[last]
    }
}

impl Family {
    fn add(&mut self, labels: Labels, v: u64) -> &mut Family {
        self.samples.push((labels, Value::Int(v)));
        self
    }

    fn add_f(&mut self, labels: Labels, v: f64) -> &mut Family {
        self.samples.push((labels, Value::Float(v)));
        self
    }
}

fn encode_value(kind: MetricType, v: Value, mut m: MetricEncoder<'_>) -> fmt::Result {
    match (kind, v) {
        (MetricType::Counter, Value::Int(n)) => m.encode_counter::<NoLabelSet, u64, u64>(&n, None),
        (_, Value::Int(n)) => m.encode_gauge(&n),
        (_, Value::Float(x)) => m.encode_gauge(&x),
        (_, Value::Histogram { sum, count }) => {
            m.encode_histogram::<NoLabelSet>(sum, count, &[], None)
        }
    }
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        for f in &self.0 {
            if f.samples.is_empty() {
                continue;
            }
            let mut m = encoder.encode_descriptor(f.name, f.help, None, f.kind)?;
            for (labels, v) in &f.samples {
                encode_value(f.kind, *v, m.encode_family(labels)?)?;
            }
        }
        Ok(())
    }
}

/// A configured or draining backend as a scrape sees it.
struct SlotInfo {
    slot: u16,
    key: BackendKey,
    /// Drained by the operator.
    drained: bool,
    /// The probes' verdict.
    probe: Option<bool>,
    /// The operator's override.
    health_override: Option<Override>,
    /// Health verdict changes since the start.
    health_changes: u64,
}

/// What a scrape needs from the controller, copied under its lock.
struct Copied {
    snap: Arc<Snapshot>,
    slots: Vec<SlotInfo>,
    checks: Vec<TargetStatus>,
    published: PublishStats,
    reloads: (u64, u64),
    fleet: Option<FleetCopy>,
}

/// The instance's fleet state, copied under the lock.
#[derive(Debug)]
struct FleetCopy {
    phase: Phase,
    vips: BTreeSet<Addr>,
    announced: BTreeSet<Addr>,
    sync_errors: u64,
    bird_up: Option<bool>,
}

/// Picks a gauge's value from a zone's choice.
type ChoicePick = fn(&Choice) -> u64;

fn copy(controller: &Mutex<Controller>) -> Copied {
    let c = controller.lock().unwrap_or_else(PoisonError::into_inner);
    let snap = c.snapshot();
    let state = c.state();
    let slots = snap
        .backends
        .iter()
        .enumerate()
        .filter(|(_, b)| b.status != BackendStatus::Free)
        .filter_map(|(slot, _)| {
            let slot = u16::try_from(slot).ok()?;
            let key = state.key_of(slot)?.clone();
            Some(SlotInfo {
                slot,
                drained: state.is_drained(&key),
                probe: c.probe_verdict(&key),
                health_override: c.override_of(&key),
                health_changes: c.health_changes(&key).0,
                key,
            })
        })
        .collect();
    Copied {
        slots,
        checks: c.health_status(),
        published: c.publish_stats(),
        reloads: c.reload_counts(),
        fleet: c.config().announce.as_ref().map(|_| {
            let i = c.instance();
            FleetCopy {
                phase: i.phase(),
                vips: fleet::announceable(c.config()),
                announced: i.announced().clone(),
                sync_errors: i.sync_counts().0,
                bird_up: i.bird().map(|b| b.up),
            }
        }),
        snap,
    }
}

/// `addr` or `addr:port`, the `backend` label.
fn backend_label(k: &BackendKey) -> String {
    k.endpoint.to_string()
}

/// Sum one traffic counter set over the workers.
fn traffic(
    view: &dyn DataplaneView,
    pick: impl Fn(&WorkerCounters) -> Option<&TrafficCounters>,
) -> [u64; 3] {
    let mut t = [0u64; 3];
    for w in 0..view.workers() {
        if let Some(c) = pick(view.counters(w)) {
            t[0] = t[0].wrapping_add(c.packets.get());
            t[1] = t[1].wrapping_add(c.bytes.get());
            t[2] = t[2].wrapping_add(c.new_connections.get());
        }
    }
    t
}

/// The whole exposition, in the Prometheus text format.
pub fn render(
    controller: &Mutex<Controller>,
    view: &dyn DataplaneView,
) -> Result<String, fmt::Error> {
    let copied = copy(controller);
    let scrape = collect(&copied, view);
    let mut registry = Registry::default();
    registry.register_collector(Box::new(scrape));
    let mut out = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)?;
    Ok(out)
}

fn collect(c: &Copied, view: &dyn DataplaneView) -> Scrape {
    use MetricType::{Counter, Gauge, Histogram};
    let snap = &c.snap;
    let mut s = Scrape::default();
    let workers = view.workers();
    let w = |i: usize| vec![("worker", i.to_string())];

    s.family(
        "spillway_snapshot_generation",
        "Generation of the published decision snapshot.",
        Gauge,
    )
    .add(Vec::new(), snap.generation);
    s.family("spillway_workers", "Data-plane workers.", Gauge).add(Vec::new(), workers as u64);
    s.family(
        "spillway_snapshots_published",
        "Decision snapshots published after the first (reloads, health and drain changes).",
        Counter,
    )
    .add(Vec::new(), c.published.published);
    s.family(
        "spillway_reloads",
        "Configuration reloads (SIGHUP or the admin API): applied, or rejected with the \
         running configuration kept.",
        Counter,
    )
    .add(vec![("result", "applied".into())], c.reloads.0)
    .add(vec![("result", "rejected".into())], c.reloads.1);
    s.family(
        "spillway_snapshots_reclaimed",
        "Retired snapshots freed once no worker held them any more.",
        Counter,
    )
    .add(Vec::new(), c.published.reclaimed);
    s.family(
        "spillway_snapshots_retained",
        "Retired snapshots a worker still holds (freed at its next burst or sweep).",
        Gauge,
    )
    .add(Vec::new(), c.published.retained);

    // Per worker.
    type Pick = fn(&WorkerCounters) -> u64;
    let per_worker: [(&'static str, &'static str, MetricType, Pick); 15] = [
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
        ("spillway_worker_rx_bytes", "Bytes received by the worker.", Counter, |c| {
            c.rx_bytes.get()
        }),
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
    ];
    for (name, help, kind, pick) in per_worker {
        let f = s.family(name, help, kind);
        for i in 0..workers {
            f.add(w(i), pick(view.counters(i)));
        }
    }

    // The ports' driver counters: what happened before a worker saw a frame.
    let ports = view.port_counters();
    if !ports.is_empty() {
        let f = s.family(
            "spillway_port_packets",
            "Frames the port's driver received (rx) and transmitted (tx).",
            Counter,
        );
        for (name, c) in &ports {
            f.add(vec![("port", (*name).to_owned()), ("direction", "rx".into())], c.ipackets.get())
                .add(
                    vec![("port", (*name).to_owned()), ("direction", "tx".into())],
                    c.opackets.get(),
                );
        }
        let f = s.family(
            "spillway_port_dropped",
            "Frames the port's driver dropped before a worker saw them or after: missed (no free \
             RX descriptor: the worker was behind), rx_errors, rx_nombuf (the mbuf pool was \
             empty), tx_errors. Drivers without statistics (net_memif in DPDK 22.11) report 0.",
            Counter,
        );
        for (name, c) in &ports {
            let l = |why: &str| vec![("port", (*name).to_owned()), ("reason", why.to_owned())];
            f.add(l("missed"), c.imissed.get())
                .add(l("rx_errors"), c.ierrors.get())
                .add(l("rx_nombuf"), c.rx_nombuf.get())
                .add(l("tx_errors"), c.oerrors.get());
        }
    }

    // The exception path's thread.
    if let Some(k) = view.kernel_counters() {
        s.family(
            "spillway_kernel_path_frames",
            "Frames through the exception path: to_kernel (written to the kernel interface), \
             from_kernel (sent by the kernel, queued for the data port).",
            Counter,
        )
        .add(vec![("direction", "to_kernel".into())], k.to_kernel.get())
        .add(vec![("direction", "from_kernel".into())], k.from_kernel.get());
        s.family(
            "spillway_kernel_path_dropped",
            "Frames the exception path dropped: to_kernel (the kernel interface refused them: \
             the kernel is not reading), from_kernel (the queue to the data port was full). \
             The workers' own drops when its queue is full are reason kernel_busy.",
            Counter,
        )
        .add(vec![("direction", "to_kernel".into())], k.to_kernel_dropped.get())
        .add(vec![("direction", "from_kernel".into())], k.from_kernel_dropped.get());
    }

    // The fleet: the instance's phase, its announced VIPs, the handoff to the routing daemon.
    if let Some(f) = &c.fleet {
        let phase = s.family(
            "spillway_instance_phase",
            "1 for the instance's phase: starting (not ready), serving (announcing), drained \
             (by the operator), stopping (SIGTERM).",
            Gauge,
        );
        for p in Phase::ALL {
            phase.add(vec![("phase", p.as_str().into())], u64::from(f.phase == p));
        }
        let vips = s.family(
            "spillway_vip_announced",
            "1 when the VIP's route is in the announce table (BIRD exports it), 0 when it is \
             withdrawn; every VIP of a service that may announce.",
            Gauge,
        );
        for vip in &f.vips {
            vips.add(vec![("vip", vip.to_string())], u64::from(f.announced.contains(vip)));
        }
        s.family(
            "spillway_announce_sync_errors",
            "Failed updates of the announce route table (netlink); retried every 2 s.",
            Counter,
        )
        .add(Vec::new(), f.sync_errors);
        if let Some(up) = f.bird_up {
            s.family(
                "spillway_bird_up",
                "1 when BIRD answers on announce.bird_socket, 0 when it does not (the VIPs then \
                 reach no router).",
                Gauge,
            )
            .add(Vec::new(), u64::from(up));
        }
    }
    let fp = s.family(
        "spillway_service_table_info",
        "1, labelled with the fingerprint of the service's consistent-hash tables: equal on \
         every instance with the same configuration, hash_seed and health verdicts.",
        Gauge,
    );
    // Computed here, off the controller's lock (the snapshot is shared).
    for svc in snap.services() {
        let fingerprint = format!("{:#018x}", snap.table_fingerprint(svc));
        fp.add(vec![("service", svc.name.to_string()), ("fingerprint", fingerprint)], 1);
    }

    // The neighbour resolver: what it did with the answers the workers heard.
    if let Some(n) = view.neighbour_counters() {
        let values = n.values();
        let f = s.family(
            "spillway_neighbour_answers",
            "ARP replies and neighbour advertisements heard, by what the resolver did: learned, \
             confirmed, changed (a next hop moved), ignored_unsolicited (not asked for), \
             ignored_conflict (another MAC claims a known next hop), rate_limited.",
            Counter,
        );
        for (outcome, v) in values.iter().filter(|(k, _)| *k != "publishes") {
            f.add(vec![("outcome", (*outcome).to_owned())], *v);
        }
        s.family(
            "spillway_neighbour_unresolved_next_hops",
            "Configured next hops (backends on-link, gateways) with no MAC right now: their \
             backends' packets are dropped as neighbour_unresolved.",
            Gauge,
        )
        .add(Vec::new(), n.unresolved.get());
        s.family(
            "spillway_neighbour_table_publishes",
            "Neighbour tables published to the workers.",
            Counter,
        )
        .add(Vec::new(), n.publishes.get());
    }

    // Per reason, summed over the workers.
    let sum = |r: Reason| {
        (0..workers).map(|i| view.counters(i).reason(r).get()).fold(0u64, u64::wrapping_add)
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

    // Per service.
    let services: Vec<_> = snap.services().collect();
    let svc = |name: &str| vec![("service", name.to_owned())];
    let svc_traffic: Vec<[u64; 3]> =
        services.iter().map(|sv| traffic(view, |c| c.services.get(usize::from(sv.id)))).collect();
    for (i, (name, help)) in [
        ("spillway_service_packets", "Packets sent on to the service's backends."),
        (
            "spillway_service_bytes",
            "Bytes sent on to the service's backends (before encapsulation).",
        ),
        (
            "spillway_service_new_connections",
            "Connection entries made for the service (new and replacements).",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let f = s.family(name, help, Counter);
        for (sv, t) in services.iter().zip(&svc_traffic) {
            f.add(svc(&sv.name), t[i]);
        }
    }
    let f = s.family(
        "spillway_service_failover_active",
        "1 while the service's eligible set is its healthy failover backends (FO-2).",
        Gauge,
    );
    for sv in &services {
        f.add(svc(&sv.name), u64::from(sv.eligible.kind == EligibleKind::HealthyFailover));
    }
    let f = s.family(
        "spillway_service_eligible_kind",
        "1 for the current kind of the service's eligible set (FO-7), 0 for the others.",
        Gauge,
    );
    for sv in &services {
        for k in [
            EligibleKind::HealthyPrimary,
            EligibleKind::HealthyFailover,
            EligibleKind::UnhealthyPrimary,
            EligibleKind::Empty,
        ] {
            let mut l = svc(&sv.name);
            l.push(("kind", k.as_str().to_owned()));
            f.add(l, u64::from(sv.eligible.kind == k));
        }
    }
    let f = s.family(
        "spillway_service_eligible_backends",
        "Size of the eligible set of clients without a zonal match.",
        Gauge,
    );
    for sv in &services {
        f.add(svc(&sv.name), sv.default_choice.members.len() as u64);
    }
    let f = s.family(
        "spillway_service_failover_flushes",
        "Failover flips that flushed the service's connections (FO-9).",
        Counter,
    );
    for sv in &services {
        f.add(svc(&sv.name), u64::from(sv.epoch));
    }
    // Advanced load balancing (SPEC section 7): per group and per client zone.
    advanced(&mut s, snap);

    // Per (service, zone).
    let zone_families: [(&'static str, &'static str, ChoicePick); 3] = [
        (
            "spillway_service_zone_eligible_backends",
            "Size of the final eligible set of the zone's clients.",
            |ch| ch.members.len() as u64,
        ),
        (
            "spillway_service_zonal_match",
            "1 when the zone's clients have a zonal match (ZA-2).",
            |ch| u64::from(ch.zonal_match),
        ),
        (
            "spillway_service_zonal_spill_active",
            "1 when the zone's clients have a zonal match but spill to the whole eligible set (ZA-4, ZA-5).",
            |ch| u64::from(ch.zonal_match && ch.spilled),
        ),
    ];
    for (name, help, pick) in zone_families {
        let f = s.family(name, help, Gauge);
        for sv in &services {
            for (z, ch) in sv.zone_choices.iter().enumerate() {
                let zone = snap.zone_names.get(z).cloned().unwrap_or_default();
                let mut l = svc(&sv.name);
                l.push(("zone", zone));
                f.add(l, pick(ch));
            }
        }
    }

    // Per backend.
    let bl = |k: &BackendKey| vec![("service", k.service.clone()), ("backend", backend_label(k))];
    let b_traffic: Vec<[u64; 3]> =
        c.slots.iter().map(|b| traffic(view, |w| w.backends.get(usize::from(b.slot)))).collect();
    for (i, (name, help)) in [
        ("spillway_backend_packets", "Packets sent on to the backend."),
        ("spillway_backend_bytes", "Bytes sent on to the backend (before encapsulation)."),
        (
            "spillway_backend_new_connections",
            "Connection entries made for the backend (new and replacements).",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let f = s.family(name, help, Counter);
        for (b, t) in c.slots.iter().zip(&b_traffic) {
            f.add(bl(&b.key), t[i]);
        }
    }
    let f = s.family(
        "spillway_backend_healthy",
        "1 when the backend is healthy as the policy sees it (probes and overrides, HC-2).",
        Gauge,
    );
    for b in &c.slots {
        let healthy = snap.backend(b.slot).is_some_and(|v| v.healthy);
        f.add(bl(&b.key), u64::from(healthy));
    }
    let f = s.family("spillway_backend_drained", "1 when the operator drained the backend.", Gauge);
    for b in &c.slots {
        f.add(bl(&b.key), u64::from(b.drained));
    }
    let f = s.family(
        "spillway_backend_draining",
        "1 while a removed backend's connections are draining (CD-3).",
        Gauge,
    );
    for b in &c.slots {
        let draining = snap
            .backend(b.slot)
            .is_some_and(|v| matches!(v.status, BackendStatus::Draining { .. }));
        f.add(bl(&b.key), u64::from(draining));
    }
    let f = s.family(
        "spillway_backend_health_override",
        "1 for the backend's current operator override (healthy, unhealthy or auto), 0 for the others.",
        Gauge,
    );
    for b in &c.slots {
        for (name, v) in [
            ("healthy", Some(Override::Healthy)),
            ("unhealthy", Some(Override::Unhealthy)),
            ("auto", None),
        ] {
            let mut l = bl(&b.key);
            l.push(("override", name.to_owned()));
            f.add(l, u64::from(b.health_override == v));
        }
    }
    let f = s.family(
        "spillway_backend_probe_healthy",
        "The health checks' verdict of the backend (1 healthy, 0 unhealthy), without overrides.",
        Gauge,
    );
    for b in &c.slots {
        if let Some(p) = b.probe {
            f.add(bl(&b.key), u64::from(p));
        }
    }
    let f = s.family(
        "spillway_backend_health_changes",
        "Health-check verdict changes of the backend (a flapping backend: only the first few a \
         minute are logged).",
        Counter,
    );
    for b in &c.slots {
        f.add(bl(&b.key), b.health_changes);
    }

    // Health checks.
    let hl = |t: &TargetStatus| {
        let mut l = bl(&t.key);
        l.push(("check", t.check.clone()));
        l
    };
    let f = s.family("spillway_health_check_probes", "Health-check probes, by result.", Counter);
    for t in &c.checks {
        for (result, n) in t.probes.iter() {
            let mut l = hl(t);
            l.push(("result", result.to_owned()));
            f.add(l, n);
        }
    }
    let f = s.family(
        "spillway_health_check_duration_seconds",
        "Duration of health-check probes (timeouts count as the time waited).",
        Histogram,
    );
    for t in &c.checks {
        f.samples.push((
            hl(t),
            Value::Histogram { sum: t.latency_sum.as_secs_f64(), count: t.latency_count },
        ));
    }
    s
}

/// Per-group capacity, load, drain and failover share, and per-client-zone demand and split,
/// for services with `advanced:` (the unit is the service's: new connections per second, or
/// tracked connections).
fn advanced(s: &mut Scrape, snap: &Snapshot) {
    use MetricType::Gauge;
    let zone_name = |z: Option<u16>| match z {
        Some(z) => snap.zone_names.get(usize::from(z)).cloned().unwrap_or_else(|| z.to_string()),
        None => "none".to_owned(),
    };
    let advanced: Vec<_> =
        snap.services().filter_map(|sv| sv.advanced.as_ref().map(|a| (sv, a))).collect();
    type GroupPick = fn(&spillway_core::snapshot::AdvancedGroupView) -> f64;
    let per_group: [(&'static str, &'static str, GroupPick); 6] = [
        (
            "spillway_group_capacity",
            "Group capacity now (per-endpoint capacity x healthy endpoints x scaler; 0 drained).",
            |g| if g.capacity.is_finite() { g.capacity } else { -1.0 },
        ),
        (
            "spillway_group_expected_load",
            "Load the algorithm assigns the group (new connections/s or connections).",
            |g| g.expected_load,
        ),
        (
            "spillway_group_auto_drained",
            "1 while AL-6 auto capacity drain holds the group drained.",
            |g| f64::from(u8::from(g.auto_drained)),
        ),
        (
            "spillway_group_retained_share",
            "AL-7: share of its traffic the group keeps (h/T, 1 at or above the threshold).",
            |g| g.retained,
        ),
        ("spillway_group_healthy_endpoints", "Healthy endpoints of the group.", |g| {
            g.healthy as f64
        }),
        ("spillway_group_preferred", "1 for a preferred group (AL-5).", |g| {
            f64::from(u8::from(g.preferred))
        }),
    ];
    for (name, help, pick) in per_group {
        let f = s.family(name, help, Gauge);
        for (sv, a) in &advanced {
            for g in &a.groups {
                f.add_f(
                    vec![("service", sv.name.to_string()), ("group", g.name.to_string())],
                    pick(g),
                );
            }
        }
    }
    let f = s.family(
        "spillway_group_measured_load",
        "Smoothed measured load of the group, in the service's unit.",
        Gauge,
    );
    for (sv, a) in &advanced {
        for g in &a.groups {
            let labels = vec![("service", sv.name.to_string()), ("group", g.name.to_string())];
            f.add_f(labels, g.measured.get(a.unit));
        }
    }
    let f = s.family(
        "spillway_client_zone_demand",
        "Smoothed offered load of a client zone, in the service's unit.",
        Gauge,
    );
    for (sv, a) in &advanced {
        for c in &a.clients {
            let labels = vec![("service", sv.name.to_string()), ("client_zone", zone_name(c.zone))];
            f.add_f(labels, c.demand);
        }
    }
    let f = s.family(
        "spillway_client_zone_group_share",
        "Share of a client zone's new connections each group gets (the published weights).",
        Gauge,
    );
    for (sv, a) in &advanced {
        for c in &a.clients {
            for (g, w) in a.groups.iter().zip(&c.weights) {
                let labels = vec![
                    ("service", sv.name.to_string()),
                    ("client_zone", zone_name(c.zone)),
                    ("group", g.name.to_string()),
                ];
                f.add_f(labels, *w);
            }
        }
    }
}
