//! The staged pipeline ([`crate::conntrack::burst`]), through its API: what each stage asks to
//! have in cache (as sets of lines, where the order is not the behaviour), the hints it gives,
//! and the moves it plans for the inserts that follow.

use super::*;
use crate::conntrack::room::EVICT_TREND_MAX;
use crate::flow::FlowHasher;
use Named::{Head, Rec};

/// The primary bucket and home way of `hash` in `s`, from the layout the module doc states
/// (the low bits; bits 32..36).
fn home_of(s: &Shard, hash: u64) -> (usize, usize) {
    (hash as usize & (s.bucket_count() - 1), (hash >> 32) as usize & (WAYS - 1))
}

#[test]
fn head_and_record_lines_are_the_addresses_of_the_header_and_the_record() {
    for capacity in [8, 64, 1000] {
        let s = Shard::with_capacity(capacity);
        for b in 0..s.bucket_count() {
            let head = (&raw const s.heads[b]).cast::<u8>();
            assert_eq!(s.head_line(b), head, "capacity {capacity}, bucket {b}");
            for w in 0..WAYS {
                let record = (&raw const s.records[b][w]).cast::<u8>();
                assert_eq!(s.record_line(b, w), record, "bucket {b}, way {w}");
                // Each record starts a cache line (what one prefetch brings in whole).
                assert_eq!(record as usize % 64, 0);
            }
        }
    }
}

#[test]
fn the_first_stage_names_a_home_lookups_record_and_the_others_primary_header() {
    for capacity in [0, 1000, 1 << 20] {
        let mut s = Shard::with_capacity(capacity);
        let mut hash = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2_000 {
            hash = hash.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let (p, w) = home_of(&s, hash);
            let mut reqs = [Req::home(hash), Req::lookup(hash), Req::insert(hash)];
            let first = run(&mut s, &mut reqs, 0).first;
            assert_eq!(first, [Rec(p, w), Head(p), Head(p)], "capacity {capacity}, {hash:#x}");
        }
    }
}

#[test]
fn from_7_8_load_an_inserts_secondary_header_comes_with_its_primary() {
    let mut s = Shard::with_capacity(8 * WAYS);
    let hash = 5u64 << 48 | 3;
    let (p, sec) = s.candidate_buckets(hash);
    // Fourteen keys per bucket (primaries 0..8), none in its secondary: below 7/8 load.
    let below = (7 * 8 * WAYS / 8 - 1) as u32;
    for i in 0..below {
        s.insert(&key(1000 + i), u64::from(i), val(i), Time(0));
    }
    assert_eq!(set(&run(&mut s, &mut [Req::insert(hash)], 0).first), set(&[Head(p)]));
    s.insert(&key(2000), u64::from(below), val(0), Time(0));
    assert_eq!(s.len(), 7 * WAYS);
    assert_eq!(set(&run(&mut s, &mut [Req::insert(hash)], 0).first), set(&[Head(p), Head(sec)]));
    // A lookup's is not named: it reads its secondary only when its primary has overflowed.
    assert_eq!(run(&mut s, &mut [Req::lookup(hash)], 0).first, [Head(p)]);
    // From there on, an insert whose primary is full goes on to its secondary at once: the
    // record it writes there, and no step left for the last stage.
    let b = 3 + WAYS as u64;
    for i in 0..2 {
        s.insert(&key(3000 + i), (100 << 48) | b, val(0), Time(0));
    }
    let st = run(&mut s, &mut [Req::insert(hash)], 0);
    let w = s.heads[sec].empty_way().expect("room in the secondary");
    assert_eq!((st.probe, st.finish), (vec![Rec(sec, w)], vec![]));
    assert_eq!(s.insert(&key(4000), hash, val(0), Time(0)).slot, Slot::new(sec, w));
}

