//! Reading what a run's executions printed, a page at a time. Once the run
//! housekeeper forgot a run's executions (its tenant's run retention
//! passed), the logs answer `410 GONE` saying so, not an empty page.

use axum::extract::State;
use mapi_access::Action;
use mapi_api::views::{LogLineView, RunLogs};
use mapi_domain::AttemptNo;
use mapi_executor::{ExecutorError, LogStream, MAX_LOG_PAGE};
use mapi_identity::Caller;
use mapi_lifecycle::RunDoc;
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path, Query};
use mapi_schema::{AttemptDoc, QuotaPolicyDoc};
use serde::Deserialize;

use super::runs::load_for;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    /// The attempt (1 is the first); the run's latest when absent.
    attempt: Option<u32>,
    /// Continue after the lines of an earlier answer (its `cursor`); absent or empty: from the
    /// first line.
    cursor: Option<String>,
    /// Lines per page: 1 to 1000; 200 when absent.
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

/// Read the output (stdout and stderr) of one attempt's execution, oldest line first. Follow a
/// running attempt by asking again with the answer's `cursor` until `finished` is true and `more`
/// is false.
#[utoipa::path(
    get,
    path = "/v1/runs/{id}/logs",
    tag = "runs",
    params(("id" = mapi_domain::RunId, Path), LogsQuery),
    responses(
        (status = 200, body = RunLogs, description = "A page of lines (empty before the execution starts)"),
        (status = 400, body = mapi_problem::Problem, description = "A limit out of range, or a cursor this run's executor did not give out (INVALID_ARGUMENT)"),
        (status = 404, body = mapi_problem::Problem, description = "No such run, or no such attempt"),
        (status = 410, body = mapi_problem::Problem, description = "The run's logs were removed: they passed the tenant's run retention (GONE)"),
        (status = 503, body = mapi_problem::Problem, description = "The executor's logs cannot be read now: retry"),
    ),
    security(("session" = []), ("token" = []))
)]
pub async fn run_logs(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<LogsQuery>,
) -> Result<Json<RunLogs>, ApiError> {
    let (run, _) = load_for(&state, &caller, &id, Action::Read).await?;
    if let Some(at) = run.leftovers_forgotten_at() {
        return Err(gone(&state, &run, at).await?);
    }
    // An empty cursor is no cursor: read from the start.
    let cursor = q.cursor.filter(|c| !c.is_empty());
    let limit = limit(q.limit)?;
    let attempt = attempt_of(&run, q.attempt)?;
    let row = mapi_schema::get::<AttemptDoc>(&*state.store, &AttemptDoc::id_of(run.id(), attempt)).await?;
    let finished = run.state().is_terminal() || attempt < run.attempt();
    let mut logs = RunLogs {
        run: run.id().clone(),
        attempt,
        execution: None,
        lines: Vec::new(),
        cursor: cursor.clone().unwrap_or_default(),
        more: false,
        finished,
    };
    let Some(handle) = row.and_then(|r| r.handle) else { return Ok(Json(logs)) };
    let page = state.executor.logs(&handle, cursor.as_deref(), limit).await.map_err(refused)?;
    logs.execution = Some(handle);
    logs.lines = page.lines.into_iter().map(view).collect();
    (logs.cursor, logs.more) = (page.cursor, page.more);
    Ok(Json(logs))
}

/// The answer for a run whose executions were forgotten: when, and the retention in force.
async fn gone(state: &AppState, run: &RunDoc, at: mapi_domain::Timestamp) -> Result<ApiError, ApiError> {
    let policy = mapi_schema::get::<QuotaPolicyDoc>(&*state.store, run.tenant().as_str()).await?;
    let days = policy
        .and_then(|p| p.policy.run_retention_days)
        .map_or(state.config.run_retention.as_secs() / 86_400, u64::from);
    Ok(ApiError::new(
        mapi_problem::ProblemCode::Gone,
        format!(
            "the logs of run {} were removed on {}: they passed tenant {}'s run retention of {days} days; the run, its outputs and its charges stay",
            run.id(),
            at.to_rfc3339(),
            run.tenant()
        ),
    ))
}

fn limit(requested: Option<u32>) -> Result<usize, ApiError> {
    let max = u32::try_from(MAX_LOG_PAGE).unwrap_or(u32::MAX);
    Ok(mapi_problem::count("limit", requested, 200, max)? as usize)
}

fn attempt_of(run: &RunDoc, asked: Option<u32>) -> Result<AttemptNo, ApiError> {
    let Some(n) = asked else { return Ok(run.attempt()) };
    let latest = run.attempt();
    match AttemptNo(n) {
        a if a >= AttemptNo::FIRST && a <= latest => Ok(a),
        _ => Err(ApiError::not_found(format!(
            "run {} has no attempt {n}: its attempts are 1 to {latest}",
            run.id()
        ))),
    }
}

fn refused(e: ExecutorError) -> ApiError {
    match e {
        ExecutorError::Cursor(_) => ApiError::invalid(
            "cursor is not one this run's logs gave out: pass the `cursor` of an earlier answer, or none to start over",
        ),
        ExecutorError::Unavailable(why) => {
            tracing::warn!(error = %why, "reading an execution's logs");
            ApiError::unavailable("the executor's logs cannot be read now: retry shortly", 2)
        }
        ExecutorError::Internal(why) => ApiError::internal(format!("reading an execution's logs: {why}")),
    }
}

fn view(line: mapi_executor::LogLine) -> LogLineView {
    let stream = match line.stream {
        LogStream::Stdout => "stdout",
        LogStream::Stderr => "stderr",
    };
    LogLineView { task: line.task, stream: stream.to_owned(), at: line.at, text: line.text }
}
