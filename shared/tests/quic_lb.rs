//! QUIC-LB decoding against an encoder of the test's own, written from the draft's "Server
//! Actions" (draft-ietf-quic-load-balancers-21), not from Spillway's decoder: for every length
//! combination the draft allows and every mode, a connection ID a server would issue decodes
//! to the server ID it carries.

mod common;
#[path = "common/quic_issue.rs"]
mod quic_issue;

use common::{ep, group, model_with, web};
use proptest::prelude::*;
use quic_issue::issue;
use spillway_core::model::{Model, QuicLbPolicy, QuicServerId};
use spillway_core::quic_lb::{Config, Configs, Fallback, Mode, Routes, ServerId, Unroutable};
use spillway_core::state::PolicyState;
use spillway_core::time::Time;

fn lengths() -> impl Strategy<Value = (u8, u8)> {
    // Every (server ID, nonce) length the draft allows: sid >= 1, nonce >= 4, sum <= 19.
    (1u8..=15).prop_flat_map(|sid| (Just(sid), 4u8..=(19 - sid)))
}

#[test]
fn the_test_encoder_reproduces_the_drafts_vectors() {
    // The encoder above is checked against the draft's own outputs before it checks anything.
    let k: [u8; 16] = hex("8f95f09245765f80256934e50c66207f").try_into().unwrap();
    assert_eq!(issue(0, &hex("ed793a"), &hex("ee080dbf"), Some(k)), hex("0720b1d07b359d3c"));
    assert_eq!(
        issue(1, &hex("ed793a51d49b8f5fab65"), &hex("ee080dbf48"), Some(k)),
        hex("2fcc381bc74cb4fbad2823a3d1f8fed2")
    );
    assert_eq!(
        issue(2, &hex("ed793a51d49b8f5f"), &hex("ee080dbf48c0d1e5"), Some(k)),
        hex("504dd2d05a7b0de9b2b9907afb5ecf8cc3")
    );
    assert_eq!(
        issue(3, &hex("ed793a51d49b8f5fab"), &hex("ee080dbf48c0d1e55d"), Some(k)),
        hex("725779c9cc86beb3a3a4a3ca96fce4bfe0cdbc")
    );
    let k2: [u8; 16] = hex("fdf726a9893ec05c0632d3956680baf0").try_into().unwrap();
    assert_eq!(issue(0, &hex("31441a"), &hex("9c69c275"), Some(k2)), hex("0767947d29be054a"));
    assert_eq!(issue(0, &hex("c4605e"), &hex("4504cc4f"), None), hex("07c4605e4504cc4f"));
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Every length combination, every mode, any config id, server ID, nonce and key: the
    /// decoder finds the server ID the server put in; octets the server appends do not matter.
    #[test]
    fn every_issued_id_decodes_to_its_server_id(
        (sid_len, nonce_len) in lengths(),
        id in 0u8..7,
        sid_octets in any::<[u8; 16]>(),
        nonce_octets in any::<[u8; 32]>(),
        key in proptest::option::of(any::<[u8; 16]>()),
        extra in proptest::collection::vec(any::<u8>(), 0..3),
    ) {
        let sid = &sid_octets[..usize::from(sid_len)];
        let nonce = &nonce_octets[..usize::from(nonce_len)];
        let mut cid = issue(id, sid, nonce, key);
        let config = Config::new(id, sid_len, nonce_len, key).unwrap();
        let mode = config.mode();
        prop_assert_eq!(mode == Mode::SinglePass, key.is_some() && sid_len + nonce_len == 16);
        let mut configs = Configs::new();
        configs.insert(config);
        cid.extend_from_slice(&extra);
        let (got_id, got) = configs.decode(&cid).unwrap();
        prop_assert_eq!(got_id, id);
        prop_assert_eq!(got.as_bytes(), sid);
        // One octet short is never read past.
        let short = &cid[..usize::from(sid_len + nonce_len)];
        prop_assert_eq!(configs.decode(short), Err(Unroutable::TooShort));
    }

    /// Arbitrary bytes never panic; they decode or say why not.
    #[test]
    fn any_bytes_decode_or_say_why(bytes in proptest::collection::vec(any::<u8>(), 0..24)) {
        let mut configs = Configs::new();
        configs.insert(Config::new(0, 3, 4, None).unwrap());
        configs.insert(Config::new(1, 8, 8, Some([7; 16])).unwrap());
        configs.insert(Config::new(2, 10, 5, Some([9; 16])).unwrap());
        match configs.decode(&bytes) {
            Ok((id, sid)) => prop_assert_eq!(usize::from(configs.get(id).unwrap().server_id_len()), sid.as_bytes().len()),
            Err(Unroutable::Reserved) => prop_assert_eq!(bytes[0] >> 5, 7),
            Err(Unroutable::UnknownConfig(id)) => prop_assert!((3..7).contains(&id)),
            Err(Unroutable::TooShort) => {}
        }
    }
}

