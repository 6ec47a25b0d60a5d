//! The YAML shapes of the `node:`, `admin:`, `topology:`, `health_checks:` and `services:`
//! sections. Field names follow the GCP API in snake_case; enum values are exactly the API's
//! (`PER_SESSION`, `ZONAL_AFFINITY_SPILL_CROSS_ZONE`, ...), read into enums ([`super::choice`]):
//! the decision core's where it has one, else the ones declared here. Every struct denies
//! unknown fields. Semantic checks live in `validate`, the translation to the decision core's
//! model in `compile`.

use serde::Deserialize;
use spillway_core::model::{Algorithm, RuleProtocol};
use spillway_core::policy::{Affinity, Persistence, TrackingMode};
use std::collections::BTreeMap;

use super::choice::{self, choice};

/// `node:` — the balancer's own addresses on its ports.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct NodeConfig {
    /// IPv4 address and prefix length of the node on its port (e.g. `198.18.0.2/16`): it
    /// answers ARP and echo for it, uses it as the outer source of encapsulated packets and
    /// as the source of ICMP errors. Backends inside the prefix are on-link.
    pub ipv4: Option<String>,
    /// IPv6 address and prefix length (e.g. `fd00::2/64`), likewise.
    pub ipv6: Option<String>,
    /// IPv4 next hop for backends outside `ipv4`'s prefix.
    pub gateway_ipv4: Option<String>,
    /// IPv6 next hop for backends outside `ipv6`'s prefix.
    pub gateway_ipv6: Option<String>,
    /// Egress MTU: an encapsulated packet with DF set that would exceed it is answered with
    /// ICMP "fragmentation needed" / ICMPv6 "packet too big". Default 1500.
    pub mtu: Option<u32>,
}

/// `dataplane.kernel_interface:` — the exception path: a kernel network interface that Spillway
/// creates as a second DPDK port, gives the node's addresses and MAC, and joins to the data port
/// (docs/scale-out.md). Frames for the node that Spillway does not answer itself go to it; what
/// the kernel sends out of it leaves through the data port.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelInterfaceConfig {
    /// The interface's name in the kernel (e.g. `spl0`); it must not exist yet.
    pub name: String,
    /// The DPDK driver behind the interface.
    #[serde(default)]
    pub driver: KernelDriver,
    /// Frames buffered each way between the workers and the kernel (a power of two,
    /// 64..=16384; default 1024). Beyond it frames are dropped and counted, never waited for.
    #[serde(default = "default_kernel_queue")]
    pub queue_size: u32,
}

choice! {
    /// `dataplane.kernel_interface.driver`.
    #[derive(Default)]
    pub enum KernelDriver {
        /// `auto` (the default): `virtio_user` where `/dev/vhost-net` exists, else `tap`.
        #[default]
        Auto => "auto",
        /// `tap`: DPDK's `net_tap`.
        Tap => "tap",
        /// `virtio_user`: DPDK's `net_virtio_user` over vhost-net.
        VirtioUser => "virtio_user",
    }
}

fn default_kernel_queue() -> u32 {
    1024
}

/// `announce:` — whether this instance attracts its VIPs' traffic, told to a routing daemon
/// (BIRD) through a kernel routing table, and how it leaves a fleet (docs/scale-out.md).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AnnounceConfig {
    /// The kernel routing table the announced VIP routes (/32, /128) are written to, for the
    /// routing daemon's kernel protocol to import (default 100; not 0, 253, 254 or 255).
    pub table: u32,
    /// BIRD's control socket (e.g. `/run/bird/bird.ctl`): when set, Spillway checks every few
    /// seconds that BIRD answers on it, and says so in its status, metrics and log.
    pub bird_socket: Option<String>,
    /// On SIGTERM: withdraw every VIP, keep forwarding until no packet has arrived for
    /// `quiet_sec`, but stop at the latest after this many seconds (default 10).
    pub stop_grace_sec: f64,
    /// Traffic has stopped arriving once no packet was forwarded for this long (default 2).
    pub quiet_sec: f64,
}

impl Default for AnnounceConfig {
    fn default() -> Self {
        AnnounceConfig { table: 100, bird_socket: None, stop_grace_sec: 10.0, quiet_sec: 2.0 }
    }
}

choice! {
    /// `services[].announce`: whether this instance announces the service's VIPs.
    #[derive(Default)]
    pub enum AnnounceMode {
        /// `when_healthy` (the default): while the service has a healthy backend in its
        /// eligible set.
        #[default]
        WhenHealthy => "when_healthy",
        /// `always`: whenever the instance serves.
        Always => "always",
        /// `never`.
        Never => "never",
    }
}

