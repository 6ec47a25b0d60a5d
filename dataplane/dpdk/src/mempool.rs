//! Packet mbuf pools.
//!
//! This module owns `rte_pktmbuf_pool_create`. A pool lives until EAL cleanup: ports' RX
//! rings and in-flight mbufs point into it, so it is never freed while the [`Eal`] lives, and
//! its handle borrows the `Eal`. It must never free a pool or hand out raw pool pointers
//! beyond this module.

use std::ffi::CString;
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;

use super::eal::Eal;
use super::error::DpdkError;
use super::mbuf::{Mbuf, MbufBurst, MAX_BURST};

/// A packet mbuf pool (a copyable handle; the pool itself lives until EAL cleanup).
#[derive(Clone, Copy)]
pub struct Mempool<'e> {
    raw: NonNull<dpdk_sys::rte_mempool>,
    _eal: PhantomData<&'e Eal>,
}

// SAFETY: DPDK mempools (ring_mp_mc, the default handler) are safe for concurrent get/put
// from any thread; the handle is only a pointer to the shared pool.
unsafe impl Send for Mempool<'_> {}
// SAFETY: as for Send: every operation through &Mempool is thread-safe in DPDK.
unsafe impl Sync for Mempool<'_> {}

impl fmt::Debug for Mempool<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mempool")
            .field("available", &self.available())
            .field("in_use", &self.in_use())
            .finish()
    }
}

impl<'e> Mempool<'e> {
    /// Creates a pool of `size` mbufs with DPDK's default data room (2048 B + headroom) and a
    /// per-lcore cache of `cache_size`, on any NUMA socket.
    pub fn create(
        _eal: &'e Eal,
        name: &str,
        size: u32,
        cache_size: u32,
    ) -> Result<Self, DpdkError> {
        let cname = CString::new(name).map_err(|_| DpdkError::Invalid {
            what: format!("mempool name {name:?} contains a NUL byte"),
        })?;
        let data_room = u16::try_from(dpdk_sys::RTE_MBUF_DEFAULT_BUF_SIZE).expect("fits u16");
        // SAFETY: EAL is initialised (we borrow it); cname is a valid C string for the call.
        let raw = unsafe {
            dpdk_sys::rte_pktmbuf_pool_create(
                cname.as_ptr(),
                size,
                cache_size,
                0,
                data_room,
                dpdk_sys::SOCKET_ID_ANY,
            )
        };
        NonNull::new(raw)
            .map(|raw| Mempool { raw, _eal: PhantomData })
            .ok_or_else(|| DpdkError::from_rte_errno("rte_pktmbuf_pool_create"))
    }

    /// Allocates one mbuf, `None` when the pool is empty.
    pub fn alloc(&self) -> Option<Mbuf<'e>> {
        // SAFETY: raw is a live packet pool (it is never freed while 'e lasts).
        let m = unsafe { dpdk_sys::rte_pktmbuf_alloc(self.raw.as_ptr()) };
        // SAFETY: a non-null result is a fresh mbuf that we own exclusively.
        (!m.is_null()).then(|| unsafe { Mbuf::from_raw(m) })
    }

    /// Fills `burst` up to `n` packets (at most [`MAX_BURST`] in all) with fresh mbufs in one
    /// bulk allocation; all or nothing. Returns false, leaving the burst as it was, when the
    /// pool cannot give them all.
    ///
    /// What `rte_pktmbuf_alloc_bulk` does, with the mbufs' two descriptor lines taken for
    /// writing (`prefetchw`) before any is reset: an mbuf freed by another core (the worker
    /// that transmitted it, for a generator) has those lines in that core's cache, and
    /// resetting them one after the other waited for each in turn (docs/performance.md, "The
    /// staged burst", has the effect).
    pub fn alloc_bulk(&self, burst: &mut MbufBurst<'e>, n: usize) -> bool {
        let want = n.min(MAX_BURST - burst.len());
        if want == 0 {
            return true;
        }
        let pool = self.raw.as_ptr();
        // SAFETY: on success rte_mempool_get_bulk writes `want` (<= room) objects of this pool
        // (a pktmbuf pool: each an rte_mbuf) that nobody else owns to `free`, and on failure
        // none (we report 0). Each is then reset as rte_pktmbuf_alloc_bulk resets it, before
        // the burst owns it: the pool lives for 'e.
        let got = unsafe {
            burst.fill(want, |free, room| {
                let count = want.min(room);
                let objs = free.cast::<*mut std::ffi::c_void>();
                if dpdk_sys::rte_mempool_get_bulk(pool, objs, count as u32) != 0 {
                    return 0;
                }
                let mbufs = std::slice::from_raw_parts(free, count);
                for &m in mbufs {
                    let line = m.cast::<u8>();
                    crate::prefetch_write(line);
                    crate::prefetch_write(line.wrapping_add(64));
                }
                for &m in mbufs {
                    dpdk_sys::rte_pktmbuf_reset(m);
                }
                count
            })
        };
        got == want
    }

    /// Mbufs currently free in the pool (including per-lcore caches).
    pub fn available(&self) -> u32 {
        // SAFETY: raw is a live pool; the call only reads counters.
        unsafe { dpdk_sys::rte_mempool_avail_count(self.raw.as_ptr()) }
    }

    /// Mbufs currently taken from the pool.
    pub fn in_use(&self) -> u32 {
        // SAFETY: raw is a live pool; the call only reads counters.
        unsafe { dpdk_sys::rte_mempool_in_use_count(self.raw.as_ptr()) }
    }

    pub(crate) fn as_ptr(&self) -> *mut dpdk_sys::rte_mempool {
        self.raw.as_ptr()
    }
}
