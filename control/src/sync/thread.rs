//! The sync thread: the one place this instance talks to its peers about connections.
//!
//! It takes what the workers' scans hand it (`spillway_dataplane::sync`: entries at risk,
//! removals, bulk answers), seals it into datagrams ([`Encoder`], one per recipient) and sends
//! them to the peers over UDP on the kernel interface; it receives the peers' datagrams, checks
//! them ([`decode`]: address, recipient, key, authentication, session), puts their entries in
//! this instance's terms ([`sync::localize`], against the current snapshot) and hands them to
//! every worker (a flow may reach any of them).
//!
//! - **Hellos** go to every peer once a second (every 100 ms until both sides have proven each
//!   other live), and at once to a peer whose hello showed it lacks something of this life:
//!   they prove each side live to the other (`session`), say which life of the recipient the
//!   sender accepts, carry the table fingerprints (the disagreement alarm) and the phase. A
//!   peer is up while its proven hellos arrive. Entries go only to a peer that accepts this
//!   life's datagrams; what is held back meanwhile it gets from its bulk sync, or from the
//!   refresh asked for as soon as it accepts.
//! - **Refresh**: every `refresh` the workers are asked for an own pass, so that the peers'
//!   copies of the entries still at risk do not expire (FS-2).
//! - **Bulk sync** at start (FS-5): every peer is asked for its entries at risk, and the
//!   answers are counted and asked for again where entries went missing ([`super::bulk`]);
//!   the instance is ready to announce once every peer has answered in full, or `bulk_timeout`
//!   has passed (logged) ([`SyncShared::bulk_done`]). A peer's request starts a bulk pass in
//!   every worker; its answer is paced by the peer's acknowledgements.
//! - **Limits** for key holders: datagrams only from the configured peer's address, unasked
//!   entries at most `max_entries_per_sec` per peer, one bulk answer per peer at a time.
//!
//! Workers never wait for it: both ways are bounded queues, and what finds a queue full is
//! counted. Nothing here is on a worker's path.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use spillway_core::counters::WorkerCounters;
use spillway_core::model::Endpoint;
use spillway_core::publish::SnapshotReader;
use spillway_core::snapshot::Snapshot;
use spillway_core::sync::{
    self, Inbound, Installed, Outbound, PeerEntry, PeerIndex, SyncLink, Ticket,
};

use super::bulk::{Answering, Asked, Asking, Request};
use super::entry::{EntryRecords, SyncedEntry};
use super::key::KeyRing;
use super::refused::Refused;
use super::session::{Accepted, Sessions};
use super::socket::{self, SyncSocket};
use super::wire::{
    decode, AnswerPart, Body, Encoder, EntriesKind, HelloFields, ALL_WORKERS,
    ANSWER_ENTRIES_PER_DATAGRAM, ENTRIES_PER_DATAGRAM, MAX_DATAGRAM,
};
use crate::instance::Phase;
use spillway_api::types::{PeerStatus, SyncLosses, SyncReply, SyncStatus};

/// How often the thread says hello to a peer with which both sides have sessions, and
/// publishes its status.
pub const HELLO_EVERY: Duration = Duration::from_secs(1);
/// How often it says hello to a peer until then (its first hellos may find the peer not yet
/// listening).
pub const HELLO_EVERY_UNTIL_PROVEN: Duration = Duration::from_millis(100);
/// A peer is down once no proven hello has come for this long.
pub const PEER_DOWN_AFTER: Duration = Duration::from_secs(3);
/// Two instances whose tables differ for this long raise the disagreement alarm.
pub const DISAGREE_AFTER: Duration = Duration::from_secs(5);
/// Hello replies to one peer no more often than this.
const HELLO_REPLY_GAP: Duration = Duration::from_millis(50);
/// Datagrams sent per turn of the loop at most, before it receives again.
const SEND_PER_TURN: usize = 256;
/// Datagrams received per turn at most.
const RECEIVE_PER_TURN: usize = 256;
/// How long the thread pauses when the workers' queues have no room for what its socket holds.
const WORKERS_FULL_PAUSE: Duration = Duration::from_micros(200);
/// How long entries wait for more to fill their datagram: a batch goes when it is full, at an
/// answer's end, or once its first entry has waited this long. Sending every turn's few entries
/// at once would fill the window with datagrams of one or two entries while a busy worker's
/// scan trickles them out, and the sealing and sending of those datagrams would take the CPU
/// the scan needs.
const HOLD: Duration = Duration::from_millis(5);

/// What the thread needs from the configuration.
#[derive(Debug, Clone)]
pub struct SyncSettings {
    /// This instance's id in the fleet.
    pub instance_id: u16,
    /// The addresses to bind to: the node's address of each family a peer uses, with the port.
    pub bind: Vec<SocketAddr>,
    /// The peers: id and address (with the fleet's port).
    pub peers: Vec<(u16, SocketAddr)>,
    /// How long a start waits for the peers' bulk answers.
    pub bulk_timeout: Duration,
    /// How often the entries at risk are sent again.
    pub refresh: Duration,
    /// This life's epoch ([`super::epoch::next_epoch`]).
    pub epoch: u64,
    /// Unasked entries accepted per peer and second at most.
    pub max_entries_per_sec: u64,
}

/// Every limit a peer can run into, each a metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limited {
    /// Entries beyond `max_entries_per_sec` (their datagram was dropped).
    EntriesRate,
    /// A bulk request too soon after the peer's last, or beyond the attempts allowed.
    BulkRequests,
    /// An answer whose asker stopped acknowledging, abandoned.
    AnswerAbandoned,
}

impl Limited {
    /// Every limit.
    pub const ALL: [Limited; 3] =
        [Limited::EntriesRate, Limited::BulkRequests, Limited::AnswerAbandoned];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Limited::EntriesRate => "entries_rate",
            Limited::BulkRequests => "bulk_requests",
            Limited::AnswerAbandoned => "answer_abandoned",
        }
    }
}

