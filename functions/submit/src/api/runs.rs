//! Submitting, listing, reading and cancelling runs.

use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use mapi_access::{Action, Resource};
use mapi_api::views::{ChildView, RunPage, RunSummary, RunView};
use mapi_domain::{
    PluginCode, ProjectId, ResourceClass, RunId, RunSpecInput, RunState, TenantId, Timestamp, UserId,
};
use mapi_identity::{Audit, Caller, Granted, Target, authorize};
use mapi_lifecycle::{NewRun, RunDoc};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path, ProblemCode, Query, page_size};
use mapi_schema::{AttemptDoc, DatasetDoc, Doc, IdempotencyDoc, RunFilters, tx_create, tx_get, tx_put};
use mapi_store::{Direction, Op, transact};
use serde::{Deserialize, Serialize};

use super::datasets::{entropy, require_project};
use super::idempotency::{self, Key};
use super::view;
use mapi_admission::quota;

/// The checks a spec passes before a run is written, in order: the timeout,
/// the method and its parameters, the class on this executor, the dataset
/// and its columns. Answers the dataset and, for a plugin method, the
/// plugin version the run runs (`pin`: the version a retry keeps).
async fn validate(
    state: &AppState,
    (tenant, project): (&TenantId, &ProjectId),
    spec: &RunSpecInput,
    pin: Option<&str>,
) -> Result<(DatasetDoc, Option<PluginCode>, u32), ApiError> {
    spec.check().map_err(|e| ApiError::invalid(e.to_string()))?;
    let invalid = |e: mapi_methods::ParamError| ApiError::invalid(e.to_string());
    let (method, plugin) = if spec.method.starts_with(mapi_plugins::PREFIX) {
        let (doc, method) = super::plugins::resolve(state, tenant, project, &spec.method, pin).await?;
        let code = super::plugins::code(&doc, &method);
        (Schema::Plugin(method), Some(code))
    } else {
        (Schema::Builtin(builtin(&spec.method)?), None)
    };
    let params = match &method {
        Schema::Builtin(m) => mapi_methods::validate(m, &spec.params),
        Schema::Plugin(m) => mapi_methods::validate_with(&spec.method, &m.params, &spec.params),
    }
    .map_err(invalid)?;
    if let Schema::Builtin(m) = &method {
        mapi_methods::registry::dl::requested(m, &params, spec.class).map_err(invalid)?;
    }
    state.executor.check_placement(spec.class, &spec.method).map_err(ApiError::invalid)?;
    let tasks = task_count(&method, &params, spec.tasks)?;
    let max_tasks = state.executor.capabilities().max_task_count;
    if tasks > max_tasks {
        return Err(ApiError::invalid(format!(
            "tasks {tasks} is more than this executor runs in one execution ({max_tasks})"
        )));
    }
    let dataset = match mapi_schema::get::<DatasetDoc>(&*state.store, spec.dataset.as_str()).await? {
        Some(d) if &d.tenant == tenant && &d.project == project => d,
        _ => {
            return Err(ApiError::not_found(format!(
                "dataset {} not found in {tenant}/{project}: upload it first (POST …/datasets)",
                spec.dataset
            )));
        }
    };
    let numeric = |c: &str| dataset.numeric_columns.iter().any(|n| n == c);
    match &method {
        Schema::Builtin(m) => mapi_methods::check_columns(m, &params, &dataset.columns, &numeric),
        Schema::Plugin(m) => mapi_methods::check_columns_with(&m.params, &params, &dataset.columns, &numeric),
    }
    .map_err(invalid)?;
    Ok((dataset, plugin, tasks))
}

/// How many tasks a run's execution has: a fan-out parent's children (the
/// parameter that counts them; `tasks` must be left at 1 or agree), else
/// `tasks` as asked.
fn task_count(method: &Schema, params: &mapi_methods::Params, asked: u32) -> Result<u32, ApiError> {
    let Schema::Builtin(m) = method else { return Ok(asked) };
    let (Some(fan), Some(children)) = (m.fan_out, m.children(params)) else { return Ok(asked) };
    if asked != 1 && asked != children {
        return Err(ApiError::invalid(format!(
            "tasks {asked}: a run of {} has one task per child, as parameter `{}` says ({children}); \
             leave tasks out",
            m.name, fan.children
        )));
    }
    Ok(children)
}

