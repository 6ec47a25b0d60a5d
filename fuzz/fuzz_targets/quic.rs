//! QUIC-LB: reading a UDP payload as QUIC and decoding its destination connection ID must
//! never panic, whatever the bytes, and a decoded server ID has its configuration's length. A
//! long header's source connection ID (QL-5) is decoded the same way.
//!
//! The first input octets choose the configurations (lengths within the draft's bounds, with
//! or without a key); the rest is the UDP payload.

#![no_main]

use libfuzzer_sys::fuzz_target;
use spillway_core::quic_lb::{Config, Configs, Unroutable};
use spillway_core::wire::quic::{long_source_cid, parse, QuicHeader};

fuzz_target!(|data: &[u8]| {
    let Some((&shape, rest)) = data.split_first() else { return };
    let Some((key, payload)) = rest.split_at_checked(16) else { return };
    let key: [u8; 16] = key.try_into().unwrap();
    let mut configs = Configs::new();
    // Three configurations of lengths the shape octet picks: with a key, single or four
    // passes; without, plaintext.
    for id in 0..3u8 {
        let sid = 1 + (shape.rotate_left(u32::from(id) * 3) % 15);
        let nonce = (4 + (shape >> id) % 15).min(19 - sid);
        let config = Config::new(id, sid, nonce, (id != 2).then_some(key)).expect("within bounds");
        configs.insert(config);
    }
    if let Some(scid) = long_source_cid(payload) {
        assert!(scid.len() + 7 <= payload.len(), "inside the header");
        if let Ok((id, sid)) = configs.decode(scid) {
            assert_eq!(sid.as_bytes().len(), usize::from(configs.get(id).unwrap().server_id_len()));
        }
    }
    let dcid = match parse(payload) {
        Ok(QuicHeader::Short { dcid_and_rest }) => dcid_and_rest,
        Ok(QuicHeader::Long { dcid, .. }) => dcid,
        Err(_) => return,
    };
    match configs.decode(dcid) {
        Ok((id, sid)) => {
            let config = configs.get(id).expect("decoded by it");
            assert_eq!(sid.as_bytes().len(), usize::from(config.server_id_len()));
            assert!(dcid.len() >= config.cid_len());
        }
        Err(Unroutable::Reserved) => assert_eq!(dcid[0] >> 5, 7),
        Err(Unroutable::UnknownConfig(id)) => assert!((3..7).contains(&id)),
        Err(Unroutable::TooShort) => {}
    }
});
