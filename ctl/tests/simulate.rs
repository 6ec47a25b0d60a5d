//! `spillwayctl simulate`, the binary (the runner itself is tested in
//! control/tests/simulate.rs, on the same scenarios): the expected lines byte for byte, and a
//! bad configuration's errors on stderr.

use std::path::{Path, PathBuf};

/// The control plane's scenarios and their expected output.
fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../control/tests/scenarios")
}

#[test]
fn spillwayctl_simulate_prints_the_expected_lines() {
    let d = dir();
    let run = |config: &str, scenario: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_spillwayctl"))
            .arg("simulate")
            .arg("--config")
            .arg(d.join("configs").join(config))
            .arg("--scenario")
            .arg(d.join(scenario))
            .output()
            .unwrap()
    };
    let ok = run("ct13.yaml", "ct_13.yaml");
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let stdout = String::from_utf8(ok.stdout).unwrap();
    let expected = std::fs::read_to_string(d.join("ct_13.expected")).unwrap();
    // Byte for byte: the expected file's JSON lines are the exact output format.
    let want: Vec<&str> = expected.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(stdout.lines().collect::<Vec<_>>(), want);
    // A bad config: non-zero exit, every validation error on stderr, nothing on stdout.
    let bad = run("bad.yaml", "ct_13.yaml");
    assert!(!bad.status.success());
    assert!(bad.stdout.is_empty());
    let stderr = String::from_utf8(bad.stderr).unwrap();
    assert!(stderr.contains("bad.yaml:19:") && stderr.contains("bad.yaml:22:"), "{stderr}");
}