/// The parameters' schema of the method a spec names.
enum Schema {
    Builtin(&'static mapi_methods::MethodSpec),
    Plugin(mapi_plugins::PluginMethod),
}

/// The built-in dataset method `name`, or a refusal listing them.
fn builtin(name: &str) -> Result<&'static mapi_methods::MethodSpec, ApiError> {
    let dataset_method = mapi_methods::find(name).filter(|m| m.input == mapi_methods::Input::Dataset);
    dataset_method.ok_or_else(|| {
        let known: Vec<&str> = mapi_methods::all()
            .iter()
            .filter(|m| m.input == mapi_methods::Input::Dataset)
            .map(|m| m.name)
            .collect();
        ApiError::invalid(format!(
            "unknown method `{}`: use one of {} (or a plugin's p.PLUGIN.METHOD)",
            name.chars().take(64).collect::<String>(),
            known.join(", ")
        ))
    })
}

enum Submitted {
    New(Box<mapi_lifecycle::Step>),
    Replayed(RunId),
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct SubmitQuery {
    /// Validate, estimate and check the quotas, without submitting (asks nothing of the executor).
    #[serde(default)]
    dry_run: bool,
}

/// Why a dry run would be refused: what the submit would answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DryRunRefusal {
    pub code: ProblemCode,
    /// `token`, `tenant` or `platform`.
    pub level: String,
    pub limit: String,
    pub detail: String,
    pub retry_after_s: Option<u64>,
}

/// What a dry run answers.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DryRunView {
    pub dry_run: bool,
    /// The quotas would admit the run now.
    pub admitted: bool,
    /// The first limit the run would exceed, when not admitted.
    pub refusal: Option<DryRunRefusal>,
    /// What would hold an admitted run in the queue now (the executor's
    /// switch, the shared-tier gate, the spend cap), as `waiting` would say it.
    pub would_wait: Option<String>,
    pub method: String,
    pub class: mapi_domain::ResourceClass,
    pub timeout_s: u32,
    pub estimate: mapi_cost::Charge,
    pub note: String,
}

/// Submit a run.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant}/projects/{project}/runs",
    tag = "runs",
    params(
        ("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), SubmitQuery,
        ("Idempotency-Key" = Option<String>, Header, pattern = "^[\x21-\x7E]([\x20-\x7E]{0,253}[\x21-\x7E])?$", description = "The same key returns the same run for 24 hours")
    ),
    request_body = RunSpecInput,
    responses(
        (status = 201, body = RunView, description = "Accepted: the run is queued"),
        (status = 429, body = mapi_problem::Problem, description = "A quota would be exceeded (QUOTA_EXCEEDED, RATE_LIMITED), with Retry-After when the limit resets"),
        (status = 200, body = RunView, description = "A repeated Idempotency-Key: the run it made"),
        (status = 400, body = mapi_problem::Problem, description = "The spec cannot run, or asks for a larger class or more tasks than the tenant's max_resource_class or max_fanout_tasks (INVALID_ARGUMENT, naming the limit)"),
        (status = 404, body = mapi_problem::Problem, description = "No such project or dataset"),
        (status = 409, body = mapi_problem::Problem, description = "Idempotency-Key reused with another request"),
    ),
    security(("session" = []), ("token" = []))
)]
pub async fn submit(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    Query(q): Query<SubmitQuery>,
    headers: HeaderMap,
    Json(spec): Json<RunSpecInput>,
) -> Result<axum::response::Response, ApiError> {
    let granted = require_project(&state, &caller, &tenant, &project, Resource::Run, Action::Create).await?;
    let key = Key::of(&headers, idempotency::Route::Runs, &tenant, &project, &serde_json::to_vec(&spec)?)?;
    let asked = Asked { tenant: &tenant, project: &project, spec: &spec, origin: Origin::default() };
    admit(&state, &caller, &granted, asked, key, q.dry_run).await
}

/// What a new run carries besides its spec: its labels, and the ended run
/// it retries.
#[derive(Default)]
struct Origin {
    labels: mapi_api::labels::RunLabels,
    retry_of: Option<RunId>,
    /// The plugin version the retried run ran: a retry runs the same code.
    plugin_version: Option<String>,
    /// The id chosen before the run is made (a workflow's child: named in
    /// its workflow run first, so making it twice fails the second commit).
    id: Option<RunId>,
}

