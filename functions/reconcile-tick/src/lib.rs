//! `reconcile-tick`: `POST /internal/tick`, called by Cloud Scheduler (and
//! every few seconds by `mapi dev`). Each tick:
//!
//! 1. polls the execution of every active run (dispatching, running,
//!    cancelling) — one listing of the executor's recent executions for
//!    the whole sweep (on Cloud Run one `executions.list` per Job, not one
//!    `executions.get` per run), then a `status` read only for each
//!    execution the listing does not show running (finished, vanished, or
//!    older than the listing reaches) — and reads the runs' attempts and
//!    progress a page at a time: a finished or vanished execution is handed
//!    to the meter as a finalize task, once the outcome table has a
//!    verdict; a cancel not yet confirmed is asked for again; a run without
//!    events for `MAPI_STALL_AFTER_S` is marked stalled (the executor, not
//!    the events, decides whether it is alive);
//! 2. re-pushes the dispatch of attempts whose dispatcher let its lease
//!    expire (the dispatcher adopts by nonce before it submits again) and
//!    of runs queued for longer than a dispatch lease (a push lost after
//!    submit, or lost with a crashed deliverer);
//! 3. turns run transitions into webhook messages and re-pushes overdue
//!    ones (see [`webhooks`]);
//! 4. pushes the purge of each tenant whose deletion's grace period is
//!    over (and again, once a minute, while it is not purged), and
//!    re-pushes exports still building (`tenants.rs`);
//! 5. pushes the advance of every active workflow run (see [`workflows`]);
//! 6. announces the platform's spend reaching 70 % and 90 % of its cap
//!    (see [`spend`]);
//! 7. while work is active (an active run, an open item job, an endpoint
//!    rolling out or going, a workflow run with a run, grid or deploy node
//!    running, a webhook message made or re-pushed, a sweep left unfinished), asks for the next tick `MAPI_TICK_FOLLOW_UP_S`
//!    (3 s) later through the `tick` queue. A dispatch, a new item job and
//!    an endpoint change ask for one too, so the chain starts with the work
//!    and stops a tick after it; Cloud Scheduler's minute is the backstop.
//!    A run's end, an endpoint's readiness and canary steps, and the
//!    webhooks they make then follow within seconds, not within the
//!    scheduler's minute: `mapi-sim`'s `a_run_succeeds_within_seconds_of_its_last_event`
//!    holds the figure (≤ 5 s from the last event applied to `succeeded`).
//!    The price is a sweep every few seconds while work is active (its reads
//!    are counted by `ticks::`), nothing while the platform is idle.
//!
//! Cloud Scheduler may deliver a tick twice, or while the previous one still
//! runs. A tick first takes the tick lease (`leases/reconcile-tick`) and
//! bumps its fencing token; a tick that finds the lease held answers at
//! once with `busy` and does nothing, and a holder that finds the token
//! moved on (its lease lapsed and another tick took over) stops at its next
//! check of the fence (every few seconds of its time). Its work is bounded
//! (`MAPI_TICK_MAX_RUNS` runs, read in pages of [`PAGE`], with one listing
//! of the executor for all of them) and resumable: the lease keeps the
//! sweep's cursor, so a platform with more active runs than that is covered
//! over several ticks instead of timing one out. The actions themselves
//! stay idempotent (task names deduplicate, transitions are transactional),
//! so even a fenced-out holder's last batch does no harm.

mod endpoints;
mod jobs;
pub mod spend;
mod tenants;
pub mod webhooks;
mod workflows;

use std::collections::HashMap;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use mapi_domain::{ExecutionStatus, RunState};
use mapi_executor::{ExecutionHandle, ExecutionInfo};
use mapi_identity::InternalCaller;
use mapi_lifecycle::{Rules, RunDoc, commands, verdict};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json};
use mapi_schema::tasks::{FinalizeTask, push_dispatch, push_finalize, round_of};
use mapi_schema::{AttemptDoc, Doc, ProgressDoc, TickLeaseDoc, tx_get, tx_put};
use mapi_store::{Direction, Op, transact};
use serde::Serialize;

pub use mapi_schema::tasks::TICK_PATH;

/// Active runs read per query of a sweep, and documents per batch read.
pub const PAGE: u32 = 500;

/// How often (on the platform's clock) a tick renews its lease, checking
/// that no other tick took it over.
const RENEW_EVERY: Duration = Duration::from_secs(10);

