//! The packet path: what a worker does with one received frame.
//!
//! [`process`] classifies the frame once ([`wire::classify()`]), answers what the node itself
//! must answer (ARP and neighbour solicitations for its addresses and VIPs, echo requests to
//! them), learns neighbours, and sends every packet that matches a forwarding rule to the
//! backend that [`decide`] picks: encapsulated (IPIP / IP6IP6 / 4in6, or GUE) or with its
//! destination MAC rewritten (L2 DSR). ICMP errors about a VIP flow go to that flow's backend.
//! A packet with DF set that would exceed the egress MTU once encapsulated is answered with
//! ICMP "fragmentation needed" / ICMPv6 "packet too big".
//!
//! With an exception path (the kernel interface, [`crate::kernel`]), every other frame for the
//! node's own addresses (BGP, SSH, the replies to the health checks: IP to the node that is not
//! an echo request, ICMP errors about the node's own packets, IPv6 to a link-local address) is
//! handed to the kernel ([`Outcome::ToKernel`]), and so are the ARP replies and neighbour
//! advertisements it hears (the resolver hears them too). The node keeps answering ARP, neighbour
//! solicitations and echo requests itself, for its addresses and the VIPs: the kernel never
//! sees those, so the two never answer the same question.
//!
//! It works on any [`PacketBuf`] (a DPDK mbuf in the worker, a `Vec` in tests), so the whole
//! path is tested without DPDK. It never allocates, locks or logs; every way a packet ends is
//! one counter ([`Reason`]). Built with the `phase-clock` feature (benchmarks only),
//! [`phase_clock`] sums the cycles of each pass of [`process_burst`].

use crate::dpdk;
use crate::neighbour::{NeighbourEvent, NeighbourTable, NextHop, NextHopCache};
use crate::node::Node;
use arrayvec::ArrayVec;
use crossbeam::queue::ArrayQueue;
use spillway_core::addr::Addr;
use spillway_core::conntrack::{self, Ask, Burst, Hint, Pending, Shard};
use spillway_core::counters::{PathDrop, Reason, TrafficCounters, WorkerCounters};
use spillway_core::decide::{
    self, decide_with_payload, judge, prepare_for, ForwardReason, Prepared, Verdict,
};
use spillway_core::flow::{self, FlowKey, PacketInfo};
use spillway_core::model::{Encap, ZoneId};
use spillway_core::snapshot::{RuleCache, ServiceView, Snapshot};
use spillway_core::time::Time;
use spillway_core::wire::build::{self, EncapKind, EncapParams, OuterV4, OuterV6};
use spillway_core::wire::{self, arp, ethernet, Frame, FrameKind, IpFrame, IpMeta, MacAddr};

/// A packet buffer the path can rewrite: a DPDK mbuf, or a plain buffer in tests.
pub trait PacketBuf {
    /// The packet bytes.
    fn data(&self) -> &[u8];
    /// The packet bytes, writable.
    fn data_mut(&mut self) -> &mut [u8];
    /// Grow at the front by `n` bytes; false when there is no headroom.
    fn prepend(&mut self, n: usize) -> bool;
    /// Drop `n` bytes from the front.
    fn adj(&mut self, n: usize) -> bool;
    /// Drop bytes from the end so that `len` remain.
    fn truncate(&mut self, len: usize) -> bool;
    /// Make the frame `hdr` new bytes followed by the `len` bytes found `front` bytes into
    /// it (dropping the `front` bytes before them and any after), and return it for writing
    /// the new headers: [`PacketBuf::adj`], [`PacketBuf::truncate`] and
    /// [`PacketBuf::prepend`] in one step. `None` when it cannot (the packet is then
    /// dropped): a shared buffer, fewer than `front + len` bytes, too little headroom.
    fn reframe(&mut self, front: usize, len: usize, hdr: usize) -> Option<&mut [u8]>;
    /// Grow at the end so that the data is `len` bytes; false when there is no tailroom.
    fn extend_to(&mut self, len: usize) -> bool;
    /// Replace the contents with `len` fresh bytes (for building a new packet in place).
    fn reset(&mut self, len: usize) -> bool;
    /// False when the packet is not in one contiguous buffer (the path then drops it).
    fn is_contiguous(&self) -> bool {
        true
    }
    /// False when the bytes belong to another owner too (a shared or external mbuf): the path
    /// then drops the packet (`shared_buffer`) instead of rewriting it.
    fn is_writable(&self) -> bool {
        true
    }
    /// Start loading the first line of the packet bytes; a hint, may do nothing.
    fn prefetch_data(&self) {}
}

/// What the worker does with the buffer afterwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Transmit it (it was rewritten: encapsulated, answered, or turned into an ICMP error).
    Transmit,
    /// Free it; it was counted under this reason.
    Drop(Reason),
    /// Free it; it was for the node and has been used (a neighbour advertisement).
    Consumed,
    /// Hand it, unchanged, to the kernel interface (the exception path); the caller counts it.
    ToKernel,
    /// Keep it until its backend's next hop is resolved: it is built but for its destination
    /// MAC ([`crate::unresolved`]); the backend's slot is the next of [`PathCtx::waiting`].
    Wait,
}

/// The backend slots of the frames of a burst that wait for their next hop's MAC, in the
/// order of their [`Outcome::Wait`] (kept apart so that an outcome stays two bytes, which every
/// packet writes and reads).
#[derive(Debug, Clone)]
pub struct WaitingSlots {
    slots: [u16; MAX_BURST],
    len: usize,
}

impl Default for WaitingSlots {
    fn default() -> Self {
        WaitingSlots { slots: [0; MAX_BURST], len: 0 }
    }
}

impl WaitingSlots {
    /// One more frame waits for the next hop of the backend in `slot`.
    fn push(&mut self, slot: u16) {
        if let Some(s) = self.slots.get_mut(self.len) {
            *s = slot;
            self.len += 1;
        }
    }

    /// The slots, in the order of the burst's [`Outcome::Wait`]s.
    pub fn slots(&self) -> &[u16] {
        &self.slots[..self.len]
    }
}

