//! `spillwayctl top`: a live view of the daemon, redrawn every second.
//!
//! Each second it reads `GET /v1/counters`, `/v1/backends`, `/v1/conntrack` and
//! `/v1/instance` ([`Sample`]), turns two consecutive samples into rates ([`Rates::between`])
//! and draws them ([`draw`], with `ratatui`): per worker its receive and transmit rates, its
//! drops per second by reason and how full its table is; per service and per backend the new
//! connections per second, the packets per second and the entries that pin the backend, with
//! its health and drain state; the instance's phase and announced VIPs. The terminal side
//! (raw mode, the alternate screen, the keys) is in the binary.

use std::collections::BTreeMap;

use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};
use ratatui::Frame;

use spillway_api::types::{BackendInfo, ConntrackReply, CountersReply, InstanceReply};

/// What one refresh reads.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The workers' counters.
    pub counters: CountersReply,
    /// Every backend: its slot, health and state.
    pub backends: Vec<BackendInfo>,
    /// Table sizes per worker.
    pub conntrack: ConntrackReply,
    /// The instance's phase and VIPs.
    pub instance: InstanceReply,
}

/// A worker's line.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerRate {
    /// Worker index.
    pub worker: usize,
    /// Received, millions of packets per second.
    pub rx_mpps: f64,
    /// Transmitted, millions of packets per second.
    pub tx_mpps: f64,
    /// Drops per second by reason (those with any).
    pub drops: BTreeMap<String, f64>,
    /// Table fill, 0 to 1.
    pub fill: f64,
}

/// A service's or backend's line.
#[derive(Debug, Clone, PartialEq)]
pub struct TrafficRate {
    /// `service` or `service backend`.
    pub name: String,
    /// New connections per second.
    pub new_per_sec: f64,
    /// Packets per second.
    pub packets_per_sec: f64,
    /// Entries pinning it (backends only).
    pub active: Option<u64>,
    /// `healthy`/`unhealthy`, and `drained`/`draining` (backends only).
    pub state: String,
}

/// Two samples as rates.
#[derive(Debug, Clone, PartialEq)]
pub struct Rates {
    /// The instance's phase.
    pub phase: String,
    /// Its announced VIPs.
    pub announced: Vec<String>,
    /// Seconds between the samples.
    pub seconds: f64,
    /// Per worker.
    pub workers: Vec<WorkerRate>,
    /// Per service.
    pub services: Vec<TrafficRate>,
    /// Per backend.
    pub backends: Vec<TrafficRate>,
}

