//! The sync format's behaviour: exact bytes where the format is the behaviour, every refusal
//! from a crafted datagram, the encoder's packing, the table file.

use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{KeyInit, Tag, XChaCha20Poly1305};
use proptest::prelude::*;
use spillway_core::addr::Addr;
use spillway_core::flow::{proto, FlowKey, TupleKind};

use super::*;
use crate::fleet::Phase;

const SENDER: u32 = 0x0102_0304;
const EPOCH: u64 = 1_765_000_000_000;

fn key() -> Key {
    Key::from_bytes(std::array::from_fn(|i| (i as u8).wrapping_mul(7).wrapping_add(1)))
}

fn other_key() -> Key {
    Key::from_bytes([0x42; KEY_BYTES])
}

fn replay() -> ReplayState {
    ReplayState::new([SENDER, 99])
}

/// A valid 5-tuple entry, varied by `i`.
fn entry(i: u32) -> SyncedEntry {
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
        (i % 4) as u8,
    )
}

fn sealed_entries(enc: &mut Encoder, n: u32) -> Vec<u8> {
    let mut out = [0u8; MAX_DATAGRAM];
    let p = enc.entries(EntriesKind::Entries, &mut (0..n).map(entry), &mut out).unwrap();
    out[..p.len].to_vec()
}

fn entries_of(d: &Datagram<'_>) -> Vec<SyncedEntry> {
    match d.body {
        Body::Entries(r) | Body::Remove(r) => r.iter().collect(),
        _ => panic!("not entries: {d:?}"),
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
        0x81,
    );
    let mut want = Vec::new();
    want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 7]);
    want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 51, 100, 10]);
    want.extend_from_slice(&[0x12, 0x34, 0x00, 0x50, 6, 5]);
    want.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 0, 7]);
    want.extend_from_slice(&[0xab, 0xcd, 0xff, 0xff, 0xff, 0xff, 0x81]);
    assert_eq!(want.len(), ENTRY_BYTES);
    assert_eq!(e.to_bytes().as_slice(), want.as_slice());
    // The local service id is not sent; the receiver gives its own.
    let back = SyncedEntry::decode(&e.to_bytes()).unwrap();
    assert_eq!(back, e);
    assert_eq!(back.key.service, 0);
    assert_eq!(back.tracking_key(9).service, 9);
    assert_eq!(back.idle_ms, u32::MAX, "idle time saturates");
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
fn entry_validation_follows_the_tuple_kinds() {
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
}

// ------------------------------------------------------------------ round trips

#[test]
fn a_sealed_datagram_has_the_documented_header_and_nonce() {
    let mut enc = Encoder::new(&key(), SENDER, EPOCH);
    let mut out = [0u8; MAX_DATAGRAM];
    let len = enc.hello(0x1122_3344_5566_7788, Phase::Serving, &mut out);
    assert_eq!(len, HEADER_BYTES + HELLO_BYTES + TAG_BYTES);
    let d = &out[..len];
    let mut header = b"SPSY".to_vec();
    header.extend_from_slice(&[1, 5, 0x01, 0x02, 0x03, 0x04]);
    header.extend_from_slice(&EPOCH.to_be_bytes());
    header.extend_from_slice(&1u64.to_be_bytes());
    assert_eq!(&d[..HEADER_BYTES], header.as_slice());
    // The payload is not in clear.
    assert_ne!(&d[HEADER_BYTES..HEADER_BYTES + 8], &0x1122_3344_5566_7788u64.to_be_bytes());
    // An independent XChaCha20-Poly1305 with the documented nonce and associated data opens it.
    let mut nonce = [0u8; 24];
    nonce[0..4].copy_from_slice(&SENDER.to_be_bytes());
    nonce[4..12].copy_from_slice(&EPOCH.to_be_bytes());
    nonce[12..20].copy_from_slice(&1u64.to_be_bytes());
    let bytes: [u8; 32] = std::array::from_fn(|i| (i as u8).wrapping_mul(7).wrapping_add(1));
    let mut plain = d[HEADER_BYTES..len - TAG_BYTES].to_vec();
    XChaCha20Poly1305::new(&bytes.into())
        .decrypt_in_place_detached(
            &nonce.into(),
            &d[..HEADER_BYTES],
            &mut plain,
            Tag::from_slice(&d[len - TAG_BYTES..]),
        )
        .unwrap();
    let mut want = 0x1122_3344_5566_7788u64.to_be_bytes().to_vec();
    want.push(1);
    assert_eq!(plain, want);
    assert_eq!(enc.next_seq(), 2);
}

