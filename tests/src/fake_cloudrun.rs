//! FakeCloudRun: the Cloud Run Admin API v2 (Jobs, executions, tasks) as
//! REST/JSON on 127.0.0.1, written from Google's REST reference, not from
//! the client crate's types, so the crate is tested against the wire shapes
//! it will meet. It keeps Jobs, executions and tasks, runs each task as a
//! `mapi-worker` child process with the environment Cloud Run gives
//! (`CLOUD_RUN_TASK_INDEX`, `CLOUD_RUN_TASK_COUNT`, the Job's static
//! `MAPI_BOOTSTRAP_URL`, the overrides), enforces the task timeout
//! (SIGTERM, then SIGKILL), writes every line a task prints on stdout or
//! stderr to its own [`FakeCloudLogging`] (`FakeCloudRun::logging`) as
//! Cloud Run does, before the task is reported finished, acts as the log
//! sink (event lines the tasks print are collected, or pushed to the
//! platform in Pub/Sub envelopes),
//! deletes executions (`executions.delete`),
//! and injects faults on demand: 429 with Retry-After, an answer lost after
//! the execution was made, 503, slow answers, OOM (exit 137, or
//! `term_signal` 9 with no exit code), executions that vanish.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use mapi_clock::Clock;
use mapi_domain::Timestamp;
use mapi_executor::LogStream;
use mapi_executor::local::layout::Command;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::fake_cloudlogging::FakeCloudLogging;

/// How long after its start an execution with `Fault::OutOfMemory` is killed.
pub const OOM_AFTER: Duration = Duration::from_millis(1500);

/// How long a finished task's output may take to be read to its end (a
/// child the task left behind may hold its pipes open).
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// The push subscription the fake's log sink delivers through.
pub const SUBSCRIPTION: &str = "projects/fake/subscriptions/mapi-run-events-push";

/// A fault to inject into the next matching call or execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The next `jobs.run` answers 429 with this Retry-After (seconds).
    Throttle { retry_after_s: u64 },
    /// The next `jobs.run` makes the execution, then its answer is lost.
    LoseResponse,
    /// The next `jobs.run` answers 503 without making anything.
    Unavailable,
    /// The next `jobs.run` answers after this long (real time).
    Slow(Duration),
    /// Task 0 of the next execution is killed for memory: exit 137, or
    /// (`signal`) `term_signal` 9 with no exit code.
    OutOfMemory { signal: bool },
    /// The next execution disappears once started (`executions.get` 404).
    Vanish,
    /// The next `executions.list` answers 503.
    ListUnavailable,
}

impl Fault {
    fn on_run_job(&self) -> bool {
        matches!(self, Fault::Throttle { .. } | Fault::LoseResponse | Fault::Unavailable | Fault::Slow(_))
    }

    fn on_execution(&self) -> bool {
        matches!(self, Fault::OutOfMemory { .. } | Fault::Vanish)
    }
}

/// One event line a task printed, as the log sink saw it.
#[derive(Clone, Debug)]
pub struct LoggedEvent {
    pub execution: String,
    pub job: String,
    pub task: u32,
    /// The line's JSON (`{"mapi_event": …}`).
    pub payload: Value,
}

