//! YAML files read once, into both values and positions: [`from_str`].
//!
//! The text is parsed once by saphyr-parser into a tree of nodes that keep their line and
//! column (`tree.rs`); the target type is deserialised with serde from that tree (`de.rs`, which
//! reads YAML as serde_yaml 0.9 did), and the [`Locations`] of every field path come from the
//! same tree. So an error names the position of the node it is about, whoever finds it:
//!
//! - a syntax error: where the parser stopped;
//! - a serde error (unknown field, wrong type, missing field, `Deserialize` impls that refuse a
//!   value): the node being read, with its field path from `serde_path_to_error`;
//! - a later check (validation, a scenario's checks against the model): the returned
//!   [`Locations`] map the field path to its position.
//!
//! Only the first serde error is known (serde stops there). The one exception is a name that is
//! none of the values of a [`Choice`](super::choice::Choice) (`tracking_mode: PER_FLOW`):
//! [`from_str_with_refusals`], the configuration loader's reader, notes it as a [`Refusal`] and
//! reads on, so that the loader reports it with the file's other problems. Used by the
//! configuration loader and by `spillwayctl simulate` for its scenario files. Why not
//! serde_yaml: see the "Dependencies" section of `docs/configuration.md`.

mod de;
mod tree;

use std::cell::RefCell;
use std::fmt;

use serde::de::DeserializeOwned;

pub use super::locate::{Locations, Position};
use super::Field;

/// Why a YAML text could not be read as the requested type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// Dotted field path where it was found (`services[0].backend_service.backends`); empty
    /// at the top level and for syntax errors.
    pub field: String,
    /// 1-based line and column of the node the error is about (or where a syntax error was
    /// found).
    pub location: Position,
    /// What is wrong, without the position or the path.
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (line, column) = self.location;
        write!(f, "{line}:{column}: {}{}", Field(&self.field), self.message)
    }
}

impl std::error::Error for Error {}

/// A name [`from_str_with_refusals`] refused: none of the values of its field's
/// [`Choice`](super::choice::Choice). Its position is the field's in the [`Locations`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Dotted field path of the value (`services[0].backend_service.session_affinity`).
    pub field: String,
    /// "`X` is not one of `A`, `B`".
    pub message: String,
}

/// Parses `text` (one YAML document) and deserialises a `T` from it, with the position of
/// every field path of the text. A refused name of a choice is an error like any other.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<(T, Locations), Error> {
    read(text, None)
}

/// [`from_str`], but a refused name of a choice does not stop the reading: it is returned
/// among the refusals, in the order read, and the value holds the choice's first value in its
/// place (so a caller must not use a value read with refusals). Errors of any other kind stop
/// the reading as in [`from_str`], and then the refusals read before are dropped.
pub fn from_str_with_refusals<T: DeserializeOwned>(
    text: &str,
) -> Result<(T, Locations, Vec<Refusal>), Error> {
    let refusals = RefCell::new(Vec::new());
    let (value, locations) = read(text, Some(&refusals))?;
    Ok((value, locations, refusals.into_inner()))
}

fn read<T: DeserializeOwned>(
    text: &str,
    refusals: Option<&RefCell<Vec<Refusal>>>,
) -> Result<(T, Locations), Error> {
    let (doc, locations) = tree::parse(text);
    let doc =
        doc.map_err(|e| Error { field: String::new(), location: e.at, message: e.message })?;
    match serde_path_to_error::deserialize(de::De::new(&doc, refusals)) {
        Ok(value) => Ok((value, locations)),
        Err(e) => {
            let field = e.path().to_string();
            let e = e.into_inner();
            Err(Error {
                field: if field == "." { String::new() } else { field },
                location: e.at.unwrap_or(doc.root.at),
                message: e.message,
            })
        }
    }
}

