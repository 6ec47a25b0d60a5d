//! The exception interface's setup: which DPDK device becomes the kernel interface, and what
//! the kernel side gets once it exists (the data port's MAC, the node's MTU and addresses).
//! The frames themselves move in `spillway_dataplane::kernel`.

use std::net::IpAddr;
use std::path::Path;

use spillway_control::config::{KernelDriver, KernelInterfaceConfig};
use spillway_control::netlink::Netlink;
use spillway_dataplane::node::Node;

/// The DPDK device behind the kernel interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelInterface {
    /// The kernel's name for it (`dataplane.kernel_interface.name`).
    pub name: String,
    /// `tap` or `virtio_user`.
    pub driver: &'static str,
    /// The DPDK port name.
    pub port: String,
    /// The `--vdev` argument that creates it.
    pub vdev: String,
}

/// Where vhost-net is, for `net_virtio_user`.
const VHOST_NET: &str = "/dev/vhost-net";

/// Decides the device for `k`; the error (for `dataplane.kernel_interface.name`) when an
/// interface of that name exists already.
pub fn plan(k: &KernelInterfaceConfig) -> Result<KernelInterface, String> {
    plan_on(k, Path::new("/sys/class/net"), Path::new(VHOST_NET).exists())
}

/// [`plan`] against a given `/sys/class/net` and vhost-net presence (tests).
pub fn plan_on(
    k: &KernelInterfaceConfig,
    sys_class_net: &Path,
    vhost_net: bool,
) -> Result<KernelInterface, String> {
    if sys_class_net.join(&k.name).exists() {
        return Err(format!(
            "an interface named `{}` exists already (another Spillway still running, or another \
             device): Spillway creates this interface itself; pick another name or remove it",
            k.name
        ));
    }
    let driver = match k.driver {
        KernelDriver::Tap => "tap",
        KernelDriver::VirtioUser => "virtio_user",
        KernelDriver::Auto if vhost_net => "virtio_user",
        KernelDriver::Auto => "tap",
    };
    let (port, vdev) = match driver {
        "virtio_user" => {
            let port = "net_virtio_user_kernel".to_owned();
            let vdev = format!(
                "{port},path={VHOST_NET},iface={},queues=1,queue_size={}",
                k.name,
                k.queue_size.min(1024)
            );
            (port, vdev)
        }
        _ => {
            let port = "net_tap_kernel".to_owned();
            (port.clone(), format!("{port},iface={}", k.name))
        }
    };
    Ok(KernelInterface { name: k.name.clone(), driver, port, vdev })
}

/// Gives the kernel interface `name` the node's MAC, MTU and addresses and brings it up;
/// returns its index.
pub async fn configure(nl: &Netlink, name: &str, node: &Node) -> Result<u32, String> {
    let index = nl
        .link_index(name)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("the kernel interface `{name}` did not appear"))?;
    let addrs: Vec<(IpAddr, u8)> =
        [node.ipv4, node.ipv6].into_iter().flatten().map(|(a, p)| (a.to_ip(), p.len())).collect();
    announce_on_up(name);
    nl.configure_interface(index, node.mac, node.mtu, &addrs).await.map_err(|e| e.to_string())?;
    Ok(index)
}

/// Gives the kernel interface `name`, still down (its port not started), the node's addresses
/// `addrs`: starting the port brings it up, and it must come up with them (a BIRD still
/// running from before a restart binds its sessions to them), not once without them.
pub async fn address_before_up(
    nl: &Netlink,
    name: &str,
    addrs: &[(IpAddr, u8)],
) -> Result<(), String> {
    let index = nl
        .link_index(name)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("the kernel interface `{name}` did not appear"))?;
    nl.add_addresses(index, addrs).await.map_err(|e| e.to_string())
}

/// Has the kernel announce the node's addresses when the interface comes up (a gratuitous ARP,
/// an unsolicited neighbour advertisement): the hosts on the segment that knew the node by an
/// older MAC (a restart on a port whose MAC changed) learn the current one at once, rather than
/// sending to the old one until their entry expires. Spillway answers the node's ARP requests
/// itself, so their kernels would not learn it from those. Best effort: logged when it fails.
fn announce_on_up(name: &str) {
    for (knob, family) in [("ipv4", "arp_notify"), ("ipv6", "ndisc_notify")] {
        let path = format!("/proc/sys/net/{knob}/conf/{name}/{family}");
        if let Err(e) = std::fs::write(&path, "1") {
            tracing::warn!("{path}: {e}: the node's address is not announced when {name} comes up");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(name: &str, driver: KernelDriver) -> KernelInterfaceConfig {
        KernelInterfaceConfig { name: name.into(), driver, queue_size: 1024 }
    }

    #[test]
    fn an_interface_that_exists_already_is_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("spw-kernel-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("spl0")).expect("fake /sys/class/net");
        let e = plan_on(&config("spl0", KernelDriver::Auto), &dir, false).expect_err("exists");
        assert!(e.contains("`spl0` exists already"), "{e}");
        let ok = plan_on(&config("spl1", KernelDriver::Auto), &dir, false).expect("free name");
        assert_eq!(ok.vdev, "net_tap_kernel,iface=spl1");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn auto_picks_virtio_user_only_where_vhost_net_exists() {
        let none = Path::new("/nonexistent-sys-class-net");
        assert_eq!(
            plan_on(&config("k0", KernelDriver::Auto), none, false).expect("plan").driver,
            "tap"
        );
        let v = plan_on(&config("k0", KernelDriver::Auto), none, true).expect("plan");
        assert_eq!(v.driver, "virtio_user");
        assert_eq!(
            v.vdev,
            "net_virtio_user_kernel,path=/dev/vhost-net,iface=k0,queues=1,queue_size=1024"
        );
        assert_eq!(
            plan_on(&config("k0", KernelDriver::Tap), none, true).expect("plan").driver,
            "tap"
        );
    }
}
