//! `reconcile-tick`: `POST /internal/tick`, called by Cloud Scheduler (and
//! every few seconds by `mapi dev`). Each tick:
//!
//! 1. polls the execution of every active run (dispatching, running,
//!    cancelling): a finished or vanished execution is handed to the meter
//!    as a finalize task, once the outcome table has a verdict; a cancel not
//!    yet confirmed is asked for again; a run without events for
//!    `MAPI_STALL_AFTER_S` is marked stalled (the executor, not the events,
//!    decides whether it is alive);
//! 2. re-pushes the dispatch of attempts whose dispatcher let its lease
//!    expire (the dispatcher adopts by nonce before it submits again) and
//!    of runs queued for longer than a dispatch lease (a push lost after
//!    submit, or lost with a crashed deliverer).
//!
//! The tick keeps no state: everything it needs is in the store, and two
//! ticks at once do no harm (task names deduplicate, transitions are
//! transactional).

use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use mapi_domain::{ExecutionStatus, RunState, Verdict, classify, decide};
use mapi_executor::ExecutionInfo;
use mapi_identity::InternalCaller;
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json};
use mapi_runs::tasks::{FinalizeTask, push_dispatch, push_finalize, round_of};
use mapi_runs::{AttemptDoc, Doc, ProgressDoc, RunDoc, attempt_facts, tx_get, tx_put};
use mapi_store::{Direction, Op, transact};
use serde::Serialize;

pub const TICK_PATH: &str = "/internal/tick";

/// Runs looked at per tick, per sweep.
const SWEEP_LIMIT: u32 = 500;

pub fn router(state: AppState) -> Router {
    Router::new().route(TICK_PATH, post(tick)).with_state(state)
}

/// What one tick did.
#[derive(Debug, Default, Serialize, PartialEq, Eq)]
pub struct TickReport {
    pub polled: u32,
    pub finalizing: u32,
    pub redispatched: u32,
    pub cancels_sent: u32,
    pub stalled: u32,
    pub errors: u32,
}

async fn tick(State(state): State<AppState>, _caller: InternalCaller) -> Result<Json<TickReport>, ApiError> {
    let mut report = TickReport::default();
    let active = mapi_store::Query::new(RunDoc::COLLECTION)
        .filter("state", Op::In, serde_json::json!(["dispatching", "running", "cancelling"]))
        .order_by("updated_at", Direction::Asc)
        .limit(SWEEP_LIMIT);
    for doc in state.store.query(&active, None).await? {
        let run: RunDoc = doc.decode()?;
        report.polled += 1;
        if let Err(e) = reconcile_run(&state, &run, &mut report).await {
            report.errors += 1;
            tracing::warn!(run = %run.id, error = %e, "reconciling a run failed; the next tick retries");
        }
    }
    let now = state.clock.now();
    let queued = mapi_store::Query::new(RunDoc::COLLECTION)
        .filter("state", Op::Eq, RunState::Queued.as_str())
        .order_by("updated_at", Direction::Asc)
        .limit(SWEEP_LIMIT);
    for doc in state.store.query(&queued, None).await? {
        let run: RunDoc = doc.decode()?;
        // A queued run untouched for a dispatch lease has probably lost its push.
        if run.updated_at + state.config.dispatch_lease > now {
            break;
        }
        push_dispatch(&*state.queue, &run.id, run.attempt, Some(round_of(now)), None).await?;
        report.redispatched += 1;
    }
    if report != TickReport::default() {
        tracing::debug!(?report, "tick");
    }
    Ok(Json(report))
}

