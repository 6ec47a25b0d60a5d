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
//! things are; it never judges the file, and it never reads one either: the reader
//! ([`super::yaml`]) fills the map (`yaml::locations` for a caller that has only the text), so
//! the imports go one way, from the reader to this map.

use std::collections::HashMap;

/// 1-based line and column.
pub type Position = (usize, usize);

/// Positions of the fields of one YAML text, by field path.
#[derive(Debug, Clone, Default)]
pub struct Locations {
    by_path: HashMap<String, Position>,
}

impl Locations {
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

    #[test]
    fn missing_fields_fall_back_to_the_nearest_ancestor() {
        let mut l = Locations::default();
        l.insert("services".into(), (8, 1));
        l.insert("services[0].backend_service".into(), (13, 5));
        l.insert("services[0].backend_service.zonal_affinity.spillover".into(), (14, 20));
        assert_eq!(l.get("services[0].backend_service.zonal_affinity.spillover"), Some((14, 20)));
        assert_eq!(
            l.get("services[0].backend_service.zonal_affinity.spillover_ratio"),
            Some((13, 5))
        );
        assert_eq!(l.get("services[1].name"), Some((8, 1)));
        assert_eq!(l.exact("services[1].name"), None);
        assert_eq!(l.get("topology.region"), None);
        assert_eq!(parent("a.b[2].c"), Some("a.b[2]"));
        assert_eq!(parent("a.b[2]"), Some("a.b"));
        assert_eq!(parent("a"), Some(""));
    }
}
