//! The fleet-sync rules (docs/spec.md section 2.7, FS): which entries an instance shares, how a
//! peer stores them, and how a connection that moves to that peer continues on its backend.
//! Two simulated instances with the same configuration stand for two instances of a fleet;
//! what a connection does on the second is checked against what it did on the first.

mod common;
use common::*;
use spillway_core::model::Model;
use spillway_core::policy::Persistence;
use spillway_core::simulator::Simulator;
use spillway_core::sync::{Installed, PeerEntry, Removed};
use std::time::Duration;

const CLIENTS: [&str; 4] = ["198.18.10.1", "198.18.10.2", "198.18.20.7", "198.18.40.9"];

/// Service `web` with four backends in zone-a, and `f` applied to it.
fn four(f: impl FnOnce(&mut spillway_core::model::Service)) -> Model {
    model_with(|m| {
        let mut s = web(vec![group(
            m,
            "g",
            "zone-a",
            false,
            &["198.18.1.1", "198.18.1.2", "198.18.1.3", "198.18.1.4"],
        )]);
        f(&mut s);
        s
    })
}

/// The connections of the tests: (client, port), 240 of them.
fn flows() -> Vec<(&'static str, u16)> {
    CLIENTS.iter().flat_map(|&c| (0..60).map(move |i| (c, 20_000 + i))).collect()
}

/// An instance with every flow open (a SYN each): the backend each reached.
fn opened(m: Model) -> (Simulator, Vec<String>) {
    let mut s = sim(m);
    let reached = flows().iter().map(|&(c, p)| backend(&s.packet(&syn(c, p)))).collect();
    (s, reached)
}

/// A fifth backend added by a reload, on a running instance.
fn add_fifth(s: &mut Simulator) {
    s.add_backend("web", "g", ep("198.18.1.5")).unwrap();
}

#[test]
fn fs_1_only_entries_pinned_elsewhere_than_the_current_table_are_at_risk() {
    let (mut a, reached) = opened(four(|_| {}));
    // Before any change, no entry is at risk: a peer picks the same backends by the hash.
    assert!(a.entries_at_risk().is_empty());
    add_fifth(&mut a);
    // After it: the entries whose flow a new instance with the new table would send elsewhere,
    // asked of an instance that has the new configuration and no entries.
    let mut fresh = sim(four(|_| {}));
    add_fifth(&mut fresh);
    let moved: Vec<(&str, u16)> = flows()
        .into_iter()
        .zip(&reached)
        .filter(|&((c, p), was)| backend(&fresh.packet(&syn(c, p))) != *was)
        .map(|(f, _)| f)
        .collect();
    let at_risk = a.entries_at_risk();
    let mut named: Vec<(String, u16)> =
        at_risk.iter().map(|e| (e.key.src.to_string(), e.key.sport)).collect();
    named.sort();
    let mut want: Vec<(String, u16)> = moved.iter().map(|&(c, p)| (c.to_string(), p)).collect();
    want.sort();
    assert_eq!(named, want);
    // About a fifth of them (CH-2), each with the backend it is pinned to.
    assert!((20..=90).contains(&at_risk.len()), "{} of 240 at risk", at_risk.len());
    for e in &at_risk {
        let i = flows().iter().position(|&(c, p)| c == e.key.src.to_string() && p == e.key.sport);
        assert_eq!(e.backend.addr.to_string(), reached[i.unwrap()]);
    }
}

/// Instance `a` with every flow open, then the fifth backend; instance `b` with the new
/// configuration from the start, and `a`'s entries at risk installed.
fn pair() -> (Simulator, Vec<String>, Simulator, Vec<PeerEntry>) {
    let (mut a, reached) = opened(four(|_| {}));
    add_fifth(&mut a);
    let mut b = sim(four(|_| {}));
    add_fifth(&mut b);
    let shared = a.entries_at_risk();
    (a, reached, b, shared)
}

