//! The fleet's checks: the exception interface's name is free and its driver available, the
//! routing daemon's control socket is there (`dataplane.kernel_interface`, `announce`).

use std::path::Path;

use spillway_control::config::Config;

use super::{Finding, Host};
use crate::kernel;

/// What the fleet settings need from the host.
pub fn check(config: &Config, host: &Host) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(k) = &config.dataplane.kernel_interface {
        let vhost = host.root.join("dev/vhost-net").exists();
        match kernel::plan_on(k, &host.sys.join("class/net"), vhost) {
            Ok(plan) => out.push(Finding::pass(
                "kernel",
                format!(
                    "dataplane.kernel_interface: `{}` is free; it will be DPDK's net_{} ({})",
                    plan.name, plan.driver, plan.vdev
                ),
            )),
            Err(m) => out.push(
                Finding::fail("kernel", format!("dataplane.kernel_interface.name: {m}"))
                    .fix("pick another `name`, or remove the interface (`ip link del NAME`)"),
            ),
        }
        if k.driver == "virtio_user" && !vhost {
            out.push(
                Finding::fail(
                    "kernel",
                    "dataplane.kernel_interface.driver: virtio_user needs /dev/vhost-net, which \
                     this host does not have",
                )
                .fix("`modprobe vhost_net`, or `driver: tap` (or `auto`)"),
            );
        }
    }
    if let Some(a) = &config.announce {
        if config.dataplane.kernel_interface.is_none() {
            out.push(Finding::warn(
                "announce",
                "announce without dataplane.kernel_interface: the VIP routes are blackhole \
                 routes that outlive a killed process (a clean stop withdraws them), and the \
                 routing daemon needs another path to the routers",
            ));
        }
        if let Some(sock) = &a.bird_socket {
            let path = host.root.join(sock.trim_start_matches('/'));
            if is_socket(&path) {
                out.push(Finding::pass("announce", format!("announce.bird_socket: {sock} exists")));
            } else {
                out.push(
                    Finding::warn(
                        "announce",
                        format!(
                            "announce.bird_socket: {sock} is not a socket yet: BIRD is not \
                             running, so no router will hear of the VIPs (Spillway forwards \
                             anyway and reports BIRD down until it answers)"
                        ),
                    )
                    .fix("start BIRD (docs/scale-out.md has its configuration)"),
                );
            }
        }
    }
    out
}

fn is_socket(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(p).is_ok_and(|m| m.file_type().is_socket())
}
