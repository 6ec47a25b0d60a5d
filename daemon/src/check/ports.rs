//! Ports: each `dataplane.ports[i]` is a `--vdev` of `eal_args` or a PCI device that EAL may
//! probe, exists, is bound to a driver DPDK can use (with an IOMMU for vfio-pci), and sits on
//! the NUMA node of the lcores that use it.

use spillway_control::config::Config;

use super::eal::{EalArgs, Vdev};
use super::host::{Host, PciDevice};
use super::lcores::Placement;
use super::Finding;

/// Kernel drivers through which DPDK's PCI drivers reach a device.
const DPDK_DRIVERS: &[&str] = &["vfio-pci", "uio_pci_generic", "igb_uio"];

/// Kernel drivers that stay bound: their DPDK driver works beside them (bifurcated).
const BIFURCATED: &[&str] = &["mlx5_core", "mlx4_core"];

/// The findings for every port.
pub fn check(config: &Config, eal: &EalArgs, host: &Host, placement: &Placement) -> Vec<Finding> {
    let ports = &config.dataplane.ports;
    let mut out = Vec::new();
    if !config.services.is_empty() && ports.len() != 1 {
        out.push(
            Finding::fail(
                "port",
                format!(
                    "dataplane.ports: the load balancer runs one-armed on exactly one port, \
                     not {}",
                    ports.len()
                ),
            )
            .fix("list one port (or remove services: for io-forward)"),
        );
    }
    for (i, name) in ports.iter().enumerate() {
        let field = format!("dataplane.ports[{i}]");
        if let Some(v) = eal.vdev(name) {
            out.push(vdev(&field, v, host));
        } else if let Some(addr) = pci_address(name) {
            if addr == *name {
                out.extend(pci(&field, &addr, eal, host, placement));
            } else {
                out.push(
                    Finding::fail(
                        "port",
                        format!(
                            "{field}: `{name}`: DPDK names this PCI port `{addr}`, and the \
                             daemon finds ports by name"
                        ),
                    )
                    .fix(format!("write {field} as \"{addr}\"")),
                );
            }
        } else {
            let vdevs: Vec<&str> = eal.vdevs.iter().map(|v| v.name.as_str()).collect();
            out.push(
                Finding::fail(
                    "port",
                    format!(
                        "{field}: unknown port `{name}`: neither a --vdev of \
                         dataplane.eal_args ({}) nor a PCI address",
                        if vdevs.is_empty() { "none".into() } else { vdevs.join(", ") }
                    ),
                )
                .fix(format!(
                    "add `--vdev {name},...` to dataplane.eal_args, or name the NIC by its PCI \
                     address (`dpdk-devbind.py --status` lists them)"
                )),
            );
        }
    }
    out
}

/// A virtual device: what its driver needs from the host.
fn vdev(field: &str, v: &Vdev, host: &Host) -> Finding {
    let (name, driver) = (&v.name, v.driver());
    let pass = format!("{field}: {name} is a virtual device (--vdev), driver {driver}");
    match driver {
        "net_tap" | "net_tun" if !host.path("/dev/net/tun".as_ref()).exists() => Finding::fail(
            "port",
            format!("{field}: {name} (driver {driver}) needs /dev/net/tun, which is missing"),
        )
        .fix("modprobe tun"),
        "net_memif" => {
            let socket = v.arg("socket").unwrap_or("/run/memif.sock");
            let abstract_ns = v.arg("socket-abstract").is_none_or(|a| a != "no");
            let dir = std::path::Path::new(socket).parent().unwrap_or("/".as_ref());
            if !abstract_ns && !host.path(dir).is_dir() {
                Finding::fail(
                    "port",
                    format!(
                        "{field}: {name} (driver {driver}): the directory of its socket \
                         {socket} does not exist",
                    ),
                )
                .fix(format!("mkdir -p {}", dir.display()))
            } else {
                Finding::pass("port", format!("{pass}, socket {socket}"))
            }
        }
        "net_af_packet" | "net_af_xdp" | "net_pcap" => {
            let ifaces: Vec<&str> = ["iface", "rx_iface", "tx_iface", "rx_iface_in"]
                .iter()
                .filter_map(|k| v.arg(k))
                .collect();
            match ifaces.iter().find(|i| !host.net_interface(i)) {
                Some(missing) => Finding::fail(
                    "port",
                    format!(
                        "{field}: {name} (driver {driver}) uses interface {missing}, which \
                         this network namespace does not have"
                    ),
                )
                .fix(format!("create {missing}, or run spillway in its namespace")),
                None => Finding::pass("port", pass),
            }
        }
        _ => Finding::pass("port", pass),
    }
}

