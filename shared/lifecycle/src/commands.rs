//! Every change of a run's state, each one pure command over the documents
//! a transaction read. A command returns a [`Step`]: the writes (in the
//! order the commit must buffer them), the typed [`Transition`] and the
//! follow-ups to carry out after the commit. Handlers read, call a command,
//! buffer its writes with [`Step::write`], commit, then call
//! [`Step::committed`] (the transition metric, in one place) and carry out
//! [`Step::follow_ups`].
//!
//! | command | from → to | reason |
//! |---|---|---|
//! | [`admit`] | · → queued | submitted |
//! | [`claim`] | queued → dispatching | intent_written |
//! | [`record_execution`] | dispatching → running | execution_created, adopted |
//! | [`adopt_speaker`] | dispatching → running | adopted |
//! | [`requeue_throttled`] | dispatching → queued | throttled |
//! | [`refuse_placement`] | queued, dispatching → failed | placement_refused |
//! | [`request_cancel`] | queued → cancelled; dispatching, running → cancelling | cancel_requested |
//! | [`finalize`] | running, cancelling → a final state, or → queued for a retry | the verdict's |
//!
//! Before the meter finalizes an attempt it never heard from, [`unheard`]
//! makes sure the execution it records is the one that did the work.
//! Besides the state: [`leftovers_forgotten`] records that an ended run's
//! executions were forgotten (run retention).

use std::time::Duration;

use mapi_domain::{
    ErrorCode, ExecutionStatus, Nonce, Reason, ResourceClass, RunError, RunId, RunState, Timestamp,
    Transition, TransitionError, Verdict,
};
use mapi_executor::{ExecutionHandle, ExecutionInfo};
use mapi_metrics::Metrics;
use mapi_quota::counters::{self, Bumps, Sharded};
use mapi_schema::{AttemptDoc, ModelVersionDoc, TakenUnheard, tx_create, tx_put};
use mapi_store::{StoreError, Txn};

use crate::run::{NewRun, RunDoc};
use crate::verdict::Decided;

/// One buffered write of a step.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Write {
    CreateRun(Box<RunDoc>),
    PutRun(Box<RunDoc>),
    PutAttempt(Box<AttemptDoc>),
    /// The attempt's charge: its ledger entry (created once), rollups and counters.
    Charge(Box<mapi_metering::Charge>),
    CreateVersion(Box<ModelVersionDoc>),
    Bumps(Bumps),
}

/// What to do after the commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FollowUp {
    /// Push the dispatch task of the run's (new) attempt.
    Dispatch { run: RunId, attempt: mapi_domain::AttemptNo },
    /// Ask the executor to stop this execution.
    CancelExecution(ExecutionHandle),
    /// Delete the bootstraps of a finalized attempt's tasks.
    RetireBootstraps { nonce: mapi_domain::Nonce, tasks: u32 },
}

impl FollowUp {
    /// The retirement of `row`'s bootstraps.
    pub fn retire(row: &AttemptDoc) -> FollowUp {
        FollowUp::RetireBootstraps { nonce: row.nonce.clone(), tasks: row.task_count }
    }
}

/// What a command decided: the writes, the transition, the follow-ups.
#[must_use = "a step does nothing until its writes are buffered and committed"]
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Step {
    pub(crate) writes: Vec<Write>,
    /// The run's change of state, if it changed.
    pub transition: Option<Transition>,
    pub follow_ups: Vec<FollowUp>,
}

impl Step {
    /// Buffers the step's writes in `tx`, in order.
    pub fn write(&self, tx: &mut Txn<'_>) -> Result<(), StoreError> {
        for w in &self.writes {
            match w {
                Write::CreateRun(run) => tx_create(tx, &**run)?,
                Write::PutRun(run) => tx_put(tx, &**run)?,
                Write::PutAttempt(a) => tx_put(tx, &**a)?,
                Write::Charge(c) => c.write(tx)?,
                Write::CreateVersion(v) => tx_create(tx, &**v)?,
                Write::Bumps(b) => b.apply(tx)?,
            }
        }
        Ok(())
    }

    /// The run as this step leaves it, if the step writes it.
    pub fn run(&self) -> Option<&RunDoc> {
        self.writes.iter().rev().find_map(|w| match w {
            Write::CreateRun(r) | Write::PutRun(r) => Some(&**r),
            _ => None,
        })
    }

