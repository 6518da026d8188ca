//! The Firestore adapter of the Store port (`MAPI_STORE=firestore`).
//!
//! Settings: `MAPI_FIRESTORE_PROJECT`, `MAPI_FIRESTORE_DATABASE` (default
//! `(default)`) and `MAPI_FIRESTORE_ENDPOINT` ([`settings::VARIABLES`]).
//!
//! It speaks Firestore's gRPC API through tonic with the generated v1
//! protos of `googleapis-tonic-google-firestore-v1` (four small crates;
//! tonic, prost and the rustls stack already come with
//! `google-cloud-gax-internal`). The `firestore` crate was evaluated and not
//! taken: its `gcloud-sdk` brings a second `jsonwebtoken` (10, beside the
//! workspace's 11) and its own token sources instead of `google-cloud-auth`.
//! Credentials are Application Default Credentials in the cloud and none
//! towards a plain-http emulator (`Credentials::for_settings`); an http
//! endpoint with ADC is refused, so a token never leaves in clear. Only
//! five RPCs are used, which is also what the test emulator serves:
//!
//! - reads: `BatchGetDocuments` (inside a transaction when one is given);
//! - queries: `RunQuery` ([`wire::structured_query`]);
//! - every write: `Commit`, with `exists` / `update_time` preconditions
//!   ([`Precondition`] maps one to one) and `increment` field transforms;
//! - transactions: `BeginTransaction`, `Commit` with the transaction,
//!   `Rollback`. Firestore checks what the transaction read, so the port's
//!   read records are not sent; a conflict answers `ABORTED`, which is the
//!   port's `Aborted` that [`mapi_store::transact`] retries.
//!
//! `Version` is the document's `update_time` in nanoseconds;
//! `Precondition::{Absent, Exists, Version}` are `exists: false`,
//! `exists: true` and `update_time`. Queries have Firestore's semantics,
//! which are the port's: documents lacking a filtered or ordered field are
//! left out, ties go by name in the last order's direction, and a cursor
//! orders by `__name__` explicitly and starts after the document's name.
//! Increments of one document are one write with an empty update mask and
//! one `increment` transform per field.
//!
//! A guarded increment (`at_most`) needs the counter's value: its commit
//! runs as a transaction that reads the counters first (its own, retried
//! on contention up to 64 times, each retry naming the transaction it
//! replaces, or the caller's), and refuses with `LimitReached` before
//! writing anything.
//!
//! Errors: `ABORTED` → `Aborted`; `ALREADY_EXISTS`, `NOT_FOUND` and
//! `FAILED_PRECONDITION` of a commit → the port's answer for the write
//! whose precondition failed; `UNAVAILABLE`, `DEADLINE_EXCEEDED` and
//! `RESOURCE_EXHAUSTED` → `Unavailable` (transient); `INVALID_ARGUMENT` →
//! `InvalidArgument`; anything else `Internal`. The documents with
//! preconditions are read again to tell which write failed; a query's
//! missing index is an `Internal` error that says so.
//!
//! Architecture invariant: only the five RPCs above are used, and every
//! write of a port commit is in one Firestore `Commit`, so a commit is all
//! or nothing.
//!
//! Architecture invariant: a guarded increment is never sent without the
//! counter having been read in the same transaction; an unguarded
//! increment reads nothing.
//!
//! Architecture invariant: no credentials are sent to a plain-http endpoint.
//!
//! Two differences from the SQLite adapter that callers may see: a write
//! that changes nothing keeps its `update_time` (so its version), and a
//! range filter on a field that is not in `order_by` makes Firestore order
//! by that field first (every query in the code orders by its range field).
//!
//! Keys and write rates: ids are natural keys, never sequential, except
//! `audit/{micros}-{random}`, whose time prefix puts every new entry at the
//! end of the key range (fine at the audit's rate; Firestore starts to
//! throttle such ranges around 500 writes a second). A run, attempt,
//! dataset, token, job or item marker takes a handful of writes in its
//! life; `job_counts/{job}:{k}` is sharded eight ways, and the usage
//! counters are sharded as `mapi_quota::counters` describes (16 shards for
//! the platform's, 4 for a tenant's or a token's), so no document is
//! written by every submit. `leases/reconcile-tick` is written once a tick.
//!
//! The composite indexes: `terraform/firestore.indexes.json` is
//! [`wire::indexes_file`] of `mapi_platform::indexes()` (the list SQLite
//! creates, single-field entries left out, as Firestore builds those
//! itself) with `mapi_platform::unindexed()` as field overrides (the
//! fields no query reads, which Firestore would otherwise index value by
//! value), and `tests/tests/store_firestore.rs` fails when the two differ.
//! The audit log's optional filters on `project`, `actor`, `action` and
//! `outcome` ordered by `at` have no composite index yet.
//!
//! # Tested against the emulator, and what it cannot prove
//!
//! `tests/tests/store_firestore.rs` runs the Store conformance cases
//! against `@firestore-emulator/server` 0.3.15 (installed and started by
//! `mapi_tests::firestore_emulator`). These cases are checked only against
//! real Firestore (and proven on SQLite), because of the emulator's gaps:
//!
//! - `version_preconditions`, `delete_semantics`: it ignores `update_time`
//!   preconditions, so a write or delete at a stale version succeeds;
//! - `replace_keeps_create_time`: it merges a write's fields into the
//!   stored ones instead of replacing the document;
//! - `commits_are_atomic`: it applies a commit's writes one by one and
//!   keeps those before the one that fails;
//! - `query_filters_and_orders`: it has no dotted field paths, returns
//!   documents lacking the ordered field, fails comparing a number with a
//!   string, and does not break ties by document name;
//! - `cursors_page_through_every_document_once`: it ignores a query's
//!   `start_at` cursor;
//! - `transaction_aborts_when_a_read_document_changed`,
//!   `transaction_aborts_on_a_phantom`: its transactions detect no
//!   conflict, so the commit succeeds;
//! - `transactions_serialize_concurrent_increments`: no conflict is
//!   detected, so concurrent increments are lost;
//! - `racing_guarded_increments_never_pass_the_limit`: no conflict is
//!   detected, so racing guards all read the same count.

