//! A project's plugins: tenant code that adds methods, published as a
//! package (`mapi plugins publish DIR`: a tar of the plugin's directory).
//! Project admins publish and delete them (tokens need `plugins:publish`),
//! everyone who reads the project reads them; each publish and delete is
//! audited (`plugin.publish`, `plugin.delete`).
//!
//! A publish checks the whole package before anything is kept (the
//! manifest's problems name their line), stores it content-addressed under
//! its SHA-256, create-only, and records the version, immutable: the same
//! package published again answers the version as it is; other contents
//! under a published version are refused. The package's bytes count
//! against the tenant's storage quota, like a dataset's.

use axum::extract::State;
use axum::http::StatusCode;
use mapi_access::{Action, Resource};
use mapi_api::methods::ParamView;
use mapi_domain::{ProjectId, TenantId, Timestamp, UserId};
use mapi_identity::{Audit, Caller};
use mapi_objects::{IfGeneration, ObjectError, ObjectKey};
use mapi_platform::AppState;
use mapi_plugins::package::{self, PackageError};
use mapi_problem::{ApiError, Json, Path, ProblemCode, Query, RawBody};
use mapi_quota::Ask;
use mapi_schema::{Doc, PluginDoc, layout, tx_create, tx_get};
use mapi_store::{Direction, Op, transact};
use serde::Serialize;

use super::datasets::{PageQuery, project_page, require_project};
use mapi_admission::quota;

/// One published version of a plugin.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PluginView {
    pub name: String,
    pub version: String,
    /// Lowercase hex SHA-256 of the package.
    pub sha256: String,
    /// The package's size in bytes.
    pub size: u64,
    pub base: String,
    pub description: String,
    pub methods: Vec<PluginMethodView>,
    pub created_by: UserId,
    pub created_at: Timestamp,
}

/// One method a plugin adds.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PluginMethodView {
    /// The name runs use: `p.{plugin}.{method}`.
    pub name: String,
    pub summary: String,
    /// `module:function`.
    pub entry: String,
    pub params: Vec<ParamView>,
    /// The files the method writes.
    pub outputs: Vec<String>,
    /// The output a model version serves, when the method fits a model.
    pub model: Option<String>,
}

/// A page of a project's plugin versions, by plugin name.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PluginPage {
    pub plugins: Vec<PluginView>,
    pub next_page_token: Option<String>,
}

fn view(d: &PluginDoc) -> PluginView {
    let m = &d.manifest;
    let methods = m
        .methods
        .iter()
        .map(|pm| PluginMethodView {
            name: mapi_plugins::method_name(&m.name, &pm.name),
            summary: pm.summary.clone(),
            entry: pm.entry.clone(),
            params: pm.params.iter().map(param_view).collect(),
            outputs: pm.outputs.clone(),
            model: pm.model.clone(),
        })
        .collect();
    PluginView {
        name: d.name.clone(),
        version: d.version.clone(),
        sha256: d.sha256.clone(),
        size: d.size,
        base: m.base.clone(),
        description: m.description.clone(),
        methods,
        created_by: d.created_by.clone(),
        created_at: d.created_at,
    }
}

/// The API's view of a plugin method's parameter.
pub fn param_view(p: &mapi_plugins::PluginParam) -> ParamView {
    ParamView {
        name: p.name.clone(),
        kind: super::methods::kind(p.kind),
        required: p.required,
        default: p.default.clone(),
        min: p.min,
        max: p.max,
        description: p.doc.clone(),
    }
}

/// The newest version of each plugin published in the project, by name.
pub async fn newest(
    state: &AppState,
    tenant: &TenantId,
    project: &ProjectId,
) -> Result<Vec<PluginDoc>, ApiError> {
    let mut docs = published(state, tenant, project, None).await?;
    docs.dedup_by(|later, first| later.name == first.name);
    Ok(docs)
}

