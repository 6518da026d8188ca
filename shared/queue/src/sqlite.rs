//! The embedded TaskQueue adapter: tasks in a SQLite file of their own.
//!
//! Tasks live in `queue_tasks`, one row per `(queue, name)`, in
//! `$MAPI_HOME/queue.db` (WAL, `synchronous=FULL`, so an acknowledged
//! `create` survives a crash). The file is the queue's alone: one writer
//! per file, so the queue never waits in SQLite's busy handler for the
//! store's writer (and the store's never waits for it). Homes made when
//! the queue shared the store's file hand their tasks over once
//! ([`SqliteQueue::adopt`]). A row moves
//! `pending → leased → done`, or back to `pending` with a back-off after a
//! failed delivery, or to `dead` when the queue's `max_attempts` are spent.
//! `done` and `deleted` rows are tombstones that keep the name reserved for
//! the dedup window, then are purged; `dead` rows are kept for inspection
//! ([`SqliteQueue::dead_tasks`]) until their name is used again after the
//! window. A deliverer polls twenty times a second, so every query a poll
//! makes seeks an index led by the state and the time it compares: its cost
//! does not grow with the tombstones of the last hour (a scan of them was,
//! after an hour of items, most of the process's CPU).
//!
//! Concurrent creates share one write transaction and one sync (group
//! commit). The [`Deliverer`] POSTs each leased task to its route with Cloud
//! Tasks' `X-CloudTasks-*` headers, so the handlers it calls are the ones
//! Cloud Tasks calls in the cloud.
//!
//! Leasing takes one write transaction that also honours each queue's
//! `max_concurrent_dispatches` across every deliverer on the file. A lease
//! lasts the dispatch deadline plus a margin; a lease that expires (its
//! deliverer crashed) makes the task due again, so delivery is at least once.
//! Each lease carries a token; an outcome is recorded only if the lease is
//! still the task's current one.

mod deliverer;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use mapi_clock::Clock;
use mapi_domain::Timestamp;
use rusqlite::{Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params};
use tokio::sync::Notify;

use crate::{NewTask, QueueConfig, QueueError, QueueName, TaskInfo, TaskName, TaskQueue};

pub use deliverer::Deliverer;

/// How long a lease outlives the dispatch deadline, so a delivery that is
/// still running is never handed to a second deliverer.
pub const LEASE_MARGIN: Duration = Duration::from_secs(30);

const PENDING: &str = "pending";
const LEASED: &str = "leased";
const DONE: &str = "done";
const DELETED: &str = "deleted";
const DEAD: &str = "dead";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS queue_tasks (
    queue TEXT NOT NULL,
    name TEXT NOT NULL,
    path TEXT NOT NULL,
    body BLOB NOT NULL,
    state TEXT NOT NULL,
    schedule_time INTEGER NOT NULL,
    created INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    lease_token INTEGER,
    lease_until INTEGER,
    finished INTEGER,
    reserved_until INTEGER,
    last_status TEXT,
    PRIMARY KEY (queue, name)
);
CREATE INDEX IF NOT EXISTS queue_tasks_due ON queue_tasks (state, schedule_time);
CREATE INDEX IF NOT EXISTS queue_tasks_lease ON queue_tasks (state, lease_until);
CREATE INDEX IF NOT EXISTS queue_tasks_reserved ON queue_tasks (state, reserved_until);
CREATE TABLE IF NOT EXISTS queue_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO queue_meta (name, value) VALUES ('name_seq', 0), ('lease_seq', 0);
";

/// The SQLite adapter. Cheap to clone.
#[derive(Clone, Debug)]
pub struct SqliteQueue {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    conn: Mutex<Connection>,
    clock: Arc<dyn Clock>,
    queues: BTreeMap<String, QueueConfig>,
    /// Signalled by `create`, so a waiting deliverer looks at once.
    created: Notify,
    /// Creates waiting for the connection. Whoever takes the lock next
    /// writes all of them in one transaction (group commit: one fsync).
    pending: Mutex<Vec<PendingCreate>>,
    /// One call at a time on the connection: a call waits for its turn
    /// here, as a task, not in a thread of the blocking pool on the
    /// connection's lock (a burst of 500 items held some 150 such threads,
    /// each with its stack and its allocator arena, kept by the process).
    turn: tokio::sync::Semaphore,
    /// Write transactions committed on the connection (SQLite's commit
    /// hook): each one sync of the file.
    transactions: Arc<AtomicU64>,
}