pub mod settings;
pub mod wire;

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use googleapis_tonic_google_firestore_v1::google::firestore::v1 as fs;
use mapi_store::{
    DocKey, Document, Precondition, Query, ReadRecord, Store, StoreError, TxnId, Version, Write,
};
use serde_json::Value;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use fs::firestore_client::FirestoreClient;

pub use settings::Settings;
use wire::Names;

/// Google's Firestore endpoint.
pub const GOOGLE_ENDPOINT: &str = "https://firestore.googleapis.com";

/// How many times a guarded increment's own transaction is run on
/// contention before the commit answers `Aborted` (as `transact` does).
const GUARDED_ATTEMPTS: u32 = 64;

/// Firestore ends a transaction after 270 s idle; handles older than this
/// are forgotten (their futures were dropped without commit or rollback).
const TXN_HANDLE_TTL: Duration = Duration::from_secs(300);

/// How the client authenticates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// Application Default Credentials (the service's own account on Cloud Run).
    ApplicationDefault,
    /// No credentials: only for an emulator on a plain-http endpoint.
    Anonymous,
}

impl Credentials {
    /// Anonymous for an `http://` endpoint (an emulator), else ADC.
    pub fn for_settings(settings: &Settings) -> Credentials {
        match &settings.endpoint {
            Some(e) if e.starts_with("http://") => Credentials::Anonymous,
            _ => Credentials::ApplicationDefault,
        }
    }
}

/// The Firestore store. Cheap to clone.
#[derive(Clone)]
pub struct FirestoreStore {
    inner: std::sync::Arc<Inner>,
}

struct Inner {
    client: FirestoreClient<Channel>,
    names: Names,
    /// `x-goog-request-params`: routes the call to the database.
    routing: http::HeaderValue,
    /// `google-cloud-resource-prefix`: the database, as Google's clients send it.
    prefix: http::HeaderValue,
    auth: Option<google_cloud_auth::credentials::Credentials>,
    /// Open transactions: the port's handle to Firestore's id.
    txns: Mutex<HashMap<u64, (Vec<u8>, Instant)>>,
    next_txn: AtomicU64,
}

impl std::fmt::Debug for FirestoreStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FirestoreStore")
            .field("database", &self.inner.names.database)
            .field("authenticated", &self.inner.auth.is_some())
            .finish_non_exhaustive()
    }
}

