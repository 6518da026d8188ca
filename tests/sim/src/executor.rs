//! The executor, shaped after Cloud Run Jobs: `jobs.run` makes an
//! execution (or answers 429 or 503 having made nothing, or makes one and
//! loses its answer, or makes two), `executions.get` and `list` report it,
//! `cancel` stops it after a grace period. What an execution does (take
//! its bootstrap, print events, write outputs) the world plays at its start
//! and end; its fate (success, OOM as exit 137 or signal 9 with no exit
//! code, a crash, a timeout, vanishing) is drawn when it is made.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use mapi_clock::Clock;
use mapi_domain::outcome::exit;
use mapi_domain::{ExecutionStatus, ResourceClass, Timestamp};
use mapi_executor::{
    AttemptSubmit, Capabilities, ExecutionHandle, ExecutionInfo, Executor, ExecutorError, Forgot, Isolation,
    LogPage, SubmitError,
};

use crate::faults::{Fault, Faults};

/// The executor's name (its evidence and switch are recorded under it).
pub const NAME: &str = "sim";

/// How long a cancelled execution takes to stop.
pub const CANCEL_GRACE: Duration = Duration::from_secs(10);

/// How an execution ends when nothing stops it first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Runs the method; succeeds or fails as the method does.
    Work,
    Oom137,
    Signal9,
    Crashed,
    /// Runs past the run's timeout; the worker stops itself (SIGTERM).
    TimedOut,
    /// The executor forgets it.
    Vanish,
}

/// One execution.
#[derive(Debug, Clone)]
pub struct Execution {
    pub handle: ExecutionHandle,
    pub submit: AttemptSubmit,
    pub created: Timestamp,
    pub starts_at: Timestamp,
    pub ends_at: Timestamp,
    pub fate: Fate,
    /// The second execution of one `jobs.run`.
    pub duplicate: bool,
    /// What it reports once it ended by its fate (set by the world at its start).
    pub result: ExecutionStatus,
    pub cancel_at: Option<Timestamp>,
    /// Tasks whose bootstrap this execution took (it did their work).
    pub took: Vec<u32>,
}

impl Execution {
    /// When it stops and what it reports then.
    pub fn end(&self) -> (Timestamp, ExecutionStatus) {
        match self.cancel_at.map(|c| c + CANCEL_GRACE) {
            Some(stop) if stop < self.ends_at => {
                (stop, ExecutionStatus::Cancelled { exit_code: Some(exit::SIGTERM) })
            }
            _ => (self.ends_at, self.result.clone()),
        }
    }

    fn info(&self, now: Timestamp) -> ExecutionInfo {
        let (end, status) = self.end();
        let ended = end <= now;
        ExecutionInfo {
            handle: self.handle.clone(),
            nonce: Some(self.submit.nonce.clone()),
            run: Some(self.submit.run.clone()),
            created: self.created,
            // One stopped before its start never ran (as Cloud Run reports
            // no start time for it).
            started: (self.starts_at <= now && end > self.starts_at).then_some(self.starts_at),
            finished: ended.then_some(end),
            task_count: self.submit.task_count,
            status: if ended { status } else { ExecutionStatus::Running },
        }
    }

    /// Whether the executor still knows it at `now`.
    pub fn known(&self, now: Timestamp) -> bool {
        !(self.fate == Fate::Vanish && self.end().0 <= now)
    }
}

#[derive(Debug, Default)]
struct State {
    executions: BTreeMap<String, Execution>,
    made: u64,
    /// Executions made since the world last asked (it schedules their start and end).
    new: Vec<String>,
}

/// The executor under the simulation's faults.
#[derive(Debug, Clone)]
pub struct SimExecutor {
    clock: Arc<dyn Clock>,
    faults: Arc<Faults>,
    state: Arc<Mutex<State>>,
}

