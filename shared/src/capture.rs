//! Packet capture that knows the load balancer (`spillwayctl capture`): what a capture asks of
//! the workers, what they hand back, and how the two meet without a lock.
//!
//! The control plane starts a capture by giving every worker a [`Tap`] through the worker's
//! [`TapSlot`], a one-place queue the worker polls between bursts. While a worker holds a tap
//! it runs its bursts packet by packet (the same decisions as the staged burst path) and keeps
//! the packets that pass the tap's [`Filter`] at the tap's [`Points`] as [`Record`]s: the bytes
//! (up to the tap's snap length) and a [`Note`] of what the worker decided. It publishes a
//! burst's records into the tap's ring (an SPSC ring, `rtrb`) with one store; a ring without
//! room loses the rest of that burst's records, counted in [`TapShared::lost`] (the worker
//! never waits for the reader). The capture ends when the control plane sets
//! [`TapShared::stop`]: every worker drops its tap at its next poll, which the reader sees as
//! its ring abandoned.
//!
//! Without a tap, a worker tests one `Option` per burst and one empty queue per poll.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;

use crate::counters::Reason;
use crate::filter::FlowFilter;
use crate::model::Endpoint;

/// The most bytes of a packet a record keeps (a 1,500-byte packet, its Ethernet header and the
/// largest encapsulation fit).
pub const SNAP_MAX: usize = 2048;

/// Where in the path a packet was seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Point {
    /// As it arrived, before anything was changed.
    Received,
    /// As it left for the driver, after encapsulation or rewriting (its outer header to the
    /// backend included).
    Sent,
    /// As it arrived, when the path dropped it ([`Note::decision`] says why).
    Dropped,
}

impl Point {
    /// Every point.
    pub const ALL: [Point; 3] = [Point::Received, Point::Sent, Point::Dropped];

    /// The point's name, as the API and the comments spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Point::Received => "received",
            Point::Sent => "sent",
            Point::Dropped => "dropped",
        }
    }

    /// The point named `s`.
    pub fn parse(s: &str) -> Option<Point> {
        Point::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// The points a capture keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Points {
    /// [`Point::Received`].
    pub received: bool,
    /// [`Point::Sent`].
    pub sent: bool,
    /// [`Point::Dropped`].
    pub dropped: bool,
}

impl Points {
    /// Every point.
    pub const ALL: Points = Points { received: true, sent: true, dropped: true };

    /// No point.
    pub const NONE: Points = Points { received: false, sent: false, dropped: false };

    /// Whether `p` is kept.
    pub fn has(self, p: Point) -> bool {
        match p {
            Point::Received => self.received,
            Point::Sent => self.sent,
            Point::Dropped => self.dropped,
        }
    }

    /// These points and `p`.
    pub fn with(mut self, p: Point) -> Points {
        match p {
            Point::Received => self.received = true,
            Point::Sent => self.sent = true,
            Point::Dropped => self.dropped = true,
        }
        self
    }
}

/// Which packets a capture keeps: the flow fields ([`FlowFilter`], the filter `spillwayctl
/// flows` uses too) and the port the packet arrived on; an unset field matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// The flow: its addresses, ports, protocol, service and backend.
    pub flow: FlowFilter,
    /// The port (by index) the packet arrived on.
    pub port: Option<u16>,
}

/// What the worker did with a captured packet, named as its counters name it
/// ([`Decision::as_str`]: the captured packet's comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Counted under this reason: forwarded (`conntrack_hit`, `new_connection`, `replaced_*`,
    /// `sync_takeover`) or dropped (the drop reasons).
    Counted(Reason),
    /// Answered by the node itself (ARP, neighbour discovery, echo, an ICMP error).
    Answered,
    /// Handed to the kernel interface.
    ToKernel,
    /// Used by the node (an answer to one of its requests).
    Consumed,
}

