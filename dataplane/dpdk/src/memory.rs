//! EAL memory: the hugepages a host has reserved and mounted, the memory a setup needs, and
//! the EAL options that give it that memory ([`plan`]), on hugepages or, when the policy
//! allows, on ordinary memory (`--no-huge`) with the reason said.
//!
//! The rules [`plan`] applies to the caller's EAL arguments:
//! - **Sized from the setup.** Without `-m` or `--socket-mem`, it adds `-m` with the estimate
//!   ([`need`]): mbufs x [`MBUF_BYTES`] + descriptors x [`DESC_BYTES`] + [`EAL_OVERHEAD`]. On
//!   hugepages EAL reserves that much at start (and may grow later); on `--no-huge` it is all
//!   EAL ever has, so the estimate must cover it.
//! - **Capture possible, nothing left for long.** On hugepages it adds
//!   `--huge-unlink=existing` (unless the arguments say what to do with hugepage files,
//!   `--huge-unlink` or `--huge-unlink=never` included, or use `--in-memory`): EAL removes the
//!   hugepage files an earlier process with the same `--file-prefix` left, and keeps its own
//!   while it runs, so that a DPDK secondary process (`dpdk-dumpcap`, `dpdk-proc-info`) can
//!   attach. A process that dies by `kill -9` leaves its `<prefix>map_N` files holding their
//!   pages until the next start with the same prefix removes them. `--huge-unlink` in the
//!   arguments unlinks them at once instead (the pages go back however the process ends), and
//!   no secondary process can attach.
//! - **The policy decides when hugepages are short.** [`HugepagePolicy::Required`] fails with
//!   the fix; [`HugepagePolicy::Preferred`] falls back to `--no-huge` and says why;
//!   [`HugepagePolicy::Off`] always runs on `--no-huge`. Arguments that already hold
//!   `--no-huge` are taken as they are (sized, never changed to hugepages).
//!
//! Once EAL runs, [`Eal::memory`](crate::Eal::memory) says what it got.

use std::fmt;
use std::path::Path;

use crate::eal_args::EalArgs;

/// One mbuf of a pool: `RTE_MBUF_DEFAULT_BUF_SIZE` (2,048 B data room + 128 B headroom) +
/// `struct rte_mbuf` (128 B) + the mempool's object header (64 B).
pub const MBUF_BYTES: u64 = 2048 + 128 + 128 + 64;

/// One RX or TX descriptor, with the driver's software ring entry.
pub const DESC_BYTES: u64 = 64;

/// EAL's own memory (memzones, the mempool ring, driver state, page rounding), a margin.
pub const EAL_OVERHEAD: u64 = 64 << 20;

const MIB: u64 = 1 << 20;

/// The memory EAL needs for `mbufs` pool entries and `descriptors` RX and TX descriptors,
/// [`EAL_OVERHEAD`] included, in bytes.
pub fn need(mbufs: u64, descriptors: u64) -> u64 {
    mbufs * MBUF_BYTES + descriptors * DESC_BYTES + EAL_OVERHEAD
}

/// Bytes as MiB, rounded up.
pub fn mib(bytes: u64) -> u64 {
    bytes.div_ceil(MIB)
}

/// One hugepage size: `/sys/kernel/mm/hugepages/hugepages-<kb>kB/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageSize {
    /// Page size in KiB.
    pub kb: u64,
    /// `nr_hugepages`: pages reserved.
    pub nr: u64,
    /// `free_hugepages`: reserved pages nobody uses.
    pub free: u64,
}

impl PageSize {
    /// Bytes per page.
    pub fn bytes(&self) -> u64 {
        self.kb * 1024
    }
}

/// A hugetlbfs mount of `/proc/mounts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HugeMount {
    /// The mount point.
    pub dir: String,
    /// The page size it serves, in KiB (`pagesize=` or the default hugepage size).
    pub kb: Option<u64>,
}

/// `2M`, `1G`, `1024M`, `2048k` or a byte count, in KiB.
pub fn parse_size_kb(s: &str) -> Option<u64> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().ok()?;
    match unit.to_ascii_uppercase().as_str() {
        "" => Some(n / 1024),
        "K" => Some(n),
        "M" => Some(n * 1024),
        "G" => Some(n * 1024 * 1024),
        _ => None,
    }
}

