//! The frame factory: which flow or new connection comes next, of which kind, whether it is
//! fragmented, and what has been made so far.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use spillway_core::rng::SplitMix64;
use spillway_core::wire::{checksum, ip_proto, ipv4, tcp, udp, Ipv4Packet};

use crate::sources::SourcePool;
use crate::spec::{
    share, Order, SpecError, TrafficSpec, MAX_FLOWS, MAX_FRAME_LEN, MAX_UDP_PAYLOAD, MIN_FRAME_LEN,
};
use crate::template::{write_any, write_one, Template, ETH_LEN, HEAD};

/// What a [`FrameFactory`] has produced so far.
///
/// `frames` counts every frame written (a fragmented packet is two frames); the per-kind
/// counters count packets (IP datagrams; a fragmented one once), so
/// `packets == ipv4 + ipv6 == tcp + udp` and `frames == packets + fragments / 2`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GenCounts {
    /// Frames written.
    pub frames: u64,
    /// Bytes of those frames (Ethernet header to the end of the padding, no FCS).
    pub bytes: u64,
    /// IP packets (datagrams).
    pub packets: u64,
    /// IPv4 packets.
    pub ipv4: u64,
    /// IPv6 packets.
    pub ipv6: u64,
    /// TCP packets.
    pub tcp: u64,
    /// UDP packets.
    pub udp: u64,
    /// New connections: TCP SYNs and first UDP packets from fresh sources.
    pub syn: u64,
    /// Fragment frames (two per fragmented packet).
    pub fragments: u64,
}

/// A fragmented IPv4 packet whose second fragment is due.
#[derive(Debug, Clone, Copy)]
struct Pending {
    /// Length of the whole (unfragmented) frame in the scratch buffer.
    full_len: usize,
    /// L4 bytes in the first fragment (a multiple of 8).
    first: usize,
    /// IPv4 identification of both fragments.
    id: u16,
}

/// Writes the frames of a [`TrafficSpec`]; see the [crate doc](crate).
#[derive(Debug, Clone)]
pub struct FrameFactory {
    spec: TrafficSpec,
    /// Indexed by `v6 << 2 | udp << 1 | syn`.
    templates: [Template; 8],
    /// Source addresses: `[IPv4, IPv6]`.
    pools: [SourcePool; 2],
    rng: SplitMix64,
    /// Thresholds out of 65536 for 16-bit random draws.
    v6_thr: u32,
    udp_thr: u32,
    syn_thr: u32,
    frag_thr: u32,
    /// More than one family or protocol: frames are written by the branch-free [`write_any`].
    mixed: bool,
    next_flow: u32,
    next_frag_id: u16,
    pending: Option<Pending>,
    scratch: Vec<u8>,
    max_len: usize,
    counts: GenCounts,
}

/// 2^64 * frac(golden ratio) and 2^64 * frac(sqrt 2): two independent equidistributed
/// sequences, for each flow's family and protocol.
const WEYL_FAMILY: u64 = 0x9e37_79b9_7f4a_7c15;
const WEYL_PROTO: u64 = 0x6a09_e667_f3bc_c908;

/// Turns the IPv4 header `ip` of the whole packet (checksum included) into a fragment's: the
/// length for `data_len` bytes of fragment data, the identification, MF and the offset (8-byte
/// units). The checksum is updated for the three changed words (RFC 1624), not recomputed.
fn set_fragment(ip: &mut [u8], data_len: usize, id: u16, more: bool, offset: u16) {
    let mut ip = Ipv4Packet::new_unchecked(ip);
    let old = [ip.total_len(), ip.ident(), ip.flags_and_offset()];
    ip.set_total_len((ipv4::HEADER_LEN + data_len) as u16);
    ip.set_ident(id);
    ip.set_frag(false, more, offset);
    let new = [ip.total_len(), ip.ident(), ip.flags_and_offset()];
    let c = old.iter().zip(&new).fold(ip.checksum(), |c, (&o, &n)| checksum::update16(c, o, n));
    ip.set_checksum(c);
}

