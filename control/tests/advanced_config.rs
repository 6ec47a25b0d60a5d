//! Section 7 (advanced load balancing) in the configuration: the YAML compiles into the
//! model's `AdvancedPolicy` / `GroupAdvanced` with their defaults, and `topology.region_order`
//! / `topology.latencies` into the `Topology` the daemon and the simulator pass to
//! `PolicyState::set_topology`, which orders groups by locality as configured. (The validation
//! rules, one test each, are in tests/config_validation.rs; the traffic simulation in
//! tests/simulate.rs.)

use std::path::Path;

use spillway_control::config::Config;
use spillway_core::advanced::{Distances, Latency, LoadUnit, Topology, OTHER_REGION};
use spillway_core::model::{
    AdvancedPolicy, Algorithm, Capacity, Damping, GroupAdvanced, DEFAULT_FAILOVER_HEALTH_THRESHOLD,
};
use spillway_core::policy::ZonalAffinity;
use spillway_core::state::PolicyState;
use spillway_core::time::Time;

fn parse(text: &str) -> Config {
    Config::from_yaml(Path::new("t.yaml"), text).unwrap_or_else(|e| panic!("{e}"))
}

fn shipped(name: &str) -> Config {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs").join(name);
    // Parsed and validated; the key files it names (QUIC-LB) are not on this machine.
    let text = std::fs::read_to_string(&path).unwrap();
    Config::from_yaml(&path, &text).unwrap_or_else(|e| panic!("{e}"))
}

/// Three zones in r1 (the balancer's region), one in r2, one in r3; one service `s` with a
/// group per zone; `advanced` and `topology_extra` as given.
fn config(advanced: &str, topology_extra: &str, group_extra: &str) -> String {
    let mut groups = String::new();
    for (i, z) in ["a1", "a2", "a3", "b1", "c1"].iter().enumerate() {
        groups.push_str(&format!(
            "        - group: g-{z}\n          zone: {z}\n{group_extra}          endpoints: \
             [198.18.{}.1]\n",
            i + 1
        ));
    }
    format!(
        "dataplane:\n  ports: [net_null0]\n  node: {{ipv4: 198.18.0.2/16}}\ntopology:\n  \
         region: r1\n  zones:\n    - name: a1\n    - name: a2\n    - name: a3\n    - name: b1\n      \
         region: r2\n    - name: c1\n      region: r3\n  client_subnets:\n    - prefix: \
         198.18.10.0/24\n      zone: a1\n{topology_extra}services:\n  - name: s\n    \
         forwarding_rules:\n      - vip: 198.18.0.10\n    backend_service:\n{advanced}      \
         backends:\n{groups}"
    )
}

#[test]
fn without_advanced_the_model_has_none_and_the_topology_is_empty() {
    let c = parse(&config("", "", ""));
    let m = c.to_model();
    assert_eq!(m.services[0].advanced, None);
    assert_eq!(c.advanced_topology(), Topology::default());
}

#[test]
fn an_empty_advanced_block_gets_every_default() {
    let c = parse(&config("      advanced: {}\n", "", ""));
    let adv = c.to_model().services[0].advanced.clone().expect("advanced");
    assert_eq!(adv.algorithm, Algorithm::WaterfallByRegion);
    assert_eq!(adv.failover_health_threshold, DEFAULT_FAILOVER_HEALTH_THRESHOLD);
    assert_eq!(adv.failover_health_threshold, 70);
    assert!(!adv.auto_capacity_drain);
    assert_eq!(adv.damping, Damping::default());
    // Every group is listed, with the defaults: unbounded, scaler 1, not preferred.
    let names: Vec<&str> = adv.groups.iter().map(|g| g.group.as_str()).collect();
    assert_eq!(names, ["g-a1", "g-a2", "g-a3", "g-b1", "g-c1"]);
    for g in &adv.groups {
        assert_eq!(g, &GroupAdvanced::new(&g.group));
    }
    assert_eq!(c.to_model().services[0].zonal, ZonalAffinity::Disabled);
}

