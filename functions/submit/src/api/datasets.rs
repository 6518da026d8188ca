//! Dataset upload and listing.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use mapi_access::{Action, Resource};
use mapi_api::views::{DatasetPage, DatasetSummary, DatasetUrl, DatasetView};
use mapi_domain::{DatasetId, ProjectId, TenantId};
use mapi_identity::{Audit, Caller, Granted, Target, authorize};
use mapi_methods::{Limits, Shape};
use mapi_objects::{IfGeneration, ObjectKey};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path, ProblemCode, Query, RawBody, page_size};
use mapi_quota::Ask;
use mapi_schema::{DatasetDoc, Doc, layout};

use mapi_admission::quota;
use mapi_store::{Direction, Op};
use serde::Deserialize;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct UploadQuery {
    /// A name for the dataset (1 to 200 characters); `dataset` when absent.
    name: Option<String>,
}

/// Checks `caller` may do `action` on datasets of the project.
pub async fn require_project(
    state: &AppState,
    caller: &Caller,
    tenant: &TenantId,
    project: &ProjectId,
    resource: Resource,
    action: Action,
) -> Result<Granted, ApiError> {
    let what = format!("project {tenant}/{project}");
    authorize(state, caller, Target::project(tenant, project, &what), resource, action).await
}

/// A page of a listing: `?page_size=&page_token=`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// 1 to 200; 50 when absent.
    #[param(minimum = 1, maximum = 200)]
    pub(crate) page_size: Option<u32>,
    pub(crate) page_token: Option<String>,
}

/// A page of the project's documents of `D`, newest first (by
/// `created_at`), and the token of the next page.
pub async fn newest_first<D: Doc>(
    state: &AppState,
    tenant: &TenantId,
    project: &ProjectId,
    q: &PageQuery,
) -> Result<(Vec<D>, Option<String>), ApiError> {
    project_page(state, tenant, project, q, ("created_at", Direction::Desc)).await
}

/// A page of the project's documents of `D` in `order`, and the token of
/// the next page.
pub async fn project_page<D: Doc>(
    state: &AppState,
    tenant: &TenantId,
    project: &ProjectId,
    q: &PageQuery,
    order: (&str, Direction),
) -> Result<(Vec<D>, Option<String>), ApiError> {
    let (docs, next_page_token) = mapi_store::Query::new(D::COLLECTION)
        .filter("tenant", Op::Eq, tenant.as_str())
        .filter("project", Op::Eq, project.as_str())
        .order_by(order.0, order.1)
        .page(&*state.store, page_size(q.page_size)?, q.page_token.as_deref())
        .await?;
    let docs = docs.iter().map(|d| d.decode::<D>()).collect::<Result<_, _>>()?;
    Ok((docs, next_page_token))
}

/// 80 bits of entropy for a new identifier, from the platform's source.
pub fn entropy(state: &AppState) -> Result<[u8; 10], ApiError> {
    Ok(mapi_entropy::bytes(&*state.entropy)?)
}

