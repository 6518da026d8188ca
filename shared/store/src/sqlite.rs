//! The embedded Store adapter: one SQLite file in WAL mode.
//!
//! Documents live in one table keyed by `(collection, id)` with their fields
//! as JSON; queries compile to `json_extract` expressions, and each declared
//! [`Index`] becomes an expression index on exactly those expressions,
//! partial to its collection (a write maintains only its collection's
//! indexes). The platform's file is `$MAPI_HOME/mapi.db`.
//!
//! Writes go through one connection owned by a writer thread, which applies
//! every commit waiting for it in one `BEGIN IMMEDIATE` transaction, each in
//! its own savepoint, and syncs once for the batch (group commit). Reads run
//! on the calling thread from a small pool of connections: in WAL mode a
//! reader never waits for the writer. Transactions are optimistic: a
//! commit re-checks every document version and query result the transaction
//! read, inside the write lock, and answers `Aborted` if any changed.
//!
//! Guarded increments read nothing before the commit, so they never make a
//! transaction conflict: the writer applies one commit's increments of a
//! document in order to one copy of it, refuses the whole commit with
//! `LimitReached` when one would pass its `at_most`, and writes the copy
//! once. Two visible differences from Firestore: a write that changes
//! nothing still gets a new version, and a range filter on a field that is
//! not ordered on does not reorder the results.

use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use mapi_clock::Clock;
use mapi_domain::Timestamp;
use rusqlite::types::Value as SqlValue;
use rusqlite::{
    Connection, OpenFlags, OptionalExtension, StatementStatus, TransactionBehavior, params, params_from_iter,
};
use serde_json::Value;

use crate::query::check_field_path;
use crate::{
    DocKey, Document, Fields, Index, Op, Precondition, Query, ReadRecord, Store, StoreError, TxnId, Version,
    Write,
};

/// How hard a commit waits for the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// `synchronous=FULL`: a commit survives a power loss.
    Full,
    /// `synchronous=NORMAL`: survives a process crash, may lose the last
    /// commits on power loss.
    Normal,
}

impl Durability {
    pub fn pragma(self) -> &'static str {
        match self {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        }
    }
}

const READERS: usize = 4;

/// What the store has done since it opened, counted as it happens: the
/// costs the budget tests hold (`tests/tests/budgets.rs`). Counts, not
/// timings, so they repeat exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreCounts {
    /// Read calls (`get` of any number of keys, `query`): each one read
    /// transaction, one snapshot.
    pub reads: u64,
    /// Documents those reads returned or looked for (a `get` of a missing
    /// key counts: it is a lookup all the same).
    pub documents_read: u64,
    /// SQLite virtual-machine steps the queries (`query` calls) took: what
    /// they examined, where `documents_read` counts what they returned. A
    /// query that reads a whole collection to answer a few documents makes
    /// this grow with the collection.
    pub query_steps: u64,
    /// Commits applied (`commit` calls that wrote).
    pub commits: u64,
    /// Writes those commits applied.
    pub documents_written: u64,
    /// SQLite write transactions committed (SQLite's commit hook), the
    /// schema's at open included: each is one sync of the file, for every
    /// commit grouped into it.
    pub transactions: u64,
}

#[derive(Debug, Default)]
struct Counters {
    reads: AtomicU64,
    documents_read: AtomicU64,
    query_steps: AtomicU64,
    commits: AtomicU64,
    documents_written: AtomicU64,
    transactions: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn snapshot(&self) -> StoreCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StoreCounts {
            reads: get(&self.reads),
            documents_read: get(&self.documents_read),
            query_steps: get(&self.query_steps),
            commits: get(&self.commits),
            documents_written: get(&self.documents_written),
            transactions: get(&self.transactions),
        }
    }
}

/// The SQLite adapter. Cheap to clone.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Commits go to the writer thread, which applies all that are waiting
    /// in one SQLite transaction (group commit: one fsync for the batch).
    commits: std::sync::mpsc::Sender<CommitRequest>,
    /// The first is opened with the store; the others when a read finds
    /// every open one busy (opening one parses the schema: milliseconds a
    /// process start need not pay for connections it may never use).
    readers: Vec<std::sync::OnceLock<Mutex<Connection>>>,
    path: std::path::PathBuf,
    durability: Durability,
    next_reader: AtomicUsize,
    next_txn: AtomicU64,
    counters: Arc<Counters>,
}

/// The largest number of commits applied in one SQLite transaction.
const MAX_BATCH: usize = 256;

type CommitResult = Result<Vec<Option<Version>>, StoreError>;

struct CommitRequest {
    reads: Vec<ReadRecord>,
    writes: Vec<Write>,
    reply: tokio::sync::oneshot::Sender<CommitResult>,
}

impl std::fmt::Debug for CommitRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitRequest").field("writes", &self.writes.len()).finish_non_exhaustive()
    }
}

