//! Helpers for the data-plane integration tests: the root requirement, network namespaces and
//! `spillway` child processes that clean up after themselves (also when a test fails), and
//! parsing of the daemon's `final ...` counter lines.
//!
//! EAL starts once per process, so DPDK always runs in a child `spillway` process, each with
//! its own `--file-prefix`, namespace and interface names (tests run in parallel threads).

#![allow(dead_code)] // each test binary uses a different subset

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// Panics unless the test runs as root.
///
/// Tests that need root (DPDK EAL, network namespaces, tap devices) are marked
/// `#[ignore = "needs root: ..."]`, so that a plain `cargo test` lists them as ignored, and
/// call this first: once asked for (`--include-ignored`, as `scripts/test.sh` does), not being
/// root is a failure, never a silent pass.
pub fn require_root(test: &str) {
    let uid = Command::new("id").arg("-u").output().map(|o| o.stdout).unwrap_or_default();
    let uid = String::from_utf8_lossy(&uid).trim().to_owned();
    assert!(
        uid == "0",
        "{test} needs root (DPDK EAL, network namespaces, tap devices) but runs as uid \
         {uid:?}: run it as root (scripts/test.sh runs it with `cargo test -- --include-ignored`)"
    );
}

/// Runs a command and panics with its output if it fails.
pub fn sh(cmd: &[&str]) -> String {
    let out = Command::new(cmd[0]).args(&cmd[1..]).output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A network namespace, deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(name: &str) -> Netns {
        // A leftover from an earlier crashed run would make `add` fail.
        let _ = Command::new("ip").args(["netns", "del", name]).output();
        sh(&["ip", "netns", "add", name]);
        Netns { name: name.to_owned() }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
    }
}

/// A unique tag for names in this test process.
pub fn tag(test: &str) -> String {
    format!("{test}{}", std::process::id() % 100_000)
}

/// Writes a config file for this test; removed on drop.
pub struct TempFile(pub PathBuf);

impl TempFile {
    pub fn new(name: &str, text: &str) -> TempFile {
        let path =
            std::env::temp_dir().join(format!("spillway-{name}-{}.yaml", std::process::id()));
        std::fs::write(&path, text).expect("write config");
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// EAL's runtime directory for a `--file-prefix`, removed on drop.
pub struct RuntimeDir(pub String);

impl Drop for RuntimeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/{}", self.0));
    }
}

/// The `eal_args` value every test uses (a YAML list), followed by a `hugepages: preferred`
/// line at the same indent (`dataplane:` children): the tests run on hugepages when the host
/// has enough free (scripts/test.sh reserves them) and on ordinary memory otherwise.
pub fn eal_args(prefix: &str, lcores: &str, vdev: &str) -> String {
    format!(
        "[\"--no-pci\", \"--lcores\", \"{lcores}\", \
         \"--file-prefix\", \"{prefix}\", \"--vdev\", \"{vdev}\", \
         \"--log-level\", \"lib.eal:error\", \"--no-telemetry\"]\n  hugepages: preferred"
    )
}

/// Makes at least `pages` 2 MiB hugepages free and mounts hugetlbfs on `/dev/hugepages` if no
/// mount serves them (root). Panics when the kernel cannot reserve them: a root test that
/// asks for hugepages needs them.
pub fn reserve_hugepages(pages: u64) {
    let dir = "/sys/kernel/mm/hugepages/hugepages-2048kB";
    let read = |f: &str| -> u64 {
        std::fs::read_to_string(format!("{dir}/{f}"))
            .unwrap_or_else(|e| panic!("{dir}/{f}: {e}"))
            .trim()
            .parse()
            .expect("a page count")
    };
    let free = read("free_hugepages");
    if free < pages {
        let want = read("nr_hugepages") + pages - free;
        std::fs::write(format!("{dir}/nr_hugepages"), want.to_string())
            .unwrap_or_else(|e| panic!("reserving {want} hugepages: {e}"));
        assert!(read("free_hugepages") >= pages, "the kernel reserved fewer than {want} pages");
    }
    let mounts = std::fs::read_to_string("/proc/mounts").expect("/proc/mounts");
    if !mounts.lines().any(|l| l.split_whitespace().nth(2) == Some("hugetlbfs")) {
        sh(&["mkdir", "-p", "/dev/hugepages"]);
        sh(&["mount", "-t", "hugetlbfs", "nodev", "/dev/hugepages"]);
    }
}

