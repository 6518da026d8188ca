//! The Executor port: one attempt of a run becomes one execution of a
//! fixed job, shaped after Cloud Run Jobs (`jobs.run` with env and task
//! count overrides, `executions.get/list/cancel/delete`). The executor reports
//! what happened; what it means for the run is decided in `mapi-domain`'s
//! outcome table, never here.
//!
//! Failure: `submit` distinguishes "nothing was made" (`Throttled`,
//! `Unavailable`, `Refused`) from "something may have been made"
//! (`Ambiguous`): after an ambiguous submit the caller must [`adopt`] by
//! nonce before it submits again. Cancellation: dropping a `submit` future
//! after the request left makes the outcome ambiguous in the same way.
//!
//! Forgetting ([`Executor::forget`]) removes what a finished execution left
//! (the run housekeeper calls it once a run passed its tenant's run
//! retention); a running execution is never removed.

pub mod evidence;
pub mod gvisor;
pub mod local;
#[cfg(feature = "scripted")]
pub mod scripted;
pub mod security;

/// The names of the executor conformance suite's cases: a report must
/// have every one of them passed to count as evidence.
pub mod conformance_cases {
    pub const CASES: &[&str] = &[
        "submit_runs_to_success",
        "method_failure_is_reported",
        "adoption_finds_the_execution_by_nonce",
        "duplicate_submits_are_reduced_to_the_oldest",
        "cancel_stops_a_running_execution",
        "cancel_after_a_checkpoint_reports_exit_16",
        "timeout_is_enforced",
        "memory_limit_kills_with_137",
        "fan_out_runs_every_task",
        "the_bootstrap_is_taken_once",
        "a_checkpoint_is_resumed_from",
        "outputs_are_reported_at_the_generation_written",
        "a_silent_execution_is_running_not_lost",
        "a_cancelled_execution_is_stopped_when_reported",
        "throttled_submits_back_off_and_make_one_execution",
        "unknown_executions_are_not_found",
        "logs_page_through_what_the_tasks_printed",
        "forgetting_removes_a_finished_execution",
        "forgetting_keeps_a_running_execution",
    ];
}

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;
use mapi_domain::{AttemptNo, ExecutionStatus, Nonce, ResourceClass, RunId, Timestamp};
use serde::{Deserialize, Serialize};

/// What to start: one attempt of one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptSubmit {
    pub run: RunId,
    pub attempt: AttemptNo,
    pub nonce: Nonce,
    pub class: ResourceClass,
    /// The method, whose namespace selects the base image.
    pub method: String,
    /// The base image a plugin's manifest names, in place of the method's
    /// namespace.
    pub base: Option<String>,
    /// The run's timeout; the executor's own backstop adds its margin.
    pub timeout: Duration,
    pub task_count: u32,
    /// Environment overrides. Only `MAPI_RUN_ID` and `MAPI_NONCE` are set by
    /// the platform: everything else reaches the worker through its bootstrap.
    pub env: BTreeMap<String, String>,
}

pub use mapi_domain::ExecutionHandle;

/// What the executor knows about one execution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionInfo {
    pub handle: ExecutionHandle,
    pub nonce: Option<Nonce>,
    pub run: Option<RunId>,
    pub created: Timestamp,
    pub started: Option<Timestamp>,
    pub finished: Option<Timestamp>,
    pub task_count: u32,
    pub status: ExecutionStatus,
}

/// Isolation an executor gives one attempt, weakest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    Process,
    Gvisor,
    MicroVm,
}

/// What an executor offers (`GET /v1/admin/executors`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Capabilities {
    pub executor: String,
    pub isolation: Isolation,
    pub classes: Vec<ResourceClass>,
    pub enforces_memory_limit: bool,
    pub egress_enforced: bool,
    pub dns_enforced: bool,
    pub remote_control_api: bool,
    pub max_task_count: u32,
    /// The regions its executions run in. A tenant's runs go only to an
    /// executor with a region its residency admits; evidence recorded for
    /// another region list does not count.
    #[serde(default)]
    pub regions: Vec<String>,
    /// The GPUs each task of a GPU-class execution gets: 0 where the GPU
    /// class runs on the CPU (see `mapi_methods::registry::dl`).
    #[serde(default)]
    pub gpus: u32,
}

/// One region in each residency area (`eu`, `us`, `asia`): the regions an
/// executor on one machine stands in for unless told otherwise.
pub const EVERY_AREA: [&str; 3] = ["europe-west1", "us-central1", "asia-northeast1"];

