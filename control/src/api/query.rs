//! Reading requests: query strings into flows (the packet a lookup or an explanation is
//! about) and filters, JSON bodies, addresses in paths. Every error is a 400 that says which
//! parameter is wrong and why.

use super::error::HttpError;
use axum::extract::rejection::QueryRejection;
use axum::extract::Query;
use serde::Deserialize;
use spillway_core::addr::{Addr, Prefix};
use spillway_core::filter::FlowFilter;
use spillway_core::flow::{proto, tcp_flags, PacketInfo};

/// The flow of a lookup or explain request.
#[derive(Debug, Default, Deserialize)]
pub(super) struct FlowQuery {
    src: Option<String>,
    dst: Option<String>,
    proto: Option<String>,
    sport: Option<String>,
    dport: Option<String>,
    syn: Option<String>,
    quic_cid: Option<String>,
}

/// `GET /v1/backends?service=...`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct BackendsQuery {
    pub(super) service: Option<String>,
}

/// A query string that did not parse is a 400 with axum's explanation.
pub(super) fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, HttpError> {
    let Query(q) = q.map_err(|e| HttpError::bad_request(e.body_text()))?;
    Ok(q)
}

/// The packet a flow query describes: TCP unless `proto` says otherwise, ports for TCP and
/// UDP only, an ACK (a packet of an established connection) unless `syn` asks for a SYN.
pub(super) fn flow_packet(q: &FlowQuery) -> Result<PacketInfo, HttpError> {
    let src = addr_param("src", &q.src)?;
    let dst = addr_param("dst", &q.dst)?;
    if src.is_v4() != dst.is_v4() {
        return Err(HttpError::bad_request("src and dst must be of one address family"));
    }
    let p = protocol(q.proto.as_deref())?;
    let ported = p == proto::TCP || p == proto::UDP;
    let sport = port_param("sport", &q.sport, ported)?;
    let dport = port_param("dport", &q.dport, ported)?;
    let syn = match q.syn.as_deref() {
        None | Some("false" | "0") => false,
        Some("true" | "1" | "") => true,
        Some(other) => {
            return Err(HttpError::bad_request(format!("syn: `{other}` is not a boolean")))
        }
    };
    if syn && p != proto::TCP {
        return Err(HttpError::bad_request("syn: only tcp has a SYN"));
    }
    let flags = match (p, syn) {
        (proto::TCP, true) => tcp_flags::SYN,
        (proto::TCP, false) => tcp_flags::ACK,
        _ => 0,
    };
    Ok(PacketInfo {
        src,
        dst,
        proto: p,
        sport,
        dport,
        fragment: false,
        tcp_flags: flags,
        icmp_error: false,
    })
}

/// The `quic_cid` of an explain request: a QUIC short header's destination connection ID, in
/// hex, 1 to 20 octets (QUIC v1's longest), for a UDP flow.
pub(super) fn quic_cid(q: &FlowQuery, p: &PacketInfo) -> Result<Option<Vec<u8>>, HttpError> {
    let Some(h) = q.quic_cid.as_deref() else { return Ok(None) };
    if p.proto != proto::UDP {
        return Err(HttpError::bad_request("quic_cid: only a udp flow carries QUIC"));
    }
    let bytes = spillway_core::quic_lb::hex_octets(h)
        .ok_or_else(|| HttpError::bad_request(format!("quic_cid: `{h}` is not hex octets")))?;
    if !(1..=20).contains(&bytes.len()) {
        return Err(HttpError::bad_request(format!(
            "quic_cid: {} octets, not 1 to 20",
            bytes.len()
        )));
    }
    Ok(Some(bytes))
}

fn addr_param(name: &str, v: &Option<String>) -> Result<Addr, HttpError> {
    let v = v.as_deref().ok_or_else(|| HttpError::bad_request(format!("missing `{name}`")))?;
    v.parse().map_err(|_| HttpError::bad_request(format!("{name}: `{v}` is not an IP address")))
}

/// `tcp` (the default), `udp`, `icmp`, `icmpv6` in any case, or a protocol number.
fn protocol(v: Option<&str>) -> Result<u8, HttpError> {
    protocol_of(v.unwrap_or("tcp"))
}

