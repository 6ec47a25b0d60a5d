//! Running closures on EAL lcores.
//!
//! This module owns `rte_eal_remote_launch`: [`Eal::scope`] launches closures on worker lcores
//! (docs/dpdk-notes.md N8: packet loops must run on EAL lcores, not on `std::thread`s) and waits for
//! all of them before it returns, like `std::thread::scope`, so the closures may borrow
//! anything that outlives the scope. A panic never unwinds into C: the trampoline catches it,
//! names the lcore and aborts the process. This module must never run packet logic itself.

use std::any::Any;
use std::ffi::{c_int, c_void};
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::eal::{Eal, LcoreId};
use super::error::DpdkError;

/// Launches closures on worker lcores; see [`Eal::scope`].
#[derive(Debug)]
pub struct LaunchScope<'scope, 'env: 'scope> {
    eal: &'env Eal,
    /// Invariant in 'scope and 'env, as in `std::thread::Scope`.
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

impl Eal {
    /// Runs `f`, which may launch closures on worker lcores through the [`LaunchScope`] it is
    /// given, then waits until every worker lcore is idle again. The closures may borrow
    /// anything that outlives this call.
    ///
    /// `f` must make its closures return (for example by setting a stop flag) before it
    /// returns or panics, or this call waits for them forever.
    ///
    /// Fails without running `f` when called from any thread but the main lcore: launching
    /// and waiting are the main lcore's job in DPDK (`&Eal` can reach other threads).
    pub fn scope<'env, F, T>(&'env self, f: F) -> Result<T, DpdkError>
    where
        F: for<'scope> FnOnce(&'scope LaunchScope<'scope, 'env>) -> T,
    {
        /// Waits for all lcores when dropped, also while unwinding out of `f`.
        struct WaitAll;
        impl Drop for WaitAll {
            fn drop(&mut self) {
                // SAFETY: only created below, after checking that this thread is the main
                // lcore, as DPDK requires; it only blocks until every worker lcore has
                // returned from its function.
                unsafe { dpdk_sys::rte_eal_mp_wait_lcore() };
            }
        }
        if LcoreId::current() != Some(self.main_lcore()) {
            return Err(not_main_lcore());
        }
        let scope = LaunchScope { eal: self, _scope: PhantomData, _env: PhantomData };
        let _wait = WaitAll;
        Ok(f(&scope))
    }
}

struct Payload<F> {
    lcore: LcoreId,
    f: F,
}

impl<'scope> LaunchScope<'scope, '_> {
    /// Runs `f` on worker lcore `lcore`. Fails if the lcore is not an enabled worker lcore or
    /// is already busy.
    pub fn launch<F>(&'scope self, lcore: LcoreId, f: F) -> Result<(), DpdkError>
    where
        F: FnOnce() + Send + 'scope,
    {
        if LcoreId::current() != Some(self.eal.main_lcore()) {
            return Err(not_main_lcore());
        }
        if !self.eal.lcore_enabled(lcore) || lcore == self.eal.main_lcore() {
            return Err(DpdkError::Invalid {
                what: format!("lcore {lcore} is not an enabled EAL worker lcore"),
            });
        }
        let payload = Box::into_raw(Box::new(Payload { lcore, f })).cast::<c_void>();
        // SAFETY: trampoline::<F> takes back ownership of exactly this payload, once. The
        // closure may borrow data for 'scope; Eal::scope waits for every lcore before 'scope
        // ends, so the borrows outlive the closure's run. F is Send, so running it on another
        // thread is allowed.
        let ret =
            unsafe { dpdk_sys::rte_eal_remote_launch(Some(trampoline::<F>), payload, lcore.0) };
        if ret < 0 {
            // SAFETY: the launch failed, so the trampoline will never run; the payload is
            // still ours, created by Box::into_raw above with this type.
            drop(unsafe { Box::from_raw(payload.cast::<Payload<F>>()) });
            return Err(DpdkError::from_ret("rte_eal_remote_launch", ret));
        }
        Ok(())
    }
}

fn not_main_lcore() -> DpdkError {
    DpdkError::Invalid {
        what: "lcores can only be launched and waited for from the main lcore".to_owned(),
    }
}

/// Entry point EAL calls on the worker lcore.
extern "C" fn trampoline<F: FnOnce() + Send>(arg: *mut c_void) -> c_int {
    // SAFETY: arg is the Box<Payload<F>> leaked by LaunchScope::launch, passed to exactly one
    // successful rte_eal_remote_launch, so it is taken back exactly once, here.
    let payload = unsafe { Box::from_raw(arg.cast::<Payload<F>>()) };
    let Payload { lcore, f } = *payload;
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(()) => 0,
        Err(panic) => {
            eprintln!(
                "spillway: FATAL: the work launched on EAL lcore {lcore} panicked: {}; aborting",
                panic_text(panic.as_ref())
            );
            std::process::abort();
        }
    }
}

fn panic_text(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(non-string panic payload)")
}
