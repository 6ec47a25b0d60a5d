//! The system facts the preflight reads, each from one file under `/sys`, `/proc` or the root
//! file system, through a [`Host`] whose roots tests point at a fake tree.
//!
//! Every reader answers "unknown" (`None`, empty) for a file that is missing or unreadable:
//! the checks decide what an unknown fact means.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use spillway_dataplane::dpdk::memory::Hugepages;
pub use spillway_dataplane::dpdk::memory::{HugeMount, PageSize};

use super::eal::parse_cpu_list;

/// Where the system's facts are: `sys` for `/sys`, `proc` for `/proc`, and `root` for the
/// absolute paths of the configuration and of mount points (`/run/spillway/admin.sock`,
/// `/dev/net/tun`, `--huge-dir`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// `/sys`.
    pub sys: PathBuf,
    /// `/proc`.
    pub proc: PathBuf,
    /// `/`.
    pub root: PathBuf,
}

impl Default for Host {
    fn default() -> Self {
        Host { sys: "/sys".into(), proc: "/proc".into(), root: "/".into() }
    }
}

/// A PCI device under `/sys/bus/pci/devices/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciDevice {
    /// The kernel driver bound to it (`driver` link), if any.
    pub driver: Option<String>,
    /// `numa_node`; `None` for -1 or unknown.
    pub numa_node: Option<u32>,
    /// `class`, e.g. `0x020000` for an Ethernet controller.
    pub class: Option<String>,
    /// `vendor`, e.g. `0x15b3`.
    pub vendor: Option<String>,
    /// Its kernel network interfaces (`net/`), when a kernel driver has it.
    pub interfaces: Vec<String>,
    /// Its IOMMU group (`iommu_group` link), if any.
    pub iommu_group: Option<String>,
}

impl Host {
    fn sys_path(&self, rel: &str) -> PathBuf {
        self.sys.join(rel)
    }

    fn proc_path(&self, rel: &str) -> PathBuf {
        self.proc.join(rel)
    }

    /// An absolute path of the real system, under `root`.
    pub fn path(&self, abs: &Path) -> PathBuf {
        self.root.join(abs.strip_prefix("/").unwrap_or(abs))
    }

