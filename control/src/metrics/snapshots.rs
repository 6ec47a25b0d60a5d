//! The decision snapshots and the configuration: generation, workers, publications, reloads.

use super::copied::Copied;
use super::scrape::Scrape;
use prometheus_client::metrics::MetricType::{Counter, Gauge};

pub(super) fn snapshots(s: &mut Scrape, c: &Copied, workers: usize) {
    s.family(
        "spillway_snapshot_generation",
        "Generation of the published decision snapshot.",
        Gauge,
    )
    .add(Vec::new(), c.snap.generation);
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
}
