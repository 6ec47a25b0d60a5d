//! One synced connection-tracking entry: what a peer needs to forward the connection to the
//! same backend, in a fixed 69-byte big-endian record.

use spillway_core::addr::Addr;
use spillway_core::flow::{proto, FlowKey, TupleKind};

/// Size of one encoded [`SyncedEntry`].
pub const ENTRY_BYTES: usize = 69;

pub use spillway_core::sync::{service_identity, SERVICE_IDENTITY_DOMAIN, WIRE_FLAGS};

/// One connection-tracking entry as it travels between instances (and into the table file).
///
/// Layout (big-endian, [`ENTRY_BYTES`] = 69 bytes):
///
/// ```text
///  0..16  src        key.src
/// 16..32  dst        key.dst
/// 32..34  sport      key.sport
/// 34..36  dport      key.dport
/// 36      proto      key.proto
/// 37      kind       key.kind (TupleKind: 1, 2, 3 or 5)
/// 38..46  service    service_identity(name)
/// 46..62  backend    the backend's address
/// 62..64  port       the backend's port
/// 64..68  age_ms     ms since its owner vouched for it (sync), or since its last packet (the
///                    table file); saturating at u32::MAX (49.7 days)
/// 68      flags      conntrack::EntryValue::flags
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct SyncedEntry {
    /// The tracking key. Its `service` (a local id) is not sent: it is encoded as nothing and
    /// decoded as 0; [`SyncedEntry::tracking_key`] sets the receiver's own id.
    pub key: FlowKey,
    /// The service's identity ([`service_identity`] of its name).
    pub service: u64,
    /// The backend's address.
    pub backend: Addr,
    /// The backend's port.
    pub backend_port: u16,
    /// Milliseconds since its owner vouched for it, when sent ([`spillway_core::sync::PeerEntry::age_ms`]);
    /// in the table file, since its last packet.
    pub age_ms: u32,
    /// The entry's flags byte (`conntrack::EntryValue::flags`).
    pub flags: u8,
}

/// Why an entry's bytes are not a valid entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryError {
    /// The kind byte is not a [`TupleKind`].
    UnknownKind(u8),
    /// A field the kind does not use is not zero, or a 5-tuple is neither TCP nor UDP.
    InvalidKey,
    /// A flag bit other than those that travel ([`WIRE_FLAGS`]).
    UnknownFlags(u8),
}

impl std::fmt::Display for EntryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EntryError::UnknownKind(k) => write!(f, "unknown tuple kind {k}"),
            EntryError::InvalidKey => f.write_str("fields out of range for the tuple kind"),
            EntryError::UnknownFlags(b) => write!(f, "unknown flag bits {b:#04x}"),
        }
    }
}

impl std::error::Error for EntryError {}

impl SyncedEntry {
    /// An entry from a local tracking key and what it maps to. `age_ms` saturates at
    /// `u32::MAX`; the key's local service id is dropped.
    pub fn new(
        key: &FlowKey,
        service: u64,
        backend: Addr,
        backend_port: u16,
        age_ms: u64,
        flags: u8,
    ) -> SyncedEntry {
        SyncedEntry {
            key: key.with_service(0),
            service,
            backend,
            backend_port,
            age_ms: u32::try_from(age_ms).unwrap_or(u32::MAX),
            flags,
        }
    }

    /// The tracking key with this instance's id for the service.
    pub fn tracking_key(&self, local_service: u16) -> FlowKey {
        self.key.with_service(local_service)
    }

    /// Is the key one the connection table can hold? The kind is a [`TupleKind`], the fields
    /// it does not use are zero, and a 5-tuple is TCP or UDP (only they have ports).
    pub fn validate(&self) -> Result<(), EntryError> {
        let k = &self.key;
        let ports_zero = k.sport == 0 && k.dport == 0;
        let ok = match k.kind {
            x if x == TupleKind::One as u8 => {
                k.dst == Addr::UNSPECIFIED && ports_zero && k.proto == 0
            }
            x if x == TupleKind::Two as u8 => ports_zero && k.proto == 0,
            x if x == TupleKind::Three as u8 => ports_zero,
            x if x == TupleKind::Five as u8 => k.proto == proto::TCP || k.proto == proto::UDP,
            other => return Err(EntryError::UnknownKind(other)),
        };
        if !ok {
            return Err(EntryError::InvalidKey);
        }
        if self.flags & !WIRE_FLAGS != 0 {
            return Err(EntryError::UnknownFlags(self.flags));
        }
        Ok(())
    }

