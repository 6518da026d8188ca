//! The local ObjectStore adapter: object bytes in files under a root
//! directory, object metadata (live generation, size, type) in SQLite.
//!
//! A write takes the next generation from a counter in memory, puts the
//! bytes in a new file named for it (`{bucket}/{key}#{generation}`: `#`
//! cannot occur in a key) and syncs it, then switches the live generation
//! in one SQLite transaction that checks the precondition and raises the
//! persisted high-water mark of generations; the superseded file is removed
//! afterwards. One write is one metadata commit. A crash at any point
//! leaves either the old or the new object live, and files no generation
//! points to are removed at the next open, before the counter resumes
//! above the high-water mark, so a generation is never reused for an
//! object that was seen. One process opens a bucket's directory at a time.
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use mapi_clock::Clock;
use mapi_domain::Timestamp;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::signed::UrlSigner;
use crate::{
    Generation, IfGeneration, ListPage, ObjectError, ObjectKey, ObjectMeta, ObjectStore, SignedMethod,
};

/// One bucket of the local object store. Cheap to clone.
#[derive(Clone, Debug)]
pub struct FsObjectStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    bucket: String,
    dir: PathBuf,
    db: Mutex<Connection>,
    signer: UrlSigner,
    clock: Arc<dyn Clock>,
    counters: Arc<Counters>,
    /// The last generation handed out (starts at the persisted high-water mark).
    generation: AtomicI64,
    /// Calls in the blocking pool at once: the others wait for a turn as
    /// tasks, not as threads blocked on the metadata's lock (a burst of 500
    /// items held some 150 such threads, each with its stack and its
    /// allocator arena, kept by the process).
    turns: tokio::sync::Semaphore,
}

/// How many calls of one bucket run in the blocking pool at once: enough to
/// overlap their files' syncs.
const CONCURRENT_CALLS: usize = 8;

/// What a bucket has written since it opened: the costs the budget tests
/// hold. Counts, not timings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObjectCounts {
    /// Objects written.
    pub puts: u64,
    /// Object files created and synced (one per put).
    pub files: u64,
    /// Write transactions on the metadata file: each one sync of it.
    pub transactions: u64,
}

#[derive(Debug, Default)]
struct Counters {
    puts: AtomicU64,
    files: AtomicU64,
    transactions: Arc<AtomicU64>,
}

fn db_err(e: rusqlite::Error) -> ObjectError {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
            ObjectError::Unavailable(mapi_domain::Cause::of(e))
        }
        _ => ObjectError::Internal(mapi_domain::Cause::of(e)),
    }
}

fn io_err(path: &Path, e: std::io::Error) -> ObjectError {
    ObjectError::Internal(mapi_domain::Cause::new(path.display().to_string(), e))
}

type Row = (i64, i64, String, i64);

