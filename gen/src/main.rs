//! `spillway-gen`: a pktgen-style DPDK traffic generator for load-testing Spillway (or any L4
//! load balancer). Parses the command line, sets DPDK up, runs
//! [`spillway_gen::send_and_receive`] on the first EAL worker lcore and prints
//! progress and the report from the main lcore. See `docs/load-testing.md`.

#![forbid(unsafe_code)]

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use clap::Parser;
use spillway_core::wire::MacDisplay;
use spillway_dataplane::dpdk::memory;
use spillway_dataplane::dpdk::{Eal, HugepagePolicy, Hugepages, Mempool, Port, PortSetup};
use spillway_gen::{
    send_and_receive, FrameFactory, Limit, Order, SendReport, SpecError, TrafficSpec,
};

const AFTER_HELP: &str = "\
EAL arguments come after `--`; the sending runs on the first EAL worker lcore, so give EAL at \
least two lcores. Memory options (`-m`, `--no-huge`, `--huge-unlink`) are added by \
--hugepages unless given. Example (a null device):

  spillway-gen --port net_null0 --dst-mac self --duration 5 -- \\
      --no-pci -l 0-1 --file-prefix gen1 --vdev net_null0

Limits count frames offered to the driver; frames the driver refuses (TX ring full) are freed \
and reported as `refused`, never retried. See docs/load-testing.md.";

/// Generates TCP/UDP traffic of many flows towards a VIP through a DPDK port.
#[derive(Debug, Parser)]
#[command(name = "spillway-gen", version, after_help = AFTER_HELP)]
struct Args {
    /// The DPDK device to send on: a vdev name (net_null0, net_ring0, net_tap0) or a PCI
    /// address. The device itself comes from the EAL arguments.
    #[arg(long, value_name = "DEVICE")]
    port: String,
    /// Distinct established flows, 1..=10000000 (e.g. 50000, 1M).
    #[arg(long, default_value = "1024", value_parser = flows)]
    flows: u32,
    /// Share (0..1) of packets that are IPv6.
    #[arg(long, value_name = "SHARE", default_value_t = 0.0)]
    ipv6_share: f64,
    /// Share (0..1) of packets that are UDP (the rest are TCP).
    #[arg(long, value_name = "SHARE", default_value_t = 0.0)]
    udp_share: f64,
    /// Share (0..1) of packets that open a new connection (TCP SYN, or a first UDP packet)
    /// from a fresh source.
    #[arg(long, value_name = "SHARE", default_value_t = 0.0)]
    syn_share: f64,
    /// Share (0..1) of IPv4 packets sent as two fragments.
    #[arg(long, value_name = "SHARE", default_value_t = 0.0)]
    fragment_share: f64,
    /// Frame length in bytes without FCS (60..=1514; raised to what the headers need).
    #[arg(long, value_name = "BYTES", default_value_t = 64)]
    size: u16,
    /// IPv4 client prefix the sources come from.
    #[arg(long, value_name = "PREFIX", default_value = "198.18.128.0/17", value_parser = prefix_v4)]
    src_v4: (Ipv4Addr, u8),
    /// IPv6 client prefix the sources come from.
    #[arg(long, value_name = "PREFIX", default_value = "fd00:0:0:1::/64", value_parser = prefix_v6)]
    src_v6: (Ipv6Addr, u8),
    /// Destination (VIP) address, IPv4 or IPv6; give it twice for both families
    /// [default: 198.18.0.100 and fd00::100].
    #[arg(long = "dst", value_name = "VIP")]
    dst: Vec<IpAddr>,
    /// Destination port.
    #[arg(long, default_value_t = 80)]
    dst_port: u16,
    /// Destination MAC: the balancer's port, or the router in front of it; `self` sends to
    /// the port's own MAC (loopback tests).
    #[arg(long, value_name = "MAC|self", value_parser = dst_mac)]
    dst_mac: Option<DstMac>,
    /// Source MAC [default: the port's own MAC].
    #[arg(long, value_name = "MAC", value_parser = mac)]
    src_mac: Option<[u8; 6]>,
    /// Order of established flows: random (seeded) or sequential (round robin).
    #[arg(long, default_value = "random")]
    order: Order,
    /// Seed: the same options give the same frames.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Frames per second, paced with the TSC (e.g. 10M, 500k, 2.5M); flat out without.
    #[arg(long, value_name = "PPS", value_parser = rate)]
    rate: Option<f64>,
    /// Stop after this many frames (e.g. 1000, 10M).
    #[arg(long, value_name = "FRAMES", value_parser = count)]
    count: Option<u64>,
    /// Stop after this long (seconds, or with a unit: 500ms, 10s, 2m).
    #[arg(long, value_name = "TIME", value_parser = duration)]
    duration: Option<Duration>,
    /// Wait this long after the port started before sending (a bridge or switch learning
    /// the port, a link coming up).
    #[arg(long, value_name = "TIME", value_parser = duration, default_value = "0")]
    delay: Duration,
    /// Write the TSC at the end of each frame's payload (8 bytes, little endian), for
    /// latency measurement on the receiving side.
    #[arg(long)]
    stamp: bool,
    /// The first octets of every UDP payload, in hex (the rest zero): for example a QUIC
    /// short header, `40` then a connection ID, to load a QUIC-LB service (docs/quic.md).
    #[arg(long, value_name = "HEX", value_parser = hex_payload)]
    udp_payload: Option<Vec<u8>>,
    /// Also poll the port's RX queue, count what arrives and free it (loopback drivers such
    /// as net_ring; without it received frames stay in the RX ring).
    #[arg(long)]
    rx: bool,
    /// Print the final report as one JSON object (one line on stdout).
    #[arg(long)]
    json: bool,
    /// Seconds between progress lines on stderr; 0 disables them.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    stats_interval: f64,
    /// Mbufs in the pool.
    #[arg(long, value_name = "N", default_value_t = 8191)]
    mbufs: u32,
    /// Hugepages for DPDK's memory: `preferred` (when enough are free and mounted, otherwise
    /// ordinary memory, said on stderr), `required` or `off`. `--no-huge` among the EAL
    /// arguments means `off`; `-m`/`--socket-mem` there set the size (default: the pool and
    /// the descriptors plus 64 MiB).
    #[arg(long, value_name = "POLICY", default_value = "preferred", value_parser = policy)]
    hugepages: HugepagePolicy,
    /// EAL arguments (after `--`), e.g. `--no-pci -l 0-1 --vdev net_null0`.
    #[arg(last = true, value_name = "EAL ARGS")]
    eal: Vec<String>,
}

