//! The Store port: documents in collections, addressed by `collection/id`,
//! shaped after Firestore so the cloud adapter is a mapping, not a redesign.
//!
//! The trait has Firestore's five verbs: batch get ([`Store::get`]), run
//! query ([`Store::query`]), begin/commit/rollback of a transaction, and a
//! commit of preconditioned writes. Everything else ([`StoreExt`],
//! [`transact`]) is built on them, once, for every adapter.
//!
//! Failure: every method returns [`StoreError`]. A read may be retried
//! after any error; `Aborted` wrote nothing and is redone from a fresh
//! transaction; `AlreadyExists`, `NotFound`, `FailedPrecondition`,
//! `LimitReached` and `InvalidArgument` are answers. After `Unavailable` or
//! `Internal` from `commit` it is unknown whether the commit applied (see
//! [`Store::commit`]). Cancellation: dropping a future before `commit`
//! returns leaves the store either with all of the commit's writes or none
//! of them (not on the Firestore emulator, which applies them one by one).

mod error;
mod query;
pub mod sqlite;
mod txn;

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod typed;
#[cfg(any(test, feature = "conformance"))]
pub mod unreliable;

use std::fmt::Debug;

use async_trait::async_trait;
use mapi_domain::Timestamp;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use error::StoreError;
pub use query::{
    ContainsIndex, Cursor, Direction, Filter, Index, Op, Query, Unindexed, check_merge_field, field_value,
};
pub use txn::{Committable, Txn, transact};

/// The fields of a document: a JSON object.
pub type Fields = serde_json::Map<String, serde_json::Value>;

/// The address of a document: `collection/id`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DocKey {
    collection: String,
    id: String,
}

impl DocKey {
    /// A key. Collection names are `[a-z_]+`; ids are 1..=500 bytes of
    /// printable ASCII without `/` (Firestore's limits, tightened).
    pub fn new(collection: &str, id: impl Into<String>) -> Result<DocKey, StoreError> {
        let id = id.into();
        let collection_ok = !collection.is_empty()
            && collection.len() <= 64
            && collection.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
        let id_ok = !id.is_empty()
            && id.len() <= 500
            && id != "."
            && id != ".."
            && !(id.starts_with("__") && id.ends_with("__"))
            && id.bytes().all(|b| b.is_ascii_graphic() && b != b'/');
        if !collection_ok {
            return Err(StoreError::InvalidArgument(format!("invalid collection name `{collection}`")));
        }
        if !id_ok {
            return Err(StoreError::InvalidArgument(format!(
                "invalid document id `{}`",
                id.chars().take(64).collect::<String>()
            )));
        }
        Ok(DocKey { collection: collection.to_owned(), id })
    }

    pub fn collection(&self) -> &str {
        &self.collection
    }

    pub fn id(&self) -> &str {
        &self.id
    }
}

impl std::fmt::Display for DocKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.collection, self.id)
    }
}

/// The version of a stored document, changed by every write: Firestore's
/// `update_time`, a sequence number in SQLite. Opaque: compare for equality only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Version(pub u64);

/// A stored document.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    pub key: DocKey,
    pub fields: Fields,
    pub version: Version,
    pub create_time: Timestamp,
    pub update_time: Timestamp,
}

impl Document {
    /// The fields as a typed value.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, StoreError> {
        // Read from the fields where they are, not from a copy of them.
        T::deserialize(&self.fields).map_err(|e| {
            StoreError::Internal(mapi_domain::Cause::new(format!("document {} does not decode", self.key), e))
        })
    }
}

/// Turns a value into document fields.
pub fn encode<T: Serialize>(value: &T) -> Result<Fields, StoreError> {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(_) => Err(StoreError::InvalidArgument("a document must be a JSON object".to_owned())),
        Err(e) => Err(StoreError::InvalidArgument(format!("value does not encode: {e}"))),
    }
}

/// A precondition on a write, as Firestore's `currentDocument`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// No condition: create or replace.
    None,
    /// The document must not exist (create).
    Absent,
    /// The document must exist.
    Exists,
    /// The document must exist at exactly this version.
    Version(Version),
}

