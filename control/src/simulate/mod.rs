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
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use spillway_core::model::{BackendKey, Model};
use spillway_core::simulator::{SimError, Simulator};

use crate::config::locate::Locations;
use crate::config::{self, ConfigError, Field, Loc};

mod output;
mod scenario;
use output::*;
use scenario::*;

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

/// Reads a scenario's text as [`run`] does and checks every step against `model` (packet
/// steps built, traffic steps checked), without running anything: the number of steps, or the
/// first error with its position. The `scenario` fuzz target drives this.
pub fn check_scenario(path: &Path, text: &str, model: &Model) -> Result<usize, SimulateError> {
    let (parsed, locations) = parse_scenario(path, text)?;
    for (i, step) in parsed.steps.iter().enumerate() {
        match step {
            Step::Packet(spec) if impossible(spec).is_none() => {
                let _ = spec.info();
            }
            Step::Traffic(t) => {
                check_traffic(t, model).map_err(|(f, m)| {
                    let field = traffic_field(i, t, &f);
                    SimulateError::Scenario {
                        path: path.to_owned(),
                        location: locations.get(&field),
                        field,
                        message: m,
                    }
                })?;
            }
            _ => {}
        }
    }
    Ok(parsed.steps.len())
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
    let (parsed, locations) = parse_scenario(scenario, &text)?;
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
                reloads.insert(i, c);
            }
            Step::Traffic(t) => {
                check_traffic(t, &model_at).map_err(|(f, m)| at(traffic_field(i, t, &f), m))?;
            }
            _ => {}
        }
    }

    let n = parsed.instances;
    if !(1..=MAX_INSTANCES).contains(&n) {
        return Err(at("instances".into(), format!("1 to {MAX_INSTANCES} instances, not {n}")));
    }
    for (i, step) in parsed.steps.iter().enumerate() {
        if let Step::Packet(PacketSpec { instance: Some(k), .. }) = step {
            if !(1..=n).contains(k) {
                let field = format!("steps[{i}].packet.instance");
                return Err(at(field, format!("instance {k} of 1 to {n} (`instances`)")));
            }
        }
    }
    // One simulator per instance, the same configuration and health (FS: a fleet).
    let mut sims = Vec::with_capacity(n);
    for _ in 0..n {
        let mut sim = Simulator::new(cfg.to_model()).map_err(|e| SimulateError::Model {
            path: config.to_owned(),
            message: e.to_string(),
        })?;
        // Section 7 locality (region order, latencies) of the configuration.
        sim.set_topology(cfg.advanced_topology());
        apply_health(&mut sim, &parsed.health).map_err(|a| {
            let field = format!("health.{a}");
            at(field, format!("{a} is not a configured backend"))
        })?;
        sims.push(sim);
    }

    for (i, step) in parsed.steps.iter().enumerate() {
        match step {
            Step::Packet(spec) => {
                let k = spec.instance.unwrap_or(1);
                let line = match impossible(spec) {
                    Some(_) => OutputLine::malformed(i),
                    None => {
                        let payload = spec.quic_cid.as_ref().map(|c| c.short_header());
                        let sim = &mut sims[k - 1];
                        let o = sim
                            .packet_with_payload(&spec.info(), payload.as_deref().unwrap_or(&[]));
                        OutputLine::from_outcome(i, &o)
                    }
                };
                let line = OutputLine { instance: (n > 1).then_some(k), ..line };
                write_line(out, &line).map_err(SimulateError::Output)?;
            }
            Step::Advance(Seconds(d)) => {
                for sim in &mut sims {
                    sim.advance(*d);
                    sim.rebuild();
                }
            }
            Step::Health(h) => {
                for sim in &mut sims {
                    apply_health(sim, h).map_err(|a| {
                        let field = format!("steps[{i}].health.{a}");
                        at(field, format!("{a} is not a configured backend"))
                    })?;
                }
            }
            Step::Reload(_) => {
                let Some(c) = reloads.remove(&i) else { continue };
                for sim in &mut sims {
                    sim.replace_model(c.to_model()).map_err(|e| {
                        let field = format!("steps[{i}].reload");
                        at(field, format!("cannot apply the configuration: {e}"))
                    })?;
                    sim.set_topology(c.advanced_topology());
                }
            }
            Step::Sync => {
                for from in 0..n {
                    let entries = sims[from].entries_at_risk();
                    for to in (0..n).filter(|&to| to != from) {
                        let mut outcomes: BTreeMap<&'static str, u64> = BTreeMap::new();
                        for got in sims[to].install_peer_entries(&entries) {
                            *outcomes.entry(got.as_str()).or_default() += 1;
                        }
                        let outcomes = ZoneCounts(
                            outcomes.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
                        );
                        let pair = SyncPair {
                            from: from + 1,
                            to: to + 1,
                            entries: entries.len(),
                            outcomes,
                        };
                        write_line(out, &SyncLine { step: i, sync: pair })
                            .map_err(SimulateError::Output)?;
                    }
                }
            }
            Step::Traffic(t) => {
                // On the first instance (section 7's control loop is per instance).
                let sim = &mut sims[0];
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn scenario(text: &str) -> Result<Scenario, SimulateError> {
        parse_scenario(Path::new("s.yaml"), text).map(|(s, _)| s)
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
        let v6 = spillway_core::model::Endpoint { addr: "fd00::1".parse().unwrap(), port: 80 };
        assert_eq!(v6.to_string(), "[fd00::1]:80");
    }
}
