//! Maglev table build and lookup, and tracking-key construction + hashing (CH, CT-1).
//!
//! Run with `cargo bench -p spillway-core --bench maglev`. Measurement times are short on
//! purpose (shared 2-core machine); pass criterion flags after `--` for longer runs.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use spillway_core::addr::Addr;
use spillway_core::flow::{proto, tcp_flags, tracking_key, FlowHasher, PacketInfo};
use spillway_core::maglev::{backend_identity, MaglevMember, MaglevTable, DEFAULT_TABLE_SIZE};
use spillway_core::policy::{Affinity, TrackingMode};
use spillway_core::rng::SplitMix64;

/// Backends 10.0.x.y:80 with identities hashed by the default deployment hasher.
fn members(n: u16) -> Vec<MaglevMember> {
    let hasher = FlowHasher::default();
    (0..n)
        .map(|i| {
            let [hi, lo] = i.to_be_bytes();
            MaglevMember {
                id: i,
                identity: backend_identity(&hasher, Addr::v4(10, 0, hi, lo), 80),
                weight: 1,
            }
        })
        .collect()
}

/// `n` pseudo-random 64-bit values from `seed`.
fn random_u64s(n: usize, seed: u64) -> Vec<u64> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| rng.next_u64()).collect()
}

fn build(c: &mut Criterion) {
    let mut g = c.benchmark_group("maglev_build_m65537");
    g.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    g.sample_size(20);
    for n in [10u16, 100, 1000] {
        let ms = members(n);
        g.bench_with_input(BenchmarkId::from_parameter(n), &ms, |b, ms| {
            b.iter(|| MaglevTable::build(black_box(ms), DEFAULT_TABLE_SIZE));
        });
    }
    g.finish();
}

fn lookup(c: &mut Criterion) {
    const STREAM: usize = 4096;
    let table = MaglevTable::build(&members(1000), DEFAULT_TABLE_SIZE);
    let hashes = random_u64s(STREAM, 1);
    let mut g = c.benchmark_group("maglev_lookup");
    g.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    g.sample_size(30);
    g.throughput(Throughput::Elements(STREAM as u64));
    g.bench_function("n1000_m65537_stream4096", |b| {
        b.iter(|| {
            let mut acc = 0u32;
            for &h in black_box(&hashes) {
                acc = acc.wrapping_add(u32::from(table.lookup(h).unwrap_or(0)));
            }
            acc
        });
    });
    g.finish();
}

fn packets(n: usize, v6: bool) -> Vec<PacketInfo> {
    random_u64s(n, if v6 { 3 } else { 2 })
        .into_iter()
        .map(|r| {
            let b = r.to_le_bytes();
            let (src, dst) = if v6 {
                let mut s = [0u8; 16];
                s[0] = 0x20;
                s[1] = 0x01;
                s[8..].copy_from_slice(&b);
                let mut d = [0u8; 16];
                d[0] = 0xfd;
                d[15] = 1;
                (Addr(s), Addr(d))
            } else {
                (Addr::v4(b[0], b[1], b[2], b[3]), Addr::v4(198, 18, 0, 1))
            };
            PacketInfo {
                src,
                dst,
                proto: proto::TCP,
                sport: u16::from_le_bytes([b[4], b[5]]),
                dport: 443,
                fragment: false,
                tcp_flags: tcp_flags::ACK,
                icmp_error: false,
            }
        })
        .collect()
}

fn key_and_hash(c: &mut Criterion) {
    const STREAM: usize = 1024;
    let hasher = FlowHasher::default();
    let mut g = c.benchmark_group("tracking_key_hash");
    g.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    g.sample_size(30);
    g.throughput(Throughput::Elements(STREAM as u64));
    for (name, v6) in [("ipv4", false), ("ipv6", true)] {
        let pkts = packets(STREAM, v6);
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut acc = 0u64;
                for p in black_box(&pkts) {
                    let k = tracking_key(p, TrackingMode::PerConnection, Affinity::None, false, 7);
                    acc ^= hasher.hash(&k);
                }
                acc
            });
        });
    }
    g.finish();
}

criterion_group!(benches, build, lookup, key_and_hash);
criterion_main!(benches);
