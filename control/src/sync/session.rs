//! Who may write here, and whether a datagram is new: per configured peer, the *session* this
//! instance accepts datagrams of, and the sliding window of its sequence numbers.
//!
//! # Sessions, proven live
//!
//! Every start of an instance picks a random 64-bit *challenge*. Every hello carries the
//! sender's own challenge and echoes the last challenge it received from the recipient. A
//! peer's life (its epoch) becomes this instance's session with it only when one of its hellos
//! echoes this instance's current challenge: the peer has heard from this life of this
//! instance, so the hello was sealed after this instance started. Until then the peer's hellos
//! only teach its challenge (to echo back), and everything else it sends is refused
//! (`unproven`). So:
//!
//! - datagrams recorded before this instance (re)started, replayed at it, are refused: none of
//!   them can echo a challenge picked after they were sealed;
//! - a peer whose epoch went down (a clock stepped back across its restart, an epoch file
//!   lost) is taken back as soon as it echoes, after one exchange of hellos: a lower epoch is
//!   not a stale one once it is proven live;
//! - datagrams of a peer's earlier life than the session's are refused (`stale_epoch`), and
//!   within the session every sequence number is accepted once (`replayed`).
//!
//! # The window
//!
//! The highest sequence number accepted in the session and a bitmap of the [`REPLAY_WINDOW`]
//! below it. A sequence number that falls out of the window without having been seen is
//! counted as lost ([`Sessions::lost`]): a datagram dropped on the way (or more than the
//! window late). Senders number their datagrams per recipient, so there are no gaps but losses.

use std::net::IpAddr;

use super::refused::Refused;

/// How many sequence numbers below the highest seen are still accepted (once each): room for
/// the reordering of a bulk answer's burst over a multipath network.
pub const REPLAY_WINDOW: u64 = 128;

/// One session's window: the peer's epoch, the highest sequence seen in it, and which of the
/// [`REPLAY_WINDOW`] sequences up to it were seen (bit `i`: `highest - i`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Window {
    epoch: u64,
    highest: u64,
    seen: u128,
}

/// One peer's state.
#[derive(Clone, Debug)]
struct Peer {
    id: u16,
    address: IpAddr,
    session: Option<Window>,
    /// The challenge its latest hello carried (0: none yet).
    challenge: u64,
    lost: u64,
}

/// What a hello contributes to the session check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HelloProof {
    /// The sender's own challenge.
    pub challenge: u64,
    /// The recipient's challenge, as the sender last received it.
    pub echo: u64,
}

/// What [`Sessions::accept`] made of an accepted datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accepted {
    /// A datagram of the session (or a hello that proved a new one: `new_session`).
    Session {
        /// The hello just proved a session this instance did not have with this life of the
        /// peer.
        new_session: bool,
    },
    /// A hello of a peer not proven live yet: it only taught its challenge.
    Unproven,
}

/// The receiver's side of every configured peer (module doc).
///
/// Memory is bounded by the configured peers: a sender id outside them is refused
/// (`unknown_sender`) before anything is kept about it.
#[derive(Clone, Debug)]
pub struct Sessions {
    challenge: u64,
    /// Sorted by id.
    peers: Vec<Peer>,
}

impl Sessions {
    /// No session yet with any of `peers` (id and address), this life's `challenge` (random,
    /// never 0).
    pub fn new(challenge: u64, peers: impl IntoIterator<Item = (u16, IpAddr)>) -> Sessions {
        let mut peers: Vec<Peer> = peers
            .into_iter()
            .map(|(id, address)| Peer { id, address, session: None, challenge: 0, lost: 0 })
            .collect();
        peers.sort_by_key(|p| p.id);
        peers.dedup_by_key(|p| p.id);
        Sessions { challenge: challenge.max(1), peers }
    }

    /// This life's challenge.
    pub fn challenge(&self) -> u64 {
        self.challenge
    }

    fn index(&self, id: u16) -> Option<usize> {
        self.peers.binary_search_by_key(&id, |p| p.id).ok()
    }

    /// Is `id` a configured peer?
    pub fn knows(&self, id: u16) -> bool {
        self.index(id).is_some()
    }

    /// The configured address of peer `id`.
    pub fn address(&self, id: u16) -> Option<IpAddr> {
        self.index(id).map(|i| self.peers[i].address)
    }

