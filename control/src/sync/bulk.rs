//! The bookkeeping of bulk syncs (FS-5), both ends: an instance that starts asks every peer for
//! the entries at risk it holds ([`Asked`]), and answers the peers that ask it ([`Answering`]).
//!
//! **Counted, and asked again.** An answer comes in parts, one per worker of the answering
//! instance; each part ends with its count of entries. The asking side counts what it received
//! of each part; a part whose count does not agree (a datagram lost on the way) is counted as
//! missing entries and asked for again at once, that worker alone, as a new attempt. The
//! request goes again every [`ASK_AGAIN`] until some answer comes, and an answer silent for
//! [`STALLED_AFTER`] is asked for again: its incomplete parts, or the whole request when no
//! part has ended yet, as new attempts. All of it until the counts agree or the bulk timeout
//! passes.
//!
//! **Paced by the receiver.** The answering side sends at most [`WINDOW`] datagrams of an
//! answer beyond what the asking side has acknowledged (`BulkAck`, every [`ACK_EVERY`]
//! datagrams and every [`ACK_INTERVAL`] while some arrive), so a bulk answer of any size never
//! outruns the receiver's socket buffer, however fast either side is; an acknowledgement goes
//! again every [`ACK_AGAIN`] while the answer is incomplete, so that a lost one never leaves
//! the window shut. An answer whose asker acknowledged nothing for [`ABANDON_AFTER`] is
//! abandoned (counted), its end not sent: an asker that comes back asks again.
//!
//! **Limits.** A peer has at most one answer under way. The same ticket again is the answer
//! under way (or, once it ended, its ends sent again); a new request of the same life of the
//! peer within [`NEW_REQUEST_GAP`] of the last is refused, as is an attempt beyond
//! [`MAX_ATTEMPTS`] (counted, `bulk_requests`).

use std::time::{Duration, Instant};

use spillway_core::sync::Ticket;

use super::wire::ALL_WORKERS;

/// Datagrams of an answer in flight beyond the last acknowledgement.
pub const WINDOW: u64 = 256;
/// The asker acknowledges every this many datagrams...
pub const ACK_EVERY: u64 = 32;
/// ...and at least this often while datagrams arrive...
pub const ACK_INTERVAL: Duration = Duration::from_millis(50);
/// ...and again this often while the answer is incomplete, even with nothing new: an
/// acknowledgement lost on the way would otherwise leave the answer's window shut.
pub const ACK_AGAIN: Duration = Duration::from_millis(250);
/// An answer whose asker has acknowledged nothing for this long is abandoned (a slow asker
/// acknowledges as it goes; one that went away says so sooner: no hellos).
pub const ABANDON_AFTER: Duration = Duration::from_secs(30);
/// The asker sends its request again this often until the peer answers.
pub const ASK_AGAIN: Duration = Duration::from_millis(500);
/// An answer silent this long (no datagram of it) is asked for again.
pub const STALLED_AFTER: Duration = Duration::from_secs(3);
/// A new request of the same life of a peer no sooner than this after its last.
pub const NEW_REQUEST_GAP: Duration = Duration::from_secs(5);
/// Attempts (retries) per request at most.
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

/// What the asker sends: a request for every worker (`None`) or one, at an attempt.
pub type Ask = (Option<u16>, u16);

/// The asker's view of one peer's answer.
#[derive(Clone, Debug, Default)]
pub struct Asked {
    /// When the request (or a retry) was last sent; `None` before the first.
    pub last_sent: Option<Instant>,
    /// When a datagram of the answer last came.
    pub last_heard: Option<Instant>,
    /// The attempt of the whole request (one more each time it is asked again whole).
    pub attempt: u16,
    /// Answer datagrams received (all attempts): what the acknowledgements carry.
    pub datagrams: u64,
    /// `datagrams` as last acknowledged.
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
    /// Retries sent (a part, or the whole request, asked for again).
    pub retries: u64,
    /// Every part complete.
    pub answered: bool,
}

impl Asked {
    fn part(&mut self, worker: u16) -> &mut Part {
        let w = usize::from(worker);
        if self.parts.len() <= w {
            let attempt = self.attempt;
            self.parts.resize(w + 1, Part { attempt, ..Part::default() });
        }
        &mut self.parts[w]
    }

    /// An answer datagram of `worker`'s part at `attempt`, with `entries`, at `now`.
    pub fn answer(&mut self, worker: u16, attempt: u16, entries: u64, now: Instant) {
        self.datagrams += 1;
        self.entries += entries;
        self.last_heard = Some(now);
        let part = self.part(worker);
        if part.done || attempt < part.attempt {
            return;
        }
        if attempt > part.attempt {
            // The whole request asked again reached this worker: its new attempt counts.
            *part = Part { attempt, ..Part::default() };
        }
        part.received += entries;
    }

