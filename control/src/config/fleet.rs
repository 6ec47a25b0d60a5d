//! The `fleet:` section: connection-state sync with the other instances of a fleet
//! (`fleet.sync`) and the connection table kept across a clean restart (`fleet.table_file`).
//!
//! Three parts, as for the other sections but in one file because they only make sense
//! together: the YAML shapes ([`FleetConfig`], [`FleetSyncConfig`], [`SyncPeerConfig`]), their
//! checks (`check`, called by [`super::validate`]), and the compiled form the rest of the code
//! uses ([`SyncConfig`] from [`Config::fleet_sync`], [`Config::table_file`]).
//!
//! Both settings are read at start only, but for the sync key file, which every reload reads
//! again (a key rotation, docs/scale-out.md): the sync thread binds its sockets and asks its
//! peers for their entries once, and the table file is read once and written once. A reload
//! that changes anything else of the section is rejected as a whole ([`restart_needed`]),
//! naming the field, so that the running sync never silently differs from the file on disk.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use spillway_core::addr::Addr;
use spillway_core::policy::idle_timeout_bounds;

use super::choice::Refused;
use super::compile::parse_unicast;
use super::{Config, FieldError};

/// `fleet.sync.port` when absent.
pub const DEFAULT_SYNC_PORT: u16 = 7455;
/// `fleet.sync.bulk_timeout_sec` when absent.
pub const DEFAULT_BULK_TIMEOUT_SEC: f64 = 5.0;
/// `fleet.sync.refresh_sec` when absent.
pub const DEFAULT_REFRESH_SEC: f64 = 20.0;
/// `fleet.sync.previous_table_sec` when absent.
pub const DEFAULT_PREVIOUS_TABLE_SEC: f64 = 5.0;
/// `fleet.sync.previous_table_sec` range, in seconds (0: off).
pub const PREVIOUS_TABLE_RANGE: std::ops::RangeInclusive<f64> = 0.0..=60.0;
/// `fleet.sync.queue_size` when absent.
pub const DEFAULT_SYNC_QUEUE_SIZE: u64 = 4096;
/// `fleet.sync.instance_id` and `fleet.sync.peers[].id` range.
pub const INSTANCE_ID_RANGE: std::ops::RangeInclusive<u64> = 1..=65535;
/// `fleet.sync.bulk_timeout_sec` range, in seconds.
pub const BULK_TIMEOUT_RANGE: std::ops::RangeInclusive<f64> = 0.5..=60.0;
/// `fleet.sync.refresh_sec` range, in seconds.
pub const REFRESH_RANGE: std::ops::RangeInclusive<f64> = 1.0..=300.0;
/// `fleet.sync.queue_size` range (any number in it, not only powers of two).
pub const SYNC_QUEUE_RANGE: std::ops::RangeInclusive<u64> = 64..=1_048_576;
/// `fleet.sync.epoch_file` when absent.
pub const DEFAULT_EPOCH_FILE: &str = "/var/lib/spillway/sync-epoch";
/// `fleet.sync.max_entries_per_sec` when absent.
pub const DEFAULT_MAX_ENTRIES_PER_SEC: u64 = 1_000_000;
/// `fleet.sync.max_entries_per_sec` range.
pub const MAX_ENTRIES_PER_SEC_RANGE: std::ops::RangeInclusive<u64> = 1_000..=100_000_000;
/// `fleet.sync.copy_share` when absent.
pub const DEFAULT_COPY_SHARE: f64 = spillway_core::sync::DEFAULT_COPY_SHARE;
/// `fleet.sync.copy_share` range.
pub const COPY_SHARE_RANGE: std::ops::RangeInclusive<f64> = 0.05..=0.9;

/// `fleet:` — what this instance shares with the other instances of its fleet.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct FleetConfig {
    /// Connection-state sync with the peers (none by default: nothing is shared).
    pub sync: Option<FleetSyncConfig>,
    /// Where a clean stop writes the connection table and the next start reads it back
    /// (an absolute path; none by default).
    pub table_file: Option<String>,
}

