//! The cloudrun-jobs executor (`MAPI_EXECUTOR=cloudrun-jobs`): each
//! attempt is a new execution of one Job of a fixed inventory, started with
//! `jobs.run` and only these overrides: `MAPI_RUN_ID` and `MAPI_NONCE`, the
//! task count, and the task timeout (the run's plus
//! `MAPI_CLOUDRUN_TIMEOUT_MARGIN_S`). Nothing goes in args.
//!
//! It speaks the Cloud Run Admin API v2 through the official
//! `google-cloud-run-v2` crate (REST/JSON), which never retries a POST and
//! ignores `Retry-After`: the submit loop here does both.
//!
//! - **Rate limits**: every `jobs.run` passes the [`gate::SubmitGate`]. A
//!   429 made nothing: all submitters cool down, the answer is an alarm in
//!   the log, in [`CloudRunJobsExecutor::throttled_last_hour`] and in
//!   `mapi_executor_submit_throttled_total`, and the same nonce is tried
//!   again; after `MAPI_CLOUDRUN_MAX_429_RETRIES` in a row the submit
//!   returns `Throttled` and the run waits in the queue, late, not failed.
//! - **Ambiguity**: a call whose answer was lost (an I/O error, a timeout,
//!   a 5xx) may have made an execution. It is never retried blind: the
//!   executor adopts by nonce first, and if nothing is found yet it answers
//!   `Ambiguous`, so the next submit of that nonce adopts again first.
//! - **Status**: `executions.get`, then `tasks.list` for exit codes once the
//!   execution completed; a missing execution is `NotFound`. The mapping
//!   from the Admin API's shapes is in `wire`.
//! - **Logs**: what the tasks printed is read from Cloud Logging
//!   (`entries.list` through `google-cloud-logging-v2`, at
//!   `MAPI_CLOUDRUN_LOGGING_ENDPOINT`), oldest first, from the execution's
//!   creation on, with cursors that resume after the last entry returned
//!   (the `logs` module).
//!
//! - **Forget**: `executions.get`, then `executions.delete` only for an
//!   execution that completed (the API documents no refusal of a running
//!   one, so the adapter never asks: see [`assumptions`]); 404 to either is
//!   already forgotten. The delete's long-running operation is not waited
//!   for: once it is accepted the execution is Cloud Run's to remove.
//!
//! The inventory ([`inventory`]) is one Job per base image and resource
//! class, named by `MAPI_CLOUDRUN_JOB_TEMPLATE`; placement refuses XL (it
//! needs another executor) and the GPU class for anything but `dl.*`. The
//! execution name is read from the operation's metadata as soon as
//! `jobs.run` answers, so the handle exists before the execution ends. The
//! gate is a token bucket kept as a reservation schedule (GCRA, so no slot
//! is wasted while callers wait) plus the cool-down every submitter shares
//! after a 429. Adoption keeps the oldest execution of a nonce and cancels
//! the others (their workers find no bootstrap). Every behaviour of Cloud
//! Run the executor relies on without having seen it in a real project is
//! one constant in [`assumptions`]; [`settings`] holds every variable with
//! its default.
//!
//! Architecture invariant: a submit returns a handle only for an execution
//! that exists, `Throttled` only when nothing was made, and `Ambiguous`
//! otherwise; after an ambiguous answer no `jobs.run` is sent for that
//! nonce before adoption has looked for it.
//!
//! Tested against `FakeCloudRun` (in `mapi-tests`), which speaks the Admin
//! API's REST JSON and injects 429s, lost answers, OOM kills and vanished
//! executions, and writes what its tasks print to `FakeCloudLogging`.

