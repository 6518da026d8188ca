//! `POST /v1/runs/{id}/log`: metrics and params people log to a run, in
//! any state (runners; the `runs:write` scope), audited `run.log`; and
//! `GET /v1/runs/{id}/log`, the whole log (anyone who reads the run). The
//! log is bounded per run (see `mapi_api::tracking`); a request that would
//! break a bound adds nothing and says which.

use axum::extract::State;
use mapi_access::Action;
use mapi_api::tracking::{LogInput, RunLog};
use mapi_identity::{Audit, Caller};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path};
use mapi_schema::{RunLogDoc, tx_create, tx_get, tx_put};
use mapi_store::transact;

use super::runs::load_for;

/// Log metric points and params to a run.
#[utoipa::path(
    post,
    path = "/v1/runs/{id}/log",
    tag = "runs",
    params(("id" = String, Path)),
    request_body = LogInput,
    responses(
        (status = 200, body = RunLog, description = "The run's whole log"),
        (status = 400, body = mapi_problem::Problem, description = "A name, value or bound broken (INVALID_ARGUMENT, saying which)"),
        (status = 404, body = mapi_problem::Problem),
    ),
    security(("bearer" = []))
)]
pub async fn log(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Json(input): Json<LogInput>,
) -> Result<Json<RunLog>, ApiError> {
    let (run, granted) = load_for(&state, &caller, &id, Action::Update).await?;
    let now = state.clock.now();
    // Refused before the commit in the words the commit would use.
    RunLog::default().apply(&input, now).map_err(ApiError::invalid)?;
    let record = Audit::by(&caller, "run.log", format!("runs/{}", run.id()))
        .tenant(run.tenant())
        .project(run.project())
        .operator(granted.as_operator)
        .detail(format!("{} metric points, {} params", input.metrics.len(), input.params.len()))
        .into_doc(now, &*state.entropy);
    let (run, record, input) = (&run, &record, &input);
    let log = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let stored = tx_get::<RunLogDoc>(&mut tx, run.id().as_str()).await?;
        let before = stored.map(|d| d.log).unwrap_or_default();
        let log = before.apply(input, now).map_err(ApiError::invalid)?;
        let doc = RunLogDoc {
            run: run.id().clone(),
            tenant: run.tenant().clone(),
            project: run.project().clone(),
            log,
            updated_at: now,
        };
        tx_put(&mut tx, &doc)?;
        tx_create(&mut tx, record)?;
        Ok(tx.finish(doc.log))
    })
    .await?;
    Ok(Json(log))
}

/// A run's logged metrics (every point) and params.
#[utoipa::path(
    get,
    path = "/v1/runs/{id}/log",
    tag = "runs",
    params(("id" = String, Path)),
    responses((status = 200, body = RunLog), (status = 404, body = mapi_problem::Problem)),
    security(("bearer" = []))
)]
pub async fn read(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<RunLog>, ApiError> {
    let (run, _) = load_for(&state, &caller, &id, Action::Read).await?;
    let doc = mapi_schema::get::<RunLogDoc>(&*state.store, run.id().as_str()).await?;
    Ok(Json(doc.map(|d| d.log).unwrap_or_default()))
}
