//! Compiling a validated [`Config`] into what the rest of the system runs on: the decision
//! core's [`Model`], the health checker's [`Target`]s and the node's addresses.
//!
//! Defaults are applied here and only here (the serde types keep `Option`s so that validation
//! can tell "absent" from "set"): Maglev table size 65537, hash seed
//! [`DEFAULT_HASH_SEED`], idle timeout 600 s (the CT-9 default), GUE port 6080, HTTP status 200
//! and path `/`, interval and timeout 5 s, thresholds 2, UDP request `ping`, MTU 1500, a zone's
//! region `topology.region`.
//!
//! The functions are meant for configurations that passed validation; given anything else they
//! still never panic: an entry that does not parse is left out.
//!
//! The string parsers at the bottom (endpoints, ports, node addresses) are shared with
//! validation, so the two can never disagree on what a value means. Enum-like fields need no
//! parser: the reader made them enums ([`super::choice`]).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use spillway_core::addr::{Addr, Prefix};
use spillway_core::advanced::{Latency, Topology};
use spillway_core::flow::DEFAULT_HASH_SEED;
use spillway_core::model::{
    AdvancedPolicy, BackendKey, Capacity, ClientSubnet, Damping, Encap, Endpoint, Group,
    GroupAdvanced, Model, Ports, QuicLbPolicy, QuicServerId, Rule, RuleDest, RuleProtocol, Service,
    Zone, DEFAULT_FAILOVER_HEALTH_THRESHOLD,
};
use spillway_core::policy::{idle_timeout_bounds, FailoverPolicy, ZonalAffinity};
use spillway_core::quic_lb::{Config as QuicConfig, Configs, ServerId};

use super::{
    BackendServiceConfig, Config, EncapsulationType, ForwardingRuleConfig, HealthCheckConfig,
    HealthCheckType, InitialVerdict, PortItem, PortsConfig, ServiceConfig, Spillover,
};
use crate::health::{CheckKind, CheckSpec, Target};

/// GUE destination port when `encapsulation.port` is absent.
pub const DEFAULT_GUE_PORT: u16 = 6080;
/// `dataplane.node.mtu` when absent.
pub const DEFAULT_MTU: u32 = 1500;
/// Health check defaults (HC-1).
pub const DEFAULT_CHECK_INTERVAL_SEC: f64 = 5.0;
/// Seconds before a probe fails, when `timeout_sec` is absent.
pub const DEFAULT_CHECK_TIMEOUT_SEC: f64 = 5.0;
/// `healthy_threshold` and `unhealthy_threshold` when absent.
pub const DEFAULT_THRESHOLD: u32 = 2;
/// HTTP: `expected_status` when absent.
pub const DEFAULT_HTTP_STATUS: u16 = 200;
/// HTTP: `path` when absent.
pub const DEFAULT_HTTP_PATH: &str = "/";
/// UDP: `request` when absent.
pub const DEFAULT_UDP_REQUEST: &str = "ping";
/// Group weight when absent.
pub const DEFAULT_WEIGHT: u32 = 1;
/// `capacity_scaler` when absent (section 7).
pub const DEFAULT_CAPACITY_SCALER: f64 = 1.0;

/// The node's own addresses on its ports, compiled from `dataplane.node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeAddrs {
    /// IPv4 address and prefix length.
    pub ipv4: Option<(Addr, u8)>,
    /// IPv6 address and prefix length.
    pub ipv6: Option<(Addr, u8)>,
    /// IPv4 next hop for backends outside `ipv4`'s prefix.
    pub gateway_ipv4: Option<Addr>,
    /// IPv6 next hop for backends outside `ipv6`'s prefix.
    pub gateway_ipv6: Option<Addr>,
    /// Egress MTU.
    pub mtu: u32,
}

impl NodeAddrs {
    /// The node's address and prefix length of `addr`'s family.
    pub fn own(&self, addr: Addr) -> Option<(Addr, u8)> {
        if addr.is_v4() {
            self.ipv4
        } else {
            self.ipv6
        }
    }

