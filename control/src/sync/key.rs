//! The fleet's shared keys and the file they are read from.
//!
//! The key file holds one key, or two during a rotation: one per line, 64 hex characters each.
//! The first is the key this instance seals with; a second is also accepted when opening
//! (docs/scale-out.md, "Rotating the key"). A reload reads the file again.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{KeyInit, XChaCha20Poly1305, XNonce};

/// Bytes of a shared key.
pub const KEY_BYTES: usize = 32;

/// How to make a key file, for the error messages.
pub const KEY_FILE_HOWTO: &str =
    "make one with `head -c 32 /dev/urandom | xxd -p -c 64 > FILE; chmod 600 FILE` and give \
     every instance of the fleet the same file";

/// The nonce of a key's id (never a datagram's: those start with a non-zero sender id).
const KEY_ID_NONCE: [u8; 24] = *b"\0spillway sync key id\0\0\0";

/// One 32-byte key. Its `Debug` never shows it.
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

    /// The key's id, carried in every datagram's header so that a receiver holding two keys
    /// opens it with the right one: the first four bytes of XChaCha20's keystream under the
    /// key and a fixed nonce no datagram uses (a pseudo-random function of the key: it tells
    /// nothing of the key, and two keys' ids collide with a chance of one in 2^32).
    pub fn id(&self) -> u32 {
        let mut block = [0u8; 4];
        let nonce = XNonce::from(KEY_ID_NONCE);
        // Sealing four bytes cannot fail (far below the AEAD's length limit).
        let _tag = self.cipher().encrypt_in_place_detached(&nonce, b"", &mut block);
        u32::from_be_bytes(block)
    }

    /// The key from 64 hex digits.
    fn parse_hex(digits: &[u8]) -> Result<Key, KeyProblem> {
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

/// The keys of a key file: the one to seal with, and one more to open with during a rotation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRing {
    /// The first line: sealing and opening.
    pub current: Key,
    /// The second line, if any: opening only.
    pub other: Option<Key>,
}

impl KeyRing {
    /// A ring of one key.
    pub fn one(key: Key) -> KeyRing {
        KeyRing { current: key, other: None }
    }

    /// The key with this id ([`Key::id`]), if the ring holds it.
    pub fn by_id(&self, id: u32) -> Option<&Key> {
        std::iter::once(&self.current).chain(&self.other).find(|k| k.id() == id)
    }

    /// Read the key file at `path`: see [`KeyFileError`] for what is checked.
    pub fn read_file(path: &Path) -> Result<KeyRing, KeyFileError> {
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
        // At most two lines of 64 hex digits; one byte more is enough to tell it is too long.
        let most = 2 * (2 * KEY_BYTES + 1);
        let mut text = Vec::with_capacity(most + 1);
        (&mut file)
            .take(most as u64 + 1)
            .read_to_end(&mut text)
            .map_err(|e| bad(KeyProblem::Io(e.to_string())))?;
        KeyRing::parse(&text).map_err(bad)
    }

    /// The ring from the file's content: one or two lines of 64 hex digits, each ended by a
    /// newline (the last one's optional).
    fn parse(text: &[u8]) -> Result<KeyRing, KeyProblem> {
        let body = text.strip_suffix(b"\n").unwrap_or(text);
        let mut lines = body.split(|&b| b == b'\n');
        let current = Key::parse_hex(lines.next().unwrap_or_default())?;
        let other = match lines.next() {
            None => None,
            Some(l) => Some(Key::parse_hex(l)?),
        };
        if lines.next().is_some() {
            return Err(KeyProblem::TooManyKeys);
        }
        if other.as_ref() == Some(&current) {
            return Err(KeyProblem::SameKeyTwice);
        }
        Ok(KeyRing { current, other })
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
    /// A line is not 64 characters; the number found.
    Length(usize),
    /// A character is not a hex digit.
    NotHex,
    /// A key is all zeros (a placeholder, not a key).
    AllZero,
    /// More than two lines.
    TooManyKeys,
    /// The second key is the first again.
    SameKeyTwice,
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
                "sync key file {path}: expected a line of 64 hex characters (32 bytes), or two \
                 during a key rotation, found a line of {n} characters{}; {KEY_FILE_HOWTO}",
                if *n > 2 * KEY_BYTES { " or more" } else { "" }
            ),
            KeyProblem::NotHex => write!(
                f,
                "sync key file {path}: expected 64 hex characters (0-9, a-f) per line, found \
                 another character; {KEY_FILE_HOWTO}"
            ),
            KeyProblem::AllZero => write!(
                f,
                "sync key file {path}: a key is all zeros, a placeholder; {KEY_FILE_HOWTO}"
            ),
            KeyProblem::TooManyKeys => write!(
                f,
                "sync key file {path}: more than two lines: the file holds the key to seal with \
                 and, during a rotation, one more to accept (docs/scale-out.md)"
            ),
            KeyProblem::SameKeyTwice => write!(
                f,
                "sync key file {path}: its second line is the first key again: remove it, or \
                 put the other key of the rotation there"
            ),
        }
    }
}

