//! `Mempool::alloc_bulk` on real mbufs (EAL on ordinary memory, no device): every mbuf it
//! hands out is fresh whatever its last user left in it (one segment, no data, the default
//! headroom), as `rte_pktmbuf_alloc_bulk` makes it; and it is all or nothing. One test
//! function: EAL starts once per process.

mod common;

use spillway_dpdk::{MbufBurst, Mempool};

#[test]
fn alloc_bulk_hands_out_reset_mbufs_all_or_nothing() {
    let (eal, prefix) = common::eal("alloc-test");
    // No per-lcore cache: `in_use` counts exactly what this test holds, and a freed mbuf is
    // handed out again by the next allocation (the pool's ring is a stack here).
    let pool = Mempool::create(&eal, "alloc-test", 63, 0).expect("mempool");
    let mut burst = MbufBurst::new();
    assert!(pool.alloc_bulk(&mut burst, 16));
    let fresh: Vec<(usize, usize, usize, u16)> =
        burst.iter().map(|m| (m.headroom(), m.data_len(), m.pkt_len(), m.segments())).collect();
    let headroom = fresh[0].0;
    assert!(headroom > 0, "a default headroom");
    assert!(fresh.iter().all(|&f| f == (headroom, 0, 0, 1)), "{fresh:?}");

    // Leave every mbuf as a user would: data appended, the front moved, the frame trimmed.
    for m in burst.iter_mut() {
        m.append(200).expect("room for 200 bytes").fill(0xab);
        m.prepend(20).expect("headroom for 20 bytes");
        m.adj(3).expect("3 bytes off the front");
        m.trim(7).expect("7 bytes off the end");
        assert_eq!((m.headroom(), m.data_len()), (headroom - 17, 210));
    }
    // Each mbuf's buffer: where its data starts, less its headroom.
    let buffer = |m: &spillway_dpdk::Mbuf<'_>| m.data().as_ptr() as usize - m.headroom();
    let used: Vec<usize> = burst.iter().map(buffer).collect();
    drop(burst);
    assert_eq!(pool.in_use(), 0);

    // Every mbuf of the pool (the 16 used among them): each reset, not as it was left.
    let mut all = MbufBurst::new();
    assert!(pool.alloc_bulk(&mut all, 63));
    assert_eq!((all.len(), pool.in_use()), (63, 63));
    let buffers: Vec<usize> = all.iter().map(buffer).collect();
    assert!(used.iter().all(|u| buffers.contains(u)), "the 16 used mbufs are among them");
    for m in all.iter() {
        assert_eq!((m.headroom(), m.data_len(), m.pkt_len(), m.segments()), (headroom, 0, 0, 1));
    }

    // All or nothing: with the pool empty, or 10 left and 11 asked for, none is taken and the
    // burst is left as it was.
    let mut more = MbufBurst::new();
    assert!(!pool.alloc_bulk(&mut more, 1));
    assert_eq!((more.len(), pool.in_use()), (0, 63));
    drop(all);
    assert_eq!(pool.in_use(), 0);
    let mut held = MbufBurst::new();
    assert!(pool.alloc_bulk(&mut held, 53));
    assert!(!pool.alloc_bulk(&mut more, 11), "10 left: 11 refused");
    assert_eq!((more.len(), pool.in_use()), (0, 53), "nothing taken");
    assert!(pool.alloc_bulk(&mut more, 10));
    assert_eq!((more.len(), pool.in_use()), (10, 63));
    drop((held, more));
    assert_eq!(pool.in_use(), 0);

    drop(eal);
    common::remove_runtime_dir(&prefix);
}
