//! The API's replies as the tables and lines `spillwayctl` prints (without `--json`), one
//! function per command. `docs/operations.md` shows their output.

use crate::text::{duration_ms, num, opt, percent, table, yes};
use spillway_api::types::*;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// A JSON body pretty-printed (`--json`); a body that is not JSON as it came, trimmed.
pub fn pretty(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_else(|_| body.trim_end().to_owned())
}

/// `spillwayctl status`.
pub fn status(s: &StatusReply) -> String {
    let b = &s.backends;
    table(
        &["FIELD", "VALUE"],
        &[
            vec!["uptime".into(), duration_ms(s.uptime_ms)],
            vec!["generation".into(), s.generation.to_string()],
            vec!["config".into(), s.config.clone()],
            vec!["workers".into(), s.workers.to_string()],
            vec![
                "services".into(),
                if s.advanced_services == 0 {
                    s.services.to_string()
                } else {
                    format!(
                        "{} ({} advanced, {} group(s) auto-drained)",
                        s.services, s.advanced_services, s.auto_drained_groups
                    )
                },
            ],
            vec![
                "backends".into(),
                format!(
                    "{}/{} healthy, {} drained, {} draining",
                    b.healthy, b.total, b.drained, b.draining
                ),
            ],
            vec![
                "conntrack".into(),
                format!("{} entries, capacity {}", s.conntrack.entries, s.conntrack.capacity),
            ],
        ],
    )
}

/// `spillwayctl services`: one row per service, then the client zones of services with zonal
/// affinity, then each advanced service's groups and split.
pub fn services(r: &ServicesReply) -> String {
    let rows: Vec<Vec<String>> = r.services.iter().map(service_row).collect();
    let mut out = table(
        &["SERVICE", "ID", "ELIGIBLE", "SIZE", "AFFINITY", "TRACKING", "ZONAL", "RULES"],
        &rows,
    );
    let zones: Vec<Vec<String>> = r
        .services
        .iter()
        .flat_map(|s| {
            s.zones.iter().filter(|_| s.policy.zonal_affinity != "ZONAL_AFFINITY_DISABLED").map(
                move |z| {
                    vec![
                        s.name.clone(),
                        z.zone.clone(),
                        yes(z.zonal_match),
                        yes(z.spilled),
                        z.size.to_string(),
                    ]
                },
            )
        })
        .collect();
    if !zones.is_empty() {
        out.push('\n');
        out.push_str(&table(&["SERVICE", "CLIENT ZONE", "ZONAL MATCH", "SPILLED", "SIZE"], &zones));
    }
    for s in &r.services {
        if let Some(a) = &s.advanced {
            out.push('\n');
            out.push_str(&advanced(&s.name, a));
        }
    }
    out
}

fn service_row(s: &ServiceInfo) -> Vec<String> {
    let p = &s.policy;
    vec![
        s.name.clone(),
        s.id.to_string(),
        s.eligible_kind.clone(),
        s.eligible_size.to_string(),
        p.session_affinity.clone(),
        p.tracking_mode.clone(),
        match p.spillover_ratio {
            Some(r) => format!("{} {r}", p.zonal_affinity.trim_start_matches("ZONAL_AFFINITY_")),
            None => p.zonal_affinity.trim_start_matches("ZONAL_AFFINITY_").to_owned(),
        },
        s.rules
            .iter()
            .map(|r| format!("{} {} {}", r.destination, r.protocol, r.ports))
            .collect::<Vec<_>>()
            .join("; "),
    ]
}

/// Section 7 of one service: its groups, then each client zone's split.
fn advanced(service: &str, a: &AdvancedInfo) -> String {
    let unit = match a.unit.as_str() {
        "new_connections_per_second" => "new conn/s",
        other => other,
    };
    let mut out = format!(
        "{service}: advanced {}, failover threshold {}%, loads in {unit}\n",
        a.algorithm, a.failover_health_threshold
    );
    let rows: Vec<Vec<String>> = a
        .groups
        .iter()
        .map(|g| {
            vec![
                format!("{}{}", g.name, if g.preferred { " (preferred)" } else { "" }),
                g.zone.clone(),
                format!("{}/{}", g.healthy, g.endpoints),
                g.capacity.map_or_else(|| "unbounded".to_owned(), num),
                num(g.measured),
                num(g.expected_load),
                g.utilisation.map_or_else(|| "-".to_owned(), percent),
                yes(g.auto_drained),
                percent(g.retained),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "GROUP",
            "ZONE",
            "HEALTHY",
            "CAPACITY",
            "MEASURED",
            "EXPECTED",
            "UTILISATION",
            "DRAINED",
            "RETAINED",
        ],
        &rows,
    ));
    let rows: Vec<Vec<String>> = a
        .clients
        .iter()
        .map(|c| {
            vec![
                c.zone.clone().unwrap_or_else(|| "(no zone)".to_owned()),
                num(c.demand),
                split(a, &c.shares),
            ]
        })
        .collect();
    out.push_str(&table(&["CLIENT ZONE", "DEMAND", "SPLIT"], &rows));
    out
}

/// `{group: share}` as `g1 60.0%, g2 40.0%` in the groups' order (zero shares left out).
fn split(a: &AdvancedInfo, shares: &BTreeMap<String, f64>) -> String {
    let parts: Vec<String> = a
        .groups
        .iter()
        .filter_map(|g| shares.get(&g.name).filter(|w| **w > 0.0).map(|w| (g, w)))
        .map(|(g, w)| format!("{} {}", g.name, percent(*w)))
        .collect();
    if parts.is_empty() {
        "none (falls back to the eligible set)".to_owned()
    } else {
        parts.join(", ")
    }
}

