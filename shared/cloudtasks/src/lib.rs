//! The Cloud Tasks adapter of the [`TaskQueue`] port, through Google's
//! `google-cloud-tasks-v2` client (REST/JSON).
//!
//! Each task becomes a Cloud Tasks HTTP task: `POST {target}{path}` with the
//! JSON body, an OIDC token minted by Cloud Tasks for the configured service
//! account and audience, the queue's dispatch deadline, and the schedule
//! time. Queues themselves (rate, concurrency, retry policy) are created by
//! the deployment; the adapter only needs their names and dispatch deadlines.
//!
//! Errors map to the port: HTTP 409 `ALREADY_EXISTS` is
//! [`QueueError::AlreadyExists`], 404 on delete is `NotFound`, 400 is
//! `InvalidArgument`, 429 and 5xx and transport failures are `Unavailable`.
//! A create is retried (a few times, quickly) when the service was
//! unavailable or its answer was lost; a 409 on such a retry means the
//! first try did create the task, and is success. Callers still treat a
//! first-try `AlreadyExists` on a deterministic name as success: the work
//! was enqueued before.
//!
//! Cloud Tasks deduplicates names only for about an hour after a task ran
//! or was deleted; handlers must be idempotent on their own.
//!
//! Selected with `MAPI_QUEUE=cloudtasks`; the project, location, service
//! account and audience are the `MAPI_CLOUDTASKS_*` variables. Each queue has
//! its own target, the URL of the service that serves its route
//! (`mapi_platform::QUEUE_ROUTES`), the task's path appended; a task for a
//! queue without one is refused. Every delivery carries the one audience,
//! and the routes the tasks reach accept the ID token Cloud Tasks mints for
//! that service account and audience (`mapi_identity`). v2 has no
//! queue statistics, so a queue's depth is counted by listing its tasks.
//!
//! Tested against `FakeCloudTasks` (in `mapi-tests`, the v2 REST API on
//! 127.0.0.1 with 409s, seeded 429s, lost answers and doubled deliveries)
//! with the queue conformance suite, and with an item job end to end.

pub mod settings;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use google_cloud_tasks_v2::client::CloudTasks;
use google_cloud_tasks_v2::model::{HttpMethod, HttpRequest, OidcToken, Task};
use mapi_clock::Clock;
use mapi_domain::Timestamp;
use mapi_queue::{NewTask, QueueConfig, QueueError, QueueName, TaskInfo, TaskName, TaskQueue};

/// How many times a create is tried when the service is unavailable.
const CREATE_TRIES: u32 = 4;

/// Where the tasks go and who they are from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub project: String,
    pub location: String,
    /// Each queue's base URL (the URL of the service that serves its
    /// route), by queue name; a task's path is appended.
    pub targets: BTreeMap<String, String>,
    /// The service account whose OIDC token each delivery carries.
    pub service_account_email: String,
    /// The token's audience, the same for every queue.
    pub audience: String,
    /// Another endpoint than `https://cloudtasks.googleapis.com` (a fake).
    pub endpoint: Option<String>,
    /// The queues the deployment created, with their dispatch deadlines.
    pub queues: Vec<QueueConfig>,
}

/// How the client authenticates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// Application Default Credentials (the service's own account on Cloud Run).
    ApplicationDefault,
    /// No credentials: only for a local fake.
    Anonymous,
}

/// The adapter. Cheap to clone.
#[derive(Clone)]
pub struct CloudTasksQueue {
    inner: Arc<Inner>,
}

struct Inner {
    client: CloudTasks,
    settings: Settings,
    queues: BTreeMap<String, QueueConfig>,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for CloudTasksQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CloudTasksQueue")
            .field("project", &self.inner.settings.project)
            .field("location", &self.inner.settings.location)
            .field("targets", &self.inner.settings.targets)
            .finish_non_exhaustive()
    }
}

fn to_wkt_time(t: Timestamp) -> google_cloud_wkt::Timestamp {
    let us = t.as_micros();
    let nanos = i32::try_from(us.rem_euclid(1_000_000) * 1000).unwrap_or(0);
    google_cloud_wkt::Timestamp::clamp(us.div_euclid(1_000_000), nanos)
}

