//! The semantic checks of a parsed configuration (NX-3): everything serde cannot see, such as
//! ranges, addresses, references between sections, combinations of enum values, duplicates
//! and overlapping forwarding rules (FR-1). Enum names themselves are the reader's
//! ([`super::choice`]).
//!
//! [`validate`] runs every check and returns **all** problems, each as a [`FieldError`] naming
//! the field path in serde's syntax (`services[0].backend_service.weight`); the caller
//! ([`super::Config::from_yaml`]) attaches file positions with [`super::locate`]. A check that
//! depends on a value that is itself wrong (an idle timeout under an unknown affinity: a
//! [`Refused`] field, or a value another check reports) is skipped rather than reported twice.
//!
//! It must never touch the running system (ports, lcores): the daemon checks those. It must
//! never mutate or default the configuration either: defaults are applied in `compile`.

use std::collections::{BTreeMap, HashMap, HashSet};

use spillway_core::addr::Addr;
use spillway_core::maglev::TABLE_SIZES;
use spillway_core::model::{Encap, Endpoint, Ports, RuleDest, RuleProtocol};
use spillway_core::policy::{idle_timeout_bounds, Persistence, TrackingMode};

use super::choice::Refused;
use super::compile::{
    self, parse_endpoint, parse_iface_addr, parse_port_item, parse_prefix, parse_unicast,
    NodeAddrs, DEFAULT_CHECK_INTERVAL_SEC, DEFAULT_CHECK_TIMEOUT_SEC,
};
use super::{
    AnnounceMode, BackendGroupConfig, Config, EncapsulationType, HealthCheckConfig,
    HealthCheckType, PortsConfig, ServiceConfig, Spillover,
};

/// One problem with one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Field path, e.g. `services[0].backend_service.connection_draining.draining_timeout_sec`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl FieldError {
    /// An error about `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError { field: field.into(), message: message.into() }
    }
}

/// Most primary groups, and most failover groups, per backend service (section 3).
pub const MAX_GROUPS_PER_ROLE: usize = 50;
/// Group weight range (CH-3).
pub const WEIGHT_RANGE: std::ops::RangeInclusive<u32> = 1..=1000;
/// Connection draining timeout range in seconds (CD-3).
pub const DRAINING_RANGE: std::ops::RangeInclusive<u32> = 0..=3600;
/// `dataplane.node.mtu` range.
pub const MTU_RANGE: std::ops::RangeInclusive<u32> = 576..=9216;
/// The smallest MTU an IPv6 link may have.
pub const IPV6_MIN_MTU: u32 = 1280;
/// Smallest `dataplane.conntrack_capacity`.
pub const MIN_CONNTRACK_CAPACITY: u32 = 1024;
/// Longest health check interval or timeout, in seconds.
pub const MAX_CHECK_SECS: f64 = 3600.0;
/// `advanced.failover_health_threshold` range (AL-7), in percent.
pub const THRESHOLD_RANGE: std::ops::RangeInclusive<i64> = 1..=99;
/// Largest `topology.latencies[].ms` (the decision core orders latencies up to about 1 s in
/// microseconds).
pub const MAX_LATENCY_MS: f64 = 1000.0;

/// Every problem of `config`, in no particular order (the caller sorts them by position).
pub fn validate(config: &Config) -> Vec<FieldError> {
    validate_refused(config, &Refused::default())
}

/// [`validate`] for a configuration read with refusals: the checks that depend on a refused
/// field are skipped (the refusals themselves are the caller's to report).
pub(crate) fn validate_refused(config: &Config, refused: &Refused) -> Vec<FieldError> {
    let mut v = Checker { errors: Vec::new(), refused };
    config.dataplane.check(refused, &mut v.errors);
    v.dataplane(config);
    v.admin(config);
    v.topology(config);
    v.locality(config);
    v.health_checks(config);
    v.services(config);
    v.fleet(config);
    super::fleet::check(config, refused, &mut v.errors);
    v.errors
}

struct Checker<'a> {
    errors: Vec<FieldError>,
    refused: &'a Refused,
}

/// A Linux interface name: 1 to 15 bytes, no `/`, `:` or whitespace, not `.` or `..`.
pub fn interface_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 15 {
        return Err(format!("`{name}` must be 1 to 15 characters (a Linux interface name)"));
    }
    if name == "."
        || name == ".."
        || name.chars().any(|ch| ch == '/' || ch == ':' || ch.is_whitespace())
    {
        return Err(format!("`{name}` is not a valid interface name (no `/`, `:` or spaces)"));
    }
    Ok(())
}

fn unit_range(x: f64) -> bool {
    (0.0..=1.0).contains(&x)
}