/// Everything the path reads and writes for one burst.
#[derive(Debug)]
pub struct PathCtx<'a> {
    /// The snapshot of this burst.
    pub snap: &'a Snapshot,
    /// The worker's connection table.
    pub shard: &'a mut Shard,
    /// The time of this burst.
    pub now: Time,
    /// The node's addresses.
    pub node: &'a Node,
    /// Resolved next hops.
    pub neighbours: &'a NeighbourTable,
    /// Per backend slot, its next hop's MAC (from `snap` and `neighbours`).
    pub next_hops: &'a NextHopCache,
    /// Where to post neighbour events.
    pub events: &'a ArrayQueue<NeighbourEvent>,
    /// The worker's counters.
    pub counters: &'a WorkerCounters,
    /// True when there is an exception path to the kernel ([`Outcome::ToKernel`]).
    pub kernel: bool,
    /// The slots of the frames that wait ([`Outcome::Wait`]).
    pub waiting: WaitingSlots,
}

impl PathCtx<'_> {
    /// A destination that belongs to the kernel: the node's own addresses (what the node does
    /// not answer itself) and IPv6 link-local addresses.
    #[inline]
    fn for_kernel(&self, dst: &Addr) -> bool {
        self.kernel && (self.node.owns(dst) || dst.is_link_local_v6())
    }

    fn is_local(&self, a: &Addr) -> bool {
        self.node.owns(a) || self.snap.rules.is_vip(a)
    }

    /// An answer heard (ARP reply, neighbour advertisement): the resolver decides whether to
    /// believe it (only answers to its own requests are), so every one goes to it, also those
    /// that repeat the known MAC (they keep the entry fresh). Answers are rare: a few per next
    /// hop per refresh period; a flood of them fills the bounded queue and the rest are lost.
    fn heard(&self, ip: Addr, mac: MacAddr) {
        if ip != Addr::UNSPECIFIED {
            let _ = self.events.push(NeighbourEvent::Learned(ip, mac));
        }
    }
}

fn drop_path(r: PathDrop) -> Outcome {
    Outcome::Drop(Reason::Path(r))
}

/// Most packets [`process_burst`] takes at once (the largest burst size a worker can be
/// configured with).
pub const MAX_BURST: usize = 64;

/// Process one received frame. The caller counts rx, transmits on [`Outcome::Transmit`], keeps
/// the frame on [`Outcome::Wait`] and frees otherwise; every outcome is counted here (a frame
/// that waits is counted as forwarded; if its next hop stays silent, as dropped too).
#[inline]
pub fn process<B: PacketBuf>(buf: &mut B, ctx: &mut PathCtx<'_>) -> Outcome {
    let (mut staged, mut last_rule) = (Staged::EMPTY, RuleCache::EMPTY);
    stage(buf, ctx, OwnMac::of(ctx.node), &mut last_rule, &mut staged);
    finish(buf, ctx, &staged, &mut Unnoted)
}

/// What the path tells, as it decides, about a packet's decision: the packet capture's note
/// of a frame it captures. A worker's ordinary bursts tell nothing ([`Unnoted`], whose calls
/// compile to nothing: [`process_burst`] is [`process_burst_noted`] with it).
pub trait Noter {
    /// The packet's forwarding rule leads to service `service`; `forwarded`: the reason it was
    /// sent for and the backend slot it was sent to, `None` while it is not (the last call for
    /// a packet is what happened to it).
    fn decided(&mut self, service: u16, forwarded: Option<(ForwardReason, u16)>);
}

/// The [`Noter`] of a worker's ordinary bursts: nothing is noted.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unnoted;

impl Noter for Unnoted {
    #[inline(always)]
    fn decided(&mut self, _: u16, _: Option<(ForwardReason, u16)>) {}
}

/// Process a burst of received frames (at most [`MAX_BURST`]); `out[i]` is what [`process`]
/// would have returned for `bufs[i]`, and the packets are decided in order.
///
/// The work is done in passes over the whole burst, so that the cache misses of different
/// packets overlap instead of following one another (the DPDK l3fwd / VPP way): the first data
/// lines of all packets are prefetched (their descriptors the worker prefetched as it received
/// them); then, [`GROUP`] packets at a time, every frame is classified, its forwarding rule
/// matched and its tracking key hashed ([`stage`]), and the connection table's staged pipeline
/// ([`conntrack::burst`]) runs on the burst's records: the group's first lines prefetched
/// together, the probes [`record_lag`] packets behind, the rest after the tail; then each
/// packet is decided and rewritten ([`finish`]), a packet of a tracked flow by a short way
/// (`forward_tracked`) when its hint holds, a new connection's SYN by another (`forward_new`).
/// The common packet (untagged IPv4 or IPv6 TCP or UDP to a service that tracks the 5-tuple and
/// encapsulates) goes through both passes with a smaller record ([`Lane`]).
pub fn process_burst<B: PacketBuf>(
    bufs: &mut [B],
    ctx: &mut PathCtx<'_>,
    out: &mut [Outcome; MAX_BURST],
) {
    process_burst_noted(bufs, ctx, out, &mut Unnoted);
}

/// [`process_burst`], telling `notes` each packet's decision as it is made (a capture runs
/// its frames through it one at a time).
pub fn process_burst_noted<B: PacketBuf, N: Noter>(
    bufs: &mut [B],
    ctx: &mut PathCtx<'_>,
    out: &mut [Outcome; MAX_BURST],
    notes: &mut N,
) {
    let n = bufs.len().min(MAX_BURST);
    let bufs = &mut bufs[..n];
    for b in bufs.iter() {
        b.prefetch_data();
    }
    let t0 = phase_clock::tick();
    // Only the burst's records are written: an array would first write all `MAX_BURST` (8 KiB,
    // eight 16-byte stores per packet).
    let mut staged = ArrayVec::<Staged<'_>, MAX_BURST>::new();
    let mut last_rule = RuleCache::EMPTY;
    let own_mac = OwnMac::of(ctx.node);
    let mut table = Burst::new(ctx.shard);
    let lag = record_lag(n);
    for g0 in (0..n).step_by(GROUP) {
        let g1 = (g0 + GROUP).min(n);
        for b in &bufs[g0..g1] {
            stage(b, ctx, own_mac, &mut last_rule, &mut staged);
        }
        // Every way through `stage` puts one record (the last pass pairs them with the frames).
        debug_assert_eq!(staged.len(), g1);
        table.prefetch_first(ctx.shard, &mut staged[g0..g1], dpdk::prefetch);
        let behind = g0.saturating_sub(lag)..g1.saturating_sub(lag);
        table.probe(ctx.shard, &mut staged[behind], dpdk::prefetch);
    }
    let t1 = phase_clock::tick();
    let tail = n.saturating_sub(lag);
    table.probe_tail(ctx.shard, &mut staged[tail..n], dpdk::prefetch);
    table.finish(ctx.shard, &mut staged[..n], dpdk::prefetch);
    let t2 = phase_clock::tick();
    for ((b, st), o) in bufs.iter_mut().zip(&staged).zip(out.iter_mut()) {
        *o = finish(b, ctx, st, notes);
    }
    phase_clock::add([t0, t1, t2, phase_clock::tick()], n);
}