#[test]
fn fs_2_fs_3_a_connection_that_moves_to_a_peer_keeps_its_backend() {
    let (_, reached, mut b, shared) = pair();
    // Without the peer's entries, the at-risk connections would change backend on `b`.
    let mut bare = sim(four(|_| {}));
    add_fifth(&mut bare);
    let changed = flows()
        .iter()
        .zip(&reached)
        .filter(|&(&(c, p), was)| backend(&bare.packet(&ack(c, p))) != *was)
        .count();
    assert_eq!(changed, shared.len());
    // With them: every connection reaches the backend it started on.
    let got = b.install_peer_entries(&shared);
    assert!(got.iter().all(|&i| i == Installed::New), "{got:?}");
    for (&(c, p), was) in flows().iter().zip(&reached) {
        let o = b.packet(&ack(c, p));
        assert_eq!(backend(&o), *was, "{c}:{p}");
        let taken = shared.iter().any(|e| e.key.src.to_string() == c && e.key.sport == p);
        assert_eq!(reason(&o), if taken { "sync_takeover" } else { "new_connection" });
        // The entry is now `b`'s own: the next packet is an ordinary hit.
        assert_eq!(reason(&b.packet(&ack(c, p))), "conntrack_hit");
    }
}

#[test]
fn fs_2_a_copy_keeps_its_age_and_expires_unless_refreshed() {
    let (_, _, mut b, mut shared) = pair();
    let e = &mut shared[0];
    let (c, p) = (e.key.src.to_string(), e.key.sport);
    // Vouched for 599 s before, of the 600 s timeout and no copy grace (a relayed copy, to an
    // instance up for longer than that).
    e.age_ms = 599_000;
    b.advance(Duration::from_secs(1000));
    assert_eq!(b.install_peer_entries(&shared[..1]), [Installed::New]);
    b.advance(Duration::from_secs(2));
    assert_eq!(reason(&b.packet(&ack(&c, p))), "replaced_expired");
    // Refreshed in time (the peer sends it again while the connection lives there): kept.
    let (_, _, mut b, mut shared) = pair();
    shared[0].age_ms = 599_000;
    b.advance(Duration::from_secs(1000));
    b.install_peer_entries(&shared[..1]);
    b.advance(Duration::from_millis(500));
    shared[0].age_ms = 10;
    assert_eq!(b.install_peer_entries(&shared[..1]), [Installed::Refreshed]);
    b.advance(Duration::from_secs(2));
    let o = b.packet(&ack(&shared[0].key.src.to_string(), shared[0].key.sport));
    assert_eq!((reason(&o), o.backend), ("sync_takeover", Some(shared[0].backend)));
}

#[test]
fn fs_2_a_peers_entry_never_evicts_one() {
    let (_, _, _, shared) = pair();
    // One bucket of sixteen, full of `b`'s own connections.
    let mut m = four(|_| {});
    let mut b = Simulator::with_capacity(m.clone(), 16).unwrap();
    b.add_backend("web", "g", ep("198.18.1.5")).unwrap();
    for i in 0..16 {
        b.packet(&syn("198.18.30.1", 30_000 + i));
    }
    let mine = b.shard().len();
    let got = b.install_peer_entries(&shared);
    assert!(got.iter().all(|&i| i == Installed::TableFull), "{got:?}");
    assert_eq!(b.shard().len(), mine);
    for i in 0..16 {
        assert_eq!(reason(&b.packet(&ack("198.18.30.1", 30_000 + i))), "conntrack_hit");
    }
    // A configuration without the service: nothing stored either.
    m.services.clear();
    let mut other = sim(m);
    assert!(other.install_peer_entries(&shared).iter().all(|&i| i == Installed::UnknownService));
}

#[test]
fn fs_3_a_peers_entry_follows_the_draining_and_persistence_rules() {
    // Its backend removed without draining (CD-2): not taken over; a new backend by the hash.
    let (_, _, mut b, shared) = pair();
    let e = shared[0];
    let (c, p) = (e.key.src.to_string(), e.key.sport);
    b.install_peer_entries(&[e]);
    b.remove_backend("web", e.backend.addr).unwrap();
    let o = b.packet(&ack(&c, p));
    assert_eq!(reason(&o), "replaced_drained");
    assert_ne!(o.backend, Some(e.backend));
    // With draining (CD-3): taken over until the deadline.
    let draining = |s: &mut spillway_core::model::Service| s.draining_timeout_secs = 30;
    let (mut a, _) = opened(four(draining));
    add_fifth(&mut a);
    let mut b = sim(four(draining));
    add_fifth(&mut b);
    let e = a.entries_at_risk()[0];
    let (c, p) = (e.key.src.to_string(), e.key.sport);
    b.install_peer_entries(&[e]);
    b.remove_backend("web", e.backend.addr).unwrap();
    let o = b.packet(&ack(&c, p));
    assert_eq!((reason(&o), o.backend), ("sync_takeover", Some(e.backend)));
    // Unhealthy backend: TCP persists by default (CP-1); not with NEVER_PERSIST (CP-2).
    for (persistence, want) in
        [(Persistence::DefaultForProtocol, "sync_takeover"), (Persistence::NeverPersist, "x")]
    {
        let with = |s: &mut spillway_core::model::Service| s.persistence = persistence;
        let (mut a, _) = opened(four(with));
        add_fifth(&mut a);
        let mut b = sim(four(with));
        add_fifth(&mut b);
        let e = a.entries_at_risk()[0];
        b.install_peer_entries(&[e]);
        b.set_health_by_addr(e.backend.addr, false);
        let o = b.packet(&ack(&e.key.src.to_string(), e.key.sport));
        let want = if want == "x" { "replaced_unhealthy" } else { want };
        assert_eq!(reason(&o), want, "{persistence:?}");
    }
}

