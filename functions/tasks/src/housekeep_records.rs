//! Retention of the records the platform keeps beside runs and jobs: audit
//! entries past their tenant's audit retention (`audit_retention_days` of
//! its quota policy, else the platform's `MAPI_AUDIT_RETENTION_DAYS`; an
//! entry of no tenant is under the platform's) and webhook messages, with
//! their delivery logs, past the tenant's delivery retention
//! (`delivery_retention_days`, else `MAPI_DELIVERY_RETENTION_DAYS`) are
//! deleted, at most [`PER_CALL`] of each a call, oldest first through their
//! time indexes ([`crate::retention::Retention`]), so a call reads what it
//! deletes and the tenants' own-retention pass-overs. Called with the jobs
//! housekeeper (the scheduler, or `mapi dev`'s tick loop locally).

use mapi_domain::Timestamp;
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_schema::{AuditDoc, DeliveryDoc, Doc};
use mapi_store::{Direction, Document, Op, Query, transact};

use crate::retention::{Retention, retentions};

/// Documents of each kind deleted per call: one commit each (Firestore's
/// limit is 500 writes a commit).
pub const PER_CALL: u32 = 500;

/// What one call deleted.
#[derive(Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RecordsHousekept {
    pub deleted_audit_entries: u32,
    pub deleted_deliveries: u32,
}

/// Deletes what is past its retention, a bounded amount.
pub async fn sweep(state: &AppState) -> Result<RecordsHousekept, ApiError> {
    let now = state.clock.now();
    let audit_own = retentions(state, |p| p.audit_retention_days).await?;
    let delivery_own = retentions(state, |p| p.delivery_retention_days).await?;
    let audit = Retention { own: &audit_own, default: state.config.audit_retention, now };
    let deliveries = Retention { own: &delivery_own, default: state.config.delivery_retention, now };
    let aged = |collection: &'static str, field: &'static str| {
        move |cutoff: Timestamp| {
            Query::new(collection).filter(field, Op::Lt, cutoff.to_rfc3339()).order_by(field, Direction::Asc)
        }
    };
    let expired_audit = audit.expired(state, PER_CALL, aged(AuditDoc::COLLECTION, "at")).await?;
    let expired_deliveries =
        deliveries.expired(state, PER_CALL, aged(DeliveryDoc::COLLECTION, "created_at")).await?;
    let out = RecordsHousekept {
        deleted_audit_entries: delete_all(state, expired_audit).await?,
        deleted_deliveries: delete_all(state, expired_deliveries).await?,
    };
    if out != RecordsHousekept::default() {
        tracing::info!(
            audit = out.deleted_audit_entries,
            deliveries = out.deleted_deliveries,
            "expired records deleted"
        );
    }
    Ok(out)
}

/// Deletes `docs` in one commit; how many.
async fn delete_all(state: &AppState, docs: Vec<Document>) -> Result<u32, ApiError> {
    let keys: Vec<_> = docs.into_iter().map(|d| d.key).collect();
    if keys.is_empty() {
        return Ok(0);
    }
    let keys = &keys;
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        for k in keys {
            tx.delete(k);
        }
        Ok(tx.finish(()))
    })
    .await?;
    Ok(u32::try_from(keys.len()).unwrap_or(u32::MAX))
}
