//! What is measured: the services the balancer serves, the traffic, and the scenarios (which
//! traffic, which table, which loop on the worker's lcore), chosen by `--only` and `--pairs`.

use std::time::Duration;

use spillway_core::addr::Addr;
use spillway_core::model::{Encap, Ports, RuleProtocol};
use spillway_core::snapshot::Snapshot;
use spillway_gen::{Order, TrafficSpec};

use crate::fixture::{self, a, model, service, NODE_MAC};
use crate::floor::Floor;

const VIP_IPIP: &str = "198.18.0.100";
const VIP_GUE: &str = "198.18.0.101";
const VIP6: &str = "fd00::100";
const VIP_QUIC: &str = "198.18.0.110";
const VIP_UDP: &str = "198.18.0.111";
pub const BACKENDS: u8 = 16;

/// Five services over 16 backends each: IPIP and GUE on IPv4 VIPs, IP6IP6 on an IPv6 VIP,
/// and UDP port 443 with QUIC-LB and without ([`fixture::quic_service`], `--only quic`).
pub fn snapshot() -> Snapshot {
    let services: [(&str, Encap, &str, bool); 3] = [
        ("ipip", Encap::Ipip, VIP_IPIP, false),
        ("gue", Encap::Gue { port: 6080 }, VIP_GUE, false),
        ("v6", Encap::Ipip, VIP6, true),
    ];
    let v4: Vec<Addr> = (1..=BACKENDS).map(|i| backend(false, i)).collect();
    let mut udp = service("udp", Encap::Ipip, RuleProtocol::Udp, &[VIP_UDP], "g", v4.clone());
    udp.rules[0].ports = Ports::List(vec![(443, 443)]);
    let quic = fixture::quic_service("quic", VIP_QUIC, &v4);
    fixture::snapshot(model(
        "",
        services
            .map(|(name, encap, vip, v6)| {
                let backends = (1..=BACKENDS).map(|i| backend(v6, i));
                service(name, encap, RuleProtocol::L3Default, &[vip], "g", backends)
            })
            .into_iter()
            .chain([quic, udp]),
    ))
}

/// `--only quic`'s traffic to `vip`: UDP to port 443, 1,024 established flows and one packet
/// in ten from a new 4-tuple, every one a QUIC short header with one four-pass connection ID
/// of backend 0 (only the first packet of a 4-tuple reads it).
fn quic_spec(vip: &str) -> TrafficSpec {
    let cid = fixture::quic_cid(crate::quic_issue::issue, 2, 0);
    TrafficSpec {
        udp_share: 1.0,
        syn_share: 0.1,
        dst_v4: vip.parse().expect("vip"),
        dst_port: 443,
        udp_payload: [0x40].iter().chain(&cid).copied().collect(),
        ..spec(1024)
    }
}

pub fn backend(v6: bool, i: u8) -> Addr {
    if v6 {
        a(&format!("fd00::1:{i}"))
    } else {
        Addr::v4(198, 18, 1, i)
    }
}

/// What one scenario asks for.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: &'static str,
    pub balance: bool,
    /// Instead of the worker, the floor loop ([`floor_loop`](crate::floor::floor_loop)) over this table.
    pub floor: Option<Floor>,
    pub spec: TrafficSpec,
    /// Conntrack capacity of the worker.
    pub capacity: usize,
    /// Flood guard rate (new entries per second per worker).
    pub guard: Option<u32>,
    /// Packets sent before the measured window (flows get their entries).
    pub warm: Duration,
}

pub fn spec(flows: u32) -> TrafficSpec {
    TrafficSpec {
        flows,
        dst_v4: VIP_IPIP.parse().expect("vip"),
        dst_v6: VIP6.parse().expect("vip"),
        dst_mac: NODE_MAC,
        src_mac: [0x02, 0, 0, 0, 0, 0x0c],
        order: Order::Random,
        seed: 7,
        ..TrafficSpec::default()
    }
}