/// Where the sink pushes event lines, if anywhere.
#[derive(Clone, Debug)]
pub struct PushTarget {
    pub url: String,
    pub token: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TaskState {
    Pending,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

#[derive(Debug)]
struct FakeTask {
    index: u32,
    state: TaskState,
    exit_code: i32,
    term_signal: i32,
    message: String,
    pid: Option<i32>,
    started: Option<Timestamp>,
    completed: Option<Timestamp>,
}

#[derive(Debug)]
struct FakeExecution {
    name: String,
    job: String,
    uid: String,
    created: Timestamp,
    started: Option<Timestamp>,
    completed: Option<Timestamp>,
    timeout_s: u64,
    env: Vec<(String, String)>,
    args: Vec<String>,
    tasks: Vec<FakeTask>,
    cancelled: bool,
    vanished: bool,
}

/// A call the fake answered, for tests that check what the client sent.
#[derive(Clone, Debug)]
pub struct Call {
    pub method: String,
    pub path: String,
    pub query: String,
    pub body: Value,
    pub status: u16,
}

#[derive(Debug, Default)]
struct FakeState {
    jobs: Vec<String>,
    executions: BTreeMap<String, FakeExecution>,
    /// Execution names in creation order.
    order: Vec<String>,
    faults: VecDeque<Fault>,
    /// Faults for the n-th `jobs.run` call (1-based).
    scheduled: BTreeMap<u64, Fault>,
    run_job_calls: u64,
    calls: Vec<Call>,
    events: Vec<LoggedEvent>,
    serial: u64,
    static_env: BTreeMap<String, String>,
    push: Option<PushTarget>,
    run_processes: bool,
    /// Memory limit by class, keyed by the Job id's last segment (`s`, `m`…);
    /// `*` for every Job.
    memory_mib: BTreeMap<String, u64>,
}

/// The fake service.
#[derive(Clone, Debug)]
pub struct FakeCloudRun {
    pub url: String,
    pub project: String,
    pub region: String,
    /// Where the tasks' output is written, as Cloud Logging keeps it.
    pub logging: FakeCloudLogging,
    state: Arc<Mutex<FakeState>>,
    clock: Arc<dyn Clock>,
    worker: Arc<Command>,
    grace: Duration,
    http: reqwest::Client,
}

impl FakeCloudRun {
    /// Serves the Admin API for `jobs` (Job ids) of `project`/`region` on
    /// 127.0.0.1:0. Each execution's tasks run `worker`.
    pub async fn start(
        project: &str,
        region: &str,
        jobs: Vec<String>,
        worker: Command,
        clock: Arc<dyn Clock>,
    ) -> FakeCloudRun {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the fake");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let fake = FakeCloudRun {
            url,
            project: project.to_owned(),
            region: region.to_owned(),
            logging: FakeCloudLogging::start().await,
            state: Arc::new(Mutex::new(FakeState { jobs, run_processes: true, ..FakeState::default() })),
            clock,
            worker: Arc::new(worker),
            grace: Duration::from_secs(2),
            http: reqwest::Client::new(),
        };
        let app = Router::new().fallback(handle).with_state(fake.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        fake
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The static environment every Job has (`MAPI_BOOTSTRAP_URL`).
    pub fn set_static_env(&self, env: BTreeMap<String, String>) {
        self.lock().static_env = env;
    }

    /// Every Job's memory limit: a task whose resident memory passes it is
    /// killed and reported with exit 137, as Cloud Run does.
    pub fn set_memory_limit_mib(&self, mib: u64) {
        self.lock().memory_mib.insert("*".to_owned(), mib);
    }

    /// The memory limit of the Jobs of one class (`S`, `M`…).
    pub fn set_class_memory_limit_mib(&self, class: &str, mib: u64) {
        self.lock().memory_mib.insert(class.to_ascii_lowercase(), mib);
    }

    /// Pushes event lines to `target` as Pub/Sub would, instead of only
    /// collecting them.
    pub fn push_events_to(&self, target: PushTarget) {
        self.lock().push = Some(target);
    }

    /// Collects event lines for [`FakeCloudRun::take_events`] instead of
    /// pushing them (the test delivers them, late or twice).
    pub fn collect_events(&self) {
        self.lock().push = None;
    }

    /// Executions do not start processes: their tasks stay running until
    /// the test ends them with [`FakeCloudRun::finish`] (for simulations).
    pub fn without_processes(&self) {
        self.lock().run_processes = false;
    }

    pub fn inject(&self, fault: Fault) {
        self.lock().faults.push_back(fault);
    }

    /// Injects `fault` into the `n`-th `jobs.run` call (1-based).
    pub fn inject_at(&self, n: u64, fault: Fault) {
        self.lock().scheduled.insert(n, fault);
    }

    /// Faults not consumed yet.
    pub fn pending_faults(&self) -> usize {
        let s = self.lock();
        s.faults.len() + s.scheduled.len()
    }

    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// Event lines collected and not taken yet.
    pub fn take_events(&self) -> Vec<LoggedEvent> {
        std::mem::take(&mut self.lock().events)
    }

    /// Every execution made, oldest first: (name, MAPI_NONCE, MAPI_RUN_ID).
    pub fn executions(&self) -> Vec<(String, String, String)> {
        let s = self.lock();
        s.order
            .iter()
            .filter_map(|n| s.executions.get(n))
            .map(|e| {
                let get =
                    |k: &str| e.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()).unwrap_or_default();
                (e.name.clone(), get("MAPI_NONCE"), get("MAPI_RUN_ID"))
            })
            .collect()
    }

    /// Ends every task of a process-less execution with `exit_code`.
    pub fn finish(&self, name: &str, exit_code: i32) {
        let now = self.clock.now();
        let mut s = self.lock();
        if let Some(e) = s.executions.get_mut(name) {
            for t in &mut e.tasks {
                t.state = if exit_code == 0 { TaskState::Succeeded } else { TaskState::Failed };
                t.exit_code = exit_code;
                t.completed = Some(now);
            }
            e.completed = Some(now);
        }
    }

    fn record(&self, call: Call) {
        self.lock().calls.push(call);
    }
}

fn rfc3339(t: Timestamp) -> String {
    t.to_rfc3339()
}

pub(crate) fn google_error(code: u16, status: &str, message: &str) -> Response {
    let body = json!({"error": {"code": code, "message": message, "status": status}});
    (StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), axum::Json(body))
        .into_response()
}

fn execution_json(e: &FakeExecution) -> Value {
    let count = |s: TaskState| e.tasks.iter().filter(|t| t.state == s).count();
    let env: Vec<Value> = e.env.iter().map(|(n, v)| json!({"name": n, "value": v})).collect();
    let mut v = json!({
        "name": e.name,
        "uid": e.uid,
        "job": e.job,
        "generation": "1",
        "createTime": rfc3339(e.created),
        "taskCount": e.tasks.len(),
        "parallelism": e.tasks.len(),
        "runningCount": count(TaskState::Running),
        "succeededCount": count(TaskState::Succeeded),
        "failedCount": count(TaskState::Failed),
        "cancelledCount": count(TaskState::Cancelled),
        "template": {
            "containers": [{"image": format!("europe-docker.pkg.dev/fake/{}", e.job), "env": env}],
            "timeout": format!("{}s", e.timeout_s),
            "maxRetries": 0,
        },
        "logUri": "https://console.cloud.google.com/logs",
        "etag": format!("\"{}\"", e.uid),
    });
    if let Some(t) = e.started {
        v["startTime"] = json!(rfc3339(t));
    }
    if let Some(t) = e.completed {
        v["completionTime"] = json!(rfc3339(t));
        let failed = count(TaskState::Failed) > 0;
        v["conditions"] = json!([{
            "type": "Completed",
            "state": if failed || e.cancelled { 3 } else { 4 },
            "message": if e.cancelled { "Execution was cancelled" } else if failed { "Task failed" } else { "" },
        }]);
    }
    v
}

fn task_json(e: &FakeExecution, t: &FakeTask) -> Value {
    let mut v = json!({
        "name": format!("{}/tasks/{}-task{}", e.name, e.uid, t.index),
        "job": e.job,
        "execution": e.name,
        "index": t.index,
        "maxRetries": 0,
    });
    if let Some(s) = t.started {
        v["startTime"] = json!(rfc3339(s));
    }
    if let Some(c) = t.completed {
        v["completionTime"] = json!(rfc3339(c));
        let mut result = json!({"status": {"code": if t.state == TaskState::Succeeded { 0 } else { 2 }, "message": t.message}});
        if t.exit_code != 0 {
            result["exitCode"] = json!(t.exit_code);
        }
        if t.term_signal != 0 {
            result["termSignal"] = json!(t.term_signal);
        }
        v["lastAttemptResult"] = result;
    }
    v
}

fn operation_json(fake: &FakeCloudRun, e: &FakeExecution) -> Value {
    let mut meta = execution_json(e);
    meta["@type"] = json!("type.googleapis.com/google.cloud.run.v2.Execution");
    json!({
        "name": format!("projects/{}/locations/{}/operations/{}", fake.project, fake.region, e.uid),
        "metadata": meta,
        "done": false,
    })
}

/// A 200 whose body breaks off: the execution was made, the answer lost.
pub(crate) fn lost() -> Response {
    let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = vec![
        Ok(bytes::Bytes::from_static(b"{\"name\": \"projects/")),
        Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "answer lost")),
    ];
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(Body::from_stream(futures::stream::iter(chunks)))
        .unwrap_or_default()
}