/// `required`, `preferred` or `off`.
fn policy(s: &str) -> Result<HugepagePolicy, String> {
    HugepagePolicy::from_name(s)
        .ok_or_else(|| format!("`{s}` is not one of `required`, `preferred`, `off`"))
}

/// A number with an optional k/M/G suffix (powers of 1000).
fn scaled(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1e3),
        Some((i, 'm' | 'M')) => (&t[..i], 1e6),
        Some((i, 'g' | 'G')) => (&t[..i], 1e9),
        _ => (t, 1.0),
    };
    let v: f64 =
        num.trim().parse().map_err(|_| format!("'{s}' is not a number (e.g. 500k, 10M)"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("'{s}' is not a non-negative number"));
    }
    Ok(v * mult)
}

fn rate(s: &str) -> Result<f64, String> {
    let v = scaled(s)?;
    if v <= 0.0 {
        return Err("the rate must be above 0 frames per second".to_owned());
    }
    Ok(v)
}

fn count(s: &str) -> Result<u64, String> {
    let v = scaled(s)?;
    if v.fract() != 0.0 || v > 1e18 {
        return Err(format!("'{s}' is not a whole number of frames"));
    }
    Ok(v as u64)
}

fn flows(s: &str) -> Result<u32, String> {
    let v = count(s)?;
    u32::try_from(v).map_err(|_| format!("{v} is out of range (1..=10000000)"))
}

