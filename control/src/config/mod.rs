//! The YAML configuration file: its types, defaults, loading and the checks that need no
//! running system.
//!
//! This module owns the shape of the file (`Config` and one struct per top-level section) and
//! turns a bad file into a [`ConfigError`] that names the file, the field path and, where the
//! parser knows it, the line and column. Unknown fields are errors everywhere.
//!
//! It must never touch DPDK, the network or the clock: checks that need the running system
//! (does the port exist, are there enough EAL lcores) belong to the daemon, which reports them
//! with the same field paths.
//!
//! Loading is two steps. [`yaml`] parses the text once into the types of this module and
//! [`services`], and records where every field is ([`locate`]); a syntax error, an unknown
//! field or a wrong type stops there and only the first one is reported, with its line and
//! column ([`ConfigError::Parse`]). An enum-like field is read into its enum there too
//! ([`choice`]), but a name that is none of its values does not stop the reading: it is noted
//! and reported with the problems of the second step. Then [`validate`] checks everything serde
//! cannot see and collects **every** problem, each placed at its field's recorded position,
//! and [`ConfigError::Invalid`] prints one line per problem, the refused names among them
//! (NX-3: a file that fails either step is never applied). [`compile`] turns a valid file into
//! the decision core's model, the health checker's targets and the node's addresses. The
//! reference of every field is `docs/configuration.md`.
//!
//! To add a top-level section (`topology:`, `services:`, ...): add a field to [`Config`] with
//! its own `#[serde(deny_unknown_fields)]` struct, check it in [`validate`], compile it in
//! [`compile`], and document it in `docs/configuration.md` and `configs/example.yaml` (the
//! `config_docs` test fails until both cover it).

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub mod choice;
pub mod compile;
pub mod fleet;
pub mod locate;
pub mod quic;
pub mod services;
pub mod validate;
pub mod yaml;
pub use choice::Choice;
use choice::Refused;
pub use compile::NodeAddrs;
pub use fleet::{FleetConfig, FleetSyncConfig, SyncConfig, SyncPeer, SyncPeerConfig};
pub use quic::{QuicLbConfig, QuicLbConfigEntry, QuicServerIdConfig};
pub use services::*;
pub use validate::FieldError;

choice::choice! {
    /// `dataplane.hugepages`: whether DPDK runs on hugepages. The daemon hands it to the memory
    /// planner as `spillway_dpdk::HugepagePolicy`, the same three values (this crate does not
    /// link DPDK).
    #[derive(Default)]
    pub enum HugepagePolicy {
        /// `required` (the default): not enough free hugepages is an error at start, with the
        /// fix.
        #[default]
        Required => "required",
        /// `preferred`: hugepages when enough are free and mounted, otherwise ordinary memory,
        /// said in the log.
        Preferred => "preferred",
        /// `off`: ordinary memory.
        Off => "off",
    }
}

/// Largest RX/TX burst a worker handles at once (the size of its on-stack mbuf array).
pub const MAX_BURST: u16 = 64;

/// Largest `dataplane.idle_sleep_us`.
pub const MAX_IDLE_SLEEP_US: u32 = 10_000;

/// The QUIC-LB keys of a loaded file, by key file path. Never printed.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct QuicKeys(std::collections::BTreeMap<String, [u8; 16]>);

impl fmt::Debug for QuicKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

impl QuicKeys {
    /// The key read from `path`.
    pub fn get(&self, path: &str) -> Option<[u8; 16]> {
        self.0.get(path).copied()
    }
}

