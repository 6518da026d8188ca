//! Tenants: operators create, list and manage them (tier, status,
//! residency; suspending and deleting need a reason); tenant admins read
//! their tenant and rename it.

use axum::extract::State;
use axum::http::StatusCode;
use mapi_access::{Action, Resource, Role};
use mapi_domain::{Residency, TenantId, TenantStatus, Tier, UserId};
use mapi_identity::{Audit, Caller, Target, authorize, authorize_operator};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path, Query, page_size};
use mapi_schema::{Doc, MembershipDoc, TenantDoc, UserDoc, tx_create, tx_get, tx_put};
use mapi_store::{Direction, transact};
use serde::{Deserialize, Serialize};

/// The body of `POST /v1/admin/tenants`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewTenant {
    /// A lowercase slug; part of every reference and storage key; never changes.
    pub id: TenantId,
    #[schema(
        pattern = "^[^\\x00-\\x1F\\x7F-\\x9F]*[^\\x00-\\x1F\\x7F-\\x9F \\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000][^\\x00-\\x1F\\x7F-\\x9F]*$",
        max_length = 200
    )]
    pub name: String,
    pub tier: Tier,
    pub residency: Residency,
    /// Invited as the tenant's admin (tenant-wide); claimed at first sign-in.
    pub admin_email: Option<UserId>,
}

pub fn check_name(name: &str, what: &str) -> Result<(), ApiError> {
    if name.trim().is_empty() || name.chars().count() > 200 || name.chars().any(char::is_control) {
        return Err(ApiError::invalid(format!("{what} must be 1 to 200 printable characters")));
    }
    Ok(())
}

/// Create a tenant (operators).
#[utoipa::path(post, path = "/v1/admin/tenants", tag = "admin", request_body = NewTenant,
    responses((status = 201, body = TenantDoc), (status = 409, body = mapi_problem::Problem), (status = 403, body = mapi_problem::Problem)),
    security(("session" = [])))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Json(body): Json<NewTenant>,
) -> Result<(StatusCode, Json<TenantDoc>), ApiError> {
    authorize_operator(&state, &caller, Resource::Tenant, Action::Create, &format!("tenants/{}", body.id))
        .await?;
    check_name(&body.name, "name")?;
    let now = state.clock.now();
    let tenant = TenantDoc {
        id: body.id.clone(),
        name: body.name.trim().to_owned(),
        tier: body.tier,
        status: TenantStatus::Active,
        residency: body.residency.clone(),
        admin_email: body.admin_email.clone(),
        status_reason: None,
        created_at: now,
        updated_at: now,
    };
    let record = Audit::by(&caller, "tenant.create", format!("tenants/{}", tenant.id))
        .tenant(&tenant.id)
        .operator(true)
        .detail(format!("tier {}, residency {}", tenant.tier, tenant.residency))
        .into_doc(now, &*state.entropy);
    let (tenant_ref, record, caller_user) = (&tenant, &record, caller.user());
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        if tx_get::<TenantDoc>(&mut tx, tenant_ref.id.as_str()).await?.is_some() {
            return Err(ApiError::new(
                mapi_problem::ProblemCode::AlreadyExists,
                format!("tenant {} already exists: tenant ids are never reused", tenant_ref.id),
            ));
        }
        let claimed = match &tenant_ref.admin_email {
            Some(email) => Some((email, tx_get::<UserDoc>(&mut tx, email.as_str()).await?.is_some())),
            None => None,
        };
        tx_create(&mut tx, tenant_ref)?;
        if let Some((email, claimed)) = claimed {
            let invitation = MembershipDoc {
                tenant: tenant_ref.id.clone(),
                project: None,
                email: email.clone(),
                role: Role::Admin,
                reviewer: false,
                claimed,
                created_at: now,
                created_by: caller_user.clone(),
            };
            tx_put(&mut tx, &invitation)?;
        }
        tx_create(&mut tx, record)?;
        Ok(tx.finish(()))
    })
    .await?;
    tracing::info!(tenant = %tenant.id, tier = %tenant.tier, "tenant created");
    Ok((StatusCode::CREATED, Json(tenant)))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    #[param(minimum = 1, maximum = 200)]
    page_size: Option<u32>,
    page_token: Option<String>,
}

/// A page of tenants.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TenantPage {
    pub tenants: Vec<TenantDoc>,
    pub next_page_token: Option<String>,
}

/// Every tenant (operators).
#[utoipa::path(get, path = "/v1/admin/tenants", tag = "admin", params(ListQuery), responses((status = 200, body = TenantPage)), security(("session" = [])))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<ListQuery>,
) -> Result<Json<TenantPage>, ApiError> {
    authorize_operator(&state, &caller, Resource::Tenant, Action::Read, "tenants").await?;
    let (docs, next_page_token) = mapi_store::Query::new(TenantDoc::COLLECTION)
        .order_by("created_at", Direction::Asc)
        .page(&*state.store, page_size(q.page_size)?, q.page_token.as_deref())
        .await?;
    let tenants = docs.iter().map(|d| d.decode()).collect::<Result<_, _>>()?;
    Ok(Json(TenantPage { tenants, next_page_token }))
}

/// The body of `PATCH /v1/admin/tenants/{tenant}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ManageTenant {
    #[schema(
        pattern = "^[^\\x00-\\x1F\\x7F-\\x9F]*[^\\x00-\\x1F\\x7F-\\x9F \\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000][^\\x00-\\x1F\\x7F-\\x9F]*$",
        max_length = 200
    )]
    pub name: Option<String>,
    pub tier: Option<Tier>,
    pub status: Option<TenantStatus>,
    pub residency: Option<Residency>,
    /// Required to suspend or delete.
    pub reason: Option<String>,
}

