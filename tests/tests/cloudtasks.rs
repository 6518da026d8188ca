//! The Cloud Tasks adapter against FakeCloudTasks on 127.0.0.1: the queue
//! conformance suite (virtual time, so the dedup window of an hour passes
//! at once), what only this adapter does (the OIDC token's account and
//! audience, the dispatch deadline, a lost answer retried into a 409 that
//! is success, throttled creates), and an item job end to end with the
//! platform's queue on Cloud Tasks: duplicated and overlapping deliveries,
//! throttled creates and lost answers, every result once.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use mapi_clock::{Clock, SystemClock, VirtualClock};
use mapi_cloudtasks::{CloudTasksQueue, Credentials, Settings};
use mapi_domain::Timestamp;
use mapi_queue::conformance::{Harness, Setup};
use mapi_queue::{NewTask, QueueConfig, QueueError, QueueName, TaskName, TaskQueue};
use mapi_tests::chaos::{ChaosProxy, Faults};
use mapi_tests::fake_cloudtasks::{ApiFaults, DeliveryAuth, FakeCloudTasks};
use mapi_tests::google::FakeGoogle;
use mapi_tests::{Options, QueueWrap, TestPlatform};
use serde_json::{Value, json};

const SERVICE_ACCOUNT: &str = "mapi-tasks@project.iam.gserviceaccount.com";

fn no_faults() -> Faults {
    Faults { seed: 0, duplicate_percent: 0, overlap_percent: 0 }
}

async fn adapter(
    fake: &FakeCloudTasks,
    target: &str,
    queues: Vec<QueueConfig>,
    clock: Arc<dyn Clock>,
) -> CloudTasksQueue {
    // One host serves every queue here: each queue's target is `target`.
    let settings = Settings {
        project: "project".into(),
        location: "europe-west1".into(),
        targets: queues.iter().map(|q| (q.name.as_str().to_owned(), target.to_owned())).collect(),
        service_account_email: SERVICE_ACCOUNT.into(),
        audience: target.trim_end_matches('/').to_owned(),
        endpoint: Some(fake.url.clone()),
        queues,
    };
    CloudTasksQueue::new(settings, Credentials::Anonymous, clock).await.expect("adapter")
}

struct CloudTasksHarness {
    fake: FakeCloudTasks,
    queue: CloudTasksQueue,
    clock: Arc<VirtualClock>,
}

#[async_trait]
impl Harness for CloudTasksHarness {
    fn queue(&self) -> &dyn TaskQueue {
        &self.queue
    }

    async fn deliver_due(&self) -> usize {
        self.fake.deliver_due().await
    }

    fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }
}

async fn make(setup: Setup) -> CloudTasksHarness {
    let clock = Arc::new(VirtualClock::new(Timestamp::from_secs(1_800_000_000)));
    let fake = FakeCloudTasks::start(
        clock.clone(),
        setup.queues.clone(),
        setup.auth.clone().into(),
        ApiFaults::none(),
        no_faults(),
    )
    .await;
    let queue = adapter(&fake, &setup.target, setup.queues.clone(), clock.clone()).await;
    CloudTasksHarness { fake, queue, clock }
}

mapi_queue::queue_conformance_suite!(make);

fn named(queue: &str, name: &str) -> NewTask {
    NewTask::new(QueueName::new(queue).expect("queue"), "/internal/x", "{}")
        .named(TaskName::new(name).expect("name"))
}

#[tokio::test]
async fn tasks_carry_the_oidc_token_request_the_deadline_and_the_target() {
    let h = make(
        mapi_queue::conformance::ScriptedTarget::start(|_, _| mapi_queue::conformance::Reply::ok())
            .await
            .setup(),
    )
    .await;
    h.queue.create(named("main", "t1")).await.expect("create");
    let t = h.fake.tasks().into_iter().find(|t| t.id == "t1").expect("stored");
    assert_eq!(t.service_account_email, SERVICE_ACCOUNT);
    assert!(t.url.ends_with("/internal/x") && t.audience == t.url.trim_end_matches("/internal/x"), "{t:?}");
    assert_eq!(t.dispatch_deadline, Duration::from_secs(30), "the queue's dispatch deadline");
    assert_eq!(t.headers.get("content-type").map(String::as_str), Some("application/json"));
}

