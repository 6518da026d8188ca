//! Memberships: tenant-wide grants (`/v1/tenants/{t}/members`, tenant
//! admins) and project grants (`…/projects/{p}/members`, project admins).
//! A grant for an e-mail that has not signed in yet is an invitation. The
//! grant is read at every request, so removing it stops the person's
//! sessions and tokens at once.

use axum::extract::State;
use axum::http::StatusCode;
use mapi_access::{Action, Resource, Role};
use mapi_domain::{ProjectId, TenantId, UserId};
use mapi_identity::{Audit, Caller, Target, authorize};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path, ProblemCode};
use mapi_schema::{Doc, MembershipDoc, UserDoc, tx_create, tx_get, tx_put};
use mapi_store::{Op, Query, transact};
use serde::{Deserialize, Serialize};

/// The body of `POST …/members`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewMember {
    pub email: UserId,
    pub role: Role,
    #[serde(default)]
    pub reviewer: bool,
}

/// The body of `PATCH …/members/{email}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateMember {
    pub role: Option<Role>,
    pub reviewer: Option<bool>,
}

/// Members, with where each grant comes from.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MemberList {
    pub items: Vec<MembershipDoc>,
}

fn check_reviewer(role: Role, reviewer: bool) -> Result<(), ApiError> {
    if reviewer && role == Role::Viewer {
        return Err(ApiError::invalid(
            "viewers cannot hold the reviewer capability: give the editor role or higher",
        ));
    }
    Ok(())
}

fn resource_of(project: Option<&ProjectId>) -> Resource {
    if project.is_some() { Resource::Member } else { Resource::TenantMember }
}

async fn grants(
    state: &AppState,
    tenant: &TenantId,
    project: Option<&ProjectId>,
) -> Result<Vec<MembershipDoc>, ApiError> {
    let q = Query::new(MembershipDoc::COLLECTION).filter("tenant", Op::Eq, tenant.as_str());
    let q = match project {
        Some(p) => q.filter("project", Op::Eq, p.as_str()),
        None => q.filter("project", Op::Eq, serde_json::Value::Null),
    };
    let mut items: Vec<MembershipDoc> =
        state.store.query(&q, None).await?.iter().map(|d| d.decode()).collect::<Result<_, _>>()?;
    items.sort_by(|a, b| a.email.cmp(&b.email));
    Ok(items)
}

async fn list(
    state: &AppState,
    caller: &Caller,
    tenant: &TenantId,
    project: Option<&ProjectId>,
) -> Result<MemberList, ApiError> {
    let what = match project {
        Some(p) => format!("project {tenant}/{p}"),
        None => format!("tenant {tenant}"),
    };
    let target = Target { tenant, project, endpoint: None, what: &what };
    authorize(state, caller, target, resource_of(project), Action::Read).await?;
    let mut items = grants(state, tenant, project).await?;
    if project.is_some() {
        // A project's members include the tenant-wide grants (organisation).
        items.extend(grants(state, tenant, None).await?);
    }
    Ok(MemberList { items })
}

/// Refuses a change that would leave the tenant without a tenant-wide admin.
async fn keep_an_admin(
    state: &AppState,
    tenant: &TenantId,
    email: &UserId,
    new_role: Option<Role>,
) -> Result<(), ApiError> {
    let admins: Vec<MembershipDoc> =
        grants(state, tenant, None).await?.into_iter().filter(|m| m.role == Role::Admin).collect();
    let losing = admins.iter().any(|m| &m.email == email) && new_role != Some(Role::Admin);
    if losing && admins.len() == 1 {
        return Err(ApiError::precondition(format!(
            "{email} is the last tenant-wide admin of {tenant}: make someone else admin first"
        )));
    }
    Ok(())
}

