//! The one judgement of a tracked entry (`decide::judge_entry`, CT-13 and FS-3 without a
//! packet at hand) is what the entry's next packet meets in `decide`: for every connection of
//! a table opened under one configuration, and each change a reload or a health verdict can
//! make (an idle timeout shortened, persistence turned off with a backend unhealthy, a backend
//! removed with and without draining, a failover flush, a backend added, the forwarding rule or
//! the service removed), the entry judged against the new snapshot and its next packet decided
//! under it agree: valid and to the same backend, replaced for the same reason, or not reached.

mod common;

use common::{a, ep, group, model_with, web};
use spillway_core::conntrack::Shard;
use spillway_core::decide::{decide, judge_entry, EntryFate, ForwardReason, Verdict};
use spillway_core::flow::{proto, tcp_flags, PacketInfo};
use spillway_core::model::{BackendKey, Model, RuleDest};
use spillway_core::policy::Persistence;
use spillway_core::state::PolicyState;
use spillway_core::time::Time;

const OPENED: Time = Time(0);
const LATER: Time = Time(40_000);
const JUDGED: Time = Time(70_000);

fn base() -> Model {
    model_with(|m| {
        let mut s = web(vec![group(
            m,
            "g",
            "zone-a",
            false,
            &["198.18.1.1", "198.18.1.2", "198.18.1.3", "198.18.1.4"],
        )]);
        s.persistence = Persistence::AlwaysPersist;
        s.idle_timeout_secs = 600;
        s.draining_timeout_secs = 30;
        s
    })
}

/// Connection `i`: TCP or UDP from zone-a's subnet or the regional one.
fn packet(i: u16, flags: u8) -> PacketInfo {
    let udp = i % 3 == 0;
    PacketInfo {
        src: a(&format!("198.18.{}.{}", if i % 2 == 0 { 10 } else { 40 }, 1 + i % 200)),
        dst: a(common::VIP),
        proto: if udp { proto::UDP } else { proto::TCP },
        sport: 1024 + i,
        dport: if udp { 53 } else { 80 },
        tcp_flags: if udp { 0 } else { flags },
        ..PacketInfo::default()
    }
}

/// 400 connections opened under `base`, half of them last used at [`LATER`].
fn opened(st: &mut PolicyState) -> Shard {
    let snap = st.snapshot(OPENED);
    let mut shard = Shard::with_capacity(4096);
    for i in 0..400 {
        decide(&packet(i, tcp_flags::SYN), &snap, &mut shard, OPENED);
    }
    let snap = st.snapshot(LATER);
    for i in (0..400).step_by(2) {
        decide(&packet(i, tcp_flags::ACK), &snap, &mut shard, LATER);
    }
    shard
}

fn key(svc: &str, addr: &str) -> BackendKey {
    BackendKey { service: svc.into(), endpoint: ep(addr) }
}

/// The changes: a name and what it does to a copy of the opened state.
#[allow(clippy::type_complexity)]
fn changes() -> Vec<(&'static str, Box<dyn Fn(&mut PolicyState)>)> {
    let reload = |f: fn(&mut Model)| {
        move |st: &mut PolicyState| {
            let mut m = base();
            f(&mut m);
            st.apply_model(m, LATER).unwrap();
        }
    };
    vec![
        ("nothing", Box::new(|_: &mut PolicyState| {})),
        ("idle timeout 600 s -> 60 s", Box::new(reload(|m| m.services[0].idle_timeout_secs = 60))),
        (
            "persistence turned off, a backend unhealthy",
            Box::new(|st: &mut PolicyState| {
                let mut m = base();
                m.services[0].persistence = Persistence::NeverPersist;
                st.apply_model(m, LATER).unwrap();
                st.set_health(&key("web", "198.18.1.2"), false);
            }),
        ),
        (
            "a backend unhealthy, persistence kept",
            Box::new(|st: &mut PolicyState| {
                st.set_health(&key("web", "198.18.1.2"), false);
            }),
        ),
        (
            "a backend removed without draining",
            Box::new(reload(|m| {
                m.services[0].draining_timeout_secs = 0;
                m.services[0].groups[0].endpoints.remove(2);
            })),
        ),
        (
            "a backend removed with draining",
            Box::new(reload(|m| {
                m.services[0].groups[0].endpoints.remove(2);
            })),
        ),
        (
            "a backend added",
            Box::new(reload(|m| m.services[0].groups[0].endpoints.push(ep("198.18.1.5")))),
        ),
        (
            "the forwarding rule moved to another VIP",
            Box::new(reload(|m| m.services[0].rules[0].dest = RuleDest::Vip(a("198.18.0.200")))),
        ),
        ("the service removed", Box::new(reload(|m| m.services.clear()))),
    ]
}

#[test]
fn an_entrys_judgement_is_what_its_next_packet_meets() {
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for (name, change) in changes() {
        let mut st = PolicyState::new(true);
        st.apply_model(base(), OPENED).unwrap();
        let mut shard = opened(&mut st);
        change(&mut st);
        let snap = st.snapshot(JUDGED);
        let entries: Vec<_> = shard.iter(JUDGED).map(|(_, e)| e).collect();
        assert_eq!(entries.len(), 400, "{name}");
        for e in entries {
            let fate = judge_entry(&e.key, &e.value, e.idle_ms, &snap, JUDGED);
            let i = e.key.sport - 1024;
            let d = decide(&packet(i, tcp_flags::ACK), &snap, &mut shard, JUDGED);
            let what =
                format!("{name}: connection {i}: judged {fate:?}, its packet {:?}", d.verdict);
            match (fate, d.verdict) {
                (EntryFate::Valid { backend }, Verdict::Forward { backend: b, reason }) => {
                    assert_eq!(b, backend, "{what}");
                    assert_eq!(reason, ForwardReason::ConntrackHit, "{what}");
                }
                (EntryFate::Replaced(r), Verdict::Forward { reason, .. }) => {
                    assert_eq!(reason, r, "{what}")
                }
                // Not reached: its packet matches no rule, or another service's.
                (EntryFate::Unreachable, Verdict::Drop(_)) => {}
                (EntryFate::Unreachable, Verdict::Forward { reason, .. }) => {
                    assert_eq!(reason, ForwardReason::NewConnection, "{what}")
                }
                _ => panic!("{what}"),
            }
            let label = match fate {
                EntryFate::Valid { .. } => "valid".to_owned(),
                EntryFate::Replaced(r) => r.as_str().to_owned(),
                EntryFate::Unreachable => "unreachable".to_owned(),
            };
            *seen.entry(format!("{name}: {label}")).or_default() += 1;
        }
    }
    // Every kind of fate came up, so the comparison above covered each.
    for want in [
        "nothing: valid",
        "idle timeout 600 s -> 60 s: replaced_expired",
        "idle timeout 600 s -> 60 s: valid",
        "persistence turned off, a backend unhealthy: replaced_unhealthy",
        "a backend unhealthy, persistence kept: valid",
        "a backend removed without draining: replaced_drained",
        "a backend removed with draining: valid",
        "a backend added: valid",
        "the forwarding rule moved to another VIP: unreachable",
        "the service removed: unreachable",
    ] {
        assert!(seen.contains_key(want), "no `{want}` among {seen:?}");
    }
    assert_eq!(seen.get("idle timeout 600 s -> 60 s: replaced_expired"), Some(&200), "{seen:?}");
}
