//! The ObjectStore port: one bucket of objects, each with a generation that
//! changes on every write, shaped after Cloud Storage so the GCS adapter is a
//! mapping. Create-only writes are `if_generation_match(0)`; reads and
//! deletes can pin a generation; signed URLs let a worker read and write
//! single objects without credentials.
//!
//! Failure: `NotFound` and `PreconditionFailed` are answers; `Unavailable`
//! is transient. After `Unavailable` or `Internal` from a write, the write
//! may or may not have happened (see [`ObjectStore::put`]). Cancellation: a
//! write whose future is dropped either completed (the object has the new
//! generation) or left no trace.

pub mod fs;
mod key;
pub mod signed;

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
#[cfg(any(test, feature = "conformance"))]
pub mod unreliable;

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
    Unavailable(#[source] mapi_domain::Cause),
    #[error("object store internal error: {0}")]
    Internal(#[source] mapi_domain::Cause),
}

/// The ObjectStore port: one bucket.
///
/// Failure model: `NotFound`, `PreconditionFailed` and `InvalidArgument` are definite: nothing this
/// call wrote is live. Reads, listings and URL signing change nothing and may be retried as they are.
/// After `Unavailable` or `Internal` from `put` or `delete` the write may or may not have happened;
/// a retry under the same generation precondition, and a comparison of the stored bytes, tell which.
#[async_trait]
pub trait ObjectStore: Send + Sync + Debug {
    /// The bucket's name.
    fn bucket(&self) -> &str;

    /// Writes an object under a generation precondition; returns its metadata.
    ///
    /// # Errors
    ///
    /// - `PreconditionFailed`: the live generation is not the one required (`ABSENT`: an object is
    ///   there); nothing this call wrote is live. After an earlier call of the same write ended in
    ///   `Unavailable` or `Internal`, the object there may be that write's: read it and compare the
    ///   bytes (the metadata carries no checksum), as `mapi_bundles::seal` and the submit
    ///   function's `create_only` do.
    /// - `NotFound` (Cloud Storage): the bucket does not exist. `InvalidArgument` (Cloud Storage): a
    ///   400.
    /// - `Unavailable`: on Cloud Storage, unknown whether the object was written: no answer twice (a
    ///   lost answer is tried once more with the same precondition), a 408, 429 or 5xx, or no access
    ///   token. In the local adapter (its metadata database stayed locked) nothing was made live.
    /// - `Internal`: in the local adapter an I/O or database error; nothing was made live. On Cloud
    ///   Storage it may follow a write that happened: the stored object's CRC32C, MD5 or size are not
    ///   those of the bytes sent, or the answer lacks its creation time.
    ///
    /// Retrying: with `IfGeneration::Any` a retry writes the object again, under a new generation.
    /// With `Match(g)` or `ABSENT` a retry either writes or answers `PreconditionFailed`; compare the
    /// bytes to tell. Within one call, the Cloud Storage adapter does that itself after a lost answer
    /// and a 412 (same CRC32C, MD5 and size, and a live generation other than `g`).
    async fn put(
        &self,
        key: &ObjectKey,
        bytes: Bytes,
        content_type: &str,
        precondition: IfGeneration,
    ) -> Result<ObjectMeta, ObjectError>;

    /// Reads an object, optionally pinned to a generation (a generation that
    /// is no longer live is `NotFound`).
    ///
    /// # Errors
    ///
    /// - `NotFound`: no live object, or `generation` is not the live one.
    /// - `Unavailable`: no answer, a 408, 429 or 5xx, or (Cloud Storage) bytes that do not match the
    ///   stored CRC32C or size; (local) the metadata database stayed locked.
    /// - `Internal`: an I/O error, or an answer the adapter cannot read. `InvalidArgument`: a 400.
    ///
    /// A read changes nothing: retrying is safe. Unpinned, a retry may return a newer generation;
    /// pin `generation` to read the same bytes again.
    async fn get(
        &self,
        key: &ObjectKey,
        generation: Option<Generation>,
    ) -> Result<(ObjectMeta, Bytes), ObjectError>;

    /// Reads an object's metadata.
    ///
    /// # Errors
    ///
    /// `NotFound` when there is no live object; otherwise as [`ObjectStore::get`]. Retrying is safe.
    async fn head(&self, key: &ObjectKey) -> Result<ObjectMeta, ObjectError>;

    /// Deletes an object. `NotFound` if there is none.
    ///
    /// # Errors
    ///
    /// - `NotFound`: no live object (the local adapter checks this before the precondition).
    /// - `PreconditionFailed`: the live generation is not the one given; nothing was deleted. The
    ///   fake Cloud Storage of the tests ignores delete preconditions; the case is proven locally.
    /// - `Unavailable`: on Cloud Storage, no answer or a 408, 429 or 5xx: unknown whether it was
    ///   deleted. A retry answers `NotFound` if it was, so a caller that wants the object gone
    ///   treats `NotFound` as done. In the local adapter `Unavailable` and `Internal` leave the
    ///   object as it was.
    ///
    /// Retrying is safe with `Match(g)`: it deletes at most generation `g`. With `Any` a retry
    /// deletes whatever is live then, also an object written since the first call.
    async fn delete(&self, key: &ObjectKey, precondition: IfGeneration) -> Result<(), ObjectError>;

    /// Lists objects whose key starts with `prefix`, in key order.
    ///
    /// # Errors
    ///
    /// - `InvalidArgument`: a page token this listing did not return. Cloud Storage's tokens are
    ///   bound to their prefix; the local adapter accepts any token it could have made.
    /// - `Unavailable`, `Internal`: as for [`ObjectStore::get`].
    ///
    /// Listing changes nothing: retrying a page with the same token is safe. Pages are not one
    /// snapshot: an object written or deleted between pages may or may not be listed.
    async fn list(&self, prefix: &str, page_token: Option<&str>, max: u32) -> Result<ListPage, ObjectError>;

    /// A URL that allows `method` on `key` until `expires_in` from now.
    ///
    /// # Errors
    ///
    /// The local adapter never fails (an HMAC). Cloud Storage: `Internal` when no signer is
    /// configured, or `signBlob` refuses (a 4xx other than 429) or answers what cannot be used;
    /// `Unavailable` when `signBlob` or the access token cannot be had (no answer, 429, 5xx).
    /// Signing changes nothing: retrying is safe, and a retry may return another URL.
    async fn signed_url(
        &self,
        method: SignedMethod,
        key: &ObjectKey,
        expires_in: Duration,
    ) -> Result<String, ObjectError>;
}
