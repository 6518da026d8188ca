//! FakeCloudTasks: the Cloud Tasks v2 REST API (create, list and delete
//! tasks) on 127.0.0.1, written from Google's REST reference, and a
//! dispatcher that delivers each task to its HTTP target as Cloud Tasks
//! does: `POST` with the task's headers and body, `X-CloudTasks-QueueName`,
//! `-TaskName`, `-TaskRetryCount`, `-TaskExecutionCount` and `-TaskETA`, an
//! ID token minted for the task's service account and audience and signed
//! by a stand-in for Google ([`DeliveryAuth::IdToken`]; the fake also
//! records what it was asked for), the task's
//! dispatch deadline as the timeout, retries with the queue's back-off (and
//! `Retry-After` on 429 and 503) until its attempts are spent.
//!
//! Like the service it refuses a name that is pending, or that ran, died or
//! was deleted within the last hour, with 409 `ALREADY_EXISTS`, and frees it
//! after; a task that ran or died is gone from listings and from `delete`.
//! Faults are seeded: creates answered 429 `RESOURCE_EXHAUSTED`, creates
//! whose task is stored but whose answer is lost (503), and deliveries
//! made twice, in sequence or overlapping ([`crate::chaos::Faults`]).
//!
//! [`FakeCloudTasks::deliver_due`] delivers what is due and waits, for
//! virtual time; [`FakeCloudTasks::run`] dispatches in the background.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, post};
use base64::Engine;
use bytes::Bytes;
use mapi_clock::Clock;
use mapi_domain::Timestamp;
use mapi_queue::QueueConfig;
use serde_json::{Value, json};

use crate::chaos::{Faults, Plan};
use crate::scripted::Rng;

/// How long a name stays taken after its task ran, died or was deleted.
pub const DEDUP_WINDOW: Duration = Duration::from_secs(3600);

/// Seeded faults of the API itself.
#[derive(Clone, Copy, Debug)]
pub struct ApiFaults {
    pub seed: u64,
    /// Creates answered 429 RESOURCE_EXHAUSTED, nothing stored.
    pub throttle_percent: u64,
    /// Creates that store the task but whose answer is lost (503).
    pub lose_answer_percent: u64,
}

