//! `GET /v1/methods` and `GET /v1/methods/{name}`: the live method registry
//! as JSON (what `GET /v1/usage` says in words, to anyone). Every signed-in
//! person may read it; a token only with a scope that uses it (the
//! permission table's `catalog read` row).

use std::collections::BTreeMap;

use axum::extract::State;
use mapi_access::{Action, Resource, scope_allows};
use mapi_api::methods::{
    MethodExample, MethodInput, MethodList, MethodOutput, MethodPlugin, MethodView, ParamKind, ParamView,
};
use mapi_domain::{ProjectId, TenantId};
use mapi_identity::Caller;
use mapi_platform::AppState;
use mapi_schema::PluginDoc;

use super::datasets::require_project;
use mapi_methods::{Input, MethodSpec, ParamSpec};
use mapi_problem::{ApiError, Json, Path, ProblemCode};
use serde_json::Value;

/// A JSON literal of the registry (a default, an example), parsed.
fn literal(what: &str, text: &str) -> Result<Value, ApiError> {
    serde_json::from_str(text).map_err(|e| ApiError::internal_from(format!("the registry's {what}"), e))
}

pub(crate) fn kind(k: mapi_methods::ParamKind) -> ParamKind {
    match k {
        mapi_methods::ParamKind::Column => ParamKind::Column,
        mapi_methods::ParamKind::Columns => ParamKind::Columns,
        mapi_methods::ParamKind::Number => ParamKind::Number,
        mapi_methods::ParamKind::Integer => ParamKind::Integer,
        mapi_methods::ParamKind::Boolean => ParamKind::Boolean,
        mapi_methods::ParamKind::Text => ParamKind::Text,
    }
}

fn param(method: &str, p: &ParamSpec) -> Result<ParamView, ApiError> {
    let what = format!("default of {method}.{}", p.name);
    Ok(ParamView {
        name: p.name.to_owned(),
        kind: kind(p.kind),
        required: p.required,
        default: p.default.map(|d| literal(&what, d)).transpose()?,
        min: p.min,
        max: p.max,
        description: p.doc.to_owned(),
    })
}

fn example(m: &MethodSpec) -> Result<MethodExample, ApiError> {
    let what = format!("example of {}", m.name);
    let params: BTreeMap<String, Value> = serde_json::from_str(m.example)
        .map_err(|e| ApiError::internal_from(format!("the registry's {what}"), e))?;
    let item = m.example_item.map(|i| literal(&what, i)).transpose()?;
    Ok(MethodExample { params, item })
}

/// The API's view of one registered method.
pub fn view(m: &MethodSpec) -> Result<MethodView, ApiError> {
    let outputs = m.outputs.iter().map(|o| MethodOutput {
        name: o.name.to_owned(),
        media_type: o.media_type.to_owned(),
        description: o.doc.to_owned(),
    });
    Ok(MethodView {
        name: m.name.to_owned(),
        input: match m.input {
            Input::Dataset => MethodInput::Dataset,
            Input::Item => MethodInput::Item,
        },
        summary: m.summary.to_owned(),
        produces_model: m.produces_model(),
        model_file: m.model.map(|model| model.file.to_owned()),
        params: m.params.iter().map(|p| param(m.name, p)).collect::<Result<_, _>>()?,
        outputs: outputs.collect(),
        example: example(m)?,
        plugin: None,
    })
}

/// The API's view of a plugin's method (the version `doc` adds).
fn plugin_view(doc: &PluginDoc, m: &mapi_plugins::PluginMethod) -> MethodView {
    let params: Vec<ParamView> = m.params.iter().map(super::plugins::param_view).collect();
    let example = params
        .iter()
        .filter_map(|p| Some((p.name.clone(), p.default.clone().or_else(|| placeholder(p))?)))
        .collect();
    MethodView {
        name: mapi_plugins::method_name(&doc.name, &m.name),
        input: MethodInput::Dataset,
        summary: m.summary.clone(),
        produces_model: m.model.is_some(),
        model_file: m.model.clone(),
        params,
        outputs: m
            .outputs
            .iter()
            .map(|o| MethodOutput {
                name: o.clone(),
                media_type: mapi_plugins::media_type(o).to_owned(),
                description: if m.model.as_ref() == Some(o) {
                    "the fitted model".to_owned()
                } else {
                    String::new()
                },
            })
            .collect(),
        example: MethodExample { params: example, item: None },
        plugin: Some(MethodPlugin {
            name: doc.name.clone(),
            version: doc.version.clone(),
            sha256: doc.sha256.clone(),
        }),
    }
}

