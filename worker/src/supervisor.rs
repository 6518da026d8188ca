//! The supervisor: one task of one attempt, from bootstrap to exit code.
//!
//! 1. Take the bootstrap: GET `MAPI_BOOTSTRAP_URL` (with this task's nonce;
//!    an `http(s)://` route or a `gs://` object, see [`crate::bootstrap`]),
//!    then DELETE it pinned to the generation read. Only one reader can win
//!    that delete, so a duplicate execution exits 0 having done nothing. A
//!    delete whose answer was lost may have applied: the task counts the
//!    bootstrap as its own and goes on (see `delete_pinned`).
//! 2. Print a signed `started` event, fetch the dataset (and the checkpoint
//!    an earlier attempt flushed), run the method.
//! 3. On SIGTERM or at the run's timeout, ask the method to stop; a method
//!    that flushes a checkpoint exits 16, otherwise 143.
//! 4. Upload the outputs through their signed URLs, print `output` events
//!    and `complete`, exit 0. A method error prints `error` and exits 1.
//!
//! Events are JSON lines on stdout (`{"mapi_event": …}`); the supervisor's
//! own log lines are JSON on stderr.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mapi_clock::{Clock, SystemClock};
use mapi_domain::{BOOTSTRAP_VERSION, Bootstrap, Nonce, exit};
use mapi_events::{AttemptKey, EventBody, EventSequencer};
use mapi_methods::{Context, MethodError};
use tokio::runtime::Handle;

use crate::bootstrap::Source;

/// Exit code for a task that could not start (bad environment, unreadable
/// bootstrap): the reconciler treats it as an infrastructure failure.
pub const EXIT_SETUP: i32 = 2;

/// Writes one structured log line to stderr.
pub fn log(severity: &str, message: &str) {
    let line = serde_json::json!({ "severity": severity, "message": message, "component": "mapi-worker" });
    eprintln!("{line}");
}

/// The supervisor's entry point; returns the exit code.
pub fn main() -> i32 {
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            log("ERROR", &format!("cannot start the runtime: {e}"));
            return EXIT_SETUP;
        }
    };
    let code = rt.block_on(run(&|k| std::env::var(k).ok()));
    // The outcome is printed: a blocking task still running (a method's thread
    // that ignored the stop) must not hold the exit, as dropping the runtime would.
    rt.shutdown_timeout(Duration::from_secs(1));
    code
}

struct Env {
    nonce: Nonce,
    task: u32,
    bootstrap: Source,
}

fn read_env(get: &dyn Fn(&str) -> Option<String>) -> Result<Env, String> {
    let need = |k: &str| get(k).filter(|v| !v.is_empty()).ok_or_else(|| format!("{k} is not set"));
    let nonce = Nonce::parse(&need("MAPI_NONCE")?).map_err(|e| e.to_string())?;
    need("MAPI_RUN_ID")?;
    let task = get("CLOUD_RUN_TASK_INDEX").map_or(Ok(0), |v| v.parse::<u32>()).map_err(|e| e.to_string())?;
    let template = need("MAPI_BOOTSTRAP_URL")?;
    let task_nonce = nonce.for_task(task);
    let bootstrap = Source::parse(&template.replace("{nonce}", task_nonce.as_str()), get)?;
    Ok(Env { nonce, task, bootstrap })
}

/// What taking the bootstrap found.
enum Taken {
    Mine(Box<Bootstrap>),
    /// Another execution took it (or it never existed): do nothing.
    Gone,
}

/// The first pause before a bootstrap request is sent again (then 0.8 s, 1.6 s).
const BOOTSTRAP_FIRST_WAIT: Duration = Duration::from_millis(400);
/// The first pause before a dataset, checkpoint or output transfer is tried
/// again (then doubling: 1, 2, 4, 8 s).
const TRANSFER_FIRST_WAIT: Duration = Duration::from_millis(500);

/// Waits before try `attempt` (counted from 0): nothing before the first,
/// then `first`, doubling with each try after.
async fn back_off(attempt: u32, first: Duration) {
    if attempt > 0 {
        tokio::time::sleep(first * 2u32.pow(attempt - 1)).await;
    }
}

