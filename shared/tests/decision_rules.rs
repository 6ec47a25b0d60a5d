//! SPEC sections 1, 2 and 5 through the one decision function (via the simulator): FR-1,
//! CT-2..CT-13, CP-1..CP-5, CD-1..CD-5, FO-9, CH-1, CH-3 and NX-1.

mod common;
use common::*;
use proptest::prelude::*;
use spillway_core::addr::Prefix;
use spillway_core::flow::{proto, tcp_flags, PacketInfo};
use spillway_core::model::{Endpoint, Model, Ports, Rule, RuleDest, RuleProtocol, Service};
use spillway_core::policy::{Affinity, Persistence, TrackingMode};
use spillway_core::simulator::Simulator;
use spillway_core::snapshot::RuleCache;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const P3: [&str; 3] = ["198.18.1.1", "198.18.1.2", "198.18.1.3"];

fn three(f: impl FnOnce(&mut Service)) -> Model {
    model_with(|m| {
        let mut s = web(vec![group(m, "p", "zone-a", false, &P3)]);
        f(&mut s);
        s
    })
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn rule(dest: RuleDest, protocol: RuleProtocol, ports: Ports) -> Rule {
    Rule { dest, protocol, ports }
}

/// The FR-1 rule set: on the VIP, TCP port 80, TCP all ports and L3_DEFAULT; a /32 of the
/// VIP, a /24 and a UDP /16 around it.
fn fr_1_model() -> Model {
    let mut m = topology();
    let vip = a(VIP);
    let mk = |name: &str, r: Rule, e: &str, m: &Model| {
        let mut s = Service::new(name);
        s.rules.push(r);
        s.groups = vec![group(m, "g", "zone-a", false, &[e])];
        s
    };
    let svcs = vec![
        mk(
            "tcp80",
            rule(RuleDest::Vip(vip), RuleProtocol::Tcp, Ports::List(vec![(80, 80)])),
            "198.18.1.1",
            &m,
        ),
        mk("tcpall", rule(RuleDest::Vip(vip), RuleProtocol::Tcp, Ports::All), "198.18.1.2", &m),
        mk("l3", rule(RuleDest::Vip(vip), RuleProtocol::L3Default, Ports::All), "198.18.1.3", &m),
        mk(
            "host32",
            rule(
                RuleDest::Prefix("198.18.0.100/32".parse().unwrap()),
                RuleProtocol::L3Default,
                Ports::All,
            ),
            "198.18.1.4",
            &m,
        ),
        mk(
            "p24",
            rule(
                RuleDest::Prefix("198.18.0.0/24".parse().unwrap()),
                RuleProtocol::L3Default,
                Ports::All,
            ),
            "198.18.1.5",
            &m,
        ),
        mk(
            "p16",
            rule(RuleDest::Prefix("198.18.0.0/16".parse().unwrap()), RuleProtocol::Udp, Ports::All),
            "198.18.1.6",
            &m,
        ),
    ];
    m.services = svcs;
    m
}

#[test]
fn fr_1_most_specific_rule_wins() {
    let mut sim = sim(fr_1_model());
    let svc = |sim: &mut Simulator, p: PacketInfo| sim.packet(&p).service.unwrap_or_default();
    // Listed ports over ALL, named protocol over L3_DEFAULT, exact VIP over a /32.
    assert_eq!(svc(&mut sim, syn("198.18.10.5", 1)), "tcp80");
    let mut p = syn("198.18.10.5", 1);
    p.dport = 443;
    assert_eq!(svc(&mut sim, p), "tcpall");
    assert_eq!(svc(&mut sim, udp("198.18.10.5", 1)), "l3");
    // Other destinations: a longer prefix over a shorter one, protocol filters apply.
    let mut p = udp("198.18.10.5", 1);
    p.dst = a("198.18.0.7");
    assert_eq!(svc(&mut sim, p), "p24");
    p.dst = a("198.18.5.7");
    assert_eq!(svc(&mut sim, p), "p16");
    let mut t = syn("198.18.10.5", 1);
    t.dst = a("198.18.5.7");
    let o = sim.packet(&t);
    assert_eq!((o.service.clone(), reason(&o)), (None, "no_matching_rule"));
}

/// The data plane remembers a burst's last rule match (`Snapshot::service_for_cached`): a
/// packet that differs from the one before in its destination, protocol, destination port or
/// in having a port at all (a fragment) is matched afresh, so every packet of a burst gets
/// the most specific rule, whatever came before it.
#[test]
fn fr_1_holds_through_the_per_burst_rule_cache() {
    let sim = sim(fr_1_model());
    let snap = sim.snapshot();
    let mut last = RuleCache::EMPTY;
    let tcp = |dst: &str, dport: u16| PacketInfo { dst: a(dst), dport, ..syn("198.18.10.5", 1) };
    let udp = |dst: &str| PacketInfo { dst: a(dst), ..udp("198.18.10.5", 1) };
    let fragment = PacketInfo { fragment: true, ..tcp(VIP, 80) };
    let burst = [
        (tcp(VIP, 80), Some("tcp80")),
        (tcp(VIP, 80), Some("tcp80")),
        (tcp(VIP, 443), Some("tcpall")),
        (tcp(VIP, 80), Some("tcp80")),
        // Same destination and port, another protocol.
        (PacketInfo { proto: proto::UDP, ..tcp(VIP, 80) }, Some("l3")),
        // A fragment has no port: port 80's rule does not apply.
        (fragment, Some("tcpall")),
        (tcp(VIP, 80), Some("tcp80")),
        // Another destination, same protocol and port.
        (tcp("198.18.0.7", 80), Some("p24")),
        (tcp("198.18.5.7", 80), None),
        (udp("198.18.5.7"), Some("p16")),
        (udp("198.18.5.7"), Some("p16")),
        (udp(VIP), Some("l3")),
    ];
    for (i, (p, want)) in burst.iter().enumerate() {
        let got = snap.service_for_cached(p, &mut last).map(|s| &*s.name);
        assert_eq!(got, *want, "packet {i} of the burst");
    }
}

#[test]
fn fr_1_exact_vip_beats_slash_32_even_with_fewer_ports() {
    let mut m = topology();
    let mut s1 = Service::new("vip");
    s1.rules.push(rule(RuleDest::Vip(a(VIP)), RuleProtocol::Tcp, Ports::All));
    s1.groups = vec![group(&m, "g", "zone-a", false, &["198.18.1.1"])];
    let mut s2 = Service::new("host");
    s2.rules.push(rule(
        RuleDest::Prefix(Prefix::host(a(VIP))),
        RuleProtocol::Tcp,
        Ports::List(vec![(80, 80)]),
    ));
    s2.groups = vec![group(&m, "g", "zone-a", false, &["198.18.1.2"])];
    m.services = vec![s1, s2];
    let mut sim = sim(m);
    assert_eq!(sim.packet(&syn("198.18.10.5", 9)).service.as_deref(), Some("vip"));
}

#[test]
fn ct_2_syn_skips_lookup_and_replaces_entry() {
    let mut sim = sim(three(|_| {}));
    let first = sim.packet(&syn("198.18.10.5", 40000));
    let x = backend(&first);
    assert_eq!(reason(&first), "new_connection");
    // Take x out of the table (unhealthy) but keep the entry: TCP persists (CP-1).
    sim.set_health_by_addr(a(&x), false);
    let hit = sim.packet(&ack("198.18.10.5", 40000));
    assert_eq!((backend(&hit), reason(&hit)), (x.clone(), "conntrack_hit"));
    // A new SYN on the same 5-tuple skips the lookup: new backend, entry replaced.
    let again = sim.packet(&syn("198.18.10.5", 40000));
    assert_eq!(reason(&again), "new_connection");
    let y = backend(&again);
    assert_ne!(y, x);
    assert_eq!(backend(&sim.packet(&ack("198.18.10.5", 40000))), y);
    assert_eq!(sim.shard().len(), 1, "replaced, not added");
    // SYN+ACK is not a new-connection SYN; neither is a SYN in PER_SESSION + CLIENT_IP.
    let synack = sim.packet(&tcp("198.18.10.5", 40000, tcp_flags::SYN | tcp_flags::ACK));
    assert_eq!(reason(&synack), "conntrack_hit");
    let mut sess = sim_with_session(Affinity::ClientIp);
    let x = backend(&sess.packet(&syn("198.18.10.5", 1)));
    sess.set_health_by_addr(a(&x), false);
    // PER_SESSION + CLIENT_IP: the SYN is looked up. TCP does not persist there (CP-1), so
    // the entry is replaced: the reason proves the lookup happened.
    let o = sess.packet(&syn("198.18.10.5", 2));
    assert_eq!(reason(&o), "replaced_unhealthy");
}

fn sim_with_session(aff: Affinity) -> Simulator {
    sim(three(|s| {
        s.tracking = TrackingMode::PerSession;
        s.affinity = aff;
    }))
}

#[test]
fn ct_3_hit_follows_entry_miss_selects() {
    let mut sim = sim(three(|_| {}));
    let x = backend(&sim.packet(&udp("198.18.10.5", 5000)));
    for _ in 0..5 {
        let o = sim.packet(&udp("198.18.10.5", 5000));
        assert_eq!((backend(&o), reason(&o)), (x.clone(), "conntrack_hit"));
    }
    let other = sim.packet(&udp("198.18.10.5", 5001));
    assert_eq!(reason(&other), "new_connection");
}

#[test]
fn ct_6_entry_recorded_with_backend_and_time() {
    let mut sim = sim(three(|_| {}));
    sim.advance(secs(7));
    let o = sim.packet(&udp("198.18.10.5", 5000));
    let entries: Vec<_> = sim.shard().iter(sim.now()).collect();
    assert_eq!(entries.len(), 1);
    let (_, e) = entries[0];
    assert_eq!(e.idle_ms, 0);
    assert_eq!((e.key.sport, e.key.dport, e.key.proto), (5000, 53, proto::UDP));
    let slot = spillway_core::snapshot::BackendRef::from_u32(e.value.backend).slot;
    assert_eq!(sim.snapshot().backend(slot).unwrap().endpoint, o.backend.unwrap());
}

#[test]
fn ct_7_fin_and_rst_do_not_remove() {
    let mut sim = sim(three(|_| {}));
    let x = backend(&sim.packet(&syn("198.18.10.5", 1)));
    sim.packet(&tcp("198.18.10.5", 1, tcp_flags::FIN | tcp_flags::ACK));
    sim.packet(&tcp("198.18.10.5", 1, tcp_flags::RST));
    assert_eq!(sim.shard().len(), 1);
    let o = sim.packet(&ack("198.18.10.5", 1));
    assert_eq!((backend(&o), reason(&o)), (x, "conntrack_hit"));
}

#[test]
fn ct_8_idle_timeout_exact_and_restarted_by_hits() {
    let mut sim = sim(three(|_| {}));
    sim.packet(&udp("198.18.10.5", 1));
    sim.advance(Duration::from_millis(599_999));
    assert_eq!(reason(&sim.packet(&udp("198.18.10.5", 1))), "conntrack_hit");
    // That hit restarted the clock: 599.999 s later still alive, exactly 600 s later expired.
    sim.advance(Duration::from_millis(599_999));
    assert_eq!(reason(&sim.packet(&udp("198.18.10.5", 1))), "conntrack_hit");
    sim.advance(secs(600));
    assert_eq!(reason(&sim.packet(&udp("198.18.10.5", 1))), "replaced_expired");
}

#[test]
fn ct_8_reload_applies_new_timeout_to_existing_entries() {
    let m = three(|_| {});
    let mut sim = sim(m.clone());
    sim.packet(&udp("198.18.10.5", 1));
    sim.advance(secs(100));
    let mut m2 = m;
    m2.services[0].idle_timeout_secs = 60;
    sim.replace_model(m2).unwrap();
    assert_eq!(reason(&sim.packet(&udp("198.18.10.5", 1))), "replaced_expired");
}

#[test]
fn ct_9_idle_timeout_bounds_table() {
    use spillway_core::policy::idle_timeout_bounds as b;
    use Affinity::*;
    for aff in Affinity::ALL {
        assert_eq!(b(TrackingMode::PerConnection, *aff), (600, 60, 600));
    }
    for aff in [ClientIpNoDestination, ClientIp, ClientIpProto] {
        assert_eq!(b(TrackingMode::PerSession, aff), (600, 60, 57_600));
    }
    for aff in [None, ClientIpPortProto] {
        assert_eq!(b(TrackingMode::PerSession, aff), (600, 60, 600));
    }
}

#[test]
fn ct_12_replacement_entry_survives_recovery() {
    let mut sim = sim(three(|_| {}));
    let x = backend(&sim.packet(&udp("198.18.10.5", 1)));
    sim.set_health_by_addr(a(&x), false);
    let o = sim.packet(&udp("198.18.10.5", 1));
    assert_eq!(reason(&o), "replaced_unhealthy");
    let y = backend(&o);
    assert_ne!(x, y);
    sim.set_health_by_addr(a(&x), true);
    let o = sim.packet(&udp("198.18.10.5", 1));
    assert_eq!((backend(&o), reason(&o)), (y, "conntrack_hit"));
}

#[test]
fn ct_13_first_reason_wins() {
    // Expired and drained: expired.
    let mut s = sim(three(|s| s.draining_timeout_secs = 0));
    let x = backend(&s.packet(&udp("198.18.10.5", 1)));
    s.remove_backend("web", a(&x)).unwrap();
    s.advance(secs(600));
    assert_eq!(reason(&s.packet(&udp("198.18.10.5", 1))), "replaced_expired");
    // Drained and unhealthy: drained.
    let mut s = sim(three(|_| {}));
    let x = backend(&s.packet(&udp("198.18.10.5", 1)));
    s.set_health_by_addr(a(&x), false);
    s.remove_backend("web", a(&x)).unwrap();
    assert_eq!(reason(&s.packet(&udp("198.18.10.5", 1))), "replaced_drained");
    // Flushed and unhealthy: flushed.
    let mut s = sim(failover_model(true));
    s.packet(&udp("198.18.10.5", 1));
    for p in P3 {
        s.set_health_by_addr(a(p), false);
    }
    assert_eq!(reason(&s.packet(&udp("198.18.10.5", 1))), "replaced_flushed");
}

fn failover_model(disable_drain: bool) -> Model {
    model_with(|m| {
        let mut s = web(vec![
            group(m, "p", "zone-a", false, &P3),
            group(m, "f", "zone-b", true, &["198.18.2.1", "198.18.2.2"]),
        ]);
        s.failover.disable_connection_drain_on_failover = disable_drain;
        s
    })
}

/// Persistence of a flow whose backend becomes unhealthy.
fn persists(f: impl FnOnce(&mut Service), p: PacketInfo) -> bool {
    let mut s = sim(three(f));
    let mut first = p;
    if first.proto == proto::TCP {
        first.tcp_flags = tcp_flags::SYN;
    }
    let x = backend(&s.packet(&first));
    s.set_health_by_addr(a(&x), false);
    let o = s.packet(&p);
    match reason(&o) {
        "conntrack_hit" => {
            assert_eq!(backend(&o), x);
            true
        }
        "replaced_unhealthy" => false,
        r => panic!("unexpected {r}"),
    }
}

#[test]
fn cp_1_default_for_protocol() {
    let t = ack("198.18.10.5", 1);
    let u = udp("198.18.10.5", 1);
    for aff in Affinity::ALL {
        let aff = *aff;
        assert!(persists(|s| s.affinity = aff, t), "PER_CONNECTION TCP persists with {aff:?}");
        assert!(!persists(|s| s.affinity = aff, u), "PER_CONNECTION UDP never with {aff:?}");
        let session = |s: &mut Service| {
            s.tracking = TrackingMode::PerSession;
            s.affinity = aff;
        };
        let expect = matches!(aff, Affinity::None | Affinity::ClientIpPortProto);
        assert_eq!(persists(session, t), expect, "PER_SESSION TCP with {aff:?}");
        assert!(!persists(session, u), "PER_SESSION UDP never with {aff:?}");
    }
    assert!(!persists(|_| {}, icmp("198.18.10.5")), "other protocols never persist");
}

#[test]
fn cp_2_never_persist() {
    for p in [ack("198.18.10.5", 1), udp("198.18.10.5", 1)] {
        assert!(!persists(|s| s.persistence = Persistence::NeverPersist, p));
        assert!(!persists(
            |s| {
                s.persistence = Persistence::NeverPersist;
                s.tracking = TrackingMode::PerSession;
            },
            p
        ));
    }
}

#[test]
fn cp_3_always_persist_tcp_and_udp_any_affinity() {
    for aff in Affinity::ALL {
        let aff = *aff;
        let f = |s: &mut Service| {
            s.persistence = Persistence::AlwaysPersist;
            s.affinity = aff;
        };
        assert!(persists(f, ack("198.18.10.5", 1)));
        assert!(persists(f, udp("198.18.10.5", 1)));
    }
}

#[test]
fn cp_4_always_persist_other_protocols_do_not() {
    assert!(!persists(|s| s.persistence = Persistence::AlwaysPersist, icmp("198.18.10.5")));
}

#[test]
fn cp_5_entry_made_on_unhealthy_backend_kept_while_in_final_set() {
    let mut s = sim(three(|_| {}));
    for p in P3 {
        s.set_health_by_addr(a(p), false);
    }
    // UnhealthyPrimary fallback: a UDP flow (never persists under CP-1) gets an entry.
    let o = s.packet(&udp("198.18.10.5", 1));
    assert_eq!(o.eligible.unwrap().kind.as_str(), "UnhealthyPrimary");
    let x = backend(&o);
    let again = s.packet(&udp("198.18.10.5", 1));
    assert_eq!((backend(&again), reason(&again)), (x.clone(), "conntrack_hit"));
    // Another backend recovers: x leaves the final set, the CP table applies.
    let other = P3.iter().find(|p| **p != x).unwrap();
    s.set_health_by_addr(a(other), true);
    let o = s.packet(&udp("198.18.10.5", 1));
    assert_eq!((backend(&o), reason(&o)), (other.to_string(), "replaced_unhealthy"));
}

#[test]
fn cd_1_removed_backend_never_selected_for_new_connections() {
    let mut s = sim(three(|s| s.draining_timeout_secs = 300));
    s.remove_backend("web", a(P3[0])).unwrap();
    for port in 0..300 {
        assert_ne!(backend(&s.packet(&syn("198.18.10.5", port))), P3[0]);
    }
}

#[test]
fn cd_2_draining_disabled_invalidates_at_once() {
    let mut s = sim(three(|_| {}));
    let x = backend(&s.packet(&syn("198.18.10.5", 1)));
    s.remove_backend("web", a(&x)).unwrap();
    let o = s.packet(&ack("198.18.10.5", 1));
    assert_eq!(reason(&o), "replaced_drained");
    assert_ne!(backend(&o), x);
}

#[test]
fn cd_3_draining_until_deadline_inclusive() {
    let mut s = sim(three(|s| s.draining_timeout_secs = 30));
    let x = backend(&s.packet(&syn("198.18.10.5", 1)));
    s.advance(secs(5));
    s.remove_backend("web", a(&x)).unwrap();
    s.advance(Duration::from_millis(29_999));
    let o = s.packet(&ack("198.18.10.5", 1));
    assert_eq!((backend(&o), reason(&o)), (x.clone(), "conntrack_hit"));
    s.advance(Duration::from_millis(1));
    let o = s.packet(&ack("198.18.10.5", 1));
    assert_eq!(reason(&o), "replaced_drained");
    assert_ne!(backend(&o), x);
}

#[test]
fn cd_3_timeout_is_the_removing_configs() {
    let m = three(|s| s.draining_timeout_secs = 0);
    let mut s = sim(m.clone());
    let x = backend(&s.packet(&syn("198.18.10.5", 1)));
    let mut m2 = m;
    m2.services[0].draining_timeout_secs = 100;
    for g in &mut m2.services[0].groups {
        g.endpoints.retain(|e| e.addr != a(&x));
    }
    s.replace_model(m2).unwrap();
    s.advance(secs(99));
    assert_eq!(backend(&s.packet(&ack("198.18.10.5", 1))), x);
}

#[test]
fn cd_4_readd_before_deadline_keeps_entries_after_does_not() {
    let mut s = sim(three(|s| s.draining_timeout_secs = 30));
    let x = backend(&s.packet(&syn("198.18.10.5", 1)));
    s.remove_backend("web", a(&x)).unwrap();
    s.advance(secs(10));
    s.add_backend("web", "p", Endpoint { addr: a(&x), port: 0 }).unwrap();
    s.advance(secs(60));
    let o = s.packet(&ack("198.18.10.5", 1));
    assert_eq!((backend(&o), reason(&o)), (x.clone(), "conntrack_hit"));
    // Remove again and re-add after the deadline: old entries stay invalid.
    s.remove_backend("web", a(&x)).unwrap();
    s.advance(secs(31));
    s.add_backend("web", "p", Endpoint { addr: a(&x), port: 0 }).unwrap();
    assert_eq!(reason(&s.packet(&ack("198.18.10.5", 1))), "replaced_drained");
}

#[test]
fn cd_4_readd_after_zero_timeout_starts_afresh() {
    let mut s = sim(three(|_| {}));
    let x = backend(&s.packet(&udp("198.18.10.5", 1)));
    s.remove_backend("web", a(&x)).unwrap();
    s.add_backend("web", "p", Endpoint { addr: a(&x), port: 0 }).unwrap();
    assert_eq!(reason(&s.packet(&udp("198.18.10.5", 1))), "replaced_drained");
}

#[test]
fn cd_5_removing_service_stops_matching_at_once() {
    let mut s = sim(three(|s| s.draining_timeout_secs = 300));
    s.packet(&syn("198.18.10.5", 1));
    let mut m = s.state().model().clone();
    m.services.clear();
    s.replace_model(m).unwrap();
    let o = s.packet(&ack("198.18.10.5", 1));
    assert_eq!((backend(&o), reason(&o)), ("-".to_string(), "no_matching_rule"));
}

#[test]
fn fo_9_flip_flushes_when_drain_disabled_every_flip() {
    let mut s = sim(failover_model(true));
    let p = udp("198.18.10.5", 1);
    s.packet(&p);
    // Primary -> failover flip: flushed.
    for x in P3 {
        s.set_health_by_addr(a(x), false);
    }
    let o = s.packet(&p);
    assert_eq!(reason(&o), "replaced_flushed");
    assert!(backend(&o).starts_with("198.18.2."));
    // Flip back: flushed again, back on a primary.
    for x in P3 {
        s.set_health_by_addr(a(x), true);
    }
    let o = s.packet(&p);
    assert_eq!(reason(&o), "replaced_flushed");
    assert!(backend(&o).starts_with("198.18.1."));
    assert_eq!(reason(&s.packet(&p)), "conntrack_hit");
}

#[test]
fn fo_9_default_keeps_entries_across_flips() {
    let mut s = sim(failover_model(false));
    let t = syn("198.18.10.5", 1);
    let x = backend(&s.packet(&t));
    for p in P3 {
        s.set_health_by_addr(a(p), false);
    }
    // TCP persists (CP-1) across the flip.
    let o = s.packet(&ack("198.18.10.5", 1));
    assert_eq!((backend(&o), reason(&o)), (x, "conntrack_hit"));
}

#[test]
fn fo_9_empty_is_not_a_side() {
    let mut m = failover_model(true);
    m.services[0].failover.drop_traffic_if_unhealthy = true;
    let mut s = sim(m);
    let t = syn("198.18.10.5", 1);
    let x = backend(&s.packet(&t));
    // Everything down -> Empty, then primaries back: primary -> Empty -> primary is no flip.
    // (Failovers first, so that the primaries going down cannot flip to the failover side.)
    for p in ["198.18.2.1", "198.18.2.2"].iter().chain(P3.iter()) {
        s.set_health_by_addr(a(p), false);
    }
    assert_eq!(reason(&s.packet(&syn("198.18.10.5", 2))), "no_eligible_backend");
    for p in P3 {
        s.set_health_by_addr(a(p), true);
    }
    let o = s.packet(&ack("198.18.10.5", 1));
    assert_eq!((backend(&o), reason(&o)), (x, "conntrack_hit"));
}

#[test]
fn ch_1_same_config_same_choice_on_every_instance() {
    // Two "instances": same backends configured in a different order, and one of them with
    // an unrelated service first so that its slot numbers differ.
    let m1 = three(|_| {});
    let mut m2 = three(|s| s.groups[0].endpoints.reverse());
    let mut extra = web(vec![group(&m2, "g", "zone-b", false, &["198.18.7.7"])]);
    extra.name = "other".into();
    extra.rules[0].dest = RuleDest::Vip(a("198.18.0.200"));
    m2.services.insert(0, extra);
    let mut s1 = sim(m1);
    let mut s2 = sim(m2);
    for port in 0..500 {
        let p = syn("198.18.10.5", port);
        assert_eq!(backend(&s1.packet(&p)), backend(&s2.packet(&p)));
    }
}

#[test]
fn ch_3_group_weight_gives_proportional_share() {
    let m = model_with(|m| {
        let mut heavy = group(m, "heavy", "zone-a", false, &["198.18.1.1"]);
        heavy.weight = 3;
        web(vec![heavy, group(m, "light", "zone-b", false, &["198.18.2.1"])])
    });
    let mut s = sim(m);
    let mut n = BTreeMap::new();
    for port in 0..20_000u16 {
        *n.entry(backend(&s.packet(&syn("198.18.10.5", port)))).or_insert(0u32) += 1;
    }
    // 75% expected; 20 000 flows give a standard deviation of ~0.3%.
    let share = f64::from(n["198.18.1.1"]) / 20_000.0;
    assert!((0.73..0.77).contains(&share), "heavy share {share}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// NX-1: while its entry stays valid, a tracked connection is never sent elsewhere, whatever
    /// happens to the other backends (health flaps, additions, removals) and the clock (below
    /// the idle timeout).
    #[test]
    fn nx_1_tracked_flows_never_move_while_valid(ops in proptest::collection::vec((0u8..4, 0u8..16), 1..40)) {
        let m = model_with(|m| web(vec![
            group(m, "p", "zone-a", false, &["198.18.1.1", "198.18.1.2", "198.18.1.3", "198.18.1.4"]),
        ]));
        let mut s = sim(m);
        // Five TCP flows pinned before anything happens.
        let flows: Vec<u16> = (0..5).collect();
        let pinned: Vec<String> = flows.iter().map(|&p| backend(&s.packet(&syn("198.18.10.5", p)))).collect();
        let protected: BTreeSet<String> = pinned.iter().cloned().collect();
        for (op, arg) in ops {
            let extra = format!("198.18.3.{}", arg + 1);
            match op {
                0 => { s.add_backend("web", "p", Endpoint { addr: a(&extra), port: 0 }).unwrap(); }
                1 => { s.remove_backend("web", a(&extra)).unwrap(); }
                2 => {
                    // Flap the health of an unpinned backend (or of a pinned one: TCP persists).
                    let all = ["198.18.1.1", "198.18.1.2", "198.18.1.3", "198.18.1.4"];
                    let victim = all[usize::from(arg) % 4];
                    s.set_health_by_addr(a(victim), arg % 2 == 0 || !protected.contains(victim));
                }
                _ => s.advance(Duration::from_secs(u64::from(arg) * 30)),
            }
            for (i, &p) in flows.iter().enumerate() {
                let o = s.packet(&ack("198.18.10.5", p));
                prop_assert_eq!(reason(&o), "conntrack_hit");
                prop_assert_eq!(&backend(&o), &pinned[i]);
            }
        }
    }
}

#[test]
fn operator_drain_stops_new_connections_keeps_entries() {
    let m = three(|_| {});
    let mut s = Simulator::new(m).unwrap();
    let x = backend(&s.packet(&udp("198.18.10.5", 1)));
    let key = spillway_core::model::BackendKey { service: "web".into(), endpoint: ep(&x) };
    let mut st_changed = false;
    // Drain through the policy state the way the control plane does.
    let snapshot_before = s.snapshot().generation;
    s.with_state(|st| st_changed = st.set_drained(&key, true));
    assert!(st_changed);
    assert!(s.snapshot().generation > snapshot_before);
    // The existing UDP flow keeps its backend (not unhealthy, so CP does not apply)...
    let o = s.packet(&udp("198.18.10.5", 1));
    assert_eq!((backend(&o), reason(&o)), (x.clone(), "conntrack_hit"));
    // ...and no new connection goes there.
    for port in 100..400 {
        assert_ne!(backend(&s.packet(&udp("198.18.10.5", port))), x);
    }
    s.with_state(|st| {
        st.set_drained(&key, false);
    });
    assert!((100..400).any(|port| backend(&s.packet(&udp("198.18.10.6", port))) == x));
}

#[test]
fn explain_tells_what_decide_then_does() {
    use spillway_core::conntrack::key_hash;
    use spillway_core::explain::explain;
    let mut s = sim(three(|s| s.zonal = spillway_core::policy::ZonalAffinity::StayWithinZone));
    let x = backend(&s.packet(&syn("198.18.10.5", 7)));
    s.set_health_by_addr(a(&x), false);
    for p in [ack("198.18.10.5", 7), udp("198.18.10.5", 9), syn("198.18.10.5", 7)] {
        let key = explain(&p, s.snapshot(), None, s.now(), None).tracking_key.unwrap();
        let entry = s.shard().find(&key, key_hash(&key)).map(|slot| s.shard().get(slot, s.now()));
        let ex = explain(&p, s.snapshot(), entry.as_ref(), s.now(), None);
        assert_eq!(ex.service.as_deref(), Some("web"));
        assert_eq!(ex.client_zone.as_deref(), Some("zone-a"));
        assert!(ex.zonal_match);
        let o = s.packet(&p);
        assert_eq!(ex.backend, o.backend);
        assert_eq!(ex.reason, reason(&o));
    }
}

/// The flood guard (performance issue: SYN floods): over the admitted rate, or with a full
/// table, new connections are forwarded by the consistent hash without an entry, and the
/// established flows keep theirs.
#[test]
fn flood_guard_keeps_established_entries_and_forwards_the_flood_by_hash() {
    use spillway_core::conntrack::Shard;
    use spillway_core::decide::decide;
    use spillway_core::state::PolicyState;
    use spillway_core::time::Time;
    let mut st = PolicyState::new(true);
    st.apply_model(three(|_| {}), Time::ZERO).unwrap();
    let snap = st.snapshot(Time::ZERO);
    let mut shard = Shard::with_capacity(64);
    shard.set_flood_guard(Some(10));
    let t0 = Time::from_secs(1);
    // Ten established flows fill the bucket of tokens.
    let established: Vec<_> =
        (0..10).map(|p| decide(&syn("198.18.10.5", p), &snap, &mut shard, t0)).collect();
    assert!(established.iter().all(|d| d.tracked));
    // A flood in the same millisecond: forwarded (by the hash), not tracked.
    for p in 100..600 {
        let d = decide(&syn("198.18.20.9", p), &snap, &mut shard, t0);
        assert!(d.backend().is_some() && !d.tracked);
        // The same flow's next packet goes to the same backend (consistent hashing).
        let again = decide(&ack("198.18.20.9", p), &snap, &mut shard, t0);
        assert_eq!(again.backend(), d.backend());
    }
    assert_eq!(shard.len(), 10);
    assert!(shard.stats().bypassed >= 500);
    // The established flows were never disturbed.
    for (p, d) in (0..10).zip(&established) {
        let hit = decide(&ack("198.18.10.5", p), &snap, &mut shard, t0);
        assert_eq!((hit.backend(), hit.verdict), (d.backend(), hit.verdict));
        assert!(matches!(
            hit.verdict,
            spillway_core::decide::Verdict::Forward {
                reason: spillway_core::decide::ForwardReason::ConntrackHit,
                ..
            }
        ));
    }
    // A second later the bucket is refilled: new connections are tracked again.
    let later = decide(&syn("198.18.10.7", 1), &snap, &mut shard, Time::from_secs(2));
    assert!(later.tracked);
    // A full table refuses new entries instead of evicting established ones.
    let mut small = Shard::with_capacity(16);
    assert_eq!(small.capacity(), 16);
    small.set_flood_guard(Some(1_000_000));
    for p in 0..16 {
        assert!(decide(&syn("198.18.10.5", p), &snap, &mut small, t0).tracked);
    }
    let d = decide(&syn("198.18.10.5", 99), &snap, &mut small, t0);
    assert!(!d.tracked && d.released.is_none() && small.stats().evictions == 0);
}
