//! Running a Python method in a child process the supervisor watches: a
//! plugin's (code a tenant uploaded) or one of the platform's own Python
//! methods (the registry's `PythonCode`, carried by the worker: step 1 is
//! then writing them out, and their parameters are the registry's).
//!
//! 1. The package is fetched through its signed URL and its SHA-256 checked
//!    against the digest the run was admitted with before anything of it is
//!    read; then it is checked whole and only then unpacked
//!    (`mapi_plugins::package::unpack`),
//!    and the method's parameters validated against its manifest, defaults
//!    filled in, exactly as at submit.
//! 2. The supervisor makes itself non-dumpable (`PR_SET_DUMPABLE` 0): a
//!    process of the same user can then neither trace it nor read its
//!    memory, so the attempt's event key and its signed URLs stay the
//!    supervisor's. (gVisor still lets such a process read the supervisor's
//!    environment, which holds no secret, and open its stdout: what it
//!    writes there is unsigned, and ingestion refuses it.)
//! 3. The plugin runs as `python3 -I -B -u mapi_plugin_host.py` in a process
//!    group of its own, with an environment of its own (none of the
//!    supervisor's), its package as working directory, and a pipe on
//!    `MAPI_CONTROL_FD` for its reports. The helper module `mapi` writes one
//!    JSON object per line there; the supervisor checks each (finite
//!    numbers, bounded sizes, at most [`MAX_REPORTS`]) and signs what it
//!    forwards as the run's events. Plugin code never signs anything.
//! 4. What the plugin prints (stdout and stderr) is logged by the
//!    supervisor as plain log lines, each at most [`MAX_LINE`] bytes and
//!    `log_limit_bytes` (the platform's `MAPI_PLUGIN_LOG_LIMIT_BYTES`) in all: a line that looks like an event is logged
//!    as text and never reaches the events' stdout.
//! 5. At the stop (SIGTERM, the run's timeout) the group is sent SIGTERM,
//!    then SIGKILL after [`GRACE`]. When the plugin exits, what is left of
//!    its group is killed.
//! 6. Checkpoints: the method writes its checkpoint to `MAPI_CHECKPOINT`
//!    (whole, by rename) and reports `{"checkpoint": …}`; the supervisor
//!    reads the file (a regular file, at most [`MAX_CHECKPOINT`] bytes) and
//!    uploads it through the attempt's checkpoint URL while the method goes
//!    on (reports that arrive meanwhile are folded into one next upload),
//!    and signs a `checkpoint` event for each upload. The checkpoint an
//!    earlier attempt left is at `MAPI_RESUME`. A method stopped at the
//!    platform's request that exits 16 with every checkpoint it reported
//!    uploaded ends the task with exit 16 (checkpoints flushed).
//! 7. Exit 0: every output the manifest declares must be in the output
//!    directory; each is uploaded through its create-only URL. A missing
//!    output, a non-zero exit or a signal fails the run with an `error`
//!    event naming it.

use std::io::{BufRead, BufReader, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mapi_domain::{Bootstrap, PluginBoot, exit};
use mapi_events::EventBody;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use crate::supervisor::{EXIT_SETUP, Events, fetch, log, upload};

use crate::python::{HELPER, HOST, PYTHON};

/// How much a platform method's printing is logged in all (a plugin's limit is the platform's
/// `MAPI_PLUGIN_LOG_LIMIT_BYTES`).
const BUILTIN_LOG_LIMIT: u64 = 4 << 20;

/// The longest line of the plugin's output logged; the rest of a longer
/// line is cut.
pub const MAX_LINE: usize = 8 << 10;
/// The most reports a plugin may send; the rest are dropped (logged once).
pub const MAX_REPORTS: u64 = 10_000;
/// How long the supervisor reads what is left in the plugin's pipes after it exited.
const DRAIN: Duration = Duration::from_secs(2);
/// How long the plugin has to exit after SIGTERM before SIGKILL.
pub const GRACE: Duration = Duration::from_secs(10);
/// The largest checkpoint uploaded; a larger one is logged and left out.
pub const MAX_CHECKPOINT: u64 = 1 << 30;
/// How long the supervisor waits, after the method exited, for its last checkpoint's upload.
const LAST_UPLOAD: Duration = Duration::from_secs(60);

/// A task of a Python method's run, as the supervisor hands it over.
pub(crate) struct Task<'a> {
    pub http: &'a reqwest::Client,
    pub boot: &'a Bootstrap,
    pub code: Code<'a>,
    pub dataset: Bytes,
    /// The checkpoint an earlier attempt flushed.
    pub resume: Option<Bytes>,
    pub stop: Arc<AtomicBool>,
    pub get: &'a dyn Fn(&str) -> Option<String>,
}

