//! The sync format's behaviour: exact bytes where the format is the behaviour, every refusal
//! from a crafted datagram, sessions proven live, the encoder's packing.

use std::net::IpAddr;

use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{KeyInit, Tag, XChaCha20Poly1305};
use proptest::prelude::*;
use spillway_core::addr::Addr;
use spillway_core::flow::{proto, FlowKey, TupleKind};

use super::*;
use crate::instance::Phase;

const SENDER: u16 = 0x0102;
const ME: u16 = 0x0a0b;
const EPOCH: u64 = 1_765_000_000_000;
const SALT: u32 = 0x5a5a_0001;
const CHALLENGE: u64 = 0x00c0_ffee_0000_0001;

fn peer_addr() -> IpAddr {
    "198.18.0.12".parse().unwrap()
}

fn key_bytes() -> [u8; 32] {
    std::array::from_fn(|i| (i as u8).wrapping_mul(7).wrapping_add(1))
}

fn key() -> Key {
    Key::from_bytes(key_bytes())
}

fn ring() -> KeyRing {
    KeyRing::one(key())
}

fn other_key() -> Key {
    Key::from_bytes([0x42; KEY_BYTES])
}

/// A hello's fields: fingerprint, phase, challenge, echo (and no session yet).
fn hf(fingerprint: u64, phase: Phase, challenge: u64, echo: u64) -> HelloFields {
    HelloFields { fingerprint, phase, challenge, echo, session: 0 }
}

fn encoder() -> Encoder {
    Encoder::new(&key(), SENDER, EPOCH, SALT)
}

/// The receiver's sessions: peers SENDER and 99, none proven yet.
fn fresh() -> Sessions {
    Sessions::new(CHALLENGE, [(SENDER, peer_addr()), (99, "198.18.0.99".parse().unwrap())])
}

/// Decode a copy of `d` as ME from the peer's address.
fn open(d: &[u8], s: &mut Sessions) -> Result<Body<'static>, Refused> {
    let buf: &'static mut [u8] = Box::leak(d.to_vec().into_boxed_slice());
    decode(buf, peer_addr(), ME, &ring(), s).map(|d| d.body)
}

/// An encoder and the receiver's sessions with it proven live: the encoder's first datagram
/// (seq 1) was a hello that echoed the receiver's challenge.
fn proven() -> (Encoder, Sessions) {
    let mut enc = encoder();
    let mut s = fresh();
    let mut out = [0u8; MAX_DATAGRAM];
    let n = enc.hello(ME, &hf(1, Phase::Serving, 77, CHALLENGE), &mut out);
    assert!(open(&out[..n], &mut s).is_ok());
    assert!(s.is_proven(SENDER));
    (enc, s)
}

/// A valid 5-tuple entry, varied by `i` (the table file's tests use it too).
pub(crate) fn entry(i: u32) -> SyncedEntry {
    let b = i.to_be_bytes();
    SyncedEntry::new(
        &FlowKey {
            src: Addr::v4(203, b[1], b[2], b[3]),
            dst: Addr::v4(198, 51, 100, 10),
            sport: 1024 + (i % 60_000) as u16,
            dport: 443,
            proto: if i % 2 == 0 { proto::TCP } else { proto::UDP },
            kind: TupleKind::Five as u8,
            service: 3,
        },
        service_identity("web"),
        Addr::v4(10, 1, 0, (i % 250) as u8),
        0,
        u64::from(i) * 10,
        (i % 2) as u8,
    )
}

fn sealed_entries(enc: &mut Encoder, n: u32) -> Vec<u8> {
    let mut out = [0u8; MAX_DATAGRAM];
    let p = enc.entries(EntriesKind::Entries, ME, &mut (0..n).map(entry), &mut out).unwrap();
    out[..p.len].to_vec()
}

fn entries_of(b: &Body<'_>) -> Vec<SyncedEntry> {
    match b {
        Body::Entries(r) | Body::Remove(r) | Body::Answer(_, r) => r.iter().collect(),
        _ => panic!("not entries: {b:?}"),
    }
}

// ------------------------------------------------------------------ the entry

#[test]
fn entry_bytes_are_the_documented_layout() {
    let e = SyncedEntry::new(
        &FlowKey {
            src: Addr::v4(192, 0, 2, 7),
            dst: Addr::v4(198, 51, 100, 10),
            sport: 0x1234,
            dport: 0x0050,
            proto: proto::TCP,
            kind: TupleKind::Five as u8,
            service: 0xbeef,
        },
        0x0102_0304_0506_0708,
        Addr::v4(10, 1, 0, 7),
        0xabcd,
        u64::MAX,
        0x01,
    );
    let mut want = Vec::new();
    want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 7]);
    want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 51, 100, 10]);
    want.extend_from_slice(&[0x12, 0x34, 0x00, 0x50, 6, 5]);
    want.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 0, 7]);
    want.extend_from_slice(&[0xab, 0xcd, 0xff, 0xff, 0xff, 0xff, 0x01]);
    assert_eq!(want.len(), ENTRY_BYTES);
    assert_eq!(e.to_bytes().as_slice(), want.as_slice());
    // The local service id is not sent; the receiver gives its own.
    let back = SyncedEntry::decode(&e.to_bytes()).unwrap();
    assert_eq!(back, e);
    assert_eq!(back.key.service, 0);
    assert_eq!(back.tracking_key(9).service, 9);
    assert_eq!(back.age_ms, u32::MAX, "the age saturates");
}