impl FromIterator<(String, [u8; 16])> for QuicKeys {
    fn from_iter<I: IntoIterator<Item = (String, [u8; 16])>>(iter: I) -> QuicKeys {
        QuicKeys(iter.into_iter().collect())
    }
}

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// DPDK, ports, workers and their queues, node addresses, hashing and conntrack size.
    pub dataplane: DataplaneConfig,
    /// The operator API and metrics endpoint.
    #[serde(default)]
    pub admin: AdminConfig,
    /// Regions, zones and client subnets.
    #[serde(default)]
    pub topology: TopologyConfig,
    /// Named health checks.
    #[serde(default)]
    pub health_checks: HealthChecks,
    /// The load-balanced services.
    #[serde(default)]
    pub services: Vec<ServiceConfig>,
    /// VIP announcement to a routing daemon and leaving a fleet; nothing is announced without it.
    #[serde(default)]
    pub announce: Option<AnnounceConfig>,
    /// Connection-state sync with the other instances of a fleet, and the connection table
    /// kept across a clean restart; read at start only ([`fleet`]).
    #[serde(default)]
    pub fleet: FleetConfig,
    /// The QUIC-LB keys its services' `quic_lb` key files hold: read by [`load`] (every start
    /// and reload), empty for a text parsed alone ([`Config::from_yaml`]).
    #[serde(skip)]
    pub quic_keys: QuicKeys,
}

/// The `dataplane:` section.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataplaneConfig {
    /// Arguments for `rte_eal_init`, without the program name, e.g.
    /// `["--no-pci", "-l", "0-1", "--vdev", "net_tap0,iface=spw0"]`.
    pub eal_args: Vec<String>,
    /// Whether DPDK runs on hugepages. The memory options (`--no-huge`, `-m` sized from this
    /// section, `--huge-unlink`) are added to `eal_args` by Spillway; `-m` or `--socket-mem`
    /// given there override the size.
    pub hugepages: HugepagePolicy,
    /// DPDK ports to forward on, by device name (`net_tap0`, `net_null0`, a PCI address).
    pub ports: Vec<String>,
    /// Number of workers. Each runs on its own EAL worker lcore (not the main lcore) and owns
    /// one RX and one TX queue on every port. Defaults to the length of `lcores`, or 1.
    pub workers: Option<u16>,
    /// The EAL lcores to run workers on. Defaults to the first `workers` worker lcores that
    /// EAL enabled (`-l`/`--lcores`), in order.
    pub lcores: Option<Vec<u32>>,
    /// RX descriptors per queue.
    pub rx_queue_size: u16,
    /// TX descriptors per queue.
    pub tx_queue_size: u16,
    /// Mbufs in the packet pool (2^n - 1 is the most memory-efficient).
    pub mempool_size: u32,
    /// Per-lcore mempool cache size.
    pub mempool_cache_size: u32,
    /// Packets a worker receives per poll, 1..=64.
    pub burst_size: u16,
    /// Longest time a packet waits in a worker's TX buffer before it is flushed, in
    /// microseconds.
    pub tx_drain_us: u32,
    /// Microseconds a worker sleeps after a poll that received nothing (0: it polls without
    /// pause, the lowest latency, a core busy per worker).
    pub idle_sleep_us: u32,
    /// The node's addresses, gateways and MTU.
    pub node: NodeConfig,
    /// Connection-tracking entries per worker (rounded up to whole buckets; 64 bytes each).
    pub conntrack_capacity: u32,
    /// Flood guard: new connection entries a worker admits per second (0: no limit). Beyond
    /// it, and while the table is full, new connections are forwarded by the consistent hash
    /// without an entry; established connections keep theirs.
    pub conntrack_max_inserts_per_sec: u32,
    /// CH-4 hash key, the same on every instance of a deployment. A fixed built-in key when
    /// absent (set your own).
    pub hash_seed: Option<u64>,
    /// Maglev table size M, a prime (default 65537).
    pub maglev_table_size: u32,
    /// The exception path to the kernel (none by default).
    pub kernel_interface: Option<KernelInterfaceConfig>,
}

impl Default for DataplaneConfig {
    fn default() -> Self {
        Self {
            eal_args: Vec::new(),
            hugepages: HugepagePolicy::default(),
            ports: Vec::new(),
            workers: None,
            lcores: None,
            rx_queue_size: 1024,
            tx_queue_size: 1024,
            mempool_size: 8191,
            mempool_cache_size: 256,
            burst_size: MAX_BURST,
            tx_drain_us: 100,
            idle_sleep_us: 0,
            node: NodeConfig::default(),
            conntrack_capacity: 1 << 20,
            conntrack_max_inserts_per_sec: 0,
            hash_seed: None,
            maglev_table_size: 65537,
            kernel_interface: None,
        }
    }
}

