//! `spillwayctl simulate --config FILE --scenario FILE`: the what-if tool.
//!
//! It loads a real configuration (with all its validation, NX-3), then runs the steps of a
//! scenario file through the decision core's [`Simulator`] on a virtual clock: packets,
//! advances of the clock, health changes, reloads and traffic. Every packet step prints one
//! JSON object on its own line: the verdict, the backend, the reason, the service and the
//! eligible set the packet saw. A traffic step (new connections per second from client zones,
//! over whole virtual seconds, through [`Simulator::run_traffic`] and its control loop)
//! prints one line per second with the new and live connections of every backend group, by
//! client zone (SPEC section 7). The configuration's locality (`Config::advanced_topology`)
//! is given to the simulator at the start and with every reload. The reference of the
//! scenario format and of the output is `docs/simulate.md`.
//!
//! Scenario problems are errors that name the scenario file, the line and column and the
//! field (`scenario.yaml:7:12: field `steps[2].packet.proto`: ...`), never panics. Parsing
//! goes through `serde_path_to_error` (syntax, unknown steps and fields, bad addresses,
//! protocols, flags, numbers); the checks that need the running model (a health change of
//! an address that is not a configured backend, an invalid configuration to reload) find
//! their line with [`Locations`].
//!
//! A packet that could not exist on the wire (see `impossible`) is not an error: it is
//! reported like the classifier would drop it, `"verdict": "drop", "reason": "malformed"`.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};
use spillway_shared::addr::Addr;
use spillway_shared::flow::{proto, tcp_flags, PacketInfo};
use spillway_shared::model::{BackendKey, Model};
use spillway_shared::simulator::{
    Outcome, SimError, Simulator, TrafficPlan, TrafficReport, TrafficSource,
};

use crate::config::locate::Locations;
use crate::config::{self, ConfigError, Field, Loc};

/// Arguments of `spillwayctl simulate`.
#[derive(clap::Args, Debug)]
pub struct SimulateArgs {
    /// The configuration to simulate (validated like the daemon's).
    #[arg(long)]
    pub config: PathBuf,
    /// The scenario: initial health and the steps to run (see docs/simulate.md).
    #[arg(long)]
    pub scenario: PathBuf,
}

/// Runs the simulation: JSON lines on stdout, errors on stderr; exit status 0 on success,
/// 1 on any error (bad configuration, bad scenario, unwritable output).
pub fn main(args: &SimulateArgs) -> ExitCode {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = run(&args.config, &args.scenario, &mut out);
    let flushed = out.flush();
    match (result, flushed) {
        (Ok(()), Ok(())) => ExitCode::SUCCESS,
        (Err(e), _) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
        (Ok(()), Err(e)) => {
            eprintln!("{}", SimulateError::Output(e));
            ExitCode::FAILURE
        }
    }
}

