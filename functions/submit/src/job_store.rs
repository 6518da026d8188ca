//! A job's documents and objects, as both module trees read and write them:
//! the tenant API (`api::jobs`) and the queue callbacks (`tasks::fanout`,
//! `tasks::item`, `tasks::housekeep`). Item jobs are a method and a list of
//! items, fanned out through the queue (one fan-out task expands the
//! manifest into one task per item), each item run in-process by the task
//! routes, results per item in the data bucket, and the job's state derived
//! from counts, never stored.

use mapi_domain::JobId;
use mapi_jobs::{
    ItemOutcome, JobCountsDoc, JobDoc, JobItemDoc, JobItemHistoryDoc, JobState, count_field, layout,
};
use mapi_objects::{IfGeneration, ObjectError, ObjectKey};
use mapi_platform::AppState;
use mapi_problem::{ApiError, ProblemCode};
use mapi_quota::counters::{self, field};
use mapi_schema::{tx_create, tx_get};
use mapi_store::{StoreExt, transact};
use serde_json::Value;

/// The object key of `key`, which our own layout built.
pub fn object_key(key: &str) -> Result<ObjectKey, ApiError> {
    ObjectKey::parse(key).map_err(|e| ApiError::internal_from("job object key", e))
}

/// The prefix of a job's objects.
pub fn base(job: &JobDoc) -> String {
    layout::prefix(&job.tenant, &job.project, &job.id)
}

/// Loads a job.
pub async fn load(state: &AppState, id: &JobId) -> Result<Option<JobDoc>, ApiError> {
    Ok(mapi_schema::get::<JobDoc>(&*state.store, id.as_str()).await?)
}

/// The sum of a job's count shards.
pub async fn counts(state: &AppState, job: &JobId) -> Result<JobCountsDoc, ApiError> {
    let keys = JobCountsDoc::shard_ids(job)
        .iter()
        .map(|id| mapi_schema::key::<JobCountsDoc>(id))
        .collect::<Result<Vec<_>, _>>()?;
    let docs = state.store.get(&keys, None).await?;
    let shards =
        docs.into_iter().flatten().map(|d| d.decode::<JobCountsDoc>()).collect::<Result<Vec<_>, _>>()?;
    Ok(JobCountsDoc::sum(&shards))
}

/// The state and counts of `job`.
pub async fn derived(
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
pub async fn create_only(
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
pub async fn read_object(state: &AppState, key: &str) -> Result<Option<bytes::Bytes>, ApiError> {
    match state.objects.get(&object_key(key)?, None).await {
        Ok((_, b)) => Ok(Some(b)),
        Err(ObjectError::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Appends `lines` to an object by compare-and-swap on its generation (Cloud
/// Storage has no append): read, write with the generation read as the
/// precondition, again on a 412.
pub async fn append(state: &AppState, key: &str, lines: &str) -> Result<(), ApiError> {
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
pub async fn marker(state: &AppState, job: &JobId, idx: u64) -> Result<Option<JobItemDoc>, ApiError> {
    let key = mapi_schema::key::<JobItemDoc>(&JobItemDoc::id_of(job, idx))?;
    Ok(state.store.get_one(&key).await?.map(|d| d.decode()).transpose()?)
}

/// Reads items `[from, to)` of a job from its chunks.
pub async fn read_items(
    state: &AppState,
    job: &JobDoc,
    from: u64,
    to: u64,
) -> Result<Vec<(u64, Value)>, ApiError> {
    let per = u64::from(job.chunk_items.max(1));
    let base = base(job);
    let mut out = Vec::with_capacity(usize::try_from(to - from).unwrap_or(0));
    let mut c = from / per;
    while c * per < to {
        let bytes = read_object(state, &layout::chunk(&base, c))
            .await?
            .ok_or_else(|| ApiError::internal(format!("chunk {c} of {} is missing", job.id)))?;
        let items: Vec<Value> =
            serde_json::from_slice(&bytes).map_err(|e| ApiError::internal_from(format!("chunk {c}"), e))?;
        for (i, item) in items.into_iter().enumerate() {
            let idx = c * per + i as u64;
            if (from..to).contains(&idx) {
                out.push((idx, item));
            }
        }
        c += 1;
    }
    Ok(out)
}

/// Reopens a failed item for `round`: its marker moves to the history (the
/// ledger stays append-only), the job's failed count drops, the tenant's
/// window takes the item again, and its error and usage objects go.
/// Idempotent: an item not failed in an earlier round is left alone.
pub async fn reopen(state: &AppState, job: &JobDoc, idx: u64, round: u32) -> Result<(), ApiError> {
    let shard = mapi_schema::key::<JobCountsDoc>(&JobCountsDoc::id_of(&job.id, idx))?;
    // The window takes the item again, in the shard of the tenant's counter
    // the item's marker id picks.
    let tenant = counters::tenant(&job.tenant);
    let tenant = counters::shard_id(
        &tenant,
        counters::pick(&JobItemDoc::id_of(&job.id, idx), counters::shards_of(&tenant)),
    );
    let (id, shard, tenant) = (&job.id, &shard, &tenant);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let m_id = JobItemDoc::id_of(id, idx);
        match tx_get::<JobItemDoc>(&mut tx, &m_id).await? {
            Some(m) if m.outcome == ItemOutcome::Failed && m.round < round => {
                tx_create(&mut tx, &JobItemHistoryDoc(m))?;
                tx.delete(&mapi_schema::key::<JobItemDoc>(&m_id)?);
                tx.increment(shard, count_field::FAILED, -1, None);
                tx.increment(
                    &mapi_schema::key::<counters::CounterDoc>(tenant)?,
                    field::ACTIVE_ITEMS,
                    1,
                    None,
                );
                Ok(tx.finish(()))
            }
            _ => Ok(tx.finish(())),
        }
    })
    .await
    .or_else(|e| if e.code() == ProblemCode::AlreadyExists { Ok(()) } else { Err(e) })?;
    remove_stale(state, &base(job), idx, round).await
}

/// Deletes the error and usage objects of an earlier round than `round`.
pub async fn remove_stale(state: &AppState, base: &str, idx: u64, round: u32) -> Result<(), ApiError> {
    for key in [layout::error(base, idx), layout::usage(base, idx)] {
        let key = object_key(&key)?;
        let (meta, bytes) = match state.objects.get(&key, None).await {
            Ok(found) => found,
            Err(ObjectError::NotFound(_)) => continue,
            Err(e) => return Err(e.into()),
        };
        let of_round =
            serde_json::from_slice::<Value>(&bytes).ok().and_then(|v| v["round"].as_u64()).unwrap_or(0);
        if of_round < u64::from(round) {
            match state.objects.delete(&key, IfGeneration::Match(meta.generation)).await {
                Ok(()) | Err(ObjectError::NotFound(_) | ObjectError::PreconditionFailed(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}
