//! `spillway`: the load balancer daemon, and the composition root of Spillway's crates.
//!
//! - `main` (here): the command line and logging;
//! - [`run`]: the life cycle, top to bottom: data plane resources, control plane, workers,
//!   run, report, teardown;
//! - [`control_loop`]: what the main lcore does while the workers run;
//! - [`view`]: what the control plane may see of the workers.
//!
//! The data plane (`spillway-dataplane`, DPDK) and the control plane (`spillway-control`,
//! tokio) do not know each other; they meet here and in the shared core's snapshot publication
//! and conntrack mailboxes.

#![forbid(unsafe_code)]

mod control_loop;
mod run;
mod view;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use run::Options;

/// Spillway: a DPDK poll-mode L4 load balancer.
#[derive(Debug, Parser)]
#[command(name = "spillway", version)]
struct Args {
    /// The YAML configuration file.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Seconds between live counter lines; 0 disables them.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    stats_interval: f64,
    /// Stop by itself after this many seconds (for tests and benchmarks).
    #[arg(long, value_name = "SECS")]
    duration: Option<f64>,
}

fn seconds(flag: &str, secs: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(secs)
        .map_err(|_| anyhow::anyhow!("--{flag}: {secs} is not a valid number of seconds"))
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let result = (|| -> anyhow::Result<()> {
        let options = Options {
            config: args.config.clone(),
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
