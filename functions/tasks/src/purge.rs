//! The purge of a deleted tenant (`POST /internal/tasks/tenants/purge`),
//! once its grace period is over: its model servers (every service the
//! host lists with the tenant's label: they cost money and a public one
//! would keep answering), every object under `t/{tenant}/` and the
//! tenant's exports, every document of [`OWNED`] marked `Delete`, the usage
//! counters and token minutes named after the tenant and its tokens; the
//! ledger entries are kept as they are and the audit entries with every
//! e-mail replaced by a pseudonym; the tenant document stays as a tombstone
//! (`deleting`, no admin e-mail, no reason), so its id is never reused; the
//! deletion document ends `purged`: the certificate.
//!
//! The work is a fixed plan of steps ([`Step`]), done a bounded page at a
//! time. Each page is one transaction that re-reads the deletion document,
//! does nothing if its progress moved since it was read (another delivery
//! did this page), and commits the page's deletions with the counts and the
//! progress: a purge killed anywhere goes on where it stopped, counts each
//! thing once, and a delivery after it finished changes nothing. Objects and
//! model servers are not in the store's transactions, so their page is
//! recorded first as pending, then deleted, then counted. A delivery does at most
//! [`PAGES_PER_DELIVERY`] pages and pushes the next one.

use std::collections::BTreeMap;

use axum::extract::State;
use mapi_domain::{TenantId, TenantStatus, Timestamp, UserId};
use mapi_hosting::{Hosting, HostingError};
use mapi_identity::{InternalCaller, Pepper};
use mapi_jobs::JobCountsDoc;
use mapi_objects::{IfGeneration, ObjectError, ObjectKey, ObjectStore};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json};
use mapi_quota::counters;
use mapi_schema::tasks::{PurgeTask, push_purge};
use mapi_schema::{AuditDoc, DeletionDoc, DeletionState, Doc, PurgeProgress, TenantDoc, tx_get, tx_put};
use mapi_store::{Cursor, Document, Op, Query, Store, StoreError, Txn, transact};

use super::tenant_data::{Fate, OWNED, Owned, pseudonym, without_emails};

/// Documents per page (a Firestore commit takes at most 500 writes).
pub const PAGE: u32 = 100;
/// Jobs per page: each also deletes up to 8 count shards.
const JOB_PAGE: u32 = 40;
/// Pages one delivery does before it hands over to the next.
pub const PAGES_PER_DELIVERY: u32 = 200;

/// The ports a purge works with: the platform's, or wrapped ones in tests.
#[derive(Clone, Copy)]
pub struct Ports<'a> {
    pub store: &'a dyn Store,
    pub objects: &'a dyn ObjectStore,
    pub hosting: &'a dyn Hosting,
    pub pepper: &'a Pepper,
    pub now: Timestamp,
}

impl std::fmt::Debug for Ports<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ports").field("now", &self.now).finish_non_exhaustive()
    }
}

