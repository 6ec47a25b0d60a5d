//! The table file (`fleet.table_file`): one instance's connection table kept across its own
//! clean stop and next start. No peer is involved: this is not fleet sync, though the entries
//! are written in sync's 69-byte record ([`SyncedEntry`]).
//!
//! # Format
//!
//! A 30-byte header (magic "SPTB", format version u16, the configuration's fingerprint u64
//! ([`spillway_core::model::Model::fingerprint`]: the same whatever the health verdicts), the
//! time written in unix ms u64, the entry count u64), the entries, then xxh3-64 of everything
//! before it (u64). Big-endian. 1,000,000 entries make a 69,000,038-byte file. Reading streams
//! through a 69 KB buffer and refuses: not a table file, another version, more entries than the
//! caller allows (checked on the header, before reading them), truncated, checksum mismatch,
//! data after the checksum, an invalid entry, and (only for an intact file) a fingerprint other
//! than the configuration's now.
//!
//! # Life of the file
//!
//! - A clean stop writes it atomically ([`save_table`]: a temporary file with mode 0600, since
//!   it holds clients' addresses, synced and renamed into place).
//! - The next start opens it without following a symbolic link and without blocking, and reads
//!   it only if it is a regular file owned by the user the daemon runs as, readable by nobody
//!   else ([`open_table`]); anything else is refused with a log line saying why, and the start
//!   goes on with an empty table.
//! - Once read, it is *consumed* ([`consume`]): removed when it was used, renamed to
//!   `PATH.refused` when it was refused (kept for inspection; never read again), so that a crash
//!   after that start cannot bring its entries back as the instance's own.
//! - [`TableFile::age`] adds the time the file lay on disk to the entries' idle times.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::Xxh3;

use crate::sync::{SyncedEntry, ENTRY_BYTES};

mod restore;
#[cfg(test)]
mod tests;

pub use restore::{export_tables, restore, restore_tables, save, Restored};

/// The first bytes of a table file.
pub const TABLE_MAGIC: [u8; 4] = *b"SPTB";
/// The table file format's version.
pub const TABLE_VERSION: u16 = 1;
/// Bytes of the header: magic 4, version 2, fingerprint 8, written (unix ms) 8, count 8.
pub const TABLE_HEADER_BYTES: usize = 30;
/// Bytes of the trailing checksum (xxh3-64 of everything before it, big-endian).
pub const TABLE_CHECKSUM_BYTES: usize = 8;

/// Records written or read per I/O call.
const CHUNK_ENTRIES: usize = 1024;

/// A table file's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableFile {
    /// The configuration's fingerprint it was written under.
    pub fingerprint: u64,
    /// When it was written (unix ms).
    pub written_ms: u64,
    /// The entries.
    pub entries: Vec<SyncedEntry>,
}

impl TableFile {
    /// Add the time the file lay on disk (`now_ms - written_ms`, none if the clock went back)
    /// to every entry's idle time, saturating: the connections were idle meanwhile, and their
    /// entries must expire as if the instance had run on. Call it once, on loading.
    pub fn age(&mut self, now_ms: u64) {
        let gap = u32::try_from(now_ms.saturating_sub(self.written_ms)).unwrap_or(u32::MAX);
        for e in &mut self.entries {
            e.age_ms = e.age_ms.saturating_add(gap);
        }
    }
}

/// Why a table file was not read. The caller logs it and starts with an empty table.
#[derive(Debug, thiserror::Error)]
pub enum TableFileError {
    /// Reading failed.
    #[error("table file: {0}")]
    Io(#[from] io::Error),
    /// Not a regular file (a symbolic link, a FIFO, a directory, a device).
    #[error("not a regular file ({0}); only a regular file is read, and a link is never followed")]
    NotRegular(&'static str),
    /// Owned by another user than the daemon's.
    #[error("owned by uid {owner}, not by the daemon's uid {uid}")]
    WrongOwner {
        /// The file's owner.
        owner: u32,
        /// The daemon's effective uid.
        uid: u32,
    },
    /// Group or others may read or write it.
    #[error("mode {0:04o}: group or other users may read or write it (the file must be 0600)")]
    TooOpen(u32),
    /// It does not start with the magic.
    #[error("not a Spillway table file (no SPTB header)")]
    NotATableFile,
    /// Another version of the format.
    #[error("table file format version {0} is not supported (this Spillway reads version {TABLE_VERSION})")]
    UnsupportedVersion(u16),
    /// More entries than the caller accepts.
    #[error("table file holds {count} entries, more than the {max} allowed")]
    TooManyEntries {
        /// The header's count.
        count: u64,
        /// The caller's bound.
        max: u64,
    },
    /// It ends before its header's count of entries and its checksum.
    #[error("table file is truncated (shorter than its header says)")]
    Truncated,
    /// The checksum does not match: the file is corrupt.
    #[error("table file is corrupt (checksum mismatch)")]
    ChecksumMismatch,
    /// Bytes follow the checksum.
    #[error("table file has data after its checksum (corrupt)")]
    TrailingData,
    /// The checksum matches, but an entry is not valid (written by a broken writer).
    #[error("table file entry {index} is malformed: {reason}")]
    MalformedEntry {
        /// The entry's index.
        index: u64,
        /// What is wrong.
        reason: crate::sync::EntryError,
    },
    /// Intact, but written under another configuration: its entries may name other backends.
    #[error(
        "table file was written under another configuration (fingerprint {found:016x}, now \
         {expected:016x}; health verdicts are not part of it)"
    )]
    FingerprintMismatch {
        /// The file's.
        found: u64,
        /// The caller's.
        expected: u64,
    },
}

