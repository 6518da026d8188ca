//! The per-item handler: runs the job's method on one item, in this
//! process, and owns the item's retry budget.
//!
//! A delivery first looks for the item's end: a marker (finished: nothing
//! to do), or an end object of this round with no marker (an earlier
//! delivery died between the two: the marker is made from the end).
//! Otherwise it runs the method under the per-item timeout, and:
//! - on success writes the end (result, usage and this attempt's log line)
//!   and the marker;
//! - on an input error (retrying cannot help) writes the end with the
//!   error at once; on a transient error or a timeout appends a line to
//!   the item's log object and answers 503 so the queue delivers again,
//!   until the last attempt, which writes the end with the error and
//!   answers 200 so the queue stops.
//!
//! A small end (the usual case) is written *in* the marker, in the one
//! commit that creates it: the marker's create-only is what decides which
//! delivery's end stands. A large end is first an object (`ends/{idx}.json`),
//! created only if absent: a 412 is success when the stored end is byte for
//! byte this delivery's (its own earlier write whose answer was lost);
//! otherwise another delivery's end stands; the marker then says what that
//! end says. Either way the delivery whose end does not stand adopts the
//! one that does, its own log line appended to the log object, except that
//! a success replaces a failure of the same round (a result beats an error)
//! and any end replaces an earlier round's; the replaced end's log lines
//! are kept.

use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use mapi_identity::InternalCaller;
use mapi_jobs::commands::{self, MarkRead, Marked};
use mapi_jobs::tasks::ItemTask;
use mapi_jobs::{
    InlineEnd, ItemEnd, ItemFailure, ItemOutcome, ItemUsage, JobDoc, JobItemDoc, JobItemHistoryDoc, layout,
};
use mapi_methods::{ItemContext, ItemError};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, ProblemCode};
use mapi_schema::tx_get;
use mapi_store::transact;
use serde_json::{Value, json};

use mapi_jobstore::{append, base, load, marker, ndjson, read_end, remove_stale, reopen, write_end};

/// Where an end being marked lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Held {
    /// In the marker itself.
    Inline,
    /// In the end object, written before the marker.
    Object,
}

/// What a delivery came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handled {
    /// The job is not stored: nothing to do.
    NoJob,
    /// The job has no item at this index: nothing to do.
    NoItem,
    /// The item's marker stands: nothing to do.
    Done,
    /// An earlier delivery left the item's end without its marker: the
    /// marker was made from the objects.
    Recovered,
    /// The job was cancelled first: the item failed as cancelled.
    Cancelled,
    Succeeded,
    /// An input error, or the last attempt failed or timed out.
    Failed,
}

impl Handled {
    pub fn as_str(self) -> &'static str {
        match self {
            Handled::NoJob => "no_job",
            Handled::NoItem => "no_item",
            Handled::Done => "done",
            Handled::Recovered => "recovered",
            Handled::Cancelled => "cancelled",
            Handled::Succeeded => "succeeded",
            Handled::Failed => "failed",
        }
    }
}

impl serde::Serialize for Handled {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// What the handler answers, for the queue's logs and the tests.
#[derive(Debug, serde::Serialize)]
pub struct Outcome {
    pub outcome: Handled,
}

fn ok(outcome: Handled) -> (StatusCode, Json<Outcome>) {
    (StatusCode::OK, Json(Outcome { outcome }))
}

/// What one attempt at an item came to: the `outcome` of its line in the
/// item's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attempted {
    /// The job was cancelled first: the method did not run.
    Cancelled,
    /// A transient error or a timeout before the last attempt: the queue
    /// delivers again.
    Retrying,
    Succeeded,
    Failed,
}

impl Attempted {
    fn as_str(self) -> &'static str {
        match self {
            Attempted::Cancelled => "cancelled",
            Attempted::Retrying => "retrying",
            Attempted::Succeeded => "succeeded",
            Attempted::Failed => "failed",
        }
    }
}

/// The delivery's attempt number, from Cloud Tasks' retry count header.
fn attempt_of(headers: &HeaderMap) -> u32 {
    headers
        .get("x-cloudtasks-taskretrycount")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(0)
        .saturating_add(1)
}

/// How an item ended, before it is written.
enum End {
    Succeeded(Value),
    Failed(ItemFailure),
}

