//! The neighbour resolver: what it did with the answers the workers heard, the next hops it
//! could not resolve, the tables it published.

use super::scrape::Scrape;
use crate::view::DataplaneView;
use prometheus_client::metrics::MetricType::{Counter, Gauge};

pub(super) fn resolver(s: &mut Scrape, view: &dyn DataplaneView) {
    let Some(n) = view.neighbour_counters() else { return };
    let values = n.values();
    let f = s.family(
        "spillway_neighbour_answers",
        "ARP replies and neighbour advertisements heard, by what the resolver did: learned, \
         confirmed, changed (a next hop moved), ignored_unsolicited (not asked for), \
         ignored_conflict (another MAC claims a known next hop), rate_limited.",
        Counter,
    );
    // Publications are not answers: they have their own family below.
    for (outcome, v) in values.iter().filter(|(k, _)| *k != "publishes") {
        f.add(vec![("outcome", (*outcome).to_owned())], *v);
    }
    s.family(
        "spillway_neighbour_unresolved_next_hops",
        "Configured next hops (backends on-link, gateways) with no MAC right now: their \
         backends' packets are dropped as neighbour_unresolved.",
        Gauge,
    )
    .add(Vec::new(), n.unresolved.get());
    s.family(
        "spillway_neighbour_table_publishes",
        "Neighbour tables published to the workers.",
        Counter,
    )
    .add(Vec::new(), n.publishes.get());
}
