//! A worker's end of packet capture (`spillwayctl capture`, [`spillway_core::capture`]).
//!
//! A worker holds a [`WorkerTap`]. Between bursts it polls its slot ([`WorkerTap::poll`]): it
//! takes the tap of a capture that starts and drops the tap of one that ended. The worker hands
//! a burst to [`WorkerTap::process_burst`] only while a tap is held ([`WorkerTap::is_active`],
//! one test per burst); otherwise it calls [`path::process_burst`] itself. With a tap, the
//! burst's frames go through the path one at a time, each as a burst of one (the same
//! decisions: a burst's frames are decided in order, each as alone), and the path tells the
//! decision of each as it makes it ([`path::Noter`]). For each frame that passes the filter
//! the worker keeps:
//!
//! - `received`: the frame's first bytes before the path touches them;
//! - `sent`: the frame as the path left it for the driver (after encapsulation: the outer header
//!   to the backend is visible); a frame that waits for its next hop's MAC is not captured as
//!   sent, nor are frames the driver then refuses;
//! - `dropped`: the frame as it arrived, when the path dropped it;
//!
//! each with a [`Note`]: what the path decided ([`Decision`]: the forward reason it counted,
//! or the drop reason, or an answer), the service, and the backend the packet was sent to, as
//! the path told them. The records of a burst go into the tap's ring with one store; what does
//! not fit is counted as lost. Nothing here allocates after the tap is taken, locks or logs.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use spillway_core::capture::{Decision, Note, Point, Record, Tap, TapSlot};
use spillway_core::counters::Reason;
use spillway_core::decide::ForwardReason;
use spillway_core::wire;

use crate::path::{self, Noter, Outcome, PacketBuf, PathCtx, MAX_BURST};

/// A worker's capture state: its slot, and the tap of the capture under way.
#[derive(Debug, Default)]
pub struct WorkerTap {
    slot: Arc<TapSlot>,
    tap: Option<Box<Tap>>,
    /// A burst's records before they are published (room for two per frame, reserved when the
    /// first tap is taken).
    pending: Vec<Record>,
    lost: u64,
}

impl WorkerTap {
    /// A worker's end of `slot` (the control plane offers taps there).
    pub fn new(slot: Arc<TapSlot>) -> WorkerTap {
        WorkerTap { slot, ..WorkerTap::default() }
    }

    /// Between bursts: takes the tap of a capture that starts, drops the tap of one that
    /// ended (its reader then sees the ring abandoned).
    pub fn poll(&mut self) {
        if let Some(tap) = self.slot.take() {
            self.pending.reserve(2 * MAX_BURST);
            self.tap = Some(tap);
            self.lost = 0;
        }
        if self.tap.as_ref().is_some_and(|t| t.shared.stop.load(Ordering::Relaxed)) {
            self.tap = None;
        }
    }

    /// Whether a capture is under way on this worker.
    pub fn is_active(&self) -> bool {
        self.tap.is_some()
    }

    /// [`path::process_burst`] under the capture: only while one is under way
    /// ([`WorkerTap::is_active`]); frames of another port than the filter's go through the
    /// path as they would without it. `worker` and `port` name the frames' worker and port
    /// index in the records.
    pub fn process_burst<B: PacketBuf>(
        &mut self,
        bufs: &mut [B],
        ctx: &mut PathCtx<'_>,
        out: &mut [Outcome; MAX_BURST],
        worker: usize,
        port: usize,
    ) {
        let port_id = u16::try_from(port).unwrap_or(u16::MAX);
        match self.tap.as_deref_mut().filter(|t| t.filter.port.is_none_or(|p| p == port_id)) {
            None => path::process_burst(bufs, ctx, out),
            Some(tap) => {
                let n = bufs.len().min(MAX_BURST);
                let ts_ns = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
                let at =
                    At { ts_ns, worker: u16::try_from(worker).unwrap_or(u16::MAX), port: port_id };
                for (buf, o) in bufs[..n].iter_mut().zip(out.iter_mut()) {
                    *o = capture_one(tap, &mut self.pending, buf, ctx, at);
                }
                publish(tap, &mut self.pending, worker, &mut self.lost);
            }
        }
    }
}

/// What every record of a burst shares.
#[derive(Clone, Copy)]
struct At {
    ts_ns: u64,
    worker: u16,
    port: u16,
}