    /// The attempt as this step leaves it, if the step writes it.
    pub fn attempt(&self) -> Option<&AttemptDoc> {
        self.writes.iter().rev().find_map(|w| match w {
            Write::PutAttempt(a) => Some(&**a),
            _ => None,
        })
    }

    /// Whether the step writes nothing.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// After the commit: counts the transition. The one place the run
    /// transition metric is emitted.
    pub fn committed(&self, metrics: &Metrics) {
        if let Some(t) = &self.transition {
            metrics.transition(t.from, t.to, t.reason);
        }
    }

    fn put_run(&mut self, run: RunDoc) {
        self.writes.push(Write::PutRun(Box::new(run)));
    }

    fn put_attempt(&mut self, attempt: AttemptDoc) {
        self.writes.push(Write::PutAttempt(Box::new(attempt)));
    }

    fn bumps(&mut self, bumps: Bumps) {
        self.writes.push(Write::Bumps(bumps));
    }
}

/// A new run: `queued`, holding `reservation`. The run is created (the
/// commit fails if its id exists).
pub fn admit(new: NewRun, reservation: Option<counters::Reservation>, now: Timestamp) -> Step {
    let run = RunDoc::new(new, reservation, now);
    let transition = run.history().first().cloned();
    let follow_ups = vec![FollowUp::Dispatch { run: run.id().clone(), attempt: run.attempt() }];
    Step { writes: vec![Write::CreateRun(Box::new(run))], transition, follow_ups }
}

/// Why a dispatch delivery has nothing to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    NoSuchRun,
    PastAttempt,
    HasExecution,
    NotQueued,
}

impl Skip {
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::NoSuchRun => "no such run",
            Skip::PastAttempt => "the run is past this attempt",
            Skip::HasExecution => "the attempt already has an execution",
            Skip::NotQueued => "the run is not queued",
        }
    }
}

/// The intent a dispatcher brings: made outside the transaction, which
/// may run more than once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Intent {
    pub nonce: Nonce,
    /// The attempt's event-signing key (hex).
    pub event_key: String,
    /// How long the dispatcher holds the attempt.
    pub lease: Duration,
    /// The GPUs the executor gives each task of a GPU-class execution.
    pub gpus: u32,
}

/// What a dispatch delivery may do with its attempt.
#[derive(Debug)]
pub enum Claim {
    Nothing(Skip),
    /// Another dispatcher holds the attempt for this long.
    Busy(Duration),
    /// The attempt is this delivery's. `fresh` when it wrote the intent
    /// row; otherwise an earlier delivery may have made an execution, so
    /// it adopts by nonce before it submits.
    Mine {
        step: Step,
        attempt: Box<AttemptDoc>,
        run: Box<RunDoc>,
        fresh: bool,
    },
}

/// Claims `attempt` of a run for a dispatcher: writes the intent row and
/// moves the run to `dispatching`, or takes over an intent row whose
/// lease lapsed (a run sent back to the queue by throttling goes out again
/// with the same attempt and nonce).
pub fn claim(
    run: Option<RunDoc>,
    row: Option<AttemptDoc>,
    attempt: mapi_domain::AttemptNo,
    intent: &Intent,
    now: Timestamp,
) -> Result<Claim, TransitionError> {
    let Some(mut run) = run else { return Ok(Claim::Nothing(Skip::NoSuchRun)) };
    if !run.is_current(attempt) {
        return Ok(Claim::Nothing(Skip::PastAttempt));
    }
    let mut step = Step::default();
    let (row, fresh) = match row {
        Some(a) if a.handle.is_some() => return Ok(Claim::Nothing(Skip::HasExecution)),
        Some(a) if a.lease_until > now => return Ok(Claim::Busy(a.lease_until.since(now))),
        Some(mut a) => {
            a.lease_until = now + intent.lease;
            (a, false)
        }
        None if run.state() != RunState::Queued => return Ok(Claim::Nothing(Skip::NotQueued)),
        None => {
            let placed =
                mapi_methods::registry::dl::place(run.method(), run.params(), run.class(), intent.gpus);
            let mut row = new_row(&run, intent, now);
            row.gpus = Some(placed.gpus);
            run.placed(&placed, row.attempt);
            (row, true)
        }
    };
    if run.state() == RunState::Queued {
        step.transition = Some(run.transition(RunState::Dispatching, Reason::IntentWritten, now)?);
        step.put_run(run.clone());
    }
    step.put_attempt(row.clone());
    Ok(Claim::Mine { step, attempt: Box::new(row), run: Box::new(run), fresh })
}

