//! `spillwayctl simulate` scenarios: every rule of SPEC sections 2 and 3 (CT, CP, CD, FO) and
//! the worked examples of section 4 (ZA-E1..ZA-E3), run through `simulate::run` against real
//! configuration files, with the expected output written by hand next to each scenario.
//!
//! Layout: `tests/scenarios/NAME.yaml` is a scenario, `tests/scenarios/NAME.expected` its
//! expected output, `tests/scenarios/configs/` the configurations (each says what it holds).
//!
//! An `.expected` file holds one JSON line per packet step, in order; blank lines and lines
//! starting with `#` are comments. Lines are compared as JSON values, so every key must be
//! there with its exact value, except that `backend` may be written as:
//!
//! - `"$N"`: the same backend as the output line of step N (not null);
//! - `"a|b|c"`: one of these backends (for new connections over a set of several, where the
//!   hash decides and only the set can be written down by hand).
//!
//! `spillwayctl simulate` itself, the binary on these files, is tested by spillway-ctl's
//! `tests/simulate.rs`.

use std::path::{Path, PathBuf};

use serde_json::Value;
use spillway_control::config::ConfigError;
use spillway_control::simulate::{run, SimulateError};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios")
}

/// Runs scenario `name` on `configs/<config>` and returns stdout.
fn output(config: &str, name: &str) -> String {
    let d = dir();
    let mut out = Vec::new();
    if let Err(e) = run(&d.join("configs").join(config), &d.join(format!("{name}.yaml")), &mut out)
    {
        panic!("scenario {name} failed: {e}");
    }
    String::from_utf8(out).unwrap()
}

/// Runs scenario `name` and compares its output with `NAME.expected`.
fn check(config: &str, name: &str) {
    let actual = output(config, name);
    let expected_path = dir().join(format!("{name}.expected"));
    let expected_text = std::fs::read_to_string(&expected_path).unwrap();
    compare(name, &actual, &expected_text);
}

fn compare(name: &str, actual: &str, expected_text: &str) {
    let actual: Vec<Value> = actual
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{name}: bad output {l}: {e}")))
        .collect();
    let expected: Vec<(usize, &str)> = expected_text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let dump = || actual.iter().map(Value::to_string).collect::<Vec<_>>().join("\n");
    assert_eq!(
        actual.len(),
        expected.len(),
        "{name}: {} output lines, {} expected; output:\n{}",
        actual.len(),
        expected.len(),
        dump()
    );
    let backend_of_step = |n: u64| -> Value {
        let line = actual
            .iter()
            .find(|v| v["step"].as_u64() == Some(n))
            .unwrap_or_else(|| panic!("{name}: no output line for step {n}"));
        assert!(line["backend"].is_string(), "{name}: step {n} has no backend");
        line["backend"].clone()
    };
    for (got, (lineno, text)) in actual.iter().zip(&expected) {
        let mut want: Value = serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("{name}.expected:{lineno}: not JSON: {e}"));
        let where_ = format!("{name}.expected:{lineno}\n  expected {text}\n  got      {got}");
        if let Some(b) = want["backend"].as_str().map(str::to_owned) {
            if let Some(n) = b.strip_prefix('$') {
                let n: u64 = n.parse().unwrap_or_else(|_| panic!("{where_}: bad placeholder"));
                want["backend"] = backend_of_step(n);
            } else if b.contains('|') {
                let one_of: Vec<&str> = b.split('|').collect();
                let g = got["backend"].as_str();
                assert!(g.is_some_and(|g| one_of.contains(&g)), "{where_}: backend not one of");
                want["backend"] = got["backend"].clone();
            }
        }
        assert_eq!(got, &want, "{where_}");
    }
}

// ---- section 2.7: connection state shared by a fleet ----

/// FS-1 (entries at risk shared), FS-2 (stored), FS-3 (taken over on their backend), FS-4 (an
/// instance's own entry wins), on two simulated instances.
#[test]
fn ql_3_ql_4_a_connection_id_routes_a_packet_without_an_entry_or_says_why_not() {
    check("quic.yaml", "ql_3_4");
}

#[test]
fn fs_1_to_4_two_instances_share_entries_at_risk() {
    check("fs_a.yaml", "fs_1_4");
}