async fn take_bootstrap(http: &reqwest::Client, source: &Source) -> Result<Taken, String> {
    let mut last = String::new();
    for attempt in 0..4u32 {
        back_off(attempt, BOOTSTRAP_FIRST_WAIT).await;
        let resp = match source.read(http).await?.send().await {
            Ok(r) => r,
            Err(e) => {
                last = crate::error_chain(&e);
                continue;
            }
        };
        match resp.status().as_u16() {
            404 => return Ok(Taken::Gone),
            200 => {}
            s if s >= 500 => {
                last = format!("bootstrap GET answered {s}");
                continue;
            }
            s => return Err(format!("bootstrap GET answered {s}")),
        }
        let generation = resp
            .headers()
            .get("x-goog-generation")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or("the bootstrap response has no generation")?;
        let body = resp.bytes().await.map_err(|e| e.to_string())?;
        if !delete_pinned(http, source, &generation).await? {
            return Ok(Taken::Gone);
        }
        let b: Bootstrap =
            serde_json::from_slice(&body).map_err(|e| format!("the bootstrap is not valid: {e}"))?;
        if b.v != BOOTSTRAP_VERSION {
            return Err(format!("bootstrap version {} is not {BOOTSTRAP_VERSION}", b.v));
        }
        return Ok(Taken::Mine(Box::new(b)));
    }
    Err(format!("cannot read the bootstrap: {last}"))
}

/// Takes the bootstrap read at `generation` by deleting it pinned to that
/// generation: of all the executions that read it, only one delete can
/// succeed. Answers whether this execution took it.
///
/// A delete whose answer was lost (the platform died mid-request, a 5xx)
/// may have applied, so it is sent again; a 404 or 412 after a lost answer
/// may be our own delete seen again, and a delete that never gets an answer
/// may have applied too. Either way this execution counts the bootstrap as
/// taken and speaks: staying silent would leave an attempt whose bootstrap
/// is gone and whose taker is never heard, which the platform can only
/// wait out for the run's whole timeout. Speaking when a twin took it is
/// harmless: the attempt keeps the first execution it hears from and
/// refuses the other's events.
async fn delete_pinned(http: &reqwest::Client, source: &Source, generation: &str) -> Result<bool, String> {
    let mut lost: Option<String> = None;
    for attempt in 0..4u32 {
        back_off(attempt, BOOTSTRAP_FIRST_WAIT).await;
        let status = match source.take(http, generation).await?.send().await {
            Ok(r) => r.status().as_u16(),
            Err(e) => {
                lost = Some(format!("bootstrap DELETE failed: {e}"));
                continue;
            }
        };
        match status {
            200 | 204 => return Ok(true),
            404 | 412 if lost.is_none() => return Ok(false),
            404 | 412 => {
                log(
                    "WARNING",
                    "the bootstrap is gone after a DELETE whose answer was lost: taking it as ours",
                );
                return Ok(true);
            }
            s if s >= 500 => lost = Some(format!("bootstrap DELETE answered {s}")),
            s => return Err(format!("bootstrap DELETE answered {s}")),
        }
    }
    let why = lost.unwrap_or_default();
    log("WARNING", &format!("{why}; the DELETE may have applied: taking the bootstrap as ours"));
    Ok(true)
}

/// Prints signed events, one line each.
pub(crate) struct Events {
    seq: EventSequencer,
    clock: SystemClock,
}

impl Events {
    pub(crate) fn emit(&mut self, body: EventBody) {
        use std::io::Write;
        let signed = self.seq.next(self.clock.now(), body);
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", mapi_events::line(&signed));
        let _ = out.flush();
    }
}

/// The method's view of the platform.
struct TaskContext {
    events: Events,
    http: reqwest::Client,
    rt: Handle,
    checkpoint_url: String,
    resume: Option<serde_json::Value>,
    stop: Arc<AtomicBool>,
    last_progress: Option<Instant>,
}

impl Context for TaskContext {
    fn progress(&mut self, fraction: f64, message: &str) {
        // At most five progress events a second; the last word (1.0) always.
        let due = self.last_progress.is_none_or(|t| t.elapsed() >= Duration::from_millis(200));
        if due || fraction >= 1.0 {
            self.last_progress = Some(Instant::now());
            self.events.emit(EventBody::Progress { fraction, message: message.to_owned() });
        }
    }

    fn metric(&mut self, name: &str, value: f64) {
        self.events.emit(EventBody::Metric { name: name.to_owned(), value });
    }

