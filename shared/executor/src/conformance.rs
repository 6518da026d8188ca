//! The Executor conformance suite. Each case drives an executor through a
//! [`Harness`] that can make the worker do something specific (the harness
//! prepares each attempt's bootstrap), and checks what the executor reports.

use std::time::Duration;

use async_trait::async_trait;
use mapi_domain::{AttemptNo, ExecutionStatus, Nonce, ResourceClass, RunId, Timestamp, exit};

use crate::{AttemptSubmit, ExecutionHandle, ExecutionInfo, Executor, Forgot, adopt};

pub mod ports;

/// What the worker of a prepared attempt should do.
#[derive(Clone, Debug, PartialEq)]
pub enum Behaviour {
    /// Finish at once, successfully.
    Succeed,
    /// Fail with a method error.
    Fail,
    /// Sleep this long, checkpointing if asked.
    Sleep { seconds: f64, checkpoint: bool },
    /// Sleep this long, printing nothing after the method's first progress report.
    Silent { seconds: f64 },
    /// Allocate this many MiB and hold them.
    Allocate { mib: u64 },
    /// Sleep `seconds` in all, resuming from a checkpoint an earlier attempt left at `from_s`.
    Resume { seconds: f64, from_s: f64 },
    /// Run the security suite's probes (see [`crate::security`]).
    Probe(Box<crate::security::Plan>),
}

/// Connects the suite to one executor and the platform side it needs.
#[async_trait]
pub trait Harness: Send + Sync {
    fn executor(&self) -> &dyn Executor;
    /// Makes the attempt's worker behave as asked (writes its bootstrap).
    async fn prepare(&self, submit: &AttemptSubmit, behaviour: Behaviour);
    /// The smallest memory limit, in MiB, the executor applies to class S.
    fn class_s_memory_mib(&self) -> u64;
    /// Whether task `task`'s bootstrap object of the attempt still exists.
    async fn bootstrap_present(&self, submit: &AttemptSubmit, task: u32) -> bool;
    /// How many objects the attempt's tasks wrote (outputs, checkpoints).
    async fn written(&self, submit: &AttemptSubmit) -> usize;
    /// The output `name` task `task` of the attempt wrote, if it wrote it.
    async fn output(&self, submit: &AttemptSubmit, task: u32, name: &str) -> Option<Stored>;
    /// Whether 429 answers can be made to come from the executor's API, and how.
    fn throttling(&self) -> Throttling;
    /// Makes the next `answers` submits to the executor's API answer 429 (only where
    /// [`Harness::throttling`] says they can be injected).
    async fn throttle_next(&self, answers: u32);
    fn now(&self) -> Timestamp;
}

/// An object as stored: its generation and bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub generation: i64,
    pub bytes: Vec<u8>,
}

/// How an executor's API can be made to throttle, for the 429 case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Throttling {
    /// 429s can be injected; the executor gives up a submit after this many in a row.
    Injectable { max_429_retries: u32 },
    /// The executor starts its executions itself, behind no rate-limited API: a submit is never
    /// answered `Throttled` (the port's promise for local executors).
    NeverThrottles,
    /// The executor's API is rate limited but 429s cannot be made to come from here (the real
    /// Cloud Run): the case cannot run, which is not a pass.
    CannotInject,
}

/// A fresh attempt to submit: its nonce and run id are random (`n` leads the run id's entropy,
/// for a reader of the logs), so suites run again against one executor never meet an
/// execution of an earlier run.
pub fn attempt(n: u8, timeout: Duration, task_count: u32) -> AttemptSubmit {
    let mut entropy = [0u8; 26];
    getrandom::fill(&mut entropy).unwrap_or_else(|e| panic!("entropy: {e}"));
    entropy[16] = n;
    let nonce = Nonce::from_bytes(entropy[..16].try_into().unwrap_or([n; 16]));
    let run =
        RunId::generate(Timestamp::from_secs(1_800_000_000), entropy[16..].try_into().unwrap_or([n; 10]));
    let mut env = std::collections::BTreeMap::new();
    env.insert("MAPI_RUN_ID".to_owned(), run.to_string());
    env.insert("MAPI_NONCE".to_owned(), nonce.to_string());
    AttemptSubmit {
        run,
        attempt: AttemptNo::FIRST,
        nonce,
        class: ResourceClass::S,
        method: "diag.sleep".to_owned(),
        base: None,
        timeout,
        task_count,
        env,
    }
}