/// A gRPC status as the port's error (for reads and queries; commits
/// refine precondition failures with the write they concern).
fn status_err(s: &tonic::Status) -> StoreError {
    use tonic::Code;
    let msg = || format!("{:?}: {}", s.code(), s.message());
    match s.code() {
        Code::Aborted => StoreError::Aborted,
        Code::InvalidArgument => StoreError::InvalidArgument(s.message().to_owned()),
        // The client's own timeout reaches us as CANCELLED: like a deadline,
        // it leaves unknown whether the call took effect, so it is unavailable.
        Code::Unavailable | Code::DeadlineExceeded | Code::ResourceExhausted | Code::Cancelled => {
            StoreError::Unavailable(msg().into())
        }
        Code::FailedPrecondition if s.message().contains("index") => StoreError::Internal(
            format!("the query needs an index that is not deployed: {}", s.message()).into(),
        ),
        _ => StoreError::Internal(msg().into()),
    }
}

/// The routing parameters of every call: the project and database ids,
/// form-encoded (ids are letters, digits and `-`, or `(default)`).
fn routing_params(settings: &Settings) -> String {
    let enc = |v: &str| v.replace('(', "%28").replace(')', "%29");
    format!("project_id={}&database_id={}", enc(&settings.project), enc(&settings.database))
}

impl FirestoreStore {
    /// A store on the database of `settings`. The channel connects on first
    /// use; credentials are resolved now, so missing ADC fails here.
    pub async fn connect(
        settings: &Settings,
        credentials: Credentials,
    ) -> Result<FirestoreStore, StoreError> {
        settings.validate().map_err(StoreError::InvalidArgument)?;
        let url = settings.endpoint.clone().unwrap_or_else(|| GOOGLE_ENDPOINT.to_owned());
        let bad = |e: tonic::transport::Error| StoreError::InvalidArgument(format!("endpoint {url}: {e}"));
        let mut endpoint = Endpoint::from_shared(url.clone())
            .map_err(bad)?
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .http2_keep_alive_interval(Duration::from_secs(30));
        if url.starts_with("https://") {
            endpoint = endpoint.tls_config(ClientTlsConfig::new().with_native_roots()).map_err(bad)?;
        } else if credentials == Credentials::ApplicationDefault {
            return Err(StoreError::InvalidArgument(format!(
                "{url} is plain http (an emulator): credentials are never sent there, use Credentials::Anonymous"
            )));
        }
        let auth = match credentials {
            Credentials::Anonymous => None,
            Credentials::ApplicationDefault => {
                Some(google_cloud_auth::credentials::Builder::default().build().map_err(|e| {
                    StoreError::Internal(mapi_domain::Cause::new("Application Default Credentials", e))
                })?)
            }
        };
        let routing = http::HeaderValue::from_str(&routing_params(settings))
            .map_err(|e| StoreError::InvalidArgument(format!("database name: {e}")))?;
        let prefix = http::HeaderValue::from_str(&settings.database_path())
            .map_err(|e| StoreError::InvalidArgument(format!("database name: {e}")))?;
        Ok(FirestoreStore {
            inner: std::sync::Arc::new(Inner {
                client: FirestoreClient::new(endpoint.connect_lazy()),
                names: Names::new(settings.database_path()),
                routing,
                prefix,
                auth,
                txns: Mutex::new(HashMap::new()),
                next_txn: AtomicU64::new(1),
            }),
        })
    }

    /// A request with the routing header and, in the cloud, the credentials' headers.
    async fn request<T>(&self, message: T) -> Result<tonic::Request<T>, StoreError> {
        let mut headers = match &self.inner.auth {
            None => http::HeaderMap::new(),
            Some(auth) => {
                use google_cloud_auth::credentials::CacheableResource;
                match auth.headers(http::Extensions::new()).await {
                    Ok(CacheableResource::New { data, .. }) => data,
                    Ok(CacheableResource::NotModified) => {
                        return Err(StoreError::Internal("credentials returned no headers".into()));
                    }
                    Err(e) if e.is_transient() => {
                        return Err(StoreError::Unavailable(mapi_domain::Cause::new("credentials", e)));
                    }
                    Err(e) => return Err(StoreError::Internal(mapi_domain::Cause::new("credentials", e))),
                }
            }
        };
        headers.insert("x-goog-request-params", self.inner.routing.clone());
        headers.insert("google-cloud-resource-prefix", self.inner.prefix.clone());
        Ok(tonic::Request::from_parts(
            tonic::metadata::MetadataMap::from_headers(headers),
            tonic::Extensions::default(),
            message,
        ))
    }

    fn client(&self) -> FirestoreClient<Channel> {
        self.inner.client.clone()
    }

    fn txn_bytes(&self, id: TxnId, take: bool) -> Result<Vec<u8>, StoreError> {
        let mut txns = self.inner.txns.lock().unwrap_or_else(|e| e.into_inner());
        let found = if take { txns.remove(&id.0) } else { txns.get(&id.0).cloned() };
        found.map(|(bytes, _)| bytes).ok_or_else(|| {
            StoreError::InvalidArgument(format!("transaction {} is unknown or already finished", id.0))
        })
    }

