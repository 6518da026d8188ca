//! Governance policies: the tenant's (set by tenant-wide admins, applies to
//! every project) and each project's (set by its admins, adds to the
//! tenant's). `PUT` replaces a policy, `DELETE` removes it; both are audited.
//! What they combine to is `mapi_governance::Policy::combine`'s.

use axum::extract::State;
use axum::http::StatusCode;
use mapi_access::{Action, Resource};
use mapi_api::governance::{Policy, PolicyView};
use mapi_domain::{ProjectId, TenantId};
use mapi_identity::{Audit, Caller, Target, authorize};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path};
use mapi_schema::{PolicyDoc, key, tx_create, tx_put};
use mapi_store::transact;

/// The tenant's policy and, with `project`, the project's, as stored.
pub(crate) async fn stored(
    state: &AppState,
    tenant: &TenantId,
    project: Option<&ProjectId>,
) -> Result<(Option<Policy>, Option<Policy>), ApiError> {
    let mut keys = vec![key::<PolicyDoc>(&PolicyDoc::id_of(tenant, None))?];
    if let Some(p) = project {
        keys.push(key::<PolicyDoc>(&PolicyDoc::id_of(tenant, Some(p)))?);
    }
    let docs = state.store.get(&keys, None).await?;
    let policy = |i: usize| -> Result<Option<Policy>, ApiError> {
        Ok(docs
            .get(i)
            .and_then(Option::as_ref)
            .map(|d| d.decode::<PolicyDoc>())
            .transpose()?
            .map(|d| d.policy))
    };
    Ok((policy(0)?, policy(1)?))
}

/// What a version of `project` must pass now.
pub(crate) async fn in_force(
    state: &AppState,
    tenant: &TenantId,
    project: &ProjectId,
) -> Result<Policy, ApiError> {
    let (t, p) = stored(state, tenant, Some(project)).await?;
    Ok(Policy::combine(t.as_ref(), p.as_ref()))
}

/// Authorizes `action` on the tenant's policy, or with `project` the project's.
async fn allowed(
    state: &AppState,
    caller: &Caller,
    (tenant, project): (&TenantId, Option<&ProjectId>),
    action: Action,
) -> Result<(), ApiError> {
    let what = match project {
        Some(p) => format!("policy of project {tenant}/{p}"),
        None => format!("tenant-wide policy of {tenant}"),
    };
    let (target, resource) = match project {
        Some(p) => (Target::project(tenant, p, &what), Resource::Policy),
        None => (Target::tenant(tenant, &what), Resource::TenantPolicy),
    };
    authorize(state, caller, target, resource, action).await.map(|_| ())
}

async fn view(
    state: &AppState,
    tenant: &TenantId,
    project: Option<&ProjectId>,
) -> Result<PolicyView, ApiError> {
    let (t, p) = stored(state, tenant, project).await?;
    let in_force = Policy::combine(t.as_ref(), p.as_ref());
    let policy = if project.is_some() { p } else { t };
    Ok(PolicyView { tenant: tenant.clone(), project: project.cloned(), policy, in_force })
}

/// Replaces (or with `None` removes) a policy, with its audit entry, in one commit.
async fn write(
    state: &AppState,
    caller: &Caller,
    (tenant, project): (&TenantId, Option<&ProjectId>),
    policy: Option<Policy>,
) -> Result<(), ApiError> {
    let now = state.clock.now();
    let id = PolicyDoc::id_of(tenant, project);
    let action = if policy.is_some() { "policy.update" } else { "policy.delete" };
    let mut record = Audit::by(caller, action, format!("policies/{id}")).tenant(tenant);
    if let Some(p) = project {
        record = record.project(p);
    }
    if let Some(policy) = &policy {
        record = record.detail(serde_json::to_string(policy)?);
    }
    let record = record.into_doc(now, &*state.entropy);
    let doc = policy.map(|policy| PolicyDoc {
        tenant: tenant.clone(),
        project: project.cloned(),
        policy,
        updated_by: caller.user().clone(),
        updated_at: now,
    });
    let (record, doc, id) = (&record, &doc, &id);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        match doc {
            Some(doc) => tx_put(&mut tx, doc)?,
            None => tx.delete(&key::<PolicyDoc>(id)?),
        }
        tx_create(&mut tx, record)?;
        Ok(tx.finish(()))
    })
    .await
}

