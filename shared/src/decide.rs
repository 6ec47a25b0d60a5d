//! The one decision function: `(packet, snapshot, shard, now) -> Decision`.
//!
//! Workers, the simulator and the tests all call [`decide`]; nothing else chooses a backend.
//! It follows SPEC section 1 step by step: match a forwarding rule (FR-1), look the tracking
//! key up unless the packet is a new-connection SYN (CT-2, CT-3), judge a found entry against
//! the snapshot in the order of CT-13 (idle timeout CT-8, draining CD-2/CD-3/CD-4, failover
//! flush FO-9, persistence CP-1..CP-5), and otherwise select from the client zone's choice
//! with the consistent hash (CH-1) and record the entry (CT-6, CT-12). An empty eligible set
//! drops (FO-6).
//!
//! No allocation, no lock, no logging: one rule lookup, one or two hashes, one table probe.

use crate::conntrack::{self, EntryValue, Shard, FLAG_COPY, FLAG_SHARED};
use crate::flow::{
    is_new_connection_syn, selection_tuple, tracking_key, FlowKey, PacketInfo,
    FLOW_KEY_SERVICE_BYTES,
};
use crate::model::ZoneId;
use crate::policy::Affinity;
use crate::snapshot::{BackendRef, ServiceView, Snapshot};
use crate::time::Time;

/// Entry flag: the entry was made while its backend was already unhealthy (CP-5).
pub const FLAG_CREATED_UNHEALTHY: u8 = 0x01;

/// The epoch of an entry received from a peer instance (fleet sync, FS-2) and not yet used
/// here. It is never a service's flush epoch ([`next_epoch`] skips it), so [`judge`] refuses
/// such an entry as it refuses a flushed one, and its first packet takes the full decision,
/// where the takeover rule (FS-3) applies: the established path pays nothing for it.
pub const SYNCED_EPOCH: u32 = u32::MAX;

/// The flush epoch after `epoch` (FO-9): one more, never [`SYNCED_EPOCH`].
pub fn next_epoch(epoch: u32) -> u32 {
    match epoch.wrapping_add(1) {
        SYNCED_EPOCH => 0,
        e => e,
    }
}

/// Why a packet was forwarded where it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ForwardReason {
    /// No entry was found (never made, or already reclaimed), or a new-connection SYN.
    NewConnection,
    /// A valid entry was found.
    ConntrackHit,
    /// The entry had been idle for the idle timeout (CT-8).
    ReplacedExpired,
    /// The entry's backend was removed and its draining time is over (CD-2, CD-3, CD-4).
    ReplacedDrained,
    /// A failover flip with draining disabled flushed the service (FO-9).
    ReplacedFlushed,
    /// The entry's backend became unhealthy and the entry does not persist (CP).
    ReplacedUnhealthy,
    /// A peer's entry (fleet sync) was found and its backend is still a valid choice: the
    /// connection continues on it here, and the entry is now this instance's (FS-3).
    SyncTakeover,
    /// A TCP packet that opens no connection found no entry shortly after the tables changed:
    /// the previous tables' backend, still valid for it, where its connection began (FS-11).
    PreviousTable,
    /// A QUIC short-header packet found no valid entry: the backend its destination connection
    /// ID names (QUIC-LB, QL-3), its connection's, whatever its 4-tuple now.
    QuicCid,
}

/// Why a QUIC short-header packet of a service with QUIC-LB that found no valid entry went by
/// the 4-tuple choice instead of its connection ID (QL-4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuicFallback {
    /// The connection ID gives no server ID, or one that names no backend of the service.
    Decode(crate::quic_lb::Fallback),
    /// The server ID names a backend that cannot take the packet: removed and past its
    /// draining time, or unhealthy for a service whose entries do not persist (CT-13).
    BackendInvalid,
}

