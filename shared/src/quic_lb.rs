//! QUIC-LB: the server ID a QUIC server put in the connection IDs it issues, read back from a
//! packet's destination connection ID (draft-ietf-quic-load-balancers-21, "Server ID Encoding
//! in Connection IDs" and "Load Balancer Actions").
//!
//! A connection ID is `first octet || plaintext block`, where the first octet's three most
//! significant bits name the configuration (0 to 6; `0b111` is unroutable) and the block is
//! `server ID || nonce`, either in the clear or encrypted under the configuration's AES-128
//! key:
//! - **plaintext**: no key; the server ID is the octets after the first;
//! - **single pass**: a key, and server ID + nonce is exactly 16 octets: the block is one AES
//!   block, decrypted once;
//! - **four pass**: a key, any other length: a four-round Feistel network with AES as its round
//!   function. The balancer needs three rounds when the server ID fits in the left half (the
//!   nonce is at least as long as the server ID), four otherwise.
//!
//! Two misprints of the draft are corrected here: the balancer's third round clears the first
//! four bits of `right_1` (the draft's pseudocode says `left_1`), and the worked example's
//! fourth AES output starts `0xb334357c`.
//!
//! Decoding is stateless and cheap enough for a conntrack miss: at most three or four AES
//! block encryptions (the `aes` crate uses AES-NI where the CPU has it), no allocation.

use aes::cipher::{BlockDecrypt, BlockEncrypt, KeyInit};
use aes::Aes128;

/// Configuration ids are three bits; `0b111` marks an unroutable connection ID.
pub const UNROUTABLE_CONFIG: u8 = 0b111;
/// At most seven configurations (ids 0 to 6) at once.
pub const MAX_CONFIGS: usize = 7;
/// The server ID is at least one octet.
pub const MIN_SERVER_ID_LEN: u8 = 1;
/// The nonce is at least four octets.
pub const MIN_NONCE_LEN: u8 = 4;
/// Server ID + nonce at most 19 octets: QUIC version 1 limits connection IDs to 20 octets.
pub const MAX_PLAINTEXT_LEN: u8 = 19;
/// The longest server ID the bounds allow (19 - 4).
pub const MAX_SERVER_ID_LEN: u8 = MAX_PLAINTEXT_LEN - MIN_NONCE_LEN;

/// How a configuration's connection IDs are encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// No key: the server ID in the clear.
    Plaintext,
    /// A key and a 16-octet block: one AES decryption.
    SinglePass,
    /// A key and any other length: the four-pass Feistel construction.
    FourPass,
}

impl Mode {
    /// The name used in the API, logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Plaintext => "plaintext",
            Mode::SinglePass => "single_pass",
            Mode::FourPass => "four_pass",
        }
    }
}

/// A configuration the bounds refuse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The id is not 0 to 6.
    #[error("config id {0} is out of range: 0 to 6 (7, 0b111, marks unroutable connection IDs)")]
    Id(u8),
    /// The server ID is shorter than one octet or too long.
    #[error("server_id_len {0} is out of range: {MIN_SERVER_ID_LEN} to {MAX_SERVER_ID_LEN}")]
    ServerIdLen(u8),
    /// The nonce is shorter than four octets.
    #[error("nonce_len {0} is out of range: at least {MIN_NONCE_LEN}")]
    NonceLen(u8),
    /// Server ID + nonce is longer than 19 octets.
    #[error("server_id_len + nonce_len is {0}: at most {MAX_PLAINTEXT_LEN} (a QUIC v1 connection ID is at most 20 octets)")]
    TooLong(u8),
}

/// A server ID: up to 15 octets, compared with its length.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerId {
    len: u8,
    bytes: [u8; MAX_SERVER_ID_LEN as usize],
}

