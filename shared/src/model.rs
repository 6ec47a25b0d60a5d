//! The validated service model: what the control plane compiles its YAML into, and what the
//! simulator and tests build directly. Everything here has already passed validation (the
//! control plane's `config` module does that); the core trusts it.
//!
//! Identities are by name and address, never by position: a backend is identified by
//! (service name, endpoint address, port), a service by its name, a zone by its name. The
//! policy state (`state`) turns these into the dense, stable ids the data path indexes.

use crate::addr::{Addr, Prefix};
use crate::policy::{
    api_names, Affinity, FailoverPolicy, Persistence, TrackingMode, ZonalAffinity,
};
use std::fmt;

/// Index of a zone in [`Model::zones`].
pub type ZoneId = u16;

/// A whole deployment: topology and services.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    /// CH-4 hash key (the built-in [`crate::flow::DEFAULT_HASH_SEED`] when none is configured).
    pub hash_seed: u64,
    /// Maglev table size M (a prime from [`crate::maglev::TABLE_SIZES`]).
    pub table_size: u32,
    /// The balancer's own region (ZA-1: only client subnets of this region are compatible).
    pub region: String,
    /// Every zone that groups or client subnets name.
    pub zones: Vec<Zone>,
    /// Client subnets, for the client zone of a packet (ZA-1).
    pub client_subnets: Vec<ClientSubnet>,
    /// The services.
    pub services: Vec<Service>,
    /// Fleet sync: how much longer than its service's idle timeout a peer's copy lasts after
    /// its owner last sent it (FS-2): twice `fleet.sync.refresh_sec`; 0 without sync.
    pub copy_grace_ms: u64,
    /// Fleet sync: how long after a service's tables change a TCP packet that finds no entry
    /// and opens no connection is still given the previous tables' backend (FS-11):
    /// `fleet.sync.previous_table_sec`; 0 without sync.
    pub previous_table_ms: u64,
}

/// A zone and the region it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Zone {
    /// Zone name (e.g. `zone-a`).
    pub name: String,
    /// Region name.
    pub region: String,
}

/// Where the clients of a source subnet are (ZA-1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientSubnet {
    /// The source prefix.
    pub prefix: Prefix,
    /// The zone of its clients; `None` for a regional subnet (VPN, interconnect), which is
    /// never zonally compatible.
    pub zone: Option<ZoneId>,
}

/// One load-balanced service: forwarding rules plus a backend service.
#[derive(Clone, Debug, PartialEq)]
pub struct Service {
    /// Unique name.
    pub name: String,
    /// What traffic belongs to the service.
    pub rules: Vec<Rule>,
    /// SA: session affinity.
    pub affinity: Affinity,
    /// SA-8: hash both directions alike.
    pub symmetric_hashing: bool,
    /// CT-1: tracking mode.
    pub tracking: TrackingMode,
    /// CP: persistence on unhealthy backends.
    pub persistence: Persistence,
    /// CT-8/CT-9: idle timeout in seconds.
    pub idle_timeout_secs: u32,
    /// CD-3: draining timeout in seconds (0 = disabled).
    pub draining_timeout_secs: u32,
    /// Section 3.
    pub failover: FailoverPolicy,
    /// Section 4.
    pub zonal: ZonalAffinity,
    /// How packets reach the backends.
    pub encap: Encap,
    /// Backend groups, primaries and failovers.
    pub groups: Vec<Group>,
    /// Section 7 (advanced load balancing, AL-1..AL-8): `None` (the default) keeps section 4.
    pub advanced: Option<AdvancedPolicy>,
    /// QUIC-LB: the connection-ID configurations and the endpoints' server IDs (`None`, the
    /// default: QUIC goes by its 4-tuple like any UDP).
    pub quic_lb: Option<QuicLbPolicy>,
}

/// A service's QUIC-LB configurations (at most seven, by id) and which endpoint each server ID
/// names under each of them.
#[derive(Clone, Debug, PartialEq)]
pub struct QuicLbPolicy {
    /// The configurations.
    pub configs: crate::quic_lb::Configs,
    /// The endpoints' server IDs.
    pub server_ids: Vec<QuicServerId>,
}

/// One endpoint's server ID under one configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuicServerId {
    /// The endpoint (one of the service's).
    pub endpoint: Endpoint,
    /// The configuration id.
    pub config: u8,
    /// Its server ID there.
    pub server_id: crate::quic_lb::ServerId,
}

/// The advanced load-balancing policy of a service (SPEC section 7). When set, it replaces
/// section 4 (zonal affinity): per client zone, the groups of the original eligible set A get
/// weights from the algorithm, capacity, health and load (see [`crate::advanced`]).
///
/// Group-level settings live in [`AdvancedPolicy::groups`], keyed by group name, so that
/// [`Group`] keeps its shape (it is built field by field elsewhere).
#[derive(Clone, Debug, PartialEq)]
pub struct AdvancedPolicy {
    /// AL-1..AL-4 (default `WATERFALL_BY_REGION`).
    pub algorithm: Algorithm,
    /// AL-7: `failover_health_threshold` T, an integer percent in 1..=99 (default 70).
    pub failover_health_threshold: u8,
    /// AL-6: drain groups with fewer than 25% healthy endpoints.
    pub auto_capacity_drain: bool,
    /// Per-group capacity, scaler and preference, by group name. A group not listed gets
    /// [`GroupAdvanced::default`] (unbounded capacity, scaler 1, not preferred).
    pub groups: Vec<GroupAdvanced>,
    /// How measured load is smoothed and how much a weight must move before it is republished.
    pub damping: Damping,
}