#[test]
fn service_identity_is_stable_and_domain_separated() {
    assert_eq!(service_identity("web"), service_identity("web"));
    assert_ne!(service_identity("web"), service_identity("web2"));
    assert_ne!(service_identity("web"), xxhash_rust::xxh3::xxh3_64(b"web"));
    // Pinned: instances built at different times must agree on it.
    let mut input = SERVICE_IDENTITY_DOMAIN.to_vec();
    input.extend_from_slice(b"web");
    assert_eq!(service_identity("web"), xxhash_rust::xxh3::xxh3_64(&input));
}

#[test]
fn entry_validation_follows_the_tuple_kinds_and_the_flags_that_travel() {
    let v4 = |d| Addr::v4(192, 0, 2, d);
    let key = |kind: u8, dst: Addr, sport, dport, proto| FlowKey {
        src: v4(1),
        dst,
        sport,
        dport,
        proto,
        kind,
        service: 0,
    };
    let check = |k: FlowKey| SyncedEntry::new(&k, 1, v4(9), 0, 0, 0).validate();
    assert_eq!(check(key(1, Addr::UNSPECIFIED, 0, 0, 0)), Ok(()));
    assert_eq!(check(key(2, v4(2), 0, 0, 0)), Ok(()));
    assert_eq!(check(key(3, v4(2), 0, 0, proto::ICMP)), Ok(()));
    assert_eq!(check(key(5, v4(2), 1, 2, proto::TCP)), Ok(()));
    assert_eq!(check(key(5, v4(2), 1, 2, proto::UDP)), Ok(()));
    assert_eq!(check(key(0, Addr::UNSPECIFIED, 0, 0, 0)), Err(EntryError::UnknownKind(0)));
    assert_eq!(check(key(4, v4(2), 0, 0, 6)), Err(EntryError::UnknownKind(4)));
    assert_eq!(check(key(1, v4(2), 0, 0, 0)), Err(EntryError::InvalidKey));
    assert_eq!(check(key(2, v4(2), 0, 0, proto::TCP)), Err(EntryError::InvalidKey));
    assert_eq!(check(key(2, v4(2), 1, 0, 0)), Err(EntryError::InvalidKey));
    assert_eq!(check(key(3, v4(2), 0, 80, proto::TCP)), Err(EntryError::InvalidKey));
    assert_eq!(check(key(5, v4(2), 1, 2, proto::ICMP)), Err(EntryError::InvalidKey));
    // Only the flags that travel: a copy's or a shared entry's marks never do.
    let k = key(5, v4(2), 1, 2, proto::TCP);
    assert_eq!(SyncedEntry::new(&k, 1, v4(9), 0, 0, WIRE_FLAGS).validate(), Ok(()));
    for bad in [0x80u8, 0x40, 0x02] {
        let e = SyncedEntry::new(&k, 1, v4(9), 0, 0, bad);
        assert_eq!(e.validate(), Err(EntryError::UnknownFlags(bad)));
    }
}

// ------------------------------------------------------------------ round trips

#[test]
fn a_sealed_datagram_has_the_documented_header_and_nonce() {
    let mut enc = encoder();
    let mut out = [0u8; MAX_DATAGRAM];
    let fields =
        HelloFields { session: 0x0102, ..hf(0x1122_3344_5566_7788, Phase::Serving, 0x99, 0x77) };
    let len = enc.hello(ME, &fields, &mut out);
    assert_eq!(len, HEADER_BYTES + HELLO_BYTES + TAG_BYTES);
    let d = &out[..len];
    let mut header = b"SPSY".to_vec();
    header.extend_from_slice(&[2, 7, 0x01, 0x02, 0x0a, 0x0b]);
    header.extend_from_slice(&key().id().to_be_bytes());
    header.extend_from_slice(&EPOCH.to_be_bytes());
    header.extend_from_slice(&1u64.to_be_bytes());
    header.extend_from_slice(&SALT.to_be_bytes());
    assert_eq!(&d[..HEADER_BYTES], header.as_slice());
    // The payload is not in clear.
    assert_ne!(&d[HEADER_BYTES..HEADER_BYTES + 8], &0x1122_3344_5566_7788u64.to_be_bytes());
    // An independent XChaCha20-Poly1305 with the documented nonce and associated data opens it.
    let mut nonce = [0u8; 24];
    nonce[0..2].copy_from_slice(&SENDER.to_be_bytes());
    nonce[2..4].copy_from_slice(&ME.to_be_bytes());
    nonce[4..12].copy_from_slice(&EPOCH.to_be_bytes());
    nonce[12..20].copy_from_slice(&1u64.to_be_bytes());
    nonce[20..24].copy_from_slice(&SALT.to_be_bytes());
    let mut plain = d[HEADER_BYTES..len - TAG_BYTES].to_vec();
    XChaCha20Poly1305::new(&key_bytes().into())
        .decrypt_in_place_detached(
            &nonce.into(),
            &d[..HEADER_BYTES],
            &mut plain,
            Tag::from_slice(&d[len - TAG_BYTES..]),
        )
        .unwrap();
    let mut want = 0x1122_3344_5566_7788u64.to_be_bytes().to_vec();
    want.push(1);
    want.extend_from_slice(&0x99u64.to_be_bytes());
    want.extend_from_slice(&0x77u64.to_be_bytes());
    want.extend_from_slice(&0x0102u64.to_be_bytes());
    assert_eq!(plain, want);
    // Sequence numbers are per recipient.
    assert_eq!((enc.next_seq(ME), enc.next_seq(99)), (2, 1));
}

