//! Stage 5: what runs beside the workers: what the admin API and metrics see of them, fleet
//! sync's thread, the announcer (readiness, the announced VIPs, draining), the admin API, and
//! the resolver's sender. [`Services::stop`] withdraws the VIPs and stops fleet sync once the
//! workers have stopped.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use spillway_control::announcer::{self, FleetOptions};
use spillway_control::api::{self, ApiError, ApiOptions, ApiServer};
use spillway_control::netlink::{Netlink, RouteTable};
use spillway_control::sync::{self, SyncShared};
use spillway_control::view::DataplaneView;
use spillway_core::counters::PortCounters;
use spillway_dataplane::outbox::OutboxSender;

use super::plane::Plane;
use super::resources::Resources;
use super::workers::{SyncKeys, WorkerShared};
use super::{setting, DaemonError, Setup};
use crate::control_loop;
use crate::view::DaemonView;

/// Fleet sync's thread and what it shares.
type SyncThread = (std::thread::JoinHandle<()>, Arc<SyncShared>);

/// What runs beside the workers.
pub(super) struct Services<'p> {
    // Fields go in this order: the sender's frames and the API before the rest.
    /// The resolver's requests, built in the pool and sent by worker 0 (load-balance mode).
    pub(super) sender: Option<OutboxSender<'p>>,
    /// The admin API and metrics, served until dropped.
    _admin: Option<ApiServer>,
    /// The announcer's task.
    pub(super) fleet: Option<tokio::task::JoinHandle<()>>,
    /// Fleet sync's thread.
    sync: Option<SyncThread>,
    /// Tells fleet sync's thread to stop.
    sync_stop: Arc<AtomicBool>,
    /// What the control plane sees of the workers.
    pub(super) view: Arc<dyn DataplaneView>,
    /// Every port's driver counters (the kernel interface's too), copied every second.
    pub(super) port_counters: Arc<[(String, PortCounters)]>,
    /// Whether every data port's link is up (the announcer's readiness).
    pub(super) link_up: Arc<AtomicBool>,
}

impl<'p> Services<'p> {
    pub(super) fn start(
        setup: &Setup<'_>,
        res: &'p Resources<'_>,
        plane: &Plane,
        shared: &WorkerShared<'p>,
        keys: SyncKeys,
    ) -> Result<Services<'p>, DaemonError> {
        let port_counters: Arc<[(String, PortCounters)]> = res
            .ports
            .iter()
            .chain(res.kernel_port.as_ref())
            .map(|p| (p.name().to_owned(), PortCounters::default()))
            .collect();
        let view: Arc<dyn DataplaneView> = Arc::new(DaemonView {
            counters: Arc::clone(&shared.counters),
            mailboxes: if setup.balance { shared.mailboxes.clone() } else { Vec::new() },
            tap_slots: if setup.balance { shared.tap_slots.clone() } else { Vec::new() },
            neighbours: plane.resolver.cell(),
            neighbour_events: plane.resolver.events(),
            node: plane.node,
            neighbour_counters: plane.resolver.counters(),
            kernel: res.kernel_port.as_ref().map(|_| Arc::clone(&shared.kernel_counters)),
            ports: port_counters.clone(),
        });
        let sync_stop = Arc::new(AtomicBool::new(false));
        // Fleet sync's thread, now that the kernel interface holds the node's addresses.
        let sync = match keys {
            Some(keys) => start_sync(setup, plane, shared, keys, &sync_stop)?,
            None => None,
        };
        let link_up = Arc::new(AtomicBool::new(false));
        let fleet = start_announcer(setup, res, plane, &view, sync.as_ref(), &link_up);
        let admin = match &plane.controller {
            Some(c) => {
                let field = |e: &ApiError| match e {
                    ApiError::Token { .. } => "admin.token_file",
                    ApiError::Group(_) => "admin.socket_group",
                    _ => "admin.listen",
                };
                let started = ApiOptions::from_config(&setup.config.admin)
                    .and_then(|options| api::spawn(&options, Arc::clone(c), Arc::clone(&view)));
                Some(started.map_err(|e| setting(field(&e), e))?)
            }
            None => None,
        };
        let sender = plane.node.map(|node| OutboxSender {
            outbox: Arc::clone(&shared.outbox),
            pool: &res.pool,
            node,
        });
        Ok(Services { sender, _admin: admin, fleet, sync, sync_stop, view, port_counters, link_up })
    }

    /// Once the workers have stopped: nothing stays announced (without an exception interface
    /// the routes do not go away with it), and fleet sync's thread ends.
    pub(super) fn stop(&mut self, setup: &Setup<'_>, res: &Resources<'_>, plane: &Plane) {
        let table = res.netlink.as_ref().and_then(|nl| route_table(setup, nl, plane));
        if let (Some(handle), Some(table)) = (self.fleet.take(), table) {
            handle.abort();
            let nothing = std::collections::BTreeSet::new();
            let withdraw = table.apply(&nothing);
            match res.runtime.block_on(tokio::time::timeout(Duration::from_secs(2), withdraw)) {
                Ok(Ok(r)) if !r.removed.is_empty() => {
                    tracing::info!(withdrawn = r.removed.len(), "VIP routes withdrawn at stop");
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::error!("withdrawing the VIP routes at stop: {e}"),
                Err(_) => tracing::error!("withdrawing the VIP routes at stop: no answer in 2 s"),
            }
        }
        self.sync_stop.store(true, Ordering::Relaxed);
        if let Some((handle, _)) = self.sync.take() {
            let _ = handle.join();
        }
    }
}