async fn add(
    state: &AppState,
    caller: &Caller,
    tenant: &TenantId,
    project: Option<&ProjectId>,
    body: NewMember,
) -> Result<MembershipDoc, ApiError> {
    let what = match project {
        Some(p) => format!("project {tenant}/{p}"),
        None => format!("tenant {tenant}"),
    };
    let target = Target { tenant, project, endpoint: None, what: &what };
    let granted = authorize(state, caller, target, resource_of(project), Action::Create).await?;
    check_reviewer(body.role, body.reviewer)?;
    let now = state.clock.now();
    let mut grant = MembershipDoc {
        tenant: tenant.clone(),
        project: project.cloned(),
        email: body.email.clone(),
        role: body.role,
        reviewer: body.reviewer,
        claimed: false,
        created_at: now,
        created_by: caller.user().clone(),
    };
    let mut record = Audit::by(caller, "membership.create", format!("memberships/{}", grant.doc_id()))
        .tenant(tenant)
        .operator(granted.as_operator)
        .detail(format!(
            "{} as {}{}",
            body.email,
            body.role,
            if body.reviewer { " with reviewer" } else { "" }
        ));
    if let Some(p) = project {
        record = record.project(p);
    }
    let record = record.into_doc(now, &*state.entropy);
    let grant_ref = &mut grant;
    let record = &record;
    let grant = transact::<_, ApiError, _, _>(&*state.store, |mut tx| {
        let mut grant = grant_ref.clone();
        async move {
            if tx_get::<MembershipDoc>(&mut tx, &grant.doc_id()).await?.is_some() {
                return Err(ApiError::new(
                    ProblemCode::AlreadyExists,
                    format!("{} already has a grant here: change it with PATCH", grant.email),
                ));
            }
            grant.claimed = tx_get::<UserDoc>(&mut tx, grant.email.as_str()).await?.is_some();
            tx_create(&mut tx, &grant)?;
            tx_create(&mut tx, record)?;
            Ok(tx.finish(grant))
        }
    })
    .await?;
    Ok(grant)
}

async fn change(
    state: &AppState,
    caller: &Caller,
    tenant: &TenantId,
    project: Option<&ProjectId>,
    email: &UserId,
    body: Option<UpdateMember>,
) -> Result<Option<MembershipDoc>, ApiError> {
    let what = match project {
        Some(p) => format!("project {tenant}/{p}"),
        None => format!("tenant {tenant}"),
    };
    let target = Target { tenant, project, endpoint: None, what: &what };
    let action = if body.is_some() { Action::Update } else { Action::Delete };
    let granted = authorize(state, caller, target, resource_of(project), action).await?;
    if project.is_none() {
        keep_an_admin(
            state,
            tenant,
            email,
            body.as_ref().and_then(|b| b.role).or(body.as_ref().map(|_| Role::Admin)),
        )
        .await?;
    }
    let id = MembershipDoc::id_of(tenant, project, email);
    let now = state.clock.now();
    let (name, detail) = match &body {
        Some(b) => {
            ("membership.update", format!("role {:?}, reviewer {:?}", b.role.map(|r| r.as_str()), b.reviewer))
        }
        None => ("membership.delete", format!("{email}")),
    };
    let mut record = Audit::by(caller, name, format!("memberships/{id}"))
        .tenant(tenant)
        .operator(granted.as_operator)
        .detail(detail);
    if let Some(p) = project {
        record = record.project(p);
    }
    let record = record.into_doc(now, &*state.entropy);
    let (id, body, record) = (&id, &body, &record);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let Some(mut grant) = tx_get::<MembershipDoc>(&mut tx, id).await? else {
            return Err(ApiError::not_found(format!("membership of {email} not found")));
        };
        let out = match body {
            Some(b) => {
                if let Some(r) = b.role {
                    grant.role = r;
                }
                if let Some(rv) = b.reviewer {
                    grant.reviewer = rv;
                }
                check_reviewer(grant.role, grant.reviewer)?;
                tx_put(&mut tx, &grant)?;
                Some(grant)
            }
            None => {
                tx.delete(&grant.key()?);
                None
            }
        };
        tx_create(&mut tx, record)?;
        Ok(tx.finish(out))
    })
    .await
}

fn mandatory(m: Option<MembershipDoc>) -> Result<MembershipDoc, ApiError> {
    m.ok_or_else(|| ApiError::internal("an updated membership vanished"))
}

