//! Validations of model versions against the policy in force, and the
//! check every promotion passes ([`governing`]). A runner submits a version
//! (its automatic checks run at once, on the metrics of the run it came
//! from and, for improvements, the version the named endpoint serves);
//! reviewers approve or reject it with a reason; admins deprecate a
//! version. Who may decide, and what a validation admits, is
//! `mapi_governance`'s; every submission, decision and deprecation is
//! audited in the commit that makes it.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use mapi_access::{Action, Resource};
use mapi_api::governance::{
    DecideValidation, DeprecateVersion, SubmitValidation, ValidationPage, ValidationView, Verdict,
};
use mapi_domain::{ModelVersionId, ProjectId, TenantId};
use mapi_endpoints::{EndpointDoc, endpoint_id};
use mapi_governance::{Decider, Refusal, Validation, evaluate};
use mapi_identity::{Audit, Caller, Target, authorize};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path, ProblemCode};
use mapi_schema::{
    AttemptDoc, Deprecation, Doc, ModelVersionDoc, ProgressDoc, RunLogDoc, ValidationDoc, key, tx_create,
    tx_get, tx_put,
};
use mapi_store::{Op, Query, transact};

/// Loads a model version `caller` may act on as `action` (one it may not see answers as missing).
pub(crate) async fn version_for(
    state: &AppState,
    caller: &Caller,
    id: &str,
    action: Action,
) -> Result<ModelVersionDoc, ApiError> {
    let what = format!("model version {}", id.chars().take(64).collect::<String>());
    let missing = || ApiError::not_found(format!("{what} not found"));
    let id = ModelVersionId::parse(id).map_err(|_| missing())?;
    let v = mapi_schema::get::<ModelVersionDoc>(&*state.store, id.as_str()).await?.ok_or_else(missing)?;
    authorize(state, caller, Target::project(&v.tenant, &v.project, &what), Resource::Model, action).await?;
    Ok(v)
}

/// Loads a validation `caller` may act on as `action`.
async fn validation_for(
    state: &AppState,
    caller: &Caller,
    id: &str,
    action: Action,
) -> Result<ValidationDoc, ApiError> {
    let what = format!("validation {}", id.chars().take(64).collect::<String>());
    let missing = || ApiError::not_found(format!("{what} not found"));
    if !id.starts_with("val_") || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return Err(missing());
    }
    let v = mapi_schema::get::<ValidationDoc>(&*state.store, id).await?.ok_or_else(missing)?;
    authorize(state, caller, Target::project(&v.tenant, &v.project, &what), Resource::Model, action).await?;
    Ok(v)
}

/// The metrics of the run a version came from: what the method reported in
/// the sealed attempt, with what people logged to the run over them.
async fn metrics_of(state: &AppState, v: &ModelVersionDoc) -> Result<BTreeMap<String, f64>, ApiError> {
    let keys =
        [key::<ProgressDoc>(&AttemptDoc::id_of(&v.run, v.attempt))?, key::<RunLogDoc>(v.run.as_str())?];
    let docs = state.store.get(&keys, None).await?;
    super::metric_scan::metrics(docs[0].as_ref(), docs[1].as_ref())
}

/// The metrics of the version endpoint `alias` of `v`'s project serves now
/// (none when it serves a container or nothing yet).
async fn serving_metrics(
    state: &AppState,
    v: &ModelVersionDoc,
    alias: &str,
) -> Result<Option<BTreeMap<String, f64>>, ApiError> {
    let missing =
        || ApiError::not_found(format!("endpoint {} not found in {}/{}", alias, v.tenant, v.project));
    mapi_domain::endpoint::check_alias(alias).map_err(|_| missing())?;
    let doc = mapi_schema::get::<EndpointDoc>(&*state.store, &endpoint_id(&v.tenant, &v.project, alias))
        .await?
        .ok_or_else(missing)?;
    let Some(serving) = doc.revision(&doc.stable).and_then(mapi_endpoints::Revision::model_version) else {
        return Ok(None);
    };
    match mapi_schema::get::<ModelVersionDoc>(&*state.store, serving.as_str()).await? {
        Some(s) => Ok(Some(metrics_of(state, &s).await?)),
        None => Ok(None),
    }
}

fn view(d: ValidationDoc) -> ValidationView {
    ValidationView {
        id: d.id,
        tenant: d.tenant,
        project: d.project,
        model_version: d.model_version,
        endpoint: d.endpoint,
        validation: d.validation,
    }
}

