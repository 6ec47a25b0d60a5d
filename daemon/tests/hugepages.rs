//! DPDK memory: the daemon runs on hugepages sized from the configuration, says what it needs
//! and what it got, leaves no hugepage files behind, and without enough hugepages either fails
//! with the fix (`hugepages: required`) or runs on ordinary memory and says why (`preferred`).

mod common;

use std::time::Duration;

use common::*;

const HUGE_DIR: &str = "/dev/hugepages";

fn free_pages() -> u64 {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .expect("hugepage counters")
        .trim()
        .parse()
        .expect("a number")
}

/// Files of `prefix` in the hugetlbfs mount.
fn files_of(prefix: &str) -> Vec<String> {
    std::fs::read_dir(HUGE_DIR)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// A one-worker io-forward configuration on net_null with `memory` lines under `dataplane:`.
fn config(t: &str, eal: &str, memory: &str) -> TempFile {
    TempFile::new(
        t,
        &format!(
            "dataplane:\n  eal_args: [\"--no-pci\", \"--lcores\", \"0@0,1@0\", \"--file-prefix\", \
             \"{t}\", \"--vdev\", \"net_null0\", \"--log-level\", \"lib.eal:error\", \
             \"--no-telemetry\"{eal}]\n{memory}  ports: [net_null0]\n  workers: 1\n  \
             mempool_size: 4095\n  rx_queue_size: 512\n  tx_queue_size: 512\n"
        ),
    )
}

/// Runs the daemon for a moment; returns (success, stdout, stderr).
fn run(t: &str, config: &TempFile) -> (bool, Vec<String>, String) {
    let _dir = RuntimeDir(t.to_owned());
    let spw = Spillway::start(None, config, &["--duration", "1", "--stats-interval", "0"]);
    spw.finish(Duration::from_secs(60))
}

#[test]
#[ignore = "needs root: DPDK EAL, network namespaces, tap devices (scripts/test.sh runs it)"]
fn required_runs_on_hugepages_sized_from_the_config_and_leaves_no_files() {
    require_root("required_runs_on_hugepages_sized_from_the_config_and_leaves_no_files");
    reserve_hugepages(128);
    let t = tag("spwhuge");
    let (ok, stdout, stderr) = run(&t, &config(&t, "", "  hugepages: required\n"));
    assert!(ok, "{stdout:?}\n{stderr}");
    let memory = stdout.iter().find(|l| l.starts_with("spillway: memory:")).expect("memory line");
    // 4095 x 2368 B = 9.2 MiB of mbufs + 2 x 512 x 64 B of descriptors + 64 MiB: 74 MiB.
    assert!(memory.contains("needs about 73.3 MiB"), "{memory}");
    assert!(memory.contains("asked EAL for 74 MiB on hugepages"), "{memory}");
    assert!(memory.contains("MiB on 2 MiB hugepages, socket 0"), "{memory}");
    // --huge-unlink=existing keeps them while it runs; a clean stop removes them.
    assert_eq!(files_of(&t), Vec::<String>::new());
}

#[test]
#[ignore = "needs root: DPDK EAL, network namespaces, tap devices (scripts/test.sh runs it)"]
fn off_runs_on_ordinary_memory_sized_from_the_config() {
    require_root("off_runs_on_ordinary_memory_sized_from_the_config");
    let t = tag("spwnohuge");
    let (ok, stdout, stderr) = run(&t, &config(&t, "", "  hugepages: off\n"));
    assert!(ok, "{stdout:?}\n{stderr}");
    let memory = stdout.iter().find(|l| l.starts_with("spillway: memory:")).expect("memory line");
    assert!(
        memory.contains("asked EAL for 74 MiB on ordinary memory (--no-huge), got 74 MiB on 4 KiB pages (no hugepages)"),
        "{memory}"
    );
}

#[test]
#[ignore = "needs root: DPDK EAL, network namespaces, tap devices (scripts/test.sh runs it)"]
fn too_few_hugepages_fail_when_required_and_fall_back_when_preferred() {
    require_root("too_few_hugepages_fail_when_required_and_fall_back_when_preferred");
    reserve_hugepages(16);
    // Ask for more than is free: 200 MiB beyond the free pages.
    let mb = free_pages() * 2 + 200;
    let eal = format!(", \"-m\", \"{mb}\"");
    let t = tag("spwhugefail");
    let (ok, stdout, stderr) = run(&t, &config(&t, &eal, "  hugepages: required\n"));
    assert!(!ok, "started without the hugepages it needs: {stdout:?}");
    assert!(stderr.contains("dataplane.hugepages: not enough hugepages"), "{stderr}");
    assert!(stderr.contains(&format!("{mb} MiB needed")), "{stderr}");
    assert!(
        stderr.contains("fix: echo ") && stderr.contains("/proc/sys/vm/nr_hugepages"),
        "{stderr}"
    );
    assert!(!stderr.contains("rte_eal_init"), "failed in EAL, not before it: {stderr}");

    let t = tag("spwhugefall");
    let (ok, stdout, stderr) = run(&t, &config(&t, &eal, "  hugepages: preferred\n"));
    assert!(ok, "{stdout:?}\n{stderr}");
    assert!(
        stderr.contains("dataplane.hugepages: preferred, running on ordinary memory")
            && stderr.contains(&format!("{mb} MiB needed")),
        "{stderr}"
    );
    let memory = stdout.iter().find(|l| l.starts_with("spillway: memory:")).expect("memory line");
    assert!(memory.contains(&format!("asked EAL for {mb} MiB on ordinary memory")), "{memory}");
}
