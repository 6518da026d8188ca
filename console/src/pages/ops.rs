//! Operators' pages: tenants (create, edit, suspend or delete with a reason
//! and the tenant's id typed), quotas and kill switches, executors with
//! their evidence and the gate's reason, and the audit logs (the
//! platform's, and a tenant's for its admins).

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use mapi_api::audit::AuditPage;
use mapi_domain::{Residency, TenantStatus, Tier};
use mapi_schema::TenantDoc;
use maud::{Markup, html};
use reqwest::Method;
use serde::Deserialize;
use serde_json::Value;

use super::{TenantPath, tenant_id};
use crate::Console;
use crate::api::{Api, Refusal, query};
use crate::html::{Scope, csrf, done, page, refusal_box, state_badge, when};
use crate::session::{Posted, Viewer};

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/console/admin/tenants", get(tenants).post(create_tenant))
        .route("/console/admin/tenants/{tenant}", post(manage_tenant))
        .route("/console/admin/limits", get(limits).post(set_limits))
        .route("/console/admin/executors", get(executors).post(set_executor))
        .route("/console/admin/audit", get(platform_audit))
        .route("/console/t/{tenant}/audit", get(tenant_audit))
}

type Flash = Option<Result<String, Refusal>>;

fn flash_box(flash: &Flash) -> Markup {
    match flash {
        Some(Ok(text)) => done(text),
        Some(Err(r)) => refusal_box(r),
        None => html! {},
    }
}

fn status_of<T>(flash: &Flash, answer: &Result<T, Refusal>) -> StatusCode {
    match (flash, answer) {
        (Some(Err(r)), _) | (_, Err(r)) => r.status,
        _ => StatusCode::OK,
    }
}

#[derive(Debug, Deserialize)]
struct TenantPage {
    tenants: Vec<TenantDoc>,
}

async fn tenants(State(console): State<Console>, viewer: Viewer) -> Response {
    render_tenants(&console, &viewer, None).await
}

fn choices<'a>(name: &str, label: &str, all: impl Iterator<Item = &'a str>, current: &str) -> Markup {
    html! { label { (label) select name=(name) { @for v in all { option value=(v) selected[v == current] { (v) } } } } }
}

const RESIDENCIES: [&str; 3] = ["eu", "us", "asia"];

async fn render_tenants(console: &Console, viewer: &Viewer, flash: Flash) -> Response {
    let answer: Result<TenantPage, Refusal> =
        Api::new(console, viewer).get("/v1/admin/tenants?page_size=200").await;
    let tiers = || Tier::ALL.iter().map(|t| t.as_str());
    let body = html! {
        (flash_box(&flash))
        @match &answer {
            Err(r) => (refusal_box(r)),
            Ok(list) => table {
                thead { tr { th scope="col" { "Tenant" } th scope="col" { "Name" } th scope="col" { "Tier" } th scope="col" { "Status" } th scope="col" { "Residency" } th scope="col" { "Edit" } } }
                tbody { @for t in &list.tenants { tr {
                    td { a href={"/console/t/" (t.id) "/members"} { code { (t.id) } } }
                    td { (t.name) }
                    td { (t.tier.as_str()) }
                    td { (state_badge(t.status.as_str())) @if let Some(r) = &t.status_reason { br; span.meta { (r) } } }
                    td { (t.residency.to_string()) }
                    td {
                        details {
                            summary { "Edit " (t.id) }
                            form.stack method="post" action={"/console/admin/tenants/" (t.id)} {
                                (csrf(viewer))
                                label { "Name" input name="name" value=(t.name) maxlength="200"; }
                                (choices("tier", "Tier", tiers(), t.tier.as_str()))
                                (choices("residency", "Residency", RESIDENCIES.into_iter(), &t.residency.to_string()))
                                (choices("status", "Status", TenantStatus::ALL.iter().map(|s| s.as_str()), t.status.as_str()))
                                label { "Reason (required to suspend or delete)" input name="reason" maxlength="500"; }
                                label { "Type the tenant's id to suspend or delete it" input name="confirm" autocomplete="off"; }
                                button type="submit" { "Save " (t.id) }
                            }
                        }
                    }
                } } }
            },
        }
        h2 { "New tenant" }
        form.stack method="post" {
            (csrf(viewer))
            label { "Id (a lowercase slug; it never changes)" input name="id" required pattern="[a-z][a-z0-9-]{1,39}"; }
            label { "Name" input name="name" required maxlength="200"; }
            (choices("tier", "Tier", tiers(), "public"))
            (choices("residency", "Residency", RESIDENCIES.into_iter(), "eu"))
            label { "Admin's e-mail (invited tenant-wide)" input name="admin_email" type="email"; }
            button type="submit" { "Create the tenant" }
        }
    };
    page(status_of(&flash, &answer), Some(viewer), Scope::default(), "Tenants", body)
}

