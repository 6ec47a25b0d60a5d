//! What the EAL tests share: EAL on ordinary memory without devices, under a file prefix of
//! the test's own, and the removal of that prefix's runtime directory afterwards.

use spillway_dpdk::Eal;

/// EAL on 128 MiB of ordinary memory, no PCI, no telemetry, under `spw-{name}-{pid}`; the
/// prefix is returned for [`remove_runtime_dir`]. EAL starts once per process: one test
/// function per file.
pub fn eal(name: &str) -> (Eal, String) {
    let prefix = format!("spw-{name}-{}", std::process::id());
    let eal = Eal::init(&[
        "--no-huge",
        "-m",
        "128",
        "--no-pci",
        "--file-prefix",
        &prefix,
        "--log-level",
        "lib.eal:error",
        "--no-telemetry",
    ])
    .expect("EAL init on ordinary memory (run as root)");
    (eal, prefix)
}

/// Remove EAL's runtime directory for `prefix` (sockets, config): the test's own.
pub fn remove_runtime_dir(prefix: &str) {
    let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/{prefix}"));
}
