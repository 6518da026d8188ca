//! `push-events`: `POST /internal/events`, where Pub/Sub pushes the event
//! lines that running containers print (locally, the executor's log
//! forwarder pushes them in the same envelope).
//!
//! The order of checks: the push's credential, before the body is read
//! (Google's OIDC token of the push service account, or locally the internal
//! token: [`auth`]); then the envelope and its subscription; then the
//! message (base64 LogEntry, `jsonPayload.mapi_event`, the execution label);
//! then the event's HMAC under its attempt's key and whether the attempt has
//! ended; then, in one transaction, deduplication on (run, attempt, seq), the
//! execution, and the merge.
//!
//! Only the execution that took an attempt's bootstrap holds its key, so a
//! verified event names the attempt's execution: an attempt with no handle
//! yet (the submit's answer was lost) or whose recorded execution never
//! spoke (a duplicate that found no bootstrap) takes the speaker as its
//! execution ([`mapi_lifecycle::commands::adopt_speaker`]), so nothing
//! submits the work twice and what ran is what is polled and metered.
//!
//! A refused credential or subscription answers 401/403, which Pub/Sub
//! retries. Every answer to an authenticated push from an accepted
//! subscription is 200, including for events that are malformed, forged,
//! replayed or late: Pub/Sub redelivers any other answer, and a poison
//! message must not loop. Such events change nothing, are counted on
//! `/metrics` and logged; forged, replayed and late ones are also audited.

pub mod auth;

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use mapi_events::progress::Progress;
use mapi_events::pubsub::PushEnvelope;
use mapi_executor::ExecutionHandle;
use mapi_identity::{Audit, audit};
use mapi_lifecycle::RunDoc;
use mapi_lifecycle::commands::{self, Speaker};
use mapi_metrics::{Metrics, Rejection, Violation};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, ProblemCode, RawBody};
use mapi_schema::{AttemptDoc, EventSeenDoc, Outcome, ProgressDoc, SuiteRunDoc, tx_create, tx_get, tx_put};
use mapi_store::transact;
use serde::Serialize;

use crate::auth::{Authenticated, PushAuth, PushState};

/// The route Pub/Sub pushes to.
pub const EVENTS_PATH: &str = "/internal/events";

/// The push route, with push authentication as `state`'s configuration sets it.
pub fn router(state: AppState) -> Router {
    let auth = PushAuth::from_config(&state.config, state.clock.clone(), state.metrics.clone());
    Router::new().route(EVENTS_PATH, post(push)).with_state(PushState { app: state, auth: Arc::new(auth) })
}

/// What happened to a pushed event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Disposition {
    Applied,
    Duplicate,
    Malformed,
    /// An event of an executor suite's run (`POST /v1/admin/executors/{name}/verify`).
    SuiteRun,
    UnknownAttempt,
    BadSignature,
    WrongExecution,
    AttemptEnded,
}