impl ApiFaults {
    pub fn none() -> ApiFaults {
        ApiFaults { seed: 0, throttle_percent: 0, lose_answer_percent: 0 }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum TaskState {
    Pending,
    Dispatched,
    /// Ran, died or deleted: the name is taken until then.
    Gone {
        until: Timestamp,
    },
}

/// A task as the fake keeps it.
#[derive(Clone, Debug)]
pub struct FakeTask {
    pub queue: String,
    pub id: String,
    pub url: String,
    pub headers: BTreeMap<String, String>,
    pub body: Bytes,
    pub service_account_email: String,
    pub audience: String,
    pub dispatch_deadline: Duration,
    pub schedule_time: Timestamp,
    pub created: Timestamp,
    /// Dispatches made (failed ones included).
    pub dispatches: u32,
    state: TaskState,
}

/// What the fake counted.
#[derive(Debug, Default)]
pub struct Stats {
    pub creates: AtomicUsize,
    pub throttled: AtomicUsize,
    pub answers_lost: AtomicUsize,
    pub conflicts: AtomicUsize,
    pub deliveries: AtomicUsize,
    pub duplicated: AtomicUsize,
    pub overlapped: AtomicUsize,
}

/// The credential deliveries carry.
#[derive(Clone, Debug)]
pub enum DeliveryAuth {
    None,
    /// A fixed bearer token (the queue conformance suite's target checks one).
    Bearer(String),
    /// What Cloud Tasks sends: a Google-signed ID token of the task's
    /// service account for its audience, minted at each delivery.
    IdToken(Arc<crate::google::FakeGoogle>),
}

impl From<Option<String>> for DeliveryAuth {
    fn from(token: Option<String>) -> DeliveryAuth {
        token.map_or(DeliveryAuth::None, DeliveryAuth::Bearer)
    }
}

struct FakeState {
    clock: Arc<dyn Clock>,
    queues: BTreeMap<String, QueueConfig>,
    tasks: Mutex<BTreeMap<(String, String), FakeTask>>,
    seq: AtomicU64,
    api_faults: ApiFaults,
    delivery_faults: Faults,
    api_rolls: Mutex<Rng>,
    auth: DeliveryAuth,
    http: reqwest::Client,
    stats: Stats,
}

/// The fake service. Stops when dropped.
pub struct FakeCloudTasks {
    pub url: String,
    state: Arc<FakeState>,
    server: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for FakeCloudTasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeCloudTasks").field("url", &self.url).finish_non_exhaustive()
    }
}

impl Drop for FakeCloudTasks {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let body = json!({"error": {"code": status.as_u16(), "message": message.into(), "status": code}});
    (status, axum::Json(body)).into_response()
}

fn rfc3339(t: Timestamp) -> String {
    t.to_rfc3339()
}

/// `"30s"`, `"0.5s"`: protobuf JSON durations.
fn parse_duration(s: &str) -> Option<Duration> {
    let secs: f64 = s.strip_suffix('s')?.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

fn task_json(t: &FakeTask, project: &str, location: &str) -> Value {
    json!({
        "name": format!("projects/{project}/locations/{location}/queues/{}/tasks/{}", t.queue, t.id),
        "scheduleTime": rfc3339(t.schedule_time),
        "createTime": rfc3339(t.created),
        "dispatchDeadline": format!("{}s", t.dispatch_deadline.as_secs_f64()),
        "dispatchCount": t.dispatches,
        "responseCount": t.dispatches,
        "view": "BASIC",
    })
}

type QueuePath = (String, String, String);

async fn create(
    State(s): State<Arc<FakeState>>,
    Path((project, location, queue)): Path<QueuePath>,
    body: Bytes,
) -> Response {
    if !s.queues.contains_key(&queue) {
        return error(StatusCode::NOT_FOUND, "NOT_FOUND", format!("Queue does not exist: {queue}"));
    }
    let (throttle, lose) = {
        let mut rng = s.api_rolls.lock().unwrap_or_else(|e| e.into_inner());
        (rng.chance(s.api_faults.throttle_percent), rng.chance(s.api_faults.lose_answer_percent))
    };
    if throttle {
        s.stats.throttled.fetch_add(1, Ordering::Relaxed);
        return error(
            StatusCode::TOO_MANY_REQUESTS,
            "RESOURCE_EXHAUSTED",
            "Quota exceeded for queue operations",
        );
    }
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", "Invalid JSON payload received.");
    };
    let t = &req["task"];
    let http = &t["httpRequest"];
    let Some(url) = http["url"].as_str().filter(|u| u.starts_with("http://") || u.starts_with("https://"))
    else {
        return error(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            "HttpRequest.url must be an absolute http(s) URL",
        );
    };
    if http["httpMethod"].as_str().unwrap_or("POST") != "POST" {
        return error(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", "the fake serves POST tasks only");
    }
    let task_body = match http["body"].as_str().map(|b| base64::engine::general_purpose::STANDARD.decode(b)) {
        None => Bytes::new(),
        Some(Ok(b)) => Bytes::from(b),
        Some(Err(_)) => {
            return error(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", "HttpRequest.body is not base64");
        }
    };
    if task_body.len() > 1024 * 1024 {
        return error(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", "Task size too large");
    }
    let headers: BTreeMap<String, String> = http["headers"]
        .as_object()
        .map(|h| {
            h.iter().filter_map(|(k, v)| v.as_str().map(|v| (k.to_ascii_lowercase(), v.to_owned()))).collect()
        })
        .unwrap_or_default();
    let oidc = &http["oidcToken"];
    let Some(sa) = oidc["serviceAccountEmail"].as_str() else {
        return error(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            "the platform's tasks carry an OIDC token",
        );
    };
    let now = s.clock.now();
    let schedule_time = match t["scheduleTime"].as_str() {
        None => now,
        Some(v) => match Timestamp::parse_rfc3339(v) {
            Ok(at) => at,
            Err(_) => return error(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", "Invalid scheduleTime"),
        },
    };
    let deadline =
        t["dispatchDeadline"].as_str().and_then(parse_duration).unwrap_or(Duration::from_secs(600));
    if !(Duration::from_secs(15)..=Duration::from_secs(1800)).contains(&deadline) {
        return error(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            "dispatchDeadline must be between 15s and 30m",
        );
    }
    let prefix = format!("projects/{project}/locations/{location}/queues/{queue}/tasks/");
    let id = match t["name"].as_str() {
        Some(n) => match n.strip_prefix(&prefix) {
            Some(id)
                if !id.is_empty()
                    && id.len() <= 500
                    && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') =>
            {
                id.to_owned()
            }
            _ => return error(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", format!("Invalid task name {n}")),
        },
        None => format!("{:019}", s.seq.fetch_add(1, Ordering::SeqCst) + 1_000_000_000),
    };
    let task = FakeTask {
        queue: queue.clone(),
        id: id.clone(),
        url: url.to_owned(),
        headers,
        body: task_body,
        service_account_email: sa.to_owned(),
        audience: oidc["audience"].as_str().unwrap_or(url).to_owned(),
        dispatch_deadline: deadline,
        schedule_time,
        created: now,
        dispatches: 0,
        state: TaskState::Pending,
    };
    {
        let mut tasks = s.tasks.lock().unwrap_or_else(|e| e.into_inner());
        let key = (queue.clone(), id.clone());
        let taken = match tasks.get(&key).map(|t| &t.state) {
            Some(TaskState::Pending | TaskState::Dispatched) => true,
            Some(TaskState::Gone { until }) => *until > now,
            None => false,
        };
        if taken {
            s.stats.conflicts.fetch_add(1, Ordering::Relaxed);
            return error(StatusCode::CONFLICT, "ALREADY_EXISTS", "Requested entity already exists");
        }
        tasks.insert(key, task.clone());
    }
    s.stats.creates.fetch_add(1, Ordering::Relaxed);
    if lose {
        s.stats.answers_lost.fetch_add(1, Ordering::Relaxed);
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "UNAVAILABLE",
            "The service is currently unavailable.",
        );
    }
    (StatusCode::OK, axum::Json(task_json(&task, &project, &location))).into_response()
}

async fn list(
    State(s): State<Arc<FakeState>>,
    Path((project, location, queue)): Path<QueuePath>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    if !s.queues.contains_key(&queue) {
        return error(StatusCode::NOT_FOUND, "NOT_FOUND", format!("Queue does not exist: {queue}"));
    }
    let size: usize =
        q.get("pageSize").and_then(|v| v.parse().ok()).filter(|n| *n > 0).unwrap_or(1000).min(1000);
    let from: usize = q.get("pageToken").and_then(|v| v.parse().ok()).unwrap_or(0);
    let tasks = s.tasks.lock().unwrap_or_else(|e| e.into_inner());
    let live: Vec<&FakeTask> =
        tasks.values().filter(|t| t.queue == queue && !matches!(t.state, TaskState::Gone { .. })).collect();
    let page: Vec<Value> =
        live.iter().skip(from).take(size).map(|t| task_json(t, &project, &location)).collect();
    let mut body = json!({ "tasks": page });
    if from + size < live.len() {
        body["nextPageToken"] = json!((from + size).to_string());
    }
    (StatusCode::OK, axum::Json(body)).into_response()
}

async fn remove(
    State(s): State<Arc<FakeState>>,
    Path((_, _, queue, id)): Path<(String, String, String, String)>,
) -> Response {
    let now = s.clock.now();
    let mut tasks = s.tasks.lock().unwrap_or_else(|e| e.into_inner());
    match tasks.get_mut(&(queue, id)) {
        Some(t) if !matches!(t.state, TaskState::Gone { .. }) => {
            t.state = TaskState::Gone { until: now + DEDUP_WINDOW };
            (StatusCode::OK, axum::Json(json!({}))).into_response()
        }
        _ => error(StatusCode::NOT_FOUND, "NOT_FOUND", "Requested entity was not found."),
    }
}

/// The `X-CloudTasks-TaskETA` value: decimal seconds.
fn eta(t: Timestamp) -> String {
    let us = t.as_micros();
    format!("{}.{:06}", us.div_euclid(1_000_000), us.rem_euclid(1_000_000))
}

/// One POST of a task; the status, and the Retry-After of a 429 or 503.
async fn deliver_once(s: &FakeState, t: &FakeTask) -> (Option<u16>, Option<Duration>) {
    s.stats.deliveries.fetch_add(1, Ordering::Relaxed);
    let retries = t.dispatches.saturating_sub(1).to_string();
    let mut req = s
        .http
        .post(&t.url)
        .timeout(t.dispatch_deadline)
        .header("X-CloudTasks-QueueName", &t.queue)
        .header("X-CloudTasks-TaskName", &t.id)
        .header("X-CloudTasks-TaskRetryCount", &retries)
        .header("X-CloudTasks-TaskExecutionCount", &retries)
        .header("X-CloudTasks-TaskETA", eta(t.schedule_time))
        .header("User-Agent", "Google-Cloud-Tasks")
        .body(t.body.clone());
    for (k, v) in &t.headers {
        req = req.header(k, v);
    }
    match &s.auth {
        DeliveryAuth::None => {}
        DeliveryAuth::Bearer(token) => req = req.bearer_auth(token),
        DeliveryAuth::IdToken(google) => {
            let token = google.id_token(&t.service_account_email, &t.audience, s.clock.now());
            req = req.bearer_auth(token);
        }
    }
    match req.send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            let retry_after = (status == 429 || status == 503)
                .then(|| {
                    r.headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse().ok())
                })
                .flatten()
                .map(Duration::from_secs);
            (Some(status), retry_after)
        }
        Err(_) => (None, None),
    }
}

/// Delivers `t` (twice when the seeded plan says so) and records the outcome.
async fn dispatch(s: Arc<FakeState>, t: FakeTask) {
    let plan = s.delivery_faults.plan(&t.id, t.dispatches);
    let (status, retry_after) = match plan {
        Plan::Once => deliver_once(&s, &t).await,
        Plan::Duplicate => {
            s.stats.duplicated.fetch_add(1, Ordering::Relaxed);
            let first = deliver_once(&s, &t).await;
            deliver_once(&s, &t).await;
            first
        }
        Plan::Overlap => {
            s.stats.overlapped.fetch_add(1, Ordering::Relaxed);
            tokio::join!(deliver_once(&s, &t), deliver_once(&s, &t)).0
        }
    };
    let now = s.clock.now();
    let Some(cfg) = s.queues.get(&t.queue) else { return };
    let mut tasks = s.tasks.lock().unwrap_or_else(|e| e.into_inner());
    let Some(stored) = tasks.get_mut(&(t.queue.clone(), t.id.clone())) else { return };
    if stored.state != TaskState::Dispatched {
        return; // deleted while in flight
    }
    if status.is_some_and(|c| (200..300).contains(&c)) {
        stored.state = TaskState::Gone { until: now + DEDUP_WINDOW };
    } else if cfg.retry.allows_another(stored.dispatches) {
        let wait = cfg.retry.backoff(stored.dispatches - 1).max(retry_after.unwrap_or_default());
        stored.schedule_time = now + wait;
        stored.state = TaskState::Pending;
    } else {
        stored.state = TaskState::Gone { until: now + DEDUP_WINDOW };
    }
}

/// Takes the due tasks, at most each queue's free dispatch slots.
fn take_due(state: &FakeState) -> Vec<FakeTask> {
    let now = state.clock.now();
    let mut tasks = state.tasks.lock().unwrap_or_else(|e| e.into_inner());
    let mut in_flight: BTreeMap<String, u32> = BTreeMap::new();
    for t in tasks.values().filter(|t| t.state == TaskState::Dispatched) {
        *in_flight.entry(t.queue.clone()).or_default() += 1;
    }
    let mut due: Vec<&mut FakeTask> =
        tasks.values_mut().filter(|t| t.state == TaskState::Pending && t.schedule_time <= now).collect();
    due.sort_by_key(|t| (t.schedule_time, t.created));
    let mut out = Vec::new();
    for t in due {
        let limit = state.queues.get(&t.queue).map_or(1000, |c| c.max_concurrent_dispatches);
        let n = in_flight.entry(t.queue.clone()).or_default();
        if *n >= limit {
            continue;
        }
        *n += 1;
        t.state = TaskState::Dispatched;
        t.dispatches += 1;
        out.push(t.clone());
    }
    out
}

impl FakeCloudTasks {
    /// Starts the fake serving `queues`, delivering with `auth`.
    pub async fn start(
        clock: Arc<dyn Clock>,
        queues: Vec<QueueConfig>,
        auth: DeliveryAuth,
        api_faults: ApiFaults,
        delivery_faults: Faults,
    ) -> FakeCloudTasks {
        let state = Arc::new(FakeState {
            clock,
            queues: queues.into_iter().map(|q| (q.name.as_str().to_owned(), q)).collect(),
            tasks: Mutex::default(),
            seq: AtomicU64::new(0),
            api_rolls: Mutex::new(Rng::new(api_faults.seed)),
            api_faults,
            delivery_faults,
            auth,
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            stats: Stats::default(),
        });
        let queue = "/v2/projects/{project}/locations/{location}/queues/{queue}/tasks";
        let app = Router::new()
            .route(queue, post(create).get(list))
            .route(&format!("{queue}/{{task}}"), delete(remove))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind fake");
        let url = format!("http://{}", listener.local_addr().expect("fake address"));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeCloudTasks { url, state, server }
    }

    pub fn stats(&self) -> &Stats {
        &self.state.stats
    }

    /// Every task the fake holds (gone ones too, while their name is taken).
    pub fn tasks(&self) -> Vec<FakeTask> {
        self.state.tasks.lock().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
    }

    /// Delivers every task due now and waits for the outcomes; returns how
    /// many tasks were dispatched.
    pub async fn deliver_due(&self) -> usize {
        let due = take_due(&self.state);
        let n = due.len();
        let mut set = tokio::task::JoinSet::new();
        for t in due {
            set.spawn(dispatch(self.state.clone(), t));
        }
        while set.join_next().await.is_some() {}
        n
    }

    /// Dispatches in the background, as the service does, until aborted.
    pub fn run(&self) -> tokio::task::JoinHandle<()> {
        let state = self.state.clone();
        tokio::spawn(async move {
            let mut set = tokio::task::JoinSet::new();
            loop {
                for t in take_due(&state) {
                    set.spawn(dispatch(state.clone(), t));
                }
                while set.try_join_next().is_some() {}
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    }
}
