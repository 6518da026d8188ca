//! Experiments (named sets of a project's runs) and saved views of the
//! runs table (filters and columns under a name): lists, new ones, an
//! experiment's page with its runs, changes and deletion.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use mapi_api::views::RunPage;
use mapi_domain::{ProjectId, RunState, TenantId};
use mapi_schema::{ExperimentDoc, RunViewDoc};
use maud::{Markup, html};
use reqwest::Method;
use serde::Deserialize;

use super::{Missing, ProjectPath, project_ids, with_status};
use crate::Console;
use crate::api::{Api, Refusal, query};
use crate::html::{Scope, csrf, done, page, refusal_box, state_badge, when};
use crate::session::{Posted, Viewer};

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/console/t/{tenant}/p/{project}/experiments", get(list).post(create))
        .route("/console/t/{tenant}/p/{project}/experiments/{name}", get(detail).post(describe))
        .route("/console/t/{tenant}/p/{project}/experiments/{name}/delete", post(delete))
        .route("/console/t/{tenant}/p/{project}/views", get(views).post(save_view))
        .route("/console/t/{tenant}/p/{project}/views/{name}/delete", post(delete_view))
}

/// An experiment's or a view's name from a path: the characters names are
/// made of, starting with a letter or digit (so it cannot change the API
/// URL it is put in).
fn named(t: &str, p: &str, name: &str) -> Result<(TenantId, ProjectId, String), Missing> {
    let (t, p) = project_ids(t, p)?;
    let ok = name.len() <= 64
        && name.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_.-".contains(&b));
    if ok { Ok((t, p, name.to_owned())) } else { Err(Missing("There is no such name here.")) }
}

type NamedPath = Path<(String, String, String)>;

#[derive(Debug, Deserialize)]
struct Experiments {
    experiments: Vec<ExperimentDoc>,
}

async fn list(
    State(console): State<Console>,
    viewer: Viewer,
    ProjectPath { tenant: t, project: p }: ProjectPath,
) -> Response {
    render_list(&console, &viewer, (&t, &p), None).await
}

async fn render_list(
    console: &Console,
    viewer: &Viewer,
    (t, p): (&TenantId, &ProjectId),
    flash: Option<Markup>,
) -> Response {
    let answer: Result<Experiments, Refusal> = Api::new(console, viewer)
        .get(&format!("/v1/tenants/{t}/projects/{p}/experiments?page_size=200"))
        .await;
    let base = format!("/console/t/{t}/p/{p}/experiments");
    let body = html! {
        @if let Some(f) = flash { (f) }
        p.meta { "An experiment gathers runs asked to answer one question; a run joins one when it is submitted or later (" code { "mapi runs update RUN --experiment NAME" } ")." }
        @match &answer {
            Err(r) => (refusal_box(r)),
            Ok(list) if list.experiments.is_empty() => p { "No experiment yet." },
            Ok(list) => table {
                thead { tr { th scope="col" { "Experiment" } th scope="col" { "Description" } th scope="col" { "Created" } th scope="col" { "By" } } }
                tbody { @for e in &list.experiments { tr {
                    td { a href={(base) "/" (e.name)} { (e.name) } }
                    td { (e.description) }
                    td { (when(e.created_at)) }
                    td { (e.created_by.as_str()) }
                } } }
            },
        }
        h2 { "New experiment" }
        form.stack method="post" {
            (csrf(viewer))
            label { "Name (a-z, 0-9, ., _, -)" input name="name" required maxlength="64" pattern="[a-z0-9][a-z0-9_.\\-]*" placeholder="churn-baselines"; }
            label { "Description" input name="description" maxlength="500"; }
            button type="submit" { "Create the experiment" }
        }
    };
    let status = answer.as_ref().err().map_or(StatusCode::OK, |r| r.status);
    page(status, Some(viewer), Scope::project(t.as_str(), p.as_str()), "Experiments", body)
}

