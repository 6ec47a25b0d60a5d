//! Active health checks (SPEC section 6, HC-1 and HC-3).
//!
//! This module owns the probing of backends and the verdicts derived from it. It probes through
//! ordinary kernel sockets on the control plane's tokio runtime (HC-1: never from a data-plane
//! worker) and turns the results into healthy/unhealthy verdicts. It does **not** apply operator
//! overrides or draining (HC-2): those are combined with these verdicts by the policy layer.
//!
//! # Model
//!
//! A [`Target`] is one backend ([`BackendKey`]) with the [`CheckSpec`] of its group. The
//! [`HealthChecker`] runs one tokio task per target, so a slow or hung backend only ever delays
//! its own probes. Each task:
//!
//! - probes on the wall clock (HC-4): probe `n` of a target starts at `n x interval` since the
//!   Unix epoch, plus an offset in `[0, interval)` and a jitter of ±5 % of the interval, both
//!   derived from the key and the check name alone. Different targets are spread over the
//!   interval (a reload or a start does not fire every probe at once), and every instance of
//!   a fleet probes a given backend in the same slot, so their verdicts change within the
//!   time their probes and control threads take rather than up to an interval apart (FS-7);
//! - a probe that overruns its slot delays the next one (the next slot not yet begun): probes
//!   of one target never overlap;
//! - bounds every probe by `timeout` (connection set-up included).
//!
//! Probes go to `endpoint.addr` on `check.port`, or the endpoint's port when the check has none.
//! A target with neither (endpoint port 0 and no check port) is a configuration error caught
//! elsewhere; here every probe of it reports [`ProbeResult::Error`].
//!
//! Probe kinds ([`CheckKind`]):
//!
//! - **TCP**: success when the connection is established.
//! - **HTTP**: an HTTP/1.1 `GET` with `Host` (the check's, or `addr:port`) and
//!   `Connection: close`; only the status line is read, success when its code equals
//!   `expected_status`. Any other code is [`ProbeResult::BadStatus`], a reply that is not an HTTP
//!   status line (or a close before one) is [`ProbeResult::BadReply`].
//! - **UDP**: the request is sent from a fresh connected socket; success when a datagram comes
//!   back from the endpoint and contains `expect` (any datagram when `expect` is `None`). A
//!   datagram without it is [`ProbeResult::BadReply`]; an ICMP port unreachable is
//!   [`ProbeResult::Refused`].
//!
//! # Verdicts
//!
//! Thresholds count **consecutive** results: a backend turns healthy after `healthy_threshold`
//! successes in a row and unhealthy after `unhealthy_threshold` failures in a row (a threshold
//! of 0 is treated as 1). HC-3: a backend seen for the first time starts unhealthy, or healthy
//! when its check says `initial_healthy`. Every verdict change sends exactly one
//! [`HealthEvent`]; the starting verdict is not a change and sends none (read it with
//! [`HealthChecker::verdict`]).
//!
//! # Reconciliation
//!
//! [`HealthChecker::set_targets`] is called at start and on every reload:
//!
//! - a target whose key and check are both unchanged (compared by value) keeps its task and all
//!   its state: verdict, consecutive counts, totals;
//! - a target whose key stays but whose check changed gets a new task with the new check; it
//!   keeps its **verdict** (a reload must not flip health by itself, nor take a whole service
//!   down while the new check gathers its first results) but its counters start from zero,
//!   since they described the old check;
//! - a new key starts from HC-3;
//! - a removed key's task is stopped and sends no further event, even if it was mid-probe.
//!
//! Dropping the [`HealthChecker`] stops every task.
//!
//! # Threads and locks
//!
//! The state of each target sits behind its own `std::sync::Mutex`, shared between its task and
//! the checker (for [`HealthChecker::status`]). The lock is never held across an `.await`; it is
//! held while sending an event (an unbounded, non-blocking send) so that a target removed
//! concurrently can never emit after its removal, whatever runtime flavour runs the tasks.

