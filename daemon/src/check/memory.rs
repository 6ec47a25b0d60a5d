//! Memory: hugepages and the memory DPDK needs for the configuration; the connection tables.
//!
//! The estimate (module doc of `check`, `docs/deployment.md`): mbufs x [`MBUF_BYTES`] +
//! descriptors x [`DESC_BYTES`] + [`EAL_OVERHEAD`]. Memory below the mbufs and descriptors
//! alone cannot work (FAIL); below the whole estimate it may (WARN).

use spillway_control::config::{Config, DataplaneConfig, HugepagePolicy};
use spillway_core::conntrack::{rounded_capacity, BYTES_PER_ENTRY};

use spillway_dataplane::dpdk::memory::{DESC_BYTES, EAL_OVERHEAD, MBUF_BYTES};

use super::eal::EalArgs;
use super::host::{Host, HugeMount, PageSize};
use super::{page_name, plural, size, Finding, Level};

const MIB: u64 = 1 << 20;

/// The memory DPDK needs for a configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    /// The mbuf pool.
    pub mempool: u64,
    /// RX and TX descriptors of every queue.
    pub descriptors: u64,
}

impl Need {
    /// The estimate for `dp`.
    pub fn of(dp: &DataplaneConfig) -> Need {
        let queues = dp.ports.len() as u64 * u64::from(dp.worker_count());
        Need {
            mempool: u64::from(dp.mempool_size) * MBUF_BYTES,
            descriptors: (u64::from(dp.rx_queue_size) + u64::from(dp.tx_queue_size))
                * queues
                * DESC_BYTES,
        }
    }

    /// What cannot be done without: the pool and the descriptors.
    pub fn data(&self) -> u64 {
        self.mempool + self.descriptors
    }

    /// The whole estimate, with [`EAL_OVERHEAD`].
    pub fn total(&self) -> u64 {
        self.data() + EAL_OVERHEAD
    }

    /// The estimate with its parts, for messages.
    pub fn explain(&self, dp: &DataplaneConfig) -> String {
        format!(
            "about {} (dataplane.mempool_size {} x {MBUF_BYTES} B = {} + descriptors \
             ({} RX + {} TX) x {} x {} x {DESC_BYTES} B = {} + {} for EAL)",
            size(self.total()),
            dp.mempool_size,
            size(self.mempool),
            dp.rx_queue_size,
            dp.tx_queue_size,
            plural(dp.ports.len() as u64, "port"),
            plural(u64::from(dp.worker_count()), "worker"),
            size(self.descriptors),
            size(EAL_OVERHEAD),
        )
    }
}

/// FAIL below the data, WARN below the estimate, PASS otherwise.
fn compare(need: &Need, have: u64, message: String, fix: impl FnOnce() -> String) -> Finding {
    if have < need.data() {
        Finding::fail("memory", message).fix(fix())
    } else if have < need.total() {
        Finding::warn(
            "memory",
            format!(
                "{message}; enough for the mbufs and descriptors, not for the {} EAL margin",
                size(EAL_OVERHEAD)
            ),
        )
        .fix(fix())
    } else {
        Finding::pass("memory", message)
    }
}

/// Hugepages, DPDK memory and connection tables.
pub fn check(config: &Config, eal: &EalArgs, host: &Host) -> Vec<Finding> {
    let dp = &config.dataplane;
    let need = Need::of(dp);
    let mut out = Vec::new();
    if dp.hugepages == HugepagePolicy::Off || eal.no_huge {
        out.push(
            Finding::warn(
                "hugepages",
                "dataplane.hugepages: off: runs without hugepages: fine for tests, not for \
                 production (4 KiB pages cost TLB misses on every packet buffer, and NIC DMA \
                 wants pinned hugepage memory)",
            )
            .fix(
                "reserve hugepages and mount hugetlbfs (docs/deployment.md, Hugepages), then \
                 set dataplane.hugepages: required",
            ),
        );
        let (mb, given) = match eal.mem_mb {
            Some(mb) => (mb, format!("-m {mb} MiB")),
            None => (
                need.total().div_ceil(MIB),
                format!("-m {} MiB (sized by Spillway)", need.total().div_ceil(MIB)),
            ),
        };
        out.push(compare(
            &need,
            mb * MIB,
            format!(
                "dataplane.eal_args: {given} of ordinary memory (--no-huge); the \
                 configuration needs {}",
                need.explain(dp)
            ),
            || format!("set -m {} in dataplane.eal_args", need.total().div_ceil(MIB)),
        ));
    } else {
        let mut found = Vec::new();
        hugepages(dp, eal, host, &need, &mut found);
        if dp.hugepages == HugepagePolicy::Preferred && found.iter().any(|f| f.level == Level::Fail)
        {
            // The daemon would run, on ordinary memory: each problem is a warning.
            for f in &mut found {
                if f.level == Level::Fail {
                    f.level = Level::Warn;
                }
            }
            found.insert(
                0,
                Finding::warn(
                    "hugepages",
                    format!(
                        "dataplane.hugepages: preferred: the daemon would fall back to \
                         ordinary memory (--no-huge, -m {} MiB), for the reasons below",
                        need.total().div_ceil(MIB)
                    ),
                )
                .fix("reserve and mount hugepages as the lines below say"),
            );
        }
        out.extend(found);
    }
    out.extend(conntrack(config, host));
    out
}

