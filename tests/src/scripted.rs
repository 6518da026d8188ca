//! A scripted executor and the internal calls that drive a platform started
//! without background work, so a suite decides when each attempt starts and
//! how it ends, in virtual time, with no processes.

use mapi_domain::outcome::exit;
use mapi_domain::{AttemptNo, ExecutionStatus, RunId, Timestamp};
use mapi_events::{AttemptKey, Event, EventBody, pubsub};
use mapi_executor::ExecutionInfo;
pub use mapi_executor::scripted::ScriptedExecutor;
use mapi_executor::scripted::handle_of;
use mapi_push_events::EVENTS_PATH;
use mapi_schema::AttemptDoc;
use mapi_schema::tasks::{DISPATCH_PATH, DispatchTask, FINALIZE_PATH, FinalizeTask};

use crate::TestPlatform;

/// The report of an attempt of `run` that ran from `started` to `finished`
/// and ended as `status`.
pub fn ended(
    run: &RunId,
    attempt: AttemptNo,
    task_count: u32,
    started: Timestamp,
    finished: Timestamp,
    status: ExecutionStatus,
) -> ExecutionInfo {
    ExecutionInfo {
        handle: handle_of(run, attempt),
        nonce: None,
        run: Some(run.clone()),
        created: started,
        started: Some(started),
        finished: Some(finished),
        task_count,
        status,
    }
}

/// How the suite ends an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Exits 0 after its complete event: the run succeeds.
    Succeed,
    /// The method reported an error: the run fails.
    MethodError,
    /// Killed for memory: retried once on the next larger class.
    OutOfMemory,
    /// Crashed: retried as an infrastructure failure.
    Crash,
    /// The executor lost it: retried as an infrastructure failure.
    Lose,
    /// Stopped through the executor's cancel.
    Cancelled,
}

impl Ending {
    pub const ALL: [Ending; 6] = [
        Ending::Succeed,
        Ending::MethodError,
        Ending::OutOfMemory,
        Ending::Crash,
        Ending::Lose,
        Ending::Cancelled,
    ];

    /// What the executor reports for it.
    pub fn status(self) -> ExecutionStatus {
        let failed = |code: i32| ExecutionStatus::Failed {
            exit_code: Some(code),
            signal: None,
            message: String::new(),
        };
        match self {
            Ending::Succeed => ExecutionStatus::Succeeded,
            Ending::MethodError => failed(exit::METHOD_ERROR),
            Ending::OutOfMemory => failed(exit::OOM),
            Ending::Crash => failed(70),
            Ending::Lose => ExecutionStatus::NotFound,
            Ending::Cancelled => ExecutionStatus::Cancelled { exit_code: Some(exit::SIGTERM) },
        }
    }
}

impl TestPlatform {
    /// Ends `attempt` of `run` (already dispatched, started at `started`)
    /// as `ending` at the clock's now: the complete event first when it
    /// succeeded, then the finalize task. The meter's answer.
    pub async fn end_attempt(
        &self,
        run: &RunId,
        attempt: AttemptNo,
        task_count: u32,
        started: Timestamp,
        ending: Ending,
    ) -> (u16, serde_json::Value) {
        if ending == Ending::Succeed {
            self.complete(run, attempt).await;
        }
        let now = self.platform.state.clock.now();
        self.finalize(run, attempt, ended(run, attempt, task_count, started, now, ending.status())).await
    }

    async fn internal(&self, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
        let internal = self.platform.state.config.secrets.internal_token.clone();
        self.call(&internal, reqwest::Method::POST, path, Some(body)).await
    }

