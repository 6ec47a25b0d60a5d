//! Fleet sync's decision-core half (FS): which of this instance's entries its peers need and
//! when they stop needing them (FS-1, FS-8), how a peer's entry is stored here and how long it
//! lasts (FS-2, FS-4), and the queues between a worker and the sync thread. How a packet takes
//! a copy over (FS-3) is in [`crate::decide`].
//!
//! Instances agree on services and backends by what they are, not by this instance's ids and
//! slots: a [`PeerEntry`] names its service by [`service_identity`] (of the configured name)
//! and its backend by address and port. [`PeerIndex`] maps those back to this instance's ids
//! and slots, built once per snapshot.
//!
//! A peer's entry stored here is a *copy*: its epoch is [`SYNCED_EPOCH`] (so the established
//! path refuses it and its first packet takes the full decision) and it carries the shard's
//! [`FLAG_COPY`] (so it counts against the copy limit and gives its way to any entry of this
//! instance's own). An entry of this instance's own that has been sent to the peers carries
//! [`FLAG_SHARED`], so that the table reports its departure and the peers learn of it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;
use hashbrown::HashMap;

use crate::addr::Addr;
use crate::conntrack::{key_hash, Absent, EntryValue, Shard, FLAG_COPY, FLAG_SHARED, WAYS};
use crate::decide::{at_risk, FLAG_CREATED_UNHEALTHY, SYNCED_EPOCH};
use crate::flow::FlowKey;
use crate::model::Endpoint;
use crate::snapshot::{BackendRef, BackendStatus, Snapshot};
use crate::time::Time;

/// The entry flags that travel between instances: only what the decision reads of a peer's
/// entry (CP-5). The shard's own bits ([`FLAG_COPY`], [`FLAG_SHARED`]) never do.
pub const WIRE_FLAGS: u8 = FLAG_CREATED_UNHEALTHY;

/// The backend of a [`PeerEntry`] that names none: a removal of whatever copy of the key a
/// peer holds (the sender's backend slot was already gone when it told its peers).
pub const ANY_BACKEND: Endpoint = Endpoint { addr: Addr::UNSPECIFIED, port: 0 };

/// An entry as instances exchange it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerEntry {
    /// The tracking key with service 0 (service ids are this instance's own).
    pub key: FlowKey,
    /// The service, by [`service_identity`] of its name.
    pub service: u64,
    /// The backend the connection is pinned to ([`ANY_BACKEND`] in a removal that cannot name
    /// it).
    pub backend: Endpoint,
    /// Milliseconds since its owner last vouched for it (FS-2): 0 for the owner's own entry,
    /// the time since the owner sent it for a copy a peer relays in a bulk answer. (The table
    /// file uses the same record for the time since the entry's last packet.)
    pub age_ms: u32,
    /// The entry's flags, [`WIRE_FLAGS`] only.
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
/// one number, independent of the services' order: two instances with the same value send a
/// new connection with a given key to the same backend. The sync hello carries it, and two
/// instances whose hellos differ for long raise the fleet's disagreement alarm.
pub fn tables_fingerprint(snap: &Snapshot) -> u64 {
    snap.services().fold(0u64, |acc, s| acc ^ s.identity.rotate_left(7) ^ snap.table_fingerprint(s))
}

/// What [`store`] did with a peer's entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Installed {
    /// Stored: a connection that reaches this instance continues on its backend (FS-3).
    New,
    /// A copy already here was brought up to date.
    Refreshed,
    /// This instance has its own entry for the key: kept, the peer's ignored (FS-4).
    KeptLocal,
    /// No service here has that identity (a configuration that differs).
    UnknownService,
    /// The service here has no such backend, or it is no longer live (removed, drained).
    UnknownBackend,
    /// Both candidate buckets are full: a copy never evicts an entry (FS-2).
    TableFull,
    /// The table holds as many copies as it may ([`Shard::copy_limit`]; FS-2).
    CopyLimit,
}

