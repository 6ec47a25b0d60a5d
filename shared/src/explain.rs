//! "Why does this flow go there?": the decision for one flow, spelled out, without changing
//! anything. The admin API's `explain` and `spillwayctl explain` use it. It calls the same
//! pieces as [`crate::decide::decide`] (rule match, [`judge_found`], [`select`]), so it cannot
//! disagree with the workers. [`quic_decode`] spells out what a QUIC connection ID says
//! (QL-1, QL-3, QL-4) for `explain` and `simulate`.

use crate::conntrack::{key_hash, Entry};
use crate::decide::{judge_found, quic_verdict, select, ForwardReason, QuicFallback, SYNCED_EPOCH};
use crate::eligible::EligibleKind;
use crate::flow::{is_new_connection_syn, selection_tuple, tracking_key, FlowKey, PacketInfo};
use crate::model::Endpoint;
use crate::snapshot::{BackendRef, ServiceView, Snapshot};
use crate::time::Time;

/// The explanation of one flow against one snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explanation {
    /// The matched service, if a rule matches.
    pub service: Option<String>,
    /// Its tracking key (CT-1).
    pub tracking_key: Option<FlowKey>,
    /// Its conntrack bucket hash (to find the entry in a shard).
    pub tracking_hash: u64,
    /// The selection tuple's hash (CH-1).
    pub selection_hash: u64,
    /// The client's zone when zonally compatible (ZA-1).
    pub client_zone: Option<String>,
    /// FO-7 kind of the original eligible set.
    pub kind: Option<EligibleKind>,
    /// A zonal match happened (ZA-2): zonal affinity is on, the client is compatible and the zonal-match test set has members in its zone.
    pub zonal_match: bool,
    /// SPILL_CROSS_ZONE spilled to the whole eligible set.
    pub spilled: bool,
    /// Size of the final set.
    pub eligible_size: usize,
    /// Would this packet skip the lookup (CT-2)?
    pub new_connection_syn: bool,
    /// The backend a new connection gets now.
    pub hashed_backend: Option<Endpoint>,
    /// The tracked entry's backend, if an entry was given.
    pub entry_backend: Option<Endpoint>,
    /// `Ok` when the entry is valid now, else why not (CT-13).
    pub entry_valid: Option<Result<(), ForwardReason>>,
    /// Where the packet goes now, and why.
    pub backend: Option<Endpoint>,
    /// The reason label `decide` would report.
    pub reason: &'static str,
    /// What the given QUIC connection ID says, for a service with QUIC-LB.
    pub quic: Option<QuicDecode>,
}

/// What a QUIC short header's destination connection ID says for a service with QUIC-LB.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuicDecode {
    /// The configuration its first octet picks, when it is one of the service's.
    pub config: Option<u8>,
    /// The server ID decoded under it (hex).
    pub server_id: Option<String>,
    /// The backend that server ID names.
    pub backend: Option<Endpoint>,
    /// Why a packet without a valid entry would go by its 4-tuple instead (QL-4), or `None`
    /// when it goes to `backend` (QL-3).
    pub fallback: Option<QuicFallback>,
}

/// Decode `cid` (a destination connection ID from its first octet) for `svc`, and judge the
/// backend it names as [`crate::decide`] does for a packet of protocol `proto` at `now`.
/// `None` when the service has no QUIC-LB.
pub fn quic_decode(
    cid: &[u8],
    svc: &ServiceView,
    snap: &Snapshot,
    proto: u8,
    now: Time,
) -> Option<QuicDecode> {
    let routed = svc.quic.as_deref()?.route(cid);
    let fallback = quic_verdict(&routed, svc, snap, proto, now).err();
    let (decoded, slot) = match routed {
        Ok(r) => (Some((r.config, r.server_id)), Some(r.slot)),
        Err((decoded, _)) => (decoded, None),
    };
    Some(QuicDecode {
        config: decoded.map(|(c, _)| c),
        server_id: decoded.map(|(_, s)| s.to_hex()),
        backend: slot.and_then(|s| snap.backend(s)).map(|b| b.endpoint),
        fallback,
    })
}

/// Explain `p` against `snap`, with the flow's conntrack entry if one was found, and for a
/// QUIC short-header packet its destination connection ID `quic_cid` (QL-3).
pub fn explain(
    p: &PacketInfo,
    snap: &Snapshot,
    entry: Option<&Entry>,
    now: Time,
    quic_cid: Option<&[u8]>,
) -> Explanation {
    let mut x = Explanation {
        service: None,
        tracking_key: None,
        tracking_hash: 0,
        selection_hash: 0,
        client_zone: None,
        kind: None,
        zonal_match: false,
        spilled: false,
        eligible_size: 0,
        new_connection_syn: false,
        hashed_backend: None,
        entry_backend: None,
        entry_valid: None,
        backend: None,
        reason: "no_matching_rule",
        quic: None,
    };
    let Some(svc) = snap.service_for(p) else { return x };
    let endpoint = |slot: u16| snap.backend(slot).map(|b| b.endpoint);
    x.service = Some(svc.name.to_string());
    let key = tracking_key(p, svc.tracking, svc.affinity, svc.symmetric_hashing, svc.id);
    x.tracking_key = Some(key);
    x.tracking_hash = key_hash(&key);
    x.selection_hash = snap.hasher.hash(&selection_tuple(p, svc.affinity, svc.symmetric_hashing));
    let zone = snap.client_zone(p.src);
    x.client_zone = zone.and_then(|z| snap.zone_names.get(usize::from(z)).cloned());
    let choice = svc.choice(zone);
    x.kind = Some(choice.kind);
    x.zonal_match = choice.zonal_match;
    x.spilled = choice.spilled;
    x.eligible_size = choice.members.len();
    x.new_connection_syn = is_new_connection_syn(p, svc.tracking, svc.affinity);
    x.hashed_backend = select(p, svc, snap).and_then(endpoint);
    let mut stale = None;
    if let (Some(e), false) = (entry, x.new_connection_syn) {
        x.entry_backend = endpoint(BackendRef::from_u32(e.value.backend).slot);
        // A peer's entry not used here yet is judged as this instance's (FS-3).
        let peers = e.value.epoch == SYNCED_EPOCH;
        let verdict = judge_found(&e.value, e.idle_ms, svc, snap, p, now).1;
        x.entry_valid = Some(verdict.map(|_| ()));
        match verdict {
            Ok(slot) => {
                x.backend = endpoint(slot);
                let reason =
                    if peers { ForwardReason::SyncTakeover } else { ForwardReason::ConntrackHit };
                x.reason = reason.as_str();
                return x;
            }
            Err(r) => stale = Some(r),
        }
    }
    x.quic = quic_cid.and_then(|cid| quic_decode(cid, svc, snap, p.proto, now));
    if let Some(QuicDecode { backend: Some(b), fallback: None, .. }) = x.quic {
        x.backend = Some(b);
        x.reason = ForwardReason::QuicCid.as_str();
        return x;
    }
    x.backend = x.hashed_backend;
    x.reason = match (x.backend, stale) {
        (None, _) => "no_eligible_backend",
        (Some(_), Some(r)) => r.as_str(),
        (Some(_), None) => ForwardReason::NewConnection.as_str(),
    };
    x
}
