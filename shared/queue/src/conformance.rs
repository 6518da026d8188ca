//! The TaskQueue conformance suite: one set of cases every adapter must pass.
//!
//! Delivery is adapter-specific, so the cases drive an adapter through a
//! [`Harness`]: the queue, a way to deliver what is due, and virtual time.
//! Each case starts a [`ScriptedTarget`] (an HTTP server on 127.0.0.1 that
//! records deliveries and answers per a script), then asks the adapter's
//! `make` function for a harness delivering to it ([`Setup`]). An adapter's
//! tests call [`queue_conformance_suite!`](crate::queue_conformance_suite)
//! with that function; the macro expands to one `#[tokio::test]` per case.
//! The failure cases create and delete through [`Unreliable`], which refuses
//! writes before they apply or loses their answers after, and assert what
//! the port's failure model promises a caller that retries.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axum::extract::State;
use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use mapi_domain::Timestamp;
use tokio::sync::Notify;

use crate::unreliable::Unreliable;
use crate::{NewTask, QueueConfig, QueueError, QueueName, RetryConfig, TaskInfo, TaskName, TaskQueue};

/// The bearer token the suite's deliveries must carry.
pub const AUTH: &str = "conformance-token";

/// The suite's main queue: unlimited attempts, back-off 10 s doubling 3
/// times up to 300 s (Cloud Tasks' documented example).
pub fn main_queue() -> QueueName {
    QueueName::new("main").expect("valid queue name")
}

/// The suite's short queue: 3 attempts, back-off 1 s, 2 s.
pub fn short_queue() -> QueueName {
    QueueName::new("short").expect("valid queue name")
}

/// The queues a harness must serve.
pub fn queues() -> Vec<QueueConfig> {
    let dedup_window = Duration::from_secs(3600);
    vec![
        QueueConfig {
            name: main_queue(),
            retry: RetryConfig {
                max_attempts: 0,
                min_backoff: Duration::from_secs(10),
                max_backoff: Duration::from_secs(300),
                max_doublings: 3,
            },
            max_concurrent_dispatches: 100,
            dispatch_deadline: Duration::from_secs(30),
            dedup_window,
        },
        QueueConfig {
            name: short_queue(),
            retry: RetryConfig {
                max_attempts: 3,
                min_backoff: Duration::from_secs(1),
                max_backoff: Duration::from_secs(10),
                max_doublings: 3,
            },
            max_concurrent_dispatches: 100,
            dispatch_deadline: Duration::from_secs(30),
            dedup_window,
        },
    ]
}

/// What a harness is built from.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The base URL deliveries go to; a task's path is appended.
    pub target: String,
    /// The bearer token deliveries carry.
    pub auth: Option<String>,
    pub queues: Vec<QueueConfig>,
}

/// An adapter under test, with delivery and time under the suite's control.
#[async_trait]
pub trait Harness: Send + Sync {
    fn queue(&self) -> &dyn TaskQueue;

    /// Delivers every task due now and waits for the outcomes to be
    /// recorded; returns how many deliveries were attempted.
    async fn deliver_due(&self) -> usize;

    /// Moves the queue's (virtual) time forward.
    fn advance(&self, d: Duration);

    /// The queue's current time.
    fn now(&self) -> Timestamp;
}

/// How the scripted target answers one delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    /// A `Retry-After` header, in seconds.
    pub retry_after: Option<u64>,
    /// Real time to wait before answering.
    pub delay: Duration,
}

impl Reply {
    pub fn ok() -> Reply {
        Reply::status(200)
    }

    pub fn status(status: u16) -> Reply {
        Reply { status, retry_after: None, delay: Duration::ZERO }
    }

    pub fn retry_after(self, secs: u64) -> Reply {
        Reply { retry_after: Some(secs), ..self }
    }

    pub fn after(self, delay: Duration) -> Reply {
        Reply { delay, ..self }
    }
}

/// One request the target received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    pub method: String,
    pub path: String,
    /// Header names in lower case.
    pub headers: BTreeMap<String, String>,
    pub body: Bytes,
}