#[tokio::test]
async fn lost_answers_and_throttling_are_retried_and_a_409_after_a_lost_answer_is_success() {
    let virtual_clock = Arc::new(VirtualClock::new(Timestamp::from_secs(1_800_000_000)));
    // The adapter's back-off waits on this clock: virtual time runs 50 times
    // faster than real time while the test runs (bounded: 60 s of it).
    let ticker = {
        let clock = virtual_clock.clone();
        tokio::spawn(async move {
            for _ in 0..60_000 {
                tokio::time::sleep(Duration::from_millis(1)).await;
                clock.advance(Duration::from_millis(50));
            }
        })
    };
    let clock: Arc<dyn Clock> = virtual_clock;
    let queues = mapi_queue::conformance::queues();
    let faults = ApiFaults { seed: 7, throttle_percent: 20, lose_answer_percent: 20 };
    let fake =
        FakeCloudTasks::start(clock.clone(), queues.clone(), DeliveryAuth::None, faults, no_faults()).await;
    let q = adapter(&fake, "http://127.0.0.1:9", queues, clock).await;
    let mut gave_up = 0;
    for i in 0..100 {
        // The adapter retries a few times; past that the caller (a handler,
        // redelivered by its own queue) tries again, and a 409 then means
        // an earlier try created the task.
        for tries in 0.. {
            match q.create(named("main", &format!("n{i}"))).await {
                Ok(_) => break,
                Err(QueueError::Unavailable(_)) if tries < 5 => gave_up += 1,
                Err(QueueError::AlreadyExists(_)) if tries > 0 => break,
                other => panic!("create {i}: {other:?}"),
            }
        }
    }
    assert!(gave_up < 10, "the adapter itself absorbs most faults: {gave_up}");
    assert_eq!(q.depth(&QueueName::new("main").expect("queue")).await, Ok(100), "each task exactly once");
    let s = fake.stats();
    assert!(
        s.throttled.load(Ordering::Relaxed) > 0 && s.answers_lost.load(Ordering::Relaxed) > 0,
        "faults were injected"
    );
    assert!(s.conflicts.load(Ordering::Relaxed) > 0, "some retries met their own task");
    // A first-try duplicate is still refused: the caller decides it is success.
    let again = q.create(named("main", "n0")).await;
    assert_eq!(again, Err(QueueError::AlreadyExists(TaskName::new("n0").expect("name"))));
    ticker.abort();
}