impl Checker<'_> {
    fn err(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.errors.push(FieldError::new(field, message));
    }

    /// `value`, read from `field`, unless it was refused.
    fn known<T>(&self, field: &str, value: T) -> Option<T> {
        self.refused.known(field, value)
    }

    /// Node addresses, MTU, conntrack and Maglev sizes (the rest of `dataplane` is checked by
    /// `DataplaneConfig::check`).
    fn dataplane(&mut self, c: &Config) {
        let d = &c.dataplane;
        let n = &d.node;
        for (field, value, v6) in [("ipv4", &n.ipv4, false), ("ipv6", &n.ipv6, true)] {
            if let Some(s) = value {
                if let Err(e) = parse_iface_addr(s, v6) {
                    self.err(format!("dataplane.node.{field}"), e);
                }
            }
        }
        let addrs = c.node_addrs();
        for (field, value, node_field, own, v6) in [
            ("gateway_ipv4", &n.gateway_ipv4, &n.ipv4, addrs.ipv4, false),
            ("gateway_ipv6", &n.gateway_ipv6, &n.ipv6, addrs.ipv6, true),
        ] {
            let Some(s) = value else { continue };
            let path = format!("dataplane.node.{field}");
            let family = if v6 { "ipv6" } else { "ipv4" };
            match parse_unicast(s) {
                Err(e) => self.err(path, e),
                Ok(a) if a.is_v4() == v6 => {
                    let fam = if v6 { "IPv6" } else { "IPv4" };
                    self.err(path, format!("`{s}` is not an {fam} address"))
                }
                Ok(a) => match own {
                    None if node_field.is_none() => self.err(
                        path,
                        format!("a gateway needs `dataplane.node.{family}` to reach it from"),
                    ),
                    None => {} // the node address itself is wrong, reported above
                    Some((own_addr, len)) => {
                        if a == own_addr {
                            self.err(path, format!("`{s}` is the node's own address"));
                        } else if !addrs.on_link(a) {
                            self.err(
                                path,
                                format!(
                                    "`{s}` is not on-link: outside dataplane.node.{family} \
                                     {own_addr}/{len}"
                                ),
                            );
                        }
                    }
                },
            }
        }
        if let Some(mtu) = n.mtu {
            if !MTU_RANGE.contains(&mtu) {
                self.err(
                    "dataplane.node.mtu",
                    format!("{mtu} is out of range {}..={}", MTU_RANGE.start(), MTU_RANGE.end()),
                );
            } else if mtu < IPV6_MIN_MTU && n.ipv6.is_some() {
                self.err(
                    "dataplane.node.mtu",
                    format!("{mtu} is below IPv6's minimum link MTU of {IPV6_MIN_MTU}"),
                );
            }
        }
        if d.conntrack_capacity < MIN_CONNTRACK_CAPACITY {
            self.err(
                "dataplane.conntrack_capacity",
                format!("{} is too small (minimum {MIN_CONNTRACK_CAPACITY})", d.conntrack_capacity),
            );
        }
        if !TABLE_SIZES.contains(&d.maglev_table_size) {
            let sizes: Vec<String> = TABLE_SIZES.iter().map(u32::to_string).collect();
            self.err(
                "dataplane.maglev_table_size",
                format!("{} is not one of {}", d.maglev_table_size, sizes.join(", ")),
            );
        }
    }

    /// The exception path, the `announce:` section and each service's `announce`.
    fn fleet(&mut self, c: &Config) {
        if let Some(k) = &c.dataplane.kernel_interface {
            if let Err(e) = interface_name(&k.name) {
                self.err("dataplane.kernel_interface.name", e);
            }
            if !(64..=16384).contains(&k.queue_size) || !k.queue_size.is_power_of_two() {
                self.err(
                    "dataplane.kernel_interface.queue_size",
                    format!("{} is not a power of two in 64..=16384", k.queue_size),
                );
            }
            let n = &c.dataplane.node;
            if n.ipv4.is_none() && n.ipv6.is_none() {
                self.err(
                    "dataplane.kernel_interface",
                    "the kernel interface carries the node's addresses: set dataplane.node.ipv4 \
                     or dataplane.node.ipv6",
                );
            }
        }
        if let Some(a) = &c.announce {
            if matches!(a.table, 0 | 253..=255) {
                self.err(
                    "announce.table",
                    format!(
                        "{} is a table the kernel uses itself (0 unspecified, 253 default, 254 \
                         main, 255 local): pick a table of its own, e.g. 100",
                        a.table
                    ),
                );
            }
            if let Some(sock) = &a.bird_socket {
                if !sock.starts_with('/') {
                    self.err("announce.bird_socket", format!("`{sock}` is not an absolute path"));
                }
            }
            for (field, v, max) in
                [("stop_grace_sec", a.stop_grace_sec, 3600.0), ("quiet_sec", a.quiet_sec, 600.0)]
            {
                if !(v.is_finite() && (0.0..=max).contains(&v)) {
                    self.err(format!("announce.{field}"), format!("{v} is out of range 0..={max}"));
                }
            }
        }
        for (i, s) in c.services.iter().enumerate() {
            let path = format!("services[{i}].announce");
            let Some(mode) = s.announce.and_then(|m| self.known(&path, m)) else { continue };
            if c.announce.is_none() {
                self.err(
                    path,
                    "set, but there is no top-level `announce:` section saying where the VIP \
                     routes go",
                );
            } else if mode != AnnounceMode::Never
                && s.forwarding_rules.iter().all(|r| r.vip.is_none())
            {
                self.err(
                    path,
                    format!(
                        "service `{}` has no VIP to announce (its forwarding rules are all \
                         destination_prefix): remove `announce` or set it to `never`",
                        s.name
                    ),
                );
            }
        }
    }

    fn admin(&mut self, c: &Config) {
        let a = &c.admin;
        let kind = |l: &str| match l.strip_prefix("unix:") {
            Some(p) if p.starts_with('/') => Some(true),
            Some(_) => None,
            None => l.parse::<std::net::SocketAddr>().is_ok().then_some(false),
        };
        let listen_unix = kind(&a.listen);
        if listen_unix.is_none() {
            self.err(
                "admin.listen",
                format!("`{}` is neither `ip:port` nor `unix:/absolute/path`", a.listen),
            );
        }
        if listen_unix == Some(false) && a.token_file.is_none() {
            self.err(
                "admin.listen",
                format!(
                    "`{}` is TCP: anyone who can connect could drain every backend, so a TCP \
                     API needs `admin.token_file` (or use a Unix socket, the default `{}`)",
                    a.listen,
                    super::services::DEFAULT_ADMIN_LISTEN
                ),
            );
        }
        if a.socket_group.is_some() && listen_unix == Some(false) {
            self.err("admin.socket_group", "only applies to a Unix socket `admin.listen`");
        }
        if let Some(g) = &a.socket_group {
            if g.trim().is_empty() || g.contains([':', '\n']) {
                self.err("admin.socket_group", format!("`{g}` is not a group name"));
            }
        }
        if let Some(f) = &a.token_file {
            if !f.starts_with('/') {
                self.err("admin.token_file", format!("`{f}` is not an absolute path"));
            }
        }
        if let Some(m) = &a.metrics_listen {
            if kind(m).is_none() {
                self.err(
                    "admin.metrics_listen",
                    format!("`{m}` is neither `ip:port` nor `unix:/absolute/path`"),
                );
            } else if *m == a.listen {
                self.err("admin.metrics_listen", "is the same address as `admin.listen`");
            }
        }
    }

    fn topology(&mut self, c: &Config) {
        let t = &c.topology;
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, z) in t.zones.iter().enumerate() {
            let path = format!("topology.zones[{i}]");
            if z.name.trim().is_empty() {
                self.err(format!("{path}.name"), "empty zone name");
            } else if let Some(j) = seen.insert(&z.name, i) {
                self.err(
                    format!("{path}.name"),
                    format!("zone `{}` is already defined at topology.zones[{j}]", z.name),
                );
            }
            match &z.region {
                Some(r) if r.trim().is_empty() => {
                    self.err(format!("{path}.region"), "empty region")
                }
                None if t.region.trim().is_empty() => self.err(
                    format!("{path}.region"),
                    format!("zone `{}` has no region and `topology.region` is not set", z.name),
                ),
                _ => {}
            }
        }
        let mut prefixes = HashMap::new();
        for (i, s) in t.client_subnets.iter().enumerate() {
            let path = format!("topology.client_subnets[{i}]");
            match parse_prefix(&s.prefix) {
                Err(e) => self.err(format!("{path}.prefix"), e),
                Ok(p) => {
                    if let Some(j) = prefixes.insert(p, i) {
                        self.err(
                            format!("{path}.prefix"),
                            format!("{p} is already listed at topology.client_subnets[{j}]"),
                        );
                    }
                }
            }
            match (&s.zone, s.regional) {
                (Some(_), true) => self.err(
                    format!("{path}.regional"),
                    "a subnet has either a `zone` or `regional: true`, not both",
                ),
                (None, false) => self.err(
                    path.clone(),
                    "needs a `zone`, or `regional: true` for a VPN or interconnect subnet (ZA-1)",
                ),
                (Some(z), false) if !seen.contains_key(z.as_str()) => {
                    self.err(format!("{path}.zone"), unknown_zone(z, c))
                }
                _ => {}
            }
        }
    }

    /// Section 7 locality: `topology.region_order` and `topology.latencies`.
    fn locality(&mut self, c: &Config) {
        let t = &c.topology;
        if t.region_order.is_empty() && t.latencies.is_empty() {
            return;
        }
        let any_advanced = c.services.iter().any(|s| s.backend_service.advanced.is_some());
        if !any_advanced {
            for (field, set) in [
                ("topology.region_order", !t.region_order.is_empty()),
                ("topology.latencies", !t.latencies.is_empty()),
            ] {
                if set {
                    self.err(
                        field,
                        "only used by advanced load balancing (section 7), and no service sets \
                         `backend_service.advanced`",
                    );
                }
            }
            return;
        }
        let regions = known_regions(c);
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, r) in t.region_order.iter().enumerate() {
            let path = format!("topology.region_order[{i}]");
            if !regions.contains(&r.as_str()) {
                self.err(path, unknown_region(r, &regions));
            } else if let Some(j) = seen.insert(r, i) {
                self.err(
                    path,
                    format!("region `{r}` is already listed at topology.region_order[{j}]"),
                );
            }
        }
        // Zone name -> its region (first definition wins; duplicates are reported above).
        let mut zone_region: HashMap<&str, &str> = HashMap::new();
        for z in &t.zones {
            zone_region.entry(&z.name).or_insert(z.region.as_deref().unwrap_or(&t.region));
        }
        let mut pairs: HashMap<(&str, &str), usize> = HashMap::new();
        for (i, l) in t.latencies.iter().enumerate() {
            let path = format!("topology.latencies[{i}]");
            if !(l.ms.is_finite() && (0.0..=MAX_LATENCY_MS).contains(&l.ms)) {
                self.err(
                    format!("{path}.ms"),
                    format!("{} is out of range 0..={MAX_LATENCY_MS} (milliseconds)", l.ms),
                );
            }
            // What each end names: Some(Some(region)) a zone, Some(None) a region.
            let kind = |name: &str| match zone_region.get(name) {
                Some(r) => Some(Some(*r)),
                None => regions.contains(&name).then_some(None),
            };
            let (from, to) = (kind(&l.from), kind(&l.to));
            for (field, name, k) in [("from", &l.from, from), ("to", &l.to, to)] {
                if k.is_none() {
                    self.err(
                        format!("{path}.{field}"),
                        format!(
                            "`{name}` is neither a zone of topology.zones nor a region ({})",
                            regions.join(", ")
                        ),
                    );
                }
            }
            let (Some(from), Some(to)) = (from, to) else { continue };
            if l.from == l.to {
                self.err(format!("{path}.to"), format!("a latency from `{}` to itself", l.to));
                continue;
            }
            match (from, to) {
                (Some(rf), Some(rt)) if rf != rt => {
                    self.err(
                        format!("{path}.to"),
                        format!(
                            "zones `{}` ({rf}) and `{}` ({rt}) are in different regions: give \
                             the latency between their regions",
                            l.from, l.to
                        ),
                    );
                    continue;
                }
                (Some(_), None) | (None, Some(_)) => {
                    self.err(
                        format!("{path}.to"),
                        format!(
                            "`{}` and `{}` are a zone and a region: a latency is between two \
                             zones of one region or between two regions",
                            l.from, l.to
                        ),
                    );
                    continue;
                }
                _ => {}
            }
            let key = if l.from <= l.to {
                (l.from.as_str(), l.to.as_str())
            } else {
                (l.to.as_str(), l.from.as_str())
            };
            if let Some(j) = pairs.insert(key, i) {
                self.err(
                    path,
                    format!(
                        "the latency between `{}` and `{}` is already given at \
                         topology.latencies[{j}]",
                        l.from, l.to
                    ),
                );
            }
        }
    }

    fn health_checks(&mut self, c: &Config) {
        for (name, h) in &c.health_checks {
            self.health_check(&format!("health_checks.{name}"), name, h);
        }
    }

    fn health_check(&mut self, path: &str, name: &str, h: &HealthCheckConfig) {
        if name.trim().is_empty() {
            self.err(path, "empty health check name");
        }
        if let Some(kind) = self.known(&format!("{path}.type"), h.kind) {
            let only = [
                ("path", h.path.is_some(), HealthCheckType::Http),
                ("host", h.host.is_some(), HealthCheckType::Http),
                ("expected_status", h.expected_status.is_some(), HealthCheckType::Http),
                ("request", h.request.is_some(), HealthCheckType::Udp),
                ("response", h.response.is_some(), HealthCheckType::Udp),
            ];
            for (field, set, wants) in only {
                if set && kind != wants {
                    self.err(
                        format!("{path}.{field}"),
                        format!("only applies to type {wants} (this check is {kind})"),
                    );
                }
            }
        }
        if h.port == Some(0) {
            self.err(format!("{path}.port"), "0 is not a port 1..=65535");
        }
        if let Some(p) = &h.path {
            if !p.starts_with('/') || p.chars().any(|c| c.is_whitespace() || c.is_control()) {
                self.err(
                    format!("{path}.path"),
                    format!(
                        "`{p}` must start with `/` and contain no spaces or control characters"
                    ),
                );
            }
        }
        if let Some(host) = &h.host {
            if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
                self.err(format!("{path}.host"), "must be non-empty without spaces");
            }
        }
        if let Some(s) = h.expected_status {
            if !(100..=599).contains(&s) {
                self.err(format!("{path}.expected_status"), format!("{s} is not an HTTP status"));
            }
        }
        if h.request.as_deref() == Some("") {
            self.err(format!("{path}.request"), "an empty request sends an empty datagram");
        }
        let mut secs = |field: &str, v: Option<f64>| {
            let ok = v.is_none_or(|x| x > 0.0 && x <= MAX_CHECK_SECS);
            if !ok {
                self.err(
                    format!("{path}.{field}"),
                    format!("{} must be > 0 and at most {MAX_CHECK_SECS}", v.unwrap_or_default()),
                );
            }
            ok
        };
        let interval_ok = secs("check_interval_sec", h.check_interval_sec);
        let timeout_ok = secs("timeout_sec", h.timeout_sec);
        let interval = h.check_interval_sec.unwrap_or(DEFAULT_CHECK_INTERVAL_SEC);
        let timeout = h.timeout_sec.unwrap_or(DEFAULT_CHECK_TIMEOUT_SEC);
        if interval_ok && timeout_ok && timeout > interval {
            self.err(
                format!("{path}.timeout_sec"),
                format!("{timeout} s is longer than check_interval_sec ({interval} s)"),
            );
        }
        for (field, v) in [
            ("healthy_threshold", h.healthy_threshold),
            ("unhealthy_threshold", h.unhealthy_threshold),
        ] {
            if v == Some(0) {
                self.err(format!("{path}.{field}"), "must be at least 1");
            }
        }
    }

    fn services(&mut self, c: &Config) {
        let mut names: HashMap<&str, usize> = HashMap::new();
        for (i, s) in c.services.iter().enumerate() {
            let path = format!("services[{i}]");
            if s.name.trim().is_empty() {
                self.err(format!("{path}.name"), "empty service name");
            } else if let Some(j) = names.insert(&s.name, i) {
                self.err(
                    format!("{path}.name"),
                    format!("service `{}` is already defined at services[{j}]", s.name),
                );
            }
            self.service(&path, s, c);
        }
        self.rule_overlaps(c);
    }

    fn service(&mut self, path: &str, s: &ServiceConfig, c: &Config) {
        if let Some(q) = &s.backend_service.quic_lb {
            let at = format!("{path}.backend_service.quic_lb");
            self.errors.extend(super::quic::check(q, &at, &s.backend_service));
            let udp = s
                .forwarding_rules
                .iter()
                .any(|r| matches!(r.protocol, RuleProtocol::Udp | RuleProtocol::L3Default));
            if !udp {
                self.err(at, "QUIC runs over UDP: the service has no rule that takes UDP");
            }
        }
        if s.forwarding_rules.is_empty() {
            self.err(format!("{path}.forwarding_rules"), "at least one forwarding rule is needed");
        }
        for (k, r) in s.forwarding_rules.iter().enumerate() {
            let rp = format!("{path}.forwarding_rules[{k}]");
            match (&r.vip, &r.destination_prefix) {
                (Some(v), None) => {
                    if let Err(e) = parse_unicast(v) {
                        self.err(format!("{rp}.vip"), e);
                    }
                }
                (None, Some(p)) => {
                    if let Err(e) = parse_prefix(p) {
                        self.err(format!("{rp}.destination_prefix"), e);
                    }
                }
                (Some(_), Some(_)) => self.err(
                    format!("{rp}.destination_prefix"),
                    "a rule has either `vip` or `destination_prefix`, not both",
                ),
                (None, None) => self.err(rp.clone(), "needs `vip` or `destination_prefix`"),
            }
            let protocol = self.known(&format!("{rp}.protocol"), r.protocol);
            match &r.ports {
                PortsConfig::Word(w) if w == "ALL" => {}
                _ if protocol == Some(RuleProtocol::L3Default) => self.err(
                    format!("{rp}.ports"),
                    "an L3_DEFAULT rule matches every protocol, so it must use `ports: ALL`",
                ),
                PortsConfig::Word(w) => self.err(
                    format!("{rp}.ports"),
                    format!("`{w}` is neither `ALL` nor a list of ports"),
                ),
                PortsConfig::List(items) if items.is_empty() => self.err(
                    format!("{rp}.ports"),
                    "an empty list matches nothing; use `ALL` or list ports",
                ),
                PortsConfig::List(items) => {
                    for (n, item) in items.iter().enumerate() {
                        if let Err(e) = parse_port_item(item) {
                            self.err(format!("{rp}.ports[{n}]"), e);
                        }
                    }
                }
            }
        }

        let encap = &s.encapsulation;
        let ep = format!("{path}.encapsulation");
        let encap_kind = self.known(&format!("{ep}.type"), encap.kind);
        match encap.port {
            Some(_) if encap_kind.is_some_and(|k| k != EncapsulationType::Gue) => {
                self.err(format!("{ep}.port"), "only applies to type GUE")
            }
            Some(0) => self.err(format!("{ep}.port"), "0 is not a port 1..=65535"),
            _ => {}
        }

        self.backend_service(&format!("{path}.backend_service"), s, c, encap_kind);
    }

    fn backend_service(
        &mut self,
        path: &str,
        s: &ServiceConfig,
        c: &Config,
        encap_kind: Option<EncapsulationType>,
    ) {
        let b = &s.backend_service;
        let affinity = self.known(&format!("{path}.session_affinity"), b.session_affinity);
        let ct = &b.connection_tracking_policy;
        let cp = format!("{path}.connection_tracking_policy");
        let mode = self.known(&format!("{cp}.tracking_mode"), ct.tracking_mode);
        let pp = format!("{cp}.connection_persistence_on_unhealthy_backends");
        let persistence = self.known(&pp, ct.connection_persistence_on_unhealthy_backends);
        if persistence == Some(Persistence::AlwaysPersist) && mode == Some(TrackingMode::PerSession)
        {
            self.err(pp, "ALWAYS_PERSIST cannot be used with tracking_mode PER_SESSION (CP-3)");
        }
        if let (Some(t), Some(mode), Some(affinity)) = (ct.idle_timeout_sec, mode, affinity) {
            let (_, min, max) = idle_timeout_bounds(mode, affinity);
            if !(min..=max).contains(&t) {
                self.err(
                    format!("{cp}.idle_timeout_sec"),
                    format!(
                        "{t} is out of range {min}..={max} for {} with session_affinity {} (CT-9)",
                        mode.as_str(),
                        affinity.as_str()
                    ),
                );
            }
        }
        let d = b.connection_draining.draining_timeout_sec;
        if !DRAINING_RANGE.contains(&d) {
            self.err(
                format!("{path}.connection_draining.draining_timeout_sec"),
                format!("{d} is out of range 0..={} (CD-3)", DRAINING_RANGE.end()),
            );
        }
        let has_failover = b.backends.iter().any(|g| g.failover);
        if let Some(f) = &b.failover_policy {
            if !unit_range(f.failover_ratio) {
                self.err(
                    format!("{path}.failover_policy.failover_ratio"),
                    format!("{} is outside [0, 1] (FO-2)", f.failover_ratio),
                );
            }
            if !has_failover {
                self.err(
                    format!("{path}.failover_policy"),
                    "a failover policy needs at least one group with `failover: true`",
                );
            }
        }
        let z = &b.zonal_affinity;
        let zp = format!("{path}.zonal_affinity");
        let spill = self.known(&format!("{zp}.spillover"), z.spillover);
        if !unit_range(z.spillover_ratio) {
            self.err(
                format!("{zp}.spillover_ratio"),
                format!("{} is outside [0, 1] (ZA-5)", z.spillover_ratio),
            );
        } else if z.spillover_ratio != 0.0 && spill.is_some_and(|s| s != Spillover::SpillCrossZone)
        {
            self.err(
                format!("{zp}.spillover_ratio"),
                format!(
                    "only applies to ZONAL_AFFINITY_SPILL_CROSS_ZONE (spillover is {})",
                    z.spillover
                ),
            );
        }
        if let Some(a) = &b.advanced {
            let ap = format!("{path}.advanced");
            if let Some(t) = a.failover_health_threshold {
                if !THRESHOLD_RANGE.contains(&t) {
                    self.err(
                        format!("{ap}.failover_health_threshold"),
                        format!(
                            "{t} is out of range {}..={} (AL-7: an integer percent)",
                            THRESHOLD_RANGE.start(),
                            THRESHOLD_RANGE.end()
                        ),
                    );
                }
            }
            if spill.is_some_and(|s| s != Spillover::Disabled) {
                self.err(
                    format!("{zp}.spillover"),
                    format!(
                        "{} cannot be combined with `advanced`: advanced load balancing \
                         (section 7) replaces zonal affinity (section 4); remove one of them",
                        z.spillover
                    ),
                );
            }
        }
        self.groups(path, s, c, encap_kind);
    }

    /// Section 7 settings of one group: only with `advanced`, each in range.
    fn group_advanced(&mut self, gp: &str, grp: &BackendGroupConfig, advanced: bool) {
        if !advanced {
            for (field, set) in [
                ("capacity", grp.capacity.is_some()),
                ("capacity_scaler", grp.capacity_scaler.is_some()),
                ("preferred", grp.preferred.is_some()),
            ] {
                if set {
                    self.err(
                        format!("{gp}.{field}"),
                        "only applies to a service with `backend_service.advanced` (section 7), \
                         which this service does not set",
                    );
                }
            }
            return;
        }
        if let Some(cap) = &grp.capacity {
            let cp = format!("{gp}.capacity");
            match (cap.max_rate_per_endpoint, cap.max_connections_per_endpoint) {
                (None, None) => {
                    self.err(cp, "needs `max_rate_per_endpoint` or `max_connections_per_endpoint`")
                }
                (Some(_), Some(_)) => self.err(
                    format!("{cp}.max_connections_per_endpoint"),
                    "a capacity is either `max_rate_per_endpoint` or \
                     `max_connections_per_endpoint`, not both",
                ),
                (Some(v), None) | (None, Some(v)) => {
                    let field = if cap.max_rate_per_endpoint.is_some() {
                        "max_rate_per_endpoint"
                    } else {
                        "max_connections_per_endpoint"
                    };
                    if !(v.is_finite() && v > 0.0) {
                        self.err(
                            format!("{cp}.{field}"),
                            format!("{v} must be a number > 0 (use capacity_scaler: 0 to drain)"),
                        );
                    }
                }
            }
        }
        if let Some(x) = grp.capacity_scaler {
            if !unit_range(x) {
                self.err(format!("{gp}.capacity_scaler"), format!("{x} is outside [0, 1]"));
            }
        }
    }

    fn groups(
        &mut self,
        path: &str,
        s: &ServiceConfig,
        c: &Config,
        encap_kind: Option<EncapsulationType>,
    ) {
        let b = &s.backend_service;
        let bp = format!("{path}.backends");
        if b.backends.is_empty() {
            self.err(bp.clone(), "at least one backend group is needed");
        }
        for (role, failover) in [("primary", false), ("failover", true)] {
            let n = b.backends.iter().filter(|g| g.failover == failover).count();
            if n > MAX_GROUPS_PER_ROLE {
                self.err(
                    bp.clone(),
                    format!("{n} {role} groups; at most {MAX_GROUPS_PER_ROLE} are allowed"),
                );
            }
        }
        let zones: HashSet<&str> = c.topology.zones.iter().map(|z| z.name.as_str()).collect();
        let node = c.node_addrs();
        let encap = encap_kind.map(|k| match k {
            EncapsulationType::Ipip => Encap::Ipip,
            EncapsulationType::Gue => Encap::Gue { port: 0 },
            EncapsulationType::L2 => Encap::L2,
        });
        let mut group_names: HashMap<&str, usize> = HashMap::new();
        let mut endpoints: BTreeMap<Endpoint, String> = BTreeMap::new();
        let mut family_reported = [false, false];
        let mut total = 0usize;
        for (g, grp) in b.backends.iter().enumerate() {
            let gp = format!("{bp}[{g}]");
            if grp.group.trim().is_empty() {
                self.err(format!("{gp}.group"), "empty group name");
            } else if let Some(j) = group_names.insert(&grp.group, g) {
                self.err(
                    format!("{gp}.group"),
                    format!("group `{}` is already defined at {bp}[{j}]", grp.group),
                );
            }
            if !zones.contains(grp.zone.as_str()) {
                self.err(format!("{gp}.zone"), unknown_zone(&grp.zone, c));
            }
            self.group_advanced(&gp, grp, b.advanced.is_some());
            if let Some(w) = grp.weight {
                if !WEIGHT_RANGE.contains(&w) {
                    self.err(
                        format!("{gp}.weight"),
                        format!(
                            "{w} is out of range {}..={}",
                            WEIGHT_RANGE.start(),
                            WEIGHT_RANGE.end()
                        ),
                    );
                }
            }
            let check = match &grp.health_check {
                Some(name) => match c.health_checks.get(name) {
                    Some(h) => Some((name, h)),
                    None => {
                        let known: Vec<&str> = c.health_checks.keys().map(String::as_str).collect();
                        let msg = if known.is_empty() {
                            format!(
                                "health check `{name}` is not defined (`health_checks:` is empty)"
                            )
                        } else {
                            format!(
                                "health check `{name}` is not defined in `health_checks:` \
                                 (defined: {})",
                                known.join(", ")
                            )
                        };
                        self.err(format!("{gp}.health_check"), msg);
                        None
                    }
                },
                None => None,
            };
            if grp.endpoints.is_empty() {
                self.err(format!("{gp}.endpoints"), "a group needs at least one endpoint");
            }
            total += grp.endpoints.len();
            for (e, text) in grp.endpoints.iter().enumerate() {
                let epath = format!("{gp}.endpoints[{e}]");
                let ep = match parse_endpoint(text) {
                    Ok(ep) => ep,
                    Err(m) => {
                        self.err(epath, m);
                        continue;
                    }
                };
                if let Some(first) = endpoints.get(&ep) {
                    self.err(
                        epath.clone(),
                        format!("`{text}` is already a backend of this service at {first}"),
                    );
                } else {
                    endpoints.insert(ep, epath.clone());
                }
                if let Some((name, h)) = check {
                    if h.port.is_none() && ep.port == 0 {
                        self.err(
                            epath.clone(),
                            format!(
                                "`{text}` has no port and health check `{name}` sets none: \
                                 give one of them a port"
                            ),
                        );
                    }
                }
                let fam = usize::from(!ep.addr.is_v4());
                if !family_reported[fam] {
                    if let Some(msg) = reachability(&node, encap, ep.addr) {
                        family_reported[fam] = true;
                        self.err(epath, msg);
                    }
                }
            }
        }
        let size = c.dataplane.maglev_table_size;
        if total > size as usize || total > usize::from(u16::MAX) {
            self.err(
                bp,
                format!(
                    "{total} endpoints do not fit a Maglev table of {size} \
                     (dataplane.maglev_table_size)"
                ),
            );
        }
    }

    /// FR-1: two rules with the same destination, protocol and kind of ports that share a
    /// port are equally specific and overlap. Also catches the same VIP in two services.
    fn rule_overlaps(&mut self, c: &Config) {
        let mut by_dest: RulesByDest = HashMap::new();
        for (i, s) in c.services.iter().enumerate() {
            for (k, r) in s.forwarding_rules.iter().enumerate() {
                let protocol = format!("services[{i}].forwarding_rules[{k}].protocol");
                if self.known(&protocol, ()).is_none() {
                    continue;
                }
                let Ok(rule) = compile::compile_rule(r) else { continue };
                let earlier = by_dest.entry((rule.dest, rule.protocol)).or_default();
                if let Some((j, l, _)) =
                    earlier.iter().find(|(_, _, p)| same_kind_overlap(p, &rule.ports))
                {
                    let (dest, proto) = (describe_dest(rule.dest), r.protocol.as_str());
                    let other = if *j == i {
                        String::new()
                    } else {
                        format!(" of service `{}`", c.services[*j].name)
                    };
                    self.err(
                        format!("services[{i}].forwarding_rules[{k}]"),
                        format!(
                            "overlaps services[{j}].forwarding_rules[{l}]{other} with equal \
                             specificity ({dest}, {proto}, {}): no rule would win (FR-1)",
                            describe_ports(&rule.ports)
                        ),
                    );
                }
                earlier.push((i, k, rule.ports));
            }
        }
    }
}