impl ServerId {
    /// The server ID of these octets; `None` if empty or longer than 15 octets.
    pub fn new(octets: &[u8]) -> Option<ServerId> {
        if octets.is_empty() || octets.len() > MAX_SERVER_ID_LEN as usize {
            return None;
        }
        let mut bytes = [0; MAX_SERVER_ID_LEN as usize];
        bytes[..octets.len()].copy_from_slice(octets);
        Some(ServerId { len: octets.len() as u8, bytes })
    }

    /// Its octets.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// Parse hex (`"c4605e"`, an optional `0x`); `None` for anything else.
    pub fn from_hex(s: &str) -> Option<ServerId> {
        ServerId::new(&hex_octets(s)?)
    }

    /// Lower-case hex.
    pub fn to_hex(&self) -> String {
        self.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Octets written in hex (`"c4605e"`, an optional `0x`), as server IDs and connection IDs are
/// given; `None` for anything else.
pub fn hex_octets(s: &str) -> Option<Vec<u8>> {
    let s = s.strip_prefix("0x").unwrap_or(s);
    if s.len() % 2 != 0 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok()).collect()
}

impl std::fmt::Debug for ServerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServerId({})", self.to_hex())
    }
}

impl std::fmt::Display for ServerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// Why a destination connection ID gives no server ID: the packet falls back to the
/// service's usual choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unroutable {
    /// The first octet's config rotation bits are `0b111`.
    Reserved,
    /// No configuration has the id in the first octet.
    UnknownConfig(u8),
    /// The packet ends before the configuration's connection ID does.
    TooShort,
}

impl Unroutable {
    /// The name used in the API, logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Unroutable::Reserved => "unroutable_config",
            Unroutable::UnknownConfig(_) => "unknown_config",
            Unroutable::TooShort => "too_short",
        }
    }
}

/// One QUIC-LB configuration: its id, lengths and optional key (its AES key schedule is
/// expanded once, here).
#[derive(Clone)]
pub struct Config {
    id: u8,
    server_id_len: u8,
    nonce_len: u8,
    key: Option<[u8; 16]>,
    cipher: Option<Aes128>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key stays out of logs; its id tells two keys apart (and enters the model's
        // fingerprint, so that instances with different keys do not compare equal).
        f.debug_struct("Config")
            .field("id", &self.id)
            .field("server_id_len", &self.server_id_len)
            .field("nonce_len", &self.nonce_len)
            .field("mode", &self.mode())
            .field("key_id", &self.key_id())
            .finish()
    }
}

impl PartialEq for Config {
    fn eq(&self, o: &Config) -> bool {
        (self.id, self.server_id_len, self.nonce_len, self.key)
            == (o.id, o.server_id_len, o.nonce_len, o.key)
    }
}

impl Eq for Config {}

impl Config {
    /// A configuration within the draft's bounds.
    pub fn new(
        id: u8,
        server_id_len: u8,
        nonce_len: u8,
        key: Option<[u8; 16]>,
    ) -> Result<Config, ConfigError> {
        if id >= UNROUTABLE_CONFIG {
            return Err(ConfigError::Id(id));
        }
        if !(MIN_SERVER_ID_LEN..=MAX_SERVER_ID_LEN).contains(&server_id_len) {
            return Err(ConfigError::ServerIdLen(server_id_len));
        }
        if nonce_len < MIN_NONCE_LEN {
            return Err(ConfigError::NonceLen(nonce_len));
        }
        let total = server_id_len.saturating_add(nonce_len);
        if total > MAX_PLAINTEXT_LEN {
            return Err(ConfigError::TooLong(total));
        }
        let cipher = key.map(|k| Aes128::new(&k.into()));
        Ok(Config { id, server_id_len, nonce_len, key, cipher })
    }

    /// Its id (0 to 6), the first octet's three most significant bits.
    pub fn id(&self) -> u8 {
        self.id
    }

    /// Server ID length in octets.
    pub fn server_id_len(&self) -> u8 {
        self.server_id_len
    }

    /// Nonce length in octets.
    pub fn nonce_len(&self) -> u8 {
        self.nonce_len
    }

