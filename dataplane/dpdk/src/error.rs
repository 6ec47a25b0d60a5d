//! Typed errors for the DPDK layer, built from `rte_errno` or a call's negative return value,
//! with DPDK's own text (`rte_strerror`).
//!
//! This module owns error construction only; it must never decide what to do about an error
//! (retry, log, exit): callers do.

use std::ffi::CStr;

/// A DPDK operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DpdkError {
    /// A DPDK call failed with an errno value.
    #[error("{call} failed: {text} (errno {errno})")]
    Call {
        /// The DPDK function, or what the layer was doing.
        call: &'static str,
        /// The positive errno (`rte_errno` or the negated return value).
        errno: i32,
        /// `rte_strerror(errno)`.
        text: String,
    },
    /// `rte_eal_init` was already called in this process (EAL can only start once).
    #[error("the DPDK EAL is already initialised in this process")]
    AlreadyInitialised,
    /// No ethdev port has this device name.
    #[error("no DPDK port named '{name}' (ports found: {available})")]
    PortNotFound {
        /// The name asked for.
        name: String,
        /// The names EAL did find, comma-separated, or "none".
        available: String,
    },
    /// An argument is outside what DPDK or the device accepts.
    #[error("{what}")]
    Invalid {
        /// Description naming the argument and the limit.
        what: String,
    },
}

impl DpdkError {
    /// The error for a call that reported failure through `rte_errno`.
    pub(crate) fn from_rte_errno(call: &'static str) -> Self {
        // SAFETY: rte_shim_errno reads this thread's rte_errno TLS variable; no arguments.
        let errno = unsafe { dpdk_sys::rte_shim_errno() };
        Self::from_errno(call, errno)
    }

    /// The error for a call that returned `-errno`.
    pub(crate) fn from_ret(call: &'static str, ret: i32) -> Self {
        Self::from_errno(call, ret.saturating_abs())
    }

    fn from_errno(call: &'static str, errno: i32) -> Self {
        // SAFETY: rte_strerror accepts any value and returns a pointer to a NUL-terminated
        // string (static, or a per-thread buffer) that stays valid until the next call on
        // this thread; it is copied out at once.
        let text =
            unsafe { CStr::from_ptr(dpdk_sys::rte_strerror(errno)) }.to_string_lossy().into_owned();
        DpdkError::Call { call, errno, text }
    }

    /// Checks a DPDK return code: negative is `-errno`.
    pub(crate) fn check(call: &'static str, ret: i32) -> Result<i32, Self> {
        if ret < 0 {
            Err(Self::from_ret(call, ret))
        } else {
            Ok(ret)
        }
    }
}