async fn create(
    State(console): State<Console>,
    ProjectPath { tenant: t, project: p }: ProjectPath,
    posted: Posted,
) -> Response {
    let body = serde_json::json!({"name": posted.get("name").unwrap_or_default(), "description": posted.get("description")});
    let path = format!("/v1/tenants/{t}/projects/{p}/experiments");
    match Api::new(&console, &posted.viewer).send::<ExperimentDoc, _>(Method::POST, &path, &body).await {
        Ok(e) => Redirect::to(&format!("/console/t/{t}/p/{p}/experiments/{}", e.name)).into_response(),
        Err(r) => with_status(
            render_list(&console, &posted.viewer, (&t, &p), Some(refusal_box(&r))).await,
            Some(&r),
        ),
    }
}

async fn detail(State(console): State<Console>, viewer: Viewer, Path((t, p, name)): NamedPath) -> Response {
    match named(&t, &p, &name) {
        Ok((t, p, name)) => render_detail(&console, &viewer, (&t, &p, &name), None).await,
        Err(m) => m.into_response(),
    }
}

async fn render_detail(
    console: &Console,
    viewer: &Viewer,
    (t, p, name): (&TenantId, &ProjectId, &str),
    flash: Option<Markup>,
) -> Response {
    let api = Api::new(console, viewer);
    let experiment: ExperimentDoc = match api
        .get(&format!("/v1/tenants/{t}/projects/{p}/experiments/{name}"))
        .await
    {
        Ok(e) => e,
        Err(r) => {
            return crate::html::refused(viewer, Scope::project(t.as_str(), p.as_str()), "Experiment", &r);
        }
    };
    let runs: Result<RunPage, Refusal> = api
        .get(&format!(
            "/v1/tenants/{t}/projects/{p}/runs{}",
            query(&[("experiment", Some(name)), ("page_size", Some("100"))])
        ))
        .await;
    let base = format!("/console/t/{t}/p/{p}/experiments/{name}");
    let body = html! {
        @if let Some(f) = flash { (f) }
        dl.facts {
            dt { "Description" } dd { @if experiment.description.is_empty() { "none" } @else { (experiment.description) } }
            dt { "Created" } dd { (when(experiment.created_at)) " by " (experiment.created_by.as_str()) }
        }
        h2 { "Runs" }
        @match &runs {
            Err(r) => (refusal_box(r)),
            Ok(page) if page.runs.is_empty() => p { "No run has joined it yet." },
            Ok(page) => {
                p { a href={"/console/t/" (t) "/p/" (p) "/runs?experiment=" (name)} { "Open them in the runs table" } " to choose columns, sort by a metric and compare." }
                table {
                    thead { tr { th scope="col" { "Run" } th scope="col" { "Method" } th scope="col" { "State" } th scope="col" { "Created" } } }
                    tbody { @for r in &page.runs { tr {
                        td { a href={"/console/runs/" (r.id)} { (r.name.as_deref().unwrap_or(r.id.as_str())) } }
                        td { (r.method) }
                        td { (state_badge(r.state.as_str())) }
                        td { (when(r.created_at)) }
                    } } }
                }
                @if page.next_page_token.is_some() { p.meta { "The newest 100 are shown." } }
            }
        }
        div.actions {
            form.stack method="post" action=(base) {
                (csrf(viewer))
                label { "Description" input name="description" maxlength="500" value=(experiment.description); }
                button type="submit" class="secondary" { "Save the description" }
            }
            form method="post" action={(base) "/delete"} {
                (csrf(viewer))
                button.danger type="submit" { "Delete the experiment" }
            }
        }
        p.meta { "An experiment is deleted only once no run is in it." }
    };
    page(
        StatusCode::OK,
        Some(viewer),
        Scope::project(t.as_str(), p.as_str()),
        &format!("Experiment {name}"),
        body,
    )
}

