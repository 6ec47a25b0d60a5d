//! Validation of configuration files (NX-3): one test per rule, each checking that the error
//! names the field path and the line of the offending value; that several problems are all
//! reported at once; and that the shipped configurations load and compile to the expected model.

use std::path::Path;
use std::time::Duration;

use spillway_control::config::{self, Config, ConfigError};
use spillway_control::health::CheckKind;
use spillway_core::addr::{Addr, Prefix};
use spillway_core::flow::DEFAULT_HASH_SEED;
use spillway_core::model::{Encap, Ports, RuleDest, RuleProtocol};
use spillway_core::policy::{Affinity, Persistence, TrackingMode, ZonalAffinity};

const FILE: &str = "t.yaml";

/// Lines 1-15 of every service test: a valid dataplane, topology and health checks.
const HEAD: &str = "\
dataplane:
  ports: [net_null0]
  node:
    ipv4: 198.18.0.2/16
    ipv6: fd00::2/64
topology:
  region: r1
  zones:
    - name: zone-a
    - name: zone-b
health_checks:
  hc:
    type: TCP
    port: 80
services:
";

/// One valid service (lines 16-26 after [`HEAD`]); tests replace parts of it.
const WEB: &str = "  - name: web
    forwarding_rules:
      - vip: 198.18.0.10
        protocol: TCP
        ports: [80]
    backend_service:
      backends:
        - group: a
          zone: zone-a
          health_check: hc
          endpoints: [198.18.1.1]
";

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::from_yaml(Path::new(FILE), text)
}

/// `HEAD` + `WEB` with `from` replaced by `to` (which must occur).
fn web_with(from: &str, to: &str) -> String {
    assert!(WEB.contains(from), "{from:?} is not in WEB");
    format!("{HEAD}{}", WEB.replacen(from, to, 1))
}

/// The 1-based line of the first line of `text` containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} is not in\n{text}"))
        + 1
}

/// The 1-based line of the `n`th (0-based) line of `text` containing `needle`.
fn nth_line_of(text: &str, needle: &str, n: usize) -> usize {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.contains(needle))
        .nth(n)
        .unwrap_or_else(|| panic!("{needle:?} is not {} times in\n{text}", n + 1))
        .0
        + 1
}

/// Asserts that `text` is rejected with an error on `field` at the line holding `at`, printed
/// as `t.yaml:LINE:COL: field `FIELD`: ...`; returns that line of the output.
#[track_caller]
fn rejects(text: &str, field: &str, at: &str) -> String {
    rejects_line(text, field, line_of(text, at))
}

/// [`rejects`] with the line given.
#[track_caller]
fn rejects_line(text: &str, field: &str, line: usize) -> String {
    let e = match parse(text) {
        Ok(_) => panic!("accepted, expected an error on {field}:\n{text}"),
        Err(e) => e,
    };
    let shown = e.to_string();
    let prefix = format!("{FILE}:{line}:");
    let needle = format!("field `{field}`: ");
    shown
        .lines()
        .find(|l| l.starts_with(&prefix) && l.contains(&needle))
        .unwrap_or_else(|| panic!("no error on `{field}` at line {line}; got:\n{shown}"))
        .to_owned()
}

#[track_caller]
fn accepts(text: &str) -> Config {
    parse(text).unwrap_or_else(|e| panic!("rejected:\n{e}\n---\n{text}"))
}

#[test]
fn the_base_service_is_valid() {
    accepts(&format!("{HEAD}{WEB}"));
}

// ---- parse errors (serde): first only ----

#[test]
fn unknown_field_is_a_parse_error_naming_path_and_line() {
    let text = web_with("      backends:\n", "      backendz: []\n      backends:\n");
    let e = parse(&text).unwrap_err();
    assert!(matches!(e, ConfigError::Parse { .. }), "{e}");
    assert_eq!(e.field(), Some("services[0].backend_service.backendz"));
    assert!(e.to_string().starts_with(&format!("t.yaml:{}:", line_of(&text, "backendz"))), "{e}");
}

// ---- ranges ----

#[test]
fn ct_9_idle_timeout_bounds_depend_on_mode_and_affinity() {
    let ct = |mode: &str, affinity: &str, secs: u32| {
        web_with(
            "    backend_service:\n",
            &format!(
                "    backend_service:\n      session_affinity: {affinity}\n      \
                 connection_tracking_policy:\n        tracking_mode: {mode}\n        \
                 idle_timeout_sec: {secs}\n"
            ),
        )
    };
    let field = "services[0].backend_service.connection_tracking_policy.idle_timeout_sec";
    let m = rejects(&ct("PER_CONNECTION", "CLIENT_IP", 601), field, "idle_timeout_sec");
    assert!(m.contains("60..=600") && m.contains("CT-9"), "{m}");
    rejects(&ct("PER_CONNECTION", "NONE", 59), field, "idle_timeout_sec");
    rejects(&ct("PER_SESSION", "CLIENT_IP_PORT_PROTO", 700), field, "idle_timeout_sec");
    let m = rejects(&ct("PER_SESSION", "CLIENT_IP", 57_601), field, "idle_timeout_sec");
    assert!(m.contains("60..=57600"), "{m}");
    accepts(&ct("PER_SESSION", "CLIENT_IP", 57_600));
    accepts(&ct("PER_SESSION", "CLIENT_IP_PROTO", 60));
    accepts(&ct("PER_CONNECTION", "CLIENT_IP_NO_DESTINATION", 600));
}

#[test]
fn fo_2_failover_ratio_outside_zero_one() {
    let text = web_with(
        "    backend_service:\n",
        "    backend_service:\n      failover_policy:\n        failover_ratio: 1.5\n",
    )
    .replace("          endpoints: [198.18.1.1]\n", FAILOVER_GROUP);
    let m = rejects(
        &text,
        "services[0].backend_service.failover_policy.failover_ratio",
        "failover_ratio",
    );
    assert!(m.contains("outside [0, 1]"), "{m}");
    accepts(&text.replace("1.5", "1.0"));
}

/// A primary group's endpoints line followed by a failover group.
const FAILOVER_GROUP: &str = "          endpoints: [198.18.1.1]
        - group: f
          zone: zone-b
          failover: true
          endpoints: [198.18.2.1]
";

#[test]
fn za_5_spillover_ratio_outside_zero_one() {
    let text = web_with(
        "    backend_service:\n",
        "    backend_service:\n      zonal_affinity:\n        spillover: \
         ZONAL_AFFINITY_SPILL_CROSS_ZONE\n        spillover_ratio: -0.1\n",
    );
    let field = "services[0].backend_service.zonal_affinity.spillover_ratio";
    rejects(&text, field, "spillover_ratio");
    accepts(&text.replace("-0.1", "0.8"));
}

#[test]
fn spillover_ratio_only_with_spill_cross_zone() {
    let text = web_with(
        "    backend_service:\n",
        "    backend_service:\n      zonal_affinity:\n        spillover: \
         ZONAL_AFFINITY_STAY_WITHIN_ZONE\n        spillover_ratio: 0.5\n",
    );
    let m =
        rejects(&text, "services[0].backend_service.zonal_affinity.spillover_ratio", "ratio: 0.5");
    assert!(m.contains("only applies to ZONAL_AFFINITY_SPILL_CROSS_ZONE"), "{m}");
}

#[test]
fn cd_3_draining_timeout_above_3600() {
    let text = web_with(
        "    backend_service:\n",
        "    backend_service:\n      connection_draining:\n        draining_timeout_sec: 3601\n",
    );
    let field = "services[0].backend_service.connection_draining.draining_timeout_sec";
    let m = rejects(&text, field, "3601");
    assert!(m.contains("0..=3600"), "{m}");
    accepts(&text.replace("3601", "3600"));
}

#[test]
fn cp_3_always_persist_with_per_session_is_an_error() {
    let text = web_with(
        "    backend_service:\n",
        "    backend_service:\n      connection_tracking_policy:\n        tracking_mode: \
         PER_SESSION\n        connection_persistence_on_unhealthy_backends: ALWAYS_PERSIST\n",
    );
    let field = "services[0].backend_service.connection_tracking_policy.\
                 connection_persistence_on_unhealthy_backends";
    let m = rejects(&text, field, "ALWAYS_PERSIST");
    assert!(m.contains("CP-3"), "{m}");
    accepts(&text.replace("PER_SESSION", "PER_CONNECTION"));
}

#[test]
fn group_weight_outside_1_to_1000() {
    let field = "services[0].backend_service.backends[0].weight";
    for w in ["0", "1001"] {
        let text = web_with(
            "          zone: zone-a\n",
            &format!("          zone: zone-a\n          weight: {w}\n"),
        );
        let m = rejects(&text, field, "weight");
        assert!(m.contains("1..=1000"), "{m}");
    }
    accepts(&web_with(
        "          zone: zone-a\n",
        "          zone: zone-a\n          weight: 1000\n",
    ));
}

#[test]
fn maglev_table_size_must_be_a_listed_prime() {
    let text = HEAD
        .replace("  ports: [net_null0]\n", "  ports: [net_null0]\n  maglev_table_size: 65536\n");
    let m = rejects(&text, "dataplane.maglev_table_size", "65536");
    assert!(m.contains("65537") && m.contains("251"), "{m}");
    accepts(&text.replace("65536", "251"));
}

#[test]
fn health_check_thresholds_interval_and_timeout() {
    let hc = |extra: &str| HEAD.replace("    port: 80\n", &format!("    port: 80\n{extra}"));
    let t = hc("    healthy_threshold: 0\n");
    rejects(&t, "health_checks.hc.healthy_threshold", "healthy_threshold");
    let t = hc("    unhealthy_threshold: 0\n");
    rejects(&t, "health_checks.hc.unhealthy_threshold", "unhealthy_threshold");
    let t = hc("    check_interval_sec: 0\n");
    rejects(&t, "health_checks.hc.check_interval_sec", "check_interval_sec");
    let t = hc("    check_interval_sec: 2\n    timeout_sec: 3\n");
    let m = rejects(&t, "health_checks.hc.timeout_sec", "timeout_sec");
    assert!(m.contains("longer than check_interval_sec"), "{m}");
    // The default timeout (5 s) is longer than a 1 s interval: reported at the check.
    let t = hc("    check_interval_sec: 1\n");
    rejects(&t, "health_checks.hc.timeout_sec", "  hc:");
    accepts(&hc("    check_interval_sec: 1\n    timeout_sec: 1\n    healthy_threshold: 1\n"));
}

#[test]
fn health_check_fields_of_another_type_are_errors() {
    let t = HEAD.replace("    port: 80\n", "    port: 80\n    path: /healthz\n");
    let m = rejects(&t, "health_checks.hc.path", "/healthz");
    assert!(m.contains("only applies to type HTTP"), "{m}");
    let t = HEAD.replace("    port: 80\n", "    port: 80\n    request: hi\n");
    rejects(&t, "health_checks.hc.request", "request");
    let t = HEAD.replace("    type: TCP\n", "    type: HTTP\n    path: healthz\n");
    rejects(&t, "health_checks.hc.path", "healthz");
}

