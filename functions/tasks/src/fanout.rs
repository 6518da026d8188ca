//! The fan-out step: expands a job's manifest into item tasks, one bounded
//! batch per step, never more of the tenant's items in flight than its
//! window.
//!
//! A step is a queue task `(job, step)`. Its effects are ordered so that a
//! redelivery, or a death at any point, loses and doubles nothing:
//!
//! 1. reserve: admission gives what the tenant's window has free (or holds
//!    the job while the platform's spend cap is reached), and in one commit
//!    the cursor's `reserved` moves ahead of `enqueued` by the batch and the
//!    tenant's `active_items` grows by as much, guarded by the window (a
//!    full window reserves nothing);
//! 2. enqueue the reserved items' tasks (deterministic names: a second
//!    enqueue is refused as existing);
//! 3. in one commit, `enqueued = reserved` and `step + 1`;
//! 4. enqueue step `step + 1` (now, or after a wait when the window was full
//!    or the job held).
//!
//! What each step decides is `mapi_jobs::commands`': this handler reads,
//! calls the command, commits and enqueues.
//!
//! A redelivered step whose cursor is still at `step` finds what it
//! reserved and enqueues it again (1 is skipped); one whose cursor moved to
//! `step + 1` only makes sure 4 happened; an older one does nothing.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use mapi_admission::items::{Window, window};
use mapi_domain::{JobId, Timestamp};
use mapi_identity::InternalCaller;
use mapi_jobs::JobDoc;
use mapi_jobs::commands::{self, Fanout};
use mapi_jobs::tasks::FanoutTask;
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json};
use mapi_schema::tx_get;
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
    /// No new compute starts now (the platform's spend cap): the next step
    /// looks again when the hold may have lifted.
    Held,
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
            Handled::Held => "held",
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
    let Some(job) = load(state, &task.job).await? else {
        return orphan(headers, &task);
    };
    let step = task.step;
    let job = match commands::fanout(&job, step) {
        Fanout::Stale => return Ok(done(Handled::Stale, job.fanout.enqueued)),
        Fanout::Redelivered { push_next } => {
            if push_next {
                push_fanout(&*state.queue, &job.id, step + 1, None).await?;
            }
            return Ok(done(Handled::Redelivered, job.fanout.enqueued));
        }
        Fanout::Finished => return Ok(done(Handled::Finished, job.fanout.enqueued)),
        Fanout::Finish => {
            let now = state.clock.now();
            let job = commit(state, &job.id, |j| commands::advance(j, step, true, now)).await?;
            tracing::info!(job = %job.id, enqueued = job.fanout.enqueued, "fan-out finished");
            return Ok(done(Handled::Finished, job.fanout.enqueued));
        }
        Fanout::Reserve => match reserve(state, job, step).await? {
            Reserved::Batch(job) => job,
            Reserved::Wait(job, wait, handled) => {
                // Nothing to enqueue now: look again after a wait.
                let job = commit(state, &job.id, |j| commands::advance(j, step, false, wait.1)).await?;
                push_fanout(&*state.queue, &job.id, step + 1, Some(wait.0)).await?;
                return Ok(done(handled, job.fanout.enqueued));
            }
        },
        Fanout::Enqueue => job,
    };
    let items = match read_items(state, &job, job.fanout.enqueued, job.fanout.reserved).await? {
        Ok(items) => items,
        Err(Unreadable(why)) => {
            let now = state.clock.now();
            let job = commit(state, &job.id, |j| commands::stop(j, step, &why, now)).await?;
            tracing::warn!(job = %job.id, enqueued = job.fanout.enqueued, reason = %why, "fan-out stopped: the manifest cannot be read");
            return Ok(done(Handled::Stopped, job.fanout.enqueued));
        }
    };
    push_items(&state.queue, &job.id, job.round, items).await?;
    let now = state.clock.now();
    let job = commit(state, &job.id, |j| commands::advance(j, step, false, now)).await?;
    push_fanout(&*state.queue, &job.id, step + 1, None).await?;
    Ok(done(Handled::Enqueued, job.fanout.enqueued))
}

