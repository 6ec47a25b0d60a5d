//! Request and reply bodies: the server serialises them, `spillwayctl` and the tests read them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Every error reply.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorReply {
    /// What went wrong, in one message.
    pub error: String,
    /// For a rejected configuration: every problem with its position.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<ConfigProblem>,
}

/// One problem of a rejected configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigProblem {
    /// Dotted field path.
    pub field: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// What is wrong.
    pub message: String,
}

/// `GET /v1/status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusReply {
    /// Milliseconds since the daemon started.
    pub uptime_ms: u64,
    /// The published snapshot's generation.
    pub generation: u64,
    /// The configuration file.
    pub config: String,
    /// Data-plane workers.
    pub workers: usize,
    /// Configured services.
    pub services: usize,
    /// Services with `advanced` (section 7).
    #[serde(default)]
    pub advanced_services: usize,
    /// Groups of those services drained by auto capacity drain (AL-6) now.
    #[serde(default)]
    pub auto_drained_groups: usize,
    /// Backend counts.
    pub backends: BackendCounts,
    /// Conntrack totals over the workers.
    pub conntrack: ConntrackTotals,
    /// Per worker, the generation of the snapshot it decides with: the configuration in force
    /// everywhere once each is at least `generation`.
    #[serde(default)]
    pub worker_generations: Vec<u64>,
}

/// Backend counts of the status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendCounts {
    /// Configured backends.
    pub total: usize,
    /// Configured backends whose effective health is healthy.
    pub healthy: usize,
    /// Configured backends drained by the operator.
    pub drained: usize,
    /// Removed backends still draining (CD-3).
    pub draining: usize,
}

/// Conntrack totals of the status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConntrackTotals {
    /// Entries in every shard.
    pub entries: u64,
    /// Capacity of every shard.
    pub capacity: u64,
}

/// `GET /v1/services`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServicesReply {
    /// Snapshot generation.
    pub generation: u64,
    /// Services in id order.
    pub services: Vec<ServiceInfo>,
}

/// One service.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServiceInfo {
    /// Name.
    pub name: String,
    /// Stable id.
    pub id: u16,
    /// Forwarding rules.
    pub rules: Vec<RuleInfo>,
    /// Policy settings.
    pub policy: PolicyInfo,
    /// FO-9 flush epoch.
    pub epoch: u32,
    /// FO-7 kind of the original eligible set A.
    pub eligible_kind: String,
    /// Size of A.
    pub eligible_size: usize,
    /// Members of A (`addr` or `addr:port`), sorted.
    pub eligible: Vec<String>,
    /// Size of the set clients without a zonal match get (= A).
    pub default_size: usize,
    /// Per zone of the topology: zonal match (ZA-2), spill and the final set's size.
    pub zones: Vec<ZoneChoiceInfo>,
    /// Section 7 state, for a service with `advanced` (`null` otherwise).
    #[serde(default)]
    pub advanced: Option<AdvancedInfo>,
    /// A fingerprint of the service's consistent-hash tables (hex): equal on every instance
    /// with the same configuration, `hash_seed` and health verdicts.
    #[serde(default)]
    pub table_fingerprint: String,
}

/// A service's advanced load balancing (section 7).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdvancedInfo {
    /// AL-1..AL-4: `WATERFALL_BY_REGION`, ...
    pub algorithm: String,
    /// Unit of capacities, loads and demand: `new_connections_per_second` or
    /// `connections`.
    pub unit: String,
    /// AL-7 threshold (percent).
    pub failover_health_threshold: u8,
    /// Groups, in configuration order.
    pub groups: Vec<AdvancedGroupInfo>,
    /// Per client zone of the topology, then clients without a zone (`zone: null`).
    pub clients: Vec<AdvancedClientInfo>,
}