async fn reconcile_run(state: &AppState, run: &RunDoc, report: &mut TickReport) -> Result<(), ApiError> {
    let now = state.clock.now();
    let attempt_id = AttemptDoc::id_of(&run.id, run.attempt);
    let Some(attempt) = mapi_runs::get::<AttemptDoc>(&*state.store, &attempt_id).await? else {
        return Ok(());
    };
    if attempt.finalized {
        return Ok(());
    }
    let Some(handle) = &attempt.handle else {
        if attempt.lease_until <= now {
            push_dispatch(&*state.queue, &run.id, run.attempt, Some(round_of(now)), None).await?;
            report.redispatched += 1;
        }
        return Ok(());
    };
    let info = state.executor.status(handle).await.map_err(|e| ApiError::unavailable(e.to_string(), 5))?;
    match &info.status {
        ExecutionStatus::Running => {
            let backstop = Duration::from_secs(u64::from(run.timeout_s))
                + state.executor.backstop_margin()
                + Duration::from_secs(60);
            let overdue = attempt.submitted_at.is_some_and(|t| t + backstop <= now);
            if run.state == RunState::Cancelling || overdue {
                if overdue {
                    tracing::warn!(run = %run.id, execution = %handle, "execution ran past its timeout: cancelling");
                }
                state.executor.cancel(handle).await.map_err(|e| ApiError::unavailable(e.to_string(), 5))?;
                report.cancels_sent += 1;
            }
            mark_stalled(state, run, &attempt, report).await
        }
        ExecutionStatus::NotFound => {
            // Confirm it is gone before the attempt is retried.
            state.executor.cancel(handle).await.map_err(|e| ApiError::unavailable(e.to_string(), 5))?;
            finalize(state, run, &attempt, info, report).await
        }
        _ => finalize(state, run, &attempt, info, report).await,
    }
}

/// Pushes the finalize task once the outcome table has a verdict.
async fn finalize(
    state: &AppState,
    run: &RunDoc,
    attempt: &AttemptDoc,
    info: ExecutionInfo,
    report: &mut TickReport,
) -> Result<(), ApiError> {
    let now = state.clock.now();
    let attempt = if attempt.finished_seen_at.is_none() {
        note_finished(state, attempt).await?
    } else {
        attempt.clone()
    };
    let progress: Option<ProgressDoc> =
        mapi_runs::get(&*state.store, &AttemptDoc::id_of(&run.id, run.attempt)).await?;
    let facts = attempt_facts(run, &attempt, progress.as_ref(), now, state.config.event_grace);
    let Some(outcome) = classify(&info.status) else { return Ok(()) };
    let policy = mapi_domain::RetryPolicy { max_infra_retries: state.config.max_infra_retries };
    if decide(&outcome, &facts, policy) == Verdict::Wait {
        return Ok(());
    }
    push_finalize(
        &*state.queue,
        &FinalizeTask { run: run.id.clone(), attempt: attempt.attempt, execution: info },
    )
    .await?;
    report.finalizing += 1;
    Ok(())
}

/// Records when the execution was first seen finished (the complete event's grace starts then).
async fn note_finished(state: &AppState, attempt: &AttemptDoc) -> Result<AttemptDoc, ApiError> {
    let now = state.clock.now();
    let id = AttemptDoc::id_of(&attempt.run, attempt.attempt);
    let id = &id;
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let mut a = tx_get::<AttemptDoc>(&mut tx, id)
            .await?
            .ok_or_else(|| ApiError::internal("intent row vanished"))?;
        if a.finished_seen_at.is_none() {
            a.finished_seen_at = Some(now);
            tx_put(&mut tx, &a)?;
        }
        Ok(tx.finish(a))
    })
    .await
}

/// Marks a run whose attempt sent no event for `stall_after` (informational only).
async fn mark_stalled(
    state: &AppState,
    run: &RunDoc,
    attempt: &AttemptDoc,
    report: &mut TickReport,
) -> Result<(), ApiError> {
    let now = state.clock.now();
    let progress: Option<ProgressDoc> =
        mapi_runs::get(&*state.store, &AttemptDoc::id_of(&run.id, run.attempt)).await?;
    let last = progress.map_or(attempt.submitted_at, |p| Some(p.updated_at));
    let stalled = last.is_some_and(|t| t + state.config.stall_after <= now);
    if stalled == run.stalled {
        return Ok(());
    }
    let id = run.id.as_str();
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        if let Some(mut r) = tx_get::<RunDoc>(&mut tx, id).await?
            && r.stalled != stalled
        {
            r.stalled = stalled;
            tx_put(&mut tx, &r)?;
        }
        Ok(tx.finish(()))
    })
    .await?;
    if stalled {
        report.stalled += 1;
        tracing::warn!(run = %run.id, "no events for a while: the run is marked stalled");
    }
    Ok(())
}