    async fn batch_get(
        &self,
        keys: &[DocKey],
        txn: Option<Vec<u8>>,
    ) -> Result<Vec<Option<Document>>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let names: Vec<String> = keys.iter().map(|k| self.inner.names.doc(k)).collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        let req = fs::BatchGetDocumentsRequest {
            database: self.inner.names.database.clone(),
            documents: unique,
            mask: None,
            consistency_selector: txn.map(fs::batch_get_documents_request::ConsistencySelector::Transaction),
        };
        let req = self.request(req).await?;
        let mut stream =
            self.client().batch_get_documents(req).await.map_err(|s| status_err(&s))?.into_inner();
        let mut got: HashMap<String, Option<Document>> = HashMap::new();
        while let Some(m) = stream.message().await.map_err(|s| status_err(&s))? {
            use fs::batch_get_documents_response::Result as R;
            match m.result {
                Some(R::Found(d)) => {
                    got.insert(d.name.clone(), Some(self.inner.names.document(&d)?));
                }
                Some(R::Missing(name)) => {
                    got.insert(name, None);
                }
                None => {}
            }
        }
        names
            .iter()
            .map(|n| {
                got.get(n).cloned().ok_or_else(|| {
                    StoreError::Internal(format!("BatchGetDocuments did not answer for {n}").into())
                })
            })
            .collect()
    }

    /// Begins a read-write transaction; `retry` is the id of the one it
    /// replaces after contention (empty if none), which keeps its place in
    /// Firestore's lock queue.
    async fn begin_txn(&self, retry: Vec<u8>) -> Result<Vec<u8>, StoreError> {
        let req = fs::BeginTransactionRequest {
            database: self.inner.names.database.clone(),
            options: Some(fs::TransactionOptions {
                mode: Some(fs::transaction_options::Mode::ReadWrite(fs::transaction_options::ReadWrite {
                    retry_transaction: retry,
                })),
            }),
        };
        let req = self.request(req).await?;
        Ok(self.client().begin_transaction(req).await.map_err(|s| status_err(&s))?.into_inner().transaction)
    }

    async fn rollback_txn(&self, bytes: Vec<u8>) -> Result<(), StoreError> {
        let req = self
            .request(fs::RollbackRequest { database: self.inner.names.database.clone(), transaction: bytes })
            .await?;
        match self.client().rollback(req).await {
            Ok(_) => Ok(()),
            // Expired, unknown or already ended: nothing is left to release.
            Err(s)
                if matches!(
                    s.code(),
                    tonic::Code::InvalidArgument | tonic::Code::NotFound | tonic::Code::Aborted
                ) =>
            {
                Ok(())
            }
            Err(s) => Err(status_err(&s)),
        }
    }

    /// Sends a commit; precondition failures are answered for the write they concern.
    async fn send_commit(
        &self,
        plan: &Plan,
        writes: &[Write],
        txn: Vec<u8>,
    ) -> Result<Vec<Option<Version>>, StoreError> {
        let req = fs::CommitRequest {
            database: self.inner.names.database.clone(),
            writes: plan.writes.clone(),
            transaction: txn,
        };
        let req = self.request(req).await?;
        match self.client().commit(req).await {
            Ok(resp) => {
                let resp = resp.into_inner();
                let commit_time = resp.commit_time;
                plan.origin
                    .iter()
                    .zip(writes)
                    .map(|(i, w)| {
                        if matches!(w, Write::Delete { .. }) {
                            return Ok(None);
                        }
                        let result = resp.write_results.get(*i).ok_or_else(|| {
                            StoreError::Internal("Commit answered fewer write results than writes".into())
                        })?;
                        let t = result.update_time.as_ref().or(commit_time.as_ref()).ok_or_else(|| {
                            StoreError::Internal("Commit answered a write without its update time".into())
                        })?;
                        wire::version_of(t).map(Some)
                    })
                    .collect()
            }
            Err(s) => match s.code() {
                tonic::Code::AlreadyExists | tonic::Code::NotFound | tonic::Code::FailedPrecondition => {
                    Err(self.precondition_failure(&s, writes).await)
                }
                _ => Err(status_err(&s)),
            },
        }
    }

    /// Which write's precondition failed: Firestore names the document only
    /// in free text, so the documents with preconditions are read again and
    /// the first write whose precondition does not hold now is answered.
    async fn precondition_failure(&self, s: &tonic::Status, writes: &[Write]) -> StoreError {
        let conditioned: Vec<(&DocKey, Precondition)> = writes
            .iter()
            .filter_map(|w| match w {
                Write::Put { key, precondition, .. } | Write::Delete { key, precondition }
                    if *precondition != Precondition::None =>
                {
                    Some((key, *precondition))
                }
                _ => None,
            })
            .collect();
        let keys: Vec<DocKey> = conditioned.iter().map(|(k, _)| (*k).clone()).collect();
        if let Ok(now) = self.batch_get(&keys, None).await {
            for ((key, p), doc) in conditioned.iter().zip(&now) {
                let current = doc.as_ref().map(|d| d.version);
                match (p, current) {
                    (Precondition::Absent, Some(_)) => return StoreError::AlreadyExists((*key).clone()),
                    (Precondition::Exists | Precondition::Version(_), None) => {
                        return StoreError::NotFound((*key).clone());
                    }
                    (Precondition::Version(want), Some(have)) if *want != have => {
                        return StoreError::FailedPrecondition((*key).clone());
                    }
                    _ => {}
                }
            }
        }
        // The documents changed back since (or could not be read): answer
        // by the code, for the first write that could have caused it.
        let first = |want: fn(&Precondition) -> bool| {
            conditioned.iter().find(|(_, p)| want(p)).map(|(k, _)| (*k).clone())
        };
        let answer = match s.code() {
            tonic::Code::AlreadyExists => {
                first(|p| *p == Precondition::Absent).map(StoreError::AlreadyExists)
            }
            tonic::Code::NotFound => first(|p| matches!(p, Precondition::Exists | Precondition::Version(_)))
                .map(StoreError::NotFound),
            _ => first(|p| matches!(p, Precondition::Version(_))).map(StoreError::FailedPrecondition),
        };
        answer.unwrap_or_else(|| status_err(s))
    }

    /// A commit with guarded increments: read the counters in a
    /// transaction, refuse before writing if a guard would be passed,
    /// commit in the same transaction.
    async fn commit_guarded(
        &self,
        txn: Option<TxnId>,
        plan: &Plan,
        writes: &[Write],
    ) -> Result<Vec<Option<Version>>, StoreError> {
        if let Some(id) = txn {
            let bytes = self.txn_bytes(id, true)?;
            if let Err(e) = self.check_guards(plan, writes, bytes.clone()).await {
                let _ = self.rollback_txn(bytes).await;
                return Err(e);
            }
            return self.send_commit(plan, writes, bytes).await;
        }
        let mut attempt = 0;
        let mut previous = Vec::new();
        loop {
            attempt += 1;
            let bytes = self.begin_txn(std::mem::take(&mut previous)).await?;
            if let Err(e) = self.check_guards(plan, writes, bytes.clone()).await {
                // Rolled back, so not a transaction to name as retried.
                let _ = self.rollback_txn(bytes).await;
                if e == StoreError::Aborted && attempt < GUARDED_ATTEMPTS {
                    tokio::time::sleep(backoff(attempt)).await;
                    continue;
                }
                return Err(e);
            }
            previous = bytes.clone();
            match self.send_commit(plan, writes, bytes).await {
                Err(StoreError::Aborted) if attempt < GUARDED_ATTEMPTS => {
                    tracing::debug!(attempt, "guarded increment aborted by contention; retrying");
                    tokio::time::sleep(backoff(attempt)).await;
                }
                other => return other,
            }
        }
    }

    async fn check_guards(&self, plan: &Plan, writes: &[Write], txn: Vec<u8>) -> Result<(), StoreError> {
        let docs = self.batch_get(&plan.guarded, Some(txn)).await?;
        let mut running: HashMap<(&DocKey, &str), i64> = HashMap::new();
        for w in writes {
            let Write::Increment { key, field, delta, at_most } = w else { continue };
            let Some(i) = plan.guarded.iter().position(|k| k == key) else { continue };
            let value = running.entry((key, field.as_str())).or_insert_with(|| {
                docs[i]
                    .as_ref()
                    .and_then(|d| field_value(&d.fields, field))
                    .and_then(Value::as_i64)
                    .unwrap_or(0)
            });
            let next = value.saturating_add(*delta);
            if at_most.is_some_and(|max| next > max && *delta > 0) {
                return Err(StoreError::LimitReached { key: key.clone(), field: field.clone() });
            }
            *value = next;
        }
        Ok(())
    }
}

