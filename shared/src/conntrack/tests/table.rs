//! The table's own rules: what is stored, found, overwritten, removed and swept, the layout,
//! and the bookkeeping that keeps every entry findable.

use super::*;
use crate::flow::FlowHasher;

#[test]
fn clear_empties_the_table_and_it_fills_again() {
    let h = FlowHasher::default();
    let mut s = Shard::with_capacity(1024);
    for i in 0..900 {
        s.insert(&key(i), h.hash(&key(i)), val(i), Time(1));
    }
    s.clear();
    assert_eq!(s.len(), 0);
    assert!((0..900).all(|i| s.find(&key(i), h.hash(&key(i))).is_none()));
    for i in 1000..1900 {
        s.insert(&key(i), h.hash(&key(i)), val(i), Time(2));
    }
    assert_eq!(s.len(), 900);
    assert_eq!(s.stats().evictions, 0);
    let slot = s.find(&key(1500), h.hash(&key(1500))).expect("stored after the clear");
    assert_eq!(s.get(slot, Time(2)).value, val(1500));
}

#[test]
fn match_mask_sets_exactly_the_ways_with_the_signature() {
    // Signatures chosen to stress the lane arithmetic: 0 (empty), 1, 0x7fff, 0x8000,
    // 0xffff, and values that differ from the wanted one in a single bit.
    let values = [0u16, 1, 2, 0x7fff, 0x8000, 0x8001, 0xfffe, 0xffff, 0x1234, 0x1235, 0x9234];
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut bucket = Head::EMPTY;
    for _ in 0..20_000 {
        for w in 0..WAYS {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            bucket.sig[w] = values[(rng >> 33) as usize % values.len()];
        }
        for &sig in &values {
            let mask = bucket.match_mask(sig);
            for w in 0..WAYS {
                assert_eq!(mask >> w & 1 == 1, bucket.sig[w] == sig, "{:?} {sig:#x}", bucket.sig);
            }
            assert_eq!(mask >> WAYS, 0);
        }
    }
}

#[test]
fn layout_is_68_bytes_per_entry() {
    assert_eq!(size_of::<FlowKey>(), 40);
    assert_eq!(size_of::<Record>(), 64);
    assert_eq!(align_of::<Record>(), 64);
    assert_eq!(std::mem::offset_of!(Record, flags), 48);
    assert_eq!(std::mem::offset_of!(Record, in_secondary), 49);
    assert_eq!(std::mem::offset_of!(Record, other), 52);
    assert_eq!(std::mem::offset_of!(Record, last_seen), 56);
    assert_eq!(size_of::<Head>(), 64);
    assert_eq!(align_of::<Head>(), 64);
    assert_eq!(std::mem::offset_of!(Head, sig), 0);
    assert_eq!(std::mem::offset_of!(Head, overflow), 32);
    assert_eq!(BYTES_PER_ENTRY, 68);
    let s = Shard::with_capacity(1000);
    assert_eq!(s.bucket_count(), 64);
    assert_eq!(s.capacity(), 1024);
    assert_eq!(s.bytes(), 1024 * 68);
}

#[test]
fn capacity_rounds_up() {
    assert_eq!(Shard::with_capacity(0).capacity(), 16);
    assert_eq!(Shard::with_capacity(16).capacity(), 16);
    assert_eq!(Shard::with_capacity(17).capacity(), 32);
    assert_eq!(Shard::with_capacity(33).capacity(), 64);
    assert_eq!(Shard::with_capacity(1_250_000).capacity(), 2 * 1024 * 1024);
}

#[test]
fn ct_6_insert_then_find_returns_value_and_zero_idle() {
    let h = FlowHasher::default();
    let mut s = Shard::with_capacity(64);
    let k = key(1);
    let out = s.insert(&k, h.hash(&k), val(3), Time(1000));
    assert!(out.overwritten.is_none() && out.evicted.is_none());
    let slot = s.find(&k, h.hash(&k)).unwrap();
    assert_eq!(slot, out.slot);
    let e = s.get(slot, Time(1000));
    assert_eq!((e.key, e.value, e.idle_ms), (k, val(3), 0));
    assert_eq!(s.lookup(&k, h.hash(&k), Time(1500)).unwrap().1.idle_ms, 500);
    assert_eq!(s.find(&key(2), h.hash(&key(2))), None);
    assert_eq!(s.len(), 1);
}