/// Submit a model version for validation against the policy in force.
#[utoipa::path(post, path = "/v1/model-versions/{id}/validations", tag = "governance",
    params(("id" = ModelVersionId, Path)),
    request_body = SubmitValidation,
    responses(
        (status = 201, body = ValidationView, description = "Submitted: `failed` when an automatic check failed, `approved` when the policy asks no approvals, else `pending`"),
        (status = 400, body = mapi_problem::Problem, description = "The policy asks an improvement and no endpoint is named"),
        (status = 404, body = mapi_problem::Problem),
        (status = 409, body = mapi_problem::Problem, description = "The version is deprecated"),
        (status = 410, body = mapi_problem::Problem, description = "The version's bytes expired"),
    ),
    security(("session" = []), ("token" = [])))]
pub async fn submit(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Json(body): Json<SubmitValidation>,
) -> Result<(StatusCode, Json<ValidationView>), ApiError> {
    let version = super::model_versions::kept(version_for(&state, &caller, &id, Action::Validate).await?)?;
    let doc = submit_version(&state, &caller, &version, body.endpoint, Made::Now).await?;
    Ok((StatusCode::CREATED, Json(view(doc))))
}

/// Where a validation comes from: a runner's request, or a workflow run's
/// `validate` node (with the id it chose before, so a second try finds the
/// first instead of making another).
pub(crate) enum Made {
    Now,
    ByWorkflow { id: String, workflow_run: String },
}

/// Submits `version` for validation under the policy in force, as `caller`:
/// its automatic checks run now. For a workflow's validation already made,
/// answers it as it is.
pub(crate) async fn submit_version(
    state: &AppState,
    caller: &Caller,
    version: &ModelVersionDoc,
    endpoint: Option<String>,
    made: Made,
) -> Result<ValidationDoc, ApiError> {
    if let Made::ByWorkflow { id, .. } = &made
        && let Some(doc) = mapi_schema::get::<ValidationDoc>(&*state.store, id).await?
    {
        return Ok(doc);
    }
    if let Some(d) = &version.deprecated {
        return Err(deprecated(version, d));
    }
    let policy = super::policies::in_force(state, &version.tenant, &version.project).await?;
    let serving = match (&endpoint, policy.improvements.is_empty()) {
        (Some(alias), _) => serving_metrics(state, version, alias).await?,
        (None, true) => None,
        (None, false) => {
            return Err(ApiError::invalid(
                "the policy asks an improvement over the version serving: name the endpoint this version is to serve (`endpoint`)",
            ));
        }
    };
    let checks = evaluate(&policy, &metrics_of(state, version).await?, serving.as_ref());
    let now = state.clock.now();
    let validation = Validation::submit(policy, caller.user().clone(), checks, now);
    let (id, workflow_run) = match made {
        Made::Now => (new_id(state)?, None),
        Made::ByWorkflow { id, workflow_run } => (id, Some(workflow_run)),
    };
    let doc = ValidationDoc {
        id,
        tenant: version.tenant.clone(),
        project: version.project.clone(),
        model_version: version.id.clone(),
        endpoint,
        workflow_run,
        validation,
    };
    let record = Audit::by(caller, "model.validate", format!("validations/{}", doc.id))
        .tenant(&doc.tenant)
        .project(&doc.project)
        .detail(format!("{} submitted: {}", doc.model_version, doc.validation.state.as_str()))
        .into_doc(now, &*state.entropy);
    let (d, r) = (&doc, &record);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        tx_create(&mut tx, d)?;
        tx_create(&mut tx, r)?;
        Ok(tx.finish(()))
    })
    .await?;
    Ok(doc)
}

/// A new validation's id: `val_` and 24 hex digits.
pub(crate) fn new_id(state: &AppState) -> Result<String, ApiError> {
    let suffix: String =
        mapi_entropy::bytes::<12>(&*state.entropy)?.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("val_{suffix}"))
}

/// A model version's validations, newest first.
#[utoipa::path(get, path = "/v1/model-versions/{id}/validations", tag = "governance",
    params(("id" = ModelVersionId, Path)),
    responses((status = 200, body = ValidationPage), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = [])))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ValidationPage>, ApiError> {
    let version = version_for(&state, &caller, &id, Action::Read).await?;
    let found = of_version(&state, &version).await?;
    Ok(Json(ValidationPage { validations: found.into_iter().map(view).collect() }))
}

