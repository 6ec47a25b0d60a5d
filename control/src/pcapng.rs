//! The reader's end of `spillwayctl capture`: it takes the workers' records out of their rings
//! ([`spillway_core::capture`]) and writes them as pcapng, each packet with a comment that says
//! what Spillway decided, until a bound is reached.
//!
//! The file has one interface per port (its name, nanosecond timestamps, the snap length); each
//! packet is an enhanced packet block whose comment reads
//! `spillway: point=sent decision=new_connection service=web backend=198.18.1.2:80 worker=0`
//! (`service` and `backend` only when there is one); Wireshark shows it as the packet comment,
//! `tshark -T fields -e frame.comment` prints it. The capture ends itself at the first of its
//! bounds: a count of packets, a duration, a size in bytes; or when the reader of the stream
//! goes away, or the workers stop. It ends with one interface statistics block per port (the
//! packets written from it) whose first also carries the records lost because a worker's ring
//! was full (`isb_osdrop`), and [`CaptureSummary`] says the same.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::interface_statistics::{
    InterfaceStatisticsBlock, InterfaceStatisticsOption,
};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;
use spillway_api::types::{CaptureSummary, StoppedBy};
use spillway_core::capture::{Point, Points, Record, TapShared};
use spillway_core::snapshot::Snapshot;

/// Records each worker's ring holds (about 2 KiB each): the reader empties the rings every
/// [`READ_EVERY`], so a worker can keep about 200,000 packets a second before it loses some.
pub const RING_RECORDS: usize = 2048;

/// How often the reader empties the rings.
pub const READ_EVERY: Duration = Duration::from_millis(10);

/// How long the reader waits for the workers to let go of their taps once it stopped them.
const LET_GO: Duration = Duration::from_millis(500);

/// A capture's bounds: it stops at the first reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Packets written.
    pub count: u64,
    /// Time since it started.
    pub duration: Duration,
    /// Bytes of pcapng written (headers included).
    pub bytes: u64,
}

impl std::fmt::Debug for PcapngStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PcapngStream").field("summary", &self.summary).finish_non_exhaustive()
    }
}

/// Writes one capture's records as pcapng into memory, chunk by chunk.
pub struct PcapngStream {
    writer: PcapNgWriter<Vec<u8>>,
    per_port: Vec<u64>,
    summary: CaptureSummary,
    bounds: Bounds,
}

impl PcapngStream {
    /// A stream for the ports named `ports` (in port index order), with the section header and
    /// the interfaces written.
    pub fn new(ports: &[String], snaplen: usize, bounds: Bounds, summary: CaptureSummary) -> Self {
        let mut writer = PcapNgWriter::new(Vec::new()).expect("writing to memory cannot fail");
        for name in ports {
            let idb = InterfaceDescriptionBlock {
                linktype: DataLink::ETHERNET,
                snaplen: u32::try_from(snaplen).unwrap_or(u32::MAX),
                options: vec![
                    InterfaceDescriptionOption::IfName(Cow::Owned(name.clone())),
                    // Nanoseconds: what the records carry.
                    InterfaceDescriptionOption::IfTsResol(9),
                ],
            };
            writer.write_pcapng_block(idb).expect("writing to memory cannot fail");
        }
        let mut s = PcapngStream { writer, per_port: vec![0; ports.len()], summary, bounds };
        s.summary.bytes = s.writer.get_ref().len() as u64;
        s
    }

    /// Writes `r` unless a bound was reached (then it is counted as discarded); `snap` names
    /// its service. The bound reached, once one is.
    pub fn write(&mut self, r: &Record, snap: &Snapshot) -> Option<StoppedBy> {
        if let Some(b) = self.reached() {
            self.summary.discarded += 1;
            return Some(b);
        }
        let port = usize::from(r.port).min(self.per_port.len().saturating_sub(1));
        let epb = EnhancedPacketBlock {
            interface_id: u32::try_from(port).unwrap_or(0),
            timestamp: Duration::from_nanos(r.ts_ns),
            original_len: r.orig_len,
            data: Cow::Borrowed(r.bytes()),
            options: vec![EnhancedPacketOption::Comment(Cow::Owned(comment(r, snap)))],
        };
        let n = self.writer.write_pcapng_block(epb).expect("writing to memory cannot fail");
        self.summary.bytes += n as u64;
        self.summary.packets += 1;
        match r.point {
            Point::Received => self.summary.received += 1,
            Point::Sent => self.summary.sent += 1,
            Point::Dropped => self.summary.dropped += 1,
        }
        if let Some(c) = self.per_port.get_mut(port) {
            *c += 1;
        }
        self.reached()
    }

