//! Owned mbufs and fixed-size bursts of them.
//!
//! This module owns the `rte_mbuf` layout: an [`Mbuf`] is the unique owner of one packet
//! buffer and frees it on drop; an [`MbufBurst`] holds up to [`MAX_BURST`] of them in an
//! on-stack array, so the per-packet path never allocates. Data access is written in Rust
//! (`buf_addr + data_off`, docs/dpdk-notes.md N12), not through FFI calls.
//!
//! Spillway never clones or shares mbufs, but a driver may hand out a buffer that is shared
//! (reference count above one) or external/indirect. Writing into such a buffer would change
//! another owner's packet, so every writing accessor checks [`Mbuf::is_writable`] and refuses
//! ([`WriteError::Shared`]); the packet path drops and counts such packets. Nothing here
//! panics on what a driver hands over.
//!
//! The invariant of [`MbufBurst`] (its first `len` pointers are valid mbufs it owns) is kept
//! inside this file: its fields are private, and the other modules fill or empty it only
//! through `unsafe` methods whose contracts state what they must guarantee.

use std::fmt;
use std::marker::PhantomData;
use std::mem::offset_of;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

use dpdk_sys::rte_mbuf;

// The descriptor's second line, which `prefetch_second_line` names, holds `next`.
const _: () = assert!(offset_of!(rte_mbuf, cacheline1) == 64);
const _: () = assert!(offset_of!(rte_mbuf, next) == offset_of!(rte_mbuf, cacheline1));

/// Most packets in one burst (the size of the on-stack array).
pub const MAX_BURST: usize = 64;

/// Why a change to an mbuf's data was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteError {
    /// Not enough headroom, tailroom or data for the change.
    NoRoom,
    /// The buffer is not exclusively this mbuf's (shared, indirect or external): writing
    /// would change another owner's packet.
    Shared,
}

/// One packet buffer, exclusively owned; freed back to its pool on drop.
///
/// Data accessors cover the first segment (the whole packet for everything Spillway
/// receives: RX scatter is not enabled).
#[repr(transparent)]
pub struct Mbuf<'p> {
    raw: NonNull<rte_mbuf>,
    _pool: PhantomData<&'p ()>,
}

// SAFETY: an Mbuf is the only handle to its buffer, and DPDK allows freeing an mbuf from any
// thread (the pool is thread-safe), so moving it to another thread is sound.
unsafe impl Send for Mbuf<'_> {}

impl<'p> Mbuf<'p> {
    /// Takes ownership of a raw mbuf.
    ///
    /// # Safety
    /// `raw` must be a valid, non-null mbuf that nobody else owns or references, from a pool
    /// that lives at least for `'p`.
    pub(crate) unsafe fn from_raw(raw: *mut rte_mbuf) -> Self {
        Mbuf {
            // SAFETY: the caller guarantees raw is non-null.
            raw: unsafe { NonNull::new_unchecked(raw) },
            _pool: PhantomData,
        }
    }

    /// Gives up ownership without freeing.
    pub(crate) fn into_raw(self) -> *mut rte_mbuf {
        let raw = self.raw.as_ptr();
        std::mem::forget(self);
        raw
    }

    #[inline]
    fn m(&self) -> &rte_mbuf {
        // SAFETY: raw is a valid mbuf we own for as long as self lives.
        unsafe { self.raw.as_ref() }
    }

    #[inline]
    fn m_mut(&mut self) -> &mut rte_mbuf {
        // SAFETY: as in m(); &mut self makes the access exclusive.
        unsafe { self.raw.as_mut() }
    }

    /// Length of the first segment's data.
    #[inline]
    pub fn data_len(&self) -> usize {
        usize::from(self.m().data_len)
    }

    /// Length of the whole packet (all segments).
    #[inline]
    pub fn pkt_len(&self) -> usize {
        self.m().pkt_len as usize
    }

    /// Number of segments in the chain.
    #[inline]
    pub fn segments(&self) -> u16 {
        self.m().nb_segs
    }

    /// The port the packet was received on.
    #[inline]
    pub fn port(&self) -> u16 {
        self.m().port
    }

    /// Free bytes in front of the data.
    #[inline]
    pub fn headroom(&self) -> usize {
        usize::from(self.m().data_off)
    }

