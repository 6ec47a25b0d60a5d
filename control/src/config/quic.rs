//! `backend_service.quic_lb:` (docs/quic.md; QL-1): the QUIC-LB configurations a service's
//! servers encode their server IDs under, and each backend's server ID per configuration.
//!
//! Validation ([`check`]) judges the values alone. The key files are read by [`read_keys`]
//! when a file is loaded ([`super::load`]: every start and every reload, so that a rotation
//! is a reload), checked like the fleet-sync key file (absolute, a regular file, no access for
//! group or others) and refused with the field's position when they are not fit.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde::Deserialize;
use spillway_core::model::Endpoint;
use spillway_core::quic_lb::{hex_octets, Config as QuicConfig, ServerId, MAX_CONFIGS};

use super::compile::parse_endpoint;
use super::{BackendServiceConfig, Config, FieldError, QuicKeys};

/// `quic_lb:`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuicLbConfig {
    /// The configurations, at most seven, with distinct ids.
    pub configs: Vec<QuicLbConfigEntry>,
    /// Which backend issues which server ID under which configuration.
    #[serde(default)]
    pub server_ids: Vec<QuicServerIdConfig>,
}

/// One item of `quic_lb.configs`. Numbers are kept as written so that validation can quote
/// a bad one with its range.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuicLbConfigEntry {
    /// The config id, 0..=6: the three config rotation bits of the connection IDs' first
    /// octet (7 marks unroutable IDs).
    pub id: i64,
    /// Octets of server ID, 1..=15.
    pub server_id_length: i64,
    /// Octets of nonce, at least 4; with the server ID at most 19.
    pub nonce_length: i64,
    /// The AES-128 key's file (absolute; 32 hex digits), for encrypted connection IDs;
    /// plaintext IDs without it.
    #[serde(default)]
    pub key_file: Option<String>,
}

/// One item of `quic_lb.server_ids`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuicServerIdConfig {
    /// One of the service's endpoints, as written in its group.
    pub endpoint: String,
    /// The configuration's id.
    pub config: i64,
    /// The server ID, hex, exactly the configuration's `server_id_length` octets.
    pub server_id: String,
}

/// The problems of one service's `quic_lb` (at `path`, `...backend_service.quic_lb`).
pub(super) fn check(q: &QuicLbConfig, path: &str, b: &BackendServiceConfig) -> Vec<FieldError> {
    let mut out = Vec::new();
    let mut err = |field: String, message: String| out.push(FieldError::new(field, message));
    if q.configs.is_empty() {
        err(format!("{path}.configs"), "at least one configuration is needed".into());
    }
    if q.configs.len() > MAX_CONFIGS {
        err(
            format!("{path}.configs"),
            format!(
                "{} configurations: at most {MAX_CONFIGS} (the config rotation bits name 0 to 6)",
                q.configs.len()
            ),
        );
    }
    // Valid configurations by id, for the server IDs below.
    let mut lengths: HashMap<i64, u8> = HashMap::new();
    let mut seen: HashMap<i64, usize> = HashMap::new();
    for (i, c) in q.configs.iter().enumerate() {
        let at = format!("{path}.configs[{i}]");
        if let Some(j) = seen.insert(c.id, i) {
            err(format!("{at}.id"), format!("config id {} is already used by configs[{j}]", c.id));
            continue;
        }
        let (Ok(id), Ok(sid), Ok(nonce)) =
            (u8::try_from(c.id), u8::try_from(c.server_id_length), u8::try_from(c.nonce_length))
        else {
            let field = if u8::try_from(c.id).is_err() {
                "id"
            } else if u8::try_from(c.server_id_length).is_err() {
                "server_id_length"
            } else {
                "nonce_length"
            };
            err(format!("{at}.{field}"), "is out of range".into());
            continue;
        };
        if let Err(e) = QuicConfig::new(id, sid, nonce, None) {
            use spillway_core::quic_lb::ConfigError as E;
            let field = match e {
                E::Id(_) => "id",
                E::ServerIdLen(_) => "server_id_length",
                E::NonceLen(_) | E::TooLong(_) => "nonce_length",
            };
            err(format!("{at}.{field}"), e.to_string());
            continue;
        }
        if let Some(k) = &c.key_file {
            if !Path::new(k).is_absolute() {
                err(format!("{at}.key_file"), format!("`{k}` is not an absolute path"));
            }
        }
        lengths.insert(c.id, sid);
    }
    let endpoints: Vec<Endpoint> = b
        .backends
        .iter()
        .flat_map(|g| g.endpoints.iter().filter_map(|e| parse_endpoint(e).ok()))
        .collect();
    let mut by_endpoint: HashMap<(Endpoint, i64), usize> = HashMap::new();
    let mut by_id: HashMap<(i64, ServerId), usize> = HashMap::new();
    for (i, s) in q.server_ids.iter().enumerate() {
        let at = format!("{path}.server_ids[{i}]");
        let endpoint = match parse_endpoint(&s.endpoint) {
            Ok(e) if endpoints.contains(&e) => Some(e),
            Ok(_) => {
                err(
                    format!("{at}.endpoint"),
                    format!("`{}` is not an endpoint of this service's backends", s.endpoint),
                );
                None
            }
            Err(e) => {
                err(format!("{at}.endpoint"), e);
                None
            }
        };
        let Some(&len) = lengths.get(&s.config) else {
            err(format!("{at}.config"), format!("no configuration has id {}", s.config));
            continue;
        };
        let Some(id) = ServerId::from_hex(&s.server_id) else {
            err(
                format!("{at}.server_id"),
                format!("`{}` is not 1 to 15 octets of hex", s.server_id),
            );
            continue;
        };
        if id.as_bytes().len() != usize::from(len) {
            err(
                format!("{at}.server_id"),
                format!(
                    "`{}` is {} octets; configuration {} has server_id_length {len}",
                    s.server_id,
                    id.as_bytes().len(),
                    s.config
                ),
            );
            continue;
        }
        if let Some(j) = by_id.insert((s.config, id), i) {
            err(
                format!("{at}.server_id"),
                format!(
                    "server ID {} of configuration {} is already server_ids[{j}]'s",
                    id.to_hex(),
                    s.config
                ),
            );
        }
        if let Some(e) = endpoint {
            if let Some(j) = by_endpoint.insert((e, s.config), i) {
                err(
                    format!("{at}.endpoint"),
                    format!(
                        "`{}` already has a server ID for configuration {} (server_ids[{j}])",
                        s.endpoint, s.config
                    ),
                );
            }
        }
    }
    out
}

