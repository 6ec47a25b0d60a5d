//! The loop that keeps an instance's announcement in step ([`crate::fleet`] decides): every
//! [`PERIOD`] it evaluates readiness and the wanted VIPs, updates the route table
//! ([`crate::netlink::RouteTable`]) when they change (and every [`REAPPLY`] anyway, so a route
//! someone deleted comes back), retries after an error, and checks that BIRD answers on its
//! control socket when `announce.bird_socket` is set. An error never stops forwarding: it is
//! logged, counted and shown in the status until an update works.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use spillway_core::addr::Addr;
use spillway_core::counters::Reason;

use crate::controller::Controller;
use crate::instance::{wanted, Phase};
use crate::netlink::RouteTable;
use crate::view::DataplaneView;
use spillway_api::types::BirdStatus;

/// How often the loop looks at the instance.
pub const PERIOD: Duration = Duration::from_millis(100);
/// How often the table is re-read and repaired even when nothing changed.
pub const REAPPLY: Duration = Duration::from_secs(10);
/// How long after a failed update the next try comes.
pub const RETRY: Duration = Duration::from_secs(2);
/// How often BIRD's control socket is checked.
pub const BIRD_PERIOD: Duration = Duration::from_secs(2);

/// Locks the controller (a poisoned lock only happens in tests: keep going, as the API does).
fn lock(c: &Mutex<Controller>) -> MutexGuard<'_, Controller> {
    c.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The sum of every worker's forwarded packets.
pub fn forwarded(view: &dyn DataplaneView) -> u64 {
    (0..view.workers())
        .map(|w| {
            let c = view.counters(w);
            Reason::all()
                .filter(|r| matches!(r, Reason::Forward(_)))
                .map(|r| c.reason(r).get())
                .sum::<u64>()
        })
        .sum()
}

/// What readiness waits for, or `None` when the instance is ready: every worker's heartbeat
/// moved since `heartbeats` (read when the loop started), the data port's link is up, and every
/// health-checked backend has a settled verdict: its check's threshold of results in a row
/// (`healthy_threshold` successes for a healthy one, `unhealthy_threshold` failures for an
/// unhealthy one), applied to the snapshot. Announcing on a first result alone would let an
/// instance attract flows while its tables still differ from its peers' (flows moved to it by
/// ECMP would change backend). A backend that flaps never settles: after `waited` reaches the
/// longest check's thresholds x interval (plus a timeout), readiness stops waiting for it.
pub fn readiness(
    view: &dyn DataplaneView,
    heartbeats: &[u64],
    link_up: bool,
    controller: &Controller,
    waited: Duration,
) -> Option<String> {
    let stalled: Vec<String> = (0..view.workers())
        .filter(|&w| view.counters(w).heartbeat.get() <= heartbeats.get(w).copied().unwrap_or(0))
        .map(|w| w.to_string())
        .collect();
    if !stalled.is_empty() {
        return Some(format!("worker(s) {} to poll", stalled.join(", ")));
    }
    if !link_up {
        return Some("the data port's link to come up".into());
    }
    let specs = controller.config().check_specs();
    let patience = specs
        .values()
        .map(|s| {
            s.interval * (s.healthy_threshold.max(s.unhealthy_threshold).max(1) + 1) + s.timeout
        })
        .max()
        .unwrap_or_default();
    let mut first = BTreeSet::new();
    let mut unsettled = BTreeSet::new();
    for t in controller.health_status() {
        let addr = t.key.endpoint.addr.to_string();
        let Some(spec) = specs.get(&t.check) else { continue };
        if t.last_result.is_none() {
            first.insert(addr);
            continue;
        }
        let by_threshold = if t.healthy {
            t.consecutive_ok >= spec.healthy_threshold.max(1)
        } else {
            t.consecutive_fail >= spec.unhealthy_threshold.max(1)
        };
        let applied = controller.probe_verdict(&t.key).unwrap_or(spec.initial_healthy) == t.healthy;
        if !(by_threshold && applied) {
            unsettled.insert(addr);
        }
    }
    let list = |s: BTreeSet<String>| s.into_iter().collect::<Vec<_>>().join(", ");
    if !first.is_empty() {
        return Some(format!("a first health result from {}", list(first)));
    }
    if !unsettled.is_empty() && waited < patience {
        return Some(format!(
            "settled health verdicts (each check's thresholds in a row) from {}",
            list(unsettled)
        ));
    }
    // Every configured backend's next hop, whatever its health, resolved (asked for now if it
    // is not), so that the first packets after the announcement wait for no MAC; a next hop
    // that stays silent is waited for NEXT_HOP_PATIENCE at most.
    let backends: Vec<Addr> = {
        let mut b: Vec<Addr> =
            controller.state().model().backends().map(|(k, _, _)| k.endpoint.addr).collect();
        b.sort_unstable();
        b.dedup();
        b
    };
    let unresolved = view.resolve_ahead(&backends);
    if !unresolved.is_empty() && waited < NEXT_HOP_PATIENCE {
        let hops = unresolved.iter().map(ToString::to_string).collect::<BTreeSet<_>>();
        return Some(format!("the MACs of next hop(s) {}", list(hops)));
    }
    None
}

