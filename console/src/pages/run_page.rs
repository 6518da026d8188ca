//! A run's page, built around what the run did: its state and cost, what
//! it logged (metric charts over steps, params, images), its outputs with
//! previews, its attempts and timeline, its fan-out children and its log in
//! words (as `mapi runs logs` prints it), stdout and stderr told apart,
//! searchable and followed while it runs.
//!
//! Everything that can change is one live section, re-rendered whole from
//! `…/live` (the same query) until the run is final and its charges are
//! settled, so the page never shows a state beside a button or a timeline
//! that contradicts it.

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use mapi_api::tracking::RunLog;
use mapi_api::views::{LogLineView, RunLogs, RunView};
use mapi_api::words::{event_in_words, number, size};
use maud::{Markup, html};
use serde::Deserialize;

use super::{IdPath, fragment};
use crate::Console;
use crate::api::{Api, Refusal, query};
use crate::chart::{Line, lines};
use crate::html::{Scope, csrf, money, page, refusal_box, refused, state_badge, svg, when};
use crate::session::{Posted, Viewer};

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/console/runs/{id}", get(detail))
        .route("/console/runs/{id}/live", get(live))
        .route("/console/runs/{id}/log", get(log_live))
        .route("/console/runs/{id}/cancel", post(cancel))
        .route("/console/runs/{id}/outputs/{*name}", get(output))
        .route("/console/runs/{id}/preview/{*name}", get(preview))
        .route("/console/runs/{id}/images/{name}", get(image))
}

/// The most log lines a page shows (the CLI prints them all).
const LOG_LINES: usize = 2_000;
/// How long after a run's last change the page stops waiting for its
/// charges to settle (a lost attempt may never be charged).
const SETTLE_WAIT_S: i64 = 300;

/// What of the log to show: lines containing `q`, of one stream.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct LogQuery {
    q: Option<String>,
    /// `stdout` or `stderr`; both when absent.
    stream: Option<String>,
}

impl LogQuery {
    fn as_query(&self) -> String {
        query(&[("q", self.q.as_deref()), ("stream", self.stream.as_deref())])
    }

    fn keeps(&self, line: &LogLineView, text: &str) -> bool {
        let stream_ok = self.stream.as_deref().is_none_or(|s| s.is_empty() || s == line.stream);
        let q = self.q.as_deref().map(str::trim).unwrap_or_default();
        stream_ok && (q.is_empty() || text.to_lowercase().contains(&q.to_lowercase()))
    }
}

/// What the live section shows, read from the API.
struct Seen {
    run: RunView,
    logs: Result<Vec<LogLineView>, Refusal>,
    truncated: bool,
    log: RunLog,
    /// The endpoints whose revisions serve the run's model version.
    serving: Vec<String>,
    /// The run is final and its charges settled: nothing will change.
    settled: bool,
}

/// Which of a run's parts a render needs besides the run itself.
#[derive(Clone, Copy, Debug)]
struct Reads {
    /// What the current attempt printed.
    printed: bool,
    /// What people logged (metric series, params, images).
    logged: bool,
}

const EVERYTHING: Reads = Reads { printed: true, logged: true };

async fn see(console: &Console, api: &Api<'_>, id: &str, reads: Reads) -> Result<Seen, Refusal> {
    let run: RunView = api.get(&format!("/v1/runs/{id}")).await?;
    let (logs, truncated) = match reads.printed {
        false => (Ok(Vec::new()), false),
        true => match read_log(api, id).await {
            Ok((lines, truncated)) => (Ok(lines), truncated),
            Err(r) => (Err(r), false),
        },
    };
    let log: RunLog = if reads.logged {
        api.get(&format!("/v1/runs/{id}/log")).await.unwrap_or_default()
    } else {
        RunLog::default()
    };
    let charged = run.attempts.iter().all(|a| a.started.is_none() || a.charge.is_some());
    let quiet = console.app.clock.now().as_secs() - run.updated_at.as_secs() > SETTLE_WAIT_S;
    let settled = run.state.is_terminal() && (charged || quiet);
    let serving = match (&run.model_version, reads.logged) {
        (Some(mv), true) => serving(api, &run, mv).await,
        _ => Vec::new(),
    };
    Ok(Seen { run, logs, truncated, log, serving, settled })
}

