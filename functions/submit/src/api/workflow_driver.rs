//! The workflow runs' driver: `POST /internal/tasks/workflows/advance`
//! (the `workflows` queue), pushed when a workflow run starts or resumes,
//! when a validation one of its nodes submitted is decided, and by each
//! tick for every active workflow run.
//!
//! It lives with the tenant API because it acts as the tenant API does, as
//! the person who started the workflow run (as they are now: a revoked
//! token or a lost role refuses what it would make next): child runs are
//! admitted by the submit's own admission, validations submitted and
//! versions promoted by the same functions a person's requests call.
//!
//! One advance makes passes until nothing moves (at most [`PASSES`]). A
//! pass looks at every running node (its child runs, its validation, its
//! endpoint), makes what the run named but nobody made yet, then commits
//! what it saw and starts the nodes that became ready, naming their
//! children in that commit. Because children are named before they are
//! made and made with those names (a second make fails its commit), a
//! driver that dies anywhere makes nothing twice: the next advance finds
//! what exists and makes only what does not.

use axum::extract::State;
use axum::http::StatusCode;
use mapi_access::Action;
use mapi_domain::{DatasetId, ModelVersionId, RunId, RunState as Run, Timestamp};
use mapi_endpoints::{EndpointDoc, endpoint_id};
use mapi_identity::{Caller, InternalCaller, Principal, RequestMeta};
use mapi_lifecycle::RunDoc;
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, ProblemCode};
use mapi_schema::tasks::AdvanceTask;
use mapi_schema::{
    AttemptDoc, DatasetDoc, Doc, ModelVersionDoc, ProgressDoc, RunLogDoc, TokenDoc, ValidationDoc,
    WorkflowRunDoc, key, tx_get, tx_put,
};
use mapi_store::{Direction, Op, transact};
use mapi_workflows::{DatasetRef, Ended, Kind, Node, NodeState, Seen, Start};

/// The most passes one advance makes (each commits once).
pub const PASSES: usize = 8;

/// Advance a workflow run as far as it can go now.
pub async fn advance(
    State(state): State<AppState>,
    _internal: InternalCaller,
    Json(task): Json<AdvanceTask>,
) -> Result<StatusCode, ApiError> {
    drive(&state, &task.workflow_run).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Makes passes over workflow run `id` until nothing moves.
pub(crate) async fn drive(state: &AppState, id: &str) -> Result<(), ApiError> {
    for _ in 0..PASSES {
        let Some(doc) = mapi_schema::get::<WorkflowRunDoc>(&*state.store, id).await? else {
            return Ok(());
        };
        if !doc.active {
            return Ok(());
        }
        let seen = look(state, &doc).await?;
        if seen.is_empty() && doc.run.ready().is_empty() {
            return Ok(());
        }
        commit(state, id, seen).await?;
    }
    Ok(())
}

/// Applies what a pass saw and starts the nodes that are ready, with the
/// ids of what they will make, in one commit of the re-read run.
async fn commit(state: &AppState, id: &str, seen: Vec<(String, Seen)>) -> Result<(), ApiError> {
    let now = state.clock.now();
    let seen = &seen;
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let Some(mut doc) = tx_get::<WorkflowRunDoc>(&mut tx, id).await? else {
            return Ok(tx.finish(()));
        };
        for (node, s) in seen {
            // A run that ended meanwhile (cancelled) refuses: nothing to apply.
            let _ = doc.run.observe(node, s.clone(), now);
        }
        for node in doc.run.ready() {
            let start = match doc.run.definition().node(&node).map(|n| n.kind) {
                Some(Kind::Run | Kind::Grid) => {
                    let ids = (0..children_of(&doc, &node))
                        .map(|_| Ok(RunId::generate(now, super::datasets::entropy(state)?)))
                        .collect::<Result<Vec<_>, ApiError>>()?;
                    Start::Runs(ids)
                }
                Some(Kind::Validate) => Start::Validation(super::validations::new_id(state)?),
                Some(Kind::Deploy) | None => Start::Deploy,
            };
            doc.run.start(&node, start, now).map_err(|e| ApiError::internal(e.to_string()))?;
        }
        doc.touch(now);
        tx_put(&mut tx, &doc)?;
        Ok(tx.finish(()))
    })
    .await
}

/// How many child runs grid node `id` makes.
fn children_of(doc: &WorkflowRunDoc, id: &str) -> usize {
    doc.run.definition().node(id).and_then(|n| n.combinations().ok()).map_or(0, |c| c.len())
}