#[test]
fn a_lookup_hint_comes_from_the_home_record_or_the_header() {
    // Crafted hashes: bucket 3, home way 5 (bits 32..36), two signatures.
    let (a, b) = (key(1), key(2));
    let ha = (0x1111u64 << 48) | (5 << 32) | 3;
    let hb = (0x2222u64 << 48) | (5 << 32) | 3;
    let mut s = Shard::with_capacity(64);
    let sa = s.insert(&a, ha, val(1), Time(0)).slot;
    assert_eq!((sa.bucket(), sa.way()), (3, 5), "its home way");
    // The same home taken: the lowest empty way.
    let sb = s.insert_new(&b, hb, val(2), Time(0)).expect("no guard").slot;
    assert_eq!((sb.bucket(), sb.way()), (3, 0));
    // At home: the record alone gives the hint; no header is read.
    let mut reqs = [Req::home(ha)];
    let st = run(&mut s, &mut reqs, 0);
    assert_eq!((st.first, st.probe, st.finish), (vec![Rec(3, 5)], vec![], vec![]));
    assert_eq!(reqs[0].hint, Hint(sa.0));
    assert_eq!(s.find_hinted(&a, ha, reqs[0].hint), Some(sa));
    // Not at home: the home record has another signature, so the header is read, and the
    // record its signature names.
    let mut reqs = [Req::home(hb)];
    let st = run(&mut s, &mut reqs, 0);
    assert_eq!((st.first, st.probe, st.finish), (vec![Rec(3, 5)], vec![Head(3)], vec![Rec(3, 0)]));
    assert_eq!(reqs[0].hint, Hint(sb.0));
    // A lookup that starts at the header: the record, and the same hint.
    let mut reqs = [Req::lookup(hb)];
    let st = run(&mut s, &mut reqs, 0);
    assert_eq!((st.first, st.probe, st.finish), (vec![Head(3)], vec![Rec(3, 0)], vec![]));
    assert_eq!(reqs[0].hint, Hint(sb.0));
    // A key whose home holds another key with the same signature: a hint, which the lookup's
    // key compare refuses (no entry is taken for another key's).
    let mut reqs = [Req::home(ha)];
    run(&mut s, &mut reqs, 0);
    assert_eq!(s.find_hinted(&key(3), ha, reqs[0].hint), None);
    // Removed: the record's signature is cleared with the header's.
    s.remove(sa);
    let mut reqs = [Req::home(ha)];
    run(&mut s, &mut reqs, 0);
    assert_eq!(reqs[0].hint, Hint::NONE);
    assert_eq!(s.find_hinted(&a, ha, Hint(sa.0)), None, "a stale hint finds nothing");
    check_bookkeeping(&s, |k| if *k == b { hb } else { ha });

    // Real hashes, a quarter full, in bursts of 64: every key's hint is its slot, and the keys
    // at home are hinted without their header.
    let h = FlowHasher::default();
    let mut s = Shard::with_capacity(1 << 14);
    let keys: Vec<FlowKey> = (0..4096).map(key).collect();
    for k in &keys {
        s.insert(k, h.hash(k), val(1), Time(0));
    }
    let mut headers_read = 0;
    for chunk in keys.chunks(64) {
        let mut reqs: Vec<Req> = chunk.iter().map(|k| Req::home(h.hash(k))).collect();
        let st = run(&mut s, &mut reqs, 0);
        let mut away = 0;
        for (k, r) in chunk.iter().zip(&reqs) {
            let slot = s.find(k, r.hash).expect("inserted");
            assert_eq!(r.hint, Hint(slot.0), "{k:?}");
            away += usize::from((slot.bucket(), slot.way()) != home_of(&s, r.hash));
        }
        // One header per key not at home (keys sharing a bucket may name it once).
        assert!(st.probe.len() == away && st.probe.iter().all(|l| matches!(l, Head(_))));
        headers_read += away;
    }
    assert!(headers_read * 100 < keys.len() * 20, "{headers_read} of {} not at home", keys.len());
}