/// Loads `config`, runs `scenario` and writes one JSON line per packet step to `out`.
///
/// Everything that can be checked before the first step is (the configuration, the whole
/// scenario, every configuration it reloads); the checks that depend on the model at a step
/// (health changes of unconfigured addresses) fail at that step, after the lines of the
/// steps before it were written.
pub fn run(config: &Path, scenario: &Path, out: &mut dyn Write) -> Result<(), SimulateError> {
    let cfg = config::load(config).map_err(SimulateError::Config)?;
    let text = std::fs::read_to_string(scenario)
        .map_err(|source| SimulateError::Io { path: scenario.to_owned(), source })?;
    let parsed = parse_scenario(scenario, &text)?;
    let locations = Locations::parse(&text);
    let at = |field: String, message: String| SimulateError::Scenario {
        path: scenario.to_owned(),
        location: locations.get(&field),
        field,
        message,
    };

    // Every reload is loaded and validated before the first step runs, and every traffic
    // step is checked against the model in force when it runs.
    let base = scenario.parent().unwrap_or(Path::new(""));
    let mut reloads = BTreeMap::new();
    let mut model_at = cfg.to_model();
    for (i, step) in parsed.steps.iter().enumerate() {
        match step {
            Step::Reload(file) => {
                let field = format!("steps[{i}].reload");
                let path = base.join(file);
                let c = config::load(&path).map_err(|e| SimulateError::Reload {
                    path: scenario.to_owned(),
                    location: locations.get(&field),
                    field: field.clone(),
                    config: Box::new(e),
                })?;
                model_at = c.to_model();
                reloads.insert(i, (c.to_model(), c.advanced_topology()));
            }
            Step::Traffic(t) => {
                check_traffic(t, &model_at).map_err(|(f, m)| at(traffic_field(i, t, &f), m))?;
            }
            _ => {}
        }
    }

    let mut sim = Simulator::new(cfg.to_model())
        .map_err(|e| SimulateError::Model { path: config.to_owned(), message: e.to_string() })?;
    // Section 7 locality (region order, latencies) of the configuration.
    sim.set_topology(cfg.advanced_topology());
    apply_health(&mut sim, &parsed.health).map_err(|a| {
        let field = format!("health.{a}");
        at(field, format!("{a} is not a configured backend"))
    })?;

    for (i, step) in parsed.steps.iter().enumerate() {
        match step {
            Step::Packet(spec) => {
                let line = match impossible(spec) {
                    Some(_) => OutputLine::malformed(i),
                    None => OutputLine::from_outcome(i, &sim.packet(&spec.info())),
                };
                write_line(out, &line).map_err(SimulateError::Output)?;
            }
            Step::Advance(Seconds(d)) => {
                sim.advance(*d);
                sim.rebuild();
            }
            Step::Health(h) => apply_health(&mut sim, h).map_err(|a| {
                at(format!("steps[{i}].health.{a}"), format!("{a} is not a configured backend"))
            })?,
            Step::Reload(_) => {
                let Some((model, topology)) = reloads.remove(&i) else { continue };
                sim.replace_model(model).map_err(|e| {
                    at(format!("steps[{i}].reload"), format!("cannot apply the configuration: {e}"))
                })?;
                sim.set_topology(topology);
            }
            Step::Traffic(t) => {
                let plan = t.plan(sim.state().model());
                let report = sim.run_traffic(&plan).map_err(|e| {
                    let f = match &e {
                        SimError::UnknownZone(_) | SimError::NoClientSubnet(_) => "from_zone",
                        SimError::NoService(_) => "service",
                    };
                    at(traffic_field(i, t, f), e.to_string())
                })?;
                for line in TrafficLine::from_report(i, &report) {
                    write_line(out, &line).map_err(SimulateError::Output)?;
                }
            }
        }
    }
    Ok(())
}

/// The scenario field path of a traffic step's `field`: empty for the step itself,
/// `[k].name` for an item of a list, `name` for the step's (the first item's, for a list).
fn traffic_field(step: usize, t: &TrafficStep, field: &str) -> String {
    let step_path = format!("steps[{step}].traffic");
    if field.is_empty() || field.starts_with('[') {
        format!("{step_path}{field}")
    } else if t.list {
        format!("{step_path}[0].{field}")
    } else {
        format!("{step_path}.{field}")
    }
}

/// Checks a traffic step against the model in force when it runs: known zones with a client
/// subnet, a service with a forwarding rule. Returns (field relative to the step, message).
fn check_traffic(t: &TrafficStep, model: &Model) -> Result<(), (String, String)> {
    let item = |k: usize, f: &str| if t.list { format!("[{k}].{f}") } else { f.to_owned() };
    for (k, src) in t.sources.iter().enumerate() {
        let Some(zid) = model.zone_id(&src.from_zone) else {
            let known: Vec<&str> = model.zones.iter().map(|z| z.name.as_str()).collect();
            return Err((
                item(k, "from_zone"),
                format!("zone `{}` is not in topology.zones ({})", src.from_zone, known.join(", ")),
            ));
        };
        if !model.client_subnets.iter().any(|c| c.zone == Some(zid)) {
            return Err((
                item(k, "from_zone"),
                format!(
                    "zone `{}` has no client subnet in topology.client_subnets to send from",
                    src.from_zone
                ),
            ));
        }
    }
    match &t.service {
        Some(name) => match model.services.iter().find(|s| &s.name == name) {
            None => Err((item(0, "service"), format!("no service `{name}`"))),
            Some(s) if s.rules.is_empty() => {
                Err((item(0, "service"), format!("service `{name}` has no forwarding rule")))
            }
            Some(_) => Ok(()),
        },
        None if model.services.is_empty() => {
            Err((String::new(), "the configuration has no service to send to".to_owned()))
        }
        None => Ok(()),
    }
}