async fn handle(
    State(fake): State<FakeCloudRun>,
    method: Method,
    uri: Uri,
    Query(query): Query<HashMap<String, String>>,
    body: bytes::Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let body_json: Value =
        if body.is_empty() { Value::Null } else { serde_json::from_slice(&body).unwrap_or(Value::Null) };
    let resp = route(&fake, &method, &path, &query, &body_json).await;
    fake.record(Call {
        method: method.to_string(),
        path,
        query: uri.query().unwrap_or_default().to_owned(),
        body: body_json,
        status: resp.status().as_u16(),
    });
    resp
}

async fn route(
    fake: &FakeCloudRun,
    method: &Method,
    path: &str,
    query: &HashMap<String, String>,
    body: &Value,
) -> Response {
    let prefix = format!("/v2/projects/{}/locations/{}/jobs/", fake.project, fake.region);
    let Some(rest) = path.strip_prefix(&prefix) else {
        return google_error(404, "NOT_FOUND", &format!("no such resource: {path}"));
    };
    let parts: Vec<&str> = rest.split('/').collect();
    match (method.as_str(), parts.as_slice()) {
        ("POST", [job_run]) if job_run.ends_with(":run") => {
            run_job(fake, job_run.trim_end_matches(":run"), body).await
        }
        ("GET", [job, "executions"]) => list_executions(fake, job, query),
        ("GET", [job, "executions", e]) => {
            with_execution(fake, job, e, |e| axum::Json(execution_json(e)).into_response())
        }
        ("POST", [job, "executions", e]) if e.ends_with(":cancel") => {
            cancel(fake, job, e.trim_end_matches(":cancel"))
        }
        ("DELETE", [job, "executions", e]) => delete(fake, job, e, query),
        ("GET", [job, "executions", e, "tasks"]) => with_execution(fake, job, e, |e| {
            let tasks: Vec<Value> = e.tasks.iter().map(|t| task_json(e, t)).collect();
            axum::Json(json!({"tasks": tasks})).into_response()
        }),
        _ => google_error(404, "NOT_FOUND", &format!("no such method: {method} {path}")),
    }
}

