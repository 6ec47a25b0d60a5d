//! The sync datagram: a cleartext header, authenticated as associated data, and a payload
//! sealed with XChaCha20-Poly1305 under the fleet's key. See the module doc of
//! [`crate::sync`] for the format.

use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{Tag, XNonce};

use super::entry::{EntryRecords, SyncedEntry, ENTRY_BYTES};
use super::key::Key;
use super::replay::ReplayState;
use crate::fleet::Phase;

/// The largest datagram sent or accepted (UDP payload bytes): with the UDP and IPv6 headers it
/// is a 1,448-byte packet, so it is never fragmented on a 1,500-byte MTU path (52 bytes to
/// spare for a tunnel).
pub const MAX_DATAGRAM: usize = 1400;
/// The first bytes of every datagram.
pub const MAGIC: [u8; 4] = *b"SPSY";
/// The format's version.
pub const VERSION: u8 = 1;
/// Bytes of the cleartext header: magic 4, version 1, kind 1, sender 4, epoch 8, sequence 8.
pub const HEADER_BYTES: usize = 26;
/// Bytes of the Poly1305 tag that ends every datagram.
pub const TAG_BYTES: usize = 16;
/// Bytes of an `Entries` or `Remove` payload before its records (the count, u16).
pub const ENTRIES_PREFIX_BYTES: usize = 2;
/// How many entries fit one datagram: 19.
pub const ENTRIES_PER_DATAGRAM: usize =
    (MAX_DATAGRAM - HEADER_BYTES - TAG_BYTES - ENTRIES_PREFIX_BYTES) / ENTRY_BYTES;
/// Bytes of a `BulkRequest` payload (request id u64).
pub const BULK_REQUEST_BYTES: usize = 8;
/// Bytes of a `BulkEnd` payload (request id u64, entries sent u64).
pub const BULK_END_BYTES: usize = 16;
/// Bytes of a `Hello` payload (fingerprint summary u64, phase u8).
pub const HELLO_BYTES: usize = 9;

/// What a datagram carries (its header's kind byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Entries to add or refresh: a count u16 and that many records.
    Entries = 1,
    /// Entries that ended: the same layout as `Entries`.
    Remove = 2,
    /// A joining instance asks for every entry: a request id u64.
    BulkRequest = 3,
    /// The end of one peer's answer: the request id u64 and how many entries it sent, u64.
    BulkEnd = 4,
    /// Keepalive: the table fingerprints' summary u64 and the fleet phase u8.
    Hello = 5,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Entries,
            2 => Kind::Remove,
            3 => Kind::BulkRequest,
            4 => Kind::BulkEnd,
            5 => Kind::Hello,
            _ => return None,
        })
    }
}

/// Which of the two entry-carrying kinds.
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

/// Why a datagram was refused. Each is a metric label ([`Refused::as_str`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refused {
    /// Shorter than a header and a tag.
    Truncated,
    /// Longer than [`MAX_DATAGRAM`].
    Oversized,
    /// Does not start with [`MAGIC`].
    BadMagic,
    /// Another version of the format.
    WrongVersion,
    /// A kind byte this version does not know.
    UnknownKind,
    /// The sender id is not one of the configured peers.
    UnknownSender,
    /// The tag does not verify: forged, altered, or sealed under another key.
    AuthFailed,
    /// Authentic, but its sequence was already accepted or is below the window.
    Replayed,
    /// Authentic, but from an earlier epoch (life) of the sender than one already seen.
    StaleEpoch,
    /// Authentic, but the payload does not match its kind: length, count or a field.
    Malformed,
}

impl Refused {
    /// Every reason (metric labels).
    pub const ALL: [Refused; 10] = [
        Refused::Truncated,
        Refused::Oversized,
        Refused::BadMagic,
        Refused::WrongVersion,
        Refused::UnknownKind,
        Refused::UnknownSender,
        Refused::AuthFailed,
        Refused::Replayed,
        Refused::StaleEpoch,
        Refused::Malformed,
    ];

    /// The stable snake_case name (metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Refused::Truncated => "truncated",
            Refused::Oversized => "oversized",
            Refused::BadMagic => "bad_magic",
            Refused::WrongVersion => "wrong_version",
            Refused::UnknownKind => "unknown_kind",
            Refused::UnknownSender => "unknown_sender",
            Refused::AuthFailed => "auth_failed",
            Refused::Replayed => "replayed",
            Refused::StaleEpoch => "stale_epoch",
            Refused::Malformed => "malformed",
        }
    }
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
    pub sender: u32,
    /// The sender's start (unix ms): grows across its restarts.
    pub epoch: u64,
    /// The datagram's number in the sender's epoch, from 1.
    pub seq: u64,
}