#[test]
fn every_kind_round_trips() {
    let mut enc = Encoder::new(&key(), SENDER, EPOCH);
    let mut rs = replay();
    let mut out = [0u8; MAX_DATAGRAM];

    for (i, phase) in Phase::ALL.into_iter().enumerate() {
        let len = enc.hello(42 + i as u64, phase, &mut out);
        let d = decode(&mut out[..len], &key(), &mut rs).unwrap();
        assert!(
            matches!(d.body, Body::Hello { fingerprint, phase: p } if fingerprint == 42 + i as u64 && p == phase)
        );
        assert_eq!(d.header.kind, Kind::Hello);
    }
    let len = enc.bulk_request(0xdead_beef_0000_0001, &mut out);
    let d = decode(&mut out[..len], &key(), &mut rs).unwrap();
    assert!(matches!(d.body, Body::BulkRequest { request: 0xdead_beef_0000_0001 }));
    let len = enc.bulk_end(7, 1_000_000, &mut out);
    let d = decode(&mut out[..len], &key(), &mut rs).unwrap();
    assert!(matches!(d.body, Body::BulkEnd { request: 7, sent: 1_000_000 }));
    assert_eq!(d.header, Header { kind: Kind::BulkEnd, sender: SENDER, epoch: EPOCH, seq: 6 });

    let sent: Vec<SyncedEntry> = (0..5).map(entry).collect();
    let p = enc.entries(EntriesKind::Remove, &mut sent.clone().into_iter(), &mut out).unwrap();
    let d = decode(&mut out[..p.len], &key(), &mut rs).unwrap();
    assert!(matches!(d.body, Body::Remove(_)));
    assert_eq!(entries_of(&d), sent);
    let p = enc.entries(EntriesKind::Entries, &mut sent.clone().into_iter(), &mut out).unwrap();
    let d = decode(&mut out[..p.len], &key(), &mut rs).unwrap();
    assert!(matches!(d.body, Body::Entries(r) if r.len() == 5 && !r.is_empty()));
    assert_eq!(entries_of(&d), sent);
}

#[test]
fn the_encoder_packs_as_many_entries_as_fit() {
    assert_eq!(ENTRIES_PER_DATAGRAM, 19);
    let mut enc = Encoder::new(&key(), SENDER, EPOCH);
    let mut rs = replay();
    for n in [1u32, 18, 19, 20, 38, 39, 1000] {
        let all: Vec<SyncedEntry> = (0..n).map(entry).collect();
        let mut got = Vec::new();
        let mut sizes = Vec::new();
        let sent = enc.all_entries(EntriesKind::Entries, all.clone(), |d| {
            assert!(d.len() <= MAX_DATAGRAM);
            sizes.push(d.len());
            let mut buf = d.to_vec();
            got.extend(entries_of(&decode(&mut buf, &key(), &mut rs).unwrap()));
        });
        assert_eq!(sent, u64::from(n));
        assert_eq!(got, all, "{n} entries, in order");
        let full =
            HEADER_BYTES + ENTRIES_PREFIX_BYTES + ENTRIES_PER_DATAGRAM * ENTRY_BYTES + TAG_BYTES;
        assert_eq!(full, 1355);
        assert_eq!(sizes.len(), (n as usize).div_ceil(ENTRIES_PER_DATAGRAM), "{n}");
        // Every datagram but the last is full; one more entry would not fit.
        for s in &sizes[..sizes.len() - 1] {
            assert_eq!(*s, full);
        }
        assert!(full + ENTRY_BYTES > MAX_DATAGRAM);
    }
    // It takes no more from the iterator than one datagram holds.
    let mut it = (0..100).map(entry);
    let mut out = [0u8; MAX_DATAGRAM];
    let p = enc.entries(EntriesKind::Entries, &mut it, &mut out).unwrap();
    assert_eq!(p.entries, 19);
    assert_eq!(it.next(), Some(entry(19)));
    // Nothing to send: no datagram, no sequence number used.
    let seq = enc.next_seq();
    assert_eq!(enc.entries(EntriesKind::Entries, &mut std::iter::empty(), &mut out), None);
    assert_eq!(enc.next_seq(), seq);
}