impl Capabilities {
    /// Why this executor may not run code a tenant uploaded (a plugin), if
    /// it may not: such code runs only with gVisor isolation or stronger and
    /// egress enforced, whatever the tenant's tier (the tier decides which
    /// isolated executor, never whether isolation is needed).
    pub fn untrusted_code_refusal(&self) -> Option<String> {
        let weak = self.isolation < Isolation::Gvisor;
        if !weak && self.egress_enforced {
            return None;
        }
        let lacks = match (weak, self.egress_enforced) {
            (true, false) => format!("its isolation is {:?} and its egress is not enforced", self.isolation),
            (true, true) => format!("its isolation is {:?}", self.isolation),
            _ => "its egress is not enforced".to_owned(),
        };
        Some(format!(
            "plugin code runs only on an executor with gVisor isolation or stronger and enforced egress; executor {} \
             does not qualify ({}): an operator can run the gvisor executor (MAPI_EXECUTOR=gvisor)",
            self.executor,
            lacks.to_lowercase()
        ))
    }

    /// Why this executor may not run the work of a tenant with `residency`,
    /// if it may not: none of its regions is one the residency admits.
    pub fn residency_refusal(&self, residency: &mapi_domain::Residency) -> Option<String> {
        if self.regions.iter().any(|r| residency.admits(r)) {
            return None;
        }
        let here = if self.regions.is_empty() { "no region".to_owned() } else { self.regions.join(", ") };
        Some(format!(
            "the tenant's data residency is {residency}, which needs an executor in {}; executor {} runs in {here}: \
             an operator can run an executor there, or change the tenant's residency (for new runs)",
            residency.requirement(),
            self.executor
        ))
    }
}

/// How an executor's submits fare against its rate limit (executor health).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SubmitHealth {
    /// 429 answers to submits in the last hour.
    pub throttled_last_hour: u64,
    /// Submits sent in the last minute.
    pub submits_last_minute: u64,
    /// The rate the executor holds itself to, if it has one.
    pub submits_per_minute_limit: Option<u32>,
}

/// Which stream a log line was printed to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LogStream {
    Stdout,
    Stderr,
}

/// One line an execution's task printed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LogLine {
    /// The task (0 for a single-task execution).
    pub task: u32,
    pub stream: LogStream,
    /// When the line was received, where the backend records it (Cloud Logging does; local files
    /// do not).
    pub at: Option<Timestamp>,
    /// The line without its newline, cut at [`MAX_LOG_LINE_BYTES`].
    pub text: String,
}

/// The longest line a log page carries; longer lines are cut (at a character boundary) and end
/// in `…`.
pub const MAX_LOG_LINE_BYTES: usize = 8 * 1024;

/// The most lines one [`Executor::logs`] call answers.
pub const MAX_LOG_PAGE: usize = 1000;

/// A page of an execution's output.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogPage {
    pub lines: Vec<LogLine>,
    /// Where the next call continues: lines printed after these. Always set, so a follower can
    /// ask again later for what is printed meanwhile.
    pub cursor: String,
    /// More lines are already there: ask again at once with `cursor`.
    pub more: bool,
}