/// `spillwayctl backends`: one row per backend.
pub fn backends(b: &[BackendInfo]) -> String {
    let rows: Vec<Vec<String>> = b
        .iter()
        .map(|b| {
            vec![
                b.service.clone(),
                if b.port == 0 { b.address.clone() } else { format!("{}:{}", b.address, b.port) },
                b.group.clone(),
                b.zone.clone(),
                b.role.clone(),
                b.probe.clone(),
                b.health_override.clone(),
                if b.healthy { "healthy" } else { "unhealthy" }.to_owned(),
                yes(b.drained),
                match b.draining_remaining_ms {
                    Some(ms) => format!("draining ({} left)", duration_ms(ms)),
                    None => b.status.clone(),
                },
                opt(&b.weight),
                b.slot.to_string(),
                yes(b.eligible),
            ]
        })
        .collect();
    table(
        &[
            "SERVICE", "BACKEND", "GROUP", "ZONE", "ROLE", "PROBE", "OVERRIDE", "HEALTH",
            "DRAINED", "STATUS", "WEIGHT", "SLOT", "ELIGIBLE",
        ],
        &rows,
    )
}

/// `spillwayctl set-health`, `drain`, `undrain`: the backends changed, and the generation
/// that carries the change.
pub fn action(r: &ActionReply) -> String {
    format!("{}snapshot generation {}\n", backends(&r.backends), r.generation)
}

/// `spillwayctl reload`.
pub fn reload(r: &ReloadReply) -> String {
    let mut out =
        format!("configuration reloaded: generation {}, {} service(s)\n", r.generation, r.services);
    for a in &r.added {
        let _ = writeln!(out, "  added      {a}");
    }
    for a in &r.removed {
        let _ = writeln!(
            out,
            "  removed    {} (draining until {})",
            a.backend,
            duration_ms(a.draining_deadline_ms)
        );
    }
    for a in &r.undrained {
        let _ = writeln!(out, "  re-added   {a} (was draining: connections kept)");
    }
    if r.added.is_empty() && r.removed.is_empty() && r.undrained.is_empty() {
        out.push_str("  no backend added or removed\n");
    }
    out
}

/// `spillwayctl neighbours`: the resolved next hops, then the resolver's answer counts.
pub fn neighbours(r: &NeighboursReply) -> String {
    let rows: Vec<Vec<String>> =
        r.neighbours.iter().map(|n| vec![n.addr.clone(), n.mac.clone()]).collect();
    let mut out = table(&["next hop", "mac"], &rows);
    let answers: Vec<String> = r.answers.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(out, "answers: {}", answers.join(", "));
    out
}

/// `spillwayctl conntrack`: one row per worker and the total.
pub fn conntrack(r: &ConntrackReply) -> String {
    let row = |w: String, c: &WorkerConntrack| {
        vec![
            w,
            c.entries.to_string(),
            c.capacity.to_string(),
            c.inserts.to_string(),
            c.evictions.to_string(),
        ]
    };
    let mut rows: Vec<Vec<String>> =
        r.workers.iter().map(|w| row(w.worker.to_string(), w)).collect();
    rows.push(row("total".into(), &r.total));
    table(&["WORKER", "ENTRIES", "CAPACITY", "INSERTS", "EVICTIONS"], &rows)
}

