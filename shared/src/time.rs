//! Time as the decision core sees it: a monotonic count of milliseconds from an arbitrary
//! origin, injected by the caller (the worker's TSC clock, or the simulator's virtual clock).
//! Nothing in the core reads a clock by itself.

use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in time: milliseconds since an arbitrary, fixed origin.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Time(pub u64);

impl Time {
    /// The origin.
    pub const ZERO: Time = Time(0);

    /// `s` seconds after the origin.
    pub const fn from_secs(s: u64) -> Time {
        Time(s * 1000)
    }

    /// `ms` milliseconds after the origin.
    pub const fn from_millis(ms: u64) -> Time {
        Time(ms)
    }

    /// Milliseconds since the origin.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// Time elapsed since `earlier` (zero if `earlier` is later).
    pub fn since(self, earlier: Time) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        Time(self.0.saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)))
    }
}

impl Sub<Duration> for Time {
    type Output = Time;
    fn sub(self, d: Duration) -> Time {
        Time(self.0.saturating_sub(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)))
    }
}