/// One frame through the path, its records added to `pending` when it passes the filter.
fn capture_one<B: PacketBuf>(
    tap: &Tap,
    pending: &mut Vec<Record>,
    buf: &mut B,
    ctx: &mut PathCtx<'_>,
    at: At,
) -> Outcome {
    let info = wire::classify(buf.data()).ok().and_then(|f| f.kind.packet_info().copied());
    if !tap.filter.flow.flow_matches(info.as_ref()) {
        return process_one(buf, ctx, &mut Told::default());
    }
    let first = pending.len();
    let record = |point, frame: &[u8]| {
        let mut r = Record::new(point, frame, tap.snaplen, Note::of(Decision::Answered));
        (r.ts_ns, r.worker, r.port) = (at.ts_ns, at.worker, at.port);
        r
    };
    // The frame as it arrived, for `received` and for `dropped` (the path may rewrite it).
    let staged = tap.points.received || tap.points.dropped;
    if staged {
        pending.push(record(Point::Received, buf.data()));
    }
    let mut told = Told::default();
    let outcome = process_one(buf, ctx, &mut told);
    let forwarded = told.forwarded.map(|(reason, _)| reason);
    let decision = match (outcome, forwarded) {
        (Outcome::Drop(r), _) => Decision::Counted(r),
        (Outcome::ToKernel, _) => Decision::ToKernel,
        (Outcome::Consumed, _) => Decision::Consumed,
        (_, Some(f)) => Decision::Counted(Reason::Forward(f)),
        (Outcome::Transmit | Outcome::Wait, None) => Decision::Answered,
    };
    let note = Note {
        decision,
        // A frame the path dropped before its decision: the service its rule names, for the
        // filter and the comment.
        service: told
            .service
            .or_else(|| info.as_ref().and_then(|p| ctx.snap.service_for(p)).map(|s| s.id)),
        backend: told.forwarded.and_then(|(_, slot)| ctx.snap.backend(slot)).map(|b| b.endpoint),
    };
    if !tap.filter.flow.decision_matches(note.service, note.backend) {
        pending.truncate(first);
        return outcome;
    }
    if staged {
        let dropped = matches!(outcome, Outcome::Drop(_)) && tap.points.dropped;
        match (tap.points.received, dropped) {
            (true, true) => {
                let mut copy = pending[first].clone();
                copy.point = Point::Dropped;
                pending.push(copy);
            }
            (false, true) => pending[first].point = Point::Dropped,
            (true, false) => {}
            (false, false) => pending.truncate(first),
        }
    }
    if outcome == Outcome::Transmit && tap.points.sent {
        pending.push(record(Point::Sent, buf.data()));
    }
    for r in &mut pending[first..] {
        r.note = note;
    }
    outcome
}

/// What the path told of one frame's decision ([`Noter`]).
#[derive(Default)]
struct Told {
    service: Option<u16>,
    forwarded: Option<(ForwardReason, u16)>,
}

impl Noter for Told {
    fn decided(&mut self, service: u16, forwarded: Option<(ForwardReason, u16)>) {
        self.service = Some(service);
        self.forwarded = forwarded;
    }
}

/// One frame as a burst of one, through the staged path with the decision told: the same
/// decisions as in a burst (a burst's frames are decided in order, each as alone). The
/// ordinary bursts' path is another instance of the same code ([`path::Unnoted`]), so this
/// one changes nothing of how the compiler lays the common burst out.
fn process_one<B: PacketBuf>(buf: &mut B, ctx: &mut PathCtx<'_>, told: &mut Told) -> Outcome {
    let mut out = [Outcome::Consumed; MAX_BURST];
    path::process_burst_noted(std::slice::from_mut(buf), ctx, &mut out, told);
    out[0]
}

/// The burst's records into the ring, with one store; what does not fit is lost and counted.
fn publish(tap: &mut Tap, pending: &mut Vec<Record>, worker: usize, lost: &mut u64) {
    if pending.is_empty() {
        return;
    }
    let room = tap.ring.slots().min(pending.len());
    let put = match tap.ring.write_chunk_uninit(room) {
        Ok(chunk) => chunk.fill_from_iter(pending.drain(..room)),
        Err(_) => 0,
    };
    let missed = (pending.len() + room - put) as u64;
    pending.clear();
    if missed > 0 {
        *lost += missed;
        if let Some(l) = tap.shared.lost.get(worker) {
            l.store(*lost, Ordering::Relaxed);
        }
    }
}