/// `fleet.sync:` — sharing the connection-tracking entries at risk (FS-1) with the peers.
/// Numbers are kept wide (`u64`, `f64`) so that validation reports a bad one with its range.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetSyncConfig {
    /// This instance's id in the fleet, 1..=65535, different from every peer's.
    pub instance_id: u64,
    /// UDP port on the node's addresses for the sync traffic (default 7455), the same on every
    /// instance: peers are sent to on it too.
    #[serde(default = "default_sync_port")]
    pub port: u16,
    /// The fleet's shared key: an absolute path to a file of 64 hex characters (32 random
    /// bytes), mode 0600.
    pub key_file: String,
    /// The other instances, listed statically.
    #[serde(default)]
    pub peers: Vec<SyncPeerConfig>,
    /// At start, how long to wait for the peers' entries before announcing anyway (0.5..=60,
    /// default 5).
    #[serde(default = "default_bulk_timeout")]
    pub bulk_timeout_sec: f64,
    /// An entry at risk is sent again this often while it stays at risk (1..=300, default
    /// 20; below every service's idle timeout).
    #[serde(default = "default_refresh")]
    pub refresh_sec: f64,
    /// Per worker, entries waiting for the sync thread (64..=1048576, default 4096).
    #[serde(default = "default_sync_queue")]
    pub queue_size: u64,
    /// Where this instance keeps its last sync epoch, so that it only grows across restarts
    /// and clock steps (an absolute path; default `/var/lib/spillway/sync-epoch`).
    #[serde(default = "default_epoch_file")]
    pub epoch_file: String,
    /// Entries a peer may send unasked per second at most, beyond which its datagrams are
    /// dropped and counted (1000..=100000000, default 1000000; bulk answers are paced by this
    /// instance and not limited).
    #[serde(default = "default_max_entries_per_sec")]
    pub max_entries_per_sec: u64,
    /// The share of each worker's connection table that peers' copies may fill
    /// (0.05..=0.9, default 0.5); a copy never displaces an entry of this instance's own.
    #[serde(default = "default_copy_share")]
    pub copy_share: f64,
    /// For this long after a service's tables change, a TCP packet that opens no connection
    /// and finds no entry is given the previous tables' backend when it is still valid for it
    /// (FS-11; 0..=60, default 5, 0 turns it off).
    #[serde(default = "default_previous_table")]
    pub previous_table_sec: f64,
}

/// One item of `fleet.sync.peers`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncPeerConfig {
    /// The peer's `fleet.sync.instance_id`.
    pub id: u64,
    /// The peer's node address (its `dataplane.node.ipv4` or `ipv6`, without the prefix).
    pub address: String,
}

fn default_sync_port() -> u16 {
    DEFAULT_SYNC_PORT
}

fn default_bulk_timeout() -> f64 {
    DEFAULT_BULK_TIMEOUT_SEC
}

fn default_refresh() -> f64 {
    DEFAULT_REFRESH_SEC
}

fn default_previous_table() -> f64 {
    DEFAULT_PREVIOUS_TABLE_SEC
}

fn default_sync_queue() -> u64 {
    DEFAULT_SYNC_QUEUE_SIZE
}

fn default_epoch_file() -> String {
    DEFAULT_EPOCH_FILE.to_owned()
}

fn default_max_entries_per_sec() -> u64 {
    DEFAULT_MAX_ENTRIES_PER_SEC
}

fn default_copy_share() -> f64 {
    DEFAULT_COPY_SHARE
}

/// `fleet.sync`, validated and compiled: what the sync thread and the workers run with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncConfig {
    /// This instance's id (`fleet.sync.instance_id`), never 0, the sender id of its datagrams.
    pub instance_id: u16,
    /// The UDP port, here and on every peer.
    pub port: u16,
    /// Where to bind: the node's own address of each family some peer has (IPv4 first), with
    /// `port`. Never empty.
    pub local: Vec<SocketAddr>,
    /// The shared key's file (absolute). Read it with the sync module's key reader; it is not
    /// read here, so a configuration can be validated without the key.
    pub key_file: PathBuf,
    /// The peers, in configuration order: distinct ids, distinct addresses, none of them this
    /// instance's id or address, each of a family in `local`.
    pub peers: Vec<SyncPeer>,
    /// At start, the longest wait for the peers' entries before announcing anyway.
    pub bulk_timeout: Duration,
    /// How often an entry that stays at risk is sent again; shorter than every service's
    /// idle timeout.
    pub refresh: Duration,
    /// Per worker, the capacity of the queue of entries waiting for the sync thread.
    pub queue_size: usize,
    /// The epoch file (absolute).
    pub epoch_file: PathBuf,
    /// Unasked entries accepted per peer and second at most.
    pub max_entries_per_sec: u64,
    /// Per mille of each worker's table that copies may fill.
    pub copy_permille: u32,
    /// How long the tables before a change still give mid-connection TCP packets without an
    /// entry their backend (FS-11); zero: not at all.
    pub previous_table: Duration,
}