/// Upload a CSV dataset.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant}/projects/{project}/datasets",
    tag = "datasets",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), UploadQuery),
    request_body(
        content((String = "text/csv"), (inline(mapi_problem::RawBytes) = "application/octet-stream")),
        description = "A CSV file with a header row, sent as text/csv or as the file's bytes"
    ),
    responses(
        (status = 201, body = DatasetView, description = "Stored"),
        (status = 400, body = mapi_problem::Problem, description = "Not a valid CSV"),
        (status = 413, body = mapi_problem::Problem, description = "Larger than MAPI_MAX_DATASET_BYTES, or more columns (MAPI_DATASET_MAX_COLUMNS), rows (MAPI_DATASET_MAX_ROWS) or a larger cell (MAPI_DATASET_MAX_CELL_BYTES) than a dataset may hold"),
        (status = 415, body = mapi_problem::Problem, description = "Not sent as text/csv or application/octet-stream"),
        (status = 429, body = mapi_problem::Problem, description = "The storage quota or the request rate would be exceeded (QUOTA_EXCEEDED, RATE_LIMITED), with Retry-After when the limit resets"),
    ),
    security(("session" = []), ("token" = []))
)]
pub async fn upload(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    Query(q): Query<UploadQuery>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<(StatusCode, Json<DatasetView>), ApiError> {
    let tier = require_project(&state, &caller, &tenant, &project, Resource::Dataset, Action::Create)
        .await?
        .tenant
        .tier;
    let content_type = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    // A file's bytes (what generated clients send for an upload) are read
    // as CSV like the rest; what is stored is always text/csv.
    if !matches!(essence.as_str(), "text/csv" | "application/csv" | "text/plain" | "application/octet-stream")
    {
        return Err(ApiError::new(
            ProblemCode::UnsupportedMediaType,
            format!(
                "send the dataset as `content-type: text/csv` (or the file's bytes as application/octet-stream), not `{content_type}`"
            ),
        ));
    }
    let name = q.name.unwrap_or_else(|| "dataset".to_owned());
    if name.trim().is_empty() || name.chars().count() > 200 || name.chars().any(char::is_control) {
        return Err(ApiError::invalid("name must be 1 to 200 printable characters"));
    }
    let shape = scan(&state, &body)?;
    let now = state.clock.now();
    let id = DatasetId::generate(now, entropy(&state)?);
    let object = layout::dataset(&tenant, &project, &id);
    let key = ObjectKey::parse(&object)?;
    let size = body.len() as u64;
    let meta = state.objects.put(&key, body, "text/csv", IfGeneration::ABSENT).await?;
    let doc = DatasetDoc {
        id,
        tenant,
        project,
        name,
        object,
        generation: meta.generation.0,
        size,
        rows: shape.rows,
        numeric_columns: shape.numeric_columns().into_iter().map(str::to_owned).collect(),
        columns: shape.names,
        created_at: now,
        created_by: caller.user().clone(),
    };
    // Storage and the request rate are admitted with the dataset's record;
    // a refused upload's object is removed again.
    let request = quota::Request {
        caller: &caller,
        tenant: &doc.tenant,
        tier,
        ask: Ask::Upload { bytes: size },
        seed: doc.id.as_str(),
        what: format!("datasets/{}", doc.id),
    };
    let (doc_ref, state_ref) = (&doc, &state);
    let admitted = quota::admit_and_commit(&state, &request, |plan| async move {
        super::admitted::create_with(state_ref, &plan, doc_ref).await
    })
    .await;
    if let Err(e) = admitted {
        if let Err(d) = state.objects.delete(&key, IfGeneration::Match(meta.generation)).await {
            tracing::warn!(object = %key, error = %d, "could not remove the object of a refused upload");
        }
        return Err(e);
    }
    tracing::info!(dataset = %doc.id, rows = doc.rows, size, "dataset uploaded");
    Ok((StatusCode::CREATED, Json(DatasetView::from(&doc))))
}

/// The longest column name, in bytes.
const MAX_NAME_BYTES: usize = 256;

/// The shape of an upload, read under the dataset limits: a file past one
/// can never be stored as it is, so it is 413 naming the limit; one that is
/// not a table is 400.
fn scan(state: &AppState, body: &[u8]) -> Result<Shape, ApiError> {
    use mapi_methods::TableError as E;
    let l = state.config.dataset_limits;
    let limits = Limits {
        max_columns: l.max_columns,
        max_rows: l.max_rows,
        max_cell_bytes: l.max_cell_bytes,
        max_name_bytes: MAX_NAME_BYTES,
    };
    Shape::scan(body, limits).map_err(|e| {
        let setting = match e {
            E::TooManyColumns { .. } => "MAPI_DATASET_MAX_COLUMNS",
            E::TooManyRows { .. } => "MAPI_DATASET_MAX_ROWS",
            E::CellTooLarge { .. } => "MAPI_DATASET_MAX_CELL_BYTES",
            _ => return ApiError::invalid(format!("the dataset is not a valid CSV: {e}")),
        };
        ApiError::new(
            ProblemCode::PayloadTooLarge,
            format!("the dataset is too large to store: {e} ({setting})"),
        )
    })
}

/// A dataset, with its columns.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/projects/{project}/datasets/{id}",
    tag = "datasets",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("id" = mapi_domain::DatasetId, Path)),
    responses((status = 200, body = DatasetView), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn get_dataset(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, id)): Path<(TenantId, ProjectId, String)>,
) -> Result<Json<DatasetView>, ApiError> {
    require_project(&state, &caller, &tenant, &project, Resource::Dataset, Action::Read).await?;
    Ok(Json(DatasetView::from(&find(&state, &tenant, &project, &id).await?)))
}

/// "Not found" for a dataset id as it was asked (cut short), in its project.
fn not_found(tenant: &TenantId, project: &ProjectId, id: &str) -> ApiError {
    let id: String = id.chars().take(64).collect();
    ApiError::not_found(format!("dataset {id} not found in {tenant}/{project}"))
}

/// The project's dataset `id`; one of another project is not found, as a
/// missing one is.
async fn find(
    state: &AppState,
    tenant: &TenantId,
    project: &ProjectId,
    id: &str,
) -> Result<DatasetDoc, ApiError> {
    let parsed = DatasetId::parse(id).map_err(|_| not_found(tenant, project, id))?;
    match mapi_schema::get::<DatasetDoc>(&*state.store, parsed.as_str()).await? {
        Some(d) if &d.tenant == tenant && &d.project == project => Ok(d),
        _ => Err(not_found(tenant, project, id)),
    }
}

