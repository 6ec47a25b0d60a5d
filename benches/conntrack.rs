//! Conntrack shard micro-benchmarks: lookup hit, lookup miss and insert, one at a time and
//! through the burst pipeline (`conntrack::burst`, bursts of 64 as the data plane runs it), at 1K entries (cache-resident) and 1M entries (a 128 MiB table: bigger than the
//! L1/L2 and the TLB reach, so nearly every lookup misses them).
//!
//! Keys are random IPv4 5-tuples, hashed once with the table's `key_hash` before measuring; lookups
//! walk a random permutation of them so that consecutive lookups touch unrelated buckets.
//! The table is built once per size, outside the measurement. Throughput is reported in
//! elements (lookups or inserts) per second.
//!
//! `dump_slice`: one slice of a table dump (`spillwayctl flows`) from a 1M-entry table.
//!
//! `cargo bench -p spillway-core --bench conntrack`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use spillway_core::addr::Addr;
use spillway_core::conntrack::key_hash;
use spillway_core::conntrack::{Ask, Burst, EntryValue, Hint, Pending, Shard};
use spillway_core::flow::FlowKey;
use spillway_core::mailbox::{Mailbox, Query, SLICE_BUCKETS};
use spillway_core::rng::SplitMix64;
use spillway_core::time::Time;

/// Lookups per measured iteration.
const CHUNK: usize = 1024;

fn random_key(rng: &mut SplitMix64) -> FlowKey {
    let r = rng.next_u64();
    let [a, b, c, d, e, f, g, h] = r.to_le_bytes();
    let ports = rng.next_u64();
    FlowKey {
        src: Addr::v4(a, b, c, d),
        dst: Addr::v4(198, 51, e, f),
        sport: ports as u16,
        dport: [80, 443, 53, 8080][usize::from(g & 3)],
        proto: if h & 1 == 0 { 6 } else { 17 },
        kind: 5,
        service: u16::from(h >> 4),
    }
}

/// `n` distinct random keys with their hashes.
fn keys(rng: &mut SplitMix64, n: usize) -> (Vec<FlowKey>, Vec<u64>) {
    let mut seen = std::collections::HashSet::with_capacity(n);
    let mut ks = Vec::with_capacity(n);
    while ks.len() < n {
        let k = random_key(rng);
        if seen.insert(k) {
            ks.push(k);
        }
    }
    let hs = ks.iter().map(key_hash).collect();
    (ks, hs)
}

fn shuffle<T>(rng: &mut SplitMix64, v: &mut [T]) {
    for i in (1..v.len()).rev() {
        v.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
}

/// A rolling window over a key set, so successive iterations look up different keys.
struct Stream {
    keys: Vec<FlowKey>,
    hashes: Vec<u64>,
    pos: usize,
}

impl Stream {
    /// Keys padded to a multiple of CHUNK by repeating from the start.
    fn new(mut keys: Vec<FlowKey>, mut hashes: Vec<u64>) -> Stream {
        let n = keys.len();
        let pad = (CHUNK - n % CHUNK) % CHUNK;
        for i in 0..pad {
            keys.push(keys[i % n]);
            hashes.push(hashes[i % n]);
        }
        Stream { keys, hashes, pos: 0 }
    }

    fn next_chunk(&mut self) -> (&[FlowKey], &[u64]) {
        let p = self.pos;
        self.pos = (p + CHUNK) % self.keys.len();
        (&self.keys[p..p + CHUNK], &self.hashes[p..p + CHUNK])
    }
}

fn find_all(shard: &Shard, keys: &[FlowKey], hashes: &[u64]) -> usize {
    keys.iter().zip(hashes).filter(|(k, &h)| shard.find(k, h).is_some()).count()
}

/// A lookup's record for the burst pipeline: its key's hash and the hint the stages find.
struct Lookup {
    hash: u64,
    hint: Hint,
}

impl Pending for Lookup {
    fn ask(&mut self) -> Ask<'_> {
        Ask::Lookup { hash: self.hash, hint: &mut self.hint }
    }
}

