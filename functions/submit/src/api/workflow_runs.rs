//! Runs of workflows: started (admitted as one unit), listed, read,
//! cancelled and resumed. What moves them is [`super::workflow_driver`].

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use mapi_access::{Action, Resource};
use mapi_admission::quota;
use mapi_api::workflows::{NodeRunView, NodeView, StartWorkflow, WorkflowRunPage, WorkflowRunView};
use mapi_domain::{ProjectId, ResourceClass, TenantId};
use mapi_identity::{Audit, Caller, Granted, Target, authorize};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path, Query, page_size};
use mapi_schema::{WorkflowRunDoc, tx_create, tx_get, tx_put};
use mapi_store::{Direction, Op, transact};
use mapi_workflows::definition::any_dataset;
use mapi_workflows::{Definition, Kind, Refused, WorkflowRun};
use serde::Deserialize;

use super::datasets::require_project;

/// A workflow run as the API shows it.
pub fn view(doc: WorkflowRunDoc) -> WorkflowRunView {
    let nodes = doc
        .run
        .nodes()
        .map(|(n, r)| NodeView {
            id: n.id.clone(),
            kind: n.kind,
            needs: n.needs.clone(),
            state: r.state,
            tries: r.tries,
            runs: r
                .children
                .iter()
                .map(|c| NodeRunView {
                    run: c.run.clone(),
                    combination: c.combination.clone(),
                    ended: c.ended.as_ref().map(|e| e.state.clone()),
                    metric: c.ended.as_ref().and_then(|e| e.metric),
                    detail: c.ended.as_ref().and_then(|e| e.detail.clone()),
                })
                .collect(),
            earlier_runs: r.earlier.clone(),
            validation: r.validation.clone(),
            model_version: r.model_version.clone(),
            best_run: r.best.clone(),
            endpoint: n.endpoint.clone(),
            detail: r.detail.clone(),
            started_at: r.started_at,
            ended_at: r.ended_at,
        })
        .collect();
    WorkflowRunView {
        id: doc.id.clone(),
        workflow: doc.workflow.clone(),
        version: doc.version,
        state: doc.run.state(),
        attempt: doc.run.attempt(),
        started_by: doc.started_by.clone(),
        estimate: doc.estimate.clone(),
        created_at: doc.created_at,
        updated_at: doc.updated_at,
        ended_at: doc.run.ended_at(),
        nodes,
    }
}

/// What a definition's runs may cost, one attempt each at list prices:
/// amounts and resources summed, the largest class, the longest wall.
fn estimate(definition: &Definition) -> mapi_cost::Charge {
    let mut total = mapi_cost::CURRENT.estimate(ResourceClass::S, 0, Duration::ZERO);
    for node in definition.nodes.iter().filter(|n| matches!(n.kind, Kind::Run | Kind::Grid)) {
        for (spec, _) in node.specs(&any_dataset()).unwrap_or_default() {
            let c = mapi_cost::CURRENT.estimate(
                spec.class,
                spec.tasks,
                Duration::from_secs(spec.timeout_s.into()),
            );
            total.class = total.class.max(c.class);
            total.tasks += c.tasks;
            total.wall_ms = total.wall_ms.max(c.wall_ms);
            total.vcpu_ms += c.vcpu_ms;
            total.gib_ms += c.gib_ms;
            total.gpus = total.gpus.max(c.gpus);
            total.accelerator_ms += c.accelerator_ms;
            total.amount_micros += c.amount_micros;
        }
    }
    total
}

/// The whole run asked of the quotas as one unit: the sum of its runs'
/// reservations, its largest run's class and tasks. Nothing is reserved by
/// it: each child run is admitted (and reserves) when it starts.
fn unit(definition: &Definition) -> mapi_quota::Ask {
    let specs: Vec<_> = definition
        .nodes
        .iter()
        .filter(|n| matches!(n.kind, Kind::Run | Kind::Grid))
        .flat_map(|n| n.specs(&any_dataset()).unwrap_or_default())
        .map(|(s, _)| s)
        .collect();
    mapi_quota::Ask::Run {
        class: specs.iter().map(|s| s.class).max().unwrap_or(ResourceClass::S),
        task_count: specs.iter().map(|s| s.tasks).max().unwrap_or(1),
        vcpu_ms: specs.iter().map(|s| quota::reserve_ms(s.class, s.tasks, s.timeout_s)).sum(),
        plugin: specs.iter().any(|s| s.method.starts_with(mapi_plugins::PREFIX)),
    }
}

/// Start a run of a workflow.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/projects/{project}/workflows/{workflow}/runs", tag = "workflows",
    params(("tenant" = TenantId, Path), ("project" = ProjectId, Path), ("workflow" = String, Path)),
    request_body = StartWorkflow,
    responses(
        (status = 201, body = WorkflowRunView, description = "Started: its first nodes start now"),
        (status = 404, body = mapi_problem::Problem, description = "No such workflow or version"),
        (status = 429, body = mapi_problem::Problem, description = "The whole run (its runs' estimates summed) would exceed a quota"),
    ),
    security(("session" = []), ("token" = [])))]