fn live(conn: &Connection, bucket: &str, key: &str) -> Result<Option<Row>, ObjectError> {
    conn.prepare_cached(
        "SELECT generation, size, content_type, created FROM objects WHERE bucket = ?1 AND key = ?2",
    )
    .map_err(db_err)?
    .query_row(params![bucket, key], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
    .optional()
    .map_err(db_err)
}

fn check(key: &ObjectKey, current: Option<i64>, precondition: IfGeneration) -> Result<(), ObjectError> {
    match precondition {
        IfGeneration::Any => Ok(()),
        IfGeneration::Match(Generation(want)) if current.unwrap_or(0) == want => Ok(()),
        IfGeneration::Match(_) => Err(ObjectError::PreconditionFailed(key.to_string())),
    }
}

fn meta(key: &ObjectKey, (generation, size, content_type, created): Row) -> ObjectMeta {
    ObjectMeta {
        key: key.clone(),
        generation: Generation(generation),
        size: size as u64,
        content_type,
        created: Timestamp::from_micros(created),
    }
}

impl FsObjectStore {
    /// Opens bucket `bucket` under `root` (bytes in `root/{bucket}/`,
    /// metadata in `root/objects.db`), removing files left by a crash.
    pub fn open(
        root: &Path,
        bucket: &str,
        signer: UrlSigner,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, ObjectError> {
        if bucket.is_empty()
            || !bucket.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(ObjectError::InvalidArgument(format!("invalid bucket name `{bucket}`")));
        }
        let dir = root.join(bucket);
        std::fs::create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
        let conn = Connection::open(root.join("objects.db")).map_err(db_err)?;
        conn.busy_timeout(Duration::from_secs(10)).map_err(db_err)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(db_err)?;
        conn.pragma_update(None, "synchronous", "FULL").map_err(db_err)?;
        // One transaction, one sync, for the whole schema.
        conn.execute_batch(
            "BEGIN IMMEDIATE;
             CREATE TABLE IF NOT EXISTS objects (
                bucket TEXT NOT NULL, key TEXT NOT NULL, generation INTEGER NOT NULL,
                size INTEGER NOT NULL, content_type TEXT NOT NULL, created INTEGER NOT NULL,
                PRIMARY KEY (bucket, key)) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS object_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
             INSERT OR IGNORE INTO object_meta (name, value) VALUES ('generation_seq', 0);
             COMMIT;",
        )
        .map_err(db_err)?;
        let mut conn = conn;
        let counters = Arc::new(Counters::default());
        let transactions = counters.transactions.clone();
        conn.commit_hook(Some(move || {
            transactions.fetch_add(1, Ordering::Relaxed);
            false
        }))
        .map_err(db_err)?;
        let seen: i64 = conn
            .query_row("SELECT value FROM object_meta WHERE name = 'generation_seq'", [], |r| r.get(0))
            .map_err(db_err)?;
        let generation = AtomicI64::new(seen);
        let db = Mutex::new(conn);
        let store = FsObjectStore {
            inner: Arc::new(Inner {
                bucket: bucket.to_owned(),
                dir,
                db,
                signer,
                clock,
                counters,
                generation,
                turns: tokio::sync::Semaphore::new(CONCURRENT_CALLS),
            }),
        };
        store.remove_orphans()?;
        Ok(store)
    }

    /// What this bucket has written since it opened.
    pub fn counts(&self) -> ObjectCounts {
        let c = &self.inner.counters;
        ObjectCounts {
            puts: c.puts.load(Ordering::Relaxed),
            files: c.files.load(Ordering::Relaxed),
            transactions: c.transactions.load(Ordering::Relaxed),
        }
    }

    fn blob_path(&self, key: &str, generation: i64) -> PathBuf {
        self.inner.dir.join(format!("{key}#{generation}"))
    }

    /// Deletes files whose generation is not live (left by a crash mid-write).
    fn remove_orphans(&self) -> Result<(), ObjectError> {
        let mut stack = vec![self.inner.dir.clone()];
        let db = self.inner.db.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).map_err(|e| io_err(&dir, e))? {
                let path = entry.map_err(|e| io_err(&dir, e))?.path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                let rel = path.strip_prefix(&self.inner.dir).unwrap_or(&path).to_string_lossy().into_owned();
                let keep = match rel.rsplit_once('#') {
                    Some((key, g)) => {
                        let live_gen = live(&db, &self.inner.bucket, key)?.map(|r| r.0);
                        g.parse::<i64>().ok().is_some_and(|g| Some(g) == live_gen)
                    }
                    None => false,
                };
                if !keep {
                    tracing::info!(path = %path.display(), "removing an object file no generation points to");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        Ok(())
    }

    fn put_blocking(
        &self,
        key: &ObjectKey,
        bytes: &[u8],
        content_type: &str,
        precondition: IfGeneration,
    ) -> Result<ObjectMeta, ObjectError> {
        {
            // Refuse early, before writing bytes, when the precondition already fails.
            let db = self.inner.db.lock().unwrap_or_else(|e| e.into_inner());
            check(key, live(&db, &self.inner.bucket, key.as_str())?.map(|r| r.0), precondition)?;
        }
        // The generation costs no commit: the commit below persists the
        // high-water mark with the object. The bytes are written and synced
        // without the lock, so puts of different objects sync their files
        // in parallel; the commit checks the precondition again.
        let generation = self.inner.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let path = self.blob_path(key.as_str(), generation);
        let parent = path.parent().unwrap_or(&self.inner.dir).to_owned();
        std::fs::create_dir_all(&parent).map_err(|e| io_err(&parent, e))?;
        let tmp = parent.join(format!(".tmp-{generation}"));
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp).map_err(|e| io_err(&tmp, e))?;
            f.write_all(bytes).map_err(|e| io_err(&tmp, e))?;
            f.sync_all().map_err(|e| io_err(&tmp, e))?;
        }
        self.inner.counters.files.fetch_add(1, Ordering::Relaxed);
        std::fs::rename(&tmp, &path).map_err(|e| io_err(&path, e))?;
        if let Ok(d) = std::fs::File::open(&parent) {
            let _ = d.sync_all();
        }
        let now = self.inner.clock.now().as_micros();
        let mut db = self.inner.db.lock().unwrap_or_else(|e| e.into_inner());
        let tx = db.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db_err)?;
        let previous = live(&tx, &self.inner.bucket, key.as_str())?;
        if let Err(e) = check(key, previous.as_ref().map(|r| r.0), precondition) {
            drop(tx);
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        let row: Row = (generation, bytes.len() as i64, content_type.to_owned(), now);
        if previous.as_ref().is_some_and(|p| p.0 > generation) {
            // A put of the same key that took a later generation committed
            // first: this one is ordered before it, and already superseded.
            drop(tx);
            let _ = std::fs::remove_file(&path);
            return Ok(meta(key, row));
        }
        tx.execute(
            "UPDATE object_meta SET value = max(value, ?1) WHERE name = 'generation_seq'",
            params![generation],
        )
        .map_err(db_err)?;
        tx.execute(
            "INSERT INTO objects (bucket, key, generation, size, content_type, created) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (bucket, key) DO UPDATE SET generation = excluded.generation, size = excluded.size,
                content_type = excluded.content_type, created = excluded.created",
            params![self.inner.bucket, key.as_str(), row.0, row.1, row.2, row.3],
        )
        .map_err(db_err)?;
        tx.commit().map_err(db_err)?;
        self.inner.counters.puts.fetch_add(1, Ordering::Relaxed);
        if let Some(old) = previous {
            let _ = std::fs::remove_file(self.blob_path(key.as_str(), old.0));
        }
        Ok(meta(key, row))
    }

    fn get_blocking(
        &self,
        key: &ObjectKey,
        generation: Option<Generation>,
    ) -> Result<(ObjectMeta, Bytes), ObjectError> {
        // A concurrent overwrite can remove the file between reading the row
        // and the file; read again then.
        for _ in 0..3 {
            let row = {
                let db = self.inner.db.lock().unwrap_or_else(|e| e.into_inner());
                live(&db, &self.inner.bucket, key.as_str())?
            };
            let Some(row) = row else { break };
            if generation.is_some_and(|g| g.0 != row.0) {
                break;
            }
            match std::fs::read(self.blob_path(key.as_str(), row.0)) {
                Ok(bytes) => return Ok((meta(key, row), Bytes::from(bytes))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(&self.blob_path(key.as_str(), row.0), e)),
            }
        }
        Err(ObjectError::NotFound(key.to_string()))
    }

    fn delete_blocking(&self, key: &ObjectKey, precondition: IfGeneration) -> Result<(), ObjectError> {
        let mut db = self.inner.db.lock().unwrap_or_else(|e| e.into_inner());
        let tx = db.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db_err)?;
        let Some(row) = live(&tx, &self.inner.bucket, key.as_str())? else {
            return Err(ObjectError::NotFound(key.to_string()));
        };
        check(key, Some(row.0), precondition)?;
        tx.execute(
            "DELETE FROM objects WHERE bucket = ?1 AND key = ?2",
            params![self.inner.bucket, key.as_str()],
        )
        .map_err(db_err)?;
        tx.commit().map_err(db_err)?;
        let _ = std::fs::remove_file(self.blob_path(key.as_str(), row.0));
        Ok(())
    }

    fn list_blocking(
        &self,
        prefix: &str,
        page_token: Option<&str>,
        max: u32,
    ) -> Result<ListPage, ObjectError> {
        let after = match page_token {
            Some(t) => {
                String::from_utf8(hex::decode(t).map_err(|_| bad_token())?).map_err(|_| bad_token())?
            }
            None => String::new(),
        };
        let max = max.clamp(1, 1000);
        let db = self.inner.db.lock().unwrap_or_else(|e| e.into_inner());
        let mut stmt = db
            .prepare_cached(
                "SELECT key, generation, size, content_type, created FROM objects
                 WHERE bucket = ?1 AND substr(key, 1, length(?2)) = ?2 AND key > ?3 ORDER BY key LIMIT ?4",
            )
            .map_err(db_err)?;
        let rows = stmt
            .query_map(params![self.inner.bucket, prefix, after, i64::from(max) + 1], |r| {
                Ok((r.get::<_, String>(0)?, (r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
            })
            .map_err(db_err)?;
        let mut objects = Vec::new();
        for r in rows {
            let (k, row) = r.map_err(db_err)?;
            objects.push(meta(&ObjectKey::parse(&k)?, row));
        }
        let next_page_token = if objects.len() > max as usize {
            objects.truncate(max as usize);
            objects.last().map(|m| hex::encode(m.key.as_str()))
        } else {
            None
        };
        Ok(ListPage { objects, next_page_token })
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&FsObjectStore) -> Result<T, ObjectError> + Send + 'static,
    ) -> Result<T, ObjectError> {
        let _turn = self
            .inner
            .turns
            .acquire()
            .await
            .map_err(|e| ObjectError::Internal(mapi_domain::Cause::new("object task", e)))?;
        let this = self.clone();
        tokio::task::spawn_blocking(move || f(&this))
            .await
            .map_err(|e| ObjectError::Internal(mapi_domain::Cause::new("object task failed", e)))?
    }
}

fn bad_token() -> ObjectError {
    ObjectError::InvalidArgument("invalid page token: pass the one the previous page returned".to_owned())
}

#[async_trait]
impl ObjectStore for FsObjectStore {
    fn bucket(&self) -> &str {
        &self.inner.bucket
    }

    async fn put(
        &self,
        key: &ObjectKey,
        bytes: Bytes,
        content_type: &str,
        precondition: IfGeneration,
    ) -> Result<ObjectMeta, ObjectError> {
        let (key, content_type) = (key.clone(), content_type.to_owned());
        self.blocking(move |s| s.put_blocking(&key, &bytes, &content_type, precondition)).await
    }

    async fn get(
        &self,
        key: &ObjectKey,
        generation: Option<Generation>,
    ) -> Result<(ObjectMeta, Bytes), ObjectError> {
        let key = key.clone();
        self.blocking(move |s| s.get_blocking(&key, generation)).await
    }

    async fn head(&self, key: &ObjectKey) -> Result<ObjectMeta, ObjectError> {
        let key = key.clone();
        self.blocking(move |s| {
            let db = s.inner.db.lock().unwrap_or_else(|e| e.into_inner());
            live(&db, &s.inner.bucket, key.as_str())?
                .map(|row| meta(&key, row))
                .ok_or_else(|| ObjectError::NotFound(key.to_string()))
        })
        .await
    }

    async fn delete(&self, key: &ObjectKey, precondition: IfGeneration) -> Result<(), ObjectError> {
        let key = key.clone();
        self.blocking(move |s| s.delete_blocking(&key, precondition)).await
    }

    async fn list(&self, prefix: &str, page_token: Option<&str>, max: u32) -> Result<ListPage, ObjectError> {
        let (prefix, token) = (prefix.to_owned(), page_token.map(str::to_owned));
        self.blocking(move |s| s.list_blocking(&prefix, token.as_deref(), max)).await
    }

    async fn signed_url(
        &self,
        method: SignedMethod,
        key: &ObjectKey,
        expires_in: Duration,
    ) -> Result<String, ObjectError> {
        let expires = self.inner.clock.now() + expires_in;
        Ok(self.inner.signer.sign(method, &self.inner.bucket, key, expires))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(root: &Path, clock: Arc<dyn Clock>) -> FsObjectStore {
        let signer = UrlSigner::new(b"test-key".to_vec(), "http://127.0.0.1:1");
        FsObjectStore::open(root, "data", signer, clock).expect("open")
    }

    crate::objects_conformance_suite!({
        let dir = tempfile::tempdir().expect("tempdir");
        let clock: Arc<dyn Clock> = Arc::new(mapi_clock::SystemClock);
        let store = open(dir.path(), clock);
        (dir, store)
    });

    #[tokio::test]
    async fn objects_and_generations_survive_reopening() {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock: Arc<dyn Clock> = Arc::new(mapi_clock::SystemClock);
        let key = ObjectKey::parse("t/dev/a.txt").expect("key");
        let g = {
            let s = open(dir.path(), clock.clone());
            s.put(&key, Bytes::from_static(b"one"), "text/plain", IfGeneration::ABSENT)
                .await
                .expect("put")
                .generation
        };
        // A file a crash left behind (written, never made live) is removed at open.
        let orphan = dir.path().join("data/t/dev/a.txt#999");
        std::fs::write(&orphan, b"partial").expect("orphan");
        let s = open(dir.path(), clock);
        assert!(!orphan.exists());
        let (meta, bytes) = s.get(&key, Some(g)).await.expect("get");
        assert_eq!((meta.generation, &bytes[..]), (g, &b"one"[..]));
        let again = s.put(&key, Bytes::from_static(b"x"), "text/plain", IfGeneration::ABSENT).await;
        assert!(matches!(again, Err(ObjectError::PreconditionFailed(_))));
    }

    /// A put is one metadata commit, and a generation handed out before a
    /// crash (its file an orphan, its commit never made) is not one any
    /// reader saw: after reopening, every new generation is above every
    /// committed one, of any key.
    #[tokio::test]
    async fn a_put_is_one_commit_and_generations_only_rise_across_reopening() {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock: Arc<dyn Clock> = Arc::new(mapi_clock::SystemClock);
        let (a, b) = (ObjectKey::parse("t/dev/a").expect("key"), ObjectKey::parse("t/dev/b").expect("key"));
        let last = {
            let s = open(dir.path(), clock.clone());
            let before = s.counts();
            let mut last = Generation(0);
            for k in [&a, &b, &a] {
                last = s
                    .put(k, Bytes::from_static(b"v"), "text/plain", IfGeneration::Any)
                    .await
                    .expect("put")
                    .generation;
            }
            let after = s.counts();
            assert_eq!((after.puts - before.puts, after.transactions - before.transactions), (3, 3));
            last
        };
        let s = open(dir.path(), clock);
        let next = s.put(&b, Bytes::from_static(b"w"), "text/plain", IfGeneration::Any).await.expect("put");
        assert!(next.generation.0 > last.0, "{:?} after {last:?}", next.generation);
        let (meta, bytes) = s.get(&b, None).await.expect("get");
        assert_eq!((meta.generation, &bytes[..]), (next.generation, &b"w"[..]));
    }
}