/// The writer thread: takes every commit that is waiting, applies each in a
/// savepoint of one transaction (a failing commit rolls back only its own
/// savepoint), commits once, then answers each. A caller is answered only
/// after the transaction holding its writes is durable.
fn writer_loop(
    mut conn: Connection,
    rx: std::sync::mpsc::Receiver<CommitRequest>,
    clock: Arc<dyn Clock>,
    counters: Arc<Counters>,
) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        let results = commit_batch(&mut conn, clock.now(), &batch);
        for (req, result) in batch.iter().zip(&results) {
            if result.is_ok() {
                Counters::add(&counters.commits, 1);
                Counters::add(&counters.documents_written, req.writes.len());
            }
        }
        for (req, result) in batch.into_iter().zip(results) {
            let _ = req.reply.send(result);
        }
    }
}

fn commit_batch(conn: &mut Connection, now: Timestamp, batch: &[CommitRequest]) -> Vec<CommitResult> {
    let all_fail = |e: StoreError| batch.iter().map(|_| Err(e.clone())).collect();
    let mut tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => return all_fail(sql_err(e)),
    };
    let mut results = Vec::with_capacity(batch.len());
    for req in batch {
        let one = (|| {
            let sp = tx.savepoint().map_err(sql_err)?;
            let versions = apply_commit(&sp, now, &req.reads, &req.writes)?;
            sp.commit().map_err(sql_err)?;
            Ok(versions)
        })();
        results.push(one);
    }
    match tx.commit() {
        Ok(()) => results,
        Err(e) => all_fail(sql_err(e)),
    }
}

fn sql_err(e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
            StoreError::Unavailable(mapi_domain::Cause::of(e))
        }
        _ => StoreError::Internal(mapi_domain::Cause::of(e)),
    }
}

/// Opens a connection with the platform's settings.
pub fn open_connection(path: &Path, durability: Durability) -> Result<Connection, rusqlite::Error> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", durability.pragma())?;
    // Each commit of a group runs in a savepoint, whose statement journal
    // would otherwise be a temporary file made and removed per savepoint.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    Ok(conn)
}

/// A collection name is `[a-z_]+` (as [`DocKey::new`] requires): safe to put in SQL.
fn check_collection(c: &str) -> Result<(), StoreError> {
    if !c.is_empty() && c.len() <= 64 && c.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
        Ok(())
    } else {
        Err(StoreError::InvalidArgument(format!("invalid collection name `{c}`")))
    }
}

fn json_expr(path: &str) -> String {
    // `path` is validated by check_field_path: identifiers and dots only.
    format!("json_extract(fields, '$.{path}')")
}

fn type_expr(path: &str) -> String {
    format!("json_type(fields, '$.{path}')")
}

