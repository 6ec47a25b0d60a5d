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
    let lcores = Lcores::new(eal, host);
    let set_ok = lcores.lcore_set(&mut out);
    lcores.main_lcore(set_ok, &mut out);
    let wanted = lcores.wanted(dp, &mut out);
    let placement = lcores.place(wanted, &mut out);
    lcores.worker_cpus(&placement, &mut out);
    (placement, out)
}

/// What every step reads: EAL's lcores, the main lcore, and the host's online CPUs.
struct Lcores<'a> {
    host: &'a Host,
    /// The online CPUs, when /sys lists them.
    online: Option<Vec<u32>>,
    /// `online` for messages.
    online_text: String,
    /// The lcores EAL enables and the CPUs each runs on.
    enabled: BTreeMap<u32, Vec<u32>>,
    /// How `dataplane.eal_args` gives the lcores, for messages.
    given: String,
    /// The main lcore, and its CPUs when it is one of `enabled`.
    main: Option<u32>,
    main_cpus: Option<Vec<u32>>,
    /// The fix for a lcore on a CPU this host does not have.
    lcore_fix: String,
}

impl<'a> Lcores<'a> {
    fn new(eal: &EalArgs, host: &'a Host) -> Lcores<'a> {
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
        let main_cpus = main.and_then(|m| enabled.get(&m).cloned());
        let lcore_fix = format!(
            "list lcores in -l (or map them with --lcores) in dataplane.eal_args using the online \
             CPUs {online_text}"
        );
        Lcores { host, online, online_text, enabled, given, main, main_cpus, lcore_fix }
    }

    /// Whether CPU `c` runs the main lcore. Those CPUs do the kernel's housekeeping.
    fn on_main(&self, c: &u32) -> bool {
        self.main_cpus.as_ref().is_some_and(|m| m.contains(c))
    }

    /// The EAL lcore set itself: EAL refuses to start on a CPU it cannot find. True when every
    /// lcore id is within EAL's limit and every CPU is online (or the online CPUs are unknown).
    fn lcore_set(&self, out: &mut Vec<Finding>) -> bool {
        let (given, online_text) = (&self.given, &self.online_text);
        let too_big: Vec<u32> = self.enabled.keys().copied().filter(|&l| l >= MAX_LCORE).collect();
        let missing: Vec<u32> = match &self.online {
            Some(on) => {
                self.enabled.values().flatten().copied().filter(|c| !on.contains(c)).collect()
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
                .fix(self.lcore_fix.clone()),
            );
        }
        too_big.is_empty() && missing.is_empty()
    }

    /// The main lcore: one of the EAL lcores. It passes only when the lcore set does.
    fn main_lcore(&self, set_ok: bool, out: &mut Vec<Finding>) {
        let given = &self.given;
        match (self.main, &self.main_cpus) {
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
            (Some(m), Some(cpus)) if set_ok => {
                out.push(Finding::pass(
                    "lcore",
                    format!(
                        "dataplane.eal_args: {given}: main lcore {m} (the control thread) on CPU \
                         {}, {} worker lcore(s) available",
                        format_list(cpus),
                        self.enabled.len() - 1
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
    }

    /// The workers' lcores as the daemon picks them, each with the field that puts it there:
    /// `dataplane.lcores`, else the first `workers` non-main lcores.
    fn wanted(&self, dp: &DataplaneConfig, out: &mut Vec<Finding>) -> Vec<(String, u32)> {
        if let Some(list) = &dp.lcores {
            return list
                .iter()
                .enumerate()
                .map(|(i, &l)| (format!("dataplane.lcores[{i}]"), l))
                .collect();
        }
        let given = &self.given;
        let available: Vec<u32> =
            self.enabled.keys().copied().filter(|&l| Some(l) != self.main).collect();
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
                .fix(self.lcore_fix.clone()),
            );
        }
        available
            .iter()
            .take(count)
            .enumerate()
            .map(|(i, &l)| (format!("dataplane.workers (worker {i})"), l))
            .collect()
    }

    /// The placement: the main lcore, and each wanted lcore that EAL enables and that is not
    /// the main lcore (the others are FAIL findings).
    fn place(&self, wanted: Vec<(String, u32)>, out: &mut Vec<Finding>) -> Placement {
        let given = &self.given;
        let mut placement =
            Placement { main: self.main.zip(self.main_cpus.clone()), workers: Vec::new() };
        for (field, lcore) in wanted {
            if Some(lcore) == self.main {
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
            let Some(cpus) = self.enabled.get(&lcore) else {
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
        placement
    }

    /// Each worker: a CPU that exists, its own, isolated.
    fn worker_cpus(&self, placement: &Placement, out: &mut Vec<Finding>) {
        let isolation = Isolation::new(self, placement);
        for w in &placement.workers {
            let (field, lcore, cpus) = (&w.field, w.lcore, &w.cpus);
            let on = format!("lcore {lcore} on CPU {}", format_list(cpus));
            if !self.cpus_online(w, &on, out) {
                continue;
            }
            let own = self.own_cpus(w, &on, placement, out);
            let isolated = self.isolated(w, &on, &isolation, out);
            if own && isolated {
                let node = cpus.first().and_then(|&c| self.host.cpu_node(c));
                out.push(Finding::pass(
                    "lcore",
                    format!(
                        "{field}: {on}{}: its own CPU, isolated and nohz_full",
                        node.map_or(String::new(), |n| format!(" (NUMA node {n})"))
                    ),
                ));
            }
        }
    }

    /// Whether the worker's CPUs exist and are online (or the online CPUs are unknown); a FAIL
    /// when not.
    fn cpus_online(&self, w: &WorkerLcore, on: &str, out: &mut Vec<Finding>) -> bool {
        let Some(on_line) = &self.online else {
            return true;
        };
        let (field, online_text) = (&w.field, &self.online_text);
        let absent: Vec<u32> = w.cpus.iter().copied().filter(|c| !on_line.contains(c)).collect();
        if absent.is_empty() {
            return true;
        }
        out.push(
            Finding::fail(
                "lcore",
                format!(
                    "{field}: {on}: CPU {} does not exist or is offline (online CPUs: \
                     {online_text})",
                    format_list(&absent)
                ),
            )
            .fix(self.lcore_fix.clone()),
        );
        false
    }

    /// Whether the worker's CPUs are its own: shared with the main lcore or another worker,
    /// the poll loops take turns (a WARN).
    fn own_cpus(
        &self,
        w: &WorkerLcore,
        on: &str,
        placement: &Placement,
        out: &mut Vec<Finding>,
    ) -> bool {
        let (field, lcore, cpus) = (&w.field, w.lcore, &w.cpus);
        let mut shared = Vec::new();
        if self.main_cpus.as_ref().is_some_and(|m| m.iter().any(|c| cpus.contains(c))) {
            shared.push("the main lcore (control thread)".to_owned());
        }
        for other in &placement.workers {
            if other.lcore != lcore && other.cpus.iter().any(|c| cpus.contains(c)) {
                shared.push(format!("worker lcore {} ({})", other.lcore, other.field));
            }
        }
        if shared.is_empty() {
            return true;
        }
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
        false
    }

    /// Whether the worker's CPUs are isolated and nohz_full (a WARN when not). On the main
    /// lcore's CPU, sharing is the problem (`own_cpus`), not isolation.
    fn isolated(
        &self,
        w: &WorkerLcore,
        on: &str,
        isolation: &Isolation,
        out: &mut Vec<Finding>,
    ) -> bool {
        let (field, cpus) = (&w.field, &w.cpus);
        let not_isolated = cpus.iter().any(|c| !isolation.isolated.contains(c));
        let not_nohz = cpus.iter().any(|c| !isolation.nohz.contains(c));
        if !(not_isolated || not_nohz) || cpus.iter().any(|c| self.on_main(c)) {
            return true;
        }
        let what = if not_isolated {
            format!(
                "is not isolated (isolated CPUs: {}; nohz_full: {}): the scheduler, timer \
                 ticks, RCU callbacks and IRQs interrupt the poll loop",
                format_list(&isolation.isolated),
                format_list(&isolation.nohz)
            )
        } else {
            format!(
                "is isolated but not nohz_full (nohz_full: {}): the timer tick still \
                 interrupts the poll loop",
                format_list(&isolation.nohz)
            )
        };
        out.push(
            Finding::warn("lcore", format!("{field}: {on} {what}")).fix(isolation.fix.clone()),
        );
        false
    }
}

/// The kernel's CPU isolation, and the fix that isolates the workers' CPUs.
struct Isolation {
    /// `isolated` (isolcpus).
    isolated: Vec<u32>,
    /// `nohz_full`.
    nohz: Vec<u32>,
    /// The kernel command line and IRQ settings that isolate every worker CPU.
    fix: String,
}

impl Isolation {
    fn new(lcores: &Lcores, placement: &Placement) -> Isolation {
        let isolated = lcores.host.cpu_list("isolated").unwrap_or_default();
        let nohz = lcores.host.cpu_list("nohz_full").unwrap_or_default();
        // The main lcore's CPUs do the kernel's housekeeping: never suggest isolating them.
        let worker_cpus: Vec<u32> = placement
            .workers
            .iter()
            .flat_map(|w| w.cpus.clone())
            .filter(|c| !lcores.on_main(c))
            .collect();
        let cpus_text = format_list(&worker_cpus);
        let fix = format!(
            "boot with isolcpus={cpus_text} nohz_full={cpus_text} rcu_nocbs={cpus_text} on the \
             kernel command line, and keep IRQs off those CPUs (IRQBALANCE_BANNED_CPULIST=\
             {cpus_text}, or /proc/irq/*/smp_affinity_list)"
        );
        Isolation { isolated, nohz, fix }
    }
}
