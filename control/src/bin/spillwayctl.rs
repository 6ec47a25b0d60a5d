//! `spillwayctl`: the operator CLI, a thin client of the daemon's admin API
//! (`spillway_control::api`), plus the offline `simulate` tool. Tables for people, `--json`
//! for scripts (the API's reply, pretty-printed). `docs/operations.md` is the reference.
//!
//! Exit codes: 0 success, 1 the daemon answered with an error, 2 bad usage, 3 the daemon is
//! unreachable or did not answer in time.

#![forbid(unsafe_code)]

use clap::{Args, Parser, Subcommand};
use hyper::Method;
use spillway_control::api::client::{Client, ClientError};
use spillway_control::api::types::*;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

/// Operate a running spillway daemon through its admin API.
#[derive(Debug, Parser)]
#[command(name = "spillwayctl", version)]
struct Cli {
    /// The daemon's admin endpoint (`admin.listen`): `unix:/path` or `host:port`.
    #[arg(
        long,
        global = true,
        env = "SPILLWAY_ADMIN",
        default_value = spillway_control::config::DEFAULT_ADMIN_LISTEN
    )]
    admin: String,
    /// A file whose first line is the API token (`admin.token_file`), sent as
    /// `Authorization: Bearer ...`.
    #[arg(long, global = true, env = "SPILLWAY_TOKEN_FILE", value_name = "FILE")]
    token_file: Option<std::path::PathBuf>,
    /// Print the API's JSON reply instead of a table.
    #[arg(long, global = true)]
    json: bool,
    /// Seconds to wait for the daemon's reply.
    #[arg(long, global = true, default_value_t = 10.0, value_name = "SECS")]
    timeout: f64,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Uptime, snapshot generation, workers, services, backend health, conntrack entries.
    Status,
    /// Services: rules, policy, eligible set kind and size, zonal match and spill per zone.
    Services,
    /// Backends: role, probe verdict, override, effective health, drain state, weight, slot.
    Backends {
        /// Only this service's backends.
        #[arg(long)]
        service: Option<String>,
    },
    /// Override a backend's health (HC-2); `auto` returns it to its health checks.
    SetHealth {
        /// Backend address.
        addr: String,
        /// `healthy`, `unhealthy` or `auto`.
        #[arg(value_parser = ["healthy", "unhealthy", "auto"])]
        health: String,
        /// Only the backend of this service (default: every service's backend at ADDR).
        #[arg(long)]
        service: Option<String>,
    },
    /// Drain a backend: no new connections; existing connections keep their entries.
    Drain {
        /// Backend address.
        addr: String,
        /// Only the backend of this service.
        #[arg(long)]
        service: Option<String>,
    },
    /// Undo `drain`.
    Undrain {
        /// Backend address.
        addr: String,
        /// Only the backend of this service.
        #[arg(long)]
        service: Option<String>,
    },
    /// Re-read the configuration file; an invalid file changes nothing (NX-3).
    Reload,
    /// Resolved next hops (backends on-link, gateways) and what the resolver did with the
    /// ARP replies and neighbour advertisements it heard.
    Neighbours,
    /// Connection-table statistics per worker.
    Conntrack,
    /// Find one flow's connection-table entry on every worker.
    Lookup(Flow),
    /// Explain where one flow goes now and why.
    Explain {
        #[command(flatten)]
        flow: Flow,
        /// Explain a TCP SYN opening a new connection (CT-2) instead of a packet of an
        /// established one.
        #[arg(long)]
        syn: bool,
    },
    /// Print the daemon's Prometheus metrics.
    Metrics,
    /// The instance in its fleet: phase, VIPs wanted and announced, BIRD, table fingerprints.
    Instance,
    /// Withdraw every VIP of this instance (the routers move its traffic to the others); it
    /// keeps forwarding what still arrives.
    DrainInstance {
        /// Wait until traffic has stopped arriving (no packet for `announce.quiet_sec`).
        #[arg(long)]
        wait: bool,
        /// With --wait: give up (exit 3) after this many seconds.
        #[arg(long, default_value_t = 60.0)]
        wait_timeout: f64,
    },
    /// Announce this instance's VIPs again (once it is ready).
    UndrainInstance,
    /// Compare the table fingerprints of several instances (their admin endpoints; the same
    /// --token-file for all): exit 1 when a service's tables differ, naming it.
    Compare {
        /// Admin endpoints (`unix:/path` or `host:port`), at least two.
        #[arg(required = true, num_args = 2..)]
        admins: Vec<String>,
    },
    /// Run a scenario through the decision core offline (no daemon needed).
    Simulate(spillway_control::simulate::SimulateArgs),
}