fn from_wkt_time(t: &google_cloud_wkt::Timestamp) -> Timestamp {
    Timestamp::from_micros(t.seconds() * 1_000_000 + i64::from(t.nanos()) / 1000)
}

fn to_wkt_duration(d: Duration) -> google_cloud_wkt::Duration {
    let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    google_cloud_wkt::Duration::clamp(secs, i32::try_from(d.subsec_nanos()).unwrap_or(0))
}

/// The port's error for a client error.
fn map_error(e: &google_cloud_tasks_v2::Error, name: Option<&TaskName>) -> QueueError {
    match (e.http_status_code(), name) {
        (Some(409), Some(n)) => QueueError::AlreadyExists(n.clone()),
        (Some(404), Some(n)) => QueueError::NotFound(n.clone()),
        (Some(400 | 404), _) => QueueError::InvalidArgument(e.to_string()),
        (Some(429), _) => QueueError::Unavailable(format!("Cloud Tasks throttled the request: {e}").into()),
        (Some(s), _) if s >= 500 => QueueError::Unavailable(e.to_string().into()),
        (None, _) => QueueError::Unavailable(format!("no answer from Cloud Tasks: {e}").into()),
        _ => QueueError::Internal(e.to_string().into()),
    }
}

impl CloudTasksQueue {
    pub async fn new(
        settings: Settings,
        credentials: Credentials,
        clock: Arc<dyn Clock>,
    ) -> Result<CloudTasksQueue, QueueError> {
        let mut queues = BTreeMap::new();
        for q in &settings.queues {
            q.validate()?;
            queues.insert(q.name.as_str().to_owned(), q.clone());
        }
        let mut b = CloudTasks::builder().with_retry_policy(google_cloud_gax::retry_policy::NeverRetry);
        if let Some(e) = &settings.endpoint {
            b = b.with_endpoint(e.clone());
        }
        if credentials == Credentials::Anonymous {
            b = b.with_credentials(google_cloud_auth::credentials::anonymous::Builder::new().build());
        }
        let client = b.build().await.map_err(|e| {
            QueueError::Internal(mapi_domain::Cause::new("cannot build the Cloud Tasks client", e))
        })?;
        Ok(CloudTasksQueue { inner: Arc::new(Inner { client, settings, queues, clock }) })
    }

    fn config(&self, queue: &QueueName) -> Result<&QueueConfig, QueueError> {
        self.inner
            .queues
            .get(queue.as_str())
            .ok_or_else(|| QueueError::InvalidArgument(format!("unknown queue `{queue}`")))
    }

    fn queue_path(&self, queue: &QueueName) -> String {
        let s = &self.inner.settings;
        format!("projects/{}/locations/{}/queues/{queue}", s.project, s.location)
    }

    fn task(&self, task: &NewTask, cfg: &QueueConfig) -> Result<Task, QueueError> {
        let s = &self.inner.settings;
        let target = s.targets.get(task.queue.as_str()).ok_or_else(|| {
            QueueError::InvalidArgument(format!("queue `{}` has no target service", task.queue))
        })?;
        let url = format!("{}{}", target.trim_end_matches('/'), task.path);
        let audience = s.audience.clone();
        let mut t = Task::new()
            .set_http_request(
                HttpRequest::new()
                    .set_url(url)
                    .set_http_method(HttpMethod::Post)
                    .set_headers([("Content-Type", "application/json")])
                    .set_body(task.body.clone())
                    .set_oidc_token(
                        OidcToken::new()
                            .set_service_account_email(s.service_account_email.clone())
                            .set_audience(audience),
                    ),
            )
            .set_dispatch_deadline(to_wkt_duration(cfg.dispatch_deadline));
        if let Some(name) = &task.name {
            t = t.set_name(format!("{}/tasks/{name}", self.queue_path(&task.queue)));
        }
        if let Some(at) = task.schedule_time {
            t = t.set_schedule_time(to_wkt_time(at));
        }
        Ok(t)
    }
}