impl SqliteStore {
    /// Opens (creating if needed) the store at `path` and its indexes.
    pub fn open(
        path: &Path,
        clock: Arc<dyn Clock>,
        indexes: &[Index],
        durability: Durability,
    ) -> Result<SqliteStore, StoreError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Internal(mapi_domain::Cause::new(dir.display().to_string(), e)))?;
        }
        let mut writer = open_connection(path, durability).map_err(sql_err)?;
        let counters = Arc::new(Counters::default());
        let synced = counters.clone();
        writer
            .commit_hook(Some(move || {
                Counters::add(&synced.transactions, 1);
                false
            }))
            .map_err(sql_err)?;
        // The schema is one transaction, one sync: a fresh home's tables and
        // its two dozen indexes cost one fsync at start, not one each.
        let schema = writer.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql_err)?;
        schema
            .execute_batch(
                "CREATE TABLE IF NOT EXISTS documents (
                    collection TEXT NOT NULL,
                    id TEXT NOT NULL,
                    fields TEXT NOT NULL,
                    version INTEGER NOT NULL,
                    create_time INTEGER NOT NULL,
                    update_time INTEGER NOT NULL,
                    PRIMARY KEY (collection, id)
                 ) WITHOUT ROWID;
                 CREATE TABLE IF NOT EXISTS store_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
                 INSERT OR IGNORE INTO store_meta (name, value) VALUES ('version_seq', 0);",
            )
            .map_err(sql_err)?;
        // Indexes are partial, one collection each: a write maintains only
        // its own collection's indexes (a counter update touches none). Each
        // ends with the id, the last key of every query's order, so a page
        // is read in index order with no sort, and a cursor is a seek.
        // Indexes of earlier forms (whole-table, or without the id) are
        // dropped.
        let mut declared = Vec::with_capacity(indexes.len());
        for index in indexes {
            check_collection(index.collection)?;
            let mut cols = Vec::new();
            let mut name = format!("ox_{}", index.collection);
            for (field, dir) in index.fields {
                check_field_path(field)?;
                let d = if *dir == crate::Direction::Desc { " DESC" } else { "" };
                cols.push(format!("{}{d}", json_expr(field)));
                name.push('_');
                name.push_str(&field.replace('.', "_"));
                if *dir == crate::Direction::Desc {
                    name.push_str("_desc");
                }
            }
            let last_desc = index.fields.last().is_some_and(|(_, d)| *d == crate::Direction::Desc);
            cols.push(if last_desc { "id DESC".to_owned() } else { "id".to_owned() });
            declared.push((name, cols.join(", "), index.collection));
        }
        let existing: Vec<String> = schema
            .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'documents' AND sql IS NOT NULL")
            .and_then(|mut st| st.query_map([], |r| r.get::<_, String>(0))?.collect())
            .map_err(sql_err)?;
        for name in existing.iter().filter(|n| !declared.iter().any(|(d, _, _)| d == *n)) {
            schema.execute_batch(&format!("DROP INDEX IF EXISTS \"{name}\"")).map_err(sql_err)?;
        }
        for (name, cols, collection) in &declared {
            let sql = format!(
                "CREATE INDEX IF NOT EXISTS {name} ON documents ({cols}) WHERE collection = '{collection}'"
            );
            schema.execute_batch(&sql).map_err(sql_err)?;
        }
        // The planner's statistics are stated, not measured. With none, it
        // takes `collection = '…'` on the primary key for a few rows, so a
        // query whose only filter is a range (`leftovers_since < t`) read
        // its whole collection and sorted it instead of seeking the range's
        // index: the housekeepers did, every tick. Said once — a collection
        // is large and shares the table with others — the plans are the
        // same at every size and on every machine (an `ANALYZE` would make
        // them follow the data).
        schema
            .execute_batch(
                "ANALYZE sqlite_schema;
                 DELETE FROM sqlite_stat1 WHERE tbl = 'documents';
                 INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES ('documents', 'documents', '1000000 100000 1');",
            )
            .map_err(sql_err)?;
        schema.commit().map_err(sql_err)?;
        let readers: Vec<std::sync::OnceLock<Mutex<Connection>>> =
            (0..READERS).map(|_| std::sync::OnceLock::new()).collect();
        let first = open_connection(path, durability).map_err(sql_err)?;
        let _ = readers[0].set(Mutex::new(first));
        let (commits, rx) = std::sync::mpsc::channel();
        let writer_counters = counters.clone();
        std::thread::Builder::new()
            .name("mapi-store-writer".to_owned())
            .spawn(move || writer_loop(writer, rx, clock, writer_counters))
            .map_err(|e| {
                StoreError::Internal(mapi_domain::Cause::new("cannot start the writer thread", e))
            })?;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                commits,
                readers,
                path: path.to_owned(),
                durability,
                next_reader: AtomicUsize::new(0),
                next_txn: AtomicU64::new(1),
                counters,
            }),
        })
    }

    /// What the store has done since it opened.
    pub fn counts(&self) -> StoreCounts {
        self.inner.counters.snapshot()
    }

    /// The bytes the database's pages in use take (pages on the free list
    /// left out), as of the latest commit: what the store's documents and
    /// their index entries cost on disk, held per item by the budget tests.
    ///
    /// # Errors
    ///
    /// `Internal` when SQLite cannot answer.
    pub fn stored_bytes(&self) -> Result<u64, StoreError> {
        self.with_reader(|c| {
            c.query_row(
                "SELECT (p.page_count - f.freelist_count) * s.page_size
                 FROM pragma_page_count() p, pragma_freelist_count() f, pragma_page_size() s",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| u64::try_from(n).unwrap_or(0))
            .map_err(sql_err)
        })
    }

    /// Runs a read on a pooled connection, on the calling thread.
    ///
    /// Reads are not sent to the blocking pool: in WAL mode a read never
    /// waits for the writer, and a read of a few rows from the page cache
    /// takes microseconds, far less than the two thread switches a
    /// `spawn_blocking` costs (measured in BENCHMARKS.md). A free connection
    /// is taken without waiting when there is one.
    fn with_reader<T>(&self, f: impl FnOnce(&Connection) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let readers = &self.inner.readers;
        let n = readers.len();
        let start = self.inner.next_reader.fetch_add(1, Ordering::Relaxed);
        for k in 0..n {
            if let Some(conn) = readers[(start + k) % n].get().and_then(|r| r.try_lock().ok()) {
                return f(&conn);
            }
        }
        // Every open reader is busy: open the next one, if any is left.
        if let Some(slot) = readers.iter().find(|r| r.get().is_none()) {
            let conn = open_connection(&self.inner.path, self.inner.durability).map_err(sql_err)?;
            // Another read may have opened this one meanwhile: either serves.
            let _ = slot.set(Mutex::new(conn));
            if let Some(conn) = slot.get().and_then(|r| r.try_lock().ok()) {
                return f(&conn);
            }
        }
        // All are open and busy: wait for one (the first is always open).
        let busy = readers[start % n].get().or_else(|| readers[0].get());
        let busy = busy.ok_or_else(|| StoreError::Internal("the store has no reader".into()))?;
        let conn = busy.lock().unwrap_or_else(|e| e.into_inner());
        f(&conn)
    }
}

