//! Runs: the filtered list with bulk cancel and retry, a new run, and a
//! run's page (timeline, live progress, logs, outputs, cost).

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use mapi_api::methods::{MethodInput, MethodList, MethodView};
use mapi_api::views::{Column, DatasetPage, RunPage, RunSummary, RunView};
use mapi_domain::{ResourceClass, RunState};
use maud::{Markup, html};
use reqwest::Method;
use serde::Deserialize;

use super::{ProjectPath, plain_id};
use crate::Console;
use crate::api::{Api, Refusal, query};
use crate::html::{Scope, csrf, money, page, refusal_box, state_badge, when};
use crate::session::{Posted, Viewer};

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/console/t/{tenant}/p/{project}/runs", get(list))
        .route("/console/t/{tenant}/p/{project}/runs/bulk", post(bulk))
        .route("/console/t/{tenant}/p/{project}/runs/new", get(new_form).post(submit))
}

/// The list's filters, as the form sends them.
#[derive(Debug, Default, Deserialize)]
pub struct Filters {
    state: Option<String>,
    method: Option<String>,
    class: Option<String>,
    created_by: Option<String>,
    tag: Option<String>,
    experiment: Option<String>,
    /// `NAME OP NUMBER`, e.g. `r2>0.9`.
    metric: Option<String>,
    /// A saved view: its filters and its columns.
    view: Option<String>,
    /// Comma-separated columns, replacing the view's (or the default).
    columns: Option<String>,
    /// A column to sort the page shown by, and `desc` for largest first.
    sort: Option<String>,
    order: Option<String>,
    /// `YYYY-MM-DD`, from a date field: that day's start, UTC.
    after: Option<String>,
    before: Option<String>,
    page_token: Option<String>,
}

/// A date field's day as the instant it starts (UTC); anything else is left out.
fn day_start(day: Option<&str>) -> Option<String> {
    let d = day?.trim();
    let ok = d.len() == 10 && d.as_bytes()[4] == b'-' && d.as_bytes()[7] == b'-';
    ok.then(|| format!("{d}T00:00:00Z"))
}

/// The columns shown when neither a view nor the form names any.
const DEFAULT_COLUMNS: &[&str] = &["name", "method", "state", "class", "created_by", "created_at", "charged"];

impl Filters {
    fn api_query(&self, columns: &[String]) -> String {
        let (after, before) = (day_start(self.after.as_deref()), day_start(self.before.as_deref()));
        let values: Vec<&str> = columns
            .iter()
            .map(String::as_str)
            .filter(|c| c.starts_with("params.") || c.starts_with("metrics."))
            .collect();
        let values = values.join(",");
        query(&[
            ("state", self.state.as_deref()),
            ("method", self.method.as_deref().map(str::trim)),
            ("class", self.class.as_deref()),
            ("created_by", self.created_by.as_deref().map(str::trim)),
            ("tag", self.tag.as_deref().map(str::trim)),
            ("experiment", self.experiment.as_deref().map(str::trim)),
            ("metric", self.metric.as_deref().map(str::trim)),
            ("view", self.view.as_deref()),
            ("columns", Some(values.as_str())),
            ("created_after", after.as_deref()),
            ("created_before", before.as_deref()),
            ("page_token", self.page_token.as_deref()),
        ])
    }

    /// The console URL of the next page under the same filters.
    fn next(&self, token: &str) -> String {
        query(&[
            ("state", self.state.as_deref()),
            ("method", self.method.as_deref()),
            ("class", self.class.as_deref()),
            ("created_by", self.created_by.as_deref()),
            ("tag", self.tag.as_deref()),
            ("experiment", self.experiment.as_deref()),
            ("metric", self.metric.as_deref()),
            ("view", self.view.as_deref()),
            ("columns", self.columns.as_deref()),
            ("sort", self.sort.as_deref()),
            ("order", self.order.as_deref()),
            ("after", self.after.as_deref()),
            ("before", self.before.as_deref()),
            ("page_token", Some(token)),
        ])
    }

    /// The columns the form names, if it names any.
    fn named_columns(&self) -> Option<Vec<String>> {
        let text = self.columns.as_deref()?;
        let named: Vec<String> =
            text.split(',').map(str::trim).filter(|c| !c.is_empty()).map(str::to_owned).collect();
        (!named.is_empty()).then_some(named)
    }
}

