//! SPEC section 3 (FO-1..FO-7) and section 4 (ZA-0..ZA-5, ZA-E1..ZA-E3), on the pure
//! functions and through the simulator. Expected sets are written out by hand.

mod common;
use common::*;
use spillway_core::eligible::{eligible, Candidate, Eligible, EligibleKind};
use spillway_core::policy::{FailoverPolicy, ZonalAffinity};
use spillway_core::zonal::zonal_adjust;
use std::collections::BTreeSet;

fn c(slot: u16, zone: u16, failover: bool, healthy: bool) -> Candidate {
    Candidate { slot, zone, failover, healthy }
}

fn pol(ratio: f64, drop: bool) -> FailoverPolicy {
    FailoverPolicy {
        failover_ratio: ratio,
        drop_traffic_if_unhealthy: drop,
        disable_connection_drain_on_failover: false,
    }
}

fn set(kind: EligibleKind, m: &[u16]) -> Eligible {
    Eligible { kind, members: m.to_vec() }
}

#[test]
fn fo_1_no_failover_groups_healthy_else_all() {
    let cs = [c(1, 0, false, true), c(2, 0, false, false), c(3, 1, false, true)];
    assert_eq!(eligible(&cs, false, &pol(0.0, false)), set(EligibleKind::HealthyPrimary, &[1, 3]));
    let down = [c(1, 0, false, false), c(2, 0, false, false)];
    assert_eq!(
        eligible(&down, false, &pol(0.0, false)),
        set(EligibleKind::UnhealthyPrimary, &[1, 2])
    );
    // drop_traffic_if_unhealthy only matters with failover groups (FO-3), not FO-1.
    assert_eq!(
        eligible(&down, false, &pol(0.0, true)),
        set(EligibleKind::UnhealthyPrimary, &[1, 2])
    );
    assert_eq!(eligible(&[], false, &pol(0.0, false)).kind, EligibleKind::Empty);
}

#[test]
fn fo_2_first_non_empty_of_five_sets() {
    // P = {1,2,3,4}, F = {10,11}.
    let mk = |p_healthy: &[bool; 4], f_healthy: &[bool; 2]| {
        let mut v: Vec<Candidate> =
            (0..4).map(|i| c(1 + i as u16, 0, false, p_healthy[i])).collect();
        v.extend((0..2).map(|i| c(10 + i as u16, 1, true, f_healthy[i])));
        v
    };
    // 1. no healthy primary -> healthy failovers.
    let cs = mk(&[false; 4], &[true, false]);
    assert_eq!(eligible(&cs, true, &pol(0.5, false)), set(EligibleKind::HealthyFailover, &[10]));
    // 2. no healthy failover -> healthy primaries (even below the ratio).
    let cs = mk(&[true, false, false, false], &[false, false]);
    assert_eq!(eligible(&cs, true, &pol(0.9, false)), set(EligibleKind::HealthyPrimary, &[1]));
    // 3. ratio 0 -> healthy primaries while any is healthy.
    let cs = mk(&[true, false, false, false], &[true, true]);
    assert_eq!(eligible(&cs, true, &pol(0.0, false)), set(EligibleKind::HealthyPrimary, &[1]));
    // 4. healthy share >= ratio -> primaries (3/4 = 0.75 >= 0.75, boundary included).
    let cs = mk(&[true, true, true, false], &[true, true]);
    assert_eq!(
        eligible(&cs, true, &pol(0.75, false)),
        set(EligibleKind::HealthyPrimary, &[1, 2, 3])
    );
    // 5. otherwise -> healthy failovers (3/4 < 0.8).
    assert_eq!(
        eligible(&cs, true, &pol(0.8, false)),
        set(EligibleKind::HealthyFailover, &[10, 11])
    );
    // Exact decimal boundaries hold: 7/10 >= 0.7.
    let mut v: Vec<Candidate> = (0..10).map(|i| c(i, 0, false, i < 7)).collect();
    v.push(c(20, 1, true, true));
    assert_eq!(eligible(&v, true, &pol(0.7, false)).kind, EligibleKind::HealthyPrimary);
}

