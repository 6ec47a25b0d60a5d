//! The sync datagram: a cleartext header, authenticated as associated data, and a payload
//! sealed with XChaCha20-Poly1305 under the fleet's key. See the module doc of
//! [`crate::sync`] for the format.

use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{Tag, XNonce};

use super::entry::{EntryRecords, SyncedEntry, ENTRY_BYTES};
use super::key::{Key, KeyRing};
use super::refused::Refused;
use super::session::{Accepted, HelloProof, Sessions};
use crate::instance::Phase;

/// The largest datagram sent or accepted (UDP payload bytes): with the UDP and IPv6 headers it
/// is a 1,448-byte packet, so it is never fragmented on a 1,500-byte MTU path (52 bytes to
/// spare for a tunnel).
pub const MAX_DATAGRAM: usize = 1400;
/// The first bytes of every datagram.
pub const MAGIC: [u8; 4] = *b"SPSY";
/// The format's version.
pub const VERSION: u8 = 2;
/// Bytes of the cleartext header: magic 4, version 1, kind 1, sender 2, recipient 2, key id 4,
/// epoch 8, sequence 8, salt 4.
pub const HEADER_BYTES: usize = 34;
/// Bytes of the Poly1305 tag that ends every datagram.
pub const TAG_BYTES: usize = 16;
/// Bytes of an `Entries` or `Remove` payload before its records (the count, u16).
pub const ENTRIES_PREFIX_BYTES: usize = 2;
/// Bytes of an `Answer` payload before its records: request u64, attempt u16, worker u16,
/// count u16.
pub const ANSWER_PREFIX_BYTES: usize = 14;
/// How many entries fit one `Entries` or `Remove` datagram: 19.
pub const ENTRIES_PER_DATAGRAM: usize =
    (MAX_DATAGRAM - HEADER_BYTES - TAG_BYTES - ENTRIES_PREFIX_BYTES) / ENTRY_BYTES;
/// How many entries fit one `Answer` datagram: 19.
pub const ANSWER_ENTRIES_PER_DATAGRAM: usize =
    (MAX_DATAGRAM - HEADER_BYTES - TAG_BYTES - ANSWER_PREFIX_BYTES) / ENTRY_BYTES;
/// Bytes of a `BulkRequest` payload: request u64, attempt u16, worker u16.
pub const BULK_REQUEST_BYTES: usize = 12;
/// Bytes of an `AnswerEnd` payload: request u64, attempt u16, worker u16, workers u16,
/// sent u64.
pub const ANSWER_END_BYTES: usize = 22;
/// Bytes of a `BulkAck` payload: request u64, datagrams u64.
pub const BULK_ACK_BYTES: usize = 16;
/// Bytes of a `Hello` payload: fingerprint u64, phase u8, challenge u64, echo u64, the
/// recipient's epoch the sender has a session with u64.
pub const HELLO_BYTES: usize = 33;
/// The worker field of a `BulkRequest` that asks every worker.
pub const ALL_WORKERS: u16 = u16::MAX;

/// What a datagram carries (its header's kind byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Entries at risk, to add or refresh: a count u16 and that many records.
    Entries = 1,
    /// Entries the sender no longer shares: the same layout as `Entries`.
    Remove = 2,
    /// A joining instance asks for every entry at risk (all workers, or one again).
    BulkRequest = 3,
    /// Part of a bulk answer: request, attempt, worker, count, records.
    Answer = 4,
    /// The end of one worker's part of a bulk answer, with its count.
    AnswerEnd = 5,
    /// The requester's receipt of a bulk answer so far (the answer's pace).
    BulkAck = 6,
    /// Keepalive and proof of life: fingerprint, phase, challenge, echo, session.
    Hello = 7,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Entries,
            2 => Kind::Remove,
            3 => Kind::BulkRequest,
            4 => Kind::Answer,
            5 => Kind::AnswerEnd,
            6 => Kind::BulkAck,
            7 => Kind::Hello,
            _ => return None,
        })
    }
}

/// Which of the two broadcast entry kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntriesKind {
    /// [`Kind::Entries`].
    Entries,
    /// [`Kind::Remove`].
    Remove,
}

