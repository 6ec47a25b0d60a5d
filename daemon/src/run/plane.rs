//! Stage 3: the control plane on this (the main) lcore: the controller and the node it serves
//! from (load-balance mode), the neighbour resolver, the kernel interface's addresses.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use spillway_control::config::Config;
use spillway_control::controller::Controller;
use spillway_core::addr::{mask, Prefix};
use spillway_core::wire::MacDisplay;
use spillway_dataplane::neighbour::{Resolver, ResolverTimers};
use spillway_dataplane::node::Node;
use spillway_dataplane::setup as dp_setup;

use super::resources::{Platform, Resources};
use super::{dpdk_err, setting, DaemonError, Setup};
use crate::control_loop;
use crate::kernel;

/// The control plane.
pub(super) struct Plane {
    /// The controller, shared with the admin API (load-balance mode).
    pub(super) controller: Option<Arc<Mutex<Controller>>>,
    /// The node's addresses and MAC (load-balance mode).
    pub(super) node: Option<Node>,
    /// The neighbour resolver the control loop drives.
    pub(super) resolver: Resolver,
    /// The kernel interface's index, once it holds the node's addresses.
    pub(super) kernel_index: Option<u32>,
    /// When the run started: the workers' clock.
    pub(super) origin: Instant,
}

impl Plane {
    pub(super) fn start(
        setup: &Setup<'_>,
        res: &Resources<'_>,
        platform: &Platform,
    ) -> Result<Plane, DaemonError> {
        let origin = Instant::now();
        let mut plane = Plane {
            controller: None,
            node: None,
            resolver: Resolver::new(ResolverTimers::default()),
            kernel_index: None,
            origin,
        };
        if !setup.balance {
            return Ok(plane);
        }
        let port = &res.ports[0];
        let mac = port.mac().map_err(dpdk_err("dataplane.ports[0]"))?;
        let node = node_of(setup.config, mac);
        let mtu = u16::try_from(node.mtu).unwrap_or(u16::MAX);
        dp_setup::set_mtu(port, mtu).map_err(dpdk_err("dataplane.node.mtu"))?;
        let controller = Controller::start(&setup.options.config, setup.config.clone(), origin)?;
        plane.resolver.set_wanted(control_loop::next_hops(&controller, &node));
        // The exception interface: the data port's MAC, the node's MTU and addresses.
        if let (Some(k), Some(nl)) = (&platform.kernel_if, &res.netlink) {
            let index = res
                .runtime
                .block_on(kernel::configure(nl, &k.name, &node))
                .map_err(|m| setting("dataplane.kernel_interface", m))?;
            println!(
                "spillway: kernel interface {} ({}): the node's addresses, MAC {}; frames for \
                 the node that Spillway does not answer go to it",
                k.name,
                k.driver,
                MacDisplay(node.mac)
            );
            plane.kernel_index = Some(index);
        }
        plane.controller = Some(Arc::new(Mutex::new(controller)));
        plane.node = Some(node);
        Ok(plane)
    }
}

/// The node's addresses from the config and the port's MAC.
fn node_of(config: &Config, mac: [u8; 6]) -> Node {
    let n = config.node_addrs();
    let with_prefix =
        |a: Option<(_, u8)>| a.and_then(|(a, len)| Some((a, Prefix::new(mask(a, len), len).ok()?)));
    Node {
        mac,
        ipv4: with_prefix(n.ipv4),
        ipv6: with_prefix(n.ipv6),
        gateway_v4: n.gateway_ipv4,
        gateway_v6: n.gateway_ipv6,
        mtu: n.mtu,
    }
}
