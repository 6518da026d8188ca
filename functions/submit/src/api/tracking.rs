//! `POST /v1/runs/{id}/log`: metrics and params people log to a run, in
//! any state (runners; the `runs:write` scope), audited `run.log`;
//! `PUT /v1/runs/{id}/images/{name}`: an image logged the same way, its
//! bytes an object beside the run's; `GET /v1/runs/{id}/log`, the whole log,
//! and `POST /v1/runs/{id}/images/{name}/url`, a link to an image, audited
//! `artifact.link` (anyone who reads the run). The log is bounded per run
//! (see `mapi_api::tracking`); a request that would break a bound adds
//! nothing and says which.

use axum::extract::State;
use mapi_access::Action;
use mapi_api::tracking::{ImageRef, LogInput, RunLog};
use mapi_identity::{Audit, Caller};
use mapi_lifecycle::RunDoc;
use mapi_objects::{IfGeneration, ObjectKey, SignedMethod};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path, ProblemCode, Query, RawBody};
use mapi_schema::{AuditDoc, RunLogDoc, layout, tx_create, tx_get, tx_put};
use mapi_store::transact;
use serde::{Deserialize, Serialize};

use super::runs::load_for;

/// Log metric points and params to a run.
#[utoipa::path(
    post,
    path = "/v1/runs/{id}/log",
    tag = "runs",
    params(("id" = mapi_domain::RunId, Path)),
    request_body = LogInput,
    responses(
        (status = 200, body = RunLog, description = "The run's whole log"),
        (status = 400, body = mapi_problem::Problem, description = "A name, value or bound broken (INVALID_ARGUMENT, saying which)"),
        (status = 404, body = mapi_problem::Problem),
    ),
    security(("session" = []), ("token" = []))
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
    Ok(Json(commit(&state, &run, &record, |before| before.apply(&input, now)).await?))
}

/// Commits `change` to the run's log as read in the commit, with `record`.
async fn commit(
    state: &AppState,
    run: &RunDoc,
    record: &AuditDoc,
    change: impl Fn(RunLog) -> Result<RunLog, String> + Send + Sync,
) -> Result<RunLog, ApiError> {
    let now = state.clock.now();
    let change = &change;
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let stored = tx_get::<RunLogDoc>(&mut tx, run.id().as_str()).await?;
        let log = change(stored.map(|d| d.log).unwrap_or_default()).map_err(ApiError::invalid)?;
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
    .await
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ImageQuery {
    /// The step the image shows (an epoch, an iteration).
    step: Option<u64>,
}

/// Log an image to a run (PNG, JPEG, WebP or GIF, at most 1 MiB), or
/// replace the one of that name.
#[utoipa::path(
    put,
    path = "/v1/runs/{id}/images/{name}",
    tag = "runs",
    params(("id" = mapi_domain::RunId, Path), ("name" = String, Path, description = "1 to 64 letters, digits, `_`, `-`, `.` or `/`"), ImageQuery),
    request_body(
        content(
            (inline(mapi_problem::RawBytes) = "application/octet-stream"),
            (inline(mapi_problem::RawBytes) = "image/png"),
            (inline(mapi_problem::RawBytes) = "image/jpeg"),
            (inline(mapi_problem::RawBytes) = "image/webp"),
            (inline(mapi_problem::RawBytes) = "image/gif")
        ),
        description = "The image's bytes; what it is is told from the bytes, whatever the content type says"
    ),
    responses(
        (status = 200, body = RunLog, description = "The run's whole log"),
        (status = 400, body = mapi_problem::Problem, description = "A name or bound broken (INVALID_ARGUMENT, saying which)"),
        (status = 404, body = mapi_problem::Problem),
        (status = 413, body = mapi_problem::Problem, description = "Over 1 MiB"),
        (status = 415, body = mapi_problem::Problem, description = "Not the bytes of a PNG, JPEG, WebP or GIF image"),
    ),
    security(("session" = []), ("token" = []))
)]
pub async fn put_image(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, name)): Path<(String, String)>,
    Query(q): Query<ImageQuery>,
    RawBody(body): RawBody,
) -> Result<Json<RunLog>, ApiError> {
    let (run, granted) = load_for(&state, &caller, &id, Action::Update).await?;
    let Some(content_type) = mapi_api::tracking::image_type(&body) else {
        return Err(ApiError::new(
            ProblemCode::UnsupportedMediaType,
            "send the bytes of a PNG, JPEG, WebP or GIF image (what they are is told from the bytes themselves)",
        ));
    };
    let now = state.clock.now();
    let image =
        ImageRef { content_type: content_type.to_owned(), size: body.len() as u64, step: q.step, at: now };
    // Refused before anything is written, in the words the commit would use.
    RunLog::default().with_image(&name, image.clone()).map_err(ApiError::invalid)?;
    let key = ObjectKey::parse(&layout::image(run.tenant(), run.project(), run.id(), &name))?;
    state.objects.put(&key, body, content_type, IfGeneration::Any).await?;
    let record = Audit::by(&caller, "run.log", format!("runs/{}", run.id()))
        .tenant(run.tenant())
        .project(run.project())
        .operator(granted.as_operator)
        .detail(format!("image {name} ({} bytes, {content_type})", image.size))
        .into_doc(now, &*state.entropy);
    Ok(Json(commit(&state, &run, &record, |before| before.with_image(&name, image.clone())).await?))
}