async fn create_tenant(State(console): State<Console>, posted: Posted) -> Response {
    let body = serde_json::json!({
        "id": posted.get("id").unwrap_or_default(),
        "name": posted.get("name").unwrap_or_default(),
        "tier": posted.get("tier").unwrap_or("public"),
        "residency": posted.get("residency").unwrap_or("eu"),
        "admin_email": posted.get("admin_email"),
    });
    let answer = Api::new(&console, &posted.viewer)
        .send::<TenantDoc, _>(Method::POST, "/v1/admin/tenants", &body)
        .await
        .map(|t| format!("Tenant {} was created.", t.id));
    render_tenants(&console, &posted.viewer, Some(answer)).await
}

/// Suspending or deleting a tenant needs a reason and its id typed again:
/// the API requires the reason, the console the typing.
async fn manage_tenant(
    State(console): State<Console>,
    TenantPath(t): TenantPath,
    posted: Posted,
) -> Response {
    let status = posted.get("status").unwrap_or("active");
    let drastic = status == TenantStatus::Suspended.as_str() || status == TenantStatus::Deleting.as_str();
    let answer = if drastic && posted.get("confirm") != Some(t.as_str()) {
        Err(Refusal::invalid(format!("to make {t} {status}, type its id ({t}) in the confirmation field")))
    } else {
        let residency = posted.get("residency").map(Residency::parse).and_then(Result::ok);
        let body = serde_json::json!({
            "name": posted.get("name"),
            "tier": posted.get("tier"),
            "residency": residency,
            "status": status,
            "reason": posted.get("reason"),
        });
        Api::new(&console, &posted.viewer)
            .send::<TenantDoc, _>(Method::PATCH, &format!("/v1/admin/tenants/{t}"), &body)
            .await
            .map(|d| format!("Tenant {} saved: {}, {}.", d.id, d.tier.as_str(), d.status.as_str()))
    };
    render_tenants(&console, &posted.viewer, Some(answer)).await
}

/// Any JSON as nested facts, for records whose fields are many and plain.
fn facts(value: &Value) -> Markup {
    match value {
        Value::Object(map) => html! {
            dl.facts { @for (k, v) in map { dt { (k.replace('_', " ")) } dd { (facts(v)) } } }
        },
        Value::Array(items) if items.iter().all(|v| !v.is_object()) => {
            html! { (items.iter().map(scalar).collect::<Vec<_>>().join(", ")) }
        }
        Value::Array(items) => html! { ol { @for v in items { li { (facts(v)) } } } },
        other => html! { (scalar(other)) },
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "—".into(),
        other => other.to_string(),
    }
}

async fn limits(State(console): State<Console>, viewer: Viewer) -> Response {
    render_limits(&console, &viewer, None).await
}

