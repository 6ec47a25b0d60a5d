//! `spillway check`: the preflight's verdicts, exit status and output, run as the built binary
//! against fake `/sys`, `/proc` and `/` trees in a temporary directory (the hidden `--sys`,
//! `--proc` and `--root` options), and once against this host.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

fn spillway() -> Command {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
}

/// A finding line, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Line {
    level: String,
    topic: String,
    message: String,
    fix: Option<String>,
}

/// `PASS|WARN|FAIL  topic: message [— fix: how]`, or a panic.
fn parse_line(l: &str) -> Line {
    let (level, rest) = l.split_once("  ").unwrap_or_else(|| panic!("no level: {l:?}"));
    assert!(["PASS", "WARN", "FAIL"].contains(&level), "level {level:?} in {l:?}");
    let (topic, rest) = rest.split_once(": ").unwrap_or_else(|| panic!("no topic: {l:?}"));
    assert!(
        !topic.is_empty() && topic.chars().all(|c| c.is_ascii_lowercase()),
        "topic {topic:?} in {l:?}"
    );
    let (message, fix) = match rest.split_once(" — fix: ") {
        Some((m, f)) => (m, Some(f.to_owned())),
        None => (rest, None),
    };
    assert!(!message.is_empty(), "empty message: {l:?}");
    Line { level: level.into(), topic: topic.into(), message: message.into(), fix }
}

struct Out {
    status: i32,
    stdout: String,
    stderr: String,
    lines: Vec<Line>,
}

impl Out {
    fn with(&self, level: &str, topic: &str, text: &str) -> Option<&Line> {
        self.lines.iter().find(|l| l.level == level && l.topic == topic && l.message.contains(text))
    }

    fn has(&self, level: &str, topic: &str, text: &str) -> &Line {
        self.with(level, topic, text).unwrap_or_else(|| {
            panic!("no {level} {topic} finding with {text:?}:\n{}{}", self.stdout, self.stderr)
        })
    }

    fn count(&self, level: &str) -> usize {
        self.lines.iter().filter(|l| l.level == level).count()
    }
}

/// A fake host: `sys/`, `proc/` and `root/` under a temporary directory.
struct Fake {
    dir: tempfile::TempDir,
}

/// A production-shaped configuration for the clean fake host: one NIC at 0000:3b:00.0, two
/// workers on lcores 1 and 2, the admin API on a Unix socket.
const CLEAN: &str = r#"dataplane:
  eal_args: ["-l", "0-2", "-a", "0000:3b:00.0", "--file-prefix", "t"]
  ports: ["0000:3b:00.0"]
  lcores: [1, 2]
  node:
    ipv4: 198.18.0.2/16
admin:
  listen: unix:/run/spillway/admin.sock
topology:
  region: r
  zones: [{name: z}]
services:
  - name: web
    forwarding_rules: [{vip: 198.18.0.10, protocol: TCP, ports: [80]}]
    backend_service:
      backends: [{group: g, zone: z, endpoints: [198.18.1.1]}]
"#;