/// How long readiness waits, since the start, for the configured backends' next hops to be
/// resolved: a next hop that does not answer ARP/ND by then (a host that is down) is not
/// waited for (the resolver keeps asking, and logs it).
pub const NEXT_HOP_PATIENCE: Duration = Duration::from_secs(5);

/// Asks BIRD's control socket for its greeting (`0001 BIRD 2.0.12 ready.`).
pub async fn probe_bird(path: &str) -> BirdStatus {
    use tokio::io::AsyncBufReadExt;
    let attempt = async {
        let stream = tokio::net::UnixStream::connect(path).await?;
        let mut line = String::new();
        tokio::io::BufReader::new(stream).read_line(&mut line).await?;
        Ok::<_, std::io::Error>(line)
    };
    match tokio::time::timeout(Duration::from_secs(1), attempt).await {
        Ok(Ok(line)) if line.starts_with("0001 ") => {
            BirdStatus { up: true, detail: line[5..].trim().to_owned() }
        }
        Ok(Ok(line)) => BirdStatus { up: false, detail: format!("unexpected greeting {line:?}") },
        Ok(Err(e)) => BirdStatus { up: false, detail: format!("{path}: {e}") },
        Err(_) => BirdStatus { up: false, detail: format!("{path}: no greeting within 1 s") },
    }
}

/// What the loop needs besides the controller and the view.
pub struct FleetOptions {
    /// The route table the VIPs go to (`None`: decide and report only, e.g. in tests).
    pub table: Option<RouteTable>,
    /// Whether the data port's link is up.
    pub link_up: Box<dyn Fn() -> bool + Send>,
    /// With fleet sync: whether the bulk sync at start is over (FS-5); the instance is not
    /// ready before. `None` without fleet sync.
    pub sync_done: Option<Box<dyn Fn() -> bool + Send>>,
}

impl std::fmt::Debug for FleetOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetOptions").field("table", &self.table).finish_non_exhaustive()
    }
}

/// Runs the instance's fleet loop on the current runtime until the runtime stops.
pub fn spawn(
    controller: Arc<Mutex<Controller>>,
    view: Arc<dyn DataplaneView>,
    options: FleetOptions,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(controller, view, options))
}