/// What a pass sees of every running node, making what was named and not
/// made on the way.
async fn look(state: &AppState, doc: &WorkflowRunDoc) -> Result<Vec<(String, Seen)>, ApiError> {
    let mut seen = Vec::new();
    let who = Starter::new();
    let running: Vec<(&Node, &mapi_workflows::NodeRun)> =
        doc.run.nodes().filter(|(_, r)| r.state == NodeState::Running).collect();
    for (node, part) in running {
        let id = node.id.clone();
        match node.kind {
            Kind::Run | Kind::Grid => {
                for s in children(state, (doc, &who), node, part).await? {
                    seen.push((id.clone(), s));
                }
            }
            Kind::Validate => {
                if let Some(s) = validation(state, (doc, &who), node, part).await? {
                    seen.push((id, s));
                }
            }
            Kind::Deploy => {
                if let Some(s) = deploy(state, (doc, &who), node, part).await? {
                    seen.push((id, s));
                }
            }
        }
    }
    Ok(seen)
}

/// The workflow run's starter as one pass reads them: once, however many
/// children, validations or promotions the pass makes as them.
type Starter = tokio::sync::OnceCell<Result<Caller, String>>;

/// The person who started the workflow run, as they are now (read at most
/// once a pass, into `who`).
async fn starter(
    state: &AppState,
    (doc, who): (&WorkflowRunDoc, &Starter),
) -> Result<Result<Caller, String>, ApiError> {
    who.get_or_try_init(|| read_starter(state, doc)).await.cloned()
}

/// The person who started the workflow run, as they are now: through the
/// token they started it with (refused once it is revoked or expired), or
/// signed in.
async fn read_starter(state: &AppState, doc: &WorkflowRunDoc) -> Result<Result<Caller, String>, ApiError> {
    let principal = match &doc.token {
        None => Principal::Session { user: doc.started_by.clone(), operator: false },
        Some(hash) => {
            let token = mapi_schema::get::<TokenDoc>(&*state.store, hash).await?;
            let now = state.clock.now();
            match token {
                Some(t) if t.revoked_at.is_none() && t.expires_at > now => Principal::Token(Box::new(t)),
                _ => {
                    return Ok(Err("the API token that started this workflow run was revoked or has \
                                   expired: resume it with a valid one"
                        .to_owned()));
                }
            }
        }
    };
    Ok(Ok(Caller { principal, meta: RequestMeta::default() }))
}

/// A refusal that a later pass may not meet (a rate or quota that resets,
/// a service that answers again) is `None`: the child is made later. Any
/// other is the words to record.
fn lasting(e: ApiError) -> Result<Option<String>, ApiError> {
    match &e {
        ApiError::Problem {
            code: ProblemCode::RateLimited | ProblemCode::QuotaExceeded | ProblemCode::Unavailable,
            ..
        } => Ok(None),
        ApiError::Problem { code: ProblemCode::AlreadyExists, .. } => Ok(None),
        ApiError::Problem { detail, .. } => Ok(Some(detail.clone())),
        ApiError::Internal { .. } => Err(e),
    }
}

/// A run or grid node's children: those that ended, as seen; those named
/// and not made yet, made (a lasting refusal is seen as `refused`).
async fn children(
    state: &AppState,
    (doc, who): (&WorkflowRunDoc, &Starter),
    node: &Node,
    part: &mapi_workflows::NodeRun,
) -> Result<Vec<Seen>, ApiError> {
    let open: Vec<&mapi_workflows::Child> = part.children.iter().filter(|c| c.ended.is_none()).collect();
    let keys = open.iter().map(|c| key::<RunDoc>(c.run.as_str())).collect::<Result<Vec<_>, _>>()?;
    let docs = state.store.get(&keys, None).await?;
    let mut seen = Vec::new();
    for (child, found) in open.into_iter().zip(docs) {
        let ended = match found {
            Some(d) => ended(state, &d.decode::<RunDoc>()?, node.metric.as_deref()).await?,
            None => make(state, (doc, who), node, child).await?,
        };
        if let Some(ended) = ended {
            seen.push(Seen::Child { run: child.run.clone(), ended });
        }
    }
    Ok(seen)
}

/// How a child run ended (`None` while it runs): its state, the grid's
/// metric as its view shows it, and its model version.
async fn ended(state: &AppState, run: &RunDoc, metric: Option<&str>) -> Result<Option<Ended>, ApiError> {
    if !run.state().is_terminal() {
        return Ok(None);
    }
    let succeeded = run.state() == Run::Succeeded;
    let metric = match metric {
        Some(name) if succeeded => {
            let keys = [
                key::<ProgressDoc>(&AttemptDoc::id_of(run.id(), run.attempt()))?,
                key::<RunLogDoc>(run.id().as_str())?,
            ];
            let docs = state.store.get(&keys, None).await?;
            super::metric_scan::metrics(docs[0].as_ref(), docs[1].as_ref())?.get(name).copied()
        }
        _ => None,
    };
    let version = ModelVersionId::of_run(run.id());
    let model_version = match succeeded {
        true => mapi_schema::get::<ModelVersionDoc>(&*state.store, version.as_str())
            .await?
            .map(|v| v.id.to_string()),
        false => None,
    };
    let detail = run.error().map(|e| format!("{}: {}", e.code, e.message));
    Ok(Some(Ended { state: run.state().to_string(), metric, model_version, detail }))
}