/// One group's capacity, health and load (in the service's unit).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdvancedGroupInfo {
    /// Group name.
    pub name: String,
    /// Zone name.
    pub zone: String,
    /// A preferred group: filled up to its capacity first, in latency order (AL-5).
    pub preferred: bool,
    /// Configured endpoints (operator-drained ones excluded).
    pub endpoints: usize,
    /// Healthy endpoints.
    pub healthy: usize,
    /// Capacity now (per endpoint x healthy endpoints in the eligible set x scaler; 0
    /// drained); `null` when unbounded.
    pub capacity: Option<f64>,
    /// Measured load / capacity; `null` when the capacity is unbounded or 0.
    pub utilisation: Option<f64>,
    /// Smoothed measured load.
    pub measured: f64,
    /// Load the published weights send it, from the smoothed demand.
    pub expected_load: f64,
    /// AL-6: drained by auto capacity drain.
    pub auto_drained: bool,
    /// AL-7: share of its traffic the group keeps (`min(1, h / T)`).
    pub retained: f64,
}

/// One client zone's demand and split.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdvancedClientInfo {
    /// Client zone name; `null` for clients without a zone.
    pub zone: Option<String>,
    /// Smoothed offered load.
    pub demand: f64,
    /// Published share of its new connections per group (sums to 1, or to 0 when no
    /// group can take traffic and the choice falls back to the eligible set).
    pub shares: BTreeMap<String, f64>,
}

/// One forwarding rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleInfo {
    /// VIP or destination prefix.
    pub destination: String,
    /// `TCP`, `UDP` or `L3_DEFAULT`.
    pub protocol: String,
    /// `ALL` or `80,443,8000-8080`.
    pub ports: String,
}

/// A service's policy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyInfo {
    /// Session affinity (SA-1..SA-4).
    pub session_affinity: String,
    /// Both directions of a flow hash alike: the tuple is put in canonical order before hashing (SA-8).
    pub symmetric_hashing: bool,
    /// `PER_CONNECTION` or `PER_SESSION`: what the tracking key holds (CT-1).
    pub tracking_mode: String,
    /// Whether entries persist on a backend that became unhealthy (CP-1..CP-4).
    pub persistence: String,
    /// Seconds without a packet after which an entry expires (CT-8).
    pub idle_timeout_sec: u64,
    /// Seconds a removed backend's entries stay valid (CD-3; 0: invalid at once).
    pub draining_timeout_sec: u32,
    /// Failover groups are configured, so FO-2 (not FO-1) chooses the eligible set.
    pub has_failover_groups: bool,
    /// Healthy share of primaries below which failover backends take over (FO-2).
    pub failover_ratio: f64,
    /// Drop new connections when no backend at all is healthy, instead of using the unhealthy primaries (FO-3).
    pub drop_traffic_if_unhealthy: bool,
    /// Invalidate the service's entries when the eligible set flips between primaries and failovers (FO-9).
    pub disable_connection_drain_on_failover: bool,
    /// Section 4 setting.
    pub zonal_affinity: String,
    /// ZA-5 ratio, for `ZONAL_AFFINITY_SPILL_CROSS_ZONE`.
    pub spillover_ratio: Option<f64>,
    /// `IPIP`, `GUE:port` or `L2`.
    pub encapsulation: String,
}

/// A service's choice for clients of one zone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneChoiceInfo {
    /// Zone name.
    pub zone: String,
    /// A zonal match happened (ZA-2): zonal affinity is on, the client is compatible and the zonal-match test set has members in its zone.
    pub zonal_match: bool,
    /// SPILL_CROSS_ZONE fell back to A.
    pub spilled: bool,
    /// Size of the final set for this zone's clients.
    pub size: usize,
}

/// `GET /v1/backends`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackendsReply {
    /// Snapshot generation.
    pub generation: u64,
    /// Backends in slot order.
    pub backends: Vec<BackendInfo>,
}

