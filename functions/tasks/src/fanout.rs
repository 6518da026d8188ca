//! The fan-out step: expands a job's manifest into item tasks, one bounded
//! batch per step, never more of the tenant's items in flight than its
//! window.
//!
//! A step is a queue task `(job, step)`. Its effects are ordered so that a
//! redelivery, or a death at any point, loses and doubles nothing:
//!
//! 1. reserve: in one commit, the cursor's `reserved` moves ahead of
//!    `enqueued` by the batch, and the tenant's `active_items` grows by as
//!    much, guarded by the window (a full window reserves nothing);
//! 2. enqueue the reserved items' tasks (deterministic names: a second
//!    enqueue is refused as existing);
//! 3. in one commit, `enqueued = reserved` and `step + 1`;
//! 4. enqueue step `step + 1` (now, or after a wait when the window was full).
//!
//! A redelivered step whose cursor is still at `step` finds what it
//! reserved and enqueues it again (1 is skipped); one whose cursor moved to
//! `step + 1` only makes sure 4 happened; an older one does nothing.

use axum::extract::State;
use axum::http::StatusCode;
use mapi_identity::InternalCaller;
use mapi_jobs::JobDoc;
use mapi_jobs::tasks::FanoutTask;
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json};
use mapi_quota::counters::{self, field};
use mapi_schema::{tx_get, tx_put};
use mapi_store::transact;

use mapi_jobs::tasks::{push_fanout, push_items};

use mapi_jobstore::{Unreadable, load, read_items};

/// A fan-out task that finds no job after this many deliveries gives up:
/// the job was withdrawn (its submit failed) or deleted by the housekeeper.
const ORPHAN_DELIVERIES: u32 = 20;

/// What a step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handled {
    /// No job after [`ORPHAN_DELIVERIES`] deliveries: the step gives up.
    Orphan,
    /// The cursor is past this step's successor: nothing to do.
    Stale,
    /// This step had committed: only its successor was made sure of.
    Redelivered,
    /// The fan-out is finished, by this step or an earlier one.
    Finished,
    /// The tenant's window is full: the next step looks again after a wait.
    WindowFull,
    /// A batch of item tasks was enqueued and the next step with it.
    Enqueued,
    /// The manifest cannot be read: the fan-out stopped and the job says why.
    Stopped,
}

impl Handled {
    pub fn as_str(self) -> &'static str {
        match self {
            Handled::Orphan => "orphan",
            Handled::Stale => "stale",
            Handled::Redelivered => "redelivered",
            Handled::Finished => "finished",
            Handled::WindowFull => "window_full",
            Handled::Enqueued => "enqueued",
            Handled::Stopped => "stopped",
        }
    }
}