impl QuicFallback {
    /// Every value's name, in [`QuicFallback::index`] order, for counter tables.
    pub const NAMES: [&'static str; 5] =
        ["reserved", "unknown_config", "too_short", "unknown_server_id", "backend_invalid"];

    /// Its index in [`QuicFallback::NAMES`].
    pub fn index(self) -> usize {
        use crate::quic_lb::{Fallback, Unroutable};
        match self {
            QuicFallback::Decode(Fallback::Unroutable(Unroutable::Reserved)) => 0,
            QuicFallback::Decode(Fallback::Unroutable(Unroutable::UnknownConfig(_))) => 1,
            QuicFallback::Decode(Fallback::Unroutable(Unroutable::TooShort)) => 2,
            QuicFallback::Decode(Fallback::UnknownServerId) => 3,
            QuicFallback::BackendInvalid => 4,
        }
    }

    /// The name used in metrics, captures and `explain`.
    pub fn as_str(self) -> &'static str {
        Self::NAMES[self.index()]
    }
}

/// Why a packet was dropped by the decision core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// No forwarding rule matches (also CD-5: rule or service removed).
    NoMatchingRule,
    /// The final eligible set is empty (FO-6).
    NoEligibleBackend,
}

/// The verdict for one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Send to the backend in this slot of the snapshot.
    Forward {
        /// Backend slot.
        backend: u16,
        /// Why this backend.
        reason: ForwardReason,
    },
    /// Drop and count.
    Drop(DropReason),
}

/// The decision for one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Forward or drop.
    pub verdict: Verdict,
    /// The matched service id (0 when no rule matched).
    pub service: u16,
    /// A per-flow hash (of the tracking key), e.g. for the GUE source port.
    pub flow_hash: u64,
    /// The client's zone, when a backend was selected for a new connection and the client is
    /// zonally compatible (the per-zone demand advanced load balancing measures).
    pub client_zone: Option<ZoneId>,
    /// An entry now points at the chosen backend that did not before (insert or replacement).
    pub tracked: bool,
    /// The backend slot of an entry this decision replaced, overwrote or evicted: the worker
    /// keeps a per-backend count of tracked entries (advanced load balancing's connection load).
    pub released: Option<u16>,
    /// A QUIC short-header packet that its connection ID could not route (QL-4): why.
    pub quic_fallback: Option<QuicFallback>,
}

impl ForwardReason {
    /// Every value, for counter tables.
    pub const ALL: [ForwardReason; 9] = [
        ForwardReason::NewConnection,
        ForwardReason::ConntrackHit,
        ForwardReason::ReplacedExpired,
        ForwardReason::ReplacedDrained,
        ForwardReason::ReplacedFlushed,
        ForwardReason::ReplacedUnhealthy,
        ForwardReason::SyncTakeover,
        ForwardReason::PreviousTable,
        ForwardReason::QuicCid,
    ];

    /// The name used in simulate output and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            ForwardReason::NewConnection => "new_connection",
            ForwardReason::ConntrackHit => "conntrack_hit",
            ForwardReason::ReplacedExpired => "replaced_expired",
            ForwardReason::ReplacedDrained => "replaced_drained",
            ForwardReason::ReplacedFlushed => "replaced_flushed",
            ForwardReason::ReplacedUnhealthy => "replaced_unhealthy",
            ForwardReason::SyncTakeover => "sync_takeover",
            ForwardReason::PreviousTable => "previous_table",
            ForwardReason::QuicCid => "quic_cid",
        }
    }

    /// True when the decision made a new connection entry (counted as a new connection): not
    /// a hit, nor a connection taken over from a peer (FS-3), nor a QUIC connection found by
    /// its connection ID on a new 4-tuple (QL-3).
    pub fn is_new(self) -> bool {
        !matches!(
            self,
            ForwardReason::ConntrackHit | ForwardReason::SyncTakeover | ForwardReason::QuicCid
        )
    }
}

impl DropReason {
    /// Every value, for counter tables.
    pub const ALL: [DropReason; 2] = [DropReason::NoMatchingRule, DropReason::NoEligibleBackend];

    /// The name used in simulate output and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::NoMatchingRule => "no_matching_rule",
            DropReason::NoEligibleBackend => "no_eligible_backend",
        }
    }
}

impl Decision {
    /// The reason as printed by `simulate`.
    pub fn reason_str(&self) -> &'static str {
        match self.verdict {
            Verdict::Forward { reason, .. } => reason.as_str(),
            Verdict::Drop(d) => d.as_str(),
        }
    }

    /// The backend slot, when forwarded.
    pub fn backend(&self) -> Option<u16> {
        match self.verdict {
            Verdict::Forward { backend, .. } => Some(backend),
            Verdict::Drop(_) => None,
        }
    }
}

