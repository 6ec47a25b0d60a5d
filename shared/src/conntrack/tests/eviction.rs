//! Making room in two full buckets: the eviction's choice, the flood guard that refuses
//! instead, and how rarely a filling table evicts.

use super::*;

#[test]
fn both_full_buckets_evict_the_least_recently_seen_of_the_primary() {
    // A constant hash puts every key in buckets 0 and 1 with the same signature.
    let mut s = Shard::with_capacity(4 * WAYS);
    assert_eq!(s.candidate_buckets(0), (0, 1));
    let n = 2 * WAYS as u32;
    for i in 0..n {
        s.insert(&key(i), 0, val(i), Time(u64::from(i) * 1000));
    }
    s.touch(s.find(&key(0), 0).unwrap(), Time(40_000)); // key 1 is now the oldest (bucket 0)
    let out = s.insert(&key(100), 0, val(100), Time(41_000));
    let ev = out.evicted.unwrap();
    assert_eq!((ev.key, ev.idle_ms), (key(1), 40_000));
    assert_eq!(out.slot.bucket(), 0);
    assert_eq!(s.find(&key(1), 0), None);
    // Bucket 0's keys touched but key 0: key 0 is the primary's oldest, though the
    // secondary's keys (in bucket 1 since 16-31 s) were seen longer ago. The eviction
    // reads the primary's records alone, and the new entry takes the way there.
    for i in 2..WAYS as u32 {
        s.touch(s.find(&key(i), 0).unwrap(), Time(50_000));
    }
    let out = s.insert(&key(101), 0, val(101), Time(51_000));
    let ev = out.evicted.unwrap();
    assert_eq!((ev.key, ev.idle_ms), (key(0), 11_000));
    assert_eq!(out.slot.bucket(), 0);
    assert_eq!(s.heads[0].overflow, WAYS as u32);
    assert!((2..n).chain([100, 101]).all(|i| s.find(&key(i), 0).is_some()));
    assert_eq!(s.stats().evictions, 2);
    assert_eq!(s.len(), 2 * WAYS);
}

#[test]
fn oldest_way_counts_ages_across_the_wrap_of_coarse_time() {
    let mut head = Head::EMPTY;
    head.seen = [5; WAYS];
    assert_eq!(head.oldest_way(6), 0, "all as old: the lowest way");
    // 250 is 12 units before 6 (wrapping at 256), 5 is one: ways 3 and 9 are the oldest.
    head.seen[9] = 250;
    head.seen[3] = 250;
    assert_eq!(head.oldest_way(6), 3);
    // 200 is 62 units before 6: older still, whatever its place.
    head.seen[15] = 200;
    assert_eq!(head.oldest_way(6), 15);
    // At 210, 200 is ten units old, 5 is 205 and 250 is 216: ways 3 and 9, again.
    assert_eq!(head.oldest_way(210), 3);
}

#[test]
fn the_eviction_passes_over_entries_seen_since_their_header_was_written() {
    // From 0, and from 10 s before the millisecond stamps wrap at 2^32.
    for base in [0, (1 << 32) - 10_000] {
        evictions_in_last_seen_order(|units| Time(base + units * SEEN_UNIT_MS));
    }
}

fn evictions_in_last_seen_order(at: impl Fn(u64) -> Time) {
    // One bucket; key i in way i, made at i units.
    let mut s = Shard::with_capacity(WAYS);
    for i in 0..WAYS as u32 {
        s.insert(&key(i), 0, val(i), at(u64::from(i)));
    }
    // Keys 0-4 seen again at 20-24 units: their headers still say 0-4 (a hit writes the
    // record alone).
    for i in 0..5u32 {
        s.touch(s.find(&key(i), 0).unwrap(), at(20 + u64::from(i)));
    }
    // The evictions take the entries in the order they were last seen: keys 5-15, then
    // 0-4, then the first new ones.
    let mut order = Vec::new();
    for n in 0..20u32 {
        let out = s.insert(&key(100 + n), 0, val(n), at(30 + u64::from(n)));
        order.push(out.evicted.expect("full").key);
    }
    let want: Vec<FlowKey> = (5..16).chain(0..5).chain(100..104).map(key).collect();
    assert_eq!(order, want);
    assert_eq!(s.stats().evictions, 20);
}

#[test]
fn entries_seen_in_the_same_unit_are_equally_old_to_the_eviction() {
    let mut s = Shard::with_capacity(WAYS);
    // Keys 0-15 made at 1,000-1,015 ms, all in the coarse unit 0-1,023 ms: to the
    // eviction they are equally old, and the lowest way, key 0, goes first.
    for i in 0..WAYS as u32 {
        s.insert(&key(i), 0, val(i), Time(1000 + u64::from(i)));
    }
    let out = s.insert(&key(100), 0, val(100), Time(5_000));
    assert_eq!(out.evicted.map(|e| e.key), Some(key(0)));
    // Key 1 seen again 20 ms later, in the same unit: no younger to the eviction.
    s.touch(s.find(&key(1), 0).unwrap(), Time(1_020));
    let out = s.insert(&key(101), 0, val(101), Time(5_000));
    assert_eq!(out.evicted.map(|e| e.key), Some(key(1)));
    // Key 2 seen in the next unit (1,024-2,047 ms): passed over.
    s.touch(s.find(&key(2), 0).unwrap(), Time(1_100));
    let out = s.insert(&key(102), 0, val(102), Time(5_000));
    assert_eq!(out.evicted.map(|e| e.key), Some(key(3)));
}