/// `admin:` — the operator API and metrics endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// `unix:/run/spillway/admin.sock` (the default) or `ip:port` (TCP: needs `token_file`).
    pub listen: String,
    /// The group whose members may use the Unix socket (`0660`); without it the socket is
    /// its owner's alone (`0600`).
    pub socket_group: Option<String>,
    /// A file whose first line is the token every request but `GET /metrics` must carry
    /// (`Authorization: Bearer ...`); required with a TCP `listen`.
    pub token_file: Option<String>,
    /// A second listener (`ip:port` or `unix:/path`) serving `GET /metrics` only, without a
    /// token: for a Prometheus scraper.
    pub metrics_listen: Option<String>,
}

/// The default `admin.listen`.
pub const DEFAULT_ADMIN_LISTEN: &str = "unix:/run/spillway/admin.sock";

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: DEFAULT_ADMIN_LISTEN.to_string(),
            socket_group: None,
            token_file: None,
            metrics_listen: None,
        }
    }
}

/// `topology:` — where the balancer, backends and clients are.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TopologyConfig {
    /// The balancer's own region (ZA-1).
    pub region: String,
    /// Every zone that groups or client subnets name.
    pub zones: Vec<ZoneConfig>,
    /// Client source subnets and their zones.
    pub client_subnets: Vec<ClientSubnetConfig>,
    /// Section 7: regions, nearest first, for region pairs without a latency (default: the
    /// order regions first appear in `zones`). Only with a service that sets `advanced`.
    pub region_order: Vec<String>,
    /// Section 7: latencies between two zones of one region or between two regions. Only with
    /// a service that sets `advanced`.
    pub latencies: Vec<LatencyConfig>,
}

/// One latency of `topology.latencies` (section 7 locality order), symmetric.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyConfig {
    /// A zone or a region name.
    pub from: String,
    /// A zone of the same region as `from`, or a region when `from` is one.
    pub to: String,
    /// Milliseconds, 0..=1000 (microsecond precision); only the order matters.
    pub ms: f64,
}

/// One zone.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZoneConfig {
    /// Zone name.
    pub name: String,
    /// Its region; defaults to `topology.region`.
    #[serde(default)]
    pub region: Option<String>,
}

/// One client subnet: a zone, or `regional: true` (VPN, interconnect: never zonal, ZA-1).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSubnetConfig {
    /// Source prefix, e.g. `198.18.10.0/24`.
    pub prefix: String,
    /// The zone of its clients.
    #[serde(default)]
    pub zone: Option<String>,
    /// A regional subnet: incompatible with zonal affinity.
    #[serde(default)]
    pub regional: bool,
}

/// A named health check (HC-1), under `health_checks:` keyed by name.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthCheckConfig {
    /// What a probe does.
    #[serde(rename = "type")]
    pub kind: HealthCheckType,
    /// Port to probe; defaults to the endpoint's port.
    #[serde(default)]
    pub port: Option<u16>,
    /// HTTP: request path (default `/`).
    #[serde(default)]
    pub path: Option<String>,
    /// HTTP: Host header (default: the endpoint address).
    #[serde(default)]
    pub host: Option<String>,
    /// HTTP: the status that means healthy (default 200).
    #[serde(default)]
    pub expected_status: Option<u16>,
    /// UDP: the request payload (default `ping`).
    #[serde(default)]
    pub request: Option<String>,
    /// UDP: bytes the reply must contain (default: any reply).
    #[serde(default)]
    pub response: Option<String>,
    /// Seconds between probes (default 5).
    #[serde(default)]
    pub check_interval_sec: Option<f64>,
    /// Seconds before a probe fails (default 5, at most the interval).
    #[serde(default)]
    pub timeout_sec: Option<f64>,
    /// Consecutive successes to turn healthy (default 2).
    #[serde(default)]
    pub healthy_threshold: Option<u32>,
    /// Consecutive failures to turn unhealthy (default 2).
    #[serde(default)]
    pub unhealthy_threshold: Option<u32>,
    /// The verdict before the first probes (default `unhealthy`, HC-3).
    #[serde(default)]
    pub initial: Option<InitialVerdict>,
}

choice! {
    /// `health_checks.<name>.type`.
    pub enum HealthCheckType {
        /// `TCP`: a connection is accepted.
        Tcp => "TCP",
        /// `HTTP`: a `GET` is answered with the expected status.
        Http => "HTTP",
        /// `UDP`: a request is answered (with the expected bytes).
        Udp => "UDP",
    }
}

choice! {
    /// `health_checks.<name>.initial` (HC-3).
    #[derive(Default)]
    pub enum InitialVerdict {
        /// `unhealthy` (the default).
        #[default]
        Unhealthy => "unhealthy",
        /// `healthy`.
        Healthy => "healthy",
    }
}