/// What a QUIC-LB key file holds: 32 hex digits, an optional newline.
fn parse_key(text: &[u8]) -> Result<[u8; 16], String> {
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    std::str::from_utf8(body)
        .ok()
        .filter(|h| h.len() == 32)
        .and_then(hex_octets)
        .and_then(|octets| <[u8; 16]>::try_from(octets).ok())
        .ok_or_else(|| {
            format!(
                "holds {} characters: a QUIC-LB key is 32 hex digits (16 octets, AES-128)",
                body.len()
            )
        })
}

/// Read one key file: absolute, a regular file, no access for group or others (`spillway
/// check` reads them with this too, under its host root).
pub fn read_key(path: &str) -> Result<[u8; 16], String> {
    let mut file = std::fs::File::open(path).map_err(|e| format!("cannot read `{path}`: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("cannot read `{path}`: {e}"))?;
    if !meta.is_file() {
        return Err(format!("`{path}` is not a regular file"));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "`{path}` has mode {mode:o}: a key file must not be readable by group or others \
             (chmod 600)"
        ));
    }
    let mut text = Vec::with_capacity(34);
    (&mut file)
        .take(64)
        .read_to_end(&mut text)
        .map_err(|e| format!("cannot read `{path}`: {e}"))?;
    parse_key(&text).map_err(|e| format!("`{path}` {e}"))
}

/// Read every QUIC-LB key file `config` names (each path once); the problems, by field.
pub fn read_keys(config: &Config) -> Result<QuicKeys, Vec<FieldError>> {
    let mut keys = BTreeMap::new();
    let mut problems = Vec::new();
    for (i, s) in config.services.iter().enumerate() {
        let Some(q) = &s.backend_service.quic_lb else { continue };
        for (j, c) in q.configs.iter().enumerate() {
            let Some(path) = &c.key_file else { continue };
            if keys.contains_key(path) {
                continue;
            }
            match read_key(path) {
                Ok(k) => {
                    keys.insert(path.clone(), k);
                }
                Err(e) => problems.push(FieldError::new(
                    format!("services[{i}].backend_service.quic_lb.configs[{j}].key_file"),
                    e,
                )),
            }
        }
    }
    if problems.is_empty() {
        Ok(QuicKeys::from_iter(keys))
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_32_hex_digits() {
        assert_eq!(parse_key(b"000102030405060708090a0b0c0d0e0f\n").unwrap()[15], 15);
        assert_eq!(parse_key(b"000102030405060708090A0B0C0D0E0F").unwrap()[10], 10);
        for bad in
            [&b"00"[..], b"000102030405060708090a0b0c0d0e0fff", b"zz0102030405060708090a0b0c0d0e0f"]
        {
            assert!(parse_key(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn keys_are_never_printed() {
        let k = QuicKeys::from_iter([("/k".to_owned(), [0xab; 16])]);
        let shown = format!("{k:?}");
        assert!(shown.contains("/k") && !shown.contains("ab") && !shown.contains("171"), "{shown}");
    }
}
