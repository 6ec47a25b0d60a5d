//! Builders shared by the decision-core tests: a small two-region topology and packets.
#![allow(dead_code)]

use spillway_core::addr::{Addr, Prefix};
use spillway_core::flow::{proto, tcp_flags, PacketInfo};
use spillway_core::model::{
    ClientSubnet, Endpoint, Group, Model, Ports, Rule, RuleDest, RuleProtocol, Service, Zone,
};
use spillway_core::simulator::{Outcome, Simulator};

pub const VIP: &str = "198.18.0.100";

pub fn a(s: &str) -> Addr {
    s.parse().unwrap()
}

pub fn ep(s: &str) -> Endpoint {
    Endpoint { addr: a(s), port: 0 }
}

/// Zones: zone-a, zone-b, zone-c, zone-d in region-1 (ours); zone-x in region-2.
/// Client subnets: 198.18.10.0/24 zone-a, 198.18.20.0/24 zone-b, 198.18.30.0/24 zone-c,
/// 198.18.90.0/24 zone-x (other region), 198.18.40.0/24 regional.
pub fn topology() -> Model {
    let mut m = Model::empty();
    m.region = "region-1".into();
    for (z, r) in [
        ("zone-a", "region-1"),
        ("zone-b", "region-1"),
        ("zone-c", "region-1"),
        ("zone-d", "region-1"),
        ("zone-x", "region-2"),
    ] {
        m.zones.push(Zone { name: z.into(), region: r.into() });
    }
    for (p, z) in [
        ("198.18.10.0/24", Some(0)),
        ("198.18.20.0/24", Some(1)),
        ("198.18.30.0/24", Some(2)),
        ("198.18.90.0/24", Some(4)),
        ("198.18.40.0/24", None),
    ] {
        m.client_subnets.push(ClientSubnet { prefix: p.parse::<Prefix>().unwrap(), zone: z });
    }
    m
}

/// A group in `zone` with the given endpoints.
pub fn group(m: &Model, name: &str, zone: &str, failover: bool, eps: &[&str]) -> Group {
    Group {
        name: name.into(),
        zone: m.zone_id(zone).unwrap(),
        failover,
        weight: 1,
        endpoints: eps.iter().map(|s| ep(s)).collect(),
    }
}

/// Service `web`: VIP 198.18.0.100, L3_DEFAULT, all ports.
pub fn web(groups: Vec<Group>) -> Service {
    let mut s = Service::new("web");
    s.rules.push(Rule {
        dest: RuleDest::Vip(a(VIP)),
        protocol: RuleProtocol::L3Default,
        ports: Ports::All,
    });
    s.groups = groups;
    s
}

/// The topology with one service built by `f`.
pub fn model_with(f: impl FnOnce(&Model) -> Service) -> Model {
    let mut m = topology();
    let s = f(&m);
    m.services.push(s);
    m
}

pub fn tcp(src: &str, sport: u16, flags: u8) -> PacketInfo {
    PacketInfo {
        src: a(src),
        dst: a(VIP),
        proto: proto::TCP,
        sport,
        dport: 80,
        tcp_flags: flags,
        ..PacketInfo::default()
    }
}

pub fn syn(src: &str, sport: u16) -> PacketInfo {
    tcp(src, sport, tcp_flags::SYN)
}

pub fn ack(src: &str, sport: u16) -> PacketInfo {
    tcp(src, sport, tcp_flags::ACK)
}

pub fn udp(src: &str, sport: u16) -> PacketInfo {
    PacketInfo {
        src: a(src),
        dst: a(VIP),
        proto: proto::UDP,
        sport,
        dport: 53,
        ..PacketInfo::default()
    }
}

pub fn icmp(src: &str) -> PacketInfo {
    PacketInfo { src: a(src), dst: a(VIP), proto: proto::ICMP, ..PacketInfo::default() }
}

/// The chosen backend's address as a string ("-" for a drop).
pub fn backend(o: &Outcome) -> String {
    o.backend.map_or_else(|| "-".to_string(), |e| e.addr.to_string())
}

pub fn reason(o: &Outcome) -> &'static str {
    o.decision.reason_str()
}

pub fn sim(m: Model) -> Simulator {
    Simulator::new(m).unwrap()
}
