//! The dispatch task: start one attempt of a run (the attempt sequence's
//! first three steps: write the intent, submit, record the handle).
//!
//! 1. In one transaction: write the intent row (attempt, nonce, event key,
//!    lease) and move the run to `dispatching`. A redelivered task finds the
//!    row: with a handle it does nothing; with a live lease it answers 503
//!    (another dispatcher is at work); with an expired lease it takes the
//!    lease and, because an earlier submit may have made an execution,
//!    adopts by nonce before it submits again.
//! 2. Write the bootstrap object of each task (create-only), then mark the
//!    row bootstrapped: a later delivery writes none again, since one
//!    missing then was taken by a worker.
//! 3. Submit to the executor and keep the execution name as the handle.
//!
//! Answers 2xx when the task is done (including "nothing to do") and 503
//! when the queue should deliver it again later.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use bytes::Bytes;
use mapi_domain::{BOOTSTRAP_VERSION, Bootstrap, Nonce, PluginBoot, Reason, RunState};
use mapi_events::AttemptKey;
use mapi_executor::{AttemptSubmit, ExecutionHandle, SubmitError};
use mapi_identity::InternalCaller;
use mapi_lifecycle::commands::{self, Claim, Intent, Skip};
use mapi_lifecycle::{RunDoc, Step};
use mapi_metrics::{ExecutorLabels, SubmitResult};
use mapi_objects::{IfGeneration, ObjectError, ObjectKey, SignedMethod};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json};
use mapi_schema::tasks::DispatchTask;
use mapi_schema::{AttemptDoc, DatasetDoc, layout, tx_get};
use mapi_store::transact;
use serde::Serialize;

/// What a delivery did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handled {
    /// Nothing to do.
    Skipped(Skip),
    /// An earlier delivery's execution was found by nonce.
    Adopted,
    Submitted,
    /// Placement refused the attempt: the run failed.
    Refused,
}

impl Handled {
    pub fn as_str(self) -> &'static str {
        match self {
            Handled::Skipped(why) => why.as_str(),
            Handled::Adopted => "adopted",
            Handled::Submitted => "submitted",
            Handled::Refused => "refused by placement",
        }
    }
}

