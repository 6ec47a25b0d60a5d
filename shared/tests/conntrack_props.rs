//! Property tests of the connection-tracking shard (`spillway_core::conntrack`): key
//! integrity under colliding hashes (also when many keys share both candidate buckets), no
//! entry lost unless reported evicted, agreement with a `HashMap` model, LRU eviction (to
//! within about a second) among the 16 ways of the primary when both candidate buckets are
//! full, idle time across the u32 wrap of milliseconds (CT-8), and sweeping.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use spillway_core::addr::Addr;
use spillway_core::conntrack::{
    Ask, Burst, EntryValue, Hint, Pending, Shard, BUCKET_BYTES, BYTES_PER_ENTRY, RECORD_ALIGN,
    SEEN_UNIT_MS, WAYS,
};
use spillway_core::flow::{FlowHasher, FlowKey};
use spillway_core::time::Time;

const U32_WRAP: u64 = 1 << 32;

/// Key number `i` of a small domain: distinct for distinct `i`.
fn key(i: u16) -> FlowKey {
    let [a, b] = i.to_be_bytes();
    FlowKey {
        src: Addr::v4(10, 0, a, b),
        dst: Addr::v4(192, 0, 2, 1),
        sport: 40_000 + (i % 7),
        dport: 443,
        proto: 6,
        kind: 5,
        service: 3,
    }
}

fn real_hash(k: &FlowKey) -> u64 {
    FlowHasher::default().hash(k)
}

/// How the tests hash keys: adversarial modes make many keys share a bucket, a secondary
/// bucket and a signature.
#[derive(Clone, Copy, Debug)]
enum HashMode {
    /// Every key gets the same hash: one primary, one secondary, one signature.
    Constant(u64),
    /// Every key gets the same primary bucket (`bits` keeps the bucket bits) and a real
    /// signature reduced to its top `sig_bits` bits; the secondary follows from the signature,
    /// so with few signature bits many keys share both buckets and their signature.
    SharedPair { bits: u64, sig_bits: u32 },
    /// The real hash with only two bucket bits and two signature bits kept (so at most four
    /// secondaries per primary).
    FewBits,
    /// The real hash.
    Real,
}

impl HashMode {
    fn hash(self, k: &FlowKey) -> u64 {
        match self {
            HashMode::Constant(h) => h,
            HashMode::SharedPair { bits, sig_bits } => {
                let sig_mask = !(u64::MAX >> sig_bits);
                (bits & 0x0000_ffff_ffff_ffff) | (real_hash(k) & sig_mask)
            }
            HashMode::FewBits => real_hash(k) & 0x0003_0003_0000_0003,
            HashMode::Real => real_hash(k),
        }
    }
}

fn hash_mode() -> impl Strategy<Value = HashMode> {
    prop_oneof![
        any::<u64>().prop_map(HashMode::Constant),
        Just(HashMode::Constant(0)),
        (any::<u64>(), 0u32..=16)
            .prop_map(|(bits, sig_bits)| HashMode::SharedPair { bits, sig_bits }),
        Just(HashMode::FewBits),
        Just(HashMode::Real),
    ]
}

fn value(backend: u32) -> EntryValue {
    EntryValue { backend, epoch: backend.wrapping_mul(3), flags: (backend % 5) as u8 }
}