/// Write a table file: the header, every entry, the checksum. `entries` must yield exactly
/// its `len()` (the count is in the header); a shorter or longer iterator is an
/// `InvalidInput` error, and the file must not be used. Pass a buffered writer, and write to a
/// temporary file renamed into place, so a crash never leaves a half file under the name
/// (a half file is refused anyway, by its checksum). The number of entries written.
pub fn write_table<W: Write, I>(
    mut w: W,
    fingerprint: u64,
    written_ms: u64,
    entries: I,
) -> io::Result<u64>
where
    I: IntoIterator<Item = SyncedEntry>,
    I::IntoIter: ExactSizeIterator,
{
    let mut it = entries.into_iter();
    let count = it.len() as u64;
    let mut hash = Xxh3::new();
    let mut header = [0u8; TABLE_HEADER_BYTES];
    header[0..4].copy_from_slice(&TABLE_MAGIC);
    header[4..6].copy_from_slice(&TABLE_VERSION.to_be_bytes());
    header[6..14].copy_from_slice(&fingerprint.to_be_bytes());
    header[14..22].copy_from_slice(&written_ms.to_be_bytes());
    header[22..30].copy_from_slice(&count.to_be_bytes());
    hash.update(&header);
    w.write_all(&header)?;
    let mut buf = vec![0u8; CHUNK_ENTRIES * ENTRY_BYTES];
    let mut written = 0u64;
    loop {
        let mut n = 0;
        for (rec, e) in buf.chunks_exact_mut(ENTRY_BYTES).zip(it.by_ref()) {
            e.encode(rec.try_into().expect("a record's length"));
            n += 1;
        }
        if n == 0 {
            break;
        }
        written += n as u64;
        if written > count {
            break;
        }
        let chunk = &buf[..n * ENTRY_BYTES];
        hash.update(chunk);
        w.write_all(chunk)?;
    }
    if written != count {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("table file: the iterator said {count} entries but yielded {written} or more"),
        ));
    }
    w.write_all(&hash.digest().to_be_bytes())?;
    w.flush()?;
    Ok(count)
}