fn duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, unit) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    let v: f64 =
        num.trim().parse().map_err(|_| format!("'{s}' is not a time (e.g. 10, 500ms, 2m)"))?;
    Duration::try_from_secs_f64(v * unit).map_err(|_| format!("'{s}' is not a valid time"))
}

fn split_prefix(s: &str) -> Result<(&str, u8), String> {
    let (a, l) = s.split_once('/').ok_or_else(|| format!("'{s}' is not a prefix (addr/len)"))?;
    let len = l.parse().map_err(|_| format!("'{l}' is not a prefix length"))?;
    Ok((a, len))
}

fn prefix_v4(s: &str) -> Result<(Ipv4Addr, u8), String> {
    let (a, len) = split_prefix(s)?;
    let a = a.parse().map_err(|_| format!("'{a}' is not an IPv4 address"))?;
    if len > 32 {
        return Err(format!("/{len} is longer than /32"));
    }
    Ok((a, len))
}

fn prefix_v6(s: &str) -> Result<(Ipv6Addr, u8), String> {
    let (a, len) = split_prefix(s)?;
    let a = a.parse().map_err(|_| format!("'{a}' is not an IPv6 address"))?;
    if len > 128 {
        return Err(format!("/{len} is longer than /128"));
    }
    Ok((a, len))
}

fn mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    let bad = || format!("'{s}' is not a MAC address (aa:bb:cc:dd:ee:ff)");
    if parts.len() != 6 {
        return Err(bad());
    }
    let mut out = [0u8; 6];
    for (o, p) in out.iter_mut().zip(parts) {
        if p.is_empty() || p.len() > 2 {
            return Err(bad());
        }
        *o = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    Ok(out)
}

/// `--dst-mac`: an address, or the port's own.
#[derive(Debug, Clone, Copy)]
enum DstMac {
    Own,
    Mac([u8; 6]),
}

fn dst_mac(s: &str) -> Result<DstMac, String> {
    if s.eq_ignore_ascii_case("self") {
        Ok(DstMac::Own)
    } else {
        mac(s).map(DstMac::Mac)
    }
}

fn hex_payload(s: &str) -> Result<Vec<u8>, String> {
    spillway_core::quic_lb::hex_octets(s).ok_or_else(|| format!("'{s}' is not hex octets"))
}

/// The command-line flag of a spec field, for error messages.
fn flag_of(e: &SpecError) -> &'static str {
    match e.field() {
        "flows" => "--flows",
        "ipv6_share" => "--ipv6-share",
        "udp_share" => "--udp-share",
        "syn_share" => "--syn-share",
        "fragment_share" => "--fragment-share",
        "frame_len" => "--size",
        "src_v4" => "--src-v4",
        "src_v6" => "--src-v6",
        "dst_port" => "--dst-port",
        "udp_payload" => "--udp-payload",
        _ => "the traffic options",
    }
}