/// A run asked for: where, what, and from what.
struct Asked<'a> {
    tenant: &'a TenantId,
    project: &'a ProjectId,
    spec: &'a RunSpecInput,
    origin: Origin,
}

/// The one way a run is admitted, submitted or retried: its key replayed
/// first, then the spec validated, the run estimated and admitted under the
/// quotas, and committed with its audit record.
async fn admit(
    state: &AppState,
    caller: &Caller,
    granted: &Granted,
    asked: Asked<'_>,
    key: Option<Key>,
    dry: bool,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    let Asked { tenant, project, spec, origin } = asked;
    let tier = granted.tenant.tier;
    let now = state.clock.now();
    // A key seen before is answered before any limit is decided (see
    // `idempotency`).
    if let Some(key) = &key
        && !dry
        && let Some(seen) = key.seen(state, now).await?
    {
        return replayed(state, made_run(idempotency::same_request(seen, &key.request_hash)?)?).await;
    }
    let pin = origin.plugin_version.as_deref();
    let (_, plugin, tasks) = validate(state, (tenant, project), spec, pin).await?;
    if let Some(why) = state.executor.capabilities().residency_refusal(&granted.tenant.residency) {
        return Err(ApiError::precondition(why));
    }
    let estimate =
        mapi_cost::CURRENT.estimate(spec.class, tasks, Duration::from_secs(u64::from(spec.timeout_s)));
    let detail = match &origin.retry_of {
        None => format!("{} on {} (class {})", spec.method, spec.dataset, spec.class),
        Some(of) => format!("{} on {} (class {}), a retry of {of}", spec.method, spec.dataset, spec.class),
    };
    let new = NewRun {
        id: match origin.id {
            Some(id) => id,
            None => RunId::generate(now, entropy(state)?),
        },
        tenant: tenant.clone(),
        project: project.clone(),
        method: spec.method.clone(),
        params: spec.params.clone(),
        dataset: spec.dataset.clone(),
        class: spec.class,
        timeout_s: spec.timeout_s,
        task_count: tasks,
        created_by: caller.user().clone(),
        estimate,
        token: caller.token().map(|t| t.public_id().to_owned()),
        labels: origin.labels,
        retry_of: origin.retry_of,
        residency: granted.tenant.residency.clone(),
        plugin,
    };
    let run = &new;
    let ask = mapi_quota::Ask::Run {
        class: run.class,
        task_count: run.task_count,
        vcpu_ms: quota::reserve_ms(run.class, run.task_count, run.timeout_s),
        plugin: run.plugin.is_some(),
    };
    let idem_doc =
        key.map(|k| IdempotencyDoc { run: Some(run.id.clone()), ..k.record(state, tenant, project, now) });
    let record = Audit::by(caller, "run.create", format!("runs/{}", run.id))
        .tenant(tenant)
        .project(project)
        .detail(detail)
        .into_doc(now, &*state.entropy);
    if dry {
        let plan = quota::plan(state, now, tenant, tier, caller.token(), &ask, run.id.as_str()).await?;
        let held = mapi_admission::held(state, tenant, run.plugin.is_some()).await?.map(|(_, why)| why);
        return Ok(Json(dry_run(run, plan.err(), held)).into_response());
    }
    let request = quota::Request {
        caller,
        tenant,
        tier,
        ask,
        seed: run.id.as_str(),
        what: format!("projects/{tenant}/{project}/runs"),
    };
    let (idem, record, new) = (&idem_doc, &record, &new);
    let outcome = quota::admit_and_commit(state, &request, |plan| async move {
        let step = mapi_lifecycle::commands::admit(new.clone(), plan.reservation.clone(), now);
        commit(state, &step, &plan.bumps, idem.as_ref(), record, now).await
    })
    .await?;
    match outcome {
        Submitted::Replayed(id) => replayed(state, id).await,
        Submitted::New(step) => {
            step.committed(&state.metrics);
            // The run is stored: a failed push is re-pushed by the
            // reconciler, so the submit still succeeds.
            let _ = mapi_lifecycle::carry_out(&step.follow_ups, state.outbox()).await;
            let run = step.run().ok_or_else(|| ApiError::internal("an admitted step without its run"))?;
            tracing::info!(run = %run.id(), method = %run.method(), class = %run.class(), "run submitted");
            Ok((StatusCode::CREATED, Json(view::of_new(run))).into_response())
        }
    }
}