#[test]
fn every_algorithm_and_group_setting_compiles() {
    for &alg in Algorithm::ALL {
        let c = parse(&config(
            &format!(
                "      advanced:\n        algorithm: {}\n        failover_health_threshold: 85\n        \
                 auto_capacity_drain: true\n",
                alg.as_str()
            ),
            "",
            "          capacity: {max_connections_per_endpoint: 250}\n          capacity_scaler: \
             0.25\n          preferred: true\n",
        ));
        let adv = c.to_model().services[0].advanced.clone().unwrap();
        assert_eq!(
            (adv.algorithm, adv.failover_health_threshold, adv.auto_capacity_drain),
            (alg, 85, true)
        );
        for g in &adv.groups {
            assert_eq!(g.capacity, Capacity::ConnectionsPerEndpoint(250.0));
            assert_eq!((g.capacity_scaler, g.preferred), (0.25, true));
        }
    }
    let c = parse(&config(
        "      advanced: {}\n",
        "",
        "          capacity: {max_rate_per_endpoint: 1000.5}\n",
    ));
    let adv = c.to_model().services[0].advanced.clone().unwrap();
    assert!(adv.groups.iter().all(|g| g.capacity == Capacity::RatePerEndpoint(1000.5)));
}

#[test]
fn the_example_compiles_its_advanced_service_and_topology() {
    let c = shipped("example.yaml");
    let m = c.to_model();
    let api = m.services.iter().find(|s| s.name == "api").expect("the advanced service");
    assert_eq!(api.zonal, ZonalAffinity::Disabled);
    assert_eq!(
        api.advanced,
        Some(AdvancedPolicy {
            algorithm: Algorithm::WaterfallByRegion,
            failover_health_threshold: 70,
            auto_capacity_drain: true,
            groups: vec![
                GroupAdvanced {
                    group: "api-a".into(),
                    capacity: Capacity::RatePerEndpoint(500.0),
                    capacity_scaler: 1.0,
                    preferred: true,
                },
                GroupAdvanced {
                    group: "api-b".into(),
                    capacity: Capacity::RatePerEndpoint(500.0),
                    capacity_scaler: 0.5,
                    preferred: false,
                },
                GroupAdvanced {
                    group: "api-eu".into(),
                    capacity: Capacity::ConnectionsPerEndpoint(20000.0),
                    capacity_scaler: 1.0,
                    preferred: false,
                },
            ],
            damping: Damping::default(),
        })
    );
    assert!(m.services.iter().filter(|s| s.name != "api").all(|s| s.advanced.is_none()));
    // Latencies in microseconds (what the core compares); 0.6 ms is 600 us.
    assert_eq!(
        c.advanced_topology(),
        Topology {
            region_order: vec!["us-central1".into(), "europe-west1".into()],
            latencies: vec![
                Latency { a: "us-central1".into(), b: "europe-west1".into(), latency: 98_000 },
                Latency { a: "us-central1-a".into(), b: "us-central1-c".into(), latency: 600 },
            ],
        }
    );
    // The policy state accepts both and builds a snapshot with the advanced service.
    let zones = m.zones.len();
    let zone_of = |name: &str| m.zone_id(name).unwrap_or_else(|| panic!("zone {name}"));
    let group_zones =
        [zone_of("us-central1-a"), zone_of("us-central1-b"), zone_of("europe-west1-b")];
    let mut st = PolicyState::new(true);
    st.set_topology(c.advanced_topology());
    st.apply_model(m, Time::ZERO).unwrap();
    assert!(st.has_advanced());
    let snap = st.snapshot(Time::ZERO);
    let views: Vec<_> = snap.services.iter().flatten().collect();
    assert!(views.iter().filter(|s| &*s.name != "api").all(|s| s.advanced.is_none()));
    let api = views.iter().find(|s| &*s.name == "api").expect("api in the snapshot");
    let adv = api.advanced.as_ref().expect("the api service's section 7 view");
    assert_eq!(
        (adv.algorithm, adv.unit, adv.failover_health_threshold),
        (Algorithm::WaterfallByRegion, LoadUnit::Rate, 70)
    );
    // Groups in configuration order, every endpoint healthy (the state's default here); the
    // rate capacities are per-endpoint capacity x healthy endpoints x capacity_scaler.
    let groups: Vec<_> = adv
        .groups
        .iter()
        .map(|g| (&*g.name, g.zone, g.preferred, g.endpoints, g.healthy, g.in_eligible))
        .collect();
    assert_eq!(
        groups,
        [
            ("api-a", group_zones[0], true, 2, 2, 2),
            ("api-b", group_zones[1], false, 2, 2, 2),
            ("api-eu", group_zones[2], false, 1, 1, 1),
        ]
    );
    assert_eq!((adv.groups[0].capacity, adv.groups[1].capacity), (1000.0, 500.0));
    assert!(adv.groups.iter().all(|g| !g.auto_drained && g.retained == 1.0));
    // One client view per zone and one for clients without a zone; with no demand yet, each
    // places its next flow in the preferred group first (AL-5): weights (1, 0, 0).
    assert_eq!(adv.clients.len(), zones + 1);
    assert_eq!(adv.clients.last().map(|c| c.zone), Some(None));
    for client in &adv.clients {
        assert_eq!(client.weights, [1.0, 0.0, 0.0], "{client:?}");
    }
    assert_eq!(api.zone_choices.len(), zones);
}