impl serde::Serialize for Handled {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// What the handler answers: the step's outcome and the job's items
/// enqueued so far.
#[derive(Debug, serde::Serialize)]
pub struct StepOutcome {
    pub outcome: Handled,
    pub enqueued: u64,
}

fn done(outcome: Handled, enqueued: u64) -> (StatusCode, Json<StepOutcome>) {
    (StatusCode::OK, Json(StepOutcome { outcome, enqueued }))
}

pub async fn handle(
    State(state): State<AppState>,
    _internal: InternalCaller,
    headers: axum::http::HeaderMap,
    Json(task): Json<FanoutTask>,
) -> Result<(StatusCode, Json<StepOutcome>), ApiError> {
    let (job, step) = (task.job.clone(), task.step);
    step_once(&state, &headers, task).await.inspect_err(|e| {
        tracing::warn!(%job, step, code = ?e.code(), error = %e, "fan-out step failed; the queue delivers it again");
    })
}

async fn step_once(
    state: &AppState,
    headers: &axum::http::HeaderMap,
    task: FanoutTask,
) -> Result<(StatusCode, Json<StepOutcome>), ApiError> {
    let state = state.clone();
    let Some(job) = load(&state, &task.job).await? else {
        let retries: u32 = headers
            .get("x-cloudtasks-taskretrycount")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if retries >= ORPHAN_DELIVERIES {
            tracing::warn!(job = %task.job, "fan-out task without a job: its submit failed; giving up");
            return Ok(done(Handled::Orphan, 0));
        }
        return Err(ApiError::unavailable(format!("job {} is not stored yet", task.job), 1));
    };
    let step = task.step;
    if job.fanout.step > step + 1 {
        return Ok(done(Handled::Stale, job.fanout.enqueued));
    }
    if job.fanout.step == step + 1 {
        // This step committed; make sure its successor exists.
        if job.fanout.finished_at.is_none() {
            push_fanout(&*state.queue, &job.id, step + 1, None).await?;
        }
        return Ok(done(Handled::Redelivered, job.fanout.enqueued));
    }
    if job.fanout.finished_at.is_some() {
        return Ok(done(Handled::Finished, job.fanout.enqueued));
    }
    let now = state.clock.now();
    let cancelled = job.cancel_requested_at.is_some();
    let all_in = job.fanout.enqueued >= job.items;
    if (cancelled || all_in) && job.fanout.reserved == job.fanout.enqueued {
        let job = advance(&state, &job, step, true).await?;
        tracing::info!(job = %job.id, enqueued = job.fanout.enqueued, cancelled, "fan-out finished");
        return Ok(done(Handled::Finished, job.fanout.enqueued));
    }
    let job =
        if job.fanout.reserved == job.fanout.enqueued { reserve(&state, &job, step).await? } else { job };
    if job.fanout.reserved == job.fanout.enqueued {
        // The tenant's window is full: look again after a wait.
        let job = advance(&state, &job, step, false).await?;
        push_fanout(&*state.queue, &job.id, step + 1, Some(now + state.config.jobs.fanout_wait)).await?;
        return Ok(done(Handled::WindowFull, job.fanout.enqueued));
    }
    let items = match read_items(&state, &job, job.fanout.enqueued, job.fanout.reserved).await? {
        Ok(items) => items,
        Err(Unreadable(why)) => {
            let job = stop(&state, &job, step, &why).await?;
            tracing::warn!(job = %job.id, enqueued = job.fanout.enqueued, reason = %why, "fan-out stopped: the manifest cannot be read");
            return Ok(done(Handled::Stopped, job.fanout.enqueued));
        }
    };
    push_items(&state.queue, &job.id, job.round, items).await?;
    let job = advance(&state, &job, step, false).await?;
    push_fanout(&*state.queue, &job.id, step + 1, None).await?;
    Ok(done(Handled::Enqueued, job.fanout.enqueued))
}

/// Step 1: reserves the next batch within the tenant's window. Returns the
/// job as committed (`reserved == enqueued` when the window is full).
async fn reserve(state: &AppState, job: &JobDoc, step: u64) -> Result<JobDoc, ApiError> {
    // The tenant's items in flight: the sum of its counter's shards, read in
    // the transaction; the batch is taken from the shards with room.
    let names = [counters::tenant(&job.tenant)];
    let counter_keys = counters::keys(&names)?;
    let batch = u64::from(state.config.jobs.fanout_batch);
    let (id, names, counter_keys) = (&job.id, &names, &counter_keys);
    let result = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let mut job =
            tx_get::<JobDoc>(&mut tx, id.as_str()).await?.ok_or_else(|| ApiError::not_found("job gone"))?;
        if job.fanout.step != step || job.fanout.reserved != job.fanout.enqueued {
            return Ok(tx.finish(job));
        }
        let docs = tx.get_all(counter_keys).await?;
        let counter = counters::Sharded::decode_all(names, &docs)?.pop().unwrap_or_default();
        let active = counter.total().active_items;
        let window = i64::from(job.window);
        let free = u64::try_from(window - active).unwrap_or(0);
        let take = batch.min(job.items - job.fanout.enqueued).min(free);
        if take > 0 {
            let delta = i64::try_from(take).unwrap_or(i64::MAX);
            // The shards' room adds up to at least `free` (their shares add
            // up to the window): a take that finds less is a bug, not a race.
            let Some(takes) = counter.take(field::ACTIVE_ITEMS, delta, Some(window), id.as_str()) else {
                return Err(ApiError::internal(
                    "the tenant's item counter has less room in its shards than in its sum",
                ));
            };
            job.fanout.reserved = job.fanout.enqueued + take;
            tx_put(&mut tx, &job)?;
            for t in &takes {
                tx.increment(
                    &mapi_schema::key::<counters::CounterDoc>(&t.shard)?,
                    field::ACTIVE_ITEMS,
                    t.amount,
                    t.at_most,
                );
            }
        }
        Ok(tx.finish(job))
    })
    .await;
    match result {
        // Another job of the tenant took the room between read and commit.
        Err(e) if e.code() == mapi_problem::ProblemCode::QuotaExceeded => {
            Ok(load(state, &job.id).await?.ok_or_else(|| ApiError::not_found("job gone"))?)
        }
        other => other,
    }
}

