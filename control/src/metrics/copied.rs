//! What a scrape needs from the controller, copied under its lock so that the lock is held
//! only for the copy: the counters are read and the text encoded after it is released.

use crate::controller::{Controller, Override};
use crate::health::TargetStatus;
use crate::instance::{self, Phase};
use spillway_core::addr::Addr;
use spillway_core::model::BackendKey;
use spillway_core::publish::PublishStats;
use spillway_core::snapshot::{BackendStatus, Snapshot};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

/// A configured or draining backend as a scrape sees it.
pub(super) struct SlotInfo {
    pub(super) slot: u16,
    pub(super) key: BackendKey,
    /// Drained by the operator.
    pub(super) drained: bool,
    /// The probes' verdict.
    pub(super) probe: Option<bool>,
    /// The operator's override.
    pub(super) health_override: Option<Override>,
    /// Health verdict changes since the start.
    pub(super) health_changes: u64,
}

/// What a scrape needs from the controller, copied under its lock.
pub(super) struct Copied {
    pub(super) snap: Arc<Snapshot>,
    pub(super) slots: Vec<SlotInfo>,
    pub(super) checks: Vec<TargetStatus>,
    pub(super) published: PublishStats,
    pub(super) reloads: (u64, u64),
    pub(super) fleet: Option<FleetCopy>,
    /// Fleet sync's shared state (counters are atomics: read off the lock).
    pub(super) sync: Option<Arc<crate::sync::SyncShared>>,
}

/// The instance's fleet state, copied under the lock.
#[derive(Debug)]
pub(super) struct FleetCopy {
    pub(super) phase: Phase,
    pub(super) vips: BTreeSet<Addr>,
    pub(super) announced: BTreeSet<Addr>,
    pub(super) route_errors: u64,
    pub(super) bird_up: Option<bool>,
}

pub(super) fn copy(controller: &Mutex<Controller>) -> Copied {
    let c = controller.lock().unwrap_or_else(PoisonError::into_inner);
    let snap = c.snapshot();
    let state = c.state();
    let slots = snap
        .backends
        .iter()
        .enumerate()
        .filter(|(_, b)| b.status != BackendStatus::Free)
        .filter_map(|(slot, _)| {
            let slot = u16::try_from(slot).ok()?;
            let key = state.key_of(slot)?.clone();
            Some(SlotInfo {
                slot,
                drained: state.is_drained(&key),
                probe: c.probe_verdict(&key),
                health_override: c.override_of(&key),
                health_changes: c.health_changes(&key).0,
                key,
            })
        })
        .collect();
    Copied {
        slots,
        checks: c.health_status(),
        published: c.publish_stats(),
        reloads: c.reload_counts(),
        fleet: c.config().announce.as_ref().map(|_| {
            let i = c.instance();
            FleetCopy {
                phase: i.phase(),
                vips: instance::announceable(c.config()),
                announced: i.announced().clone(),
                route_errors: i.route_updates().0,
                bird_up: i.bird().map(|b| b.up),
            }
        }),
        sync: c.sync().cloned(),
        snap,
    }
}
