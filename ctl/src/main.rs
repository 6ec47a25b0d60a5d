//! `spillwayctl`: the operator CLI, a thin client of the daemon's admin API
//! (`spillway_control::api`), plus the offline `simulate` tool. Tables for people, `--json`
//! for scripts (the API's reply, pretty-printed). `docs/operations.md` is the reference.
//!
//! Exit codes: 0 success, 1 the daemon answered with an error, 2 bad usage, 3 the daemon is
//! unreachable or did not answer in time.

#![forbid(unsafe_code)]

use clap::{Args, Parser, Subcommand};
use hyper::Method;
use spillway_api::client::{Client, ClientError};
use spillway_api::types::*;
use spillway_ctl::{render, top};
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
    /// Re-read the configuration file; an invalid file changes nothing (NX-3). With
    /// --dry-run FILE: what FILE would do to the tables and the live connections, applying
    /// nothing; exit 4 when it would drop connections.
    Reload {
        /// Preview this candidate configuration instead of reloading.
        #[arg(long, value_name = "FILE")]
        dry_run: Option<std::path::PathBuf>,
        /// With --dry-run: every service and backend, and example connections.
        #[arg(long)]
        verbose: bool,
    },
    /// Resolved next hops (backends on-link, gateways) and what the resolver did with the
    /// ARP replies and neighbour advertisements it heard.
    Neighbours,
    /// Connection-table statistics per worker.
    Conntrack,
    /// Find one flow's connection-table entry on every worker.
    Lookup(Flow),
    /// The connection table: every worker's entries that match the filters (read a slice at a
    /// time: a worker is never held for longer than one slice), the first --limit listed,
    /// every match counted. With --json, one JSON object per flow per line, then the totals.
    Flows(FlowsArgs),
    /// Capture packets as the workers see them, with what they decided: pcapng with one
    /// comment per packet (point, decision, service, backend, worker), for Wireshark, tshark
    /// or tcpdump. Stops at the first of --count, --duration and --bytes, or on Ctrl-C; the
    /// summary (packets per point, records lost to a full ring) goes to stderr.
    Capture(CaptureArgs),
    /// Explain where one flow goes now and why.
    Explain {
        #[command(flatten)]
        flow: Flow,
        /// Explain a TCP SYN opening a new connection (CT-2) instead of a packet of an
        /// established one.
        #[arg(long)]
        syn: bool,
        /// For a service with QUIC-LB: the destination connection ID of a short-header
        /// packet, in hex; shows its decode and where it sends a packet without an entry.
        #[arg(long, value_name = "HEX")]
        quic_cid: Option<String>,
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
    /// A live view, refreshed every second: per worker rx/tx Mpps, drops by reason and table
    /// fill; per service and backend new connections/s, packets/s, active entries, health and
    /// drain state; the instance's phase and VIPs. q or Ctrl-C quits.
    Top,
    /// Run a scenario through the decision core offline (no daemon needed).
    Simulate(spillway_control::simulate::SimulateArgs),
}

/// `spillwayctl flows`' filters.
#[derive(Debug, Args)]
struct FlowsArgs {
    /// Only flows to this VIP.
    #[arg(long)]
    vip: Option<String>,
    /// Only this service's flows.
    #[arg(long)]
    service: Option<String>,
    /// Only flows pinned to this backend (`address` or `address:port`).
    #[arg(long)]
    backend: Option<String>,
    /// Only flows from this client address or prefix (`198.18.10.0/24`).
    #[arg(long)]
    client: Option<String>,
    /// Only flows from this client port.
    #[arg(long)]
    sport: Option<u16>,
    /// Only flows to this VIP port.
    #[arg(long)]
    dport: Option<u16>,
    /// Only this protocol: `tcp`, `udp`, `icmp`, `icmpv6` or a number.
    #[arg(long)]
    proto: Option<String>,
    /// Only flows in this state.
    #[arg(long, value_parser = ["live", "draining", "expired"])]
    state: Option<String>,
    /// How many flows to list (every match is counted).
    #[arg(long, default_value_t = 1000)]
    limit: usize,
    /// Count the matches per backend or per service.
    #[arg(long, value_parser = ["backend", "service"])]
    count_by: Option<String>,
}