// ---- section 2: connection tracking ----

#[test]
fn ct_2_syn_skips_lookup_and_replaces_entry() {
    check("two.yaml", "ct_2_syn");
}

#[test]
fn ct_2_syn_looked_up_with_per_session_client_ip() {
    check("session_ip.yaml", "ct_2_session");
}

#[test]
fn ct_3_hit_or_selection_and_ct_7_fin_rst_keep_entry() {
    check("two.yaml", "ct_3_7");
}

#[test]
fn ct_8_idle_timeout_exact_restart_default_and_reload() {
    check("idle.yaml", "ct_8_idle");
}

#[test]
fn ct_12_replacement_entry_is_ordinary() {
    check("two.yaml", "ct_12");
}

#[test]
fn ct_13_first_reason_wins() {
    check("ct13.yaml", "ct_13");
}

// ---- section 2: persistence and draining ----

#[test]
fn cp_1_to_4_persistence_table() {
    check("cp.yaml", "cp_1_4");
}

#[test]
fn cp_5_entries_made_on_unhealthy_backends() {
    check("cp5.yaml", "cp_5");
}

#[test]
fn cd_1_to_5_removal_draining_readding() {
    check("cd_a.yaml", "cd");
}

// ---- section 3: eligible backends and failover ----

#[test]
fn fo_1_no_failover_groups() {
    check("two.yaml", "fo_1");
}

#[test]
fn fo_2_each_of_the_five_sets() {
    check("fo.yaml", "fo_2");
}

#[test]
fn fo_3_and_fo_6_nothing_healthy() {
    check("fo3.yaml", "fo_3_6");
}

#[test]
fn fo_9_flip_and_flip_back() {
    check("fo9.yaml", "fo_9");
}

// ---- section 4: zonal affinity, worked examples ----

#[test]
fn za_e1_failover_side_has_no_match_in_client_zone() {
    check("za_e1.yaml", "za_e1");
}

#[test]
fn za_e2_spill_ratio_point_eight() {
    check("za_e2.yaml", "za_e2");
}

#[test]
fn za_e3_ratio_one_and_zero() {
    check("za_e3.yaml", "za_e3");
}

#[test]
fn za_3_stay_within_zone_and_za_1() {
    check("za_3.yaml", "za_3");
}

// ---- packets ----

#[test]
fn packet_shapes_ipv6_fragments_and_malformed() {
    check("packets.yaml", "packets");
}

// ---- reproducibility (CH-4: no hash_seed -> the built-in key, never a random one) ----

#[test]
fn same_scenario_twice_gives_identical_output() {
    let first = output("two.yaml", "many");
    let second = output("two.yaml", "many");
    assert_eq!(first, second);
    assert_eq!(first.lines().count(), 40, "{first}");
    // Both backends get some of the 32 new flows (not a degenerate hash).
    for b in ["\"198.18.1.1\"", "\"198.18.1.2\""] {
        assert!(first.contains(b), "{first}");
    }
    // Setting hash_seed to the built-in key changes nothing.
    assert_eq!(first, output("two_seeded.yaml", "many"));
}

// ---- errors ----

fn tmp_scenario(name: &str, text: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("simulate");
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn run_text(name: &str, config: &str, text: &str) -> (String, Result<(), SimulateError>) {
    let scenario = tmp_scenario(name, text);
    let mut out = Vec::new();
    let r = run(&dir().join("configs").join(config), &scenario, &mut out);
    (String::from_utf8(out).unwrap(), r)
}

#[test]
fn bad_config_is_rejected_with_every_validation_error() {
    let d = dir();
    let mut out = Vec::new();
    let e = run(&d.join("configs/bad.yaml"), &d.join("ct_12.yaml"), &mut out).unwrap_err();
    assert!(out.is_empty());
    let SimulateError::Config(ConfigError::Invalid { errors, .. }) = &e else {
        panic!("expected the validation errors, got {e}");
    };
    assert_eq!(errors.len(), 2, "{e}");
    let text = e.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].contains("configs/bad.yaml:19:"), "{text}");
    assert!(lines[0].contains("connection_persistence_on_unhealthy_backends"), "{text}");
    assert!(lines[1].contains("configs/bad.yaml:22:"), "{text}");
    assert!(lines[1].contains("zone-q"), "{text}");
}