#[test]
fn health_check_without_port_needs_endpoint_ports() {
    let text = format!("{HEAD}{WEB}").replace("    port: 80\n", "");
    let m = rejects(&text, "services[0].backend_service.backends[0].endpoints[0]", "198.18.1.1]");
    assert!(m.contains("no port"), "{m}");
    accepts(&text.replace("[198.18.1.1]", "[\"198.18.1.1:80\"]"));
}

// ---- enum names ----

#[test]
fn unknown_enum_values_name_the_allowed_ones() {
    let bs =
        |line: &str| web_with("    backend_service:\n", &format!("    backend_service:\n{line}"));
    let m = rejects(
        &bs("      session_affinity: CLIENT_PORT\n"),
        "services[0].backend_service.session_affinity",
        "CLIENT_PORT",
    );
    assert!(m.contains("`CLIENT_PORT` is not one of `NONE`, `CLIENT_IP_PORT_PROTO`"), "{m}");
    let m = rejects(
        &bs("      connection_tracking_policy:\n        tracking_mode: PER_FLOW\n"),
        "services[0].backend_service.connection_tracking_policy.tracking_mode",
        "PER_FLOW",
    );
    assert!(m.contains("`PER_CONNECTION`, `PER_SESSION`"), "{m}");
    rejects(
        &bs("      connection_tracking_policy:\n        \
             connection_persistence_on_unhealthy_backends: SOMETIMES\n"),
        "services[0].backend_service.connection_tracking_policy.\
         connection_persistence_on_unhealthy_backends",
        "SOMETIMES",
    );
    let m = rejects(
        &bs("      zonal_affinity:\n        spillover: SPILL\n"),
        "services[0].backend_service.zonal_affinity.spillover",
        "SPILL",
    );
    assert!(m.contains("ZONAL_AFFINITY_STAY_WITHIN_ZONE"), "{m}");
    let m = rejects(
        &web_with("protocol: TCP", "protocol: SCTP"),
        "services[0].forwarding_rules[0].protocol",
        "SCTP",
    );
    assert!(m.contains("`TCP`, `UDP`, `L3_DEFAULT`"), "{m}");
    let m = rejects(
        &web_with(
            "    backend_service:\n",
            "    encapsulation:\n      type: VXLAN\n    backend_service:\n",
        ),
        "services[0].encapsulation.type",
        "VXLAN",
    );
    assert!(m.contains("`IPIP`, `GUE`, `L2`"), "{m}");
    rejects(&HEAD.replace("type: TCP", "type: ICMP"), "health_checks.hc.type", "ICMP");
    let m = rejects(
        &HEAD.replace("  ports: [net_null0]\n", "  ports: [net_null0]\n  hugepages: maybe\n"),
        "dataplane.hugepages",
        "maybe",
    );
    assert!(m.contains("`maybe` is not one of `required`, `preferred`, `off`"), "{m}");
    rejects(
        &HEAD.replace("    port: 80\n", "    port: 80\n    initial: maybe\n"),
        "health_checks.hc.initial",
        "maybe",
    );
}

/// Every enum-like field, with a file that sets it to `bad`: (field path, text, the accepted
/// names in order). Each file is `HEAD` + `WEB` with one line changed or added.
fn enum_fields(bad: &str) -> Vec<(&'static str, String, &'static [&'static str])> {
    let bs =
        |line: &str| web_with("    backend_service:\n", &format!("    backend_service:\n{line}"));
    let ct =
        |field: &str| bs(&format!("      connection_tracking_policy:\n        {field}: {bad}\n"));
    let dp = |line: &str| {
        format!(
            "{}{WEB}",
            HEAD.replacen("  ports: [net_null0]\n", &format!("  ports: [net_null0]\n{line}"), 1)
        )
    };
    let hc = |from: &str, to: &str| format!("{}{WEB}", HEAD.replace(from, to));
    vec![
        (
            "dataplane.hugepages",
            dp(&format!("  hugepages: {bad}\n")),
            &["required", "preferred", "off"],
        ),
        (
            "dataplane.kernel_interface.driver",
            dp(&format!("  kernel_interface: {{name: spl0, driver: {bad}}}\n")),
            &["auto", "tap", "virtio_user"],
        ),
        (
            "health_checks.hc.type",
            hc("type: TCP", &format!("type: {bad}")),
            &["TCP", "HTTP", "UDP"],
        ),
        (
            "health_checks.hc.initial",
            hc("    port: 80\n", &format!("    port: 80\n    initial: {bad}\n")),
            &["unhealthy", "healthy"],
        ),
        (
            "services[0].announce",
            format!(
                "{HEAD}{}announce:\n  table: 100\n",
                WEB.replacen(
                    "    forwarding_rules:",
                    &format!("    announce: {bad}\n    forwarding_rules:"),
                    1
                )
            ),
            &["when_healthy", "always", "never"],
        ),
        (
            "services[0].forwarding_rules[0].protocol",
            web_with("protocol: TCP", &format!("protocol: {bad}")),
            &["TCP", "UDP", "L3_DEFAULT"],
        ),
        (
            "services[0].encapsulation.type",
            web_with(
                "    backend_service:\n",
                &format!("    encapsulation: {{type: {bad}}}\n    backend_service:\n"),
            ),
            &["IPIP", "GUE", "L2"],
        ),
        (
            "services[0].backend_service.session_affinity",
            bs(&format!("      session_affinity: {bad}\n")),
            &[
                "NONE",
                "CLIENT_IP_PORT_PROTO",
                "CLIENT_IP_PROTO",
                "CLIENT_IP",
                "CLIENT_IP_NO_DESTINATION",
            ],
        ),
        (
            "services[0].backend_service.connection_tracking_policy.tracking_mode",
            ct("tracking_mode"),
            &["PER_CONNECTION", "PER_SESSION"],
        ),
        (
            "services[0].backend_service.connection_tracking_policy.\
             connection_persistence_on_unhealthy_backends",
            ct("connection_persistence_on_unhealthy_backends"),
            &["DEFAULT_FOR_PROTOCOL", "NEVER_PERSIST", "ALWAYS_PERSIST"],
        ),
        (
            "services[0].backend_service.zonal_affinity.spillover",
            bs(&format!("      zonal_affinity:\n        spillover: {bad}\n")),
            &[
                "ZONAL_AFFINITY_DISABLED",
                "ZONAL_AFFINITY_STAY_WITHIN_ZONE",
                "ZONAL_AFFINITY_SPILL_CROSS_ZONE",
            ],
        ),
        (
            "services[0].backend_service.advanced.algorithm",
            bs(&format!("      advanced:\n        algorithm: {bad}\n")),
            &["WATERFALL_BY_REGION", "SPRAY_TO_REGION", "SPRAY_TO_WORLD", "WATERFALL_BY_ZONE"],
        ),
    ]
}

/// The 1-based line and column of the first `: VALUE` (or `: {..., key: VALUE`) in `text`:
/// where a value starts.
fn value_at(text: &str, value: &str) -> (usize, usize) {
    text.lines()
        .enumerate()
        .find_map(|(i, l)| {
            let col = l.find(&format!(": {value}")).map(|c| c + 3)?;
            Some((i + 1, col))
        })
        .unwrap_or_else(|| panic!("no `: {value}` in\n{text}"))
}

#[test]
fn every_enum_field_refuses_an_unknown_value_at_its_position_with_the_accepted_ones() {
    for (field, text, names) in enum_fields("SOMETIMES") {
        let e = parse(&text).expect_err(field);
        let (line, col) = value_at(&text, "SOMETIMES");
        let list: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
        assert_eq!(
            e.to_string(),
            format!(
                "t.yaml:{line}:{col}: field `{field}`: `SOMETIMES` is not one of {}",
                list.join(", ")
            ),
            "{text}"
        );
        // Reported with validation's problems, at the value.
        assert_eq!(e.invalid_fields().len(), 1, "{e}");
        assert_eq!(e.invalid_fields()[0].location, Some((line, col)));
        // Every name is accepted, and only as written.
        for name in names {
            let ok = text.replacen("SOMETIMES", name, 1);
            // An L3_DEFAULT rule takes every port.
            let ok =
                if *name == "L3_DEFAULT" { ok.replace("ports: [80]", "ports: ALL") } else { ok };
            let accepted = parse(&ok);
            assert!(accepted.is_ok(), "{field}: {name}: {}", accepted.unwrap_err());
            let other = if *name == name.to_uppercase() {
                name.to_lowercase()
            } else {
                name.to_uppercase()
            };
            let e = parse(&text.replacen("SOMETIMES", &other, 1)).expect_err(&other);
            assert_eq!(e.field(), Some(field), "{e}");
        }
    }
}

#[test]
fn unknown_enum_values_are_reported_with_every_other_problem_in_file_order() {
    // Two unknown names and two problems validation finds, in one file.
    let text = web_with("protocol: TCP", "protocol: SCTP")
        .replacen("type: TCP", "type: ICMP", 1)
        .replacen("    port: 80\n", "    port: 0\n", 1)
        .replacen("endpoints: [198.18.1.1]", "weight: 0\n          endpoints: [198.18.1.1]", 1);
    let e = parse(&text).unwrap_err();
    let fields: Vec<&str> = e.invalid_fields().iter().map(|f| f.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "health_checks.hc.type",
            "health_checks.hc.port",
            "services[0].forwarding_rules[0].protocol",
            "services[0].backend_service.backends[0].weight",
        ],
        "{e}"
    );
    rejects(&text, "health_checks.hc.type", "type: ICMP");
    rejects(&text, "services[0].forwarding_rules[0].protocol", "SCTP");
    // A syntax or schema error still stops the load at once, alone.
    let e = parse(&text.replacen("      backends:\n", "      backendz: []\n      backends:\n", 1))
        .unwrap_err();
    assert!(matches!(e, ConfigError::Parse { .. }), "{e}");
    assert_eq!(e.field(), Some("services[0].backend_service.backendz"));
}

