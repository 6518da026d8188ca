//! The commands without a store: each case names the documents a
//! transaction would read and what the step must write.

use std::collections::BTreeMap;
use std::time::Duration;

use mapi_domain::run::TRANSITIONS;
use mapi_domain::{
    AttemptNo, DatasetId, ErrorCode, ExecutionStatus, Nonce, ProjectId, Reason, ResourceClass, RetryPolicy,
    RunId, RunState, TenantId, Timestamp, UserId, Verdict,
};
use mapi_events::progress::Progress;
use mapi_events::{Event, EventBody};
use mapi_executor::{ExecutionHandle, ExecutionInfo};
use mapi_quota::counters::Reservation;
use mapi_schema::{AttemptDoc, ProgressDoc};

use super::commands::{self, Applied, CancelError, Claim, Ended, Intent, Skip, Speaker, Write};
use super::{FollowUp, NewRun, Rules, RunDoc, Step, verdict};

const T0: Timestamp = Timestamp::from_secs(1_000);
const LEASE: Duration = Duration::from_secs(30);
const RULES: Rules =
    Rules { event_grace: Duration::from_secs(60), retry: RetryPolicy { max_infra_retries: 2 } };

fn at(s: u64) -> Timestamp {
    T0 + Duration::from_secs(s)
}

fn reservation() -> Reservation {
    Reservation {
        vcpu_ms: 60_000,
        budgets: Vec::new(),
        at_most: Vec::new(),
        slots: vec!["tenant:dev#0".into(), "platform#3".into()],
        holds: Vec::new(),
    }
}

fn new_run() -> NewRun {
    NewRun {
        id: RunId::generate(T0, [1; 10]),
        tenant: TenantId::parse("dev").expect("tenant"),
        project: ProjectId::parse("default").expect("project"),
        method: "describe".into(),
        params: BTreeMap::new(),
        dataset: DatasetId::generate(T0, [2; 10]),
        class: ResourceClass::S,
        timeout_s: 60,
        task_count: 1,
        created_by: UserId::parse("dev@dev.local").expect("user"),
        estimate: mapi_cost::CURRENT.estimate(ResourceClass::S, 1, Duration::from_secs(60)),
        token: None,
        labels: Default::default(),
        retry_of: None,
        residency: mapi_domain::Residency::parse("eu").expect("eu"),
        plugin: None,
    }
}

fn queued() -> RunDoc {
    commands::admit(new_run(), Some(reservation()), T0).run().cloned().expect("admitted run")
}

fn intent() -> Intent {
    Intent { nonce: Nonce::from_bytes([7; 16]), event_key: "ab".repeat(32), lease: LEASE, gpus: 1 }
}

/// A run claimed at `at(1)`: dispatching, with its intent row.
fn claimed() -> (RunDoc, AttemptDoc) {
    match commands::claim(Some(queued()), None, AttemptNo::FIRST, &intent(), at(1)).expect("legal") {
        Claim::Mine { run, attempt, .. } => (*run, *attempt),
        other => panic!("not claimed: {other:?}"),
    }
}

fn handle() -> ExecutionHandle {
    ExecutionHandle("executions/e-1".into())
}

/// A run running attempt 1 since `at(2)`.
fn running() -> (RunDoc, AttemptDoc) {
    let (run, row) = claimed();
    let step =
        commands::record_execution(run, row, &handle(), Reason::ExecutionCreated, at(2)).expect("legal");
    (step.run().cloned().expect("run"), step.attempt().cloned().expect("row"))
}

fn released(step: &Step) -> bool {
    step.writes
        .iter()
        .any(|w| matches!(w, Write::Bumps(b) if *b == mapi_quota::counters::Bumps::release(&reservation())))
}

/// Every transition a step makes is in the table, and is the run's last
/// history entry.
fn check(step: &Step) {
    if let Some(t) = &step.transition {
        let from = t.from.expect("from");
        assert!(
            TRANSITIONS.iter().any(|(f, to, rs)| *f == from && *to == t.to && rs.contains(&t.reason)),
            "{t:?} is not in the table"
        );
        let run = step.run().expect("a transition writes its run");
        assert_eq!(run.history().last(), Some(t));
        assert_eq!(run.state(), t.to);
    }
}

#[test]
fn admit_opens_the_history_and_asks_for_the_dispatch() {
    let step = commands::admit(new_run(), Some(reservation()), T0);
    let run = step.run().expect("run");
    assert_eq!(run.state(), RunState::Queued);
    assert_eq!(run.history().len(), 1);
    assert_eq!(run.history()[0].from, None);
    assert_eq!(run.history()[0].reason, Reason::Submitted);
    assert_eq!(step.transition.as_ref(), run.history().first());
    assert!(matches!(step.writes[..], [Write::CreateRun(_)]), "a new run is created, never replaced");
    assert_eq!(
        step.follow_ups,
        vec![FollowUp::Dispatch { run: run.id().clone(), attempt: AttemptNo::FIRST }]
    );
    assert_eq!(run.reservation(), &Some(reservation()));
}