pub async fn handle(
    State(state): State<AppState>,
    _internal: InternalCaller,
    headers: HeaderMap,
    Json(task): Json<ItemTask>,
) -> Result<(StatusCode, Json<Outcome>), ApiError> {
    let Some(job) = load(&state, &task.job).await? else {
        return Ok(ok(Handled::NoJob));
    };
    if task.idx >= job.items {
        return Ok(ok(Handled::NoItem));
    }
    let (idx, round) = (task.idx, task.round);
    if let Some(m) = marker(&state, &job.id, idx).await? {
        if m.outcome == ItemOutcome::Failed && m.round < round {
            reopen(&state, &job, idx, round).await?;
        } else {
            return Ok(ok(Handled::Done));
        }
    }
    let base = base(&job);
    // An end written by a delivery that died before its marker.
    if let Some((_, end)) = read_end(&state, &base, idx).await? {
        if end.round >= round {
            mark(&state, &job, idx, &end, Held::Object).await?;
            return Ok(ok(Handled::Recovered));
        }
        // An earlier round's failure that retry-failed reopened.
        remove_stale(&state, &base, idx, Some(round)).await?;
    }
    let attempt = attempt_of(&headers);
    if job.cancel_requested_at.is_some() {
        let f = ItemFailure {
            idx,
            round,
            kind: mapi_domain::ItemErrorKind::Cancelled,
            message: "the job was cancelled".into(),
            attempts: 0,
        };
        let line = log_line(
            &state,
            json!({"round": round, "attempt": attempt, "outcome": Attempted::Cancelled.as_str()}),
        );
        let ending = Ending { idx, round, end: End::Failed(f), attempts: 0, took: Duration::ZERO, line };
        finish(&state, &job, ending).await?;
        return Ok(ok(Handled::Cancelled));
    }
    let params = mapi_methods::validate(
        mapi_methods::find(&job.method)
            .ok_or_else(|| ApiError::internal(format!("method {} left the registry", job.method)))?,
        &job.params,
    )
    .map_err(|e| ApiError::internal_from("stored params", e))?;
    let ctx = ItemContext { attempt, round };
    let (method, item) = (job.method.clone(), task.item);
    // The method's time is read on the platform's clock, as every time is:
    // a simulation's virtual clock makes an item's charge replay exactly.
    let started = state.clock.now();
    let run = tokio::task::spawn_blocking(move || mapi_methods::run_item(&method, &params, &item, ctx));
    // The timeout is waited for on the platform's clock (virtual in simulations).
    let deadline = state.clock.sleep_until(state.clock.now() + state.config.jobs.item_timeout);
    // Biased: when both are ready the method's answer wins, and no
    // unseeded choice can change what an item did.
    let result = tokio::select! {
        biased;
        done = run => match done {
            Ok(r) => r,
            Err(e) => Err(ItemError::Transient(format!("the method panicked: {e}"))),
        },
        () = deadline => Err(ItemError::Timeout(format!(
            "timed out after {} s (MAPI_JOB_ITEM_TIMEOUT_S)",
            state.config.jobs.item_timeout.as_secs()
        ))),
    };
    let took = state.clock.now().since(started);
    let duration_ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
    let last = attempt >= state.config.jobs.item_max_attempts;
    let end = match result {
        Ok(v) => End::Succeeded(v),
        Err(ItemError::Transient(m) | ItemError::Timeout(m)) if !last => {
            let outcome = Attempted::Retrying.as_str();
            let line = log_line(
                &state,
                json!({"round": round, "attempt": attempt, "outcome": outcome, "duration_ms": duration_ms, "error": m}),
            );
            append(&state, &layout::log(&base, idx), &ndjson(&[line])).await?;
            return Err(ApiError::new(
                ProblemCode::Unavailable,
                format!("item {idx}, attempt {attempt}: {m}"),
            ));
        }
        Err(e) => {
            End::Failed(ItemFailure { idx, round, kind: e.kind(), message: e.to_string(), attempts: attempt })
        }
    };
    let (attempted, handled, error) = match &end {
        End::Succeeded(_) => (Attempted::Succeeded, Handled::Succeeded, None),
        End::Failed(f) => (Attempted::Failed, Handled::Failed, Some(f.message.clone())),
    };
    let line = log_line(
        &state,
        json!({"round": round, "attempt": attempt, "outcome": attempted.as_str(), "duration_ms": duration_ms, "error": error}),
    );
    finish(&state, &job, Ending { idx, round, end, attempts: attempt, took, line }).await?;
    Ok(ok(handled))
}

/// One line of the item's log, stamped with the time; a field with no
/// value (no error) is left out.
fn log_line(state: &AppState, mut line: Value) -> Value {
    if let Value::Object(o) = &mut line {
        o.retain(|_, v| !v.is_null());
        o.insert("at".into(), json!(state.clock.now()));
    }
    line
}

/// How a delivery finished an item.
struct Ending {
    idx: u64,
    round: u32,
    end: End,
    attempts: u32,
    /// The method's time.
    took: Duration,
    /// The attempt's log line.
    line: Value,
}