#[test]
fn checks_that_depend_on_an_unknown_enum_value_are_skipped() {
    // Each file has an unknown name and a setting that would be wrong under some value of it:
    // only the name is reported.
    let bs =
        |lines: &str| web_with("    backend_service:\n", &format!("    backend_service:\n{lines}"));
    let check = HEAD.replace("    port: 80\n", "    port: 80\n    path: /healthz\n");
    let announce = "    announce: sometimes\n    forwarding_rules:";
    let api = WEB.replace("name: web", "name: api").replace("protocol: TCP", "protocol: SCTP");
    let cases = [
        // `path` only applies to HTTP.
        (check.replace("type: TCP", "type: ICMP") + WEB, "health_checks.hc.type"),
        // `port` only applies to GUE.
        (
            web_with(
                "    backend_service:\n",
                "    encapsulation: {type: VXLAN, port: 6080}\n    backend_service:\n",
            ),
            "services[0].encapsulation.type",
        ),
        // A ratio only applies to SPILL_CROSS_ZONE; a spillover cannot be used with `advanced`.
        (
            bs(concat!(
                "      zonal_affinity: {spillover: SPILL, spillover_ratio: 0.5}\n",
                "      advanced: {}\n",
            )),
            "services[0].backend_service.zonal_affinity.spillover",
        ),
        // The idle timeout's range depends on the affinity and the mode.
        (
            bs(concat!(
                "      session_affinity: CLIENT_PORT\n",
                "      connection_tracking_policy:\n",
                "        tracking_mode: PER_SESSION\n",
                "        idle_timeout_sec: 6000\n",
            )),
            "services[0].backend_service.session_affinity",
        ),
        (
            bs(concat!(
                "      connection_tracking_policy:\n",
                "        tracking_mode: PER_FLOW\n",
                "        idle_timeout_sec: 6000\n",
            )),
            "services[0].backend_service.connection_tracking_policy.tracking_mode",
        ),
        // A mode needs the `announce:` section.
        (
            format!("{HEAD}{}", WEB.replacen("    forwarding_rules:", announce, 1)),
            "services[0].announce",
        ),
        // A rule of a known protocol would overlap the first service's (FR-1).
        (format!("{HEAD}{WEB}{api}"), "services[1].forwarding_rules[0].protocol"),
    ];
    for (text, field) in cases {
        let e = parse(&text).expect_err(field);
        let fields: Vec<&str> = e.invalid_fields().iter().map(|f| f.field.as_str()).collect();
        assert_eq!(fields, [field], "{e}");
    }
}

#[test]
fn memory_options_belong_to_dataplane_hugepages() {
    let m = rejects(
        &HEAD.replace(
            "  ports: [net_null0]\n",
            "  eal_args: [\"--no-huge\", \"-m\", \"512\"]\n  ports: [net_null0]\n",
        ),
        "dataplane.eal_args",
        "--no-huge",
    );
    assert!(m.contains("write `dataplane.hugepages: off`"), "{m}");
    let m = rejects(
        &HEAD.replace(
            "  ports: [net_null0]\n",
            "  eal_args: [\"--huge-unlink\"]\n  hugepages: off\n  ports: [net_null0]\n",
        ),
        "dataplane.eal_args",
        "--huge-unlink",
    );
    assert!(m.contains("need hugepages"), "{m}");
    for (policy, extra) in [("required", "-m"), ("preferred", "--socket-mem"), ("off", "-m")] {
        let c = accepts(&HEAD.replace(
            "  ports: [net_null0]\n",
            &format!(
                "  eal_args: [\"{extra}\", \"300\"]\n  hugepages: {policy}\n  ports: [net_null0]\n"
            ),
        ));
        assert_eq!(c.dataplane.hugepages.to_string(), policy);
    }
}

#[test]
fn the_admin_api_is_not_an_open_door() {
    let with_admin =
        |lines: &str| HEAD.replace("topology:\n", &format!("admin:\n{lines}topology:\n"));
    let m = rejects(&with_admin("  listen: 127.0.0.1:9090\n"), "admin.listen", "127.0.0.1:9090");
    assert!(m.contains("a TCP API needs `admin.token_file`"), "{m}");
    accepts(&with_admin("  listen: 127.0.0.1:9090\n  token_file: /etc/spillway/admin.token\n"));
    let m = rejects(
        &with_admin("  listen: 127.0.0.1:9090\n  token_file: admin.token\n"),
        "admin.token_file",
        "admin.token",
    );
    assert!(m.contains("not an absolute path"), "{m}");
    rejects(
        &with_admin("  listen: 127.0.0.1:9090\n  token_file: /t\n  socket_group: spillway\n"),
        "admin.socket_group",
        "socket_group",
    );
    let m = rejects(
        &with_admin("  listen: unix:/run/s.sock\n  metrics_listen: unix:/run/s.sock\n"),
        "admin.metrics_listen",
        "metrics_listen",
    );
    assert!(m.contains("same address as `admin.listen`"), "{m}");
    rejects(&with_admin("  metrics_listen: 9091\n"), "admin.metrics_listen", "9091");
    // The default: a Unix socket, no token needed.
    let c = accepts(HEAD);
    assert_eq!(c.admin.listen, "unix:/run/spillway/admin.sock");
}

// ---- addresses ----

#[test]
fn bad_addresses_and_prefixes() {
    let m = rejects(
        &web_with("198.18.0.10", "198.18.0.300"),
        "services[0].forwarding_rules[0].vip",
        "198.18.0.300",
    );
    assert!(m.contains("not an IP address"), "{m}");
    let text =
        web_with("      - vip: 198.18.0.10\n", "      - destination_prefix: 198.19.0.1/16\n");
    let m = rejects(&text, "services[0].forwarding_rules[0].destination_prefix", "198.19.0.1/16");
    assert!(m.contains("host bits"), "{m}");
    rejects(
        &web_with("[198.18.1.1]", "[198.18.1.1:0]"),
        "services[0].backend_service.backends[0].endpoints[0]",
        "198.18.1.1:0",
    );
    rejects(
        &web_with("[198.18.1.1]", "[\"web-1:80\"]"),
        "services[0].backend_service.backends[0].endpoints[0]",
        "web-1:80",
    );
    let m = rejects(
        &HEAD.replace("    ipv4: 198.18.0.2/16\n", "    ipv4: fd00::3/64\n"),
        "dataplane.node.ipv4",
        "fd00::3/64",
    );
    assert!(m.contains("not an IPv4 address"), "{m}");
    rejects(
        &HEAD.replace("    ipv6: fd00::2/64\n", "    ipv6: fd00::2\n"),
        "dataplane.node.ipv6",
        "ipv6: fd00::2",
    );
    let m = rejects(
        &HEAD
            .replace("    ipv6: fd00::2/64\n", "    ipv6: fd00::2/64\n    gateway_ipv4: fd00::1\n"),
        "dataplane.node.gateway_ipv4",
        "gateway_ipv4",
    );
    assert!(m.contains("not an IPv4 address"), "{m}");
    let m = rejects(
        &HEAD.replace(
            "    ipv6: fd00::2/64\n",
            "    ipv6: fd00::2/64\n    gateway_ipv4: 10.0.0.1\n",
        ),
        "dataplane.node.gateway_ipv4",
        "gateway_ipv4",
    );
    assert!(m.contains("not on-link"), "{m}");
    let text = HEAD.replace(
        "    - name: zone-b\n",
        "    - name: zone-b\n  client_subnets:\n    - prefix: 198.18.10.1/24\n      zone: zone-a\n",
    );
    rejects(&text, "topology.client_subnets[0].prefix", "198.18.10.1/24");
    rejects(
        &HEAD.replace("dataplane:\n", "admin:\n  listen: localhost\ndataplane:\n"),
        "admin.listen",
        "localhost",
    );
}

#[test]
fn bad_port_items() {
    rejects(&web_with("[80]", "[80, 0]"), "services[0].forwarding_rules[0].ports[1]", "[80, 0]");
    let m = rejects(
        &web_with("[80]", "[\"90-80\"]"),
        "services[0].forwarding_rules[0].ports[0]",
        "90-80",
    );
    assert!(m.contains("backwards"), "{m}");
    rejects(&web_with("[80]", "any"), "services[0].forwarding_rules[0].ports", "ports: any");
}

#[test]
fn rule_needs_exactly_one_destination() {
    let text = web_with(
        "      - vip: 198.18.0.10\n",
        "      - vip: 198.18.0.10\n        destination_prefix: 198.19.0.0/16\n",
    );
    rejects(&text, "services[0].forwarding_rules[0].destination_prefix", "destination_prefix");
    let text =
        web_with("      - vip: 198.18.0.10\n        protocol: TCP\n", "      - protocol: TCP\n");
    rejects(&text, "services[0].forwarding_rules[0]", "- protocol: TCP");
}

// ---- duplicates and overlaps ----

#[test]
fn duplicate_service_names() {
    let second = WEB.replace("198.18.0.10", "198.18.0.11");
    let text = format!("{HEAD}{WEB}{second}");
    let line = nth_line_of(&text, "  - name: web", 1);
    let shown = parse(&text).unwrap_err().to_string();
    assert!(
        shown.contains(&format!(
            "t.yaml:{line}:11: field `services[1].name`: service `web` is \
                                 already defined at services[0]"
        )),
        "{shown}"
    );
}

#[test]
fn fr_1_same_vip_in_two_services_with_overlapping_ports() {
    let second = WEB.replace("name: web", "name: web2").replace("[80]", "[\"79-81\"]");
    let text = format!("{HEAD}{WEB}{second}");
    // The rule of the second service: its `- vip:` line is the second one.
    let line = nth_line_of(&text, "- vip:", 1);
    let shown = parse(&text).unwrap_err().to_string();
    assert!(
        shown.contains(&format!(
            "t.yaml:{line}:9: field `services[1].forwarding_rules[0]`: \
                                 overlaps services[0].forwarding_rules[0] of service `web`"
        )),
        "{shown}"
    );
    assert!(shown.contains("FR-1"), "{shown}");
    // Other ports, another protocol, or ALL next to a list: no conflict.
    accepts(&format!("{HEAD}{WEB}{}", second.replace("79-81", "8080")));
    accepts(&format!("{HEAD}{WEB}{}", second.replace("TCP", "UDP")));
    accepts(&format!("{HEAD}{WEB}{}", second.replace("[\"79-81\"]", "ALL")));
}

#[test]
fn fr_1_overlapping_rules_of_equal_specificity_in_one_service() {
    let rules = |a: &str, b: &str| {
        web_with(
            "      - vip: 198.18.0.10\n        protocol: TCP\n        ports: [80]\n",
            &format!("{a}{b}"),
        )
    };
    let field = "services[0].forwarding_rules[1]";
    let second = |t: &str| nth_line_of(t, "      - ", 1);
    // Same VIP and protocol, both ALL.
    let t = rules(
        "      - vip: 198.18.0.10\n        protocol: UDP\n",
        "      - vip: 198.18.0.10\n        protocol: UDP\n        ports: ALL\n",
    );
    let m = rejects_line(&t, field, second(&t));
    assert!(m.contains("VIP 198.18.0.10, UDP, ports ALL"), "{m}");
    // Same prefix, both lists sharing port 443.
    let t = rules(
        "      - destination_prefix: 198.19.0.0/16\n        ports: [80, 443]\n",
        "      - destination_prefix: 198.19.0.0/16\n        ports: [\"400-500\"]\n",
    );
    rejects_line(&t, field, second(&t));
    // Same prefix, both L3_DEFAULT.
    let t = rules(
        "      - destination_prefix: fd00:1::/64\n        protocol: L3_DEFAULT\n",
        "      - destination_prefix: fd00:1::/64\n        protocol: L3_DEFAULT\n",
    );
    rejects_line(&t, field, second(&t));
}