    /// The gateway of `addr`'s family.
    pub fn gateway(&self, addr: Addr) -> Option<Addr> {
        if addr.is_v4() {
            self.gateway_ipv4
        } else {
            self.gateway_ipv6
        }
    }

    /// True when `addr` is inside the node's prefix of its family (reached without a gateway).
    pub fn on_link(&self, addr: Addr) -> bool {
        self.own(addr).is_some_and(|(own, len)| {
            Prefix::new(spillway_core::addr::mask(own, len), len).is_ok_and(|p| p.contains(addr))
        })
    }
}

impl Config {
    /// The decision core's model of this configuration.
    pub fn to_model(&self) -> Model {
        let t = &self.topology;
        let zones: Vec<Zone> = t
            .zones
            .iter()
            .map(|z| Zone {
                name: z.name.clone(),
                region: z.region.clone().unwrap_or_else(|| t.region.clone()),
            })
            .collect();
        let zone_id = |name: &str| {
            zones.iter().position(|z| z.name == name).and_then(|i| u16::try_from(i).ok())
        };
        let client_subnets = t
            .client_subnets
            .iter()
            .filter_map(|s| {
                let prefix = s.prefix.parse::<Prefix>().ok()?;
                let zone = match (&s.zone, s.regional) {
                    (Some(z), false) => Some(zone_id(z)?),
                    _ => None,
                };
                Some(ClientSubnet { prefix, zone })
            })
            .collect();
        let services =
            self.services.iter().map(|s| compile_service(s, &zone_id, &self.quic_keys)).collect();
        Model {
            hash_seed: self.dataplane.hash_seed.unwrap_or(DEFAULT_HASH_SEED),
            table_size: self.dataplane.maglev_table_size,
            region: t.region.clone(),
            zones,
            client_subnets,
            services,
            copy_grace_ms: self.fleet_sync().map_or(0, |s| 2 * s.refresh.as_millis() as u64),
            previous_table_ms: self.fleet_sync().map_or(0, |s| s.previous_table.as_millis() as u64),
        }
    }

    /// The locality topology of advanced load balancing (section 7): `topology.region_order`
    /// and `topology.latencies` (in microseconds). The daemon (and `spillwayctl simulate`)
    /// passes it to `PolicyState::set_topology` / `Simulator::set_topology` with every model
    /// built by [`Config::to_model`], at start and on every reload. Empty (the default) when
    /// neither is set: regions in configuration order, every zone of a region at the same
    /// distance.
    pub fn advanced_topology(&self) -> Topology {
        let t = &self.topology;
        Topology {
            region_order: t.region_order.clone(),
            latencies: t
                .latencies
                .iter()
                .map(|l| Latency { a: l.from.clone(), b: l.to.clone(), latency: latency_us(l.ms) })
                .collect(),
        }
    }

    /// The health checks by name, compiled with their defaults.
    pub fn check_specs(&self) -> BTreeMap<String, Arc<CheckSpec>> {
        self.health_checks
            .iter()
            .map(|(name, c)| (name.clone(), Arc::new(compile_check(name, c))))
            .collect()
    }

    /// One health-check target per (service, endpoint) whose group names a `health_check`
    /// (HC-1), sharing one [`CheckSpec`] per check. A group without `health_check` gets no
    /// target: its backends are never probed and count as healthy (see
    /// [`Config::unchecked_backends`]).
    pub fn health_targets(&self) -> Vec<Target> {
        let specs = self.check_specs();
        let mut out = Vec::new();
        for s in &self.services {
            for g in &s.backend_service.backends {
                let Some(spec) = g.health_check.as_ref().and_then(|n| specs.get(n)) else {
                    continue;
                };
                for e in g.endpoints.iter().filter_map(|e| parse_endpoint(e).ok()) {
                    out.push(Target {
                        key: BackendKey { service: s.name.clone(), endpoint: e },
                        check: Arc::clone(spec),
                    });
                }
            }
        }
        out
    }