/// One service: forwarding rules plus a backend service.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// Unique name.
    pub name: String,
    /// What traffic belongs to the service.
    pub forwarding_rules: Vec<ForwardingRuleConfig>,
    /// How packets reach the backends (default IPIP).
    #[serde(default)]
    pub encapsulation: EncapsulationConfig,
    /// The backend service.
    pub backend_service: BackendServiceConfig,
    /// Whether this instance announces the service's VIPs (needs the `announce:` section):
    /// `when_healthy` (the default: while the instance serves and the service has an eligible
    /// backend), `always` (while the instance serves) or `never`.
    #[serde(default)]
    pub announce: Option<AnnounceMode>,
}

impl ServiceConfig {
    /// `announce`, or its default when absent.
    pub fn announce_mode(&self) -> AnnounceMode {
        self.announce.unwrap_or_default()
    }
}

/// A forwarding rule: `vip` or `destination_prefix`, `protocol`, `ports`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForwardingRuleConfig {
    /// An exact virtual IP.
    #[serde(default)]
    pub vip: Option<String>,
    /// Next-hop mode: a destination prefix (SA-7).
    #[serde(default)]
    pub destination_prefix: Option<String>,
    /// `TCP` (the default), `UDP` or `L3_DEFAULT`.
    #[serde(default = "default_protocol", deserialize_with = "choice::deserialize")]
    pub protocol: RuleProtocol,
    /// `ALL` (default), or a list of ports and `"lo-hi"` ranges.
    #[serde(default)]
    pub ports: PortsConfig,
}

fn default_protocol() -> RuleProtocol {
    RuleProtocol::Tcp
}

/// `ports:` — `ALL` or a list of ports / ranges.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum PortsConfig {
    /// `ALL`.
    Word(String),
    /// `[80, 443, "8000-8080"]`.
    List(Vec<PortItem>),
}

impl Default for PortsConfig {
    fn default() -> Self {
        PortsConfig::Word("ALL".to_string())
    }
}

/// One item of a port list.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum PortItem {
    /// A single port.
    Port(u16),
    /// `"lo-hi"` (or a single port as a string).
    Range(String),
}

/// `encapsulation:`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct EncapsulationConfig {
    /// How packets are sent to the backends (default `IPIP`).
    #[serde(rename = "type", default)]
    pub kind: EncapsulationType,
    /// GUE destination port (default 6080).
    #[serde(default)]
    pub port: Option<u16>,
}

choice! {
    /// `services[].encapsulation.type`; the decision core's `Encap` with the GUE port.
    #[derive(Default)]
    pub enum EncapsulationType {
        /// `IPIP` (the default): IP in IP.
        #[default]
        Ipip => "IPIP",
        /// `GUE`: GUE variant 1 (IP directly in UDP).
        Gue => "GUE",
        /// `L2`: the destination MAC rewritten, nothing added.
        L2 => "L2",
    }
}

/// `backend_service:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendServiceConfig {
    /// SA: `NONE` (default), `CLIENT_IP_PORT_PROTO`, `CLIENT_IP_PROTO`, `CLIENT_IP`,
    /// `CLIENT_IP_NO_DESTINATION`.
    #[serde(default, deserialize_with = "choice::deserialize")]
    pub session_affinity: Affinity,
    /// Both directions of a flow hash alike: the tuple is put in canonical order before hashing (SA-8).
    #[serde(default)]
    pub symmetric_hashing: bool,
    /// Connection tracking: mode, persistence on unhealthy backends, idle timeout (CT, CP).
    #[serde(default)]
    pub connection_tracking_policy: ConnectionTrackingConfig,
    /// Connection draining of removed backends (CD).
    #[serde(default)]
    pub connection_draining: ConnectionDrainingConfig,
    /// Section 3; only with failover groups.
    #[serde(default)]
    pub failover_policy: Option<FailoverPolicyConfig>,
    /// Section 4.
    #[serde(default)]
    pub zonal_affinity: ZonalAffinityConfig,
    /// Section 7: advanced load balancing, an alternative to `zonal_affinity`.
    #[serde(default)]
    pub advanced: Option<AdvancedConfig>,
    /// Backend groups.
    pub backends: Vec<BackendGroupConfig>,
    /// QUIC-LB (QL): short-header QUIC packets without an entry routed by connection ID.
    #[serde(default)]
    pub quic_lb: Option<super::quic::QuicLbConfig>,
}