fn row_to_doc(collection: &str, row: &rusqlite::Row<'_>) -> rusqlite::Result<Result<Document, StoreError>> {
    let id: String = row.get(0)?;
    let text: String = row.get(1)?;
    let version: i64 = row.get(2)?;
    let create: i64 = row.get(3)?;
    let update: i64 = row.get(4)?;
    let key = DocKey { collection: collection.to_owned(), id };
    Ok(match serde_json::from_str::<Fields>(&text) {
        Ok(fields) => Ok(Document {
            key,
            fields,
            version: Version(version as u64),
            create_time: Timestamp::from_micros(create),
            update_time: Timestamp::from_micros(update),
        }),
        Err(e) => Err(StoreError::Internal(mapi_domain::Cause::new(
            format!("document {key} holds invalid JSON"),
            e,
        ))),
    })
}

/// Runs `f` inside one deferred read transaction of `conn`.
fn in_read_transaction<T>(
    conn: &Connection,
    f: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    conn.execute_batch("BEGIN DEFERRED").map_err(sql_err)?;
    let out = f();
    // A read transaction has nothing to keep; ending it cannot lose data.
    let end = conn.execute_batch(if out.is_ok() { "COMMIT" } else { "ROLLBACK" });
    match (out, end) {
        (Ok(v), Ok(())) => Ok(v),
        (Err(e), _) => Err(e),
        (Ok(_), Err(e)) => Err(sql_err(e)),
    }
}

fn get_doc(conn: &Connection, key: &DocKey) -> Result<Option<Document>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, fields, version, create_time, update_time FROM documents WHERE collection = ?1 AND id = ?2",
        )
        .map_err(sql_err)?;
    stmt.query_row(params![key.collection, key.id], |r| row_to_doc(&key.collection, r))
        .optional()
        .map_err(sql_err)?
        .transpose()
}

