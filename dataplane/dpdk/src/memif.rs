//! Keeping the workers out of `net_memif` ports while DPDK's interrupt thread changes them.
//!
//! DPDK 22.11's memif driver runs its control channel (connect, disconnect) on EAL's
//! interrupt thread. When the peer goes away (it exits, is killed, or sends a disconnect
//! message) `memif_disconnect` clears the port's CONNECTED flag and then unmaps the peer's
//! shared-memory regions (`memif_free_regions`: `munmap` and `rte_free`), with nothing that
//! waits for the lcores polling the port. `eth_memif_rx` / `eth_memif_tx` test that flag once,
//! when a burst starts, so a burst that started just before the disconnect reads (or writes)
//! an unmapped ring and the process dies with SIGSEGV (seen: a clean `dpdk-testpmd` exit
//! killed an unprotected Spillway in 2 runs of 8, in `eth_memif_rx` reading `desc[].length`).
//! Testing the link status before each burst cannot help: the link goes down at the same
//! moment as the flag the driver already tests, and a worker preempted in the middle of a
//! burst widens the window to a whole scheduler slice.
//!
//! [`PollGate`] closes the race. Each control-channel callback of 22.11's memif logs a DEBUG
//! message *before* it changes the port (`memif_msg_receive`: "Received msg type" or "Invalid
//! message size" for the peer's end of file; `memif_listener_handler`: "Connection request
//! accepted"), and DPDK logs synchronously, on the logging thread, through its log stream.
//! [`PollGate::install`] replaces that stream with one that prints what the configured log
//! levels let through (to stderr, as DPDK does) and, when a memif message is logged by a
//! thread that is not an EAL lcore (the interrupt thread), *closes* the gate: it waits until
//! no worker is inside a poll iteration (a worker marks itself busy for each iteration and
//! skips iterations while the gate is closed), then signals an eventfd that the gate
//! registered as an interrupt source of its own. EAL runs interrupt callbacks on that one
//! thread, one at a time, so the gate's callback, which opens the gate, runs only after the
//! memif callback that logged has returned: the unmapping (or mapping) is complete and the
//! workers' next burst sees the port's new state.
//!
//! The application's own `rte_eth_dev_stop` / `close` (which also disconnect, on the main
//! lcore) run after the workers have stopped. Why not an EAL alarm to open the gate: once an
//! alarm has been used, 22.11's `rte_eal_cleanup` unregisters the alarm's interrupt callback,
//! which makes the interrupt thread rebuild its list of sources while the same cleanup unmaps
//! EAL memory, and memif leaves its listening socket's source (in EAL memory) in that list:
//! the interrupt thread died with SIGSEGV at exit in 5 of 15 runs whose peer left as
//! Spillway stopped. The gate's own source is allocated outside EAL memory and never
//! unregistered, and dropping the [`PollGate`] (after the ports are closed, before EAL is
//! cleaned up) waits until the interrupt thread has handled everything queued before it.
//!
//! The cost: one sequentially consistent store per poll iteration on the worker's own cache
//! line, and a pause of every worker for the length of a memif control message (microseconds;
//! only while a peer connects or goes away).

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crossbeam::utils::CachePadded;

use super::eal::Eal;
use super::error::DpdkError;

/// One busy flag per possible worker (workers are EAL lcores, so at most `RTE_MAX_LCORE`).
const SLOTS: usize = dpdk_sys::RTE_MAX_LCORE as usize;

/// Closed while a memif control callback runs (from its first log line to [`reopen`]).
static CLOSED: AtomicBool = AtomicBool::new(false);
/// `BUSY[i]`: worker slot `i` is inside a poll iteration.
static BUSY: [CachePadded<AtomicBool>; SLOTS] =
    [const { CachePadded::new(AtomicBool::new(false)) }; SLOTS];