/// The aliases of the project's endpoints with a revision of `mv` (none
/// when the viewer may not list them).
async fn serving(api: &Api<'_>, run: &RunView, mv: &mapi_domain::ModelVersionId) -> Vec<String> {
    let path = format!("/v1/tenants/{}/projects/{}/endpoints", run.tenant, run.project);
    let Ok(page) = api.get::<mapi_api::endpoints::EndpointPage>(&path).await else { return Vec::new() };
    page.endpoints
        .into_iter()
        .filter(|e| e.revisions.iter().any(|r| r.model_version.as_ref() == Some(mv)))
        .map(|e| e.alias)
        .collect()
}

/// The current attempt's lines, up to [`LOG_LINES`], and whether there are more.
async fn read_log(api: &Api<'_>, id: &str) -> Result<(Vec<LogLineView>, bool), Refusal> {
    let mut lines = Vec::new();
    let mut cursor = String::new();
    loop {
        let q = query(&[("limit", Some("1000")), ("cursor", Some(cursor.as_str()))]);
        let page: RunLogs = api.get(&format!("/v1/runs/{id}/logs{q}")).await?;
        lines.extend(page.lines);
        if lines.len() >= LOG_LINES {
            lines.truncate(LOG_LINES);
            return Ok((lines, true));
        }
        if !page.more || page.cursor.is_empty() || page.cursor == cursor {
            return Ok((lines, false));
        }
        cursor = page.cursor;
    }
}

async fn detail(
    State(console): State<Console>,
    viewer: Viewer,
    IdPath(id): IdPath,
    Query(lq): Query<LogQuery>,
) -> Response {
    let api = Api::new(&console, &viewer);
    let seen = match see(&console, &api, &id, EVERYTHING).await {
        Ok(seen) => seen,
        Err(r) => return refused(&viewer, Scope::default(), "Run", &r),
    };
    let run = &seen.run;
    let (t, p) = (run.tenant.to_string(), run.project.to_string());
    let title = match &run.labels.name {
        Some(name) => format!("Run {name}"),
        None => format!("Run {}", run.id),
    };
    let body = html! {
        dl.facts {
            dt { "Id" } dd { code { (run.id) } }
            @if let Some(note) = &run.labels.note { dt { "Note" } dd { (note) } }
            @if !run.labels.tags.is_empty() { dt { "Tags" } dd { (run.labels.tags.join(", ")) } }
            @if let Some(e) = &run.labels.experiment {
                dt { "Experiment" } dd { a href={"/console/t/" (t) "/p/" (p) "/experiments/" (e)} { (e) } }
            }
            @if let Some(of) = &run.retry_of { dt { "Retry of" } dd { a href={"/console/runs/" (of)} { code { (of) } } } }
            dt { "Method" } dd { (run.method) }
            dt { "Dataset" } dd { code { (run.dataset) } }
            dt { "Class" } dd { (run.class.as_str()) @if run.class != run.requested_class { " (asked " (run.requested_class.as_str()) ")" } }
            dt { "Timeout" } dd { (run.timeout_s) " s" }
            @if run.tasks > 1 { dt { "Tasks" } dd { (run.tasks) } }
            dt { "Submitted" } dd { (when(run.created_at)) " by " (run.created_by.as_str()) }
        }
        (params_table(run))
        (live_section(&viewer, &seen, &lq))
        h2 { "Log" }
        form.filters method="get" role="search" aria-label="Find in the log" {
            label { "Search the log" input type="search" name="q" value=[lq.q.as_deref()]; }
            label { "Stream"
                select name="stream" {
                    option value="" { "stdout and stderr" }
                    @for s in ["stdout", "stderr"] { option value=(s) selected[lq.stream.as_deref() == Some(s)] { (s) } }
                }
            }
            button type="submit" class="secondary" { "Search" }
            label.inline { input type="checkbox" data-follow="log" checked; " Follow the end of the log" }
        }
        (log_section(&seen, &lq))
    };
    page(StatusCode::OK, Some(&viewer), Scope::project(&t, &p), &title, body)
}

fn params_table(run: &RunView) -> Markup {
    html! {
        h2 { "Parameters" }
        @if run.params.is_empty() { p { "None: the method's defaults." } } @else {
            table.compact {
                thead { tr { th scope="col" { "Parameter" } th scope="col" { "Value" } } }
                tbody { @for (k, v) in &run.params { tr { td { code { (k) } } td { code { (v) } } } } }
            }
        }
    }
}