/// Why a simulation could not run (to the end).
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// The configuration given with `--config` is unreadable or invalid: every validation
    /// error, one per line, as `file:line:col: field `path`: message`.
    #[error(transparent)]
    Config(ConfigError),
    /// The scenario file could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        /// The scenario file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The scenario is not valid YAML, does not match the format, or a step cannot be
    /// applied: `scenario:line:col: field `steps[3].health.198.18.1.9`: message`.
    #[error("{}{}: {}{}", path.display(), Loc(*location), Field(field), message)]
    Scenario {
        /// The scenario file.
        path: PathBuf,
        /// 1-based line and column, when known.
        location: Option<(usize, usize)>,
        /// Dotted field path in the scenario (empty at the top level).
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A `reload` step names a configuration that is unreadable or invalid: the scenario
    /// line, then the configuration's own errors.
    #[error(
        "{}{}: {}cannot reload:\n{config}",
        path.display(),
        Loc(*location),
        Field(field)
    )]
    Reload {
        /// The scenario file.
        path: PathBuf,
        /// 1-based line and column of the `reload` value.
        location: Option<(usize, usize)>,
        /// `steps[i].reload`.
        field: String,
        /// The configuration's errors.
        config: Box<ConfigError>,
    },
    /// The decision core refused the initial model (capacity limits).
    #[error("{}: cannot simulate: {message}", path.display())]
    Model {
        /// The configuration file.
        path: PathBuf,
        /// The policy state's error.
        message: String,
    },
    /// Writing the output failed.
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
}

impl SimulateError {
    /// The 1-based scenario line the error is about, if any.
    pub fn line(&self) -> Option<usize> {
        match self {
            SimulateError::Scenario { location, .. } | SimulateError::Reload { location, .. } => {
                location.map(|l| l.0)
            }
            _ => None,
        }
    }

    /// The scenario field path the error is about, if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            SimulateError::Scenario { field, .. } | SimulateError::Reload { field, .. } => {
                Some(field.as_str()).filter(|f| !f.is_empty())
            }
            _ => None,
        }
    }
}

// ---- the scenario file ----

/// A whole scenario file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Scenario {
    /// Initial health overrides; unnamed backends start healthy.
    #[serde(default)]
    health: HealthMap,
    /// The steps, run in order.
    steps: Vec<Step>,
}

/// Address -> verdict (applied together, so their order does not matter).
type HealthMap = BTreeMap<HealthAddr, HealthWord>;

/// One step.
#[derive(Debug, Deserialize)]
#[serde(try_from = "StepSpec")]
enum Step {
    /// Send one packet.
    Packet(PacketSpec),
    /// Advance the virtual clock.
    Advance(Seconds),
    /// Change health verdicts (all at once: one snapshot).
    Health(HealthMap),
    /// Load another configuration (relative to the scenario file) and apply it.
    Reload(PathBuf),
    /// Run new connections from client zones over virtual time (section 7 load).
    Traffic(TrafficStep),
}

/// A step as written: a mapping with exactly one of these keys (serde_yaml reads enums only
/// from `!tags`, so the mapping is read as a struct and checked).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepSpec {
    packet: Option<PacketSpec>,
    advance: Option<Seconds>,
    health: Option<HealthMap>,
    reload: Option<PathBuf>,
    traffic: Option<TrafficStep>,
}

impl TryFrom<StepSpec> for Step {
    type Error = String;
    fn try_from(s: StepSpec) -> Result<Step, String> {
        let mut found = Vec::new();
        let mut step = None;
        if let Some(p) = s.packet {
            found.push("packet");
            step = Some(Step::Packet(p));
        }
        if let Some(a) = s.advance {
            found.push("advance");
            step = Some(Step::Advance(a));
        }
        if let Some(h) = s.health {
            found.push("health");
            step = Some(Step::Health(h));
        }
        if let Some(r) = s.reload {
            found.push("reload");
            step = Some(Step::Reload(r));
        }
        if let Some(t) = s.traffic {
            found.push("traffic");
            step = Some(Step::Traffic(t));
        }
        match (step, found.len()) {
            (Some(step), 1) => Ok(step),
            _ => Err(format!(
                "a step has exactly one of `packet`, `advance`, `health`, `reload`, `traffic` \
                 (found {})",
                if found.is_empty() { "none".to_owned() } else { found.join(", ") }
            )),
        }
    }
}

/// Longest `seconds` of one traffic step.
pub const MAX_TRAFFIC_SECONDS: u32 = 3600;
/// Largest `new_connections_per_sec` of one source.
pub const MAX_TRAFFIC_RATE: u32 = 1_000_000;