/// A Google API client of type `$t` (the Admin API's Jobs, Services, …, and
/// Cloud Logging's `LoggingServiceV2`), for both adapters: it never retries
/// (the adapters decide what a failed call means), talks to `$endpoint` when
/// set (a fake's, in tests), and is anonymous only when asked; the build's
/// error is a [`BuildError`].
macro_rules! admin_client {
    ($t:ty, $endpoint:expr, $credentials:expr) => {{
        let mut b = <$t>::builder().with_retry_policy(google_cloud_gax::retry_policy::NeverRetry);
        if let Some(e) = &$endpoint {
            b = b.with_endpoint(e.clone());
        }
        if $credentials == Credentials::Anonymous {
            b = b.with_credentials(google_cloud_auth::credentials::anonymous::Builder::new().build());
        }
        b.build().await.map_err(|e| BuildError(e.to_string()))?
    }};
}

pub mod assumptions;
pub mod gate;
pub mod inventory;
mod logs;
pub mod services;
pub mod settings;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use google_cloud_gax::error::Error as GaxError;
use google_cloud_logging_v2::client::LoggingServiceV2;
use google_cloud_run_v2::client::{Executions, Jobs, Tasks};
use google_cloud_run_v2::model;
use mapi_clock::Clock;
use mapi_domain::{ExecutionStatus, ResourceClass, Timestamp};
use mapi_executor::{
    AttemptSubmit, Capabilities, ExecutionHandle, ExecutionInfo, Executor, ExecutorError, Forgot, Isolation,
    SubmitError,
};
use prometheus_client::metrics::counter::Counter;

pub use gate::SubmitGate;
pub use inventory::{Inventory, JobRef};
pub use settings::Settings;

/// The executor's name in capabilities, metrics and the admin API.
pub const NAME: &str = "cloudrun-jobs";

/// The message of the error line logged on every 429 from jobs.run. The
/// deployment's log-based metric (and so the MapiJobsRun429 alert) counts
/// lines with exactly this message, besides `mapi_executor_submit_throttled_total`.
pub const THROTTLED_ALARM: &str = "ALARM cloudrun-jobs: jobs.run answered 429";

/// How the clients authenticate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// Application Default Credentials (the service's own account on Cloud Run).
    ApplicationDefault,
    /// No credentials: only for a local fake.
    Anonymous,
}

/// The cloudrun-jobs executor.
#[derive(Clone)]
pub struct CloudRunJobsExecutor {
    inner: Arc<Inner>,
}

struct Inner {
    settings: Settings,
    inventory: Inventory,
    gate: SubmitGate,
    jobs: Jobs,
    executions: Executions,
    tasks: Tasks,
    logging: LoggingServiceV2,
    clock: Arc<dyn Clock>,
    throttled_total: Counter,
}

impl std::fmt::Debug for CloudRunJobsExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudRunJobsExecutor")
            .field("project", &self.inner.settings.project)
            .field("region", &self.inner.settings.region)
            .finish_non_exhaustive()
    }
}

/// Why the executor could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the Cloud Run clients: {0}")]
pub struct BuildError(String);

impl CloudRunJobsExecutor {
    /// Builds the Admin API's three clients and Cloud Logging's. `throttled_total` is the
    /// `mapi_executor_submit_throttled_total{executor="cloudrun-jobs"}`
    /// counter of the process's metrics.
    pub async fn new(
        settings: Settings,
        credentials: Credentials,
        clock: Arc<dyn Clock>,
        throttled_total: Counter,
    ) -> Result<CloudRunJobsExecutor, BuildError> {
        settings.validate().map_err(BuildError)?;
        let jobs = admin_client!(Jobs, settings.endpoint, credentials);
        let executions = admin_client!(Executions, settings.endpoint, credentials);
        let tasks = admin_client!(Tasks, settings.endpoint, credentials);
        let logging = admin_client!(LoggingServiceV2, settings.logging_endpoint, credentials);
        Ok(CloudRunJobsExecutor {
            inner: Arc::new(Inner {
                inventory: Inventory::new(&settings),
                gate: SubmitGate::new(&settings),
                settings,
                jobs,
                executions,
                tasks,
                logging,
                clock,
                throttled_total,
            }),
        })
    }

    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    pub fn inventory(&self) -> &Inventory {
        &self.inner.inventory
    }

