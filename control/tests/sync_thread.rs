//! The sync thread (`spillway_control::sync::spawn`) between instances on loopback, with real
//! UDP sockets and the real wire format; the test plays each instance's worker (what its scans
//! would hand over, what it would store): entries reach the other instance's workers in its
//! terms once the two have proven each other live; a joining instance's bulk sync is counted,
//! asked again where entries went missing, paced by its acknowledgements and ends; removals
//! travel; keys rotate; an instance back with a lower epoch is taken back; hostile datagrams
//! install nothing and are counted by reason.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spillway_control::sync::{spawn, Key, KeyRing, Refused, SyncSettings, SyncShared};
use spillway_core::addr::Addr;
use spillway_core::counters::WorkerCounters;
use spillway_core::flow::{FlowKey, TupleKind};
use spillway_core::model::{
    Endpoint, Group, Model, Ports, Rule, RuleDest, RuleProtocol, Service, Zone,
};
use spillway_core::publish::Publisher;
use spillway_core::state::PolicyState;
use spillway_core::sync::{service_identity, Inbound, Outbound, PeerEntry, SyncLink, Ticket};
use spillway_core::time::Time;

fn model() -> Model {
    let mut m = Model::empty();
    m.region = "r".into();
    m.zones.push(Zone { name: "z".into(), region: "r".into() });
    let mut s = Service::new("web");
    s.rules.push(Rule {
        dest: RuleDest::Vip("198.18.0.100".parse().unwrap()),
        protocol: RuleProtocol::L3Default,
        ports: Ports::All,
    });
    s.groups.push(Group {
        name: "g".into(),
        zone: 0,
        failover: false,
        weight: 1,
        endpoints: (1..=4)
            .map(|i| Endpoint { addr: format!("198.18.1.{i}").parse().unwrap(), port: 0 })
            .collect(),
    });
    m.services.push(s);
    m
}

fn publisher_of(m: Model) -> Publisher {
    let mut st = PolicyState::new(true);
    st.apply_model(m, Time::ZERO).unwrap();
    Publisher::new(st.snapshot(Time::ZERO))
}

