//! Per backend (configured or draining): traffic, health as the policy sees it, drain state,
//! the operator's override, the probes' verdict and its changes.

use super::copied::{Copied, SlotInfo};
use super::scrape::{Labels, Scrape};
use crate::controller::Override;
use crate::view::traffic;
use crate::view::DataplaneView;
use prometheus_client::metrics::MetricType::{Counter, Gauge};
use spillway_core::model::BackendKey;
use spillway_core::snapshot::{BackendStatus, Snapshot};

/// The `service` and `backend` labels; `backend` is `addr` or `addr:port`.
pub(super) fn backend_labels(k: &BackendKey) -> Labels {
    vec![("service", k.service.clone()), ("backend", k.endpoint.to_string())]
}

pub(super) fn backends(s: &mut Scrape, c: &Copied, view: &dyn DataplaneView) {
    backend_traffic(s, &c.slots, view);
    state(s, &c.slots, &c.snap);
    health(s, &c.slots);
}

/// Packets, bytes and new connections sent on to each backend.
fn backend_traffic(s: &mut Scrape, slots: &[SlotInfo], view: &dyn DataplaneView) {
    let b_traffic: Vec<[u64; 3]> =
        slots.iter().map(|b| traffic(view, |w| w.backends.get(usize::from(b.slot)))).collect();
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
        for (b, t) in slots.iter().zip(&b_traffic) {
            f.add(backend_labels(&b.key), t[i]);
        }
    }
}

/// Effective health, operator drain, draining after removal.
fn state(s: &mut Scrape, slots: &[SlotInfo], snap: &Snapshot) {
    let f = s.family(
        "spillway_backend_healthy",
        "1 when the backend is healthy as the policy sees it (probes and overrides, HC-2).",
        Gauge,
    );
    for b in slots {
        let healthy = snap.backend(b.slot).is_some_and(|v| v.healthy);
        f.add(backend_labels(&b.key), u64::from(healthy));
    }
    let f = s.family("spillway_backend_drained", "1 when the operator drained the backend.", Gauge);
    for b in slots {
        f.add(backend_labels(&b.key), u64::from(b.drained));
    }
    let f = s.family(
        "spillway_backend_draining",
        "1 while a removed backend's connections are draining (CD-3).",
        Gauge,
    );
    for b in slots {
        let draining = snap
            .backend(b.slot)
            .is_some_and(|v| matches!(v.status, BackendStatus::Draining { .. }));
        f.add(backend_labels(&b.key), u64::from(draining));
    }
}

/// The override, the probes' own verdict and how often it changed.
fn health(s: &mut Scrape, slots: &[SlotInfo]) {
    let f = s.family(
        "spillway_backend_health_override",
        "1 for the backend's current operator override (healthy, unhealthy or auto), 0 for the others.",
        Gauge,
    );
    for b in slots {
        for (name, v) in [
            ("healthy", Some(Override::Healthy)),
            ("unhealthy", Some(Override::Unhealthy)),
            ("auto", None),
        ] {
            let mut l = backend_labels(&b.key);
            l.push(("override", name.to_owned()));
            f.add(l, u64::from(b.health_override == v));
        }
    }
    let f = s.family(
        "spillway_backend_probe_healthy",
        "The health checks' verdict of the backend (1 healthy, 0 unhealthy), without overrides.",
        Gauge,
    );
    // A backend no check probes has no verdict, hence no sample.
    for b in slots {
        if let Some(p) = b.probe {
            f.add(backend_labels(&b.key), u64::from(p));
        }
    }
    let f = s.family(
        "spillway_backend_health_changes",
        "Health-check verdict changes of the backend (a flapping backend: only the first few a \
         minute are logged).",
        Counter,
    );
    for b in slots {
        f.add(backend_labels(&b.key), b.health_changes);
    }
}