impl FrameFactory {
    /// Checks `spec` and prebuilds every template.
    pub fn new(spec: &TrafficSpec) -> Result<Self, SpecError> {
        if spec.flows == 0 || spec.flows > MAX_FLOWS {
            return Err(SpecError::Flows(spec.flows));
        }
        let v6_thr = share("ipv6_share", spec.ipv6_share)?;
        let udp_thr = share("udp_share", spec.udp_share)?;
        let syn_thr = share("syn_share", spec.syn_share)?;
        let frag_thr = share("fragment_share", spec.fragment_share)?;
        if spec.frame_len > MAX_FRAME_LEN {
            return Err(SpecError::FrameLen(spec.frame_len));
        }
        if spec.dst_port == 0 {
            return Err(SpecError::DstPort);
        }
        if spec.udp_payload.len() > MAX_UDP_PAYLOAD {
            return Err(SpecError::UdpPayload(spec.udp_payload.len()));
        }
        let v4 = SourcePool::new(
            "src_v4",
            u128::from(u32::from(spec.src_v4.0)),
            spec.src_v4.1,
            32,
            spec,
            spec.ipv6_share < 1.0,
        )?;
        let v6 = SourcePool::new(
            "src_v6",
            u128::from(spec.src_v6.0),
            spec.src_v6.1,
            128,
            spec,
            spec.ipv6_share > 0.0,
        )?;
        let templates: [Template; 8] = std::array::from_fn(|k| {
            Template::new(spec, &v4, &v6, k & 4 != 0, k & 2 != 0, k & 1 != 0)
        });
        let max_len = templates.iter().map(|t| t.len).max().unwrap_or(0);
        debug_assert!(max_len >= HEAD);
        Ok(FrameFactory {
            spec: spec.clone(),
            templates,
            pools: [v4, v6],
            rng: SplitMix64::new(spec.seed),
            v6_thr,
            udp_thr,
            syn_thr,
            frag_thr,
            mixed: !(v6_thr == 0 || v6_thr == 65536) || !(udp_thr == 0 || udp_thr == 65536),
            next_flow: 0,
            next_frag_id: 1,
            pending: None,
            scratch: vec![0; max_len],
            max_len,
            counts: GenCounts::default(),
        })
    }

    /// The spec this factory was made from.
    pub fn spec(&self) -> &TrafficSpec {
        &self.spec
    }

    /// The longest frame [`next_frame`](Self::next_frame) can write.
    pub fn max_frame_len(&self) -> usize {
        self.max_len
    }

    /// What has been generated so far.
    pub fn counts(&self) -> &GenCounts {
        &self.counts
    }

    /// The source address and port of established flow `i`.
    ///
    /// # Panics
    /// If `i >= flows`.
    pub fn flow_tuple(&self, i: u32) -> (IpAddr, u16) {
        assert!(i < self.spec.flows, "flow {i} of {} flows", self.spec.flows);
        let (v6, _) = self.flow_kind(i);
        let pool = &self.pools[usize::from(v6)];
        let (host, port) = pool.flow(i);
        let addr = pool.first + u128::from(host);
        let ip = if v6 {
            IpAddr::V6(Ipv6Addr::from(addr))
        } else {
            IpAddr::V4(Ipv4Addr::from(addr as u32))
        };
        (ip, port)
    }

    /// The IP protocol of established flow `i` (6 TCP, 17 UDP).
    ///
    /// # Panics
    /// If `i >= flows`.
    pub fn flow_protocol(&self, i: u32) -> u8 {
        assert!(i < self.spec.flows, "flow {i} of {} flows", self.spec.flows);
        if self.flow_kind(i).1 {
            ip_proto::UDP
        } else {
            ip_proto::TCP
        }
    }

    /// (IPv6, UDP) of established flow `i`: fixed per flow, equidistributed over the flows.
    #[inline]
    fn flow_kind(&self, i: u32) -> (bool, bool) {
        let n = u64::from(i) + 1;
        let v6 = ((n.wrapping_mul(WEYL_FAMILY) >> 48) as u32) < self.v6_thr;
        let udp = ((n.wrapping_mul(WEYL_PROTO) >> 48) as u32) < self.udp_thr;
        (v6, udp)
    }