#[test]
fn fs_3_a_new_connection_syn_replaces_a_peers_entry() {
    let (_, _, mut b, shared) = pair();
    let e = shared[0];
    b.install_peer_entries(&[e]);
    // CT-2: a SYN of the same 5-tuple is a new connection, by the hash.
    let o = b.packet(&syn(&e.key.src.to_string(), e.key.sport));
    assert_eq!(reason(&o), "new_connection");
    assert_ne!(o.backend, Some(e.backend), "the entry was at risk: the hash picks another");
}

#[test]
fn fs_4_an_instances_own_entry_wins_over_a_peers() {
    let (_, _, mut b, shared) = pair();
    let e = shared[0];
    let (c, p) = (e.key.src.to_string(), e.key.sport);
    // `b` saw this connection start itself (its own entry, by its table).
    let own = b.packet(&syn(&c, p)).backend;
    assert_eq!(b.install_peer_entries(&[e]), [Installed::KeptLocal]);
    let o = b.packet(&ack(&c, p));
    assert_eq!((reason(&o), o.backend), ("conntrack_hit", own));
}

/// `four` with fleet sync's copy grace: copies last the idle timeout plus twice a 10 s refresh
/// after their owner last sent them (FS-2).
fn four_synced() -> Model {
    let mut m = four(|_| {});
    m.copy_grace_ms = 20_000;
    m
}

#[test]
fn fs_2_a_quiet_connection_survives_its_owners_death_at_any_moment() {
    // A connection made at risk at T0 that sends one packet per (idle timeout - 1 s) = 599 s;
    // its owner `a` sends its entries at risk every 10 s (a refresh, T0 included) to the peer
    // `b`. The connection's packet at P1 = T0 + 599 s is seen by `a` alone; `a` dies at
    // P1 + d, for d across the whole interval (refreshes continuing until then); the next
    // packet, at P1 + 599 s, reaches `b`, which must still hold a valid copy. A copy that
    // expired by the connection's last packet known to it dies for any d below a refresh.
    const PERIOD_MS: u64 = 599_000;
    const REFRESH_MS: u64 = 10_000;
    let mut deaths: Vec<u64> = (0..PERIOD_MS).step_by(9_000).collect();
    deaths.extend([100, 900, 9_900, 10_100, 598_900]);
    for d in deaths {
        let (mut a, _) = opened(four_synced());
        add_fifth(&mut a);
        let mut b = sim(four_synced());
        add_fifth(&mut b);
        let shares = a.entries_at_risk();
        b.install_peer_entries(&shares);
        let e = shares[0];
        let (c, p) = (e.key.src.to_string(), e.key.sport);
        // Time runs on both, `a` refreshing every 10 s, until its death at P1 + d.
        let (mut t, death) = (0u64, PERIOD_MS + d);
        let mut packet_sent = false;
        while t < death {
            let next_refresh = (t / REFRESH_MS + 1) * REFRESH_MS;
            let next = if packet_sent { next_refresh } else { next_refresh.min(PERIOD_MS) };
            let step = next.min(death) - t;
            a.advance(Duration::from_millis(step));
            b.advance(Duration::from_millis(step));
            t += step;
            if t == PERIOD_MS && !packet_sent {
                assert_eq!(reason(&a.packet(&ack(&c, p))), "conntrack_hit");
                packet_sent = true;
            }
            if t % REFRESH_MS == 0 && t < death {
                let shares = a.entries_at_risk();
                b.install_peer_entries(&shares);
            }
        }
        // Dead. The next packet of the connection reaches `b` at P1 + 599 s.
        b.advance(Duration::from_millis(2 * PERIOD_MS - t));
        let o = b.packet(&ack(&c, p));
        assert_eq!(
            (reason(&o), o.backend),
            ("sync_takeover", Some(e.backend)),
            "owner dead {d} ms after the packet it alone saw"
        );
    }
}

