//! Fleet sync (FS): what went to the peers and came from them, what was refused and why, what
//! was lost and where, the limits peers ran into, the peers' state (up, sessions, tables that
//! differ), the bulk sync, and the workers' side (passes, entries stored and dropped by result,
//! copies held).

use std::sync::atomic::{AtomicU64, Ordering};

use super::scrape::Scrape;
use crate::sync::{Limited, Refused, SyncShared};
use crate::view::DataplaneView;
use prometheus_client::metrics::MetricType::{Counter, Gauge};
use spillway_core::sync::{Installed, Removed};

/// Every `spillway_sync_*` family; only with `fleet.sync` configured.
pub(super) fn sync(s: &mut Scrape, shared: &SyncShared, view: &dyn DataplaneView) {
    let st = &shared.stats;
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let one = |s: &mut Scrape, name, help, v| {
        s.family(name, help, Counter).add(Vec::new(), v);
    };
    one(
        s,
        "spillway_sync_entries_sent",
        "Entries at risk sent to the peers (once each).",
        get(&st.entries_sent),
    );
    one(
        s,
        "spillway_sync_removes_sent",
        "Removals sent to the peers (FS-8): shared entries that left the table, changed, or \
         stopped being at risk.",
        get(&st.removes_sent),
    );
    one(
        s,
        "spillway_sync_answer_entries_sent",
        "Entries sent in bulk answers to joining peers (FS-5).",
        get(&st.answer_entries_sent),
    );
    one(
        s,
        "spillway_sync_entries_received",
        "Entries received from the peers in accepted datagrams.",
        get(&st.entries_received),
    );
    one(
        s,
        "spillway_sync_removes_received",
        "Removals received from the peers in accepted datagrams.",
        get(&st.removes_received),
    );
    one(
        s,
        "spillway_sync_held_back",
        "Entries and removals not sent to a peer that does not accept this instance's datagrams \
         yet (not proven live to it): it gets them from its bulk sync or the refresh that follows.",
        get(&st.held_back),
    );
    let refused = s.family(
        "spillway_sync_datagrams_refused",
        "Sync datagrams refused, by reason (auth_failed: forged or altered; unknown_key: sealed \
         under a key this instance does not hold; wrong_address; unproven: a peer not proven \
         live since this start, e.g. replayed traffic; replayed; stale_epoch; malformed; ...): \
         nothing of them is installed.",
        Counter,
    );
    for (r, c) in Refused::ALL.iter().zip(&st.refused) {
        refused.add(vec![("reason", r.as_str().into())], get(c));
    }
    let limited = s.family(
        "spillway_sync_limited",
        "Limits the peers ran into (entries_rate: entries beyond max_entries_per_sec, dropped; \
         bulk_requests: bulk requests refused; answer_abandoned: a bulk answer whose asker \
         stopped acknowledging).",
        Counter,
    );
    for (l, c) in Limited::ALL.iter().zip(&st.limited) {
        limited.add(vec![("limit", l.as_str().into())], get(c));
    }
    let lost = s.family(
        "spillway_sync_lost",
        "What fleet sync lost, by where: kernel_drops (the socket's receive buffer full), \
         sequence_gaps (peers' datagrams never received), bulk_missing (entries the counts of \
         bulk answers found missing, asked for again), send_errors, worker_queue_full.",
        Counter,
    );
    for (what, v) in [
        ("kernel_drops", get(&st.kernel_drops)),
        ("sequence_gaps", get(&st.sequence_gaps)),
        ("bulk_missing", get(&st.bulk_missing)),
        ("send_errors", get(&st.send_errors)),
        ("worker_queue_full", get(&st.worker_queue_full)),
    ] {
        lost.add(vec![("where", what.into())], v);
    }
    s.family("spillway_sync_datagrams_sent", "Sync datagrams sent, to all peers.", Counter)
        .add(Vec::new(), get(&st.datagrams_sent));
    s.family(
        "spillway_sync_sent_bytes",
        "Bytes of the sync datagrams sent (UDP payload).",
        Counter,
    )
    .add(Vec::new(), get(&st.bytes_sent));
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
    let status = shared.status.lock().map(|s| s.clone()).unwrap_or_default();
    let peer = |p: &spillway_api::types::PeerStatus| {
        vec![("peer", p.id.to_string()), ("address", p.address.clone())]
    };
    let up = s.family(
        "spillway_sync_peer_up",
        "1 while the peer's hellos, proven live, arrive (one a second; down after 3 s without), \
         else 0.",
        Gauge,
    );
    for p in &status.peers {
        up.add(peer(p), u64::from(p.up));
    }
    let ready = s.family(
        "spillway_sync_peer_ready",
        "1 while this instance and the peer accept each other's datagrams (both proven live to \
         the other since their starts), else 0.",
        Gauge,
    );
    for p in &status.peers {
        ready.add(peer(p), u64::from(p.proven && p.accepts));
    }
    let differ = s.family(
        "spillway_sync_peer_tables_differ",
        "1 while the peer's tables (its hellos' fingerprints) have differed from this instance's \
         for longer than 5 s: a connection that moves between the two can change backend.",
        Gauge,
    );
    for p in &status.peers {
        differ.add(peer(p), u64::from(p.tables_differ));
    }
    s.family(
        "spillway_sync_bulk_done",
        "1 once the bulk sync at start is over (every peer's answer whole, or the timeout \
         passed): the instance may announce.",
        Gauge,
    )
    .add(Vec::new(), u64::from(shared.bulk_done.load(Ordering::Relaxed)));
    s.family("spillway_sync_bulk_duration_seconds", "How long the bulk sync at start took.", Gauge)
        .add_f(Vec::new(), get(&st.bulk_ms) as f64 / 1000.0);
    one(
        s,
        "spillway_sync_bulk_entries",
        "Entries received in the answers to this instance's bulk request.",
        get(&st.bulk_entries),
    );
    one(
        s,
        "spillway_sync_bulk_retries",
        "Parts of bulk answers asked for again (their counts found entries missing).",
        get(&st.bulk_retries),
    );
    one(
        s,
        "spillway_sync_bulk_answers",
        "Bulk answers sent to joining peers.",
        get(&st.bulk_answers),
    );
    workers(s, view);
}