    /// The backends of groups without a `health_check`: never probed, healthy unless an
    /// operator override says otherwise.
    pub fn unchecked_backends(&self) -> Vec<BackendKey> {
        self.services
            .iter()
            .flat_map(|s| {
                s.backend_service
                    .backends
                    .iter()
                    .filter(|g| g.health_check.is_none())
                    .flat_map(|g| g.endpoints.iter().filter_map(|e| parse_endpoint(e).ok()))
                    .map(|e| BackendKey { service: s.name.clone(), endpoint: e })
            })
            .collect()
    }

    /// The node's addresses, gateways and MTU.
    pub fn node_addrs(&self) -> NodeAddrs {
        let n = &self.dataplane.node;
        let gw = |s: &Option<String>| s.as_deref().and_then(|s| s.parse::<Addr>().ok());
        NodeAddrs {
            ipv4: n.ipv4.as_deref().and_then(|s| parse_iface_addr(s, false).ok()),
            ipv6: n.ipv6.as_deref().and_then(|s| parse_iface_addr(s, true).ok()),
            gateway_ipv4: gw(&n.gateway_ipv4),
            gateway_ipv6: gw(&n.gateway_ipv6),
            mtu: n.mtu.unwrap_or(DEFAULT_MTU),
        }
    }
}

fn compile_service(
    s: &ServiceConfig,
    zone_id: &dyn Fn(&str) -> Option<u16>,
    keys: &super::QuicKeys,
) -> Service {
    let b = &s.backend_service;
    let mut out = Service::new(&s.name);
    out.rules = s.forwarding_rules.iter().filter_map(|r| compile_rule(r).ok()).collect();
    out.affinity = b.session_affinity;
    out.symmetric_hashing = b.symmetric_hashing;
    let ct = &b.connection_tracking_policy;
    out.tracking = ct.tracking_mode;
    out.persistence = ct.connection_persistence_on_unhealthy_backends;
    out.idle_timeout_secs =
        ct.idle_timeout_sec.unwrap_or(idle_timeout_bounds(out.tracking, out.affinity).0);
    out.draining_timeout_secs = b.connection_draining.draining_timeout_sec;
    out.failover = b
        .failover_policy
        .as_ref()
        .map(|f| FailoverPolicy {
            failover_ratio: f.failover_ratio,
            drop_traffic_if_unhealthy: f.drop_traffic_if_unhealthy,
            disable_connection_drain_on_failover: f.disable_connection_drain_on_failover,
        })
        .unwrap_or_default();
    out.zonal = compile_zonal(b);
    out.advanced = b.advanced.as_ref().map(|a| AdvancedPolicy {
        algorithm: a.algorithm.unwrap_or_default(),
        failover_health_threshold: a
            .failover_health_threshold
            .and_then(|t| u8::try_from(t).ok())
            .filter(|t| (1..=99).contains(t))
            .unwrap_or(DEFAULT_FAILOVER_HEALTH_THRESHOLD),
        auto_capacity_drain: a.auto_capacity_drain,
        groups: b
            .backends
            .iter()
            .map(|g| GroupAdvanced {
                group: g.group.clone(),
                capacity: g.capacity.as_ref().map_or(Capacity::Unbounded, |c| {
                    match (c.max_rate_per_endpoint, c.max_connections_per_endpoint) {
                        (Some(r), _) => Capacity::RatePerEndpoint(r),
                        (None, Some(n)) => Capacity::ConnectionsPerEndpoint(n),
                        (None, None) => Capacity::Unbounded,
                    }
                }),
                capacity_scaler: g.capacity_scaler.unwrap_or(DEFAULT_CAPACITY_SCALER),
                preferred: g.preferred.unwrap_or(false),
            })
            .collect(),
        damping: Damping::default(),
    });
    out.encap = match s.encapsulation.kind {
        EncapsulationType::Ipip => Encap::Ipip,
        EncapsulationType::Gue => {
            Encap::Gue { port: s.encapsulation.port.unwrap_or(DEFAULT_GUE_PORT) }
        }
        EncapsulationType::L2 => Encap::L2,
    };
    out.groups = b
        .backends
        .iter()
        .filter_map(|g| {
            Some(Group {
                name: g.group.clone(),
                zone: zone_id(&g.zone)?,
                failover: g.failover,
                weight: g.weight.unwrap_or(DEFAULT_WEIGHT),
                endpoints: g.endpoints.iter().filter_map(|e| parse_endpoint(e).ok()).collect(),
            })
        })
        .collect();
    out.quic_lb = b.quic_lb.as_ref().map(|q| compile_quic_lb(q, keys));
    out
}

