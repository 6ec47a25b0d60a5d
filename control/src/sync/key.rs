//! The fleet's shared key and the file it is read from.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use chacha20poly1305::{KeyInit, XChaCha20Poly1305};

/// Bytes of the shared key.
pub const KEY_BYTES: usize = 32;

/// How to make a key file, for the error messages.
pub const KEY_FILE_HOWTO: &str =
    "make one with `head -c 32 /dev/urandom | xxd -p -c 64 > FILE; chmod 600 FILE` and give \
     every instance of the fleet the same file";

/// The fleet's shared 32-byte key. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Key([u8; KEY_BYTES]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(<redacted>)")
    }
}

impl Key {
    /// A key from its bytes.
    pub fn from_bytes(bytes: [u8; KEY_BYTES]) -> Key {
        Key(bytes)
    }

    /// The AEAD under this key.
    pub(crate) fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(&self.0.into())
    }

    /// Read the key file at `path`: see [`KeyFileError`] for what is checked.
    pub fn read_file(path: &Path) -> Result<Key, KeyFileError> {
        let bad = |problem: KeyProblem| KeyFileError { path: path.to_path_buf(), problem };
        if !path.is_absolute() {
            return Err(bad(KeyProblem::NotAbsolute));
        }
        // Open first, then check what was opened: the checks and the read see the same file.
        // Symbolic links are followed (secret stores often install keys as links).
        let mut file = File::open(path).map_err(|e| bad(KeyProblem::Io(e.to_string())))?;
        let meta = file.metadata().map_err(|e| bad(KeyProblem::Io(e.to_string())))?;
        if !meta.is_file() {
            return Err(bad(KeyProblem::NotRegularFile));
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(bad(KeyProblem::TooOpen(mode)));
        }
        // At most 64 hex digits and a newline; one byte more is enough to tell it is too long.
        let mut text = Vec::with_capacity(2 * KEY_BYTES + 2);
        (&mut file)
            .take(2 * KEY_BYTES as u64 + 2)
            .read_to_end(&mut text)
            .map_err(|e| bad(KeyProblem::Io(e.to_string())))?;
        Key::parse_hex(&text).map_err(bad)
    }

    /// The key from the file's content: 64 hex digits, optionally one trailing newline.
    fn parse_hex(text: &[u8]) -> Result<Key, KeyProblem> {
        let digits = text.strip_suffix(b"\n").unwrap_or(text);
        if digits.len() != 2 * KEY_BYTES {
            return Err(KeyProblem::Length(digits.len()));
        }
        let mut key = [0u8; KEY_BYTES];
        for (i, pair) in digits.chunks_exact(2).enumerate() {
            let (Some(hi), Some(lo)) = (hex(pair[0]), hex(pair[1])) else {
                return Err(KeyProblem::NotHex);
            };
            key[i] = hi << 4 | lo;
        }
        if key == [0; KEY_BYTES] {
            return Err(KeyProblem::AllZero);
        }
        Ok(Key(key))
    }
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// A key file that cannot be used: which file, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyFileError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong.
    pub problem: KeyProblem,
}

/// What is wrong with a key file. Messages never quote the file's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyProblem {
    /// The path is relative (it would depend on the daemon's working directory).
    NotAbsolute,
    /// It cannot be opened or read.
    Io(String),
    /// It is not a regular file.
    NotRegularFile,
    /// Its group or others may read or write it (the mode's low 9 bits).
    TooOpen(u32),
    /// Its content is not 64 characters (and an optional newline); the number found.
    Length(usize),
    /// A character is not a hex digit.
    NotHex,
    /// The key is all zeros (a placeholder, not a key).
    AllZero,
}

impl std::fmt::Display for KeyFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = self.path.display();
        match &self.problem {
            KeyProblem::NotAbsolute => {
                write!(f, "sync key file {path}: the path must be absolute")
            }
            KeyProblem::Io(e) => write!(f, "sync key file {path}: {e}; {KEY_FILE_HOWTO}"),
            KeyProblem::NotRegularFile => {
                write!(f, "sync key file {path}: not a regular file; {KEY_FILE_HOWTO}")
            }
            KeyProblem::TooOpen(mode) => write!(
                f,
                "sync key file {path}: its group or other users may read or write it (mode \
                 {mode:04o}): run `chmod 600 {path}` (and consider the key exposed)"
            ),
            KeyProblem::Length(n) => write!(
                f,
                "sync key file {path}: expected 64 hex characters (32 bytes) and an optional \
                 newline, found {n} characters{}; {KEY_FILE_HOWTO}",
                if *n > 2 * KEY_BYTES { " or more" } else { "" }
            ),
            KeyProblem::NotHex => write!(
                f,
                "sync key file {path}: expected 64 hex characters (0-9, a-f), found another \
                 character; {KEY_FILE_HOWTO}"
            ),
            KeyProblem::AllZero => write!(
                f,
                "sync key file {path}: the key is all zeros, a placeholder; {KEY_FILE_HOWTO}"
            ),
        }
    }
}