#[test]
fn a_lookup_in_its_secondary_gets_its_hint_from_the_secondary_header() {
    // Eight buckets; every key here has primary 0 and secondary 1, a signature of its own.
    let mut s = Shard::with_capacity(8 * WAYS);
    let hashes = hashes_with_candidates(&s, 0, (0, 1));
    let (first, neither) = (WAYS as u64, 3 * WAYS as u64);
    let hash = |i: u64| hashes[i as usize];
    let lookup = |s: &mut Shard, i: u64| {
        let mut reqs = [Req::lookup(hash(i))];
        let st = run(s, &mut reqs, 0);
        (st.probe, st.finish, reqs[0].hint)
    };
    // Nothing overflowed: the key's record, or nothing at all (the secondary is not read).
    let s0 = s.insert(&key(0), hash(0), val(0), Time(0)).slot;
    assert_eq!(lookup(&mut s, 0), (vec![Rec(0, 0)], vec![], Hint(s0.0)));
    assert_eq!(lookup(&mut s, neither), (vec![], vec![], Hint::NONE));
    for i in 1..first {
        s.insert(&key(i as u32), hash(i), val(i as u32), Time(0));
    }
    // The next two keys go to the secondary: their probe names that header, and the last
    // stage the record there.
    for i in [first, first + 1] {
        let slot = s.insert(&key(i as u32), hash(i), val(i as u32), Time(0)).slot;
        assert_eq!(slot.bucket(), 1);
        let (probe, finish, hint) = lookup(&mut s, i);
        assert_eq!((probe, finish), (vec![Head(1)], vec![Rec(1, slot.way())]), "key {i}");
        assert_eq!(hint, Hint(slot.0), "key {i}");
        let hit = s.hinted_hit(&key(i as u32), hash(i), hint, Time(0)).map(|h| h.value);
        assert_eq!(hit, Some(val(i as u32)));
    }
    // A key in its primary: its record; in neither: the secondary's header, and no hint.
    assert_eq!(lookup(&mut s, 3).0, [Rec(0, 3)]);
    assert_eq!(lookup(&mut s, neither), (vec![Head(1)], vec![], Hint::NONE));
}

#[test]
fn an_insert_names_the_record_it_writes() {
    // Hash 0: primary 0, secondary 1, signature 1. `other` has another signature and the
    // same two buckets.
    let mut s = Shard::with_capacity(8 * WAYS);
    assert_eq!(s.candidate_buckets(0), (0, 1));
    let other = hashes_with_candidates(&s, 0, (0, 1))[1];
    assert_ne!(other >> 48, 1);
    let insert = |s: &mut Shard, hash: u64| {
        let st = run(s, &mut [Req::insert(hash)], 0);
        (st.probe, st.finish)
    };
    // Room in the primary: its first empty way, where the insert goes.
    assert_eq!(insert(&mut s, 0), (vec![Rec(0, 0)], vec![]));
    assert_eq!(s.insert(&key(0), 0, val(0), Time(0)).slot, Slot::new(0, 0));
    // A way with the key's signature: that record (the key may be there).
    assert_eq!(insert(&mut s, 0), (vec![Rec(0, 0)], vec![]));
    assert_eq!(insert(&mut s, other), (vec![Rec(0, 1)], vec![]));
    // The primary full: the secondary's header, then the secondary's first empty way.
    for i in 1..WAYS as u32 {
        s.insert(&key(i), 0, val(i), Time(0));
    }
    assert_eq!(insert(&mut s, other), (vec![Head(1)], vec![Rec(1, 0)]));
    // Probed in the first pass, the insert's lines all come in the last stage.
    let st = run(&mut s, &mut [Req::insert(other)], 1);
    assert_eq!((st.probe, st.finish), (vec![], vec![Head(1), Rec(1, 0)]));
    assert_eq!(s.insert(&key(100), other, val(100), Time(0)).slot, Slot::new(1, 0));
    // Both full and no entry able to move (every entry's other bucket is the full secondary):
    // the headers the move's search reads, then the record the eviction reads (the oldest).
    for i in WAYS as u32..2 * WAYS as u32 - 1 {
        s.insert(&key(i), 0, val(i), Time(0));
    }
    let (probe, finish) = insert(&mut s, other);
    assert_eq!((probe, set(&finish)), (vec![Head(1)], set(&[Head(1), Rec(0, 0)])));
    // Nothing when the flood guard will refuse the connection: the table full...
    let mut one = Shard::with_capacity(WAYS);
    for i in 0..WAYS as u32 {
        one.insert(&key(i), 0, val(i), Time(0));
    }
    one.set_flood_guard(Some(1000));
    assert!(!one.admit_new(Time(0)));
    let st = run(&mut one, &mut [Req::insert(other)], 0);
    assert_eq!((st.first, st.probe, st.finish), (vec![Head(0)], vec![], vec![]));
    // ... or the tokens spent; with room and tokens again, the lines are named.
    let mut g = Shard::with_capacity(8 * WAYS);
    g.set_flood_guard(Some(2));
    assert_eq!(insert(&mut g, other), (vec![Rec(0, 0)], vec![]));
    assert!(g.admit_new(Time(0)) && g.admit_new(Time(0)) && !g.admit_new(Time(0)));
    assert_eq!(insert(&mut g, other), (vec![], vec![]));
    assert!(g.admit_new(Time(1000)));
    assert_eq!(insert(&mut g, other), (vec![Rec(0, 0)], vec![]));
}