use spillway_core::model::BackendKey;
use spillway_core::rng::mix;
use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The shortest interval a task honours; a zero interval would spin.
const MIN_INTERVAL: Duration = Duration::from_millis(1);
/// Per-probe jitter, as a fraction of the interval: 1/20 = ±5 %.
const JITTER_DIVISOR: u32 = 20;
/// The longest HTTP status line read before giving up with [`ProbeResult::BadReply`].
const MAX_STATUS_LINE: usize = 1024;
/// The largest UDP reply read (the largest datagram).
const MAX_DATAGRAM: usize = 65_536;

/// What a probe does (HC-1).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CheckKind {
    /// A TCP connect: success when the connection is established.
    Tcp,
    /// An HTTP/1.1 `GET`.
    Http {
        /// Request target, e.g. `/healthz`. Must not contain CR, LF or spaces.
        path: String,
        /// The status code that means healthy.
        expected_status: u16,
        /// `Host` header; `None` sends `addr:port` of the probed endpoint.
        host: Option<String>,
    },
    /// A UDP request/reply.
    Udp {
        /// The datagram sent.
        request: Vec<u8>,
        /// Bytes the reply must contain; `None` accepts any reply.
        expect: Option<Vec<u8>>,
    },
}

/// A named health check, shared by every backend of the groups that use it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CheckSpec {
    /// The check's name (for status and metrics).
    pub name: String,
    /// What a probe does.
    pub kind: CheckKind,
    /// Port probed; `None` probes the endpoint's own port.
    pub port: Option<u16>,
    /// Time from the start of one probe to the start of the next.
    pub interval: Duration,
    /// Time a probe may take, connection set-up included.
    pub timeout: Duration,
    /// Consecutive successes that turn an unhealthy backend healthy.
    pub healthy_threshold: u32,
    /// Consecutive failures that turn a healthy backend unhealthy.
    pub unhealthy_threshold: u32,
    /// HC-3: a never-probed backend starts healthy (`initial: healthy`).
    pub initial_healthy: bool,
}

/// One backend to probe with one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The backend.
    pub key: BackendKey,
    /// Its group's check.
    pub check: Arc<CheckSpec>,
}

/// The outcome of one probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeResult {
    /// The check passed.
    Success,
    /// Connection refused (TCP RST, or ICMP port unreachable for UDP).
    Refused,
    /// No (complete) answer within the timeout.
    Timeout,
    /// HTTP answered with another status than the expected one.
    BadStatus(u16),
    /// An answer that is not what the check expects (not an HTTP status line, a UDP reply
    /// without the expected bytes).
    BadReply,
    /// Any other error (unreachable network, reset, no port to probe, ...).
    Error,
}

impl ProbeResult {
    /// Every result kind's label, in the order of [`ResultCounts::iter`].
    pub const LABELS: [&'static str; 6] =
        ["success", "refused", "timeout", "bad_status", "bad_reply", "error"];

    /// A stable label for metrics (`success`, `refused`, `timeout`, `bad_status`, `bad_reply`,
    /// `error`).
    pub fn as_str(&self) -> &'static str {
        Self::LABELS[self.index()]
    }

    /// True for [`ProbeResult::Success`].
    pub fn is_success(&self) -> bool {
        matches!(self, ProbeResult::Success)
    }

    fn index(&self) -> usize {
        match self {
            ProbeResult::Success => 0,
            ProbeResult::Refused => 1,
            ProbeResult::Timeout => 2,
            ProbeResult::BadStatus(_) => 3,
            ProbeResult::BadReply => 4,
            ProbeResult::Error => 5,
        }
    }

    fn from_io(e: &io::Error) -> ProbeResult {
        match e.kind() {
            io::ErrorKind::ConnectionRefused => ProbeResult::Refused,
            io::ErrorKind::TimedOut => ProbeResult::Timeout,
            _ => ProbeResult::Error,
        }
    }
}

/// Number of probes per result kind (a `BadStatus` counts once whatever its code).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResultCounts([u64; 6]);

impl ResultCounts {
    /// Probes that ended with this result's kind.
    pub fn get(&self, result: ProbeResult) -> u64 {
        self.0[result.index()]
    }

