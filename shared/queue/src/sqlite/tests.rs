//! Tests of the SQLite adapter: the conformance suite in virtual time, plus
//! what only an embedded queue can show (durability, lost deliverers,
//! concurrency across deliverers, shutdown, dead tasks, purging, metrics).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use mapi_clock::VirtualClock;
use mapi_domain::Timestamp;
use mapi_metrics::Metrics;
use tempfile::TempDir;

use super::*;
use crate::conformance::{Delivery, Harness, Reply, ScriptedTarget, Setup, main_queue, queues};

const START: Timestamp = Timestamp::from_secs(1_800_000_000);

struct SqliteHarness {
    _dir: TempDir,
    clock: Arc<VirtualClock>,
    queue: SqliteQueue,
    deliverer: Deliverer,
}

fn deliverer(queue: &SqliteQueue, setup: &Setup, metrics: Metrics) -> Deliverer {
    Deliverer::new(queue.clone(), reqwest::Client::new(), setup.target.clone(), setup.auth.clone(), metrics)
}

async fn harness(setup: Setup) -> SqliteHarness {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(VirtualClock::new(START));
    let queue =
        SqliteQueue::open(&dir.path().join("mapi.db"), clock.clone(), setup.queues.clone()).expect("open");
    let deliverer = deliverer(&queue, &setup, Metrics::new());
    SqliteHarness { _dir: dir, clock, queue, deliverer }
}

#[async_trait]
impl Harness for SqliteHarness {
    fn queue(&self) -> &dyn TaskQueue {
        &self.queue
    }

    async fn deliver_due(&self) -> usize {
        self.deliverer.step().await.expect("step")
    }

    fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }
}

crate::queue_conformance_suite!(harness);

/// The suite's queues, with the main one edited.
fn with_main(edit: impl FnOnce(&mut QueueConfig)) -> Vec<QueueConfig> {
    let mut qs = queues();
    if let Some(main) = qs.iter_mut().find(|q| q.name == main_queue()) {
        edit(main);
    }
    qs
}

fn open(dir: &TempDir, clock: &Arc<VirtualClock>, queues: Vec<QueueConfig>) -> SqliteQueue {
    SqliteQueue::open(&dir.path().join("mapi.db"), clock.clone(), queues).expect("open")
}

fn task(path: &str) -> NewTask {
    NewTask::new(main_queue(), path, Bytes::from_static(b"{\"k\":1}"))
}

fn fresh() -> (TempDir, Arc<VirtualClock>) {
    (tempfile::tempdir().expect("tempdir"), Arc::new(VirtualClock::new(START)))
}

#[tokio::test]
async fn tasks_survive_reopening_the_file() {
    let target = ScriptedTarget::start(|_, _| Reply::ok()).await;
    let (dir, clock) = fresh();
    {
        let q = open(&dir, &clock, queues());
        q.create(task("/internal/durable")).await.expect("create");
    }
    let q = open(&dir, &clock, queues());
    assert_eq!(q.depth(&main_queue()).await, Ok(1));
    let d = deliverer(&q, &target.setup(), Metrics::new());
    assert_eq!(d.step().await, Ok(1));
    let got = target.deliveries();
    assert_eq!((got[0].path.as_str(), &got[0].body[..]), ("/internal/durable", &b"{\"k\":1}"[..]));
}

#[tokio::test]
async fn a_lost_delivery_is_made_again_after_its_lease_expires() {
    let target = ScriptedTarget::start(|_, n| {
        if n == 0 { Reply::ok().after(Duration::from_secs(3600)) } else { Reply::ok() }
    })
    .await;
    let (dir, clock) = fresh();
    let configs = queues();
    let deadline = configs[0].dispatch_deadline;
    {
        let q = open(&dir, &clock, configs.clone());
        q.create(task("/internal/lost")).await.expect("create");
        let d = deliverer(&q, &target.setup(), Metrics::new());
        let stepping = tokio::spawn(async move { d.step().await });
        target.wait_for(1).await;
        // The process dies mid-delivery: nothing records the outcome.
        stepping.abort();
        assert!(stepping.await.is_err_and(|e| e.is_cancelled()));
    }
    let q = open(&dir, &clock, configs);
    let d = deliverer(&q, &target.setup(), Metrics::new());
    assert_eq!(d.step().await, Ok(0), "the lease still holds");
    assert_eq!(q.depth(&main_queue()).await, Ok(1), "a leased task is pending");
    clock.advance(deadline + LEASE_MARGIN);
    assert_eq!(d.step().await, Ok(1), "the expired lease makes the task due");
    let got = target.deliveries();
    assert_eq!(got.len(), 2);
    assert_eq!(got[1].retry_count(), Some(1), "the lost attempt counts");
    assert_eq!(q.depth(&main_queue()).await, Ok(0));
}

