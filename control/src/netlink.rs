//! The kernel side of a fleet member, over rtnetlink: the exception interface (its MAC, MTU,
//! addresses, up) and the announced VIP routes in a routing table of their own.
//!
//! Spillway never writes a routing daemon's configuration. It says which VIPs this instance
//! should attract by keeping one route per announced VIP (`/32`, `/128`) in
//! `announce.table`, with its own route protocol number [`ROUTE_PROTOCOL`]; BIRD's kernel
//! protocol learns that table (`learn`) and its BGP sessions export what it learned
//! (docs/scale-out.md). With an exception interface the routes point at it (`dev spl0`), so
//! they disappear with the interface when the process dies; without one they are blackhole
//! routes. [`RouteTable::apply`] makes the table hold exactly the wanted set, adding and deleting
//! only routes of [`ROUTE_PROTOCOL`] in that table, never anyone else's.

use std::collections::BTreeSet;
use std::io;
use std::net::IpAddr;

use futures_util::TryStreamExt;
use rtnetlink::packet_route::address::{AddressAttribute, AddressFlags};
use rtnetlink::packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use rtnetlink::{Handle, IpVersion, LinkUnspec, RouteMessageBuilder};

/// The route protocol number of the routes Spillway writes (`ip route ... proto 252`): how it
/// (and an operator) tells them from everyone else's.
pub const ROUTE_PROTOCOL: u8 = 252;

/// A netlink error, as text for logs and the API.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {message}")]
pub struct NetlinkError {
    /// What was being done.
    pub what: String,
    /// The kernel's (or the socket's) answer.
    pub message: String,
}

fn err(what: impl Into<String>) -> impl FnOnce(rtnetlink::Error) -> NetlinkError {
    let what = what.into();
    move |e| NetlinkError { what, message: describe(&e) }
}

/// The kernel's errno in an error it answered with (the crate reports it negated).
fn errno(e: &rtnetlink::Error) -> Option<i32> {
    match e {
        rtnetlink::Error::NetlinkError(m) => m.code.map(|c| -c.get()),
        _ => None,
    }
}

// Linux errno values.
const ESRCH: i32 = 3;
const EEXIST: i32 = 17;
const ENODEV: i32 = 19;

/// The kernel's errno as its text (`File exists`), else the error's own.
fn describe(e: &rtnetlink::Error) -> String {
    match errno(e) {
        Some(n) => io::Error::from_raw_os_error(n).to_string(),
        None => e.to_string(),
    }
}

/// A connection to the kernel's routing netlink. Its socket task runs on the current tokio
/// runtime.
#[derive(Debug, Clone)]
pub struct Netlink {
    handle: Handle,
}

impl Netlink {
    /// Opens the netlink socket; must be called inside a tokio runtime.
    pub fn connect() -> io::Result<Netlink> {
        let (connection, handle, _) = rtnetlink::new_connection()?;
        tokio::spawn(connection);
        Ok(Netlink { handle })
    }

    /// The index of the interface `name`, if it exists.
    pub async fn link_index(&self, name: &str) -> Result<Option<u32>, NetlinkError> {
        let mut links = self.handle.link().get().match_name(name.to_owned()).execute();
        match links.try_next().await {
            Ok(Some(link)) => Ok(Some(link.header.index)),
            Ok(None) => Ok(None),
            // No such interface.
            Err(e) if errno(&e) == Some(ENODEV) => Ok(None),
            Err(e) => Err(err(format!("looking up interface {name}"))(e)),
        }
    }

    /// Gives the interface `index` the MAC `mac` and the MTU `mtu`, adds `addrs` (IPv6 without
    /// duplicate address detection: the address is the node's, answered for by Spillway on the
    /// data port) and then brings it up. An address already there is kept.
    ///
    /// The addresses go on while the link is down, and the link comes up last: the kernel
    /// announces a new IPv4 address before it has installed the address's local route, so a
    /// routing daemon already running (BIRD, with a BGP session waiting for a neighbour on
    /// this interface) that opens its BFD socket on the announcement can fail to bind to the
    /// address (`bind: Cannot assign requested address`), and that BFD session then never
    /// comes up while BGP runs without it. Brought up last, the interface is announced usable
    /// only once its addresses are complete.
    pub async fn configure_interface(
        &self,
        index: u32,
        mac: [u8; 6],
        mtu: u32,
        addrs: &[(IpAddr, u8)],
    ) -> Result<(), NetlinkError> {
        let set = LinkUnspec::new_with_index(index).address(mac.to_vec()).mtu(mtu).down().build();
        self.handle.link().set(set).execute().await.map_err(err("setting MAC and MTU"))?;
        self.add_addresses(index, addrs).await?;
        let up = LinkUnspec::new_with_index(index).up().build();
        self.handle.link().set(up).execute().await.map_err(err("bringing it up"))?;
        Ok(())
    }

