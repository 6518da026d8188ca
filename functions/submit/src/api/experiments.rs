//! A project's experiments: named sets of its runs. Runners make, change
//! and delete them (the `run` update grant; tokens need `runs:write`),
//! everyone who reads runs reads them; each change is audited
//! (`experiment.create`, `.update`, `.delete`). A run joins one with
//! `PATCH /v1/runs/{id}` (`{"experiment": "name"}`, checked in the same
//! commit), and `GET …/runs?experiment=name` lists its runs.
//!
//! An experiment is deleted only once it holds no run, so no run names one
//! that is gone (a run that joins while the delete commits may still slip
//! in: its label then names no experiment until one of that name is made).

use axum::extract::State;
use axum::http::StatusCode;
use mapi_access::{Action, Resource};
use mapi_api::labels::{experiment_name_rule, is_experiment_name};
use mapi_domain::{ProjectId, TenantId};
use mapi_identity::{Audit, Caller};
use mapi_lifecycle::RunDoc;
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path, ProblemCode, Query};
use mapi_schema::{Doc, ExperimentDoc, named_id, tx_create, tx_get, tx_put};
use mapi_store::{Direction, Op, transact};
use serde::{Deserialize, Serialize};

use super::datasets::{PageQuery, project_page, require_project};

/// The longest description, in characters.
const MAX_DESCRIPTION: usize = 2000;

type NamedPath = Path<(TenantId, ProjectId, String)>;

/// The body of `POST …/experiments`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewExperiment {
    /// 1 to 64 of `a-z`, `0-9`, `-`, `_`, `.`; unique in the project.
    #[schema(pattern = "^[a-z0-9_.-]{1,64}$")]
    pub name: String,
    /// Up to 2,000 characters; new lines, but no other control characters.
    #[schema(pattern = "^[^\\x00-\\x09\\x0B-\\x1F\\x7F-\\x9F]*$", max_length = 2000)]
    pub description: Option<String>,
}

/// The body of `PATCH …/experiments/{name}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExperimentChange {
    /// Up to 2,000 characters; new lines, but no other control characters.
    #[schema(pattern = "^[^\\x00-\\x09\\x0B-\\x1F\\x7F-\\x9F]*$", max_length = 2000)]
    pub description: String,
}

/// A page of a project's experiments, by name.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ExperimentPage {
    pub experiments: Vec<ExperimentDoc>,
    pub next_page_token: Option<String>,
}

fn check_name(name: &str) -> Result<(), ApiError> {
    if is_experiment_name(name) {
        Ok(())
    } else {
        Err(ApiError::invalid(format!("name {}", experiment_name_rule(name))))
    }
}

fn check_description(d: &str) -> Result<String, ApiError> {
    if d.chars().count() > MAX_DESCRIPTION || d.chars().any(|c| c.is_control() && c != '\n') {
        return Err(ApiError::invalid(format!(
            "description must be at most {MAX_DESCRIPTION} characters, without control characters"
        )));
    }
    Ok(d.trim().to_owned())
}

/// The project's `D` called `name` (an experiment or a saved view: `what`),
/// or 404 naming it.
pub(crate) async fn named<D: Doc>(
    state: &AppState,
    tenant: &TenantId,
    project: &ProjectId,
    name: &str,
    what: &str,
) -> Result<D, ApiError> {
    let missing = || {
        let shown: String = name.chars().take(64).collect();
        ApiError::not_found(format!("{what} {shown} not found in {tenant}/{project}"))
    };
    if !is_experiment_name(name) {
        return Err(missing());
    }
    mapi_schema::get::<D>(&*state.store, &named_id(tenant, project, name)).await?.ok_or_else(missing)
}

/// The project's experiment `name`.
pub async fn find(
    state: &AppState,
    tenant: &TenantId,
    project: &ProjectId,
    name: &str,
) -> Result<ExperimentDoc, ApiError> {
    named(state, tenant, project, name, "experiment").await
}

/// Make an experiment.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/projects/{project}/experiments", tag = "runs",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path)), request_body = NewExperiment,
    responses((status = 201, body = ExperimentDoc), (status = 400, body = mapi_problem::Problem),
        (status = 409, body = mapi_problem::Problem, description = "The project has an experiment of that name (ALREADY_EXISTS)")),
    security(("session" = []), ("token" = [])))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    Json(body): Json<NewExperiment>,
) -> Result<(StatusCode, Json<ExperimentDoc>), ApiError> {
    let granted = require_project(&state, &caller, &tenant, &project, Resource::Run, Action::Update).await?;
    check_name(&body.name)?;
    let now = state.clock.now();
    let doc = ExperimentDoc {
        tenant: tenant.clone(),
        project: project.clone(),
        name: body.name.clone(),
        description: check_description(body.description.as_deref().unwrap_or_default())?,
        created_by: caller.user().clone(),
        created_at: now,
        updated_at: now,
    };
    let record = Audit::by(&caller, "experiment.create", format!("experiments/{}", doc.name))
        .tenant(&tenant)
        .project(&project)
        .operator(granted.as_operator)
        .into_doc(now, &*state.entropy);
    let (doc_ref, record) = (&doc, &record);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        tx_create(&mut tx, doc_ref)?;
        tx_create(&mut tx, record)?;
        Ok(tx.finish(()))
    })
    .await
    .map_err(|e| match e.code() {
        ProblemCode::AlreadyExists => ApiError::new(
            ProblemCode::AlreadyExists,
            format!("project {tenant}/{project} has an experiment named {}: pick another name", doc.name),
        ),
        _ => e,
    })?;
    Ok((StatusCode::CREATED, Json(doc)))
}