    /// Does peer `id` have a session (proven live since this start)?
    pub fn is_proven(&self, id: u16) -> bool {
        self.index(id).is_some_and(|i| self.peers[i].session.is_some())
    }

    /// The epoch of peer `id`'s session.
    pub fn epoch(&self, id: u16) -> Option<u64> {
        self.index(id).and_then(|i| self.peers[i].session).map(|w| w.epoch)
    }

    /// The challenge to echo in this instance's hellos to `id` (0 before its first hello).
    pub fn their_challenge(&self, id: u16) -> u64 {
        self.index(id).map_or(0, |i| self.peers[i].challenge)
    }

    /// Sequence numbers of peer `id`'s sessions never received (module doc).
    pub fn lost(&self, id: u16) -> u64 {
        self.index(id).map_or(0, |i| self.peers[i].lost)
    }

    /// Accept a datagram from `sender` once, or say why not. Call it only for an
    /// authenticated datagram (a forgery must not move anything); `hello` for a hello. Sequence
    /// 0 is never accepted (senders count from 1).
    pub fn accept(
        &mut self,
        sender: u16,
        epoch: u64,
        seq: u64,
        hello: Option<HelloProof>,
    ) -> Result<Accepted, Refused> {
        let challenge = self.challenge;
        let i = self.index(sender).ok_or(Refused::UnknownSender)?;
        let p = &mut self.peers[i];
        let in_session = p.session.is_some_and(|w| w.epoch == epoch);
        let outcome = match hello {
            Some(h) if h.echo == challenge && !in_session => {
                // Proven live: this life of the peer becomes the session, from this hello on
                // (the numbers below it count as seen: sealed before the proof, they are not
                // accepted, and not counted lost).
                if seq == 0 {
                    return Err(Refused::Replayed);
                }
                p.session = Some(Window { epoch, highest: seq, seen: u128::MAX });
                p.challenge = h.challenge;
                return Ok(Accepted::Session { new_session: true });
            }
            Some(h) if !in_session => {
                p.challenge = h.challenge;
                return Ok(Accepted::Unproven);
            }
            Some(h) => {
                p.challenge = h.challenge;
                Accepted::Session { new_session: false }
            }
            None if p.session.is_none() => return Err(Refused::Unproven),
            None if !in_session => return Err(Refused::StaleEpoch),
            None => Accepted::Session { new_session: false },
        };
        let w = p.session.as_mut().expect("in session");
        slide(w, seq, &mut p.lost)?;
        Ok(outcome)
    }

    /// Change the configured peers (a reload): peers that stay keep their sessions, so the
    /// datagrams they sent before are still refused as replays; dropped peers are forgotten.
    pub fn set_peers(&mut self, peers: impl IntoIterator<Item = (u16, IpAddr)>) {
        let mut next = Sessions::new(self.challenge, peers);
        for p in &mut next.peers {
            if let Some(i) = self.index(p.id) {
                let old = &self.peers[i];
                if old.address == p.address {
                    (p.session, p.challenge, p.lost) = (old.session, old.challenge, old.lost);
                }
            }
        }
        *self = next;
    }
}

/// Accept `seq` into the window `w` once, counting the sequence numbers that leave the window
/// unseen into `lost`.
fn slide(w: &mut Window, seq: u64, lost: &mut u64) -> Result<(), Refused> {
    if seq == 0 {
        return Err(Refused::Replayed);
    }
    if seq > w.highest {
        let shift = seq - w.highest;
        *lost += if shift >= REPLAY_WINDOW {
            // The whole window leaves, and the numbers jumped over never entered it.
            u64::from(w.seen.count_zeros()) + (shift - REPLAY_WINDOW)
        } else {
            // The oldest `shift` positions leave.
            u64::from((!w.seen & !(u128::MAX >> shift)).count_ones())
        };
        w.seen = if shift >= REPLAY_WINDOW { 0 } else { w.seen << shift };
        w.seen |= 1;
        w.highest = seq;
    } else {
        let age = w.highest - seq;
        if age >= REPLAY_WINDOW || w.seen & (1u128 << age) != 0 {
            return Err(Refused::Replayed);
        }
        w.seen |= 1u128 << age;
    }
    Ok(())
}

const _: () = assert!(REPLAY_WINDOW == u128::BITS as u64, "the window is one u128");
