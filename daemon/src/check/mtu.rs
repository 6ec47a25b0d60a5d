//! MTU: `dataplane.node.mtu` is the egress MTU, encapsulation included, and the port's MTU.
//! A service that encapsulates (IPIP 20 B, IP6IP6 40 B, GUE 28/48 B, by the backends' address
//! family) forwards client packets up to `mtu - overhead`; larger DF packets are answered with
//! ICMP "fragmentation needed" / "packet too big", larger others are dropped. WARN when a
//! full-size client packet needs more than a 9000-byte jumbo fabric carries once encapsulated
//! (`mtu + overhead > 9000`), and when IPv6 clients would be asked for less than IPv6's
//! minimum MTU (`mtu - overhead < 1280`: they cannot comply).

use spillway_control::config::compile::parse_endpoint;
use spillway_control::config::{Config, EncapsulationType, ServiceConfig};
use spillway_core::wire::build::{encap_len, EncapKind};
use spillway_core::wire::ethernet;

use super::Finding;

/// The largest MTU a jumbo-frame fabric usually carries.
const JUMBO: u32 = 9000;

/// IPv6's minimum link MTU (RFC 8200).
const IPV6_MIN: u32 = 1280;

/// The node's MTU against every service's encapsulation.
pub fn check(config: &Config) -> Vec<Finding> {
    let given = config.dataplane.node.mtu;
    let mtu = config.node_addrs().mtu;
    let mtu_text = if given.is_some() { format!("{mtu}") } else { format!("{mtu} (default)") };
    if config.services.is_empty() {
        return given
            .map(|_| {
                Finding::pass(
                    "mtu",
                    format!("dataplane.node.mtu: {mtu_text}: io-forward (no services) encapsulates nothing"),
                )
            })
            .into_iter()
            .collect();
    }
    config.services.iter().enumerate().map(|(i, s)| service(i, s, mtu, &mtu_text)).collect()
}

fn service(i: usize, s: &ServiceConfig, mtu: u32, mtu_text: &str) -> Finding {
    let field = format!("dataplane.node.mtu {mtu_text} with services[{i}] `{}`", s.name);
    let kind = match s.encapsulation.kind {
        EncapsulationType::Ipip => EncapKind::Ipip,
        EncapsulationType::Gue => EncapKind::Gue,
        EncapsulationType::L2 => {
            return Finding::pass("mtu", format!("{field}: L2 rewrite adds no bytes"))
        }
    };
    let endpoints = s.backend_service.backends.iter().flat_map(|b| &b.endpoints);
    let (mut v4, mut v6) = (false, false);
    for e in endpoints.filter_map(|e| parse_endpoint(e).ok()) {
        if e.addr.is_v4() {
            v4 = true;
        } else {
            v6 = true;
        }
    }
    // The largest overhead of the service's backend families, and its name.
    let (overhead, name) = [(v6, true), (v4, false)]
        .into_iter()
        .filter(|(used, _)| *used)
        .map(|(_, outer_v6)| {
            let n = u32::try_from(encap_len(kind, outer_v6) - ethernet::HEADER_LEN)
                .expect("a header length fits u32");
            let name = match (kind, outer_v6) {
                (EncapKind::Ipip, false) => "IPIP over IPv4",
                (EncapKind::Ipip, true) => "IP6IP6 over IPv6",
                (EncapKind::Gue, false) => "GUE over IPv4",
                (EncapKind::Gue, true) => "GUE over IPv6",
            };
            (n, name)
        })
        .max()
        .unwrap_or((0, "no backends"));
    let inner_v6 = s.forwarding_rules.iter().any(|r| {
        r.vip.as_deref().or(r.destination_prefix.as_deref()).is_some_and(|a| a.contains(':'))
    });
    let room = mtu.saturating_sub(overhead);
    let what = format!("{name} adds {overhead} B: client packets up to {room} B are forwarded");
    if inner_v6 && room < IPV6_MIN {
        Finding::warn(
            "mtu",
            format!(
                "{field}: {what}, below IPv6's minimum MTU of {IPV6_MIN}: IPv6 clients cannot \
                 go below {IPV6_MIN}, so their full-size packets are dropped"
            ),
        )
        .fix(format!(
            "raise dataplane.node.mtu to at least {} (and the backend network's MTU with it)",
            IPV6_MIN + overhead
        ))
    } else if mtu + overhead > JUMBO {
        Finding::warn(
            "mtu",
            format!(
                "{field}: {what}: a full {mtu}-byte client packet would need {} B encapsulated, \
                 more than the {JUMBO} B a jumbo fabric carries: DF packets above {room} B get \
                 ICMP too-big, others are dropped",
                mtu + overhead
            ),
        )
        .fix(format!(
            "keep the clients' MTU at {room} or below (or clamp TCP MSS to {} for IPv4, {} for \
             IPv6)",
            room.saturating_sub(40),
            room.saturating_sub(60)
        ))
    } else {
        Finding::pass(
            "mtu",
            format!("{field}: {what}; larger DF packets get ICMP too-big, others are dropped"),
        )
    }
}
