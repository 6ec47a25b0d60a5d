//! The bookkeeping of bulk syncs (FS-5), both ends: an instance that starts asks every peer for
//! the entries at risk it holds ([`Asking`]), and answers the peers that ask it ([`Answering`]).
//!
//! **Counted, and asked again.** An answer comes in parts, one per worker of the answering
//! instance; each part ends with its count of entries. The asking side counts what it received
//! of each part; a part whose count does not agree (a datagram lost on the way) is counted as
//! missing entries and asked for again, that worker alone, as a new attempt, until the counts
//! agree or the bulk timeout passes.
//!
//! **Paced by the receiver.** The answering side sends at most [`WINDOW`] datagrams of an
//! answer beyond what the asking side has acknowledged (`BulkAck`, every [`ACK_EVERY`]
//! datagrams and every [`ACK_INTERVAL`] while some arrive), so a bulk answer of any size never
//! outruns the receiver's socket buffer, however fast either side is. An answer whose asker
//! stops acknowledging for [`ABANDON_AFTER`] is abandoned (counted).
//!
//! **Limits.** A peer has at most one answer under way. The same ticket again is the answer
//! under way (or, once it ended, its ends sent again); a new request of the same life of the
//! peer within [`NEW_REQUEST_GAP`] of the last is refused, as is a retry beyond
//! [`MAX_ATTEMPTS`] (counted, `bulk_limited`).

use std::time::{Duration, Instant};

use spillway_core::sync::Ticket;

use super::wire::ALL_WORKERS;

/// Datagrams of an answer in flight beyond the last acknowledgement.
pub const WINDOW: u64 = 256;
/// The asker acknowledges every this many datagrams...
pub const ACK_EVERY: u64 = 32;
/// ...and at least this often while datagrams arrive.
pub const ACK_INTERVAL: Duration = Duration::from_millis(50);
/// An answer whose asker acknowledged nothing for this long is abandoned.
pub const ABANDON_AFTER: Duration = Duration::from_secs(3);
/// The asker sends its request again this often until the peer answers.
pub const ASK_AGAIN: Duration = Duration::from_millis(500);
/// A new request of the same life of a peer no sooner than this after its last.
pub const NEW_REQUEST_GAP: Duration = Duration::from_secs(5);
/// Attempts (retries of a worker's part) per request at most.
pub const MAX_ATTEMPTS: u16 = 32;

/// One worker's part of an answer, as the asker tallies it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Part {
    /// The attempt the asker waits for.
    pub attempt: u16,
    /// Entries received of that attempt.
    pub received: u64,
    /// The part is complete: its end's count agreed with `received`.
    pub done: bool,
}

/// The asker's view of one peer's answer.
#[derive(Clone, Debug, Default)]
pub struct Asked {
    /// When the whole request (or a retry) was last sent; `None` before the first.
    pub last_sent: Option<Instant>,
    /// Answer datagrams received (all attempts): what the acknowledgements carry.
    pub datagrams: u64,
    /// `datagrams` as last acknowledged, and when.
    pub acked: u64,
    /// When the last acknowledgement went.
    pub acked_at: Option<Instant>,
    /// The answering instance's workers, once an end said how many.
    pub workers: Option<u16>,
    /// Per worker of the answering instance.
    pub parts: Vec<Part>,
    /// Entries received in answers (all attempts).
    pub entries: u64,
    /// Entries found missing by the counts (and asked for again).
    pub missing: u64,
    /// Retries sent.
    pub retries: u64,
    /// Every part complete.
    pub answered: bool,
    /// Some answer datagram came since the last request went.
    pub heard: bool,
}

impl Asked {
    /// An answer datagram of `worker`'s part at `attempt`, with `entries`.
    pub fn answer(&mut self, worker: u16, attempt: u16, entries: u64) {
        self.datagrams += 1;
        self.entries += entries;
        self.heard = true;
        let part = self.part(worker);
        if part.attempt == attempt && !part.done {
            part.received += entries;
        }
    }

    fn part(&mut self, worker: u16) -> &mut Part {
        let w = usize::from(worker);
        if self.parts.len() <= w {
            self.parts.resize(w + 1, Part::default());
        }
        &mut self.parts[w]
    }

    /// The end of `worker`'s part at `attempt` with its count `sent`, from an instance of
    /// `workers` workers: `Some(next attempt)` when that part must be asked for again (entries
    /// went missing), else `None`.
    pub fn end(&mut self, worker: u16, attempt: u16, workers: u16, sent: u64) -> Option<u16> {
        self.heard = true;
        if worker >= workers {
            return None;
        }
        self.workers = Some(workers);
        let part = self.part(worker);
        if part.done || part.attempt != attempt {
            return None;
        }
        let (retry, missing) = if part.received >= sent {
            part.done = true;
            (None, 0)
        } else {
            let missing = sent - part.received;
            part.attempt = attempt.saturating_add(1);
            part.received = 0;
            (Some(part.attempt), missing)
        };
        if retry.is_some() {
            self.missing += missing;
            self.retries += 1;
        }
        self.answered = self.workers.is_some_and(|n| {
            self.parts.len() >= usize::from(n)
                && self.parts[..usize::from(n)].iter().all(|p| p.done)
        });
        retry
    }