impl Header {
    fn encode(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&MAGIC);
        out[4] = VERSION;
        out[5] = self.kind as u8;
        out[6..10].copy_from_slice(&self.sender.to_be_bytes());
        out[10..18].copy_from_slice(&self.epoch.to_be_bytes());
        out[18..26].copy_from_slice(&self.seq.to_be_bytes());
    }

    /// The nonce: sender, epoch and sequence side by side (4 + 8 + 8 of XChaCha20's 24 bytes,
    /// the rest zero). Distinct (sender, epoch, seq) give distinct nonces, so a nonce never
    /// repeats under one key while ids are unique and epochs grow.
    fn nonce(&self) -> XNonce {
        let mut n = [0u8; 24];
        n[0..4].copy_from_slice(&self.sender.to_be_bytes());
        n[4..12].copy_from_slice(&self.epoch.to_be_bytes());
        n[12..20].copy_from_slice(&self.seq.to_be_bytes());
        n.into()
    }
}

/// An accepted datagram: authentic, new, and well-formed.
#[derive(Clone, Copy, Debug)]
pub struct Datagram<'a> {
    /// Its header.
    pub header: Header,
    /// Its payload.
    pub body: Body<'a>,
}

/// An accepted datagram's payload.
#[derive(Clone, Copy, Debug)]
pub enum Body<'a> {
    /// Entries to add or refresh (all validated).
    Entries(EntryRecords<'a>),
    /// Entries that ended (all validated).
    Remove(EntryRecords<'a>),
    /// A joining instance asks for all entries.
    BulkRequest {
        /// The request's id, echoed by [`Body::BulkEnd`].
        request: u64,
    },
    /// One peer finished answering a bulk request.
    BulkEnd {
        /// The request's id.
        request: u64,
        /// How many entries the peer sent in its answer.
        sent: u64,
    },
    /// Keepalive.
    Hello {
        /// The sender's table fingerprints' summary.
        fingerprint: u64,
        /// The sender's phase.
        phase: Phase,
    },
}

/// Check, authenticate and parse a received datagram, decrypting it in place (the buffer's
/// content is unspecified afterwards). The order is the protocol's: the cleartext header's
/// checks, then authentication, then the replay check (which records the datagram), then the
/// payload. Nothing of the payload is read before authentication, and only an authentic
/// datagram moves `replay`.
pub fn decode<'a>(
    buf: &'a mut [u8],
    key: &Key,
    replay: &mut ReplayState,
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
        sender: u32::from_be_bytes(arr(&buf[6..10])),
        epoch: u64::from_be_bytes(arr(&buf[10..18])),
        seq: u64::from_be_bytes(arr(&buf[18..26])),
    };
    if !replay.knows(header.sender) {
        return Err(Refused::UnknownSender);
    }
    let (head, rest) = buf.split_at_mut(HEADER_BYTES);
    let (payload, tag) = rest.split_at_mut(rest.len() - TAG_BYTES);
    let tag = Tag::clone_from_slice(tag);
    key.cipher()
        .decrypt_in_place_detached(&header.nonce(), head, payload, &tag)
        .map_err(|_| Refused::AuthFailed)?;
    replay.accept(header.sender, header.epoch, header.seq)?;
    let payload: &'a [u8] = payload;
    let body = parse_body(kind, payload).ok_or(Refused::Malformed)?;
    Ok(Datagram { header, body })
}

