//! Fleet sync: connection-state sharing between the instances of a fleet (`fleet.sync`, FS of
//! the spec): the entry and datagram formats, their security (keys, sessions, replay), the
//! epoch file, the bulk sync's bookkeeping, and the thread that talks to the peers
//! ([`spawn`]). Its other halves: the decision core's ([`spillway_core::sync`]: what is at
//! risk, how a copy is stored) and each worker's (`spillway_dataplane::sync`: the scans).
//! (The table file of a single instance's restart is [`crate::table_file`]; the VIPs an
//! instance announces, [`crate::instance`].)
//!
//! # Why
//!
//! ECMP moves a flow to another instance when an instance dies; consistent hashing sends it to
//! the same backend unless the service's backends changed meanwhile (docs/scale-out.md, "The
//! limits"). Instances that share their connection-tracking entries keep those flows too.
//!
//! # The entry ([`SyncedEntry`], 69 bytes)
//!
//! The tracking key's fields without its local service id (ids are local to an instance), the
//! service by a stable identity ([`service_identity`]: xxh3-64 of a fixed domain-separation
//! prefix and the service's configured name), the backend by its endpoint (address and port),
//! the entry's age in ms (u32, saturating at 49.7 days: for the owner's own entry 0, for a copy
//! relayed in a bulk answer the time since its owner sent it) and the flags byte (only the bits
//! that travel, [`WIRE_FLAGS`]). Big-endian; the layout is on [`SyncedEntry`]. An entry whose
//! kind byte is not a tuple kind, whose unused fields are not zero, whose 5-tuple is neither TCP
//! nor UDP, or with another flag bit, is invalid ([`SyncedEntry::validate`]): the encoder
//! leaves such entries out (counted), and a receiver refuses a datagram that holds one
//! (`malformed`).
//!
//! # The datagram (UDP, at most [`MAX_DATAGRAM`] = 1,400 bytes), version 2
//!
//! ```text
//!  0..4    magic      "SPSY"                                   \
//!  4       version    2                                         |
//!  5       kind       1..7 (below)                              |  cleartext header
//!  6..8    sender     the sender's instance id                  |  (34 bytes),
//!  8..10   recipient  the instance it is for                    |  authenticated as
//! 10..14   key id     which key sealed it (key::Key::id)        |  associated data
//! 14..22   epoch      the sender's life (epoch file)            |
//! 22..30   seq        per (sender, epoch, recipient), from 1    |
//! 30..34   salt       random per start of the sender           /
//! 34..n-16 payload    encrypted
//! n-16..n  tag        Poly1305, 16 bytes
//! ```
//!
//! | kind | payload |
//! |---|---|
//! | 1 `Entries` | count u16 (1..=19), then `count` entries: entries at risk (FS-1) |
//! | 2 `Remove` | the same: entries the sender no longer shares (FS-8); the receiver drops its copy of the key if it names that backend (or the backend is `::`, any) |
//! | 3 `BulkRequest` | request id u64, attempt u16, worker u16 (`0xffff`: all): a joining instance asks for every entry at risk (FS-5), or one worker's part again |
//! | 4 `Answer` | request id u64, attempt u16, worker u16, count u16 (1..=19), then the entries: part of a bulk answer |
//! | 5 `AnswerEnd` | request id u64, attempt u16, worker u16, workers u16, sent u64: the end of one worker's part, with its count |
//! | 6 `BulkAck` | request id u64, datagrams u64: how many `Answer` datagrams the requester has received (the answer's pace) |
//! | 7 `Hello` | table fingerprints' summary u64, phase u8, challenge u64, echo u64, session u64: the recipient's epoch the sender accepts datagrams of (0: none yet) |
//!
//! A payload's length must be exactly what its kind and count say; a count of 0 is
//! `malformed` (the encoder never sends one).
//!
//! **Encryption.** XChaCha20-Poly1305 (RustCrypto's `chacha20poly1305` crate) under a 32-byte
//! key of the key file ([`KeyRing`]: the first line seals, a second one is also accepted
//! during a rotation). The nonce is the header's identity laid side by side: sender (2 bytes),
//! recipient (2), epoch (8), seq (8), salt (4). XChaCha20 rather than ChaCha20 because its
//! 24-byte nonce holds all of that unchanged. **(epoch, seq) is never reused**: the epoch is
//! kept in the epoch file ([`epoch`]) and only grows, across restarts and clock steps; the
//! sequence number only grows within an epoch and recipient, and an exhausted one stops the
//! encoder; the random salt keeps nonces apart even should the epoch file be lost. The key is
//! never printed (`Debug` redacts it).
//!
//! **Receiving** ([`decode`]), in this order, each refusal a reason ([`Refused::as_str`], for
//! metric labels): the length (`truncated` below header + tag, `oversized` above the maximum:
//! the receive buffer is one byte longer, so a longer datagram is seen as such), `bad_magic`,
//! `wrong_version`, `unknown_kind`, `unknown_sender` (not one of the configured peers),
//! `wrong_address` (not from the configured peer's address), `wrong_recipient`,
//! `unknown_key`; then the tag (`auth_failed`: forged or altered), before any byte of the
//! payload is read; then the payload (`malformed`); then the session ([`session`]:
//! `unproven`, a peer that has not proven it is live since this instance started; `stale_epoch`,
//! another life of the peer than the session's; `replayed`, a sequence number seen before or
//! below the window), which records the datagram. Authentication comes before the session, so
//! the state moves only for authentic datagrams, and `replayed`, `stale_epoch` and `unproven`
//! always describe a genuine datagram of a peer, never a forgery.
//!
//! **Sessions** ([`Sessions`]): a peer's life is accepted only once one of its hellos echoes
//! this instance's random challenge of this start, so nothing recorded before a restart is
//! accepted after it, and a peer that comes back with a lower epoch is taken back after one
//! exchange of hellos. Each hello also says which life of its recipient the sender accepts,
//! so an instance sends entries and requests only to a peer that will take them (what it holds
//! back meanwhile, the peer gets from its bulk sync or the next refresh). Within a session, a window of [`REPLAY_WINDOW`] = 128 sequence numbers:
//! out-of-order datagrams are accepted once each; one that leaves the window unseen is counted
//! lost.
//!
//! # Sizes
//!
//! A datagram carries [`ENTRIES_PER_DATAGRAM`] entries; what that comes to on the wire, for a
//! bulk sync of 200,000 or 1M entries, is in docs/scale-out.md ("Sizes on the wire"), checked
//! against these constants by a test (`sizes_on_the_wire_in_scale_out_md`).
//!
//! # Choices where the design left room
//!
//! - [`decode`] decrypts in place in the caller's receive buffer (`&mut [u8]`) and returns
//!   views into it: no allocation and no copy; the buffer's content after a refusal is
//!   unspecified.
//! - Validation is strict: a tuple kind's unused fields must be zero, a 5-tuple must be TCP
//!   or UDP, a count must be in range and match the length, a phase must be known. A sender
//!   never produces anything else, so anything else is a bug or an attack, and one invalid
//!   entry refuses its whole datagram.
//! - `Remove` carries whole records (one layout, one parser); a bulk answer is `Answer`
//!   datagrams per worker, each part ended by an `AnswerEnd` whose count lets the requester see
//!   losses and ask again.
//! - The key file: symbolic links are followed (secret stores install keys as links), the
//!   file is opened once and the opened file is checked (no race between check and read),
//!   upper- or lower-case hex is accepted, one or two lines each ended by `\n` (the last one's
//!   optional) and nothing else (not `\r\n`), and an all-zero key is refused as a placeholder.
//!   Messages name the file and the fix and never quote its content.