/// A package that does not read: 413 past the size limit, else 400 saying what to fix.
fn refused(e: PackageError) -> ApiError {
    match e {
        PackageError::TooLarge(_) => ApiError::new(ProblemCode::PayloadTooLarge, e.to_string()),
        _ => ApiError::invalid(e.to_string()),
    }
}

/// Publish a plugin version.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/projects/{project}/plugins", tag = "plugins",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path)),
    request_body(content((inline(mapi_problem::RawBytes) = "application/x-tar"), (inline(mapi_problem::RawBytes) = "application/octet-stream")),
        description = "The plugin's directory as a tar archive (`mapi plugins publish DIR` packs it)"),
    responses((status = 201, body = PluginView, description = "Published"),
        (status = 200, body = PluginView, description = "This package was published as this version already"),
        (status = 400, body = mapi_problem::Problem, description = "Not a valid package or manifest (the detail names the line at fault)"),
        (status = 409, body = mapi_problem::Problem, description = "The version is published with other contents (ALREADY_EXISTS)"),
        (status = 413, body = mapi_problem::Problem, description = "Larger than a package may be"),
        (status = 429, body = mapi_problem::Problem, description = "The storage quota or the request rate would be exceeded")),
    security(("session" = []), ("token" = [])))]
pub async fn publish(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    RawBody(body): RawBody,
) -> Result<(StatusCode, Json<PluginView>), ApiError> {
    let granted =
        require_project(&state, &caller, &tenant, &project, Resource::Plugin, Action::Create).await?;
    let package = package::read(&body).map_err(refused)?;
    let (name, version) = (package.manifest.name.clone(), package.manifest.version.clone());
    let id = PluginDoc::id_of(&tenant, &project, &name, &version);
    if let Some(existing) = mapi_schema::get::<PluginDoc>(&*state.store, &id).await? {
        return same_or_conflict(existing, &package.sha256);
    }
    let key = ObjectKey::parse(&layout::plugin(&tenant, &project, &name, &package.sha256))?;
    match state.objects.put(&key, body.clone(), "application/x-tar", IfGeneration::ABSENT).await {
        // Content-addressed: an object there holds these very bytes.
        Ok(_) | Err(ObjectError::PreconditionFailed(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let now = state.clock.now();
    let doc = PluginDoc {
        tenant: tenant.clone(),
        project: project.clone(),
        name: name.clone(),
        version: version.clone(),
        sha256: package.sha256.clone(),
        object: key.to_string(),
        size: body.len() as u64,
        manifest: package.manifest,
        created_by: caller.user().clone(),
        created_at: now,
    };
    let detail = format!("{name} {version}: {} method(s), sha256 {}", doc.manifest.methods.len(), doc.sha256);
    let record = Audit::by(&caller, "plugin.publish", format!("plugins/{name}/{version}"))
        .tenant(&tenant)
        .project(&project)
        .operator(granted.as_operator)
        .detail(detail)
        .into_doc(now, &*state.entropy);
    let request = quota::Request {
        caller: &caller,
        tenant: &tenant,
        tier: granted.tenant.tier,
        ask: Ask::Upload { bytes: doc.size },
        seed: &id,
        what: format!("plugins/{name}/{version}"),
    };
    let (doc_ref, record) = (&doc, &record);
    let state_ref = &state;
    let committed = quota::admit_and_commit(&state, &request, |plan| async move {
        let bumps = &plan.bumps;
        transact::<_, ApiError, _, _>(&*state_ref.store, |mut tx| async move {
            bumps.apply(&mut tx)?;
            tx_create(&mut tx, doc_ref)?;
            tx_create(&mut tx, record)?;
            Ok(tx.finish(()))
        })
        .await
    })
    .await;
    match committed {
        Ok(()) => {
            tracing::info!(plugin = %name, %version, sha256 = %doc.sha256, "plugin published");
            Ok((StatusCode::CREATED, Json(view(&doc))))
        }
        // Published by a concurrent request meanwhile.
        Err(e) if e.code() == ProblemCode::AlreadyExists => {
            let existing = mapi_schema::get::<PluginDoc>(&*state.store, &id).await?.ok_or(e)?;
            same_or_conflict(existing, &doc.sha256)
        }
        Err(e) => Err(e),
    }
}

fn same_or_conflict(existing: PluginDoc, sha256: &str) -> Result<(StatusCode, Json<PluginView>), ApiError> {
    if existing.sha256 == sha256 {
        return Ok((StatusCode::OK, Json(view(&existing))));
    }
    Err(ApiError::new(
        ProblemCode::AlreadyExists,
        format!(
            "version {} of plugin {} is published with other contents (sha256 {}): a version never changes, publish a new version",
            existing.version, existing.name, existing.sha256
        ),
    ))
}

/// The project's plugin versions, by plugin name.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/projects/{project}/plugins", tag = "plugins",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), PageQuery),
    responses((status = 200, body = PluginPage), (status = 400, body = mapi_problem::Problem)), security(("session" = []), ("token" = [])))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    Query(q): Query<PageQuery>,
) -> Result<Json<PluginPage>, ApiError> {
    require_project(&state, &caller, &tenant, &project, Resource::Plugin, Action::Read).await?;
    let (docs, next_page_token): (Vec<PluginDoc>, _) =
        project_page(&state, &tenant, &project, &q, ("name", Direction::Asc)).await?;
    Ok(Json(PluginPage { plugins: docs.iter().map(view).collect(), next_page_token }))
}

/// Every published version of `name`, newest version first.
pub async fn versions(
    state: &AppState,
    tenant: &TenantId,
    project: &ProjectId,
    name: &str,
) -> Result<Vec<PluginDoc>, ApiError> {
    published(state, tenant, project, Some(name)).await
}

/// The project's published versions (of plugin `name` only, when given), by
/// name, newest version first.
async fn published(
    state: &AppState,
    tenant: &TenantId,
    project: &ProjectId,
    name: Option<&str>,
) -> Result<Vec<PluginDoc>, ApiError> {
    let mut q = mapi_store::Query::new(PluginDoc::COLLECTION)
        .filter("tenant", Op::Eq, tenant.as_str())
        .filter("project", Op::Eq, project.as_str());
    if let Some(name) = name {
        q = q.filter("name", Op::Eq, name);
    }
    let found = state.store.query(&q.limit(1000), None).await?;
    let mut docs: Vec<PluginDoc> = found.iter().map(|d| d.decode::<PluginDoc>()).collect::<Result<_, _>>()?;
    docs.sort_by(|a, b| a.name.cmp(&b.name).then(version_key(&b.version).cmp(&version_key(&a.version))));
    Ok(docs)
}

/// `MAJOR.MINOR.PATCH` as numbers, for ordering.
fn version_key(v: &str) -> [u64; 3] {
    let mut parts = v.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    [(); 3].map(|()| parts.next().unwrap_or(0))
}

/// A plugin's published versions, newest first.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/projects/{project}/plugins/{name}", tag = "plugins",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("name" = String, Path)),
    responses((status = 200, body = PluginPage), (status = 404, body = mapi_problem::Problem)), security(("session" = []), ("token" = [])))]