/// Polls until the execution is no longer running (bounded: 60 s).
pub async fn wait_done(h: &dyn Harness, handle: &ExecutionHandle) -> ExecutionInfo {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let info = h.executor().status(handle).await.expect("status");
        if info.status != ExecutionStatus::Running {
            return info;
        }
        assert!(std::time::Instant::now() < deadline, "execution {handle} did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn submit_runs_to_success(h: &dyn Harness) {
    let a = attempt(1, Duration::from_secs(30), 1);
    h.prepare(&a, Behaviour::Succeed).await;
    let handle = h.executor().submit(&a).await.expect("submit");
    let info = wait_done(h, &handle).await;
    assert_eq!(info.status, ExecutionStatus::Succeeded);
    assert_eq!(info.nonce.as_ref(), Some(&a.nonce));
    assert!(info.started.is_some() && info.finished.is_some());
    assert!(info.finished >= info.started);
}

pub async fn method_failure_is_reported(h: &dyn Harness) {
    let a = attempt(2, Duration::from_secs(30), 1);
    h.prepare(&a, Behaviour::Fail).await;
    let handle = h.executor().submit(&a).await.expect("submit");
    match wait_done(h, &handle).await.status {
        ExecutionStatus::Failed { exit_code, .. } => assert_eq!(exit_code, Some(exit::METHOD_ERROR)),
        s => panic!("expected a failure, got {s:?}"),
    }
}

pub async fn adoption_finds_the_execution_by_nonce(h: &dyn Harness) {
    let since = h.now();
    let a = attempt(3, Duration::from_secs(30), 1);
    h.prepare(&a, Behaviour::Sleep { seconds: 0.5, checkpoint: false }).await;
    let handle = h.executor().submit(&a).await.expect("submit");
    let found = adopt(h.executor(), &a.nonce, since).await.expect("adopt").expect("found by nonce");
    assert_eq!(found.handle, handle);
    let other = Nonce::from_bytes([99; 16]);
    assert!(adopt(h.executor(), &other, since).await.expect("adopt").is_none());
    wait_done(h, &handle).await;
}

pub async fn duplicate_submits_are_reduced_to_the_oldest(h: &dyn Harness) {
    let since = h.now();
    let a = attempt(4, Duration::from_secs(30), 1);
    h.prepare(&a, Behaviour::Sleep { seconds: 2.0, checkpoint: false }).await;
    let first = h.executor().submit(&a).await.expect("submit");
    let second = h.executor().submit(&a).await.expect("duplicate submit");
    assert_ne!(first, second);
    let kept = adopt(h.executor(), &a.nonce, since).await.expect("adopt").expect("found");
    assert_eq!(kept.handle, first, "the oldest execution is kept");
    let dup = wait_done(h, &second).await;
    assert!(
        matches!(dup.status, ExecutionStatus::Cancelled { .. } | ExecutionStatus::Succeeded),
        "the duplicate is cancelled or found no bootstrap and did nothing: {:?}",
        dup.status
    );
    assert_eq!(wait_done(h, &first).await.status, ExecutionStatus::Succeeded);
}

pub async fn cancel_stops_a_running_execution(h: &dyn Harness) {
    let a = attempt(5, Duration::from_secs(60), 1);
    h.prepare(&a, Behaviour::Sleep { seconds: 30.0, checkpoint: false }).await;
    let handle = h.executor().submit(&a).await.expect("submit");
    h.executor().cancel(&handle).await.expect("cancel");
    h.executor().cancel(&handle).await.expect("cancel is idempotent");
    assert!(matches!(wait_done(h, &handle).await.status, ExecutionStatus::Cancelled { .. }));
}

pub async fn cancel_after_a_checkpoint_reports_exit_16(h: &dyn Harness) {
    let a = attempt(6, Duration::from_secs(60), 1);
    h.prepare(&a, Behaviour::Sleep { seconds: 30.0, checkpoint: true }).await;
    let handle = h.executor().submit(&a).await.expect("submit");
    tokio::time::sleep(Duration::from_millis(700)).await;
    h.executor().cancel(&handle).await.expect("cancel");
    assert_eq!(
        wait_done(h, &handle).await.status,
        ExecutionStatus::Cancelled { exit_code: Some(exit::CHECKPOINTED) }
    );
}

pub async fn timeout_is_enforced(h: &dyn Harness) {
    let a = attempt(7, Duration::from_secs(1), 1);
    h.prepare(&a, Behaviour::Sleep { seconds: 30.0, checkpoint: false }).await;
    let handle = h.executor().submit(&a).await.expect("submit");
    match wait_done(h, &handle).await.status {
        ExecutionStatus::Failed { exit_code, .. } => assert_eq!(exit_code, Some(exit::SIGTERM)),
        s => panic!("expected a timeout, got {s:?}"),
    }
}

pub async fn memory_limit_kills_with_137(h: &dyn Harness) {
    let a = attempt(8, Duration::from_secs(60), 1);
    h.prepare(&a, Behaviour::Allocate { mib: h.class_s_memory_mib() * 2 }).await;
    let handle = h.executor().submit(&a).await.expect("submit");
    let status = wait_done(h, &handle).await.status;
    let outcome = mapi_domain::classify(&status);
    assert_eq!(outcome, Some(mapi_domain::AttemptOutcome::OutOfMemory), "{status:?}");
}

pub async fn fan_out_runs_every_task(h: &dyn Harness) {
    let a = attempt(9, Duration::from_secs(30), 3);
    h.prepare(&a, Behaviour::Succeed).await;
    let handle = h.executor().submit(&a).await.expect("submit");
    let info = wait_done(h, &handle).await;
    assert_eq!((info.task_count, info.status), (3, ExecutionStatus::Succeeded));
}

/// The bootstrap is taken once: a worker takes its bootstrap by reading it and
/// deleting exactly the generation it read, so the bootstrap is gone after
/// the first execution and a second execution of the same nonce finds
/// nothing, writes nothing and exits cleanly.
pub async fn the_bootstrap_is_taken_once(h: &dyn Harness) {
    let a = attempt(10, Duration::from_secs(30), 1);
    h.prepare(&a, Behaviour::Succeed).await;
    assert!(h.bootstrap_present(&a, 0).await, "prepared");
    let first = h.executor().submit(&a).await.expect("submit");
    assert_eq!(wait_done(h, &first).await.status, ExecutionStatus::Succeeded);
    assert!(!h.bootstrap_present(&a, 0).await, "the worker deleted the generation it read");
    let wrote = h.written(&a).await;
    assert!(wrote > 0, "the first execution wrote its outputs");
    let second = h.executor().submit(&a).await.expect("duplicate submit");
    assert_eq!(wait_done(h, &second).await.status, ExecutionStatus::Succeeded, "a duplicate exits cleanly");
    assert_eq!(h.written(&a).await, wrote, "the duplicate did no work");
}

/// Checkpoint resume: an attempt given the checkpoint an earlier attempt flushed starts from it
/// and does only the rest (`diag.sleep` reports where it resumed).
pub async fn a_checkpoint_is_resumed_from(h: &dyn Harness) {
    let a = attempt(14, Duration::from_secs(30), 1);
    h.prepare(&a, Behaviour::Resume { seconds: 1.0, from_s: 0.75 }).await;
    let handle = h.executor().submit(&a).await.expect("submit");
    assert_eq!(wait_done(h, &handle).await.status, ExecutionStatus::Succeeded);
    let result = h.output(&a, 0, "result.json").await.expect("the sleep's result");
    let result: serde_json::Value = serde_json::from_slice(&result.bytes).expect("json");
    assert_eq!(result["resumed_from_s"], 0.75, "{result}");
    assert!(result["this_attempt_s"].as_f64().is_some_and(|s| s < 0.75), "only the rest was slept: {result}");
}

/// Generation verification, the executor's half: every output a task writes is reported in its
/// events with the generation and size it is stored at, which the finalization then checks and
/// pins (`mapi_lifecycle::compare_outputs`, the bundle's manifest).
pub async fn outputs_are_reported_at_the_generation_written(h: &dyn Harness) {
    let a = attempt(15, Duration::from_secs(30), 2);
    h.prepare(&a, Behaviour::Succeed).await;
    let handle = h.executor().submit(&a).await.expect("submit");
    assert_eq!(wait_done(h, &handle).await.status, ExecutionStatus::Succeeded);
    let lines = read_logs(h, &handle, None, crate::MAX_LOG_PAGE).await.lines;
    let reported: Vec<(u32, serde_json::Value)> = lines
        .iter()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(&l.text).ok()?;
            let e = v.get("mapi_event")?;
            (e["kind"] == "output").then(|| (l.task, e.clone()))
        })
        .collect();
    for task in 0..2 {
        assert!(reported.iter().any(|(t, _)| *t == task), "task {task} reported no output: {lines:?}");
    }
    for (task, e) in &reported {
        let name = e["name"].as_str().expect("an output event names its output");
        let stored =
            h.output(&a, *task, name).await.unwrap_or_else(|| panic!("{name} of task {task} is stored"));
        assert_eq!(e["generation"].as_i64(), Some(stored.generation), "task {task}'s {name}: {e}");
        assert_eq!(e["size"].as_u64(), Some(stored.bytes.len() as u64), "task {task}'s {name}: {e}");
    }
}