    fn checkpoint(&mut self, state: &serde_json::Value) -> Result<(), String> {
        let body = serde_json::to_vec(state).map_err(|e| e.to_string())?;
        let put = put_checkpoint(&self.http, &self.checkpoint_url, Bytes::from(body), "application/json");
        let generation = self.rt.block_on(put)?;
        self.events.emit(EventBody::Checkpoint { generation });
        Ok(())
    }

    fn resume_from(&self) -> Option<serde_json::Value> {
        self.resume.clone()
    }

    fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// Reads a signed URL (`None`: 404), retrying transient failures (the
/// platform may be restarting) for about a quarter of a minute.
pub(crate) async fn fetch(http: &reqwest::Client, url: &str, what: &str) -> Result<Option<Bytes>, String> {
    let mut last = String::new();
    for attempt in 0..6u32 {
        back_off(attempt, TRANSFER_FIRST_WAIT).await;
        let resp = match http.get(url).send().await {
            Ok(r) => r,
            Err(e) => {
                last = format!("cannot fetch the {what}: {e}");
                continue;
            }
        };
        match resp.status().as_u16() {
            200 => match resp.bytes().await {
                Ok(b) => return Ok(Some(b)),
                Err(e) => last = format!("cannot read the {what}: {e}"),
            },
            404 => return Ok(None),
            s if s >= 500 => last = format!("fetching the {what} answered {s}"),
            s => return Err(format!("fetching the {what} answered {s}")),
        }
    }
    Err(last)
}

/// The object generation a write was answered with (`x-goog-generation`).
fn generation_of(r: &reqwest::Response) -> Option<i64> {
    r.headers().get("x-goog-generation")?.to_str().ok()?.parse().ok()
}

/// Writes the attempt's checkpoint (replacing the last one) through its
/// signed URL, retrying transient failures for a few seconds; the generation
/// the store answered with (0 when it named none).
pub(crate) async fn put_checkpoint(
    http: &reqwest::Client,
    url: &str,
    bytes: Bytes,
    content_type: &str,
) -> Result<i64, String> {
    let mut last = String::new();
    for attempt in 0..4u32 {
        back_off(attempt, TRANSFER_FIRST_WAIT).await;
        let sent = http.put(url).header("content-type", content_type).body(bytes.clone()).send().await;
        match sent {
            Ok(r) if r.status().is_success() => return Ok(generation_of(&r).unwrap_or(0)),
            Ok(r) if r.status().is_server_error() => {
                last = format!("checkpoint upload answered {}", r.status().as_u16());
            }
            Ok(r) => return Err(format!("checkpoint upload answered {}", r.status().as_u16())),
            Err(e) => last = format!("checkpoint upload failed: {e}"),
        }
    }
    Err(last)
}

/// Writes an output through its create-only URL, retrying transient
/// failures (the platform may be restarting) for about half a minute, and
/// returns the generation the store answered with, or `None` when an
/// earlier try of this task had written it (412: the URL belongs to this
/// attempt's task alone).
pub(crate) async fn upload(
    http: &reqwest::Client,
    url: &str,
    bytes: Vec<u8>,
    content_type: &str,
) -> Result<Option<i64>, String> {
    let mut last = String::new();
    for attempt in 0..6u32 {
        back_off(attempt, TRANSFER_FIRST_WAIT).await;
        // The URL is create-only: Cloud Storage's signs this header, and
        // refuses the upload without it.
        let sent = http
            .put(url)
            .header("content-type", content_type)
            .header("x-goog-if-generation-match", "0")
            .body(bytes.clone())
            .send()
            .await;
        match sent {
            Ok(r) if r.status().as_u16() == 200 => {
                let generation = generation_of(&r).ok_or("output upload answered without its generation")?;
                return Ok(Some(generation));
            }
            Ok(r) if r.status().as_u16() == 412 => return Ok(None),
            Ok(r) if r.status().is_server_error() => {
                last = format!("output upload answered {}", r.status().as_u16())
            }
            Ok(r) => return Err(format!("output upload answered {}", r.status().as_u16())),
            Err(e) => last = format!("output upload failed: {e}"),
        }
    }
    Err(last)
}

/// The supervisor with environment lookup `get`.
pub async fn run(get: &dyn Fn(&str) -> Option<String>) -> i32 {
    // Listen for SIGTERM before anything else, so an early stop is not lost.
    let stop = Arc::new(AtomicBool::new(false));
    let mut sigterm = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            log("ERROR", &format!("cannot listen for SIGTERM: {e}"));
            return EXIT_SETUP;
        }
    };
    let env = match read_env(get) {
        Ok(env) => env,
        Err(e) => {
            log("ERROR", &format!("bad environment: {e}"));
            return EXIT_SETUP;
        }
    };
    let http = match crate::bridge::http_client(get).await {
        Ok(http) => http,
        Err(e) => {
            log("ERROR", &format!("no way to the platform: {e}"));
            return EXIT_SETUP;
        }
    };
    let boot = match take_bootstrap(&http, &env.bootstrap).await {
        Ok(Taken::Mine(b)) => *b,
        Ok(Taken::Gone) => {
            log(
                "INFO",
                &format!(
                    "no bootstrap for nonce {} task {}: a duplicate execution, exiting",
                    env.nonce, env.task
                ),
            );
            return exit::SUCCESS;
        }
        Err(e) => {
            log("ERROR", &e);
            return EXIT_SETUP;
        }
    };
    let key = match AttemptKey::from_hex(&boot.event_key) {
        Ok(k) => k,
        Err(e) => {
            log("ERROR", &format!("bad event key: {e}"));
            return EXIT_SETUP;
        }
    };
    let mut events = Events {
        seq: EventSequencer::new(boot.run.clone(), boot.attempt, boot.task, key),
        clock: SystemClock,
    };
    events.emit(EventBody::Started);

    {
        let stop = stop.clone();
        let timeout = Duration::from_secs(u64::from(boot.timeout_s));
        tokio::spawn(async move {
            tokio::select! {
                _ = sigterm.recv() => log("INFO", "SIGTERM: asking the method to stop"),
                _ = tokio::time::sleep(timeout) => log("INFO", "the run's timeout passed: asking the method to stop"),
            }
            stop.store(true, Ordering::SeqCst);
        });
    }

    if boot.method == crate::probe::PROBE_METHOD {
        return probes(&http, &boot, events).await;
    }
    if let Some(reuse) = &boot.reuse {
        match reuse_results(&http, &boot, reuse, &mut events).await {
            Ok(true) => return exit::SUCCESS,
            Ok(false) => log("INFO", &format!("the results of {} are gone: running the method", reuse.from)),
            Err(e) => {
                log("ERROR", &e);
                return EXIT_SETUP;
            }
        }
    }
    let dataset = match fetch(&http, &boot.dataset_url, "dataset").await {
        Ok(Some(d)) => d,
        Ok(None) => {
            events.emit(EventBody::Error { message: "the dataset no longer exists".to_owned() });
            return exit::METHOD_ERROR;
        }
        Err(e) => {
            log("ERROR", &e);
            return EXIT_SETUP;
        }
    };
    let resume = match &boot.resume_url {
        None => None,
        Some(url) => match fetch(&http, url, "checkpoint").await {
            Ok(bytes) => bytes,
            Err(e) => {
                log("WARNING", &format!("{e}; starting from the beginning"));
                None
            }
        },
    };
    let spec = mapi_methods::find(&boot.method);
    let python = match (&boot.plugin, spec.and_then(|s| s.python.map(|p| (s, p)))) {
        (Some(plugin), _) => Some(crate::plugin::Code::Plugin(plugin)),
        (None, Some((s, p))) => Some(crate::plugin::Code::Builtin(s, p)),
        (None, None) => None,
    };
    if let Some(code) = python {
        let task = crate::plugin::Task { http: &http, boot: &boot, code, dataset, resume, stop, get };
        return crate::plugin::run(task, &mut events).await;
    }
    let params = match spec.map(|s| mapi_methods::validate(s, &boot.params)) {
        Some(Ok(p)) => p,
        Some(Err(e)) => {
            events.emit(EventBody::Error { message: e.to_string() });
            return exit::METHOD_ERROR;
        }
        None => {
            events.emit(EventBody::Error { message: format!("unknown method `{}`", boot.method) });
            return exit::METHOD_ERROR;
        }
    };
    let mut ctx = TaskContext {
        events,
        http: http.clone(),
        rt: Handle::current(),
        checkpoint_url: boot.checkpoint_url.clone(),
        resume: resume.and_then(|b| serde_json::from_slice(&b).ok()),
        stop,
        last_progress: None,
    };
    let method = boot.method.clone();
    let joined = tokio::task::spawn_blocking(move || {
        let result = mapi_methods::run(&method, &params, &dataset, &mut ctx);
        (result, ctx)
    })
    .await;
    let (result, mut ctx) = match joined {
        Ok(x) => x,
        Err(e) => {
            log("ERROR", &format!("the method panicked: {e}"));
            return EXIT_SETUP;
        }
    };
    match result {
        Ok(outputs) => {
            let count = u32::try_from(outputs.len()).unwrap_or(u32::MAX);
            for out in outputs {
                let Some(url) = boot.outputs.get(out.name) else {
                    log("ERROR", &format!("no upload URL for output {}", out.name));
                    return EXIT_SETUP;
                };
                let size = out.bytes.len() as u64;
                let generation = match upload(&http, url, out.bytes, "application/json").await {
                    Ok(g) => g,
                    Err(e) => {
                        log("ERROR", &e);
                        return EXIT_SETUP;
                    }
                };
                ctx.events.emit(EventBody::Output { name: out.name.to_owned(), size, generation });
            }
            ctx.events.emit(EventBody::Complete { outputs: Some(count) });
            exit::SUCCESS
        }
        Err(MethodError::Input(message)) => {
            ctx.events.emit(EventBody::Error { message });
            exit::METHOD_ERROR
        }
        Err(MethodError::Stopped { checkpointed: true }) => exit::CHECKPOINTED,
        Err(MethodError::Stopped { checkpointed: false }) => exit::SIGTERM,
    }
}