/// One write of a commit.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// Replaces the document's fields.
    Put { key: DocKey, fields: Fields, precondition: Precondition },
    /// Deletes the document. Deleting a missing document succeeds unless the
    /// precondition requires it to exist.
    Delete { key: DocKey, precondition: Precondition },
    /// Adds `delta` to the integer `field` (absent: 0), creating the
    /// document if needed, as Firestore's increment transform. With
    /// `at_most`, the whole commit fails with `LimitReached` instead of
    /// taking the field past it. Increments need no read, so increments of
    /// one counter never conflict with each other; several fields of one
    /// document may be incremented in one commit.
    Increment { key: DocKey, field: String, delta: i64, at_most: Option<i64> },
    /// Sets `fields` (top-level names), keeping the document's other fields,
    /// creating the document if needed, as Firestore's update with a field
    /// mask. Like an increment it needs no read, so it never conflicts with
    /// another commit; one commit may merge and increment one document
    /// (the increments apply after the merge). A document's constant fields
    /// (whose sums are kept by increments) are written this way.
    Merge { key: DocKey, fields: Fields },
}

impl Write {
    /// Whether other writes of the same document may join this one in a
    /// commit: increments and merges (which read nothing) may; a put or a
    /// delete is the document's only write.
    pub fn combines(&self) -> bool {
        matches!(self, Write::Increment { .. } | Write::Merge { .. })
    }

    pub fn key(&self) -> &DocKey {
        match self {
            Write::Put { key, .. }
            | Write::Delete { key, .. }
            | Write::Increment { key, .. }
            | Write::Merge { key, .. } => key,
        }
    }
}

/// A transaction's server-side handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TxnId(pub u64);

/// What a transaction read, so optimistic adapters can validate it at commit.
#[derive(Clone, Debug, PartialEq)]
pub enum ReadRecord {
    /// A document read, and the version seen (`None`: absent).
    Doc { key: DocKey, version: Option<Version> },
    /// A query run, and the documents it returned.
    Query { query: Query, seen: Vec<(DocKey, Version)> },
}

/// The Store port.
///
/// Failure model: `get` and `query` change nothing, so any of their errors may be retried as is. A
/// `commit` error is definite (nothing written) except `Unavailable` and `Internal`, after which the
/// commit may or may not have applied: retry it only when its writes are idempotent or their
/// preconditions tell the two cases apart. A transaction's handle is spent by its commit.
#[async_trait]
pub trait Store: Send + Sync + Debug {
    /// Reads documents; `None` for each absent one. Inside `txn`, the reads
    /// are part of the transaction.
    ///
    /// # Errors
    ///
    /// - `Aborted` (Firestore, inside `txn` only): the transaction lost its lock to another; rerun it
    ///   from [`Store::begin`], as [`transact`] does. SQLite never aborts a read: it checks at commit.
    /// - `InvalidArgument`: a malformed request; on Firestore also a `txn` that is unknown, already
    ///   committed or rolled back, or forgotten (handles older than 300 s are dropped at the next
    ///   `begin`). SQLite ignores `txn`.
    /// - `Unavailable`: the backend did not answer in time or is overloaded (Firestore `UNAVAILABLE`,
    ///   `DEADLINE_EXCEEDED`, `RESOURCE_EXHAUSTED`, an unreachable endpoint, a transient credentials
    ///   failure; SQLite: the file stayed busy or locked).
    /// - `Internal`: anything else: a stored document that does not decode, a missing answer for a
    ///   key; on Firestore also a call that outlives the client's 60 s timeout (tonic reports it as
    ///   `CANCELLED`, which is not mapped to `Unavailable`).
    ///
    /// A read writes nothing, so retrying it is safe; outside a transaction a retry may see newer
    /// versions.
    async fn get(&self, keys: &[DocKey], txn: Option<TxnId>) -> Result<Vec<Option<Document>>, StoreError>;

    /// Runs a query (see [`Query`] for the ordering rules).
    ///
    /// # Errors
    ///
    /// As [`Store::get`], and: `InvalidArgument` for a query that fails [`Query`]'s rules;
    /// `Internal` on Firestore for a query whose composite index is not deployed (the message says
    /// so). Retrying is safe; a retry outside a transaction may return other documents.
    async fn query(&self, query: &Query, txn: Option<TxnId>) -> Result<Vec<Document>, StoreError>;

    /// Starts a read-write transaction.
    ///
    /// # Errors
    ///
    /// Firestore: `Unavailable` or `Internal` as for [`Store::get`]. A lost answer leaves at most a
    /// server transaction that no handle names, which Firestore ends on its own once idle; retrying
    /// is safe. SQLite never fails: its handle is a number, and the transaction is its read records.
    async fn begin(&self) -> Result<TxnId, StoreError>;

