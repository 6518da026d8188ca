//! The TaskQueue port: named HTTP tasks with retries and deduplication,
//! shaped after Cloud Tasks so the cloud adapter is a mapping.
//!
//! A task is a POST of a JSON body to an `/internal/...` route of our own
//! services, delivered at least once, not before its schedule time. A
//! non-2xx answer, a connection error or the queue's dispatch deadline is a
//! failure, retried with Cloud Tasks' back-off ([`RetryConfig::backoff`])
//! until `max_attempts`, after which the task is dead. A task's name stays
//! reserved for the queue's dedup window after it ran, died or was deleted,
//! so a deterministic name makes fan-out idempotent.
//!
//! The embedded adapter is [`sqlite::SqliteQueue`]; its deliveries are made
//! by a separate [`sqlite::Deliverer`] that tests can step in virtual time.

mod error;
pub mod sqlite;

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
#[cfg(any(test, feature = "conformance"))]
pub mod unreliable;

use std::fmt::{self, Debug};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use mapi_domain::Timestamp;
use serde::{Deserialize, Serialize};

pub use error::QueueError;

/// The largest accepted body, Cloud Tasks' task size limit.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// How far ahead a task may be scheduled, Cloud Tasks' limit.
pub const MAX_SCHEDULE_AHEAD: Duration = Duration::from_secs(30 * 24 * 3600);

/// The prefix every task path must have: tasks call our own internal routes.
pub const INTERNAL_PREFIX: &str = "/internal/";

/// A queue's name: `[a-z0-9-]{1,100}`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct QueueName(String);