    /// Whether `handle` names an execution of one of this inventory's Jobs
    /// (any other name is unknown here, never sent to the API).
    pub fn owns(&self, handle: &ExecutionHandle) -> bool {
        let Some((job, execution)) = handle.0.split_once("/executions/") else { return false };
        !execution.is_empty()
            && !execution.contains('/')
            && self.inner.inventory.jobs().iter().any(|j| self.inner.inventory.job_name(j) == job)
    }

    /// 429 answers from `jobs.run` in the last hour (executor health).
    pub fn throttled_last_hour(&self) -> usize {
        self.inner.gate.throttled_last_hour(self.inner.clock.now())
    }

    /// `jobs.run` calls in the last minute, against the configured rate.
    pub fn submit_rate(&self) -> (usize, u32) {
        (self.inner.gate.calls_last_minute(self.inner.clock.now()), self.inner.settings.submits_per_minute)
    }

    async fn run_job(&self, job: &JobRef, a: &AttemptSubmit) -> Result<model::Execution, GaxError> {
        let inner = &self.inner;
        let env = a.env.iter().map(|(k, v)| model::EnvVar::new().set_name(k.clone()).set_value(v.clone()));
        let timeout = a.timeout + inner.settings.timeout_margin;
        let overrides = model::run_job_request::Overrides::new()
            .set_container_overrides([
                model::run_job_request::overrides::ContainerOverride::new().set_env(env)
            ])
            .set_task_count(i32::try_from(a.task_count).unwrap_or(i32::MAX))
            .set_timeout(google_cloud_wkt::Duration::clamp(
                i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
                0,
            ));
        let request =
            model::RunJobRequest::new().set_name(inner.inventory.job_name(job)).set_overrides(overrides);
        let op = inner.jobs.run_job().with_request(request).send().await?;
        tracing::info!(operation = %op.name, run = %a.run, attempt = %a.attempt, job = %job.id, "jobs.run answered");
        let Some(meta) = op.metadata else {
            return Err(GaxError::deser("the jobs.run operation has no metadata naming the execution"));
        };
        let execution: model::Execution = meta.to_msg().map_err(GaxError::deser)?;
        if execution.name.is_empty() {
            return Err(GaxError::deser("the jobs.run operation's execution has no name"));
        }
        Ok(execution)
    }

    /// Executions of every Job created at or after `since`, newest first per Job.
    async fn list_since(&self, since: Timestamp) -> Result<Vec<ExecutionInfo>, ExecutorError> {
        let mut out = Vec::new();
        for job in self.inner.inventory.jobs() {
            let parent = self.inner.inventory.job_name(job);
            let mut token = String::new();
            'pages: loop {
                let page = self
                    .inner
                    .executions
                    .list_executions()
                    .with_request(
                        model::ListExecutionsRequest::new()
                            .set_parent(parent.clone())
                            .set_page_size(100)
                            .set_page_token(token.clone()),
                    )
                    .send()
                    .await;
                let page = match page {
                    Ok(p) => p,
                    // A Job the infrastructure has not made yet has no executions.
                    Err(e) if e.http_status_code() == Some(404) => break,
                    Err(e) => {
                        return Err(ExecutorError::Unavailable(mapi_domain::Cause::new(
                            format!("executions.list {parent}"),
                            e,
                        )));
                    }
                };
                for e in page.executions {
                    let info = wire::info(&e, None);
                    if info.created < since {
                        if assumptions::EXECUTIONS_LISTED_NEWEST_FIRST {
                            break 'pages;
                        }
                        continue;
                    }
                    out.push(info);
                }
                if page.next_page_token.is_empty() {
                    break;
                }
                token = page.next_page_token;
            }
        }
        Ok(out)
    }

    /// The execution's `createTime`; `None` when Cloud Run does not know it.
    async fn created(
        &self,
        handle: &ExecutionHandle,
    ) -> Result<Option<google_cloud_wkt::Timestamp>, ExecutorError> {
        let got = self
            .inner
            .executions
            .get_execution()
            .with_request(model::GetExecutionRequest::new().set_name(handle.0.clone()))
            .send()
            .await;
        match got {
            // An execution Cloud Run has not stamped yet printed nothing: read from now.
            Ok(e) => Ok(Some(e.create_time.unwrap_or_else(|| wire_time(self.inner.clock.now())))),
            Err(e) if e.http_status_code() == Some(404) => Ok(None),
            Err(e) => Err(ExecutorError::Unavailable(mapi_domain::Cause::new(
                format!("executions.get {handle}"),
                e,
            ))),
        }
    }

    /// Adoption after an ambiguous `jobs.run`: the oldest execution of this
    /// nonce, duplicates cancelled.
    async fn adopt_after(
        &self,
        a: &AttemptSubmit,
        since: Timestamp,
    ) -> Result<Option<ExecutionInfo>, ExecutorError> {
        mapi_executor::adopt(self, &a.nonce, since).await
    }
}