impl Installed {
    /// Every value, for counter tables.
    pub const ALL: [Installed; 7] = [
        Installed::New,
        Installed::Refreshed,
        Installed::KeptLocal,
        Installed::UnknownService,
        Installed::UnknownBackend,
        Installed::TableFull,
        Installed::CopyLimit,
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
            Installed::CopyLimit => "copy_limit",
        }
    }
}

/// What [`remove`] did with a peer's removal (FS-8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Removed {
    /// The copy of the key held here was dropped.
    Dropped,
    /// Nothing to drop: no entry for the key, this instance's own entry (FS-4), or a copy
    /// pinned to another backend than the removal names (a newer copy from another owner).
    NotHeld,
}

impl Removed {
    /// Every value, for counter tables.
    pub const ALL: [Removed; 2] = [Removed::Dropped, Removed::NotHeld];

    /// Its place in [`Removed::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The name used in metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Removed::Dropped => "dropped",
            Removed::NotHeld => "not_held",
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

    /// This instance's id of the service with `identity`.
    pub fn service(&self, identity: u64) -> Option<u16> {
        self.services.get(&identity).copied()
    }
}

/// What a scan does with one entry (FS-1, FS-8): [`examine`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Examined {
    /// At risk: the peers need it. For this instance's own entry, `age_ms` is 0 (its owner
    /// vouches for it now) and the scan marks it [`FLAG_SHARED`]; for a copy (relayed in a
    /// bulk answer), the time since its owner sent it.
    Share(PeerEntry),
    /// This instance's own entry, shared before and no longer at risk (moved back to the
    /// table's pick, expired, drained, flushed, or unhealthy): the peers drop their copy, and
    /// the scan clears [`FLAG_SHARED`].
    Unshare(PeerEntry),
    /// Nothing to tell.
    Nothing,
}

/// FS-1 and FS-8 for one entry of this instance's table, judged against `snap` at `now`.
pub fn examine(
    key: &FlowKey,
    value: &EntryValue,
    idle_ms: u64,
    snap: &Snapshot,
    now: Time,
) -> Examined {
    let risky = at_risk(key, value, idle_ms, snap, now);
    if value.is_copy() {
        let age = u32::try_from(idle_ms).unwrap_or(u32::MAX);
        return match risky.then(|| export(key, value, age, snap)).flatten() {
            Some(e) => Examined::Share(e),
            None => Examined::Nothing,
        };
    }
    match (risky, value.is_shared()) {
        (true, _) => export(key, value, 0, snap).map_or(Examined::Nothing, Examined::Share),
        (false, true) => Examined::Unshare(departure(key, value, snap)),
        (false, false) => Examined::Nothing,
    }
}

/// A removal for an entry of this instance's own that was shared and has left the table or
/// changed (the table's departures, [`Shard::take_departed`]), or that is no longer at risk:
/// its key and service, and its backend when the slot still names it ([`ANY_BACKEND`]
/// otherwise).
pub fn departure(key: &FlowKey, value: &EntryValue, snap: &Snapshot) -> PeerEntry {
    export(key, value, 0, snap).unwrap_or(PeerEntry {
        key: key.with_service(0),
        service: snap.service(key.service).map_or(0, |s| s.identity),
        backend: ANY_BACKEND,
        age_ms: 0,
        flags: 0,
    })
}

/// Any entry as peers see it, with `age_ms` as given (the table file of a restart keeps every
/// entry, with its idle time); `None` when its service or backend slot is gone.
pub fn export(
    key: &FlowKey,
    value: &EntryValue,
    age_ms: u32,
    snap: &Snapshot,
) -> Option<PeerEntry> {
    let svc = snap.service(key.service)?;
    let r = BackendRef::from_u32(value.backend);
    let b = snap.backend(r.slot).filter(|b| b.gen == r.gen && b.service == svc.id)?;
    Some(PeerEntry {
        key: key.with_service(0),
        service: svc.identity,
        backend: b.endpoint,
        age_ms,
        flags: value.flags & WIRE_FLAGS,
    })
}