async fn describe(State(console): State<Console>, Path((t, p, name)): NamedPath, posted: Posted) -> Response {
    let (t, p, name) = match named(&t, &p, &name) {
        Ok(n) => n,
        Err(m) => return m.into_response(),
    };
    let body = serde_json::json!({"description": posted.get("description").unwrap_or_default()});
    let path = format!("/v1/tenants/{t}/projects/{p}/experiments/{name}");
    let answer =
        Api::new(&console, &posted.viewer).send::<ExperimentDoc, _>(Method::PATCH, &path, &body).await;
    let flash = match &answer {
        Ok(_) => done("The description is saved."),
        Err(r) => refusal_box(r),
    };
    let response = render_detail(&console, &posted.viewer, (&t, &p, &name), Some(flash)).await;
    match &answer {
        Err(r) => with_status(response, Some(r)),
        Ok(_) => response,
    }
}

async fn delete(State(console): State<Console>, Path((t, p, name)): NamedPath, posted: Posted) -> Response {
    let (t, p, name) = match named(&t, &p, &name) {
        Ok(n) => n,
        Err(m) => return m.into_response(),
    };
    match Api::new(&console, &posted.viewer)
        .delete(&format!("/v1/tenants/{t}/projects/{p}/experiments/{name}"))
        .await
    {
        Ok(()) => {
            render_list(
                &console,
                &posted.viewer,
                (&t, &p),
                Some(done(&format!("Experiment {name} is deleted."))),
            )
            .await
        }
        Err(r) => with_status(
            render_detail(&console, &posted.viewer, (&t, &p, &name), Some(refusal_box(&r))).await,
            Some(&r),
        ),
    }
}

#[derive(Debug, Deserialize)]
struct Views {
    views: Vec<RunViewDoc>,
}

/// The project's saved views of its runs table (the first 200 by name).
pub(super) async fn saved_views(
    api: &Api<'_>,
    t: &TenantId,
    p: &ProjectId,
) -> Result<Vec<RunViewDoc>, Refusal> {
    api.get::<Views>(&format!("/v1/tenants/{t}/projects/{p}/run-views?page_size=200")).await.map(|v| v.views)
}

async fn views(
    State(console): State<Console>,
    viewer: Viewer,
    ProjectPath { tenant: t, project: p }: ProjectPath,
) -> Response {
    render_views(&console, &viewer, (&t, &p), None).await
}

async fn render_views(
    console: &Console,
    viewer: &Viewer,
    (t, p): (&TenantId, &ProjectId),
    flash: Option<Markup>,
) -> Response {
    let answer = saved_views(&Api::new(console, viewer), t, p).await;
    let runs = format!("/console/t/{t}/p/{p}/runs");
    let body = html! {
        @if let Some(f) = flash { (f) }
        p.meta { "A saved view is a named set of filters and columns of the runs table; " code { "mapi runs ls --view NAME" } " shows the same." }
        @match &answer {
            Err(r) => (refusal_box(r)),
            Ok(views) if views.is_empty() => p { "No saved view yet." },
            Ok(views) => table {
                thead { tr { th scope="col" { "View" } th scope="col" { "Filters" } th scope="col" { "Columns" } th scope="col" { "Saved by" } th scope="col" { span.sr-only { "Actions" } } } }
                tbody { @for v in views { tr {
                    td { a href={(runs) "?view=" (v.name)} { (v.name) } }
                    td { code { (serde_json::to_string(&v.filters).unwrap_or_default()) } }
                    td { (v.columns.join(", ")) }
                    td { (v.saved_by.as_str()) }
                    td { form method="post" action={"/console/t/" (t) "/p/" (p) "/views/" (v.name) "/delete"} {
                        (csrf(viewer))
                        button.danger type="submit" aria-label={"Delete the view " (v.name)} { "Delete" }
                    } }
                } } }
            },
        }
        h2 { "Save a view" }
        p.meta { "Saving under a name that exists replaces that view." }
        form.stack method="post" {
            (csrf(viewer))
            label { "Name" input name="name" required maxlength="64" pattern="[a-z0-9][a-z0-9_.\\-]*" placeholder="best-fits"; }
            label { "Columns (comma-separated)" input name="columns" placeholder="name, state, params.alpha, metrics.r2"; }
            fieldset {
                legend { "Filters (each optional)" }
                label { "State"
                    select name="state" { option value="" { "any" } @for s in RunState::ALL { option value=(s.as_str()) { (s.as_str()) } } }
                }
                label { "Method" input name="method" placeholder="tabular.linear"; }
                label { "Tag" input name="tag"; }
                label { "Experiment" input name="experiment"; }
                label { "Metric" input name="metric" placeholder="r2>0.9"; }
            }
            button type="submit" { "Save the view" }
        }
    };
    let status = answer.as_ref().err().map_or(StatusCode::OK, |r| r.status);
    page(status, Some(viewer), Scope::project(t.as_str(), p.as_str()), "Saved views", body)
}

