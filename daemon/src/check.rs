//! `spillway check --config FILE [--json]`: the preflight. It reports what can be known about a
//! configuration on this host before the daemon starts, without starting EAL (so it runs
//! beside a running daemon, and without root): it reads the configuration, `/proc` and `/sys`.
//!
//! Each finding is one line, `PASS|WARN|FAIL  <topic>: <what> [— fix: <how>]`, and its message
//! names the configuration field it is about; `--json` prints
//! `{"verdict": "pass|warn|fail", "findings": [{"level", "topic", "message", "fix"}, ...]}`.
//! Exit status: 0 without a FAIL, 1 with one, 2 when the file is unreadable or invalid (its
//! errors are then also printed as the daemon prints them). What each check means and how to
//! fix what it finds: `docs/deployment.md`.
//!
//! The checks, one submodule each, read the host through a [`Host`] (the roots of `/sys`,
//! `/proc` and `/`; tests point them at a fake tree with the hidden `--sys`, `--proc` and
//! `--root` options): `memory` (hugepages, hugetlbfs, `-m`/`--socket-mem` against the
//! estimated DPDK memory; the connection tables), `lcores`, `ports` (vdevs, PCI drivers, IOMMU,
//! NUMA), `mtu`, `admin` and `fleet` (the exception interface's name, BIRD's socket, the
//! sync key file and peers, the table file's directory).
//!
//! The memory estimate: `mempool_size` x 2,368 B (`RTE_MBUF_DEFAULT_BUF_SIZE` = 2,048 B of
//! data room and 128 B of headroom, the 128-byte `struct rte_mbuf`, the mempool's 64-byte
//! object header), plus (`rx_queue_size` + `tx_queue_size`) x ports x workers x 64 B of
//! descriptors, plus a fixed 64 MiB for EAL. Less than the mbufs and descriptors is a FAIL,
//! less than the whole estimate a WARN. Connection tables are not DPDK memory but ordinary
//! (THP-backed) allocations: `conntrack_capacity` (rounded up to a power of two buckets of 16
//! entries) x 68 B per worker.

mod admin;
mod fleet;
mod host;
mod lcores;
pub(crate) mod memory;
mod mtu;
mod ports;

use std::fmt;
use std::path::{Path, PathBuf};

use spillway_control::config::{self, Config};
use spillway_dataplane::dpdk::eal_args as eal;
use spillway_dataplane::dpdk::memory::page_name;

pub use host::Host;

/// The command line of `spillway check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The YAML configuration file.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Print one JSON document instead of lines.
    #[arg(long)]
    pub json: bool,
    /// Where /sys is (tests).
    #[arg(long, hide = true, default_value = "/sys")]
    pub sys: PathBuf,
    /// Where /proc is (tests).
    #[arg(long, hide = true, default_value = "/proc")]
    pub proc: PathBuf,
    /// Where / is, for the absolute paths of the config and of mount points (tests).
    #[arg(long, hide = true, default_value = "/")]
    pub root: PathBuf,
}

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Fine (or information).
    Pass,
    /// Works, but not as it should in production.
    Warn,
    /// The daemon will not start, or will not work.
    Fail,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::Pass => "pass",
            Level::Warn => "warn",
            Level::Fail => "fail",
        }
    }
}

/// One finding: a line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// How bad.
    pub level: Level,
    /// What it is about: `config`, `eal`, `hugepages`, `memory`, `conntrack`, `port`, `lcore`,
    /// `mtu`, `admin`.
    pub topic: &'static str,
    /// What was found, starting with the configuration field.
    pub message: String,
    /// How to fix it.
    pub fix: Option<String>,
}

impl Finding {
    fn new(level: Level, topic: &'static str, message: impl Into<String>) -> Finding {
        Finding { level, topic, message: message.into(), fix: None }
    }

    /// A PASS finding.
    pub fn pass(topic: &'static str, message: impl Into<String>) -> Finding {
        Finding::new(Level::Pass, topic, message)
    }

    /// A WARN finding.
    pub fn warn(topic: &'static str, message: impl Into<String>) -> Finding {
        Finding::new(Level::Warn, topic, message)
    }

    /// A FAIL finding.
    pub fn fail(topic: &'static str, message: impl Into<String>) -> Finding {
        Finding::new(Level::Fail, topic, message)
    }

    /// With a fix.
    pub fn fix(mut self, fix: impl Into<String>) -> Finding {
        self.fix = Some(fix.into());
        self
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}  {}: {}", self.level.name().to_uppercase(), self.topic, self.message)?;
        match &self.fix {
            Some(fix) => write!(f, " — fix: {fix}"),
            None => Ok(()),
        }
    }
}

/// The worst level of `findings` (pass when empty).
pub fn verdict(findings: &[Finding]) -> Level {
    findings.iter().map(|f| f.level).max().unwrap_or(Level::Pass)
}