/// A peer's entry in this instance's terms: its tracking key (with this instance's service
/// id), its value (this instance's backend slot, marked as a copy: [`SYNCED_EPOCH`] and
/// [`FLAG_COPY`]) and its age, or why it has none here. The sync thread does this with the
/// current snapshot; the worker stores the result ([`store`]).
pub fn localize(
    entry: &PeerEntry,
    index: &PeerIndex,
    snap: &Snapshot,
    now: Time,
) -> Result<LocalEntry, Installed> {
    let Some(service) = index.service(entry.service) else {
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
        value: EntryValue {
            backend: r.to_u32(),
            epoch: SYNCED_EPOCH,
            flags: (entry.flags & WIRE_FLAGS) | FLAG_COPY,
        },
        age_ms: entry.age_ms,
    })
}

/// A peer's removal in this instance's terms: the key with this instance's service id, and
/// the backend slot it names (`None`: any), or `None` when the service is unknown here.
pub fn localize_removal(entry: &PeerEntry, index: &PeerIndex) -> Option<LocalRemoval> {
    let service = index.service(entry.service)?;
    let backend = if entry.backend == ANY_BACKEND {
        None
    } else {
        // A backend this instance does not have: no copy here can name it.
        Some(index.backends.get(&(service, entry.backend)).map_or(u32::MAX, |r| r.to_u32()))
    };
    Some(LocalRemoval { key: entry.key.with_service(service), backend })
}

/// A peer's entry in this instance's terms ([`localize`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalEntry {
    /// The tracking key, with this instance's service id.
    pub key: FlowKey,
    /// The value: this instance's backend slot and generation, [`SYNCED_EPOCH`], the flags
    /// with [`FLAG_COPY`].
    pub value: EntryValue,
    /// Milliseconds since its owner vouched for it.
    pub age_ms: u32,
}

/// A peer's removal in this instance's terms ([`localize_removal`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalRemoval {
    /// The tracking key, with this instance's service id.
    pub key: FlowKey,
    /// The backend reference ([`BackendRef::to_u32`]) the copy must have, or `None` for any.
    pub backend: Option<u32>,
}

/// Store a peer's entry in this instance's table (FS-2): as last vouched for `age_ms` ago,
/// never evicting an entry, never replacing this instance's own (FS-4), within the table's
/// copy limit; a copy of the key already here is brought up to date.
pub fn store(shard: &mut Shard, e: &LocalEntry, now: Time) -> Installed {
    let hash = key_hash(&e.key);
    // Wrapping, not saturating: shortly after a start `now` (time since the worker's origin)
    // is smaller than the age of an entry, and the table keeps only the low 32 bits of the
    // last-use time, so the wrapped value gives back the exact age instead of one clipped to
    // the uptime (which would extend its life).
    let seen = Time(now.as_millis().wrapping_sub(u64::from(e.age_ms)));
    if let Some(slot) = shard.find(&e.key, hash) {
        let here = shard.get(slot, now);
        if !here.value.is_copy() {
            return Installed::KeptLocal;
        }
        // The newer of the two, or another backend (the owner's entry changed): a refresh
        // never makes a copy look older than the one here for the same backend.
        if u64::from(e.age_ms) < here.idle_ms || here.value.backend != e.value.backend {
            shard.replace(slot, e.value, seen);
        }
        return Installed::Refreshed;
    }
    match shard.insert_absent(&e.key, hash, e.value, seen) {
        Ok(_) => Installed::New,
        Err(Absent::CopyLimit) => Installed::CopyLimit,
        Err(Absent::Full | Absent::Present) => Installed::TableFull,
    }
}