mod bulk;
mod entry;
pub mod epoch;
mod key;
mod refused;
mod session;
mod socket;
pub(crate) mod thread;
mod wire;

#[cfg(test)]
pub(crate) mod tests;

pub use bulk::{ABANDON_AFTER, ACK_EVERY, MAX_ATTEMPTS, WINDOW};
pub use entry::{
    service_identity, EntryError, EntryRecords, SyncedEntry, ENTRY_BYTES, SERVICE_IDENTITY_DOMAIN,
    WIRE_FLAGS,
};
pub use epoch::{next_epoch, EpochError};
pub use key::{Key, KeyFileError, KeyProblem, KeyRing, KEY_BYTES, KEY_FILE_HOWTO};
pub use refused::Refused;
pub use session::{Accepted, HelloProof, Sessions, REPLAY_WINDOW};
pub use socket::BUFFER_BYTES;
pub use thread::{spawn, Limited, SyncSettings, SyncShared, SyncStats, DISAGREE_AFTER};
pub use wire::{
    decode, AnswerPart, Body, Datagram, Encoder, EntriesKind, Header, HelloFields, Kind, Packed,
    ALL_WORKERS, ANSWER_END_BYTES, ANSWER_ENTRIES_PER_DATAGRAM, ANSWER_PREFIX_BYTES,
    BULK_ACK_BYTES, BULK_REQUEST_BYTES, ENTRIES_PER_DATAGRAM, ENTRIES_PREFIX_BYTES, HEADER_BYTES,
    HELLO_BYTES, MAGIC, MAX_DATAGRAM, TAG_BYTES, VERSION,
};
