//! The connection table across one instance's clean restart (`fleet.table_file`): what a stop
//! takes out of the workers' tables and writes ([`save`]), and how a start reads the file back
//! into them and consumes it ([`restore`]).
//!
//! The entries travel as a peer's do ([`sync::export`], [`sync::localize`]): by service
//! identity and backend address, since slots and service ids are rebuilt at every start. Back
//! in the table they are this instance's own entries again (the service's current epoch, not
//! [`spillway_core::decide::SYNCED_EPOCH`]): they were made here, by this instance's decisions.
//! Copies of peers' entries are not written: their owners keep them.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use hashbrown::HashMap;
use spillway_core::conntrack::{Shard, FLAG_COPY};
use spillway_core::flow::FlowKey;
use spillway_core::snapshot::Snapshot;
use spillway_core::sync::{self, Installed, PeerIndex};
use spillway_core::time::Time;

use super::{consume, load_table, save_table, Consumed, TableFile, TableFileError};
use crate::sync::epoch::clock_ms;
use crate::sync::thread::{peer_entry, synced};
use crate::sync::SyncedEntry;

/// Every entry of this instance's own in every table of `shards` as of `now`, under `snap`, for
/// the table file, each with its idle time. A key held by several workers (the entries a start
/// restored go to every worker) is written once, with its most recent use. Entries whose
/// service or backend slot is gone, and copies of peers' entries, are left out.
pub fn export_tables<'a>(
    shards: impl IntoIterator<Item = &'a Shard>,
    snap: &Snapshot,
    now: Time,
) -> Vec<SyncedEntry> {
    let mut out: Vec<SyncedEntry> = Vec::new();
    let mut seen: HashMap<FlowKey, usize> = HashMap::new();
    for shard in shards {
        for (_, e) in shard.iter(now) {
            if e.value.flags & FLAG_COPY != 0 {
                continue;
            }
            let idle = u32::try_from(e.idle_ms).unwrap_or(u32::MAX);
            let Some(pe) = sync::export(&e.key, &e.value, idle, snap) else { continue };
            match seen.get(&e.key) {
                Some(&i) => {
                    if pe.age_ms < out[i].age_ms {
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
        let mut local = match sync::localize(&peer_entry(e), &index, snap, now) {
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
        if u64::from(local.age_ms) >= svc.idle_timeout_ms {
            r.expired += 1;
            continue;
        }
        // This instance's own entry, made under the service's current configuration (the
        // file's fingerprint says so): not a peer's copy.
        local.value.epoch = svc.epoch;
        local.value.flags &= !FLAG_COPY;
        let mut outcome = Installed::New;
        for shard in shards.iter_mut() {
            let got = sync::store(shard, &local, now);
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

/// Read the table file at `path` into every table of `shards` (fresh, before the workers
/// start), under the first snapshot `snap` at `now` (the workers' clock), then consume it
/// ([`consume`]). A file that cannot be used is logged: the start goes on with empty tables.
pub fn restore(path: &Path, shards: &mut [Shard], snap: &Snapshot, now: Time) {
    let started = Instant::now();
    let max = shards.iter().map(|s| s.capacity() as u64).sum();
    let mut file = match load_table(path, snap.config_fingerprint, max) {
        Ok(f) => f,
        Err(e) if e.is_missing() => {
            tracing::info!(
                "fleet.table_file: {} does not exist (a first start, or the last stop was not \
                 clean): the table starts empty",
                path.display()
            );
            return;
        }
        Err(
            e @ (TableFileError::NotRegular(_)
            | TableFileError::WrongOwner { .. }
            | TableFileError::TooOpen(_)),
        ) => {
            tracing::warn!(
                "fleet.table_file: {} refused, not read: {e}; the table starts empty (the next \
                 clean stop replaces it with a table file)",
                path.display()
            );
            return;
        }
        Err(e) => {
            let why = match &e {
                TableFileError::FingerprintMismatch { .. } => "another configuration",
                TableFileError::UnsupportedVersion(_) => "another format version",
                TableFileError::TooManyEntries { .. } => "too many entries",
                TableFileError::Io(_) => "unreadable",
                _ => "corrupt",
            };
            let aside = match consume(path, false) {
                Ok(Consumed::RenamedTo(p)) => format!("renamed to {}", p.display()),
                Ok(Consumed::Removed) => "removed".into(),
                Err(e) => format!("left in place ({e})"),
            };
            tracing::warn!(
                "fleet.table_file: {} refused ({why}): {e}; the table starts empty, the file is \
                 {aside}",
                path.display()
            );
            return;
        }
    };
    // The time on disk counts as idle time: the connections sent nothing through this
    // instance meanwhile.
    file.age(clock_ms());
    let r = restore_tables(&file, shards, snap, now);
    let consumed = match consume(path, true) {
        Ok(_) => "removed".to_owned(),
        Err(e) => format!("NOT removed ({e}): a later start could read it again"),
    };
    tracing::info!(
        "fleet.table_file: restored {} of {} entries from {} into each of {} worker table(s) in \
         {} ms (a connection may reach any worker); not restored: {}; the file is {consumed}",
        r.restored,
        file.entries.len(),
        path.display(),
        shards.len(),
        started.elapsed().as_millis(),
        r.refusals()
    );
}

/// Write every entry of this instance's own in `shards` (the workers' tables, the workers
/// stopped) to `path` under the snapshot in force at the stop, at `now` (the workers' clock).
pub fn save(path: &Path, shards: &[Shard], snap: &Snapshot, now: Time) {
    let started = Instant::now();
    let entries = export_tables(shards, snap, now);
    match save_table(path, snap.config_fingerprint, clock_ms(), entries) {
        Ok(n) => tracing::info!(
            "fleet.table_file: wrote {n} entries from {} worker table(s) to {} in {} ms",
            shards.len(),
            path.display(),
            started.elapsed().as_millis()
        ),
        Err(e) => tracing::error!(
            "fleet.table_file: cannot write {}: {e}; this stop's table is not kept",
            path.display()
        ),
    }
}