fn spec_of(args: &Args) -> anyhow::Result<TrafficSpec> {
    let mut spec = TrafficSpec {
        flows: args.flows,
        ipv6_share: args.ipv6_share,
        udp_share: args.udp_share,
        syn_share: args.syn_share,
        fragment_share: args.fragment_share,
        frame_len: args.size,
        src_v4: args.src_v4,
        src_v6: args.src_v6,
        dst_port: args.dst_port,
        order: args.order,
        seed: args.seed,
        stamp: args.stamp,
        udp_payload: args.udp_payload.clone().unwrap_or_default(),
        ..TrafficSpec::default()
    };
    let (v4, v6): (Vec<_>, Vec<_>) = args.dst.iter().partition(|a| a.is_ipv4());
    if v4.len() > 1 || v6.len() > 1 {
        bail!("--dst: give at most one IPv4 and one IPv6 destination");
    }
    if let Some(IpAddr::V4(a)) = v4.first() {
        spec.dst_v4 = *a;
    }
    if let Some(IpAddr::V6(a)) = v6.first() {
        spec.dst_v6 = *a;
    }
    if !args.dst.is_empty() {
        if v6.is_empty() && spec.ipv6_share > 0.0 {
            bail!(
                "--ipv6-share {} sends IPv6 but --dst gives no IPv6 destination",
                spec.ipv6_share
            );
        }
        if v4.is_empty() && spec.ipv6_share < 1.0 {
            bail!("--dst gives no IPv4 destination: add one, or send only IPv6 (--ipv6-share 1)");
        }
    }
    Ok(spec)
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("spillway-gen: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> anyhow::Result<()> {
    // Everything that can be checked without DPDK is checked first.
    let mut spec = spec_of(args)?;
    FrameFactory::new(&spec).map_err(|e| anyhow!("{}: {e}", flag_of(&e)))?;
    if args.dst_mac.is_none() {
        bail!(
            "--dst-mac is required: the MAC of the balancer's port or of the router in front \
             of it (or `self` for the port's own MAC, in loopback tests)"
        );
    }
    if !args.stats_interval.is_finite() || args.stats_interval < 0.0 {
        bail!("--stats-interval: {} is not a number of seconds", args.stats_interval);
    }
    if args.eal.is_empty() {
        bail!("no EAL arguments: add them after `--`, e.g. -- --no-pci -l 0-1 --vdev net_null0");
    }
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .context("cannot install the signal handlers")?;
    }

    let (rx_desc, tx_desc) = (512, 1024);
    let need = memory::need(u64::from(args.mbufs), rx_desc + tx_desc);
    let plan = memory::plan(&args.eal, need, args.hugepages, &Hugepages::of_host())
        .map_err(|e| anyhow!("--hugepages {}: {e}", args.hugepages.name()))?;
    match &plan.fallback {
        Some(why) => eprintln!("spillway-gen: no hugepages, running on ordinary memory: {why}"),
        None => eprintln!("spillway-gen: memory: {plan}"),
    }
    let eal = Eal::init(&plan.args).context("DPDK EAL initialisation failed (EAL arguments)")?;
    let lcore = *eal.worker_lcores().first().ok_or_else(|| {
        anyhow!(
            "the sending runs on an EAL worker lcore, and EAL has none: give EAL at least two \
             lcores (e.g. -l 0-1)"
        )
    })?;
    let pool = Mempool::create(&eal, "spillway_gen", args.mbufs, 256)
        .with_context(|| format!("cannot create a pool of {} mbufs (--mbufs)", args.mbufs))?;
    let setup = PortSetup {
        rx_queues: 1,
        tx_queues: 1,
        extra_tx_queues: 0,
        rx_desc: rx_desc as u16,
        tx_desc: tx_desc as u16,
    };
    let port = Port::open(&eal, &args.port, setup, &pool)
        .with_context(|| format!("--port {}", args.port))?;
    let own = port.mac().with_context(|| format!("--port {}: reading its MAC", args.port))?;
    spec.src_mac = args.src_mac.unwrap_or(own);
    spec.dst_mac = match args.dst_mac {
        Some(DstMac::Mac(m)) => m,
        Some(DstMac::Own) | None => own,
    };
    let mut factory = FrameFactory::new(&spec).map_err(|e| anyhow!("{}: {e}", flag_of(&e)))?;
    let (mut rxq, mut txq) = port.take_queues().context("the port's queues are taken")?;
    let (mut rx, mut tx) = (rxq.remove(0), txq.remove(0));
    let limit = Limit { count: args.count, duration: args.duration, rate: args.rate };
    let tsc_hz = eal.tsc_hz();
    eprintln!(
        "spillway-gen: port {} (driver {}) mac {} -> {} on lcore {lcore}: {} flows, {} B frames \
         (max {} B), ipv6 {} udp {} syn {} fragments {}, {} order, rate {}, count {}, duration {}",
        port.name(),
        port.driver(),
        MacDisplay(spec.src_mac),
        MacDisplay(spec.dst_mac),
        spec.flows,
        spec.frame_len,
        factory.max_frame_len(),
        spec.ipv6_share,
        spec.udp_share,
        spec.syn_share,
        spec.fragment_share,
        spec.order,
        args.rate.map_or("flat out".to_owned(), |r| format!("{r} pps")),
        args.count.map_or("none".to_owned(), |c| c.to_string()),
        args.duration.map_or("none".to_owned(), |d| format!("{:?}", d)),
    );

    // Wait (for the start delay) without missing a signal.
    let start_at = Instant::now() + args.delay;
    while Instant::now() < start_at && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(
            Duration::from_millis(10).min(start_at.saturating_duration_since(Instant::now())),
        );
    }

    let result: Mutex<Option<SendReport>> = Mutex::new(None);
    let done = AtomicBool::new(false);
    let interval = Duration::from_secs_f64(args.stats_interval);
    let use_rx = args.rx;
    eal.scope(|s| -> anyhow::Result<()> {
        let (stop, factory, pool, result, done) = (&*stop, &mut factory, &pool, &result, &done);
        s.launch(lcore, move || {
            let rx = if use_rx { Some(&mut rx) } else { None };
            let report = send_and_receive(&mut tx, rx, pool, factory, limit, stop, tsc_hz);
            *result.lock().unwrap_or_else(|e| e.into_inner()) = Some(report);
            done.store(true, Ordering::Release);
        })
        .with_context(|| format!("launching the sender on lcore {lcore}"))?;
        progress(&port, interval, done, stop);
        Ok(())
    })??;
    let report = result
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .context("the sender returned no report")?;
    print_report(args, &report, plan.hugepages);
    if let Some(e) = &report.error {
        bail!("the sender stopped early: {e}");
    }
    Ok(())
}

