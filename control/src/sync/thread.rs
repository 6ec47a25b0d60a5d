//! The sync thread: the one place this instance talks to its peers about connections.
//!
//! It takes the entries at risk the workers' scans hand it (`spillway_dataplane::sync`), seals
//! them into datagrams ([`Encoder`]) and sends each to every peer over UDP on the kernel
//! interface; it receives the peers' datagrams, checks them ([`decode`]: authentication,
//! replay, form), puts their entries in this instance's terms ([`peer::localize`], against the
//! current snapshot) and hands them to every worker (a flow may reach any of them). It says
//! hello to every peer once a second (a peer is up while its hellos arrive), asks the workers
//! for a refresh scan every `refresh` (so that the peers' copies of the entries still at risk
//! do not expire), and at start asks every peer for its entries (a bulk sync): the instance is
//! ready to announce once every peer has answered, or `bulk_timeout` has passed (a peer that
//! is down: logged) ([`SyncShared::bulk_done`]). A peer's bulk request makes the workers scan for every entry
//! at risk they hold, their peers' too; the answer ends with a `BulkEnd` once every worker's
//! scan is over and its queue empty.
//!
//! Workers never wait for it: both ways are bounded queues, and what finds a queue full is
//! counted. Nothing here is on a worker's path.

use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use spillway_core::counters::WorkerCounters;
use spillway_core::model::Endpoint;
use spillway_core::peer::{self, Installed, PeerEntry, PeerIndex, SyncLink};
use spillway_core::publish::SnapshotReader;
use spillway_core::snapshot::Snapshot;

use super::entry::SyncedEntry;
use super::key::Key;
use super::replay::ReplayState;
use super::wire::{decode, Body, Encoder, EntriesKind, Refused, MAX_DATAGRAM};
use crate::fleet::{PeerStatus, Phase, SyncReply, SyncStatus};

/// How often the thread says hello, and how long a peer stays up without one.
pub const HELLO_EVERY: Duration = Duration::from_secs(1);
/// A peer is down once no hello has come for this long.
pub const PEER_DOWN_AFTER: Duration = Duration::from_secs(3);

/// What the thread needs from the configuration.
#[derive(Debug, Clone)]
pub struct SyncSettings {
    /// This instance's id in the fleet.
    pub instance_id: u32,
    /// The address to bind to (the node's address of the peers' family).
    pub bind: SocketAddr,
    /// The peers: id and address (with the fleet's port).
    pub peers: Vec<(u32, SocketAddr)>,
    /// How long a start waits for the peers' bulk answers.
    pub bulk_timeout: Duration,
    /// How often the entries at risk are sent again.
    pub refresh: Duration,
}

/// What the thread counts (the metrics read it).
#[derive(Debug, Default)]
pub struct SyncStats {
    /// Entries sent (each counted once, whatever the number of peers).
    pub entries_sent: AtomicU64,
    /// Datagrams sent, to all peers.
    pub datagrams_sent: AtomicU64,
    /// Entries received in accepted datagrams.
    pub entries_received: AtomicU64,
    /// Peers' entries localized and handed to the workers (to each worker).
    pub entries_handed: AtomicU64,
    /// Peers' entries with no counterpart here, by reason, indexed like [`Installed::ALL`].
    pub entries_refused: [AtomicU64; Installed::ALL.len()],
    /// Peers' entries lost because a worker's queue was full.
    pub worker_queue_full: AtomicU64,
    /// Datagrams refused, indexed like [`Refused::ALL`].
    pub refused: [AtomicU64; Refused::ALL.len()],
    /// Send errors (the kernel refused a datagram).
    pub send_errors: AtomicU64,
    /// Bulk syncs this instance asked for and finished (all peers answered or timed out).
    pub bulk_syncs: AtomicU64,
    /// The last bulk sync's duration, in milliseconds.
    pub bulk_ms: AtomicU64,
    /// Bulk answers sent to joining peers.
    pub bulk_answers: AtomicU64,
}