/// One source of a `traffic` step as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct TrafficSpec {
    /// Client zone (source addresses from its first client subnet).
    from_zone: String,
    /// New connections per second.
    new_connections_per_sec: u32,
    /// Duration, whole seconds (one control interval each).
    seconds: u32,
    /// How long each connection stays open.
    #[serde(default)]
    hold_sec: u32,
    /// The service (default: the first with `advanced`, else the first).
    #[serde(default)]
    service: Option<String>,
}

/// A `traffic` step: one source (a mapping) or several at once (a list of mappings that
/// agree on `seconds`, `hold_sec` and `service`).
#[derive(Debug)]
struct TrafficStep {
    /// Written as a list.
    list: bool,
    sources: Vec<TrafficSpec>,
    seconds: u32,
    hold_sec: u32,
    service: Option<String>,
}

impl TrafficStep {
    fn from_specs(list: bool, sources: Vec<TrafficSpec>) -> Result<TrafficStep, String> {
        let Some(first) = sources.first() else {
            return Err("a traffic list needs at least one source".to_owned());
        };
        for (k, s) in sources.iter().enumerate() {
            let at = if list { format!("traffic[{k}].") } else { String::new() };
            if s.seconds == 0 || s.seconds > MAX_TRAFFIC_SECONDS {
                return Err(format!(
                    "{at}seconds: {} is out of range 1..={MAX_TRAFFIC_SECONDS}",
                    s.seconds
                ));
            }
            if s.new_connections_per_sec > MAX_TRAFFIC_RATE {
                return Err(format!(
                    "{at}new_connections_per_sec: {} is above {MAX_TRAFFIC_RATE}",
                    s.new_connections_per_sec
                ));
            }
            if s.hold_sec > MAX_TRAFFIC_SECONDS {
                return Err(format!(
                    "{at}hold_sec: {} is out of range 0..={MAX_TRAFFIC_SECONDS}",
                    s.hold_sec
                ));
            }
            for (field, same) in [
                ("seconds", s.seconds == first.seconds),
                ("hold_sec", s.hold_sec == first.hold_sec),
                ("service", s.service == first.service),
            ] {
                if !same {
                    return Err(format!(
                        "{at}{field}: the sources of one traffic step run together: `{field}` \
                         must be the same as in traffic[0]"
                    ));
                }
            }
        }
        Ok(TrafficStep {
            list,
            seconds: first.seconds,
            hold_sec: first.hold_sec,
            service: first.service.clone(),
            sources,
        })
    }

    /// The simulator's plan; the default service is the first with `advanced`, else the
    /// first.
    fn plan(&self, model: &Model) -> TrafficPlan {
        let service = self.service.clone().or_else(|| {
            model
                .services
                .iter()
                .find(|s| s.advanced.is_some())
                .or(model.services.first())
                .map(|s| s.name.clone())
        });
        TrafficPlan {
            service,
            sources: self
                .sources
                .iter()
                .map(|s| TrafficSource {
                    zone: s.from_zone.clone(),
                    rate: s.new_connections_per_sec,
                })
                .collect(),
            seconds: self.seconds,
            hold_secs: self.hold_sec,
        }
    }
}