async fn log_live(
    State(console): State<Console>,
    viewer: Viewer,
    IdPath(id): IdPath,
    Query(lq): Query<LogQuery>,
) -> Response {
    let api = Api::new(&console, &viewer);
    let reads = Reads { printed: true, logged: false };
    fragment(see(&console, &api, &id, reads).await.map(|seen| log_section(&seen, &lq)))
}

/// The log, refreshed on its own beside the search form above it (which a
/// refresh must not wipe).
fn log_section(seen: &Seen, lq: &LogQuery) -> Markup {
    html! {
        section #log-live aria-label="Log" data-live={"/console/runs/" (seen.run.id) "/log" (lq.as_query())} data-final[seen.settled] {
            (log_view(seen, lq))
        }
    }
}

async fn live(
    State(console): State<Console>,
    viewer: Viewer,
    IdPath(id): IdPath,
    Query(lq): Query<LogQuery>,
) -> Response {
    let api = Api::new(&console, &viewer);
    let reads = Reads { printed: false, logged: true };
    fragment(see(&console, &api, &id, reads).await.map(|seen| live_section(&viewer, &seen, &lq)))
}

/// Everything on the page that can change, in one section.
fn live_section(viewer: &Viewer, seen: &Seen, lq: &LogQuery) -> Markup {
    let run = &seen.run;
    let fraction = run.progress.as_ref().map_or(0.0, |p| p.fraction.clamp(0.0, 1.0));
    let percent = (fraction * 100.0).round();
    let (t, p) = (run.tenant.as_str(), run.project.as_str());
    html! {
        section #live aria-live="polite" aria-label="State, progress and results"
            data-live={"/console/runs/" (run.id) "/live" (lq.as_query())} data-final[seen.settled] {
            h2 { "State: " (state_badge(run.state.as_str())) }
            @if let Some(w) = &run.waiting { p { "Waiting since " (when(w.since)) ": " (w.reason) } }
            @if let Some(e) = &run.error { div.problem { p { strong { (e.code.as_str()) } ": " (e.message) } } }
            @for w in &run.warnings { div.warning role="note" { p { strong { (w.code.as_str()) } ": " (w.message) } } }
            @if let Some(b) = run.params.get("dl.backend").and_then(|v| v.as_str()) { p { "Backend: " (b) } }
            label { "Progress " (percent) " %" progress max="100" value=(percent) { (percent) " %" } }
            @if let Some(m) = run.progress.as_ref().and_then(|p| p.message.as_deref()) { p.meta { (m) } }
            dl.facts {
                dt { "Cost" } dd { (money(run.cost.charged_micros, &run.cost.currency)) " charged"
                    @if run.state.is_terminal() && !seen.settled { " (being settled)" }
                    "; estimate " (money(run.cost.estimate_micros, &run.cost.currency)) span.meta { " (" (run.cost.price_table) ")" } }
                dt { "Model version" } dd {
                    @match &run.model_version {
                        Some(mv) => {
                            a href={"/console/t/" (t) "/p/" (p) "/models#" (mv)} { code { (mv) } }
                            @if !seen.serving.is_empty() { ", served by " (seen.serving.join(", ")) }
                        },
                        None => "none",
                    }
                }
            }
            @if !run.state.is_terminal() {
                form method="post" action={"/console/runs/" (run.id) "/cancel"} {
                    (csrf(viewer))
                    button.danger type="submit" { "Cancel this run" }
                }
            }
            (metrics(seen))
            (images(run, &seen.log))
            (outputs(run))
            (children(run))
            (attempts(run))
            h2 { "Timeline" }
            ol.timeline {
                @for h in &run.history {
                    li { (when(h.at)) " — " (state_badge(h.to.as_str())) " (" (h.reason.as_str()) ", attempt " (h.attempt) ")" }
                }
            }
            @if !seen.settled { p.meta { "This section refreshes itself; without JavaScript, " a href={"/console/runs/" (run.id) (lq.as_query())} { "reload" } "." } }
        }
    }
}

