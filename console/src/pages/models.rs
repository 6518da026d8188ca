//! Model versions and the endpoints serving them: status, revisions and
//! traffic, history; deploying a version as an endpoint, scoring rows,
//! promoting another version, rolling back and deleting.

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use mapi_api::endpoints::{EndpointPage, EndpointView, ScoreResponse, served};
use mapi_api::views::{ModelVersionPage, ModelVersionSummary};
use mapi_domain::{ProjectId, TenantId};
use maud::{Markup, html};
use reqwest::Method;
use serde_json::{Value, json};

use super::{PageQuery, ProjectPath, json_field, plain_id};
use crate::Console;
use crate::api::{Api, Refusal, query};
use crate::html::{Scope, csrf, done, money, page, refusal_box, state_badge, when};
use crate::session::{Posted, Viewer};

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/console/t/{tenant}/p/{project}/models", get(models).post(deploy))
        .route("/console/t/{tenant}/p/{project}/endpoints/{alias}", post(act))
        .route("/console/t/{tenant}/p/{project}/endpoints/{alias}/live", get(endpoint_live))
}

/// What an action answered, shown above the lists.
type Flash = Option<Result<Markup, Refusal>>;

async fn models(
    State(console): State<Console>,
    viewer: Viewer,
    at: ProjectPath,
    Query(q): Query<PageQuery>,
) -> Response {
    render(&console, &viewer, (&at.tenant, &at.project), q.page_token.as_deref(), None).await
}

