//! Item jobs: the project's jobs, a new job, a job's counts and items by
//! state, a failed item's log, retry of the failed items, cancel.

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use mapi_api::methods::{MethodInput, MethodList};
use mapi_domain::Timestamp;
use maud::{Markup, html};
use reqwest::Method;
use serde::Deserialize;

use super::{IdPath, PageQuery, ProjectPath, fragment, json_field};
use crate::Console;
use crate::api::{Api, Refusal, query};
use crate::html::{Scope, csrf, done, money, page, refusal_box, refused, state_badge, when};
use crate::session::{Posted, Viewer};

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/console/t/{tenant}/p/{project}/jobs", get(list).post(submit))
        .route("/console/jobs/{id}", get(detail))
        .route("/console/jobs/{id}/live", get(live))
        .route("/console/jobs/{id}/items/{idx}/log", get(item_log))
        .route("/console/jobs/{id}/retry-failed", post(retry_failed))
        .route("/console/jobs/{id}/cancel", post(cancel))
}

#[derive(Debug, Deserialize)]
struct Counts {
    total: u64,
    succeeded: u64,
    failed: u64,
    running: u64,
    pending: u64,
    cancelled: u64,
}

#[derive(Debug, Deserialize)]
struct JobCost {
    duration_ms: i64,
    cost_micros: i64,
}

#[derive(Debug, Deserialize)]
struct Job {
    id: String,
    tenant: String,
    project: String,
    method: String,
    state: String,
    counts: Counts,
    round: u32,
    created_at: Timestamp,
    finished_at: Option<Timestamp>,
    cost: JobCost,
}

#[derive(Debug, Deserialize)]
struct JobPage {
    jobs: Vec<Job>,
    next_page_token: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Failure {
    #[serde(rename = "type")]
    kind: String,
    message: String,
}

#[derive(Debug, Deserialize)]
struct Item {
    idx: u64,
    state: String,
    round: u32,
    attempts: u32,
    duration_ms: u64,
    result: Option<serde_json::Value>,
    error: Option<Failure>,
}

#[derive(Debug, Deserialize)]
struct ItemPage {
    items: Vec<Item>,
    next_page_token: Option<String>,
}

/// The states of a job that is over (its counts will not change).
const FINAL: [&str; 3] = ["succeeded", "failed", "completed_with_errors"];

async fn list(
    State(console): State<Console>,
    viewer: Viewer,
    ProjectPath { tenant: t, project: p }: ProjectPath,
    Query(q): Query<PageQuery>,
) -> Response {
    render_list(&console, &viewer, (&t, &p), q.page_token.as_deref(), None).await
}

async fn render_list(
    console: &Console,
    viewer: &Viewer,
    (t, p): (&mapi_domain::TenantId, &mapi_domain::ProjectId),
    page_token: Option<&str>,
    refusal: Option<Refusal>,
) -> Response {
    let api = Api::new(console, viewer);
    let path = format!("/v1/tenants/{t}/projects/{p}/jobs{}", query(&[("page_token", page_token)]));
    let answer: Result<JobPage, Refusal> = api.get(&path).await;
    let methods: Vec<String> = api
        .get::<MethodList>("/v1/methods")
        .await
        .map(|l| l.methods.into_iter().filter(|m| m.input == MethodInput::Item).map(|m| m.name).collect())
        .unwrap_or_default();
    let status = refusal.as_ref().or(answer.as_ref().err()).map_or(StatusCode::OK, |r| r.status);
    let body = html! {
        @if let Some(r) = &refusal { (refusal_box(r)) }
        @match &answer {
            Err(r) => (refusal_box(r)),
            Ok(jobs) if jobs.jobs.is_empty() => p { "No item job yet." },
            Ok(jobs) => {
                table {
                    thead { tr { th scope="col" { "Job" } th scope="col" { "Method" } th scope="col" { "State" } th.num scope="col" { "Items" } th.num scope="col" { "Succeeded" } th.num scope="col" { "Failed" } th scope="col" { "Created" } } }
                    tbody { @for j in &jobs.jobs { tr {
                        td { a href={"/console/jobs/" (j.id)} { code { (j.id) } } } td { (j.method) } td { (state_badge(&j.state)) }
                        td.num { (j.counts.total) } td.num { (j.counts.succeeded) } td.num { (j.counts.failed) } td { (when(j.created_at)) }
                    } } }
                }
                @if let Some(next) = &jobs.next_page_token { div.pager { a href=(query(&[("page_token", Some(next))])) rel="next" { "Next page" } } }
            }
        }
        h2 { "New item job" }
        form.stack method="post" {
            (csrf(viewer))
            label { "Method" select name="method" required { @for m in &methods { option value=(m) { (m) } } } }
            label { "Items (a JSON array, one value per item)" textarea name="items" required spellcheck="false" { "[]" } }
            label { "Parameters (a JSON object, the same for every item)" textarea name="params" spellcheck="false" { "{}" } }
            button type="submit" { "Submit the job" }
        }
    };
    page(status, Some(viewer), Scope::project(t.as_str(), p.as_str()), "Item jobs", body)
}

async fn submit(
    State(console): State<Console>,
    ProjectPath { tenant: t, project: p }: ProjectPath,
    posted: Posted,
) -> Response {
    let body = json_field(posted.get("items"), serde_json::json!([]), "the items").and_then(|items| {
        let params = json_field(posted.get("params"), serde_json::json!({}), "the parameters")?;
        Ok(serde_json::json!({"method": posted.get("method"), "items": items, "options": {"params": params}}))
    });
    let viewer = &posted.viewer;
    let answer = match body {
        Ok(body) => {
            Api::new(&console, viewer)
                .send::<Job, _>(Method::POST, &format!("/v1/tenants/{t}/projects/{p}/jobs"), &body)
                .await
        }
        Err(r) => Err(r),
    };
    match answer {
        Ok(job) => Redirect::to(&format!("/console/jobs/{}", job.id)).into_response(),
        Err(r) => render_list(&console, viewer, (&t, &p), None, Some(r)).await,
    }
}

#[derive(Debug, Deserialize)]
pub struct ItemsQuery {
    state: Option<String>,
    page_token: Option<String>,
}

async fn detail(
    State(console): State<Console>,
    viewer: Viewer,
    IdPath(id): IdPath,
    Query(q): Query<ItemsQuery>,
) -> Response {
    let id = id.as_str();
    render_job(&console, &viewer, id, &q, None).await
}

async fn render_job(
    console: &Console,
    viewer: &Viewer,
    id: &str,
    q: &ItemsQuery,
    flash: Option<Markup>,
) -> Response {
    let (job, items) = match read_job(console, viewer, id, q).await {
        Ok(read) => read,
        Err(r) => return refused(viewer, Scope::default(), "Item job", &r),
    };
    let body = html! {
        @if let Some(f) = flash { (f) }
        (job_section(viewer, &job, &items, q))
    };
    let scope = Scope::project(&job.tenant, &job.project);
    page(StatusCode::OK, Some(viewer), scope, &format!("Item job {id}"), body)
}

/// The job and the page of its items the query asks for.
async fn read_job(
    console: &Console,
    viewer: &Viewer,
    id: &str,
    q: &ItemsQuery,
) -> Result<(Job, Result<ItemPage, Refusal>), Refusal> {
    let api = Api::new(console, viewer);
    let job: Job = api.get(&format!("/v1/jobs/{id}")).await?;
    let items = api.get(&format!("/v1/jobs/{id}/items{}", q.as_query())).await;
    Ok((job, items))
}

impl ItemsQuery {
    /// The item state asked for, if it is one the list takes.
    fn state(&self) -> Option<&str> {
        self.state.as_deref().filter(|s| ["succeeded", "failed"].contains(s))
    }

