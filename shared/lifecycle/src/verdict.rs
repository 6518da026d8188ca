//! The one verdict on an attempt whose execution the executor reports:
//! [`mapi_domain::classify`] reads the report, [`mapi_domain::decide`]
//! turns it into the run's next step, given what the platform knows
//! besides the report. The reconcile tick asks it to know whether to
//! finalize; the meter asks it again, inside the finalizing transaction.

use std::time::Duration;

use mapi_domain::{AttemptFacts, ExecutionStatus, RetryPolicy, Timestamp, Verdict, classify, decide};
use mapi_schema::{AttemptDoc, ProgressDoc};

use crate::RunDoc;

/// The settings a verdict depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// How long the complete event may lag behind a succeeded execution.
    pub event_grace: Duration,
    pub retry: RetryPolicy,
}

/// A verdict that is not [`Verdict::Wait`]: what an attempt is finalized with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decided(pub(crate) Verdict);

impl Decided {
    pub fn verdict(&self) -> &Verdict {
        &self.0
    }
}

/// What the outcome table needs besides the executor's report: from the
/// run, the intent row and the merged events. The complete event is
/// overdue once `grace` has passed since the execution was first seen
/// finished.
pub fn facts(
    run: &RunDoc,
    row: &AttemptDoc,
    progress: Option<&ProgressDoc>,
    now: Timestamp,
    grace: Duration,
) -> AttemptFacts {
    AttemptFacts {
        class: row.class,
        oom_retried: run.oom_retried(),
        infra_retries: run.infra_retries(),
        cancel_requested: run.cancel_requested(),
        complete_seen: progress.is_some_and(|p| p.progress.complete()),
        event_grace_over: row.finished_seen_at.is_some_and(|t| t + grace <= now),
        error_message: progress.and_then(|p| p.progress.error().map(str::to_owned)),
    }
}

/// The run's next step after the execution reported `status`; `None`
/// while there is nothing to decide yet (the execution runs, or its
/// complete event is still within its grace).
pub fn verdict(
    run: &RunDoc,
    row: &AttemptDoc,
    progress: Option<&ProgressDoc>,
    status: &ExecutionStatus,
    now: Timestamp,
    rules: Rules,
) -> Option<Decided> {
    let outcome = classify(status)?;
    match decide(&outcome, &facts(run, row, progress, now, rules.event_grace), rules.retry) {
        Verdict::Wait => None,
        v => Some(Decided(v)),
    }
}
