//! Connection-state sync between the instances of a fleet: the wire format, its security, and
//! the table file of a single instance's restart. Pure library code (no sockets, no threads).
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
//! the idle time in ms when sent (u32, saturating at 49.7 days) and the flags byte. Big-endian;
//! the layout is on [`SyncedEntry`]. An entry whose kind byte is not a tuple kind, whose unused
//! fields are not zero, or whose 5-tuple is neither TCP nor UDP is invalid
//! ([`SyncedEntry::validate`]): the encoder leaves such entries out (counted), and a receiver
//! refuses a datagram that holds one (`malformed`).
//!
//! # The datagram (UDP, at most [`MAX_DATAGRAM`] = 1,400 bytes)
//!
//! ```text
//!  0..4    magic     "SPSY"                         \
//!  4       version   1                               |  cleartext header (26 bytes),
//!  5       kind      1..5 (below)                    |  authenticated as associated data
//!  6..10   sender    the instance's configured id    |
//! 10..18   epoch     the sender's start, unix ms     |
//! 18..26   seq       per (sender, epoch), from 1    /
//! 26..n-16 payload   encrypted
//! n-16..n  tag       Poly1305, 16 bytes
//! ```
//!
//! | kind | payload |
//! |---|---|
//! | 1 `Entries` | count u16 (1..=19), then `count` entries |
//! | 2 `Remove` | the same: the receiver matches by key and service identity; the backend and flags say what the sender had |
//! | 3 `BulkRequest` | request id u64 (a joining instance asks its peers for all their entries) |
//! | 4 `BulkEnd` | request id u64, entries sent u64 (the end of one peer's answer, sent as `Entries`) |
//! | 5 `Hello` | table fingerprints' summary u64, phase u8 (0 starting, 1 serving, 2 drained, 3 stopping) |
//!
//! A payload's length must be exactly what its kind and count say; an `Entries` or `Remove`
//! with count 0 is `malformed` (the encoder never sends one).
//!
//! **Encryption.** XChaCha20-Poly1305 (RustCrypto's `chacha20poly1305` crate) under the fleet's
//! 32-byte key ([`Key`], read by [`Key::read_file`]). The nonce is the header's identity laid
//! side by side: sender (4 bytes), epoch (8), seq (8), four zero bytes. XChaCha20 rather than
//! ChaCha20 (same crate, same cipher and tag; one HChaCha20 block more per datagram) because
//! its 24-byte nonce holds all 20 bytes of (sender, epoch, seq) unchanged: with ChaCha20's 12
//! bytes the triple would have to be truncated or hashed, and a nonce could repeat. A nonce
//! repeats only if two instances share an id, or an instance restarts with an epoch not greater
//! than one it used before: the epoch is the start time in unix ms, so a wall clock stepped
//! back by more than the downtime would repeat one; a caller that can should keep the last
//! epoch and use `max(now_ms, last + 1)`. The key is never printed (`Debug` redacts it).
//!
//! **Receiving** ([`decode`]), in this order, each refusal a reason ([`Refused::as_str`], for
//! metric labels): the length (`truncated` below header + tag, `oversized` above the maximum),
//! `bad_magic`, `wrong_version`, `unknown_kind`, `unknown_sender` (not one of the configured
//! peers: a receiver keeps state for those only); then the tag (`auth_failed`: forged, altered,
//! or another key), before any byte of the payload is read; then the replay check, which
//! records the datagram (`stale_epoch`: an epoch older than the newest seen from that sender;
//! `replayed`: a sequence seen before or below the window); then the payload (`malformed`).
//! Authentication comes before the replay check so that the state moves only for authentic
//! datagrams, and so that `replayed` and `stale_epoch` always describe a genuine datagram of
//! a peer (a duplicate in the network, an old life of the peer), never a forgery: a forgery is
//! always `auth_failed`. An authentic but malformed datagram keeps its sequence number used.
//!
//! **Replay window** ([`ReplayState`]): per peer, the newest epoch and the highest sequence
//! seen with a bitmap of the [`REPLAY_WINDOW`] = 128 below it. A newer epoch (the peer
//! restarted) starts a fresh window; out-of-order sequences within the window are accepted
//! once each. 128 rather than 64: a bulk answer is a burst of thousands of datagrams, and
//! multipath networks reorder bursts.
//!
//! # Figures (from the constants; IPv4, computed, not measured)
//!
//! - Entries per datagram: [`ENTRIES_PER_DATAGRAM`] = (1400 - 26 - 16 - 2) / 69 = **19**; a
//!   full datagram is 26 + 2 + 19 x 69 + 16 = **1,355 bytes** of UDP payload.
//! - On the wire: + UDP 8 + IPv4 20 = 1,383-byte packet; + Ethernet 14 + FCS 4 = 1,401-byte
//!   frame; + preamble 8 + inter-frame gap 12 = **1,421 bytes of line time**, so **74.8 bytes
//!   per entry** (IPv6: 1,441 and 75.8).
//! - A bulk sync of **1,000,000 entries**: **52,632 datagrams**, 71.3 MB of UDP payload,
//!   **74.8 MB** on the wire: 0.60 s of a 1 Gb/s link, 60 ms of 10 Gb/s.
//! - **200,000 entries** (about the entries at risk when one backend is added to five):
//!   **10,527 datagrams**, 14.3 MB of payload, **15.0 MB** on the wire: 0.12 s at 1 Gb/s.
//!
//! A test (`figures_in_the_module_doc`) recomputes these from the constants.
//!
//! CPU, measured once with the `#[ignore]`d `bench_a_million_entries` (release build without
//! LTO, one core of a loaded 2-core VM): encoding and sealing 1M entries took 331 ms (215 MB/s
//! of datagrams), opening and decoding them 300 ms (238 MB/s): a bulk sync costs each side
//! about a third of a core-second, well under the link's 0.6 s at 1 Gb/s.
//!
//! # The table file ([`write_table`], [`read_table`])
//!
//! For one instance's clean stop and next start (no peer involved): a 30-byte header (magic
//! "SPTB", format version u16, the configuration's table fingerprints' summary u64, the time
//! written in unix ms u64, the entry count u64), the entries in the same 69-byte encoding, then
//! xxh3-64 of everything before it (u64). Big-endian. 1,000,000 entries make a 69,000,038-byte
//! file. Reading streams through a 69 KB buffer and refuses: not a table file, another
//! version, more entries than the caller allows (checked on the header, before reading them),
//! truncated, checksum mismatch, data after the checksum, an invalid entry, and (only for an
//! intact file) a fingerprint other than the configuration's now: the caller logs it and
//! starts empty. [`save_table`] writes it atomically (a temporary file with mode 0600, since
//! it holds clients' addresses, synced and renamed into place) and [`load_table`] reads it;
//! [`TableFile::age`] adds the time the file lay on disk to the entries' idle times.
//!
//! # Choices where the design left room
//!
//! - [`decode`] decrypts in place in the caller's receive buffer (`&mut [u8]`) and returns
//!   views into it: no allocation and no copy; the buffer's content after a refusal is
//!   unspecified.
//! - A datagram with a sender id outside the configured peers is refused before the AEAD,
//!   and this instance's own id is not a peer: its looped-back multicast is `unknown_sender`.
//! - Validation is strict: a tuple kind's unused fields must be zero, a 5-tuple must be TCP
//!   or UDP, a count must be 1..=19 and match the length, a phase must be known. A sender
//!   never produces anything else, so anything else is a bug or an attack, and one invalid
//!   entry refuses its whole datagram (the encoder therefore leaves invalid entries out and
//!   counts them: [`Encoder::skipped_invalid`]).
//! - `Remove` carries whole records (one layout, one parser); a bulk answer is ordinary
//!   `Entries` datagrams followed by a `BulkEnd` whose count lets the requester see losses.
//! - Sequence 0 is never accepted; an exhausted sequence space (2^64 - 1 datagrams in one
//!   epoch) stops the encoder rather than reuse a nonce.
//! - The key file: symbolic links are followed (secret stores install keys as links), the
//!   file is opened once and the opened file is checked (no race between check and read),
//!   upper- or lower-case hex is accepted, one trailing `\n` and nothing else (not `\r\n`),
//!   and an all-zero key is refused as a placeholder. Messages name the file and the fix and
//!   never quote its content.
//! - The table file's fingerprint is compared only once the file proved intact, so a corrupt
//!   file is never reported as "another configuration".