impl QueueName {
    pub fn new(name: impl Into<String>) -> Result<QueueName, QueueError> {
        let name = name.into();
        let ok = !name.is_empty()
            && name.len() <= 100
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if ok {
            Ok(QueueName(name))
        } else {
            Err(QueueError::InvalidArgument(format!("invalid queue name `{}`", truncated(&name))))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A task's name, unique within its queue: `[A-Za-z0-9_-]{1,500}`, Cloud
/// Tasks' task id rules.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TaskName(String);

impl TaskName {
    pub fn new(name: impl Into<String>) -> Result<TaskName, QueueError> {
        let name = name.into();
        let ok = !name.is_empty()
            && name.len() <= 500
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if ok {
            Ok(TaskName(name))
        } else {
            Err(QueueError::InvalidArgument(format!("invalid task name `{}`", truncated(&name))))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn truncated(s: &str) -> String {
    s.chars().take(64).collect()
}

macro_rules! name_conversions {
    ($t:ident) => {
        impl TryFrom<String> for $t {
            type Error = QueueError;

            fn try_from(s: String) -> Result<Self, QueueError> {
                $t::new(s)
            }
        }

        impl From<$t> for String {
            fn from(n: $t) -> String {
                n.0
            }
        }

        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

name_conversions!(QueueName);
name_conversions!(TaskName);

/// A task to enqueue.
#[derive(Clone, Debug, PartialEq)]
pub struct NewTask {
    pub queue: QueueName,
    /// A deterministic name deduplicates; `None` lets the queue pick a unique one.
    pub name: Option<TaskName>,
    /// The route POSTed to; must start with [`INTERNAL_PREFIX`].
    pub path: String,
    /// The JSON body, sent with `content-type: application/json`.
    pub body: Bytes,
    /// Not delivered before this; `None` means now.
    pub schedule_time: Option<Timestamp>,
}

impl NewTask {
    /// A task due now, named by the queue.
    pub fn new(queue: QueueName, path: impl Into<String>, body: impl Into<Bytes>) -> NewTask {
        NewTask { queue, name: None, path: path.into(), body: body.into(), schedule_time: None }
    }

    pub fn named(mut self, name: TaskName) -> NewTask {
        self.name = Some(name);
        self
    }

    pub fn at(mut self, schedule_time: Timestamp) -> NewTask {
        self.schedule_time = Some(schedule_time);
        self
    }

    /// Checks everything that does not need the queue's state: the path,
    /// the body, and the schedule time against `now`.
    pub fn validate(&self, now: Timestamp) -> Result<(), QueueError> {
        let path_ok = self.path.len() > INTERNAL_PREFIX.len()
            && self.path.len() <= 2048
            && self.path.starts_with(INTERNAL_PREFIX)
            && self.path.bytes().all(|b| b.is_ascii_graphic() && b != b'#');
        if !path_ok {
            return Err(QueueError::InvalidArgument(format!(
                "task path `{}` is not an internal route ({INTERNAL_PREFIX}...)",
                truncated(&self.path)
            )));
        }
        if self.body.len() > MAX_BODY_BYTES {
            return Err(QueueError::InvalidArgument(format!(
                "task body of {} bytes exceeds {MAX_BODY_BYTES}",
                self.body.len()
            )));
        }
        if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&self.body) {
            return Err(QueueError::InvalidArgument(format!("task body is not JSON: {e}")));
        }
        if let Some(t) = self.schedule_time
            && t > now + MAX_SCHEDULE_AHEAD
        {
            return Err(QueueError::InvalidArgument(format!("schedule time {t} is more than 30 days ahead")));
        }
        Ok(())
    }
}

/// What the queue knows about an enqueued task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskInfo {
    pub name: TaskName,
    pub queue: QueueName,
    pub schedule_time: Timestamp,
    pub created: Timestamp,
}

/// The TaskQueue port. A queue the adapter does not serve is an
/// `InvalidArgument` in every method.
///
/// Failure model: `AlreadyExists`, `NotFound` and `InvalidArgument` are definite answers. After
/// `Unavailable` or `Internal` from Cloud Tasks a `create` or `delete` may or may not have taken
/// effect; the SQLite adapter's errors are definite. A deterministic task name is what makes a
/// retried `create` safe: it answers `AlreadyExists` when the first one enqueued the task.
#[async_trait]
pub trait TaskQueue: Send + Sync + Debug {
    /// Enqueues a task. `AlreadyExists` if its name is pending or was used
    /// within the dedup window, even if that task ran or was deleted.
    ///
    /// # Errors
    ///
    /// - `AlreadyExists`: the name is taken; this call enqueued nothing. It cannot be told apart
    ///   from an earlier call of ours whose answer was lost, so callers that name tasks
    ///   deterministically count it as pushed (`mapi_schema::tasks`). The Cloud Tasks adapter itself
    ///   answers `Ok` when a 409 comes on its own retry of a create.
    /// - `InvalidArgument`: the task fails [`NewTask::validate`], or its queue is not served (Cloud
    ///   Tasks: not configured, without a target, or not created by the deployment), or a 400.
    /// - `Unavailable`: Cloud Tasks throttled (429), failed (5xx) or did not answer. A named task
    ///   has then been tried four times, and it is unknown whether it was enqueued: a retry with the
    ///   same name answers `Ok` or `AlreadyExists`. An unnamed task is not retried by the adapter,
    ///   and a caller's retry may enqueue it twice. SQLite: the file stayed locked; nothing was
    ///   enqueued.
    /// - `Internal`: anything else (Cloud Tasks: e.g. a 401 or 403; SQLite: a database error, after
    ///   which nothing was enqueued).
    ///
    /// Dropping the future does not withdraw the task: it may still be enqueued (SQLite writes
    /// every create waiting for the connection in one transaction).
    async fn create(&self, task: NewTask) -> Result<TaskInfo, QueueError>;

    /// Deletes a pending task; `NotFound` if there is none of that name. The
    /// name stays reserved for the dedup window.
    ///
    /// # Errors
    ///
    /// - `NotFound`: no pending task of that name: never created, delivered, dead or deleted
    ///   already. A retry after a lost answer gets it when the first call deleted the task, so a
    ///   caller that wants the task gone treats `NotFound` as done.
    /// - `InvalidArgument`: the queue is not served, or a 400. (Cloud Tasks answers a configured
    ///   queue that the deployment did not create with a 404, which is `NotFound` here.)
    /// - `Unavailable`: Cloud Tasks throttled, failed or did not answer: unknown whether the task was
    ///   deleted; retrying is safe. SQLite: the file stayed locked; nothing changed.
    /// - `Internal`: anything else.
    ///
    /// The SQLite adapter also deletes a task whose delivery is in flight: that delivery is not
    /// stopped, and its outcome is not recorded.
    async fn delete(&self, queue: &QueueName, name: &TaskName) -> Result<(), QueueError>;

    /// The number of pending tasks: not yet delivered successfully, not dead.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a queue not served; `Unavailable` or `Internal` as for
    /// [`TaskQueue::create`]. Counting changes nothing: retrying is safe. Cloud Tasks v2 has no
    /// queue statistics: the adapter lists the queue's tasks page by page, so the count is not one
    /// snapshot, and a page that fails fails the count.
    async fn depth(&self, queue: &QueueName) -> Result<u64, QueueError>;
}

/// How failed deliveries are retried, with Cloud Tasks' semantics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryConfig {
    /// Attempts in all, the first included; 0 means unlimited.
    pub max_attempts: u32,
    pub min_backoff: Duration,
    pub max_backoff: Duration,
    /// How many times the interval doubles before it grows linearly.
    pub max_doublings: u32,
}

impl Default for RetryConfig {
    /// Cloud Tasks' defaults.
    fn default() -> Self {
        RetryConfig {
            max_attempts: 100,
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(3600),
            max_doublings: 16,
        }
    }
}

impl RetryConfig {
    /// The wait after the `retry`-th failure (0 after the first attempt
    /// failed). Cloud Tasks' rule: the interval starts at `min_backoff`,
    /// doubles `max_doublings` times, then grows linearly by
    /// `2^max_doublings * min_backoff`, capped at `max_backoff`.
    pub fn backoff(&self, retry: u32) -> Duration {
        let doublings = retry.min(self.max_doublings);
        let step = self.min_backoff.saturating_mul(2u32.saturating_pow(doublings));
        let linear = retry - doublings;
        step.saturating_add(step.saturating_mul(linear)).min(self.max_backoff)
    }

    /// Whether a task that has been attempted `attempts` times may be tried again.
    pub fn allows_another(&self, attempts: u32) -> bool {
        self.max_attempts == 0 || attempts < self.max_attempts
    }
}

/// A queue's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    pub name: QueueName,
    pub retry: RetryConfig,
    /// Deliveries of this queue in flight at once, across deliverers.
    pub max_concurrent_dispatches: u32,
    /// The HTTP timeout of one delivery.
    pub dispatch_deadline: Duration,
    /// How long a name stays reserved after its task ran, died or was deleted.
    pub dedup_window: Duration,
}

impl QueueConfig {
    /// A queue with Cloud Tasks' defaults (dispatch deadline 10 min, dedup
    /// window 1 h).
    pub fn new(name: QueueName) -> QueueConfig {
        QueueConfig {
            name,
            retry: RetryConfig::default(),
            max_concurrent_dispatches: 1000,
            dispatch_deadline: Duration::from_secs(600),
            dedup_window: Duration::from_secs(3600),
        }
    }

    pub fn validate(&self) -> Result<(), QueueError> {
        let bad = |what: &str| Err(QueueError::InvalidArgument(format!("queue {}: {what}", self.name)));
        if self.retry.min_backoff > self.retry.max_backoff {
            return bad("min_backoff exceeds max_backoff");
        }
        if self.max_concurrent_dispatches == 0 {
            return bad("max_concurrent_dispatches must be at least 1");
        }
        if self.dispatch_deadline.is_zero() {
            return bad("dispatch_deadline must be positive");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_follows_cloud_tasks_documented_example() {
        let r = RetryConfig {
            max_attempts: 0,
            min_backoff: Duration::from_secs(10),
            max_backoff: Duration::from_secs(300),
            max_doublings: 3,
        };
        let got: Vec<u64> = (0..8).map(|k| r.backoff(k).as_secs()).collect();
        assert_eq!(got, [10, 20, 40, 80, 160, 240, 300, 300]);
        assert_eq!(r.backoff(u32::MAX), Duration::from_secs(300), "no overflow");
    }

    #[test]
    fn backoff_without_doublings_is_linear() {
        let r = RetryConfig {
            max_attempts: 0,
            min_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(4),
            max_doublings: 0,
        };
        let got: Vec<u64> = (0..6).map(|k| r.backoff(k).as_secs()).collect();
        assert_eq!(got, [1, 2, 3, 4, 4, 4]);
    }

    #[test]
    fn max_attempts_counts_the_first_attempt() {
        let r = RetryConfig { max_attempts: 3, ..RetryConfig::default() };
        assert!(r.allows_another(2));
        assert!(!r.allows_another(3));
        assert!(RetryConfig { max_attempts: 0, ..r }.allows_another(u32::MAX));
    }

    #[test]
    fn names_are_validated() {
        assert!(QueueName::new("runs-dispatch-2").is_ok());
        for bad in ["", "Runs", "runs_dispatch", "a b", &"a".repeat(101)] {
            assert!(matches!(QueueName::new(bad), Err(QueueError::InvalidArgument(_))), "{bad:?}");
        }
        assert!(TaskName::new("run-01J_x").is_ok());
        assert!(TaskName::new("a".repeat(500)).is_ok());
        for bad in ["", "a/b", "a.b", "a b", "é", &"a".repeat(501)] {
            assert!(matches!(TaskName::new(bad), Err(QueueError::InvalidArgument(_))), "{bad:?}");
        }
        let parsed: Result<TaskName, _> = serde_json::from_str("\"bad name\"");
        assert!(parsed.is_err(), "deserializing validates too");
    }

    #[test]
    fn tasks_are_validated() {
        let q = QueueName::new("q").expect("queue");
        let now = Timestamp::from_secs(1_000);
        let ok = NewTask::new(q.clone(), "/internal/tick", "{}");
        assert_eq!(ok.validate(now), Ok(()));
        for path in ["/public/x", "internal/x", "/internal/", "/internal", "/internal/a b", "/internal/x#f"] {
            let t = NewTask::new(q.clone(), path, "{}");
            assert!(matches!(t.validate(now), Err(QueueError::InvalidArgument(_))), "{path}");
        }
        let not_json = NewTask::new(q.clone(), "/internal/x", "nope");
        assert!(matches!(not_json.validate(now), Err(QueueError::InvalidArgument(_))));
        let big = NewTask::new(q.clone(), "/internal/x", vec![b' '; MAX_BODY_BYTES + 1]);
        assert!(matches!(big.validate(now), Err(QueueError::InvalidArgument(_))));
        let far = ok.clone().at(now + MAX_SCHEDULE_AHEAD + Duration::from_secs(1));
        assert!(matches!(far.validate(now), Err(QueueError::InvalidArgument(_))));
        assert_eq!(ok.at(now + MAX_SCHEDULE_AHEAD).validate(now), Ok(()));
    }

    #[test]
    fn queue_configs_are_validated() {
        let c = QueueConfig::new(QueueName::new("q").expect("queue"));
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.dedup_window, Duration::from_secs(3600));
        let zero = QueueConfig { max_concurrent_dispatches: 0, ..c.clone() };
        assert!(zero.validate().is_err());
        let inverted = QueueConfig {
            retry: RetryConfig {
                min_backoff: Duration::from_secs(10),
                max_backoff: Duration::from_secs(1),
                ..c.retry
            },
            ..c
        };
        assert!(inverted.validate().is_err());
    }
}
