//! The sync thread (`spillway_control::sync::spawn`) between two instances on loopback, with
//! real UDP sockets: entries a worker hands one instance reach the other's workers in that
//! instance's terms; a joining instance's bulk sync gets the entries at risk its peer holds and
//! ends; hostile datagrams install nothing and are counted by reason.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spillway_control::sync::{spawn, Key, SyncSettings, SyncShared};
use spillway_core::addr::Addr;
use spillway_core::counters::WorkerCounters;
use spillway_core::flow::{FlowKey, TupleKind};
use spillway_core::model::{
    Endpoint, Group, Model, Ports, Rule, RuleDest, RuleProtocol, Service, Zone,
};
use spillway_core::peer::{service_identity, LocalEntry, PeerEntry, SyncLink};
use spillway_core::publish::Publisher;
use spillway_core::state::PolicyState;
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

fn publisher() -> Publisher {
    let mut st = PolicyState::new(true);
    st.apply_model(model(), Time::ZERO).unwrap();
    Publisher::new(st.snapshot(Time::ZERO))
}

/// A free UDP port on loopback.
fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Instance {
    link: SyncLink,
    counters: Arc<[WorkerCounters]>,
    shared: Arc<SyncShared>,
    stop: Arc<AtomicBool>,
    _publisher: Publisher,
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn start(id: u32, port: u16, peer: (u32, u16), key: [u8; 32], bulk_timeout: Duration) -> Instance {
    let publisher = publisher();
    let link = SyncLink::new(1024);
    let counters: Arc<[WorkerCounters]> = vec![WorkerCounters::new()].into();
    let stop = Arc::new(AtomicBool::new(false));
    let settings = SyncSettings {
        instance_id: id,
        bind: SocketAddr::from(([127, 0, 0, 1], port)),
        peers: vec![(peer.0, SocketAddr::from(([127, 0, 0, 1], peer.1)))],
        bulk_timeout,
        refresh: Duration::from_secs(60),
    };
    let (_, shared) = spawn(
        settings,
        Key::from_bytes(key),
        vec![link.clone()],
        Arc::clone(&counters),
        publisher.reader(),
        Arc::clone(&stop),
    )
    .unwrap();
    Instance { link, counters, shared, stop, _publisher: publisher }
}

fn entry(i: u16, backend: u8) -> PeerEntry {
    PeerEntry {
        key: FlowKey {
            src: Addr::v4(198, 18, 50, 1),
            dst: Addr::v4(198, 18, 0, 100),
            sport: 20_000 + i,
            dport: 80,
            proto: 6,
            kind: TupleKind::Five as u8,
            service: 0,
        },
        service: service_identity("web"),
        backend: Endpoint { addr: Addr::v4(198, 18, 1, backend), port: 0 },
        idle_ms: 1_000,
        flags: 0,
    }
}

/// Waits for `cond` for at most `within`, polling.
fn eventually(within: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn take(link: &SyncLink, n: usize, within: Duration) -> Vec<LocalEntry> {
    let mut got = Vec::new();
    eventually(within, &format!("{n} entries handed to the worker"), || {
        while let Some(e) = link.inbound.pop() {
            got.push(e);
        }
        got.len() >= n
    });
    got
}

const KEY: [u8; 32] = [7; 32];

#[test]
fn entries_a_worker_hands_over_reach_the_peers_workers_in_its_terms() {
    let (pa, pb) = (free_port(), free_port());
    let a = start(1, pa, (2, pb), KEY, Duration::from_millis(300));
    let b = start(2, pb, (1, pa), KEY, Duration::from_millis(300));
    for i in 0..50 {
        a.link.outbound.push(entry(i, 1 + (i % 4) as u8)).unwrap();
    }
    let got = take(&b.link, 50, Duration::from_secs(5));
    assert_eq!(got.len(), 50);
    for (i, e) in got.iter().enumerate() {
        // The receiver's own service id, the backend's slot there, the peer's mark.
        assert_eq!(e.key.sport, 20_000 + i as u16);
        assert_eq!(e.key.service, 1, "web is service 1 on the receiver");
        assert_eq!(e.value.epoch, spillway_core::decide::SYNCED_EPOCH);
        assert_eq!(e.idle_ms, 1_000);
    }
    assert_eq!(a.shared.stats.entries_sent.load(Ordering::Relaxed), 50);
    assert_eq!(b.shared.stats.entries_received.load(Ordering::Relaxed), 50);
    // An entry for a backend the receiver does not have is refused, not handed over.
    a.link.outbound.push(entry(99, 9)).unwrap();
    eventually(Duration::from_secs(5), "the unknown backend counted", || {
        b.shared.stats.entries_refused.iter().map(|c| c.load(Ordering::Relaxed)).sum::<u64>() == 1
    });
    assert!(b.link.inbound.is_empty());
}

#[test]
fn fs_5_a_joining_instance_gets_its_peers_entries_at_risk_before_it_is_ready() {
    let (pa, pb) = (free_port(), free_port());
    let a = start(1, pa, (2, pb), KEY, Duration::from_secs(5));
    let b = start(2, pb, (1, pa), KEY, Duration::from_secs(10));
    assert!(!b.shared.bulk_done.load(Ordering::Relaxed));
    // `a`'s worker is asked for a bulk scan; it finds 30 entries and finishes its scan.
    eventually(Duration::from_secs(5), "a bulk scan asked of a's worker", || {
        a.link.requests.bulk.load(Ordering::Relaxed) > 0
    });
    for i in 0..30 {
        a.link.outbound.push(entry(i, 2)).unwrap();
    }
    a.counters[0].sync.scans.inc();
    let got = take(&b.link, 30, Duration::from_secs(5));
    assert_eq!(got.len(), 30);
    eventually(Duration::from_secs(5), "b's bulk sync done", || {
        b.shared.bulk_done.load(Ordering::Relaxed)
    });
    assert_eq!(b.shared.status.lock().unwrap().bulk, "done");
    assert_eq!(a.shared.stats.bulk_answers.load(Ordering::Relaxed), 1);
}

#[test]
fn fs_5_with_no_peer_up_the_bulk_sync_ends_at_its_timeout_and_says_so() {
    let (pa, pb) = (free_port(), free_port());
    let b = start(2, pb, (1, pa), KEY, Duration::from_millis(800));
    let t = Instant::now();
    eventually(Duration::from_secs(5), "b's bulk sync over", || {
        b.shared.bulk_done.load(Ordering::Relaxed)
    });
    assert!(t.elapsed() >= Duration::from_millis(700), "{:?}", t.elapsed());
    assert_eq!(b.shared.status.lock().unwrap().bulk, "timed_out");
}

#[test]
fn fs_6_hostile_datagrams_install_nothing_and_are_counted_by_reason() {
    let (pa, pb) = (free_port(), free_port());
    // `a` seals under another key: everything it sends is a forgery to `b`.
    let a = start(1, pa, (2, pb), [9; 32], Duration::from_millis(200));
    let b = start(2, pb, (1, pa), KEY, Duration::from_millis(200));
    for i in 0..40 {
        a.link.outbound.push(entry(i, 1)).unwrap();
    }
    let refused = |r: &str| {
        let i = spillway_control::sync::Refused::ALL.iter().position(|x| x.as_str() == r).unwrap();
        b.shared.stats.refused[i].load(Ordering::Relaxed)
    };
    eventually(Duration::from_secs(5), "forgeries counted", || refused("auth_failed") >= 3);
    // Garbage, a truncated datagram and one from an unknown sender, from a plain socket.
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = SocketAddr::from(([127, 0, 0, 1], pb));
    s.send_to(b"hello", to).unwrap();
    let mut fake = vec![0u8; 100];
    fake[..4].copy_from_slice(b"SPSY");
    fake[4] = 1;
    fake[5] = 1;
    fake[6..10].copy_from_slice(&77u32.to_be_bytes());
    s.send_to(&fake, to).unwrap();
    fake[4] = 9;
    s.send_to(&fake, to).unwrap();
    eventually(Duration::from_secs(5), "each counted by its reason", || {
        refused("truncated") == 1 && refused("unknown_sender") == 1 && refused("wrong_version") == 1
    });
    assert!(b.link.inbound.is_empty(), "nothing handed to the workers");
    assert_eq!(b.shared.stats.entries_received.load(Ordering::Relaxed), 0);
}