    /// Is an acknowledgement due at `now`?
    pub fn ack_due(&self, now: Instant) -> bool {
        self.datagrams > self.acked
            && (self.datagrams - self.acked >= ACK_EVERY
                || self.acked_at.is_none_or(|t| now.duration_since(t) >= ACK_INTERVAL))
    }

    /// The parts to ask for at `now` (the whole request, or nothing): the request goes again
    /// every [`ASK_AGAIN`] until some answer arrives (it, or the path, may have been lost).
    pub fn ask_whole(&mut self, now: Instant) -> bool {
        if self.answered || self.heard {
            return false;
        }
        let due = self.last_sent.is_none_or(|t| now.duration_since(t) >= ASK_AGAIN);
        if due {
            self.last_sent = Some(now);
        }
        due
    }

    /// Parts that ended with a retry asked but whose retry seems lost (nothing heard for
    /// [`ASK_AGAIN`]): (worker, attempt) to ask again.
    pub fn stalled_retries(&mut self, now: Instant) -> Vec<(u16, u16)> {
        if self.answered || self.last_sent.is_some_and(|t| now.duration_since(t) < ASK_AGAIN) {
            return Vec::new();
        }
        if self.heard {
            self.heard = false;
            self.last_sent = Some(now);
            return Vec::new();
        }
        let Some(n) = self.workers else { return Vec::new() };
        self.last_sent = Some(now);
        (0..n)
            .filter_map(|w| {
                let p = self.parts.get(usize::from(w)).copied().unwrap_or_default();
                (!p.done && p.attempt > 0).then_some((w, p.attempt))
            })
            .collect()
    }
}

/// An answer this instance sends to one peer.
#[derive(Clone, Debug)]
pub struct Answering {
    /// Its ticket (the request and the latest attempt).
    pub request: u64,
    /// The peer's life it was asked in.
    pub epoch: u64,
    /// When the request came.
    pub started: Instant,
    /// Answer datagrams sent (all attempts).
    pub datagrams: u64,
    /// As acknowledged.
    pub acked: u64,
    /// When the acknowledgement last moved (or the answer started).
    pub acked_at: Instant,
    /// Per worker: the latest attempt asked, and its end once sent (for a repeated request).
    pub parts: Vec<(u16, Option<u64>)>,
    /// Given up: the asker stopped acknowledging.
    pub abandoned: bool,
}

/// What to do with a peer's bulk request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asking {
    /// Start these workers' parts (`None`: all) with this ticket.
    Start(Ticket, Option<u16>),
    /// The answer under way covers it.
    UnderWay,
    /// It ended: send its ends again.
    EndAgain,
    /// Refused: too soon after the last, or too many attempts.
    Limited,
}

/// A peer's bulk request as received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// The asking peer.
    pub peer: u16,
    /// Its life (the session's epoch) when it asked.
    pub epoch: u64,
    /// The request's id.
    pub request: u64,
    /// The attempt.
    pub attempt: u16,
    /// The worker asked, or [`ALL_WORKERS`].
    pub worker: u16,
}

impl Answering {
    /// What to do with request `r`, given the answer `current` to its peer (if any) and this
    /// instance's `workers`.
    pub fn ask(current: &mut Option<Answering>, r: Request, workers: u16, now: Instant) -> Asking {
        let Request { peer, epoch, request, attempt, worker } = r;
        let ticket = Ticket { peer, request, attempt };
        if let Some(a) = current.as_mut().filter(|a| a.request == request && a.epoch == epoch) {
            if worker == ALL_WORKERS {
                let ended = a.parts.iter().all(|p| p.1.is_some());
                return if ended { Asking::EndAgain } else { Asking::UnderWay };
            }
            let Some(part) = a.parts.get_mut(usize::from(worker)) else { return Asking::Limited };
            if attempt <= part.0 {
                return if part.1.is_some() { Asking::EndAgain } else { Asking::UnderWay };
            }
            if attempt > MAX_ATTEMPTS {
                return Asking::Limited;
            }
            *part = (attempt, None);
            a.abandoned = false;
            a.acked_at = now;
            return Asking::Start(ticket, Some(worker));
        }
        if worker != ALL_WORKERS || attempt != 0 {
            // A retry of a request this instance does not know (it restarted): the whole.
            return Asking::Limited;
        }
        if let Some(a) = current {
            if a.epoch == epoch && now.duration_since(a.started) < NEW_REQUEST_GAP {
                return Asking::Limited;
            }
        }
        *current = Some(Answering {
            request,
            epoch,
            started: now,
            datagrams: 0,
            acked: 0,
            acked_at: now,
            parts: vec![(0, None); usize::from(workers)],
            abandoned: false,
        });
        Asking::Start(ticket, None)
    }