/// One configured or draining backend.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackendInfo {
    /// Service name.
    pub service: String,
    /// Address.
    pub address: String,
    /// Port (0: none).
    pub port: u16,
    /// Group name.
    pub group: String,
    /// Zone name.
    pub zone: String,
    /// `primary` or `failover`.
    pub role: String,
    /// The probes' verdict: `healthy`, `unhealthy` or `unknown`.
    pub probe: String,
    /// HC-2 override: `healthy`, `unhealthy` or `auto`.
    #[serde(rename = "override")]
    pub health_override: String,
    /// Effective health (override, else probe).
    pub healthy: bool,
    /// Drained by the operator (no new connections).
    pub drained: bool,
    /// `active` or `draining` (removed, CD-3).
    pub status: String,
    /// When a removed backend's entries stop being valid (ms since start).
    pub draining_deadline_ms: Option<u64>,
    /// Time left until then.
    pub draining_remaining_ms: Option<u64>,
    /// Weight of its group (CH-3); none once removed.
    pub weight: Option<u32>,
    /// Stable slot.
    pub slot: u16,
    /// Slot generation (CD-4).
    pub generation: u16,
    /// In its service's default eligible set now.
    pub eligible: bool,
    /// Its health check's name.
    pub check: Option<String>,
    /// The last probe's result.
    pub last_result: Option<String>,
    /// The last probe's duration.
    pub last_latency_ms: Option<f64>,
}

/// Body of `POST /v1/backends/{addr}/health`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthRequest {
    /// `healthy`, `unhealthy` or `auto`.
    pub health: Option<String>,
    /// Only this service's backend at the address.
    #[serde(default)]
    pub service: Option<String>,
}

/// Body of `POST /v1/backends/{addr}/drain` and `.../undrain` (may be empty).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainRequest {
    /// Only this service's backend at the address.
    #[serde(default)]
    pub service: Option<String>,
}

/// Reply of the override and drain endpoints: the backends it applied to, after.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ActionReply {
    /// Snapshot generation after the change.
    pub generation: u64,
    /// The backends changed.
    pub backends: Vec<BackendInfo>,
}

/// `POST /v1/reload` on success.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadReply {
    /// Snapshot generation after the reload.
    pub generation: u64,
    /// Services now configured.
    pub services: usize,
    /// Backends added (`service/addr[:port]`).
    pub added: Vec<String>,
    /// Backends removed, with their draining deadline.
    pub removed: Vec<RemovedBackend>,
    /// Backends re-added while draining (CD-4).
    pub undrained: Vec<String>,
}

/// A removed backend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemovedBackend {
    /// `service/addr[:port]`.
    pub backend: String,
    /// When its entries stop being valid (ms since start).
    pub draining_deadline_ms: u64,
}

/// One resolved next hop of `GET /v1/neighbours`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeighbourEntry {
    /// The next hop (a backend on-link, or a gateway).
    pub addr: String,
    /// Its MAC, `02:00:00:00:00:01`.
    pub mac: String,
}

/// `GET /v1/neighbours`: the table the workers use, and what the resolver did with the ARP
/// replies and neighbour advertisements it heard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeighboursReply {
    /// Resolved next hops, by address.
    pub neighbours: Vec<NeighbourEntry>,
    /// Answers by outcome (`learned`, `confirmed`, `changed`, `ignored_unsolicited`,
    /// `ignored_conflict`, `rate_limited`) and `publishes`.
    pub answers: BTreeMap<String, u64>,
}

/// `GET /v1/conntrack`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConntrackReply {
    /// Per worker.
    pub workers: Vec<WorkerConntrack>,
    /// Sums (`worker` is the number of workers).
    pub total: WorkerConntrack,
}

/// One worker's connection table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerConntrack {
    /// Worker index.
    pub worker: usize,
    /// Entries.
    pub entries: u64,
    /// Capacity.
    pub capacity: u64,
    /// Inserts so far.
    pub inserts: u64,
    /// Live entries evicted from full sets so far.
    pub evictions: u64,
}

/// `GET /v1/conntrack/lookup`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowLookupReply {
    /// The flow asked about.
    pub flow: String,
    /// The service whose rule matches it.
    pub service: String,
    /// Its tracking key (CT-1).
    pub tracking_key: String,
    /// Its conntrack bucket hash.
    pub tracking_hash: String,
    /// Every worker's answer.
    pub workers: Vec<WorkerEntry>,
}

/// One worker's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerEntry {
    /// Worker index.
    pub worker: usize,
    /// `found`, `absent` or `no_answer` (no reply within the timeout).
    pub state: String,
    /// The entry, when found.
    pub entry: Option<EntryInfo>,
}