impl Serialize for Handled {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// What the handler answers, for the queue's logs and the tests.
#[derive(Debug, Serialize)]
pub struct Outcome {
    pub outcome: Handled,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution: Option<ExecutionHandle>,
}

fn done(outcome: Handled) -> Json<Outcome> {
    Json(Outcome { outcome, execution: None })
}

fn metric(state: &AppState, result: SubmitResult) {
    let labels = ExecutorLabels { executor: state.executor.capabilities().executor, result };
    state.metrics.executor_submits.get_or_create(&labels).inc();
}

pub async fn handle(
    State(state): State<AppState>,
    _internal: InternalCaller,
    Json(task): Json<DispatchTask>,
) -> Result<(StatusCode, Json<Outcome>), ApiError> {
    let now = state.clock.now();
    // Generated outside the transaction, which may run more than once.
    let nonce_bytes: [u8; 16] = mapi_entropy::bytes(&*state.entropy)?;
    let key_bytes: [u8; 32] = mapi_entropy::bytes(&*state.entropy)?;
    let intent = Intent {
        nonce: Nonce::from_bytes(nonce_bytes),
        event_key: AttemptKey::from_bytes(key_bytes).to_hex(),
        lease: state.config.dispatch_lease,
        gpus: state.executor.capabilities().gpus,
    };
    let (task_ref, intent) = (&task, &intent);

    if let Some(run) = mapi_schema::get::<RunDoc>(&*state.store, task.run.as_str()).await?
        && run.state() == RunState::Queued
        && let Some((wait, why)) = mapi_admission::held(&state, run.tenant(), run.plugin().is_some()).await?
    {
        tracing::info!(run = %run.id(), "{why}");
        note_wait(&state, &run, &why).await?;
        return Err(ApiError::unavailable(why, wait));
    }
    let claim = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let run = tx_get::<RunDoc>(&mut tx, task_ref.run.as_str()).await?;
        let row = tx_get::<AttemptDoc>(&mut tx, &AttemptDoc::id_of(&task_ref.run, task_ref.attempt)).await?;
        let claim = commands::claim(run, row, task_ref.attempt, intent, now)?;
        if let Claim::Mine { step, .. } = &claim {
            step.write(&mut tx)?;
        }
        Ok(tx.finish(claim))
    })
    .await?;

    let (run, attempt, fresh) = match claim {
        Claim::Nothing(why) => return Ok((StatusCode::OK, done(Handled::Skipped(why)))),
        Claim::Busy(wait) => {
            let secs = wait.as_secs().max(1);
            return Err(ApiError::unavailable("another dispatcher holds this attempt", secs));
        }
        Claim::Mine { step, run, attempt, fresh } => {
            step.committed(&state.metrics);
            (*run, *attempt, fresh)
        }
    };
    // A run asked under a residency no region of this executor admits is
    // failed, naming what it needs, before anything is made for it.
    if let Some(why) = run.residency().and_then(|r| state.executor.capabilities().residency_refusal(r)) {
        refuse(&state, &attempt, why).await?;
        return Ok((StatusCode::OK, done(Handled::Refused)));
    }
    if !fresh {
        // An earlier delivery may have made the execution before it failed:
        // never submit again without looking.
        let since = attempt.created_at - Duration::from_secs(60);
        match mapi_executor::adopt(&*state.executor, &attempt.nonce, since).await {
            Ok(Some(found)) => {
                record_handle(&state, &attempt, &found.handle, Reason::Adopted).await?;
                return Ok((
                    StatusCode::OK,
                    Json(Outcome { outcome: Handled::Adopted, execution: Some(found.handle) }),
                ));
            }
            Ok(None) => {}
            Err(e) => {
                return Err(ApiError::unavailable_because(
                    "cannot list executions to adopt: retry shortly",
                    5,
                    &e,
                ));
            }
        }
    }

    // Bootstraps are written once per attempt, before its first submit. A
    // later delivery that adopted nothing submits without writing them: a
    // bootstrap it finds missing was taken by an execution the executor
    // does not list (yet), and a new copy would let a second one do the
    // same work. The execution it makes then finds nothing and does nothing.
    if attempt.bootstrapped_at.is_none() {
        let reused = write_bootstraps(&state, &run, &attempt).await?;
        let now = state.clock.now();
        apply(&state, &attempt, |_, row| Ok(commands::bootstrapped(row, now, reused.clone()))).await?;
    }
    let mut env = BTreeMap::new();
    env.insert("MAPI_RUN_ID".to_owned(), run.id().to_string());
    env.insert("MAPI_NONCE".to_owned(), attempt.nonce.to_string());
    let submit = AttemptSubmit {
        run: run.id().clone(),
        attempt: attempt.attempt,
        nonce: attempt.nonce.clone(),
        class: attempt.class,
        method: run.method().to_owned(),
        base: run.plugin().map(|p| p.base.clone()),
        timeout: Duration::from_secs(u64::from(run.timeout_s())),
        task_count: attempt.task_count,
        env,
    };
    match submit_renewing_lease(&state, &attempt, &submit).await {
        Ok(handle) => {
            metric(&state, SubmitResult::Ok);
            record_handle(&state, &attempt, &handle, Reason::ExecutionCreated).await?;
            // The run is under way: ticks follow it until it ends.
            state.ask_for_tick().await;
            Ok((StatusCode::OK, Json(Outcome { outcome: Handled::Submitted, execution: Some(handle) })))
        }
        Err(SubmitError::Refused(why)) => {
            metric(&state, SubmitResult::Refused);
            refuse(&state, &attempt, why).await?;
            Ok((StatusCode::OK, done(Handled::Refused)))
        }
        Err(e) => {
            let (result, retry) = match &e {
                // Each 429 was counted by the executor as it came.
                SubmitError::Throttled { retry_after } => {
                    (SubmitResult::Throttled, retry_after.map_or(5, |d| d.as_secs().max(1)))
                }
                SubmitError::Ambiguous(_) => (SubmitResult::Ambiguous, 5),
                _ => (SubmitResult::Error, 5),
            };
            metric(&state, result);
            if matches!(e, SubmitError::Throttled { .. }) {
                // A cool-down is expected under load: the run says why it waits.
                requeue_throttled(&state, &attempt, retry).await?;
                tracing::info!(run = %run.id(), attempt = %attempt.attempt, retry_after_s = retry, "the executor throttled the submit; the queue will retry");
            } else {
                release_lease(&state, &attempt).await?;
                tracing::warn!(run = %run.id(), attempt = %attempt.attempt, error = %e, "submit failed; the queue will retry");
            }
            Err(ApiError::unavailable_because("the executor did not start the attempt: retry", retry, &e))
        }
    }
}