/// How long a tick holds the lease before another may take it over.
pub const TICK_LEASE: Duration = Duration::from_secs(60);

pub fn router(state: AppState) -> Router {
    Router::new().route(TICK_PATH, post(tick)).with_state(state)
}

/// What one tick did.
#[derive(Debug, Default, Serialize, PartialEq, Eq)]
pub struct TickReport {
    /// Another tick holds the lease: this one did nothing.
    pub busy: bool,
    /// The lease was taken over mid-sweep: this tick stopped early.
    pub fenced: bool,
    /// The sweep continued where the previous tick stopped.
    pub resumed: bool,
    pub polled: u32,
    pub finalizing: u32,
    pub redispatched: u32,
    pub cancels_sent: u32,
    pub stalled: u32,
    /// Endpoints whose rollout, promotion or deletion moved.
    pub endpoints: u32,
    /// Instance-billed endpoints whose idle instance time was charged.
    pub instance_charges: u32,
    /// Webhook messages made from run transitions, and overdue ones re-pushed.
    pub webhook_messages: u32,
    pub webhook_repushes: u32,
    /// Tenants' purges and exports pushed.
    pub tenant_tasks: u32,
    /// Jobs found with every item finished, and closed.
    pub jobs_finished: u32,
    /// Active workflow runs whose advance was pushed.
    pub workflow_runs: u32,
    /// The share of the spend cap (70 or 90 %) this tick announced.
    pub spend_cap_alarm: Option<u8>,
    /// Work is active and the next tick was asked for (`MAPI_TICK_FOLLOW_UP_S` later).
    pub follow_up: bool,
    pub errors: u32,
}

async fn tick(State(state): State<AppState>, _caller: InternalCaller) -> Result<Json<TickReport>, ApiError> {
    let mut report = TickReport::default();
    let holder_bytes: [u8; 8] = mapi_entropy::bytes(&*state.entropy)?;
    let holder = hex::encode(holder_bytes);
    let Some(lease) = take_lease(&state, &holder).await? else {
        report.busy = true;
        return Ok(Json(report));
    };
    let sweep = Sweep::read(&state, lease.cursor.as_deref()).await?;
    report.resumed = sweep.resumed;
    let batch = Batch::read(&state, &sweep.runs).await?;
    let mut renewed = state.clock.now();
    for run in &sweep.runs {
        // A holder checks its fence at least every RENEW_EVERY of its own
        // time, so it renews long before its lease lapses, and a holder whose
        // lease lapsed anyway (it stalled) stops at its next check.
        if state.clock.now().since(renewed) >= RENEW_EVERY {
            if !renew_lease(&state, &holder, lease.token).await? {
                report.fenced = true;
                tracing::warn!(token = lease.token, "the tick lease was taken over: stopping this sweep");
                return Ok(Json(report));
            }
            renewed = state.clock.now();
        }
        report.polled += 1;
        if let Err(e) = reconcile_run(&state, run, &batch, &mut report).await {
            report.errors += 1;
            tracing::warn!(run = %run.id(), error = %e, "reconciling a run failed; the next tick retries");
        }
    }
    let now = state.clock.now();
    let queued = mapi_store::Query::new(RunDoc::COLLECTION)
        .filter("state", Op::Eq, RunState::Queued.as_str())
        .order_by("updated_at", Direction::Asc)
        .limit(PAGE);
    for doc in state.store.query(&queued, None).await? {
        let run: RunDoc = doc.decode()?;
        // A queued run untouched for a dispatch lease has probably lost its push.
        if run.updated_at() + state.config.dispatch_lease > now {
            break;
        }
        // One run's failed push must not stop the sweep (nor keep the lease).
        match push_dispatch(&*state.queue, run.id(), run.attempt(), Some(round_of(now)), None).await {
            Ok(()) => report.redispatched += 1,
            Err(e) => {
                report.errors += 1;
                tracing::warn!(run = %run.id(), error = %e, "re-pushing a queued run's dispatch failed; the next tick retries");
            }
        }
    }
    let (moved, failed, endpoints_active) = endpoints::sweep(&state).await?;
    report.endpoints += moved;
    report.errors += failed;
    report.instance_charges = endpoints::charge_instances(&state).await?;
    // Before the webhooks' sweep, so a job closed now is a message now.
    let (closed, failed, jobs_open) = jobs::sweep(&state).await?;
    report.jobs_finished += closed;
    report.errors += failed;
    let hooks = webhooks::sweep(&state).await?;
    report.webhook_messages = hooks.made;
    report.webhook_repushes = hooks.repushed;
    report.errors += hooks.errors;
    let (pushed, failed) = tenants::sweep(&state).await?;
    report.tenant_tasks += pushed;
    report.errors += failed;
    let (pushed, failed, workflows_driving) = workflows::sweep(&state).await?;
    report.workflow_runs += pushed;
    report.errors += failed;
    match spend::watch(&state).await {
        Ok(level) => report.spend_cap_alarm = level,
        Err(e) => {
            report.errors += 1;
            tracing::warn!(error = %e, "watching the spend cap failed; the next tick retries");
        }
    }
    let active = report.polled > 0
        || report.redispatched > 0
        || report.webhook_messages > 0
        || report.webhook_repushes > 0
        || endpoints_active
        || jobs_open
        || workflows_driving
        || sweep.next.is_some();
    if !release_lease(&state, &holder, lease.token, sweep.next).await? {
        report.fenced = true;
    }
    if active {
        report.follow_up = state.ask_for_tick().await;
    }
    if report != TickReport::default() {
        tracing::debug!(?report, "tick");
    }
    Ok(Json(report))
}

