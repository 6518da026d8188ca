//! The tenant-facing job routes. Jobs are authorized exactly like runs
//! (`run` create, read and cancel in the job's project): a caller who may
//! not see a job gets the answer a missing job gets.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use mapi_access::{Action, Resource};
use mapi_domain::{JobId, ProjectId, TenantId, Timestamp};
use mapi_identity::{Audit, Caller, Target, authorize};
use mapi_jobs::{Counts, Fanout, ItemFailure, ItemOutcome, JobDoc, JobItemDoc, JobState, layout};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path, Query, RawBody, page_size};
use mapi_schema::{IdempotencyDoc, tx_create, tx_get, tx_put};
use mapi_store::{Direction, Op, transact};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::datasets::{entropy, require_project};
use super::idempotency::{self, Key};
use super::job_body;
use mapi_admission::quota;
use mapi_jobstore::{
    Unreadable, base, create_only, derived, end_of, load, marker, ndjson, object_key, read_items, read_object,
};

/// What a job is asked to do (the request's schema; the body is read by
/// `job_body`, in bounded memory).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// An item method from the registry (`GET /v1/usage` lists them).
    pub method: String,
    /// The items, each any JSON value; each becomes its own task.
    #[schema(min_items = 1)]
    pub items: Vec<Value>,
    #[serde(default)]
    pub options: JobOptions,
}

/// How every item of the job runs.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobOptions {
    /// The method's parameters, the same for every item (typed, validated).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub params: BTreeMap<String, Value>,
}

/// A job's time and cost so far.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct JobCost {
    /// The methods' time summed over finished items.
    pub duration_ms: i64,
    /// Estimated at list prices, in micro-USD.
    pub cost_micros: i64,
}

/// A job: its derived state and counts, timings and cost.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct JobView {
    pub id: JobId,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub method: String,
    pub state: JobState,
    pub counts: Counts,
    /// 0, or how many times `retry-failed` was asked.
    pub round: u32,
    pub created_at: Timestamp,
    /// When the fan-out had given every item its task.
    pub enqueued_at: Option<Timestamp>,
    /// When the last item finished, once the job is final.
    pub finished_at: Option<Timestamp>,
    pub cancel_requested_at: Option<Timestamp>,
    /// Why the job stopped before every item had its task: its items could
    /// not be read. The items never given a task count as cancelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub cost: JobCost,
}

/// One finished item.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ItemView {
    pub idx: u64,
    pub state: ItemOutcome,
    pub round: u32,
    pub attempts: u32,
    pub duration_ms: u64,
    /// The method's result, when it succeeded.
    pub result: Option<Value>,
    pub error: Option<ItemFailure>,
}

/// A page of finished items, in index order.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ItemPage {
    pub items: Vec<ItemView>,
    pub next_page_token: Option<String>,
}

async fn view(state: &AppState, job: &JobDoc) -> Result<JobView, ApiError> {
    let (s, counts, c) = derived(state, job).await?;
    let finished_at = if s.is_final() {
        let last = mapi_store::Query::new(<JobItemDoc as mapi_schema::Doc>::COLLECTION)
            .filter("job", Op::Eq, job.id.as_str())
            .order_by("at", Direction::Desc)
            .limit(1);
        let docs = state.store.query(&last, None).await?;
        match docs.first() {
            Some(d) => Some(d.decode::<JobItemDoc>()?.at),
            None => job.cancel_requested_at.or(job.fanout.finished_at),
        }
    } else {
        None
    };
    Ok(JobView {
        id: job.id.clone(),
        tenant: job.tenant.clone(),
        project: job.project.clone(),
        method: job.method.clone(),
        state: s,
        counts,
        round: job.round,
        created_at: job.created_at,
        enqueued_at: job.fanout.finished_at,
        finished_at,
        cancel_requested_at: job.cancel_requested_at,
        error: job.fanout.error.clone(),
        cost: JobCost { duration_ms: c.duration_ms, cost_micros: c.cost_micros },
    })
}