/// The value at a dotted path of a document's fields.
fn field_value<'a>(fields: &'a mapi_store::Fields, path: &str) -> Option<&'a Value> {
    let mut parts = path.split('.');
    let mut v = fields.get(parts.next()?)?;
    for p in parts {
        v = v.as_object()?.get(p)?;
    }
    Some(v)
}

/// A random back-off of up to `1 ms × 2^min(attempt, 6)`.
fn backoff(attempt: u32) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    Duration::from_micros(200 + random % (1000u64 << attempt.min(6)))
}

/// The Firestore writes of a commit: one per put or delete, one per
/// document for all its increments (one transform per field, deltas of a
/// field summed), and which Firestore write answers for each port write.
#[derive(Debug)]
struct Plan {
    writes: Vec<fs::Write>,
    origin: Vec<usize>,
    /// Documents with an increment guarded by `at_most` (positive delta).
    guarded: Vec<DocKey>,
}

fn precondition(p: Precondition) -> Option<fs::Precondition> {
    use fs::precondition::ConditionType;
    let c = match p {
        Precondition::None => return None,
        Precondition::Absent => ConditionType::Exists(false),
        Precondition::Exists => ConditionType::Exists(true),
        Precondition::Version(v) => ConditionType::UpdateTime(wire::update_time_of(v)),
    };
    Some(fs::Precondition { condition_type: Some(c) })
}