#[test]
fn bad_scenarios_name_file_line_and_field() {
    let head = "health: {198.18.1.2: unhealthy}\nsteps:\n  - advance: 1\n";
    let pkt = "src: 198.18.10.5, dst: 198.18.0.100";
    // (step text on line 4, field, part of the message)
    let cases: &[(&str, &str, &str)] = &[
        ("- pakcet: {}", "steps[1].pakcet", "unknown field `pakcet`"),
        (
            &format!("- packet: {{{pkt}, proto: TCP, sprot: 1}}"),
            "steps[1].packet.sprot",
            "unknown field `sprot`",
        ),
        (
            "- packet: {src: 198.18.10, dst: 198.18.0.100, proto: TCP}",
            "steps[1].packet.src",
            "`198.18.10` is not an IP address",
        ),
        (
            "- packet: {src: 198.18.10.5, dst: nowhere, proto: TCP}",
            "steps[1].packet.dst",
            "`nowhere` is not an IP address",
        ),
        (
            &format!("- packet: {{{pkt}, proto: SCTP}}"),
            "steps[1].packet.proto",
            "`SCTP` is not a protocol",
        ),
        (
            &format!("- packet: {{{pkt}, proto: 256}}"),
            "steps[1].packet.proto",
            "256 is not a protocol",
        ),
        (
            &format!("- packet: {{{pkt}, proto: TCP, flags: SYN}}"),
            "steps[1].packet.flags",
            "`Y` in `SYN` is not a TCP flag",
        ),
        (
            &format!("- packet: {{{pkt}, proto: TCP, sport: 65536}}"),
            "steps[1].packet.sport",
            "65536",
        ),
        (&format!("- packet: {{{pkt}}}"), "steps[1].packet", "missing field `proto`"),
        ("- advance: -5", "steps[1].advance", "negative"),
        ("- advance: 0.0001", "steps[1].advance", "at most 3 decimals"),
        ("- advance: soon", "steps[1].advance", "non-negative number of seconds"),
        ("- health: {198.18.1.1: sick}", "steps[1].health.198.18.1.1", "unknown variant `sick`"),
        ("- health: {198.18.1: healthy}", "steps[1].health.198.18.1", "not an IP address"),
        ("- {advance: 1, reload: x.yaml}", "steps[1]", "exactly one of"),
        ("- {}", "steps[1]", "exactly one of"),
        // Found while running: the lines of the steps before were written.
        (
            "- health: {198.18.9.9: healthy}",
            "steps[1].health.198.18.9.9",
            "198.18.9.9 is not a configured backend",
        ),
        ("- reload: does-not-exist.yaml", "steps[1].reload", "cannot read"),
    ];
    for (i, (step, field, message)) in cases.iter().enumerate() {
        let text = format!("{head}  {step}\n");
        let (_, r) = run_text(&format!("bad{i}.yaml"), "two.yaml", &text);
        let e = r.expect_err(step);
        let shown = e.to_string();
        assert_eq!(e.line(), Some(4), "{step}: {shown}");
        assert_eq!(e.field(), Some(*field), "{step}: {shown}");
        assert!(
            shown.starts_with(&format!("{}:4:", tmp_scenario_path(&format!("bad{i}.yaml")))),
            "{shown}"
        );
        assert!(shown.contains(&format!("field `{field}`: ")), "{shown}");
        assert!(shown.contains(message), "{step}: {shown}");
    }
}

fn tmp_scenario_path(name: &str) -> String {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("simulate").join(name).display().to_string()
}