fn new_row(run: &RunDoc, intent: &Intent, now: Timestamp) -> AttemptDoc {
    AttemptDoc {
        run: run.id().clone(),
        tenant: run.tenant().clone(),
        project: run.project().clone(),
        attempt: run.attempt(),
        nonce: intent.nonce.clone(),
        class: run.class(),
        task_count: run.task_count(),
        event_key: intent.event_key.clone(),
        created_at: now,
        lease_until: now + intent.lease,
        handle: None,
        submitted_at: None,
        finished_seen_at: None,
        bootstrapped_at: None,
        taken_unheard: None,
        retiring_at: None,
        started: None,
        finished: None,
        status: None,
        finalized: false,
        reused: Vec::new(),
        gpus: None,
    }
}

/// Moves the lease of an attempt not yet submitted to `until` (never back).
pub fn extend_lease(mut row: AttemptDoc, until: Timestamp) -> Step {
    let mut step = Step::default();
    if row.handle.is_none() && row.lease_until < until {
        row.lease_until = until;
        step.put_attempt(row);
    }
    step
}

/// Every task's bootstrap of `row` is written: from now on none is written
/// again (one that is missing was taken). `reused`: the children whose
/// bootstraps hand them an earlier attempt's results.
pub fn bootstrapped(mut row: AttemptDoc, now: Timestamp, reused: Vec<u32>) -> Step {
    let mut step = Step::default();
    if row.bootstrapped_at.is_none() && !row.finalized {
        row.bootstrapped_at = Some(now);
        row.reused = reused;
        step.put_attempt(row);
    }
    step
}

/// Lets the next delivery take an attempt not yet submitted at once (it
/// adopts by nonce first).
pub fn release_lease(mut row: AttemptDoc, now: Timestamp) -> Step {
    let mut step = Step::default();
    if row.handle.is_none() {
        row.lease_until = now;
        step.put_attempt(row);
    }
    step
}

/// The executor named the attempt's execution (it made it, or it was
/// found by nonce): the intent row keeps the handle and the run goes to
/// `running`. A run cancelled meanwhile has the execution stopped.
/// Nothing happens when the row already has a handle.
pub fn record_execution(
    mut run: RunDoc,
    mut row: AttemptDoc,
    handle: &ExecutionHandle,
    reason: Reason,
    now: Timestamp,
) -> Result<Step, TransitionError> {
    let mut step = Step::default();
    if row.finalized {
        // The attempt ended while its submit was on its way: nothing would
        // meter this execution, so it is stopped, and the bootstraps the
        // submit wrote after the finalization retired theirs go too.
        if row.handle.as_ref() != Some(handle) {
            step.follow_ups.push(FollowUp::CancelExecution(handle.clone()));
        }
        step.follow_ups.push(FollowUp::retire(&row));
        return Ok(step);
    }
    if let Some(kept) = &row.handle {
        if kept != handle {
            // The attempt already has its execution (its worker spoke
            // first, or an earlier submit was adopted): a second one would
            // do the same work unmetered, so it is stopped.
            step.follow_ups.push(FollowUp::CancelExecution(handle.clone()));
        }
        return Ok(step);
    }
    row.handle = Some(handle.clone());
    row.submitted_at = Some(now);
    if run.state() == RunState::Dispatching && run.attempt() == row.attempt {
        step.transition = Some(run.transition(RunState::Running, reason, now)?);
        step.put_run(run.clone());
    } else if run.state() == RunState::Cancelling {
        step.follow_ups.push(FollowUp::CancelExecution(handle.clone()));
    }
    step.put_attempt(row);
    Ok(step)
}

