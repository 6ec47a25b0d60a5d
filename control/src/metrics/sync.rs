//! Fleet sync (FS): what went to the peers and came from them, what was refused and why, the
//! peers' state, the bulk sync, and the workers' side (scans, entries stored by result).

use std::sync::atomic::Ordering;

use super::scrape::Scrape;
use crate::sync::{Refused, SyncShared};
use crate::view::DataplaneView;
use prometheus_client::metrics::MetricType::{Counter, Gauge};
use spillway_core::peer::Installed;

/// Every `spillway_sync_*` family; only with `fleet.sync` configured.
pub(super) fn sync(s: &mut Scrape, shared: &SyncShared, view: &dyn DataplaneView) {
    let st = &shared.stats;
    let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    s.family(
        "spillway_sync_entries_sent",
        "Entries at risk sent to the peers (once each).",
        Counter,
    )
    .add(Vec::new(), get(&st.entries_sent));
    s.family(
        "spillway_sync_entries_received",
        "Entries received from the peers in accepted datagrams.",
        Counter,
    )
    .add(Vec::new(), get(&st.entries_received));
    let refused = s.family(
        "spillway_sync_datagrams_refused",
        "Sync datagrams refused, by reason (auth_failed: forged or another key; replayed; \
         stale_epoch; unknown_sender; malformed; ...): nothing of them is installed.",
        Counter,
    );
    for (r, c) in Refused::ALL.iter().zip(&st.refused) {
        refused.add(vec![("reason", r.as_str().into())], get(c));
    }
    s.family("spillway_sync_datagrams_sent", "Sync datagrams sent, to all peers.", Counter)
        .add(Vec::new(), get(&st.datagrams_sent));
    s.family(
        "spillway_sync_send_errors",
        "Sync datagrams the kernel refused to send (no route to a peer, a full buffer).",
        Counter,
    )
    .add(Vec::new(), get(&st.send_errors));
    let unusable = s.family(
        "spillway_sync_entries_unusable",
        "Peers' entries with no counterpart here (a service or backend this instance does not \
         have), by reason.",
        Counter,
    );
    for (r, c) in Installed::ALL.iter().zip(&st.entries_refused) {
        if matches!(r, Installed::UnknownService | Installed::UnknownBackend) {
            unusable.add(vec![("reason", r.as_str().into())], get(c));
        }
    }
    s.family(
        "spillway_sync_worker_queue_full",
        "Peers' entries lost because a worker's queue from the sync thread was full.",
        Counter,
    )
    .add(Vec::new(), get(&st.worker_queue_full));
    let status = shared.status.lock().map(|s| s.clone()).unwrap_or_default();
    let up = s.family(
        "spillway_sync_peer_up",
        "1 while the peer's hellos arrive (one a second; down after 3 s without), else 0.",
        Gauge,
    );
    for p in &status.peers {
        up.add(vec![("peer", p.id.to_string()), ("address", p.address.clone())], u64::from(p.up));
    }
    s.family(
        "spillway_sync_bulk_done",
        "1 once the bulk sync at start is over (every peer that is up answered, or the \
         timeout passed): the instance may announce.",
        Gauge,
    )
    .add(Vec::new(), u64::from(shared.bulk_done.load(Ordering::Relaxed)));
    s.family("spillway_sync_bulk_duration_seconds", "How long the bulk sync at start took.", Gauge)
        .add_f(Vec::new(), get(&st.bulk_ms) as f64 / 1000.0);
    s.family("spillway_sync_bulk_answers", "Bulk answers sent to joining peers.", Counter)
        .add(Vec::new(), get(&st.bulk_answers));
    // The workers' side.
    let exported = s.family(
        "spillway_sync_worker_exported",
        "Entries at risk a worker's scans handed to the sync thread.",
        Counter,
    );
    for w in 0..view.workers() {
        exported.add(vec![("worker", w.to_string())], view.counters(w).sync.exported.get());
    }
    let dropped = s.family(
        "spillway_sync_worker_export_dropped",
        "Entries at risk a worker could not hand over: its queue to the sync thread was full.",
        Counter,
    );
    for w in 0..view.workers() {
        dropped.add(vec![("worker", w.to_string())], view.counters(w).sync.queue_full.get());
    }
    let stored = s.family(
        "spillway_sync_worker_stored",
        "Peers' entries a worker handled, by result (installed, refreshed, kept_local: this \
         instance's own entry wins, table_full: never evicts).",
        Counter,
    );
    for w in 0..view.workers() {
        let c = &view.counters(w).sync;
        for (r, n) in Installed::ALL.iter().zip(&c.installed) {
            if matches!(r, Installed::UnknownService | Installed::UnknownBackend) {
                continue;
            }
            stored.add(vec![("worker", w.to_string()), ("result", r.as_str().into())], n.get());
        }
    }
    let scans = s.family(
        "spillway_sync_worker_scans",
        "A worker's finished scans of its table for entries at risk (each table change, each \
         refresh, each peer's bulk request).",
        Counter,
    );
    for w in 0..view.workers() {
        scans.add(vec![("worker", w.to_string())], view.counters(w).sync.scans.get());
    }
}