async fn list(
    State(console): State<Console>,
    viewer: Viewer,
    ProjectPath { tenant: t, project: p }: ProjectPath,
    Query(f): Query<Filters>,
) -> Response {
    let scope = Scope::project(t.as_str(), p.as_str());
    let api = Api::new(&console, &viewer);
    let views = super::experiments::saved_views(&api, &t, &p).await.unwrap_or_default();
    let view = f.view.as_deref().and_then(|n| views.iter().find(|v| v.name == n));
    let columns = f
        .named_columns()
        .or_else(|| view.map(|v| v.columns.clone()))
        .unwrap_or_else(|| DEFAULT_COLUMNS.iter().map(|c| (*c).to_owned()).collect());
    let path = format!("/v1/tenants/{t}/projects/{p}/runs{}", f.api_query(&columns));
    let mut answer: Result<RunPage, Refusal> = api.get(&path).await;
    if let (Ok(page), Some(by)) = (&mut answer, f.sort.as_deref().filter(|s| !s.is_empty())) {
        mapi_api::views::sort_runs(&mut page.runs, by, f.order.as_deref() == Some("desc"));
    }
    let body = html! {
        (filter_form(&f, &views, &columns))
        @match &answer {
            Err(r) => (refusal_box(r)),
            Ok(runs) => {
                (runs_table(&viewer, t.as_str(), p.as_str(), &runs.runs, &columns))
                div.pager {
                    @if f.page_token.is_some() { a href={"?" } { "First page" } }
                    @if let Some(next) = &runs.next_page_token { a href=(f.next(next)) rel="next" { "Next page" } }
                }
            }
        }
    };
    let status = answer.as_ref().err().map_or(StatusCode::OK, |r| r.status);
    page(status, Some(&viewer), scope, "Runs", body)
}

fn filter_form(f: &Filters, views: &[mapi_schema::RunViewDoc], columns: &[String]) -> Markup {
    let picked = |v: &Option<String>, x: &str| v.as_deref() == Some(x);
    html! {
        form.filters method="get" role="search" aria-label="Filter runs" {
            label { "State"
                select name="state" {
                    option value="" { "any" }
                    @for s in RunState::ALL { option value=(s.as_str()) selected[picked(&f.state, s.as_str())] { (s.as_str()) } }
                }
            }
            label { "Method" input name="method" value=[f.method.as_deref()] placeholder="tabular.linear"; }
            label { "Class"
                select name="class" {
                    option value="" { "any" }
                    @for c in ResourceClass::ALL { option value=(c.as_str()) selected[picked(&f.class, c.as_str())] { (c.as_str()) } }
                }
            }
            label { "Submitted by" input name="created_by" type="email" value=[f.created_by.as_deref()]; }
            label { "Tag" input name="tag" value=[f.tag.as_deref()]; }
            label { "Experiment" input name="experiment" value=[f.experiment.as_deref()]; }
            label { "Metric" input name="metric" value=[f.metric.as_deref()] placeholder="r2>0.9"; }
            label { "From (UTC)" input name="after" type="date" value=[f.after.as_deref()]; }
            label { "Before (UTC)" input name="before" type="date" value=[f.before.as_deref()]; }
            label { "Saved view"
                select name="view" {
                    option value="" { "none" }
                    @for v in views { option value=(v.name) selected[picked(&f.view, &v.name)] { (v.name) } }
                }
            }
            label { "Columns" input name="columns" value=[f.columns.as_deref()] placeholder="name, state, params.alpha, metrics.r2" size="36"; }
            // Labelled by `for`, so its options (column names such as
            // `state`) are not part of its name.
            span.field {
                label for="sort" { "Sort by" }
                select #sort name="sort" {
                    option value="" { "newest first" }
                    @for c in columns { option value=(c) selected[picked(&f.sort, c)] { (c) } }
                }
            }
            label { "Order"
                select name="order" {
                    option value="asc" { "smallest first" }
                    option value="desc" selected[picked(&f.order, "desc")] { "largest first" }
                }
            }
            button type="submit" { "Filter" }
        }
    }
}

