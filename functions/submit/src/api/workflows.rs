//! A project's workflows: created, read, updated (each update a new
//! version, every version kept) and deleted. Their runs are
//! [`super::workflow_runs`]'.

use axum::extract::State;
use axum::http::StatusCode;
use mapi_access::{Action, Resource};
use mapi_api::workflows::{CreateWorkflow, UpdateWorkflow, WorkflowPage, WorkflowView};
use mapi_domain::{ProjectId, TenantId};
use mapi_identity::{Audit, Caller};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path, Query};
use mapi_schema::{Doc, WorkflowDoc, WorkflowVersionDoc, key, tx_create, tx_get, tx_put};
use mapi_store::{Direction, transact};
use mapi_workflows::Definition;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::datasets::{PageQuery, project_page, require_project};

/// What the checks of a definition know of methods: the registry's
/// dataset methods; a plugin's method is judged when its run is submitted.
struct Registry;

impl mapi_workflows::Methods for Registry {
    fn produces_model(&self, method: &str) -> Result<Option<bool>, String> {
        if method.starts_with(mapi_plugins::PREFIX) {
            return Ok(None);
        }
        let found = mapi_methods::find(method).filter(|m| m.input == mapi_methods::Input::Dataset);
        match found {
            Some(m) => Ok(Some(m.produces_model())),
            None => {
                let known: Vec<&str> = mapi_methods::all()
                    .iter()
                    .filter(|m| m.input == mapi_methods::Input::Dataset)
                    .map(|m| m.name)
                    .collect();
                Err(format!(
                    "unknown method `{}`: use one of {} (or a plugin's p.PLUGIN.METHOD)",
                    method.chars().take(64).collect::<String>(),
                    known.join(", ")
                ))
            }
        }
    }

    fn check_params(&self, method: &str, params: &Map<String, Value>) -> Result<(), String> {
        let Some(m) = mapi_methods::find(method) else { return Ok(()) };
        let params = params.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        mapi_methods::validate(m, &params).map(|_| ()).map_err(|e| e.to_string())
    }
}

/// The definition a request gives: an object, or its YAML or JSON text;
/// checked, with an error naming the node and field.
pub(crate) fn definition_of(given: &Value) -> Result<Definition, ApiError> {
    let invalid = |e: mapi_workflows::DefinitionError| ApiError::invalid(format!("definition: {e}"));
    let value = match given {
        Value::String(text) => Definition::parse(text).map_err(invalid)?,
        other => other.clone(),
    };
    let definition = Definition::decode(&value).map_err(invalid)?;
    definition.check(&Registry).map_err(invalid)?;
    Ok(definition)
}

fn check_name(name: &str) -> Result<(), ApiError> {
    let mut chars = name.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && name.len() <= 63
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        return Ok(());
    }
    Err(ApiError::invalid("name: use a lowercase letter, then up to 62 lowercase letters, digits or `-`"))
}

fn view(doc: WorkflowDoc) -> WorkflowView {
    WorkflowView {
        name: doc.name,
        version: doc.version,
        latest: doc.version,
        definition: doc.definition,
        created_by: doc.created_by,
        created_at: doc.created_at,
        updated_by: doc.updated_by,
        updated_at: doc.updated_at,
    }
}

/// The workflow `name` of a project, or 404.
pub(crate) async fn load(
    state: &AppState,
    (tenant, project): (&TenantId, &ProjectId),
    name: &str,
) -> Result<WorkflowDoc, ApiError> {
    let missing = || {
        ApiError::not_found(format!(
            "workflow {} not found in {tenant}/{project}",
            name.chars().take(64).collect::<String>()
        ))
    };
    // A name no workflow can have names none (and is no key to look up).
    check_name(name).map_err(|_| missing())?;
    mapi_schema::get::<WorkflowDoc>(&*state.store, &WorkflowDoc::id_of(tenant, project, name))
        .await?
        .ok_or_else(missing)
}

/// Version `version` of a workflow, or 404.
pub(crate) async fn version(
    state: &AppState,
    doc: &WorkflowDoc,
    version: u32,
) -> Result<WorkflowVersionDoc, ApiError> {
    let id = WorkflowVersionDoc::id_of(&doc.tenant, &doc.project, &doc.name, version);
    mapi_schema::get::<WorkflowVersionDoc>(&*state.store, &id).await?.ok_or_else(|| {
        ApiError::not_found(format!(
            "workflow {} has no version {version} (its latest is {})",
            doc.name, doc.version
        ))
    })
}