/// The first half of [`decide`]: the matched service, the tracking key and its hash. A
/// burst is prepared packet by packet first, so that the connection-table lines of all its
/// packets can be fetched at once before any of them is decided ([`decide_prepared`]).
#[derive(Clone, Copy, Debug)]
pub struct Prepared<'s> {
    /// The service of the matched forwarding rule (FR-1); `None`: no rule matches.
    pub service: Option<&'s ServiceView>,
    /// The tracking key (CT-1), meaningful when a service matched.
    pub key: FlowKey,
    /// The key's [`conntrack::key_hash`].
    pub key_hash: u64,
    /// True when the key must be looked up (not a new-connection SYN, CT-2 / CT-3).
    pub lookup: bool,
    /// Where the key's entry probably is (the connection table's burst pipeline,
    /// [`conntrack::burst`], finds it), if the caller ran it; [`conntrack::Hint::NONE`] costs
    /// nothing but the full lookup.
    pub hint: conntrack::Hint,
}

/// Match the forwarding rule and build the tracking key and its hash.
#[inline]
pub fn prepare<'s>(p: &PacketInfo, snap: &'s Snapshot) -> Prepared<'s> {
    prepare_for(p, snap.service_for(p))
}

/// [`prepare`] with the rule already matched: `service` is `snap.service_for(p)` (or its
/// cached answer, [`Snapshot::service_for_cached`]).
#[inline(always)]
pub fn prepare_for<'s>(p: &PacketInfo, service: Option<&'s ServiceView>) -> Prepared<'s> {
    match service {
        None => Prepared {
            service: None,
            key: FlowKey::default(),
            key_hash: 0,
            lookup: false,
            hint: conntrack::Hint::NONE,
        },
        Some(svc) => {
            let key = tracking_key(p, svc.tracking, svc.affinity, svc.symmetric_hashing, svc.id);
            Prepared {
                service: Some(svc),
                key,
                key_hash: conntrack::key_hash(&key),
                lookup: !is_new_connection_syn(p, svc.tracking, svc.affinity),
                hint: conntrack::Hint::NONE,
            }
        }
    }
}

/// Decide what to do with one packet: [`prepare`] then [`decide_prepared`].
#[inline]
pub fn decide(p: &PacketInfo, snap: &Snapshot, shard: &mut Shard, now: Time) -> Decision {
    decide_prepared(p, &prepare(p, snap), snap, shard, now)
}

/// Decide what to do with one packet whose [`prepare`] step is done (with the same snapshot).
#[inline]
pub fn decide_prepared(
    p: &PacketInfo,
    prep: &Prepared<'_>,
    snap: &Snapshot,
    shard: &mut Shard,
    now: Time,
) -> Decision {
    decide_with_payload(p, prep, snap, shard, now, &[])
}

