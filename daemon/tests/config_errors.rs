//! `spillway` refuses bad configuration with a non-zero exit and a message naming the field:
//! unknown fields and bad values (no DPDK needed), and settings that only the running system
//! can reject (port not found, more workers than lcores).

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

fn run(config: &TempFile) -> (bool, String) {
    let out = Command::new(spillway_bin())
        .arg("--config")
        .arg(&config.0)
        .args(["--stats-interval", "0", "--duration", "1"])
        .output()
        .expect("run spillway");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn unknown_field_is_an_error_naming_field_and_line() {
    let c = TempFile::new("unknown-field", "dataplane:\n  ports: [net_null0]\n  wrokers: 2\n");
    let (ok, stderr) = run(&c);
    assert!(!ok);
    assert!(stderr.contains(&format!("{}:3:", c.0.display())), "{stderr}");
    assert!(stderr.contains("dataplane.wrokers"), "{stderr}");
}

#[test]
fn zero_workers_is_an_error() {
    let c = TempFile::new("zero-workers", "dataplane:\n  ports: [net_null0]\n  workers: 0\n");
    let (ok, stderr) = run(&c);
    assert!(!ok);
    assert!(stderr.contains("`dataplane.workers`: must be at least 1"), "{stderr}");
    assert!(stderr.contains(&format!("{}:3:", c.0.display())), "names the line: {stderr}");
}

#[test]
fn missing_file_is_an_error() {
    let out = Command::new(spillway_bin())
        .args(["--config", "/nonexistent/spillway.yaml"])
        .output()
        .expect("run spillway");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/nonexistent/spillway.yaml: cannot read"), "{stderr}");
}

#[test]
#[ignore = "needs root: DPDK EAL, network namespaces, tap devices (scripts/test.sh runs it)"]
fn unknown_port_is_an_error_listing_the_ports_found() {
    require_root("unknown_port_is_an_error_listing_the_ports_found");
    let t = tag("spwnoport");
    let _runtime_dir = RuntimeDir(t.clone());
    let c = TempFile::new(
        &t,
        &format!(
            "dataplane:\n  eal_args: {}\n  ports: [net_null7]\n",
            eal_args(&t, "0@0,1@0", "net_null0")
        ),
    );
    let (ok, stderr) = run(&c);
    assert!(!ok);
    assert!(stderr.contains("dataplane.ports[0]"), "{stderr}");
    assert!(stderr.contains("no DPDK port named 'net_null7' (ports found: net_null0)"), "{stderr}");
}

#[test]
#[ignore = "needs root: DPDK EAL, network namespaces, tap devices (scripts/test.sh runs it)"]
fn more_workers_than_lcores_is_an_error() {
    require_root("more_workers_than_lcores_is_an_error");
    let t = tag("spwlcores");
    let _runtime_dir = RuntimeDir(t.clone());
    let c = TempFile::new(
        &t,
        &format!(
            "dataplane:\n  eal_args: {}\n  ports: [net_null0]\n  workers: 3\n  \
             mempool_size: 16383\n",
            eal_args(&t, "0@0,1@0", "net_null0")
        ),
    );
    let (ok, stderr) = run(&c);
    assert!(!ok);
    assert!(
        stderr.contains("dataplane.workers: 3 worker(s) need 3 EAL worker lcore(s)"),
        "{stderr}"
    );
}

#[test]
#[ignore = "needs root: DPDK EAL, network namespaces, tap devices (scripts/test.sh runs it)"]
fn unknown_driver_is_an_error() {
    require_root("unknown_driver_is_an_error");
    let t = tag("spwdrv");
    let _runtime_dir = RuntimeDir(t.clone());
    let c = TempFile::new(
        &t,
        &format!(
            "dataplane:\n  eal_args: {}\n  ports: [net_bogus0]\n",
            eal_args(&t, "0@0,1@0", "net_bogus0")
        ),
    );
    let start = std::time::Instant::now();
    let (ok, stderr) = run(&c);
    assert!(!ok);
    assert!(stderr.contains("dataplane.eal_args: rte_eal_init failed"), "{stderr}");
    assert!(start.elapsed() < Duration::from_secs(60));
}