async fn render(
    console: &Console,
    viewer: &Viewer,
    (t, p): (&TenantId, &ProjectId),
    page_token: Option<&str>,
    flash: Flash,
) -> Response {
    let api = Api::new(console, viewer);
    let base = format!("/v1/tenants/{t}/projects/{p}");
    let versions: Result<ModelVersionPage, Refusal> =
        api.get(&format!("{base}/model-versions{}", query(&[("page_token", page_token)]))).await;
    let endpoints: Result<EndpointPage, Refusal> = api.get(&format!("{base}/endpoints")).await;
    let status = match (&flash, &versions) {
        (Some(Err(r)), _) | (_, Err(r)) => r.status,
        _ => StatusCode::OK,
    };
    let listed = versions.as_ref().map(|v| v.model_versions.as_slice()).unwrap_or_default();
    let action = format!("/console/t/{t}/p/{p}");
    let body = html! {
        @match &flash { Some(Ok(m)) => (m), Some(Err(r)) => (refusal_box(r)), None => {} }
        h2 { "Endpoints" }
        @match &endpoints {
            Err(r) => (refusal_box(r)),
            Ok(e) if e.endpoints.is_empty() => p { "No endpoint serves a model of this project yet: deploy a version below." },
            Ok(e) => { @for ep in &e.endpoints { (endpoint_section(viewer, &action, ep, listed)) } }
        }
        @if !listed.is_empty() { (deploy_form(viewer, &action, listed)) }
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
    page(status, Some(viewer), Scope::project(t.as_str(), p.as_str()), "Models and endpoints", body)
}

fn version_select(name: &str, label: &str, versions: &[ModelVersionSummary]) -> Markup {
    html! {
        label { (label)
            select name=(name) required {
                @for m in versions { option value=(m.id) { (m.id) " (" (m.method) ", " (when(m.created_at)) ")" } }
            }
        }
    }
}

fn deploy_form(viewer: &Viewer, action: &str, versions: &[ModelVersionSummary]) -> Markup {
    html! {
        h2 { "Deploy a version as an endpoint" }
        form.stack method="post" action={(action) "/models"} {
            (csrf(viewer))
            label { "Alias (lowercase letters, digits and -, starting with a letter)" input name="alias" required pattern="[a-z][a-z0-9-]{0,31}" autocomplete="off"; }
            (version_select("model_version", "Model version", versions))
            label { "Accelerator" select name="accelerator" { option value="cpu" { "cpu" } option value="l4" { "l4 (GPU)" } } }
            label { "Region (us, eu or a region by name; empty: the tenant's data residency decides)" input name="region" value=""; }
            label { "Fewest instances (0 scales to zero)" input name="min_instances" type="number" min="0" max="100" value="0"; }
            label { "Most instances" input name="max_instances" type="number" min="1" max="100" value="3"; }
            button type="submit" { "Deploy" }
        }
    }
}

fn endpoint_section(
    viewer: &Viewer,
    action: &str,
    ep: &EndpointView,
    versions: &[ModelVersionSummary],
) -> Markup {
    let act = format!("{action}/endpoints/{}", ep.alias);
    html! {
        section aria-label={"Endpoint " (ep.alias)} {
            (endpoint_status(action, ep))
            form.stack method="post" action=(act) {
                (csrf(viewer))
                label { "Rows to score (JSON: a list of objects naming the model's input columns)"
                    textarea name="rows" rows="3" required placeholder=r#"[{"gnp": 400000, "year": 1955}]"# {} }
                label.check { input type="checkbox" name="std_errors" value="true"; "Also each prediction's standard error" }
                button type="submit" name="action" value="score" { "Score" }
            }
            div.actions {
                @if !versions.is_empty() {
                    form.stack method="post" action=(act) aria-label={"Promote a version on " (ep.alias)} {
                        (csrf(viewer))
                        (version_select("model_version", "Promote", versions))
                        button.secondary type="submit" name="action" value="promote" { "Promote" }
                    }
                }
                form.stack method="post" action=(act) aria-label={"Roll back " (ep.alias)} {
                    (csrf(viewer))
                    p.meta { "Back to the revision that served before." }
                    button.secondary type="submit" name="action" value="rollback" { "Roll back" }
                }
            }
            details.danger-zone {
                summary { "Delete this endpoint" }
                form.stack method="post" action=(act) {
                    (csrf(viewer))
                    label { "Type " code { (ep.alias) } " to delete it" input name="confirm" required autocomplete="off"; }
                    button.danger type="submit" name="action" value="delete" { "Delete" }
                }
            }
        }
    }
}

/// What can change of an endpoint while it deploys, promotes or rolls
/// back: its status, revisions and traffic, promotion and history. With
/// JavaScript it is replaced from `…/live` until the endpoint is settled;
/// the forms beside it are left alone (a refresh never wipes what is typed).
fn endpoint_status(action: &str, ep: &EndpointView) -> Markup {
    let settled = ep.promotion.is_none() && ep.status != mapi_domain::endpoint::EndpointStatus::Deploying;
    html! {
        div.endpoint-status aria-live="polite" data-live={(action) "/endpoints/" (ep.alias) "/live"} data-final[settled] {
            h3 { (ep.alias) " " (state_badge(ep.status.as_str())) }
            @if let Some(m) = &ep.message { div.problem { p { (m) } } }
            p.meta { "Serves " code { (served(ep.model_version.as_ref(), ep.image.as_deref())) } " on " (ep.hosting) " (" (ep.region) "), " (ep.min_instances) "–" (ep.max_instances) " instances. "
                (ep.usage.requests) " scores, " (ep.usage.errors) " errors, " (money(i64::try_from(ep.usage.cost_micros).unwrap_or(i64::MAX), "USD")) "." }
            table {
                caption { "Revisions and traffic" }
                thead { tr { th scope="col" { "Tag" } th scope="col" { "Model version" } th scope="col" { "Role" } th.num scope="col" { "Traffic" } th scope="col" { "Created" } } }
                tbody { @for r in &ep.revisions { tr {
                    td { (r.tag) } td { code { (served(r.model_version.as_ref(), r.image.as_deref())) } } td { (r.role) } td.num { (r.traffic_percent) " %" } td { (when(r.created_at)) }
                } } }
            }
            @if let Some(pr) = &ep.promotion { p { "Promotion of " code { (served(pr.model_version.as_ref(), pr.image.as_deref())) } ": " (pr.phase) ", canary at " (pr.canary_percent) " %." } }
            details {
                summary { "History (" (ep.events.len()) " events)" }
                ol.timeline { @for e in &ep.events { li { (when(e.at)) " " strong { (e.kind) } " " (e.detail) } } }
            }
        }
    }
}

/// An endpoint's changing part alone, for the page's script.
async fn endpoint_live(
    State(console): State<Console>,
    viewer: Viewer,
    Path((t, p, alias)): Path<(String, String, String)>,
) -> Response {
    let Ok((t, p)) = super::project_ids(&t, &p) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if mapi_domain::endpoint::check_alias(&alias).is_err() {
        return StatusCode::NOT_FOUND.into_response();
    }
    let answer: Result<EndpointView, Refusal> =
        Api::new(&console, &viewer).get(&format!("/v1/tenants/{t}/projects/{p}/endpoints/{alias}")).await;
    super::fragment(answer.map(|ep| endpoint_status(&format!("/console/t/{t}/p/{p}"), &ep)))
}

/// A number from the form, or the field's default when it is left empty.
fn count(posted: &Posted, field: &str, default: u32) -> Result<u32, Refusal> {
    match posted.get(field).map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(default),
        Some(v) => {
            v.parse().map_err(|_| Refusal::invalid(format!("{field} must be a whole number, not `{v}`")))
        }
    }
}

async fn deploy(State(console): State<Console>, at: ProjectPath, posted: Posted) -> Response {
    let (t, p) = (&at.tenant, &at.project);
    let body = count(&posted, "min_instances", 0).and_then(|min| {
        Ok(json!({
            "alias": posted.get("alias").unwrap_or_default(),
            "model_version": posted.get("model_version").unwrap_or_default(),
            "accelerator": posted.get("accelerator").unwrap_or("cpu"),
            "region": posted.get("region").filter(|r| !r.is_empty()),
            "min_instances": min,
            "max_instances": count(&posted, "max_instances", 3)?,
        }))
    });
    let answer = match body {
        Err(r) => Err(r),
        Ok(body) => Api::new(&console, &posted.viewer)
            .send::<EndpointView, _>(Method::POST, &format!("/v1/tenants/{t}/projects/{p}/endpoints"), &body)
            .await
            .map(|ep| {
                done(&format!("Endpoint {} is {}: this page follows it.", ep.alias, ep.status.as_str()))
            }),
    };
    render(&console, &posted.viewer, (t, p), None, Some(answer)).await
}

async fn act(
    State(console): State<Console>,
    at: ProjectPath,
    Path((_, _, alias)): Path<(String, String, String)>,
    posted: Posted,
) -> Response {
    let (t, p) = (&at.tenant, &at.project);
    let Ok(alias) = plain_id(&alias) else {
        return crate::html::message(StatusCode::NOT_FOUND, "Not found", "There is no such endpoint.", None);
    };
    let api = Api::new(&console, &posted.viewer);
    let base = format!("/v1/tenants/{t}/projects/{p}/endpoints/{alias}");
    let answer = match posted.get("action").unwrap_or_default() {
        "score" => score(&api, &base, &posted).await,
        "promote" => {
            let body = json!({"model_version": posted.get("model_version").unwrap_or_default()});
            api.send::<Value, _>(Method::POST, &format!("{base}:promote"), &body)
                .await
                .map(|_| done("The promotion started: the new revision is smoke-tested at 0 %, then takes traffic in steps."))
        }
        "rollback" => api
            .post_empty::<Value>(&format!("{base}:rollback"))
            .await
            .map(|_| done("Rolled back: the stable revision serves 100 % again.")),
        "delete" if posted.get("confirm") != Some(alias) => Err(Refusal {
            status: StatusCode::BAD_REQUEST,
            code: "CONFIRMATION_REQUIRED".into(),
            detail: format!("type the endpoint's alias `{alias}` to delete it"),
        }),
        "delete" => api.delete(&base).await.map(|()| done(&format!("Endpoint {alias} is being deleted."))),
        other => Err(Refusal::invalid(format!(
            "`{other}` is no action on an endpoint: score, promote, rollback or delete"
        ))),
    };
    render(&console, &posted.viewer, (t, p), None, Some(answer)).await
}

async fn score(api: &Api<'_>, base: &str, posted: &Posted) -> Result<Markup, Refusal> {
    let rows = json_field(posted.get("rows"), json!([]), "the rows")?;
    let body = json!({"rows": rows, "std_errors": posted.get("std_errors") == Some("true")});
    let answer: ScoreResponse = api.send(Method::POST, &format!("{base}:score"), &body).await?;
    Ok(html! {
        div.done role="status" {
            p { (answer.predictions.len()) " predictions from revision " (answer.revision) ":" }
            table {
                thead { tr { th.num scope="col" { "Row" } th.num scope="col" { "Prediction" } th.num scope="col" { "Standard error" } } }
                tbody { @for (i, pr) in answer.predictions.iter().enumerate() { tr {
                    td.num { (i) } td.num { (format!("{:.6}", pr.value)) }
                    td.num { @match pr.std_error { Some(se) => (format!("± {se:.6}")), None => "—" } }
                } } }
            }
        }
    })
}
