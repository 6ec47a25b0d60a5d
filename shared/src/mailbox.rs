//! Conntrack queries from the control thread to the workers, with no async runtime in them.
//!
//! A worker's connection table is only ever read by its own worker. To answer "which entry
//! does this flow have?" (the admin API's lookup), the control thread posts a [`LookupQuery`]
//! into each worker's bounded [`Mailbox`]; the worker answers between two bursts through the
//! query's one-shot reply, and the control thread awaits the [`LookupReply`] futures. The
//! reply channel is `futures-channel`'s one-shot, which works under any executor (or none).

use std::sync::Arc;

use crossbeam_queue::ArrayQueue;
use futures_channel::oneshot;

use crate::conntrack::Entry;
use crate::flow::FlowKey;

/// How many queries a worker's mailbox holds; a query posted to a full mailbox is dropped and
/// its reply reports "no answer".
pub const MAILBOX_CAPACITY: usize = 64;

/// One worker's answer to a lookup: the entry, if its table holds the key. Resolves to an
/// error when the worker never answered (its mailbox was full, or it stopped).
pub type LookupReply = oneshot::Receiver<Option<Entry>>;

/// The worker's end of a reply.
pub type ReplySender = oneshot::Sender<Option<Entry>>;

/// A one-shot reply channel for one query.
pub fn reply_channel() -> (ReplySender, LookupReply) {
    oneshot::channel()
}

/// A conntrack query posted to a worker's mailbox.
#[derive(Debug)]
pub struct LookupQuery {
    /// The tracking key.
    pub key: FlowKey,
    /// Its conntrack bucket hash.
    pub hash: u64,
    /// Where the worker answers.
    pub reply: ReplySender,
}

/// A worker's bounded, lock-free query queue (control thread -> worker).
#[derive(Debug, Clone)]
pub struct Mailbox(Arc<ArrayQueue<LookupQuery>>);

impl Default for Mailbox {
    fn default() -> Mailbox {
        Mailbox(Arc::new(ArrayQueue::new(MAILBOX_CAPACITY)))
    }
}

impl Mailbox {
    /// Posts a query for `key`; the reply resolves once the worker answers, or to an error when
    /// the mailbox is full (the query is dropped).
    pub fn ask(&self, key: FlowKey, hash: u64) -> LookupReply {
        let (reply, rx) = reply_channel();
        // A full mailbox drops the query and with it the sender: the receiver reports that.
        let _ = self.0.push(LookupQuery { key, hash, reply });
        rx
    }

    /// The next pending query (worker side; one atomic load when empty).
    pub fn take(&self) -> Option<LookupQuery> {
        self.0.pop()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::Addr;

    fn key(sport: u16) -> FlowKey {
        let (src, dst) = (Addr::v4(198, 18, 0, 1), Addr::v4(198, 18, 0, 9));
        FlowKey { src, dst, sport, dport: 80, proto: 6, kind: 5, service: 1 }
    }

    #[test]
    fn a_query_is_answered_through_its_reply() {
        let m = Mailbox::default();
        let mut rx = m.ask(key(1), 7);
        let q = m.take().expect("the query is queued");
        assert_eq!((q.key, q.hash), (key(1), 7));
        q.reply.send(None).expect("the receiver is alive");
        assert_eq!(rx.try_recv().expect("not cancelled"), Some(None));
        assert!(m.take().is_none());
    }

    #[test]
    fn a_full_mailbox_drops_the_query_and_its_reply_says_so() {
        let m = Mailbox::default();
        let _kept: Vec<_> = (0..MAILBOX_CAPACITY as u16).map(|p| m.ask(key(p), 0)).collect();
        let mut dropped = m.ask(key(9999), 0);
        assert!(dropped.try_recv().is_err(), "the receiver of a dropped query is cancelled");
        assert_eq!((0..).map_while(|_| m.take()).count(), MAILBOX_CAPACITY);
    }
}
