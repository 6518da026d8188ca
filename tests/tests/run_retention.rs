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
use mapi_domain::{AttemptNo, ExecutionStatus, ProjectId, RunId, TenantId, Timestamp};
use mapi_executor::local::forward::{FORWARDED, LogForwarder};
use mapi_queue::sqlite::Deliverer;
use mapi_schema::{AttemptDoc, layout};
use mapi_store::{Op, Query};
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

const LONGLEY: &str = include_str!("../../examples/longley.csv");

/// What the run housekeeper's call answered.
async fn housekeep_all(p: &TestPlatform) -> Value {
    let (status, v) = p.call(&internal(p), Method::POST, HOUSEKEEP_RUNS_PATH, None).await;
    assert_eq!(status, 200, "{v}");
    v
}

/// How many objects are stored under `prefix`.
async fn objects_under(p: &TestPlatform, prefix: &str) -> usize {
    let page = p.platform.state.objects.list(prefix, None, 1_000).await.expect("list");
    page.objects.len()
}

/// Model versions and runs past their retention: a version that serves no endpoint is marked
/// expired (deploying or reading it answers 410), its bytes go an hour later, its record stays
/// and says so; a run past its tenant's record retention goes with its documents and objects,
/// its ledger entries staying; the version an endpoint serves, and its run, are kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_and_runs_past_their_retention_go_unless_an_endpoint_uses_them() {
    let clock = Arc::new(VirtualClock::new(Timestamp::from_secs(1_800_000_000)));
    let p = TestPlatform::start_with(
        &[("MAPI_RUN_RETENTION_DAYS", "2"), ("MAPI_MODEL_VERSION_RETENTION_DAYS", "4")],
        Options { background: false, clock: clock.clone(), ..Options::default() },
    )
    .await;
    background(&p);
    let token = p.token().to_owned();
    let fit =
        json!({"method": "tabular.linear", "dataset": p.upload(LONGLEY).await, "params": {"y": "employed"}});
    let (old, served) = (p.submit(fit.clone()).await, p.submit(fit).await);
    let ended = |v: &Value| v["state"] == "succeeded";
    let old_view = wait(&p, &clock, &token, &old, ended).await;
    let served_view = wait(&p, &clock, &token, &served, ended).await;
    for run in [&old, &served] {
        forwarded(&execution_dir(&p, run).await.1).await;
    }
    let version = |v: &Value| v["model_version"].as_str().expect("a model version").to_owned();
    let (old_version, served_version) = (version(&old_view), version(&served_view));
    let endpoints = format!("{}/endpoints", p.project_path());
    let create = |alias: &str, v: &str| json!({"alias": alias, "model_version": v});
    let (status, e) = p.call(&token, Method::POST, &endpoints, Some(create("served", &served_version))).await;
    assert_eq!(status, 202, "{e}");
    let state = &p.platform.state;
    let run_dir = |run: &str| {
        let id = RunId::parse(run).expect("run id");
        layout::run_dir(&TenantId::parse("dev").expect("id"), &ProjectId::parse("default").expect("id"), &id)
    };
    let old_objects = objects_under(&p, &run_dir(&old)).await;
    assert!(old_objects >= 3, "outputs, manifest and signature: {old_objects}");

    clock.advance(3 * DAY);
    let v = housekeep_all(&p).await;
    assert_eq!((v["forgotten_runs"].as_u64(), v["expiring_versions"].as_u64()), (Some(2), Some(0)), "{v}");

    clock.advance(DAY + Duration::from_secs(1));
    let v = housekeep_all(&p).await;
    assert_eq!(v["expiring_versions"], 1, "the unserved version is marked: {v}");
    assert_eq!((v["expired_versions"].as_u64(), v["kept_in_use"].as_u64()), (Some(0), Some(1)), "{v}");
    let (status, problem) =
        p.call(&token, Method::GET, &format!("/v1/model-versions/{old_version}"), None).await;
    assert_eq!((status, problem["code"].as_str()), (410, Some("GONE")), "{problem}");
    assert!(problem["detail"].as_str().unwrap_or_default().contains("expired"), "{problem}");
    let (status, problem) = p.call(&token, Method::POST, &endpoints, Some(create("old", &old_version))).await;
    assert_eq!((status, problem["code"].as_str()), (410, Some("GONE")), "deploying it: {problem}");
    assert_eq!(objects_under(&p, &run_dir(&old)).await, old_objects, "its bytes stay through the grace");

    clock.advance(Duration::from_secs(3_600));
    let v = housekeep_all(&p).await;
    assert_eq!((v["expired_versions"].as_u64(), v["deleted_runs"].as_u64()), (Some(1), Some(0)), "{v}");
    assert_eq!(objects_under(&p, &run_dir(&old)).await, 0, "its outputs and bundle are gone");
    assert!(objects_under(&p, &run_dir(&served)).await >= 3, "the served version's bytes stay");
    let (_, list) = p.call(&token, Method::GET, &format!("{}/model-versions", p.project_path()), None).await;
    let listed = list["model_versions"].as_array().expect("versions");
    let expired: Vec<_> = listed.iter().filter(|v| v["expired_at"].is_string()).map(|v| &v["id"]).collect();
    assert_eq!(expired, [&json!(old_version)], "the record stays and says so: {list}");
    let (status, run) = p.call(&token, Method::GET, &format!("/v1/runs/{old}"), None).await;
    assert_eq!((status, run["state"].as_str()), (200, Some("succeeded")), "the run stays: {run}");
    let v = housekeep_all(&p).await;
    assert_eq!((v["expiring_versions"].as_u64(), v["expired_versions"].as_u64()), (Some(0), Some(0)), "{v}");

    // The tenant keeps its runs a day after their logs go: the old run goes, the served one stays.
    let operator = p.login("admin@dev.local").await;
    let policy = json!({"run_record_retention_days": 1});
    let (status, limits) = p.call(&operator, Method::PUT, "/v1/admin/quotas/dev", Some(policy)).await;
    assert_eq!((status, limits["run_record_retention_days"].as_u64()), (200, Some(1)), "{limits}");
    let v = housekeep_all(&p).await;
    // Kept twice: the served version by the version sweep, its run by the run sweep.
    assert_eq!((v["deleted_runs"].as_u64(), v["kept_in_use"].as_u64()), (Some(1), Some(2)), "{v}");
    let (status, gone) = p.call(&token, Method::GET, &format!("/v1/runs/{old}"), None).await;
    assert_eq!(status, 404, "{gone}");
    let (status, kept) = p.call(&token, Method::GET, &format!("/v1/runs/{served}"), None).await;
    assert_eq!((status, kept["state"].as_str()), (200, Some("succeeded")), "{kept}");
    let of_run = |collection: &str, run: &str| Query::new(collection).filter("run", Op::Eq, run.to_owned());
    for collection in ["attempts", "progress", "event_seen", "model_versions"] {
        let left = state.store.query(&of_run(collection, &old), None).await.expect("query");
        assert!(left.is_empty(), "{collection} of the removed run: {left:?}");
    }
    let ledger = state.store.query(&of_run("ledger", &old), None).await.expect("query");
    assert!(!ledger.is_empty(), "the bill stays");
    let audit = state.store.query(&Query::new("audit").filter("action", Op::Eq, "run.expire"), None).await;
    assert_eq!(audit.expect("query").len(), 1);
    let v = housekeep_all(&p).await;
    assert_eq!((v["deleted_runs"].as_u64(), v["kept_in_use"].as_u64()), (Some(0), Some(2)), "{v}");
}