/// Stops the fan-out at `step` for good, saying `why`: the batch reserved
/// and never enqueued gives its room in the tenant's window back, the
/// fan-out is finished with its error, and no next step is made.
async fn stop(state: &AppState, job: &JobDoc, step: u64, why: &str) -> Result<JobDoc, ApiError> {
    let now = state.clock.now();
    let tenant = counters::tenant(&job.tenant);
    let shard = counters::shard_id(&tenant, counters::pick(job.id.as_str(), counters::shards_of(&tenant)));
    let shard = mapi_schema::key::<counters::CounterDoc>(&shard)?;
    let (id, shard) = (&job.id, &shard);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let mut job =
            tx_get::<JobDoc>(&mut tx, id.as_str()).await?.ok_or_else(|| ApiError::not_found("job gone"))?;
        if job.fanout.step != step || job.fanout.finished_at.is_some() {
            return Ok(tx.finish(job));
        }
        let unused = i64::try_from(job.fanout.reserved - job.fanout.enqueued).unwrap_or(i64::MAX);
        job.fanout.reserved = job.fanout.enqueued;
        job.fanout.step = step + 1;
        job.fanout.finished_at = Some(now);
        job.fanout.error = Some(why.to_owned());
        tx_put(&mut tx, &job)?;
        if unused > 0 {
            tx.increment(shard, field::ACTIVE_ITEMS, -unused, None);
        }
        Ok(tx.finish(job))
    })
    .await
}

/// Step 3: `enqueued = reserved`, the cursor to `step + 1`, and the fan-out
/// marked finished when `finish`.
async fn advance(state: &AppState, job: &JobDoc, step: u64, finish: bool) -> Result<JobDoc, ApiError> {
    let now = state.clock.now();
    let id = &job.id;
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let mut job =
            tx_get::<JobDoc>(&mut tx, id.as_str()).await?.ok_or_else(|| ApiError::not_found("job gone"))?;
        if job.fanout.step != step {
            return Ok(tx.finish(job));
        }
        job.fanout.enqueued = job.fanout.reserved;
        job.fanout.step = step + 1;
        if finish {
            job.fanout.finished_at = Some(now);
        }
        tx_put(&mut tx, &job)?;
        Ok(tx.finish(job))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_keep_their_wire_strings() {
        let all = [
            (Handled::Orphan, "orphan"),
            (Handled::Stale, "stale"),
            (Handled::Redelivered, "redelivered"),
            (Handled::Finished, "finished"),
            (Handled::WindowFull, "window_full"),
            (Handled::Enqueued, "enqueued"),
            (Handled::Stopped, "stopped"),
        ];
        for (outcome, wire) in all {
            let body = serde_json::to_value(StepOutcome { outcome, enqueued: 3 }).expect("answer");
            assert_eq!(body, serde_json::json!({ "outcome": wire, "enqueued": 3 }));
        }
    }
}
