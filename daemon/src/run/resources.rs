//! Stages 1 and 2: EAL on the memory the configuration asks for ([`Platform`]), then the worker
//! lcores, the mbuf pool, the ports, the control plane's runtime and netlink ([`Resources`]).

use spillway_control::config;
use spillway_control::netlink::Netlink;
use spillway_dataplane::dpdk::memory::{self, describe_areas};
use spillway_dataplane::dpdk::{
    Eal, HugepagePolicy, Hugepages, LcoreId, MemoryPlan, Mempool, PollGate, Port, PortSetup,
};
use spillway_dataplane::setup as dp_setup;

use super::{dpdk_err, setting, DaemonError, Setup};
use crate::check;
use crate::kernel::{self, KernelInterface};

/// EAL, started on hugepages or ordinary memory as planned from the configuration.
pub(super) struct Platform {
    // Fields go in this order: EAL's hugepage files are removed while still mapped (as
    // `--huge-unlink` does; the pages return when EAL's mappings go).
    _huge_files: HugeFiles,
    pub(super) eal: Eal,
    /// The device that becomes the kernel interface, when there is one.
    pub(super) kernel_if: Option<KernelInterface>,
    need: check::memory::Need,
    plan: MemoryPlan,
}

impl Platform {
    pub(super) fn start(setup: &Setup<'_>) -> Result<Platform, DaemonError> {
        let dp = &setup.config.dataplane;
        let need = check::memory::Need::of(dp);
        let kernel_if = match &dp.kernel_interface {
            Some(k) if setup.balance => {
                Some(kernel::plan(k).map_err(|m| setting("dataplane.kernel_interface.name", m))?)
            }
            _ => None,
        };
        let mut eal_args = dp.eal_args.clone();
        if let Some(k) = &kernel_if {
            eal_args.extend(["--vdev".to_owned(), k.vdev.clone()]);
        }
        let policy = hugepage_policy(dp.hugepages);
        let plan = memory::plan(&eal_args, need.total(), policy, &Hugepages::of_host())
            .map_err(|m| setting("dataplane.hugepages", m))?;
        if let Some(why) = &plan.fallback {
            tracing::warn!("dataplane.hugepages: preferred, running on ordinary memory: {why}");
        }
        dp_setup::remove_stale_memif_sockets(&plan.args);
        let eal = Eal::init(&plan.args).map_err(dpdk_err("dataplane.eal_args"))?;
        let prefix = file_prefix(&plan.args);
        // `--huge-unlink=existing` (the memory plan's default, so that dpdk-dumpcap can
        // attach) leaves EAL's hugepage files at exit: whatever way the run ends, they go.
        let unlink = plan.args.iter().any(|a| a == "--huge-unlink=existing");
        let huge_files = HugeFiles(unlink.then(|| prefix.clone()));
        // DPDK's capture framework: dpdk-dumpcap, a secondary process, captures any port (the
        // kernel interface's too). Nothing is paid until a capture starts.
        match eal.enable_capture() {
            Ok(()) if eal.has_hugepages() => tracing::info!(
                "packet capture: dpdk-dumpcap --file-prefix={prefix} -i PORT (docs/operations.md)"
            ),
            Ok(()) => tracing::info!(
                "packet capture: not with --no-huge (a capture process cannot share this one's \
                 memory): run on hugepages to use dpdk-dumpcap"
            ),
            Err(e) => tracing::warn!("packet capture with dpdk-dumpcap is unavailable: {e}"),
        }
        Ok(Platform { _huge_files: huge_files, eal, kernel_if, need, plan })
    }
}

/// The data plane's resources and the control plane's runtime.
pub(super) struct Resources<'e> {
    // Fields go in this order: the runtime before what its tasks use, the ports before the
    // memif gate that their close passes, the pool after every port.
    /// The control plane's runtime (current-thread, on the main lcore).
    pub(super) runtime: tokio::runtime::Runtime,
    /// Netlink, when there is a kernel interface or VIPs to announce.
    pub(super) netlink: Option<Netlink>,
    /// The kernel interface's port.
    pub(super) kernel_port: Option<Port<'e>>,
    /// The data ports.
    pub(super) ports: Vec<Port<'e>>,
    /// net_memif's poll gate, when a port is a memif.
    pub(super) memif_gate: Option<PollGate>,
    /// The mbuf pool.
    pub(super) pool: Mempool<'e>,
    /// One lcore per worker.
    pub(super) lcores: Vec<LcoreId>,
    /// EAL.
    pub(super) eal: &'e Eal,
}