fn checked(policy: Policy) -> Result<Policy, ApiError> {
    policy.check().map_err(|e| ApiError::invalid(format!("policy.{e}")))?;
    Ok(policy)
}

/// A project's policy, and what is in force there with the tenant's.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/projects/{project}/policy", tag = "governance",
    params(("tenant" = TenantId, Path), ("project" = ProjectId, Path)),
    responses((status = 200, body = PolicyView), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = [])))]
pub async fn get_project(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
) -> Result<Json<PolicyView>, ApiError> {
    allowed(&state, &caller, (&tenant, Some(&project)), Action::Read).await?;
    Ok(Json(view(&state, &tenant, Some(&project)).await?))
}

/// Set a project's policy (replacing it): checks its versions must pass
/// before they serve traffic, in addition to the tenant's.
#[utoipa::path(put, path = "/v1/tenants/{tenant}/projects/{project}/policy", tag = "governance",
    params(("tenant" = TenantId, Path), ("project" = ProjectId, Path)),
    request_body = Policy,
    responses((status = 200, body = PolicyView), (status = 400, body = mapi_problem::Problem), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = [])))]
pub async fn put_project(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    Json(policy): Json<Policy>,
) -> Result<Json<PolicyView>, ApiError> {
    allowed(&state, &caller, (&tenant, Some(&project)), Action::Update).await?;
    write(&state, &caller, (&tenant, Some(&project)), Some(checked(policy)?)).await?;
    Ok(Json(view(&state, &tenant, Some(&project)).await?))
}

/// Remove a project's policy (the tenant's stays in force).
#[utoipa::path(delete, path = "/v1/tenants/{tenant}/projects/{project}/policy", tag = "governance",
    params(("tenant" = TenantId, Path), ("project" = ProjectId, Path)),
    responses((status = 204, description = "Removed"), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = [])))]
pub async fn delete_project(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
) -> Result<StatusCode, ApiError> {
    allowed(&state, &caller, (&tenant, Some(&project)), Action::Delete).await?;
    write(&state, &caller, (&tenant, Some(&project)), None).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The tenant-wide policy.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/policy", tag = "governance",
    params(("tenant" = TenantId, Path)),
    responses((status = 200, body = PolicyView), (status = 404, body = mapi_problem::Problem)),
    security(("session" = [])))]
pub async fn get_tenant(
    State(state): State<AppState>,
    caller: Caller,
    Path(tenant): Path<TenantId>,
) -> Result<Json<PolicyView>, ApiError> {
    allowed(&state, &caller, (&tenant, None), Action::Read).await?;
    Ok(Json(view(&state, &tenant, None).await?))
}

/// Set the tenant-wide policy (replacing it): every project's versions must pass it.
#[utoipa::path(put, path = "/v1/tenants/{tenant}/policy", tag = "governance",
    params(("tenant" = TenantId, Path)),
    request_body = Policy,
    responses((status = 200, body = PolicyView), (status = 400, body = mapi_problem::Problem), (status = 404, body = mapi_problem::Problem)),
    security(("session" = [])))]
pub async fn put_tenant(
    State(state): State<AppState>,
    caller: Caller,
    Path(tenant): Path<TenantId>,
    Json(policy): Json<Policy>,
) -> Result<Json<PolicyView>, ApiError> {
    allowed(&state, &caller, (&tenant, None), Action::Update).await?;
    write(&state, &caller, (&tenant, None), Some(checked(policy)?)).await?;
    Ok(Json(view(&state, &tenant, None).await?))
}

/// Remove the tenant-wide policy.
#[utoipa::path(delete, path = "/v1/tenants/{tenant}/policy", tag = "governance",
    params(("tenant" = TenantId, Path)),
    responses((status = 204, description = "Removed"), (status = 404, body = mapi_problem::Problem)),
    security(("session" = [])))]
pub async fn delete_tenant(
    State(state): State<AppState>,
    caller: Caller,
    Path(tenant): Path<TenantId>,
) -> Result<StatusCode, ApiError> {
    allowed(&state, &caller, (&tenant, None), Action::Delete).await?;
    write(&state, &caller, (&tenant, None), None).await?;
    Ok(StatusCode::NO_CONTENT)
}