/// `spillwayctl lookup`: the flow and its tracking key, then every worker's answer.
pub fn lookup(r: &FlowLookupReply) -> String {
    let mut out = format!(
        "flow          {}\nservice       {}\ntracking key  {}\n\n",
        r.flow, r.service, r.tracking_key
    );
    let rows: Vec<Vec<String>> = r
        .workers
        .iter()
        .map(|w| match &w.entry {
            Some(e) => vec![
                w.worker.to_string(),
                w.state.clone(),
                opt(&e.backend),
                e.idle_ms.to_string(),
                format!(
                    "{}/{}{}",
                    e.slot,
                    e.generation,
                    if e.current_generation { "" } else { " (stale)" }
                ),
                e.epoch.to_string(),
            ],
            None => vec![
                w.worker.to_string(),
                w.state.clone(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ],
        })
        .collect();
    out.push_str(&table(&["WORKER", "STATE", "BACKEND", "IDLE_MS", "SLOT/GEN", "EPOCH"], &rows));
    out
}

/// `spillwayctl flows`: the flows listed, then what the dump read and matched, and the counts.
pub fn flows(r: &FlowsReply) -> String {
    let rows: Vec<Vec<String>> = r
        .flows
        .iter()
        .map(|f| {
            vec![
                f.worker.to_string(),
                f.proto.clone(),
                f.client.clone(),
                f.vip.clone(),
                opt(&f.service),
                opt(&f.backend),
                if f.peer { format!("{} (peer's)", f.state) } else { f.state.clone() },
                f.idle_ms.to_string(),
            ]
        })
        .collect();
    let mut out = if rows.is_empty() {
        String::new()
    } else {
        table(
            &["WORKER", "PROTO", "CLIENT", "VIP", "SERVICE", "BACKEND", "STATE", "IDLE_MS"],
            &rows,
        )
    };
    let _ = writeln!(
        out,
        "{} flows matched ({} listed), {} entries read in {} ms",
        r.matched,
        r.flows.len(),
        r.scanned,
        r.duration_ms
    );
    if !r.incomplete_workers.is_empty() {
        let ws: Vec<String> = r.incomplete_workers.iter().map(ToString::to_string).collect();
        let _ = writeln!(out, "incomplete: worker(s) {} did not answer", ws.join(", "));
    }
    if let Some(counts) = &r.counts {
        let rows: Vec<Vec<String>> =
            counts.iter().map(|(k, n)| vec![k.clone(), n.to_string()]).collect();
        out.push('\n');
        out.push_str(&table(&["BY", "FLOWS"], &rows));
    }
    out
}

/// `spillwayctl flows --json`: one JSON object per flow, per line, then one with the totals
/// (`matched`, `scanned`, `counts`, `incomplete_workers`, `duration_ms`).
pub fn flows_json_lines(r: &FlowsReply) -> String {
    let mut out = String::new();
    for f in &r.flows {
        let _ = writeln!(out, "{}", serde_json::to_string(f).unwrap_or_default());
    }
    let totals = serde_json::json!({
        "matched": r.matched, "listed": r.flows.len(), "scanned": r.scanned, "counts": r.counts,
        "incomplete_workers": r.incomplete_workers, "duration_ms": r.duration_ms,
    });
    let _ = writeln!(out, "{totals}");
    out
}

/// `spillwayctl capture`'s summary (to stderr, beside the pcapng).
pub fn capture(s: &CaptureSummary) -> String {
    let stopped = match s.stopped_by {
        Some(by) => serde_json::to_value(by)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        None => "still running".into(),
    };
    let mut out = format!(
        "capture {}: {} packets (received {}, sent {}, dropped {}), {} bytes in {}; stopped by {}\n",
        s.id,
        s.packets,
        s.received,
        s.sent,
        s.dropped,
        s.bytes,
        duration_ms(s.duration_ms),
        stopped.replace('_', " "),
    );
    let _ = writeln!(out, "filter: {}", s.filter);
    if s.lost > 0 {
        let _ = writeln!(
            out,
            "lost: {} packets the workers' capture rings had no room for (narrow the filter)",
            s.lost
        );
    }
    out
}

/// A client zone's choice in a preview: its own backends, spilled, or the whole set.
fn zone_choice(c: Option<ZoneChoice>) -> String {
    match c {
        None => "not a zone".into(),
        Some(c) if c.zonal_match && c.spilled => format!("spills to every zone ({})", c.eligible),
        Some(c) if c.zonal_match => format!("its own zone ({})", c.eligible),
        Some(c) => format!("no zonal match ({})", c.eligible),
    }
}

/// `spillwayctl reload --dry-run`: the summary (what changes, the connections by fate), then
/// with `verbose` every service and backend and example connections.
pub fn preview(r: &PreviewReply, verbose: bool) -> String {
    let c = &r.connections;
    let mut out = String::new();
    let changed: Vec<String> = r
        .services
        .iter()
        .filter(|s| s.change != "same")
        .map(|s| {
            format!("{} ({}, {} of its table)", s.service, s.change, percent(s.positions_changed))
        })
        .collect();
    let _ = writeln!(
        out,
        "services changed   {}",
        if changed.is_empty() { "none".into() } else { changed.join(", ") }
    );
    let list = |v: &[String]| if v.is_empty() { "none".to_owned() } else { v.join(", ") };
    let _ = writeln!(out, "backends added     {}", list(&r.added));
    let _ = writeln!(out, "backends removed   {}", list(&r.removed));
    let _ = writeln!(
        out,
        "live connections   {} stay, {} would move if they lost their entry, {} drain, {} \
         dropped",
        c.stay, c.moves, c.drain, c.dropped
    );
    for z in &r.zones {
        let _ = writeln!(
            out,
            "client zone        {} {}: {} -> {}",
            z.service,
            z.zone,
            zone_choice(z.before),
            zone_choice(z.after)
        );
    }
    if !r.incomplete_workers.is_empty() {
        let ws: Vec<String> = r.incomplete_workers.iter().map(ToString::to_string).collect();
        let _ = writeln!(out, "incomplete         worker(s) {} did not answer", ws.join(", "));
    }
    if r.would_drop {
        let _ = writeln!(out, "verdict            connections would be DROPPED (exit 4)");
    }
    if !verbose {
        return out;
    }
    out.push('\n');
    let rows: Vec<Vec<String>> = r
        .services
        .iter()
        .map(|s| vec![s.service.clone(), s.change.clone(), percent(s.positions_changed)])
        .collect();
    out.push_str(&table(&["SERVICE", "CHANGE", "POSITIONS CHANGED"], &rows));
    out.push('\n');
    let rows: Vec<Vec<String>> = r
        .backends
        .iter()
        .map(|b| {
            let f = r.by_backend.get(&format!("{}/{}", b.service, b.backend));
            let n = |g: fn(&ConnectionFates) -> u64| f.map_or("0".into(), |f| g(f).to_string());
            vec![
                b.service.clone(),
                b.backend.clone(),
                percent(b.share_before),
                percent(b.share_after),
                n(|f| f.stay),
                n(|f| f.moves),
                n(|f| f.drain),
                n(|f| f.dropped),
            ]
        })
        .collect();
    out.push_str(&table(
        &["SERVICE", "BACKEND", "SHARE", "AFTER", "STAY", "MOVE", "DRAIN", "DROP"],
        &rows,
    ));
    if !r.examples.is_empty() {
        out.push('\n');
        let rows: Vec<Vec<String>> = r
            .examples
            .iter()
            .map(|e| {
                vec![
                    e.fate.clone(),
                    e.client.clone(),
                    e.vip.clone(),
                    e.service.clone(),
                    e.backend.clone(),
                    opt(&e.why),
                ]
            })
            .collect();
        out.push_str(&table(&["FATE", "CLIENT", "VIP", "SERVICE", "BACKEND", "WHY"], &rows));
    }
    out
}

/// `spillwayctl explain`: one field per line; an advanced service adds its split and the
/// backend's group.
pub fn explain(x: &ExplainReply) -> String {
    let mut rows = vec![
        vec!["flow".into(), x.flow.clone()],
        vec!["service".into(), opt(&x.service)],
        vec!["client zone".into(), opt(&x.client_zone)],
        vec!["eligible set".into(), opt(&x.eligible_kind)],
        vec!["zonal match".into(), yes(x.zonal_match)],
        vec!["spilled".into(), yes(x.spilled)],
        vec!["final set size".into(), x.eligible_size.to_string()],
        vec!["tracking key".into(), opt(&x.tracking_key)],
        vec!["hashed backend".into(), opt(&x.hashed_backend)],
        vec!["entry".into(), explained_entry(x)],
        vec!["backend now".into(), opt(&x.backend)],
        vec!["reason".into(), x.reason.clone()],
        vec!["generation".into(), x.generation.to_string()],
    ];
    if let Some(shares) = &x.group_shares {
        let mut parts: Vec<(&String, &f64)> = shares.iter().filter(|(_, w)| **w > 0.0).collect();
        parts.sort_by(|a, b| b.1.total_cmp(a.1).then_with(|| a.0.cmp(b.0)));
        let text: Vec<String> =
            parts.iter().map(|(g, w)| format!("{g} {}", percent(**w))).collect();
        let text = if text.is_empty() {
            "none (falls back to the eligible set)".into()
        } else {
            text.join(", ")
        };
        // After "final set size" and after "backend now".
        rows.insert(11, vec!["backend group".into(), opt(&x.backend_group)]);
        rows.insert(7, vec!["advanced split".into(), text]);
    }
    if let Some(q) = &x.quic {
        // Before "backend now".
        let at = rows.iter().position(|r| r[0] == "backend now").unwrap_or(rows.len());
        rows.insert(at, vec!["quic-lb".into(), quic_decode(q)]);
    }
    table(&["FIELD", "VALUE"], &rows)
}

/// The `quic-lb` line of an explanation: what the connection ID decodes to, and whether a
/// packet without an entry goes there.
fn quic_decode(q: &QuicDecodeInfo) -> String {
    let decoded = match (q.config, &q.server_id) {
        (Some(c), Some(s)) => format!("config {c}, server id {s}"),
        (Some(c), None) => format!("config {c}"),
        _ => "no configuration".to_owned(),
    };
    match (&q.backend, &q.fallback) {
        (Some(b), None) => format!("{decoded} -> {b}"),
        (Some(b), Some(f)) => format!("{decoded} -> {b}, which cannot take it: 4-tuple ({f})"),
        (None, f) => format!("{decoded}: 4-tuple ({})", f.as_deref().unwrap_or("-")),
    }
}

/// The `entry` line of an explanation: the entry found and whether it holds, or why there is
/// none.
fn explained_entry(x: &ExplainReply) -> String {
    match &x.entry {
        Some(e) => format!(
            "{} on worker {}, idle {} ms: {}",
            opt(&e.entry.backend),
            e.worker,
            e.entry.idle_ms,
            match &e.invalid_reason {
                None => "valid".to_owned(),
                Some(r) => format!("invalid ({r})"),
            }
        ),
        None if x.new_connection_syn => "not looked up (new-connection SYN, CT-2)".to_owned(),
        None => format!("none ({} of {} worker(s) answered)", x.workers_answered, x.workers_asked),
    }
}

/// `spillwayctl instance`, `drain-instance`, `undrain-instance`.
pub fn instance(r: &InstanceReply) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "phase        {} (for {:.1} s)", r.phase, r.in_phase_sec);
    if let Some(w) = &r.waiting_for {
        let _ = writeln!(out, "waiting for  {w}");
    }
    let _ = writeln!(
        out,
        "traffic      last packet forwarded {:.1} s ago{}",
        r.quiet_for_sec,
        if r.traffic_stopped { ": stopped arriving" } else { "" }
    );
    // Wanted VIPs first, then any still announced that nothing wants any more.
    let rows: Vec<Vec<String>> = r
        .wanted
        .keys()
        .chain(r.announced.iter().filter(|a| !r.wanted.contains_key(*a)))
        .map(|vip| {
            vec![
                vip.clone(),
                r.wanted.get(vip).map(|s| s.join(",")).unwrap_or_else(|| "-".into()),
                if r.announced.contains(vip) { "yes" } else { "no" }.into(),
            ]
        })
        .collect();
    if rows.is_empty() {
        let _ = writeln!(out, "announced    nothing");
    } else {
        out.push_str(&table(&["vip", "wanted by", "announced"], &rows));
    }
    if r.route_errors > 0 || r.last_error.is_some() {
        let _ = writeln!(
            out,
            "route table  {} failed update(s){}",
            r.route_errors,
            r.last_error.as_ref().map(|e| format!("; now: {e}")).unwrap_or_default()
        );
    }
    if let Some(b) = &r.bird {
        let _ = writeln!(out, "bird         {}: {}", if b.up { "up" } else { "DOWN" }, b.detail);
    }
    let rows: Vec<Vec<String>> =
        r.fingerprints.iter().map(|(s, f)| vec![s.clone(), f.clone()]).collect();
    out.push_str(&table(&["service", "table fingerprint"], &rows));
    if let Some(s) = &r.fleet_sync {
        out.push_str(&fleet_sync(s));
    }
    out
}