#[test]
fn the_sweep_keeps_a_long_idle_entry_the_oldest_to_the_eviction() {
    // Coarse times wrap every 256 units (about 4.4 minutes): an entry idle longer would
    // look recent to its header. The sweep, every 10 s in the worker, writes such headers
    // as "at least SEEN_CAP units old" instead.
    let run = |sweep: bool| {
        let mut s = Shard::with_capacity(WAYS);
        let minute = 60_000;
        // Key 0 made at 0 and never seen again; keys 1-15 made a minute before the end.
        s.insert(&key(0), 0, val(0), Time(0));
        let end = 5 * minute;
        let mut t = 0;
        while t < end {
            t += 10_000;
            if t == end - minute {
                for i in 1..WAYS as u32 {
                    s.insert(&key(i), 0, val(i), Time(t));
                }
            }
            if sweep {
                s.sweep(1, Time(t), |_| false);
            }
        }
        s.insert(&key(100), 0, val(100), Time(end)).evicted.expect("full").key
    };
    assert_eq!(run(true), key(0), "idle 5 minutes, the oldest");
    // (Without the sweep, key 0's header has wrapped round to look about 38 s old, and a
    // key made a minute ago goes instead: why the worker sweeps.)
    assert_ne!(run(false), key(0));
}

#[test]
fn flood_guard_refuses_rather_than_evicts_when_both_candidate_buckets_are_full() {
    let mut s = Shard::with_capacity(4 * WAYS); // 4 buckets
    s.set_flood_guard(Some(1_000_000));
    // Every key has primary 0 and secondary 1: the two buckets fill, the others stay empty.
    let hashes = hashes_with_candidates(&s, 0, (0, 1));
    let n = 2 * WAYS as u32;
    let hash = |i: u32| hashes[i.min(n) as usize];
    for i in 0..n {
        let out = s.insert_new(&key(i), hash(i), val(i), Time(u64::from(i)));
        assert!(out.is_some_and(|o| o.evicted.is_none()), "key {i} fits");
    }
    assert_eq!(s.len(), 2 * WAYS, "half of the table is free, but not in these two buckets");
    assert!(s.insert_new(&key(99), hash(99), val(99), Time(100)).is_none());
    assert_eq!(s.stats().bypassed, 1);
    assert_eq!(s.stats().evictions, 0);
    for i in 0..n {
        assert_eq!(s.lookup(&key(i), hash(i), Time(100)).map(|(_, e)| e.value), Some(val(i)));
    }
    // Without the guard the same insert evicts the least recently seen entry (key 0).
    s.set_flood_guard(None);
    let out = s.insert_new(&key(99), hash(99), val(99), Time(100)).expect("inserted");
    assert_eq!(out.evicted.map(|e| e.key), Some(key(0)));
}

#[test]
fn one_bucket_table_evicts_within_its_only_bucket() {
    let mut s = Shard::with_capacity(WAYS);
    assert_eq!(s.bucket_count(), 1);
    let n = WAYS as u32;
    for i in 0..n {
        s.insert(&key(i), 0, val(i), Time(u64::from(i) * 1000));
    }
    s.touch(s.find(&key(0), 0).unwrap(), Time(20_000)); // key 1 is now the oldest
    let out = s.insert(&key(100), 0, val(100), Time(21_000));
    let ev = out.evicted.unwrap();
    assert_eq!((ev.key, ev.idle_ms), (key(1), 20_000));
    assert_eq!(s.find(&key(1), 0), None);
    assert!((0..n).filter(|&i| i != 1).all(|i| s.find(&key(i), 0).is_some()));
    assert_eq!((s.stats().evictions, s.len(), s.heads[0].overflow), (1, WAYS, 0));
}

/// Sizing guidance for the module doc: the share of inserted keys that evict an entry
/// when a table is filled to a given load with uniformly hashed keys, and the share of
/// buckets whose `overflow` is non-zero (the share of misses that read a second line).
///
/// Measured (16K entries, these keys, the default hash seed), evicted share of inserts /
/// share of buckets with a non-zero `overflow`:
///
/// Columns: one choice (before); 8 ways, primary then secondary then evict; 8 ways, one
/// move of the two buckets' 16; 16 ways, one move of the primary's 16 (this code).
///
/// | load | one choice | 8 ways | 8 ways, one move | 16 ways, one move |
/// |------|------|------|------|------|
/// | 50%  | 0.79% | 0.012% | 0      / 1.9% | 0      / 0.1%  |
/// | 75%  | 5.09% | 0.95%  | 0      / 18%  | 0      / 10%   |
/// | 90%  | 9.92% | 3.87%  | 0.014% / 40%  | 0      / 36.5% |
/// | 95%  |       | 5.62%  | 0.19%  / 51%  | 0.032% / 52%   |
/// | 100% |       | 7.67%  | 1.56%  / 64%  | 0.81%  / 68%   |
///
/// The bounds leave a margin of 10× or more over the figures of this code.
#[test]
fn eviction_rate_by_load() {
    let cap = 1 << 14;
    let bounds = [(0.25, 0.0), (0.5, 0.0), (0.75, 0.0), (0.9, 0.0005), (0.95, 0.0032), (1.0, 0.08)];
    for (load, max_rate) in bounds {
        let mut s = Shard::with_capacity(cap);
        let n = (cap as f64 * load) as u32;
        for i in 0..n {
            s.insert(&key(i), key_hash(&key(i)), val(i), Time(u64::from(i)));
        }
        let rate = s.stats().evictions as f64 / f64::from(n);
        let overflowed = s.heads.iter().filter(|b| b.overflow != 0).count();
        println!(
            "load {load}: {:.3}% of inserts evicted, {:.1}% of buckets overflowed",
            rate * 100.0,
            overflowed as f64 * 100.0 / s.bucket_count() as f64
        );
        assert!(rate <= max_rate, "load {load}: eviction rate {rate}");
    }
}