    /// The end of `worker`'s part at `attempt` with its count `sent`, from an instance of
    /// `workers` workers, at `now`: `Some(next attempt)` when that part must be asked for again
    /// (entries went missing), else `None`.
    pub fn end(
        &mut self,
        worker: u16,
        attempt: u16,
        workers: u16,
        sent: u64,
        now: Instant,
    ) -> Option<u16> {
        self.last_heard = Some(now);
        if worker >= workers {
            return None;
        }
        self.workers = Some(workers);
        let part = self.part(worker);
        if part.done || attempt < part.attempt {
            return None;
        }
        if attempt > part.attempt {
            *part = Part { attempt, ..Part::default() };
        }
        let retry = if part.received >= sent {
            part.done = true;
            None
        } else {
            let missing = sent - part.received;
            *part = Part { attempt: attempt.saturating_add(1), ..Part::default() };
            Some((part.attempt, missing))
        };
        if let Some((_, missing)) = retry {
            self.missing += missing;
            self.retries += 1;
            self.last_sent = Some(now);
        }
        self.answered = self.workers.is_some_and(|n| {
            self.parts.len() >= usize::from(n)
                && self.parts[..usize::from(n)].iter().all(|p| p.done)
        });
        retry.map(|(a, _)| a)
    }

    /// Is an acknowledgement due at `now`?
    pub fn ack_due(&self, now: Instant) -> bool {
        let since = self.acked_at.map(|t| now.duration_since(t));
        let fresh = self.datagrams > self.acked
            && (self.datagrams - self.acked >= ACK_EVERY
                || since.is_none_or(|s| s >= ACK_INTERVAL));
        let again = self.datagrams > 0 && !self.answered && since.is_some_and(|s| s >= ACK_AGAIN);
        fresh || again
    }

    /// What to ask for at `now`, if anything (module doc): the whole request every
    /// [`ASK_AGAIN`] until some answer comes; once an answer has been silent for
    /// [`STALLED_AFTER`], its incomplete parts as new attempts, or the whole request as a new
    /// attempt when no part has ended yet.
    pub fn due(&mut self, now: Instant) -> Vec<Ask> {
        if self.answered {
            return Vec::new();
        }
        let quiet = self.last_heard.max(self.last_sent).map(|t| now.duration_since(t));
        match self.last_heard {
            None if quiet.is_none_or(|q| q >= ASK_AGAIN) => {
                self.last_sent = Some(now);
                vec![(None, self.attempt)]
            }
            Some(_) if quiet.is_some_and(|q| q >= STALLED_AFTER) => {
                self.last_sent = Some(now);
                self.retries += 1;
                let Some(n) = self.workers else {
                    self.attempt = self.attempt.saturating_add(1).min(MAX_ATTEMPTS);
                    return vec![(None, self.attempt)];
                };
                let mut asks = Vec::new();
                for w in 0..n {
                    let p = self.part(w);
                    if !p.done {
                        let attempt = p.attempt.saturating_add(1).min(MAX_ATTEMPTS);
                        *p = Part { attempt, ..Part::default() };
                        asks.push((Some(w), attempt));
                    }
                }
                asks
            }
            _ => Vec::new(),
        }
    }
}

