//! The one verdict on an attempt whose execution the executor reports:
//! [`mapi_domain::classify`] reads the report, [`mapi_domain::decide`]
//! turns it into the run's next step, given what the platform knows
//! besides the report. The reconcile tick asks it to know whether to
//! finalize; the meter asks it again, inside the finalizing transaction.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use mapi_domain::{
    AttemptFacts, ExecutionStatus, OutputsCompared, RetryPolicy, Timestamp, Verdict, classify, decide,
};
use mapi_events::progress::Written;
use mapi_objects::ObjectMeta;
use mapi_schema::{AttemptDoc, ProgressDoc, layout};

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
/// run, the intent row, the merged events and, once listed, the outputs
/// stored under the attempt's directory (`stored`). The complete event is
/// overdue once `grace` has passed since the execution was first seen
/// finished.
pub fn facts(
    run: &RunDoc,
    row: &AttemptDoc,
    progress: Option<&ProgressDoc>,
    stored: Option<&[ObjectMeta]>,
    now: Timestamp,
    grace: Duration,
) -> AttemptFacts {
    let dir = layout::attempt_dir(run.tenant(), run.project(), run.id(), row.attempt);
    let written = progress.map(|p| p.progress.written()).unwrap_or_default();
    AttemptFacts {
        outputs: stored.map_or(OutputsCompared::Same, |stored| compare_outputs(&dir, stored, &written)),
        class: row.class,
        oom_retried: run.oom_retried(),
        infra_retries: run.infra_retries(),
        cancel_requested: run.cancel_requested(),
        complete_seen: progress.is_some_and(|p| p.progress.complete()),
        event_grace_over: row.finished_seen_at.is_some_and(|t| t + grace <= now),
        error_message: progress.and_then(|p| p.progress.error().map(str::to_owned)),
    }
}

/// Generation verification: how the outputs stored under `attempt_dir`
/// compare with what the attempt's tasks reported writing (`written`, by
/// the name a run's view shows). An output must be stored at exactly the
/// generation and size its task's write was answered with (the size alone
/// where the task found it written by an earlier try); a reported output
/// that is not stored differs too. An output stored that no report names
/// is [`OutputsCompared::Unreported`] when nothing else differs: its report
/// may still be on its way. At most three differences are named.
pub fn compare_outputs(
    attempt_dir: &str,
    stored: &[ObjectMeta],
    written: &BTreeMap<String, Written>,
) -> OutputsCompared {
    let mut found = Vec::new();
    let mut unreported = Vec::new();
    let mut seen = BTreeSet::new();
    for meta in stored {
        let Some(name) = layout::output_name(attempt_dir, meta.key.as_str()) else { continue };
        let (generation, size) = (meta.generation.0, meta.size);
        match written.get(&name) {
            None => unreported.push(format!("`{name}` is stored but no task reported writing it")),
            Some(w) if w.generation.is_some_and(|g| g != generation) => found.push(format!(
                "`{name}` is generation {generation}, its task wrote generation {}",
                w.generation.unwrap_or_default()
            )),
            Some(w) if w.size != size => {
                found.push(format!("`{name}` holds {size} bytes, its task wrote {}", w.size))
            }
            Some(_) => {}
        }
        seen.insert(name);
    }
    found.extend(
        written.keys().filter(|n| !seen.contains(*n)).map(|n| format!("`{n}` its task wrote is missing")),
    );
    let late = found.is_empty();
    found.extend(unreported);
    let more = found.len().saturating_sub(3);
    found.truncate(3);
    if more > 0 {
        found.push(format!("and {more} more"));
    }
    match (found.is_empty(), late) {
        (true, _) => OutputsCompared::Same,
        (false, true) => OutputsCompared::Unreported(found.join("; ")),
        (false, false) => OutputsCompared::Differ(found.join("; ")),
    }
}

/// The run's next step after the execution reported `status`; `None`
/// while there is nothing to decide yet (the execution runs, or its
/// complete event is still within its grace). `stored` is the listing of
/// the attempt's outputs, which a succeeded attempt is checked against
/// ([`needs_outputs`] says when it must be given).
pub fn verdict(
    run: &RunDoc,
    row: &AttemptDoc,
    progress: Option<&ProgressDoc>,
    stored: Option<&[ObjectMeta]>,
    status: &ExecutionStatus,
    now: Timestamp,
    rules: Rules,
) -> Option<Decided> {
    let outcome = classify(status)?;
    match decide(&outcome, &facts(run, row, progress, stored, now, rules.event_grace), rules.retry) {
        Verdict::Wait => None,
        v => Some(Decided(v)),
    }
}

/// Whether the verdict on `row` needs the listing of its outputs: the
/// execution succeeded, every task completed, and the attempt is the run's
/// current one (only then can the run succeed with them).
pub fn needs_outputs(
    run: &RunDoc,
    row: &AttemptDoc,
    progress: Option<&ProgressDoc>,
    status: &ExecutionStatus,
) -> bool {
    *status == ExecutionStatus::Succeeded
        && progress.is_some_and(|p| p.progress.complete())
        && run.is_current(row.attempt)
}
