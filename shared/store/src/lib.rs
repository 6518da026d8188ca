//! The Store port: documents in collections, addressed by `collection/id`,
//! shaped after Firestore so the cloud adapter is a mapping, not a redesign.
//!
//! The trait has Firestore's five verbs: batch get ([`Store::get`]), run
//! query ([`Store::query`]), begin/commit/rollback of a transaction, and a
//! commit of preconditioned writes. Everything else ([`StoreExt`],
//! [`transact`]) is built on them, once, for every adapter.
//!
//! Failure: every method returns [`StoreError`]; `Aborted` and `Unavailable`
//! are transient and safe to retry, the others are answers. Cancellation:
//! dropping a future before `commit` returns leaves the store either with
//! all of the commit's writes or none of them.

mod error;
mod query;
pub mod sqlite;
mod txn;

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

use std::fmt::Debug;

use async_trait::async_trait;
use mapi_domain::Timestamp;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use error::StoreError;
pub use query::{Cursor, Direction, Filter, Index, Op, Query};
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
        serde_json::from_value(serde_json::Value::Object(self.fields.clone()))
            .map_err(|e| StoreError::Internal(format!("document {} does not decode: {e}", self.key)))
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
}

impl Write {
    pub fn key(&self) -> &DocKey {
        match self {
            Write::Put { key, .. } | Write::Delete { key, .. } | Write::Increment { key, .. } => key,
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
#[async_trait]
pub trait Store: Send + Sync + Debug {
    /// Reads documents; `None` for each absent one. Inside `txn`, the reads
    /// are part of the transaction.
    async fn get(&self, keys: &[DocKey], txn: Option<TxnId>) -> Result<Vec<Option<Document>>, StoreError>;

    /// Runs a query (see [`Query`] for the ordering rules).
    async fn query(&self, query: &Query, txn: Option<TxnId>) -> Result<Vec<Document>, StoreError>;

    /// Starts a read-write transaction.
    async fn begin(&self) -> Result<TxnId, StoreError>;

    /// Applies `writes` atomically, in order. With a transaction, the commit
    /// fails with `Aborted` when anything the transaction read has changed
    /// since; nothing is written then. Returns each write's new version
    /// (`None` for deletes).
    async fn commit(
        &self,
        txn: Option<(TxnId, &[ReadRecord])>,
        writes: &[Write],
    ) -> Result<Vec<Option<Version>>, StoreError>;

    /// Abandons a transaction. Safe to call for an unknown or finished one.
    async fn rollback(&self, txn: TxnId) -> Result<(), StoreError>;
}

/// Single-document conveniences over the port, for every adapter.
#[async_trait]
pub trait StoreExt: Store {
    async fn get_one(&self, key: &DocKey) -> Result<Option<Document>, StoreError> {
        Ok(self.get(std::slice::from_ref(key), None).await?.pop().flatten())
    }

    /// Creates a document; `AlreadyExists` if one is there.
    async fn create(&self, key: &DocKey, fields: Fields) -> Result<Version, StoreError> {
        self.put(key, fields, Precondition::Absent).await
    }

    /// Writes a document under a precondition.
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

    async fn delete(&self, key: &DocKey, precondition: Precondition) -> Result<(), StoreError> {
        let w = Write::Delete { key: key.clone(), precondition };
        self.commit(None, std::slice::from_ref(&w)).await.map(|_| ())
    }
}

impl<S: Store + ?Sized> StoreExt for S {}
