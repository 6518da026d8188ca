//! Model endpoints: serve a model version, score it, promote another
//! version through the gate, roll back, delete. Authorized by the matrix's
//! `endpoint` rows; scores by `endpoint run` with the alias, so a
//! `score:<alias>` token reaches only its endpoint. The handlers write the
//! endpoint's document and ask the host; `reconcile-tick` moves it with
//! what the host reports (`mapi_endpoints::reconcile`).
//!
//! A score is refused (and the refusal audited) before anything is sent to
//! the host, so an unauthorized caller never wakes a scaled-to-zero server.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use mapi_access::{Action, Resource};
use mapi_admission::quota;
use mapi_api::endpoints::{
    Container, CreateEndpoint, EndpointPage, EndpointView, PromoteEndpoint, ScaleEndpoint, ScoreRequest,
    ScoreResponse,
};
use mapi_domain::endpoint::{Access, EndpointStatus, check_alias, default_region, resolve_region};
use mapi_domain::{ModelVersionId, ProjectId, Residency, TenantId};
use mapi_endpoints::stats::{SHARDS, StatsDoc};
use mapi_endpoints::{
    EndpointDoc, Promotion, Revision, ServedContainer, ServedModel, Serves, endpoint_id, service_name,
};
use mapi_hosting::{
    BundleFile, HostingError, ImageRef, ModelRef, RevisionSpec, Scaling, ServiceSpec, Serving, Traffic,
};
use mapi_identity::{Anonymous, Audit, Caller};
use mapi_objects::ObjectKey;
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path, ProblemCode, RawBody};
use mapi_quota::counters::Bumps;
use mapi_schema::{Doc, ModelVersionDoc, tx_create, tx_get, tx_put};
use mapi_store::{Op, Query, transact};

use super::datasets::require_project;
use super::endpoint_access::{body_of, hosting_error, load_granted};
use super::endpoint_room::{admission_of, held_instances, tenant_endpoints};

/// Loads an endpoint `caller` may act on as `action`. One of another
/// tenant, or of a project the caller cannot see, answers as a missing one.
async fn load(
    state: &AppState,
    caller: &Caller,
    key: (&TenantId, &ProjectId, &str),
    action: Action,
) -> Result<EndpointDoc, ApiError> {
    Ok(load_granted(state, caller, key, action).await?.0)
}

/// One row of a fit's data and the fit's own prediction for it (the smoke test's).
type Example = (serde_json::Map<String, serde_json::Value>, f64);

/// A model version that can be served, verified: what its revision records
/// and what the host is given.
struct Servable {
    version: ModelVersionDoc,
    model: ModelRef,
    example: Option<Example>,
    plugin: Option<mapi_endpoints::ServedPlugin>,
}

/// What a new revision serves: a model version, verified, or the tenant's container.
enum Serve {
    Model(Box<Servable>),
    Container(Box<OwnContainer>),
}

/// A tenant's container as asked for, and as the host is given it.
struct OwnContainer {
    container: Container,
    image: ImageRef,
}

impl Serve {
    /// What the endpoint's document records of revision `tag`.
    fn revision(&self, tag: String, now: mapi_domain::Timestamp) -> Revision {
        let serves = match self {
            Serve::Model(m) => Serves::Model(ServedModel {
                model_version: m.version.id.clone(),
                bundle: m.version.bundle.clone(),
                manifest_sha256: m.version.manifest_sha256.clone(),
                example: m.example.clone(),
                plugin: m.plugin.clone(),
            }),
            Serve::Container(c) => Serves::Container(ServedContainer { container: c.container.clone() }),
        };
        Revision { tag, serves, created_at: now }
    }

    /// What the host is given.
    fn spec(self, tag: String) -> RevisionSpec {
        let serves = match self {
            Serve::Model(m) => Serving::Model(m.model),
            Serve::Container(c) => Serving::Image(c.image),
        };
        RevisionSpec { tag, serves }
    }

    /// What it serves, in words.
    fn described(&self) -> String {
        match self {
            Serve::Model(m) => m.version.id.to_string(),
            Serve::Container(c) => format!("image {}", c.container.image),
        }
    }