/// Every finding for a valid configuration on `host`.
pub fn check(config: &Config, path: &Path, host: &Host) -> Vec<Finding> {
    let dp = &config.dataplane;
    let e = eal::EalArgs::parse(&dp.eal_args);
    let mode = if config.services.is_empty() {
        "io-forward (no services)".to_owned()
    } else {
        format!("load balancer, {} service(s)", config.services.len())
    };
    let mut out = vec![Finding::pass(
        "config",
        format!(
            "{}: valid: {mode}, {} port(s), {} worker(s)",
            path.display(),
            dp.ports.len(),
            dp.worker_count()
        ),
    )];
    for (option, value) in &e.bad {
        out.push(
            Finding::fail(
                "eal",
                format!("dataplane.eal_args: `{option} {value}` is not a value EAL accepts"),
            )
            .fix(format!("correct {option} (docs/deployment.md)")),
        );
    }
    out.extend(memory::check(config, &e, host));
    let (placement, lcore_findings) = lcores::check(dp, &e, host);
    out.extend(ports::check(config, &e, host, &placement));
    out.extend(lcore_findings);
    out.extend(mtu::check(config));
    out.extend(admin::check(config, host));
    out.extend(fleet::check(config, host));
    out
}

/// Runs `spillway check`; the process exit status.
pub fn run(args: &CheckArgs) -> u8 {
    let host = Host { sys: args.sys.clone(), proc: args.proc.clone(), root: args.root.clone() };
    // The file as the daemon reads it, but for the QUIC-LB key files, which get findings of
    // their own (with fixes) rather than a refusal.
    let parsed = std::fs::read_to_string(&args.config)
        .map_err(|source| config::ConfigError::Io { path: args.config.clone(), source })
        .and_then(|text| Config::from_yaml(&args.config, &text));
    let (findings, status) = match parsed {
        Ok(config) => {
            let findings = check(&config, &args.config, &host);
            let status = u8::from(verdict(&findings) == Level::Fail);
            (findings, status)
        }
        Err(e) => {
            // As the daemon prints it, and one FAIL line per error.
            eprintln!("spillway: error: {e}");
            (e.to_string().lines().map(|l| Finding::fail("config", l)).collect(), 2)
        }
    };
    if args.json {
        println!("{}", to_json(&findings));
    } else {
        for f in &findings {
            println!("{f}");
        }
        let count = |l| findings.iter().filter(|f| f.level == l).count();
        eprintln!(
            "spillway check: {} ({} FAIL, {} WARN, {} PASS)",
            verdict(&findings).name(),
            count(Level::Fail),
            count(Level::Warn),
            count(Level::Pass)
        );
    }
    status
}

/// The `--json` document.
pub fn to_json(findings: &[Finding]) -> String {
    #[derive(serde::Serialize)]
    struct Doc<'a> {
        verdict: &'static str,
        findings: Vec<Item<'a>>,
    }
    #[derive(serde::Serialize)]
    struct Item<'a> {
        level: &'static str,
        topic: &'a str,
        message: &'a str,
        fix: Option<&'a str>,
    }
    let doc = Doc {
        verdict: verdict(findings).name(),
        findings: findings
            .iter()
            .map(|f| Item {
                level: f.level.name(),
                topic: f.topic,
                message: &f.message,
                fix: f.fix.as_deref(),
            })
            .collect(),
    };
    serde_json::to_string_pretty(&doc).expect("the report serialises")
}

/// `n` bytes in MiB (or GiB from 10 GiB), for messages.
fn size(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let mib = bytes as f64 / MIB;
    if mib >= 10.0 * 1024.0 {
        format!("{:.1} GiB", mib / 1024.0)
    } else if mib >= 100.0 || mib.fract() == 0.0 {
        format!("{mib:.0} MiB")
    } else {
        format!("{mib:.1} MiB")
    }
}

/// `1 worker`, `2 workers`.
fn plural(n: u64, what: &str) -> String {
    if n == 1 {
        format!("{n} {what}")
    } else {
        format!("{n} {what}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finding_is_one_line_and_the_verdict_the_worst() {
        let f = Finding::fail("port", "dataplane.ports[0]: x").fix("do y");
        assert_eq!(f.to_string(), "FAIL  port: dataplane.ports[0]: x — fix: do y");
        assert_eq!(Finding::pass("lcore", "m").to_string(), "PASS  lcore: m");
        let all = [Finding::pass("a", "1"), Finding::warn("b", "2")];
        assert_eq!(verdict(&all), Level::Warn);
        assert_eq!(verdict(&[]), Level::Pass);
        let doc: serde_json::Value = serde_json::from_str(&to_json(&all)).unwrap();
        assert_eq!(doc["verdict"], "warn");
        assert_eq!(doc["findings"][1]["topic"], "b");
        assert_eq!(doc["findings"][0]["fix"], serde_json::Value::Null);
    }

    #[test]
    fn sizes_for_messages() {
        assert_eq!(size(64 << 20), "64 MiB");
        assert_eq!(size(19_398_656), "18.5 MiB");
        assert_eq!(size(512 << 20), "512 MiB");
        assert_eq!(size(24 << 30), "24.0 GiB");
    }
}