impl DataplaneConfig {
    /// How many workers to run: `workers`, else the number of `lcores`, else 1.
    pub fn worker_count(&self) -> u16 {
        match (&self.workers, &self.lcores) {
            (Some(n), _) => *n,
            (None, Some(l)) => u16::try_from(l.len()).unwrap_or(u16::MAX),
            (None, None) => 1,
        }
    }

    /// Mbufs the configured queues can hold at once: every RX ring full, every TX ring full,
    /// every lcore cache full and every worker's RX burst and TX buffers full.
    pub fn mbufs_needed(&self) -> u64 {
        let ports = self.ports.len() as u64;
        let workers = u64::from(self.worker_count());
        let burst = u64::from(self.burst_size);
        let kernel = self.kernel_interface.as_ref().map_or(0, |k| {
            // Its RX and TX rings, a queue to it per worker and the queue back.
            u64::from(self.rx_queue_size)
                + u64::from(self.tx_queue_size)
                + (workers + 1) * u64::from(k.queue_size)
                + burst
        });
        ports * workers * (u64::from(self.rx_queue_size) + u64::from(self.tx_queue_size) + burst)
            + (workers + 1) * u64::from(self.mempool_cache_size)
            + workers * burst
            + kernel
    }

    /// The checks of the DPDK settings; pushes every problem onto `errors`.
    pub(crate) fn check(&self, refused: &Refused, errors: &mut Vec<FieldError>) {
        let hugepages = refused.known("dataplane.hugepages", self.hugepages);
        let mut err = |field: String, message: String| errors.push(FieldError { field, message });
        if self.eal_args.iter().any(|a| a == "--no-huge") {
            err(
                "dataplane.eal_args".into(),
                "--no-huge is set by Spillway: write `dataplane.hugepages: off` (or `preferred`) \
                 instead"
                    .into(),
            );
        }
        if hugepages == Some(HugepagePolicy::Off)
            && self.eal_args.iter().any(|a| a.starts_with("--huge-unlink") || a == "--huge-dir")
        {
            err(
                "dataplane.eal_args".into(),
                "--huge-unlink and --huge-dir need hugepages, and dataplane.hugepages is `off`"
                    .into(),
            );
        }
        if self.ports.is_empty() {
            err("dataplane.ports".into(), "at least one port is required".into());
        }
        for (i, name) in self.ports.iter().enumerate() {
            if name.trim().is_empty() {
                err(format!("dataplane.ports[{i}]"), "empty port name".into());
            } else if self.ports[..i].contains(name) {
                err(format!("dataplane.ports[{i}]"), format!("port '{name}' is listed twice"));
            }
        }
        if self.workers == Some(0) {
            err("dataplane.workers".into(), "must be at least 1".into());
        }
        if let Some(lcores) = &self.lcores {
            if lcores.is_empty() {
                err("dataplane.lcores".into(), "must not be empty when given".into());
            }
            if let Some(n) = self.workers {
                if usize::from(n) != lcores.len() && !lcores.is_empty() {
                    err(
                        "dataplane.workers".into(),
                        format!("is {n} but dataplane.lcores lists {} lcores", lcores.len()),
                    );
                }
            }
            for (i, l) in lcores.iter().enumerate() {
                if lcores[..i].contains(l) {
                    err(format!("dataplane.lcores[{i}]"), format!("lcore {l} is listed twice"));
                }
            }
        }
        for (field, size) in [
            ("dataplane.rx_queue_size", self.rx_queue_size),
            ("dataplane.tx_queue_size", self.tx_queue_size),
        ] {
            if size < 64 {
                err(field.into(), format!("{size} is too small (minimum 64)"));
            }
        }
        if !(1..=MAX_BURST).contains(&self.burst_size) {
            err(
                "dataplane.burst_size".into(),
                format!("{} is out of range 1..={MAX_BURST}", self.burst_size),
            );
        }
        if self.mempool_cache_size > 512 {
            err(
                "dataplane.mempool_cache_size".into(),
                format!("{} is above DPDK's maximum of 512", self.mempool_cache_size),
            );
        }
        if u64::from(self.mempool_size) < self.mbufs_needed() {
            err(
                "dataplane.mempool_size".into(),
                format!(
                    "{} mbufs cannot fill the configured queues: {} ports x {} workers with \
                     {} RX + {} TX descriptors, caches and bursts{} need at least {}",
                    self.mempool_size,
                    self.ports.len(),
                    self.worker_count(),
                    self.rx_queue_size,
                    self.tx_queue_size,
                    if self.kernel_interface.is_some() {
                        ", and the kernel interface's rings and queues"
                    } else {
                        ""
                    },
                    self.mbufs_needed()
                ),
            );
        }
        if self.tx_drain_us == 0 {
            err("dataplane.tx_drain_us".into(), "must be at least 1".into());
        }
        if self.idle_sleep_us > MAX_IDLE_SLEEP_US {
            err(
                "dataplane.idle_sleep_us".into(),
                format!(
                    "{} is out of range 0..={MAX_IDLE_SLEEP_US}: a worker that sleeps longer \
                     lets its receive queue overflow at a few hundred thousand packets a second",
                    self.idle_sleep_us
                ),
            );
        }
    }
}