    /// Free bytes after the first segment's data.
    #[inline]
    pub fn tailroom(&self) -> usize {
        let m = self.m();
        usize::from(m.buf_len) - usize::from(m.data_off) - usize::from(m.data_len)
    }

    /// Starts loading the mbuf's second line (`next`, which freeing the mbuf reads, in the
    /// driver's transmit or `rte_pktmbuf_free`): a hint.
    #[inline(always)]
    pub fn prefetch_second_line(&self) {
        super::prefetch(
            self.raw.as_ptr().cast::<u8>().wrapping_add(offset_of!(rte_mbuf, cacheline1)),
        );
    }

    /// Starts taking the mbuf's first line (buffer address, data offset, lengths) for writing
    /// (`prefetchw`): a hint, for a path that will write it (a new data offset, new lengths)
    /// when another core may hold it.
    #[inline(always)]
    pub fn prefetch_descriptor_for_write(&self) {
        super::prefetch_write(self.raw.as_ptr().cast::<u8>());
    }

    /// Starts taking, for writing, the first line of the data a [`Mbuf::reset`] makes (at the
    /// default headroom): a hint. It reads the descriptor's buffer address (best after
    /// [`Mbuf::prefetch_descriptor_for_write`] has brought it).
    #[inline(always)]
    pub fn prefetch_fresh_data_for_write(&self) {
        let m = self.m();
        let headroom = (dpdk_sys::RTE_PKTMBUF_HEADROOM as usize).min(usize::from(m.buf_len));
        super::prefetch_write(m.buf_addr.cast::<u8>().wrapping_add(headroom));
    }

    /// Starts loading the first line of the packet data: a hint (it reads the descriptor).
    #[inline(always)]
    pub fn prefetch_data(&self) {
        let m = self.m();
        super::prefetch(m.buf_addr.cast::<u8>().wrapping_add(usize::from(m.data_off)));
    }

    /// The first segment's data (`rte_pktmbuf_mtod` .. `+ data_len`).
    #[inline]
    pub fn data(&self) -> &[u8] {
        let m = self.m();
        // SAFETY: DPDK guarantees buf_addr + data_off .. + data_len lies inside the mbuf's
        // buffer; the slice borrows self, which owns the buffer.
        unsafe {
            std::slice::from_raw_parts(
                m.buf_addr.cast::<u8>().add(usize::from(m.data_off)),
                usize::from(m.data_len),
            )
        }
    }

    /// Whether the data may be written: the buffer has a reference count of one and is
    /// neither indirect nor external. Both fields are in the descriptor's first cache line.
    #[inline]
    pub fn is_writable(&self) -> bool {
        let shared = dpdk_sys::RTE_MBUF_F_INDIRECT | dpdk_sys::RTE_MBUF_F_EXTERNAL;
        // SAFETY: refcnt is a properly aligned u16 inside our live mbuf; other owners (if any)
        // update it atomically, so it is read atomically too.
        let refcnt = unsafe { AtomicU16::from_ptr(&raw mut (*self.raw.as_ptr()).refcnt) }
            .load(Ordering::Relaxed);
        refcnt == 1 && self.m().ol_flags & shared == 0
    }

    /// The first segment's data, writable; refused when the buffer is shared.
    #[inline]
    pub fn data_mut(&mut self) -> Result<&mut [u8], WriteError> {
        if !self.is_writable() {
            return Err(WriteError::Shared);
        }
        let m = self.m();
        let (addr, off, len) = (m.buf_addr.cast::<u8>(), m.data_off, m.data_len);
        // SAFETY: as in data(); the buffer is not shared (checked above) and &mut self makes
        // the borrow exclusive.
        Ok(unsafe { std::slice::from_raw_parts_mut(addr.add(usize::from(off)), usize::from(len)) })
    }

    /// Grows the data by `len` bytes at the front (`rte_pktmbuf_prepend`) and returns the new
    /// bytes, for writing a header.
    #[inline]
    pub fn prepend(&mut self, len: u16) -> Result<&mut [u8], WriteError> {
        if !self.is_writable() {
            return Err(WriteError::Shared);
        }
        let m = self.m_mut();
        if len > m.data_off {
            return Err(WriteError::NoRoom);
        }
        m.data_off -= len;
        m.data_len += len;
        m.pkt_len += u32::from(len);
        Ok(&mut self.data_mut()?[..usize::from(len)])
    }

