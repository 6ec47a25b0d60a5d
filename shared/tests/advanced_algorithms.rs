//! SPEC section 7 on the pure functions (`advanced::allocate`, `DrainTracker`): AL-1..AL-7 with
//! exact numbers on two regions x three zones, uneven client load (r1-a 480, r1-b 240,
//! r1-c 120, r2-a 120, r2-b 60, r2-c 0 new connections/s) and 400 conn/s per group.

mod advanced_support;
use advanced_support::*;
use spillway_core::advanced::{
    allocate, Allocation, ClientDemand, Distances, DrainInput, DrainTracker, GroupState, Topology,
};
use spillway_core::model::Algorithm;
use spillway_core::time::Time;

fn groups(capacity: f64) -> Vec<GroupState> {
    (0..6u16)
        .map(|z| GroupState {
            zone: z,
            capacity,
            size: if capacity.is_finite() { capacity } else { 4.0 },
            healthy_pct: 100.0,
            preferred: false,
        })
        .collect()
}

fn clients(rates: &[f64; 6]) -> Vec<ClientDemand> {
    let mut v: Vec<ClientDemand> =
        (0..6u16).map(|z| ClientDemand { zone: Some(z), demand: rates[z as usize] }).collect();
    v.push(ClientDemand { zone: None, demand: 0.0 });
    v
}

fn run(alg: Algorithm, gs: &[GroupState], rates: &[f64; 6]) -> Allocation {
    let d = Distances::new(&topology(), &Topology::default());
    allocate(alg, 70, gs, &clients(rates), &d)
}

const UNEVEN_F: [f64; 6] = [480.0, 240.0, 120.0, 120.0, 60.0, 0.0];

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[test]
fn al_1_waterfall_by_region_even_utilisation_local_first() {
    let al = run(Algorithm::WaterfallByRegion, &groups(400.0), &UNEVEN_F);
    // Region r1: u = 840 / 1200 = 0.7, every group 280; region r2: u = 180 / 1200, 60 each.
    for g in 0..3 {
        assert!(close(al.load[g], 280.0), "{:?}", al.load);
    }
    for g in 3..6 {
        assert!(close(al.load[g], 60.0), "{:?}", al.load);
    }
    // r1-a keeps 280/480 local; its residual 200 goes to the spare targets: r1-b 40, r1-c 160.
    let f = &al.fractions[0];
    assert!(close(f[0], 280.0 / 480.0) && close(f[1], 40.0 / 480.0) && close(f[2], 160.0 / 480.0));
    assert!(f[3..].iter().all(|&v| v == 0.0), "nothing leaves the region below 100%");
    // Zones under their target stay 100% local.
    assert!(close(al.fractions[1][1], 1.0) && close(al.fractions[2][2], 1.0));
    // r2-a: 60 local, 60 to r2-c (r2-b's target is exactly its own demand).
    assert!(
        close(al.fractions[3][3], 0.5) && close(al.fractions[3][5], 0.5),
        "{:?}",
        al.fractions[3]
    );
}

#[test]
fn al_1_waterfall_by_region_overflows_to_next_region_only_when_full() {
    let rates = [720.0, 360.0, 180.0, 120.0, 60.0, 0.0];
    let al = run(Algorithm::WaterfallByRegion, &groups(400.0), &rates);
    // r1 demand 1260 > 1200: every r1 group full, 60 leave, spread evenly over r2.
    for g in 0..3 {
        assert!(close(al.load[g], 400.0), "{:?}", al.load);
    }
    for g in 3..6 {
        assert!(close(al.load[g], 80.0), "{:?}", al.load);
    }
    let f = &al.fractions[0];
    assert!(close(f[3] * 720.0, 20.0) && close(f[0] * 720.0, 400.0));
}

#[test]
fn al_2_spray_to_region_every_client_splits_evenly_in_its_region() {
    let al = run(Algorithm::SprayToRegion, &groups(400.0), &UNEVEN_F);
    for c in 0..3 {
        for g in 0..3 {
            assert!(close(al.fractions[c][g], 1.0 / 3.0));
        }
        assert!(al.fractions[c][3..].iter().all(|&v| v == 0.0));
    }
    assert!(close(al.fractions[4][5], 1.0 / 3.0));
    assert!(close(al.load[0], 280.0) && close(al.load[5], 60.0));
}