/// How many times the gate was closed (for logs and tests).
static CLOSINGS: AtomicU64 = AtomicU64::new(0);
/// The eventfd whose interrupt callback ([`reopen`]) opens the gate; -1 until installed.
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);
/// How many times [`reopen`] ran (dropping the gate waits for it to move).
static REOPENED: AtomicU64 = AtomicU64::new(0);
/// What the log stream needs to know, set once by [`PollGate::install`].
static HOOK: OnceLock<Hook> = OnceLock::new();
/// Whether memif messages close the gate (from `install` until the `PollGate` is dropped).
/// The lock also makes "check, close, signal" one step against the drop.
static ACTIVE: Mutex<bool> = Mutex::new(false);

thread_local! {
    /// Set while this thread is inside the log writer (no nested gate handling).
    static IN_WRITE: Cell<bool> = const { Cell::new(false) };
}

#[derive(Debug)]
struct Hook {
    /// The memif driver's log type.
    memif_type: u32,
    /// The global log level the user asked for (messages above it are not printed).
    print_global: u32,
    /// The memif log level the user asked for.
    print_memif: u32,
}

/// The process-wide memif poll gate, active while this value lives. Each worker that polls a
/// `net_memif` port gets a [`GateSlot`] and calls [`GateSlot::enter`] / [`GateSlot::leave`]
/// around every poll iteration (RX, processing and every TX). Drop it after the workers have
/// stopped and the ports are closed, before EAL is cleaned up.
#[derive(Debug)]
pub struct PollGate {
    _installed: (),
}

impl PollGate {
    /// Registers the gate's interrupt source, routes DPDK's log through the gate's stream and
    /// turns the memif driver's DEBUG messages on (they are the signal; they are printed only
    /// if the configured levels allow them). Call it after EAL has started (the memif log type
    /// exists then) and before the workers run.
    pub fn install(_eal: &Eal) -> Result<PollGate, DpdkError> {
        if HOOK.get().is_none() {
            install_wake_source()?;
            install_log_stream()?;
        }
        *lock_active() = true;
        Ok(PollGate { _installed: () })
    }

    /// Worker `index`'s place in the gate (`index` below `RTE_MAX_LCORE`). The worker must run
    /// on an EAL lcore: memif messages logged there never close the gate.
    pub fn slot(&self, index: usize) -> GateSlot {
        assert!(index < SLOTS, "worker index {index} out of range");
        GateSlot { busy: &BUSY[index] }
    }

    /// How many times a memif control message closed the gate since the process started.
    pub fn closings() -> u64 {
        CLOSINGS.load(Ordering::Relaxed)
    }
}

impl Drop for PollGate {
    fn drop(&mut self) {
        *lock_active() = false;
        // Let the interrupt thread handle what is queued (memif's `rte_eth_dev_stop` asked it
        // to rebuild its source list) before `rte_eal_cleanup` unmaps the memory it walks.
        // Twice: a round that shared an epoll batch with that request may run before the
        // rebuild; the second runs after it.
        for _ in 0..2 {
            let seen = REOPENED.load(Ordering::Acquire);
            if !wake() {
                break;
            }
            let deadline = Instant::now() + Duration::from_secs(1);
            while REOPENED.load(Ordering::Acquire) == seen && Instant::now() < deadline {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        CLOSED.store(false, Ordering::SeqCst);
    }
}

fn lock_active() -> MutexGuard<'static, bool> {
    ACTIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Registers the eventfd whose callback opens the gate. Its handle is private (plain malloc,
/// not EAL memory) and stays registered for the life of the process.
fn install_wake_source() -> Result<(), DpdkError> {
    // SAFETY: plain syscall with valid flags.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(DpdkError::Invalid {
            what: format!("eventfd failed: {}", std::io::Error::last_os_error()),
        });
    }
    // SAFETY: EAL is initialised; flags 0 is RTE_INTR_INSTANCE_F_PRIVATE.
    let handle = unsafe { dpdk_sys::rte_intr_instance_alloc(0) };
    if handle.is_null() {
        return Err(DpdkError::from_rte_errno("rte_intr_instance_alloc"));
    }
    WAKE_FD.store(fd, Ordering::Release);
    // SAFETY: handle is a valid interrupt instance, never freed (it stays registered until
    // the process exits); fd is an open eventfd, never closed; `reopen` only reads that fd
    // and touches statics.
    unsafe {
        DpdkError::check("rte_intr_fd_set", dpdk_sys::rte_intr_fd_set(handle, fd))?;
        DpdkError::check(
            "rte_intr_type_set",
            dpdk_sys::rte_intr_type_set(handle, dpdk_sys::RTE_INTR_HANDLE_EXT),
        )?;
        DpdkError::check(
            "rte_intr_callback_register",
            dpdk_sys::rte_intr_callback_register(handle, Some(reopen), std::ptr::null_mut()),
        )?;
    }
    Ok(())
}