    /// Applies `writes` atomically, in order. With a transaction, the commit
    /// fails with `Aborted` when anything the transaction read has changed
    /// since; nothing is written then. Returns each write's new version
    /// (`None` for deletes).
    ///
    /// The commit spends the transaction's handle whatever it answers: commit a `TxnId` once.
    /// Firestore answers `InvalidArgument` to a second commit of it; SQLite does not track handles
    /// and would apply a second commit whose read records still hold.
    ///
    /// # Errors
    ///
    /// These leave nothing written:
    /// - `AlreadyExists`, `NotFound`, `FailedPrecondition`: the named write's precondition did not
    ///   hold (`Absent`; `Exists` or `Version`; `Version`). Firestore names the document only in
    ///   text, so the adapter reads the conditioned documents again and names the first whose
    ///   precondition fails at that read.
    /// - `LimitReached`: a guarded increment would pass its `at_most`.
    /// - `Aborted`: a conflict. Without a transaction SQLite never answers it; Firestore answers it
    ///   for any `ABORTED` status, e.g. when a commit's guarded increments lost their own transaction
    ///   64 times. Redo the work from a fresh transaction (re-reading what it depends on), as
    ///   [`transact`] does.
    /// - `InvalidArgument`: a malformed commit (a document put or deleted twice, an invalid field
    ///   path) or, on Firestore, an unknown or spent `TxnId`.
    ///
    /// After `Unavailable` or `Internal` it is unknown whether the commit applied: on Firestore both
    /// cover an answer lost or timed out after the commit reached the server. (SQLite answers only
    /// once its transaction is durable or rolled back, so its errors are definite; with
    /// `Durability::Normal` a power loss may still undo an answered commit.) Retrying the same
    /// writes is safe when each is idempotent: a `Put` with `None` or `Exists`, a `Delete` with
    /// `None`. It is not safe for an `Increment`, which would count twice. A `Put` with `Absent` or
    /// `Version`, or a `Delete` with `Exists` or `Version`, retried after it applied answers
    /// `AlreadyExists`, `FailedPrecondition` or `NotFound`: read the document (and compare its
    /// fields) to tell. A transaction is retried by rerunning it, which reads what the first commit
    /// may have written.
    ///
    /// On the Firestore emulator, version preconditions are ignored, the writes before a failing one
    /// are kept, and transactions never abort (see `mapi-firestore`).
    async fn commit(
        &self,
        txn: Option<(TxnId, &[ReadRecord])>,
        writes: &[Write],
    ) -> Result<Vec<Option<Version>>, StoreError>;

    /// Abandons a transaction. Safe to call for an unknown or finished one.
    ///
    /// # Errors
    ///
    /// Firestore only: `Unavailable` or `Internal` when the `Rollback` call fails. The handle is
    /// forgotten before the call, so a retry answers `Ok` without sending anything; the server's
    /// transaction then ends on its own. Callers may ignore the error, as [`transact`] does. SQLite
    /// never fails: there is nothing to release.
    async fn rollback(&self, txn: TxnId) -> Result<(), StoreError>;
}

/// Single-document conveniences over the port, for every adapter.
#[async_trait]
pub trait StoreExt: Store {
    async fn get_one(&self, key: &DocKey) -> Result<Option<Document>, StoreError> {
        Ok(self.get(std::slice::from_ref(key), None).await?.pop().flatten())
    }

    /// Creates a document; `AlreadyExists` if one is there.
    ///
    /// After `Unavailable` or `Internal` a retry either creates it or answers `AlreadyExists`, also
    /// when the first call wrote: compare the stored fields to tell.
    async fn create(&self, key: &DocKey, fields: Fields) -> Result<Version, StoreError> {
        self.put(key, fields, Precondition::Absent).await
    }

    /// Writes a document under a precondition: one [`Store::commit`], with its errors.
    async fn put(
        &self,
        key: &DocKey,
        fields: Fields,
        precondition: Precondition,
    ) -> Result<Version, StoreError> {
        let w = Write::Put { key: key.clone(), fields, precondition };
        let v = self.commit(None, std::slice::from_ref(&w)).await?;
        v.into_iter()
            .next()
            .flatten()
            .ok_or_else(|| StoreError::Internal("commit returned no version".into()))
    }

    /// Deletes a document under a precondition: one [`Store::commit`], with its errors. With
    /// `Precondition::None` a retry is safe: a missing document is not an error.
    async fn delete(&self, key: &DocKey, precondition: Precondition) -> Result<(), StoreError> {
        let w = Write::Delete { key: key.clone(), precondition };
        self.commit(None, std::slice::from_ref(&w)).await.map(|_| ())
    }
}

impl<S: Store + ?Sized> StoreExt for S {}