    /// The version a promotion to it names, if it is one.
    fn version(&self) -> Option<ModelVersionId> {
        match self {
            Serve::Model(m) => Some(m.version.id.clone()),
            Serve::Container(_) => None,
        }
    }
}

/// What a create or promote body asks to serve: exactly one of a model version and a container.
async fn serve_of(
    state: &AppState,
    (caller, action): (&Caller, &str),
    (tenant, project, alias): (&TenantId, &ProjectId, &str),
    (version, container): (Option<&ModelVersionId>, Option<&Container>),
) -> Result<Serve, ApiError> {
    match (version, container) {
        (Some(id), None) => {
            let model = model_of(state, (caller, action), (tenant, project, alias), id).await?;
            Ok(Serve::Model(Box::new(model)))
        }
        (None, Some(container)) => {
            let secrets = mapi_endpoints::check_container(container).map_err(ApiError::invalid)?;
            if let Some(why) = state.hosting.container_refusal() {
                return Err(ApiError::precondition(why));
            }
            if let Some(why) = state.hosting.image_refusal(tenant, &container.image) {
                return Err(ApiError::forbidden(why));
            }
            let image = ImageRef {
                image: container.image.clone(),
                port: container.port,
                health_path: container.health_path.clone(),
                tenant: tenant.clone(),
                secrets,
            };
            Ok(Serve::Container(Box::new(OwnContainer { container: container.clone(), image })))
        }
        _ => Err(ApiError::invalid(
            "give exactly one of model_version (a fit the platform's model server serves) and container \
             (your own model-server image)",
        )),
    }
}

/// The model a revision serves, read from its bundle (which verified).
/// An integrity failure is refused, audited as `action` of `caller`, logged and counted.
async fn model_of(
    state: &AppState,
    (caller, action): (&Caller, &str),
    (tenant, project, alias): (&TenantId, &ProjectId, &str),
    id: &ModelVersionId,
) -> Result<Servable, ApiError> {
    let missing =
        || ApiError::not_found(format!("model version {id} not found in project {tenant}/{project}"));
    let version =
        mapi_schema::get::<ModelVersionDoc>(&*state.store, id.as_str()).await?.ok_or_else(missing)?;
    if (&version.tenant, &version.project) != (tenant, project) {
        return Err(missing());
    }
    let version = super::model_versions::kept(version)?;
    super::validations::governing(state, &version, (tenant, project, alias)).await?;
    let is_plugin = version.method.starts_with(mapi_plugins::PREFIX);
    if is_plugin && let Some(refused) = mapi_admission::plugin_serving_refused(state).await? {
        return Err(refused);
    }
    let prefix = ObjectKey::parse(&version.bundle)
        .map_err(|e| ApiError::internal_from(format!("bundle prefix of {id}"), e))?;
    let read =
        mapi_bundles::read_pinned(&*state.objects, &*state.signer, &prefix, &version.manifest_sha256).await;
    let files = match read {
        Ok(files) => files,
        Err(e) => return Err(super::model_versions::refuse(state, caller, &version, action, e).await),
    };
    let python = mapi_methods::find(&version.method).and_then(|m| m.python);
    let (example, plugin) = match (is_plugin, python) {
        (true, _) => (None, Some(plugin_servable(&version, &files)?)),
        (false, Some(_)) => {
            descriptor(&version, &files)?;
            (None, None)
        }
        (false, None) => (builtin_example(&version, &files)?, None),
    };
    let trusted_keys = serde_json::to_string(&state.signer.trusted_keys().export())?;
    let model = ModelRef {
        bundle: version.bundle.clone(),
        manifest_sha256: version.manifest_sha256.clone(),
        trusted_keys,
        files: files.into_iter().map(|(k, b)| BundleFile { key: k.to_string(), bytes: b.to_vec() }).collect(),
        base: python.map(|p| p.base.to_owned()),
    };
    Ok(Servable { version, model, example, plugin })
}

