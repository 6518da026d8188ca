//! The console's page frame, its stylesheet and script, and the small
//! pieces every page uses (a refusal explained, times, money, forms).
//!
//! Accessibility: one `main` landmark after a skip link, a labelled
//! navigation, every field with a `label`, tables with `th scope`, focus
//! always visible, and colours whose contrast passes WCAG AA.

use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use mapi_domain::{TenantId, Timestamp};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use crate::api::Refusal;
use crate::session::Viewer;

const CSS: &str = include_str!("../assets/console.css");
const JS: &str = include_str!("../assets/console.js");

pub async fn stylesheet() -> Response {
    asset("text/css; charset=utf-8", CSS)
}

pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", JS)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "public, max-age=300")], body)
        .into_response()
}

/// Where a page is: the tenant and project its navigation points into.
#[derive(Clone, Copy, Debug, Default)]
pub struct Scope<'a> {
    pub tenant: Option<&'a str>,
    pub project: Option<&'a str>,
}

impl<'a> Scope<'a> {
    pub fn project(tenant: &'a str, project: &'a str) -> Scope<'a> {
        Scope { tenant: Some(tenant), project: Some(project) }
    }

    pub fn tenant(tenant: &'a TenantId) -> Scope<'a> {
        Scope { tenant: Some(tenant.as_str()), project: None }
    }
}

/// A whole page: the frame around `body`, answered with `status`.
pub fn page(
    status: StatusCode,
    viewer: Option<&Viewer>,
    scope: Scope<'_>,
    title: &str,
    body: Markup,
) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · mapi" }
                link rel="stylesheet" href="/console/assets/console.css";
                script src="/console/assets/console.js" defer {}
            }
            body {
                a.skip href="#main" { "Skip to the content" }
                header.top {
                    a.brand href="/console" { "mapi" }
                    @if let Some(v) = viewer { (navigation(v, scope)) (account(v)) }
                }
                main #main tabindex="-1" {
                    h1 { (title) }
                    (body)
                }
            }
        }
    };
    let headers = [(header::CACHE_CONTROL, "no-store"), (header::X_FRAME_OPTIONS, "DENY")];
    let csp = (
        header::CONTENT_SECURITY_POLICY,
        "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
    );
    (status, headers, [csp], Html(markup.into_string())).into_response()
}

fn navigation(viewer: &Viewer, scope: Scope<'_>) -> Markup {
    html! {
        nav aria-label="Console" {
            ul {
                li { a href="/console?all=true" { "All projects" } }
                @if let (Some(t), Some(p)) = (scope.tenant, scope.project) {
                    @let base = format!("/console/t/{t}/p/{p}");
                    li { a href={(base) "/runs"} { "Runs" } }
                    li { a href={(base) "/runs/new"} { "New run" } }
                    li { a href={(base) "/datasets"} { "Datasets" } }
                    li { a href={(base) "/jobs"} { "Item jobs" } }
                    li { a href={(base) "/models"} { "Models" } }
                    li { a href={(base) "/experiments"} { "Experiments" } }
                    li { a href={(base) "/views"} { "Saved views" } }
                    li { a href={(base) "/workflows"} { "Workflows" } }
                    li { a href={(base) "/webhooks"} { "Webhooks" } }
                    li { a href={(base) "/usage"} { "Usage" } }
                    li { a href={(base) "/tokens"} { "Tokens" } }
                    li { a href={(base) "/members"} { "Project members" } }
                }
                @if let Some(t) = scope.tenant {
                    li { a href={"/console/t/" (t) "/members"} { "Tenant members" } }
                    li { a href={"/console/t/" (t) "/usage"} { "Tenant usage" } }
                    li { a href={"/console/t/" (t) "/audit"} { "Audit" } }
                    li { a href={"/console/t/" (t) "/lifecycle"} { "Export & deletion" } }
                }
                @if viewer.operator {
                    li { a href="/console/admin/tenants" { "Tenants" } }
                    li { a href="/console/admin/limits" { "Quotas & switches" } }
                    li { a href="/console/admin/executors" { "Executors" } }
                    li { a href="/console/admin/audit" { "Platform audit" } }
                }
            }
        }
    }
}