/// A signed event came from `speaker`. Only the execution that took an
/// attempt's bootstrap holds its event key, so a verified event names the
/// execution doing the attempt's work:
/// - an attempt with no handle yet (the submit's answer was lost, or is
///   still on its way) takes the speaker as its execution, so no later
///   dispatch submits the work a second time;
/// - an attempt recording another execution from which no event was ever
///   applied (`heard` is false) moves to the speaker, and the recorded one
///   (a duplicate that found no bootstrap, or not yet started) is stopped.
///
/// An attempt that heard from the execution it records keeps it: the
/// speaker's event is refused. It is not stopped from here: its name comes
/// from the log entry, not from the signature, and it may be another
/// attempt's.
///
/// A speaker adopted while its run is cancelling is asked to stop too.
/// An attempt with no handle and no run (gone) takes nothing.
pub fn adopt_speaker(
    run: Option<RunDoc>,
    mut row: AttemptDoc,
    speaker: &ExecutionHandle,
    heard: bool,
    now: Timestamp,
) -> Result<Speaker, TransitionError> {
    let kept = match row.handle.clone() {
        None => {
            let Some(run) = run else { return Ok(Speaker::Stray) };
            return record_execution(run, row, speaker, Reason::Adopted, now).map(Speaker::Adopted);
        }
        Some(kept) if &kept == speaker => return Ok(Speaker::Adopted(Step::default())),
        Some(kept) => kept,
    };
    if heard {
        return Ok(Speaker::Stray);
    }
    let mut step = Step::default();
    row.handle = Some(speaker.clone());
    // What was seen of the recorded execution's end is not the speaker's.
    row.finished_seen_at = None;
    if run.is_some_and(|r| r.state() == RunState::Cancelling && r.is_current(row.attempt)) {
        step.follow_ups.push(FollowUp::CancelExecution(speaker.clone()));
    }
    step.put_attempt(row);
    step.follow_ups.push(FollowUp::CancelExecution(kept));
    Ok(Speaker::Adopted(step))
}

/// What [`adopt_speaker`] decided about an event's execution.
#[derive(Clone, Debug, PartialEq)]
pub enum Speaker {
    /// The speaker is (now) the attempt's execution: apply its event.
    Adopted(Step),
    /// Another execution is the attempt's, and spoke: refuse the event.
    Stray,
}

/// The executor kept answering 429, and a 429 made nothing: the run goes
/// back to the queue keeping its attempt and nonce, spending no
/// infrastructure retry (late, never failed). The lease is let go so the
/// next delivery takes the attempt at once. The run says why it waits (`why`) until it leaves
/// the queue again.
pub fn requeue_throttled(
    mut run: RunDoc,
    row: AttemptDoc,
    why: &str,
    now: Timestamp,
) -> Result<Step, TransitionError> {
    if row.handle.is_some() {
        return Ok(Step::default());
    }
    let current = run.state() == RunState::Dispatching && run.attempt() == row.attempt;
    let mut step = release_lease(row, now);
    if current {
        step.transition = Some(run.transition(RunState::Queued, Reason::Throttled, now)?);
        run.set_waiting(Some(crate::run::Waiting { reason: why.to_owned(), since: now }));
        step.put_run(run);
    }
    Ok(step)
}

/// Placement refused the attempt: the run fails with INFRA_ERROR, gives
/// back what it reserved, and its attempt is finalized (nothing ran) and
/// its bootstraps retired.
pub fn refuse_placement(
    mut run: RunDoc,
    mut row: AttemptDoc,
    why: &str,
    now: Timestamp,
) -> Result<Step, TransitionError> {
    let mut step = Step::default();
    if run.state().is_terminal() {
        return Ok(step);
    }
    let released = run.end_reservation();
    step.transition = Some(run.transition(RunState::Failed, Reason::PlacementRefused, now)?);
    run.set_error(Some(RunError { code: ErrorCode::InfraError, message: why.to_owned() }));
    row.finalized = true;
    step.bumps(released);
    step.follow_ups.push(FollowUp::retire(&row));
    step.put_attempt(row);
    step.put_run(run);
    Ok(step)
}

/// Why a cancel was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CancelError {
    #[error("run {run} already ended ({state}): nothing to cancel")]
    Ended { run: RunId, state: RunState },
    #[error(transparent)]
    Transition(#[from] TransitionError),
}

