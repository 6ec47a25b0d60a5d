//! Sending: [`send`] and [`send_and_receive`] hand a [`FrameFactory`]'s frames to a DPDK TX
//! queue in bursts, within a [`Limit`], and say what happened in a [`SendReport`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use spillway_dataplane::dpdk::{self, MbufBurst, Mempool, RxQueue, TxQueue};

use crate::frames::{FrameFactory, GenCounts};

/// Frames the generator makes and sends per burst (and receives per poll): 32, DPDK's usual
/// burst and pktgen's. Kept apart from the worker's largest burst ([`dpdk::MAX_BURST`], 64),
/// so that the pipeline benchmark's baseline stays the generator it was.
const BURST: usize = 32;

/// When [`send`] stops by itself. Every limit counts frames offered to the driver (taken or
/// refused), so a full TX ring never makes the generator exceed the rate or the count.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limit {
    /// Stop after this many frames.
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Frames per second, paced with the TSC; flat out when `None` (or not a positive
    /// finite number).
    pub rate: Option<f64>,
}

/// What a [`send`] run did.
#[derive(Debug, Clone, PartialEq)]
pub struct SendReport {
    /// Frames the driver took.
    pub sent: u64,
    /// Frames the driver refused (TX ring full); freed, not retried.
    pub refused: u64,
    /// Bursts that could not be allocated (mempool empty); nothing was generated for them.
    pub alloc_failures: u64,
    /// Frames received and freed (only when an RX queue was given).
    pub received: u64,
    /// Bytes of the frames the driver took (no FCS).
    pub bytes: u64,
    /// Seconds from the first to the last burst.
    pub elapsed: f64,
    /// Sent frames per second, in millions.
    pub mpps: f64,
    /// Sent frame bytes per second, in Gbit/s (no FCS).
    pub gbps: f64,
    /// Line rate used, in Gbit/s: frames plus 24 bytes each (FCS, preamble, gap).
    pub wire_gbps: f64,
    /// What the factory generated (frames offered, taken or refused).
    pub counts: GenCounts,
    /// Why the run stopped early, when something went wrong.
    pub error: Option<String>,
}

impl SendReport {
    /// The report as one line of JSON.
    pub fn to_json(&self) -> String {
        let c = &self.counts;
        let error = match &self.error {
            Some(e) => format!("\"{}\"", e.replace('\\', "\\\\").replace('"', "\\\"")),
            None => "null".to_owned(),
        };
        format!(
            "{{\"sent\":{},\"refused\":{},\"alloc_failures\":{},\"received\":{},\"bytes\":{},\
             \"elapsed_s\":{:.6},\"mpps\":{:.6},\"gbps\":{:.6},\"wire_gbps\":{:.6},\
             \"frames\":{},\"frame_bytes\":{},\"packets\":{},\"ipv4\":{},\"ipv6\":{},\"tcp\":{},\
             \"udp\":{},\"syn\":{},\"fragments\":{},\"error\":{error}}}",
            self.sent,
            self.refused,
            self.alloc_failures,
            self.received,
            self.bytes,
            self.elapsed,
            self.mpps,
            self.gbps,
            self.wire_gbps,
            c.frames,
            c.bytes,
            c.packets,
            c.ipv4,
            c.ipv6,
            c.tcp,
            c.udp,
            c.syn,
            c.fragments,
        )
    }
}

/// How many mbufs ahead of the one being written [`send_and_receive`] prefetches a frame's
/// first line for writing. The mbufs come back from the consumer with their data lines in its
/// cache; taking them ahead hides that transfer, and raised the pipeline benchmark's
/// io-forward baseline by about a tenth.
const DATA_AHEAD: usize = 8;

/// Generates and transmits frames on `tx` until `stop` is set or `limit` is reached; see
/// [`send_and_receive`].
pub fn send<'a>(
    tx: &mut TxQueue<'a>,
    pool: &Mempool<'a>,
    factory: &mut FrameFactory,
    limit: Limit,
    stop: &AtomicBool,
    tsc_hz: u64,
) -> SendReport {
    send_and_receive(tx, None, pool, factory, limit, stop, tsc_hz)
}