/// What the thread counts (the metrics read it).
#[derive(Debug, Default)]
pub struct SyncStats {
    /// Entries sent to the peers (each counted once, whatever the number of peers).
    pub entries_sent: AtomicU64,
    /// Removals sent (each once).
    pub removes_sent: AtomicU64,
    /// Entries sent in bulk answers.
    pub answer_entries_sent: AtomicU64,
    /// Datagrams sent, to all peers.
    pub datagrams_sent: AtomicU64,
    /// Their bytes (UDP payload: header, sealed payload, tag).
    pub bytes_sent: AtomicU64,
    /// Entries and removals not sent to a peer that does not accept this instance's datagrams
    /// yet (it has not proven this life live): it gets them from its bulk sync or the refresh
    /// that follows.
    pub held_back: AtomicU64,
    /// Authentic hellos of a peer not proven live since this start that proved nothing (they
    /// echoed another challenge: a peer that has not heard this instance yet, or a replay).
    pub hellos_unproven: AtomicU64,
    /// Entries received in accepted datagrams (broadcasts and answers).
    pub entries_received: AtomicU64,
    /// Removals received in accepted datagrams.
    pub removes_received: AtomicU64,
    /// Peers' entries localized and handed to the workers (to each worker).
    pub entries_handed: AtomicU64,
    /// Peers' entries with no counterpart here, by reason, indexed like [`Installed::ALL`].
    pub entries_refused: [AtomicU64; Installed::ALL.len()],
    /// Peers' entries or removals lost because a worker's queue was full.
    pub worker_queue_full: AtomicU64,
    /// Datagrams refused, indexed like [`Refused::ALL`].
    pub refused: [AtomicU64; Refused::ALL.len()],
    /// Limits peers ran into, indexed like [`Limited::ALL`].
    pub limited: [AtomicU64; Limited::ALL.len()],
    /// Send errors (the kernel refused a datagram).
    pub send_errors: AtomicU64,
    /// Datagrams the kernel dropped on receive, the socket's buffer full.
    pub kernel_drops: AtomicU64,
    /// Peers' datagrams never received (gaps in their sequence numbers).
    pub sequence_gaps: AtomicU64,
    /// Bulk syncs this instance asked for and finished (all peers answered or timed out).
    pub bulk_syncs: AtomicU64,
    /// The last bulk sync's duration, in milliseconds.
    pub bulk_ms: AtomicU64,
    /// Entries received in the answers to this instance's bulk requests.
    pub bulk_entries: AtomicU64,
    /// Entries the counts of those answers found missing (asked for again).
    pub bulk_missing: AtomicU64,
    /// Parts of answers asked for again.
    pub bulk_retries: AtomicU64,
    /// Bulk answers sent to joining peers (requests started).
    pub bulk_answers: AtomicU64,
}

/// What the thread shares with the rest of the instance.
#[derive(Debug)]
pub struct SyncShared {
    /// Counters.
    pub stats: SyncStats,
    /// The bulk sync at start is over (answered by every peer, or timed out).
    pub bulk_done: AtomicBool,
    /// Status for the API, refreshed once a second.
    pub status: Mutex<SyncStatus>,
    /// The keys: a reload that reads the key file again stores the new ring here.
    pub keys: ArcSwap<KeyRing>,
    /// This life's epoch.
    pub epoch: u64,
    /// Bytes of the receive buffer the kernel gave the socket.
    pub socket_buffer: AtomicU64,
}

impl SyncShared {
    fn new(keys: KeyRing, epoch: u64) -> SyncShared {
        SyncShared {
            stats: SyncStats::default(),
            bulk_done: AtomicBool::new(false),
            status: Mutex::new(SyncStatus::default()),
            keys: ArcSwap::from_pointee(keys),
            epoch,
            socket_buffer: AtomicU64::new(0),
        }
    }

    /// What the API shows.
    pub fn reply(&self) -> SyncReply {
        let s = &self.stats;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let named = |names: &[&'static str], counts: &[AtomicU64]| -> BTreeMap<String, u64> {
            names
                .iter()
                .zip(counts)
                .map(|(r, c)| (r.to_string(), get(c)))
                .filter(|(_, n)| *n > 0)
                .collect()
        };
        let refused = named(&Refused::ALL.map(Refused::as_str), &s.refused);
        let limited = named(&Limited::ALL.map(Limited::as_str), &s.limited);
        let done = self.bulk_done.load(Ordering::Relaxed);
        SyncReply {
            status: self.status.lock().map(|s| s.clone()).unwrap_or_default(),
            bulk_ms: done.then(|| get(&s.bulk_ms)),
            bulk_entries: get(&s.bulk_entries),
            bulk_retries: get(&s.bulk_retries),
            entries_sent: get(&s.entries_sent),
            answer_entries_sent: get(&s.answer_entries_sent),
            entries_received: get(&s.entries_received),
            removes_sent: get(&s.removes_sent),
            removes_received: get(&s.removes_received),
            hellos_unproven: get(&s.hellos_unproven),
            refused,
            limited,
            lost: SyncLosses {
                kernel_drops: get(&s.kernel_drops),
                sequence_gaps: get(&s.sequence_gaps),
                bulk_missing: get(&s.bulk_missing),
                send_errors: get(&s.send_errors),
                worker_queue_full: get(&s.worker_queue_full),
            },
            epoch: self.epoch,
            key_id: format!("{:08x}", self.keys.load().current.id()),
            socket_buffer: get(&self.socket_buffer),
        }
    }
}

/// A token bucket of entries per second (a second's worth at most).
#[derive(Debug, Clone, Copy)]
struct Bucket {
    per_sec: u64,
    tokens: u64,
    at: Instant,
}

impl Bucket {
    fn take(&mut self, n: u64, now: Instant) -> bool {
        let add = now.duration_since(self.at).as_millis() as u64 * self.per_sec / 1000;
        if add > 0 {
            self.tokens = (self.tokens + add).min(self.per_sec);
            self.at = now;
        }
        if self.tokens >= n {
            self.tokens -= n;
            true
        } else {
            false
        }
    }
}

