//! Usage of a project or a tenant: the month's daily spend as a chart,
//! how near each quota is (warnings at 70 % and 90 %), and totals per
//! token and per resource class.

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use mapi_domain::Timestamp;
use maud::{Markup, html};
use serde::Deserialize;

use super::{ProjectPath, TenantPath};
use crate::Console;
use crate::api::{Api, Refusal, query};
use crate::chart::{Bar, bars};
use crate::html::{Scope, money, page, refusal_box, svg, when};
use crate::session::Viewer;

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/console/t/{tenant}/p/{project}/usage", get(project_usage))
        .route("/console/t/{tenant}/usage", get(tenant_usage))
}

#[derive(Debug, Deserialize)]
struct Totals {
    cost_micros: i64,
    vcpu_ms: u64,
    runs: u64,
    attempts: u64,
    #[serde(default)]
    items: u64,
    #[serde(default)]
    scores: u64,
}

#[derive(Debug, Deserialize)]
struct Group {
    key: String,
    totals: Totals,
}

#[derive(Debug, Deserialize)]
struct Nearness {
    limit: String,
    value: u64,
    used: u64,
    fraction: f64,
    warning: Option<u8>,
}

#[derive(Debug, Deserialize)]
struct Report {
    start: Timestamp,
    end: Timestamp,
    currency: String,
    totals: Totals,
    groups: Vec<Group>,
    quotas: Vec<Nearness>,
    note: String,
}

#[derive(Debug, Deserialize)]
pub struct PeriodQuery {
    /// An instant inside the month to show (RFC 3339); this month when absent.
    at: Option<String>,
}

async fn project_usage(
    State(console): State<Console>,
    viewer: Viewer,
    ProjectPath { tenant: t, project: p }: ProjectPath,
    Query(q): Query<PeriodQuery>,
) -> Response {
    let base = format!("/v1/tenants/{t}/projects/{p}/usage");
    let title = format!("Usage of project {p}");
    render(&console, &viewer, Scope::project(t.as_str(), p.as_str()), &base, q.at.as_deref(), &title).await
}

async fn tenant_usage(
    State(console): State<Console>,
    viewer: Viewer,
    TenantPath(t): TenantPath,
    Query(q): Query<PeriodQuery>,
) -> Response {
    let base = format!("/v1/tenants/{t}/usage");
    let title = format!("Usage of tenant {t}");
    render(&console, &viewer, Scope::tenant(&t), &base, q.at.as_deref(), &title).await
}

async fn render(
    console: &Console,
    viewer: &Viewer,
    scope: Scope<'_>,
    base: &str,
    at: Option<&str>,
    title: &str,
) -> Response {
    let api = Api::new(console, viewer);
    let ask = |group: &'static str| {
        let path =
            format!("{base}{}", query(&[("period", Some("month")), ("group_by", Some(group)), ("at", at)]));
        let api = api.clone();
        async move { api.get::<Report>(&path).await }
    };
    let (daily, tokens, classes) = tokio::join!(ask("day"), ask("token"), ask("resource_class"));
    let report = match daily {
        Ok(r) => r,
        Err(r) => return crate::html::refused(viewer, scope, title, &r),
    };
    let body = html! {
        p.meta { "From " (when(report.start)) " to " (when(report.end)) ". " (report.note) }
        (chart(&report))
        h2 { "Quotas" }
        (quotas(&report.quotas))
        h2 { "This month" }
        (totals_table("Total", std::slice::from_ref(&Group { key: "all".into(), totals: report.totals }), &report.currency))
        h2 { "Per token" }
        (grouped(&tokens, "Token", &report.currency))
        h2 { "Per resource class" }
        (grouped(&classes, "Class", &report.currency))
    };
    page(StatusCode::OK, Some(viewer), scope, title, body)
}

fn chart(report: &Report) -> Markup {
    let mut days: Vec<&Group> = report.groups.iter().collect();
    days.sort_by(|a, b| a.key.cmp(&b.key));
    // Every day of the period has its bar, so a bar's place is its date.
    let spent: std::collections::BTreeMap<&str, i64> =
        days.iter().map(|g| (g.key.as_str(), g.totals.cost_micros)).collect();
    let mut points = Vec::new();
    let mut day = report.start;
    while day < report.end && points.len() < 31 {
        let date = day.to_rfc3339();
        let key = date.get(..10).unwrap_or(&date);
        let value = spent.get(key).copied().unwrap_or(0);
        let label = key.get(8..10).unwrap_or(key).to_owned();
        points.push(Bar { label, value, says: money(value, &report.currency) });
        day = day + std::time::Duration::from_secs(86_400);
    }
    let total = money(report.totals.cost_micros, &report.currency);
    let described = format!("Spend on each day with usage this month; {total} in all.");
    html! {
        figure {
            @if days.is_empty() { p { "Nothing metered this month yet." } }
            @else { (svg(bars("Daily spend", &described, &points, |v| mapi_api::words::number(v as f64 / 1e6)))) }
            figcaption { "Daily spend (" (report.currency) "), " (total) " this month." }
        }
        @if !days.is_empty() {
            details {
                summary { "The chart's numbers" }
                table {
                    thead { tr { th scope="col" { "Day" } th.num scope="col" { "Spend" } th.num scope="col" { "Runs" } th.num scope="col" { "Items" } } }
                    tbody { @for g in &days { tr { td { (g.key) } td.num { (money(g.totals.cost_micros, &report.currency)) } td.num { (g.totals.runs) } td.num { (g.totals.items) } } } }
                }
            }
        }
    }
}

fn quotas(quotas: &[Nearness]) -> Markup {
    html! {
        @if quotas.is_empty() { p { "No quota limits this scope." } } @else {
            table {
                thead { tr { th scope="col" { "Quota" } th scope="col" { "Used" } th.num scope="col" { "Of" } th scope="col" { "Warning" } } }
                tbody { @for q in quotas {
                    @let percent = (q.fraction * 100.0).clamp(0.0, 100.0);
                    @let max = q.value.max(1) as f64;
                    tr {
                        td { (q.limit) }
                        td {
                            meter min="0" max=(max) low=(max * 0.7) high=(max * 0.9) optimum="0" value=(q.used as f64) aria-label={(q.limit) " used"} { (format!("{percent:.0}")) " %" }
                            " " span.meta { (q.used) " (" (format!("{percent:.0}")) " %)" }
                        }
                        td.num { (q.value) }
                        td { @match q.warning { Some(w) => strong { "Past " (w) " %" }, None => "" } }
                    }
                } }
            }
        }
    }
}

fn grouped(answer: &Result<Report, Refusal>, what: &str, currency: &str) -> Markup {
    match answer {
        Err(r) => refusal_box(r),
        Ok(r) if r.groups.is_empty() => html! { p { "Nothing metered this month yet." } },
        Ok(r) => totals_table(what, &r.groups, currency),
    }
}

fn totals_table(what: &str, groups: &[Group], currency: &str) -> Markup {
    html! {
        table {
            thead { tr {
                th scope="col" { (what) } th.num scope="col" { "Spend" } th.num scope="col" { "vCPU-s" } th.num scope="col" { "Runs" }
                th.num scope="col" { "Attempts" } th.num scope="col" { "Items" } th.num scope="col" { "Scores" }
            } }
            tbody { @for g in groups { tr {
                td { code { (g.key) } } td.num { (money(g.totals.cost_micros, currency)) } td.num { (g.totals.vcpu_ms / 1000) }
                td.num { (g.totals.runs) } td.num { (g.totals.attempts) } td.num { (g.totals.items) } td.num { (g.totals.scores) }
            } } }
        }
    }
}
