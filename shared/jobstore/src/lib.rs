//! A job's documents and objects, as both services read and write them: the
//! tenant API (`mapi_submit`'s jobs routes) and the task routes (`mapi_tasks`'
//! fan-out, item and housekeeper). Item jobs are a method and a list of
//! items, fanned out through the queue (one fan-out task expands the
//! manifest into one task per item), each item run in-process by the task
//! routes, results per item in the data bucket, and the job's state derived
//! from counts, never stored.

use mapi_domain::JobId;
use mapi_jobs::{ItemEnd, ItemOutcome, JobCountsDoc, JobDoc, JobItemDoc, JobState, layout};
use mapi_objects::{IfGeneration, ObjectError, ObjectKey};
use mapi_platform::AppState;
use mapi_problem::{ApiError, ProblemCode};
use mapi_schema::tx_get;
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
    let (s, counts) = job.derive(&c);
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
/// precondition, again on a 412. Lines already at the object's end are not
/// appended again, so a retried append (its answer lost) writes them once.
pub async fn append(state: &AppState, key: &str, lines: &str) -> Result<(), ApiError> {
    let key = object_key(key)?;
    for _ in 0..16 {
        let (current, precondition) = match state.objects.get(&key, None).await {
            Ok((meta, b)) => (b.to_vec(), IfGeneration::Match(meta.generation)),
            Err(ObjectError::NotFound(_)) => (Vec::new(), IfGeneration::ABSENT),
            Err(e) => return Err(e.into()),
        };
        if current.ends_with(lines.as_bytes()) {
            return Ok(());
        }
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

/// `lines` as newline-delimited JSON.
pub fn ndjson(lines: &[Value]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// An item's end, with its generation, `None` when it has none.
pub async fn read_end(
    state: &AppState,
    base: &str,
    idx: u64,
) -> Result<Option<(mapi_objects::Generation, ItemEnd)>, ApiError> {
    match state.objects.get(&object_key(&layout::end(base, idx))?, None).await {
        Ok((meta, b)) => {
            let end = serde_json::from_slice(&b).map_err(|e| ApiError::internal_from("an item's end", e))?;
            Ok(Some((meta.generation, end)))
        }
        Err(ObjectError::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Writes item `idx`'s end, create-only, and answers the end that stands
/// and whether it is this one. Another delivery's end stands, but for an
/// earlier round's, or a failure of this round when this delivery
/// succeeded (a result beats an error): those this one replaces, keeping
/// their log lines first. An end
/// byte for byte this one is this delivery's own earlier write whose
/// answer was lost.
pub async fn write_end(
    state: &AppState,
    base: &str,
    idx: u64,
    mut end: ItemEnd,
) -> Result<(ItemEnd, bool), ApiError> {
    let key = object_key(&layout::end(base, idx))?;
    let mut precondition = IfGeneration::ABSENT;
    for _ in 0..8 {
        let bytes = serde_json::to_vec(&end)?;
        match state.objects.put(&key, bytes.clone().into(), "application/json", precondition).await {
            Ok(_) => return Ok((end, true)),
            Err(ObjectError::PreconditionFailed(_)) => {}
            Err(e) => return Err(e.into()),
        }
        let Some((generation, theirs)) = read_end(state, base, idx).await? else {
            precondition = IfGeneration::ABSENT;
            continue;
        };
        if serde_json::to_vec(&theirs)? == bytes {
            return Ok((end, true));
        }
        let replaces = theirs.round < end.round
            || (theirs.round == end.round
                && end.outcome == ItemOutcome::Succeeded
                && theirs.outcome == ItemOutcome::Failed);
        if !replaces {
            return Ok((theirs, false));
        }
        end.log = theirs.log.into_iter().chain(end.log).collect();
        precondition = IfGeneration::Match(generation);
    }
    Err(ApiError::unavailable("the item's end is contended: retry", 1))
}

/// The marker of item `idx`, if it finished.
pub async fn marker(state: &AppState, job: &JobId, idx: u64) -> Result<Option<JobItemDoc>, ApiError> {
    let key = mapi_schema::key::<JobItemDoc>(&JobItemDoc::id_of(job, idx))?;
    Ok(state.store.get_one(&key).await?.map(|d| d.decode()).transpose()?)
}

/// A job's manifest that cannot be read as items: a chunk missing, or
/// not a list of JSON values (a number outside a 64-bit float's range,
/// accepted before such items were refused at submit). Reading it again
/// changes nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable(pub String);

/// Reads items `[from, to)` of a job from its chunks; `Ok(Err(_))` when
/// the manifest cannot be read as items.
pub async fn read_items(
    state: &AppState,
    job: &JobDoc,
    from: u64,
    to: u64,
) -> Result<Result<Vec<(u64, Value)>, Unreadable>, ApiError> {
    let per = u64::from(job.chunk_items.max(1));
    let base = base(job);
    let mut out = Vec::with_capacity(usize::try_from(to - from).unwrap_or(0));
    let mut c = from / per;
    while c * per < to {
        let Some(bytes) = read_object(state, &layout::chunk(&base, c)).await? else {
            return Ok(Err(Unreadable(format!("chunk {c} of the manifest is missing"))));
        };
        let items: Vec<Value> = match serde_json::from_slice(&bytes) {
            Ok(items) => items,
            Err(e) => {
                let first = c * per;
                return Ok(Err(Unreadable(format!(
                    "items {first} to {} cannot be read ({e}): the job's items must be JSON a 64-bit float can hold",
                    first + per - 1
                ))));
            }
        };
        for (i, item) in items.into_iter().enumerate() {
            let idx = c * per + i as u64;
            if (from..to).contains(&idx) {
                out.push((idx, item));
            }
        }
        c += 1;
    }
    Ok(Ok(out))
}

/// How item `idx` ended: the end its marker holds, else its end object (a
/// large end, or one whose delivery died before the marker).
pub async fn end_of(
    state: &AppState,
    base: &str,
    idx: u64,
    marker: Option<JobItemDoc>,
) -> Result<Option<ItemEnd>, ApiError> {
    match marker.and_then(|m| m.held_end()) {
        Some(end) => Ok(Some(end)),
        None => Ok(read_end(state, base, idx).await?.map(|(_, e)| e)),
    }
}

/// Reopens a failed item for `round`: its marker moves to the history (the
/// ledger stays append-only), the job's failed count drops, the tenant's
/// window takes the item again, and its error and usage objects go; the
/// log lines of its end (in the marker or in the end object) move to the
/// item's log object first, so the item's log keeps every attempt.
/// Idempotent: an item not failed in an earlier round is left alone.
pub async fn reopen(state: &AppState, job: &JobDoc, idx: u64, round: u32) -> Result<(), ApiError> {
    let reopens = |m: &JobItemDoc| m.outcome == ItemOutcome::Failed && m.round < round;
    let base = base(job);
    if let Some(end) = marker(state, &job.id, idx).await?.filter(reopens).and_then(|m| m.end) {
        // Appending the same lines again (a reopen retried) adds nothing.
        append(state, &layout::log(&base, idx), &ndjson(&end.log)).await?;
    }
    let id = &job.id;
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let existing = tx_get::<JobItemDoc>(&mut tx, &JobItemDoc::id_of(id, idx)).await?;
        let (step, _) = mapi_jobs::commands::reopen(existing, round);
        step.write(&mut tx)?;
        Ok(tx.finish(()))
    })
    .await
    .or_else(|e| if e.code() == ProblemCode::AlreadyExists { Ok(()) } else { Err(e) })?;
    remove_stale(state, &base, idx, Some(round)).await
}

/// Removes item `idx`'s end object, its log lines moved to the item's log
/// object first so the item's log keeps every attempt: when it is of an
/// earlier round than `round` (retry-failed reopened the item), or, with
/// `None`, whatever its round (an end in the marker superseded it).
pub async fn remove_stale(
    state: &AppState,
    base: &str,
    idx: u64,
    round: Option<u32>,
) -> Result<(), ApiError> {
    let Some((generation, end)) = read_end(state, base, idx).await? else { return Ok(()) };
    if round.is_some_and(|r| end.round >= r) {
        return Ok(());
    }
    append(state, &layout::log(base, idx), &ndjson(&end.log)).await?;
    let key = object_key(&layout::end(base, idx))?;
    match state.objects.delete(&key, IfGeneration::Match(generation)).await {
        Ok(()) | Err(ObjectError::NotFound(_) | ObjectError::PreconditionFailed(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