impl Rates {
    /// The rates from `before` to `now` (their counters' clocks give the time between).
    pub fn between(before: &Sample, now: &Sample) -> Rates {
        let ms = now.counters.uptime_ms.saturating_sub(before.counters.uptime_ms).max(1);
        let secs = ms as f64 / 1000.0;
        let per_sec = |a: u64, b: u64| b.saturating_sub(a) as f64 / secs;
        let workers = now
            .counters
            .workers
            .iter()
            .map(|w| {
                let b = before.counters.workers.iter().find(|x| x.worker == w.worker);
                let drops = w
                    .dropped
                    .iter()
                    .map(|(r, n)| {
                        let was = b.and_then(|b| b.dropped.get(r)).copied().unwrap_or(0);
                        (r.clone(), per_sec(was, *n))
                    })
                    .filter(|(_, v)| *v > 0.0)
                    .collect();
                let capacity = now
                    .conntrack
                    .workers
                    .iter()
                    .find(|c| c.worker == w.worker)
                    .map_or(0, |c| c.capacity);
                WorkerRate {
                    worker: w.worker,
                    rx_mpps: per_sec(b.map_or(0, |b| b.rx_packets), w.rx_packets) / 1e6,
                    tx_mpps: per_sec(b.map_or(0, |b| b.tx_packets), w.tx_packets) / 1e6,
                    drops,
                    fill: w.conntrack_entries as f64 / capacity.max(1) as f64,
                }
            })
            .collect();
        let services = now
            .counters
            .services
            .iter()
            .map(|s| {
                let b = before.counters.services.iter().find(|x| x.service == s.service);
                TrafficRate {
                    name: s.service.clone(),
                    new_per_sec: per_sec(b.map_or(0, |b| b.new_connections), s.new_connections),
                    packets_per_sec: per_sec(b.map_or(0, |b| b.packets), s.packets),
                    active: None,
                    state: String::new(),
                }
            })
            .collect();
        let backends = now
            .backends
            .iter()
            .map(|info| {
                let slot =
                    |s: &Sample| s.counters.slots.iter().find(|c| c.slot == info.slot).cloned();
                // A slot that changed hands since the last sample starts from zero.
                let same = before
                    .backends
                    .iter()
                    .any(|b| b.slot == info.slot && b.generation == info.generation);
                let (b, n) = (slot(before).filter(|_| same), slot(now));
                let name = match info.port {
                    0 => format!("{} {}", info.service, info.address),
                    p => format!("{} {}:{p}", info.service, info.address),
                };
                let mut state = if info.healthy { "healthy" } else { "unhealthy" }.to_owned();
                if info.drained {
                    state.push_str(", drained");
                } else if info.status != "active" {
                    state.push_str(&format!(", {}", info.status));
                }
                TrafficRate {
                    name,
                    new_per_sec: per_sec(
                        b.as_ref().map_or(0, |b| b.new_connections),
                        n.as_ref().map_or(0, |n| n.new_connections),
                    ),
                    packets_per_sec: per_sec(
                        b.as_ref().map_or(0, |b| b.packets),
                        n.as_ref().map_or(0, |n| n.packets),
                    ),
                    active: Some(n.map_or(0, |n| n.tracked)),
                    state,
                }
            })
            .collect();
        Rates {
            phase: now.instance.phase.clone(),
            announced: now.instance.announced.clone(),
            seconds: secs,
            workers,
            services,
            backends,
        }
    }
}