/// Whose Python a task runs.
pub(crate) enum Code<'a> {
    /// A plugin's method, from its package.
    Plugin(&'a PluginBoot),
    /// One of the platform's own Python methods.
    Builtin(&'static mapi_methods::MethodSpec, mapi_methods::PythonCode),
}

impl Code<'_> {
    /// What the run's error calls the code.
    fn who(&self) -> &'static str {
        match self {
            Code::Plugin(_) => "the plugin",
            Code::Builtin(..) => "the method",
        }
    }

    fn log_limit(&self) -> u64 {
        match self {
            Code::Plugin(p) => p.log_limit_bytes,
            Code::Builtin(..) => BUILTIN_LOG_LIMIT,
        }
    }
}

/// Why the plugin could not be run: the run fails with `message` as its
/// error (`Method`), or the task ends as a setup failure (`Setup`, retried
/// as infrastructure).
enum Failed {
    Method(String),
    Setup(String),
}

/// Runs the plugin method of `task`; the task's exit code.
pub(crate) async fn run(task: Task<'_>, events: &mut Events) -> i32 {
    let dir = match tempfile::Builder::new().prefix("mapi-plugin-").tempdir() {
        Ok(d) => d,
        Err(e) => {
            log("ERROR", &format!("no room for the plugin: {e}"));
            return EXIT_SETUP;
        }
    };
    let prepared = match prepare(&task, dir.path()).await {
        Ok(p) => p,
        Err(Failed::Method(message)) => {
            events.emit(EventBody::Error { message });
            return exit::METHOD_ERROR;
        }
        Err(Failed::Setup(why)) => {
            log("ERROR", &why);
            return EXIT_SETUP;
        }
    };
    // Before any tenant code starts: nothing of this process is readable by it.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        log("ERROR", &format!("cannot make the supervisor non-dumpable ({e}): plugin code is not run"));
        return EXIT_SETUP;
    }
    let finished = match supervise(&task, &prepared, events).await {
        Ok(f) => f,
        Err(why) => {
            log("ERROR", &why);
            return EXIT_SETUP;
        }
    };
    conclude(&task, &prepared, finished, events).await
}

/// What the plugin runs with, on disk.
struct Prepared {
    root: PathBuf,
    /// The declared outputs, by name.
    outputs: Vec<String>,
    entry: String,
}

/// Fetches and checks the package, unpacks it, writes the helper, the
/// dataset and the validated parameters.
async fn prepare(task: &Task<'_>, root: &Path) -> Result<Prepared, Failed> {
    let io = |what: &str, e: std::io::Error| Failed::Setup(format!("{what}: {e}"));
    let code = root.join("plugin");
    for d in
        [&code, &root.join("platform"), &root.join("out"), &root.join("config"), &root.join("checkpoint")]
    {
        std::fs::create_dir_all(d).map_err(|e| io("making the method's directories", e))?;
    }
    let (params, outputs, entry) = match task.code {
        Code::Plugin(plugin) => unpack_plugin(task, plugin, &code).await?,
        Code::Builtin(spec, python) => {
            crate::python::write_methods(&code).map_err(|e| io("writing the methods", e))?;
            let params = mapi_methods::validate(spec, &task.boot.params)
                .map_err(|e| Failed::Method(e.to_string()))?
                .into_map();
            let outputs = spec.outputs.iter().map(|o| o.name.to_owned()).collect();
            (params, outputs, python.entry.to_owned())
        }
    };
    std::fs::write(root.join("platform/mapi.py"), HELPER).map_err(|e| io("writing the helper", e))?;
    std::fs::write(root.join("platform/mapi_plugin_host.py"), HOST).map_err(|e| io("writing the host", e))?;
    std::fs::write(root.join("dataset.csv"), &task.dataset).map_err(|e| io("writing the dataset", e))?;
    if let Some(resume) = &task.resume {
        std::fs::write(root.join("resume"), resume).map_err(|e| io("writing the checkpoint to resume", e))?;
    }
    let params = serde_json::to_vec(&params).map_err(|e| Failed::Setup(e.to_string()))?;
    std::fs::write(root.join("params.json"), params).map_err(|e| io("writing the parameters", e))?;
    Ok(Prepared { root: root.to_owned(), outputs, entry })
}