/// One peer of [`SyncConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncPeer {
    /// Its instance id, never 0.
    pub id: u16,
    /// Its address (an IPv4-mapped IPv6 address written in the file is given as IPv4).
    pub address: IpAddr,
    /// Where its sync socket is: `address` and the fleet's port.
    pub socket: SocketAddr,
}

impl Config {
    /// `fleet.sync`, compiled, when the section is present. For a configuration that passed
    /// validation every field is in range and every peer parses; given anything else this
    /// never panics (a peer that does not parse is left out, a value out of range is clamped).
    pub fn fleet_sync(&self) -> Option<SyncConfig> {
        let s = self.fleet.sync.as_ref()?;
        let id = |v: u64| u16::try_from(v).unwrap_or(u16::MAX).max(1);
        let peers: Vec<SyncPeer> = s
            .peers
            .iter()
            .filter_map(|p| {
                let address = parse_unicast(&p.address).ok()?.to_ip();
                Some(SyncPeer { id: id(p.id), address, socket: SocketAddr::new(address, s.port) })
            })
            .collect();
        let node = self.node_addrs();
        let local = [node.ipv4, node.ipv6]
            .into_iter()
            .flatten()
            .filter(|(own, _)| peers.iter().any(|p| Addr::from(p.address).is_v4() == own.is_v4()))
            .map(|(own, _)| SocketAddr::new(own.to_ip(), s.port))
            .collect();
        let secs = |v: f64, range: &std::ops::RangeInclusive<f64>, d: f64| {
            let v = if v.is_finite() { v.clamp(*range.start(), *range.end()) } else { d };
            Duration::from_secs_f64(v)
        };
        Some(SyncConfig {
            instance_id: id(s.instance_id),
            port: s.port,
            local,
            key_file: PathBuf::from(&s.key_file),
            peers,
            bulk_timeout: secs(s.bulk_timeout_sec, &BULK_TIMEOUT_RANGE, DEFAULT_BULK_TIMEOUT_SEC),
            refresh: secs(s.refresh_sec, &REFRESH_RANGE, DEFAULT_REFRESH_SEC),
            queue_size: usize::try_from(
                s.queue_size.clamp(*SYNC_QUEUE_RANGE.start(), *SYNC_QUEUE_RANGE.end()),
            )
            .unwrap_or(usize::MAX),
            epoch_file: PathBuf::from(&s.epoch_file),
            max_entries_per_sec: s
                .max_entries_per_sec
                .clamp(*MAX_ENTRIES_PER_SEC_RANGE.start(), *MAX_ENTRIES_PER_SEC_RANGE.end()),
            copy_permille: {
                let share =
                    if s.copy_share.is_finite() { s.copy_share } else { DEFAULT_COPY_SHARE };
                (share.clamp(*COPY_SHARE_RANGE.start(), *COPY_SHARE_RANGE.end()) * 1000.0).round()
                    as u32
            },
            previous_table: secs(
                s.previous_table_sec,
                &PREVIOUS_TABLE_RANGE,
                DEFAULT_PREVIOUS_TABLE_SEC,
            ),
        })
    }

    /// `fleet.table_file`: where a clean stop writes the connection table and the next start
    /// reads it back.
    pub fn table_file(&self) -> Option<&Path> {
        self.fleet.table_file.as_deref().map(Path::new)
    }
}

