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
//! A verdict of `succeeded` for a run of a model-producing method is
//! applied only with the run's model version: the attempt's outputs are
//! sealed first, outside the transaction ([`seal`]), and the version's
//! document is created in the same commit as the transition. A run of any
//! other method succeeds with its outputs alone.
//!
//! Then it pushes the next attempt's dispatch, if there is one.
//!
//! An attempt none of whose events was heard is finalized only once its
//! bootstraps are retired and none was found taken, or once the execution
//! that took one has had its time to speak
//! ([`mapi_lifecycle::commands::unheard`]): until then the task is answered
//! 503 and delivered again. A task naming an execution the attempt no
//! longer records is answered `superseded`.

use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use mapi_api::views::Aggregate;
use mapi_domain::{RunState, Tier, Timestamp, Verdict};
use mapi_executor::ExecutionInfo;
use mapi_identity::InternalCaller;
use mapi_lifecycle::commands::{self, Applied, Ended, Finalized, TakenWait, Unheard};
use mapi_lifecycle::{Rules, RunDoc, verdict};
use mapi_objects::ObjectMeta;
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json};
use mapi_schema::tasks::{FINALIZE_PATH, FinalizeTask};

use mapi_quota::counters;
use mapi_quota::effective;
use mapi_schema::{
    AttemptDoc, Doc, LedgerEntry, ModelVersionDoc, ProgressDoc, QuotaPolicyDoc, TenantDoc, tx_get,
};
use mapi_store::{StoreError, transact};
use serde::Serialize;

pub mod fold;
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

/// What the finalize route answers.
#[derive(Debug, Serialize)]
pub struct FinalizeAnswer {
    pub outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<RunState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amount_micros: Option<i64>,
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

enum Done {
    Already(Box<AttemptDoc>),
    Waiting,
    /// The task names an execution the attempt no longer records (the one
    /// that took its work spoke meanwhile): nothing was written; the
    /// reconciler pushes the finalization of the one it records.
    Superseded,
    /// No event of the attempt was heard and its bootstraps were written:
    /// nothing was written; retire them, then run the transaction again
    /// with how many were already gone.
    Unretired(Box<AttemptDoc>),
    /// An execution other than the one reported on may have done the
    /// work: its events are waited for until then.
    Taken(Timestamp),
    /// Another delivery is retiring the bootstraps: ask again then.
    Retiring(Timestamp),
    /// The taker stayed silent past the wait: nothing was written; list
    /// the executions of the attempt's nonce, then run the transaction
    /// again with them.
    Silent(Box<AttemptDoc>),
    /// The silent taker was found and the attempt now records it: the
    /// reconciler finalizes on its end.
    Repointed,
    /// The verdict is `succeeded` for a run of a model-producing method
    /// and the outputs are not sealed yet: nothing was written; seal, then
    /// run the transaction again.
    NeedsSeal(Box<RunDoc>),
    /// The verdict is `succeeded` for a fan-out parent's run and its
    /// children are not folded yet: nothing was written; fold, then run the
    /// transaction again.
    NeedsFold(Box<RunDoc>),
    /// The attempt succeeded and its outputs are not listed yet: nothing was
    /// written; list them, then run the transaction again (the verdict
    /// checks them against what the tasks reported writing).
    NeedsOutputs(Box<RunDoc>),
    Applied(Box<Finalized>),
}

/// What earlier rounds of one finalization learnt outside the transaction.
#[derive(Clone, Copy, Default)]
struct Given<'a> {
    /// The limit an earlier commit found the retry would pass.
    refused: Option<&'a str>,
    /// The model version, once the outputs are sealed.
    sealed: Option<&'a ModelVersionDoc>,
    /// How many bootstraps were already gone when they were retired.
    gone: Option<u32>,
    /// After a silent wait: the executions of the attempt's nonce.
    listed: Option<&'a [ExecutionInfo]>,
    /// After a success: the outputs stored under the attempt's directory.
    stored: Option<&'a [ObjectMeta]>,
    /// A fan-out parent's fold: what it stored, or why it could not.
    folded: Option<&'a Result<Aggregate, String>>,
}

