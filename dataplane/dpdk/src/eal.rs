//! EAL start-up and shutdown.
//!
//! This module owns the process-wide DPDK environment: `rte_eal_init` (once per process, with
//! a leaked argv as EAL requires) and `rte_eal_cleanup` when the [`Eal`] is dropped. Every
//! other DPDK handle borrows the `Eal`, so the borrow checker proves they are gone before
//! cleanup runs. It must never be initialised twice, and never from a library test process
//! that might run other DPDK tests (run DPDK in a child process instead).

use std::ffi::{c_char, c_int, c_void, CString};
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};

use super::error::DpdkError;
use super::memory::MemoryArea;

/// An EAL logical core id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LcoreId(pub u32);

impl fmt::Display for LcoreId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl LcoreId {
    /// The lcore of the calling thread, `None` on a thread EAL does not know.
    pub fn current() -> Option<LcoreId> {
        // SAFETY: rte_lcore_id reads a per-thread variable; valid on any thread.
        let id = unsafe { dpdk_sys::rte_lcore_id() };
        (id != dpdk_sys::LCORE_ID_ANY).then_some(LcoreId(id))
    }
}

/// Set once `rte_eal_init` has been called; EAL cannot be started a second time.
static STARTED: AtomicBool = AtomicBool::new(false);

/// The running DPDK environment. Dropping it waits for every worker lcore to finish and
/// calls `rte_eal_cleanup`.
#[derive(Debug)]
pub struct Eal {
    /// `rte_eal_cleanup` must run on the thread that initialised EAL: not `Send`.
    _not_send: PhantomData<*const ()>,
}

// SAFETY: `&Eal` offers read-only queries (lcore lists, TSC frequency) that DPDK allows from
// any thread once rte_eal_init has returned, and `Eal::scope`, which checks at run time that it
// is on the main lcore before launching or waiting. It stays !Send, so the cleanup in Drop
// runs on the initialising thread.
unsafe impl Sync for Eal {}