/// The advanced load-balancing algorithms (AL-1..AL-4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// AL-1 `WATERFALL_BY_REGION` (default): even utilisation across the client's region with
    /// the client's own zone first; the excess goes to the next nearest region when full.
    #[default]
    WaterfallByRegion,
    /// AL-2 `SPRAY_TO_REGION`: every client spreads over all groups of its region.
    SprayToRegion,
    /// AL-3 `SPRAY_TO_WORLD`: every client spreads over all groups of all regions.
    SprayToWorld,
    /// AL-4 `WATERFALL_BY_ZONE`: nearest group first, up to capacity, group by group.
    WaterfallByZone,
}

// The API name (`WATERFALL_BY_REGION`, ...), used in YAML and metrics labels.
api_names!(Algorithm {
    WaterfallByRegion => "WATERFALL_BY_REGION",
    SprayToRegion => "SPRAY_TO_REGION",
    SprayToWorld => "SPRAY_TO_WORLD",
    WaterfallByZone => "WATERFALL_BY_ZONE",
});

/// The capacity of one endpoint of a group (section 7 "Capacity").
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum Capacity {
    /// No limit: the group never overflows; proportional splits count its healthy endpoints.
    #[default]
    Unbounded,
    /// `max_rate_per_endpoint`: new connections per second per endpoint.
    RatePerEndpoint(f64),
    /// `max_connections_per_endpoint`: concurrent tracked connections per endpoint.
    ConnectionsPerEndpoint(f64),
}

/// Advanced settings of one group.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupAdvanced {
    /// The group's name (as in [`Group::name`]).
    pub group: String,
    /// Capacity per endpoint.
    pub capacity: Capacity,
    /// `capacity_scaler` in [0, 1]; 0 drains the group (capacity 0).
    pub capacity_scaler: f64,
    /// AL-5: filled first, up to capacity, in latency order.
    pub preferred: bool,
}

impl GroupAdvanced {
    /// Defaults for `group`: unbounded, scaler 1, not preferred.
    pub fn new(group: &str) -> GroupAdvanced {
        GroupAdvanced {
            group: group.to_string(),
            capacity: Capacity::Unbounded,
            capacity_scaler: 1.0,
            preferred: false,
        }
    }
}

/// Damping of the advanced weights (so they do not oscillate).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Damping {
    /// Time constant of the exponential smoothing of measured load, in milliseconds
    /// (default 5000): a sample `dt` after the previous one moves the estimate by
    /// `1 - exp(-dt / tau)` of the difference.
    pub time_constant_ms: u32,
    /// Hysteresis band (default 0.02): a client zone's published weights change only when
    /// some group's share of that zone's traffic would move by more than this (absolute
    /// fraction), or when health, drain or configuration changed.
    pub band: f64,
}

impl Default for Damping {
    fn default() -> Damping {
        Damping { time_constant_ms: 5000, band: 0.02 }
    }
}

/// Default AL-7 threshold (percent).
pub const DEFAULT_FAILOVER_HEALTH_THRESHOLD: u8 = 70;

impl Default for AdvancedPolicy {
    fn default() -> AdvancedPolicy {
        AdvancedPolicy {
            algorithm: Algorithm::default(),
            failover_health_threshold: DEFAULT_FAILOVER_HEALTH_THRESHOLD,
            auto_capacity_drain: false,
            groups: Vec::new(),
            damping: Damping::default(),
        }
    }
}

impl AdvancedPolicy {
    /// The settings of group `name` (defaults when not listed).
    pub fn group(&self, name: &str) -> GroupAdvanced {
        self.groups
            .iter()
            .find(|g| g.group == name)
            .cloned()
            .unwrap_or_else(|| GroupAdvanced::new(name))
    }
}

/// How the data plane sends a packet to a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Encap {
    /// IP-in-IP (IPv4-in-IPv4, IPv6-in-IPv6, IPv4-in-IPv6).
    #[default]
    Ipip,
    /// GUE (variant 1, direct IP in UDP) to this UDP destination port.
    Gue {
        /// Destination UDP port on the backends.
        port: u16,
    },
    /// Rewrite the destination MAC only; backends share the L2 segment and hold the VIP.
    L2,
}

/// A forwarding rule (FR-1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The destination it matches.
    pub dest: RuleDest,
    /// The protocol it matches.
    pub protocol: RuleProtocol,
    /// The destination ports it matches (`All` for `L3_DEFAULT`).
    pub ports: Ports,
}

