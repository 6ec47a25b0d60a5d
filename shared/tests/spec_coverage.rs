//! `docs/spec.md` defines every rule id (`CT-2`, `CT-1a`, `ZA-E2`, ...) the project cites.
//! This test reads it from the repository and checks both directions:
//!
//! - every rule id cited in the repository's sources, tests, documents, configurations and
//!   scripts is defined in `docs/spec.md`;
//! - every id defined there is named by at least one test: in a test function's name
//!   (`fn ct_1a_...`, the id in snake case) or in a comment or string of a test.
//!
//! A definition is a line of `docs/spec.md` that starts with `- **ID**` or `| **ID** |` (a list
//! item or table row whose first bold text is the id); any other occurrence is a citation.
//! Tests are every `.rs` and `.py` file under a directory called `tests` (at any depth), and the
//! part after the first `#[cfg(test)]` of every other `.rs` file.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// Rule families (docs/spec.md, "Rule ids").
const PREFIXES: &[&str] = &["FR", "SA", "CT", "CP", "CD", "FO", "FS", "ZA", "CH", "HC", "AL", "NX"];

/// File types searched for citations.
const CITING_EXTENSIONS: &[&str] = &["rs", "py", "md", "yaml", "yml", "sh"];

/// Directory names never searched (build output, VCS data, caches).
const SKIPPED_DIRS: &[&str] = &["target", ".git", "__pycache__", ".pytest_cache"];

/// Paths (relative to the workspace root) never searched; nor is this file, whose examples
/// are not citations.
const SKIPPED_PATHS: &[&str] = &["fuzz/corpus", "docs/spec.md"];

/// The workspace root: the nearest ancestor of this crate with a `[workspace]` manifest.
fn root() -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    crate_dir
        .ancestors()
        .skip(1)
        .find(|dir| {
            std::fs::read_to_string(dir.join("Cargo.toml"))
                .is_ok_and(|toml| toml.lines().any(|l| l.trim() == "[workspace]"))
        })
        .unwrap_or_else(|| crate_dir.parent().expect("the crate has a parent directory"))
        .to_path_buf()
}

/// This test's own source file.
fn this_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/spec_coverage.rs")
}

fn read_spec() -> String {
    let path = root().join("docs/spec.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("cannot read {}: {e}. docs/spec.md defines every rule id", path.display())
    })
}

// ------------------------------------------------------------------------------ parsing

/// The length of the rule id starting at `text[at..]`, if one does: a family prefix, `-`, an
/// optional `E` (worked examples), one or more digits and an optional lowercase letter, not
/// preceded or followed by a letter or digit.
fn id_at(text: &str, at: usize) -> Option<usize> {
    let b = text.as_bytes();
    if at > 0 && b[at - 1].is_ascii_alphanumeric() {
        return None;
    }
    let prefix = PREFIXES.iter().find(|p| text[at..].starts_with(&format!("{p}-")))?;
    let mut end = at + prefix.len() + 1;
    if b.get(end) == Some(&b'E') {
        end += 1;
    }
    let digits = end;
    while b.get(end).is_some_and(u8::is_ascii_digit) {
        end += 1;
    }
    if end == digits {
        return None;
    }
    if b.get(end).is_some_and(u8::is_ascii_lowercase) {
        end += 1;
    }
    if b.get(end).is_some_and(u8::is_ascii_alphanumeric) {
        return None;
    }
    Some(end - at)
}

/// Every rule id in `line`, in order.
fn ids_in(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < line.len() {
        match id_at(line, at) {
            Some(len) => {
                out.push(&line[at..at + len]);
                at += len;
            }
            None => at += line[at..].chars().next().map_or(1, char::len_utf8),
        }
    }
    out
}

/// The id a line of docs/spec.md defines: `- **ID** ...` or `| **ID** | ...`.
fn defined_id(line: &str) -> Option<&str> {
    let rest = line.trim_start();
    let rest = rest.strip_prefix("- **").or_else(|| rest.strip_prefix("| **"))?;
    let bold = &rest[..rest.find("**")?];
    (id_at(bold, 0) == Some(bold.len())).then_some(bold)
}