/// The fleet-sync part of `spillwayctl instance`.
fn fleet_sync(s: &SyncReply) -> String {
    let mut out = String::new();
    let bulk = match (s.status.bulk.as_str(), s.bulk_ms) {
        (b, Some(ms)) => format!("{b} in {:.2} s", ms as f64 / 1000.0),
        (b, None) => b.to_string(),
    };
    let _ = writeln!(
        out,
        "fleet sync   bulk sync {bulk}; {} entries sent, {} received",
        s.entries_sent, s.entries_received
    );
    if !s.refused.is_empty() {
        let list: Vec<String> = s.refused.iter().map(|(r, n)| format!("{r} {n}")).collect();
        let _ = writeln!(out, "             refused: {}", list.join(", "));
    }
    let rows: Vec<Vec<String>> = s
        .status
        .peers
        .iter()
        .map(|p| {
            vec![
                p.id.to_string(),
                p.address.clone(),
                if p.up { "up" } else { "DOWN" }.into(),
                p.last_hello_ms.map_or_else(|| "never".into(), |ms| format!("{ms} ms ago")),
                p.entries_received.to_string(),
                if p.bulk_answered { "yes" } else { "no" }.into(),
            ]
        })
        .collect();
    out.push_str(&table(
        &["peer", "address", "state", "last hello", "received", "bulk answered"],
        &rows,
    ));
    out
}

/// `spillwayctl compare`: the instances' table fingerprints side by side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Comparison {
    /// One row per service (every service any instance has), one column per instance, and
    /// whether they agree.
    pub table: String,
    /// The services whose fingerprints differ, or that some instance lacks.
    pub differ: Vec<String>,
}

