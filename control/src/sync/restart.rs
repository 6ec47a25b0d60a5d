//! The connection table across one instance's clean restart (`fleet.table_file`): what a stop
//! takes out of the workers' tables for [`super::save_table`], and how a start puts what
//! [`super::load_table`] read back into them.
//!
//! The entries travel as a peer's do ([`peer::export`], [`peer::localize`]): by service
//! identity and backend address, since slots and service ids are rebuilt at every start. Back
//! in the table they are this instance's own entries again (the service's current epoch, not
//! [`spillway_core::decide::SYNCED_EPOCH`]): they were made here, by this instance's decisions.

use std::collections::BTreeMap;

use hashbrown::HashMap;
use spillway_core::conntrack::Shard;
use spillway_core::flow::FlowKey;
use spillway_core::peer::{self, Installed, PeerIndex};
use spillway_core::snapshot::Snapshot;
use spillway_core::time::Time;

use super::entry::SyncedEntry;
use super::persist::TableFile;
use super::thread::{peer_entry, synced};

/// The configuration's fingerprint the table file is written and read under
/// ([`peer::tables_fingerprint`]).
pub fn table_file_fingerprint(snap: &Snapshot) -> u64 {
    peer::tables_fingerprint(snap)
}

/// Every entry of every table in `shards` as of `now`, under `snap`, for the table file. A key
/// held by several workers (the entries a start restored go to every worker) is written once,
/// with its most recent use. Entries whose service or backend slot is gone are left out.
pub fn export_tables<'a>(
    shards: impl IntoIterator<Item = &'a Shard>,
    snap: &Snapshot,
    now: Time,
) -> Vec<SyncedEntry> {
    let mut out: Vec<SyncedEntry> = Vec::new();
    let mut seen: HashMap<FlowKey, usize> = HashMap::new();
    for shard in shards {
        for (_, e) in shard.iter(now) {
            let Some(pe) = peer::export(&e.key, &e.value, e.idle_ms, snap) else { continue };
            match seen.get(&e.key) {
                Some(&i) => {
                    if pe.idle_ms < out[i].idle_ms {
                        out[i] = synced(&pe);
                    }
                }
                None => {
                    seen.insert(e.key, out.len());
                    out.push(synced(&pe));
                }
            }
        }
    }
    out
}

/// What [`restore_tables`] did with a table file's entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// Entries stored (in every table).
    pub restored: u64,
    /// Entries idle longer than their service's idle timeout: expired, as the running
    /// instance would have expired them.
    pub expired: u64,
    /// Entries not stored, by reason ([`Installed::as_str`]): a service or backend no longer
    /// live, a table full, a duplicate key.
    pub refused: BTreeMap<&'static str, u64>,
}

impl Restored {
    /// `expired 3, unknown_backend 1`, or `none`.
    pub fn refusals(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if self.expired > 0 {
            parts.push(format!("expired {}", self.expired));
        }
        parts.extend(self.refused.iter().map(|(k, v)| format!("{k} {v}")));
        if parts.is_empty() {
            "none".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

/// Put a table file's entries (already [`TableFile::age`]d) into every table of `shards`, as
/// this instance's own entries under `snap` at `now` (before the workers start). Every worker
/// gets every entry: which worker a connection's packets reach after the restart depends on
/// the port's RSS, not on the worker that held the entry before. An entry is counted restored
/// when every table took it; otherwise by the first table's refusal.
pub fn restore_tables(
    file: &TableFile,
    shards: &mut [Shard],
    snap: &Snapshot,
    now: Time,
) -> Restored {
    let index = PeerIndex::of(snap);
    let mut r = Restored::default();
    for e in &file.entries {
        let mut local = match peer::localize(&peer_entry(e), &index, snap, now) {
            Ok(l) => l,
            Err(why) => {
                *r.refused.entry(why.as_str()).or_default() += 1;
                continue;
            }
        };
        let Some(svc) = snap.service(local.key.service) else {
            *r.refused.entry(Installed::UnknownService.as_str()).or_default() += 1;
            continue;
        };
        if u64::from(local.idle_ms) >= svc.idle_timeout_ms {
            r.expired += 1;
            continue;
        }
        // This instance's own entry, made under the service's current tables (the file's
        // fingerprint says so): not a peer's copy.
        local.value.epoch = svc.epoch;
        let mut outcome = Installed::New;
        for shard in shards.iter_mut() {
            let got = peer::store(shard, &local, now);
            if got != Installed::New && outcome == Installed::New {
                outcome = got;
            }
        }
        match outcome {
            Installed::New => r.restored += 1,
            why => *r.refused.entry(why.as_str()).or_default() += 1,
        }
    }
    r
}
