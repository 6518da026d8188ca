//! Run retention end to end, on the local executor with the real worker and
//! a virtual clock: the run housekeeper forgets the executions of runs that
//! ended before their tenant's run retention (the tenant's policy, else
//! `MAPI_RUN_RETENTION_DAYS`), so their directories go; runs within it and
//! running runs keep theirs; a forgotten run's logs answer `410 GONE` while
//! the run itself stays; a second pass finds nothing to do.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use mapi_clock::VirtualClock;
use mapi_domain::{AttemptNo, ExecutionStatus, RunId, Timestamp};
use mapi_executor::local::forward::{FORWARDED, LogForwarder};
use mapi_queue::sqlite::Deliverer;
use mapi_schema::AttemptDoc;
use mapi_tasks::housekeep_runs::HOUSEKEEP_RUNS_PATH;
use mapi_tests::{Options, TestPlatform};
use reqwest::Method;
use serde_json::{Value, json};

const CSV: &str = "x,y\n1,2\n2,4.1\n3,5.9\n";
const DAY: Duration = Duration::from_secs(86_400);

fn internal(p: &TestPlatform) -> String {
    p.platform.state.config.secrets.internal_token.clone()
}

/// The queue's deliverer and the executor's log forwarder, as `mapi dev` runs them; the tick
/// and the housekeepers are called by the test.
fn background(p: &TestPlatform) {
    let state = &p.platform.state;
    let queue = state.local.queue.as_ref().expect("the embedded queue");
    let deliverer = Deliverer::new(
        queue.clone(),
        reqwest::Client::new(),
        &p.platform.url,
        Some(internal(p)),
        state.metrics.clone(),
    );
    tokio::spawn(deliverer.run(std::future::pending()));
    let executor = state.local.executor.as_ref().expect("the local executor");
    let forwarder = LogForwarder::new(
        executor.dir(),
        reqwest::Client::new(),
        format!("{}{}", p.platform.url, mapi_push_events::EVENTS_PATH),
        internal(p),
        state.clock.clone(),
    );
    tokio::spawn(forwarder.run(std::future::pending()));
}

/// Calls the run housekeeper once; the runs it recorded as forgotten.
async fn housekeep(p: &TestPlatform) -> u64 {
    let (status, v) = p.call(&internal(p), Method::POST, HOUSEKEEP_RUNS_PATH, None).await;
    assert_eq!(status, 200, "{v}");
    v["forgotten_runs"].as_u64().expect("forgotten_runs")
}

/// The directory of the run's first execution.
async fn execution_dir(p: &TestPlatform, run: &str) -> (mapi_executor::ExecutionHandle, PathBuf) {
    let id = AttemptDoc::id_of(&RunId::parse(run).expect("run id"), AttemptNo::FIRST);
    let attempt = mapi_schema::get::<AttemptDoc>(&*p.platform.state.store, &id)
        .await
        .expect("get")
        .expect("the attempt");
    let handle = attempt.handle.expect("the execution's handle");
    let executor = p.platform.state.local.executor.as_ref().expect("the local executor");
    let dir = executor.exec_dir(&handle).expect("a local handle");
    (handle, dir)
}

