//! The benchmark's output: one [`Row`] per result, printed as a table line and written, with
//! `--json`, as one JSON object per line (`scripts/bench-pipeline.sh` and the scripts it runs
//! read those by field name).

use std::fmt;

use serde::{Serialize, Serializer};

use spillway_gen as gen;

/// One measured result.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Row {
    pub name: String,
    pub workers: usize,
    #[serde(serialize_with = "dp4")]
    pub mpps: f64,
    #[serde(serialize_with = "dp4")]
    pub baseline_mpps: f64,
    /// Share of the generator's bursts the ring refused (the worker was the bottleneck when
    /// this is well above zero; near zero, the generator was).
    #[serde(serialize_with = "dp4")]
    pub refused_share: f64,
    pub hits: u64,
    pub new: u64,
    pub bypassed: u64,
    pub evictions: u64,
    pub entries: u64,
    /// What only some rows have, after the common fields.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Extra>,
}

impl Row {
    /// A one-worker scenario's rate, its baseline, and how much of the generator's output the
    /// ring refused.
    pub fn one_worker(name: &str, mpps: f64, baseline_mpps: f64, report: &gen::SendReport) -> Row {
        Row {
            name: name.to_owned(),
            workers: 1,
            mpps,
            baseline_mpps,
            refused_share: report.refused as f64 / (report.sent + report.refused).max(1) as f64,
            ..Row::default()
        }
    }
}

/// The fields of a [`Row`] that only some results have.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Extra {
    /// `syn_flood_guarded`: the established flows' share of the packets that hit their entry.
    Guarded {
        #[serde(serialize_with = "dp4")]
        established_hit_share: f64,
    },
    /// `flood_room`, `flood_full`.
    Flood(FloodExtra),
    /// The `latency` row.
    Latency(LatencyExtra),
    /// The `scaling_replay` row.
    Scaling {
        #[serde(serialize_with = "dp3")]
        one_worker_mpps: f64,
        #[serde(serialize_with = "dp3")]
        ratio: f64,
    },
    /// The `memory` row.
    Memory(MemoryExtra),
}

/// Printed at the end of a table line: the fields as they are in the JSON object.
impl fmt::Display for Extra {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let json = serde_json::to_string(self).map_err(|_| fmt::Error)?;
        f.write_str(json.trim_start_matches('{').trim_end_matches('}'))
    }
}

/// A flood experiment's phases (`flood.rs`).
#[derive(Debug, Clone, Serialize)]
pub struct FloodExtra {
    pub capacity: usize,
    pub established_flows: u32,
    pub guard_per_sec: u32,
    #[serde(serialize_with = "dp4")]
    pub before_mpps: f64,
    #[serde(serialize_with = "dp4")]
    pub flood_mpps: f64,
    #[serde(serialize_with = "dp4")]
    pub flood_over_before: f64,
    #[serde(serialize_with = "dp6")]
    pub before_hit_share: f64,
    #[serde(serialize_with = "dp6")]
    pub after_hit_share: f64,
    pub entries_before_flood: u64,
}

/// Latency percentiles in TSC cycles, io-forward (`io`) and balancer (`lb`).
#[derive(Debug, Clone, Serialize)]
pub struct LatencyExtra {
    pub io_p50_cycles: u64,
    pub io_p99_cycles: u64,
    pub lb_p50_cycles: u64,
    pub lb_p99_cycles: u64,
    #[serde(serialize_with = "dp1")]
    pub added_p50_ns: f64,
    pub tsc_hz: u64,
}

/// Peak memory, what a connection costs, and which memory DPDK ran on.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryExtra {
    pub peak_rss_kib: u64,
    pub bytes_per_connection: usize,
    pub ten_million_entries: usize,
    pub ten_million_mib: usize,
    pub hugepages: bool,
}

/// Fractions written with at most this many decimals, as the table prints them: more digits
/// than the measurement holds would only be noise.
fn decimals<S: Serializer>(x: f64, digits: i32, s: S) -> Result<S::Ok, S::Error> {
    let scale = 10f64.powi(digits);
    s.serialize_f64((x * scale).round() / scale)
}

