//! Which flows a query is about: the filter `spillwayctl capture` gives the workers (with the
//! arrival port, [`crate::capture::Filter`]) and `spillwayctl flows` applies to the connection
//! table. An unset field matches everything.

use crate::addr::{Addr, Prefix};
use crate::flow::{FlowKey, PacketInfo};
use crate::model::Endpoint;

/// A flow filter: the fields of the flow (known before a decision) and the service and
/// backend of its decision. An unset field matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowFilter {
    /// The destination address (the VIP).
    pub vip: Option<Addr>,
    /// The destination port.
    pub dport: Option<u16>,
    /// The source address (the client) is in this prefix.
    pub client: Option<Prefix>,
    /// The source port.
    pub sport: Option<u16>,
    /// The IP protocol number.
    pub proto: Option<u8>,
    /// The service of the flow's rule, by id.
    pub service: Option<u16>,
    /// The backend of the flow: an address, and a port when given.
    pub backend: Option<(Addr, Option<u16>)>,
}

impl FlowFilter {
    fn has_flow_fields(&self) -> bool {
        self.vip.is_some()
            || self.dport.is_some()
            || self.client.is_some()
            || self.sport.is_some()
            || self.proto.is_some()
            || self.service.is_some()
            || self.backend.is_some()
    }

    /// Whether a flow from `src`:`sport` to `dst`:`dport` over `proto` passes the fields
    /// known before the decision.
    pub fn tuple_matches(&self, src: Addr, sport: u16, dst: Addr, dport: u16, proto: u8) -> bool {
        self.vip.is_none_or(|v| v == dst)
            && self.dport.is_none_or(|d| d == dport)
            && self.client.as_ref().is_none_or(|c| c.contains(src))
            && self.sport.is_none_or(|s| s == sport)
            && self.proto.is_none_or(|x| x == proto)
    }

    /// Whether a packet with flow fields `info` (`None`: it has none: ARP, neighbour
    /// discovery, other ethertypes) passes the fields known before the decision; a packet
    /// without flow fields passes only a filter without them.
    pub fn flow_matches(&self, info: Option<&PacketInfo>) -> bool {
        let Some(p) = info else { return !self.has_flow_fields() };
        self.tuple_matches(p.src, p.sport, p.dst, p.dport, p.proto)
    }

    /// Whether a connection-table entry's key passes the fields known before the decision (a
    /// key that tracks fewer than five fields has zeros in the others).
    pub fn key_matches(&self, k: &FlowKey) -> bool {
        self.tuple_matches(k.src, k.sport, k.dst, k.dport, k.proto)
    }

    /// Whether a decision for service `service` and backend `backend` passes the service and
    /// backend fields.
    pub fn decision_matches(&self, service: Option<u16>, backend: Option<Endpoint>) -> bool {
        let service_ok = self.service.is_none_or(|s| service == Some(s));
        let backend_ok = self.backend.is_none_or(|(addr, port)| {
            backend.is_some_and(|b| b.addr == addr && port.is_none_or(|p| p == b.port))
        });
        service_ok && backend_ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(src: &str, sport: u16, dst: &str, dport: u16, proto: u8) -> PacketInfo {
        PacketInfo {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            proto,
            sport,
            dport,
            ..PacketInfo::default()
        }
    }

    #[test]
    fn a_filter_matches_each_flow_field_and_an_empty_one_everything() {
        let p = info("198.18.10.7", 40000, "198.18.0.10", 80, 6);
        assert!(FlowFilter::default().flow_matches(Some(&p)));
        assert!(FlowFilter::default().flow_matches(None));
        let vip = FlowFilter { vip: Some("198.18.0.10".parse().unwrap()), ..FlowFilter::default() };
        assert!(vip.flow_matches(Some(&p)));
        assert!(!vip.flow_matches(None), "an ARP frame has no VIP");
        let other_vip =
            FlowFilter { vip: Some("198.18.0.11".parse().unwrap()), ..FlowFilter::default() };
        assert!(!other_vip.flow_matches(Some(&p)));
        let client =
            FlowFilter { client: Some("198.18.10.0/24".parse().unwrap()), ..FlowFilter::default() };
        assert!(client.flow_matches(Some(&p)));
        let far =
            FlowFilter { client: Some("198.18.11.0/24".parse().unwrap()), ..FlowFilter::default() };
        assert!(!far.flow_matches(Some(&p)));
        let tuple = FlowFilter {
            vip: Some("198.18.0.10".parse().unwrap()),
            dport: Some(80),
            client: Some(Prefix::host("198.18.10.7".parse().unwrap())),
            sport: Some(40000),
            proto: Some(6),
            ..FlowFilter::default()
        };
        assert!(tuple.flow_matches(Some(&p)));
        assert!(!FlowFilter { sport: Some(40001), ..tuple.clone() }.flow_matches(Some(&p)));
        assert!(!FlowFilter { dport: Some(443), ..tuple.clone() }.flow_matches(Some(&p)));
        assert!(!FlowFilter { proto: Some(17), ..tuple }.flow_matches(Some(&p)));
    }

    #[test]
    fn a_filter_on_service_or_backend_needs_that_decision() {
        let b = Endpoint { addr: "198.18.1.2".parse().unwrap(), port: 8080 };
        let any = FlowFilter::default();
        assert!(any.decision_matches(None, None));
        let svc = FlowFilter { service: Some(3), ..FlowFilter::default() };
        assert!(svc.decision_matches(Some(3), Some(b)));
        assert!(!svc.decision_matches(Some(4), Some(b)));
        assert!(!svc.decision_matches(None, None));
        let addr = FlowFilter { backend: Some((b.addr, None)), ..FlowFilter::default() };
        assert!(addr.decision_matches(Some(3), Some(b)));
        assert!(!addr.decision_matches(Some(3), None), "a dropped packet has no backend");
        let ported = FlowFilter { backend: Some((b.addr, Some(8081))), ..FlowFilter::default() };
        assert!(!ported.decision_matches(Some(3), Some(b)));
        // Service and backend fields also keep packets without flow fields out.
        assert!(!svc.flow_matches(None));
    }

    #[test]
    fn a_table_entry_is_matched_by_its_key() {
        let k = FlowKey::five_tuple(&info("198.18.10.7", 40000, "198.18.0.10", 80, 6), 1);
        let f = FlowFilter {
            vip: Some("198.18.0.10".parse().unwrap()),
            sport: Some(40000),
            proto: Some(6),
            ..FlowFilter::default()
        };
        assert!(f.key_matches(&k));
        assert!(!FlowFilter { dport: Some(443), ..f.clone() }.key_matches(&k));
        assert!(
            !FlowFilter { client: Some("198.18.11.0/24".parse().unwrap()), ..f }.key_matches(&k)
        );
    }
}
