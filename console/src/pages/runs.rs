//! Runs: the filtered list with bulk cancel and retry, a new run, and a
//! run's page (timeline, live progress, logs, outputs, cost).

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use mapi_api::methods::{MethodInput, MethodList, MethodView};
use mapi_api::views::{DatasetPage, RunLogs, RunPage, RunSummary, RunView};
use mapi_domain::{ResourceClass, RunState};
use maud::{Markup, html};
use reqwest::Method;
use serde::Deserialize;

use super::{IdPath, ProjectPath, fragment, plain_id};
use crate::Console;
use crate::api::{Api, Refusal, query};
use crate::html::{Scope, csrf, money, page, refusal_box, refused, state_badge, when};
use crate::session::{Posted, Viewer};

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/console/t/{tenant}/p/{project}/runs", get(list))
        .route("/console/t/{tenant}/p/{project}/runs/bulk", post(bulk))
        .route("/console/t/{tenant}/p/{project}/runs/new", get(new_form).post(submit))
        .route("/console/runs/{id}", get(detail))
        .route("/console/runs/{id}/live", get(live))
        .route("/console/runs/{id}/cancel", post(cancel))
        .route("/console/runs/{id}/outputs/{*name}", get(output))
}

/// The list's filters, as the form sends them.
#[derive(Debug, Default, Deserialize)]
pub struct Filters {
    state: Option<String>,
    method: Option<String>,
    class: Option<String>,
    created_by: Option<String>,
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

impl Filters {
    fn api_query(&self) -> String {
        let (after, before) = (day_start(self.after.as_deref()), day_start(self.before.as_deref()));
        query(&[
            ("state", self.state.as_deref()),
            ("method", self.method.as_deref().map(str::trim)),
            ("class", self.class.as_deref()),
            ("created_by", self.created_by.as_deref().map(str::trim)),
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
            ("after", self.after.as_deref()),
            ("before", self.before.as_deref()),
            ("page_token", Some(token)),
        ])
    }
}

async fn list(
    State(console): State<Console>,
    viewer: Viewer,
    ProjectPath { tenant: t, project: p }: ProjectPath,
    Query(f): Query<Filters>,
) -> Response {
    let scope = Scope::project(t.as_str(), p.as_str());
    let path = format!("/v1/tenants/{t}/projects/{p}/runs{}", f.api_query());
    let answer: Result<RunPage, Refusal> = Api::new(&console, &viewer).get(&path).await;
    let body = html! {
        (filter_form(&f))
        @match &answer {
            Err(r) => (refusal_box(r)),
            Ok(runs) => {
                (runs_table(&viewer, t.as_str(), p.as_str(), &runs.runs))
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

fn filter_form(f: &Filters) -> Markup {
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
            label { "From (UTC)" input name="after" type="date" value=[f.after.as_deref()]; }
            label { "Before (UTC)" input name="before" type="date" value=[f.before.as_deref()]; }
            button type="submit" { "Filter" }
        }
    }
}

fn runs_table(viewer: &Viewer, tenant: &str, project: &str, runs: &[RunSummary]) -> Markup {
    html! {
        @if runs.is_empty() {
            p { "No run matches. " a href={"/console/t/" (tenant) "/p/" (project) "/runs/new"} { "Submit one" } "." }
        } @else {
            form method="post" action={"/console/t/" (tenant) "/p/" (project) "/runs/bulk"} {
                (csrf(viewer))
                table {
                    caption.meta { "Newest first. Pick runs to cancel or retry together." }
                    thead { tr {
                        th scope="col" { input type="checkbox" aria-label="Select every run on this page" data-select-all="run"; }
                        th scope="col" { "Run" } th scope="col" { "Method" } th scope="col" { "State" }
                        th scope="col" { "Class" } th scope="col" { "Attempt" } th scope="col" { "Submitted by" }
                        th scope="col" { "Created" } th.num scope="col" { "Charged" }
                    } }
                    tbody {
                        @for r in runs {
                            tr {
                                td { input type="checkbox" name="run" value=(r.id) aria-label={"Select run " (r.id)}; }
                                td {
                                    a href={"/console/runs/" (r.id)} { code { (r.id) } }
                                    @if let Some(name) = &r.name { br; span { (name) } }
                                    @if !r.tags.is_empty() { br; span.meta { "tags: " (r.tags.join(", ")) } }
                                }
                                td { (r.method) }
                                td { (state_badge(r.state.as_str())) }
                                td { (r.class.as_str()) }
                                td.num { (r.attempt) }
                                td { (r.created_by.as_str()) }
                                td { (when(r.created_at)) }
                                td.num { (money(r.charged_micros, "USD")) }
                            }
                        }
                    }
                }
                div.pager {
                    button type="submit" name="action" value="cancel" class="secondary" { "Cancel selected" }
                    button type="submit" name="action" value="retry" class="secondary" { "Retry selected" }
                }
            }
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

async fn detail(State(console): State<Console>, viewer: Viewer, IdPath(id): IdPath) -> Response {
    let id = id.as_str();
    let api = Api::new(&console, &viewer);
    let run: RunView = match api.get(&format!("/v1/runs/{id}")).await {
        Ok(run) => run,
        Err(r) => return refused(&viewer, Scope::default(), "Run", &r),
    };
    let logs: Result<RunLogs, Refusal> = api.get(&format!("/v1/runs/{id}/logs")).await;
    let (t, p) = (run.tenant.to_string(), run.project.to_string());
    let body = html! {
        dl.facts {
            @if let Some(name) = &run.labels.name { dt { "Name" } dd { (name) } }
            @if let Some(note) = &run.labels.note { dt { "Note" } dd { (note) } }
            @if !run.labels.tags.is_empty() { dt { "Tags" } dd { (run.labels.tags.join(", ")) } }
            @if let Some(of) = &run.retry_of { dt { "Retry of" } dd { a href={"/console/runs/" (of)} { code { (of) } } } }
            dt { "Method" } dd { (run.method) }
            dt { "Dataset" } dd { code { (run.dataset) } }
            dt { "Parameters" } dd { code { (serde_json::to_string(&run.params).unwrap_or_default()) } }
            dt { "Class" } dd { (run.class.as_str()) @if run.class != run.requested_class { " (asked " (run.requested_class.as_str()) ")" } }
            dt { "Timeout" } dd { (run.timeout_s) " s" }
            dt { "Tasks" } dd { (run.tasks) }
            dt { "Submitted" } dd { (when(run.created_at)) " by " (run.created_by.as_str()) }
            dt { "Cost" } dd { (money(run.cost.charged_micros, &run.cost.currency)) " charged; estimate " (money(run.cost.estimate_micros, &run.cost.currency)) span.meta { " (" (run.cost.price_table) ")" } }
            dt { "Model version" } dd {
                @match &run.model_version {
                    Some(mv) => a href={"/console/t/" (t) "/p/" (p) "/models#" (mv)} { code { (mv) } },
                    None => "none",
                }
            }
        }
        (live_section(&run))
        @if !run.state.is_terminal() {
            form method="post" action={"/console/runs/" (run.id) "/cancel"} {
                (csrf(&viewer))
                button.danger type="submit" { "Cancel this run" }
            }
        }
        h2 { "Timeline" }
        ol.timeline {
            @for h in &run.history {
                li { (when(h.at)) " — " (state_badge(h.to.as_str())) " (" (h.reason.as_str()) ", attempt " (h.attempt) ")" }
            }
        }
        h2 { "Outputs" }
        @if run.outputs.is_empty() { p { "None yet." } } @else {
            ul { @for o in &run.outputs { li { a href=(format!("/console/runs/{}/outputs/{}", run.id, o.name)) download { (o.name) } " (" (o.size) " bytes)" } } }
        }
        h2 { "Log" }
        @match &logs {
            Ok(l) if l.lines.is_empty() => p { "Nothing printed yet." },
            Ok(l) => pre.log tabindex="0" aria-label="Log of the current attempt" { @for line in &l.lines { (line.text) "\n" } },
            Err(r) => (refusal_box(r)),
        }
    };
    page(StatusCode::OK, Some(&viewer), Scope::project(&t, &p), &format!("Run {}", run.id), body)
}

/// The part of a run's page that changes while it runs; the script
/// replaces it from `…/live` until it is final.
fn live_section(run: &RunView) -> Markup {
    let fraction = run.progress.as_ref().map_or(0.0, |p| p.fraction.clamp(0.0, 1.0));
    let percent = (fraction * 100.0).round();
    html! {
        section #live aria-live="polite" aria-label="State and progress"
            data-live={"/console/runs/" (run.id) "/live"} data-final[run.state.is_terminal()] {
            h2 { "State: " (state_badge(run.state.as_str())) }
            @if let Some(w) = &run.waiting { p { "Waiting since " (when(w.since)) ": " (w.reason) } }
            @if let Some(e) = &run.error { div.problem { p { strong { (e.code.as_str()) } ": " (e.message) } } }
            @for w in &run.warnings { div.warning role="note" { p { strong { (w.code.as_str()) } ": " (w.message) } } }
            @if let Some(b) = run.params.get("dl.backend").and_then(|v| v.as_str()) { p { "Backend: " (b) } }
            label { "Progress " (percent) " %"
                progress max="100" value=(percent) { (percent) " %" }
            }
            @if let Some(m) = run.progress.as_ref().and_then(|p| p.message.as_deref()) { p.meta { (m) } }
            @if let Some(progress) = &run.progress {
                @if !progress.metrics.is_empty() {
                    table { caption { "Metrics" } thead { tr { th scope="col" { "Metric" } th.num scope="col" { "Value" } } }
                        tbody { @for (k, v) in &progress.metrics { tr { td { (k) } td.num { (v) } } } } }
                }
            }
            table {
                caption { "Attempts" }
                thead { tr { th scope="col" { "Attempt" } th scope="col" { "Class" } th.num scope="col" { "GPUs" } th scope="col" { "Started" } th scope="col" { "Finished" } th scope="col" { "Execution" } th.num scope="col" { "Charge" } } }
                tbody {
                    @for a in &run.attempts {
                        tr {
                            td.num { (a.attempt) } td { (a.class.as_str()) } td.num { (a.gpus) }
                            td { @if let Some(s) = a.started { (when(s)) } }
                            td { @if let Some(f) = a.finished { (when(f)) } }
                            td { @if let Some(s) = &a.status { (format!("{s:?}")) } }
                            td.num { @if let Some(c) = &a.charge { (money(c.amount_micros, &c.currency)) } }
                        }
                    }
                }
            }
            @if !run.state.is_terminal() { p.meta { "This section refreshes itself; without JavaScript, " a href={"/console/runs/" (run.id)} { "reload" } "." } }
        }
    }
}

async fn live(State(console): State<Console>, viewer: Viewer, IdPath(id): IdPath) -> Response {
    let run = Api::new(&console, &viewer).get::<RunView>(&format!("/v1/runs/{id}")).await;
    fragment(run.map(|run| live_section(&run)))
}

/// An output's download: the API counts it and answers where the bytes are; the browser goes there.
async fn output(
    State(console): State<Console>,
    viewer: Viewer,
    axum::extract::Path((id, name)): axum::extract::Path<(String, String)>,
) -> Response {
    let Ok(id) = mapi_domain::RunId::parse(&id) else {
        return refused(
            &viewer,
            Scope::default(),
            "No such run",
            &crate::api::Refusal::invalid("not a run id"),
        );
    };
    let name: String = name.chars().filter(|c| c.is_ascii_alphanumeric() || "._-=/".contains(*c)).collect();
    match Api::new(&console, &viewer).redirect(&format!("/v1/runs/{id}/outputs/{name}")).await {
        Ok(location) => Redirect::to(&location).into_response(),
        Err(r) => refused(&viewer, Scope::default(), "Download refused", &r),
    }
}

async fn cancel(State(console): State<Console>, IdPath(id): IdPath, posted: Posted) -> Response {
    let id = id.as_str();
    match Api::new(&console, &posted.viewer).post_empty::<RunView>(&format!("/v1/runs/{id}/cancel")).await {
        Ok(_) => Redirect::to(&format!("/console/runs/{id}")).into_response(),
        Err(r) => refused(&posted.viewer, Scope::default(), "Cancel refused", &r),
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
        assert_eq!(
            f.api_query(),
            "?state=running&method=tabular.linear&created_after=2026-12-01T00%3A00%3A00Z"
        );
        assert_eq!(
            f.next("tok"),
            "?state=running&method=%20tabular.linear%20&after=2026-12-01&before=not%20a%20day&page_token=tok"
        );
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