/// The ids docs/spec.md defines, each with its line number, and the ids defined more than once.
fn definitions(spec: &str) -> (BTreeMap<String, usize>, Vec<String>) {
    let mut defined = BTreeMap::new();
    let mut duplicates = Vec::new();
    for (n, line) in spec.lines().enumerate() {
        if let Some(id) = defined_id(line) {
            if defined.insert(id.to_string(), n + 1).is_some() {
                duplicates.push(id.to_string());
            }
        }
    }
    (defined, duplicates)
}

/// True when `text` names `id` as `CT-1a` or, in snake case, `ct_1a`, with no letter or digit
/// on either side (so `CT-1` is not found inside `CT-12`, nor `ct_1` inside `ct_1a`).
fn mentions(text: &str, id: &str) -> bool {
    let snake = id.to_lowercase().replace('-', "_");
    [id, snake.as_str()].iter().any(|needle| {
        text.match_indices(needle).any(|(i, _)| {
            let after = text.as_bytes().get(i + needle.len());
            let before = i.checked_sub(1).map(|j| text.as_bytes()[j]);
            !after.is_some_and(u8::is_ascii_alphanumeric)
                && !before.is_some_and(|c| c.is_ascii_alphanumeric())
        })
    })
}

/// The part of a file that counts as tests: all of it under a `tests` directory (`.rs` and
/// `.py`), the part after the first `#[cfg(test)]` of other `.rs` files, else nothing.
fn test_part<'a>(rel: &Path, text: &'a str) -> &'a str {
    let ext = rel.extension().and_then(|e| e.to_str()).unwrap_or("");
    let in_tests_dir = rel
        .parent()
        .is_some_and(|dir| dir.components().any(|c| c == Component::Normal("tests".as_ref())));
    match ext {
        "rs" | "py" if in_tests_dir => text,
        "rs" => text.split_once("#[cfg(test)]").map_or("", |(_, tests)| tests),
        _ => "",
    }
}

// ------------------------------------------------------------------------------ the tree

/// Every searched file of the repository: (path relative to the root, contents).
fn repository_files() -> Vec<(PathBuf, String)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
            .map(|e| e.expect("directory entry"))
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            let rel = path.strip_prefix(root).expect("under the root").to_path_buf();
            let name = entry.file_name();
            let kind = entry.file_type().expect("file type"); // symlinks are not followed
            if SKIPPED_PATHS.iter().any(|p| rel == Path::new(p)) || path == this_file() {
                continue;
            }
            if kind.is_dir() {
                if !SKIPPED_DIRS.iter().any(|d| name == *d) {
                    walk(root, &path, out);
                }
            } else if kind.is_file()
                && path
                    .extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| CITING_EXTENSIONS.contains(&e))
            {
                // Skip unreadable or non-UTF-8 files: they cannot cite a rule in text.
                if let Ok(text) = std::fs::read_to_string(&path) {
                    out.push((rel, text));
                }
            }
        }
    }
    let root = root();
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out
}

// ------------------------------------------------------------------------------ checks

#[test]
fn spec_defines_each_id_once() {
    let (defined, duplicates) = definitions(&read_spec());
    assert!(!defined.is_empty(), "docs/spec.md defines no rule id (`- **ID**` or `| **ID** |`)");
    assert!(duplicates.is_empty(), "ids defined more than once in docs/spec.md: {duplicates:?}");
}