/// Copies every port's driver counters into `counters` (the data ports, then the kernel
/// interface's).
pub(super) fn refresh_port_counters(res: &Resources<'_>, counters: &[(String, PortCounters)]) {
    for (p, (_, c)) in res.ports.iter().chain(res.kernel_port.as_ref()).zip(counters.iter()) {
        if let Ok(s) = p.stats() {
            c.ipackets.set(s.ipackets);
            c.opackets.set(s.opackets);
            c.imissed.set(s.imissed);
            c.ierrors.set(s.ierrors);
            c.oerrors.set(s.oerrors);
            c.rx_nombuf.set(s.rx_nombuf);
        }
    }
}

/// Fleet sync's thread, bound to `fleet.sync.local`.
fn start_sync(
    setup: &Setup<'_>,
    plane: &Plane,
    shared: &WorkerShared<'_>,
    (keys, epoch): (sync::KeyRing, u64),
    stop: &Arc<AtomicBool>,
) -> Result<Option<SyncThread>, DaemonError> {
    let (Some(s), Some(c)) = (&setup.sync, &plane.controller) else { return Ok(None) };
    let settings = sync::SyncSettings {
        instance_id: s.instance_id,
        bind: s.local.clone(),
        peers: s.peers.iter().map(|p| (p.id, p.socket)).collect(),
        bulk_timeout: s.bulk_timeout,
        refresh: s.refresh,
        epoch,
        max_entries_per_sec: s.max_entries_per_sec,
    };
    let reader = control_loop::lock(c).reader();
    let links = shared.sync_links.clone();
    let counters = Arc::clone(&shared.counters);
    let (handle, sync_shared) =
        sync::spawn(settings, keys, links, counters, reader, Arc::clone(stop))
            .map_err(|e| setting("fleet.sync.port", format!("binding {}: {e}", addrs(&s.local))))?;
    control_loop::lock(c).set_sync(Arc::clone(&sync_shared));
    println!(
        "spillway: fleet sync as instance {} (epoch {epoch}) on {} with {} peer(s)",
        s.instance_id,
        addrs(&s.local),
        s.peers.len()
    );
    Ok(Some((handle, sync_shared)))
}

/// The announcer (when `announce` is configured): readiness, the announced VIPs, draining.
fn start_announcer(
    setup: &Setup<'_>,
    res: &Resources<'_>,
    plane: &Plane,
    view: &Arc<dyn DataplaneView>,
    sync: Option<&SyncThread>,
    link_up: &Arc<AtomicBool>,
) -> Option<tokio::task::JoinHandle<()>> {
    let (Some(c), Some(nl), Some(_)) = (&plane.controller, &res.netlink, &setup.config.announce)
    else {
        return None;
    };
    let flag = Arc::clone(link_up);
    let sync_done = sync.map(|(_, shared)| {
        let shared = Arc::clone(shared);
        Box::new(move || shared.bulk_done.load(Ordering::Relaxed)) as Box<_>
    });
    let options = FleetOptions {
        table: route_table(setup, nl, plane),
        link_up: Box::new(move || flag.load(Ordering::Relaxed)),
        sync_done,
    };
    Some(announcer::spawn(Arc::clone(c), Arc::clone(view), options))
}

/// The route table the VIPs go to.
fn route_table(setup: &Setup<'_>, nl: &Netlink, plane: &Plane) -> Option<RouteTable> {
    setup.config.announce.as_ref().map(|a| RouteTable {
        netlink: nl.clone(),
        table: a.table,
        oif: plane.kernel_index,
    })
}

/// Socket addresses as `a, b`.
fn addrs(a: &[SocketAddr]) -> String {
    a.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}