fn account(viewer: &Viewer) -> Markup {
    html! {
        div.account {
            span { (viewer.user.as_str()) @if viewer.operator { " (operator)" } }
            form method="post" action="/console/sign-out" {
                (csrf(viewer))
                button.link type="submit" { "Sign out" }
            }
        }
    }
}

/// The hidden CSRF field every form carries.
pub fn csrf(viewer: &Viewer) -> Markup {
    html! { input type="hidden" name="_csrf" value=(viewer.csrf); }
}

/// A link shown under a message.
#[derive(Clone, Debug)]
pub struct Notice {
    href: String,
    text: String,
}

impl Notice {
    pub fn link(href: &str, text: &str) -> Notice {
        Notice { href: href.to_owned(), text: text.to_owned() }
    }
}

/// A page that only says something (sign-in failures, signed out).
pub fn message(status: StatusCode, title: &str, detail: &str, link: Option<Notice>) -> Response {
    let body = html! {
        p { (detail) }
        @if let Some(l) = link { p { a href=(l.href) { (l.text) } } }
    };
    page(status, None, Scope::default(), title, body)
}

/// What the API refused, in words, with its status and code.
pub fn refusal_box(r: &Refusal) -> Markup {
    let headline = match r.status {
        StatusCode::FORBIDDEN => "You may not do this",
        StatusCode::NOT_FOUND => "Not found",
        StatusCode::UNAUTHORIZED => "Not signed in",
        StatusCode::TOO_MANY_REQUESTS => "Over a limit",
        s if s.is_server_error() => "The platform could not answer",
        _ => "Refused",
    };
    html! {
        div.problem role="alert" {
            p { strong { (headline) } " — " (r.detail) }
            p.meta { "The API answered " (r.status.as_u16()) " " code { (r.code) } "." }
        }
    }
}

/// A page for a refusal of the whole page: the API's own status.
pub fn refused(viewer: &Viewer, scope: Scope<'_>, title: &str, r: &Refusal) -> Response {
    page(r.status, Some(viewer), scope, title, refusal_box(r))
}

/// A flash of what an action did, above a page.
pub fn done(text: &str) -> Markup {
    html! { div.done role="status" { p { (text) } } }
}

/// An instant as UTC, to the second, in a `time` element.
pub fn when(t: Timestamp) -> Markup {
    let full = t.to_rfc3339();
    let short = full.get(..19).unwrap_or(&full).replace('T', " ");
    html! { time datetime=(full) { (short) " UTC" } }
}

/// Micros of money as `12.345678 USD`, trimmed to cents when exact.
pub fn money(micros: i64, currency: &str) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let m = micros.unsigned_abs();
    let (whole, frac) = (m / 1_000_000, m % 1_000_000);
    if frac % 10_000 == 0 {
        format!("{sign}{whole}.{:02} {currency}", frac / 10_000)
    } else {
        format!("{sign}{whole}.{frac:06} {currency}")
    }
}

/// A run or job state as a badge (text first: colour is never the only sign).
pub fn state_badge(state: &str) -> Markup {
    html! { span class={"badge s-" (state)} { (state) } }
}

/// `PreEscaped` for an SVG drawn by [`crate::chart`], which escapes its own text.
pub fn svg(s: String) -> Markup {
    PreEscaped(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_reads_as_currency() {
        assert_eq!(money(1_230_000, "USD"), "1.23 USD");
        assert_eq!(money(1_234_567, "USD"), "1.234567 USD");
        assert_eq!(money(-50_000, "USD"), "-0.05 USD");
        assert_eq!(money(0, "USD"), "0.00 USD");
    }
}