impl FlowsArgs {
    /// The query string of `GET /v1/conntrack/flows`.
    fn query(&self) -> String {
        let mut q = vec![format!("limit={}", self.limit)];
        for (name, v) in [("sport", self.sport), ("dport", self.dport)] {
            if let Some(v) = v {
                q.push(format!("{name}={v}"));
            }
        }
        for (name, v) in [
            ("vip", &self.vip),
            ("service", &self.service),
            ("backend", &self.backend),
            ("client", &self.client),
            ("proto", &self.proto),
            ("state", &self.state),
            ("count_by", &self.count_by),
        ] {
            if let Some(v) = v {
                q.push(format!("{name}={}", enc(v)));
            }
        }
        q.join("&")
    }
}

/// `spillwayctl capture`'s filters, points and bounds.
#[derive(Debug, Args)]
struct CaptureArgs {
    /// Where to write the pcapng: a file, or `-` for standard output (`| tshark -r -`).
    #[arg(short = 'w', long = "write", value_name = "FILE")]
    write: String,
    /// Only packets to this VIP (destination address).
    #[arg(long)]
    vip: Option<String>,
    /// Only packets to this destination port.
    #[arg(long)]
    dport: Option<u16>,
    /// Only packets from this client address or prefix (`198.18.10.0/24`).
    #[arg(long)]
    client: Option<String>,
    /// Only packets from this source port.
    #[arg(long)]
    sport: Option<u16>,
    /// Only this protocol: `tcp`, `udp`, `icmp`, `icmpv6` or a number.
    #[arg(long)]
    proto: Option<String>,
    /// Only this service's packets.
    #[arg(long)]
    service: Option<String>,
    /// Only packets sent to this backend (`address` or `address:port`).
    #[arg(long)]
    backend: Option<String>,
    /// Only packets that arrived on this data port, by name (as `dataplane.ports` names it).
    #[arg(long)]
    port: Option<String>,
    /// Where to capture: `received` (as it arrived), `sent` (as it left, encapsulated),
    /// `dropped` (as it arrived, with the drop reason); several allowed. Default: all three.
    #[arg(long, value_delimiter = ',', value_parser = ["received", "sent", "dropped"])]
    point: Vec<String>,
    /// Stop after this many packets.
    #[arg(long, default_value_t = 1000)]
    count: u64,
    /// Stop after this many seconds.
    #[arg(long, default_value_t = 60.0)]
    duration: f64,
    /// Stop after this many bytes of pcapng.
    #[arg(long, default_value_t = 64 << 20)]
    bytes: u64,
    /// Bytes kept of each packet (at most 2048).
    #[arg(long, default_value_t = 2048)]
    snaplen: usize,
    /// Records each worker's ring holds between two reads (every 10 ms; about 2 KiB each,
    /// 16 to 65,536): more for bursts of traffic, at the cost of memory while capturing.
    #[arg(long, default_value_t = 2048)]
    ring: usize,
}

