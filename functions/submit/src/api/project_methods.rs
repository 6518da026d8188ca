//! The methods a project can run: the built-ins and the methods of its
//! plugins (`GET /v1/tenants/{tenant}/projects/{project}/methods` and
//! `…/methods/{name}`), read as the registry is (`catalog read`).

use axum::extract::State;
use mapi_access::{Action, Resource};
use mapi_api::methods::{
    MethodExample, MethodInput, MethodList, MethodOutput, MethodPlugin, MethodView, ParamKind, ParamView,
};
use mapi_domain::{ProjectId, TenantId};
use mapi_identity::Caller;
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path, ProblemCode};
use mapi_schema::PluginDoc;
use serde_json::Value;

use super::datasets::require_project;
use super::methods::{may_read_catalog, unknown, view};

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
        unavailable: None,
    }
}

/// What an example gives a required parameter without a default: a value
/// of its kind, to replace (`COLUMN`: one of the dataset's columns).
fn placeholder(p: &ParamView) -> Option<Value> {
    if !p.required {
        return None;
    }
    Some(match p.kind {
        ParamKind::Column | ParamKind::AnyColumn => Value::from("COLUMN"),
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
    let mut methods: Vec<MethodView> =
        mapi_methods::all().iter().map(|m| view(&state, m)).collect::<Result<_, _>>()?;
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
        return mapi_methods::find(&name).map_or_else(|| Err(unknown(&name)), |m| Ok(Json(view(&state, m)?)));
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