// ---- the snapshot's routes: which backend slot a server ID names ---------------------------------

fn sid(h: &str) -> ServerId {
    ServerId::from_hex(h).unwrap()
}

/// `web` with b1..bN in zone-a, draining `drain_s`, QUIC-LB configs 0 (3 + 4, plaintext) and
/// 1 (3 + 5, a key), and the given (endpoint, config, server ID) assignments.
fn quic_model(endpoints: &[&str], ids: &[(&str, u8, &str)], drain_s: u32) -> Model {
    model_with(|m| {
        let mut s = web(vec![group(m, "g", "zone-a", false, endpoints)]);
        s.draining_timeout_secs = drain_s;
        let mut configs = Configs::new();
        configs.insert(Config::new(0, 3, 4, None).unwrap());
        configs.insert(Config::new(1, 3, 5, Some([5; 16])).unwrap());
        let server_ids = ids
            .iter()
            .map(|&(e, config, h)| QuicServerId { endpoint: ep(e), config, server_id: sid(h) })
            .collect();
        s.quic_lb = Some(QuicLbPolicy { configs, server_ids });
        s
    })
}

/// The slot's endpoint that `web`'s routes give for server ID `h` under config 0.
fn routed(st: &mut PolicyState, now: Time, h: &str) -> Option<String> {
    let snap = st.snapshot(now);
    let id = st.service_id("web").unwrap();
    let routes: &Routes = snap.service(id).unwrap().quic.as_deref().unwrap();
    let cid: Vec<u8> =
        [0x07].iter().chain(sid(h).as_bytes()).chain(&[1, 2, 3, 4]).copied().collect();
    match routes.route(&cid) {
        Ok(r) => Some(snap.backends[usize::from(r.slot)].endpoint.addr.to_string()),
        Err((_, Fallback::UnknownServerId)) => None,
        Err(e) => panic!("{e:?}"),
    }
}

#[test]
fn server_ids_route_to_their_backends_and_a_draining_one_keeps_its_own() {
    let (b1, b2, b3) = ("198.18.1.1", "198.18.1.2", "198.18.1.3");
    let mut st = PolicyState::new(true);
    st.apply_model(quic_model(&[b1, b2], &[(b1, 0, "0a0001"), (b2, 0, "0a0002")], 30), Time::ZERO)
        .unwrap();
    assert_eq!(routed(&mut st, Time::ZERO, "0a0001").as_deref(), Some(b1));
    assert_eq!(routed(&mut st, Time::ZERO, "0a0002").as_deref(), Some(b2));
    assert_eq!(routed(&mut st, Time::ZERO, "0a0003"), None);

    // b2 removed with 30 s of draining: its server ID still names it until the deadline (CD-3).
    let t1 = Time::from_secs(10);
    st.apply_model(quic_model(&[b1, b3], &[(b1, 0, "0a0001"), (b3, 0, "0a0003")], 30), t1).unwrap();
    assert_eq!(routed(&mut st, t1, "0a0002").as_deref(), Some(b2));
    assert_eq!(routed(&mut st, t1, "0a0003").as_deref(), Some(b3));
    // Its slot freed at the deadline, the ID names nothing.
    assert_eq!(routed(&mut st, Time::from_secs(40), "0a0002"), None);
    assert_eq!(routed(&mut st, Time::from_secs(40), "0a0001").as_deref(), Some(b1));
}

#[test]
fn a_server_id_given_to_another_backend_leaves_the_draining_one() {
    let (b1, b2, b3) = ("198.18.1.1", "198.18.1.2", "198.18.1.3");
    let mut st = PolicyState::new(true);
    st.apply_model(quic_model(&[b1, b2], &[(b1, 0, "0a0001"), (b2, 0, "0a0002")], 30), Time::ZERO)
        .unwrap();
    // b2 removed and its server ID given to the new b3 at once: the configuration wins.
    let t1 = Time::from_secs(1);
    st.apply_model(quic_model(&[b1, b3], &[(b1, 0, "0a0001"), (b3, 0, "0a0002")], 30), t1).unwrap();
    assert_eq!(routed(&mut st, t1, "0a0002").as_deref(), Some(b3));
    // A backend with no server ID has no route; the configured ones keep theirs over a reload.
    st.apply_model(quic_model(&[b1, b3], &[(b1, 0, "0a0001")], 30), Time::from_secs(2)).unwrap();
    assert_eq!(
        routed(&mut st, Time::from_secs(2), "0a0002").as_deref(),
        Some(b2),
        "b2 still draining"
    );
    assert_eq!(routed(&mut st, Time::from_secs(2), "0a0001").as_deref(), Some(b1));
}