/// Every scenario in the order they run, `--only`'s opt-in ones included (`select` drops
/// those unless named): `big` is the flow count of the large-table scenarios (smaller with
/// `--quick`).
pub fn list(big: u32) -> Vec<Scenario> {
    let mut scenarios = vec![Scenario {
        name: "io_forward",
        balance: false,
        floor: None,
        spec: spec(1024),
        capacity: 0,
        guard: None,
        warm: Duration::from_millis(300),
    }];
    let lb = |name, spec: TrafficSpec, capacity: usize, warm_ms| Scenario {
        name,
        balance: true,
        floor: None,
        spec,
        capacity,
        guard: None,
        warm: Duration::from_millis(warm_ms),
    };
    scenarios.push(lb("established_ipip_1k", spec(1024), 4096, 300));
    scenarios.push(lb("established_ipip_1m", spec(big), big as usize * 2, 3000));
    // Run only when named by `--only` (OPT_IN): 1.68M flows in the same 2M-entry table, 80%
    // full, where 8% of the entries are in their secondary bucket (1% at half load).
    scenarios.push(lb("established_ipip_1m_80", spec(1_677_721), big as usize * 2, 4000));
    scenarios.push(lb(
        "established_gue_1k",
        TrafficSpec { dst_v4: VIP_GUE.parse().expect("vip"), ..spec(1024) },
        4096,
        300,
    ));
    scenarios.push(lb(
        "established_ipv6_1k",
        TrafficSpec { ipv6_share: 1.0, ..spec(1024) },
        4096,
        300,
    ));
    // A 16M-entry table (1 GiB), the largest this benchmark allocates: at 5-8 Mpps a run of
    // 2.3 s fills 70-99% of it, so the figure includes inserts into a filling table (the row's
    // `entries` says how full). A full table under a flood is the guarded scenario below.
    scenarios.push(lb("syn_100", TrafficSpec { syn_share: 1.0, ..spec(1024) }, 1 << 24, 300));
    // Run only when named by `--only` (OPT_IN): the same with a 64M-entry table (4.3 GiB), room
    // for every SYN of the run (it ends about a third full): new connections alone, without
    // the inserts into a nearly full table that `syn_100` ends with.
    scenarios.push(lb("syn_100_room", TrafficSpec { syn_share: 1.0, ..spec(1024) }, 1 << 26, 300));
    // And with an 8M-entry table (512 MiB), full after about a second: a SYN flood with no
    // flood guard, where most crowded inserts evict.
    scenarios.push(lb("syn_100_full", TrafficSpec { syn_share: 1.0, ..spec(1024) }, 1 << 23, 300));
    scenarios.push(lb(
        "mix",
        TrafficSpec { syn_share: 0.05, udp_share: 0.2, ipv6_share: 0.2, ..spec(big) },
        big as usize * 2,
        3000,
    ));
    // Run only with `--only quic` (OPT_IN): a 16M-entry table as `syn_100`'s (each run's new
    // 4-tuples are a tenth of its packets).
    scenarios.push(lb("udp_10pct_new", quic_spec(VIP_UDP), 1 << 24, 300));
    scenarios.push(lb("quic_10pct_moving", quic_spec(VIP_QUIC), 1 << 24, 300));
    scenarios.extend(floors(big));
    scenarios.push(Scenario {
        guard: Some(200_000),
        ..lb("syn_flood_guarded", TrafficSpec { syn_share: 0.95, ..spec(1024) }, 1 << 16, 300)
    });
    // The baseline again, last: on this shared VM the generator's core changes speed under a
    // run (2-4x, the host's doing), so a ratio means something only when the two baselines
    // agree (`baseline drift` below).
    scenarios.push(Scenario { name: "io_forward_end", ..scenarios[0].clone() });
    scenarios
}

/// The floor scenarios ([`Floor`]).
fn floors(big: u32) -> Vec<Scenario> {
    // The floor (`floor_loop`): what any encapsulating balancer must do per packet, without
    // Spillway's code: touch each frame and write its outer header; then the same with one
    // cache line of a table the size of the 1M-flow scenario's read and written per packet.
    let floor = |name, lines: usize, heads: usize| Scenario {
        name,
        balance: false,
        floor: Some(Floor { lines, heads }),
        spec: spec(big),
        capacity: 0,
        guard: None,
        warm: Duration::from_millis(300),
    };
    let lines_1m = (big as usize * 2).next_power_of_two();
    vec![
        floor("floor_touch", 0, 0),
        floor("floor_table_1m", lines_1m, 0),
        // The 1M-flow connection table's two lines per packet: a line of an array as large as
        // its bucket headers (8 MiB, 32 bytes per 8 entries), whose content names a line of one
        // as large as its records (128 MiB), prefetched 16 packets later as the worker's probe
        // does in bursts of up to 32.
        floor("floor_two_lines_1m", lines_1m, lines_1m / 16),
        // One line per packet of a table as large as `syn_100`'s (16M lines, 1 GiB): the least
        // a new connection costs in memory when the table has room for every SYN of the run.
        floor("floor_table_1g", 1 << 24, 0),
        // The same two lines in `syn_100`'s table: a header in 64 MiB, a record in 1 GiB.
        floor("floor_two_lines_1g", 1 << 24, 1 << 20),
    ]
}

/// Scenarios run only when `--only` names them.
const OPT_IN: [&str; 5] = [
    "established_ipip_1m_80",
    "syn_100_room",
    "syn_100_full",
    "udp_10pct_new",
    "quic_10pct_moving",
];

/// Keeps the scenarios that `--only` asks for (`only`: its value, if given): that scenario
/// between the baselines, nothing else (for profiling); `--only scaling`: none (the
/// replay-source scaling run alone: one worker on its own core, no cross-core traffic, the
/// steadiest measure of the worker on this machine).
pub fn select(scenarios: &mut Vec<Scenario>, only: Option<&str>) {
    let quic = |name: &str| name == "udp_10pct_new" || name == "quic_10pct_moving";
    scenarios.retain(|s| {
        !OPT_IN.contains(&s.name) || only == Some(s.name) || (only == Some("quic") && quic(s.name))
    });
    if let Some(only) = only {
        scenarios.retain(|s| {
            only != "scaling"
                && (s.name == "io_forward"
                    || s.name == "io_forward_end"
                    || s.name == only
                    || (only == "quic" && quic(s.name))
                    || (only == "floor"
                        && (s.floor.is_some()
                            || s.name == "established_ipip_1m"
                            || s.name == "syn_100")))
        });
    }
}

/// `--pairs N` (with `--only SCENARIO`): the baseline and the scenario alternate N times, each
/// scenario between two baselines of its own, and the shares are summarised over the pairs
/// (`pairs:` lines): on a host whose speed changes from one second to the next, the median of
/// N neighbouring pairs says more than one share against the run's first baseline.
pub fn pairs(scenarios: &[Scenario], only: Option<&str>, pairs: usize) -> Vec<Scenario> {
    let Some(name) = only.filter(|o| !["floor", "flood", "scaling"].contains(o)) else {
        panic!("--pairs needs --only with one scenario's name");
    };
    let pick = |n: &str| scenarios.iter().find(|s| s.name == n).cloned();
    let (Some(base), Some(sc)) = (pick("io_forward"), pick(name)) else {
        panic!("--only {name}: no such scenario");
    };
    let mut scenarios = vec![base.clone()];
    for _ in 0..pairs {
        scenarios.push(sc.clone());
        scenarios.push(base.clone());
    }
    scenarios.push(Scenario { name: "io_forward_end", ..base });
    scenarios
}