#[test]
fn ct_2_insert_on_present_key_overwrites_in_place() {
    let h = FlowHasher::default();
    let mut s = Shard::with_capacity(64);
    let k = key(1);
    let a = s.insert(&k, h.hash(&k), val(3), Time(0));
    let b = s.insert(&k, h.hash(&k), val(4), Time(900));
    assert_eq!(a.slot, b.slot);
    assert!(b.overwritten.is_some());
    assert_eq!(s.get(b.slot, Time(1000)).value, val(4));
    assert_eq!(s.get(b.slot, Time(1000)).idle_ms, 100);
    assert_eq!(s.len(), 1);
    let st = s.stats();
    assert_eq!((st.inserts, st.updates, st.evictions), (1, 1, 0));
}

#[test]
fn ct_8_touch_restarts_idle_clock() {
    let h = FlowHasher::default();
    let mut s = Shard::with_capacity(64);
    let k = key(9);
    let slot = s.insert(&k, h.hash(&k), val(1), Time(10_000)).slot;
    assert_eq!(s.get(slot, Time(610_000)).idle_ms, 600_000);
    s.touch(slot, Time(400_000));
    assert_eq!(s.get(slot, Time(610_000)).idle_ms, 210_000);
}

#[test]
fn ct_12_replace_overwrites_value_and_restarts_clock() {
    let h = FlowHasher::default();
    let mut s = Shard::with_capacity(64);
    let k = key(9);
    let slot = s.insert(&k, h.hash(&k), val(1), Time(0)).slot;
    s.replace(slot, val(2), Time(50));
    let e = s.get(slot, Time(60));
    assert_eq!((e.key, e.value, e.idle_ms), (k, val(2), 10));
}

#[test]
fn secondary_bucket_differs_from_primary() {
    let h = FlowHasher::default();
    for cap in [2 * WAYS, 64, 1 << 12, 1 << 20] {
        let s = Shard::with_capacity(cap);
        for i in 0..1000 {
            let (p, q) = s.candidate_buckets(h.hash(&key(i)));
            assert_eq!(p, h.hash(&key(i)) as usize & (s.bucket_count() - 1));
            assert!(p != q && q < s.bucket_count(), "cap {cap} key {i}: {p} {q}");
        }
        for hash in [0, u64::MAX, 0xffff_ffff, 0xffff_ffff_0000_0000] {
            let (p, q) = s.candidate_buckets(hash);
            assert!(p != q, "cap {cap} hash {hash:#x}");
        }
    }
    // A one-bucket table has a single candidate.
    assert_eq!(Shard::with_capacity(WAYS).candidate_buckets(12345), (0, 0));
}