/// A child of a fan-out parent that completed in an earlier attempt: the
/// results it wrote then are written again as this task's outputs, and the
/// task completes without running the method. `Ok(false)`: an earlier
/// result is gone (nothing was written; the method runs instead).
async fn reuse_results(
    http: &reqwest::Client,
    boot: &Bootstrap,
    reuse: &mapi_domain::Reuse,
    events: &mut Events,
) -> Result<bool, String> {
    let mut fetched = Vec::new();
    for (name, from) in &reuse.outputs {
        let Some(to) = boot.outputs.get(name) else { continue };
        match fetch(http, from, name).await? {
            Some(bytes) => fetched.push((name, to, bytes)),
            None => return Ok(false),
        }
    }
    let declared = mapi_methods::find(&boot.method).map(|m| m.outputs).unwrap_or_default();
    let count = u32::try_from(fetched.len()).unwrap_or(u32::MAX);
    for (name, to, bytes) in fetched {
        let media =
            declared.iter().find(|o| o.name == name).map_or("application/octet-stream", |o| o.media_type);
        let size = bytes.len() as u64;
        let generation = upload(http, to, bytes.to_vec(), media).await?;
        events.emit(EventBody::Output { name: name.clone(), size, generation });
    }
    let message = format!("took the results of {} (this child succeeded there)", reuse.from);
    events.emit(EventBody::Progress { fraction: 1.0, message });
    events.emit(EventBody::Complete { outputs: Some(count) });
    Ok(true)
}

