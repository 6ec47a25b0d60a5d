//! Conntrack queries from the control thread to the workers, with no async runtime in them.
//!
//! A worker's connection table is only ever read by its own worker. To answer "which entry
//! does this flow have?" (the admin API's lookup), the control thread posts a [`LookupQuery`]
//! into each worker's bounded [`Mailbox`]; the worker answers between two bursts through the
//! query's one-shot reply, and the control thread awaits the [`LookupReply`] futures. The
//! reply channel is `futures-channel`'s one-shot, which works under any executor (or none).
//!
//! To list the table (the admin API's flows dump), the control thread asks for it a slice at a
//! time ([`SliceQuery`]: a few buckets, into a buffer the query brings, so that the worker
//! neither allocates nor pauses for longer than copying those buckets takes).

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

/// Buckets a [`SliceQuery`] asks for at most: sixteen buckets of sixteen ways, at most 256
/// entries, about 3 microseconds to copy from a 1M-entry table (64 buckets took 13.5).
pub const SLICE_BUCKETS: usize = 16;

/// A slice of a worker's table: the entries of buckets `from..from + buckets` (into `buf`,
/// which the query brings with room for every way of those buckets).
#[derive(Debug)]
pub struct SliceQuery {
    /// The first bucket.
    pub from: usize,
    /// How many buckets (at most [`SLICE_BUCKETS`]).
    pub buckets: usize,
    /// Where the worker puts the entries (empty, its capacity enough for them all).
    pub buf: Vec<Entry>,
    /// Where the worker answers.
    pub reply: oneshot::Sender<Slice>,
}

/// A worker's answer to a [`SliceQuery`].
#[derive(Debug)]
pub struct Slice {
    /// The entries of the buckets asked for.
    pub entries: Vec<Entry>,
    /// The bucket to ask for next, `None` after the last.
    pub next: Option<usize>,
    /// The table's buckets.
    pub bucket_count: usize,
}

/// One worker's answer to a slice query; an error when it never answered.
pub type SliceReply = oneshot::Receiver<Slice>;

/// A query posted to a worker's mailbox.
#[derive(Debug)]
pub enum Query {
    /// One key's entry.
    Lookup(LookupQuery),
    /// A slice of the table.
    Slice(SliceQuery),
}

/// A worker's bounded, lock-free query queue (control thread -> worker).
#[derive(Debug, Clone)]
pub struct Mailbox(Arc<ArrayQueue<Query>>);

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
        let _ = self.0.push(Query::Lookup(LookupQuery { key, hash, reply }));
        rx
    }

    /// Posts a query for the slice of the table from bucket `from` ([`SLICE_BUCKETS`] buckets);
    /// the reply is an error when the mailbox is full.
    pub fn ask_slice(&self, from: usize) -> SliceReply {
        let (reply, rx) = oneshot::channel();
        let buf = Vec::with_capacity(SLICE_BUCKETS * crate::conntrack::WAYS);
        let _ = self.0.push(Query::Slice(SliceQuery { from, buckets: SLICE_BUCKETS, buf, reply }));
        rx
    }

    /// The next pending query (worker side; one atomic load when empty).
    pub fn take(&self) -> Option<Query> {
        self.0.pop()
    }
}

impl SliceQuery {
    /// Answer from `shard` at `now`: the entries of the buckets asked for, in the buffer the
    /// query brought (no allocation: it has room for every way of them).
    pub fn answer(self, shard: &crate::conntrack::Shard, now: crate::time::Time) {
        let mut entries = self.buf;
        let buckets = self.buckets.min(SLICE_BUCKETS);
        let end = self.from.saturating_add(buckets);
        for (_, e) in shard.entries_in(self.from..end, now) {
            if entries.len() == entries.capacity() {
                break;
            }
            entries.push(e);
        }
        let bucket_count = shard.bucket_count();
        let next = (end < bucket_count).then_some(end);
        let _ = self.reply.send(Slice { entries, next, bucket_count });
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
        let Some(Query::Lookup(q)) = m.take() else { panic!("the query is queued") };
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

    #[test]
    fn a_table_is_listed_slice_by_slice_every_entry_once() {
        use crate::conntrack::{key_hash, EntryValue, Shard};
        use crate::time::Time;
        let mut shard = Shard::with_capacity(4096);
        let n = 1500u16;
        for p in 0..n {
            let k = key(p);
            let v = EntryValue { backend: u32::from(p), epoch: 0, flags: 0 };
            shard.insert(&k, key_hash(&k), v, Time::ZERO);
        }
        let m = Mailbox::default();
        let (mut seen, mut from, mut slices) = (Vec::new(), Some(0), 0);
        while let Some(f) = from {
            let mut rx = m.ask_slice(f);
            let Some(Query::Slice(q)) = m.take() else { panic!("a slice query") };
            q.answer(&shard, Time::ZERO);
            let s = rx.try_recv().expect("answered").expect("a slice");
            assert!(s.entries.len() <= SLICE_BUCKETS * crate::conntrack::WAYS);
            assert_eq!(s.bucket_count, shard.bucket_count());
            seen.extend(s.entries.iter().map(|e| e.key.sport));
            from = s.next;
            slices += 1;
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..n).collect::<Vec<_>>(), "every entry, once");
        assert_eq!(slices, shard.bucket_count().div_ceil(SLICE_BUCKETS));
    }
}