/// The checks of the `fleet:` section; pushes every problem onto `errors`.
pub(crate) fn check(c: &Config, refused: &Refused, errors: &mut Vec<FieldError>) {
    let mut err = |field: String, message: String| errors.push(FieldError { field, message });
    if let Some(f) = &c.fleet.table_file {
        if !f.starts_with('/') {
            err("fleet.table_file".into(), format!("`{f}` is not an absolute path"));
        } else if f.ends_with('/') {
            err("fleet.table_file".into(), format!("`{f}` names a directory, not a file"));
        }
    }
    let Some(s) = &c.fleet.sync else { return };
    if c.dataplane.kernel_interface.is_none() {
        err(
            "fleet.sync".into(),
            "sync traffic goes over the kernel interface, and there is none: set \
             dataplane.kernel_interface (docs/scale-out.md)"
                .into(),
        );
    }
    let id_range = |v: u64| format!("{v} is out of range 1..={}", INSTANCE_ID_RANGE.end());
    let own_id = INSTANCE_ID_RANGE.contains(&s.instance_id).then_some(s.instance_id);
    if own_id.is_none() {
        err("fleet.sync.instance_id".into(), id_range(s.instance_id));
    }
    if s.port == 0 {
        err("fleet.sync.port".into(), "0 is not a port 1..=65535".into());
    }
    if !s.key_file.starts_with('/') {
        err("fleet.sync.key_file".into(), format!("`{}` is not an absolute path", s.key_file));
    }
    if !s.epoch_file.starts_with('/') || s.epoch_file.ends_with('/') {
        err(
            "fleet.sync.epoch_file".into(),
            format!("`{}` is not an absolute path of a file", s.epoch_file),
        );
    } else if s.epoch_file == s.key_file
        || c.fleet.table_file.as_deref() == Some(s.epoch_file.as_str())
    {
        err(
            "fleet.sync.epoch_file".into(),
            format!("`{}` is already the key file or the table file", s.epoch_file),
        );
    }
    if !MAX_ENTRIES_PER_SEC_RANGE.contains(&s.max_entries_per_sec) {
        err(
            "fleet.sync.max_entries_per_sec".into(),
            format!("{} is out of range 1000..=100000000", s.max_entries_per_sec),
        );
    }
    if !(s.copy_share.is_finite() && COPY_SHARE_RANGE.contains(&s.copy_share)) {
        err(
            "fleet.sync.copy_share".into(),
            format!("{} is out of range 0.05..=0.9 (a share of each worker's table)", s.copy_share),
        );
    }
    if !(s.previous_table_sec.is_finite() && PREVIOUS_TABLE_RANGE.contains(&s.previous_table_sec)) {
        err(
            "fleet.sync.previous_table_sec".into(),
            format!("{} is out of range 0..=60 (seconds)", s.previous_table_sec),
        );
    }
    if !(s.bulk_timeout_sec.is_finite() && BULK_TIMEOUT_RANGE.contains(&s.bulk_timeout_sec)) {
        err(
            "fleet.sync.bulk_timeout_sec".into(),
            format!("{} is out of range 0.5..=60 (seconds)", s.bulk_timeout_sec),
        );
    }
    if !(s.refresh_sec.is_finite() && REFRESH_RANGE.contains(&s.refresh_sec)) {
        err(
            "fleet.sync.refresh_sec".into(),
            format!("{} is out of range 1..=300 (seconds)", s.refresh_sec),
        );
    } else if let Some((i, name, idle)) = shortest_idle_timeout(c, refused) {
        // A peer's copy expires by the idle timeout it had when sent (FS-2), so an entry
        // refreshed less often than that lapses on the peers while the connection lives.
        if s.refresh_sec >= f64::from(idle) {
            err(
                "fleet.sync.refresh_sec".into(),
                format!(
                    "{} s is not below the idle timeout of services[{i}] `{name}` ({idle} s): \
                     its entries at risk would expire on the peers between two refreshes",
                    s.refresh_sec
                ),
            );
        }
    }
    if !SYNC_QUEUE_RANGE.contains(&s.queue_size) {
        err(
            "fleet.sync.queue_size".into(),
            format!("{} is out of range 64..=1048576", s.queue_size),
        );
    }
    if s.peers.is_empty() {
        err(
            "fleet.sync.peers".into(),
            "no peers: sync with nobody shares nothing; list the other instances of the fleet, \
             or remove `fleet.sync`"
                .into(),
        );
    }
    let node = c.node_addrs();
    let n = &c.dataplane.node;
    let mut ids: Vec<(u64, usize)> = Vec::new();
    let mut addrs: Vec<(Addr, usize)> = Vec::new();
    for (i, p) in s.peers.iter().enumerate() {
        let path = format!("fleet.sync.peers[{i}]");
        if !INSTANCE_ID_RANGE.contains(&p.id) {
            err(format!("{path}.id"), id_range(p.id));
        } else if Some(p.id) == own_id {
            err(
                format!("{path}.id"),
                format!("{} is this instance's own id (fleet.sync.instance_id)", p.id),
            );
        } else if let Some((_, j)) = ids.iter().find(|(id, _)| *id == p.id) {
            err(
                format!("{path}.id"),
                format!("{} is already the id of fleet.sync.peers[{j}]", p.id),
            );
        } else {
            ids.push((p.id, i));
        }
        let apath = format!("{path}.address");
        let a = match parse_unicast(&p.address) {
            Ok(a) => a,
            Err(e) => {
                err(apath, e);
                continue;
            }
        };
        if let Some((_, j)) = addrs.iter().find(|(b, _)| *b == a) {
            err(apath, format!("`{}` is already the address of fleet.sync.peers[{j}]", p.address));
            continue;
        }
        addrs.push((a, i));
        let (family, given) = if a.is_v4() { ("ipv4", &n.ipv4) } else { ("ipv6", &n.ipv6) };
        match node.own(a) {
            Some((own, _)) if own == a => err(
                apath,
                format!("`{}` is this node's own address (dataplane.node.{family})", p.address),
            ),
            Some(_) => {}
            // The node's address itself is wrong: reported on its own field.
            None if given.is_some() => {}
            None => err(
                apath,
                format!(
                    "`{}` is an {} address, but dataplane.node.{family} is not set: the node \
                     has no address of its family to sync from",
                    p.address,
                    if a.is_v4() { "IPv4" } else { "IPv6" }
                ),
            ),
        }
    }
}

