//! Keeps `docs/configuration.md`, `configs/example.yaml` and the serde types of
//! `spillway_control::config` in step, without writing the list of fields a second time.
//!
//! Three facts are checked:
//!
//! 1. **Every struct field is in the example.** The field list of each struct comes from serde
//!    itself: every config struct is `#[serde(deny_unknown_fields)]`, and serde's error for an
//!    unknown field lists all the fields the struct accepts ("unknown field `x`, expected one
//!    of `a`, `b`, ..."). So for every mapping of the example we add a key that no struct has,
//!    load the result, and read the accepted fields of the struct at that path from the error.
//!    A mapping whose probe gives any other error is a map keyed by name (`health_checks`),
//!    not a struct. The union of the keys the example sets over all instances of one struct
//!    (all `services[]`, all `health_checks.<name>`) must cover that list. This is sound for
//!    every struct the example reaches; a struct the example never reaches at all would have
//!    its parent's field missing, which the parent's probe reports.
//! 2. **Every field path the example uses is documented**: it appears as the first cell of a
//!    reference table row of the doc.
//! 3. **Every documented field path is used by the example** (no stale doc rows), and the doc's
//!    complete example is `configs/example.yaml` verbatim.
//! 4. **Every enum-like field's row lists exactly the values it accepts**, in order. The values
//!    come from the loader too: for each string value of the example we load the example with
//!    a probe in its place, and a field that refuses it with "`probe` is not one of `a`, `b`"
//!    is enum-like; its row's "allowed" cell must begin with "`a`, `b`".

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;
use spillway_control::config::{yaml, Config, ConfigError};

const PROBE: &str = "spillway_docs_probe";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The YAML `text` as a generic value, read like a configuration file is.
fn value(text: &str) -> Value {
    yaml::from_str(text).unwrap_or_else(|e| panic!("{e}")).0
}

/// One mapping of the example: its concrete path (as errors print it), its normalized path
/// (`[]` for list items, `<name>` for map keys) and the keys it sets.
struct Node {
    concrete: String,
    normalized: String,
    keys: Vec<String>,
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

/// Every mapping of `v`, parents before children.
fn mappings(v: &Value, concrete: &str, normalized: &str, out: &mut Vec<Node>) {
    match v {
        Value::Object(m) => {
            let keys: Vec<String> = m.keys().cloned().collect();
            out.push(Node { concrete: concrete.into(), normalized: normalized.into(), keys });
            for (k, child) in m {
                mappings(child, &join(concrete, k), &join(normalized, k), out);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                mappings(item, &format!("{concrete}[{i}]"), &format!("{normalized}[]"), out);
            }
        }
        _ => {}
    }
}

/// The value at a concrete path, mutably (`a.b[2].c`).
fn at_mut<'a>(v: &'a mut Value, path: &str) -> &'a mut Value {
    if path.is_empty() {
        return v;
    }
    let mut cur = v;
    for part in path.split('.') {
        let (key, indices) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        cur = cur.get_mut(key).unwrap_or_else(|| panic!("no {key} in {path}"));
        for idx in indices.split(['[', ']']).filter(|s| !s.is_empty()) {
            let i: usize = idx.parse().unwrap();
            cur = cur.get_mut(i).unwrap_or_else(|| panic!("no [{i}] in {path}"));
        }
    }
    cur
}

/// The fields the struct at `path` accepts, or `None` when the mapping there is not a struct.
fn struct_fields(example: &Value, path: &str) -> Option<Vec<String>> {
    let mut probed = example.clone();
    let Value::Object(m) = at_mut(&mut probed, path) else { unreachable!() };
    m.insert(PROBE.to_owned(), Value::from(0));
    // JSON is YAML.
    let text = serde_json::to_string_pretty(&probed).unwrap();
    let e = Config::from_yaml(Path::new("probe.yaml"), &text).expect_err("the probe is unknown");
    let ConfigError::Parse { field, message, .. } = &e else { return None };
    if *field != join(path, PROBE) || !message.starts_with(&format!("unknown field `{PROBE}`")) {
        return None;
    }
    let expected = message.split_once(", expected ").map_or("", |(_, rest)| rest);
    Some(expected.split('`').skip(1).step_by(2).map(str::to_owned).collect())
}

