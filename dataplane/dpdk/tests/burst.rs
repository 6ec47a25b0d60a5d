//! Bursts on real mbufs (EAL on ordinary memory, no device): draining a burst hands each mbuf
//! out once, frees the ones not taken, and leaves the burst empty and reusable. One test
//! function: EAL starts once per process.

mod common;

use spillway_dpdk::{MbufBurst, Mempool};

#[test]
fn drain_hands_out_each_mbuf_once_frees_the_rest_and_leaves_the_burst_reusable() {
    let (eal, prefix) = common::eal("burst-test");
    // No per-lcore cache, so that `in_use` counts exactly what this test holds.
    let pool = Mempool::create(&eal, "burst-test", 255, 0).expect("mempool");
    let mut burst = MbufBurst::new();
    assert!(pool.alloc_bulk(&mut burst, 8));
    assert_eq!((burst.len(), pool.in_use()), (8, 8));
    let addrs: Vec<usize> = burst.iter().map(|m| m.data().as_ptr() as usize).collect();

    // Take three, drop the iterator: the other five go back to the pool.
    let taken: Vec<_> = burst.drain().take(3).collect();
    assert!(burst.is_empty());
    assert_eq!(pool.in_use(), 3, "the five not taken are freed");
    let taken_addrs: Vec<usize> = taken.iter().map(|m| m.data().as_ptr() as usize).collect();
    assert_eq!(taken_addrs, addrs[..3], "handed out in order, each once");
    drop(taken);
    assert_eq!(pool.in_use(), 0);

    // The same burst fills again; a full drain hands out all of them and frees nothing.
    assert!(pool.alloc_bulk(&mut burst, 32));
    let all: Vec<_> = burst.drain().collect();
    assert_eq!((all.len(), burst.len(), pool.in_use()), (32, 0, 32));
    drop(all);
    assert_eq!(pool.in_use(), 0);

    // A leaked drain leaks its mbufs (never a double free); the burst stays empty.
    assert!(pool.alloc_bulk(&mut burst, 4));
    std::mem::forget(burst.drain());
    assert!(burst.is_empty());
    drop(burst);
    assert_eq!(pool.in_use(), 4);

    drop(eal);
    common::remove_runtime_dir(&prefix);
}