/// A cancel: a queued run ends at once (`cancelled`, its reservation given
/// back); a started one goes to `cancelling` and its execution is asked to
/// stop (the executor's report confirms it). A run already cancelling
/// writes nothing; its execution is asked again.
pub fn request_cancel(
    mut run: RunDoc,
    row: Option<&AttemptDoc>,
    now: Timestamp,
) -> Result<Step, CancelError> {
    let mut step = Step::default();
    let state = run.state();
    if state.is_terminal() {
        return Err(CancelError::Ended { run: run.id().clone(), state });
    }
    if state != RunState::Cancelling {
        let released = if state == RunState::Queued { run.end_reservation() } else { Bumps::default() };
        let to = if state == RunState::Queued { RunState::Cancelled } else { RunState::Cancelling };
        step.transition = Some(run.transition(to, Reason::CancelRequested, now)?);
        run.request_cancel();
        step.bumps(released);
    }
    let handle = row.filter(|a| a.attempt == run.attempt()).and_then(|a| a.handle.clone());
    if let (RunState::Cancelling, Some(handle)) = (run.state(), handle) {
        step.follow_ups.push(FollowUp::CancelExecution(handle));
    }
    if step.transition.is_some() {
        step.put_run(run);
    }
    Ok(step)
}

/// Records why a queued run is held back (`None`: nothing holds it now).
/// Written only when the reason changes, so a run held for hours by the
/// same thing keeps the time it began to wait; a run that left `queued`
/// is not marked.
pub fn mark_waiting(mut run: RunDoc, reason: Option<String>, now: Timestamp) -> Step {
    let mut step = Step::default();
    if run.state() != RunState::Queued || run.waiting().map(|w| &w.reason) == reason.as_ref() {
        return step;
    }
    run.set_waiting(reason.map(|reason| crate::run::Waiting { reason, since: now }));
    step.put_run(run);
    step
}

/// Renames, annotates or retags a run, in any state: `Err` says what to
/// fix. Neither the state nor `updated_at` moves (the sweeps order by it),
/// and an unchanged result writes nothing.
pub fn relabel(mut run: RunDoc, change: &mapi_api::labels::LabelChange) -> Result<Step, String> {
    let mut step = Step::default();
    let labels = change.apply(run.labels())?;
    if &labels != run.labels() {
        run.set_labels(labels);
        step.put_run(run);
    }
    Ok(step)
}

/// Records that what an ended run's executions left is gone (the run housekeeper had each one
/// forgotten): the run leaves the housekeeper's query, and its logs answer that they passed the
/// retention. Neither the state nor `updated_at` moves; a run that has not ended, or was
/// recorded so already, is not written.
pub fn leftovers_forgotten(mut run: RunDoc, now: Timestamp) -> Step {
    let mut step = Step::default();
    if !run.state().is_terminal() || run.leftovers_forgotten_at().is_some() {
        return step;
    }
    run.forget_leftovers(now);
    step.put_run(run);
    step
}

/// Marks whether a running attempt has gone quiet (informational only: the
/// executor, not the events, decides whether it is alive).
pub fn mark_stalled(mut run: RunDoc, stalled: bool) -> Step {
    let mut step = Step::default();
    if run.stalled() != stalled {
        run.set_stalled(stalled);
        step.put_run(run);
    }
    step
}

/// A retry that is not started: the run fails instead.
fn refuse_retry(code: ErrorCode, reason: Reason, message: String) -> Verdict {
    Verdict::Finalize { state: RunState::Failed, reason, error: Some(RunError { code, message }) }
}

/// A retry is admitted again: onto a larger class only up to the tenant's
/// largest class (`largest`), and against the limits its run was admitted
/// against (`refused` says which one its renewal would pass, when an
/// earlier commit found out). Any other verdict passes unchanged.
pub fn admit_retry(
    decided: Decided,
    attempt_class: ResourceClass,
    largest: Option<ResourceClass>,
    refused: Option<&str>,
) -> Decided {
    let Verdict::Retry { class, reason, .. } = *decided.verdict() else { return decided };
    Decided(match (largest, refused) {
        (Some(max), _) if class > attempt_class && class > max => refuse_retry(
            ErrorCode::ResourceExhausted,
            Reason::ResourceExhausted,
            format!(
                "the attempt ran out of memory on class {attempt_class}; class {class} is above the tenant's largest class {max}"
            ),
        ),
        (_, Some(why)) => refuse_retry(
            ErrorCode::QuotaExceeded,
            reason,
            format!("the attempt failed and its retry was not started: {why}"),
        ),
        _ => return decided,
    })
}

/// A fan-out parent's attempt whose children all succeeded but whose
/// results cannot be folded: the run fails, saying why.
pub fn fold_failed(why: &str) -> Decided {
    Decided(Verdict::Finalize {
        state: RunState::Failed,
        reason: Reason::MethodError,
        error: Some(RunError {
            code: ErrorCode::MethodError,
            message: format!("the children's results could not be folded: {why}"),
        }),
    })
}

