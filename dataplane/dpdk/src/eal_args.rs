//! What a list of EAL arguments asks of the host, read the way EAL reads it (DPDK 22.11's
//! option names, `-x VALUE`, `-xVALUE` and `--long=VALUE` forms), without starting EAL: the
//! preflight (`spillway check`) and the memory plan ([`crate::memory`]) read it.
//!
//! Only the options those need are understood; every other argument is skipped.

use std::collections::BTreeMap;

/// EAL's compile-time limit on lcore ids (`RTE_MAX_LCORE` of Debian's DPDK 22.11 build).
pub const MAX_LCORE: u32 = 128;

/// The parsed `eal_args`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EalArgs {
    /// `--no-huge`: ordinary memory instead of hugepages.
    pub no_huge: bool,
    /// `--in-memory`: no shared files; hugepages need no hugetlbfs mount.
    pub in_memory: bool,
    /// `--legacy-mem`: all memory reserved at start, none added later.
    pub legacy_mem: bool,
    /// `--huge-unlink` in any form (`--huge-unlink=never` included): the caller chose what
    /// happens to hugepage files.
    pub huge_unlink: bool,
    /// `-m MB`.
    pub mem_mb: Option<u64>,
    /// `--socket-mem MB,MB,...`, per NUMA node.
    pub socket_mem: Option<Vec<u64>>,
    /// `--huge-dir DIR`.
    pub huge_dir: Option<String>,
    /// The lcores EAL enables and the CPUs each may run on; `None` when no `-l`, `--lcores`
    /// or `-c` is given (EAL then takes every CPU the process may run on).
    pub lcores: Option<BTreeMap<u32, Vec<u32>>>,
    /// Which option gave `lcores`, for messages (`-l 0-2`).
    pub lcores_arg: Option<String>,
    /// `--main-lcore N`.
    pub main_lcore: Option<u32>,
    /// `-a`/`--allow` PCI addresses (device arguments after a comma dropped).
    pub allow: Vec<String>,
    /// `-b`/`--block` PCI addresses.
    pub block: Vec<String>,
    /// `--no-pci`.
    pub no_pci: bool,
    /// `--vdev` devices.
    pub vdevs: Vec<Vdev>,
    /// Values EAL would refuse (option and value), for a FAIL finding.
    pub bad: Vec<(String, String)>,
}

/// A `--vdev NAME,key=value,...` device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vdev {
    /// The device (and port) name, `net_tap0`.
    pub name: String,
    /// Its `key=value` arguments, in order.
    pub args: Vec<(String, String)>,
}

impl Vdev {
    /// The driver: the name without its trailing instance number (`net_tap0` -> `net_tap`).
    pub fn driver(&self) -> &str {
        self.name.trim_end_matches(|c: char| c.is_ascii_digit())
    }

