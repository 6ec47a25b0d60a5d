//! Replay protection: per peer, the newest epoch seen and a sliding window of sequence numbers.

use super::wire::Refused;

/// How many sequence numbers below the highest seen are still accepted (once each): room for
/// the reordering of a bulk answer's burst over a multipath network.
pub const REPLAY_WINDOW: u64 = 128;

/// One peer's window: its newest epoch, the highest sequence seen in it, and which of the
/// [`REPLAY_WINDOW`] sequences up to it were seen (bit `i`: `highest - i`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Window {
    epoch: u64,
    highest: u64,
    seen: u128,
}

/// The replay state of a receiver: which peers may send, and for each the window above.
///
/// Memory is bounded by the configured peers: a sender id outside them is refused
/// (`unknown_sender`) before anything is kept about it.
#[derive(Clone, Debug)]
pub struct ReplayState {
    /// Sorted by sender id; `None` until the peer's first accepted datagram.
    peers: Vec<(u32, Option<Window>)>,
}

impl ReplayState {
    /// A state for the peers with these instance ids (this instance's own id should not be
    /// among them: its own datagrams looped back are then `unknown_sender`).
    pub fn new(peers: impl IntoIterator<Item = u32>) -> ReplayState {
        let mut ids: Vec<u32> = peers.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        ReplayState { peers: ids.into_iter().map(|id| (id, None)).collect() }
    }

    /// Change the configured peers (a reload): peers that stay keep their windows, so the
    /// datagrams they sent before are still refused as replays; dropped peers are forgotten.
    pub fn set_peers(&mut self, peers: impl IntoIterator<Item = u32>) {
        let mut next = ReplayState::new(peers);
        for (id, window) in &mut next.peers {
            if let Some(i) = self.index(*id) {
                *window = self.peers[i].1;
            }
        }
        *self = next;
    }

    /// Is `sender` one of the configured peers?
    pub fn knows(&self, sender: u32) -> bool {
        self.index(sender).is_some()
    }

    /// The newest epoch accepted from `sender`, if any datagram of it was.
    pub fn epoch(&self, sender: u32) -> Option<u64> {
        self.index(sender).and_then(|i| self.peers[i].1).map(|w| w.epoch)
    }

    fn index(&self, sender: u32) -> Option<usize> {
        self.peers.binary_search_by_key(&sender, |p| p.0).ok()
    }

