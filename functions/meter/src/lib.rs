//! `meter`: `POST /internal/tasks/finalize`, pushed by the reconciler when an
//! attempt's execution has ended. In one transaction it
//!
//! - writes the attempt's ledger entry (`ledger/{run}:{attempt}`, created
//!   once: a repeated finalization writes nothing twice), charging the
//!   class's vCPU-seconds and GiB-seconds for the execution's wall time at
//!   the current price table, in integer micros;
//! - marks the intent row finalized (later events for it are refused);
//! - applies the outcome table's verdict to the run: a final state, or a new
//!   attempt (the next class after running out of memory, the same class
//!   after a lost execution).
//!
//! A verdict of `succeeded` is applied only with the run's model version:
//! the attempt's outputs are sealed first, outside the transaction
//! ([`seal`]), and the version's document is created in the same commit
//! as the transition.
//!
//! Then it pushes the next attempt's dispatch, if there is one.

use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use mapi_domain::{
    ErrorCode, Reason, RunError, RunState, Tier, Timestamp, Transition, Verdict, classify, decide,
};
use mapi_identity::InternalCaller;
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json};
use mapi_runs::tasks::{FINALIZE_PATH, FinalizeTask, push_dispatch};

use mapi_quota::{Period, effective};
use mapi_runs::counters::{self, Bumps};
use mapi_runs::{
    AttemptDoc, Doc, LedgerEntry, ModelVersionDoc, ProgressDoc, QuotaPolicyDoc, RunDoc, TenantDoc,
    attempt_facts, tx_create, tx_get, tx_put,
};
use mapi_store::{StoreError, transact};
use serde::Serialize;

pub mod seal;
pub mod usage;

/// The OpenAPI description of this function's public routes.
#[derive(Debug, utoipa::OpenApi)]
#[openapi(paths(usage::project_usage, usage::tenant_usage), components(schemas(usage::UsageReport)), tags((name = "usage", description = "What compute cost")))]
pub struct ApiDoc;

pub fn router(state: AppState) -> Router {
    Router::new()
        .route(FINALIZE_PATH, post(finalize))
        .route("/v1/tenants/{tenant}/projects/{project}/usage", axum::routing::get(usage::project_usage))
        .route("/v1/tenants/{tenant}/usage", axum::routing::get(usage::tenant_usage))
        .with_state(state)
}

#[derive(Debug, Serialize)]
pub struct Finalized {
    pub outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<RunState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amount_micros: Option<i64>,
}

/// The counters a metered charge adds to: the tenant's and the platform's
/// day and month, and the submitting token's.
fn usage_counters(run: &RunDoc, now: Timestamp) -> Vec<String> {
    let mut ids = Vec::new();
    for period in [Period::Day, Period::Month] {
        ids.push(counters::tenant_period(&run.tenant, period, now));
        ids.push(counters::platform_period(period, now));
        if let Some(t) = &run.token {
            ids.push(counters::token_period(t, period, now));
        }
    }
    ids
}

/// What the finalize transaction fails with: a guarded increment that
/// would pass its limit is told apart from everything else.
enum TxError {
    Api(ApiError),
    /// The limit, in words.
    Limit(String),
}

impl From<StoreError> for TxError {
    fn from(e: StoreError) -> TxError {
        match e {
            StoreError::LimitReached { key, .. } => TxError::Limit(counters::describe(key.id())),
            other => TxError::Api(other.into()),
        }
    }
}

impl From<ApiError> for TxError {
    fn from(e: ApiError) -> TxError {
        TxError::Api(e)
    }
}

/// A retry that is not started: the run fails instead.
fn refuse_retry(code: ErrorCode, reason: Reason, message: String) -> Verdict {
    Verdict::Finalize { state: RunState::Failed, reason, error: Some(RunError { code, message }) }
}

enum Done {
    Already,
    Waiting,
    /// The verdict is `succeeded` and the outputs are not sealed yet:
    /// nothing was written; seal, then run the transaction again.
    NeedsSeal(Box<RunDoc>),
    Applied {
        transition: Option<Transition>,
        next: Option<Box<RunDoc>>,
        amount: i64,
        state: RunState,
    },
}

