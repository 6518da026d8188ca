//! `/v1/admin/executors`: the executors of this deployment, their health,
//! the operators' switch and the shared-tier evidence (the suites' reports
//! that open the gate for `verified` and `public` tenants). Operators only;
//! every change is audited in the same transaction as the change.

use axum::extract::{Path, State};
use mapi_access::{Action, Resource};
use mapi_domain::RunState;
use mapi_executor::evidence::{Evidence, GateDecision, shared_tier_gate};
use mapi_executor::{Capabilities, SubmitHealth};
use mapi_identity::{Audit, Caller, authorize_operator};
use mapi_lifecycle::RunDoc;
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json};
use mapi_schema::{Doc, ExecutorDoc, tx_create, tx_get, tx_put};
use mapi_store::{Direction, Op, transact};
use serde::{Deserialize, Serialize};

/// Runs counted per state in the view (a bound, not a limit on the platform).
const COUNT_LIMIT: u32 = 10_000;

/// Work on an executor and how it fares.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExecutorHealth {
    /// Runs dispatching, running or cancelling.
    pub running: usize,
    /// Runs waiting in the queue.
    pub queued: usize,
    /// Runs that failed in the last hour.
    pub failures_last_hour: usize,
    /// Executions created in the last hour.
    pub executions_last_hour: usize,
    /// Submits against the executor's rate limit, and 429s in the last hour.
    pub submits: SubmitHealth,
}

/// An executor, its switch, health and the shared-tier gate.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExecutorView {
    pub name: String,
    /// `enabled` or `disabled` (the operators' switch).
    pub status: String,
    pub enabled: bool,
    pub reason: Option<String>,
    pub capabilities: Capabilities,
    pub health: ExecutorHealth,
    #[serde(flatten)]
    pub gate: GateDecision,
    pub evidence_recorded_at: Option<mapi_domain::Timestamp>,
}

async fn count(
    state: &AppState,
    states: &[RunState],
    since: Option<mapi_domain::Timestamp>,
) -> Result<usize, ApiError> {
    let names: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
    let mut q = mapi_store::Query::new(RunDoc::COLLECTION)
        .filter("state", Op::In, serde_json::json!(names))
        .order_by("updated_at", Direction::Asc)
        .limit(COUNT_LIMIT);
    if let Some(t) = since {
        q = q.filter("updated_at", Op::Ge, serde_json::to_value(t)?);
    }
    Ok(state.store.query(&q, None).await?.len())
}

async fn record(state: &AppState) -> Result<ExecutorDoc, ApiError> {
    let name = state.executor.capabilities().executor;
    Ok(mapi_schema::get::<ExecutorDoc>(&*state.store, &name)
        .await?
        .unwrap_or_else(|| ExecutorDoc::fresh(&name)))
}

pub(crate) async fn view(state: &AppState, doc: ExecutorDoc) -> Result<ExecutorView, ApiError> {
    let now = state.clock.now();
    let hour_ago = now - std::time::Duration::from_secs(3600);
    let caps = state.executor.capabilities();
    let recent = state.executor.list_recent(hour_ago).await.map_err(|e| {
        ApiError::unavailable_because(
            "the executor's recent executions could not be read: retry shortly",
            5,
            &e,
        )
    })?;
    let health = ExecutorHealth {
        running: count(state, &[RunState::Dispatching, RunState::Running, RunState::Cancelling], None)
            .await?,
        queued: count(state, &[RunState::Queued], None).await?,
        failures_last_hour: count(state, &[RunState::Failed], Some(hour_ago)).await?,
        executions_last_hour: recent.len(),
        submits: state.executor.submit_health(),
    };
    let gate = shared_tier_gate(&caps, doc.evidence.as_ref(), now, state.config.evidence_max_age);
    Ok(ExecutorView {
        name: doc.name,
        status: if doc.enabled { "enabled" } else { "disabled" }.to_owned(),
        enabled: doc.enabled,
        reason: doc.reason,
        capabilities: caps,
        health,
        gate,
        evidence_recorded_at: doc.evidence_recorded_at,
    })
}

/// The executors of this deployment (operators).
#[utoipa::path(get, path = "/v1/admin/executors", tag = "admin", responses((status = 200, body = Vec<ExecutorView>)), security(("session" = [])))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<Vec<ExecutorView>>, ApiError> {
    authorize_operator(&state, &caller, Resource::Executor, Action::Read, "executors").await?;
    let doc = record(&state).await?;
    Ok(Json(vec![view(&state, doc).await?]))
}

pub(crate) fn known(state: &AppState, name: &str) -> Result<(), ApiError> {
    let ours = state.executor.capabilities().executor;
    if name == ours {
        Ok(())
    } else {
        Err(ApiError::not_found(format!("no executor `{name}` in this deployment (it has `{ours}`)")))
    }
}

/// Enable or disable an executor.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetExecutor {
    pub enabled: bool,
    /// Why (required): not blank.
    #[schema(
        pattern = "[^\\x09-\\x0D \\u0085\\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000]"
    )]
    pub reason: String,
}

/// Switch an executor on or off (operators, with a reason; audited). A
/// disabled executor takes no new attempts: runs wait in the queue.
#[utoipa::path(put, path = "/v1/admin/executors/{name}", tag = "admin", request_body = SetExecutor,
    responses((status = 200, body = ExecutorView), (status = 404, body = mapi_problem::Problem)), security(("session" = [])))]