    /// The value of argument `key`, the last one given.
    pub fn arg(&self, key: &str) -> Option<&str> {
        self.args.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// Options that take a value, by every spelling EAL accepts, with the name used below.
const WITH_VALUE: &[(&str, &str)] = &[
    ("-l", "-l"),
    ("--lcores", "--lcores"),
    ("-c", "-c"),
    ("--main-lcore", "--main-lcore"),
    ("-a", "-a"),
    ("--allow", "-a"),
    ("-b", "-b"),
    ("--block", "-b"),
    ("--vdev", "--vdev"),
    ("-m", "-m"),
    ("--socket-mem", "--socket-mem"),
    ("--huge-dir", "--huge-dir"),
    // Not used, but their values must not be read as options.
    ("-n", ""),
    ("-r", ""),
    ("-d", ""),
    ("-s", ""),
    ("-S", ""),
    ("--file-prefix", ""),
    ("--log-level", ""),
    ("--proc-type", ""),
    ("--iova-mode", ""),
    ("--base-virtaddr", ""),
    ("--socket-limit", ""),
    ("--vfio-intr", ""),
    ("--vfio-vf-token", ""),
    ("--mbuf-pool-ops-name", ""),
    ("--service-corelist", ""),
    ("--service-coremask", ""),
    ("--force-max-simd-bitwidth", ""),
    ("--trace", ""),
    ("--trace-dir", ""),
    ("--trace-bufsz", ""),
    ("--trace-mode", ""),
];

impl EalArgs {
    /// Reads `args` as EAL would.
    pub fn parse(args: &[String]) -> EalArgs {
        let mut out = EalArgs::default();
        let (mut l, mut lcores, mut c) = (None, None, None);
        let mut i = 0;
        while i < args.len() {
            let a = args[i].as_str();
            i += 1;
            match a {
                "--no-huge" => out.no_huge = true,
                "--in-memory" => out.in_memory = true,
                "--legacy-mem" => out.legacy_mem = true,
                "--no-pci" => out.no_pci = true,
                _ if a == "--huge-unlink" || a.starts_with("--huge-unlink=") => {
                    out.huge_unlink = true
                }
                _ => {}
            }
            let Some((name, value)) = split_option(a, args.get(i).map(String::as_str)) else {
                continue;
            };
            if value.separate {
                i += 1;
            }
            let v = value.text;
            match name {
                "-l" => l = Some(v.to_owned()),
                "--lcores" => lcores = Some(v.to_owned()),
                "-c" => c = Some(v.to_owned()),
                "--main-lcore" => match v.parse() {
                    Ok(n) => out.main_lcore = Some(n),
                    Err(_) => out.bad.push((name.into(), v.into())),
                },
                "-a" => out.allow.push(v.split(',').next().unwrap_or("").to_owned()),
                "-b" => out.block.push(v.split(',').next().unwrap_or("").to_owned()),
                "--vdev" => out.vdevs.push(parse_vdev(v)),
                "-m" => match v.parse() {
                    Ok(n) => out.mem_mb = Some(n),
                    Err(_) => out.bad.push((name.into(), v.into())),
                },
                "--socket-mem" => {
                    match v.split(',').map(str::parse).collect::<Result<Vec<u64>, _>>() {
                        Ok(list) => out.socket_mem = Some(list),
                        Err(_) => out.bad.push((name.into(), v.into())),
                    }
                }
                "--huge-dir" => out.huge_dir = Some(v.to_owned()),
                _ => {}
            }
        }
        // EAL's precedence: --lcores, then -l, then -c.
        let parsed = if let Some(v) = lcores {
            Some(("--lcores", parse_lcores_map(&v), v))
        } else if let Some(v) = l {
            Some(("-l", parse_cpu_list(&v).map(identity_map), v))
        } else {
            c.map(|v| ("-c", parse_coremask(&v).map(identity_map), v))
        };
        if let Some((name, map, text)) = parsed {
            match map {
                Some(map) if !map.is_empty() => {
                    out.lcores = Some(map);
                    out.lcores_arg = Some(format!("{name} {text}"));
                }
                _ => out.bad.push((name.into(), text)),
            }
        }
        out
    }

    /// The vdev named `name`, if `--vdev` creates it.
    pub fn vdev(&self, name: &str) -> Option<&Vdev> {
        self.vdevs.iter().find(|v| v.name == name)
    }
}

struct Value<'a> {
    text: &'a str,
    /// The value is the next argument (`-l 0-1`), not part of this one (`-l0-1`).
    separate: bool,
}

/// `(canonical name, value)` when `a` is an option that takes a value.
fn split_option<'a>(a: &'a str, next: Option<&'a str>) -> Option<(&'static str, Value<'a>)> {
    for &(spelling, name) in WITH_VALUE {
        if a == spelling {
            return next.map(|text| (name, Value { text, separate: true }));
        }
        if spelling.starts_with("--") {
            if let Some(text) = a.strip_prefix(spelling).and_then(|r| r.strip_prefix('=')) {
                return Some((name, Value { text, separate: false }));
            }
        } else if let Some(text) = a.strip_prefix(spelling).filter(|t| !t.is_empty()) {
            if !a.starts_with("--") {
                return Some((name, Value { text, separate: false }));
            }
        }
    }
    None
}