/// Whether applying `verdict` makes the run `succeeded`: a run of a
/// model-producing method then needs its model version, sealed before the
/// commit (the caller knows the registry; this crate does not).
pub fn succeeds(run: &RunDoc, row: &AttemptDoc, decided: &Decided) -> bool {
    run.is_current(row.attempt)
        && matches!(decided.verdict(), Verdict::Finalize { state: RunState::Succeeded, .. })
}

/// The budget counters a retry's renewal must read (in the transaction,
/// before the commit's first write): none for any other verdict.
pub fn renewal_reads(run: &RunDoc, decided: &Decided) -> Vec<String> {
    match (decided.verdict(), run.reservation()) {
        (Verdict::Retry { .. }, Some(r)) if !r.holds.is_empty() => r.hold_counters(),
        _ => Vec::new(),
    }
}

/// Everything the finalization of an ended attempt reads.
#[derive(Debug)]
pub struct Ended<'a> {
    pub run: RunDoc,
    pub row: AttemptDoc,
    /// The executor's report of the execution.
    pub execution: &'a ExecutionInfo,
    /// From [`crate::verdict()`], after [`admit_retry`].
    pub verdict: Decided,
    /// The attempt's ledger entry exists (an earlier finalization charged it).
    pub ledger_seen: bool,
    /// The model version to create with a `succeeded` transition (sealed,
    /// and not stored yet); `None` for a method that fits no model.
    pub version: Option<&'a ModelVersionDoc>,
    /// The counters of [`renewal_reads`], as read.
    pub budgets: Vec<Sharded>,
    /// What a fan-out parent's run folded from its children (stored before
    /// the commit), recorded with a `succeeded` transition.
    pub aggregate: Option<&'a mapi_api::views::Aggregate>,
    pub now: Timestamp,
}

/// What the meter does first with an ended attempt none of whose events
/// was applied, see [`unheard`].
#[derive(Debug, Clone, PartialEq)]
pub enum Unheard {
    /// Finalize on the recorded execution's report.
    Finalize,
    /// Commit `step` (this delivery's claim on the retirement), retire
    /// the bootstraps (no execution can take one afterwards) and ask again
    /// with how many were already gone.
    Retire { step: Step },
    /// Another delivery holds the claim on retiring the bootstraps: ask
    /// again then.
    Retiring { until: Timestamp },
    /// An execution took the work and has not spoken: commit `step` (what
    /// the wait has seen so far) and wait for its events until then.
    Wait { until: Timestamp, step: Step },
    /// The wait and its last call are over and the taker never spoke:
    /// look for it among the executor's executions of the attempt's nonce
    /// ([`silent_taker`]) before finalizing.
    Silent,
}

/// How long the meter waits for the execution that took an attempt's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TakenWait {
    /// How long one delivery's claim on retiring the bootstraps holds.
    pub retire_lease: Duration,
    /// From when the work was found taken: the taker may run for the
    /// run's whole timeout and the executor's margin past it.
    pub bound: Duration,
    /// After a delivery first finds the bound passed: the event grace.
    pub last_call: Duration,
}

/// Long enough for one delivery to delete an attempt's bootstraps.
pub const RETIRE_LEASE: Duration = Duration::from_secs(60);

impl TakenWait {
    pub fn new(run: &RunDoc, event_grace: Duration, backstop_margin: Duration) -> TakenWait {
        let bound = Duration::from_secs(u64::from(run.timeout_s())) + backstop_margin + event_grace;
        TakenWait { retire_lease: RETIRE_LEASE, bound, last_call: event_grace }
    }
}