/// An answer this instance sends to one peer.
#[derive(Clone, Debug)]
pub struct Answering {
    /// Its request.
    pub request: u64,
    /// The peer's life it was asked in.
    pub epoch: u64,
    /// When the request came.
    pub started: Instant,
    /// Answer datagrams sent (all attempts).
    pub datagrams: u64,
    /// As acknowledged.
    pub acked: u64,
    /// When the acknowledgement last moved (or the answer started or was asked again).
    pub acked_at: Instant,
    /// Per worker: the latest attempt asked, and its end once sent (for a repeated request).
    pub parts: Vec<(u16, Option<u64>)>,
    /// Given up: its asker went away. Its items are dropped and no end is sent, so that an
    /// asker that comes back asks again.
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
        if attempt > MAX_ATTEMPTS {
            return Asking::Limited;
        }
        if let Some(a) = current.as_mut().filter(|a| a.request == request && a.epoch == epoch) {
            if worker == ALL_WORKERS {
                let newest = a.parts.iter().map(|p| p.0).max().unwrap_or(0);
                if attempt <= newest {
                    let ended = a.parts.iter().all(|p| p.1.is_some());
                    return if ended { Asking::EndAgain } else { Asking::UnderWay };
                }
                a.parts.iter_mut().for_each(|p| *p = (attempt, None));
                (a.abandoned, a.acked_at) = (false, now);
                return Asking::Start(ticket, None);
            }
            let Some(part) = a.parts.get_mut(usize::from(worker)) else { return Asking::Limited };
            if attempt <= part.0 {
                return if part.1.is_some() { Asking::EndAgain } else { Asking::UnderWay };
            }
            *part = (attempt, None);
            (a.abandoned, a.acked_at) = (false, now);
            return Asking::Start(ticket, Some(worker));
        }
        if worker != ALL_WORKERS {
            // One part of a request this instance does not know (it restarted): only a whole
            // request starts an answer.
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
            parts: vec![(attempt, None); usize::from(workers)],
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

    /// Abandon it, unfinished, if its asker has acknowledged nothing for [`ABANDON_AFTER`]
    /// (it went away; a slow asker acknowledges as it goes, and the pace is its own); true when
    /// it was abandoned now.
    pub fn check_abandon(&mut self, now: Instant) -> bool {
        let waiting = self.datagrams > self.acked || self.parts.iter().any(|p| p.1.is_none());
        let silent = now.duration_since(self.acked_at) >= ABANDON_AFTER;
        if !self.abandoned && waiting && silent {
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
        let t = Instant::now();
        let mut a = Asked::default();
        a.answer(0, 0, 19, t);
        a.answer(0, 0, 19, t);
        a.answer(1, 0, 5, t);
        assert_eq!(a.end(0, 0, 2, 38, t), None);
        assert!(!a.answered);
        // Worker 1 sent 24: 19 went missing; asked again as attempt 1.
        assert_eq!(a.end(1, 0, 2, 24, t), Some(1));
        assert_eq!((a.missing, a.retries), (19, 1));
        // A late datagram of the old attempt does not count for the new one.
        a.answer(1, 0, 19, t);
        assert_eq!(a.parts[1].received, 0);
        a.answer(1, 1, 19, t);
        a.answer(1, 1, 5, t);
        assert_eq!(a.end(1, 1, 2, 24, t), None);
        assert!(a.answered);
        // Every datagram counts for the acknowledgements.
        assert_eq!(a.datagrams, 6);
    }

    #[test]
    fn a_request_goes_again_until_answered_and_a_silent_answer_is_asked_again() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut a = Asked::default();
        assert_eq!(a.due(at(0)), [(None, 0)]);
        assert!(a.due(at(100)).is_empty());
        assert_eq!(a.due(at(500)), [(None, 0)], "no answer yet: asked again");
        // Part of the answer comes, then nothing: after the stall, the whole again (no part
        // has ended), as a new attempt.
        a.answer(0, 0, 19, at(600));
        assert!(a.due(at(3_000)).is_empty());
        assert_eq!(a.due(at(3_600)), [(None, 1)]);
        // The new attempt's datagrams count afresh; one part ends, the other goes silent.
        a.answer(0, 1, 19, at(3_700));
        a.answer(1, 1, 19, at(3_700));
        assert_eq!(a.end(0, 1, 2, 19, at(3_800)), None);
        assert_eq!(a.due(at(6_800)), [(Some(1), 2)], "the silent part, as its next attempt");
        a.answer(1, 2, 7, at(6_900));
        assert_eq!(a.end(1, 2, 2, 7, at(7_000)), None);
        assert!(a.answered && a.due(at(20_000)).is_empty());
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
    fn the_window_follows_the_acknowledgements_and_an_asker_gone_abandons() {
        let t0 = Instant::now();
        let mut cur = None;
        Answering::ask(&mut cur, req(2, 1, 5, 0, ALL_WORKERS), 1, t0);
        let a = cur.as_mut().unwrap();
        a.datagrams = WINDOW;
        assert!(!a.window_open());
        a.ack(100, t0);
        assert!(a.window_open());
        // A slow asker is waited for; one silent for long is not.
        assert!(!a.check_abandon(t0 + Duration::from_secs(5)));
        assert!(a.check_abandon(t0 + ABANDON_AFTER));
        assert!(!a.window_open());
        // Asked again (the whole request, a new attempt): it resumes.
        let r = Answering::ask(&mut cur, req(2, 1, 5, 1, ALL_WORKERS), 1, t0);
        assert!(matches!(r, Asking::Start(_, None)));
        assert!(!cur.as_ref().unwrap().abandoned);
        // It goes silent again: abandoned again.
        assert!(cur.as_mut().unwrap().check_abandon(t0 + ABANDON_AFTER));
    }
}