/// How many packets the first pass stages before it prefetches their first lines of the table
/// together (and then probes the packets [`record_lag`] behind). A prefetch of a line in a table
/// far larger than the caches can hold the core up (its address to translate, a miss buffer to
/// find), so a group's prefetches are issued back to back, where those waits overlap, rather
/// than one per packet between the classifier's work. Sixteen measured best of 4, 8, 16 and 32
/// (docs/performance.md, "The staged burst").
const GROUP: usize = 16;
const _: () = assert!(MAX_BURST % GROUP == 0);
// The table's pipeline keeps a burst's inserts into full buckets as a bit each in a `u64`.
const _: () = assert!(MAX_BURST <= 64);

/// How many packets behind the first pass the probes run (each reads a line the first pass
/// prefetched and prefetches the one it names next; those not reached in the first pass run
/// after it, in the tail): one group in a burst of up to two groups, so that a line has had a
/// group's staging to arrive; in a longer burst, the whole burst (every probe after the first
/// pass: the last group's lines then have the probes of two groups or more to arrive). Each
/// measured best for its burst length (docs/performance.md, "The staged burst").
#[inline(always)]
fn record_lag(n: usize) -> usize {
    if n > 2 * GROUP {
        n
    } else {
        GROUP
    }
}

/// What the first pass over a frame found: kept per packet of a burst between the passes, so
/// it holds only what the last pass needs (the common packet's [`Lane`] is 64 bytes; the
/// general record 136; the whole classified `Frame` made it 176, copied twice per packet).
#[derive(Clone, Copy, Debug)]
enum Staged<'s> {
    /// Already settled (malformed, not for us, not contiguous).
    Done(Outcome),
    /// A frame for the node itself (ARP, neighbour discovery, echo, other): rare, classified
    /// again in the last pass (the buffer is untouched until then).
    Local,
    /// A packet to decide and forward: its flow fields and placement, its decision's first
    /// half, and whether it is an ICMP error (routed by its inner tuple). (Its sender's MAC,
    /// for the rare ICMP error back, is read from the frame then: it is unchanged until the
    /// packet is rewritten.)
    Decide { info: PacketInfo, ip: IpMeta, prep: Prepared<'s>, icmp_error: bool },
    /// The common packet, by a short way: an untagged IPv4 or IPv6 TCP or UDP packet without
    /// options or extension headers, not a SYN, of a service that tracks the 5-tuple and
    /// encapsulates (a packet of a tracked flow, most likely), with only what its lookup and
    /// encapsulation need.
    Lane(Lane<'s>),
    /// The same for a SYN of such a service, a new connection: never looked up, its entry is
    /// made ([`forward_new`]).
    NewLane(Lane<'s>),
}

/// What the short way keeps of a packet between the passes (64 bytes): its service, tracking
/// key (the packet's 5-tuple, [`FlowKey::five_tuple`]), the key's hash and where its entry
/// probably is, and the IP packet's length (the IP header is at [`ethernet::HEADER_LEN`]).
/// The frame itself is untouched until the last pass, which classifies it again in full when
/// the short way does not apply after all ([`Lane::decide_in_full`]).
#[derive(Clone, Copy, Debug)]
struct Lane<'s> {
    svc: &'s ServiceView,
    key: FlowKey,
    key_hash: u64,
    hint: Hint,
    l3_len: u16,
}

const _: () = assert!(size_of::<Lane<'static>>() == 64);

impl<'s> Lane<'s> {
    /// The short way's record of a classified frame, when it applies: not the node's own
    /// traffic, and its rule's service tracks the 5-tuple and encapsulates (IPIP or GUE). Of
    /// such a service, every SYN and only a SYN is a new-connection SYN (CT-2): staged as
    /// [`Staged::NewLane`], the others as [`Staged::Lane`].
    #[inline(always)]
    fn of(f: &IpFrame, ctx: &PathCtx<'s>, last_rule: &mut RuleCache<'s>) -> Option<Lane<'s>> {
        if ctx.for_kernel(&f.info.dst) {
            return None;
        }
        let svc = ctx.snap.service_for_cached(&f.info, last_rule)?;
        if !svc.tracks_five_tuple || svc.encap == Encap::L2 {
            return None;
        }
        let key = FlowKey::five_tuple(&f.info, svc.id);
        // What the general way builds (checked in every debug build: the tests, the e2e daemon).
        debug_assert_eq!(
            key,
            flow::tracking_key(&f.info, svc.tracking, svc.affinity, svc.symmetric_hashing, svc.id)
        );
        // Always for IPv4 (a 16-bit total length); an IPv6 packet with more than 65,495 bytes
        // of payload goes the general way.
        let l3_len = u16::try_from(f.ip.l3_len).ok()?;
        debug_assert_eq!(
            f.info.is_syn(),
            flow::is_new_connection_syn(&f.info, svc.tracking, svc.affinity)
        );
        Some(Lane { svc, key, key_hash: conntrack::key_hash(&key), hint: Hint::NONE, l3_len })
    }

    /// The packet's flow fields, from its key (all a tracked entry's validity depends on).
    #[inline(always)]
    fn info(&self) -> PacketInfo {
        self.key.packet_info()
    }

    /// The general way for a packet the short way could not send (no entry where the hint
    /// says, an entry no longer valid, no prebuilt outer headers, too big): classified again
    /// (the frame is as received), then decided as [`stage`] and [`finish`] would have.
    #[cold]
    #[inline(never)]
    fn decide_in_full<B: PacketBuf, N: Noter>(
        &self,
        buf: &mut B,
        ctx: &mut PathCtx<'_>,
        notes: &mut N,
    ) -> Outcome {
        let data = buf.data();
        let frame = wire::classify_ip_fast(data).or_else(|| wire::classify_ip6_fast(data));
        let Some(IpFrame { info, ip, .. }) = frame else {
            // The first pass classified this very frame: unreachable, never a panic.
            return drop_path(PathDrop::NotForUs);
        };
        let mut prep = prepare_for(&info, Some(self.svc));
        prep.hint = self.hint;
        forward(buf, ctx, &info, &ip, &prep, false, notes)
    }
}

/// Where [`stage`] puts a frame's record: the one of [`process`], or the burst's records of
/// [`process_burst`] (in order).
trait Put<'s> {
    fn put(&mut self, st: Staged<'s>);
}

impl<'s> Put<'s> for Staged<'s> {
    #[inline(always)]
    fn put(&mut self, st: Staged<'s>) {
        *self = st;
    }
}

