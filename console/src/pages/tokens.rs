//! API tokens of a project: the list, a new token (its secret shown once),
//! and revoking one.

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use mapi_access::Scope as TokenScope;
use mapi_domain::{ProjectId, TenantId, Timestamp};
use maud::{Markup, html};
use reqwest::Method;
use serde::Deserialize;

use super::{IdPath, ProjectPath};
use crate::Console;
use crate::api::{Api, Refusal};
use crate::html::{Scope, csrf, done, page, refusal_box, when};
use crate::session::{Posted, Viewer};

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/console/t/{tenant}/p/{project}/tokens", get(list).post(create))
        .route("/console/t/{tenant}/p/{project}/tokens/{id}/revoke", post(revoke))
}

#[derive(Debug, Deserialize)]
struct Token {
    id: String,
    name: String,
    user: String,
    scopes: Vec<String>,
    created_at: Timestamp,
    expires_at: Timestamp,
    revoked_at: Option<Timestamp>,
    #[serde(default)]
    budget: Option<Budget>,
}

/// A token's vCPU budget.
#[derive(Debug, Deserialize)]
struct Budget {
    vcpu_seconds: u64,
    period: String,
}

#[derive(Debug, Deserialize)]
struct TokenList {
    tokens: Vec<Token>,
}

#[derive(Debug, Deserialize)]
struct Created {
    secret: String,
    token: Token,
}

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    all: Option<bool>,
}

async fn list(
    State(console): State<Console>,
    viewer: Viewer,
    ProjectPath { tenant: t, project: p }: ProjectPath,
    Query(q): Query<ListQuery>,
) -> Response {
    render(&console, &viewer, (&t, &p), q.all.unwrap_or(false), None).await
}

async fn render(
    console: &Console,
    viewer: &Viewer,
    (t, p): (&TenantId, &ProjectId),
    all: bool,
    flash: Option<Markup>,
) -> Response {
    let path = format!("/v1/tenants/{t}/projects/{p}/tokens{}", if all { "?all=true" } else { "" });
    let api = Api::new(console, viewer);
    let answer: Result<TokenList, Refusal> = api.get(&path).await;
    let role = super::role_in(&api, t, p).await;
    let status = answer.as_ref().err().map_or(StatusCode::OK, |r| r.status);
    let base = format!("/console/t/{t}/p/{p}/tokens");
    let body = html! {
        @if let Some(f) = flash { (f) }
        p { @if all { a href=(base) { "Only your tokens" } } @else { a href={(base) "?all=true"} { "Everyone's tokens (project admins)" } } }
        @match &answer {
            Err(r) => (refusal_box(r)),
            Ok(list) if list.tokens.is_empty() => p { "No token yet." },
            Ok(list) => table {
                thead { tr { th scope="col" { "Name" } th scope="col" { "Id" } th scope="col" { "Owner" } th scope="col" { "Scopes" } th scope="col" { "Budget" } th scope="col" { "Created" } th scope="col" { "Expires" } th scope="col" { "Status" } } }
                tbody { @for tk in &list.tokens { tr {
                    td { (tk.name) } td { code { (tk.id) } } td { (tk.user) } td { (tk.scopes.join(", ")) }
                    td { @match &tk.budget { Some(b) => { (b.vcpu_seconds) " vCPU-s a " (b.period) }, None => "none" } }
                    td { (when(tk.created_at)) } td { (when(tk.expires_at)) }
                    td {
                        @match tk.revoked_at {
                            Some(at) => { "revoked " (when(at)) },
                            None => form method="post" action={(base) "/" (tk.id) "/revoke"} {
                                (csrf(viewer))
                                button.danger type="submit" aria-label={"Revoke token " (tk.name)} { "Revoke" }
                            },
                        }
                    }
                } } }
            },
        }
        h2 { "New token" }
        p.meta {
            "A token acts as you in this project, never beyond your own role (here: "
            strong { (role.as_deref().unwrap_or("none")) } "), and only within its scopes."
        }
        form.stack method="post" {
            (csrf(viewer))
            label { "Name" input name="name" required maxlength="200" placeholder="ci-pipeline"; }
            fieldset {
                legend { "Scopes" }
                label.check { input type="checkbox" name="scope" value="admin"; "admin (everything your role allows)" }
                @for s in mapi_access::SCOPE_COLUMNS { label.check { input type="checkbox" name="scope" value=(s.as_str()); (s.as_str()) } }
            }
            label { "Endpoint aliases it may score (comma-separated; each becomes score:<alias>)" input name="aliases" placeholder="churn, fraud"; }
            label { "Expires in (days, 1 to 365)" input name="expires_in_days" type="number" min="1" max="365" value="90"; }
            label { "Requests a minute (empty: no limit)" input name="rate_limit_per_minute" type="number" min="1"; }
            fieldset {
                legend { "vCPU budget (empty: none beyond the project's quotas)" }
                label { "vCPU-seconds" input name="budget_vcpu_seconds" type="number" min="1" placeholder="36000"; }
                label { "Per"
                    select name="budget_period" { option value="" { "choose" } option value="day" { "day" } option value="month" { "month" } }
                }
                p.meta { "What the token's runs may use in a period; a submit past it is refused (429)." }
            }
            button type="submit" { "Create the token" }
        }
    };
    page(status, Some(viewer), Scope::project(t.as_str(), p.as_str()), "API tokens", body)
}