/// Writes the item's end and its marker: in the marker when the end is
/// small, else as an object first (create-only: another delivery's may
/// stand, and then this delivery's line goes to the log object).
async fn finish(state: &AppState, job: &JobDoc, ending: Ending) -> Result<(), ApiError> {
    let Ending { idx, round, end, attempts, took, line } = ending;
    let base = base(job);
    let (outcome, result, error) = match end {
        End::Succeeded(v) => (ItemOutcome::Succeeded, Some(v), None),
        End::Failed(f) => (ItemOutcome::Failed, None, Some(f)),
    };
    let cost = mapi_metering::item_cost(took);
    let usage = ItemUsage {
        idx,
        round,
        attempts,
        duration_ms: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
        cost_micros: cost,
        outcome,
    };
    let mine = ItemEnd { round, outcome, result, error, usage, log: vec![line.clone()] };
    if serde_json::to_vec(&mine)?.len() <= layout::INLINE_END_MAX {
        let marked = mark(state, job, idx, &mine, Held::Inline).await?;
        return settle(state, &base, idx, marked, &line).await;
    }
    let (stands, is_mine) = write_end(state, &base, idx, mine).await?;
    if !is_mine {
        tracing::debug!(job = %job.id, idx, "another delivery's end stands");
        append(state, &layout::log(&base, idx), &ndjson(std::slice::from_ref(&line))).await?;
    }
    match mark(state, job, idx, &stands, Held::Object).await? {
        // The failure this success replaced was in its marker: its lines
        // go to the log object (the new end is the object's).
        Marked::Upgraded(old) => match old.end {
            Some(old) => append(state, &layout::log(&base, idx), &ndjson(&old.log)).await,
            None => Ok(()),
        },
        Marked::Created | Marked::Stood(_) => Ok(()),
    }
}

/// After an end written in its marker: keeps the log lines of the end that
/// did not stand.
async fn settle(
    state: &AppState,
    base: &str,
    idx: u64,
    marked: Marked,
    line: &Value,
) -> Result<(), ApiError> {
    match marked {
        Marked::Created => Ok(()),
        // Lines of an end in the old marker were merged in the commit; an
        // end object it superseded goes, its lines to the log object.
        Marked::Upgraded(old) if old.end.is_none() => remove_stale(state, base, idx, None).await,
        Marked::Upgraded(_) => Ok(()),
        // This delivery's own commit, whose answer was lost, holds its line.
        Marked::Stood(m) if m.end.as_ref().is_some_and(|e| e.log.contains(line)) => Ok(()),
        Marked::Stood(m) => {
            tracing::debug!(job = %m.job, idx, "another delivery's end stands");
            append(state, &layout::log(base, idx), &ndjson(std::slice::from_ref(line))).await
        }
    }
}

/// Makes the item's marker from `end` (held in the marker, or the end
/// object that stands) and commits what `mapi_jobs::commands::mark`
/// decides: created once, with the job's counts, the item's charge and its
/// window slot; a failure upgraded by a success; or another marker stands.
async fn mark(
    state: &AppState,
    job: &JobDoc,
    idx: u64,
    end: &ItemEnd,
    held: Held,
) -> Result<Marked, ApiError> {
    // Before the time the ledger entry is dated by: its rollup counts it.
    state.rollups_started().await?;
    let now = state.clock.now();
    let m = JobItemDoc {
        job: job.id.clone(),
        tenant: job.tenant.clone(),
        project: job.project.clone(),
        idx,
        outcome: end.outcome,
        round: end.usage.round,
        attempts: end.usage.attempts,
        duration_ms: end.usage.duration_ms,
        cost_micros: end.usage.cost_micros,
        at: now,
        end: (held == Held::Inline).then(|| InlineEnd::from(end)),
    };
    // The item's charge: what its marker records, once per item and round.
    let payer =
        mapi_metering::Payer { tenant: &job.tenant, project: &job.project, token: job.token.as_deref() };
    let charge = mapi_metering::item(&payer, (&job.id, idx, m.round), (m.duration_ms, m.cost_micros), now);
    let kept = commands::kept_id(job, &m);
    let (m_ref, charge, kept) = (&m, &charge, &kept);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let existing = tx_get::<JobItemDoc>(&mut tx, &JobItemDoc::id_of(&m_ref.job, m_ref.idx)).await?;
        let kept = match (&existing, kept) {
            (None, Some(id)) => tx_get::<JobItemHistoryDoc>(&mut tx, id).await?,
            _ => None,
        };
        let (step, marked) = commands::mark(MarkRead { existing, kept }, m_ref.clone(), charge.clone());
        step.write(&mut tx)?;
        Ok(tx.finish(marked))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_keep_their_wire_strings() {
        let answers = [
            (Handled::NoJob, "no_job"),
            (Handled::NoItem, "no_item"),
            (Handled::Done, "done"),
            (Handled::Recovered, "recovered"),
            (Handled::Cancelled, "cancelled"),
            (Handled::Succeeded, "succeeded"),
            (Handled::Failed, "failed"),
        ];
        for (outcome, wire) in answers {
            let body = serde_json::to_value(Outcome { outcome }).expect("answer");
            assert_eq!(body, json!({ "outcome": wire }));
        }
        let lines = [
            (Attempted::Cancelled, "cancelled"),
            (Attempted::Retrying, "retrying"),
            (Attempted::Succeeded, "succeeded"),
            (Attempted::Failed, "failed"),
        ];
        for (attempted, wire) in lines {
            assert_eq!(attempted.as_str(), wire);
        }
    }
}