/// `tcp`, `udp`, `icmp`, `icmpv6` in any case, or a protocol number.
pub(super) fn protocol_of(v: &str) -> Result<u8, HttpError> {
    Ok(match v.to_ascii_lowercase().as_str() {
        "tcp" => proto::TCP,
        "udp" => proto::UDP,
        "icmp" => proto::ICMP,
        "icmpv6" => proto::ICMPV6,
        other => other.parse().map_err(|_| {
            HttpError::bad_request(format!(
                "proto: `{other}` is not tcp, udp, icmp, icmpv6 or a protocol number"
            ))
        })?,
    })
}

/// A port: required for TCP and UDP, refused for the other protocols (0 then).
fn port_param(name: &str, v: &Option<String>, ported: bool) -> Result<u16, HttpError> {
    match v.as_deref() {
        Some(s) if ported => {
            s.parse().map_err(|_| HttpError::bad_request(format!("{name}: `{s}` is not a port")))
        }
        Some(_) => Err(HttpError::bad_request(format!("{name}: only tcp and udp have ports"))),
        None if ported => Err(HttpError::bad_request(format!("missing `{name}` (tcp, udp)"))),
        None => Ok(0),
    }
}

/// Parse an optional JSON body (an empty body or `null` is `T::default()`).
pub(super) fn json_body<T: for<'de> Deserialize<'de> + Default>(
    body: &[u8],
) -> Result<T, HttpError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice::<Option<T>>(body)
        .map(Option::unwrap_or_default)
        .map_err(|e| HttpError::bad_request(format!("bad JSON body: {e}")))
}

/// A body that must carry nothing: empty, or an empty or any JSON object (the instance's
/// drain and undrain take no parameters).
pub(super) fn no_parameters(body: &[u8]) -> Result<(), HttpError> {
    if !body.iter().all(u8::is_ascii_whitespace) {
        let _: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(body)
            .map_err(|e| HttpError::bad_request(format!("the body must be empty or {{}}: {e}")))?;
    }
    Ok(())
}

/// The address `v` of parameter `name`.
pub(super) fn named_addr(name: &str, v: &str) -> Result<Addr, HttpError> {
    v.parse().map_err(|_| HttpError::bad_request(format!("{name}: `{v}` is not an IP address")))
}

/// A `backend` filter: an address (any port), or `address:port` (`[v6]:port`).
pub(super) fn backend_param(b: &str) -> Result<(Addr, Option<u16>), HttpError> {
    match b.parse::<std::net::SocketAddr>() {
        Ok(sa) => Ok((Addr::from(sa.ip()), Some(sa.port()))),
        Err(_) => Ok((named_addr("backend", b)?, None)),
    }
}

/// A `client` filter: an address, or a prefix (`198.18.10.0/24`).
pub(super) fn client_param(c: &str) -> Result<Prefix, HttpError> {
    if c.contains('/') {
        c.parse::<Prefix>()
            .map_err(|e| HttpError::bad_request(format!("client: `{c}` is not a prefix: {e}")))
    } else {
        Ok(Prefix::host(named_addr("client", c)?))
    }
}

/// A backend address from the path.
pub(super) fn parse_addr(s: &str) -> Result<Addr, HttpError> {
    s.parse().map_err(|_| HttpError::bad_request(format!("`{s}` is not an IP address")))
}