    /// Writes the next frame into `buf` and returns its length. When a packet is sent as
    /// two fragments, the next call returns the second one (with the stamp of the first:
    /// the stamp is part of the packet's checksum).
    ///
    /// # Panics
    /// If `buf` is shorter than [`max_frame_len`](Self::max_frame_len).
    #[inline]
    pub fn next_frame(&mut self, buf: &mut [u8], stamp: u64) -> usize {
        if let Some(p) = self.pending {
            self.pending = None;
            return self.second_fragment(buf, p);
        }
        let r = self.rng.next_u64();
        let (k, host, sport) = if ((r & 0xffff) as u32) < self.syn_thr {
            self.new_source()
        } else {
            let i = match self.spec.order {
                Order::Random => (((r >> 32) * u64::from(self.spec.flows)) >> 32) as u32,
                Order::Sequential => {
                    let i = self.next_flow;
                    self.next_flow = if i + 1 == self.spec.flows { 0 } else { i + 1 };
                    i
                }
            };
            // One family and protocol: every flow has them (what flow_kind would say).
            let (v6, udp) =
                if self.mixed { self.flow_kind(i) } else { (self.v6_thr != 0, self.udp_thr != 0) };
            let (host, port) = self.pools[usize::from(v6)].flow(i);
            (usize::from(v6) << 2 | usize::from(udp) << 1, host, port)
        };
        let frag = k & 4 == 0 && (((r >> 16) & 0xffff) as u32) < self.frag_thr;
        let t = &self.templates[k & 7];
        let c = &mut self.counts;
        c.packets += 1;
        c.ipv6 += u64::from(t.v6);
        c.ipv4 += u64::from(!t.v6);
        c.udp += u64::from(t.udp);
        c.tcp += u64::from(!t.udp);
        c.syn += u64::from(t.syn);
        if frag {
            return self.first_fragment(buf, k, host, sport, stamp);
        }
        let len = if self.mixed {
            write_any(t, self.spec.stamp, buf, host, sport, stamp)
        } else {
            write_one(t, self.spec.stamp, buf, host, sport, stamp)
        };
        self.counts.frames += 1;
        self.counts.bytes += len as u64;
        len
    }

    /// A new connection's kind and source: a random family and protocol (with the spec's
    /// shares), a random host, and a random port above every port established flows use.
    #[inline]
    fn new_source(&mut self) -> (usize, u64, u16) {
        let a = self.rng.next_u64();
        let b = self.rng.next_u64();
        let v6 = ((a & 0xffff) as u32) < self.v6_thr;
        let udp = (((a >> 16) & 0xffff) as u32) < self.udp_thr;
        let pool = &self.pools[usize::from(v6)];
        let port = pool.syn_port_base + (((a >> 32) * u64::from(pool.syn_ports)) >> 32) as u32;
        let host = ((u128::from(b) * u128::from(pool.hosts)) >> 64) as u64;
        (usize::from(v6) << 2 | usize::from(udp) << 1 | 1, host, port as u16)
    }

    fn first_fragment(
        &mut self,
        buf: &mut [u8],
        k: usize,
        host: u64,
        sport: u16,
        stamp: u64,
    ) -> usize {
        let t = &self.templates[k & 7];
        let full_len = write_any(t, self.spec.stamp, &mut self.scratch, host, sport, stamp);
        let l4_total = full_len - t.l4;
        let hdr = if t.udp { udp::HEADER_LEN } else { tcp::HEADER_LEN };
        // The first fragment carries the whole transport header (RFC 1858: never a tiny
        // first fragment) and about half the segment, in 8-byte units.
        let first = hdr.next_multiple_of(8).max((l4_total / 2) & !7);
        debug_assert!(first < l4_total);
        let id = self.next_frag_id;
        self.next_frag_id = self.next_frag_id.wrapping_add(1).max(1);
        let end = t.l4 + first;
        buf[..end].copy_from_slice(&self.scratch[..end]);
        set_fragment(&mut buf[ETH_LEN..t.l4], first, id, true, 0);
        self.pending = Some(Pending { full_len, first, id });
        self.fragment_done(buf, end)
    }

    fn second_fragment(&mut self, buf: &mut [u8], p: Pending) -> usize {
        let l4 = ETH_LEN + ipv4::HEADER_LEN;
        let rest = p.full_len - l4 - p.first;
        buf[..l4].copy_from_slice(&self.scratch[..l4]);
        buf[l4..l4 + rest].copy_from_slice(&self.scratch[l4 + p.first..p.full_len]);
        set_fragment(&mut buf[ETH_LEN..l4], rest, p.id, false, (p.first / 8) as u16);
        self.fragment_done(buf, l4 + rest)
    }

    /// Pads a fragment frame to the Ethernet minimum and counts it.
    fn fragment_done(&mut self, buf: &mut [u8], end: usize) -> usize {
        let len = end.max(usize::from(MIN_FRAME_LEN));
        buf[end..len].fill(0);
        self.counts.frames += 1;
        self.counts.fragments += 1;
        self.counts.bytes += len as u64;
        len
    }
}