/// A running `spillway`, killed on drop if still running.
pub struct Spillway {
    child: Child,
    lines: Receiver<String>,
    pub stdout: Vec<String>,
    stderr: std::thread::JoinHandle<String>,
}

/// The `spillway` binary cargo built for these tests (only the daemon's own tests have it).
pub fn spillway_bin() -> &'static str {
    match option_env!("CARGO_BIN_EXE_spillway") {
        Some(bin) => bin,
        None => panic!("only the daemon crate's tests run spillway"),
    }
}

impl Spillway {
    /// Starts `spillway --config CONFIG ARGS...`, inside `netns` if given.
    pub fn start(netns: Option<&Netns>, config: &TempFile, args: &[&str]) -> Spillway {
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns.name, spillway_bin()]);
                c
            }
            None => Command::new(spillway_bin()),
        };
        // `ip netns exec` execs the program, so the child pid is spillway's own.
        let mut child = cmd
            .arg("--config")
            .arg(&config.0)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn spillway");
        let (tx, lines) = channel();
        let out = child.stdout.take().expect("piped");
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let err = child.stderr.take().expect("piped");
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                s.push_str(&line);
                s.push('\n');
            }
            s
        });
        Spillway { child, lines, stdout: Vec::new(), stderr }
    }

    /// Waits for a stdout line containing `needle`; panics after `timeout`.
    pub fn wait_for(&mut self, needle: &str, timeout: Duration) -> String {
        self.wait_for_line(&format!("no line containing {needle:?}"), timeout, |line| {
            line.contains(needle)
        })
    }

    /// Waits for a stdout line for which `done` (called with each new line) returns true, and
    /// returns it; after `timeout` panics: "spillway printed `what`", and stdout so far.
    pub fn wait_for_line(
        &mut self,
        what: &str,
        timeout: Duration,
        mut done: impl FnMut(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.stdout.push(line.clone());
                    if done(&line) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "spillway printed {what} within {timeout:?}; stdout so far: {:?}",
                    self.stdout
                ),
            }
        }
    }

    /// Sends `signal` (e.g. "TERM", "INT").
    pub fn signal(&self, signal: &str) {
        sh(&["kill", &format!("-{signal}"), &self.child.id().to_string()]);
    }

    /// Waits for exit (at most `timeout`); returns (success, stdout lines, stderr).
    pub fn finish(mut self, timeout: Duration) -> (bool, Vec<String>, String) {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            assert!(Instant::now() < deadline, "spillway did not exit within {timeout:?}");
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stdout = std::mem::take(&mut self.stdout);
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(2)) {
            stdout.push(line);
        }
        // Replace the handle so Drop has nothing left to join.
        let stderr = std::mem::replace(&mut self.stderr, std::thread::spawn(String::new));
        let stderr = stderr.join().unwrap_or_default();
        (status.success(), stdout, stderr)
    }
}

impl Drop for Spillway {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Parses `final KIND=ID key=value ...` lines into (ID, {key: value}) for one KIND.
pub fn finals(stdout: &[String], kind: &str) -> Vec<(String, HashMap<String, String>)> {
    let prefix = format!("final {kind}=");
    stdout
        .iter()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|rest| {
            let mut parts = rest.split_whitespace();
            let id = parts.next().unwrap_or_default().to_owned();
            let kv = parts
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
            (id, kv)
        })
        .collect()
}

/// A numeric field of a parsed `final` line.
pub fn num(kv: &HashMap<String, String>, key: &str) -> u64 {
    kv.get(key)
        .unwrap_or_else(|| panic!("no {key} in {kv:?}"))
        .parse()
        .unwrap_or_else(|e| panic!("{key} in {kv:?}: {e}"))
}