/// The validations of `version`, newest first (a version has few).
async fn of_version(state: &AppState, version: &ModelVersionDoc) -> Result<Vec<ValidationDoc>, ApiError> {
    let q = Query::new(ValidationDoc::COLLECTION).filter("tenant", Op::Eq, version.tenant.as_str()).filter(
        "model_version",
        Op::Eq,
        version.id.as_str(),
    );
    let mut found = state
        .store
        .query(&q, None)
        .await?
        .iter()
        .map(|d| d.decode::<ValidationDoc>())
        .collect::<Result<Vec<_>, _>>()?;
    found.sort_by(|a, b| b.validation.submitted_at.cmp(&a.validation.submitted_at).then(b.id.cmp(&a.id)));
    Ok(found)
}

/// A validation: its policy, checks and decisions.
#[utoipa::path(get, path = "/v1/validations/{id}", tag = "governance",
    params(("id" = String, Path)),
    responses((status = 200, body = ValidationView), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = [])))]
pub async fn get_validation(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ValidationView>, ApiError> {
    Ok(Json(view(validation_for(&state, &caller, &id, Action::Read).await?)))
}

fn refused(r: Refusal) -> ApiError {
    let detail = r.to_string();
    match r {
        Refusal::SelfApproval(_) => ApiError::new(ProblemCode::SelfApprovalForbidden, detail),
        Refusal::Token | Refusal::NotReviewer => ApiError::forbidden(detail),
        Refusal::AlreadyDecided(_) | Refusal::NotPending(_) => ApiError::precondition(detail),
        Refusal::NoReason => ApiError::invalid(detail),
    }
}

/// Changes a validation with `f` and audits it as `action` (with `reason`,
/// if one was given), in one commit.
async fn change(
    state: &AppState,
    caller: &Caller,
    (loaded, reason): (&ValidationDoc, Option<&str>),
    action: &str,
    f: impl Fn(&Validation) -> Result<Validation, Refusal>,
) -> Result<ValidationDoc, ApiError> {
    let now = state.clock.now();
    let (id, f) = (loaded.id.as_str(), &f);
    let record = Audit::by(caller, action, format!("validations/{id}"))
        .tenant(&loaded.tenant)
        .project(&loaded.project)
        .into_doc(now, &*state.entropy);
    let record = &record;
    let doc = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let mut doc = tx_get::<ValidationDoc>(&mut tx, id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("validation {id} not found")))?;
        doc.validation = f(&doc.validation).map_err(refused)?;
        let mut record = record.clone();
        let why = reason.map(|r| format!(", because: {}", r.trim())).unwrap_or_default();
        record.detail = Some(format!("{}: {}{why}", doc.model_version, doc.validation.state.as_str()));
        tx_put(&mut tx, &doc)?;
        tx_create(&mut tx, &record)?;
        Ok(tx.finish(doc))
    })
    .await?;
    // The workflow run waiting on it moves now (else at its next tick).
    if let Some(run) = &doc.workflow_run {
        let tag = format!("{}-{}", doc.id, doc.validation.state.as_str());
        if let Err(e) = mapi_schema::tasks::push_advance(&*state.queue, run, &tag).await {
            tracing::warn!(workflow_run = %run, error = %e, "advance not pushed; the tick pushes it");
        }
    }
    Ok(doc)
}

/// Approve or reject a pending validation: a reviewer, signed in, who did not submit it.
#[utoipa::path(post, path = "/v1/validations/{id}/approvals", tag = "governance",
    params(("id" = String, Path)),
    request_body = DecideValidation,
    responses(
        (status = 200, body = ValidationView),
        (status = 400, body = mapi_problem::Problem, description = "No reason given"),
        (status = 403, body = mapi_problem::Problem, description = "SELF_APPROVAL_FORBIDDEN: the submitter; FORBIDDEN: an API token, or no reviewer capability"),
        (status = 404, body = mapi_problem::Problem),
        (status = 409, body = mapi_problem::Problem, description = "Not pending, or decided by this person already"),
    ),
    security(("session" = []), ("token" = [])))]
pub async fn decide(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Json(body): Json<DecideValidation>,
) -> Result<Json<ValidationView>, ApiError> {
    let loaded = validation_for(&state, &caller, &id, Action::Approve).await?;
    // The matrix granted `approve`: the caller holds the reviewer capability here.
    let who = Decider { user: caller.user(), via_token: caller.token().is_some(), reviewer: true };
    let approve = body.decision == Verdict::Approve;
    let action = if approve { "model.approve" } else { "model.reject" };
    let now = state.clock.now();
    let reason = Some(body.reason.as_str());
    let doc =
        change(&state, &caller, (&loaded, reason), action, |v| v.decide(who, approve, &body.reason, now))
            .await?;
    Ok(Json(view(doc)))
}

