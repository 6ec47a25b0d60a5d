//! Where each field of a configuration file is: a map from field path to line and column.
//!
//! `serde_yaml` forgets positions once a file is deserialized, yet a validation error must name
//! the line of the offending value (NX-3). This module parses the same text a second time with
//! a YAML event parser that reports spans ([`saphyr_parser`]) and records, for every node, the
//! path serde would give it (`services[0].backend_service.failover_policy.failover_ratio`,
//! `health_checks.web.type`, `dataplane.ports[1]`):
//!
//! - a scalar value (or an alias): the position of the value itself;
//! - a mapping or sequence under a key: the position of the key (`backend_service:`), which is
//!   where a reader looks for a block;
//! - an item of a sequence: the position where the item starts (`- name: web` -> `name`).
//!
//! It is best effort and never fails: only the first document is read, and on a syntax error
//! (which serde will have reported already) the map holds what was read before it. Lookups of a
//! path that is not in the file (a defaulted field) fall back to the nearest ancestor that is.
//!
//! It must never judge the file: it only says where things are.

use std::collections::HashMap;

use saphyr_parser::{Event, Marker, Parser};

/// 1-based line and column.
pub type Position = (usize, usize);

/// Positions of the fields of one YAML text, by field path.
#[derive(Debug, Clone, Default)]
pub struct Locations {
    by_path: HashMap<String, Position>,
}

enum Frame {
    /// A mapping at `path`; `key` is the key read and awaiting its value.
    Map { path: String, key: Option<(String, Position)> },
    /// A sequence at `path`; `next` is the index of the next item.
    Seq { path: String, next: usize },
    /// A node we do not track (a complex mapping key); events inside it are skipped.
    Skip { depth: usize },
}

fn pos(m: Marker) -> Position {
    (m.line(), m.col() + 1)
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

impl Locations {
    /// Reads `text`. Never fails; see the module doc.
    pub fn parse(text: &str) -> Locations {
        let mut out = Locations::default();
        let mut stack: Vec<Frame> = Vec::new();
        let mut started = false;
        for item in Parser::new_from_str(text) {
            let Ok((event, span)) = item else { break };
            let here = pos(span.start);
            if let Some(Frame::Skip { depth }) = stack.last_mut() {
                match event {
                    Event::MappingStart(..) | Event::SequenceStart(..) => *depth += 1,
                    Event::MappingEnd | Event::SequenceEnd => {
                        if *depth == 0 {
                            stack.pop();
                            out.value_done(&mut stack);
                        } else {
                            *depth -= 1;
                        }
                    }
                    _ => {}
                }
                continue;
            }
            match event {
                Event::DocumentStart(_) => {
                    if started {
                        break;
                    }
                    started = true;
                }
                Event::DocumentEnd | Event::StreamEnd => {
                    if started {
                        break;
                    }
                }
                Event::Scalar(value, ..) => {
                    if let Some(Frame::Map { key: key @ None, .. }) = stack.last_mut() {
                        *key = Some((value.into_owned(), here));
                    } else if let Some((path, _)) = out.child(&mut stack, here) {
                        out.by_path.insert(path, here);
                        out.value_done(&mut stack);
                    }
                }
                Event::Alias(_) => {
                    if let Some(Frame::Map { key: key @ None, .. }) = stack.last_mut() {
                        *key = Some((String::from("*"), here));
                    } else if let Some((path, _)) = out.child(&mut stack, here) {
                        out.by_path.insert(path, here);
                        out.value_done(&mut stack);
                    }
                }
                Event::MappingStart(..) | Event::SequenceStart(..) => {
                    let is_map = matches!(event, Event::MappingStart(..));
                    if let Some(Frame::Map { key: None, .. }) = stack.last() {
                        // A mapping or sequence used as a key: not something serde names.
                        stack.push(Frame::Skip { depth: 0 });
                        continue;
                    }
                    let path = if stack.is_empty() {
                        String::new()
                    } else {
                        match out.child(&mut stack, here) {
                            Some((path, at)) => {
                                out.by_path.insert(path.clone(), at);
                                path
                            }
                            None => continue,
                        }
                    };
                    stack.push(if is_map {
                        Frame::Map { path, key: None }
                    } else {
                        Frame::Seq { path, next: 0 }
                    });
                }
                Event::MappingEnd | Event::SequenceEnd => {
                    stack.pop();
                    out.value_done(&mut stack);
                }
                Event::Nothing | Event::StreamStart => {}
            }
        }
        out
    }

    /// The path of the value about to be read under the top frame and where to report it:
    /// its key's position inside a mapping, `here` inside a sequence.
    fn child(&self, stack: &mut [Frame], here: Position) -> Option<(String, Position)> {
        match stack.last_mut()? {
            Frame::Map { path, key } => {
                let (k, at) = key.as_ref()?;
                Some((join(path, k), *at))
            }
            Frame::Seq { path, next } => {
                let p = format!("{path}[{next}]");
                *next += 1;
                Some((p, here))
            }
            Frame::Skip { .. } => None,
        }
    }

    /// A value under the top frame is complete: a mapping now waits for its next key. The
    /// position of a scalar value (rather than its key) was recorded by the caller.
    fn value_done(&mut self, stack: &mut [Frame]) {
        if let Some(Frame::Map { key, .. }) = stack.last_mut() {
            *key = None;
        }
    }

    /// The position recorded for exactly `path`.
    pub fn exact(&self, path: &str) -> Option<Position> {
        self.by_path.get(path).copied()
    }

    /// The position of `path`, or of its nearest ancestor present in the file (for a field
    /// left at its default); `None` only when nothing on the way is in the file.
    pub fn get(&self, path: &str) -> Option<Position> {
        let mut p = path;
        loop {
            if let Some(at) = self.exact(p) {
                return Some(at);
            }
            p = parent(p)?;
        }
    }
}

/// `a.b[2].c` -> `a.b[2]` -> `a.b` -> `a` -> none.
fn parent(path: &str) -> Option<&str> {
    if path.is_empty() {
        return None;
    }
    let cut = match (path.rfind('.'), path.rfind('[')) {
        (Some(d), Some(b)) => d.max(b),
        (Some(d), None) => d,
        (None, Some(b)) => b,
        (None, None) => 0,
    };
    Some(&path[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
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
    fn scalars_point_at_their_value() {
        let l = Locations::parse(TEXT);
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
    fn blocks_point_at_their_key_and_items_at_their_start() {
        let l = Locations::parse(TEXT);
        assert_eq!(l.exact("dataplane.node"), Some((3, 3)));
        assert_eq!(l.exact("services"), Some((8, 1)));
        assert_eq!(l.exact("services[0]"), Some((9, 5)));
        assert_eq!(l.exact("services[0].backend_service.backends[0]"), Some((16, 11)));
    }

    #[test]
    fn missing_fields_fall_back_to_the_nearest_ancestor() {
        let l = Locations::parse(TEXT);
        assert_eq!(l.get("services[0].backend_service.zonal_affinity.spillover"), Some((13, 5)));
        assert_eq!(l.get("topology.region"), None);
        assert_eq!(parent("a.b[2].c"), Some("a.b[2]"));
        assert_eq!(parent("a.b[2]"), Some("a.b"));
        assert_eq!(parent("a"), Some(""));
    }

    #[test]
    fn broken_text_keeps_what_was_read() {
        let l = Locations::parse("dataplane:\n  ports: [a]\n  burst: [\n");
        assert_eq!(l.exact("dataplane.ports[0]"), Some((2, 11)));
    }
}