/// The platform with its handlers pushing to Cloud Tasks (the fake), the
/// fake delivering to the platform with seeded duplicates and overlaps,
/// throttling 5 % of creates and losing the answer of 5 %.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_job_on_cloud_tasks_runs_every_item_once_through_faults() {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let queues = mapi_platform::job_queue_configs().expect("queues");
    let api = ApiFaults { seed: 11, throttle_percent: 5, lose_answer_percent: 5 };
    let delivery = Faults { seed: 12, duplicate_percent: 10, overlap_percent: 2 };
    let fake = FakeCloudTasks::start(clock.clone(), queues.clone(), DeliveryAuth::None, api, delivery).await;
    // Deliveries reach the platform through a proxy: its address and
    // credential are known only once the platform has started.
    let front = ChaosProxy::start("http://127.0.0.1:9", no_faults()).await;
    let cloud: Arc<dyn TaskQueue> = Arc::new(adapter(&fake, &front.url, queues, clock).await);
    let wrap = QueueWrap(Arc::new(move |_embedded| cloud.clone()));
    let p =
        TestPlatform::start_with(&[], Options { background: false, queue: Some(wrap), ..Options::default() })
            .await;
    front.set_target(&p.platform.url);
    front.set_auth(&p.platform.state.config.secrets.internal_token);
    let _dispatcher = fake.run();
    let token = p.token().to_owned();
    let items: Vec<Value> = (0..1000).map(|i| json!({"text": format!("item number {i}")})).collect();
    let body = json!({"method": "text.stats", "items": items});
    let id = p.submit_job(&token, "dev", body).await;
    let v = p.wait_job(&token, &id, Duration::from_secs(120)).await;
    assert_eq!(v["state"], "succeeded", "{v:#}");
    assert_eq!(v["counts"]["succeeded"], 1000);
    let q = mapi_store::Query::new("job_items").filter("job", mapi_store::Op::Eq, id.as_str());
    let markers = p.platform.state.store.query(&q, None).await.expect("markers");
    assert_eq!(markers.len(), 1000, "one marker per item");
    assert_eq!(markers[0].fields["end"]["result"]["words"], 3, "its end is in it: {:?}", markers[0].fields);
    let s = fake.stats();
    for (what, n) in [
        ("duplicated", s.duplicated.load(Ordering::Relaxed)),
        ("overlapped", s.overlapped.load(Ordering::Relaxed)),
        ("throttled", s.throttled.load(Ordering::Relaxed)),
        ("lost answers", s.answers_lost.load(Ordering::Relaxed)),
    ] {
        assert!(n > 0, "no {what} deliveries or creates: the faults did not happen");
    }
    let tasks = fake.tasks();
    assert!(
        tasks.iter().all(|t| t.service_account_email == SERVICE_ACCOUNT && t.audience == front.url),
        "OIDC token requests"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_platform_configured_with_mapi_queue_cloudtasks_runs_a_fit_and_a_job_through_the_fake() {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let queues = mapi_platform::queue_configs().expect("queues");
    // The fake delivers with ID tokens it mints for the task's service
    // account and audience, signed by a stand-in for Google whose key set
    // the platform fetches: the task routes accept them as Cloud Tasks'.
    let google = Arc::new(FakeGoogle::start().await);
    let internal = "cloudtasks-internal-token-0123456789";
    let fake = FakeCloudTasks::start(
        clock.clone(),
        queues,
        DeliveryAuth::IdToken(google.clone()),
        ApiFaults::none(),
        no_faults(),
    )
    .await;
    let settings = [
        ("MAPI_QUEUE", "cloudtasks"),
        ("MAPI_CLOUDTASKS_PROJECT", "mapi-test"),
        ("MAPI_CLOUDTASKS_LOCATION", "europe-west1"),
        ("MAPI_CLOUDTASKS_SERVICE_ACCOUNT", SERVICE_ACCOUNT),
        ("MAPI_CLOUDTASKS_ENDPOINT", fake.url.as_str()),
        ("MAPI_GOOGLE_JWKS_URL", google.keys.url.as_str()),
        ("MAPI_INTERNAL_TOKEN", internal),
        ("MAPI_TOKEN_PEPPER", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"),
        ("MAPI_URL_SIGNING_KEY", "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"),
    ];
    // In the background: the tick (which pushes finalize tasks) and the
    // log forwarder; the embedded queue's deliverer has nothing to deliver.
    let p = TestPlatform::start_with(&settings, Options::default()).await;
    let _dispatcher = fake.run();
    let token = p.token().to_owned();
    // A fit: its dispatch and finalize tasks go through Cloud Tasks too.
    let ds = p.upload(include_str!("../../examples/longley.csv")).await;
    let run = p.submit(json!({"method": "tabular.linear", "dataset": ds, "params": {"y": "employed"}})).await;
    let run = p.wait_final(&run).await;
    assert_eq!(run["state"], "succeeded", "{run:#}");
    let paths: Vec<String> = fake.tasks().iter().map(|t| t.url.clone()).collect();
    for path in [mapi_schema::tasks::DISPATCH_PATH, mapi_schema::tasks::FINALIZE_PATH] {
        assert!(paths.iter().any(|u| u.ends_with(path)), "a {path} task went through Cloud Tasks: {paths:?}");
    }
    let items: Vec<Value> = (0..20).map(|i| json!({"text": format!("item number {i}")})).collect();
    let body = json!({"method": "text.stats", "items": items});
    let id = p.submit_job(&token, "dev", body).await;
    let v = p.wait_job(&token, &id, Duration::from_secs(60)).await;
    assert_eq!(v["state"], "succeeded", "{v:#}");
    assert_eq!(v["counts"]["succeeded"], 20);
    // The tasks went through the fake (a fan-out and 20 items at least),
    // none through the embedded queue.
    assert!(fake.stats().deliveries.load(Ordering::Relaxed) >= 21, "deliveries through Cloud Tasks");
    let tasks = fake.tasks();
    assert!(
        tasks.iter().all(|t| t.service_account_email == SERVICE_ACCOUNT && t.audience == p.platform.url),
        "OIDC token requests for the platform's own URL"
    );
    // The task routes take Cloud Tasks' ID token and refuse every other.
    let now = clock.now();
    let url = p.platform.url.clone();
    let step = json!({"job": id, "step": 0});
    let refused = [
        ("no token", None),
        ("another account's token", Some(google.id_token("eve@evil.iam.gserviceaccount.com", &url, now))),
        (
            "a token for another audience",
            Some(google.id_token(SERVICE_ACCOUNT, "https://elsewhere.example", now)),
        ),
        ("an expired token", Some(google.id_token(SERVICE_ACCOUNT, &url, now - Duration::from_secs(7200)))),
        ("a token signed by another key", {
            let other = FakeGoogle::start().await;
            Some(other.id_token(SERVICE_ACCOUNT, &url, now))
        }),
    ];
    let http = reqwest::Client::new();
    for (what, token) in refused {
        let mut req = http.post(format!("{url}{}", mapi_jobs::tasks::FANOUT_PATH)).json(&step);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req.send().await.expect("send");
        assert_eq!(r.status(), 401, "{what} is refused");
        let problem: Value = r.json().await.expect("problem");
        assert_eq!(problem["code"], "UNAUTHENTICATED", "{what}: {problem}");
    }
    let genuine = google.id_token(SERVICE_ACCOUNT, &url, now);
    let r = http
        .post(format!("{url}{}", mapi_jobs::tasks::FANOUT_PATH))
        .bearer_auth(genuine)
        .json(&step)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 200, "a late fan-out step with Cloud Tasks' token is answered");
}

#[tokio::test]
async fn a_queue_missing_in_cloud_tasks_is_named_in_the_error() {
    let clock: Arc<dyn Clock> = Arc::new(VirtualClock::new(Timestamp::from_secs(1_800_000_000)));
    // The project has only the item jobs' queues; the platform knows all four.
    let fake = FakeCloudTasks::start(
        clock.clone(),
        mapi_platform::job_queue_configs().expect("queues"),
        DeliveryAuth::None,
        ApiFaults::none(),
        no_faults(),
    )
    .await;
    let q =
        adapter(&fake, "http://127.0.0.1:9", mapi_platform::queue_configs().expect("queues"), clock).await;
    let e = q.create(named(mapi_platform::DISPATCH_QUEUE, "d1")).await.expect_err("no such queue");
    match e {
        QueueError::InvalidArgument(m) => {
            assert!(m.contains("has no queue") && m.contains("/queues/dispatch"), "{m}")
        }
        other => panic!("a missing queue is not a missing task: {other:?}"),
    }
}