/// Hugepages: the pages reserved, the hugetlbfs mounts EAL can use them through, the free
/// memory against the estimate, and what `-m` / `--socket-mem` make EAL reserve at start.
fn hugepages(
    dp: &DataplaneConfig,
    eal: &EalArgs,
    host: &Host,
    need: &Need,
    out: &mut Vec<Finding>,
) {
    let pages = Pages::new(dp, eal, host, need);
    pages.reserved_pages(out);
    pages.mounts(out);
    let free = pages.free(out);
    if let Some(mb) = eal.mem_mb {
        out.push(reserved(need, eal, mb * MIB, free, format!("-m {mb}"), &|extra| {
            pages.reserve_fix(extra)
        }));
    }
    if let Some(per_node) = &eal.socket_mem {
        pages.socket_mem(per_node, out);
    }
}

/// What the hugepage steps read: the configuration, the estimate, the page sizes and the
/// hugetlbfs mounts.
struct Pages<'a> {
    dp: &'a DataplaneConfig,
    eal: &'a EalArgs,
    host: &'a Host,
    need: &'a Need,
    /// Every page size, smallest first.
    sizes: Vec<PageSize>,
    /// The hugetlbfs mounts.
    mounts: Vec<HugeMount>,
    /// The default hugepage size (`Hugepagesize` of `/proc/meminfo`), in KiB.
    default_kb: u64,
    /// With `--huge-dir`: the mount it is on, if any.
    huge_dir_mount: Option<Option<HugeMount>>,
}

impl<'a> Pages<'a> {
    fn new(dp: &'a DataplaneConfig, eal: &'a EalArgs, host: &'a Host, need: &'a Need) -> Self {
        let sizes = host.page_sizes();
        let mounts = host.huge_mounts();
        let default_kb = host.meminfo_kb("Hugepagesize").unwrap_or(2048);
        let huge_dir_mount = eal.huge_dir.as_ref().map(|d| {
            mounts
                .iter()
                .find(|m| {
                    d == &m.dir || d.starts_with(&format!("{}/", m.dir.trim_end_matches('/')))
                })
                .cloned()
        });
        Pages { dp, eal, host, need, sizes, mounts, default_kb, huge_dir_mount }
    }

    /// Whether EAL can use pages of size `p`: with `--in-memory` always, else when a
    /// hugetlbfs mount (the one of `--huge-dir`, if given) serves them.
    fn usable(&self, p: &PageSize) -> bool {
        if self.eal.in_memory {
            return true;
        }
        match &self.huge_dir_mount {
            Some(Some(m)) => m.kb == Some(p.kb),
            Some(None) => false,
            None => self.mounts.iter().any(|m| m.kb == Some(p.kb)),
        }
    }

    /// The fix for `extra` bytes too few: more 2 MiB pages.
    fn reserve_fix(&self, extra: u64) -> String {
        let two_mb = self.sizes.iter().find(|p| p.kb == 2048).copied();
        let nr = two_mb.map_or(0, |p| p.nr);
        let pages = extra.div_ceil(2 * MIB).max(1);
        format!(
            "reserve {pages} more 2 MiB page(s): echo {} > \
             /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages (or boot with hugepages=N; \
             docs/deployment.md)",
            nr + pages
        )
    }

    /// The fix for pages of `kb` KiB without a mount: mount hugetlbfs at `dir`.
    fn mount_fix(&self, kb: u64, dir: &str) -> String {
        let opt = if kb == self.default_kb {
            String::new()
        } else {
            format!("-o pagesize={} ", short_size(kb))
        };
        format!("mkdir -p {dir} && mount -t hugetlbfs {opt}nodev {dir} (and in /etc/fstab)")
    }