/// Compare the fingerprints of `replies`, the answers of the instances at `admins` (in that
/// order).
pub fn compare(admins: &[String], replies: &[InstanceReply]) -> Comparison {
    let services: BTreeSet<&String> = replies.iter().flat_map(|r| r.fingerprints.keys()).collect();
    let mut header = vec!["service"];
    header.extend(admins.iter().map(String::as_str));
    header.push("agree");
    let mut differ = Vec::new();
    let rows: Vec<Vec<String>> = services
        .iter()
        .map(|svc| {
            let values: Vec<Option<&String>> =
                replies.iter().map(|r| r.fingerprints.get(*svc)).collect();
            let agree = values.iter().all(|v| v.is_some() && *v == values[0]);
            if !agree {
                differ.push((*svc).clone());
            }
            let mut row = vec![(*svc).clone()];
            row.extend(values.iter().map(|v| v.cloned().unwrap_or_else(|| "(none)".into())));
            row.push(if agree { "yes" } else { "NO" }.into());
            row
        })
        .collect();
    Comparison { table: table(&header, &rows), differ }
}

/// `spillwayctl compare --json`: the instances, their fingerprints, the services that differ.
pub fn compare_json(admins: &[String], replies: &[InstanceReply], differ: &[String]) -> String {
    let out = serde_json::json!({
        "instances": admins,
        "fingerprints": replies.iter().map(|r| &r.fingerprints).collect::<Vec<_>>(),
        "differ": differ,
    });
    serde_json::to_string_pretty(&out).unwrap_or_default()
}

