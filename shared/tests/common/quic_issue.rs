//! A QUIC server's side of QUIC-LB, written from the draft's "Server Actions"
//! (draft-ietf-quic-load-balancers-21), not from Spillway's decoder: the connection IDs a
//! server issues. The QUIC-LB tests check Spillway's decoder against it, and the packet-path
//! benchmarks use it to make IDs that route.

use aes::cipher::{BlockEncrypt, KeyInit};
use aes::Aes128;

/// A server's connection ID: the first octet (config id in the top three bits, the length
/// self-description in the other five, as every appendix vector has it), then server ID and
/// nonce, encrypted as the draft says when there is a key.
pub fn issue(config_id: u8, sid: &[u8], nonce: &[u8], key: Option<[u8; 16]>) -> Vec<u8> {
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
pub fn server_four_pass(aes: &Aes128, plain: &[u8]) -> Vec<u8> {
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