/// The model's QUIC-LB policy of a valid `quic_lb`. A configuration whose key file was not
/// read (a file parsed without [`super::quic::read_keys`]) is left out: its connection IDs then fall back
/// to the 4-tuple (QL-4) rather than being read as plaintext.
fn compile_quic_lb(q: &super::QuicLbConfig, keys: &super::QuicKeys) -> QuicLbPolicy {
    let mut configs = Configs::new();
    for c in &q.configs {
        let key = match &c.key_file {
            Some(path) => match keys.get(path) {
                Some(k) => Some(k),
                None => continue,
            },
            None => None,
        };
        let (Ok(id), Ok(sid), Ok(nonce)) =
            (u8::try_from(c.id), u8::try_from(c.server_id_length), u8::try_from(c.nonce_length))
        else {
            continue;
        };
        if let Ok(config) = QuicConfig::new(id, sid, nonce, key) {
            configs.insert(config);
        }
    }
    let server_ids = q
        .server_ids
        .iter()
        .filter_map(|s| {
            Some(QuicServerId {
                endpoint: parse_endpoint(&s.endpoint).ok()?,
                config: u8::try_from(s.config).ok()?,
                server_id: ServerId::from_hex(&s.server_id)?,
            })
        })
        .collect();
    QuicLbPolicy { configs, server_ids }
}

/// `topology.latencies[].ms` in whole microseconds (what the decision core compares).
fn latency_us(ms: f64) -> u32 {
    let us = (ms * 1000.0).round();
    if us.is_finite() && us > 0.0 {
        // In range after validation (at most 1 000 000).
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let v = us.min(f64::from(u32::MAX)) as u32;
        v
    } else {
        0
    }
}

fn compile_zonal(b: &BackendServiceConfig) -> ZonalAffinity {
    match b.zonal_affinity.spillover {
        Spillover::Disabled => ZonalAffinity::Disabled,
        Spillover::StayWithinZone => ZonalAffinity::StayWithinZone,
        Spillover::SpillCrossZone => {
            ZonalAffinity::SpillCrossZone { ratio: b.zonal_affinity.spillover_ratio }
        }
    }
}

/// A forwarding rule, or why its destination or ports do not parse (the first problem only;
/// validation reports each with its own field).
pub(crate) fn compile_rule(r: &ForwardingRuleConfig) -> Result<Rule, String> {
    let dest = match (&r.vip, &r.destination_prefix) {
        (Some(v), None) => RuleDest::Vip(parse_unicast(v)?),
        (None, Some(p)) => RuleDest::Prefix(parse_prefix(p)?),
        _ => return Err("needs exactly one of `vip` and `destination_prefix`".to_owned()),
    };
    let protocol = r.protocol;
    let ports =
        if protocol == RuleProtocol::L3Default { Ports::All } else { parse_ports(&r.ports)? };
    Ok(Rule { dest, protocol, ports })
}

fn compile_check(name: &str, c: &HealthCheckConfig) -> CheckSpec {
    let kind = match c.kind {
        HealthCheckType::Tcp => CheckKind::Tcp,
        HealthCheckType::Http => CheckKind::Http {
            path: c.path.clone().unwrap_or_else(|| DEFAULT_HTTP_PATH.to_owned()),
            expected_status: c.expected_status.unwrap_or(DEFAULT_HTTP_STATUS),
            host: c.host.clone(),
        },
        HealthCheckType::Udp => CheckKind::Udp {
            request: c.request.as_deref().unwrap_or(DEFAULT_UDP_REQUEST).as_bytes().to_vec(),
            expect: c.response.as_ref().map(|r| r.as_bytes().to_vec()),
        },
    };
    let secs = |v: Option<f64>, d: f64| {
        Duration::try_from_secs_f64(v.unwrap_or(d)).unwrap_or(Duration::from_secs_f64(d))
    };
    CheckSpec {
        name: name.to_owned(),
        kind,
        port: c.port,
        interval: secs(c.check_interval_sec, DEFAULT_CHECK_INTERVAL_SEC),
        timeout: secs(c.timeout_sec, DEFAULT_CHECK_TIMEOUT_SEC),
        healthy_threshold: c.healthy_threshold.unwrap_or(DEFAULT_THRESHOLD),
        unhealthy_threshold: c.unhealthy_threshold.unwrap_or(DEFAULT_THRESHOLD),
        initial_healthy: c.initial.unwrap_or_default() == InitialVerdict::Healthy,
    }
}