/// Retry an ended run: a new run of the same method, dataset, parameters,
/// class (the one asked for), timeout and tasks, with the same name, note
/// and tags and `retry_of` naming the run, admitted under the quotas like
/// any submit. The ended run is left as it is.
#[utoipa::path(
    post,
    path = "/v1/runs/{id}/retry",
    tag = "runs",
    params(
        ("id" = mapi_domain::RunId, Path),
        ("Idempotency-Key" = Option<String>, Header, pattern = "^[\x21-\x7E]([\x20-\x7E]{0,253}[\x21-\x7E])?$", description = "The same key returns the same retry for 24 hours")
    ),
    responses(
        (status = 201, body = RunView, description = "Accepted: the new run is queued"),
        (status = 200, body = RunView, description = "A repeated Idempotency-Key: the retry it made"),
        (status = 400, body = mapi_problem::Problem, description = "The run's spec no longer passes (its method, class or dataset columns)"),
        (status = 404, body = mapi_problem::Problem, description = "No such run, or its dataset was deleted"),
        (status = 409, body = mapi_problem::Problem, description = "The run has not ended (FAILED_PRECONDITION), or the Idempotency-Key was used with another request"),
        (status = 429, body = mapi_problem::Problem, description = "A quota would be exceeded (QUOTA_EXCEEDED, RATE_LIMITED), with Retry-After"),
    ),
    security(("session" = []), ("token" = []))
)]
pub async fn retry(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    let (run, granted) = load_for(&state, &caller, &id, Action::Create).await?;
    if !run.state().is_terminal() {
        return Err(ApiError::precondition(format!(
            "run {} is still {}: wait for it to end, or cancel it, before retrying it",
            run.id(),
            run.state()
        )));
    }
    let spec = RunSpecInput {
        method: run.method().to_owned(),
        dataset: run.dataset().clone(),
        params: run.params().clone(),
        class: run.requested_class(),
        timeout_s: run.timeout_s(),
        tasks: run.task_count(),
    };
    let (tenant, project) = (run.tenant(), run.project());
    let retried = format!("retry of {}", run.id());
    let key = Key::of(&headers, idempotency::Route::Runs, tenant, project, retried.as_bytes())?;
    let origin = Origin {
        labels: run.labels().clone(),
        retry_of: Some(run.id().clone()),
        plugin_version: run.plugin().map(|p| p.version.clone()),
        id: None,
    };
    let asked = Asked { tenant, project, spec: &spec, origin };
    admit(&state, &caller, &granted, asked, key, false).await
}

/// Admits and commits a workflow's child run as `caller` (the workflow
/// run's starter, as they are now: their role and token may have changed
/// since it started), with the id its workflow run chose for it: the same
/// checks, estimate, admission, commit and audit record as a submit.
pub(crate) async fn admit_child(
    state: &AppState,
    caller: &Caller,
    (tenant, project): (&TenantId, &ProjectId),
    (id, spec): (RunId, &RunSpecInput),
    labels: mapi_api::labels::RunLabels,
) -> Result<(), ApiError> {
    let granted = require_project(state, caller, tenant, project, Resource::Run, Action::Create).await?;
    let origin = Origin { labels, id: Some(id), ..Origin::default() };
    let asked = Asked { tenant, project, spec, origin };
    admit(state, caller, &granted, asked, None, false).await.map(|_| ())
}

/// Cancels a run on behalf of its workflow run's cancel (whose caller was
/// authorized to cancel the workflow run and its children).
pub(crate) async fn cancel_child(state: &AppState, id: &RunId, now: Timestamp) -> Result<(), ApiError> {
    let step = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let Some(run) = tx_get::<RunDoc>(&mut tx, id.as_str()).await? else {
            return Ok(tx.finish(None));
        };
        let row = tx_get::<AttemptDoc>(&mut tx, &AttemptDoc::id_of(id, run.attempt())).await?;
        let Ok(step) = mapi_lifecycle::commands::request_cancel(run, row.as_ref(), now) else {
            return Ok(tx.finish(None));
        };
        step.write(&mut tx)?;
        Ok(tx.finish(Some(step)))
    })
    .await?;
    if let Some(step) = step {
        step.committed(&state.metrics);
        let _ = mapi_lifecycle::carry_out(&step.follow_ups, state.outbox()).await;
    }
    Ok(())
}