/// Generates and transmits frames: bursts of up to 32 mbufs from `pool` (one bulk
/// allocation), each written by `factory` with the burst's TSC time as the stamp, handed to
/// the driver at once. What the driver refuses is freed and counted, never retried: the rate
/// and the count are of frames offered. With a rate, bursts are released as the TSC clock
/// allows (`rate * elapsed` frames so far), so the gaps are as even as the rate permits. When
/// `rx` is given it is polled after every burst and what arrives is counted and freed (for
/// loopback drivers such as `net_ring`).
pub fn send_and_receive<'a>(
    tx: &mut TxQueue<'a>,
    mut rx: Option<&mut RxQueue<'_>>,
    pool: &Mempool<'a>,
    factory: &mut FrameFactory,
    limit: Limit,
    stop: &AtomicBool,
    tsc_hz: u64,
) -> SendReport {
    let hz = tsc_hz.max(1) as f64;
    let ticks_per_frame = limit.rate.filter(|r| r.is_finite() && *r > 0.0).map(|r| hz / r);
    let duration = limit.duration.map(|d| (d.as_secs_f64() * hz) as u64);
    let max_len = factory.max_frame_len();
    let max_len16 = max_len as u16;
    let mut report = SendReport {
        sent: 0,
        refused: 0,
        alloc_failures: 0,
        received: 0,
        bytes: 0,
        elapsed: 0.0,
        mpps: 0.0,
        gbps: 0.0,
        wire_gbps: 0.0,
        counts: GenCounts::default(),
        error: None,
    };
    let counts_before = *factory.counts();
    let mut lens = [0usize; BURST];
    let t0 = dpdk::tsc();
    let mut now = t0;
    loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        now = dpdk::tsc();
        let since = now.wrapping_sub(t0);
        if duration.is_some_and(|d| since >= d) {
            break;
        }
        let offered = report.sent + report.refused;
        let mut n = BURST as u64;
        if let Some(count) = limit.count {
            if offered >= count {
                break;
            }
            n = n.min(count - offered);
        }
        if let Some(tpf) = ticks_per_frame {
            let due = (since as f64 / tpf) as u64 + 1;
            if due <= offered {
                std::hint::spin_loop();
                continue;
            }
            n = n.min(due - offered);
        }
        let mut burst = MbufBurst::new();
        if !pool.alloc_bulk(&mut burst, n as usize) {
            report.alloc_failures += 1;
            poll_rx(&mut rx, &mut report);
            continue;
        }
        // The mbufs come back from the consumer (on a pipeline, another core) with their data
        // lines in its cache (`alloc_bulk` took their descriptors ahead): take each frame's
        // first line for writing a few mbufs ahead of its write (its address is in the
        // descriptor).
        for m in burst.iter().take(DATA_AHEAD) {
            m.prefetch_fresh_data_for_write();
        }
        let mut broken = false;
        for (i, len) in lens.iter_mut().enumerate().take(burst.len()) {
            if let Some(a) = burst.as_slice().get(i + DATA_AHEAD) {
                a.prefetch_fresh_data_for_write();
            }
            let m = &mut burst.as_mut_slice()[i];
            let Ok(data) = m.reset(max_len16) else {
                broken = true;
                break;
            };
            *len = factory.next_frame(data, now);
            // Cannot fail: the frame is at most the length just reserved.
            let _ = m.trim((max_len - *len) as u16);
        }
        if broken {
            report.error =
                Some(format!("the mempool's mbufs have no room for {max_len}-byte frames"));
            break;
        }
        let taken = burst.len();
        let r = tx.send(burst);
        report.sent += u64::from(r.sent);
        report.refused += u64::from(r.dropped);
        report.bytes +=
            lens[..usize::from(r.sent).min(taken)].iter().map(|&l| l as u64).sum::<u64>();
        poll_rx(&mut rx, &mut report);
    }
    let end = now.max(dpdk::tsc());
    report.elapsed = end.wrapping_sub(t0) as f64 / hz;
    if report.elapsed > 0.0 {
        report.mpps = report.sent as f64 / report.elapsed / 1e6;
        report.gbps = report.bytes as f64 * 8.0 / report.elapsed / 1e9;
        report.wire_gbps = (report.bytes + 24 * report.sent) as f64 * 8.0 / report.elapsed / 1e9;
    }
    let after = *factory.counts();
    report.counts = GenCounts {
        frames: after.frames - counts_before.frames,
        bytes: after.bytes - counts_before.bytes,
        packets: after.packets - counts_before.packets,
        ipv4: after.ipv4 - counts_before.ipv4,
        ipv6: after.ipv6 - counts_before.ipv6,
        tcp: after.tcp - counts_before.tcp,
        udp: after.udp - counts_before.udp,
        syn: after.syn - counts_before.syn,
        fragments: after.fragments - counts_before.fragments,
    };
    report
}

#[inline]
fn poll_rx(rx: &mut Option<&mut RxQueue<'_>>, report: &mut SendReport) {
    if let Some(rx) = rx.as_deref_mut() {
        let got = rx.rx_burst(BURST as u16);
        report.received += got.len() as u64;
    }
}