fn runs_table(
    viewer: &Viewer,
    tenant: &str,
    project: &str,
    runs: &[RunSummary],
    columns: &[String],
) -> Markup {
    // The run's link comes first, by its name where it has one.
    let columns: Vec<&String> = columns.iter().filter(|c| !matches!(c.as_str(), "id" | "name")).collect();
    html! {
        @if runs.is_empty() {
            p { "No run matches. " a href={"/console/t/" (tenant) "/p/" (project) "/runs/new"} { "Submit one" } "." }
        } @else {
            form method="post" action={"/console/t/" (tenant) "/p/" (project) "/runs/bulk"} {
                (csrf(viewer))
                div.scroll {
                table {
                    caption.meta { "Pick runs to compare, cancel or retry together. Sorting orders the page shown." }
                    thead { tr {
                        th scope="col" { input type="checkbox" aria-label="Select every run on this page" data-select-all="run"; }
                        th scope="col" { "Run" }
                        @for c in &columns { th scope="col" class=[is_numeric(c).then_some("num")] { (heading(c)) } }
                    } }
                    tbody {
                        @for r in runs {
                            tr {
                                td { input type="checkbox" name="run" value=(r.id) aria-label={"Select run " (r.name.as_deref().unwrap_or(r.id.as_str()))}; }
                                td {
                                    a href={"/console/runs/" (r.id)} { (r.name.as_deref().unwrap_or(r.id.as_str())) }
                                    @if r.name.is_some() { br; code.meta { (r.id) } }
                                    @if !r.tags.is_empty() && !columns.iter().any(|c| c.as_str() == "tags") { br; span.meta { "tags: " (r.tags.join(", ")) } }
                                }
                                @for c in &columns { (column_cell(r, c)) }
                            }
                        }
                    }
                }
                }
                div.pager {
                    button type="submit" formmethod="get" formaction={"/console/t/" (tenant) "/p/" (project) "/runs/compare"} class="secondary" { "Compare selected" }
                    button type="submit" name="action" value="cancel" class="secondary" { "Cancel selected" }
                    button type="submit" name="action" value="retry" class="secondary" { "Retry selected" }
                }
            }
        }
    }
}

fn is_numeric(column: &str) -> bool {
    matches!(column, "attempt" | "charged") || column.starts_with("metrics.")
}

fn heading(column: &str) -> String {
    match column {
        "created_at" => "Created".into(),
        "created_by" => "Submitted by".into(),
        "charged" => "Charged".into(),
        c if c.contains('.') => c.to_owned(),
        c => {
            let mut s = c.replace('_', " ");
            if let Some(first) = s.get_mut(..1) {
                first.make_ascii_uppercase();
            }
            s
        }
    }
}

fn column_cell(r: &RunSummary, column: &str) -> Markup {
    html! {
        @match column {
            "state" => td { (state_badge(r.state.as_str())) },
            "created_at" => td { (when(r.created_at)) },
            "charged" => td.num { (money(r.charged_micros, "USD")) },
            "dataset" => td { code { (r.dataset) } },
            _ => @match r.column(column) {
                Column::Number(n) => td.num { (mapi_api::words::number(n)) },
                Column::Text(t) => td { (t) },
                Column::Missing => td { span.meta { "—" } },
            },
        }
    }
}

/// Bulk cancel or retry: each run asked on its own, each row its own result.
async fn bulk(
    State(console): State<Console>,
    ProjectPath { tenant: t, project: p }: ProjectPath,
    posted: Posted,
) -> Response {
    let viewer = &posted.viewer;
    let api = Api::new(&console, viewer);
    let action = posted.get("action").unwrap_or_default().to_owned();
    let mut rows = Vec::new();
    for id in posted.all("run").into_iter().take(200) {
        let result = match (plain_id(id), action.as_str()) {
            (Err(_), _) => Err("not a run id".to_owned()),
            (Ok(id), "cancel") => api
                .post_empty::<RunView>(&format!("/v1/runs/{id}/cancel"))
                .await
                .map(|r| format!("now {}", r.state.as_str()))
                .map_err(|r| r.detail),
            (Ok(id), "retry") => retry(&api, id).await,
            _ => Err("choose cancel or retry".to_owned()),
        };
        rows.push((id.to_owned(), result));
    }
    let body = html! {
        @if rows.is_empty() { p { "No run was selected." } }
        table {
            thead { tr { th scope="col" { "Run" } th scope="col" { "Result" } } }
            tbody {
                @for (id, result) in &rows {
                    tr {
                        td { a href={"/console/runs/" (id)} { code { (id) } } }
                        @match result {
                            Ok(text) => td.done { (text) },
                            Err(detail) => td { strong { "Refused: " } (detail) },
                        }
                    }
                }
            }
        }
        p { a href={"/console/t/" (t) "/p/" (p) "/runs"} { "Back to the runs" } }
    };
    let title = if action == "retry" { "Retry: one result per run" } else { "Cancel: one result per run" };
    page(StatusCode::OK, Some(viewer), Scope::project(t.as_str(), p.as_str()), title, body)
}