/// One chart per logged series; the method's reported values and the
/// logged params beside them.
fn metrics(seen: &Seen) -> Markup {
    let run = &seen.run;
    let reported = run.progress.as_ref().map(|p| &p.metrics).filter(|m| !m.is_empty());
    html! {
        h2 { "Metrics" }
        @if seen.log.series.is_empty() && reported.is_none() { p { "None reported or logged yet." } }
        @for (i, (name, points)) in seen.log.series.iter().enumerate() {
            @let line = Line { label: name.clone(), points: points.iter().map(|p| (p.step as f64, p.value)).collect() };
            figure.chart {
                (svg(lines(&format!("metric-{i}"), name, &format!("{name} over steps, {} points", points.len()), &[line])))
                figcaption { (name) ": " (number(points.iter().max_by_key(|p| p.step).map_or(0.0, |p| p.value))) " at step " (points.iter().map(|p| p.step).max().unwrap_or(0)) }
            }
        }
        @if let Some(m) = reported {
            table.compact {
                caption { "Reported by the method" }
                thead { tr { th scope="col" { "Metric" } th.num scope="col" { "Value" } } }
                tbody { @for (k, v) in m { tr { td { (k) } td.num { (number(*v)) } } } }
            }
        }
        @if !seen.log.params.is_empty() {
            table.compact {
                caption { "Logged params" }
                thead { tr { th scope="col" { "Param" } th scope="col" { "Value" } } }
                tbody { @for (k, v) in &seen.log.params { tr { td { code { (k) } } td { code { (v) } } } } }
            }
        }
    }
}

fn images(run: &RunView, log: &RunLog) -> Markup {
    html! {
        @if !log.images.is_empty() {
            h2 { "Images" }
            div.images {
                @for (name, image) in &log.images {
                    figure {
                        img src={"/console/runs/" (run.id) "/images/" (name) "?at=" (image.at.as_secs())} alt={"Image " (name) " logged to the run"};
                        figcaption { (name) @if let Some(s) = image.step { " (step " (s) ")" } " · " (size(image.size)) }
                    }
                }
            }
        }
    }
}

