//! Eligible backends and failover (SPEC section 3, FO-1..FO-7).
//!
//! A pure function from the configured backends of one service (role, zone, health) and its
//! failover policy to the *original eligible set* A and its kind. Section 4 (`zonal`) then
//! adjusts A per client zone. Removed backends that are still draining are not passed in:
//! they are not configured (FO-2's counts exclude them).

use crate::model::ZoneId;
use crate::policy::FailoverPolicy;

/// One configured backend as sections 3 and 4 see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The backend's slot (what the set holds).
    pub slot: u16,
    /// Its group's zone.
    pub zone: ZoneId,
    /// True when its group is a failover group.
    pub failover: bool,
    /// The control plane's current health verdict (HC-2 overrides included).
    pub healthy: bool,
}

/// The four kinds of eligible set (FO-7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EligibleKind {
    /// Healthy primaries.
    HealthyPrimary,
    /// Healthy failover backends.
    HealthyFailover,
    /// Every primary, none healthy (FO-1 / FO-3 fallback).
    UnhealthyPrimary,
    /// Nothing: new connections are dropped (FO-6).
    Empty,
}

impl EligibleKind {
    /// The name used in JSON output and metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            EligibleKind::HealthyPrimary => "HealthyPrimary",
            EligibleKind::HealthyFailover => "HealthyFailover",
            EligibleKind::UnhealthyPrimary => "UnhealthyPrimary",
            EligibleKind::Empty => "Empty",
        }
    }

    /// The side of a failover flip (FO-9): `Some(false)` primary, `Some(true)` failover,
    /// `None` for `Empty`, which is neither.
    pub fn side(self) -> Option<bool> {
        match self {
            EligibleKind::HealthyPrimary | EligibleKind::UnhealthyPrimary => Some(false),
            EligibleKind::HealthyFailover => Some(true),
            EligibleKind::Empty => None,
        }
    }
}

/// An eligible set: its kind and its members (slots, in candidate order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eligible {
    /// FO-7 kind.
    pub kind: EligibleKind,
    /// Members.
    pub members: Vec<u16>,
}

/// The original eligible set A of section 3.
///
/// `has_failover_groups` is true when the service configures at least one failover group,
/// even an empty one (FO-2 applies then; FO-1 otherwise).
pub fn eligible(
    candidates: &[Candidate],
    has_failover_groups: bool,
    policy: &FailoverPolicy,
) -> Eligible {
    let pick = |f: &dyn Fn(&Candidate) -> bool| -> Vec<u16> {
        candidates.iter().filter(|c| f(c)).map(|c| c.slot).collect()
    };
    let set = |kind, members: Vec<u16>| {
        if members.is_empty() {
            Eligible { kind: EligibleKind::Empty, members }
        } else {
            Eligible { kind, members }
        }
    };
    let any_healthy = candidates.iter().any(|c| c.healthy);

    if !has_failover_groups {
        // FO-1.
        return if any_healthy {
            set(EligibleKind::HealthyPrimary, pick(&|c| c.healthy))
        } else {
            set(EligibleKind::UnhealthyPrimary, pick(&|_| true))
        };
    }
    if !any_healthy {
        // FO-3.
        return if policy.drop_traffic_if_unhealthy {
            set(EligibleKind::Empty, Vec::new())
        } else {
            set(EligibleKind::UnhealthyPrimary, pick(&|c| !c.failover))
        };
    }
    // FO-2: the first non-empty of its five sets.
    let healthy_primaries = pick(&|c| !c.failover && c.healthy);
    let healthy_failovers = pick(&|c| c.failover && c.healthy);
    let primary_count = candidates.iter().filter(|c| !c.failover).count();
    let primaries = || set(EligibleKind::HealthyPrimary, healthy_primaries.clone());
    let failovers = || set(EligibleKind::HealthyFailover, healthy_failovers.clone());
    if healthy_primaries.is_empty() {
        return failovers(); // 1
    }
    if healthy_failovers.is_empty() {
        return primaries(); // 2
    }
    if policy.failover_ratio == 0.0 {
        return primaries(); // 3
    }
    // Division (not ratio * count) so that e.g. 7/10 >= 0.7 holds exactly as written.
    #[allow(clippy::cast_precision_loss)] // counts are at most a few thousand
    let healthy_share = healthy_primaries.len() as f64 / primary_count as f64;
    if healthy_share >= policy.failover_ratio {
        return primaries(); // 4
    }
    failovers() // 5
}
