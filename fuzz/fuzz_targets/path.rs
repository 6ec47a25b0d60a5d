//! NX-2 over the whole packet path: a burst of arbitrary frames through `process_burst`
//! (classify, answer, decide, rewrite, encapsulate) on in-memory buffers must never panic,
//! whatever the bytes; a buffer shared with another owner is dropped as `shared_buffer` and
//! left untouched.
//!
//! Input: one byte whose bit `i` marks frame `i` as a shared buffer, then up to 32 frames,
//! each preceded by its length (2 bytes, big-endian). Corpus: `fuzz/make_corpus.py`.

#![no_main]

use std::sync::OnceLock;

use crossbeam_queue::ArrayQueue;
use libfuzzer_sys::fuzz_target;
use spillway_dataplane::neighbour::{NeighbourEvent, NeighbourTable, NextHopCache};
use spillway_dataplane::node::Node;
use spillway_dataplane::path::{process_burst, Outcome, PacketBuf, PathCtx, MAX_BURST};
use spillway_dataplane::vecbuf::VecBuf;
use spillway_shared::addr::{Addr, Prefix};
use spillway_shared::conntrack::Shard;
use spillway_shared::counters::{PathDrop, Reason, WorkerCounters};
use spillway_shared::model::{
    Encap, Endpoint, Group, Model, Ports, Rule, RuleDest, RuleProtocol, Service, Zone,
};
use spillway_shared::snapshot::Snapshot;
use spillway_shared::state::PolicyState;
use spillway_shared::time::Time;

const NODE_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

/// Three services (IPIP and GUE over IPv4, IP6IP6), all protocols, so that most frames reach
/// the decision and the rewrite; every backend's MAC resolved.
fn snapshot() -> &'static (Snapshot, Node, NeighbourTable) {
    static S: OnceLock<(Snapshot, Node, NeighbourTable)> = OnceLock::new();
    S.get_or_init(|| {
        let mut m = Model::empty();
        m.zones.push(Zone { name: "z".into(), region: String::new() });
        let services: [(&str, Encap, Addr, fn(u8) -> Addr); 3] = [
            ("ipip", Encap::Ipip, Addr::v4(198, 18, 0, 100), |i| Addr::v4(198, 18, 1, i)),
            ("gue", Encap::Gue { port: 6080 }, Addr::v4(198, 18, 0, 101), |i| {
                Addr::v4(198, 18, 2, i)
            }),
            ("v6", Encap::Ipip, "fd00::100".parse().expect("addr"), |i| {
                format!("fd00::1:{i}").parse().expect("addr")
            }),
        ];
        let mut neighbours = Vec::new();
        for (name, encap, vip, backend) in services {
            let mut s = Service::new(name);
            s.encap = encap;
            s.rules.push(Rule { dest: RuleDest::Vip(vip), protocol: RuleProtocol::L3Default, ports: Ports::All });
            let endpoints: Vec<Endpoint> =
                (1..=4).map(|i| Endpoint { addr: backend(i), port: 0 }).collect();
            neighbours.extend(endpoints.iter().map(|e| (e.addr, [2, 0, 0, 0, 9, 9])));
            s.groups.push(Group { name: "g".into(), zone: 0, failover: false, weight: 1, endpoints });
            m.services.push(s);
        }
        let mut st = PolicyState::new(true);
        st.apply_model(m, Time::ZERO).expect("a valid model");
        let node = Node {
            mac: NODE_MAC,
            ipv4: Some((Addr::v4(198, 18, 0, 2), "198.18.0.0/16".parse::<Prefix>().expect("prefix"))),
            ipv6: Some(("fd00::2".parse().expect("addr"), "fd00::/64".parse::<Prefix>().expect("prefix"))),
            gateway_v4: None,
            gateway_v6: None,
            mtu: 1500,
        };
        (st.snapshot(Time::ZERO), node, NeighbourTable::from_pairs(neighbours))
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&shared_bits, mut rest)) = data.split_first() else { return };
    let mut bufs: Vec<VecBuf> = Vec::with_capacity(MAX_BURST);
    while bufs.len() < MAX_BURST && rest.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let mut b = VecBuf::with_frame(&rest[2..2 + len]);
        b.set_shared(bufs.len() < 8 && shared_bits & (1 << bufs.len()) != 0);
        bufs.push(b);
        rest = &rest[2 + len..];
    }
    let before: Vec<Vec<u8>> = bufs.iter().map(|b| b.data().to_vec()).collect();
    let (snap, node, neighbours) = snapshot();
    let mut shard = Shard::with_capacity(1024);
    let mut next_hops = NextHopCache::new();
    next_hops.refresh(snap, neighbours, node);
    let events = ArrayQueue::<NeighbourEvent>::new(64);
    let counters = WorkerCounters::new();
    let mut ctx = PathCtx {
        snap,
        shard: &mut shard,
        now: Time(1000),
        node,
        neighbours,
        next_hops: &next_hops,
        events: &events,
        counters: &counters,
    };
    let mut out = [Outcome::Consumed; MAX_BURST];
    process_burst(&mut bufs, &mut ctx, &mut out);
    for (i, (b, o)) in bufs.iter().zip(out).enumerate() {
        if !b.is_writable() {
            assert_eq!(o, Outcome::Drop(Reason::Path(PathDrop::SharedBuffer)), "frame {i}");
            assert_eq!(b.data(), &before[i][..], "a shared buffer is never written");
        }
        if let Outcome::Drop(r) = o {
            assert!(counters.reason(r).get() > 0, "frame {i}: {r:?} is counted");
        }
    }
});