/// Prefetch intrinsic for the pipeline's stages (the core crate has no `unsafe`).
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The lookups in bursts of 64 through the burst pipeline (first lines of a group of 16, probes
/// after the first pass, second probes), then each key found from its hint.
fn find_all_burst(shard: &mut Shard, keys: &[FlowKey], hashes: &[u64]) -> usize {
    let mut hits = 0;
    for (k, h) in keys.chunks(64).zip(hashes.chunks(64)) {
        let mut burst: Vec<Lookup> =
            h.iter().map(|&hash| Lookup { hash, hint: Hint::NONE }).collect();
        let mut table = Burst::new(shard);
        for group in burst.chunks_mut(16) {
            table.prefetch_first(shard, group, prefetch);
        }
        table.probe_tail(shard, &mut burst, prefetch);
        table.finish(shard, &mut burst, prefetch);
        hits += k
            .iter()
            .zip(&burst)
            .filter(|(k, l)| shard.find_hinted(k, l.hash, l.hint).is_some())
            .count();
    }
    hits
}

/// A shard of `n` random keys and the streams to look up: `hit` walks the keys in random
/// order, `miss` fresh random keys that are not in the table. The generator is returned for
/// more keys.
struct Filled {
    rng: SplitMix64,
    shard: Shard,
    hit: Stream,
    miss: Stream,
}

fn filled(n: usize) -> Filled {
    let mut rng = SplitMix64::new(0x5eed ^ n as u64);
    let (present, present_h) = keys(&mut rng, n);
    let mut shard = Shard::with_capacity(n + n / 4);
    for (k, &h) in present.iter().zip(&present_h) {
        shard.insert(k, h, EntryValue { backend: 1, epoch: 0, flags: 0 }, Time(0));
    }
    let mut order: Vec<usize> = (0..n).collect();
    shuffle(&mut rng, &mut order);
    let hit = Stream::new(
        order.iter().map(|&i| present[i]).collect(),
        order.iter().map(|&i| present_h[i]).collect(),
    );
    let (absent, absent_h) = keys(&mut rng, n.max(CHUNK));
    Filled { rng, shard, hit, miss: Stream::new(absent, absent_h) }
}

fn bench_size(c: &mut Criterion, n: usize, label: &str) {
    let Filled { mut rng, mut shard, mut hit, mut miss } = filled(n);
    eprintln!(
        "conntrack {label}: {} entries in capacity {} ({} MiB), {} evicted while filling",
        shard.len(),
        shard.capacity(),
        shard.bytes() >> 20,
        shard.stats().evictions
    );
    let (fresh, fresh_h) = keys(&mut rng, (n / 4).max(16 * CHUNK));
    let mut fresh = Stream::new(fresh, fresh_h);

    let mut g = c.benchmark_group(format!("conntrack/{label}"));
    g.throughput(Throughput::Elements(CHUNK as u64));
    g.bench_function("hit", |b| {
        b.iter(|| {
            let (k, h) = hit.next_chunk();
            black_box(find_all(&shard, k, h))
        })
    });
    g.bench_function("miss", |b| {
        b.iter(|| {
            let (k, h) = miss.next_chunk();
            black_box(find_all(&shard, k, h))
        })
    });
    for (name, stream) in [("hit", &mut hit), ("miss", &mut miss)] {
        g.bench_function(BenchmarkId::new(format!("{name}_burst"), 64), |b| {
            b.iter(|| {
                let (k, h) = stream.next_chunk();
                black_box(find_all_burst(&mut shard, k, h))
            })
        });
    }
    // Insert of new keys at constant occupancy: CHUNK timed inserts, then (untimed) the same
    // keys are removed again.
    let mut slots = Vec::with_capacity(CHUNK);
    g.bench_function("insert", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for i in 0..iters {
                let (k, h) = fresh.next_chunk();
                let now = Time(i);
                slots.clear();
                let t = Instant::now();
                for (k, &h) in k.iter().zip(h) {
                    let out =
                        shard.insert(k, h, EntryValue { backend: 2, epoch: 0, flags: 0 }, now);
                    slots.push(out.slot);
                }
                total += t.elapsed();
                for &s in &slots {
                    shard.remove(s);
                }
            }
            total
        })
    });
    g.finish();
}