#[test]
fn the_encoder_leaves_invalid_entries_out() {
    let mut enc = Encoder::new(&key(), SENDER, EPOCH);
    let mut bad = entry(1);
    bad.key.kind = 4;
    let input = vec![entry(0), bad, entry(2)];
    let mut got = Vec::new();
    let sent = enc.all_entries(EntriesKind::Entries, input, |d| {
        let mut buf = d.to_vec();
        got.extend(entries_of(&decode(&mut buf, &key(), &mut replay()).unwrap()));
    });
    assert_eq!(sent, 2);
    assert_eq!(got, vec![entry(0), entry(2)]);
    assert_eq!(enc.skipped_invalid(), 1);
    // Only invalid entries: no datagram.
    let mut out = [0u8; MAX_DATAGRAM];
    assert_eq!(enc.entries(EntriesKind::Entries, &mut std::iter::once(bad), &mut out), None);
    assert_eq!(enc.skipped_invalid(), 2);
}

// ------------------------------------------------------------------ refusals

/// Decode a copy of `d` with a fresh replay state.
fn refuse(d: &[u8]) -> Result<(), Refused> {
    let mut buf = d.to_vec();
    decode(&mut buf, &key(), &mut replay()).map(|_| ())
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
            "auth_failed",
            "replayed",
            "stale_epoch",
            "malformed"
        ]
    );
    assert_eq!(Refused::AuthFailed.to_string(), "auth_failed");
}

#[test]
fn truncated_at_every_length() {
    let d = sealed_entries(&mut Encoder::new(&key(), SENDER, EPOCH), 19);
    for len in 0..d.len() {
        let want =
            if len < HEADER_BYTES + TAG_BYTES { Refused::Truncated } else { Refused::AuthFailed };
        assert_eq!(refuse(&d[..len]), Err(want), "length {len}");
    }
    assert_eq!(refuse(&d), Ok(()));
}

#[test]
fn oversized() {
    let mut d = sealed_entries(&mut Encoder::new(&key(), SENDER, EPOCH), 19);
    d.resize(MAX_DATAGRAM + 1, 0);
    assert_eq!(refuse(&d), Err(Refused::Oversized));
    d.resize(65_507, 0);
    assert_eq!(refuse(&d), Err(Refused::Oversized));
}

#[test]
fn header_checks_come_first() {
    let d = sealed_entries(&mut Encoder::new(&key(), SENDER, EPOCH), 3);
    let with = |i: usize, v: u8| {
        let mut x = d.clone();
        x[i] = v;
        refuse(&x)
    };
    assert_eq!(with(0, b'X'), Err(Refused::BadMagic));
    assert_eq!(with(3, b'x'), Err(Refused::BadMagic));
    assert_eq!(with(4, 2), Err(Refused::WrongVersion));
    assert_eq!(with(4, 0), Err(Refused::WrongVersion));
    assert_eq!(with(5, 0), Err(Refused::UnknownKind));
    assert_eq!(with(5, 6), Err(Refused::UnknownKind));
    assert_eq!(with(5, 0xff), Err(Refused::UnknownKind));
    // Sender 0x01020305: not a configured peer.
    assert_eq!(with(9, 5), Err(Refused::UnknownSender));
    // A known kind changed into another known kind: the header is authenticated.
    assert_eq!(with(5, Kind::Remove as u8), Err(Refused::AuthFailed));
    // A configured peer's id on another peer's datagram: authenticated too.
    let mut x = d.clone();
    x[6..10].copy_from_slice(&99u32.to_be_bytes());
    assert_eq!(refuse(&x), Err(Refused::AuthFailed));
}