/// `0000:3b:00.0` or `3b:00.0` as the full, lower-case address.
pub fn pci_address(name: &str) -> Option<String> {
    let full = if name.len() == 7 { format!("0000:{name}") } else { name.to_owned() };
    let b = full.as_bytes();
    let hex = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_hexdigit);
    let ok = b.len() == 12
        && hex(0..4)
        && b[4] == b':'
        && hex(5..7)
        && b[7] == b':'
        && hex(8..10)
        && b[10] == b'.'
        && (b'0'..=b'7').contains(&b[11]);
    ok.then(|| full.to_ascii_lowercase())
}

/// A PCI port: EAL probes it, this host has it, it is a NIC bound to a driver DPDK can use,
/// and it sits on the NUMA node of the lcores that use it.
fn pci(field: &str, addr: &str, eal: &EalArgs, host: &Host, placement: &Placement) -> Vec<Finding> {
    if let Some(unprobed) = unprobed(field, addr, eal) {
        return vec![unprobed];
    }
    let Some(dev) = host.pci_device(addr) else {
        return vec![Finding::fail("port", format!("{field}: this host has no PCI device {addr}"))
            .fix("find the NIC's address with `dpdk-devbind.py --status` or `lspci -D`")];
    };
    if let Some(class) = dev.class.as_deref().filter(|c| !c.starts_with("0x02")) {
        return vec![Finding::fail(
            "port",
            format!("{field}: {addr} is not a network controller (PCI class {class})"),
        )
        .fix("find the NIC's address with `dpdk-devbind.py --status`")];
    }
    let mut out = vec![driver(field, addr, &dev, host)];
    if let Some(node) = dev.numa_node {
        out.push(numa(field, addr, node, host, placement));
    }
    out
}

/// Why EAL does not probe the PCI device at `addr` (`--no-pci`, `-a`, `-b`), if it does not.
fn unprobed(field: &str, addr: &str, eal: &EalArgs) -> Option<Finding> {
    if eal.no_pci {
        return Some(
            Finding::fail(
                "port",
                format!("{field}: {addr} is a PCI device, but dataplane.eal_args has --no-pci"),
            )
            .fix("remove --no-pci from dataplane.eal_args"),
        );
    }
    let listed = |list: &[String]| list.iter().any(|a| pci_address(a).as_deref() == Some(addr));
    if !eal.allow.is_empty() && !listed(&eal.allow) {
        return Some(
            Finding::fail(
                "port",
                format!(
                    "{field}: {addr} is not in the -a/--allow list of dataplane.eal_args ({}): \
                     EAL does not probe it",
                    eal.allow.join(", ")
                ),
            )
            .fix(format!("add \"-a\", \"{addr}\" to dataplane.eal_args")),
        );
    }
    if listed(&eal.block) {
        return Some(
            Finding::fail(
                "port",
                format!("{field}: {addr} is blocked by -b/--block in dataplane.eal_args"),
            )
            .fix(format!("remove -b {addr} from dataplane.eal_args")),
        );
    }
    None
}

/// The fix for a device DPDK cannot drive: bind it to vfio-pci (its interface down first).
fn bind_fix(addr: &str, iface: Option<&String>) -> String {
    let down = iface.map_or(String::new(), |i| format!("ip link set {i} down; "));
    format!("{down}modprobe vfio-pci; dpdk-devbind.py --bind=vfio-pci {addr}")
}