/// Stalled, not lost: an execution whose task prints nothing for a while is still reported
/// running, and then succeeded; liveness is the executor's report, never the events' silence.
pub async fn a_silent_execution_is_running_not_lost(h: &dyn Harness) {
    let a = attempt(16, Duration::from_secs(30), 1);
    h.prepare(&a, Behaviour::Silent { seconds: 3.0 }).await;
    let handle = h.executor().submit(&a).await.expect("submit");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let printed = read_logs(h, &handle, None, crate::MAX_LOG_PAGE).await.lines.len();
    for _ in 0..6 {
        let info = h.executor().status(&handle).await.expect("status");
        assert_eq!(info.status, ExecutionStatus::Running, "a silent execution is alive");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let quiet = read_logs(h, &handle, None, crate::MAX_LOG_PAGE).await.lines.len();
    assert_eq!(quiet, printed, "the task printed nothing meanwhile");
    assert_eq!(wait_done(h, &handle).await.status, ExecutionStatus::Succeeded);
}

/// Confirmed cancel before retry: once the executor reports an execution cancelled, its tasks are
/// stopped (they print and write nothing more), so a retry started then never runs beside it.
pub async fn a_cancelled_execution_is_stopped_when_reported(h: &dyn Harness) {
    let a = attempt(17, Duration::from_secs(60), 2);
    h.prepare(&a, Behaviour::Sleep { seconds: 30.0, checkpoint: true }).await;
    let handle = h.executor().submit(&a).await.expect("submit");
    tokio::time::sleep(Duration::from_millis(800)).await;
    h.executor().cancel(&handle).await.expect("cancel");
    assert!(matches!(wait_done(h, &handle).await.status, ExecutionStatus::Cancelled { .. }));
    let lines = read_logs(h, &handle, None, crate::MAX_LOG_PAGE).await.lines.len();
    let written = h.written(&a).await;
    // While they ran, the tasks printed progress every half second and a checkpoint event for
    // each checkpoint they wrote, every 0.2 s.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(read_logs(h, &handle, None, crate::MAX_LOG_PAGE).await.lines.len(), lines, "printed after");
    assert_eq!(h.written(&a).await, written, "wrote after the cancel was confirmed");
    assert!(matches!(
        h.executor().status(&handle).await.expect("status").status,
        ExecutionStatus::Cancelled { .. }
    ));
}

/// 429 back-off: where the executor's API throttles, a submit answered 429 waits and tries the
/// same attempt again, making exactly one execution; past its limit it answers `Throttled` having
/// made nothing, and the next submit makes the one execution. Where no API throttles, a burst of
/// submits is never answered `Throttled` and makes one execution each.
pub async fn throttled_submits_back_off_and_make_one_execution(h: &dyn Harness) {
    let since = h.now();
    match h.throttling() {
        Throttling::Injectable { max_429_retries } => {
            assert!(max_429_retries >= 1, "the harness allows at least one retry");
            let a = attempt(18, Duration::from_secs(30), 1);
            h.prepare(&a, Behaviour::Succeed).await;
            let before = h.executor().submit_health().throttled_last_hour;
            h.throttle_next(max_429_retries).await;
            let handle = h.executor().submit(&a).await.expect("a submit retried past its 429s");
            let health = h.executor().submit_health();
            assert_eq!(health.throttled_last_hour, before + u64::from(max_429_retries), "every 429 counted");
            let found = adopt(h.executor(), &a.nonce, since).await.expect("adopt").expect("made");
            assert_eq!(found.handle, handle, "one execution");
            assert_eq!(wait_done(h, &handle).await.status, ExecutionStatus::Succeeded);

            let b = attempt(19, Duration::from_secs(30), 1);
            h.prepare(&b, Behaviour::Succeed).await;
            h.throttle_next(max_429_retries + 1).await;
            match h.executor().submit(&b).await {
                Err(crate::SubmitError::Throttled { retry_after }) => {
                    assert!(retry_after.is_some(), "a throttled submit says when to come back")
                }
                other => panic!("past its limit a submit answers Throttled, got {other:?}"),
            }
            assert!(adopt(h.executor(), &b.nonce, since).await.expect("adopt").is_none(), "nothing made");
            let handle = h.executor().submit(&b).await.expect("the next submit");
            assert_eq!(wait_done(h, &handle).await.status, ExecutionStatus::Succeeded);
        }
        Throttling::NeverThrottles => {
            let burst: Vec<_> = (0..6).map(|i| attempt(20 + i, Duration::from_secs(30), 1)).collect();
            for a in &burst {
                h.prepare(a, Behaviour::Succeed).await;
            }
            let submits = burst.iter().map(|a| h.executor().submit(a));
            let handles = futures::future::join_all(submits).await;
            for (a, handle) in burst.iter().zip(handles) {
                let handle = handle.unwrap_or_else(|e| panic!("a local submit is never refused: {e:?}"));
                let found = adopt(h.executor(), &a.nonce, since).await.expect("adopt").expect("made");
                assert_eq!(found.handle, handle, "one execution per submit");
                assert_eq!(wait_done(h, &handle).await.status, ExecutionStatus::Succeeded);
            }
        }
        Throttling::CannotInject => panic!(
            "429s cannot be made to come from this executor's API here: the case runs against a fake of it \
             (the executor conformance tests), and is not passed without running"
        ),
    }
}

pub async fn unknown_executions_are_not_found(h: &dyn Harness) {
    let info = h.executor().status(&ExecutionHandle("exec-0-00000000".to_owned())).await.expect("status");
    assert_eq!(info.status, ExecutionStatus::NotFound);
    h.executor()
        .cancel(&ExecutionHandle("exec-0-00000000".to_owned()))
        .await
        .expect("cancel of unknown succeeds");
}

/// What the tasks printed is read back a page at a time: every task's lines, none twice, the
/// cursor at the end answering nothing new; unknown executions print nothing, and a cursor the
/// executor did not give out is refused as such.
pub async fn logs_page_through_what_the_tasks_printed(h: &dyn Harness) {
    let a = attempt(11, Duration::from_secs(30), 2);
    h.prepare(&a, Behaviour::Succeed).await;
    let handle = h.executor().submit(&a).await.expect("submit");
    assert_eq!(wait_done(h, &handle).await.status, ExecutionStatus::Succeeded);
    let whole = read_logs(h, &handle, None, crate::MAX_LOG_PAGE).await;
    assert!(!whole.lines.is_empty(), "the worker prints its events");
    for task in 0..2 {
        assert!(whole.lines.iter().any(|l| l.task == task), "task {task} printed nothing: {whole:?}");
    }
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..whole.lines.len() + 5 {
        let page = read_logs(h, &handle, cursor.as_deref(), 1).await;
        assert!(page.lines.len() <= 1, "a page holds at most the limit");
        paged.extend(page.lines);
        cursor = Some(page.cursor);
        if !page.more {
            break;
        }
    }
    assert_eq!(paged, whole.lines, "pages of one line read the same lines, once each");
    let after = read_logs(h, &handle, cursor.as_deref(), 10).await;
    assert!(after.lines.is_empty() && !after.more, "nothing after the end: {after:?}");
    let unknown = read_logs(h, &ExecutionHandle("exec-0-00000000".to_owned()), None, 10).await;
    assert!(unknown.lines.is_empty(), "an unknown execution printed nothing");
    let bad = h.executor().logs(&handle, Some("not-a-cursor!"), 10).await;
    assert!(matches!(bad, Err(crate::ExecutorError::Cursor(_))), "{bad:?}");
}

/// A finished execution is forgotten (local: once its events are forwarded, which the harness's
/// forwarder does within seconds): its status is then `NotFound` and its logs an empty page, and
/// forgetting it again, or forgetting an unknown execution, succeeds.
pub async fn forgetting_removes_a_finished_execution(h: &dyn Harness) {
    let a = attempt(12, Duration::from_secs(30), 1);
    h.prepare(&a, Behaviour::Succeed).await;
    let handle = h.executor().submit(&a).await.expect("submit");
    assert_eq!(wait_done(h, &handle).await.status, ExecutionStatus::Succeeded);
    assert!(!read_logs(h, &handle, None, 10).await.lines.is_empty(), "the worker printed its events");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while h.executor().forget(&handle).await.expect("forget") == Forgot::Kept {
        assert!(std::time::Instant::now() < deadline, "finished execution {handle} was never forgotten");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(h.executor().status(&handle).await.expect("status").status, ExecutionStatus::NotFound);
    let logs = read_logs(h, &handle, None, 10).await;
    assert!(logs.lines.is_empty() && !logs.more, "a forgotten execution has no logs: {logs:?}");
    assert_eq!(h.executor().forget(&handle).await.expect("forget again"), Forgot::Gone);
    let unknown = ExecutionHandle("exec-0-00000000".to_owned());
    assert_eq!(h.executor().forget(&unknown).await.expect("forget unknown"), Forgot::Gone);
}

/// A running execution is not forgotten: it is kept, and runs on to its end.
pub async fn forgetting_keeps_a_running_execution(h: &dyn Harness) {
    let a = attempt(13, Duration::from_secs(60), 1);
    h.prepare(&a, Behaviour::Sleep { seconds: 1.5, checkpoint: false }).await;
    let handle = h.executor().submit(&a).await.expect("submit");
    assert_eq!(h.executor().forget(&handle).await.expect("forget"), Forgot::Kept);
    assert_eq!(h.executor().status(&handle).await.expect("status").status, ExecutionStatus::Running);
    assert_eq!(wait_done(h, &handle).await.status, ExecutionStatus::Succeeded, "it ran to its end");
}

async fn read_logs(
    h: &dyn Harness,
    handle: &ExecutionHandle,
    cursor: Option<&str>,
    limit: usize,
) -> crate::LogPage {
    h.executor().logs(handle, cursor, limit).await.expect("logs")
}

/// Runs every case in order against `h` and reports each, a panic as a
/// failure with its message: the report `PUT …/evidence` records.
pub async fn run_all(h: &dyn Harness, now: impl Fn() -> Timestamp) -> crate::evidence::ConformanceReport {
    use futures::FutureExt;
    macro_rules! cases {
        ($($case:ident),+) => {{
            let mut out = Vec::new();
            $(
                let r = std::panic::AssertUnwindSafe($case(h)).catch_unwind().await;
                out.push(crate::evidence::CaseResult {
                    name: stringify!($case).to_owned(),
                    passed: r.is_ok(),
                    detail: r.err().map(|p| {
                        p.downcast_ref::<String>().cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                            .unwrap_or_else(|| "panicked".to_owned())
                    }),
                });
            )+
            out
        }};
    }
    let cases = cases!(
        submit_runs_to_success,
        method_failure_is_reported,
        adoption_finds_the_execution_by_nonce,
        duplicate_submits_are_reduced_to_the_oldest,
        cancel_stops_a_running_execution,
        cancel_after_a_checkpoint_reports_exit_16,
        timeout_is_enforced,
        memory_limit_kills_with_137,
        fan_out_runs_every_task,
        the_bootstrap_is_taken_once,
        a_checkpoint_is_resumed_from,
        outputs_are_reported_at_the_generation_written,
        a_silent_execution_is_running_not_lost,
        a_cancelled_execution_is_stopped_when_reported,
        throttled_submits_back_off_and_make_one_execution,
        unknown_executions_are_not_found,
        logs_page_through_what_the_tasks_printed,
        forgetting_removes_a_finished_execution,
        forgetting_keeps_a_running_execution
    );
    crate::evidence::ConformanceReport {
        executor: h.executor().capabilities().executor,
        finished_at: now(),
        cases,
    }
}

/// Expands to one test per case; `$make` is an async expression evaluating
/// to a value that implements [`Harness`].
#[macro_export]
macro_rules! executor_conformance_suite {
    ($make:expr) => {
        $crate::executor_conformance_suite!(@cases $make; submit_runs_to_success, method_failure_is_reported,
            adoption_finds_the_execution_by_nonce, duplicate_submits_are_reduced_to_the_oldest,
            cancel_stops_a_running_execution, cancel_after_a_checkpoint_reports_exit_16, timeout_is_enforced,
            memory_limit_kills_with_137, fan_out_runs_every_task, the_bootstrap_is_taken_once,
            a_checkpoint_is_resumed_from, outputs_are_reported_at_the_generation_written,
            a_silent_execution_is_running_not_lost, a_cancelled_execution_is_stopped_when_reported,
            throttled_submits_back_off_and_make_one_execution, unknown_executions_are_not_found,
            logs_page_through_what_the_tasks_printed,
            forgetting_removes_a_finished_execution, forgetting_keeps_a_running_execution);
    };
    (@cases $make:expr; $($case:ident),+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let harness = $make;
                $crate::conformance::$case(&harness).await;
            }
        )+
    };
}