impl<'de> Deserialize<'de> for TrafficStep {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = TrafficStep;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a traffic source `{from_zone, new_connections_per_sec, seconds, hold_sec}` \
                     or a list of them",
                )
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<TrafficStep, A::Error> {
                let one =
                    TrafficSpec::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                TrafficStep::from_specs(false, vec![one]).map_err(serde::de::Error::custom)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                seq: A,
            ) -> Result<TrafficStep, A::Error> {
                let many = Vec::<TrafficSpec>::deserialize(
                    serde::de::value::SeqAccessDeserializer::new(seq),
                )?;
                TrafficStep::from_specs(true, many).map_err(serde::de::Error::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A health verdict as an operator override names it (HC-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum HealthWord {
    Healthy,
    Unhealthy,
    /// "As the probes say": no probes run in a simulation, so healthy.
    Auto,
}

/// One packet.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PacketSpec {
    src: IpField,
    dst: IpField,
    proto: ProtoField,
    #[serde(default)]
    sport: u16,
    #[serde(default)]
    dport: u16,
    #[serde(default)]
    flags: Option<Flags>,
    #[serde(default)]
    fragment: bool,
}

impl PacketSpec {
    fn info(&self) -> PacketInfo {
        PacketInfo {
            src: self.src.0,
            dst: self.dst.0,
            proto: self.proto.0,
            sport: self.sport,
            dport: self.dport,
            fragment: self.fragment,
            tcp_flags: self.flags.map_or(0, |f| f.0),
            icmp_error: false,
        }
    }
}

/// Why a packet could not exist on the wire, or `None`. These packets are reported as
/// dropped `malformed`, like the classifier drops what it cannot parse:
///
/// - the source and destination are not of the same family (IPv4 and IPv6);
/// - a fragment with ports (SA-6: the decision core never sees a fragment's ports);
/// - ports on a protocol other than TCP and UDP;
/// - TCP flags on anything but an unfragmented TCP segment.
fn impossible(p: &PacketSpec) -> Option<&'static str> {
    let ported = p.proto.0 == proto::TCP || p.proto.0 == proto::UDP;
    let has_ports = p.sport != 0 || p.dport != 0;
    let has_flags = p.flags.is_some_and(|f| f.0 != 0);
    if p.src.0.is_v4() != p.dst.0.is_v4() {
        Some("source and destination of different address families")
    } else if p.fragment && has_ports {
        Some("a fragment has no ports")
    } else if has_ports && !ported {
        Some("ports on a protocol without ports")
    } else if has_flags && (p.fragment || p.proto.0 != proto::TCP) {
        Some("TCP flags on something else than an unfragmented TCP segment")
    } else {
        None
    }
}

/// An IP address field.
#[derive(Debug, Clone, Copy)]
struct IpField(Addr);

impl<'de> Deserialize<'de> for IpField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.trim()
            .parse::<Addr>()
            .map(IpField)
            .map_err(|_| serde::de::Error::custom(format!("`{s}` is not an IP address")))
    }
}

/// A key of a `health` map: an address, with its text for error messages.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct HealthAddr {
    text: String,
    addr: Addr,
}

impl<'de> Deserialize<'de> for HealthAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let addr = text.trim().parse::<Addr>().map_err(|_| {
            serde::de::Error::custom(format!("`{text}` is not an IP address (health key)"))
        })?;
        Ok(HealthAddr { text, addr })
    }
}

impl fmt::Display for HealthAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// `TCP`, `UDP`, `ICMP`, `ICMPv6` (any case) or a protocol number 0..=255.
#[derive(Debug, Clone, Copy)]
struct ProtoField(u8);

const PROTO_HELP: &str = "expected TCP, UDP, ICMP, ICMPv6 or a protocol number 0..=255";

impl<'de> Deserialize<'de> for ProtoField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ProtoField;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(PROTO_HELP)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ProtoField, E> {
                u8::try_from(v)
                    .map(ProtoField)
                    .map_err(|_| E::custom(format!("{v} is not a protocol: {PROTO_HELP}")))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ProtoField, E> {
                u8::try_from(v)
                    .map(ProtoField)
                    .map_err(|_| E::custom(format!("{v} is not a protocol: {PROTO_HELP}")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ProtoField, E> {
                let p = match v.to_ascii_uppercase().as_str() {
                    "TCP" => proto::TCP,
                    "UDP" => proto::UDP,
                    "ICMP" => proto::ICMP,
                    "ICMPV6" => proto::ICMPV6,
                    _ => return Err(E::custom(format!("`{v}` is not a protocol: {PROTO_HELP}"))),
                };
                Ok(ProtoField(p))
            }
        }
        d.deserialize_any(V)
    }
}

/// TCP flags as letters: `S` SYN, `A` ACK, `F` FIN, `R` RST, `P` PSH, `U` URG.
#[derive(Debug, Clone, Copy)]
struct Flags(u8);

impl<'de> Deserialize<'de> for Flags {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let mut bits = 0u8;
        for c in s.chars() {
            bits |= match c {
                'S' => tcp_flags::SYN,
                'A' => tcp_flags::ACK,
                'F' => tcp_flags::FIN,
                'R' => tcp_flags::RST,
                'P' => 0x08,
                'U' => 0x20,
                _ => {
                    return Err(serde::de::Error::custom(format!(
                        "`{c}` in `{s}` is not a TCP flag letter (S, A, F, R, P, U)"
                    )))
                }
            };
        }
        Ok(Flags(bits))
    }
}

