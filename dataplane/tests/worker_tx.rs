//! A load-balancing worker's transmit on real DPDK ports (EAL on ordinary memory, two
//! `net_ring` devices: the worker receives on the first and transmits on the second, whose
//! receive side this test reads): whichever way a burst's packets reach the driver (a full
//! burst whose every packet is to be sent, with nothing buffered, is handed over as it is; any
//! other goes through the TX buffer, which sends when full or when drained), every packet to
//! send leaves once, in arrival order, encapsulated, and is counted; a dropped one never
//! leaves; a packet whose next hop is not resolved waits for it and leaves when it is, or is
//! dropped when it waited in vain. One test function: EAL starts once per process.

#[path = "../../benches/fixture.rs"]
mod fixture;

use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use crossbeam::queue::ArrayQueue;
use fixture::{model, service, snapshot, tcp_frame};
use spillway_core::addr::Addr;
use spillway_core::conntrack::Shard;
use spillway_core::counters::{PathDrop, Reason, WorkerCounters};
use spillway_core::mailbox::Mailbox;
use spillway_core::model::{Encap, RuleProtocol};
use spillway_core::publish::Publisher;
use spillway_dataplane::neighbour::{NeighbourTable, NextHopCache};
use spillway_dataplane::worker::{Balancer, CounterValues, PortQueues, Worker, WorkerParams};
use spillway_dpdk::{Eal, MbufBurst, Mempool, Port, PortSetup, RxQueue, MAX_BURST};

const BACKENDS: u8 = 4;

fn backend(i: u8) -> Addr {
    Addr::v4(198, 18, 1, i)
}

/// The MAC the neighbour table gives backend `i`.
fn backend_mac(i: u8) -> [u8; 6] {
    [2, 0, 0, 0, 1, i]
}

/// A SYN to the IPIP VIP from 198.18.10.1:`sport` (a new connection, sent to a backend).
fn syn(sport: u16) -> Vec<u8> {
    tcp_frame([198, 18, 10, 1], sport, 0x02)
}

/// A burst of `frames`, each written into an mbuf of `pool`.
fn burst_of<'p>(pool: &Mempool<'p>, frames: &[Vec<u8>]) -> MbufBurst<'p> {
    let mut burst = MbufBurst::new();
    assert!(pool.alloc_bulk(&mut burst, frames.len()), "mbufs");
    for (m, f) in burst.iter_mut().zip(frames) {
        let len = u16::try_from(f.len()).expect("frame length");
        m.reset(len).expect("room").copy_from_slice(f);
    }
    burst
}

/// Every frame waiting on `rx`, as bytes.
fn received(rx: &mut RxQueue<'_>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut burst = MbufBurst::new();
    while rx.rx_burst_into(&mut burst, MAX_BURST as u16) > 0 {
        out.extend(burst.drain().map(|m| m.data().to_vec()));
    }
    out
}

/// Checks that `sent` are the IPIP encapsulations of `frames`, in order: the outer Ethernet
/// header to one of the backends' MACs from the node's, the outer IPv4 header from the node to
/// that backend with protocol 4, and the inner IPv4 packet unchanged (the 64-byte frames.
/// Ethernet padding is not part of it).
fn assert_encapsulated(sent: &[Vec<u8>], frames: &[&Vec<u8>], what: &str) {
    assert_eq!(sent.len(), frames.len(), "{what}: frames sent");
    for (k, (out, frame)) in sent.iter().zip(frames).enumerate() {
        // The inner packet: the frame's IPv4 packet, without the Ethernet padding.
        let inner = &frame[14..14 + usize::from(u16::from_be_bytes([frame[16], frame[17]]))];
        assert_eq!(out.len(), 14 + 20 + inner.len(), "{what}: frame {k}'s length");
        let i = out[33];
        assert!((1..=BACKENDS).contains(&i), "{what}: frame {k} to {:?}", &out[30..34]);
        assert_eq!(&out[..6], &backend_mac(i), "{what}: frame {k}'s next hop");
        assert_eq!(&out[6..12], &fixture::NODE_MAC, "{what}: frame {k}'s source MAC");
        assert_eq!(&out[12..14], &[0x08, 0x00], "{what}: frame {k}'s ethertype");
        assert_eq!(out[14 + 9], 4, "{what}: frame {k}: IPIP");
        assert_eq!(&out[26..30], &[198, 18, 0, 2], "{what}: frame {k}'s outer source");
        assert_eq!(&out[30..33], &[198, 18, 1], "{what}: frame {k}'s outer destination");
        assert_eq!(&out[34..], inner, "{what}: frame {k}'s inner packet, in order");
    }
}