/// The body of a new token from the form, or what to fix.
fn new_token(posted: &Posted) -> Result<serde_json::Value, String> {
    let mut scopes: Vec<String> = posted.all("scope").into_iter().map(str::to_owned).collect();
    for alias in posted.get("aliases").unwrap_or_default().split(',').map(str::trim).filter(|a| !a.is_empty())
    {
        scopes.push(TokenScope::ScoreAlias(alias.to_owned()).as_str().to_owned());
    }
    let number = |k: &str| -> Result<Option<u32>, String> {
        posted
            .get(k)
            .map(|v| v.parse::<u32>().map_err(|_| format!("{} must be a whole number", k.replace('_', " "))))
            .transpose()
    };
    Ok(serde_json::json!({
        "name": posted.get("name").unwrap_or_default(),
        "scopes": scopes,
        "expires_in_days": number("expires_in_days")?,
        "rate_limit_per_minute": number("rate_limit_per_minute")?,
        "budget_vcpu_seconds": number("budget_vcpu_seconds")?,
        "budget_period": posted.get("budget_period"),
    }))
}

async fn create(
    State(console): State<Console>,
    ProjectPath { tenant: t, project: p }: ProjectPath,
    posted: Posted,
) -> Response {
    let viewer = &posted.viewer;
    let answer = match new_token(&posted) {
        Err(detail) => Err(Refusal::invalid(detail)),
        Ok(body) => {
            Api::new(&console, viewer)
                .send::<Created, _>(Method::POST, &format!("/v1/tenants/{t}/projects/{p}/tokens"), &body)
                .await
        }
    };
    let flash = match &answer {
        Ok(c) => html! {
            div.done role="status" {
                p { "Token " strong { (c.token.name) } " created. Copy its secret now: it is shown this once and cannot be shown again." }
                p { label { "Secret" input.secret readonly value=(c.secret) aria-describedby="secret-note"; } }
                p #secret-note .meta { "Send it as " code { "Authorization: Bearer <secret>" } "." }
            }
        },
        Err(r) => refusal_box(r),
    };
    super::with_status(render(&console, viewer, (&t, &p), false, Some(flash)).await, answer.as_ref().err())
}

async fn revoke(
    State(console): State<Console>,
    ProjectPath { tenant: t, project: p }: ProjectPath,
    IdPath(id): IdPath,
    posted: Posted,
) -> Response {
    let viewer = &posted.viewer;
    let answer =
        Api::new(&console, viewer).delete(&format!("/v1/tenants/{t}/projects/{p}/tokens/{id}")).await;
    let flash = match &answer {
        Ok(()) => done(&format!("Token {id} is revoked: it no longer works anywhere.")),
        Err(r) => refusal_box(r),
    };
    super::with_status(render(&console, viewer, (&t, &p), false, Some(flash)).await, answer.as_ref().err())
}
