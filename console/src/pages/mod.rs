//! The console's pages, one module per area. Each handler asks the API
//! (through [`crate::api::Api`]) and renders what it answered; a refusal
//! is shown with the API's own status and words.

mod compare;
mod datasets;
mod experiments;
mod jobs;
mod members;
mod models;
mod ops;
mod run_page;
mod runs;
mod tenant_life;
mod tokens;
mod usage;
mod webhooks;
mod workflows;

use axum::Router;
use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Redirect, Response};
use mapi_domain::{ProjectId, TenantId};
use maud::html;
use serde::Deserialize;

use crate::Console;
use crate::api::{Api, Refusal};
use crate::html::{Scope, page, refused};
use crate::session::Viewer;

pub fn routes(max_dataset_bytes: usize) -> Router<Console> {
    Router::new()
        .merge(runs::routes())
        .merge(run_page::routes())
        .merge(compare::routes())
        .merge(experiments::routes())
        .merge(webhooks::routes())
        .merge(tenant_life::routes())
        .merge(datasets::routes(max_dataset_bytes))
        .merge(jobs::routes())
        .merge(models::routes())
        .merge(usage::routes())
        .merge(tokens::routes())
        .merge(members::routes())
        .merge(ops::routes())
        .merge(workflows::routes())
}

/// A tenant and project from a console path, checked as the API checks
/// ids (so nothing else reaches an API URL); a bad one is not found.
pub(crate) fn project_ids(tenant: &str, project: &str) -> Result<(TenantId, ProjectId), Missing> {
    match (TenantId::parse(tenant), ProjectId::parse(project)) {
        (Ok(t), Ok(p)) => Ok((t, p)),
        _ => Err(Missing("There is no such project.")),
    }
}

pub(crate) fn tenant_id(tenant: &str) -> Result<TenantId, Missing> {
    TenantId::parse(tenant).map_err(|_| Missing("There is no such tenant."))
}

/// The `{tenant}` and `{project}` of a console path, checked (see
/// [`project_ids`]); a page under a project takes it as an argument.
#[derive(Debug)]
pub(crate) struct ProjectPath {
    pub tenant: TenantId,
    pub project: ProjectId,
}

/// The `{tenant}` of a console path, checked as the API checks it.
#[derive(Debug)]
pub(crate) struct TenantPath(pub TenantId);

/// One named parameter of the matched route, as it came.
fn param(params: &RawPathParams, name: &str) -> Option<String> {
    params.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_owned())
}

impl<S: Send + Sync> FromRequestParts<S> for ProjectPath {
    type Rejection = Missing;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Missing> {
        let missing = Missing("There is no such project.");
        let params = RawPathParams::from_request_parts(parts, state).await.map_err(|_| missing)?;
        let (t, p) = (param(&params, "tenant"), param(&params, "project"));
        let (tenant, project) = project_ids(&t.unwrap_or_default(), &p.unwrap_or_default())?;
        Ok(ProjectPath { tenant, project })
    }
}

impl<S: Send + Sync> FromRequestParts<S> for TenantPath {
    type Rejection = Missing;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Missing> {
        let missing = Missing("There is no such tenant.");
        let params = RawPathParams::from_request_parts(parts, state).await.map_err(|_| missing)?;
        tenant_id(&param(&params, "tenant").unwrap_or_default()).map(TenantPath)
    }
}

/// The `{id}` of a run, job or token in a console path, checked by
/// [`plain_id`].
#[derive(Debug)]
pub(crate) struct IdPath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for IdPath {
    type Rejection = Missing;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Missing> {
        let missing = Missing("There is no such thing here.");
        let params = RawPathParams::from_request_parts(parts, state).await.map_err(|_| missing)?;
        let id = param(&params, "id").unwrap_or_default();
        plain_id(&id)?;
        Ok(IdPath(id))
    }
}

/// A live section's fresh copy for the page's script (never cached), or
/// the refusal that stands in its place.
pub(crate) fn fragment(section: Result<maud::Markup, Refusal>) -> Response {
    match section {
        Ok(markup) => {
            ([(axum::http::header::CACHE_CONTROL, "no-store")], axum::response::Html(markup.into_string()))
                .into_response()
        }
        Err(r) => {
            (r.status, axum::response::Html(crate::html::refusal_box(&r).into_string())).into_response()
        }
    }
}

/// A page drawn after an action, answered with the status of the API's
/// refusal when it refused (the page itself shows the refusal's words).
pub(crate) fn with_status(mut response: Response, refusal: Option<&Refusal>) -> Response {
    if let Some(r) = refusal {
        *response.status_mut() = r.status;
    }
    response
}