#[test]
fn a_crowded_insert_gets_its_move_planned_and_takes_it() {
    // Eight buckets. Keys of primary 0, then of primary 1, each with its own signature and
    // so its own secondary.
    let mut s = Shard::with_capacity(8 * WAYS);
    let hashes = crowding_hashes();
    // A key whose candidates are buckets 0 and 1.
    let target = hashes_with_candidates(&s, 0, (0, 1))[20];
    for (i, &h) in hashes.iter().enumerate() {
        // Until both are full, the line of the way the insert takes (once the primary is
        // full, after the secondary's header).
        let st = run(&mut s, &mut [Req::insert(target)], 0);
        let (b, w) = (i / WAYS, i % WAYS);
        let want =
            if b == 0 { (vec![Rec(0, w)], vec![]) } else { (vec![Head(1)], vec![Rec(1, w)]) };
        assert_eq!((st.probe, st.finish), want, "at {i} entries");
        let w = u32::try_from(i).expect("small");
        assert_eq!(s.insert(&key(w), h, val(w), Time(0)).slot, Slot::new(b, i % WAYS));
    }
    // Both full: after the secondary's header, the header of each of the primary's entries'
    // other candidate bucket (named from the signatures, no record read), then the record
    // that moves and the way it goes to.
    let st = run(&mut s, &mut [Req::insert(target)], 0);
    assert_eq!(st.probe, [Head(1)]);
    let others: Vec<Named> =
        hashes[..WAYS].iter().map(|&h| Head(s.candidate_buckets(h).1)).collect();
    assert!(others.iter().any(|&b| b != Head(1)), "not only the two full buckets: {others:?}");
    let moves: Vec<Named> = st.finish.iter().copied().filter(|l| matches!(l, Rec(..))).collect();
    assert_eq!(set(&st.finish), set(&[&[Head(1)][..], &others, &moves].concat()));
    // The insert makes that move: one entry moved, from the first record named to the
    // second, and the new entry takes the way it left.
    let before: Vec<(FlowKey, Slot)> = s.iter(Time(0)).map(|(slot, e)| (e.key, slot)).collect();
    let out = s.insert(&key(100), target, val(100), Time(0));
    let moved: Vec<(Slot, Slot)> = before
        .iter()
        .filter_map(|(k, from)| {
            let to = s.find(k, hashes[k.sport as usize - 1024]).expect("kept");
            (to != *from).then_some((*from, to))
        })
        .collect();
    assert_eq!(moved.len(), 1, "{moved:?}");
    let (from, to) = moved[0];
    assert_eq!((out.slot, out.evicted), (from, None), "the new entry takes the way the move left");
    assert_eq!(moves, [Rec(from.bucket(), from.way()), Rec(to.bucket(), to.way())]);
    // With a way free again, the insert's own record and nothing more.
    s.remove(out.slot);
    let st = run(&mut s, &mut [Req::insert(target)], 0);
    assert_eq!((st.probe, st.finish), (vec![Rec(from.bucket(), from.way())], vec![]));
    // Nothing of a move either when only the primary (bucket 0) or only the secondary
    // (bucket 1) has a way free.
    for b in [0, 1] {
        let mut s = Shard::with_capacity(8 * WAYS);
        for (i, &h) in hashes.iter().enumerate() {
            let w = u32::try_from(i).expect("small");
            s.insert(&key(w), h, val(w), Time(0));
        }
        s.remove(Slot::new(b, 3));
        let st = run(&mut s, &mut [Req::insert(target)], 0);
        let want =
            if b == 0 { (vec![Rec(0, 3)], vec![]) } else { (vec![Head(1)], vec![Rec(1, 3)]) };
        assert_eq!((st.probe, st.finish), want, "bucket {b} with a way free");
    }
}