/// The task id at the end of a full task name.
fn short_name(full: &str) -> Result<TaskName, QueueError> {
    TaskName::new(full.rsplit('/').next().unwrap_or(full)).map_err(|e| {
        QueueError::Internal(mapi_domain::Cause::new("Cloud Tasks answered a task name we cannot use", e))
    })
}

#[async_trait]
impl TaskQueue for CloudTasksQueue {
    async fn create(&self, task: NewTask) -> Result<TaskInfo, QueueError> {
        let cfg = self.config(&task.queue)?;
        let now = self.inner.clock.now();
        task.validate(now)?;
        let request = self.task(&task, cfg)?;
        let parent = self.queue_path(&task.queue);
        let mut last = None;
        for attempt in 1..=CREATE_TRIES {
            match self
                .inner
                .client
                .create_task()
                .set_parent(parent.clone())
                .set_task(request.clone())
                .send()
                .await
            {
                Ok(created) => {
                    return Ok(TaskInfo {
                        name: short_name(&created.name)?,
                        queue: task.queue,
                        schedule_time: created
                            .schedule_time
                            .as_ref()
                            .map_or(task.schedule_time.unwrap_or(now), from_wkt_time),
                        created: created.create_time.as_ref().map_or(now, from_wkt_time),
                    });
                }
                // A 404 on create names the queue, not the task.
                Err(e) if e.http_status_code() == Some(404) => {
                    return Err(QueueError::InvalidArgument(format!(
                        "Cloud Tasks has no queue {parent}: create it (terraform applies the queues) before starting: {e}"
                    )));
                }
                Err(e) => match map_error(&e, task.name.as_ref()) {
                    // A retry finds what its lost first try created.
                    QueueError::AlreadyExists(name) if attempt > 1 => {
                        tracing::debug!(task = %name, "a retried create found its task: the first answer was lost");
                        return Ok(TaskInfo {
                            name,
                            queue: task.queue,
                            schedule_time: task.schedule_time.unwrap_or(now),
                            created: now,
                        });
                    }
                    e @ QueueError::Unavailable(_) if task.name.is_some() => {
                        tracing::debug!(attempt, error = %e, "Cloud Tasks create failed; retrying");
                        last = Some(e);
                        let clock = &self.inner.clock;
                        clock.sleep_until(clock.now() + Duration::from_millis(50 << attempt)).await;
                    }
                    e => return Err(e),
                },
            }
        }
        Err(last.unwrap_or_else(|| QueueError::Unavailable("Cloud Tasks create failed".into())))
    }

    async fn delete(&self, queue: &QueueName, name: &TaskName) -> Result<(), QueueError> {
        self.config(queue)?;
        let full = format!("{}/tasks/{name}", self.queue_path(queue));
        match self.inner.client.delete_task().set_name(full).send().await {
            Ok(_) => Ok(()),
            Err(e) => Err(map_error(&e, Some(name))),
        }
    }

    /// Cloud Tasks v2 reports no queue depth: the tasks are listed and counted.
    async fn depth(&self, queue: &QueueName) -> Result<u64, QueueError> {
        self.config(queue)?;
        let parent = self.queue_path(queue);
        let mut count = 0u64;
        let mut token = String::new();
        loop {
            let page = self
                .inner
                .client
                .list_tasks()
                .set_parent(parent.clone())
                .set_page_size(1000)
                .set_page_token(token.clone())
                .send()
                .await
                .map_err(|e| map_error(&e, None))?;
            count += page.tasks.len() as u64;
            if page.next_page_token.is_empty() {
                return Ok(count);
            }
            token = page.next_page_token;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_convert_both_ways() {
        let t = Timestamp::from_micros(1_800_000_000_123_456);
        assert_eq!(from_wkt_time(&to_wkt_time(t)), t);
        let d = to_wkt_duration(Duration::from_millis(30_500));
        assert_eq!((d.seconds(), d.nanos()), (30, 500_000_000));
    }
}