/// `2 MiB`, `1 GiB` for a page size in KiB.
pub fn page_name(kb: u64) -> String {
    match kb {
        kb if kb >= 1 << 20 && kb % (1 << 20) == 0 => format!("{} GiB", kb >> 20),
        kb if kb >= 1 << 10 && kb % (1 << 10) == 0 => format!("{} MiB", kb >> 10),
        kb => format!("{kb} KiB"),
    }
}

/// Removes the hugepage files EAL made for `prefix` (`<mount>/<prefix>map_N` in every
/// hugetlbfs mount) once the process is done with them: with `--huge-unlink=existing` EAL
/// keeps them while it runs (a capture process may attach) and leaves them at exit. Returns
/// how many it removed.
pub fn remove_hugepage_files(prefix: &str) -> usize {
    let want = format!("{prefix}map_");
    let mut removed = 0;
    for m in Hugepages::of_host().mounts {
        let Ok(dir) = std::fs::read_dir(&m.dir) else { continue };
        for e in dir.flatten() {
            let name = e.file_name();
            let Some(n) = name.to_str() else { continue };
            // `<prefix>map_<digits>`: not another prefix that starts with this one.
            let ours = n.strip_prefix(&want).is_some_and(|i| i.bytes().all(|b| b.is_ascii_digit()));
            if ours && std::fs::remove_file(e.path()).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}

/// The host's hugepages: the sizes the kernel offers and the hugetlbfs mounts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hugepages {
    /// Every size, smallest first.
    pub sizes: Vec<PageSize>,
    /// The hugetlbfs mounts.
    pub mounts: Vec<HugeMount>,
}

impl Hugepages {
    /// This host's hugepages.
    pub fn of_host() -> Hugepages {
        Hugepages::read(Path::new("/sys"), Path::new("/proc"))
    }

    /// The hugepages described under `sys` (`/sys`) and `proc` (`/proc`).
    pub fn read(sys: &Path, proc: &Path) -> Hugepages {
        let read = |p: &Path| std::fs::read_to_string(p).ok();
        let read_u64 = |p: &Path| read(p)?.trim().parse::<u64>().ok();
        let mut sizes: Vec<PageSize> = std::fs::read_dir(sys.join("kernel/mm/hugepages"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let kb = name.strip_prefix("hugepages-")?.strip_suffix("kB")?.parse().ok()?;
                let p = e.path();
                Some(PageSize {
                    kb,
                    nr: read_u64(&p.join("nr_hugepages")).unwrap_or(0),
                    free: read_u64(&p.join("free_hugepages")).unwrap_or(0),
                })
            })
            .collect();
        sizes.sort_by_key(|p| p.kb);
        let default_kb = read(&proc.join("meminfo")).and_then(|t| {
            t.lines().find_map(|l| {
                let rest = l.strip_prefix("Hugepagesize:")?;
                rest.split_whitespace().next()?.parse().ok()
            })
        });
        let mounts = read(&proc.join("mounts"))
            .map(|text| {
                text.lines()
                    .filter_map(|l| {
                        let f: Vec<&str> = l.split_whitespace().collect();
                        if f.len() < 4 || f[2] != "hugetlbfs" {
                            return None;
                        }
                        let kb = match f[3].split(',').find_map(|o| o.strip_prefix("pagesize=")) {
                            Some(size) => parse_size_kb(size),
                            None => default_kb,
                        };
                        Some(HugeMount { dir: f[1].replace("\\040", " "), kb })
                    })
                    .collect()
            })
            .unwrap_or_default();
        Hugepages { sizes, mounts }
    }

    /// The mount EAL would use for page size `kb` given `--huge-dir` (any mount of that size
    /// when `None`).
    fn mount_for(&self, kb: u64, huge_dir: Option<&str>) -> Option<&HugeMount> {
        self.mounts.iter().find(|m| {
            m.kb == Some(kb)
                && huge_dir.is_none_or(|d| {
                    d == m.dir || d.starts_with(&format!("{}/", m.dir.trim_end_matches('/')))
                })
        })
    }

    /// Free hugepage memory EAL can use with these arguments: free pages of every size that
    /// has a mount (every size with `--in-memory`, which needs none), in bytes.
    pub fn usable_free(&self, eal: &EalArgs) -> u64 {
        self.sizes
            .iter()
            .filter(|p| eal.in_memory || self.mount_for(p.kb, eal.huge_dir.as_deref()).is_some())
            .map(|p| p.free * p.bytes())
            .sum()
    }

    /// `2 MiB: 1024 reserved, 1013 free, mounted at /dev/hugepages; 1 GiB: 0 reserved`.
    pub fn describe(&self, eal: &EalArgs) -> String {
        if self.sizes.is_empty() {
            return "the kernel offers no hugepages".into();
        }
        self.sizes
            .iter()
            .map(|p| {
                let mut s = format!("{}: {} reserved", page_name(p.kb), p.nr);
                if p.nr > 0 {
                    s += &format!(", {} free", p.free);
                    match self.mount_for(p.kb, eal.huge_dir.as_deref()) {
                        Some(m) => s += &format!(", mounted at {}", m.dir),
                        None if eal.in_memory => {}
                        None => s += ", not mounted",
                    }
                }
                s
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Whether EAL runs on hugepages (configuration `dataplane.hugepages`, `spillway-gen
/// --hugepages`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HugepagePolicy {
    /// Hugepages or nothing: not enough free is an error with the fix.
    Required,
    /// Hugepages when enough are free and mounted, otherwise `--no-huge`, said aloud.
    Preferred,
    /// Always `--no-huge`.
    Off,
}

impl HugepagePolicy {
    /// Every policy, in the order the names are listed.
    pub const ALL: [HugepagePolicy; 3] =
        [HugepagePolicy::Required, HugepagePolicy::Preferred, HugepagePolicy::Off];

    /// `required`, `preferred` or `off`.
    pub fn name(self) -> &'static str {
        match self {
            HugepagePolicy::Required => "required",
            HugepagePolicy::Preferred => "preferred",
            HugepagePolicy::Off => "off",
        }
    }

    /// The policy named `s`.
    pub fn from_name(s: &str) -> Option<HugepagePolicy> {
        HugepagePolicy::ALL.into_iter().find(|p| p.name() == s)
    }
}

/// What [`plan`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPlan {
    /// The EAL arguments to start with: the caller's, plus the memory options.
    pub args: Vec<String>,
    /// Whether EAL runs on hugepages.
    pub hugepages: bool,
    /// The estimate, in bytes.
    pub need: u64,
    /// The memory EAL reserves at start, in MiB (`-m`, or the sum of `--socket-mem`).
    pub reserve_mib: u64,
    /// Why it runs on `--no-huge` when hugepages were preferred; `None` otherwise.
    pub fallback: Option<String>,
}

impl fmt::Display for MemoryPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on = if self.hugepages { "hugepages" } else { "ordinary memory (--no-huge)" };
        write!(
            f,
            "{} MiB reserved at start on {on}; needs about {} MiB",
            self.reserve_mib,
            mib(self.need)
        )?;
        if let Some(why) = &self.fallback {
            write!(f, "; fell back to --no-huge: {why}")?;
        }
        Ok(())
    }
}

/// Completes `args` with memory options for a setup that needs `need` bytes (module doc), on
/// a host with `host` hugepages. Fails, with the fix, only under
/// [`HugepagePolicy::Required`].
pub fn plan(
    args: &[String],
    need: u64,
    policy: HugepagePolicy,
    host: &Hugepages,
) -> Result<MemoryPlan, String> {
    let eal = EalArgs::parse(args);
    let mut out = args.to_vec();
    let given_mib = match (&eal.mem_mb, &eal.socket_mem) {
        (Some(m), _) => Some(*m),
        (None, Some(per_node)) => Some(per_node.iter().sum()),
        (None, None) => None,
    };
    let sized = |out: &mut Vec<String>| {
        if given_mib.is_none() {
            out.extend(["-m".to_owned(), mib(need).to_string()]);
        }
        given_mib.unwrap_or(mib(need))
    };
    let no_huge = |out: &mut Vec<String>, fallback: Option<String>| {
        if !eal.no_huge {
            out.push("--no-huge".to_owned());
        }
        let reserve_mib = sized(out);
        MemoryPlan { args: out.clone(), hugepages: false, need, reserve_mib, fallback }
    };
    if eal.no_huge || policy == HugepagePolicy::Off {
        return Ok(no_huge(&mut out, None));
    }
    let want = given_mib.map_or(need, |m| m * MIB);
    let free = host.usable_free(&eal);
    if free < want {
        let why = format!(
            "{} MiB needed, {} MiB of hugepages free and usable ({})",
            mib(want),
            free / MIB,
            host.describe(&eal)
        );
        if policy == HugepagePolicy::Preferred {
            return Ok(no_huge(&mut out, Some(why)));
        }
        let pages = (want - free).div_ceil(2 * MIB);
        let nr = host.sizes.iter().find(|p| p.kb == 2048).map_or(0, |p| p.nr);
        let mount = if host.mounts.iter().any(|m| m.kb == Some(2048)) || eal.in_memory {
            String::new()
        } else {
            "; mkdir -p /dev/hugepages; mount -t hugetlbfs nodev /dev/hugepages".to_owned()
        };
        return Err(format!(
            "not enough hugepages: {why}; fix: echo {} > /proc/sys/vm/nr_hugepages{mount} \
             (or boot with hugepages=N; `spillway check` lists what the host lacks)",
            nr + pages
        ));
    }
    if !eal.huge_unlink && !eal.in_memory {
        out.push("--huge-unlink=existing".to_owned());
    }
    let reserve_mib = sized(&mut out);
    Ok(MemoryPlan { args: out, hugepages: true, need, reserve_mib, fallback: None })
}

/// Memory EAL holds, per NUMA socket and page size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryArea {
    /// The NUMA socket.
    pub socket: i32,
    /// The page size in bytes (4,096 under `--no-huge`).
    pub page_bytes: u64,
    /// Bytes mapped.
    pub bytes: u64,
    /// Bytes of the socket's heap in use (the same for every page size of a socket).
    pub heap_used: u64,
}

/// `86 MiB on 2 MiB hugepages, socket 0 (27 MiB in use)`, one per area.
pub fn describe_areas(areas: &[MemoryArea]) -> String {
    if areas.is_empty() {
        return "no memory".into();
    }
    areas
        .iter()
        .map(|a| {
            let pages = if a.page_bytes >= 2 * MIB {
                format!("{} hugepages", page_name(a.page_bytes / 1024))
            } else {
                format!("{} pages (no hugepages)", page_name(a.page_bytes / 1024))
            };
            format!(
                "{} MiB on {pages}, socket {} ({} MiB in use)",
                a.bytes / MIB,
                a.socket,
                mib(a.heap_used)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    fn host(free_2m: u64, mounted: bool) -> Hugepages {
        Hugepages {
            sizes: vec![
                PageSize { kb: 2048, nr: 1024, free: free_2m },
                PageSize { kb: 1 << 20, nr: 0, free: 0 },
            ],
            mounts: if mounted {
                vec![HugeMount { dir: "/dev/hugepages".into(), kb: Some(2048) }]
            } else {
                vec![]
            },
        }
    }

    const NEED: u64 = 83 * MIB;

    #[test]
    fn hugepages_when_enough_are_free_sized_and_unlinked() {
        let p = plan(&args(&["-l", "0-1"]), NEED, HugepagePolicy::Required, &host(64, true));
        let p = p.unwrap();
        assert!(p.hugepages && p.fallback.is_none());
        assert_eq!(p.args, args(&["-l", "0-1", "--huge-unlink=existing", "-m", "83"]));
        assert_eq!(p.reserve_mib, 83);
    }

    #[test]
    fn the_callers_sizes_and_unlink_choice_are_kept() {
        let a = args(&["-m", "512", "--huge-unlink=never"]);
        let p = plan(&a, NEED, HugepagePolicy::Required, &host(1024, true)).unwrap();
        assert_eq!(p.args, a);
        assert_eq!(p.reserve_mib, 512);
        let a = args(&["--socket-mem", "100,28", "--in-memory"]);
        let p = plan(&a, NEED, HugepagePolicy::Required, &host(1024, true)).unwrap();
        assert_eq!((p.args, p.reserve_mib), (a, 128));
        // -m beyond what is free: not enough, whatever the estimate.
        let a = args(&["-m", "4096"]);
        assert!(plan(&a, NEED, HugepagePolicy::Required, &host(1024, true)).is_err());
    }

    #[test]
    fn too_few_pages_fail_when_required_with_the_fix() {
        let e = plan(&[], NEED, HugepagePolicy::Required, &host(10, true)).unwrap_err();
        assert!(e.contains("83 MiB needed, 20 MiB of hugepages free"), "{e}");
        assert!(e.contains("echo 1056 > /proc/sys/vm/nr_hugepages"), "{e}");
        assert!(!e.contains("mount -t"), "{e}");
    }

    #[test]
    fn unmounted_pages_do_not_count_and_the_fix_mounts() {
        let e = plan(&[], NEED, HugepagePolicy::Required, &host(1024, false)).unwrap_err();
        assert!(e.contains("0 MiB of hugepages free and usable"), "{e}");
        assert!(e.contains("not mounted"), "{e}");
        assert!(e.contains("mount -t hugetlbfs nodev /dev/hugepages"), "{e}");
        // --in-memory needs no mount.
        let a = args(&["--in-memory"]);
        assert!(plan(&a, NEED, HugepagePolicy::Required, &host(1024, false)).unwrap().hugepages);
        // --huge-dir names a directory that is not the mount.
        let a = args(&["--huge-dir", "/mnt/huge1g"]);
        assert!(plan(&a, NEED, HugepagePolicy::Required, &host(1024, true)).is_err());
    }

    #[test]
    fn preferred_falls_back_to_no_huge_sized_and_says_why() {
        let p = plan(&args(&["-l", "0-1"]), NEED, HugepagePolicy::Preferred, &host(0, true));
        let p = p.unwrap();
        assert!(!p.hugepages);
        assert_eq!(p.args, args(&["-l", "0-1", "--no-huge", "-m", "83"]));
        let why = p.fallback.unwrap();
        assert!(why.contains("83 MiB needed, 0 MiB of hugepages free"), "{why}");
        assert!(why.contains("2 MiB: 1024 reserved, 0 free, mounted at /dev/hugepages"), "{why}");
    }

    #[test]
    fn off_and_explicit_no_huge_never_use_hugepages() {
        let p = plan(&[], NEED, HugepagePolicy::Off, &host(1024, true)).unwrap();
        assert_eq!(
            (p.args, p.hugepages, p.fallback),
            (args(&["--no-huge", "-m", "83"]), false, None)
        );
        let a = args(&["--no-huge", "-m", "256"]);
        let p = plan(&a, NEED, HugepagePolicy::Required, &host(1024, true)).unwrap();
        assert_eq!((p.args, p.hugepages, p.reserve_mib), (a, false, 256));
    }

    #[test]
    fn page_sizes_parse() {
        assert_eq!(parse_size_kb("2M"), Some(2048));
        assert_eq!(parse_size_kb("1024M"), Some(1 << 20));
        assert_eq!(parse_size_kb("1G"), Some(1 << 20));
        assert_eq!(parse_size_kb("x"), None);
        assert_eq!(
            (page_name(2048), page_name(1 << 20), page_name(64)),
            ("2 MiB".into(), "1 GiB".into(), "64 KiB".into())
        );
    }

    #[test]
    fn the_host_is_read_from_sys_and_proc() {
        let root = std::env::temp_dir().join(format!("spw-memory-test-{}", std::process::id()));
        let d = root.join("sys/kernel/mm/hugepages/hugepages-2048kB");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("nr_hugepages"), "512\n").unwrap();
        std::fs::write(d.join("free_hugepages"), "500\n").unwrap();
        std::fs::create_dir_all(root.join("proc")).unwrap();
        std::fs::write(root.join("proc/meminfo"), "Hugepagesize:       2048 kB\n").unwrap();
        std::fs::write(
            root.join("proc/mounts"),
            "nodev /dev/hugepages hugetlbfs rw,relatime 0 0\n\
             nodev /mnt/huge\\0401g hugetlbfs rw,pagesize=1G 0 0\n",
        )
        .unwrap();
        let h = Hugepages::read(&root.join("sys"), &root.join("proc"));
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(h.sizes, [PageSize { kb: 2048, nr: 512, free: 500 }]);
        assert_eq!(
            h.mounts,
            [
                HugeMount { dir: "/dev/hugepages".into(), kb: Some(2048) },
                HugeMount { dir: "/mnt/huge 1g".into(), kb: Some(1 << 20) },
            ]
        );
        assert_eq!(h.usable_free(&EalArgs::default()), 1000 * MIB);
    }
}