/// Records on the run why it waits, so `runs get` and the API can say it
/// (once per reason: a run held for hours by one thing is written once).
async fn note_wait(state: &AppState, seen: &RunDoc, why: &str) -> Result<(), ApiError> {
    if seen.waiting().is_some_and(|w| w.reason == why) {
        return Ok(());
    }
    let now = state.clock.now();
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        if let Some(run) = tx_get::<RunDoc>(&mut tx, seen.id().as_str()).await? {
            commands::mark_waiting(run, Some(why.to_owned()), now).write(&mut tx)?;
        }
        Ok(tx.finish(()))
    })
    .await
}

/// How many lease lengths one stuck submit may keep its attempt.
pub const MAX_RENEWALS_IN_LEASES: u32 = 10;

/// Submits while extending the attempt's lease, so the reconciler never
/// takes an attempt whose submit is only slow (waiting for its slot in the
/// executor's rate limit, or in a cool-down). Renewals stop after
/// [`MAX_RENEWALS_IN_LEASES`] lease lengths: the lease then expires, and the
/// reconciler's redispatch adopts what the submit made, by nonce.
async fn submit_renewing_lease(
    state: &AppState,
    attempt: &AttemptDoc,
    submit: &AttemptSubmit,
) -> Result<ExecutionHandle, SubmitError> {
    let lease = state.config.dispatch_lease;
    let began = state.clock.now();
    let give_up = began + lease * MAX_RENEWALS_IN_LEASES;
    let renew = async {
        let mut next = began + lease / 3;
        loop {
            state.clock.sleep_until(next).await;
            let now = state.clock.now();
            if now >= give_up {
                tracing::warn!(run = %attempt.run, attempt = %attempt.attempt, "submit stuck for ten leases: no more renewals");
                return std::future::pending::<()>().await;
            }
            if let Err(e) = extend_lease(state, attempt, now + lease).await {
                tracing::warn!(run = %attempt.run, error = %e, "could not extend the dispatch lease");
            }
            next = now + lease / 3;
        }
    };
    // Biased: the submit is polled first, so no unseeded choice decides
    // between an answer and a renewal due at the same instant.
    tokio::select! {
        biased;
        r = state.executor.submit(submit) => r,
        // The submit in flight is dropped: it may have made the execution,
        // so this is ambiguous (the next delivery adopts by nonce first).
        () = renew => Err(SubmitError::Ambiguous("lease renewal ended while the submit was in flight".into())),
    }
}