impl Decision {
    /// The name: the counter's reason label, or `answered`, `to_kernel`, `consumed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Counted(r) => r.labels().1,
            Decision::Answered => "answered",
            Decision::ToKernel => "to_kernel",
            Decision::Consumed => "consumed",
        }
    }
}

/// What the worker decided for a captured packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Note {
    /// What it did with the packet.
    pub decision: Decision,
    /// The service whose rule matched, by id.
    pub service: Option<u16>,
    /// The backend the packet was sent to.
    pub backend: Option<Endpoint>,
}

impl Note {
    /// A note of `decision` alone.
    pub const fn of(decision: Decision) -> Note {
        Note { decision, service: None, backend: None }
    }
}

/// One captured packet.
#[derive(Clone, Debug)]
pub struct Record {
    /// When its burst was received: nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// The worker that handled it.
    pub worker: u16,
    /// The index of the port it arrived on (and, when sent, left by).
    pub port: u16,
    /// Where it was seen.
    pub point: Point,
    /// What was decided.
    pub note: Note,
    /// Its length on the wire.
    pub orig_len: u32,
    len: u16,
    data: [u8; SNAP_MAX],
}

impl Record {
    /// A record of the first `snaplen` bytes of `frame` (at most [`SNAP_MAX`]).
    pub fn new(point: Point, frame: &[u8], snaplen: usize, note: Note) -> Record {
        let len = frame.len().min(snaplen).min(SNAP_MAX);
        let mut data = [0u8; SNAP_MAX];
        data[..len].copy_from_slice(&frame[..len]);
        Record {
            ts_ns: 0,
            worker: 0,
            port: 0,
            point,
            note,
            orig_len: u32::try_from(frame.len()).unwrap_or(u32::MAX),
            // SNAP_MAX fits in u16.
            len: len as u16,
            data,
        }
    }

    /// The bytes kept.
    pub fn bytes(&self) -> &[u8] {
        &self.data[..usize::from(self.len)]
    }
}

/// What a capture's reader and its workers share.
#[derive(Debug)]
pub struct TapShared {
    /// Set by the reader: the capture is over.
    pub stop: AtomicBool,
    /// Per worker, the records it could not publish (its ring was full); each written by its
    /// worker alone, once per burst that lost some.
    pub lost: Box<[AtomicU64]>,
}

impl TapShared {
    /// For `workers` workers.
    pub fn new(workers: usize) -> TapShared {
        TapShared { stop: AtomicBool::new(false), lost: (0..workers).map(|_| 0.into()).collect() }
    }

    /// Records lost by every worker.
    pub fn lost_total(&self) -> u64 {
        self.lost.iter().map(|l| l.load(Ordering::Relaxed)).sum()
    }
}

/// One worker's share of a capture.
#[derive(Debug)]
pub struct Tap {
    /// Which packets to keep.
    pub filter: Filter,
    /// Where.
    pub points: Points,
    /// How many bytes of each (1..=[`SNAP_MAX`]).
    pub snaplen: usize,
    /// Where the records go.
    pub ring: rtrb::Producer<Record>,
    /// The stop flag and the loss counters.
    pub shared: Arc<TapShared>,
}

/// A worker's slot for the tap of a capture that starts: the control plane puts, the worker
/// takes between bursts.
#[derive(Debug)]
pub struct TapSlot(ArrayQueue<Box<Tap>>);

impl Default for TapSlot {
    fn default() -> Self {
        TapSlot(ArrayQueue::new(1))
    }
}

impl TapSlot {
    /// Offers `tap` to the worker; a tap still waiting there from a capture that has ended
    /// (the worker did not poll before it ended) is replaced. Gives `tap` back when the
    /// waiting one belongs to a capture still under way.
    pub fn offer(&self, tap: Box<Tap>) -> Result<(), Box<Tap>> {
        let tap = match self.0.push(tap) {
            Ok(()) => return Ok(()),
            Err(tap) => tap,
        };
        match self.0.pop() {
            Some(old) if !old.shared.stop.load(Ordering::Relaxed) => {
                // Nobody else offers: the place just freed takes the old one back.
                let _ = self.0.push(old);
                Err(tap)
            }
            _ => self.0.push(tap),
        }
    }