fn plan(names: &Names, writes: &[Write]) -> Result<Plan, StoreError> {
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
    let mut out = Plan { writes: Vec::new(), origin: Vec::with_capacity(writes.len()), guarded: Vec::new() };
    let mut counted: HashMap<&DocKey, usize> = HashMap::new();
    for w in writes {
        match w {
            Write::Put { key, fields, precondition: p } => {
                out.origin.push(out.writes.len());
                out.writes.push(fs::Write {
                    operation: Some(fs::write::Operation::Update(fs::Document {
                        name: names.doc(key),
                        fields: wire::to_fields(fields)?,
                        create_time: None,
                        update_time: None,
                    })),
                    update_mask: None,
                    update_transforms: Vec::new(),
                    current_document: precondition(*p),
                });
            }
            Write::Delete { key, precondition: p } => {
                out.origin.push(out.writes.len());
                out.writes.push(fs::Write {
                    operation: Some(fs::write::Operation::Delete(names.doc(key))),
                    update_mask: None,
                    update_transforms: Vec::new(),
                    current_document: precondition(*p),
                });
            }
            Write::Merge { key, fields } => {
                let i = combined(&mut out, &mut counted, names, key);
                out.origin.push(i);
                let w = &mut out.writes[i];
                let Some(fs::write::Operation::Update(doc)) = &mut w.operation else {
                    continue;
                };
                doc.fields.extend(wire::to_fields(fields)?);
                let mask = w.update_mask.get_or_insert_with(Default::default);
                for name in fields.keys() {
                    mapi_store::check_merge_field(name)?;
                    if !mask.field_paths.contains(name) {
                        mask.field_paths.push(name.clone());
                    }
                }
            }
            Write::Increment { key, field, delta, at_most } => {
                // The port's field paths are simple identifiers joined by
                // dots: Firestore's own syntax, no quoting needed.
                let probe = Query::new(key.collection()).order_by(field, mapi_store::Direction::Asc);
                probe.validate()?;
                if at_most.is_some() && *delta > 0 && !out.guarded.contains(key) {
                    out.guarded.push(key.clone());
                }
                let i = combined(&mut out, &mut counted, names, key);
                out.origin.push(i);
                let transforms = &mut out.writes[i].update_transforms;
                use fs::document_transform::field_transform::TransformType;
                use fs::value::ValueType;
                match transforms.iter_mut().find(|t| t.field_path == *field) {
                    Some(t) => {
                        if let Some(TransformType::Increment(fs::Value {
                            value_type: Some(ValueType::IntegerValue(n)),
                        })) = &mut t.transform_type
                        {
                            *n = n.saturating_add(*delta);
                        }
                    }
                    None => transforms.push(fs::document_transform::FieldTransform {
                        field_path: field.clone(),
                        transform_type: Some(TransformType::Increment(fs::Value {
                            value_type: Some(ValueType::IntegerValue(*delta)),
                        })),
                    }),
                }
            }
        }
    }
    Ok(out)
}

