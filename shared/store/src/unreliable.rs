//! A store that fails on purpose, to prove what callers rely on when the
//! real one fails: the first commits can be refused before they apply (the
//! service was unavailable), and the answers of the next can be lost after
//! they applied (the connection dropped on the way back). Reads pass
//! through. The conformance suite runs its failure cases through it on
//! every adapter.

use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;

use crate::{DocKey, Document, Query, ReadRecord, Store, StoreError, TxnId, Version, Write};

/// Wraps `inner`, failing the first `refuse` commits and losing the answers
/// of the `lose` commits after them.
#[derive(Debug)]
pub struct Unreliable<'a> {
    inner: &'a dyn Store,
    refuse: AtomicU32,
    lose: AtomicU32,
}

impl<'a> Unreliable<'a> {
    pub fn new(inner: &'a dyn Store) -> Unreliable<'a> {
        Unreliable { inner, refuse: AtomicU32::new(0), lose: AtomicU32::new(0) }
    }

    /// The next `n` commits answer `Unavailable` and apply nothing.
    pub fn refuse_next(self, n: u32) -> Self {
        self.refuse.store(n, Ordering::SeqCst);
        self
    }

    /// The `n` commits after the refused ones apply, then answer `Unavailable`.
    pub fn lose_next(self, n: u32) -> Self {
        self.lose.store(n, Ordering::SeqCst);
        self
    }

    fn take(counter: &AtomicU32) -> bool {
        counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
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
        if Self::take(&self.refuse) {
            return Err(StoreError::Unavailable("refused on purpose before applying".into()));
        }
        let applied = self.inner.commit(txn, writes).await;
        if applied.is_ok() && Self::take(&self.lose) {
            return Err(StoreError::Unavailable("the answer was lost on purpose after applying".into()));
        }
        applied
    }

    async fn rollback(&self, txn: TxnId) -> Result<(), StoreError> {
        self.inner.rollback(txn).await
    }
}