#[test]
fn bad_scenario_file_level_errors() {
    // Unknown top-level key, on line 1.
    let (_, r) = run_text("top.yaml", "two.yaml", "helth: {}\nsteps: []\n");
    let e = r.unwrap_err();
    assert_eq!((e.line(), e.field()), (Some(1), Some("helth")), "{e}");
    // Initial health of an address that is no backend.
    let (_, r) = run_text("init.yaml", "two.yaml", "steps: []\nhealth: {198.18.9.9: unhealthy}\n");
    let e = r.unwrap_err();
    assert_eq!((e.line(), e.field()), (Some(2), Some("health.198.18.9.9")), "{e}");
    // Broken YAML.
    let (_, r) = run_text("syntax.yaml", "two.yaml", "steps:\n  - packet: {src: [\n");
    assert!(matches!(r, Err(SimulateError::Scenario { location: Some(_), .. })), "{r:?}");
    // No steps at all.
    let (_, r) = run_text("nosteps.yaml", "two.yaml", "health: {}\n");
    assert!(r.unwrap_err().to_string().contains("missing field `steps`"));
    // A missing scenario file.
    let mut out = Vec::new();
    let e = run(&dir().join("configs/two.yaml"), Path::new("/nonexistent/s.yaml"), &mut out)
        .unwrap_err();
    assert!(e.to_string().starts_with("/nonexistent/s.yaml: cannot read"), "{e}");
}

#[test]
fn runtime_errors_keep_the_lines_already_written() {
    let text = "steps:\n  - packet: {src: 198.18.10.5, dst: 198.18.0.100, proto: ICMP}\n  \
                - health: {198.18.9.9: healthy}\n  \
                - packet: {src: 198.18.10.5, dst: 198.18.0.100, proto: ICMP}\n";
    let (out, r) = run_text("partial.yaml", "two.yaml", text);
    assert_eq!(r.unwrap_err().line(), Some(3));
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.starts_with("{\"step\": 0, \"verdict\": \"forward\""), "{out}");
}

#[test]
fn reload_of_an_invalid_config_names_the_scenario_line_and_the_config_errors() {
    let bad = dir().join("configs/bad.yaml");
    let text = format!(
        "steps:\n  - packet: {{src: 198.18.10.5, dst: 198.18.0.100, proto: ICMP}}\n  \
         - reload: {}\n",
        bad.display()
    );
    let (out, r) = run_text("reload.yaml", "two.yaml", &text);
    // Reloads are validated before the first step: nothing was printed.
    assert!(out.is_empty(), "{out}");
    let e = r.unwrap_err();
    assert!(matches!(e, SimulateError::Reload { .. }), "{e}");
    assert_eq!((e.line(), e.field()), (Some(3), Some("steps[1].reload")), "{e}");
    let shown = e.to_string();
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines.len(), 3, "{shown}");
    assert!(lines[0].ends_with("field `steps[1].reload`: cannot reload:"), "{shown}");
    assert!(lines[1].contains("bad.yaml:19:"), "{shown}");
    assert!(lines[2].contains("bad.yaml:22:"), "{shown}");
}

#[test]
fn compare_rejects_a_wrong_expectation() {
    let got = "{\"step\": 0, \"verdict\": \"forward\", \"backend\": \"198.18.1.1\", \"reason\": \
               \"new_connection\", \"service\": \"web\", \"eligible\": null}\n";
    let same = got.replace("198.18.1.1", "198.18.1.2|198.18.1.1");
    compare("ok", got, &same);
    for wrong in [
        got.replace("new_connection", "conntrack_hit"),
        got.replace("198.18.1.1", "198.18.1.2|198.18.1.3"),
        got.replace("\"eligible\": null", "\"eligible\": null, \"extra\": 1"),
        format!("{got}{got}"),
    ] {
        let r = std::panic::catch_unwind(|| compare("wrong", got, &wrong));
        assert!(r.is_err(), "accepted {wrong}");
    }
}

// ---- traffic steps (SPEC section 7) ----
//
// The output of a traffic step depends on the hash of every flow, so it cannot be written by
// hand: these tests read the JSON lines and assert ranges. Steady state is intervals 5..20
// (the first interval runs on the weights of an idle service, the next few while the smoothed
// load settles).

const STEADY: std::ops::Range<u64> = 5..20;

/// The JSON lines of scenario `name` on `configs/<config>`.
fn traffic_lines(config: &str, name: &str) -> Vec<Value> {
    output(config, name)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{name}: bad output {l}: {e}")))
        .collect()
}