/// A built-in fit's model checks as the server will load it; its example is the smoke test's.
fn builtin_example(
    version: &ModelVersionDoc,
    files: &[(ObjectKey, bytes::Bytes)],
) -> Result<Option<Example>, ApiError> {
    let id = &version.id;
    let model = files.iter().find(|(k, _)| k.as_str().ends_with("/model.json")).ok_or_else(|| {
        ApiError::precondition(format!(
            "model version {id} is of method {}, which makes no servable model: serve a tabular.linear fit",
            version.method
        ))
    })?;
    mapi_methods::predict::Model::load(&model.1)
        .map_err(|e| ApiError::precondition(format!("model version {id}: {e}")))?;
    Ok(mapi_endpoints::example_of(&model.1))
}

/// The file `name` of a version's bundle, among its verified `files`.
fn bundle_file<'a>(
    version: &ModelVersionDoc,
    files: &'a [(ObjectKey, bytes::Bytes)],
    name: &str,
) -> Option<&'a bytes::Bytes> {
    let key = mapi_bundles::serving::key(&version.bundle, name);
    files.iter().find(|(k, _)| k.as_str() == key).map(|(_, b)| b)
}

/// The serving descriptor of a version served by Python; a version sealed
/// without one (before its method could be served) says to fit again.
fn descriptor(
    version: &ModelVersionDoc,
    files: &[(ObjectKey, bytes::Bytes)],
) -> Result<mapi_bundles::serving::Serving, ApiError> {
    let id = &version.id;
    let bytes = bundle_file(version, files, mapi_bundles::serving::DESCRIPTOR).ok_or_else(|| {
        ApiError::precondition(format!(
            "model version {id} was sealed without what serves it, so it cannot be served: run {} again",
            version.method
        ))
    })?;
    mapi_bundles::serving::Serving::from_bytes(bytes)
        .map_err(|e| ApiError::internal(format!("model version {id}: {e}")))
}

/// A plugin's model version serves when its bundle holds the serving
/// descriptor and the package, and the package's method has a `predict` entry.
fn plugin_servable(
    version: &ModelVersionDoc,
    files: &[(ObjectKey, bytes::Bytes)],
) -> Result<mapi_endpoints::ServedPlugin, ApiError> {
    use mapi_bundles::serving::{PACKAGE, ServedCode};
    let id = &version.id;
    let ServedCode::Plugin { plugin, version: plugin_version, method, package_sha256 } =
        descriptor(version, files)?.code
    else {
        return Err(ApiError::internal(format!("model version {id} of a plugin is sealed as a built-in's")));
    };
    let package = bundle_file(version, files, PACKAGE)
        .ok_or_else(|| ApiError::internal(format!("model version {id} has no package copy")))?;
    let package = mapi_plugins::package::read(package)
        .map_err(|e| ApiError::internal(format!("model version {id}: its package: {e}")))?;
    if package.manifest.method(&method).and_then(|m| m.predict.as_ref()).is_none() {
        return Err(ApiError::precondition(format!(
            "method {} of plugin {plugin} {plugin_version} has no predict entry, so its models cannot be served: add \
             `predict = \"module:function\"` to it in {}, publish a new version and fit again",
            version.method,
            mapi_plugins::manifest::FILE
        )));
    }
    Ok(mapi_endpoints::ServedPlugin { name: plugin, version: plugin_version, sha256: package_sha256 })
}

