//! The table file's format: exact bytes, every refusal, the iterator's length, saving and
//! loading.

use super::*;
use crate::sync::tests::entry;
use crate::sync::EntryError;

#[test]
fn a_million_entries_make_the_documented_size() {
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
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
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
    t.entries[1].age_ms = u32::MAX - 5;
    let before = t.entries[0].age_ms;
    t.age(1_000 + 60_000);
    assert_eq!(t.entries[0].age_ms, before + 60_000);
    assert_eq!(t.entries[1].age_ms, u32::MAX);
    t.age(0);
    assert_eq!(t.entries[0].age_ms, before + 60_000);
}