#[test]
fn claim_follows_the_intent_row() {
    let (_, row) = claimed();
    let with_handle = AttemptDoc { handle: Some(handle()), ..row.clone() };
    let lapsed = AttemptDoc { lease_until: at(5), ..row.clone() };
    let (dispatching, _) = claimed();
    let throttled = commands::requeue_throttled(dispatching.clone(), row.clone(), "429", at(3))
        .expect("legal")
        .run()
        .cloned()
        .expect("run");
    let (cancelling, _) = {
        let (run, row) = claimed();
        let step = commands::request_cancel(run, Some(&row), at(2)).expect("cancel");
        (step.run().cloned().expect("run"), row)
    };
    let ended = commands::request_cancel(queued(), None, at(1)).expect("cancel").run().cloned().expect("run");
    // (run, row, delivered attempt, now) → what the claim does.
    enum Want {
        Skip(Skip),
        Busy(u64),
        Mine { fresh: bool, moves: bool },
    }
    type Case = (&'static str, Option<RunDoc>, Option<AttemptDoc>, AttemptNo, Timestamp, Want);
    let cases: Vec<Case> = vec![
        ("no run", None, None, AttemptNo::FIRST, at(1), Want::Skip(Skip::NoSuchRun)),
        ("later attempt", Some(queued()), None, AttemptNo(2), at(1), Want::Skip(Skip::PastAttempt)),
        ("ended run", Some(ended), None, AttemptNo::FIRST, at(1), Want::Skip(Skip::PastAttempt)),
        (
            "has execution",
            Some(dispatching.clone()),
            Some(with_handle),
            AttemptNo::FIRST,
            at(99),
            Want::Skip(Skip::HasExecution),
        ),
        (
            "live lease",
            Some(dispatching.clone()),
            Some(row.clone()),
            AttemptNo::FIRST,
            at(11),
            Want::Busy(20),
        ),
        (
            "lapsed lease",
            Some(dispatching),
            Some(lapsed.clone()),
            AttemptNo::FIRST,
            at(6),
            Want::Mine { fresh: false, moves: false },
        ),
        (
            "throttled back",
            Some(throttled),
            Some(lapsed),
            AttemptNo::FIRST,
            at(6),
            Want::Mine { fresh: false, moves: true },
        ),
        ("not queued", Some(cancelling), None, AttemptNo::FIRST, at(3), Want::Skip(Skip::NotQueued)),
        (
            "first delivery",
            Some(queued()),
            None,
            AttemptNo::FIRST,
            at(1),
            Want::Mine { fresh: true, moves: true },
        ),
    ];
    for (name, run, row, attempt, now, want) in cases {
        let got = commands::claim(run, row, attempt, &intent(), now).expect(name);
        match (got, want) {
            (Claim::Nothing(s), Want::Skip(w)) => assert_eq!(s, w, "{name}"),
            (Claim::Busy(d), Want::Busy(s)) => assert_eq!(d, Duration::from_secs(s), "{name}"),
            (Claim::Mine { step, attempt, run, fresh }, Want::Mine { fresh: f, moves }) => {
                check(&step);
                assert_eq!(fresh, f, "{name}");
                assert_eq!(step.transition.is_some(), moves, "{name}");
                assert_eq!(run.state(), RunState::Dispatching, "{name}");
                assert_eq!(attempt.lease_until, now + LEASE, "{name}: the claimer holds the lease");
                assert_eq!(step.attempt(), Some(&*attempt), "{name}: the row is written");
                if fresh {
                    assert_eq!(attempt.nonce, intent().nonce, "{name}");
                }
            }
            (got, _) => panic!("{name}: unexpected {got:?}"),
        }
    }
}

/// A second execution made for an attempt that has one is stopped; the
/// attempt keeps the first.
#[test]
fn a_second_execution_of_an_attempt_is_stopped() {
    let (run, recorded) = running();
    let other = ExecutionHandle("executions/e-2".into());
    let step =
        commands::record_execution(run, recorded, &other, Reason::ExecutionCreated, at(3)).expect("legal");
    assert!(step.is_empty(), "the recorded execution is kept");
    assert_eq!(step.follow_ups, vec![FollowUp::CancelExecution(other)]);
}

/// An attempt is marked bootstrapped once; a finalized one is not touched.
#[test]
fn bootstraps_are_marked_written_once() {
    let (_, row) = claimed();
    let step = commands::bootstrapped(row.clone(), at(2), vec![1]);
    assert_eq!(step.attempt().and_then(|a| a.bootstrapped_at), Some(at(2)));
    assert_eq!(step.attempt().map(|a| a.reused.clone()), Some(vec![1]), "the reused children are kept");
    let marked = step.attempt().cloned().expect("row");
    assert!(commands::bootstrapped(marked, at(5), Vec::new()).is_empty(), "the first time is kept");
    let mut done = row;
    done.finalized = true;
    assert!(
        commands::bootstrapped(done, at(5), Vec::new()).is_empty(),
        "a finalized attempt is left as it is"
    );
}

/// A submit whose answer comes after its attempt was finalized (a cancel
/// while it was on its way) made an execution nothing would meter: it is
/// stopped, and the bootstraps that submit wrote are retired again.
#[test]
fn an_execution_recorded_for_a_finalized_attempt_is_stopped() {
    let (run, mut row) = claimed();
    row.finalized = true;
    let late = ExecutionHandle("executions/e-late".into());
    let step =
        commands::record_execution(run, row.clone(), &late, Reason::ExecutionCreated, at(3)).expect("legal");
    assert!(step.is_empty(), "a finalized attempt records nothing");
    assert_eq!(step.follow_ups, vec![FollowUp::CancelExecution(late), FollowUp::retire(&row)]);
    assert_eq!(
        FollowUp::retire(&row),
        FollowUp::RetireBootstraps { nonce: row.nonce.clone(), tasks: row.task_count }
    );
}

/// The execution whose signed event arrives is the attempt's, unless the
/// attempt already heard from the one it records.
#[test]
fn the_speaker_is_the_attempts_execution() {
    let speaker = ExecutionHandle("executions/e-2".into());
    // No handle yet: the speaker is adopted and the run is running.
    let (run, row) = claimed();
    let adopted = |s| match s {
        Speaker::Adopted(step) => step,
        Speaker::Stray => panic!("refused"),
    };
    let step = adopted(commands::adopt_speaker(Some(run), row, &speaker, false, at(3)).expect("legal"));
    check(&step);
    assert_eq!(step.run().map(RunDoc::state), Some(RunState::Running));
    assert_eq!(step.attempt().and_then(|a| a.handle.clone()), Some(speaker.clone()));
    // The recorded execution never spoke: the attempt moves to the speaker
    // and the recorded one is stopped.
    let (run, recorded) = running();
    let step =
        adopted(commands::adopt_speaker(None, recorded.clone(), &speaker, false, at(3)).expect("legal"));
    assert_eq!(step.attempt().and_then(|a| a.handle.clone()), Some(speaker.clone()));
    assert_eq!(step.follow_ups, vec![FollowUp::CancelExecution(handle())]);
    assert!(step.transition.is_none(), "the run was already running");
    // The recorded execution spoke: the speaker is a stray.
    let stray = commands::adopt_speaker(None, recorded.clone(), &speaker, true, at(3)).expect("legal");
    assert_eq!(stray, Speaker::Stray);
    // An attempt whose run is gone takes nothing.
    assert_eq!(
        commands::adopt_speaker(None, claimed().1, &speaker, false, at(3)).expect("legal"),
        Speaker::Stray
    );
    // The recorded execution itself: nothing to change.
    let same = adopted(commands::adopt_speaker(Some(run), recorded, &handle(), true, at(3)).expect("legal"));
    assert!(same.is_empty() && same.follow_ups.is_empty());
}

/// A run cancelled while its recorded execution never spoke: the speaker
/// that took the work is adopted and asked to stop too.
#[test]
fn a_speaker_adopted_while_cancelling_is_stopped() {
    let speaker = ExecutionHandle("executions/e-2".into());
    let (run, mut recorded) = running();
    recorded.finished_seen_at = Some(at(9));
    let cancelling = commands::request_cancel(run, Some(&recorded), at(10)).expect("cancel");
    let run = cancelling.run().cloned().expect("cancelling run");
    let step = match commands::adopt_speaker(Some(run), recorded, &speaker, false, at(11)).expect("legal") {
        Speaker::Adopted(step) => step,
        Speaker::Stray => panic!("refused"),
    };
    let row = step.attempt().expect("repointed row");
    assert_eq!(row.handle, Some(speaker.clone()));
    assert_eq!(row.finished_seen_at, None, "the recorded execution's end is not the speaker's");
    assert_eq!(
        step.follow_ups,
        vec![FollowUp::CancelExecution(speaker), FollowUp::CancelExecution(handle())]
    );
}

/// A taker that stayed silent past the wait is found by the attempt's
/// nonce when the recorded execution shows it did nothing; otherwise the
/// recorded one is finalized.
#[test]
fn a_silent_taker_is_found_by_the_attempts_nonce() {
    let (_, row) = running();
    let of = |name: &str, created: u64, nonce: &Nonce, status: ExecutionStatus| ExecutionInfo {
        handle: ExecutionHandle(name.to_owned()),
        nonce: Some(nonce.clone()),
        created: at(created),
        ..info(status)
    };
    let other = Nonce::from_bytes([9; 16]);
    let listed = [
        of("executions/recorded", 2, &row.nonce, ExecutionStatus::Succeeded),
        of("executions/clean-twin", 3, &row.nonce, ExecutionStatus::Succeeded),
        of("executions/stranger", 3, &other, failed(Some(70), None)),
        of("executions/crashed-late", 5, &row.nonce, failed(Some(70), None)),
        of("executions/crashed", 4, &row.nonce, failed(Some(70), None)),
    ];
    let mut row = row;
    row.handle = Some(ExecutionHandle("executions/recorded".to_owned()));
    let repointed = |recorded: ExecutionInfo| {
        commands::silent_taker(&row, &recorded, &listed)
            .map(|step| step.attempt().and_then(|a| a.handle.clone()).expect("the attempt is written").0)
    };
    let recorded = |status: ExecutionStatus| of("executions/recorded", 2, &row.nonce, status);
    // A clean exit or a forgotten execution did nothing: the oldest other
    // execution of the nonce that did not exit cleanly took the work.
    let crashed = Some("executions/crashed");
    assert_eq!(repointed(recorded(ExecutionStatus::Succeeded)).as_deref(), crashed);
    assert_eq!(repointed(recorded(ExecutionStatus::NotFound)).as_deref(), crashed);
    // Stopped before it started: it did nothing either.
    let stopped = ExecutionStatus::Cancelled { exit_code: Some(143) };
    let unstarted = ExecutionInfo { started: None, ..recorded(stopped.clone()) };
    assert_eq!(repointed(unstarted).as_deref(), crashed);
    // The recorded one started and failed or was stopped: it may be the
    // taker; kept.
    assert_eq!(repointed(recorded(failed(Some(70), None))), None);
    assert_eq!(repointed(recorded(stopped)), None);
    // Only clean twins, twins that never started and other attempts'
    // executions: nothing to repoint to.
    let mut others = listed[..3].to_vec();
    others.push(ExecutionInfo {
        started: None,
        ..of("executions/unstarted", 3, &row.nonce, failed(None, Some(9)))
    });
    let found = commands::silent_taker(&row, &recorded(ExecutionStatus::Succeeded), &others);
    assert_eq!(found, None);
}

/// An attempt never heard from is finalized only after its bootstraps
/// were retired and found untouched, or after the taker had its time and
/// one last call.
#[test]
fn an_unheard_attempt_waits_for_the_execution_that_took_its_work() {
    use commands::{TakenWait, Unheard};
    let wait = TakenWait {
        retire_lease: Duration::from_secs(30),
        bound: Duration::from_secs(600),
        last_call: Duration::from_secs(60),
    };
    let waits = |u: Unheard| match u {
        Unheard::Wait { until, step } => (until, step.attempt().and_then(|a| a.taken_unheard.clone())),
        other => panic!("not a wait: {other:?}"),
    };
    let (_, mut row) = running();
    // Nothing was written for anyone to take.
    assert_eq!(commands::unheard(&row, false, None, wait, at(5)), Unheard::Finalize);
    row.bootstrapped_at = Some(at(2));
    // Heard from: its events decide.
    assert_eq!(commands::unheard(&row, true, None, wait, at(5)), Unheard::Finalize);
    // One delivery claims the retirement; a concurrent one waits for it
    // (the claimer's deletions would look like takes), until the claim lapses.
    let Unheard::Retire { step } = commands::unheard(&row, false, None, wait, at(5)) else {
        panic!("not retired");
    };
    let claimed = step.attempt().cloned().expect("the claim is written");
    assert_eq!(claimed.retiring_at, Some(at(5)));
    assert_eq!(commands::unheard(&claimed, false, None, wait, at(6)), Unheard::Retiring { until: at(35) });
    assert!(matches!(commands::unheard(&claimed, false, None, wait, at(35)), Unheard::Retire { .. }));
    // Retired and none was gone: nobody did the work.
    assert_eq!(commands::unheard(&row, false, Some(0), wait, at(5)), Unheard::Finalize);
    // One was gone: the finding is recorded and the bound counted from it.
    let (until, taken) = waits(commands::unheard(&row, false, Some(1), wait, at(5)));
    assert_eq!(until, at(605));
    let taken = taken.expect("the finding is written");
    assert_eq!((taken.found_at, taken.last_call_at), (at(5), None));
    row.taken_unheard = Some(taken);
    // Later deliveries neither retire again nor write while the bound runs.
    assert_eq!(waits(commands::unheard(&row, false, None, wait, at(300))), (at(605), None));
    // The first delivery past the bound makes the last call.
    let (until, last) = waits(commands::unheard(&row, false, None, wait, at(9000)));
    assert_eq!(until, at(9060), "one grace after the first look past the bound, however late");
    let last = last.expect("the last call is written");
    assert_eq!(last.last_call_at, Some(at(9000)));
    row.taken_unheard = Some(last);
    assert_eq!(waits(commands::unheard(&row, false, None, wait, at(9030))), (at(9060), None));
    assert_eq!(commands::unheard(&row, false, None, wait, at(9060)), Unheard::Silent);
    // The taker spoke meanwhile: its events decide.
    assert_eq!(commands::unheard(&row, true, None, wait, at(9030)), Unheard::Finalize);
    // The bound covers the run's timeout, the executor's margin and the grace.
    let bound = TakenWait::new(&queued(), Duration::from_secs(120), Duration::from_secs(300));
    assert_eq!(
        (bound.bound, bound.last_call),
        (Duration::from_secs(60 + 300 + 120), Duration::from_secs(120))
    );
}

#[test]
fn the_execution_is_recorded_once_and_stopped_when_cancelled_meanwhile() {
    let (run, row) = claimed();
    for reason in [Reason::ExecutionCreated, Reason::Adopted] {
        let step =
            commands::record_execution(run.clone(), row.clone(), &handle(), reason, at(2)).expect("legal");
        check(&step);
        assert_eq!(step.run().map(RunDoc::state), Some(RunState::Running));
        assert_eq!(step.attempt().and_then(|a| a.handle.clone()), Some(handle()));
        assert!(step.follow_ups.is_empty());
    }
    let (_, recorded) = running();
    assert!(
        commands::record_execution(run.clone(), recorded, &handle(), Reason::Adopted, at(3))
            .expect("legal")
            .is_empty()
    );
    let cancelling =
        commands::request_cancel(run, Some(&row), at(2)).expect("cancel").run().cloned().expect("run");
    let step = commands::record_execution(cancelling, row, &handle(), Reason::ExecutionCreated, at(3))
        .expect("legal");
    assert!(step.transition.is_none());
    assert_eq!(step.follow_ups, vec![FollowUp::CancelExecution(handle())]);
    assert!(
        step.attempt().is_some_and(|a| a.handle.is_some()),
        "the handle is kept, so the tick can confirm"
    );
}

#[test]
fn throttling_requeues_with_the_same_attempt_and_no_retry_spent() {
    let (run, row) = claimed();
    let step = commands::requeue_throttled(run, row.clone(), "cooling down", at(4)).expect("legal");
    check(&step);
    let back = step.run().expect("run");
    assert_eq!((back.state(), back.attempt(), back.infra_retries()), (RunState::Queued, AttemptNo::FIRST, 0));
    assert_eq!(
        back.waiting().map(|w| (w.reason.as_str(), w.since)),
        Some(("cooling down", at(4))),
        "the run says why it waits"
    );
    assert_eq!(step.attempt().map(|a| (a.lease_until, a.nonce.clone())), Some((at(4), row.nonce)));
    let (run, row) = running();
    assert!(
        commands::requeue_throttled(run, row, "x", at(4)).expect("legal").is_empty(),
        "an execution exists"
    );
}

#[test]
fn leases_move_only_forward_and_only_before_the_submit() {
    let (_, row) = claimed();
    assert_eq!(commands::extend_lease(row.clone(), at(50)).attempt().map(|a| a.lease_until), Some(at(50)));
    assert!(commands::extend_lease(row.clone(), at(10)).is_empty(), "never back");
    assert_eq!(commands::release_lease(row, at(3)).attempt().map(|a| a.lease_until), Some(at(3)));
    let (_, submitted) = running();
    assert!(commands::extend_lease(submitted.clone(), at(50)).is_empty());
    assert!(commands::release_lease(submitted, at(3)).is_empty());
}

#[test]
fn a_refused_placement_fails_the_run_and_gives_back_its_reservation() {
    let (run, row) = claimed();
    let step = commands::refuse_placement(run, row, "class XL is not offered", at(2)).expect("legal");
    check(&step);
    let failed = step.run().expect("run");
    assert_eq!(failed.state(), RunState::Failed);
    assert_eq!(failed.error().map(|e| e.code), Some(ErrorCode::InfraError));
    assert_eq!(failed.reservation(), &None);
    assert!(released(&step));
    assert!(step.attempt().is_some_and(|a| a.finalized));
    let again = commands::refuse_placement(failed.clone(), step.attempt().cloned().expect("row"), "x", at(3));
    assert!(again.expect("legal").is_empty(), "an ended run is left alone");
}

/// An ended run carries `leftovers_since` (the run housekeeper's query finds it by it) until
/// its executions are recorded forgotten; a run that has not ended, or is recorded already, is
/// not written.
#[test]
fn the_leftovers_of_an_ended_run_are_recorded_forgotten_once() {
    let (running, _) = running();
    assert_eq!(running.leftovers_since(), None, "a running run has nothing to forget yet");
    assert!(commands::leftovers_forgotten(running, at(9)).is_empty(), "a running run is not written");
    let ended = commands::request_cancel(queued(), None, at(4)).expect("cancel").run().cloned().expect("run");
    assert_eq!(ended.leftovers_since(), Some(at(4)), "the time it ended");
    let step = commands::leftovers_forgotten(ended, at(9));
    let recorded = step.run().cloned().expect("the run is written");
    assert!(step.transition.is_none() && step.follow_ups.is_empty());
    assert_eq!(recorded.leftovers_since(), None, "it leaves the housekeeper's query");
    assert_eq!(recorded.leftovers_forgotten_at(), Some(at(9)));
    assert_eq!((recorded.state(), recorded.updated_at()), (RunState::Cancelled, at(4)), "neither moves");
    assert!(commands::leftovers_forgotten(recorded, at(10)).is_empty(), "recorded once");
}

#[test]
fn cancel_by_state() {
    let (dispatching, row) = claimed();
    let (running, running_row) = running();
    // (state before, row) → state after, gives back the reservation, asks the executor.
    let cases = vec![
        (queued(), None, RunState::Cancelled, true, false),
        (dispatching, Some(row), RunState::Cancelling, false, false),
        (running.clone(), Some(running_row.clone()), RunState::Cancelling, false, true),
    ];
    for (run, row, to, gives_back, asks) in cases {
        let from = run.state();
        let step = commands::request_cancel(run, row.as_ref(), at(5)).expect("cancel");
        check(&step);
        let after = step.run().expect("run");
        assert_eq!(after.state(), to, "{from}");
        assert!(after.cancel_requested(), "{from}");
        assert_eq!(released(&step), gives_back, "{from}");
        assert_eq!(step.follow_ups == vec![FollowUp::CancelExecution(handle())], asks, "{from}");
    }
    let cancelling = commands::request_cancel(running, Some(&running_row), at(5))
        .expect("cancel")
        .run()
        .cloned()
        .expect("run");
    let again = commands::request_cancel(cancelling.clone(), Some(&running_row), at(6)).expect("cancel");
    assert!(again.is_empty() && again.transition.is_none(), "a second cancel writes nothing");
    assert_eq!(again.follow_ups, vec![FollowUp::CancelExecution(handle())], "but asks the executor again");
    let ended = commands::request_cancel(queued(), None, at(1)).expect("cancel").run().cloned().expect("run");
    assert!(matches!(commands::request_cancel(ended, None, at(2)), Err(CancelError::Ended { .. })));
}

fn progress(run: &RunDoc, bodies: &[EventBody]) -> ProgressDoc {
    let mut p = Progress::new(1);
    for (seq, body) in bodies.iter().enumerate() {
        p.apply(&Event {
            v: mapi_events::VERSION,
            run: run.id().clone(),
            attempt: run.attempt(),
            task: 0,
            seq: seq as u64,
            at: at(3),
            body: body.clone(),
        });
    }
    ProgressDoc {
        run: run.id().clone(),
        tenant: run.tenant().clone(),
        project: run.project().clone(),
        attempt: run.attempt(),
        progress: p,
        updated_at: at(3),
    }
}

fn info(status: ExecutionStatus) -> ExecutionInfo {
    ExecutionInfo {
        handle: handle(),
        nonce: None,
        run: None,
        created: at(2),
        started: Some(at(2)),
        finished: Some(at(12)),
        task_count: 1,
        status,
    }
}

fn failed(exit_code: Option<i32>, signal: Option<i32>) -> ExecutionStatus {
    ExecutionStatus::Failed { exit_code, signal, message: String::new() }
}

#[test]
fn finalize_applies_the_outcome_table() {
    let complete = [EventBody::Complete { outputs: None }];
    let error = [EventBody::Error { message: "column y is constant".into() }];
    // (status, events, cancel first) → state, reason, next attempt's class.
    type Case<'a> = (ExecutionStatus, &'a [EventBody], bool, RunState, Reason, Option<ResourceClass>);
    let cases: Vec<Case> = vec![
        (ExecutionStatus::Succeeded, &complete, false, RunState::Succeeded, Reason::Completed, None),
        (failed(Some(1), None), &error, false, RunState::Failed, Reason::MethodError, None),
        (failed(Some(143), None), &[], false, RunState::Failed, Reason::Timeout, None),
        (
            failed(Some(137), None),
            &[],
            false,
            RunState::Queued,
            Reason::ResourceExhausted,
            Some(ResourceClass::M),
        ),
        (
            failed(None, Some(9)),
            &[],
            false,
            RunState::Queued,
            Reason::ResourceExhausted,
            Some(ResourceClass::M),
        ),
        (failed(Some(16), None), &[], false, RunState::Partial, Reason::CheckpointFlushed, None),
        (
            failed(Some(3), None),
            &[],
            false,
            RunState::Queued,
            Reason::InfrastructureFailure,
            Some(ResourceClass::S),
        ),
        (
            ExecutionStatus::NotFound,
            &[],
            false,
            RunState::Queued,
            Reason::InfrastructureFailure,
            Some(ResourceClass::S),
        ),
        (ExecutionStatus::NotFound, &[], true, RunState::Cancelled, Reason::CancelConfirmed, None),
        (
            ExecutionStatus::Cancelled { exit_code: None },
            &[],
            true,
            RunState::Cancelled,
            Reason::CancelConfirmed,
            None,
        ),
        (
            ExecutionStatus::Cancelled { exit_code: Some(16) },
            &[],
            true,
            RunState::Partial,
            Reason::CheckpointFlushed,
            None,
        ),
    ];
    for (status, events, cancel, to, reason, next) in cases {
        let (mut run, row) = running();
        let retire = FollowUp::retire(&row);
        if cancel {
            run = commands::request_cancel(run, Some(&row), at(3))
                .expect("cancel")
                .run()
                .cloned()
                .expect("run");
        }
        let progress = progress(&run, events);
        let name = format!("{status:?}");
        let decided = verdict(&run, &row, Some(&progress), None, &status, at(13), RULES).expect(&name);
        let version = commands::succeeds(&run, &row, &decided).then(|| version_of(&run));
        let execution = info(status);
        let ended = Ended {
            run,
            row,
            execution: &execution,
            verdict: decided,
            ledger_seen: false,
            version: version.as_ref(),
            budgets: Vec::new(),
            aggregate: None,
            now: at(13),
        };
        let f = commands::finalize(ended).expect(&name);
        check(&f.step);
        assert_eq!(f.applied, Applied::Moved, "{name}");
        let t = f.step.transition.as_ref().expect(&name);
        assert_eq!((t.to, t.reason), (to, reason), "{name}");
        let after = f.step.run().expect(&name);
        assert_eq!(after.charged_micros(), f.amount_micros, "{name}: charged once");
        assert!(f.amount_micros > 0, "{name}: ten seconds of class S cost something");
        assert!(f.step.writes.iter().any(|w| matches!(w, Write::Charge(_))), "{name}");
        assert!(f.step.attempt().is_some_and(|a| a.finalized), "{name}");
        assert_eq!(
            f.step.writes.iter().any(|w| matches!(w, Write::CreateVersion(_))),
            to == RunState::Succeeded,
            "{name}: a run succeeds exactly with its model version"
        );
        match next {
            Some(class) => {
                assert_eq!((after.attempt(), after.class()), (AttemptNo(2), class), "{name}");
                assert_eq!(
                    f.step.follow_ups,
                    vec![retire, FollowUp::Dispatch { run: after.id().clone(), attempt: AttemptNo(2) }],
                    "{name}: the ended attempt's bootstraps are retired, the next is dispatched"
                );
                assert!(after.reservation().is_some(), "{name}: a retry keeps its reservation");
            }
            None => {
                assert_eq!(f.step.follow_ups, vec![retire], "{name}: its bootstraps are retired");
                assert_eq!(after.reservation(), &None, "{name}: an ended run gives back what it reserved");
                assert!(released(&f.step), "{name}");
            }
        }
    }
}