/// The one write of `key` that the commit's increments and merges join:
/// an update with a field mask (empty until a merge names fields: the
/// document's other fields stay as they are; it is created if absent),
/// its transforms applied after it.
fn combined<'k>(
    out: &mut Plan,
    counted: &mut HashMap<&'k DocKey, usize>,
    names: &Names,
    key: &'k DocKey,
) -> usize {
    *counted.entry(key).or_insert_with(|| {
        out.writes.push(fs::Write {
            operation: Some(fs::write::Operation::Update(fs::Document {
                name: names.doc(key),
                ..Default::default()
            })),
            update_mask: Some(fs::DocumentMask { field_paths: Vec::new() }),
            update_transforms: Vec::new(),
            current_document: None,
        });
        out.writes.len() - 1
    })
}

#[async_trait]
impl Store for FirestoreStore {
    async fn get(&self, keys: &[DocKey], txn: Option<TxnId>) -> Result<Vec<Option<Document>>, StoreError> {
        let txn = txn.map(|id| self.txn_bytes(id, false)).transpose()?;
        self.batch_get(keys, txn).await
    }

    async fn query(&self, query: &Query, txn: Option<TxnId>) -> Result<Vec<Document>, StoreError> {
        let structured = wire::structured_query(query, &self.inner.names)?;
        let txn = txn.map(|id| self.txn_bytes(id, false)).transpose()?;
        let req = fs::RunQueryRequest {
            parent: self.inner.names.root.clone(),
            explain_options: None,
            query_type: Some(fs::run_query_request::QueryType::StructuredQuery(structured)),
            consistency_selector: txn.map(fs::run_query_request::ConsistencySelector::Transaction),
        };
        let req = self.request(req).await?;
        let mut stream = self.client().run_query(req).await.map_err(|s| status_err(&s))?.into_inner();
        let mut docs = Vec::new();
        while let Some(m) = stream.message().await.map_err(|s| status_err(&s))? {
            if let Some(d) = m.document {
                docs.push(self.inner.names.document(&d)?);
            }
        }
        Ok(docs)
    }

    async fn begin(&self) -> Result<TxnId, StoreError> {
        let bytes = self.begin_txn(Vec::new()).await?;
        let id = self.inner.next_txn.fetch_add(1, Ordering::Relaxed);
        let mut txns = self.inner.txns.lock().unwrap_or_else(|e| e.into_inner());
        txns.retain(|_, (_, at)| at.elapsed() < TXN_HANDLE_TTL);
        txns.insert(id, (bytes, Instant::now()));
        Ok(TxnId(id))
    }

    async fn commit(
        &self,
        txn: Option<(TxnId, &[ReadRecord])>,
        writes: &[Write],
    ) -> Result<Vec<Option<Version>>, StoreError> {
        let plan = match plan(&self.inner.names, writes) {
            Ok(p) => p,
            Err(e) => {
                if let Some((id, _)) = txn
                    && let Ok(bytes) = self.txn_bytes(id, true)
                {
                    let _ = self.rollback_txn(bytes).await;
                }
                return Err(e);
            }
        };
        if !plan.guarded.is_empty() {
            return self.commit_guarded(txn.map(|(id, _)| id), &plan, writes).await;
        }
        let bytes = match txn {
            Some((id, _)) => self.txn_bytes(id, true)?,
            None => Vec::new(),
        };
        self.send_commit(&plan, writes, bytes).await
    }

