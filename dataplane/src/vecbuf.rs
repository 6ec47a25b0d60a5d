//! A [`PacketBuf`] over a plain byte vector with mbuf-like headroom: the packet path without
//! DPDK, for tests, benchmarks and tools.

use crate::path::PacketBuf;

/// Headroom in front of the packet, as in a DPDK mbuf.
pub const HEADROOM: usize = 128;

/// A packet in a `Vec<u8>` with [`HEADROOM`] bytes in front and room for 2048 bytes.
#[derive(Debug, Clone)]
pub struct VecBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    shared: bool,
}

impl VecBuf {
    /// An empty buffer.
    pub fn new() -> VecBuf {
        VecBuf { buf: vec![0; HEADROOM + 2048], start: HEADROOM, end: HEADROOM, shared: false }
    }

    /// A buffer holding `frame`.
    pub fn with_frame(frame: &[u8]) -> VecBuf {
        let mut b = VecBuf::new();
        b.load(frame);
        b
    }

    /// Replace the contents with `frame` (at most 2048 bytes), like a fresh receive.
    pub fn load(&mut self, frame: &[u8]) {
        let n = frame.len().min(self.buf.len() - HEADROOM);
        self.buf[HEADROOM..HEADROOM + n].copy_from_slice(&frame[..n]);
        self.start = HEADROOM;
        self.end = HEADROOM + n;
    }
}

impl VecBuf {
    /// Marks the buffer as shared with another owner, as a driver may hand out a shared or
    /// external mbuf: the path must then leave its bytes alone.
    pub fn set_shared(&mut self, shared: bool) {
        self.shared = shared;
    }
}

impl Default for VecBuf {
    fn default() -> Self {
        VecBuf::new()
    }
}

impl PacketBuf for VecBuf {
    fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }
    fn data_mut(&mut self) -> &mut [u8] {
        if self.shared {
            return &mut [];
        }
        &mut self.buf[self.start..self.end]
    }
    fn is_writable(&self) -> bool {
        !self.shared
    }
    fn prepend(&mut self, n: usize) -> bool {
        if n > self.start {
            return false;
        }
        self.start -= n;
        true
    }
    fn adj(&mut self, n: usize) -> bool {
        if n > self.end - self.start {
            return false;
        }
        self.start += n;
        true
    }
    fn truncate(&mut self, len: usize) -> bool {
        if len > self.end - self.start {
            return false;
        }
        self.end = self.start + len;
        true
    }
    fn reframe(&mut self, front: usize, len: usize, hdr: usize) -> Option<&mut [u8]> {
        let start = self.start + front;
        if self.shared || front + len > self.end - self.start || hdr > start {
            return None;
        }
        self.start = start - hdr;
        self.end = start + len;
        Some(&mut self.buf[self.start..self.end])
    }
    fn extend_to(&mut self, len: usize) -> bool {
        if self.start + len > self.buf.len() {
            return false;
        }
        self.end = self.end.max(self.start + len);
        true
    }
    fn reset(&mut self, len: usize) -> bool {
        if HEADROOM + len > self.buf.len() {
            return false;
        }
        self.start = HEADROOM;
        self.end = HEADROOM + len;
        true
    }
}
