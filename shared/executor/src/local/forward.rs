//! The local stand-in for Cloud Logging's sink and the Pub/Sub push
//! subscription: reads the event lines each task printed to its stdout log
//! and POSTs each, wrapped exactly as Pub/Sub delivers a Cloud Logging
//! entry, to the platform's event endpoint.
//!
//! Delivery is at least once: a line is passed only after a 2xx; after a
//! restart the forwarder starts each unfinished log from the beginning, and
//! the endpoint drops what it has already applied. A finished execution
//! whose logs are fully delivered gets a `forwarded` marker.
//!
//! A poll costs what is open, not what ever ran: the forwarder keeps in
//! memory the handles it still forwards (`open`) and those it finished
//! (`done`, seeded from the markers when it first lists the directory). The
//! directory holds every execution of the run retention (days of them), so
//! listing it is the one cost that grows with history. A forwarder told of
//! new executions by the executor of its process ([`NewExecutions`]) lists
//! it only at start and every [`RELIST`]; one that is not lists it again
//! whenever its modification time changed (an execution was made or
//! forgotten) or [`RELIST`] passed (for file systems with coarse
//! timestamps). A `done` execution is never read again by this forwarder;
//! one that disappears (forgotten) drops out of both sets at the next
//! listing.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use mapi_clock::Clock;
use mapi_domain::Timestamp;
use mapi_events::pubsub;
use tokio::sync::Mutex;

use super::layout;

/// The marker a fully forwarded execution gets (the executor forgets only such an execution).
pub const FORWARDED: &str = "forwarded";
const POLL: Duration = Duration::from_millis(100);
/// The longest the forwarder trusts an unchanged modification time of the
/// executions directory before it lists it again.
pub const RELIST: Duration = Duration::from_secs(30);

/// The handles of executions made since a forwarder last looked, told by
/// the executor that made them. Cheap to clone; clones share the list.
/// Kept only once a forwarder listens ([`LogForwarder::told_by`]): an
/// executor with no forwarder in its process keeps nothing.
#[derive(Clone, Debug, Default)]
pub struct NewExecutions(Arc<std::sync::Mutex<Option<Vec<String>>>>);

impl NewExecutions {
    /// Tells of one execution, once its spec is written.
    pub fn tell(&self, handle: &str) {
        if let Some(made) = self.0.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            made.push(handle.to_owned());
        }
    }

    fn listen(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(Vec::new);
    }

    fn take(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).as_mut().map(std::mem::take).unwrap_or_default()
    }
}

/// Forwards event lines of every local execution under one directory.
#[derive(Clone, Debug)]
pub struct LogForwarder {
    dir: std::path::PathBuf,
    http: reqwest::Client,
    endpoint: String,
    token: String,
    subscription: String,
    clock: Arc<dyn Clock>,
    /// Told of new executions by the executor, if it runs in this process.
    told: Option<NewExecutions>,
    /// What this forwarder knows of the directory; one step at a time holds it.
    seen: Arc<Mutex<Seen>>,
}

/// The executions the forwarder knows, by handle.
#[derive(Debug, Default)]
struct Seen {
    /// The directory's modification time at the last listing, and when that was.
    listed: Option<(SystemTime, Timestamp)>,
    /// Executions whose events are not all delivered yet (or not known to be).
    open: BTreeSet<String>,
    /// Executions fully forwarded: not read again.
    done: HashSet<String>,
    /// Bytes of each open task log already delivered.
    offsets: HashMap<(String, u32), u64>,
}

impl LogForwarder {
    /// `endpoint` is the full URL of `POST /internal/events`.
    pub fn new(
        dir: &Path,
        http: reqwest::Client,
        endpoint: String,
        token: String,
        clock: Arc<dyn Clock>,
    ) -> Self {
        LogForwarder {
            dir: dir.to_owned(),
            http,
            endpoint,
            token,
            subscription: "projects/local/subscriptions/mapi-run-events-push".to_owned(),
            clock,
            told: None,
            seen: Arc::new(Mutex::new(Seen::default())),
        }
    }

    /// Learns of new executions from `told` (the executor of this process)
    /// instead of listing the directory each time it changes.
    #[must_use]
    pub fn told_by(mut self, told: NewExecutions) -> Self {
        told.listen();
        self.told = Some(told);
        self
    }

    /// How many executions the forwarder still reads at each poll.
    pub async fn open(&self) -> usize {
        self.seen.lock().await.open.len()
    }