#[test]
fn layout_is_1088_byte_buckets_and_68_bytes_per_entry() {
    assert_eq!(BUCKET_BYTES, 1088);
    assert_eq!(RECORD_ALIGN, 64);
    assert_eq!(BYTES_PER_ENTRY, 68);
    assert_eq!(WAYS, 16);
    let s = Shard::with_capacity(1 << 20);
    assert_eq!(s.capacity(), 1 << 20);
    assert_eq!(s.bytes(), 68 << 20);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// The shard never returns an entry for a different key, however the hashes collide, and
    /// the key just inserted is always found.
    #[test]
    fn never_returns_an_entry_for_another_key(
        cap in 8usize..=64,
        mode in hash_mode(),
        ops in prop::collection::vec((0u16..48, any::<bool>()), 1..200),
    ) {
        let mut s = Shard::with_capacity(cap);
        for (t, &(k, remove)) in ops.iter().enumerate() {
            let now = Time(t as u64);
            let key = key(k);
            let h = mode.hash(&key);
            if remove {
                if let Some(slot) = s.find(&key, h) {
                    s.remove(slot);
                }
                prop_assert_eq!(s.find(&key, h), None);
            } else {
                let out = s.insert(&key, h, value(u32::from(k)), now);
                prop_assert_eq!(s.find(&key, h), Some(out.slot));
            }
            for probe in 0..48 {
                let pk = self::key(probe);
                if let Some(slot) = s.find(&pk, mode.hash(&pk)) {
                    let e = s.get(slot, now);
                    prop_assert_eq!(e.key, pk);
                    prop_assert_eq!(e.value, value(u32::from(probe)));
                }
            }
            prop_assert!(s.len() <= s.capacity());
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u16, u32),
    /// `Shard::insert_new` without a flood guard: the same upsert as `Insert` (a new
    /// connection's entry; its common case is inlined apart from `insert`).
    InsertNew(u16, u32),
    Lookup(u16),
    Touch(u16),
    Replace(u16, u32),
    Remove(u16),
    /// A full sweep cycle removing the entries whose backend % 3 == r.
    Sweep(u32),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u16..40;
    prop_oneof![
        4 => (k.clone(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
        3 => (k.clone(), any::<u32>()).prop_map(|(k, v)| Op::InsertNew(k, v)),
        4 => k.clone().prop_map(Op::Lookup),
        2 => k.clone().prop_map(Op::Touch),
        2 => (k.clone(), any::<u32>()).prop_map(|(k, v)| Op::Replace(k, v)),
        2 => k.prop_map(Op::Remove),
        1 => (0u32..3).prop_map(Op::Sweep),
        3 => (0u64..700_000).prop_map(Op::Advance),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// NX-1 at the table level: with room to spare, the shard behaves exactly like a map. An
    /// entry is never lost or altered unless the caller removes, replaces or sweeps it, and idle
    /// times are exact (CT-8), also across the u32 wrap of milliseconds.
    #[test]
    fn agrees_with_a_map_model(
        start in prop_oneof![Just(0u64), Just(U32_WRAP - 1_000_000), 0u64..(1 << 45)],
        ops in prop::collection::vec(op(), 1..150),
    ) {
        // 40 keys in 256 buckets: with these fixed keys and hash seed no bucket gets 16.
        let mut s = Shard::with_capacity(4096);
        let mut model: HashMap<FlowKey, (EntryValue, u64)> = HashMap::new();
        let mut now = start;
        for op in ops {
            match op {
                Op::Insert(k, v) | Op::InsertNew(k, v) => {
                    let key = key(k);
                    let out = if matches!(op, Op::Insert(..)) {
                        s.insert(&key, real_hash(&key), value(v), Time(now))
                    } else {
                        s.insert_new(&key, real_hash(&key), value(v), Time(now)).expect("no guard")
                    };
                    let old = model.insert(key, (value(v), now));
                    prop_assert_eq!(out.overwritten.is_some(), old.is_some());
                    prop_assert_eq!(out.evicted, None);
                }
                Op::Lookup(k) => {
                    let key = key(k);
                    let got = s.lookup(&key, real_hash(&key), Time(now)).map(|(_, e)| e);
                    let want = model.get(&key).map(|&(value, seen)| {
                        spillway_core::conntrack::Entry { key, value, idle_ms: now - seen }
                    });
                    prop_assert_eq!(got, want);
                }
                Op::Touch(k) => {
                    let key = key(k);
                    if let Some(slot) = s.find(&key, real_hash(&key)) {
                        s.touch(slot, Time(now));
                        model.get_mut(&key).unwrap().1 = now;
                    }
                }
                Op::Replace(k, v) => {
                    let key = key(k);
                    if let Some(slot) = s.find(&key, real_hash(&key)) {
                        s.replace(slot, value(v), Time(now));
                        model.insert(key, (value(v), now));
                    }
                }
                Op::Remove(k) => {
                    let key = key(k);
                    let found = s.find(&key, real_hash(&key));
                    prop_assert_eq!(found.is_some(), model.contains_key(&key));
                    if let Some(slot) = found {
                        s.remove(slot);
                        model.remove(&key);
                    }
                }
                Op::Sweep(r) => {
                    let before = model.len();
                    model.retain(|_, (v, _)| v.backend % 3 != r);
                    let n = s.sweep(s.bucket_count(), Time(now), |e| e.value.backend % 3 == r);
                    prop_assert_eq!(n, before - model.len());
                }
                Op::Advance(dt) => now += dt,
            }
            prop_assert_eq!(s.len(), model.len());
        }
        prop_assert_eq!(s.stats().evictions, 0);
        let stored: HashMap<FlowKey, (EntryValue, u64)> =
            s.iter(Time(now)).map(|(_, e)| (e.key, (e.value, now - e.idle_ms))).collect();
        prop_assert_eq!(stored, model);
    }

    /// An insert of a new key evicts only when both of its candidate buckets are full and no
    /// entry of its primary has room in its own other candidate bucket; then the evicted entry
    /// is the least recently touched of the primary's 16 ways, to within [`SEEN_UNIT_MS`] (no
    /// entry of the primary had been idle a whole unit longer), it is counted, and every other
    /// entry is still found with its idle time. Predicted from the table's observable state
    /// (`iter`, `candidate_buckets`), not from a copy of the placement rule. Touches between
    /// the inserts leave the headers' coarse last seen behind the records, which the eviction
    /// must catch. (A run lasts less than 120 s, below `SEEN_CAP` units: no sweep is needed
    /// to keep the headers from wrapping round.)
    #[test]
    fn full_candidate_buckets_evict_the_least_recently_touched_of_the_primarys_16_ways(
        cap in prop_oneof![Just(16usize), Just(32), Just(64), Just(128)],
        few_bits in any::<bool>(),
        ops in prop::collection::vec((0u16..80, any::<bool>(), 1u64..400), 1..300),
        start in prop_oneof![Just(0u64), Just(U32_WRAP - 50_000)],
    ) {
        let mode = if few_bits { HashMode::FewBits } else { HashMode::Real };
        let hash = |k: &FlowKey| mode.hash(k);
        let mut s = Shard::with_capacity(cap);
        let mut evictions = 0;
        let mut now = start;
        for (k, touch, dt) in ops {
            now += dt;
            let key = key(k);
            if touch {
                if let Some(slot) = s.find(&key, hash(&key)) {
                    s.touch(slot, Time(now));
                }
                continue;
            }
            let before: Vec<(usize, spillway_core::conntrack::Entry)> =
                s.iter(Time(now)).map(|(slot, e)| (slot.bucket(), e)).collect();
            let mut occupancy = vec![0usize; s.bucket_count()];
            for &(b, _) in &before {
                occupancy[b] += 1;
            }
            let full = |b: usize| occupancy[b] == WAYS;
            let (p, q) = s.candidate_buckets(hash(&key));
            let present = before.iter().any(|(_, e)| e.key == key);
            let movable = |&(b, e): &(usize, spillway_core::conntrack::Entry)| {
                let (ep, eq) = s.candidate_buckets(hash(&e.key));
                !full(if b == ep { eq } else { ep })
            };
            let primary = || before.iter().filter(|(b, _)| *b == p);
            let in_primary: Vec<_> = primary().map(|&(_, e)| e).collect();
            let evicts = !present && full(p) && full(q) && !primary().any(movable);
            let out = s.insert(&key, hash(&key), value(u32::from(k)), Time(now));
            prop_assert_eq!(out.overwritten.is_some(), present);
            prop_assert_eq!(out.evicted.is_some(), evicts);
            let victim = out.evicted;
            if let Some(v) = victim {
                prop_assert!(in_primary.contains(&v), "{:?} was not in the primary", v);
                let oldest = in_primary.iter().map(|e| e.idle_ms).max().expect("full");
                prop_assert!(oldest - v.idle_ms < SEEN_UNIT_MS, "{:?}, oldest idle {}", v, oldest);
            }
            if victim.is_some() {
                evictions += 1;
            }
            prop_assert!(out.slot.bucket() == p || out.slot.bucket() == q);
            prop_assert_eq!(s.find(&key, hash(&key)), Some(out.slot));
            prop_assert_eq!(s.stats().evictions, evictions);
            prop_assert_eq!(s.len(), before.len() + usize::from(!present && victim.is_none()));
            for (_, e) in &before {
                if Some(e.key) == victim.map(|v| v.key) || e.key == key {
                    continue;
                }
                let (slot, got) = s.lookup(&e.key, hash(&e.key), Time(now)).expect("survivor lost");
                prop_assert_eq!(got, *e);
                let (ep, eq) = s.candidate_buckets(hash(&e.key));
                prop_assert!(slot.bucket() == ep || slot.bucket() == eq);
            }
        }
    }

    /// Adversarial two-choice collisions: many keys share their primary *and* secondary bucket
    /// (and often their signature). With inserts, removes, touches, replaces and sweeps, `find`
    /// never returns another key's entry and never loses an entry that was not reported evicted
    /// (the `evicted` return value is the oracle); the table agrees with a map model.
    #[test]
    fn shared_candidate_buckets_never_confuse_or_lose_entries(
        cap in prop_oneof![Just(8usize), Just(16), Just(64), Just(256)],
        mode in hash_mode(),
        ops in prop::collection::vec(op(), 1..250),
    ) {
        let mut s = Shard::with_capacity(cap);
        let mut model: HashMap<FlowKey, EntryValue> = HashMap::new();
        let mut evictions = 0;
        let mut now = 0u64;
        for op in ops {
            match op {
                Op::Insert(k, v) | Op::InsertNew(k, v) => {
                    let key = key(k);
                    let out = if matches!(op, Op::Insert(..)) {
                        s.insert(&key, mode.hash(&key), value(v), Time(now))
                    } else {
                        s.insert_new(&key, mode.hash(&key), value(v), Time(now)).expect("no guard")
                    };
                    prop_assert_eq!(out.overwritten.is_some(), model.contains_key(&key));
                    if let Some(ev) = out.evicted {
                        prop_assert!(ev.key != key);
                        prop_assert_eq!(model.remove(&ev.key), Some(ev.value));
                        evictions += 1;
                    }
                    model.insert(key, value(v));
                }
                Op::Lookup(k) | Op::Touch(k) => {
                    let key = key(k);
                    if let Some(slot) = s.find(&key, mode.hash(&key)) {
                        s.touch(slot, Time(now));
                    }
                }
                Op::Replace(k, v) => {
                    let key = key(k);
                    if let Some(slot) = s.find(&key, mode.hash(&key)) {
                        s.replace(slot, value(v), Time(now));
                        model.insert(key, value(v));
                    }
                }
                Op::Remove(k) => {
                    let key = key(k);
                    if let Some(slot) = s.find(&key, mode.hash(&key)) {
                        s.remove(slot);
                        model.remove(&key);
                    }
                }
                Op::Sweep(r) => {
                    model.retain(|_, v| v.backend % 3 != r);
                    s.sweep(s.bucket_count(), Time(now), |e| e.value.backend % 3 == r);
                }
                Op::Advance(dt) => now += dt,
            }
            for probe in 0..40 {
                let pk = key(probe);
                let got = s.find(&pk, mode.hash(&pk)).map(|slot| s.get(slot, Time(now)));
                prop_assert_eq!(got.map(|e| e.key).unwrap_or(pk), pk, "another key's entry");
                prop_assert_eq!(got.map(|e| e.value), model.get(&pk).copied(), "key {}", probe);
            }
            prop_assert_eq!(s.len(), model.len());
            prop_assert_eq!(s.stats().evictions, evictions);
        }
    }

    /// CT-8 support: `idle_ms` is now minus the last insert/touch/replace, including when the
    /// millisecond clock crosses a multiple of 2^32 between the two.
    #[test]
    fn ct_8_idle_time_is_exact_across_the_u32_wrap(
        wraps in 0u64..1000,
        before in 0u64..10_000_000,
        idle1 in 0u64..20_000_000,
        idle2 in 0u64..(1 << 31),
    ) {
        let t0 = (wraps + 1) * U32_WRAP - before;
        let k = key(1);
        let mut s = Shard::with_capacity(8);
        let slot = s.insert(&k, real_hash(&k), value(1), Time(t0)).slot;
        prop_assert_eq!(s.get(slot, Time(t0 + idle1)).idle_ms, idle1);
        let t1 = t0 + idle1;
        s.touch(slot, Time(t1));
        prop_assert_eq!(s.get(slot, Time(t1 + idle2)).idle_ms, idle2);
        s.replace(slot, value(2), Time(t1 + idle2));
        prop_assert_eq!(s.get(slot, Time(t1 + idle2 + 5)).idle_ms, 5);
    }

    /// Sweeping in chunks that add up to the bucket count visits every entry exactly once and
    /// removes exactly the entries the predicate names.
    #[test]
    fn sweep_cycle_visits_every_entry_once_and_removes_exactly_the_named_ones(
        n in 0u16..600,
        chunk in 1usize..80,
        offset in 0usize..64,
        kill in 0u32..4,
    ) {
        let mut s = Shard::with_capacity(512);
        // Start the cycle anywhere: the cursor rolls.
        s.sweep(offset, Time(0), |_| false);
        for k in 0..n {
            s.insert(&key(k), real_hash(&key(k)), value(u32::from(k)), Time(u64::from(k)));
        }
        let stored: HashSet<FlowKey> = s.iter(Time(0)).map(|(_, e)| e.key).collect();
        let start_cursor = s.sweep_cursor();
        let mut seen = Vec::new();
        let mut removed = 0;
        let mut left = s.bucket_count();
        while left > 0 {
            let step = chunk.min(left);
            removed += s.sweep(step, Time(1000), |e| {
                seen.push(e.key);
                e.value.backend % 4 == kill
            });
            left -= step;
        }
        prop_assert_eq!(s.sweep_cursor(), start_cursor);
        prop_assert_eq!(seen.len(), stored.len());
        prop_assert_eq!(seen.iter().copied().collect::<HashSet<_>>(), stored.clone());
        let named: HashSet<FlowKey> =
            (0..n).filter(|&k| u32::from(k) % 4 == kill).map(key).filter(|k| stored.contains(k)).collect();
        let left_after: HashSet<FlowKey> = s.iter(Time(0)).map(|(_, e)| e.key).collect();
        prop_assert_eq!(removed, named.len());
        prop_assert_eq!(s.stats().swept, removed as u64);
        prop_assert_eq!(left_after, &stored - &named);
        prop_assert_eq!(s.len(), stored.len() - named.len());
    }

    /// A hint (what the burst pipeline, `conntrack::Burst`, finds when a key's lines arrive,
    /// and the data plane uses at the lookup a few packets later) never changes what a lookup
    /// finds: after any
    /// inserts (with moves and evictions in a small table), removals and sweeps since, and
    /// also when it was taken for another key, `find_hinted` answers exactly what `find` does,
    /// and what it finds is the key's entry; `hinted_hit` gives the key's entry or nothing,
    /// and its `touch` restarts that entry's idle clock.
    #[test]
    fn a_stale_or_foreign_hint_never_changes_what_a_lookup_finds(
        mode in hash_mode(),
        ops in prop::collection::vec((0u16..40, 0u8..5), 1..200),
    ) {
        // Four buckets: inserts move and evict.
        let mut s = Shard::with_capacity(32);
        let mut hints: HashMap<u16, Hint> = HashMap::new();
        for (step, (k, what)) in ops.into_iter().enumerate() {
            let kk = key(k);
            let h = mode.hash(&kk);
            match what {
                0 => {
                    s.insert(&kk, h, value(u32::from(k)), Time(step as u64));
                }
                1 => {
                    if let Some(slot) = s.find(&kk, h) {
                        s.remove(slot);
                    }
                }
                2 => {
                    s.sweep(1, Time(step as u64), |e| e.value.backend % 3 == u32::from(k % 3));
                }
                3 => {
                    // The burst pipeline's stages, for a lookup that reads its home record
                    // first (odd keys) or its header first (even keys).
                    hints.insert(k, hint_of(&mut s, h, k % 2 == 1));
                }
                _ => {
                    // A hit through the key's hint is the key's entry, and touching it
                    // restarts that entry's idle clock.
                    let now = Time(step as u64);
                    let hint = hints.get(&k).copied().unwrap_or(Hint::NONE);
                    if let Some(hit) = s.hinted_hit(&kk, h, hint, now) {
                        let (v, idle) = (hit.value, hit.idle_ms);
                        let entry = s.lookup(&kk, h, now).map(|(_, e)| (e.value, e.idle_ms));
                        prop_assert_eq!(entry, Some((v, idle)));
                        s.hinted_hit(&kk, h, hint, now).expect("still there").touch();
                        let entry = s.lookup(&kk, h, now).map(|(_, e)| (e.value, e.idle_ms));
                        prop_assert_eq!(entry, Some((v, 0)));
                    }
                }
            }
            for i in 0..40u16 {
                let ki = key(i);
                let hi = mode.hash(&ki);
                let want = s.find(&ki, hi);
                let own = hints.get(&i).copied().unwrap_or(Hint::NONE);
                let other = hints.get(&((i + 1) % 40)).copied().unwrap_or(Hint::NONE);
                for hint in [own, other, Hint::NONE] {
                    let got = s.find_hinted(&ki, hi, hint);
                    prop_assert_eq!(got, want, "key {} at step {}", i, step);
                    // A hinted hit is the key's entry or nothing (never another key's).
                    let now = Time(step as u64);
                    let hit = s.hinted_hit(&ki, hi, hint, now).map(|h| (h.value, h.idle_ms));
                    if hit.is_some() {
                        let entry = s.lookup(&ki, hi, now).map(|(_, e)| (e.value, e.idle_ms));
                        prop_assert_eq!(hit, entry);
                    }
                    if let Some(slot) = got {
                        prop_assert_eq!(s.get(slot, Time(step as u64)).key, ki);
                    }
                }
            }
        }
    }
}

/// A lookup's record in a one-packet burst: the pipeline's hint for it.
struct Lookup {
    hash: u64,
    hint: Hint,
    home: bool,
}

impl Pending for Lookup {
    fn ask(&mut self) -> Ask<'_> {
        let (hash, hint) = (self.hash, &mut self.hint);
        if self.home {
            Ask::Home { hash, hint }
        } else {
            Ask::Lookup { hash, hint }
        }
    }
}

/// The hint the burst pipeline's stages give a lookup of `hash` (reading its home record
/// first, or its header).
fn hint_of(s: &mut Shard, hash: u64, home: bool) -> Hint {
    let mut one = [Lookup { hash, hint: Hint::NONE, home }];
    let mut burst = Burst::new(s);
    burst.prefetch_first(s, &mut one, |_| {});
    burst.probe_tail(s, &mut one, |_| {});
    burst.finish(s, &mut one, |_| {});
    one[0].hint
}