#[test]
fn full_primary_overflows_to_secondary_and_counts_it() {
    // A constant hash 0: primary bucket 0, secondary bucket 1 (0 ^ 1), one signature.
    let mut s = Shard::with_capacity(64);
    assert_eq!(s.candidate_buckets(0), (0, 1));
    let n = 2 * WAYS as u32;
    let slots: Vec<Slot> =
        (0..n).map(|i| s.insert(&key(i), 0, val(i), Time(u64::from(i))).slot).collect();
    assert!(slots[..WAYS].iter().all(|sl| sl.bucket() == 0));
    assert!(slots[WAYS..].iter().all(|sl| sl.bucket() == 1));
    assert_eq!((s.heads[0].overflow, s.heads[1].overflow), (WAYS as u32, 0));
    for (i, &slot) in slots.iter().enumerate() {
        assert_eq!(s.find(&key(i as u32), 0), Some(slot));
        assert_eq!(s.get(slot, Time(40)).value, val(i as u32));
    }
    // Freeing a way of the primary does not move anything; the next key takes it.
    let (a, b) = (3, WAYS + 4);
    s.remove(slots[a]);
    s.remove(slots[b]);
    assert_eq!(s.heads[0].overflow, WAYS as u32 - 1);
    assert_eq!(s.insert(&key(a as u32), 0, val(3), Time(50)).slot, slots[a]);
    assert_eq!(s.insert(&key(b as u32), 0, val(12), Time(50)).slot, slots[b]);
    assert_eq!(s.heads[0].overflow, WAYS as u32);
    // Overwriting a key in its secondary stays in place and does not count it twice.
    let out = s.insert(&key(WAYS as u32 + 1), 0, val(99), Time(60));
    assert!(out.overwritten.is_some() && out.slot == slots[WAYS + 1]);
    assert_eq!(s.heads[0].overflow, WAYS as u32);
    // A sweep of everything brings the counters back to zero.
    assert_eq!(s.sweep(s.bucket_count(), Time(70), |_| true), 2 * WAYS);
    assert_eq!((s.heads[0].overflow, s.len()), (0, 0));
}

#[test]
fn sweep_lines_name_the_records_the_next_sweep_reads_and_the_header_after_it() {
    // Eight buckets; hash 0 has primary 0, hash 1 primary 1.
    let mut s = Shard::with_capacity(8 * WAYS);
    for i in 0..3 {
        s.insert(&key(i), 0, val(i), Time(0));
    }
    s.insert(&key(10), 1, val(10), Time(0));
    let named = |s: &Shard| {
        let mut lines = Vec::new();
        s.sweep_lines(|p| lines.push(p));
        lines
    };
    // Cursor at bucket 0: the next bucket's header, then bucket 0's three records.
    let want: Vec<*const u8> =
        [s.head_line(1), s.record_line(0, 0), s.record_line(0, 1), s.record_line(0, 2)].into();
    assert_eq!(named(&s), want);
    // The sweep of bucket 0 removes way 1: the sweep after it reads bucket 1's one record.
    assert_eq!(s.sweep(1, Time(10), |e| e.key == key(1)), 1);
    assert_eq!(s.sweep_cursor(), 1);
    assert_eq!(named(&s), [s.head_line(2), s.record_line(1, 0)]);
    // An empty bucket: only the header after it. The cursor wraps at the table's end.
    s.sweep(1, Time(10), |_| false);
    assert_eq!(named(&s), [s.head_line(3)]);
    s.sweep(5, Time(10), |_| false);
    assert_eq!(s.sweep_cursor(), 7);
    assert_eq!(named(&s), [s.head_line(0)]);
    // A one-bucket table stays in cache: nothing.
    let mut one = Shard::with_capacity(8);
    one.insert(&key(0), 0, val(0), Time(0));
    assert!(named(&one).is_empty());
}

#[test]
fn overflow_counters_stay_exact_under_churn() {
    let h = FlowHasher::default();
    // Adversarial hashes: 2 primary bits, 2 secondary bits, 1 signature bit; and the real one.
    type HashFn = Box<dyn Fn(&FlowKey) -> u64>;
    let modes: [HashFn; 3] = [
        Box::new(move |k| h.hash(k) & 0x0001_0003_0000_0003),
        Box::new(move |k| h.hash(k) & 0x0000_0001_0000_0001),
        Box::new(move |k| h.hash(k)),
    ];
    for hash in modes {
        let mut s = Shard::with_capacity(64);
        let mut rng = 0x1234_5678_9abc_def0u64;
        for t in 0..4000u64 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let k = key((rng % 120) as u32);
            let now = Time(t);
            match (rng >> 32) % 10 {
                0..=5 => {
                    // A move planned for this key or another, maybe long before that
                    // key's insert: one that no longer holds must not be taken.
                    let planned = key(((rng >> 24) % 120) as u32);
                    run(&mut s, &mut [Req::insert(hash(&planned))], 0);
                    s.insert(&k, hash(&k), val(1), now);
                }
                6 | 7 => {
                    if let Some(slot) = s.find(&k, hash(&k)) {
                        s.remove(slot);
                    }
                }
                8 => {
                    let r = (rng >> 40) % 3;
                    s.sweep(((rng >> 48) % 5) as usize, now, |e| {
                        u64::from(e.key.src.0[15]) % 3 == r
                    });
                }
                _ => {
                    if let Some(slot) = s.find(&k, hash(&k)) {
                        s.touch(slot, now);
                    }
                }
            }
            check_bookkeeping(&s, &hash);
            assert!(s.len() <= s.capacity());
            assert_eq!(s.iter(now).count(), s.len(), "no entry lost or counted twice");
        }
    }
}