/// The service with the shortest idle timeout, its index, name and timeout in seconds, among
/// the services whose timeout is valid (one out of range, or under a refused mode or affinity,
/// is reported on its own field).
fn shortest_idle_timeout<'c>(c: &'c Config, refused: &Refused) -> Option<(usize, &'c str, u32)> {
    c.services
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let b = &s.backend_service;
            let ct = &b.connection_tracking_policy;
            let bp = format!("services[{i}].backend_service");
            let mode = refused.known(
                &format!("{bp}.connection_tracking_policy.tracking_mode"),
                ct.tracking_mode,
            )?;
            let affinity = refused.known(&format!("{bp}.session_affinity"), b.session_affinity)?;
            let (default, min, max) = idle_timeout_bounds(mode, affinity);
            let t = ct.idle_timeout_sec.unwrap_or(default);
            (min..=max).contains(&t).then_some((i, s.name.as_str(), t))
        })
        .min_by_key(|&(_, _, t)| t)
}

/// The start-only settings of `fleet:` that `new` changes from `running`, one error per field,
/// for a reload to refuse: the sync thread and the table file are set up at start only.
pub fn restart_needed(running: &Config, new: &Config) -> Vec<FieldError> {
    let mut out = Vec::new();
    let mut differs = |field: &str| {
        out.push(FieldError::new(
            field,
            "is read at start only and this file changes it: restart Spillway to apply it (the \
             running configuration is kept, nothing of this file was applied)",
        ));
    };
    match (&running.fleet.sync, &new.fleet.sync) {
        (None, None) => {}
        (Some(a), Some(b)) => {
            // The key file is read again by every reload (a key rotation): not listed.
            let fields: [(&str, bool); 9] = [
                ("instance_id", a.instance_id != b.instance_id),
                ("port", a.port != b.port),
                ("peers", !same_peers(&a.peers, &b.peers)),
                ("bulk_timeout_sec", a.bulk_timeout_sec.to_bits() != b.bulk_timeout_sec.to_bits()),
                ("refresh_sec", a.refresh_sec.to_bits() != b.refresh_sec.to_bits()),
                ("queue_size", a.queue_size != b.queue_size),
                ("epoch_file", a.epoch_file != b.epoch_file),
                ("max_entries_per_sec", a.max_entries_per_sec != b.max_entries_per_sec),
                ("copy_share", a.copy_share.to_bits() != b.copy_share.to_bits()),
            ];
            for (field, changed) in fields {
                if changed {
                    differs(&format!("fleet.sync.{field}"));
                }
            }
        }
        _ => differs("fleet.sync"),
    }
    if running.fleet.table_file != new.fleet.table_file {
        differs("fleet.table_file");
    }
    out
}