/// Tenant-wide grants.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/members", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path)), responses((status = 200, body = MemberList)), security(("session" = [])))]
pub async fn list_tenant(
    State(state): State<AppState>,
    caller: Caller,
    Path(tenant): Path<TenantId>,
) -> Result<Json<MemberList>, ApiError> {
    Ok(Json(list(&state, &caller, &tenant, None).await?))
}

/// Grant a role tenant-wide (tenant admins). Invites an e-mail that has not signed in yet.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/members", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path)), request_body = NewMember, responses((status = 201, body = MembershipDoc), (status = 409, body = mapi_problem::Problem, description = "The person already has a grant here: change it with PATCH")), security(("session" = [])))]
pub async fn add_tenant(
    State(state): State<AppState>,
    caller: Caller,
    Path(tenant): Path<TenantId>,
    Json(body): Json<NewMember>,
) -> Result<(StatusCode, Json<MembershipDoc>), ApiError> {
    Ok((StatusCode::CREATED, Json(add(&state, &caller, &tenant, None, body).await?)))
}

/// Change a tenant-wide grant.
#[utoipa::path(patch, path = "/v1/tenants/{tenant}/members/{email}", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path), ("email" = mapi_domain::UserId, Path)), request_body = UpdateMember, responses((status = 200, body = MembershipDoc)), security(("session" = [])))]
pub async fn update_tenant(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, email)): Path<(TenantId, UserId)>,
    Json(body): Json<UpdateMember>,
) -> Result<Json<MembershipDoc>, ApiError> {
    Ok(Json(mandatory(change(&state, &caller, &tenant, None, &email, Some(body)).await?)?))
}

/// Remove a tenant-wide grant.
#[utoipa::path(delete, path = "/v1/tenants/{tenant}/members/{email}", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path), ("email" = mapi_domain::UserId, Path)), responses((status = 204)), security(("session" = [])))]
pub async fn remove_tenant(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, email)): Path<(TenantId, UserId)>,
) -> Result<StatusCode, ApiError> {
    change(&state, &caller, &tenant, None, &email, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A project's members: its own grants and the tenant-wide ones.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/projects/{project}/members", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path)), responses((status = 200, body = MemberList)), security(("session" = []), ("token" = [])))]
pub async fn list_project(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
) -> Result<Json<MemberList>, ApiError> {
    Ok(Json(list(&state, &caller, &tenant, Some(&project)).await?))
}

/// Grant a role in the project (project admins).
#[utoipa::path(post, path = "/v1/tenants/{tenant}/projects/{project}/members", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path)), request_body = NewMember, responses((status = 201, body = MembershipDoc), (status = 409, body = mapi_problem::Problem, description = "The person already has a grant here: change it with PATCH")), security(("session" = []), ("token" = [])))]
pub async fn add_project(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    Json(body): Json<NewMember>,
) -> Result<(StatusCode, Json<MembershipDoc>), ApiError> {
    Ok((StatusCode::CREATED, Json(add(&state, &caller, &tenant, Some(&project), body).await?)))
}

/// Change a project grant.
#[utoipa::path(patch, path = "/v1/tenants/{tenant}/projects/{project}/members/{email}", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("email" = mapi_domain::UserId, Path)), request_body = UpdateMember, responses((status = 200, body = MembershipDoc)), security(("session" = []), ("token" = [])))]
pub async fn update_project(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, email)): Path<(TenantId, ProjectId, UserId)>,
    Json(body): Json<UpdateMember>,
) -> Result<Json<MembershipDoc>, ApiError> {
    Ok(Json(mandatory(change(&state, &caller, &tenant, Some(&project), &email, Some(body)).await?)?))
}

/// Remove a project grant: the person's sessions and tokens stop working
/// in the project at their next request.
#[utoipa::path(delete, path = "/v1/tenants/{tenant}/projects/{project}/members/{email}", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("email" = mapi_domain::UserId, Path)), responses((status = 204)), security(("session" = []), ("token" = [])))]
pub async fn remove_project(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, email)): Path<(TenantId, ProjectId, UserId)>,
) -> Result<StatusCode, ApiError> {
    change(&state, &caller, &tenant, Some(&project), &email, None).await?;
    Ok(StatusCode::NO_CONTENT)
}