#[test]
fn every_kind_round_trips() {
    let (mut enc, mut s) = proven();
    let mut out = [0u8; MAX_DATAGRAM];
    for (i, phase) in Phase::ALL.into_iter().enumerate() {
        let len = enc.hello(ME, &hf(42 + i as u64, phase, 5, CHALLENGE), &mut out);
        let b = open(&out[..len], &mut s).unwrap();
        assert!(
            matches!(b, Body::Hello { fingerprint, phase: p, challenge: 5, echo: CHALLENGE, session: 0 } if fingerprint == 42 + i as u64 && p == phase)
        );
    }
    let len = enc.bulk_request(ME, 0xdead_beef_0000_0001, 3, ALL_WORKERS, &mut out);
    let b = open(&out[..len], &mut s).unwrap();
    assert!(matches!(
        b,
        Body::BulkRequest { request: 0xdead_beef_0000_0001, attempt: 3, worker: ALL_WORKERS }
    ));
    let part = AnswerPart { request: 7, attempt: 2, worker: 1 };
    let len = enc.answer_end(ME, part, 4, 1_000_000, &mut out);
    let b = open(&out[..len], &mut s).unwrap();
    assert!(matches!(b, Body::AnswerEnd { part: p, workers: 4, sent: 1_000_000 } if p == part));
    let len = enc.bulk_ack(ME, 7, 12_345, &mut out);
    let b = open(&out[..len], &mut s).unwrap();
    assert!(matches!(b, Body::BulkAck { request: 7, datagrams: 12_345 }));

    let sent: Vec<SyncedEntry> = (0..5).map(entry).collect();
    let p = enc.entries(EntriesKind::Remove, ME, &mut sent.clone().into_iter(), &mut out).unwrap();
    let b = open(&out[..p.len], &mut s).unwrap();
    assert!(matches!(b, Body::Remove(_)));
    assert_eq!(entries_of(&b), sent);
    let p = enc.entries(EntriesKind::Entries, ME, &mut sent.clone().into_iter(), &mut out).unwrap();
    let b = open(&out[..p.len], &mut s).unwrap();
    assert!(matches!(b, Body::Entries(r) if r.len() == 5 && !r.is_empty()));
    assert_eq!(entries_of(&b), sent);
    let p = enc.answer(ME, part, &mut sent.clone().into_iter(), &mut out).unwrap();
    let b = open(&out[..p.len], &mut s).unwrap();
    assert!(matches!(b, Body::Answer(q, _) if q == part));
    assert_eq!(entries_of(&b), sent);
}

#[test]
fn the_encoder_packs_as_many_entries_as_fit() {
    assert_eq!((ENTRIES_PER_DATAGRAM, ANSWER_ENTRIES_PER_DATAGRAM), (19, 19));
    let (mut enc, mut s) = proven();
    for n in [1u32, 18, 19, 20, 38, 39, 1000] {
        let all: Vec<SyncedEntry> = (0..n).map(entry).collect();
        let mut got = Vec::new();
        let mut sizes = Vec::new();
        let sent = enc.all_entries(EntriesKind::Entries, ME, all.clone(), |d| {
            assert!(d.len() <= MAX_DATAGRAM);
            sizes.push(d.len());
            got.extend(entries_of(&open(d, &mut s).unwrap()));
        });
        assert_eq!(sent, u64::from(n));
        assert_eq!(got, all, "{n} entries, in order");
        let full =
            HEADER_BYTES + ENTRIES_PREFIX_BYTES + ENTRIES_PER_DATAGRAM * ENTRY_BYTES + TAG_BYTES;
        assert_eq!(full, 1363);
        assert_eq!(sizes.len(), (n as usize).div_ceil(ENTRIES_PER_DATAGRAM), "{n}");
        // Every datagram but the last is full; one more entry would not fit.
        for s in &sizes[..sizes.len() - 1] {
            assert_eq!(*s, full);
        }
        assert!(full + ENTRY_BYTES > MAX_DATAGRAM);
    }
    let answer_full =
        HEADER_BYTES + ANSWER_PREFIX_BYTES + ANSWER_ENTRIES_PER_DATAGRAM * ENTRY_BYTES + TAG_BYTES;
    assert!(answer_full <= MAX_DATAGRAM && answer_full + ENTRY_BYTES > MAX_DATAGRAM);
    // It takes no more from the iterator than one datagram holds.
    let mut it = (0..100).map(entry);
    let mut out = [0u8; MAX_DATAGRAM];
    let p = enc.entries(EntriesKind::Entries, ME, &mut it, &mut out).unwrap();
    assert_eq!(p.entries, 19);
    assert_eq!(it.next(), Some(entry(19)));
    // Nothing to send: no datagram, no sequence number used.
    let seq = enc.next_seq(ME);
    assert_eq!(enc.entries(EntriesKind::Entries, ME, &mut std::iter::empty(), &mut out), None);
    assert_eq!(enc.next_seq(ME), seq);
}