/// Reads the run and the intent row of `attempt`, applies `command` to
/// them, and commits its step. Nothing is written when either is gone.
async fn apply<F>(state: &AppState, attempt: &AttemptDoc, command: F) -> Result<Option<Step>, ApiError>
where
    F: Fn(RunDoc, AttemptDoc) -> Result<Step, ApiError>,
{
    let id = AttemptDoc::id_of(&attempt.run, attempt.attempt);
    let (id, run_id, command) = (&id, attempt.run.as_str(), &command);
    let step = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let row = tx_get::<AttemptDoc>(&mut tx, id).await?;
        let run = tx_get::<RunDoc>(&mut tx, run_id).await?;
        let (Some(row), Some(run)) = (row, run) else { return Ok(tx.finish(None)) };
        let step = command(run, row)?;
        step.write(&mut tx)?;
        Ok(tx.finish(Some(step)))
    })
    .await?;
    if let Some(step) = &step {
        step.committed(&state.metrics);
        let _ = mapi_lifecycle::carry_out(&step.follow_ups, state.outbox()).await;
    }
    Ok(step)
}

/// Moves the lease of an attempt not yet submitted to `until`.
async fn extend_lease(
    state: &AppState,
    attempt: &AttemptDoc,
    until: mapi_domain::Timestamp,
) -> Result<(), ApiError> {
    apply(state, attempt, |_, row| Ok(commands::extend_lease(row, until))).await.map(drop)
}

/// A 429 made nothing: the run goes back to the queue with its attempt
/// and nonce, spending no infrastructure retry.
async fn requeue_throttled(state: &AppState, attempt: &AttemptDoc, retry_s: u64) -> Result<(), ApiError> {
    let now = state.clock.now();
    let why = format!(
        "the executor is cooling down after answering 429 (too many starts): the next try is in {retry_s} s"
    );
    let why = &why;
    apply(state, attempt, |run, row| Ok(commands::requeue_throttled(run, row, why, now)?)).await.map(drop)
}

/// Lets the next delivery take the attempt at once (it will adopt first).
async fn release_lease(state: &AppState, attempt: &AttemptDoc) -> Result<(), ApiError> {
    let now = state.clock.now();
    apply(state, attempt, |_, row| Ok(commands::release_lease(row, now))).await.map(drop)
}

/// Keeps the execution's name as the attempt's handle and moves the run on
/// (a run cancelled meanwhile has what was just started stopped).
async fn record_handle(
    state: &AppState,
    attempt: &AttemptDoc,
    handle: &ExecutionHandle,
    reason: Reason,
) -> Result<(), ApiError> {
    let now = state.clock.now();
    let step =
        apply(state, attempt, |run, row| Ok(commands::record_execution(run, row, handle, reason, now)?))
            .await?
            .ok_or_else(|| ApiError::internal("the run or its intent row vanished"))?;
    if step.transition.is_some() {
        tracing::info!(run = %attempt.run, attempt = %attempt.attempt, execution = %handle, reason = %reason, "attempt running");
    }
    Ok(())
}

/// Placement refused the attempt: the run fails with INFRA_ERROR.
async fn refuse(state: &AppState, attempt: &AttemptDoc, why: String) -> Result<(), ApiError> {
    let now = state.clock.now();
    apply(state, attempt, |run, row| Ok(commands::refuse_placement(run, row, &why, now)?))
        .await?
        .map(drop)
        .ok_or_else(|| ApiError::internal("the run or its intent row vanished"))
}

