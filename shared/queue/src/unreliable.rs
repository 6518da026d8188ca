//! A task queue that fails on purpose, to prove what callers rely on when
//! the real one fails: the first writes (creates and deletes) can be
//! refused before they reach the queue (the service was unavailable), and
//! the answers of the next can be lost after the queue applied them (the
//! connection dropped on the way back). Both answer `Unavailable`, as the
//! port's failure model allows of Cloud Tasks, so a caller cannot tell them
//! apart and must retry in a way that is right for both: a named task's
//! retry answers `AlreadyExists` when the lost create enqueued it. Counting
//! passes through. The conformance suite runs its failure cases through it
//! on every adapter.

use mapi_faults::Faults;

use async_trait::async_trait;

use crate::{NewTask, QueueError, QueueName, TaskInfo, TaskName, TaskQueue};

/// Wraps `inner`, failing the first `refuse` writes and losing the answers
/// of the `lose` writes after them.
#[derive(Debug)]
pub struct Unreliable<'a> {
    inner: &'a dyn TaskQueue,
    faults: Faults,
}

impl<'a> Unreliable<'a> {
    pub fn new(inner: &'a dyn TaskQueue) -> Unreliable<'a> {
        Unreliable { inner, faults: Faults::default() }
    }

    /// The next `n` writes answer `Unavailable` and change nothing.
    pub fn refuse_next(self, n: u32) -> Self {
        self.faults.refuse_next(n);
        self
    }

    /// The `n` writes after the refused ones apply, then answer `Unavailable`.
    /// A write the queue answered with an error is passed on and not counted:
    /// only an applied write has an answer worth losing.
    pub fn lose_next(self, n: u32) -> Self {
        self.faults.lose_next(n);
        self
    }

    /// Runs one write under the refusals and losses still due.
    async fn write<T>(&self, apply: impl Future<Output = Result<T, QueueError>>) -> Result<T, QueueError> {
        self.faults.write(apply, |detail| QueueError::Unavailable(detail.into())).await
    }
}

#[async_trait]
impl TaskQueue for Unreliable<'_> {
    async fn create(&self, task: NewTask) -> Result<TaskInfo, QueueError> {
        self.write(self.inner.create(task)).await
    }

    async fn delete(&self, queue: &QueueName, name: &TaskName) -> Result<(), QueueError> {
        self.write(self.inner.delete(queue, name)).await
    }

    async fn depth(&self, queue: &QueueName) -> Result<u64, QueueError> {
        self.inner.depth(queue).await
    }
}