fn full_name(fake: &FakeCloudRun, job: &str, e: &str) -> String {
    format!("projects/{}/locations/{}/jobs/{job}/executions/{e}", fake.project, fake.region)
}

fn with_execution(
    fake: &FakeCloudRun,
    job: &str,
    e: &str,
    f: impl FnOnce(&FakeExecution) -> Response,
) -> Response {
    let name = full_name(fake, job, e);
    let s = fake.lock();
    match s.executions.get(&name).filter(|e| !e.vanished) {
        Some(e) => f(e),
        None => google_error(
            404,
            "NOT_FOUND",
            &format!(
                "Resource '{e}' of kind 'EXECUTION' in region '{}' in project '{}' does not exist.",
                fake.region, fake.project
            ),
        ),
    }
}

fn list_executions(fake: &FakeCloudRun, job: &str, query: &HashMap<String, String>) -> Response {
    let mut s = fake.lock();
    if let Some(i) = s.faults.iter().position(|f| *f == Fault::ListUnavailable) {
        s.faults.remove(i);
        return google_error(503, "UNAVAILABLE", "The service is currently unavailable.");
    }
    if !s.jobs.iter().any(|j| j == job) {
        return google_error(404, "NOT_FOUND", &format!("Job '{job}' does not exist"));
    }
    let size = query.get("pageSize").and_then(|v| v.parse::<usize>().ok()).filter(|n| *n > 0).unwrap_or(100);
    let start = query.get("pageToken").and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
    // Newest first, as the service lists them.
    let mine: Vec<&FakeExecution> = s
        .order
        .iter()
        .rev()
        .filter_map(|n| s.executions.get(n))
        .filter(|e| e.job == job && !e.vanished)
        .collect();
    let page: Vec<Value> = mine.iter().skip(start).take(size).map(|e| execution_json(e)).collect();
    let mut v = json!({"executions": page});
    if start + size < mine.len() {
        v["nextPageToken"] = json!((start + size).to_string());
    }
    axum::Json(v).into_response()
}

fn parse_duration_s(v: &Value) -> Option<u64> {
    let s = v.as_str()?.strip_suffix('s')?;
    s.parse::<f64>().ok().map(|f| f.ceil() as u64)
}

