//! A store that fails on purpose, to prove what callers rely on when the
//! real one fails: the first commits can be refused before they apply (the
//! service was unavailable), and the answers of the next can be lost after
//! they applied (the connection dropped on the way back). Reads pass
//! through. The conformance suite runs its failure cases through it on
//! every adapter.

use mapi_faults::Faults;

use async_trait::async_trait;

use crate::{DocKey, Document, Query, ReadRecord, Store, StoreError, TxnId, Version, Write};

/// Wraps `inner`, failing the first `refuse` commits and losing the answers
/// of the `lose` commits after them.
#[derive(Debug)]
pub struct Unreliable<'a> {
    inner: &'a dyn Store,
    faults: Faults,
}

impl<'a> Unreliable<'a> {
    pub fn new(inner: &'a dyn Store) -> Unreliable<'a> {
        Unreliable { inner, faults: Faults::default() }
    }

    /// The next `n` commits answer `Unavailable` and apply nothing.
    pub fn refuse_next(self, n: u32) -> Self {
        self.faults.refuse_next(n);
        self
    }

    /// The `n` commits after the refused ones apply, then answer `Unavailable`.
    pub fn lose_next(self, n: u32) -> Self {
        self.faults.lose_next(n);
        self
    }
}

#[async_trait]
impl Store for Unreliable<'_> {
    async fn get(&self, keys: &[DocKey], txn: Option<TxnId>) -> Result<Vec<Option<Document>>, StoreError> {
        self.inner.get(keys, txn).await
    }

    async fn query(&self, query: &Query, txn: Option<TxnId>) -> Result<Vec<Document>, StoreError> {
        self.inner.query(query, txn).await
    }

    async fn begin(&self) -> Result<TxnId, StoreError> {
        self.inner.begin().await
    }

    async fn commit(
        &self,
        txn: Option<(TxnId, &[ReadRecord])>,
        writes: &[Write],
    ) -> Result<Vec<Option<Version>>, StoreError> {
        let commit = self.inner.commit(txn, writes);
        self.faults.write(commit, |detail| StoreError::Unavailable(detail.into())).await
    }

    async fn rollback(&self, txn: TxnId) -> Result<(), StoreError> {
        self.inner.rollback(txn).await
    }
}