    /// May one more answer datagram go?
    pub fn window_open(&self) -> bool {
        !self.abandoned && self.datagrams < self.acked + WINDOW
    }

    /// The asker acknowledged `datagrams`.
    pub fn ack(&mut self, datagrams: u64, now: Instant) {
        if datagrams > self.acked {
            self.acked = datagrams.min(self.datagrams);
            self.acked_at = now;
        }
    }

    /// Abandon it if the asker has been silent too long with datagrams outstanding; true when
    /// it was abandoned now.
    pub fn check_abandon(&mut self, now: Instant) -> bool {
        let waiting = self.datagrams > self.acked || self.parts.iter().any(|p| p.1.is_none());
        if !self.abandoned && waiting && now.duration_since(self.acked_at) >= ABANDON_AFTER {
            self.abandoned = true;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(peer: u16, epoch: u64, request: u64, attempt: u16, worker: u16) -> Request {
        Request { peer, epoch, request, attempt, worker }
    }

    #[test]
    fn counts_that_agree_complete_a_part_and_a_shortfall_asks_again() {
        let mut a = Asked::default();
        a.answer(0, 0, 19);
        a.answer(0, 0, 19);
        a.answer(1, 0, 5);
        assert_eq!(a.end(0, 0, 2, 38), None);
        assert!(!a.answered);
        // Worker 1 sent 24: 19 went missing; asked again as attempt 1.
        assert_eq!(a.end(1, 0, 2, 24), Some(1));
        assert_eq!((a.missing, a.retries), (19, 1));
        // A late datagram of the old attempt does not count for the new one.
        a.answer(1, 0, 19);
        assert_eq!(a.parts[1].received, 0);
        a.answer(1, 1, 19);
        a.answer(1, 1, 5);
        assert_eq!(a.end(1, 1, 2, 24), None);
        assert!(a.answered);
        // Every datagram counts for the acknowledgements.
        assert_eq!(a.datagrams, 6);
    }

    #[test]
    fn the_same_ticket_is_the_answer_under_way_and_new_ones_are_limited() {
        let t0 = Instant::now();
        let mut cur = None;
        let start = Answering::ask(&mut cur, req(2, 10, 77, 0, ALL_WORKERS), 2, t0);
        assert_eq!(start, Asking::Start(Ticket { peer: 2, request: 77, attempt: 0 }, None));
        assert_eq!(
            Answering::ask(&mut cur, req(2, 10, 77, 0, ALL_WORKERS), 2, t0),
            Asking::UnderWay
        );
        // Another request of the same life, at once: refused; after the gap: a new answer.
        assert_eq!(
            Answering::ask(&mut cur, req(2, 10, 78, 0, ALL_WORKERS), 2, t0),
            Asking::Limited
        );
        let later = t0 + NEW_REQUEST_GAP;
        assert!(matches!(
            Answering::ask(&mut cur, req(2, 10, 78, 0, ALL_WORKERS), 2, later),
            Asking::Start(..)
        ));
        // A new life of the peer (it restarted) may ask at once.
        assert!(matches!(
            Answering::ask(&mut cur, req(2, 11, 79, 0, ALL_WORKERS), 2, later),
            Asking::Start(..)
        ));
        // A retry of one worker's part, then the same retry again, then too many.
        let r = Answering::ask(&mut cur, req(2, 11, 79, 1, 1), 2, later);
        assert_eq!(r, Asking::Start(Ticket { peer: 2, request: 79, attempt: 1 }, Some(1)));
        assert_eq!(Answering::ask(&mut cur, req(2, 11, 79, 1, 1), 2, later), Asking::UnderWay);
        assert_eq!(
            Answering::ask(&mut cur, req(2, 11, 79, MAX_ATTEMPTS + 1, 1), 2, later),
            Asking::Limited
        );
        // A worker it does not have.
        assert_eq!(Answering::ask(&mut cur, req(2, 11, 79, 2, 9), 2, later), Asking::Limited);
    }

    #[test]
    fn the_window_follows_the_acknowledgements_and_silence_abandons() {
        let t0 = Instant::now();
        let mut cur = None;
        Answering::ask(&mut cur, req(2, 1, 5, 0, ALL_WORKERS), 1, t0);
        let a = cur.as_mut().unwrap();
        a.datagrams = WINDOW;
        assert!(!a.window_open());
        a.ack(100, t0);
        assert!(a.window_open());
        assert!(!a.check_abandon(t0 + Duration::from_secs(1)));
        assert!(a.check_abandon(t0 + ABANDON_AFTER));
        assert!(!a.window_open());
    }
}
