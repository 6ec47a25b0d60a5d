//! Entries shared with the other instances of a fleet (FS): which of this instance's entries
//! a peer needs (FS-1), how a peer's entry is stored here (FS-2, FS-4), and, in
//! [`crate::decide`], how a packet takes it over (FS-3).
//!
//! Instances agree on services and backends by what they are, not by this instance's ids and
//! slots: a [`PeerEntry`] names its service by [`service_identity`] (of the configured name)
//! and its backend by address and port. [`PeerIndex`] maps those back to this instance's ids
//! and slots, built once per snapshot.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;
use hashbrown::HashMap;

use crate::conntrack::{key_hash, EntryValue, Shard, WAYS};
use crate::decide::{at_risk, SYNCED_EPOCH};
use crate::flow::FlowKey;
use crate::model::Endpoint;
use crate::snapshot::{BackendRef, BackendStatus, Snapshot};
use crate::time::Time;

/// An entry as instances exchange it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerEntry {
    /// The tracking key with service 0 (service ids are this instance's own).
    pub key: FlowKey,
    /// The service, by [`service_identity`] of its name.
    pub service: u64,
    /// The backend the connection is pinned to.
    pub backend: Endpoint,
    /// Milliseconds since the entry's last packet, when it was sent.
    pub idle_ms: u32,
    /// The entry's flags (CP-5).
    pub flags: u8,
}

/// Domain separation for [`service_identity`]: the hash of a service name for sync is never
/// the same value as another xxh3 of the same name elsewhere in Spillway.
pub const SERVICE_IDENTITY_DOMAIN: &[u8] = b"spillway/sync/service/v1\0";

/// A service's identity across instances: a hash of its configured name (xxh3-64 of
/// [`SERVICE_IDENTITY_DOMAIN`] and the name), the same on every instance of any version.
pub fn service_identity(name: &str) -> u64 {
    let mut buf = Vec::with_capacity(SERVICE_IDENTITY_DOMAIN.len() + name.len());
    buf.extend_from_slice(SERVICE_IDENTITY_DOMAIN);
    buf.extend_from_slice(name.as_bytes());
    xxhash_rust::xxh3::xxh3_64(&buf)
}

/// Every service's identity and consistent-hash tables ([`Snapshot::table_fingerprint`]) in
/// one number, independent of the services' order: two instances (or one instance before and
/// after a restart) with the same value send a new connection with a given key to the same
/// backend. The sync hello carries it, and the table file is written and read under it, so a
/// file from another configuration is refused instead of pinning connections to backends the
/// tables no longer agree on.
pub fn tables_fingerprint(snap: &Snapshot) -> u64 {
    snap.services().fold(0u64, |acc, s| acc ^ s.identity.rotate_left(7) ^ snap.table_fingerprint(s))
}

/// What [`install`] did with a peer's entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Installed {
    /// Stored: a connection that reaches this instance continues on its backend (FS-3).
    New,
    /// A copy already here (a peer's, not used yet) had its idle time brought up to date.
    Refreshed,
    /// This instance has its own entry for the key: kept, the peer's ignored (FS-4).
    KeptLocal,
    /// No service here has that identity (a configuration that differs).
    UnknownService,
    /// The service here has no such backend, or it is no longer live (removed, drained).
    UnknownBackend,
    /// Both candidate buckets are full: a peer's entry never evicts one (FS-2).
    TableFull,
}

impl Installed {
    /// Every value, for counter tables.
    pub const ALL: [Installed; 6] = [
        Installed::New,
        Installed::Refreshed,
        Installed::KeptLocal,
        Installed::UnknownService,
        Installed::UnknownBackend,
        Installed::TableFull,
    ];

    /// Its place in [`Installed::ALL`] (the counter tables' index).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The name used in metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Installed::New => "installed",
            Installed::Refreshed => "refreshed",
            Installed::KeptLocal => "kept_local",
            Installed::UnknownService => "unknown_service",
            Installed::UnknownBackend => "unknown_backend",
            Installed::TableFull => "table_full",
        }
    }
}

/// One snapshot's services and backends by identity, to install peers' entries.
#[derive(Debug, Default)]
pub struct PeerIndex {
    services: HashMap<u64, u16>,
    backends: HashMap<(u16, Endpoint), BackendRef>,
}

impl PeerIndex {
    /// The index of `snap`: every service by identity, every backend slot that is not free
    /// by (service, endpoint).
    pub fn of(snap: &Snapshot) -> PeerIndex {
        let services = snap.services().map(|s| (s.identity, s.id)).collect();
        let backends = snap
            .backends
            .iter()
            .enumerate()
            .filter(|(_, b)| b.status != BackendStatus::Free)
            .map(|(slot, b)| {
                let r = BackendRef { slot: slot as u16, gen: b.gen };
                ((b.service, b.endpoint), r)
            })
            .collect();
        PeerIndex { services, backends }
    }
}

/// This instance's entry as peers see it, if it is at risk (FS-1): valid, and pinned to a
/// backend other than the one a new connection with its key would get now.
pub fn export_at_risk(
    key: &FlowKey,
    value: &EntryValue,
    idle_ms: u64,
    snap: &Snapshot,
    now: Time,
) -> Option<PeerEntry> {
    if !at_risk(key, value, idle_ms, snap, now) {
        return None;
    }
    export(key, value, idle_ms, snap)
}