/// The destination of a forwarding rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RuleDest {
    /// An exact virtual IP.
    Vip(Addr),
    /// A destination prefix (next-hop mode, SA-7).
    Prefix(Prefix),
}

/// The protocol of a forwarding rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RuleProtocol {
    /// TCP only.
    Tcp,
    /// UDP only.
    Udp,
    /// Every IP protocol (`L3_DEFAULT`).
    L3Default,
}

// The API names (the GCP forwarding rule's `IPProtocol`), used in YAML.
api_names!(RuleProtocol {
    Tcp => "TCP",
    Udp => "UDP",
    L3Default => "L3_DEFAULT",
});

/// The destination ports of a forwarding rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Ports {
    /// Every port (and packets without ports, such as fragments and ICMP).
    All,
    /// Inclusive ranges; a single port is `(p, p)`.
    List(Vec<(u16, u16)>),
}

impl Ports {
    /// True when `port` is covered. Packets without ports (`None`) only match `All`.
    pub fn contains(&self, port: Option<u16>) -> bool {
        match (self, port) {
            (Ports::All, _) => true,
            (Ports::List(_), None) => false,
            (Ports::List(r), Some(p)) => r.iter().any(|&(lo, hi)| lo <= p && p <= hi),
        }
    }
}

/// A backend group: endpoints in one zone with one role.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    /// Name, unique within the service.
    pub name: String,
    /// The zone of every endpoint of the group.
    pub zone: ZoneId,
    /// Role: `true` for a failover group, `false` for a primary.
    pub failover: bool,
    /// Relative weight of each endpoint of the group in the hash (CH-3), >= 1.
    pub weight: u32,
    /// The endpoints.
    pub endpoints: Vec<Endpoint>,
}

/// One backend endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    /// Its address.
    pub addr: Addr,
    /// Its port (health checks, GUE); 0 when not set.
    pub port: u16,
}

/// `addr` when the port is not set, else `addr:port` (`[v6]:port`): how the API, the metrics
/// and `simulate` name an endpoint.
impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.port, self.addr.is_v4()) {
            (0, _) => write!(f, "{}", self.addr),
            (p, true) => write!(f, "{}:{p}", self.addr),
            (p, false) => write!(f, "[{}]:{p}", self.addr),
        }
    }
}

/// The identity of a backend across configurations: (service, address, port).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BackendKey {
    /// Service name.
    pub service: String,
    /// Endpoint.
    pub endpoint: Endpoint,
}

impl fmt::Display for BackendKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.endpoint.port == 0 {
            write!(f, "{}/{}", self.service, self.endpoint.addr)
        } else {
            write!(f, "{}/{}:{}", self.service, self.endpoint.addr, self.endpoint.port)
        }
    }
}

impl Model {
    /// The whole model in one number: equal models give equal numbers, in any process of any
    /// instance of the same Spillway (xxh3-64 of its `Debug` form, every field and list in
    /// configuration order; the model holds no map). Health is not part of a model, so the
    /// number does not change with it: what the table file is written and read under.
    pub fn fingerprint(&self) -> u64 {
        xxhash_rust::xxh3::xxh3_64(format!("{self:?}").as_bytes())
    }

    /// A model with no zones and no services, the default seed and table size.
    pub fn empty() -> Model {
        Model {
            hash_seed: crate::flow::DEFAULT_HASH_SEED,
            table_size: 65537,
            region: String::new(),
            zones: Vec::new(),
            client_subnets: Vec::new(),
            services: Vec::new(),
            copy_grace_ms: 0,
            previous_table_ms: 0,
        }
    }

    /// The id of the zone named `name`.
    pub fn zone_id(&self, name: &str) -> Option<ZoneId> {
        self.zones.iter().position(|z| z.name == name).and_then(|i| ZoneId::try_from(i).ok())
    }

    /// Every backend of every service, with its group.
    pub fn backends(&self) -> impl Iterator<Item = (BackendKey, &Service, &Group)> + '_ {
        self.services.iter().flat_map(|s| {
            s.groups.iter().flat_map(move |g| {
                g.endpoints
                    .iter()
                    .map(move |e| (BackendKey { service: s.name.clone(), endpoint: *e }, s, g))
            })
        })
    }
}

impl Service {
    /// A service with every setting at its default, no rules and no groups.
    pub fn new(name: &str) -> Service {
        Service {
            name: name.to_string(),
            rules: Vec::new(),
            affinity: Affinity::default(),
            symmetric_hashing: false,
            tracking: TrackingMode::default(),
            persistence: Persistence::default(),
            idle_timeout_secs: 600,
            draining_timeout_secs: 0,
            failover: FailoverPolicy::default(),
            zonal: ZonalAffinity::default(),
            encap: Encap::default(),
            groups: Vec::new(),
            advanced: None,
            quic_lb: None,
        }
    }

    /// True when at least one failover group is configured (FO-2, FO-9).
    pub fn has_failover_groups(&self) -> bool {
        self.groups.iter().any(|g| g.failover)
    }
}