/// A retry is a new run of the same spec, name and tags, admitted under
/// the quotas like any submit (`POST /v1/runs/{id}/retry`).
async fn retry(api: &Api<'_>, id: &str) -> Result<String, String> {
    let new: RunView = api.post_empty(&format!("/v1/runs/{id}/retry")).await.map_err(|r| r.detail)?;
    Ok(format!("retried as {}", new.id))
}

async fn new_form(
    State(console): State<Console>,
    viewer: Viewer,
    ProjectPath { tenant: t, project: p }: ProjectPath,
) -> Response {
    render_new(&console, &viewer, &t, &p, None, &Default::default()).await
}

/// The new-run form, with what the last attempt to send it was refused for.
async fn render_new(
    console: &Console,
    viewer: &Viewer,
    t: &mapi_domain::TenantId,
    p: &mapi_domain::ProjectId,
    refusal: Option<Refusal>,
    sent: &NewRunForm,
) -> Response {
    let api = Api::new(console, viewer);
    let datasets: Result<DatasetPage, _> =
        api.get(&format!("/v1/tenants/{t}/projects/{p}/datasets?page_size=200")).await;
    let methods: Result<MethodList, _> = api.get("/v1/methods").await;
    let methods: Vec<MethodView> = methods
        .map(|m| m.methods)
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.input == MethodInput::Dataset)
        .collect();
    let body = html! {
        @if let Some(r) = &refusal { (refusal_box(r)) }
        @match &datasets {
            Err(r) => (refusal_box(r)),
            Ok(d) if d.datasets.is_empty() => p { "Upload a dataset first: " a href={"/console/t/" (t) "/p/" (p) "/datasets"} { "Datasets" } "." },
            Ok(d) => form.stack method="post" {
                (csrf(viewer))
                label { "Dataset"
                    select name="dataset" required {
                        @for ds in &d.datasets { option value=(ds.id) selected[sent.dataset.as_deref() == Some(ds.id.as_str())] { (ds.name) " (" (ds.id) ")" } }
                    }
                }
                label { "Method"
                    select name="method" required {
                        @for m in &methods { option value=(m.name) selected[sent.method.as_deref() == Some(&m.name)] { (m.name) " — " (m.summary) } }
                    }
                }
                label { "Parameters (JSON object)"
                    textarea name="params" spellcheck="false" aria-describedby="params-help" { (sent.params.as_deref().unwrap_or("{}")) }
                }
                p #params-help .meta { "For example " code { r#"{"y": "employed", "x": ["age", "hours"]}"# } ". " a href="/v1/methods" { "Each method's parameters" } "." }
                label { "Resource class"
                    select name="class" {
                        @for c in ResourceClass::ALL { option value=(c.as_str()) selected[sent.class.as_deref().unwrap_or("S") == c.as_str()] { (c.as_str()) } }
                    }
                }
                label { "Timeout (seconds)" input name="timeout_s" type="number" min="1" max="86400" value=(sent.timeout_s.as_deref().unwrap_or("3600")); }
                button type="submit" { "Submit the run" }
            },
        }
    };
    let status = refusal.as_ref().map_or(StatusCode::OK, |r| r.status);
    page(status, Some(viewer), Scope::project(t.as_str(), p.as_str()), "New run", body)
}

#[derive(Debug, Default)]
struct NewRunForm {
    dataset: Option<String>,
    method: Option<String>,
    params: Option<String>,
    class: Option<String>,
    timeout_s: Option<String>,
}

/// What the form says, as the API's body, or what to fix first.
fn spec_of(form: &NewRunForm) -> Result<serde_json::Value, String> {
    let params: serde_json::Value = match form.params.as_deref().map(str::trim).filter(|p| !p.is_empty()) {
        None => serde_json::json!({}),
        Some(text) => serde_json::from_str(text)
            .map_err(|_| "the parameters must be a JSON object, such as {\"y\": \"employed\"}".to_owned())?,
    };
    if !params.is_object() {
        return Err("the parameters must be a JSON object, such as {\"y\": \"employed\"}".into());
    }
    let timeout: u32 = match form.timeout_s.as_deref() {
        None => 3600,
        Some(t) => t.parse().map_err(|_| "the timeout must be a whole number of seconds".to_owned())?,
    };
    Ok(serde_json::json!({
        "dataset": form.dataset,
        "method": form.method,
        "params": params,
        "class": form.class.as_deref().unwrap_or("S"),
        "timeout_s": timeout,
    }))
}