impl Config {
    /// Every problem [`validate::validate`] finds, without positions.
    pub fn validate(&self) -> Vec<FieldError> {
        validate::validate(self)
    }

    /// Parses and validates YAML text. `path` only labels errors.
    pub fn from_yaml(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let (config, locations, refusals) =
            yaml::from_str_with_refusals::<Config>(text).map_err(|e| ConfigError::Parse {
                path: path.to_owned(),
                field: e.field,
                location: Some(e.location),
                message: e.message,
            })?;
        // A refused name is a problem like the ones validation finds; validation skips the
        // checks that would read the stand-in the reader put in its place.
        let refused = Refused::new(refusals.iter().map(|r| r.field.clone()));
        let problems: Vec<FieldError> = refusals
            .into_iter()
            .map(|r| FieldError { field: r.field, message: r.message })
            .chain(validate::validate_refused(&config, &refused))
            .collect();
        if problems.is_empty() {
            return Ok(config);
        }
        Err(invalid(path, problems, &locations))
    }
}

/// The problems found in the file at `path`, with their positions, in file order (those
/// without a position last; the sort is stable, so problems of one field keep the order the
/// checks found them in).
fn invalid(path: &Path, problems: Vec<FieldError>, locations: &locate::Locations) -> ConfigError {
    let mut errors: Vec<InvalidField> = problems
        .into_iter()
        .map(|FieldError { field, message }| InvalidField {
            location: locations.get(&field),
            field,
            message,
        })
        .collect();
    errors.sort_by_key(|e| e.location.map_or((usize::MAX, usize::MAX), |l| l));
    ConfigError::Invalid { path: path.to_owned(), errors }
}

/// Reads, parses and validates the configuration file at `path`, and reads the key files its
/// services' `quic_lb` names (a key file that is not fit is refused like a bad value, with its
/// field's position).
pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path)
        .map_err(|source| ConfigError::Io { path: path.to_owned(), source })?;
    Config::from_yaml_with_keys(path, &text)
}

impl Config {
    /// [`Config::from_yaml`], then the key files its services' `quic_lb` names, read as
    /// [`load`] reads them (a candidate configuration is judged with its keys too).
    pub fn from_yaml_with_keys(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let mut config = Config::from_yaml(path, text)?;
        match quic::read_keys(&config) {
            Ok(keys) => config.quic_keys = keys,
            Err(problems) => return Err(invalid(path, problems, &yaml::locations(text))),
        }
        Ok(config)
    }
}