type PendingCreate = (NewTask, tokio::sync::oneshot::Sender<Result<TaskInfo, QueueError>>);

impl Inner {
    fn config(&self, queue: &QueueName) -> Result<&QueueConfig, QueueError> {
        self.queues
            .get(queue.as_str())
            .ok_or_else(|| QueueError::InvalidArgument(format!("unknown queue `{queue}`")))
    }
}

/// A task that spent its attempts, kept for inspection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadTask {
    pub queue: QueueName,
    pub name: TaskName,
    pub path: String,
    pub body: Bytes,
    pub attempts: u32,
    /// The last failure: `HTTP 500`, `dispatch deadline exceeded`, ...
    pub last_status: String,
    pub died: Timestamp,
}

/// One leased delivery.
#[derive(Clone)]
struct Lease {
    queue: QueueName,
    name: TaskName,
    path: String,
    body: Bytes,
    token: i64,
    /// Attempts made before this one (all failed or were lost).
    previous_attempts: u32,
    eta: Timestamp,
    deadline: Duration,
}

/// What one delivery came to.
#[derive(Debug)]
enum Outcome {
    Delivered,
    Failed { status: String, retry_after: Option<Duration> },
}

/// Identifies a lease to give back.
#[derive(Clone, Debug)]
struct LeaseKey {
    queue: QueueName,
    name: TaskName,
    token: i64,
}

fn sql_err(e: rusqlite::Error) -> QueueError {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
            QueueError::Unavailable(mapi_domain::Cause::of(e))
        }
        _ => QueueError::Internal(mapi_domain::Cause::of(e)),
    }
}

fn micros(t: Timestamp) -> i64 {
    t.as_micros()
}

fn stored_name(s: String) -> Result<TaskName, QueueError> {
    TaskName::new(s)
        .map_err(|e| QueueError::Internal(mapi_domain::Cause::new("stored task name is invalid", e)))
}