/// The same peers, in any order (the order of the list means nothing).
fn same_peers(a: &[SyncPeerConfig], b: &[SyncPeerConfig]) -> bool {
    fn sorted(l: &[SyncPeerConfig]) -> Vec<(u64, &str)> {
        let mut v: Vec<(u64, &str)> = l.iter().map(|p| (p.id, p.address.as_str())).collect();
        v.sort_unstable();
        v
    }
    sorted(a) == sorted(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "\
dataplane:
  ports: [a]
  kernel_interface: {name: spl0}
  mempool_size: 16383
  node:
    ipv4: 198.18.0.11/16
    ipv6: fd00::11/64
fleet:
  sync:
    instance_id: 1
    key_file: /etc/spillway/sync.key
    peers:
      - {id: 2, address: 198.18.0.12}
      - {id: 3, address: \"fd00::13\"}
      - {id: 4, address: \"::ffff:198.18.0.14\"}
  table_file: /var/lib/spillway/conntrack.table
";

    fn parse(text: &str) -> Config {
        Config::from_yaml(Path::new("t.yaml"), text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn compiled_with_defaults_and_parsed_addresses() {
        let c = parse(BASE);
        let s = c.fleet_sync().expect("fleet.sync");
        assert_eq!((s.instance_id, s.port, s.queue_size), (1, 7455, 4096));
        assert_eq!(s.key_file, Path::new("/etc/spillway/sync.key"));
        assert_eq!((s.bulk_timeout, s.refresh), (Duration::from_secs(5), Duration::from_secs(20)));
        assert_eq!(
            s.local,
            ["198.18.0.11:7455".parse::<SocketAddr>().unwrap(), "[fd00::11]:7455".parse().unwrap()]
        );
        assert_eq!(s.peers.len(), 3);
        assert_eq!(s.peers[0].id, 2);
        assert_eq!(s.peers[1].socket, "[fd00::13]:7455".parse::<SocketAddr>().unwrap());
        // Written as IPv4-mapped IPv6, given as the IPv4 address it is.
        assert_eq!(s.peers[2].address, "198.18.0.14".parse::<IpAddr>().unwrap());
        assert_eq!(c.table_file(), Some(Path::new("/var/lib/spillway/conntrack.table")));
    }

    #[test]
    fn binds_only_the_families_of_its_peers() {
        let c = parse(&BASE.replace("      - {id: 3, address: \"fd00::13\"}\n", ""));
        let s = c.fleet_sync().unwrap();
        assert_eq!(s.local, ["198.18.0.11:7455".parse::<SocketAddr>().unwrap()]);
        let set = BASE
            .replace("    key_file:", "    port: 9000\n    bulk_timeout_sec: 0.5\n    refresh_sec: 59.5\n    queue_size: 100\n    key_file:");
        let s = parse(&set).fleet_sync().unwrap();
        assert_eq!((s.port, s.queue_size), (9000, 100));
        assert_eq!(s.bulk_timeout, Duration::from_millis(500));
        assert_eq!(s.refresh, Duration::from_millis(59_500));
        assert_eq!(s.peers[0].socket.port(), 9000);
    }

    #[test]
    fn absent_sections_compile_to_nothing() {
        let c = parse("dataplane:\n  ports: [a]\n");
        assert_eq!((c.fleet_sync(), c.table_file()), (None, None));
        let c = parse("dataplane:\n  ports: [a]\nfleet: {table_file: /var/lib/t}\n");
        assert_eq!((c.fleet_sync(), c.table_file()), (None, Some(Path::new("/var/lib/t"))));
    }

    #[test]
    fn a_reload_may_not_change_the_fleet_section() {
        let a = parse(BASE);
        assert!(restart_needed(&a, &a.clone()).is_empty());
        let fields = |b: &Config| -> Vec<String> {
            restart_needed(&a, b).into_iter().map(|e| e.field).collect()
        };
        let b = parse(&BASE.replace("id: 2, address: 198.18.0.12", "id: 5, address: 198.18.0.12"));
        assert_eq!(fields(&b), ["fleet.sync.peers"]);
        let b =
            parse(&BASE.replace("instance_id: 1", "instance_id: 9").replace("/var/lib", "/srv"));
        assert_eq!(fields(&b), ["fleet.sync.instance_id", "fleet.table_file"]);
        // The peers' order means nothing.
        let mut b = a.clone();
        b.fleet.sync.as_mut().unwrap().peers.reverse();
        assert!(restart_needed(&a, &b).is_empty());
        let mut b = a.clone();
        b.fleet.sync = None;
        assert_eq!(fields(&b), ["fleet.sync"]);
        let m = &restart_needed(&a, &b)[0].message;
        assert!(m.contains("restart Spillway"), "{m}");
    }
}