/// EAL's runtime directory for the test's file prefix, removed on drop (declared before EAL,
/// so dropped after it).
struct RuntimeDir(String);

impl Drop for RuntimeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn every_packet_to_send_leaves_once_in_order_whichever_way_it_reaches_the_driver() {
    let prefix = format!("spw-worker-tx-{}", std::process::id());
    let _runtime = RuntimeDir(format!("/var/run/dpdk/{prefix}"));
    let eal = Eal::init(&[
        "--no-huge",
        "-m",
        "256",
        "--no-pci",
        "--file-prefix",
        &prefix,
        "--vdev",
        "net_ring0",
        "--vdev",
        "net_ring1",
        "--log-level",
        "lib.eal:error",
        "--no-telemetry",
    ])
    .expect("EAL init on ordinary memory (run as root)");
    let pool = Mempool::create(&eal, "worker-tx", 2047, 0).expect("mempool");
    let setup =
        PortSetup { rx_queues: 1, tx_queues: 1, extra_tx_queues: 0, rx_desc: 512, tx_desc: 512 };
    let ring0 = Port::open(&eal, "net_ring0", setup, &pool).expect("net_ring0");
    let ring1 = Port::open(&eal, "net_ring1", setup, &pool).expect("net_ring1");
    let (mut ring0_rx, _ring0_tx) = ring0.take_queues().expect("queues");
    let (mut ring1_rx, mut ring1_tx) = ring1.take_queues().expect("queues");
    let mut out_rx = ring1_rx.remove(0);

    let snap = snapshot(model(
        "",
        [service(
            "ipip",
            Encap::Ipip,
            RuleProtocol::L3Default,
            &["198.18.0.100"],
            "g",
            (1..=BACKENDS).map(backend),
        )],
    ));
    let publisher = Publisher::new(snap);
    let all_resolved =
        || NeighbourTable::from_pairs((1..=BACKENDS).map(|i| (backend(i), backend_mac(i))));
    let cell = Arc::new(ArcSwap::from_pointee(all_resolved()));
    let balancer = Balancer {
        mailbox: Mailbox::default(),
        outbox: None,
        snapshots: publisher.reader(),
        neighbours: arc_swap::Cache::new(Arc::clone(&cell)),
        next_hops: NextHopCache::new(),
        events: Arc::new(ArrayQueue::new(64)),
        shard: Shard::with_capacity(4096),
        node: fixture::node(false),
        origin: Instant::now(),
        kernel: None,
        sync: None,
        waiting: spillway_dataplane::unresolved::WaitQueue::new(),
        tap: Default::default(),
    };
    let counters = WorkerCounters::default();
    // No drain deadline is reached: the test drains when it says so.
    let params = WorkerParams {
        burst_size: MAX_BURST as u16,
        drain_ticks: u64::MAX,
        tsc_hz: eal.tsc_hz(),
        idle_sleep_us: 0,
    };
    let queues = PortQueues { rx: ring0_rx.remove(0), tx: ring1_tx.remove(0) };
    let mut worker =
        Worker::new(0, eal.main_lcore(), vec![queues], params, &counters, Some(balancer));
    let mut sport = 1000u16;
    let mut syns = |n: usize| -> Vec<Vec<u8>> {
        (0..n)
            .map(|_| {
                sport += 1;
                syn(sport)
            })
            .collect()
    };

    // A full burst, every packet to send, nothing buffered: all of it leaves at once.
    let a = syns(MAX_BURST);
    let mut burst = burst_of(&pool, &a);
    worker.process(0, &mut burst);
    assert!(burst.is_empty(), "the worker leaves the burst empty");
    assert_encapsulated(&received(&mut out_rx), &a.iter().collect::<Vec<_>>(), "full burst");
    assert_eq!(
        CounterValues::read(&counters),
        CounterValues { rx: 64, tx: 64, dropped: 0 },
        "full burst"
    );