impl SqliteQueue {
    /// Opens (creating if needed) the queue tables in the SQLite file at
    /// `path`, serving the given queues.
    pub fn open(
        path: &Path,
        clock: Arc<dyn Clock>,
        queues: Vec<QueueConfig>,
    ) -> Result<SqliteQueue, QueueError> {
        let mut configs = BTreeMap::new();
        for q in queues {
            q.validate()?;
            let key = q.name.as_str().to_owned();
            if configs.contains_key(&key) {
                return Err(QueueError::InvalidArgument(format!("queue `{key}` is configured twice")));
            }
            configs.insert(key, q);
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| QueueError::Internal(mapi_domain::Cause::new(dir.display().to_string(), e)))?;
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql_err)?;
        conn.busy_timeout(Duration::from_secs(10)).map_err(sql_err)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(sql_err)?;
        conn.pragma_update(None, "synchronous", "FULL").map_err(sql_err)?;
        let mut conn = conn;
        let transactions = Arc::new(AtomicU64::new(0));
        let counted = transactions.clone();
        conn.commit_hook(Some(move || {
            counted.fetch_add(1, Ordering::Relaxed);
            false
        }))
        .map_err(sql_err)?;
        // One transaction, one sync, for the whole schema.
        conn.execute_batch(&format!("BEGIN IMMEDIATE; {SCHEMA} COMMIT;")).map_err(sql_err)?;
        Ok(SqliteQueue {
            inner: Arc::new(Inner {
                conn: Mutex::new(conn),
                clock,
                queues: configs,
                created: Notify::new(),
                pending: Mutex::new(Vec::new()),
                turn: tokio::sync::Semaphore::new(1),
                transactions,
            }),
        })
    }

    /// Moves the tasks a queue left in the SQLite file at `old` (when the
    /// queue shared the store's file) into this one, once: the rows are
    /// copied in one transaction of this file (a name already here is
    /// kept), then dropped from `old` in another, so a crash between the two
    /// copies them again, harmlessly. Answers how many rows it copied; 0
    /// when `old` has no queue tables.
    pub fn adopt(&self, old: &Path) -> Result<u64, QueueError> {
        if !old.exists() {
            return Ok(0);
        }
        let mut conn = self.inner.conn.lock().unwrap_or_else(|e| e.into_inner());
        let path = old.to_string_lossy().into_owned();
        conn.execute("ATTACH DATABASE ?1 AS old", params![path]).map_err(sql_err)?;
        let moved = adopt_attached(&mut conn);
        let detached = conn.execute_batch("DETACH DATABASE old").map_err(sql_err);
        let moved = moved?;
        detached?;
        if moved > 0 {
            tracing::info!(tasks = moved, from = %old.display(), "queue tasks moved to the queue's own file");
        }
        Ok(moved)
    }

    /// Write transactions the queue has committed since it opened (its
    /// schema's included): each is one sync of the file (the budget tests
    /// count them).
    pub fn transactions(&self) -> u64 {
        self.inner.transactions.load(Ordering::Relaxed)
    }

    /// The queue's dead tasks, oldest death first.
    pub async fn dead_tasks(&self, queue: &QueueName) -> Result<Vec<DeadTask>, QueueError> {
        let queue = queue.clone();
        self.with_conn(move |conn, inner, _| {
            inner.config(&queue)?;
            let mut stmt = conn
                .prepare_cached(
                    "SELECT name, path, body, attempts, last_status, finished FROM queue_tasks
                     WHERE queue = ?1 AND state = 'dead' ORDER BY finished, name",
                )
                .map_err(sql_err)?;
            let rows = stmt
                .query_map(params![queue.as_str()], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, Vec<u8>>(2)?,
                        r.get::<_, u32>(3)?,
                        r.get::<_, Option<String>>(4)?,
                        r.get::<_, Option<i64>>(5)?,
                    ))
                })
                .map_err(sql_err)?;
            let mut out = Vec::new();
            for row in rows {
                let (name, path, body, attempts, status, died) = row.map_err(sql_err)?;
                out.push(DeadTask {
                    queue: queue.clone(),
                    name: stored_name(name)?,
                    path,
                    body: Bytes::from(body),
                    attempts,
                    last_status: status.unwrap_or_default(),
                    died: Timestamp::from_micros(died.unwrap_or(0)),
                });
            }
            Ok(out)
        })
        .await
    }

    /// Runs `f` on the connection, off the async threads, with the time
    /// read under the connection's lock.
    async fn with_conn<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection, &Inner, Timestamp) -> Result<T, QueueError> + Send + 'static,
    ) -> Result<T, QueueError> {
        let _turn =
            self.inner.turn.acquire().await.map_err(|e| QueueError::Internal(mapi_domain::Cause::of(e)))?;
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = inner.conn.lock().unwrap_or_else(|e| e.into_inner());
            let now = inner.clock.now();
            f(&mut conn, &inner, now)
        })
        .await
        .map_err(|e| QueueError::Internal(mapi_domain::Cause::new("queue task failed", e)))?
    }

    /// Resolves when a task has been created since the last call (or now,
    /// if one was created before anyone waited).
    async fn created(&self) {
        self.inner.created.notified().await;
    }

    /// Purges expired tombstones, recovers expired leases, and leases every
    /// due task that fits its queue's concurrency limit.
    async fn lease_due(&self) -> Result<Vec<Lease>, QueueError> {
        self.with_conn(|conn, inner, now| {
            // A read first, so an idle poll takes no write lock.
            let busy: Vec<String> = {
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT DISTINCT queue FROM queue_tasks
                         WHERE (state = 'pending' AND schedule_time <= ?1)
                            OR (state = 'leased' AND lease_until <= ?1)",
                    )
                    .map_err(sql_err)?;
                let rows = stmt.query_map(params![micros(now)], |r| r.get(0)).map_err(sql_err)?;
                rows.collect::<Result<_, _>>().map_err(sql_err)?
            };
            let purge: bool = conn
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM queue_tasks
                     WHERE state IN ('done', 'deleted') AND reserved_until <= ?1)",
                )
                .and_then(|mut s| s.query_row(params![micros(now)], |r| r.get(0)))
                .map_err(sql_err)?;
            let busy: Vec<&QueueConfig> = busy.iter().filter_map(|q| inner.queues.get(q)).collect();
            if busy.is_empty() && !purge {
                return Ok(Vec::new());
            }
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql_err)?;
            if purge {
                tx.execute(
                    "DELETE FROM queue_tasks WHERE state IN ('done', 'deleted') AND reserved_until <= ?1",
                    params![micros(now)],
                )
                .map_err(sql_err)?;
            }
            let mut leases = Vec::new();
            for cfg in busy {
                recover_expired(&tx, cfg, now)?;
                lease_queue(&tx, cfg, now, &mut leases)?;
            }
            tx.commit().map_err(sql_err)?;
            Ok(leases)
        })
        .await
    }

    /// Records a delivery's outcome, if the lease is still the task's own.
    async fn finish(&self, lease: Lease, outcome: Outcome) -> Result<(), QueueError> {
        self.with_conn(move |conn, inner, now| {
            let cfg = inner.config(&lease.queue)?;
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql_err)?;
            let row: Option<(i64, u32)> = tx
                .query_row(
                    "SELECT rowid, attempts FROM queue_tasks
                     WHERE queue = ?1 AND name = ?2 AND state = 'leased' AND lease_token = ?3",
                    params![lease.queue.as_str(), lease.name.as_str(), lease.token],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(sql_err)?;
            let Some((rowid, attempts)) = row else {
                // Deleted meanwhile, or the lease expired and was taken over.
                return Ok(());
            };
            match outcome {
                Outcome::Delivered => {
                    tx.execute(
                        "UPDATE queue_tasks SET state = ?2, body = x'', finished = ?3, reserved_until = ?4,
                             lease_token = NULL, lease_until = NULL, last_status = 'delivered'
                         WHERE rowid = ?1",
                        params![rowid, DONE, micros(now), micros(now + cfg.dedup_window)],
                    )
                    .map_err(sql_err)?;
                }
                Outcome::Failed { status, retry_after } if cfg.retry.allows_another(attempts) => {
                    let wait =
                        cfg.retry.backoff(attempts.saturating_sub(1)).max(retry_after.unwrap_or_default());
                    tracing::debug!(
                        queue = %lease.queue, task = %lease.name, attempts, %status, retry_in = ?wait,
                        "task delivery failed"
                    );
                    tx.execute(
                        "UPDATE queue_tasks SET state = ?2, schedule_time = ?3, last_status = ?4,
                             lease_token = NULL, lease_until = NULL
                         WHERE rowid = ?1",
                        params![rowid, PENDING, micros(now + wait), status],
                    )
                    .map_err(sql_err)?;
                }
                Outcome::Failed { status, .. } => {
                    bury(&tx, cfg, rowid, lease.name.as_str(), attempts, &status, now)?;
                }
            }
            tx.commit().map_err(sql_err)
        })
        .await
    }

    /// Gives back leases whose deliveries were abandoned (a deliverer shutting
    /// down): the tasks are due again at once and the attempts do not count.
    async fn release(&self, leases: Vec<LeaseKey>) -> Result<(), QueueError> {
        self.with_conn(move |conn, _, _| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql_err)?;
            for l in &leases {
                tx.execute(
                    "UPDATE queue_tasks SET state = 'pending', attempts = max(attempts - 1, 0),
                         lease_token = NULL, lease_until = NULL
                     WHERE queue = ?1 AND name = ?2 AND state = 'leased' AND lease_token = ?3",
                    params![l.queue.as_str(), l.name.as_str(), l.token],
                )
                .map_err(sql_err)?;
            }
            tx.commit().map_err(sql_err)
        })
        .await
    }

    /// The depth of every configured queue.
    async fn depths(&self) -> Result<Vec<(QueueName, u64)>, QueueError> {
        self.with_conn(|conn, inner, _| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT queue, COUNT(*) FROM queue_tasks WHERE state IN ('pending', 'leased') GROUP BY queue",
                )
                .map_err(sql_err)?;
            let counts: BTreeMap<String, i64> = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(sql_err)?
                .collect::<Result<_, _>>()
                .map_err(sql_err)?;
            Ok(inner
                .queues
                .values()
                .map(|c| {
                    let n = counts.get(c.name.as_str()).copied().unwrap_or(0);
                    (c.name.clone(), u64::try_from(n).unwrap_or(0))
                })
                .collect())
        })
        .await
    }
}

