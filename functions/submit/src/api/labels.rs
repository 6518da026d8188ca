//! `PATCH /v1/runs/{id}`: a run's name, note, tags and experiment (runners;
//! the `runs:write` scope), audited `run.update`. The change is applied to
//! the run as read in the commit, so two edits at once both land or one
//! retries; the experiment a run joins is read in the same commit, so it
//! exists when the run names it.

use axum::extract::State;
use mapi_access::Action;
use mapi_api::labels::LabelChange;
use mapi_api::views::RunView;
use mapi_identity::{Audit, Caller};
use mapi_lifecycle::RunDoc;
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path};
use mapi_schema::{ExperimentDoc, tx_create, tx_get};
use mapi_store::transact;

use super::runs::load_for;
use super::view;

/// Rename, annotate, retag a run or put it in an experiment (any state).
#[utoipa::path(
    patch,
    path = "/v1/runs/{id}",
    tag = "runs",
    params(("id" = mapi_domain::RunId, Path)),
    request_body = LabelChange,
    responses(
        (status = 200, body = RunView, description = "The run with its new labels"),
        (status = 400, body = mapi_problem::Problem, description = "A name, note, tag or experiment that cannot be (INVALID_ARGUMENT, saying what to fix)"),
        (status = 404, body = mapi_problem::Problem),
    ),
    security(("session" = []), ("token" = []))
)]
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Json(change): Json<LabelChange>,
) -> Result<Json<RunView>, ApiError> {
    if change.is_empty() {
        return Err(ApiError::invalid("name a field to change: name, note, tags or experiment"));
    }
    let (run, granted) = load_for(&state, &caller, &id, Action::Update).await?;
    // Refused before the commit, in the same words the commit would use.
    change.apply(run.labels()).map_err(ApiError::invalid)?;
    let changed: Vec<&str> = [
        ("name", change.name.is_some()),
        ("note", change.note.is_some()),
        ("tags", change.tags.is_some()),
        ("experiment", change.experiment.is_some()),
    ]
    .into_iter()
    .filter_map(|(f, on)| on.then_some(f))
    .collect();
    let record = Audit::by(&caller, "run.update", format!("runs/{}", run.id()))
        .tenant(run.tenant())
        .project(run.project())
        .operator(granted.as_operator)
        .detail(format!("changed {}", changed.join(", ")))
        .into_doc(state.clock.now(), &*state.entropy);
    let (id, record, change) = (run.id(), &record, &change);
    let step = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let run = tx_get::<RunDoc>(&mut tx, id.as_str())
            .await?
            .ok_or_else(|| ApiError::not_found("run not found"))?;
        if let Some(name) = change.experiment.as_deref().map(str::trim).filter(|e| !e.is_empty()) {
            let id = mapi_schema::named_id(run.tenant(), run.project(), name);
            if tx_get::<ExperimentDoc>(&mut tx, &id).await?.is_none() {
                return Err(ApiError::invalid(format!(
                    "experiment {name} is not one of project {}/{}'s experiments: make it first (POST …/experiments, mapi experiments create {name})",
                    run.tenant(),
                    run.project()
                )));
            }
        }
        let step = mapi_lifecycle::commands::relabel(run, change).map_err(ApiError::invalid)?;
        step.write(&mut tx)?;
        tx_create(&mut tx, record)?;
        Ok(tx.finish(step))
    })
    .await?;
    step.committed(&state.metrics);
    let run = match step.run() {
        Some(r) => r.clone(),
        None => super::runs::load(&state, run.id()).await?,
    };
    Ok(Json(view::build(&state, &run).await?))
}