/// Fetches the plugin's package, checks its digest and the package, unpacks
/// it into `code`: the method's validated parameters, its outputs and entry point.
async fn unpack_plugin(
    task: &Task<'_>,
    plugin: &PluginBoot,
    code: &Path,
) -> Result<(std::collections::BTreeMap<String, Value>, Vec<String>, String), Failed> {
    let package = match fetch(task.http, &plugin.package_url, "plugin package").await {
        Ok(Some(p)) => p,
        Ok(None) => return Err(Failed::Method("the plugin's package no longer exists".to_owned())),
        Err(e) => return Err(Failed::Setup(e)),
    };
    let digest = hex::encode(Sha256::digest(&package));
    if digest != plugin.sha256 {
        return Err(Failed::Method(format!(
            "the plugin's package has SHA-256 {digest}, not the {} it was published with: it was not run",
            plugin.sha256
        )));
    }
    let checked = mapi_plugins::package::unpack(&package, code)
        .map_err(|e| Failed::Method(format!("the plugin's package does not unpack: {e}")))?;
    let Some(method) = checked.manifest.method(&plugin.method) else {
        return Err(Failed::Method(format!("the plugin has no method {}", plugin.method)));
    };
    let params = mapi_methods::validate_with(&task.boot.method, &method.params, &task.boot.params)
        .map_err(|e| Failed::Method(e.to_string()))?;
    Ok((params.into_map(), method.outputs.clone(), method.entry.clone()))
}

/// How the plugin ended.
struct Finished {
    status: std::process::ExitStatus,
    /// The supervisor stopped it (SIGTERM, the timeout).
    stopped: bool,
    /// The error it reported, if it did.
    error: Option<String>,
    /// It reported checkpoints and the last one reported was uploaded.
    flushed: bool,
}

/// One report of the plugin, checked.
#[derive(Debug, PartialEq)]
enum Report {
    Progress {
        fraction: f64,
        message: String,
    },
    Metric {
        name: String,
        value: f64,
    },
    /// The checkpoint file is written (whole) and should be uploaded.
    Checkpoint,
    Error(String),
}

/// Reads one control line; `Err` says why it is not a report.
fn report(line: &str) -> Result<Report, String> {
    let v: Value = serde_json::from_str(line).map_err(|_| "not a JSON object".to_owned())?;
    let text = |v: &Value, max: usize| v.as_str().map(|s| s.chars().take(max).collect::<String>());
    let finite = |v: &Value| v.as_f64().filter(|x| x.is_finite());
    if let Some(p) = v.get("progress") {
        let fraction = finite(&p["fraction"]).filter(|f| (0.0..=1.0).contains(f));
        let fraction = fraction.ok_or("progress needs a fraction between 0 and 1")?;
        return Ok(Report::Progress { fraction, message: text(&p["message"], 500).unwrap_or_default() });
    }
    if let Some(m) = v.get("metric") {
        let name = text(&m["name"], 200).filter(|n| !n.is_empty()).ok_or("a metric needs a name")?;
        let value = finite(&m["value"]).ok_or("a metric needs a finite value")?;
        return Ok(Report::Metric { name, value });
    }
    if v.get("checkpoint").is_some() {
        return Ok(Report::Checkpoint);
    }
    if let Some(e) = v.get("error") {
        return Ok(Report::Error(
            text(&e["message"], 2000).unwrap_or_else(|| "the plugin failed".to_owned()),
        ));
    }
    Err("neither progress, metric, checkpoint nor error".to_owned())
}

