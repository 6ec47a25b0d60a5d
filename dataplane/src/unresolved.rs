//! Frames that wait for their next hop's MAC: the first packets to a backend (or gateway)
//! that the resolver has not answered for yet, as the kernel keeps them (`unres_qlen`), so
//! that a start, a reload that adds backends or a health change that makes one eligible does
//! not cost a connection its first packet (a TCP client would wait a second to send its SYN
//! again).
//!
//! The path builds such a frame completely (encapsulated, or rewritten for L2) but for its
//! destination MAC, and hands it over with its next hop ([`crate::path::Outcome::Wait`]). The
//! worker keeps it here, at most [`PER_NEXT_HOP`] per next hop, [`CAPACITY`] and [`BYTES`] in
//! all, and
//! between bursts, when the neighbour table it reads has changed, writes the MAC of every frame
//! whose next hop is now resolved and sends it. A frame that finds the queue full, or whose next
//! hop stays unresolved for [`WAIT`], is dropped and counted as `neighbour_unresolved`; one
//! that leaves is counted in `neighbour_waited`.
//!
//! Nothing here runs for a packet whose next hop is known: the path never builds a frame to
//! wait, and a worker with nothing waiting pays one length test per poll.

use crate::neighbour::NeighbourTable;
use spillway_core::addr::Addr;
use spillway_core::wire::MacAddr;
use std::time::Duration;

/// Frames a worker keeps waiting, for every next hop together (each holds one mbuf of the
/// mempool until it leaves: size `dataplane.mempool_size` for it, docs/deployment.md).
pub const CAPACITY: usize = 512;

/// Bytes of frames a worker keeps waiting, for every next hop together.
pub const BYTES: usize = 1 << 20;

/// Frames a worker keeps waiting for one next hop: more than the kernel's `unres_qlen` (101
/// by default), so that a burst of new connections to a backend not resolved yet (a start, a
/// reload that adds it, a health change that makes it eligible) loses none of its first
/// packets.
pub const PER_NEXT_HOP: usize = 128;

/// How long a frame waits for its next hop: twice the resolver's retry, so that a lost request
/// is asked again once.
pub const WAIT: Duration = Duration::from_millis(1000);

/// A frame that waits, with its length, its next hop and the time (TSC) after which it is
/// dropped.
#[derive(Debug)]
struct Waiting<M> {
    frame: M,
    len: usize,
    next_hop: Addr,
    until: u64,
}

/// What [`WaitQueue::release`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// Frames whose MAC was written and that were handed to `send`.
    pub sent: u64,
    /// Frames dropped: their next hop did not answer within [`WAIT`].
    pub expired: u64,
}

/// One worker's waiting frames (module doc).
#[derive(Debug)]
pub struct WaitQueue<M> {
    frames: Vec<Waiting<M>>,
    /// Bytes of the frames waiting.
    bytes: usize,
    /// The generation of the neighbour table last looked at: nothing to do until it changes.
    seen_table: u64,
}

impl<M> Default for WaitQueue<M> {
    fn default() -> Self {
        WaitQueue { frames: Vec::with_capacity(CAPACITY), bytes: 0, seen_table: u64::MAX }
    }
}

impl<M> WaitQueue<M> {
    /// An empty queue (its room allocated once).
    pub fn new() -> WaitQueue<M> {
        WaitQueue::default()
    }

    /// True when no frame waits.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Frames waiting.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Keep `frame` (`len` bytes) until `next_hop` is resolved or `until` (TSC) passes; gives
    /// it back when the queue, in frames or bytes, or this next hop's share of it, is full. The
    /// next release looks at every frame (the table may have changed since the path found the
    /// next hop unresolved).
    pub fn push(&mut self, frame: M, len: usize, next_hop: Addr, until: u64) -> Result<(), M> {
        let same = self.frames.iter().filter(|w| w.next_hop == next_hop).count();
        if self.frames.len() >= CAPACITY || self.bytes + len > BYTES || same >= PER_NEXT_HOP {
            return Err(frame);
        }
        self.bytes += len;
        self.frames.push(Waiting { frame, len, next_hop, until });
        self.seen_table = u64::MAX;
        Ok(())
    }

    /// Send what can go, in the order it came: each frame whose next hop `table` resolves gets
    /// its destination MAC written by `set_mac` and goes to `send`; each frame past its time
    /// (`now`, TSC) goes to `drop`. Looks at the frames only when `table` is not the one last
    /// looked at, or a frame's time has come.
    pub fn release(
        &mut self,
        table: &NeighbourTable,
        now: u64,
        mut set_mac: impl FnMut(&mut M, MacAddr),
        mut send: impl FnMut(M),
        mut drop: impl FnMut(M),
    ) -> Released {
        let mut out = Released::default();
        let table_id = table.generation();
        let due = self.frames.iter().any(|w| now >= w.until);
        if table_id == self.seen_table && !due {
            return out;
        }
        self.seen_table = table_id;
        let mut i = 0;
        while i < self.frames.len() {
            let w = &self.frames[i];
            if let Some(mac) = table.get(&w.next_hop) {
                let mut w = self.frames.remove(i);
                self.bytes -= w.len;
                set_mac(&mut w.frame, mac);
                send(w.frame);
                out.sent += 1;
            } else if now >= w.until {
                let w = self.frames.remove(i);
                self.bytes -= w.len;
                drop(w.frame);
                out.expired += 1;
            } else {
                i += 1;
            }
        }
        out
    }