/// New connections from `zone` to `group` (any zone when `None`) in the intervals `range` of
/// step `step`.
fn sent(
    lines: &[Value],
    step: u64,
    group: &str,
    zone: Option<&str>,
    range: &std::ops::Range<u64>,
) -> u64 {
    lines
        .iter()
        .filter(|l| l["step"] == step && l["interval"].as_u64().is_some_and(|i| range.contains(&i)))
        .flat_map(|l| l["groups"].as_array().unwrap().iter())
        .filter(|g| g["group"] == group)
        .map(|g| match zone {
            Some(z) => g["from_zones"][z].as_u64().unwrap_or(0),
            None => g["new_connections"].as_u64().unwrap(),
        })
        .sum()
}

/// The share of `zone`'s new connections that went to `group` over the steady intervals.
fn share_of(lines: &[Value], step: u64, zone: &str, group: &str, groups: &[&str]) -> f64 {
    let total: u64 = groups.iter().map(|g| sent(lines, step, g, Some(zone), &STEADY)).sum();
    assert!(total > 0, "no connections from {zone} in step {step}");
    sent(lines, step, group, Some(zone), &STEADY) as f64 / total as f64
}

#[test]
fn traffic_lines_have_the_documented_shape() {
    let lines = traffic_lines("adv_zone.yaml", "traffic_waterfall_by_zone");
    assert_eq!(lines.len(), 20, "one line per second of the step");
    let first = output("adv_zone.yaml", "traffic_waterfall_by_zone");
    let first = first.lines().next().unwrap();
    assert!(
        first.starts_with(
            "{\"step\": 0, \"interval\": 0, \"t\": 0.0, \"service\": \"web\", \"groups\": \
             [{\"group\": \"web-a\", \"zone\": \"zone-a\", \"new_connections\": "
        ),
        "{first}"
    );
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["interval"], i as u64);
        assert_eq!(l["t"].as_f64(), Some(i as f64));
        assert_eq!(l["dropped"], 0);
        let groups = l["groups"].as_array().unwrap();
        let names: Vec<&str> = groups.iter().map(|g| g["group"].as_str().unwrap()).collect();
        assert_eq!(names, ["web-a", "web-b", "web-c"]);
        // 400 new connections every second, all from zone-a.
        let new: u64 = groups.iter().map(|g| g["new_connections"].as_u64().unwrap()).sum();
        let from_a: u64 =
            groups.iter().map(|g| g["from_zones"]["zone-a"].as_u64().unwrap_or(0)).sum();
        assert_eq!((new, from_a), (400, 400), "{l}");
        // Held 2 s: two seconds' worth are live at the end of each second (one after the first).
        let live: u64 = groups.iter().map(|g| g["live_connections"].as_u64().unwrap()).sum();
        let want = if i == 0 { 400 } else { 800 };
        assert!(live.abs_diff(want) <= 1, "interval {i}: {live} live");
    }
    // The same scenario gives the same output, byte for byte (CH-1, CH-4).
    assert_eq!(
        output("adv_zone.yaml", "traffic_waterfall_by_zone"),
        output("adv_zone.yaml", "traffic_waterfall_by_zone")
    );
}

/// AL-4: zone-a offers twice its group's capacity (400/s for 200/s). In steady state half of
/// its new connections stay in zone-a (50% +- 5 points), the other half fills the next group
/// in order, web-b (50% +- 5 points); web-c, not needed, gets less than 1%.
#[test]
fn al_4_waterfall_by_zone_at_twice_capacity_keeps_half_in_zone() {
    let lines = traffic_lines("adv_zone.yaml", "traffic_waterfall_by_zone");
    let groups = ["web-a", "web-b", "web-c"];
    let own = share_of(&lines, 0, "zone-a", "web-a", &groups);
    let next = share_of(&lines, 0, "zone-a", "web-b", &groups);
    let last = share_of(&lines, 0, "zone-a", "web-c", &groups);
    assert!((own - 0.5).abs() <= 0.05, "in zone: {own}");
    assert!((next - 0.5).abs() <= 0.05, "web-b: {next}");
    assert!(last <= 0.01, "web-c: {last}");
    // Per second too: web-a never runs far above its capacity of 200/s (+- 15%).
    for i in STEADY {
        let n = sent(&lines, 0, "web-a", None, &(i..i + 1));
        assert!((170..=230).contains(&n), "second {i}: {n} to web-a");
    }
}