#[test]
fn every_cited_id_is_defined_in_the_spec() {
    let spec = read_spec();
    let (defined, _) = definitions(&spec);
    let mut files = repository_files();
    // docs/spec.md's own references (lines that are not definitions) must resolve too.
    let references: Vec<&str> =
        spec.lines().map(|l| if defined_id(l).is_some() { "" } else { l }).collect();
    let references = references.join("\n");
    files.push((PathBuf::from("docs/spec.md"), references));

    // Undefined id -> where it is cited (up to three places).
    let mut undefined: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (rel, text) in &files {
        for (n, line) in text.lines().enumerate() {
            for id in ids_in(line) {
                if !defined.contains_key(id) {
                    let places = undefined.entry(id.to_string()).or_default();
                    if places.len() < 3 {
                        places.push(format!("{}:{}", rel.display(), n + 1));
                    }
                }
            }
        }
    }
    assert!(
        undefined.is_empty(),
        "rule ids cited but not defined in docs/spec.md:\n{}",
        undefined
            .iter()
            .map(|(id, places)| format!("  {id} ({})", places.join(", ")))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn every_defined_id_is_named_by_a_test() {
    let (defined, _) = definitions(&read_spec());
    let files = repository_files();
    let tests: Vec<&str> = files.iter().map(|(rel, text)| test_part(rel, text)).collect();
    let untested: Vec<&String> =
        defined.keys().filter(|id| !tests.iter().any(|t| mentions(t, id))).collect();
    assert!(
        untested.is_empty(),
        "rule ids of docs/spec.md that no test names (name the rule in a test function, or in \
         a comment or string of a test): {untested:?}"
    );
}

// ------------------------------------------------------------------------------ self-tests

#[test]
fn definitions_are_list_items_or_table_rows_starting_with_the_bold_id() {
    let spec = "\
- **CT-2** A SYN starts a new connection (see CT-3).
| **CT-1a** | `PER_CONNECTION` | any | 5-tuple |
  - **ZA-E2** a worked example
- **Decision:** not an id.
- See **CT-7** here: not first.
| id | mode |
| CT-1b | bold is missing |
- **CT-4xy** not an id
- **CT-2** defined again
";
    let (defined, duplicates) = definitions(spec);
    assert_eq!(defined.keys().collect::<Vec<_>>(), ["CT-1a", "CT-2", "ZA-E2"]);
    assert_eq!(defined["CT-1a"], 2);
    assert_eq!(duplicates, ["CT-2"]);
}

#[test]
fn citations_are_whole_ids() {
    let line = "CT-1a..e, FO-2's and ZA-E1 (CD-3, NX-4); CT-13, CT-12x; not SSH-2, IHL-15, \
                XCT-3, CT-1abc, CT-2B, ZA-E, ct_2 or SA alone.";
    assert_eq!(ids_in(line), ["CT-1a", "FO-2", "ZA-E1", "CD-3", "NX-4", "CT-13", "CT-12x"]);
    assert_eq!(ids_in("é AL-7€ HC-1"), ["AL-7", "HC-1"]);
    assert!(ids_in("").is_empty());
}

#[test]
fn mentions_respects_boundaries() {
    assert!(mentions("fn ct_12_x()", "CT-12"));
    assert!(!mentions("fn ct_12_x()", "CT-1"));
    assert!(mentions("// CT-1a: five tuple", "CT-1a"));
    assert!(!mentions("// CT-1a: five tuple", "CT-1"));
    assert!(mentions("fn za_e2_spill()", "ZA-E2"));
    assert!(!mentions("za_e10", "ZA-E1"));
}

#[test]
fn only_test_code_counts_as_a_test() {
    let src = "// CT-2 in library code\n#[cfg(test)]\nmod tests { fn ct_3() {} }";
    assert_eq!(test_part(Path::new("shared/src/x.rs"), src), "\nmod tests { fn ct_3() {} }");
    assert_eq!(test_part(Path::new("daemon/tests/a.rs"), src), src);
    assert_eq!(test_part(Path::new("tests/e2e/test_a.py"), "# FO-9"), "# FO-9");
    assert_eq!(test_part(Path::new("control/src/y.rs"), "// CT-2"), "");
    assert_eq!(test_part(Path::new("docs/tests.md"), "CT-2"), "");
    assert_eq!(test_part(Path::new("tests/README.md"), "CT-2"), "");
}
