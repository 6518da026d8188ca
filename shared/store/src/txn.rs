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
//!
//! A conflict is `Aborted` from the commit, or from a read inside the
//! closure (Firestore aborts a transaction's read when it loses a lock):
//! either reruns the closure, whatever error type the closure turned the
//! read's error into.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// Waits out a retry's back-off. Real time, not the platform's clock: the
/// jitter spaces contending commits on the CPU and is no part of the
/// model's time, and a test's virtual clock, which moves only when told,
/// would never end it. (A simulation pauses tokio's time, which this
/// follows.)
async fn wait(d: Duration) {
    tokio::time::sleep(d).await;
}

/// An open transaction: reads go to the store, writes are buffered until commit.
#[derive(Debug)]
pub struct Txn<'s> {
    store: &'s dyn Store,
    id: TxnId,
    reads: Vec<ReadRecord>,
    writes: Vec<Write>,
    /// Set when a read was aborted: the transaction is rerun.
    aborted: Arc<AtomicBool>,
}

/// A transaction's buffered work and the value to return once it commits.
#[derive(Debug)]
pub struct Committable<'s, T> {
    txn: Txn<'s>,
    value: T,
}

impl<'s> Txn<'s> {
    /// As in Firestore, every read of a transaction comes before its first
    /// write; a read after one is refused as [`StoreError::Misuse`], naming
    /// what was read and the write it came after.
    fn check_no_writes(&self, reading: &dyn std::fmt::Display) -> Result<(), StoreError> {
        match self.writes.first() {
            None => Ok(()),
            Some(first) => Err(StoreError::Misuse(format!(
                "a transaction read {reading} after it buffered a write of {} ({} writes in all): \
                 every read of a transaction must come before its first write",
                first.key(),
                self.writes.len()
            ))),
        }
    }

    /// Notes a read's `Aborted`, so that the transaction is rerun.
    fn noted<T>(&self, read: Result<T, StoreError>) -> Result<T, StoreError> {
        if matches!(read, Err(StoreError::Aborted)) {
            self.aborted.store(true, Ordering::Relaxed);
        }
        read
    }

    /// Reads one document.
    pub async fn get(&mut self, key: &DocKey) -> Result<Option<Document>, StoreError> {
        self.check_no_writes(key)?;
        let read = self.store.get(std::slice::from_ref(key), Some(self.id)).await;
        let doc = self.noted(read)?.pop().flatten();
        self.reads.push(ReadRecord::Doc { key: key.clone(), version: doc.as_ref().map(|d| d.version) });
        Ok(doc)
    }

    /// Reads several documents at once.
    pub async fn get_all(&mut self, keys: &[DocKey]) -> Result<Vec<Option<Document>>, StoreError> {
        self.check_no_writes(&Keys(keys))?;
        let read = self.store.get(keys, Some(self.id)).await;
        let docs = self.noted(read)?;
        for (key, doc) in keys.iter().zip(&docs) {
            self.reads.push(ReadRecord::Doc { key: key.clone(), version: doc.as_ref().map(|d| d.version) });
        }
        Ok(docs)
    }

    /// Runs a query inside the transaction: a commit fails if its result changed.
    pub async fn query(&mut self, query: &Query) -> Result<Vec<Document>, StoreError> {
        self.check_no_writes(&format_args!("a query of {}", query.collection))?;
        let read = self.store.query(query, Some(self.id)).await;
        let docs = self.noted(read)?;
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

    /// Buffers a merge of `fields` (see [`Write::Merge`]).
    pub fn merge(&mut self, key: &DocKey, fields: Fields) {
        self.writes.push(Write::Merge { key: key.clone(), fields });
    }

    /// Ends the closure: commit the buffered writes, then return `value`.
    pub fn finish<T>(self, value: T) -> Committable<'s, T> {
        Committable { txn: self, value }
    }
}

/// Several keys, as a read names them.
struct Keys<'a>(&'a [DocKey]);

impl std::fmt::Display for Keys<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            [] => f.write_str("no documents"),
            [one] => write!(f, "{one}"),
            [first, rest @ ..] => write!(f, "{first} and {} more", rest.len()),
        }
    }
}