/// Makes tasks whose lease expired due again, or dead if that lost attempt
/// was their last.
fn recover_expired(tx: &Transaction<'_>, cfg: &QueueConfig, now: Timestamp) -> Result<(), QueueError> {
    let expired: Vec<(i64, String, u32)> = {
        let mut stmt = tx
            .prepare_cached(
                "SELECT rowid, name, attempts FROM queue_tasks
                 WHERE queue = ?1 AND state = 'leased' AND lease_until <= ?2",
            )
            .map_err(sql_err)?;
        let rows = stmt
            .query_map(params![cfg.name.as_str(), micros(now)], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .map_err(sql_err)?;
        rows.collect::<Result<_, _>>().map_err(sql_err)?
    };
    for (rowid, name, attempts) in expired {
        let status = "lease expired: the deliverer was lost";
        if cfg.retry.allows_another(attempts) {
            tracing::warn!(queue = %cfg.name, task = %name, attempts, "{status}; delivering again");
            tx.execute(
                "UPDATE queue_tasks SET state = 'pending', schedule_time = ?2, last_status = ?3,
                     lease_token = NULL, lease_until = NULL
                 WHERE rowid = ?1",
                params![rowid, micros(now), status],
            )
            .map_err(sql_err)?;
        } else {
            bury(tx, cfg, rowid, &name, attempts, status, now)?;
        }
    }
    Ok(())
}

/// Leases the queue's due tasks, as many as its free dispatch slots.
fn lease_queue(
    tx: &Transaction<'_>,
    cfg: &QueueConfig,
    now: Timestamp,
    leases: &mut Vec<Lease>,
) -> Result<(), QueueError> {
    let in_flight: u32 = tx
        .query_row(
            "SELECT COUNT(*) FROM queue_tasks WHERE queue = ?1 AND state = 'leased'",
            params![cfg.name.as_str()],
            |r| r.get(0),
        )
        .map_err(sql_err)?;
    let slots = cfg.max_concurrent_dispatches.saturating_sub(in_flight);
    if slots == 0 {
        return Ok(());
    }
    let due: Vec<(i64, String, String, Vec<u8>, i64, u32)> = {
        let mut stmt = tx
            .prepare_cached(
                "SELECT rowid, name, path, body, schedule_time, attempts FROM queue_tasks
                 WHERE queue = ?1 AND state = 'pending' AND schedule_time <= ?2
                 ORDER BY schedule_time, rowid LIMIT ?3",
            )
            .map_err(sql_err)?;
        let rows = stmt
            .query_map(params![cfg.name.as_str(), micros(now), slots], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
            })
            .map_err(sql_err)?;
        rows.collect::<Result<_, _>>().map_err(sql_err)?
    };
    let lease_until = now + cfg.dispatch_deadline + LEASE_MARGIN;
    for (rowid, name, path, body, eta, attempts) in due {
        let token: i64 = tx
            .query_row(
                "UPDATE queue_meta SET value = value + 1 WHERE name = 'lease_seq' RETURNING value",
                [],
                |r| r.get(0),
            )
            .map_err(sql_err)?;
        tx.execute(
            "UPDATE queue_tasks SET state = ?2, lease_token = ?3, lease_until = ?4, attempts = attempts + 1
             WHERE rowid = ?1",
            params![rowid, LEASED, token, micros(lease_until)],
        )
        .map_err(sql_err)?;
        leases.push(Lease {
            queue: cfg.name.clone(),
            name: stored_name(name)?,
            path,
            body: Bytes::from(body),
            token,
            previous_attempts: attempts,
            eta: Timestamp::from_micros(eta),
            deadline: cfg.dispatch_deadline,
        });
    }
    Ok(())
}