/// The run a key's earlier use made.
fn made_run(seen: IdempotencyDoc) -> Result<RunId, ApiError> {
    seen.run.ok_or_else(|| ApiError::internal("a run submit's Idempotency-Key record names no run"))
}

/// The answer to a replayed submit: 200 with the run as it is now, marked
/// as replayed.
async fn replayed(state: &AppState, id: RunId) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    let run = load(state, &id).await?;
    Ok((StatusCode::OK, idempotency::replayed_headers(), Json(view::build(state, &run).await?))
        .into_response())
}

/// What a dry run answers: a refusal is the answer, not a denial (a
/// question, not a request).
fn dry_run(run: &NewRun, refusal: Option<mapi_quota::Refusal>, would_wait: Option<String>) -> DryRunView {
    let refusal = refusal.map(|r| DryRunRefusal {
        code: quota::problem_code(r.code),
        level: r.level.as_str().to_owned(),
        limit: r.limit.to_owned(),
        detail: r.detail,
        retry_after_s: r.retry_after_s,
    });
    DryRunView {
        dry_run: true,
        admitted: refusal.is_none(),
        refusal,
        would_wait,
        method: run.method.clone(),
        class: run.class,
        timeout_s: run.timeout_s,
        estimate: run.estimate.clone(),
        note:
            "estimate at list prices: one attempt of the class for the whole timeout; nothing was submitted"
                .to_owned(),
    }
}

/// Commits an admitted run with its audit record, its quota increments and
/// its idempotency key; a key seen before (and unexpired) replays the run
/// it made instead, and a key reused with another request is refused.
async fn commit(
    state: &AppState,
    step: &mapi_lifecycle::Step,
    bumps: &mapi_quota::counters::Bumps,
    idem: Option<&IdempotencyDoc>,
    record: &mapi_schema::AuditDoc,
    now: mapi_domain::Timestamp,
) -> Result<Submitted, ApiError> {
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        if let Some(doc) = idem
            && let Some(seen) = tx_get::<IdempotencyDoc>(&mut tx, &doc.id).await?
            && seen.expires_at > now
        {
            let seen = idempotency::same_request(seen, &doc.request_hash)?;
            return Ok(tx.finish(Submitted::Replayed(made_run(seen)?)));
        }
        if let Some(doc) = idem {
            tx_put(&mut tx, doc)?;
        }
        step.write(&mut tx)?;
        tx_create(&mut tx, record)?;
        bumps.apply(&mut tx)?;
        Ok(tx.finish(Submitted::New(Box::new(step.clone()))))
    })
    .await
}

/// Loads a run.
pub async fn load(state: &AppState, id: &RunId) -> Result<RunDoc, ApiError> {
    mapi_schema::get::<RunDoc>(&*state.store, id.as_str())
        .await?
        .ok_or_else(|| ApiError::not_found(format!("run {id} not found")))
}