/// Loads a job `caller` may do `action` on; another tenant's job, or one in
/// a project the caller cannot see, answers as a missing one.
async fn load_for(state: &AppState, caller: &Caller, id: &str, action: Action) -> Result<JobDoc, ApiError> {
    let what = format!("job {}", id.chars().take(64).collect::<String>());
    let not_found = || ApiError::not_found(format!("{what} not found"));
    let id = JobId::parse(id).map_err(|_| not_found())?;
    let job = load(state, &id).await?.ok_or_else(not_found)?;
    authorize(state, caller, Target::project(&job.tenant, &job.project, &what), Resource::Run, action)
        .await?;
    Ok(job)
}

/// The manifest object: what the job is, without its items.
#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    job: JobId,
    method: String,
    params: BTreeMap<String, Value>,
    items: u64,
    chunk_items: u32,
    registry_version: String,
}

/// Submit an item job. Answers at once whatever the number of items: the
/// items are written as a few manifest objects (their number grows with
/// the body's bytes, never per item) and one fan-out task is enqueued.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant}/projects/{project}/jobs",
    tag = "jobs",
    params(
        ("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path),
        ("Idempotency-Key" = Option<String>, Header, pattern = "^[\x21-\x7E]([\x20-\x7E]{0,253}[\x21-\x7E])?$", description = "The same key and body return the same job for 24 hours")
    ),
    request_body = JobSpec,
    responses(
        (status = 201, body = JobView, description = "Accepted: the job is enqueuing"),
        (status = 200, body = JobView, description = "A repeated Idempotency-Key: the job it made (Idempotency-Replayed: true)"),
        (status = 400, body = mapi_problem::Problem, description = "Not an item method, bad params, no items, an item too large"),
        (status = 409, body = mapi_problem::Problem, description = "Idempotency-Key reused with another body"),
        (status = 413, body = mapi_problem::Problem, description = "Body larger than MAPI_JOB_MAX_BODY_BYTES, or more items than the tenant's or the platform's items per job (PAYLOAD_TOO_LARGE, naming the limit): split the job"),
        (status = 415, body = mapi_problem::Problem, description = "Not sent as application/json"),
        (status = 429, body = mapi_problem::Problem, description = "A quota would be exceeded: vCPU-seconds, the token's budget, the spend cap (QUOTA_EXCEEDED) or requests per minute (RATE_LIMITED), with Retry-After when the limit resets"),
    ),
    security(("session" = []), ("token" = []))
)]
pub async fn submit(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<axum::response::Response, ApiError> {
    let granted = require_project(&state, &caller, &tenant, &project, Resource::Run, Action::Create).await?;
    let now = state.clock.now();
    let key = Key::of(&headers, idempotency::Route::Jobs, &tenant, &project, &body)?;
    // A key seen before is answered before any limit is decided (see
    // `idempotency`).
    if let Some(key) = &key
        && let Some(seen) = key.seen(&state, now).await?
    {
        return replayed(&state, &caller, made_job(idempotency::same_request(seen, &key.request_hash)?)?)
            .await;
    }
    mapi_problem::require_json(&headers)?;
    let jobs = &state.config.jobs;
    let spec = job_body::parse(&body, jobs.max_items, jobs.max_item_bytes)?;
    let method = item_method(&spec.method)?;
    let params =
        mapi_methods::validate(method, &spec.params).map_err(|e| ApiError::invalid(e.to_string()))?;
    let n = spec.items.len() as u64;
    let id = JobId::generate(now, entropy(&state)?);
    // A job is admitted as a run is: the token's budget, the tenant's
    // requests per minute, items per job and vCPU-seconds, the platform's
    // items per job and spend cap. Its items reserve their compute as the
    // fan-out enqueues them.
    let request = quota::Request {
        caller: &caller,
        tenant: &tenant,
        tier: granted.tenant.tier,
        ask: mapi_quota::Ask::Job { items: n },
        seed: id.as_str(),
        what: format!("projects/{tenant}/{project}/jobs"),
    };
    let plan = quota::admission(&state, &request).await?;
    let window =
        mapi_jobs::limits::concurrent_items(plan.limits.max_fanout_tasks, state.config.jobs.tenant_window);
    let job = JobDoc {
        id: id.clone(),
        tenant: tenant.clone(),
        project: project.clone(),
        method: method.name.to_owned(),
        params: params.into_map(),
        items: n,
        chunk_items: layout::CHUNK_ITEMS,
        window,
        created_at: now,
        created_by: caller.user().clone(),
        token: caller.token().map(|t| t.public_id().to_owned()),
        fanout: Fanout::default(),
        round: 0,
        cancel_requested_at: None,
        open: true,
        finished: None,
    };
    write_manifest(&state, &job, &spec.items).await?;
    drop(spec);
    let idem =
        key.map(|k| IdempotencyDoc { job: Some(id.clone()), ..k.record(&state, &tenant, &project, now) });
    let record = Audit::by(&caller, "job.create", format!("jobs/{id}"))
        .tenant(&tenant)
        .project(&project)
        .detail(format!("{} on {n} items", job.method))
        .into_doc(now, &*state.entropy);
    let (job_ref, record, idem, store) = (&job, &record, &idem, &*state.store);
    let outcome = quota::commit_admitted(&state, &request, plan, |plan| async move {
        let bumps = &plan.bumps;
        transact::<_, ApiError, _, _>(store, |mut tx| async move {
            if let Some(doc) = idem
                && let Some(seen) = tx_get::<IdempotencyDoc>(&mut tx, &doc.id).await?
                && seen.expires_at > now
            {
                let seen = idempotency::same_request(seen, &doc.request_hash)?;
                return Ok(tx.finish(Some(made_job(seen)?)));
            }
            if let Some(doc) = idem {
                tx_put(&mut tx, doc)?;
            }
            tx_create(&mut tx, job_ref)?;
            tx_create(&mut tx, record)?;
            bumps.apply(&mut tx)?;
            Ok(tx.finish(None))
        })
        .await
    })
    .await?;
    if let Some(first) = outcome {
        // A first request with the same key won the race: its job is the
        // answer, and this one's manifest objects are left unreferenced.
        tracing::warn!(job = %id, replayed = %first, "a racing submit with the same key won: manifest objects left");
        return replayed(&state, &caller, first).await;
    }
    if let Err(e) = mapi_jobs::tasks::push_fanout(&*state.queue, &id, 0, None).await {
        withdraw(&state, &job, idem.as_ref()).await;
        tracing::warn!(job = %id, error = %e, "the fan-out could not be enqueued: job withdrawn, manifest objects left");
        return Err(e.into());
    }
    // Ticks follow the job until it closes.
    state.ask_for_tick().await;
    tracing::info!(job = %id, method = %job.method, items = n, "job submitted");
    Ok((StatusCode::CREATED, Json(view(&state, &job).await?)).into_response())
}

/// The item method `name`, or a refusal listing them.
fn item_method(name: &str) -> Result<&'static mapi_methods::MethodSpec, ApiError> {
    mapi_methods::find(name).filter(|m| m.input == mapi_methods::Input::Item).ok_or_else(|| {
        let known: Vec<&str> = mapi_methods::all()
            .iter()
            .filter(|m| m.input == mapi_methods::Input::Item)
            .map(|m| m.name)
            .collect();
        ApiError::invalid(format!(
            "`{}` is not an item method: use one of {} (GET /v1/usage describes them)",
            name.chars().take(64).collect::<String>(),
            known.join(", ")
        ))
    })
}