/// Change a tenant's name, tier, status or residency (operators). A change
/// of residency applies to new runs only.
#[utoipa::path(patch, path = "/v1/admin/tenants/{tenant}", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path)), request_body = ManageTenant,
    responses((status = 200, body = TenantDoc), (status = 400, body = mapi_problem::Problem), (status = 404, body = mapi_problem::Problem)),
    security(("session" = [])))]
pub async fn manage(
    State(state): State<AppState>,
    caller: Caller,
    Path(tenant): Path<TenantId>,
    Json(body): Json<ManageTenant>,
) -> Result<Json<TenantDoc>, ApiError> {
    let what = format!("tenant {tenant}");
    authorize(&state, &caller, Target::tenant(&tenant, &what), Resource::Tenant, Action::Manage).await?;
    if let Some(n) = &body.name {
        check_name(n, "name")?;
    }
    let reason = body.reason.as_deref().map(str::trim).filter(|r| !r.is_empty());
    if matches!(body.status, Some(TenantStatus::Suspended | TenantStatus::Deleting)) && reason.is_none() {
        return Err(ApiError::invalid("suspending or deleting a tenant needs a reason: add `reason`"));
    }
    let now = state.clock.now();
    let action = match body.status {
        Some(TenantStatus::Suspended) => "tenant.suspend",
        Some(TenantStatus::Deleting) => "tenant.delete",
        Some(TenantStatus::Active) => "tenant.activate",
        None => "tenant.update",
    };
    let mut changes = Vec::new();
    if let Some(t) = body.tier {
        changes.push(format!("tier {t}"));
    }
    if let Some(r) = &body.residency {
        changes.push(format!("residency {r}"));
    }
    if let Some(s) = body.status {
        changes.push(format!("status {s}"));
    }
    if let Some(r) = reason {
        changes.push(format!("reason: {r}"));
    }
    let record = Audit::by(&caller, action, format!("tenants/{tenant}"))
        .tenant(&tenant)
        .operator(true)
        .detail(changes.join("; "))
        .into_doc(now, &*state.entropy);
    let (tenant_ref, body_ref, record) = (&tenant, &body, &record);
    let updated = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let mut t = tx_get::<TenantDoc>(&mut tx, tenant_ref.as_str())
            .await?
            .ok_or_else(|| ApiError::not_found(format!("tenant {tenant_ref} not found")))?;
        if let Some(n) = &body_ref.name {
            t.name = n.trim().to_owned();
        }
        if let Some(tier) = body_ref.tier {
            t.tier = tier;
        }
        if let Some(r) = &body_ref.residency {
            t.residency = r.clone();
        }
        if let Some(s) = body_ref.status {
            t.status = s;
            t.status_reason =
                body_ref.reason.as_deref().map(str::trim).filter(|r| !r.is_empty()).map(str::to_owned);
        }
        t.updated_at = now;
        tx_put(&mut tx, &t)?;
        tx_create(&mut tx, record)?;
        Ok(tx.finish(t))
    })
    .await?;
    tracing::info!(tenant = %tenant, action, "tenant changed");
    Ok(Json(updated))
}

/// A tenant (its members, tenant-wide; operators).
#[utoipa::path(get, path = "/v1/tenants/{tenant}", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path)), responses((status = 200, body = TenantDoc), (status = 404, body = mapi_problem::Problem)), security(("session" = [])))]
pub async fn get_tenant(
    State(state): State<AppState>,
    caller: Caller,
    Path(tenant): Path<TenantId>,
) -> Result<Json<TenantDoc>, ApiError> {
    let what = format!("tenant {tenant}");
    let granted =
        authorize(&state, &caller, Target::tenant(&tenant, &what), Resource::Tenant, Action::Read).await?;
    Ok(Json(granted.tenant))
}

/// The body of `PATCH /v1/tenants/{tenant}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateTenant {
    #[schema(
        pattern = "^[^\\x00-\\x1F\\x7F-\\x9F]*[^\\x00-\\x1F\\x7F-\\x9F \\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000][^\\x00-\\x1F\\x7F-\\x9F]*$",
        max_length = 200
    )]
    pub name: String,
}

/// Rename the tenant (tenant admins, tenant-wide).
#[utoipa::path(patch, path = "/v1/tenants/{tenant}", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path)), request_body = UpdateTenant, responses((status = 200, body = TenantDoc)), security(("session" = [])))]
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Path(tenant): Path<TenantId>,
    Json(body): Json<UpdateTenant>,
) -> Result<Json<TenantDoc>, ApiError> {
    let what = format!("tenant {tenant}");
    authorize(&state, &caller, Target::tenant(&tenant, &what), Resource::Tenant, Action::Update).await?;
    check_name(&body.name, "name")?;
    let now = state.clock.now();
    let record = Audit::by(&caller, "tenant.update", format!("tenants/{tenant}"))
        .tenant(&tenant)
        .detail("name")
        .into_doc(now, &*state.entropy);
    let (tenant_ref, name, record) = (&tenant, body.name.trim(), &record);
    let updated = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let mut t = tx_get::<TenantDoc>(&mut tx, tenant_ref.as_str())
            .await?
            .ok_or_else(|| ApiError::not_found(format!("tenant {tenant_ref} not found")))?;
        t.name = name.to_owned();
        t.updated_at = now;
        tx_put(&mut tx, &t)?;
        tx_create(&mut tx, record)?;
        Ok(tx.finish(t))
    })
    .await?;
    Ok(Json(updated))
}