    /// Opens the executions told of since the last poll, or lists the
    /// directory again (at start, when [`RELIST`] passed, or, untold, when
    /// it changed): new executions become open (or done, if their marker
    /// says so), vanished ones are dropped.
    fn relist(&self, seen: &mut Seen) {
        let now = self.clock.now();
        if let (Some(told), Some((_, at))) = (&self.told, seen.listed)
            && now.since(at) < RELIST
        {
            for handle in told.take() {
                if !seen.done.contains(&handle) {
                    seen.open.insert(handle);
                }
            }
            return;
        }
        let Ok(modified) = std::fs::metadata(&self.dir).and_then(|m| m.modified()) else { return };
        if let Some((at_mtime, at)) = seen.listed
            && at_mtime == modified
            && now.since(at) < RELIST
        {
            return;
        }
        // What was told before this listing is in it.
        if let Some(told) = &self.told {
            told.take();
        }
        // The time is taken before the listing: a change during it lists again next poll.
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        let mut present = HashSet::new();
        for entry in entries.flatten() {
            let Some(handle) = entry.file_name().to_str().map(str::to_owned) else { continue };
            if !seen.done.contains(&handle) && !seen.open.contains(&handle) {
                if entry.path().join(FORWARDED).exists() {
                    seen.done.insert(handle.clone());
                } else {
                    seen.open.insert(handle.clone());
                }
            }
            present.insert(handle);
        }
        seen.done.retain(|h| present.contains(h));
        seen.open.retain(|h| present.contains(h));
        seen.offsets.retain(|(h, _), _| present.contains(h));
        seen.listed = Some((modified, now));
    }

    /// Delivers what is new in every open execution; returns the number of
    /// events delivered.
    pub async fn step(&self) -> usize {
        let mut seen = self.seen.lock().await;
        self.relist(&mut seen);
        let mut delivered = 0;
        let open: Vec<String> = seen.open.iter().cloned().collect();
        for handle in open {
            let exec = self.dir.join(&handle);
            // A directory without a spec yet is an execution being made, or not one at all.
            let Ok(Some(spec)) = layout::read_json::<layout::ExecSpec>(&exec, layout::SPEC) else { continue };
            // Read the status before the logs: if it is there now, the logs are complete.
            let finished = exec.join(layout::STATUS).exists();
            let mut all_read = true;
            for task in 0..spec.task_count {
                match self.forward_task(&mut seen.offsets, &exec, &handle, &spec.job, task).await {
                    Ok((n, at_end)) => {
                        delivered += n;
                        all_read &= at_end;
                    }
                    Err(e) => {
                        all_read = false;
                        tracing::debug!(execution = %handle, task, error = %e, "event push failed; retrying later");
                    }
                }
            }
            if finished && all_read && std::fs::write(exec.join(FORWARDED), b"").is_ok() {
                seen.open.remove(&handle);
                seen.offsets.retain(|(h, _), _| h != &handle);
                seen.done.insert(handle);
            }
        }
        delivered
    }

    /// Delivers the complete new lines of one task's log. Returns how many
    /// events were delivered and whether the whole file has been read.
    async fn forward_task(
        &self,
        offsets: &mut HashMap<(String, u32), u64>,
        exec: &Path,
        handle: &str,
        job: &str,
        task: u32,
    ) -> Result<(usize, bool), String> {
        let path = layout::task_dir(exec, task).join("stdout.log");
        let key = (handle.to_owned(), task);
        let start = *offsets.get(&key).unwrap_or(&0);
        let mut file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((0, true)),
            Err(e) => return Err(e.to_string()),
        };
        file.seek(SeekFrom::Start(start)).map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        file.read_to_end(&mut buf).map_err(|e| e.to_string())?;
        let mut offset = start;
        let mut delivered = 0;
        let mut rest = &buf[..];
        while let Some(nl) = rest.iter().position(|b| *b == b'\n') {
            let line = String::from_utf8_lossy(&rest[..nl]).into_owned();
            if let Some(payload) = event_payload(&line) {
                let insert_id = format!("{handle}-{task}-{offset}");
                let entry = pubsub::log_entry(&payload, handle, job, "local", self.clock.now(), &insert_id);
                let envelope = pubsub::envelope(&entry, &self.subscription, &insert_id, self.clock.now());
                let resp = self
                    .http
                    .post(&self.endpoint)
                    .bearer_auth(&self.token)
                    .json(&envelope)
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                if !resp.status().is_success() {
                    return Err(format!("the event endpoint answered {}", resp.status()));
                }
                delivered += 1;
            }
            offset += nl as u64 + 1;
            rest = &rest[nl + 1..];
            offsets.insert(key.clone(), offset);
        }
        Ok((delivered, rest.is_empty()))
    }

    /// Forwards until `shutdown` resolves.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            self.step().await;
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(POLL) => {}
            }
        }
    }
}