impl std::error::Error for KeyFileError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::Encoder;
    use std::os::unix::fs::OpenOptionsExt;

    /// A scratch directory removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> TempDir {
            static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = std::env::temp_dir()
                .join(format!("spillway-sync-key-{tag}-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }

        fn file(&self, name: &str, content: &[u8], mode: u32) -> PathBuf {
            let p = self.0.join(name);
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&p)
                .unwrap();
            std::io::Write::write_all(&mut f, content).unwrap();
            // Set the mode explicitly: the umask must not decide the test.
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            p
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    fn expected() -> Key {
        Key::from_bytes(std::array::from_fn(|i| i as u8))
    }

    #[test]
    fn a_good_file_is_read_with_or_without_a_newline() {
        let d = TempDir::new("good");
        let with = d.file("with", format!("{HEX}\n").as_bytes(), 0o600);
        let without = d.file("without", HEX.as_bytes(), 0o400);
        let upper = d.file("upper", HEX.to_uppercase().as_bytes(), 0o600);
        assert_eq!(Key::read_file(&with), Ok(expected()));
        assert_eq!(Key::read_file(&without), Ok(expected()));
        assert_eq!(Key::read_file(&upper), Ok(expected()));
    }

    #[test]
    fn group_or_other_access_is_refused() {
        let d = TempDir::new("mode");
        for (i, mode) in
            [0o640, 0o644, 0o604, 0o660, 0o620, 0o602, 0o610, 0o601].into_iter().enumerate()
        {
            let p = d.file(&format!("k{i}"), HEX.as_bytes(), mode);
            let e = Key::read_file(&p).unwrap_err();
            assert_eq!(e.problem, KeyProblem::TooOpen(mode), "mode {mode:o}");
            let msg = e.to_string();
            assert!(msg.contains(&p.display().to_string()) && msg.contains("chmod 600"), "{msg}");
        }
    }

    #[test]
    fn bad_content_is_refused_without_quoting_it() {
        let d = TempDir::new("content");
        let secretish = "ab".repeat(31) + "zz";
        let cases: [(&str, Vec<u8>, KeyProblem); 7] = [
            ("short", HEX[..62].into(), KeyProblem::Length(62)),
            ("long", format!("{HEX}00").into_bytes(), KeyProblem::Length(66)),
            ("two_newlines", format!("{HEX}\n\n").into_bytes(), KeyProblem::Length(65)),
            ("crlf", format!("{HEX}\r\n").into_bytes(), KeyProblem::Length(65)),
            ("not_hex", secretish.clone().into_bytes(), KeyProblem::NotHex),
            ("zero", "0".repeat(64).into_bytes(), KeyProblem::AllZero),
            ("empty", Vec::new(), KeyProblem::Length(0)),
        ];
        for (name, content, problem) in cases {
            let p = d.file(name, &content, 0o600);
            let e = Key::read_file(&p).unwrap_err();
            assert_eq!(e.problem, problem, "{name}");
            let msg = e.to_string();
            assert!(msg.contains(&p.display().to_string()), "{msg}");
            assert!(!msg.contains(&secretish) && !msg.contains(HEX), "{msg}");
        }
        // A huge file is not read whole.
        let big = d.file("big", &vec![b'a'; 1 << 20], 0o600);
        assert_eq!(Key::read_file(&big).unwrap_err().problem, KeyProblem::Length(66));
    }

    #[test]
    fn path_and_file_type_are_checked() {
        let d = TempDir::new("path");
        assert_eq!(
            Key::read_file(Path::new("relative/key")).unwrap_err().problem,
            KeyProblem::NotAbsolute
        );
        assert!(matches!(
            Key::read_file(&d.0.join("missing")).unwrap_err().problem,
            KeyProblem::Io(_)
        ));
        // A directory opens on Linux but is not a regular file.
        let sub = d.0.join("dir");
        std::fs::create_dir(&sub).unwrap();
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(Key::read_file(&sub).unwrap_err().problem, KeyProblem::NotRegularFile);
        // A link to a good file is followed.
        let target = d.file("target", HEX.as_bytes(), 0o600);
        let link = d.0.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(Key::read_file(&link), Ok(expected()));
    }

    #[test]
    fn debug_never_shows_the_key() {
        let k = Key::from_bytes([0xab; KEY_BYTES]);
        assert_eq!(format!("{k:?}"), "Key(<redacted>)");
        assert_eq!(format!("{:#?}", Encoder::new(&k, 1, 1)).matches("ab").count(), 0);
    }
}