#[test]
fn a_quic_lb_change_changes_the_configuration_fingerprint() {
    let (b1, b2) = ("198.18.1.1", "198.18.1.2");
    let base = quic_model(&[b1, b2], &[(b1, 0, "0a0001")], 30);
    let other_id = quic_model(&[b1, b2], &[(b1, 0, "0a0009")], 30);
    let mut other_key = base.clone();
    let q = other_key.services[0].quic_lb.as_mut().unwrap();
    q.configs.insert(Config::new(1, 3, 5, Some([6; 16])).unwrap());
    assert_ne!(base.fingerprint(), other_id.fingerprint());
    assert_ne!(base.fingerprint(), other_key.fingerprint(), "another key");
    assert_eq!(base.fingerprint(), quic_model(&[b1, b2], &[(b1, 0, "0a0001")], 30).fingerprint());
}

// ---- the decision: a QUIC connection that changes its 4-tuple (QL-2, QL-3, QL-4) ----------------
// (QL-1, the decoding, is proved above: the draft's vectors and the independent encoder.)

const BACKENDS: [&str; 4] = ["198.18.1.1", "198.18.1.2", "198.18.1.3", "198.18.1.4"];
const SERVER_IDS: [&str; 4] = ["0a0001", "0a0002", "0a0003", "0a0004"];

fn quic_sim(drain_s: u32) -> spillway_core::simulator::Simulator {
    let ids: Vec<(&str, u8, &str)> =
        BACKENDS.iter().zip(SERVER_IDS).flat_map(|(&b, h)| [(b, 0, h), (b, 1, h)]).collect();
    spillway_core::simulator::Simulator::new(quic_model(&BACKENDS, &ids, drain_s)).unwrap()
}

/// A UDP datagram to the VIP's port 443 from `src`:`sport`.
fn datagram(src: &str, sport: u16) -> spillway_core::flow::PacketInfo {
    spillway_core::flow::PacketInfo { dport: 443, ..common::udp(src, sport) }
}

/// A short-header packet (the fixed bit set, key phase 0) for connection ID `cid`.
fn short(cid: &[u8]) -> Vec<u8> {
    [0x40].iter().chain(cid).chain(&[0x5a; 24]).copied().collect()
}

/// A client's Initial (long header, version 1) with destination connection ID `dcid`.
fn initial(dcid: &[u8]) -> Vec<u8> {
    let mut v = vec![0xc3, 0, 0, 0, 1, dcid.len() as u8];
    v.extend_from_slice(dcid);
    v.extend_from_slice(&[8, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0x40, 0x20]);
    v.resize(1200, 0);
    v
}

/// The server ID the backend at `addr` issues.
fn server_id_of(addr: &str) -> &'static str {
    SERVER_IDS[BACKENDS.iter().position(|&b| b == addr).unwrap()]
}