/// The driver the device is bound to: one DPDK can use, or a bifurcated one.
fn driver(field: &str, addr: &str, dev: &PciDevice, host: &Host) -> Finding {
    let iface = dev.interfaces.first();
    let iface_text = iface.map_or(String::new(), |i| format!(", interface {i}"));
    match dev.driver.as_deref() {
        Some("vfio-pci") => vfio(field, addr, dev, host),
        Some(d) if DPDK_DRIVERS.contains(&d) => Finding::pass(
            "port",
            format!("{field}: {addr} is bound to {d} (no IOMMU protection: vfio-pci is preferred)"),
        ),
        Some(d) if BIFURCATED.contains(&d) => Finding::pass(
            "port",
            format!(
                "{field}: {addr} is bound to {d}{iface_text}: DPDK's mlx driver works beside the \
                 kernel driver (no rebinding)"
            ),
        ),
        Some(d) => Finding::fail(
            "port",
            format!(
                "{field}: {addr} is bound to the kernel driver {d}{iface_text}: DPDK cannot \
                 drive it"
            ),
        )
        .fix(bind_fix(addr, iface)),
        None => Finding::fail("port", format!("{field}: {addr} is bound to no driver"))
            .fix(bind_fix(addr, None)),
    }
}

/// A device bound to vfio-pci: it needs an IOMMU, or vfio's unsafe no-IOMMU mode.
fn vfio(field: &str, addr: &str, dev: &PciDevice, host: &Host) -> Finding {
    let group = dev.iommu_group.as_deref();
    if host.iommu_on() && group.is_some() {
        Finding::pass(
            "port",
            format!("{field}: {addr} is bound to vfio-pci (IOMMU group {})", group.unwrap_or("?")),
        )
    } else if host.vfio_noiommu() {
        Finding::warn(
            "port",
            format!(
                "{field}: {addr} is bound to vfio-pci in unsafe no-IOMMU mode: the NIC's DMA is \
                 not confined"
            ),
        )
        .fix(
            "enable the IOMMU: intel_iommu=on iommu=pt (or amd_iommu=on) on the kernel command \
             line and VT-d/AMD-Vi in the firmware, then rebind",
        )
    } else {
        Finding::fail(
            "port",
            format!(
                "{field}: {addr} is bound to vfio-pci, but there is no IOMMU \
                 (/sys/kernel/iommu_groups is empty) and vfio's no-IOMMU mode is off"
            ),
        )
        .fix(
            "enable the IOMMU: intel_iommu=on iommu=pt (or amd_iommu=on) on the kernel command \
             line; without one (a VM without vIOMMU): echo 1 > \
             /sys/module/vfio/parameters/enable_unsafe_noiommu_mode, then rebind",
        )
    }
}

/// NUMA: the port's node against the lcores that touch its packets.
fn numa(field: &str, addr: &str, node: u32, host: &Host, placement: &Placement) -> Finding {
    let mut remote = Vec::new();
    for w in &placement.workers {
        if let Some(n) = w.cpus.first().and_then(|&c| host.cpu_node(c)) {
            if n != node {
                remote.push(format!("worker lcore {} ({}) is on node {n}", w.lcore, w.field));
            }
        }
    }
    if let Some((m, cpus)) = &placement.main {
        if let Some(n) = cpus.first().and_then(|&c| host.cpu_node(c)) {
            if n != node {
                remote.push(format!(
                    "the main lcore {m}, where the mbuf pool is allocated, is on node {n}"
                ));
            }
        }
    }
    if remote.is_empty() {
        return Finding::pass(
            "port",
            format!("{field}: {addr} is on NUMA node {node}, with the lcores that use it"),
        );
    }
    Finding::warn(
        "port",
        format!(
            "{field}: {addr} is on NUMA node {node}, but {}: its packets cross the socket \
             interconnect",
            remote.join("; ")
        ),
    )
    .fix(format!(
        "run the main and worker lcores on node {node}'s CPUs \
         (/sys/devices/system/node/node{node}/cpulist), or move the NIC to a slot of the \
         workers' node"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_addresses() {
        assert_eq!(pci_address("0000:3b:00.0").as_deref(), Some("0000:3b:00.0"));
        assert_eq!(pci_address("3B:00.1").as_deref(), Some("0000:3b:00.1"));
        assert_eq!(pci_address("0000:3b:00.8"), None);
        assert_eq!(pci_address("net_tap0"), None);
        assert_eq!(pci_address("eth0"), None);
    }
}