/// One flow, as a client sends it.
#[derive(Debug, Args)]
struct Flow {
    /// Client (source) address.
    #[arg(long)]
    src: String,
    /// Destination address (the VIP).
    #[arg(long)]
    dst: String,
    /// `tcp`, `udp`, `icmp`, `icmpv6` or a protocol number.
    #[arg(long, default_value = "tcp")]
    proto: String,
    /// Source port (tcp, udp).
    #[arg(long)]
    sport: Option<u16>,
    /// Destination port (tcp, udp).
    #[arg(long)]
    dport: Option<u16>,
}

impl Flow {
    fn query(&self, syn: bool) -> String {
        let mut q =
            format!("src={}&dst={}&proto={}", enc(&self.src), enc(&self.dst), enc(&self.proto));
        if let Some(p) = self.sport {
            let _ = write!(q, "&sport={p}");
        }
        if let Some(p) = self.dport {
            let _ = write!(q, "&dport={p}");
        }
        if syn {
            q.push_str("&syn=true");
        }
        q
    }
}

/// Percent-encode a query value or path segment (addresses only need `:` `%` kept safe).
fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'~' | b':') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Simulate(args) = &cli.command {
        return spillway_control::simulate::main(args);
    }
    if let Command::Compare { admins } = &cli.command {
        return compare(&cli, admins);
    }
    let timeout = Duration::try_from_secs_f64(cli.timeout).unwrap_or(Duration::from_secs(10));
    let client = match Client::new(&cli.admin, timeout) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("spillwayctl: --admin: {e}");
            return ExitCode::from(2);
        }
    };
    let client = match &cli.token_file {
        Some(path) => match spillway_control::api::read_token(path) {
            Ok(t) => client.with_token(Some(t)),
            Err(e) => {
                eprintln!("spillwayctl: --token-file: {e}");
                return ExitCode::from(2);
            }
        },
        None => client,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("spillwayctl: cannot start the I/O runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&cli, &client)) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            let code = match &e {
                ClientError::Status { .. } | ClientError::Json(_) | ClientError::Http { .. } => 1,
                ClientError::BadAddress(_) => 2,
                ClientError::Unreachable { .. } | ClientError::Timeout(_) => 3,
            };
            match &e {
                ClientError::Unreachable { .. } => eprintln!(
                    "spillwayctl: {e}\n(is the daemon running? pass --admin or set SPILLWAY_ADMIN \
                     to its admin.listen)"
                ),
                ClientError::Status { body, .. } if cli.json => eprintln!("{}", pretty(body)),
                _ => eprintln!("spillwayctl: {e}"),
            }
            ExitCode::from(code)
        }
    }
}