impl Delivery {
    /// A header's value, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(&name.to_ascii_lowercase()).map(String::as_str)
    }

    pub fn task_name(&self) -> &str {
        self.header("x-cloudtasks-taskname").unwrap_or_default()
    }

    pub fn retry_count(&self) -> Option<u32> {
        self.header("x-cloudtasks-taskretrycount").and_then(|v| v.parse().ok())
    }
}

/// Chooses the reply to a delivery, given how many earlier deliveries of
/// the same task name the target has seen.
type Script = dyn Fn(&Delivery, usize) -> Reply + Send + Sync;

struct TargetState {
    script: Box<Script>,
    deliveries: Mutex<Vec<Delivery>>,
    arrived: Notify,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

/// An HTTP server on 127.0.0.1 that records deliveries and answers per a
/// script. Stops when dropped.
pub struct ScriptedTarget {
    url: String,
    state: Arc<TargetState>,
    server: tokio::task::JoinHandle<()>,
}

impl fmt::Debug for ScriptedTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedTarget").field("url", &self.url).field("count", &self.count()).finish()
    }
}

impl Drop for ScriptedTarget {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Counts a request in flight until dropped (also when the client hangs up).
struct InFlight<'a>(&'a TargetState);

impl<'a> InFlight<'a> {
    fn enter(state: &'a TargetState) -> InFlight<'a> {
        let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        state.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(state)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn answer(
    State(state): State<Arc<TargetState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let delivery = Delivery {
        method: method.to_string(),
        path: uri.path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_default(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect(),
        body,
    };
    let _in_flight = InFlight::enter(&state);
    let reply = {
        let mut seen = state.deliveries.lock().unwrap_or_else(|e| e.into_inner());
        let earlier = seen.iter().filter(|d| d.task_name() == delivery.task_name()).count();
        let reply = (state.script)(&delivery, earlier);
        seen.push(delivery);
        reply
    };
    state.arrived.notify_waiters();
    tokio::time::sleep(reply.delay).await;
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = status.into_response();
    if let Some(secs) = reply.retry_after {
        response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

impl ScriptedTarget {
    /// Starts a target answering per `script(delivery, earlier deliveries of that task)`.
    pub async fn start(script: impl Fn(&Delivery, usize) -> Reply + Send + Sync + 'static) -> ScriptedTarget {
        let state = Arc::new(TargetState {
            script: Box::new(script),
            deliveries: Mutex::new(Vec::new()),
            arrived: Notify::new(),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        });
        let app = axum::Router::new().fallback(answer).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind target");
        let addr = listener.local_addr().expect("target address");
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("target server");
        });
        ScriptedTarget { url: format!("http://{addr}"), state, server }
    }

    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Every delivery received, in arrival order.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.state.deliveries.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn count(&self) -> usize {
        self.state.deliveries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The most requests ever being answered at once.
    pub fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }

    /// Waits (real time, at most 10 s) until `n` deliveries have arrived.
    pub async fn wait_for(&self, n: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let arrived = self.state.arrived.notified();
            let mut arrived = std::pin::pin!(arrived);
            arrived.as_mut().enable();
            if self.count() >= n {
                return;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                panic!("target saw {} deliveries, expected {n}", self.count());
            }
        }
    }

    /// The setup of a harness delivering here with the suite's token and queues.
    pub fn setup(&self) -> Setup {
        Setup { target: self.url(), auth: Some(AUTH.to_owned()), queues: queues() }
    }
}

fn task(queue: QueueName, path: &str, body: &'static str) -> NewTask {
    NewTask::new(queue, path, Bytes::from_static(body.as_bytes()))
}

fn name(s: &str) -> TaskName {
    TaskName::new(s).expect("valid task name")
}

async fn start<H: Harness>(
    make: impl AsyncFnOnce(Setup) -> H,
    script: impl Fn(&Delivery, usize) -> Reply + Send + Sync + 'static,
) -> (ScriptedTarget, H) {
    let target = ScriptedTarget::start(script).await;
    let harness = make(target.setup()).await;
    (target, harness)
}

async fn create(h: &impl Harness, t: NewTask) -> TaskInfo {
    h.queue().create(t).await.expect("create")
}

async fn depth(h: &impl Harness, q: &QueueName) -> u64 {
    h.queue().depth(q).await.expect("depth")
}

fn assert_invalid<T: fmt::Debug>(r: Result<T, QueueError>, what: &str) {
    assert!(matches!(r, Err(QueueError::InvalidArgument(_))), "{what}: {r:?}");
}

/// Advances `wait - 1 s`, checks nothing is delivered, advances 1 s more and
/// checks exactly one delivery is.
async fn not_before(h: &impl Harness, wait: Duration, what: &str) {
    h.advance(wait - Duration::from_secs(1));
    assert_eq!(h.deliver_due().await, 0, "{what}: delivered a second early");
    h.advance(Duration::from_secs(1));
    assert_eq!(h.deliver_due().await, 1, "{what}: not delivered on time");
}

pub async fn delivered_once_with_body_and_headers<H: Harness>(make: impl AsyncFnOnce(Setup) -> H) {
    let (target, h) = start(make, |_, _| Reply::ok()).await;
    let before = h.now();
    let info = create(&h, task(main_queue(), "/internal/things/1", r#"{"n":1}"#).named(name("first"))).await;
    assert_eq!((info.name.as_str(), &info.queue), ("first", &main_queue()));
    assert!(before <= info.created && info.schedule_time <= h.now(), "{info:?}");
    assert_eq!(depth(&h, &main_queue()).await, 1);
    assert_eq!(h.deliver_due().await, 1);
    assert_eq!(h.deliver_due().await, 0, "a delivered task is not delivered again");
    let got = target.deliveries();
    assert_eq!(got.len(), 1);
    let d = &got[0];
    assert_eq!(
        (d.method.as_str(), d.path.as_str(), &d.body[..]),
        ("POST", "/internal/things/1", &br#"{"n":1}"#[..])
    );
    assert!(d.header("content-type").is_some_and(|v| v.starts_with("application/json")), "{d:?}");
    assert_eq!(d.header("authorization"), Some(format!("Bearer {AUTH}").as_str()));
    assert_eq!(d.task_name(), "first");
    assert_eq!(d.header("x-cloudtasks-queuename"), Some("main"));
    assert_eq!(d.retry_count(), Some(0));
    assert_eq!(d.header("x-cloudtasks-taskexecutioncount"), Some("0"));
    let eta: f64 = d.header("x-cloudtasks-tasketa").and_then(|v| v.parse().ok()).expect("numeric ETA");
    assert!((eta - info.schedule_time.as_micros() as f64 / 1e6).abs() < 1.0, "ETA {eta} vs {info:?}");
    assert_eq!(depth(&h, &main_queue()).await, 0);
}

pub async fn generated_names_are_unique<H: Harness>(make: impl AsyncFnOnce(Setup) -> H) {
    let (target, h) = start(make, |_, _| Reply::ok()).await;
    let mut names = BTreeSet::new();
    for _ in 0..5 {
        names.insert(create(&h, task(main_queue(), "/internal/x", "{}")).await.name.as_str().to_owned());
    }
    assert_eq!(names.len(), 5, "{names:?}");
    assert_eq!(h.deliver_due().await, 5);
    let delivered: BTreeSet<String> = target.deliveries().iter().map(|d| d.task_name().to_owned()).collect();
    assert_eq!(delivered, names);
}

pub async fn duplicate_names_are_refused_within_the_dedup_window<H: Harness>(
    make: impl AsyncFnOnce(Setup) -> H,
) {
    let (target, h) = start(make, |_, _| Reply::ok()).await;
    let dup = || task(main_queue(), "/internal/x", "{}").named(name("dup"));
    let refused = Err(QueueError::AlreadyExists(name("dup")));
    create(&h, dup()).await;
    assert_eq!(h.queue().create(dup()).await, refused, "pending");
    assert_eq!(depth(&h, &main_queue()).await, 1, "a refused create adds nothing");
    assert_eq!(h.deliver_due().await, 1);
    assert_eq!(h.queue().create(dup()).await, refused, "just delivered");
    h.advance(Duration::from_secs(59 * 60));
    assert_eq!(h.queue().create(dup()).await, refused, "59 min after delivery");
    assert_eq!(h.deliver_due().await, 0);
    h.advance(Duration::from_secs(2 * 60));
    create(&h, dup()).await;
    assert_eq!(h.deliver_due().await, 1, "a name reused after the window is a new task");
    assert_eq!(target.count(), 2);
    let other = task(short_queue(), "/internal/x", "{}").named(name("dup"));
    create(&h, other).await;
    assert_eq!(depth(&h, &short_queue()).await, 1, "names are per queue");
}

pub async fn future_schedule_time_is_not_delivered_early<H: Harness>(make: impl AsyncFnOnce(Setup) -> H) {
    let (target, h) = start(make, |_, _| Reply::ok()).await;
    let at = h.now() + Duration::from_secs(60);
    let info = create(&h, task(main_queue(), "/internal/later", "{}").at(at)).await;
    assert_eq!(info.schedule_time, at);
    assert_eq!(h.deliver_due().await, 0);
    assert_eq!(depth(&h, &main_queue()).await, 1);
    not_before(&h, Duration::from_secs(60), "scheduled task").await;
    let eta: f64 =
        target.deliveries()[0].header("x-cloudtasks-tasketa").and_then(|v| v.parse().ok()).expect("ETA");
    assert!((eta - at.as_micros() as f64 / 1e6).abs() < 1e-3, "ETA {eta}");
}

pub async fn failures_are_retried_with_growing_backoff<H: Harness>(make: impl AsyncFnOnce(Setup) -> H) {
    let statuses = [500, 404, 409];
    let (target, h) =
        start(make, move |_, n| statuses.get(n).map_or(Reply::ok(), |s| Reply::status(*s))).await;
    create(&h, task(main_queue(), "/internal/flaky", "{}").named(name("flaky"))).await;
    assert_eq!(h.deliver_due().await, 1);
    assert_eq!(h.deliver_due().await, 0, "a failed task waits for its back-off");
    for (retry, wait) in [(1, 10), (2, 20), (3, 40)] {
        not_before(&h, Duration::from_secs(wait), &format!("retry {retry}")).await;
        let last = target.deliveries().pop().expect("a delivery");
        assert_eq!(last.retry_count(), Some(retry));
    }
    assert_eq!(depth(&h, &main_queue()).await, 0, "the fourth attempt succeeded");
    h.advance(Duration::from_secs(3600));
    assert_eq!(h.deliver_due().await, 0);
    assert_eq!(target.count(), 4);
}

pub async fn exhausted_attempts_make_a_task_dead<H: Harness>(make: impl AsyncFnOnce(Setup) -> H) {
    let (target, h) = start(make, |_, _| Reply::status(500)).await;
    create(&h, task(short_queue(), "/internal/doomed", "{}").named(name("doomed"))).await;
    assert_eq!(h.deliver_due().await, 1);
    not_before(&h, Duration::from_secs(1), "retry 1").await;
    not_before(&h, Duration::from_secs(2), "retry 2").await;
    assert_eq!(depth(&h, &short_queue()).await, 0, "a dead task is not pending");
    let again = h.queue().create(task(short_queue(), "/internal/doomed", "{}").named(name("doomed"))).await;
    assert_eq!(again, Err(QueueError::AlreadyExists(name("doomed"))), "a dead task's name stays reserved");
    h.advance(Duration::from_secs(24 * 3600));
    assert_eq!(h.deliver_due().await, 0, "a dead task is never delivered again");
    assert_eq!(target.count(), 3);
}

pub async fn deleted_tasks_are_never_delivered<H: Harness>(make: impl AsyncFnOnce(Setup) -> H) {
    let (target, h) = start(make, |_, _| Reply::ok()).await;
    let q = main_queue();
    create(&h, task(q.clone(), "/internal/x", "{}").named(name("a"))).await;
    create(&h, task(q.clone(), "/internal/x", "{}").named(name("b"))).await;
    h.queue().delete(&q, &name("a")).await.expect("delete");
    assert_eq!(h.queue().delete(&q, &name("a")).await, Err(QueueError::NotFound(name("a"))));
    assert_eq!(h.queue().delete(&q, &name("never")).await, Err(QueueError::NotFound(name("never"))));
    assert_eq!(depth(&h, &q).await, 1);
    assert_eq!(h.deliver_due().await, 1);
    let names: Vec<String> = target.deliveries().iter().map(|d| d.task_name().to_owned()).collect();
    assert_eq!(names, ["b"]);
    assert_eq!(h.queue().delete(&q, &name("b")).await, Err(QueueError::NotFound(name("b"))), "already ran");
    let again = h.queue().create(task(q.clone(), "/internal/x", "{}").named(name("a"))).await;
    assert_eq!(again, Err(QueueError::AlreadyExists(name("a"))), "a deleted name stays reserved");
    h.advance(Duration::from_secs(3600));
    assert_eq!(h.deliver_due().await, 0);
}

pub async fn depth_counts_pending_tasks<H: Harness>(make: impl AsyncFnOnce(Setup) -> H) {
    let script = |d: &Delivery, _| if d.path == "/internal/fail" { Reply::status(500) } else { Reply::ok() };
    let (_target, h) = start(make, script).await;
    let (main, short) = (main_queue(), short_queue());
    assert_eq!((depth(&h, &main).await, depth(&h, &short).await), (0, 0));
    create(&h, task(main.clone(), "/internal/ok", "{}")).await;
    create(&h, task(main.clone(), "/internal/fail", "{}")).await;
    create(&h, task(main.clone(), "/internal/ok", "{}").at(h.now() + Duration::from_secs(3600))).await;
    create(&h, task(short.clone(), "/internal/ok", "{}")).await;
    assert_eq!((depth(&h, &main).await, depth(&h, &short).await), (3, 1));
    assert_eq!(h.deliver_due().await, 3);
    assert_eq!(
        (depth(&h, &main).await, depth(&h, &short).await),
        (2, 0),
        "a failed task is still pending, a future one too"
    );
}

pub async fn invalid_arguments_are_refused<H: Harness>(make: impl AsyncFnOnce(Setup) -> H) {
    let (target, h) = start(make, |_, _| Reply::ok()).await;
    for path in
        ["/public/x", "internal/x", "/internal/", "http://elsewhere.example/internal/x", "/internal/a b"]
    {
        assert_invalid(h.queue().create(task(main_queue(), path, "{}")).await, path);
    }
    assert_invalid(h.queue().create(task(main_queue(), "/internal/x", "not json")).await, "body");
    let far = h.now() + Duration::from_secs(31 * 24 * 3600);
    assert_invalid(h.queue().create(task(main_queue(), "/internal/x", "{}").at(far)).await, "far schedule");
    let nowhere = QueueName::new("nowhere").expect("valid name");
    assert_invalid(h.queue().create(task(nowhere.clone(), "/internal/x", "{}")).await, "unknown queue");
    assert_invalid(h.queue().depth(&nowhere).await, "depth of unknown queue");
    assert_invalid(TaskName::new("bad name"), "task name with a space");
    assert_invalid(TaskName::new(""), "empty task name");
    assert_invalid(TaskName::new("a".repeat(501)), "long task name");
    assert_invalid(QueueName::new("Main"), "queue name with upper case");
    assert_eq!(depth(&h, &main_queue()).await, 0, "nothing was created");
    assert_eq!(h.deliver_due().await, 0);
    assert_eq!(target.count(), 0);
}

pub async fn retry_after_is_honoured<H: Harness>(make: impl AsyncFnOnce(Setup) -> H) {
    let script = |_: &Delivery, n| match n {
        0 => Reply::status(429).retry_after(120),
        1 => Reply::status(503).retry_after(60),
        _ => Reply::ok(),
    };
    let (target, h) = start(make, script).await;
    create(&h, task(main_queue(), "/internal/busy", "{}")).await;
    assert_eq!(h.deliver_due().await, 1);
    h.advance(Duration::from_secs(10));
    assert_eq!(h.deliver_due().await, 0, "back-off alone (10 s) is not enough after Retry-After: 120");
    not_before(&h, Duration::from_secs(110), "after 429").await;
    not_before(&h, Duration::from_secs(60), "after 503 (back-off 20 s)").await;
    assert_eq!(depth(&h, &main_queue()).await, 0);
    assert_eq!(target.count(), 3);
}

fn unavailable<T: fmt::Debug>(r: Result<T, QueueError>, what: &str) {
    assert!(matches!(r, Err(QueueError::Unavailable(_))), "{what}: {r:?}");
}

fn delivered_names(target: &ScriptedTarget) -> Vec<String> {
    target.deliveries().iter().map(|d| d.task_name().to_owned()).collect()
}

/// A create refused before it reached the queue enqueued nothing and took
/// no name, so its retry under the same name enqueues the task, delivered
/// once.
pub async fn a_refused_create_enqueues_nothing_and_its_retry_is_delivered_once<H: Harness>(
    make: impl AsyncFnOnce(Setup) -> H,
) {
    let (target, h) = start(make, |_, _| Reply::ok()).await;
    let u = Unreliable::new(h.queue()).refuse_next(1);
    let once = || task(main_queue(), "/internal/once", r#"{"n":1}"#).named(name("once"));
    unavailable(u.create(once()).await, "refused");
    assert_eq!(depth(&h, &main_queue()).await, 0, "a refused create enqueued nothing");
    assert_eq!(h.deliver_due().await, 0);
    let info = u.create(once()).await.expect("the retry enqueues: the refused create took no name");
    assert_eq!(info.name, name("once"));
    assert_eq!(h.deliver_due().await, 1);
    h.advance(Duration::from_secs(60));
    assert_eq!(h.deliver_due().await, 0);
    assert_eq!(delivered_names(&target), ["once"], "delivered once");
}

/// A named create whose answer was lost has enqueued the task: its retry
/// under the same name answers `AlreadyExists` (which a caller that names
/// tasks deterministically counts as pushed) and enqueues nothing, so the
/// task is delivered exactly once.
pub async fn a_lost_named_create_has_enqueued_and_its_retry_answers_already_exists<H: Harness>(
    make: impl AsyncFnOnce(Setup) -> H,
) {
    let (target, h) = start(make, |_, _| Reply::ok()).await;
    let u = Unreliable::new(h.queue()).lose_next(1);
    let once = || task(main_queue(), "/internal/once", r#"{"n":1}"#).named(name("once"));
    unavailable(u.create(once()).await, "lost");
    assert_eq!(depth(&h, &main_queue()).await, 1, "the lost create enqueued the task");
    assert_eq!(u.create(once()).await, Err(QueueError::AlreadyExists(name("once"))));
    assert_eq!(depth(&h, &main_queue()).await, 1, "the retry enqueued nothing");
    assert_eq!(h.deliver_due().await, 1);
    h.advance(Duration::from_secs(60));
    assert_eq!(h.deliver_due().await, 0);
    let got = target.deliveries();
    assert_eq!(got.len(), 1, "delivered exactly once");
    assert_eq!((got[0].task_name(), &got[0].body[..]), ("once", &br#"{"n":1}"#[..]));
}

/// An unnamed create whose answer was lost has enqueued the task, under a
/// name the caller never learnt. Nothing tells its retry from a new task,
/// so the retry enqueues a second one and the body is delivered twice: an
/// unnamed task is only for work that may run twice; a task that must run
/// once is named (as in the case above).
pub async fn a_lost_unnamed_create_has_enqueued_and_its_retry_enqueues_another<H: Harness>(
    make: impl AsyncFnOnce(Setup) -> H,
) {
    let (target, h) = start(make, |_, _| Reply::ok()).await;
    let u = Unreliable::new(h.queue()).lose_next(1);
    let anon = || task(main_queue(), "/internal/anon", r#"{"n":2}"#);
    unavailable(u.create(anon()).await, "lost");
    assert_eq!(depth(&h, &main_queue()).await, 1, "the lost create enqueued the task");
    let info = u.create(anon()).await.expect("the retry is a new task");
    assert_eq!(depth(&h, &main_queue()).await, 2, "the retry enqueued a second task");
    assert_eq!(h.deliver_due().await, 2);
    let got = target.deliveries();
    let names: BTreeSet<&str> = got.iter().map(Delivery::task_name).collect();
    assert_eq!(names.len(), 2, "two tasks under two names: {names:?}");
    assert!(names.contains(info.name.as_str()), "{names:?} vs {info:?}");
    assert!(got.iter().all(|d| &d.body[..] == br#"{"n":2}"#), "the same body twice: {got:?}");
}

/// A delete refused before it reached the queue left the task pending, and
/// its retry deletes it: the task is never delivered.
pub async fn a_refused_delete_leaves_the_task_and_its_retry_deletes<H: Harness>(
    make: impl AsyncFnOnce(Setup) -> H,
) {
    let (target, h) = start(make, |_, _| Reply::ok()).await;
    let q = main_queue();
    create(&h, task(q.clone(), "/internal/x", "{}").named(name("doomed"))).await;
    let u = Unreliable::new(h.queue()).refuse_next(1);
    unavailable(u.delete(&q, &name("doomed")).await, "refused");
    assert_eq!(depth(&h, &q).await, 1, "a refused delete deleted nothing");
    u.delete(&q, &name("doomed")).await.expect("the retry deletes");
    assert_eq!(depth(&h, &q).await, 0);
    assert_eq!(h.deliver_due().await, 0);
    assert_eq!(target.count(), 0, "a deleted task is never delivered");
}

/// A delete whose answer was lost has deleted the task: its retry answers
/// `NotFound`, which a caller that wants the task gone counts as done. The
/// task is never delivered and its name stays reserved.
pub async fn a_lost_delete_has_deleted_and_its_retry_answers_not_found<H: Harness>(
    make: impl AsyncFnOnce(Setup) -> H,
) {
    let (target, h) = start(make, |_, _| Reply::ok()).await;
    let q = main_queue();
    let gone = || task(q.clone(), "/internal/x", "{}").named(name("gone"));
    create(&h, gone()).await;
    let u = Unreliable::new(h.queue()).lose_next(1);
    unavailable(u.delete(&q, &name("gone")).await, "lost");
    assert_eq!(depth(&h, &q).await, 0, "the lost delete deleted the task");
    assert_eq!(u.delete(&q, &name("gone")).await, Err(QueueError::NotFound(name("gone"))));
    assert_eq!(h.deliver_due().await, 0);
    assert_eq!(target.count(), 0, "a deleted task is never delivered");
    assert_eq!(h.queue().create(gone()).await, Err(QueueError::AlreadyExists(name("gone"))));
}

/// Expands to one `#[tokio::test]` per conformance case. `$make` is an
/// async function (or closure) from a [`Setup`](crate::conformance::Setup)
/// to a [`Harness`](crate::conformance::Harness), which owns whatever must
/// stay alive for the test.
#[macro_export]
macro_rules! queue_conformance_suite {
    ($make:expr) => {
        $crate::queue_conformance_suite!(@cases $make;
            delivered_once_with_body_and_headers, generated_names_are_unique,
            duplicate_names_are_refused_within_the_dedup_window, future_schedule_time_is_not_delivered_early,
            failures_are_retried_with_growing_backoff, exhausted_attempts_make_a_task_dead,
            deleted_tasks_are_never_delivered, depth_counts_pending_tasks, invalid_arguments_are_refused,
            retry_after_is_honoured, a_refused_create_enqueues_nothing_and_its_retry_is_delivered_once,
            a_lost_named_create_has_enqueued_and_its_retry_answers_already_exists,
            a_lost_unnamed_create_has_enqueued_and_its_retry_enqueues_another,
            a_refused_delete_leaves_the_task_and_its_retry_deletes,
            a_lost_delete_has_deleted_and_its_retry_answers_not_found);
    };
    (@cases $make:expr; $($case:ident),+) => {
        $(
            #[tokio::test]
            async fn $case() {
                $crate::conformance::$case($make).await;
            }
        )+
    };
}