impl<'s> Put<'s> for ArrayVec<Staged<'s>, MAX_BURST> {
    #[inline(always)]
    fn put(&mut self, st: Staged<'s>) {
        // Never full: a burst has at most `MAX_BURST` frames, each put once.
        self.push(st);
    }
}

impl Staged<'_> {
    const EMPTY: Staged<'static> = Staged::Done(Outcome::Consumed);
}

/// What a staged packet asks of the connection table's burst pipeline: the short way's
/// lookup reads its key's home record first; a general lookup its bucket header; a
/// new-connection SYN (a `NewLane`, or a general record not looked up) makes an entry.
impl Pending for Staged<'_> {
    #[inline(always)]
    fn ask(&mut self) -> Ask<'_> {
        match self {
            Staged::Lane(lane) => Ask::Home { hash: lane.key_hash, hint: &mut lane.hint },
            Staged::NewLane(lane) => Ask::Insert { hash: lane.key_hash },
            Staged::Decide { prep, .. } if prep.service.is_some() => {
                if prep.lookup {
                    Ask::Lookup { hash: prep.key_hash, hint: &mut prep.hint }
                } else {
                    Ask::Insert { hash: prep.key_hash }
                }
            }
            _ => Ask::Nothing,
        }
    }
}

/// Classify a frame and, when it is to be forwarded, match its rule and hash its key.
///
/// The record is written in place: returned by value, it was built on the stack and then
/// copied in 16-byte loads over the narrower stores that built it, which stalled each load
/// until those stores were done (no store forwarding). Inlined in the burst loop, with the
/// general way (`stage_general`) out of line: the common packet's values then stay in
/// registers.
#[inline(always)]
fn stage<'s, B: PacketBuf>(
    buf: &B,
    ctx: &PathCtx<'s>,
    own_mac: OwnMac,
    last_rule: &mut RuleCache<'s>,
    out: &mut impl Put<'s>,
) {
    if !buf.is_contiguous() {
        out.put(Staged::Done(drop_path(PathDrop::NoHeadroom)));
        return;
    }
    if !buf.is_writable() {
        out.put(Staged::Done(drop_path(PathDrop::SharedBuffer)));
        return;
    }
    let data = buf.data();
    // The port may be promiscuous: unicast frames for other hosts are not ours (checked on
    // the packet bytes, before any parsing).
    if !own_mac.admits(data) {
        out.put(Staged::Done(drop_path(PathDrop::NotForUs)));
        return;
    }
    // The common frame (untagged IPv4 TCP/UDP; IPv6 in `stage_general`) without building a
    // whole `Frame`, and by the short way when it applies; the rest out of line (so that the
    // short way keeps its values in registers).
    match wire::classify_ip_fast(data) {
        Some(f) => stage_fast(f, ctx, last_rule, out),
        None => stage_general(data, ctx, last_rule, out),
    }
}

/// The node's MAC as a word, taken once per burst, for [`OwnMac::admits`].
#[derive(Clone, Copy, Debug)]
struct OwnMac(u64);

impl OwnMac {
    #[inline(always)]
    fn of(node: &Node) -> OwnMac {
        let m = node.mac;
        OwnMac(u64::from_le_bytes([0, 0, m[0], m[1], m[2], m[3], m[4], m[5]]))
    }

    /// False for a unicast frame to another MAC (a promiscuous port passes those too); true
    /// for one to the node's MAC, for a group (multicast or broadcast) frame, and for one too
    /// short to have a destination (the classifier drops it as malformed). The destination is
    /// read as the frame's first 8 bytes shifted to its 6 and compared with the node's word,
    /// half the instructions of assembling both six-byte values.
    #[inline(always)]
    fn admits(self, data: &[u8]) -> bool {
        match data.first_chunk::<8>() {
            Some(w) => {
                let w = u64::from_le_bytes(*w);
                w & 1 != 0 || w << 16 == self.0
            }
            None => data.get(..6).is_none_or(|d| d[0] & 1 != 0 || d == OwnMac::bytes(self)),
        }
    }

    fn bytes(self) -> [u8; 6] {
        let b = self.0.to_le_bytes();
        [b[2], b[3], b[4], b[5], b[6], b[7]]
    }
}

/// [`stage`] for a frame of the fast classifiers: by the short way when it applies.
#[inline(always)]
fn stage_fast<'s>(
    f: IpFrame,
    ctx: &PathCtx<'s>,
    last_rule: &mut RuleCache<'s>,
    out: &mut impl Put<'s>,
) {
    match Lane::of(&f, ctx, last_rule) {
        Some(lane) if f.info.is_syn() => out.put(Staged::NewLane(lane)),
        Some(lane) => out.put(Staged::Lane(lane)),
        None => stage_ip(f, false, ctx, last_rule, out),
    }
}

/// [`stage`] for a frame that [`wire::classify_ip_fast`] does not take: the IPv6 common case
/// ([`wire::classify_ip6_fast`], by the short way when it applies), else the general parser.
#[inline(never)]
fn stage_general<'s>(
    data: &[u8],
    ctx: &PathCtx<'s>,
    last_rule: &mut RuleCache<'s>,
    out: &mut impl Put<'s>,
) {
    if let Some(f) = wire::classify_ip6_fast(data) {
        stage_fast(f, ctx, last_rule, out);
        return;
    }
    let (f, icmp_error) = match wire::classify(data) {
        Ok(f) => match f.kind {
            FrameKind::Ip { info, ip } => (IpFrame { src_mac: f.src_mac, info, ip }, false),
            FrameKind::IcmpError { info, ip, .. } => {
                (IpFrame { src_mac: f.src_mac, info, ip }, true)
            }
            FrameKind::IcmpEchoRequest { info, ip } if !ctx.is_local(&info.dst) => {
                (IpFrame { src_mac: f.src_mac, info, ip }, false)
            }
            _ => {
                out.put(Staged::Local);
                return;
            }
        },
        Err(m) => {
            out.put(Staged::Done(Outcome::Drop(Reason::Malformed(m))));
            return;
        }
    };
    stage_ip(f, icmp_error, ctx, last_rule, out)
}