#[test]
fn a_planned_move_whose_target_way_was_taken_since_is_not_made() {
    // Buckets 0 and 1 full as in the test above; the move planned for `target` is then
    // spoilt: its target way gets an entry of its own before the insert.
    let mut s = Shard::with_capacity(8 * WAYS);
    let hashes = crowding_hashes();
    for (i, &h) in hashes.iter().enumerate() {
        let w = u32::try_from(i).expect("small");
        s.insert(&key(w), h, val(w), Time(0));
    }
    let target = hashes_with_candidates(&s, 0, (0, 1))[20];
    let st = run(&mut s, &mut [Req::insert(target)], 0);
    let Some(&Rec(to, to_w)) = st.finish.iter().rev().find(|l| matches!(l, Rec(..))) else {
        panic!("no move planned: {st:?}");
    };
    assert!(to > 1 && s.heads[to].sig[to_w] == 0);
    // Fill every empty way of `to` with keys whose primary it is.
    let mut all: Vec<(FlowKey, u64)> =
        hashes.iter().enumerate().map(|(i, &h)| (key(i as u32), h)).collect();
    let fillers = hashes_with_candidates(&s, to as u64, s.candidate_buckets(to as u64));
    for (n, &h) in fillers.iter().take(WAYS).enumerate() {
        let k = key(200 + n as u32);
        if s.heads[to].empty_way().is_none() {
            break;
        }
        s.insert(&k, h, val(200), Time(0));
        all.push((k, h));
    }
    assert_eq!(s.heads[to].empty_way(), None, "the planned target way is taken");
    let out = s.insert(&key(100), target, val(100), Time(0));
    all.push((key(100), target));
    // Every entry is still there (the one in the planned target way too), where its key
    // says, and the counts agree.
    for (k, h) in &all {
        assert!(s.find(k, *h).is_some(), "{k:?} lost");
    }
    assert_eq!((s.len(), s.iter(Time(0)).count()), (all.len(), all.len()));
    assert_eq!(out.evicted, None, "another entry could move");
    let by_key: std::collections::HashMap<FlowKey, u64> = all.iter().copied().collect();
    check_bookkeeping(&s, |k| by_key[k]);
}