/// Before an attempt is finalized on the report of the execution it
/// records, that execution must be the one that did the work. When no
/// event was heard (`heard` false) and bootstraps were written, another
/// execution may have taken them: a twin the executor started, or a taker
/// the executor has already forgotten, while the recorded one found
/// nothing and exited. The taker's first event repoints the attempt
/// ([`adopt_speaker`]), so:
///
/// 1. the bootstraps are retired first (then nothing more can start) by
///    one delivery at a time (a claim with a short lease: a bootstrap
///    another delivery deleted would look taken); `gone` is how many were
///    already gone (`None`: not retired yet);
/// 2. none gone: nobody did the work, finalize;
/// 3. some gone: wait for the taker's events for the bound, counted from
///    the finding (kept in the row, so later deliveries do not retire
///    again);
/// 4. then one last call: a pause of the whole platform (its clock jumped,
///    or it was down) makes every wait look over at once, and the events
///    it held back arrive just after it, so the attempt is finalized only
///    one grace after the first delivery that found the bound passed.
///
/// A taker still silent after that (it died before speaking, or its
/// events are lost) is [`Unheard::Silent`]: the executor may still know
/// it by the attempt's nonce ([`silent_taker`]).
pub fn unheard(row: &AttemptDoc, heard: bool, gone: Option<u32>, wait: TakenWait, now: Timestamp) -> Unheard {
    if heard || row.bootstrapped_at.is_none() || row.finalized {
        return Unheard::Finalize;
    }
    let mut row = row.clone();
    let mut step = Step::default();
    let taken = match (row.taken_unheard.clone(), gone) {
        (Some(taken), _) => taken,
        (None, None) => match row.retiring_at {
            Some(at) if now < at + wait.retire_lease => {
                return Unheard::Retiring { until: at + wait.retire_lease };
            }
            _ => {
                row.retiring_at = Some(now);
                step.put_attempt(row);
                return Unheard::Retire { step };
            }
        },
        (None, Some(0)) => return Unheard::Finalize,
        (None, Some(_)) => TakenUnheard { found_at: now, last_call_at: None },
    };
    let until = match taken.last_call_at {
        _ if now < taken.found_at + wait.bound => taken.found_at + wait.bound,
        None => now + wait.last_call,
        Some(at) if now < at + wait.last_call => at + wait.last_call,
        Some(_) => return Unheard::Silent,
    };
    let last_call_at = taken.last_call_at.or((now >= taken.found_at + wait.bound).then_some(now));
    let noted = TakenUnheard { last_call_at, ..taken };
    if row.taken_unheard.as_ref() != Some(&noted) {
        row.taken_unheard = Some(noted);
        step.put_attempt(row);
    }
    Unheard::Wait { until, step }
}

/// After a silent wait ([`Unheard::Silent`]): which execution the attempt
/// is finalized on. What ran must be what is polled and metered, so when
/// the recorded execution shows it did nothing (it exited cleanly, as a
/// duplicate that found no bootstrap does; it was stopped before it
/// started; or the executor forgot it) and another execution of the
/// attempt's nonce started and did not exit cleanly (it failed, was
/// stopped, or still runs), that one took the work and stayed silent (it
/// died before speaking, or its events are late): the attempt is
/// repointed to it (the oldest such) and the returned step writes that;
/// the reconciler then finalizes on its end. `None`: finalize on the
/// recorded one.
pub fn silent_taker(row: &AttemptDoc, recorded: &ExecutionInfo, listed: &[ExecutionInfo]) -> Option<Step> {
    let clean =
        |e: &ExecutionInfo| matches!(e.status, ExecutionStatus::Succeeded | ExecutionStatus::NotFound);
    let never_started = |e: &ExecutionInfo| e.started.is_none() && e.status != ExecutionStatus::Running;
    if !clean(recorded) && !never_started(recorded) {
        return None;
    }
    let taker = listed
        .iter()
        .filter(|e| e.nonce.as_ref() == Some(&row.nonce) && row.handle.as_ref() != Some(&e.handle))
        .filter(|e| !clean(e) && !never_started(e))
        .min_by(|a, b| (a.created, &a.handle).cmp(&(b.created, &b.handle)))?;
    let mut row = row.clone();
    row.handle = Some(taker.handle.clone());
    row.finished_seen_at = None;
    let mut step = Step::default();
    step.put_attempt(row);
    Some(step)
}

/// What became of the verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The run moved (the step's transition).
    Moved,
    /// The run has moved past the attempt, or ended: the attempt was only
    /// charged and finalized.
    MovedPast,
    /// The verdict is not a legal transition from the run's state: the
    /// run is left as it is (failing would redeliver the same verdict
    /// forever), still holding what it reserved.
    Illegal(TransitionError),
}

/// What a finalization did, besides its step.
#[derive(Debug)]
pub struct Finalized {
    pub step: Step,
    pub applied: Applied,
    /// The attempt's charge, in micros.
    pub amount_micros: i64,
    /// The run's state after the step.
    pub state: RunState,
}

