//! The tick's sweep of open jobs: a job's state is derived from sharded
//! counts, so no item's finish can tell it was the last one. Each tick reads
//! the open jobs (oldest first, at most [`PAGE`]) and their count shards in
//! one batch, and closes each whose derived state is final: the job is
//! marked not open and its end (time, round, state, counts) recorded, in a
//! commit that checks it is still open in the same round. The webhooks'
//! sweep makes `job.finished` messages from that record.

use mapi_domain::JobId;
use mapi_jobs::{JobCountsDoc, JobDoc, JobFinished};
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_schema::{Doc, key, tx_get, tx_put};
use mapi_store::{Direction, Op, Query, transact};

/// The most open jobs one tick looks at.
pub const PAGE: u32 = 200;

/// Closes the open jobs whose items have all finished; answers (closed, failed, whether a job
/// is left open).
pub async fn sweep(state: &AppState) -> Result<(u32, u32, bool), ApiError> {
    let q = Query::new(JobDoc::COLLECTION)
        .filter("open", Op::Eq, true)
        .order_by("created_at", Direction::Asc)
        .limit(PAGE);
    let jobs: Vec<JobDoc> =
        state.store.query(&q, None).await?.iter().map(|d| d.decode()).collect::<Result<_, _>>()?;
    if jobs.is_empty() {
        return Ok((0, 0, false));
    }
    let keys = jobs
        .iter()
        .flat_map(|j| JobCountsDoc::shard_ids(&j.id))
        .map(|id| key::<JobCountsDoc>(&id))
        .collect::<Result<Vec<_>, _>>()?;
    let shards = state.store.get(&keys, None).await?;
    let (mut closed, mut failed) = (0, 0);
    let per_job = usize::try_from(mapi_schema::JOB_SHARDS).unwrap_or(1);
    for (job, shards) in jobs.iter().zip(shards.chunks(per_job)) {
        let shards =
            shards.iter().flatten().map(|d| d.decode::<JobCountsDoc>()).collect::<Result<Vec<_>, _>>()?;
        let (s, counts) = job.derive(&JobCountsDoc::sum(&shards));
        if !s.is_final() {
            continue;
        }
        let end = JobFinished { at: state.clock.now(), round: job.round, state: s, counts };
        match close(state, &job.id, job.round, end).await {
            Ok(true) => closed += 1,
            Ok(false) => {}
            Err(e) => {
                failed += 1;
                tracing::warn!(job = %job.id, error = %e, "closing a finished job failed; the next tick retries");
            }
        }
    }
    let open = jobs.len() > usize::try_from(closed).unwrap_or(usize::MAX);
    Ok((closed, failed, open))
}

/// Records `end` on job `id` if it is still open in `round`.
async fn close(state: &AppState, id: &JobId, round: u32, end: JobFinished) -> Result<bool, ApiError> {
    let end = &end;
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let Some(mut job) = tx_get::<JobDoc>(&mut tx, id.as_str()).await? else {
            return Ok(tx.finish(false));
        };
        // A retry-failed that began a new round since the read reopened it.
        if !job.open || job.round != round {
            return Ok(tx.finish(false));
        }
        (job.open, job.finished) = (false, Some(end.clone()));
        tx_put(&mut tx, &job)?;
        Ok(tx.finish(true))
    })
    .await
}