/// The flow fields of a query (capture's and the flows dump's): the VIP, its port, the client
/// (an address or a prefix), its port, the protocol; no service or backend yet.
pub(super) fn flow_filter(
    vip: Option<&str>,
    dport: Option<u16>,
    client: Option<&str>,
    sport: Option<u16>,
    proto: Option<&str>,
) -> Result<FlowFilter, HttpError> {
    Ok(FlowFilter {
        vip: vip.map(|v| named_addr("vip", v)).transpose()?,
        dport,
        client: client.map(client_param).transpose()?,
        sport,
        proto: proto.map(protocol_of).transpose()?,
        service: None,
        backend: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    fn flow(q: &str) -> Result<PacketInfo, String> {
        let q: FlowQuery = serde_json::from_str(q).expect("test query");
        flow_packet(&q).map_err(|e| {
            let (status, message) = e.parts();
            assert_eq!(status, StatusCode::BAD_REQUEST, "{message}");
            message.to_owned()
        })
    }

    #[test]
    fn a_flow_is_tcp_with_ports_and_an_ack_unless_told_otherwise() {
        let p = flow(
            r#"{"src": "192.0.2.7", "dst": "198.51.100.10", "sport": "40000", "dport": "80"}"#,
        )
        .expect("valid");
        assert_eq!(
            (p.proto, p.sport, p.dport, p.tcp_flags),
            (proto::TCP, 40000, 80, tcp_flags::ACK)
        );
        let p = flow(r#"{"src": "2001:db8::7", "dst": "2001:db8::10", "proto": "TCP", "sport": "1", "dport": "443", "syn": ""}"#)
            .expect("valid");
        assert_eq!(p.tcp_flags, tcp_flags::SYN);
        let p = flow(r#"{"src": "192.0.2.7", "dst": "198.51.100.10", "proto": "icmp"}"#)
            .expect("valid");
        assert_eq!((p.proto, p.sport, p.dport, p.tcp_flags), (proto::ICMP, 0, 0, 0));
        let p =
            flow(r#"{"src": "192.0.2.7", "dst": "198.51.100.10", "proto": "47"}"#).expect("valid");
        assert_eq!(p.proto, 47);
    }

    #[test]
    fn a_bad_flow_says_which_parameter_is_wrong() {
        for (q, message) in [
            (r#"{"dst": "198.51.100.10"}"#, "missing `src`"),
            (r#"{"src": "nope", "dst": "198.51.100.10"}"#, "src: `nope` is not an IP address"),
            (
                r#"{"src": "192.0.2.7", "dst": "2001:db8::1"}"#,
                "src and dst must be of one address family",
            ),
            (
                r#"{"src": "192.0.2.7", "dst": "198.51.100.10", "proto": "sctp"}"#,
                "proto: `sctp` is not tcp, udp, icmp, icmpv6 or a protocol number",
            ),
            (
                r#"{"src": "192.0.2.7", "dst": "198.51.100.10", "dport": "80"}"#,
                "missing `sport` (tcp, udp)",
            ),
            (
                r#"{"src": "192.0.2.7", "dst": "198.51.100.10", "sport": "1", "dport": "http"}"#,
                "dport: `http` is not a port",
            ),
            (
                r#"{"src": "192.0.2.7", "dst": "198.51.100.10", "proto": "icmp", "sport": "1"}"#,
                "sport: only tcp and udp have ports",
            ),
            (
                r#"{"src": "192.0.2.7", "dst": "198.51.100.10", "proto": "udp", "sport": "1", "dport": "53", "syn": "true"}"#,
                "syn: only tcp has a SYN",
            ),
            (
                r#"{"src": "192.0.2.7", "dst": "198.51.100.10", "sport": "1", "dport": "80", "syn": "yes"}"#,
                "syn: `yes` is not a boolean",
            ),
        ] {
            assert_eq!(flow(q).expect_err(q), message);
        }
    }

    #[test]
    fn an_empty_body_is_the_default_and_a_bad_one_a_400() {
        #[derive(Debug, Default, Deserialize, PartialEq)]
        struct Body {
            service: Option<String>,
        }
        assert_eq!(json_body::<Body>(b" \n").expect("empty"), Body::default());
        assert_eq!(json_body::<Body>(b"null").expect("null"), Body::default());
        let b: Body = json_body(br#"{"service": "web"}"#).expect("object");
        assert_eq!(b.service.as_deref(), Some("web"));
        let e = json_body::<Body>(b"{").expect_err("bad JSON");
        assert!(e.parts().1.starts_with("bad JSON body: "), "{}", e.parts().1);
        assert!(no_parameters(b"").is_ok() && no_parameters(b"{}").is_ok());
        let e = no_parameters(b"[1]").expect_err("not an object");
        assert!(e.parts().1.starts_with("the body must be empty or {}: "), "{}", e.parts().1);
    }
}