async fn run_job(fake: &FakeCloudRun, job: &str, body: &Value) -> Response {
    let fault = {
        let mut s = fake.lock();
        s.run_job_calls += 1;
        let n = s.run_job_calls;
        match s.scheduled.remove(&n) {
            Some(f) => Some(f),
            None => {
                let i = s.faults.iter().position(Fault::on_run_job);
                i.and_then(|i| s.faults.remove(i))
            }
        }
    };
    match fault {
        Some(Fault::Throttle { retry_after_s }) => {
            let mut r = google_error(
                429,
                "RESOURCE_EXHAUSTED",
                "Quota exceeded for quota metric 'Job run requests' of service 'run.googleapis.com'",
            );
            if let Ok(v) = axum::http::HeaderValue::from_str(&retry_after_s.to_string()) {
                r.headers_mut().insert("retry-after", v);
            }
            return r;
        }
        Some(Fault::Unavailable) => {
            return google_error(503, "UNAVAILABLE", "The service is currently unavailable.");
        }
        Some(Fault::Slow(d)) => tokio::time::sleep(d).await,
        _ => {}
    }
    let overrides = &body["overrides"];
    let Some(obj) = body.as_object() else {
        return google_error(400, "INVALID_ARGUMENT", "the body is not a RunJobRequest");
    };
    if let Some(k) = obj.keys().find(|k| !matches!(k.as_str(), "overrides" | "validateOnly" | "etag")) {
        return google_error(
            400,
            "INVALID_ARGUMENT",
            &format!("Invalid JSON payload received. Unknown name \"{k}\""),
        );
    }
    let mut env = Vec::new();
    let mut args = Vec::new();
    for c in overrides["containerOverrides"].as_array().into_iter().flatten() {
        for v in c["env"].as_array().into_iter().flatten() {
            env.push((
                v["name"].as_str().unwrap_or_default().to_owned(),
                v["value"].as_str().unwrap_or_default().to_owned(),
            ));
        }
        for a in c["args"].as_array().into_iter().flatten() {
            args.push(a.as_str().unwrap_or_default().to_owned());
        }
    }
    let task_count = overrides["taskCount"].as_u64().unwrap_or(1).max(1);
    let timeout_s = parse_duration_s(&overrides["timeout"]).unwrap_or(600);
    let now = fake.clock.now();
    let (op, name, lose) = {
        let mut s = fake.lock();
        if !s.jobs.iter().any(|j| j == job) {
            return google_error(404, "NOT_FOUND", &format!("Job '{job}' does not exist"));
        }
        s.serial += 1;
        let uid = format!("{:05}", s.serial);
        let short = format!("{job}-{uid}");
        let name = full_name(fake, job, &short);
        let exec_faults: Vec<Fault> = {
            let mut taken = Vec::new();
            if let Some(i) = s.faults.iter().position(Fault::on_execution) {
                taken.extend(s.faults.remove(i));
            }
            taken
        };
        let e = FakeExecution {
            name: name.clone(),
            job: job.to_owned(),
            uid,
            created: now,
            started: Some(now),
            completed: None,
            timeout_s,
            env,
            args,
            tasks: (0..task_count)
                .map(|i| FakeTask {
                    index: u32::try_from(i).unwrap_or(0),
                    state: TaskState::Pending,
                    exit_code: 0,
                    term_signal: 0,
                    message: String::new(),
                    pid: None,
                    started: None,
                    completed: None,
                })
                .collect(),
            cancelled: false,
            vanished: false,
        };
        let op = operation_json(fake, &e);
        s.executions.insert(name.clone(), e);
        s.order.push(name.clone());
        let run_processes = s.run_processes;
        drop(s);
        if run_processes {
            for i in 0..task_count {
                let f = fake.clone();
                let (n, fault) = (name.clone(), if i == 0 { exec_faults.first().cloned() } else { None });
                tokio::spawn(async move { f.run_task(n, u32::try_from(i).unwrap_or(0), fault).await });
            }
        } else {
            let mut s = fake.lock();
            if let Some(e) = s.executions.get_mut(&name) {
                for t in &mut e.tasks {
                    t.state = TaskState::Running;
                    t.started = Some(now);
                }
                if exec_faults.contains(&Fault::Vanish) {
                    e.vanished = true;
                }
            }
        }
        (op, name, fault == Some(Fault::LoseResponse))
    };
    tracing::debug!(execution = %name, "fake jobs.run made an execution");
    if lose { lost() } else { axum::Json(op).into_response() }
}