/// The values the field at `path` accepts, when it is enum-like (it refuses the probe with
/// the list of the values it accepts).
fn enum_values(example: &Value, path: &str) -> Option<Vec<String>> {
    let mut probed = example.clone();
    *at_mut(&mut probed, path) = Value::from(PROBE);
    let text = serde_json::to_string_pretty(&probed).unwrap();
    let e = Config::from_yaml(Path::new("probe.yaml"), &text).err()?;
    let refused = e.invalid_fields().iter().find(|f| f.field == path)?;
    let names = refused.message.strip_prefix(&format!("`{PROBE}` is not one of "))?;
    Some(names.split('`').skip(1).step_by(2).map(str::to_owned).collect())
}

/// Every string value of `v`: its concrete and normalized paths.
fn strings(v: &Value, concrete: &str, normalized: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                strings(child, &join(concrete, k), &join(normalized, k), out);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                strings(item, &format!("{concrete}[{i}]"), &format!("{normalized}[]"), out);
            }
        }
        Value::String(_) => out.push((concrete.to_owned(), normalized.to_owned())),
        _ => {}
    }
}

struct Example {
    /// Every normalized field path the example sets.
    paths: BTreeSet<String>,
    /// Per normalized struct path: the fields serde accepts and the union of those set.
    structs: BTreeMap<String, (Vec<String>, BTreeSet<String>)>,
    /// Per normalized path of an enum-like field: the values it accepts, in order.
    enums: BTreeMap<String, Vec<String>>,
}

fn example() -> Example {
    let text = read("configs/example.yaml");
    let value = value(&text);
    let mut nodes = Vec::new();
    mappings(&value, "", "", &mut nodes);
    // Which mappings are maps keyed by name: their children's normalized paths use `<name>`.
    let mut maps: BTreeSet<String> = BTreeSet::new();
    let mut structs: BTreeMap<String, (Vec<String>, BTreeSet<String>)> = BTreeMap::new();
    for n in &nodes {
        let normalized = rename(&n.normalized, &maps);
        match struct_fields(&value, &n.concrete) {
            Some(fields) => {
                let entry = structs.entry(normalized).or_insert_with(|| (fields, BTreeSet::new()));
                entry.1.extend(n.keys.iter().cloned());
            }
            None => {
                maps.insert(normalized);
            }
        }
    }
    let mut paths = BTreeSet::new();
    for n in &nodes {
        let parent = rename(&n.normalized, &maps);
        let is_map = maps.contains(&parent);
        for k in &n.keys {
            paths.insert(join(&parent, if is_map { "<name>" } else { k }));
        }
    }
    let mut leaves = Vec::new();
    strings(&value, "", "", &mut leaves);
    let mut enums = BTreeMap::new();
    for (concrete, normalized) in leaves {
        if let Some(values) = enum_values(&value, &concrete) {
            enums.insert(rename(&normalized, &maps), values);
        }
    }
    Example { paths, structs, enums }
}

/// `normalized` with the key under each map of `maps` replaced by `<name>`. Nodes come
/// parents first, so every map above a node is known when the node is renamed.
fn rename(normalized: &str, maps: &BTreeSet<String>) -> String {
    let mut out = String::new();
    for part in normalized.split('.').filter(|p| !p.is_empty()) {
        let (key, rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        let key = if maps.contains(&out) { "<name>" } else { key };
        out = join(&out, &format!("{key}{rest}"));
    }
    out
}

/// The field paths documented: the first cell of each reference table row, in backticks.
fn documented() -> BTreeSet<String> {
    read("docs/configuration.md")
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(path, _)| path.to_owned()))
        .collect()
}