/// [`decide_prepared`] with the packet's transport payload: a UDP packet's datagram, which for
/// a service with QUIC-LB holds the QUIC header whose connection ID routes it when it finds no
/// valid entry (QL-3). Empty when there is none, or no need for it.
pub fn decide_with_payload(
    p: &PacketInfo,
    prep: &Prepared<'_>,
    snap: &Snapshot,
    shard: &mut Shard,
    now: Time,
    payload: &[u8],
) -> Decision {
    let Some(svc) = prep.service else {
        return Decision {
            verdict: Verdict::Drop(DropReason::NoMatchingRule),
            service: 0,
            flow_hash: 0,
            client_zone: None,
            tracked: false,
            released: None,
            quic_fallback: None,
        };
    };
    let (key, key_hash) = (&prep.key, prep.key_hash);
    let decision = |verdict| Decision {
        verdict,
        service: svc.id,
        flow_hash: key_hash,
        client_zone: None,
        tracked: false,
        released: None,
        quic_fallback: None,
    };

    // CT-2 / CT-3: look up unless this is a new-connection SYN.
    let mut stale = None;
    if prep.lookup {
        if let Some(slot) = shard.find_hinted(key, key_hash, prep.hint) {
            let entry = shard.get(slot, now);
            match judge(&entry.value, entry.idle_ms, svc, snap, p, now) {
                Ok(backend) => {
                    if !p.icmp_error {
                        shard.touch(slot, now); // CT-8: every hit restarts the idle clock.
                    }
                    return decision(Verdict::Forward {
                        backend,
                        reason: ForwardReason::ConntrackHit,
                    });
                }
                Err(_) if entry.value.epoch == SYNCED_EPOCH => {
                    if let Some(backend) = take_over(shard, slot, &entry, svc, snap, p, now) {
                        return Decision {
                            tracked: true,
                            ..decision(Verdict::Forward {
                                backend,
                                reason: ForwardReason::SyncTakeover,
                            })
                        };
                    }
                    let idle = copy_idle(entry.idle_ms, snap);
                    let reason = judge(&local(&entry.value, svc), idle, svc, snap, p, now)
                        .err()
                        .unwrap_or(ForwardReason::ReplacedFlushed);
                    stale = Some((slot, reason, BackendRef::from_u32(entry.value.backend).slot))
                }
                Err(reason) => {
                    stale = Some((slot, reason, BackendRef::from_u32(entry.value.backend).slot))
                }
            }
        }
    }

    // QL-3, QL-4: a QUIC short-header packet goes where its connection ID says, if it can.
    let mut quic_fallback = None;
    if svc.quic.is_some() && !payload.is_empty() {
        match quic_pick(payload, svc, snap, p, now) {
            Some(Ok(slot)) => {
                return track(
                    shard,
                    (p, prep, svc, snap, now),
                    stale,
                    slot,
                    ForwardReason::QuicCid,
                    None,
                );
            }
            Some(Err(f)) => quic_fallback = Some(f),
            None => {}
        }
    }
    let (client_zone, backend) = select_new(p, svc, snap);
    let Some(backend) = backend else {
        return Decision {
            quic_fallback,
            ..decision(Verdict::Drop(DropReason::NoEligibleBackend))
        }; // FO-6
    };
    let mut reason = stale.map_or(ForwardReason::NewConnection, |(_, r, _)| r);
    let mut backend = backend;
    // FS-11: a connection's packet that finds no entry just after the tables changed.
    if svc.previous.is_some() && prep.lookup && stale.is_none() {
        if let Some(slot) = previous_pick(p, svc, snap, now, false).filter(|&s| s != backend) {
            (backend, reason) = (slot, ForwardReason::PreviousTable);
        }
    }
    let made = track(shard, (p, prep, svc, snap, now), stale, backend, reason, client_zone);
    Decision { quic_fallback, ..made }
}