/// What an example gives a required parameter without a default: a value
/// of its kind, to replace (`COLUMN`: one of the dataset's columns).
fn placeholder(p: &ParamView) -> Option<Value> {
    if !p.required {
        return None;
    }
    Some(match p.kind {
        ParamKind::Column => Value::from("COLUMN"),
        ParamKind::Columns => Value::from(vec!["COLUMN"]),
        ParamKind::Text => Value::from("TEXT"),
        ParamKind::Number => Value::from(p.min.unwrap_or(0.0)),
        ParamKind::Integer => Value::from(p.min.map_or(0, |m| m.ceil() as i64)),
        ParamKind::Boolean => Value::from(false),
    })
}

/// The methods a project can run: every built-in, then the methods of the
/// newest version of each plugin published in it.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/projects/{project}/methods",
    tag = "methods",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path)),
    responses((status = 200, body = MethodList), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn project_list(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
) -> Result<Json<MethodList>, ApiError> {
    may_read_catalog(&caller)?;
    require_project(&state, &caller, &tenant, &project, Resource::Catalog, Action::Read).await?;
    let mut methods: Vec<MethodView> = mapi_methods::all().iter().map(view).collect::<Result<_, _>>()?;
    for doc in super::plugins::newest(&state, &tenant, &project).await? {
        methods.extend(doc.manifest.methods.iter().map(|m| plugin_view(&doc, m)));
    }
    Ok(Json(MethodList { registry_version: mapi_methods::registry_version(), methods }))
}

/// One method a project can run: a built-in, or a plugin's (its newest version).
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/projects/{project}/methods/{name}",
    tag = "methods",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path),
        ("name" = String, Path, description = "A method's name, e.g. `tabular.linear` or `p.churn.logit`")),
    responses((status = 200, body = MethodView), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn project_get(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, name)): Path<(TenantId, ProjectId, String)>,
) -> Result<Json<MethodView>, ApiError> {
    may_read_catalog(&caller)?;
    require_project(&state, &caller, &tenant, &project, Resource::Catalog, Action::Read).await?;
    if !name.starts_with(mapi_plugins::PREFIX) {
        return mapi_methods::find(&name).map_or_else(|| Err(unknown(&name)), |m| Ok(Json(view(m)?)));
    }
    match super::plugins::resolve(&state, &tenant, &project, &name, None).await {
        Ok((doc, m)) => Ok(Json(plugin_view(&doc, &m))),
        // No such plugin or method: the refusal a submit gets, as a 404.
        Err(ApiError::Problem { code: ProblemCode::InvalidArgument, detail, .. }) => {
            Err(ApiError::not_found(detail))
        }
        Err(e) => Err(e),
    }
}

/// Every registered method, with its parameters, outputs and an example.
#[utoipa::path(
    get,
    path = "/v1/methods",
    tag = "methods",
    responses((status = 200, body = MethodList), (status = 401, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn list(caller: Caller) -> Result<Json<MethodList>, ApiError> {
    may_read_catalog(&caller)?;
    let methods = mapi_methods::all().iter().map(view).collect::<Result<_, _>>()?;
    Ok(Json(MethodList { registry_version: mapi_methods::registry_version(), methods }))
}

/// One method; an unknown name answers 404 naming the methods there are.
#[utoipa::path(
    get,
    path = "/v1/methods/{name}",
    tag = "methods",
    params(("name" = String, Path, description = "A method's name, e.g. `tabular.linear`")),
    responses(
        (status = 200, body = MethodView),
        (status = 404, body = mapi_problem::Problem, description = "No such method: the detail names every method")
    ),
    security(("session" = []), ("token" = []))
)]
pub async fn get_method(caller: Caller, Path(name): Path<String>) -> Result<Json<MethodView>, ApiError> {
    may_read_catalog(&caller)?;
    match mapi_methods::find(&name) {
        Some(m) => Ok(Json(view(m)?)),
        None => Err(unknown(&name)),
    }
}

/// The method catalog is read by every signed-in person (every role has
/// `catalog read`); an API token also needs a scope whose work uses the
/// catalog: `models:read`, `runs:create`, `score:*` (or `score:<alias>`) or
/// `plugins:publish`. A token made for one narrow job (uploading datasets,
/// managing webhooks, promoting endpoints) reads nothing beyond it.
fn may_read_catalog(caller: &Caller) -> Result<(), ApiError> {
    match caller.token() {
        Some(t) if !scope_allows(&t.scopes, Resource::Catalog, Action::Read, None) => {
            Err(ApiError::forbidden(
                "the token's scopes do not allow read catalog: use a token with models:read, runs:create, score:* or plugins:publish",
            ))
        }
        _ => Ok(()),
    }
}

/// The answer to a name the registry does not hold.
fn unknown(name: &str) -> ApiError {
    let shown: String = name.chars().take(64).collect();
    let known: Vec<String> = mapi_methods::all().iter().map(|m| format!("`{}`", m.name)).collect();
    ApiError::not_found(format!(
        "no method `{shown}`: the methods are {} (GET /v1/methods lists them)",
        known.join(", ")
    ))
}
