//! The submit gate in front of `jobs.run`: a token bucket
//! (`MAPI_CLOUDRUN_SUBMITS_PER_MINUTE`, burst `MAPI_CLOUDRUN_SUBMIT_BURST`)
//! and the cool-down every submitter shares after a 429.
//!
//! The bucket is kept as a reservation schedule (the generic cell rate
//! algorithm): each caller is given the time its call may leave, and slots
//! are handed out in order, so no token is wasted while callers wait and
//! the n-th of many simultaneous submits leaves at `(n - burst) * 60 s /
//! rate`, the floor the rate sets. Times come from the injected clock.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use mapi_domain::Timestamp;

use crate::settings::Settings;

/// The gate's state, shared by every submitter of one executor.
#[derive(Debug)]
pub struct SubmitGate {
    interval: Duration,
    tolerance: Duration,
    backoff_base: Duration,
    backoff_cap: Duration,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The theoretical arrival time of the next call (GCRA).
    tat: Option<Timestamp>,
    cool_until: Option<Timestamp>,
    /// 429 answers since the last call that was not throttled.
    in_a_row: u32,
    throttled: VecDeque<Timestamp>,
    calls: VecDeque<Timestamp>,
}

const HOUR: Duration = Duration::from_secs(3600);

impl SubmitGate {
    pub fn new(settings: &Settings) -> SubmitGate {
        let interval = Duration::from_secs(60) / settings.submits_per_minute.max(1);
        SubmitGate {
            interval,
            tolerance: interval * settings.submit_burst.saturating_sub(1),
            backoff_base: settings.backoff_base,
            backoff_cap: settings.backoff_cap,
            state: Mutex::new(State {
                tat: None,
                cool_until: None,
                in_a_row: 0,
                throttled: VecDeque::new(),
                calls: VecDeque::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reserves the next slot: the time at or after `now` this caller's
    /// `jobs.run` may leave. The caller must still wait out a cool-down
    /// that starts after it reserved ([`SubmitGate::cool_until`]).
    pub fn reserve(&self, now: Timestamp) -> Timestamp {
        let mut s = self.lock();
        let tat = s.tat.map_or(now, |t| t.max(now));
        let mut ready = if tat - self.tolerance > now { tat - self.tolerance } else { now };
        if let Some(c) = s.cool_until {
            ready = ready.max(c);
        }
        s.tat = Some(tat.max(ready) + self.interval);
        ready
    }

    /// When a slot reserved at `now` would leave, without reserving it.
    pub fn next_slot(&self, now: Timestamp) -> Timestamp {
        let s = self.lock();
        let tat = s.tat.map_or(now, |t| t.max(now));
        let ready = if tat - self.tolerance > now { tat - self.tolerance } else { now };
        s.cool_until.map_or(ready, |c| ready.max(c))
    }

    /// The end of the shared cool-down, if one is in force at `now`.
    pub fn cool_until(&self, now: Timestamp) -> Option<Timestamp> {
        self.lock().cool_until.filter(|c| *c > now)
    }

    /// Records a call that left at `now` and was not throttled.
    pub fn answered(&self, now: Timestamp) {
        let mut s = self.lock();
        s.in_a_row = 0;
        push_pruned(&mut s.calls, now);
    }

    /// Records a 429 at `now`: every submitter cools down for
    /// `base * 2^(n-1)` after the n-th in a row, at least the server's
    /// `Retry-After`, at most the cap. Returns the 429s in a row and the
    /// end of the cool-down.
    pub fn throttled(&self, now: Timestamp, retry_after: Option<Duration>) -> (u32, Timestamp) {
        let mut s = self.lock();
        s.in_a_row = s.in_a_row.saturating_add(1);
        let doublings = (s.in_a_row - 1).min(20);
        let backoff = self.backoff_base.saturating_mul(1 << doublings).min(self.backoff_cap);
        let wait = backoff.max(retry_after.unwrap_or_default()).min(self.backoff_cap);
        let until = s.cool_until.map_or(now + wait, |c| c.max(now + wait));
        s.cool_until = Some(until);
        push_pruned(&mut s.calls, now);
        push_pruned(&mut s.throttled, now);
        (s.in_a_row, until)
    }

    /// 429 answers in the hour before `now`.
    pub fn throttled_last_hour(&self, now: Timestamp) -> usize {
        let s = self.lock();
        s.throttled.iter().filter(|t| **t + HOUR > now).count()
    }

    /// `jobs.run` calls in the last minute before `now` (throttled or not).
    pub fn calls_last_minute(&self, now: Timestamp) -> usize {
        let s = self.lock();
        s.calls.iter().filter(|t| **t + Duration::from_secs(60) > now).count()
    }

    /// Time between slots once the burst is spent.
    pub fn interval(&self) -> Duration {
        self.interval
    }
}

fn push_pruned(q: &mut VecDeque<Timestamp>, now: Timestamp) {
    while q.front().is_some_and(|t| *t + HOUR <= now) {
        q.pop_front();
    }
    q.push_back(now);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate() -> SubmitGate {
        SubmitGate::new(&Settings::new("p"))
    }

    #[test]
    fn a_burst_leaves_at_once_then_one_slot_every_four_tenths_of_a_second() {
        let g = gate();
        let t0 = Timestamp::from_secs(1000);
        let slots: Vec<Duration> = (0..100).map(|_| g.reserve(t0).since(t0)).collect();
        assert!(slots[..10].iter().all(Duration::is_zero), "{:?}", &slots[..10]);
        assert_eq!(slots[10], Duration::from_millis(400));
        // The 95th submit: (95 - 10) * 0.4 s = 34 s, the floor the issue names.
        assert_eq!(slots[94], Duration::from_secs(34));
        assert!(slots.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn an_idle_bucket_refills_only_up_to_its_burst() {
        let g = gate();
        let t0 = Timestamp::from_secs(1000);
        for _ in 0..10 {
            g.reserve(t0);
        }
        let later = t0 + Duration::from_secs(3600);
        let slots: Vec<Duration> = (0..12).map(|_| g.reserve(later).since(later)).collect();
        assert_eq!(slots.iter().filter(|d| d.is_zero()).count(), 10);
        assert_eq!(slots[11], Duration::from_millis(800));
    }

    #[test]
    fn throttling_cools_everyone_down_exponentially_within_the_cap() {
        let g = gate();
        let t0 = Timestamp::from_secs(1000);
        let (n, until) = g.throttled(t0, None);
        assert_eq!((n, until.since(t0)), (1, Duration::from_secs(1)));
        assert_eq!(g.reserve(t0), until, "a new reservation waits out the cool-down");
        let (_, until) = g.throttled(t0, None);
        assert_eq!(until.since(t0), Duration::from_secs(2));
        let (_, until) = g.throttled(t0, Some(Duration::from_secs(30)));
        assert_eq!(until.since(t0), Duration::from_secs(30), "at least the server's Retry-After");
        for _ in 0..10 {
            g.throttled(t0, None);
        }
        let (_, until) = g.throttled(t0, Some(Duration::from_secs(600)));
        assert_eq!(until.since(t0), Duration::from_secs(64), "never more than the cap");
        assert_eq!(g.throttled_last_hour(t0), 14);
        assert_eq!(g.throttled_last_hour(t0 + HOUR), 0);
        g.answered(t0);
        let (n, _) = g.throttled(t0, None);
        assert_eq!(n, 1, "an answered call resets the run of 429s");
    }
}