impl std::error::Error for KeyFileError {}

#[cfg(test)]
mod tests {
    use super::*;
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
        assert_eq!(KeyRing::read_file(&with), Ok(KeyRing::one(expected())));
        assert_eq!(KeyRing::read_file(&without), Ok(KeyRing::one(expected())));
        assert_eq!(KeyRing::read_file(&upper), Ok(KeyRing::one(expected())));
    }

    #[test]
    fn group_or_other_access_is_refused() {
        let d = TempDir::new("mode");
        for (i, mode) in
            [0o640, 0o644, 0o604, 0o660, 0o620, 0o602, 0o610, 0o601].into_iter().enumerate()
        {
            let p = d.file(&format!("k{i}"), HEX.as_bytes(), mode);
            let e = KeyRing::read_file(&p).unwrap_err();
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
            ("two_newlines", format!("{HEX}\n\n").into_bytes(), KeyProblem::Length(0)),
            ("crlf", format!("{HEX}\r\n").into_bytes(), KeyProblem::Length(65)),
            ("not_hex", secretish.clone().into_bytes(), KeyProblem::NotHex),
            ("zero", "0".repeat(64).into_bytes(), KeyProblem::AllZero),
            ("empty", Vec::new(), KeyProblem::Length(0)),
        ];
        for (name, content, problem) in cases {
            let p = d.file(name, &content, 0o600);
            let e = KeyRing::read_file(&p).unwrap_err();
            assert_eq!(e.problem, problem, "{name}");
            let msg = e.to_string();
            assert!(msg.contains(&p.display().to_string()), "{msg}");
            assert!(!msg.contains(&secretish) && !msg.contains(HEX), "{msg}");
        }
        // A huge file is not read whole.
        let big = d.file("big", &vec![b'a'; 1 << 20], 0o600);
        assert_eq!(KeyRing::read_file(&big).unwrap_err().problem, KeyProblem::Length(131));
    }

    #[test]
    fn a_rotation_file_holds_the_key_to_seal_with_then_one_more() {
        let d = TempDir::new("ring");
        let other = "ff".repeat(32);
        let two = d.file("two", format!("{HEX}\n{other}\n").as_bytes(), 0o600);
        let ring = KeyRing::read_file(&two).unwrap();
        assert_eq!(ring.current, expected());
        assert_eq!(ring.other, Some(Key::from_bytes([0xff; KEY_BYTES])));
        // Either key is found by its id; an unknown id finds none.
        assert_eq!(ring.by_id(expected().id()), Some(&expected()));
        assert_eq!(ring.by_id(Key::from_bytes([0xff; 32]).id()), ring.other.as_ref());
        assert_eq!(ring.by_id(Key::from_bytes([7; 32]).id()), None);
        let three = d.file("three", format!("{HEX}\n{other}\n{HEX}\n").as_bytes(), 0o600);
        assert_eq!(KeyRing::read_file(&three).unwrap_err().problem, KeyProblem::TooManyKeys);
        let same = d.file("same", format!("{HEX}\n{HEX}\n").as_bytes(), 0o600);
        assert_eq!(KeyRing::read_file(&same).unwrap_err().problem, KeyProblem::SameKeyTwice);
        let bad = d.file("bad", format!("{HEX}\n{}\n", &other[..10]).as_bytes(), 0o600);
        assert_eq!(KeyRing::read_file(&bad).unwrap_err().problem, KeyProblem::Length(10));
    }

    #[test]
    fn key_ids_differ_between_keys_and_are_stable() {
        let a = Key::from_bytes([1; 32]);
        assert_eq!(a.id(), a.id());
        assert_ne!(a.id(), Key::from_bytes([2; 32]).id());
    }

    #[test]
    fn path_and_file_type_are_checked() {
        let d = TempDir::new("path");
        assert_eq!(
            KeyRing::read_file(Path::new("relative/key")).unwrap_err().problem,
            KeyProblem::NotAbsolute
        );
        assert!(matches!(
            KeyRing::read_file(&d.0.join("missing")).unwrap_err().problem,
            KeyProblem::Io(_)
        ));
        // A directory opens on Linux but is not a regular file.
        let sub = d.0.join("dir");
        std::fs::create_dir(&sub).unwrap();
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(KeyRing::read_file(&sub).unwrap_err().problem, KeyProblem::NotRegularFile);
        // A link to a good file is followed.
        let target = d.file("target", HEX.as_bytes(), 0o600);
        let link = d.0.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(KeyRing::read_file(&link), Ok(KeyRing::one(expected())));
    }

    #[test]
    fn debug_never_shows_the_key() {
        let k = Key::from_bytes([0xab; KEY_BYTES]);
        assert_eq!(format!("{k:?}"), "Key(<redacted>)");
        let ring = KeyRing { current: k.clone(), other: Some(k) };
        assert_eq!(format!("{ring:#?}").matches("ab").count(), 0);
    }
}
