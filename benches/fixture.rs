//! The model set-up the packet-path benchmark (`benches/path.rs`), the whole-pipeline
//! benchmark (`benches/pipeline/`) and the packet-path tests (`dataplane/tests/path.rs`)
//! share: services with VIP rules over one group of backends, their snapshot, and the
//! balancer node. Included by each with `mod fixture;` (`#[path]` from the tests); not a
//! target of its own.

#![allow(dead_code)]

use spillway_core::addr::{Addr, Prefix};
use spillway_core::conntrack::{key_hash, EntryValue, Shard};
use spillway_core::counters::WorkerCounters;
use spillway_core::flow::FlowKey;
use spillway_core::model::{
    Encap, Endpoint, Group, Model, Ports, Rule, RuleDest, RuleProtocol, Service, Zone,
};
use spillway_core::rng::SplitMix64;
use spillway_core::snapshot::Snapshot;
use spillway_core::state::PolicyState;
use spillway_core::time::Time;
use spillway_dataplane::neighbour::{EventQueue, NeighbourTable, NextHopCache};
use spillway_dataplane::node::Node;
use spillway_dataplane::path::PathCtx;

/// The balancer node's MAC.
pub const NODE_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

/// An address from its text.
pub fn a(s: &str) -> Addr {
    s.parse().expect("address")
}

/// A service `name` with a rule per VIP in `vips` (`protocol`, all ports) and one group
/// `group` in zone 0, weight 1, no failover, over `backends` (port 0: the packet's).
pub fn service(
    name: &str,
    encap: Encap,
    protocol: RuleProtocol,
    vips: &[&str],
    group: &str,
    backends: impl IntoIterator<Item = Addr>,
) -> Service {
    let mut s = Service::new(name);
    s.encap = encap;
    for vip in vips {
        s.rules.push(Rule { dest: RuleDest::Vip(a(vip)), protocol, ports: Ports::All });
    }
    s.groups.push(Group {
        name: group.into(),
        zone: 0,
        failover: false,
        weight: 1,
        endpoints: backends.into_iter().map(|addr| Endpoint { addr, port: 0 }).collect(),
    });
    s
}

/// A model of `services` in one zone `z` of `region` (the balancer's region too).
pub fn model(region: &str, services: impl IntoIterator<Item = Service>) -> Model {
    let mut m = Model::empty();
    m.region = region.into();
    m.zones.push(Zone { name: "z".into(), region: region.into() });
    m.services.extend(services);
    m
}

/// The snapshot a fresh control plane publishes for `m` at time 0.
pub fn snapshot(m: Model) -> Snapshot {
    let mut st = PolicyState::new(true);
    st.apply_model(m, Time::ZERO).expect("valid model");
    st.snapshot(Time::ZERO)
}

/// The balancer node: [`NODE_MAC`], 198.18.0.2/16, with `ipv6` also fd00::2/64; no gateways,
/// MTU 1500.
pub fn node(ipv6: bool) -> Node {
    let prefix = |s: &str| s.parse::<Prefix>().expect("prefix");
    Node {
        mac: NODE_MAC,
        ipv4: Some((a("198.18.0.2"), prefix("198.18.0.0/16"))),
        ipv6: ipv6.then(|| (a("fd00::2"), prefix("fd00::/64"))),
        gateway_v4: None,
        gateway_v6: None,
        mtu: 1500,
    }
}

/// A 64-byte Ethernet/IPv4/TCP frame from `src`:`sport` to the VIP 198.18.0.100:80 with TCP
/// `flags`, for [`NODE_MAC`] (the benchmarks' traffic).
pub fn tcp_frame(src: [u8; 4], sport: u16, flags: u8) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0xc, 0x08, 0x00];
    let mut ip = vec![0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0];
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&[198, 18, 0, 100]);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&80u16.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    f.resize(64, 0);
    f
}

/// The packet path's context over these parts, at time zero, without an exception path (the
/// in-memory benchmarks).
pub fn path_ctx<'a>(
    snap: &'a Snapshot,
    shard: &'a mut Shard,
    node: &'a Node,
    neighbours: &'a NeighbourTable,
    next_hops: &'a NextHopCache,
    events: &'a EventQueue,
    counters: &'a WorkerCounters,
) -> PathCtx<'a> {
    PathCtx {
        snap,
        shard,
        now: Time::ZERO,
        node,
        neighbours,
        next_hops,
        events,
        counters,
        kernel: false,
        waiting: spillway_dataplane::path::WaitingSlots::default(),
    }
}

/// Fill `shard` to `percent` of its capacity with entries of random TCP keys (sources in
/// 198.19.0.0/16, destinations in 198.18.0.0/16, service 7, which no frame of the benchmarks
/// uses), drawn from `seed`: a loaded table for new connections to be inserted into.
pub fn fill_to(shard: &mut Shard, percent: usize, seed: u64) {
    let mut rng = SplitMix64::new(seed);
    let value = EntryValue { backend: u32::MAX, epoch: 0, flags: 0 };
    while shard.len() * 100 < shard.capacity() * percent {
        let [a, b, c, d, e, f, ..] = rng.next_u64().to_le_bytes();
        let key = FlowKey {
            src: Addr::v4(198, 19, a, b),
            dst: Addr::v4(198, 18, c, d),
            sport: u16::from_le_bytes([e, f]),
            dport: 80,
            proto: 6,
            kind: 5,
            service: 7,
        };
        shard.insert(&key, key_hash(&key), value, Time::ZERO);
    }
}