#[test]
fn every_struct_field_is_set_somewhere_in_the_example() {
    let ex = example();
    // The probe found the structs we know are there (guards against a probe that finds none).
    for s in ["", "dataplane.node", "health_checks.<name>", "services[].backend_service.backends[]"]
    {
        assert!(ex.structs.contains_key(s), "{s} not probed as a struct: {:?}", ex.structs.keys());
    }
    assert!(!ex.structs.contains_key("health_checks"), "health_checks is a map, not a struct");
    assert!(ex.structs[""].0.contains(&"dataplane".to_owned()));
    let mut missing = Vec::new();
    for (path, (fields, set)) in &ex.structs {
        for f in fields {
            if !set.contains(f) {
                missing.push(join(path, f));
            }
        }
    }
    assert!(missing.is_empty(), "fields never set in configs/example.yaml: {missing:?}");
}

#[test]
fn every_field_of_the_example_is_documented() {
    let doc = documented();
    let missing: Vec<_> = example().paths.into_iter().filter(|p| !doc.contains(p)).collect();
    assert!(missing.is_empty(), "fields missing from docs/configuration.md: {missing:?}");
}

#[test]
fn every_documented_field_is_in_the_example() {
    let paths = example().paths;
    let stale: Vec<_> = documented().into_iter().filter(|p| !paths.contains(p)).collect();
    assert!(stale.is_empty(), "documented but not in configs/example.yaml: {stale:?}");
}

#[test]
fn every_enum_field_lists_exactly_its_values() {
    let enums = example().enums;
    // The probe found the enum-like fields we know are there, and took no other for one.
    for f in [
        "dataplane.hugepages",
        "dataplane.kernel_interface.driver",
        "health_checks.<name>.type",
        "health_checks.<name>.initial",
        "services[].announce",
        "services[].forwarding_rules[].protocol",
        "services[].encapsulation.type",
        "services[].backend_service.session_affinity",
        "services[].backend_service.connection_tracking_policy.tracking_mode",
        "services[].backend_service.connection_tracking_policy.\
         connection_persistence_on_unhealthy_backends",
        "services[].backend_service.zonal_affinity.spillover",
        "services[].backend_service.advanced.algorithm",
    ] {
        assert!(enums.contains_key(f), "{f} not probed as enum-like: {:?}", enums.keys());
    }
    assert!(!enums.contains_key("services[].name"));
    let doc = read("docs/configuration.md");
    let mut wrong = Vec::new();
    for (path, values) in &enums {
        let row = doc
            .lines()
            .find(|l| l.starts_with(&format!("| `{path}` |")))
            .unwrap_or_else(|| panic!("no row for {path}"));
        // | field | type | default | allowed / checks | meaning |
        let allowed = row.split(" | ").nth(3).unwrap_or("");
        let list: Vec<String> = values.iter().map(|v| format!("`{v}`")).collect();
        let list = list.join(", ");
        let rest = allowed.strip_prefix(&list);
        if !rest.is_some_and(|r| r.is_empty() || r.starts_with(';')) {
            wrong.push(format!("{path}: `{allowed}` should begin with `{list}`"));
        }
    }
    assert!(wrong.is_empty(), "docs/configuration.md lists other values:\n{}", wrong.join("\n"));
}

#[test]
fn the_doc_shows_the_example_verbatim() {
    let doc = read("docs/configuration.md");
    let example = read("configs/example.yaml");
    let block = doc
        .split("```yaml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a ```yaml block in docs/configuration.md");
    assert_eq!(block, example, "the doc's complete example differs from configs/example.yaml");
}

#[test]
fn the_probe_reads_serde_field_lists() {
    let text = "dataplane:\n  ports: [a]\n  node: {}\n";
    let value = value(text);
    let fields = struct_fields(&value, "dataplane.node").unwrap();
    assert_eq!(fields, ["ipv4", "ipv6", "gateway_ipv4", "gateway_ipv6", "mtu"]);
    let maps: BTreeSet<String> = ["health_checks".to_owned()].into();
    assert_eq!(rename("health_checks.web.type", &maps), "health_checks.<name>.type");
    assert_eq!(rename("services[].name", &maps), "services[].name");
}