    /// Pages reserved.
    fn reserved_pages(&self, out: &mut Vec<Finding>) {
        let (dp, need) = (self.dp, self.need);
        let listing = self
            .sizes
            .iter()
            .map(|p| format!("{}: {} reserved, {} free", page_name(p.kb), p.nr, p.free))
            .collect::<Vec<_>>()
            .join("; ");
        if self.sizes.iter().all(|p| p.nr == 0) {
            out.push(
                Finding::fail(
                    "hugepages",
                    format!(
                        "dataplane.hugepages: {}: DPDK uses hugepages but none are reserved ({})",
                        dp.hugepages,
                        if listing.is_empty() {
                            "no hugepage sizes in /sys".into()
                        } else {
                            listing
                        }
                    ),
                )
                .fix({
                    let pages = need.total().div_ceil(2 * MIB).max(1024);
                    format!(
                        "echo {pages} > /proc/sys/vm/nr_hugepages ({} of 2 MiB pages, at run \
                         time), or boot with default_hugepagesz=1G hugepagesz=1G hugepages={} \
                         (docs/deployment.md)",
                        size(pages * 2 * MIB),
                        need.total().div_ceil(1 << 30).max(2)
                    )
                }),
            );
        } else {
            out.push(Finding::pass(
                "hugepages",
                format!("dataplane.hugepages: {}: {listing}", dp.hugepages),
            ));
        }
    }