#[test]
fn fo_3_nothing_healthy_drop_or_all_primaries() {
    let cs = [c(1, 0, false, false), c(2, 0, false, false), c(10, 1, true, false)];
    assert_eq!(eligible(&cs, true, &pol(0.1, true)), set(EligibleKind::Empty, &[]));
    assert_eq!(eligible(&cs, true, &pol(0.1, false)), set(EligibleKind::UnhealthyPrimary, &[1, 2]));
}

#[test]
fn fo_7_exactly_four_kinds() {
    let kinds: BTreeSet<&str> = [
        eligible(&[c(1, 0, false, true)], false, &pol(0.0, false)).kind,
        eligible(&[c(1, 0, false, false)], false, &pol(0.0, false)).kind,
        eligible(&[c(1, 0, false, false), c(2, 0, true, true)], true, &pol(0.0, false)).kind,
        eligible(&[c(1, 0, false, false)], true, &pol(0.0, true)).kind,
    ]
    .iter()
    .map(|k| k.as_str())
    .collect();
    assert_eq!(
        kinds,
        ["Empty", "HealthyFailover", "HealthyPrimary", "UnhealthyPrimary"].into_iter().collect()
    );
}

#[test]
fn fo_6_empty_set_drops_new_but_tracked_follow_entries() {
    let m = model_with(|m| {
        let mut s = web(vec![
            group(m, "p", "zone-a", false, &["198.18.1.1"]),
            group(m, "f", "zone-b", true, &["198.18.2.1"]),
        ]);
        s.failover.drop_traffic_if_unhealthy = true;
        s
    });
    let mut sim = sim(m);
    let first = sim.packet(&syn("198.18.10.5", 1000));
    assert_eq!(backend(&first), "198.18.1.1");
    sim.set_health_by_addr(a("198.18.1.1"), false);
    sim.set_health_by_addr(a("198.18.2.1"), false);
    let new = sim.packet(&syn("198.18.10.5", 1001));
    assert_eq!(reason(&new), "no_eligible_backend");
    assert_eq!(new.eligible.unwrap().kind, EligibleKind::Empty);
    // The tracked TCP connection persists (CP-1) and follows its entry.
    let tracked = sim.packet(&ack("198.18.10.5", 1000));
    assert_eq!((backend(&tracked), reason(&tracked)), ("198.18.1.1".into(), "conntrack_hit"));
}

fn cand_za_e2() -> Vec<Candidate> {
    // Ten primaries: 1..=5 in zone 0 (all healthy), 6..=10 in zone 1 (6,7,8 healthy).
    (1..=10u16).map(|i| c(i, u16::from(i > 5), false, i <= 8)).collect()
}

#[test]
fn za_e2_spill_cross_zone_ratio_0_8() {
    let cs = cand_za_e2();
    let a = eligible(&cs, false, &pol(0.0, false));
    assert_eq!(a.members, vec![1, 2, 3, 4, 5, 6, 7, 8]);
    let spill = ZonalAffinity::SpillCrossZone { ratio: 0.8 };
    // Client in zone-1: 5/5 = 1.0 >= 0.8 -> the five zone-1 backends.
    let z1 = zonal_adjust(&cs, &a, Some(0), spill);
    assert!(z1.zonal_match);
    assert_eq!(z1.members, vec![1, 2, 3, 4, 5]);
    // Client in zone-2: 3/5 = 0.6 < 0.8 -> all eight healthy backends.
    let z2 = zonal_adjust(&cs, &a, Some(1), spill);
    assert!(z2.zonal_match);
    assert_eq!(z2.members, vec![1, 2, 3, 4, 5, 6, 7, 8]);
}

#[test]
fn za_e1_failover_set_in_other_zones_means_no_match() {
    // Primaries in zones A(0), B(1); failovers in C(2), D(3); client in A.
    let cs = [c(1, 0, false, true), c(2, 1, false, true), c(3, 2, true, true), c(4, 3, true, true)];
    let stay = ZonalAffinity::StayWithinZone;
    // Eligible = healthy primaries -> B = primaries in A,B -> match.
    let a = eligible(&cs, true, &pol(0.0, false));
    assert_eq!(a.kind, EligibleKind::HealthyPrimary);
    let z = zonal_adjust(&cs, &a, Some(0), stay);
    assert!(z.zonal_match);
    assert_eq!(z.members, vec![1]);
    // Eligible = healthy failovers -> B = failovers in C,D -> no match.
    let down =
        [c(1, 0, false, false), c(2, 1, false, false), c(3, 2, true, true), c(4, 3, true, true)];
    let a = eligible(&down, true, &pol(0.0, false));
    assert_eq!(a.kind, EligibleKind::HealthyFailover);
    let z = zonal_adjust(&down, &a, Some(0), stay);
    assert!(!z.zonal_match);
    assert_eq!(z.members, vec![3, 4]);
}

