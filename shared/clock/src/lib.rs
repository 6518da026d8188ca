//! The Clock port. Everything that stamps or compares times asks a `Clock`,
//! never the system directly, so tests and simulations can run in virtual
//! time: a [`VirtualClock`] only moves when the test advances it.

use std::fmt::Debug;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mapi_domain::Timestamp;

/// A source of the current time.
pub trait Clock: Send + Sync + Debug {
    fn now(&self) -> Timestamp;
}

/// Wall-clock time.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let micros = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros()).unwrap_or(0);
        Timestamp::from_micros(i64::try_from(micros).unwrap_or(i64::MAX))
    }
}

/// Time that moves only when told to. Never goes backwards.
#[derive(Debug)]
pub struct VirtualClock {
    now: AtomicI64,
}

impl VirtualClock {
    pub fn new(start: Timestamp) -> Self {
        VirtualClock { now: AtomicI64::new(start.as_micros()) }
    }

    /// Moves time forward by `d`.
    pub fn advance(&self, d: Duration) {
        let micros = i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        self.now.fetch_add(micros, Ordering::SeqCst);
    }

    /// Sets the time, if it is not earlier than now.
    pub fn set(&self, t: Timestamp) {
        self.now.fetch_max(t.as_micros(), Ordering::SeqCst);
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_micros(self.now.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_time_moves_only_forward_and_only_when_told() {
        let c = VirtualClock::new(Timestamp::from_secs(100));
        assert_eq!(c.now(), Timestamp::from_secs(100));
        c.advance(Duration::from_millis(1500));
        assert_eq!(c.now(), Timestamp::from_micros(101_500_000));
        c.set(Timestamp::from_secs(50));
        assert_eq!(c.now(), Timestamp::from_micros(101_500_000));
    }

    #[test]
    fn system_clock_is_after_2025() {
        assert!(SystemClock.now() > Timestamp::from_secs(1_735_689_600));
    }
}