/// Starts the plugin and relays its reports until it exits.
async fn supervise(task: &Task<'_>, p: &Prepared, events: &mut Events) -> Result<Finished, String> {
    let (control_read, control_write) = nix::unistd::pipe().map_err(|e| format!("control pipe: {e}"))?;
    // The read end stays the supervisor's alone.
    nix::fcntl::fcntl(&control_read, nix::fcntl::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))
        .map_err(|e| format!("control pipe: {e}"))?;
    let python = (task.get)("MAPI_PYTHON").filter(|v| !v.is_empty()).unwrap_or_else(|| PYTHON.to_owned());
    let root = &p.root;
    let mut child = Command::new(&python)
        .args(["-I", "-B", "-u"])
        .arg(root.join("platform/mapi_plugin_host.py"))
        .current_dir(root.join("plugin"))
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", root)
        .env("LANG", "C.UTF-8")
        .env("MAPI_ENTRY", &p.entry)
        .env("MAPI_PARAMS", root.join("params.json"))
        .env("MAPI_DATASET", root.join("dataset.csv"))
        .env("MAPI_OUTPUT_DIR", root.join("out"))
        .env("MAPI_OUTPUTS", p.outputs.join(","))
        .env("MAPI_TASK_INDEX", (task.get)("CLOUD_RUN_TASK_INDEX").unwrap_or_else(|| "0".to_owned()))
        .env("MAPI_TASK_COUNT", (task.get)("CLOUD_RUN_TASK_COUNT").unwrap_or_else(|| "1".to_owned()))
        .env("MPLCONFIGDIR", root.join("config"))
        .env("MAPI_CONTROL_FD", control_write.as_raw_fd().to_string())
        .env("MAPI_CHECKPOINT", root.join("checkpoint/state"))
        .env("MAPI_RESUME", if task.resume.is_some() { root.join("resume") } else { PathBuf::new() })
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start {python}: {e}"))?;
    drop(control_write);
    let group = Pid::from_raw(i32::try_from(child.id()).map_err(|e| e.to_string())?);
    let logged = Arc::new(AtomicU64::new(0));
    let limit = task.code.log_limit();
    let readers: Vec<_> = [
        child.stdout.take().map(|o| Box::new(o) as Box<dyn Read + Send>),
        child.stderr.take().map(|e| Box::new(e) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|out| {
        let logged = logged.clone();
        std::thread::spawn(move || relay_output(out, &logged, limit))
    })
    .collect();
    let (tx, mut rx) = mpsc::channel::<String>(64);
    std::thread::spawn(move || read_control(control_read, &tx));
    let (done_tx, mut done) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(child.wait());
    });

    let mut relay = Relay::default();
    let mut uploads = Uploads::new(task, root);
    let mut stopping: Option<Instant> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let status = loop {
        uploads.start(relay.checkpoints);
        tokio::select! {
            status = &mut done => break status,
            Some(line) = rx.recv() => relay.take(&line, events),
            Some(done) = uploads.next() => uploads.finished(done, events),
            _ = tick.tick() => stop_if_asked(task, group, &mut stopping),
        }
    };
    let status = status.map_err(|_| "lost the plugin's process".to_owned())?;
    let status = status.map_err(|e| format!("waiting for the plugin: {e}"))?;
    // Whatever the plugin left running in its group ends with it.
    let _ = killpg(group, Signal::SIGKILL);
    // Reports and lines still in the pipes (written just before the exit): read to their end,
    // unless a process that left the group holds them open.
    let until = tokio::time::Instant::now() + DRAIN;
    while let Ok(Some(line)) = tokio::time::timeout_at(until, rx.recv()).await {
        relay.take(&line, events);
    }
    let flushed = uploads.flush(relay.checkpoints, events).await;
    let joined = tokio::task::spawn_blocking(move || readers.into_iter().for_each(|r| drop(r.join())));
    let _ = tokio::time::timeout_at(until, joined).await;
    let dropped = logged.load(Ordering::SeqCst).saturating_sub(limit);
    if dropped > 0 {
        log(
            "WARNING",
            &format!("the plugin printed {dropped} bytes past the log limit of {limit}: they were dropped"),
        );
    }
    Ok(Finished { status, stopped: stopping.is_some(), error: relay.error, flushed })
}

/// The plugin's reports so far, relayed as events.
#[derive(Default)]
struct Relay {
    error: Option<String>,
    reports: u64,
    last_progress: Option<Instant>,
    /// The checkpoints reported so far.
    checkpoints: u64,
}

