//! Runs side by side: what each asked (the spec, its params), what each
//! measured (its metrics) and what it cost, a column per run with the rows
//! whose values differ marked (the same rows as `mapi runs compare`), and
//! one chart per logged metric with every run's series overlaid.

use std::collections::BTreeSet;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use mapi_api::compare::compare;
use mapi_api::tracking::RunLog;
use mapi_api::views::RunView;
use maud::{Markup, html};

use super::{ProjectPath, plain_id};
use crate::Console;
use crate::api::{Api, Refusal};
use crate::chart::{Line, lines};
use crate::html::{Scope, page, refusal_box, svg};
use crate::session::Viewer;

pub fn routes() -> Router<Console> {
    Router::new().route("/console/t/{tenant}/p/{project}/runs/compare", get(compare_page))
}

/// The most runs one comparison shows.
const MAX_RUNS: usize = 10;

/// The `run` values of a query string (`?run=a&run=b`), each a plain id, each once.
fn picked(raw: Option<&str>) -> Vec<String> {
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(raw.unwrap_or_default()).unwrap_or_default();
    let mut ids: Vec<String> = Vec::new();
    for (k, v) in pairs {
        if k == "run" && plain_id(&v).is_ok() && !ids.contains(&v) {
            ids.push(v);
        }
    }
    ids
}

async fn compare_page(
    State(console): State<Console>,
    viewer: Viewer,
    ProjectPath { tenant: t, project: p }: ProjectPath,
    RawQuery(raw): RawQuery,
) -> Response {
    let scope = Scope::project(t.as_str(), p.as_str());
    let ids = picked(raw.as_deref());
    let back = format!("/console/t/{t}/p/{p}/runs");
    if !(2..=MAX_RUNS).contains(&ids.len()) {
        let r = Refusal::invalid(format!(
            "pick 2 to {MAX_RUNS} runs to compare (you picked {}): tick them in the runs table",
            ids.len()
        ));
        let body = html! { (refusal_box(&r)) p { a href=(back) { "Back to the runs" } } };
        return page(r.status, Some(&viewer), scope, "Compare runs", body);
    }
    let api = Api::new(&console, &viewer);
    let mut runs = Vec::new();
    let mut logs = Vec::new();
    for id in &ids {
        match api.get::<RunView>(&format!("/v1/runs/{id}")).await {
            Ok(run) => runs.push(run),
            Err(r) => return crate::html::refused(&viewer, scope, "Compare runs", &r),
        }
        logs.push(api.get::<RunLog>(&format!("/v1/runs/{id}/log")).await.unwrap_or_default());
    }
    let body = html! {
        p { a href=(back) { "Back to the runs" } }
        (table(&runs))
        (charts(&runs, &logs))
    };
    page(StatusCode::OK, Some(&viewer), scope, "Compare runs", body)
}

/// What a run is called in a comparison: its name, else its id.
fn label(run: &RunView) -> String {
    run.labels.name.clone().unwrap_or_else(|| run.id.to_string())
}

fn table(runs: &[RunView]) -> Markup {
    let c = compare(runs);
    let differing = c.rows.iter().filter(|r| r.differs).count();
    html! {
        div.scroll {
            table.compare {
                caption { (c.rows.len()) " fields; " (differing) " differ (marked ≠)." }
                thead { tr {
                    th scope="col" { "Field" }
                    @for r in runs { th scope="col" { a href={"/console/runs/" (r.id)} { (label(r)) } } }
                } }
                tbody {
                    @for row in &c.rows {
                        tr class=[row.differs.then_some("differs")] {
                            th scope="row" { @if row.differs { span title="differs" { "≠ " } } code { (row.field) } }
                            @for v in &row.values { td { (v.as_deref().unwrap_or("—")) } }
                        }
                    }
                }
            }
        }
    }
}

/// One chart per metric any run logged, every run's series on it.
fn charts(runs: &[RunView], logs: &[RunLog]) -> Markup {
    let names: BTreeSet<&String> = logs.iter().flat_map(|l| l.series.keys()).collect();
    html! {
        h2 { "Metrics over steps" }
        @if names.is_empty() { p { "None of these runs logged a metric series (" code { "mapi runs log" } ")." } }
        @for (i, name) in names.iter().enumerate() {
            @let series: Vec<Line> = runs.iter().zip(logs).filter_map(|(run, log)| {
                let points = log.series.get(*name)?;
                Some(Line { label: label(run), points: points.iter().map(|p| (p.step as f64, p.value)).collect() })
            }).collect();
            figure.chart {
                (svg(lines(&format!("compare-{i}"), name, &format!("{name} over steps for {} runs", series.len()), &series)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runs_compared_are_the_picked_plain_ids_each_once() {
        let ids = picked(Some("_csrf=x&run=run_a&run=run_b&run=run_a&run=..%2Fx&action=cancel"));
        assert_eq!(ids, ["run_a", "run_b"]);
        assert!(picked(None).is_empty());
    }
}