/// Takes the tick lease if it is free or lapsed, bumping the fencing token.
async fn take_lease(state: &AppState, holder: &str) -> Result<Option<TickLeaseDoc>, ApiError> {
    let now = state.clock.now();
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let current = tx_get::<TickLeaseDoc>(&mut tx, TickLeaseDoc::ID).await?;
        if current.as_ref().is_some_and(|l| l.until > now) {
            return Ok(tx.finish(None));
        }
        let lease = TickLeaseDoc {
            holder: holder.to_owned(),
            token: current.as_ref().map_or(1, |l| l.token + 1),
            until: now + TICK_LEASE,
            cursor: current.and_then(|l| l.cursor),
        };
        tx_put(&mut tx, &lease)?;
        Ok(tx.finish(Some(lease)))
    })
    .await
}

/// Extends the lease if this holder still has it (its token is current).
async fn renew_lease(state: &AppState, holder: &str, token: u64) -> Result<bool, ApiError> {
    let now = state.clock.now();
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        match tx_get::<TickLeaseDoc>(&mut tx, TickLeaseDoc::ID).await? {
            Some(mut l) if l.token == token && l.holder == holder => {
                l.until = now + TICK_LEASE;
                tx_put(&mut tx, &l)?;
                Ok(tx.finish(true))
            }
            _ => Ok(tx.finish(false)),
        }
    })
    .await
}

/// Frees the lease for the next tick and leaves it the sweep's cursor.
async fn release_lease(
    state: &AppState,
    holder: &str,
    token: u64,
    cursor: Option<String>,
) -> Result<bool, ApiError> {
    let now = state.clock.now();
    let cursor = &cursor;
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        match tx_get::<TickLeaseDoc>(&mut tx, TickLeaseDoc::ID).await? {
            Some(mut l) if l.token == token && l.holder == holder => {
                l.until = now;
                l.cursor = cursor.clone();
                tx_put(&mut tx, &l)?;
                Ok(tx.finish(true))
            }
            _ => Ok(tx.finish(false)),
        }
    })
    .await
}

/// The active runs one tick looks at: state by state (a query per state
/// follows the `(state, updated_at)` index in order; one over all three
/// states would sort the whole set for every page), from the lease's
/// cursor, page by page ([`PAGE`]), to the end of the active runs or the
/// tick's budget (`MAPI_TICK_MAX_RUNS`). A sweep that started mid-way goes
/// on from the first state up to the first run it already has, within the
/// budget. The cursor is `{state}/{page token}`.
struct Sweep {
    runs: Vec<RunDoc>,
    /// Where the next tick starts: `None` when this one reached the end.
    next: Option<String>,
    resumed: bool,
}

/// Where a sweep goes on: the state it was in and the page token after the
/// last run it looked at.
fn parse_cursor(token: &str) -> Option<(RunState, mapi_store::Cursor)> {
    let (state, page) = token.split_once('/')?;
    let state = RunState::ALL.iter().copied().find(|s| s.is_active() && s.as_str() == state)?;
    Some((state, mapi_store::Cursor::from_token(page)?))
}