impl Fake {
    /// A host where [`CLEAN`] passes every check: four CPUs on node 0, 1-3 isolated and
    /// nohz_full; 1024 free 2 MiB pages on a hugetlbfs mount; the NIC on vfio-pci with an
    /// IOMMU; /run/spillway exists.
    fn clean() -> Fake {
        let f = Fake { dir: tempfile::tempdir().expect("temp dir") };
        f.write("sys/devices/system/cpu/online", "0-3\n");
        f.write("sys/devices/system/cpu/isolated", "1-3\n");
        f.write("sys/devices/system/cpu/nohz_full", "1-3\n");
        for cpu in 0..4 {
            f.mkdir(&format!("sys/devices/system/cpu/cpu{cpu}/node0"));
        }
        f.mkdir("sys/devices/system/node/node0");
        f.pages(2048, 1024, 1024);
        f.pages(1048576, 0, 0);
        f.write(
            "sys/devices/system/node/node0/hugepages/hugepages-2048kB/free_hugepages",
            "1024\n",
        );
        f.write(
            "proc/meminfo",
            "MemTotal:       32000000 kB\nMemAvailable:   16000000 kB\nHugepagesize:       2048 kB\n",
        );
        f.write(
            "proc/mounts",
            "proc /proc proc rw 0 0\nhugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n",
        );
        f.write("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n");
        f.nic("0000:3b:00.0", Some("vfio-pci"), 0);
        f.mkdir("sys/kernel/iommu_groups/12");
        f.mkdir("root/run/spillway");
        f.write("root/dev/net/tun", "");
        f
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().expect("a parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }

    fn mkdir(&self, rel: &str) {
        std::fs::create_dir_all(self.path(rel)).expect("mkdir");
    }

    fn remove(&self, rel: &str) {
        let p = self.path(rel);
        if p.is_dir() && !p.is_symlink() {
            std::fs::remove_dir_all(p).expect("remove dir");
        } else {
            std::fs::remove_file(p).expect("remove");
        }
    }

    fn pages(&self, kb: u64, nr: u64, free: u64) {
        let d = format!("sys/kernel/mm/hugepages/hugepages-{kb}kB");
        self.write(&format!("{d}/nr_hugepages"), &format!("{nr}\n"));
        self.write(&format!("{d}/free_hugepages"), &format!("{free}\n"));
    }

    /// A PCI Ethernet controller, bound to `driver` (none for `None`).
    fn nic(&self, addr: &str, driver: Option<&str>, node: i32) {
        let d = format!("sys/bus/pci/devices/{addr}");
        self.write(&format!("{d}/class"), "0x020000\n");
        self.write(&format!("{d}/vendor"), "0x8086\n");
        self.write(&format!("{d}/numa_node"), &format!("{node}\n"));
        self.mkdir("sys/kernel/iommu_groups/12");
        let _ = std::fs::remove_file(self.path(&format!("{d}/iommu_group")));
        symlink("../../../../kernel/iommu_groups/12", self.path(&format!("{d}/iommu_group")))
            .expect("symlink");
        self.bind(addr, driver);
    }

    fn bind(&self, addr: &str, driver: Option<&str>) {
        let link = self.path(&format!("sys/bus/pci/devices/{addr}/driver"));
        let _ = std::fs::remove_file(&link);
        if let Some(d) = driver {
            self.mkdir(&format!("sys/bus/pci/drivers/{d}"));
            symlink(format!("../../../bus/pci/drivers/{d}"), link).expect("symlink");
        }
    }

    fn run(&self, config: &str, extra: &[&str]) -> Out {
        let file = self.path("spillway.yaml");
        std::fs::write(&file, config).expect("write config");
        let out = spillway()
            .arg("check")
            .arg("--config")
            .arg(&file)
            .args(["--sys", self.path("sys").to_str().expect("utf-8")])
            .args(["--proc", self.path("proc").to_str().expect("utf-8")])
            .args(["--root", self.path("root").to_str().expect("utf-8")])
            .args(extra)
            .output()
            .expect("run spillway check");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let lines = if extra.contains(&"--json") {
            Vec::new()
        } else {
            stdout.lines().map(parse_line).collect()
        };
        Out {
            status: out.status.code().expect("an exit status"),
            stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            lines,
        }
    }

    fn check(&self, config: &str) -> Out {
        self.run(config, &[])
    }
}

#[test]
fn a_clean_host_passes_everything() {
    let f = Fake::clean();
    let out = f.check(CLEAN);
    assert_eq!(out.status, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!((out.count("WARN"), out.count("FAIL")), (0, 0), "{}", out.stdout);
    out.has("PASS", "config", "valid: load balancer, 1 service(s)");
    out.has("PASS", "hugepages", "2 MiB: 1024 reserved, 1024 free");
    out.has("PASS", "hugepages", "hugetlbfs serves the 2 MiB pages at /dev/hugepages");
    out.has("PASS", "memory", "2048 MiB free in usable hugepages");
    out.has("PASS", "conntrack", "1048576 entries x 68 B x 2 workers = 136 MiB of ordinary memory");
    out.has(
        "PASS",
        "port",
        "dataplane.ports[0]: 0000:3b:00.0 is bound to vfio-pci (IOMMU group 12)",
    );
    out.has("PASS", "port", "is on NUMA node 0, with the lcores that use it");
    out.has("PASS", "lcore", "-l 0-2: main lcore 0 (the control thread) on CPU 0");
    out.has("PASS", "lcore", "dataplane.lcores[1]: lcore 2 on CPU 2 (NUMA node 0): its own CPU");
    out.has("PASS", "mtu", "services[0] `web`: IPIP over IPv4 adds 20 B");
    out.has("PASS", "admin", "unix:/run/spillway/admin.sock");
    assert!(out.stderr.contains("spillway check: pass"), "{}", out.stderr);
    // Every message names a field (or, for the config line, the file).
    for l in &out.lines {
        assert!(
            l.message.starts_with("dataplane")
                || l.message.starts_with("admin.listen")
                || l.topic == "config",
            "{l:?}"
        );
    }
}

#[test]
fn json_output_has_the_documented_shape() {
    let f = Fake::clean();
    f.remove("sys/devices/system/cpu/nohz_full");
    let out = f.run(CLEAN, &["--json"]);
    assert_eq!(out.status, 0, "{}{}", out.stdout, out.stderr);
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).expect("one JSON document");
    let obj = doc.as_object().expect("an object");
    // serde_json's Value sorts keys; the document itself puts the verdict first.
    assert_eq!(obj.keys().collect::<Vec<_>>(), ["findings", "verdict"]);
    assert!(
        out.stdout.starts_with("{\n  \"verdict\": \"warn\",\n  \"findings\": ["),
        "{}",
        out.stdout
    );
    assert_eq!(doc["verdict"], "warn");
    let findings = doc["findings"].as_array().expect("an array");
    assert!(findings.len() > 8, "{findings:?}");
    for f in findings {
        let f = f.as_object().expect("a finding object");
        assert_eq!(f.keys().collect::<Vec<_>>(), ["fix", "level", "message", "topic"], "{f:?}");
        assert!(["pass", "warn", "fail"].contains(&f["level"].as_str().expect("a level")));
        assert!(f["topic"].is_string() && f["message"].is_string());
        assert!(f["fix"].is_null() || f["fix"].is_string());
        if f["level"] != "pass" {
            assert!(f["fix"].is_string(), "a WARN or FAIL says how to fix it: {f:?}");
        }
    }
    let warn = findings.iter().find(|f| f["level"] == "warn").expect("a warning");
    assert_eq!(warn["topic"], "lcore");
    assert!(warn["message"].as_str().unwrap().contains("isolated but not nohz_full"), "{warn}");
    assert!(warn["fix"].as_str().unwrap().contains("nohz_full=1-2"), "{warn}");
}

#[test]
fn a_missing_hugetlbfs_mount_fails() {
    let f = Fake::clean();
    f.write("proc/mounts", "proc /proc proc rw 0 0\n");
    let out = f.check(CLEAN);
    assert_eq!(out.status, 1);
    let l = out.has("FAIL", "hugepages", "no hugetlbfs mount serves the reserved 2 MiB pages");
    assert!(l.fix.as_deref().unwrap().contains("mount -t hugetlbfs nodev /dev/hugepages"), "{l:?}");
    // Pages without a mount are not usable memory either.
    let l = out.has("FAIL", "memory", "0 MiB free in usable hugepages");
    assert_eq!(
        l.fix.as_deref(),
        Some("mount hugetlbfs for the reserved pages (the hugepages finding above)")
    );
    assert!(out.stderr.contains("spillway check: fail"), "{}", out.stderr);
}

#[test]
fn huge_dir_must_be_a_hugetlbfs_mount() {
    let f = Fake::clean();
    let config =
        CLEAN.replace("\"--file-prefix\"", "\"--huge-dir\", \"/mnt/huge\", \"--file-prefix\"");
    let out = f.check(&config);
    out.has("FAIL", "hugepages", "--huge-dir /mnt/huge is not on a hugetlbfs mount");
    let config =
        CLEAN.replace("\"--file-prefix\"", "\"--huge-dir\", \"/dev/hugepages\", \"--file-prefix\"");
    let out = f.check(&config);
    assert_eq!(out.status, 0, "{}", out.stdout);
    out.has("PASS", "hugepages", "hugetlbfs serves the 2 MiB pages at /dev/hugepages");
}

#[test]
fn no_reserved_pages_and_too_few_free_pages_fail() {
    let f = Fake::clean();
    f.pages(2048, 0, 0);
    let out = f.check(CLEAN);
    assert_eq!(out.status, 1);
    let l = out.has("FAIL", "hugepages", "none are reserved");
    assert!(
        l.fix.as_deref().unwrap().contains("echo 1024 > /proc/sys/vm/nr_hugepages (2048 MiB"),
        "{l:?}"
    );

    // 5 free 2 MiB pages: 10 MiB, less than the 18.5 MiB mbuf pool alone.
    f.pages(2048, 1024, 5);
    let out = f.check(CLEAN);
    assert_eq!(out.status, 1);
    let l = out.has("FAIL", "memory", "10 MiB free in usable hugepages");
    assert!(l.message.contains("dataplane.mempool_size 8191 x 2368 B = 18.5 MiB"), "{l:?}");
    let fix = l.fix.as_deref().unwrap();
    assert!(fix.contains("hugepages-2048kB/nr_hugepages"), "{fix}");

    // 20 free pages: enough for the pool and descriptors, not for the 64 MiB EAL margin.
    f.pages(2048, 1024, 20);
    let out = f.check(CLEAN);
    assert_eq!(out.status, 0, "{}", out.stdout);
    out.has("WARN", "memory", "not for the 64 MiB EAL margin");
}

#[test]
fn eal_memory_options_are_compared_with_what_is_free() {
    let f = Fake::clean();
    let with = |opt: &str| CLEAN.replace("\"--file-prefix\"", &format!("{opt}, \"--file-prefix\""));
    let out = f.check(&with("\"-m\", \"4096\""));
    out.has(
        "FAIL",
        "memory",
        "-m 4096: EAL reserves 4096 MiB of hugepages at start, but only 2048 MiB is free",
    );
    let out = f.check(&with("\"-m\", \"512\""));
    out.has(
        "PASS",
        "memory",
        "-m 512: EAL reserves 512 MiB of hugepages at start: covers the estimate",
    );
    let out = f.check(&with("\"--socket-mem\", \"512,512\""));
    out.has(
        "FAIL",
        "memory",
        "--socket-mem asks 512 MiB on NUMA node 1, which this host does not have",
    );
    let out = f.check(&with("\"-m\", \"16\", \"--legacy-mem\""));
    out.has("FAIL", "memory", "-m 16 with --legacy-mem");
}

#[test]
fn hugepages_off_is_a_warning() {
    let f = Fake::clean();
    let config = CLEAN.replace("  ports: [", "  hugepages: off\n  ports: [");
    let with_m = config.replace("\"-l\", \"0-2\"", "\"-m\", \"512\", \"-l\", \"0-2\"");
    let out = f.check(&with_m);
    assert_eq!(out.status, 0, "{}", out.stdout);
    let l = out.has(
        "WARN",
        "hugepages",
        "dataplane.hugepages: off: runs without hugepages: fine for tests, not for production",
    );
    assert!(l.fix.is_some());
    out.has("PASS", "memory", "-m 512 MiB of ordinary memory (--no-huge)");
    assert!(out.with("FAIL", "hugepages", "").is_none(), "no hugepage checks: {}", out.stdout);
    assert!(out.stderr.contains("spillway check: warn"), "{}", out.stderr);
    // Without -m, the daemon sizes the memory from the configuration: enough by construction.
    let out = f.check(&config);
    out.has("PASS", "memory", "-m 83 MiB (sized by Spillway) of ordinary memory (--no-huge)");
    // -m below the pool and descriptors: the daemon could not start.
    let out = f.check(&config.replace("\"-l\", \"0-2\"", "\"-m\", \"16\", \"-l\", \"0-2\""));
    out.has("FAIL", "memory", "-m 16 MiB of ordinary memory");
}

#[test]
fn hugepages_preferred_without_pages_is_a_warning_not_a_failure() {
    let f = Fake::clean();
    f.write("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "0\n");
    f.write("sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "0\n");
    let preferred = CLEAN.replace("  ports: [", "  hugepages: preferred\n  ports: [");
    let out = f.check(&preferred);
    assert_eq!(out.status, 0, "{}", out.stdout);
    out.has("WARN", "hugepages", "dataplane.hugepages: preferred: the daemon would fall back");
    out.has("WARN", "hugepages", "dataplane.hugepages: preferred: DPDK uses hugepages but none");
    assert_eq!(out.count("FAIL"), 0, "{}", out.stdout);
    // The same host with the default (required): the daemon would not start.
    let out = f.check(CLEAN);
    assert_eq!(out.status, 1, "{}", out.stdout);
    out.has("FAIL", "hugepages", "dataplane.hugepages: required: DPDK uses hugepages but none");
}

#[test]
fn an_unknown_port_fails() {
    let f = Fake::clean();
    let out = f.check(&CLEAN.replace("ports: [\"0000:3b:00.0\"]", "ports: [eth7]"));
    assert_eq!(out.status, 1);
    let l = out.has("FAIL", "port", "dataplane.ports[0]: unknown port `eth7`");
    assert!(l.fix.as_deref().unwrap().contains("--vdev eth7"), "{l:?}");
}

#[test]
fn vdev_ports_pass_with_their_driver() {
    let f = Fake::clean();
    let config = CLEAN
        .replace("\"-a\", \"0000:3b:00.0\"", "\"--vdev\", \"net_tap0,iface=spw0\"")
        .replace("ports: [\"0000:3b:00.0\"]", "ports: [net_tap0]");
    let out = f.check(&config);
    assert_eq!(out.status, 0, "{}", out.stdout);
    out.has(
        "PASS",
        "port",
        "dataplane.ports[0]: net_tap0 is a virtual device (--vdev), driver net_tap",
    );
    f.remove("root/dev/net/tun");
    f.check(&config).has("FAIL", "port", "needs /dev/net/tun");
    let memif = CLEAN
        .replace(
            "\"-a\", \"0000:3b:00.0\"",
            "\"--vdev\", \"net_memif0,socket=/run/memif/m.sock,socket-abstract=no\"",
        )
        .replace("ports: [\"0000:3b:00.0\"]", "ports: [net_memif0]");
    let l = f
        .check(&memif)
        .has("FAIL", "port", "the directory of its socket /run/memif/m.sock")
        .clone();
    assert_eq!(l.fix.as_deref(), Some("mkdir -p /run/memif"));
}

#[test]
fn pci_ports_need_a_dpdk_driver_and_an_iommu() {
    let f = Fake::clean();
    f.bind("0000:3b:00.0", Some("ixgbe"));
    f.mkdir("sys/bus/pci/devices/0000:3b:00.0/net/eth1");
    let out = f.check(CLEAN);
    assert_eq!(out.status, 1);
    let l =
        out.has("FAIL", "port", "0000:3b:00.0 is bound to the kernel driver ixgbe, interface eth1");
    assert_eq!(
        l.fix.as_deref(),
        Some("ip link set eth1 down; modprobe vfio-pci; dpdk-devbind.py --bind=vfio-pci 0000:3b:00.0")
    );

    f.bind("0000:3b:00.0", None);
    f.check(CLEAN).has("FAIL", "port", "is bound to no driver");

    f.bind("0000:3b:00.0", Some("uio_pci_generic"));
    f.check(CLEAN).has("PASS", "port", "is bound to uio_pci_generic");

    f.bind("0000:3b:00.0", Some("vfio-pci"));
    f.remove("sys/kernel/iommu_groups/12");
    f.check(CLEAN).has("FAIL", "port", "there is no IOMMU");
    f.write("sys/module/vfio/parameters/enable_unsafe_noiommu_mode", "Y\n");
    let out = f.check(CLEAN);
    assert_eq!(out.status, 0, "{}", out.stdout);
    out.has("WARN", "port", "unsafe no-IOMMU mode");

    // Not in -a, not on this host, named in short form.
    let f = Fake::clean();
    let out = f.check(&CLEAN.replace("\"-a\", \"0000:3b:00.0\"", "\"-a\", \"0000:5e:00.0\""));
    out.has("FAIL", "port", "not in the -a/--allow list");
    let out = f.check(&CLEAN.replace("3b:00.0", "af:00.1"));
    out.has("FAIL", "port", "this host has no PCI device 0000:af:00.1");
    let out = f.check(&CLEAN.replace("ports: [\"0000:3b:00.0\"]", "ports: [\"3b:00.0\"]"));
    out.has("FAIL", "port", "DPDK names this PCI port `0000:3b:00.0`");
}

#[test]
fn a_port_on_another_numa_node_warns() {
    let f = Fake::clean();
    f.write("sys/bus/pci/devices/0000:3b:00.0/numa_node", "1\n");
    let out = f.check(CLEAN);
    assert_eq!(out.status, 0, "{}", out.stdout);
    let l = out.has(
        "WARN",
        "port",
        "0000:3b:00.0 is on NUMA node 1, but worker lcore 1 (dataplane.lcores[0]) is on node 0",
    );
    assert!(
        l.message.contains("the main lcore 0, where the mbuf pool is allocated, is on node 0"),
        "{l:?}"
    );
}

#[test]
fn an_lcore_that_does_not_exist_fails() {
    let f = Fake::clean();
    // Lcore 7 is enabled by -l but the host has CPUs 0-3 only.
    let out = f.check(&CLEAN.replace("0-2", "0-2,7").replace("lcores: [1, 2]", "lcores: [1, 7]"));
    assert_eq!(out.status, 1);
    out.has("FAIL", "lcore", "dataplane.lcores[1]: lcore 7 on CPU 7: CPU 7 does not exist or is offline (online CPUs: 0-3)");
    out.has("FAIL", "lcore", "dataplane.eal_args: -l 0-2,7: CPU(s) 7 do not exist");
    // Lcore 3 exists but EAL does not enable it.
    let out = f.check(&CLEAN.replace("lcores: [1, 2]", "lcores: [1, 3]"));
    out.has(
        "FAIL",
        "lcore",
        "dataplane.lcores[1]: lcore 3 is not an EAL lcore (dataplane.eal_args: -l 0-2)",
    );
    // More workers than lcores.
    let out = f.check(&CLEAN.replace("lcores: [1, 2]", "workers: 3"));
    out.has("FAIL", "lcore", "dataplane.workers: 3 worker(s) need 3 EAL worker lcore(s)");
}

#[test]
fn a_worker_on_the_main_lcore_fails() {
    let f = Fake::clean();
    let out = f.check(&CLEAN.replace("lcores: [1, 2]", "lcores: [0, 1]"));
    assert_eq!(out.status, 1);
    out.has("FAIL", "lcore", "dataplane.lcores[0]: lcore 0 is the main lcore");
    // --main-lcore moves it.
    let out = f.check(
        &CLEAN
            .replace("lcores: [1, 2]", "lcores: [0, 1]")
            .replace("\"-l\", \"0-2\"", "\"-l\", \"0-2\", \"--main-lcore\", \"2\""),
    );
    assert!(out.with("FAIL", "lcore", "").is_none(), "{}", out.stdout);
    out.has("WARN", "lcore", "dataplane.lcores[0]: lcore 0 on CPU 0 is not isolated");
}

#[test]
fn shared_and_unisolated_cpus_warn() {
    let f = Fake::clean();
    f.write("sys/devices/system/cpu/isolated", "\n");
    let config = CLEAN.replace("\"-l\", \"0-2\"", "\"--lcores\", \"0@0,1@1,2@0\"");
    let out = f.check(&config);
    assert_eq!(out.status, 0, "{}", out.stdout);
    out.has("WARN", "lcore", "dataplane.lcores[1]: lcore 2 on CPU 0 shares it with the main lcore");
    let l = out.has("WARN", "lcore", "dataplane.lcores[0]: lcore 1 on CPU 1 is not isolated");
    // Never suggests isolating the main lcore's CPU.
    assert!(
        l.fix.as_deref().unwrap().starts_with("boot with isolcpus=1 nohz_full=1 rcu_nocbs=1"),
        "{l:?}"
    );
}

#[test]
fn mtu_warnings_follow_the_encapsulation() {
    let f = Fake::clean();
    let jumbo =
        CLEAN.replace("    ipv4: 198.18.0.2/16\n", "    ipv4: 198.18.0.2/16\n    mtu: 9000\n");
    f.check(&jumbo).has(
        "WARN",
        "mtu",
        "a full 9000-byte client packet would need 9020 B encapsulated",
    );
    let v6 = CLEAN
        .replace("    ipv4: 198.18.0.2/16\n", "    ipv6: fd00::2/64\n    mtu: 1300\n")
        .replace("vip: 198.18.0.10", "vip: fd00::10")
        .replace("endpoints: [198.18.1.1]", "endpoints: [\"fd00::1:1\"]");
    let out = f.check(&v6);
    let l = out.has("WARN", "mtu", "IP6IP6 over IPv6 adds 40 B: client packets up to 1260 B");
    assert!(l.fix.as_deref().unwrap().contains("at least 1320"), "{l:?}");
    let l2 = CLEAN.replace(
        "services:\n  - name: web\n",
        "services:\n  - name: web\n    encapsulation: {type: L2}\n",
    );
    f.check(&l2).has("PASS", "mtu", "L2 rewrite adds no bytes");
}

#[test]
fn admin_endpoint_checks() {
    let f = Fake::clean();
    f.remove("root/run/spillway");
    let out = f.check(CLEAN);
    assert_eq!(out.status, 0, "{}", out.stdout);
    out.has(
        "PASS",
        "admin",
        "admin.listen unix:/run/spillway/admin.sock: the daemon creates the directory /run/spillway",
    );

    // An existing world-writable socket.
    f.mkdir("root/run/spillway");
    let sock = f.path("root/run/spillway/admin.sock");
    drop(std::os::unix::net::UnixListener::bind(&sock).expect("bind"));
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    f.check(CLEAN).has("WARN", "admin", "world-writable (mode 0777)");

    // TCP needs a token file; a missing, public or short one fails.
    let tcp = CLEAN.replace(
        "unix:/run/spillway/admin.sock",
        "0.0.0.0:9090\n  token_file: /etc/spillway/admin.token",
    );
    f.mkdir("root/etc/spillway");
    let token = f.path("root/etc/spillway/admin.token");
    f.check(&tcp).has("FAIL", "admin", "admin.token_file /etc/spillway/admin.token: No such file");
    std::fs::write(&token, "0123456789abcdef0123\n").expect("write");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    f.check(&tcp).has("FAIL", "admin", "every user may read it (mode 644)");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let out = f.check(&tcp);
    out.has("PASS", "admin", "admin.token_file /etc/spillway/admin.token: a 20-byte token");
    out.has("WARN", "admin", "admin.listen 0.0.0.0:9090: not loopback: the API is plain HTTP");
    f.check(&tcp.replace("0.0.0.0", "127.0.0.1")).has("PASS", "admin", "loopback TCP, port free");
    // The socket's group must exist.
    let grouped = CLEAN.replace(
        "unix:/run/spillway/admin.sock",
        "unix:/run/spillway/admin.sock\n  socket_group: spillway",
    );
    f.check(&grouped).has("FAIL", "admin", "admin.socket_group spillway: no such group");
    f.write("root/etc/group", "root:x:0:\nspillway:x:998:alice\n");
    f.check(&grouped).has("PASS", "admin", "admin.socket_group spillway: the socket is 0660");
    // Something listens on 127.0.0.1:9090 (/proc/net/tcp).
    f.write(
        "proc/net/tcp",
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:2382 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n",
    );
    if cfg!(target_endian = "little") {
        f.check(&tcp.replace("0.0.0.0", "127.0.0.1")).has(
            "WARN",
            "admin",
            "127.0.0.1 port 9090 is already listening",
        );
    }
}

#[test]
fn an_invalid_config_exits_2_with_the_located_errors() {
    let f = Fake::clean();
    let out = f.check("dataplane:\n  ports: [net_null0]\n  wrokers: 2\n");
    assert_eq!(out.status, 2);
    let file = f.path("spillway.yaml");
    let located =
        format!("{}:3:3: field `dataplane.wrokers`: unknown field `wrokers`", file.display());
    assert!(out.stderr.starts_with(&format!("spillway: error: {located}")), "{}", out.stderr);
    assert_eq!(out.lines.len(), 1, "{}", out.stdout);
    assert!(out.lines[0].message.starts_with(&located), "{:?}", out.lines);

    // Every validation error, each on its line, as the daemon prints them.
    let out = f.check("dataplane:\n  ports: []\n  workers: 0\n");
    assert_eq!(out.status, 2);
    assert_eq!(out.count("FAIL"), 2, "{}", out.stdout);
    out.has("FAIL", "config", ":2:3: field `dataplane.ports`: at least one port is required");
    out.has("FAIL", "config", ":3:12: field `dataplane.workers`: must be at least 1");
    let daemon = spillway().arg("--config").arg(f.path("spillway.yaml")).output().expect("run");
    let daemon_err = String::from_utf8_lossy(&daemon.stderr);
    assert!(out.stderr.starts_with(daemon_err.trim_end()), "{}\nvs\n{daemon_err}", out.stderr);

    let out =
        spillway().args(["check", "--config", "/nonexistent/x.yaml", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["verdict"], "fail");
    assert!(doc["findings"][0]["message"]
        .as_str()
        .unwrap()
        .contains("/nonexistent/x.yaml: cannot read"));
}

#[test]
fn unknown_enum_values_are_located_config_errors_naming_the_accepted_values() {
    let f = Fake::clean();
    let config = CLEAN
        .replace("  ports: [", "  hugepages: maybe\n  ports: [")
        .replace("protocol: TCP", "protocol: SCTP");
    let out = f.check(&config);
    assert_eq!(out.status, 2);
    assert_eq!(out.count("FAIL"), 2, "{}", out.stdout);
    out.has(
        "FAIL",
        "config",
        ":3:14: field `dataplane.hugepages`: `maybe` is not one of `required`, `preferred`, `off`",
    );
    out.has(
        "FAIL",
        "config",
        ":15:53: field `services[0].forwarding_rules[0].protocol`: `SCTP` is not one of `TCP`, \
         `UDP`, `L3_DEFAULT`",
    );
    // The daemon refuses the file alike, before it touches DPDK.
    let daemon = spillway().arg("--config").arg(f.path("spillway.yaml")).output().expect("run");
    assert!(!daemon.status.success());
    let daemon_err = String::from_utf8_lossy(&daemon.stderr);
    assert!(out.stderr.starts_with(daemon_err.trim_end()), "{}\nvs\n{daemon_err}", out.stderr);
}

#[test]
fn the_daemon_command_line_is_unchanged() {
    // No subcommand still needs --config; a subcommand does not mix with the daemon's options.
    let out = spillway().output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--config <FILE>"));
    let out = spillway()
        .args(["--stats-interval", "0", "check", "--config", "configs/demo.yaml"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
}

/// The shipped configurations against this host: the verdict depends on the host, the shape
/// and some facts do not.
#[test]
fn shipped_configs_on_this_host() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace").to_path_buf();
    for name in ["demo", "bench-null-1w", "example"] {
        let config = root.join(format!("configs/{name}.yaml"));
        let out = spillway().arg("check").arg("--config").arg(&config).output().expect("run");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<Line> = stdout.lines().map(parse_line).collect();
        let status = out.status.code().expect("an exit status");
        let fails = lines.iter().filter(|l| l.level == "FAIL").count();
        assert_eq!(status, i32::from(fails > 0), "{name}: exit status {status}:\n{stdout}");
        assert_eq!(lines[0].topic, "config");
        assert_eq!(lines[0].level, "PASS", "{name}: {:?}", lines[0]);
        for topic in ["hugepages", "memory", "conntrack", "port", "lcore", "admin"] {
            assert!(lines.iter().any(|l| l.topic == topic), "{name}: no {topic} line:\n{stdout}");
        }
        for l in lines.iter().filter(|l| l.level != "PASS") {
            assert!(l.fix.is_some(), "{name}: {l:?} says no fix");
        }
        if name != "example" {
            // `hugepages: preferred`: hugepages when the host has them, never a failure.
            assert!(
                !lines
                    .iter()
                    .any(|l| l.level == "FAIL" && (l.topic == "hugepages" || l.topic == "memory")),
                "{name}:\n{stdout}"
            );
            let fallback = lines.iter().any(|l| {
                l.level == "WARN" && l.message.contains("preferred: the daemon would fall back")
            });
            let on_pages =
                lines.iter().any(|l| l.level == "PASS" && l.message.contains("hugetlbfs serves"));
            assert!(fallback != on_pages, "{name}: exactly one of the two:\n{stdout}");
            let driver = if name == "demo" { "net_tap" } else { "net_null" };
            assert!(
                lines.iter().any(|l| l.level == "PASS"
                    && l.topic == "port"
                    && l.message.contains(&format!("(--vdev), driver {driver}"))),
                "{name}:\n{stdout}"
            );
        }
        let json = spillway()
            .arg("check")
            .arg("--config")
            .arg(&config)
            .arg("--json")
            .output()
            .expect("run");
        assert_eq!(json.status.code(), Some(status));
        let doc: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
        assert_eq!(doc["findings"].as_array().expect("findings").len(), lines.len());
    }
}

/// [`CLEAN`] with an exception interface `spl0` and VIP announcement through BIRD.
fn fleet_config() -> String {
    CLEAN
        .replace("  node:\n", "  kernel_interface: {name: spl0}\n  mempool_size: 16383\n  node:\n")
        .replace(
            "services:\n",
            "announce:\n  table: 100\n  bird_socket: /run/bird/bird.ctl\nservices:\n",
        )
}

#[test]
fn the_kernel_interface_must_not_exist_yet_and_bird_should_answer() {
    let f = Fake::clean();
    f.mkdir("sys/class/net/eth0");
    let out = f.check(&fleet_config());
    out.has(
        "PASS",
        "kernel",
        "dataplane.kernel_interface: `spl0` is free; it will be DPDK's net_tap",
    );
    let w =
        out.has("WARN", "announce", "announce.bird_socket: /run/bird/bird.ctl is not a socket yet");
    assert!(w.fix.as_deref().is_some_and(|f| f.contains("start BIRD")), "{w:?}");
    assert_eq!(out.status, 0, "a warning only: {}", out.stdout);
    // vhost-net present: auto picks virtio_user.
    f.write("root/dev/vhost-net", "");
    f.check(&fleet_config()).has("PASS", "kernel", "net_virtio_user");
    // The name is taken (a Spillway still running, or another device).
    f.mkdir("sys/class/net/spl0");
    let out = f.check(&fleet_config());
    let l = out.has(
        "FAIL",
        "kernel",
        "dataplane.kernel_interface.name: an interface named `spl0` exists already",
    );
    assert!(l.fix.is_some(), "{l:?}");
    assert_eq!(out.status, 1);
    // BIRD's socket there: a pass.
    f.remove("sys/class/net/spl0");
    f.mkdir("root/run/bird");
    let _listener =
        std::os::unix::net::UnixListener::bind(f.path("root/run/bird/bird.ctl")).expect("bind");
    f.check(&fleet_config()).has(
        "PASS",
        "announce",
        "announce.bird_socket: /run/bird/bird.ctl exists",
    );
    // Announcing without an exception interface is allowed, with a warning.
    let plain = fleet_config().replace("  kernel_interface: {name: spl0}\n", "");
    f.check(&plain).has("WARN", "announce", "announce without dataplane.kernel_interface");
}

/// [`fleet_config`] with `fleet.sync` (the peers' lines given) and `fleet.table_file`.
fn sync_config(peers: &str) -> String {
    format!(
        "{}fleet:\n  sync:\n    instance_id: 1\n    key_file: /etc/spillway/sync.key\n    \
         peers:\n{peers}  table_file: /var/lib/spillway/conntrack.table\n",
        fleet_config()
    )
}

const ONE_PEER: &str = "      - {id: 2, address: 198.18.0.12}\n";

/// A fake host for the fleet: [`Fake::clean`] with network devices and BIRD's socket
/// directory; the key file written with `mode`.
fn fleet_host() -> Fake {
    let f = Fake::clean();
    f.mkdir("sys/class/net/eth0");
    f.mkdir("root/etc/spillway");
    f
}

fn write_key(f: &Fake, text: &str, mode: u32) -> PathBuf {
    let key = f.path("root/etc/spillway/sync.key");
    std::fs::write(&key, text).expect("write key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).expect("chmod");
    key
}

#[test]
fn the_sync_key_file_must_be_private_and_a_key() {
    let f = fleet_host();
    let config = sync_config(ONE_PEER);
    let field = "fleet.sync.key_file /etc/spillway/sync.key";
    let out = f.check(&config);
    assert_eq!(out.status, 1, "{}", out.stdout);
    let l = out.has("FAIL", "sync", &format!("{field}: No such file"));
    assert!(
        l.fix.as_deref().unwrap().starts_with(
            "head -c 32 /dev/urandom | xxd -p -c 64 > /etc/spillway/sync.key; chmod 600 \
             /etc/spillway/sync.key"
        ),
        "{l:?}"
    );

    let secret = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
    write_key(&f, &format!("{secret}\n"), 0o640);
    let out = f.check(&config);
    let l = out.has("FAIL", "sync", &format!("{field}: its group or other users"));
    assert!(l.message.contains("(mode 0640)"), "{l:?}");
    assert_eq!(l.fix.as_deref(), Some("chmod 600 /etc/spillway/sync.key"));

    write_key(&f, &format!("{secret}\n"), 0o600);
    let out = f.check(&config);
    out.has("PASS", "sync", &format!("{field}: a 32-byte key, private to its owner (mode 0600)"));
    // Never printed, not even in part.
    for part in [&secret[..16], &secret[48..]] {
        assert!(!out.stdout.contains(part) && !out.stderr.contains(part), "{}", out.stdout);
    }
    let json = f.run(&config, &["--json"]);
    assert!(!json.stdout.contains(&secret[..16]), "{}", json.stdout);
    // Without the newline too.
    write_key(&f, secret, 0o400);
    f.check(&config).has("PASS", "sync", &format!("{field}: a 32-byte key"));
    // Two keys: a rotation under way.
    let next = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";
    write_key(&f, &format!("{secret}\n{next}\n"), 0o600);
    f.check(&config).has("PASS", "sync", &format!("{field}: two 32-byte keys (a rotation"));

    for (text, problem) in [
        ("0123456789abcdef\n", "has a line of 16 characters, not the 64 hexadecimal digits"),
        (&format!("{secret}{secret}\n")[..], "has a line longer than the 64 hexadecimal digits"),
        (&format!("{secret}\n\n")[..], "has a line of 0 characters"),
        (&format!("{secret}\n{secret}\n{secret}\n")[..], "holds more than two lines"),
        (&format!("{secret}\n{secret}\n")[..], "holds the same key on both lines"),
        (&secret.replace('a', "g")[..], "holds a character that is not a hexadecimal digit"),
        (&"0".repeat(64)[..], "is all zeros: a placeholder, not a key"),
    ] {
        write_key(&f, text, 0o600);
        let out = f.check(&config);
        let l = out.has("FAIL", "sync", &format!("{field}: {problem}"));
        assert!(l.fix.is_some(), "{l:?}");
        assert_eq!(out.status, 1);
    }

    std::fs::remove_file(f.path("root/etc/spillway/sync.key")).expect("rm");
    f.mkdir("root/etc/spillway/sync.key");
    f.check(&config).has("FAIL", "sync", &format!("{field}: not a regular file"));
}

#[test]
fn each_sync_peer_is_on_link_or_needs_a_route() {
    let f = fleet_host();
    write_key(&f, &format!("{}\n", "5a".repeat(32)), 0o600);
    let peers = "      - {id: 2, address: 198.18.0.12}\n      - {id: 3, address: 198.19.0.13}\n";
    let out = f.check(&sync_config(peers));
    out.has(
        "PASS",
        "sync",
        "fleet.sync.peers[0] 198.18.0.12 (id 2): on-link, inside dataplane.node.ipv4 \
         198.18.0.2/16: reached directly over the kernel interface `spl0`, UDP port 7455",
    );
    let l = out.has(
        "WARN",
        "sync",
        "fleet.sync.peers[1] 198.19.0.13 (id 3): outside dataplane.node.ipv4 198.18.0.2/16: the \
         host needs a route to it through the kernel interface `spl0`",
    );
    assert!(
        l.fix.as_deref().unwrap().starts_with(
            "add the route when `spl0` comes up, e.g. `ip route add 198.19.0.13/32 via ROUTER \
             dev spl0`"
        ),
        "{l:?}"
    );
    assert_eq!(out.status, 0, "warnings only: {}", out.stdout);
    // With a gateway, the example route uses it.
    let gw = sync_config(peers).replace(
        "    ipv4: 198.18.0.2/16\n",
        "    ipv4: 198.18.0.2/16\n    gateway_ipv4: 198.18.0.1\n",
    );
    let out = f.check(&gw);
    let l = out.has("WARN", "sync", "fleet.sync.peers[1] 198.19.0.13 (id 3): outside");
    assert!(l.fix.as_deref().unwrap().contains("via 198.18.0.1 dev spl0"), "{l:?}");
    // A peer that is the node itself never gets here: the configuration is invalid.
    let out = f.check(&sync_config("      - {id: 2, address: 198.18.0.2}\n"));
    assert_eq!(out.status, 2);
    out.has(
        "FAIL",
        "config",
        "field `fleet.sync.peers[0].address`: `198.18.0.2` is this node's own address",
    );
}

#[test]
fn the_table_files_directory_should_exist() {
    let f = fleet_host();
    write_key(&f, &format!("{}\n", "5a".repeat(32)), 0o600);
    let config = sync_config(ONE_PEER);
    let out = f.check(&config);
    let l = out.has(
        "WARN",
        "table",
        "fleet.table_file /var/lib/spillway/conntrack.table: the directory /var/lib/spillway does \
         not exist",
    );
    assert!(l.fix.as_deref().unwrap().starts_with("mkdir -p /var/lib/spillway"), "{l:?}");
    assert_eq!(out.status, 0, "a warning only: {}", out.stdout);
    f.mkdir("root/var/lib/spillway");
    f.check(&config).has(
        "PASS",
        "table",
        "fleet.table_file /var/lib/spillway/conntrack.table: does not exist yet: a clean stop \
         writes it",
    );
    f.write("root/var/lib/spillway/conntrack.table", "SPTB");
    f.check(&config).has("PASS", "table", "exists: the next start reads it back");
    f.remove("root/var/lib/spillway/conntrack.table");
    f.mkdir("root/var/lib/spillway/conntrack.table");
    let out = f.check(&config);
    out.has("FAIL", "table", "fleet.table_file /var/lib/spillway/conntrack.table: is a directory");
    assert_eq!(out.status, 1);
    // Without fleet.sync, the table file is checked alone.
    let alone = format!("{CLEAN}fleet:\n  table_file: /var/lib/spillway/t\n");
    let out = f.check(&alone);
    out.has("PASS", "table", "fleet.table_file /var/lib/spillway/t: does not exist yet");
    assert!(out.with("PASS", "sync", "").is_none(), "{}", out.stdout);
}
