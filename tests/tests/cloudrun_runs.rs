//! Run-level cases that need Cloud Run's own behaviour, on the platform
//! configured with `MAPI_EXECUTOR=cloudrun-jobs` over FakeCloudRun: orphan
//! adoption after a lost `jobs.run` answer, 429 back-off and the run sent
//! back to the queue, OOM reported as signal 9, a vanished execution
//! confirmed gone before its retry, stalled-not-lost, and the dispatch
//! lease renewed while a submit waits for its slot. Each asserts the exact
//! sequence of run states.

use std::sync::Arc;
use std::time::Duration;

use mapi_clock::{Clock, VirtualClock};
use mapi_domain::{AttemptNo, RunId, Timestamp};
use mapi_schema::AttemptDoc;
use mapi_tests::backend::{Backend, Rig, start};
use mapi_tests::fake_cloudrun::Fault;
use mapi_tests::{Options, path, retried_once, transitions, with_start};
use serde_json::json;

const LONGLEY: &str = include_str!("../../examples/longley.csv");

const SUCCEEDED: (&str, &str, &str) = ("running", "succeeded", "completed");

async fn rig(extra: &[(&str, &str)]) -> Rig {
    start(Backend::CloudRunJobs, extra, Options::default()).await
}

async fn fit(r: &Rig) -> String {
    let ds = r.upload(LONGLEY).await;
    r.submit(
        json!({"method": "tabular.linear", "dataset": ds, "params": {"y": "employed"}, "timeout_s": 120}),
    )
    .await
}