fn outputs(run: &RunView) -> Markup {
    html! {
        h2 { "Outputs" }
        @if run.outputs.is_empty() {
            p { @if run.state.is_terminal() { "None." } @else { "None yet." } }
        } @else {
            table.compact {
                thead { tr { th scope="col" { "Output" } th.num scope="col" { "Size" } th scope="col" { span.sr-only { "Actions" } } } }
                tbody {
                    @for o in &run.outputs {
                        tr {
                            td { code { (o.name) } }
                            td.num { (size(o.size)) }
                            td {
                                a href={"/console/runs/" (run.id) "/preview/" (o.name)} aria-label={"Preview " (o.name)} { "Preview" }
                                " · "
                                a href={"/console/runs/" (run.id) "/outputs/" (o.name)} download aria-label={"Download " (o.name)} { "Download" }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn children(run: &RunView) -> Markup {
    html! {
        @if !run.children.is_empty() {
            h2 { "Tasks" }
            table.compact {
                thead { tr { th.num scope="col" { "Task" } th scope="col" { "State" } th.num scope="col" { "Done" } th.num scope="col" { "Charged" } th scope="col" { "Outputs" } } }
                tbody {
                    @for c in &run.children {
                        tr {
                            td.num { (c.index) }
                            td { (serde_json::to_value(c.state).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()) @if c.reused { " (reused)" } }
                            td.num { ((c.fraction * 100.0).round()) " %" }
                            td.num { (money(c.charged_micros, &run.cost.currency)) }
                            td { (c.outputs.join(", ")) }
                        }
                    }
                }
            }
        }
    }
}

fn attempts(run: &RunView) -> Markup {
    html! {
        h2 { "Attempts" }
        table.compact {
            thead { tr { th.num scope="col" { "Attempt" } th scope="col" { "Class" } th.num scope="col" { "GPUs" } th scope="col" { "Started" } th scope="col" { "Finished" } th scope="col" { "Ended" } th.num scope="col" { "Charge" } } }
            tbody {
                @for a in &run.attempts {
                    tr {
                        td.num { (a.attempt) } td { (a.class.as_str()) } td.num { (a.gpus) }
                        td { @if let Some(s) = a.started { (when(s)) } @else { "not yet" } }
                        td { @if let Some(f) = a.finished { (when(f)) } }
                        td { @if let Some(s) = &a.status { (s) } }
                        td.num { @if let Some(c) = &a.charge { (money(c.amount_micros, &c.currency)) } }
                    }
                }
            }
        }
    }
}

/// The current attempt's log in words, each line marked with its stream.
fn log_view(seen: &Seen, lq: &LogQuery) -> Markup {
    let filtered = lq.q.as_deref().is_some_and(|q| !q.trim().is_empty()) || lq.stream.is_some();
    html! {
        @match &seen.logs {
            Err(r) => (refusal_box(r)),
            Ok(lines) if lines.is_empty() => p { "Nothing printed yet." },
            Ok(lines) => {
                @let shown: Vec<(&LogLineView, String)> = lines.iter()
                    .map(|l| (l, event_in_words(&l.text).unwrap_or_else(|| l.text.clone())))
                    .filter(|(l, text)| lq.keeps(l, text))
                    .collect();
                @if filtered { p.meta { (shown.len()) " of " (lines.len()) " lines match." } }
                pre.log #log tabindex="0" aria-label="Log of the current attempt" {
                    @for (line, text) in &shown {
                        span class={"ln " (line.stream)} {
                            @if line.stream == "stderr" { span.stream { "stderr " } }
                            @if seen.run.tasks > 1 { "[task " (line.task) "] " }
                            (text) "\n"
                        }
                    }
                }
                @if seen.truncated { p.meta { "The first " (LOG_LINES) " lines; " code { "mapi runs logs " (seen.run.id) } " prints them all." } }
            }
        }
    }
}

/// An output's download: the API counts it and answers where the bytes are; the browser goes there.
async fn output(
    State(console): State<Console>,
    viewer: Viewer,
    axum::extract::Path((id, name)): axum::extract::Path<(String, String)>,
) -> Response {
    let Some((id, name)) = output_path(&id, &name) else {
        return refused(&viewer, Scope::default(), "No such run", &Refusal::invalid("not a run id"));
    };
    match Api::new(&console, &viewer).redirect(&format!("/v1/runs/{id}/outputs/{name}")).await {
        Ok(location) => Redirect::to(&location).into_response(),
        Err(r) => refused(&viewer, Scope::default(), "Download refused", &r),
    }
}

/// A run id and an output name from a path, only of the characters they are made of.
fn output_path(id: &str, name: &str) -> Option<(mapi_domain::RunId, String)> {
    let id = mapi_domain::RunId::parse(id).ok()?;
    let name: String = name.chars().filter(|c| c.is_ascii_alphanumeric() || "._-=/".contains(*c)).collect();
    Some((id, name))
}

/// The most bytes of an output a preview reads.
const PREVIEW_BYTES: usize = 1_048_576;
/// The most rows of a table a preview shows.
const PREVIEW_ROWS: usize = 50;

/// An output shown on a page: a table's first rows, JSON laid out, an
/// image, or the first of its text; anything else is offered to download.
async fn preview(
    State(console): State<Console>,
    viewer: Viewer,
    axum::extract::Path((id, name)): axum::extract::Path<(String, String)>,
) -> Response {
    let Some((id, name)) = output_path(&id, &name) else {
        return refused(&viewer, Scope::default(), "No such run", &Refusal::invalid("not a run id"));
    };
    let api = Api::new(&console, &viewer);
    let bytes = match api.redirect(&format!("/v1/runs/{id}/outputs/{name}")).await {
        Ok(location) => console.fetch_bytes(&location, PREVIEW_BYTES).await,
        Err(r) => Err(r),
    };
    let body = match &bytes {
        Err(r) => refusal_box(r),
        Ok((bytes, cut)) => html! {
            p { a href={"/console/runs/" (id)} { "Back to the run" } " · " a href={"/console/runs/" (id) "/outputs/" (name)} download { "Download " (name) } }
            @if *cut { p.meta { "The first " (size(PREVIEW_BYTES as u64)) " is shown." } }
            (preview_of(&name, bytes))
        },
    };
    let status = bytes.as_ref().err().map_or(StatusCode::OK, |r| r.status);
    page(status, Some(&viewer), Scope::default(), &format!("Output {name}"), body)
}

/// What a preview shows of `bytes` named `name`.
pub(crate) fn preview_of(name: &str, bytes: &[u8]) -> Markup {
    if let Some(kind) = mapi_api::tracking::image_type(bytes) {
        let data = data_uri(kind, bytes);
        return html! { img.preview src=(data) alt={"The output " (name)}; };
    }
    // Text cut mid-character at the preview's end is still text.
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default()
        }
        Err(_) => return html! { p { "Not text: download it to open it." } },
    };
    if name.ends_with(".csv") || name.ends_with(".tsv") {
        let sep = if name.ends_with(".tsv") { '\t' } else { ',' };
        return csv_table(text, sep);
    }
    if name.ends_with(".json")
        && let Ok(v) = serde_json::from_str::<serde_json::Value>(text)
    {
        return html! { pre.preview tabindex="0" { (serde_json::to_string_pretty(&v).unwrap_or_default()) } };
    }
    html! { pre.preview tabindex="0" { (text) } }
}

/// The first rows of a delimited table as an HTML table (quoted fields kept whole).
fn csv_table(text: &str, sep: char) -> Markup {
    let rows: Vec<Vec<String>> = text.lines().take(PREVIEW_ROWS + 1).map(|l| split_row(l, sep)).collect();
    let total = text.lines().count().saturating_sub(1);
    html! {
        @if let Some((head, rest)) = rows.split_first() {
            p.meta { (rest.len()) " of " (total) " rows." }
            div.scroll {
                table.compact {
                    thead { tr { @for h in head { th scope="col" { (h) } } } }
                    tbody { @for r in rest { tr { @for c in r { td { (c) } } } } }
                }
            }
        }
    }
}

/// One line of a delimited table, `"…"` fields unquoted (`""` is a quote).
fn split_row(line: &str, sep: char) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            ('"', _) => quoted = !quoted,
            (c, false) if c == sep => fields.push(std::mem::take(&mut field)),
            (c, _) => field.push(c),
        }
    }
    fields.push(field);
    fields
}

fn data_uri(kind: &str, bytes: &[u8]) -> String {
    use base64::Engine;
    format!("data:{kind};base64,{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// An image logged to the run, served from the console's own origin (the
/// API's link may be on another host the page's policy does not allow).
async fn image(
    State(console): State<Console>,
    viewer: Viewer,
    axum::extract::Path((id, name)): axum::extract::Path<(String, String)>,
) -> Response {
    let Some((id, name)) = output_path(&id, &name) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    #[derive(Deserialize)]
    struct Link {
        url: String,
    }
    let api = Api::new(&console, &viewer);
    let link: Result<Link, Refusal> = api.post_empty(&format!("/v1/runs/{id}/images/{name}/url")).await;
    let fetched = match link {
        Ok(l) => console.fetch_bytes(&l.url, mapi_api::tracking::MAX_IMAGE_BYTES).await,
        Err(r) => Err(r),
    };
    match fetched {
        Ok((bytes, false)) => match mapi_api::tracking::image_type(&bytes) {
            Some(kind) => {
                ([(header::CONTENT_TYPE, kind), (header::CACHE_CONTROL, "private, max-age=3600")], bytes)
                    .into_response()
            }
            None => StatusCode::UNSUPPORTED_MEDIA_TYPE.into_response(),
        },
        Ok((_, true)) => StatusCode::PAYLOAD_TOO_LARGE.into_response(),
        Err(r) => r.status.into_response(),
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
    fn a_table_preview_keeps_quoted_fields_whole() {
        assert_eq!(split_row(r#"a,"b, c","say ""hi""",d"#, ','), vec!["a", "b, c", r#"say "hi""#, "d"]);
        assert_eq!(split_row("x\ty", '\t'), vec!["x", "y"]);
        let table = csv_table("y,x\n1,2\n3,4\n", ',').into_string();
        assert!(table.contains("<th scope=\"col\">y</th>") && table.contains("<td>4</td>"), "{table}");
        assert!(table.contains("2 of 2 rows."));
    }

    #[test]
    fn a_preview_shows_json_laid_out_and_images_inline() {
        let json = preview_of("model.json", br#"{"a":[1,2]}"#).into_string();
        assert!(json.contains("&quot;a&quot;: ["), "{json}");
        let png = preview_of("plot.png", b"\x89PNG\r\n\x1a\n....").into_string();
        assert!(png.contains("src=\"data:image/png;base64,"), "{png}");
        let bytes = preview_of("blob.bin", &[0xff, 0xfe, 0x00]).into_string();
        assert!(bytes.contains("Not text"), "{bytes}");
    }

    #[test]
    fn the_log_filter_matches_words_and_streams() {
        let line =
            |stream: &str| LogLineView { task: 0, stream: stream.into(), at: None, text: String::new() };
        let lq = LogQuery { q: Some("Metric".into()), stream: Some("stdout".into()) };
        assert!(lq.keeps(&line("stdout"), "04:00 metric r2 = 0.5"));
        assert!(!lq.keeps(&line("stderr"), "04:00 metric r2 = 0.5"));
        assert!(!lq.keeps(&line("stdout"), "progress 10%"));
        assert!(LogQuery::default().keeps(&line("stderr"), "anything"));
        assert_eq!(lq.as_query(), "?q=Metric&stream=stdout");
    }
}