    /// All probes.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// `(label, count)` for every kind, labels as [`ProbeResult::as_str`].
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        ProbeResult::LABELS.iter().copied().zip(self.0.iter().copied())
    }

    fn add(&mut self, result: ProbeResult) {
        let c = &mut self.0[result.index()];
        *c = c.saturating_add(1);
    }
}

/// A verdict change, sent once per change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthEvent {
    /// The backend.
    pub key: BackendKey,
    /// Its new verdict.
    pub healthy: bool,
}

/// What the checker knows about one target, for the admin API and metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetStatus {
    /// The backend.
    pub key: BackendKey,
    /// The name of its check.
    pub check: String,
    /// The current verdict.
    pub healthy: bool,
    /// The last probe's result; `None` before the first probe.
    pub last_result: Option<ProbeResult>,
    /// How long the last probe took.
    pub last_latency: Option<Duration>,
    /// Successes in a row (0 after a failure).
    pub consecutive_ok: u32,
    /// Failures in a row (0 after a success).
    pub consecutive_fail: u32,
    /// Probes per result kind.
    pub probes: ResultCounts,
    /// Sum of the durations of every probe (timeouts count as the time waited).
    pub latency_sum: Duration,
    /// Number of probes in `latency_sum`.
    pub latency_count: u64,
}

/// The mutable state of one target.
#[derive(Debug)]
struct State {
    healthy: bool,
    last_result: Option<ProbeResult>,
    last_latency: Option<Duration>,
    consecutive_ok: u32,
    consecutive_fail: u32,
    probes: ResultCounts,
    latency_sum: Duration,
    latency_count: u64,
    /// Set when the target is removed or its checker dropped: no event may follow.
    retired: bool,
}

impl State {
    fn new(healthy: bool) -> State {
        State {
            healthy,
            last_result: None,
            last_latency: None,
            consecutive_ok: 0,
            consecutive_fail: 0,
            probes: ResultCounts::default(),
            latency_sum: Duration::ZERO,
            latency_count: 0,
            retired: false,
        }
    }

