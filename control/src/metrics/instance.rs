//! The instance in its fleet: its phase, its announced VIPs, the handoff to the routing
//! daemon, and the fingerprints that tell whether instances hash flows alike.

use super::copied::FleetCopy;
use super::scrape::Scrape;
use crate::instance::Phase;
use prometheus_client::metrics::MetricType::{Counter, Gauge};
use spillway_core::snapshot::Snapshot;

/// Phase, VIPs and the announce table's health; only with `announce:` configured.
pub(super) fn fleet(s: &mut Scrape, f: &FleetCopy) {
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
        "spillway_announce_route_errors",
        "Failed updates of the announce route table (netlink); retried every 2 s.",
        Counter,
    )
    .add(Vec::new(), f.route_errors);
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

/// One sample per service labelled with its tables' fingerprint, to compare instances.
pub(super) fn table_info(s: &mut Scrape, snap: &Snapshot) {
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
}