/// The workers' side of fleet sync.
fn workers(s: &mut Scrape, view: &dyn DataplaneView) {
    let by_worker = |s: &mut Scrape, name, help, kind, v: &dyn Fn(usize) -> u64| {
        let f = s.family(name, help, kind);
        for w in 0..view.workers() {
            f.add(vec![("worker", w.to_string())], v(w));
        }
    };
    by_worker(
        s,
        "spillway_sync_worker_exported",
        "Entries at risk a worker's passes handed to the sync thread (for the peers, or a bulk \
         answer).",
        Counter,
        &|w| view.counters(w).sync.exported.get(),
    );
    by_worker(
        s,
        "spillway_sync_worker_removes",
        "Removals a worker handed to the sync thread (FS-8).",
        Counter,
        &|w| view.counters(w).sync.removes.get(),
    );
    by_worker(
        s,
        "spillway_sync_worker_export_dropped",
        "Items a worker could not hand over: its queue to the sync thread was full.",
        Counter,
        &|w| view.counters(w).sync.queue_full.get(),
    );
    by_worker(
        s,
        "spillway_sync_worker_copies",
        "Copies of peers' entries a worker's table holds now.",
        Gauge,
        &|w| view.counters(w).ct_copies.get(),
    );
    let stored = s.family(
        "spillway_sync_worker_stored",
        "Peers' entries a worker handled, by result (installed, refreshed, kept_local: this \
         instance's own entry wins, table_full: never evicts, copy_limit: the table holds as \
         many copies as fleet.sync.copy_share allows).",
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
    let removed = s.family(
        "spillway_sync_worker_removed",
        "Peers' removals a worker handled, by result (dropped: its copy; not_held).",
        Counter,
    );
    for w in 0..view.workers() {
        let c = &view.counters(w).sync;
        for (r, n) in Removed::ALL.iter().zip(&c.removed) {
            removed.add(vec![("worker", w.to_string()), ("result", r.as_str().into())], n.get());
        }
    }
    by_worker(
        s,
        "spillway_sync_worker_scans",
        "A worker's finished own passes over its table for entries at risk (each table change, \
         each refresh).",
        Counter,
        &|w| view.counters(w).sync.scans.get(),
    );
    by_worker(
        s,
        "spillway_sync_worker_bulk_answers",
        "A worker's finished bulk passes (its part of a bulk answer).",
        Counter,
        &|w| view.counters(w).sync.bulk_answers.get(),
    );
}