    // A full burst with one packet to drop (a unicast frame for another host): the other 63
    // go through the buffer, which holds them until it is drained; the dropped one never
    // leaves.
    let mut b = syns(MAX_BURST);
    b[10][5] = 0x99;
    let mut burst = burst_of(&pool, &b);
    worker.process(0, &mut burst);
    assert!(received(&mut out_rx).is_empty(), "63 packets wait in the buffer for the drain");
    worker.drain();
    let kept: Vec<_> = b.iter().enumerate().filter(|(k, _)| *k != 10).map(|(_, f)| f).collect();
    assert_encapsulated(&received(&mut out_rx), &kept, "a burst with a drop");
    assert_eq!(counters.reason(Reason::Path(PathDrop::NotForUs)).get(), 1);
    assert_eq!(
        CounterValues::read(&counters),
        CounterValues { rx: 128, tx: 127, dropped: 1 },
        "a burst with a drop"
    );

    // Ten packets buffered, then a full burst to send: the buffer keeps arrival order. It sends
    // when it fills (the ten, then the burst's first 54) and holds the last ten until drained.
    let c = syns(10);
    let d = syns(MAX_BURST);
    let mut burst = burst_of(&pool, &c);
    worker.process(0, &mut burst);
    assert!(received(&mut out_rx).is_empty(), "ten packets wait in the buffer");
    let mut burst = burst_of(&pool, &d);
    worker.process(0, &mut burst);
    let first: Vec<_> = c.iter().chain(&d[..54]).collect();
    assert_encapsulated(&received(&mut out_rx), &first, "behind a buffered remainder");
    worker.drain();
    assert_encapsulated(&received(&mut out_rx), &d[54..].iter().collect::<Vec<_>>(), "the rest");
    assert_eq!(
        CounterValues::read(&counters),
        CounterValues { rx: 202, tx: 201, dropped: 1 },
        "in all"
    );

    // No backend resolved (the first packets after a start, or to backends a reload added):
    // the frames wait, none is dropped; once the table has their next hops they leave, in
    // order, with the MACs written.
    cell.store(Arc::new(NeighbourTable::default().with_generation(1)));
    let e = syns(12);
    let mut burst = burst_of(&pool, &e);
    worker.process(0, &mut burst);
    worker.drain();
    worker.release_waiting(spillway_dpdk::tsc());
    assert!(received(&mut out_rx).is_empty(), "the frames wait for their next hops");
    assert_eq!(counters.neighbour_waited.get(), 0);
    assert_eq!(counters.reason(Reason::Path(PathDrop::NeighbourUnresolved)).get(), 0);
    cell.store(Arc::new(all_resolved().with_generation(2)));
    worker.release_waiting(spillway_dpdk::tsc());
    worker.drain();
    assert_encapsulated(&received(&mut out_rx), &e.iter().collect::<Vec<_>>(), "waited");
    assert_eq!(counters.neighbour_waited.get(), 12);
    assert_eq!(
        CounterValues::read(&counters),
        CounterValues { rx: 214, tx: 213, dropped: 1 },
        "the waiting frames sent"
    );

    // A next hop that never answers: its frames are dropped when their time is up, counted.
    cell.store(Arc::new(NeighbourTable::default().with_generation(3)));
    let mut burst = burst_of(&pool, &syns(2));
    worker.process(0, &mut burst);
    worker.release_waiting(spillway_dpdk::tsc());
    assert_eq!(counters.reason(Reason::Path(PathDrop::NeighbourUnresolved)).get(), 0);
    worker.release_waiting(u64::MAX);
    worker.drain();
    assert!(received(&mut out_rx).is_empty(), "nothing leaves without a MAC");
    assert_eq!(counters.reason(Reason::Path(PathDrop::NeighbourUnresolved)).get(), 2);
    assert_eq!(counters.neighbour_waited.get(), 12);
}