#[test]
fn za_e3_ratio_one_needs_all_ratio_zero_needs_any() {
    // Zone 0: 1,2,3 (3 unhealthy); zone 1: 4,5 healthy.
    let cs = [
        c(1, 0, false, true),
        c(2, 0, false, true),
        c(3, 0, false, false),
        c(4, 1, false, true),
        c(5, 1, false, true),
    ];
    let a = eligible(&cs, false, &pol(0.0, false));
    let one = zonal_adjust(&cs, &a, Some(0), ZonalAffinity::SpillCrossZone { ratio: 1.0 });
    assert_eq!(one.members, vec![1, 2, 4, 5], "ratio 1.0 spills once any matched is not eligible");
    let zero = zonal_adjust(&cs, &a, Some(0), ZonalAffinity::SpillCrossZone { ratio: 0.0 });
    assert_eq!(zero.members, vec![1, 2], "ratio 0.0 stays while any is eligible");
    // All of zone 0 healthy: ratio 1.0 stays in zone.
    let all = [c(1, 0, false, true), c(2, 0, false, true), c(4, 1, false, true)];
    let a = eligible(&all, false, &pol(0.0, false));
    let one = zonal_adjust(&all, &a, Some(0), ZonalAffinity::SpillCrossZone { ratio: 1.0 });
    assert_eq!(one.members, vec![1, 2]);
    // None of zone 0 eligible: ratio 0.0 spills to A.
    let none = [c(1, 0, false, false), c(4, 1, false, true)];
    let a = eligible(&none, false, &pol(0.0, false));
    let zero = zonal_adjust(&none, &a, Some(0), ZonalAffinity::SpillCrossZone { ratio: 0.0 });
    assert_eq!(zero.members, vec![4]);
}

#[test]
fn za_2_match_needs_enabled_compatible_and_nonempty_c() {
    let cs = [c(1, 0, false, true), c(2, 1, false, true)];
    let a = eligible(&cs, false, &pol(0.0, false));
    // Disabled.
    assert!(!zonal_adjust(&cs, &a, Some(0), ZonalAffinity::Disabled).zonal_match);
    // Incompatible client.
    assert!(!zonal_adjust(&cs, &a, None, ZonalAffinity::StayWithinZone).zonal_match);
    // C empty: no group in zone 2.
    let z = zonal_adjust(&cs, &a, Some(2), ZonalAffinity::StayWithinZone);
    assert!(!z.zonal_match);
    assert_eq!(z.members, vec![1, 2], "without a match the modified set is A");
    // Empty kind: no adjustment.
    let e = Eligible { kind: EligibleKind::Empty, members: vec![] };
    assert!(!zonal_adjust(&cs, &e, Some(0), ZonalAffinity::StayWithinZone).zonal_match);
}

#[test]
fn za_3_stay_within_zone_i_else_c() {
    let cs = [c(1, 0, false, false), c(2, 0, false, true), c(3, 1, false, true)];
    let a = eligible(&cs, false, &pol(0.0, false));
    let z = zonal_adjust(&cs, &a, Some(0), ZonalAffinity::StayWithinZone);
    assert_eq!(z.members, vec![2]);
    // Every zone-0 backend unhealthy: I empty -> C (all unhealthy), not A.
    let cs = [c(1, 0, false, false), c(2, 0, false, false), c(3, 1, false, true)];
    let a = eligible(&cs, false, &pol(0.0, false));
    let z = zonal_adjust(&cs, &a, Some(0), ZonalAffinity::StayWithinZone);
    assert!(z.zonal_match);
    assert_eq!(z.members, vec![1, 2]);
}

