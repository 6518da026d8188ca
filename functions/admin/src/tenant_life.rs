//! The end of a tenant's life: its admins ask for an export of its data
//! (built by a queue task, read back as a manifest of signed URLs) and for
//! its deletion, which makes the tenant `deleting` at once and may be
//! cancelled by them until `MAPI_TENANT_DELETION_GRACE_S` has passed; then
//! the purge task deletes its data (pushed by the reconcile tick, or by an
//! operator, who also retries a failed one) and leaves the deletion
//! document as its certificate, which operators read.

use axum::extract::State;
use axum::http::StatusCode;
use mapi_access::{Action, Resource};
use mapi_domain::{TenantId, TenantStatus, Timestamp};
use mapi_identity::{Audit, Caller, Target, authorize};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path};
use mapi_schema::tasks::{ExportTask, push_export, push_purge};
use mapi_schema::{
    DeletionDoc, DeletionState, Doc, ExportDoc, ExportState, PurgeProgress, TenantDoc, tx_create, tx_get,
    tx_put,
};
use mapi_store::{Op, Query, transact};
use serde::Deserialize;

/// An export's id: `exp_`, the second it was asked in and random hex.
fn export_id(now: Timestamp, random: [u8; 6]) -> String {
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    format!("exp_{:010x}{hex}", now.as_secs().max(0))
}

/// Ask for an export of the tenant's documents and objects (tenant admins,
/// tenant-wide). While one is building, asking again answers that one.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/exports", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path)),
    responses((status = 202, body = ExportDoc), (status = 200, body = ExportDoc), (status = 404, body = mapi_problem::Problem)),
    security(("session" = [])))]
pub async fn request_export(
    State(state): State<AppState>,
    caller: Caller,
    Path(tenant): Path<TenantId>,
) -> Result<(StatusCode, Json<ExportDoc>), ApiError> {
    let what = format!("tenant {tenant}");
    authorize(&state, &caller, Target::tenant(&tenant, &what), Resource::TenantExport, Action::Create)
        .await?;
    let now = state.clock.now();
    let export = ExportDoc {
        id: export_id(now, mapi_entropy::bytes(&*state.entropy)?),
        tenant: tenant.clone(),
        state: ExportState::Building,
        requested_by: caller.user().clone(),
        requested_at: now,
        finished_at: None,
        expires_at: None,
        parts: Vec::new(),
        documents: 0,
        objects: 0,
        error: None,
    };
    let record = Audit::by(&caller, "tenant.export", format!("tenants/{tenant}/exports/{}", export.id))
        .tenant(&tenant)
        .into_doc(now, &*state.entropy);
    let building = Query::new(ExportDoc::COLLECTION)
        .filter("tenant", Op::Eq, tenant.as_str())
        .filter("state", Op::Eq, ExportState::Building.as_str())
        .limit(1);
    let (export_ref, record, building) = (&export, &record, &building);
    let (created, doc) = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        if let Some(existing) = tx.query(building).await?.first() {
            return Ok(tx.finish((false, existing.decode::<ExportDoc>()?)));
        }
        tx_create(&mut tx, export_ref)?;
        tx_create(&mut tx, record)?;
        Ok(tx.finish((true, export_ref.clone())))
    })
    .await?;
    if !created {
        return Ok((StatusCode::OK, Json(doc)));
    }
    let task = ExportTask { tenant: tenant.clone(), export: doc.id.clone() };
    if let Err(e) = push_export(&*state.queue, &task, None).await {
        // Committed: the reconcile tick pushes an export still building.
        tracing::warn!(tenant = %tenant, export = %doc.id, error = %e, "pushing an export failed; the tick re-pushes it");
    }
    Ok((StatusCode::ACCEPTED, Json(doc)))
}

/// An export: building, or ready with its manifest (tenant admins, tenant-wide).
#[utoipa::path(get, path = "/v1/tenants/{tenant}/exports/{id}", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path), ("id" = String, Path)),
    responses((status = 200, body = ExportDoc), (status = 404, body = mapi_problem::Problem)), security(("session" = [])))]
pub async fn get_export(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, id)): Path<(TenantId, String)>,
) -> Result<Json<ExportDoc>, ApiError> {
    let what = format!("tenant {tenant}");
    authorize(&state, &caller, Target::tenant(&tenant, &what), Resource::TenantExport, Action::Read).await?;
    let missing = || ApiError::not_found(format!("export {id} not found"));
    if mapi_store::DocKey::new(ExportDoc::COLLECTION, id.clone()).is_err() {
        return Err(missing());
    }
    let export = mapi_schema::get::<ExportDoc>(&*state.store, &id).await?;
    Ok(Json(export.filter(|e| e.tenant == tenant).ok_or_else(missing)?))
}