    async fn rollback(&self, txn: TxnId) -> Result<(), StoreError> {
        match self.txn_bytes(txn, true) {
            Ok(bytes) => self.rollback_txn(bytes).await,
            Err(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names() -> Names {
        Names::new("projects/p/databases/(default)".to_owned())
    }

    fn key(id: &str) -> DocKey {
        DocKey::new("things", id).expect("key")
    }

    #[test]
    fn preconditions_map_to_exists_and_update_time() {
        use fs::precondition::ConditionType;
        assert_eq!(precondition(Precondition::None), None);
        let c = |p| precondition(p).and_then(|p| p.condition_type);
        assert_eq!(c(Precondition::Absent), Some(ConditionType::Exists(false)));
        assert_eq!(c(Precondition::Exists), Some(ConditionType::Exists(true)));
        assert_eq!(
            c(Precondition::Version(Version(5_000_000_007))),
            Some(ConditionType::UpdateTime(prost_types::Timestamp { seconds: 5, nanos: 7 }))
        );
    }

    #[test]
    fn increments_of_a_document_are_one_write_with_a_transform_per_field() {
        let inc = |id: &str, field: &str, delta, at_most| Write::Increment {
            key: key(id),
            field: field.into(),
            delta,
            at_most,
        };
        let writes = [
            inc("c", "a", 2, None),
            Write::Delete { key: key("d"), precondition: Precondition::Exists },
            inc("c", "b", 5, Some(9)),
            inc("c", "a", 3, None),
            inc("e", "n", -1, Some(3)),
        ];
        let p = plan(&names(), &writes).expect("plan");
        assert_eq!(p.writes.len(), 3, "c's increments, d's delete, e's increment");
        assert_eq!(p.origin, [0, 1, 0, 0, 2]);
        assert_eq!(p.guarded, [key("c")], "a negative delta is never refused, so e needs no read");
        let c = &p.writes[0];
        assert_eq!(c.update_mask, Some(fs::DocumentMask { field_paths: vec![] }), "fields left as they are");
        let t: Vec<(&str, Option<i64>)> = c
            .update_transforms
            .iter()
            .map(|t| {
                use fs::document_transform::field_transform::TransformType;
                let n = match &t.transform_type {
                    Some(TransformType::Increment(fs::Value {
                        value_type: Some(fs::value::ValueType::IntegerValue(n)),
                    })) => Some(*n),
                    _ => None,
                };
                (t.field_path.as_str(), n)
            })
            .collect();
        assert_eq!(t, [("a", Some(5)), ("b", Some(5))]);
    }

    #[test]
    fn a_document_written_twice_is_refused() {
        let put = Write::Put {
            key: key("a"),
            fields: mapi_store::encode(&json!({})).expect("f"),
            precondition: Precondition::None,
        };
        let del = Write::Delete { key: key("a"), precondition: Precondition::None };
        assert!(matches!(plan(&names(), &[put.clone(), del]), Err(StoreError::InvalidArgument(_))));
        let inc = Write::Increment { key: key("a"), field: "n".into(), delta: 1, at_most: None };
        assert!(matches!(plan(&names(), &[inc, put]), Err(StoreError::InvalidArgument(_))));
        let bad = Write::Increment { key: key("b"), field: "n n".into(), delta: 1, at_most: None };
        assert!(matches!(plan(&names(), &[bad]), Err(StoreError::InvalidArgument(_))));
    }

    #[test]
    fn statuses_map_to_the_ports_errors() {
        use tonic::{Code, Status};
        assert_eq!(status_err(&Status::new(Code::Aborted, "contention")), StoreError::Aborted);
        for c in [Code::Unavailable, Code::DeadlineExceeded, Code::ResourceExhausted] {
            assert!(status_err(&Status::new(c, "x")).is_transient(), "{c:?}");
        }
        assert!(matches!(
            status_err(&Status::new(Code::InvalidArgument, "x")),
            StoreError::InvalidArgument(_)
        ));
        let e = status_err(&Status::new(Code::FailedPrecondition, "The query requires an index."));
        assert!(matches!(&e, StoreError::Internal(m) if m.to_string().contains("index")), "{e:?}");
        assert!(!status_err(&Status::new(Code::PermissionDenied, "x")).is_transient());
    }

    #[test]
    fn calls_are_routed_to_the_database() {
        assert_eq!(
            routing_params(&Settings::new("mapi-prod")),
            "project_id=mapi-prod&database_id=%28default%29"
        );
        let named = Settings { database: "mapi-eu".into(), ..Settings::new("p") };
        assert_eq!(routing_params(&named), "project_id=p&database_id=mapi-eu");
    }

    #[tokio::test]
    async fn plain_http_never_gets_credentials() {
        let mut s = Settings::new("p");
        s.endpoint = Some("http://127.0.0.1:1".into());
        assert_eq!(Credentials::for_settings(&s), Credentials::Anonymous);
        let e = FirestoreStore::connect(&s, Credentials::ApplicationDefault).await.expect_err("refused");
        assert!(matches!(e, StoreError::InvalidArgument(m) if m.contains("Anonymous")));
        assert_eq!(Credentials::for_settings(&Settings::new("p")), Credentials::ApplicationDefault);
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_is_transient() {
        // Bind and drop a listener: nothing answers on that port now.
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
        let mut s = Settings::new("p");
        s.endpoint = Some(format!("http://127.0.0.1:{port}"));
        let store = FirestoreStore::connect(&s, Credentials::Anonymous).await.expect("lazy connect");
        let e = store.get(&[key("a")], None).await.expect_err("nothing listens");
        assert!(e.is_transient(), "{e:?}");
    }
}