fn dp1<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    decimals(*x, 1, s)
}

fn dp3<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    decimals(*x, 3, s)
}

fn dp4<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    decimals(*x, 4, s)
}

fn dp6<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    decimals(*x, 6, s)
}

pub fn print_row(r: &Row) {
    println!(
        "{:<22} {:>7.2} Mpps  {:>5.1}% of io_forward  refused {:>5.1}%  hits {} new {} \
         bypassed {} evictions {} entries {} {}",
        r.name,
        r.mpps,
        if r.baseline_mpps > 0.0 { r.mpps / r.baseline_mpps * 100.0 } else { 0.0 },
        r.refused_share * 100.0,
        r.hits,
        r.new,
        r.bypassed,
        r.evictions,
        r.entries,
        r.extra.as_ref().map_or(String::new(), Extra::to_string)
    );
}

/// The summary of a `--pairs` run: each scenario row's share of the mean of the baselines just
/// before and after it, and whether both of those ran at or above the median baseline of the
/// run. Such pairs say best what the goal asks: when the host slows the generator's core the
/// baseline falls further than the balancer and the share grows; when one of the two
/// baselines is slow, the host changed speed during the pair.
pub fn print_pairs(rows: &[Row]) {
    let is_base = |r: &Row| r.name.starts_with("io_forward");
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let typical = median(&mut rows.iter().filter(|r| is_base(r)).map(|r| r.mpps).collect());
    let mut all = Vec::new();
    let mut fast = Vec::new();
    for w in rows.windows(3) {
        let [before, r, after] = w else { continue };
        if is_base(r) || !is_base(before) || !is_base(after) {
            continue;
        }
        let share = r.mpps / ((before.mpps + after.mpps) / 2.0).max(f64::MIN_POSITIVE) * 100.0;
        let both_fast = before.mpps.min(after.mpps) >= typical;
        println!(
            "pair: {} {:.2} Mpps between io_forward {:.2} and {:.2}: {share:.1}%{}",
            r.name,
            r.mpps,
            before.mpps,
            after.mpps,
            if both_fast { "" } else { " (a baseline below the median)" }
        );
        all.push(share);
        if both_fast {
            fast.push(share);
        }
    }
    let (n, k) = (all.len(), fast.len());
    println!(
        "pairs: {n}; share of io_forward median {:.1}%; {k} with both baselines at or above \
         the median baseline ({typical:.2} Mpps): median {:.1}%",
        median(&mut all),
        median(&mut fast)
    );
    // A balancer within a fifth of io-forward's rate is not what the worker costs but what the
    // pipeline (generator, ring, the frames' cross-core transfers) lets through to either: on
    // a host whose cross-core transfers are slow, io-forward and the balancer both run at the
    // pipeline's rate, and the share comes out near 100% whatever the worker costs.
    let share = median(&mut all);
    if share > 80.0 {
        println!(
            "pairs: the scenario runs at {share:.0}% of io_forward ({typical:.2} Mpps): the \
             pipeline, not the worker, sets both rates here, and the share says little of the \
             worker (see the host line above)"
        );
    }
}

/// Writes the rows, one JSON object per line, to `path` when given.
pub fn write_json(path: Option<&str>, rows: &[Row]) {
    let Some(path) = path else { return };
    let mut out = String::new();
    for r in rows {
        out += &serde_json::to_string(r).expect("a row as JSON");
        out.push('\n');
    }
    std::fs::write(path, out).expect("write --json file");
    println!("wrote {path}");
}

/// With `--features phase-clock`: where this thread's burst path spent its time since the last
/// call, printed as `label: cycles per packet ...` (nothing without the feature).
pub fn print_phases(label: &str) {
    let phases = spillway_dataplane::path::phase_clock::take();
    if phases.packets > 0 {
        println!("{label}: {phases}");
    }
}