/// [`stage`] for an IP packet to decide in full (not by the short way).
#[inline(always)]
fn stage_ip<'s>(
    IpFrame { info, ip, .. }: IpFrame,
    icmp_error: bool,
    ctx: &PathCtx<'s>,
    last_rule: &mut RuleCache<'s>,
    out: &mut impl Put<'s>,
) {
    // The node's own traffic (for an ICMP error, `info` is the quoted packet reversed: its
    // `dst` is the quoted packet's source, the node's address when the node sent it).
    if ctx.for_kernel(&info.dst) {
        out.put(Staged::Done(Outcome::ToKernel));
        return;
    }
    let prep = prepare_for(&info, ctx.snap.service_for_cached(&info, last_rule));
    out.put(Staged::Decide { prep, info, ip, icmp_error });
}

/// The last pass: answer, or decide and rewrite; count drops.
#[inline]
fn finish<B: PacketBuf, N: Noter>(
    buf: &mut B,
    ctx: &mut PathCtx<'_>,
    staged: &Staged<'_>,
    notes: &mut N,
) -> Outcome {
    let out = match staged {
        Staged::Done(o) => *o,
        Staged::Local => match wire::classify(buf.data()) {
            Ok(f) => local(buf, ctx, &f),
            // It was classified as for the node in the first pass: unreachable, never a panic.
            Err(m) => Outcome::Drop(Reason::Malformed(m)),
        },
        Staged::Lane(lane) => {
            let tracked = forward_tracked(
                buf,
                ctx,
                (lane.svc, &lane.key, lane.key_hash, lane.hint),
                &lane.info(),
                (ethernet::HEADER_LEN, usize::from(lane.l3_len)),
                notes,
            );
            match tracked {
                Some(o) => o,
                None => lane.decide_in_full(buf, ctx, notes),
            }
        }
        Staged::NewLane(lane) => match forward_new(buf, ctx, lane, notes) {
            Some(o) => o,
            None => lane.decide_in_full(buf, ctx, notes),
        },
        Staged::Decide { info, ip, prep, icmp_error } => {
            let tracked = match (icmp_error, prep.service, prep.lookup) {
                (false, Some(svc), true) => forward_tracked(
                    buf,
                    ctx,
                    (svc, &prep.key, prep.key_hash, prep.hint),
                    info,
                    (usize::from(ip.l3_offset), ip.l3_len as usize),
                    notes,
                ),
                _ => None,
            };
            match tracked {
                Some(o) => o,
                None => forward(buf, ctx, info, ip, prep, *icmp_error, notes),
            }
        }
    };
    if let Outcome::Drop(r) = out {
        ctx.counters.reason(r).inc();
    }
    out
}

/// Frames for the node itself.
fn local<B: PacketBuf>(buf: &mut B, ctx: &mut PathCtx<'_>, f: &Frame) -> Outcome {
    match f.kind {
        // stage() decides IP frames and echo requests to others; never panic on the path.
        FrameKind::Ip { .. } | FrameKind::IcmpError { .. } => drop_path(PathDrop::NotForUs),
        FrameKind::IcmpEchoRequest { .. } => echo_reply(buf, ctx, f),
        FrameKind::Arp { op, sender_mac, sender_ip, target_ip, .. } => {
            // Replies, and gratuitous announcements (a request for the sender's own address,
            // sent when a host moves or changes its MAC): the resolver checks them.
            if op == arp::op::REPLY || sender_ip == target_ip {
                ctx.heard(sender_ip, sender_mac);
            }
            if op != arp::op::REQUEST || !ctx.is_local(&target_ip) {
                // Replies, and announcements (a request for the sender's own address: a host
                // that comes up or changes its MAC), which the kernel's neighbour cache needs.
                return if op == arp::op::REPLY || sender_ip == target_ip {
                    // The kernel asks too (its own neighbours): it gets every reply.
                    if ctx.kernel {
                        return Outcome::ToKernel;
                    }
                    ctx.counters.neighbour_answers_heard.inc();
                    Outcome::Consumed
                } else {
                    drop_path(PathDrop::NotForUs)
                };
            }
            match build::arp_reply(buf.data_mut(), f, ctx.node.mac) {
                Ok(len) if buf.truncate(len) => {
                    ctx.counters.neighbour_replies.inc();
                    Outcome::Transmit
                }
                _ => drop_path(PathDrop::NoHeadroom),
            }
        }
        FrameKind::NeighborSolicitation { target, .. } => {
            if !ctx.is_local(&target) {
                return if ctx.for_kernel(&target) {
                    Outcome::ToKernel
                } else {
                    drop_path(PathDrop::NotForUs)
                };
            }
            // The advertisement can be longer than the solicitation (options).
            let want = usize::from(f.l3_offset) + ADVERTISEMENT_L3_LEN;
            if buf.data().len() < want && !buf.extend_to(want) {
                return drop_path(PathDrop::NoHeadroom);
            }
            match build::neighbor_advertisement(buf.data_mut(), f, ctx.node.mac) {
                Ok(len) if buf.truncate(len) => {
                    ctx.counters.neighbour_replies.inc();
                    Outcome::Transmit
                }
                _ => drop_path(PathDrop::NoHeadroom),
            }
        }
        FrameKind::NeighborAdvertisement { target, target_mac, .. } => {
            ctx.heard(target, target_mac.unwrap_or(f.src_mac));
            if ctx.kernel {
                return Outcome::ToKernel;
            }
            ctx.counters.neighbour_answers_heard.inc();
            Outcome::Consumed
        }
        FrameKind::Other { .. } => drop_path(PathDrop::NotForUs),
    }
}

fn echo_reply<B: PacketBuf>(buf: &mut B, ctx: &mut PathCtx<'_>, f: &Frame) -> Outcome {
    match build::icmp_echo_reply(buf.data_mut(), f) {
        Ok(len) if buf.truncate(len) => {
            ctx.counters.echo_replies.inc();
            Outcome::Transmit
        }
        _ => drop_path(PathDrop::NoHeadroom),
    }
}

/// A neighbour advertisement's IPv6 packet: the IPv6 header (40 bytes), the ICMPv6 message
/// (24) and its target link-layer address option (8).
const ADVERTISEMENT_L3_LEN: usize = 40 + 24 + 8;

/// Room beyond the ICMP error's IP size limit for the Ethernet header (and VLAN tags).
const ICMP_ERROR_FRAME_ROOM: usize = 64;

