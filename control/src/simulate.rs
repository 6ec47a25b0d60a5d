//! `spillwayctl simulate --config FILE --scenario FILE`: the what-if tool.
//!
//! It loads a real configuration (with all its validation, NX-3), then runs the steps of a
//! scenario file through the decision core's [`Simulator`] on a virtual clock: packets,
//! advances of the clock, health changes and reloads. Every packet step prints one JSON
//! object on its own line: the verdict, the backend, the reason, the service and the
//! eligible set the packet saw. The reference of the scenario format and of the output is
//! `docs/simulate.md`.
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
use spillway_shared::model::{BackendKey, Endpoint};
use spillway_shared::simulator::{Outcome, Simulator};

use crate::config::locate::Locations;
use crate::config::{self, ConfigError};

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

    // Every reload is loaded and validated before the first step runs.
    let base = scenario.parent().unwrap_or(Path::new(""));
    let mut reloads = BTreeMap::new();
    for (i, step) in parsed.steps.iter().enumerate() {
        if let Step::Reload(file) = step {
            let field = format!("steps[{i}].reload");
            let path = base.join(file);
            let c = config::load(&path).map_err(|e| SimulateError::Reload {
                path: scenario.to_owned(),
                location: locations.get(&field),
                field: field.clone(),
                config: Box::new(e),
            })?;
            reloads.insert(i, c.to_model());
        }
    }

    let mut sim = Simulator::new(cfg.to_model())
        .map_err(|e| SimulateError::Model { path: config.to_owned(), message: e.to_string() })?;
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
                let Some(model) = reloads.remove(&i) else { continue };
                sim.replace_model(model).map_err(|e| {
                    at(format!("steps[{i}].reload"), format!("cannot apply the configuration: {e}"))
                })?;
            }
        }
    }
    Ok(())
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

struct Loc(Option<(usize, usize)>);

impl fmt::Display for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some((line, col)) => write!(f, ":{line}:{col}"),
            None => Ok(()),
        }
    }
}

struct Field<'a>(&'a str);

impl fmt::Display for Field<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, "field `{}`: ", self.0)
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
        match (step, found.len()) {
            (Some(step), 1) => Ok(step),
            _ => Err(format!(
                "a step has exactly one of `packet`, `advance`, `health`, `reload` (found {})",
                if found.is_empty() { "none".to_owned() } else { found.join(", ") }
            )),
        }
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
            backend: o.backend.map(endpoint_text),
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

/// `198.18.1.1`, `fd00::1`, or with a port `198.18.1.1:8080` / `[fd00::1]:8080`.
fn endpoint_text(e: Endpoint) -> String {
    match (e.port, e.addr.is_v4()) {
        (0, _) => e.addr.to_string(),
        (p, true) => format!("{}:{p}", e.addr),
        (p, false) => format!("[{}]:{p}", e.addr),
    }
}

/// serde_json's compact output with a space after `:` and `,`, as in the documentation.
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
}

fn write_line(out: &mut dyn Write, line: &OutputLine) -> std::io::Result<()> {
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
        let v6 = Endpoint { addr: "fd00::1".parse().unwrap(), port: 80 };
        assert_eq!(endpoint_text(v6), "[fd00::1]:80");
    }
}