/// Makes child `index` of `node` as the workflow run's starter. `Some`: it
/// can never be made (the refusal, seen as the child's end).
async fn make(
    state: &AppState,
    (doc, who): (&WorkflowRunDoc, &Starter),
    node: &Node,
    child: &mapi_workflows::Child,
) -> Result<Option<Ended>, ApiError> {
    let refused = |detail: String| Ended {
        state: "refused".into(),
        metric: None,
        model_version: None,
        detail: Some(detail),
    };
    let caller = match starter(state, (doc, who)).await? {
        Ok(c) => c,
        Err(why) => return Ok(Some(refused(why))),
    };
    let dataset = match node.dataset() {
        Some(DatasetRef::Id(id)) => id,
        Some(DatasetRef::Name(name)) => match named_dataset(state, doc, &name).await? {
            Some(id) => id,
            None => {
                return Ok(Some(refused(format!(
                    "no dataset named {name} in {}/{}: upload it (mapi datasets upload FILE --name {name})",
                    doc.tenant, doc.project
                ))));
            }
        },
        None => return Ok(Some(refused("the node names no dataset".to_owned()))),
    };
    let combo = &child.combination;
    let spec = node
        .spec(&dataset, combo)
        .map_err(|e| ApiError::internal(format!("a stored workflow's node: {e}")))?;
    let labels = labels(doc, node, combo);
    let made = super::runs::admit_child(
        state,
        &caller,
        (&doc.tenant, &doc.project),
        (child.run.clone(), &spec),
        labels,
    )
    .await;
    match made {
        Ok(()) => Ok(None),
        Err(e) => Ok(lasting(e)?.map(refused)),
    }
}

/// The project's newest dataset called `name`, when the node names its
/// dataset so (a workflow reads the data uploaded last under that name).
async fn named_dataset(
    state: &AppState,
    doc: &WorkflowRunDoc,
    name: &str,
) -> Result<Option<DatasetId>, ApiError> {
    let q = mapi_store::Query::new(DatasetDoc::COLLECTION)
        .filter("tenant", Op::Eq, doc.tenant.as_str())
        .filter("project", Op::Eq, doc.project.as_str())
        .filter("name", Op::Eq, name)
        .order_by("created_at", Direction::Desc)
        .limit(1);
    let found = state.store.query(&q, None).await?;
    Ok(found.first().map(|d| d.decode::<DatasetDoc>()).transpose()?.map(|d| d.id))
}

/// A child run's name and note: which workflow run and node made it, and
/// the grid's values it tries.
fn labels(
    doc: &WorkflowRunDoc,
    node: &Node,
    combo: &serde_json::Map<String, serde_json::Value>,
) -> mapi_api::labels::RunLabels {
    let values = mapi_workflows::definition::show(combo);
    let name = if values.is_empty() {
        format!("{} {}", doc.workflow, node.id)
    } else {
        format!("{} {} {values}", doc.workflow, node.id)
    };
    mapi_api::labels::RunLabels {
        name: Some(name.chars().take(200).collect()),
        note: Some(format!(
            "node {} of workflow run {} ({} v{})",
            node.id, doc.id, doc.workflow, doc.version
        )),
        ..Default::default()
    }
}

/// A validate node's validation: submitted if named and not made; seen
/// once decided.
async fn validation(
    state: &AppState,
    (doc, who): (&WorkflowRunDoc, &Starter),
    node: &Node,
    part: &mapi_workflows::NodeRun,
) -> Result<Option<Seen>, ApiError> {
    let (Some(id), Some(version)) = (&part.validation, &part.model_version) else {
        return Ok(Some(Seen::Validation(Err("the node it needs yielded no model version".into()))));
    };
    let found = match mapi_schema::get::<ValidationDoc>(&*state.store, id).await? {
        Some(v) => v,
        None => match submit(state, (doc, who), node, (id, version)).await? {
            Ok(v) => v,
            Err(refusal) => return Ok(refusal.map(|why| Seen::Validation(Err(why)))),
        },
    };
    use mapi_governance::State as V;
    Ok(match found.validation.state {
        V::Pending => None,
        V::Approved => Some(Seen::Validation(Ok(()))),
        other => {
            let reasons: Vec<&str> = found.validation.decisions.iter().map(|d| d.reason.as_str()).collect();
            let why = match reasons.is_empty() {
                true => format!("see `mapi models validations {version}`"),
                false => reasons.join("; "),
            };
            Some(Seen::Validation(Err(format!("validation {id} {}: {why}", other.as_str()))))
        }
    })
}