    /// Records one probe; returns the new verdict when it changed.
    fn record(&mut self, spec: &CheckSpec, result: ProbeResult, latency: Duration) -> Option<bool> {
        self.last_result = Some(result);
        self.last_latency = Some(latency);
        self.probes.add(result);
        self.latency_sum = self.latency_sum.saturating_add(latency);
        self.latency_count = self.latency_count.saturating_add(1);
        if result.is_success() {
            self.consecutive_ok = self.consecutive_ok.saturating_add(1);
            self.consecutive_fail = 0;
            if !self.healthy && self.consecutive_ok >= spec.healthy_threshold.max(1) {
                self.healthy = true;
                return Some(true);
            }
        } else {
            self.consecutive_fail = self.consecutive_fail.saturating_add(1);
            self.consecutive_ok = 0;
            if self.healthy && self.consecutive_fail >= spec.unhealthy_threshold.max(1) {
                self.healthy = false;
                return Some(false);
            }
        }
        None
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // The state is plain counters updated without panicking paths; a poisoned lock still holds
    // consistent data.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A task aborted when dropped (a bare `JoinHandle` detaches instead).
#[derive(Debug)]
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One probed target.
#[derive(Debug)]
struct Entry {
    check: Arc<CheckSpec>,
    state: Arc<Mutex<State>>,
    _task: AbortOnDrop,
}

impl Drop for Entry {
    fn drop(&mut self) {
        // Retire before the task is aborted (field drop follows): an event being decided on
        // another thread right now either went out before this or never will.
        lock(&self.state).retired = true;
    }
}

/// Probes every configured backend and keeps its verdict (HC-1, HC-3). See the module doc.
#[derive(Debug)]
pub struct HealthChecker {
    events: UnboundedSender<HealthEvent>,
    targets: BTreeMap<BackendKey, Entry>,
}

impl HealthChecker {
    /// A checker with no targets that will send verdict changes to `events`.
    pub fn new(events: UnboundedSender<HealthEvent>) -> Self {
        HealthChecker { events, targets: BTreeMap::new() }
    }

    /// Reconciles the probed set with `targets` (at start and on every reload): starts probing
    /// new targets, stops removed ones, and keeps the state of targets whose key and check are
    /// unchanged (see the module doc for a changed check). A key listed twice keeps its last
    /// entry.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (tasks are spawned on the current one).
    pub fn set_targets(&mut self, targets: Vec<Target>) {
        let mut wanted: BTreeMap<BackendKey, Arc<CheckSpec>> = BTreeMap::new();
        for t in targets {
            wanted.insert(t.key, t.check);
        }
        let mut old = std::mem::take(&mut self.targets);
        for (key, check) in wanted {
            let entry = match old.remove(&key) {
                Some(e) if Arc::ptr_eq(&e.check, &check) || *e.check == *check => e,
                Some(e) => {
                    let healthy = lock(&e.state).healthy;
                    drop(e);
                    self.spawn(&key, check, healthy)
                }
                None => {
                    let healthy = check.initial_healthy;
                    self.spawn(&key, check, healthy)
                }
            };
            self.targets.insert(key, entry);
        }
        // Whatever is left in `old` was removed: dropping it retires and aborts its task.
        drop(old);
    }

    fn spawn(&self, key: &BackendKey, check: Arc<CheckSpec>, healthy: bool) -> Entry {
        let state = Arc::new(Mutex::new(State::new(healthy)));
        let task = tokio::spawn(run_target(
            key.clone(),
            Arc::clone(&check),
            Arc::clone(&state),
            self.events.clone(),
        ));
        Entry { check, state, _task: AbortOnDrop(task) }
    }

    /// The status of every target, ordered by key.
    pub fn status(&self) -> Vec<TargetStatus> {
        self.targets
            .iter()
            .map(|(key, e)| {
                let s = lock(&e.state);
                TargetStatus {
                    key: key.clone(),
                    check: e.check.name.clone(),
                    healthy: s.healthy,
                    last_result: s.last_result,
                    last_latency: s.last_latency,
                    consecutive_ok: s.consecutive_ok,
                    consecutive_fail: s.consecutive_fail,
                    probes: s.probes,
                    latency_sum: s.latency_sum,
                    latency_count: s.latency_count,
                }
            })
            .collect()
    }

    /// The current verdict of a backend; `None` when it is not a target.
    pub fn verdict(&self, key: &BackendKey) -> Option<bool> {
        self.targets.get(key).map(|e| lock(&e.state).healthy)
    }

    /// Number of targets.
    pub fn len(&self) -> usize {
        self.targets.len()
    }

    /// True when nothing is probed.
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }
}

/// A seed for the target's offset and jitter: the same on every instance and every version
/// (xxh3 of the key as text and the check name), so that a fleet's instances probe a backend
/// at the same moments (HC-4).
fn seed(key: &BackendKey, check: &CheckSpec) -> u64 {
    let text = format!("{key}\0{}", check.name);
    xxhash_rust::xxh3::xxh3_64(text.as_bytes())
}

/// When probe slot `slot` of a target starts, as a duration since the Unix epoch: the slot's
/// start on the wall clock (`slot x interval`), plus the target's offset in `[0, interval)`
/// and the slot's jitter in `[-5 %, +5 %)` of the interval (HC-4). Consecutive slots start at
/// least 90 % of an interval apart.
fn slot_start(interval: Duration, seed: u64, slot: u64) -> Duration {
    let span = interval / JITTER_DIVISOR;
    let base = interval.as_nanos().saturating_mul(u128::from(slot));
    let base = Duration::from_nanos(u64::try_from(base).unwrap_or(u64::MAX));
    (base + fraction_of(interval, mix(seed)) + fraction_of(span * 2, mix(seed ^ mix(slot))))
        .saturating_sub(span)
}

/// The first slot that starts at or after `now` (a duration since the Unix epoch).
fn next_slot(interval: Duration, seed: u64, now: Duration) -> u64 {
    let per = interval.as_nanos().max(1);
    let mut slot = u64::try_from(now.as_nanos() / per).unwrap_or(u64::MAX).saturating_sub(1);
    while slot_start(interval, seed, slot) < now {
        slot += 1;
    }
    slot
}

/// The wall clock, as a duration since the Unix epoch.
fn wall_clock() -> Duration {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default()
}

/// `d` scaled by a value in `[0, 1)` derived from `r`.
fn fraction_of(d: Duration, r: u64) -> Duration {
    let nanos = d.as_nanos() * u128::from(r >> 11) / (1u128 << 53);
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// Where a probe goes, if the target has a port.
fn probe_addr(key: &BackendKey, check: &CheckSpec) -> Option<SocketAddr> {
    let port = check.port.unwrap_or(key.endpoint.port);
    (port != 0).then(|| SocketAddr::new(key.endpoint.addr.to_ip(), port))
}

/// The task of one target: probe, record, notify, sleep, forever (until aborted).
async fn run_target(
    key: BackendKey,
    check: Arc<CheckSpec>,
    state: Arc<Mutex<State>>,
    events: UnboundedSender<HealthEvent>,
) {
    let interval = check.interval.max(MIN_INTERVAL);
    let seed = seed(&key, &check);
    let addr = probe_addr(&key, &check);
    // The wall clock read once, then followed by the monotonic clock (which NTP slews like
    // the wall clock): a clock step after the start does not move this target's slots.
    let (wall0, mono0) = (wall_clock(), Instant::now());
    loop {
        // HC-4: wait for the next slot on the wall clock.
        let now = wall0 + mono0.elapsed();
        let at = slot_start(interval, seed, next_slot(interval, seed, now));
        tokio::time::sleep(at.saturating_sub(now)).await;
        let start = Instant::now();
        let result = match addr {
            Some(addr) => match tokio::time::timeout(check.timeout, probe(&check.kind, addr)).await
            {
                Ok(r) => r,
                Err(_elapsed) => ProbeResult::Timeout,
            },
            None => ProbeResult::Error,
        };
        let latency = start.elapsed();
        {
            let mut s = lock(&state);
            if s.retired {
                return;
            }
            if let Some(healthy) = s.record(&check, result, latency) {
                // Sent under the lock: see the module doc. A closed receiver is not our concern.
                let _ = events.send(HealthEvent { key: key.clone(), healthy });
            }
        }
        // A timer may wake a little before the wall clock reaches the slot: without this pause
        // the same slot could be found again and probed twice.
        tokio::time::sleep_until(start + interval / 10).await;
    }
}

/// One probe, without its timeout.
async fn probe(kind: &CheckKind, addr: SocketAddr) -> ProbeResult {
    let r = match kind {
        CheckKind::Tcp => TcpStream::connect(addr).await.map(|_| ProbeResult::Success),
        CheckKind::Http { path, expected_status, host } => {
            probe_http(addr, path, *expected_status, host.as_deref()).await
        }
        CheckKind::Udp { request, expect } => probe_udp(addr, request, expect.as_deref()).await,
    };
    r.unwrap_or_else(|e| ProbeResult::from_io(&e))
}

/// The request of an HTTP check; `None` when a field would break the request's framing.
fn http_request(addr: SocketAddr, path: &str, host: Option<&str>) -> Option<Vec<u8>> {
    let host = host.map_or_else(|| addr.to_string(), str::to_owned);
    let bad = |s: &str| s.is_empty() || s.bytes().any(|b| b == b'\r' || b == b'\n' || b == b' ');
    if bad(path) || bad(&host) {
        return None;
    }
    Some(
        format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\
             User-Agent: spillway-health\r\nAccept: */*\r\n\r\n"
        )
        .into_bytes(),
    )
}

/// The code of an HTTP status line (`HTTP/1.1 200 OK`), without its line end.
fn parse_status_line(line: &[u8]) -> Option<u16> {
    let mut parts = line.split(|&b| b == b' ');
    let version = parts.next()?;
    let code = parts.next()?;
    if !version.starts_with(b"HTTP/") || code.len() != 3 || !code.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(code).ok()?.parse().ok()
}

async fn probe_http(
    addr: SocketAddr,
    path: &str,
    expected: u16,
    host: Option<&str>,
) -> io::Result<ProbeResult> {
    let Some(request) = http_request(addr, path, host) else {
        return Ok(ProbeResult::Error);
    };
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(&request).await?;
    let mut buf = [0u8; MAX_STATUS_LINE];
    let mut len = 0;
    loop {
        if let Some(end) = buf[..len].iter().position(|&b| b == b'\n') {
            let line = buf[..end].strip_suffix(b"\r").unwrap_or(&buf[..end]);
            return Ok(match parse_status_line(line) {
                Some(code) if code == expected => ProbeResult::Success,
                Some(code) => ProbeResult::BadStatus(code),
                None => ProbeResult::BadReply,
            });
        }
        if len == buf.len() {
            return Ok(ProbeResult::BadReply);
        }
        let n = stream.read(&mut buf[len..]).await?;
        if n == 0 {
            return Ok(ProbeResult::BadReply);
        }
        len += n;
    }
}

async fn probe_udp(
    addr: SocketAddr,
    request: &[u8],
    expect: Option<&[u8]>,
) -> io::Result<ProbeResult> {
    let local: IpAddr = match addr {
        SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    // A fresh socket per probe: no stale reply of an earlier probe can be taken for this one,
    // and being connected, it only receives from the endpoint (and gets its ICMP errors).
    let socket = UdpSocket::bind(SocketAddr::new(local, 0)).await?;
    socket.connect(addr).await?;
    socket.send(request).await?;
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let n = socket.recv(&mut buf).await?;
    let reply = &buf[..n];
    Ok(match expect {
        Some(e) if !contains(reply, e) => ProbeResult::BadReply,
        _ => ProbeResult::Success,
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(healthy_threshold: u32, unhealthy_threshold: u32) -> CheckSpec {
        CheckSpec {
            name: "c".into(),
            kind: CheckKind::Tcp,
            port: None,
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            healthy_threshold,
            unhealthy_threshold,
            initial_healthy: false,
        }
    }

    /// HC-1: thresholds count consecutive results; an interruption restarts the count.
    #[test]
    fn hc_1_thresholds_are_consecutive() {
        let sp = spec(3, 2);
        let mut s = State::new(false);
        let ms = Duration::from_millis(1);
        let ok = ProbeResult::Success;
        let bad = ProbeResult::Timeout;
        assert_eq!(s.record(&sp, ok, ms), None);
        assert_eq!(s.record(&sp, ok, ms), None);
        assert_eq!(s.record(&sp, bad, ms), None);
        assert_eq!(s.record(&sp, ok, ms), None);
        assert_eq!(s.record(&sp, ok, ms), None);
        assert_eq!(s.record(&sp, ok, ms), Some(true));
        assert_eq!(s.record(&sp, ok, ms), None);
        assert_eq!(s.record(&sp, bad, ms), None);
        assert_eq!(s.record(&sp, ok, ms), None);
        assert_eq!(s.record(&sp, bad, ms), None);
        assert_eq!(s.record(&sp, ProbeResult::Refused, ms), Some(false));
        assert_eq!(s.record(&sp, bad, ms), None);
        assert_eq!(s.probes.get(ProbeResult::Success), 7);
        assert_eq!(s.probes.get(bad), 4);
        assert_eq!(s.probes.total(), 12);
        assert_eq!(s.latency_count, 12);
        assert_eq!(s.consecutive_fail, 3);
    }

    #[test]
    fn zero_thresholds_act_as_one() {
        let sp = spec(0, 0);
        let mut s = State::new(false);
        let ms = Duration::from_millis(1);
        assert_eq!(s.record(&sp, ProbeResult::Success, ms), Some(true));
        assert_eq!(s.record(&sp, ProbeResult::Error, ms), Some(false));
    }

    #[test]
    fn status_lines() {
        assert_eq!(parse_status_line(b"HTTP/1.1 200 OK"), Some(200));
        assert_eq!(parse_status_line(b"HTTP/1.0 503"), Some(503));
        assert_eq!(parse_status_line(b"HTTP/1.1 2000 OK"), None);
        assert_eq!(parse_status_line(b"SSH-2.0-OpenSSH_9.6"), None);
        assert_eq!(parse_status_line(b"HTTP/1.1 +20 OK"), None);
        assert_eq!(parse_status_line(b""), None);
    }

    #[test]
    fn http_request_framing() {
        let a: SocketAddr = "[::1]:8080".parse().unwrap();
        let r = http_request(a, "/healthz", None).unwrap();
        let r = String::from_utf8(r).unwrap();
        assert!(r.starts_with("GET /healthz HTTP/1.1\r\nHost: [::1]:8080\r\n"), "{r}");
        assert!(r.contains("\r\nConnection: close\r\n") && r.ends_with("\r\n\r\n"));
        assert!(http_request(a, "/x\r\nEvil: 1", None).is_none());
        assert!(http_request(a, "/", Some("h\n")).is_none());
    }

    /// HC-4: slots follow the wall clock: slot `n` starts within slot `n`'s interval on the
    /// clock (±5 %), 90 % to 110 % of an interval after the slot before, at the same offset
    /// into the interval but for the jitter.
    #[test]
    fn hc_4_slots_follow_the_wall_clock() {
        let i = Duration::from_millis(1000);
        let (seed, first) = (42, 1_700_000_000u64);
        let mut offsets = Vec::new();
        for slot in first..first + 1000 {
            let at = slot_start(i, seed, slot);
            let begin = Duration::from_secs(slot);
            assert!(at + i / 20 >= begin && at < begin + i + i / 20, "slot {slot}: {at:?}");
            offsets.push((at + i / 20 - begin).as_millis());
            let gap = slot_start(i, seed, slot + 1) - at;
            assert!(gap >= i * 9 / 10 && gap <= i * 11 / 10, "{slot}: {gap:?}");
            assert_eq!(next_slot(i, seed, at), slot, "a slot is found at its start");
            assert_eq!(next_slot(i, seed, at + Duration::from_nanos(1)), slot + 1);
        }
        let (lo, hi) = (offsets.iter().min().unwrap(), offsets.iter().max().unwrap());
        assert!(hi - lo <= 100 && hi - lo >= 80, "one offset, jittered by +-5 %: {lo}..{hi} ms");
    }

    /// HC-4: the seed depends on the target and the check only: two instances (or versions)
    /// agree on it; two targets differ.
    #[test]
    fn hc_4_the_seed_is_the_targets_own() {
        let spec = |name: &str| CheckSpec { name: name.into(), ..spec(1, 1) };
        let key = |a: &str| BackendKey {
            service: "web".into(),
            endpoint: spillway_core::model::Endpoint {
                addr: a.parse::<IpAddr>().unwrap().into(),
                port: 80,
            },
        };
        // A fixed value: a change of the hash would misalign a fleet running two versions.
        assert_eq!(seed(&key("198.18.1.1"), &spec("h")), seed(&key("198.18.1.1"), &spec("h")));
        assert_eq!(
            seed(&key("198.18.1.1"), &spec("h")),
            xxhash_rust::xxh3::xxh3_64(b"web/198.18.1.1:80\0h")
        );
        assert_ne!(seed(&key("198.18.1.1"), &spec("h")), seed(&key("198.18.1.2"), &spec("h")));
        assert_ne!(seed(&key("198.18.1.1"), &spec("h")), seed(&key("198.18.1.1"), &spec("g")));
    }

    #[test]
    fn labels() {
        assert_eq!(ProbeResult::BadStatus(500).as_str(), "bad_status");
        assert_eq!(ProbeResult::Success.as_str(), "success");
        let mut c = ResultCounts::default();
        c.add(ProbeResult::BadStatus(404));
        c.add(ProbeResult::BadStatus(500));
        assert_eq!(c.iter().find(|(l, _)| *l == "bad_status"), Some(("bad_status", 2)));
    }
}