#[test]
fn remove_empty_way_is_a_no_op() {
    let mut s = Shard::with_capacity(8);
    let slot = s.insert(&key(1), 5, val(1), Time(0)).slot;
    s.remove(slot);
    s.remove(slot);
    assert_eq!((s.len(), s.stats().removals), (0, 1));
    assert_eq!(s.find(&key(1), 5), None);
}

#[test]
fn zero_key_is_found_only_when_inserted() {
    // Empty ways hold an all-zero record; the signature, never 0, keeps them from matching.
    let mut s = Shard::with_capacity(8);
    let zero = FlowKey::default();
    for hash in [0, 1, u64::MAX, 1 << 48] {
        assert_eq!(s.find(&zero, hash), None);
    }
    let slot = s.insert(&zero, 0, val(1), Time(0)).slot;
    assert_eq!(s.find(&zero, 0), Some(slot));
}

#[test]
fn debug_does_not_dump_the_table() {
    let s = Shard::with_capacity(1 << 16);
    let d = format!("{s:?}");
    assert!(d.len() < 400, "{d}");
    assert!(d.contains("buckets: 4096"));
}

/// The table's hash spreads keys that differ in one field only (sequential clients,
/// source ports, services, IPv4 and IPv6) evenly over the buckets and the signatures:
/// Pearson's chi-square over 4,096 cells with 100 keys per cell on average stays within
/// what a uniform hash gives (mean 4,095, standard deviation about 90).
#[test]
fn key_hash_spreads_keys_that_differ_in_one_field() {
    const CELLS: usize = 4096;
    let n = CELLS * 100;
    let base = key(7);
    type Vary = fn(FlowKey, u32) -> FlowKey;
    let vary: [(&str, Vary); 6] = [
        ("client", |k, i| FlowKey { src: Addr::from_v4_bytes(i.to_be_bytes()), ..k }),
        ("port", |k, i| FlowKey {
            sport: i as u16,
            dst: Addr::v4(192, 0, 2, (i >> 16) as u8),
            ..k
        }),
        ("service", |k, i| FlowKey { service: i as u16, sport: (i >> 16) as u16, ..k }),
        ("server", |k, i| FlowKey { dst: Addr::from_v4_bytes(i.to_be_bytes()), ..k }),
        ("ipv6 client", |k, i| {
            let mut a = [0u8; 16];
            a[0] = 0xfd;
            a[8..12].copy_from_slice(&i.to_be_bytes());
            FlowKey { src: Addr(a), ..k }
        }),
        ("one-tuple", |_, i| FlowKey {
            src: Addr::from_v4_bytes(i.to_be_bytes()),
            kind: 1,
            ..FlowKey::default()
        }),
    ];
    for (what, f) in vary {
        let mut buckets = vec![0u32; CELLS];
        let mut sigs = vec![0u32; CELLS];
        for i in 0..n as u32 {
            let h = key_hash(&f(base, i));
            buckets[h as usize % CELLS] += 1;
            sigs[(h >> 52) as usize] += 1;
        }
        for (cells, name) in [(&buckets, "bucket"), (&sigs, "signature")] {
            let mean = (n / CELLS) as f64;
            let chi2: f64 = cells.iter().map(|&c| (f64::from(c) - mean).powi(2) / mean).sum();
            assert!((3600.0..4600.0).contains(&chi2), "{what}: {name} chi-square {chi2:.0}");
        }
    }
}
