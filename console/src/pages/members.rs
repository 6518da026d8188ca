//! Members of a tenant (its tenant-wide grants) and of a project (its own
//! grants plus the tenant-wide ones, marked "organisation": those are
//! changed on the tenant's page): roles, the reviewer capability,
//! invitations (a grant not yet claimed by a sign-in), adding, changing
//! and removing.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use mapi_access::Role;
use mapi_domain::{ProjectId, TenantId, UserId};
use mapi_oidc::code_flow::encode;
use mapi_schema::MembershipDoc;
use maud::{Markup, html};
use reqwest::Method;
use serde::Deserialize;

use super::{ProjectPath, TenantPath};
use crate::Console;
use crate::api::{Api, Refusal};
use crate::html::{Scope, csrf, done, page, refusal_box, when};
use crate::session::{Posted, Viewer};

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/console/t/{tenant}/members", get(list).post(add))
        .route("/console/t/{tenant}/members/{email}", post(change))
        .route("/console/t/{tenant}/p/{project}/members", get(list_project).post(add_project))
        .route("/console/t/{tenant}/p/{project}/members/{email}", post(change_project))
}

/// Whose members a page shows: a tenant's or one project's.
#[derive(Debug, Clone, Copy)]
enum Of<'a> {
    Tenant(&'a TenantId),
    Project(&'a TenantId, &'a ProjectId),
}

impl Of<'_> {
    fn api(self) -> String {
        match self {
            Of::Tenant(t) => format!("/v1/tenants/{t}/members"),
            Of::Project(t, p) => format!("/v1/tenants/{t}/projects/{p}/members"),
        }
    }

    fn console(self) -> String {
        match self {
            Of::Tenant(t) => format!("/console/t/{t}/members"),
            Of::Project(t, p) => format!("/console/t/{t}/p/{p}/members"),
        }
    }

    fn scope(&self) -> Scope<'_> {
        match self {
            Of::Tenant(t) => Scope::tenant(t),
            Of::Project(t, p) => Scope::project(t.as_str(), p.as_str()),
        }
    }

    fn title(self) -> String {
        match self {
            Of::Tenant(t) => format!("Members of {t}"),
            Of::Project(t, p) => format!("Members of project {t}/{p}"),
        }
    }

    /// Whether a listed grant is this page's own (else it is organisation-wide).
    fn owns(self, m: &MembershipDoc) -> bool {
        match self {
            Of::Tenant(_) => m.project.is_none(),
            Of::Project(_, p) => m.project.as_ref() == Some(p),
        }
    }

    fn what(self) -> &'static str {
        match self {
            Of::Tenant(_) => "the tenant",
            Of::Project(..) => "the project",
        }
    }
}

#[derive(Debug, Deserialize)]
struct MemberList {
    items: Vec<MembershipDoc>,
}

async fn list(State(console): State<Console>, viewer: Viewer, TenantPath(t): TenantPath) -> Response {
    render(&console, &viewer, Of::Tenant(&t), None).await
}

async fn list_project(State(console): State<Console>, viewer: Viewer, at: ProjectPath) -> Response {
    render(&console, &viewer, Of::Project(&at.tenant, &at.project), None).await
}

fn role_select(name: &str, current: Option<Role>, label: &str) -> Markup {
    html! {
        label { (label)
            select name=(name) {
                @for r in Role::ALL { option value=(r.as_str()) selected[current == Some(*r)] { (r.as_str()) } }
            }
        }
    }
}

async fn render(
    console: &Console,
    viewer: &Viewer,
    of: Of<'_>,
    flash: Option<Result<String, Refusal>>,
) -> Response {
    let answer: Result<MemberList, Refusal> = Api::new(console, viewer).get(&of.api()).await;
    let status = match (&flash, &answer) {
        (Some(Err(r)), _) | (_, Err(r)) => r.status,
        _ => StatusCode::OK,
    };
    let body = html! {
        @match &flash { Some(Ok(text)) => (done(text)), Some(Err(r)) => (refusal_box(r)), None => {} }
        @match &answer {
            Err(r) => (refusal_box(r)),
            Ok(list) => (members_table(viewer, of, list)),
        }
        h2 { "Add a member" }
        form.stack method="post" action=(of.console()) {
            (csrf(viewer))
            label { "E-mail" input name="email" type="email" required autocomplete="off"; }
            (role_select("role", Some(Role::Viewer), "Role"))
            label.check { input type="checkbox" name="reviewer" value="true"; "Reviewer (may approve; not for viewers)" }
            button type="submit" { "Add" }
        }
    };
    page(status, Some(viewer), of.scope(), &of.title(), body)
}