/// Why a configuration file was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not valid YAML or does not match the schema.
    #[error("{}{}: {}{}", path.display(), Loc(*location), Field(field), message)]
    Parse {
        /// The file.
        path: PathBuf,
        /// Dotted field path where the error was found, empty at the top level.
        field: String,
        /// 1-based line and column, when the parser knows them.
        location: Option<(usize, usize)>,
        /// The parser's message.
        message: String,
    },
    /// The file parsed, but settings are impossible: every one found, in file order, printed
    /// one per line as `file:line:col: field `path`: message`.
    #[error("{}", InvalidList(path, errors))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every problem, at least one.
        errors: Vec<InvalidField>,
    },
}

/// One impossible setting of a [`ConfigError::Invalid`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidField {
    /// Dotted field path of the offending setting (`services[0].backend_service.backends[1]`).
    pub field: String,
    /// 1-based line and column of the value (or of its key, for a block; or of the nearest
    /// enclosing field present in the file, for a field left at its default).
    pub location: Option<(usize, usize)>,
    /// What is wrong with it.
    pub message: String,
}

struct InvalidList<'a>(&'a Path, &'a [InvalidField]);

impl fmt::Display for InvalidList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.1.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}{}: {}{}", self.0.display(), Loc(e.location), Field(&e.field), e.message)?;
        }
        Ok(())
    }
}

impl ConfigError {
    /// The dotted field path the error is about (the first one, for several), if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            ConfigError::Io { .. } => None,
            ConfigError::Parse { field, .. } => Some(field.as_str()).filter(|f| !f.is_empty()),
            ConfigError::Invalid { errors, .. } => errors.first().map(|e| e.field.as_str()),
        }
    }

    /// Every invalid setting (empty for I/O and parse errors, which stop at the first).
    pub fn invalid_fields(&self) -> &[InvalidField] {
        match self {
            ConfigError::Invalid { errors, .. } => errors,
            _ => &[],
        }
    }
}

/// `:line:col` when known (error messages of the config and of `simulate`).
pub(crate) struct Loc(pub(crate) Option<(usize, usize)>);

impl fmt::Display for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some((line, column)) => write!(f, ":{line}:{column}"),
            None => Ok(()),
        }
    }
}

/// ``field `path`: `` when the path is not empty.
pub(crate) struct Field<'a>(pub(crate) &'a str);