/// The end of a decision that found no valid entry: the entry for `backend` made, or the
/// stale one replaced in place (CT-6, CT-12: a replacement entry is an ordinary entry; an
/// ICMP error makes none), and the packet forwarded there for `reason`.
#[inline(always)]
fn track(
    shard: &mut Shard,
    (p, prep, svc, snap, now): (&PacketInfo, &Prepared<'_>, &ServiceView, &Snapshot, Time),
    stale: Option<(conntrack::Slot, ForwardReason, u16)>,
    backend: u16,
    reason: ForwardReason,
    client_zone: Option<ZoneId>,
) -> Decision {
    let decision = Decision {
        verdict: Verdict::Forward { backend, reason },
        service: svc.id,
        flow_hash: prep.key_hash,
        client_zone,
        tracked: false,
        released: None,
        quic_fallback: None,
    };
    if p.icmp_error {
        return decision;
    }
    let made = match stale {
        Some((slot, _, old)) => entry_value(backend, svc, snap).map(|value| {
            shard.replace(slot, value, now);
            (true, Some(old))
        }),
        None => track_new(shard, &prep.key, prep.key_hash, backend, svc, snap, now),
    };
    match made {
        Some((tracked, released)) => Decision { tracked, released, ..decision },
        None => Decision {
            verdict: Verdict::Drop(DropReason::NoEligibleBackend),
            client_zone: None,
            ..decision
        },
    }
}

/// Whether the backend in `slot` could take a connection of `svc` whose packets have protocol
/// `proto`, as an entry pointing at it would be valid (CT-13): it is the service's, not past its
/// draining time (CD-2, CD-3), and healthy or the service's entries persist (CP-1..CP-4). For
/// a backend found without an entry: by the previous tables (FS-11) or a connection ID (QL-3).
pub(crate) fn could_take(
    slot: u16,
    svc: &ServiceView,
    snap: &Snapshot,
    proto: u8,
    now: Time,
) -> bool {
    snap.backend(slot).is_some_and(|b| {
        b.service == svc.id && b.is_live(now) && (b.healthy || svc.persists_on_unhealthy(proto))
    })
}

/// QL-3, QL-4, QL-5: where a UDP datagram's QUIC connection ID sends it. `None` when it is not
/// a QUIC short-header packet (a long header goes by the 4-tuple, QL-2), or for an ICMP error
/// when the quoted packet is not a long header with a source connection ID; `Ok(slot)` for the
/// backend its server ID names, valid for it as an entry's backend would be (CT-13: in the
/// service, not past its draining time, healthy or persisting); else why not.
#[cold]
#[inline(never)]
fn quic_pick(
    payload: &[u8],
    svc: &ServiceView,
    snap: &Snapshot,
    p: &PacketInfo,
    now: Time,
) -> Option<Result<u16, QuicFallback>> {
    use crate::wire::quic;
    let routes = svc.quic.as_deref()?;
    // QL-5: an ICMP error quotes a packet the server sent, whose own ID is the source
    // connection ID of a long header; a short header quoted carries only the client's ID.
    let cid = if p.icmp_error {
        quic::long_source_cid(payload)?
    } else {
        match quic::parse(payload).ok()? {
            quic::QuicHeader::Short { dcid_and_rest } => dcid_and_rest,
            quic::QuicHeader::Long { .. } => return None,
        }
    };
    Some(quic_verdict(&routes.route(cid), svc, snap, p.proto, now))
}

/// QL-3, QL-4: the backend a decoded connection ID (`routed`, from [`Routes::route`]) sends a
/// packet of protocol `proto` to, valid for it as an entry's backend would be (CT-13), or why
/// the packet goes by its 4-tuple instead. The decision and `explain` both judge with it.
///
/// [`Routes::route`]: crate::quic_lb::Routes::route
pub(crate) fn quic_verdict(
    routed: &crate::quic_lb::Route,
    svc: &ServiceView,
    snap: &Snapshot,
    proto: u8,
    now: Time,
) -> Result<u16, QuicFallback> {
    match routed {
        Ok(r) if could_take(r.slot, svc, snap, proto, now) => Ok(r.slot),
        Ok(_) => Err(QuicFallback::BackendInvalid),
        Err((_, fallback)) => Err(QuicFallback::Decode(*fallback)),
    }
}

/// The backend for a new connection (CH-1), with the client's zone it was chosen for: the
/// first half of a decision that finds no valid entry. `None` for the backend when the final
/// set is empty (FO-6).
#[inline(always)]
pub fn select_new(
    p: &PacketInfo,
    svc: &ServiceView,
    snap: &Snapshot,
) -> (Option<ZoneId>, Option<u16>) {
    let client_zone = snap.client_zone(p.src);
    (client_zone, select_in(p, svc, snap, client_zone))
}

/// [`select_new`] for a TCP or UDP packet (not a fragment) of a service that tracks the
/// 5-tuple as received ([`crate::flow::tracks_five_tuple`]), from its tracking key `key`: the
/// data plane's short way for new connections. When the service selects by the 5-tuple as
/// well (affinity `NONE` or `CLIENT_IP_PORT_PROTO`), the selection tuple is the key with
/// service 0 (the hash never depends on this instance's ids, CH-1), so the packet's fields
/// are not gathered into a tuple again; otherwise it is [`select_new`] of the packet's
/// fields, which `info` gives.
#[inline]
pub fn select_new_tracked(
    key: &FlowKey,
    info: impl FnOnce() -> PacketInfo,
    svc: &ServiceView,
    snap: &Snapshot,
) -> (Option<ZoneId>, Option<u16>) {
    match svc.affinity {
        Affinity::None | Affinity::ClientIpPortProto => {
            let client_zone = snap.client_zone(key.src);
            debug_assert_eq!(
                key.with_service(0),
                selection_tuple(&info(), svc.affinity, svc.symmetric_hashing)
            );
            // The byte image of the key with service 0, without copying the key first.
            let mut bytes = key.to_bytes();
            bytes[FLOW_KEY_SERVICE_BYTES].fill(0);
            (client_zone, svc.choice(client_zone).table.lookup(snap.hasher.hash_bytes(&bytes)))
        }
        _ => select_new(&info(), svc, snap),
    }
}

/// The entry of a new connection to `backend` (CT-6; CT-2: a new-connection SYN replaces any
/// entry of its key): the second half of a decision that finds no entry. Returns whether an
/// entry now points at `backend` (the flood guard may refuse one: the packet is then forwarded
/// by the hash alone) and the backend slot of an entry it overwrote or evicted; `None` when
/// `backend` is not in the snapshot (never for a slot [`select_new`] returned).
#[inline(always)]
pub fn track_new(
    shard: &mut Shard,
    key: &FlowKey,
    key_hash: u64,
    backend: u16,
    svc: &ServiceView,
    snap: &Snapshot,
    now: Time,
) -> Option<(bool, Option<u16>)> {
    let value = entry_value(backend, svc, snap)?;
    Some(match shard.insert_new(key, key_hash, value, now) {
        None => (false, None),
        Some(out) => {
            let released = out.overwritten.or(out.evicted.map(|e| e.value));
            (true, released.map(|v| BackendRef::from_u32(v.backend).slot))
        }
    })
}

/// What an entry to `backend` holds: the backend and its generation, the service's epoch,
/// and whether the backend was already unhealthy (CP-5).
#[inline(always)]
fn entry_value(backend: u16, svc: &ServiceView, snap: &Snapshot) -> Option<EntryValue> {
    let b = snap.backend(backend)?;
    Some(EntryValue {
        backend: BackendRef { slot: backend, gen: b.gen }.to_u32(),
        epoch: svc.epoch,
        flags: if b.healthy { 0 } else { FLAG_CREATED_UNHEALTHY },
    })
}

/// FS-11: the backend the tables before the last change give `p`, a TCP packet that opens no
/// connection (nor an ICMP error), while they apply (to packets, or with `sharing` to the
/// entries shared, FS-1) and when that backend is valid for it as an entry's would be (CT-13:
/// in the service, not past draining, healthy or persisting).
#[cold]
#[inline(never)]
fn previous_pick(
    p: &PacketInfo,
    svc: &ServiceView,
    snap: &Snapshot,
    now: Time,
    sharing: bool,
) -> Option<u16> {
    let previous =
        svc.previous.as_deref().filter(|v| now < if sharing { v.shared_until } else { v.until })?;
    if p.proto != crate::flow::proto::TCP || p.is_syn() || p.icmp_error {
        return None;
    }
    let tuple = selection_tuple(p, svc.affinity, svc.symmetric_hashing);
    let slot = previous.choice(snap.client_zone(p.src)).table.lookup(snap.hasher.hash(&tuple))?;
    could_take(slot, svc, snap, p.proto, now).then_some(slot)
}

/// Backend selection for a new connection: client zone -> the service's choice for it ->
/// consistent hash of the selection tuple (CH-1). `None` when the final set is empty (FO-6).
#[inline]
pub fn select(p: &PacketInfo, svc: &ServiceView, snap: &Snapshot) -> Option<u16> {
    select_in(p, svc, snap, snap.client_zone(p.src))
}

#[inline]
fn select_in(
    p: &PacketInfo,
    svc: &ServiceView,
    snap: &Snapshot,
    client_zone: Option<ZoneId>,
) -> Option<u16> {
    let choice = svc.choice(client_zone);
    let tuple = selection_tuple(p, svc.affinity, svc.symmetric_hashing);
    choice.table.lookup(snap.hasher.hash(&tuple))
}

/// Is a found entry still valid? `Ok(slot)` or the first reason it is not (CT-13).
#[inline]
pub fn judge(
    value: &EntryValue,
    idle_ms: u64,
    svc: &ServiceView,
    snap: &Snapshot,
    p: &PacketInfo,
    now: Time,
) -> Result<u16, ForwardReason> {
    // CT-8: idle for exactly the timeout has expired.
    if idle_ms >= svc.idle_timeout_ms {
        return Err(ForwardReason::ReplacedExpired);
    }
    // CD-2, CD-3, CD-4: removed and past its deadline, or the slot started afresh.
    let r = BackendRef::from_u32(value.backend);
    let Some(b) = snap.backend(r.slot) else { return Err(ForwardReason::ReplacedDrained) };
    if b.gen != r.gen || b.service != svc.id || !b.is_live(now) {
        return Err(ForwardReason::ReplacedDrained);
    }
    // FO-9.
    if value.epoch != svc.epoch {
        return Err(ForwardReason::ReplacedFlushed);
    }
    // CP-1..CP-4, with CP-5 for entries made on an already unhealthy backend.
    if !b.healthy && !svc.persists_on_unhealthy(p.proto) {
        return judge_unhealthy(value, svc, snap, p, r.slot);
    }
    Ok(r.slot)
}

/// [`judge`] for an entry whose backend is unhealthy and whose service does not persist
/// (rare: out of line, so that the common case stays small enough to inline).
#[cold]
#[inline(never)]
fn judge_unhealthy(
    value: &EntryValue,
    svc: &ServiceView,
    snap: &Snapshot,
    p: &PacketInfo,
    slot: u16,
) -> Result<u16, ForwardReason> {
    // CP-5: an entry made on an already unhealthy backend stays while it is still chosen.
    let made_unhealthy = value.flags & FLAG_CREATED_UNHEALTHY != 0;
    if made_unhealthy && svc.choice(snap.client_zone(p.src)).contains(slot) {
        Ok(slot)
    } else {
        Err(ForwardReason::ReplacedUnhealthy)
    }
}

/// A peer's entry as this instance's: the service's own flush epoch, and no longer a copy
/// (FS-3).
fn local(value: &EntryValue, svc: &ServiceView) -> EntryValue {
    EntryValue { epoch: svc.epoch, flags: value.flags & !(FLAG_COPY | FLAG_SHARED), ..*value }
}

/// [`judge`] of any entry found for `p`: a peer's entry not yet used here ([`SYNCED_EPOCH`])
/// is judged as this instance's would be, its idle time counted from its owner's last send
/// less the copy's grace (FS-2, FS-3). Also returns the value as this instance would keep it.
#[inline]
pub fn judge_found(
    value: &EntryValue,
    idle_ms: u64,
    svc: &ServiceView,
    snap: &Snapshot,
    p: &PacketInfo,
    now: Time,
) -> (EntryValue, Result<u16, ForwardReason>) {
    let (value, idle_ms) = if value.epoch == SYNCED_EPOCH {
        (local(value, svc), copy_idle(idle_ms, snap))
    } else {
        (*value, idle_ms)
    };
    (value, judge(&value, idle_ms, svc, snap, p, now))
}

/// A copy's idle time as its validity reads it (FS-2): a copy lasts its service's idle timeout
/// plus the snapshot's copy grace after its owner last sent it, so its idle time counts that
/// much less against the timeout.
#[inline]
pub fn copy_idle(idle_ms: u64, snap: &Snapshot) -> u64 {
    idle_ms.saturating_sub(snap.copy_grace_ms)
}

/// FS-3: a peer's entry (its epoch [`SYNCED_EPOCH`]) found by a packet here. Judged as an
/// entry of this instance would be (CT-13's order: idle timeout, draining, persistence on
/// unhealthy backends); when valid, it becomes this instance's entry (this service's epoch,
/// its idle clock restarted) and the packet goes to its backend. Out of line: once per
/// connection taken over.
#[cold]
#[inline(never)]
fn take_over(
    shard: &mut Shard,
    slot: conntrack::Slot,
    entry: &conntrack::Entry,
    svc: &ServiceView,
    snap: &Snapshot,
    p: &PacketInfo,
    now: Time,
) -> Option<u16> {
    let (value, verdict) = judge_found(&entry.value, entry.idle_ms, svc, snap, p, now);
    let backend = verdict.ok()?;
    if !p.icmp_error {
        shard.replace(slot, value, now);
    }
    Some(backend)
}

/// What a snapshot makes of a tracked entry: what the next packet of its flow would find
/// ([`judge_entry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryFate {
    /// Valid (CT-13): the flow's packets go to `backend`, a backend slot of the snapshot.
    Valid {
        /// The entry's backend.
        backend: u16,
    },
    /// Found but invalid: the next packet replaces it, for this reason (CT-12).
    Replaced(ForwardReason),
    /// Not found any more: its service is gone, or (for an entry of a connection's 5-tuple)
    /// no forwarding rule leads the connection's packets to its service now.
    Unreachable,
}