impl<'e> Resources<'e> {
    pub(super) fn open(setup: &Setup<'_>, platform: &'e Platform) -> Result<Self, DaemonError> {
        let dp = &setup.config.dataplane;
        let eal = &platform.eal;
        let wanted = usize::from(dp.worker_count());
        let lcores = dp_setup::worker_lcores(eal, dp.lcores.as_deref(), wanted).map_err(
            |(i, message)| match i {
                Some(i) => setting(format!("dataplane.lcores[{i}]"), message),
                None => setting("dataplane.workers", message),
            },
        )?;
        let workers = u16::try_from(lcores.len()).expect("validated worker count fits u16");
        let pool = Mempool::create(eal, "spillway_mbufs", dp.mempool_size, dp.mempool_cache_size)
            .map_err(dpdk_err("dataplane.mempool_size"))?;
        let port_setup = PortSetup {
            rx_queues: workers,
            tx_queues: workers,
            extra_tx_queues: 0,
            rx_desc: dp.rx_queue_size,
            tx_desc: dp.tx_queue_size,
        };
        let ports = dp_setup::open_ports(eal, &dp.ports, port_setup, &pool)
            .map_err(|(i, e)| dpdk_err(format!("dataplane.ports[{i}]"))(e))?;
        // net_memif unmaps a port's memory when its peer goes away, under running bursts: the
        // workers pass a gate that DPDK's memif control messages close (dpdk::PollGate).
        let memif_gate = if ports.iter().any(|p| p.driver() == "net_memif") {
            let gate = PollGate::install(eal).map_err(dpdk_err("net_memif poll gate"))?;
            tracing::info!(
                "net_memif port: workers pause while a memif peer connects or goes away"
            );
            Some(gate)
        } else {
            None
        };
        // The control plane's runtime, and netlink, before the kernel interface's port
        // starts: the interface gets the node's addresses while it is down
        // (kernel::address_before_up).
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(DaemonError::Runtime)?;
        let (netlink, kernel_port) = {
            let _enter = runtime.enter();
            let netlink = if platform.kernel_if.is_some() || setup.config.announce.is_some() {
                let nl =
                    Netlink::connect().map_err(|e| setting("announce", format!("netlink: {e}")));
                Some(nl?)
            } else {
                None
            };
            let kernel_port = match &platform.kernel_if {
                Some(k) => {
                    Some(open_kernel_port(setup, &runtime, netlink.as_ref(), k, eal, &pool)?)
                }
                None => None,
            };
            (netlink, kernel_port)
        };
        let res = Resources { runtime, netlink, kernel_port, ports, memif_gate, pool, lcores, eal };
        report_memory(setup, platform);
        Ok(res)
    }
}

/// The kernel interface's port, started with the node's addresses on its interface.
fn open_kernel_port<'e>(
    setup: &Setup<'_>,
    runtime: &tokio::runtime::Runtime,
    netlink: Option<&Netlink>,
    k: &KernelInterface,
    eal: &'e Eal,
    pool: &Mempool<'e>,
) -> Result<Port<'e>, DaemonError> {
    if let Some(nl) = netlink {
        let n = setup.config.node_addrs();
        let addrs: Vec<(std::net::IpAddr, u8)> =
            [n.ipv4, n.ipv6].into_iter().flatten().map(|(a, len)| (a.to_ip(), len)).collect();
        runtime
            .block_on(kernel::address_before_up(nl, &k.name, &addrs))
            .map_err(|m| setting("dataplane.kernel_interface", m))?;
    }
    let dp = &setup.config.dataplane;
    let one = PortSetup {
        rx_queues: 1,
        tx_queues: 1,
        extra_tx_queues: 0,
        rx_desc: dp.rx_queue_size,
        tx_desc: dp.tx_queue_size,
    };
    let port = dp_setup::open_ports(eal, std::slice::from_ref(&k.port), one, pool)
        .map_err(|(_, e)| dpdk_err("dataplane.kernel_interface")(e))?;
    Ok(port.into_iter().next().expect("one port opened"))
}

/// `dataplane.hugepages` as the memory planner's policy: the same three values, in two
/// crates because the control plane does not link DPDK and DPDK's layer knows no
/// configuration.
fn hugepage_policy(p: config::HugepagePolicy) -> HugepagePolicy {
    match p {
        config::HugepagePolicy::Required => HugepagePolicy::Required,
        config::HugepagePolicy::Preferred => HugepagePolicy::Preferred,
        config::HugepagePolicy::Off => HugepagePolicy::Off,
    }
}

/// Says how much memory the configuration needs and how much EAL got, on which pages.
fn report_memory(setup: &Setup<'_>, platform: &Platform) {
    let dp = &setup.config.dataplane;
    let eal = &platform.eal;
    let got = describe_areas(&eal.memory());
    let pages = if eal.has_hugepages() { "hugepages" } else { "ordinary memory (--no-huge)" };
    let tables = if setup.balance {
        let bytes =
            u64::from(dp.worker_count()) * check::memory::table_bytes(dp.conntrack_capacity);
        format!("; connection tables {} MiB in process memory", memory::mib(bytes))
    } else {
        String::new()
    };
    let line = format!(
        "memory: needs {}; asked EAL for {} MiB on {pages}, got {got}{tables}",
        platform.need.explain(dp),
        platform.plan.reserve_mib,
    );
    println!("spillway: {line}");
}

/// Removes EAL's hugepage files of its prefix when dropped.
struct HugeFiles(Option<String>);

impl Drop for HugeFiles {
    fn drop(&mut self) {
        if let Some(prefix) = &self.0 {
            memory::remove_hugepage_files(prefix);
        }
    }
}

/// The EAL file prefix of `args` (`--file-prefix X` or `--file-prefix=X`; EAL's default
/// `rte`).
fn file_prefix(args: &[String]) -> String {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if let Some(p) = a.strip_prefix("--file-prefix=") {
            return p.to_owned();
        }
        if a == "--file-prefix" {
            if let Some(p) = it.next() {
                return p.clone();
            }
        }
    }
    "rte".to_owned()
}