impl Disposition {
    /// The sandbox violation this disposition counts as, if it is one.
    pub fn violation(self) -> Option<Violation> {
        match self {
            Disposition::UnknownAttempt => Some(Violation::UnknownAttempt),
            Disposition::BadSignature => Some(Violation::BadSignature),
            Disposition::WrongExecution => Some(Violation::WrongExecution),
            Disposition::AttemptEnded => Some(Violation::AttemptEnded),
            Disposition::Applied
            | Disposition::Duplicate
            | Disposition::Malformed
            | Disposition::SuiteRun => None,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Ack {
    pub disposition: Disposition,
}

fn ack(metrics: &Metrics, d: Disposition, detail: &str) -> Json<Ack> {
    if let Some(kind) = d.violation() {
        Metrics::count(&metrics.sandbox_violations, kind);
        tracing::warn!(kind = kind.as_str(), detail, "sandbox violation: event ignored");
    }
    match d {
        Disposition::Applied => {
            metrics.events_applied.inc();
        }
        Disposition::Duplicate => {
            metrics.events_duplicate.inc();
        }
        Disposition::Malformed => {
            Metrics::count(&metrics.push_rejected, Rejection::Malformed);
            tracing::warn!(detail, "malformed push acknowledged unread");
        }
        Disposition::SuiteRun => tracing::debug!(detail, "an executor suite's event, acknowledged"),
        // Counted above, as sandbox violations.
        Disposition::UnknownAttempt
        | Disposition::BadSignature
        | Disposition::WrongExecution
        | Disposition::AttemptEnded => {}
    };
    Json(Ack { disposition: d })
}

/// Audits an event that was refused (forged, replayed, late), in its run's
/// tenant when the attempt is known.
async fn refused(
    state: &AppState,
    d: Disposition,
    run: &mapi_domain::RunId,
    attempt: Option<&AttemptDoc>,
    detail: &str,
) {
    let kind = serde_json::to_value(d).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    let mut entry = Audit::internal("event.refused", format!("runs/{run}"))
        .outcome(Outcome::Denied, ProblemCode::Forbidden)
        .detail(format!("{kind}: {detail}"));
    if let Some(a) = attempt {
        entry = entry.tenant(&a.tenant).project(&a.project);
    }
    audit(state, entry).await;
}

async fn push(
    State(PushState { app: state, auth }): State<PushState>,
    pusher: Authenticated,
    RawBody(body): RawBody,
) -> Result<Json<Ack>, ApiError> {
    let m = &state.metrics;
    let envelope = match PushEnvelope::parse(&body) {
        Ok(e) => e,
        Err(e) => return Ok(ack(m, Disposition::Malformed, &e.to_string())),
    };
    auth.check_subscription(pusher, &envelope.subscription)?;
    let delivered = match envelope.open() {
        Ok(d) => d,
        Err(e) => return Ok(ack(m, Disposition::Malformed, &e.to_string())),
    };
    let (run, attempt_no, _task, seq) = match mapi_events::peek_ids(&delivered.event) {
        Ok(ids) => ids,
        Err(e) => return Ok(ack(m, Disposition::Malformed, &e.to_string())),
    };
    let attempt_id = AttemptDoc::id_of(&run, attempt_no);
    let attempt: Option<AttemptDoc> = mapi_schema::get(&*state.store, &attempt_id).await?;
    let Some(attempt) = attempt else {
        if mapi_schema::get::<SuiteRunDoc>(&*state.store, run.as_str()).await?.is_some() {
            return Ok(ack(m, Disposition::SuiteRun, &attempt_id));
        }
        refused(&state, Disposition::UnknownAttempt, &run, None, &attempt_id).await;
        return Ok(ack(m, Disposition::UnknownAttempt, &attempt_id));
    };
    let key = mapi_events::AttemptKey::from_hex(&attempt.event_key)
        .map_err(|e| ApiError::internal_from(format!("attempt {attempt_id} has a bad key"), e))?;
    let event = match mapi_events::verify(&delivered.event, &key) {
        Ok(e) => e,
        Err(e) => {
            refused(&state, Disposition::BadSignature, &run, Some(&attempt), &e.to_string()).await;
            return Ok(ack(m, Disposition::BadSignature, &format!("{attempt_id}: {e}")));
        }
    };
    if attempt.finalized {
        refused(&state, Disposition::AttemptEnded, &run, Some(&attempt), "the attempt has ended").await;
        return Ok(ack(m, Disposition::AttemptEnded, &attempt_id));
    }
    let now = state.clock.now();
    let seen = EventSeenDoc {
        run: run.clone(),
        tenant: attempt.tenant.clone(),
        project: attempt.project.clone(),
        attempt: attempt_no,
        seq,
        at: now,
    };
    let speaker = delivered.execution_name.map(ExecutionHandle);
    let (seen, attempt, event, speaker) = (&seen, &attempt, &event, &speaker);
    let (disposition, step) = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        // The marker, the attempt (re-read: the meter may have finalized
        // meanwhile) and its progress, in one read.
        let id = AttemptDoc::id_of(&attempt.run, attempt.attempt);
        let keys = [
            mapi_schema::key::<EventSeenDoc>(&mapi_schema::Doc::doc_id(seen))?,
            mapi_schema::key::<AttemptDoc>(&id)?,
            mapi_schema::key::<ProgressDoc>(&id)?,
        ];
        let [seen_doc, current, stored] =
            <[Option<mapi_store::Document>; 3]>::try_from(tx.get_all(&keys).await?)
                .map_err(|_| ApiError::internal("a read of three documents answered another number"))?;
        if seen_doc.is_some() {
            return Ok(tx.finish((Disposition::Duplicate, None)));
        }
        let Some(current) = current.map(|d| d.decode::<AttemptDoc>()).transpose()?.filter(|a| !a.finalized)
        else {
            return Ok(tx.finish((Disposition::AttemptEnded, None)));
        };
        let step = match speaker {
            Some(speaker) if current.handle.as_ref() != Some(speaker) => {
                let run = tx_get::<RunDoc>(&mut tx, attempt.run.as_str()).await?;
                match commands::adopt_speaker(run, current, speaker, stored.is_some(), now)? {
                    Speaker::Stray => return Ok(tx.finish((Disposition::WrongExecution, None))),
                    Speaker::Adopted(step) => {
                        step.write(&mut tx)?;
                        Some(step)
                    }
                }
            }
            _ => None,
        };
        let mut progress =
            stored.map(|d| d.decode::<ProgressDoc>()).transpose()?.unwrap_or_else(|| ProgressDoc {
                run: attempt.run.clone(),
                tenant: attempt.tenant.clone(),
                project: attempt.project.clone(),
                attempt: attempt.attempt,
                progress: Progress::new(attempt.task_count),
                updated_at: now,
            });
        progress.progress.apply(event);
        progress.updated_at = now;
        tx_put(&mut tx, &progress)?;
        tx_create(&mut tx, seen)?;
        Ok(tx.finish((Disposition::Applied, step)))
    })
    .await?;
    if let Some(step) = &step {
        step.committed(&state.metrics);
        let _ = mapi_lifecycle::carry_out(&step.follow_ups, state.outbox()).await;
    }
    match disposition {
        Disposition::AttemptEnded => {
            refused(&state, disposition, &run, Some(attempt), "the attempt ended meanwhile").await;
        }
        Disposition::WrongExecution => {
            let from = speaker.as_ref().map_or("", |h| h.0.as_str());
            refused(&state, disposition, &run, Some(attempt), &format!("from {from}")).await;
        }
        _ => {}
    }
    Ok(ack(m, disposition, &attempt_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A violation's metric label is its disposition's wire name.
    #[test]
    fn violations_are_labelled_by_their_disposition() {
        let all = [
            Disposition::Applied,
            Disposition::Duplicate,
            Disposition::Malformed,
            Disposition::UnknownAttempt,
            Disposition::BadSignature,
            Disposition::WrongExecution,
            Disposition::AttemptEnded,
        ];
        let mut violations = 0;
        for d in all {
            let wire = serde_json::to_value(d).expect("disposition");
            if let Some(kind) = d.violation() {
                assert_eq!(wire.as_str(), Some(kind.as_str()), "{d:?}");
                violations += 1;
            }
        }
        assert_eq!(violations, Violation::ALL.len());
        assert_eq!(
            serde_json::to_value(Disposition::Malformed).expect("wire"),
            Rejection::Malformed.as_str()
        );
    }
}