/// Runs `f` in a transaction and commits what it buffered, rerunning it on
/// `Aborted` (with a short back-off) up to a bound: from the commit, or from
/// a read of `f`'s transaction (whatever `f` made of that error). Other
/// errors from `f` roll the transaction back and are returned as they are.
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
        let aborted = Arc::new(AtomicBool::new(false));
        let txn = Txn { store, id, reads: Vec::new(), writes: Vec::new(), aborted: Arc::clone(&aborted) };
        let done = match f(txn).await {
            Ok(done) => done,
            Err(e) => {
                // Best effort: an unreleased transaction times out on its own.
                let _ = store.rollback(id).await;
                if aborted.load(Ordering::Relaxed) && attempt < MAX_ATTEMPTS {
                    tracing::debug!(attempt, "a read of a store transaction was aborted; retrying");
                    wait(backoff(attempt)).await;
                    continue;
                }
                return Err(e);
            }
        };
        let Committable { txn, value } = done;
        match store.commit(Some((txn.id, &txn.reads)), &txn.writes).await {
            Ok(_) => return Ok(value),
            Err(StoreError::Aborted) if attempt < MAX_ATTEMPTS => {
                tracing::debug!(attempt, "store transaction aborted; retrying");
                wait(backoff(attempt)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use async_trait::async_trait;

    use super::*;
    use crate::Version;
    use crate::sqlite::{Durability, SqliteStore};

    /// A store whose first `aborts` reads inside a transaction fail with
    /// `Aborted`, as Firestore's do when a transaction loses a lock.
    #[derive(Debug)]
    struct AbortingReads {
        inner: SqliteStore,
        aborts: AtomicU32,
        reads: AtomicU32,
    }

    #[async_trait]
    impl Store for AbortingReads {
        async fn get(
            &self,
            keys: &[DocKey],
            txn: Option<TxnId>,
        ) -> Result<Vec<Option<Document>>, StoreError> {
            if txn.is_some() {
                self.reads.fetch_add(1, Ordering::SeqCst);
                if self.aborts.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
                {
                    return Err(StoreError::Aborted);
                }
            }
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
            self.inner.commit(txn, writes).await
        }
        async fn rollback(&self, txn: TxnId) -> Result<(), StoreError> {
            self.inner.rollback(txn).await
        }
    }

    fn store(dir: &tempfile::TempDir, aborts: u32) -> AbortingReads {
        let clock: Arc<dyn mapi_clock::Clock> = Arc::new(mapi_clock::SystemClock);
        let inner =
            SqliteStore::open(&dir.path().join("store.db"), clock, &[], Durability::Normal).expect("open");
        AbortingReads { inner, aborts: AtomicU32::new(aborts), reads: AtomicU32::new(0) }
    }

    /// A closure's own error type, as handlers have: the read's `Aborted`
    /// is turned into it, and the transaction is rerun all the same.
    #[derive(Debug, PartialEq)]
    struct Mine(String);

    impl From<StoreError> for Mine {
        fn from(e: StoreError) -> Mine {
            Mine(e.to_string())
        }
    }

    async fn bump(s: &dyn Store, key: &DocKey) -> Result<i64, Mine> {
        transact::<_, Mine, _, _>(s, |mut tx| async move {
            let n =
                tx.get(key).await?.and_then(|d| d.fields.get("n").and_then(|v| v.as_i64())).unwrap_or(0) + 1;
            let mut fields = Fields::new();
            fields.insert("n".to_owned(), serde_json::Value::from(n));
            tx.put(key, fields, Precondition::None);
            Ok(tx.finish(n))
        })
        .await
    }

    #[tokio::test]
    async fn an_aborted_read_reruns_the_transaction() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = store(&dir, 1);
        let key = DocKey::new("things", "a").expect("key");
        assert_eq!(bump(&s, &key).await, Ok(1));
        // The first read was aborted, the rerun's read went through.
        assert_eq!(s.reads.load(Ordering::SeqCst), 2);
        assert_eq!(bump(&s, &key).await, Ok(2));
    }

    #[tokio::test]
    async fn reads_aborted_every_time_give_up_after_the_bound() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = store(&dir, u32::MAX);
        let key = DocKey::new("things", "a").expect("key");
        let err = bump(&s, &key).await.expect_err("never committed");
        assert_eq!(err, Mine::from(StoreError::Aborted));
        assert_eq!(s.reads.load(Ordering::SeqCst), MAX_ATTEMPTS);
    }

    #[tokio::test]
    async fn other_errors_of_the_closure_are_not_retried() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = store(&dir, 0);
        let key = DocKey::new("things", "a").expect("key");
        let runs = AtomicU32::new(0);
        let (runs_ref, key_ref) = (&runs, &key);
        let out = transact::<(), Mine, _, _>(&s, |mut tx| async move {
            runs_ref.fetch_add(1, Ordering::SeqCst);
            tx.get(key_ref).await?;
            Err(Mine("refused".to_owned()))
        })
        .await;
        assert_eq!(out, Err(Mine("refused".to_owned())));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }
}