    /// The bound on count or bytes reached, if one is.
    fn reached(&self) -> Option<StoppedBy> {
        if self.summary.packets >= self.bounds.count {
            Some(StoppedBy::Count)
        } else if self.summary.bytes >= self.bounds.bytes {
            Some(StoppedBy::Bytes)
        } else {
            None
        }
    }

    /// The bytes written since the last call.
    pub fn take_chunk(&mut self) -> Vec<u8> {
        std::mem::take(self.writer.get_mut())
    }

    /// Ends the stream: the interface statistics (packets written per port, the records lost
    /// on the first), the summary.
    pub fn finish(mut self, lost: u64, ts_ns: u64) -> (Vec<u8>, CaptureSummary) {
        self.summary.lost = lost;
        for (port, &written) in self.per_port.iter().enumerate() {
            let mut options = vec![InterfaceStatisticsOption::IsbUsrDeliv(written)];
            if port == 0 {
                options.push(InterfaceStatisticsOption::IsbOsDrop(lost));
                options.push(InterfaceStatisticsOption::Comment(Cow::Owned(format!(
                    "spillway: packets={} lost={lost} (lost: records the workers' capture rings \
                     had no room for, all ports)",
                    self.summary.packets
                ))));
            }
            let isb = InterfaceStatisticsBlock {
                interface_id: u32::try_from(port).unwrap_or(0),
                timestamp: ts_ns,
                options,
            };
            let n = self.writer.write_pcapng_block(isb).expect("writing to memory cannot fail");
            self.summary.bytes += n as u64;
        }
        self.summary.running = false;
        (self.take_chunk(), self.summary)
    }

    /// The summary so far.
    pub fn summary(&self) -> &CaptureSummary {
        &self.summary
    }
}

/// A record's packet comment.
pub fn comment(r: &Record, snap: &Snapshot) -> String {
    let mut c =
        format!("spillway: point={} decision={}", r.point.as_str(), r.note.decision.as_str());
    if let Some(svc) = r.note.service {
        match snap.service(svc) {
            Some(s) => c.push_str(&format!(" service={}", s.name)),
            None => c.push_str(&format!(" service=#{svc}")),
        }
    }
    if let Some(b) = r.note.backend {
        c.push_str(&format!(" backend={b}"));
    }
    c.push_str(&format!(" worker={}", r.worker));
    c
}

/// The points as the API spells them (`received,sent,dropped`).
pub fn points_str(p: Points) -> String {
    Point::ALL.into_iter().filter(|&x| p.has(x)).map(Point::as_str).collect::<Vec<_>>().join(",")
}

/// One capture's reader: empties the rings every [`READ_EVERY`], writes, hands each chunk to
/// `out` (closed: the stream's reader went away), and ends at a bound. `snapshot` gives the
/// current snapshot (service names); `progress` sees the summary after every round.
pub async fn run(
    mut rings: Vec<rtrb::Consumer<Record>>,
    shared: Arc<TapShared>,
    mut stream: PcapngStream,
    snapshot: impl Fn() -> Arc<Snapshot>,
    out: tokio::sync::mpsc::Sender<Vec<u8>>,
    mut progress: impl FnMut(&CaptureSummary),
) -> CaptureSummary {
    let send = async |chunk: Vec<u8>| out.send(chunk).await.is_ok();
    let t0 = Instant::now();
    let deadline = t0 + stream.bounds.duration;
    let mut stopped = None;
    if !send(stream.take_chunk()).await {
        stopped = Some(StoppedBy::ClientGone);
    }
    while stopped.is_none() {
        tokio::time::sleep(READ_EVERY).await;
        let snap = snapshot();
        stopped = drain(&mut rings, &mut stream, &snap);
        let chunk = stream.take_chunk();
        if !chunk.is_empty() && !send(chunk).await {
            stopped = Some(StoppedBy::ClientGone);
        }
        if stopped.is_none() && Instant::now() >= deadline {
            stopped = Some(StoppedBy::Duration);
        }
        if stopped.is_none() && rings.iter().all(rtrb::Consumer::is_abandoned) {
            stopped = Some(StoppedBy::WorkersGone);
        }
        stream.summary.duration_ms = ms(t0.elapsed());
        progress(&stream.summary);
    }
    // Stop the workers, and take what they published before they let go.
    shared.stop.store(true, Ordering::Relaxed);
    let let_go = Instant::now() + LET_GO;
    while !rings.iter().all(rtrb::Consumer::is_abandoned) && Instant::now() < let_go {
        tokio::time::sleep(READ_EVERY).await;
    }
    if stopped != Some(StoppedBy::ClientGone) {
        let snap = snapshot();
        drain(&mut rings, &mut stream, &snap);
    }
    stream.summary.stopped_by = stopped;
    stream.summary.duration_ms = ms(t0.elapsed());
    let ts_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let (tail, summary) = stream.finish(shared.lost_total(), ts_ns);
    if stopped != Some(StoppedBy::ClientGone) {
        send(tail).await;
    }
    progress(&summary);
    summary
}

