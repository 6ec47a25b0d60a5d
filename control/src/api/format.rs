//! Values as the API's replies write them: addresses with ports, protocols, tracking keys,
//! hashes, zones, configuration enums, numbers without a negative zero.

use crate::controller::Override;
use spillway_core::addr::Addr;
use spillway_core::advanced::LoadUnit;
use spillway_core::flow::{proto, FlowKey, PacketInfo};
use spillway_core::model::{Encap, Ports, RuleDest, RuleProtocol};
use spillway_core::policy::ZonalAffinity;
use spillway_core::snapshot::Snapshot;

/// `addr:port` (`[v6]:port`).
pub(super) fn sock(a: Addr, port: u16) -> String {
    if a.is_v4() {
        format!("{a}:{port}")
    } else {
        format!("[{a}]:{port}")
    }
}

pub(super) fn protocol_name(p: u8) -> String {
    match p {
        proto::TCP => "tcp".into(),
        proto::UDP => "udp".into(),
        proto::ICMP => "icmp".into(),
        proto::ICMPV6 => "icmpv6".into(),
        n => n.to_string(),
    }
}

/// A tracking key as text: `2-tuple 198.51.100.7 -> 10.0.0.10`.
pub(super) fn key_str(k: &FlowKey) -> String {
    let p = protocol_name(k.proto);
    match k.kind {
        1 => format!("1-tuple {}", k.src),
        2 => format!("2-tuple {} -> {}", k.src, k.dst),
        3 => format!("3-tuple {p} {} -> {}", k.src, k.dst),
        _ => format!("5-tuple {p} {} -> {}", sock(k.src, k.sport), sock(k.dst, k.dport)),
    }
}

/// A flow as text: `tcp 192.0.2.7:40000 -> 198.51.100.10:80`, `icmp 192.0.2.7 -> ...`.
pub(super) fn flow_str(p: &PacketInfo) -> String {
    let proto = protocol_name(p.proto);
    if p.has_ports() {
        format!("{proto} {} -> {}", sock(p.src, p.sport), sock(p.dst, p.dport))
    } else {
        format!("{proto} {} -> {}", p.src, p.dst)
    }
}

/// A hash or fingerprint: `0x` and 16 hex digits.
pub(super) fn hex(h: u64) -> String {
    format!("{h:#018x}")
}

/// The name of a zone slot (empty when the snapshot has none).
pub(super) fn zone_name(snap: &Snapshot, z: u16) -> String {
    snap.zone_names.get(usize::from(z)).cloned().unwrap_or_default()
}

/// The API name of a section 7 load unit.
pub(super) fn unit_name(u: LoadUnit) -> &'static str {
    match u {
        LoadUnit::Rate => "new_connections_per_second",
        LoadUnit::Connections => "connections",
    }
}

/// `v` without a negative zero (smoothing can leave `-0.0`, which JSON would show).
pub(super) fn unsigned_zero(v: f64) -> f64 {
    if v == 0.0 {
        0.0
    } else {
        v
    }
}

/// A rule's destination: the VIP or the prefix.
pub(super) fn rule_destination(d: &RuleDest) -> String {
    match d {
        RuleDest::Vip(a) => a.to_string(),
        RuleDest::Prefix(p) => p.to_string(),
    }
}

/// A rule's protocol as the configuration spells it.
pub(super) fn rule_protocol(p: RuleProtocol) -> &'static str {
    match p {
        RuleProtocol::Tcp => "TCP",
        RuleProtocol::Udp => "UDP",
        RuleProtocol::L3Default => "L3_DEFAULT",
    }
}

/// A rule's ports: `ALL`, or ports and ranges `80,8000-8080`.
pub(super) fn rule_ports(p: &Ports) -> String {
    match p {
        Ports::All => "ALL".to_owned(),
        Ports::List(l) => l
            .iter()
            .map(|&(lo, hi)| if lo == hi { lo.to_string() } else { format!("{lo}-{hi}") })
            .collect::<Vec<_>>()
            .join(","),
    }
}