/// A conntrack entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryInfo {
    /// The backend the slot holds now.
    pub backend: Option<String>,
    /// Its service.
    pub backend_service: Option<String>,
    /// Recorded slot.
    pub slot: u16,
    /// Recorded slot generation.
    pub generation: u16,
    /// The slot still holds the backend the entry was made for.
    pub current_generation: bool,
    /// Milliseconds since the last packet.
    pub idle_ms: u64,
    /// FO-9 epoch of the entry.
    pub epoch: u32,
    /// Made while its backend was unhealthy (CP-5).
    pub created_unhealthy: bool,
}

/// `GET /v1/explain`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExplainReply {
    /// The flow asked about.
    pub flow: String,
    /// Snapshot generation explained against.
    pub generation: u64,
    /// Matched service.
    pub service: Option<String>,
    /// Client zone when zonally compatible (ZA-1).
    pub client_zone: Option<String>,
    /// FO-7 kind.
    pub eligible_kind: Option<String>,
    /// A zonal match happened (ZA-2): zonal affinity is on, the client is compatible and the zonal-match test set has members in its zone.
    pub zonal_match: bool,
    /// Spilled to A.
    pub spilled: bool,
    /// Size of the final set.
    pub eligible_size: usize,
    /// CT-2: this packet skips the lookup.
    pub new_connection_syn: bool,
    /// CT-1 tracking key.
    pub tracking_key: Option<String>,
    /// Conntrack bucket hash.
    pub tracking_hash: String,
    /// Selection-tuple hash (CH-1).
    pub selection_hash: String,
    /// The backend a new connection gets now.
    pub hashed_backend: Option<String>,
    /// Workers asked for an entry.
    pub workers_asked: usize,
    /// Workers that answered in time.
    pub workers_answered: usize,
    /// The flow's entry and whether it is valid now.
    pub entry: Option<ExplainEntry>,
    /// Where the packet goes now.
    pub backend: Option<String>,
    /// The reason `decide` would report.
    pub reason: String,
    /// Section 7: the client zone's split of new connections, `{group: share}`.
    #[serde(default)]
    pub group_shares: Option<BTreeMap<String, f64>>,
    /// Section 7: the group of `backend`.
    #[serde(default)]
    pub backend_group: Option<String>,
    /// QL-3: what the connection ID given (`quic_cid`) says, for a service with QUIC-LB.
    #[serde(default)]
    pub quic: Option<QuicDecodeInfo>,
}

/// What a QUIC connection ID decodes to (QL-1, QL-3, QL-4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuicDecodeInfo {
    /// The configuration its first octet picks, when it is one of the service's.
    pub config: Option<u8>,
    /// The server ID decoded (hex).
    pub server_id: Option<String>,
    /// The backend that server ID names.
    pub backend: Option<String>,
    /// Why a packet without a valid entry would go by its 4-tuple instead (the
    /// `spillway_quic_fallback_total` reason), or `null` when it goes to `backend`.
    pub fallback: Option<String>,
}

/// The entry an explanation used.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExplainEntry {
    /// The worker holding it.
    pub worker: usize,
    /// The entry.
    pub entry: EntryInfo,
    /// Valid now (NX-1).
    pub valid: bool,
    /// Why not (CT-13 order).
    pub invalid_reason: Option<String>,
}

/// One flow of the dump.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowInfo {
    /// The worker whose table holds it.
    pub worker: usize,
    /// `tcp`, `udp`, ...
    pub proto: String,
    /// The client, `address:port` (the address alone without ports).
    pub client: String,
    /// The VIP, `address:port`.
    pub vip: String,
    /// The service, by name (`null` when it is gone).
    pub service: Option<String>,
    /// The backend the entry pins, `address` or `address:port` (`null` when its slot was
    /// freed).
    pub backend: Option<String>,
    /// Milliseconds since its last packet.
    pub idle_ms: u64,
    /// `live`, `draining` or `expired`.
    pub state: String,
    /// A peer instance's entry that no packet has used here yet (fleet sync, FS-2).
    pub peer: bool,
}