#[test]
fn the_encoder_leaves_invalid_entries_out() {
    let (mut enc, mut s) = proven();
    let mut bad = entry(1);
    bad.key.kind = 4;
    let input = vec![entry(0), bad, entry(2)];
    let mut got = Vec::new();
    let sent = enc.all_entries(EntriesKind::Entries, ME, input, |d| {
        got.extend(entries_of(&open(d, &mut s).unwrap()));
    });
    assert_eq!(sent, 2);
    assert_eq!(got, vec![entry(0), entry(2)]);
    assert_eq!(enc.skipped_invalid(), 1);
    // Only invalid entries: no datagram.
    let mut out = [0u8; MAX_DATAGRAM];
    assert_eq!(enc.entries(EntriesKind::Entries, ME, &mut std::iter::once(bad), &mut out), None);
    assert_eq!(enc.skipped_invalid(), 2);
}

// ------------------------------------------------------------------ refusals

/// Decode a copy of `d` with a receiver that has proven the sender live.
fn refuse(d: &[u8]) -> Result<(), Refused> {
    let (_, mut s) = proven();
    open(d, &mut s).map(|_| ())
}

/// An encoder past its proving hello (sequence numbers from 2), for `refuse`.
fn after_hello() -> Encoder {
    let (enc, _) = proven();
    enc
}

#[test]
fn reason_names_are_stable() {
    let names: Vec<&str> = Refused::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        names,
        [
            "truncated",
            "oversized",
            "bad_magic",
            "wrong_version",
            "unknown_kind",
            "unknown_sender",
            "wrong_address",
            "wrong_recipient",
            "unknown_key",
            "auth_failed",
            "replayed",
            "stale_epoch",
            "unproven",
            "malformed"
        ]
    );
    assert_eq!(Refused::AuthFailed.to_string(), "auth_failed");
    for (i, r) in Refused::ALL.iter().enumerate() {
        assert_eq!(r.index(), i);
    }
}

#[test]
fn truncated_at_every_length() {
    let d = sealed_entries(&mut after_hello(), 19);
    for len in 0..d.len() {
        let want =
            if len < HEADER_BYTES + TAG_BYTES { Refused::Truncated } else { Refused::AuthFailed };
        assert_eq!(refuse(&d[..len]), Err(want), "length {len}");
    }
    assert_eq!(refuse(&d), Ok(()));
}

#[test]
fn oversized() {
    let mut d = sealed_entries(&mut after_hello(), 19);
    d.resize(MAX_DATAGRAM + 1, 0);
    assert_eq!(refuse(&d), Err(Refused::Oversized));
    d.resize(65_507, 0);
    assert_eq!(refuse(&d), Err(Refused::Oversized));
}

#[test]
fn header_checks_come_first() {
    let d = sealed_entries(&mut after_hello(), 3);
    let with = |i: usize, v: u8| {
        let mut x = d.clone();
        x[i] = v;
        refuse(&x)
    };
    assert_eq!(with(0, b'X'), Err(Refused::BadMagic));
    assert_eq!(with(3, b'x'), Err(Refused::BadMagic));
    assert_eq!(with(4, 1), Err(Refused::WrongVersion));
    assert_eq!(with(4, 0), Err(Refused::WrongVersion));
    assert_eq!(with(5, 0), Err(Refused::UnknownKind));
    assert_eq!(with(5, 8), Err(Refused::UnknownKind));
    assert_eq!(with(5, 0xff), Err(Refused::UnknownKind));
    // Sender 0x0103: not a configured peer.
    assert_eq!(with(7, 3), Err(Refused::UnknownSender));
    // Another recipient.
    assert_eq!(with(9, 0x0c), Err(Refused::WrongRecipient));
    // Another key id.
    assert_eq!(with(10, d[10] ^ 1), Err(Refused::UnknownKey));
    // A known kind changed into another known kind: the header is authenticated.
    assert_eq!(with(5, Kind::Remove as u8), Err(Refused::AuthFailed));
    // From another address than the peer's, with its id.
    let (_, mut s) = proven();
    let mut buf = d.clone();
    let r = decode(&mut buf, "198.18.0.66".parse().unwrap(), ME, &ring(), &mut s).map(|_| ());
    assert_eq!(r, Err(Refused::WrongAddress));
    // An IPv4-mapped IPv6 source is the IPv4 address it is.
    let mut buf = d.clone();
    let mapped: IpAddr = "::ffff:198.18.0.12".parse().unwrap();
    assert!(decode(&mut buf, mapped, ME, &ring(), &mut s).is_ok());
}