/// The one judgement of a tracked entry without a packet at hand: the rule the packet path
/// applies to an entry it finds ([`judge`], CT-13; a peer's copy judged as this instance's,
/// FS-3), for a packet rebuilt from the entry's key. What asks about an entry goes through it:
/// fleet sync's at-risk test ([`at_risk`]), the reload preview (the candidate snapshot, whose
/// service ids and backend slots are the running state's), the connection-table dump.
pub fn judge_entry(
    key: &FlowKey,
    value: &EntryValue,
    idle_ms: u64,
    snap: &Snapshot,
    now: Time,
) -> EntryFate {
    let Some(svc) = snap.service(key.service) else { return EntryFate::Unreachable };
    let p = key.packet_info();
    // Only a 5-tuple key as received holds every field a rule matches on (a session's key
    // may lack the ports or the destination; a symmetric service's key may be reversed).
    let as_received = key.kind == crate::flow::TupleKind::Five as u8 && !svc.symmetric_hashing;
    let routed = !as_received || snap.service_for(&p).is_some_and(|s| s.id == svc.id);
    if !routed {
        return EntryFate::Unreachable;
    }
    match judge_found(value, idle_ms, svc, snap, &p, now).1 {
        Ok(backend) => EntryFate::Valid { backend },
        Err(reason) => EntryFate::Replaced(reason),
    }
}