#[test]
fn za_4_spill_ratio_zero_i_else_a() {
    let cs = [c(1, 0, false, false), c(2, 0, false, false), c(3, 1, false, true)];
    let a = eligible(&cs, false, &pol(0.0, false));
    let z = zonal_adjust(&cs, &a, Some(0), ZonalAffinity::SpillCrossZone { ratio: 0.0 });
    assert!(z.zonal_match && z.spilled);
    assert_eq!(z.members, vec![3]);
    let cs = [c(1, 0, false, false), c(2, 0, false, true), c(3, 1, false, true)];
    let a = eligible(&cs, false, &pol(0.0, false));
    let z = zonal_adjust(&cs, &a, Some(0), ZonalAffinity::SpillCrossZone { ratio: 0.0 });
    assert_eq!(z.members, vec![2]);
}

#[test]
fn za_5_spill_ratio_compares_i_over_c() {
    // Zone 0: four backends, two healthy -> computed 0.5.
    let cs = [
        c(1, 0, false, true),
        c(2, 0, false, true),
        c(3, 0, false, false),
        c(4, 0, false, false),
        c(5, 1, false, true),
    ];
    let a = eligible(&cs, false, &pol(0.0, false));
    let at = |r| zonal_adjust(&cs, &a, Some(0), ZonalAffinity::SpillCrossZone { ratio: r }).members;
    assert_eq!(at(0.5), vec![1, 2], "0.5 >= 0.5 stays");
    assert_eq!(at(0.51), vec![1, 2, 5], "0.5 < 0.51 spills to A");
    assert_eq!(at(0.25), vec![1, 2]);
}

#[test]
fn za_1_incompatible_clients_behave_as_disabled() {
    let m = model_with(|m| {
        let mut s = web(vec![
            group(m, "a", "zone-a", false, &["198.18.1.1"]),
            group(m, "b", "zone-b", false, &["198.18.2.1", "198.18.2.2", "198.18.2.3"]),
            // A group in the other region's zone: a client there still never matches.
            group(m, "x", "zone-x", false, &["198.18.9.1"]),
        ]);
        s.zonal = ZonalAffinity::StayWithinZone;
        s
    });
    let mut sim = sim(m);
    let za = sim.packet(&syn("198.18.10.5", 1000)).eligible.unwrap();
    assert!(za.zonal_match);
    assert_eq!(za.size, 1);
    for src in ["198.18.90.5", "198.18.40.5", "198.18.77.5"] {
        let e = sim.packet(&syn(src, 1000)).eligible.unwrap();
        assert!(!e.zonal_match, "{src} must be incompatible");
        assert_eq!(e.size, 5, "{src} sees the whole eligible set A");
    }
    // A zone-a client only ever reaches the zone-a backend.
    for port in 0..50 {
        assert_eq!(backend(&sim.packet(&syn("198.18.10.5", 2000 + port))), "198.18.1.1");
    }
}

#[test]
fn za_0_zonal_affinity_never_moves_tracked_entries() {
    let m = model_with(|m| {
        web(vec![
            group(m, "a", "zone-a", false, &["198.18.1.1"]),
            group(m, "b", "zone-b", false, &["198.18.2.1", "198.18.2.2", "198.18.2.3"]),
        ])
    });
    let mut sim = sim(m.clone());
    // Find a zone-a client flow that lands in zone-b while affinity is disabled.
    let sport = (1000..2000)
        .find(|&p| backend(&sim.packet(&syn("198.18.10.5", p))).starts_with("198.18.2."))
        .unwrap();
    let before = backend(&sim.packet(&ack("198.18.10.5", sport)));
    // Reload with STAY_WITHIN_ZONE: new connections stay in zone-a, the tracked one does not move.
    let mut m2 = m;
    m2.services[0].zonal = ZonalAffinity::StayWithinZone;
    sim.replace_model(m2).unwrap();
    let after = sim.packet(&ack("198.18.10.5", sport));
    assert_eq!((backend(&after), reason(&after)), (before, "conntrack_hit"));
    assert_eq!(backend(&sim.packet(&syn("198.18.10.5", 5000))), "198.18.1.1");
}