/// `CONNTRACK_AB=1 cargo bench --bench conntrack`: instead of criterion, run the lookup
/// variants interleaved in short rounds and print the best and median rate of each. On a
/// shared, noisy machine this compares variants far more fairly than sequential runs.
fn ab_report(n: usize, label: &str) {
    let Filled { mut shard, mut hit, mut miss, .. } = filled(n);
    type Variant = (&'static str, bool, fn(&mut Shard, &[FlowKey], &[u64]) -> usize);
    let variants: [Variant; 4] = [
        ("hit single", true, |s, k, h| find_all(s, k, h)),
        ("hit burst 64", true, find_all_burst),
        ("miss single", false, |s, k, h| find_all(s, k, h)),
        ("miss burst 64", false, find_all_burst),
    ];
    let rounds = 40;
    let chunks = (64 * 1024 / CHUNK).max(1);
    let mut rates = vec![Vec::with_capacity(rounds); variants.len()];
    for _ in 0..rounds {
        for (v, &(_, is_hit, f)) in variants.iter().enumerate() {
            let stream = if is_hit { &mut hit } else { &mut miss };
            let t = Instant::now();
            let mut found = 0;
            for _ in 0..chunks {
                let (k, h) = stream.next_chunk();
                found += f(&mut shard, k, h);
            }
            let el = t.elapsed();
            black_box(found);
            rates[v].push((chunks * CHUNK) as f64 / el.as_secs_f64() / 1e6);
        }
    }
    for (v, &(name, _, _)) in variants.iter().enumerate() {
        let r = &mut rates[v];
        r.sort_by(|a, b| b.total_cmp(a));
        println!("{label:>3} {name:<26} best {:6.1} M/s  median {:6.1} M/s", r[0], r[r.len() / 2]);
    }
}

/// `CONNTRACK_LOAD=1 cargo bench --bench conntrack`: the insert of new keys into an empty
/// table and into one filled to 90% (the same capacity, 1M entries), in interleaved rounds
/// of CHUNK inserts (each round's keys removed again, untimed); prints the median rates and
/// their ratio. The goal is an insert at >= 90% load no slower than 2x the empty one.
fn load_report() {
    let capacity = 1 << 20;
    let mut rng = SplitMix64::new(0x10ad);
    let mut tables: Vec<(&str, Shard)> = Vec::new();
    for (label, load) in [("empty", 0.0), ("90% full", 0.9)] {
        let mut shard = Shard::with_capacity(capacity);
        let n = (shard.capacity() as f64 * load) as usize;
        let (ks, hs) = keys(&mut rng, n.max(1));
        for (k, &h) in ks.iter().zip(&hs).take(n) {
            shard.insert(k, h, EntryValue { backend: 1, epoch: 0, flags: 0 }, Time(0));
        }
        eprintln!(
            "conntrack load: {label}: {} of {} entries ({:.1}%), {} evicted while filling",
            shard.len(),
            shard.capacity(),
            shard.len() as f64 * 100.0 / shard.capacity() as f64,
            shard.stats().evictions
        );
        tables.push((label, shard));
    }
    let (fresh, fresh_h) = keys(&mut rng, 64 * CHUNK);
    let mut fresh = Stream::new(fresh, fresh_h);
    let mut rates = vec![Vec::new(); tables.len()];
    let mut slots = Vec::with_capacity(CHUNK);
    for round in 0..200u64 {
        for (t, (_, shard)) in tables.iter_mut().enumerate() {
            let (k, h) = fresh.next_chunk();
            slots.clear();
            let start = Instant::now();
            for (k, &h) in k.iter().zip(h) {
                slots.push(
                    shard
                        .insert(k, h, EntryValue { backend: 2, epoch: 0, flags: 0 }, Time(round))
                        .slot,
                );
            }
            let el = start.elapsed();
            for &s in &slots {
                shard.remove(s);
            }
            rates[t].push(CHUNK as f64 / el.as_secs_f64() / 1e6);
        }
    }
    let mut medians = Vec::new();
    for ((label, shard), r) in tables.iter().zip(&mut rates) {
        r.sort_by(|a, b| b.total_cmp(a));
        let m = r[r.len() / 2];
        medians.push(m);
        println!(
            "insert into {label:<9} median {m:6.2} M/s ({:5.1} ns), best {:6.2} M/s; evictions {}",
            1e3 / m,
            r[0],
            shard.stats().evictions
        );
    }
    println!("90% full / empty insert time: {:.2}x (goal <= 2x)", medians[0] / medians[1]);
}

/// A table dump's slice (`mailbox::SliceQuery`, 16 buckets): how long a worker pauses, between
/// two bursts, for each slice while `spillwayctl flows` runs. The query's buffer is made by the
/// control thread in the daemon; here it is inside the timed part.
fn bench_dump_slice(c: &mut Criterion, n: usize, label: &str) {
    let Filled { shard, .. } = filled(n);
    let mailbox = Mailbox::default();
    let mut from = 0;
    let mut g = c.benchmark_group(format!("conntrack/{label}"));
    g.throughput(Throughput::Elements(1));
    g.bench_function(BenchmarkId::new("dump_slice", SLICE_BUCKETS), |b| {
        b.iter(|| {
            let rx = mailbox.ask_slice(from);
            let Some(Query::Slice(q)) = mailbox.take() else { unreachable!("a slice query") };
            q.answer(&shard, Time(0));
            from = (from + SLICE_BUCKETS) % shard.bucket_count();
            black_box(rx)
        })
    });
}

fn benches(c: &mut Criterion) {
    if std::env::var_os("CONNTRACK_LOAD").is_some() {
        load_report();
        return;
    }
    if std::env::var_os("CONNTRACK_AB").is_some() {
        ab_report(1_000, "1K");
        ab_report(1_000_000, "1M");
        return;
    }
    bench_size(c, 1_000, "1K");
    bench_size(c, 1_000_000, "1M");
    bench_dump_slice(c, 1_000_000, "1M");
}

criterion_group! {
    name = conntrack;
    config = Criterion::default()
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(20);
    targets = benches
}
criterion_main!(conntrack);