impl fmt::Display for Field<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, "field `{}`: ", self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::from_yaml(Path::new("test.yaml"), text)
    }

    const MINIMAL: &str = "dataplane:\n  ports: [net_null0]\n";

    #[test]
    fn minimal_file_gets_defaults() {
        let c = parse(MINIMAL).unwrap();
        assert_eq!(c.dataplane.ports, vec!["net_null0".to_owned()]);
        assert_eq!(c.dataplane.worker_count(), 1);
        assert_eq!(c.dataplane.burst_size, 64);
        assert_eq!(c.dataplane.rx_queue_size, 1024);
        assert!(c.dataplane.eal_args.is_empty());
        assert_eq!(c.dataplane.hugepages, HugepagePolicy::Required);
    }

    #[test]
    fn full_file_parses() {
        let c = parse(
            "dataplane:\n  eal_args: [\"-m\", \"512\", \"-l\", \"0-2\"]\n  \
             hugepages: preferred\n  ports: [net_tap0, net_null0]\n  lcores: [2, 1]\n  rx_queue_size: 512\n  \
             tx_queue_size: 256\n  mempool_size: 16383\n  burst_size: 16\n  tx_drain_us: 50\n",
        )
        .unwrap();
        let d = &c.dataplane;
        assert_eq!(d.eal_args, ["-m", "512", "-l", "0-2"]);
        assert_eq!(d.hugepages, HugepagePolicy::Preferred);
        assert_eq!(d.worker_count(), 2);
        assert_eq!(d.lcores.as_deref(), Some(&[2, 1][..]));
        assert_eq!((d.rx_queue_size, d.tx_queue_size, d.burst_size), (512, 256, 16));
        assert_eq!((d.mempool_size, d.tx_drain_us), (16383, 50));
    }

    #[test]
    fn unknown_field_names_path_and_line() {
        let e = parse("dataplane:\n  ports: [net_null0]\n  wrokers: 2\n").unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("test.yaml:3:"), "{text}");
        assert!(text.contains("wrokers"), "{text}");
        assert!(matches!(e, ConfigError::Parse { .. }));
        assert_eq!(e.field(), Some("dataplane.wrokers"));
    }

    #[test]
    fn unknown_top_level_section_is_rejected() {
        let e = parse("dataplane:\n  ports: [a]\nservicez: {}\n").unwrap_err();
        assert!(e.to_string().contains("servicez"), "{e}");
    }

    #[test]
    fn wrong_type_names_field() {
        let e = parse("dataplane:\n  ports: [a]\n  burst_size: lots\n").unwrap_err();
        assert_eq!(e.field(), Some("dataplane.burst_size"));
        let text = e.to_string();
        assert!(text.contains("test.yaml:3:"), "{text}");
        assert!(text.contains("field `dataplane.burst_size`"), "{text}");
    }

    #[test]
    fn bad_yaml_is_a_parse_error() {
        let e = parse("dataplane: [\n").unwrap_err();
        assert!(matches!(e, ConfigError::Parse { .. }), "{e}");
    }

    #[test]
    fn missing_dataplane_section_is_rejected() {
        let e = parse("{}\n").unwrap_err();
        assert!(e.to_string().contains("dataplane"), "{e}");
    }

    fn invalid_field(text: &str) -> String {
        match parse(text).unwrap_err() {
            ConfigError::Invalid { errors, .. } => {
                assert_eq!(errors.len(), 1, "{errors:?}");
                errors[0].field.clone()
            }
            other => panic!("expected an invalid setting, got {other}"),
        }
    }

    #[test]
    fn impossible_settings_name_their_field() {
        assert_eq!(invalid_field("dataplane:\n  ports: []\n"), "dataplane.ports");
        assert_eq!(invalid_field("dataplane:\n  ports: [a, a]\n"), "dataplane.ports[1]");
        assert_eq!(invalid_field("dataplane:\n  ports: [a]\n  workers: 0\n"), "dataplane.workers");
        assert_eq!(
            invalid_field("dataplane:\n  ports: [a]\n  workers: 3\n  lcores: [1, 2]\n"),
            "dataplane.workers"
        );
        assert_eq!(invalid_field("dataplane:\n  ports: [a]\n  lcores: []\n"), "dataplane.lcores");
        assert_eq!(
            invalid_field("dataplane:\n  ports: [a]\n  lcores: [1, 1]\n"),
            "dataplane.lcores[1]"
        );
        assert_eq!(
            invalid_field("dataplane:\n  ports: [a]\n  burst_size: 65\n"),
            "dataplane.burst_size"
        );
        assert_eq!(
            invalid_field("dataplane:\n  ports: [a]\n  rx_queue_size: 8\n"),
            "dataplane.rx_queue_size"
        );
        assert_eq!(
            invalid_field("dataplane:\n  ports: [a]\n  mempool_size: 1000\n"),
            "dataplane.mempool_size"
        );
        assert_eq!(
            invalid_field("dataplane:\n  ports: [a]\n  mempool_cache_size: 1000\n"),
            "dataplane.mempool_cache_size"
        );
    }

    #[test]
    fn mempool_must_cover_all_queues() {
        // 2 ports x 2 workers x (1024 + 1024 + 64) + 3 x 256 + 2 x 64 = 9344 > 8191.
        let text = "dataplane:\n  ports: [a, b]\n  workers: 2\n";
        assert_eq!(invalid_field(text), "dataplane.mempool_size");
        let ok = "dataplane:\n  ports: [a, b]\n  workers: 2\n  mempool_size: 9344\n";
        assert!(parse(ok).is_ok());
        let short = ok.replace("9344", "9343");
        assert_eq!(invalid_field(&short), "dataplane.mempool_size");
    }

    #[test]
    fn load_names_missing_file() {
        let e = load("/nonexistent/spillway.yaml").unwrap_err();
        assert!(e.to_string().starts_with("/nonexistent/spillway.yaml: cannot read"), "{e}");
    }
}