fn parse_vdev(v: &str) -> Vdev {
    let mut parts = v.split(',');
    let name = parts.next().unwrap_or("").to_owned();
    let args = parts
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_owned(), v.to_owned()),
            None => (kv.to_owned(), String::new()),
        })
        .collect();
    Vdev { name, args }
}

fn identity_map(ids: Vec<u32>) -> BTreeMap<u32, Vec<u32>> {
    ids.into_iter().map(|i| (i, vec![i])).collect()
}

/// A kernel / EAL CPU list: `0-3,5`, empty for none. `None` when malformed.
pub fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let s = s.trim();
    let mut out = Vec::new();
    if s.is_empty() {
        return Some(out);
    }
    for part in s.split(',') {
        let part = part.trim();
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if a > b || b - a > 4096 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// `-c` hexadecimal core mask (`0x7`, `7`).
fn parse_coremask(s: &str) -> Option<Vec<u32>> {
    let hex = s.trim().trim_start_matches("0x").trim_start_matches("0X");
    if hex.is_empty() || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = Vec::new();
    for (pos, c) in hex.chars().rev().enumerate() {
        let nibble = c.to_digit(16)?;
        for bit in 0..4 {
            if nibble & (1 << bit) != 0 {
                out.push(u32::try_from(pos * 4 + bit).ok()?);
            }
        }
    }
    Some(out)
}

/// `--lcores`: comma-separated `LCORES[@CPUS]` items, each side a number, a range `a-b` or a
/// parenthesised list. `1@(5-7)` runs lcore 1 on CPUs 5-7; `(3-5)@(0,2)` runs lcores 3, 4
/// and 5 on CPUs 0 and 2; `(0,6)` runs lcores 0 and 6 on CPUs 0 and 6; `7-8` runs lcore 7
/// on CPU 7 and lcore 8 on CPU 8.
pub fn parse_lcores_map(s: &str) -> Option<BTreeMap<u32, Vec<u32>>> {
    let mut out = BTreeMap::new();
    for item in split_top_level(s.trim())? {
        let (lcores, cpus) = match item.split_once('@') {
            Some((l, c)) => (l, Some(c)),
            None => (item, None),
        };
        let (ids, grouped) = parse_set(lcores)?;
        let cpus = match cpus {
            Some(c) => Some(parse_set(c)?.0),
            None if grouped => Some(ids.clone()),
            None => None,
        };
        for id in ids {
            out.insert(id, cpus.clone().unwrap_or_else(|| vec![id]));
        }
    }
    Some(out)
}

/// Splits on the commas outside parentheses.
fn split_top_level(s: &str) -> Option<Vec<&str>> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0u32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1)?,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    (depth == 0).then(|| {
        out.push(&s[start..]);
        out
    })
}

/// A number, a range or a parenthesised list; `true` when parenthesised.
fn parse_set(s: &str) -> Option<(Vec<u32>, bool)> {
    let s = s.trim();
    match s.strip_prefix('(').and_then(|r| r.strip_suffix(')')) {
        Some(inner) => Some((parse_cpu_list(inner)?, true)),
        None if !s.contains(',') && !s.is_empty() => Some((parse_cpu_list(s)?, false)),
        None => None,
    }
}