/// `advanced:` (section 7). Values are kept as written (`Option`, wide integer types) so that
/// validation reports a bad one with its range; defaults are applied in `compile`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct AdvancedConfig {
    /// AL-1..AL-4: `WATERFALL_BY_REGION` (default), `SPRAY_TO_REGION`, `SPRAY_TO_WORLD`,
    /// `WATERFALL_BY_ZONE`.
    #[serde(deserialize_with = "choice::deserialize_option")]
    pub algorithm: Option<Algorithm>,
    /// AL-7: integer percent 1..=99 (default 70).
    pub failover_health_threshold: Option<i64>,
    /// AL-6 (default false).
    pub auto_capacity_drain: bool,
}

/// A group's `capacity:` (section 7): exactly one of the two, per endpoint.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct CapacityConfig {
    /// New connections per second per endpoint, > 0.
    pub max_rate_per_endpoint: Option<f64>,
    /// Concurrent tracked connections per endpoint, > 0.
    pub max_connections_per_endpoint: Option<f64>,
}

/// `connection_tracking_policy:`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionTrackingConfig {
    /// `PER_CONNECTION` (default) or `PER_SESSION`.
    #[serde(deserialize_with = "choice::deserialize")]
    pub tracking_mode: TrackingMode,
    /// `DEFAULT_FOR_PROTOCOL` (default), `NEVER_PERSIST`, `ALWAYS_PERSIST`.
    #[serde(deserialize_with = "choice::deserialize")]
    pub connection_persistence_on_unhealthy_backends: Persistence,
    /// CT-8/CT-9: seconds, default 600.
    pub idle_timeout_sec: Option<u32>,
}

/// `connection_draining:`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionDrainingConfig {
    /// CD-3: 0 (default, disabled) .. 3600 seconds.
    pub draining_timeout_sec: u32,
}

/// `failover_policy:`.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct FailoverPolicyConfig {
    /// FO-2: in [0, 1], default 0.
    pub failover_ratio: f64,
    /// Drop new connections when no backend at all is healthy, instead of using the unhealthy primaries (FO-3).
    pub drop_traffic_if_unhealthy: bool,
    /// Invalidate the service's entries when the eligible set flips between primaries and failovers (FO-9).
    pub disable_connection_drain_on_failover: bool,
}

/// `zonal_affinity:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ZonalAffinityConfig {
    /// Whether and how traffic stays in the client's zone (default disabled).
    pub spillover: Spillover,
    /// In [0, 1], default 0; only with `ZONAL_AFFINITY_SPILL_CROSS_ZONE`.
    pub spillover_ratio: f64,
}

impl Default for ZonalAffinityConfig {
    fn default() -> Self {
        ZonalAffinityConfig { spillover: Spillover::default(), spillover_ratio: 0.0 }
    }
}

choice! {
    /// `zonal_affinity.spillover` (section 4); the decision core's `ZonalAffinity` with the
    /// ratio.
    #[derive(Default)]
    pub enum Spillover {
        /// `ZONAL_AFFINITY_DISABLED` (the default).
        #[default]
        Disabled => "ZONAL_AFFINITY_DISABLED",
        /// `ZONAL_AFFINITY_STAY_WITHIN_ZONE` (ZA-3).
        StayWithinZone => "ZONAL_AFFINITY_STAY_WITHIN_ZONE",
        /// `ZONAL_AFFINITY_SPILL_CROSS_ZONE` (ZA-4, ZA-5).
        SpillCrossZone => "ZONAL_AFFINITY_SPILL_CROSS_ZONE",
    }
}

/// One backend group.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendGroupConfig {
    /// Name, unique within the service.
    pub group: String,
    /// Its zone (one of `topology.zones`).
    pub zone: String,
    /// A failover group (default false: primary).
    #[serde(default)]
    pub failover: bool,
    /// The named health check (a key of `health_checks:`).
    #[serde(default)]
    pub health_check: Option<String>,
    /// Relative weight of each endpoint, 1..=1000 (default 1).
    #[serde(default)]
    pub weight: Option<u32>,
    /// Endpoint addresses, `198.18.1.1` or `[fd00::1:1]:80` / `198.18.1.1:80` with a port.
    pub endpoints: Vec<String>,
    /// Section 7 (only with `advanced`): capacity per endpoint (default unbounded).
    #[serde(default)]
    pub capacity: Option<CapacityConfig>,
    /// Section 7 (only with `advanced`): in [0, 1] (default 1); 0 drains the group.
    #[serde(default)]
    pub capacity_scaler: Option<f64>,
    /// AL-5 (only with `advanced`): filled first, up to capacity (default false).
    #[serde(default)]
    pub preferred: Option<bool>,
}

/// The sections this file adds to [`super::Config`], as one map for convenience.
pub type HealthChecks = BTreeMap<String, HealthCheckConfig>;
