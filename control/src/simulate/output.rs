//! What `simulate` prints: one JSON object per packet step, one per traffic second.

use std::io::Write;

use serde::Serialize;
use spillway_core::simulator::{Outcome, TrafficReport};

/// One output line.
#[derive(Debug, Serialize)]
pub(super) struct OutputLine {
    pub(super) step: usize,
    /// The instance that received the packet, with more than one (FS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) instance: Option<usize>,
    pub(super) verdict: &'static str,
    pub(super) backend: Option<String>,
    pub(super) reason: &'static str,
    pub(super) service: Option<String>,
    pub(super) eligible: Option<EligibleOut>,
    /// A packet with a QUIC connection ID, for a service with QUIC-LB: its decode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) quic: Option<QuicOut>,
}

/// What a packet's QUIC connection ID decodes to (QL-3, QL-4).
#[derive(Debug, Serialize)]
pub(super) struct QuicOut {
    pub(super) config: Option<u8>,
    pub(super) server_id: Option<String>,
    pub(super) backend: Option<String>,
    /// Why a packet without a valid entry goes by its 4-tuple, or `null`.
    pub(super) fallback: Option<&'static str>,
}

#[derive(Debug, Serialize)]
pub(super) struct EligibleOut {
    pub(super) kind: &'static str,
    pub(super) zonal_match: bool,
    pub(super) size: usize,
}

impl OutputLine {
    pub(super) fn malformed(step: usize) -> OutputLine {
        OutputLine {
            step,
            instance: None,
            verdict: "drop",
            backend: None,
            reason: "malformed",
            service: None,
            eligible: None,
            quic: None,
        }
    }

    pub(super) fn from_outcome(step: usize, o: &Outcome) -> OutputLine {
        OutputLine {
            step,
            instance: None,
            verdict: if o.decision.backend().is_some() { "forward" } else { "drop" },
            backend: o.backend.map(|e| e.to_string()),
            reason: o.decision.reason_str(),
            service: o.service.clone(),
            eligible: o.eligible.map(|e| EligibleOut {
                kind: e.kind.as_str(),
                zonal_match: e.zonal_match,
                size: e.size,
            }),
            quic: o.quic.as_ref().map(|q| QuicOut {
                config: q.config,
                server_id: q.server_id.clone(),
                backend: q.backend.map(|e| e.to_string()),
                fallback: q.fallback.map(|f| f.as_str()),
            }),
        }
    }
}

/// One output line per pair of instances of a `sync` step: what `to` did with the entries at
/// risk `from` sent (FS-1, FS-2, FS-4).
#[derive(Debug, Serialize)]
pub(super) struct SyncLine {
    pub(super) step: usize,
    pub(super) sync: SyncPair,
}

#[derive(Debug, Serialize)]
pub(super) struct SyncPair {
    pub(super) from: usize,
    pub(super) to: usize,
    pub(super) entries: usize,
    /// Outcome (`installed`, `refreshed`, `kept_local`, ...) -> count, those that happened.
    pub(super) outcomes: ZoneCounts,
}

/// One output line per interval (virtual second) of a traffic step.
#[derive(Debug, Serialize)]
pub(super) struct TrafficLine {
    pub(super) step: usize,
    pub(super) interval: usize,
    /// Virtual time at the start of the interval, in seconds.
    pub(super) t: f64,
    pub(super) service: String,
    pub(super) groups: Vec<GroupLine>,
    pub(super) dropped: u64,
}

#[derive(Debug, Serialize)]
pub(super) struct GroupLine {
    pub(super) group: String,
    pub(super) zone: String,
    pub(super) new_connections: u64,
    pub(super) live_connections: u64,
    pub(super) from_zones: ZoneCounts,
}

/// Client zone -> count, as a JSON object in the model's zone order.
#[derive(Debug)]
pub(super) struct ZoneCounts(pub(super) Vec<(String, u64)>);

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
    pub(super) fn from_report(step: usize, r: &TrafficReport) -> Vec<TrafficLine> {
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
pub(super) struct Spaced;

/// `, ` before every item of an object or array but the first.
fn separator<W: ?Sized + Write>(w: &mut W, first: bool) -> std::io::Result<()> {
    if first {
        Ok(())
    } else {
        w.write_all(b", ")
    }
}

impl serde_json::ser::Formatter for Spaced {
    fn begin_object_key<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        separator(w, first)
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }

    fn begin_array_value<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        separator(w, first)
    }
}

pub(super) fn write_line(out: &mut dyn Write, line: &impl Serialize) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(160);
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, Spaced);
    line.serialize(&mut ser).map_err(std::io::Error::other)?;
    buf.push(b'\n');
    out.write_all(&buf)
}