pub async fn start(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, name)): Path<(TenantId, ProjectId, String)>,
    Json(body): Json<StartWorkflow>,
) -> Result<(StatusCode, Json<WorkflowRunView>), ApiError> {
    let granted =
        require_project(&state, &caller, &tenant, &project, Resource::Workflow, Action::Run).await?;
    let workflow = super::workflows::load(&state, (&tenant, &project), &name).await?;
    let (version, definition) = match body.version.filter(|v| *v != workflow.version) {
        None => (workflow.version, workflow.definition.clone()),
        Some(v) => (v, super::workflows::version(&state, &workflow, v).await?.definition),
    };
    let id = format!(
        "wfr_{}",
        mapi_domain::RunId::generate(state.clock.now(), super::datasets::entropy(&state)?)
            .as_str()
            .trim_start_matches("run_")
    );
    let request = quota::Request {
        caller: &caller,
        tenant: &tenant,
        tier: granted.tenant.tier,
        ask: unit(&definition),
        seed: &id,
        what: format!("projects/{tenant}/{project}/workflows/{name}/runs"),
    };
    quota::admission(&state, &request).await?;
    let now = state.clock.now();
    let mut doc = WorkflowRunDoc {
        id,
        tenant: tenant.clone(),
        project: project.clone(),
        workflow: workflow.name.clone(),
        version,
        started_by: caller.user().clone(),
        token: caller.token().map(|t| t.hash.clone()),
        estimate: estimate(&definition),
        created_at: now,
        updated_at: now,
        active: true,
        driving: false,
        run: WorkflowRun::new(definition),
    };
    doc.touch(now);
    let record = Audit::by(&caller, "workflow.run", format!("workflow-runs/{}", doc.id))
        .tenant(&tenant)
        .project(&project)
        .detail(format!("{name} v{version}"))
        .into_doc(now, &*state.entropy);
    let (d, r) = (&doc, &record);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        tx_create(&mut tx, d)?;
        tx_create(&mut tx, r)?;
        Ok(tx.finish(()))
    })
    .await?;
    kick(&state, &doc.id, "a1").await;
    Ok((StatusCode::CREATED, Json(view(reread(&state, doc).await?))))
}

/// Moves a workflow run now, in this request, as far as it goes (its
/// first nodes' children made), and pushes its advance too: should this
/// process die now, the queue (or the tick) carries it on.
async fn kick(state: &AppState, id: &str, tag: &str) {
    if let Err(e) = mapi_schema::tasks::push_advance(&*state.queue, id, tag).await {
        tracing::warn!(workflow_run = %id, error = %e, "advance not pushed; the tick pushes it");
    }
    if let Err(e) = super::workflow_driver::drive(state, id).await {
        tracing::warn!(workflow_run = %id, error = %e, "advance failed; its task retries");
    }
}

async fn reread(state: &AppState, doc: WorkflowRunDoc) -> Result<WorkflowRunDoc, ApiError> {
    Ok(mapi_schema::get::<WorkflowRunDoc>(&*state.store, &doc.id).await?.unwrap_or(doc))
}

/// Loads a workflow run `caller` may do `action` on; one of a project the
/// caller cannot see answers as a missing one.
async fn load_for(
    state: &AppState,
    caller: &Caller,
    id: &str,
    action: Action,
) -> Result<(WorkflowRunDoc, Granted), ApiError> {
    let what = format!("workflow run {}", id.chars().take(64).collect::<String>());
    let missing = || ApiError::not_found(format!("{what} not found"));
    if !id.starts_with("wfr_") || id.len() > 64 {
        return Err(missing());
    }
    let doc = mapi_schema::get::<WorkflowRunDoc>(&*state.store, id).await?.ok_or_else(missing)?;
    let target = Target::project(&doc.tenant, &doc.project, &what);
    let granted = authorize(state, caller, target, Resource::Workflow, action).await?;
    Ok((doc, granted))
}

/// A workflow run, with each node's state and the runs it made.
#[utoipa::path(get, path = "/v1/workflow-runs/{id}", tag = "workflows",
    params(("id" = String, Path)),
    responses((status = 200, body = WorkflowRunView), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = [])))]