/// The job a key's earlier use made.
fn made_job(seen: IdempotencyDoc) -> Result<JobId, ApiError> {
    seen.job.ok_or_else(|| ApiError::internal("a job submit's Idempotency-Key record names no job"))
}

/// The answer to a replayed submit: 200 with the job as it is now.
async fn replayed(
    state: &AppState,
    caller: &Caller,
    id: JobId,
) -> Result<axum::response::Response, ApiError> {
    let job = load_for(state, caller, id.as_str(), Action::Read).await?;
    // The first request may have stored the job and died (or lost the
    // queue's answer) before its fan-out was enqueued: a replay of a job
    // whose fan-out has not begun enqueues its first step again (the task's
    // name makes this once), so the job it acknowledges does run.
    if job.fanout.step == 0 && job.fanout.finished_at.is_none() && job.cancel_requested_at.is_none() {
        mapi_jobs::tasks::push_fanout(&*state.queue, &job.id, 0, None).await?;
    }
    Ok((StatusCode::OK, idempotency::replayed_headers(), Json(view(state, &job).await?)).into_response())
}

/// Takes back a stored job nothing will fan out, so no job waits forever in
/// `enqueuing`, with its key, so a retry makes the job anew. Its manifest
/// objects stay behind (logged).
async fn withdraw(state: &AppState, job: &JobDoc, idem: Option<&IdempotencyDoc>) {
    let mut keys = vec![mapi_schema::key::<JobDoc>(job.id.as_str())];
    keys.extend(idem.map(|d| mapi_schema::key::<IdempotencyDoc>(&d.id)));
    for key in keys {
        let deleted = match key {
            Ok(key) => mapi_store::StoreExt::delete(&*state.store, &key, mapi_store::Precondition::None)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = deleted {
            tracing::error!(job = %job.id, error = %e, "a job whose fan-out could not be enqueued stays stored");
        }
    }
}

/// Writes the chunks and the manifest: O(bytes), a handful of objects per
/// thousand items, written concurrently.
async fn write_manifest(state: &AppState, job: &JobDoc, items: &[&RawValue]) -> Result<(), ApiError> {
    let base = base(job);
    let mut writes = tokio::task::JoinSet::new();
    for (c, chunk) in items.chunks(job.chunk_items as usize).enumerate() {
        let len: usize = chunk.iter().map(|i| i.get().len() + 1).sum();
        let mut bytes = Vec::with_capacity(len + 1);
        bytes.push(b'[');
        for (i, item) in chunk.iter().enumerate() {
            if i > 0 {
                bytes.push(b',');
            }
            bytes.extend_from_slice(item.get().as_bytes());
        }
        bytes.push(b']');
        let key = object_key(&layout::chunk(&base, c as u64))?;
        let objects = state.objects.clone();
        writes.spawn(async move {
            objects.put(&key, bytes.into(), "application/json", mapi_objects::IfGeneration::ABSENT).await
        });
        if writes.len() >= 8
            && let Some(done) = writes.join_next().await
        {
            done.map_err(|e| ApiError::internal_from("a manifest write", e))??;
        }
    }
    while let Some(done) = writes.join_next().await {
        done.map_err(|e| ApiError::internal_from("a manifest write", e))??;
    }
    let manifest = Manifest {
        job: job.id.clone(),
        method: job.method.clone(),
        params: job.params.clone(),
        items: job.items,
        chunk_items: job.chunk_items,
        registry_version: mapi_methods::registry_version(),
    };
    let bytes = serde_json::to_vec(&manifest)?;
    if !create_only(state, &layout::manifest(&base), bytes, "application/json").await? {
        return Err(ApiError::internal(format!("manifest of {} exists already", job.id)));
    }
    Ok(())
}

/// A job: its state (derived from its counts), counts, timings and cost.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    params(("id" = mapi_domain::JobId, Path)),
    responses((status = 200, body = JobView), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn get_job(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<JobView>, ApiError> {
    let job = load_for(&state, &caller, &id, Action::Read).await?;
    Ok(Json(view(&state, &job).await?))
}

/// A page of a project's item jobs, newest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct JobPage {
    pub jobs: Vec<JobView>,
    /// Pass as `page_token` for the next page; absent on the last.
    pub next_page_token: Option<String>,
}

/// List a project's item jobs, newest first, each with its derived state and counts.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/projects/{project}/jobs",
    tag = "jobs",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), super::datasets::PageQuery),
    responses((status = 200, body = JobPage), (status = 400, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    Query(q): Query<super::datasets::PageQuery>,
) -> Result<Json<JobPage>, ApiError> {
    require_project(&state, &caller, &tenant, &project, Resource::Run, Action::Read).await?;
    let (docs, next_page_token) =
        super::datasets::newest_first::<JobDoc>(&state, &tenant, &project, &q).await?;
    let mut jobs = Vec::with_capacity(docs.len());
    for job in &docs {
        jobs.push(view(&state, job).await?);
    }
    Ok(Json(JobPage { jobs, next_page_token }))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ItemsQuery {
    /// `succeeded` or `failed`; every finished item when absent.
    state: Option<ItemOutcome>,
    /// 1 to 200; 50 when absent.
    #[param(minimum = 1, maximum = 200)]
    page_size: Option<u32>,
    page_token: Option<String>,
}

/// A job's finished items, in index order, with their results or errors.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/items",
    tag = "jobs",
    params(("id" = mapi_domain::JobId, Path), ItemsQuery),
    responses((status = 200, body = ItemPage), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn list_items(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<ItemsQuery>,
) -> Result<Json<ItemPage>, ApiError> {
    let job = load_for(&state, &caller, &id, Action::Read).await?;
    let mut query = mapi_store::Query::new(<JobItemDoc as mapi_schema::Doc>::COLLECTION).filter(
        "job",
        Op::Eq,
        job.id.as_str(),
    );
    if let Some(s) = q.state {
        query = query.filter("outcome", Op::Eq, s.as_str());
    }
    let (docs, next_page_token) = query
        .order_by("idx", Direction::Asc)
        .page(&*state.store, page_size(q.page_size)?, q.page_token.as_deref())
        .await?;
    let base = base(&job);
    let mut items = Vec::with_capacity(docs.len());
    for d in &docs {
        let m: JobItemDoc = d.decode()?;
        let (idx, outcome, round, attempts, duration_ms) =
            (m.idx, m.outcome, m.round, m.attempts, m.duration_ms);
        let end = end_of(&state, &base, idx, Some(m)).await?;
        let (result, error) = end.map_or((None, None), |e| (e.result, e.error));
        items.push(ItemView { idx, state: outcome, round, attempts, duration_ms, result, error });
    }
    Ok(Json(ItemPage { items, next_page_token }))
}

/// One item's log: a JSON line per attempt (newline-delimited JSON).
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/items/{idx}/log",
    tag = "jobs",
    params(("id" = mapi_domain::JobId, Path), ("idx" = u64, Path)),
    responses(
        (status = 200, content_type = "application/x-ndjson", body = String),
        (status = 404, body = mapi_problem::Problem, description = "No such job, item, or no attempt yet"),
    ),
    security(("session" = []), ("token" = []))
)]
pub async fn item_log(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, idx)): Path<(String, u64)>,
) -> Result<impl IntoResponse, ApiError> {
    let job = load_for(&state, &caller, &id, Action::Read).await?;
    if idx >= job.items {
        return Err(ApiError::not_found(format!("job {} has {} items: no item {idx}", job.id, job.items)));
    }
    // The log object's lines (attempts that retried, ends superseded or
    // removed), then the end's.
    let base = base(&job);
    let earlier = read_object(&state, &layout::log(&base, idx)).await?;
    let m = marker(&state, &job.id, idx).await?;
    let end = end_of(&state, &base, idx, m).await?.map(|e| ndjson(&e.log));
    if earlier.is_none() && end.is_none() {
        return Err(ApiError::not_found(format!(
            "item {idx} of job {} has no log yet: it has not run",
            job.id
        )));
    }
    let mut bytes = earlier.map(|b| b.to_vec()).unwrap_or_default();
    bytes.extend_from_slice(end.unwrap_or_default().as_bytes());
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], bytes))
}