async fn view(state: &AppState, doc: &EndpointDoc) -> Result<EndpointView, ApiError> {
    let mut shards = Vec::new();
    for r in &doc.revisions {
        for shard in 0..SHARDS {
            if let Some(s) =
                mapi_schema::get::<StatsDoc>(&*state.store, &StatsDoc::id_of(&doc.id, &r.tag, shard)).await?
            {
                shards.push(s);
            }
        }
    }
    let mut view = doc.view(&mapi_endpoints::Usage::sum(&shards));
    // An endpoint still serving a version deprecated since is flagged.
    let serving = std::iter::once(doc.stable.as_str()).chain(doc.traffic.iter().map(|t| t.tag.as_str()));
    let versions = serving
        .filter_map(|t| doc.revision(t).and_then(Revision::model_version))
        .chain(doc.promotion.iter().filter_map(|p| p.model_version.as_ref()));
    let mut seen = std::collections::BTreeSet::new();
    for version in versions.filter(|v| seen.insert(v.as_str().to_owned())) {
        let found = mapi_schema::get::<ModelVersionDoc>(&*state.store, version.as_str()).await?;
        if let Some(d) = found.and_then(|v| v.deprecated) {
            view.deprecated.push(mapi_api::endpoints::DeprecatedServing {
                model_version: version.clone(),
                by: d.by,
                at: d.at,
                reason: d.reason,
            });
        }
    }
    Ok(view)
}

/// The region and scaling of a new endpoint of a tenant with `residency`:
/// the region named (which must lie within the residency), or the one the
/// residency gives.
fn checked(body: &CreateEndpoint, residency: &Residency) -> Result<(String, Scaling), ApiError> {
    check_alias(&body.alias).map_err(ApiError::invalid)?;
    let named = body.region.clone().unwrap_or_else(|| default_region(residency));
    let region = resolve_region(&named, body.accelerator).map_err(ApiError::invalid)?;
    if !residency.admits(&region) {
        return Err(ApiError::precondition(format!(
            "region {region} is outside the tenant's data residency {residency}, which needs {}: \
             leave region out (it is then {}) or name a region there",
            residency.requirement(),
            default_region(residency)
        )));
    }
    let scaling = Scaling { min: body.min_instances, max: body.max_instances };
    scaling.check().map_err(ApiError::invalid)?;
    Ok((region, scaling))
}