/// The common case of [`forward`], in fewer steps: a packet of a tracked flow whose entry is
/// where the hint says and still valid ([`judge`]), to a backend with prebuilt outer headers
/// (IPv4, or IP-in-IPv6), encapsulated. `None`, with nothing changed, for anything else:
/// [`forward`] then decides it in full.
///
/// `(svc, key, key_hash, hint)`: the packet's service, tracking key, its hash and the probed
/// slot; `info`: its flow fields; `(l3_offset, inner_len)`: where the IP packet is in the
/// frame, and its length.
#[inline(always)]
fn forward_tracked<B: PacketBuf, N: Noter>(
    buf: &mut B,
    ctx: &mut PathCtx<'_>,
    (svc, key, key_hash, hint): (&ServiceView, &FlowKey, u64, Hint),
    info: &PacketInfo,
    (l3_offset, inner_len): (usize, usize),
    notes: &mut N,
) -> Option<Outcome> {
    let (kind, gue_dport) = encap_kind(svc.encap)?;
    let hit = ctx.shard.hinted_hit(key, key_hash, hint, ctx.now)?;
    let backend = judge(&hit.value, hit.idle_ms, svc, ctx.snap, info, ctx.now).ok()?;
    // The outer headers prebuilt for the backend: IPv4, or IP-in-IPv6.
    let (outer, hdr) = Outer::prebuilt(ctx.next_hops.hop(backend)?, kind)?;
    if (inner_len + hdr - ethernet::HEADER_LEN) as u64 > u64::from(ctx.node.mtu) {
        return None;
    }
    // CT-8: every hit restarts the idle clock.
    hit.touch();
    // When it cannot, nothing has changed: the full decision would drop the packet alike.
    let Some(frame) = buf.reframe(l3_offset, inner_len, hdr) else {
        return Some(drop_path(PathDrop::NoHeadroom));
    };
    if outer.write(frame, kind, inner_len, key_hash, gue_dport).is_err() {
        return Some(drop_path(PathDrop::NoHeadroom));
    }
    let c = ctx.counters;
    c.reason(Reason::Forward(ForwardReason::ConntrackHit)).inc();
    if let Some(t) = c.services.get(usize::from(svc.id)) {
        t.packets.inc();
        t.bytes.add(inner_len as u64);
    }
    if let Some(t) = c.backends.get(usize::from(backend)) {
        t.packets.inc();
        t.bytes.add(inner_len as u64);
    }
    notes.decided(svc.id, Some((ForwardReason::ConntrackHit, backend)));
    Some(Outcome::Transmit)
}

/// The short way for a new connection's SYN ([`Staged::NewLane`]): the backend its client's
/// zone's choice hashes it to ([`decide::select_new_tracked`]), its entry
/// ([`decide::track_new`]), and the packet encapsulated with that backend's prebuilt outer
/// headers. `None`, with nothing changed, for anything else: no eligible backend, no prebuilt
/// outer headers, too big for the MTU once encapsulated; [`forward`] then decides it in full
/// (and drops or answers it the same way).
#[inline(always)]
fn forward_new<B: PacketBuf, N: Noter>(
    buf: &mut B,
    ctx: &mut PathCtx<'_>,
    lane: &Lane<'_>,
    notes: &mut N,
) -> Option<Outcome> {
    let svc = lane.svc;
    let (kind, gue_dport) = encap_kind(svc.encap)?;
    let (client_zone, slot) = decide::select_new_tracked(&lane.key, || lane.info(), svc, ctx.snap);
    let slot = slot?;
    let (outer, hdr) = Outer::prebuilt(ctx.next_hops.hop(slot)?, kind)?;
    let inner_len = usize::from(lane.l3_len);
    if (inner_len + hdr - ethernet::HEADER_LEN) as u64 > u64::from(ctx.node.mtu) {
        return None;
    }
    let now = ctx.now;
    let (tracked, released) =
        decide::track_new(ctx.shard, &lane.key, lane.key_hash, slot, svc, ctx.snap, now)?;
    let c = ctx.counters;
    count_tracked(c, tracked.then_some(slot), released);
    let Some(frame) = buf.reframe(ethernet::HEADER_LEN, inner_len, hdr) else {
        return Some(drop_path(PathDrop::NoHeadroom));
    };
    if outer.write(frame, kind, inner_len, lane.key_hash, gue_dport).is_err() {
        return Some(drop_path(PathDrop::NoHeadroom));
    }
    let reason = ForwardReason::NewConnection;
    count_forwarded(c, (svc.id, slot), reason, Some(client_zone), inner_len);
    notes.decided(svc.id, Some((reason, slot)));
    Some(Outcome::Transmit)
}

/// The per-backend gauges of tracked entries follow the table: `made`, the backend an entry
/// now points at that did not before; `released`, the backend of an entry replaced, overwritten
/// or evicted.
#[inline(always)]
fn count_tracked(c: &WorkerCounters, made: Option<u16>, released: Option<u16>) {
    if let Some(t) = made.and_then(|b| c.backends.get(usize::from(b))) {
        t.tracked.inc();
    }
    if let Some(t) = released.and_then(|r| c.backends.get(usize::from(r))) {
        t.tracked.sub(1);
    }
}

/// Count a packet of `inner_len` bytes (the IP packet) sent to backend `slot` of `service`
/// for `reason`; `new`: `Some(client zone)` for a new connection, counted also in its client
/// zone's and its service's and backend's new-connection counters.
#[inline(always)]
fn count_forwarded(
    c: &WorkerCounters,
    (service, slot): (u16, u16),
    reason: ForwardReason,
    new: Option<Option<ZoneId>>,
    inner_len: usize,
) {
    c.reason(Reason::Forward(reason)).inc();
    if let Some(client_zone) = new {
        c.zone_new(service, client_zone).inc();
    }
    let new = new.is_some();
    let count = |t: &TrafficCounters| {
        t.packets.inc();
        t.bytes.add(inner_len as u64);
        if new {
            t.new_connections.inc();
        }
    };
    // One after the other: a chained iterator over both costs a new connection more
    // instructions.
    if let Some(t) = c.services.get(usize::from(service)) {
        count(t);
    }
    if let Some(t) = c.backends.get(usize::from(slot)) {
        count(t);
    }
}