impl CaptureArgs {
    /// The query string of `POST /v1/capture`.
    fn query(&self) -> String {
        let ms = (self.duration.max(0.0) * 1000.0).round() as u64;
        let mut q = vec![
            format!("count={}", self.count),
            format!("duration_ms={}", ms.max(1)),
            format!("bytes={}", self.bytes),
            format!("snaplen={}", self.snaplen),
            format!("ring={}", self.ring),
        ];
        let ports = [("dport", self.dport), ("sport", self.sport)];
        for (name, v) in ports {
            if let Some(v) = v {
                q.push(format!("{name}={v}"));
            }
        }
        for (name, v) in [
            ("vip", &self.vip),
            ("client", &self.client),
            ("proto", &self.proto),
            ("service", &self.service),
            ("backend", &self.backend),
            ("port", &self.port),
        ] {
            if let Some(v) = v {
                q.push(format!("{name}={}", enc(v)));
            }
        }
        if !self.point.is_empty() {
            q.push(format!("point={}", self.point.join(",")));
        }
        q.join("&")
    }
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
    if let Command::Top = cli.command {
        return top(&runtime, &client);
    }
    if let Command::Capture(args) = &cli.command {
        return match runtime.block_on(capture(&client, args, cli.json)) {
            Ok(text) => {
                eprint!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => client_error(&e, cli.json),
        };
    }
    let result = match &cli.command {
        Command::Reload { dry_run: Some(file), verbose } => {
            runtime.block_on(preview(&cli, &client, file, *verbose))
        }
        _ => runtime.block_on(run(&cli, &client)).map(|out| (out, ExitCode::SUCCESS)),
    };
    match result {
        Ok((out, code)) => {
            print!("{out}");
            code
        }
        Err(e) => client_error(&e, cli.json),
    }
}

/// `spillwayctl capture`: the pcapng stream into the file (or standard output), then the
/// capture's summary, as text for stderr.
async fn capture(client: &Client, args: &CaptureArgs, json: bool) -> Result<String, ClientError> {
    let path = format!("/v1/capture?{}", args.query());
    let header = spillway_control::api::CAPTURE_HEADER;
    let (id, _) = if args.write == "-" {
        let mut out = tokio::io::stdout();
        client.post_streaming(&path, header, &mut out).await?
    } else {
        let file = tokio::fs::File::create(&args.write)
            .await
            .map_err(|e| ClientError::Input(format!("{}: cannot create: {e}", args.write)))?;
        let mut out = tokio::io::BufWriter::new(file);
        client.post_streaming(&path, header, &mut out).await?
    };
    // The reader writes the summary just before it ends the stream.
    let reply = client.call(Method::GET, "/v1/capture", None).await?;
    let summary: CaptureSummary = serde_json::from_str(&reply)?;
    if id.as_deref().is_some_and(|id| id != summary.id.to_string()) {
        return Err(ClientError::Input(format!(
            "the daemon's last capture is {}, not this one ({})",
            summary.id,
            id.unwrap_or_default()
        )));
    }
    Ok(if json { format!("{}\n", render::pretty(&reply)) } else { render::capture(&summary) })
}

/// One [`top::Sample`]: the four replies it is made of.
async fn sample(client: &Client) -> Result<top::Sample, ClientError> {
    let get = |path: &'static str| client.call(Method::GET, path, None);
    let backends: BackendsReply = serde_json::from_str(&get("/v1/backends").await?)?;
    Ok(top::Sample {
        counters: serde_json::from_str(&get("/v1/counters").await?)?,
        backends: backends.backends,
        conntrack: serde_json::from_str(&get("/v1/conntrack").await?)?,
        instance: serde_json::from_str(&get("/v1/instance").await?)?,
    })
}

/// `spillwayctl top`: the terminal in raw mode on its alternate screen, a sample a second,
/// drawn as rates; q, Esc or Ctrl-C restores the terminal and exits 0. An error reading the
/// daemon restores it too, then says what failed (exit 1, 3 when unreachable).
fn top(runtime: &tokio::runtime::Runtime, client: &Client) -> ExitCode {
    use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
    let mut last = match runtime.block_on(sample(client)) {
        Ok(s) => s,
        Err(e) => return client_error(&e, false),
    };
    let mut terminal = ratatui::init();
    let mut next = std::time::Instant::now() + Duration::from_secs(1);
    let outcome = loop {
        let wait = next.saturating_duration_since(std::time::Instant::now());
        match event::poll(wait) {
            Ok(true) => match event::read() {
                Ok(Event::Key(k)) if k.kind == KeyEventKind::Press => {
                    let ctrl_c =
                        k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                    if ctrl_c || matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) {
                        break Ok(());
                    }
                }
                Ok(_) => {}
                Err(e) => break Err(ClientError::Input(format!("the terminal: {e}"))),
            },
            Ok(false) => {
                next += Duration::from_secs(1);
                let now = match runtime.block_on(sample(client)) {
                    Ok(s) => s,
                    Err(e) => break Err(e),
                };
                let rates = top::Rates::between(&last, &now);
                last = now;
                if let Err(e) = terminal.draw(|f| top::draw(f, &rates)) {
                    break Err(ClientError::Input(format!("the terminal: {e}")));
                }
            }
            Err(e) => break Err(ClientError::Input(format!("the terminal: {e}"))),
        }
    };
    ratatui::restore();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => client_error(&e, false),
    }
}