// ---- string parsers shared with validation ----

/// A unicast address (not unspecified, not multicast).
pub(crate) fn parse_unicast(s: &str) -> Result<Addr, String> {
    let ip: IpAddr = s.parse().map_err(|_| format!("`{s}` is not an IP address"))?;
    if ip.is_unspecified() || ip.is_multicast() {
        return Err(format!("`{s}` is not a unicast address"));
    }
    Ok(Addr::from(ip))
}

/// A prefix `addr/len` (a bare address is a host prefix); host bits must be clear.
pub(crate) fn parse_prefix(s: &str) -> Result<Prefix, String> {
    s.parse::<Prefix>().map_err(|e| e.to_string())
}

/// An interface address `addr/len` of the given family; host bits are expected here.
pub(crate) fn parse_iface_addr(s: &str, v6: bool) -> Result<(Addr, u8), String> {
    let family = if v6 { "IPv6" } else { "IPv4" };
    let Some((a, l)) = s.split_once('/') else {
        return Err(format!("`{s}` needs a prefix length, e.g. `{}`", example_iface(v6)));
    };
    let addr = parse_unicast(a)?;
    if addr.is_v4() == v6 {
        return Err(format!("`{s}` is not an {family} address"));
    }
    let max = addr.family_bits();
    match l.parse::<u8>() {
        Ok(len) if (1..=max).contains(&len) => Ok((addr, len)),
        _ => Err(format!("prefix length `{l}` is out of range 1..={max}")),
    }
}

fn example_iface(v6: bool) -> &'static str {
    if v6 {
        "fd00::2/64"
    } else {
        "198.18.0.2/16"
    }
}

/// `198.18.1.1`, `198.18.1.1:8080`, `fd00::1:1` or `[fd00::1:1]:8080`. The port, when given,
/// is 1..=65535; absent it is 0.
pub fn parse_endpoint(s: &str) -> Result<Endpoint, String> {
    let (addr, port) = if let Ok(ip) = s.parse::<IpAddr>() {
        (ip, 0)
    } else if let Ok(sa) = s.parse::<SocketAddr>() {
        if sa.port() == 0 {
            return Err(format!("`{s}`: port 0 is not a port"));
        }
        (sa.ip(), sa.port())
    } else {
        return Err(format!(
            "`{s}` is not an endpoint (`198.18.1.1`, `198.18.1.1:8080`, `fd00::1:1` or \
             `[fd00::1:1]:8080`)"
        ));
    };
    if addr.is_unspecified() || addr.is_multicast() {
        return Err(format!("`{s}` is not a unicast address"));
    }
    Ok(Endpoint { addr: Addr::from(addr), port })
}

/// One item of a port list: a port 1..=65535 or a range `"lo-hi"` with lo <= hi.
pub(crate) fn parse_port_item(item: &PortItem) -> Result<(u16, u16), String> {
    let port = |t: &str| match t.trim().parse::<u16>() {
        Ok(p) if p >= 1 => Ok(p),
        _ => Err(format!("`{t}` is not a port 1..=65535")),
    };
    match item {
        PortItem::Port(0) => Err("0 is not a port 1..=65535".to_owned()),
        PortItem::Port(p) => Ok((*p, *p)),
        PortItem::Range(s) => match s.split_once('-') {
            None => port(s).map(|p| (p, p)),
            Some((lo, hi)) => {
                let (lo, hi) = (port(lo)?, port(hi)?);
                if lo > hi {
                    Err(format!("range `{s}` runs backwards"))
                } else {
                    Ok((lo, hi))
                }
            }
        },
    }
}