/// Run one command; the text to print.
async fn run(cli: &Cli, client: &Client) -> Result<String, ClientError> {
    let get = |path: String| async move { client.call(Method::GET, &path, None).await };
    let post = |path: String, body: Option<serde_json::Value>| async move {
        client.call(Method::POST, &path, body.as_ref()).await
    };
    let body = match &cli.command {
        Command::Status => get("/v1/status".into()).await?,
        Command::Services => get("/v1/services".into()).await?,
        Command::Backends { service } => match service {
            Some(s) => get(format!("/v1/backends?service={}", enc(s))).await?,
            None => get("/v1/backends".into()).await?,
        },
        Command::SetHealth { addr, health, service } => {
            let req = HealthRequest { health: Some(health.clone()), service: service.clone() };
            post(format!("/v1/backends/{}/health", enc(addr)), Some(serde_json::to_value(req)?))
                .await?
        }
        Command::Drain { addr, service } | Command::Undrain { addr, service } => {
            let verb =
                if matches!(cli.command, Command::Drain { .. }) { "drain" } else { "undrain" };
            let req = DrainRequest { service: service.clone() };
            post(format!("/v1/backends/{}/{verb}", enc(addr)), Some(serde_json::to_value(req)?))
                .await?
        }
        Command::Reload => post("/v1/reload".into(), None).await?,
        Command::Neighbours => get("/v1/neighbours".into()).await?,
        Command::Conntrack => get("/v1/conntrack".into()).await?,
        Command::Lookup(flow) => get(format!("/v1/conntrack/lookup?{}", flow.query(false))).await?,
        Command::Explain { flow, syn } => get(format!("/v1/explain?{}", flow.query(*syn))).await?,
        Command::Metrics => return get("/metrics".into()).await,
        Command::Instance => get("/v1/instance".into()).await?,
        Command::DrainInstance { wait, wait_timeout } => {
            let body = post("/v1/instance/drain".into(), None).await?;
            if !*wait {
                body
            } else {
                wait_drained(client, &body, *wait_timeout, cli.json).await?
            }
        }
        Command::UndrainInstance => post("/v1/instance/undrain".into(), None).await?,
        Command::Simulate(_) | Command::Compare { .. } => unreachable!("handled in main"),
    };
    if cli.json {
        return Ok(format!("{}\n", pretty(&body)));
    }
    Ok(match &cli.command {
        Command::Status => show_status(&serde_json::from_str(&body)?),
        Command::Services => show_services(&serde_json::from_str(&body)?),
        Command::Backends { .. } => {
            let r: BackendsReply = serde_json::from_str(&body)?;
            backends_table(&r.backends)
        }
        Command::SetHealth { .. } | Command::Drain { .. } | Command::Undrain { .. } => {
            let r: ActionReply = serde_json::from_str(&body)?;
            format!("{}snapshot generation {}\n", backends_table(&r.backends), r.generation)
        }
        Command::Reload => show_reload(&serde_json::from_str(&body)?),
        Command::Neighbours => show_neighbours(&serde_json::from_str(&body)?),
        Command::Conntrack => show_conntrack(&serde_json::from_str(&body)?),
        Command::Lookup(_) => show_lookup(&serde_json::from_str(&body)?),
        Command::Explain { .. } => show_explain(&serde_json::from_str(&body)?),
        Command::Instance | Command::DrainInstance { .. } | Command::UndrainInstance => {
            show_instance(&serde_json::from_str(&body)?)
        }
        Command::Metrics | Command::Simulate(_) | Command::Compare { .. } => body,
    })
}

