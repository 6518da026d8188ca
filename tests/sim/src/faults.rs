//! Which faults a seed injects and how often, and the tally of those it did.
//!
//! Every fault kind has a rate per opportunity (per mille), drawn per seed
//! from its range, so one seed is heavy on lost answers and another on
//! crashes. Faults are injected only while the plan is active (the
//! workload phase); afterwards the platform must converge on its own.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::rng::SharedRng;

/// One kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// A queue task delivered twice.
    TaskDuplicated,
    /// A queue task delivered late (reordering it behind later ones).
    TaskDelayed,
    /// A delivery that never reached the handler: redelivered after the deadline.
    TaskDeliveryLost,
    /// The handler ran, its answer was lost: redelivered.
    TaskAnswerLost,
    /// A Pub/Sub push delivered twice.
    PushDuplicated,
    /// A push delivered late, possibly after the execution ended.
    PushDelayed,
    /// The push was applied, its acknowledgement lost: redelivered.
    PushAnswerLost,
    /// A scheduler tick that did not happen.
    TickSkipped,
    /// Two ticks at once.
    TickOverlapped,
    /// A store read answered `Unavailable`.
    StoreReadFailed,
    /// A commit refused before it applied.
    StoreRefused,
    /// A transaction aborted at commit (a conflict).
    StoreAborted,
    /// A commit applied whose answer was lost.
    StoreAnswerLost,
    /// An object write or read answered 503 before it applied.
    ObjectsRefused,
    /// An object write applied whose answer was lost.
    ObjectsAnswerLost,
    /// A task create refused (Cloud Tasks 429 or 5xx).
    QueueRefused,
    /// A task created whose answer was lost.
    QueueAnswerLost,
    /// `jobs.run` answered 429: nothing was made.
    ExecutorThrottled,
    /// `jobs.run` answered 503: nothing was made.
    ExecutorUnavailable,
    /// `jobs.run` made the execution and its answer was lost.
    ExecutorAnswerLost,
    /// One `jobs.run` made two executions.
    ExecutorStartedTwice,
    /// `executions.get`, `list` or `cancel` failed.
    ExecutorCallFailed,
    /// KMS `asymmetricSign` answered 503.
    SignerUnavailable,
    /// The process was killed after a write, before its answer.
    Crash,
    /// The clock jumped forward by hours.
    ClockJump,
    /// An execution the executor forgot (404).
    ExecutionVanished,
    /// An execution killed for memory, exit 137.
    ExecutionOom137,
    /// An execution killed by signal 9, with no exit code.
    ExecutionSignal9,
    /// An execution that ran past its timeout and was stopped (SIGTERM).
    ExecutionTimedOut,
    /// An execution whose process crashed (exit 70).
    ExecutionCrashed,
}

use Fault as F;

/// Each fault's range of rates, per mille per opportunity: every seed
/// injects every kind, some seeds twice as often as others.
const RANGES: &[(Fault, u32, u32)] = &[
    (F::TaskDuplicated, 100 / 2, 100),
    (F::TaskDelayed, 150 / 2, 150),
    (F::TaskDeliveryLost, 60 / 2, 60),
    (F::TaskAnswerLost, 80 / 2, 80),
    (F::PushDuplicated, 150 / 2, 150),
    (F::PushDelayed, 200 / 2, 200),
    (F::PushAnswerLost, 80 / 2, 80),
    (F::TickSkipped, 200 / 2, 200),
    (F::TickOverlapped, 200 / 2, 200),
    (F::StoreReadFailed, 15 / 2, 15),
    (F::StoreRefused, 30 / 2, 30),
    (F::StoreAborted, 30 / 2, 30),
    (F::StoreAnswerLost, 30 / 2, 30),
    (F::ObjectsRefused, 40 / 2, 40),
    (F::ObjectsAnswerLost, 40 / 2, 40),
    (F::QueueRefused, 40 / 2, 40),
    (F::QueueAnswerLost, 40 / 2, 40),
    (F::ExecutorThrottled, 150 / 2, 150),
    (F::ExecutorUnavailable, 60 / 2, 60),
    (F::ExecutorAnswerLost, 100 / 2, 100),
    (F::ExecutorStartedTwice, 100 / 2, 100),
    (F::ExecutorCallFailed, 60 / 2, 60),
    (F::SignerUnavailable, 100 / 2, 100),
    (F::Crash, 25 / 2, 25),
    (F::ClockJump, 40 / 2, 40),
    (F::ExecutionVanished, 60 / 2, 60),
    (F::ExecutionOom137, 80 / 2, 80),
    (F::ExecutionSignal9, 60 / 2, 60),
    (F::ExecutionTimedOut, 50 / 2, 50),
    (F::ExecutionCrashed, 60 / 2, 60),
];

