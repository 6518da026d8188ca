//! Datasets: the project's list, an upload form, and deleting one
//! (project admins; the API refuses it while a run reads the dataset).

use axum::Router;
use axum::extract::{DefaultBodyLimit, Multipart, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use mapi_api::views::{DatasetPage, DatasetView};
use maud::{Markup, html};

use super::{IdPath, PageQuery, ProjectPath};
use crate::Console;
use crate::api::{Api, Refusal, query};
use crate::html::{Scope, csrf, done, page, refusal_box, when};
use crate::session::{Posted, Viewer, check_csrf};

/// The upload route takes bodies as large as a dataset may be (and its form's few fields).
pub fn routes(max_dataset_bytes: usize) -> Router<Console> {
    Router::new()
        .route(
            "/console/t/{tenant}/p/{project}/datasets",
            get(list).post(upload).layer(DefaultBodyLimit::max(max_dataset_bytes.saturating_add(64 * 1024))),
        )
        .route("/console/t/{tenant}/p/{project}/datasets/{id}/delete", post(delete))
}

async fn list(
    State(console): State<Console>,
    viewer: Viewer,
    ProjectPath { tenant: t, project: p }: ProjectPath,
    Query(q): Query<PageQuery>,
) -> Response {
    render(&console, &viewer, &t, &p, q.page_token.as_deref(), None).await
}

async fn render(
    console: &Console,
    viewer: &Viewer,
    t: &mapi_domain::TenantId,
    p: &mapi_domain::ProjectId,
    page_token: Option<&str>,
    flash: Option<Result<Markup, Refusal>>,
) -> Response {
    let path = format!("/v1/tenants/{t}/projects/{p}/datasets{}", query(&[("page_token", page_token)]));
    let answer: Result<DatasetPage, Refusal> = Api::new(console, viewer).get(&path).await;
    let status = match (&flash, &answer) {
        (Some(Err(r)), _) | (_, Err(r)) => r.status,
        _ => StatusCode::OK,
    };
    let body = html! {
        @match &flash { Some(Ok(m)) => (m), Some(Err(r)) => (refusal_box(r)), None => {} }
        (upload_form(viewer))
        @match &answer {
            Err(r) => (refusal_box(r)),
            Ok(list) => {
                @if list.datasets.is_empty() { p { "No dataset yet." } } @else {
                    table {
                        thead { tr { th scope="col" { "Dataset" } th scope="col" { "Name" } th.num scope="col" { "Rows" } th.num scope="col" { "Columns" } th.num scope="col" { "Bytes" } th scope="col" { "Uploaded" } th scope="col" { "Delete" } } }
                        tbody { @for d in &list.datasets { tr {
                            td { code { (d.id) } } td { (d.name) } td.num { (d.rows) } td.num { (d.column_count) } td.num { (d.size) } td { (when(d.created_at)) }
                            td { form.inline method="post" action={"/console/t/" (t) "/p/" (p) "/datasets/" (d.id) "/delete"} {
                                (csrf(viewer))
                                button.danger type="submit" aria-label={"Delete dataset " (d.id)} { "Delete" }
                            } }
                        } } }
                    }
                }
                @if let Some(next) = &list.next_page_token { div.pager { a href=(query(&[("page_token", Some(next))])) rel="next" { "Next page" } } }
            }
        }
    };
    page(status, Some(viewer), Scope::project(t.as_str(), p.as_str()), "Datasets", body)
}

fn upload_form(viewer: &Viewer) -> Markup {
    html! {
        form.stack method="post" enctype="multipart/form-data" {
            (csrf(viewer))
            label { "Name" input name="name" required maxlength="200" placeholder="survey-2026"; }
            label { "CSV file (a header row, then the rows)" input name="file" type="file" accept=".csv,text/csv" required; }
            button type="submit" { "Upload" }
        }
    }
}

async fn upload(
    State(console): State<Console>,
    viewer: Viewer,
    ProjectPath { tenant: t, project: p }: ProjectPath,
    mut form: Multipart,
) -> Response {
    let (mut token, mut name, mut file) = (None, None, None);
    while let Ok(Some(field)) = form.next_field().await {
        match field.name().unwrap_or_default() {
            "_csrf" => token = field.text().await.ok(),
            "name" => name = field.text().await.ok(),
            "file" => file = field.bytes().await.ok(),
            _ => {}
        }
    }
    if let Err(refused) = check_csrf(&viewer, token.as_deref()) {
        return refused.into_response();
    }
    let outcome = match file.filter(|f| !f.is_empty()) {
        None => Err(Refusal::invalid(
            "choose a CSV file to upload (it was missing, empty or larger than a dataset may be)",
        )),
        Some(bytes) => {
            let name = name.as_deref().map(str::trim).filter(|n| !n.is_empty());
            let path = format!("/v1/tenants/{t}/projects/{p}/datasets{}", query(&[("name", name)]));
            Api::new(&console, &viewer).upload::<DatasetView>(&path, "text/csv", bytes.to_vec()).await
        }
    };
    let said = outcome.map(|d| {
        done(&format!("Uploaded {} as {}: {} rows, {} columns.", d.name, d.id, d.rows, d.columns.len()))
    });
    render(&console, &viewer, &t, &p, None, Some(said)).await
}

async fn delete(
    State(console): State<Console>,
    ProjectPath { tenant: t, project: p }: ProjectPath,
    IdPath(id): IdPath,
    posted: Posted,
) -> Response {
    let path = format!("/v1/tenants/{t}/projects/{p}/datasets/{id}");
    let answer = Api::new(&console, &posted.viewer).delete(&path).await.map(|()| {
        done(&format!(
            "Dataset {id} is deleted: its file is gone and it no longer counts against the storage quota."
        ))
    });
    render(&console, &posted.viewer, &t, &p, None, Some(answer)).await
}