#[test]
fn any_flipped_bit_after_the_checked_header_fields_fails_authentication() {
    let d = sealed_entries(&mut after_hello(), 2);
    // Sender, recipient and key id have their own reasons: the epoch, the sequence, the salt,
    // the payload and the tag are covered by the tag alone.
    for i in 14..d.len() {
        for bit in [0x01u8, 0x80] {
            let mut x = d.clone();
            x[i] ^= bit;
            assert_eq!(refuse(&x), Err(Refused::AuthFailed), "byte {i} bit {bit:#x}");
        }
    }
}

#[test]
fn forged_and_wrong_key_datagrams_are_refused() {
    // Sealed under another key: its id is unknown here.
    let d = sealed_entries(&mut Encoder::new(&other_key(), SENDER, EPOCH, SALT), 3);
    assert_eq!(refuse(&d), Err(Refused::UnknownKey));
    // Another key claiming the right key's id: the tag fails.
    let mut x = d.clone();
    x[10..14].copy_from_slice(&key().id().to_be_bytes());
    assert_eq!(refuse(&x), Err(Refused::AuthFailed));
    // A forged tag.
    let mut d = sealed_entries(&mut after_hello(), 3);
    let n = d.len();
    d[n - TAG_BYTES..].fill(0);
    assert_eq!(refuse(&d), Err(Refused::AuthFailed));
    // A datagram built by hand with the right header and a made-up payload and tag.
    let mut x = d[..HEADER_BYTES].to_vec();
    x.extend_from_slice(&[0u8; 2 + ENTRY_BYTES + TAG_BYTES]);
    assert_eq!(refuse(&x), Err(Refused::AuthFailed));
}

#[test]
fn a_second_key_of_the_ring_opens_too() {
    let mut enc = Encoder::new(&other_key(), SENDER, EPOCH, SALT);
    let mut s = fresh();
    let both = KeyRing { current: key(), other: Some(other_key()) };
    let mut out = [0u8; MAX_DATAGRAM];
    let n = enc.hello(ME, &hf(1, Phase::Serving, 77, CHALLENGE), &mut out);
    assert!(decode(&mut out[..n], peer_addr(), ME, &both, &mut s).is_ok());
    enc.set_key(&key());
    let d = sealed_entries(&mut enc, 2);
    let mut buf = d.clone();
    assert!(decode(&mut buf, peer_addr(), ME, &both, &mut s).is_ok());
}

// ------------------------------------------------------------------ sessions

#[test]
fn nothing_but_a_hello_is_accepted_before_the_peer_proves_it_is_live() {
    let mut enc = encoder();
    let mut s = fresh();
    let entries = sealed_entries(&mut enc, 2);
    assert_eq!(open(&entries, &mut s).map(|_| ()), Err(Refused::Unproven));
    // A hello that does not echo this life's challenge teaches the peer's challenge only.
    let mut out = [0u8; MAX_DATAGRAM];
    let n = enc.hello(ME, &hf(1, Phase::Starting, 0xabc, 0), &mut out);
    assert!(open(&out[..n], &mut s).is_ok());
    assert!(!s.is_proven(SENDER));
    assert_eq!(s.their_challenge(SENDER), 0xabc);
    let more = sealed_entries(&mut enc, 2);
    assert_eq!(open(&more, &mut s).map(|_| ()), Err(Refused::Unproven));
    // One that echoes it proves the peer: its next datagrams are accepted.
    let n = enc.hello(ME, &hf(1, Phase::Starting, 0xabc, CHALLENGE), &mut out);
    assert!(open(&out[..n], &mut s).is_ok());
    assert!(s.is_proven(SENDER));
    assert_eq!(s.epoch(SENDER), Some(EPOCH));
    assert!(open(&sealed_entries(&mut enc, 2), &mut s).is_ok());
    // What it sealed before the proof stays refused (it came before the session).
    assert_eq!(open(&more, &mut s).map(|_| ()), Err(Refused::Replayed));
}

#[test]
fn datagrams_recorded_before_a_restart_are_refused_after_it() {
    // A live fleet: the peer proven by the receiver's first life; its datagrams recorded.
    let (mut enc, mut s) = proven();
    let recorded: Vec<Vec<u8>> = (0..20).map(|_| sealed_entries(&mut enc, 3)).collect();
    let mut out = [0u8; MAX_DATAGRAM];
    let n = enc.bulk_request(ME, 9, 0, ALL_WORKERS, &mut out);
    let bulk = out[..n].to_vec();
    let n = enc.hello(ME, &hf(1, Phase::Serving, 77, CHALLENGE), &mut out);
    let hello = out[..n].to_vec();
    for d in &recorded {
        assert!(open(d, &mut s).is_ok());
    }
    // The receiver restarts: a new challenge. Every recorded datagram replayed is refused,
    // the hello too (it echoes the old life's challenge: not a proof), nothing accepted.
    let mut restarted = Sessions::new(CHALLENGE + 1, [(SENDER, peer_addr())]);
    for d in recorded.iter().chain([&bulk]) {
        assert_eq!(open(d, &mut restarted).map(|_| ()), Err(Refused::Unproven));
    }
    assert!(open(&hello, &mut restarted).is_ok());
    assert!(!restarted.is_proven(SENDER), "a replayed hello proves nothing");
    assert_eq!(open(&recorded[0], &mut restarted).map(|_| ()), Err(Refused::Unproven));
}

