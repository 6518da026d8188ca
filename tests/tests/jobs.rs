//! Item jobs end to end over HTTP: a large job through duplicated and
//! overlapping deliveries, a fan-out that dies halfway and is delivered
//! again, fairness between tenants, retry-failed, cancel, and the
//! self-description routes. Every suite is seeded and runs on 127.0.0.1.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use mapi_jobs::tasks::ITEMS_QUEUE;
use mapi_queue::sqlite::Deliverer;
use mapi_queue::{NewTask, QueueError, QueueName, TaskInfo, TaskName, TaskQueue};
use mapi_tests::chaos::{ChaosProxy, Faults};
use mapi_tests::{Options, QueueWrap, TestPlatform};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// The suites here each push thousands of items through one platform; run
/// side by side on two cores they starve each other's deliveries past the
/// queue's deadlines. One at a time, each gets the machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Starts the embedded deliverer, delivering through `target` (the
/// platform itself, or a chaos proxy in front of it).
fn deliver(p: &TestPlatform, target: &str) -> JoinHandle<()> {
    let queue = p.platform.state.local.queue.as_ref().expect("the embedded queue");
    let deliverer = Deliverer::new(
        queue.clone(),
        reqwest::Client::new(),
        target,
        Some(p.platform.state.config.secrets.internal_token.clone()),
        p.platform.state.metrics.clone(),
    );
    tokio::spawn(deliverer.run(std::future::pending()))
}

async fn quiet(extra: &[(&str, &str)], queue: Option<QueueWrap>) -> TestPlatform {
    TestPlatform::start_with(extra, Options { background: false, queue, ..Options::default() }).await
}

async fn submit_job(p: &TestPlatform, token: &str, tenant: &str, body: Value) -> String {
    p.submit_job(token, tenant, body).await
}

async fn job(p: &TestPlatform, token: &str, id: &str) -> Value {
    let (status, v) = p.call(token, Method::GET, &format!("/v1/jobs/{id}"), None).await;
    assert_eq!(status, 200, "{v}");
    v
}

async fn wait_final(p: &TestPlatform, token: &str, id: &str, limit: Duration) -> Value {
    p.wait_job(token, id, limit).await
}

/// Every object of `job` under `dir` (`ends`, `logs`), by item index.
async fn objects(p: &TestPlatform, id: &str, dir: &str) -> BTreeMap<u64, Vec<u8>> {
    let prefix = format!("t/dev/p/default/jobs/{id}/{dir}/");
    let store = &p.platform.state.objects;
    let mut out = BTreeMap::new();
    let mut token: Option<String> = None;
    loop {
        let page = store.list(&prefix, token.as_deref(), 1000).await.expect("list");
        for o in page.objects {
            let name = o.key.as_str().strip_prefix(&prefix).expect("prefix");
            let idx: u64 = name.split('.').next().and_then(|n| n.parse().ok()).expect("index name");
            let (_, bytes) = store.get(&o.key, None).await.expect("get");
            assert!(out.insert(idx, bytes.to_vec()).is_none(), "one object per item");
        }
        match page.next_page_token {
            Some(t) => token = Some(t),
            None => return out,
        }
    }
}

async fn active_items(p: &TestPlatform, tenant: &str) -> i64 {
    mapi_quota::counters::read(&*p.platform.state.store, &format!("tenant:{tenant}"))
        .await
        .expect("counter")
        .active_items
}

/// Every item marker of `job`, by item index.
async fn markers(p: &TestPlatform, id: &str) -> BTreeMap<u64, Value> {
    let q = mapi_store::Query::new("job_items").filter("job", mapi_store::Op::Eq, id);
    let docs = p.platform.state.store.query(&q, None).await.expect("markers");
    docs.into_iter().map(|d| (d.fields["idx"].as_u64().expect("idx"), Value::Object(d.fields))).collect()
}

/// Every item's end, by item index: the one its marker holds, else its
/// end object (`ends/{idx}.json`). An item has one or the other, not both.
async fn ends(p: &TestPlatform, id: &str) -> BTreeMap<u64, Value> {
    let objects = objects(p, id, "ends").await;
    let mut ends: BTreeMap<u64, Value> =
        objects.into_iter().map(|(i, b)| (i, serde_json::from_slice(&b).expect("an end is JSON"))).collect();
    for (i, m) in markers(p, id).await {
        if !m["end"].is_null() {
            // The marker holds the end's result, error and log; its round,
            // outcome and usage are the marker's own fields.
            let end = json!({
                "round": m["round"], "outcome": m["outcome"], "result": m["end"]["result"],
                "error": m["end"]["error"], "usage": {"idx": m["idx"], "attempts": m["attempts"]},
                "log": m["end"]["log"],
            });
            assert!(ends.insert(i, end).is_none(), "item {i}: an end object and one in its marker");
        }
    }
    ends
}

/// Every item's log as the log route serves it: its log object's lines,
/// then its end's.
async fn logs(p: &TestPlatform, id: &str) -> BTreeMap<u64, Vec<u8>> {
    let mut out = objects(p, id, "logs").await;
    for (i, end) in ends(p, id).await {
        let lines = end["log"].as_array().expect("an end's log").iter().map(|l| format!("{l}\n"));
        out.entry(i).or_default().extend(lines.collect::<String>().into_bytes());
    }
    out
}

