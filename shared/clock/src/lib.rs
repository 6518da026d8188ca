//! The Clock port. Everything that stamps or compares times asks a `Clock`,
//! never the system directly, so tests and simulations can run in virtual
//! time: a [`VirtualClock`] only moves when the test advances it.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mapi_domain::Timestamp;
use tokio::sync::oneshot;

/// A future that completes when a clock reaches a time.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A source of the current time, and of waiting for a later one.
pub trait Clock: Send + Sync + Debug {
    fn now(&self) -> Timestamp;

    /// Completes once [`Clock::now`] is at or after `t`. Code that must
    /// wait (a rate limit, a back-off) waits on its clock, so a simulation
    /// in virtual time skips the wait instead of sleeping through it.
    fn sleep_until(&self, t: Timestamp) -> Sleep {
        let wait = t.since(self.now());
        Box::pin(tokio::time::sleep(wait))
    }
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

/// Time that moves only when told to. Never goes backwards. Sleepers
/// wake when a move reaches their time; [`VirtualClock::sleepers`] and
/// [`VirtualClock::next_wake`] let a simulation advance to the next event
/// once everything it drives is asleep.
#[derive(Debug)]
pub struct VirtualClock {
    now: AtomicI64,
    next_id: AtomicU64,
    sleepers: Mutex<BTreeMap<(i64, u64), oneshot::Sender<()>>>,
}

impl VirtualClock {
    pub fn new(start: Timestamp) -> Self {
        VirtualClock {
            now: AtomicI64::new(start.as_micros()),
            next_id: AtomicU64::new(0),
            sleepers: Mutex::new(BTreeMap::new()),
        }
    }

    /// Moves time forward by `d`.
    pub fn advance(&self, d: Duration) {
        let micros = i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        self.now.fetch_add(micros, Ordering::SeqCst);
        self.wake();
    }

    /// Sets the time, if it is not earlier than now.
    pub fn set(&self, t: Timestamp) {
        self.now.fetch_max(t.as_micros(), Ordering::SeqCst);
        self.wake();
    }

    /// How many futures are waiting on this clock (dropped ones excluded).
    pub fn sleepers(&self) -> usize {
        let mut s = self.sleepers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        s.retain(|_, tx| !tx.is_closed());
        s.len()
    }

    /// The earliest time a sleeper waits for.
    pub fn next_wake(&self) -> Option<Timestamp> {
        let mut s = self.sleepers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        s.retain(|_, tx| !tx.is_closed());
        s.keys().next().map(|(t, _)| Timestamp::from_micros(*t))
    }

    fn wake(&self) {
        let now = self.now.load(Ordering::SeqCst);
        let mut s = self.sleepers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let later = s.split_off(&(now.saturating_add(1), 0));
        for (_, tx) in std::mem::replace(&mut *s, later) {
            let _ = tx.send(());
        }
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_micros(self.now.load(Ordering::SeqCst))
    }

    fn sleep_until(&self, t: Timestamp) -> Sleep {
        let (tx, rx) = oneshot::channel();
        {
            let mut s = self.sleepers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if t.as_micros() <= self.now.load(Ordering::SeqCst) {
                return Box::pin(async {});
            }
            s.insert((t.as_micros(), self.next_id.fetch_add(1, Ordering::Relaxed)), tx);
        }
        Box::pin(async move {
            let _ = rx.await;
        })
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

    #[tokio::test]
    async fn virtual_sleepers_wake_in_order_when_time_reaches_them() {
        let c = std::sync::Arc::new(VirtualClock::new(Timestamp::from_secs(100)));
        let early = tokio::spawn(c.sleep_until(Timestamp::from_secs(101)));
        let late = tokio::spawn(c.sleep_until(Timestamp::from_secs(105)));
        c.sleep_until(Timestamp::from_secs(99)).await;
        tokio::task::yield_now().await;
        assert_eq!(c.sleepers(), 2);
        assert_eq!(c.next_wake(), Some(Timestamp::from_secs(101)));
        c.advance(Duration::from_secs(1));
        early.await.expect("early sleeper");
        assert_eq!(c.sleepers(), 1);
        assert!(!late.is_finished());
        c.set(Timestamp::from_secs(105));
        late.await.expect("late sleeper");
        assert_eq!(c.next_wake(), None);
    }

    #[test]
    fn system_clock_is_after_2025() {
        assert!(SystemClock.now() > Timestamp::from_secs(1_735_689_600));
    }
}