    /// Drops `len` bytes from the front of the data (`rte_pktmbuf_adj`).
    #[inline]
    pub fn adj(&mut self, len: u16) -> Result<(), WriteError> {
        let m = self.m_mut();
        if len > m.data_len {
            return Err(WriteError::NoRoom);
        }
        m.data_off += len;
        m.data_len -= len;
        m.pkt_len -= u32::from(len);
        Ok(())
    }

    /// Drops `len` bytes from the end of a single-segment mbuf's data (`rte_pktmbuf_trim`).
    #[inline]
    pub fn trim(&mut self, len: u16) -> Result<(), WriteError> {
        let m = self.m_mut();
        if m.nb_segs != 1 || len > m.data_len {
            return Err(WriteError::NoRoom);
        }
        m.data_len -= len;
        m.pkt_len -= u32::from(len);
        Ok(())
    }

    /// Makes the data `hdr` new bytes followed by the `len` bytes that start `front` bytes
    /// into it, dropping the `front` bytes before them and whatever follows them, and returns
    /// it all for writing the new headers: `rte_pktmbuf_adj`, `rte_pktmbuf_trim` and
    /// `rte_pktmbuf_prepend` in one step (one writability check, one descriptor update), for
    /// a single-segment mbuf. Refused, with nothing changed, when the buffer is shared, has
    /// several segments, holds fewer than `front + len` bytes or has too little headroom.
    #[inline]
    pub fn reframe(&mut self, front: u16, len: u16, hdr: u16) -> Result<&mut [u8], WriteError> {
        if !self.is_writable() {
            return Err(WriteError::Shared);
        }
        let m = self.m_mut();
        let (front, len, hdr) = (u32::from(front), u32::from(len), u32::from(hdr));
        let start = u32::from(m.data_off) + front;
        if m.nb_segs != 1 || front + len > u32::from(m.data_len) || hdr > start {
            return Err(WriteError::NoRoom);
        }
        // Both fit in u16: off + new_len = data_off + front + len <= data_off + data_len.
        let (off, new_len) = ((start - hdr) as u16, (hdr + len) as u16);
        m.data_off = off;
        m.data_len = new_len;
        m.pkt_len = u32::from(new_len);
        let addr = m.buf_addr.cast::<u8>();
        // SAFETY: the new data lies inside the old first segment's data plus its headroom,
        // inside the mbuf's buffer (checked above); the buffer is not shared and &mut self
        // makes the borrow exclusive.
        Ok(unsafe {
            std::slice::from_raw_parts_mut(addr.add(usize::from(off)), usize::from(new_len))
        })
    }

    /// Makes the data `len` fresh bytes starting at the default headroom (for writing a new
    /// packet into a received single-segment mbuf) and returns them.
    #[inline]
    pub fn reset(&mut self, len: u16) -> Result<&mut [u8], WriteError> {
        if !self.is_writable() {
            return Err(WriteError::Shared);
        }
        let headroom = u16::try_from(dpdk_sys::RTE_PKTMBUF_HEADROOM).unwrap_or(128);
        let m = self.m_mut();
        let off = headroom.min(m.buf_len);
        if m.nb_segs != 1 || u32::from(off) + u32::from(len) > u32::from(m.buf_len) {
            return Err(WriteError::NoRoom);
        }
        m.data_off = off;
        m.data_len = len;
        m.pkt_len = u32::from(len);
        self.data_mut()
    }

    /// Grows the data by `len` bytes at the end (`rte_pktmbuf_append`, last segment) and
    /// returns the new bytes.
    pub fn append(&mut self, len: u16) -> Result<&mut [u8], WriteError> {
        if !self.is_writable() {
            return Err(WriteError::Shared);
        }
        // SAFETY: raw is a valid mbuf we own exclusively; DPDK checks the tailroom.
        let p = unsafe { dpdk_sys::rte_pktmbuf_append(self.raw.as_ptr(), len) };
        if p.is_null() {
            return Err(WriteError::NoRoom);
        }
        // SAFETY: on success p points at len fresh bytes inside the last segment's buffer,
        // owned by self and borrowed exclusively through &mut self.
        Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), usize::from(len)) })
    }
}