/// What `spillwayctl compare` says on stderr when the instances' tables differ.
pub fn tables_differ(differ: &[String]) -> String {
    format!(
        "spillwayctl: the instances' tables differ for {}: a flow that ECMP moves between \
         them may change backend (check the configuration, dataplane.hash_seed and the \
         health verdicts: `spillwayctl backends` on each)",
        differ.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::DeserializeOwned;
    use serde_json::json;

    /// A reply from its JSON, as the CLI receives it.
    fn reply<T: DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).expect("a reply of the API's shape")
    }

    fn backend(service: &str, address: &str, port: u16) -> serde_json::Value {
        json!({
            "service": service, "address": address, "port": port, "group": "g-a",
            "zone": "zone-a", "role": "primary", "probe": "healthy", "override": "auto",
            "healthy": true, "drained": false, "status": "active", "weight": 1, "slot": 0,
            "generation": 1, "eligible": true,
        })
    }

    #[test]
    fn status_is_one_field_per_line() {
        let mut s = json!({
            "uptime_ms": 3_725_000, "generation": 7, "config": "/etc/spillway/spillway.yaml",
            "workers": 2, "services": 3, "advanced_services": 0, "auto_drained_groups": 0,
            "backends": {"total": 9, "healthy": 8, "drained": 1, "draining": 1},
            "conntrack": {"entries": 30, "capacity": 8192}, "worker_generations": [7, 7],
        });
        assert_eq!(
            status(&reply(s.clone())),
            "FIELD       VALUE\n\
             uptime      1h02m05s\n\
             generation  7\n\
             config      /etc/spillway/spillway.yaml\n\
             workers     2\n\
             services    3\n\
             backends    8/9 healthy, 1 drained, 1 draining\n\
             conntrack   30 entries, capacity 8192\n"
        );
        s["advanced_services"] = json!(1);
        s["auto_drained_groups"] = json!(2);
        assert!(
            status(&reply(s)).contains("\nservices    3 (1 advanced, 2 group(s) auto-drained)\n")
        );
    }

    fn policy(zonal: &str, ratio: Option<f64>) -> serde_json::Value {
        json!({
            "session_affinity": "CLIENT_IP", "symmetric_hashing": false,
            "tracking_mode": "PER_SESSION", "persistence": "DEFAULT_FOR_PROTOCOL",
            "idle_timeout_sec": 600, "draining_timeout_sec": 0, "has_failover_groups": false,
            "failover_ratio": 0.0, "drop_traffic_if_unhealthy": false,
            "disable_connection_drain_on_failover": false, "zonal_affinity": zonal,
            "spillover_ratio": ratio, "encapsulation": "IPIP",
        })
    }

    fn service(name: &str, id: u16, policy: serde_json::Value) -> serde_json::Value {
        json!({
            "name": name, "id": id, "policy": policy, "epoch": 0,
            "rules": [{"destination": "198.51.100.10", "protocol": "TCP", "ports": "80,443"}],
            "eligible_kind": "HealthyPrimary", "eligible_size": 2, "eligible": [],
            "default_size": 2, "table_fingerprint": "0x0000000000000001",
            "zones": [
                {"zone": "zone-a", "zonal_match": true, "spilled": false, "size": 1},
                {"zone": "zone-b", "zonal_match": false, "spilled": false, "size": 2},
            ],
        })
    }

    #[test]
    fn services_list_zones_only_with_zonal_affinity() {
        let web = service("web", 0, policy("ZONAL_AFFINITY_SPILL_CROSS_ZONE", Some(0.6)));
        let mut dns = service("dns", 1, policy("ZONAL_AFFINITY_DISABLED", None));
        dns["rules"] = json!([
            {"destination": "198.51.100.53", "protocol": "UDP", "ports": "53"},
            {"destination": "198.51.100.0/24", "protocol": "L3_DEFAULT", "ports": "ALL"},
        ]);
        let r = reply(json!({"generation": 3, "services": [web, dns]}));
        assert_eq!(
            services(&r),
            "SERVICE  ID  ELIGIBLE        SIZE  AFFINITY   TRACKING     ZONAL                 RULES\n\
             web      0   HealthyPrimary  2     CLIENT_IP  PER_SESSION  SPILL_CROSS_ZONE 0.6  198.51.100.10 TCP 80,443\n\
             dns      1   HealthyPrimary  2     CLIENT_IP  PER_SESSION  DISABLED              198.51.100.53 UDP 53; 198.51.100.0/24 L3_DEFAULT ALL\n\
             \n\
             SERVICE  CLIENT ZONE  ZONAL MATCH  SPILLED  SIZE\n\
             web      zone-a       yes          no       1\n\
             web      zone-b       no           no       2\n"
        );
        let r = reply(json!({"generation": 3, "services": []}));
        assert_eq!(services(&r), "SERVICE  ID  ELIGIBLE  SIZE  AFFINITY  TRACKING  ZONAL  RULES\n");
    }

    #[test]
    fn an_advanced_service_shows_its_groups_and_each_client_zones_split() {
        let mut api = service("api", 2, policy("ZONAL_AFFINITY_DISABLED", None));
        api["advanced"] = json!({
            "algorithm": "WATERFALL_BY_REGION", "unit": "new_connections_per_second",
            "failover_health_threshold": 70,
            "groups": [
                {"name": "api-a", "zone": "zone-a", "preferred": true, "endpoints": 2,
                 "healthy": 2, "capacity": 1000.0, "utilisation": 0.25, "measured": 250.0,
                 "expected_load": 312.5, "auto_drained": false, "retained": 1.0},
                {"name": "api-b", "zone": "zone-b", "preferred": false, "endpoints": 1,
                 "healthy": 0, "capacity": null, "utilisation": null, "measured": 0.0,
                 "expected_load": 0.0, "auto_drained": true, "retained": 0.5},
            ],
            "clients": [
                {"zone": "zone-a", "demand": 200.0, "shares": {"api-a": 0.6, "api-b": 0.4}},
                {"zone": null, "demand": 0.0, "shares": {"api-a": 0.0}},
            ],
        });
        let out = services(&reply(json!({"generation": 3, "services": [api]})));
        let advanced = out.split("\n\n").nth(1).expect("a section after the services");
        assert_eq!(
            advanced,
            "api: advanced WATERFALL_BY_REGION, failover threshold 70%, loads in new conn/s\n\
             GROUP              ZONE    HEALTHY  CAPACITY   MEASURED  EXPECTED  UTILISATION  DRAINED  RETAINED\n\
             api-a (preferred)  zone-a  2/2      1000       250       312.5     25.0%        no       100.0%\n\
             api-b              zone-b  0/1      unbounded  0         0         -            yes      50.0%\n\
             CLIENT ZONE  DEMAND  SPLIT\n\
             zone-a       200     api-a 60.0%, api-b 40.0%\n\
             (no zone)    0       none (falls back to the eligible set)\n"
        );
    }

    #[test]
    fn backends_show_the_port_when_set_and_what_is_left_of_a_drain() {
        let mut draining = backend("dns", "10.0.4.1", 5353);
        draining["status"] = json!("draining");
        draining["draining_remaining_ms"] = json!(125_000);
        draining["weight"] = json!(null);
        draining["drained"] = json!(true);
        draining["healthy"] = json!(false);
        draining["eligible"] = json!(false);
        draining["slot"] = json!(4);
        let rows: Vec<BackendInfo> = vec![reply(backend("web", "10.0.1.1", 0)), reply(draining)];
        assert_eq!(
            backends(&rows),
            "SERVICE  BACKEND        GROUP  ZONE    ROLE     PROBE    OVERRIDE  HEALTH     DRAINED  STATUS                 WEIGHT  SLOT  ELIGIBLE\n\
             web      10.0.1.1       g-a    zone-a  primary  healthy  auto      healthy    no       active                 1       0     yes\n\
             dns      10.0.4.1:5353  g-a    zone-a  primary  healthy  auto      unhealthy  yes      draining (2m05s left)  -       4     no\n"
        );
        let r: ActionReply =
            reply(json!({"generation": 12, "backends": [backend("web", "10.0.1.1", 0)]}));
        assert!(action(&r).ends_with("yes\nsnapshot generation 12\n"), "{}", action(&r));
        let r: ActionReply = reply(json!({"generation": 12, "backends": []}));
        assert_eq!(
            action(&r),
            "SERVICE  BACKEND  GROUP  ZONE  ROLE  PROBE  OVERRIDE  HEALTH  DRAINED  STATUS  WEIGHT  SLOT  ELIGIBLE\n\
             snapshot generation 12\n"
        );
    }

    #[test]
    fn a_reload_lists_what_changed_or_says_nothing_did() {
        let r: ReloadReply = reply(json!({
            "generation": 9, "services": 3, "added": ["web/10.0.1.3"],
            "removed": [{"backend": "web/10.0.2.2", "draining_deadline_ms": 300_000}],
            "undrained": ["dns/10.0.4.2:5353"],
        }));
        assert_eq!(
            reload(&r),
            "configuration reloaded: generation 9, 3 service(s)\n  \
             added      web/10.0.1.3\n  \
             removed    web/10.0.2.2 (draining until 5m00s)\n  \
             re-added   dns/10.0.4.2:5353 (was draining: connections kept)\n"
        );
        let r: ReloadReply = reply(json!({
            "generation": 10, "services": 3, "added": [], "removed": [], "undrained": [],
        }));
        assert_eq!(
            reload(&r),
            "configuration reloaded: generation 10, 3 service(s)\n  no backend added or removed\n"
        );
    }

    #[test]
    fn neighbours_and_conntrack_are_tables() {
        let r: NeighboursReply = reply(json!({
            "neighbours": [{"addr": "10.0.0.1", "mac": "02:00:00:00:00:01"}],
            "answers": {"learned": 4, "confirmed": 30},
        }));
        assert_eq!(
            neighbours(&r),
            "next hop  mac\n10.0.0.1  02:00:00:00:00:01\nanswers: confirmed 30, learned 4\n"
        );
        let r: NeighboursReply = reply(json!({"neighbours": [], "answers": {}}));
        assert_eq!(neighbours(&r), "next hop  mac\nanswers: \n");
        let w = |worker: usize, entries: u64| {
            json!({"worker": worker, "entries": entries, "capacity": 4096, "inserts": 100,
                   "evictions": 0})
        };
        let r: ConntrackReply = reply(json!({"workers": [w(0, 10), w(1, 20)], "total": w(2, 30)}));
        assert_eq!(
            conntrack(&r),
            "WORKER  ENTRIES  CAPACITY  INSERTS  EVICTIONS\n\
             0       10       4096      100      0\n\
             1       20       4096      100      0\n\
             total   30       4096      100      0\n"
        );
    }

    #[test]
    fn a_lookup_shows_every_workers_answer_and_marks_a_stale_reference() {
        let entry = json!({
            "backend": "10.0.2.1", "backend_service": "web", "slot": 3, "generation": 2,
            "current_generation": false, "idle_ms": 1234, "epoch": 1, "created_unhealthy": false,
        });
        let r: FlowLookupReply = reply(json!({
            "flow": "tcp 192.0.2.7:40000 -> 198.51.100.10:80", "service": "web",
            "tracking_key": "2-tuple 192.0.2.7 -> 198.51.100.10",
            "tracking_hash": "0x0000000000000001",
            "workers": [
                {"worker": 0, "state": "absent", "entry": null},
                {"worker": 1, "state": "found", "entry": entry},
                {"worker": 2, "state": "no_answer", "entry": null},
            ],
        }));
        assert_eq!(
            lookup(&r),
            "flow          tcp 192.0.2.7:40000 -> 198.51.100.10:80\n\
             service       web\n\
             tracking key  2-tuple 192.0.2.7 -> 198.51.100.10\n\
             \n\
             WORKER  STATE      BACKEND   IDLE_MS  SLOT/GEN     EPOCH\n\
             0       absent     -         -        -            -\n\
             1       found      10.0.2.1  1234     3/2 (stale)  1\n\
             2       no_answer  -         -        -            -\n"
        );
    }

    fn explanation() -> serde_json::Value {
        json!({
            "flow": "tcp 192.0.2.7:40000 -> 198.51.100.10:80", "generation": 7,
            "service": "web", "client_zone": "zone-a", "eligible_kind": "HealthyPrimary",
            "zonal_match": true, "spilled": false, "eligible_size": 2,
            "new_connection_syn": false, "tracking_key": "2-tuple 192.0.2.7 -> 198.51.100.10",
            "tracking_hash": "0x01", "selection_hash": "0x02", "hashed_backend": "10.0.1.1",
            "workers_asked": 3, "workers_answered": 2, "entry": null, "backend": "10.0.1.1",
            "reason": "new_connection",
        })
    }

    #[test]
    fn an_explanation_says_why_there_is_no_entry_or_whether_it_holds() {
        assert_eq!(
            explain(&reply(explanation())),
            "FIELD           VALUE\n\
             flow            tcp 192.0.2.7:40000 -> 198.51.100.10:80\n\
             service         web\n\
             client zone     zone-a\n\
             eligible set    HealthyPrimary\n\
             zonal match     yes\n\
             spilled         no\n\
             final set size  2\n\
             tracking key    2-tuple 192.0.2.7 -> 198.51.100.10\n\
             hashed backend  10.0.1.1\n\
             entry           none (2 of 3 worker(s) answered)\n\
             backend now     10.0.1.1\n\
             reason          new_connection\n\
             generation      7\n"
        );
        let mut x = explanation();
        x["new_connection_syn"] = json!(true);
        assert!(explain(&reply(x))
            .contains("\nentry           not looked up (new-connection SYN, CT-2)\n"));
        let mut x = explanation();
        x["entry"] = json!({
            "worker": 1, "valid": false, "invalid_reason": "replaced_unhealthy",
            "entry": {"backend": "10.0.2.1", "backend_service": "web", "slot": 3,
                      "generation": 2, "current_generation": true, "idle_ms": 1234,
                      "epoch": 1, "created_unhealthy": false},
        });
        assert!(explain(&reply(x.clone())).contains(
            "\nentry           10.0.2.1 on worker 1, idle 1234 ms: invalid (replaced_unhealthy)\n"
        ));
        x["entry"]["invalid_reason"] = json!(null);
        assert!(explain(&reply(x)).contains("ms: valid\n"));
        // No rule: every field the decision core could not fill is `-`.
        let mut x = explanation();
        for f in
            ["service", "client_zone", "eligible_kind", "tracking_key", "hashed_backend", "backend"]
        {
            x[f] = json!(null);
        }
        let out = explain(&reply(x));
        assert!(
            out.contains("\nservice         -\n") && out.contains("\nbackend now     -\n"),
            "{out}"
        );
    }

    #[test]
    fn an_advanced_explanation_adds_the_split_and_the_backends_group() {
        let mut x = explanation();
        x["group_shares"] = json!({"api-a": 0.25, "api-b": 0.75, "api-c": 0.0});
        x["backend_group"] = json!("api-b");
        let out = explain(&reply(x.clone()));
        let fields: Vec<&str> = out.lines().map(|l| l.split("  ").next().unwrap_or("")).collect();
        assert_eq!(
            fields,
            [
                "FIELD",
                "flow",
                "service",
                "client zone",
                "eligible set",
                "zonal match",
                "spilled",
                "final set size",
                "advanced split",
                "tracking key",
                "hashed backend",
                "entry",
                "backend now",
                "backend group",
                "reason",
                "generation",
            ]
        );
        assert!(out.contains("\nadvanced split  api-b 75.0%, api-a 25.0%\n"), "{out}");
        assert!(out.contains("\nbackend group   api-b\n"), "{out}");
        x["group_shares"] = json!({"api-a": 0.0});
        x["backend_group"] = json!(null);
        let out = explain(&reply(x));
        assert!(out.contains("\nadvanced split  none (falls back to the eligible set)\n"), "{out}");
        assert!(out.contains("\nbackend group   -\n"), "{out}");
    }

    fn instance_reply() -> serde_json::Value {
        json!({
            "phase": "serving", "in_phase_sec": 12.34, "waiting_for": null,
            "quiet_for_sec": 0.05, "traffic_stopped": false,
            "wanted": {"198.51.100.10": ["web", "ssh"]},
            "announced": ["198.51.100.10", "198.51.100.99"], "route_errors": 0,
            "last_error": null, "bird": null,
            "fingerprints": {"ssh": "0x0000000000000002", "web": "0x0000000000000001"},
        })
    }

    #[test]
    fn an_instance_shows_its_phase_vips_and_fingerprints() {
        assert_eq!(
            instance(&reply(instance_reply())),
            "phase        serving (for 12.3 s)\n\
             traffic      last packet forwarded 0.1 s ago\n\
             vip            wanted by  announced\n\
             198.51.100.10  web,ssh    yes\n\
             198.51.100.99  -          yes\n\
             service  table fingerprint\n\
             ssh      0x0000000000000002\n\
             web      0x0000000000000001\n"
        );
        let mut r = instance_reply();
        r["phase"] = json!("drained");
        r["waiting_for"] = json!("the first health verdicts");
        r["traffic_stopped"] = json!(true);
        r["quiet_for_sec"] = json!(6.0);
        r["wanted"] = json!({});
        r["announced"] = json!([]);
        r["route_errors"] = json!(2);
        r["last_error"] = json!("netlink: permission denied");
        r["bird"] = json!({"up": false, "detail": "connect: no such file"});
        r["fingerprints"] = json!({});
        assert_eq!(
            instance(&reply(r)),
            "phase        drained (for 12.3 s)\n\
             waiting for  the first health verdicts\n\
             traffic      last packet forwarded 6.0 s ago: stopped arriving\n\
             announced    nothing\n\
             route table  2 failed update(s); now: netlink: permission denied\n\
             bird         DOWN: connect: no such file\n\
             service  table fingerprint\n"
        );
    }

    #[test]
    fn an_instance_with_fleet_sync_shows_its_bulk_sync_and_peers() {
        let mut r = instance_reply();
        r["fingerprints"] = json!({});
        r["fleet_sync"] = json!({
            "bulk": "done", "bulk_ms": 506, "entries_sent": 12, "entries_received": 8,
            "scanned_generation": 9, "refused": {"auth_failed": 3},
            "peers": [
                {"id": 2, "address": "198.18.0.12", "up": true, "last_hello_ms": 420,
                 "entries_received": 8, "bulk_answered": true},
                {"id": 3, "address": "198.18.0.13", "up": false, "last_hello_ms": null,
                 "entries_received": 0, "bulk_answered": false},
            ],
        });
        let out = instance(&reply(r));
        let tail = out.split_once("service  table fingerprint\n").expect("the fingerprints").1;
        assert_eq!(
            tail,
            "fleet sync   bulk sync done in 0.51 s; 12 entries sent, 8 received\n\
             \x20            refused: auth_failed 3\n\
             peer  address      state  last hello  received  bulk answered\n\
             2     198.18.0.12  up     420 ms ago  8         yes\n\
             3     198.18.0.13  DOWN   never       0         no\n"
        );
    }

    #[test]
    fn compare_names_the_services_whose_tables_differ_or_are_missing() {
        let one = |fp: serde_json::Value| -> InstanceReply {
            let mut r = instance_reply();
            r["fingerprints"] = fp;
            reply(r)
        };
        let admins = vec!["unix:/run/a.sock".to_owned(), "10.0.0.3:9100".to_owned()];
        let replies = vec![
            one(json!({"web": "0x01", "dns": "0x03", "ssh": "0x05"})),
            one(json!({"web": "0x01", "dns": "0x04"})),
        ];
        let c = compare(&admins, &replies);
        assert_eq!(
            c.table,
            "service  unix:/run/a.sock  10.0.0.3:9100  agree\n\
             dns      0x03              0x04           NO\n\
             ssh      0x05              (none)         NO\n\
             web      0x01              0x01           yes\n"
        );
        assert_eq!(c.differ, ["dns", "ssh"]);
        assert_eq!(
            tables_differ(&c.differ),
            "spillwayctl: the instances' tables differ for dns, ssh: a flow that ECMP moves \
             between them may change backend (check the configuration, dataplane.hash_seed and \
             the health verdicts: `spillwayctl backends` on each)"
        );
        let json: serde_json::Value =
            serde_json::from_str(&compare_json(&admins, &replies, &c.differ)).expect("JSON");
        assert_eq!(json["instances"], json!(admins));
        assert_eq!(json["fingerprints"][1], json!({"web": "0x01", "dns": "0x04"}));
        assert_eq!(json["differ"], json!(["dns", "ssh"]));
        let same = compare(&admins, &[one(json!({"web": "0x01"})), one(json!({"web": "0x01"}))]);
        assert!(same.differ.is_empty());
        assert!(same.table.ends_with("web      0x01              0x01           yes\n"));
    }

    #[test]
    fn pretty_indents_json_and_leaves_anything_else_as_it_came() {
        assert_eq!(
            pretty(r#"{"error":"no such endpoint"}"#),
            "{\n  \"error\": \"no such endpoint\"\n}"
        );
        assert_eq!(pretty("not json\n\n"), "not json");
    }

    #[test]
    fn a_capture_summary_says_what_was_written_lost_and_why_it_stopped() {
        let s = CaptureSummary {
            id: 3,
            running: false,
            filter: "vip=198.18.0.10 point=received,sent".into(),
            packets: 120,
            received: 60,
            sent: 60,
            dropped: 0,
            lost: 4,
            discarded: 0,
            bytes: 20480,
            duration_ms: 1500,
            stopped_by: Some(StoppedBy::ClientGone),
        };
        assert_eq!(
            capture(&s),
            "capture 3: 120 packets (received 60, sent 60, dropped 0), 20480 bytes in 1.500s; \
             stopped by client gone\n\
             filter: vip=198.18.0.10 point=received,sent\n\
             lost: 4 packets the workers' capture rings had no room for (narrow the filter)\n"
        );
        let quiet = CaptureSummary { lost: 0, stopped_by: None, ..s };
        assert!(capture(&quiet).contains("stopped by still running"));
        assert!(!capture(&quiet).contains("lost"));
    }
}