impl Sweep {
    async fn read(state: &AppState, cursor: Option<&str>) -> Result<Sweep, ApiError> {
        let watched: Vec<RunState> = RunState::ALL.iter().copied().filter(|s| s.is_active()).collect();
        let start = cursor.and_then(parse_cursor);
        let resumed = start.is_some();
        // (state, where in it): from the cursor to the last state, then, for
        // a sweep that began mid-way, from the first state round to it.
        let k = start.as_ref().and_then(|(s, _)| watched.iter().position(|w| w == s)).unwrap_or(0);
        let mut segments: Vec<(RunState, Option<mapi_store::Cursor>)> =
            watched[k..].iter().map(|s| (*s, None)).collect();
        if let Some((_, c)) = start {
            segments[0].1 = Some(c);
            segments.extend(watched[..=k].iter().map(|s| (*s, None)));
        }
        let max = (state.config.tick_max_runs as usize).max(1);
        let mut sweep = Sweep { runs: Vec::new(), next: None, resumed };
        let mut seen = std::collections::HashSet::new();
        for (run_state, mut from) in segments {
            let active = mapi_store::Query::new(RunDoc::COLLECTION)
                .filter("state", Op::Eq, run_state.as_str())
                .order_by("updated_at", Direction::Asc);
            loop {
                let room = u32::try_from(max - sweep.runs.len()).unwrap_or(PAGE).min(PAGE);
                let mut page = active.clone().limit(room);
                if let Some(c) = from.take() {
                    page = page.start_after(c);
                }
                let docs = state.store.query(&page, None).await?;
                let after = docs.last().map(|d| page.cursor_after(d));
                let full = docs.len() == room as usize;
                for doc in &docs {
                    if !seen.insert(doc.key.id().to_owned()) {
                        // Round to where this sweep began.
                        return Ok(sweep);
                    }
                    sweep.runs.push(doc.decode()?);
                }
                if sweep.runs.len() >= max {
                    sweep.next = after.map(|c| format!("{}/{}", run_state.as_str(), c.to_token()));
                    return Ok(sweep);
                }
                if !full {
                    break;
                }
                from = after;
            }
        }
        Ok(sweep)
    }
}

/// What a sweep reads once for all its runs: their current attempts and
/// progress (one batch read each), and the executions the executor lists
/// as running.
struct Batch {
    attempts: HashMap<String, AttemptDoc>,
    progress: HashMap<String, ProgressDoc>,
    running: HashMap<String, ExecutionInfo>,
}

impl Batch {
    async fn read(state: &AppState, runs: &[RunDoc]) -> Result<Batch, ApiError> {
        let ids: Vec<String> = runs.iter().map(|r| AttemptDoc::id_of(r.id(), r.attempt())).collect();
        let attempts: HashMap<String, AttemptDoc> = read_docs(state, &ids).await?;
        // Progress shares its attempt's id.
        let progress = read_docs(state, &ids).await?;
        let polled: Vec<&AttemptDoc> =
            attempts.values().filter(|a| a.handle.is_some() && !a.finalized).collect();
        let handles: Vec<ExecutionHandle> = polled.iter().filter_map(|a| a.handle.clone()).collect();
        // The executor's clock may run a little behind the store's.
        let since = polled.iter().map(|a| a.created_at).min().map(|t| t - Duration::from_secs(60));
        let running = match since {
            None => HashMap::new(),
            Some(since) => match state.executor.running_among(&handles, since).await {
                Ok(listed) => listed.into_iter().map(|i| (i.handle.0.clone(), i)).collect(),
                Err(e) => {
                    // Each run's status is read instead: slower, as correct.
                    tracing::warn!(error = %e, "listing running executions failed: reading each one's status");
                    HashMap::new()
                }
            },
        };
        Ok(Batch { attempts, progress, running })
    }
}

/// The documents `ids` of `T`'s collection that exist, by id, in one read
/// per [`PAGE`] of them.
async fn read_docs<T: Doc + serde::de::DeserializeOwned>(
    state: &AppState,
    ids: &[String],
) -> Result<HashMap<String, T>, ApiError> {
    let mut out = HashMap::with_capacity(ids.len());
    for ids in ids.chunks(PAGE as usize) {
        let keys = ids.iter().map(|id| mapi_schema::key::<T>(id)).collect::<Result<Vec<_>, _>>()?;
        let docs = state.store.get(&keys, None).await?;
        for (id, doc) in ids.iter().zip(docs) {
            if let Some(d) = doc {
                out.insert(id.clone(), d.decode()?);
            }
        }
    }
    Ok(out)
}

