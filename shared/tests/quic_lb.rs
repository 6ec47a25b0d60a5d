//! QUIC-LB decoding against an encoder of the test's own, written from the draft's "Server
//! Actions" (draft-ietf-quic-load-balancers-21), not from Spillway's decoder: for every length
//! combination the draft allows and every mode, a connection ID a server would issue decodes
//! to the server ID it carries.

use aes::cipher::{BlockEncrypt, KeyInit};
use aes::Aes128;
use proptest::prelude::*;
use spillway_core::quic_lb::{Config, Configs, Mode, Unroutable};

/// A server's connection ID: the first octet (config id in the top three bits, the length
/// self-description in the other five, as every appendix vector has it), then server ID and
/// nonce, encrypted as the draft says when there is a key.
fn issue(config_id: u8, sid: &[u8], nonce: &[u8], key: Option<[u8; 16]>) -> Vec<u8> {
    let plain: Vec<u8> = sid.iter().chain(nonce).copied().collect();
    let len = plain.len();
    let first = (config_id << 5) | (len as u8 & 0x1f);
    let body = match key {
        None => plain,
        Some(k) => {
            let aes = Aes128::new(&k.into());
            if len == 16 {
                let mut b = <[u8; 16]>::try_from(plain.as_slice()).unwrap().into();
                aes.encrypt_block(&mut b);
                b.to_vec()
            } else {
                server_four_pass(&aes, &plain)
            }
        }
    };
    std::iter::once(first).chain(body).collect()
}

/// The draft's "Algorithm Description", steps 1 to 12, as a server runs it.
fn server_four_pass(aes: &Aes128, plain: &[u8]) -> Vec<u8> {
    let len = plain.len();
    let half_len = len.div_ceil(2);
    let odd = len % 2 == 1;
    let aes_half = |pass: u8, half: &[u8]| -> Vec<u8> {
        // expand(length, pass, half): half, zero padding, length, pass.
        let mut input = vec![0u8; 16];
        input[..half.len()].copy_from_slice(half);
        input[14] = len as u8;
        input[15] = pass;
        let mut b = <[u8; 16]>::try_from(input.as_slice()).unwrap().into();
        aes.encrypt_block(&mut b);
        b[..half_len].to_vec()
    };
    let xor = |a: &[u8], b: &[u8]| -> Vec<u8> { a.iter().zip(b).map(|(x, y)| x ^ y).collect() };
    let clear_first_bits = |mut v: Vec<u8>| {
        if odd {
            v[0] &= 0x0f;
        }
        v
    };
    let clear_last_bits = |mut v: Vec<u8>| {
        if odd {
            v[half_len - 1] &= 0xf0;
        }
        v
    };
    // Step 2: split; with an odd length the middle octet's high nibble goes left, its low
    // nibble right.
    let left_0 = clear_last_bits(plain[..half_len].to_vec());
    let right_0 = clear_first_bits(plain[len / 2..].to_vec());
    let right_1 = clear_first_bits(xor(&right_0, &aes_half(1, &left_0)));
    let left_1 = clear_last_bits(xor(&left_0, &aes_half(2, &right_1)));
    let right_2 = clear_first_bits(xor(&right_1, &aes_half(3, &left_1)));
    let left_2 = clear_last_bits(xor(&left_1, &aes_half(4, &right_2)));
    // Step 12: concatenate, the zero nibbles stripped when odd.
    let mut out = left_2.clone();
    if odd {
        out[half_len - 1] |= right_2[0];
        out.extend_from_slice(&right_2[1..]);
    } else {
        out.extend_from_slice(&right_2);
    }
    out
}

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
