//! Model versions and the endpoints serving them (status, revisions, traffic).

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use mapi_api::endpoints::EndpointPage;
use mapi_api::views::ModelVersionPage;
use maud::html;
use serde::Deserialize;

use super::project_ids;
use crate::Console;
use crate::api::{Api, Refusal, query};
use crate::html::{Scope, money, page, refusal_box, state_badge, when};
use crate::session::Viewer;

pub fn routes() -> Router<Console> {
    Router::new().route("/console/t/{tenant}/p/{project}/models", get(models))
}

#[derive(Debug, Deserialize)]
pub struct PageQuery {
    page_token: Option<String>,
}

async fn models(
    State(console): State<Console>,
    viewer: Viewer,
    Path((tenant, project)): Path<(String, String)>,
    Query(q): Query<PageQuery>,
) -> Response {
    let (t, p) = match project_ids(&tenant, &project) {
        Ok(ids) => ids,
        Err(r) => return r.into_response(),
    };
    let api = Api::new(&console, &viewer);
    let base = format!("/v1/tenants/{t}/projects/{p}");
    let versions: Result<ModelVersionPage, Refusal> =
        api.get(&format!("{base}/model-versions{}", query(&[("page_token", q.page_token.as_deref())]))).await;
    let endpoints: Result<EndpointPage, Refusal> = api.get(&format!("{base}/endpoints")).await;
    let status = versions.as_ref().err().map_or(StatusCode::OK, |r| r.status);
    let body = html! {
        h2 { "Endpoints" }
        @match &endpoints {
            Err(r) => (refusal_box(r)),
            Ok(e) if e.endpoints.is_empty() => p { "No endpoint serves a model of this project yet (" code { "mapi endpoints deploy" } ")." },
            Ok(e) => {
                @for ep in &e.endpoints {
                    section aria-label={"Endpoint " (ep.alias)} {
                        h3 { (ep.alias) " " (state_badge(&format!("{:?}", ep.status).to_lowercase())) }
                        @if let Some(m) = &ep.message { div.problem { p { (m) } } }
                        p.meta { "Serves " code { (ep.model_version) } " on " (ep.hosting) " (" (ep.region) "), " (ep.min_instances) "–" (ep.max_instances) " instances. "
                            (ep.usage.requests) " scores, " (ep.usage.errors) " errors, " (money(i64::try_from(ep.usage.cost_micros).unwrap_or(i64::MAX), "USD")) "." }
                        table {
                            caption { "Revisions and traffic" }
                            thead { tr { th scope="col" { "Tag" } th scope="col" { "Model version" } th scope="col" { "Role" } th.num scope="col" { "Traffic" } th scope="col" { "Created" } } }
                            tbody { @for r in &ep.revisions { tr {
                                td { (r.tag) } td { code { (r.model_version) } } td { (r.role) } td.num { (r.traffic_percent) " %" } td { (when(r.created_at)) }
                            } } }
                        }
                        @if let Some(pr) = &ep.promotion { p { "Promotion of " code { (pr.model_version) } ": " (pr.phase) ", canary at " (pr.canary_percent) " %." } }
                    }
                }
            }
        }
        h2 { "Model versions" }
        @match &versions {
            Err(r) => (refusal_box(r)),
            Ok(v) if v.model_versions.is_empty() => p { "No model version yet: a succeeded fit makes one." },
            Ok(v) => {
                table {
                    thead { tr { th scope="col" { "Version" } th scope="col" { "Method" } th scope="col" { "Run" } th.num scope="col" { "Artifacts" } th scope="col" { "Manifest SHA-256" } th scope="col" { "Created" } } }
                    tbody { @for m in &v.model_versions { tr id=(m.id) {
                        td { code { (m.id) } } td { (m.method) } td { a href={"/console/runs/" (m.run)} { code { (m.run) } } }
                        td.num { (m.artifact_count) } td { code { (m.manifest_sha256.get(..16).unwrap_or(&m.manifest_sha256)) "…" } } td { (when(m.created_at)) }
                    } } }
                }
                @if let Some(next) = &v.next_page_token { div.pager { a href=(query(&[("page_token", Some(next))])) rel="next" { "Next page" } } }
            }
        }
    };
    page(status, Some(&viewer), Scope::project(t.as_str(), p.as_str()), "Models and endpoints", body)
}
