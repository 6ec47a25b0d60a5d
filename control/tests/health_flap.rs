//! A flapping backend (its health verdict changing over and over): the eligible set follows
//! every verdict change, the log does not (at most `FLAP_LOG_LINES` lines a minute per
//! backend, every change counted), and the established connections of the other backends
//! never move. The checker's side, that verdicts change only as often as the thresholds allow,
//! is `health.rs::hc_3_a_flapping_backend_changes_verdict_only_as_the_thresholds_allow`.

mod common;

use common::one_service;
use spillway_control::config::{self, Config};
use spillway_control::controller::{Controller, FLAP_LOG_LINES};
use spillway_control::health::HealthEvent;
use spillway_core::addr::Addr;
use spillway_core::flow::{proto, tcp_flags, PacketInfo};
use spillway_core::model::{BackendKey, Endpoint};
use spillway_core::simulator::Simulator;
use std::path::Path;
use std::time::{Duration, Instant};

fn yaml() -> String {
    one_service(&["10.0.1.1", "10.0.1.2", "10.0.1.3", "10.0.1.4"])
}

fn a(s: &str) -> Addr {
    s.parse().unwrap()
}

fn b1() -> BackendKey {
    BackendKey { service: "web".into(), endpoint: Endpoint { addr: a("10.0.1.1"), port: 0 } }
}

#[tokio::test]
async fn a_flapping_backend_moves_the_eligible_set_every_time_and_the_log_five_times_a_minute() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, yaml()).unwrap();
    let cfg = config::load(&path).unwrap();
    let mut c = Controller::start(&path, cfg, Instant::now()).unwrap();
    let eligible = |c: &Controller| {
        let snap = c.snapshot();
        let n = snap.services().next().expect("web").eligible.members.len();
        n
    };
    assert_eq!(eligible(&c), 4);
    let generation = c.snapshot().generation;
    for i in 0..100 {
        let healthy = i % 2 == 1;
        c.on_health_event(HealthEvent { key: b1(), healthy });
        assert_eq!(eligible(&c), if healthy { 4 } else { 3 }, "after change {i}");
    }
    // Every change was published: the workers always decide with the current verdict.
    assert_eq!(c.snapshot().generation, generation + 100);
    // All counted, five logged, the rest not (the whole loop is well within a minute).
    assert_eq!(c.health_changes(&b1()), (100, 100 - u64::from(FLAP_LOG_LINES)));
}

#[test]
fn established_connections_of_other_backends_never_move_while_one_flaps() {
    let cfg = Config::from_yaml(Path::new("c.yaml"), &yaml()).unwrap();
    let mut sim = Simulator::new(cfg.to_model()).unwrap();
    let packet = |i: u32, flags: u8| PacketInfo {
        src: Addr::v4(192, 0, 2 + (i / 250) as u8, (i % 250) as u8 + 1),
        dst: a("198.51.100.10"),
        proto: proto::TCP,
        sport: 10_000 + (i % 5000) as u16,
        dport: 80,
        fragment: false,
        tcp_flags: flags,
        icmp_error: false,
    };
    let flows = 400;
    let first: Vec<Endpoint> = (0..flows)
        .map(|i| sim.packet(&packet(i, tcp_flags::SYN)).backend.expect("a backend"))
        .collect();
    let on_b1 = first.iter().filter(|e| e.addr == a("10.0.1.1")).count();
    assert!(on_b1 > 50 && on_b1 < 150, "{on_b1} of {flows} flows on 10.0.1.1");
    let mut moved_others = 0;
    for flap in 0..100 {
        sim.set_health_by_addr(a("10.0.1.1"), flap % 2 == 1);
        sim.advance(Duration::from_secs(1));
        for (i, before) in first.iter().enumerate() {
            let now = sim.packet(&packet(i as u32, tcp_flags::ACK)).backend;
            if before.addr != a("10.0.1.1") && now.as_ref() != Some(before) {
                moved_others += 1;
            }
        }
    }
    assert_eq!(moved_others, 0, "connections of healthy backends moved while 10.0.1.1 flapped");
}