/// Finalizes an ended attempt: charges it once (the ledger entry and the
/// usage counters, in the same commit), marks the intent row finalized
/// (and retires its bootstraps, which only a later execution could take), and
/// applies the verdict to the run: a final state (with its model version
/// for `succeeded`, giving back the reservation), or the next attempt
/// (renewing the reservation for the new class, and dispatching it). An
/// attempt the run has moved past is charged and finalized only.
///
/// `Err(LimitReached)` when the retry's renewal would pass a limit: the
/// caller finalizes again with the retry refused ([`admit_retry`]).
pub fn finalize(ended: Ended<'_>) -> Result<Finalized, StoreError> {
    let Ended { mut run, mut row, execution, verdict, ledger_seen, version, budgets, aggregate, now } = ended;
    let mut step = Step::default();
    let wall = match (execution.started, execution.finished) {
        (Some(s), Some(f)) => f.since(s),
        _ => Duration::ZERO,
    };
    // The attempt is charged once, with its ledger entry.
    let payer = mapi_metering::Payer { tenant: run.tenant(), project: run.project(), token: run.token() };
    let charge = (!ledger_seen).then(|| {
        let shape = (row.class, row.gpus(), row.task_count);
        mapi_metering::attempt(&payer, run.id(), row.attempt, shape, wall, now)
    });
    let amount = charge.as_ref().map_or(0, mapi_metering::Charge::amount_micros);
    let charged = charge.as_ref().map(|c| c.bumps().clone()).unwrap_or_default();
    if let Some(charge) = charge {
        step.writes.push(Write::Charge(Box::new(charge)));
        run.add_charge(amount);
    }
    row.finalized = true;
    row.status = Some(execution.status.clone());
    row.started = execution.started;
    row.finished = execution.finished;
    step.follow_ups.push(FollowUp::retire(&row));
    step.put_attempt(row.clone());
    let applied = if run.is_current(row.attempt) {
        let made = Made { version, aggregate };
        apply_verdict(&mut run, verdict.verdict(), made, &budgets, &charged, now, &mut step)?
    } else {
        Applied::MovedPast
    };
    // A run that ended gives back what it reserved (not when the verdict
    // could not be applied: the run still holds its slot then).
    if step.transition.is_some() && run.state().is_terminal() {
        step.bumps(run.end_reservation());
    }
    let state = run.state();
    step.put_run(run);
    Ok(Finalized { step, applied, amount_micros: amount, state })
}

/// What a `succeeded` transition records: the model version, a fan-out parent's aggregate.
struct Made<'a> {
    version: Option<&'a ModelVersionDoc>,
    aggregate: Option<&'a mapi_api::views::Aggregate>,
}

fn apply_verdict(
    run: &mut RunDoc,
    verdict: &Verdict,
    made: Made<'_>,
    budgets: &[Sharded],
    charged: &Bumps,
    now: Timestamp,
    step: &mut Step,
) -> Result<Applied, StoreError> {
    let applied = match verdict {
        Verdict::Finalize { state: to, reason, error } => {
            let t = run.transition(*to, *reason, now);
            if t.is_ok() {
                run.set_error(error.clone());
                if let Some(v) = made.version {
                    step.writes.push(Write::CreateVersion(Box::new(v.clone())));
                }
                if let (RunState::Succeeded, Some(a)) = (to, made.aggregate) {
                    run.set_aggregate(a.clone());
                }
            }
            t
        }
        Verdict::Retry { class, reason, infra } => {
            let t = run.transition(RunState::Queued, *reason, now);
            if t.is_ok() {
                run.next_attempt(*class, *infra);
                let (id, hold) =
                    (run.id().clone(), counters::reserve_ms(*class, run.task_count(), run.timeout_s()));
                if let Some(r) = run.reservation_mut() {
                    step.bumps(Bumps::renew(r, hold, budgets, charged, id.as_str())?);
                }
                step.follow_ups.push(FollowUp::Dispatch { run: id, attempt: run.attempt() });
            }
            t
        }
        Verdict::Wait => unreachable!("a decided verdict is never wait"),
    };
    Ok(match applied {
        Ok(t) => {
            step.transition = Some(t);
            Applied::Moved
        }
        Err(e) => Applied::Illegal(e),
    })
}
