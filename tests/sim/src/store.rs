//! The real SQLite store under the simulation's faults.
//!
//! Commits are answered before the request goes on (the writer thread's
//! answer is waited for in place), so no thread decides the order of
//! anything. Reads may fail, commits may be refused or aborted before they
//! apply, or apply and lose their answer, or apply and kill the process.
//! Every key a commit names is recorded, so the checker re-reads exactly
//! what a step may have changed.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use mapi_store::sqlite::SqliteStore;
use mapi_store::{DocKey, Document, Query, ReadRecord, Store, StoreError, TxnId, Version, Write};

use crate::faults::{Fault, Faults};

/// The SQLite store, faulty on purpose.
#[derive(Debug)]
pub struct SimStore {
    inner: SqliteStore,
    faults: Arc<Faults>,
    touched: Mutex<BTreeSet<DocKey>>,
}

impl SimStore {
    pub fn new(inner: SqliteStore, faults: Arc<Faults>) -> SimStore {
        SimStore { inner, faults, touched: Mutex::default() }
    }

    /// The keys commits named since the last call.
    pub fn take_touched(&self) -> BTreeSet<DocKey> {
        std::mem::take(&mut *self.touched.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The store without faults, for the checker's reads.
    pub fn reliable(&self) -> &SqliteStore {
        &self.inner
    }
}

/// Waits for `fut` on this thread (the store's writer thread wakes it).
fn wait<F: std::future::Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let std::task::Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

fn unavailable(what: &str) -> StoreError {
    StoreError::Unavailable(format!("{what} (simulated)").into())
}

#[async_trait]
impl Store for SimStore {
    async fn get(&self, keys: &[DocKey], txn: Option<TxnId>) -> Result<Vec<Option<Document>>, StoreError> {
        self.faults.yield_point().await;
        if self.faults.roll(Fault::StoreReadFailed) {
            return Err(unavailable("the read timed out"));
        }
        self.inner.get(keys, txn).await
    }

    async fn query(&self, query: &Query, txn: Option<TxnId>) -> Result<Vec<Document>, StoreError> {
        self.faults.yield_point().await;
        if self.faults.roll(Fault::StoreReadFailed) {
            return Err(unavailable("the query timed out"));
        }
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
        self.faults.yield_point().await;
        self.touched
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(writes.iter().map(|w| w.key().clone()));
        if self.faults.roll(Fault::StoreRefused) {
            return Err(unavailable("the commit was refused"));
        }
        if txn.is_some() && self.faults.roll(Fault::StoreAborted) {
            return Err(StoreError::Aborted);
        }
        // Waited for in place: the writer thread answers before anything
        // else in this process moves.
        let applied = wait(self.inner.commit(txn, writes));
        if applied.is_ok() {
            self.faults.crash_point().await;
            if self.faults.roll(Fault::StoreAnswerLost) {
                return Err(unavailable("the commit's answer was lost"));
            }
        }
        applied
    }

    async fn rollback(&self, txn: TxnId) -> Result<(), StoreError> {
        self.inner.rollback(txn).await
    }
}