    /// Its key, if any.
    pub fn key(&self) -> Option<&[u8; 16]> {
        self.key.as_ref()
    }

    /// The connection ID's length: the first octet, the server ID and the nonce (a server may
    /// append octets of its own; they are not read).
    pub fn cid_len(&self) -> usize {
        1 + self.plaintext_len()
    }

    fn plaintext_len(&self) -> usize {
        usize::from(self.server_id_len) + usize::from(self.nonce_len)
    }

    /// Its key's id, if it has a key: the first four octets of the key's AES encryption of
    /// a block no decoding encrypts (every octet 0xff but a last 0: passes are 1 to 4), a
    /// pseudo-random function of the key that tells nothing of it.
    pub fn key_id(&self) -> Option<u32> {
        let aes = self.cipher.as_ref()?;
        let mut b = [0xffu8; 16];
        b[15] = 0;
        let mut b = b.into();
        aes.encrypt_block(&mut b);
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// How its connection IDs are encoded.
    pub fn mode(&self) -> Mode {
        match self.cipher {
            None => Mode::Plaintext,
            Some(_) if self.plaintext_len() == 16 => Mode::SinglePass,
            Some(_) => Mode::FourPass,
        }
    }

    /// The server ID in `cid` (from its first octet on; only this configuration's length is
    /// read, whatever follows). The caller has checked that the first octet names this
    /// configuration.
    pub fn server_id(&self, cid: &[u8]) -> Result<ServerId, Unroutable> {
        let n = self.plaintext_len();
        let block = cid.get(1..1 + n).ok_or(Unroutable::TooShort)?;
        let sid = usize::from(self.server_id_len);
        let mut out = ServerId { len: self.server_id_len, bytes: [0; MAX_SERVER_ID_LEN as usize] };
        match &self.cipher {
            None => out.bytes[..sid].copy_from_slice(&block[..sid]),
            Some(aes) if n == 16 => {
                let mut b = [0u8; 16];
                b.copy_from_slice(block);
                let mut b = b.into();
                aes.decrypt_block(&mut b);
                out.bytes[..sid].copy_from_slice(&b[..sid]);
            }
            Some(aes) => four_pass_server_id(aes, block, sid, &mut out.bytes),
        }
        Ok(out)
    }
}

/// `expand(length, pass, half)`: the half in the most significant octets, zeros, then the
/// plaintext length and the pass number in the last two octets.
fn expand(len: usize, pass: u8, half: &[u8]) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..half.len()].copy_from_slice(half);
    b[14] = len as u8;
    b[15] = pass;
    b
}

/// `target ^= truncate(AES(expand(len, pass, input)), half_len)`.
fn round(aes: &Aes128, len: usize, pass: u8, input: &[u8], target: &mut [u8]) {
    let mut b = expand(len, pass, input).into();
    aes.encrypt_block(&mut b);
    for (t, k) in target.iter_mut().zip(b.iter()) {
        *t ^= k;
    }
}

/// The balancer's side of the four-pass construction: three rounds when the server ID lies
/// in the left half, four otherwise; writes the server ID's `sid` octets to `out`.
fn four_pass_server_id(aes: &Aes128, ct: &[u8], sid: usize, out: &mut [u8]) {
    let len = ct.len();
    let half = len.div_ceil(2);
    let odd = len % 2 == 1;
    // left_2 is the first half (its last four bits cleared when odd), right_2 the last half
    // (its first four bits cleared when odd): with an odd length they share the middle octet.
    let mut left = [0u8; 10];
    let mut right = [0u8; 10];
    let (left, right) = (&mut left[..half], &mut right[..half]);
    left.copy_from_slice(&ct[..half]);
    right.copy_from_slice(&ct[len - half..]);
    let clear_last = |h: &mut [u8]| {
        if odd {
            h[half - 1] &= 0xf0;
        }
    };
    let clear_first = |h: &mut [u8]| {
        if odd {
            h[0] &= 0x0f;
        }
    };
    clear_last(left);
    clear_first(right);
    round(aes, len, 4, right, left); // left_1
    clear_last(left);
    round(aes, len, 3, left, right); // right_1
    clear_first(right);
    round(aes, len, 2, right, left); // left_0
    clear_last(left);
    if sid <= len / 2 {
        out[..sid].copy_from_slice(&left[..sid]);
        return;
    }
    round(aes, len, 1, left, right); // right_0
    clear_first(right);
    // left_0 || right_0, the middle octet merged back when odd.
    let mut plain = [0u8; MAX_PLAINTEXT_LEN as usize];
    plain[..half].copy_from_slice(left);
    if odd {
        plain[half - 1] |= right[0];
        plain[half..len].copy_from_slice(&right[1..]);
    } else {
        plain[half..len].copy_from_slice(right);
    }
    out[..sid].copy_from_slice(&plain[..sid]);
}