fn phase_to_u8(p: Phase) -> u8 {
    match p {
        Phase::Starting => 0,
        Phase::Serving => 1,
        Phase::Drained => 2,
        Phase::Stopping => 3,
    }
}

fn phase_from_u8(b: u8) -> Option<Phase> {
    Some(match b {
        0 => Phase::Starting,
        1 => Phase::Serving,
        2 => Phase::Drained,
        3 => Phase::Stopping,
        _ => return None,
    })
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for Refused {}

/// The cleartext header of a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// What the payload is.
    pub kind: Kind,
    /// The sender's instance id.
    pub sender: u16,
    /// The instance it is for.
    pub recipient: u16,
    /// The id of the key it is sealed under ([`Key::id`]).
    pub key_id: u32,
    /// The sender's epoch: grows across its restarts.
    pub epoch: u64,
    /// The datagram's number among those from the sender's epoch to this recipient, from 1.
    pub seq: u64,
    /// The sender's random number of this start (the nonce's last four bytes).
    pub salt: u32,
}

impl Header {
    fn encode(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&MAGIC);
        out[4] = VERSION;
        out[5] = self.kind as u8;
        out[6..8].copy_from_slice(&self.sender.to_be_bytes());
        out[8..10].copy_from_slice(&self.recipient.to_be_bytes());
        out[10..14].copy_from_slice(&self.key_id.to_be_bytes());
        out[14..22].copy_from_slice(&self.epoch.to_be_bytes());
        out[22..30].copy_from_slice(&self.seq.to_be_bytes());
        out[30..34].copy_from_slice(&self.salt.to_be_bytes());
    }

    /// The nonce: sender, recipient, epoch, sequence and salt side by side (2 + 2 + 8 + 8 + 4,
    /// XChaCha20's 24 bytes). A nonce repeats under one key only if (sender, recipient, epoch,
    /// sequence, salt) does: ids are unique in a fleet, an epoch is never used twice by an
    /// instance (the epoch file, [`super::epoch`]), sequence numbers only grow within it, and
    /// the salt is random per start besides.
    fn nonce(&self) -> XNonce {
        let mut n = [0u8; 24];
        n[0..2].copy_from_slice(&self.sender.to_be_bytes());
        n[2..4].copy_from_slice(&self.recipient.to_be_bytes());
        n[4..12].copy_from_slice(&self.epoch.to_be_bytes());
        n[12..20].copy_from_slice(&self.seq.to_be_bytes());
        n[20..24].copy_from_slice(&self.salt.to_be_bytes());
        n.into()
    }

    /// The sender id of a datagram's bytes, if they are long enough to hold one (before any
    /// check: for the source address check).
    pub fn peek_sender(buf: &[u8]) -> Option<u16> {
        buf.get(6..8).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
}

/// An accepted datagram: authentic, new, well-formed, and from a session.
#[derive(Clone, Copy, Debug)]
pub struct Datagram<'a> {
    /// Its header.
    pub header: Header,
    /// Its payload.
    pub body: Body<'a>,
    /// What the session check made of it.
    pub accepted: Accepted,
}

/// Which bulk answer an `Answer` or `AnswerEnd` belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AnswerPart {
    /// The request's id.
    pub request: u64,
    /// The attempt (0 first, one more per retry of a worker's part).
    pub attempt: u16,
    /// The answering instance's worker.
    pub worker: u16,
}

