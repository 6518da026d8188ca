//! A run's outputs leave through one route: `GET /v1/runs/{id}/outputs/{name}`
//! checks that the caller may read the run, counts the output's size against
//! the tenant's egress of the month in the commit of its audit entry
//! (`artifact.download`; refused: 429 naming `egress_bytes_per_month`), and
//! answers `303 See Other` to a storage link valid a minute. A run's view
//! lists each output with this route as its `url` ([`super::view::link`]),
//! so viewing a run mints nothing and counts nothing.

use std::time::Duration;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use mapi_access::Action;
use mapi_domain::RunState;
use mapi_identity::{Audit, Caller};
use mapi_lifecycle::RunDoc;
use mapi_objects::{ObjectError, ObjectKey, SignedMethod};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Path};
use mapi_schema::layout;

/// How long the storage link a download is sent to works: it is followed at once.
const LINK_TTL: Duration = Duration::from_secs(60);

/// The object of output `name` (`{name}` of a single task, `{task}/{name}` of a fan-out),
/// once the run has outputs to show.
fn object_of(run: &RunDoc, name: &str) -> Option<ObjectKey> {
    if !matches!(run.state(), RunState::Succeeded | RunState::Partial) {
        return None;
    }
    // A fan-out parent's own outputs (no `/` in their names) are its aggregate's.
    if let Some(aggregate) = run.aggregate()
        && aggregate.outputs.iter().any(|o| o == name)
    {
        return ObjectKey::parse(&layout::aggregate(run.tenant(), run.project(), run.id(), name)).ok();
    }
    let (task, file) = match run.task_count() {
        1 => (0, name),
        n => name.split_once('/').and_then(|(t, f)| Some((t.parse::<u32>().ok().filter(|t| *t < n)?, f)))?,
    };
    let dir = layout::task_dir(run.tenant(), run.project(), run.id(), run.attempt(), task, run.task_count());
    ObjectKey::parse(&layout::output(&dir, file)).ok()
}

/// Download an output of a run: `303 See Other` to a storage link valid a minute. The output's
/// size counts against the tenant's egress of the month.
#[utoipa::path(
    get,
    path = "/v1/runs/{id}/outputs/{name}",
    tag = "runs",
    params(("id" = mapi_domain::RunId, Path), ("name" = String, Path, description = "As the run's view names it (`{task}/{name}` for a fan-out)")),
    responses(
        (status = 303, description = "`Location`: the output's bytes, a link valid 60 s"),
        (status = 404, body = mapi_problem::Problem),
        (status = 429, body = mapi_problem::Problem, description = "The tenant's egress of the month would pass its limit (QUOTA_EXCEEDED)"),
    ),
    security(("session" = []), ("token" = []))
)]
pub async fn download(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let (run, granted) = super::runs::load_for(&state, &caller, &id, Action::Read).await?;
    let missing = || {
        let shown: String = name.chars().take(80).collect();
        ApiError::not_found(format!("run {} has no output {shown}: its view lists its outputs", run.id()))
    };
    let key = object_of(&run, &name).ok_or_else(missing)?;
    let size = match state.objects.head(&key).await {
        Ok(meta) => meta.size,
        Err(ObjectError::NotFound(_)) => return Err(missing()),
        Err(e) => return Err(e.into()),
    };
    let record = Audit::by(&caller, "artifact.download", format!("runs/{}", run.id()))
        .tenant(run.tenant())
        .project(run.project())
        .operator(granted.as_operator)
        .detail(format!("output {name} ({size} bytes), a link valid {} s", LINK_TTL.as_secs()))
        .into_doc(state.clock.now(), &*state.entropy);
    let what = format!("runs/{}/outputs", run.id());
    super::egress::admit_link(&state, &caller, &granted, run.tenant(), size, &record, what).await?;
    let url = state.objects.signed_url(SignedMethod::Get, &key, LINK_TTL).await?;
    Ok((StatusCode::SEE_OTHER, [(header::LOCATION, url)]).into_response())
}