/// Submits a validate node's validation as the starter. `Err(None)`: try
/// again later; `Err(Some(why))`: it can never be submitted.
async fn submit(
    state: &AppState,
    (doc, who): (&WorkflowRunDoc, &Starter),
    node: &Node,
    (id, version): (&str, &str),
) -> Result<Result<ValidationDoc, Option<String>>, ApiError> {
    let caller = match starter(state, (doc, who)).await? {
        Ok(c) => c,
        Err(why) => return Ok(Err(Some(why))),
    };
    let made = super::validations::Made::ByWorkflow { id: id.to_owned(), workflow_run: doc.id.clone() };
    let submitted = async {
        let v = super::validations::version_for(state, &caller, version, Action::Validate).await?;
        let v = super::model_versions::kept(v)?;
        super::validations::submit_version(state, &caller, &v, node.endpoint.clone(), made).await
    };
    match submitted.await {
        Ok(v) => Ok(Ok(v)),
        Err(e) => Ok(Err(lasting(e)?)),
    }
}

/// Where a deploy node's promotion is, read from its endpoint.
#[derive(Debug, PartialEq)]
enum Promoted {
    /// Nothing of it yet: promote.
    NotYet,
    /// Its canary is under way.
    Rolling,
    /// The version serves.
    Serving,
    /// Its revision was made and the promotion ended without it serving.
    RolledBack,
}

/// Where the promotion of `version` on `endpoint` is, for a node started
/// at `since`.
fn promoted(endpoint: &EndpointDoc, version: &str, since: Timestamp) -> Promoted {
    let ours = |v: Option<&ModelVersionId>| v.is_some_and(|v| v.as_str() == version);
    if endpoint.promotion.as_ref().is_some_and(|p| ours(p.model_version.as_ref())) {
        return Promoted::Rolling;
    }
    if endpoint.promotion.is_none() && ours(endpoint.model_version()) {
        return Promoted::Serving;
    }
    if endpoint.revisions.iter().any(|r| r.created_at >= since && ours(r.model_version())) {
        return Promoted::RolledBack;
    }
    Promoted::NotYet
}

/// A deploy node's promotion: started if not yet, seen once it serves or
/// was rolled back.
async fn deploy(
    state: &AppState,
    (doc, who): (&WorkflowRunDoc, &Starter),
    node: &Node,
    part: &mapi_workflows::NodeRun,
) -> Result<Option<Seen>, ApiError> {
    let (Some(alias), Some(version), Some(since)) = (&node.endpoint, &part.model_version, part.started_at)
    else {
        return Ok(Some(Seen::Deploy(Err("the node it needs yielded no model version".into()))));
    };
    let id = endpoint_id(&doc.tenant, &doc.project, alias);
    let Some(endpoint) = mapi_schema::get::<EndpointDoc>(&*state.store, &id).await? else {
        return Ok(Some(Seen::Deploy(Err(format!(
            "no endpoint `{alias}` in {}/{}: create it, then resume this workflow run",
            doc.tenant, doc.project
        )))));
    };
    match promoted(&endpoint, version, since) {
        Promoted::Rolling => Ok(None),
        Promoted::Serving => Ok(Some(Seen::Deploy(Ok(())))),
        Promoted::RolledBack => Ok(Some(Seen::Deploy(Err(format!(
            "the promotion of {version} on {alias} was rolled back: see the endpoint's events"
        ))))),
        Promoted::NotYet => {
            let caller = match starter(state, (doc, who)).await? {
                Ok(c) => c,
                Err(why) => return Ok(Some(Seen::Deploy(Err(why)))),
            };
            let version = ModelVersionId::parse(version).map_err(|e| ApiError::internal(e.to_string()))?;
            let key = (&doc.tenant, &doc.project, alias.as_str());
            match super::endpoints::promote_version(state, &caller, key, version).await {
                Ok(_) => Ok(None),
                // Another advance may have promoted it meanwhile: the next pass reads the endpoint.
                Err(ApiError::Problem { code: ProblemCode::FailedPrecondition, detail, .. })
                    if detail.contains("promoting already") || detail.contains("changed meanwhile") =>
                {
                    Ok(None)
                }
                Err(e) => Ok(lasting(e)?.map(|why| Seen::Deploy(Err(why)))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_that_may_pass_waits_and_any_other_is_recorded() {
        for code in [ProblemCode::RateLimited, ProblemCode::QuotaExceeded, ProblemCode::Unavailable] {
            assert_eq!(lasting(ApiError::new(code, "later")).expect("problem"), None, "{code}");
        }
        let why = lasting(ApiError::not_found("dataset ds_1 not found")).expect("problem");
        assert_eq!(why.as_deref(), Some("dataset ds_1 not found"));
        assert!(lasting(ApiError::internal("store down")).is_err(), "ours: the queue retries the task");
    }
}