/// An accepted datagram's payload.
#[derive(Clone, Copy, Debug)]
pub enum Body<'a> {
    /// Entries at risk (all validated).
    Entries(EntryRecords<'a>),
    /// Entries the sender no longer shares (all validated).
    Remove(EntryRecords<'a>),
    /// A joining instance asks for all entries at risk ([`ALL_WORKERS`]) or one worker's
    /// again.
    BulkRequest {
        /// The request's id.
        request: u64,
        /// The attempt.
        attempt: u16,
        /// The worker asked, or [`ALL_WORKERS`].
        worker: u16,
    },
    /// Part of a bulk answer.
    Answer(AnswerPart, EntryRecords<'a>),
    /// The end of one worker's part of a bulk answer.
    AnswerEnd {
        /// Which.
        part: AnswerPart,
        /// How many workers the answering instance has.
        workers: u16,
        /// How many entries that worker's part held.
        sent: u64,
    },
    /// How many `Answer` datagrams of a request the requester has received.
    BulkAck {
        /// The request's id.
        request: u64,
        /// Datagrams received.
        datagrams: u64,
    },
    /// Keepalive and proof of life.
    Hello {
        /// The sender's table fingerprints' summary.
        fingerprint: u64,
        /// The sender's phase.
        phase: Phase,
        /// The sender's challenge of this start.
        challenge: u64,
        /// The recipient's challenge as the sender last received it (0: none yet).
        echo: u64,
        /// The recipient's epoch (life) the sender has a session with, 0 for none: the
        /// recipient's datagrams of that life are accepted by the sender.
        session: u64,
    },
}

/// Check, authenticate and parse a datagram received from `from` by instance `me`,
/// decrypting it in place (the buffer's content is unspecified afterwards). The order is the
/// protocol's: the cleartext header's checks (length, magic, version, kind, sender, its
/// address, recipient, key), then authentication, then the payload, then the session (which
/// records the datagram). Nothing of the payload is read before authentication, and only an
/// authentic datagram moves `sessions`.
pub fn decode<'a>(
    buf: &'a mut [u8],
    from: std::net::IpAddr,
    me: u16,
    keys: &KeyRing,
    sessions: &mut Sessions,
) -> Result<Datagram<'a>, Refused> {
    if buf.len() < HEADER_BYTES + TAG_BYTES {
        return Err(Refused::Truncated);
    }
    if buf.len() > MAX_DATAGRAM {
        return Err(Refused::Oversized);
    }
    if buf[0..4] != MAGIC {
        return Err(Refused::BadMagic);
    }
    if buf[4] != VERSION {
        return Err(Refused::WrongVersion);
    }
    let kind = Kind::from_u8(buf[5]).ok_or(Refused::UnknownKind)?;
    let header = Header {
        kind,
        sender: u16::from_be_bytes(arr(&buf[6..8])),
        recipient: u16::from_be_bytes(arr(&buf[8..10])),
        key_id: u32::from_be_bytes(arr(&buf[10..14])),
        epoch: u64::from_be_bytes(arr(&buf[14..22])),
        seq: u64::from_be_bytes(arr(&buf[22..30])),
        salt: u32::from_be_bytes(arr(&buf[30..34])),
    };
    let Some(address) = sessions.address(header.sender) else {
        return Err(Refused::UnknownSender);
    };
    if canonical(address) != canonical(from) {
        return Err(Refused::WrongAddress);
    }
    if header.recipient != me {
        return Err(Refused::WrongRecipient);
    }
    let key = keys.by_id(header.key_id).ok_or(Refused::UnknownKey)?;
    let (head, rest) = buf.split_at_mut(HEADER_BYTES);
    let (payload, tag) = rest.split_at_mut(rest.len() - TAG_BYTES);
    let tag = Tag::clone_from_slice(tag);
    key.cipher()
        .decrypt_in_place_detached(&header.nonce(), head, payload, &tag)
        .map_err(|_| Refused::AuthFailed)?;
    let payload: &'a [u8] = payload;
    let body = parse_body(kind, payload).ok_or(Refused::Malformed)?;
    let proof = match body {
        Body::Hello { challenge, echo, .. } => Some(HelloProof { challenge, echo }),
        _ => None,
    };
    let accepted = sessions.accept(header.sender, header.epoch, header.seq, proof)?;
    Ok(Datagram { header, body, accepted })
}

/// An address as compared with a configured peer's: an IPv4-mapped IPv6 address is its IPv4
/// address.
fn canonical(a: std::net::IpAddr) -> std::net::IpAddr {
    match a {
        std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(a, std::net::IpAddr::V4),
        v4 => v4,
    }
}

fn parse_records(kind: Kind, count: usize, records: &[u8]) -> Option<EntryRecords<'_>> {
    let most =
        if kind == Kind::Answer { ANSWER_ENTRIES_PER_DATAGRAM } else { ENTRIES_PER_DATAGRAM };
    if count == 0 || count > most || records.len() != count * ENTRY_BYTES {
        return None;
    }
    EntryRecords::validate(records).ok()
}

