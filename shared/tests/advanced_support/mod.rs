//! Builders for the section 7 tests: two regions x three zones, one group of four endpoints
//! per zone, client subnets per zone, and an uneven client load.
#![allow(dead_code)]

use spillway_core::addr::{Addr, Prefix};
use spillway_core::model::{
    AdvancedPolicy, Algorithm, Capacity, ClientSubnet, Endpoint, Group, GroupAdvanced, Model,
    Ports, Rule, RuleDest, RuleProtocol, Service, Zone,
};
use spillway_core::simulator::{Simulator, TrafficPlan, TrafficReport, TrafficSource};

pub const VIP: &str = "198.18.0.100";
/// The six zones: r1-a, r1-b, r1-c (region r1, the balancer's own), r2-a, r2-b, r2-c.
pub const ZONES: [&str; 6] = ["r1-a", "r1-b", "r1-c", "r2-a", "r2-b", "r2-c"];
/// Uneven offered load in new connections per second, per zone (r1: 840, r2: 180).
pub const UNEVEN: [u32; 6] = [480, 240, 120, 120, 60, 0];
/// Capacity per endpoint (new connections per second); 4 endpoints: 400 per group.
pub const PER_ENDPOINT: f64 = 100.0;
pub const GROUP_CAPACITY: f64 = 400.0;

pub fn a(s: &str) -> Addr {
    s.parse().unwrap()
}

/// The topology: zones, client subnets 10.<region>.<zone>.0/24.
pub fn topology() -> Model {
    let mut m = Model::empty();
    m.region = "r1".into();
    m.table_size = 16381;
    for z in ZONES {
        m.zones.push(Zone { name: z.into(), region: z[..2].into() });
    }
    for (i, z) in ZONES.iter().enumerate() {
        let prefix: Prefix = format!("10.{}.{}.0/24", &z[1..2], i + 1).parse().unwrap();
        m.client_subnets.push(ClientSubnet { prefix, zone: Some(i as u16) });
    }
    m
}

/// Group `g-<zone>` with `n` endpoints 10.100.<zone index>.<1..n> (n <= 250).
pub fn group(m: &Model, zone: &str, n: usize) -> Group {
    let zi = m.zone_id(zone).unwrap();
    Group {
        name: format!("g-{zone}"),
        zone: zi,
        failover: false,
        weight: 1,
        endpoints: (0..n)
            .map(|k| Endpoint { addr: a(&format!("10.100.{}.{}", zi, k + 1)), port: 0 })
            .collect(),
    }
}

/// Service `web` on the VIP, with the given groups and advanced policy.
pub fn service(groups: Vec<Group>, advanced: Option<AdvancedPolicy>) -> Service {
    let mut s = Service::new("web");
    s.rules.push(Rule {
        dest: RuleDest::Vip(a(VIP)),
        protocol: RuleProtocol::Tcp,
        ports: Ports::List(vec![(80, 80)]),
    });
    s.groups = groups;
    s.advanced = advanced;
    s
}

/// An advanced policy with every group at `capacity` per endpoint.
pub fn policy(algorithm: Algorithm, groups: &[Group], capacity: Capacity) -> AdvancedPolicy {
    AdvancedPolicy {
        algorithm,
        groups: groups
            .iter()
            .map(|g| GroupAdvanced { capacity, ..GroupAdvanced::new(&g.name) })
            .collect(),
        ..AdvancedPolicy::default()
    }
}

/// The standard scenario: one group of 4 endpoints per zone, 100 conn/s per endpoint.
pub fn scenario(algorithm: Algorithm) -> Model {
    let mut m = topology();
    let groups: Vec<Group> = ZONES.iter().map(|z| group(&m, z, 4)).collect();
    let p = policy(algorithm, &groups, Capacity::RatePerEndpoint(PER_ENDPOINT));
    m.services.push(service(groups, Some(p)));
    m
}

/// A traffic step with `rates[i]` new connections per second from `ZONES[i]`.
pub fn run(sim: &mut Simulator, rates: &[u32; 6], seconds: u32, hold: u32) -> TrafficReport {
    let sources = ZONES
        .iter()
        .zip(rates)
        .filter(|(_, &r)| r > 0)
        .map(|(z, &rate)| TrafficSource { zone: z.to_string(), rate })
        .collect();
    sim.run_traffic(&TrafficPlan { service: None, sources, seconds, hold_secs: hold }).unwrap()
}

/// Group utilisation (new connections per second / capacity) over intervals `range`.
pub fn utilisation(r: &TrafficReport, group: &str, range: std::ops::Range<usize>) -> f64 {
    let secs = range.len() as f64;
    r.new_connections(group, range) as f64 / secs / GROUP_CAPACITY
}

/// Share of zone `zone`'s new connections that went to `group` over `range`.
pub fn share(r: &TrafficReport, zone: &str, group: &str, range: std::ops::Range<usize>) -> f64 {
    let total: u64 = r.groups().iter().map(|g| r.from_zone(g, zone, range.clone())).sum();
    r.from_zone(group, zone, range) as f64 / total as f64
}

pub fn g(zone: &str) -> String {
    format!("g-{zone}")
}
