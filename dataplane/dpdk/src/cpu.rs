//! CPU and memory hints the packet path needs: the time-stamp counter, prefetch, and
//! transparent huge pages for large tables. Written in Rust (intrinsics and one `madvise`), not
//! through DPDK's C wrappers, so that nothing per packet crosses FFI (docs/dpdk-notes.md N12).

/// Reads the CPU's time-stamp counter (what `rte_rdtsc` reads). Cheap enough to call once
/// per poll.
#[inline(always)]
pub fn tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc only reads the time-stamp counter; it touches no memory.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // SAFETY: rte_rdtsc only reads the CPU's cycle counter; it touches no memory.
        unsafe { dpdk_sys::rte_rdtsc() }
    }
}

/// Asks the CPU to bring the cache line holding `p` into all cache levels
/// (`rte_prefetch0`). Any address may be given, null included: a prefetch never faults and
/// has no architectural effect.
#[inline(always)]
pub fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: prefetch is a hint: it never faults and neither reads nor writes memory
        // architecturally, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Asks the CPU to bring the cache line holding `p` into the cache ready to be written
/// (`rte_prefetch0_write`: `prefetchw`, which takes the line in exclusive state, so that the
/// stores that follow need not ask the other cores for it again). A line another core wrote
/// last (an mbuf the worker freed, reused by the generator) is then taken once, not read and
/// then claimed. CPUs without the instruction run it as a no-op. Any address may be given.
#[inline(always)]
pub fn prefetch_write(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: prefetchw is a hint: it never faults, touches no register but its address
        // operand's, and neither reads nor writes memory architecturally, whatever the address.
        unsafe {
            core::arch::asm!("prefetchw [{p}]", p = in(reg) p, options(nostack, preserves_flags));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Asks the kernel to back `len` bytes at `start` with transparent huge pages
/// (`madvise(MADV_HUGEPAGE)`), best before the memory is first written. Only the whole pages
/// inside the range are advised. Returns false when the kernel refused (THP disabled, or part
/// of the range not mapped); the memory then simply keeps 4 KiB pages. Used for the connection
/// tables, which are much larger than the TLB's reach with 4 KiB pages.
///
/// Safe for any range: the advice is only a hint about how to back pages, never a change of
/// their contents, permissions or mapping, so no Rust object can observe it.
pub fn advise_huge_pages(start: *const u8, len: usize) -> bool {
    const PAGE: usize = 4096;
    let begin = (start as usize).next_multiple_of(PAGE);
    let end = (start as usize).saturating_add(len) & !(PAGE - 1);
    if end <= begin {
        return false;
    }
    // SAFETY: MADV_HUGEPAGE does not read or write memory and does not change the contents,
    // protection or mapping of any page (the kernel may later back the range with huge pages,
    // copying contents unchanged); for an unmapped range it fails with ENOMEM. So it is sound
    // for any page-aligned range, whoever owns it.
    let rc = unsafe { libc::madvise(begin as *mut libc::c_void, end - begin, libc::MADV_HUGEPAGE) };
    rc == 0
}