fn parse_body(kind: Kind, p: &[u8]) -> Option<Body<'_>> {
    Some(match kind {
        Kind::Entries | Kind::Remove => {
            let (count, records) = p.split_first_chunk::<ENTRIES_PREFIX_BYTES>()?;
            let count = usize::from(u16::from_be_bytes(*count));
            if count == 0 || records.len() != count * ENTRY_BYTES {
                return None;
            }
            let records = EntryRecords::validate(records).ok()?;
            if kind == Kind::Entries {
                Body::Entries(records)
            } else {
                Body::Remove(records)
            }
        }
        Kind::BulkRequest => {
            let p: &[u8; BULK_REQUEST_BYTES] = p.try_into().ok()?;
            Body::BulkRequest { request: u64::from_be_bytes(*p) }
        }
        Kind::BulkEnd => {
            let p: &[u8; BULK_END_BYTES] = p.try_into().ok()?;
            Body::BulkEnd {
                request: u64::from_be_bytes(arr(&p[0..8])),
                sent: u64::from_be_bytes(arr(&p[8..16])),
            }
        }
        Kind::Hello => {
            let p: &[u8; HELLO_BYTES] = p.try_into().ok()?;
            Body::Hello {
                fingerprint: u64::from_be_bytes(arr(&p[0..8])),
                phase: phase_from_u8(p[8])?,
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

/// What [`Encoder::entries`] put in one datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packed {
    /// The datagram's length in the caller's buffer.
    pub len: usize,
    /// How many entries it carries.
    pub entries: usize,
}

/// Seals this instance's datagrams: owns its id, epoch and next sequence number.
#[derive(Debug)]
pub struct Encoder {
    key: Key,
    sender: u32,
    epoch: u64,
    next_seq: u64,
    skipped_invalid: u64,
}

impl Encoder {
    /// An encoder for instance `sender` in `epoch`. The epoch must be greater than any this
    /// instance used before under the same key (its start time in unix ms: the module doc of
    /// [`crate::sync`]), or nonces repeat.
    pub fn new(key: &Key, sender: u32, epoch: u64) -> Encoder {
        Encoder { key: key.clone(), sender, epoch, next_seq: 1, skipped_invalid: 0 }
    }

    /// The sender id.
    pub fn sender(&self) -> u32 {
        self.sender
    }

    /// The epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The sequence number the next datagram gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Entries the encoder left out because they were not valid ([`SyncedEntry::validate`]):
    /// sent, they would have made peers refuse their whole datagram.
    pub fn skipped_invalid(&self) -> u64 {
        self.skipped_invalid
    }

    /// A `Hello` datagram in `out`; its length.
    pub fn hello(&mut self, fingerprint: u64, phase: Phase, out: &mut [u8; MAX_DATAGRAM]) -> usize {
        let p = &mut out[HEADER_BYTES..];
        p[0..8].copy_from_slice(&fingerprint.to_be_bytes());
        p[8] = phase_to_u8(phase);
        self.seal(Kind::Hello, HELLO_BYTES, out)
    }

    /// A `BulkRequest` datagram in `out`; its length.
    pub fn bulk_request(&mut self, request: u64, out: &mut [u8; MAX_DATAGRAM]) -> usize {
        out[HEADER_BYTES..HEADER_BYTES + 8].copy_from_slice(&request.to_be_bytes());
        self.seal(Kind::BulkRequest, BULK_REQUEST_BYTES, out)
    }

    /// A `BulkEnd` datagram in `out`; its length.
    pub fn bulk_end(&mut self, request: u64, sent: u64, out: &mut [u8; MAX_DATAGRAM]) -> usize {
        let p = &mut out[HEADER_BYTES..];
        p[0..8].copy_from_slice(&request.to_be_bytes());
        p[8..16].copy_from_slice(&sent.to_be_bytes());
        self.seal(Kind::BulkEnd, BULK_END_BYTES, out)
    }

    /// One `Entries` or `Remove` datagram in `out` with as many of `entries` as fit
    /// ([`ENTRIES_PER_DATAGRAM`]), taking no more than that from the iterator; `None` when the
    /// iterator had no valid entry left. Call it until `None` to send them all.
    pub fn entries(
        &mut self,
        kind: EntriesKind,
        entries: &mut impl Iterator<Item = SyncedEntry>,
        out: &mut [u8; MAX_DATAGRAM],
    ) -> Option<Packed> {
        let start = HEADER_BYTES + ENTRIES_PREFIX_BYTES;
        let mut n = 0;
        while n < ENTRIES_PER_DATAGRAM {
            let Some(e) = entries.next() else { break };
            if e.validate().is_err() {
                self.skipped_invalid += 1;
                continue;
            }
            let at = start + n * ENTRY_BYTES;
            let rec: &mut [u8; ENTRY_BYTES] =
                (&mut out[at..at + ENTRY_BYTES]).try_into().expect("a record's length");
            e.encode(rec);
            n += 1;
        }
        if n == 0 {
            return None;
        }
        // n <= ENTRIES_PER_DATAGRAM (19) fits a u16.
        out[HEADER_BYTES..start].copy_from_slice(&(n as u16).to_be_bytes());
        let kind = match kind {
            EntriesKind::Entries => Kind::Entries,
            EntriesKind::Remove => Kind::Remove,
        };
        let len = self.seal(kind, ENTRIES_PREFIX_BYTES + n * ENTRY_BYTES, out);
        Some(Packed { len, entries: n })
    }

    /// Every entry of `entries`, in as few datagrams as fit, each handed to `send`; the
    /// number of entries sent.
    pub fn all_entries(
        &mut self,
        kind: EntriesKind,
        entries: impl IntoIterator<Item = SyncedEntry>,
        mut send: impl FnMut(&[u8]),
    ) -> u64 {
        let mut it = entries.into_iter();
        let mut out = [0u8; MAX_DATAGRAM];
        let mut sent = 0;
        while let Some(p) = self.entries(kind, &mut it, &mut out) {
            send(&out[..p.len]);
            sent += p.entries as u64;
        }
        sent
    }

    /// Write the header for the payload already in `out[HEADER_BYTES..][..payload_len]`,
    /// encrypt the payload and append the tag; the datagram's length.
    fn seal(&mut self, kind: Kind, payload_len: usize, out: &mut [u8; MAX_DATAGRAM]) -> usize {
        // 2^64 - 1 datagrams is beyond any epoch's life (58,000 years at 10 M/s); stopping is
        // still better than reusing a nonce.
        assert!(self.next_seq != u64::MAX, "sync sequence numbers exhausted in one epoch");
        let header = Header { kind, sender: self.sender, epoch: self.epoch, seq: self.next_seq };
        self.next_seq += 1;
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