/// Withdraw a pending validation.
#[utoipa::path(post, path = "/v1/validations/{id}/cancel", tag = "governance",
    params(("id" = String, Path)),
    responses((status = 200, body = ValidationView), (status = 404, body = mapi_problem::Problem), (status = 409, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = [])))]
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ValidationView>, ApiError> {
    let loaded = validation_for(&state, &caller, &id, Action::Validate).await?;
    let now = state.clock.now();
    Ok(Json(view(
        change(&state, &caller, (&loaded, None), "model.validation_cancel", |v| v.cancel(now)).await?,
    )))
}

/// Deprecate a model version: it may no longer be promoted.
#[utoipa::path(post, path = "/v1/model-versions/{id}/deprecate", tag = "governance",
    params(("id" = ModelVersionId, Path)),
    request_body = DeprecateVersion,
    responses((status = 204, description = "Deprecated"), (status = 400, body = mapi_problem::Problem), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = [])))]
pub async fn deprecate(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Json(body): Json<DeprecateVersion>,
) -> Result<StatusCode, ApiError> {
    let version = version_for(&state, &caller, &id, Action::Update).await?;
    let reason = body.reason.trim();
    if reason.is_empty() || reason.chars().count() > 1000 {
        return Err(ApiError::invalid("say why: a deprecation needs a reason (1 to 1000 characters)"));
    }
    let now = state.clock.now();
    let record = Audit::by(&caller, "model.update", format!("model-versions/{}", version.id))
        .tenant(&version.tenant)
        .project(&version.project)
        .detail(format!("deprecated: {reason}"))
        .into_doc(now, &*state.entropy);
    let deprecation = Deprecation { by: caller.user().clone(), at: now, reason: reason.to_owned() };
    let (id, record, deprecation) = (version.id.as_str(), &record, &deprecation);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let mut doc = tx_get::<ModelVersionDoc>(&mut tx, id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("model version {id} not found")))?;
        doc.deprecated = Some(deprecation.clone());
        tx_put(&mut tx, &doc)?;
        tx_create(&mut tx, record)?;
        Ok(tx.finish(()))
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

fn deprecated(v: &ModelVersionDoc, d: &Deprecation) -> ApiError {
    ApiError::precondition(format!(
        "model version {} was deprecated by {} on {}: {}; use another version",
        v.id,
        d.by,
        d.at.to_rfc3339(),
        d.reason
    ))
}

/// Whether `version` may serve traffic on endpoint `alias` of `(tenant,
/// project)`: not deprecated, and, where a policy governs, a validation of
/// it admits it under the policy in force now (one that checked its
/// improvements against this endpoint, when the policy asks any).
pub(super) async fn governing(
    state: &AppState,
    version: &ModelVersionDoc,
    (tenant, project, alias): (&TenantId, &ProjectId, &str),
) -> Result<(), ApiError> {
    if let Some(d) = &version.deprecated {
        return Err(deprecated(version, d));
    }
    let policy = super::policies::in_force(state, tenant, project).await?;
    if policy.is_empty() {
        return Ok(());
    }
    let now = state.clock.now();
    let validations = of_version(state, version).await?;
    let for_here =
        |v: &&ValidationDoc| policy.improvements.is_empty() || v.endpoint.as_deref() == Some(alias);
    // The newest approved validation says best what is missing; else the newest of any state.
    let (mut approved, mut newest) = (None, None);
    for v in validations.iter().filter(for_here) {
        match v.validation.admits(&policy, now) {
            Ok(()) => return Ok(()),
            Err(m) => {
                let why = || format!("its validation {} does not admit it: {m}", v.id);
                if v.validation.state == mapi_governance::State::Approved && approved.is_none() {
                    approved = Some(why());
                }
                newest.get_or_insert_with(why);
            }
        }
    }
    let why = approved.or(newest);
    let why = why.unwrap_or_else(|| {
        let against =
            if policy.improvements.is_empty() { String::new() } else { format!(" against endpoint {alias}") };
        format!("it has no validation{against}: submit it with `mapi models validate {}`", version.id)
    });
    Err(ApiError::precondition(format!(
        "model version {} cannot serve under the governance policy of {tenant}/{project}: {why}",
        version.id
    )))
}