    /// Accept `(epoch, seq)` from `sender` once: record it, or say why not. Call it only for
    /// an authenticated datagram (a forged one must not move the window). Sequence 0 is never
    /// accepted (senders count from 1).
    pub fn accept(&mut self, sender: u32, epoch: u64, seq: u64) -> Result<(), Refused> {
        let i = self.index(sender).ok_or(Refused::UnknownSender)?;
        let slot = &mut self.peers[i].1;
        let mut w = match *slot {
            Some(w) if epoch < w.epoch => return Err(Refused::StaleEpoch),
            Some(w) if epoch == w.epoch => w,
            // First datagram from the peer, or it restarted: a fresh window. Sequence 0
            // counts as seen, so it is refused like any replay.
            _ => Window { epoch, highest: 0, seen: 1 },
        };
        if seq > w.highest {
            let shift = seq - w.highest;
            w.seen = if shift >= u64::from(u128::BITS) { 0 } else { w.seen << shift };
            w.seen |= 1;
            w.highest = seq;
        } else {
            let age = w.highest - seq;
            if age >= REPLAY_WINDOW || w.seen & (1u128 << age) != 0 {
                return Err(Refused::Replayed);
            }
            w.seen |= 1u128 << age;
        }
        *slot = Some(w);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_sequences_are_accepted_once() {
        let mut r = ReplayState::new([7]);
        for s in 1..=300 {
            assert_eq!(r.accept(7, 10, s), Ok(()));
            assert_eq!(r.accept(7, 10, s), Err(Refused::Replayed));
        }
    }

    #[test]
    fn out_of_order_within_the_window_is_accepted_exactly_once() {
        let mut r = ReplayState::new([7]);
        assert_eq!(r.accept(7, 1, 200), Ok(()));
        // Every sequence of the window below 200, in a scrambled order, once each.
        let mut order: Vec<u64> = (200 - REPLAY_WINDOW + 1..200).collect();
        order.reverse();
        order.rotate_left(37);
        for &s in &order {
            assert_eq!(r.accept(7, 1, s), Ok(()), "seq {s}");
        }
        for &s in &order {
            assert_eq!(r.accept(7, 1, s), Err(Refused::Replayed), "seq {s} again");
        }
        // Just below the window: too old.
        assert_eq!(r.accept(7, 1, 200 - REPLAY_WINDOW), Err(Refused::Replayed));
        assert_eq!(r.accept(7, 1, 1), Err(Refused::Replayed));
    }

    #[test]
    fn a_jump_forward_slides_the_window() {
        let mut r = ReplayState::new([7]);
        assert_eq!(r.accept(7, 1, 5), Ok(()));
        assert_eq!(r.accept(7, 1, 5 + REPLAY_WINDOW), Ok(()));
        // 5 is now exactly REPLAY_WINDOW below the highest: out of the window.
        assert_eq!(r.accept(7, 1, 5), Err(Refused::Replayed));
        assert_eq!(r.accept(7, 1, 6), Ok(()));
        // A jump of more than the bitmap's width clears it.
        assert_eq!(r.accept(7, 1, 10_000), Ok(()));
        assert_eq!(r.accept(7, 1, 9_999), Ok(()));
        assert_eq!(r.accept(7, 1, 10_000), Err(Refused::Replayed));
    }

    #[test]
    fn epochs_reset_or_refuse() {
        let mut r = ReplayState::new([7, 9]);
        assert_eq!(r.accept(7, 100, 50), Ok(()));
        assert_eq!(r.epoch(7), Some(100));
        // The peer restarted: a newer epoch starts a fresh window, low sequences included.
        assert_eq!(r.accept(7, 200, 1), Ok(()));
        assert_eq!(r.epoch(7), Some(200));
        // Its previous life is over.
        assert_eq!(r.accept(7, 100, 51), Err(Refused::StaleEpoch));
        // Peers are independent.
        assert_eq!(r.epoch(9), None);
        assert_eq!(r.accept(9, 1, 1), Ok(()));
    }

    #[test]
    fn sequence_zero_and_unknown_senders_are_refused() {
        let mut r = ReplayState::new([7]);
        assert_eq!(r.accept(7, 1, 0), Err(Refused::Replayed));
        assert_eq!(r.accept(8, 1, 1), Err(Refused::UnknownSender));
        assert!(r.knows(7) && !r.knows(8));
        // Sequence 0 refused did not start the window in a way that loses sequence 1.
        assert_eq!(r.accept(7, 1, 1), Ok(()));
    }

    #[test]
    fn a_reload_keeps_the_windows_of_the_peers_that_stay() {
        let mut r = ReplayState::new([7, 9]);
        assert_eq!(r.accept(7, 1, 10), Ok(()));
        assert_eq!(r.accept(9, 1, 10), Ok(()));
        r.set_peers([7, 11]);
        assert_eq!(r.accept(7, 1, 10), Err(Refused::Replayed));
        assert_eq!(r.accept(9, 1, 11), Err(Refused::UnknownSender));
        assert_eq!(r.accept(11, 1, 1), Ok(()));
        // A peer dropped and added again starts afresh.
        r.set_peers([7]);
        r.set_peers([7, 9]);
        assert_eq!(r.epoch(9), None);
    }

    #[test]
    fn memory_is_bounded_by_the_configured_peers() {
        let mut r = ReplayState::new([3, 1, 3, 2]);
        for id in 0..10_000 {
            let _ = r.accept(id, 1, 1);
        }
        assert_eq!(r.peers.len(), 3);
    }
}