/// A non-negative number of seconds, with at most millisecond precision (the decision
/// core's clock counts milliseconds).
#[derive(Debug, Clone, Copy)]
struct Seconds(Duration);

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Seconds;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a non-negative number of seconds")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Seconds, E> {
                Ok(Seconds(Duration::from_secs(v)))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Seconds, E> {
                u64::try_from(v)
                    .map(|v| Seconds(Duration::from_secs(v)))
                    .map_err(|_| E::custom(format!("{v} is negative: time only moves forward")))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Seconds, E> {
                if !v.is_finite() || v < 0.0 {
                    return Err(E::custom(format!("{v} is not a non-negative number of seconds")));
                }
                // The shortest decimal that reads back as `v`: exactly what was written.
                let text = format!("{v}");
                let (whole, frac) = text.split_once('.').unwrap_or((&text, ""));
                if frac.len() > 3 {
                    return Err(E::custom(format!(
                        "{text}: at most 3 decimals (the clock counts milliseconds)"
                    )));
                }
                let whole: u64 =
                    whole.parse().map_err(|_| E::custom(format!("{text} seconds is too large")))?;
                let millis: u64 = format!("{frac:0<3}").parse().unwrap_or(0);
                whole
                    .checked_mul(1000)
                    .and_then(|w| w.checked_add(millis))
                    .map(|ms| Seconds(Duration::from_millis(ms)))
                    .ok_or_else(|| E::custom(format!("{text} seconds is too large")))
            }
        }
        d.deserialize_any(V)
    }
}

fn parse_scenario(path: &Path, text: &str) -> Result<Scenario, SimulateError> {
    let de = serde_yaml::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.into_inner();
        let mut location = inner.location().map(|l| (l.line(), l.column()));
        let mut message = inner.to_string();
        if let Some((line, column)) = location {
            let suffix = format!(" at line {line} column {column}");
            if let Some(stripped) = message.strip_suffix(&suffix) {
                message.truncate(stripped.len());
            }
        }
        if let Some((head, rest)) = message.split_once(": ") {
            if !head.is_empty() && field.starts_with(head) && !head.contains(' ') {
                message = rest.to_owned();
            }
        }
        let field = if field == "." { String::new() } else { field };
        // serde_yaml sometimes reports where the enclosing mapping starts: the event parser's
        // position of the field itself is more precise when the field is in the file.
        let locations = Locations::parse(text);
        if let Some(exact) = locations.exact(&field).filter(|_| !field.is_empty()) {
            location = Some(exact);
        } else if location.is_none() && !field.is_empty() {
            location = locations.get(&field);
        }
        SimulateError::Scenario { path: path.to_owned(), location, field, message }
    })
}

/// Applies a health map in one go (one snapshot, so that a step changing several backends
/// is one health change for FO-9). Every address must be a configured backend (of any
/// service); the first one that is not is returned.
fn apply_health(sim: &mut Simulator, h: &HealthMap) -> Result<(), HealthAddr> {
    if h.is_empty() {
        return Ok(());
    }
    let mut changes: Vec<(BackendKey, bool)> = Vec::new();
    for (a, word) in h {
        let healthy = *word != HealthWord::Unhealthy;
        let before = changes.len();
        for (k, _, _) in sim.state().model().backends() {
            if k.endpoint.addr == a.addr {
                changes.push((k, healthy));
            }
        }
        if changes.len() == before {
            return Err(a.clone());
        }
    }
    sim.with_state(|st| {
        for (k, healthy) in &changes {
            st.set_health(k, *healthy);
        }
    });
    Ok(())
}

// ---- output ----

/// One output line.
#[derive(Debug, Serialize)]
struct OutputLine {
    step: usize,
    verdict: &'static str,
    backend: Option<String>,
    reason: &'static str,
    service: Option<String>,
    eligible: Option<EligibleOut>,
}

#[derive(Debug, Serialize)]
struct EligibleOut {
    kind: &'static str,
    zonal_match: bool,
    size: usize,
}

impl OutputLine {
    fn malformed(step: usize) -> OutputLine {
        OutputLine {
            step,
            verdict: "drop",
            backend: None,
            reason: "malformed",
            service: None,
            eligible: None,
        }
    }