/// The settings one finalization runs under.
#[derive(Clone, Copy)]
struct Setting {
    rules: Rules,
    /// How long the executor lets an execution run past its timeout.
    backstop: Duration,
    now: Timestamp,
}

/// Reads what the finalization of `task` needs, asks the lifecycle for
/// the verdict and the step, and buffers its writes.
async fn finalize_in(
    tx: &mut mapi_store::Txn<'_>,
    task: &FinalizeTask,
    setting: Setting,
    given: Given<'_>,
) -> Result<Done, TxError> {
    let Setting { rules, backstop, now } = setting;
    let Given { refused, sealed, gone, listed, stored, folded } = given;
    let id = AttemptDoc::id_of(&task.run, task.attempt);
    let run =
        tx_get::<RunDoc>(tx, task.run.as_str()).await?.ok_or_else(|| ApiError::not_found("no such run"))?;
    let row = tx_get::<AttemptDoc>(tx, &id).await?.ok_or_else(|| ApiError::not_found("no such attempt"))?;
    let progress = tx_get::<ProgressDoc>(tx, &id).await?;
    let ledger_seen = tx_get::<LedgerEntry>(tx, &id).await?.is_some();
    if row.finalized {
        return Ok(Done::Already(Box::new(row)));
    }
    let execution = &task.execution;
    if row.handle.as_ref() != Some(&execution.handle) {
        return Ok(Done::Superseded);
    }
    if stored.is_none() && mapi_lifecycle::needs_outputs(&run, &row, progress.as_ref(), &execution.status) {
        return Ok(Done::NeedsOutputs(Box::new(run)));
    }
    let Some(decided) = verdict(&run, &row, progress.as_ref(), stored, &execution.status, now, rules) else {
        return Ok(Done::Waiting);
    };
    let wait = TakenWait::new(&run, rules.event_grace, backstop);
    match commands::unheard(&row, progress.is_some(), gone, wait, now) {
        Unheard::Finalize => {}
        Unheard::Silent => match listed {
            None => return Ok(Done::Silent(Box::new(row))),
            Some(listed) => {
                if let Some(step) = commands::silent_taker(&row, execution, listed) {
                    step.write(tx)?;
                    return Ok(Done::Repointed);
                }
            }
        },
        Unheard::Retire { step } => {
            step.write(tx)?;
            return Ok(Done::Unretired(Box::new(row)));
        }
        Unheard::Retiring { until } => return Ok(Done::Retiring(until)),
        Unheard::Wait { until, step } => {
            step.write(tx)?;
            return Ok(Done::Taken(until));
        }
    }
    let decided = match decided.verdict() {
        Verdict::Retry { .. } => {
            let tenant = tx_get::<TenantDoc>(tx, run.tenant().as_str()).await?;
            let policy = tx_get::<QuotaPolicyDoc>(tx, run.tenant().as_str()).await?;
            let tier = tenant.map_or(Tier::Public, |t| t.tier);
            let largest = effective(tier, policy.as_ref().map(|p| &p.policy)).max_resource_class;
            commands::admit_retry(decided, row.class, largest, refused)
        }
        _ => decided,
    };
    // A fan-out parent's run succeeds only with its children folded into its
    // own outputs (stored before this commit); results that cannot be folded
    // fail it.
    let (decided, aggregate) = match (commands::succeeds(&run, &row, &decided) && fold::needed(&run), folded)
    {
        (false, _) => (decided, None),
        (true, None) => return Ok(Done::NeedsFold(Box::new(run))),
        (true, Some(Ok(a))) => (decided, Some(a)),
        (true, Some(Err(why))) => (commands::fold_failed(why), None),
    };
    // A run of a model-producing method succeeds only with its model
    // version, sealed before this commit (signing is I/O: never inside the
    // transaction); a run of any other method succeeds without one.
    let seals = commands::succeeds(&run, &row, &decided) && seal::needed(&run);
    let version = match (seals, sealed) {
        (false, _) => None,
        (true, None) => return Ok(Done::NeedsSeal(Box::new(run))),
        (true, Some(v)) if tx_get::<ModelVersionDoc>(tx, &v.doc_id()).await?.is_some() => None,
        (true, Some(v)) => Some(v),
    };
    // A retry that goes ahead is admitted again against its sharded
    // budgets, read here (reads come before the commit's first write).
    let names = commands::renewal_reads(&run, &decided);
    let budgets = if names.is_empty() {
        Vec::new()
    } else {
        counters::Sharded::decode_all(&names, &tx.get_all(&counters::keys(&names)?).await?)?
    };
    let ended =
        Ended { run, row, execution, verdict: decided, ledger_seen, version, budgets, aggregate, now };
    let finalized = commands::finalize(ended)?;
    finalized.step.write(tx)?;
    Ok(Done::Applied(Box::new(finalized)))
}