/// The body of `POST /v1/tenants/{tenant}/deletion`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestDeletion {
    /// Why the tenant goes; kept in the deletion certificate.
    /// 1 to 200 characters, not all blank, without control characters.
    #[schema(
        pattern = "^[^\\x00-\\x1F\\x7F-\\x9F]*[^\\x00-\\x1F\\x7F-\\x9F \\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000][^\\x00-\\x1F\\x7F-\\x9F]*$",
        max_length = 200
    )]
    pub reason: String,
}

/// Ask for the tenant's deletion (tenant admins, tenant-wide): it is
/// `deleting` at once, and purged once the grace period has passed.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/deletion", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path)), request_body = RequestDeletion,
    responses((status = 202, body = DeletionDoc), (status = 400, body = mapi_problem::Problem), (status = 409, body = mapi_problem::Problem)),
    security(("session" = [])))]
pub async fn request_deletion(
    State(state): State<AppState>,
    caller: Caller,
    Path(tenant): Path<TenantId>,
    Json(body): Json<RequestDeletion>,
) -> Result<(StatusCode, Json<DeletionDoc>), ApiError> {
    let what = format!("tenant {tenant}");
    authorize(&state, &caller, Target::tenant(&tenant, &what), Resource::TenantDeletion, Action::Create)
        .await?;
    let reason = body.reason.trim();
    crate::tenants::check_name(reason, "reason")?;
    let now = state.clock.now();
    let purge_after = now + state.config.tenant_deletion_grace;
    let record = Audit::by(&caller, "tenant.delete_request", format!("tenants/{tenant}"))
        .tenant(&tenant)
        .detail(format!("reason: {reason}; purge after {}", purge_after.to_rfc3339()))
        .into_doc(now, &*state.entropy);
    let (tenant_ref, record, caller_user) = (&tenant, &record, caller.user());
    let deletion = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let mut t = tx_get::<TenantDoc>(&mut tx, tenant_ref.as_str())
            .await?
            .ok_or_else(|| ApiError::not_found(format!("tenant {tenant_ref} not found")))?;
        if t.status == TenantStatus::Deleting {
            return Err(ApiError::precondition(format!("tenant {tenant_ref} is already being deleted")));
        }
        let d = DeletionDoc {
            tenant: tenant_ref.clone(),
            state: DeletionState::Scheduled,
            requested_by: caller_user.clone(),
            requested_at: now,
            reason: reason.to_owned(),
            purge_after,
            previous_status: t.status,
            cancelled_at: None,
            cancelled_by: None,
            purge_started_at: None,
            purged_at: None,
            progress: PurgeProgress::default(),
            deleted: Default::default(),
            kept: Default::default(),
            purge_runs: 0,
            last_error: None,
        };
        t.status = TenantStatus::Deleting;
        t.status_reason = Some(reason.to_owned());
        t.updated_at = now;
        tx_put(&mut tx, &t)?;
        tx_put(&mut tx, &d)?;
        tx_create(&mut tx, record)?;
        Ok(tx.finish(d))
    })
    .await?;
    tracing::info!(tenant = %tenant, purge_after = %purge_after.to_rfc3339(), "tenant deletion requested");
    Ok((StatusCode::ACCEPTED, Json(deletion)))
}

async fn deletion_of(state: &AppState, tenant: &TenantId) -> Result<DeletionDoc, ApiError> {
    mapi_schema::get::<DeletionDoc>(&*state.store, tenant.as_str())
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no deletion of tenant {tenant} was requested")))
}

/// The tenant's deletion: scheduled, purging, or its certificate once
/// purged (operators; tenant admins while the tenant is not being deleted).
#[utoipa::path(get, path = "/v1/tenants/{tenant}/deletion", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path)),
    responses((status = 200, body = DeletionDoc), (status = 404, body = mapi_problem::Problem)), security(("session" = [])))]
pub async fn get_deletion(
    State(state): State<AppState>,
    caller: Caller,
    Path(tenant): Path<TenantId>,
) -> Result<Json<DeletionDoc>, ApiError> {
    let what = format!("tenant {tenant}");
    authorize(&state, &caller, Target::tenant(&tenant, &what), Resource::TenantDeletion, Action::Read)
        .await?;
    Ok(Json(deletion_of(&state, &tenant).await?))
}