fn members_table(viewer: &Viewer, of: Of<'_>, list: &MemberList) -> Markup {
    let caption = match of {
        Of::Tenant(_) => {
            "Tenant-wide grants. An invitation becomes a membership at the person's first sign-in."
        }
        Of::Project(..) => {
            "The project's own grants, then the tenant-wide ones (marked organisation: change those on the tenant's Members page). An invitation becomes a membership at the person's first sign-in."
        }
    };
    let shown = list.items.iter().filter(|m| m.project.is_none() || of.owns(m));
    html! {
        table {
            caption.meta { (caption) }
            thead { tr { th scope="col" { "Member" } th scope="col" { "Role" } th scope="col" { "Reviewer" } th scope="col" { "Status" } th scope="col" { "Added" } th scope="col" { "Change" } } }
            tbody { @for m in shown { tr {
                td { (m.email.as_str()) @if !of.owns(m) { " " span.badge { "organisation" } } }
                td { (m.role.as_str()) } td { @if m.reviewer || m.role == Role::Admin { "yes" } @else { "no" } }
                td { @if m.claimed { "member" } @else { "invited" } }
                td { (when(m.created_at)) " by " (m.created_by.as_str()) }
                td { @if of.owns(m) { (change_form(viewer, of, m)) } @else {
                    a href={"/console/t/" (m.tenant) "/members"} { "On the tenant's page" }
                } }
            } } }
        }
    }
}

fn change_form(viewer: &Viewer, of: Of<'_>, m: &MembershipDoc) -> Markup {
    html! {
        form.inline method="post" action={(of.console()) "/" (encode(m.email.as_str()))} {
            (csrf(viewer))
            (role_select("role", Some(m.role), "Role"))
            label.check { input type="checkbox" name="reviewer" value="true" checked[m.reviewer]; "Reviewer" }
            button.secondary type="submit" name="action" value="update" aria-label={"Save the role of " (m.email.as_str())} { "Save" }
            button.danger type="submit" name="action" value="remove" aria-label={"Remove " (m.email.as_str())} { "Remove" }
        }
    }
}

async fn add(State(console): State<Console>, TenantPath(t): TenantPath, posted: Posted) -> Response {
    add_in(&console, Of::Tenant(&t), posted).await
}

async fn add_project(State(console): State<Console>, at: ProjectPath, posted: Posted) -> Response {
    add_in(&console, Of::Project(&at.tenant, &at.project), posted).await
}

async fn add_in(console: &Console, of: Of<'_>, posted: Posted) -> Response {
    let email = posted.get("email").unwrap_or_default();
    let body = serde_json::json!({
        "email": email,
        "role": posted.get("role").unwrap_or("viewer"),
        "reviewer": posted.get("reviewer") == Some("true"),
    });
    let answer = Api::new(console, &posted.viewer)
        .send::<serde_json::Value, _>(Method::POST, &of.api(), &body)
        .await
        .map(|_| format!("{email} was added; they will see {} at their next sign-in.", of.what()));
    render(console, &posted.viewer, of, Some(answer)).await
}

async fn change(
    State(console): State<Console>,
    TenantPath(t): TenantPath,
    Path((_, email)): Path<(String, String)>,
    posted: Posted,
) -> Response {
    change_in(&console, Of::Tenant(&t), &email, posted).await
}

async fn change_project(
    State(console): State<Console>,
    at: ProjectPath,
    Path((_, _, email)): Path<(String, String, String)>,
    posted: Posted,
) -> Response {
    change_in(&console, Of::Project(&at.tenant, &at.project), &email, posted).await
}

async fn change_in(console: &Console, of: Of<'_>, email: &str, posted: Posted) -> Response {
    let Ok(email) = UserId::parse(email) else {
        return crate::html::message(StatusCode::NOT_FOUND, "Not found", "There is no such member.", None);
    };
    let api = Api::new(console, &posted.viewer);
    let path = format!("{}/{}", of.api(), encode(email.as_str()));
    let answer = if posted.get("action") == Some("remove") {
        api.delete(&path).await.map(|()| format!("{email} was removed from {}.", of.what()))
    } else {
        let body = serde_json::json!({"role": posted.get("role"), "reviewer": posted.get("reviewer") == Some("true")});
        api.send::<serde_json::Value, _>(Method::PATCH, &path, &body)
            .await
            .map(|_| format!("{email}'s role was saved."))
    };
    render(console, &posted.viewer, of, Some(answer)).await
}