async fn finalize(
    State(state): State<AppState>,
    _caller: InternalCaller,
    Json(task): Json<FinalizeTask>,
) -> Result<(StatusCode, Json<FinalizeAnswer>), ApiError> {
    // Before the time the ledger entry is dated by: its rollup counts it.
    state.rollups_started().await?;
    let now = state.clock.now();
    let rules = Rules {
        event_grace: state.config.event_grace,
        retry: mapi_domain::RetryPolicy { max_infra_retries: state.config.max_infra_retries },
    };
    let task = &task;
    let setting = Setting { rules, backstop: state.executor.backstop_margin(), now };
    // A retry is admitted again, against the limits its run was admitted
    // against; when that fails the commit, the attempt is finalized again
    // with the retry refused.
    let mut refused_retry: Option<String> = None;
    // The model version, once the outputs are sealed (outside the transaction).
    let mut sealed: Option<ModelVersionDoc> = None;
    let mut gone: Option<u32> = None;
    let mut listed: Option<Vec<ExecutionInfo>> = None;
    let mut stored: Option<Vec<ObjectMeta>> = None;
    let mut folded: Option<Result<Aggregate, String>> = None;
    let done = loop {
        let given = Given {
            refused: refused_retry.as_deref(),
            sealed: sealed.as_ref(),
            gone,
            listed: listed.as_deref(),
            stored: stored.as_deref(),
            folded: folded.as_ref(),
        };
        let done = transact::<_, TxError, _, _>(&*state.store, |mut tx| async move {
            let done = finalize_in(&mut tx, task, setting, given).await?;
            Ok(tx.finish(done))
        })
        .await;
        match done {
            Ok(Done::NeedsOutputs(run)) if stored.is_none() => {
                stored = Some(seal::stored_outputs(&state, &run, task.attempt).await?);
            }
            Ok(Done::NeedsFold(run)) if folded.is_none() => {
                folded = Some(fold::fold(&state, &run, task.attempt).await?);
            }
            Ok(Done::NeedsSeal(run)) if sealed.is_none() => {
                let outputs = stored.as_deref().unwrap_or_default();
                sealed = Some(seal::seal(&state, &run, task.attempt, outputs, now).await?);
            }
            Ok(Done::Unretired(row)) if gone.is_none() => {
                // Retired before the commit: once they are gone no execution
                // can start the work, so what is found missing was taken.
                let retired =
                    mapi_lifecycle::retire_counting(state.outbox().bootstrap, &row.nonce, row.task_count);
                gone = Some(retired.await.map_err(|e| {
                    ApiError::unavailable_because(
                        "the attempt's bootstraps could not be retired: retry shortly",
                        5,
                        &e,
                    )
                })?);
            }
            Ok(Done::Silent(row)) if listed.is_none() => {
                listed = Some(executions_of(&state, &row).await?);
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
        Done::Already(row) => {
            // An earlier delivery committed but may have stopped before it
            // retired the bootstraps (which is why this one came).
            follow_up(&state, &[mapi_lifecycle::FollowUp::retire(&row)]).await?;
            Ok((
                StatusCode::OK,
                Json(FinalizeAnswer { outcome: "already finalized", state: None, amount_micros: None }),
            ))
        }
        Done::Waiting => Err(ApiError::unavailable(
            "the attempt has no verdict yet (waiting for its events: the complete event, or the report of an output found stored)",
            10,
        )),
        Done::Superseded => Ok((
            StatusCode::OK,
            Json(FinalizeAnswer { outcome: "superseded", state: None, amount_micros: None }),
        )),
        Done::Taken(until) => {
            let after = until.since(now).as_secs().clamp(1, 600);
            let detail =
                "another execution took the attempt's work and has not spoken yet (waiting for its events)";
            Err(ApiError::unavailable(detail, after))
        }
        Done::Retiring(until) => {
            let after = until.since(now).as_secs().clamp(1, 60);
            let detail = "another delivery of this finalization is retiring the attempt's bootstraps";
            Err(ApiError::unavailable(detail, after))
        }
        Done::Unretired(_) => {
            Err(ApiError::internal("the finalization asked to retire bootstraps it retired"))
        }
        Done::Silent(_) => Err(ApiError::internal("the finalization asked for executions it was given")),
        Done::Repointed => Ok((
            StatusCode::OK,
            Json(FinalizeAnswer { outcome: "repointed", state: None, amount_micros: None }),
        )),
        Done::NeedsSeal(_) => Err(ApiError::internal("the finalization asked for a seal it was given")),
        Done::NeedsFold(_) => Err(ApiError::internal("the finalization asked for a fold it was given")),
        Done::NeedsOutputs(_) => {
            Err(ApiError::internal("the finalization asked for the outputs it was given"))
        }
        Done::Applied(f) => applied(&state, task, &f, sealed.as_ref()).await,
    }
}

/// The executor's executions of the attempt's nonce (made since the
/// attempt was), for [`commands::silent_taker`].
async fn executions_of(state: &AppState, row: &AttemptDoc) -> Result<Vec<ExecutionInfo>, ApiError> {
    let listed = state.executor.list_recent(row.created_at).await.map_err(|e| {
        ApiError::unavailable_because("the executor's executions could not be listed: retry shortly", 5, &e)
    })?;
    Ok(listed.into_iter().filter(|e| e.nonce.as_ref() == Some(&row.nonce)).collect())
}

/// Carries out follow-ups; a failure answers the finalization unavailable,
/// so the queue delivers it again and the redelivery does what is left.
async fn follow_up(state: &AppState, follow_ups: &[mapi_lifecycle::FollowUp]) -> Result<(), ApiError> {
    mapi_lifecycle::carry_out(follow_ups, state.outbox()).await.map_err(|e| {
        ApiError::unavailable_because("the finalization is committed; its follow-ups are not: retry", 5, &e)
    })
}

/// After the commit: the metric, the log lines, the next attempt's dispatch.
async fn applied(
    state: &AppState,
    task: &FinalizeTask,
    f: &Finalized,
    sealed: Option<&ModelVersionDoc>,
) -> Result<(StatusCode, Json<FinalizeAnswer>), ApiError> {
    f.step.committed(&state.metrics);
    match (&f.applied, &f.step.transition) {
        (Applied::Moved, Some(t)) => {
            tracing::info!(run = %task.run, attempt = %task.attempt, to = %t.to, reason = %t.reason, amount_micros = f.amount_micros, "attempt finalized");
            if let (RunState::Succeeded, Some(v)) = (t.to, sealed) {
                tracing::info!(run = %task.run, model_version = %v.id, manifest_sha256 = %v.manifest_sha256, key_version = %v.key_version, "model version recorded");
            }
        }
        (Applied::MovedPast, _) => {
            tracing::warn!(run = %task.run, attempt = %task.attempt, state = %f.state, "finalized an attempt the run has moved past");
        }
        (Applied::Illegal(e), _) => {
            tracing::error!(run = %task.run, error = %e, "the verdict is not a legal transition; the run is left as it is");
        }
        (Applied::Moved, None) => {}
    }
    follow_up(state, &f.step.follow_ups).await?;
    Ok((
        StatusCode::OK,
        Json(FinalizeAnswer {
            outcome: "finalized",
            state: Some(f.state),
            amount_micros: Some(f.amount_micros),
        }),
    ))
}