/// Polls `run` (as `token`) until `pred` holds, advancing the clock a second and calling the
/// reconcile tick each time.
async fn wait(
    p: &TestPlatform,
    clock: &VirtualClock,
    token: &str,
    run: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    for _ in 0..600 {
        let (status, v) = p.call(token, Method::GET, &format!("/v1/runs/{run}"), None).await;
        assert_eq!(status, 200, "{v}");
        if pred(&v) {
            return v;
        }
        clock.advance(Duration::from_secs(1));
        let _ = p.call(&internal(p), Method::POST, mapi_reconcile_tick::TICK_PATH, None).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("run {run} did not get where it was expected to");
}

/// Waits (real time) until the forwarder delivered every event of the execution in `dir`.
async fn forwarded(dir: &std::path::Path) {
    for _ in 0..300 {
        if dir.join(FORWARDED).exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{} was never fully forwarded", dir.display());
}

async fn logs(p: &TestPlatform, token: &str, run: &str) -> (u16, Value) {
    p.call(token, Method::GET, &format!("/v1/runs/{run}/logs"), None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_housekeeper_forgets_executions_past_each_tenants_retention() {
    let clock = Arc::new(VirtualClock::new(Timestamp::from_secs(1_800_000_000)));
    let p = TestPlatform::start_with(
        &[
            ("MAPI_RUN_RETENTION_DAYS", "7"),
            ("MAPI_DEV_ACCOUNTS", "admin@dev.local,dev@dev.local,owner@other.test"),
        ],
        Options { background: false, clock: clock.clone(), ..Options::default() },
    )
    .await;
    background(&p);
    let operator = p.login("admin@dev.local").await;
    p.create_tenant(&operator, "other", "internal").await;
    // 0 days would remove a run's logs as soon as it ends: refused.
    let zero = json!({"run_retention_days": 0});
    let (status, problem) = p.call(&operator, Method::PUT, "/v1/admin/quotas/dev", Some(zero)).await;
    assert_eq!((status, problem["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{problem}");
    assert!(problem["detail"].as_str().unwrap_or_default().contains("run_retention_days"), "{problem}");
    // dev (whose API token the platform made) keeps its runs' leftovers 2 days; other has no policy: the platform's 7.
    let (status, limits) =
        p.call(&operator, Method::PUT, "/v1/admin/quotas/dev", Some(json!({"run_retention_days": 2}))).await;
    assert_eq!((status, limits["run_retention_days"].as_u64()), (200, Some(2)), "{limits}");
    let (_, all) = p.call(&operator, Method::GET, "/v1/admin/quotas", None).await;
    let other = all["tenants"].as_array().expect("tenants").iter().find(|t| t["tenant"] == "other");
    assert_eq!(other.map(|t| t["run_retention_days"].clone()), Some(json!(7)), "{all}");

    let token = p.token().to_owned();
    let dev_run = p.submit(json!({"method": "describe", "dataset": p.upload(CSV).await})).await;
    let other_path = "/v1/tenants/other/projects/default";
    let eve = p.login("owner@other.test").await;
    let ds = p.upload_as(&eve, other_path, CSV).await;
    let (status, v) = p
        .call(
            &eve,
            Method::POST,
            &format!("{other_path}/runs"),
            Some(json!({"method": "describe", "dataset": ds})),
        )
        .await;
    assert_eq!(status, 201, "{v}");
    let other_run = v["id"].as_str().expect("run id").to_owned();
    let ended = |v: &Value| v["state"] == "succeeded";
    wait(&p, &clock, &token, &dev_run, ended).await;
    wait(&p, &clock, &eve, &other_run, ended).await;
    let (dev_handle, dev_dir) = execution_dir(&p, &dev_run).await;
    let (other_handle, other_dir) = execution_dir(&p, &other_run).await;
    forwarded(&dev_dir).await;
    forwarded(&other_dir).await;
    let (status, before) = logs(&p, &token, &dev_run).await;
    assert!(status == 200 && !before["lines"].as_array().expect("lines").is_empty(), "{before}");
    // A run still running: never touched, whatever its age.
    let running = p
        .submit(json!({"method": "diag.sleep", "dataset": p.upload(CSV).await, "params": {"seconds": 600}}))
        .await;
    wait(&p, &clock, &token, &running, |v| v["state"] == "running").await;
    let (running_handle, running_dir) = execution_dir(&p, &running).await;

    clock.advance(DAY);
    assert_eq!(housekeep(&p).await, 0, "a day after: both within their retention");
    assert!(dev_dir.is_dir() && other_dir.is_dir());

    clock.advance(2 * DAY);
    assert_eq!(housekeep(&p).await, 1, "three days after: dev's 2 days have passed");
    assert!(!dev_dir.exists(), "dev's execution directory is removed");
    assert!(other_dir.is_dir(), "other's 7 days have not passed");
    let executor = &p.platform.state.executor;
    assert_eq!(executor.status(&dev_handle).await.expect("status").status, ExecutionStatus::NotFound);
    let (status, problem) = logs(&p, &token, &dev_run).await;
    assert_eq!((status, problem["code"].as_str()), (410, Some("GONE")), "{problem}");
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("run retention of 2 days") && detail.contains(&dev_run), "{problem}");
    let (status, run) = p.call(&token, Method::GET, &format!("/v1/runs/{dev_run}"), None).await;
    assert_eq!((status, run["state"].as_str()), (200, Some("succeeded")), "the run stays: {run}");
    assert_eq!(housekeep(&p).await, 0, "a second pass finds nothing to do");
    let eve = p.login("owner@other.test").await;
    let (status, kept) = logs(&p, &eve, &other_run).await;
    assert!(status == 200 && !kept["lines"].as_array().expect("lines").is_empty(), "{kept}");

    clock.advance(5 * DAY);
    assert_eq!(housekeep(&p).await, 1, "eight days after: past the platform's 7");
    assert!(!other_dir.exists());
    assert_eq!(executor.status(&other_handle).await.expect("status").status, ExecutionStatus::NotFound);
    let (status, problem) = logs(&p, &p.login("owner@other.test").await, &other_run).await;
    assert_eq!(status, 410, "{problem}");
    assert!(problem["detail"].as_str().unwrap_or_default().contains("run retention of 7 days"), "{problem}");
    assert_eq!(housekeep(&p).await, 0, "and again nothing to do");

    assert!(running_dir.is_dir(), "a running run's execution is never touched");
    assert_eq!(executor.status(&running_handle).await.expect("status").status, ExecutionStatus::Running);
    let (status, v) = p.cancel(&token, &running).await;
    assert_eq!(status, 202, "{v}");
}