/// A service's configurations, indexed by the id in the first octet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Configs {
    by_id: [Option<Config>; MAX_CONFIGS],
}

impl Configs {
    /// No configuration: every connection ID is unroutable.
    pub fn new() -> Configs {
        Configs::default()
    }

    /// Add `config`; a configuration with its id is replaced and returned.
    pub fn insert(&mut self, config: Config) -> Option<Config> {
        let id = usize::from(config.id);
        self.by_id[id].replace(config)
    }

    /// The configuration with this id.
    pub fn get(&self, id: u8) -> Option<&Config> {
        self.by_id.get(usize::from(id)).and_then(Option::as_ref)
    }

    /// Every configuration, by id.
    pub fn iter(&self) -> impl Iterator<Item = &Config> {
        self.by_id.iter().flatten()
    }

    /// None configured.
    pub fn is_empty(&self) -> bool {
        self.by_id.iter().all(Option::is_none)
    }

    /// The configuration a destination connection ID names and the server ID in it, or why
    /// there is none.
    pub fn decode(&self, dcid: &[u8]) -> Result<(u8, ServerId), Unroutable> {
        let first = *dcid.first().ok_or(Unroutable::TooShort)?;
        let id = first >> 5;
        if id == UNROUTABLE_CONFIG {
            return Err(Unroutable::Reserved);
        }
        let config = self.get(id).ok_or(Unroutable::UnknownConfig(id))?;
        Ok((id, config.server_id(dcid)?))
    }
}

/// Why a QUIC packet that missed the connection table is not routed by its connection ID:
/// it goes by the service's usual choice on its 4-tuple instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fallback {
    /// The connection ID gives no server ID ([`Unroutable`]).
    Unroutable(Unroutable),
    /// The server ID names no backend of the service under its configuration.
    UnknownServerId,
}

impl Fallback {
    /// The name used in the API, logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Fallback::Unroutable(u) => u.as_str(),
            Fallback::UnknownServerId => "unknown_server_id",
        }
    }
}

/// What [`Routes::route`] finds: the backend a connection ID names, or why none, with the
/// configuration and server ID when the ID decoded that far.
pub type Route = Result<Routed, (Option<(u8, ServerId)>, Fallback)>;

/// What decoding a packet's destination connection ID found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Routed {
    /// The configuration (the first octet's config rotation bits).
    pub config: u8,
    /// The server ID in it.
    pub server_id: ServerId,
    /// The backend slot that server ID names.
    pub slot: u16,
}

/// A service's QUIC-LB routing, as a snapshot holds it: its configurations and, per
/// configuration, the backend slot each server ID names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Routes {
    configs: Configs,
    slots: [hashbrown::HashMap<ServerId, u16>; MAX_CONFIGS],
}

impl Routes {
    /// Routes over `configs`, with no server ID yet.
    pub fn new(configs: Configs) -> Routes {
        Routes { configs, slots: Default::default() }
    }

    /// The configurations.
    pub fn configs(&self) -> &Configs {
        &self.configs
    }