fn scalar(v: &Value) -> Result<SqlValue, StoreError> {
    Ok(match v {
        Value::Null => SqlValue::Null,
        Value::Bool(b) => SqlValue::Integer(i64::from(*b)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => SqlValue::Integer(i),
            None => SqlValue::Real(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => SqlValue::Text(s.clone()),
        _ => return Err(StoreError::InvalidArgument("only scalars can be compared".to_owned())),
    })
}

/// The SQL condition that a field has the same type as `v`, as Firestore
/// compares only values of one type.
fn same_type(path: &str, v: &Value) -> String {
    let t = type_expr(path);
    match v {
        Value::Null => format!("{t} = 'null'"),
        Value::Bool(_) => format!("{t} IN ('true', 'false')"),
        Value::Number(_) => format!("{t} IN ('integer', 'real')"),
        _ => format!("{t} = 'text'"),
    }
}

fn op_sql(op: Op) -> &'static str {
    match op {
        Op::Eq => "=",
        Op::Lt => "<",
        Op::Le => "<=",
        Op::Gt => ">",
        Op::Ge => ">=",
        Op::In => "IN",
        Op::Contains => "=",
    }
}

/// The SQL and arguments of a query.
fn query_sql(q: &Query) -> Result<(String, Vec<SqlValue>), StoreError> {
    q.validate()?;
    // The collection is inlined (it is `[a-z_]+`), so the planner can use
    // the collection's partial indexes.
    check_collection(&q.collection)?;
    let mut sql = format!(
        "SELECT id, fields, version, create_time, update_time FROM documents WHERE collection = '{}'",
        q.collection
    );
    let mut args: Vec<SqlValue> = Vec::new();
    for f in &q.filters {
        let e = json_expr(&f.field);
        match (&f.op, &f.value) {
            (Op::In, Value::Array(vs)) => {
                let marks = vec!["?"; vs.len()].join(", ");
                sql.push_str(&format!(" AND {e} IN ({marks})"));
                for v in vs {
                    args.push(scalar(v)?);
                }
                let types: Vec<String> = vs.iter().map(|v| format!("({})", same_type(&f.field, v))).collect();
                sql.push_str(&format!(" AND ({})", types.join(" OR ")));
            }
            (Op::Contains, v) => {
                // One element of the array equals the value, in its type.
                // No index serves it: SQLite reads the other filters' index
                // and checks each document's array.
                let t = match v {
                    Value::Bool(_) => "('true', 'false')",
                    Value::Number(_) => "('integer', 'real')",
                    _ => "('text')",
                };
                let path = &f.field;
                sql.push_str(&format!(
                    " AND json_type(fields, '$.{path}') = 'array' AND EXISTS (SELECT 1 FROM json_each(fields, '$.{path}') AS e WHERE e.value = ? AND e.type IN {t})"
                ));
                args.push(scalar(v)?);
            }
            (Op::Eq, Value::Null) => sql.push_str(&format!(" AND {}", same_type(&f.field, &Value::Null))),
            (_, Value::Null) => {
                return Err(StoreError::InvalidArgument(format!("range filter on {} with null", f.field)));
            }
            (op, v) => {
                sql.push_str(&format!(" AND {e} {} ? AND {}", op_sql(*op), same_type(&f.field, v)));
                args.push(scalar(v)?);
            }
        }
    }
    for (field, _) in &q.order_by {
        sql.push_str(&format!(" AND {} IS NOT NULL", type_expr(field)));
    }
    let id_desc = q.order_by.last().is_some_and(|(_, d)| *d == crate::Direction::Desc);
    if let Some(c) = &q.start_after {
        // (a, b, id) strictly after (va, vb, vid), each in its own direction.
        let mut ors = Vec::new();
        let n = q.order_by.len();
        for i in 0..=n {
            let mut ands = Vec::new();
            for (j, (field, _)) in q.order_by.iter().enumerate().take(i) {
                ands.push(format!("{} = ?", json_expr(field)));
                args.push(scalar(&c.values[j])?);
            }
            if i < n {
                let (field, dir) = &q.order_by[i];
                let cmp = if *dir == crate::Direction::Desc { "<" } else { ">" };
                ands.push(format!("{} {cmp} ?", json_expr(field)));
                args.push(scalar(&c.values[i])?);
            } else {
                ands.push(format!("id {} ?", if id_desc { "<" } else { ">" }));
                args.push(SqlValue::Text(c.id.clone()));
            }
            ors.push(format!("({})", ands.join(" AND ")));
        }
        sql.push_str(&format!(" AND ({})", ors.join(" OR ")));
        // The bound on the first ordered field the OR implies, said
        // outright: SQLite then seeks the index to the cursor instead of
        // reading (and skipping) every earlier document of the filter.
        if let Some((field, dir)) = q.order_by.first() {
            let cmp = if *dir == crate::Direction::Desc { "<=" } else { ">=" };
            sql.push_str(&format!(" AND {} {cmp} ?", json_expr(field)));
            args.push(scalar(&c.values[0])?);
        }
    }
    let mut order: Vec<String> = q
        .order_by
        .iter()
        .map(|(f, d)| {
            format!("{} {}", json_expr(f), if *d == crate::Direction::Desc { "DESC" } else { "ASC" })
        })
        .collect();
    order.push(format!("id {}", if id_desc { "DESC" } else { "ASC" }));
    sql.push_str(&format!(" ORDER BY {}", order.join(", ")));
    if let Some(n) = q.limit {
        sql.push_str(&format!(" LIMIT {n}"));
    }
    Ok((sql, args))
}

/// The documents `q` selects, and the virtual-machine steps SQLite took to
/// find them.
fn run_query(conn: &Connection, q: &Query) -> Result<(Vec<Document>, u64), StoreError> {
    let (sql, args) = query_sql(q)?;
    let mut stmt = conn.prepare_cached(&sql).map_err(sql_err)?;
    // A cached statement keeps its counters from earlier runs.
    stmt.reset_status(StatementStatus::VmStep);
    let rows =
        stmt.query_map(params_from_iter(args.iter()), |r| row_to_doc(&q.collection, r)).map_err(sql_err)?;
    let mut out = Vec::new();
    for r in rows {
        out.push(r.map_err(sql_err)??);
    }
    let steps = u64::try_from(stmt.reset_status(StatementStatus::VmStep)).unwrap_or(0);
    Ok((out, steps))
}

fn current_version(conn: &Connection, key: &DocKey) -> Result<Option<Version>, StoreError> {
    let mut stmt = conn
        .prepare_cached("SELECT version FROM documents WHERE collection = ?1 AND id = ?2")
        .map_err(sql_err)?;
    let v: Option<i64> =
        stmt.query_row(params![key.collection, key.id], |r| r.get(0)).optional().map_err(sql_err)?;
    Ok(v.map(|v| Version(v as u64)))
}

fn check_precondition(conn: &Connection, key: &DocKey, p: Precondition) -> Result<(), StoreError> {
    if p == Precondition::None {
        return Ok(());
    }
    let current = current_version(conn, key)?;
    match (p, current) {
        (Precondition::Absent, Some(_)) => Err(StoreError::AlreadyExists(key.clone())),
        (Precondition::Exists | Precondition::Version(_), None) => Err(StoreError::NotFound(key.clone())),
        (Precondition::Version(want), Some(have)) if want != have => {
            Err(StoreError::FailedPrecondition(key.clone()))
        }
        _ => Ok(()),
    }
}

/// Takes `n` versions from the sequence; the last one taken.
fn reserve_versions(tx: &Connection, n: usize) -> Result<i64, StoreError> {
    tx.prepare_cached("UPDATE store_meta SET value = value + ?1 WHERE name = 'version_seq' RETURNING value")
        .map_err(sql_err)?
        .query_row([n as i64], |r| r.get(0))
        .map_err(sql_err)
}

fn upsert(
    tx: &Connection,
    key: &DocKey,
    fields: &Fields,
    seq: i64,
    now: Timestamp,
) -> Result<(), StoreError> {
    let text = serde_json::to_string(fields).map_err(|e| StoreError::InvalidArgument(e.to_string()))?;
    tx.prepare_cached(
        "INSERT INTO documents (collection, id, fields, version, create_time, update_time)
         VALUES (?1, ?2, ?3, ?4, ?5, ?5)
         ON CONFLICT (collection, id) DO UPDATE
         SET fields = excluded.fields, version = excluded.version, update_time = excluded.update_time",
    )
    .map_err(sql_err)?
    .execute(params![key.collection, key.id, text, seq, now.as_micros()])
    .map_err(sql_err)?;
    Ok(())
}

/// The copies of the documents a commit's increments and merges change,
/// each read from the database the first time, in the order first changed.
#[derive(Default)]
struct Copies<'k> {
    docs: Vec<(&'k DocKey, Fields)>,
    /// Where each key's copy is in `docs`: a commit may change thousands of
    /// documents (a backfill of ledger minutes), and a scan per write would
    /// make it quadratic.
    at: std::collections::HashMap<&'k DocKey, usize>,
}

impl<'k> Copies<'k> {
    /// The copy of `key`'s fields, read from the database the first time.
    fn of(&mut self, tx: &Connection, key: &'k DocKey) -> Result<&mut Fields, StoreError> {
        let i = match self.at.get(key) {
            Some(i) => *i,
            None => {
                self.docs.push((key, get_doc(tx, key)?.map(|d| d.fields).unwrap_or_default()));
                self.at.insert(key, self.docs.len() - 1);
                self.docs.len() - 1
            }
        };
        Ok(&mut self.docs[i].1)
    }
}

/// One commit's checks and writes, on a connection inside a transaction.
fn apply_commit(tx: &Connection, now: Timestamp, reads: &[ReadRecord], writes: &[Write]) -> CommitResult {
    // Each document is put or deleted at most once, and not also
    // incremented or merged.
    let mut keys: Vec<(&DocKey, bool)> = writes.iter().map(|w| (w.key(), w.combines())).collect();
    keys.sort();
    if keys.windows(2).any(|w| w[0].0 == w[1].0 && !(w[0].1 && w[1].1)) {
        return Err(StoreError::InvalidArgument(
            "a commit writes each document at most once (increments and merges of one document may repeat)"
                .to_owned(),
        ));
    }
    for read in reads {
        let unchanged = match read {
            ReadRecord::Doc { key, version } => current_version(tx, key)? == *version,
            ReadRecord::Query { query, seen } => {
                let now_seen: Vec<(DocKey, Version)> =
                    run_query(tx, query)?.0.into_iter().map(|d| (d.key, d.version)).collect();
                now_seen == *seen
            }
        };
        if !unchanged {
            return Err(StoreError::Aborted);
        }
    }
    // One version per document written, taken from the sequence at once.
    let mut written: Vec<&DocKey> = keys.iter().map(|(k, _)| *k).collect();
    written.dedup();
    let last = reserve_versions(tx, written.len())?;
    let first = last - written.len() as i64 + 1;
    let version_of = |key: &DocKey| {
        let i = written.binary_search(&key).unwrap_or(0);
        first + i as i64
    };
    // Increments and merges of one document are applied in order to one
    // copy of it (each guard checked as it comes), and the copy is written
    // once.
    let mut counted = Copies::default();
    let mut versions = Vec::with_capacity(writes.len());
    for w in writes {
        match w {
            Write::Put { key, fields, precondition } => {
                check_precondition(tx, key, *precondition)?;
                let seq = version_of(key);
                upsert(tx, key, fields, seq, now)?;
                versions.push(Some(Version(seq as u64)));
            }
            Write::Merge { key, fields: set } => {
                for name in set.keys() {
                    crate::check_merge_field(name)?;
                }
                let fields = counted.of(tx, key)?;
                fields.extend(set.iter().map(|(k, v)| (k.clone(), v.clone())));
                versions.push(Some(Version(version_of(key) as u64)));
            }
            Write::Increment { key, field, delta, at_most } => {
                check_field_path(field)?;
                let fields = counted.of(tx, key)?;
                let current = fields.get(field.as_str()).and_then(serde_json::Value::as_i64).unwrap_or(0);
                let next = current.saturating_add(*delta);
                if at_most.is_some_and(|max| next > max && *delta > 0) {
                    return Err(StoreError::LimitReached { key: key.clone(), field: field.clone() });
                }
                fields.insert(field.clone(), serde_json::Value::from(next));
                versions.push(Some(Version(version_of(key) as u64)));
            }
            Write::Delete { key, precondition } => {
                check_precondition(tx, key, *precondition)?;
                tx.prepare_cached("DELETE FROM documents WHERE collection = ?1 AND id = ?2")
                    .map_err(sql_err)?
                    .execute(params![key.collection, key.id])
                    .map_err(sql_err)?;
                versions.push(None);
            }
        }
    }
    for (key, fields) in &counted.docs {
        upsert(tx, key, fields, version_of(key), now)?;
    }
    Ok(versions)
}

#[async_trait]
impl Store for SqliteStore {
    /// Every key is read in one read transaction: one snapshot, and one
    /// look at the write-ahead log for all of them.
    async fn get(&self, keys: &[DocKey], _txn: Option<TxnId>) -> Result<Vec<Option<Document>>, StoreError> {
        let c = &self.inner.counters;
        Counters::add(&c.reads, 1);
        Counters::add(&c.documents_read, keys.len());
        self.with_reader(|conn| match keys {
            [one] => Ok(vec![get_doc(conn, one)?]),
            _ => in_read_transaction(conn, || keys.iter().map(|k| get_doc(conn, k)).collect()),
        })
    }

    async fn query(&self, query: &Query, _txn: Option<TxnId>) -> Result<Vec<Document>, StoreError> {
        let c = &self.inner.counters;
        Counters::add(&c.reads, 1);
        let (docs, steps) = self.with_reader(|conn| run_query(conn, query))?;
        Counters::add(&c.documents_read, docs.len());
        c.query_steps.fetch_add(steps, Ordering::Relaxed);
        Ok(docs)
    }

    async fn begin(&self) -> Result<TxnId, StoreError> {
        Ok(TxnId(self.inner.next_txn.fetch_add(1, Ordering::Relaxed)))
    }

    async fn commit(
        &self,
        txn: Option<(TxnId, &[ReadRecord])>,
        writes: &[Write],
    ) -> Result<Vec<Option<Version>>, StoreError> {
        let reads: Vec<ReadRecord> = txn.map(|(_, r)| r.to_vec()).unwrap_or_default();
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.inner
            .commits
            .send(CommitRequest { reads, writes: writes.to_vec(), reply })
            .map_err(|_| StoreError::Internal("the writer thread has stopped".into()))?;
        answer.await.map_err(|_| StoreError::Internal("the writer thread dropped a commit".into()))?
    }

    async fn rollback(&self, _txn: TxnId) -> Result<(), StoreError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &tempfile::TempDir) -> SqliteStore {
        let clock: Arc<dyn Clock> = Arc::new(mapi_clock::SystemClock);
        SqliteStore::open(
            &dir.path().join("store.db"),
            clock,
            crate::conformance::INDEXES,
            Durability::Normal,
        )
        .expect("open store")
    }

    crate::conformance_suite!({
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(&dir);
        (dir, store)
    });

    /// Opening a fresh store creates its tables and every index in one
    /// transaction: one sync at start, however many indexes.
    #[tokio::test]
    async fn a_fresh_stores_schema_is_one_transaction() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(&dir);
        assert!(crate::conformance::INDEXES.len() > 1);
        assert_eq!(store.counts().transactions, 1);
        drop(store);
        assert_eq!(open(&dir).counts().transactions, 1, "and reopening changes nothing, in one");
    }

    /// Commits that share a batch fail alone: one refused create does not
    /// undo the others committed in the same SQLite transaction.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failing_commit_in_a_batch_fails_alone() {
        use crate::StoreExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let s = open(&dir);
        for i in (0..64).step_by(2) {
            s.create(
                &DocKey::new("things", format!("d{i}")).expect("key"),
                crate::encode(&serde_json::json!({"n": i})).expect("f"),
            )
            .await
            .expect("seed");
        }
        let mut tasks = Vec::new();
        for i in 0..64 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                let key = DocKey::new("things", format!("d{i}")).expect("key");
                (
                    i,
                    s.create(&key, crate::encode(&serde_json::json!({"n": i, "new": true})).expect("f"))
                        .await,
                )
            }));
        }
        for t in tasks {
            let (i, r) = t.await.expect("task");
            if i % 2 == 0 {
                assert!(matches!(r, Err(StoreError::AlreadyExists(_))), "d{i}: {r:?}");
            } else {
                assert!(r.is_ok(), "d{i}: {r:?}");
            }
        }
        let all = s.query(&Query::new("things"), None).await.expect("query");
        assert_eq!(all.len(), 64);
        assert_eq!(all.iter().filter(|d| d.fields.contains_key("new")).count(), 32);
    }

    #[tokio::test]
    async fn documents_survive_reopening_the_file() {
        use crate::StoreExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let key = DocKey::new("things", "a").expect("key");
        {
            let s = open(&dir);
            s.create(&key, crate::encode(&serde_json::json!({"n": 1})).expect("fields"))
                .await
                .expect("create");
        }
        let s = open(&dir);
        let doc = s.get_one(&key).await.expect("get").expect("present after reopen");
        assert_eq!(doc.fields["n"], 1);
    }

    #[tokio::test]
    async fn declared_indexes_serve_queries_and_their_pages_in_order_with_no_sort() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = open(&dir);
        let q = Query::new("things").filter("group", Op::Eq, "a").order_by("n", crate::Direction::Asc);
        let next = q
            .clone()
            .limit(10)
            .start_after(crate::Cursor { values: vec![serde_json::json!(3)], id: "x".into() });
        for q in [q.clone(), next] {
            let plan: Vec<String> = {
                let conn = s.inner.readers[0].get().expect("opened").lock().expect("reader");
                // Ask SQLite for the plan of exactly the SQL the adapter runs.
                let (sql, args) = query_sql(&q).expect("sql");
                let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).expect("plan");
                stmt.query_map(params_from_iter(args.iter()), |r| r.get::<_, String>(3))
                    .expect("rows")
                    .flatten()
                    .collect()
            };
            // Either of the two indexes on (group, n) reads in order (the
            // descending one backwards); from a cursor, it seeks.
            let seek = if q.start_after.is_some() { "(<expr>=? AND <expr>>?)" } else { "(<expr>=?)" };
            let ok = |p: &String| {
                p.starts_with("SEARCH documents USING INDEX ox_things_group_n") && p.ends_with(seek)
            };
            assert!(plan.len() == 1 && ok(&plan[0]), "read in index order, with no sort: {plan:?}");
        }
        assert!(s.query(&q, None).await.expect("query").is_empty());
    }

    /// A query whose only filter is a range seeks the range's index: what
    /// it examines does not grow with its collection (counted in steps of
    /// SQLite's virtual machine, so the figures repeat exactly).
    #[tokio::test]
    async fn a_range_query_examines_what_it_returns_not_its_collection() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = open(&dir);
        let add = |from: i64, to: i64| {
            let s = s.clone();
            async move {
                crate::transact::<_, StoreError, _, _>(&s, |mut tx| async move {
                    for n in from..to {
                        let key = DocKey::new("things", format!("d{n:06}")).expect("key");
                        tx.create(&key, crate::encode(&serde_json::json!({"n": n, "pad": "x".repeat(200)}))?);
                    }
                    Ok(tx.finish(()))
                })
                .await
                .expect("fill");
            }
        };
        let q = Query::new("things").filter("n", Op::Lt, 10).order_by("n", crate::Direction::Asc).limit(5);
        let mut steps = Vec::new();
        for (from, to) in [(0, 100), (100, 20_000)] {
            add(from, to).await;
            let before = s.counts().query_steps;
            assert_eq!(s.query(&q, None).await.expect("query").len(), 5);
            steps.push(s.counts().query_steps - before);
        }
        assert!(steps[1] <= steps[0] + 50, "steps over 100 and 20,000 documents: {steps:?}");
    }

    #[test]
    fn a_store_opens_one_reader_and_another_only_when_every_open_one_is_busy() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = open(&dir);
        let opened = |s: &SqliteStore| s.inner.readers.iter().filter(|r| r.get().is_some()).count();
        assert_eq!(opened(&s), 1, "one reader at start");
        s.with_reader(|_| Ok(())).expect("read");
        assert_eq!(opened(&s), 1, "a read with the first one free opens none");
        let held = s.inner.readers[0].get().expect("opened").lock().expect("reader");
        s.with_reader(|_| Ok(())).expect("read while the first is busy");
        assert_eq!(opened(&s), 2, "a read that found every open reader busy opened one");
        drop(held);
    }

    #[tokio::test]
    async fn indexes_of_an_earlier_form_are_replaced_when_the_store_opens() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(open(&dir));
        {
            let conn = Connection::open(dir.path().join("store.db")).expect("open");
            conn.execute_batch(
                "DROP INDEX ox_things_group_n; \
                 CREATE INDEX px_things_group_n ON documents (json_extract(fields, '$.group')) WHERE collection = 'things'",
            )
            .expect("an index of the earlier form");
        }
        drop(open(&dir));
        let conn = Connection::open(dir.path().join("store.db")).expect("open");
        let names: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL ORDER BY name")
            .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
            .expect("names");
        assert!(names.contains(&"ox_things_group_n".to_owned()), "{names:?}");
        assert!(!names.iter().any(|n| n.starts_with("px_")), "{names:?}");
    }
}