    /// The record's bytes.
    pub fn encode(&self, out: &mut [u8; ENTRY_BYTES]) {
        let k = &self.key;
        out[0..16].copy_from_slice(&k.src.0);
        out[16..32].copy_from_slice(&k.dst.0);
        out[32..34].copy_from_slice(&k.sport.to_be_bytes());
        out[34..36].copy_from_slice(&k.dport.to_be_bytes());
        out[36] = k.proto;
        out[37] = k.kind;
        out[38..46].copy_from_slice(&self.service.to_be_bytes());
        out[46..62].copy_from_slice(&self.backend.0);
        out[62..64].copy_from_slice(&self.backend_port.to_be_bytes());
        out[64..68].copy_from_slice(&self.age_ms.to_be_bytes());
        out[68] = self.flags;
    }

    /// The record's bytes, as an array.
    pub fn to_bytes(&self) -> [u8; ENTRY_BYTES] {
        let mut b = [0u8; ENTRY_BYTES];
        self.encode(&mut b);
        b
    }

    /// An entry from its record, checked with [`SyncedEntry::validate`].
    pub fn decode(b: &[u8; ENTRY_BYTES]) -> Result<SyncedEntry, EntryError> {
        let e = SyncedEntry::decode_unchecked(b);
        e.validate()?;
        Ok(e)
    }

    /// An entry from its record, unchecked (for a record already validated).
    pub(crate) fn decode_unchecked(b: &[u8; ENTRY_BYTES]) -> SyncedEntry {
        let addr = |r: std::ops::Range<usize>| {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[r]);
            Addr(a)
        };
        let u16_at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let mut service = [0u8; 8];
        service.copy_from_slice(&b[38..46]);
        let mut idle = [0u8; 4];
        idle.copy_from_slice(&b[64..68]);
        SyncedEntry {
            key: FlowKey {
                src: addr(0..16),
                dst: addr(16..32),
                sport: u16_at(32),
                dport: u16_at(34),
                proto: b[36],
                kind: b[37],
                service: 0,
            },
            service: u64::from_be_bytes(service),
            backend: addr(46..62),
            backend_port: u16_at(62),
            age_ms: u32::from_be_bytes(idle),
            flags: b[68],
        }
    }
}

/// The records of a run of entries that were all validated: iterates over them without
/// allocating.
#[derive(Clone, Copy, Debug)]
pub struct EntryRecords<'a> {
    bytes: &'a [u8],
}

impl<'a> EntryRecords<'a> {
    /// Validate every record of `bytes` (a multiple of [`ENTRY_BYTES`]).
    pub(crate) fn validate(bytes: &'a [u8]) -> Result<EntryRecords<'a>, EntryError> {
        debug_assert_eq!(bytes.len() % ENTRY_BYTES, 0);
        for rec in bytes.chunks_exact(ENTRY_BYTES) {
            SyncedEntry::decode_unchecked(record(rec)).validate()?;
        }
        Ok(EntryRecords { bytes })
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.bytes.len() / ENTRY_BYTES
    }

    /// No entries.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The entries, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = SyncedEntry> + 'a {
        self.bytes.chunks_exact(ENTRY_BYTES).map(|r| SyncedEntry::decode_unchecked(record(r)))
    }
}

/// A chunk of exactly [`ENTRY_BYTES`] as an array reference.
fn record(chunk: &[u8]) -> &[u8; ENTRY_BYTES] {
    // chunks_exact(ENTRY_BYTES) yields only chunks of that length.
    chunk.try_into().unwrap_or(&[0; ENTRY_BYTES])
}