    fn read(path: &Path) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }

    fn read_u64(path: &Path) -> Option<u64> {
        Host::read(path)?.trim().parse().ok()
    }

    /// The hugepages: every size the kernel offers (smallest first) and the hugetlbfs mounts.
    pub fn hugepages(&self) -> Hugepages {
        Hugepages::read(&self.sys, &self.proc)
    }

    /// Every hugepage size the kernel offers, smallest first.
    pub fn page_sizes(&self) -> Vec<PageSize> {
        self.hugepages().sizes
    }

    /// Free pages of `kb` KiB on NUMA node `node`, `None` when the node or size is unknown.
    pub fn node_free_pages(&self, node: u32, kb: u64) -> Option<u64> {
        Host::read_u64(&self.sys_path(&format!(
            "devices/system/node/node{node}/hugepages/hugepages-{kb}kB/free_hugepages"
        )))
    }

    /// The NUMA nodes (`/sys/devices/system/node/nodeN`).
    pub fn numa_nodes(&self) -> Vec<u32> {
        let mut out: Vec<u32> = std::fs::read_dir(self.sys_path("devices/system/node"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
            .collect();
        out.sort_unstable();
        out
    }

    /// A field of `/proc/meminfo`, in KiB.
    pub fn meminfo_kb(&self, key: &str) -> Option<u64> {
        Host::read(&self.proc_path("meminfo"))?.lines().find_map(|l| {
            let rest = l.strip_prefix(key)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse().ok()
        })
    }

    /// The hugetlbfs mounts of `/proc/mounts`.
    pub fn huge_mounts(&self) -> Vec<HugeMount> {
        self.hugepages().mounts
    }

    /// A CPU list file under `/sys/devices/system/cpu/` (`online`, `isolated`, `nohz_full`);
    /// `None` when absent or unreadable (`nohz_full` prints `(null)` when unset: empty).
    pub fn cpu_list(&self, name: &str) -> Option<Vec<u32>> {
        let text = Host::read(&self.sys_path(&format!("devices/system/cpu/{name}")))?;
        if text.trim() == "(null)" {
            return Some(Vec::new());
        }
        parse_cpu_list(&text)
    }

    /// The NUMA node of CPU `cpu` (its `nodeN` link, else its package id).
    pub fn cpu_node(&self, cpu: u32) -> Option<u32> {
        let dir = self.sys_path(&format!("devices/system/cpu/cpu{cpu}"));
        let linked = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .find_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse::<u32>().ok());
        linked.or_else(|| {
            Host::read_u64(&dir.join("topology/physical_package_id"))
                .and_then(|n| u32::try_from(n).ok())
        })
    }

    /// The PCI device `addr` (`0000:3b:00.0`), `None` when the host has none.
    pub fn pci_device(&self, addr: &str) -> Option<PciDevice> {
        let dir = self.sys_path(&format!("bus/pci/devices/{addr}"));
        if !dir.is_dir() {
            return None;
        }
        let link_name = |name: &str| {
            std::fs::read_link(dir.join(name))
                .ok()
                .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
        };
        let text = |name: &str| Host::read(&dir.join(name)).map(|s| s.trim().to_owned());
        let mut interfaces: Vec<String> = std::fs::read_dir(dir.join("net"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        interfaces.sort();
        Some(PciDevice {
            driver: link_name("driver"),
            numa_node: text("numa_node").and_then(|n| n.parse().ok()),
            class: text("class"),
            vendor: text("vendor"),
            interfaces,
            iommu_group: link_name("iommu_group"),
        })
    }

    /// Whether `/sys/kernel/iommu_groups` has any group (an IOMMU is on).
    pub fn iommu_on(&self) -> bool {
        std::fs::read_dir(self.sys_path("kernel/iommu_groups"))
            .is_ok_and(|mut d| d.next().is_some())
    }

    /// vfio's `enable_unsafe_noiommu_mode` parameter is `Y`.
    pub fn vfio_noiommu(&self) -> bool {
        Host::read(&self.sys_path("module/vfio/parameters/enable_unsafe_noiommu_mode"))
            .is_some_and(|s| s.trim() == "Y" || s.trim() == "1")
    }

    /// The selected mode of transparent huge pages (`always`, `madvise`, `never`).
    pub fn thp_mode(&self) -> Option<String> {
        let text = Host::read(&self.sys_path("kernel/mm/transparent_hugepage/enabled"))?;
        let start = text.find('[')?;
        let end = text[start..].find(']')?;
        Some(text[start + 1..start + end].to_owned())
    }

    /// Whether a kernel network interface of this name exists (in this network namespace).
    pub fn net_interface(&self, name: &str) -> bool {
        self.sys_path("class/net").join(name).exists()
    }

    /// The TCP sockets listening on `port` (`/proc/net/tcp`, `/proc/net/tcp6`).
    pub fn tcp_listeners(&self, port: u16) -> Vec<IpAddr> {
        let mut out = Vec::new();
        for file in ["net/tcp", "net/tcp6"] {
            let Some(text) = Host::read(&self.proc_path(file)) else { continue };
            for line in text.lines().skip(1) {
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.len() < 4 || f[3] != "0A" {
                    continue;
                }
                if let Some((ip, p)) = parse_proc_net_addr(f[1]) {
                    if p == port {
                        out.push(ip);
                    }
                }
            }
        }
        out
    }

    /// Whether a Unix stream socket listens at `path` (`/proc/net/unix`).
    pub fn unix_listening(&self, path: &Path) -> bool {
        let Some(text) = Host::read(&self.proc_path("net/unix")) else { return false };
        let path = path.to_string_lossy();
        text.lines().skip(1).any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // Num RefCount Protocol Flags Type St Inode Path; Flags 00010000 = listening.
            f.len() >= 8 && f[3] == "00010000" && f[7] == path
        })
    }
}

/// `0100007F:2382` (IPv4) or 32 hex digits `:port` (IPv6): the kernel prints each 32-bit word
/// of the address in host byte order.
fn parse_proc_net_addr(s: &str) -> Option<(IpAddr, u16)> {
    let (addr, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Vec<u32> = (0..addr.len() / 8)
        .map(|i| u32::from_str_radix(addr.get(i * 8..i * 8 + 8)?, 16).ok())
        .collect::<Option<_>>()?;
    let ip = match words.as_slice() {
        [w] => IpAddr::V4(Ipv4Addr::from(w.to_ne_bytes())),
        [a, b, c, d] => {
            let mut bytes = [0u8; 16];
            for (i, w) in [a, b, c, d].into_iter().enumerate() {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some((ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses() {
        if cfg!(target_endian = "little") {
            assert_eq!(
                parse_proc_net_addr("0100007F:2382"),
                Some((IpAddr::V4(Ipv4Addr::LOCALHOST), 9090))
            );
            assert_eq!(
                parse_proc_net_addr("00000000000000000000000001000000:0050"),
                Some((IpAddr::V6(Ipv6Addr::LOCALHOST), 80))
            );
        }
        assert_eq!(parse_proc_net_addr("zz:1"), None);
    }
}