/// A fan-out task that finds no job: its submit has not committed yet (the
/// queue delivers again), or, after [`ORPHAN_DELIVERIES`], failed.
fn orphan(
    headers: &axum::http::HeaderMap,
    task: &FanoutTask,
) -> Result<(StatusCode, Json<StepOutcome>), ApiError> {
    let retries: u32 = headers
        .get("x-cloudtasks-taskretrycount")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if retries >= ORPHAN_DELIVERIES {
        tracing::warn!(job = %task.job, "fan-out task without a job: its submit failed; giving up");
        return Ok(done(Handled::Orphan, 0));
    }
    Err(ApiError::unavailable(format!("job {} is not stored yet", task.job), 1))
}

/// Reads job `id`, runs `command` on it and commits its step; the job as
/// the command left it.
async fn commit(
    state: &AppState,
    id: &JobId,
    command: impl Fn(JobDoc) -> (commands::Step, JobDoc),
) -> Result<JobDoc, ApiError> {
    let command = &command;
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let job =
            tx_get::<JobDoc>(&mut tx, id.as_str()).await?.ok_or_else(|| ApiError::not_found("job gone"))?;
        let (step, job) = command(job);
        step.write(&mut tx)?;
        Ok(tx.finish(job))
    })
    .await
}

/// What a step's reservation came to.
enum Reserved {
    /// A batch is reserved: the job as committed.
    Batch(JobDoc),
    /// Nothing now: the next step at `(when, now)`, for the window or a hold.
    Wait(JobDoc, (Timestamp, Timestamp), Handled),
}

/// Step 1: asks admission for the next batch of the tenant's window (the
/// spend cap may hold it), and reserves what it gave in one commit with the
/// window's increments. A commit whose guard found the room taken by
/// another job's step asks again ([`mapi_admission::quota::RACE_RETRIES`]
/// times, then waits like a full window).
async fn reserve(state: &AppState, job: JobDoc, step: u64) -> Result<Reserved, ApiError> {
    let want = commands::wanted(&job, state.config.jobs.fanout_batch);
    for _ in 0..mapi_admission::quota::RACE_RETRIES {
        let now = state.clock.now();
        let take = match window(state, &job.tenant, job.window, want, job.id.as_str()).await? {
            Window::Held { wait_s, why } => {
                tracing::info!(job = %job.id, %why, "the job's next items wait");
                let wait = Duration::from_secs(wait_s.max(1)).min(state.config.jobs.hold_wait);
                return Ok(Reserved::Wait(job, (now + wait, now), Handled::Held));
            }
            Window::Take(take) if take.items == 0 => break,
            Window::Take(take) => take,
        };
        match commit(state, &job.id, |j| commands::reserve(j, step, &take)).await {
            Ok(job) if job.fanout.reserved > job.fanout.enqueued => return Ok(Reserved::Batch(job)),
            Ok(job) => {
                return Ok(Reserved::Wait(
                    job,
                    (now + state.config.jobs.fanout_wait, now),
                    Handled::WindowFull,
                ));
            }
            // Another job of the tenant took the room between read and commit.
            Err(e) if mapi_admission::quota::is_limit(&e) => continue,
            Err(e) => return Err(e),
        }
    }
    let now = state.clock.now();
    Ok(Reserved::Wait(job, (now + state.config.jobs.fanout_wait, now), Handled::WindowFull))
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
            (Handled::Held, "held"),
            (Handled::Enqueued, "enqueued"),
            (Handled::Stopped, "stopped"),
        ];
        for (outcome, wire) in all {
            let body = serde_json::to_value(StepOutcome { outcome, enqueued: 3 }).expect("answer");
            assert_eq!(body, serde_json::json!({ "outcome": wire, "enqueued": 3 }));
        }
    }
}