/// Serve a model version as an endpoint.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant}/projects/{project}/endpoints",
    tag = "endpoints",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path)),
    request_body = CreateEndpoint,
    responses(
        (status = 202, body = EndpointView, description = "Deploying: poll until `status` is `ready` or `failed`"),
        (status = 400, body = mapi_problem::Problem),
        (status = 403, body = mapi_problem::Problem, description = "FORBIDDEN: the role or scope is missing, or the version is a plugin's and uploaded code is switched off"),
        (status = 404, body = mapi_problem::Problem),
        (status = 409, body = mapi_problem::Problem, description = "ALREADY_EXISTS: the alias is taken; FAILED_PRECONDITION: the version makes no servable model (or a plugin's, which this host does not sandbox)"),
        (status = 410, body = mapi_problem::Problem, description = "GONE: the version's bytes expired"),
    ),
    security(("session" = []), ("token" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    Json(body): Json<CreateEndpoint>,
) -> Result<(StatusCode, Json<EndpointView>), ApiError> {
    let granted =
        require_project(&state, &caller, &tenant, &project, Resource::Endpoint, Action::Create).await?;
    let (region, scaling) = checked(&body, &granted.tenant.residency)?;
    let asked = (body.model_version.as_ref(), body.container.as_ref());
    let servable =
        serve_of(&state, (&caller, "endpoint.create"), (&tenant, &project, &body.alias), asked).await?;
    let now = state.clock.now();
    let tag = "r1".to_owned();
    let mut doc = EndpointDoc {
        id: endpoint_id(&tenant, &project, &body.alias),
        tenant: tenant.clone(),
        project: project.clone(),
        alias: body.alias.clone(),
        service: service_name(&tenant, &project, &body.alias),
        hosting: state.hosting.name().to_owned(),
        accelerator: body.accelerator,
        region: region.clone(),
        scaling,
        access: body.access,
        status: EndpointStatus::Deploying,
        message: None,
        url: None,
        revisions: vec![servable.revision(tag.clone(), now)],
        stable: tag.clone(),
        previous: None,
        traffic: vec![Traffic { tag: tag.clone(), percent: 100 }],
        promotion: None,
        active: true,
        events: Vec::new(),
        created_at: now,
        created_by: caller.user().clone(),
        updated_at: now,
        rollout_started_at: now,
        rescale: false,
    };
    doc.event(now, "created", format!("{} on {} in {region}", servable.described(), body.accelerator));
    let record = Audit::by(&caller, "endpoint.create", format!("endpoints/{}", doc.id))
        .tenant(&tenant)
        .project(&project)
        .detail(format!("{} serving {}", body.alias, servable.described()))
        .into_doc(now, &*state.entropy);
    admit_and_create(&state, &caller, granted.tenant.tier, &doc, &record).await?;
    let spec = ServiceSpec {
        name: doc.service.clone(),
        region,
        accelerator: doc.accelerator,
        scaling,
        // Private at the host whatever the document says: only the platform, with an ID token,
        // calls a model server.
        access: Access::Private,
        labels: mapi_endpoints::labels(&tenant, &project, &doc.alias),
    };
    match state.hosting.create(&spec, &servable.spec(tag)).await {
        Ok(()) | Err(HostingError::AlreadyExists(_)) => {}
        // Retryable: the document stands and the tick fails it if the host never has it.
        Err(e) if e.is_retryable() => {
            tracing::warn!(endpoint = %doc.id, error = %e, "the host did not answer")
        }
        Err(e) => {
            doc.status = EndpointStatus::Failed;
            doc.event(state.clock.now(), "failed", e.to_string());
            doc.message = Some(e.to_string());
            doc.active = false;
            mapi_schema::put(&*state.store, &doc).await?;
        }
    }
    if doc.active {
        state.ask_for_tick().await;
    }
    Ok((StatusCode::ACCEPTED, Json(view(&state, &doc).await?)))
}

/// Creates `doc` (with its audit `record`) once the one admission lets its
/// instances run: an L4 endpoint is the GPU class under the tenant's
/// `max_resource_class`, and a spent vCPU limit or the spend cap refuses any.
async fn admit_and_create(
    state: &AppState,
    caller: &Caller,
    tier: mapi_domain::Tier,
    doc: &EndpointDoc,
    record: &mapi_schema::AuditDoc,
) -> Result<(), ApiError> {
    let held = held_instances(&state.store.query(&tenant_endpoints(&doc.tenant), None).await?, &doc.id)?;
    let request = admission_of(caller, tier, doc, held);
    quota::admit_and_commit(state, &request, |plan| async move {
        let bumps = &plan.bumps;
        transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
            // Admitted on what the tenant's endpoints held a moment ago; read again here, so two
            // endpoints created at once are never both admitted on the same room.
            if held_instances(&tx.query(&tenant_endpoints(&doc.tenant)).await?, &doc.id)? > held {
                return Err(ApiError::unavailable(
                    "another endpoint of the tenant was created at the same moment: retry",
                    1,
                ));
            }
            if tx_get::<EndpointDoc>(&mut tx, &doc.id).await?.is_some() {
                return Err(ApiError::new(
                    ProblemCode::AlreadyExists,
                    format!(
                        "endpoint {} exists in {}/{}: promote a version to it, or pick another alias",
                        doc.alias, doc.tenant, doc.project
                    ),
                ));
            }
            bumps.apply(&mut tx)?;
            tx_create(&mut tx, doc)?;
            tx_create(&mut tx, record)?;
            Ok(tx.finish(()))
        })
        .await
    })
    .await
}

/// A project's endpoints.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/projects/{project}/endpoints",
    tag = "endpoints",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path)),
    responses((status = 200, body = EndpointPage), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
) -> Result<Json<EndpointPage>, ApiError> {
    require_project(&state, &caller, &tenant, &project, Resource::Endpoint, Action::Read).await?;
    let q = Query::new(EndpointDoc::COLLECTION).filter("tenant", Op::Eq, tenant.as_str()).filter(
        "project",
        Op::Eq,
        project.as_str(),
    );
    let docs = state.store.query(&q, None).await?;
    let mut endpoints = Vec::with_capacity(docs.len());
    for d in docs {
        endpoints.push(view(&state, &d.decode::<EndpointDoc>()?).await?);
    }
    Ok(Json(EndpointPage { endpoints }))
}