#[test]
fn ql_3_a_connection_that_changes_its_port_or_address_stays_on_its_backend() {
    use common::{backend, reason};
    let hex = |h: &str| ServerId::from_hex(h).unwrap().as_bytes().to_vec();
    let mut s = quic_sim(30);
    let mut moved_by_hash = 0;
    for i in 0..200u16 {
        let (client, port) = ("198.18.10.7", 20_000 + i);
        // The Initial goes by the 4-tuple (QL-2); the server that gets it issues its own IDs,
        // plaintext (config 0) for even connections, four-pass encrypted (config 1) for odd.
        let o = s.packet_with_payload(&datagram(client, port), &initial(&[9; 8]));
        assert_eq!(reason(&o), "new_connection");
        let home = backend(&o);
        let sid = hex(server_id_of(&home));
        let cid = if i % 2 == 0 {
            issue(0, &sid, &[i as u8, 1, 2, 3], None)
        } else {
            issue(1, &sid, &[i as u8, 1, 2, 3, 4], Some([5; 16]))
        };
        // Same 4-tuple: the entry (QL-2's conntrack, the established path).
        let o = s.packet_with_payload(&datagram(client, port), &short(&cid));
        assert_eq!((backend(&o), reason(&o)), (home.clone(), "conntrack_hit"));
        // A NAT rebinding (new port), then a migration (new address): the connection ID.
        for (c, p) in [(client, port + 10_000), ("198.18.11.9", port)] {
            let o = s.packet_with_payload(&datagram(c, p), &short(&cid));
            assert_eq!((backend(&o), reason(&o)), (home.clone(), "quic_cid"), "{c}:{p}");
            assert_eq!(o.decision.quic_fallback, None);
            // The entry made for the new 4-tuple: its next packets are hits.
            let o = s.packet_with_payload(&datagram(c, p), &short(&cid));
            assert_eq!((backend(&o), reason(&o)), (home.clone(), "conntrack_hit"));
        }
        // Another instance of the fleet, which never saw the connection and shares no state
        // with this one: the same backend, from the ID alone.
        let mut other = quic_sim(30);
        let o = other.packet_with_payload(&datagram("198.18.11.9", port + 20_000), &short(&cid));
        assert_eq!((backend(&o), reason(&o)), (home.clone(), "quic_cid"));
        // What the 4-tuple alone would give a third tuple: often another backend.
        let mut bare = quic_sim(30);
        if backend(&bare.packet(&datagram("198.18.12.1", port))) != home {
            moved_by_hash += 1;
        }
    }
    assert!(moved_by_hash > 100, "{moved_by_hash} of 200 would have moved by the hash");
}

#[test]
fn ql_4_an_id_that_names_no_valid_backend_goes_by_the_4_tuple_and_is_counted() {
    use common::{backend, reason};
    use spillway_core::decide::QuicFallback;
    use spillway_core::quic_lb::Fallback as F;
    let hex = |h: &str| ServerId::from_hex(h).unwrap().as_bytes().to_vec();
    let cases: [(Vec<u8>, QuicFallback); 4] = [
        (issue(0, &hex("0a0009"), &[1, 2, 3, 4], None), QuicFallback::Decode(F::UnknownServerId)),
        (
            issue(7, &hex("0a0001"), &[1, 2, 3, 4], None),
            QuicFallback::Decode(F::Unroutable(Unroutable::Reserved)),
        ),
        (
            issue(2, &hex("0a0001"), &[1, 2, 3, 4], None),
            QuicFallback::Decode(F::Unroutable(Unroutable::UnknownConfig(2))),
        ),
        (vec![0x07, 0x0a], QuicFallback::Decode(F::Unroutable(Unroutable::TooShort))),
    ];
    for (i, (cid, why)) in cases.iter().enumerate() {
        let mut s = quic_sim(30);
        let mut hash_only = quic_sim(30);
        let p = datagram("198.18.10.7", 30_000 + i as u16);
        let payload = [&[0x40][..], cid].concat();
        let o = s.packet_with_payload(&p, &payload);
        assert_eq!(o.decision.quic_fallback, Some(*why), "{why:?}");
        assert_eq!((backend(&o), reason(&o)), (backend(&hash_only.packet(&p)), "new_connection"));
    }
    // Not QUIC at all (an empty datagram has no header): the 4-tuple, nothing counted.
    let mut s = quic_sim(30);
    let o = s.packet_with_payload(&datagram("198.18.10.7", 31_000), &[]);
    assert_eq!((reason(&o), o.decision.quic_fallback), ("new_connection", None));
}

#[test]
fn ql_3_a_draining_backend_keeps_its_connections_and_a_removed_one_does_not() {
    use common::{backend, reason};
    use spillway_core::decide::QuicFallback;
    use std::time::Duration;
    let hex = |h: &str| ServerId::from_hex(h).unwrap().as_bytes().to_vec();
    let b2 = BACKENDS[1];
    let cid = issue(0, &hex(server_id_of(b2)), &[7, 7, 7, 7], None);
    let mut s = quic_sim(30);
    s.remove_backend("web", common::a(b2)).unwrap();
    // Draining (CD-2): its connections, rebound, still reach it.
    let o = s.packet_with_payload(&datagram("198.18.10.7", 40_000), &short(&cid));
    assert_eq!((backend(&o).as_str(), reason(&o)), (b2, "quic_cid"));
    // Past its draining time: the ID names a backend that cannot take it.
    s.advance(Duration::from_secs(31));
    let o = s.packet_with_payload(&datagram("198.18.10.7", 40_001), &short(&cid));
    assert_ne!(backend(&o), b2);
    assert_eq!(o.decision.quic_fallback, Some(QuicFallback::BackendInvalid));
    // Unhealthy, for UDP whose entries do not persist (CP-2): the 4-tuple's choice too.
    let mut s = quic_sim(30);
    assert_eq!(s.set_health_by_addr(common::a(b2), false), 1);
    let o = s.packet_with_payload(&datagram("198.18.10.7", 40_002), &short(&cid));
    assert_ne!(backend(&o), b2);
    assert_eq!(o.decision.quic_fallback, Some(QuicFallback::BackendInvalid));
}

