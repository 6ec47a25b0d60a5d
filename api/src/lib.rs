//! The admin API's contract, shared by its server (`spillway_control::api`) and its clients
//! (`spillwayctl`, the tests): the request and reply bodies ([`types`]), the address the API
//! listens on ([`Listen`]) and, with the `client` feature, a client (`client`). It depends on no
//! part of the control plane, so both ends use the same definitions: the control plane's
//! modules that fill a reply (the instance, fleet sync, packet capture, the API itself) import
//! them from here without importing each other, and `spillwayctl` reads them without a second
//! copy; the daemon, which only serves, builds it without the client. `docs/operations.md`
//! describes every endpoint.

#![forbid(unsafe_code)]

use std::fmt;
use std::path::PathBuf;

#[cfg(feature = "client")]
pub mod client;
pub mod types;

/// Where the API listens (server) or where a client connects: `ip:port` or `unix:/path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// TCP, `host:port` (the server only accepts a literal `ip:port`).
    Tcp(String),
    /// A Unix stream socket at this absolute path.
    Unix(PathBuf),
}

impl Listen {
    /// Parse `ip:port`, `host:port` or `unix:/absolute/path`.
    pub fn parse(s: &str) -> Option<Listen> {
        match s.strip_prefix("unix:") {
            Some(p) if p.starts_with('/') => Some(Listen::Unix(PathBuf::from(p))),
            Some(_) => None,
            None if s
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok()) =>
            {
                Some(Listen::Tcp(s.to_owned()))
            }
            None => None,
        }
    }
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Listen::Tcp(a) => f.write_str(a),
            Listen::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}
