//! Lcores: the EAL lcores of `-l`/`--lcores`/`-c` and the CPUs they run on, the main lcore,
//! and each worker's lcore (`dataplane.lcores`, else the first `workers` non-main lcores, as
//! the daemon picks them): enabled, not the main lcore, on a CPU this host has, alone on its
//! CPU, and isolated from the kernel's housekeeping.

use std::collections::BTreeMap;

use spillway_control::config::DataplaneConfig;

use super::eal::{format_list, EalArgs, MAX_LCORE};
use super::host::Host;
use super::Finding;

/// A worker's lcore, as the daemon would place it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerLcore {
    /// The configuration field that puts it there (`dataplane.lcores[1]`).
    pub field: String,
    /// The lcore id.
    pub lcore: u32,
    /// The CPUs it may run on.
    pub cpus: Vec<u32>,
}

/// Where the threads run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// The main lcore (the control thread) and its CPUs.
    pub main: Option<(u32, Vec<u32>)>,
    /// The workers whose lcores EAL enables (the others are FAIL findings).
    pub workers: Vec<WorkerLcore>,
}

/// The placement, and the findings about it.
pub fn check(dp: &DataplaneConfig, eal: &EalArgs, host: &Host) -> (Placement, Vec<Finding>) {
    let mut out = Vec::new();
    let online = host.cpu_list("online");
    let online_text = online.as_deref().map_or("unknown".to_owned(), format_list);
    let (enabled, given): (BTreeMap<u32, Vec<u32>>, String) = match (&eal.lcores, &online) {
        (Some(map), _) => (map.clone(), eal.lcores_arg.clone().unwrap_or_default()),
        (None, Some(cpus)) => (
            cpus.iter().map(|&c| (c, vec![c])).collect(),
            "no -l/--lcores/-c: every online CPU".to_owned(),
        ),
        (None, None) => (BTreeMap::new(), "no -l/--lcores/-c".to_owned()),
    };
    let main = eal.main_lcore.or_else(|| enabled.keys().next().copied());
    let lcore_fix = format!(
        "list lcores in -l (or map them with --lcores) in dataplane.eal_args using the online \
         CPUs {online_text}"
    );

    // The EAL lcore set itself: EAL refuses to start on a CPU it cannot find.
    let too_big: Vec<u32> = enabled.keys().copied().filter(|&l| l >= MAX_LCORE).collect();
    let missing: Vec<u32> = match &online {
        Some(on) => {
            enabled.values().flatten().copied().filter(|c| !on.contains(c)).collect::<Vec<_>>()
        }
        None => Vec::new(),
    };
    if !too_big.is_empty() {
        out.push(
            Finding::fail(
                "lcore",
                format!(
                    "dataplane.eal_args: {given}: lcore id(s) {} are beyond EAL's limit of \
                     {MAX_LCORE}",
                    format_list(&too_big)
                ),
            )
            .fix("use --lcores 'LCORE@CPU' with lcore ids below 128"),
        );
    }
    if !missing.is_empty() {
        out.push(
            Finding::fail(
                "lcore",
                format!(
                    "dataplane.eal_args: {given}: CPU(s) {} do not exist or are offline on \
                     this host (online CPUs: {online_text}): EAL refuses to start",
                    format_list(&missing)
                ),
            )
            .fix(lcore_fix.clone()),
        );
    }
    let main_cpus = main.and_then(|m| enabled.get(&m).cloned());
    match (main, &main_cpus) {
        (Some(m), None) => out.push(
            Finding::fail(
                "lcore",
                format!(
                    "dataplane.eal_args: --main-lcore {m} is not one of the EAL lcores \
                     ({given})"
                ),
            )
            .fix("set --main-lcore to a lcore of -l/--lcores that runs no worker"),
        ),
        (Some(m), Some(cpus)) if too_big.is_empty() && missing.is_empty() => {
            out.push(Finding::pass(
                "lcore",
                format!(
                    "dataplane.eal_args: {given}: main lcore {m} (the control thread) on CPU \
                     {}, {} worker lcore(s) available",
                    format_list(cpus),
                    enabled.len() - 1
                ),
            ));
        }
        (None, _) => out.push(
            Finding::warn(
                "lcore",
                format!("dataplane.eal_args: {given}, and /sys does not list the online CPUs"),
            )
            .fix("give -l explicitly"),
        ),
        _ => {}
    }

    // The workers, as the daemon picks them.
    let available: Vec<u32> = enabled.keys().copied().filter(|&l| Some(l) != main).collect();
    let wanted: Vec<(String, u32)> = match &dp.lcores {
        Some(list) => {
            list.iter().enumerate().map(|(i, &l)| (format!("dataplane.lcores[{i}]"), l)).collect()
        }
        None => {
            let count = usize::from(dp.worker_count());
            if count > available.len() {
                out.push(
                    Finding::fail(
                        "lcore",
                        format!(
                            "dataplane.workers: {count} worker(s) need {count} EAL worker \
                             lcore(s), but dataplane.eal_args ({given}) leave {} besides the \
                             main lcore ({})",
                            available.len(),
                            format_list(&available)
                        ),
                    )
                    .fix(lcore_fix.clone()),
                );
            }
            available
                .iter()
                .take(count)
                .enumerate()
                .map(|(i, &l)| (format!("dataplane.workers (worker {i})"), l))
                .collect()
        }
    };
    let mut placement = Placement { main: main.zip(main_cpus.clone()), workers: Vec::new() };
    for (field, lcore) in wanted {
        if Some(lcore) == main {
            out.push(
                Finding::fail(
                    "lcore",
                    format!(
                        "{field}: lcore {lcore} is the main lcore, which runs the control \
                         thread, not a worker"
                    ),
                )
                .fix(format!(
                    "pick another lcore of {given}, or move the main lcore with --main-lcore"
                )),
            );
            continue;
        }
        let Some(cpus) = enabled.get(&lcore) else {
            out.push(
                Finding::fail(
                    "lcore",
                    format!(
                        "{field}: lcore {lcore} is not an EAL lcore (dataplane.eal_args: \
                         {given})"
                    ),
                )
                .fix(format!("add lcore {lcore} to -l/--lcores in dataplane.eal_args")),
            );
            continue;
        };
        placement.workers.push(WorkerLcore { field, lcore, cpus: cpus.clone() });
    }

    // Each worker: a CPU that exists, its own, isolated.
    let isolated = host.cpu_list("isolated").unwrap_or_default();
    let nohz = host.cpu_list("nohz_full").unwrap_or_default();
    // The main lcore's CPUs do the kernel's housekeeping: never suggest isolating them.
    let on_main = |c: &u32| main_cpus.as_ref().is_some_and(|m| m.contains(c));
    let worker_cpus: Vec<u32> =
        placement.workers.iter().flat_map(|w| w.cpus.clone()).filter(|c| !on_main(c)).collect();
    let cpus_text = format_list(&worker_cpus);
    let isolation_fix = format!(
        "boot with isolcpus={cpus_text} nohz_full={cpus_text} rcu_nocbs={cpus_text} on the \
         kernel command line, and keep IRQs off those CPUs (IRQBALANCE_BANNED_CPULIST=\
         {cpus_text}, or /proc/irq/*/smp_affinity_list)"
    );
    for w in &placement.workers {
        let (field, lcore, cpus) = (&w.field, w.lcore, &w.cpus);
        let on = format!("lcore {lcore} on CPU {}", format_list(cpus));
        if let Some(on_line) = &online {
            let absent: Vec<u32> = cpus.iter().copied().filter(|c| !on_line.contains(c)).collect();
            if !absent.is_empty() {
                out.push(
                    Finding::fail(
                        "lcore",
                        format!(
                            "{field}: {on}: CPU {} does not exist or is offline (online CPUs: \
                             {online_text})",
                            format_list(&absent)
                        ),
                    )
                    .fix(lcore_fix.clone()),
                );
                continue;
            }
        }
        let mut shared = Vec::new();
        if main_cpus.as_ref().is_some_and(|m| m.iter().any(|c| cpus.contains(c))) {
            shared.push("the main lcore (control thread)".to_owned());
        }
        for other in &placement.workers {
            if other.lcore != lcore && other.cpus.iter().any(|c| cpus.contains(c)) {
                shared.push(format!("worker lcore {} ({})", other.lcore, other.field));
            }
        }
        let mut fine = true;
        if !shared.is_empty() {
            fine = false;
            out.push(
                Finding::warn(
                    "lcore",
                    format!(
                        "{field}: {on} shares it with {}: the poll loops take turns",
                        shared.join(" and ")
                    ),
                )
                .fix("give every worker a CPU of its own (-l, or --lcores 'LCORE@CPU')"),
            );
        }
        let not_isolated = cpus.iter().any(|c| !isolated.contains(c));
        let not_nohz = cpus.iter().any(|c| !nohz.contains(c));
        // On the main lcore's CPU, sharing is the problem (above), not isolation.
        if (not_isolated || not_nohz) && !cpus.iter().any(on_main) {
            fine = false;
            let what = if not_isolated {
                format!(
                    "is not isolated (isolated CPUs: {}; nohz_full: {}): the scheduler, timer \
                     ticks, RCU callbacks and IRQs interrupt the poll loop",
                    format_list(&isolated),
                    format_list(&nohz)
                )
            } else {
                format!(
                    "is isolated but not nohz_full (nohz_full: {}): the timer tick still \
                     interrupts the poll loop",
                    format_list(&nohz)
                )
            };
            out.push(
                Finding::warn("lcore", format!("{field}: {on} {what}")).fix(isolation_fix.clone()),
            );
        }
        if fine {
            let node = cpus.first().and_then(|&c| host.cpu_node(c));
            out.push(Finding::pass(
                "lcore",
                format!(
                    "{field}: {on}{}: its own CPU, isolated and nohz_full",
                    node.map_or(String::new(), |n| format!(" (NUMA node {n})"))
                ),
            ));
        }
    }
    (placement, out)
}