/// `0-2,5` for messages.
pub fn format_list(ids: &[u32]) -> String {
    if ids.is_empty() {
        return "none".to_owned();
    }
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        parts.push(if j == i {
            sorted[i].to_string()
        } else {
            format!("{}-{}", sorted[i], sorted[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    fn map(pairs: &[(u32, &[u32])]) -> BTreeMap<u32, Vec<u32>> {
        pairs.iter().map(|(l, c)| (*l, c.to_vec())).collect()
    }

    #[test]
    fn cpu_lists_and_masks() {
        assert_eq!(parse_cpu_list("0-3,5"), Some(vec![0, 1, 2, 3, 5]));
        assert_eq!(parse_cpu_list(" \n"), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("a"), None);
        assert_eq!(parse_coremask("0x13"), Some(vec![0, 1, 4]));
        assert_eq!(parse_coremask("f0"), Some(vec![4, 5, 6, 7]));
        assert_eq!(parse_coremask("0xg"), None);
        assert_eq!(format_list(&[5, 0, 1, 2, 7, 8]), "0-2,5,7-8");
        assert_eq!(format_list(&[]), "none");
    }

    #[test]
    fn lcores_map_follows_the_eal_documentation() {
        // The example of DPDK's EAL parameter guide.
        let m = parse_lcores_map("1,2@(5-7),(3-5)@(0,2),(0,6),7-8").unwrap();
        assert_eq!(
            m,
            map(&[
                (0, &[0, 6]),
                (1, &[1]),
                (2, &[5, 6, 7]),
                (3, &[0, 2]),
                (4, &[0, 2]),
                (5, &[0, 2]),
                (6, &[0, 6]),
                (7, &[7]),
                (8, &[8]),
            ])
        );
        assert_eq!(
            parse_lcores_map("0@0,1@1,2@0").unwrap(),
            map(&[(0, &[0]), (1, &[1]), (2, &[0])])
        );
        assert_eq!(parse_lcores_map("(0,1"), None);
        assert_eq!(parse_lcores_map("1@"), None);
    }

    #[test]
    fn options_in_every_spelling() {
        let e = EalArgs::parse(&args(&[
            "--no-huge",
            "-m",
            "512",
            "--no-pci",
            "-l0-2",
            "--main-lcore=2",
            "--file-prefix",
            "-l",
            "--vdev",
            "net_tap0,iface=x,mac=02:00:00:00:00:01",
            "--vdev=net_null0",
            "-a",
            "0000:3b:00.0,txq_inline=1",
            "--allow=0000:3b:00.1",
            "--socket-mem",
            "1024,0",
            "--huge-dir=/mnt/huge1G",
        ]));
        assert!(e.no_huge && e.no_pci && !e.in_memory);
        assert_eq!(e.mem_mb, Some(512));
        assert_eq!(e.lcores, Some(map(&[(0, &[0]), (1, &[1]), (2, &[2])])));
        assert_eq!(e.lcores_arg.as_deref(), Some("-l 0-2"));
        assert_eq!(e.main_lcore, Some(2));
        assert_eq!(e.allow, ["0000:3b:00.0", "0000:3b:00.1"]);
        assert_eq!(e.socket_mem, Some(vec![1024, 0]));
        assert_eq!(e.huge_dir.as_deref(), Some("/mnt/huge1G"));
        let tap = e.vdev("net_tap0").unwrap();
        assert_eq!((tap.driver(), tap.arg("iface")), ("net_tap", Some("x")));
        assert_eq!(e.vdev("net_null0").unwrap().driver(), "net_null");
        assert!(e.bad.is_empty(), "{:?}", e.bad);
    }

    #[test]
    fn lcores_take_precedence_and_bad_values_are_kept() {
        let e = EalArgs::parse(&args(&["-c", "0x3", "--lcores", "0@0,1@1,2@0", "-l", "0-5"]));
        assert_eq!(e.lcores_arg.as_deref(), Some("--lcores 0@0,1@1,2@0"));
        assert_eq!(e.lcores.unwrap()[&2], vec![0]);
        let e = EalArgs::parse(&args(&["-l", "3-1", "-m", "lots"]));
        assert_eq!(e.lcores, None);
        assert_eq!(e.bad, [("-m".to_owned(), "lots".to_owned()), ("-l".into(), "3-1".into())]);
        assert_eq!(EalArgs::parse(&args(&["-c", "0x6"])).lcores.unwrap().len(), 2);
    }
}