impl SimExecutor {
    pub fn new(clock: Arc<dyn Clock>, faults: Arc<Faults>) -> SimExecutor {
        SimExecutor { clock, faults, state: Arc::default() }
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Executions made since the last call.
    pub fn take_new(&self) -> Vec<Execution> {
        self.with(|s| {
            std::mem::take(&mut s.new).iter().filter_map(|h| s.executions.get(h).cloned()).collect()
        })
    }

    pub fn get(&self, handle: &str) -> Option<Execution> {
        self.with(|s| s.executions.get(handle).cloned())
    }

    pub fn update(&self, handle: &str, f: impl FnOnce(&mut Execution)) {
        self.with(|s| s.executions.get_mut(handle).map(f));
    }

    pub fn all(&self) -> Vec<Execution> {
        self.with(|s| s.executions.values().cloned().collect())
    }

    fn make(&self, attempt: &AttemptSubmit, duplicate: bool) -> ExecutionHandle {
        let now = self.clock.now();
        let f = &self.faults;
        let fate = if f.roll(Fault::ExecutionOom137) {
            Fate::Oom137
        } else if f.roll(Fault::ExecutionSignal9) {
            Fate::Signal9
        } else if f.roll(Fault::ExecutionCrashed) {
            Fate::Crashed
        } else if f.roll(Fault::ExecutionTimedOut) {
            Fate::TimedOut
        } else if f.roll(Fault::ExecutionVanished) {
            Fate::Vanish
        } else {
            Fate::Work
        };
        let (startup, run) = f.rng().with(|r| (r.between(1, 20), r.between(5, 900)));
        let starts_at = now + Duration::from_secs(startup);
        let ends_at = match fate {
            Fate::TimedOut => starts_at + Duration::from_secs(u64::from(attempt.timeout.as_secs() as u32)),
            _ => starts_at + Duration::from_secs(run.min(attempt.timeout.as_secs().max(2) - 1)),
        };
        self.with(|s| {
            s.made += 1;
            let handle = format!("executions/sim-{:05}", s.made);
            s.executions.insert(
                handle.clone(),
                Execution {
                    handle: ExecutionHandle(handle.clone()),
                    submit: attempt.clone(),
                    created: now,
                    starts_at,
                    ends_at,
                    fate,
                    duplicate,
                    result: ExecutionStatus::Running,
                    cancel_at: None,
                    took: Vec::new(),
                },
            );
            s.new.push(handle.clone());
            ExecutionHandle(handle)
        })
    }

    async fn call(&self) -> Result<(), ExecutorError> {
        self.faults.yield_point().await;
        if self.faults.roll(Fault::ExecutorCallFailed) {
            return Err(ExecutorError::Unavailable("503 (simulated)".into()));
        }
        Ok(())
    }
}

#[async_trait]
impl Executor for SimExecutor {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            executor: NAME.to_owned(),
            isolation: Isolation::MicroVm,
            classes: ResourceClass::ALL.to_vec(),
            enforces_memory_limit: true,
            egress_enforced: true,
            dns_enforced: true,
            remote_control_api: true,
            max_task_count: 100,
            regions: vec!["europe-west1".to_owned()],
            gpus: 1,
        }
    }

    fn check_placement(&self, _: ResourceClass, _: &str) -> Result<(), String> {
        Ok(())
    }

    async fn submit(&self, attempt: &AttemptSubmit) -> Result<ExecutionHandle, SubmitError> {
        self.faults.yield_point().await;
        if self.faults.roll(Fault::ExecutorThrottled) {
            return Err(SubmitError::Throttled { retry_after: Some(Duration::from_secs(10)) });
        }
        if self.faults.roll(Fault::ExecutorUnavailable) {
            return Err(SubmitError::Unavailable("503 (simulated): nothing was made".into()));
        }
        let handle = self.make(attempt, false);
        if self.faults.roll(Fault::ExecutorStartedTwice) {
            // The second of two executions is the younger: it starts after
            // the first, as a retried `jobs.run`'s would.
            let first = self.get(&handle.0).map(|e| e.starts_at);
            let dup = self.make(attempt, true);
            if let Some(first) = first {
                self.update(&dup.0, |e| {
                    let later = first + Duration::from_secs(1);
                    if e.starts_at < later {
                        e.ends_at = e.ends_at + later.since(e.starts_at);
                        e.starts_at = later;
                    }
                });
            }
        }
        self.faults.crash_point().await;
        if self.faults.roll(Fault::ExecutorAnswerLost) {
            return Err(SubmitError::Ambiguous("the answer of jobs.run was lost (simulated)".into()));
        }
        Ok(handle)
    }

    async fn status(&self, handle: &ExecutionHandle) -> Result<ExecutionInfo, ExecutorError> {
        self.call().await?;
        let now = self.clock.now();
        Ok(self.with(|s| match s.executions.get(&handle.0).filter(|e| e.known(now)) {
            Some(e) => e.info(now),
            None => ExecutionInfo {
                handle: handle.clone(),
                nonce: None,
                run: None,
                created: Timestamp::from_secs(0),
                started: None,
                finished: None,
                task_count: 0,
                status: ExecutionStatus::NotFound,
            },
        }))
    }

    async fn list_recent(&self, since: Timestamp) -> Result<Vec<ExecutionInfo>, ExecutorError> {
        self.call().await?;
        let now = self.clock.now();
        Ok(self.with(|s| {
            s.executions
                .values()
                .filter(|e| e.created >= since && e.known(now))
                .map(|e| e.info(now))
                .collect()
        }))
    }

    async fn cancel(&self, handle: &ExecutionHandle) -> Result<(), ExecutorError> {
        self.call().await?;
        let now = self.clock.now();
        self.with(|s| {
            if let Some(e) = s.executions.get_mut(&handle.0)
                && e.cancel_at.is_none()
                && e.end().0 > now
            {
                e.cancel_at = Some(now);
            }
        });
        Ok(())
    }

    /// Kept until it ended; an ended one is removed.
    async fn forget(&self, handle: &ExecutionHandle) -> Result<Forgot, ExecutorError> {
        self.call().await?;
        let now = self.clock.now();
        Ok(self.with(|s| match s.executions.get(&handle.0) {
            Some(e) if e.end().0 > now => Forgot::Kept,
            Some(_) => {
                s.executions.remove(&handle.0);
                Forgot::Gone
            }
            None => Forgot::Gone,
        }))
    }

    fn backstop_margin(&self) -> Duration {
        Duration::from_secs(60)
    }

    async fn logs(
        &self,
        _: &ExecutionHandle,
        cursor: Option<&str>,
        _: usize,
    ) -> Result<LogPage, ExecutorError> {
        Ok(LogPage { lines: Vec::new(), cursor: cursor.unwrap_or("").to_owned(), more: false })
    }
}
