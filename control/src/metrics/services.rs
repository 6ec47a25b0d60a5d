//! Per service: traffic, eligible set and failover; per (service, client zone): the zonal
//! match and spill.

use super::scrape::{Labels, Scrape};
use crate::view::traffic;
use crate::view::DataplaneView;
use prometheus_client::metrics::MetricType::{Counter, Gauge};
use spillway_core::eligible::EligibleKind;
use spillway_core::snapshot::{Choice, ServiceView, Snapshot};

/// The `service` label.
fn svc(name: &str) -> Labels {
    vec![("service", name.to_owned())]
}

/// Packets, bytes and new connections, then the eligible set and failover families.
pub(super) fn services(s: &mut Scrape, snap: &Snapshot, view: &dyn DataplaneView) {
    let services: Vec<_> = snap.services().collect();
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
    eligible(s, &services);
}

fn eligible(s: &mut Scrape, services: &[&ServiceView]) {
    let f = s.family(
        "spillway_service_failover_active",
        "1 while the service's eligible set is its healthy failover backends (FO-2).",
        Gauge,
    );
    for sv in services {
        f.add(svc(&sv.name), u64::from(sv.eligible.kind == EligibleKind::HealthyFailover));
    }
    let f = s.family(
        "spillway_service_eligible_kind",
        "1 for the current kind of the service's eligible set (FO-7), 0 for the others.",
        Gauge,
    );
    for sv in services {
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
    for sv in services {
        f.add(svc(&sv.name), sv.default_choice.members.len() as u64);
    }
    let f = s.family(
        "spillway_service_failover_flushes",
        "Failover flips that flushed the service's connections (FO-9).",
        Counter,
    );
    for sv in services {
        f.add(svc(&sv.name), u64::from(sv.epoch));
    }
}

/// Picks a gauge's value from a zone's choice.
type ChoicePick = fn(&Choice) -> u64;

/// The families with one sample per (service, client zone), in the order they are exposed.
const PER_ZONE: [(&str, &str, ChoicePick); 3] = [
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

/// Every [`PER_ZONE`] family.
pub(super) fn zones(s: &mut Scrape, snap: &Snapshot) {
    for (name, help, pick) in PER_ZONE {
        let f = s.family(name, help, Gauge);
        for sv in snap.services() {
            for (z, ch) in sv.zone_choices.iter().enumerate() {
                let zone = snap.zone_names.get(z).cloned().unwrap_or_default();
                let mut l = svc(&sv.name);
                l.push(("zone", zone));
                f.add(l, pick(ch));
            }
        }
    }
}