/// A server's Handshake packet (long header, version 1) to the client's connection ID `dcid`
/// from its own `scid`, as an ICMP error quotes it after the UDP header (here whole).
fn handshake(dcid: &[u8], scid: &[u8]) -> Vec<u8> {
    let mut v = vec![0xe3, 0, 0, 0, 1, dcid.len() as u8];
    v.extend_from_slice(dcid);
    v.push(scid.len() as u8);
    v.extend_from_slice(scid);
    v.extend_from_slice(&[0x41, 0x20, 0x5a, 0x5a]);
    v
}

#[test]
fn ql_5_an_icmp_error_quoting_a_servers_long_header_reaches_the_server_its_id_names() {
    use common::{backend, reason};
    use spillway_core::decide::QuicFallback;
    let hex = |h: &str| ServerId::from_hex(h).unwrap().as_bytes().to_vec();
    // An ICMP error is decided on the quoted packet's reversed tuple: client -> VIP:443.
    let error = |port: u16| spillway_core::flow::PacketInfo {
        icmp_error: true,
        ..datagram("198.18.10.7", port)
    };
    let mut s = quic_sim(30);
    let mut hash_only = quic_sim(30);
    let mut moved_by_hash = 0;
    for i in 0..100u16 {
        let home = BACKENDS[usize::from(i % 4)];
        let cid = issue(1, &hex(server_id_of(home)), &[i as u8, 1, 2, 3, 4], Some([5; 16]));
        // No entry for the tuple (the connection moved here, or this instance restarted).
        let o = s.packet_with_payload(&error(50_000 + i), &handshake(&[9; 8], &cid));
        assert_eq!((backend(&o).as_str(), reason(&o)), (home, "quic_cid"));
        if backend(&hash_only.packet(&error(50_000 + i))) != home {
            moved_by_hash += 1;
        }
        // No entry made: the tuple's next packet, a short header naming another server, goes
        // by its own ID, not to `home`.
        let other = BACKENDS[usize::from((i + 1) % 4)];
        let cid2 = issue(0, &hex(server_id_of(other)), &[i as u8, 9, 9, 9], None);
        let o = s.packet_with_payload(&datagram("198.18.10.7", 50_000 + i), &short(&cid2));
        assert_eq!((backend(&o).as_str(), reason(&o)), (other, "quic_cid"));
        // Now with that entry: the error follows the entry, whatever its quote names.
        let o = s.packet_with_payload(&error(50_000 + i), &handshake(&[9; 8], &cid));
        assert_eq!((backend(&o).as_str(), reason(&o)), (other, "conntrack_hit"));
    }
    assert!(moved_by_hash > 50, "{moved_by_hash} of 100 would have gone elsewhere by the hash");

    // A quoted short header carries only the client's ID; a quote cut inside the source
    // connection ID has none: both go by the 4-tuple, nothing counted.
    let cid = issue(0, &hex(server_id_of(BACKENDS[2])), &[1, 2, 3, 4], None);
    let cut = handshake(&[9; 8], &cid);
    for (port, quote) in [(51_000, short(&cid)), (51_001, cut[..cut.len() - 8].to_vec())] {
        let mut s = quic_sim(30);
        let o = s.packet_with_payload(&error(port), &quote);
        assert_eq!(backend(&o), backend(&hash_only.packet(&error(port))));
        assert_eq!((reason(&o), o.decision.quic_fallback), ("new_connection", None));
    }
    // A source ID that names no backend falls back and is counted (QL-4).
    let unknown = issue(0, &hex("0a0009"), &[1, 2, 3, 4], None);
    let o = quic_sim(30).packet_with_payload(&error(51_002), &handshake(&[9; 8], &unknown));
    assert_eq!(o.decision.quic_fallback, Some(QuicFallback::Decode(Fallback::UnknownServerId)));
    assert_eq!(backend(&o), backend(&hash_only.packet(&error(51_002))));
}
