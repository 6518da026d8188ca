//! Item jobs: a method and a list of items, fanned out through the queue
//! (one fan-out task expands the manifest into one task per item), each
//! item run in-process by the task routes, results per item in the data
//! bucket, and the job's state derived from counts, never stored.
//!
//! - [`api`]: submit, get, items, log, cancel, retry-failed (tenant-facing);
//! - [`fanout`]: the fan-out step (queue callback);
//! - [`item`]: the per-item handler (queue callback), which owns the retry budget;
//! - [`docs`]: `GET /v1/usage` (plain text from the live registry) and `/manifest`;
//! - [`housekeep`]: the retention housekeeper (scheduler callback).

pub mod api;
pub mod docs;
pub mod fanout;
pub mod housekeep;
pub mod item;

use mapi_domain::JobId;
use mapi_jobs::{JobCountsDoc, JobDoc, JobItemDoc, JobState, layout};
use mapi_objects::{IfGeneration, ObjectError, ObjectKey};
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_store::StoreExt;

/// The object key of `key`, which our own layout built.
fn object_key(key: &str) -> Result<ObjectKey, ApiError> {
    ObjectKey::parse(key).map_err(|e| ApiError::internal(format!("job object key: {e}")))
}

/// The prefix of a job's objects.
fn base(job: &JobDoc) -> String {
    layout::prefix(&job.tenant, &job.project, &job.id)
}

/// Loads a job.
async fn load(state: &AppState, id: &JobId) -> Result<Option<JobDoc>, ApiError> {
    Ok(mapi_runs::get::<JobDoc>(&*state.store, id.as_str()).await?)
}

/// The sum of a job's count shards.
async fn counts(state: &AppState, job: &JobId) -> Result<JobCountsDoc, ApiError> {
    let keys = JobCountsDoc::shard_ids(job)
        .iter()
        .map(|id| mapi_runs::key::<JobCountsDoc>(id))
        .collect::<Result<Vec<_>, _>>()?;
    let docs = state.store.get(&keys, None).await?;
    let shards =
        docs.into_iter().flatten().map(|d| d.decode::<JobCountsDoc>()).collect::<Result<Vec<_>, _>>()?;
    Ok(JobCountsDoc::sum(&shards))
}

/// The state and counts of `job`.
async fn derived(
    state: &AppState,
    job: &JobDoc,
) -> Result<(JobState, mapi_jobs::Counts, JobCountsDoc), ApiError> {
    let c = counts(state, &job.id).await?;
    let (s, counts) = mapi_jobs::derive(
        job.items,
        job.fanout.enqueued,
        job.fanout.finished_at.is_some(),
        job.cancel_requested_at.is_some(),
        u64::try_from(c.succeeded).unwrap_or(0),
        u64::try_from(c.failed).unwrap_or(0),
    );
    Ok((s, counts, c))
}

/// Creates an object, create-only. `Ok(true)` when this call (or an
/// earlier one of ours whose answer was lost) wrote exactly `bytes`;
/// `Ok(false)` when another writer's different object is there.
async fn create_only(
    state: &AppState,
    key: &str,
    bytes: Vec<u8>,
    content_type: &str,
) -> Result<bool, ApiError> {
    let key = object_key(key)?;
    match state.objects.put(&key, bytes.clone().into(), content_type, IfGeneration::ABSENT).await {
        Ok(_) => Ok(true),
        Err(ObjectError::PreconditionFailed(_)) => {
            let (_, stored) = state.objects.get(&key, None).await?;
            Ok(stored[..] == bytes[..])
        }
        Err(e) => Err(e.into()),
    }
}

/// Reads an object, `None` when it does not exist.
async fn read_object(state: &AppState, key: &str) -> Result<Option<bytes::Bytes>, ApiError> {
    match state.objects.get(&object_key(key)?, None).await {
        Ok((_, b)) => Ok(Some(b)),
        Err(ObjectError::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Appends `lines` to an object by compare-and-swap on its generation (Cloud
/// Storage has no append): read, write with the generation read as the
/// precondition, again on a 412.
async fn append(state: &AppState, key: &str, lines: &str) -> Result<(), ApiError> {
    let key = object_key(key)?;
    for _ in 0..16 {
        let (current, precondition) = match state.objects.get(&key, None).await {
            Ok((meta, b)) => (b.to_vec(), IfGeneration::Match(meta.generation)),
            Err(ObjectError::NotFound(_)) => (Vec::new(), IfGeneration::ABSENT),
            Err(e) => return Err(e.into()),
        };
        let mut next = current;
        next.extend_from_slice(lines.as_bytes());
        match state.objects.put(&key, next.into(), "application/x-ndjson", precondition).await {
            Ok(_) => return Ok(()),
            Err(ObjectError::PreconditionFailed(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::unavailable("the item log is contended: retry", 1))
}

/// The marker of item `idx`, if it finished.
async fn marker(state: &AppState, job: &JobId, idx: u64) -> Result<Option<JobItemDoc>, ApiError> {
    let key = mapi_runs::key::<JobItemDoc>(&JobItemDoc::id_of(job, idx))?;
    Ok(state.store.get_one(&key).await?.map(|d| d.decode()).transpose()?)
}