fn parse_body(kind: Kind, p: &[u8]) -> Option<Body<'_>> {
    let u16_at = |i: usize| u16::from_be_bytes(arr(&p[i..i + 2]));
    let u64_at = |i: usize| u64::from_be_bytes(arr(&p[i..i + 8]));
    Some(match kind {
        Kind::Entries | Kind::Remove => {
            let (count, records) = p.split_first_chunk::<ENTRIES_PREFIX_BYTES>()?;
            let records = parse_records(kind, usize::from(u16::from_be_bytes(*count)), records)?;
            if kind == Kind::Entries {
                Body::Entries(records)
            } else {
                Body::Remove(records)
            }
        }
        Kind::BulkRequest => {
            if p.len() != BULK_REQUEST_BYTES {
                return None;
            }
            Body::BulkRequest { request: u64_at(0), attempt: u16_at(8), worker: u16_at(10) }
        }
        Kind::Answer => {
            if p.len() < ANSWER_PREFIX_BYTES {
                return None;
            }
            let part = AnswerPart { request: u64_at(0), attempt: u16_at(8), worker: u16_at(10) };
            let records = parse_records(kind, usize::from(u16_at(12)), &p[ANSWER_PREFIX_BYTES..])?;
            Body::Answer(part, records)
        }
        Kind::AnswerEnd => {
            if p.len() != ANSWER_END_BYTES {
                return None;
            }
            let part = AnswerPart { request: u64_at(0), attempt: u16_at(8), worker: u16_at(10) };
            Body::AnswerEnd { part, workers: u16_at(12), sent: u64_at(14) }
        }
        Kind::BulkAck => {
            if p.len() != BULK_ACK_BYTES {
                return None;
            }
            Body::BulkAck { request: u64_at(0), datagrams: u64_at(8) }
        }
        Kind::Hello => {
            if p.len() != HELLO_BYTES {
                return None;
            }
            Body::Hello {
                fingerprint: u64_at(0),
                phase: phase_from_u8(p[8])?,
                challenge: u64_at(9),
                echo: u64_at(17),
                session: u64_at(25),
            }
        }
    })
}

/// A slice of known length as an array.
fn arr<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(s);
    a
}

/// What a hello says ([`Body::Hello`]'s fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HelloFields {
    /// The sender's table fingerprints' summary.
    pub fingerprint: u64,
    /// The sender's phase.
    pub phase: Phase,
    /// The sender's challenge of this start.
    pub challenge: u64,
    /// The recipient's challenge as last received (0: none yet).
    pub echo: u64,
    /// The recipient's epoch the sender has a session with (0: none).
    pub session: u64,
}

/// What [`Encoder::entries`] put in one datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packed {
    /// The datagram's length in the caller's buffer.
    pub len: usize,
    /// How many entries it carries.
    pub entries: usize,
}

/// Seals this instance's datagrams: owns its id, key, epoch, salt and the next sequence
/// number towards each recipient.
#[derive(Debug)]
pub struct Encoder {
    key: Key,
    key_id: u32,
    sender: u16,
    epoch: u64,
    salt: u32,
    /// (recipient, next sequence number), sorted by recipient.
    next_seq: Vec<(u16, u64)>,
    skipped_invalid: u64,
}

impl Encoder {
    /// An encoder for instance `sender` in `epoch` (never used by this instance before: the
    /// epoch file, [`super::epoch`]) with this start's random `salt`.
    pub fn new(key: &Key, sender: u16, epoch: u64, salt: u32) -> Encoder {
        Encoder {
            key: key.clone(),
            key_id: key.id(),
            sender,
            epoch,
            salt,
            next_seq: Vec::new(),
            skipped_invalid: 0,
        }
    }

    /// Seal with `key` from now on (a reload of the key file). Sequence numbers go on: they
    /// are per epoch, whatever the key.
    pub fn set_key(&mut self, key: &Key) {
        self.key = key.clone();
        self.key_id = key.id();
    }

    /// The sender id.
    pub fn sender(&self) -> u16 {
        self.sender
    }

