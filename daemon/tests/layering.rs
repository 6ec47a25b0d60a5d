//! The architecture as ARCHITECTURE.md draws it, checked: the data plane links no part of the
//! control plane's runtime, the daemon links nothing of spillwayctl's terminal view, and no
//! crate's modules (nor the admin API's) import each other in a cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

/// Package name -> the names of its dependencies, from Cargo.lock.
fn lock_graph() -> BTreeMap<String, Vec<String>> {
    let text = fs::read_to_string(workspace().join("Cargo.lock")).expect("Cargo.lock");
    let mut graph = BTreeMap::new();
    for block in text.split("[[package]]").skip(1) {
        let name = block
            .lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .and_then(|l| l.strip_suffix('"'))
            .expect("a package name")
            .to_owned();
        let deps = block
            .split_once("dependencies = [")
            .map(|(_, rest)| rest.split(']').next().unwrap_or(""))
            .unwrap_or("")
            .split(',')
            .filter_map(|d| d.trim().trim_matches('"').split(' ').next().map(str::to_owned))
            .filter(|d| !d.is_empty())
            .collect();
        graph.insert(name, deps);
    }
    graph
}

fn closure(graph: &BTreeMap<String, Vec<String>>, root: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![root.to_owned()];
    while let Some(p) = todo.pop() {
        if seen.insert(p.clone()) {
            todo.extend(graph.get(&p).into_iter().flatten().cloned());
        }
    }
    seen
}

#[test]
fn the_data_plane_links_nothing_of_the_control_planes_runtime() {
    let graph = lock_graph();
    for krate in ["spillway-dataplane", "spillway-dpdk", "spillway-gen"] {
        let deps = closure(&graph, krate);
        assert!(deps.len() > 3, "{krate} is in Cargo.lock with its dependencies");
        for forbidden in ["spillway-control", "tokio", "axum", "hyper", "prometheus-client"] {
            assert!(!deps.contains(forbidden), "{krate} depends on {forbidden}");
        }
    }
    // The check itself sees a dependency that is there.
    assert!(closure(&graph, "spillway-control").contains("tokio"));
}

#[test]
fn the_daemon_links_nothing_of_spillwayctls_terminal_view() {
    let graph = lock_graph();
    for krate in ["spillway", "spillway-control", "spillway-api"] {
        let deps = closure(&graph, krate);
        assert!(deps.len() > 3, "{krate} is in Cargo.lock with its dependencies");
        for forbidden in ["spillway-ctl", "ratatui", "crossterm"] {
            assert!(!deps.contains(forbidden), "{krate} depends on {forbidden}");
        }
    }
    // The check itself sees a dependency that is there.
    let ctl = closure(&graph, "spillway-ctl");
    assert!(ctl.contains("ratatui") && ctl.contains("crossterm"));
}

/// The modules of one crate (top-level names under `src/`) and which others they use.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    submodule_graph(src, "crate")
}

/// The submodules of the module whose directory is `dir` and whose path is `path` (`crate`,
/// `crate::api`), and which others they use: by `path::name`, or by `super::name` in the files
/// directly in `dir` (`super` is the module itself there); `use super::{a, b}` names both.
fn submodule_graph(dir: &Path, path: &str) -> BTreeMap<String, BTreeSet<String>> {
    let prefix = format!("{path}::");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = vec![dir.to_path_buf()];
    while let Some(p) = files.pop() {
        if p.is_dir() {
            files.extend(fs::read_dir(&p).expect("read_dir").map(|e| e.expect("entry").path()));
            continue;
        }
        if p.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let rel = p.strip_prefix(dir).expect("under dir");
        let first = rel.components().next().expect("a file").as_os_str().to_string_lossy();
        let module = first.trim_end_matches(".rs").to_owned();
        if matches!(module.as_str(), "lib" | "main" | "bin" | "mod") {
            continue;
        }
        let text = fs::read_to_string(&p).expect("source");
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        let uses = graph.entry(module.clone()).or_default();
        // In a file directly in `dir`, `super::` is the module of `dir` too.
        let top_level = rel.components().count() == 1;
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            let mut rest = line;
            loop {
                let at = rest.find(prefix.as_str()).map(|i| (i, prefix.len()));
                let at = at.or(rest.find("super::").filter(|_| top_level).map(|i| (i, 7)));
                let Some((i, n)) = at else { break };
                rest = &rest[i + n..];
                let names = match rest.strip_prefix('{') {
                    // The first name of each item of the group.
                    Some(group) => group.split('}').next().unwrap_or("").split(',').collect(),
                    None => vec![rest],
                };
                for item in names {
                    let name: String = item
                        .trim_start()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if name != module && !name.is_empty() {
                        uses.insert(name);
                    }
                }
            }
        }
    }
    graph
}

/// Every directory under `dir` that is a module, with its path (`crate::sync`,
/// `crate::config::yaml`).
fn module_dirs(root: &Path, dir: &Path, path: &str) -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).expect("read_dir") {
        let p = entry.expect("entry").path();
        if !p.is_dir() {
            continue;
        }
        let name = p.file_name().expect("a name").to_string_lossy().into_owned();
        if name == "bin" || name == "tests" && dir == root {
            continue;
        }
        let sub = format!("{path}::{name}");
        found.extend(module_dirs(root, &p, &sub));
        found.push((p, sub));
    }
    found
}

fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        n: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            return Some(path[i..].to_vec());
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_owned());
        for d in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(g, d, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|n| visit(graph, n, &mut Vec::new(), &mut done))
}

#[test]
fn no_crate_has_an_import_cycle_between_its_modules() {
    for src in [
        "shared/src",
        "api/src",
        "control/src",
        "ctl/src",
        "dataplane/src",
        "dataplane/dpdk/src",
        "daemon/src",
        "gen/src",
    ] {
        let graph = module_graph(&workspace().join(src));
        assert_eq!(find_cycle(&graph), None, "{src}: modules that import each other in a cycle");
    }
    assert!(module_graph(&workspace().join("dataplane/dpdk/src"))["lcore"].contains("eal"));
    // Within every module that is a directory (api/, sync/, config/, conntrack/...), its
    // submodules do not import each other in a cycle either.
    let mut checked = Vec::new();
    for src in [
        "shared/src",
        "api/src",
        "control/src",
        "ctl/src",
        "dataplane/src",
        "daemon/src",
        "gen/src",
    ] {
        let root = workspace().join(src);
        for (dir, path) in module_dirs(&root, &root, "crate") {
            let graph = submodule_graph(&dir, &path);
            assert_eq!(find_cycle(&graph), None, "{path} ({src}): submodules in a cycle");
            checked.push(path);
        }
    }
    assert!(
        checked.iter().any(|p| p == "crate::sync") && checked.iter().any(|p| p == "crate::api")
    );
    // The admin API's handlers, routes and server share their state through the api module
    // itself, not through one another.
    let api = submodule_graph(&workspace().join("control/src/api"), "crate::api");
    assert!(api["routes"].contains("handlers") && api["server"].contains("routes"));
    // The detector finds a cycle that is there.
    let g: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_owned(), BTreeSet::from(["b".to_owned()])),
        ("b".to_owned(), BTreeSet::from(["a".to_owned()])),
    ]
    .into();
    assert_eq!(find_cycle(&g), Some(vec!["a".to_owned(), "b".to_owned()]));
}