    fn as_query(&self) -> String {
        query(&[("state", self.state()), ("page_token", self.page_token.as_deref())])
    }
}

/// Everything on a job's page that can change: its state and counts, the
/// actions its state allows, and its items. With JavaScript the page
/// replaces it from `…/live` (the same query) until the job is over.
fn job_section(viewer: &Viewer, job: &Job, items: &Result<ItemPage, Refusal>, q: &ItemsQuery) -> Markup {
    let (c, id, state) = (&job.counts, &job.id, q.state());
    let over = FINAL.contains(&job.state.as_str());
    html! {
        section #live aria-live="polite" aria-label="State, counts and items"
            data-live={"/console/jobs/" (id) "/live" (q.as_query())} data-final[over] {
            (counts(job))
            div.pager {
                @if c.failed > 0 {
                    form method="post" action={"/console/jobs/" (id) "/retry-failed"} { (csrf(viewer)) button type="submit" { "Retry the " (c.failed) " failed items" } }
                }
                @if !over {
                    form method="post" action={"/console/jobs/" (id) "/cancel"} { (csrf(viewer)) button.danger type="submit" { "Cancel the job" } }
                }
            }
            h2 { "Items" }
            nav.pager aria-label="Items by state" {
                a href={"/console/jobs/" (id)} aria-current=[state.is_none().then_some("page")] { "All finished" }
                a href={"/console/jobs/" (id) "?state=succeeded"} aria-current=[(state == Some("succeeded")).then_some("page")] { "Succeeded" }
                a href={"/console/jobs/" (id) "?state=failed"} aria-current=[(state == Some("failed")).then_some("page")] { "Failed" }
            }
            @match items {
                Err(r) => (refusal_box(r)),
                Ok(page) if page.items.is_empty() => p { "No finished item here yet." },
                Ok(page) => {
                    table {
                        thead { tr { th.num scope="col" { "Item" } th scope="col" { "State" } th.num scope="col" { "Round" } th.num scope="col" { "Attempts" } th.num scope="col" { "ms" } th scope="col" { "Result or error" } th scope="col" { "Log" } } }
                        tbody { @for i in &page.items { tr {
                            td.num { (i.idx) } td { (state_badge(&i.state)) } td.num { (i.round) } td.num { (i.attempts) } td.num { (i.duration_ms) }
                            td { @if let Some(e) = &i.error { strong { (e.kind) } ": " (e.message) } @else if let Some(r) = &i.result { code { (r.to_string().chars().take(200).collect::<String>()) } } }
                            td { a href={"/console/jobs/" (id) "/items/" (i.idx) "/log"} { "Log of item " (i.idx) } }
                        } } }
                    }
                    @if let Some(next) = &page.next_page_token { div.pager { a href=(query(&[("state", state), ("page_token", Some(next))])) rel="next" { "Next page" } } }
                }
            }
            @if !over { p.meta { "This section refreshes itself; without JavaScript, " a href={"/console/jobs/" (id) (q.as_query())} { "reload" } "." } }
        }
    }
}

/// The job's state and counts.
fn counts(job: &Job) -> Markup {
    let c = &job.counts;
    html! {
        dl.facts {
            dt { "State" } dd { (state_badge(&job.state)) }
            dt { "Method" } dd { (job.method) }
            dt { "Items" } dd { (c.total) " — " (c.succeeded) " succeeded, " (c.failed) " failed, " (c.running) " running, " (c.pending) " pending, " (c.cancelled) " cancelled" }
            dt { "Round" } dd { (job.round) }
            dt { "Created" } dd { (when(job.created_at)) }
            dt { "Finished" } dd { @match job.finished_at { Some(f) => (when(f)), None => "not yet" } }
            dt { "Cost" } dd { (money(job.cost.cost_micros, "USD")) " estimated for " (job.cost.duration_ms) " ms of method time" }
        }
    }
}

/// The live section alone, for the page's script to swap in.
async fn live(
    State(console): State<Console>,
    viewer: Viewer,
    IdPath(id): IdPath,
    Query(q): Query<ItemsQuery>,
) -> Response {
    let read = read_job(&console, &viewer, &id, &q).await;
    fragment(read.map(|(job, items)| job_section(&viewer, &job, &items, &q)))
}

async fn item_log(
    State(console): State<Console>,
    viewer: Viewer,
    IdPath(id): IdPath,
    Path((_, idx)): Path<(String, u64)>,
) -> Response {
    let title = format!("Log of item {idx} of job {id}");
    match Api::new(&console, &viewer).text(&format!("/v1/jobs/{id}/items/{idx}/log")).await {
        Err(r) => refused(&viewer, Scope::default(), &title, &r),
        Ok(text) => {
            let lines: Vec<String> = text.lines().map(log_line).collect();
            let body = html! {
                pre.log tabindex="0" aria-label="The item's log" { @for l in &lines { (l) "\n" } }
                p { a href={"/console/jobs/" (id)} { "Back to the job" } }
            };
            page(StatusCode::OK, Some(&viewer), Scope::default(), &title, body)
        }
    }
}

/// One NDJSON log line as a person reads it: its message, else the line.
fn log_line(line: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(line).ok();
    let text = |k: &str| parsed.as_ref().and_then(|v| v.get(k)).and_then(|v| v.as_str()).map(str::to_owned);
    match (text("level"), text("message").or_else(|| text("msg"))) {
        (Some(level), Some(m)) => format!("{level}: {m}"),
        (None, Some(m)) => m,
        _ => line.to_owned(),
    }
}

async fn retry_failed(State(console): State<Console>, IdPath(id): IdPath, posted: Posted) -> Response {
    act(&console, &id, posted, "retry-failed", "The failed items were queued again.").await
}

async fn cancel(State(console): State<Console>, IdPath(id): IdPath, posted: Posted) -> Response {
    act(&console, &id, posted, "cancel", "The job is cancelled: items still queued will not run.").await
}

async fn act(console: &Console, id: &str, posted: Posted, action: &str, said: &str) -> Response {
    let viewer = &posted.viewer;
    let answer =
        Api::new(console, viewer).post_empty::<serde_json::Value>(&format!("/v1/jobs/{id}/{action}")).await;
    let flash = match &answer {
        Ok(_) => done(said),
        Err(r) => refusal_box(r),
    };
    let q = ItemsQuery { state: None, page_token: None };
    super::with_status(render_job(console, viewer, id, &q, Some(flash)).await, answer.as_ref().err())
}
