//! Projects inside a tenant: tenant-wide admins create and delete them,
//! project admins rename them, members see the ones they belong to.

use axum::extract::State;
use axum::http::StatusCode;
use mapi_access::{Action, Decision, Resource};
use mapi_domain::{ProjectId, TenantId};
use mapi_identity::{Audit, Caller, Target, authorize, check};
use mapi_lifecycle::RunDoc;
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path, ProblemCode};
use mapi_schema::{DatasetDoc, Doc, MembershipDoc, ProjectDoc, tx_create, tx_get, tx_put};
use mapi_store::{Op, Query, transact};
use serde::{Deserialize, Serialize};

use crate::tenants::check_name;

/// The body of `POST …/projects`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewProject {
    pub id: ProjectId,
    /// 1 to 200 characters, not all blank, without control characters.
    #[schema(
        pattern = "^[^\\x00-\\x1F\\x7F-\\x9F]*[^\\x00-\\x1F\\x7F-\\x9F \\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000][^\\x00-\\x1F\\x7F-\\x9F]*$",
        max_length = 200
    )]
    pub name: String,
}

/// The projects the caller can see.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProjectList {
    pub projects: Vec<ProjectDoc>,
}

/// The tenant's projects that the caller may read.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/projects", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path)), responses((status = 200, body = ProjectList)), security(("session" = []), ("token" = [])))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(tenant): Path<TenantId>,
) -> Result<Json<ProjectList>, ApiError> {
    let q = Query::new(ProjectDoc::COLLECTION).filter("tenant", Op::Eq, tenant.as_str());
    let all: Vec<ProjectDoc> =
        state.store.query(&q, None).await?.iter().map(|d| d.decode()).collect::<Result<_, _>>()?;
    let mut visible = Vec::new();
    for p in all {
        let what = format!("project {tenant}/{}", p.project);
        let (decision, _) = check(
            &state,
            &caller,
            Target::project(&tenant, &p.project, &what),
            Resource::Project,
            Action::Read,
        )
        .await?;
        if matches!(decision, Decision::Allow { .. }) {
            visible.push(p);
        }
    }
    if visible.is_empty() {
        // Nothing visible: as for a tenant that does not exist, unless the
        // caller may read the tenant itself.
        let what = format!("tenant {tenant}");
        let (decision, _) =
            check(&state, &caller, Target::tenant(&tenant, &what), Resource::Tenant, Action::Read).await?;
        if !decision.allowed() {
            return Err(ApiError::not_found(format!("tenant {tenant} not found")));
        }
    }
    Ok(Json(ProjectList { projects: visible }))
}

/// Create a project (tenant admins, tenant-wide).
#[utoipa::path(post, path = "/v1/tenants/{tenant}/projects", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path)), request_body = NewProject,
    responses((status = 201, body = ProjectDoc), (status = 409, body = mapi_problem::Problem)), security(("session" = [])))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Path(tenant): Path<TenantId>,
    Json(body): Json<NewProject>,
) -> Result<(StatusCode, Json<ProjectDoc>), ApiError> {
    let what = format!("tenant {tenant}");
    let granted =
        authorize(&state, &caller, Target::tenant(&tenant, &what), Resource::Project, Action::Create).await?;
    check_name(&body.name, "name")?;
    let now = state.clock.now();
    let project = ProjectDoc {
        tenant: tenant.clone(),
        project: body.id.clone(),
        name: body.name.trim().to_owned(),
        created_at: now,
    };
    let record = Audit::by(&caller, "project.create", format!("projects/{tenant}/{}", body.id))
        .tenant(&tenant)
        .project(&body.id)
        .operator(granted.as_operator)
        .into_doc(now, &*state.entropy);
    let (project_ref, record) = (&project, &record);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        if tx_get::<ProjectDoc>(&mut tx, &project_ref.doc_id()).await?.is_some() {
            return Err(ApiError::new(
                ProblemCode::AlreadyExists,
                format!("project {}/{} already exists", project_ref.tenant, project_ref.project),
            ));
        }
        tx_create(&mut tx, project_ref)?;
        tx_create(&mut tx, record)?;
        Ok(tx.finish(()))
    })
    .await?;
    Ok((StatusCode::CREATED, Json(project)))
}