/// Cuts `text` to [`MAX_LOG_LINE_BYTES`] at a character boundary.
pub fn bounded_line(text: &str) -> String {
    if text.len() <= MAX_LOG_LINE_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_LOG_LINE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Why a submit did not produce a handle.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// Answered 429: nothing was made. Retry after the delay.
    #[error("executor throttled the submit")]
    Throttled { retry_after: Option<Duration> },
    /// Something may have been made: adopt by nonce before submitting again.
    #[error("the submit may or may not have created an execution: {0}")]
    Ambiguous(#[source] mapi_domain::Cause),
    /// Placement refused the attempt; retrying will not help.
    #[error("{0}")]
    Refused(String),
    /// Nothing was made; retry later.
    #[error("executor unavailable: {0}")]
    Unavailable(#[source] mapi_domain::Cause),
}

/// What [`Executor::forget`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forgot {
    /// Nothing of the execution is left: removed now, or it was unknown (forgotten before).
    Gone,
    /// The execution has not finished (local: or its events are not all forwarded yet): nothing
    /// was removed. Ask again later.
    Kept,
}

/// Why a status, list, cancel or forget call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecutorError {
    #[error("executor unavailable: {0}")]
    Unavailable(#[source] mapi_domain::Cause),
    #[error("executor internal error: {0}")]
    Internal(#[source] mapi_domain::Cause),
    /// A log cursor this executor did not give out: the caller's mistake, retrying will not help.
    #[error("{0}")]
    Cursor(String),
}

/// The Executor port.
///
/// Failure model: a `submit` error says whether an execution may exist ([`SubmitError`]). A submit
/// is not idempotent; the attempt's nonce, looked up with [`adopt`], is what makes submitting again
/// safe. `status` and `list_recent` only read and `cancel` is idempotent, so all three may be
/// retried after any error.
#[async_trait]
pub trait Executor: Send + Sync + Debug {
    fn capabilities(&self) -> Capabilities;

    /// Refuses attempts this executor must not take, with the sentence the
    /// run's error will carry.
    fn check_placement(&self, class: ResourceClass, method: &str) -> Result<(), String>;

    /// Why `method` cannot run on this executor at all (a Python package its
    /// interpreter lacks), if it cannot; the catalog shows it and placement refuses it.
    fn unavailable(&self, _method: &str) -> Option<String> {
        None
    }

    /// Starts one execution of `attempt`. Every call that reaches the backend makes a new
    /// execution: neither adapter deduplicates by nonce.
    ///
    /// # Errors
    ///
    /// - `Refused`: placement refused the class or method, the task count is out of range (local: 1
    ///   to 64), or Cloud Run answered 400. Nothing was made; a retry gets the same answer.
    /// - `Throttled`: nothing was made. Cloud Run answered 429 more than
    ///   `MAPI_CLOUDRUN_MAX_429_RETRIES` times in a row (the same nonce is retried inside the call),
    ///   or the rate limit would hold the call longer than `MAPI_CLOUDRUN_MAX_SUBMIT_WAIT_S` and
    ///   nothing was sent. The same nonce may be submitted again after `retry_after`.
    /// - `Unavailable`: nothing was made (Cloud Run: a 4xx other than 400 and 429, or a request that
    ///   could not be built). Exception: the local adapter also answers `Unavailable` for I/O errors
    ///   after it wrote the execution's spec (the spec-only execution then lists under the nonce,
    ///   as `NotFound`) or after it started the host (the execution then runs).
    /// - `Ambiguous`: the request may have reached the backend and no clear answer came (Cloud Run:
    ///   no answer, a timeout, a 5xx, an operation that names no execution). Cloud Run adopts by
    ///   nonce itself first and answers `Ok` with what it finds; `Ambiguous` then means nothing was
    ///   found yet or the listing failed. Call [`adopt`] before submitting the nonce again.
    ///
    /// The local adapter never answers `Throttled` or `Ambiguous`. Dropping the future once the
    /// request left is ambiguous as well.
    async fn submit(&self, attempt: &AttemptSubmit) -> Result<ExecutionHandle, SubmitError>;

    /// The execution's state; `ExecutionStatus::NotFound` when it is unknown.
    ///
    /// # Errors
    ///
    /// `Unavailable` (Cloud Run: no answer, or an error other than 404, a 403 included); `Internal`
    /// (local: the execution's files cannot be read or parsed). An unknown handle, a handle of
    /// another executor, and (local) an execution whose host died without an outcome are not errors:
    /// they report `ExecutionStatus::NotFound`. A read changes nothing: retrying is safe.
    async fn status(&self, handle: &ExecutionHandle) -> Result<ExecutionInfo, ExecutorError>;

    /// The executions among `handles` that are running, in as few calls as
    /// the backend allows; none of them was created before `since`. The
    /// reconcile tick polls a whole batch of active runs with it, then
    /// reads the status of each execution it does not return. The default
    /// asks each one's status; Cloud Run lists each Job's recent executions
    /// instead (calls per Job, not per run).
    ///
    /// # Errors
    ///
    /// As [`Executor::status`] and [`Executor::list_recent`]: retrying is safe.
    async fn running_among(
        &self,
        handles: &[ExecutionHandle],
        since: Timestamp,
    ) -> Result<Vec<ExecutionInfo>, ExecutorError> {
        let _ = since;
        let mut running = Vec::new();
        for h in handles {
            let info = self.status(h).await?;
            if info.status == ExecutionStatus::Running {
                running.push(info);
            }
        }
        Ok(running)
    }

    /// Executions created at or after `since`, for adoption by nonce.
    ///
    /// # Errors
    ///
    /// `Unavailable` (Cloud Run: a listing page failed; a Job not made yet lists nothing); `Internal`
    /// (local: one execution's files cannot be read, which fails the whole listing). Retrying is
    /// safe. Cloud Run lists no further back than `MAPI_CLOUDRUN_ADOPT_LOOKBACK_S` (26 h by
    /// default) whatever `since` says, and stops paging at the first older execution (it assumes
    /// newest-first order). The local listing includes spec-only executions, reported `NotFound`.
    async fn list_recent(&self, since: Timestamp) -> Result<Vec<ExecutionInfo>, ExecutorError>;

    /// Asks the execution to stop (SIGTERM, then SIGKILL after a grace
    /// period). Idempotent; cancelling an unknown execution succeeds.
    ///
    /// # Errors
    ///
    /// `Unavailable` (Cloud Run: no answer, or an error other than 404, 409 and 412, which count as
    /// done): unknown whether the cancel was taken; retrying is safe. `Internal` (local: the cancel
    /// file could not be written and synced). Cancelling a finished execution succeeds and changes
    /// nothing.
    async fn cancel(&self, handle: &ExecutionHandle) -> Result<(), ExecutorError>;

    /// How long after a run's timeout the executor's own backstop stops an
    /// execution; the reconciler cancels what runs past it.
    fn backstop_margin(&self) -> Duration;

    /// The output the execution's tasks printed, oldest first, at most `limit` lines (capped at
    /// [`MAX_LOG_PAGE`]) after `cursor` (`None`: from the start). An execution that printed
    /// nothing yet, or is unknown, answers an empty page.
    ///
    /// # Errors
    ///
    /// `Cursor` when `cursor` is not one this adapter gave out (for this execution); `Unavailable`
    /// (Cloud Logging: no answer, or refused, e.g. 403, 429 or a 5xx; Cloud Run's `executions.get`
    /// likewise on a first call); `Internal` (local: a log file cannot be read; Cloud Logging:
    /// it answered 400 to the query). Reading changes nothing: retrying is safe.
    async fn logs(
        &self,
        handle: &ExecutionHandle,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LogPage, ExecutorError>;

    /// Removes what a finished execution left (local: its directory, logs included; Cloud Run:
    /// the execution resource). Afterwards its status is `NotFound` and its logs an empty page
    /// (Cloud Run: Cloud Logging keeps the lines for its own retention, but they are no longer
    /// found from the handle). A running execution is never removed: it answers
    /// [`Forgot::Kept`]. An unknown handle, or one of another executor, answers [`Forgot::Gone`]:
    /// forgetting twice succeeds.
    ///
    /// # Errors
    ///
    /// `Unavailable` (Cloud Run: no answer, 429, a 5xx, or an error other than 404 to
    /// `executions.get` or `executions.delete`): unknown whether the execution was removed;
    /// retrying is safe. `Internal` (local: the directory could not be read or removed).
    async fn forget(&self, handle: &ExecutionHandle) -> Result<Forgot, ExecutorError>;

    /// Submit rate and throttling, for the executors view.
    fn submit_health(&self) -> SubmitHealth {
        SubmitHealth::default()
    }
}

/// Finds the execution of `nonce` made at or after `since`: the nonce, not
/// the executor's execution name, identifies an attempt's execution. When
/// several have the nonce, keeps the oldest and cancels the others: their
/// duplicate workers find no bootstrap anyway.
///
/// # Errors
///
/// The [`ExecutorError`] of `list_recent`, or of cancelling a duplicate (then the duplicates before
/// it are cancelled and the oldest is not returned). Adoption is safe to retry: it lists again, and
/// cancelling is idempotent. `Ok(None)` does not prove that an ambiguous submit made nothing: its
/// execution may not be listed yet.
pub async fn adopt(
    executor: &dyn Executor,
    nonce: &Nonce,
    since: Timestamp,
) -> Result<Option<ExecutionInfo>, ExecutorError> {
    let mut found: Vec<ExecutionInfo> =
        executor.list_recent(since).await?.into_iter().filter(|e| e.nonce.as_ref() == Some(nonce)).collect();
    found.sort_by(|a, b| (a.created, &a.handle).cmp(&(b.created, &b.handle)));
    let mut found = found.into_iter();
    let keep = found.next();
    for dup in found {
        tracing::warn!(handle = %dup.handle, nonce = %nonce, "cancelling a duplicate execution");
        executor.cancel(&dup.handle).await?;
    }
    Ok(keep)
}
