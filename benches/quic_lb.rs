//! QUIC-LB decoding of a destination connection ID, per mode: what a QUIC packet that misses
//! the connection table pays to find its server (spillway_core::quic_lb).
//!
//! Run with `cargo bench -p spillway-core --bench quic_lb`. Each iteration decodes 1,024
//! different connection IDs of one configuration (the draft's appendix lengths).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use spillway_core::quic_lb::{Config, Configs};
use spillway_core::rng::SplitMix64;

const IDS: usize = 1024;

fn decode(c: &mut Criterion) {
    let key = Some([
        0x8f, 0x95, 0xf0, 0x92, 0x45, 0x76, 0x5f, 0x80, 0x25, 0x69, 0x34, 0xe5, 0x0c, 0x66, 0x20,
        0x7f,
    ]);
    let cases = [
        ("plaintext_3+4", Config::new(0, 3, 4, None).unwrap()),
        ("single_pass_8+8", Config::new(0, 8, 8, key).unwrap()),
        ("four_pass_3+4", Config::new(0, 3, 4, key).unwrap()),
        ("four_pass_9+9", Config::new(0, 9, 9, key).unwrap()),
        ("four_pass_10+5", Config::new(0, 10, 5, key).unwrap()),
    ];
    let mut g = c.benchmark_group("quic_lb_decode");
    g.measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    g.throughput(Throughput::Elements(IDS as u64));
    for (name, config) in cases {
        // Random octets after a first octet naming config 0: every one decodes (to some ID).
        let mut rng = SplitMix64::new(7);
        let len = config.cid_len();
        let cids: Vec<[u8; 20]> = (0..IDS)
            .map(|_| {
                let mut b = [0u8; 20];
                for x in &mut b[1..len] {
                    *x = rng.next_u64() as u8;
                }
                b[0] = (len - 1) as u8;
                b
            })
            .collect();
        let mut configs = Configs::new();
        configs.insert(config);
        g.bench_with_input(BenchmarkId::from_parameter(name), &cids, |b, cids| {
            b.iter(|| {
                let mut x = 0u8;
                for cid in cids {
                    x ^= configs.decode(black_box(cid)).map_or(0, |(_, s)| s.as_bytes()[0]);
                }
                x
            })
        });
    }
    g.finish();
}

criterion_group!(benches, decode);
criterion_main!(benches);