    /// Route `server_id` under configuration `config` to `slot`, unless it already names a
    /// slot (the first assignment stays) or the configuration does not exist or has another
    /// server ID length. True when added.
    pub fn add(&mut self, config: u8, server_id: ServerId, slot: u16) -> bool {
        let Some(c) = self.configs.get(config) else { return false };
        if server_id.as_bytes().len() != usize::from(c.server_id_len()) {
            return false;
        }
        let map = &mut self.slots[usize::from(config)];
        if map.contains_key(&server_id) {
            return false;
        }
        map.insert(server_id, slot);
        true
    }

    /// The number of server IDs routed under `config`.
    pub fn len(&self, config: u8) -> usize {
        self.slots.get(usize::from(config)).map_or(0, |m| m.len())
    }

    /// Decode `dcid` (a destination connection ID from its first octet; octets after it are
    /// not read) and find the backend slot its server ID names; or why not, with what was
    /// decoded.
    pub fn route(&self, dcid: &[u8]) -> Route {
        let (config, server_id) =
            self.configs.decode(dcid).map_err(|u| (None, Fallback::Unroutable(u)))?;
        match self.slots[usize::from(config)].get(&server_id) {
            Some(&slot) => Ok(Routed { config, server_id, slot }),
            None => Err((Some((config, server_id)), Fallback::UnknownServerId)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    fn key(s: &str) -> [u8; 16] {
        hex(s).try_into().unwrap()
    }

    fn decode(c: Config, cid: &str) -> String {
        let mut cs = Configs::new();
        cs.insert(c);
        cs.decode(&hex(cid)).unwrap().1.to_hex()
    }

    // The draft's appendix, "Unencrypted CIDs". The second row is read as the notes say:
    // the nonce `03487d970b` and the CID `2a350d28b42003487d970b` (config 1, length 10).
    #[test]
    fn the_drafts_plaintext_vectors() {
        assert_eq!(decode(Config::new(0, 3, 4, None).unwrap(), "07c4605e4504cc4f"), "c4605e");
        assert_eq!(
            decode(Config::new(1, 5, 5, None).unwrap(), "2a350d28b42003487d970b"),
            "350d28b420"
        );
    }

    // The draft's appendix, "Encrypted CIDs", one key: four passes with the early exit
    // (3 + 4 octets), four passes all needed (10 + 5), single pass (8 + 8), and four passes on
    // an even length (9 + 9, the fourth row read with first octet 0x72: config 3).
    #[test]
    fn the_drafts_encrypted_vectors() {
        let k = Some(key("8f95f09245765f80256934e50c66207f"));
        let c0 = Config::new(0, 3, 4, k).unwrap();
        assert_eq!(c0.mode(), Mode::FourPass);
        assert_eq!(decode(c0, "0720b1d07b359d3c"), "ed793a");
        let c1 = Config::new(1, 10, 5, k).unwrap();
        assert_eq!(decode(c1, "2fcc381bc74cb4fbad2823a3d1f8fed2"), "ed793a51d49b8f5fab65");
        let c2 = Config::new(2, 8, 8, k).unwrap();
        assert_eq!(c2.mode(), Mode::SinglePass);
        assert_eq!(decode(c2, "504dd2d05a7b0de9b2b9907afb5ecf8cc3"), "ed793a51d49b8f5f");
        let c3 = Config::new(3, 9, 9, k).unwrap();
        assert_eq!(decode(c3, "725779c9cc86beb3a3a4a3ca96fce4bfe0cdbc"), "ed793a51d49b8f5fab");
    }

    // The draft's worked four-pass example (section "Encryption Example"), read back.
    #[test]
    fn the_drafts_worked_example() {
        let c = Config::new(0, 3, 4, Some(key("fdf726a9893ec05c0632d3956680baf0"))).unwrap();
        assert_eq!(decode(c, "0767947d29be054a"), "31441a");
    }

    #[test]
    fn unroutable_ids_say_why() {
        let mut cs = Configs::new();
        cs.insert(Config::new(0, 3, 4, None).unwrap());
        assert_eq!(cs.decode(&hex("e7c4605e4504cc4f")), Err(Unroutable::Reserved));
        assert_eq!(cs.decode(&hex("27c4605e4504cc4f")), Err(Unroutable::UnknownConfig(1)));
        assert_eq!(cs.decode(&hex("07c4605e4504cc")), Err(Unroutable::TooShort));
        assert_eq!(cs.decode(&[]), Err(Unroutable::TooShort));
        // Octets the server appends are not read.
        assert_eq!(cs.decode(&hex("07c4605e4504cc4fffff")).unwrap().1.to_hex(), "c4605e");
    }

    #[test]
    fn the_bounds_are_the_drafts() {
        assert_eq!(Config::new(7, 3, 4, None), Err(ConfigError::Id(7)));
        assert_eq!(Config::new(0, 0, 4, None), Err(ConfigError::ServerIdLen(0)));
        assert_eq!(Config::new(0, 16, 4, None), Err(ConfigError::ServerIdLen(16)));
        assert_eq!(Config::new(0, 1, 3, None), Err(ConfigError::NonceLen(3)));
        assert_eq!(Config::new(0, 10, 10, None), Err(ConfigError::TooLong(20)));
        assert!(Config::new(6, 15, 4, None).is_ok());
        assert!(Config::new(0, 1, 18, Some([0; 16])).is_ok());
    }

    #[test]
    fn routes_name_slots_by_configuration_and_server_id() {
        let mut cs = Configs::new();
        cs.insert(Config::new(0, 3, 4, None).unwrap());
        cs.insert(Config::new(1, 5, 5, None).unwrap());
        let mut r = Routes::new(cs);
        let sid = ServerId::from_hex("c4605e").unwrap();
        assert!(r.add(0, sid, 7));
        assert!(!r.add(0, sid, 8), "the first assignment stays");
        assert!(!r.add(1, sid, 8), "a 3-octet ID under a 5-octet configuration");
        assert!(!r.add(2, sid, 8), "no configuration 2");
        assert!(r.add(1, ServerId::from_hex("350d28b420").unwrap(), 9));
        assert_eq!(
            r.route(&hex("07c4605e4504cc4f")).unwrap(),
            Routed { config: 0, server_id: sid, slot: 7 }
        );
        assert_eq!(r.route(&hex("2a350d28b42003487d970b")).unwrap().slot, 9);
        let other = ServerId::from_hex("c4605f").unwrap();
        assert_eq!(
            r.route(&hex("07c4605f4504cc4f")),
            Err((Some((0, other)), Fallback::UnknownServerId))
        );
        assert_eq!(
            r.route(&hex("e7c4605e4504cc4f")),
            Err((None, Fallback::Unroutable(Unroutable::Reserved)))
        );
        assert_eq!(r.len(0), 1);
    }

    #[test]
    fn key_ids_tell_keys_apart_and_keys_stay_out_of_debug() {
        let a = Config::new(0, 3, 4, Some([1; 16])).unwrap();
        let b = Config::new(0, 3, 4, Some([2; 16])).unwrap();
        assert_ne!(a.key_id(), b.key_id());
        assert_eq!(a.key_id(), Config::new(1, 8, 8, Some([1; 16])).unwrap().key_id());
        assert_eq!(Config::new(0, 3, 4, None).unwrap().key_id(), None);
        let text = format!("{a:?}");
        assert!(text.contains("key_id") && !text.contains("[1, 1"), "{text}");
    }

    #[test]
    fn server_ids_parse_from_hex() {
        assert_eq!(ServerId::from_hex("0xC4605e").unwrap().as_bytes(), &[0xc4, 0x60, 0x5e]);
        assert!(ServerId::from_hex("c4605").is_none());
        assert!(ServerId::from_hex("").is_none());
        assert!(ServerId::from_hex("zz").is_none());
        assert!(ServerId::from_hex(&"00".repeat(16)).is_none());
    }
}
