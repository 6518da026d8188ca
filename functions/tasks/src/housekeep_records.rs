//! Retention of the records the platform keeps beside runs and jobs: audit
//! entries past `MAPI_AUDIT_RETENTION_DAYS` and webhook messages (with
//! their delivery logs) past `MAPI_DELIVERY_RETENTION_DAYS` are deleted,
//! at most [`PER_CALL`] of each a call, oldest ranges first through their
//! time indexes, so a call's reads are what it deletes. Called with the
//! jobs housekeeper (the scheduler, or `mapi dev`'s tick loop locally).

use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_schema::{AuditDoc, DeliveryDoc, Doc};
use mapi_store::{Direction, Op, Query, transact};

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
    let audit = Query::new(AuditDoc::COLLECTION)
        .filter("at", Op::Lt, (now - state.config.audit_retention).to_rfc3339())
        .order_by("at", Direction::Desc)
        .limit(PER_CALL);
    let deliveries = Query::new(DeliveryDoc::COLLECTION)
        .filter("created_at", Op::Lt, (now - state.config.delivery_retention).to_rfc3339())
        .order_by("created_at", Direction::Asc)
        .limit(PER_CALL);
    let out = RecordsHousekept {
        deleted_audit_entries: delete_all(state, &audit).await?,
        deleted_deliveries: delete_all(state, &deliveries).await?,
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

/// Deletes every document `query` finds, in one commit; how many.
async fn delete_all(state: &AppState, query: &Query) -> Result<u32, ApiError> {
    let keys: Vec<_> = state.store.query(query, None).await?.into_iter().map(|d| d.key).collect();
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
