//! How the housekeepers remove what is past its retention: every object
//! under a prefix, and documents, a commit at a time (Firestore allows 500
//! writes a commit). A removal that dies halfway is taken up again by the
//! next call, so the document that finds the work (a job, a run) goes last.

use mapi_objects::{IfGeneration, ObjectError, ObjectKey};
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_store::{DocKey, Op, Query, transact};

/// Documents deleted a commit.
const DOCS_PER_COMMIT: u32 = 200;

/// Objects listed a page.
const OBJECTS_PER_PAGE: u32 = 500;

/// Deletes every object under `prefix` (one already gone counts as
/// deleted); how many.
///
/// # Errors
///
/// The object store's; what was deleted before stays deleted.
pub async fn delete_prefix(state: &AppState, prefix: &str) -> Result<u64, ApiError> {
    let mut deleted = 0;
    loop {
        let page = state.objects.list(prefix, None, OBJECTS_PER_PAGE).await?;
        if page.objects.is_empty() {
            return Ok(deleted);
        }
        for o in page.objects {
            let key = ObjectKey::parse(o.key.as_str())
                .map_err(|e| ApiError::internal_from(format!("listed object key under {prefix}"), e))?;
            match state.objects.delete(&key, IfGeneration::Any).await {
                Ok(()) | Err(ObjectError::NotFound(_)) => deleted += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// Deletes every document of `collection` whose `field` is `value`, a
/// commit of [`DOCS_PER_COMMIT`] at a time; how many.
///
/// # Errors
///
/// The store's; the commits before stay.
pub async fn delete_where(
    state: &AppState,
    collection: &str,
    field: &str,
    value: &str,
) -> Result<u64, ApiError> {
    let q = Query::new(collection).filter(field, Op::Eq, value).limit(DOCS_PER_COMMIT);
    let mut deleted = 0;
    loop {
        let keys: Vec<DocKey> = state.store.query(&q, None).await?.into_iter().map(|d| d.key).collect();
        if keys.is_empty() {
            return Ok(deleted);
        }
        deleted += delete_keys(state, &keys).await?;
    }
}

/// Deletes the documents `keys` in one commit; how many.
///
/// # Errors
///
/// The store's (nothing was deleted).
pub async fn delete_keys(state: &AppState, keys: &[DocKey]) -> Result<u64, ApiError> {
    if keys.is_empty() {
        return Ok(0);
    }
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        for k in keys {
            tx.delete(k);
        }
        Ok(tx.finish(()))
    })
    .await?;
    Ok(u64::try_from(keys.len()).unwrap_or(u64::MAX))
}
