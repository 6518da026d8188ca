//! The task queue, shaped after Cloud Tasks: named tasks deduplicated for an
//! hour, a schedule time, delivery until a 2xx with back-off (0.5 s
//! doubling to 60 s), and the simulation's faults on `create`. The world
//! takes due tasks from it and delivers them to the handlers.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use mapi_clock::Clock;
use mapi_domain::Timestamp;
use mapi_queue::{NewTask, QueueError, QueueName, TaskInfo, TaskName, TaskQueue};

use crate::faults::{Fault, Faults};

/// How long a task's name stays taken after it was created.
const DEDUP_WINDOW: Duration = Duration::from_secs(3600);

/// A task waiting for its delivery.
#[derive(Debug, Clone)]
pub struct Pending {
    pub queue: QueueName,
    pub name: TaskName,
    pub path: String,
    pub body: Bytes,
    /// Deliveries so far (Cloud Tasks' retry count).
    pub deliveries: u32,
}

#[derive(Debug, Default)]
struct State {
    /// Due time, then creation order.
    due: BTreeMap<(Timestamp, u64), Pending>,
    /// Every name created, with when: taken for the dedup window.
    names: BTreeMap<(String, String), Timestamp>,
    seq: u64,
    unnamed: u64,
}

/// The queue, with the simulation's faults.
#[derive(Debug, Clone)]
pub struct SimQueue {
    clock: Arc<dyn Clock>,
    faults: Arc<Faults>,
    state: Arc<Mutex<State>>,
}

impl SimQueue {
    pub fn new(clock: Arc<dyn Clock>, faults: Arc<Faults>) -> SimQueue {
        SimQueue { clock, faults, state: Arc::default() }
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// When the next task is due.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.with(|s| s.due.keys().next().map(|(t, _)| *t))
    }

    /// Takes the first task due at `now`, if any.
    pub fn take_due(&self, now: Timestamp) -> Option<Pending> {
        self.with(|s| {
            let first = *s.due.keys().next()?;
            if first.0 > now {
                return None;
            }
            s.due.remove(&first)
        })
    }

    /// Puts a task back to be delivered again at `at` (its delivery failed).
    pub fn again(&self, mut task: Pending, at: Timestamp) {
        task.deliveries += 1;
        self.with(|s| {
            s.seq += 1;
            let seq = s.seq;
            s.due.insert((at, seq), task);
        });
    }

    /// Cloud Tasks' back-off after `deliveries` failed deliveries.
    pub fn backoff(deliveries: u32) -> Duration {
        let ms = 500u64.saturating_mul(1 << deliveries.min(7));
        Duration::from_millis(ms.min(60_000))
    }

    /// How many tasks wait.
    pub fn len(&self) -> usize {
        self.with(|s| s.due.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[async_trait]
impl TaskQueue for SimQueue {
    async fn create(&self, task: NewTask) -> Result<TaskInfo, QueueError> {
        self.faults.yield_point().await;
        let now = self.clock.now();
        task.validate(now)?;
        if self.faults.roll(Fault::QueueRefused) {
            return Err(QueueError::Unavailable("429 (simulated)".into()));
        }
        let info = self.with(|s| {
            let name = match &task.name {
                Some(n) => n.clone(),
                None => {
                    s.unnamed += 1;
                    TaskName::new(format!("auto-{}", s.unnamed))?
                }
            };
            let id = (task.queue.as_str().to_owned(), name.as_str().to_owned());
            if s.names.get(&id).is_some_and(|at| now.since(*at) < DEDUP_WINDOW) {
                return Err(QueueError::AlreadyExists(name));
            }
            s.names.insert(id, now);
            let at = task.schedule_time.unwrap_or(now).max(now);
            s.seq += 1;
            let seq = s.seq;
            s.due.insert(
                (at, seq),
                Pending {
                    queue: task.queue.clone(),
                    name: name.clone(),
                    path: task.path.clone(),
                    body: task.body.clone(),
                    deliveries: 0,
                },
            );
            Ok(TaskInfo { name, queue: task.queue.clone(), schedule_time: at, created: now })
        })?;
        self.faults.crash_point().await;
        if self.faults.roll(Fault::QueueAnswerLost) {
            return Err(QueueError::Unavailable("the answer was lost (simulated)".into()));
        }
        Ok(info)
    }

    async fn delete(&self, queue: &QueueName, name: &TaskName) -> Result<(), QueueError> {
        self.with(|s| {
            let found = s.due.iter().find(|(_, t)| &t.queue == queue && &t.name == name).map(|(k, _)| *k);
            match found {
                Some(k) => {
                    s.due.remove(&k);
                    Ok(())
                }
                None => Err(QueueError::NotFound(name.clone())),
            }
        })
    }

    async fn depth(&self, queue: &QueueName) -> Result<u64, QueueError> {
        Ok(self.with(|s| s.due.values().filter(|t| &t.queue == queue).count() as u64))
    }
}