#[test]
fn a_peer_back_with_a_lower_epoch_is_taken_back_once_it_echoes() {
    let (mut old, mut s) = proven();
    let stale = sealed_entries(&mut old, 1);
    // The peer restarts with a lower epoch (its clock stepped back and its epoch file is gone).
    let mut low = Encoder::new(&key(), SENDER, EPOCH - 50_000, SALT + 1);
    assert_eq!(open(&sealed_entries(&mut low, 1), &mut s).map(|_| ()), Err(Refused::StaleEpoch));
    let mut out = [0u8; MAX_DATAGRAM];
    let n = low.hello(ME, &hf(1, Phase::Starting, 0x55, CHALLENGE), &mut out);
    assert!(open(&out[..n], &mut s).is_ok());
    assert_eq!(s.epoch(SENDER), Some(EPOCH - 50_000), "the new life is the session");
    assert!(open(&sealed_entries(&mut low, 1), &mut s).is_ok());
    // Its old life's datagrams are now another life's.
    assert_eq!(open(&stale, &mut s).map(|_| ()), Err(Refused::StaleEpoch));
}

#[test]
fn a_forged_datagram_does_not_move_the_session() {
    let (mut enc, mut s) = proven();
    let next = sealed_entries(&mut enc, 1);
    let mut forger = Encoder::new(&other_key(), SENDER, EPOCH + 1_000, SALT);
    let mut out = [0u8; MAX_DATAGRAM];
    for _ in 0..500 {
        forger.hello(ME, &hf(0, Phase::Serving, 1, CHALLENGE), &mut out);
    }
    let len = forger.hello(ME, &hf(0, Phase::Serving, 1, CHALLENGE), &mut out);
    // Another key's id, then the right id with the wrong key.
    assert_eq!(open(&out[..len], &mut s).map(|_| ()), Err(Refused::UnknownKey));
    out[10..14].copy_from_slice(&key().id().to_be_bytes());
    assert_eq!(open(&out[..len], &mut s).map(|_| ()), Err(Refused::AuthFailed));
    assert_eq!(s.epoch(SENDER), Some(EPOCH));
    assert!(open(&next, &mut s).is_ok());
}

#[test]
fn replays_and_the_window() {
    let (mut enc, mut s) = proven();
    let mut out = [0u8; MAX_DATAGRAM];
    let all: Vec<Vec<u8>> = (0..300)
        .map(|_| {
            let n = enc.bulk_ack(ME, 1, 1, &mut out);
            out[..n].to_vec()
        })
        .collect();
    let mut accept = |d: &Vec<u8>| open(d, &mut s).map(|_| ());
    // The newest first (sequence 301), then the window below it in reverse, each once.
    assert_eq!(accept(&all[299]), Ok(()));
    for i in (300 - REPLAY_WINDOW as usize..299).rev() {
        assert_eq!(accept(&all[i]), Ok(()), "datagram {i}");
        assert_eq!(accept(&all[i]), Err(Refused::Replayed), "datagram {i} again");
    }
    // Below the window: refused, though never seen.
    assert_eq!(accept(&all[300 - REPLAY_WINDOW as usize - 1]), Err(Refused::Replayed));
    assert_eq!(accept(&all[0]), Err(Refused::Replayed));
}

#[test]
fn sequence_numbers_never_received_are_counted_lost() {
    let (mut enc, mut s) = proven();
    let sent: Vec<Vec<u8>> = (0..400).map(|_| sealed_entries(&mut enc, 1)).collect();
    // Every third one lost on the way.
    for (i, d) in sent.iter().enumerate() {
        if i % 3 != 1 {
            assert!(open(d, &mut s).is_ok());
        }
    }
    // The ones that left the window unseen are counted; the newest 128 are not judged yet.
    let judged = 400 - REPLAY_WINDOW as usize;
    let lost = (0..judged).filter(|i| i % 3 == 1).count() as u64;
    assert_eq!(s.lost(SENDER), lost);
    // A jump far ahead (1,000 datagrams lost in a row) counts the window's unseen and the
    // numbers jumped over that the new window no longer holds.
    let before = s.lost(SENDER);
    for _ in 0..1_000 {
        let _ = sealed_entries(&mut enc, 1);
    }
    assert!(open(&sealed_entries(&mut enc, 1), &mut s).is_ok());
    let skipped = 1_000 - (REPLAY_WINDOW - 1);
    let unseen_in_window = (400 - REPLAY_WINDOW as usize..400).filter(|i| i % 3 == 1).count();
    assert_eq!(s.lost(SENDER) - before, skipped + unseen_in_window as u64);
}