    /// Adds `addrs` to interface `index` (IPv6 without duplicate address detection); an
    /// address it has already is fine.
    pub async fn add_addresses(
        &self,
        index: u32,
        addrs: &[(IpAddr, u8)],
    ) -> Result<(), NetlinkError> {
        for &(addr, len) in addrs {
            let mut req = self.handle.address().add(index, addr, len);
            if addr.is_ipv6() {
                req.message_mut().attributes.push(AddressAttribute::Flags(AddressFlags::Nodad));
            }
            match req.execute().await {
                Err(e) if errno(&e) == Some(EEXIST) => {}
                r => r.map_err(err(format!("adding {addr}/{len}")))?,
            }
        }
        Ok(())
    }

    /// The destinations of the routes of protocol [`ROUTE_PROTOCOL`] in `table`.
    pub async fn routes(&self, table: u32) -> Result<BTreeSet<IpAddr>, NetlinkError> {
        let mut out = BTreeSet::new();
        for version in [IpVersion::V4, IpVersion::V6] {
            let query = match version {
                IpVersion::V4 => RouteMessageBuilder::<std::net::Ipv4Addr>::new().build(),
                IpVersion::V6 => RouteMessageBuilder::<std::net::Ipv6Addr>::new().build(),
            };
            let mut routes = self.handle.route().get(query).execute();
            while let Some(r) = routes.try_next().await.map_err(err("listing routes"))? {
                if r.header.protocol == RouteProtocol::Other(ROUTE_PROTOCOL)
                    && table_of(&r) == table
                {
                    if let Some(dst) = destination(&r) {
                        out.insert(dst);
                    }
                }
            }
        }
        Ok(out)
    }

    fn route(&self, table: u32, dst: IpAddr, oif: Option<u32>) -> RouteMessage {
        let len = if dst.is_ipv4() { 32 } else { 128 };
        let mut b = RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(dst, len)
            .expect("a host prefix is valid")
            .table_id(table)
            .protocol(RouteProtocol::Other(ROUTE_PROTOCOL));
        b = match oif {
            Some(i) => b.output_interface(i).scope(RouteScope::Link),
            None => b.kind(RouteType::BlackHole),
        };
        b.build()
    }

    /// Adds the host route of `dst` to `table` (through interface `oif`, or a blackhole).
    pub async fn add_route(
        &self,
        table: u32,
        dst: IpAddr,
        oif: Option<u32>,
    ) -> Result<(), NetlinkError> {
        let r = self.route(table, dst, oif);
        self.handle.route().add(r).replace().execute().await.map_err(err(format!("adding {dst}")))
    }

    /// Deletes the host route of `dst` from `table`.
    pub async fn del_route(&self, table: u32, dst: IpAddr) -> Result<(), NetlinkError> {
        let mut r = self.route(table, dst, None);
        // Match on destination, table and protocol only.
        r.header.kind = RouteType::Unspec;
        r.header.scope = RouteScope::NoWhere;
        match self.handle.route().del(r).execute().await {
            // Gone already.
            Err(e) if errno(&e) == Some(ESRCH) => Ok(()),
            r => r.map_err(err(format!("deleting {dst}"))),
        }
    }
}

fn table_of(r: &RouteMessage) -> u32 {
    r.attributes
        .iter()
        .find_map(|a| if let RouteAttribute::Table(t) = a { Some(*t) } else { None })
        .unwrap_or(u32::from(r.header.table))
}

fn destination(r: &RouteMessage) -> Option<IpAddr> {
    let full = if r.header.address_family == rtnetlink::packet_route::AddressFamily::Inet {
        32
    } else {
        128
    };
    if r.header.destination_prefix_length != full {
        return None;
    }
    r.attributes.iter().find_map(|a| match a {
        RouteAttribute::Destination(RouteAddress::Inet(v4)) => Some(IpAddr::V4(*v4)),
        RouteAttribute::Destination(RouteAddress::Inet6(v6)) => Some(IpAddr::V6(*v6)),
        _ => None,
    })
}

/// The announced routes in one table: what the kernel holds, made equal to what is wanted.
#[derive(Debug)]
pub struct RouteTable {
    /// The netlink connection.
    pub netlink: Netlink,
    /// The routing table (`announce.table`).
    pub table: u32,
    /// The exception interface's index, when there is one (routes through it); blackhole
    /// routes otherwise.
    pub oif: Option<u32>,
}

/// What one [`RouteTable::apply`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteChanges {
    /// Routes added.
    pub added: Vec<IpAddr>,
    /// Routes deleted.
    pub removed: Vec<IpAddr>,
}

impl RouteTable {
    /// Makes the table's Spillway routes exactly `wanted`: reads what is there (someone may
    /// have removed a route, or a previous run left some), adds the missing, deletes the rest.
    pub async fn apply(&self, wanted: &BTreeSet<IpAddr>) -> Result<RouteChanges, NetlinkError> {
        let have = self.netlink.routes(self.table).await?;
        let mut report = RouteChanges::default();
        for dst in wanted.difference(&have) {
            self.netlink.add_route(self.table, *dst, self.oif).await?;
            report.added.push(*dst);
        }
        for dst in have.difference(wanted) {
            self.netlink.del_route(self.table, *dst).await?;
            report.removed.push(*dst);
        }
        Ok(report)
    }
}