fn install_log_stream() -> Result<(), DpdkError> {
    // SAFETY: EAL is initialised; the name is a NUL-terminated string. rte_log_register
    // returns the existing id of a registered type (the memif PMD registered it when EAL
    // loaded it).
    let memif_type = unsafe { dpdk_sys::rte_log_register(c"pmd.net.memif".as_ptr()) };
    let memif_type = u32::try_from(memif_type)
        .map_err(|_| DpdkError::from_ret("rte_log_register", memif_type))?;
    // SAFETY: memif_type is a registered log type; both calls only read levels.
    let (print_memif, print_global) =
        unsafe { (dpdk_sys::rte_log_get_level(memif_type), dpdk_sys::rte_log_get_global_level()) };
    let print_memif = u32::try_from(print_memif)
        .map_err(|_| DpdkError::from_ret("rte_log_get_level", print_memif))?;
    let funcs = dpdk_sys::cookie_io_functions_t {
        read: None,
        write: Some(write_log),
        seek: None,
        close: None,
    };
    // SAFETY: a write-only stream with a null cookie (write_log ignores it); glibc copies the
    // function table.
    let stream = unsafe { dpdk_sys::fopencookie(std::ptr::null_mut(), c"w".as_ptr(), funcs) };
    if stream.is_null() {
        return Err(DpdkError::Invalid {
            what: format!("fopencookie failed: {}", std::io::Error::last_os_error()),
        });
    }
    // Unbuffered: every message reaches write_log inside the rte_log call that made it, on
    // the logging thread (never flushed later by another thread).
    // SAFETY: stream is a fresh, valid FILE nothing has written to.
    unsafe { libc::setvbuf(stream.cast(), std::ptr::null_mut(), libc::_IONBF, 0) };
    // Only the first caller gets here (EAL starts once per process, on this thread).
    let _ = HOOK.set(Hook { memif_type, print_global, print_memif });
    // SAFETY: stream is a valid FILE that lives for the rest of the process (never closed);
    // the level setters only change DPDK's log filter.
    unsafe {
        dpdk_sys::rte_openlog_stream(stream.cast());
        dpdk_sys::rte_log_set_global_level(dpdk_sys::RTE_LOG_DEBUG);
        dpdk_sys::rte_log_set_level(memif_type, dpdk_sys::RTE_LOG_DEBUG);
    }
    Ok(())
}

/// A worker's place in the gate; see [`PollGate::slot`].
#[derive(Debug, Clone, Copy)]
pub struct GateSlot {
    busy: &'static AtomicBool,
}

impl GateSlot {
    /// Starts a poll iteration: `false` while a memif control message is being handled, and
    /// then the worker must not touch any port (RX or TX) and must call `enter` again later.
    #[inline]
    pub fn enter(&self) -> bool {
        // Dekker with `close`: the busy store and the CLOSED load are SeqCst, and so are the
        // closer's CLOSED store and busy loads, so either this load sees the gate closed or
        // the closer sees this slot busy and waits for `leave`.
        self.busy.store(true, Ordering::SeqCst);
        if CLOSED.load(Ordering::SeqCst) {
            self.busy.store(false, Ordering::Release);
            return false;
        }
        true
    }

    /// Ends a poll iteration started by a successful [`GateSlot::enter`].
    #[inline]
    pub fn leave(&self) {
        // Release: everything the iteration did to the port happens before the closer's
        // load that sees `false`, and so before the driver unmaps anything.
        self.busy.store(false, Ordering::Release);
    }
}