async fn run(
    controller: Arc<Mutex<Controller>>,
    view: Arc<dyn DataplaneView>,
    options: FleetOptions,
) {
    let heartbeats: Vec<u64> =
        (0..view.workers()).map(|w| view.counters(w).heartbeat.get()).collect();
    let mut applied: Option<BTreeSet<IpAddr>> = None;
    let mut failing = false;
    let mut next_update = Instant::now();
    let mut next_bird = Instant::now();
    let bird_socket = {
        let c = lock(&controller);
        c.config().announce.as_ref().and_then(|a| a.bird_socket.clone())
    };
    let started = Instant::now();
    let mut tick = tokio::time::interval(PERIOD);
    loop {
        tick.tick().await;
        let now = Instant::now();
        let want: BTreeSet<IpAddr> = {
            let mut c = lock(&controller);
            // Once ready, an instance stays ready: nothing more to evaluate.
            let waiting = if c.instance().is_ready() {
                None
            } else {
                readiness(&*view, &heartbeats, (options.link_up)(), &c, now - started).or_else(
                    || {
                        let synced = options.sync_done.as_ref().is_none_or(|done| done());
                        (!synced).then(|| "the peers' connection entries (fleet sync)".into())
                    },
                )
            };
            let was_ready = c.instance().is_ready();
            let total = forwarded(&*view);
            let serving;
            {
                let inst = c.instance_mut();
                inst.set_waiting_for(waiting, now);
                inst.note_forwarded(total, now);
                serving = inst.phase() == Phase::Serving;
            }
            if !was_ready && c.instance().is_ready() {
                // The tables published from now on are the ones served (FS-11).
                c.publish("ready");
            }
            let snap = c.snapshot();
            let w = wanted(c.config(), &snap, serving);
            let set = w.keys().map(Addr::to_ip).collect();
            c.instance_mut().wanted = w;
            set
        };
        if let Some(path) = &bird_socket {
            if now >= next_bird {
                next_bird = now + BIRD_PERIOD;
                let status = probe_bird(path).await;
                let mut c = lock(&controller);
                let inst = c.instance_mut();
                let was = inst.bird.as_ref().map(|b| b.up);
                if was != Some(status.up) {
                    if status.up {
                        tracing::info!(socket = %path, "BIRD answers: {}", status.detail);
                    } else {
                        tracing::error!(
                            socket = %path,
                            "BIRD does not answer ({}): the VIP routes stay in the table, but no \
                             router hears of them until it does; forwarding goes on",
                            status.detail
                        );
                    }
                }
                inst.bird = Some(status);
            }
        }
        let Some(table) = &options.table else {
            let mut c = lock(&controller);
            c.instance_mut().announced = want.iter().map(|ip| Addr::from(*ip)).collect();
            continue;
        };
        // Update when the wanted set changed, and anyway when due: every REAPPLY after an
        // update that worked, every RETRY after one that failed (not at every tick while
        // failing).
        let changed = applied.as_ref() != Some(&want);
        if now < next_update && (!changed || failing) {
            continue;
        }
        let result = table.apply(&want).await;
        let mut c = lock(&controller);
        let inst = c.instance_mut();
        match result {
            Ok(report) => {
                for a in &report.added {
                    tracing::info!(vip = %a, table = table.table, "VIP announced");
                }
                for a in &report.removed {
                    tracing::info!(vip = %a, table = table.table, "VIP withdrawn");
                }
                if inst.last_error.take().is_some() {
                    tracing::info!(table = table.table, "the VIP route table is up to date again");
                }
                inst.route_updates += 1;
                inst.announced = want.iter().map(|ip| Addr::from(*ip)).collect();
                applied = Some(want);
                failing = false;
                next_update = now + REAPPLY;
            }
            Err(e) => {
                inst.route_errors += 1;
                let msg = e.to_string();
                if inst.last_error.as_deref() != Some(msg.as_str()) {
                    tracing::error!(
                        table = table.table,
                        "cannot update the VIP route table ({msg}); forwarding goes on, retrying \
                         every {} s",
                        RETRY.as_secs()
                    );
                }
                inst.last_error = Some(msg);
                applied = None;
                failing = true;
                next_update = now + RETRY;
            }
        }
    }
}