#[test]
fn any_flipped_bit_after_the_checked_header_fields_fails_authentication() {
    let d = sealed_entries(&mut Encoder::new(&key(), SENDER, EPOCH), 2);
    // Sender id bytes would be unknown_sender, the other header bytes have their own reasons:
    // the epoch, the sequence, the payload and the tag are covered by the tag alone.
    for i in 10..d.len() {
        for bit in [0x01u8, 0x80] {
            let mut x = d.clone();
            x[i] ^= bit;
            assert_eq!(refuse(&x), Err(Refused::AuthFailed), "byte {i} bit {bit:#x}");
        }
    }
}

#[test]
fn forged_and_wrong_key_datagrams_fail_authentication() {
    // Sealed under another key.
    let d = sealed_entries(&mut Encoder::new(&other_key(), SENDER, EPOCH), 3);
    assert_eq!(refuse(&d), Err(Refused::AuthFailed));
    // A forged tag.
    let mut d = sealed_entries(&mut Encoder::new(&key(), SENDER, EPOCH), 3);
    let n = d.len();
    d[n - TAG_BYTES..].fill(0);
    assert_eq!(refuse(&d), Err(Refused::AuthFailed));
    // A datagram built by hand with the right header and a made-up payload and tag.
    let mut x = d[..HEADER_BYTES].to_vec();
    x.extend_from_slice(&[0u8; 2 + ENTRY_BYTES + TAG_BYTES]);
    assert_eq!(refuse(&x), Err(Refused::AuthFailed));
}

#[test]
fn a_forged_datagram_does_not_move_the_window() {
    let mut enc = Encoder::new(&key(), SENDER, EPOCH);
    let first = sealed_entries(&mut enc, 1);
    let mut forger = Encoder::new(&other_key(), SENDER, EPOCH + 1_000);
    // The forger's datagrams claim a newer epoch and a high sequence.
    let mut out = [0u8; MAX_DATAGRAM];
    for _ in 0..500 {
        forger.hello(0, Phase::Serving, &mut out);
    }
    let len = forger.hello(0, Phase::Serving, &mut out);
    let mut rs = replay();
    assert_eq!(decode(&mut out[..len], &key(), &mut rs).map(|_| ()), Err(Refused::AuthFailed));
    assert_eq!(rs.epoch(SENDER), None);
    // The genuine peer's first datagram is still accepted: neither epoch nor window moved.
    let mut buf = first.clone();
    assert!(decode(&mut buf, &key(), &mut rs).is_ok());
    assert_eq!(rs.epoch(SENDER), Some(EPOCH));
}

#[test]
fn replays_and_stale_epochs_are_refused() {
    let mut rs = replay();
    let mut old = Encoder::new(&key(), SENDER, EPOCH);
    let a = sealed_entries(&mut old, 1);
    let b = sealed_entries(&mut old, 1);
    let mut buf = a.clone();
    assert!(decode(&mut buf, &key(), &mut rs).is_ok());
    let mut buf = a.clone();
    assert_eq!(decode(&mut buf, &key(), &mut rs).map(|_| ()), Err(Refused::Replayed));
    // The sender restarts: a newer epoch, sequence numbers from 1 again.
    let mut new = Encoder::new(&key(), SENDER, EPOCH + 5_000);
    let c = sealed_entries(&mut new, 1);
    let mut buf = c.clone();
    assert!(decode(&mut buf, &key(), &mut rs).is_ok());
    // The old life's next datagram, never seen, is now stale.
    let mut buf = b.clone();
    assert_eq!(decode(&mut buf, &key(), &mut rs).map(|_| ()), Err(Refused::StaleEpoch));
    let mut buf = c.clone();
    assert_eq!(decode(&mut buf, &key(), &mut rs).map(|_| ()), Err(Refused::Replayed));
}

