//! The sync epoch: a number that names one life of an instance in its datagrams' headers and
//! nonces, and that only grows, across restarts and clock steps alike.
//!
//! It is the wall clock in milliseconds, unless the last epoch used is not below that: then one
//! more than it. The last one is kept in a file (`fleet.sync.epoch_file`), written, synced and
//! renamed into place before the first datagram of a life is sealed. So a clock stepped back
//! (an NTP correction, a host without a real-time clock, a restored VM) never makes an
//! instance use an epoch again, and (epoch, sequence) never repeats under a key while the file
//! lives. Should the file be lost as well, the random salt every datagram carries still keeps
//! nonces apart (`wire::Header::nonce`), and a peer that sees the lower epoch takes the
//! instance back once it has proven it is live (`session`).

use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// Why the epoch file could not give an epoch. The start stops: sealing under an epoch that
/// may have been used before could repeat a nonce.
#[derive(Debug, thiserror::Error)]
pub enum EpochError {
    /// Reading or writing it failed.
    #[error("sync epoch file {path}: {error}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        error: io::Error,
    },
    /// Its content is not a number.
    #[error(
        "sync epoch file {path}: not an epoch (one decimal number of milliseconds); move it \
         away to start afresh: the next epoch is then the clock's"
    )]
    Garbled {
        /// The file.
        path: String,
    },
}

/// The wall clock in unix milliseconds (1 if it reads before 1970).
pub fn clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The epoch for this life: `max(now_ms, last + 1)` where `last` is the file's (none for a file
/// that does not exist), written back before it is returned.
pub fn next_epoch(path: &Path, now_ms: u64) -> Result<u64, EpochError> {
    let io = |error| EpochError::Io { path: path.display().to_string(), error };
    let last = match OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path) {
        Ok(mut f) => {
            let mut text = String::new();
            Read::by_ref(&mut f).take(64).read_to_string(&mut text).map_err(io)?;
            let last = text
                .trim()
                .parse::<u64>()
                .map_err(|_| EpochError::Garbled { path: path.display().to_string() })?;
            Some(last)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io(e)),
    };
    let epoch = match last {
        Some(last) => now_ms.max(last.saturating_add(1)),
        None => now_ms.max(1),
    };
    write(path, epoch).map_err(io)?;
    Ok(epoch)
}

/// Write `epoch` to `path` atomically: a temporary file beside it (mode 0600), synced, renamed
/// into place, and the directory synced.
fn write(path: &Path, epoch: u64) -> io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    writeln!(f, "{epoch}")?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("spillway-epoch-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_epoch_only_grows_whatever_the_clock_does() {
        let d = scratch("grows");
        let f = d.join("sub/epoch");
        assert_eq!(next_epoch(&f, 5_000).unwrap(), 5_000);
        // The clock went on: its reading.
        assert_eq!(next_epoch(&f, 9_000).unwrap(), 9_000);
        // The clock stepped back, or stood still: one more than the last, never lower.
        assert_eq!(next_epoch(&f, 1_000).unwrap(), 9_001);
        assert_eq!(next_epoch(&f, 9_001).unwrap(), 9_002);
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "9002\n");
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_garbled_file_or_a_link_stops_the_start() {
        let d = scratch("bad");
        let f = d.join("epoch");
        std::fs::write(&f, "yesterday\n").unwrap();
        let e = next_epoch(&f, 1).unwrap_err();
        assert!(matches!(e, EpochError::Garbled { .. }), "{e}");
        assert!(e.to_string().contains("move it away"), "{e}");
        std::fs::remove_file(&f).unwrap();
        std::os::unix::fs::symlink(d.join("elsewhere"), &f).unwrap();
        assert!(matches!(next_epoch(&f, 1).unwrap_err(), EpochError::Io { .. }));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