/// Create a workflow.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/projects/{project}/workflows", tag = "workflows",
    params(("tenant" = TenantId, Path), ("project" = ProjectId, Path)),
    request_body = CreateWorkflow,
    responses(
        (status = 201, body = WorkflowView, description = "Created at version 1"),
        (status = 400, body = mapi_problem::Problem, description = "The definition cannot run: the detail names the node and the field"),
        (status = 404, body = mapi_problem::Problem),
        (status = 409, body = mapi_problem::Problem, description = "A workflow of this name exists"),
    ),
    security(("session" = []), ("token" = [])))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    Json(body): Json<CreateWorkflow>,
) -> Result<(StatusCode, Json<WorkflowView>), ApiError> {
    require_project(&state, &caller, &tenant, &project, Resource::Workflow, Action::Create).await?;
    check_name(&body.name)?;
    let definition = definition_of(&body.definition)?;
    let now = state.clock.now();
    let doc = WorkflowDoc {
        tenant: tenant.clone(),
        project: project.clone(),
        name: body.name.clone(),
        version: 1,
        definition,
        created_by: caller.user().clone(),
        created_at: now,
        updated_by: caller.user().clone(),
        updated_at: now,
    };
    let record = Audit::by(&caller, "workflow.create", format!("workflows/{}", body.name))
        .tenant(&tenant)
        .project(&project)
        .detail(format!("version 1, {} nodes", doc.definition.nodes.len()))
        .into_doc(now, &*state.entropy);
    let (d, r) = (&doc, &record);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        if tx_get::<WorkflowDoc>(&mut tx, &d.doc_id()).await?.is_some() {
            return Err(ApiError::new(
                mapi_problem::ProblemCode::AlreadyExists,
                format!(
                    "workflow {} exists: update it (mapi workflows update) or choose another name",
                    d.name
                ),
            ));
        }
        tx_create(&mut tx, d)?;
        tx_create(&mut tx, &version_of(d))?;
        tx_create(&mut tx, r)?;
        Ok(tx.finish(()))
    })
    .await?;
    Ok((StatusCode::CREATED, Json(view(doc))))
}

fn version_of(d: &WorkflowDoc) -> WorkflowVersionDoc {
    WorkflowVersionDoc {
        tenant: d.tenant.clone(),
        project: d.project.clone(),
        workflow: d.name.clone(),
        version: d.version,
        definition: d.definition.clone(),
        created_by: d.updated_by.clone(),
        created_at: d.updated_at,
    }
}

/// Replace a workflow's definition: its next version.
#[utoipa::path(put, path = "/v1/tenants/{tenant}/projects/{project}/workflows/{workflow}", tag = "workflows",
    params(("tenant" = TenantId, Path), ("project" = ProjectId, Path), ("workflow" = String, Path)),
    request_body = UpdateWorkflow,
    responses(
        (status = 200, body = WorkflowView, description = "The new version"),
        (status = 400, body = mapi_problem::Problem, description = "The definition cannot run: the detail names the node and the field"),
        (status = 404, body = mapi_problem::Problem),
        (status = 409, body = mapi_problem::Problem, description = "`version` is not the latest: another update came first"),
    ),
    security(("session" = []), ("token" = [])))]
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, name)): Path<(TenantId, ProjectId, String)>,
    Json(body): Json<UpdateWorkflow>,
) -> Result<Json<WorkflowView>, ApiError> {
    require_project(&state, &caller, &tenant, &project, Resource::Workflow, Action::Update).await?;
    let definition = definition_of(&body.definition)?;
    let id = load(&state, (&tenant, &project), &name).await?.doc_id();
    let now = state.clock.now();
    let record = Audit::by(&caller, "workflow.update", format!("workflows/{name}"))
        .tenant(&tenant)
        .project(&project)
        .into_doc(now, &*state.entropy);
    let (id, definition, record, caller, expected) = (&id, &definition, &record, &caller, body.version);
    let doc = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let mut doc = tx_get::<WorkflowDoc>(&mut tx, id)
            .await?
            .ok_or_else(|| ApiError::not_found("the workflow was deleted meanwhile"))?;
        if let Some(v) = expected.filter(|v| *v != doc.version) {
            return Err(ApiError::precondition(format!(
                "version {v} is not the latest ({}): read it again, then update",
                doc.version
            )));
        }
        doc.version += 1;
        doc.definition = definition.clone();
        doc.updated_by = caller.user().clone();
        doc.updated_at = now;
        let mut record = record.clone();
        record.detail = Some(format!("version {}", doc.version));
        tx_put(&mut tx, &doc)?;
        tx_create(&mut tx, &version_of(&doc))?;
        tx_create(&mut tx, &record)?;
        Ok(tx.finish(doc))
    })
    .await?;
    Ok(Json(view(doc)))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct VersionQuery {
    /// A version to read; the latest when absent.
    version: Option<u32>,
}