pub async fn set(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    Json(body): Json<SetExecutor>,
) -> Result<Json<ExecutorView>, ApiError> {
    authorize_operator(&state, &caller, Resource::Executor, Action::Update, "executors").await?;
    known(&state, &name)?;
    let reason = body.reason.trim().to_owned();
    if reason.is_empty() {
        return Err(ApiError::invalid("switching an executor needs a reason"));
    }
    let now = state.clock.now();
    let entry = Audit::by(
        &caller,
        if body.enabled { "executor.enable" } else { "executor.disable" },
        format!("executors/{name}"),
    )
    .operator(true)
    .detail(format!("reason: {reason}"))
    .into_doc(now, &*state.entropy);
    let (name_ref, reason_ref, entry, user) = (&name, &reason, &entry, caller.user());
    let (doc, was_enabled) = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let mut doc =
            tx_get::<ExecutorDoc>(&mut tx, name_ref).await?.unwrap_or_else(|| ExecutorDoc::fresh(name_ref));
        let was_enabled = doc.enabled;
        doc.enabled = body.enabled;
        doc.reason = Some(reason_ref.clone());
        doc.set_by = Some(user.clone());
        doc.set_at = Some(now);
        tx_put(&mut tx, &doc)?;
        tx_create(&mut tx, entry)?;
        Ok(tx.finish((doc, was_enabled)))
    })
    .await?;
    if body.enabled && !was_enabled {
        offer_held_runs(&state).await;
    }
    Ok(Json(view(&state, doc).await?))
}

/// The most held runs one switch-on offers to the executor at once; the
/// tick offers the rest as it finds them.
const OFFERED_ON_ENABLE: u32 = 500;

/// An executor switched back on takes the runs it held at once: each queued
/// run that says why it waits gets its dispatch pushed now (named by the
/// second of the switch, apart from the tick's per-minute re-pushes), so it
/// neither waits for its held dispatch's retry nor keeps saying it is held.
/// A push that fails is left to the tick, which re-pushes queued runs.
async fn offer_held_runs(state: &AppState) {
    let now = state.clock.now();
    let queued = mapi_store::Query::new(RunDoc::COLLECTION)
        .filter("state", Op::Eq, RunState::Queued.as_str())
        .order_by("updated_at", Direction::Asc)
        .limit(OFFERED_ON_ENABLE);
    let docs = match state.store.query(&queued, None).await {
        Ok(docs) => docs,
        Err(e) => return tracing::warn!(error = %e, "listing the held runs failed; the tick offers them"),
    };
    for doc in docs {
        let Ok(run) = doc.decode::<RunDoc>() else { continue };
        if run.waiting().is_none() {
            continue;
        }
        let pushed = mapi_schema::tasks::push_dispatch(
            &*state.queue,
            run.id(),
            run.attempt(),
            Some(now.as_secs()),
            None,
        )
        .await;
        if let Err(e) = pushed {
            tracing::warn!(run = %run.id(), error = %e, "offering a held run failed; the tick offers it");
        }
    }
}

/// Record the conformance and security reports of an executor (operators;
/// audited). They open shared tiers only for the caps they name.
#[utoipa::path(put, path = "/v1/admin/executors/{name}/evidence", tag = "admin", request_body = Evidence,
    responses((status = 200, body = ExecutorView), (status = 400, body = mapi_problem::Problem)), security(("session" = [])))]
pub async fn evidence(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    Json(body): Json<Evidence>,
) -> Result<Json<ExecutorView>, ApiError> {
    authorize_operator(&state, &caller, Resource::Executor, Action::Update, "executors").await?;
    known(&state, &name)?;
    if body.target.executor != name || body.conformance.executor != name {
        return Err(ApiError::invalid(format!(
            "the reports are for `{}`, not `{name}`: record each executor's own reports",
            body.target.executor
        )));
    }
    let doc = save_evidence(&state, &caller, &name, &body, "executor.evidence").await?;
    Ok(Json(view(&state, doc).await?))
}

/// Records `body` as the executor's evidence with an audit entry `action` in one transaction.
pub(crate) async fn save_evidence(
    state: &AppState,
    caller: &Caller,
    name: &str,
    body: &Evidence,
    action: &str,
) -> Result<ExecutorDoc, ApiError> {
    let now = state.clock.now();
    let gate =
        shared_tier_gate(&state.executor.capabilities(), Some(body), now, state.config.evidence_max_age);
    let entry = Audit::by(caller, action, format!("executors/{name}"))
        .operator(true)
        .detail(format!(
            "conformance passed {}, security passed {}; shared tiers {}: {}",
            gate.conformance_passed, gate.security_passed, gate.shared_tiers_enabled, gate.message
        ))
        .into_doc(now, &*state.entropy);
    let (entry, user) = (&entry, caller.user());
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let mut doc = tx_get::<ExecutorDoc>(&mut tx, name).await?.unwrap_or_else(|| ExecutorDoc::fresh(name));
        doc.evidence = Some(body.clone());
        doc.evidence_recorded_by = Some(user.clone());
        doc.evidence_recorded_at = Some(now);
        tx_put(&mut tx, &doc)?;
        tx_create(&mut tx, entry)?;
        Ok(tx.finish(doc))
    })
    .await
}