    fn from_outcome(step: usize, o: &Outcome) -> OutputLine {
        OutputLine {
            step,
            verdict: if o.decision.backend().is_some() { "forward" } else { "drop" },
            backend: o.backend.map(|e| e.to_string()),
            reason: o.decision.reason_str(),
            service: o.service.clone(),
            eligible: o.eligible.map(|e| EligibleOut {
                kind: e.kind.as_str(),
                zonal_match: e.zonal_match,
                size: e.size,
            }),
        }
    }
}

/// One output line per interval (virtual second) of a traffic step.
#[derive(Debug, Serialize)]
struct TrafficLine {
    step: usize,
    interval: usize,
    /// Virtual time at the start of the interval, in seconds.
    t: f64,
    service: String,
    groups: Vec<GroupLine>,
    dropped: u64,
}

#[derive(Debug, Serialize)]
struct GroupLine {
    group: String,
    zone: String,
    new_connections: u64,
    live_connections: u64,
    from_zones: ZoneCounts,
}

/// Client zone -> count, as a JSON object in the model's zone order.
#[derive(Debug)]
struct ZoneCounts(Vec<(String, u64)>);

impl Serialize for ZoneCounts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl TrafficLine {
    fn from_report(step: usize, r: &TrafficReport) -> Vec<TrafficLine> {
        r.intervals
            .iter()
            .enumerate()
            .map(|(interval, i)| TrafficLine {
                step,
                interval,
                #[allow(clippy::cast_precision_loss)] // milliseconds of virtual time
                t: i.start.as_millis() as f64 / 1000.0,
                service: r.service.clone(),
                groups: i
                    .groups
                    .iter()
                    .map(|g| GroupLine {
                        group: g.group.clone(),
                        zone: g.zone.clone(),
                        new_connections: g.new_connections,
                        live_connections: g.live_connections,
                        from_zones: ZoneCounts(g.from_zones.clone()),
                    })
                    .collect(),
                dropped: i.dropped,
            })
            .collect()
    }
}

/// serde_json's compact output with a space after `:` and `,` (in objects and arrays), as in
/// the documentation.
struct Spaced;

impl serde_json::ser::Formatter for Spaced {
    fn begin_object_key<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }

    fn begin_array_value<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }
}

fn write_line(out: &mut dyn Write, line: &impl Serialize) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(160);
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, Spaced);
    line.serialize(&mut ser).map_err(std::io::Error::other)?;
    buf.push(b'\n');
    out.write_all(&buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(text: &str) -> Result<Scenario, SimulateError> {
        parse_scenario(Path::new("s.yaml"), text)
    }

    #[test]
    fn seconds_are_exact_milliseconds() {
        let s =
            scenario("steps:\n  - advance: 599.999\n  - advance: 60\n  - advance: 0.1\n").unwrap();
        let d: Vec<Duration> = s
            .steps
            .iter()
            .map(|s| match s {
                Step::Advance(Seconds(d)) => *d,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(
            d,
            [Duration::from_millis(599_999), Duration::from_secs(60), Duration::from_millis(100)]
        );
        let e = scenario("steps:\n  - advance: 0.0005\n").unwrap_err();
        assert!(e.to_string().contains("at most 3 decimals"), "{e}");
        let e = scenario("steps:\n  - advance: -1\n").unwrap_err();
        assert_eq!(e.line(), Some(2), "{e}");
    }

    #[test]
    fn flags_and_protocols() {
        let s = scenario(
            "steps:\n  - packet: {src: 1.1.1.1, dst: 2.2.2.2, proto: tcp, flags: SAFRPU}\n  \
             - packet: {src: 1.1.1.1, dst: 2.2.2.2, proto: 132}\n",
        )
        .unwrap();
        let Step::Packet(p) = &s.steps[0] else { unreachable!() };
        assert_eq!(p.info().tcp_flags, 0x3f);
        assert_eq!(p.info().proto, 6);
        let Step::Packet(p) = &s.steps[1] else { unreachable!() };
        assert_eq!(p.info().proto, 132);
    }

    #[test]
    fn output_format() {
        let mut buf = Vec::new();
        write_line(&mut buf, &OutputLine::malformed(3)).unwrap();
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "{\"step\": 3, \"verdict\": \"drop\", \"backend\": null, \"reason\": \"malformed\", \
             \"service\": null, \"eligible\": null}\n"
        );
        let v6 = spillway_shared::model::Endpoint { addr: "fd00::1".parse().unwrap(), port: 80 };
        assert_eq!(v6.to_string(), "[fd00::1]:80");
    }
}