/// An endpoint: its revisions and traffic, the promotion under way, usage and history.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/projects/{project}/endpoints/{alias}",
    tag = "endpoints",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("alias" = String, Path, pattern = "^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$", description = "1 to 32 lowercase letters, digits and `-`, starting with a letter, not ending with `-`")),
    responses((status = 200, body = EndpointView), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn get_endpoint(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, alias)): Path<(TenantId, ProjectId, String)>,
) -> Result<Json<EndpointView>, ApiError> {
    let doc = load(&state, &caller, (&tenant, &project, &alias), Action::Read).await?;
    Ok(Json(view(&state, &doc).await?))
}

/// Delete an endpoint: its service is removed, then its record.
#[utoipa::path(
    delete,
    path = "/v1/tenants/{tenant}/projects/{project}/endpoints/{alias}",
    tag = "endpoints",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("alias" = String, Path, pattern = "^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$", description = "1 to 32 lowercase letters, digits and `-`, starting with a letter, not ending with `-`")),
    responses((status = 202, body = EndpointView, description = "Deleting"), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, alias)): Path<(TenantId, ProjectId, String)>,
) -> Result<(StatusCode, Json<EndpointView>), ApiError> {
    let doc = load(&state, &caller, (&tenant, &project, &alias), Action::Delete).await?;
    let doc = change(&state, &caller, &doc.id, "endpoint.delete", |d, now| {
        d.status = EndpointStatus::Deleting;
        d.promotion = None;
        d.event(now, "deleting", "asked to delete");
        Ok(())
    })
    .await?;
    Ok((StatusCode::ACCEPTED, Json(view(&state, &doc).await?)))
}

/// Changes an endpoint's document with its audit entry in one commit.
async fn change(
    state: &AppState,
    caller: &Caller,
    id: &str,
    action: &str,
    f: impl Fn(&mut EndpointDoc, mapi_domain::Timestamp) -> Result<(), ApiError>,
) -> Result<EndpointDoc, ApiError> {
    change_admitted(state, (caller, None), id, action, f).await
}

/// [`change`], committing an admission's counter bumps with it.
async fn change_admitted(
    state: &AppState,
    (caller, bumps): (&Caller, Option<&Bumps>),
    id: &str,
    action: &str,
    f: impl Fn(&mut EndpointDoc, mapi_domain::Timestamp) -> Result<(), ApiError>,
) -> Result<EndpointDoc, ApiError> {
    let now = state.clock.now();
    let record = Audit::by(caller, action, format!("endpoints/{id}")).into_doc(now, &*state.entropy);
    let (record, f) = (&record, &f);
    let doc = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let mut doc = tx_get::<EndpointDoc>(&mut tx, id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("endpoint {id} not found")))?;
        f(&mut doc, now)?;
        if let Some(bumps) = bumps {
            bumps.apply(&mut tx)?;
        }
        doc.active = doc.needs_reconcile();
        let mut record = record.clone();
        record.tenant = Some(doc.tenant.clone());
        record.project = Some(doc.project.clone());
        tx_put(&mut tx, &doc)?;
        tx_create(&mut tx, &record)?;
        Ok(tx.finish(doc))
    })
    .await?;
    if doc.active {
        // Ticks follow the change until it is carried out.
        state.ask_for_tick().await;
    }
    Ok(doc)
}

