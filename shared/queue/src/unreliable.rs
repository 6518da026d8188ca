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

use async_trait::async_trait;

use crate::{NewTask, QueueError, QueueName, TaskInfo, TaskName, TaskQueue};

/// Wraps `inner`, failing the first `refuse` writes and losing the answers
/// of the `lose` writes after them (`Unreliable::new(inner).refuse_next(1)`).
pub type Unreliable<'a> = mapi_faults::Unreliable<'a, dyn TaskQueue + 'a>;

/// The port's answer to a refused write or a lost answer.
fn unavailable(detail: &'static str) -> QueueError {
    QueueError::Unavailable(detail.into())
}

#[async_trait]
impl TaskQueue for Unreliable<'_> {
    async fn create(&self, task: NewTask) -> Result<TaskInfo, QueueError> {
        self.write(self.inner().create(task), unavailable).await
    }

    async fn delete(&self, queue: &QueueName, name: &TaskName) -> Result<(), QueueError> {
        self.write(self.inner().delete(queue, name), unavailable).await
    }

    async fn depth(&self, queue: &QueueName) -> Result<u64, QueueError> {
        self.inner().depth(queue).await
    }
}