/// `GET /v1/conntrack/flows`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowsReply {
    /// The first `limit` matching flows, worker by worker, in table order.
    pub flows: Vec<FlowInfo>,
    /// Every matching flow, listed or not.
    pub matched: u64,
    /// Entries read from the tables.
    pub scanned: u64,
    /// With `count_by`: matches per backend (or service), by name.
    pub counts: Option<BTreeMap<String, u64>>,
    /// Workers that did not answer a slice (their part of the dump is missing).
    pub incomplete_workers: Vec<usize>,
    /// How long the dump took.
    pub duration_ms: u64,
}

/// `POST /v1/reload/preview`: what a candidate configuration would do (nothing is applied).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PreviewReply {
    /// Backends the candidate adds (`service/address`).
    pub added: Vec<String>,
    /// Backends it removes (they drain when their service drains, else go at once).
    pub removed: Vec<String>,
    /// Per service: `same`, `changed`, `added` or `removed`, and the share of its table
    /// positions whose backend changes.
    pub services: Vec<ServicePreview>,
    /// Per backend: its share of its service's new connections before and after.
    pub backends: Vec<BackendPreview>,
    /// Per service and client zone whose zonal choice changes (ZA-2, ZA-4): before and after.
    #[serde(default)]
    pub zones: Vec<ZonePreview>,
    /// The live connections by what would happen to them.
    pub connections: ConnectionFates,
    /// The same, per `service/backend` the connections are pinned to.
    pub by_backend: BTreeMap<String, ConnectionFates>,
    /// Up to 20 connections of each fate but `stay`.
    pub examples: Vec<PreviewFlow>,
    /// Workers that did not answer (their connections are not counted).
    pub incomplete_workers: Vec<usize>,
    /// True when connections would be dropped: a deployment pipeline stops here.
    pub would_drop: bool,
    /// How long reading the tables took.
    pub duration_ms: u64,
}

/// One service in a [`PreviewReply`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServicePreview {
    /// Its name.
    pub service: String,
    /// `same`, `changed`, `added` or `removed`.
    pub change: String,
    /// Share of its consistent-hash table positions whose backend changes (0 to 1).
    pub positions_changed: f64,
}

/// One backend in a [`PreviewReply`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackendPreview {
    /// Its service.
    pub service: String,
    /// Its address (`address:port` with a port).
    pub backend: String,
    /// Its share of the service's table now.
    pub share_before: f64,
    /// With the candidate (backends it adds counted healthy).
    pub share_after: f64,
}

/// One service's choice for the clients of one zone in a [`PreviewReply`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZonePreview {
    /// The service.
    pub service: String,
    /// The client zone.
    pub zone: String,
    /// The running choice (`None`: not a zone then).
    pub before: Option<ZoneChoice>,
    /// The candidate's.
    pub after: Option<ZoneChoice>,
}

/// What a service gives the new connections of one client zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneChoice {
    /// ZA-2: the zone's own backends are chosen from.
    pub zonal_match: bool,
    /// SPILL_CROSS_ZONE: the zone fell below its spillover ratio and spills to every zone.
    pub spilled: bool,
    /// Backends in the final set.
    pub eligible: usize,
}

/// Live connections by fate.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionFates {
    /// Backend kept, and still its table position's.
    pub stay: u64,
    /// Backend kept by its entry, but its table position names another: it would change
    /// backend if it lost its entry.
    pub moves: u64,
    /// Backend removed with draining: kept until the deadline.
    pub drain: u64,
    /// Backend removed without draining, or its service or rule removed.
    pub dropped: u64,
}

/// A connection of a [`PreviewReply`]'s examples.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviewFlow {
    /// `moves`, `drains` or `dropped`.
    pub fate: String,
    /// Why.
    pub why: Option<String>,
    /// The client, `address:port`.
    pub client: String,
    /// The VIP, `address:port`.
    pub vip: String,
    /// Its service.
    pub service: String,
    /// The backend it is pinned to.
    pub backend: String,
}

/// `GET /v1/counters`: the workers' counters now (module `api::counters`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountersReply {
    /// Milliseconds since the start (the counters' clock).
    pub uptime_ms: u64,
    /// Per worker.
    pub workers: Vec<WorkerCountersInfo>,
    /// Per service, summed over the workers.
    pub services: Vec<ServiceCounters>,
    /// Per backend slot (see `GET /v1/backends` for which backend holds it), summed.
    pub slots: Vec<SlotCounters>,
}