impl SyncShared {
    /// What the API shows.
    pub fn reply(&self) -> SyncReply {
        let s = &self.stats;
        let refused = Refused::ALL
            .iter()
            .zip(&s.refused)
            .map(|(r, c)| (r.as_str().to_string(), c.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect();
        let done = self.bulk_done.load(Ordering::Relaxed);
        SyncReply {
            status: self.status.lock().map(|s| s.clone()).unwrap_or_default(),
            bulk_ms: done.then(|| s.bulk_ms.load(Ordering::Relaxed)),
            entries_sent: s.entries_sent.load(Ordering::Relaxed),
            entries_received: s.entries_received.load(Ordering::Relaxed),
            refused,
        }
    }
}

/// What the thread shares with the rest of the instance.
#[derive(Debug, Default)]
pub struct SyncShared {
    /// Counters.
    pub stats: SyncStats,
    /// The bulk sync at start is over (answered by every peer, or timed out).
    pub bulk_done: AtomicBool,
    /// Status for the API, refreshed once a second.
    pub status: Mutex<SyncStatus>,
}

struct Peer {
    id: u32,
    addr: SocketAddr,
    /// Up as last logged (a log line per change).
    logged_up: bool,
    last_hello: Option<Instant>,
    received: u64,
    answered: bool,
}

/// A bulk answer under way: sent once every worker's scan that started after the request is
/// over and its queue is empty.
struct Answer {
    to: SocketAddr,
    request: u64,
    scans_at: Vec<u64>,
    sent: u64,
}

/// Starts the thread. `links` are the workers' ends (one per worker, in order), `counters`
/// their counters (for the scans), `snapshots` the current snapshot.
pub fn spawn(
    settings: SyncSettings,
    key: Key,
    links: Vec<SyncLink>,
    counters: Arc<[WorkerCounters]>,
    snapshots: SnapshotReader,
    stop: Arc<AtomicBool>,
) -> std::io::Result<(JoinHandle<()>, Arc<SyncShared>)> {
    let socket = UdpSocket::bind(settings.bind)?;
    socket.set_read_timeout(Some(Duration::from_millis(5)))?;
    let shared = Arc::new(SyncShared::default());
    let state = Arc::clone(&shared);
    let handle = std::thread::Builder::new().name("spillway-sync".into()).spawn(move || {
        let mut t = Thread::new(settings, key, links, counters, snapshots, socket, state);
        t.run(&stop);
    })?;
    Ok((handle, shared))
}

struct Thread {
    settings: SyncSettings,
    key: Key,
    encoder: Encoder,
    replay: ReplayState,
    links: Vec<SyncLink>,
    counters: Arc<[WorkerCounters]>,
    snapshots: SnapshotReader,
    index: (u64, PeerIndex),
    socket: UdpSocket,
    shared: Arc<SyncShared>,
    peers: Vec<Peer>,
    answers: Vec<Answer>,
    started: Instant,
    request: u64,
}

impl Thread {
    fn new(
        settings: SyncSettings,
        key: Key,
        links: Vec<SyncLink>,
        counters: Arc<[WorkerCounters]>,
        snapshots: SnapshotReader,
        socket: UdpSocket,
        shared: Arc<SyncShared>,
    ) -> Thread {
        // The epoch is the start in unix ms: it increases across restarts, which keeps both
        // the peers' replay windows and the nonces apart from an earlier life's.
        let epoch =
            SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| d.as_millis() as u64);
        let encoder = Encoder::new(&key, settings.instance_id, epoch);
        let replay = ReplayState::new(settings.peers.iter().map(|&(id, _)| id));
        let peers = settings
            .peers
            .iter()
            .map(|&(id, addr)| Peer {
                id,
                addr,
                logged_up: false,
                last_hello: None,
                received: 0,
                answered: false,
            })
            .collect();
        Thread {
            settings,
            key,
            encoder,
            replay,
            links,
            counters,
            snapshots,
            index: (u64::MAX, PeerIndex::default()),
            socket,
            shared,
            peers,
            answers: Vec::new(),
            started: Instant::now(),
            request: epoch,
        }
    }

    fn run(&mut self, stop: &AtomicBool) {
        let mut next_hello = Instant::now();
        let mut next_refresh = Instant::now() + self.settings.refresh;
        let mut next_request = Instant::now();
        let mut buf = [0u8; MAX_DATAGRAM];
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= next_hello {
                self.hello();
                self.publish_status(now);
                next_hello = now + HELLO_EVERY;
            }
            if !self.shared.bulk_done.load(Ordering::Relaxed) && now >= next_request {
                self.bulk_progress(now);
                next_request = now + Duration::from_millis(500);
            }
            if now >= next_refresh {
                self.links.iter().for_each(|l| l.requests.ask_refresh());
                next_refresh = now + self.settings.refresh;
            }
            self.send_outbound();
            self.finish_answers();
            self.receive(&mut buf);
        }
    }