/// AL-2: zone-a (300/s) and zone-b (150/s) send at the same time (a list of sources); every
/// client spreads evenly over the region's three equal groups: each group gets 1/3 +- 4 points
/// of each zone's new connections, and 150/s +- 10% in total per second on average.
#[test]
fn al_2_spray_to_region_splits_every_zone_evenly() {
    let lines = traffic_lines("adv_spray.yaml", "traffic_spray_to_region");
    assert_eq!(lines.len(), 20);
    let groups = ["web-a", "web-b", "web-c"];
    for zone in ["zone-a", "zone-b"] {
        for g in groups {
            let s = share_of(&lines, 0, zone, g, &groups);
            assert!((s - 1.0 / 3.0).abs() <= 0.04, "{zone} -> {g}: {s}");
        }
    }
    for g in groups {
        let per_sec = sent(&lines, 0, g, None, &STEADY) as f64 / (STEADY.end - STEADY.start) as f64;
        assert!((per_sec - 150.0).abs() <= 15.0, "{g}: {per_sec}/s");
    }
}

/// The configuration's locality reaches the simulator: with latencies r1-r3 10 ms and r1-r2
/// 50 ms, r1-a's excess (it offers 400/s for 200/s) goes to r3 (40%..60% of its connections,
/// none to r2); after a reload without latencies, to r2, first in configuration order (and
/// none to r3). Steady intervals 5..15 of each 15 s step.
#[test]
fn traffic_uses_the_configured_topology_and_reloads_it() {
    let lines = traffic_lines("adv_regions.yaml", "traffic_topology");
    assert_eq!(lines.len(), 30);
    let steady = 5..15;
    let total = |step| -> u64 {
        ["g-r1", "g-r2", "g-r3"].iter().map(|g| sent(&lines, step, g, Some("r1-a"), &steady)).sum()
    };
    let frac = |step, g| sent(&lines, step, g, Some("r1-a"), &steady) as f64 / total(step) as f64;
    assert!((0.4..=0.6).contains(&frac(0, "g-r3")), "latency order: {}", frac(0, "g-r3"));
    assert_eq!(sent(&lines, 0, "g-r2", None, &steady), 0);
    assert!((0.4..=0.6).contains(&frac(2, "g-r2")), "configuration order: {}", frac(2, "g-r2"));
    assert_eq!(sent(&lines, 2, "g-r3", None, &steady), 0);
    // The second step starts where the first ended on the virtual clock.
    let t: Vec<f64> =
        lines.iter().filter(|l| l["step"] == 2).map(|l| l["t"].as_f64().unwrap()).collect();
    assert_eq!(t.first(), Some(&15.0));
}