/// `POST …/endpoints/{alias}:score`, `:promote`, `:scale`, `:rollback` and `:override`.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant}/projects/{project}/endpoints/{alias}",
    tag = "endpoints",
    params(
        ("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path),
        ("alias" = String, Path, pattern = "^[a-z]([a-z0-9-]{0,30}[a-z0-9])?:(score|promote|scale|rollback|override)$",
            description = "The alias and the action: `{alias}:score` (body ScoreRequest), `{alias}:promote` (body PromoteEndpoint), `{alias}:scale` (body ScaleEndpoint), `{alias}:rollback` or `{alias}:override` (sessions only: skip the gate)"),
    ),
    request_body = ScoreRequest,
    responses(
        (status = 200, body = ScoreResponse, description = "`:score`: the predictions, with `x-mapi-revision` and `x-mapi-model-version`"),
        (status = 202, body = EndpointView, description = "`:promote`, `:scale`, `:rollback`, `:override`"),
        (status = 400, body = mapi_problem::Problem, description = "A row misses a column, has an extra one, or a value is not a number; `:promote`, `:scale`: over `max_resource_class` or `endpoint_instances`, or bounds out of range"),
        (status = 403, body = mapi_problem::Problem),
        (status = 404, body = mapi_problem::Problem),
        (status = 409, body = mapi_problem::Problem, description = "Not ready, or a promotion is (not) under way"),
        (status = 429, body = mapi_problem::Problem, description = "`:score`, `:promote`: a quota or rate limit is reached (`Retry-After` when it resets at a known time)"),
        (status = 410, body = mapi_problem::Problem, description = "`:promote`: the version's bytes expired"),
        (status = 503, body = mapi_problem::Problem, description = "The model server did not answer; retry"),
    ),
    security((), ("session" = []), ("token" = []))
)]
pub async fn act(
    State(state): State<AppState>,
    Anonymous(caller): Anonymous,
    Path((tenant, project, alias_action)): Path<(TenantId, ProjectId, String)>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    let Some((alias, action)) = alias_action.rsplit_once(':') else {
        return Err(ApiError::not_found(
            "no such route: use …/endpoints/{alias}:score, :promote, :scale, :rollback or :override",
        ));
    };
    if action != "score" {
        // Only a public endpoint's scores serve a caller without credentials.
        caller.require_credentials()?;
    }
    let key = (&tenant, &project, alias);
    match action {
        "score" => super::scoring::score(&state, &caller, key, &headers, body).await,
        "promote" => {
            let (doc, tenant) = load_granted(&state, &caller, key, Action::Promote).await?;
            let body: PromoteEndpoint = body_of(&headers, &body)?;
            let doc = promote(&state, (&caller, tenant.tier), doc, &body).await?;
            Ok((StatusCode::ACCEPTED, Json(view(&state, &doc).await?)).into_response())
        }
        "scale" => {
            let (doc, tenant) = load_granted(&state, &caller, key, Action::Update).await?;
            let body: ScaleEndpoint = body_of(&headers, &body)?;
            let doc = super::endpoint_scale::scale(&state, (&caller, tenant.tier), doc, &body).await?;
            Ok((StatusCode::ACCEPTED, Json(view(&state, &doc).await?)).into_response())
        }
        "rollback" => {
            let doc = load(&state, &caller, key, Action::Promote).await?;
            let doc = rollback(&state, &caller, &doc.id).await?;
            Ok((StatusCode::ACCEPTED, Json(view(&state, &doc).await?)).into_response())
        }
        "override" => {
            let doc = load(&state, &caller, key, Action::Manage).await?;
            let doc = change(&state, &caller, &doc.id, "endpoint.override", |d, now| {
                let p = d
                    .promotion
                    .as_mut()
                    .ok_or_else(|| ApiError::precondition("no promotion is under way"))?;
                let (gate, _) = p.gate.override_gate(now);
                p.gate = gate;
                d.event(now, "override", "the gate was overridden: the canary goes to 100 %");
                Ok(())
            })
            .await?;
            Ok((StatusCode::ACCEPTED, Json(view(&state, &doc).await?)).into_response())
        }
        other => Err(ApiError::not_found(format!(
            "endpoints have no action `{}`: use :score, :promote, :scale, :rollback or :override",
            other.chars().take(20).collect::<String>()
        ))),
    }
}

/// Promotes `version` on endpoint `alias` as `caller` (a workflow's
/// `deploy` node, acting as its starter): authorized, gated by the
/// governing policy and admitted exactly as `:promote` is.
pub(crate) async fn promote_version(
    state: &AppState,
    caller: &Caller,
    key: (&TenantId, &ProjectId, &str),
    version: ModelVersionId,
) -> Result<EndpointDoc, ApiError> {
    let (doc, tenant) = load_granted(state, caller, key, Action::Promote).await?;
    let body = PromoteEndpoint { model_version: Some(version), container: None };
    promote(state, (caller, tenant.tier), doc, &body).await
}