/// The QUIC-LB configurations of [`quic_service`]: (name, config id, nonce length, keyed), all
/// with 3-octet server IDs: plaintext, single pass (3 + 13 = 16 octets), four pass (3 + 5).
pub const QUIC_MODES: [(&str, u8, u8, bool); 3] =
    [("plaintext", 0, 4, false), ("single_pass", 1, 13, true), ("four_pass", 2, 5, true)];

/// The key of [`QUIC_MODES`]' keyed configurations.
pub const QUIC_KEY: [u8; 16] =
    [0x8f, 0x95, 0xf0, 0x92, 0x45, 0x76, 0x5f, 0x80, 1, 2, 3, 4, 5, 6, 7, 8];

/// The server ID of `backends[i]` in [`quic_service`], under every configuration.
pub fn quic_server_id(i: usize) -> [u8; 3] {
    [0x0a, 0x01, i as u8]
}

/// A service `name` on `vip`, UDP port 443, IPIP over `backends`, with QUIC-LB: the
/// configurations of [`QUIC_MODES`] and [`quic_server_id`] for each backend under each.
pub fn quic_service(name: &str, vip: &str, backends: &[Addr]) -> Service {
    use spillway_core::model::{QuicLbPolicy, QuicServerId};
    use spillway_core::quic_lb::{Config, Configs, ServerId};
    let mut s = service(name, Encap::Ipip, RuleProtocol::Udp, &[vip], "g", backends.to_vec());
    s.rules[0].ports = Ports::List(vec![(443, 443)]);
    let mut configs = Configs::new();
    for (_, id, nonce, keyed) in QUIC_MODES {
        configs.insert(Config::new(id, 3, nonce, keyed.then_some(QUIC_KEY)).expect("in bounds"));
    }
    let server_ids = backends
        .iter()
        .enumerate()
        .flat_map(|(i, &addr)| {
            QUIC_MODES.map(|(_, config, _, _)| QuicServerId {
                endpoint: Endpoint { addr, port: 0 },
                config,
                server_id: ServerId::new(&quic_server_id(i)).expect("3 octets"),
            })
        })
        .collect();
    s.quic_lb = Some(QuicLbPolicy { configs, server_ids });
    s
}

/// A QUIC server's encoder: config id, server ID, nonce, key -> connection ID.
pub type Issue = fn(u8, &[u8], &[u8], Option<[u8; 16]>) -> Vec<u8>;

/// Connection `i`'s ID under [`QUIC_MODES`]`[mode]`, made by `issue` (the tests' encoder,
/// `shared/tests/common/quic_issue.rs`, which each benchmark includes): it names backend
/// `i % 16`, with a nonce drawn from `i`.
pub fn quic_cid(issue: Issue, mode: usize, i: usize) -> Vec<u8> {
    let (_, config, nonce_len, keyed) = QUIC_MODES[mode];
    let nonce: Vec<u8> = (0..nonce_len).map(|k| (i >> (8 * (k % 4))) as u8 ^ k).collect();
    issue(config, &quic_server_id(i % 16), &nonce, keyed.then_some(QUIC_KEY))
}

/// An Ethernet/IPv4/UDP frame from `src`:`sport` to `dst`:443 carrying a QUIC short header
/// with destination connection ID `cid`, then 24 octets of protected packet.
pub fn quic_frame(src: [u8; 4], sport: u16, dst: [u8; 4], cid: &[u8]) -> Vec<u8> {
    let payload: Vec<u8> = [0x40].iter().chain(cid).chain(&[0x5a; 24]).copied().collect();
    let udp_len = 8 + payload.len() as u16;
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0xc, 0x08, 0x00];
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&(20 + udp_len).to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&443u16.to_be_bytes());
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&payload);
    f
}

/// The VIPs of [`quic_snapshot`]: UDP port 443 with QUIC-LB, and without.
pub const QUIC_VIP: [u8; 4] = [198, 18, 0, 110];
/// See [`QUIC_VIP`].
pub const UDP_VIP: [u8; 4] = [198, 18, 0, 111];

/// The QUIC-LB benchmarks' snapshot: over 198.18.1.1..16, `quic` on [`QUIC_VIP`] (see
/// [`quic_service`]) and `udp` on [`UDP_VIP`], the same without QUIC-LB.
pub fn quic_snapshot() -> Snapshot {
    let backends: Vec<Addr> = (1..=16).map(|i| Addr::v4(198, 18, 1, i)).collect();
    let mut udp =
        service("udp", Encap::Ipip, RuleProtocol::Udp, &["198.18.0.111"], "g", backends.clone());
    udp.rules[0].ports = Ports::List(vec![(443, 443)]);
    snapshot(model("", [quic_service("quic", "198.18.0.110", &backends), udp]))
}

/// The frames of the QUIC-LB benchmarks, with `cid(mode, i)` connection `i`'s ID under
/// [`QUIC_MODES`]`[mode]` naming backend `i % 16`: `flows` established connections to `vip`
/// (from 198.18.30.x, four-pass IDs), or `n` packets of new 4-tuples (from 198.18.40.x on).
pub fn quic_frames(
    vip: [u8; 4],
    third: u8,
    n: usize,
    mode: usize,
    cid: &dyn Fn(usize, usize) -> Vec<u8>,
) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let src = [198, 18, third + (i / 60000) as u8, (i % 250) as u8];
            quic_frame(src, 1024 + (i % 60000) as u16, vip, &cid(mode, i))
        })
        .collect()
}
