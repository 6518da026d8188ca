//! Access checks: "may I do this here?", answered from the same matrix
//! every route authorizes through (consoles use it to show or hide
//! actions). A tenant or project the caller may not see is NOT_FOUND, as
//! everywhere. Checks are not audited: they change nothing.

use axum::extract::State;
use mapi_access::{Action, Decision, Denial, Resource};
use mapi_domain::{ProjectId, TenantId};
use mapi_identity::{Caller, Target, check};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path};
use serde::{Deserialize, Serialize};

/// The body of an access check.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AccessCheck {
    pub resource: Resource,
    pub action: Action,
    /// The endpoint, for `score:<alias>` tokens.
    pub endpoint: Option<String>,
}

/// The answer.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AccessAnswer {
    pub allowed: bool,
    /// Why not, when refused.
    pub reason: Option<String>,
    /// The operator column allowed it.
    pub as_operator: bool,
}

async fn answer(
    state: &AppState,
    caller: &Caller,
    target: Target<'_>,
    body: &AccessCheck,
) -> Result<AccessAnswer, ApiError> {
    let target = Target { endpoint: body.endpoint.as_deref(), ..target };
    match check(state, caller, target, body.resource, body.action).await?.0 {
        Decision::Allow { as_operator } => Ok(AccessAnswer { allowed: true, reason: None, as_operator }),
        Decision::Deny(Denial::Forbidden(why)) => {
            Ok(AccessAnswer { allowed: false, reason: Some(why), as_operator: false })
        }
        Decision::Deny(Denial::NotVisible) => Err(ApiError::not_found(format!("{} not found", target.what))),
    }
}

/// May the caller do `action` on `resource` in this project?
#[utoipa::path(post, path = "/v1/tenants/{tenant}/projects/{project}/access-checks", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path)),
    request_body = AccessCheck, responses((status = 200, body = AccessAnswer), (status = 404, body = mapi_problem::Problem)), security(("session" = []), ("token" = [])))]
pub async fn project_check(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    Json(body): Json<AccessCheck>,
) -> Result<Json<AccessAnswer>, ApiError> {
    let what = format!("project {tenant}/{project}");
    Ok(Json(answer(&state, &caller, Target::project(&tenant, &project, &what), &body).await?))
}

/// May the caller do `action` on `resource` in this tenant (tenant-level resources)?
#[utoipa::path(post, path = "/v1/tenants/{tenant}/access-checks", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path)),
    request_body = AccessCheck, responses((status = 200, body = AccessAnswer), (status = 404, body = mapi_problem::Problem)), security(("session" = []), ("token" = [])))]
pub async fn tenant_check(
    State(state): State<AppState>,
    caller: Caller,
    Path(tenant): Path<TenantId>,
    Json(body): Json<AccessCheck>,
) -> Result<Json<AccessAnswer>, ApiError> {
    let what = format!("tenant {tenant}");
    Ok(Json(answer(&state, &caller, Target::tenant(&tenant, &what), &body).await?))
}