#[test]
fn the_demo_config_still_loads() {
    let c = shipped("demo.yaml");
    assert_eq!(c.advanced_topology(), Topology::default());
}

/// The compiled topology orders groups as configured: zone latencies within r1, region
/// latencies first, then `region_order` for the pairs without one.
#[test]
fn the_compiled_topology_orders_zones_and_regions() {
    let zone = |m: &spillway_core::model::Model, n: &str| m.zone_id(n).unwrap();
    // Default: configuration order, every zone of the region at the same distance.
    let c = parse(&config("      advanced: {}\n", "", ""));
    let m = c.to_model();
    let d = Distances::new(&m, &c.advanced_topology());
    let from = Some(zone(&m, "a1"));
    assert_eq!(d.distance(from, zone(&m, "a1")), 0);
    assert_eq!(d.distance(from, zone(&m, "a2")), d.distance(from, zone(&m, "a3")));
    assert!(d.distance(from, zone(&m, "b1")) < d.distance(from, zone(&m, "c1")), "r2 first");
    assert!(d.distance(from, zone(&m, "b1")) >= OTHER_REGION);

    // region_order puts r3 before r2.
    let c = parse(&config("      advanced: {}\n", "  region_order: [r1, r3, r2]\n", ""));
    let m = c.to_model();
    let d = Distances::new(&m, &c.advanced_topology());
    assert!(d.distance(from, zone(&m, "c1")) < d.distance(from, zone(&m, "b1")), "r3 first");

    // Latencies: a3 nearer than a2 (a1-a2 5 ms, a1-a3 1 ms); r2 with a latency before r3
    // without one, whatever region_order says.
    let c = parse(&config(
        "      advanced: {}\n",
        "  region_order: [r1, r3, r2]\n  latencies:\n    - {from: a1, to: a2, ms: 5}\n    - \
         {from: a3, to: a1, ms: 1}\n    - {from: r2, to: r1, ms: 120}\n",
        "",
    ));
    let m = c.to_model();
    let d = Distances::new(&m, &c.advanced_topology());
    assert!(d.distance(from, zone(&m, "a3")) < d.distance(from, zone(&m, "a2")));
    assert!(d.distance(from, zone(&m, "a2")) < d.distance(from, zone(&m, "b1")));
    assert!(d.distance(from, zone(&m, "b1")) < d.distance(from, zone(&m, "c1")));
}