/// A view's body from the form: the filters given, the columns named (the default when none).
fn view_body(posted: &Posted) -> serde_json::Value {
    let mut filters = serde_json::Map::new();
    for k in ["state", "method", "tag", "experiment", "metric"] {
        if let Some(v) = posted.get(k) {
            filters.insert(k.to_owned(), serde_json::Value::from(v));
        }
    }
    let columns: Vec<&str> = posted
        .get("columns")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    let mut body = serde_json::json!({ "filters": filters });
    if !columns.is_empty() {
        body["columns"] = serde_json::json!(columns);
    }
    body
}

async fn save_view(
    State(console): State<Console>,
    ProjectPath { tenant: t, project: p }: ProjectPath,
    posted: Posted,
) -> Response {
    let name = posted.get("name").unwrap_or_default().to_owned();
    let answer = match named(t.as_str(), p.as_str(), &name) {
        Err(_) => Err(Refusal::invalid(
            "name the view with 1 to 64 of a-z, 0-9, ., _ and -, starting with a letter or digit",
        )),
        Ok(_) => {
            let path = format!("/v1/tenants/{t}/projects/{p}/run-views/{name}");
            Api::new(&console, &posted.viewer)
                .send::<RunViewDoc, _>(Method::PUT, &path, &view_body(&posted))
                .await
        }
    };
    let flash = match &answer {
        Ok(v) => {
            html! { div.done role="status" { p { "View " strong { (v.name) } " is saved: " a href={"/console/t/" (t) "/p/" (p) "/runs?view=" (v.name)} { "open it" } "." } } }
        }
        Err(r) => refusal_box(r),
    };
    let response = render_views(&console, &posted.viewer, (&t, &p), Some(flash)).await;
    match &answer {
        Err(r) => with_status(response, Some(r)),
        Ok(_) => response,
    }
}

async fn delete_view(
    State(console): State<Console>,
    Path((t, p, name)): NamedPath,
    posted: Posted,
) -> Response {
    let (t, p, name) = match named(&t, &p, &name) {
        Ok(n) => n,
        Err(m) => return m.into_response(),
    };
    let answer = Api::new(&console, &posted.viewer)
        .delete(&format!("/v1/tenants/{t}/projects/{p}/run-views/{name}"))
        .await;
    let flash = match &answer {
        Ok(()) => done(&format!("View {name} is deleted.")),
        Err(r) => refusal_box(r),
    };
    let response = render_views(&console, &posted.viewer, (&t, &p), Some(flash)).await;
    match &answer {
        Err(r) => with_status(response, Some(r)),
        Ok(()) => response,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_in_a_path_cannot_leave_its_place_in_the_api_url() {
        assert!(named("dev", "default", "churn-v2.1").is_ok());
        for bad in ["..", ".hidden", "a/b", "A", "", "x?y"] {
            assert!(named("dev", "default", bad).is_err(), "{bad}");
        }
    }
}
