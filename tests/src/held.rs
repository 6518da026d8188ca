//! A queue that holds back one queue's pushes while told to: each push to it is answered
//! `Unavailable`, as a queue that is down would answer, so the platform's own retries (the
//! reconcile tick pushes a finalization again on its next round) deliver the work once the hold is
//! released. Used to stop a run between two steps (its execution ended, its finalization not yet
//! applied) without touching the handlers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use mapi_queue::{NewTask, QueueError, QueueName, TaskInfo, TaskName, TaskQueue};

use crate::QueueWrap;

/// The switch of a [`hold`]: held while on.
#[derive(Debug, Default)]
pub struct Hold(AtomicBool);

impl Hold {
    pub fn set(&self, on: bool) {
        self.0.store(on, Ordering::SeqCst);
    }

    pub fn is_on(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// A queue wrapper that refuses pushes to `queue` while its switch (returned, on) is on.
pub fn hold(queue: &'static str) -> (QueueWrap, Arc<Hold>) {
    let switch = Arc::new(Hold(AtomicBool::new(true)));
    let held = switch.clone();
    let wrap = QueueWrap(Arc::new(move |inner| {
        Arc::new(Holding { inner, queue, hold: held.clone() }) as Arc<dyn TaskQueue>
    }));
    (wrap, switch)
}

#[derive(Debug)]
struct Holding {
    inner: Arc<dyn TaskQueue>,
    queue: &'static str,
    hold: Arc<Hold>,
}

#[async_trait]
impl TaskQueue for Holding {
    async fn create(&self, task: NewTask) -> Result<TaskInfo, QueueError> {
        if self.hold.is_on() && task.queue.as_str() == self.queue {
            let why = format!("the test holds queue {}", self.queue);
            return Err(QueueError::Unavailable(mapi_domain::Cause::message(why)));
        }
        self.inner.create(task).await
    }

    async fn delete(&self, queue: &QueueName, name: &TaskName) -> Result<(), QueueError> {
        self.inner.delete(queue, name).await
    }

    async fn depth(&self, queue: &QueueName) -> Result<u64, QueueError> {
        self.inner.depth(queue).await
    }
}