fn cancel(fake: &FakeCloudRun, job: &str, e: &str) -> Response {
    let name = full_name(fake, job, e);
    let now = fake.clock.now();
    let mut s = fake.lock();
    let Some(ex) = s.executions.get_mut(&name).filter(|e| !e.vanished) else {
        return google_error(404, "NOT_FOUND", &format!("Execution '{e}' does not exist"));
    };
    if ex.completed.is_some() {
        return google_error(412, "FAILED_PRECONDITION", "the execution has already completed");
    }
    ex.cancelled = true;
    let mut any_running = false;
    for t in &mut ex.tasks {
        match (t.state, t.pid) {
            (TaskState::Running, Some(pid)) => {
                any_running = true;
                signal(pid, nix::sys::signal::Signal::SIGTERM);
            }
            (TaskState::Pending | TaskState::Running, _) => {
                t.state = TaskState::Cancelled;
                t.completed = Some(now);
            }
            _ => {}
        }
    }
    if !any_running {
        ex.completed = Some(now);
    }
    let op = operation_json(fake, ex);
    drop(s);
    axum::Json(op).into_response()
}

/// `executions.delete`: the execution is gone from `get` and `list` at once (its lines stay in
/// Cloud Logging); the answer is the long-running operation, with the execution as metadata.
/// `validateOnly` deletes nothing; an `etag` that is not the execution's is refused (409). An
/// execution that has not completed is refused only if `mapi_cloudrun::assumptions` says Cloud Run
/// refuses it; otherwise its running tasks are stopped (SIGKILL) as it goes.
fn delete(fake: &FakeCloudRun, job: &str, e: &str, query: &HashMap<String, String>) -> Response {
    let name = full_name(fake, job, e);
    let mut s = fake.lock();
    let Some(ex) = s.executions.get(&name).filter(|e| !e.vanished) else {
        return google_error(404, "NOT_FOUND", &format!("Execution '{e}' does not exist"));
    };
    // The client sends every field of the request: an empty etag is none.
    let etag = query.get("etag").filter(|tag| !tag.is_empty());
    if etag.is_some_and(|tag| *tag != format!("\"{}\"", ex.uid)) {
        return google_error(409, "ABORTED", "the etag does not match the execution's");
    }
    let running = ex.completed.is_none();
    if running && mapi_cloudrun::assumptions::DELETE_REFUSES_A_RUNNING_EXECUTION {
        return google_error(400, "FAILED_PRECONDITION", "the execution has not completed");
    }
    let op = operation_json(fake, ex);
    if query.get("validateOnly").is_some_and(|v| v == "true") {
        return axum::Json(op).into_response();
    }
    if let Some(ex) = s.executions.remove(&name) {
        for pid in ex.tasks.iter().filter_map(|t| t.pid) {
            signal(pid, nix::sys::signal::Signal::SIGKILL);
        }
    }
    s.order.retain(|n| *n != name);
    drop(s);
    axum::Json(op).into_response()
}

fn signal(pid: i32, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
}