#[test]
fn fr_1_rules_of_different_specificity_may_overlap() {
    let two = |a: &str, b: &str| {
        web_with(
            "      - vip: 198.18.0.10\n        protocol: TCP\n        ports: [80]\n",
            &format!("{a}{b}"),
        )
    };
    // A named protocol and L3_DEFAULT.
    accepts(&two(
        "      - vip: 198.18.0.10\n        protocol: TCP\n",
        "      - vip: 198.18.0.10\n        protocol: L3_DEFAULT\n",
    ));
    // Listed ports and ALL.
    accepts(&two(
        "      - vip: 198.18.0.10\n        ports: [80]\n",
        "      - vip: 198.18.0.10\n        ports: ALL\n",
    ));
    // An exact VIP and the /32 prefix of the same address; a longer and a shorter prefix.
    accepts(&two("      - vip: 198.18.0.10\n", "      - destination_prefix: 198.18.0.10/32\n"));
    accepts(&two(
        "      - destination_prefix: 198.19.0.0/16\n",
        "      - destination_prefix: 198.19.0.0/24\n",
    ));
    // Disjoint port lists.
    accepts(&two(
        "      - vip: 198.18.0.10\n        ports: [80, \"8000-8080\"]\n",
        "      - vip: 198.18.0.10\n        ports: [443, \"8081-9000\"]\n",
    ));
}

#[test]
fn l3_default_must_use_ports_all() {
    let text = web_with("protocol: TCP", "protocol: L3_DEFAULT");
    let m = rejects(&text, "services[0].forwarding_rules[0].ports", "ports: [80]");
    assert!(m.contains("ports: ALL"), "{m}");
    accepts(&text.replace("[80]", "ALL"));
}

#[test]
fn duplicate_endpoints_within_a_service() {
    let text = web_with("[198.18.1.1]", "[198.18.1.1, 198.18.1.2, 198.18.1.1]");
    let m = rejects(&text, "services[0].backend_service.backends[0].endpoints[2]", "198.18.1.2,");
    assert!(m.contains("already a backend of this service"), "{m}");
    // Across groups of one service too.
    let text = web_with(
        "          endpoints: [198.18.1.1]\n",
        "          endpoints: [198.18.1.1]\n        - group: b\n          zone: zone-b\n          \
         endpoints: [198.18.1.1]\n",
    );
    rejects_line(
        &text,
        "services[0].backend_service.backends[1].endpoints[0]",
        nth_line_of(&text, "endpoints: [198.18.1.1]", 1),
    );
    // Another port is another backend; the same endpoint in two services is fine.
    accepts(&web_with("[198.18.1.1]", "[198.18.1.1, \"198.18.1.1:81\"]"));
    let second = WEB.replace("name: web", "name: web2").replace("198.18.0.10", "198.18.0.11");
    accepts(&format!("{HEAD}{WEB}{second}"));
}

#[test]
fn duplicate_zones_groups_and_client_subnets() {
    let t = HEAD.replace("    - name: zone-b\n", "    - name: zone-a\n");
    rejects_line(&t, "topology.zones[1].name", nth_line_of(&t, "- name: zone-a", 1));
    let t = web_with(
        "          endpoints: [198.18.1.1]\n",
        "          endpoints: [198.18.1.1]\n        - group: a\n          zone: zone-b\n          \
         endpoints: [198.18.1.2]\n",
    );
    rejects_line(
        &t,
        "services[0].backend_service.backends[1].group",
        nth_line_of(&t, "- group: a", 1),
    );
    let t = HEAD.replace(
        "    - name: zone-b\n",
        "    - name: zone-b\n  client_subnets:\n    - prefix: 198.18.10.0/24\n      zone: zone-a\n    \
         - prefix: 198.18.10.0/24\n      zone: zone-b\n",
    );
    rejects_line(&t, "topology.client_subnets[1].prefix", nth_line_of(&t, "198.18.10.0/24", 1));
}

// ---- references between sections ----

#[test]
fn group_in_unknown_zone() {
    let m = rejects(
        &web_with("zone: zone-a", "zone: zone-q"),
        "services[0].backend_service.backends[0].zone",
        "zone-q",
    );
    assert!(m.contains("zone `zone-q` is not in topology.zones (zone-a, zone-b)"), "{m}");
}

#[test]
fn client_subnets_name_known_zones_and_not_both_zone_and_regional() {
    let subnet = |body: &str| {
        HEAD.replace(
            "    - name: zone-b\n",
            &format!("    - name: zone-b\n  client_subnets:\n    - prefix: 198.18.10.0/24\n{body}"),
        )
    };
    rejects(&subnet("      zone: zone-z\n"), "topology.client_subnets[0].zone", "zone-z");
    let m = rejects(
        &subnet("      zone: zone-a\n      regional: true\n"),
        "topology.client_subnets[0].regional",
        "regional",
    );
    assert!(m.contains("not both"), "{m}");
    rejects(&subnet(""), "topology.client_subnets[0]", "198.18.10.0/24");
    accepts(&subnet("      regional: true\n"));
}

#[test]
fn zone_without_region_needs_topology_region() {
    let t = HEAD.replace("  region: r1\n", "");
    rejects(&t, "topology.zones[0].region", "- name: zone-a");
    accepts(
        &t.replace("    - name: zone-a\n", "    - name: zone-a\n      region: r1\n")
            .replace("    - name: zone-b\n", "    - name: zone-b\n      region: r2\n"),
    );
}

#[test]
fn unknown_health_check_name() {
    let m = rejects(
        &web_with("health_check: hc", "health_check: hc2"),
        "services[0].backend_service.backends[0].health_check",
        "hc2",
    );
    assert!(m.contains("`hc2` is not defined") && m.contains("(defined: hc)"), "{m}");
}

// ---- counts and presence ----

fn many_groups(n: usize, failover: bool) -> String {
    let mut groups = String::new();
    for i in 0..n {
        groups.push_str(&format!(
            "        - {{group: g{i}, zone: zone-a, failover: {failover}, \
             endpoints: [\"198.18.{}.{}\"]}}\n",
            i / 200 + 10,
            i % 200 + 1
        ));
    }
    web_with("      backends:\n", &format!("      backends:\n{groups}"))
}

#[test]
fn at_most_50_primary_and_50_failover_groups() {
    // 50 extra primaries plus the base group: 51.
    let t = many_groups(50, false);
    let m = rejects(&t, "services[0].backend_service.backends", "      backends:");
    assert!(m.contains("51 primary groups; at most 50"), "{m}");
    let t = many_groups(51, true);
    let m = rejects(&t, "services[0].backend_service.backends", "      backends:");
    assert!(m.contains("51 failover groups"), "{m}");
    accepts(&many_groups(49, false));
    accepts(&many_groups(50, true));
}

#[test]
fn failover_policy_without_failover_group() {
    let text = web_with(
        "    backend_service:\n",
        "    backend_service:\n      failover_policy:\n        failover_ratio: 0.5\n",
    );
    let m = rejects(&text, "services[0].backend_service.failover_policy", "failover_policy");
    assert!(m.contains("failover: true"), "{m}");
    accepts(&text.replace("          endpoints: [198.18.1.1]\n", FAILOVER_GROUP));
}

#[test]
fn empty_backends_and_group_without_endpoints() {
    let t = format!(
        "{HEAD}  - name: web\n    forwarding_rules:\n      - vip: 198.18.0.10\n    \
                     backend_service:\n      backends: []\n"
    );
    rejects(&t, "services[0].backend_service.backends", "backends: []");
    let t = web_with("[198.18.1.1]", "[]");
    rejects(&t, "services[0].backend_service.backends[0].endpoints", "endpoints: []");
    let t = web_with(
        "      - vip: 198.18.0.10\n        protocol: TCP\n        ports: [80]\n",
        "      []\n",
    )
    .replace("    forwarding_rules:\n      []\n", "    forwarding_rules: []\n");
    rejects(&t, "services[0].forwarding_rules", "forwarding_rules: []");
}

#[test]
fn encapsulated_backends_need_a_node_address_of_their_family() {
    // GUE to IPv6 backends without dataplane.node.ipv6.
    let t = web_with(
        "    backend_service:\n",
        "    encapsulation: {type: GUE}\n    backend_service:\n",
    )
    .replace("[198.18.1.1]", "[\"fd00::1:1\"]")
    .replace("    ipv6: fd00::2/64\n", "");
    let m = rejects(&t, "services[0].backend_service.backends[0].endpoints[0]", "fd00::1:1");
    assert!(m.contains("dataplane.node.ipv6"), "{m}");
    // IPIP to IPv4 backends without dataplane.node.ipv4.
    let t = format!("{HEAD}{WEB}").replace("    ipv4: 198.18.0.2/16\n", "");
    let m = rejects(&t, "services[0].backend_service.backends[0].endpoints[0]", "198.18.1.1]");
    assert!(m.contains("dataplane.node.ipv4"), "{m}");
    // Off-link without a gateway.
    let t = web_with("[198.18.1.1]", "[198.19.1.1]");
    let m = rejects(&t, "services[0].backend_service.backends[0].endpoints[0]", "198.19.1.1");
    assert!(m.contains("gateway_ipv4"), "{m}");
    accepts(
        &t.replace(
            "    ipv6: fd00::2/64\n",
            "    ipv6: fd00::2/64\n    gateway_ipv4: 198.18.0.1\n",
        ),
    );
    // L2 needs no outer source address.
    let l2 = format!("{HEAD}{WEB}").replace("    ipv4: 198.18.0.2/16\n", "").replace(
        "    backend_service:\n",
        "    encapsulation:\n      type: L2\n    backend_service:\n",
    );
    accepts(&l2);
}

#[test]
fn encapsulation_port_only_with_gue() {
    let t = web_with(
        "    backend_service:\n",
        "    encapsulation:\n      port: 6080\n    backend_service:\n",
    );
    rejects(&t, "services[0].encapsulation.port", "6080");
    accepts(&t.replace("      port: 6080\n", "      type: GUE\n      port: 6080\n"));
}

// ---- dataplane ----

#[test]
fn node_mtu_outside_576_to_9216() {
    for mtu in ["575", "9217"] {
        let t = HEAD.replace("    ipv6: fd00::2/64\n", &format!("    mtu: {mtu}\n"));
        let m = rejects(&t, "dataplane.node.mtu", "mtu");
        assert!(m.contains("576..=9216"), "{m}");
    }
    // IPv6 links need at least 1280.
    let t = HEAD.replace("    ipv6: fd00::2/64\n", "    ipv6: fd00::2/64\n    mtu: 1000\n");
    rejects(&t, "dataplane.node.mtu", "mtu");
    accepts(&t.replace("1000", "9216"));
}