/// `ALL` or a non-empty list; ranges are sorted and merged.
pub(crate) fn parse_ports(p: &PortsConfig) -> Result<Ports, String> {
    match p {
        PortsConfig::Word(w) if w == "ALL" => Ok(Ports::All),
        PortsConfig::Word(w) => Err(format!("`{w}` is neither `ALL` nor a list of ports")),
        PortsConfig::List(items) if items.is_empty() => {
            Err("an empty list matches nothing; use `ALL` or list ports".to_owned())
        }
        PortsConfig::List(items) => {
            let mut ranges = items.iter().map(parse_port_item).collect::<Result<Vec<_>, _>>()?;
            ranges.sort_unstable();
            let mut merged: Vec<(u16, u16)> = Vec::with_capacity(ranges.len());
            for (lo, hi) in ranges {
                match merged.last_mut() {
                    Some(last) if u32::from(lo) <= u32::from(last.1) + 1 => {
                        last.1 = last.1.max(hi);
                    }
                    _ => merged.push((lo, hi)),
                }
            }
            Ok(Ports::List(merged))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_in_all_four_forms() {
        let e = parse_endpoint("198.18.1.1").unwrap();
        assert_eq!((e.addr, e.port), (Addr::v4(198, 18, 1, 1), 0));
        let e = parse_endpoint("198.18.1.1:8080").unwrap();
        assert_eq!((e.addr, e.port), (Addr::v4(198, 18, 1, 1), 8080));
        let e = parse_endpoint("fd00::1:1").unwrap();
        assert_eq!((e.addr, e.port), ("fd00::1:1".parse().unwrap(), 0));
        let e = parse_endpoint("[fd00::1:1]:8080").unwrap();
        assert_eq!((e.addr, e.port), ("fd00::1:1".parse().unwrap(), 8080));
        for bad in ["198.18.1.1:0", "host:80", "[fd00::1]", "0.0.0.0", "224.0.0.1", ""] {
            assert!(parse_endpoint(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn port_lists_merge_and_reject_nonsense() {
        let list = PortsConfig::List(vec![
            PortItem::Range("8000-8080".into()),
            PortItem::Port(80),
            PortItem::Port(81),
            PortItem::Range("8050-9000".into()),
        ]);
        assert_eq!(parse_ports(&list).unwrap(), Ports::List(vec![(80, 81), (8000, 9000)]));
        assert_eq!(parse_ports(&PortsConfig::default()).unwrap(), Ports::All);
        assert!(parse_ports(&PortsConfig::Word("all".into())).is_err());
        assert!(parse_ports(&PortsConfig::List(vec![])).is_err());
        assert!(parse_port_item(&PortItem::Range("90-80".into())).is_err());
        assert!(parse_port_item(&PortItem::Port(0)).is_err());
        assert_eq!(parse_port_item(&PortItem::Range("443".into())).unwrap(), (443, 443));
    }

    #[test]
    fn node_addresses_keep_host_bits_and_check_family() {
        assert_eq!(
            parse_iface_addr("198.18.0.2/16", false).unwrap(),
            (Addr::v4(198, 18, 0, 2), 16)
        );
        assert!(parse_iface_addr("198.18.0.2", false).is_err());
        assert!(parse_iface_addr("fd00::2/64", false).is_err());
        assert!(parse_iface_addr("198.18.0.2/33", false).is_err());
        assert!(parse_iface_addr("fd00::2/64", true).is_ok());
        let n = NodeAddrs {
            ipv4: Some((Addr::v4(198, 18, 0, 2), 16)),
            ipv6: None,
            gateway_ipv4: None,
            gateway_ipv6: None,
            mtu: 1500,
        };
        assert!(n.on_link(Addr::v4(198, 18, 200, 1)));
        assert!(!n.on_link(Addr::v4(198, 19, 0, 1)));
        assert!(!n.on_link("fd00::1".parse().unwrap()));
    }
}
