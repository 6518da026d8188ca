//! Cloud Scheduler may deliver a tick twice, or while the previous one still
//! runs: two overlapping ticks over the same 1,000 active runs must not do
//! any action twice, and a tick's work is bounded and resumes where the
//! previous one stopped.

use std::collections::BTreeMap;
use std::sync::Arc;

use mapi_clock::VirtualClock;
use mapi_domain::{AttemptNo, RunId, Timestamp};
use mapi_tests::scripted::ScriptedExecutor;
use mapi_tests::{Options, TestPlatform};
use serde_json::json;

const RUNS: usize = 1000;

async fn tick(p: &TestPlatform) -> serde_json::Value {
    let internal = p.platform.state.config.secrets.internal_token.clone();
    let (s, body) = p.call(&internal, reqwest::Method::POST, "/internal/tick", Some(json!({}))).await;
    assert_eq!(s, 200, "{body}");
    body
}

/// Writes `n - 1` copies of run `id` (already dispatched) and its first
/// attempt under new seeded ids, each copy's execution submitted to
/// `executor`, so the store holds `n` runs like it.
async fn copy_run(p: &TestPlatform, executor: &ScriptedExecutor, id: &RunId, n: usize, seed: u64) {
    let entropy = mapi_entropy::SeededEntropy::new(seed);
    mapi_embedded::load::copy_dispatched_run(&p.platform.state, executor, id, n, &entropy)
        .await
        .expect("copies");
}

