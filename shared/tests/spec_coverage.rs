//! Every rule id of SPEC sections 1-5 must be named by at least one test of the decision core
//! (in a test function's name, or a comment in a test file). This test lists the ids, checks
//! the list against the spec when the handout is beside the project, and fails naming every
//! id that no test mentions.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The rule ids of SPEC sections 1-5.
const RULES: &[&str] = &[
    "FR-1", "SA-1", "SA-2", "SA-3", "SA-4", "SA-5", "SA-6", "SA-7", "SA-8", "CT-1a", "CT-1b",
    "CT-1c", "CT-1d", "CT-1e", "CT-2", "CT-3", "CT-6", "CT-7", "CT-8", "CT-9", "CT-12", "CT-13",
    "CP-1", "CP-2", "CP-3", "CP-4", "CP-5", "CD-1", "CD-2", "CD-3", "CD-4", "CD-5", "FO-1", "FO-2",
    "FO-3", "FO-6", "FO-7", "FO-9", "ZA-0", "ZA-1", "ZA-2", "ZA-3", "ZA-4", "ZA-5", "ZA-E1",
    "ZA-E2", "ZA-E3", "CH-1", "CH-2", "CH-3", "CH-4",
];

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Rule ids named in SPEC.md sections 1-5 (up to the "## 6." heading).
fn ids_in_spec(spec: &str) -> BTreeSet<String> {
    let body = spec.split("\n## 6.").next().unwrap_or("");
    let mut out = BTreeSet::new();
    let bytes = body.as_bytes();
    for prefix in ["FR-", "SA-", "CT-", "CP-", "CD-", "FO-", "ZA-", "CH-"] {
        let mut from = 0;
        while let Some(i) = body[from..].find(prefix) {
            let start = from + i;
            let mut end = start + prefix.len();
            while end < bytes.len() && bytes[end].is_ascii_alphanumeric() {
                end += 1;
            }
            let before_ok = start == 0 || !bytes[start - 1].is_ascii_alphanumeric();
            let id = &body[start..end];
            if before_ok && id.len() > prefix.len() && id.as_bytes()[prefix.len()] != b'-' {
                out.insert(id.to_string());
            }
            from = end;
        }
    }
    out
}

#[test]
fn rule_list_matches_spec_when_available() {
    let spec = crate_dir().join("../../shared/spec/SPEC.md");
    let Ok(text) = std::fs::read_to_string(&spec) else {
        eprintln!("SPEC.md not found at {}: checking the built-in list only", spec.display());
        return;
    };
    let mut in_spec = ids_in_spec(&text);
    // Section-level names that are not rules of their own: CT-1 is CT-1a..e; ZA-E is the
    // examples' family name.
    in_spec.remove("CT-1");
    let listed: BTreeSet<String> = RULES.iter().map(|s| s.to_string()).collect();
    assert_eq!(in_spec, listed, "update RULES to match SPEC sections 1-5");
}

fn test_sources(dir: &Path, out: &mut String) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            test_sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            // In library files only the test modules count.
            let tests = if path.starts_with(crate_dir().join("src")) {
                text.split_once("#[cfg(test)]").map_or("", |(_, t)| t).to_string()
            } else {
                text
            };
            out.push_str(&tests);
            out.push('\n');
        }
    }
}

/// True when `id` (e.g. `CT-1a`) occurs as `CT-1a` or `ct_1a`, not followed by an
/// alphanumeric character (so `CT-1` is not found inside `CT-12`).
fn mentions(text: &str, id: &str) -> bool {
    let snake = id.to_lowercase().replace('-', "_");
    [id.to_string(), snake].iter().any(|needle| {
        text.match_indices(needle.as_str()).any(|(i, _)| {
            let after = text.as_bytes().get(i + needle.len());
            let before = i.checked_sub(1).map(|j| text.as_bytes()[j]);
            !after.is_some_and(|c| c.is_ascii_alphanumeric())
                && !before.is_some_and(|c| c.is_ascii_alphanumeric())
        })
    })
}

#[test]
fn every_rule_of_sections_1_to_5_has_a_test() {
    let mut text = String::new();
    test_sources(&crate_dir().join("tests"), &mut text);
    test_sources(&crate_dir().join("src"), &mut text);
    // This file lists every id; it must not count as a test of them.
    let me = std::fs::read_to_string(crate_dir().join("tests/spec_coverage.rs")).unwrap();
    let text = text.replace(&me, "");
    let missing: Vec<&str> = RULES.iter().copied().filter(|id| !mentions(&text, id)).collect();
    assert!(missing.is_empty(), "rules with no test naming them: {missing:?}");
}

#[test]
fn mentions_respects_boundaries() {
    assert!(mentions("fn ct_12_x()", "CT-12"));
    assert!(!mentions("fn ct_12_x()", "CT-1"));
    assert!(mentions("// CT-1a: five tuple", "CT-1a"));
    assert!(!mentions("za_e10", "ZA-E1"));
}