pub(crate) fn wire_time(t: Timestamp) -> google_cloud_wkt::Timestamp {
    let micros = t.as_micros();
    let nanos = i32::try_from(micros.rem_euclid(1_000_000) * 1000).unwrap_or(0);
    google_cloud_wkt::Timestamp::clamp(micros.div_euclid(1_000_000), nanos)
}

/// What a failed call means for a submit.
fn ambiguous(e: &GaxError) -> bool {
    match e.http_status_code() {
        // A definite answer from the service: nothing was made.
        Some(code) if (400..500).contains(&code) => false,
        Some(_) => true,
        // The request could not be built: nothing left this process. Any
        // other failure (including a refused connection, which the crate
        // reports only through hidden API) is treated as ambiguous: the
        // cost is one adoption listing, never a blind retry.
        None if e.is_serialization() => false,
        None => true,
    }
}

fn retry_after(e: &GaxError) -> Option<Duration> {
    let v = e.http_headers()?.get("retry-after")?.to_str().ok()?;
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[async_trait]
impl Executor for CloudRunJobsExecutor {
    fn capabilities(&self) -> Capabilities {
        let s = &self.inner.settings;
        Capabilities {
            executor: NAME.to_owned(),
            isolation: Isolation::MicroVm,
            classes: self.inner.inventory.classes(),
            enforces_memory_limit: true,
            egress_enforced: s.egress_enforced,
            dns_enforced: s.dns_enforced,
            remote_control_api: true,
            max_task_count: 10_000,
            regions: vec![s.region.clone()],
            // The GPU Job has one NVIDIA L4 per task.
            gpus: u32::from(s.gpu_jobs),
        }
    }

    fn backstop_margin(&self) -> Duration {
        self.inner.settings.timeout_margin
    }

    fn submit_health(&self) -> mapi_executor::SubmitHealth {
        let now = self.inner.clock.now();
        mapi_executor::SubmitHealth {
            throttled_last_hour: self.inner.gate.throttled_last_hour(now) as u64,
            submits_last_minute: self.inner.gate.calls_last_minute(now) as u64,
            submits_per_minute_limit: Some(self.inner.settings.submits_per_minute),
        }
    }

    fn check_placement(&self, class: ResourceClass, method: &str) -> Result<(), String> {
        self.inner.inventory.place(class, method).map(|_| ())
    }

    async fn submit(&self, a: &AttemptSubmit) -> Result<ExecutionHandle, SubmitError> {
        let inner = &self.inner;
        let base = a.base.as_deref().unwrap_or_else(|| inner.inventory.base_of(&a.method));
        let job = inner.inventory.place_on(a.class, base).map_err(SubmitError::Refused)?;
        let began = inner.clock.now();
        let mut throttled = 0u32;
        loop {
            let now = inner.clock.now();
            let wait = inner.gate.next_slot(now).since(now);
            if wait > inner.settings.max_submit_wait {
                // Too long to hold a dispatch open: back to the queue, late, not failed.
                return Err(SubmitError::Throttled { retry_after: Some(wait) });
            }
            let slot = inner.gate.reserve(now);
            inner.clock.sleep_until(slot).await;
            while let Some(until) = inner.gate.cool_until(inner.clock.now()) {
                inner.clock.sleep_until(until).await;
            }
            let sent = inner.clock.now();
            match self.run_job(job, a).await {
                Ok(execution) => {
                    inner.gate.answered(sent);
                    return Ok(ExecutionHandle(execution.name));
                }
                Err(e) if e.http_status_code() == Some(429) => {
                    let (in_a_row, until) = inner.gate.throttled(sent, retry_after(&e));
                    inner.throttled_total.inc();
                    throttled += 1;
                    tracing::error!(
                        run = %a.run, nonce = %a.nonce, in_a_row, cool_down_s = until.since(sent).as_secs_f64(),
                        "{THROTTLED_ALARM}"
                    );
                    if throttled > inner.settings.max_429_retries {
                        return Err(SubmitError::Throttled {
                            retry_after: Some(until.since(inner.clock.now())),
                        });
                    }
                }
                Err(e) if !ambiguous(&e) => {
                    inner.gate.answered(sent);
                    let code = e.http_status_code();
                    return Err(match code {
                        Some(400) => SubmitError::Refused(format!("jobs.run refused the attempt: {e}")),
                        _ => SubmitError::Unavailable(mapi_domain::Cause::new("jobs.run", e)),
                    });
                }
                Err(e) => {
                    inner.gate.answered(sent);
                    tracing::warn!(run = %a.run, nonce = %a.nonce, error = %e, "jobs.run answer lost or unclear: adopting by nonce before anything else");
                    let since = began - Duration::from_secs(60);
                    return match self.adopt_after(a, since).await {
                        Ok(Some(found)) => Ok(found.handle),
                        Ok(None) => Err(SubmitError::Ambiguous(
                            format!("jobs.run: {e}; no execution with this nonce yet").into(),
                        )),
                        Err(le) => Err(SubmitError::Ambiguous(
                            format!("jobs.run: {e}; adoption could not list: {le}").into(),
                        )),
                    };
                }
            }
        }
    }

    async fn status(&self, handle: &ExecutionHandle) -> Result<ExecutionInfo, ExecutorError> {
        let inner = &self.inner;
        if !self.owns(handle) {
            return Ok(wire::not_found(handle, inner.clock.now()));
        }
        let got = inner
            .executions
            .get_execution()
            .with_request(model::GetExecutionRequest::new().set_name(handle.0.clone()))
            .send()
            .await;
        let execution = match got {
            Ok(e) => e,
            Err(e) if e.http_status_code() == Some(404) => {
                return Ok(wire::not_found(handle, inner.clock.now()));
            }
            Err(e) => {
                return Err(ExecutorError::Unavailable(mapi_domain::Cause::new(
                    format!("executions.get {handle}"),
                    e,
                )));
            }
        };
        if execution.completion_time.is_none() {
            return Ok(wire::info(&execution, None));
        }
        let mut tasks = Vec::new();
        let mut token = String::new();
        loop {
            let page = inner
                .tasks
                .list_tasks()
                .with_request(
                    model::ListTasksRequest::new()
                        .set_parent(handle.0.clone())
                        .set_page_size(500)
                        .set_page_token(token),
                )
                .send()
                .await
                .map_err(|e| {
                    ExecutorError::Unavailable(mapi_domain::Cause::new(format!("tasks.list {handle}"), e))
                })?;
            tasks.extend(page.tasks);
            if page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
        Ok(wire::info(&execution, Some(&tasks)))
    }

    async fn list_recent(&self, since: Timestamp) -> Result<Vec<ExecutionInfo>, ExecutorError> {
        let floor = self.inner.clock.now() - self.inner.settings.adopt_lookback;
        self.list_since(since.max(floor)).await
    }

    /// One listing of each Job's executions since `since` (newest first,
    /// paged) instead of one `executions.get` per handle. An execution the
    /// listing does not reach (older than the adoption lookback) is simply
    /// not returned: the caller reads its status.
    async fn running_among(
        &self,
        handles: &[ExecutionHandle],
        since: Timestamp,
    ) -> Result<Vec<ExecutionInfo>, ExecutorError> {
        let wanted: std::collections::HashSet<&str> = handles.iter().map(|h| h.0.as_str()).collect();
        let listed = self.list_recent(since).await?;
        Ok(listed
            .into_iter()
            .filter(|i| i.status == ExecutionStatus::Running && wanted.contains(i.handle.0.as_str()))
            .collect())
    }

    async fn cancel(&self, handle: &ExecutionHandle) -> Result<(), ExecutorError> {
        if !self.owns(handle) {
            return Ok(());
        }
        let r = self
            .inner
            .executions
            .cancel_execution()
            .with_request(model::CancelExecutionRequest::new().set_name(handle.0.clone()))
            .send()
            .await;
        match r {
            Ok(_) => Ok(()),
            // Unknown, or already finished: nothing left to stop.
            Err(e) if matches!(e.http_status_code(), Some(404 | 409 | 412)) => Ok(()),
            Err(e) => Err(ExecutorError::Unavailable(mapi_domain::Cause::new(
                format!("executions.cancel {handle}"),
                e,
            ))),
        }
    }

    async fn forget(&self, handle: &ExecutionHandle) -> Result<Forgot, ExecutorError> {
        if !self.owns(handle) {
            return Ok(Forgot::Gone);
        }
        let executions = &self.inner.executions;
        let got = executions
            .get_execution()
            .with_request(model::GetExecutionRequest::new().set_name(handle.0.clone()))
            .send()
            .await;
        match got {
            Ok(e) if e.completion_time.is_none() => return Ok(Forgot::Kept),
            Ok(_) => {}
            Err(e) if e.http_status_code() == Some(404) => return Ok(Forgot::Gone),
            Err(e) => {
                return Err(ExecutorError::Unavailable(mapi_domain::Cause::new(
                    format!("executions.get {handle}"),
                    e,
                )));
            }
        }
        let deleted = executions
            .delete_execution()
            .with_request(model::DeleteExecutionRequest::new().set_name(handle.0.clone()))
            .send()
            .await;
        match deleted {
            Ok(_) => Ok(Forgot::Gone),
            Err(e) if e.http_status_code() == Some(404) => Ok(Forgot::Gone),
            Err(e) => Err(ExecutorError::Unavailable(mapi_domain::Cause::new(
                format!("executions.delete {handle}"),
                e,
            ))),
        }
    }

    /// Reads Cloud Logging (see `logs`); the first call of an execution (no cursor) also reads
    /// its `createTime` with `executions.get`, the lower bound of every later query.
    async fn logs(
        &self,
        handle: &ExecutionHandle,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<mapi_executor::LogPage, ExecutorError> {
        let short = handle.0.rsplit('/').next().unwrap_or_default();
        let mut at = logs::Cursor::parse(cursor, short)?;
        let Some(target) = logs::Target::of(handle).filter(|_| self.owns(handle)) else {
            return Ok(at.empty_page());
        };
        if !at.has_floor() {
            match self.created(handle).await? {
                Some(created) => at.read_from_creation(created),
                None => return Ok(at.empty_page()),
            }
        }
        logs::read(&self.inner.logging, &target, at, limit).await
    }
}

/// The status a finished execution is reported with (exported for tests of
/// the mapping).
pub fn status_of(execution: &model::Execution, tasks: &[model::Task]) -> ExecutionStatus {
    wire::status(execution, Some(tasks))
}