/// Cancel a job: the fan-out stops, items still queued finish as
/// `cancelled` errors without running, items never enqueued count as
/// cancelled. Items already running finish.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/cancel",
    tag = "jobs",
    params(("id" = mapi_domain::JobId, Path)),
    responses(
        (status = 200, body = JobView),
        (status = 409, body = mapi_problem::Problem, description = "The job already finished"),
    ),
    security(("session" = []), ("token" = []))
)]
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<JobView>, ApiError> {
    let job = load_for(&state, &caller, &id, Action::Cancel).await?;
    let (s, _, _) = derived(&state, &job).await?;
    if s.is_final() {
        return Err(ApiError::precondition(format!(
            "job {} already finished ({s}): nothing to cancel",
            job.id
        )));
    }
    let now = state.clock.now();
    let record = Audit::by(&caller, "job.cancel", format!("jobs/{}", job.id))
        .tenant(&job.tenant)
        .project(&job.project)
        .into_doc(now, &*state.entropy);
    let (id_ref, record) = (&job.id, &record);
    let job = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let mut job = tx_get::<JobDoc>(&mut tx, id_ref.as_str())
            .await?
            .ok_or_else(|| ApiError::not_found("job not found"))?;
        if job.cancel_requested_at.is_none() {
            job.cancel_requested_at = Some(now);
            tx_put(&mut tx, &job)?;
            tx_create(&mut tx, record)?;
        }
        Ok(tx.finish(job))
    })
    .await?;
    tracing::info!(job = %job.id, "job cancel requested");
    Ok(Json(view(&state, &job).await?))
}

