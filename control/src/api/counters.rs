//! `GET /v1/counters`: the workers' counters as they are now, for `spillwayctl top` (which
//! takes two and shows the rates): per worker its packets, drops by reason and table entries;
//! per service and per backend slot, summed over the workers, packets and new connections
//! (and, per backend, the entries that pin it). The same numbers as `/metrics`, typed.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use spillway_core::counters::Reason;

use super::{lock, Api};
use crate::view::traffic;
use spillway_api::types::{CountersReply, ServiceCounters, SlotCounters, WorkerCountersInfo};

pub(super) async fn counters(State(api): State<Api>) -> Json<CountersReply> {
    let view = &*api.view;
    let (snap, uptime_ms) = {
        let c = lock(&api.controller);
        (c.snapshot(), c.now().as_millis())
    };
    let workers = (0..view.workers())
        .map(|w| {
            let c = view.counters(w);
            let mut dropped = BTreeMap::new();
            let mut forwarded = 0;
            for r in Reason::all() {
                let n = c.reason(r).get();
                match r.labels() {
                    ("forward", _) => forwarded += n,
                    (_, name) if n > 0 => {
                        *dropped.entry(name.to_owned()).or_default() += n;
                    }
                    _ => {}
                }
            }
            WorkerCountersInfo {
                worker: w,
                rx_packets: c.rx_packets.get(),
                tx_packets: c.tx_packets.get(),
                forwarded,
                dropped,
                conntrack_entries: c.ct_entries.get(),
            }
        })
        .collect();
    let services = snap
        .services()
        .map(|s| {
            let [packets, _, new_connections] =
                traffic(view, |c| c.services.get(usize::from(s.id)));
            ServiceCounters { service: s.name.to_string(), packets, new_connections }
        })
        .collect();
    let slots = snap
        .backends()
        .map(|(slot, _)| {
            let i = usize::from(slot);
            let [packets, _, new_connections] = traffic(view, |c| c.backends.get(i));
            let tracked = (0..view.workers())
                .filter_map(|w| view.counters(w).backends.get(i))
                .map(|t| t.tracked.get())
                .fold(0u64, u64::wrapping_add);
            SlotCounters { slot, packets, new_connections, tracked }
        })
        .collect();
    Json(CountersReply { uptime_ms, workers, services, slots })
}