/// The security suite's probes in place of a method (see [`crate::probe`]): their report is
/// the one output.
async fn probes(http: &reqwest::Client, boot: &Bootstrap, mut events: Events) -> i32 {
    use mapi_executor::security::{Plan, REPORT};
    let params = serde_json::Value::Object(boot.params.clone().into_iter().collect());
    let plan: Plan = match serde_json::from_value(params) {
        Ok(plan) => plan,
        Err(e) => {
            events.emit(EventBody::Error { message: format!("the probes' plan is not valid: {e}") });
            return exit::METHOD_ERROR;
        }
    };
    let seen = match tokio::task::spawn_blocking(move || crate::probe::run(&plan)).await {
        Ok(seen) => seen,
        Err(e) => {
            log("ERROR", &format!("the probes panicked: {e}"));
            return EXIT_SETUP;
        }
    };
    let (Some(url), Ok(bytes)) = (boot.outputs.get(REPORT), serde_json::to_vec(&seen)) else {
        log("ERROR", &format!("no upload URL for {REPORT}"));
        return EXIT_SETUP;
    };
    let size = bytes.len() as u64;
    let generation = match upload(http, url, bytes, "application/json").await {
        Ok(g) => g,
        Err(e) => {
            log("ERROR", &e);
            return EXIT_SETUP;
        }
    };
    events.emit(EventBody::Output { name: REPORT.to_owned(), size, generation });
    events.emit(EventBody::Complete { outputs: Some(1) });
    exit::SUCCESS
}
