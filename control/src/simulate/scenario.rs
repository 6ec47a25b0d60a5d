//! The scenario file: its format (steps, packets, health words, traffic) and its parser,
//! with every error located in the file (docs/simulate.md).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use spillway_core::addr::Addr;
use spillway_core::flow::{proto, tcp_flags, PacketInfo};
use spillway_core::model::Model;
use spillway_core::simulator::{TrafficPlan, TrafficSource};

use super::*;

/// A whole scenario file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Scenario {
    /// Instances of a fleet that share their entries at risk (FS), 1 to [`MAX_INSTANCES`];
    /// every step but a packet applies to all of them.
    #[serde(default = "one")]
    pub(super) instances: usize,
    /// Initial health overrides; unnamed backends start healthy.
    #[serde(default)]
    pub(super) health: HealthMap,
    /// The steps, run in order.
    pub(super) steps: Vec<Step>,
}

fn one() -> usize {
    1
}

/// Most instances a scenario simulates.
pub const MAX_INSTANCES: usize = 8;

/// Address -> verdict (applied together, so their order does not matter).
pub(super) type HealthMap = BTreeMap<HealthAddr, HealthWord>;

/// One step.
#[derive(Debug, Deserialize)]
#[serde(try_from = "StepSpec")]
pub(super) enum Step {
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
    /// Every instance sends its entries at risk to every other (FS-1, FS-2, FS-4).
    Sync,
}

/// A step as written: a mapping with exactly one of these keys (the YAML reader takes enums only
/// from `!tags`, so the mapping is read as a struct and checked).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StepSpec {
    pub(super) packet: Option<PacketSpec>,
    pub(super) advance: Option<Seconds>,
    pub(super) health: Option<HealthMap>,
    pub(super) reload: Option<PathBuf>,
    pub(super) traffic: Option<TrafficStep>,
    /// `sync: all` (the only value).
    pub(super) sync: Option<SyncWord>,
}

/// The value of a `sync` step.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum SyncWord {
    /// Every instance to every other.
    All,
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
        if let Some(SyncWord::All) = s.sync {
            found.push("sync");
            step = Some(Step::Sync);
        }
        match (step, found.len()) {
            (Some(step), 1) => Ok(step),
            _ => Err(format!(
                "a step has exactly one of `packet`, `advance`, `health`, `reload`, `traffic`, \
                 `sync` (found {})",
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
pub(super) struct TrafficSpec {
    /// Client zone (source addresses from its first client subnet).
    pub(super) from_zone: String,
    /// New connections per second.
    pub(super) new_connections_per_sec: u32,
    /// Duration, whole seconds (one control interval each).
    pub(super) seconds: u32,
    /// How long each connection stays open.
    #[serde(default)]
    pub(super) hold_sec: u32,
    /// The service (default: the first with `advanced`, else the first).
    #[serde(default)]
    pub(super) service: Option<String>,
}

/// A `traffic` step: one source (a mapping) or several at once (a list of mappings that
/// agree on `seconds`, `hold_sec` and `service`).
#[derive(Debug)]
pub(super) struct TrafficStep {
    /// Written as a list.
    pub(super) list: bool,
    pub(super) sources: Vec<TrafficSpec>,
    pub(super) seconds: u32,
    pub(super) hold_sec: u32,
    pub(super) service: Option<String>,
}

impl TrafficStep {
    pub(super) fn from_specs(list: bool, sources: Vec<TrafficSpec>) -> Result<TrafficStep, String> {
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
    pub(super) fn plan(&self, model: &Model) -> TrafficPlan {
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
pub(super) enum HealthWord {
    Healthy,
    Unhealthy,
    /// "As the probes say": no probes run in a simulation, so healthy.
    Auto,
}

/// One packet.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PacketSpec {
    pub(super) src: IpField,
    pub(super) dst: IpField,
    pub(super) proto: ProtoField,
    #[serde(default)]
    pub(super) sport: u16,
    #[serde(default)]
    pub(super) dport: u16,
    #[serde(default)]
    pub(super) flags: Option<Flags>,
    #[serde(default)]
    pub(super) fragment: bool,
    /// The instance that receives it (1-based; 1 when absent).
    #[serde(default)]
    pub(super) instance: Option<usize>,
    /// A UDP packet's QUIC short header: its destination connection ID (QL-3).
    #[serde(default)]
    pub(super) quic_cid: Option<CidField>,
}

impl PacketSpec {
    pub(super) fn info(&self) -> PacketInfo {
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
/// - TCP flags on anything but an unfragmented TCP segment;
/// - a QUIC connection ID on anything but an unfragmented UDP datagram.
pub(super) fn impossible(p: &PacketSpec) -> Option<&'static str> {
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
    } else if p.quic_cid.is_some() && (p.fragment || p.proto.0 != proto::UDP) {
        Some("a QUIC connection ID on something else than an unfragmented UDP datagram")
    } else {
        None
    }
}

/// A QUIC connection ID field: 1 to 20 octets in hex.
#[derive(Debug, Clone)]
pub(super) struct CidField(pub(super) Vec<u8>);

impl CidField {
    /// The UDP payload it stands for: a short header (the fixed bit set) with this
    /// destination connection ID, then a few octets of protected packet.
    pub(super) fn short_header(&self) -> Vec<u8> {
        [0x40].iter().chain(&self.0).chain(&[0x5a; 16]).copied().collect()
    }
}

impl<'de> Deserialize<'de> for CidField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let bytes = spillway_core::quic_lb::hex_octets(s.trim())
            .ok_or_else(|| serde::de::Error::custom(format!("`{s}` is not hex octets")))?;
        if !(1..=20).contains(&bytes.len()) {
            return Err(serde::de::Error::custom(format!(
                "{} octets, not 1 to 20 (QUIC v1's connection IDs)",
                bytes.len()
            )));
        }
        Ok(CidField(bytes))
    }
}

/// An IP address field.
#[derive(Debug, Clone, Copy)]
pub(super) struct IpField(pub(super) Addr);

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
pub(super) struct HealthAddr {
    pub(super) text: String,
    pub(super) addr: Addr,
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
pub(super) struct ProtoField(pub(super) u8);

pub(super) const PROTO_HELP: &str = "expected TCP, UDP, ICMP, ICMPv6 or a protocol number 0..=255";

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
pub(super) struct Flags(pub(super) u8);

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
pub(super) struct Seconds(pub(super) Duration);

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

pub(super) fn parse_scenario(
    path: &Path,
    text: &str,
) -> Result<(Scenario, Locations), SimulateError> {
    config::yaml::from_str(text).map_err(|e| SimulateError::Scenario {
        path: path.to_owned(),
        location: Some(e.location),
        field: e.field,
        message: e.message,
    })
}