/// A project.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/projects/{project}", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path)),
    responses((status = 200, body = ProjectDoc), (status = 404, body = mapi_problem::Problem)), security(("session" = []), ("token" = [])))]
pub async fn get_project(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
) -> Result<Json<ProjectDoc>, ApiError> {
    let what = format!("project {tenant}/{project}");
    authorize(&state, &caller, Target::project(&tenant, &project, &what), Resource::Project, Action::Read)
        .await?;
    let doc = mapi_schema::get::<ProjectDoc>(&*state.store, &ProjectDoc::id_of(&tenant, &project))
        .await?
        .ok_or_else(|| ApiError::not_found(format!("{what} not found")))?;
    Ok(Json(doc))
}

/// The body of `PATCH …/projects/{project}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateProject {
    /// 1 to 200 characters, not all blank, without control characters.
    #[schema(
        pattern = "^[^\\x00-\\x1F\\x7F-\\x9F]*[^\\x00-\\x1F\\x7F-\\x9F \\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000][^\\x00-\\x1F\\x7F-\\x9F]*$",
        max_length = 200
    )]
    pub name: String,
}

/// Rename a project (project admins).
#[utoipa::path(patch, path = "/v1/tenants/{tenant}/projects/{project}", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path)),
    request_body = UpdateProject, responses((status = 200, body = ProjectDoc)), security(("session" = []), ("token" = [])))]
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    Json(body): Json<UpdateProject>,
) -> Result<Json<ProjectDoc>, ApiError> {
    let what = format!("project {tenant}/{project}");
    authorize(&state, &caller, Target::project(&tenant, &project, &what), Resource::Project, Action::Update)
        .await?;
    check_name(&body.name, "name")?;
    let now = state.clock.now();
    let record = Audit::by(&caller, "project.update", format!("projects/{tenant}/{project}"))
        .tenant(&tenant)
        .project(&project)
        .into_doc(now, &*state.entropy);
    let (id, name, record, what) = (ProjectDoc::id_of(&tenant, &project), body.name.trim(), &record, &what);
    let id = &id;
    let doc = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let mut p = tx_get::<ProjectDoc>(&mut tx, id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("{what} not found")))?;
        p.name = name.to_owned();
        tx_put(&mut tx, &p)?;
        tx_create(&mut tx, record)?;
        Ok(tx.finish(p))
    })
    .await?;
    Ok(Json(doc))
}

/// Delete an empty project (tenant admins, tenant-wide): one with no
/// datasets and no runs. Its memberships go with it.
#[utoipa::path(delete, path = "/v1/tenants/{tenant}/projects/{project}", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path)),
    responses((status = 204), (status = 409, body = mapi_problem::Problem)), security(("session" = [])))]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
) -> Result<StatusCode, ApiError> {
    let what = format!("project {tenant}/{project}");
    authorize(&state, &caller, Target::project(&tenant, &project, &what), Resource::Project, Action::Delete)
        .await?;
    for collection in [DatasetDoc::COLLECTION, RunDoc::COLLECTION] {
        let q = Query::new(collection)
            .filter("tenant", Op::Eq, tenant.as_str())
            .filter("project", Op::Eq, project.as_str())
            .limit(1);
        if !state.store.query(&q, None).await?.is_empty() {
            return Err(ApiError::precondition(format!(
                "{what} still has {collection}: only an empty project can be deleted"
            )));
        }
    }
    let now = state.clock.now();
    let record = Audit::by(&caller, "project.delete", format!("projects/{tenant}/{project}"))
        .tenant(&tenant)
        .project(&project)
        .into_doc(now, &*state.entropy);
    let members = Query::new(MembershipDoc::COLLECTION).filter("tenant", Op::Eq, tenant.as_str()).filter(
        "project",
        Op::Eq,
        project.as_str(),
    );
    let key = mapi_schema::key::<ProjectDoc>(&ProjectDoc::id_of(&tenant, &project))?;
    let (key, members, record) = (&key, &members, &record);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let grants = tx.query(members).await?;
        tx.delete(key);
        for g in &grants {
            tx.delete(&g.key);
        }
        tx_create(&mut tx, record)?;
        Ok(tx.finish(()))
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}