/// Cancel the deletion within the grace period (tenant admins,
/// tenant-wide): the tenant has its previous status back.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/deletion/cancel", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path)),
    responses((status = 200, body = DeletionDoc), (status = 409, body = mapi_problem::Problem)), security(("session" = [])))]
pub async fn cancel_deletion(
    State(state): State<AppState>,
    caller: Caller,
    Path(tenant): Path<TenantId>,
) -> Result<Json<DeletionDoc>, ApiError> {
    let what = format!("tenant {tenant}");
    authorize(&state, &caller, Target::tenant(&tenant, &what), Resource::TenantDeletion, Action::Cancel)
        .await?;
    let now = state.clock.now();
    let record = Audit::by(&caller, "tenant.delete_cancel", format!("tenants/{tenant}"))
        .tenant(&tenant)
        .into_doc(now, &*state.entropy);
    let (tenant_ref, record, caller_user) = (&tenant, &record, caller.user());
    let deletion = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let missing = || ApiError::not_found(format!("no deletion of tenant {tenant_ref} was requested"));
        let mut d = tx_get::<DeletionDoc>(&mut tx, tenant_ref.as_str()).await?.ok_or_else(missing)?;
        let mut t = tx_get::<TenantDoc>(&mut tx, tenant_ref.as_str()).await?.ok_or_else(missing)?;
        cancellable(&d, now)?;
        t.status = d.previous_status;
        t.status_reason = None;
        t.updated_at = now;
        d.state = DeletionState::Cancelled;
        (d.cancelled_at, d.cancelled_by) = (Some(now), Some(caller_user.clone()));
        tx_put(&mut tx, &t)?;
        tx_put(&mut tx, &d)?;
        tx_create(&mut tx, record)?;
        Ok(tx.finish(d))
    })
    .await?;
    tracing::info!(tenant = %tenant, "tenant deletion cancelled");
    Ok(Json(deletion))
}

/// A deletion may be cancelled while it is scheduled and its grace period lasts.
fn cancellable(d: &DeletionDoc, now: Timestamp) -> Result<(), ApiError> {
    match d.state {
        DeletionState::Scheduled if now < d.purge_after => Ok(()),
        DeletionState::Scheduled => Err(ApiError::precondition(format!(
            "the grace period ended at {}: the purge may start at any moment, so the deletion can no longer be cancelled",
            d.purge_after.to_rfc3339()
        ))),
        DeletionState::Purging | DeletionState::Purged => Err(ApiError::precondition(
            "the purge has started: the tenant's data is being deleted and the deletion can no longer be cancelled",
        )),
        DeletionState::Cancelled => {
            Err(ApiError::precondition("the deletion was already cancelled: the tenant has its status back"))
        }
    }
}

/// Purge now a tenant whose grace period is over, or retry a purge that
/// failed (operators). A purged tenant answers its certificate.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/deletion/purge", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path)),
    responses((status = 202, body = DeletionDoc), (status = 200, body = DeletionDoc), (status = 409, body = mapi_problem::Problem)),
    security(("session" = [])))]
pub async fn purge(
    State(state): State<AppState>,
    caller: Caller,
    Path(tenant): Path<TenantId>,
) -> Result<(StatusCode, Json<DeletionDoc>), ApiError> {
    let what = format!("tenant {tenant}");
    authorize(&state, &caller, Target::tenant(&tenant, &what), Resource::TenantDeletion, Action::Manage)
        .await?;
    let d = deletion_of(&state, &tenant).await?;
    let now = state.clock.now();
    match d.state {
        DeletionState::Purged => return Ok((StatusCode::OK, Json(d))),
        DeletionState::Cancelled => {
            return Err(ApiError::precondition("the deletion was cancelled: there is nothing to purge"));
        }
        DeletionState::Scheduled if now < d.purge_after => {
            return Err(ApiError::precondition(format!(
                "the grace period lasts until {}: its admins may still cancel; purge after it",
                d.purge_after.to_rfc3339()
            )));
        }
        DeletionState::Scheduled | DeletionState::Purging => {}
    }
    let record = Audit::by(&caller, "tenant.purge", format!("tenants/{tenant}"))
        .tenant(&tenant)
        .operator(true)
        .detail(format!("{} ({} deliveries so far)", d.state, d.purge_runs))
        .into_doc(now, &*state.entropy);
    mapi_schema::put(&*state.store, &record).await?;
    push_purge(&*state.queue, &tenant, &format!("o{}", now.as_secs())).await?;
    Ok((StatusCode::ACCEPTED, Json(d)))
}