#[test]
fn fs_8_a_reused_tuple_never_meets_a_stale_copy() {
    // `a` shares an entry at risk; its connection closes, and a new one opens from the same
    // client port: a SYN makes a new entry with the table's current pick (CT-2), which is not
    // at risk. `a` tells `b` to drop its copy; `a` dies; the new connection's next packet
    // reaches `b` and goes where `a` sent it.
    let (mut a, _, mut b, shared) = pair();
    assert_eq!(b.install_peer_entries(&shared), vec![Installed::New; shared.len()]);
    let e = shared[0];
    let (c, p) = (e.key.src.to_string(), e.key.sport);
    let reopened = a.packet(&syn(&c, p)).backend;
    assert_ne!(reopened, Some(e.backend), "the new connection goes to the table's pick");
    let scan = a.sync_scan();
    assert_eq!(scan.removes.len(), 1, "one removal: {scan:?}");
    assert_eq!((scan.removes[0].key.sport, scan.removes[0].backend), (p, e.backend));
    assert_eq!(b.apply_peer_removals(&scan.removes), [Removed::Dropped]);
    let o = b.packet(&ack(&c, p));
    assert_eq!((reason(&o), o.backend), ("new_connection", reopened));
    // The other connections keep their copies.
    let f = shared[1];
    let o = b.packet(&ack(&f.key.src.to_string(), f.key.sport));
    assert_eq!((reason(&o), o.backend), ("sync_takeover", Some(f.backend)));
}

#[test]
fn fs_2_copies_never_push_out_or_block_an_instances_own_entries() {
    // A one-bucket table (16 ways) full of copies: `b`'s own new connections still get their
    // entries, each taking a copy's way, and the copies counted as displaced.
    let (_, _, _, shared) = pair();
    let mut b = Simulator::with_capacity(four(|_| {}), 16).unwrap();
    b.add_backend("web", "g", ep("198.18.1.5")).unwrap();
    let got = b.install_peer_entries(&shared[..16.min(shared.len())]);
    assert!(got.iter().all(|&i| i == Installed::New || i == Installed::CopyLimit), "{got:?}");
    let copies = b.shard().copies();
    assert!(copies > 0);
    for i in 0..16 {
        b.packet(&syn("198.18.30.1", 31_000 + i));
    }
    assert_eq!(b.shard().copies(), 0, "every copy gave its way");
    assert_eq!(b.shard().stats().copies_displaced, copies as u64);
    assert_eq!(b.shard().stats().evictions, 0, "no own entry evicted");
    for i in 0..16 {
        assert_eq!(reason(&b.packet(&ack("198.18.30.1", 31_000 + i))), "conntrack_hit");
    }
}

/// `four` with the previous tables kept for 5 s after a change (FS-11).
fn four_with_previous(f: impl FnOnce(&mut spillway_core::model::Service)) -> Model {
    let mut m = four(f);
    m.previous_table_ms = 5_000;
    m
}