/// A form field holding JSON (`default` when left empty); text that does
/// not parse is refused in the API's words, naming `what`.
pub(crate) fn json_field(
    text: Option<&str>,
    default: serde_json::Value,
    what: &str,
) -> Result<serde_json::Value, Refusal> {
    match text.map(str::trim).filter(|t| !t.is_empty()) {
        None => Ok(default),
        Some(t) => serde_json::from_str(t).map_err(|_| Refusal::invalid(format!("{what} is not valid JSON"))),
    }
}

/// `?page_token=`: which page of a cursor-paged list to show.
#[derive(Debug, Deserialize)]
pub(crate) struct PageQuery {
    pub page_token: Option<String>,
}

/// An id of a run, job or model version in a path: only characters ids
/// are made of, so it cannot change the API URL it is put in.
pub(crate) fn plain_id(id: &str) -> Result<&str, Missing> {
    let plain = id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !id.is_empty() && id.len() <= 128 && plain {
        Ok(id)
    } else {
        Err(Missing("There is no such thing here."))
    }
}

/// A path naming nothing the console shows: a page that says so.
#[derive(Debug)]
pub(crate) struct Missing(&'static str);

impl IntoResponse for Missing {
    fn into_response(self) -> Response {
        crate::html::message(StatusCode::NOT_FOUND, "Not found", self.0, None)
    }
}

#[derive(Debug, Deserialize)]
struct Grant {
    tenant: TenantId,
    project: Option<ProjectId>,
    role: String,
}

#[derive(Debug, Deserialize)]
struct WhoAmI {
    grants: Vec<Grant>,
}

#[derive(Debug, Deserialize)]
struct Projects {
    projects: Vec<mapi_schema::ProjectDoc>,
}

/// The viewer's role in a project: its own grant, else their tenant-wide one.
pub(crate) async fn role_in(api: &Api<'_>, tenant: &TenantId, project: &ProjectId) -> Option<String> {
    let me: WhoAmI = api.get("/v1/whoami").await.ok()?;
    let of =
        |p: Option<&ProjectId>| me.grants.iter().find(|g| &g.tenant == tenant && g.project.as_ref() == p);
    of(Some(project)).or_else(|| of(None)).map(|g| g.role.clone())
}

/// `?all=true` on the home page: list the projects even when there is one.
#[derive(Debug, Deserialize)]
pub struct HomeQuery {
    all: Option<bool>,
}

/// The projects the viewer can open, from their grants (the project
/// picker: every page links here as "All projects").
pub async fn home(
    axum::extract::State(console): axum::extract::State<Console>,
    viewer: Viewer,
    axum::extract::Query(q): axum::extract::Query<HomeQuery>,
) -> Response {
    let api = Api::new(&console, &viewer);
    let me: WhoAmI = match api.get("/v1/whoami").await {
        Ok(me) => me,
        Err(r) => return refused(&viewer, Scope::default(), "Your projects", &r),
    };
    let mut rows = Vec::new();
    for g in &me.grants {
        match &g.project {
            Some(p) => rows.push((g.tenant.clone(), p.clone(), p.to_string(), g.role.clone())),
            None => {
                let listed: Result<Projects, _> =
                    api.get(&format!("/v1/tenants/{}/projects", g.tenant)).await;
                for p in listed.map(|l| l.projects).unwrap_or_default() {
                    rows.push((g.tenant.clone(), p.project, p.name, g.role.clone()));
                }
            }
        }
    }
    if let ([(t, p, ..)], None | Some(false)) = (rows.as_slice(), q.all) {
        return Redirect::to(&format!("/console/t/{t}/p/{p}/runs")).into_response();
    }
    let body = html! {
        @if rows.is_empty() {
            p { "You have no grant in any project yet. An administrator of a tenant can add you on its Members page." }
        } @else {
            table {
                thead { tr { th scope="col" { "Tenant" } th scope="col" { "Project" } th scope="col" { "Your role" } } }
                tbody {
                    @for (t, p, name, role) in &rows {
                        tr {
                            td { a href={"/console/t/" (t) "/members"} { (t) } }
                            td { a href={"/console/t/" (t) "/p/" (p) "/runs"} { (name) " (" (p) ")" } }
                            td { (role) }
                        }
                    }
                }
            }
        }
        @if viewer.operator { p { a href="/console/admin/tenants" { "Operate the platform: tenants, quotas, executors, audit" } } }
    };
    page(StatusCode::OK, Some(&viewer), Scope::default(), "Your projects", body)
}

/// A console path that names no page.
pub async fn not_found() -> Response {
    crate::html::message(
        StatusCode::NOT_FOUND,
        "Not found",
        "There is no console page here.",
        Some(crate::html::Notice::link("/console", "Your projects")),
    )
}