/// The main lcore's loop while the sender runs: progress lines from the port's counters.
fn progress(port: &Port<'_>, interval: Duration, done: &AtomicBool, stop: &AtomicBool) {
    let start = Instant::now();
    let mut last_at = start;
    let mut last = port.stats().ok();
    while !done.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(20));
        if stop.load(Ordering::Relaxed) || interval.is_zero() || last_at.elapsed() < interval {
            continue;
        }
        let now = Instant::now();
        let secs = (now - last_at).as_secs_f64();
        last_at = now;
        let Ok(s) = port.stats() else { continue };
        if let Some(l) = &last {
            let pkts = s.opackets.saturating_sub(l.opackets);
            let bytes = s.obytes.saturating_sub(l.obytes);
            // Some virtual drivers (net_null) count packets but not bytes.
            let gbps = if bytes == 0 && pkts > 0 {
                "-".to_owned()
            } else {
                format!("{:.3}", bytes as f64 * 8.0 / secs / 1e9)
            };
            eprintln!(
                "spillway-gen: t={:.1}s tx={} ({:.3} Mpps, {gbps} Gbit/s) oerrors={}",
                (now - start).as_secs_f64(),
                s.opackets,
                pkts as f64 / secs / 1e6,
                s.oerrors
            );
        }
        last = Some(s);
    }
}

/// The report; `hugepages` says which memory the run had.
fn print_report(args: &Args, r: &SendReport, hugepages: bool) {
    let mut out = std::io::stdout().lock();
    if args.json {
        let json = r.to_json();
        let body = json.strip_suffix('}').unwrap_or(&json);
        let _ = writeln!(out, "{body},\"hugepages\":{hugepages}}}");
    } else {
        let c = &r.counts;
        let _ = writeln!(
            out,
            "spillway-gen: sent {} frames ({} bytes) in {:.3} s: {:.3} Mpps, {:.3} Gbit/s \
             ({:.3} Gbit/s on the wire); refused {}, alloc failures {}, received {}; on {}",
            r.sent,
            r.bytes,
            r.elapsed,
            r.mpps,
            r.gbps,
            r.wire_gbps,
            r.refused,
            r.alloc_failures,
            r.received,
            if hugepages { "hugepages" } else { "ordinary memory (no hugepages)" }
        );
        let _ = writeln!(
            out,
            "spillway-gen: generated {} frames = {} packets: ipv4 {} ipv6 {} tcp {} udp {} \
             new connections {} fragment frames {}",
            c.frames, c.packets, c.ipv4, c.ipv6, c.tcp, c.udp, c.syn, c.fragments
        );
    }
    let _ = out.flush();
}