    /// The tap offered, if any (the worker, between bursts).
    pub fn take(&self) -> Option<Box<Tap>> {
        self.0.pop()
    }
}

/// Starts a capture on workers that poll `slots` (one per worker, in worker order): a ring of
/// `ring_records` records per worker. The readers' ends of the rings, in worker order, and
/// what the capture shares; `Err(worker)` when that worker had not taken its previous tap
/// (the taps already offered are taken back).
pub fn start(
    slots: &[Arc<TapSlot>],
    filter: &Filter,
    points: Points,
    snaplen: usize,
    ring_records: usize,
) -> Result<(Vec<rtrb::Consumer<Record>>, Arc<TapShared>), usize> {
    let shared = Arc::new(TapShared::new(slots.len()));
    let mut readers = Vec::with_capacity(slots.len());
    for (w, slot) in slots.iter().enumerate() {
        let (ring, reader) = rtrb::RingBuffer::new(ring_records.max(1));
        let tap = Tap {
            filter: filter.clone(),
            points,
            snaplen: snaplen.clamp(1, SNAP_MAX),
            ring,
            shared: Arc::clone(&shared),
        };
        if slot.offer(Box::new(tap)).is_err() {
            // Nobody has taken the taps offered so far, or a worker took one: either way the
            // stop flag ends them.
            shared.stop.store(true, Ordering::Relaxed);
            return Err(w);
        }
        readers.push(reader);
    }
    Ok((readers, shared))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::ForwardReason;

    #[test]
    fn a_record_keeps_at_most_the_snap_length() {
        let frame: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let r = Record::new(
            Point::Received,
            &frame,
            100,
            Note::of(Decision::Counted(Reason::Forward(ForwardReason::ConntrackHit))),
        );
        assert_eq!(r.bytes(), &frame[..100]);
        assert_eq!(r.orig_len, 3000);
        let whole = Record::new(Point::Sent, &frame, usize::MAX, Note::of(Decision::Answered));
        assert_eq!(whole.bytes().len(), SNAP_MAX);
        let short = Record::new(Point::Sent, &frame[..60], 128, Note::of(Decision::Answered));
        assert_eq!(short.bytes(), &frame[..60]);
    }

    #[test]
    fn a_capture_starts_only_when_every_worker_took_its_last_tap() {
        let slots: Vec<Arc<TapSlot>> = (0..2).map(|_| Arc::default()).collect();
        let (readers, shared) = start(&slots, &Filter::default(), Points::ALL, 128, 8).unwrap();
        assert_eq!(readers.len(), 2);
        let t0 = slots[0].take().expect("worker 0's tap");
        assert_eq!(t0.snaplen, 128);
        // Worker 1 has not polled: a second capture cannot start while the first runs, and
        // says which worker.
        assert_eq!(start(&slots, &Filter::default(), Points::ALL, 128, 8).err(), Some(1));
        assert!(!shared.stop.load(Ordering::Relaxed), "the first capture runs on");
        // Once the first has ended, its tap still waiting for worker 1 is replaced.
        shared.stop.store(true, Ordering::Relaxed);
        let (_, second) = start(&slots, &Filter::default(), Points::ALL, 64, 8).unwrap();
        let t1 = slots[1].take().expect("worker 1's tap");
        assert!(Arc::ptr_eq(&t1.shared, &second) && t1.snaplen == 64, "the second capture's");
        assert_eq!(Point::parse("dropped"), Some(Point::Dropped));
        assert_eq!(Point::parse("lost"), None);
        assert!(Points::NONE.with(Point::Sent).has(Point::Sent));
        assert!(!Points::NONE.with(Point::Sent).has(Point::Received));
    }
}