impl Relay {
    /// Checks one control line and signs what it reports, at most [`MAX_REPORTS`] in all.
    fn take(&mut self, line: &str, events: &mut Events) {
        self.reports += 1;
        if self.reports > MAX_REPORTS {
            if self.reports == MAX_REPORTS + 1 {
                log(
                    "WARNING",
                    &format!("the plugin sent more than {MAX_REPORTS} reports: the rest are dropped"),
                );
            }
            return;
        }
        match report(line) {
            Ok(Report::Progress { fraction, message }) => {
                // At most five progress events a second; the last word (1.0) always.
                let due = self.last_progress.is_none_or(|t| t.elapsed() >= Duration::from_millis(200));
                if due || fraction >= 1.0 {
                    self.last_progress = Some(Instant::now());
                    events.emit(EventBody::Progress { fraction, message });
                }
            }
            Ok(Report::Metric { name, value }) => events.emit(EventBody::Metric { name, value }),
            Ok(Report::Checkpoint) => self.checkpoints += 1,
            Ok(Report::Error(message)) => self.error = Some(message),
            Err(why) => log("WARNING", &format!("a report of the plugin was ignored: {why}")),
        }
    }
}

/// The checkpoint uploads of one task: one at a time, each of the file as it
/// is when the upload starts (so reports that come meanwhile fold into the next).
struct Uploads {
    http: reqwest::Client,
    url: String,
    file: PathBuf,
    /// The upload under way, with the count of reports it covers.
    running: Option<(u64, tokio::task::JoinHandle<Result<i64, String>>)>,
    /// The count of reports the last finished upload covered.
    uploaded: u64,
}

impl Uploads {
    fn new(task: &Task<'_>, root: &Path) -> Uploads {
        Uploads {
            http: task.http.clone(),
            url: task.boot.checkpoint_url.clone(),
            file: root.join("checkpoint/state"),
            running: None,
            uploaded: 0,
        }
    }

    /// Starts an upload when reports are waiting and none is under way.
    fn start(&mut self, reported: u64) {
        if self.running.is_some() || reported <= self.uploaded {
            return;
        }
        let bytes = match std::fs::metadata(&self.file) {
            Ok(m) if m.len() > MAX_CHECKPOINT => {
                log(
                    "WARNING",
                    &format!("the checkpoint is {} bytes, over {MAX_CHECKPOINT}: not uploaded", m.len()),
                );
                self.uploaded = reported;
                return;
            }
            _ => read_output(&self.file),
        };
        let bytes = match bytes {
            Ok(b) => b,
            Err(e) => {
                log("WARNING", &format!("the reported checkpoint does not read ({e}): not uploaded"));
                self.uploaded = reported;
                return;
            }
        };
        let (http, url) = (self.http.clone(), self.url.clone());
        let upload = async move {
            crate::supervisor::put_checkpoint(&http, &url, Bytes::from(bytes), "application/octet-stream")
                .await
        };
        self.running = Some((reported, tokio::spawn(upload)));
    }

    /// The upload under way, when it ends; never, when there is none.
    async fn next(&mut self) -> Option<(u64, Result<i64, String>)> {
        let Some((covers, handle)) = self.running.as_mut() else { return std::future::pending().await };
        let result = handle.await.unwrap_or_else(|e| Err(format!("the checkpoint upload panicked: {e}")));
        let covers = *covers;
        self.running = None;
        Some((covers, result))
    }

    /// Signs the `checkpoint` event of an upload that ended well.
    fn finished(&mut self, (covers, result): (u64, Result<i64, String>), events: &mut Events) {
        match result {
            Ok(generation) => {
                self.uploaded = covers;
                events.emit(EventBody::Checkpoint { generation });
            }
            Err(e) => {
                // The next report tries again; a stop that finds it missing is not flushed.
                log("WARNING", &e);
            }
        }
    }

    /// After the method exited: finishes the upload under way and uploads
    /// what was reported since; whether every report is uploaded.
    async fn flush(&mut self, reported: u64, events: &mut Events) -> bool {
        let until = tokio::time::Instant::now() + LAST_UPLOAD;
        for _ in 0..2 {
            self.start(reported);
            if self.running.is_none() {
                break;
            }
            match tokio::time::timeout_at(until, self.next()).await {
                Ok(Some(done)) => self.finished(done, events),
                Ok(None) => {}
                Err(_) => {
                    log("WARNING", &format!("the last checkpoint did not upload within {LAST_UPLOAD:?}"));
                    return false;
                }
            }
        }
        reported > 0 && self.uploaded >= reported
    }
}