async fn render_limits(console: &Console, viewer: &Viewer, flash: Flash) -> Response {
    let api = Api::new(console, viewer);
    let (quotas, switches) =
        tokio::join!(api.get::<Value>("/v1/admin/quotas"), api.get::<Value>("/v1/admin/kill-switches"));
    let on = switches
        .as_ref()
        .ok()
        .and_then(|s| s["switches"]["untrusted_execution_enabled"].as_bool())
        .unwrap_or(true);
    let body = html! {
        (flash_box(&flash))
        h2 { "Kill switches" }
        @match &switches { Err(r) => (refusal_box(r)), Ok(s) => (facts(s)) }
        form.stack method="post" {
            (csrf(viewer))
            input type="hidden" name="form" value="switches";
            label.check { input type="checkbox" name="untrusted_execution_enabled" value="true" checked[on]; "Untrusted (uploaded) code may run" }
            label { "Spend cap (micros; 0 removes it; empty keeps it)" input name="spend_cap_micros" type="number" min="0"; }
            label { "Spend cap period" select name="spend_cap_period" { option value="" { "unchanged" } option value="day" { "day" } option value="month" { "month" } } }
            label { "Reason (required)" input name="reason" required maxlength="500"; }
            button.danger type="submit" { "Set the switches" }
        }
        h2 { "Quotas" }
        @match &quotas {
            Err(r) => (refusal_box(r)),
            Ok(q) => {
                h3 { "Platform" } (facts(&q["platform"]))
                @for t in q["tenants"].as_array().into_iter().flatten() {
                    details { summary { "Tenant " (scalar(&t["tenant"])) " (" (scalar(&t["tier"])) ")" } (facts(t)) }
                }
            }
        }
        h3 { "Set a tenant's quota policy" }
        form.stack method="post" {
            (csrf(viewer))
            input type="hidden" name="form" value="quota";
            label { "Tenant" input name="tenant" required; }
            label { "Policy (a JSON object of the limits that replace the tier's)" textarea name="policy" required spellcheck="false" { r#"{"concurrent_runs": 5}"# } }
            button type="submit" { "Set the policy" }
        }
    };
    page(status_of(&flash, &quotas), Some(viewer), Scope::default(), "Quotas and kill switches", body)
}

async fn set_limits(State(console): State<Console>, posted: Posted) -> Response {
    let api = Api::new(&console, &posted.viewer);
    let answer = if posted.get("form") == Some("quota") {
        let tenant = posted.get("tenant").map(tenant_id).and_then(Result::ok);
        let policy: Option<Value> = posted.get("policy").and_then(|p| serde_json::from_str(p).ok());
        match (tenant, policy) {
            (Some(t), Some(policy)) => api
                .send::<Value, _>(Method::PUT, &format!("/v1/admin/quotas/{t}"), &policy)
                .await
                .map(|_| format!("The quota policy of {t} was set.")),
            _ => Err(Refusal::invalid("name an existing tenant and give the policy as a JSON object")),
        }
    } else {
        let cap = posted.get("spend_cap_micros").map(str::parse::<i64>).transpose();
        match cap {
            Err(_) => Err(Refusal::invalid("the spend cap must be a whole number of micros")),
            Ok(cap) => {
                let body = serde_json::json!({
                    "untrusted_execution_enabled": posted.get("untrusted_execution_enabled") == Some("true"),
                    "spend_cap_micros": cap,
                    "spend_cap_period": posted.get("spend_cap_period"),
                    "reason": posted.get("reason").unwrap_or_default(),
                });
                api.send::<Value, _>(Method::PUT, "/v1/admin/kill-switches", &body)
                    .await
                    .map(|_| "The kill switches were set.".to_owned())
            }
        }
    };
    render_limits(&console, &posted.viewer, Some(answer)).await
}

async fn executors(State(console): State<Console>, viewer: Viewer) -> Response {
    render_executors(&console, &viewer, None).await
}

async fn render_executors(console: &Console, viewer: &Viewer, flash: Flash) -> Response {
    let answer: Result<Vec<Value>, Refusal> = Api::new(console, viewer).get("/v1/admin/executors").await;
    let body = html! {
        (flash_box(&flash))
        @match &answer {
            Err(r) => (refusal_box(r)),
            Ok(list) => @for e in list {
                section aria-label={"Executor " (scalar(&e["name"]))} {
                    h2 { (scalar(&e["name"])) " " (state_badge(&scalar(&e["status"]))) }
                    (facts(e))
                    form.inline method="post" {
                        (csrf(viewer))
                        input type="hidden" name="name" value=(scalar(&e["name"]));
                        label { "Reason (required)" input name="reason" required maxlength="500"; }
                        @if e["enabled"].as_bool() == Some(true) {
                            button.danger type="submit" name="enabled" value="false" { "Disable: runs wait in the queue" }
                        } @else {
                            button type="submit" name="enabled" value="true" { "Enable" }
                        }
                    }
                }
            },
        }
    };
    page(status_of(&flash, &answer), Some(viewer), Scope::default(), "Executors", body)
}

async fn set_executor(State(console): State<Console>, posted: Posted) -> Response {
    let name = posted.get("name").unwrap_or_default();
    let answer = if super::plain_id(name).is_err() {
        Err(Refusal {
            status: StatusCode::NOT_FOUND,
            code: "NOT_FOUND".into(),
            detail: "no such executor".into(),
        })
    } else {
        let enabled = posted.get("enabled") == Some("true");
        let body =
            serde_json::json!({"enabled": enabled, "reason": posted.get("reason").unwrap_or_default()});
        Api::new(&console, &posted.viewer)
            .send::<Value, _>(Method::PUT, &format!("/v1/admin/executors/{name}"), &body)
            .await
            .map(|_| format!("Executor {name} is {}.", if enabled { "enabled" } else { "disabled" }))
    };
    render_executors(&console, &posted.viewer, Some(answer)).await
}

/// The audit log's filters, as the form sends them.
#[derive(Debug, Default, Deserialize)]
pub struct AuditFilters {
    tenant: Option<String>,
    project: Option<String>,
    actor: Option<String>,
    action: Option<String>,
    outcome: Option<String>,
    /// A day (`2026-12-01`) or an instant: entries at or after it.
    since: Option<String>,
    page_token: Option<String>,
}

async fn platform_audit(
    State(console): State<Console>,
    viewer: Viewer,
    Query(f): Query<AuditFilters>,
) -> Response {
    render_audit(&console, &viewer, "/v1/admin/audit", Scope::default(), &f, true).await
}

async fn tenant_audit(
    State(console): State<Console>,
    viewer: Viewer,
    TenantPath(t): TenantPath,
    Query(f): Query<AuditFilters>,
) -> Response {
    render_audit(&console, &viewer, &format!("/v1/tenants/{t}/audit"), Scope::tenant(&t), &f, false).await
}

async fn render_audit(
    console: &Console,
    viewer: &Viewer,
    base: &str,
    scope: Scope<'_>,
    f: &AuditFilters,
    platform: bool,
) -> Response {
    // A day as the date input sends it is its first instant, UTC.
    let since = f
        .since
        .as_deref()
        .filter(|s| !s.is_empty())
        .map(|s| if s.len() == 10 { format!("{s}T00:00:00Z") } else { s.to_owned() });
    let pairs = |token: Option<&str>| {
        query(&[
            ("tenant", if platform { f.tenant.as_deref() } else { None }),
            ("project", f.project.as_deref()),
            ("actor", f.actor.as_deref()),
            ("action", f.action.as_deref()),
            ("outcome", f.outcome.as_deref()),
            ("since", since.as_deref()),
            ("page_token", token),
        ])
    };
    let answer: Result<AuditPage, Refusal> =
        Api::new(console, viewer).get(&format!("{base}{}", pairs(f.page_token.as_deref()))).await;
    let body = html! {
        form.filters method="get" role="search" aria-label="Filter the audit log" {
            @if platform { label { "Tenant" input name="tenant" value=[f.tenant.as_deref()]; } }
            label { "Project" input name="project" value=[f.project.as_deref()]; }
            label { "Actor" input name="actor" type="email" value=[f.actor.as_deref()]; }
            label { "Action" input name="action" value=[f.action.as_deref()] placeholder="tenant.update"; }
            label { "Outcome" select name="outcome" {
                option value="" { "any" }
                @for o in ["success", "denied", "failed"] { option value=(o) selected[f.outcome.as_deref() == Some(o)] { (o) } }
            } }
            label { "Since (UTC day)" input name="since" type="date" value=[f.since.as_deref()]; }
            button type="submit" { "Filter" }
        }
        @match &answer {
            Err(r) => (refusal_box(r)),
            Ok(list) if list.items.is_empty() => p { "No entry matches." },
            Ok(list) => {
                div.scroll { table.audit {
                    thead { tr { th scope="col" { "When" } th scope="col" { "Actor" } th scope="col" { "Action" } th scope="col" { "Resource" } th scope="col" { "Tenant" } th scope="col" { "Outcome" } th scope="col" { "Detail" } } }
                    tbody { @for e in &list.items { tr {
                        td { (when(e.ts)) }
                        td { @match &e.actor { Some(a) => (a.as_str()), None => (e.actor_kind) } @if e.operator { " (operator)" } }
                        td { code { (e.action) } } td { (e.resource_kind) ":" (e.resource_id) }
                        td { @if let Some(t) = &e.tenant { (t) } }
                        td { (e.outcome.as_str()) @if let Some(p) = &e.problem { " " code { (p) } } }
                        td { @if let Some(d) = &e.detail { (d) } }
                    } } }
                } }
                @if let Some(next) = &list.next_page_token { div.pager { a href=(pairs(Some(next))) rel="next" { "Next page" } } }
            }
        }
    };
    let title = if platform { "Platform audit log" } else { "Audit log" };
    page(answer.as_ref().err().map_or(StatusCode::OK, |r| r.status), Some(viewer), scope, title, body)
}
