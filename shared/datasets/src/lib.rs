//! How a dataset goes. A dataset a run may still read (queued to
//! cancelling) is kept; otherwise its record and the storage it counted
//! against its tenant go in one commit with the audit entry that says why
//! (a person's delete, or its retention), then its object. The tenant's
//! `DELETE …/datasets/{id}` and the retention housekeeper both go through
//! [`remove`].
//!
//! Architecture invariant: a dataset's record and the storage it counts
//! are removed in the same commit, once: a repeated removal finds no record
//! and gives nothing back twice.

use mapi_domain::{DatasetId, RunState};
use mapi_lifecycle::RunDoc;
use mapi_objects::{Generation, IfGeneration, ObjectKey};
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_quota::counters::{self, Bumps, field};
use mapi_schema::{AuditDoc, DatasetDoc, Doc, tx_create};
use mapi_store::{Op, transact};

/// The states in which a run may still read its dataset.
pub const READING: [RunState; 4] =
    [RunState::Queued, RunState::Dispatching, RunState::Running, RunState::Cancelling];

/// A run that may still read `dataset`, and its state: one bounded query.
///
/// # Errors
///
/// The store's.
pub async fn reading_run(
    state: &AppState,
    dataset: &DatasetId,
) -> Result<Option<(String, RunState)>, ApiError> {
    let states: Vec<serde_json::Value> = READING.iter().map(|s| s.as_str().into()).collect();
    let query = mapi_store::Query::new(RunDoc::COLLECTION)
        .filter("dataset", Op::Eq, dataset.as_str())
        .filter("state", Op::In, serde_json::Value::Array(states))
        .limit(1);
    match state.store.query(&query, None).await?.first() {
        None => Ok(None),
        Some(d) => {
            let run: RunDoc = d.decode()?;
            Ok(Some((run.id().to_string(), run.state())))
        }
    }
}

/// Removes `doc`: its record, the storage it counted (given back to its
/// tenant) and `record` (the audit entry) in one commit, then its object.
/// `Ok(false)`: the record was gone already (another removal won), nothing
/// was written. The caller checks [`reading_run`] first.
///
/// # Errors
///
/// The store's (nothing was removed). A failure to remove the object after
/// the commit is logged, not returned: the bytes are then named by no record
/// and counted by no quota.
pub async fn remove(state: &AppState, doc: &DatasetDoc, record: &AuditDoc) -> Result<bool, ApiError> {
    let mut release = Bumps::default();
    let bytes = i64::try_from(doc.size).unwrap_or(i64::MAX);
    release.add_to(&counters::tenant(&doc.tenant), doc.id.as_str(), field::STORAGE, -bytes);
    let release = &release;
    let removed = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        if mapi_schema::tx_get::<DatasetDoc>(&mut tx, doc.id.as_str()).await?.is_none() {
            return Ok(tx.finish(false));
        }
        tx.delete(&mapi_schema::key::<DatasetDoc>(doc.id.as_str())?);
        release.apply(&mut tx)?;
        tx_create(&mut tx, record)?;
        Ok(tx.finish(true))
    })
    .await?;
    if removed {
        let key = ObjectKey::parse(&doc.object)?;
        if let Err(e) = state.objects.delete(&key, IfGeneration::Match(Generation(doc.generation))).await {
            tracing::warn!(object = %key, error = %e, "a deleted dataset's object could not be removed");
        }
        tracing::info!(dataset = %doc.id, size = doc.size, action = %record.action, "dataset deleted");
    }
    Ok(removed)
}