/// Zonal affinity as the configuration spells it, with the spillover ratio when it has one.
pub(super) fn zonal_affinity(z: ZonalAffinity) -> (&'static str, Option<f64>) {
    match z {
        ZonalAffinity::Disabled => ("ZONAL_AFFINITY_DISABLED", None),
        ZonalAffinity::StayWithinZone => ("ZONAL_AFFINITY_STAY_WITHIN_ZONE", None),
        ZonalAffinity::SpillCrossZone { ratio } => ("ZONAL_AFFINITY_SPILL_CROSS_ZONE", Some(ratio)),
    }
}

/// Encapsulation: `IPIP`, `GUE:port` or `L2`.
pub(super) fn encapsulation(e: Encap) -> String {
    match e {
        Encap::Ipip => "IPIP".to_owned(),
        Encap::Gue { port } => format!("GUE:{port}"),
        Encap::L2 => "L2".to_owned(),
    }
}

/// The probes' verdict: `healthy`, `unhealthy`, or `unknown` when nothing probes it.
pub(super) fn probe(verdict: Option<bool>) -> &'static str {
    match verdict {
        Some(true) => "healthy",
        Some(false) => "unhealthy",
        None => "unknown",
    }
}

/// The operator's override: `healthy`, `unhealthy`, or `auto` without one.
pub(super) fn health_override(o: Option<Override>) -> &'static str {
    match o {
        Some(Override::Healthy) => "healthy",
        Some(Override::Unhealthy) => "unhealthy",
        None => "auto",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Addr {
        s.parse().expect("address")
    }

    #[test]
    fn addresses_flows_and_keys_read_as_in_the_docs() {
        assert_eq!(sock(a("192.0.2.7"), 80), "192.0.2.7:80");
        assert_eq!(sock(a("2001:db8::7"), 80), "[2001:db8::7]:80");
        let p = |proto, sport, dport| PacketInfo {
            src: a("192.0.2.7"),
            dst: a("198.51.100.10"),
            proto,
            sport,
            dport,
            fragment: false,
            tcp_flags: 0,
            icmp_error: false,
        };
        assert_eq!(flow_str(&p(proto::TCP, 40000, 80)), "tcp 192.0.2.7:40000 -> 198.51.100.10:80");
        assert_eq!(flow_str(&p(proto::ICMP, 0, 0)), "icmp 192.0.2.7 -> 198.51.100.10");
        let k = |kind, proto| FlowKey {
            src: a("192.0.2.7"),
            dst: a("198.51.100.10"),
            sport: 40000,
            dport: 80,
            proto,
            kind,
            service: 0,
        };
        assert_eq!(key_str(&k(1, 0)), "1-tuple 192.0.2.7");
        assert_eq!(key_str(&k(2, 0)), "2-tuple 192.0.2.7 -> 198.51.100.10");
        assert_eq!(key_str(&k(3, 47)), "3-tuple 47 192.0.2.7 -> 198.51.100.10");
        assert_eq!(key_str(&k(5, proto::UDP)), "5-tuple udp 192.0.2.7:40000 -> 198.51.100.10:80");
        assert_eq!(hex(0xab), "0x00000000000000ab");
    }

    #[test]
    fn configuration_values_read_as_the_configuration_spells_them() {
        assert_eq!(rule_ports(&Ports::All), "ALL");
        assert_eq!(rule_ports(&Ports::List(vec![(80, 80), (8000, 8080)])), "80,8000-8080");
        assert_eq!(rule_protocol(RuleProtocol::L3Default), "L3_DEFAULT");
        assert_eq!(
            zonal_affinity(ZonalAffinity::SpillCrossZone { ratio: 0.6 }),
            ("ZONAL_AFFINITY_SPILL_CROSS_ZONE", Some(0.6))
        );
        assert_eq!(encapsulation(Encap::Gue { port: 6080 }), "GUE:6080");
        assert_eq!((probe(None), health_override(None)), ("unknown", "auto"));
        assert_eq!(unsigned_zero(-0.0).to_string(), "0");
    }
}