/// Closes the gate and waits until no worker is inside a poll iteration.
fn close() {
    CLOSED.store(true, Ordering::SeqCst);
    CLOSINGS.fetch_add(1, Ordering::Relaxed);
    for busy in &BUSY {
        let mut spins = 0u32;
        while busy.load(Ordering::SeqCst) {
            // A worker's iteration is short, unless the worker was preempted: then yield.
            spins += 1;
            if spins < 1000 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// Signals the eventfd, so that [`reopen`] runs on the interrupt thread; `false` if it cannot.
fn wake() -> bool {
    let fd = WAKE_FD.load(Ordering::Acquire);
    let one = 1u64.to_ne_bytes();
    // SAFETY: fd is the gate's eventfd (open for the life of the process); 8 bytes are written
    // from a live buffer.
    fd >= 0 && unsafe { libc::write(fd, one.as_ptr().cast(), one.len()) } == 8
}

/// The gate's interrupt callback: opens the gate. Runs on EAL's interrupt thread, after the
/// memif callback that closed it has returned.
unsafe extern "C" fn reopen(_arg: *mut c_void) {
    let mut counter = [0u8; 8];
    // SAFETY: reads (and so clears) the eventfd's counter into an 8-byte buffer; EAL does not
    // read external sources itself.
    unsafe {
        libc::read(WAKE_FD.load(Ordering::Acquire), counter.as_mut_ptr().cast(), counter.len())
    };
    CLOSED.store(false, Ordering::SeqCst);
    REOPENED.fetch_add(1, Ordering::Release);
}

/// The log stream's write function: print what the user's levels allow; on a memif message
/// logged by a thread that is not an EAL lcore (EAL's interrupt thread), close the gate until
/// the current callback returns. Memif messages of EAL lcores are not control-channel events:
/// a worker's own (it would wait for itself), or the main lcore's `rte_eth_dev_stop` / `close`
/// at teardown, which runs after the workers have stopped.
unsafe extern "C" fn write_log(
    _cookie: *mut c_void,
    buf: *const c_char,
    size: usize,
) -> dpdk_sys::__ssize_t {
    let written = dpdk_sys::__ssize_t::try_from(size).unwrap_or(dpdk_sys::__ssize_t::MAX);
    let Some(hook) = HOOK.get() else { return written };
    // SAFETY: called inside rte_vlog on the logging thread, which set this thread's current
    // message level and type before formatting.
    let (level, logtype) =
        unsafe { (dpdk_sys::rte_log_cur_msg_loglevel(), dpdk_sys::rte_log_cur_msg_logtype()) };
    let (level, logtype) = (u32::try_from(level).unwrap_or(0), u32::try_from(logtype).ok());
    let memif = logtype == Some(hook.memif_type);
    // SAFETY: rte_lcore_id reads a per-thread variable; valid on any thread.
    let eal_lcore = unsafe { dpdk_sys::rte_lcore_id() } != dpdk_sys::LCORE_ID_ANY;
    if memif && !eal_lcore && !IN_WRITE.replace(true) {
        let active = lock_active();
        if *active {
            close();
            if !wake() {
                // Never leave the workers stopped (the race is back for this message).
                CLOSED.store(false, Ordering::SeqCst);
            }
        }
        drop(active);
        IN_WRITE.set(false);
    }
    if level <= hook.print_global && (!memif || level <= hook.print_memif) {
        // SAFETY: buf holds size bytes (glibc's contract for cookie writes); stderr is fd 2.
        unsafe {
            libc::write(2, buf.cast(), size);
            // DPDK's own console stream also sends every message to syslog (levels 1..=8).
            let prio = c_int::try_from(level.saturating_sub(1)).unwrap_or(libc::LOG_DEBUG);
            let len = c_int::try_from(size).unwrap_or(c_int::MAX);
            libc::syslog(prio, c"%.*s".as_ptr(), len, buf);
        }
    }
    written
}