pub async fn get_plugin(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, name)): Path<(TenantId, ProjectId, String)>,
) -> Result<Json<PluginPage>, ApiError> {
    require_project(&state, &caller, &tenant, &project, Resource::Plugin, Action::Read).await?;
    let docs = versions(&state, &tenant, &project, &name).await?;
    if docs.is_empty() {
        let shown: String = name.chars().take(64).collect();
        return Err(ApiError::not_found(format!("plugin {shown} not found in {tenant}/{project}")));
    }
    Ok(Json(PluginPage { plugins: docs.iter().map(view).collect(), next_page_token: None }))
}

/// Delete a published plugin version (runs already submitted keep the package they name).
#[utoipa::path(delete, path = "/v1/tenants/{tenant}/projects/{project}/plugins/{name}/{version}", tag = "plugins",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("name" = String, Path), ("version" = String, Path)),
    responses((status = 204), (status = 404, body = mapi_problem::Problem)), security(("session" = []), ("token" = [])))]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, name, version)): Path<(TenantId, ProjectId, String, String)>,
) -> Result<StatusCode, ApiError> {
    let granted =
        require_project(&state, &caller, &tenant, &project, Resource::Plugin, Action::Delete).await?;
    let shown = |s: &str| s.chars().take(64).collect::<String>();
    let missing =
        format!("version {} of plugin {} not found in {tenant}/{project}", shown(&version), shown(&name));
    // Only a name and version a manifest can have name a document.
    if !mapi_plugins::manifest::is_plugin_name(&name) || !mapi_plugins::manifest::is_version(&version) {
        return Err(ApiError::not_found(missing));
    }
    let now = state.clock.now();
    let id = PluginDoc::id_of(&tenant, &project, &name, &version);
    let record = Audit::by(&caller, "plugin.delete", format!("plugins/{name}/{version}"))
        .tenant(&tenant)
        .project(&project)
        .operator(granted.as_operator)
        .into_doc(now, &*state.entropy);
    let key = mapi_schema::key::<PluginDoc>(&id)?;
    let (id, record, key) = (&id, &record, &key);
    let missing = &missing;
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        if tx_get::<PluginDoc>(&mut tx, id).await?.is_none() {
            return Err(ApiError::not_found(missing.clone()));
        }
        tx.delete(key);
        tx_create(&mut tx, record)?;
        Ok(tx.finish(()))
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The plugin version and method a run of `method` (`p.{plugin}.{method}`)
/// runs: version `pin` where one is given (a retry runs what the run it
/// retries ran), else the newest published. Refusals say what to publish or
/// which methods there are.
pub async fn resolve(
    state: &AppState,
    tenant: &TenantId,
    project: &ProjectId,
    method: &str,
    pin: Option<&str>,
) -> Result<(PluginDoc, mapi_plugins::PluginMethod), ApiError> {
    let shown: String = method.chars().take(96).collect();
    let Some((plugin, short)) = mapi_plugins::split_method(method) else {
        return Err(ApiError::invalid(format!(
            "`{shown}` is not a plugin method's name: plugin methods are named p.PLUGIN.METHOD"
        )));
    };
    let all = versions(state, tenant, project, plugin).await?;
    let doc = match pin {
        Some(v) => all.into_iter().find(|d| d.version == v).ok_or_else(|| {
            ApiError::invalid(format!(
                "version {v} of plugin {plugin} is no longer published in {tenant}/{project}: submit the method anew to run the newest version"
            ))
        })?,
        None => all.into_iter().next().ok_or_else(|| {
            ApiError::invalid(format!(
                "unknown method `{shown}`: no plugin {plugin} is published in {tenant}/{project} (mapi plugins publish DIR)"
            ))
        })?,
    };
    let Some(found) = doc.manifest.method(short).cloned() else {
        let known: Vec<String> =
            doc.manifest.methods.iter().map(|m| mapi_plugins::method_name(plugin, &m.name)).collect();
        return Err(ApiError::invalid(format!(
            "plugin {plugin} {} has no method {short}: use one of {}",
            doc.version,
            known.join(", ")
        )));
    };
    Ok((doc, found))
}

/// What a run of `method` of the plugin version `doc` records: the version it runs.
pub fn code(doc: &PluginDoc, method: &mapi_plugins::PluginMethod) -> mapi_domain::PluginCode {
    mapi_domain::PluginCode {
        name: doc.name.clone(),
        version: doc.version.clone(),
        method: method.name.clone(),
        sha256: doc.sha256.clone(),
        object: doc.object.clone(),
        base: doc.manifest.base.clone(),
        outputs: method.outputs.clone(),
        model: method.model.clone(),
    }
}