/// Re-run the failed items (only those) in a new round: their markers are
/// moved to the history (the ledger stays append-only) and their tasks
/// enqueued again; succeeded items are not touched.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/retry-failed",
    tag = "jobs",
    params(("id" = mapi_domain::JobId, Path)),
    responses(
        (status = 200, body = JobView, description = "The failed items are enqueued again"),
        (status = 409, body = mapi_problem::Problem, description = "The job is cancelled or still enqueuing"),
    ),
    security(("session" = []), ("token" = []))
)]
pub async fn retry_failed(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<JobView>, ApiError> {
    let job = load_for(&state, &caller, &id, Action::Create).await?;
    if job.cancel_requested_at.is_some() {
        return Err(ApiError::precondition(format!(
            "job {} was cancelled: submit a new job instead",
            job.id
        )));
    }
    if job.fanout.finished_at.is_none() {
        return Err(ApiError::precondition(format!(
            "job {} is still enqueuing: retry when it has finished",
            job.id
        )));
    }
    let now = state.clock.now();
    let record = Audit::by(&caller, "job.retry_failed", format!("jobs/{}", job.id))
        .tenant(&job.tenant)
        .project(&job.project)
        .into_doc(now, &*state.entropy);
    let (id_ref, record) = (&job.id, &record);
    let job = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let mut job = tx_get::<JobDoc>(&mut tx, id_ref.as_str())
            .await?
            .ok_or_else(|| ApiError::not_found("job not found"))?;
        job.round += 1;
        // Reopened: the job sweep looks at it until this round ends too.
        (job.open, job.finished) = (true, None);
        tx_put(&mut tx, &job)?;
        tx_create(&mut tx, record)?;
        Ok(tx.finish(job))
    })
    .await?;
    // Every failed item of an earlier round, a page at a time: enqueue its
    // task in this round, then reopen it (the item handler reopens it too
    // if its task comes first, so a crash between the two loses nothing).
    let mut token: Option<String> = None;
    let mut reopened = 0u64;
    loop {
        let (docs, next) = mapi_store::Query::new(<JobItemDoc as mapi_schema::Doc>::COLLECTION)
            .filter("job", Op::Eq, job.id.as_str())
            .filter("outcome", Op::Eq, ItemOutcome::Failed.as_str())
            .order_by("idx", Direction::Asc)
            .page(&*state.store, 200, token.as_deref())
            .await?;
        let failed: Vec<JobItemDoc> = docs
            .iter()
            .map(|d| d.decode::<JobItemDoc>())
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .filter(|m| m.round < job.round)
            .collect();
        if !failed.is_empty() {
            let (lo, hi) = (failed[0].idx, failed[failed.len() - 1].idx + 1);
            let wanted: std::collections::BTreeSet<u64> = failed.iter().map(|m| m.idx).collect();
            let items = read_items(&state, &job, lo, hi)
                .await?
                .map_err(|Unreadable(why)| ApiError::precondition(format!("job {}: {why}", job.id)))?
                .into_iter()
                .filter(|(i, _)| wanted.contains(i))
                .collect();
            mapi_jobs::tasks::push_items(&state.queue, &job.id, job.round, items).await?;
            for m in &failed {
                mapi_jobstore::reopen(&state, &job, m.idx, job.round).await?;
                reopened += 1;
            }
        }
        match next {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    tracing::info!(job = %job.id, round = job.round, reopened, "failed items enqueued again");
    Ok(Json(view(&state, &job).await?))
}
