//! The local stand-in for Cloud Logging's sink and the Pub/Sub push
//! subscription: reads the event lines each task printed to its stdout log
//! and POSTs each, wrapped exactly as Pub/Sub delivers a Cloud Logging
//! entry, to the platform's event endpoint.
//!
//! Delivery is at least once: a line is passed only after a 2xx; after a
//! restart the forwarder starts each unfinished log from the beginning, and
//! the endpoint drops what it has already applied. A finished execution
//! whose logs are fully delivered gets a `forwarded` marker and is skipped.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mapi_clock::Clock;
use mapi_events::pubsub;
use tokio::sync::Mutex;

use super::layout;

const FORWARDED: &str = "forwarded";
const POLL: Duration = Duration::from_millis(100);

/// Forwards event lines of every local execution under one directory.
#[derive(Clone, Debug)]
pub struct LogForwarder {
    dir: std::path::PathBuf,
    http: reqwest::Client,
    endpoint: String,
    token: String,
    subscription: String,
    clock: Arc<dyn Clock>,
    /// Bytes of each task log already delivered.
    offsets: Arc<Mutex<HashMap<(String, u32), u64>>>,
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
            offsets: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Delivers what is new in every unfinished execution; returns the
    /// number of events delivered.
    pub async fn step(&self) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return 0 };
        let mut delivered = 0;
        for entry in entries.flatten() {
            let exec = entry.path();
            if exec.join(FORWARDED).exists() || !exec.join(layout::SPEC).exists() {
                continue;
            }
            let Some(handle) = entry.file_name().to_str().map(str::to_owned) else { continue };
            let Ok(Some(spec)) = layout::read_json::<layout::ExecSpec>(&exec, layout::SPEC) else { continue };
            // Read the status before the logs: if it is there now, the logs are complete.
            let finished = exec.join(layout::STATUS).exists();
            let mut all_read = true;
            for task in 0..spec.task_count {
                match self.forward_task(&exec, &handle, &spec.job, task).await {
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
            if finished && all_read {
                let _ = std::fs::write(exec.join(FORWARDED), b"");
                let mut offsets = self.offsets.lock().await;
                offsets.retain(|(h, _), _| h != &handle);
            }
        }
        delivered
    }

    /// Delivers the complete new lines of one task's log. Returns how many
    /// events were delivered and whether the whole file has been read.
    async fn forward_task(
        &self,
        exec: &Path,
        handle: &str,
        job: &str,
        task: u32,
    ) -> Result<(usize, bool), String> {
        let path = layout::task_dir(exec, task).join("stdout.log");
        let key = (handle.to_owned(), task);
        let start = *self.offsets.lock().await.get(&key).unwrap_or(&0);
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
            self.offsets.lock().await.insert(key.clone(), offset);
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