/// Loads a run `caller` may do `action` on. A run of another tenant, or of a
/// project the caller cannot see, answers exactly as a missing one.
pub(super) async fn load_for(
    state: &AppState,
    caller: &Caller,
    id: &str,
    action: Action,
) -> Result<(RunDoc, Granted), ApiError> {
    let what = format!("run {}", id.chars().take(64).collect::<String>());
    let not_found = || ApiError::not_found(format!("{what} not found"));
    let id = RunId::parse(id).map_err(|_| not_found())?;
    let run = mapi_schema::get::<RunDoc>(&*state.store, id.as_str()).await?.ok_or_else(not_found)?;
    let granted =
        authorize(state, caller, Target::project(run.tenant(), run.project(), &what), Resource::Run, action)
            .await?;
    Ok((run, granted))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only runs in this state.
    state: Option<RunState>,
    /// Only runs of this method (`tabular.linear`, …).
    method: Option<String>,
    /// Only runs whose current attempt is of this class.
    class: Option<ResourceClass>,
    /// Only runs submitted by this person (a token acts as its owner).
    created_by: Option<UserId>,
    /// Only runs carrying this tag.
    #[param(pattern = "^[a-z0-9_.:=-]{1,64}$")]
    tag: Option<String>,
    /// Only runs of this experiment.
    #[param(pattern = "^[a-z0-9_.-]{1,64}$")]
    experiment: Option<String>,
    /// `NAME=VALUE`: only runs whose param NAME is VALUE (`y=employed`,
    /// `alpha=0.1`); not with `tag`.
    #[param(pattern = "^[^=]+=", max_length = 200)]
    param: Option<String>,
    /// `NAME OP NUMBER`: only runs whose metric NAME (its latest value,
    /// logged or reported by the method) compares so: `r2>0.9`, `aic<=240`;
    /// OP is one of `>`, `>=`, `<`, `<=`, `=`, `!=`. A page may then hold
    /// fewer runs than `page_size` (at most 500 runs are examined per
    /// page): follow `next_page_token` until it is absent.
    #[param(max_length = 100)]
    metric: Option<String>,
    /// The filters of this saved view (`…/run-views/{name}`); a filter also
    /// given here replaces the view's.
    #[param(pattern = "^[a-z0-9_.-]{1,64}$")]
    view: Option<String>,
    /// Comma-separated `params.{name}` and `metrics.{name}` columns whose
    /// values each run's `values` carries (at most 30); the saved view's
    /// columns when `view` is given and this is absent.
    #[param(max_length = 2000)]
    columns: Option<String>,
    /// RFC 3339; runs created at or after.
    created_after: Option<Timestamp>,
    /// RFC 3339; runs created before.
    created_before: Option<Timestamp>,
    /// 1 to 200; 50 when absent.
    #[param(minimum = 1, maximum = 200)]
    page_size: Option<u32>,
    page_token: Option<String>,
}

impl ListQuery {
    fn filters(&self) -> RunFilters {
        RunFilters {
            state: self.state,
            method: self.method.clone(),
            class: self.class,
            created_by: self.created_by.clone(),
            tag: self.tag.clone(),
            experiment: self.experiment.clone(),
            param: self.param.clone(),
            metric: self.metric.clone(),
        }
    }
}

/// List a project's runs, newest first.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/projects/{project}/runs",
    tag = "runs",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ListQuery),
    responses((status = 200, body = RunPage), (status = 400, body = mapi_problem::Problem), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    Query(q): Query<ListQuery>,
) -> Result<Json<RunPage>, ApiError> {
    require_project(&state, &caller, &tenant, &project, Resource::Run, Action::Read).await?;
    let saved = match &q.view {
        None => None,
        Some(name) => Some(super::run_views::find(&state, &tenant, &project, name).await?),
    };
    let filters = saved.as_ref().map_or_else(|| q.filters(), |v| v.filters.overridden_by(&q.filters()));
    let columns = match q.columns.as_deref() {
        Some(text) => super::run_views::value_columns(text)?,
        None => saved.map(|v| v.columns).unwrap_or_default(),
    };
    let base = mapi_store::Query::new(RunDoc::COLLECTION).filter("tenant", Op::Eq, tenant.as_str()).filter(
        "project",
        Op::Eq,
        project.as_str(),
    );
    let mut base = super::run_filters::narrowed(base, &filters)?;
    if let Some(t) = q.created_after {
        base = base.filter("created_at", Op::Ge, t.to_rfc3339());
    }
    if let Some(t) = q.created_before {
        base = base.filter("created_at", Op::Lt, t.to_rfc3339());
    }
    let base = base.order_by("created_at", Direction::Desc);
    let (size, token) = (page_size(q.page_size)?, q.page_token.as_deref());
    let (runs, next_page_token) = match filters.metric.as_deref() {
        None => {
            let (docs, next) = base.page(&*state.store, size, token).await?;
            (docs.iter().map(|d| d.decode::<RunDoc>()).collect::<Result<_, _>>()?, next)
        }
        Some(m) => {
            let filter = mapi_api::tracking::MetricFilter::parse(m).map_err(ApiError::invalid)?;
            super::metric_scan::page(&state, &base, &filter, size, token).await?
        }
    };
    let values = super::metric_scan::values(&state, &runs, &columns).await?;
    let runs =
        runs.iter().zip(values).map(|(r, values)| RunSummary { values, ..RunSummary::from(r) }).collect();
    Ok(Json(RunPage { runs, next_page_token }))
}