async fn reconcile_run(
    state: &AppState,
    run: &RunDoc,
    batch: &Batch,
    report: &mut TickReport,
) -> Result<(), ApiError> {
    let now = state.clock.now();
    let attempt_id = AttemptDoc::id_of(run.id(), run.attempt());
    let Some(attempt) = batch.attempts.get(&attempt_id) else {
        return Ok(());
    };
    if attempt.finalized {
        return Ok(());
    }
    let Some(handle) = &attempt.handle else {
        if attempt.lease_until <= now {
            push_dispatch(&*state.queue, run.id(), run.attempt(), Some(round_of(now)), None).await?;
            report.redispatched += 1;
        }
        return Ok(());
    };
    let progress = batch.progress.get(&attempt_id);
    let info = match batch.running.get(&handle.0) {
        Some(listed) => listed.clone(),
        None => state.executor.status(handle).await.map_err(|e| {
            ApiError::unavailable_because("the executor did not answer: retry shortly", 5, &e)
        })?,
    };
    match &info.status {
        ExecutionStatus::Running => {
            let backstop = Duration::from_secs(u64::from(run.timeout_s()))
                + state.executor.backstop_margin()
                + Duration::from_secs(60);
            let overdue = attempt.submitted_at.is_some_and(|t| t + backstop <= now);
            if run.state() == RunState::Cancelling || overdue {
                if overdue {
                    tracing::warn!(run = %run.id(), execution = %handle, "execution ran past its timeout: cancelling");
                }
                state.executor.cancel(handle).await.map_err(|e| {
                    ApiError::unavailable_because("the executor did not answer: retry shortly", 5, &e)
                })?;
                report.cancels_sent += 1;
            }
            mark_stalled(state, run, attempt, progress, report).await
        }
        ExecutionStatus::NotFound => {
            // Confirm it is gone before the attempt is retried.
            state.executor.cancel(handle).await.map_err(|e| {
                ApiError::unavailable_because("the executor did not answer: retry shortly", 5, &e)
            })?;
            finalize(state, run, attempt, progress, info, report).await
        }
        _ => finalize(state, run, attempt, progress, info, report).await,
    }
}

/// Pushes the finalize task once the outcome table has a verdict.
async fn finalize(
    state: &AppState,
    run: &RunDoc,
    attempt: &AttemptDoc,
    progress: Option<&ProgressDoc>,
    info: ExecutionInfo,
    report: &mut TickReport,
) -> Result<(), ApiError> {
    let now = state.clock.now();
    let attempt = if attempt.finished_seen_at.is_none() {
        note_finished(state, attempt).await?
    } else {
        attempt.clone()
    };
    let rules = Rules {
        event_grace: state.config.event_grace,
        retry: mapi_domain::RetryPolicy { max_infra_retries: state.config.max_infra_retries },
    };
    // Whether there is a verdict does not depend on the outputs (the
    // finalization checks them): none are listed here.
    if verdict(run, &attempt, progress, None, &info.status, now, rules).is_none() {
        return Ok(());
    }
    push_finalize(
        &*state.queue,
        &FinalizeTask { run: run.id().clone(), attempt: attempt.attempt, execution: info },
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
    progress: Option<&ProgressDoc>,
    report: &mut TickReport,
) -> Result<(), ApiError> {
    let now = state.clock.now();
    let last = progress.map_or(attempt.submitted_at, |p| Some(p.updated_at));
    let stalled = last.is_some_and(|t| t + state.config.stall_after <= now);
    if stalled == run.stalled() {
        return Ok(());
    }
    let id = run.id().as_str();
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        if let Some(r) = tx_get::<RunDoc>(&mut tx, id).await? {
            commands::mark_stalled(r, stalled).write(&mut tx)?;
        }
        Ok(tx.finish(()))
    })
    .await?;
    if stalled {
        report.stalled += 1;
        tracing::warn!(run = %run.id(), "no events for a while: the run is marked stalled");
    }
    Ok(())
}