/// Marks a task dead, keeping it (and its body) for inspection.
fn bury(
    tx: &Transaction<'_>,
    cfg: &QueueConfig,
    rowid: i64,
    name: &str,
    attempts: u32,
    status: &str,
    now: Timestamp,
) -> Result<(), QueueError> {
    tracing::error!(queue = %cfg.name, task = %name, attempts, last_status = %status, "task dead: attempts exhausted");
    tx.execute(
        "UPDATE queue_tasks SET state = ?2, finished = ?3, reserved_until = ?4, last_status = ?5,
             lease_token = NULL, lease_until = NULL
         WHERE rowid = ?1",
        params![rowid, DEAD, micros(now), micros(now + cfg.dedup_window), status],
    )
    .map_err(sql_err)?;
    Ok(())
}

/// Takes `name` for a new task: refused while a task of that name is
/// pending or its tombstone is within the dedup window; an older row goes.
/// [`SqliteQueue::adopt`] with the old file attached as `old`.
fn adopt_attached(conn: &mut Connection) -> Result<u64, QueueError> {
    let has: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM old.sqlite_master WHERE type = 'table' AND name = 'queue_tasks')",
            [],
            |r| r.get(0),
        )
        .map_err(sql_err)?;
    if !has {
        return Ok(0);
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql_err)?;
    let moved = tx
        .execute("INSERT OR IGNORE INTO main.queue_tasks SELECT * FROM old.queue_tasks", [])
        .map_err(sql_err)?;
    // Generated names and lease tokens keep rising above the old file's.
    tx.execute(
        "UPDATE main.queue_meta SET value = max(value, (SELECT value FROM old.queue_meta o
             WHERE o.name = main.queue_meta.name)) WHERE name IN (SELECT name FROM old.queue_meta)",
        [],
    )
    .map_err(sql_err)?;
    tx.commit().map_err(sql_err)?;
    conn.execute_batch("DROP TABLE IF EXISTS old.queue_tasks; DROP TABLE IF EXISTS old.queue_meta;")
        .map_err(sql_err)?;
    Ok(u64::try_from(moved).unwrap_or(0))
}