fn log_outcomes(logs: &BTreeMap<u64, Vec<u8>>, outcome: &str) -> BTreeMap<u64, usize> {
    logs.iter()
        .map(|(i, b)| {
            let n = String::from_utf8_lossy(b)
                .lines()
                .filter(|l| {
                    serde_json::from_str::<Value>(l).map(|v| v["outcome"] == outcome).unwrap_or(false)
                })
                .count();
            (*i, n)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_items_each_result_once_through_duplicate_and_overlapping_deliveries() {
    let _serial = SERIAL.lock().await;
    let p = quiet(&[], None).await;
    let faults = Faults { seed: 0x5eed_0007, duplicate_percent: 10, overlap_percent: 2 };
    let proxy = ChaosProxy::start(&p.platform.url, faults).await;
    let _deliverer = deliver(&p, &proxy.url);
    let items: Vec<Value> = (0..5000).map(|i| json!({"i": i, "text": format!("item {i}")})).collect();
    let token = p.token().to_owned();
    let id = submit_job(&p, &token, "dev", json!({"method": "item.echo", "items": items})).await;
    let v = wait_final(&p, &token, &id, Duration::from_secs(240)).await;
    assert_eq!(v["state"], "succeeded", "{v:#}");
    assert_eq!((v["counts"]["succeeded"].as_u64(), v["counts"]["failed"].as_u64()), (Some(5000), Some(0)));
    let ends = ends(&p, &id).await;
    assert_eq!(ends.keys().copied().collect::<Vec<_>>(), (0..5000).collect::<Vec<_>>(), "every end, once");
    assert!(objects(&p, &id, "ends").await.is_empty(), "small ends live in their markers, not in objects");
    for (i, end) in &ends {
        assert_eq!(end["outcome"], "succeeded", "item {i}: {end}");
        assert_eq!(end["result"], json!({"i": i, "text": format!("item {i}")}), "item {i}");
        assert_eq!(end["usage"]["idx"], *i, "item {i}'s usage: {end}");
    }
    let duplicated = proxy.tally.duplicated.load(Ordering::Relaxed);
    let overlapped = proxy.tally.overlapped.load(Ordering::Relaxed);
    // Seeded: about 10 % and 2 % of some 5,050 deliveries.
    assert!((350..=700).contains(&duplicated), "duplicated {duplicated}");
    assert!((50..=170).contains(&overlapped), "overlapped {overlapped}");
    // No item retried: a log object is only a superseded delivery's line.
    let logged = objects(&p, &id, "logs").await.len();
    assert!(logged <= overlapped, "{logged} log objects, {overlapped} overlapped deliveries");
    assert_eq!(active_items(&p, "dev").await, 0, "every window slot given back once");
    let (_, page) = p.call(&token, Method::GET, &format!("/v1/jobs/{id}/items?page_size=3"), None).await;
    let first: Vec<u64> =
        page["items"].as_array().expect("items").iter().filter_map(|i| i["idx"].as_u64()).collect();
    assert_eq!(first, [0, 1, 2]);
    assert_eq!(page["items"][1]["result"], json!({"i": 1, "text": "item 1"}));
}

/// A queue that, once armed, refuses item-task creates after letting some
/// through: a fan-out step then dies halfway through its batch.
#[derive(Debug)]
struct DyingQueue {
    inner: Arc<dyn TaskQueue>,
    /// Item creates still allowed before failures start; negative: unarmed.
    allowed: AtomicI64,
    /// Failures still to inject.
    failures: AtomicI64,
}

#[async_trait]
impl TaskQueue for DyingQueue {
    async fn create(&self, task: NewTask) -> Result<TaskInfo, QueueError> {
        if task.queue.as_str() == ITEMS_QUEUE
            && self.allowed.fetch_sub(1, Ordering::SeqCst) <= 0
            && self.failures.fetch_sub(1, Ordering::SeqCst) > 0
        {
            tracing::warn!("injected: the fan-out's process died");
            return Err(QueueError::Unavailable("the fan-out's process died".into()));
        }
        self.inner.create(task).await
    }

    async fn delete(&self, queue: &QueueName, name: &TaskName) -> Result<(), QueueError> {
        self.inner.delete(queue, name).await
    }

    async fn depth(&self, queue: &QueueName) -> Result<u64, QueueError> {
        self.inner.depth(queue).await
    }
}

/// A delivery that crashed after writing an item's end and before its
/// marker leaves the end alone in the bucket; the next delivery makes the
/// marker from that end, runs nothing again, and counts the item once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_end_lives_in_its_marker_and_a_large_one_in_an_object() {
    let _serial = SERIAL.lock().await;
    let p = quiet(&[], None).await;
    let _deliverer = deliver(&p, &p.platform.url);
    let token = p.token().to_owned();
    // item.echo answers the item: 20,000 bytes of text is past the 16 KiB
    // an end may take in its marker.
    let big = "x".repeat(20_000);
    let body = json!({"method": "item.echo", "items": [{"a": 1}, {"big": big}, {"a": 3}]});
    let id = submit_job(&p, &token, "dev", body).await;
    let v = wait_final(&p, &token, &id, Duration::from_secs(60)).await;
    assert_eq!(v["state"], "succeeded", "{v:#}");
    let objects = objects(&p, &id, "ends").await;
    assert_eq!(objects.keys().copied().collect::<Vec<_>>(), [1], "only the large end is an object");
    let markers = markers(&p, &id).await;
    assert_eq!(markers[&0]["end"]["result"], json!({"a": 1}), "{}", markers[&0]);
    assert!(markers[&1]["end"].is_null(), "the large end is not in its marker");
    let (status, page) = p.call(&token, Method::GET, &format!("/v1/jobs/{id}/items"), None).await;
    assert_eq!(status, 200, "{page}");
    let results: Vec<&Value> =
        page["items"].as_array().expect("items").iter().map(|i| &i["result"]).collect();
    assert_eq!(results, [&json!({"a": 1}), &json!({"big": big}), &json!({"a": 3})]);
    for idx in 0..3 {
        let log =
            p.http.get(p.url(&format!("/v1/jobs/{id}/items/{idx}/log"))).bearer_auth(&token).send().await;
        let text = log.expect("log").text().await.expect("text");
        assert_eq!(text.lines().count(), 1, "item {idx}: one attempt: {text}");
        assert!(text.contains("\"succeeded\""), "item {idx}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_left_without_its_marker_by_a_crash_is_recovered_not_rerun() {
    let _serial = SERIAL.lock().await;
    let p = quiet(&[], None).await;
    let token = p.token().to_owned();
    let id =
        submit_job(&p, &token, "dev", json!({"method": "item.echo", "items": [{"a": 1}, {"a": 2}]})).await;
    let line = json!({"round": 0, "attempt": 1, "outcome": "succeeded", "duration_ms": 3, "at": 0});
    let end = json!({
        "round": 0, "outcome": "succeeded", "result": {"from": "the delivery that crashed"},
        "usage": {"idx": 1, "round": 0, "attempts": 1, "duration_ms": 3, "cost_micros": 7, "outcome": "succeeded"},
        "log": [line],
    });
    let key = mapi_objects::ObjectKey::parse(&format!("t/dev/p/default/jobs/{id}/ends/1.json")).expect("key");
    let bytes = serde_json::to_vec(&end).expect("json");
    p.platform
        .state
        .objects
        .put(&key, bytes.into(), "application/json", mapi_objects::IfGeneration::ABSENT)
        .await
        .expect("put");
    let _deliverer = deliver(&p, &p.platform.url);
    let v = wait_final(&p, &token, &id, Duration::from_secs(60)).await;
    assert_eq!(
        (v["state"].as_str(), v["counts"]["succeeded"].as_u64()),
        (Some("succeeded"), Some(2)),
        "{v:#}"
    );
    let (status, page) = p.call(&token, Method::GET, &format!("/v1/jobs/{id}/items"), None).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["items"][1]["result"], json!({"from": "the delivery that crashed"}), "not run again");
    assert_eq!(page["items"][1]["duration_ms"], 3, "the marker is the end's: {page}");
    assert_eq!(page["items"][0]["result"], json!({"a": 1}));
    let log = p.http.get(p.url(&format!("/v1/jobs/{id}/items/1/log"))).bearer_auth(&token).send().await;
    let text = log.expect("log").text().await.expect("text");
    assert_eq!(text.lines().count(), 1, "one attempt: {text}");
    assert_eq!(active_items(&p, "dev").await, 0, "the window slot was freed once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fanout_that_dies_halfway_and_is_delivered_again_loses_and_doubles_nothing() {
    let _serial = SERIAL.lock().await;
    // Batches of 100, and a window above the job's 1,000 items, so every
    // step reserves a whole batch. Item creates 1..=250 pass, the next 60
    // fail: the third fan-out step dies after enqueuing half its batch (50
    // fail), and its redelivery dies again (10 fail, 40 more enqueued).
    // (With a window that fills, a step reserves only what was freed, a
    // few items, and the 60 failures would be spent a few per delivery
    // over the queue's growing back-off: minutes, not a halfway death.)
    let dying: Arc<std::sync::Mutex<Option<Arc<DyingQueue>>>> = Arc::default();
    let slot = dying.clone();
    let wrap = QueueWrap(Arc::new(move |inner| {
        let q = Arc::new(DyingQueue { inner, allowed: AtomicI64::new(250), failures: AtomicI64::new(60) });
        *slot.lock().expect("slot") = Some(q.clone());
        q as Arc<dyn TaskQueue>
    }));
    let p = quiet(&[("MAPI_JOB_FANOUT_BATCH", "100"), ("MAPI_JOB_TENANT_WINDOW", "1000")], Some(wrap)).await;
    let _deliverer = deliver(&p, &p.platform.url);
    let token = p.token().to_owned();
    let items: Vec<Value> = (0..1000).map(|i| json!(i)).collect();
    let id = submit_job(&p, &token, "dev", json!({"method": "item.echo", "items": items})).await;
    let v = wait_final(&p, &token, &id, Duration::from_secs(120)).await;
    let q = dying.lock().expect("slot").clone().expect("wrapped");
    assert!(q.failures.load(Ordering::SeqCst) <= 0, "the fan-out did die: every injected failure was used");
    // Deliver every fan-out step again, late: stale steps change nothing.
    let job_id = mapi_domain::JobId::parse(&id).expect("job id");
    let steps = mapi_schema::get::<mapi_jobs::JobDoc>(&*p.platform.state.store, &id)
        .await
        .expect("get")
        .expect("job")
        .fanout
        .step;
    for step in 0..steps {
        let body = json!({"job": job_id, "step": step});
        let (status, _) = p
            .call(
                &p.platform.state.config.secrets.internal_token,
                Method::POST,
                mapi_jobs::tasks::FANOUT_PATH,
                Some(body),
            )
            .await;
        assert_eq!(status, 200, "step {step} again");
    }
    assert_eq!(v["state"], "succeeded", "{v:#}");
    assert_eq!(v["counts"]["succeeded"], 1000);
    assert_eq!(ends(&p, &id).await.len(), 1000, "no item lost");
    let completions = log_outcomes(&logs(&p, &id).await, "succeeded");
    assert_eq!(completions.len(), 1000);
    let twice: Vec<_> = completions.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "items run to completion more than once: {twice:?}");
    assert_eq!(active_items(&p, "dev").await, 0);
    let after = job(&p, &token, &id).await;
    assert_eq!(after["counts"], v["counts"], "late fan-out steps changed nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_burst_does_not_starve_a_small_job() {
    let _serial = SERIAL.lock().await;
    let p = TestPlatform::start_with(
        &[("MAPI_DEV_ACCOUNTS", "admin@dev.local,dev@dev.local,owner@other.test")],
        Options { background: false, ..Options::default() },
    )
    .await;
    let operator = p.login("admin@dev.local").await;
    let eve = p.create_tenant(&operator, "other", "internal").await;
    let _deliverer = deliver(&p, &p.platform.url);
    let token = p.token().to_owned();
    // Tenant A (dev): 20,000 items; then tenant B (other): 10.
    let a_items: Vec<Value> = (0..20_000).map(|i| json!({"i": i})).collect();
    let a = submit_job(&p, &token, "dev", json!({"method": "item.echo", "items": a_items})).await;
    let b_items: Vec<Value> = (0..10).map(|i| json!({"i": i})).collect();
    let b = submit_job(&p, &eve, "other", json!({"method": "item.echo", "items": b_items})).await;
    let (status, _) = p.call(&eve, Method::GET, &format!("/v1/jobs/{a}"), None).await;
    assert_eq!(status, 404, "tenant B cannot see tenant A's job");
    let vb = wait_final(&p, &eve, &b, Duration::from_secs(60)).await;
    let va = job(&p, &token, &a).await;
    assert_eq!(vb["state"], "succeeded", "{vb:#}");
    let a_done = va["counts"]["succeeded"].as_u64().expect("count");
    let window = 200; // MAPI_JOB_TENANT_WINDOW's default, below the internal tier's 1,000
    // B waited behind at most A's window, plus what A finished meanwhile:
    // a few batches of 100, not A's 20,000.
    assert!(a_done <= 4 * window, "A finished {a_done} items before B's 10: B was starved");
    assert!(!mapi_tests::job_is_final(&va), "A is still running: {va:#}");
    assert!(va["counts"]["pending"].as_u64().expect("pending") > 10_000, "A is held to its window: {va:#}");
    // Cancel A: queued items end as cancelled errors, the rest never runs.
    let (status, _) = p.call(&token, Method::POST, &format!("/v1/jobs/{a}/cancel"), None).await;
    assert_eq!(status, 200);
    let va = wait_final(&p, &token, &a, Duration::from_secs(60)).await;
    assert_eq!(va["state"], "completed_with_errors", "{va:#}");
    let c = &va["counts"];
    let sum = ["succeeded", "failed", "cancelled"].iter().map(|k| c[k].as_u64().expect("count")).sum::<u64>();
    assert_eq!(sum, 20_000, "{c}");
    assert!(c["cancelled"].as_u64().expect("cancelled") > 10_000, "{c}");
    assert_eq!(active_items(&p, "dev").await, 0);
    assert_eq!(active_items(&p, "other").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_failed_reruns_only_the_failed_items() {
    let _serial = SERIAL.lock().await;
    let p = quiet(&[], None).await;
    let _deliverer = deliver(&p, &p.platform.url);
    let token = p.token().to_owned();
    // Every 10th item fails in round 0 only; item 5 fails transiently once.
    let items: Vec<Value> = (0..200)
        .map(|i| match i {
            _ if i % 10 == 3 => json!({"i": i, "fail_rounds": 1}),
            5 => json!({"i": i, "flaky": 1}),
            _ => json!({"i": i}),
        })
        .collect();
    let body = json!({"method": "diag.item", "items": items, "options": {"params": {"message": "bad item"}}});
    let id = submit_job(&p, &token, "dev", body).await;
    let v = wait_final(&p, &token, &id, Duration::from_secs(60)).await;
    assert_eq!(v["state"], "completed_with_errors", "{v:#}");
    assert_eq!((v["counts"]["succeeded"].as_u64(), v["counts"]["failed"].as_u64()), (Some(180), Some(20)));
    let (_, failed) =
        p.call(&token, Method::GET, &format!("/v1/jobs/{id}/items?state=failed&page_size=100"), None).await;
    let failed_idx: BTreeSet<u64> =
        failed["items"].as_array().expect("items").iter().filter_map(|i| i["idx"].as_u64()).collect();
    assert_eq!(failed_idx, (0..200).filter(|i| i % 10 == 3).collect());
    assert_eq!(failed["items"][0]["error"]["type"], "input");
    assert_eq!(failed["items"][0]["error"]["message"], "bad item");
    let (_, log5) = p.call(&token, Method::GET, &format!("/v1/jobs/{id}/items/5/log"), None).await;
    let _ = log5;
    let log5 = p
        .http
        .get(p.url(&format!("/v1/jobs/{id}/items/5/log")))
        .bearer_auth(&token)
        .send()
        .await
        .expect("log");
    let text = log5.text().await.expect("text");
    assert_eq!(text.lines().count(), 2, "a retried attempt, then success: {text}");
    assert!(text.lines().next().is_some_and(|l| l.contains("\"retrying\"")), "{text}");
    // A succeeded item's marker holds its end; touching it would change it.
    let succeeded = |markers: BTreeMap<u64, Value>| -> BTreeMap<u64, Value> {
        markers.into_iter().filter(|(i, _)| i % 10 != 3).collect()
    };
    let before = succeeded(markers(&p, &id).await);
    assert_eq!(before.len(), 180);
    let (status, r) = p.call(&token, Method::POST, &format!("/v1/jobs/{id}/retry-failed"), None).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["round"], 1);
    assert_ne!(r["state"], "completed_with_errors", "the failed items are running again: {r:#}");
    let v = wait_final(&p, &token, &id, Duration::from_secs(60)).await;
    assert_eq!(v["state"], "succeeded", "{v:#}");
    assert_eq!((v["counts"]["succeeded"].as_u64(), v["counts"]["failed"].as_u64()), (Some(200), Some(0)));
    assert_eq!(succeeded(markers(&p, &id).await), before, "succeeded items were not touched");
    let logs = logs(&p, &id).await;
    let ran: BTreeMap<u64, usize> =
        logs.iter().map(|(i, b)| (*i, String::from_utf8_lossy(b).lines().count())).collect();
    for (i, n) in &ran {
        let want = if i % 10 == 3 || *i == 5 { 2 } else { 1 };
        assert_eq!(*n, want, "item {i} ran {n} times");
    }
    let failed: Vec<u64> = ends(&p, &id)
        .await
        .into_iter()
        .filter(|(_, e)| e["outcome"] != "succeeded")
        .map(|(i, _)| i)
        .collect();
    assert!(failed.is_empty(), "the retried items' failed ends are gone: {failed:?}");
    let history = p
        .platform
        .state
        .store
        .query(
            &mapi_store::Query::new("job_item_history").filter("job", mapi_store::Op::Eq, id.as_str()),
            None,
        )
        .await
        .expect("history");
    assert_eq!(history.len(), 20, "the first round's failures stay in the ledger");
    assert_eq!(active_items(&p, "dev").await, 0);
    let (status, again) = p.call(&token, Method::POST, &format!("/v1/jobs/{id}/cancel"), None).await;
    assert_eq!((status, again["code"].as_str()), (409, Some("FAILED_PRECONDITION")));
}

/// Items charged in the ledger's minute documents of job `id`.
async fn charged_items(p: &TestPlatform, id: &str) -> u64 {
    let q = mapi_store::Query::new(<mapi_schema::ItemLedgerMinute as mapi_schema::Doc>::COLLECTION).filter(
        "job",
        mapi_store::Op::Eq,
        id,
    );
    let docs = p.platform.state.store.query(&q, None).await.expect("ledger");
    docs.iter().map(|d| d.decode::<mapi_schema::ItemLedgerMinute>().expect("entry").sums.items).sum()
}

/// A delivery of round 0 that comes after retry-failed reopened its item
/// (a redelivery, or one that ran long) finds the item's round-0 marker in
/// the history: the item is neither counted nor charged again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_delivery_of_a_reopened_round_counts_nothing() {
    let _serial = SERIAL.lock().await;
    let p = quiet(&[], None).await;
    let token = p.token().to_owned();
    let items: Vec<Value> =
        (0..3).map(|i| if i == 1 { json!({"i": i, "fail_rounds": 1}) } else { json!({"i": i}) }).collect();
    let body =
        json!({"method": "diag.item", "items": items.clone(), "options": {"params": {"message": "bad"}}});
    let id = submit_job(&p, &token, "dev", body).await;
    let deliverer = deliver(&p, &p.platform.url);
    let v = wait_final(&p, &token, &id, Duration::from_secs(60)).await;
    assert_eq!(v["state"], "completed_with_errors", "{v:#}");
    deliverer.abort();
    // No deliverer: item 1 is reopened and its round-1 task waits.
    let (status, r) = p.call(&token, Method::POST, &format!("/v1/jobs/{id}/retry-failed"), None).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(charged_items(&p, &id).await, 3);
    let counts = |v: &Value| (v["counts"]["succeeded"].as_u64(), v["counts"]["failed"].as_u64());
    assert_eq!(counts(&job(&p, &token, &id).await), (Some(2), Some(0)), "item 1 is open again");
    // Item 1's round-0 task, delivered late: it fails again, in round 0.
    let internal = p.platform.state.config.secrets.internal_token.clone();
    let task = json!({"job": id, "idx": 1, "round": 0, "item": items[1]});
    let (status, r) = p.call(&internal, Method::POST, mapi_jobs::tasks::ITEM_PATH, Some(task)).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(charged_items(&p, &id).await, 3, "the late delivery is not charged again");
    assert_eq!(counts(&job(&p, &token, &id).await), (Some(2), Some(0)), "nor counted again");
    // Round 1 runs: item 1 succeeds, and its attempt is charged.
    let _deliverer = deliver(&p, &p.platform.url);
    let v = wait_final(&p, &token, &id, Duration::from_secs(60)).await;
    assert_eq!(v["state"], "succeeded", "{v:#}");
    assert_eq!(counts(&v), (Some(3), Some(0)));
    assert_eq!(charged_items(&p, &id).await, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_jobs_are_problems_and_the_platform_describes_itself() {
    let _serial = SERIAL.lock().await;
    let p = quiet(&[("MAPI_JOB_MAX_ITEMS", "50")], None).await;
    let token = p.token().to_owned();
    let path = "/v1/tenants/dev/projects/default/jobs";
    let cases = [
        (json!({"method": "describe", "items": [1]}), 400, "INVALID_ARGUMENT"),
        (json!({"method": "nope", "items": [1]}), 400, "INVALID_ARGUMENT"),
        (json!({"method": "item.echo", "items": []}), 400, "INVALID_ARGUMENT"),
        (
            json!({"method": "text.stats", "items": [1], "options": {"params": {"field": 3}}}),
            400,
            "INVALID_ARGUMENT",
        ),
        (json!({"method": "item.echo", "items": [1], "extra": true}), 400, "INVALID_ARGUMENT"),
        (json!({"method": "item.echo", "items": vec![1; 51]}), 413, "PAYLOAD_TOO_LARGE"),
    ];
    for (body, status, code) in cases {
        let (s, v) = p.call(&token, Method::POST, path, Some(body.clone())).await;
        assert_eq!((s, v["code"].as_str()), (status, Some(code)), "{body}: {v}");
    }
    let (s, _) =
        p.call("not-a-token", Method::POST, path, Some(json!({"method": "item.echo", "items": [1]}))).await;
    assert_eq!(s, 401);
    let (s, v) = p.call(&token, Method::GET, "/v1/jobs/job_nope", None).await;
    assert_eq!((s, v["code"].as_str()), (404, Some("NOT_FOUND")));
    let usage = p.http.get(p.url("/v1/usage")).send().await.expect("usage");
    assert!(usage.headers()["content-type"].to_str().expect("type").starts_with("text/plain"));
    let text = usage.text().await.expect("text");
    for m in mapi_methods::all() {
        assert!(text.contains(&format!("## {} (", m.name)), "{} is documented", m.name);
    }
    assert!(text.contains("\"method\": \"text.stats\""), "with an example call");
    let (_, manifest) = p.call(&token, Method::GET, "/manifest", None).await;
    assert_eq!(manifest["api_version"], "v1");
    assert_eq!(manifest["method_registry_version"], mapi_methods::registry_version());
    let (_, health) = p.call(&token, Method::GET, "/health", None).await;
    assert_eq!(health, json!({"status": "ok"}));
}

/// An item holding a number no 64-bit float holds is refused at submit,
/// naming the item; a manifest that holds one anyway (written before that
/// refusal) stops its fan-out for good: the job fails with the reason, its
/// window is given back, and no delivery is made again and again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_out_of_a_floats_range_are_refused_and_an_unreadable_manifest_fails_its_job() {
    let _serial = SERIAL.lock().await;
    let p = quiet(&[], None).await;
    let token = p.token().to_owned();
    let path = "/v1/tenants/dev/projects/default/jobs";
    for (items, named) in [("[1, 1e999, 3]", "item 1"), (r#"[{"x": [-1e999]}]"#, "item 0")] {
        let body = format!(r#"{{"method": "item.echo", "items": {items}}}"#);
        let resp = p
            .http
            .post(p.url(path))
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("submit");
        assert_eq!(resp.status(), 400, "{items}");
        let problem: Value = resp.json().await.expect("problem");
        assert_eq!(problem["code"], "INVALID_ARGUMENT", "{problem}");
        let detail = problem["detail"].as_str().expect("detail");
        assert!(detail.contains(named) && detail.contains("1e999"), "{items}: {detail}");
    }

    // A stored manifest the fan-out cannot read as items.
    let id = submit_job(&p, &token, "dev", json!({"method": "item.echo", "items": [1, 2, 3, 4]})).await;
    let chunk =
        mapi_objects::ObjectKey::parse(&format!("t/dev/p/default/jobs/{id}/items/000000.json")).expect("key");
    let objects = &p.platform.state.objects;
    objects
        .put(
            &chunk,
            bytes::Bytes::from_static(b"[1, 1e999, 3, 4]"),
            "application/json",
            mapi_objects::IfGeneration::Any,
        )
        .await
        .expect("overwrite the chunk");
    let _deliverer = deliver(&p, &p.platform.url);
    let v = wait_final(&p, &token, &id, Duration::from_secs(30)).await;
    assert_eq!(v["state"], "failed", "{v:#}");
    assert_eq!(
        (v["counts"]["enqueued"].as_u64(), v["counts"]["cancelled"].as_u64()),
        (Some(0), Some(4)),
        "{v:#}"
    );
    let error = v["error"].as_str().expect("the job says why");
    assert!(error.contains("items 0 to") && error.contains("cannot be read"), "{error}");
    assert_eq!(active_items(&p, "dev").await, 0, "the window is given back");
    // The step that stopped was answered as done: nothing is left to deliver again.
    let queue = p.platform.state.local.queue.as_ref().expect("the embedded queue");
    let started = std::time::Instant::now();
    loop {
        let mut depths = Vec::new();
        for name in [mapi_jobs::tasks::FANOUT_QUEUE, ITEMS_QUEUE] {
            depths.push(queue.depth(&QueueName::new(name).expect("name")).await.expect("depth"));
        }
        if depths.iter().all(|n| *n == 0) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "tasks left to deliver: {depths:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The spend-cap alarms watch the cap the operator set: a tick announces
/// 70 % of it once (a warning: a ticket), 90 % once (an error: a page), and
/// a changed cap or a new period starts afresh.
#[tokio::test]
async fn the_spend_cap_alarms_once_at_70_and_at_90_percent_of_the_cap_the_operator_set() {
    let _serial = SERIAL.lock().await;
    let p = quiet(&[], None).await;
    let operator = p.login("admin@dev.local").await;
    let dev = p.token().to_owned();
    let internal = p.platform.state.config.secrets.internal_token.clone();
    let _deliverer = deliver(&p, &p.platform.url);
    let items = (0..3).map(|i| json!({"i": i, "sleep_ms": 30})).collect::<Vec<_>>();
    let done = submit_job(&p, &dev, "dev", json!({"method": "diag.item", "items": items})).await;
    assert_eq!(wait_final(&p, &dev, &done, Duration::from_secs(30)).await["state"], "succeeded");
    let month = mapi_quota::Period::Month.key(p.platform.state.clock.now());
    let spent = mapi_quota::counters::read(&*p.platform.state.store, &format!("platform@{month}"))
        .await
        .expect("counter")
        .spend_micros;
    assert!(spent > 0, "the items were charged");
    let set_cap = |cap: i64| {
        let body = json!({"spend_cap_micros": cap, "spend_cap_period": "month", "reason": "test: alarms"});
        p.call(&operator, Method::PUT, "/v1/admin/kill-switches", Some(body))
    };
    let tick = || p.call(&internal, Method::POST, "/internal/tick", Some(json!({})));
    let alarms = || p.platform.state.metrics.spend_cap_alarms.get();

    let (s, b) = set_cap(spent * 2).await;
    assert_eq!(s, 200, "{b}");
    let (_, report) = tick().await;
    assert_eq!((report["spend_cap_alarm"].clone(), alarms()), (Value::Null, 0), "50 %: {report}");
    set_cap(spent * 100 / 75).await;
    let (_, report) = tick().await;
    assert_eq!((report["spend_cap_alarm"].as_u64(), alarms()), (Some(70), 1), "75 %: {report}");
    let (_, report) = tick().await;
    assert_eq!((report["spend_cap_alarm"].clone(), alarms()), (Value::Null, 1), "said once: {report}");
    set_cap(spent * 100 / 95).await;
    let (_, report) = tick().await;
    assert_eq!((report["spend_cap_alarm"].as_u64(), alarms()), (Some(90), 2), "95 %: {report}");
    let (_, report) = tick().await;
    assert_eq!((report["spend_cap_alarm"].clone(), alarms()), (Value::Null, 2), "said once: {report}");
    set_cap(spent * 100 / 80).await;
    let (_, report) = tick().await;
    assert_eq!((report["spend_cap_alarm"].as_u64(), alarms()), (Some(70), 3), "a new cap: {report}");
}

/// The platform's spend cap sees item jobs' compute (items charge the
/// platform's spend like runs): once the ledgers reach it, a new job of a
/// tenant that is not internal is refused at submit, a job admitted earlier
/// enqueues nothing more (its fan-out waits, it never fails), and when the
/// cap is lifted that job runs to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spend_cap_stops_item_jobs_compute_and_lifting_it_resumes_them() {
    let _serial = SERIAL.lock().await;
    let accounts = ("MAPI_DEV_ACCOUNTS", "admin@dev.local,dev@dev.local,owner@pub.test");
    let p = quiet(&[("MAPI_JOB_FANOUT_BATCH", "1"), ("MAPI_JOB_HOLD_WAIT_S", "1"), accounts], None).await;
    let operator = p.login("admin@dev.local").await;
    let owner = p.create_tenant(&operator, "pub", "public").await;
    let dev = p.token().to_owned();
    let items = |n: usize| (0..n).map(|i| json!({"i": i, "sleep_ms": 30})).collect::<Vec<_>>();
    let spend = || async {
        let month = mapi_quota::Period::Month.key(p.platform.state.clock.now());
        mapi_quota::counters::read(&*p.platform.state.store, &format!("platform@{month}"))
            .await
            .expect("counter")
            .spend_micros
    };

    // An internal tenant's items are charged to the platform's spend.
    let deliverer = deliver(&p, &p.platform.url);
    let warm = submit_job(&p, &dev, "dev", json!({"method": "diag.item", "items": items(3)})).await;
    assert_eq!(wait_final(&p, &dev, &warm, Duration::from_secs(30)).await["state"], "succeeded");
    let spent = spend().await;
    assert!(spent > 0, "items charge the platform's spend counter");

    // A public tenant's job admitted before the cap, not fanned out yet.
    deliverer.abort();
    let _ = deliverer.await;
    let body = json!({"method": "diag.item", "items": items(4)});
    let held = submit_job(&p, &owner, "pub", body.clone()).await;
    let cap = json!({"spend_cap_micros": spent, "spend_cap_period": "month", "reason": "test: cap reached"});
    let (s, b) = p.call(&operator, Method::PUT, "/v1/admin/kill-switches", Some(cap)).await;
    assert_eq!(s, 200, "{b}");
    let path = "/v1/tenants/pub/projects/default/jobs";
    let (s, refused) = p.call(&owner, Method::POST, path, Some(body)).await;
    assert_eq!((s, refused["code"].as_str()), (429, Some("QUOTA_EXCEEDED")), "{refused}");
    assert!(refused["detail"].as_str().is_some_and(|d| d.contains("spend")), "{refused}");

    // Its fan-out is held: the cursor moves on, nothing is enqueued.
    let _deliverer = deliver(&p, &p.platform.url);
    let started = std::time::Instant::now();
    loop {
        let doc: mapi_jobs::JobDoc =
            mapi_schema::get(&*p.platform.state.store, &held).await.expect("get").expect("job");
        if doc.fanout.step >= 2 {
            assert_eq!((doc.fanout.enqueued, doc.fanout.reserved), (0, 0), "held, twice: nothing enqueued");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "the fan-out stepped: {doc:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let v = job(&p, &owner, &held).await;
    assert_eq!((v["state"].as_str(), v["counts"]["enqueued"].as_u64()), (Some("enqueuing"), Some(0)), "{v}");
    assert_eq!(spend().await, spent, "no compute started");

    // The cap lifted, the job runs to its end.
    let lift = json!({"spend_cap_micros": 0, "reason": "test: incident over"});
    let (s, b) = p.call(&operator, Method::PUT, "/v1/admin/kill-switches", Some(lift)).await;
    assert_eq!(s, 200, "{b}");
    let v = wait_final(&p, &owner, &held, Duration::from_secs(30)).await;
    assert_eq!((v["state"].as_str(), v["counts"]["succeeded"].as_u64()), (Some("succeeded"), Some(4)), "{v}");
    assert!(spend().await > spent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_submits_watches_and_reads_a_job() {
    let _serial = SERIAL.lock().await;
    let p = quiet(&[], None).await;
    let _deliverer = deliver(&p, &p.platform.url);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("items.jsonl");
    std::fs::write(&file, "{\"text\": \"one two\"}\n\n\"three four five\"\n{\"nope\": 1}\n").expect("write");
    let mapi = |args: &[&str]| {
        let mut c = tokio::process::Command::new(mapi_tests::binary("mapi"));
        c.args(["--url", &p.platform.url, "--token", p.token()]).args(args).env("MAPI_HOME", dir.path());
        c.output()
    };
    let out = mapi(&[
        "--json",
        "jobs",
        "submit",
        "text.stats",
        "--items",
        file.to_str().expect("path"),
        "--watch",
        "--tenant",
        "dev",
        "--project",
        "default",
    ])
    .await
    .expect("mapi jobs submit");
    assert_eq!(out.status.code(), Some(1), "one item failed, so the job is not a success");
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["state"], "completed_with_errors");
    assert_eq!((v["counts"]["succeeded"].as_u64(), v["counts"]["failed"].as_u64()), (Some(2), Some(1)));
    let id = v["id"].as_str().expect("id");
    let out = mapi(&["jobs", "items", id, "--state", "failed"]).await.expect("items");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("input: the item has no string field `text`"), "{text}");
    let out = mapi(&["jobs", "log", id, "1"]).await.expect("log");
    let line: Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    assert_eq!((line["outcome"].as_str(), line["attempt"].as_u64()), (Some("succeeded"), Some(1)));
    let out = mapi(&["jobs", "get", id]).await.expect("get");
    assert!(String::from_utf8_lossy(&out.stdout).contains("3 total: 2 succeeded, 1 failed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_housekeeper_deletes_jobs_past_their_retention() {
    let _serial = SERIAL.lock().await;
    let clock = Arc::new(mapi_clock::VirtualClock::new(mapi_domain::Timestamp::from_secs(1_800_000_000)));
    let p = TestPlatform::start_with(
        &[("MAPI_JOB_RETENTION_DAYS", "7")],
        Options { background: false, clock: clock.clone(), ..Options::default() },
    )
    .await;
    let _deliverer = deliver(&p, &p.platform.url);
    let token = p.token().to_owned();
    let items: Vec<Value> = (0..30).map(|i| json!(i)).collect();
    // Virtual time stands still unless moved: move it while waiting, so
    // retries and waits scheduled ahead come due.
    let settle = |id: String| {
        let (p, clock, token) = (&p, clock.clone(), token.clone());
        async move {
            for _ in 0..600 {
                if mapi_tests::job_is_final(&job(p, &token, &id).await) {
                    return;
                }
                clock.advance(Duration::from_secs(1));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            panic!("job {id} did not finish");
        }
    };
    let old = submit_job(&p, &token, "dev", json!({"method": "item.echo", "items": items})).await;
    settle(old.clone()).await;
    clock.advance(Duration::from_secs(6 * 86_400));
    let recent = submit_job(&p, &token, "dev", json!({"method": "item.echo", "items": [1, 2]})).await;
    settle(recent.clone()).await;
    clock.advance(Duration::from_secs(2 * 86_400));
    let internal = p.platform.state.config.secrets.internal_token.clone();
    let (status, v) = p.call(&internal, Method::POST, mapi_tasks::housekeep::HOUSEKEEP_PATH, None).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["deleted_jobs"], 1, "only the job older than 7 days: {v}");
    // The manifest and one chunk (the items' ends are in their markers).
    assert_eq!(v["deleted_objects"], 2, "{v}");
    assert_eq!(p.call(&token, Method::GET, &format!("/v1/jobs/{old}"), None).await.0, 404);
    let left =
        p.platform.state.objects.list(&format!("t/dev/p/default/jobs/{old}/"), None, 10).await.expect("list");
    assert!(left.objects.is_empty(), "{left:?}");
    let markers = p
        .platform
        .state
        .store
        .query(&mapi_store::Query::new("job_items").filter("job", mapi_store::Op::Eq, old.as_str()), None)
        .await
        .expect("markers");
    assert!(markers.is_empty());
    assert_eq!(job(&p, &token, &recent).await["state"], "succeeded", "the recent job stays");
}

/// The dev tenant's usage this month, grouped by kind.
async fn usage_by_kind(p: &TestPlatform, token: &str) -> Value {
    let (status, u) =
        p.call(token, Method::GET, "/v1/tenants/dev/usage?period=month&group_by=kind", None).await;
    assert_eq!(status, 200, "{u}");
    u
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_are_metered_once_in_the_ledger_and_the_usage_report() {
    let _serial = SERIAL.lock().await;
    let p = quiet(&[], None).await;
    let _deliverer = deliver(&p, &p.platform.url);
    let token = p.token().to_owned();
    // Items that take time (so they cost something), one of them failing.
    let items: Vec<Value> = (0..12)
        .map(|i| if i == 7 { json!({"i": i, "fail_rounds": 1}) } else { json!({"i": i, "sleep_ms": 40}) })
        .collect();
    let body =
        json!({"method": "diag.item", "items": items.clone(), "options": {"params": {"message": "bad"}}});
    let id = submit_job(&p, &token, "dev", body).await;
    let v = wait_final(&p, &token, &id, Duration::from_secs(60)).await;
    assert_eq!(v["state"], "completed_with_errors", "{v:#}");
    let store = p.platform.state.store.clone();
    let ledger = || {
        let (store, id) = (store.clone(), id.clone());
        async move {
            let q = mapi_store::Query::new(<mapi_schema::ItemLedgerMinute as mapi_schema::Doc>::COLLECTION)
                .filter("job", mapi_store::Op::Eq, id.as_str());
            let docs = store.query(&q, None).await.expect("ledger");
            docs.iter()
                .map(|d| d.decode::<mapi_schema::ItemLedgerMinute>().expect("entry"))
                .collect::<Vec<_>>()
        }
    };
    let entries = ledger().await;
    // Each item counted once, in its shard's minute (a minute may turn during the job).
    let mut by_shard: BTreeMap<u32, u64> = BTreeMap::new();
    for e in &entries {
        *by_shard.entry(e.shard).or_default() += e.sums.items;
        assert_eq!(e.sums.tasks, e.sums.items, "one task per item: {e:?}");
    }
    let expected: BTreeMap<u32, u64> = (0..8).map(|s| (s, if s < 4 { 2 } else { 1 })).collect();
    assert_eq!(by_shard, expected, "the 12 items by shard: {entries:?}");
    let cost: i64 = entries.iter().map(|e| e.sums.amount_micros).sum();
    let vcpu: u64 = entries.iter().map(|e| e.sums.vcpu_ms).sum();
    assert!(vcpu >= 11 * 40, "the items' time is metered: {vcpu}");
    let operator = p.login("admin@dev.local").await;
    let u = usage_by_kind(&p, &operator).await;
    let item =
        u["groups"].as_array().expect("groups").iter().find(|g| g["key"] == "item").expect("item group");
    assert_eq!(item["totals"]["items"], 12, "{u:#}");
    assert_eq!(item["totals"]["cost_micros"].as_i64(), Some(cost), "{u:#}");
    assert_eq!(item["totals"]["vcpu_ms"].as_u64(), Some(vcpu), "{u:#}");
    // The ledger and the tenant's counters agree.
    let tenant: mapi_domain::TenantId = "dev".parse().expect("tenant");
    let month =
        mapi_quota::counters::tenant_period(&tenant, mapi_quota::Period::Month, p.platform.state.clock.now());
    let counter = mapi_quota::counters::read(&*store, &month).await.expect("counter");
    assert_eq!(counter.items, 12);
    assert_eq!(counter.spend_micros, u["totals"]["cost_micros"].as_i64().expect("cost"), "{u:#}");
    assert_eq!(counter.charged_vcpu_ms, i64::try_from(vcpu).expect("vcpu"));
    // Every item's task delivered again: nothing more is metered.
    let internal = p.platform.state.config.secrets.internal_token.clone();
    for (i, item) in items.iter().enumerate() {
        let task = json!({"job": id, "idx": i, "round": 0, "item": item});
        let (status, r) = p.call(&internal, Method::POST, mapi_jobs::tasks::ITEM_PATH, Some(task)).await;
        assert_eq!((status, r["outcome"].as_str()), (200, Some("done")), "{r}");
    }
    assert_eq!(ledger().await, entries, "a redelivered item adds nothing to the ledger");
    assert_eq!(usage_by_kind(&p, &operator).await["totals"], u["totals"]);
    assert_eq!(
        mapi_quota::counters::read(&*store, &month).await.expect("counter").spend_micros,
        counter.spend_micros
    );
}

/// Calls the retention housekeeper once; the jobs it deleted.
async fn housekeep(p: &TestPlatform) -> u64 {
    let internal = p.platform.state.config.secrets.internal_token.clone();
    let (status, v) = p.call(&internal, Method::POST, mapi_tasks::housekeep::HOUSEKEEP_PATH, None).await;
    assert_eq!(status, 200, "{v}");
    v["deleted_jobs"].as_u64().expect("deleted")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_housekeeper_honours_each_tenants_retention() {
    let _serial = SERIAL.lock().await;
    let clock = Arc::new(mapi_clock::VirtualClock::new(mapi_domain::Timestamp::from_secs(1_800_000_000)));
    let p = TestPlatform::start_with(
        &[
            ("MAPI_JOB_RETENTION_DAYS", "7"),
            ("MAPI_DEV_ACCOUNTS", "admin@dev.local,dev@dev.local,owner@other.test"),
        ],
        Options { background: false, clock: clock.clone(), ..Options::default() },
    )
    .await;
    let operator = p.login("admin@dev.local").await;
    let eve = p.create_tenant(&operator, "other", "internal").await;
    // 0 days would delete a tenant's jobs at once: refused.
    let zero = json!({"job_retention_days": 0});
    assert_eq!(p.call(&operator, Method::PUT, "/v1/admin/quotas/dev", Some(zero)).await.0, 400);
    // dev keeps its jobs 2 days; other 10; the platform's default is 7.
    for (tenant, days) in [("dev", 2), ("other", 10)] {
        let policy = json!({"job_retention_days": days});
        let (status, v) =
            p.call(&operator, Method::PUT, &format!("/v1/admin/quotas/{tenant}"), Some(policy)).await;
        assert_eq!(status, 200, "{v}");
    }
    let _deliverer = deliver(&p, &p.platform.url);
    let token = p.token().to_owned();
    let settle = |token: String, id: String| {
        let (p, clock) = (&p, clock.clone());
        async move {
            for _ in 0..600 {
                if mapi_tests::job_is_final(&job(p, &token, &id).await) {
                    return;
                }
                clock.advance(Duration::from_secs(1));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            panic!("job {id} did not finish");
        }
    };
    let dev_job = submit_job(&p, &token, "dev", json!({"method": "item.echo", "items": [1, 2, 3]})).await;
    settle(token.clone(), dev_job.clone()).await;
    let other_job = submit_job(&p, &eve, "other", json!({"method": "item.echo", "items": [1, 2]})).await;
    settle(eve.clone(), other_job.clone()).await;
    // Sign-ins expire in virtual time: eve signs in again after each move.
    clock.advance(Duration::from_secs(86_400));
    assert_eq!(housekeep(&p).await, 0, "a day old: both kept");
    clock.advance(Duration::from_secs(2 * 86_400));
    assert_eq!(housekeep(&p).await, 1, "three days old: dev's 2-day retention has passed");
    assert_eq!(p.call(&token, Method::GET, &format!("/v1/jobs/{dev_job}"), None).await.0, 404);
    assert_eq!(job(&p, &p.login("owner@other.test").await, &other_job).await["state"], "succeeded");
    clock.advance(Duration::from_secs(5 * 86_400));
    assert_eq!(housekeep(&p).await, 0, "eight days old: past the platform's 7, not other's 10");
    assert_eq!(job(&p, &p.login("owner@other.test").await, &other_job).await["state"], "succeeded");
    clock.advance(Duration::from_secs(3 * 86_400));
    assert_eq!(housekeep(&p).await, 1, "eleven days old: past other's 10");
    assert_eq!(
        p.call(&p.login("owner@other.test").await, Method::GET, &format!("/v1/jobs/{other_job}"), None)
            .await
            .0,
        404
    );
}