/// A workflow, at its latest version or one asked for.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/projects/{project}/workflows/{workflow}", tag = "workflows",
    params(("tenant" = TenantId, Path), ("project" = ProjectId, Path), ("workflow" = String, Path), VersionQuery),
    responses((status = 200, body = WorkflowView), (status = 400, body = mapi_problem::Problem), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = [])))]
pub async fn get_workflow(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, name)): Path<(TenantId, ProjectId, String)>,
    Query(q): Query<VersionQuery>,
) -> Result<Json<WorkflowView>, ApiError> {
    require_project(&state, &caller, &tenant, &project, Resource::Workflow, Action::Read).await?;
    let doc = load(&state, (&tenant, &project), &name).await?;
    let latest = doc.version;
    let Some(asked) = q.version.filter(|v| *v != latest) else { return Ok(Json(view(doc))) };
    let v = version(&state, &doc, asked).await?;
    Ok(Json(WorkflowView {
        version: v.version,
        definition: v.definition,
        updated_by: v.created_by,
        updated_at: v.created_at,
        ..view(doc)
    }))
}

/// A project's workflows, by name.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/projects/{project}/workflows", tag = "workflows",
    params(("tenant" = TenantId, Path), ("project" = ProjectId, Path), PageQuery),
    responses((status = 200, body = WorkflowPage), (status = 400, body = mapi_problem::Problem, description = "A page_token no listing gave"), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = [])))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    Query(q): Query<PageQuery>,
) -> Result<Json<WorkflowPage>, ApiError> {
    require_project(&state, &caller, &tenant, &project, Resource::Workflow, Action::Read).await?;
    let (docs, next_page_token) =
        project_page::<WorkflowDoc>(&state, &tenant, &project, &q, ("name", Direction::Asc)).await?;
    Ok(Json(WorkflowPage { workflows: docs.into_iter().map(view).collect(), next_page_token }))
}

/// Delete a workflow and its versions (its runs keep the definition they ran).
#[utoipa::path(delete, path = "/v1/tenants/{tenant}/projects/{project}/workflows/{workflow}", tag = "workflows",
    params(("tenant" = TenantId, Path), ("project" = ProjectId, Path), ("workflow" = String, Path)),
    responses((status = 204, description = "Deleted"), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = [])))]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, name)): Path<(TenantId, ProjectId, String)>,
) -> Result<StatusCode, ApiError> {
    require_project(&state, &caller, &tenant, &project, Resource::Workflow, Action::Delete).await?;
    let doc = load(&state, (&tenant, &project), &name).await?;
    let now = state.clock.now();
    let record = Audit::by(&caller, "workflow.delete", format!("workflows/{name}"))
        .tenant(&tenant)
        .project(&project)
        .detail(format!("{} versions", doc.version))
        .into_doc(now, &*state.entropy);
    let mut keys = vec![key::<WorkflowDoc>(&doc.doc_id())?];
    for v in 1..=doc.version {
        keys.push(key::<WorkflowVersionDoc>(&WorkflowVersionDoc::id_of(&tenant, &project, &name, v))?);
    }
    let (keys, record) = (&keys, &record);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        for k in keys {
            tx.delete(k);
        }
        tx_create(&mut tx, record)?;
        Ok(tx.finish(()))
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}