#[test]
fn conntrack_capacity_at_least_1024() {
    let t = HEAD
        .replace("  ports: [net_null0]\n", "  ports: [net_null0]\n  conntrack_capacity: 1023\n");
    rejects(&t, "dataplane.conntrack_capacity", "1023");
    accepts(&t.replace("1023", "1024"));
}

#[test]
fn idle_sleep_us_at_most_10000() {
    let t =
        HEAD.replace("  ports: [net_null0]\n", "  ports: [net_null0]\n  idle_sleep_us: 10001\n");
    let m = rejects(&t, "dataplane.idle_sleep_us", "10001");
    assert!(m.contains("0..=10000"), "{m}");
    accepts(&t.replace("10001", "10000"));
    accepts(&t.replace("10001", "0"));
}

#[test]
fn dataplane_checks_are_collected_with_the_rest() {
    let t = HEAD.replace("  ports: [net_null0]\n", "  ports: [a, a]\n  burst_size: 65\n");
    let e = parse(&t).unwrap_err();
    let fields: Vec<&str> = e.invalid_fields().iter().map(|f| f.field.as_str()).collect();
    assert_eq!(fields, ["dataplane.ports[1]", "dataplane.burst_size"], "{e}");
    rejects(&t, "dataplane.ports[1]", "ports: [a, a]");
    rejects(&t, "dataplane.burst_size", "burst_size");
}

// ---- section 7: advanced load balancing ----

/// `HEAD` + `WEB` with `advanced` (a flow mapping, or `None` for none) in the backend service
/// and `group` (lines of YAML at group level, e.g. `capacity_scaler: 2`) in its group.
fn advanced(advanced: Option<&str>, group: &[&str]) -> String {
    let mut web = WEB.to_owned();
    if let Some(a) = advanced {
        web = web.replace("      backends:\n", &format!("      advanced: {a}\n      backends:\n"));
    }
    let extra: String = group.iter().map(|l| format!("          {l}\n")).collect();
    web = web
        .replace("          health_check: hc\n", &format!("          health_check: hc\n{extra}"));
    format!("{HEAD}{web}")
}

const ADV: &str = "services[0].backend_service.advanced";
const GRP: &str = "services[0].backend_service.backends[0]";

#[test]
fn al_advanced_block_parses_with_every_field_and_with_none() {
    accepts(&advanced(Some("{}"), &[]));
    accepts(&advanced(
        Some(
            "{algorithm: SPRAY_TO_WORLD, failover_health_threshold: 80, auto_capacity_drain: true}",
        ),
        &["capacity: {max_rate_per_endpoint: 100}", "capacity_scaler: 0.5", "preferred: true"],
    ));
    accepts(&advanced(Some("{}"), &["capacity: {max_connections_per_endpoint: 2.5}"]));
    let e = parse(&advanced(Some("{algoritm: SPRAY_TO_WORLD}"), &[])).unwrap_err();
    assert!(matches!(e, ConfigError::Parse { .. }), "{e}");
    assert_eq!(e.field(), Some(&*format!("{ADV}.algoritm")));
    let e = parse(&advanced(Some("{}"), &["capacity: {max_rps: 1}"])).unwrap_err();
    assert_eq!(e.field(), Some(&*format!("{GRP}.capacity.max_rps")));
}

#[test]
fn al_unknown_algorithm_names_the_four() {
    let t = advanced(Some("{algorithm: ROUND_ROBIN}"), &[]);
    let m = rejects(&t, &format!("{ADV}.algorithm"), "ROUND_ROBIN");
    assert!(
        m.contains(
            "`WATERFALL_BY_REGION`, `SPRAY_TO_REGION`, `SPRAY_TO_WORLD`, `WATERFALL_BY_ZONE`"
        ),
        "{m}"
    );
}

#[test]
fn al_7_failover_health_threshold_outside_1_to_99() {
    for t in [0, 100, -5, 1000] {
        let text = advanced(Some(&format!("{{failover_health_threshold: {t}}}")), &[]);
        let m = rejects(&text, &format!("{ADV}.failover_health_threshold"), "failover_health");
        assert!(m.contains(&format!("{t} is out of range 1..=99")), "{m}");
    }
    for t in [1, 70, 99] {
        accepts(&advanced(Some(&format!("{{failover_health_threshold: {t}}}")), &[]));
    }
}

#[test]
fn capacity_scaler_outside_zero_one() {
    for x in ["-0.1", "1.5", "2"] {
        let text = advanced(Some("{}"), &[&format!("capacity_scaler: {x}")]);
        let m = rejects(&text, &format!("{GRP}.capacity_scaler"), "capacity_scaler");
        assert!(m.contains("is outside [0, 1]"), "{m}");
    }
    for x in ["0", "0.25", "1"] {
        accepts(&advanced(Some("{}"), &[&format!("capacity_scaler: {x}")]));
    }
}

#[test]
fn capacity_must_be_positive_and_of_one_kind() {
    for (cap, field) in [
        ("{max_rate_per_endpoint: 0}", "max_rate_per_endpoint"),
        ("{max_rate_per_endpoint: -10}", "max_rate_per_endpoint"),
        ("{max_connections_per_endpoint: 0}", "max_connections_per_endpoint"),
        ("{max_connections_per_endpoint: .nan}", "max_connections_per_endpoint"),
    ] {
        let text = advanced(Some("{}"), &[&format!("capacity: {cap}")]);
        let m = rejects(&text, &format!("{GRP}.capacity.{field}"), "capacity:");
        assert!(m.contains("must be a number > 0"), "{m}");
    }
    let both = advanced(
        Some("{}"),
        &["capacity: {max_rate_per_endpoint: 10, max_connections_per_endpoint: 10}"],
    );
    let m = rejects(&both, &format!("{GRP}.capacity.max_connections_per_endpoint"), "capacity:");
    assert!(m.contains("either `max_rate_per_endpoint` or `max_connections_per_endpoint`"), "{m}");
    let none = advanced(Some("{}"), &["capacity: {}"]);
    let m = rejects(&none, &format!("{GRP}.capacity"), "capacity:");
    assert!(m.contains("needs `max_rate_per_endpoint` or `max_connections_per_endpoint`"), "{m}");
}

#[test]
fn advanced_with_zonal_affinity_is_rejected() {
    for spill in ["ZONAL_AFFINITY_STAY_WITHIN_ZONE", "ZONAL_AFFINITY_SPILL_CROSS_ZONE"] {
        let text = advanced(Some("{}"), &[]).replace(
            "      backends:\n",
            &format!("      zonal_affinity: {{spillover: {spill}}}\n      backends:\n"),
        );
        let m = rejects(&text, "services[0].backend_service.zonal_affinity.spillover", spill);
        assert!(m.contains("cannot be combined with `advanced`"), "{m}");
        assert!(m.contains("replaces zonal affinity"), "{m}");
    }
    accepts(&advanced(Some("{}"), &[]).replace(
        "      backends:\n",
        "      zonal_affinity: {spillover: ZONAL_AFFINITY_DISABLED}\n      backends:\n",
    ));
}

#[test]
fn group_advanced_fields_need_an_advanced_service() {
    let text = advanced(
        None,
        &["capacity: {max_rate_per_endpoint: 10}", "capacity_scaler: 1", "preferred: false"],
    );
    for (field, at) in [
        ("capacity", "capacity:"),
        ("capacity_scaler", "capacity_scaler"),
        ("preferred", "preferred"),
    ] {
        let m = rejects(&text, &format!("{GRP}.{field}"), at);
        assert!(m.contains("only applies to a service with `backend_service.advanced`"), "{m}");
    }
    assert_eq!(parse(&text).unwrap_err().invalid_fields().len(), 3);
}

/// `HEAD` with a zone `zone-e` in region r2 and `extra` appended to `topology:`, plus an
/// advanced service.
fn with_locality(extra: &str) -> String {
    advanced(Some("{}"), &[]).replace(
        "    - name: zone-b\n",
        &format!("    - name: zone-b\n    - name: zone-e\n      region: r2\n{extra}"),
    )
}

#[test]
fn region_order_names_known_regions_once() {
    accepts(&with_locality("  region_order: [r2, r1]\n"));
    let t = with_locality("  region_order: [r1, r9]\n");
    let m = rejects(&t, "topology.region_order[1]", "region_order");
    assert!(m.contains("region `r9` is not the region of any zone (r1, r2)"), "{m}");
    let t = with_locality("  region_order: [r1, r2, r1]\n");
    let m = rejects(&t, "topology.region_order[2]", "region_order");
    assert!(m.contains("already listed at topology.region_order[0]"), "{m}");
}

#[test]
fn latencies_between_known_zones_of_a_region_or_regions() {
    let ok = "  latencies:\n    - {from: r1, to: r2, ms: 30}\n    - {from: zone-a, to: zone-b, ms: 0.5}\n";
    accepts(&with_locality(ok));
    let cases: &[(&str, &str, &str)] = &[
        (
            "{from: r1, to: r7, ms: 1}",
            "to",
            "`r7` is neither a zone of topology.zones nor a region (r1, r2)",
        ),
        ("{from: zone-q, to: zone-a, ms: 1}", "from", "`zone-q` is neither"),
        (
            "{from: zone-a, to: zone-e, ms: 1}",
            "to",
            "are in different regions: give the latency between their regions",
        ),
        ("{from: zone-a, to: r2, ms: 1}", "to", "a zone and a region"),
        ("{from: r1, to: r1, ms: 1}", "to", "a latency from `r1` to itself"),
        ("{from: r1, to: r2, ms: -1}", "ms", "-1 is out of range 0..=1000"),
        ("{from: r1, to: r2, ms: 1001}", "ms", "1001 is out of range 0..=1000"),
    ];
    for (item, field, message) in cases {
        let t = with_locality(&format!("  latencies:\n    - {item}\n"));
        let m = rejects(&t, &format!("topology.latencies[0].{field}"), item);
        assert!(m.contains(message), "{item}: {m}");
    }
    let dup = "  latencies:\n    - {from: r1, to: r2, ms: 30}\n    - {from: r2, to: r1, ms: 40}\n";
    let t = with_locality(dup);
    let m = rejects(&t, "topology.latencies[1]", "ms: 40");
    assert!(m.contains("already given at topology.latencies[0]"), "{m}");
}

#[test]
fn locality_without_an_advanced_service_is_rejected() {
    let t = format!("{HEAD}{WEB}").replace(
        "    - name: zone-b\n",
        "    - name: zone-b\n  region_order: [r1]\n  latencies: [{from: zone-a, to: zone-b, ms: 1}]\n",
    );
    for (field, at) in
        [("topology.region_order", "region_order"), ("topology.latencies", "latencies")]
    {
        let m = rejects(&t, field, at);
        assert!(m.contains("no service sets `backend_service.advanced`"), "{m}");
    }
}

// ---- all at once ----