/// An output as listed: name, generation, size.
type Listed = (&'static str, i64, u64);

/// The outputs stored under the attempt's directory, as the meter lists them.
fn stored(run: &RunDoc, outputs: &[Listed]) -> Vec<mapi_objects::ObjectMeta> {
    let dir = mapi_schema::layout::task_dir(run.tenant(), run.project(), run.id(), run.attempt(), 0, 1);
    outputs
        .iter()
        .map(|(name, generation, size)| mapi_objects::ObjectMeta {
            key: mapi_objects::ObjectKey::parse(&mapi_schema::layout::output(&dir, name)).expect("key"),
            generation: mapi_objects::Generation(*generation),
            size: *size,
            content_type: "application/json".to_owned(),
            created: at(11),
        })
        .collect()
}

/// Generation verification: a succeeded attempt succeeds only when what is stored is exactly
/// what its tasks wrote; otherwise it is retried as an infrastructure failure, naming the
/// difference.
#[test]
fn a_success_whose_outputs_were_replaced_is_retried() {
    let (run, row) = running();
    let status = ExecutionStatus::Succeeded;
    let wrote = |name: &str, size, generation| EventBody::Output { name: name.into(), size, generation };
    let events = [
        wrote("model.json", 10, Some(5)),
        wrote("result.json", 3, None),
        EventBody::Complete { outputs: Some(2) },
    ];
    let progress = progress(&run, &events);
    let same = stored(&run, &[("model.json", 5, 10), ("result.json", 8, 3)]);
    let decided = verdict(&run, &row, Some(&progress), Some(&same), &status, at(13), RULES).expect("verdict");
    assert!(commands::succeeds(&run, &row, &decided), "{decided:?}");
    let cases: [(&[Listed], &str); 3] = [
        (
            &[("model.json", 6, 10), ("result.json", 8, 3)],
            "`model.json` is generation 6, its task wrote generation 5",
        ),
        (&[("model.json", 5, 10), ("result.json", 8, 4)], "`result.json` holds 4 bytes, its task wrote 3"),
        (&[("model.json", 5, 10)], "`result.json` its task wrote is missing"),
    ];
    let dir = mapi_schema::layout::attempt_dir(run.tenant(), run.project(), run.id(), run.attempt());
    let retry =
        Verdict::Retry { class: ResourceClass::S, reason: Reason::InfrastructureFailure, infra: true };
    for (listing, why) in cases {
        let listing = stored(&run, listing);
        let decided =
            verdict(&run, &row, Some(&progress), Some(&listing), &status, at(13), RULES).expect(why);
        assert_eq!(decided.verdict(), &retry, "{why}");
        let found = super::compare_outputs(&dir, &listing, &progress.progress.written());
        assert_eq!(found, mapi_domain::OutputsCompared::Differ(why.to_owned()));
    }
    // An output no report names yet may have a late report: it differs only after the grace.
    let extra = stored(&run, &[("model.json", 5, 10), ("result.json", 8, 3), ("extra.bin", 1, 1)]);
    let why = "`extra.bin` is stored but no task reported writing it";
    let found = super::compare_outputs(&dir, &extra, &progress.progress.written());
    assert_eq!(found, mapi_domain::OutputsCompared::Unreported(why.to_owned()));
    let seen = AttemptDoc { finished_seen_at: Some(at(12)), ..row.clone() };
    assert_eq!(verdict(&run, &seen, Some(&progress), Some(&extra), &status, at(13), RULES), None);
    let late =
        verdict(&run, &seen, Some(&progress), Some(&extra), &status, at(73), RULES).expect("grace over");
    assert_eq!(late.verdict(), &retry);
    assert!(super::needs_outputs(&run, &row, Some(&progress), &status));
    assert!(!super::needs_outputs(&run, &row, Some(&progress), &ExecutionStatus::Running));
}

/// A method that fits no model succeeds without a version: the caller
/// passes none, and the step writes none.
#[test]
fn a_success_without_a_version_writes_none() {
    let (run, row) = running();
    let status = ExecutionStatus::Succeeded;
    let progress = progress(&run, &[EventBody::Complete { outputs: None }]);
    let decided = verdict(&run, &row, Some(&progress), None, &status, at(13), RULES).expect("a verdict");
    assert!(commands::succeeds(&run, &row, &decided));
    let execution = info(status);
    let ended = Ended {
        run,
        row,
        execution: &execution,
        verdict: decided,
        ledger_seen: false,
        version: None,
        budgets: Vec::new(),
        aggregate: None,
        now: at(13),
    };
    let f = commands::finalize(ended).expect("finalized");
    check(&f.step);
    assert_eq!((f.applied, f.state), (Applied::Moved, RunState::Succeeded));
    assert!(!f.step.writes.iter().any(|w| matches!(w, Write::CreateVersion(_))));
    assert!(f.step.writes.iter().any(|w| matches!(w, Write::Charge(_))), "still charged");
    assert!(released(&f.step), "an ended run gives back what it reserved");
}

fn version_of(run: &RunDoc) -> mapi_schema::ModelVersionDoc {
    mapi_schema::ModelVersionDoc {
        id: mapi_domain::ModelVersionId::of_run(run.id()),
        tenant: run.tenant().clone(),
        project: run.project().clone(),
        run: run.id().clone(),
        attempt: run.attempt(),
        method: run.method().to_owned(),
        bundle: "bundle".into(),
        manifest_sha256: "00".repeat(32),
        key_version: "local:1".into(),
        artifact_count: 1,
        expired_at: None,
        bytes_since: None,
        deprecated: None,
        created_at: at(13),
    }
}

#[test]
fn no_verdict_while_the_execution_runs_or_its_complete_event_may_still_come() {
    let (run, row) = running();
    assert_eq!(verdict(&run, &row, None, None, &ExecutionStatus::Running, at(99), RULES), None);
    let seen = AttemptDoc { finished_seen_at: Some(at(12)), ..row };
    assert_eq!(
        verdict(&run, &seen, None, None, &ExecutionStatus::Succeeded, at(71), RULES),
        None,
        "within the grace"
    );
    let late =
        verdict(&run, &seen, None, None, &ExecutionStatus::Succeeded, at(72), RULES).expect("grace over");
    assert!(matches!(late.verdict(), Verdict::Finalize { state: RunState::Failed, .. }));
}

#[test]
fn retries_run_out_and_oom_retries_once() {
    let (run, row) = running();
    let mut run = run;
    let mut row = row;
    for n in 1..=3u32 {
        let status = ExecutionStatus::NotFound;
        let decided = verdict(&run, &row, None, None, &status, at(13), RULES).expect("decided");
        let execution = info(status);
        let ended = Ended {
            run,
            row: row.clone(),
            execution: &execution,
            verdict: decided,
            ledger_seen: false,
            version: None,
            budgets: Vec::new(),
            aggregate: None,
            now: at(13),
        };
        let f = commands::finalize(ended).expect("finalize");
        run = f.step.run().cloned().expect("run");
        if n <= 2 {
            assert_eq!((run.state(), run.infra_retries()), (RunState::Queued, n));
            let claim =
                commands::claim(Some(run.clone()), None, run.attempt(), &intent(), at(20)).expect("legal");
            let Claim::Mine { run: r, attempt: a, .. } = claim else { panic!("claim") };
            let s = commands::record_execution(*r, *a, &handle(), Reason::ExecutionCreated, at(21))
                .expect("legal");
            run = s.run().cloned().expect("run");
            row = s.attempt().cloned().expect("row");
        } else {
            assert_eq!(run.state(), RunState::Failed, "gave up after two infrastructure retries");
            assert_eq!(run.error().map(|e| e.code), Some(ErrorCode::InfraError));
        }
    }
}

#[test]
fn a_retry_above_the_largest_class_or_past_a_limit_fails_instead() {
    let (run, row) = running();
    let oom = failed(Some(137), None);
    let decided = verdict(&run, &row, None, None, &oom, at(13), RULES).expect("decided");
    let capped = commands::admit_retry(decided.clone(), row.class, Some(ResourceClass::S), None);
    assert!(matches!(
        capped.verdict(),
        Verdict::Finalize { state: RunState::Failed, error: Some(e), .. } if e.code == ErrorCode::ResourceExhausted
    ));
    let refused =
        commands::admit_retry(decided.clone(), row.class, None, Some("it would pass the tenant's budget"));
    assert!(matches!(
        refused.verdict(),
        Verdict::Finalize { state: RunState::Failed, error: Some(e), .. } if e.code == ErrorCode::QuotaExceeded
    ));
    assert_eq!(commands::admit_retry(decided.clone(), row.class, Some(ResourceClass::L), None), decided);
}

#[test]
fn an_attempt_the_run_moved_past_is_charged_once_and_changes_nothing_else() {
    let (run, row) = running();
    let cancelled =
        commands::request_cancel(run, Some(&row), at(3)).expect("cancel").run().cloned().expect("run");
    let status = ExecutionStatus::Cancelled { exit_code: None };
    let decided = verdict(&cancelled, &row, None, None, &status, at(13), RULES).expect("decided");
    let execution = info(status);
    let first = commands::finalize(Ended {
        run: cancelled,
        row: row.clone(),
        execution: &execution,
        verdict: decided.clone(),
        ledger_seen: false,
        version: None,
        budgets: Vec::new(),
        aggregate: None,
        now: at(13),
    })
    .expect("finalize");
    let done = first.step.run().cloned().expect("run");
    assert_eq!(done.state(), RunState::Cancelled);
    let again = commands::finalize(Ended {
        run: done.clone(),
        row,
        execution: &execution,
        verdict: decided,
        ledger_seen: true,
        version: None,
        budgets: Vec::new(),
        aggregate: None,
        now: at(14),
    })
    .expect("finalize");
    assert_eq!(again.applied, Applied::MovedPast);
    assert!(again.step.transition.is_none());
    assert_eq!(
        again.step.run().map(RunDoc::charged_micros),
        Some(done.charged_micros()),
        "not charged twice"
    );
    assert!(!again.step.writes.iter().any(|w| matches!(w, Write::Charge(_) | Write::Bumps(_))));
}

#[test]
fn stalled_is_written_only_when_it_changes() {
    let (run, _) = running();
    let step = commands::mark_stalled(run.clone(), true);
    assert_eq!(step.run().map(RunDoc::stalled), Some(true));
    assert!(step.transition.is_none());
    assert!(commands::mark_stalled(run, false).is_empty());
}

#[test]
fn a_wait_is_written_when_its_reason_changes_and_ends_as_the_run_leaves_the_queue() {
    let why = "executor local-process is disabled by an operator: INC-42".to_owned();
    let step = commands::mark_waiting(queued(), Some(why.clone()), at(1));
    let waiting = step.run().cloned().expect("written");
    assert_eq!(waiting.waiting().map(|w| (w.reason.as_str(), w.since)), Some((why.as_str(), at(1))));
    assert!(step.transition.is_none(), "a wait moves no state");
    assert!(
        commands::mark_waiting(waiting.clone(), Some(why), at(9)).is_empty(),
        "the same reason keeps its time"
    );
    let cleared = commands::mark_waiting(waiting.clone(), None, at(9));
    assert_eq!(cleared.run().map(RunDoc::waiting), Some(None));
    let claimed =
        match commands::claim(Some(waiting), None, AttemptNo::FIRST, &intent(), at(10)).expect("legal") {
            Claim::Mine { run, .. } => *run,
            other => panic!("not claimed: {other:?}"),
        };
    assert_eq!(claimed.waiting(), None, "a dispatching run waits for nothing");
    assert!(
        commands::mark_waiting(claimed, Some("late".into()), at(11)).is_empty(),
        "only a queued run waits"
    );
}

#[test]
fn the_stored_form_keeps_its_field_names() {
    let run = queued();
    let fields = mapi_store::encode(&run).expect("encode");
    assert_eq!(fields["state"], "queued");
    assert_eq!(fields["tenant"], "dev");
    assert_eq!(fields["history"][0]["reason"], "submitted");
    let back: RunDoc = serde_json::from_value(serde_json::Value::Object(fields)).expect("decode");
    assert_eq!(back, run);
}

#[test]
fn a_gpu_run_placed_without_a_gpu_runs_on_the_cpu_warned_and_pays_no_accelerator_time() {
    let gpu_run = |params: serde_json::Value| {
        let mut new = new_run();
        new.method = "dl.cnn_classifier".into();
        new.class = ResourceClass::GPU;
        new.params = params.as_object().map(|o| o.clone().into_iter().collect()).unwrap_or_default();
        commands::admit(new, Some(reservation()), T0).run().cloned().expect("admitted")
    };
    let claim = |run: RunDoc, gpus: u32| {
        let intent = Intent { gpus, ..intent() };
        match commands::claim(Some(run), None, AttemptNo::FIRST, &intent, at(1)).expect("legal") {
            Claim::Mine { run, attempt, .. } => (*run, *attempt),
            other => panic!("not claimed: {other:?}"),
        }
    };
    let (run, row) = claim(gpu_run(serde_json::json!({"y": "digit", "dl.backend": "auto"})), 0);
    assert_eq!((row.gpus, row.gpus()), (Some(0), 0));
    assert_eq!(run.params()["dl.backend"], "cpu", "the run records the backend it uses");
    let keys = serde_json::to_value(&run).expect("json")["param_keys"].clone();
    assert!(keys.as_array().is_some_and(|k| k.contains(&"dl.backend=cpu".into())), "{keys}");
    let [warning] = run.warnings() else { panic!("one warning: {:?}", run.warnings()) };
    assert_eq!((warning.code, warning.attempt), (mapi_domain::WarningCode::GpuUnavailable, AttemptNo::FIRST));
    assert!(warning.message.contains("runs on the CPU"), "{}", warning.message);

    // Charged the class's vCPUs and memory for its wall time, no accelerator-seconds.
    let step =
        commands::record_execution(run, row, &handle(), Reason::ExecutionCreated, at(2)).expect("legal");
    let (run, row) = (step.run().cloned().expect("run"), step.attempt().cloned().expect("row"));
    let run = commands::request_cancel(run, Some(&row), at(3)).expect("cancel").run().cloned().expect("run");
    let status = ExecutionStatus::Cancelled { exit_code: None };
    let decided = verdict(&run, &row, None, None, &status, at(13), RULES).expect("decided");
    let execution = info(status);
    let ended = Ended {
        run,
        row,
        execution: &execution,
        verdict: decided,
        ledger_seen: false,
        version: None,
        budgets: Vec::new(),
        aggregate: None,
        now: at(13),
    };
    let f = commands::finalize(ended).expect("finalize");
    let on_cpu = mapi_cost::CURRENT.charge_used(ResourceClass::GPU, 0, 1, Duration::from_secs(10));
    assert_eq!((on_cpu.accelerator_ms, on_cpu.vcpu_ms), (0, 80_000));
    assert_eq!(f.amount_micros, on_cpu.amount_micros);
    let full = mapi_cost::CURRENT.charge(ResourceClass::GPU, 1, Duration::from_secs(10)).amount_micros;
    assert!(f.amount_micros < full, "{} < {full}", f.amount_micros);

    // With a GPU to give, the same run uses it and is warned of nothing.
    let (run, row) = claim(gpu_run(serde_json::json!({"y": "digit"})), 1);
    assert_eq!((row.gpus(), run.params()["dl.backend"].as_str()), (1, Some("gpu")));
    assert!(run.warnings().is_empty());
}
