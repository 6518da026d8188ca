//! A document admitted by a quota plan, committed with the plan's increments:
//! the upload of a dataset, the audit entry of a download link.

use mapi_admission::quota;
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_schema::{Doc, tx_create};
use mapi_store::transact;

/// Commits an admitted `plan`'s increments with the document it admits
/// (created only if absent).
pub(crate) async fn create_with<D: Doc + serde::Serialize + Sync>(
    state: &AppState,
    plan: &quota::Plan,
    doc: &D,
) -> Result<(), ApiError> {
    let bumps = &plan.bumps;
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        bumps.apply(&mut tx)?;
        tx_create(&mut tx, doc)?;
        Ok(tx.finish(()))
    })
    .await
}