#[test]
fn several_errors_are_all_reported_in_file_order() {
    let text = "\
dataplane:
  ports: [net_null0]
  conntrack_capacity: 10
  node:
    ipv4: 198.18.0.2/16
topology:
  region: r1
  zones: [{name: zone-a}]
health_checks:
  hc:
    type: TCP
    port: 80
    healthy_threshold: 0
services:
  - name: web
    forwarding_rules:
      - vip: 198.18.0.10
        protocol: L3_DEFAULT
        ports: [80]
    backend_service:
      session_affinity: CLIENT_IP
      connection_draining:
        draining_timeout_sec: 7200
      backends:
        - group: a
          zone: zone-b
          weight: 0
          health_check: hc
          endpoints: [198.18.1.1, 198.18.1.1]
";
    let e = parse(text).unwrap_err();
    let shown = e.to_string();
    let lines: Vec<&str> = shown.lines().collect();
    let expected = [
        ("3:23", "dataplane.conntrack_capacity"),
        ("13:24", "health_checks.hc.healthy_threshold"),
        ("19:9", "services[0].forwarding_rules[0].ports"),
        ("23:31", "services[0].backend_service.connection_draining.draining_timeout_sec"),
        ("26:17", "services[0].backend_service.backends[0].zone"),
        ("27:19", "services[0].backend_service.backends[0].weight"),
        ("29:35", "services[0].backend_service.backends[0].endpoints[1]"),
    ];
    assert_eq!(lines.len(), expected.len(), "{shown}");
    for (line, (at, field)) in lines.iter().zip(expected) {
        assert!(line.starts_with(&format!("t.yaml:{at}: field `{field}`: ")), "{line}\n{shown}");
    }
    assert_eq!(e.field(), Some("dataplane.conntrack_capacity"));
    assert_eq!(e.invalid_fields().len(), 7);
}

// ---- the shipped files ----