async fn submit(
    State(console): State<Console>,
    ProjectPath { tenant: t, project: p }: ProjectPath,
    posted: Posted,
) -> Response {
    let own = |k: &str| posted.get(k).map(str::to_owned);
    let form = NewRunForm {
        dataset: own("dataset"),
        method: own("method"),
        params: own("params"),
        class: own("class"),
        timeout_s: own("timeout_s"),
    };
    let viewer = &posted.viewer;
    let spec = match spec_of(&form) {
        Ok(spec) => spec,
        Err(detail) => {
            return render_new(&console, viewer, &t, &p, Some(Refusal::invalid(detail)), &form).await;
        }
    };
    let answer: Result<RunView, Refusal> = Api::new(&console, viewer)
        .send(Method::POST, &format!("/v1/tenants/{t}/projects/{p}/runs"), &spec)
        .await;
    match answer {
        Ok(run) => Redirect::to(&format!("/console/runs/{}", run.id)).into_response(),
        Err(r) => render_new(&console, viewer, &t, &p, Some(r), &form).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_become_the_apis_query_and_the_next_pages_link() {
        let f = Filters {
            state: Some("running".into()),
            method: Some(" tabular.linear ".into()),
            created_by: Some("".into()),
            after: Some("2026-12-01".into()),
            before: Some("not a day".into()),
            ..Default::default()
        };
        let columns = vec!["name".to_owned(), "metrics.r2".to_owned(), "params.alpha".to_owned()];
        assert_eq!(
            f.api_query(&columns),
            "?state=running&method=tabular.linear&columns=metrics.r2%2Cparams.alpha&created_after=2026-12-01T00%3A00%3A00Z"
        );
        assert_eq!(
            f.next("tok"),
            "?state=running&method=%20tabular.linear%20&after=2026-12-01&before=not%20a%20day&page_token=tok"
        );
    }

    fn summary(id: &str, r2: Option<f64>) -> RunSummary {
        let mut values = std::collections::BTreeMap::new();
        if let Some(v) = r2 {
            values.insert("metrics.r2".to_owned(), serde_json::json!(v));
        }
        RunSummary {
            id: mapi_domain::RunId::parse(id).expect("id"),
            method: "tabular.linear".into(),
            state: RunState::Succeeded,
            class: ResourceClass::S,
            created_by: mapi_domain::UserId::parse("a@b.c").expect("user"),
            name: None,
            tags: vec![],
            experiment: None,
            attempt: mapi_domain::AttemptNo::FIRST,
            created_at: mapi_domain::Timestamp::from_secs(0),
            updated_at: mapi_domain::Timestamp::from_secs(0),
            charged_micros: 0,
            dataset: mapi_domain::DatasetId::parse("ds_01arz3ndektsv4rrffq69g5fav").expect("dataset"),
            values,
        }
    }

    #[test]
    fn a_page_sorts_by_a_metric_with_runs_lacking_it_last() {
        let mut runs = vec![
            summary("run_01arz3ndektsv4rrffq69g5fa1", Some(0.5)),
            summary("run_01arz3ndektsv4rrffq69g5fa2", None),
            summary("run_01arz3ndektsv4rrffq69g5fa3", Some(0.9)),
        ];
        mapi_api::views::sort_runs(&mut runs, "metrics.r2", true);
        let ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "run_01arz3ndektsv4rrffq69g5fa3",
                "run_01arz3ndektsv4rrffq69g5fa1",
                "run_01arz3ndektsv4rrffq69g5fa2"
            ]
        );
        mapi_api::views::sort_runs(&mut runs, "metrics.r2", false);
        let ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "run_01arz3ndektsv4rrffq69g5fa1",
                "run_01arz3ndektsv4rrffq69g5fa3",
                "run_01arz3ndektsv4rrffq69g5fa2"
            ]
        );
        let cell = column_cell(&runs[0], "metrics.r2").into_string();
        assert!(cell.contains("0.5"), "{cell}");
    }

    #[test]
    fn a_form_that_cannot_be_a_run_says_what_to_fix() {
        let form = NewRunForm { params: Some("[1]".into()), ..Default::default() };
        assert!(spec_of(&form).expect_err("an array").contains("JSON object"));
        let form = NewRunForm { timeout_s: Some("soon".into()), ..Default::default() };
        assert!(spec_of(&form).expect_err("not a number").contains("whole number"));
        let form = NewRunForm { params: Some(r#"{"y": "employed"}"#.into()), ..Default::default() };
        let spec = spec_of(&form).expect("a spec");
        assert_eq!(
            (spec["params"]["y"].as_str(), spec["timeout_s"].as_u64()),
            (Some("employed"), Some(3600))
        );
    }
}