mod entry;
mod key;
mod persist;
mod replay;
mod restart;
mod thread;
mod wire;

#[cfg(test)]
mod tests;

pub use entry::{
    service_identity, EntryError, EntryRecords, SyncedEntry, ENTRY_BYTES, SERVICE_IDENTITY_DOMAIN,
};
pub use key::{Key, KeyFileError, KeyProblem, KEY_BYTES, KEY_FILE_HOWTO};
pub use persist::{
    load_table, read_table, save_table, write_table, TableFile, TableFileError,
    TABLE_CHECKSUM_BYTES, TABLE_HEADER_BYTES, TABLE_MAGIC, TABLE_VERSION,
};
pub use replay::{ReplayState, REPLAY_WINDOW};
pub use restart::{export_tables, restore_tables, table_file_fingerprint, Restored};
pub use thread::{spawn, SyncSettings, SyncShared, SyncStats};
pub use wire::{
    decode, Body, Datagram, Encoder, EntriesKind, Header, Kind, Packed, Refused, BULK_END_BYTES,
    BULK_REQUEST_BYTES, ENTRIES_PER_DATAGRAM, ENTRIES_PREFIX_BYTES, HEADER_BYTES, HELLO_BYTES,
    MAGIC, MAX_DATAGRAM, TAG_BYTES, VERSION,
};