/// The faults of one seed and what was injected.
#[derive(Debug)]
pub struct Faults {
    rng: SharedRng,
    rates: BTreeMap<Fault, u32>,
    tally: Mutex<BTreeMap<Fault, u64>>,
    active: AtomicBool,
    /// Set by a crash point: the request in flight dies at its next await.
    crashed: AtomicBool,
    crash: tokio::sync::Notify,
    /// Ports yield at every call, so concurrent requests interleave.
    interleave: AtomicBool,
}

impl Faults {
    /// Draws each fault's rate for this seed from `rng`, scaled by
    /// `intensity` per cent (0: no faults at all).
    pub fn draw(rng: SharedRng, intensity: u32) -> Faults {
        let rates = rng.with(|r| {
            RANGES
                .iter()
                .map(|&(f, lo, hi)| {
                    (f, u32::try_from(r.between(lo.into(), hi.into())).unwrap_or(0) * intensity / 100)
                })
                .collect()
        });
        Faults {
            rng,
            rates,
            tally: Mutex::default(),
            active: AtomicBool::new(true),
            crashed: AtomicBool::new(false),
            crash: tokio::sync::Notify::new(),
            interleave: AtomicBool::new(false),
        }
    }

    /// Whether `fault` happens at this opportunity (never once the plan stopped).
    pub fn roll(&self, fault: Fault) -> bool {
        if !self.active.load(Ordering::SeqCst) {
            return false;
        }
        let rate = self.rates.get(&fault).copied().unwrap_or(0);
        if rate == 0 || !self.rng.with(|r| r.chance(rate)) {
            return false;
        }
        *self.tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(fault).or_default() += 1;
        true
    }

    /// The simulation's generator.
    pub fn rng(&self) -> &SharedRng {
        &self.rng
    }

    /// Faults stop: from now on the platform must converge.
    pub fn stop(&self) {
        self.active.store(false, Ordering::SeqCst);
    }

    /// Faults start again (after a setup that ran without them).
    pub fn resume(&self) {
        self.active.store(true, Ordering::SeqCst);
    }

    pub fn active(&self) -> bool {
        self.active.load(Ordering::SeqCst)
    }

    /// What was injected, by kind.
    pub fn tally(&self) -> BTreeMap<Fault, u64> {
        self.tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// After a write applied: maybe the process dies here, before the
    /// caller hears of it. A dead request never resumes.
    pub async fn crash_point(&self) {
        if self.roll(Fault::Crash) {
            self.crashed.store(true, Ordering::SeqCst);
            self.crash.notify_one();
            std::future::pending::<()>().await;
        }
    }

    /// Ready when a crash point killed the request in flight (and clears the mark).
    pub async fn crashed(&self) {
        loop {
            if self.crashed.swap(false, Ordering::SeqCst) {
                return;
            }
            self.crash.notified().await;
        }
    }

    /// Ports yield once at each call while concurrent requests run, so
    /// their steps interleave (deterministically: the poll order is fixed).
    pub async fn yield_point(&self) {
        if self.interleave.load(Ordering::SeqCst) {
            let mut yielded = false;
            std::future::poll_fn(|cx| {
                if yielded {
                    std::task::Poll::Ready(())
                } else {
                    yielded = true;
                    cx.waker().wake_by_ref();
                    std::task::Poll::Pending
                }
            })
            .await;
        }
    }

    pub fn set_interleave(&self, on: bool) {
        self.interleave.store(on, Ordering::SeqCst);
    }
}
