//! What the platform says about itself: `GET /v1/usage`, plain-text
//! documentation generated from the live method registry for programs and
//! language models (every method, its parameters, an example call), and
//! `GET /manifest` (the API version and the registry's version).
//!
//! `/v1/usage` does not collide with the meter's usage reports, which live
//! under `/v1/tenants/{tenant}[/projects/{project}]/usage`.

use std::fmt::Write;

use axum::http::header;
use axum::response::IntoResponse;
use mapi_methods::{Input, MethodSpec, ParamSpec};
use serde::Serialize;

/// The API version every route is under.
pub const API_VERSION: &str = mapi_runtime::API_VERSION;

fn param_line(p: &ParamSpec) -> String {
    let mut line = format!("  - {} ({:?}", p.name, p.kind).to_lowercase();
    if p.required {
        line.push_str(", required");
    }
    if let Some(d) = p.default {
        let _ = write!(line, ", default {d}");
    }
    if let Some(min) = p.min {
        let _ = write!(line, ", at least {min}");
    }
    if let Some(max) = p.max {
        let _ = write!(line, ", at most {max}");
    }
    let _ = write!(line, "): {}", p.doc);
    line
}

/// Whether the method's runs become model versions, in words.
fn model_line(m: &MethodSpec) -> String {
    match m.model {
        Some(model) => format!(
            "Model: yes: a succeeded run is sealed into a model version (mv_...) that an endpoint serves from \
             its {}",
            model.file
        ),
        None if m.input == Input::Item => "Model: none: each item has its result only".to_owned(),
        None => "Model: none: a succeeded run has its outputs only, no model version".to_owned(),
    }
}

fn example(m: &MethodSpec) -> String {
    match m.input {
        Input::Item => format!(
            "  curl -X POST \"$MAPI_URL/v1/tenants/$TENANT/projects/$PROJECT/jobs\" \\\n    -H \"Authorization: Bearer $MAPI_TOKEN\" -H 'content-type: application/json' \\\n    -d '{{\"method\": \"{}\", \"items\": [{}], \"options\": {{\"params\": {}}}}}'",
            m.name,
            m.example_item.unwrap_or("{}"),
            m.example
        ),
        Input::Dataset => format!(
            "  curl -X POST \"$MAPI_URL/v1/tenants/$TENANT/projects/$PROJECT/runs\" \\\n    -H \"Authorization: Bearer $MAPI_TOKEN\" -H 'content-type: application/json' \\\n    -d '{{\"method\": \"{}\", \"dataset\": \"ds_...\", \"params\": {}, \"timeout_s\": 600}}'",
            m.name, m.example
        ),
    }
}

/// The usage text, from the registry as it is now.
pub fn usage_text() -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "mapi: methods and how to call them (API {API_VERSION}, method registry {})\n",
        mapi_methods::registry_version()
    );
    out.push_str(
        "Authenticate every call with `Authorization: Bearer <token>`. Errors are application/problem+json \
with a stable `code`.\n\n\
ITEM JOBS run an item method on every item of a list, each item its own task:\n\
  POST /v1/tenants/{tenant}/projects/{project}/jobs  {\"method\", \"items\": [...], \"options\": {\"params\": {...}}}\n\
       -> 201 with the job id at once; the job is `enqueuing` until every item has its task\n\
  GET  /v1/jobs/{id}                      state (enqueuing, running, succeeded, completed_with_errors, failed), counts, cost\n\
  GET  /v1/jobs/{id}/items?state=failed   finished items with their results or errors, paged (page_token)\n\
  GET  /v1/jobs/{id}/items/{idx}/log      one JSON line per attempt of the item\n\
  POST /v1/jobs/{id}/cancel               stop the job; POST /v1/jobs/{id}/retry-failed  re-run only the failed items\n\n\
RUNS run a dataset method on an uploaded CSV dataset in its own execution:\n\
  POST /v1/tenants/{tenant}/projects/{project}/datasets (text/csv), then POST .../runs; GET /v1/runs/{id}\n\n\
The same methods as JSON: GET /v1/methods, GET /v1/methods/{name}\n\n",
    );
    for m in mapi_methods::all() {
        let kind = match m.input {
            Input::Item => "item method (jobs)",
            Input::Dataset => "dataset method (runs)",
        };
        let _ = writeln!(out, "## {} ({kind})\n{}\n{}", m.name, m.summary, model_line(m));
        if m.params.is_empty() {
            out.push_str("Parameters: none\n");
        } else {
            out.push_str("Parameters:\n");
            for p in m.params {
                let _ = writeln!(out, "{}", param_line(p));
            }
        }
        for o in m.outputs {
            let _ = writeln!(out, "Output {} ({}): {}", o.name, o.media_type, o.doc);
        }
        let _ = writeln!(out, "Example:\n{}\n", example(m));
    }
    out
}

/// Plain-text documentation of every method, for programs and language models.
#[utoipa::path(
    get,
    path = "/v1/usage",
    tag = "jobs",
    responses((status = 200, content_type = "text/plain", body = String))
)]
pub async fn usage() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], usage_text())
}

/// What answers here.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Manifest {
    pub service: &'static str,
    pub version: &'static str,
    pub api_version: &'static str,
    pub method_registry_version: String,
    pub methods: Vec<&'static str>,
}

/// The API version and the method registry's version.
#[utoipa::path(get, path = "/manifest", tag = "jobs", responses((status = 200, body = Manifest)))]
pub async fn manifest() -> axum::Json<Manifest> {
    axum::Json(Manifest {
        service: "submit",
        version: env!("CARGO_PKG_VERSION"),
        api_version: API_VERSION,
        method_registry_version: mapi_methods::registry_version(),
        methods: mapi_methods::all().iter().map(|m| m.name).collect(),
    })
}

/// Where things are, for a client that asks the platform's own address.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Index {
    pub service: &'static str,
    pub version: &'static str,
    /// The web console, for people.
    pub console: &'static str,
    /// This API's OpenAPI document.
    pub openapi: &'static str,
    /// The API version and the method registry's.
    pub manifest: &'static str,
}

/// The platform's own address: a browser (one that accepts HTML) is sent
/// to the console, which signs it in; any other client is told where
/// things are.
#[utoipa::path(get, path = "/", tag = "jobs",
    responses(
        (status = 200, body = Index, description = "Where the console, the OpenAPI document and the manifest are"),
        (status = 303, description = "A browser: to /console"),
    ))]
pub async fn index(headers: axum::http::HeaderMap) -> axum::response::Response {
    let html = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|t| t.trim().starts_with("text/html")));
    if html {
        return axum::response::Redirect::to("/console").into_response();
    }
    axum::Json(Index {
        service: "mapi",
        version: env!("CARGO_PKG_VERSION"),
        console: "/console",
        openapi: "/openapi.json",
        manifest: "/manifest",
    })
    .into_response()
}