/// The whole JSON object of an event line (`{"mapi_event": …}`), if it is one.
fn event_payload(line: &str) -> Option<serde_json::Value> {
    mapi_events::parse_line(line)?;
    serde_json::from_str(line).ok()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicBool, Ordering};

    use mapi_clock::SystemClock;
    use mapi_domain::{AttemptNo, ExecutionStatus, Nonce, ResourceClass, RunId};

    use super::*;
    use crate::local::layout::{Command, ExecSpec, StatusFile};

    /// The event endpoint: keeps every envelope it accepts; answers 503 while `refuse` is set.
    #[derive(Clone, Default)]
    struct Endpoint {
        got: Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
        refuse: Arc<AtomicBool>,
    }

    impl Endpoint {
        async fn start(&self) -> String {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let url = format!("http://{}/internal/events", listener.local_addr().expect("addr"));
            let me = self.clone();
            let app = axum::Router::new().route(
                "/internal/events",
                axum::routing::post(move |axum::Json(v): axum::Json<serde_json::Value>| {
                    let me = me.clone();
                    async move {
                        if me.refuse.load(Ordering::SeqCst) {
                            return axum::http::StatusCode::SERVICE_UNAVAILABLE;
                        }
                        me.got.lock().expect("lock").push(v);
                        axum::http::StatusCode::NO_CONTENT
                    }
                }),
            );
            tokio::spawn(async move { axum::serve(listener, app).await });
            url
        }

        fn count(&self) -> usize {
            self.got.lock().expect("lock").len()
        }
    }

    fn forwarder(dir: &Path, url: &str) -> LogForwarder {
        LogForwarder::new(
            dir,
            reqwest::Client::new(),
            url.to_owned(),
            "token".to_owned(),
            Arc::new(SystemClock),
        )
    }

    /// An execution `handle` whose one task printed `events` event lines (and one other line).
    fn execution(dir: &Path, handle: &str, events: usize) -> PathBuf {
        let exec = dir.join(handle);
        std::fs::create_dir_all(layout::task_dir(&exec, 0)).expect("dirs");
        let spec = ExecSpec {
            handle: handle.to_owned(),
            job: "local-s".into(),
            run: RunId::generate(Timestamp::from_secs(1), [1; 10]),
            attempt: AttemptNo::FIRST,
            nonce: Nonce::from_bytes([1; 16]),
            class: ResourceClass::S,
            task_count: 1,
            created: Timestamp::from_secs(1),
            task_timeout_ms: 10_000,
            grace_ms: 1_000,
            memory_limit_mib: 64,
            task: Command { program: "/bin/true".into(), args: Vec::new() },
            env: BTreeMap::new(),
            sandbox: None,
        };
        layout::write_json(&exec, layout::SPEC, &spec).expect("spec");
        let mut log = String::from("not an event\n");
        for n in 0..events {
            log.push_str(&format!("{{\"mapi_event\":{{\"n\":{n}}}}}\n"));
        }
        std::fs::write(layout::task_dir(&exec, 0).join("stdout.log"), log).expect("log");
        exec
    }

    fn finish(exec: &Path) {
        let at = Timestamp::from_secs(2);
        let status =
            StatusFile { started: at, finished: at, status: ExecutionStatus::Succeeded, tasks: Vec::new() };
        layout::write_json(exec, layout::STATUS, &status).expect("status");
    }

    fn append_event(exec: &Path) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(layout::task_dir(exec, 0).join("stdout.log"))
            .expect("open");
        f.write_all(b"{\"mapi_event\":{\"n\":99}}\n").expect("append");
    }

    /// Each event is delivered once; an execution made while the forwarder runs is found; a
    /// finished, forwarded execution is dropped from what a poll reads: lines appended to its log
    /// afterwards are not read, even with its marker gone.
    #[tokio::test]
    async fn finished_executions_are_forwarded_once_and_not_read_again() {
        let dir = tempfile::tempdir().expect("dir");
        let endpoint = Endpoint::default();
        let f = forwarder(dir.path(), &endpoint.start().await);
        let running = execution(dir.path(), "exec-1-a", 2);
        assert_eq!(f.step().await, 2);
        assert_eq!(f.step().await, 0, "nothing new");
        let late = execution(dir.path(), "exec-2-b", 3);
        finish(&late);
        assert_eq!(f.step().await, 3, "an execution made while it runs is found");
        assert!(late.join(FORWARDED).exists());
        assert_eq!(f.open().await, 1, "only the running execution is still read");
        append_event(&running);
        finish(&running);
        assert_eq!(f.step().await, 1, "a running execution's new line is delivered");
        assert_eq!(f.open().await, 0);
        std::fs::remove_file(late.join(FORWARDED)).expect("unmark");
        append_event(&late);
        append_event(&running);
        for _ in 0..3 {
            assert_eq!(f.step().await, 0, "a forwarded execution is not read again");
        }
        assert_eq!(endpoint.count(), 6);
    }

    /// After a restart: executions with a marker are not read, an unfinished one is forwarded
    /// again from its start (the endpoint drops what it already applied), and a line refused
    /// by the endpoint is delivered on a later poll.
    #[tokio::test]
    async fn a_new_forwarder_skips_marked_executions_and_retries_refused_lines() {
        let dir = tempfile::tempdir().expect("dir");
        let endpoint = Endpoint::default();
        let url = endpoint.start().await;
        let done = execution(dir.path(), "exec-1-a", 2);
        finish(&done);
        let first = forwarder(dir.path(), &url);
        assert_eq!(first.step().await, 2);
        let open = execution(dir.path(), "exec-2-b", 1);
        assert_eq!(first.step().await, 1);
        drop(first);
        append_event(&done);
        let second = forwarder(dir.path(), &url);
        endpoint.refuse.store(true, Ordering::SeqCst);
        append_event(&open);
        finish(&open);
        assert_eq!(second.step().await, 0, "the endpoint refuses");
        assert!(!open.join(FORWARDED).exists(), "not marked while lines are undelivered");
        endpoint.refuse.store(false, Ordering::SeqCst);
        assert_eq!(second.step().await, 2, "the unfinished log again from its start");
        assert_eq!(second.open().await, 0);
        assert_eq!(endpoint.count(), 5, "the marked execution's appended line was never read");
    }

    /// A forwarder told of new executions reads a told one at its next poll and lists the
    /// directory only every RELIST: an execution it was not told of (made by another process)
    /// waits for that listing, however the directory changed.
    #[tokio::test]
    async fn a_told_forwarder_lists_the_directory_only_every_relist() {
        let dir = tempfile::tempdir().expect("dir");
        let endpoint = Endpoint::default();
        let clock = Arc::new(mapi_clock::VirtualClock::new(Timestamp::from_secs(1_800_000_000)));
        let told = NewExecutions::default();
        told.tell("exec-0-unheard");
        assert!(told.take().is_empty(), "nothing is kept before a forwarder listens");
        let f = LogForwarder::new(
            dir.path(),
            reqwest::Client::new(),
            endpoint.start().await,
            "token".to_owned(),
            clock.clone(),
        )
        .told_by(told.clone());
        execution(dir.path(), "exec-1-a", 1);
        assert_eq!(f.step().await, 1, "the first poll lists the directory");
        execution(dir.path(), "exec-2-b", 2);
        told.tell("exec-2-b");
        execution(dir.path(), "exec-3-c", 4);
        assert_eq!(f.step().await, 2, "the told execution, not the other");
        clock.advance(RELIST);
        assert_eq!(f.step().await, 4, "the listing after RELIST finds the other");
        assert_eq!(endpoint.count(), 7);
    }

    /// An execution removed from the directory (forgotten) drops out of what the forwarder
    /// keeps.
    #[tokio::test]
    async fn a_removed_execution_is_dropped() {
        let dir = tempfile::tempdir().expect("dir");
        let endpoint = Endpoint::default();
        let f = forwarder(dir.path(), &endpoint.start().await);
        let gone = execution(dir.path(), "exec-1-a", 1);
        assert_eq!(f.step().await, 1);
        assert_eq!(f.open().await, 1);
        std::fs::remove_dir_all(&gone).expect("remove");
        assert_eq!(f.step().await, 0);
        assert_eq!(f.open().await, 0);
        assert!(f.seen.lock().await.offsets.is_empty());
    }
}
