//! Reading the audit log: tenant admins (tenant-wide) read their tenant's,
//! operators read everything, filtered by tenant, project, actor, action,
//! outcome and time.

use axum::extract::State;
use mapi_access::{Action, Resource};
pub use mapi_api::audit::AuditPage;
use mapi_domain::{ProjectId, TenantId, Timestamp, UserId};
use mapi_identity::{Caller, Target, authorize, authorize_operator};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path, Query, page_size};
use mapi_schema::{AuditDoc, Doc, Outcome};
use mapi_store::{Direction, Op};
use serde::Deserialize;

/// Filters of an audit query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Operators only, on `/v1/admin/audit`.
    tenant: Option<TenantId>,
    project: Option<ProjectId>,
    actor: Option<UserId>,
    action: Option<String>,
    outcome: Option<Outcome>,
    /// RFC 3339; entries at or after.
    since: Option<Timestamp>,
    /// RFC 3339; entries before.
    until: Option<Timestamp>,
    /// How many entries a page holds (1–200; 50 when absent).
    #[param(minimum = 1, maximum = 200)]
    page_size: Option<u32>,
    /// The same as `page_size`, by the name shell scripts reach for.
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
    page_token: Option<String>,
}

impl AuditQuery {
    /// `page_size` or `limit`: naming both, differently, is a mistake to say.
    fn size(&self) -> Result<Option<u32>, ApiError> {
        match (self.page_size, self.limit) {
            (Some(a), Some(b)) if a != b => {
                Err(ApiError::invalid("give page_size or limit, not both (they mean the same)"))
            }
            (a, b) => Ok(a.or(b)),
        }
    }
}

async fn read(state: &AppState, tenant: Option<&TenantId>, q: AuditQuery) -> Result<AuditPage, ApiError> {
    let mut query = mapi_store::Query::new(AuditDoc::COLLECTION);
    if let Some(t) = tenant {
        query = query.filter("tenant", Op::Eq, t.as_str());
    }
    if let Some(p) = &q.project {
        query = query.filter("project", Op::Eq, p.as_str());
    }
    if let Some(a) = &q.actor {
        query = query.filter("actor", Op::Eq, a.as_str());
    }
    if let Some(a) = &q.action {
        query = query.filter("action", Op::Eq, a.as_str());
    }
    if let Some(o) = q.outcome {
        query = query.filter("outcome", Op::Eq, o.as_str());
    }
    if let Some(s) = q.since {
        query = query.filter("at", Op::Ge, s.to_rfc3339());
    }
    if let Some(u) = q.until {
        query = query.filter("at", Op::Lt, u.to_rfc3339());
    }
    let (docs, next_page_token) = query
        .order_by("at", Direction::Desc)
        .page(&*state.store, page_size(q.size()?)?, q.page_token.as_deref())
        .await?;
    let items = docs.iter().map(|d| d.decode::<AuditDoc>().map(Into::into)).collect::<Result<_, _>>()?;
    Ok(AuditPage { items, next_page_token })
}

/// The tenant's audit log (tenant admins, tenant-wide; operators).
#[utoipa::path(get, path = "/v1/tenants/{tenant}/audit", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path), AuditQuery),
    responses((status = 200, body = AuditPage)), security(("session" = [])))]
pub async fn tenant_log(
    State(state): State<AppState>,
    caller: Caller,
    Path(tenant): Path<TenantId>,
    Query(q): Query<AuditQuery>,
) -> Result<Json<AuditPage>, ApiError> {
    let what = format!("tenant {tenant}");
    authorize(&state, &caller, Target::tenant(&tenant, &what), Resource::Audit, Action::Read).await?;
    if q.tenant.as_ref().is_some_and(|t| t != &tenant) {
        return Err(ApiError::invalid("the tenant filter must name this tenant (or use /v1/admin/audit)"));
    }
    Ok(Json(read(&state, Some(&tenant), q).await?))
}

/// The whole platform's audit log (operators).
#[utoipa::path(get, path = "/v1/admin/audit", tag = "admin", params(AuditQuery), responses((status = 200, body = AuditPage)), security(("session" = [])))]
pub async fn platform_log(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<AuditQuery>,
) -> Result<Json<AuditPage>, ApiError> {
    authorize_operator(&state, &caller, Resource::Audit, Action::Read, "the platform audit log").await?;
    let tenant = q.tenant.clone();
    Ok(Json(read(&state, tenant.as_ref(), q).await?))
}
