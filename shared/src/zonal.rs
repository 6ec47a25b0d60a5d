//! Zonal affinity (SPEC section 4, ZA-1..ZA-5): the modified eligible set for a client zone.
//!
//! Pure functions over the candidates of one service, the original eligible set A (from
//! `eligible`) and the client's zone. ZA-0 (entries already tracked are never affected) holds
//! because this only runs for new connections; ZA-1 (which clients are compatible) is the
//! caller's client-subnet lookup, which passes `None` for an incompatible client.

use crate::eligible::{Candidate, Eligible, EligibleKind};
use crate::model::ZoneId;
use crate::policy::ZonalAffinity;

/// The final set the consistent hash chooses from, for one client zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZonalChoice {
    /// ZA-2: affinity enabled, client compatible and C non-empty (true even when ZA-3/4/5 then
    /// fall back to C or A).
    pub zonal_match: bool,
    /// The modified eligible set (slots).
    pub members: Vec<u16>,
    /// True when the result is A although a match happened (SPILL_CROSS_ZONE spilled).
    pub spilled: bool,
}

/// Apply section 4 for a client in `client_zone` (`None`: incompatible, ZA-1).
pub fn zonal_adjust(
    candidates: &[Candidate],
    a: &Eligible,
    client_zone: Option<ZoneId>,
    setting: ZonalAffinity,
) -> ZonalChoice {
    let unmatched =
        || ZonalChoice { zonal_match: false, members: a.members.clone(), spilled: false };
    let Some(zone) = client_zone else { return unmatched() };
    // B, the zonal-match test set.
    let b_failover = match a.kind {
        EligibleKind::HealthyPrimary | EligibleKind::UnhealthyPrimary => false,
        EligibleKind::HealthyFailover => true,
        EligibleKind::Empty => return unmatched(),
    };
    if setting == ZonalAffinity::Disabled {
        return unmatched();
    }
    // C: members of B in the client's zone.
    let c: Vec<u16> = candidates
        .iter()
        .filter(|x| x.failover == b_failover && x.zone == zone)
        .map(|x| x.slot)
        .collect();
    if c.is_empty() {
        return unmatched(); // ZA-2: no match.
    }
    let i: Vec<u16> = c.iter().copied().filter(|s| a.members.contains(s)).collect();
    let within = |members: Vec<u16>| ZonalChoice { zonal_match: true, members, spilled: false };
    let spill = || ZonalChoice { zonal_match: true, members: a.members.clone(), spilled: true };
    match setting {
        ZonalAffinity::Disabled => unmatched(),
        // ZA-3.
        ZonalAffinity::StayWithinZone => within(if i.is_empty() { c } else { i }),
        // ZA-4.
        ZonalAffinity::SpillCrossZone { ratio: 0.0 } => {
            if i.is_empty() {
                spill()
            } else {
                within(i)
            }
        }
        // ZA-5.
        ZonalAffinity::SpillCrossZone { ratio } => {
            #[allow(clippy::cast_precision_loss)] // set sizes are small
            let computed = i.len() as f64 / c.len() as f64;
            if computed >= ratio {
                within(i)
            } else {
                spill()
            }
        }
    }
}
