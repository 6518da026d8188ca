//! `GET /v1/methods` and `GET /v1/methods/{name}`: the live method registry
//! as JSON (what `GET /v1/usage` says in words, to anyone). Every signed-in
//! person may read it; a token only with a scope that uses it (the
//! permission table's `catalog read` row).

use std::collections::BTreeMap;

use axum::extract::State;
use mapi_access::{Action, Resource, scope_allows};
use mapi_api::methods::{
    MethodExample, MethodInput, MethodList, MethodOutput, MethodView, ParamKind, ParamView,
};
use mapi_identity::Caller;
use mapi_methods::{Input, MethodSpec, ParamSpec};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path};
use serde_json::Value;

/// A JSON literal of the registry (a default, an example), parsed.
fn literal(what: &str, text: &str) -> Result<Value, ApiError> {
    serde_json::from_str(text).map_err(|e| ApiError::internal_from(format!("the registry's {what}"), e))
}

pub(crate) fn kind(k: mapi_methods::ParamKind) -> ParamKind {
    match k {
        mapi_methods::ParamKind::Column => ParamKind::Column,
        mapi_methods::ParamKind::AnyColumn => ParamKind::AnyColumn,
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

/// The API's view of one registered method, saying whether `state`'s executor can run it.
pub fn view(state: &AppState, m: &MethodSpec) -> Result<MethodView, ApiError> {
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
        unavailable: state.executor.unavailable(m.name),
    })
}

/// Every registered method, with its parameters, outputs and an example.
#[utoipa::path(
    get,
    path = "/v1/methods",
    tag = "methods",
    responses((status = 200, body = MethodList), (status = 401, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn list(State(state): State<AppState>, caller: Caller) -> Result<Json<MethodList>, ApiError> {
    may_read_catalog(&caller)?;
    let methods = mapi_methods::all().iter().map(|m| view(&state, m)).collect::<Result<_, _>>()?;
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
pub async fn get_method(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<MethodView>, ApiError> {
    may_read_catalog(&caller)?;
    match mapi_methods::find(&name) {
        Some(m) => Ok(Json(view(&state, m)?)),
        None => Err(unknown(&name)),
    }
}

/// The method catalog is read by every signed-in person (every role has
/// `catalog read`); an API token also needs a scope whose work uses the
/// catalog: `models:read`, `runs:create`, `score:*` (or `score:<alias>`) or
/// `plugins:publish`. A token made for one narrow job (uploading datasets,
/// managing webhooks, promoting endpoints) reads nothing beyond it.
pub(crate) fn may_read_catalog(caller: &Caller) -> Result<(), ApiError> {
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
pub(crate) fn unknown(name: &str) -> ApiError {
    let shown: String = name.chars().take(64).collect();
    let known: Vec<String> = mapi_methods::all().iter().map(|m| format!("`{}`", m.name)).collect();
    ApiError::not_found(format!(
        "no method `{shown}`: the methods are {} (GET /v1/methods lists them)",
        known.join(", ")
    ))
}