impl<'a> Ports<'a> {
    pub fn of(state: &'a AppState) -> Ports<'a> {
        Ports {
            store: &*state.store,
            objects: &*state.objects,
            hosting: &*state.hosting,
            pepper: &state.pepper,
            now: state.clock.now(),
        }
    }
}

/// Where a delivery left the purge.
#[derive(Debug)]
pub enum Outcome {
    /// Not due (still in its grace period), cancelled, or already purged.
    Idle(DeletionDoc),
    /// Pages are left: the next delivery goes on.
    More(DeletionDoc),
    /// Purged: the document is the certificate.
    Done(DeletionDoc),
}

pub async fn handle(
    State(state): State<AppState>,
    _internal: InternalCaller,
    Json(task): Json<PurgeTask>,
) -> Result<Json<DeletionDoc>, ApiError> {
    match run(Ports::of(&state), &task.tenant, PAGES_PER_DELIVERY).await {
        Ok(Outcome::More(d)) => {
            push_purge(&*state.queue, &task.tenant, &format!("n{}", d.purge_runs)).await?;
            Ok(Json(d))
        }
        Ok(Outcome::Idle(d) | Outcome::Done(d)) => Ok(Json(d)),
        Err(e) => {
            // Kept for the operator who retries it; the queue retries too.
            if let Err(note) = note_failure(&*state.store, &task.tenant, &e).await {
                tracing::warn!(tenant = %task.tenant, error = %note, "recording a purge failure failed");
            }
            tracing::warn!(tenant = %task.tenant, error = %e, "a purge delivery failed; it is retried");
            Err(e)
        }
    }
}

/// Goes on with `tenant`'s purge for up to `pages` pages.
pub async fn run(ports: Ports<'_>, tenant: &TenantId, pages: u32) -> Result<Outcome, ApiError> {
    if !begin(ports, tenant).await? {
        return Ok(Outcome::Idle(deletion(ports.store, tenant).await?));
    }
    for _ in 0..pages {
        let d = deletion(ports.store, tenant).await?;
        if d.state == DeletionState::Purged {
            return Ok(Outcome::Done(d));
        }
        page(ports, &d).await?;
    }
    let d = deletion(ports.store, tenant).await?;
    Ok(if d.state == DeletionState::Purged { Outcome::Done(d) } else { Outcome::More(d) })
}

async fn deletion(store: &dyn Store, tenant: &TenantId) -> Result<DeletionDoc, ApiError> {
    mapi_schema::get::<DeletionDoc>(store, tenant.as_str())
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no deletion of tenant {tenant} was requested")))
}

/// Starts a due purge, or counts one more delivery of a started one;
/// `false` when there is nothing to do.
async fn begin(ports: Ports<'_>, tenant: &TenantId) -> Result<bool, ApiError> {
    let now = ports.now;
    transact::<_, ApiError, _, _>(ports.store, |mut tx| async move {
        let Some(mut d) = tx_get::<DeletionDoc>(&mut tx, tenant.as_str()).await? else {
            return Err(ApiError::not_found(format!("no deletion of tenant {tenant} was requested")));
        };
        match d.state {
            DeletionState::Scheduled if now >= d.purge_after => {
                d.state = DeletionState::Purging;
                d.purge_started_at = Some(now);
            }
            DeletionState::Purging => {}
            DeletionState::Scheduled | DeletionState::Purged | DeletionState::Cancelled => {
                return Ok(tx.finish(false));
            }
        }
        d.purge_runs += 1;
        tx_put(&mut tx, &d)?;
        Ok(tx.finish(true))
    })
    .await
}

async fn note_failure(store: &dyn Store, tenant: &TenantId, e: &ApiError) -> Result<(), ApiError> {
    let why = e.problem().detail;
    transact::<_, ApiError, _, _>(store, |mut tx| {
        let why = why.clone();
        async move {
            if let Some(mut d) = tx_get::<DeletionDoc>(&mut tx, tenant.as_str()).await?
                && d.state == DeletionState::Purging
            {
                d.last_error = Some(why);
                tx_put(&mut tx, &d)?;
            }
            Ok(tx.finish(()))
        }
    })
    .await
}

/// The purge's plan, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The tenant's model servers: the services the host lists with its label.
    ModelServers,
    /// Every object under `t/{tenant}/`.
    DataObjects,
    /// Every part of the tenant's exports.
    ExportObjects,
    /// The usage counters and request minutes of each of the tenant's tokens.
    TokenUsage,
    /// One collection of tenant documents.
    Collection(&'static Owned),
    /// The tenant's usage counters (`tenant:{tenant}`, its shards and periods).
    TenantCounters,
    /// The tenant document as a tombstone, and the certificate.
    Tombstone,
}

impl Step {
    pub fn at(i: u32) -> Option<Step> {
        let owned = OWNED.len() as u32;
        // Steps are numbered in the deletion documents of purges under way:
        // a new step goes before the tombstone, never between older ones.
        match i {
            0 => Some(Step::DataObjects),
            1 => Some(Step::ExportObjects),
            2 => Some(Step::TokenUsage),
            i if i < 3 + owned => OWNED.get((i - 3) as usize).map(Step::Collection),
            i if i == 3 + owned => Some(Step::TenantCounters),
            i if i == 4 + owned => Some(Step::ModelServers),
            i if i == 5 + owned => Some(Step::Tombstone),
            _ => None,
        }
    }
}

fn advance(d: &mut DeletionDoc) {
    d.progress = PurgeProgress { step: d.progress.step + 1, cursor: None, pending: Vec::new() };
}

fn add(counts: &mut BTreeMap<String, u64>, what: &str, n: usize) {
    *counts.entry(what.to_owned()).or_default() += n as u64;
}

/// The deletion document as `seen` left it, or `None` when another
/// delivery has moved its progress since (it did this page).
async fn fenced(tx: &mut Txn<'_>, seen: &DeletionDoc) -> Result<Option<DeletionDoc>, StoreError> {
    let d = tx_get::<DeletionDoc>(tx, seen.tenant.as_str()).await?;
    Ok(d.filter(|d| d.state == DeletionState::Purging && d.progress == seen.progress))
}

/// The documents after `after` (by id) whose ids start with `prefix`, a page.
async fn by_prefix(
    tx: &mut Txn<'_>,
    collection: &str,
    prefix: &str,
    after: Option<&str>,
) -> Result<Vec<Document>, StoreError> {
    let q = Query::new(collection)
        .start_after(Cursor { values: vec![], id: after.unwrap_or(prefix).to_owned() })
        .limit(PAGE);
    let docs = tx.query(&q).await?;
    Ok(docs.into_iter().take_while(|d| d.key.id().starts_with(prefix)).collect())
}

async fn page(ports: Ports<'_>, d: &DeletionDoc) -> Result<(), ApiError> {
    let tenant = &d.tenant;
    let Some(step) = Step::at(d.progress.step) else {
        return Err(ApiError::internal(format!(
            "purge of {tenant}: step {} is past the plan",
            d.progress.step
        )));
    };
    match step {
        Step::DataObjects => objects(ports, d, &format!("t/{tenant}/"), "objects").await,
        Step::ExportObjects => objects(ports, d, &mapi_schema::export_prefix(tenant), "export_objects").await,
        Step::TokenUsage => token_usage(ports.store, d).await,
        Step::Collection(owned) if owned.fate == Fate::Delete => {
            delete_documents(ports.store, d, owned).await
        }
        Step::Collection(owned) => keep_documents(ports, d, owned).await,
        Step::TenantCounters => tenant_counters(ports.store, d).await,
        Step::ModelServers => model_servers(ports, d).await,
        Step::Tombstone => tombstone(ports, d).await,
    }
}

/// Commits `change` to the deletion document if its progress is still `seen`'s.
async fn record(
    store: &dyn Store,
    seen: &DeletionDoc,
    change: impl Fn(&mut DeletionDoc) + Send + Sync,
) -> Result<(), ApiError> {
    let change = &change;
    transact::<_, ApiError, _, _>(store, |mut tx| async move {
        if let Some(mut d) = fenced(&mut tx, seen).await? {
            change(&mut d);
            tx_put(&mut tx, &d)?;
        }
        Ok(tx.finish(()))
    })
    .await
}

/// One page of objects under `prefix`: listed and recorded as pending,
/// then deleted and counted as `what`.
async fn objects(ports: Ports<'_>, d: &DeletionDoc, prefix: &str, what: &str) -> Result<(), ApiError> {
    if d.progress.pending.is_empty() {
        let page = ports.objects.list(prefix, None, PAGE).await?;
        let keys: Vec<String> = page.objects.iter().map(|o| o.key.as_str().to_owned()).collect();
        return record(ports.store, d, |next| {
            if keys.is_empty() {
                advance(next);
            } else {
                next.progress.pending.clone_from(&keys);
            }
        })
        .await;
    }
    for key in &d.progress.pending {
        match ports.objects.delete(&ObjectKey::parse(key)?, IfGeneration::Any).await {
            Ok(()) | Err(ObjectError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let n = d.progress.pending.len();
    record(ports.store, d, |next| {
        add(&mut next.deleted, what, n);
        next.progress.pending.clear();
    })
    .await
}

/// The tenant's model servers: listed by its label and recorded as
/// pending, then deleted (one already gone counts: a killed delivery
/// deleted it) and counted as `model_servers`. A later listing that finds
/// none ends the step.
async fn model_servers(ports: Ports<'_>, d: &DeletionDoc) -> Result<(), ApiError> {
    let failed = |e: HostingError| {
        let retry = e.is_retryable().then_some(5);
        match retry {
            Some(after) => ApiError::unavailable(format!("the model servers' host: {e}"), after),
            None => ApiError::internal(format!("deleting the model servers of tenant {}: {e}", d.tenant)),
        }
    };
    if d.progress.pending.is_empty() {
        let label = mapi_endpoints::TENANT_LABEL;
        let names: Vec<String> = (ports.hosting.list().await.map_err(failed)?)
            .into_iter()
            .filter(|s| s.labels.get(label).is_some_and(|t| t == d.tenant.as_str()))
            .map(|s| s.name)
            .collect();
        return record(ports.store, d, |next| {
            if names.is_empty() {
                advance(next);
            } else {
                next.progress.pending.clone_from(&names);
            }
        })
        .await;
    }
    for name in &d.progress.pending {
        match ports.hosting.delete(name).await {
            Ok(()) | Err(HostingError::NotFound(_)) => {}
            Err(e) => return Err(failed(e)),
        }
    }
    let n = d.progress.pending.len();
    record(ports.store, d, |next| {
        add(&mut next.deleted, "model_servers", n);
        next.progress.pending.clear();
    })
    .await
}

/// One page of a collection's documents of the tenant, deleted (a job's
/// count shards with it).
async fn delete_documents(store: &dyn Store, seen: &DeletionDoc, owned: &Owned) -> Result<(), ApiError> {
    let size = if owned.collection == mapi_jobs::JobDoc::COLLECTION { JOB_PAGE } else { PAGE };
    let q = Query::new(owned.collection).filter("tenant", Op::Eq, seen.tenant.as_str()).limit(size);
    let q = &q;
    transact::<_, ApiError, _, _>(store, |mut tx| async move {
        let Some(mut d) = fenced(&mut tx, seen).await? else { return Ok(tx.finish(())) };
        let docs = tx.query(q).await?;
        if docs.is_empty() {
            advance(&mut d);
        }
        // Every read before the first write: a job's count shards first.
        let mut shards = Vec::new();
        if owned.collection == mapi_jobs::JobDoc::COLLECTION {
            for doc in &docs {
                for id in JobCountsDoc::shard_ids(&mapi_domain::JobId::parse(doc.key.id())?) {
                    shards.push(mapi_schema::key::<JobCountsDoc>(&id)?);
                }
            }
        }
        let present: Vec<_> = if shards.is_empty() {
            Vec::new()
        } else {
            tx.get_all(&shards).await?.into_iter().flatten().collect()
        };
        for doc in docs.iter().chain(&present) {
            tx.delete(&doc.key);
        }
        if !present.is_empty() {
            add(&mut d.deleted, JobCountsDoc::COLLECTION, present.len());
        }
        add(&mut d.deleted, owned.collection, docs.len());
        tx_put(&mut tx, &d)?;
        Ok(tx.finish(()))
    })
    .await
}

/// One page of a kept collection's entries of the tenant, counted, and
/// for the audit log rewritten without e-mails.
async fn keep_documents(ports: Ports<'_>, seen: &DeletionDoc, owned: &Owned) -> Result<(), ApiError> {
    let mut q = Query::new(owned.collection).filter("tenant", Op::Eq, seen.tenant.as_str()).limit(PAGE);
    if let Some(after) = &seen.progress.cursor {
        q = q.start_after(Cursor { values: vec![], id: after.clone() });
    }
    let (q, pepper) = (&q, ports.pepper);
    transact::<_, ApiError, _, _>(ports.store, |mut tx| async move {
        let Some(mut d) = fenced(&mut tx, seen).await? else { return Ok(tx.finish(())) };
        let docs = tx.query(q).await?;
        let Some(last) = docs.last() else {
            advance(&mut d);
            tx_put(&mut tx, &d)?;
            return Ok(tx.finish(()));
        };
        d.progress.cursor = Some(last.key.id().to_owned());
        add(&mut d.kept, owned.collection, docs.len());
        if owned.fate == Fate::Anonymize {
            for doc in &docs {
                tx_put(&mut tx, &anonymized(doc.decode::<AuditDoc>()?, pepper)?)?;
            }
        }
        tx_put(&mut tx, &d)?;
        Ok(tx.finish(()))
    })
    .await
}

/// An audit entry with its actor and every e-mail in its resource and
/// detail replaced by their pseudonyms.
fn anonymized(mut entry: AuditDoc, pepper: &Pepper) -> Result<AuditDoc, ApiError> {
    let name = |email: &str| pseudonym(&pepper.hash(email));
    if let Some(actor) = &entry.actor {
        entry.actor = Some(UserId::parse(&name(actor.as_str()))?);
    }
    entry.resource = without_emails(&entry.resource, &name);
    entry.detail = entry.detail.map(|t| without_emails(&t, &name));
    Ok(entry)
}

/// One page of one token's usage counters (`token:{id}@…`) or request
/// minutes (`{id}:…`); the cursor moves past a token once it has none.
async fn token_usage(store: &dyn Store, seen: &DeletionDoc) -> Result<(), ApiError> {
    let mut q =
        Query::new(mapi_schema::TokenDoc::COLLECTION).filter("tenant", Op::Eq, seen.tenant.as_str()).limit(1);
    if let Some(after) = &seen.progress.cursor {
        q = q.start_after(Cursor { values: vec![], id: after.clone() });
    }
    let q = &q;
    transact::<_, ApiError, _, _>(store, |mut tx| async move {
        let Some(mut d) = fenced(&mut tx, seen).await? else { return Ok(tx.finish(())) };
        let Some(token) = tx.query(q).await?.pop() else {
            advance(&mut d);
            tx_put(&mut tx, &d)?;
            return Ok(tx.finish(()));
        };
        let public = token.decode::<mapi_schema::TokenDoc>()?.public_id().to_owned();
        let named = [
            (counters::CounterDoc::COLLECTION, format!("token:{public}@")),
            (mapi_schema::TokenMinuteDoc::COLLECTION, format!("{public}:")),
        ];
        for (collection, prefix) in named {
            let docs = by_prefix(&mut tx, collection, &prefix, None).await?;
            if !docs.is_empty() {
                for doc in &docs {
                    tx.delete(&doc.key);
                }
                add(&mut d.deleted, collection, docs.len());
                tx_put(&mut tx, &d)?;
                return Ok(tx.finish(()));
            }
        }
        d.progress.cursor = Some(token.key.id().to_owned());
        tx_put(&mut tx, &d)?;
        Ok(tx.finish(()))
    })
    .await
}

/// One page of the counters whose ids start `tenant:{tenant}`: its own
/// (`tenant:{tenant}`, `…#{shard}`, `…@{period}…`), skipping other
/// tenants' whose ids merely start the same (`tenant:{tenant}x…`).
async fn tenant_counters(store: &dyn Store, seen: &DeletionDoc) -> Result<(), ApiError> {
    let name = counters::tenant(&seen.tenant);
    let name = &name;
    transact::<_, ApiError, _, _>(store, |mut tx| async move {
        let Some(mut d) = fenced(&mut tx, seen).await? else { return Ok(tx.finish(())) };
        let collection = counters::CounterDoc::COLLECTION;
        let docs = by_prefix(&mut tx, collection, name, seen.progress.cursor.as_deref()).await?;
        let Some(last) = docs.last() else {
            // The counter named exactly so sorts before every page.
            let exact = mapi_store::DocKey::new(collection, name.clone())?;
            if tx.get(&exact).await?.is_some() {
                tx.delete(&exact);
                add(&mut d.deleted, collection, 1);
            }
            advance(&mut d);
            tx_put(&mut tx, &d)?;
            return Ok(tx.finish(()));
        };
        d.progress.cursor = Some(last.key.id().to_owned());
        let own = |id: &str| id.strip_prefix(name.as_str()).is_some_and(|r| r.starts_with(['#', '@']));
        let mine: Vec<_> = docs.iter().filter(|doc| own(doc.key.id())).collect();
        for doc in &mine {
            tx.delete(&doc.key);
        }
        add(&mut d.deleted, collection, mine.len());
        tx_put(&mut tx, &d)?;
        Ok(tx.finish(()))
    })
    .await
}

/// The tenant document as its tombstone (`deleting`, naming no one), and
/// the deletion as `purged`: the certificate.
async fn tombstone(ports: Ports<'_>, seen: &DeletionDoc) -> Result<(), ApiError> {
    let now = ports.now;
    transact::<_, ApiError, _, _>(ports.store, |mut tx| async move {
        let Some(mut d) = fenced(&mut tx, seen).await? else { return Ok(tx.finish(())) };
        if let Some(mut t) = tx_get::<TenantDoc>(&mut tx, seen.tenant.as_str()).await? {
            t.status = TenantStatus::Deleting;
            t.admin_email = None;
            t.status_reason = None;
            t.updated_at = now;
            tx_put(&mut tx, &t)?;
        }
        advance(&mut d);
        d.state = DeletionState::Purged;
        d.purged_at = Some(now);
        d.last_error = None;
        tx_put(&mut tx, &d)?;
        Ok(tx.finish(()))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_takes_objects_then_every_collection_then_the_tombstone() {
        let plan: Vec<Step> = (0..).map_while(Step::at).collect();
        assert_eq!(plan.len(), OWNED.len() + 6);
        assert_eq!(plan[..3], [Step::DataObjects, Step::ExportObjects, Step::TokenUsage]);
        // The model servers, added later, go just before the tombstone: purges under way keep their step numbers.
        assert_eq!(plan[plan.len() - 3..], [Step::TenantCounters, Step::ModelServers, Step::Tombstone]);
        let tokens = plan.iter().position(|s| matches!(s, Step::Collection(o) if o.collection == "tokens"));
        let usage = plan.iter().position(|s| *s == Step::TokenUsage);
        assert!(usage < tokens, "a token's usage goes before the token that names it");
    }
}
