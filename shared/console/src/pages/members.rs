//! A tenant's members: roles, the reviewer capability, invitations (a
//! grant not yet claimed by a sign-in), adding, changing and removing.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use mapi_access::Role;
use mapi_domain::{TenantId, UserId};
use mapi_oidc::code_flow::encode;
use mapi_schema::MembershipDoc;
use maud::{Markup, html};
use reqwest::Method;
use serde::Deserialize;

use super::tenant_id;
use crate::Console;
use crate::api::{Api, Refusal};
use crate::html::{Scope, csrf, done, page, refusal_box, when};
use crate::session::{Posted, Viewer};

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/console/t/{tenant}/members", get(list).post(add))
        .route("/console/t/{tenant}/members/{email}", post(change))
}

#[derive(Debug, Deserialize)]
struct MemberList {
    items: Vec<MembershipDoc>,
}

async fn list(State(console): State<Console>, viewer: Viewer, Path(tenant): Path<String>) -> Response {
    let t = match tenant_id(&tenant) {
        Ok(t) => t,
        Err(r) => return r.into_response(),
    };
    render(&console, &viewer, &t, None).await
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
    t: &TenantId,
    flash: Option<Result<String, Refusal>>,
) -> Response {
    let answer: Result<MemberList, Refusal> =
        Api::new(console, viewer).get(&format!("/v1/tenants/{t}/members")).await;
    let status = match (&flash, &answer) {
        (Some(Err(r)), _) | (_, Err(r)) => r.status,
        _ => StatusCode::OK,
    };
    let base = format!("/console/t/{t}/members");
    let body = html! {
        @match &flash { Some(Ok(text)) => (done(text)), Some(Err(r)) => (refusal_box(r)), None => {} }
        @match &answer {
            Err(r) => (refusal_box(r)),
            Ok(list) => table {
                caption.meta { "Tenant-wide grants. An invitation becomes a membership at the person's first sign-in." }
                thead { tr { th scope="col" { "Member" } th scope="col" { "Role" } th scope="col" { "Reviewer" } th scope="col" { "Status" } th scope="col" { "Added" } th scope="col" { "Change" } } }
                tbody { @for m in list.items.iter().filter(|m| m.project.is_none()) { tr {
                    td { (m.email.as_str()) } td { (m.role.as_str()) } td { @if m.reviewer || m.role == Role::Admin { "yes" } @else { "no" } }
                    td { @if m.claimed { "member" } @else { "invited" } }
                    td { (when(m.created_at)) " by " (m.created_by.as_str()) }
                    td {
                        form.inline method="post" action={(base) "/" (encode(m.email.as_str()))} {
                            (csrf(viewer))
                            (role_select("role", Some(m.role), "Role"))
                            label.check { input type="checkbox" name="reviewer" value="true" checked[m.reviewer]; "Reviewer" }
                            button.secondary type="submit" name="action" value="update" aria-label={"Save the role of " (m.email.as_str())} { "Save" }
                            button.danger type="submit" name="action" value="remove" aria-label={"Remove " (m.email.as_str())} { "Remove" }
                        }
                    }
                } } }
            },
        }
        h2 { "Add a member" }
        form.stack method="post" {
            (csrf(viewer))
            label { "E-mail" input name="email" type="email" required autocomplete="off"; }
            (role_select("role", Some(Role::Viewer), "Role"))
            label.check { input type="checkbox" name="reviewer" value="true"; "Reviewer (may approve; not for viewers)" }
            button type="submit" { "Add" }
        }
    };
    page(status, Some(viewer), Scope::tenant(t), &format!("Members of {t}"), body)
}

async fn add(State(console): State<Console>, Path(tenant): Path<String>, posted: Posted) -> Response {
    let t = match tenant_id(&tenant) {
        Ok(t) => t,
        Err(r) => return r.into_response(),
    };
    let body = serde_json::json!({
        "email": posted.get("email").unwrap_or_default(),
        "role": posted.get("role").unwrap_or("viewer"),
        "reviewer": posted.get("reviewer") == Some("true"),
    });
    let answer = Api::new(&console, &posted.viewer)
        .send::<serde_json::Value, _>(Method::POST, &format!("/v1/tenants/{t}/members"), &body)
        .await
        .map(|_| {
            format!(
                "{} was added; they will see the tenant at their next sign-in.",
                posted.get("email").unwrap_or_default()
            )
        });
    render(&console, &posted.viewer, &t, Some(answer)).await
}

async fn change(
    State(console): State<Console>,
    Path((tenant, email)): Path<(String, String)>,
    posted: Posted,
) -> Response {
    let t = match tenant_id(&tenant) {
        Ok(t) => t,
        Err(r) => return r.into_response(),
    };
    let Ok(email) = UserId::parse(&email) else {
        return crate::html::message(StatusCode::NOT_FOUND, "Not found", "There is no such member.", None);
    };
    let api = Api::new(&console, &posted.viewer);
    let path = format!("/v1/tenants/{t}/members/{}", encode(email.as_str()));
    let answer = if posted.get("action") == Some("remove") {
        api.delete(&path).await.map(|()| format!("{email} was removed from the tenant."))
    } else {
        let body = serde_json::json!({"role": posted.get("role"), "reviewer": posted.get("reviewer") == Some("true")});
        api.send::<serde_json::Value, _>(Method::PATCH, &path, &body)
            .await
            .map(|_| format!("{email}'s role was saved."))
    };
    render(&console, &posted.viewer, &t, Some(answer)).await
}
