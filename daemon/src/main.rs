//! `spillway`: the load balancer daemon, and the composition root of Spillway's crates.
//!
//! - `main` (here): the command line and logging;
//! - [`check`]: `spillway check`, the preflight (reads the config, /proc and /sys; no EAL);
//! - [`run`]: the life cycle, top to bottom: data plane resources, control plane, workers,
//!   run, report, teardown;
//! - [`control_loop`]: what the main lcore does while the workers run;
//! - [`view`]: what the control plane may see of the workers;
//! - [`systemd`]: readiness and the watchdog under systemd.
//!
//! The data plane (`spillway-dataplane`, DPDK) and the control plane (`spillway-control`,
//! tokio) do not know each other; they meet here and in the core crate's snapshot publication
//! and conntrack mailboxes.

#![forbid(unsafe_code)]

mod check;
mod control_loop;
mod kernel;
mod run;
mod systemd;
mod view;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use run::Options;

/// Spillway: a DPDK poll-mode L4 load balancer.
///
/// Without a command it runs the daemon; `spillway check` is the preflight.
#[derive(Debug, Parser)]
#[command(
    name = "spillway",
    version,
    subcommand_negates_reqs = true,
    args_conflicts_with_subcommands = true
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// The YAML configuration file.
    #[arg(long, value_name = "FILE", required = true)]
    config: Option<PathBuf>,
    /// Seconds between live counter lines; 0 disables them.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    stats_interval: f64,
    /// Stop by itself after this many seconds (for tests and benchmarks).
    #[arg(long, value_name = "SECS")]
    duration: Option<f64>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Preflight: what can be known before starting the daemon, without starting DPDK.
    ///
    /// Checks hugepages and memory, ports and their drivers, lcores and CPU isolation, the MTU
    /// and the admin endpoint, one `PASS|WARN|FAIL  topic: what [— fix: how]` line each
    /// (docs/deployment.md). Exit status 0: no FAIL; 1: a FAIL; 2: the configuration is
    /// unreadable or invalid.
    Check(check::CheckArgs),
}

fn seconds(flag: &str, secs: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(secs)
        .map_err(|_| anyhow::anyhow!("--{flag}: {secs} is not a valid number of seconds"))
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter({
            let filter = tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
            // The netlink crate warns about every kernel attribute newer than itself (while
            // reading interface statistics Spillway never uses): not the operator's concern.
            match "netlink_packet_route=error".parse() {
                Ok(quiet) => filter.add_directive(quiet),
                Err(_) => filter,
            }
        })
        .init();
    let args = Args::parse();
    if let Some(Command::Check(check)) = &args.command {
        return ExitCode::from(check::run(check));
    }
    let result = (|| -> anyhow::Result<()> {
        let options = Options {
            config: args.config.clone().expect("clap requires --config without a command"),
            stats_interval: seconds("stats-interval", args.stats_interval)?,
            duration: args.duration.map(|d| seconds("duration", d)).transpose()?,
        };
        run::run(&options)?;
        Ok(())
    })();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Every error type here carries its causes in its own message.
            eprintln!("spillway: error: {e}");
            ExitCode::FAILURE
        }
    }
}