struct Peer {
    id: u16,
    addr: SocketAddr,
    /// Up as last logged (a log line per change).
    logged_up: bool,
    /// The last proven hello.
    last_hello: Option<Instant>,
    /// Its last hello said it accepts this instance's datagrams (it has a session with this
    /// life).
    accepts: bool,
    /// The last hello sent to it.
    last_sent_hello: Option<Instant>,
    /// The phase its last hello said.
    phase: Phase,
    /// A hello to it is due now (module doc), no sooner than [`HELLO_REPLY_GAP`] after the
    /// last.
    reply_due: bool,
    received: u64,
    /// This instance's bulk request to it.
    asked: Asked,
    /// This instance's answer to its bulk request.
    answering: Option<Answering>,
    entries: Bucket,
    /// Its tables' fingerprint, and since when it differs from this instance's.
    fingerprint: Option<u64>,
    differs_since: Option<Instant>,
    alarmed: bool,
}

/// Starts the thread. `links` are the workers' ends (one per worker, in order), `counters`
/// their counters (for the status), `snapshots` the current snapshot.
pub fn spawn(
    settings: SyncSettings,
    keys: KeyRing,
    links: Vec<SyncLink>,
    counters: Arc<[WorkerCounters]>,
    snapshots: SnapshotReader,
    stop: Arc<AtomicBool>,
) -> std::io::Result<(JoinHandle<()>, Arc<SyncShared>)> {
    let sockets =
        settings.bind.iter().map(|a| SyncSocket::bind(*a)).collect::<std::io::Result<Vec<_>>>()?;
    let shared = Arc::new(SyncShared::new(keys, settings.epoch));
    let buffer = sockets.iter().map(|s| s.recv_buffer).min().unwrap_or(0);
    shared.socket_buffer.store(buffer as u64, Ordering::Relaxed);
    if buffer < socket::BUFFER_BYTES {
        tracing::warn!(
            "fleet sync: the kernel gave the sync socket a receive buffer of {} KiB, not the {} \
             KiB asked for: a bulk answer may lose datagrams (counted, and asked for again); \
             raise net.core.rmem_max, or run with CAP_NET_ADMIN",
            buffer / 1024,
            socket::BUFFER_BYTES / 1024
        );
    }
    let state = Arc::clone(&shared);
    let handle = std::thread::Builder::new().name("spillway-sync".into()).spawn(move || {
        let mut t = Thread::new(settings, links, counters, snapshots, sockets, state);
        t.run(&stop);
    })?;
    Ok((handle, shared))
}

/// Entries waiting to fill their datagram ([`HOLD`]).
struct Held {
    shares: Batch,
    removes: Batch,
    /// Per worker: per peer (by index), the answer entries of one ticket.
    answers: Vec<BTreeMap<usize, (Ticket, Batch)>>,
}

impl Held {
    fn new(workers: usize) -> Held {
        Held {
            shares: Batch::default(),
            removes: Batch::default(),
            answers: vec![BTreeMap::new(); workers],
        }
    }
}

/// Entries held for one datagram, and since when.
#[derive(Clone, Debug, Default)]
struct Batch {
    entries: Vec<SyncedEntry>,
    since: Option<Instant>,
}

impl Batch {
    fn push(&mut self, e: SyncedEntry, now: Instant) {
        self.since.get_or_insert(now);
        self.entries.push(e);
    }

    /// A datagram's worth of shares or removes.
    fn is_full(&self) -> bool {
        self.entries.len() >= ENTRIES_PER_DATAGRAM
    }

    /// Its first entry has waited [`HOLD`].
    fn due(&self, now: Instant) -> bool {
        self.since.is_some_and(|t| now.duration_since(t) >= HOLD)
    }

    fn take(&mut self) -> Vec<SyncedEntry> {
        self.since = None;
        std::mem::take(&mut self.entries)
    }
}

struct Thread {
    settings: SyncSettings,
    keys: Arc<KeyRing>,
    encoder: Encoder,
    sessions: Sessions,
    links: Vec<SyncLink>,
    /// One item per worker popped but not sent yet (an answer whose window is shut).
    stash: Vec<Option<Outbound>>,
    /// Entries waiting to fill their datagram ([`HOLD`]).
    held: Held,
    counters: Arc<[WorkerCounters]>,
    snapshots: SnapshotReader,
    index: (u64, PeerIndex),
    sockets: Vec<SyncSocket>,
    shared: Arc<SyncShared>,
    peers: Vec<Peer>,
    started: Instant,
    request: u64,
    /// The table fingerprints' summary of a snapshot generation (hashing every table is the
    /// costly part of a hello: done once per snapshot).
    fingerprint: (u64, u64),
}

/// A random number from the OS (the challenge, the salt, the request id); the clock's
/// nanoseconds, hashed, if the OS has none (never in practice).
fn random_u64() -> u64 {
    getrandom::u64().unwrap_or_else(|_| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        xxhash_rust::xxh3::xxh3_64(&t.to_le_bytes())
    })
}

impl Thread {
    fn new(
        settings: SyncSettings,
        links: Vec<SyncLink>,
        counters: Arc<[WorkerCounters]>,
        snapshots: SnapshotReader,
        sockets: Vec<SyncSocket>,
        shared: Arc<SyncShared>,
    ) -> Thread {
        let keys = shared.keys.load_full();
        let encoder =
            Encoder::new(&keys.current, settings.instance_id, settings.epoch, random_u64() as u32);
        let sessions =
            Sessions::new(random_u64(), settings.peers.iter().map(|&(id, a)| (id, a.ip())));
        let now = Instant::now();
        let per_sec = settings.max_entries_per_sec.max(1);
        let peers = settings
            .peers
            .iter()
            .map(|&(id, addr)| Peer {
                id,
                addr,
                logged_up: false,
                last_hello: None,
                accepts: false,
                last_sent_hello: None,
                phase: Phase::Starting,
                reply_due: false,
                received: 0,
                asked: Asked::default(),
                answering: None,
                entries: Bucket { per_sec, tokens: per_sec, at: now },
                fingerprint: None,
                differs_since: None,
                alarmed: false,
            })
            .collect();
        let stash = vec![None; links.len()];
        Thread {
            request: random_u64(),
            settings,
            keys,
            encoder,
            sessions,
            held: Held::new(links.len()),
            links,
            stash,
            counters,
            snapshots,
            index: (u64::MAX, PeerIndex::default()),
            sockets,
            shared,
            peers,
            started: now,
            fingerprint: (u64::MAX, 0),
        }
    }