async fn finalize(
    State(state): State<AppState>,
    _caller: InternalCaller,
    Json(task): Json<FinalizeTask>,
) -> Result<(StatusCode, Json<Finalized>), ApiError> {
    let now = state.clock.now();
    let grace = state.config.event_grace;
    let policy = mapi_domain::RetryPolicy { max_infra_retries: state.config.max_infra_retries };
    let task = &task;
    // A retry is admitted again, against the limits its run was admitted
    // against; when that fails the commit, the attempt is finalized again
    // with the retry refused.
    let mut refused_retry: Option<String> = None;
    // The model version, once the outputs are sealed (outside the transaction).
    let mut sealed: Option<ModelVersionDoc> = None;
    let done = loop {
        let refused = refused_retry.as_deref();
        let version = sealed.as_ref();
        let done = transact::<_, TxError, _, _>(&*state.store, |mut tx| async move {
        let id = AttemptDoc::id_of(&task.run, task.attempt);
        let mut run = tx_get::<RunDoc>(&mut tx, task.run.as_str()).await?.ok_or_else(|| ApiError::not_found("no such run"))?;
        let mut attempt = tx_get::<AttemptDoc>(&mut tx, &id).await?.ok_or_else(|| ApiError::not_found("no such attempt"))?;
        let progress = tx_get::<ProgressDoc>(&mut tx, &id).await?;
        let ledger_seen = tx_get::<LedgerEntry>(&mut tx, &id).await?.is_some();
        if attempt.finalized {
            return Ok(tx.finish(Done::Already));
        }
        let info = &task.execution;
        let Some(outcome) = classify(&info.status) else { return Ok(tx.finish(Done::Waiting)) };
        let verdict = decide(&outcome, &attempt_facts(&run, &attempt, progress.as_ref(), now, grace), policy);
        if verdict == Verdict::Wait {
            return Ok(tx.finish(Done::Waiting));
        }
        let verdict = match verdict {
            Verdict::Retry { class, reason, .. } => {
                let tenant = tx_get::<TenantDoc>(&mut tx, run.tenant.as_str()).await?;
                let policy = tx_get::<QuotaPolicyDoc>(&mut tx, run.tenant.as_str()).await?;
                let tier = tenant.map_or(Tier::Public, |t| t.tier);
                let largest = effective(tier, policy.as_ref().map(|p| &p.policy)).max_resource_class;
                match (largest, refused) {
                    // Only a retry onto a larger class (after running out of memory).
                    (Some(max), _) if class > attempt.class && class > max => refuse_retry(
                        ErrorCode::ResourceExhausted,
                        Reason::ResourceExhausted,
                        format!(
                            "the attempt ran out of memory on class {}; class {class} is above the tenant's largest class {max}",
                            attempt.class
                        ),
                    ),
                    (_, Some(why)) => refuse_retry(
                        ErrorCode::QuotaExceeded,
                        reason,
                        format!("the attempt failed and its retry was not started: {why}"),
                    ),
                    _ => verdict,
                }
            }
            v => v,
        };
        // A run succeeds only with its model version, sealed before this
        // commit (signing is outside I/O: never inside the closure).
        let succeeds = run.attempt == attempt.attempt
            && !run.state.is_terminal()
            && matches!(verdict, Verdict::Finalize { state: RunState::Succeeded, .. });
        let version = match (succeeds, version) {
            (false, _) => None,
            (true, None) => return Ok(tx.finish(Done::NeedsSeal(Box::new(run)))),
            (true, Some(v)) if tx_get::<ModelVersionDoc>(&mut tx, &v.doc_id()).await?.is_some() => None,
            (true, Some(v)) => Some(v),
        };
        // A retry that goes ahead is admitted again against its sharded
        // budgets, read here (reads come before the commit's first write).
        let budgets = match (&verdict, &run.reservation) {
            (Verdict::Retry { .. }, Some(r)) if !r.holds.is_empty() => {
                let names = r.hold_counters();
                let docs = tx.get_all(&counters::keys(&names)?).await?;
                counters::Sharded::decode_all(&names, &docs)?
            }
            _ => Vec::new(),
        };
        let wall = match (info.started, info.finished) {
            (Some(s), Some(f)) => f.since(s),
            _ => Duration::ZERO,
        };
        let charge = mapi_cost::CURRENT.charge(attempt.class, attempt.task_count, wall);
        let amount = charge.amount_micros;
        // The charge goes to the usage counters once, with the ledger entry.
        let charged = if ledger_seen {
            Bumps::default()
        } else {
            Bumps::charge(&usage_counters(&run, now), run.id.as_str(), charge.vcpu_ms, amount)
        };
        if !ledger_seen {
            charged.apply(&mut tx)?;
            let entry = LedgerEntry {
                tenant: run.tenant.clone(),
                project: run.project.clone(),
                run: run.id.clone(),
                attempt: attempt.attempt,
                charge,
                token: run.token.clone(),
                at: now,
            };
            tx_create(&mut tx, &entry)?;
            run.charged_micros += amount;
        }
        attempt.finalized = true;
        attempt.status = Some(info.status.clone());
        attempt.started = info.started;
        attempt.finished = info.finished;
        tx_put(&mut tx, &attempt)?;
        let mut next = None;
        let transition = if run.attempt != attempt.attempt || run.state.is_terminal() {
            tracing::warn!(run = %run.id, attempt = %attempt.attempt, state = %run.state, "finalized an attempt the run has moved past");
            None
        } else {
            let step = match &verdict {
                Verdict::Finalize { state: to, reason, error } => {
                    let t = run.transition(*to, *reason, now);
                    if t.is_ok() {
                        run.error = error.clone();
                        if let Some(v) = version {
                            tx_create(&mut tx, v)?;
                        }
                    }
                    t
                }
                Verdict::Retry { class, reason, infra } => {
                    let t = run.transition(RunState::Queued, *reason, now);
                    if t.is_ok() {
                        run.attempt = run.attempt.next();
                        run.class = *class;
                        if let Some(r) = run.reservation.as_mut() {
                            let hold = counters::reserve_ms(*class, run.task_count, run.timeout_s);
                            Bumps::renew(r, hold, &budgets, &charged, run.id.as_str())?.apply(&mut tx)?;
                        }
                        if *infra { run.infra_retries += 1 } else { run.oom_retried = true }
                        next = Some(Box::new(run.clone()));
                    }
                    t
                }
                Verdict::Wait => unreachable!("handled above"),
            };
            match step {
                Ok(t) => Some(t),
                Err(e) => {
                    tracing::error!(run = %run.id, error = %e, "the verdict is not a legal transition; the run is left as it is");
                    None
                }
            }
        };
        // A run that ended gives back what it reserved (not when the verdict
        // could not be applied: the run still holds its slot then).
        if transition.is_some() && run.state.is_terminal() {
            counters::end_reservation(&mut run).apply(&mut tx)?;
        }
        tx_put(&mut tx, &run)?;
        let state_now = run.state;
        Ok(tx.finish(Done::Applied { transition, next, amount, state: state_now }))
        })
        .await;
        match done {
            Ok(Done::NeedsSeal(run)) if sealed.is_none() => {
                sealed = Some(seal::seal(&state, &run, task.attempt, now).await?);
            }
            Ok(done) => break done,
            Err(TxError::Limit(limit)) if refused_retry.is_none() => {
                refused_retry = Some(format!("it would pass {limit}"));
            }
            Err(TxError::Limit(limit)) => {
                return Err(ApiError::internal(format!("a finalization without a retry reached {limit}")));
            }
            Err(TxError::Api(e)) => return Err(e),
        }
    };
    match done {
        Done::Already => Ok((
            StatusCode::OK,
            Json(Finalized { outcome: "already finalized", state: None, amount_micros: None }),
        )),
        Done::Waiting => {
            Err(ApiError::unavailable("the attempt has no verdict yet (waiting for its complete event)", 10))
        }
        Done::NeedsSeal(_) => Err(ApiError::internal("the finalization asked for a seal it was given")),
        Done::Applied { transition, next, amount, state: run_state } => {
            if let Some(t) = &transition {
                state.metrics.transition(
                    t.from.map_or("none", |s| s.as_str()),
                    t.to.as_str(),
                    t.reason.as_str(),
                );
                tracing::info!(run = %task.run, attempt = %task.attempt, to = %t.to, reason = %t.reason, amount_micros = amount, "attempt finalized");
                if let (RunState::Succeeded, Some(v)) = (t.to, &sealed) {
                    tracing::info!(run = %task.run, model_version = %v.id, manifest_sha256 = %v.manifest_sha256, key_version = %v.key_version, "model version recorded");
                }
            }
            if let Some(run) = next {
                push_dispatch(&*state.queue, &run.id, run.attempt, None, None).await?;
            }
            Ok((
                StatusCode::OK,
                Json(Finalized { outcome: "finalized", state: Some(run_state), amount_micros: Some(amount) }),
            ))
        }
    }
}