/// Everything the rings hold, written (or discarded past a bound); the bound reached, if any.
fn drain(
    rings: &mut [rtrb::Consumer<Record>],
    stream: &mut PcapngStream,
    snap: &Snapshot,
) -> Option<StoppedBy> {
    let mut reached = None;
    for ring in rings {
        while let Ok(r) = ring.pop() {
            reached = stream.write(&r, snap).or(reached);
        }
    }
    reached
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcap_file::pcapng::{Block, PcapNgParser};
    use spillway_core::capture::{Decision, Note};
    use spillway_core::counters::Reason;
    use spillway_core::decide::{DropReason, ForwardReason};
    use spillway_core::model::Endpoint;

    fn record(point: Point, port: u16, len: usize, note: Note) -> Record {
        let frame: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let mut r = Record::new(point, &frame, 96, note);
        r.port = port;
        r.worker = 1;
        r.ts_ns = 1_700_000_000_123_456_789;
        r
    }

    fn bounds(count: u64) -> Bounds {
        Bounds { count, duration: Duration::from_secs(5), bytes: 1 << 20 }
    }

    fn blocks(bytes: &[u8]) -> Vec<Block<'_>> {
        let (mut rest, mut parser) = PcapNgParser::new(bytes).unwrap();
        let mut out = Vec::new();
        while !rest.is_empty() {
            let (r, b) = parser.next_block(rest).unwrap();
            out.push(b);
            rest = r;
        }
        out
    }

    #[test]
    fn packets_carry_their_decision_as_a_comment_and_their_port_as_interface() {
        let ports = vec!["net_tap0".to_string(), "net_null1".to_string()];
        let mut s = PcapngStream::new(&ports, 96, bounds(10), CaptureSummary::default());
        let snap = Snapshot::empty();
        let backend = Endpoint { addr: "198.18.1.2".parse().unwrap(), port: 8080 };
        let note = Note {
            decision: Decision::Counted(Reason::Forward(ForwardReason::NewConnection)),
            service: None,
            backend: Some(backend),
        };
        assert_eq!(s.write(&record(Point::Sent, 1, 200, note), &snap), None);
        assert_eq!(
            s.write(
                &record(
                    Point::Dropped,
                    0,
                    60,
                    Note::of(Decision::Counted(Reason::Decision(DropReason::NoMatchingRule)))
                ),
                &snap
            ),
            None
        );
        let mut bytes = s.take_chunk();
        let (tail, summary) = s.finish(7, 1);
        bytes.extend(tail);
        let blocks = blocks(&bytes);
        let idbs: Vec<_> =
            blocks.iter().filter_map(|b| b.clone().into_interface_description()).collect();
        assert_eq!(idbs.len(), 2);
        assert!(idbs[0].options.contains(&InterfaceDescriptionOption::IfName("net_tap0".into())));
        assert!(idbs[1].options.contains(&InterfaceDescriptionOption::IfTsResol(9)));
        let epbs: Vec<_> = blocks.iter().filter_map(|b| b.clone().into_enhanced_packet()).collect();
        assert_eq!(epbs.len(), 2);
        assert_eq!(epbs[0].interface_id, 1);
        assert_eq!(epbs[0].original_len, 200);
        assert_eq!(epbs[0].data.len(), 96, "cut at the snap length");
        assert_eq!(epbs[0].timestamp, Duration::from_nanos(1_700_000_000_123_456_789));
        assert_eq!(
            epbs[0].options,
            vec![EnhancedPacketOption::Comment(
                "spillway: point=sent decision=new_connection backend=198.18.1.2:8080 worker=1"
                    .into()
            )]
        );
        assert_eq!(epbs[1].interface_id, 0);
        assert_eq!(
            epbs[1].options,
            vec![EnhancedPacketOption::Comment(
                "spillway: point=dropped decision=no_matching_rule worker=1".into()
            )]
        );
        let isbs: Vec<_> =
            blocks.iter().filter_map(|b| b.clone().into_interface_statistics()).collect();
        assert_eq!(isbs.len(), 2);
        assert!(isbs[0].options.contains(&InterfaceStatisticsOption::IsbOsDrop(7)));
        assert!(isbs[0].options.contains(&InterfaceStatisticsOption::IsbUsrDeliv(1)));
        assert!(isbs[1].options.contains(&InterfaceStatisticsOption::IsbUsrDeliv(1)));
        assert_eq!((summary.packets, summary.sent, summary.dropped, summary.lost), (2, 1, 1, 7));
        assert_eq!(summary.bytes, bytes.len() as u64);
    }

    #[test]
    fn a_capture_stops_at_its_count_and_discards_the_rest() {
        let ports = vec!["p0".to_string()];
        let mut s = PcapngStream::new(&ports, 96, bounds(2), CaptureSummary::default());
        let snap = Snapshot::empty();
        let r = record(
            Point::Received,
            0,
            80,
            Note::of(Decision::Counted(Reason::Forward(ForwardReason::ConntrackHit))),
        );
        assert_eq!(s.write(&r, &snap), None);
        assert_eq!(s.write(&r, &snap), Some(StoppedBy::Count));
        assert_eq!(s.write(&r, &snap), Some(StoppedBy::Count));
        assert_eq!((s.summary().packets, s.summary().discarded), (2, 1));
    }

    #[test]
    fn a_capture_stops_at_its_size() {
        let ports = vec!["p0".to_string()];
        let tiny = Bounds { count: 1000, duration: Duration::from_secs(5), bytes: 400 };
        let mut s = PcapngStream::new(&ports, 96, tiny, CaptureSummary::default());
        let snap = Snapshot::empty();
        let r = record(
            Point::Received,
            0,
            80,
            Note::of(Decision::Counted(Reason::Forward(ForwardReason::ConntrackHit))),
        );
        let mut written = 0;
        while s.write(&r, &snap).is_none() {
            written += 1;
            assert!(written < 10, "a 400-byte bound holds a few packets");
        }
        assert_eq!(s.write(&r, &snap), Some(StoppedBy::Bytes));
        assert!(s.summary().bytes >= 400);
    }

    #[tokio::test(start_paused = true)]
    async fn the_reader_writes_what_the_workers_publish_and_stops_them_at_its_count() {
        let slots: Vec<Arc<spillway_core::capture::TapSlot>> =
            (0..2).map(|_| Arc::default()).collect();
        let filter = spillway_core::capture::Filter::default();
        let (rings, shared) =
            spillway_core::capture::start(&slots, &filter, Points::ALL, 96, 16).unwrap();
        let mut taps: Vec<_> = slots.iter().map(|s| s.take().unwrap()).collect();
        for (w, tap) in taps.iter_mut().enumerate() {
            for _ in 0..3 {
                let mut r = record(
                    Point::Received,
                    0,
                    64,
                    Note::of(Decision::Counted(Reason::Forward(ForwardReason::ConntrackHit))),
                );
                r.worker = w as u16;
                tap.ring.push(r).unwrap();
            }
        }
        let ports = vec!["p0".to_string()];
        let stream = PcapngStream::new(&ports, 96, bounds(4), CaptureSummary::default());
        let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
        let stopping = Arc::clone(&shared);
        // The workers let go of their taps once stopped, as a worker's poll does.
        let workers = tokio::spawn(async move {
            while !stopping.stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            drop(taps);
        });
        let summary = run(rings, shared, stream, || Arc::new(Snapshot::empty()), tx, |_| {}).await;
        let mut out = Vec::new();
        while let Ok(chunk) = rx.try_recv() {
            out.extend(chunk);
        }
        workers.await.unwrap();
        assert_eq!(summary.stopped_by, Some(StoppedBy::Count));
        assert_eq!((summary.packets, summary.discarded), (4, 2));
        let epbs = blocks(&out).into_iter().filter_map(Block::into_enhanced_packet).count();
        assert_eq!(epbs, 4);
    }
}