/// Drop the copy a peer's removal names (FS-8): a copy of the key, pinned to the removal's
/// backend (any, for [`ANY_BACKEND`]). This instance's own entry for the key is kept (FS-4).
pub fn remove(shard: &mut Shard, r: &LocalRemoval, now: Time) -> Removed {
    let hash = key_hash(&r.key);
    let Some(slot) = shard.find(&r.key, hash) else { return Removed::NotHeld };
    let here = shard.get(slot, now).value;
    if !here.is_copy() || r.backend.is_some_and(|b| b != here.backend) {
        return Removed::NotHeld;
    }
    shard.remove(slot);
    Removed::Dropped
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
/// worker's scan (two buckets of sixteen entries per poll, each to the peers and to a bulk
/// answer or two).
pub const MIN_QUEUE: usize = 16 * WAYS;

/// Which bulk answer an entry belongs to (FS-5): the peer that asked, its request and the
/// attempt (a retry of one worker's part is a new attempt).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket {
    /// The asking peer's instance id.
    pub peer: u16,
    /// Its request id.
    pub request: u64,
    /// The attempt: 0 for the whole request, one more for each retry of a worker's part.
    pub attempt: u16,
}

/// What a worker hands the sync thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outbound {
    /// An entry at risk, for every peer (FS-1).
    Share(PeerEntry),
    /// A shared entry of this instance's own left the table, changed, or is no longer at
    /// risk: every peer drops its copy (FS-8).
    Remove(PeerEntry),
    /// An entry of a bulk answer (FS-5), for the peer that asked.
    Answer(Ticket, PeerEntry),
    /// The end of this worker's part of a bulk answer: how many entries it had.
    AnswerEnd(Ticket, u64),
}

/// The queue of what a worker hands the sync thread.
pub type OutboundQueue = ArrayQueue<Outbound>;

/// What the sync thread hands a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inbound {
    /// A peer's entry to store ([`store`]).
    Store(LocalEntry),
    /// A peer's removal ([`remove`]).
    Remove(LocalRemoval),
}

/// Copies must never displace this instance's own entries; bounded by this share of a
/// worker's table unless configured (`fleet.sync.copy_share`): half.
pub const DEFAULT_COPY_SHARE: f64 = 0.5;

/// The queues and requests between one worker and the sync thread; the thread keeps a clone.
#[derive(Debug, Clone)]
pub struct SyncLink {
    /// What the worker's scans found, for the sync thread to send.
    pub outbound: Arc<ArrayQueue<Outbound>>,
    /// Peers' entries and removals for this worker's table, in this instance's terms.
    pub inbound: Arc<ArrayQueue<Inbound>>,
    /// Scans the sync thread asks for.
    pub requests: Arc<ScanRequests>,
    /// Bulk answers the sync thread asks for (FS-5), one ticket each.
    pub bulk: Arc<ArrayQueue<Ticket>>,
}

/// Bulk answers a worker may be asked for before it takes them (one per peer is the rule).
pub const BULK_QUEUE: usize = 64;

impl SyncLink {
    /// Queues of `capacity` items each way (at least [`MIN_QUEUE`]).
    pub fn new(capacity: usize) -> SyncLink {
        SyncLink {
            outbound: Arc::new(ArrayQueue::new(capacity.max(MIN_QUEUE))),
            inbound: Arc::new(ArrayQueue::new(capacity.max(MIN_QUEUE))),
            requests: Arc::default(),
            bulk: Arc::new(ArrayQueue::new(BULK_QUEUE)),
        }
    }
}

/// Refresh requests from the sync thread: the counter goes up by one per request.
#[derive(Debug, Default)]
pub struct ScanRequests {
    /// A refresh: the instance's own entries at risk, sent again (FS-2).
    pub refresh: AtomicU64,
}

impl ScanRequests {
    /// Ask every worker holding these requests for a refresh scan.
    pub fn ask_refresh(&self) {
        self.refresh.fetch_add(1, Ordering::Relaxed);
    }
}

/// The bits of a scan's entry that say it was shared: what [`Examined::Share`] sets on this
/// instance's own entry and [`Examined::Unshare`] clears.
pub fn shared_flags(value: &EntryValue, shared: bool) -> u8 {
    if shared {
        value.flags | FLAG_SHARED
    } else {
        value.flags & !FLAG_SHARED
    }
}
