//! The Store's error type, the same for every adapter.

use crate::DocKey;

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// A write required the document to exist.
    #[error("document {0} not found")]
    NotFound(DocKey),
    /// A create found the document already there.
    #[error("document {0} already exists")]
    AlreadyExists(DocKey),
    /// A write's version precondition did not hold.
    #[error("document {0} changed since it was read")]
    FailedPrecondition(DocKey),
    /// A guarded increment would have passed its limit; the commit wrote nothing.
    #[error("{field} of {key} would pass its limit")]
    LimitReached { key: DocKey, field: String },
    /// A transaction conflicted with another and wrote nothing: retry it.
    #[error("transaction aborted by a concurrent change")]
    Aborted,
    /// The request itself is malformed (a key, a query, a document).
    #[error("invalid store request: {0}")]
    InvalidArgument(String),
    /// The port was used against its rules (a transaction read after it
    /// buffered a write): a bug in the caller, never in the data, so the
    /// same request fails the same way every time. Retrying cannot help.
    #[error("store misused (a bug in the caller): {0}")]
    Misuse(String),
    /// The backend is unreachable or overloaded: retry later.
    #[error("store unavailable: {0}")]
    Unavailable(#[source] mapi_domain::Cause),
    /// Anything else; the message is for logs.
    #[error("store internal error: {0}")]
    Internal(#[source] mapi_domain::Cause),
}

impl StoreError {
    /// Errors after which the same request may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Aborted | StoreError::Unavailable(_))
    }

    /// Whether this is a programming error ([`StoreError::Misuse`]).
    pub fn is_misuse(&self) -> bool {
        matches!(self, StoreError::Misuse(_))
    }
}