/// Rules seen so far per (destination, protocol): (service index, rule index, ports).
type RulesByDest = HashMap<(RuleDest, RuleProtocol), Vec<(usize, usize, Ports)>>;

/// Both `ALL`, or both lists sharing a port.
fn same_kind_overlap(a: &Ports, b: &Ports) -> bool {
    match (a, b) {
        (Ports::All, Ports::All) => true,
        (Ports::List(x), Ports::List(y)) => {
            x.iter().any(|&(lo1, hi1)| y.iter().any(|&(lo2, hi2)| lo1 <= hi2 && lo2 <= hi1))
        }
        _ => false,
    }
}

fn describe_dest(d: RuleDest) -> String {
    match d {
        RuleDest::Vip(a) => format!("VIP {a}"),
        RuleDest::Prefix(p) => format!("prefix {p}"),
    }
}

fn describe_ports(p: &Ports) -> String {
    match p {
        Ports::All => "ports ALL".to_owned(),
        Ports::List(_) => "overlapping port lists".to_owned(),
    }
}

/// Every region: `topology.region` (when set) and the regions of the zones, in the order they
/// first appear.
fn known_regions(c: &Config) -> Vec<&str> {
    let t = &c.topology;
    let mut out: Vec<&str> = Vec::new();
    let zones = t.zones.iter().map(|z| z.region.as_deref().unwrap_or(&t.region));
    for r in zones.chain(std::iter::once(t.region.as_str())) {
        if !r.trim().is_empty() && !out.contains(&r) {
            out.push(r);
        }
    }
    out
}