fn executions_of(r: &Rig, run: &str) -> usize {
    r.fake().executions().iter().filter(|(_, _, id)| id == run).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_jobs_run_answer_is_adopted_by_the_next_delivery_not_submitted_again() {
    let r = rig(&[]).await;
    // The answer is lost and the executor's own look finds nothing (the
    // listing fails): the dispatcher gives the attempt back; the next
    // delivery adopts the execution by nonce.
    r.fake().inject(Fault::LoseResponse);
    r.fake().inject(Fault::ListUnavailable);
    let id = fit(&r).await;
    let run = r.wait_final(&id).await;
    assert_eq!(
        transitions(&run),
        path(&[
            ("·", "queued", "submitted"),
            ("queued", "dispatching", "intent_written"),
            ("dispatching", "running", "adopted"),
            ("running", "succeeded", "completed"),
        ])
    );
    assert_eq!(executions_of(&r, &id), 1, "exactly one execution");
    let runs = r.fake().calls().into_iter().filter(|c| c.path.ends_with(":run")).count();
    assert_eq!(runs, 1, "jobs.run was never sent blind a second time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_makes_a_run_late_and_counts_every_429() {
    let r = rig(&[]).await;
    r.fake().inject(Fault::Throttle { retry_after_s: 0 });
    r.fake().inject(Fault::Throttle { retry_after_s: 1 });
    let id = fit(&r).await;
    let run = r.wait_final(&id).await;
    assert_eq!(transitions(&run), with_start(&[SUCCEEDED]));
    assert_eq!(executions_of(&r, &id), 1);
    let metrics = r.http.get(r.url("/metrics")).send().await.expect("metrics").text().await.expect("text");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("mapi_executor_submit_throttled_total{executor=\"cloudrun-jobs\"} 2")),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_429s_send_the_run_back_to_the_queue_without_an_infrastructure_retry() {
    let r = rig(&[("MAPI_CLOUDRUN_MAX_429_RETRIES", "1"), ("MAPI_CLOUDRUN_BACKOFF_BASE_S", "1")]).await;
    for _ in 0..2 {
        r.fake().inject(Fault::Throttle { retry_after_s: 1 });
    }
    let id = fit(&r).await;
    // Back in the queue, the run says why it waits (the queue delivers again after a second).
    let waited = r
        .wait_run(&id, std::time::Duration::from_secs(30), |run| {
            run["waiting"]["reason"].as_str().is_some() || run["state"] == "succeeded"
        })
        .await;
    let reason = waited["waiting"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("cooling down after answering 429"), "{waited:#}");
    let run = r.wait_final(&id).await;
    assert!(run.get("waiting").is_none(), "a started run waits for nothing: {run:#}");
    assert_eq!(
        transitions(&run),
        path(&[
            ("·", "queued", "submitted"),
            ("queued", "dispatching", "intent_written"),
            ("dispatching", "queued", "throttled"),
            ("queued", "dispatching", "intent_written"),
            ("dispatching", "running", "execution_created"),
            ("running", "succeeded", "completed"),
        ])
    );
    assert_eq!(run["attempts"].as_array().map(Vec::len), Some(1), "the same attempt, not a retry");
    assert_eq!(executions_of(&r, &id), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_memory_reported_as_signal_9_retries_on_the_next_class() {
    let r = rig(&[]).await;
    r.fake().inject(Fault::OutOfMemory { signal: true });
    let id = fit(&r).await;
    let run = r.wait_final(&id).await;
    assert_eq!(transitions(&run), retried_once("resource_exhausted", SUCCEEDED));
    let attempts = run["attempts"].as_array().expect("attempts");
    assert_eq!(attempts[0]["status"]["signal"], 9, "{run:#}");
    assert!(attempts[0]["status"]["exit_code"].is_null());
    let jobs: Vec<String> = r.fake().executions().iter().map(|(n, _, _)| n.clone()).collect();
    assert!(
        jobs[0].contains("/jobs/mapi-test-base-bayes-s/")
            && jobs[1].contains("/jobs/mapi-test-base-bayes-m/"),
        "{jobs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_resumes_from_the_checkpoint_the_killed_attempt_flushed() {
    let r = rig(&[]).await;
    r.fake().inject(Fault::OutOfMemory { signal: false });
    let ds = r.upload(LONGLEY).await;
    let params = json!({"seconds": 4, "checkpoint_every_s": 0.1});
    let id = r.submit(json!({"method": "diag.sleep", "dataset": ds, "params": params})).await;
    let run = r.wait_final(&id).await;
    assert_eq!(transitions(&run), retried_once("resource_exhausted", SUCCEEDED));
    let out = run["outputs"].as_array().expect("outputs").first().expect("one output").clone();
    let result: serde_json::Value =
        r.output(out["url"].as_str().expect("url")).await.json().await.expect("json");
    let resumed = result["resumed_from_s"].as_f64().expect("resumed_from_s");
    assert!(resumed > 0.1, "the second attempt started from the first one's checkpoint: {result}");
    let this = result["this_attempt_s"].as_f64().expect("this_attempt_s");
    assert!(this < 4.0 - resumed + 1.0, "the second attempt slept only the rest: {result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_execution_is_confirmed_gone_before_the_retry() {
    let r = rig(&[]).await;
    r.fake().inject(Fault::Vanish);
    let id = fit(&r).await;
    let run = r.wait_final(&id).await;
    // The retry's execution may speak before its submit's answer is
    // recorded: the event then adopts it (`adopted`), an equal start.
    let started = |(from, to, why): (String, String, String)| {
        let why = if (from.as_str(), to.as_str(), why.as_str()) == ("dispatching", "running", "adopted") {
            "execution_created".to_owned()
        } else {
            why
        };
        (from, to, why)
    };
    let path: Vec<_> = transitions(&run).into_iter().map(started).collect();
    assert_eq!(path, retried_once("infrastructure_failure", SUCCEEDED));
    let calls = r.fake().calls();
    let first = r.fake().executions()[0].0.rsplit('/').next().unwrap_or_default().to_owned();
    let cancel =
        calls.iter().position(|c| c.path.ends_with(&format!("{first}:cancel"))).expect("cancel sent");
    let second_run =
        calls.iter().enumerate().filter(|(_, c)| c.path.ends_with(":run")).nth(1).expect("retry").0;
    assert!(cancel < second_run, "the cancel confirming the loss came before the retry's jobs.run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_without_events_is_stalled_not_lost() {
    let r = rig(&[("MAPI_STALL_AFTER_S", "1")]).await;
    r.fake().without_processes();
    let id = fit(&r).await;
    let run = r.wait_run(&id, Duration::from_secs(30), |v| v["stalled"] == true).await;
    assert_eq!(run["state"], "running", "no events marks the run stalled; the executor says it is alive");
    assert_eq!(r.cancel(r.token(), &id).await.0, 202);
    let run = r.wait_final(&id).await;
    assert_eq!(
        transitions(&run),
        with_start(&[
            ("running", "cancelling", "cancel_requested"),
            ("cancelling", "cancelled", "cancel_confirmed")
        ])
    );
}

/// Moves the virtual clock in 1 s steps until `done` holds, letting the
/// platform work between steps.
async fn advance_until(
    clock: &VirtualClock,
    limit: Duration,
    mut step: impl AsyncFnMut() -> bool,
) -> Duration {
    let start = clock.now();
    loop {
        if step().await {
            return clock.now().since(start);
        }
        assert!(clock.now().since(start) < limit, "not done after {limit:?} of virtual time");
        clock.advance(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dispatch_lease_is_renewed_while_a_submit_waits_for_its_slot() {
    let clock = Arc::new(VirtualClock::new(Timestamp::from_secs(1_800_000_000)));
    let options =
        Options { background: false, clock: clock.clone(), executor: None, queue: None, entropy: None };
    let r = start(
        Backend::CloudRunJobs,
        &[
            ("MAPI_CLOUDRUN_SUBMITS_PER_MINUTE", "1"),
            ("MAPI_CLOUDRUN_SUBMIT_BURST", "1"),
            ("MAPI_CLOUDRUN_MAX_SUBMIT_WAIT_S", "120"),
            ("MAPI_DISPATCH_LEASE_S", "6"),
        ],
        options,
    )
    .await;
    r.fake().without_processes();
    let first = RunId::parse(&fit(&r).await).expect("id");
    let second = RunId::parse(&fit(&r).await).expect("id");
    let (s, _) = r.dispatch(&first, AttemptNo::FIRST).await;
    assert_eq!(s, 200);
    // The second waits a minute of virtual time for the bucket's next slot.
    let waiting = {
        let p = r.platform.http.clone();
        let (url, token) = (
            r.url(mapi_schema::tasks::DISPATCH_PATH),
            r.platform.platform.state.config.secrets.internal_token.clone(),
        );
        let body = json!({"run": second.to_string(), "attempt": 1});
        tokio::spawn(async move {
            p.post(url).bearer_auth(token).json(&body).send().await.map(|r| r.status().as_u16())
        })
    };
    let store = r.platform.platform.state.store.clone();
    let id = AttemptDoc::id_of(&second, AttemptNo::FIRST);
    let read = async || -> Option<AttemptDoc> { mapi_schema::get(&*store, &id).await.expect("read") };
    let waited = advance_until(&clock, Duration::from_secs(90), async || {
        let Some(mut a) = read().await else { return false };
        // Renewals are due every 2 s of a 6 s lease: one second or less left means a renewal is
        // late in real time (a busy machine), so virtual time waits for it, up to 10 s.
        let patience = std::time::Instant::now() + Duration::from_secs(10);
        while a.handle.is_none()
            && a.lease_until <= clock.now() + Duration::from_secs(1)
            && std::time::Instant::now() < patience
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
            a = read().await.expect("the attempt");
        }
        if a.handle.is_some() {
            return true;
        }
        assert!(a.lease_until > clock.now(), "the lease lapsed while the submit waited: {a:?}");
        // The reconciler sees a live lease and leaves the attempt alone.
        let (_, tick) = r
            .call(
                &r.platform.platform.state.config.secrets.internal_token,
                reqwest::Method::POST,
                "/internal/tick",
                Some(json!({})),
            )
            .await;
        assert_eq!(tick["redispatched"], 0, "{tick}");
        false
    })
    .await;
    assert!(waited >= Duration::from_secs(59), "the slot is a minute after the first: {waited:?}");
    assert_eq!(waiting.await.expect("join").expect("answer"), 200);
    let run: mapi_lifecycle::RunDoc =
        mapi_schema::get(&*store, second.as_str()).await.expect("read").expect("run");
    assert_eq!(run.state(), mapi_domain::RunState::Running);
    assert_eq!(r.fake().executions().len(), 2, "one execution per run");
}
