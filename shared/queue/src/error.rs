//! The queue's error type, the same for every adapter.

use crate::TaskName;

/// Why a queue operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// The name is taken: by a pending task, or by one that ran, died or was
    /// deleted within the queue's dedup window.
    #[error("task {0} already exists or ran within the dedup window")]
    AlreadyExists(TaskName),
    /// No pending task has this name.
    #[error("task {0} not found")]
    NotFound(TaskName),
    /// The request itself is malformed (name, path, body, schedule, queue).
    #[error("invalid queue request: {0}")]
    InvalidArgument(String),
    /// The backend is unreachable or overloaded: retry later.
    #[error("queue unavailable: {0}")]
    Unavailable(#[source] mapi_domain::Cause),
    /// Anything else; the message is for logs.
    #[error("queue internal error: {0}")]
    Internal(#[source] mapi_domain::Cause),
}

impl QueueError {
    /// Errors after which the same request may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, QueueError::Unavailable(_))
    }
}
