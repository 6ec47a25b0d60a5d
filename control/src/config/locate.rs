//! Where each field of a YAML text is: a map from field path to line and column.
//!
//! A validation error must name the line of the offending value (NX-3), but the checks run on
//! deserialised values, which have no positions. So the one parse of [`super::yaml`] also
//! records, for every node, the path serde gives it (`services[0].backend_service.
//! failover_policy.failover_ratio`, `health_checks.web.type`, `dataplane.ports[1]`) and where
//! it is:
//!
//! - a scalar value (or an alias): the position of the value itself;
//! - a mapping or sequence under a key: the position of the key (`backend_service:`), which is
//!   where a reader looks for a block;
//! - an item of a sequence: the position where the item starts (`- name: web` -> `name`).
//!
//! Keys that are not scalars name no path. Lookups of a path that is not in the file (a
//! defaulted field) fall back to the nearest ancestor that is. This module only says where
//! things are; it never judges the file.

use std::collections::HashMap;

/// 1-based line and column.
pub type Position = (usize, usize);

/// Positions of the fields of one YAML text, by field path.
#[derive(Debug, Clone, Default)]
pub struct Locations {
    by_path: HashMap<String, Position>,
}

impl Locations {
    /// The positions of the field paths of `text`, for a caller that has only the text
    /// ([`super::yaml::from_str`] returns them with the values). Never fails: on a syntax
    /// error the map holds what was read before it.
    pub fn parse(text: &str) -> Locations {
        super::yaml::locations(text)
    }

    pub(super) fn insert(&mut self, path: String, at: Position) {
        self.by_path.insert(path, at);
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