    /// Every waiting frame, for `drop` (the worker stops).
    pub fn clear(&mut self, drop: impl FnMut(M)) {
        self.bytes = 0;
        self.frames.drain(..).map(|w| w.frame).for_each(drop);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Addr {
        s.parse::<std::net::IpAddr>().unwrap().into()
    }

    const MAC: MacAddr = [2, 0, 0, 0, 0, 9];

    /// A frame: its first six bytes are the destination MAC, the rest names it.
    fn frame(n: u8) -> Vec<u8> {
        vec![0, 0, 0, 0, 0, 0, n]
    }

    #[test]
    fn a_frame_leaves_with_its_mac_when_its_next_hop_is_resolved() {
        let mut q = WaitQueue::new();
        q.push(frame(1), 60, a("198.18.1.1"), 100).unwrap();
        q.push(frame(2), 60, a("198.18.1.2"), 100).unwrap();
        q.push(frame(3), 60, a("198.18.1.1"), 100).unwrap();
        let mut sent = Vec::new();
        let empty = NeighbourTable::default();
        let r = q.release(&empty, 10, |_, _| unreachable!(), |f| sent.push(f), |_| unreachable!());
        assert_eq!((r, q.len()), (Released::default(), 3));
        let one = NeighbourTable::from_pairs([(a("198.18.1.1"), MAC)]).with_generation(1);
        let r = q.release(
            &one,
            20,
            |f: &mut Vec<u8>, m| f[..6].copy_from_slice(&m),
            |f| sent.push(f),
            |_| unreachable!(),
        );
        assert_eq!(r, Released { sent: 2, expired: 0 });
        // In the order they came, with the MAC written; the other one still waits.
        assert_eq!(sent, vec![[&MAC[..], &[1]].concat(), [&MAC[..], &[3]].concat()]);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn a_frame_whose_next_hop_stays_silent_is_dropped_when_its_time_comes() {
        let mut q = WaitQueue::new();
        q.push(frame(1), 60, a("198.18.1.1"), 100).unwrap();
        q.push(frame(2), 60, a("198.18.1.2"), 200).unwrap();
        let table = NeighbourTable::default();
        let mut dropped = Vec::new();
        let r = q.release(&table, 99, |_, _| {}, |_| unreachable!(), |f| dropped.push(f));
        assert_eq!(r, Released::default());
        // The same table, but a frame's time has come: looked at again.
        let r = q.release(&table, 100, |_, _| {}, |_| unreachable!(), |f| dropped.push(f));
        assert_eq!((r, dropped.clone()), (Released { sent: 0, expired: 1 }, vec![frame(1)]));
        let mut rest = Vec::new();
        q.clear(|f| rest.push(f));
        assert_eq!((rest, q.is_empty()), (vec![frame(2)], true));
    }

    #[test]
    fn the_queue_is_bounded_per_next_hop_and_in_all() {
        // More than the kernel keeps per neighbour (unres_qlen 101): the SYNs of a hundred new
        // connections to one backend not resolved yet all wait.
        const { assert!(PER_NEXT_HOP > 101) };
        let mut q = WaitQueue::new();
        for n in 0..PER_NEXT_HOP {
            q.push(frame(n as u8), 60, a("198.18.1.1"), 100).unwrap();
        }
        assert_eq!(q.push(frame(99), 60, a("198.18.1.1"), 100), Err(frame(99)));
        let mut k = 0u32;
        while q.len() < CAPACITY {
            k += 1;
            q.push(frame(0), 60, a(&format!("198.18.2.{}", k % 250 + 1)), 100).unwrap();
        }
        assert_eq!(q.push(frame(7), 60, a("198.18.3.3"), 100), Err(frame(7)));
        // In bytes too: a few jumbo frames fill it before their count does.
        let mut q = WaitQueue::new();
        let mut n = 0;
        while q.push(frame(1), 9_000, a(&format!("198.18.4.{}", n % 250 + 1)), 100).is_ok() {
            n += 1;
        }
        assert_eq!(n, BYTES / 9_000);
        // What leaves gives its bytes back.
        q.clear(|_| {});
        assert!(q.push(frame(1), 9_000, a("198.18.4.1"), 100).is_ok());
    }
}