#[tokio::test]
async fn the_dispatch_deadline_fails_a_delivery() {
    let target =
        ScriptedTarget::start(
            |_, n| if n == 0 { Reply::ok().after(Duration::from_secs(30)) } else { Reply::ok() },
        )
        .await;
    let (dir, clock) = fresh();
    let q = open(&dir, &clock, with_main(|c| c.dispatch_deadline = Duration::from_millis(200)));
    q.create(task("/internal/slow")).await.expect("create");
    let d = deliverer(&q, &target.setup(), Metrics::new());
    assert_eq!(d.step().await, Ok(1));
    assert_eq!(q.depth(&main_queue()).await, Ok(1), "timed out, so still pending");
    assert_eq!(d.step().await, Ok(0), "and waiting for its back-off");
    clock.advance(Duration::from_secs(10));
    assert_eq!(d.step().await, Ok(1));
    assert_eq!(target.deliveries()[1].retry_count(), Some(1));
    assert_eq!(q.depth(&main_queue()).await, Ok(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_dispatches_are_limited_across_deliverers() {
    let target = ScriptedTarget::start(|_, _| Reply::ok().after(Duration::from_millis(100))).await;
    let (dir, clock) = fresh();
    let q = open(&dir, &clock, with_main(|c| c.max_concurrent_dispatches = 2));
    for _ in 0..6 {
        q.create(task("/internal/slow")).await.expect("create");
    }
    let mut stops = Vec::new();
    let mut runs = Vec::new();
    for _ in 0..2 {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let d = deliverer(&q, &target.setup(), Metrics::new());
        runs.push(tokio::spawn(d.run(async move {
            let _ = stopped.await;
        })));
        stops.push(stop);
    }
    target.wait_for(6).await;
    for _ in 0..200 {
        if q.depth(&main_queue()).await == Ok(0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(q.depth(&main_queue()).await, Ok(0));
    for stop in stops {
        let _ = stop.send(());
    }
    for run in runs {
        run.await.expect("run ends");
    }
    assert_eq!(target.max_in_flight(), 2, "two at a time, never more");
    let names: std::collections::BTreeSet<String> =
        target.deliveries().iter().map(|d| d.task_name().to_owned()).collect();
    assert_eq!((names.len(), target.count()), (6, 6), "each task delivered exactly once");
}

#[tokio::test]
async fn run_wakes_on_create_and_shutdown_gives_back_its_leases() {
    let target = ScriptedTarget::start(|_, n| {
        if n == 0 { Reply::ok().after(Duration::from_secs(3600)) } else { Reply::ok() }
    })
    .await;
    let (dir, clock) = fresh();
    let q = open(&dir, &clock, queues());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(deliverer(&q, &target.setup(), Metrics::new()).run(async move {
        let _ = stopped.await;
    }));
    q.create(task("/internal/hang")).await.expect("create");
    target.wait_for(1).await;
    let _ = stop.send(());
    run.await.expect("run ends");
    assert_eq!(q.depth(&main_queue()).await, Ok(1));
    let d = deliverer(&q, &target.setup(), Metrics::new());
    assert_eq!(d.step().await, Ok(1), "due again at once, without waiting for the lease");
    assert_eq!(target.deliveries()[1].retry_count(), Some(0), "an abandoned attempt does not count");
}

#[tokio::test]
async fn dead_tasks_are_kept_until_their_name_is_reused() {
    let target = ScriptedTarget::start(|_, _| Reply::status(500)).await;
    let (dir, clock) = fresh();
    let q = open(&dir, &clock, with_main(|c| c.retry.max_attempts = 2));
    let named = task("/internal/doomed").named(TaskName::new("doomed").expect("name"));
    q.create(named.clone()).await.expect("create");
    let d = deliverer(&q, &target.setup(), Metrics::new());
    assert_eq!(d.step().await, Ok(1));
    clock.advance(Duration::from_secs(10));
    assert_eq!(d.step().await, Ok(1));
    let dead = q.dead_tasks(&main_queue()).await.expect("dead tasks");
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].name.as_str(), dead[0].attempts, dead[0].last_status.as_str()),
        ("doomed", 2, "HTTP 500")
    );
    assert_eq!(
        (dead[0].path.as_str(), &dead[0].body[..], dead[0].died),
        ("/internal/doomed", &b"{\"k\":1}"[..], clock.now())
    );
    clock.advance(Duration::from_secs(2 * 3600));
    assert_eq!(d.step().await, Ok(0));
    assert_eq!(q.dead_tasks(&main_queue()).await.map(|d| d.len()), Ok(1), "kept past the dedup window");
    q.create(named).await.expect("the name is free after the window");
    assert_eq!(q.dead_tasks(&main_queue()).await, Ok(vec![]));
}

#[tokio::test]
async fn tombstones_are_purged_after_the_dedup_window() {
    let target = ScriptedTarget::start(|_, _| Reply::ok()).await;
    let (dir, clock) = fresh();
    let q = open(&dir, &clock, queues());
    q.create(task("/internal/x")).await.expect("create");
    q.create(task("/internal/y")).await.expect("create");
    let d = deliverer(&q, &target.setup(), Metrics::new());
    assert_eq!(d.step().await, Ok(2));
    let rows = |q: &SqliteQueue| -> i64 {
        let conn = q.inner.conn.lock().expect("connection");
        conn.query_row("SELECT COUNT(*) FROM queue_tasks", [], |r| r.get(0)).expect("count")
    };
    assert_eq!(rows(&q), 2, "tombstones reserve the names");
    clock.advance(Duration::from_secs(3600));
    assert_eq!(d.step().await, Ok(0));
    assert_eq!(rows(&q), 0);
}

/// SQLite virtual-machine instructions `f` takes on the queue's connection:
/// a count, not a timing, so it repeats exactly.
async fn instructions<T>(q: &SqliteQueue, f: impl std::future::Future<Output = T>) -> (u64, T) {
    let count = Arc::new(AtomicU64::new(0));
    let counted = count.clone();
    q.inner
        .conn
        .lock()
        .expect("connection")
        .progress_handler(
            1,
            Some(move || {
                counted.fetch_add(1, Ordering::Relaxed);
                false
            }),
        )
        .expect("count instructions");
    let out = f.await;
    q.inner
        .conn
        .lock()
        .expect("connection")
        .progress_handler(1, None::<fn() -> bool>)
        .expect("stop counting");
    (count.load(Ordering::Relaxed), out)
}

/// Adds `n` tombstones (delivered tasks whose names are reserved for the
/// dedup window), as an hour of items leaves.
fn add_tombstones(q: &SqliteQueue, n: u32, reserved_until: Timestamp) {
    let conn = q.inner.conn.lock().expect("connection");
    conn.execute(
        "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?1)
         INSERT INTO queue_tasks (queue, name, path, body, state, schedule_time, created, attempts,
                                  finished, reserved_until, last_status)
         SELECT ?2, printf('done-%08d', i + (SELECT COUNT(*) FROM queue_tasks)), '/internal/x', x'',
                'done', ?3, ?3, 1, ?3, ?3 + 1, '200'
         FROM k",
        params![n, main_queue().as_str(), micros(reserved_until) - 1],
    )
    .expect("tombstones");
}

#[tokio::test]
async fn a_poll_costs_the_same_whatever_the_tombstones() {
    let (dir, clock) = fresh();
    let q = open(&dir, &clock, queues());
    let until = clock.now() + Duration::from_secs(3600);
    q.create(task("/internal/x")).await.expect("create");
    assert_eq!(q.lease_due().await.map(|l| l.len()), Ok(1));
    let mut costs = Vec::new();
    for n in [100, 20_000] {
        add_tombstones(&q, n, until);
        let (idle, leased) = instructions(&q, q.lease_due()).await;
        assert_eq!(leased.map(|l| l.len()), Ok(0), "nothing is due");
        let (depth, d) = instructions(&q, q.depth(&main_queue())).await;
        assert_eq!(d, Ok(1), "the leased task");
        let (depths, _) = instructions(&q, q.depths()).await;
        costs.push([idle, depth, depths]);
    }
    // The same poll over 200 times the tombstones: a seek costs a few
    // instructions more per level of the B-tree, a scan some per row.
    for (few, many) in costs[0].iter().zip(&costs[1]) {
        assert!(
            *many <= few + 200,
            "instructions with 100 tombstones {:?}, with 20,100 {:?}",
            costs[0],
            costs[1]
        );
    }
}

#[tokio::test]
async fn deliveries_and_depth_are_measured() {
    let target =
        ScriptedTarget::start(
            |d: &Delivery, _| {
                if d.path == "/internal/fail" { Reply::status(500) } else { Reply::ok() }
            },
        )
        .await;
    let (dir, clock) = fresh();
    let q = open(&dir, &clock, queues());
    let metrics = Metrics::new();
    let d = deliverer(&q, &target.setup(), metrics.clone());
    q.create(task("/internal/ok")).await.expect("create");
    q.create(task("/internal/fail")).await.expect("create");
    q.create(task("/internal/ok").at(clock.now() + Duration::from_secs(60))).await.expect("create");
    assert_eq!(d.step().await, Ok(2));
    let text = metrics.render();
    assert!(text.contains("mapi_queue_deliveries_total{queue=\"main\"} 2"), "{text}");
    assert!(text.contains("mapi_queue_depth{queue=\"main\"} 2"), "{text}");
    assert!(text.contains("mapi_queue_depth{queue=\"short\"} 0"), "{text}");
}

#[tokio::test]
async fn the_file_is_shared_with_other_tables() {
    let (dir, clock) = fresh();
    let path = dir.path().join("mapi.db");
    {
        let conn = rusqlite::Connection::open(&path).expect("open");
        conn.execute_batch(
            "CREATE TABLE documents (id TEXT PRIMARY KEY); INSERT INTO documents VALUES ('a');",
        )
        .expect("other tables");
    }
    let q = open(&dir, &clock, queues());
    q.create(task("/internal/x")).await.expect("create");
    let conn = rusqlite::Connection::open(&path).expect("open");
    let n: i64 = conn.query_row("SELECT COUNT(*) FROM documents", [], |r| r.get(0)).expect("count");
    assert_eq!(n, 1);
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).expect("journal mode");
    assert_eq!(mode, "wal");
}

#[test]
fn bad_queue_configs_are_refused() {
    let (dir, clock) = fresh();
    let mut twice = queues();
    twice.push(twice[0].clone());
    assert!(matches!(
        SqliteQueue::open(&dir.path().join("a.db"), clock.clone(), twice),
        Err(QueueError::InvalidArgument(_))
    ));
    let zero = with_main(|c| c.max_concurrent_dispatches = 0);
    assert!(matches!(
        SqliteQueue::open(&dir.path().join("b.db"), clock, zero),
        Err(QueueError::InvalidArgument(_))
    ));
}

/// Creates that share a transaction are answered one by one: a refused
/// duplicate name does not undo the creates beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_are_answered_each_on_its_own() {
    let target = ScriptedTarget::start(|_, _| Reply::ok()).await;
    let h = harness(target.setup()).await;
    let task = |i: usize| {
        NewTask::new(main_queue(), "/internal/x", "{}")
            .named(TaskName::new(format!("t{}", i % 20)).expect("name"))
    };
    let mut all = Vec::new();
    for i in 0..60 {
        let q = h.queue.clone();
        all.push(tokio::spawn(async move { q.create(task(i)).await }));
    }
    let mut created = 0;
    for t in all {
        match t.await.expect("task") {
            Ok(_) => created += 1,
            Err(QueueError::AlreadyExists(_)) => {}
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert_eq!(created, 20, "each of the 20 names is created exactly once");
    assert_eq!(h.queue.depth(&main_queue()).await.expect("depth"), 20);
}

/// A home made when the queue shared the store's file hands its tasks to
/// the queue's own file once: every task, its name still reserved, and
/// generated names above the old file's.
#[tokio::test]
async fn tasks_left_in_the_shared_file_move_to_the_queues_own_once() {
    let (dir, clock) = fresh();
    let old = SqliteQueue::open(&dir.path().join("mapi.db"), clock.clone(), queues()).expect("open");
    let named = task("/internal/a").named(TaskName::new("kept").expect("name"));
    old.create(named.clone()).await.expect("create");
    let generated = old.create(task("/internal/b")).await.expect("create").name;
    drop(old);
    let queue = SqliteQueue::open(&dir.path().join("queue.db"), clock.clone(), queues()).expect("open");
    assert_eq!(queue.adopt(&dir.path().join("mapi.db")).expect("adopt"), 2);
    assert_eq!(queue.depth(&main_queue()).await.expect("depth"), 2);
    assert!(matches!(queue.create(named).await, Err(QueueError::AlreadyExists(_))), "the name stays taken");
    let next = queue.create(task("/internal/c")).await.expect("create").name;
    assert!(next.as_str() > generated.as_str(), "{next} after {generated}");
    assert_eq!(queue.adopt(&dir.path().join("mapi.db")).expect("again"), 0, "once");
    assert_eq!(queue.depth(&main_queue()).await.expect("depth"), 3);
}