impl Drop for Mbuf<'_> {
    fn drop(&mut self) {
        // SAFETY: we own raw exclusively and never use it again.
        unsafe { dpdk_sys::rte_pktmbuf_free(self.raw.as_ptr()) }
    }
}

impl fmt::Debug for Mbuf<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mbuf")
            .field("port", &self.port())
            .field("pkt_len", &self.pkt_len())
            .field("data_len", &self.data_len())
            .field("segments", &self.segments())
            .finish()
    }
}

/// Up to [`MAX_BURST`] owned mbufs in an on-stack array. Dropping it frees what it still
/// holds (one bulk free).
pub struct MbufBurst<'p> {
    /// Invariant: the first `len` entries are valid mbufs owned by this burst; the rest are
    /// ignored. Private to this file; see the module doc.
    pkts: [*mut rte_mbuf; MAX_BURST],
    len: usize,
    _pool: PhantomData<&'p ()>,
}

// SAFETY: the burst owns its mbufs exclusively, like Mbuf, which is Send.
unsafe impl Send for MbufBurst<'_> {}

impl Default for MbufBurst<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'p> MbufBurst<'p> {
    /// An empty burst.
    #[inline]
    pub fn new() -> Self {
        MbufBurst { pkts: [std::ptr::null_mut(); MAX_BURST], len: 0, _pool: PhantomData }
    }

    /// Number of packets held.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no packet.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether it holds [`MAX_BURST`] packets.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.len == MAX_BURST
    }

    /// Adds a packet; gives it back if the burst is full.
    #[inline]
    pub fn push(&mut self, m: Mbuf<'p>) -> Result<(), Mbuf<'p>> {
        if self.is_full() {
            return Err(m);
        }
        self.pkts[self.len] = m.into_raw();
        self.len += 1;
        Ok(())
    }

    /// The packets, borrowed.
    #[inline]
    pub fn as_slice(&self) -> &[Mbuf<'p>] {
        // SAFETY: Mbuf is repr(transparent) over NonNull<rte_mbuf>, which has the layout of
        // *mut rte_mbuf; the first len entries are non-null mbufs owned by self.
        unsafe { std::slice::from_raw_parts(self.pkts.as_ptr().cast::<Mbuf<'p>>(), self.len) }
    }

    /// The packets, mutably borrowed.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [Mbuf<'p>] {
        // SAFETY: as in as_slice(), with exclusive access through &mut self.
        unsafe {
            std::slice::from_raw_parts_mut(self.pkts.as_mut_ptr().cast::<Mbuf<'p>>(), self.len)
        }
    }

    /// Iterates over the packets.
    #[inline]
    pub fn iter(&self) -> std::slice::Iter<'_, Mbuf<'p>> {
        self.as_slice().iter()
    }

    /// Iterates over the packets, mutably.
    #[inline]
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, Mbuf<'p>> {
        self.as_mut_slice().iter_mut()
    }

    /// Lets `fill` write up to `max` mbufs after the ones held (at most up to [`MAX_BURST`]),
    /// and takes ownership of the number it returns.
    ///
    /// # Safety
    /// `fill` gets a pointer to the first free entry and how many entries it may write; it
    /// must return how many it wrote (at most that many), and each must be a valid mbuf
    /// that nobody else owns, from a pool that lives for `'p`.
    #[inline]
    pub(crate) unsafe fn fill(
        &mut self,
        max: usize,
        fill: impl FnOnce(*mut *mut rte_mbuf, usize) -> usize,
    ) -> usize {
        let room = max.min(MAX_BURST - self.len);
        // SAFETY: the pointer stays inside the array: len <= MAX_BURST.
        let free = unsafe { self.pkts.as_mut_ptr().add(self.len) };
        let n = fill(free, room).min(room);
        self.len += n;
        n
    }

    /// Hands every mbuf held to `take` and forgets them: afterwards the burst is empty.
    ///
    /// # Safety
    /// `take` gets a pointer to the held mbufs and their number; it must take ownership of
    /// all of them (transmit or free each exactly once), since the burst no longer frees them.
    #[inline]
    pub(crate) unsafe fn hand_over<R>(
        &mut self,
        take: impl FnOnce(*mut *mut rte_mbuf, usize) -> R,
    ) -> R {
        let len = std::mem::take(&mut self.len);
        take(self.pkts.as_mut_ptr(), len)
    }

    /// Moves the packets out one by one and leaves the burst empty (and reusable); the ones
    /// not taken are freed when the iterator is dropped. Unlike `into_iter`, the burst itself
    /// is not moved: a worker receives into one burst for its whole life, and moving the
    /// 264-byte array read it back right after the driver wrote it (a copy that waited for
    /// the driver's stores).
    #[inline]
    pub fn drain(&mut self) -> Drain<'_, 'p> {
        // The length is zeroed first: if the iterator is leaked, its mbufs leak too, never
        // freed twice.
        let end = std::mem::take(&mut self.len);
        Drain { burst: self, next: 0, end }
    }

    /// Frees entries `from..len` and forgets them.
    #[inline]
    fn free_from(&mut self, from: usize) {
        if from < self.len {
            let n = u32::try_from(self.len - from).expect("burst is at most 32");
            // SAFETY: entries from..len are valid mbufs owned by self; after the call they
            // are forgotten (len shrinks), so none is freed twice.
            unsafe { dpdk_sys::rte_pktmbuf_free_bulk(self.pkts.as_mut_ptr().add(from), n) };
        }
        self.len = from.min(self.len);
    }
}

impl Drop for MbufBurst<'_> {
    fn drop(&mut self) {
        self.free_from(0);
    }
}