impl FakeCloudRun {
    async fn run_task(self, name: String, index: u32, fault: Option<Fault>) {
        let (env, count, timeout, job, static_env) = {
            let s = self.lock();
            let Some(e) = s.executions.get(&name) else { return };
            (e.env.clone(), e.tasks.len(), e.timeout_s, e.job.clone(), s.static_env.clone())
        };
        let mut cmd = tokio::process::Command::new(&self.worker.program);
        cmd.args(&self.worker.args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
            .envs(static_env)
            .envs(env)
            .env("CLOUD_RUN_JOB", &job)
            .env("CLOUD_RUN_EXECUTION", name.rsplit('/').next().unwrap_or(&name))
            .env("CLOUD_RUN_TASK_INDEX", index.to_string())
            .env("CLOUD_RUN_TASK_COUNT", count.to_string())
            .env("CLOUD_RUN_TASK_ATTEMPT", "0")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let now = self.clock.now();
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                self.end_task(&name, index, 127, 0, &format!("container failed to start: {e}"));
                return;
            }
        };
        let pid = child.id().and_then(|p| i32::try_from(p).ok());
        let vanish = fault == Some(Fault::Vanish);
        {
            let mut s = self.lock();
            if let Some(e) = s.executions.get_mut(&name) {
                if e.cancelled {
                    // Cancelled before this task started: it never runs.
                    let _ = child.start_kill();
                    return;
                }
                if let Some(t) = e.tasks.get_mut(index as usize) {
                    t.state = TaskState::Running;
                    t.pid = pid;
                    t.started = Some(now);
                }
                if vanish {
                    e.vanished = true;
                }
            }
        }
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(self.read_output(out, name.clone(), job.clone(), index, LogStream::Stdout));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(self.read_output(err, name.clone(), job.clone(), index, LogStream::Stderr));
        }
        if let (Some(Fault::OutOfMemory { .. }), Some(pid)) = (&fault, pid) {
            // Long enough for a worker to have started its method (and
            // flushed a checkpoint, if it writes them often).
            tokio::time::sleep(OOM_AFTER).await;
            signal(pid, nix::sys::signal::Signal::SIGKILL);
        }
        let oom_killed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let limit = {
            let s = self.lock();
            let class = job.rsplit('-').next().unwrap_or_default();
            s.memory_mib.get(class).or_else(|| s.memory_mib.get("*")).copied()
        };
        if let (Some(limit), Some(pid)) = (limit, pid) {
            let flag = oom_killed.clone();
            tokio::spawn(async move { watch_memory(pid, limit, flag).await });
        }
        let deadline = Duration::from_secs(timeout);
        let status = match tokio::time::timeout(deadline, child.wait()).await {
            Ok(s) => s,
            Err(_) => {
                if let Some(pid) = pid {
                    signal(pid, nix::sys::signal::Signal::SIGTERM);
                }
                match tokio::time::timeout(self.grace, child.wait()).await {
                    Ok(s) => s,
                    Err(_) => {
                        let _ = child.start_kill();
                        child.wait().await
                    }
                }
            }
        };
        for reader in readers {
            // Cloud Logging has the lines once the task is reported finished (the fake's rule).
            let _ = tokio::time::timeout(OUTPUT_DRAIN, reader).await;
        }
        let (code, sig) = match status {
            Ok(s) => {
                use std::os::unix::process::ExitStatusExt;
                (s.code().unwrap_or(0), s.signal().unwrap_or(0))
            }
            Err(_) => (0, 9),
        };
        match fault {
            Some(Fault::OutOfMemory { signal: false }) => {
                self.end_task(&name, index, 137, 0, "Memory limit of 512 MiB exceeded with 601 MiB used.")
            }
            Some(Fault::OutOfMemory { signal: true }) => self.end_task(&name, index, 0, 9, ""),
            _ if oom_killed.load(std::sync::atomic::Ordering::SeqCst) => {
                self.end_task(&name, index, 137, 0, "Memory limit exceeded.")
            }
            _ if sig != 0 => self.end_task(&name, index, 128 + sig, 0, ""),
            _ => self.end_task(&name, index, code, 0, ""),
        }
    }

    fn end_task(&self, name: &str, index: u32, code: i32, sig: i32, message: &str) {
        let now = self.clock.now();
        let mut s = self.lock();
        let Some(e) = s.executions.get_mut(name) else { return };
        let cancelled = e.cancelled;
        if let Some(t) = e.tasks.get_mut(index as usize) {
            t.state = match (code, sig) {
                _ if cancelled => TaskState::Cancelled,
                (0, 0) => TaskState::Succeeded,
                _ => TaskState::Failed,
            };
            t.exit_code = code;
            t.term_signal = sig;
            t.message = message.to_owned();
            t.completed = Some(now);
            t.pid = None;
        }
        if e.tasks.iter().all(|t| t.completed.is_some()) {
            e.completed = Some(now);
        }
    }

    /// The Pub/Sub push body a log sink would deliver for `event`.
    pub fn envelope(&self, event: &LoggedEvent, message_id: &str) -> Value {
        let now = self.clock.now();
        let entry = mapi_events::pubsub::log_entry(
            &event.payload,
            &event.execution,
            &event.job,
            &self.region,
            now,
            message_id,
        );
        let env = mapi_events::pubsub::envelope(&entry, SUBSCRIPTION, message_id, now);
        serde_json::to_value(env).unwrap_or_default()
    }

    /// Writes each line `pipe` carries to Cloud Logging as it is read; stdout's lines also go to
    /// the event sink, in order, on a task of their own (the reader waits for no push).
    fn read_output(
        &self,
        pipe: impl tokio::io::AsyncRead + Unpin + Send + 'static,
        name: String,
        job: String,
        index: u32,
        stream: LogStream,
    ) -> tokio::task::JoinHandle<()> {
        let (events, mut sink_lines) = tokio::sync::mpsc::unbounded_channel::<String>();
        let sink = self.clone();
        let execution = name.clone();
        tokio::spawn(async move {
            while let Some(line) = sink_lines.recv().await {
                sink.log_line(&execution, &job, index, &line).await;
            }
        });
        let fake = self.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(pipe).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                fake.logging.write_line(&name, index, stream, fake.clock.now(), &line);
                if stream == LogStream::Stdout {
                    let _ = events.send(line);
                }
            }
        })
    }

    async fn log_line(&self, execution: &str, job: &str, task: u32, line: &str) {
        if mapi_events::parse_line(line).is_none() {
            return;
        }
        let Ok(payload) = serde_json::from_str::<Value>(line) else { return };
        let push = {
            let mut s = self.lock();
            if s.push.is_none() {
                s.events.push(LoggedEvent {
                    execution: execution.to_owned(),
                    job: job.to_owned(),
                    task,
                    payload: payload.clone(),
                });
            }
            s.push.clone()
        };
        if let Some(target) = push {
            let now = self.clock.now();
            let id = format!("{execution}-{task}-{}", line.len());
            let entry = mapi_events::pubsub::log_entry(&payload, execution, job, &self.region, now, &id);
            let env = mapi_events::pubsub::envelope(
                &entry,
                "projects/fake/subscriptions/mapi-run-events-push",
                &id,
                now,
            );
            for _ in 0..5 {
                let r = self.http.post(&target.url).bearer_auth(&target.token).json(&env).send().await;
                if r.is_ok_and(|r| r.status().is_success()) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// The arguments overrides carried (must be none: nothing goes in args).
    pub fn args_of(&self, name: &str) -> Vec<String> {
        self.lock().executions.get(name).map(|e| e.args.clone()).unwrap_or_default()
    }
}

/// Resident memory of a process and its children, in KiB, from /proc.
fn rss_kib(pid: i32) -> u64 {
    let mut total = 0;
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{p}/status")) {
            total += status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .unwrap_or(0);
        }
        if let Ok(children) = std::fs::read_to_string(format!("/proc/{p}/task/{p}/children")) {
            todo.extend(children.split_whitespace().filter_map(|c| c.parse::<i32>().ok()));
        }
    }
    total
}