/// The project's experiments, by name.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/projects/{project}/experiments", tag = "runs",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), PageQuery),
    responses((status = 200, body = ExperimentPage), (status = 400, body = mapi_problem::Problem)), security(("session" = []), ("token" = [])))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    Query(q): Query<PageQuery>,
) -> Result<Json<ExperimentPage>, ApiError> {
    require_project(&state, &caller, &tenant, &project, Resource::Run, Action::Read).await?;
    let (experiments, next_page_token) =
        project_page(&state, &tenant, &project, &q, ("name", Direction::Asc)).await?;
    Ok(Json(ExperimentPage { experiments, next_page_token }))
}

/// An experiment.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/projects/{project}/experiments/{name}", tag = "runs",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("name" = String, Path)),
    responses((status = 200, body = ExperimentDoc), (status = 404, body = mapi_problem::Problem)), security(("session" = []), ("token" = [])))]
pub async fn get_experiment(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, name)): NamedPath,
) -> Result<Json<ExperimentDoc>, ApiError> {
    require_project(&state, &caller, &tenant, &project, Resource::Run, Action::Read).await?;
    Ok(Json(find(&state, &tenant, &project, &name).await?))
}

/// Change an experiment's description (its name is what runs name it by).
#[utoipa::path(patch, path = "/v1/tenants/{tenant}/projects/{project}/experiments/{name}", tag = "runs",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("name" = String, Path)), request_body = ExperimentChange,
    responses((status = 200, body = ExperimentDoc), (status = 400, body = mapi_problem::Problem), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = [])))]
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, name)): NamedPath,
    Json(body): Json<ExperimentChange>,
) -> Result<Json<ExperimentDoc>, ApiError> {
    let granted = require_project(&state, &caller, &tenant, &project, Resource::Run, Action::Update).await?;
    let description = check_description(&body.description)?;
    find(&state, &tenant, &project, &name).await?;
    let now = state.clock.now();
    let record = Audit::by(&caller, "experiment.update", format!("experiments/{name}"))
        .tenant(&tenant)
        .project(&project)
        .operator(granted.as_operator)
        .detail("changed description")
        .into_doc(now, &*state.entropy);
    let (id, record, description) = (named_id(&tenant, &project, &name), &record, &description);
    let id = &id;
    let doc = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let mut doc = tx_get::<ExperimentDoc>(&mut tx, id)
            .await?
            .ok_or_else(|| ApiError::not_found("experiment not found"))?;
        doc.description.clone_from(description);
        doc.updated_at = now;
        tx_put(&mut tx, &doc)?;
        tx_create(&mut tx, record)?;
        Ok(tx.finish(doc))
    })
    .await?;
    Ok(Json(doc))
}

/// Delete an experiment that holds no run.
#[utoipa::path(delete, path = "/v1/tenants/{tenant}/projects/{project}/experiments/{name}", tag = "runs",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("name" = String, Path)),
    responses((status = 204), (status = 404, body = mapi_problem::Problem),
        (status = 409, body = mapi_problem::Problem, description = "Runs are still in it (FAILED_PRECONDITION, naming one)")),
    security(("session" = []), ("token" = [])))]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, name)): NamedPath,
) -> Result<StatusCode, ApiError> {
    let granted = require_project(&state, &caller, &tenant, &project, Resource::Run, Action::Update).await?;
    find(&state, &tenant, &project, &name).await?;
    let held = mapi_store::Query::new(RunDoc::COLLECTION)
        .filter("tenant", Op::Eq, tenant.as_str())
        .filter("project", Op::Eq, project.as_str())
        .filter("labels.experiment", Op::Eq, name.as_str())
        .order_by("created_at", Direction::Desc)
        .limit(1);
    let now = state.clock.now();
    let record = Audit::by(&caller, "experiment.delete", format!("experiments/{name}"))
        .tenant(&tenant)
        .project(&project)
        .operator(granted.as_operator)
        .into_doc(now, &*state.entropy);
    let key = mapi_schema::key::<ExperimentDoc>(&named_id(&tenant, &project, &name))?;
    let (held, record, key, name_ref) = (&held, &record, &key, &name);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        if let Some(run) = tx.query(held).await?.first() {
            return Err(ApiError::precondition(format!(
                "experiment {name_ref} still holds runs ({} among them): take them out first with PATCH /v1/runs/{{id}} {{\"experiment\": \"\"}}",
                run.key.id()
            )));
        }
        tx.delete(key);
        tx_create(&mut tx, record)?;
        Ok(tx.finish(()))
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}