/// Deploys `version` as a new revision at 0 % and starts its promotion.
async fn promote(
    state: &AppState,
    (caller, tier): (&Caller, mapi_domain::Tier),
    doc: EndpointDoc,
    body: &PromoteEndpoint,
) -> Result<EndpointDoc, ApiError> {
    if doc.status != EndpointStatus::Ready {
        return Err(ApiError::precondition(format!(
            "endpoint {} is {}, not ready: promote once it is ready",
            doc.alias, doc.status
        )));
    }
    if doc.promotion.is_some() {
        return Err(ApiError::precondition(format!(
            "endpoint {} is promoting already: wait, or roll it back",
            doc.alias
        )));
    }
    if body.container.is_some() != doc.runs_container() {
        return Err(ApiError::invalid(format!(
            "endpoint {} serves {}: promote {} to it, or make another endpoint",
            doc.alias,
            if doc.runs_container() { "a container" } else { "model versions" },
            if doc.runs_container() { "another container" } else { "a model version" },
        )));
    }
    let asked = (body.model_version.as_ref(), body.container.as_ref());
    let servable =
        serve_of(state, (caller, "endpoint.promote"), (&doc.tenant, &doc.project, &doc.alias), asked).await?;
    let tag = doc.next_tag();
    let (t, v) = (&tag, &servable);
    // A new revision is new compute: admitted as the endpoint's creation was, on today's limits.
    let held = held_instances(&state.store.query(&tenant_endpoints(&doc.tenant), None).await?, &doc.id)?;
    let request = admission_of(caller, tier, &doc, held);
    let id = doc.id.as_str();
    let doc = quota::admit_and_commit(state, &request, |plan| async move {
        change_admitted(state, (caller, Some(&plan.bumps)), id, "endpoint.promote", |d, now| {
            if d.promotion.is_some() || d.status != EndpointStatus::Ready {
                return Err(ApiError::precondition(
                    "the endpoint changed meanwhile: look at it and try again",
                ));
            }
            d.revisions.push(v.revision(t.clone(), now));
            d.promotion = Some(Promotion {
                tag: t.clone(),
                model_version: v.version(),
                image: match v {
                    Serve::Container(c) => Some(c.container.image.clone()),
                    Serve::Model(_) => None,
                },
                started_at: now,
                gate: mapi_rollout::Gate::start(now),
                smoke: None,
            });
            d.event(now, "promotion_started", format!("{} as revision {t} at 0 %", v.described()));
            Ok(())
        })
        .await
    })
    .await?;
    state.hosting.add_revision(&doc.service, &servable.spec(tag)).await.map_err(hosting_error)?;
    Ok(doc)
}

/// Returns all traffic to the last good revision in one step.
async fn rollback(state: &AppState, caller: &Caller, id: &str) -> Result<EndpointDoc, ApiError> {
    let doc = change(state, caller, id, "endpoint.rollback", |d, now| {
        if let Some(p) = d.promotion.as_mut() {
            let (gate, _) = p.gate.rollback(now, "rolled back by hand");
            p.gate = gate;
            let tag = p.tag.clone();
            d.traffic = d.split(&tag, 0);
            d.event(now, "rollback", "asked by hand: the canary goes to 0 %");
            return Ok(());
        }
        let previous = d.previous.clone().ok_or_else(|| {
            ApiError::precondition(format!("endpoint {} has no earlier revision to roll back to", d.alias))
        })?;
        let from = std::mem::replace(&mut d.stable, previous.clone());
        d.previous = None;
        d.traffic = vec![Traffic { tag: previous.clone(), percent: 100 }];
        d.event(now, "rolled_back", format!("revision {previous} serves 100 % again (was {from})"));
        Ok(())
    })
    .await?;
    // The split as the document now says; a lost answer is repeated by the tick while promoting.
    state.hosting.set_traffic(&doc.service, &doc.traffic).await.map_err(hosting_error)?;
    Ok(doc)
}