/// Draws `r` on the whole frame.
pub fn draw(f: &mut Frame<'_>, r: &Rates) {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let [head, workers, services, backends, help] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(r.workers.len() as u16 + 3),
        Constraint::Length(r.services.len() as u16 + 3),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(f.area());
    let vips = if r.announced.is_empty() { "none".to_owned() } else { r.announced.join(" ") };
    f.render_widget(
        Paragraph::new(Line::from(format!(
            "spillway: {}   announced: {vips}   (rates over {:.1} s)",
            r.phase, r.seconds
        ))),
        head,
    );
    let rows = r.workers.iter().map(|w| {
        let drops = if w.drops.is_empty() {
            "-".to_owned()
        } else {
            w.drops.iter().map(|(k, v)| format!("{k} {v:.0}/s")).collect::<Vec<_>>().join(", ")
        };
        Row::new(vec![
            w.worker.to_string(),
            format!("{:.3}", w.rx_mpps),
            format!("{:.3}", w.tx_mpps),
            format!("{:.1}%", w.fill * 100.0),
            drops,
        ])
    });
    f.render_widget(
        Table::new(
            rows,
            [
                Constraint::Length(6),
                Constraint::Length(9),
                Constraint::Length(9),
                Constraint::Length(8),
                Constraint::Min(10),
            ],
        )
        .header(Row::new(vec!["WORKER", "RX Mpps", "TX Mpps", "TABLE", "DROPS"]).style(bold))
        .block(Block::bordered().title("workers")),
        workers,
    );
    let traffic = |rows: &[TrafficRate], title: &'static str, with_state: bool| {
        let body = rows.iter().map(move |t| {
            let mut cells = vec![
                t.name.clone(),
                format!("{:.0}", t.new_per_sec),
                format!("{:.0}", t.packets_per_sec),
            ];
            if with_state {
                cells.push(t.active.map_or("-".into(), |a| a.to_string()));
                cells.push(t.state.clone());
            }
            Row::new(cells)
        });
        let mut header = vec![title.to_uppercase(), "NEW/s".into(), "PKTS/s".into()];
        let mut widths = vec![Constraint::Min(24), Constraint::Length(10), Constraint::Length(10)];
        if with_state {
            header.extend(["ACTIVE".to_owned(), "STATE".to_owned()]);
            widths.extend([Constraint::Length(10), Constraint::Length(22)]);
        }
        Table::new(body, widths)
            .header(Row::new(header).style(bold))
            .block(Block::bordered().title(title))
    };
    f.render_widget(traffic(&r.services, "service", false), services);
    f.render_widget(traffic(&r.backends, "backend", true), backends);
    f.render_widget(Paragraph::new("q or Ctrl-C: quit"), help);
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use spillway_api::types::{ServiceCounters, SlotCounters, WorkerConntrack, WorkerCountersInfo};

    fn sample(ms: u64, rx: u64, drops: u64, new: u64, tracked: u64) -> Sample {
        let backend: BackendInfo = serde_json::from_value(serde_json::json!({
            "service": "web", "address": "198.18.1.1", "port": 0, "group": "g", "zone": "a",
            "role": "primary", "probe": "healthy", "override": "auto", "healthy": true,
            "drained": false, "status": "active", "draining_deadline_ms": null,
            "draining_remaining_ms": null, "weight": 1, "slot": 3, "generation": 1,
            "eligible": true, "check": null, "last_result": null, "last_latency_ms": null,
        }))
        .expect("a backend");
        let instance: InstanceReply = serde_json::from_value(serde_json::json!({
            "phase": "serving", "in_phase_sec": 1.0, "waiting_for": null, "quiet_for_sec": 0.0,
            "traffic_stopped": false, "wanted": {}, "announced": ["198.18.0.100"],
            "route_errors": 0, "last_error": null, "bird": null, "fingerprints": {},
        }))
        .expect("an instance");
        let w = |worker| WorkerConntrack {
            worker,
            entries: tracked,
            capacity: 1000,
            inserts: 0,
            evictions: 0,
        };
        Sample {
            counters: CountersReply {
                uptime_ms: ms,
                workers: vec![WorkerCountersInfo {
                    worker: 0,
                    rx_packets: rx,
                    tx_packets: rx - drops,
                    forwarded: rx - drops,
                    dropped: BTreeMap::from([("no_matching_rule".to_owned(), drops)]),
                    conntrack_entries: tracked,
                }],
                services: vec![ServiceCounters {
                    service: "web".into(),
                    packets: rx - drops,
                    new_connections: new,
                }],
                slots: vec![SlotCounters {
                    slot: 3,
                    packets: rx - drops,
                    new_connections: new,
                    tracked,
                }],
            },
            backends: vec![backend],
            conntrack: ConntrackReply { workers: vec![w(0)], total: w(0) },
            instance,
        }
    }

    #[test]
    fn two_samples_make_rates_and_the_view_shows_them() {
        let a = sample(10_000, 1_000_000, 10, 100, 50);
        let b = sample(12_000, 5_000_000, 30, 700, 250);
        let r = Rates::between(&a, &b);
        assert_eq!(r.seconds, 2.0);
        assert_eq!(r.workers[0].rx_mpps, 2.0);
        assert_eq!(r.workers[0].drops["no_matching_rule"], 10.0);
        assert_eq!(r.workers[0].fill, 0.25);
        assert_eq!(r.services[0].new_per_sec, 300.0);
        assert_eq!(r.backends[0].name, "web 198.18.1.1");
        assert_eq!((r.backends[0].active, r.backends[0].state.as_str()), (Some(250), "healthy"));
        let mut t = Terminal::new(TestBackend::new(100, 20)).expect("a terminal");
        t.draw(|f| draw(f, &r)).expect("drawn");
        let text: String = t
            .backend()
            .buffer()
            .content()
            .chunks(100)
            .map(|l| l.iter().map(|c| c.symbol()).collect::<String>() + "\n")
            .collect();
        for want in [
            "spillway: serving   announced: 198.18.0.100",
            "2.000",
            "25.0%",
            "no_matching_rule 10/s",
            "web 198.18.1.1",
            "300",
            "250",
            "healthy",
            "q or Ctrl-C: quit",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
    }
}