/// Says what went wrong; the exit status for `e` (1, 2, or 3 when nothing answers).
fn client_error(e: &ClientError, json: bool) -> ExitCode {
    let code = match e {
        ClientError::Status { .. } | ClientError::Json(_) | ClientError::Http { .. } => 1,
        ClientError::BadAddress(_) | ClientError::Input(_) | ClientError::Output(_) => 2,
        ClientError::Unreachable { .. } | ClientError::Timeout(_) => 3,
    };
    match e {
        ClientError::Unreachable { .. } => eprintln!(
            "spillwayctl: {e}\n(is the daemon running? pass --admin or set SPILLWAY_ADMIN to its \
             admin.listen)"
        ),
        ClientError::Status { body, .. } if json => eprintln!("{}", render::pretty(body)),
        _ => eprintln!("spillwayctl: {e}"),
    }
    ExitCode::from(code)
}

/// `reload --dry-run FILE`: the preview, and exit 4 when it would drop connections.
async fn preview(
    cli: &Cli,
    client: &Client,
    file: &std::path::Path,
    verbose: bool,
) -> Result<(String, ExitCode), ClientError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| ClientError::Input(format!("{}: cannot read: {e}", file.display())))?;
    let body = serde_json::json!({ "config": text });
    let reply = client.call(Method::POST, "/v1/reload/preview", Some(&body)).await?;
    let r: PreviewReply = serde_json::from_str(&reply)?;
    let code = if r.would_drop { ExitCode::from(4) } else { ExitCode::SUCCESS };
    let out = if cli.json {
        format!("{}\n", render::pretty(&reply))
    } else {
        render::preview(&r, verbose)
    };
    Ok((out, code))
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
        Command::Reload { .. } => post("/v1/reload".into(), None).await?,
        Command::Neighbours => get("/v1/neighbours".into()).await?,
        Command::Conntrack => get("/v1/conntrack".into()).await?,
        Command::Lookup(flow) => get(format!("/v1/conntrack/lookup?{}", flow.query(false))).await?,
        Command::Flows(f) => get(format!("/v1/conntrack/flows?{}", f.query())).await?,
        Command::Explain { flow, syn, quic_cid } => {
            let cid =
                quic_cid.as_deref().map_or(String::new(), |c| format!("&quic_cid={}", enc(c)));
            get(format!("/v1/explain?{}{cid}", flow.query(*syn))).await?
        }
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
        Command::Simulate(_) | Command::Compare { .. } | Command::Top | Command::Capture(_) => {
            unreachable!("handled in main")
        }
    };
    if cli.json {
        if let Command::Flows(_) = cli.command {
            return Ok(render::flows_json_lines(&serde_json::from_str(&body)?));
        }
        return Ok(format!("{}\n", render::pretty(&body)));
    }
    Ok(match &cli.command {
        Command::Status => render::status(&serde_json::from_str(&body)?),
        Command::Services => render::services(&serde_json::from_str(&body)?),
        Command::Backends { .. } => {
            let r: BackendsReply = serde_json::from_str(&body)?;
            render::backends(&r.backends)
        }
        Command::SetHealth { .. } | Command::Drain { .. } | Command::Undrain { .. } => {
            render::action(&serde_json::from_str(&body)?)
        }
        Command::Reload { .. } => render::reload(&serde_json::from_str(&body)?),
        Command::Neighbours => render::neighbours(&serde_json::from_str(&body)?),
        Command::Conntrack => render::conntrack(&serde_json::from_str(&body)?),
        Command::Lookup(_) => render::lookup(&serde_json::from_str(&body)?),
        Command::Flows(_) => render::flows(&serde_json::from_str(&body)?),
        Command::Explain { .. } => render::explain(&serde_json::from_str(&body)?),
        Command::Instance | Command::DrainInstance { .. } | Command::UndrainInstance => {
            render::instance(&serde_json::from_str(&body)?)
        }
        Command::Metrics
        | Command::Simulate(_)
        | Command::Compare { .. }
        | Command::Top
        | Command::Capture(_) => body,
    })
}

/// Polls `GET /v1/instance` until traffic has stopped arriving; returns the last reply, with
/// how long it took. A timeout is an error (exit 3).
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
    let comparison = render::compare(admins, &replies);
    if cli.json {
        println!("{}", render::compare_json(admins, &replies, &comparison.differ));
    } else {
        print!("{}", comparison.table);
    }
    if comparison.differ.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("{}", render::tables_differ(&comparison.differ));
        ExitCode::from(1)
    }
}