#[test]
fn when_no_entry_can_move_the_crowded_insert_names_the_record_the_eviction_reads() {
    // Keys whose candidates are buckets 0 and 1, both full, the table a quarter full: every
    // entry's other bucket is the other full one.
    let (mut s, hashes) = two_full_buckets();
    let target = hashes[WAYS + 1];
    // The secondary's header; then the primary's entries' other bucket (the secondary) and
    // the oldest entry's record, key 0's.
    let st = run(&mut s, &mut [Req::insert(target)], 0);
    assert_eq!((st.probe, set(&st.finish)), (vec![Head(1)], set(&[Head(1), Rec(0, 0)])));
    // Key 0 (way 0 of bucket 0) made again, the newest: key 1 is the oldest there.
    s.remove(s.find(&key(0), hashes[0]).expect("key 0"));
    s.insert(&key(0), hashes[0], val(0), Time(40_000));
    let st = run(&mut s, &mut [Req::insert(target)], 0);
    assert_eq!(st.finish.last(), Some(&Rec(0, 1)), "the oldest entry's record");
    // With a flood guard the insert is refused instead of evicting: no record to read.
    s.set_flood_guard(Some(1000));
    let st = run(&mut s, &mut [Req::insert(target)], 0);
    assert!(st.finish.iter().all(|l| matches!(l, Head(_))), "{st:?}");
    assert!(s.insert_new(&key(100), target, val(100), Time(50_000)).is_none());
    s.set_flood_guard(None);
    // Without, the insert evicts that entry: the least recently seen, key 1.
    let out = s.insert(&key(100), target, val(100), Time(50_000));
    assert_eq!(out.evicted.map(|e| e.key), Some(key(1)));
}

#[test]
fn a_bucket_found_full_is_not_read_again_until_a_way_of_it_empties() {
    // Buckets 0 and 1 full, every entry's other bucket the other one: no entry can move.
    let (mut s, hashes) = two_full_buckets();
    let target = hashes[WAYS + 1];
    // The move's search reads the 16 entries' other bucket, bucket 1.
    assert!(run(&mut s, &mut [Req::insert(target)], 0).finish.contains(&Head(1)));
    // A crowded insert (of another key, same buckets), which evicts key 0, the oldest: the
    // search found both buckets full.
    let out = s.insert(&key(100), hashes[WAYS + 2], val(100), Time(40_000));
    assert_eq!(out.evicted.map(|e| e.key), Some(key(0)));
    // Bucket 1's header is named as the secondary's alone: in place of each header known
    // full the primary's own (in cache) is named, and then the eviction's record.
    let st = run(&mut s, &mut [Req::insert(target)], 0);
    assert_eq!((st.probe, set(&st.finish)), (vec![Head(1)], set(&[Head(0), Rec(0, 1)])));
    // A way of bucket 1 emptied: no longer known full, and the next insert takes it.
    let in_1 = hashes[hashes.len() - WAYS];
    s.remove(s.find(&key(WAYS as u32), in_1).expect("key 16 in bucket 1"));
    let st = run(&mut s, &mut [Req::insert(target)], 0);
    assert_eq!((st.probe, st.finish), (vec![Head(1)], vec![Rec(1, 0)]));
    let out = s.insert(&key(101), target, val(101), Time(41_000));
    assert_eq!((out.slot, out.evicted), (Slot::new(1, 0), None));
}

