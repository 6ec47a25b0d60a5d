//! Frames the control thread sends on the data port (ARP requests, neighbour solicitations).
//!
//! The control thread never touches a worker's queues: it builds each frame in an mbuf and
//! queues it in the [`Outbox`], which worker 0 drains between bursts onto its own TX queue
//! (not every driver allows a TX queue without an RX queue; net_tap does not).

use std::sync::Arc;

use crossbeam::queue::ArrayQueue;
use spillway_core::addr::Addr;
use spillway_core::wire::build;

use crate::dpdk::{Mbuf, Mempool};
use crate::neighbour::RequestSender;
use crate::node::Node;
use crate::path::PacketBuf;

/// Frames the control thread gives worker 0 to transmit.
pub type Outbox<'p> = Arc<ArrayQueue<Mbuf<'p>>>;

/// Capacity of an [`Outbox`]; a request that finds it full is not sent (the resolver retries).
pub const OUTBOX_CAPACITY: usize = 256;

/// A new, empty outbox.
pub fn outbox<'p>() -> Outbox<'p> {
    Arc::new(ArrayQueue::new(OUTBOX_CAPACITY))
}

/// The resolver's [`RequestSender`]: builds ARP requests and neighbour solicitations from the
/// node's addresses into mbufs of `pool` and queues them in `outbox`.
#[derive(Debug)]
pub struct OutboxSender<'p> {
    /// Where the frames go.
    pub outbox: Outbox<'p>,
    /// Where their buffers come from.
    pub pool: &'p Mempool<'p>,
    /// The source MAC and addresses.
    pub node: Node,
}

/// Room for the largest request frame built here (a neighbour solicitation is 86 bytes).
const REQUEST_ROOM: usize = 128;

impl RequestSender for OutboxSender<'_> {
    fn send(&mut self, target: Addr) -> bool {
        let Some(our_ip) = self.node.source_for(&target) else { return false };
        let Some(mut m) = self.pool.alloc() else { return false };
        if !PacketBuf::reset(&mut m, REQUEST_ROOM) {
            return false;
        }
        let buf = PacketBuf::data_mut(&mut m);
        let built = if target.is_v4() {
            build::arp_request(buf, self.node.mac, our_ip, target)
        } else {
            build::neighbor_solicitation(buf, self.node.mac, our_ip, target)
        };
        match built {
            Ok(len) if PacketBuf::truncate(&mut m, len) => self.outbox.push(m).is_ok(),
            _ => false,
        }
    }
}
