//! The table's tests, by subject: `table.rs` (storing and finding), `eviction.rs` (making room),
//! `burst.rs` (the staged pipeline). The helpers below are theirs.

use super::layout::Head;
use super::*;
use crate::addr::Addr;

mod burst;
mod eviction;
mod table;

fn key(i: u32) -> FlowKey {
    let [a, b, c, d] = i.to_be_bytes();
    FlowKey {
        src: Addr::v4(10, b, c, d),
        dst: Addr::v4(192, 0, 2, a),
        sport: 1024 + (i % 60000) as u16,
        dport: 443,
        proto: 6,
        kind: 5,
        service: 1,
    }
}

fn val(b: u32) -> EntryValue {
    EntryValue { backend: b, epoch: 7, flags: 1 }
}

/// A line of the table a stage names: a bucket's header, or a way's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Named {
    Head(usize),
    Rec(usize, usize),
}

/// Which line of `s` the address `p` is, computed from the two arrays' addresses.
fn named_line(s: &Shard, p: *const u8) -> Named {
    let (heads, records) = (s.heads.as_ptr() as usize, s.records.as_ptr() as usize);
    let n = s.bucket_count();
    let p = p as usize;
    if (heads..heads + n * 64).contains(&p) {
        assert_eq!((p - heads) % 64, 0, "a header line starts at its header");
        Named::Head((p - heads) / 64)
    } else if (records..records + n * WAYS * 64).contains(&p) {
        assert_eq!((p - records) % 64, 0, "a record line starts at its record");
        let i = (p - records) / 64;
        Named::Rec(i / WAYS, i % WAYS)
    } else {
        panic!("{p:#x} is no line of the table");
    }
}

/// Hashes of signature 1.. (in order) whose candidate buckets are `want` in `s`.
fn hashes_with_candidates(s: &Shard, low: u64, want: (usize, usize)) -> Vec<u64> {
    (1..=0xffffu64)
        .map(|sig| (sig << 48) | low)
        .filter(|&h| s.candidate_buckets(h) == want)
        .collect()
}

/// Hashes of 2 x [`WAYS`] keys, those of primary 0, then those of primary 1, each with its
/// own signature and so its own secondary; all with home way 0.
fn crowding_hashes() -> Vec<u64> {
    (0..2 * WAYS as u64).map(|i| ((i + 1) << 48) | (i / WAYS as u64)).collect()
}

/// An eight-bucket table whose buckets 0 and 1 are full (keys 0.. at times 0.., the first
/// [`WAYS`] in bucket 0), each entry's other bucket the other one; and the hashes with
/// candidates (0, 1) then (1, 0), of which the first and last [`WAYS`] were inserted.
fn two_full_buckets() -> (Shard, Vec<u64>) {
    let mut s = Shard::with_capacity(8 * WAYS);
    let mut hashes = hashes_with_candidates(&s, 0, (0, 1));
    hashes.extend(hashes_with_candidates(&s, 1, (1, 0)));
    let (in_0, in_1) = (&hashes[..WAYS], &hashes[hashes.len() - WAYS..]);
    for (i, &h) in in_0.iter().chain(in_1).enumerate() {
        let w = u32::try_from(i).expect("small");
        s.insert(&key(w), h, val(w), Time(u64::from(w) * SEEN_UNIT_MS));
    }
    (s, hashes)
}

/// Every bucket's `overflow` equals the number of entries stored in their secondary with
/// that bucket as primary, and every entry sits in one of its key's candidate buckets, with
/// `in_secondary` and `other` saying which.
fn check_bookkeeping(s: &Shard, hash: impl Fn(&FlowKey) -> u64) {
    let mut counts = vec![0u32; s.bucket_count()];
    for (slot, e) in s.iter(Time(0)) {
        let r = s.record(slot);
        let (p, q) = s.candidate_buckets(hash(&e.key));
        assert_eq!(s.heads[slot.bucket()].sig[slot.way()], sig_of(hash(&e.key)));
        if r.in_secondary != 0 {
            assert!(slot.bucket() == q && q != p && r.other as usize == p);
            counts[p] += 1;
        } else {
            assert!(slot.bucket() == p && r.other as usize == q);
        }
    }
    for (b, head) in s.heads.iter().enumerate() {
        assert_eq!(head.overflow, counts[b], "bucket {b}");
        // A bucket known to be full is.
        assert!(!s.known_full(b) || head.empty_way().is_none(), "bucket {b} not full");
        // Every way's record carries the header's signature (0 when empty).
        for w in 0..WAYS {
            assert_eq!(s.records[b][w].sig, head.sig[w], "bucket {b} way {w}");
        }
    }
}

/// A packet's record in a test burst: what it asks of the table, and its hint.
#[derive(Clone, Copy, Debug)]
struct Req {
    kind: Kind,
    hash: u64,
    hint: Hint,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Home,
    Lookup,
    Insert,
}

impl Req {
    fn home(hash: u64) -> Req {
        Req { kind: Kind::Home, hash, hint: Hint::NONE }
    }
    fn lookup(hash: u64) -> Req {
        Req { kind: Kind::Lookup, hash, hint: Hint::NONE }
    }
    fn insert(hash: u64) -> Req {
        Req { kind: Kind::Insert, hash, hint: Hint::NONE }
    }
}

impl Pending for Req {
    fn ask(&mut self) -> Ask<'_> {
        let (hash, hint) = (self.hash, &mut self.hint);
        match self.kind {
            Kind::Home => Ask::Home { hash, hint },
            Kind::Lookup => Ask::Lookup { hash, hint },
            Kind::Insert => Ask::Insert { hash },
        }
    }
}

/// The lines each stage of a burst named, in the order named (null lines, "nothing to
/// read", left out).
#[derive(Debug, Default)]
struct Stages {
    first: Vec<Named>,
    probe: Vec<Named>,
    finish: Vec<Named>,
}

/// A set of lines, for comparing what a stage names where the order is not the behaviour.
fn set(lines: &[Named]) -> std::collections::BTreeSet<Named> {
    lines.iter().copied().collect()
}

/// Runs the pipeline over `reqs` as the data plane runs a burst: the first lines of all, the
/// first `early` probed in the first pass (their inserts left for the last stage), the rest
/// in the tail, then the last stage.
fn run(s: &mut Shard, reqs: &mut [Req], early: usize) -> Stages {
    let lines = std::cell::RefCell::new(Vec::new());
    let take = |s: &Shard| -> Vec<Named> {
        lines
            .borrow_mut()
            .drain(..)
            .filter(|p: &*const u8| !p.is_null())
            .map(|p| named_line(s, p))
            .collect()
    };
    let prefetch = |p: *const u8| lines.borrow_mut().push(p);
    let mut burst = Burst::new(s);
    for group in reqs.chunks_mut(16) {
        burst.prefetch_first(s, group, prefetch);
    }
    let first = take(s);
    let (early_reqs, tail) = reqs.split_at_mut(early.min(reqs.len()));
    burst.probe(s, early_reqs, prefetch);
    burst.probe_tail(s, tail, prefetch);
    let probe = take(s);
    burst.finish(s, reqs, prefetch);
    let finish = take(s);
    Stages { first, probe, finish }
}