    /// The epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The id of the key it seals with.
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// The sequence number the next datagram to `recipient` gets.
    pub fn next_seq(&self, recipient: u16) -> u64 {
        match self.next_seq.binary_search_by_key(&recipient, |&(r, _)| r) {
            Ok(i) => self.next_seq[i].1,
            Err(_) => 1,
        }
    }

    /// Entries the encoder left out because they were not valid ([`SyncedEntry::validate`]):
    /// sent, they would have made peers refuse their whole datagram.
    pub fn skipped_invalid(&self) -> u64 {
        self.skipped_invalid
    }

    /// A `Hello` to `to` in `out`; its length.
    pub fn hello(&mut self, to: u16, h: &HelloFields, out: &mut [u8; MAX_DATAGRAM]) -> usize {
        let p = &mut out[HEADER_BYTES..];
        p[0..8].copy_from_slice(&h.fingerprint.to_be_bytes());
        p[8] = phase_to_u8(h.phase);
        p[9..17].copy_from_slice(&h.challenge.to_be_bytes());
        p[17..25].copy_from_slice(&h.echo.to_be_bytes());
        p[25..33].copy_from_slice(&h.session.to_be_bytes());
        self.seal(Kind::Hello, to, HELLO_BYTES, out)
    }

    /// A `BulkRequest` to `to` in `out`; its length.
    pub fn bulk_request(
        &mut self,
        to: u16,
        request: u64,
        attempt: u16,
        worker: u16,
        out: &mut [u8; MAX_DATAGRAM],
    ) -> usize {
        let p = &mut out[HEADER_BYTES..];
        p[0..8].copy_from_slice(&request.to_be_bytes());
        p[8..10].copy_from_slice(&attempt.to_be_bytes());
        p[10..12].copy_from_slice(&worker.to_be_bytes());
        self.seal(Kind::BulkRequest, to, BULK_REQUEST_BYTES, out)
    }

    /// An `AnswerEnd` to `to` in `out`; its length.
    pub fn answer_end(
        &mut self,
        to: u16,
        part: AnswerPart,
        workers: u16,
        sent: u64,
        out: &mut [u8; MAX_DATAGRAM],
    ) -> usize {
        let p = &mut out[HEADER_BYTES..];
        p[0..8].copy_from_slice(&part.request.to_be_bytes());
        p[8..10].copy_from_slice(&part.attempt.to_be_bytes());
        p[10..12].copy_from_slice(&part.worker.to_be_bytes());
        p[12..14].copy_from_slice(&workers.to_be_bytes());
        p[14..22].copy_from_slice(&sent.to_be_bytes());
        self.seal(Kind::AnswerEnd, to, ANSWER_END_BYTES, out)
    }

    /// A `BulkAck` to `to` in `out`; its length.
    pub fn bulk_ack(
        &mut self,
        to: u16,
        request: u64,
        datagrams: u64,
        out: &mut [u8; MAX_DATAGRAM],
    ) -> usize {
        let p = &mut out[HEADER_BYTES..];
        p[0..8].copy_from_slice(&request.to_be_bytes());
        p[8..16].copy_from_slice(&datagrams.to_be_bytes());
        self.seal(Kind::BulkAck, to, BULK_ACK_BYTES, out)
    }

    /// One `Entries` or `Remove` datagram to `to` in `out` with as many of `entries` as fit
    /// ([`ENTRIES_PER_DATAGRAM`]), taking no more than that from the iterator; `None` when the
    /// iterator had no valid entry left. Call it until `None` to send them all.
    pub fn entries(
        &mut self,
        kind: EntriesKind,
        to: u16,
        entries: &mut impl Iterator<Item = SyncedEntry>,
        out: &mut [u8; MAX_DATAGRAM],
    ) -> Option<Packed> {
        let start = HEADER_BYTES + ENTRIES_PREFIX_BYTES;
        let n = self.records(entries, ENTRIES_PER_DATAGRAM, &mut out[start..])?;
        // n <= ENTRIES_PER_DATAGRAM (19) fits a u16.
        out[HEADER_BYTES..start].copy_from_slice(&(n as u16).to_be_bytes());
        let kind = match kind {
            EntriesKind::Entries => Kind::Entries,
            EntriesKind::Remove => Kind::Remove,
        };
        let len = self.seal(kind, to, ENTRIES_PREFIX_BYTES + n * ENTRY_BYTES, out);
        Some(Packed { len, entries: n })
    }