#[test]
fn out_of_window_and_out_of_order_sequences() {
    let mut enc = Encoder::new(&key(), SENDER, EPOCH);
    let mut out = [0u8; MAX_DATAGRAM];
    let all: Vec<Vec<u8>> = (0..300)
        .map(|_| {
            let n = enc.bulk_request(1, &mut out);
            out[..n].to_vec()
        })
        .collect();
    let mut rs = replay();
    let accept = |d: &Vec<u8>, rs: &mut ReplayState| {
        let mut b = d.clone();
        decode(&mut b, &key(), rs).map(|_| ())
    };
    // The newest first (sequence 300), then the window below it in reverse, each once.
    assert_eq!(accept(&all[299], &mut rs), Ok(()));
    for i in (300 - REPLAY_WINDOW as usize..299).rev() {
        assert_eq!(accept(&all[i], &mut rs), Ok(()), "seq {}", i + 1);
        assert_eq!(accept(&all[i], &mut rs), Err(Refused::Replayed), "seq {} again", i + 1);
    }
    // Below the window: refused, though never seen.
    assert_eq!(accept(&all[300 - REPLAY_WINDOW as usize - 1], &mut rs), Err(Refused::Replayed));
    assert_eq!(accept(&all[0], &mut rs), Err(Refused::Replayed));
}

/// Seal an arbitrary payload as `kind`, as a buggy but keyed peer would.
fn seal_raw(kind: u8, payload: &[u8], seq: u64) -> Vec<u8> {
    let mut d = b"SPSY".to_vec();
    d.push(VERSION);
    d.push(kind);
    d.extend_from_slice(&SENDER.to_be_bytes());
    d.extend_from_slice(&EPOCH.to_be_bytes());
    d.extend_from_slice(&seq.to_be_bytes());
    let mut nonce = [0u8; 24];
    nonce[..20].copy_from_slice(&d[6..26]);
    let bytes: [u8; 32] = std::array::from_fn(|i| (i as u8).wrapping_mul(7).wrapping_add(1));
    let mut ct = payload.to_vec();
    let tag = XChaCha20Poly1305::new(&bytes.into())
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
    let mut bad_kind = rec;
    bad_kind[37] = 4;
    let mut bad_proto = rec;
    bad_proto[36] = proto::ICMP;
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
        ("one bad record of three", 1, one_bad),
        ("short bulk request", 3, vec![0; 7]),
        ("long bulk request", 3, vec![0; 9]),
        ("short bulk end", 4, vec![0; 15]),
        ("long hello", 5, vec![0; 10]),
        ("unknown phase", 5, [&[0u8; 8][..], &[4]].concat()),
    ];
    for (i, (name, kind, payload)) in cases.into_iter().enumerate() {
        let d = seal_raw(kind, &payload, 1 + i as u64);
        assert_eq!(refuse(&d), Err(Refused::Malformed), "{name}");
    }
    // The same construction with good payloads is accepted: the refusals are the payloads'.
    assert_eq!(refuse(&seal_raw(1, &with_count(2, 2), 1)), Ok(()));
    assert_eq!(refuse(&seal_raw(5, &[0u8; 9], 1)), Ok(()));
    // A malformed datagram still used its sequence number.
    let mut rs = replay();
    let mut d = seal_raw(1, &with_count(3, 2), 50);
    assert_eq!(decode(&mut d, &key(), &mut rs).map(|_| ()), Err(Refused::Malformed));
    let mut d = seal_raw(1, &with_count(2, 2), 50);
    assert_eq!(decode(&mut d, &key(), &mut rs).map(|_| ()), Err(Refused::Replayed));
}

