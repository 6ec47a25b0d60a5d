//! `GET /metrics`: the Prometheus text format (0.0.4), written with `prometheus-client`.
//!
//! Every scrape reads the current state: the workers' counters through [`DataplaneView`]
//! (single-writer relaxed counters, summed over workers by service id and backend slot), the
//! published snapshot (eligible sets, failover, zonal spill) and the health checker's status.
//! Nothing is accumulated between scrapes, so there is no registry to keep in sync with
//! reloads: a scrape is a `Collector` over values gathered just before.
//!
//! It holds the controller's lock only to copy what it needs (the snapshot is an `Arc`);
//! reading the counters happens after the lock is released. Names follow the Prometheus
//! conventions: `spillway_` prefix, `_total` on counters (added by the encoder), base units
//! (`_bytes`, `_seconds`). `docs/operations.md` lists every metric.
//!
//! One file per family, in the order of the exposition (`collect`):
//!
//! | families | file |
//! |---|---|
//! | `spillway_snapshot*`, `spillway_workers`, `spillway_reloads` | `snapshots.rs` |
//! | per worker: `spillway_worker_*`, `spillway_conntrack_*`, neighbour and ICMP replies, `spillway_kernel_frames` | `workers.rs` |
//! | `spillway_port_*`, `spillway_kernel_path_*` | `ports.rs` |
//! | `spillway_instance_phase`, `spillway_vip_announced`, `spillway_announce_*`, `spillway_bird_up`, `spillway_service_table_info` | `instance.rs` |
//! | `spillway_neighbour_answers`, `spillway_neighbour_unresolved_next_hops`, `spillway_neighbour_table_publishes` | `neighbour.rs` |
//! | `spillway_forwarded_packets`, `spillway_dropped_packets`, `spillway_quic_fallback` (by reason) | `workers.rs` |
//! | `spillway_service_*` | `services.rs` |
//! | `spillway_group_*`, `spillway_client_zone_*` (advanced load balancing) | `advanced.rs` |
//! | `spillway_backend_*` | `backends.rs` |
//! | `spillway_health_check_*` | `checks.rs` |
//! | `spillway_sync_*` (fleet sync) | `sync.rs` |
//!
//! What is copied under the lock: `copied.rs`; the families' plain data and their encoding:
//! `scrape.rs`.

use crate::controller::Controller;
use crate::view::DataplaneView;
use copied::Copied;
use prometheus_client::registry::Registry;
use scrape::Scrape;
use std::fmt;
use std::sync::Mutex;

mod advanced;
mod backends;
mod checks;
mod copied;
mod instance;
mod neighbour;
mod ports;
mod scrape;
mod services;
mod snapshots;
mod sync;
mod workers;

/// The `Content-Type` of [`render`]'s output.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The whole exposition, in the Prometheus text format.
pub fn render(
    controller: &Mutex<Controller>,
    view: &dyn DataplaneView,
) -> Result<String, fmt::Error> {
    let copied = copied::copy(controller);
    let scrape = collect(&copied, view);
    let mut registry = Registry::default();
    registry.register_collector(Box::new(scrape));
    let mut out = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)?;
    Ok(out)
}

/// Every family, in the order of the exposition (scrapers and `tests/expected/metrics.txt`
/// see this order).
fn collect(c: &Copied, view: &dyn DataplaneView) -> Scrape {
    let mut s = Scrape::default();
    snapshots::snapshots(&mut s, c, view.workers());
    workers::per_worker(&mut s, view);
    ports::ports(&mut s, view);
    ports::kernel_path(&mut s, view);
    if let Some(f) = &c.fleet {
        instance::fleet(&mut s, f);
    }
    instance::table_info(&mut s, &c.snap);
    neighbour::resolver(&mut s, view);
    workers::reasons(&mut s, view);
    services::services(&mut s, &c.snap, view);
    advanced::advanced(&mut s, &c.snap);
    services::zones(&mut s, &c.snap);
    backends::backends(&mut s, c, view);
    checks::checks(&mut s, &c.checks);
    if let Some(shared) = &c.sync {
        sync::sync(&mut s, shared, view);
    }
    s
}