    /// One `Answer` datagram of `part` to `to` in `out`, as [`Encoder::entries`] does.
    pub fn answer(
        &mut self,
        to: u16,
        part: AnswerPart,
        entries: &mut impl Iterator<Item = SyncedEntry>,
        out: &mut [u8; MAX_DATAGRAM],
    ) -> Option<Packed> {
        let start = HEADER_BYTES + ANSWER_PREFIX_BYTES;
        let n = self.records(entries, ANSWER_ENTRIES_PER_DATAGRAM, &mut out[start..])?;
        let p = &mut out[HEADER_BYTES..start];
        p[0..8].copy_from_slice(&part.request.to_be_bytes());
        p[8..10].copy_from_slice(&part.attempt.to_be_bytes());
        p[10..12].copy_from_slice(&part.worker.to_be_bytes());
        p[12..14].copy_from_slice(&(n as u16).to_be_bytes());
        let len = self.seal(Kind::Answer, to, ANSWER_PREFIX_BYTES + n * ENTRY_BYTES, out);
        Some(Packed { len, entries: n })
    }

    /// Up to `most` valid entries of `entries` encoded into `out`; `None` for none.
    fn records(
        &mut self,
        entries: &mut impl Iterator<Item = SyncedEntry>,
        most: usize,
        out: &mut [u8],
    ) -> Option<usize> {
        let mut n = 0;
        while n < most {
            let Some(e) = entries.next() else { break };
            if e.validate().is_err() {
                self.skipped_invalid += 1;
                continue;
            }
            let at = n * ENTRY_BYTES;
            let rec: &mut [u8; ENTRY_BYTES] =
                (&mut out[at..at + ENTRY_BYTES]).try_into().expect("a record's length");
            e.encode(rec);
            n += 1;
        }
        (n > 0).then_some(n)
    }

    /// Every entry of `entries` to `to`, in as few datagrams as fit, each handed to `send`;
    /// the number of entries sent.
    pub fn all_entries(
        &mut self,
        kind: EntriesKind,
        to: u16,
        entries: impl IntoIterator<Item = SyncedEntry>,
        mut send: impl FnMut(&[u8]),
    ) -> u64 {
        let mut it = entries.into_iter();
        let mut out = [0u8; MAX_DATAGRAM];
        let mut sent = 0;
        while let Some(p) = self.entries(kind, to, &mut it, &mut out) {
            send(&out[..p.len]);
            sent += p.entries as u64;
        }
        sent
    }

    /// Write the header for the payload already in `out[HEADER_BYTES..][..payload_len]`,
    /// encrypt the payload and append the tag; the datagram's length.
    fn seal(
        &mut self,
        kind: Kind,
        to: u16,
        payload_len: usize,
        out: &mut [u8; MAX_DATAGRAM],
    ) -> usize {
        let i = match self.next_seq.binary_search_by_key(&to, |&(r, _)| r) {
            Ok(i) => i,
            Err(i) => {
                self.next_seq.insert(i, (to, 1));
                i
            }
        };
        let seq = self.next_seq[i].1;
        // 2^64 - 1 datagrams is beyond any epoch's life (58,000 years at 10 M/s); stopping is
        // still better than reusing a nonce.
        assert!(seq != u64::MAX, "sync sequence numbers exhausted in one epoch");
        self.next_seq[i].1 += 1;
        let header = Header {
            kind,
            sender: self.sender,
            recipient: to,
            key_id: self.key_id,
            epoch: self.epoch,
            seq,
            salt: self.salt,
        };
        let len = HEADER_BYTES + payload_len + TAG_BYTES;
        let (head, rest) = out.split_at_mut(HEADER_BYTES);
        header.encode(head);
        let (payload, tail) = rest.split_at_mut(payload_len);
        let tag = self
            .key
            .cipher()
            .encrypt_in_place_detached(&header.nonce(), head, payload)
            .expect("payloads are far below the AEAD's length limit");
        tail[..TAG_BYTES].copy_from_slice(&tag);
        len
    }
}