/// List a project's datasets, newest first, without their columns (a
/// dataset's own page has them).
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/projects/{project}/datasets",
    tag = "datasets",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), PageQuery),
    responses((status = 200, body = DatasetPage)),
    security(("session" = []), ("token" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    Query(q): Query<PageQuery>,
) -> Result<Json<DatasetPage>, ApiError> {
    require_project(&state, &caller, &tenant, &project, Resource::Dataset, Action::Read).await?;
    let (docs, next_page_token) = newest_first::<DatasetDoc>(&state, &tenant, &project, &q).await?;
    let datasets = docs.iter().map(DatasetSummary::from).collect();
    Ok(Json(DatasetPage { datasets, next_page_token }))
}

/// The states of a run that may still read its dataset.
/// Delete a dataset (tenant and project admins): its record and its object;
/// the storage it counted against the tenant's quota is given back. A
/// dataset a run still reads (queued to cancelling) is kept: 409 names the run.
#[utoipa::path(
    delete,
    path = "/v1/tenants/{tenant}/projects/{project}/datasets/{id}",
    tag = "datasets",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("id" = mapi_domain::DatasetId, Path)),
    responses(
        (status = 204, description = "Deleted; its storage no longer counts"),
        (status = 404, body = mapi_problem::Problem),
        (status = 409, body = mapi_problem::Problem, description = "A run that has not finished reads it (FAILED_PRECONDITION)"),
    ),
    security(("session" = []), ("token" = []))
)]
pub async fn delete_dataset(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, id)): Path<(TenantId, ProjectId, String)>,
) -> Result<StatusCode, ApiError> {
    let granted =
        require_project(&state, &caller, &tenant, &project, Resource::Dataset, Action::Delete).await?;
    let doc = find(&state, &tenant, &project, &id).await?;
    if let Some(run) = mapi_datasets::reading_run(&state, &doc.id).await? {
        return Err(ApiError::new(
            ProblemCode::FailedPrecondition,
            format!(
                "run {} ({}) still reads dataset {}: cancel it or let it finish, then delete the dataset",
                run.0, run.1, doc.id
            ),
        ));
    }
    let record = Audit::by(&caller, "dataset.delete", format!("datasets/{}", doc.id))
        .tenant(&tenant)
        .project(&project)
        .operator(granted.as_operator)
        .detail(format!("{} ({} bytes)", doc.name, doc.size))
        .into_doc(state.clock.now(), &*state.entropy);
    // A repeated delete finds no record (404) and gives nothing back twice.
    if !mapi_datasets::remove(&state, &doc, &record).await? {
        return Err(not_found(&tenant, &project, &id));
    }
    Ok(StatusCode::NO_CONTENT)
}

/// How long a dataset's download link is valid.
const DOWNLOAD_TTL: std::time::Duration = std::time::Duration::from_secs(900);

/// A link to download the dataset's file, valid 15 minutes. Every link is
/// audited (`dataset.download`) before it is given: no audit entry, no link.
/// The file's size counts against the tenant's egress of the month; past
/// it, 429 `QUOTA_EXCEEDED` names `egress_bytes_per_month`.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant}/projects/{project}/datasets/{id}/url",
    tag = "datasets",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("id" = mapi_domain::DatasetId, Path)),
    responses(
        (status = 200, body = DatasetUrl),
        (status = 404, body = mapi_problem::Problem),
        (status = 429, body = mapi_problem::Problem, description = "The tenant's egress of the month would pass its limit (QUOTA_EXCEEDED)"),
    ),
    security(("session" = []), ("token" = []))
)]
pub async fn download_url(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, id)): Path<(TenantId, ProjectId, String)>,
) -> Result<Json<DatasetUrl>, ApiError> {
    let granted =
        require_project(&state, &caller, &tenant, &project, Resource::Dataset, Action::Read).await?;
    let doc = find(&state, &tenant, &project, &id).await?;
    let key = ObjectKey::parse(&doc.object)?;
    let record = Audit::by(&caller, "dataset.download", format!("datasets/{}", doc.id))
        .tenant(&tenant)
        .project(&project)
        .operator(granted.as_operator)
        .detail(format!("{} ({} bytes), a link valid {} s", doc.name, doc.size, DOWNLOAD_TTL.as_secs()))
        .into_doc(state.clock.now(), &*state.entropy);
    let what = format!("datasets/{}/url", doc.id);
    super::egress::admit_link(&state, &caller, &granted, &tenant, doc.size, &record, what).await?;
    let url = state.objects.signed_url(mapi_objects::SignedMethod::Get, &key, DOWNLOAD_TTL).await?;
    Ok(Json(DatasetUrl { dataset: doc.id, url, expires_in_s: DOWNLOAD_TTL.as_secs() }))
}