/// A platform with nothing in the background, on a virtual clock and a
/// scripted executor, with the `extra` settings.
async fn scripted(extra: &[(&str, &str)]) -> (TestPlatform, Arc<ScriptedExecutor>) {
    let clock = Arc::new(VirtualClock::new(Timestamp::from_secs(1_800_000_000)));
    let executor = Arc::new(ScriptedExecutor::default());
    let options =
        Options { background: false, clock, executor: Some(executor.clone()), queue: None, entropy: None };
    (TestPlatform::start_with(extra, options).await, executor)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_overlapping_ticks_over_a_thousand_runs_do_no_action_twice() {
    // A tick's budget of half the active runs, so the sweep takes two.
    let (p, executor) = scripted(&[("MAPI_TICK_MAX_RUNS", "500")]).await;
    let ds = p.upload("x,y\n1,2\n").await;

    // One run through the API to cancelling, then 999 copies of it.
    let id = RunId::parse(&p.submit(json!({"method": "describe", "dataset": ds})).await).expect("id");
    assert_eq!(p.dispatch(&id, AttemptNo::FIRST).await.0, 200);
    assert_eq!(p.cancel(p.token(), id.as_str()).await.0, 202);
    copy_run(&p, &executor, &id, RUNS, 7).await;
    let before = executor.cancelled().len();

    // Two ticks at once: one works, the other finds the lease held.
    let (a, b) = tokio::join!(tick(&p), tick(&p));
    let (worked, idle) = if a["busy"] == true { (b, a) } else { (a, b) };
    assert_eq!(idle["busy"], true, "exactly one tick holds the lease: {idle} / {worked}");
    assert_eq!(idle["polled"], 0);
    assert_eq!(worked["busy"], false);
    assert_eq!(worked["polled"], 500, "a tick's work is bounded");
    assert_eq!(worked["cancels_sent"], 500);
    assert_eq!(worked["finalizing"], 0);

    // The next tick resumes where the first stopped.
    let next = tick(&p).await;
    assert_eq!((next["resumed"].as_bool(), next["polled"].as_u64()), (Some(true), Some(500)), "{next}");

    let mut per_handle: BTreeMap<String, usize> = BTreeMap::new();
    for h in &executor.cancelled()[before..] {
        *per_handle.entry(h.0.clone()).or_default() += 1;
    }
    assert_eq!(per_handle.len(), RUNS, "every run's cancel was sent");
    assert!(per_handle.values().all(|n| *n == 1), "no cancel was sent twice");

    // A sweep that reached the end goes on from the beginning.
    let again = tick(&p).await;
    assert_eq!(again["polled"], 500, "{again}");
}

/// Refuses the dispatch pushes of one run, as a queue that lost that task's
/// queue or its quota would: the rest of the sweep must go on.
#[derive(Debug)]
struct RefusingQueue {
    inner: Arc<dyn mapi_queue::TaskQueue>,
    refused: std::sync::Mutex<Option<String>>,
}

#[async_trait::async_trait]
impl mapi_queue::TaskQueue for RefusingQueue {
    async fn create(
        &self,
        task: mapi_queue::NewTask,
    ) -> Result<mapi_queue::TaskInfo, mapi_queue::QueueError> {
        let refused = self.refused.lock().expect("refused").clone();
        if let (Some(run), Some(name)) = (refused, &task.name)
            && name.as_str().contains(&run)
        {
            return Err(mapi_queue::QueueError::InvalidArgument(format!("no queue for {run}")));
        }
        self.inner.create(task).await
    }

    async fn delete(
        &self,
        queue: &mapi_queue::QueueName,
        name: &mapi_queue::TaskName,
    ) -> Result<(), mapi_queue::QueueError> {
        self.inner.delete(queue, name).await
    }

    async fn depth(&self, queue: &mapi_queue::QueueName) -> Result<u64, mapi_queue::QueueError> {
        self.inner.depth(queue).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_runs_failing_push_does_not_stop_the_sweep_nor_keep_the_lease() {
    let clock = Arc::new(VirtualClock::new(Timestamp::from_secs(1_800_000_000)));
    let slot: Arc<std::sync::Mutex<Option<Arc<RefusingQueue>>>> = Arc::default();
    let made = slot.clone();
    let wrap = mapi_tests::QueueWrap(Arc::new(move |inner| {
        let q = Arc::new(RefusingQueue { inner, refused: std::sync::Mutex::default() });
        *made.lock().expect("slot") = Some(q.clone());
        q as Arc<dyn mapi_queue::TaskQueue>
    }));
    let options =
        Options { background: false, clock: clock.clone(), executor: None, queue: Some(wrap), entropy: None };
    let p = TestPlatform::start_with(&[], options).await;
    let ds = p.upload("x,y\n1,2\n").await;
    let a = p.submit(json!({"method": "describe", "dataset": ds})).await;
    let _b = p.submit(json!({"method": "describe", "dataset": ds})).await;
    let queue = slot.lock().expect("slot").clone().expect("wrapped");
    *queue.refused.lock().expect("refused") = Some(a.clone());
    // Both runs look as if their first push was lost.
    clock.advance(p.platform.state.config.dispatch_lease + std::time::Duration::from_secs(1));
    let report = tick(&p).await;
    assert_eq!((report["errors"].as_u64(), report["redispatched"].as_u64()), (Some(1), Some(1)), "{report}");
    let again = tick(&p).await;
    assert_eq!(again["busy"], false, "the first tick released its lease: {again}");
    assert_eq!(again["errors"], 1, "and the next tick tries the refused run again: {again}");
}

/// Active runs a full-sweep measurement holds.
const SWEPT: usize = 10_000;

/// A full sweep over 10,000 running runs is one tick: one listing of the
/// executor's executions for all of them (Cloud Run: one `executions.list`
/// per Job), no execution's status read, and a few store reads per page of
/// 500 runs, not a few per run. The time of the sweep is printed
/// (`--nocapture`), not asserted; `mapi bench tick` measures it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_sweep_of_ten_thousand_running_runs_is_one_tick_with_one_listing_and_no_status_read() {
    let (p, executor) = scripted(&[]).await;
    let ds = p.upload("x,y\n1,2\n").await;
    let id = RunId::parse(&p.submit(json!({"method": "describe", "dataset": ds})).await).expect("id");
    assert_eq!(p.dispatch(&id, AttemptNo::FIRST).await.0, 200);
    copy_run(&p, &executor, &id, SWEPT, 11).await;
    let counts = p.platform.state.local.store.clone().expect("the SQLite store");
    let (before, (statuses, listings)) = (counts.counts(), executor.reads());
    let started = std::time::Instant::now();
    let r = tick(&p).await;
    let took = started.elapsed();
    assert_eq!((r["errors"].as_u64(), r["finalizing"].as_u64()), (Some(0), Some(0)), "{r}");
    assert_eq!(r["polled"].as_u64(), Some(SWEPT as u64), "one tick sweeps every active run: {r}");
    let after = counts.counts();
    let (statuses, listings) = (executor.reads().0 - statuses, executor.reads().1 - listings);
    let reads = after.reads - before.reads;
    println!(
        "full sweep of {SWEPT} running runs: {took:?} (debug build), {listings} listings, \
         {statuses} status reads, {reads} store reads, {} documents read",
        after.documents_read - before.documents_read
    );
    assert_eq!(statuses, 0, "every execution is listed running: no status read");
    assert_eq!(listings, 1, "one listing for the whole sweep");
    // Per page of 500 runs: the page, its attempts and their progress; then
    // the page that ends each of the three active states, the queued-runs
    // query, the active endpoints' query, the instance-billed and the warm
    // endpoints' queries (their idle time), the lease (taken, released), the
    // open jobs' query, the webhooks' sweep (enabled webhooks, overdue
    // messages), the tenants' sweep (open deletions, exports building), the
    // active workflow runs' query and the spend cap's watch (the kill
    // switches; the counters only with a cap).
    let pages = SWEPT.div_ceil(500) as u64;
    assert!(reads <= 3 * pages + 16, "{reads} store reads for {pages} pages");
}