/// The backend a new connection with `key`'s fields would get from `snap` now (CH-1); `None`
/// when its service is gone or its final set is empty.
pub fn pick_now(key: &FlowKey, snap: &Snapshot) -> Option<u16> {
    let svc = snap.service(key.service)?;
    select_new(&key.packet_info(), svc, snap).1
}

/// FS-1: is this instance's entry *at risk*, that is, valid and pointing at a backend other
/// than the one a new connection with its key would get now, or (FS-11, for a while after a
/// change) than the one the previous tables would give its packets? Only such entries need a
/// peer's copy: for any other, a peer that receives the flow picks the same backend by the
/// hash (CH-1). A peer's entry not yet used here ([`SYNCED_EPOCH`]) is judged as if it were this
/// instance's.
pub fn at_risk(
    key: &FlowKey,
    value: &EntryValue,
    idle_ms: u64,
    snap: &Snapshot,
    now: Time,
) -> bool {
    match judge_entry(key, value, idle_ms, snap, now) {
        EntryFate::Valid { backend } => {
            pick_now(key, snap) != Some(backend)
                || snap.service(key.service).is_some_and(|svc| {
                    svc.previous.is_some()
                        && previous_pick(&key.packet_info(), svc, snap, now, true)
                            .is_some_and(|s| s != backend)
                })
        }
        EntryFate::Replaced(_) | EntryFate::Unreachable => false,
    }
}

/// True when an entry can be removed by the sweep: whatever packet comes next, it is invalid
/// (its service is gone, or it expired, was drained or was flushed). Entries that are only
/// invalid for some packets (CP-5) are left for the next packet to replace.
pub fn is_reclaimable(
    key_service: u16,
    value: &EntryValue,
    idle_ms: u64,
    snap: &Snapshot,
    now: Time,
) -> bool {
    let Some(svc) = snap.service(key_service) else { return true };
    // A peer's entry not yet used here is reclaimed by its lifetime and backend only (FS-2).
    let copy = value.epoch == SYNCED_EPOCH;
    let flushed = value.epoch != svc.epoch && !copy;
    let idle_ms = if copy { copy_idle(idle_ms, snap) } else { idle_ms };
    if idle_ms >= svc.idle_timeout_ms || flushed {
        return true;
    }
    let r = BackendRef::from_u32(value.backend);
    snap.backend(r.slot).is_none_or(|b| b.gen != r.gen || b.service != svc.id || !b.is_live(now))
}