/// Seal an arbitrary payload as `kind`, as a buggy but keyed peer would (its sequence number
/// `seq`, well above the proving hello's).
fn seal_raw(kind: u8, payload: &[u8], seq: u64) -> Vec<u8> {
    let mut d = b"SPSY".to_vec();
    d.push(VERSION);
    d.push(kind);
    d.extend_from_slice(&SENDER.to_be_bytes());
    d.extend_from_slice(&ME.to_be_bytes());
    d.extend_from_slice(&key().id().to_be_bytes());
    d.extend_from_slice(&EPOCH.to_be_bytes());
    d.extend_from_slice(&seq.to_be_bytes());
    d.extend_from_slice(&SALT.to_be_bytes());
    let mut nonce = [0u8; 24];
    nonce[0..4].copy_from_slice(&d[6..10]);
    nonce[4..24].copy_from_slice(&d[14..34]);
    let mut ct = payload.to_vec();
    let tag = XChaCha20Poly1305::new(&key_bytes().into())
        .encrypt_in_place_detached(&nonce.into(), &d, &mut ct)
        .unwrap();
    d.extend_from_slice(&ct);
    d.extend_from_slice(&tag);
    d
}

#[test]
fn authentic_but_malformed_payloads() {
    let rec = entry(1).to_bytes();
    let records = |n: usize| rec.repeat(n);
    let with_count = |count: u16, n: usize| {
        let mut p = count.to_be_bytes().to_vec();
        p.extend_from_slice(&records(n));
        p
    };
    let answer = |count: u16, n: usize| {
        let mut p = vec![0u8; 12];
        p.extend_from_slice(&with_count(count, n));
        p
    };
    let mut bad_kind = rec;
    bad_kind[37] = 4;
    let mut bad_proto = rec;
    bad_proto[36] = proto::ICMP;
    let mut bad_flags = rec;
    bad_flags[68] = 0x80;
    let mut one_bad = with_count(3, 3);
    one_bad[2 + 2 * ENTRY_BYTES + 37] = 0;
    let cases: Vec<(&str, u8, Vec<u8>)> = vec![
        ("count above the records", 1, with_count(3, 2)),
        ("count below the records", 1, with_count(1, 2)),
        ("count zero", 1, with_count(0, 0)),
        ("no count", 2, vec![]),
        ("half a count", 2, vec![0]),
        ("a partial record", 1, {
            let mut p = with_count(1, 1);
            p.pop();
            p
        }),
        ("unknown tuple kind", 1, [&[0, 1][..], &bad_kind].concat()),
        ("5-tuple of ICMP", 2, [&[0, 1][..], &bad_proto].concat()),
        ("a copy's mark", 1, [&[0, 1][..], &bad_flags].concat()),
        ("one bad record of three", 1, one_bad),
        ("short bulk request", 3, vec![0; 11]),
        ("long bulk request", 3, vec![0; 13]),
        ("answer without its prefix", 4, vec![0; 13]),
        ("answer count above", 4, answer(2, 1)),
        ("answer count zero", 4, answer(0, 0)),
        ("short answer end", 5, vec![0; 21]),
        ("long bulk ack", 6, vec![0; 17]),
        ("short hello", 7, vec![0; 32]),
        ("unknown phase", 7, [&[0u8; 8][..], &[4], &[0u8; 24]].concat()),
    ];
    for (i, (name, kind, payload)) in cases.into_iter().enumerate() {
        let d = seal_raw(kind, &payload, 10 + i as u64);
        assert_eq!(refuse(&d), Err(Refused::Malformed), "{name}");
    }
    // The same construction with good payloads is accepted: the refusals are the payloads'.
    assert_eq!(refuse(&seal_raw(1, &with_count(2, 2), 5)), Ok(()));
    assert_eq!(refuse(&seal_raw(4, &answer(2, 2), 5)), Ok(()));
    assert_eq!(refuse(&seal_raw(7, &[0u8; 33], 5)), Ok(()));
}

#[test]
fn a_sender_that_is_not_configured_is_refused_before_authentication() {
    let d = sealed_entries(&mut Encoder::new(&key(), 5, EPOCH, SALT), 1);
    assert_eq!(refuse(&d), Err(Refused::UnknownSender));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Arbitrary bytes never panic the decoder, and never pass without the key: `Ok` needs a
    /// tag made with the key, which random bytes (or bytes under another key) do not have.
    #[test]
    fn decode_never_panics_nor_accepts_garbage(
        mut bytes in proptest::collection::vec(any::<u8>(), 0..1500),
        header in any::<bool>(),
        kind in 0u8..9,
    ) {
        if header && bytes.len() >= HEADER_BYTES {
            // Often a plausible header, so that the AEAD check itself is what refuses.
            bytes[..4].copy_from_slice(&MAGIC);
            bytes[4] = VERSION;
            bytes[5] = kind;
            bytes[6..8].copy_from_slice(&SENDER.to_be_bytes());
            bytes[8..10].copy_from_slice(&ME.to_be_bytes());
            bytes[10..14].copy_from_slice(&key().id().to_be_bytes());
        }
        let mut s = fresh();
        let r = decode(&mut bytes, peer_addr(), ME, &ring(), &mut s);
        prop_assert!(r.is_err());
        prop_assert_eq!(s.their_challenge(SENDER), 0);
        prop_assert!(!s.is_proven(SENDER));
    }

    /// Genuine datagrams under another key are never accepted either, and any cut or mutation
    /// of a genuine datagram is refused.
    #[test]
    fn mutations_of_genuine_datagrams_are_refused(
        n in 1u32..=19,
        at in any::<prop::sample::Index>(),
        xor in 1u8..=255,
        cut in any::<prop::sample::Index>(),
    ) {
        let d = sealed_entries(&mut Encoder::new(&other_key(), SENDER, EPOCH, SALT), n);
        prop_assert!(refuse(&d).is_err());
        let d = sealed_entries(&mut after_hello(), n);
        let mut x = d.clone();
        x[at.index(d.len())] ^= xor;
        prop_assert!(refuse(&x).is_err());
        prop_assert!(refuse(&d[..cut.index(d.len())]).is_err());
    }

    /// Any valid entry round-trips through a datagram.
    #[test]
    fn entries_round_trip(
        src in any::<[u8; 16]>(), dst in any::<[u8; 16]>(), sport: u16, dport: u16,
        udp: bool, service: u64, backend in any::<[u8; 16]>(), port: u16, age: u64,
        unhealthy: bool,
    ) {
        let e = SyncedEntry::new(
            &FlowKey {
                src: Addr(src), dst: Addr(dst), sport, dport,
                proto: if udp { proto::UDP } else { proto::TCP },
                kind: TupleKind::Five as u8, service: 1,
            },
            service, Addr(backend), port, age, u8::from(unhealthy),
        );
        let (mut enc, mut s) = proven();
        let mut out = [0u8; MAX_DATAGRAM];
        let p = enc.entries(EntriesKind::Entries, ME, &mut std::iter::once(e), &mut out).unwrap();
        let b = open(&out[..p.len], &mut s).unwrap();
        prop_assert_eq!(entries_of(&b), vec![e]);
    }
}