#[test]
fn once_crowded_inserts_evict_the_record_the_eviction_reads_comes_first() {
    // Buckets 0 and 1 full, every entry's other bucket the other one: no entry can move.
    let (mut s, hashes) = two_full_buckets();
    let target = hashes[WAYS + 1];
    let first_of_last_stage =
        |s: &mut Shard, hash: u64| run(s, &mut [Req::insert(hash)], 0).finish[0];
    // Before any eviction: the headers first (a move may make room).
    assert!(matches!(first_of_last_stage(&mut s, target), Head(_)));
    // Crowded inserts that evict, one after another: from more than half of
    // `EVICT_TREND_MAX` of them on, the record the eviction reads comes first.
    let evicting = usize::from(EVICT_TREND_MAX) / 2 + 1;
    for (i, &h) in hashes[WAYS + 2..].iter().take(evicting).enumerate() {
        assert!(matches!(first_of_last_stage(&mut s, target), Head(_)), "after {i} evictions");
        let n = 100 + u32::try_from(i).expect("small");
        assert!(s.insert(&key(n), h, val(n), Time(40_000)).evicted.is_some());
    }
    // (Keys 0-4 evicted, the oldest first: key 5, in way 5, is the oldest left.)
    let st = run(&mut s, &mut [Req::insert(target)], 0);
    assert_eq!(st.finish[0], Rec(0, 5), "the record first: {st:?}");
    assert!(st.finish[1..].iter().all(|l| matches!(l, Head(_))), "then the headers: {st:?}");
    // With a flood guard, which refuses rather than evicts, the headers first.
    s.set_flood_guard(Some(1000));
    assert!(matches!(first_of_last_stage(&mut s, target), Head(_)));
    s.set_flood_guard(None);
    // A crowded insert that moves an entry counts back down: an entry of bucket 0 whose
    // other bucket is the empty bucket 3 moves there, and the headers come first again.
    s.remove(s.find(&key(WAYS as u32 - 1), hashes[WAYS - 1]).expect("in bucket 0"));
    let to_3 = hashes_with_candidates(&s, 0, (0, 3))[0];
    s.insert(&key(201), to_3, val(201), Time(50_000));
    assert!(s.insert(&key(200), target, val(200), Time(50_000)).evicted.is_none());
    assert_eq!(s.find(&key(201), to_3).map(|slot| slot.bucket()), Some(3), "moved");
    assert!(matches!(first_of_last_stage(&mut s, hashes[WAYS + 20]), Head(_)));

    // A full table: no empty way anywhere, so once it evicts no header is named (nothing
    // can move); the insert evicts the least recently seen of the primary's records.
    let mut one = Shard::with_capacity(WAYS);
    for i in 0..WAYS as u32 {
        one.insert(&key(i), 0, val(i), Time(u64::from(i) * 1000));
    }
    for i in 0..u32::from(EVICT_TREND_MAX) {
        one.insert(&key(300 + i), 0, val(0), Time(50_000));
    }
    // Keys 0-7 are gone, the oldest first: key 8's record is the one the next eviction
    // reads, named as soon as the header is in (a full table is past 7/8 load).
    let st = run(&mut one, &mut [Req::insert(2 << 48)], 0);
    assert_eq!((st.probe, st.finish), (vec![Rec(0, 8)], vec![]));
    // Key 8 is the oldest left, until touched.
    one.touch(one.find(&key(8), 0).expect("key 8"), Time(60_000));
    let out = one.insert(&key(400), 0, val(400), Time(70_000));
    assert_eq!(out.evicted.map(|e| e.key), Some(key(9)), "key 8 was touched");
    assert_eq!(one.len(), WAYS);
}

/// How many entries a lookup finds in their home way, by load (`--nocapture` prints it): a
/// hit there reads one line of the table rather than two.
#[test]
fn home_share_by_load() {
    let cap = 1 << 16;
    for (load, min_share) in [(0.25, 0.84), (0.5, 0.71), (0.8, 0.56), (0.9, 0.5)] {
        let mut s = Shard::with_capacity(cap);
        let n = (cap as f64 * load) as u32;
        for i in 0..n {
            s.insert(&key(i), key_hash(&key(i)), val(i), Time(0));
        }
        let home = (0..n)
            .filter(|&i| {
                let hash = key_hash(&key(i));
                let slot = s.find(&key(i), hash).expect("inserted");
                (slot.bucket(), slot.way()) == home_of(&s, hash)
            })
            .count();
        let share = home as f64 / f64::from(n);
        println!("load {load}: {:.1}% of the entries in their home way", share * 100.0);
        assert!(share >= min_share, "load {load}: {share}");
    }
}