/// At the stop (SIGTERM, the timeout): SIGTERM to the plugin's group, then SIGKILL after [`GRACE`].
fn stop_if_asked(task: &Task<'_>, group: Pid, stopping: &mut Option<Instant>) {
    if !task.stop.load(Ordering::SeqCst) {
        return;
    }
    match stopping {
        None => {
            *stopping = Some(Instant::now());
            let _ = killpg(group, Signal::SIGTERM);
        }
        Some(at) if at.elapsed() >= GRACE => {
            let _ = killpg(group, Signal::SIGKILL);
        }
        Some(_) => {}
    }
}

/// Logs what the plugin prints, line by line, as plain log lines: each cut
/// at [`MAX_LINE`] bytes, and none past `limit` bytes in all (the rest is
/// only counted in `logged`).
fn relay_output(out: Box<dyn Read + Send>, logged: &AtomicU64, limit: u64) {
    let mut reader = BufReader::new(out);
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        // Read at most MAX_LINE bytes of one line; the rest of it is skipped.
        let n = match (&mut reader).take(MAX_LINE as u64).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let cut = line.last() != Some(&b'\n');
        let mut skipped = 0u64;
        if cut {
            skipped = skip_line(&mut reader);
        }
        let before = logged.fetch_add(n as u64 + skipped, Ordering::SeqCst);
        if before >= limit {
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        let message = if cut { format!("{text} [line cut at {MAX_LINE} bytes]") } else { text.to_owned() };
        let line = serde_json::json!({ "severity": "INFO", "message": message, "component": "plugin" });
        eprintln!("{line}");
    }
}

/// Skips to the end of the current line; the bytes skipped.
fn skip_line(reader: &mut impl BufRead) -> u64 {
    let mut skipped = 0u64;
    loop {
        let (found, used) = match reader.fill_buf() {
            Ok([]) | Err(_) => return skipped,
            Ok(buf) => match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (true, i + 1),
                None => (false, buf.len()),
            },
        };
        reader.consume(used);
        skipped += used as u64;
        if found {
            return skipped;
        }
    }
}

/// Passes the plugin's control lines on, each at most [`MAX_LINE`] bytes
/// (a longer one is not a report).
fn read_control(fd: OwnedFd, tx: &mpsc::Sender<String>) {
    let mut reader = BufReader::new(std::fs::File::from(fd));
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader).take(MAX_LINE as u64).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) if line.last() != Some(&b'\n') => {
                skip_line(&mut reader);
                log("WARNING", &format!("a report of the plugin was longer than {MAX_LINE} bytes: ignored"));
            }
            Ok(_) => {
                if tx.blocking_send(String::from_utf8_lossy(&line).into_owned()).is_err() {
                    return;
                }
            }
        }
    }
}

/// An output's bytes: a regular file in the output directory itself, never
/// what a link there points to (the supervisor may read what plugin code may
/// not, such as its own open files).
fn read_output(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(code) if code == nix::errno::Errno::ELOOP as i32 => {
                std::io::Error::other("it is a link, not a file: write the file itself")
            }
            _ => e,
        })?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("it is not a regular file"));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The task's end: the outputs uploaded and `complete`, or the error.