#[test]
fn bad_traffic_steps_name_line_and_field() {
    let head = "steps:\n  - advance: 1\n";
    let cases: &[(&str, &str, &str)] = &[
        (
            "- traffic: {from_zone: zone-a, new_connections_per_sec: 10}",
            "steps[1].traffic",
            "missing field `seconds`",
        ),
        (
            "- traffic: {from_zone: zone-a, new_connections_per_sec: 10, seconds: 1, hold: 2}",
            "steps[1].traffic.hold",
            "unknown field `hold`",
        ),
        (
            "- traffic: {from_zone: zone-a, new_connections_per_sec: -1, seconds: 1}",
            "steps[1].traffic.new_connections_per_sec",
            "-1",
        ),
        (
            "- traffic: {from_zone: zone-a, new_connections_per_sec: 10, seconds: 0}",
            "steps[1].traffic",
            "seconds: 0 is out of range 1..=3600",
        ),
        (
            "- traffic: [{from_zone: zone-a, new_connections_per_sec: 1, seconds: 2}, \
             {from_zone: zone-b, new_connections_per_sec: 1, seconds: 3}]",
            "steps[1].traffic",
            "traffic[1].seconds: the sources of one traffic step run together",
        ),
        ("- traffic: []", "steps[1].traffic", "at least one source"),
        ("- traffic: 5", "steps[1].traffic", "a traffic source"),
        // Checked against the model before the first step.
        (
            "- traffic: {from_zone: zone-q, new_connections_per_sec: 10, seconds: 1}",
            "steps[1].traffic.from_zone",
            "zone `zone-q` is not in topology.zones (zone-a, zone-b, zone-c)",
        ),
        (
            "- traffic: [{from_zone: zone-a, new_connections_per_sec: 1, seconds: 1}, \
             {from_zone: zone-x, new_connections_per_sec: 1, seconds: 1}]",
            "steps[1].traffic[1].from_zone",
            "zone `zone-x`",
        ),
        (
            "- traffic: {from_zone: zone-a, new_connections_per_sec: 10, seconds: 1, service: x}",
            "steps[1].traffic.service",
            "no service `x`",
        ),
        (
            "- {advance: 1, traffic: {from_zone: zone-a, new_connections_per_sec: 1, seconds: 1}}",
            "steps[1]",
            "`sync` (found advance, traffic)",
        ),
    ];
    for (i, (step, field, message)) in cases.iter().enumerate() {
        let text = format!("{head}  {step}\n");
        let (out, r) = run_text(&format!("badtraffic{i}.yaml"), "adv_zone.yaml", &text);
        let e = r.expect_err(step);
        let shown = e.to_string();
        assert!(out.is_empty(), "{step}: checked before the first step");
        assert_eq!(e.line(), Some(3), "{step}: {shown}");
        assert_eq!(e.field(), Some(*field), "{step}: {shown}");
        assert!(shown.contains(message), "{step}: {shown}");
    }
    // A zone without a client subnet has no sources to send from.
    let (_, r) = run_text(
        "nosubnet.yaml",
        "two.yaml",
        "steps:\n  - traffic: {from_zone: zone-b, new_connections_per_sec: 1, seconds: 1}\n",
    );
    let e = r.unwrap_err();
    assert_eq!(e.field(), Some("steps[0].traffic.from_zone"), "{e}");
    assert!(e.to_string().contains("has no client subnet"), "{e}");
}

/// Traffic steps mix with packet steps: a service without `advanced` (two.yaml, one group)
/// takes the traffic too (the first service is the default), and the clock moves on.
#[test]
fn traffic_and_packets_in_one_scenario() {
    let (out, r) = run_text(
        "mixed.yaml",
        "two.yaml",
        "steps:\n  - traffic: {from_zone: zone-a, new_connections_per_sec: 50, seconds: 2}\n  \
         - packet: {src: 198.18.10.5, dst: 198.18.0.100, proto: ICMP}\n",
    );
    r.unwrap();
    let lines: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[1]["t"].as_f64(), Some(1.0));
    assert_eq!(lines[1]["groups"][0]["new_connections"], 50);
    assert_eq!(lines[1]["groups"][0]["live_connections"], 0, "hold_sec defaults to 0");
    assert_eq!(lines[2]["step"], 1);
    assert_eq!(lines[2]["verdict"], "forward");
}

/// A scenario's `instances` and a packet's `instance` out of range are errors that name the
/// field and the line, before anything runs.
#[test]
fn fs_instances_out_of_range_are_located_errors() {
    let packet = "{src: 198.18.10.5, dst: 198.18.0.100, proto: TCP, sport: 1, dport: 80, flags: S";
    for (text, line, field, message) in [
        ("instances: 9\nsteps: []\n".to_owned(), 1, "instances", "1 to 8 instances, not 9"),
        ("instances: 0\nsteps: []\n".to_owned(), 1, "instances", "1 to 8 instances, not 0"),
        (
            format!("instances: 2\nsteps:\n  - packet: {packet}, instance: 3}}\n"),
            3,
            "steps[0].packet.instance",
            "instance 3 of 1 to 2",
        ),
    ] {
        let (out, r) = run_text("fs_bad.yaml", "fs_a.yaml", &text);
        let e = r.expect_err(&text);
        let shown = e.to_string();
        assert!(out.is_empty(), "{text}: checked before the first step");
        assert_eq!((e.line(), e.field()), (Some(line), Some(field)), "{shown}");
        assert!(shown.contains(message), "{shown}");
    }
}