/// Writes each task's bootstrap object (create-only: one left by an earlier
/// delivery of this attempt is the same attempt's and is kept).
/// Writes every task's bootstrap of `attempt`; answers the children of a
/// fan-out parent that are handed an earlier attempt's results.
async fn write_bootstraps(
    state: &AppState,
    run: &RunDoc,
    attempt: &AttemptDoc,
) -> Result<Vec<u32>, ApiError> {
    let dataset =
        mapi_schema::get::<DatasetDoc>(&*state.store, run.dataset().as_str()).await?.ok_or_else(|| {
            ApiError::internal(format!("dataset {} of run {} vanished", run.dataset(), run.id()))
        })?;
    // URLs must outlive the run: its timeout, the executor's margin, an hour to spare.
    let ttl = Duration::from_secs(u64::from(run.timeout_s()))
        + state.executor.backstop_margin()
        + Duration::from_secs(3600);
    let dataset_url =
        state.objects.signed_url(SignedMethod::Get, &ObjectKey::parse(&dataset.object)?, ttl).await?;
    let (outputs_of, plugin) = match run.plugin() {
        Some(code) => {
            let url =
                state.objects.signed_url(SignedMethod::Get, &ObjectKey::parse(&code.object)?, ttl).await?;
            let boot = PluginBoot {
                package_url: url,
                sha256: code.sha256.clone(),
                method: code.method.clone(),
                log_limit_bytes: state.config.plugin_log_limit,
            };
            (code.outputs.clone(), Some(boot))
        }
        None => {
            let spec = mapi_methods::find(run.method())
                .ok_or_else(|| ApiError::internal("method vanished from the registry"))?;
            (spec.outputs.iter().map(|o| o.name.to_owned()).collect(), None)
        }
    };
    let earlier = crate::reuse::earlier(state, run, attempt.attempt).await?;
    let mut reused = Vec::new();
    for task in 0..attempt.task_count {
        let reuse = match &earlier {
            Some(e) => crate::reuse::results(state, e, task, ttl).await?,
            None => None,
        };
        if reuse.is_some() {
            reused.push(task);
        }
        let dir = layout::task_dir(
            run.tenant(),
            run.project(),
            run.id(),
            attempt.attempt,
            task,
            attempt.task_count,
        );
        let mut outputs = BTreeMap::new();
        for name in &outputs_of {
            let key = ObjectKey::parse(&layout::output(&dir, name))?;
            outputs.insert(
                name.clone(),
                state.objects.signed_url(SignedMethod::PutCreateOnly, &key, ttl).await?,
            );
        }
        let checkpoint_url = state
            .objects
            .signed_url(SignedMethod::Put, &ObjectKey::parse(&layout::checkpoint(&dir))?, ttl)
            .await?;
        let resume_url = match &earlier {
            Some(e) => previous_checkpoint(state, e, task, attempt.task_count, ttl).await?,
            None => None,
        };
        let boot = Bootstrap {
            v: BOOTSTRAP_VERSION,
            tenant: run.tenant().clone(),
            project: run.project().clone(),
            run: run.id().clone(),
            attempt: attempt.attempt,
            task,
            task_count: attempt.task_count,
            method: run.method().to_owned(),
            params: run.params().clone(),
            timeout_s: run.timeout_s(),
            dataset_url: dataset_url.clone(),
            outputs,
            checkpoint_url,
            resume_url,
            event_key: attempt.event_key.clone(),
            plugin: plugin.clone(),
            reuse,
        };
        let bytes = Bytes::from(serde_json::to_vec(&boot)?);
        let key = ObjectKey::parse(attempt.nonce.for_task(task).as_str())?;
        match state.bootstrap.put(&key, bytes, "application/json", IfGeneration::ABSENT).await {
            Ok(_) | Err(ObjectError::PreconditionFailed(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(reused)
}

/// A signed GET of the checkpoint task `task` of the earlier attempt (this
/// run's last, or the last of the run it retries) flushed, if it did.
async fn previous_checkpoint(
    state: &AppState,
    earlier: &crate::reuse::Earlier,
    task: u32,
    tasks: u32,
    ttl: Duration,
) -> Result<Option<String>, ApiError> {
    let Some(key) = earlier.checkpoint(task, tasks) else { return Ok(None) };
    let key = ObjectKey::parse(&key)?;
    match state.objects.head(&key).await {
        Ok(_) => Ok(Some(state.objects.signed_url(SignedMethod::Get, &key, ttl).await?)),
        Err(ObjectError::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}