/// A run: state, attempts, history, progress, outputs and cost.
#[utoipa::path(
    get,
    path = "/v1/runs/{id}",
    tag = "runs",
    params(("id" = mapi_domain::RunId, Path)),
    responses((status = 200, body = RunView), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn get_run(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<RunView>, ApiError> {
    let (run, _) = load_for(&state, &caller, &id, Action::Read).await?;
    Ok(Json(view::build(&state, &run).await?))
}

/// One child of a fan-out parent's run, naming its parent.
#[utoipa::path(
    get,
    path = "/v1/runs/{id}/children/{index}",
    tag = "runs",
    params(("id" = mapi_domain::RunId, Path), ("index" = u32, Path)),
    responses((status = 200, body = ChildView), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn get_child(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, index)): Path<(String, u32)>,
) -> Result<Json<ChildView>, ApiError> {
    let (run, _) = load_for(&state, &caller, &id, Action::Read).await?;
    let view = view::build(&state, &run).await?;
    let count = view.children.len();
    view.children.into_iter().nth(index as usize).map(Json).ok_or_else(|| {
        ApiError::not_found(match count {
            0 => {
                format!("run {} has no children: its method {} is no fan-out parent", run.id(), run.method())
            }
            n => format!("run {} has {n} children, numbered 0 to {}", run.id(), n - 1),
        })
    })
}

/// Cancel a run. A queued run is cancelled at once; a started one is asked
/// to stop and is marked cancelled when the executor confirms.
#[utoipa::path(
    post,
    path = "/v1/runs/{id}/cancel",
    tag = "runs",
    params(("id" = mapi_domain::RunId, Path)),
    responses(
        (status = 200, body = RunView, description = "Cancelled"),
        (status = 202, body = RunView, description = "Cancelling: waiting for the executor"),
        (status = 409, body = mapi_problem::Problem, description = "The run already ended"),
    ),
    security(("session" = []), ("token" = []))
)]
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<RunView>), ApiError> {
    let (run, granted) = load_for(&state, &caller, &id, Action::Cancel).await?;
    let now = state.clock.now();
    let record = Audit::by(&caller, "run.cancel", format!("runs/{}", run.id()))
        .tenant(run.tenant())
        .project(run.project())
        .operator(granted.as_operator)
        .into_doc(now, &*state.entropy);
    let (id, record) = (run.id(), &record);
    let step = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let run = tx_get::<RunDoc>(&mut tx, id.as_str())
            .await?
            .ok_or_else(|| ApiError::not_found("run not found"))?;
        let row = tx_get::<AttemptDoc>(&mut tx, &AttemptDoc::id_of(id, run.attempt())).await?;
        let step =
            mapi_lifecycle::commands::request_cancel(run, row.as_ref(), now).map_err(cancel_refused)?;
        if step.transition.is_some() {
            step.write(&mut tx)?;
            tx_create(&mut tx, record)?;
        }
        Ok(tx.finish(step))
    })
    .await?;
    step.committed(&state.metrics);
    if let Some(t) = &step.transition {
        tracing::info!(run = %run.id(), to = %t.to, "cancel requested");
    }
    // Ask the executor now; the reconciler repeats it until confirmed.
    let _ = mapi_lifecycle::carry_out(&step.follow_ups, state.outbox()).await;
    let run = match step.run() {
        Some(r) => r.clone(),
        None => load(&state, run.id()).await?,
    };
    let status = if run.state() == RunState::Cancelled { StatusCode::OK } else { StatusCode::ACCEPTED };
    Ok((status, Json(view::build(&state, &run).await?)))
}

/// A cancel the lifecycle refused: a run that ended is the caller's
/// conflict; an illegal transition is the platform's bug.
fn cancel_refused(e: mapi_lifecycle::commands::CancelError) -> ApiError {
    match e {
        e @ mapi_lifecycle::commands::CancelError::Ended { .. } => ApiError::precondition(e.to_string()),
        mapi_lifecycle::commands::CancelError::Transition(e) => e.into(),
    }
}