#[test]
fn al_3_spray_to_world_even_across_regions() {
    let al = run(Algorithm::SprayToWorld, &groups(400.0), &UNEVEN_F);
    for c in 0..7 {
        for g in 0..6 {
            assert!(close(al.fractions[c][g], 1.0 / 6.0));
        }
    }
    for g in 0..6 {
        assert!(close(al.load[g], 170.0));
    }
}

#[test]
fn al_4_waterfall_by_zone_fills_nearest_group_first() {
    let al = run(Algorithm::WaterfallByZone, &groups(400.0), &UNEVEN_F);
    // r1-a: 400 local, 80 to the next zone of its region in configuration order (r1-b).
    assert!(close(al.fractions[0][0] * 480.0, 400.0) && close(al.fractions[0][1] * 480.0, 80.0));
    assert!(close(al.fractions[1][1], 1.0) && close(al.fractions[2][2], 1.0));
    assert!(close(al.load[0], 400.0) && close(al.load[1], 320.0) && close(al.load[2], 120.0));
    // Group by group inside the zone: two groups in r1-a (the second in config order after
    // r1-b's would still come first: same zone is nearer).
    let mut gs = groups(400.0);
    gs.push(GroupState { zone: 0, ..gs[0] });
    let al = run(Algorithm::WaterfallByZone, &gs, &[700.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    assert!(close(al.load[0], 400.0) && close(al.load[6], 300.0) && al.load[1] < 1e-6);
}

#[test]
fn al_5_preferred_filled_first_then_algorithm_balances_excess() {
    let mut gs = groups(400.0);
    gs[3].preferred = true; // r2-a: far away, but preferred
    let one = |r: f64| {
        let mut rates = [0.0; 6];
        rates[0] = r;
        run(Algorithm::WaterfallByRegion, &gs, &rates)
    };
    // 240 < 400: all of it to the preferred group.
    let al = one(240.0);
    assert!(close(al.fractions[0][3], 1.0), "{:?}", al.fractions[0]);
    // 720: the preferred group full (400), the excess 320 balanced over r1 (106.7 each).
    let al = one(720.0);
    assert!(close(al.load[3], 400.0));
    for g in 0..3 {
        assert!(close(al.load[g], 320.0 / 3.0), "{:?}", al.load);
    }
}

#[test]
fn al_7_degraded_group_keeps_h_over_t() {
    // WATERFALL_BY_ZONE, unbounded: r1-a's group gets everything until degraded.
    let mut gs = groups(f64::INFINITY);
    let rates = [100.0, 0.0, 0.0, 0.0, 0.0, 0.0];
    let d = Distances::new(&topology(), &Topology::default());
    let at = |gs: &[GroupState], t: u8| {
        allocate(Algorithm::WaterfallByZone, t, gs, &clients(&rates), &d)
    };
    for (h, t, kept) in [
        (100.0, 70, 1.0),
        (70.0, 70, 1.0),
        (50.0, 70, 50.0 / 70.0),
        (0.5, 1, 0.5),
        (1.0, 1, 1.0),
        (99.0, 99, 1.0),
        (98.0, 99, 98.0 / 99.0),
    ] {
        gs[0].healthy_pct = h;
        let al = at(&gs, t);
        assert!(close(al.fractions[0][0], kept), "h {h} T {t}: {:?}", al.fractions[0]);
        // The rest goes to the next group in the algorithm's order (r1-b).
        assert!(close(al.fractions[0][1], 1.0 - kept));
    }
}

#[test]
fn al_7_displaced_traffic_returns_when_no_other_group_has_room() {
    // One single group, 50% healthy, T = 70: nothing else can take the rest: it stays.
    let gs = vec![GroupState {
        zone: 0,
        capacity: f64::INFINITY,
        size: 4.0,
        healthy_pct: 50.0,
        preferred: false,
    }];
    let d = Distances::new(&topology(), &Topology::default());
    let al = allocate(Algorithm::WaterfallByRegion, 70, &gs, &clients(&UNEVEN_F), &d);
    assert!(close(al.fractions[0][0], 1.0));
}

fn drain_inputs(healthy: &[usize], configured: usize) -> Vec<DrainInput<'static>> {
    const NAMES: [&str; 6] = ["g0", "g1", "g2", "g3", "g4", "g5"];
    healthy
        .iter()
        .enumerate()
        .map(|(i, &h)| DrainInput { name: NAMES[i], healthy: h, configured })
        .collect()
}

#[test]
fn al_6_auto_capacity_drain_thresholds() {
    let mut t = DrainTracker::default();
    let at = |s: u64| Time::from_secs(s);
    // 20 endpoints per group, 4 groups (at most 2 drained). 25% = 5 healthy: not drained;
    // 4 healthy (20% < 25%): drained.
    assert_eq!(t.update(true, &drain_inputs(&[5, 20, 20, 20], 20), at(0)), [false; 4]);
    assert_eq!(
        t.update(true, &drain_inputs(&[4, 20, 20, 20], 20), at(1)),
        [true, false, false, false]
    );
    // Below 35% (6 of 20 = 30%) for 100 s: stays drained.
    for s in [2, 50, 101] {
        assert!(t.update(true, &drain_inputs(&[6, 20, 20, 20], 20), at(s))[0]);
    }
    // 35% (7 of 20) from t = 200: still drained at 259 s (59 s), undrained at 260 s (60 s).
    assert!(t.update(true, &drain_inputs(&[7, 20, 20, 20], 20), at(200))[0]);
    assert!(t.update(true, &drain_inputs(&[7, 20, 20, 20], 20), at(259))[0]);
    assert!(!t.update(true, &drain_inputs(&[7, 20, 20, 20], 20), at(260))[0]);
    // A dip below 35% restarts the 60 s.
    let mut t = DrainTracker::default();
    t.update(true, &drain_inputs(&[0, 20], 20), at(0));
    t.update(true, &drain_inputs(&[8, 20], 20), at(10));
    t.update(true, &drain_inputs(&[6, 20], 20), at(40));
    t.update(true, &drain_inputs(&[8, 20], 20), at(50));
    assert!(t.update(true, &drain_inputs(&[8, 20], 20), at(109))[0]);
    assert!(!t.update(true, &drain_inputs(&[8, 20], 20), at(110))[0]);
    // Disabled: nothing drained.
    assert_eq!(t.update(false, &drain_inputs(&[0, 0], 20), at(200)), [false, false]);
}

#[test]
fn al_6_never_more_than_half_the_groups_drained() {
    let mut t = DrainTracker::default();
    // 4 groups, 3 below 25%: the 2 least healthy are drained (g2 with 0, then g0 with 2).
    let out = t.update(true, &drain_inputs(&[2, 3, 0, 20], 20), Time::ZERO);
    assert_eq!(out, [true, false, true, false]);
    // Already drained groups keep their place even if another becomes worse.
    let out = t.update(true, &drain_inputs(&[2, 0, 0, 20], 20), Time::from_secs(1));
    assert_eq!(out, [true, false, true, false]);
    // 5 groups: at most 2. 1 group: never drained.
    let mut t = DrainTracker::default();
    assert_eq!(
        t.update(true, &drain_inputs(&[0, 0, 0, 0, 0], 20), Time::ZERO),
        [true, true, false, false, false]
    );
    let mut t = DrainTracker::default();
    assert_eq!(t.update(true, &drain_inputs(&[0], 20), Time::ZERO), [false]);
}

/// AL-8: the spray algorithms send one client's traffic to many groups by design; the
/// waterfall ones keep it in one group while the client's zone has room.
#[test]
fn al_8_spray_reaches_many_groups_waterfall_few() {
    let even = [100.0; 6];
    let reached = |alg: Algorithm, client: usize| {
        run(alg, &groups(400.0), &even).fractions[client].iter().filter(|&&f| f > 1e-9).count()
    };
    for client in 0..6 {
        assert_eq!(reached(Algorithm::SprayToRegion, client), 3, "client {client}");
        assert_eq!(reached(Algorithm::SprayToWorld, client), 6, "client {client}");
        assert_eq!(reached(Algorithm::WaterfallByRegion, client), 1, "client {client}");
        assert_eq!(reached(Algorithm::WaterfallByZone, client), 1, "client {client}");
    }
}