    /// The current snapshot's table fingerprints' summary, worked out once per snapshot.
    fn fingerprint(&mut self) -> u64 {
        let snap = self.snapshots.load();
        if self.fingerprint.0 != snap.generation {
            self.fingerprint = (snap.generation, sync::tables_fingerprint(snap));
        }
        self.fingerprint.1
    }

    fn run(&mut self, stop: &AtomicBool) {
        let mut next_status = Instant::now();
        let mut next_refresh = Instant::now() + self.settings.refresh;
        let mut buf = [0u8; MAX_DATAGRAM + 1];
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            self.reload_keys();
            self.hellos(now);
            if now >= next_status {
                self.publish_status(now);
                next_status = now + HELLO_EVERY;
            }
            if !self.shared.bulk_done.load(Ordering::Relaxed) {
                self.bulk_progress(now);
            }
            self.acknowledge(now);
            self.abandon_silent(now);
            if now >= next_refresh {
                self.links.iter().for_each(|l| l.requests.ask_refresh());
                next_refresh = now + self.settings.refresh;
            }
            let sent = self.send_outbound(now);
            let (received, workers_full) = self.receive(&mut buf);
            if sent == 0 && received == 0 {
                if workers_full {
                    // Datagrams wait in the socket for the workers to make room: waiting on
                    // the socket would return at once, and spinning would take the CPU the
                    // workers need to make it.
                    std::thread::sleep(WORKERS_FULL_PAUSE);
                } else {
                    socket::wait(&self.sockets, Duration::from_millis(2));
                }
            }
        }
    }

    /// Seal with the key file's first key from now on, if a reload changed it.
    fn reload_keys(&mut self) {
        let keys = self.shared.keys.load();
        if !Arc::ptr_eq(&keys, &self.keys) {
            self.keys = Arc::clone(&keys);
            self.encoder.set_key(&self.keys.current);
            let also = self
                .keys
                .other
                .as_ref()
                .map_or(String::new(), |k| format!(", also accepting {:08x}", k.id()));
            tracing::info!(
                "fleet sync: keys reloaded: sealing with key {:08x}{also}",
                self.keys.current.id()
            );
        }
    }

    /// Do this instance and peer `i` accept each other's datagrams?
    fn ready(&self, i: usize) -> bool {
        self.peers[i].accepts && self.sessions.is_proven(self.peers[i].id)
    }

    fn socket_for(&self, to: SocketAddr) -> Option<&SyncSocket> {
        self.sockets.iter().find(|s| s.serves(to.ip()))
    }

    fn send(&self, datagram: &[u8], to: SocketAddr) {
        let stats = &self.shared.stats;
        match self.socket_for(to).map(|s| s.send_to(datagram, to)) {
            Some(Ok(n)) => {
                stats.datagrams_sent.fetch_add(1, Ordering::Relaxed);
                stats.bytes_sent.fetch_add(n as u64, Ordering::Relaxed);
            }
            _ => {
                stats.send_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn phase(&self) -> Phase {
        if self.shared.bulk_done.load(Ordering::Relaxed) {
            Phase::Serving
        } else {
            Phase::Starting
        }
    }

    fn hello_to(&mut self, i: usize, fingerprint: u64, now: Instant) {
        let (id, addr) = (self.peers[i].id, self.peers[i].addr);
        let fields = HelloFields {
            fingerprint,
            phase: self.phase(),
            challenge: self.sessions.challenge(),
            echo: self.sessions.their_challenge(id),
            session: self.sessions.epoch(id).unwrap_or(0),
        };
        let mut out = [0u8; MAX_DATAGRAM];
        let n = self.encoder.hello(id, &fields, &mut out);
        self.send(&out[..n], addr);
        let p = &mut self.peers[i];
        (p.last_sent_hello, p.reply_due) = (Some(now), false);
    }

    /// A hello to every peer whose turn it is: once a second, every
    /// [`HELLO_EVERY_UNTIL_PROVEN`] until both sides have sessions, and at once (no sooner
    /// than [`HELLO_REPLY_GAP`] after the last) to one whose hello asked for a reply.
    fn hellos(&mut self, now: Instant) {
        let due: Vec<usize> = (0..self.peers.len())
            .filter(|&i| {
                let p = &self.peers[i];
                let since = p.last_sent_hello.map(|t| now.duration_since(t));
                let every = if self.ready(i) { HELLO_EVERY } else { HELLO_EVERY_UNTIL_PROVEN };
                match since {
                    None => true,
                    Some(d) => d >= every || (p.reply_due && d >= HELLO_REPLY_GAP),
                }
            })
            .collect();
        if due.is_empty() {
            return;
        }
        let fingerprint = self.fingerprint();
        for i in due {
            self.hello_to(i, fingerprint, now);
        }
    }

    /// The bulk sync at start: ask every peer that has not answered, once both accept each
    /// other (again every half second until it does: a request may be lost, or sent before the
    /// path works), retry the parts whose retries seem lost; done once every peer has answered
    /// in full, or at the timeout (a peer that is down cannot answer: the timeout bounds the
    /// wait, and says so).
    fn bulk_progress(&mut self, now: Instant) {
        let waited = now.duration_since(self.started);
        let pending = self.peers.iter().filter(|p| !p.asked.answered).count();
        let timed_out = waited >= self.settings.bulk_timeout;
        if pending == 0 || timed_out {
            self.finish_bulk(now, waited, pending, timed_out);
            return;
        }
        let mut out = [0u8; MAX_DATAGRAM];
        for i in 0..self.peers.len() {
            if self.peers[i].asked.answered || !self.ready(i) {
                continue;
            }
            let (id, addr) = (self.peers[i].id, self.peers[i].addr);
            for (worker, attempt) in self.peers[i].asked.due(now) {
                let worker = worker.unwrap_or(ALL_WORKERS);
                let n = self.encoder.bulk_request(id, self.request, attempt, worker, &mut out);
                self.send(&out[..n], addr);
            }
        }
    }

    fn finish_bulk(&mut self, now: Instant, waited: Duration, pending: usize, timed_out: bool) {
        let stats = &self.shared.stats;
        stats.bulk_syncs.fetch_add(1, Ordering::Relaxed);
        stats.bulk_ms.store(waited.as_millis() as u64, Ordering::Relaxed);
        let state = if timed_out && pending > 0 { "timed_out" } else { "done" };
        let entries: u64 = self.peers.iter().map(|p| p.asked.entries).sum();
        let missing: u64 = self.peers.iter().map(|p| p.asked.missing).sum();
        if state == "timed_out" {
            let which: Vec<String> = self
                .peers
                .iter()
                .filter(|p| !p.asked.answered)
                .map(|p| format!("{} ({})", p.id, p.addr.ip()))
                .collect();
            tracing::warn!(
                "fleet sync: bulk sync timed out after {:.1} s with {entries} entries received; \
                 announcing without the rest of the answers of peer(s) {}",
                waited.as_secs_f64(),
                which.join(", ")
            );
        } else {
            tracing::info!(
                "fleet sync: bulk sync done in {:.2} s: {entries} entries from {} peer(s), every \
                 count agreeing ({missing} found missing on the way and asked for again)",
                waited.as_secs_f64(),
                self.peers.len()
            );
        }
        // The peers' answers and the verdict in one status, before the flag: a reader that
        // sees the bulk sync over sees its verdict and every answer it counted.
        self.publish_status(now);
        self.shared.status.lock().map(|mut s| s.bulk = state.into()).ok();
        self.shared.bulk_done.store(true, Ordering::Relaxed);
    }

    /// Acknowledge the answers received so far (their pace).
    fn acknowledge(&mut self, now: Instant) {
        let mut out = [0u8; MAX_DATAGRAM];
        for i in 0..self.peers.len() {
            if !self.peers[i].asked.ack_due(now) {
                continue;
            }
            let (id, addr, datagrams) =
                (self.peers[i].id, self.peers[i].addr, self.peers[i].asked.datagrams);
            let n = self.encoder.bulk_ack(id, self.request, datagrams, &mut out);
            self.send(&out[..n], addr);
            let a = &mut self.peers[i].asked;
            (a.acked, a.acked_at) = (datagrams, Some(now));
        }
    }

    fn abandon_silent(&mut self, now: Instant) {
        for p in &mut self.peers {
            let Some(a) = &mut p.answering else { continue };
            if a.check_abandon(now) {
                self.shared.stats.limited[Limited::AnswerAbandoned as usize]
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    "fleet sync: peer {} ({}) stopped acknowledging its bulk answer: abandoned \
                     after {} datagrams",
                    p.id,
                    p.addr.ip(),
                    a.datagrams
                );
            }
        }
    }

    /// What the workers' scans found, sealed and sent once a datagram's worth is there or its
    /// first entry has waited [`HOLD`]; returns the datagrams sent.
    fn send_outbound(&mut self, now: Instant) -> usize {
        let mut sent = 0;
        for w in 0..self.links.len() {
            while sent < SEND_PER_TURN {
                let item = match self.stash[w].take() {
                    Some(i) => i,
                    None => match self.links[w].outbound.pop() {
                        Some(i) => i,
                        None => break,
                    },
                };
                match item {
                    Outbound::Share(e) => {
                        self.held.shares.push(synced(&e), now);
                        if self.held.shares.is_full() {
                            sent += self.send_held_shares(EntriesKind::Entries);
                        }
                    }
                    Outbound::Remove(e) => {
                        self.held.removes.push(synced(&e), now);
                        if self.held.removes.is_full() {
                            sent += self.send_held_shares(EntriesKind::Remove);
                        }
                    }
                    Outbound::Answer(t, e) => {
                        let Some(i) = self.answer_peer(t, w) else { continue };
                        let Some(a) = self.peers[i].answering.as_ref() else { continue };
                        if a.abandoned {
                            continue;
                        }
                        if !a.window_open() {
                            self.stash[w] = Some(item);
                            break;
                        }
                        // An answer's entries go in datagrams of one worker's part: a batch
                        // per worker and peer, of one ticket.
                        if self.held.answers[w].get(&i).is_some_and(|(bt, _)| *bt != t) {
                            sent += self.send_held_answer(w, i);
                        }
                        let batch = self.held.answers[w].entry(i).or_insert((t, Batch::default()));
                        batch.1.push(synced(&e), now);
                        if batch.1.entries.len() == ANSWER_ENTRIES_PER_DATAGRAM {
                            sent += self.send_held_answer(w, i);
                        }
                    }
                    Outbound::AnswerEnd(t, count) => {
                        let Some(i) = self.answer_peer(t, w) else { continue };
                        // An abandoned answer's end is not sent: its asker, if it comes
                        // back, asks again rather than count entries that were dropped.
                        if self.peers[i].answering.as_ref().is_some_and(|a| a.abandoned) {
                            continue;
                        }
                        sent += self.send_held_answer(w, i);
                        sent += self.send_answer_end(i, w, t, count);
                    }
                }
            }
            let due: Vec<usize> = self.held.answers[w]
                .iter()
                .filter(|(_, (_, b))| b.due(now))
                .map(|(&i, _)| i)
                .collect();
            for i in due {
                sent += self.send_held_answer(w, i);
            }
        }
        if self.held.shares.due(now) {
            sent += self.send_held_shares(EntriesKind::Entries);
        }
        if self.held.removes.due(now) {
            sent += self.send_held_shares(EntriesKind::Remove);
        }
        sent
    }

    /// The held shares or removes, sent to every peer that accepts them.
    fn send_held_shares(&mut self, kind: EntriesKind) -> usize {
        let batch = match kind {
            EntriesKind::Entries => &mut self.held.shares,
            EntriesKind::Remove => &mut self.held.removes,
        };
        let mut entries = batch.take();
        self.broadcast(kind, &mut entries)
    }

    /// Worker `w`'s held answer entries for peer `i`, sent if that answer is still the one
    /// under way (entries of an earlier attempt or an abandoned answer are dropped).
    fn send_held_answer(&mut self, w: usize, i: usize) -> usize {
        let Some((t, mut batch)) = self.held.answers[w].remove(&i) else { return 0 };
        let current = self.answer_peer(t, w) == Some(i)
            && self.peers[i].answering.as_ref().is_some_and(|a| !a.abandoned);
        if !current {
            return 0;
        }
        let mut entries = batch.take();
        self.send_answer(i, w, &mut entries, t)
    }

    /// The peer an answer item is for, if its answer is the one under way (an item of an
    /// earlier request or attempt is dropped).
    fn answer_peer(&self, t: Ticket, worker: usize) -> Option<usize> {
        let i = self.peers.iter().position(|p| p.id == t.peer)?;
        let a = self.peers[i].answering.as_ref()?;
        let part = a.parts.get(worker)?;
        (a.request == t.request && part.0 == t.attempt).then_some(i)
    }

    /// Seal `entries` (emptied) to every peer that accepts them; datagrams sent.
    fn broadcast(&mut self, kind: EntriesKind, entries: &mut Vec<SyncedEntry>) -> usize {
        if entries.is_empty() {
            return 0;
        }
        let mut sent = 0;
        let count = entries.len() as u64;
        for i in 0..self.peers.len() {
            if !self.ready(i) {
                self.shared.stats.held_back.fetch_add(count, Ordering::Relaxed);
                continue;
            }
            let (id, addr) = (self.peers[i].id, self.peers[i].addr);
            let mut datagrams = Vec::new();
            self.encoder.all_entries(kind, id, entries.iter().copied(), |d| {
                datagrams.push(d.to_vec());
            });
            for d in &datagrams {
                self.send(d, addr);
            }
            sent += datagrams.len();
        }
        let stats = &self.shared.stats;
        match kind {
            EntriesKind::Entries => stats.entries_sent.fetch_add(count, Ordering::Relaxed),
            EntriesKind::Remove => stats.removes_sent.fetch_add(count, Ordering::Relaxed),
        };
        entries.clear();
        sent
    }

    fn send_answer(
        &mut self,
        i: usize,
        worker: usize,
        entries: &mut Vec<SyncedEntry>,
        t: Ticket,
    ) -> usize {
        if entries.is_empty() {
            return 0;
        }
        let (id, addr) = (self.peers[i].id, self.peers[i].addr);
        let part = AnswerPart { request: t.request, attempt: t.attempt, worker: worker as u16 };
        let mut out = [0u8; MAX_DATAGRAM];
        let mut it = entries.drain(..);
        let mut sent = 0;
        while let Some(p) = self.encoder.answer(id, part, &mut it, &mut out) {
            self.send(&out[..p.len], addr);
            self.shared.stats.answer_entries_sent.fetch_add(p.entries as u64, Ordering::Relaxed);
            if let Some(a) = &mut self.peers[i].answering {
                a.datagrams += 1;
            }
            sent += 1;
        }
        sent
    }

    fn send_answer_end(&mut self, i: usize, worker: usize, t: Ticket, count: u64) -> usize {
        let workers = self.links.len() as u16;
        let (id, addr) = (self.peers[i].id, self.peers[i].addr);
        let part = AnswerPart { request: t.request, attempt: t.attempt, worker: worker as u16 };
        if let Some(p) = self.peers[i].answering.as_mut().and_then(|a| a.parts.get_mut(worker)) {
            p.1 = Some(count);
        }
        let mut out = [0u8; MAX_DATAGRAM];
        let n = self.encoder.answer_end(id, part, workers, count, &mut out);
        self.send(&out[..n], addr);
        1
    }

    /// Datagrams read and used, and whether reading stopped for want of room in the workers'
    /// queues.
    fn receive(&mut self, buf: &mut [u8; MAX_DATAGRAM + 1]) -> (usize, bool) {
        let mut got = 0;
        for s in 0..self.sockets.len() {
            for _ in 0..RECEIVE_PER_TURN {
                // The workers' queues first: a datagram read is handed on whole. While they are
                // full the socket's buffer holds what comes, and a bulk answer waits for this
                // instance's acknowledgements: nothing is lost for want of room.
                if !self.workers_have_room() {
                    return (got, true);
                }
                let r = match self.sockets[s].recv(buf) {
                    Ok(Some(r)) => r,
                    Ok(None) | Err(_) => break,
                };
                got += 1;
                self.datagram(&mut buf[..r.len], r.from.ip());
            }
        }
        let drops = self.sockets.iter().map(SyncSocket::dropped).sum();
        self.shared.stats.kernel_drops.store(drops, Ordering::Relaxed);
        (got, false)
    }

    /// Room in every worker's queue for a whole datagram's entries.
    fn workers_have_room(&self) -> bool {
        let need = ENTRIES_PER_DATAGRAM.max(ANSWER_ENTRIES_PER_DATAGRAM);
        self.links.iter().all(|l| l.inbound.len() + need <= l.inbound.capacity())
    }

    fn refuse(&self, r: Refused) {
        self.shared.stats.refused[r.index()].fetch_add(1, Ordering::Relaxed);
    }

    fn datagram(&mut self, buf: &mut [u8], from: IpAddr) {
        let keys = Arc::clone(&self.keys);
        let me = self.settings.instance_id;
        let dgram = match decode(buf, from, me, &keys, &mut self.sessions) {
            Ok(d) => d,
            Err(r) => return self.refuse(r),
        };
        let now = Instant::now();
        let id = dgram.header.sender;
        let Some(i) = self.peers.iter().position(|p| p.id == id) else { return };
        match dgram.body {
            Body::Hello { fingerprint, echo, session, phase, .. } => self.hello_from(
                i,
                phase,
                dgram.header.epoch,
                dgram.accepted,
                fingerprint,
                echo,
                session,
                now,
            ),
            Body::Entries(records) => self.entries(i, records, None, now),
            Body::Answer(part, records) => self.entries(i, records, Some(part), now),
            Body::Remove(records) => self.removals(records),
            Body::BulkRequest { request, attempt, worker } => {
                self.bulk_request(i, dgram.header.epoch, request, attempt, worker, now)
            }
            Body::AnswerEnd { part, workers, sent } => self.answer_end(i, part, workers, sent, now),
            Body::BulkAck { request, datagrams } => {
                if let Some(a) = self.peers[i].answering.as_mut().filter(|a| a.request == request) {
                    a.ack(datagrams, now);
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn hello_from(
        &mut self,
        i: usize,
        phase: Phase,
        epoch: u64,
        accepted: Accepted,
        fingerprint: u64,
        echo: u64,
        session: u64,
        now: Instant,
    ) {
        let was_ready = self.ready(i);
        let own_epoch = self.encoder.epoch();
        let challenge = self.sessions.challenge();
        let p = &mut self.peers[i];
        p.accepts = session == own_epoch;
        p.phase = phase;
        let proven = matches!(accepted, Accepted::Session { .. });
        let new_session = matches!(accepted, Accepted::Session { new_session: true });
        if !proven {
            self.shared.stats.hellos_unproven.fetch_add(1, Ordering::Relaxed);
        }
        if proven {
            p.last_hello = Some(now);
            p.fingerprint = Some(fingerprint);
        }
        if new_session {
            tracing::info!(
                "fleet sync: peer {} ({}) proved live (epoch {epoch})",
                p.id,
                p.addr.ip()
            );
        }
        // It lacks this life's challenge, or a session with it, or this instance just made
        // one with it: answer at once, so that both sides are done in a round trip.
        if echo != challenge || !proven || !p.accepts || new_session {
            p.reply_due = true;
        }
        // Ready both ways now: what a pass held back from it meanwhile goes at once, unless it
        // is starting (it asks for a bulk answer, which holds all of it).
        if !was_ready && self.ready(i) && phase != Phase::Starting {
            self.links.iter().for_each(|l| l.requests.ask_refresh());
        }
    }

    fn answer_end(&mut self, i: usize, part: AnswerPart, workers: u16, sent: u64, now: Instant) {
        if part.request != self.request {
            return;
        }
        let asked = &mut self.peers[i].asked;
        if let Some(attempt) = asked.end(part.worker, part.attempt, workers, sent, now) {
            let (id, addr) = (self.peers[i].id, self.peers[i].addr);
            let mut out = [0u8; MAX_DATAGRAM];
            let n = self.encoder.bulk_request(id, self.request, attempt, part.worker, &mut out);
            self.send(&out[..n], addr);
        }
        let stats = &self.shared.stats;
        let missing = self.peers.iter().map(|p| p.asked.missing).sum();
        let retries = self.peers.iter().map(|p| p.asked.retries).sum();
        stats.bulk_missing.store(missing, Ordering::Relaxed);
        stats.bulk_retries.store(retries, Ordering::Relaxed);
    }

    fn entries(
        &mut self,
        i: usize,
        records: EntryRecords<'_>,
        part: Option<AnswerPart>,
        now: Instant,
    ) {
        let n = records.len() as u64;
        let stats = &self.shared.stats;
        match part {
            Some(part) => {
                if part.request == self.request {
                    self.peers[i].asked.answer(part.worker, part.attempt, n, now);
                    stats.bulk_entries.fetch_add(n, Ordering::Relaxed);
                }
            }
            None => {
                if !self.peers[i].entries.take(n, now) {
                    stats.limited[Limited::EntriesRate as usize].fetch_add(n, Ordering::Relaxed);
                    return;
                }
            }
        }
        let entries: Vec<PeerEntry> = records.iter().map(|e| peer_entry(&e)).collect();
        self.peers[i].received += n;
        stats.entries_received.fetch_add(n, Ordering::Relaxed);
        self.hand_to_workers(&entries);
    }

    fn removals(&mut self, records: EntryRecords<'_>) {
        let snap: Arc<Snapshot> = Arc::clone(self.snapshots.load());
        self.refresh_index(&snap);
        let stats = &self.shared.stats;
        for e in records.iter() {
            stats.removes_received.fetch_add(1, Ordering::Relaxed);
            let Some(r) = sync::localize_removal(&peer_entry(&e), &self.index.1) else { continue };
            for l in &self.links {
                if l.inbound.push(Inbound::Remove(r)).is_err() {
                    stats.worker_queue_full.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    fn bulk_request(
        &mut self,
        i: usize,
        epoch: u64,
        request: u64,
        attempt: u16,
        worker: u16,
        now: Instant,
    ) {
        let workers = self.links.len() as u16;
        let id = self.peers[i].id;
        let current = &mut self.peers[i].answering;
        let r = Request { peer: id, epoch, request, attempt, worker };
        let got = Answering::ask(current, r, workers, now);
        let limited = &self.shared.stats.limited[Limited::BulkRequests as usize];
        match got {
            Asking::Start(ticket, only) => {
                if only.is_none() {
                    self.shared.stats.bulk_answers.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(
                        "fleet sync: peer {} ({}) asked for the entries at risk (bulk sync)",
                        id,
                        self.peers[i].addr.ip()
                    );
                }
                for (w, l) in self.links.iter().enumerate() {
                    if only.is_none_or(|o| usize::from(o) == w) && l.bulk.push(ticket).is_err() {
                        limited.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Asking::UnderWay => {}
            Asking::EndAgain => {
                let parts = self.peers[i].answering.as_ref().map(|a| (a.request, a.parts.clone()));
                if let Some((request, parts)) = parts {
                    for (w, (attempt, end)) in parts.into_iter().enumerate() {
                        if let Some(count) = end {
                            let t = Ticket { peer: id, request, attempt };
                            self.send_answer_end(i, w, t, count);
                        }
                    }
                }
            }
            Asking::Limited => {
                limited.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn refresh_index(&mut self, snap: &Snapshot) {
        if self.index.0 != snap.generation {
            self.index = (snap.generation, PeerIndex::of(snap));
        }
    }

    fn hand_to_workers(&mut self, entries: &[PeerEntry]) {
        let snap: Arc<Snapshot> = Arc::clone(self.snapshots.load());
        self.refresh_index(&snap);
        // The workers' clock is theirs; a backend's draining deadline is judged at takeover.
        let now = spillway_core::time::Time::ZERO;
        let stats = &self.shared.stats;
        for e in entries {
            // The backend's liveness is judged at takeover; here only that it exists.
            match sync::localize(e, &self.index.1, &snap, now) {
                Ok(local) => {
                    for l in &self.links {
                        if l.inbound.push(Inbound::Store(local)).is_err() {
                            stats.worker_queue_full.fetch_add(1, Ordering::Relaxed);
                        } else {
                            stats.entries_handed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                Err(why) => {
                    stats.entries_refused[why.index()].fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    fn publish_status(&mut self, now: Instant) {
        let own = self.fingerprint();
        let mut gaps = 0;
        for p in &mut self.peers {
            let up = p.last_hello.is_some_and(|t| now.duration_since(t) < PEER_DOWN_AFTER);
            if up != p.logged_up {
                p.logged_up = up;
                if up {
                    tracing::info!("fleet sync: peer {} ({}) up", p.id, p.addr.ip());
                } else {
                    tracing::warn!(
                        "fleet sync: peer {} ({}) down: no hello proven live for {} s",
                        p.id,
                        p.addr.ip(),
                        PEER_DOWN_AFTER.as_secs()
                    );
                }
            }
            gaps += self.sessions.lost(p.id);
            watch_tables(p, up, own, now);
        }
        self.shared.stats.sequence_gaps.store(gaps, Ordering::Relaxed);
        let peers = self
            .peers
            .iter()
            .map(|p| PeerStatus {
                id: u32::from(p.id),
                address: p.addr.ip().to_string(),
                up: p.last_hello.is_some_and(|t| now.duration_since(t) < PEER_DOWN_AFTER),
                proven: self.sessions.is_proven(p.id),
                accepts: p.accepts,
                epoch: self.sessions.epoch(p.id),
                last_hello_ms: p.last_hello.map(|t| now.duration_since(t).as_millis() as u64),
                entries_received: p.received,
                bulk_answered: p.asked.answered,
                bulk_entries: p.asked.entries,
                bulk_missing: p.asked.missing,
                tables_differ: p.alarmed,
                tables_differ_sec: p.differs_since.map(|t| now.duration_since(t).as_secs_f64()),
                sequence_gaps: self.sessions.lost(p.id),
            })
            .collect();
        let scanned = self.counters.iter().map(|c| c.sync.scanned_generation.get()).min();
        if let Ok(mut s) = self.shared.status.lock() {
            if s.bulk.is_empty() {
                s.bulk = "pending".into();
            }
            s.peers = peers;
            s.scanned_generation = scanned.unwrap_or(0);
        }
    }
}

/// The fleet's disagreement alarm for one peer: tables that differ from this instance's
/// (`own`) for longer than [`DISAGREE_AFTER`] (longer than a reload or a health verdict takes
/// to reach every instance) raise it, with a log line; tables that agree again lower it.
fn watch_tables(p: &mut Peer, up: bool, own: u64, now: Instant) {
    let differs = up && p.fingerprint.is_some_and(|f| f != own);
    match (differs, p.differs_since) {
        (true, None) => p.differs_since = Some(now),
        (false, Some(_)) => {
            p.differs_since = None;
            if p.alarmed {
                p.alarmed = false;
                tracing::info!(
                    "fleet sync: peer {} ({}) has the same tables as this instance again",
                    p.id,
                    p.addr.ip()
                );
            }
        }
        _ => {}
    }
    if let Some(since) = p.differs_since {
        if !p.alarmed && now.duration_since(since) >= DISAGREE_AFTER {
            p.alarmed = true;
            tracing::warn!(
                "fleet sync: peer {} ({}) has had other tables than this instance for {} s \
                 (fingerprint {:016x}, here {own:016x}): a connection that moves between the two \
                 can change backend; compare the configurations, the hash seed and the health \
                 verdicts (`spillwayctl compare`)",
                p.id,
                p.addr.ip(),
                now.duration_since(since).as_secs(),
                p.fingerprint.unwrap_or(0)
            );
        }
    }
}

/// An entry of this instance as the wire carries it.
pub(crate) fn synced(e: &PeerEntry) -> SyncedEntry {
    SyncedEntry {
        key: e.key,
        service: e.service,
        backend: e.backend.addr,
        backend_port: e.backend.port,
        age_ms: e.age_ms,
        flags: e.flags,
    }
}

/// A received entry in the decision core's terms.
pub(crate) fn peer_entry(e: &SyncedEntry) -> PeerEntry {
    PeerEntry {
        key: e.key,
        service: e.service,
        backend: Endpoint { addr: e.backend, port: e.backend_port },
        age_ms: e.age_ms,
        flags: e.flags,
    }
}