/// How long an image's link works.
const IMAGE_LINK_TTL: std::time::Duration = std::time::Duration::from_secs(900);

/// A link to an image logged to a run, valid 15 minutes; audited
/// (`artifact.link`) before it is given, its size counted against the
/// tenant's egress of the month.
#[utoipa::path(
    post,
    path = "/v1/runs/{id}/images/{name}/url",
    tag = "runs",
    params(("id" = mapi_domain::RunId, Path), ("name" = String, Path)),
    responses(
        (status = 200, body = ImageUrl),
        (status = 404, body = mapi_problem::Problem),
        (status = 429, body = mapi_problem::Problem, description = "The tenant's egress of the month would pass its limit (QUOTA_EXCEEDED)"),
    ),
    security(("session" = []), ("token" = []))
)]
pub async fn image_url(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, name)): Path<(String, String)>,
) -> Result<Json<ImageUrl>, ApiError> {
    let (run, granted) = load_for(&state, &caller, &id, Action::Read).await?;
    let logged = mapi_schema::get::<RunLogDoc>(&*state.store, run.id().as_str()).await?;
    let Some(image) = logged.and_then(|d| d.log.images.get(&name).cloned()) else {
        let shown: String = name.chars().take(64).collect();
        return Err(ApiError::not_found(format!("run {} has no image {shown}", run.id())));
    };
    let key = ObjectKey::parse(&layout::image(run.tenant(), run.project(), run.id(), &name))?;
    let url = state.objects.signed_url(SignedMethod::Get, &key, IMAGE_LINK_TTL).await?;
    let record = Audit::by(&caller, "artifact.link", format!("runs/{}", run.id()))
        .tenant(run.tenant())
        .project(run.project())
        .operator(granted.as_operator)
        .detail(format!("image {name} ({} bytes), a link valid {} s", image.size, IMAGE_LINK_TTL.as_secs()))
        .into_doc(state.clock.now(), &*state.entropy);
    let what = format!("runs/{}/images/{name}/url", run.id());
    super::egress::admit_link(&state, &caller, &granted, run.tenant(), image.size, &record, what).await?;
    Ok(Json(ImageUrl { name, content_type: image.content_type, url, expires_in_s: IMAGE_LINK_TTL.as_secs() }))
}

/// A link to an image.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ImageUrl {
    pub name: String,
    pub content_type: String,
    pub url: String,
    pub expires_in_s: u64,
}

/// A run's logged metrics (every point) and params.
#[utoipa::path(
    get,
    path = "/v1/runs/{id}/log",
    tag = "runs",
    params(("id" = mapi_domain::RunId, Path)),
    responses((status = 200, body = RunLog), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
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