pub async fn get_run(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<WorkflowRunView>, ApiError> {
    Ok(Json(view(load_for(&state, &caller, &id, Action::Read).await?.0)))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    /// Only the runs of this workflow.
    workflow: Option<String>,
    /// 1 to 200; 50 when absent.
    #[param(minimum = 1, maximum = 200)]
    page_size: Option<u32>,
    page_token: Option<String>,
}

/// A project's workflow runs, newest first.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/projects/{project}/workflow-runs", tag = "workflows",
    params(("tenant" = TenantId, Path), ("project" = ProjectId, Path), RunsQuery),
    responses((status = 200, body = WorkflowRunPage), (status = 400, body = mapi_problem::Problem, description = "A page_token no listing gave"), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = [])))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    Query(q): Query<RunsQuery>,
) -> Result<Json<WorkflowRunPage>, ApiError> {
    require_project(&state, &caller, &tenant, &project, Resource::Workflow, Action::Read).await?;
    let mut query = mapi_store::Query::new(<WorkflowRunDoc as mapi_schema::Doc>::COLLECTION)
        .filter("tenant", Op::Eq, tenant.as_str())
        .filter("project", Op::Eq, project.as_str());
    if let Some(w) = &q.workflow {
        query = query.filter("workflow", Op::Eq, w.as_str());
    }
    let (docs, next_page_token) = query
        .order_by("created_at", Direction::Desc)
        .page(&*state.store, page_size(q.page_size)?, q.page_token.as_deref())
        .await?;
    let runs = docs.iter().map(|d| d.decode::<WorkflowRunDoc>().map(view)).collect::<Result<_, _>>()?;
    Ok(Json(WorkflowRunPage { runs, next_page_token }))
}

/// A change of a workflow run's state the lifecycle refused: the caller's conflict.
fn refused(e: Refused) -> ApiError {
    ApiError::precondition(e.to_string())
}

/// Commits `change` on a workflow run, re-read in the transaction, with its audit record.
async fn change<T: Send>(
    state: &AppState,
    caller: &Caller,
    (doc, action): (&WorkflowRunDoc, &str),
    change: impl Fn(&mut WorkflowRunDoc) -> Result<T, Refused> + Send + Sync,
) -> Result<(WorkflowRunDoc, T), ApiError> {
    let now = state.clock.now();
    let record = Audit::by(caller, action, format!("workflow-runs/{}", doc.id))
        .tenant(&doc.tenant)
        .project(&doc.project)
        .into_doc(now, &*state.entropy);
    let (id, record, change) = (doc.id.as_str(), &record, &change);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let mut doc = tx_get::<WorkflowRunDoc>(&mut tx, id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("workflow run {id} not found")))?;
        let out = change(&mut doc).map_err(refused)?;
        doc.touch(now);
        tx_put(&mut tx, &doc)?;
        tx_create(&mut tx, record)?;
        Ok(tx.finish((doc, out)))
    })
    .await
}

/// Cancel a workflow run: every node not ended is cancelled, and the runs
/// its nodes started are asked to cancel.
#[utoipa::path(post, path = "/v1/workflow-runs/{id}/cancel", tag = "workflows",
    params(("id" = String, Path)),
    responses(
        (status = 200, body = WorkflowRunView, description = "Cancelled"),
        (status = 404, body = mapi_problem::Problem),
        (status = 409, body = mapi_problem::Problem, description = "It has ended"),
    ),
    security(("session" = []), ("token" = [])))]
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<WorkflowRunView>, ApiError> {
    let (doc, _) = load_for(&state, &caller, &id, Action::Cancel).await?;
    let now = state.clock.now();
    let (doc, runs) = change(&state, &caller, (&doc, "workflow.cancel"), |d| d.run.cancel(now)).await?;
    for run in &runs {
        // Each is asked once here; a run not cancelled now runs to its end
        // (its workflow run no longer waits on it).
        if let Err(e) = super::runs::cancel_child(&state, run, now).await {
            tracing::warn!(run = %run, error = %e, "a workflow run's child was not cancelled");
        }
    }
    Ok(Json(view(doc)))
}

/// Resume a failed or cancelled workflow run: its failed, skipped and
/// cancelled nodes run again, as the person resuming it; what succeeded is
/// kept, not run again.
#[utoipa::path(post, path = "/v1/workflow-runs/{id}/resume", tag = "workflows",
    params(("id" = String, Path)),
    responses(
        (status = 200, body = WorkflowRunView, description = "Running again"),
        (status = 404, body = mapi_problem::Problem),
        (status = 409, body = mapi_problem::Problem, description = "Still running, or succeeded"),
    ),
    security(("session" = []), ("token" = [])))]
pub async fn resume(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<WorkflowRunView>, ApiError> {
    let (doc, _) = load_for(&state, &caller, &id, Action::Run).await?;
    // What it makes from now on is admitted as the person who resumed it.
    let (user, token) = (caller.user().clone(), caller.token().map(|t| t.hash.clone()));
    let (doc, ()) = change(&state, &caller, (&doc, "workflow.resume"), |d| {
        d.run.resume()?;
        d.started_by = user.clone();
        d.token = token.clone();
        Ok(())
    })
    .await?;
    kick(&state, &doc.id, &format!("a{}", doc.run.attempt())).await;
    Ok(Json(view(reread(&state, doc).await?)))
}