/// A free UDP port on loopback.
fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Instance {
    links: Vec<SyncLink>,
    shared: Arc<SyncShared>,
    stop: Arc<AtomicBool>,
    _publisher: Publisher,
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

struct Opts {
    id: u16,
    bind: Vec<SocketAddr>,
    peers: Vec<(u16, SocketAddr)>,
    keys: KeyRing,
    bulk_timeout: Duration,
    epoch: u64,
    workers: usize,
    max_entries_per_sec: u64,
    model: Model,
}

fn opts(id: u16, port: u16, peer: (u16, u16)) -> Opts {
    Opts {
        id,
        bind: vec![SocketAddr::from(([127, 0, 0, 1], port))],
        peers: vec![(peer.0, SocketAddr::from(([127, 0, 0, 1], peer.1)))],
        keys: KeyRing::one(Key::from_bytes(KEY)),
        bulk_timeout: Duration::from_secs(10),
        epoch: 1_000 * u64::from(id),
        workers: 1,
        max_entries_per_sec: 1_000_000,
        model: model(),
    }
}

fn start(o: Opts) -> Instance {
    let publisher = publisher_of(o.model);
    let links: Vec<SyncLink> = (0..o.workers).map(|_| SyncLink::new(1024)).collect();
    let counters: Arc<[WorkerCounters]> = (0..o.workers).map(|_| WorkerCounters::new()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let settings = SyncSettings {
        instance_id: o.id,
        bind: o.bind,
        peers: o.peers,
        bulk_timeout: o.bulk_timeout,
        refresh: Duration::from_secs(60),
        epoch: o.epoch,
        max_entries_per_sec: o.max_entries_per_sec,
    };
    let (_, shared) =
        spawn(settings, o.keys, links.clone(), counters, publisher.reader(), Arc::clone(&stop))
            .unwrap();
    Instance { links, shared, stop, _publisher: publisher }
}

fn entry(i: u32, backend: u8) -> PeerEntry {
    PeerEntry {
        key: FlowKey {
            src: Addr::v4(198, 18, 50 + (i >> 16) as u8, 1),
            dst: Addr::v4(198, 18, 0, 100),
            sport: (i & 0xffff) as u16,
            dport: 80,
            proto: 6,
            kind: TupleKind::Five as u8,
            service: 0,
        },
        service: service_identity("web"),
        backend: Endpoint { addr: Addr::v4(198, 18, 1, backend), port: 0 },
        age_ms: 1_000,
        flags: 0,
    }
}

/// Waits for `cond` for at most `within`, polling.
fn eventually(within: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// What the workers of `link` were handed, until `n` stores came.
fn take(link: &SyncLink, n: usize, within: Duration) -> Vec<Inbound> {
    let mut got = Vec::new();
    eventually(within, &format!("{n} items handed to the worker"), || {
        while let Some(e) = link.inbound.pop() {
            got.push(e);
        }
        got.len() >= n
    });
    got
}

fn proven(a: &Instance, b: &Instance) {
    eventually(Duration::from_secs(5), "both proven live to each other", || {
        let p = |i: &Instance| {
            let peers = i.shared.reply().status.peers;
            !peers.is_empty() && peers.iter().all(|p| p.proven && p.accepts)
        };
        p(a) && p(b)
    });
}

fn refused(i: &Instance, r: Refused) -> u64 {
    i.shared.stats.refused[r.index()].load(Ordering::Relaxed)
}

const KEY: [u8; 32] = [7; 32];

#[test]
fn entries_a_worker_hands_over_reach_the_peers_workers_in_its_terms() {
    let (pa, pb) = (free_port(), free_port());
    let a = start(opts(1, pa, (2, pb)));
    let b = start(opts(2, pb, (1, pa)));
    proven(&a, &b);
    for i in 0..50 {
        a.links[0].outbound.push(Outbound::Share(entry(i, 1 + (i % 4) as u8))).unwrap();
    }
    let got = take(&b.links[0], 50, Duration::from_secs(5));
    for (i, e) in got.iter().enumerate() {
        let Inbound::Store(e) = e else { panic!("a store, got {e:?}") };
        // The receiver's own service id, the backend's slot there, the copy's marks.
        assert_eq!(e.key.sport, i as u16);
        assert_eq!(e.key.service, 1, "web is service 1 on the receiver");
        assert_eq!(e.value.epoch, spillway_core::decide::SYNCED_EPOCH);
        assert!(e.value.is_copy());
        assert_eq!(e.age_ms, 1_000);
    }
    assert_eq!(a.shared.stats.entries_sent.load(Ordering::Relaxed), 50);
    assert_eq!(b.shared.stats.entries_received.load(Ordering::Relaxed), 50);
    // An entry for a backend the receiver does not have is refused, not handed over.
    a.links[0].outbound.push(Outbound::Share(entry(99, 9))).unwrap();
    eventually(Duration::from_secs(5), "the unknown backend counted", || {
        b.shared.stats.entries_refused.iter().map(|c| c.load(Ordering::Relaxed)).sum::<u64>() == 1
    });
    // A removal reaches the workers as one.
    a.links[0].outbound.push(Outbound::Remove(entry(3, 4))).unwrap();
    let got = take(&b.links[0], 1, Duration::from_secs(5));
    let Inbound::Remove(r) = got[0] else { panic!("a removal, got {:?}", got[0]) };
    assert_eq!((r.key.sport, r.key.service), (3, 1));
    assert!(r.backend.is_some(), "it names the backend it had");
    // Nothing was lost on the way.
    let lost = b.shared.reply().lost;
    assert_eq!((lost.kernel_drops, lost.sequence_gaps), (0, 0), "{lost:?}");
}

#[test]
fn an_instance_with_ipv4_and_ipv6_peers_talks_to_both() {
    let (pa4, pa6, pb, pc) = (free_port(), free_port(), free_port(), free_port());
    let v4 = |port| SocketAddr::from(([127, 0, 0, 1], port));
    let v6 = |port| SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port));
    let a = start(Opts {
        bind: vec![v4(pa4), v6(pa6)],
        peers: vec![(2, v4(pb)), (3, v6(pc))],
        ..opts(1, 0, (0, 0))
    });
    let b = start(Opts { bind: vec![v4(pb)], peers: vec![(1, v4(pa4))], ..opts(2, 0, (0, 0)) });
    let c = start(Opts { bind: vec![v6(pc)], peers: vec![(1, v6(pa6))], ..opts(3, 0, (0, 0)) });
    proven(&a, &b);
    proven(&a, &c);
    for i in 0..20 {
        a.links[0].outbound.push(Outbound::Share(entry(i, 1))).unwrap();
    }
    for (name, peer) in [("the IPv4 peer", &b), ("the IPv6 peer", &c)] {
        let got = take(&peer.links[0], 20, Duration::from_secs(5));
        let ports: Vec<u16> = got
            .iter()
            .map(|e| match e {
                Inbound::Store(e) => e.key.sport,
                other => panic!("{name}: a store, got {other:?}"),
            })
            .collect();
        assert_eq!(ports, (0..20).collect::<Vec<u16>>(), "{name}");
    }
    // And back: each peer's entries reach the instance over its own family.
    b.links[0].outbound.push(Outbound::Share(entry(100, 2))).unwrap();
    c.links[0].outbound.push(Outbound::Share(entry(200, 3))).unwrap();
    let mut got: Vec<u16> = take(&a.links[0], 2, Duration::from_secs(5))
        .iter()
        .map(|e| match e {
            Inbound::Store(e) => e.key.sport,
            other => panic!("a store, got {other:?}"),
        })
        .collect();
    got.sort_unstable();
    assert_eq!(got, vec![100, 200]);
}

/// Plays a worker of an answering instance: takes the bulk tickets asked of it and answers
/// each with `entries` entries, claiming `claim(ticket)` in its end.
fn answer_tickets(
    link: &SyncLink,
    entries: u32,
    within: Duration,
    mut claim: impl FnMut(&Ticket) -> u64,
) -> Vec<Ticket> {
    let mut tickets = Vec::new();
    eventually(within, "a bulk ticket", || {
        while let Some(t) = link.bulk.pop() {
            tickets.push(t);
        }
        !tickets.is_empty()
    });
    for t in &tickets {
        let mut i = 0;
        while i < entries {
            if link.outbound.push(Outbound::Answer(*t, entry(i, 2))).is_ok() {
                i += 1;
            } else {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let end = Outbound::AnswerEnd(*t, claim(t));
        while link.outbound.push(end).is_err() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    tickets
}

#[test]
fn fs_5_a_joining_instance_gets_every_entry_at_risk_counted_before_it_is_ready() {
    let (pa, pb) = (free_port(), free_port());
    let mut oa = opts(1, pa, (2, pb));
    oa.workers = 2;
    let a = start(oa);
    let b = start(opts(2, pb, (1, pa)));
    assert!(!b.shared.bulk_done.load(Ordering::Relaxed));
    // b's worker stores what it is handed as it comes (its queue holds 1,024).
    let stored = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let worker = {
        let (link, stored, stop) = (b.links[0].clone(), Arc::clone(&stored), Arc::clone(&b.stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                while link.inbound.pop().is_some() {
                    stored.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    // Both of a's workers are asked; they answer 30 and 5,000 entries (the latter far beyond a
    // window and b's worker queue: it goes as fast as b takes it).
    let t0 = answer_tickets(&a.links[0], 30, Duration::from_secs(5), |_| 30);
    let t1 = answer_tickets(&a.links[1], 5_000, Duration::from_secs(5), |_| 5_000);
    assert_eq!(t0, t1, "one ticket, every worker");
    assert_eq!(t0[0].attempt, 0);
    eventually(Duration::from_secs(10), "b's bulk sync done", || {
        b.shared.bulk_done.load(Ordering::Relaxed)
    });
    let reply = b.shared.reply();
    assert_eq!(reply.status.bulk, "done");
    assert_eq!(reply.bulk_entries, 5_030);
    assert_eq!(reply.status.peers[0].bulk_missing, 0);
    assert!(reply.status.peers[0].bulk_answered);
    assert_eq!(a.shared.stats.bulk_answers.load(Ordering::Relaxed), 1);
    // b's worker was handed every entry: none found its queue full.
    eventually(Duration::from_secs(5), "every entry stored", || {
        stored.load(Ordering::Relaxed) == 5_030
    });
    assert_eq!(reply.lost.worker_queue_full, 0);
    drop(b);
    worker.join().unwrap();
}

#[test]
fn fs_5_a_part_whose_count_disagrees_is_asked_again_until_it_agrees() {
    let (pa, pb) = (free_port(), free_port());
    let a = start(opts(1, pa, (2, pb)));
    let b = start(opts(2, pb, (1, pa)));
    // The worker's end claims 100 entries but only 60 went: 40 went missing on the way.
    let first = answer_tickets(&a.links[0], 60, Duration::from_secs(5), |_| 100);
    assert_eq!(first[0].attempt, 0);
    // b asks that worker's part again, as attempt 1; answered in full this time.
    let again = answer_tickets(&a.links[0], 100, Duration::from_secs(5), |_| 100);
    assert_eq!((again[0].request, again[0].attempt), (first[0].request, 1));
    eventually(Duration::from_secs(5), "b's bulk sync done", || {
        b.shared.bulk_done.load(Ordering::Relaxed)
    });
    let reply = b.shared.reply();
    assert_eq!(reply.status.bulk, "done");
    assert_eq!(reply.lost.bulk_missing, 40, "the shortfall counted");
    assert_eq!(reply.bulk_retries, 1);
    assert_eq!(reply.bulk_entries, 160);
}

#[test]
fn fs_5_with_no_peer_up_the_bulk_sync_ends_at_its_timeout_and_says_so() {
    let (pa, pb) = (free_port(), free_port());
    let mut ob = opts(2, pb, (1, pa));
    ob.bulk_timeout = Duration::from_millis(800);
    let b = start(ob);
    let t = Instant::now();
    eventually(Duration::from_secs(5), "b's bulk sync over", || {
        b.shared.bulk_done.load(Ordering::Relaxed)
    });
    assert!(t.elapsed() >= Duration::from_millis(700), "{:?}", t.elapsed());
    assert_eq!(b.shared.status.lock().unwrap().bulk, "timed_out");
}

#[test]
fn a_key_rotation_by_reloads_keeps_both_sides_talking() {
    let (pa, pb) = (free_port(), free_port());
    let (ka, kb) = (Key::from_bytes(KEY), Key::from_bytes([8; 32]));
    let a = start(opts(1, pa, (2, pb)));
    let b = start(opts(2, pb, (1, pa)));
    proven(&a, &b);
    let send = |n: u32| {
        for i in 0..n {
            a.links[0].outbound.push(Outbound::Share(entry(i, 1))).unwrap();
        }
        take(&b.links[0], n as usize, Duration::from_secs(5)).len()
    };
    assert_eq!(send(5), 5);
    // Step 1: both also accept B. Step 2: a seals with B (b accepts it). Step 3: b drops A.
    let ring = |current: &Key, other: Option<&Key>| {
        Arc::new(KeyRing { current: current.clone(), other: other.cloned() })
    };
    b.shared.keys.store(ring(&ka, Some(&kb)));
    a.shared.keys.store(ring(&ka, Some(&kb)));
    assert_eq!(send(5), 5);
    a.shared.keys.store(ring(&kb, Some(&ka)));
    assert_eq!(send(5), 5);
    b.shared.keys.store(ring(&kb, None));
    a.shared.keys.store(ring(&kb, None));
    assert_eq!(send(5), 5);
    assert_eq!(refused(&b, Refused::UnknownKey) + refused(&b, Refused::AuthFailed), 0);
    // A key neither holds now: refused by its id, before any decryption.
    a.shared.keys.store(ring(&ka, None));
    eventually(Duration::from_secs(5), "the old key refused", || {
        refused(&b, Refused::UnknownKey) > 0
    });
}

#[test]
fn an_instance_back_with_a_lower_epoch_is_taken_back_after_one_exchange() {
    let (pa, pb) = (free_port(), free_port());
    let mut oa = opts(1, pa, (2, pb));
    oa.epoch = 5_000_000;
    let a = start(oa);
    let b = start(opts(2, pb, (1, pa)));
    proven(&a, &b);
    drop(a);
    std::thread::sleep(Duration::from_millis(100));
    // a starts again with a lower epoch (a clock stepped back, its epoch file lost).
    let mut oa = opts(1, pa, (2, pb));
    oa.epoch = 4_000_000;
    let a = start(oa);
    let t = Instant::now();
    eventually(Duration::from_secs(5), "b to take a back", || {
        b.shared.reply().status.peers[0].epoch == Some(4_000_000)
    });
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    a.links[0].outbound.push(Outbound::Share(entry(1, 1))).unwrap();
    assert_eq!(take(&b.links[0], 1, Duration::from_secs(5)).len(), 1);
}

#[test]
fn fs_6_hostile_datagrams_install_nothing_and_are_counted_by_reason() {
    let (pa, pb) = (free_port(), free_port());
    // `a` seals under another key: everything it sends is refused by `b` (its key's id).
    let mut oa = opts(1, pa, (2, pb));
    oa.keys = KeyRing::one(Key::from_bytes([9; 32]));
    let a = start(oa);
    let b = start(opts(2, pb, (1, pa)));
    a.links[0].outbound.push(Outbound::Share(entry(1, 1))).unwrap();
    eventually(Duration::from_secs(5), "another key counted", || {
        refused(&b, Refused::UnknownKey) >= 2
    });
    // From a plain socket: garbage, a truncated datagram, an unknown sender, another version,
    // one longer than the largest, and a claimed peer id from another address.
    let to = SocketAddr::from(([127, 0, 0, 1], pb));
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.send_to(b"hello", to).unwrap();
    let mut fake = vec![0u8; 100];
    fake[..4].copy_from_slice(b"SPSY");
    fake[4] = 2;
    fake[5] = 1;
    fake[6..8].copy_from_slice(&77u16.to_be_bytes());
    s.send_to(&fake, to).unwrap();
    fake[4] = 9;
    s.send_to(&fake, to).unwrap();
    fake[4] = 2;
    fake[6..8].copy_from_slice(&1u16.to_be_bytes());
    // Peer 1's id, but not from peer 1's address (127.0.0.1 and its port are; this is another
    // address of the loopback network).
    let other = UdpSocket::bind("127.0.0.2:0").unwrap();
    other.send_to(&fake, to).unwrap();
    let mut big = fake.clone();
    big.resize(1_401, 0);
    s.send_to(&big, to).unwrap();
    eventually(Duration::from_secs(5), "each counted by its reason", || {
        refused(&b, Refused::Truncated) == 1
            && refused(&b, Refused::UnknownSender) == 1
            && refused(&b, Refused::WrongVersion) == 1
            && refused(&b, Refused::WrongAddress) == 1
            && refused(&b, Refused::Oversized) == 1
    });
    assert!(b.links[0].inbound.is_empty(), "nothing handed to the workers");
    assert_eq!(b.shared.stats.entries_received.load(Ordering::Relaxed), 0);
}

#[test]
fn fs_9_a_peer_sending_more_entries_than_its_limit_is_cut_off_and_counted() {
    let (pa, pb) = (free_port(), free_port());
    let a = start(opts(1, pa, (2, pb)));
    let mut ob = opts(2, pb, (1, pa));
    ob.max_entries_per_sec = 1_000;
    let b = start(ob);
    proven(&a, &b);
    // b's worker takes what it is handed.
    let worker = {
        let (link, stop) = (b.links[0].clone(), Arc::clone(&b.stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                while link.inbound.pop().is_some() {}
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    for i in 0..900 {
        a.links[0].outbound.push(Outbound::Share(entry(i, 1))).unwrap();
    }
    let t = Instant::now();
    let mut sent = 900;
    while t.elapsed() < Duration::from_millis(300) {
        if a.links[0].outbound.push(Outbound::Share(entry(sent, 1))).is_ok() {
            sent += 1;
        }
    }
    eventually(Duration::from_secs(5), "the excess counted", || {
        b.shared.reply().limited.get("entries_rate").copied().unwrap_or(0) > 0
    });
    let received = b.shared.stats.entries_received.load(Ordering::Relaxed);
    assert!(received <= 1_000 + 19 + 400, "at most the bucket and what refilled: {received}");
    drop(b);
    worker.join().unwrap();
}

#[test]
fn fs_10_tables_that_differ_for_long_raise_the_alarm() {
    let (pa, pb) = (free_port(), free_port());
    let a = start(opts(1, pa, (2, pb)));
    // b has a fifth backend: other tables.
    let mut ob = opts(2, pb, (1, pa));
    ob.model.services[0].groups[0]
        .endpoints
        .push(Endpoint { addr: Addr::v4(198, 18, 1, 5), port: 0 });
    let b = start(ob);
    proven(&a, &b);
    let differ = |i: &Instance| i.shared.reply().status.peers[0].tables_differ;
    assert!(!differ(&a), "not at once: a reload takes a moment to reach every instance");
    eventually(Duration::from_secs(9), "the alarm on both", || differ(&a) && differ(&b));
    let since = a.shared.reply().status.peers[0].tables_differ_sec.unwrap();
    assert!(since >= 5.0, "{since}");
}