/// The UDP datagram a QUIC-LB decision reads its connection ID from, only for a service with
/// QUIC-LB: a UDP packet's own (QL-3), or for an ICMP error the quoted UDP packet's, as far as
/// the quote goes (QL-5). Empty otherwise, or when the frame is shorter than its headers say.
#[inline(always)]
fn quic_payload<'b>(
    frame: &'b [u8],
    info: &PacketInfo,
    ip: &IpMeta,
    prep: &Prepared<'_>,
    icmp_error: bool,
) -> &'b [u8] {
    let quic = prep.service.is_some_and(|s| s.quic.is_some());
    if !quic || info.proto != flow::proto::UDP || info.fragment {
        return &[];
    }
    if icmp_error {
        return wire::quoted_udp_payload(frame, ip); // QL-5
    }
    frame.get(ip.l4() + wire::udp::HEADER_LEN..ip.l3_range().end).unwrap_or(&[])
}

/// Decide and send on to the backend.
#[inline(always)]
fn forward<B: PacketBuf, N: Noter>(
    buf: &mut B,
    ctx: &mut PathCtx<'_>,
    info: &PacketInfo,
    ip: &IpMeta,
    prep: &Prepared<'_>,
    icmp_error: bool,
    notes: &mut N,
) -> Outcome {
    let d = decide_with_payload(
        info,
        prep,
        ctx.snap,
        ctx.shard,
        ctx.now,
        quic_payload(buf.data(), info, ip, prep, icmp_error),
    );
    if let Some(svc) = prep.service {
        notes.decided(svc.id, None);
    }
    // Per-backend tracked-entry gauges follow the table, whatever happens to this packet.
    let c = ctx.counters;
    if let Some(f) = d.quic_fallback {
        c.quic_fallback[f.index()].inc();
    }
    count_tracked(c, d.backend().filter(|_| d.tracked), d.released);
    let (slot, reason) = match d.verdict {
        Verdict::Forward { backend, reason } => (backend, reason),
        Verdict::Drop(_) if icmp_error => return drop_path(PathDrop::IcmpUnroutable),
        Verdict::Drop(r) => return Outcome::Drop(Reason::Decision(r)),
    };
    // `prep.service` is the decision's service (`d.service`), already looked up.
    let (Some(backend), Some(svc)) = (ctx.snap.backend(slot), prep.service) else {
        return drop_path(PathDrop::IcmpUnroutable);
    };
    let dst = backend.endpoint.addr;
    let inner_len = ip.l3_len as usize;
    let hop = ctx.next_hops.hop(slot);
    // Without a MAC the frame is built all the same and waits for it (`Outcome::Wait`).
    let (mac, waits) = match hop.map(|h| h.mac).or_else(|| resolve(ctx, &dst)) {
        Some(mac) => (mac, false),
        None => (UNRESOLVED_MAC, true),
    };
    let sent = match svc.encap {
        Encap::L2 => {
            if build::set_macs(buf.data_mut(), mac, ctx.node.mac).is_err()
                || !buf.truncate(ip.frame_len())
            {
                return drop_path(PathDrop::NoHeadroom);
            }
            Outcome::Transmit
        }
        Encap::Ipip | Encap::Gue { .. } => {
            let (kind, gue_dport) = encap_kind(svc.encap).unwrap_or((EncapKind::Ipip, 0));
            // The outer headers prebuilt for this backend (IPv4, or IP-in-IPv6), else what to
            // build them from: the node's address of the backend's family.
            let (outer, hdr) = match hop.and_then(|h| Outer::prebuilt(h, kind)) {
                Some(prebuilt) => prebuilt,
                None => match ctx.node.source_for(&dst) {
                    Some(outer_src) => (
                        Outer::Build(EncapParams {
                            kind,
                            dst_mac: mac,
                            src_mac: ctx.node.mac,
                            outer_src,
                            outer_dst: dst,
                            flow_hash: d.flow_hash,
                            gue_dport,
                        }),
                        build::encap_len(kind, !dst.is_v4()),
                    ),
                    None => return drop_path(PathDrop::NeighbourUnresolved),
                },
            };
            let overhead = hdr - ethernet::HEADER_LEN;
            if (inner_len + overhead) as u64 > u64::from(ctx.node.mtu) {
                // DF set (always, for IPv6): tell the client the MTU that fits. DF clear (IPv4
                // fragments included): the outer packet carries DF and is never fragmented,
                // so it cannot be sent; the fabric towards the backends needs an MTU that
                // leaves room for the encapsulation (docs/configuration.md, `node.mtu`).
                return if ip.df && !icmp_error {
                    too_big(buf, ctx, ip, overhead)
                } else {
                    drop_path(PathDrop::TooBig)
                };
            }
            let Some(frame) = buf.reframe(usize::from(ip.l3_offset), inner_len, hdr) else {
                return drop_path(PathDrop::NoHeadroom);
            };
            if outer.write(frame, kind, inner_len, d.flow_hash, gue_dport).is_err() {
                return drop_path(PathDrop::NoHeadroom);
            }
            Outcome::Transmit
        }
    };
    if icmp_error {
        c.icmp_errors_forwarded.inc();
    }
    // An ICMP error is routed to its flow's backend: never a new connection of its own.
    let new = reason.is_new() && !icmp_error;
    count_forwarded(c, (d.service, slot), reason, new.then_some(d.client_zone), inner_len);
    notes.decided(d.service, Some((reason, slot)));
    if waits && sent == Outcome::Transmit {
        ctx.waiting.push(slot);
        return Outcome::Wait;
    }
    sent
}

/// The destination MAC of a frame built before its next hop is resolved; the worker writes
/// the real one before it sends the frame.
const UNRESOLVED_MAC: MacAddr = [0; 6];

/// The encapsulation of a service and its GUE destination port (0 for IPIP); `None` for L2.
#[inline(always)]
fn encap_kind(encap: Encap) -> Option<(EncapKind, u16)> {
    match encap {
        Encap::Ipip => Some((EncapKind::Ipip, 0)),
        Encap::Gue { port } => Some((EncapKind::Gue, port)),
        Encap::L2 => None,
    }
}

