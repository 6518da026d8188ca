//! A store that fails on purpose, to prove what callers rely on when the
//! real one fails: the first commits can be refused before they apply (the
//! service was unavailable), and the answers of the next can be lost after
//! they applied (the connection dropped on the way back). Reads pass
//! through. The conformance suite runs its failure cases through it on
//! every adapter.

use async_trait::async_trait;

use crate::{DocKey, Document, Query, ReadRecord, Store, StoreError, TxnId, Version, Write};

/// Wraps `inner`, failing the first `refuse` commits and losing the answers
/// of the `lose` commits after them (`Unreliable::new(inner).refuse_next(1)`).
pub type Unreliable<'a> = mapi_faults::Unreliable<'a, dyn Store + 'a>;

/// The port's answer to a refused write or a lost answer.
fn unavailable(detail: &'static str) -> StoreError {
    StoreError::Unavailable(detail.into())
}

#[async_trait]
impl Store for Unreliable<'_> {
    async fn get(&self, keys: &[DocKey], txn: Option<TxnId>) -> Result<Vec<Option<Document>>, StoreError> {
        self.inner().get(keys, txn).await
    }

    async fn query(&self, query: &Query, txn: Option<TxnId>) -> Result<Vec<Document>, StoreError> {
        self.inner().query(query, txn).await
    }

    async fn begin(&self) -> Result<TxnId, StoreError> {
        self.inner().begin().await
    }

    async fn commit(
        &self,
        txn: Option<(TxnId, &[ReadRecord])>,
        writes: &[Write],
    ) -> Result<Vec<Option<Version>>, StoreError> {
        let commit = self.inner().commit(txn, writes);
        self.write(commit, unavailable).await
    }

    async fn rollback(&self, txn: TxnId) -> Result<(), StoreError> {
        self.inner().rollback(txn).await
    }
}
