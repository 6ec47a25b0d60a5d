//! systemd integration: `READY=1` once the workers poll, `STOPPING=1` when the daemon stops,
//! and the watchdog (`WATCHDOG=1` every half `WatchdogSec`) fed only while every worker makes
//! progress, so a stalled worker gets the service restarted. Without `NOTIFY_SOCKET` (not
//! started by systemd with `Type=notify`) every call does nothing.

use std::time::{Duration, Instant};

use sd_notify::NotifyState;
use spillway_dataplane::worker::WorkerCounters;

/// Tells systemd the daemon is ready: ports up, workers launched and polling.
pub fn ready() {
    notify(&[NotifyState::Ready, NotifyState::Status("forwarding")]);
}

/// Tells systemd the daemon is stopping.
pub fn stopping() {
    notify(&[NotifyState::Stopping]);
}

fn notify(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!("cannot notify systemd: {e}");
    }
}

/// The watchdog: pings systemd every half `WatchdogSec`, but only when every worker's
/// heartbeat moved since the previous ping.
#[derive(Debug)]
pub struct Watchdog {
    period: Duration,
    last_ping: Instant,
    beats: Vec<u64>,
    stalled: Vec<usize>,
}

impl Watchdog {
    /// The watchdog systemd asked for (`WATCHDOG_USEC`), if any.
    pub fn from_env(workers: usize) -> Option<Watchdog> {
        let timeout = sd_notify::watchdog_enabled().filter(|t| !t.is_zero())?;
        tracing::info!(
            timeout_ms = timeout.as_millis(),
            "systemd watchdog on: fed while every worker polls"
        );
        Some(Watchdog::new(timeout / 2, workers))
    }

    fn new(period: Duration, workers: usize) -> Watchdog {
        Watchdog { period, last_ping: Instant::now(), beats: vec![0; workers], stalled: Vec::new() }
    }

    /// Called from the control loop; pings when the period has passed and no worker stalled.
    pub fn tick(&mut self, now: Instant, counters: &[WorkerCounters]) {
        if now - self.last_ping < self.period {
            return;
        }
        self.last_ping = now;
        let beats: Vec<u64> = counters.iter().map(|c| c.heartbeat.get()).collect();
        if self.progressed(&beats) {
            notify(&[NotifyState::Watchdog]);
        }
    }

    /// Whether every worker's heartbeat moved since the last call; logs the workers that
    /// stalled (once per stall) and that recovered.
    fn progressed(&mut self, beats: &[u64]) -> bool {
        let stalled: Vec<usize> = beats
            .iter()
            .zip(&self.beats)
            .enumerate()
            .filter(|(_, (b, a))| b == a)
            .map(|(i, _)| i)
            .collect();
        if stalled != self.stalled {
            if stalled.is_empty() {
                tracing::info!("every worker polls again: feeding the systemd watchdog");
            } else {
                tracing::error!(workers = ?stalled, "worker(s) stopped polling: not feeding the systemd watchdog");
            }
        }
        self.stalled = stalled;
        self.beats = beats.to_vec();
        self.stalled.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_is_fed_only_while_every_worker_makes_progress() {
        let mut w = Watchdog::new(Duration::from_millis(100), 2);
        assert!(w.progressed(&[5, 7]), "both moved from the start");
        assert!(w.progressed(&[9, 8]));
        assert!(!w.progressed(&[12, 8]), "worker 1 stalled: no ping");
        assert_eq!(w.stalled, [1]);
        assert!(!w.progressed(&[15, 8]), "still stalled");
        assert!(w.progressed(&[16, 9]), "it moves again: pings resume");
        assert!(!w.progressed(&[16, 9]), "both stalled");
        assert_eq!(w.stalled, [0, 1]);
    }
}