/// One worker's counters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerCountersInfo {
    /// Worker index.
    pub worker: usize,
    /// Packets received.
    pub rx_packets: u64,
    /// Packets transmitted.
    pub tx_packets: u64,
    /// Packets forwarded (every forward reason).
    pub forwarded: u64,
    /// Packets dropped, by reason (those that happened).
    pub dropped: BTreeMap<String, u64>,
    /// Entries in its connection table.
    pub conntrack_entries: u64,
}

/// A service's traffic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceCounters {
    /// Its name.
    pub service: String,
    /// Packets sent on to its backends.
    pub packets: u64,
    /// Connection entries made.
    pub new_connections: u64,
}

/// A backend slot's traffic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotCounters {
    /// The slot.
    pub slot: u16,
    /// Packets sent on to it.
    pub packets: u64,
    /// Connection entries made for it.
    pub new_connections: u64,
    /// Entries that pin it now.
    pub tracked: u64,
}

/// What BIRD's control socket said last.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BirdStatus {
    /// It answered with its greeting.
    pub up: bool,
    /// Its greeting (`BIRD 2.0.12 ready.`), or why it did not answer.
    pub detail: String,
}

/// `GET /v1/instance`, and the reply of `POST /v1/instance/drain` and `/undrain`: the
/// instance's place in its fleet.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InstanceReply {
    /// `starting`, `serving`, `drained` or `stopping`.
    pub phase: String,
    /// Seconds in that phase.
    pub in_phase_sec: f64,
    /// While starting: what readiness waits for.
    pub waiting_for: Option<String>,
    /// Seconds since a packet was last forwarded.
    pub quiet_for_sec: f64,
    /// Drained or stopping, and no packet forwarded for `announce.quiet_sec` (the phase that
    /// long too): the routers have moved the traffic away.
    pub traffic_stopped: bool,
    /// VIPs wanted now, each with the services that want it.
    pub wanted: BTreeMap<String, Vec<String>>,
    /// VIPs in the route table (as of the last update that worked).
    pub announced: Vec<String>,
    /// Failed updates of the route table.
    pub route_errors: u64,
    /// The last update's error, until one works.
    pub last_error: Option<String>,
    /// BIRD's control socket, when `announce.bird_socket` is set.
    pub bird: Option<BirdStatus>,
    /// Per service, its table fingerprint (hex), to compare instances.
    pub fingerprints: BTreeMap<String, String>,
    /// Fleet sync (FS), when configured: the bulk sync, the peers, what went each way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet_sync: Option<SyncReply>,
}

/// One peer as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PeerStatus {
    /// Its configured id.
    pub id: u32,
    /// Its address.
    pub address: String,
    /// Its hellos, proven live, arrive.
    pub up: bool,
    /// It has proven it is live since this instance started (a hello echoed this life's
    /// challenge): its datagrams are accepted.
    #[serde(default)]
    pub proven: bool,
    /// Its last hello said it accepts this instance's datagrams (it has proven this life live):
    /// entries are sent to it.
    #[serde(default)]
    pub accepts: bool,
    /// The epoch (life) of its session.
    #[serde(default)]
    pub epoch: Option<u64>,
    /// Milliseconds since its last proven hello, if any came.
    pub last_hello_ms: Option<u64>,
    /// Entries received from it.
    pub entries_received: u64,
    /// Its answer to this instance's bulk request has ended, every count agreeing.
    pub bulk_answered: bool,
    /// Entries its answer held (all attempts).
    #[serde(default)]
    pub bulk_entries: u64,
    /// Entries its answer's counts found missing (asked for again).
    #[serde(default)]
    pub bulk_missing: u64,
    /// Its tables have differed from this instance's for longer than the alarm waits.
    #[serde(default)]
    pub tables_differ: bool,
    /// Since how long (seconds) its tables differ, if they do.
    #[serde(default)]
    pub tables_differ_sec: Option<f64>,
    /// Its datagrams never received (gaps in its sequence numbers).
    #[serde(default)]
    pub sequence_gaps: u64,
}

