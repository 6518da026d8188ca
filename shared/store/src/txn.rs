//! Read-then-write transactions over any adapter, retried on conflict.
//!
//! ```ignore
//! let n = transact(store, |mut tx| async move {
//!     let doc = tx.get(&key).await?;
//!     let next = doc.map_or(0, |d| d.fields["n"].as_i64().unwrap_or(0)) + 1;
//!     tx.put(&key, fields_with(next), Precondition::None);
//!     Ok(tx.finish(next))
//! }).await?;
//! ```
//!
//! The closure may run more than once (each conflict reruns it from a fresh
//! transaction), so it must do no outside I/O and keep its effects in the
//! value it returns. As in Firestore, all reads come before the first write.

use std::future::Future;
use std::time::Duration;

use crate::{DocKey, Document, Fields, Precondition, Query, ReadRecord, Store, StoreError, TxnId, Write};

/// How many times a conflicting transaction is retried before giving up.
const MAX_ATTEMPTS: u32 = 64;

/// A random back-off of up to `250 µs × 2^min(attempt, 6)`, so transactions
/// that conflicted once do not meet again at the same instant. Conflicts on
/// counters that every admission reads are expected under load: the first
/// retries come back within a millisecond.
fn backoff(attempt: u32) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    let ceiling_us = 250u64 << attempt.min(6);
    Duration::from_micros(50 + random % ceiling_us)
}

/// An open transaction: reads go to the store, writes are buffered until commit.
#[derive(Debug)]
pub struct Txn<'s> {
    store: &'s dyn Store,
    id: TxnId,
    reads: Vec<ReadRecord>,
    writes: Vec<Write>,
}

/// A transaction's buffered work and the value to return once it commits.
#[derive(Debug)]
pub struct Committable<'s, T> {
    txn: Txn<'s>,
    value: T,
}

impl<'s> Txn<'s> {
    fn check_no_writes(&self) -> Result<(), StoreError> {
        if self.writes.is_empty() {
            Ok(())
        } else {
            Err(StoreError::InvalidArgument("a transaction must read before it writes".to_owned()))
        }
    }

    /// Reads one document.
    pub async fn get(&mut self, key: &DocKey) -> Result<Option<Document>, StoreError> {
        self.check_no_writes()?;
        let doc = self.store.get(std::slice::from_ref(key), Some(self.id)).await?.pop().flatten();
        self.reads.push(ReadRecord::Doc { key: key.clone(), version: doc.as_ref().map(|d| d.version) });
        Ok(doc)
    }

    /// Reads several documents at once.
    pub async fn get_all(&mut self, keys: &[DocKey]) -> Result<Vec<Option<Document>>, StoreError> {
        self.check_no_writes()?;
        let docs = self.store.get(keys, Some(self.id)).await?;
        for (key, doc) in keys.iter().zip(&docs) {
            self.reads.push(ReadRecord::Doc { key: key.clone(), version: doc.as_ref().map(|d| d.version) });
        }
        Ok(docs)
    }

    /// Runs a query inside the transaction: a commit fails if its result changed.
    pub async fn query(&mut self, query: &Query) -> Result<Vec<Document>, StoreError> {
        self.check_no_writes()?;
        let docs = self.store.query(query, Some(self.id)).await?;
        let seen = docs.iter().map(|d| (d.key.clone(), d.version)).collect();
        self.reads.push(ReadRecord::Query { query: query.clone(), seen });
        Ok(docs)
    }

    pub fn put(&mut self, key: &DocKey, fields: Fields, precondition: Precondition) {
        self.writes.push(Write::Put { key: key.clone(), fields, precondition });
    }

    pub fn create(&mut self, key: &DocKey, fields: Fields) {
        self.put(key, fields, Precondition::Absent);
    }

    pub fn delete(&mut self, key: &DocKey) {
        self.writes.push(Write::Delete { key: key.clone(), precondition: Precondition::None });
    }

    /// Buffers an increment of `field` (see [`Write::Increment`]).
    pub fn increment(&mut self, key: &DocKey, field: &str, delta: i64, at_most: Option<i64>) {
        self.writes.push(Write::Increment { key: key.clone(), field: field.to_owned(), delta, at_most });
    }

    /// Ends the closure: commit the buffered writes, then return `value`.
    pub fn finish<T>(self, value: T) -> Committable<'s, T> {
        Committable { txn: self, value }
    }
}

/// Runs `f` in a transaction and commits what it buffered, rerunning it on
/// `Aborted` (with a short back-off) up to a bound. Errors from `f` roll the
/// transaction back and are returned as they are.
pub async fn transact<'s, T, E, F, Fut>(store: &'s dyn Store, mut f: F) -> Result<T, E>
where
    F: FnMut(Txn<'s>) -> Fut,
    Fut: Future<Output = Result<Committable<'s, T>, E>>,
    E: From<StoreError>,
{
    let mut attempt = 0;
    loop {
        attempt += 1;
        let id = store.begin().await?;
        let txn = Txn { store, id, reads: Vec::new(), writes: Vec::new() };
        let done = match f(txn).await {
            Ok(done) => done,
            Err(e) => {
                // Best effort: an unreleased transaction times out on its own.
                let _ = store.rollback(id).await;
                return Err(e);
            }
        };
        let Committable { txn, value } = done;
        match store.commit(Some((txn.id, &txn.reads)), &txn.writes).await {
            Ok(_) => return Ok(value),
            Err(StoreError::Aborted) if attempt < MAX_ATTEMPTS => {
                tracing::debug!(attempt, "store transaction aborted; retrying");
                tokio::time::sleep(backoff(attempt)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}
