//! The traffic generator's per-frame cost (`gen::FrameFactory::next_frame`), one core, into
//! one reused buffer: what `spillway-gen` and the whole-pipeline benchmark pay per frame on
//! top of mbuf allocation and TX.
//!
//! `cargo bench -p spillway-gen --bench gen`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use spillway_gen::{FrameFactory, TrafficSpec};

fn bench(c: &mut Criterion) {
    let cases = [
        ("v4_tcp_64B_established", TrafficSpec { flows: 1_000_000, ..TrafficSpec::default() }),
        ("v4_tcp_64B_syn_100pct", TrafficSpec { syn_share: 1.0, ..TrafficSpec::default() }),
        (
            "v6_tcp_82B_established",
            TrafficSpec { flows: 1_000_000, ipv6_share: 1.0, ..TrafficSpec::default() },
        ),
        (
            "mix_v6_30_udp_30_syn_10_stamp",
            TrafficSpec {
                flows: 1_000_000,
                ipv6_share: 0.3,
                udp_share: 0.3,
                syn_share: 0.1,
                stamp: true,
                ..TrafficSpec::default()
            },
        ),
        (
            "v4_tcp_1514B_established",
            TrafficSpec { flows: 1_000_000, frame_len: 1514, ..TrafficSpec::default() },
        ),
        ("v4_fragments_100pct", TrafficSpec { fragment_share: 1.0, ..TrafficSpec::default() }),
    ];
    let mut g = c.benchmark_group("gen");
    g.throughput(Throughput::Elements(1));
    for (name, spec) in cases {
        let mut f = FrameFactory::new(&spec).expect("valid spec");
        let mut buf = vec![0u8; f.max_frame_len()];
        let mut t = 0u64;
        g.bench_function(name, |b| {
            b.iter(|| {
                t += 1;
                black_box(f.next_frame(black_box(&mut buf), t))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