/// The outer headers of an encapsulation: prebuilt for the backend, or built per packet.
enum Outer<'h> {
    Prebuilt(&'h OuterV4),
    PrebuiltV6(&'h OuterV6),
    Build(EncapParams),
}

impl<'h> Outer<'h> {
    /// The outer headers prebuilt for a backend's next hop (IPv4, or IP-in-IPv6) and their
    /// length with the Ethernet header, if any.
    #[inline(always)]
    fn prebuilt(hop: &'h NextHop, kind: EncapKind) -> Option<(Outer<'h>, usize)> {
        match &hop.outer_v4 {
            Some(o) => Some((Outer::Prebuilt(o), build::encap_len(kind, false))),
            None => {
                Some((Outer::PrebuiltV6(hop.outer_v6_for(kind)?), build::encap_len(kind, true)))
            }
        }
    }

    /// Write the headers in front of the `inner_len` bytes of the IP packet in `frame`, which
    /// is exactly the headers' room and that packet ([`PacketBuf::reframe`] makes it so).
    #[inline(always)]
    fn write(
        &self,
        frame: &mut [u8],
        kind: EncapKind,
        inner_len: usize,
        flow_hash: u64,
        gue_dport: u16,
    ) -> Result<usize, build::BuildError> {
        match self {
            Outer::Prebuilt(o) if kind == EncapKind::Ipip => {
                debug_assert_eq!(frame.len(), build::encap_len(kind, false) + inner_len);
                o.write_ipip(frame)
            }
            Outer::Prebuilt(o) => o.write(frame, kind, inner_len, flow_hash, gue_dport),
            Outer::PrebuiltV6(o) => o.write(frame, inner_len, flow_hash),
            Outer::Build(params) => build::write_encap(frame, params, inner_len),
        }
    }
}

/// The slow way to a backend's next-hop MAC, when the per-slot cache has none: look it up,
/// and ask the resolver when it is missing.
#[cold]
fn resolve(ctx: &PathCtx<'_>, dst: &Addr) -> Option<MacAddr> {
    let next_hop = ctx.node.next_hop(dst)?;
    let mac = ctx.neighbours.get(&next_hop);
    if mac.is_none() {
        let _ = ctx.events.push(NeighbourEvent::Wanted(next_hop));
    }
    mac
}

/// Answer a DF packet that would not fit the egress MTU once encapsulated.
fn too_big<B: PacketBuf>(
    buf: &mut B,
    ctx: &mut PathCtx<'_>,
    ip: &IpMeta,
    overhead: usize,
) -> Outcome {
    let mtu = ctx.node.mtu.saturating_sub(u32::try_from(overhead).unwrap_or(u32::MAX));
    let l3 = ip.l3_range();
    let family = if ip.is_v4 { ctx.node.ipv4 } else { ctx.node.ipv6 };
    let Some((src, _)) = family else {
        return drop_path(PathDrop::TooBig);
    };
    // The frame is as received: its sender's MAC is the reply's destination.
    let src_mac: MacAddr = match buf.data().get(6..12).and_then(|m| m.try_into().ok()) {
        Some(mac) => mac,
        None => return drop_path(PathDrop::TooBig),
    };
    // Quote the offending packet from a copy: the reply is built in the same buffer.
    let mut quote = [0u8; build::ICMP_ERROR_MAX_V6];
    let n = (l3.end - l3.start).min(quote.len());
    quote[..n].copy_from_slice(&buf.data()[l3.start..l3.start + n]);
    let cap = if ip.is_v4 { build::ICMP_ERROR_MAX_V4 } else { build::ICMP_ERROR_MAX_V6 }
        + ICMP_ERROR_FRAME_ROOM;
    if !buf.reset(cap) {
        return drop_path(PathDrop::TooBig);
    }
    let built = if ip.is_v4 {
        let mtu = u16::try_from(mtu).unwrap_or(u16::MAX);
        build::icmp_frag_needed(buf.data_mut(), src_mac, ctx.node.mac, src, &quote[..n], mtu)
    } else {
        build::icmpv6_packet_too_big(buf.data_mut(), src_mac, ctx.node.mac, src, &quote[..n], mtu)
    };
    ctx.counters.reason(Reason::Path(PathDrop::TooBig)).inc();
    match built {
        Ok(len) if buf.truncate(len) => Outcome::Transmit,
        // Counted above as too_big; nothing to send back (e.g. a multicast source).
        _ => Outcome::Consumed,
    }
}

/// Where [`process_burst`]'s time goes: TSC cycles in its first pass (classify, rule, key
/// hash, the table's first stages), in the table's stages after it, and in its last pass
/// (decide and rewrite), summed per thread. Only with the `phase-clock` feature, for the
/// benchmarks (docs/performance.md, "The pipeline"); without it,
/// `phase_clock::tick` is a constant and nothing is recorded.
pub mod phase_clock {
    /// Sums of cycles per pass, and the packets they were spent on.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Phases {
        /// Cycles in the first pass.
        pub first: u64,
        /// Cycles prefetching the records of the burst's last packets.
        pub tail: u64,
        /// Cycles in the last pass.
        pub last: u64,
        /// Packets.
        pub packets: u64,
    }

    impl std::fmt::Display for Phases {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            let n = self.packets.max(1) as f64;
            write!(
                f,
                "cycles per packet: first pass {:.1}, tail {:.1}, last pass {:.1} ({} packets)",
                self.first as f64 / n,
                self.tail as f64 / n,
                self.last as f64 / n,
                self.packets
            )
        }
    }

    #[cfg(feature = "phase-clock")]
    thread_local! {
        static SUMS: std::cell::Cell<Phases> = const {
            std::cell::Cell::new(Phases { first: 0, tail: 0, last: 0, packets: 0 })
        };
    }

    /// The TSC with the feature, 0 without.
    #[inline(always)]
    pub(crate) fn tick() -> u64 {
        #[cfg(feature = "phase-clock")]
        return crate::dpdk::tsc();
        #[cfg(not(feature = "phase-clock"))]
        0
    }

    #[inline(always)]
    pub(crate) fn add([t0, t1, t2, t3]: [u64; 4], packets: usize) {
        #[cfg(feature = "phase-clock")]
        SUMS.with(|s| {
            let mut p = s.get();
            p.first += t1.wrapping_sub(t0);
            p.tail += t2.wrapping_sub(t1);
            p.last += t3.wrapping_sub(t2);
            p.packets += packets as u64;
            s.set(p);
        });
        #[cfg(not(feature = "phase-clock"))]
        let _ = (t0, t1, t2, t3, packets);
    }

    /// This thread's sums since the last call (all zero without the feature), and restart.
    pub fn take() -> Phases {
        #[cfg(feature = "phase-clock")]
        return SUMS.with(|s| s.replace(Phases::default()));
        #[cfg(not(feature = "phase-clock"))]
        Phases::default()
    }
}