    /// Mounts: which sizes EAL can use.
    fn mounts(&self, out: &mut Vec<Finding>) {
        let described = if self.mounts.is_empty() {
            "none in /proc/mounts".to_owned()
        } else {
            self.mounts
                .iter()
                .map(|m| format!("{} ({})", m.dir, m.kb.map_or("?".into(), page_name)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if self.eal.in_memory {
            out.push(Finding::pass(
                "hugepages",
                "dataplane.eal_args: --in-memory: EAL maps hugepages without a hugetlbfs mount",
            ));
        } else if let (Some(dir), Some(None)) = (&self.eal.huge_dir, &self.huge_dir_mount) {
            out.push(
                Finding::fail(
                    "hugepages",
                    format!(
                        "dataplane.eal_args: --huge-dir {dir} is not on a hugetlbfs mount \
                         (hugetlbfs mounts: {described})"
                    ),
                )
                .fix(self.mount_fix(self.default_kb, dir)),
            );
        } else {
            self.mounted_sizes(&described, out);
        }
    }

    /// The reserved sizes against the mounts that serve them (`described`, for messages).
    fn mounted_sizes(&self, described: &str, out: &mut Vec<Finding>) {
        let (eal, default_kb) = (self.eal, self.default_kb);
        let wanted: Vec<&PageSize> = self.sizes.iter().filter(|p| p.nr > 0).collect();
        let unmounted: Vec<&PageSize> =
            wanted.iter().copied().filter(|p| !self.usable(p)).collect();
        let at = eal.huge_dir.as_ref().map_or(String::new(), |d| format!(" (--huge-dir {d})"));
        if wanted.is_empty() {
            // Nothing reserved: still say whether the default size has a mount.
            if !self.mounts.iter().any(|m| m.kb == Some(default_kb)) {
                out.push(
                    Finding::fail(
                        "hugepages",
                        format!(
                            "dataplane.eal_args: no hugetlbfs mount for {} pages (hugetlbfs \
                             mounts: {described})",
                            page_name(default_kb)
                        ),
                    )
                    .fix(self.mount_fix(default_kb, "/dev/hugepages")),
                );
            }
        } else if unmounted.len() == wanted.len() {
            let names: Vec<String> = unmounted.iter().map(|p| page_name(p.kb)).collect();
            out.push(
                Finding::fail(
                    "hugepages",
                    format!(
                        "dataplane.eal_args: no hugetlbfs mount{at} serves the reserved {} \
                         pages, so EAL cannot map them (hugetlbfs mounts: {described})",
                        names.join(" and ")
                    ),
                )
                .fix(self.mount_fix(
                    unmounted[0].kb,
                    eal.huge_dir.as_deref().unwrap_or("/dev/hugepages"),
                )),
            );
        } else {
            for p in &unmounted {
                out.push(
                    Finding::warn(
                        "hugepages",
                        format!(
                            "dataplane.eal_args: {} {} pages are reserved but no hugetlbfs \
                             mount{at} serves them: EAL ignores them",
                            p.nr,
                            page_name(p.kb)
                        ),
                    )
                    .fix(self.mount_fix(p.kb, &format!("/dev/hugepages{}", short_size(p.kb)))),
                );
            }
            out.push(self.served(&wanted));
        }
    }

    /// The reserved sizes of `wanted` that a mount serves, and where.
    fn served(&self, wanted: &[&PageSize]) -> Finding {
        let served: Vec<String> = wanted
            .iter()
            .filter(|p| self.usable(p))
            .map(|p| {
                let dirs: Vec<&str> = match &self.huge_dir_mount {
                    Some(_) => self.eal.huge_dir.iter().map(String::as_str).collect(),
                    None => self
                        .mounts
                        .iter()
                        .filter(|m| m.kb == Some(p.kb))
                        .map(|m| m.dir.as_str())
                        .collect(),
                };
                format!("{} pages at {}", page_name(p.kb), dirs.join(" and "))
            })
            .collect();
        Finding::pass(
            "hugepages",
            format!("dataplane.eal_args: hugetlbfs serves the {}", served.join("; ")),
        )
    }

    /// Free memory against the estimate; returns the bytes free in usable hugepages.
    fn free(&self, out: &mut Vec<Finding>) -> u64 {
        let (sizes, need) = (&self.sizes, self.need);
        let free: u64 = sizes.iter().filter(|p| self.usable(p)).map(|p| p.free * p.bytes()).sum();
        out.push(compare(
            need,
            free,
            format!(
                "dataplane: {} free in usable hugepages (pages a running DPDK process holds are \
                 not free); the configuration needs {}",
                size(free),
                need.explain(self.dp)
            ),
            || {
                let reserved_free: u64 = sizes.iter().map(|p| p.free * p.bytes()).sum();
                if reserved_free >= need.total() {
                    "mount hugetlbfs for the reserved pages (the hugepages finding above)"
                        .to_owned()
                } else {
                    self.reserve_fix(need.total().saturating_sub(free))
                }
            },
        ));
        free
    }

    /// `--socket-mem`: what EAL reserves at start on each NUMA node, and in all.
    fn socket_mem(&self, per_node: &[u64], out: &mut Vec<Finding>) {
        let nodes = self.host.numa_nodes();
        for (node, &mb) in per_node.iter().enumerate() {
            let node = u32::try_from(node).unwrap_or(u32::MAX);
            if mb == 0 {
                continue;
            }
            out.extend(self.node_memory(node, mb, &nodes));
        }
        let total: u64 = per_node.iter().sum();
        out.push(reserved(
            self.need,
            self.eal,
            total * MIB,
            u64::MAX,
            format!(
                "--socket-mem {}",
                per_node.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
            ),
            &|extra| self.reserve_fix(extra),
        ));
    }

    /// `--socket-mem`'s `mb` MiB on NUMA node `node`: a node of this host (`nodes`), with that
    /// much free in usable hugepages.
    fn node_memory(&self, node: u32, mb: u64, nodes: &[u32]) -> Option<Finding> {
        if !(nodes.contains(&node) || nodes.is_empty() && node == 0) {
            return Some(
                Finding::fail(
                    "memory",
                    format!(
                        "dataplane.eal_args: --socket-mem asks {mb} MiB on NUMA node \
                         {node}, which this host does not have (nodes: {})",
                        super::eal::format_list(nodes)
                    ),
                )
                .fix("give --socket-mem one value per NUMA node of this host"),
            );
        }
        let node_free: u64 = self
            .sizes
            .iter()
            .filter(|p| self.usable(p))
            .map(|p| self.host.node_free_pages(node, p.kb).unwrap_or(p.free) * p.bytes())
            .sum();
        if node_free >= mb * MIB {
            return None;
        }
        Some(
            Finding::fail(
                "memory",
                format!(
                    "dataplane.eal_args: --socket-mem reserves {mb} MiB on NUMA node \
                     {node} at start, but only {} of usable hugepages are free there",
                    size(node_free)
                ),
            )
            .fix(format!(
                "echo N > /sys/devices/system/node/node{node}/hugepages/hugepages-2048kB/nr_hugepages \
                 with N >= {} free pages",
                (mb * MIB).div_ceil(2 * MIB)
            )),
        )
    }
}

/// `2M`, `1G`: a page size as `mount -o pagesize=` takes it.
fn short_size(kb: u64) -> String {
    if kb >= 1 << 20 && kb % (1 << 20) == 0 {
        format!("{}G", kb >> 20)
    } else {
        format!("{}M", kb >> 10)
    }
}

/// `-m` / `--socket-mem`: EAL reserves `bytes` at start (FAIL when not free); with
/// `--legacy-mem` that is all it ever has.
fn reserved(
    need: &Need,
    eal: &EalArgs,
    bytes: u64,
    free: u64,
    given: String,
    reserve_fix: &dyn Fn(u64) -> String,
) -> Finding {
    if bytes > free {
        return Finding::fail(
            "memory",
            format!(
                "dataplane.eal_args: {given}: EAL reserves {} of hugepages at start, but only {} \
                 is free",
                size(bytes),
                size(free)
            ),
        )
        .fix(reserve_fix(bytes - free));
    }
    if eal.legacy_mem {
        return compare(
            need,
            bytes,
            format!(
                "dataplane.eal_args: {given} with --legacy-mem: EAL has {} and never more; the \
                 configuration needs about {}",
                size(bytes),
                size(need.total())
            ),
            || format!("raise {given} to at least {} MiB", need.total().div_ceil(MIB)),
        );
    }
    let note = if bytes >= need.total() {
        "covers the estimate".to_owned()
    } else {
        format!(
            "less than the estimated {}; EAL takes more from free hugepages when needed",
            size(need.total())
        )
    };
    Finding::pass(
        "memory",
        format!(
            "dataplane.eal_args: {given}: EAL reserves {} of hugepages at start: {note}",
            size(bytes)
        ),
    )
}

/// Entries of one worker's connection table for `capacity` (whole buckets, a power of two).
fn table_entries(capacity: u32) -> u64 {
    rounded_capacity(capacity as usize) as u64
}

/// Bytes of one worker's connection table for `capacity`.
pub fn table_bytes(capacity: u32) -> u64 {
    table_entries(capacity) * BYTES_PER_ENTRY as u64
}

/// The connection tables: ordinary memory, one table per worker, in load-balancer mode only.
fn conntrack(config: &Config, host: &Host) -> Vec<Finding> {
    let dp = &config.dataplane;
    if config.services.is_empty() {
        return vec![Finding::pass(
            "conntrack",
            "dataplane.conntrack_capacity: io-forward mode (no services) allocates no connection \
             tables",
        )];
    }
    let asked = dp.conntrack_capacity as usize;
    let entries = table_entries(dp.conntrack_capacity);
    let workers = u64::from(dp.worker_count());
    let total = table_bytes(dp.conntrack_capacity) * workers;
    let rounded = if entries == asked as u64 {
        format!("{entries} entries")
    } else {
        format!("{asked} entries (rounded up to {entries})")
    };
    let available = host.meminfo_kb("MemAvailable").map(|kb| kb * 1024);
    let thp = host.thp_mode();
    let message = format!(
        "dataplane.conntrack_capacity: {rounded} x {BYTES_PER_ENTRY} B x {} = {} of ordinary \
         memory, not DPDK's (MemAvailable: {}; transparent huge pages: {})",
        plural(workers, "worker"),
        size(total),
        available.map_or("unknown".into(), size),
        thp.as_deref().unwrap_or("unknown"),
    );
    let mut out = vec![match available {
        Some(a) if total > a => Finding::warn("conntrack", message).fix(
            "lower dataplane.conntrack_capacity (about 1.25x the connections a worker holds) \
             or free memory",
        ),
        _ => Finding::pass("conntrack", message),
    }];
    if thp.as_deref() == Some("never") {
        out.push(
            Finding::warn(
                "conntrack",
                "dataplane.conntrack_capacity: transparent huge pages are off: the tables use \
                 4 KiB pages and lookups miss the TLB",
            )
            .fix("echo madvise > /sys/kernel/mm/transparent_hugepage/enabled (or boot with transparent_hugepage=madvise)"),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_follows_the_documented_formula() {
        let dp = DataplaneConfig {
            ports: vec!["a".into(), "b".into()],
            workers: Some(2),
            mempool_size: 16383,
            ..DataplaneConfig::default()
        };
        let n = Need::of(&dp);
        assert_eq!(n.mempool, 16383 * 2368);
        assert_eq!(n.descriptors, (1024 + 1024) * 2 * 2 * 64);
        assert_eq!(n.total(), n.mempool + n.descriptors + (64 << 20));
        assert_eq!(short_size(2048), "2M");
        assert_eq!(short_size(1 << 20), "1G");
    }
}