/// Writes a batch of creates in one transaction, each in its own savepoint
/// (a refused create does not undo the others), and answers each after the
/// commit.
fn create_batch(conn: &mut Connection, inner: &Inner, now: Timestamp, batch: Vec<PendingCreate>) {
    let mut tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => {
            let e = sql_err(e);
            for (_, reply) in batch {
                let _ = reply.send(Err(e.clone()));
            }
            return;
        }
    };
    let mut answers = Vec::with_capacity(batch.len());
    for (task, reply) in batch {
        let one = (|| {
            inner.config(&task.queue)?;
            task.validate(now)?;
            let sp = tx.savepoint().map_err(sql_err)?;
            let name = match task.name {
                Some(name) => {
                    claim(&sp, &task.queue, &name, now)?;
                    name
                }
                None => generate_name(&sp, &task.queue)?,
            };
            let schedule_time = task.schedule_time.unwrap_or(now);
            sp.execute(
                "INSERT INTO queue_tasks (queue, name, path, body, state, schedule_time, created, attempts)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0)",
                params![
                    task.queue.as_str(),
                    name.as_str(),
                    task.path,
                    &task.body[..],
                    PENDING,
                    micros(schedule_time),
                    micros(now)
                ],
            )
            .map_err(sql_err)?;
            sp.commit().map_err(sql_err)?;
            Ok(TaskInfo { name, queue: task.queue, schedule_time, created: now })
        })();
        answers.push((reply, one));
    }
    match tx.commit() {
        Ok(()) => {
            for (reply, one) in answers {
                let _ = reply.send(one);
            }
        }
        Err(e) => {
            let e = sql_err(e);
            for (reply, _) in answers {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

fn claim(tx: &Connection, queue: &QueueName, name: &TaskName, now: Timestamp) -> Result<(), QueueError> {
    let row: Option<(String, Option<i64>)> = tx
        .query_row(
            "SELECT state, reserved_until FROM queue_tasks WHERE queue = ?1 AND name = ?2",
            params![queue.as_str(), name.as_str()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(sql_err)?;
    match row {
        None => Ok(()),
        Some((state, _)) if state == PENDING || state == LEASED => {
            Err(QueueError::AlreadyExists(name.clone()))
        }
        Some((_, Some(until))) if until > micros(now) => Err(QueueError::AlreadyExists(name.clone())),
        Some(_) => {
            tx.execute(
                "DELETE FROM queue_tasks WHERE queue = ?1 AND name = ?2",
                params![queue.as_str(), name.as_str()],
            )
            .map_err(sql_err)?;
            Ok(())
        }
    }
}

/// A fresh name, unique in this file forever: `t-` and a persisted sequence,
/// skipping any a caller chose.
fn generate_name(tx: &Connection, queue: &QueueName) -> Result<TaskName, QueueError> {
    loop {
        let seq: i64 = tx
            .query_row(
                "UPDATE queue_meta SET value = value + 1 WHERE name = 'name_seq' RETURNING value",
                [],
                |r| r.get(0),
            )
            .map_err(sql_err)?;
        let name = TaskName::new(format!("t-{seq:020}"))?;
        let taken: bool = tx
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM queue_tasks WHERE queue = ?1 AND name = ?2)",
                params![queue.as_str(), name.as_str()],
                |r| r.get(0),
            )
            .map_err(sql_err)?;
        if !taken {
            return Ok(name);
        }
    }
}

#[async_trait]
impl TaskQueue for SqliteQueue {
    async fn create(&self, task: NewTask) -> Result<TaskInfo, QueueError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.inner.pending.lock().unwrap_or_else(|e| e.into_inner()).push((task, reply));
        self.with_conn(|conn, inner, now| {
            let batch = std::mem::take(&mut *inner.pending.lock().unwrap_or_else(|e| e.into_inner()));
            if !batch.is_empty() {
                create_batch(conn, inner, now, batch);
            }
            Ok(())
        })
        .await?;
        let info = answer.await.map_err(|_| QueueError::Internal("a create was dropped".into()))??;
        self.inner.created.notify_one();
        Ok(info)
    }

    async fn delete(&self, queue: &QueueName, name: &TaskName) -> Result<(), QueueError> {
        let (queue, name) = (queue.clone(), name.clone());
        self.with_conn(move |conn, inner, now| {
            let cfg = inner.config(&queue)?;
            let changed = conn
                .execute(
                    "UPDATE queue_tasks SET state = ?3, body = x'', finished = ?4, reserved_until = ?5,
                         lease_token = NULL, lease_until = NULL
                     WHERE queue = ?1 AND name = ?2 AND state IN ('pending', 'leased')",
                    params![
                        queue.as_str(),
                        name.as_str(),
                        DELETED,
                        micros(now),
                        micros(now + cfg.dedup_window)
                    ],
                )
                .map_err(sql_err)?;
            if changed == 0 { Err(QueueError::NotFound(name)) } else { Ok(()) }
        })
        .await
    }

    async fn depth(&self, queue: &QueueName) -> Result<u64, QueueError> {
        let queue = queue.clone();
        self.with_conn(move |conn, inner, _| {
            inner.config(&queue)?;
            let n: i64 = conn
                .prepare_cached(
                    // `+queue`: counted through the state's index, over the live tasks only,
                    // not through the primary key over every tombstone of the queue.
                    "SELECT COUNT(*) FROM queue_tasks WHERE +queue = ?1 AND state IN ('pending', 'leased')",
                )
                .and_then(|mut s| s.query_row(params![queue.as_str()], |r| r.get(0)))
                .map_err(sql_err)?;
            Ok(u64::try_from(n).unwrap_or(0))
        })
        .await
    }
}

#[cfg(test)]
mod tests;