/// The positions of the field paths of `text`, for a caller that has only the text
/// ([`from_str`] returns them with the values). Never fails: on a syntax error the map holds
/// what was read before it.
pub fn locations(text: &str) -> Locations {
    tree::parse(text).1
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;

    use super::*;

    fn read<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
        from_str(text).map(|(v, _)| v)
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct S {
        n: u16,
        #[serde(default)]
        s: Option<String>,
        #[serde(default)]
        f: Option<f64>,
        #[serde(default)]
        list: Vec<u8>,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(untagged)]
    enum Any {
        Int(i64),
        Text(String),
    }

    #[derive(Debug, PartialEq, Deserialize)]
    enum Shape {
        Dot,
        Circle(f64),
        Rect { w: u8, h: u8 },
        Pair(u8, u8),
    }

    #[test]
    fn scalars_read_as_yaml_1_2_core_schema() {
        type Untyped = Vec<serde_json::Value>;
        let v: Untyped =
            read("[~, null, '', true, False, 12, -3, 0x1F, 0o17, 0b101, 1.5, -1e3, 012, '12', a]")
                .unwrap();
        let text = serde_json::to_string(&v).unwrap();
        assert_eq!(text, r#"[null,null,"",true,false,12,-3,31,15,5,1.5,-1000.0,"012","12","a"]"#);
        let f: Vec<f64> = read("[.inf, -.inf, 1, +2.5]").unwrap();
        assert_eq!(&f[..2], [f64::INFINITY, f64::NEG_INFINITY]);
        assert_eq!(&f[2..], [1.0, 2.5]);
        assert!(read::<f64>(".nan").unwrap().is_nan());
        // A string is read as written, whatever it looks like.
        let s: Vec<String> = read("[80, true, ~, 0x10, \"q\"]").unwrap();
        assert_eq!(s, ["80", "true", "~", "0x10", "q"]);
        assert_eq!(read::<Any>("-7").unwrap(), Any::Int(-7));
        assert_eq!(read::<Any>("'7'").unwrap(), Any::Text("7".into()));
    }

    #[test]
    fn null_empty_and_defaults() {
        let s: S = read("n: 1\ns: ~\nf:\nlist:\n").unwrap();
        assert_eq!(s, S { n: 1, s: None, f: None, list: vec![] });
        let s: S = read("n: 1\ns: 'null'\nf: 2\n").unwrap();
        assert_eq!((s.s.as_deref(), s.f), (Some("null"), Some(2.0)));
        // An empty document is an empty mapping.
        let e = read::<S>("").unwrap_err();
        assert_eq!((e.field.as_str(), e.message.as_str()), ("", "missing field `n`"));
    }

    #[test]
    fn typed_reads_are_strict() {
        let e = read::<S>("n: '5'\n").unwrap_err();
        assert_eq!(e.to_string(), "1:4: field `n`: invalid type: string \"5\", expected u16");
        let e = read::<S>("n: 65536\n").unwrap_err();
        assert_eq!(e.message, "invalid value: integer `65536`, expected u16");
        let e = read::<S>("n: -1\n").unwrap_err();
        assert_eq!(e.message, "invalid type: integer `-1`, expected u16");
        let e = read::<S>("n: 1\nlist: {a: 1}\n").unwrap_err();
        assert_eq!(e.to_string(), "2:1: field `list`: invalid type: map, expected a sequence");
        assert_eq!(read::<u16>("!!int \"5\"").unwrap(), 5);
    }

    #[test]
    fn errors_point_at_the_node_and_name_its_path() {
        let text = "n: 1\nlist:\n  - 1\n  - 300\n";
        let e = read::<S>(text).unwrap_err();
        assert_eq!((e.field.as_str(), e.location), ("list[1]", (4, 5)));
        let e = read::<S>("n: 1\nsx: 2\n").unwrap_err();
        assert_eq!((e.field.as_str(), e.location), ("sx", (2, 1)));
        assert!(e.message.starts_with("unknown field `sx`, expected one of `n`, `s`"), "{e}");
        // A missing field: at the mapping's key.
        let e = read::<BTreeMap<String, S>>("a:\n  n: 1\nb:\n  s: x\n").unwrap_err();
        assert_eq!(e.to_string(), "3:1: field `b`: missing field `n`");
        // Found after the node's deserializer returned (an untagged enum): still at the node.
        let e = read::<Vec<Any>>("[1, [2]]").unwrap_err();
        assert_eq!((e.field.as_str(), e.location), ("[1]", (1, 5)));
    }

    #[test]
    fn syntax_errors_have_a_position_and_no_field() {
        let e = read::<S>("n: [1,\n").unwrap_err();
        assert_eq!((e.field.as_str(), e.location.0), ("", 2), "{e}");
        let e = read::<S>("n: 1\n---\nn: 2\n").unwrap_err();
        assert_eq!(e.location.0, 2, "{e}");
        assert!(e.message.contains("second YAML document"), "{e}");
    }

    #[test]
    fn enums_by_name_or_by_tag() {
        let v: Vec<Shape> =
            read("[Dot, !Dot , !Circle 2.5, !Rect {w: 1, h: 2}, !Pair [3, 4]]").unwrap();
        assert_eq!(
            v,
            [
                Shape::Dot,
                Shape::Dot,
                Shape::Circle(2.5),
                Shape::Rect { w: 1, h: 2 },
                Shape::Pair(3, 4)
            ]
        );
        let e = read::<Shape>("Square").unwrap_err();
        assert!(e.message.starts_with("unknown variant `Square`, expected one of"), "{e}");
        let e = read::<Shape>("{Circle: 1}").unwrap_err();
        assert!(e.message.contains("invalid type: map"), "{e}");
    }

    crate::config::choice::choice! {
        pub enum Colour {
            Red => "red",
            Blue => "BLUE",
        }
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Paint {
        colour: Colour,
        #[serde(default)]
        trim: Option<Colour>,
        #[serde(default)]
        coats: Vec<Colour>,
        #[serde(default)]
        n: u8,
    }

    #[test]
    fn a_choice_is_read_as_a_string_is_and_by_its_exact_name() {
        let p: Paint = read("colour: BLUE\ntrim: ~\ncoats: [red, !!str BLUE, !x red]\n").unwrap();
        assert_eq!((p.colour, p.trim), (Colour::Blue, None));
        assert_eq!(p.coats, [Colour::Red, Colour::Blue, Colour::Red]);
        // Refused: another case, a number, null where a value is required.
        for (value, shown) in [("Red", "Red"), ("7", "7"), ("~", "~"), ("''", "")] {
            let e = read::<Paint>(&format!("n: 1\ncolour: {value}\n")).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("2:9: field `colour`: `{shown}` is not one of `red`, `BLUE`")
            );
        }
        // A wrong type is reported as it was when the field was a string.
        let e = read::<Paint>("colour: [red]\n").unwrap_err();
        assert_eq!(e.to_string(), "1:1: field `colour`: invalid type: sequence, expected a string");
    }

    #[test]
    fn refused_names_are_noted_with_their_path_and_the_reading_goes_on() {
        let text =
            "a: {colour: green, coats: [red, blue]}\nb: &p {colour: red, trim: RED}\nc: *p\n";
        let (v, at, refused) = from_str_with_refusals::<BTreeMap<String, Paint>>(text).unwrap();
        let fields: Vec<&str> = refused.iter().map(|r| r.field.as_str()).collect();
        assert_eq!(fields, ["a.colour", "a.coats[1]", "b.trim", "c.trim"]);
        assert_eq!(refused[0].message, "`green` is not one of `red`, `BLUE`");
        assert_eq!(refused[1].message, "`blue` is not one of `red`, `BLUE`");
        // The first value stands in for a refused one.
        assert_eq!(
            (v["a"].colour, v["a"].coats[1], v["c"].trim),
            (Colour::Red, Colour::Red, Some(Colour::Red))
        );
        // Where the loader places them: the value, or the alias that stands for it.
        assert_eq!(at.get("a.colour"), Some((1, 13)));
        assert_eq!(at.get("c.trim"), Some((3, 4)));
        // Any other error still stops the reading, refusals or not.
        let e = from_str_with_refusals::<Paint>("colour: green\nn: 300\n").unwrap_err();
        assert_eq!(e.to_string(), "2:4: field `n`: invalid value: integer `300`, expected u8");
        let e = from_str_with_refusals::<Paint>("colour: green\nn: x\nsize: 1\n").unwrap_err();
        assert_eq!(e.field, "n");
    }

    #[test]
    fn anchors_and_aliases() {
        let m: BTreeMap<String, S> = read("a: &base {n: 3, list: [1]}\nb: *base\n").unwrap();
        assert_eq!(m["a"], m["b"]);
        let text = "x: &k n\n*k : 4\n";
        let (v, at): (BTreeMap<String, String>, _) = from_str(text).unwrap();
        assert_eq!((v["x"].as_str(), v["n"].as_str()), ("n", "4"));
        assert_eq!(at.exact("n"), Some((2, 6)));
        // An error on an aliased value names the alias, where its path is.
        let e = read::<BTreeMap<String, S>>("a: {n: &p x}\nb: {n: *p}\n").unwrap_err();
        assert_eq!((e.field.as_str(), e.location), ("a.n", (1, 8)));
        let e = read::<BTreeMap<String, S>>("a: {n: 1, s: &p x}\nb: {n: 2, f: *p}\n").unwrap_err();
        assert_eq!((e.field.as_str(), e.location), ("b.f", (2, 14)));
        // Aliases that would expand without end are refused.
        let mut bomb = String::from("a: &a [x, x]\n");
        for i in 1..40 {
            bomb.push_str(
                &format!("a{i}: &a{i} [*a{}, *a{}]\n", i - 1, i - 1).replace("*a0", "*a"),
            );
        }
        let e = read::<serde_json::Value>(&bomb).unwrap_err();
        assert!(e.message.contains("aliases expand"), "{e}");
        let e = read::<serde_json::Value>("a: &r [*r]\n").unwrap_err();
        assert!(e.message.contains("its own anchor"), "{e}");
    }

    const POSITIONS: &str = "\
dataplane:
  ports: [net_tap0, net_null0]
  node:
    ipv4: 198.18.0.2/16
health_checks:
  web-http:
    type: HTTP
services:
  - name: web
    forwarding_rules:
      - vip: 198.18.0.10
        ports: [80, \"8000-8080\"]
    backend_service:
      failover_policy: {failover_ratio: 0.5}
      backends:
        - group: a
          endpoints:
            - 198.18.1.1
            - 198.18.1.2
";

    #[test]
    fn scalars_are_located_at_their_value() {
        let l = locations(POSITIONS);
        assert_eq!(l.exact("dataplane.node.ipv4"), Some((4, 11)));
        assert_eq!(l.exact("dataplane.ports[1]"), Some((2, 21)));
        assert_eq!(l.exact("health_checks.web-http.type"), Some((7, 11)));
        assert_eq!(l.exact("services[0].name"), Some((9, 11)));
        assert_eq!(l.exact("services[0].forwarding_rules[0].ports[1]"), Some((12, 21)));
        assert_eq!(
            l.exact("services[0].backend_service.failover_policy.failover_ratio"),
            Some((14, 41))
        );
        assert_eq!(l.exact("services[0].backend_service.backends[0].endpoints[1]"), Some((19, 15)));
    }

    #[test]
    fn blocks_are_located_at_their_key_and_items_at_their_start() {
        let l = locations(POSITIONS);
        assert_eq!(l.exact("dataplane.node"), Some((3, 3)));
        assert_eq!(l.exact("services"), Some((8, 1)));
        assert_eq!(l.exact("services[0]"), Some((9, 5)));
        assert_eq!(l.exact("services[0].backend_service.backends[0]"), Some((16, 11)));
        assert_eq!(l.get("services[0].backend_service.zonal_affinity.spillover"), Some((13, 5)));
        assert_eq!(l.get("topology.region"), None);
    }

    #[test]
    fn broken_text_keeps_what_was_read() {
        let l = locations("dataplane:\n  ports: [a]\n  burst: [\n");
        assert_eq!(l.exact("dataplane.ports[0]"), Some((2, 11)));
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let e = read::<serde_json::Value>(&deep).unwrap_err();
        assert!(e.message.contains("nested deeper than 128"), "{e}");
        let ok = format!("{}{}", "[".repeat(100), "]".repeat(100));
        read::<serde_json::Value>(&ok).unwrap();
        // Through aliases too.
        let mut text = format!("a0: &a0 {}{}\n", "[".repeat(100), "]".repeat(100));
        text.push_str(&format!("a1: {}*a0{}\n", "[".repeat(100), "]".repeat(100)));
        let e = read::<serde_json::Value>(&text).unwrap_err();
        assert!(e.message.contains("nested deeper than 128"), "{e}");
    }
}