/// The thread's state for the API: the bulk sync and the peers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct SyncStatus {
    /// `pending`, `done` or `timed_out`.
    pub bulk: String,
    /// The peers, by id.
    pub peers: Vec<PeerStatus>,
    /// The oldest snapshot generation every worker has finished an own pass under (0 before
    /// the first): once it is the current generation and the peers have received what was
    /// sent, the peers hold every entry at risk after that change.
    pub scanned_generation: u64,
}

/// What fleet sync lost, and where (`GET /v1/instance`'s `fleet_sync.lost`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct SyncLosses {
    /// Datagrams the kernel dropped on receive (the socket's buffer full).
    pub kernel_drops: u64,
    /// Peers' datagrams never received (gaps in their sequence numbers).
    pub sequence_gaps: u64,
    /// Entries the counts of bulk answers found missing (asked for again).
    pub bulk_missing: u64,
    /// Datagrams the kernel refused to send.
    pub send_errors: u64,
    /// Peers' entries or removals a worker's full queue refused.
    pub worker_queue_full: u64,
}

/// Fleet sync in `GET /v1/instance` (and `spillwayctl instance`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct SyncReply {
    /// The bulk sync at start and the peers.
    #[serde(flatten)]
    pub status: SyncStatus,
    /// The bulk sync's duration, in milliseconds (once over).
    pub bulk_ms: Option<u64>,
    /// Entries received in the answers to this instance's bulk request.
    #[serde(default)]
    pub bulk_entries: u64,
    /// Parts of those answers asked for again.
    #[serde(default)]
    pub bulk_retries: u64,
    /// Entries sent to the peers (each once, whatever the number of peers).
    pub entries_sent: u64,
    /// Entries sent in bulk answers.
    #[serde(default)]
    pub answer_entries_sent: u64,
    /// Entries received from them.
    pub entries_received: u64,
    /// Removals sent to the peers (FS-8).
    #[serde(default)]
    pub removes_sent: u64,
    /// Removals received from them.
    #[serde(default)]
    pub removes_received: u64,
    /// Authentic hellos that proved nothing: from a peer that had not heard this life yet, or
    /// replayed from an earlier one.
    #[serde(default)]
    pub hellos_unproven: u64,
    /// Datagrams refused, by reason (only reasons seen).
    pub refused: BTreeMap<String, u64>,
    /// Limits peers ran into, by limit (only limits seen).
    #[serde(default)]
    pub limited: BTreeMap<String, u64>,
    /// What was lost, and where.
    #[serde(default)]
    pub lost: SyncLosses,
    /// This life's epoch.
    #[serde(default)]
    pub epoch: u64,
    /// The id of the key it seals with (hex).
    #[serde(default)]
    pub key_id: String,
    /// Bytes of the sync socket's receive buffer.
    #[serde(default)]
    pub socket_buffer: u64,
}

/// Why a capture ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoppedBy {
    /// It wrote its count of packets.
    Count,
    /// Its duration passed.
    Duration,
    /// It wrote its size in bytes.
    Bytes,
    /// The stream's reader went away.
    ClientGone,
    /// The workers stopped (the daemon is stopping).
    WorkersGone,
}

/// What a capture did, running or ended (`GET /v1/capture`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureSummary {
    /// The capture's number (counts from 1 in each daemon).
    pub id: u64,
    /// Still under way.
    pub running: bool,
    /// Its filter and points, as given.
    pub filter: String,
    /// Packets written, in all.
    pub packets: u64,
    /// Packets written at `received`.
    pub received: u64,
    /// Packets written at `sent`.
    pub sent: u64,
    /// Packets written at `dropped`.
    pub dropped: u64,
    /// Records the workers could not keep (their ring was full).
    pub lost: u64,
    /// Records taken from the rings after a bound was reached, not written.
    pub discarded: u64,
    /// Bytes of pcapng written.
    pub bytes: u64,
    /// Milliseconds it ran.
    pub duration_ms: u64,
    /// Why it ended (when it has).
    pub stopped_by: Option<StoppedBy>,
}
