//! Longest-prefix match over [`Prefix`] keys: one hash map per prefix length, searched from
//! the longest length down. Used for client subnets (source -> zone, ZA-1) and for next-hop
//! forwarding rules (destination prefix -> rules, SA-7). Built by the control plane, read-only
//! afterwards; a lookup hashes at most once per distinct prefix length present.

use crate::addr::{mask, Addr, Prefix};
use hashbrown::HashMap;

/// A longest-prefix-match table from prefixes to values.
#[derive(Clone, Debug)]
pub struct Lpm<T> {
    /// Per family (index 0 = IPv4, 1 = IPv6): (length, map of masked address -> value),
    /// longest length first.
    levels: [Vec<(u8, HashMap<Addr, T>)>; 2],
}

impl<T> Default for Lpm<T> {
    fn default() -> Self {
        Lpm { levels: [Vec::new(), Vec::new()] }
    }
}

fn family(a: &Addr) -> usize {
    usize::from(!a.is_v4())
}

impl<T> Lpm<T> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Insert or replace the value for `prefix`; returns the previous value.
    pub fn insert(&mut self, prefix: Prefix, value: T) -> Option<T> {
        let levels = &mut self.levels[family(&prefix.addr())];
        let pos = match levels.iter().position(|(len, _)| *len <= prefix.len()) {
            Some(i) if levels[i].0 == prefix.len() => i,
            Some(i) => {
                levels.insert(i, (prefix.len(), HashMap::new()));
                i
            }
            None => {
                levels.push((prefix.len(), HashMap::new()));
                levels.len() - 1
            }
        };
        levels[pos].1.insert(prefix.addr(), value)
    }

    /// The value of the most specific prefix containing `a`.
    pub fn lookup(&self, a: Addr) -> Option<&T> {
        self.matches(a).next().map(|(_, v)| v)
    }

    /// Every prefix containing `a` with its value, most specific first.
    pub fn matches(&self, a: Addr) -> impl Iterator<Item = (Prefix, &T)> + '_ {
        self.levels[family(&a)].iter().filter_map(move |(len, map)| {
            let key = mask(a, *len);
            map.get(&key).map(|v| (Prefix::new(key, *len).unwrap_or(Prefix::host(key)), v))
        })
    }

    /// The value stored for exactly `prefix`.
    pub fn get(&self, prefix: &Prefix) -> Option<&T> {
        self.levels[family(&prefix.addr())]
            .iter()
            .find(|(len, _)| *len == prefix.len())
            .and_then(|(_, m)| m.get(&prefix.addr()))
    }

    /// Number of prefixes stored.
    pub fn len(&self) -> usize {
        self.levels.iter().flatten().map(|(_, m)| m.len()).sum()
    }

    /// True when no prefix is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Prefix {
        s.parse().unwrap()
    }
    fn a(s: &str) -> Addr {
        s.parse().unwrap()
    }

    #[test]
    fn longest_prefix_wins_and_families_stay_apart() {
        let mut t = Lpm::new();
        t.insert(p("198.18.0.0/15"), "wide");
        t.insert(p("198.18.10.0/24"), "zone-a");
        t.insert(p("198.18.10.128/25"), "vpn");
        t.insert(p("fd00::/8"), "v6");
        assert_eq!(t.lookup(a("198.18.10.200")), Some(&"vpn"));
        assert_eq!(t.lookup(a("198.18.10.5")), Some(&"zone-a"));
        assert_eq!(t.lookup(a("198.19.0.1")), Some(&"wide"));
        assert_eq!(t.lookup(a("10.0.0.1")), None);
        assert_eq!(t.lookup(a("fd00::1")), Some(&"v6"));
        assert_eq!(t.lookup(a("fe80::1")), None);
        let all: Vec<_> = t.matches(a("198.18.10.200")).map(|(_, v)| *v).collect();
        assert_eq!(all, vec!["vpn", "zone-a", "wide"]);
        assert_eq!(t.len(), 4);
        assert_eq!(t.get(&p("198.18.10.0/24")), Some(&"zone-a"));
    }
}