/// Read a table file, streaming (the raw bytes pass through a small buffer; only the decoded
/// entries are kept). Checks, in order: the magic, the version, the count against
/// `max_entries`, the length, the checksum, the entries, the fingerprint against
/// `expected_fingerprint`: a fingerprint mismatch is reported only for an intact file.
pub fn read_table<R: Read>(
    mut r: R,
    expected_fingerprint: u64,
    max_entries: u64,
) -> Result<TableFile, TableFileError> {
    let mut header = [0u8; TABLE_HEADER_BYTES];
    read_exact(&mut r, &mut header[..4])?;
    if header[0..4] != TABLE_MAGIC {
        return Err(TableFileError::NotATableFile);
    }
    read_exact(&mut r, &mut header[4..])?;
    let version = u16::from_be_bytes([header[4], header[5]]);
    if version != TABLE_VERSION {
        return Err(TableFileError::UnsupportedVersion(version));
    }
    let be64 = |b: &[u8]| u64::from_be_bytes(b.try_into().expect("8 bytes"));
    let fingerprint = be64(&header[6..14]);
    let written_ms = be64(&header[14..22]);
    let count = be64(&header[22..30]);
    if count > max_entries {
        return Err(TableFileError::TooManyEntries { count, max: max_entries });
    }
    let mut hash = Xxh3::new();
    hash.update(&header);
    // The count is bounded by the caller; still, grow as the file proves it has the entries
    // rather than trusting a header for the whole allocation up front.
    let mut entries = Vec::with_capacity(usize::try_from(count.min(1 << 16)).unwrap_or(0));
    let mut buf = vec![0u8; CHUNK_ENTRIES * ENTRY_BYTES];
    let mut invalid = None;
    let mut left = count;
    while left > 0 {
        let n = usize::try_from(left.min(CHUNK_ENTRIES as u64)).unwrap_or(CHUNK_ENTRIES);
        let chunk = &mut buf[..n * ENTRY_BYTES];
        read_exact(&mut r, chunk)?;
        hash.update(chunk);
        for rec in chunk.chunks_exact(ENTRY_BYTES) {
            match SyncedEntry::decode(rec.try_into().expect("a record's length")) {
                Ok(e) => entries.push(e),
                Err(reason) => {
                    let index = entries.len() as u64;
                    invalid.get_or_insert(TableFileError::MalformedEntry { index, reason });
                }
            }
        }
        left -= n as u64;
    }
    let mut sum = [0u8; TABLE_CHECKSUM_BYTES];
    read_exact(&mut r, &mut sum)?;
    if u64::from_be_bytes(sum) != hash.digest() {
        return Err(TableFileError::ChecksumMismatch);
    }
    let mut extra = [0u8; 1];
    loop {
        match r.read(&mut extra) {
            Ok(0) => break,
            Ok(_) => return Err(TableFileError::TrailingData),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(e) = invalid {
        return Err(e);
    }
    if fingerprint != expected_fingerprint {
        return Err(TableFileError::FingerprintMismatch {
            found: fingerprint,
            expected: expected_fingerprint,
        });
    }
    Ok(TableFile { fingerprint, written_ms, entries })
}

/// Write a table file at `path` atomically: into `PATH.tmp` (mode 0600: it holds clients'
/// addresses) in the same directory, synced, then renamed over `path`, and the directory
/// synced. A crash at any point leaves either the old file or the new one under `path`.
pub fn save_table<I>(path: &Path, fingerprint: u64, written_ms: u64, entries: I) -> io::Result<u64>
where
    I: IntoIterator<Item = SyncedEntry>,
    I::IntoIter: ExactSizeIterator,
{
    let tmp = temp_path(path);
    // A leftover from a crash may have another mode: start afresh.
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        let file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        let mut w = BufWriter::with_capacity(1 << 16, file);
        let n = write_table(&mut w, fingerprint, written_ms, entries)?;
        w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir)?.sync_all()?;
        }
        Ok(n)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Open the table file at `path` for reading, only if it is safe to: not through a symbolic
/// link (`O_NOFOLLOW`), without blocking on a FIFO (`O_NONBLOCK`), then checked on the opened
/// file (no race between the check and the read): a regular file, owned by the daemon's user,
/// with no access for group or others. A missing file is [`TableFileError::Io`] of kind
/// `NotFound` ([`TableFileError::is_missing`]): the normal case on a first start.
pub fn open_table(path: &Path) -> Result<File, TableFileError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => TableFileError::NotRegular("a symbolic link"),
            _ => TableFileError::Io(e),
        })?;
    let meta = file.metadata()?;
    let kind = meta.file_type();
    if !kind.is_file() {
        use std::os::unix::fs::FileTypeExt;
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_dir() {
            "a directory"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "a device"
        };
        return Err(TableFileError::NotRegular(what));
    }
    let uid = effective_uid();
    if meta.uid() != uid {
        return Err(TableFileError::WrongOwner { owner: meta.uid(), uid });
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(TableFileError::TooOpen(mode));
    }
    Ok(file)
}

/// The daemon's effective uid, as `/proc/self/status` gives it (no `unsafe` call needed).
fn effective_uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|u| u.parse().ok()))
        })
        .unwrap_or(u32::MAX)
}

/// Read the table file at `path` ([`open_table`], then [`read_table`]).
pub fn load_table(
    path: &Path,
    expected_fingerprint: u64,
    max_entries: u64,
) -> Result<TableFile, TableFileError> {
    read_table(open_table(path)?, expected_fingerprint, max_entries)
}

/// What became of a table file once read: removed, or renamed aside.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Consumed {
    /// Removed (its entries were used).
    Removed,
    /// Renamed to this path (it was refused; kept for inspection, never read again).
    RenamedTo(PathBuf),
}

/// Consume the table file at `path` after a start read it: removed when `used`, else renamed
/// to `PATH.refused` (replacing an older one). A file that was not a regular file (a link, a
/// FIFO) is left as it is: it was never read. Errors are the caller's to log.
pub fn consume(path: &Path, used: bool) -> io::Result<Consumed> {
    if used {
        std::fs::remove_file(path)?;
        return Ok(Consumed::Removed);
    }
    let mut aside = path.as_os_str().to_owned();
    aside.push(".refused");
    let aside = PathBuf::from(aside);
    std::fs::rename(path, &aside)?;
    Ok(Consumed::RenamedTo(aside))
}

impl TableFileError {
    /// The file does not exist.
    pub fn is_missing(&self) -> bool {
        matches!(self, TableFileError::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }
}

fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    PathBuf::from(name)
}

/// `read_exact`, with an early end as [`TableFileError::Truncated`].
fn read_exact(r: &mut impl Read, buf: &mut [u8]) -> Result<(), TableFileError> {
    r.read_exact(buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            TableFileError::Truncated
        } else {
            TableFileError::Io(e)
        }
    })
}