async fn conclude(task: &Task<'_>, p: &Prepared, f: Finished, events: &mut Events) -> i32 {
    if f.stopped {
        // Stopped when asked, with its state saved: the next attempt resumes from it.
        let saved = f.status.code() == Some(exit::CHECKPOINTED) && f.flushed;
        return if saved { exit::CHECKPOINTED } else { exit::SIGTERM };
    }
    if !f.status.success() {
        let how = match (f.status.code(), f.status.signal()) {
            (Some(code), _) => format!("exited with status {code}"),
            (None, Some(sig)) => format!("was killed by signal {sig}"),
            (None, None) => "ended".to_owned(),
        };
        let who = task.code.who();
        let message = match (f.error, &task.code) {
            // The platform's methods raise ValueError for what the person can fix: its words alone.
            (Some(e), Code::Builtin(..)) => e.strip_prefix("ValueError: ").map_or(e.clone(), str::to_owned),
            (Some(e), Code::Plugin(_)) => format!("the plugin failed: {e}"),
            (None, _) => format!("{who} {how} without reporting an error (its log says more)"),
        };
        events.emit(EventBody::Error { message });
        return exit::METHOD_ERROR;
    }
    let out = p.root.join("out");
    let mut written = Vec::new();
    for name in &p.outputs {
        match read_output(&out.join(name)) {
            Ok(bytes) => written.push((name, bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let message = format!(
                    "{} exited without writing its output `{name}` (write it to ctx.output_path({name:?}))",
                    task.code.who()
                );
                events.emit(EventBody::Error { message });
                return exit::METHOD_ERROR;
            }
            Err(e) => {
                events.emit(EventBody::Error {
                    message: format!("{}'s output `{name}` does not read: {e}", task.code.who()),
                });
                return exit::METHOD_ERROR;
            }
        }
    }
    let count = u32::try_from(written.len()).unwrap_or(u32::MAX);
    for (name, bytes) in written {
        let Some(url) = task.boot.outputs.get(name.as_str()) else {
            log("ERROR", &format!("no upload URL for output {name}"));
            return EXIT_SETUP;
        };
        let size = bytes.len() as u64;
        let generation = match upload(task.http, url, bytes, mapi_plugins::media_type(name)).await {
            Ok(g) => g,
            Err(e) => {
                log("ERROR", &e);
                return EXIT_SETUP;
            }
        };
        events.emit(EventBody::Output { name: name.clone(), size, generation });
    }
    events.emit(EventBody::Complete { outputs: Some(count) });
    exit::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_checked_before_they_are_signed() {
        assert_eq!(
            report(r#"{"progress":{"fraction":0.5,"message":"half"}}"#),
            Ok(Report::Progress { fraction: 0.5, message: "half".into() })
        );
        assert_eq!(
            report(r#"{"metric":{"name":"auc","value":0.9}}"#),
            Ok(Report::Metric { name: "auc".into(), value: 0.9 })
        );
        assert_eq!(report(r#"{"error":{"message":"bad"}}"#), Ok(Report::Error("bad".into())));
        assert_eq!(report(r#"{"checkpoint":{"n":3}}"#), Ok(Report::Checkpoint));
        for bad in [
            r#"{"progress":{"fraction":2}}"#,
            r#"{"progress":{"fraction":"x"}}"#,
            r#"{"metric":{"name":"","value":1}}"#,
            r#"{"metric":{"name":"x","value":null}}"#,
            r#"{"mapi_event":{"v":1}}"#,
            "not json",
        ] {
            assert!(report(bad).is_err(), "{bad}");
        }
        let long = format!(r#"{{"metric":{{"name":"{}","value":1}}}}"#, "n".repeat(1000));
        assert!(matches!(report(&long), Ok(Report::Metric { name, .. }) if name.len() == 200));
    }

    #[test]
    fn an_output_is_a_regular_file_never_a_link() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("real.json"), b"{}").expect("write");
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("link.json")).expect("link");
        std::fs::create_dir(dir.path().join("dir.json")).expect("dir");
        assert_eq!(read_output(&dir.path().join("real.json")).expect("a file"), b"{}");
        let link = read_output(&dir.path().join("link.json")).expect_err("a link");
        assert!(link.to_string().contains("a link"), "{link}");
        assert!(read_output(&dir.path().join("dir.json")).is_err(), "a directory");
        let missing = read_output(&dir.path().join("none.json")).expect_err("missing");
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn output_lines_are_cut_and_counted() {
        let text = format!("short\n{}\nafter\n", "x".repeat(MAX_LINE * 2));
        let logged = AtomicU64::new(0);
        relay_output(Box::new(std::io::Cursor::new(text.clone().into_bytes())), &logged, 10);
        assert_eq!(logged.load(Ordering::SeqCst), text.len() as u64, "every byte is counted");
        let mut r = BufReader::new(std::io::Cursor::new(b"abc\ndef".to_vec()));
        assert_eq!(skip_line(&mut r), 4);
        assert_eq!(skip_line(&mut r), 3);
    }
}
