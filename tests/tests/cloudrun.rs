//! The cloudrun-jobs executor against FakeCloudRun: what `jobs.run` carries,
//! the 429 back-off, lost and unclear answers, OOM by signal, vanished
//! executions and placement. Waits run on a virtual clock that a driver
//! moves to the next sleeper, so back-offs of seconds take milliseconds.

use std::sync::Arc;
use std::time::Duration;

use mapi_clock::{Clock, VirtualClock};
use mapi_cloudrun::{CloudRunJobsExecutor, Credentials, Settings};
use mapi_domain::{AttemptOutcome, ExecutionStatus, ResourceClass, Timestamp, classify};
use mapi_executor::conformance::attempt;
use mapi_executor::{Executor, SubmitError};
use mapi_tests::fake_cloudrun::{FakeCloudRun, Fault};
use prometheus_client::metrics::counter::Counter;

struct Rig {
    clock: Arc<VirtualClock>,
    fake: FakeCloudRun,
    executor: CloudRunJobsExecutor,
    throttled: Counter,
    _driver: tokio::task::JoinHandle<()>,
}

async fn rig() -> Rig {
    let clock = Arc::new(VirtualClock::new(Timestamp::from_secs(1_800_000_000)));
    let (fake, settings) = mapi_tests::fake_cloudrun::without_processes(clock.clone()).await;
    let throttled = Counter::default();
    let executor =
        CloudRunJobsExecutor::new(settings, Credentials::Anonymous, clock.clone(), throttled.clone())
            .await
            .expect("executor");
    Rig { _driver: mapi_tests::fake_cloudrun::drive(clock.clone()), clock, fake, executor, throttled }
}

