//! `fleet.table_file`: the connection table kept across a clean restart. The start reads it
//! into every worker's table before the workers run; a clean stop writes every worker's table
//! to it after they stopped. A file that cannot be used is logged and left as it is: the start
//! goes on with empty tables (the next clean stop overwrites the file).

use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use spillway_control::sync::{self, TableFileError};
use spillway_core::conntrack::Shard;
use spillway_core::snapshot::Snapshot;
use spillway_dataplane::worker::time_since;

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Read `path` into every table of `shards` (fresh, before the workers start), under the first
/// snapshot `snap`; `origin` is the workers' clock origin.
pub fn restore(path: &Path, shards: &mut [Shard], snap: &Snapshot, origin: Instant) {
    let started = Instant::now();
    let fingerprint = sync::table_file_fingerprint(snap);
    let max = shards.iter().map(|s| s.capacity() as u64).sum();
    let mut file = match sync::load_table(path, fingerprint, max) {
        Ok(f) => f,
        Err(e) if e.is_missing() => {
            tracing::info!(
                "fleet.table_file: {} does not exist (a first start): the table starts empty",
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
            tracing::warn!(
                "fleet.table_file: {} refused ({why}): {e}; the table starts empty, the file is \
                 left as it is",
                path.display()
            );
            return;
        }
    };
    // The time on disk counts as idle time: the connections sent nothing through this
    // instance meanwhile.
    file.age(unix_ms());
    let r = sync::restore_tables(&file, shards, snap, time_since(origin));
    tracing::info!(
        "fleet.table_file: restored {} of {} entries from {} into each of {} worker table(s) in \
         {} ms (a connection may reach any worker); not restored: {}",
        r.restored,
        file.entries.len(),
        path.display(),
        shards.len(),
        started.elapsed().as_millis(),
        r.refusals()
    );
}

/// Write every entry of `shards` (the workers' tables, the workers stopped) to `path` under
/// the snapshot in force at the stop.
pub fn save(path: &Path, shards: &[Shard], snap: &Snapshot, origin: Instant) {
    let started = Instant::now();
    let entries = sync::export_tables(shards, snap, time_since(origin));
    let fingerprint = sync::table_file_fingerprint(snap);
    match sync::save_table(path, fingerprint, unix_ms(), entries) {
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
