//! Connection-state sync (`spillway_control::sync`): a datagram from the network or a table
//! file from the disk must be refused with a reason or accepted, never a panic, and nothing
//! but the key's holder can make the decoder accept.
//!
//! The first byte picks what the rest is:
//!   0  a datagram off the wire, decoded with a fixed key ring and sessions: never `Ok` (the
//!      fuzzer does not have the key), and the sessions never move;
//!   1  a kind byte and a payload, sealed here with the key as a keyed but buggy peer would
//!      (XChaCha20-Poly1305 called directly, the documented header and nonce) after a hello
//!      that proved the peer live, so the payload parser behind authentication and sessions is
//!      reached; then the same datagram with one byte flipped (the next input byte says
//!      where) must be refused;
//!   2  a table file, read with `read_table`;
//!   3  entries (69-byte records; invalid ones are left out by the encoder), encoded into
//!      datagrams and into a table file: both must give back exactly the valid ones.
//!
//! Corpus: `fuzz/corpus/sync` (fuzz/make_corpus.py).

#![no_main]

use std::net::IpAddr;

use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{KeyInit, XChaCha20Poly1305};
use libfuzzer_sys::fuzz_target;
use spillway_control::instance::Phase;
use spillway_control::sync::{
    decode, Body, Encoder, EntriesKind, HelloFields, Key, KeyRing, Sessions, SyncedEntry,
    ENTRY_BYTES, HEADER_BYTES, MAGIC, MAX_DATAGRAM, VERSION,
};
use spillway_control::table_file::{read_table, write_table};

const KEY: [u8; 32] = [7; 32];
const SENDER: u16 = 2;
const ME: u16 = 1;
const EPOCH: u64 = 1_765_000_000_000;
const SALT: u32 = 0x5a5a_5a5a;
const CHALLENGE: u64 = 0xc0ff_ee00;
const FINGERPRINT: u64 = 0x5350_5442;

fn peer() -> IpAddr {
    IpAddr::from([198, 18, 0, 2])
}

fn ring() -> KeyRing {
    KeyRing::one(Key::from_bytes(KEY))
}

fn fresh() -> Sessions {
    Sessions::new(CHALLENGE, [(SENDER, peer()), (3, IpAddr::from([198, 18, 0, 3]))])
}

/// Sessions in which the peer has proven itself live (its hello, sequence 1, echoed).
fn proven() -> Sessions {
    let mut s = fresh();
    let mut enc = Encoder::new(&Key::from_bytes(KEY), SENDER, EPOCH, SALT);
    let mut out = [0u8; MAX_DATAGRAM];
    let fields =
        HelloFields { fingerprint: 0, phase: Phase::Serving, challenge: 9, echo: CHALLENGE, session: 0 };
    let n = enc.hello(ME, &fields, &mut out);
    decode(&mut out[..n], peer(), ME, &ring(), &mut s).expect("the proving hello");
    s
}

/// A datagram of `kind` with `payload`, sealed under [`KEY`] with sequence `seq`.
fn seal_raw(kind: u8, payload: &[u8], seq: u64) -> Vec<u8> {
    let mut d = MAGIC.to_vec();
    d.push(VERSION);
    d.push(kind);
    d.extend_from_slice(&SENDER.to_be_bytes());
    d.extend_from_slice(&ME.to_be_bytes());
    d.extend_from_slice(&Key::from_bytes(KEY).id().to_be_bytes());
    d.extend_from_slice(&EPOCH.to_be_bytes());
    d.extend_from_slice(&seq.to_be_bytes());
    d.extend_from_slice(&SALT.to_be_bytes());
    let mut nonce = [0u8; 24];
    nonce[0..4].copy_from_slice(&d[6..10]);
    nonce[4..24].copy_from_slice(&d[14..HEADER_BYTES]);
    let mut body = payload.to_vec();
    let tag = XChaCha20Poly1305::new(&KEY.into())
        .encrypt_in_place_detached(&nonce.into(), &d, &mut body)
        .expect("a small payload");
    d.extend_from_slice(&body);
    d.extend_from_slice(&tag);
    d
}

fn records(data: &[u8]) -> Vec<SyncedEntry> {
    data.chunks_exact(ENTRY_BYTES)
        .filter_map(|r| SyncedEntry::decode(r.try_into().expect("a record")).ok())
        .filter(|e| e.validate().is_ok())
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let key = Key::from_bytes(KEY);
    match mode % 4 {
        0 => {
            let mut buf = rest.to_vec();
            let mut s = fresh();
            let r = decode(&mut buf, peer(), ME, &ring(), &mut s);
            assert!(r.is_err(), "accepted without the key");
            assert!(!s.is_proven(SENDER), "a refused datagram moved the sessions");
            assert_eq!(s.their_challenge(SENDER), 0, "a refused datagram taught a challenge");
        }
        1 => {
            let Some((&kind, rest)) = rest.split_first() else { return };
            let Some((&flip, payload)) = rest.split_first() else { return };
            let payload = &payload[..payload.len().min(MAX_DATAGRAM)];
            let d = seal_raw(kind, payload, 2);
            let mut buf = d.clone();
            let mut s = proven();
            if let Ok(dg) = decode(&mut buf, peer(), ME, &ring(), &mut s) {
                if let Body::Entries(r) | Body::Remove(r) | Body::Answer(_, r) = dg.body {
                    assert!(r.iter().all(|e| e.validate().is_ok()));
                }
            }
            let mut x = seal_raw(kind, payload, 3);
            let at = usize::from(flip) * x.len() / 256;
            x[at] ^= 0x5a;
            let r = decode(&mut x, peer(), ME, &ring(), &mut s);
            assert!(r.is_err(), "a flipped byte {at} was accepted");
        }
        2 => {
            if let Ok(t) = read_table(rest, FINGERPRINT, 100_000) {
                assert!(t.entries.iter().all(|e| e.validate().is_ok()));
            }
        }
        _ => {
            let want = records(rest);
            let mut got = Vec::new();
            let mut enc = Encoder::new(&key, SENDER, EPOCH, SALT);
            let mut s = fresh();
            let mut out = [0u8; MAX_DATAGRAM];
            let fields = HelloFields {
                fingerprint: 0,
                phase: Phase::Serving,
                challenge: 9,
                echo: CHALLENGE,
                session: 0,
            };
            let n = enc.hello(ME, &fields, &mut out);
            decode(&mut out[..n], peer(), ME, &ring(), &mut s).expect("the proving hello");
            // Arbitrary records, valid or not: the encoder must leave the invalid ones out.
            let all = rest.chunks_exact(ENTRY_BYTES).map(|r| {
                SyncedEntry::decode(r.try_into().expect("a record")).unwrap_or_else(|_| {
                    let mut e = SyncedEntry::default();
                    e.key.kind = 4; // no such tuple kind
                    e
                })
            });
            enc.all_entries(EntriesKind::Entries, ME, all, |d| {
                assert!(d.len() <= MAX_DATAGRAM);
                let mut buf = d.to_vec();
                let dg = decode(&mut buf, peer(), ME, &ring(), &mut s).expect("a genuine datagram");
                match dg.body {
                    Body::Entries(r) => got.extend(r.iter()),
                    other => panic!("not entries: {other:?}"),
                }
            });
            assert_eq!(got, want);
            let mut file = Vec::new();
            write_table(&mut file, FINGERPRINT, 1, want.clone()).expect("a table in memory");
            let t = read_table(file.as_slice(), FINGERPRINT, u64::MAX).expect("its own table");
            assert_eq!(t.entries, want);
        }
    }
});