fn shipped(name: &str) -> Config {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs").join(name);
    // Parsed and validated; the key files it names (QUIC-LB) are not on this machine.
    let text = std::fs::read_to_string(&path).unwrap();
    Config::from_yaml(&path, &text).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn example_loads_and_compiles() {
    let c = shipped("example.yaml");
    let m = c.to_model();
    assert_eq!(m.services.len(), 4);
    assert_eq!(m.hash_seed, 0x243f_6a88_85a3_08d3);
    assert_eq!(m.table_size, 65537);
    assert_eq!(m.region, "us-central1");
    assert_eq!(m.zones.len(), 4);
    assert_eq!(m.zones[1].region, "us-central1", "defaults to topology.region");
    assert_eq!(m.zones[3].region, "europe-west1");
    assert_eq!(m.client_subnets[0].zone, m.zone_id("us-central1-a"));
    assert_eq!(m.client_subnets[3].zone, None, "regional");

    let web = &m.services[0];
    assert_eq!(web.name, "web");
    assert_eq!(web.rules[0].dest, RuleDest::Vip(Addr::v4(198, 18, 0, 10)));
    assert_eq!(web.rules[0].protocol, RuleProtocol::Tcp);
    assert_eq!(web.rules[0].ports, Ports::List(vec![(80, 80), (443, 443), (8000, 8080)]));
    assert_eq!(web.affinity, Affinity::ClientIp);
    assert_eq!(web.tracking, TrackingMode::PerSession);
    assert_eq!(web.idle_timeout_secs, 3600);
    assert_eq!(web.draining_timeout_secs, 300);
    assert_eq!(web.failover.failover_ratio, 0.5);
    assert_eq!(web.zonal, ZonalAffinity::SpillCrossZone { ratio: 0.8 });
    assert_eq!(web.encap, Encap::Ipip);
    assert_eq!(web.groups.len(), 3);
    assert_eq!(m.zones[usize::from(web.groups[1].zone)].name, "us-central1-b");
    assert_eq!(web.groups[0].weight, 2);
    assert_eq!(web.groups[1].weight, 1);
    assert_eq!(web.groups[1].endpoints[1].port, 8081);
    assert!(web.groups[2].failover && web.has_failover_groups());

    let dns = &m.services[1];
    assert_eq!(dns.encap, Encap::Gue { port: 6080 });
    assert_eq!(dns.persistence, Persistence::NeverPersist);
    assert_eq!(dns.idle_timeout_secs, 60);
    assert_eq!(dns.zonal, ZonalAffinity::StayWithinZone);
    assert_eq!(dns.groups[0].endpoints[1].addr, "fd00::1:2".parse::<Addr>().unwrap());
    assert_eq!(dns.groups[0].endpoints[1].port, 5353);

    let fw = &m.services[2];
    assert_eq!(fw.rules[0].dest, RuleDest::Prefix("198.19.0.0/16".parse::<Prefix>().unwrap()));
    assert_eq!((fw.rules[0].protocol, &fw.rules[0].ports), (RuleProtocol::L3Default, &Ports::All));
    assert_eq!(fw.encap, Encap::L2);
    assert!(fw.symmetric_hashing);
    assert_eq!(fw.affinity, Affinity::ClientIpNoDestination);
    assert_eq!(fw.persistence, Persistence::AlwaysPersist);
    assert_eq!(fw.idle_timeout_secs, 600, "the CT-9 default");

    // 5 web endpoints (HTTP), 2 dns (UDP), 2 fw-a (TCP), 5 api (HTTP); fw-b has no check.
    // (The advanced `api` service is checked in tests/advanced_config.rs.)
    let targets = c.health_targets();
    assert_eq!(targets.len(), 14);
    let http = &targets[0].check;
    assert_eq!(http.name, "web-http");
    assert_eq!(
        http.kind,
        CheckKind::Http {
            path: "/healthz".into(),
            expected_status: 200,
            host: Some("web.internal".into())
        }
    );
    assert_eq!(
        (http.port, http.interval, http.timeout),
        (Some(8080), Duration::from_secs(5), Duration::from_millis(2500))
    );
    assert_eq!(
        (http.healthy_threshold, http.unhealthy_threshold, http.initial_healthy),
        (2, 3, false)
    );
    let udp = targets.iter().find(|t| t.key.service == "dns").unwrap();
    assert_eq!(
        udp.check.kind,
        CheckKind::Udp { request: b"ping".to_vec(), expect: Some(b"pong".to_vec()) }
    );
    let tcp = targets.iter().find(|t| t.key.service == "firewall").unwrap();
    assert_eq!((&tcp.check.kind, tcp.check.initial_healthy), (&CheckKind::Tcp, true));
    let unchecked = c.unchecked_backends();
    assert_eq!(unchecked.len(), 1);
    assert_eq!(unchecked[0].to_string(), "firewall/198.18.5.1");

    let n = c.node_addrs();
    assert_eq!(n.ipv4, Some((Addr::v4(198, 18, 0, 2), 16)));
    assert_eq!(n.ipv6, Some(("fd00::2".parse().unwrap(), 64)));
    assert_eq!(n.gateway_ipv4, Some(Addr::v4(198, 18, 0, 1)));
    assert_eq!(n.gateway_ipv6, Some("fd00::1".parse().unwrap()));
    assert_eq!(n.mtu, 9000);

    let sync = c.fleet_sync().expect("fleet.sync");
    assert_eq!((sync.instance_id, sync.port, sync.peers.len()), (1, 7455, 2));
    assert_eq!(sync.local.len(), 2, "a peer of each family: both node addresses");
    assert_eq!(c.table_file(), Some(Path::new("/var/lib/spillway/conntrack.table")));
}

#[test]
fn defaults_apply_when_fields_are_absent() {
    let text = format!("{HEAD}{WEB}")
        .replace("    port: 80\n", "")
        .replace("    type: TCP\n", "    type: UDP\n    port: 7\n")
        .replace(
            "    backend_service:\n",
            "    encapsulation: {type: GUE}\n    backend_service:\n",
        );
    let c = accepts(&text);
    let m = c.to_model();
    assert_eq!((m.hash_seed, m.table_size), (DEFAULT_HASH_SEED, 65537));
    let s = &m.services[0];
    assert_eq!(s.encap, Encap::Gue { port: 6080 });
    assert_eq!((s.idle_timeout_secs, s.draining_timeout_secs), (600, 0));
    assert_eq!(s.affinity, Affinity::None);
    assert_eq!(s.zonal, ZonalAffinity::Disabled);
    assert_eq!(s.groups[0].weight, 1);
    assert_eq!(m.zones[0].region, "r1");
    let t = c.health_targets();
    assert_eq!(t.len(), 1);
    let k = &t[0].check;
    assert_eq!(k.kind, CheckKind::Udp { request: b"ping".to_vec(), expect: None });
    assert_eq!((k.interval, k.timeout), (Duration::from_secs(5), Duration::from_secs(5)));
    assert_eq!((k.healthy_threshold, k.unhealthy_threshold, k.initial_healthy), (2, 2, false));
    assert_eq!(c.node_addrs().mtu, 1500);
    let http = accepts(&HEAD.replace("type: TCP", "type: HTTP")).check_specs();
    assert_eq!(
        http["hc"].kind,
        CheckKind::Http { path: "/".into(), expected_status: 200, host: None }
    );
}

#[test]
fn demo_and_bench_configs_load_and_compile() {
    for name in ["demo.yaml", "bench-null-1w.yaml", "bench-null-2w.yaml"] {
        let c = shipped(name);
        let m = c.to_model();
        assert!(m.services.is_empty(), "{name}");
        assert_eq!(m.table_size, 65537);
        assert!(c.health_targets().is_empty());
        assert_eq!(c.node_addrs().mtu, 1500);
    }
    assert_eq!(shipped("demo.yaml").dataplane.ports, ["net_tap0"]);
}

#[test]
fn a_service_has_no_more_endpoints_than_the_maglev_table() {
    let endpoints: Vec<String> =
        (0..252).map(|i| format!("198.18.{}.{}", 1 + i / 200, 1 + i % 200)).collect();
    let text = web_with("[198.18.1.1]", &format!("[{}]", endpoints.join(", ")))
        .replace("  ports: [net_null0]\n", "  ports: [net_null0]\n  maglev_table_size: 251\n");
    let m = rejects(&text, "services[0].backend_service.backends", "      backends:");
    assert!(m.contains("252 endpoints do not fit a Maglev table of 251"), "{m}");
    accepts(&text.replace("maglev_table_size: 251", "maglev_table_size: 509"));
}

// ---- the fleet: the exception interface, `announce`, `services[].announce` ----

/// `HEAD` with a `kernel_interface` block in `dataplane` (lines 3-4).
fn with_kernel_interface(block: &str) -> String {
    let head = HEAD.replacen("  node:\n", &format!("{block}  node:\n"), 1);
    format!("{head}{WEB}")
}

/// `HEAD` + `WEB` + a top-level `announce:` section.
fn with_announce(service: &str, section: &str) -> String {
    format!("{HEAD}{service}{section}")
}

const ANNOUNCE: &str = "announce:\n  table: 100\n";

#[test]
fn a_kernel_interface_needs_a_valid_name_driver_and_queue_size() {
    accepts(&with_kernel_interface("  kernel_interface:\n    name: spl0\n"));
    let t = with_kernel_interface("  kernel_interface:\n    name: this-name-is-too-long\n");
    let line = rejects(&t, "dataplane.kernel_interface.name", "this-name-is-too-long");
    assert!(line.contains("1 to 15 characters"), "{line}");
    let t = with_kernel_interface("  kernel_interface:\n    name: a/b\n");
    rejects(&t, "dataplane.kernel_interface.name", "a/b");
    let t = with_kernel_interface("  kernel_interface:\n    name: spl0\n    driver: kni\n");
    rejects(&t, "dataplane.kernel_interface.driver", "kni");
    let t = with_kernel_interface("  kernel_interface:\n    name: spl0\n    queue_size: 1000\n");
    let line = rejects(&t, "dataplane.kernel_interface.queue_size", "1000");
    assert!(line.contains("power of two"), "{line}");
    let t = with_kernel_interface("  kernel_interface:\n    name: spl0\n    colour: blue\n");
    let e = parse(&t).expect_err("unknown field").to_string();
    assert!(e.contains("colour"), "{e}");
}

#[test]
fn announce_needs_a_table_of_its_own_and_sane_durations() {
    accepts(&with_announce(WEB, ANNOUNCE));
    for table in ["0", "253", "254", "255"] {
        let t = with_announce(WEB, &format!("announce:\n  table: {table}\n"));
        let line = rejects(&t, "announce.table", &format!("table: {table}"));
        assert!(line.contains("pick a table of its own"), "{line}");
    }
    let t = with_announce(WEB, "announce:\n  bird_socket: bird.ctl\n");
    rejects(&t, "announce.bird_socket", "bird.ctl");
    let t = with_announce(WEB, "announce:\n  stop_grace_sec: -1\n");
    rejects(&t, "announce.stop_grace_sec", "stop_grace_sec");
    let t = with_announce(WEB, "announce:\n  quiet_sec: .nan\n");
    rejects(&t, "announce.quiet_sec", "quiet_sec");
}

#[test]
fn a_services_announce_needs_the_section_a_known_mode_and_a_vip() {
    let web = |mode: &str| {
        WEB.replacen(
            "    forwarding_rules:",
            &format!("    announce: {mode}\n    forwarding_rules:"),
            1,
        )
    };
    for mode in ["when_healthy", "always", "never"] {
        accepts(&with_announce(&web(mode), ANNOUNCE));
    }
    let t = with_announce(&web("sometimes"), ANNOUNCE);
    rejects(&t, "services[0].announce", "sometimes");
    // Without the section there is nowhere to announce to.
    let t = with_announce(&web("always"), "");
    let line = rejects(&t, "services[0].announce", "announce: always");
    assert!(line.contains("no top-level `announce:` section"), "{line}");
    // A service of destination prefixes has no VIP to announce.
    let prefix = web("always").replacen(
        "      - vip: 198.18.0.10",
        "      - destination_prefix: 198.18.64.0/24",
        1,
    );
    let t = with_announce(&prefix, ANNOUNCE);
    let line = rejects(&t, "services[0].announce", "announce: always");
    assert!(line.contains("has no VIP to announce"), "{line}");
    let never = web("never").replacen(
        "      - vip: 198.18.0.10",
        "      - destination_prefix: 198.18.64.0/24",
        1,
    );
    accepts(&with_announce(&never, ANNOUNCE));
}

// ---- the fleet: connection-state sync and the table file (`fleet:`) ----

/// `HEAD` + `WEB` with an exception interface and a `fleet:` section holding `sync` (its
/// fields indented by four spaces) and `extra` (fields of `fleet`, indented by two).
fn with_sync(sync: &str, extra: &str) -> String {
    let head = HEAD.replacen(
        "  node:\n",
        "  kernel_interface: {name: spl0}\n  mempool_size: 16383\n  node:\n",
        1,
    );
    format!("{head}{WEB}fleet:\n  sync:\n{sync}{extra}")
}

const SYNC: &str = "    instance_id: 1
    key_file: /etc/spillway/sync.key
    peers:
      - {id: 2, address: 198.18.0.12}
      - {id: 3, address: \"fd00::13\"}
";

/// [`SYNC`] with its peers replaced by `list` (the lines under `peers:`).
fn sync_with_peers(list: &str) -> String {
    let sync = SYNC.split("    peers:\n").next().expect("SYNC has peers");
    with_sync(&format!("{sync}    peers:\n{list}"), "")
}

#[test]
fn fleet_sync_parses_and_compiles() {
    let c = accepts(&with_sync(SYNC, "  table_file: /var/lib/spillway/conntrack.table\n"));
    let s = c.fleet_sync().expect("fleet.sync");
    assert_eq!((s.instance_id, s.port, s.queue_size), (1, 7455, 4096));
    assert_eq!(s.peers.iter().map(|p| p.id).collect::<Vec<_>>(), [2, 3]);
    assert_eq!(s.peers[1].socket.to_string(), "[fd00::13]:7455");
    assert_eq!((s.bulk_timeout, s.refresh), (Duration::from_secs(5), Duration::from_secs(20)));
    assert_eq!(c.table_file(), Some(Path::new("/var/lib/spillway/conntrack.table")));
    // Each part is optional.
    let c = accepts(&format!("{HEAD}{WEB}fleet: {{}}\n"));
    assert_eq!((c.fleet_sync(), c.table_file()), (None, None));
    let c = accepts(&format!("{HEAD}{WEB}fleet:\n  table_file: /var/lib/t\n"));
    assert!(c.fleet_sync().is_none() && c.table_file().is_some());
}

#[test]
fn fleet_unknown_fields_are_parse_errors() {
    let peer_port = SYNC.replace("address: 198.18.0.12}", "address: 198.18.0.12, port: 1}");
    for (text, field, at) in [
        (with_sync(SYNC, "  colour: blue\n"), "fleet.colour", "colour"),
        (with_sync(&format!("{SYNC}    colour: blue\n"), ""), "fleet.sync.colour", "colour"),
        (with_sync(&peer_port, ""), "fleet.sync.peers[0].port", "port: 1"),
    ] {
        let e = parse(&text).unwrap_err();
        assert!(matches!(e, ConfigError::Parse { .. }), "{e}");
        assert_eq!(e.field(), Some(field), "{e}");
        assert!(e.to_string().starts_with(&format!("t.yaml:{}:", line_of(&text, at))), "{e}");
    }
    // Missing required fields stop there too.
    let t = with_sync(&SYNC.replace("    key_file: /etc/spillway/sync.key\n", ""), "");
    let e = parse(&t).unwrap_err();
    assert!(e.to_string().contains("missing field `key_file`"), "{e}");
}

#[test]
fn fleet_sync_values_out_of_range() {
    // `field: value` added to SYNC, or replacing its instance_id.
    let set = |field: &str, value: &str| {
        let sync = if field == "instance_id" {
            SYNC.replace("instance_id: 1", &format!("instance_id: {value}"))
        } else {
            format!("{SYNC}    {field}: {value}\n")
        };
        with_sync(&sync, "")
    };
    let cases: &[(&str, &str, &str)] = &[
        ("instance_id", "0", "0 is out of range 1..=65535"),
        ("instance_id", "65536", "65536 is out of range 1..=65535"),
        ("port", "0", "0 is not a port 1..=65535"),
        ("bulk_timeout_sec", "0.4", "0.4 is out of range 0.5..=60 (seconds)"),
        ("bulk_timeout_sec", "61", "61 is out of range 0.5..=60 (seconds)"),
        ("refresh_sec", "0.5", "0.5 is out of range 1..=300 (seconds)"),
        ("refresh_sec", ".inf", "inf is out of range 1..=300 (seconds)"),
        ("queue_size", "63", "63 is out of range 64..=1048576"),
        ("queue_size", "1048577", "1048577 is out of range 64..=1048576"),
    ];
    for (field, value, message) in cases {
        let t = set(field, value);
        let m = rejects(&t, &format!("fleet.sync.{field}"), &format!("{field}: {value}"));
        assert!(m.ends_with(message), "{field}: {value}: {m}");
    }
    // The ends of the ranges are in them; a queue size need not be a power of two.
    for (field, value) in [
        ("instance_id", "65535"),
        ("queue_size", "64"),
        ("queue_size", "1000"),
        ("queue_size", "1048576"),
        ("bulk_timeout_sec", "0.5"),
        ("bulk_timeout_sec", "60"),
        ("refresh_sec", "1"),
    ] {
        accepts(&set(field, value));
    }
}

#[test]
fn fleet_sync_refresh_must_be_below_every_idle_timeout() {
    let short = WEB.replacen(
        "    backend_service:\n",
        "    backend_service:\n      connection_tracking_policy: {idle_timeout_sec: 60}\n",
        1,
    );
    let text = |refresh: &str| {
        with_sync(&format!("{SYNC}    refresh_sec: {refresh}\n"), "").replacen(WEB, &short, 1)
    };
    accepts(&text("59.9"));
    let m = rejects(&text("60"), "fleet.sync.refresh_sec", "refresh_sec: 60");
    assert!(
        m.ends_with(
            "60 s is not below the idle timeout of services[0] `web` (60 s): its entries at \
             risk would expire on the peers between two refreshes"
        ),
        "{m}"
    );
    // The CT-9 default (600 s) is above the whole range.
    accepts(&with_sync(&format!("{SYNC}    refresh_sec: 300\n"), ""));
}

#[test]
fn fleet_sync_peers_are_other_distinct_instances() {
    let t = sync_with_peers("      - {id: 1, address: 198.18.0.12}\n");
    let m = rejects(&t, "fleet.sync.peers[0].id", "id: 1,");
    assert!(m.ends_with("1 is this instance's own id (fleet.sync.instance_id)"), "{m}");
    let t = sync_with_peers("      - {id: 0, address: 198.18.0.12}\n");
    let m = rejects(&t, "fleet.sync.peers[0].id", "id: 0");
    assert!(m.ends_with("0 is out of range 1..=65535"), "{m}");
    let t = sync_with_peers(
        "      - {id: 2, address: 198.18.0.12}\n      - {id: 2, address: 198.18.0.13}\n",
    );
    let m = rejects(&t, "fleet.sync.peers[1].id", "198.18.0.13");
    assert!(m.ends_with("2 is already the id of fleet.sync.peers[0]"), "{m}");
    // The same address twice, also when written once as IPv4-mapped IPv6.
    for second in ["198.18.0.12", "\"::ffff:198.18.0.12\""] {
        let t = sync_with_peers(&format!(
            "      - {{id: 2, address: 198.18.0.12}}\n      - {{id: 3, address: {second}}}\n"
        ));
        let m = rejects(&t, "fleet.sync.peers[1].address", "id: 3");
        assert!(m.contains("is already the address of fleet.sync.peers[0]"), "{m}");
    }
    let t = sync_with_peers("      - {id: 2, address: peer-b}\n");
    let m = rejects(&t, "fleet.sync.peers[0].address", "peer-b");
    assert!(m.ends_with("`peer-b` is not an IP address"), "{m}");
    let t = sync_with_peers("      - {id: 2, address: 224.0.0.1}\n");
    rejects(&t, "fleet.sync.peers[0].address", "224.0.0.1");
}

#[test]
fn fleet_sync_peers_are_not_the_node_and_of_its_families() {
    let t = sync_with_peers("      - {id: 2, address: 198.18.0.2}\n");
    let m = rejects(&t, "fleet.sync.peers[0].address", "198.18.0.2}");
    assert!(m.ends_with("`198.18.0.2` is this node's own address (dataplane.node.ipv4)"), "{m}");
    let t = sync_with_peers("      - {id: 2, address: \"fd00::2\"}\n");
    let m = rejects(&t, "fleet.sync.peers[0].address", "fd00::2\"");
    assert!(m.ends_with("`fd00::2` is this node's own address (dataplane.node.ipv6)"), "{m}");
    let t = sync_with_peers("      - {id: 2, address: \"fd00::13\"}\n").replacen(
        "    ipv6: fd00::2/64\n",
        "",
        1,
    );
    let m = rejects(&t, "fleet.sync.peers[0].address", "fd00::13");
    assert!(
        m.ends_with(
            "`fd00::13` is an IPv6 address, but dataplane.node.ipv6 is not set: the node has no \
             address of its family to sync from"
        ),
        "{m}"
    );
}

#[test]
fn fleet_sync_with_nobody_is_an_error() {
    let message = "no peers: sync with nobody shares nothing; list the other instances of the \
                   fleet, or remove `fleet.sync`";
    let empty = sync_with_peers("").replace("    peers:\n", "    peers: []\n");
    assert!(rejects(&empty, "fleet.sync.peers", "peers: []").ends_with(message));
    let absent = sync_with_peers("").replace("    peers:\n", "");
    assert!(rejects(&absent, "fleet.sync.peers", "  sync:").ends_with(message));
}

#[test]
fn fleet_sync_needs_a_kernel_interface_and_absolute_paths() {
    let t = with_sync(SYNC, "").replacen("  kernel_interface: {name: spl0}\n", "", 1);
    let m = rejects(&t, "fleet.sync", "  sync:");
    assert!(
        m.ends_with(
            "sync traffic goes over the kernel interface, and there is none: set \
             dataplane.kernel_interface (docs/scale-out.md)"
        ),
        "{m}"
    );
    let t = with_sync(&SYNC.replace("/etc/spillway/sync.key", "sync.key"), "");
    let m = rejects(&t, "fleet.sync.key_file", "sync.key");
    assert!(m.ends_with("`sync.key` is not an absolute path"), "{m}");
    let t = with_sync(SYNC, "  table_file: conntrack.table\n");
    let m = rejects(&t, "fleet.table_file", "conntrack.table");
    assert!(m.ends_with("`conntrack.table` is not an absolute path"), "{m}");
    let t = with_sync(SYNC, "  table_file: /var/lib/spillway/\n");
    let m = rejects(&t, "fleet.table_file", "/var/lib/spillway/");
    assert!(m.ends_with("names a directory, not a file"), "{m}");
}

#[test]
fn fleet_errors_are_collected_with_the_rest() {
    let sync =
        SYNC.replace("instance_id: 1", "instance_id: 0").replace("/etc/spillway/sync.key", "k");
    let t = with_sync(&sync, "  table_file: t\n").replacen(
        "          endpoints: [198.18.1.1]",
        "          weight: 0\n          endpoints: [198.18.1.1]",
        1,
    );
    let e = parse(&t).unwrap_err();
    let fields: Vec<&str> = e.invalid_fields().iter().map(|f| f.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "services[0].backend_service.backends[0].weight",
            "fleet.sync.instance_id",
            "fleet.sync.key_file",
            "fleet.table_file"
        ],
        "{e}"
    );
}

// ---- quic_lb (QL-1) ----

/// `web` taking UDP 443 with two endpoints, and `quic_lb:` holding `block`.
fn quic(block: &str) -> String {
    let web = WEB
        .replacen(
            "        protocol: TCP\n        ports: [80]\n",
            "        protocol: UDP\n        ports: [443]\n",
            1,
        )
        .replacen(
            "          endpoints: [198.18.1.1]\n",
            "          endpoints: [198.18.1.1, 198.18.1.2]\n",
            1,
        );
    format!("{HEAD}{web}      quic_lb:\n{block}")
}

const QUIC_CONFIG0: &str =
    "        configs:\n          - {id: 0, server_id_length: 3, nonce_length: 4}\n";
const QUIC_IDS: &str = "        server_ids:\n          - {endpoint: 198.18.1.1, config: 0, server_id: \"0a0001\"}\n          - {endpoint: 198.18.1.2, config: 0, server_id: \"0a0002\"}\n";

#[test]
fn ql_1_quic_lb_configurations_and_server_ids_compile() {
    let c = accepts(&quic(&format!("{QUIC_CONFIG0}{QUIC_IDS}")));
    let m = c.to_model();
    let q = m.services[0].quic_lb.as_ref().unwrap();
    assert_eq!(q.server_ids.len(), 2);
    assert_eq!(q.server_ids[1].server_id.to_hex(), "0a0002");
    assert_eq!(q.server_ids[1].endpoint.addr.to_string(), "198.18.1.2");
    assert!(q.configs.get(0).is_some() && q.configs.get(1).is_none());
}

#[test]
fn ql_1_bad_quic_lb_values_are_refused_with_their_position() {
    let cfg = |line: &str| format!("        configs:\n          - {line}\n");
    let ids = |line: &str| format!("{QUIC_CONFIG0}        server_ids:\n          - {line}\n");
    let at = "services[0].backend_service.quic_lb";
    let cases: Vec<(String, String, &str, &str)> = vec![
        (cfg("{id: 7, server_id_length: 3, nonce_length: 4}"), format!("{at}.configs[0].id"), "id: 7", "0 to 6"),
        (cfg("{id: 1, server_id_length: 16, nonce_length: 4}"), format!("{at}.configs[0].server_id_length"), "id: 1", "1 to 15"),
        (cfg("{id: 1, server_id_length: 3, nonce_length: 3}"), format!("{at}.configs[0].nonce_length"), "id: 1", "at least 4"),
        (cfg("{id: 1, server_id_length: 3, nonce_length: 17}"), format!("{at}.configs[0].nonce_length"), "id: 1", "at most 19"),
        (cfg("{id: 1, server_id_length: 3, nonce_length: 4, key_file: k.key}"), format!("{at}.configs[0].key_file"), "k.key", "absolute"),
        (
            format!("{QUIC_CONFIG0}          - {{id: 0, server_id_length: 4, nonce_length: 4}}\n"),
            format!("{at}.configs[1].id"),
            "server_id_length: 4",
            "already used by configs[0]",
        ),
        (ids("{endpoint: 198.18.1.1, config: 0, server_id: \"0a00\"}"), format!("{at}.server_ids[0].server_id"), "0a00", "server_id_length 3"),
        (ids("{endpoint: 198.18.1.1, config: 0, server_id: \"xyz\"}"), format!("{at}.server_ids[0].server_id"), "xyz", "hex"),
        (ids("{endpoint: 198.18.1.1, config: 2, server_id: \"0a0001\"}"), format!("{at}.server_ids[0].config"), "config: 2", "no configuration has id 2"),
        (ids("{endpoint: 198.18.9.9, config: 0, server_id: \"0a0001\"}"), format!("{at}.server_ids[0].endpoint"), "198.18.9.9", "not an endpoint"),
        (
            format!("{QUIC_IDS}          - {{endpoint: 198.18.1.2, config: 0, server_id: \"0a0001\"}}\n")
                .replacen("        server_ids", &format!("{QUIC_CONFIG0}        server_ids"), 1),
            format!("{at}.server_ids[2].server_id"),
            "198.18.1.2, config: 0, server_id: \"0a0001\"",
            "already server_ids[0]'s",
        ),
        (
            format!("{QUIC_IDS}          - {{endpoint: 198.18.1.2, config: 0, server_id: \"0a0003\"}}\n")
                .replacen("        server_ids", &format!("{QUIC_CONFIG0}        server_ids"), 1),
            format!("{at}.server_ids[2].endpoint"),
            "0a0003",
            "already has a server ID for configuration 0",
        ),
    ];
    for (block, field, needle, says) in cases {
        let text = quic(&block);
        let line = rejects(&text, &field, needle);
        assert!(line.contains(says), "{line}");
    }
    // Eight configurations: more than the rotation bits can name.
    let eight: String = (0..8)
        .map(|i| format!("          - {{id: {i}, server_id_length: 3, nonce_length: 4}}\n"))
        .collect();
    let text = quic(&format!("        configs:\n{eight}"));
    assert!(rejects(&text, &format!("{at}.configs"), "configs:").contains("at most 7"));
    // QUIC needs a rule that takes UDP.
    let tcp = quic(QUIC_CONFIG0).replacen("protocol: UDP", "protocol: TCP", 1);
    assert!(rejects(&tcp, at, "quic_lb:").contains("UDP"));
}

#[test]
fn ql_1_a_quic_lb_key_file_is_read_at_load_and_checked_like_the_other_key_files() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("spillway-quic-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("quic.key");
    let conf = dir.join("spillway.yaml");
    let text = quic(&format!(
        "        configs:\n          - {{id: 1, server_id_length: 3, nonce_length: 13, key_file: {}}}\n",
        key.display()
    ));
    std::fs::write(&conf, &text).unwrap();
    let line = line_of(&text, "key_file");
    let set = |content: &str, mode: u32| {
        std::fs::write(&key, content).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    let field = "field `services[0].backend_service.quic_lb.configs[0].key_file`";
    for (content, mode, says) in [
        ("000102030405060708090a0b0c0d0e0f\n", 0o644, "chmod 600"),
        ("0001020304\n", 0o600, "32 hex digits"),
    ] {
        set(content, mode);
        let e = config::load(&conf).unwrap_err().to_string();
        assert!(e.contains(&format!(":{line}:")) && e.contains(field) && e.contains(says), "{e}");
    }
    std::fs::remove_file(&key).unwrap();
    let e = config::load(&conf).unwrap_err().to_string();
    assert!(e.contains(field) && e.contains("cannot read"), "{e}");
    // A fit key: the configuration encrypts with it.
    set("000102030405060708090a0b0c0d0e0f\n", 0o600);
    let m = config::load(&conf).unwrap().to_model();
    let want =
        spillway_core::quic_lb::Config::new(1, 3, 13, Some(core::array::from_fn(|i| i as u8)))
            .unwrap();
    assert_eq!(m.services[0].quic_lb.as_ref().unwrap().configs.get(1), Some(&want));
    std::fs::remove_dir_all(&dir).unwrap();
}