/// Any entry as peers see it (the table file of a restart keeps every entry); `None` when its
/// service or backend slot is gone.
pub fn export(
    key: &FlowKey,
    value: &EntryValue,
    idle_ms: u64,
    snap: &Snapshot,
) -> Option<PeerEntry> {
    let svc = snap.service(key.service)?;
    let r = BackendRef::from_u32(value.backend);
    let b = snap.backend(r.slot).filter(|b| b.gen == r.gen && b.service == svc.id)?;
    Some(PeerEntry {
        key: key.with_service(0),
        service: svc.identity,
        backend: b.endpoint,
        idle_ms: u32::try_from(idle_ms).unwrap_or(u32::MAX),
        flags: value.flags,
    })
}

/// A peer's entry in this instance's terms: its tracking key (with this instance's service
/// id), its value (this instance's backend slot, marked as a peer's with [`SYNCED_EPOCH`]) and
/// the time of its last packet, or why it has none here. The sync thread does this with the
/// current snapshot; the worker stores the result ([`store`]).
pub fn localize(
    entry: &PeerEntry,
    index: &PeerIndex,
    snap: &Snapshot,
    now: Time,
) -> Result<LocalEntry, Installed> {
    let Some(&service) = index.services.get(&entry.service) else {
        return Err(Installed::UnknownService);
    };
    let Some(&r) = index.backends.get(&(service, entry.backend)) else {
        return Err(Installed::UnknownBackend);
    };
    if !snap.backend(r.slot).is_some_and(|b| b.gen == r.gen && b.is_live(now)) {
        return Err(Installed::UnknownBackend);
    }
    Ok(LocalEntry {
        key: entry.key.with_service(service),
        value: EntryValue { backend: r.to_u32(), epoch: SYNCED_EPOCH, flags: entry.flags },
        idle_ms: entry.idle_ms,
    })
}

/// A peer's entry in this instance's terms ([`localize`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalEntry {
    /// The tracking key, with this instance's service id.
    pub key: FlowKey,
    /// The value: this instance's backend slot and generation, [`SYNCED_EPOCH`], the flags.
    pub value: EntryValue,
    /// Milliseconds since its last packet, when the peer sent it.
    pub idle_ms: u32,
}

/// Store a peer's entry in this instance's table (FS-2): with its idle time as sent, never
/// evicting an entry and never replacing this instance's own (FS-4); a copy of a peer's entry
/// already here is refreshed.
pub fn store(shard: &mut Shard, e: &LocalEntry, now: Time) -> Installed {
    let hash = key_hash(&e.key);
    // Wrapping, not saturating: shortly after a start `now` (time since the worker's origin)
    // is smaller than the idle time of an entry from a peer or the table file, and the table
    // keeps only the low 32 bits of the last-use time, so the wrapped value gives back the
    // exact idle time instead of one clipped to the uptime (which would extend its life).
    let seen = Time(now.as_millis().wrapping_sub(u64::from(e.idle_ms)));
    if let Some(slot) = shard.find(&e.key, hash) {
        let here = shard.get(slot, now);
        if here.value.epoch != SYNCED_EPOCH {
            return Installed::KeptLocal;
        }
        // The newer of the two copies: a refresh never makes an entry look older.
        if u64::from(e.idle_ms) < here.idle_ms {
            shard.replace(slot, e.value, seen);
        }
        return Installed::Refreshed;
    }
    match shard.insert_absent(&e.key, hash, e.value, seen) {
        Some(_) => Installed::New,
        None => Installed::TableFull,
    }
}

/// [`localize`] then [`store`].
pub fn install(
    shard: &mut Shard,
    entry: &PeerEntry,
    index: &PeerIndex,
    snap: &Snapshot,
    now: Time,
) -> Installed {
    match localize(entry, index, snap, now) {
        Ok(e) => store(shard, &e, now),
        Err(why) => why,
    }
}

/// The smallest queue between a worker and the sync thread: room for two polls' worth of a
/// worker's scan (two buckets of sixteen entries per poll).
pub const MIN_QUEUE: usize = 4 * WAYS;

/// The queues and requests between one worker and the sync thread; the thread keeps a clone.
#[derive(Debug, Clone)]
pub struct SyncLink {
    /// Entries at risk, for the sync thread to send.
    pub outbound: Arc<ArrayQueue<PeerEntry>>,
    /// Peers' entries for this worker's table, in this instance's terms.
    pub inbound: Arc<ArrayQueue<LocalEntry>>,
    /// Scans the sync thread asks for.
    pub requests: Arc<ScanRequests>,
}

impl SyncLink {
    /// Queues of `capacity` entries each way (at least [`MIN_QUEUE`]).
    pub fn new(capacity: usize) -> SyncLink {
        SyncLink {
            outbound: Arc::new(ArrayQueue::new(capacity.max(MIN_QUEUE))),
            inbound: Arc::new(ArrayQueue::new(capacity.max(MIN_QUEUE))),
            requests: Arc::default(),
        }
    }
}

/// Scan requests from the sync thread: each counter goes up by one per request.
#[derive(Debug, Default)]
pub struct ScanRequests {
    /// A refresh: the instance's own entries at risk.
    pub refresh: AtomicU64,
    /// A peer's bulk request: every entry at risk, the peers' ones too.
    pub bulk: AtomicU64,
}

impl ScanRequests {
    /// Ask every worker holding these requests for a refresh scan.
    pub fn ask_refresh(&self) {
        self.refresh.fetch_add(1, Ordering::Relaxed);
    }

    /// Ask for a bulk scan (a peer joins).
    pub fn ask_bulk(&self) {
        self.bulk.fetch_add(1, Ordering::Relaxed);
    }
}