// ------------------------------------------------------------------ the figures

#[test]
fn sizes_on_the_wire_in_scale_out_md() {
    // Ethernet header 14 + FCS 4 + preamble and SFD 8 + inter-frame gap 12; UDP 8; IPv4 20.
    let line = |udp_payload: usize| udp_payload + 8 + 20 + 14 + 4 + 8 + 12;
    let full = HEADER_BYTES + ENTRIES_PREFIX_BYTES + ENTRIES_PER_DATAGRAM * ENTRY_BYTES + TAG_BYTES;
    assert_eq!((ENTRIES_PER_DATAGRAM, full, line(full)), (19, 1363, 1429));
    assert_eq!(format!("{:.1}", line(full) as f64 / 19.0), "75.2");
    assert_eq!(format!("{:.1}", (line(full) + 20) as f64 / 19.0), "76.3");
    let bulk = |n: usize| {
        let datagrams = n.div_ceil(ENTRIES_PER_DATAGRAM);
        let last = n - (datagrams - 1) * ENTRIES_PER_DATAGRAM;
        let last_len = HEADER_BYTES + ENTRIES_PREFIX_BYTES + last * ENTRY_BYTES + TAG_BYTES;
        let wire = (datagrams - 1) * line(full) + line(last_len);
        (datagrams, wire)
    };
    assert_eq!(bulk(1_000_000), (52_632, 75_210_576));
    assert_eq!(bulk(200_000), (10_527, 15_042_186));
    // The figures docs/scale-out.md gives.
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/scale-out.md"))
        .expect("docs/scale-out.md");
    for figure in [
        "**19**",
        "**1,363 bytes**",
        "**1,429 bytes of line time**",
        "**75.2 bytes",
        "1,449 and 76.3",
        "**52,632 datagrams**",
        "**75.2 MB**",
        "**10,527 datagrams**",
        "**15.0 MB**",
    ] {
        assert!(doc.contains(figure), "docs/scale-out.md lacks {figure}");
    }
}

// ------------------------------------------------------------------ cost

/// Encode and seal 1M entries and decode them back; prints the time. Run:
/// `cargo test -p spillway-control --release --lib sync -- --ignored --nocapture`.
/// Only optimised builds have it: unoptimised, it takes 40 s of every test run and
/// measures nothing a user runs.
#[cfg(not(debug_assertions))]
#[test]
#[ignore = "a micro-benchmark"]
fn bench_a_million_entries() {
    let entries: Vec<SyncedEntry> = (0..1_000_000).map(entry).collect();
    let (mut enc, mut s) = proven();
    let mut datagrams = Vec::with_capacity(52_632);
    let t = std::time::Instant::now();
    let mut bytes = 0usize;
    enc.all_entries(EntriesKind::Entries, ME, entries.iter().copied(), |d| {
        bytes += d.len();
        datagrams.push(d.to_vec());
    });
    let seal = t.elapsed();
    let t = std::time::Instant::now();
    let mut n = 0;
    for d in &mut datagrams {
        if let Ok(Datagram { body: Body::Entries(r), .. }) =
            decode(d, peer_addr(), ME, &ring(), &mut s)
        {
            n += r.iter().count();
        }
    }
    let open = t.elapsed();
    assert_eq!(n, 1_000_000);
    let mb = bytes as f64 / 1e6;
    println!(
        "1M entries, {} datagrams, {mb:.1} MB: encode+seal {:.0} ms ({:.0} MB/s), decode+open {:.0} ms ({:.0} MB/s)",
        datagrams.len(),
        seal.as_secs_f64() * 1e3,
        mb / seal.as_secs_f64(),
        open.as_secs_f64() * 1e3,
        mb / open.as_secs_f64(),
    );
}