/// Kills the task (and its children) once it holds more than `limit_mib`.
async fn watch_memory(pid: i32, limit_mib: u64, killed: Arc<std::sync::atomic::AtomicBool>) {
    loop {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return;
        }
        if rss_kib(pid) > limit_mib * 1024 {
            killed.store(true, std::sync::atomic::Ordering::SeqCst);
            if let Ok(children) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
                for c in children.split_whitespace().filter_map(|c| c.parse::<i32>().ok()) {
                    signal(c, nix::sys::signal::Signal::SIGKILL);
                }
            }
            signal(pid, nix::sys::signal::Signal::SIGKILL);
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Moves virtual time to the next sleeper whenever one waits (for executor tests that run no
/// processes, so nothing else moves it).
pub fn drive(clock: Arc<mapi_clock::VirtualClock>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Some(t) = clock.next_wake() {
                clock.set(t);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
}

/// A fake that starts no processes (a test writes what its executions print), on the
/// inventory's Jobs of env `test`, and the executor settings that point at it and its Logging.
pub async fn without_processes(
    clock: Arc<mapi_clock::VirtualClock>,
) -> (FakeCloudRun, mapi_cloudrun::Settings) {
    let mut settings = mapi_cloudrun::Settings::new("fake-project");
    settings.env = "test".to_owned();
    let jobs = mapi_cloudrun::Inventory::new(&settings).jobs().iter().map(|j| j.id.clone()).collect();
    let fake = FakeCloudRun::start(&settings.project, &settings.region, jobs, crate::worker(), clock).await;
    fake.without_processes();
    settings.endpoint = Some(fake.url.clone());
    settings.logging_endpoint = Some(fake.logging.url.clone());
    (fake, settings)
}