/// Polls `GET /v1/instance` until traffic has stopped arriving; returns the last reply, with
/// how long it took. A timeout is an error (exit 4).
async fn wait_drained(
    client: &Client,
    first: &str,
    timeout: f64,
    json: bool,
) -> Result<String, ClientError> {
    let start = std::time::Instant::now();
    let limit = Duration::try_from_secs_f64(timeout).unwrap_or(Duration::from_secs(60));
    let mut body = first.to_owned();
    loop {
        let r: InstanceReply = serde_json::from_str(&body)?;
        if r.traffic_stopped {
            if !json {
                eprintln!(
                    "spillwayctl: traffic stopped arriving; drained in {:.1} s",
                    start.elapsed().as_secs_f64()
                );
            }
            return Ok(body);
        }
        if start.elapsed() >= limit {
            return Err(ClientError::Timeout(format!(
                "traffic still arriving after {:.0} s (--wait-timeout)",
                limit.as_secs_f64()
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        body = client.call(Method::GET, "/v1/instance", None).await?;
    }
}

fn show_instance(r: &InstanceReply) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "phase        {} (for {:.1} s)", r.phase, r.in_phase_sec);
    if let Some(w) = &r.waiting_for {
        let _ = writeln!(out, "waiting for  {w}");
    }
    let _ = writeln!(
        out,
        "traffic      last packet forwarded {:.1} s ago{}",
        r.quiet_for_sec,
        if r.traffic_stopped { ": stopped arriving" } else { "" }
    );
    let rows: Vec<Vec<String>> = r
        .wanted
        .keys()
        .chain(r.announced.iter().filter(|a| !r.wanted.contains_key(*a)))
        .map(|vip| {
            vec![
                vip.clone(),
                r.wanted.get(vip).map(|s| s.join(",")).unwrap_or_else(|| "-".into()),
                if r.announced.contains(vip) { "yes" } else { "no" }.into(),
            ]
        })
        .collect();
    if rows.is_empty() {
        let _ = writeln!(out, "announced    nothing");
    } else {
        out.push_str(&table(&["vip", "wanted by", "announced"], &rows));
    }
    if r.sync_errors > 0 || r.last_error.is_some() {
        let _ = writeln!(
            out,
            "route table  {} failed update(s){}",
            r.sync_errors,
            r.last_error.as_ref().map(|e| format!("; now: {e}")).unwrap_or_default()
        );
    }
    if let Some(b) = &r.bird {
        let _ = writeln!(out, "bird         {}: {}", if b.up { "up" } else { "DOWN" }, b.detail);
    }
    let rows: Vec<Vec<String>> =
        r.fingerprints.iter().map(|(s, f)| vec![s.clone(), f.clone()]).collect();
    out.push_str(&table(&["service", "table fingerprint"], &rows));
    out
}

/// `spillwayctl compare A B ...`: every instance's fingerprints side by side; exit 1 when
/// they differ (or a service is missing somewhere), 3 when an instance does not answer.
fn compare(cli: &Cli, admins: &[String]) -> ExitCode {
    let timeout = Duration::try_from_secs_f64(cli.timeout).unwrap_or(Duration::from_secs(10));
    let token = match &cli.token_file {
        Some(path) => match spillway_control::api::read_token(path) {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("spillwayctl: --token-file: {e}");
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
        eprintln!("spillwayctl: cannot start the I/O runtime");
        return ExitCode::FAILURE;
    };
    let mut replies: Vec<InstanceReply> = Vec::new();
    for admin in admins {
        let client = match Client::new(admin, timeout) {
            Ok(c) => c.with_token(token.clone()),
            Err(e) => {
                eprintln!("spillwayctl: {admin}: {e}");
                return ExitCode::from(2);
            }
        };
        let got = runtime.block_on(client.call(Method::GET, "/v1/instance", None));
        match got.and_then(|b| serde_json::from_str(&b).map_err(ClientError::from)) {
            Ok(r) => replies.push(r),
            Err(e) => {
                eprintln!("spillwayctl: {admin}: {e}");
                return ExitCode::from(3);
            }
        }
    }
    let services: std::collections::BTreeSet<&String> =
        replies.iter().flat_map(|r| r.fingerprints.keys()).collect();
    let mut header = vec!["service"];
    header.extend(admins.iter().map(String::as_str));
    header.push("agree");
    let mut differ = Vec::new();
    let rows: Vec<Vec<String>> = services
        .iter()
        .map(|svc| {
            let values: Vec<Option<&String>> =
                replies.iter().map(|r| r.fingerprints.get(*svc)).collect();
            let agree = values.iter().all(|v| v.is_some() && *v == values[0]);
            if !agree {
                differ.push((*svc).clone());
            }
            let mut row = vec![(*svc).clone()];
            row.extend(values.iter().map(|v| v.cloned().unwrap_or_else(|| "(none)".into())));
            row.push(if agree { "yes" } else { "NO" }.into());
            row
        })
        .collect();
    if cli.json {
        let out = serde_json::json!({
            "instances": admins,
            "fingerprints": replies.iter().map(|r| &r.fingerprints).collect::<Vec<_>>(),
            "differ": differ,
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    } else {
        print!("{}", table(&header, &rows));
    }
    if differ.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "spillwayctl: the instances' tables differ for {}: a flow that ECMP moves between \
             them may change backend (check the configuration, dataplane.hash_seed and the \
             health verdicts: `spillwayctl backends` on each)",
            differ.join(", ")
        );
        ExitCode::from(1)
    }
}

fn show_neighbours(r: &NeighboursReply) -> String {
    let rows: Vec<Vec<String>> =
        r.neighbours.iter().map(|n| vec![n.addr.clone(), n.mac.clone()]).collect();
    let mut out = table(&["next hop", "mac"], &rows);
    let answers: Vec<String> = r.answers.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(out, "answers: {}", answers.join(", "));
    out
}

fn pretty(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_else(|_| body.trim_end().to_owned())
}

/// Columns aligned on the widest cell, two spaces apart.
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut l = String::new();
        for (i, c) in cells.enumerate() {
            if i > 0 {
                l.push_str("  ");
            }
            let _ = write!(l, "{c:<width$}", width = widths[i]);
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for r in rows {
        line(&mut r.iter().map(String::as_str));
    }
    out
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "-".to_owned(), ToString::to_string)
}

fn yes(b: bool) -> String {
    if b { "yes" } else { "no" }.to_owned()
}

fn duration_ms(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=59 => format!("{}.{:03}s", s, ms % 1000),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m{:02}s", s / 3600, s / 60 % 60, s % 60),
    }
}

fn show_status(s: &StatusReply) -> String {
    let b = &s.backends;
    table(
        &["FIELD", "VALUE"],
        &[
            vec!["uptime".into(), duration_ms(s.uptime_ms)],
            vec!["generation".into(), s.generation.to_string()],
            vec!["config".into(), s.config.clone()],
            vec!["workers".into(), s.workers.to_string()],
            vec![
                "services".into(),
                if s.advanced_services == 0 {
                    s.services.to_string()
                } else {
                    format!(
                        "{} ({} advanced, {} group(s) auto-drained)",
                        s.services, s.advanced_services, s.auto_drained_groups
                    )
                },
            ],
            vec![
                "backends".into(),
                format!(
                    "{}/{} healthy, {} drained, {} draining",
                    b.healthy, b.total, b.drained, b.draining
                ),
            ],
            vec![
                "conntrack".into(),
                format!("{} entries, capacity {}", s.conntrack.entries, s.conntrack.capacity),
            ],
        ],
    )
}

fn show_services(r: &ServicesReply) -> String {
    let rows: Vec<Vec<String>> = r
        .services
        .iter()
        .map(|s| {
            let p = &s.policy;
            vec![
                s.name.clone(),
                s.id.to_string(),
                s.eligible_kind.clone(),
                s.eligible_size.to_string(),
                p.session_affinity.clone(),
                p.tracking_mode.clone(),
                match p.spillover_ratio {
                    Some(r) => {
                        format!("{} {r}", p.zonal_affinity.trim_start_matches("ZONAL_AFFINITY_"))
                    }
                    None => p.zonal_affinity.trim_start_matches("ZONAL_AFFINITY_").to_owned(),
                },
                s.rules
                    .iter()
                    .map(|r| format!("{} {} {}", r.destination, r.protocol, r.ports))
                    .collect::<Vec<_>>()
                    .join("; "),
            ]
        })
        .collect();
    let mut out = table(
        &["SERVICE", "ID", "ELIGIBLE", "SIZE", "AFFINITY", "TRACKING", "ZONAL", "RULES"],
        &rows,
    );
    let zones: Vec<Vec<String>> = r
        .services
        .iter()
        .flat_map(|s| {
            s.zones.iter().filter(|_| s.policy.zonal_affinity != "ZONAL_AFFINITY_DISABLED").map(
                move |z| {
                    vec![
                        s.name.clone(),
                        z.zone.clone(),
                        yes(z.zonal_match),
                        yes(z.spilled),
                        z.size.to_string(),
                    ]
                },
            )
        })
        .collect();
    if !zones.is_empty() {
        out.push('\n');
        out.push_str(&table(&["SERVICE", "CLIENT ZONE", "ZONAL MATCH", "SPILLED", "SIZE"], &zones));
    }
    for s in &r.services {
        if let Some(a) = &s.advanced {
            out.push('\n');
            out.push_str(&show_advanced(&s.name, a));
        }
    }
    out
}

/// A number with at most 3 decimals, trailing zeros dropped.
fn num(v: f64) -> String {
    let t = format!("{v:.3}");
    let t = t.trim_end_matches('0').trim_end_matches('.');
    if t == "-0" { "0" } else { t }.to_owned()
}

fn percent(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// Section 7 of one service: its groups, then each client zone's split.
fn show_advanced(service: &str, a: &AdvancedInfo) -> String {
    let unit = match a.unit.as_str() {
        "new_connections_per_second" => "new conn/s",
        other => other,
    };
    let mut out = format!(
        "{service}: advanced {}, failover threshold {}%, loads in {unit}\n",
        a.algorithm, a.failover_health_threshold
    );
    let rows: Vec<Vec<String>> = a
        .groups
        .iter()
        .map(|g| {
            vec![
                format!("{}{}", g.name, if g.preferred { " (preferred)" } else { "" }),
                g.zone.clone(),
                format!("{}/{}", g.healthy, g.endpoints),
                g.capacity.map_or_else(|| "unbounded".to_owned(), num),
                num(g.measured),
                num(g.expected_load),
                g.utilisation.map_or_else(|| "-".to_owned(), percent),
                yes(g.auto_drained),
                percent(g.retained),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "GROUP",
            "ZONE",
            "HEALTHY",
            "CAPACITY",
            "MEASURED",
            "EXPECTED",
            "UTILISATION",
            "DRAINED",
            "RETAINED",
        ],
        &rows,
    ));
    let rows: Vec<Vec<String>> = a
        .clients
        .iter()
        .map(|c| {
            vec![
                c.zone.clone().unwrap_or_else(|| "(no zone)".to_owned()),
                num(c.demand),
                split(a, &c.shares),
            ]
        })
        .collect();
    out.push_str(&table(&["CLIENT ZONE", "DEMAND", "SPLIT"], &rows));
    out
}

/// `{group: share}` as `g1 60.0%, g2 40.0%` in the groups' order (zero shares left out).
fn split(a: &AdvancedInfo, shares: &std::collections::BTreeMap<String, f64>) -> String {
    let parts: Vec<String> = a
        .groups
        .iter()
        .filter_map(|g| shares.get(&g.name).filter(|w| **w > 0.0).map(|w| (g, w)))
        .map(|(g, w)| format!("{} {}", g.name, percent(*w)))
        .collect();
    if parts.is_empty() {
        "none (falls back to the eligible set)".to_owned()
    } else {
        parts.join(", ")
    }
}

fn backends_table(b: &[BackendInfo]) -> String {
    let rows: Vec<Vec<String>> = b
        .iter()
        .map(|b| {
            vec![
                b.service.clone(),
                if b.port == 0 { b.address.clone() } else { format!("{}:{}", b.address, b.port) },
                b.group.clone(),
                b.zone.clone(),
                b.role.clone(),
                b.probe.clone(),
                b.health_override.clone(),
                if b.healthy { "healthy" } else { "unhealthy" }.to_owned(),
                yes(b.drained),
                match b.draining_remaining_ms {
                    Some(ms) => format!("draining ({} left)", duration_ms(ms)),
                    None => b.status.clone(),
                },
                opt(&b.weight),
                b.slot.to_string(),
                yes(b.eligible),
            ]
        })
        .collect();
    table(
        &[
            "SERVICE", "BACKEND", "GROUP", "ZONE", "ROLE", "PROBE", "OVERRIDE", "HEALTH",
            "DRAINED", "STATUS", "WEIGHT", "SLOT", "ELIGIBLE",
        ],
        &rows,
    )
}

fn show_reload(r: &ReloadReply) -> String {
    let mut out =
        format!("configuration reloaded: generation {}, {} service(s)\n", r.generation, r.services);
    for a in &r.added {
        let _ = writeln!(out, "  added      {a}");
    }
    for a in &r.removed {
        let _ = writeln!(
            out,
            "  removed    {} (draining until {})",
            a.backend,
            duration_ms(a.draining_deadline_ms)
        );
    }
    for a in &r.undrained {
        let _ = writeln!(out, "  re-added   {a} (was draining: connections kept)");
    }
    if r.added.is_empty() && r.removed.is_empty() && r.undrained.is_empty() {
        out.push_str("  no backend added or removed\n");
    }
    out
}

fn show_conntrack(r: &ConntrackReply) -> String {
    let row = |w: String, c: &WorkerConntrack| {
        vec![
            w,
            c.entries.to_string(),
            c.capacity.to_string(),
            c.inserts.to_string(),
            c.evictions.to_string(),
        ]
    };
    let mut rows: Vec<Vec<String>> =
        r.workers.iter().map(|w| row(w.worker.to_string(), w)).collect();
    rows.push(row("total".into(), &r.total));
    table(&["WORKER", "ENTRIES", "CAPACITY", "INSERTS", "EVICTIONS"], &rows)
}

fn show_lookup(r: &FlowLookupReply) -> String {
    let mut out = format!(
        "flow          {}\nservice       {}\ntracking key  {}\n\n",
        r.flow, r.service, r.tracking_key
    );
    let rows: Vec<Vec<String>> = r
        .workers
        .iter()
        .map(|w| match &w.entry {
            Some(e) => vec![
                w.worker.to_string(),
                w.state.clone(),
                opt(&e.backend),
                e.idle_ms.to_string(),
                format!(
                    "{}/{}{}",
                    e.slot,
                    e.generation,
                    if e.current_generation { "" } else { " (stale)" }
                ),
                e.epoch.to_string(),
            ],
            None => vec![
                w.worker.to_string(),
                w.state.clone(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ],
        })
        .collect();
    out.push_str(&table(&["WORKER", "STATE", "BACKEND", "IDLE_MS", "SLOT/GEN", "EPOCH"], &rows));
    out
}

fn show_explain(x: &ExplainReply) -> String {
    let entry = match &x.entry {
        Some(e) => format!(
            "{} on worker {}, idle {} ms: {}",
            opt(&e.entry.backend),
            e.worker,
            e.entry.idle_ms,
            match &e.invalid_reason {
                None => "valid".to_owned(),
                Some(r) => format!("invalid ({r})"),
            }
        ),
        None if x.new_connection_syn => "not looked up (new-connection SYN, CT-2)".to_owned(),
        None => format!("none ({} of {} worker(s) answered)", x.workers_answered, x.workers_asked),
    };
    let mut rows = vec![
        vec!["flow".into(), x.flow.clone()],
        vec!["service".into(), opt(&x.service)],
        vec!["client zone".into(), opt(&x.client_zone)],
        vec!["eligible set".into(), opt(&x.eligible_kind)],
        vec!["zonal match".into(), yes(x.zonal_match)],
        vec!["spilled".into(), yes(x.spilled)],
        vec!["final set size".into(), x.eligible_size.to_string()],
        vec!["tracking key".into(), opt(&x.tracking_key)],
        vec!["hashed backend".into(), opt(&x.hashed_backend)],
        vec!["entry".into(), entry],
        vec!["backend now".into(), opt(&x.backend)],
        vec!["reason".into(), x.reason.clone()],
        vec!["generation".into(), x.generation.to_string()],
    ];
    if let Some(shares) = &x.group_shares {
        let mut parts: Vec<(&String, &f64)> = shares.iter().filter(|(_, w)| **w > 0.0).collect();
        parts.sort_by(|a, b| b.1.total_cmp(a.1).then_with(|| a.0.cmp(b.0)));
        let text: Vec<String> =
            parts.iter().map(|(g, w)| format!("{g} {}", percent(**w))).collect();
        let text = if text.is_empty() {
            "none (falls back to the eligible set)".into()
        } else {
            text.join(", ")
        };
        // After "final set size" and after "backend now".
        rows.insert(11, vec!["backend group".into(), opt(&x.backend_group)]);
        rows.insert(7, vec!["advanced split".into(), text]);
    }
    table(&["FIELD", "VALUE"], &rows)
}