impl fmt::Debug for MbufBurst<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'p> IntoIterator for MbufBurst<'p> {
    type Item = Mbuf<'p>;
    type IntoIter = BurstIntoIter<'p>;

    fn into_iter(self) -> BurstIntoIter<'p> {
        BurstIntoIter { burst: self, next: 0 }
    }
}

impl<'s, 'p> IntoIterator for &'s MbufBurst<'p> {
    type Item = &'s Mbuf<'p>;
    type IntoIter = std::slice::Iter<'s, Mbuf<'p>>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Moves the packets out of a burst one by one; frees the ones not taken when dropped.
#[derive(Debug)]
pub struct BurstIntoIter<'p> {
    burst: MbufBurst<'p>,
    next: usize,
}

impl<'p> Iterator for BurstIntoIter<'p> {
    type Item = Mbuf<'p>;

    #[inline]
    fn next(&mut self) -> Option<Mbuf<'p>> {
        if self.next == self.burst.len {
            return None;
        }
        let raw = self.burst.pkts[self.next];
        self.next += 1;
        // SAFETY: entries before `next` have been handed out and are no longer owned by the
        // burst (see Drop below); this entry is a valid mbuf owned by the burst until now.
        Some(unsafe { Mbuf::from_raw(raw) })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.burst.len - self.next;
        (n, Some(n))
    }
}

impl ExactSizeIterator for BurstIntoIter<'_> {}

/// Moves the packets out of a burst one by one ([`MbufBurst::drain`]); frees the ones not
/// taken when dropped. The burst is empty afterwards.
#[derive(Debug)]
pub struct Drain<'b, 'p> {
    burst: &'b mut MbufBurst<'p>,
    next: usize,
    end: usize,
}

impl<'p> Iterator for Drain<'_, 'p> {
    type Item = Mbuf<'p>;

    #[inline]
    fn next(&mut self) -> Option<Mbuf<'p>> {
        if self.next == self.end {
            return None;
        }
        let raw = self.burst.pkts[self.next];
        self.next += 1;
        // SAFETY: entries `next..end` are valid mbufs that the burst owned when `drain` began
        // and that nobody has taken since (each is handed out once, in order); the burst's own
        // length is zero, so it will not free them.
        Some(unsafe { Mbuf::from_raw(raw) })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.end - self.next;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Drain<'_, '_> {}

impl Drop for Drain<'_, '_> {
    fn drop(&mut self) {
        // The burst owns `next..end` again just long enough to free them; the entries before
        // `next` belong to the callers, and the burst ends empty.
        self.burst.len = self.end;
        self.burst.free_from(self.next);
        self.burst.len = 0;
    }
}

impl Drop for BurstIntoIter<'_> {
    fn drop(&mut self) {
        // Entries before `next` belong to the callers now: free only the rest, then make the
        // burst's own Drop see nothing.
        let (next, len) = (self.next, self.burst.len);
        self.burst.pkts.copy_within(next..len, 0);
        self.burst.len = len - next;
        self.burst.free_from(0);
    }
}