    fn send_to_all(&self, datagram: &[u8]) {
        for p in &self.peers {
            match self.socket.send_to(datagram, p.addr) {
                Ok(_) => self.shared.stats.datagrams_sent.fetch_add(1, Ordering::Relaxed),
                Err(_) => self.shared.stats.send_errors.fetch_add(1, Ordering::Relaxed),
            };
        }
    }

    fn hello(&mut self) {
        let snap = self.snapshots.load();
        let fingerprint = peer::tables_fingerprint(snap);
        let phase = if self.shared.bulk_done.load(Ordering::Relaxed) {
            Phase::Serving
        } else {
            Phase::Starting
        };
        let mut out = [0u8; MAX_DATAGRAM];
        let n = self.encoder.hello(fingerprint, phase, &mut out);
        self.send_to_all(&out[..n]);
    }

    /// The bulk sync at start: ask the peers that have not answered yet (every half second: a
    /// request may be lost, or sent before the path to the peer works); done once every peer
    /// has answered, or at the timeout (a peer that is down cannot answer: the timeout bounds
    /// the wait, and says so).
    fn bulk_progress(&mut self, now: Instant) {
        let waited = now.duration_since(self.started);
        let pending: Vec<SocketAddr> =
            self.peers.iter().filter(|p| !p.answered).map(|p| p.addr).collect();
        let timed_out = waited >= self.settings.bulk_timeout;
        if pending.is_empty() || timed_out {
            self.shared.bulk_done.store(true, Ordering::Relaxed);
            self.shared.stats.bulk_syncs.fetch_add(1, Ordering::Relaxed);
            self.shared.stats.bulk_ms.store(waited.as_millis() as u64, Ordering::Relaxed);
            let state = if timed_out && !pending.is_empty() { "timed_out" } else { "done" };
            if state == "timed_out" {
                tracing::warn!(
                    peers = pending.len(),
                    "fleet sync: bulk sync timed out after {:.1} s; announcing without the \
                     entries of the peers that did not answer",
                    waited.as_secs_f64()
                );
            } else {
                tracing::info!("fleet sync: bulk sync done in {:.2} s", waited.as_secs_f64());
            }
            // The peers' answers and the verdict in one status: a reader never sees the bulk
            // sync over with an answer it counted missing.
            self.publish_status(now);
            self.shared.status.lock().map(|mut s| s.bulk = state.into()).ok();
            return;
        }
        let mut out = [0u8; MAX_DATAGRAM];
        for addr in pending {
            let n = self.encoder.bulk_request(self.request, &mut out);
            if self.socket.send_to(&out[..n], addr).is_err() {
                self.shared.stats.send_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// What the workers' scans found, sealed and sent to every peer.
    fn send_outbound(&mut self) {
        let mut entries = Vec::new();
        for l in &self.links {
            while entries.len() < 4096 {
                let Some(e) = l.outbound.pop() else { break };
                entries.push(synced(&e));
            }
        }
        if entries.is_empty() {
            return;
        }
        let mut datagrams = Vec::new();
        let sent = self.encoder.all_entries(EntriesKind::Entries, entries, |d| {
            datagrams.push(d.to_vec());
        });
        for d in &datagrams {
            self.send_to_all(d);
        }
        self.shared.stats.entries_sent.fetch_add(sent, Ordering::Relaxed);
        for a in &mut self.answers {
            a.sent += sent;
        }
    }

    /// A bulk answer ends once every worker has finished a scan begun after the request and
    /// has nothing left in its queue.
    fn finish_answers(&mut self) {
        let counters = Arc::clone(&self.counters);
        let links = &self.links;
        let done = |a: &Answer| {
            a.scans_at.iter().enumerate().all(|(w, &at)| {
                counters.get(w).is_none_or(|c| c.sync.scans.get() > at)
                    && links.get(w).is_none_or(|l| l.outbound.is_empty())
            })
        };
        let (finished, waiting): (Vec<Answer>, Vec<Answer>) =
            std::mem::take(&mut self.answers).into_iter().partition(|a| done(a));
        self.answers = waiting;
        for a in finished {
            let mut out = [0u8; MAX_DATAGRAM];
            let n = self.encoder.bulk_end(a.request, a.sent, &mut out);
            if self.socket.send_to(&out[..n], a.to).is_err() {
                self.shared.stats.send_errors.fetch_add(1, Ordering::Relaxed);
            }
            self.shared.stats.bulk_answers.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn receive(&mut self, buf: &mut [u8; MAX_DATAGRAM]) {
        // At most a few hundred datagrams per turn, so that sending keeps up.
        for _ in 0..256 {
            // The sender is known by its authenticated id, not its source address: answers go
            // to the configured address.
            let (n, _) = match self.socket.recv_from(buf) {
                Ok(r) => r,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return;
                }
                Err(_) => return,
            };
            let stats = &self.shared.stats;
            // A datagram longer than the buffer arrives truncated to it: count it oversized.
            let dgram = match decode(&mut buf[..n], &self.key, &mut self.replay) {
                Ok(d) => d,
                Err(r) => {
                    let i = Refused::ALL.iter().position(|&x| x == r).unwrap_or(0);
                    stats.refused[i].fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            };
            let sender = dgram.header.sender;
            let Some(peer) = self.peers.iter_mut().find(|p| p.id == sender) else { continue };
            match dgram.body {
                Body::Hello { .. } => peer.last_hello = Some(Instant::now()),
                Body::Entries(records) => {
                    let entries: Vec<PeerEntry> = records.iter().map(|e| peer_entry(&e)).collect();
                    peer.received += entries.len() as u64;
                    stats.entries_received.fetch_add(entries.len() as u64, Ordering::Relaxed);
                    self.hand_to_workers(&entries);
                }
                Body::Remove(_) => {}
                Body::BulkRequest { request } => {
                    let to = peer.addr;
                    let scans_at = self.counters.iter().map(|c| c.sync.scans.get()).collect();
                    self.answers.push(Answer { to, request, scans_at, sent: 0 });
                    self.links.iter().for_each(|l| l.requests.ask_bulk());
                }
                Body::BulkEnd { request, .. } => {
                    if request == self.request {
                        peer.answered = true;
                    }
                }
            }
        }
    }

    fn hand_to_workers(&mut self, entries: &[PeerEntry]) {
        let snap: Arc<Snapshot> = Arc::clone(self.snapshots.load());
        if self.index.0 != snap.generation {
            self.index = (snap.generation, PeerIndex::of(&snap));
        }
        // The workers' clock is theirs; a backend's draining deadline is judged at takeover.
        let now = spillway_core::time::Time::ZERO;
        let stats = &self.shared.stats;
        for e in entries {
            // The backend's liveness is judged at takeover; here only that it exists.
            match peer::localize(e, &self.index.1, &snap, now) {
                Ok(local) => {
                    for l in &self.links {
                        if l.inbound.push(local).is_err() {
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
        for p in &mut self.peers {
            let up = p.last_hello.is_some_and(|t| now.duration_since(t) < PEER_DOWN_AFTER);
            if up != p.logged_up {
                p.logged_up = up;
                if up {
                    tracing::info!("fleet sync: peer {} ({}) up", p.id, p.addr.ip());
                } else {
                    tracing::warn!(
                        "fleet sync: peer {} ({}) down: no hello for {} s",
                        p.id,
                        p.addr.ip(),
                        PEER_DOWN_AFTER.as_secs()
                    );
                }
            }
        }
        let peers = self
            .peers
            .iter()
            .map(|p| PeerStatus {
                id: p.id,
                address: p.addr.ip().to_string(),
                up: p.last_hello.is_some_and(|t| now.duration_since(t) < PEER_DOWN_AFTER),
                last_hello_ms: p.last_hello.map(|t| now.duration_since(t).as_millis() as u64),
                entries_received: p.received,
                bulk_answered: p.answered,
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

/// An entry of this instance as the wire carries it.
pub(super) fn synced(e: &PeerEntry) -> SyncedEntry {
    SyncedEntry {
        key: e.key,
        service: e.service,
        backend: e.backend.addr,
        backend_port: e.backend.port,
        idle_ms: e.idle_ms,
        flags: e.flags,
    }
}

/// A received entry in the decision core's terms.
pub(super) fn peer_entry(e: &SyncedEntry) -> PeerEntry {
    PeerEntry {
        key: e.key,
        service: e.service,
        backend: Endpoint { addr: e.backend, port: e.backend_port },
        idle_ms: e.idle_ms,
        flags: e.flags,
    }
}
