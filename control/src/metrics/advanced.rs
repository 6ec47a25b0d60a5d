//! Advanced load balancing, for services with `advanced:`: per group capacity, load, drain
//! and failover share, and per client zone demand and split (the unit is the service's: new
//! connections per second, or tracked connections).

use super::scrape::{Labels, Scrape};
use prometheus_client::metrics::MetricType::Gauge;
use spillway_core::snapshot::{AdvancedGroupView, AdvancedView, ServiceView, Snapshot};

/// Picks a gauge's value from a group.
type GroupPick = fn(&AdvancedGroupView) -> f64;

/// The families with one sample per (service, group) taken from the group alone, in the order
/// they are exposed.
const PER_GROUP: [(&str, &str, GroupPick); 6] = [
    (
        "spillway_group_capacity",
        "Group capacity now (per-endpoint capacity x healthy endpoints x scaler; 0 drained).",
        // An unbounded group has no capacity to show: -1 marks it.
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
    ("spillway_group_healthy_endpoints", "Healthy endpoints of the group.", |g| g.healthy as f64),
    ("spillway_group_preferred", "1 for a preferred group (AL-5).", |g| {
        f64::from(u8::from(g.preferred))
    }),
];

/// The services with `advanced:`, each with its advanced state.
type Advanced<'a> = [(&'a ServiceView, &'a AdvancedView)];

pub(super) fn advanced(s: &mut Scrape, snap: &Snapshot) {
    let advanced: Vec<_> =
        snap.services().filter_map(|sv| sv.advanced.as_ref().map(|a| (sv, &**a))).collect();
    groups(s, &advanced);
    client_zones(s, snap, &advanced);
}

/// Every [`PER_GROUP`] family, then the measured load (in the service's unit).
fn groups(s: &mut Scrape, advanced: &Advanced<'_>) {
    let labels = |sv: &ServiceView, g: &AdvancedGroupView| -> Labels {
        vec![("service", sv.name.to_string()), ("group", g.name.to_string())]
    };
    for (name, help, pick) in PER_GROUP {
        let f = s.family(name, help, Gauge);
        for (sv, a) in advanced {
            for g in &a.groups {
                f.add_f(labels(sv, g), pick(g));
            }
        }
    }
    let f = s.family(
        "spillway_group_measured_load",
        "Smoothed measured load of the group, in the service's unit.",
        Gauge,
    );
    for (sv, a) in advanced {
        for g in &a.groups {
            f.add_f(labels(sv, g), g.measured.get(a.unit));
        }
    }
}

/// Each client zone's demand and the share of it each group gets.
fn client_zones(s: &mut Scrape, snap: &Snapshot, advanced: &Advanced<'_>) {
    let zone_name = |z: Option<u16>| match z {
        Some(z) => snap.zone_names.get(usize::from(z)).cloned().unwrap_or_else(|| z.to_string()),
        None => "none".to_owned(),
    };
    let f = s.family(
        "spillway_client_zone_demand",
        "Smoothed offered load of a client zone, in the service's unit.",
        Gauge,
    );
    for (sv, a) in advanced {
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
    for (sv, a) in advanced {
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