#[test]
fn fs_11_a_connection_without_an_entry_just_after_a_change_keeps_its_backend() {
    // Where each connection began: an instance with the four backends.
    let (_, reached) = opened(four_with_previous(|_| {}));
    // The connections a fifth backend moves: a new connection's pick on an instance that has
    // the five from its start (no change, so no previous tables).
    let mut fresh = sim(four_with_previous(|_| {}));
    add_fifth(&mut fresh);
    fresh.advance(Duration::from_secs(6));
    let moved: Vec<bool> = flows()
        .iter()
        .zip(&reached)
        .map(|(&(c, p), was)| backend(&fresh.packet(&syn(c, p))) != *was)
        .collect();
    assert!((20..=90).contains(&moved.iter().filter(|&&m| m).count()), "{moved:?}");
    // An instance of the fleet that holds none of the connections (it restarted; they move
    // to it) and whose tables gain the fifth backend just before their next packets.
    let mut b = sim(four_with_previous(|_| {}));
    add_fifth(&mut b);
    b.advance(Duration::from_millis(4_900));
    for ((&(c, p), was), &m) in flows().iter().zip(&reached).zip(&moved) {
        let o = b.packet(&ack(c, p));
        assert_eq!(backend(&o), *was, "{c}:{p}");
        assert_eq!(reason(&o), if m { "previous_table" } else { "new_connection" }, "{c}:{p}");
        assert_eq!(reason(&b.packet(&ack(c, p))), "conntrack_hit");
    }
    // The entries made so are at risk (FS-1): shared, so that the peers keep them too.
    let mut at_risk: Vec<(String, u16)> =
        b.entries_at_risk().iter().map(|e| (e.key.src.to_string(), e.key.sport)).collect();
    at_risk.sort();
    let mut want: Vec<(String, u16)> = flows()
        .iter()
        .zip(&moved)
        .filter(|(_, &m)| m)
        .map(|(&(c, p), _)| (c.to_string(), p))
        .collect();
    want.sort();
    assert_eq!(at_risk, want);

    // A new connection, a UDP flow, and anything after the 5 s: the current tables (FS-7).
    let mut late = sim(four_with_previous(|_| {}));
    add_fifth(&mut late);
    let mut udp_late = sim(four_with_previous(|_| {}));
    add_fifth(&mut udp_late);
    late.advance(Duration::from_secs(5));
    let mut checked = 0;
    for ((&(c, p), was), &m) in flows().iter().zip(&reached).zip(&moved) {
        if !m {
            continue;
        }
        let new_pick = backend(&fresh.packet(&syn(c, p)));
        assert_ne!(&new_pick, was);
        assert_eq!(
            (backend(&late.packet(&ack(c, p))), reason(&late.packet(&syn(c, p)))),
            (new_pick.clone(), "new_connection")
        );
        let mut syn_now = sim(four_with_previous(|_| {}));
        add_fifth(&mut syn_now);
        assert_eq!(backend(&syn_now.packet(&syn(c, p))), new_pick);
        checked += 1;
    }
    assert!(checked > 0);
    // UDP cannot tell a new flow from a running one: the current tables, always.
    let (_, reached_udp) = {
        let mut s = sim(four_with_previous(|_| {}));
        let r: Vec<String> = flows().iter().map(|&(c, p)| backend(&s.packet(&udp(c, p)))).collect();
        (s, r)
    };
    let mut fresh_udp = sim(four_with_previous(|_| {}));
    add_fifth(&mut fresh_udp);
    fresh_udp.advance(Duration::from_secs(6));
    for (&(c, p), was) in flows().iter().zip(&reached_udp) {
        let o = udp_late.packet(&udp(c, p));
        assert_eq!(backend(&o), backend(&fresh_udp.packet(&udp(c, p))), "{c}:{p} (began on {was})");
        assert_eq!(reason(&o), "new_connection");
    }
}

#[test]
fn fs_11_the_previous_backend_must_still_be_valid() {
    // Backend 198.18.1.2 turns unhealthy: the tables change. A service whose entries do not
    // persist on unhealthy backends gives no connection to it, previous tables or not.
    let (_, reached) = opened(four_with_previous(|s| s.persistence = Persistence::NeverPersist));
    let mut b = sim(four_with_previous(|s| s.persistence = Persistence::NeverPersist));
    assert_eq!(b.set_health_by_addr(a("198.18.1.2"), false), 1);
    let mut on_it = 0;
    for (&(c, p), was) in flows().iter().zip(&reached) {
        let o = b.packet(&ack(c, p));
        assert_ne!(backend(&o), "198.18.1.2", "{c}:{p}");
        if was == "198.18.1.2" {
            on_it += 1;
            assert_eq!(reason(&o), "new_connection");
        } else {
            assert_eq!(backend(&o), *was, "{c}:{p}");
        }
    }
    assert!(on_it > 20, "{on_it}");
    // With the default persistence (TCP entries stay on an unhealthy backend, CP-1), the
    // previous tables give those connections the backend they were on, as their entry would.
    let mut b = sim(four_with_previous(|_| {}));
    b.set_health_by_addr(a("198.18.1.2"), false);
    for (&(c, p), was) in flows().iter().zip(&reached) {
        let o = b.packet(&ack(c, p));
        assert_eq!(backend(&o), *was, "{c}:{p}");
        if was == "198.18.1.2" {
            assert_eq!(reason(&o), "previous_table");
        }
    }
    // A backend removed: while it drains (CD-2) its connections go on there; without a
    // draining time (CD-3, 0) they are given the current tables' backend.
    for (timeout, kept) in [(30, true), (0, false)] {
        let mut b = sim(four_with_previous(|s| s.draining_timeout_secs = timeout));
        b.remove_backend("web", a("198.18.1.3")).unwrap();
        for (&(c, p), was) in flows().iter().zip(&reached) {
            let got = backend(&b.packet(&ack(c, p)));
            if was == "198.18.1.3" {
                assert_eq!(got == *was, kept, "{c}:{p} with draining_timeout_secs {timeout}");
            } else {
                assert_eq!(got, *was, "{c}:{p}");
            }
        }
    }
}