    /// Records passing conformance and security reports for the executor's
    /// current caps as `operator`, opening shared tiers (verified, public)
    /// on it, as the nightly suites do in a deployment.
    pub async fn open_shared_tiers(&self, operator: &str) {
        use mapi_executor::evidence::{
            CaseResult, ConformanceReport, Evidence, EvidenceTarget, ProbeResult, REQUIRED_PROBES,
            SecurityReport,
        };
        let caps = self.platform.state.executor.capabilities();
        let now = self.platform.state.clock.now();
        let evidence = Evidence {
            target: EvidenceTarget {
                executor: caps.executor.clone(),
                remote_control_api: caps.remote_control_api,
                enforces_memory_limit: caps.enforces_memory_limit,
                caps: caps.clone(),
            },
            conformance: ConformanceReport {
                executor: caps.executor.clone(),
                finished_at: now,
                cases: mapi_executor::conformance_cases::CASES
                    .iter()
                    .map(|n| CaseResult { name: (*n).to_owned(), passed: true, detail: None })
                    .collect(),
            },
            security: SecurityReport {
                finished_at: now,
                probes: REQUIRED_PROBES
                    .iter()
                    .map(|n| ProbeResult { name: (*n).to_owned(), ran: true, blocked: true, detail: None })
                    .collect(),
            },
        };
        let path = format!("/v1/admin/executors/{}/evidence", caps.executor);
        let body = serde_json::to_value(evidence).expect("json");
        let (s, b) = self.call(operator, reqwest::Method::PUT, &path, Some(body)).await;
        assert_eq!((s, &b["shared_tiers_enabled"]), (200, &serde_json::json!(true)), "evidence: {b}");
    }

    /// Delivers the dispatch task of `attempt` of `run`, as the queue would.
    pub async fn dispatch(&self, run: &RunId, attempt: AttemptNo) -> (u16, serde_json::Value) {
        let task = DispatchTask { run: run.clone(), attempt };
        self.internal(DISPATCH_PATH, serde_json::to_value(task).expect("json")).await
    }

    /// Pushes the signed `complete` event of task 0 of an attempt, as its
    /// worker would print it and Pub/Sub would push it.
    pub async fn complete(&self, run: &RunId, attempt: AttemptNo) {
        let store = &*self.platform.state.store;
        let a: AttemptDoc = mapi_schema::get(store, &AttemptDoc::id_of(run, attempt))
            .await
            .expect("read the attempt")
            .expect("the attempt was dispatched");
        let key = AttemptKey::from_hex(&a.event_key).expect("event key");
        let now = self.platform.state.clock.now();
        let event = Event {
            v: 1,
            run: run.clone(),
            attempt,
            task: 0,
            seq: 1,
            at: now,
            body: EventBody::Complete { outputs: None },
        };
        let signed = serde_json::to_value(mapi_events::sign(event, &key)).expect("json");
        let handle = a.handle.expect("the attempt has an execution").0;
        let entry = pubsub::log_entry(
            &serde_json::json!({ "mapi_event": signed }),
            &handle,
            "scripted",
            "local",
            now,
            &format!("{run}-{attempt}"),
        );
        let envelope = pubsub::envelope(&entry, "projects/local/subscriptions/events", "m", now);
        let (s, b) = self.internal(EVENTS_PATH, serde_json::to_value(envelope).expect("json")).await;
        assert_eq!((s, b["disposition"].as_str()), (200, Some("applied")), "complete event: {b}");
    }

    /// Delivers the finalize task of an attempt, as the reconciler would.
    pub async fn finalize(
        &self,
        run: &RunId,
        attempt: AttemptNo,
        execution: ExecutionInfo,
    ) -> (u16, serde_json::Value) {
        let task = FinalizeTask { run: run.clone(), attempt, execution };
        self.internal(FINALIZE_PATH, serde_json::to_value(task).expect("json")).await
    }
}

/// A seeded generator (the workspace's SplitMix64), so a failing case names its seed.
#[derive(Debug, Clone)]
pub struct Rng(mapi_entropy::SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(mapi_entropy::SplitMix64::new(seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }

    /// True with probability `p_percent` %.
    pub fn chance(&mut self, p_percent: u64) -> bool {
        self.below(100) < p_percent
    }

    /// Shuffles `items` in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = usize::try_from(self.below(i as u64 + 1)).expect("index");
            items.swap(i, j);
        }
    }
}