impl Eal {
    /// Starts EAL with `args` (without a program name; `spillway` is put in front).
    ///
    /// Fails with [`DpdkError::AlreadyInitialised`] on a second call in the same process,
    /// even if the first one failed: DPDK cannot retry `rte_eal_init`.
    pub fn init<S: AsRef<str>>(args: &[S]) -> Result<Eal, DpdkError> {
        let mut owned = Vec::with_capacity(args.len() + 1);
        for arg in std::iter::once("spillway").chain(args.iter().map(AsRef::as_ref)) {
            owned.push(CString::new(arg).map_err(|_| DpdkError::Invalid {
                what: format!("EAL argument {arg:?} contains a NUL byte"),
            })?);
        }
        if STARTED.swap(true, Ordering::SeqCst) {
            return Err(DpdkError::AlreadyInitialised);
        }
        // P9: EAL keeps (and permutes) argv, so both the strings and the array live forever.
        let argv: &'static mut [*mut c_char] = Vec::leak(
            owned
                .into_iter()
                .map(CString::into_raw)
                .chain(std::iter::once(std::ptr::null_mut()))
                .collect(),
        );
        let argc = c_int::try_from(argv.len() - 1)
            .map_err(|_| DpdkError::Invalid { what: "too many EAL arguments".to_owned() })?;
        // SAFETY: argv holds argc valid, NUL-terminated, leaked (never freed) strings followed
        // by a NULL, as rte_eal_init expects; STARTED guarantees this is the only call.
        let ret = unsafe { dpdk_sys::rte_eal_init(argc, argv.as_mut_ptr()) };
        if ret < 0 {
            return Err(DpdkError::from_rte_errno("rte_eal_init"));
        }
        install_panic_hook();
        Ok(Eal { _not_send: PhantomData })
    }

    /// The main lcore (the thread that called [`Eal::init`]).
    pub fn main_lcore(&self) -> LcoreId {
        // SAFETY: EAL is initialised (we hold an Eal); the call only reads its config.
        LcoreId(unsafe { dpdk_sys::rte_get_main_lcore() })
    }

    /// The enabled worker lcores (every EAL lcore but the main one), in id order.
    pub fn worker_lcores(&self) -> Vec<LcoreId> {
        let mut out = Vec::new();
        let mut i = u32::MAX; // rte_get_next_lcore starts at i + 1, wrapping -1 to 0.
        loop {
            // SAFETY: EAL is initialised; the call only reads its lcore table.
            i = unsafe { dpdk_sys::rte_get_next_lcore(i, 1, 0) };
            if i >= dpdk_sys::RTE_MAX_LCORE {
                return out;
            }
            out.push(LcoreId(i));
        }
    }

    /// Whether `lcore` is an enabled EAL lcore.
    pub fn lcore_enabled(&self, lcore: LcoreId) -> bool {
        lcore.0 < dpdk_sys::RTE_MAX_LCORE
            // SAFETY: EAL is initialised and lcore is below RTE_MAX_LCORE, as required.
            && unsafe { dpdk_sys::rte_lcore_is_enabled(lcore.0) } != 0
    }

    /// Lets DPDK's packet capture framework capture this process's ports from a secondary
    /// process (`dpdk-dumpcap --file-prefix=PREFIX -i PORT`): registers the capture requests'
    /// handler. Costs nothing until a capture starts (it adds its RX/TX callbacks then, and
    /// removes them when it ends). Fails where there is no multi-process channel
    /// (`--no-shconf`, `--in-memory`).
    pub fn enable_capture(&self) -> Result<(), DpdkError> {
        // SAFETY: EAL is initialised (we hold an Eal); rte_pdump_init registers an IPC handler
        // and takes no arguments.
        if unsafe { dpdk_sys::rte_pdump_init() } < 0 {
            return Err(DpdkError::from_rte_errno("rte_pdump_init"));
        }
        Ok(())
    }

    /// Whether EAL runs on hugepages (not `--no-huge`).
    pub fn has_hugepages(&self) -> bool {
        // SAFETY: EAL is initialised; the call reads its internal configuration.
        unsafe { dpdk_sys::rte_eal_has_hugepages() != 0 }
    }

    /// The memory EAL has mapped, per socket and page size, with each socket's heap use.
    pub fn memory(&self) -> Vec<MemoryArea> {
        unsafe extern "C" fn add(
            msl: *const dpdk_sys::rte_memseg_list,
            ms: *const dpdk_sys::rte_memseg,
            arg: *mut c_void,
        ) -> c_int {
            // SAFETY: rte_memseg_walk passes valid list and segment pointers for the duration
            // of the call, and arg is the Vec below, borrowed for the whole walk.
            let (msl, ms, out) = unsafe { (&*msl, &*ms, &mut *arg.cast::<Vec<MemoryArea>>()) };
            let (socket, page_bytes) = (msl.socket_id, msl.page_sz);
            match out.iter_mut().find(|a| a.socket == socket && a.page_bytes == page_bytes) {
                Some(a) => a.bytes += ms.len as u64,
                None => {
                    out.push(MemoryArea { socket, page_bytes, bytes: ms.len as u64, heap_used: 0 })
                }
            }
            0
        }
        let mut out: Vec<MemoryArea> = Vec::new();
        // SAFETY: EAL is initialised; the callback only reads the segments and pushes into
        // `out`, which outlives the walk; it returns 0 to continue.
        unsafe {
            dpdk_sys::rte_memseg_walk(Some(add), (&raw mut out).cast::<c_void>());
        }
        for a in &mut out {
            let mut stats = dpdk_sys::rte_malloc_socket_stats::default();
            // SAFETY: EAL is initialised; stats is a valid, writable struct for the call.
            if unsafe { dpdk_sys::rte_malloc_get_socket_stats(a.socket, &raw mut stats) } == 0 {
                a.heap_used = stats.heap_allocsz_bytes as u64;
            }
        }
        out.sort_by_key(|a| (a.socket, a.page_bytes));
        out
    }

    /// TSC ticks per second, as EAL measured it at start-up.
    pub fn tsc_hz(&self) -> u64 {
        // SAFETY: EAL is initialised; the call returns a value computed at init.
        unsafe { dpdk_sys::rte_get_tsc_hz() }
    }
}

impl Drop for Eal {
    fn drop(&mut self) {
        // SAFETY: every DPDK handle borrows this Eal, so none is alive any more; lcores that
        // may still run launched work are waited for first, then EAL releases its memory.
        unsafe {
            dpdk_sys::rte_eal_mp_wait_lcore();
            dpdk_sys::rte_eal_cleanup();
        }
    }
}

/// Adds the EAL lcore to panic messages, so a panicking worker names itself even in release
/// builds (`panic = "abort"`, where the launch trampoline's `catch_unwind` never runs).
fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        // SAFETY: rte_lcore_id reads a per-thread variable; valid on any thread (it returns
        // LCORE_ID_ANY on threads EAL does not know).
        let lcore = unsafe { dpdk_sys::rte_lcore_id() };
        if lcore != dpdk_sys::LCORE_ID_ANY {
            eprintln!("spillway: panic on EAL lcore {lcore}");
        }
        previous(info);
    }));
}