fn unknown_region(region: &str, known: &[&str]) -> String {
    if known.is_empty() {
        format!("region `{region}` is not the region of any zone (none are defined)")
    } else {
        format!("region `{region}` is not the region of any zone ({})", known.join(", "))
    }
}

fn unknown_zone(zone: &str, c: &Config) -> String {
    let known: Vec<&str> = c.topology.zones.iter().map(|z| z.name.as_str()).collect();
    if known.is_empty() {
        format!("zone `{zone}` is not in topology.zones (none are defined)")
    } else {
        format!("zone `{zone}` is not in topology.zones ({})", known.join(", "))
    }
}

/// Why packets could not reach a backend at `addr` with this encapsulation, if they could not.
/// Encapsulated packets (IPIP, GUE) need a node address of the backend's family as their
/// outer source, and a gateway when the backend is off-link; L2 backends must be on-link.
fn reachability(node: &NodeAddrs, encap: Option<Encap>, addr: Addr) -> Option<String> {
    let family = if addr.is_v4() { "ipv4" } else { "ipv6" };
    let fam = if addr.is_v4() { "IPv4" } else { "IPv6" };
    match encap? {
        Encap::Ipip | Encap::Gue { .. } => {
            if node.own(addr).is_none() {
                Some(format!(
                    "an encapsulated {fam} backend needs `dataplane.node.{family}` (the outer \
                     source address)"
                ))
            } else if !node.on_link(addr) && node.gateway(addr).is_none() {
                Some(format!(
                    "{addr} is outside dataplane.node.{family}'s prefix and \
                     `dataplane.node.gateway_{family}` is not set"
                ))
            } else {
                None
            }
        }
        Encap::L2 => (node.own(addr).is_some() && !node.on_link(addr)).then(|| {
            format!("an L2 backend must be on-link, but {addr} is outside dataplane.node.{family}")
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_overlap_needs_the_same_kind() {
        let all = Ports::All;
        let web = Ports::List(vec![(80, 80), (443, 443)]);
        let high = Ports::List(vec![(400, 500)]);
        let other = Ports::List(vec![(8080, 8080)]);
        assert!(same_kind_overlap(&all, &all));
        assert!(!same_kind_overlap(&all, &web));
        assert!(same_kind_overlap(&web, &high));
        assert!(!same_kind_overlap(&web, &other));
    }
}