#[test]
fn a_sender_that_is_not_configured_is_refused_before_authentication() {
    let d = sealed_entries(&mut Encoder::new(&key(), 5, EPOCH), 1);
    assert_eq!(refuse(&d), Err(Refused::UnknownSender));
    let mut rs = ReplayState::new([5]);
    let mut buf = d.clone();
    assert!(decode(&mut buf, &key(), &mut rs).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Arbitrary bytes never panic the decoder, and never pass without the key: `Ok` needs a
    /// tag made with the key, which random bytes (or bytes under another key) do not have.
    #[test]
    fn decode_never_panics_nor_accepts_garbage(
        mut bytes in proptest::collection::vec(any::<u8>(), 0..1500),
        header in any::<bool>(),
        kind in 0u8..8,
    ) {
        if header && bytes.len() >= HEADER_BYTES {
            // Often a plausible header, so that the AEAD check itself is what refuses.
            bytes[..4].copy_from_slice(&MAGIC);
            bytes[4] = VERSION;
            bytes[5] = kind;
            bytes[6..10].copy_from_slice(&SENDER.to_be_bytes());
        }
        let mut rs = replay();
        let r = decode(&mut bytes, &key(), &mut rs);
        prop_assert!(r.is_err());
        prop_assert_eq!(rs.epoch(SENDER), None);
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
        let d = sealed_entries(&mut Encoder::new(&other_key(), SENDER, EPOCH), n);
        prop_assert_eq!(refuse(&d), Err(Refused::AuthFailed));
        let d = sealed_entries(&mut Encoder::new(&key(), SENDER, EPOCH), n);
        let mut x = d.clone();
        x[at.index(d.len())] ^= xor;
        prop_assert!(refuse(&x).is_err());
        prop_assert!(refuse(&d[..cut.index(d.len())]).is_err());
    }

    /// Any valid entry round-trips through a datagram.
    #[test]
    fn entries_round_trip(
        src in any::<[u8; 16]>(), dst in any::<[u8; 16]>(), sport: u16, dport: u16,
        udp: bool, service: u64, backend in any::<[u8; 16]>(), port: u16, idle: u64, flags: u8,
    ) {
        let e = SyncedEntry::new(
            &FlowKey {
                src: Addr(src), dst: Addr(dst), sport, dport,
                proto: if udp { proto::UDP } else { proto::TCP },
                kind: TupleKind::Five as u8, service: 1,
            },
            service, Addr(backend), port, idle, flags,
        );
        let mut enc = Encoder::new(&key(), SENDER, EPOCH);
        let mut out = [0u8; MAX_DATAGRAM];
        let p = enc.entries(EntriesKind::Entries, &mut std::iter::once(e), &mut out).unwrap();
        let d = decode(&mut out[..p.len], &key(), &mut replay()).unwrap();
        prop_assert_eq!(entries_of(&d), vec![e]);
    }
}

// ------------------------------------------------------------------ the figures

#[test]
fn figures_in_the_module_doc() {
    // Ethernet header 14 + FCS 4 + preamble and SFD 8 + inter-frame gap 12; UDP 8; IPv4 20.
    let line = |udp_payload: usize| udp_payload + 8 + 20 + 14 + 4 + 8 + 12;
    let full = HEADER_BYTES + ENTRIES_PREFIX_BYTES + ENTRIES_PER_DATAGRAM * ENTRY_BYTES + TAG_BYTES;
    assert_eq!((ENTRIES_PER_DATAGRAM, full, line(full)), (19, 1355, 1421));
    assert_eq!(format!("{:.1}", line(full) as f64 / 19.0), "74.8");
    let bulk = |n: usize| {
        let datagrams = n.div_ceil(ENTRIES_PER_DATAGRAM);
        let last = n - (datagrams - 1) * ENTRIES_PER_DATAGRAM;
        let last_len = HEADER_BYTES + ENTRIES_PREFIX_BYTES + last * ENTRY_BYTES + TAG_BYTES;
        let payload = (datagrams - 1) * full + last_len;
        let wire = (datagrams - 1) * line(full) + line(last_len);
        (datagrams, payload, wire)
    };
    assert_eq!(bulk(1_000_000), (52_632, 71_315_808, 74_789_520));
    assert_eq!(bulk(200_000), (10_527, 14_263_188, 14_957_970));
    assert_eq!(TABLE_HEADER_BYTES + 1_000_000 * ENTRY_BYTES + TABLE_CHECKSUM_BYTES, 69_000_038);
}

// ------------------------------------------------------------------ the table file

fn table_bytes(n: u32, fingerprint: u64) -> Vec<u8> {
    let mut v = Vec::new();
    let entries: Vec<SyncedEntry> = (0..n).map(entry).collect();
    assert_eq!(write_table(&mut v, fingerprint, 1_765_000_123_456, entries).unwrap(), u64::from(n));
    v
}

#[test]
fn the_table_file_round_trips_10000_entries() {
    let bytes = table_bytes(10_000, 0xf1f2);
    assert_eq!(bytes.len(), TABLE_HEADER_BYTES + 10_000 * ENTRY_BYTES + TABLE_CHECKSUM_BYTES);
    // The header, byte for byte.
    let mut header = b"SPTB".to_vec();
    header.extend_from_slice(&1u16.to_be_bytes());
    header.extend_from_slice(&0xf1f2u64.to_be_bytes());
    header.extend_from_slice(&1_765_000_123_456u64.to_be_bytes());
    header.extend_from_slice(&10_000u64.to_be_bytes());
    assert_eq!(&bytes[..TABLE_HEADER_BYTES], header.as_slice());
    assert_eq!(&bytes[TABLE_HEADER_BYTES..TABLE_HEADER_BYTES + ENTRY_BYTES], &entry(0).to_bytes());
    let sum = xxhash_rust::xxh3::xxh3_64(&bytes[..bytes.len() - 8]);
    assert_eq!(&bytes[bytes.len() - 8..], &sum.to_be_bytes());

    let t = read_table(bytes.as_slice(), 0xf1f2, 10_000).unwrap();
    assert_eq!(t.fingerprint, 0xf1f2);
    assert_eq!(t.written_ms, 1_765_000_123_456);
    assert_eq!(t.entries, (0..10_000).map(entry).collect::<Vec<_>>());
    // Empty tables too.
    let t = read_table(table_bytes(0, 1).as_slice(), 1, 0).unwrap();
    assert!(t.entries.is_empty());
}

#[test]
fn table_file_refusals() {
    let good = table_bytes(3000, 7);
    let err = |b: &[u8], fp: u64, max: u64| read_table(b, fp, max).unwrap_err();

    assert!(matches!(
        err(&good, 8, 10_000),
        TableFileError::FingerprintMismatch { found: 7, expected: 8 }
    ));
    assert!(matches!(
        err(&good, 7, 2999),
        TableFileError::TooManyEntries { count: 3000, max: 2999 }
    ));
    assert!(matches!(err(b"", 7, 10), TableFileError::Truncated));
    assert!(matches!(
        err(b"GIF89a............................", 7, 10),
        TableFileError::NotATableFile
    ));
    let mut v2 = good.clone();
    v2[5] = 2;
    assert!(matches!(err(&v2, 7, 10_000), TableFileError::UnsupportedVersion(2)));
    // Truncated anywhere (every length near the edges, a stride through the middle).
    let lens = (0..200).chain((200..good.len()).step_by(997)).chain(good.len() - 100..good.len());
    for len in lens {
        let e = err(&good[..len], 7, 10_000);
        assert!(matches!(e, TableFileError::Truncated), "{len}: {e}");
    }
    // One flipped byte anywhere after the version: the checksum (or, in the count, the length).
    for i in (6..good.len()).step_by(101).chain([6, 14, 22, 29, good.len() - 1]) {
        let mut x = good.clone();
        x[i] ^= 0x10;
        let e = err(&x, 7, u64::MAX);
        assert!(
            matches!(
                e,
                TableFileError::ChecksumMismatch
                    | TableFileError::Truncated
                    | TableFileError::TrailingData
            ),
            "byte {i}: {e}"
        );
        if !(22..30).contains(&i) {
            assert!(matches!(e, TableFileError::ChecksumMismatch), "byte {i}: {e}");
        }
    }
    let mut longer = good.clone();
    longer.push(0);
    assert!(matches!(err(&longer, 7, 10_000), TableFileError::TrailingData));
    // The messages say what is wrong.
    assert!(err(&good, 8, 10_000).to_string().contains("another configuration"));
    assert!(err(&good[..100], 7, 10_000).to_string().contains("truncated"));
}

#[test]
fn a_table_file_with_an_invalid_entry_and_a_good_checksum_is_refused() {
    let mut bytes = table_bytes(3, 7);
    bytes[TABLE_HEADER_BYTES + ENTRY_BYTES + 37] = 9; // entry 1's kind
    let n = bytes.len();
    let sum = xxhash_rust::xxh3::xxh3_64(&bytes[..n - 8]);
    bytes[n - 8..].copy_from_slice(&sum.to_be_bytes());
    let e = read_table(bytes.as_slice(), 7, 10).unwrap_err();
    assert!(
        matches!(
            e,
            TableFileError::MalformedEntry { index: 1, reason: EntryError::UnknownKind(9) }
        ),
        "{e}"
    );
}

#[test]
fn write_table_refuses_an_iterator_that_lies_about_its_length() {
    /// Says `said` entries, yields `real`.
    struct Liar {
        said: usize,
        real: std::ops::Range<u32>,
    }
    impl Iterator for Liar {
        type Item = SyncedEntry;
        fn next(&mut self) -> Option<SyncedEntry> {
            self.real.next().map(entry)
        }
    }
    impl ExactSizeIterator for Liar {
        fn len(&self) -> usize {
            self.said
        }
    }
    for (said, real) in [(5, 0..4), (5, 0..6), (1024, 0..1025), (0, 0..1)] {
        let e = write_table(Vec::new(), 1, 1, Liar { said, real }).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    }
}

// ------------------------------------------------------------------ cost

/// Encode and seal 1M entries and decode them back; prints the time. Run:
/// `cargo test -p spillway-control --release --lib sync -- --ignored --nocapture`.
#[test]
#[ignore = "a micro-benchmark"]
fn bench_a_million_entries() {
    let entries: Vec<SyncedEntry> = (0..1_000_000).map(entry).collect();
    let mut enc = Encoder::new(&key(), SENDER, EPOCH);
    let mut datagrams = Vec::with_capacity(52_632);
    let t = std::time::Instant::now();
    let mut bytes = 0usize;
    enc.all_entries(EntriesKind::Entries, entries.iter().copied(), |d| {
        bytes += d.len();
        datagrams.push(d.to_vec());
    });
    let seal = t.elapsed();
    let mut rs = replay();
    let t = std::time::Instant::now();
    let mut n = 0;
    for d in &mut datagrams {
        if let Ok(Datagram { body: Body::Entries(r), .. }) = decode(d, &key(), &mut rs) {
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

#[test]
fn save_and_load_a_table_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("spillway-sync-table-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("conntrack.table");
    let e = load_table(&path, 1, 10).unwrap_err();
    assert!(e.is_missing(), "{e}");
    // A leftover temporary file from a crash, readable by all: replaced.
    std::fs::write(dir.join("conntrack.table.tmp"), b"junk").unwrap();
    assert_eq!(save_table(&path, 1, 1_000, (0..50).map(entry).collect::<Vec<_>>()).unwrap(), 50);
    assert!(!dir.join("conntrack.table.tmp").exists());
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    let mut t = load_table(&path, 1, 10_000).unwrap();
    assert_eq!(t.entries, (0..50).map(entry).collect::<Vec<_>>());
    // A second save replaces the first.
    save_table(&path, 2, 2_000, vec![entry(7)]).unwrap();
    assert!(matches!(load_table(&path, 1, 10), Err(TableFileError::FingerprintMismatch { .. })));
    std::fs::remove_dir_all(&dir).unwrap();

    // Aging: the downtime is added to the idle times, saturating; a clock gone back adds none.
    t.entries.truncate(2);
    t.entries[1].idle_ms = u32::MAX - 5;
    let before = t.entries[0].idle_ms;
    t.age(1_000 + 60_000);
    assert_eq!(t.entries[0].idle_ms, before + 60_000);
    assert_eq!(t.entries[1].idle_ms, u32::MAX);
    t.age(0);
    assert_eq!(t.entries[0].idle_ms, before + 60_000);
}
