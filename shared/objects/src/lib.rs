//! The ObjectStore port: one bucket of objects, each with a generation that
//! changes on every write, shaped after Cloud Storage so the GCS adapter is a
//! mapping. Create-only writes are `if_generation_match(0)`; reads and
//! deletes can pin a generation; signed URLs let a worker read and write
//! single objects without credentials.
//!
//! Failure: `NotFound` and `PreconditionFailed` are answers; `Unavailable`
//! is transient. Cancellation: a write whose future is dropped either
//! completed (the object has the new generation) or left no trace.

pub mod fs;
mod key;
pub mod signed;

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use mapi_domain::Timestamp;

pub use key::ObjectKey;

/// An object's generation. 0 means "does not exist" in preconditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Generation(pub i64);

/// What a stored object is, without its bytes.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ObjectMeta {
    pub key: ObjectKey,
    pub generation: Generation,
    pub size: u64,
    pub content_type: String,
    pub created: Timestamp,
}

/// A precondition on a write or delete, as `ifGenerationMatch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IfGeneration {
    /// No condition.
    Any,
    /// The live generation must be this one; `Generation(0)`: no live object.
    Match(Generation),
}

impl IfGeneration {
    /// Create-only: fails if the object exists.
    pub const ABSENT: IfGeneration = IfGeneration::Match(Generation(0));
}

/// A page of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListPage {
    pub objects: Vec<ObjectMeta>,
    /// Pass to the next `list` call; `None` on the last page.
    pub next_page_token: Option<String>,
}

/// The HTTP method a signed URL allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SignedMethod {
    Get,
    /// An upload that replaces whatever is there (checkpoints).
    Put,
    /// An upload that succeeds only if the object does not exist yet (outputs).
    PutCreateOnly,
}

impl SignedMethod {
    /// The name the signature covers.
    pub fn as_str(self) -> &'static str {
        match self {
            SignedMethod::Get => "GET",
            SignedMethod::Put => "PUT",
            SignedMethod::PutCreateOnly => "PUT-CREATE",
        }
    }

    /// The HTTP method the URL is used with.
    pub fn http_method(self) -> &'static str {
        match self {
            SignedMethod::Get => "GET",
            SignedMethod::Put | SignedMethod::PutCreateOnly => "PUT",
        }
    }
}

/// Why an object operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
    #[error("object {0} not found")]
    NotFound(String),
    /// The generation precondition did not hold (HTTP 412).
    #[error("object {0} does not match the generation precondition")]
    PreconditionFailed(String),
    #[error("invalid object request: {0}")]
    InvalidArgument(String),
    #[error("object store unavailable: {0}")]
    Unavailable(String),
    #[error("object store internal error: {0}")]
    Internal(String),
}

/// The ObjectStore port: one bucket.
#[async_trait]
pub trait ObjectStore: Send + Sync + Debug {
    /// The bucket's name.
    fn bucket(&self) -> &str;

    /// Writes an object under a generation precondition; returns its metadata.
    async fn put(
        &self,
        key: &ObjectKey,
        bytes: Bytes,
        content_type: &str,
        precondition: IfGeneration,
    ) -> Result<ObjectMeta, ObjectError>;

    /// Reads an object, optionally pinned to a generation (a generation that
    /// is no longer live is `NotFound`).
    async fn get(
        &self,
        key: &ObjectKey,
        generation: Option<Generation>,
    ) -> Result<(ObjectMeta, Bytes), ObjectError>;

    /// Reads an object's metadata.
    async fn head(&self, key: &ObjectKey) -> Result<ObjectMeta, ObjectError>;

    /// Deletes an object. `NotFound` if there is none.
    async fn delete(&self, key: &ObjectKey, precondition: IfGeneration) -> Result<(), ObjectError>;

    /// Lists objects whose key starts with `prefix`, in key order.
    async fn list(&self, prefix: &str, page_token: Option<&str>, max: u32) -> Result<ListPage, ObjectError>;

    /// A URL that allows `method` on `key` until `expires_in` from now.
    async fn signed_url(
        &self,
        method: SignedMethod,
        key: &ObjectKey,
        expires_in: Duration,
    ) -> Result<String, ObjectError>;
}