#[test]
fn fs_11_the_tables_before_the_first_verdicts_are_never_previous_tables() {
    use spillway_core::state::PolicyState;
    use spillway_core::time::Time;
    // The daemon's state: a backend without a verdict is unhealthy (HC-3).
    let m = four_with_previous(|_| {});
    let keys: Vec<_> = m.backends().map(|(k, _, _)| k).collect();
    let mut st = PolicyState::new(false);
    st.apply_model(m, Time::ZERO).unwrap();
    let web = |s: &spillway_core::snapshot::Snapshot| {
        s.services.iter().flatten().next().unwrap().previous.is_some()
    };
    // At start, no verdict yet: placeholder tables. The first verdicts change them, and the
    // placeholders are not kept: they never served.
    assert!(!web(&st.snapshot(Time::from_secs(1))));
    for k in &keys[..2] {
        st.set_health(k, true);
    }
    assert!(!web(&st.snapshot(Time::from_secs(2))));
    for k in &keys[2..] {
        st.set_health(k, true);
    }
    assert!(!web(&st.snapshot(Time::from_secs(3))));
    // The instance is ready (its verdicts settled): the tables built from now on are served.
    st.settle();
    assert!(!web(&st.snapshot(Time::from_millis(3_500))));
    // A change then keeps the tables before it, for 5 s.
    st.set_health(&keys[0], false);
    let until = |s: &spillway_core::snapshot::Snapshot| {
        let p = s
            .services
            .iter()
            .flatten()
            .next()
            .unwrap()
            .previous
            .as_ref()
            .map(|p| (p.until, p.shared_until));
        p
    };
    assert_eq!(
        until(&st.snapshot(Time::from_secs(4))),
        Some((Time::from_secs(9), Time::from_secs(14)))
    );
    // Kept while entries are judged by them (twice as long), then gone.
    assert!(web(&st.snapshot(Time::from_millis(13_999))));
    assert!(!web(&st.snapshot(Time::from_secs(14))));
}

#[test]
fn fs_11_a_connection_opened_after_a_change_is_shared_while_peers_use_the_previous_tables() {
    // The owner: four backends, then the fifth; then the connections open (a SYN each), as a
    // reused tuple does after its RST (FS-8's test).
    let mut a = sim(four_with_previous(|_| {}));
    add_fifth(&mut a);
    let reached: Vec<String> =
        flows().iter().map(|&(c, p)| backend(&a.packet(&syn(c, p)))).collect();
    // The backend the previous tables give each: an instance that has only the four.
    let mut old = sim(four_with_previous(|_| {}));
    let mut want: Vec<(String, u16)> = flows()
        .iter()
        .zip(&reached)
        .filter(|&(&(c, p), now)| backend(&old.packet(&syn(c, p))) != *now)
        .map(|(&(c, p), _)| (c.to_string(), p))
        .collect();
    want.sort();
    assert!((20..=90).contains(&want.len()), "{}", want.len());
    // Those are at risk on the owner (FS-1 with FS-11): a peer would give them another backend.
    let shared = a.entries_at_risk();
    let mut named: Vec<(String, u16)> =
        shared.iter().map(|e| (e.key.src.to_string(), e.key.sport)).collect();
    named.sort();
    assert_eq!(named, want);
    // A peer whose tables changed too, and which then receives every connection (the owner
    // died): with the copies, each keeps its backend; without, those go to the previous
    // tables' backend.
    let mut bare = sim(four_with_previous(|_| {}));
    add_fifth(&mut bare);
    let wrong = flows()
        .iter()
        .zip(&reached)
        .filter(|&(&(c, p), was)| backend(&bare.packet(&ack(c, p))) != *was)
        .count();
    assert_eq!(wrong, want.len());
    let mut b = sim(four_with_previous(|_| {}));
    add_fifth(&mut b);
    b.install_peer_entries(&shared);
    for (&(c, p), was) in flows().iter().zip(&reached) {
        assert_eq!(backend(&b.packet(&ack(c, p))), *was, "{c}:{p}");
    }
    // Twice the 5 s after the change, the previous tables are gone everywhere: nothing left
    // at risk.
    a.advance(Duration::from_millis(9_990));
    assert_eq!(a.entries_at_risk().len(), want.len());
    a.advance(Duration::from_millis(10));
    assert!(a.entries_at_risk().is_empty());
}