fn run_job_calls(fake: &FakeCloudRun) -> Vec<mapi_tests::fake_cloudrun::Call> {
    fake.calls().into_iter().filter(|c| c.method == "POST" && c.path.ends_with(":run")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_carries_only_the_nonce_the_run_id_the_task_count_and_the_timeout() {
    let r = rig().await;
    let a = attempt(1, Duration::from_secs(3600), 3);
    let handle = r.executor.submit(&a).await.expect("submit");
    assert!(
        handle.0.starts_with(
            "projects/fake-project/locations/europe-west1/jobs/mapi-test-base-bayes-s/executions/"
        ),
        "{handle}"
    );
    let calls = run_job_calls(&r.fake);
    assert_eq!(calls.len(), 1);
    let call = &calls[0];
    assert!(
        call.query.contains("%24alt=json%3Benum-encoding%3Dint")
            || call.query.contains("$alt=json;enum-encoding=int"),
        "{}",
        call.query
    );
    let o = &call.body["overrides"];
    assert_eq!(o["taskCount"], 3);
    assert_eq!(o["timeout"], "3720s", "the run's timeout plus MAPI_CLOUDRUN_TIMEOUT_MARGIN_S");
    let containers = o["containerOverrides"].as_array().expect("container overrides");
    assert_eq!(containers.len(), 1);
    let names: Vec<&str> =
        containers[0]["env"].as_array().expect("env").iter().filter_map(|v| v["name"].as_str()).collect();
    assert_eq!(names, ["MAPI_NONCE", "MAPI_RUN_ID"]);
    assert!(
        containers[0].get("args").is_none_or(|a| a.as_array().is_some_and(Vec::is_empty)),
        "nothing in args: {o}"
    );
    assert!(r.fake.args_of(&handle.0).is_empty());
    let info = r.executor.status(&handle).await.expect("status");
    assert_eq!(
        (info.nonce.as_ref(), info.task_count, &info.status),
        (Some(&a.nonce), 3, &ExecutionStatus::Running)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_submits_cool_down_and_retry_the_same_nonce() {
    let r = rig().await;
    for retry_after_s in [0, 0, 5] {
        r.fake.inject(Fault::Throttle { retry_after_s });
    }
    let t0 = r.clock.now();
    let a = attempt(2, Duration::from_secs(60), 1);
    let handle = r.executor.submit(&a).await.expect("submit after three 429s");
    // Cool-downs: 1 s, then 2 s, then the server's 5 s (more than 4 s).
    assert_eq!(r.clock.now().since(t0), Duration::from_secs(8));
    assert_eq!(r.throttled.get(), 3);
    assert_eq!(r.executor.throttled_last_hour(), 3);
    let nonces: Vec<String> = run_job_calls(&r.fake)
        .iter()
        .map(|c| {
            c.body["overrides"]["containerOverrides"][0]["env"][0]["value"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(nonces, vec![a.nonce.to_string(); 4], "the same nonce each time");
    assert_eq!(r.fake.executions().len(), 1);
    assert_eq!(r.fake.executions()[0].0, handle.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_429s_in_a_row_send_the_attempt_back_to_the_queue_without_making_anything() {
    let r = rig().await;
    for _ in 0..7 {
        r.fake.inject(Fault::Throttle { retry_after_s: 1 });
    }
    let a = attempt(3, Duration::from_secs(60), 1);
    match r.executor.submit(&a).await {
        Err(SubmitError::Throttled { retry_after: Some(d) }) => assert!(d <= Duration::from_secs(64)),
        other => panic!("expected Throttled, got {other:?}"),
    }
    assert_eq!(run_job_calls(&r.fake).len(), 7, "the first call and MAPI_CLOUDRUN_MAX_429_RETRIES=6 retries");
    assert!(r.fake.executions().is_empty());
    assert_eq!(r.throttled.get(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_answer_is_adopted_by_nonce_not_retried_blind() {
    let r = rig().await;
    r.fake.inject(Fault::LoseResponse);
    let a = attempt(4, Duration::from_secs(60), 1);
    let handle = r.executor.submit(&a).await.expect("adopted");
    let made = r.fake.executions();
    assert_eq!(made.len(), 1, "exactly one execution");
    assert_eq!(made[0].0, handle.0);
    assert_eq!(run_job_calls(&r.fake).len(), 1, "jobs.run was not called again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unclear_5xx_is_ambiguous_and_the_next_submit_adopts_or_makes_one() {
    let r = rig().await;
    r.fake.inject(Fault::Unavailable);
    let a = attempt(5, Duration::from_secs(60), 1);
    assert!(matches!(r.executor.submit(&a).await, Err(SubmitError::Ambiguous(_))));
    assert!(r.fake.executions().is_empty());
    let since = r.clock.now() - Duration::from_secs(60);
    assert!(mapi_executor::adopt(&r.executor, &a.nonce, since).await.expect("adopt").is_none());
    let handle = r.executor.submit(&a).await.expect("second submit");
    assert_eq!(r.fake.executions().len(), 1);
    // A duplicate made later is cancelled by adoption; the oldest is kept.
    let dup = r.executor.submit(&a).await.expect("duplicate");
    let kept = mapi_executor::adopt(&r.executor, &a.nonce, since).await.expect("adopt").expect("found");
    assert_eq!(kept.handle, handle);
    let cancel = r.fake.calls().into_iter().filter(|c| c.path.ends_with(":cancel")).collect::<Vec<_>>();
    assert_eq!(cancel.len(), 1);
    assert!(cancel[0].path.contains(dup.0.rsplit('/').next().unwrap_or_default()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_answers_are_waited_for() {
    let r = rig().await;
    r.fake.inject(Fault::Slow(Duration::from_millis(300)));
    let a = attempt(6, Duration::from_secs(60), 1);
    r.executor.submit(&a).await.expect("slow submit");
    assert_eq!(r.fake.executions().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vanished_executions_are_not_found_and_finished_ones_read_task_exit_codes() {
    let r = rig().await;
    r.fake.inject(Fault::Vanish);
    let a = attempt(7, Duration::from_secs(60), 1);
    let gone = r.executor.submit(&a).await.expect("submit");
    assert_eq!(r.executor.status(&gone).await.expect("status").status, ExecutionStatus::NotFound);
    r.executor.cancel(&gone).await.expect("cancelling what is gone succeeds");
    let b = attempt(8, Duration::from_secs(60), 2);
    let h = r.executor.submit(&b).await.expect("submit");
    r.fake.finish(&h.0, 143);
    let s = r.executor.status(&h).await.expect("status").status;
    assert_eq!(classify(&s), Some(AttemptOutcome::TimedOut), "{s:?}");
    let tasks = r.fake.calls().into_iter().filter(|c| c.path.ends_with("/tasks")).count();
    assert_eq!(tasks, 1, "tasks.list is read once the execution completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_refuses_xl_and_gpu_for_other_namespaces_before_calling() {
    let r = rig().await;
    let mut a = attempt(9, Duration::from_secs(60), 1);
    a.class = ResourceClass::XL;
    assert!(matches!(r.executor.submit(&a).await, Err(SubmitError::Refused(_))));
    a.class = ResourceClass::GPU;
    a.method = "tabular.linear".to_owned();
    match r.executor.submit(&a).await {
        Err(SubmitError::Refused(why)) => assert_eq!(why, "only dl models run on the GPU class"),
        other => panic!("{other:?}"),
    }
    assert!(run_job_calls(&r.fake).is_empty());
    let caps = r.executor.capabilities();
    assert_eq!(caps.classes, vec![ResourceClass::S, ResourceClass::M, ResourceClass::L]);
}

/// The tick's poll of a batch: one `executions.list` per Job (paged), no
/// `executions.get` per execution; a finished execution is left out, so the
/// caller reads its status (its tasks say how it ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_among_lists_each_job_once_instead_of_a_get_per_execution() {
    let r = rig().await;
    let since = r.clock.now();
    let mut handles = Vec::new();
    for i in 0..6u8 {
        let class = [ResourceClass::S, ResourceClass::M][usize::from(i) % 2];
        let mut a = attempt(100 + i, Duration::from_secs(600), 1);
        a.class = class;
        handles.push(r.executor.submit(&a).await.expect("submit"));
    }
    r.fake.finish(&handles[0].0, 0);
    let before = r.fake.calls().len();
    let running = r.executor.running_among(&handles[1..4], since).await.expect("running");
    let mut got: Vec<&str> = running.iter().map(|i| i.handle.0.as_str()).collect();
    got.sort_unstable();
    let mut want: Vec<&str> = handles[1..4].iter().map(|h| h.0.as_str()).collect();
    want.sort_unstable();
    assert_eq!(got, want, "the asked-for running executions, and only those");
    let all = r.executor.running_among(&handles, since).await.expect("running");
    assert!(all.iter().all(|i| i.handle != handles[0]), "the finished one is left to a status read");
    let calls: Vec<_> = r.fake.calls().into_iter().skip(before).collect();
    assert!(calls.iter().all(|c| c.method == "GET" && c.path.ends_with("/executions")), "{calls:?}");
    let jobs = mapi_cloudrun::Inventory::new(&{
        let mut s = Settings::new("fake-project");
        s.env = "test".to_owned();
        s
    })
    .jobs()
    .len();
    assert!(calls.len() <= 2 * jobs, "{} list calls for two polls of {jobs} Jobs", calls.len());
}
