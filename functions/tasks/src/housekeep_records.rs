//! Retention of the records the platform keeps beside runs and jobs: audit
//! entries past their tenant's audit retention (`audit_retention_days` of
//! its quota policy, else the platform's `MAPI_AUDIT_RETENTION_DAYS`; an
//! entry of no tenant is under the platform's) and webhook messages, with
//! their delivery logs, past the tenant's delivery retention
//! (`delivery_retention_days`, else `MAPI_DELIVERY_RETENTION_DAYS`) are
//! deleted, at most [`PER_CALL`] of each a call, oldest first through their
//! time indexes ([`crate::retention::Retention`]), so a call reads what it
//! deletes and the tenants' own-retention pass-overs. Datasets past their
//! tenant's dataset retention (`dataset_retention_days`, else
//! `MAPI_DATASET_RETENTION_DAYS`, which keeps them by default) go too,
//! [`DATASETS_PER_CALL`] at most, through `mapi_datasets::remove` (record,
//! storage and audit entry `dataset.expire` in one commit, then the object);
//! one a run still reads is kept for a later call. Called with the jobs
//! housekeeper (the scheduler, or `mapi dev`'s tick loop locally).

use mapi_identity::Audit;
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_schema::{AuditDoc, DatasetDoc, DeliveryDoc, Doc};
use mapi_store::Document;

use crate::retention::{Policies, Retention, aged};

/// Documents of each kind deleted per call: one commit each (Firestore's
/// limit is 500 writes a commit).
pub const PER_CALL: u32 = 500;

/// Datasets looked at per call: each is a commit and an object deletion.
pub const DATASETS_PER_CALL: u32 = 50;

/// What one call deleted.
#[derive(Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RecordsHousekept {
    pub deleted_audit_entries: u32,
    pub deleted_deliveries: u32,
    pub deleted_datasets: u32,
    /// Datasets past their retention that a run still reads: a later call.
    pub kept_datasets: u32,
}

/// Deletes what is past its retention, a bounded amount.
pub async fn sweep(state: &AppState, policies: &Policies) -> Result<RecordsHousekept, ApiError> {
    let now = state.clock.now();
    let audit_own = policies.own(|p| p.audit_retention_days);
    let delivery_own = policies.own(|p| p.delivery_retention_days);
    let dataset_own = policies.own(|p| p.dataset_retention_days);
    let datasets = Retention { own: &dataset_own, default: state.config.dataset_retention, now };
    let audit = Retention { own: &audit_own, default: Some(state.config.audit_retention), now };
    let deliveries = Retention { own: &delivery_own, default: Some(state.config.delivery_retention), now };
    let expired_audit = audit.expired(state, PER_CALL, aged(AuditDoc::COLLECTION, "at")).await?;
    let expired_deliveries =
        deliveries.expired(state, PER_CALL, aged(DeliveryDoc::COLLECTION, "created_at")).await?;
    let expired_datasets =
        datasets.expired(state, DATASETS_PER_CALL, aged(DatasetDoc::COLLECTION, "created_at")).await?;
    let mut out = RecordsHousekept {
        deleted_audit_entries: delete_all(state, expired_audit).await?,
        deleted_deliveries: delete_all(state, expired_deliveries).await?,
        ..RecordsHousekept::default()
    };
    for d in expired_datasets {
        let doc: DatasetDoc = d.decode()?;
        if mapi_datasets::reading_run(state, &doc.id).await?.is_some() {
            out.kept_datasets += 1;
            continue;
        }
        let kept =
            dataset_own.get(&doc.tenant).copied().or(state.config.dataset_retention).unwrap_or_default();
        let record = Audit::internal("dataset.expire", format!("datasets/{}", doc.id))
            .tenant(&doc.tenant)
            .project(&doc.project)
            .detail(format!(
                "{} ({} bytes), past its retention of {} days",
                doc.name,
                doc.size,
                kept.as_secs() / 86_400
            ))
            .into_doc(now, &*state.entropy);
        out.deleted_datasets += u32::from(mapi_datasets::remove(state, &doc, &record).await?);
    }
    if out != RecordsHousekept::default() {
        tracing::info!(
            audit = out.deleted_audit_entries,
            deliveries = out.deleted_deliveries,
            datasets = out.deleted_datasets,
            "expired records deleted"
        );
    }
    Ok(out)
}

/// Deletes `docs` in one commit; how many.
async fn delete_all(state: &AppState, docs: Vec<Document>) -> Result<u32, ApiError> {
    let keys: Vec<_> = docs.into_iter().map(|d| d.key).collect();
    let deleted = crate::removal::delete_keys(state, &keys).await?;
    Ok(u32::try_from(deleted).unwrap_or(u32::MAX))
}
