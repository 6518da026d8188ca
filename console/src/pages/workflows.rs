//! Workflows and governance: a project's workflows (create one from its
//! YAML, start a run), its workflow runs, the policy in force; a workflow
//! run as a graph of its nodes by depth, each with its state, its runs and,
//! for a `validate` node, its validation's checks and decisions with the
//! reviewer's approve and reject; cancel and resume.

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use mapi_api::governance::{PolicyView, ValidationView};
use mapi_api::workflows::{Kind, NodeView, WorkflowPage, WorkflowRunPage, WorkflowRunView};
use maud::{Markup, html};
use reqwest::Method;
use serde_json::json;

use super::{IdPath, ProjectPath};
use crate::Console;
use crate::api::{Api, Refusal};
use crate::html::{Scope, csrf, done, money, page, refusal_box, refused, state_badge, when};
use crate::session::{Posted, Viewer};

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/console/t/{tenant}/p/{project}/workflows", get(list).post(create))
        .route("/console/t/{tenant}/p/{project}/workflows/run", post(start))
        .route("/console/workflow-runs/{id}", get(detail))
        .route("/console/workflow-runs/{id}/live", get(live))
        .route("/console/workflow-runs/{id}/act", post(act))
}

async fn list(State(console): State<Console>, viewer: Viewer, at: ProjectPath) -> Response {
    render(&console, &viewer, &at, None).await
}

async fn render(
    console: &Console,
    viewer: &Viewer,
    at: &ProjectPath,
    flash: Option<Result<Markup, Refusal>>,
) -> Response {
    let (t, p) = (&at.tenant, &at.project);
    let api = Api::new(console, viewer);
    let base = format!("/v1/tenants/{t}/projects/{p}");
    let workflows: Result<WorkflowPage, Refusal> = api.get(&format!("{base}/workflows")).await;
    let runs: Result<WorkflowRunPage, Refusal> = api.get(&format!("{base}/workflow-runs")).await;
    let policy: Result<PolicyView, Refusal> = api.get(&format!("{base}/policy")).await;
    let status = match (&flash, &workflows) {
        (Some(Err(r)), _) | (_, Err(r)) => r.status,
        _ => axum::http::StatusCode::OK,
    };
    let action = format!("/console/t/{t}/p/{p}/workflows");
    let body = html! {
        @match &flash { Some(Ok(m)) => (m), Some(Err(r)) => (refusal_box(r)), None => {} }
        h2 { "Workflow runs" }
        @match &runs {
            Err(r) => (refusal_box(r)),
            Ok(page) if page.runs.is_empty() => p { "No workflow run yet: start one below." },
            Ok(page) => table {
                thead { tr { th scope="col" { "Run" } th scope="col" { "Workflow" } th scope="col" { "State" } th.num scope="col" { "Nodes done" } th scope="col" { "By" } th scope="col" { "Started" } } }
                tbody { @for r in &page.runs { tr {
                    td { a href={"/console/workflow-runs/" (r.id)} { code { (r.id) } } }
                    td { (r.workflow) " v" (r.version) }
                    td { (state_badge(r.state.as_str())) }
                    td.num { (r.nodes.iter().filter(|n| n.state == mapi_api::workflows::NodeState::Succeeded).count()) "/" (r.nodes.len()) }
                    td { (r.started_by) } td { (when(r.created_at)) }
                } } }
            },
        }
        h2 { "Workflows" }
        @match &workflows {
            Err(r) => (refusal_box(r)),
            Ok(w) if w.workflows.is_empty() => p { "No workflow yet: create one below (or mapi workflows create NAME --file FILE)." },
            Ok(w) => {
                table {
                    thead { tr { th scope="col" { "Name" } th.num scope="col" { "Version" } th scope="col" { "Nodes" } th scope="col" { "Updated" } } }
                    tbody { @for wf in &w.workflows { tr {
                        td { (wf.name) } td.num { (wf.version) }
                        td { @for (i, n) in wf.definition.nodes.iter().enumerate() { @if i > 0 { ", " } code { (n.id) } " (" (n.kind.as_str()) ")" } }
                        td { (when(wf.updated_at)) " by " (wf.updated_by) }
                    } } }
                }
                form.inline method="post" action={(action) "/run"} {
                    (csrf(viewer))
                    label { "Workflow" select name="workflow" required { @for wf in &w.workflows { option value=(wf.name) { (wf.name) " (v" (wf.version) ")" } } } }
                    button type="submit" { "Start a run" }
                }
            }
        }
        h2 { "New workflow" }
        form.stack method="post" action=(action) {
            (csrf(viewer))
            label { "Name (a lowercase letter, then letters, digits and -)" input name="name" required pattern="[a-z][a-z0-9-]{0,62}" autocomplete="off"; }
            label { "Definition (YAML or JSON: nodes of kind run, search.grid, validate and deploy)"
                textarea name="definition" rows="12" required placeholder="nodes:\n  - id: fit\n    kind: run\n    method: tabular.linear\n    dataset: longley.csv\n    params: {y: employed}" {} }
            button type="submit" { "Create" }
        }
        h2 { "Governance policy in force" }
        @match &policy {
            Err(r) => (refusal_box(r)),
            Ok(v) => (policy_section(v)),
        }
    };
    page(status, Some(viewer), Scope::project(t.as_str(), p.as_str()), "Workflows and governance", body)
}

fn policy_section(v: &PolicyView) -> Markup {
    let f = &v.in_force;
    html! {
        @if f.is_empty() {
            p { "Nothing: versions serve without validation. Project admins set one with " code { "mapi policies set" } "." }
        } @else {
            ul {
                @for t in &f.thresholds { li { "Check " code { (t) } } }
                @for i in &f.improvements { li { "Improve " code { (i.metric) } " by at least " (i.by) } }
                li { "Approvals by reviewers: " (f.approvals) }
                @if let Some(d) = f.expires_after_days { li { "An approval admits promotions for " (d) " days" } }
            }
        }
    }
}

async fn create(State(console): State<Console>, at: ProjectPath, posted: Posted) -> Response {
    let (t, p) = (&at.tenant, &at.project);
    let body = json!({"name": posted.get("name").unwrap_or_default(), "definition": posted.get("definition").unwrap_or_default()});
    let answer = Api::new(&console, &posted.viewer)
        .send::<mapi_api::workflows::WorkflowView, _>(
            Method::POST,
            &format!("/v1/tenants/{t}/projects/{p}/workflows"),
            &body,
        )
        .await
        .map(|w| done(&format!("Workflow {} is created at version {}.", w.name, w.version)));
    render(&console, &posted.viewer, &at, Some(answer)).await
}

async fn start(State(console): State<Console>, at: ProjectPath, posted: Posted) -> Response {
    let (t, p) = (&at.tenant, &at.project);
    let name = posted.get("workflow").unwrap_or_default();
    if super::plain_id(name).is_err() {
        return render(&console, &posted.viewer, &at, Some(Err(Refusal::invalid("choose a workflow")))).await;
    }
    let url = format!("/v1/tenants/{t}/projects/{p}/workflows/{name}/runs");
    match Api::new(&console, &posted.viewer).send::<WorkflowRunView, _>(Method::POST, &url, &json!({})).await
    {
        Ok(r) => Redirect::to(&format!("/console/workflow-runs/{}", r.id)).into_response(),
        Err(r) => render(&console, &posted.viewer, &at, Some(Err(r))).await,
    }
}

async fn detail(State(console): State<Console>, viewer: Viewer, IdPath(id): IdPath) -> Response {
    let api = Api::new(&console, &viewer);
    let run: WorkflowRunView = match api.get(&format!("/v1/workflow-runs/{id}")).await {
        Ok(r) => r,
        Err(r) => return refused(&viewer, Scope::default(), "Workflow run", &r),
    };
    let mut validations = Vec::new();
    for n in run.nodes.iter().filter(|n| n.kind == Kind::Validate) {
        if let Some(v) = &n.validation {
            validations.push(api.get::<ValidationView>(&format!("/v1/validations/{v}")).await);
        }
    }
    let act = format!("/console/workflow-runs/{}/act", run.id);
    let body = html! {
        p.meta { (run.workflow) " version " (run.version) ", attempt " (run.attempt) ", started by " (run.started_by) " " (when(run.created_at))
            ". Estimate " (money(run.estimate.amount_micros, &run.estimate.currency)) " (its runs, one attempt each, at list prices)." }
        (run_section(&viewer, &run))
        @for v in &validations {
            @match v {
                Err(r) => (refusal_box(r)),
                Ok(v) => (validation_section(&viewer, &act, v)),
            }
        }
    };
    page(
        axum::http::StatusCode::OK,
        Some(&viewer),
        Scope::default(),
        &format!("Workflow run {}", run.id),
        body,
    )
}

/// What changes of a workflow run as it goes: its state, its graph and
/// the actions its state allows. With JavaScript it is replaced from
/// `…/live` until the run is over; a validation's decision form below it
/// is left alone.
fn run_section(viewer: &Viewer, run: &WorkflowRunView) -> Markup {
    use mapi_api::workflows::RunState;
    let act = format!("/console/workflow-runs/{}/act", run.id);
    let running = run.state == RunState::Running;
    html! {
        section #live aria-live="polite" aria-label="State and nodes"
            data-live={"/console/workflow-runs/" (run.id) "/live"} data-final[!running] {
            p { (state_badge(run.state.as_str())) }
            (graph(run))
            div.pager {
                @if running {
                    form.inline method="post" action=(act) { (csrf(viewer)) button.danger type="submit" name="action" value="cancel" { "Cancel the run" } }
                }
                @if matches!(run.state, RunState::Failed | RunState::Cancelled) {
                    form.inline method="post" action=(act) { (csrf(viewer)) button type="submit" name="action" value="resume" { "Resume (what did not succeed)" } }
                }
            }
        }
    }
}

async fn live(State(console): State<Console>, viewer: Viewer, IdPath(id): IdPath) -> Response {
    let run = Api::new(&console, &viewer).get::<WorkflowRunView>(&format!("/v1/workflow-runs/{id}")).await;
    super::fragment(run.map(|run| run_section(&viewer, &run)))
}

/// The nodes by depth (a node one column right of the deepest node it
/// needs), each a card with its state, what it made and why it stopped.
fn graph(run: &WorkflowRunView) -> Markup {
    let mut depth: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for _ in 0..run.nodes.len() {
        for n in &run.nodes {
            let d = n.needs.iter().filter_map(|x| depth.get(x.as_str())).map(|d| d + 1).max().unwrap_or(0);
            depth.insert(&n.id, d);
        }
    }
    let columns = depth.values().max().map_or(0, |d| d + 1);
    html! {
        div.workflow-graph role="list" aria-label="The workflow run's nodes, by the order they run in" {
            @for c in 0..columns {
                div.layer {
                    @for n in run.nodes.iter().filter(|n| depth.get(n.id.as_str()) == Some(&c)) { (node_card(n)) }
                }
            }
        }
    }
}

fn node_card(n: &NodeView) -> Markup {
    html! {
        section.node role="listitem" aria-label={"Node " (n.id)} {
            h3 { code { (n.id) } " " (state_badge(n.state.as_str())) }
            p.meta { (n.kind.as_str())
                @if !n.needs.is_empty() { ", after " @for (i, d) in n.needs.iter().enumerate() { @if i > 0 { ", " } code { (d) } } }
                @if let Some(e) = &n.endpoint { ", on endpoint " code { (e) } }
                @if n.tries > 1 { ", try " (n.tries) } }
            @if !n.runs.is_empty() {
                ul { @for c in &n.runs { li {
                    a href={"/console/runs/" (c.run)} { code { (c.run) } } " "
                    (state_badge(c.ended.as_deref().unwrap_or("running")))
                    @if !c.combination.is_empty() { " " (mapi_api::workflows::show_combination(&c.combination)) }
                    @if let Some(m) = c.metric { " → " (mapi_api::words::number(m)) }
                    @if n.best_run.as_ref() == Some(&c.run) { " " strong { "best" } }
                } } }
            }
            @if let Some(v) = &n.model_version { p { "Model version " code { (v) } } }
            @if let Some(d) = &n.detail { p { (d) } }
        }
    }
}

fn validation_section(viewer: &Viewer, act: &str, v: &ValidationView) -> Markup {
    let s = &v.validation;
    html! {
        section aria-label={"Validation " (v.id)} {
            h2 { "Validation " code { (v.id) } " " (state_badge(s.state.as_str())) }
            p.meta { "Of " code { (v.model_version) } ", submitted by " (s.submitted_by) " " (when(s.submitted_at)) ". "
                (s.approvals()) " of " (s.policy.approvals) " approvals." }
            table {
                caption { "Automatic checks" }
                thead { tr { th scope="col" { "Check" } th scope="col" { "Result" } th scope="col" { "Found" } } }
                tbody { @for c in &s.checks { tr { td { code { (c.check) } } td { @if c.passed { "pass" } @else { strong { "FAIL" } } } td { (c.detail) } } } }
            }
            @if !s.decisions.is_empty() {
                ul { @for d in &s.decisions { li { (if d.approve { "Approved" } else { "Rejected" }) " by " (d.by) " " (when(d.at)) ": " (d.reason) } } }
            }
            @if s.state == mapi_api::governance::State::Pending {
                form.stack method="post" action=(act) {
                    (csrf(viewer))
                    input type="hidden" name="validation" value=(v.id);
                    label { "Reason (kept with the decision and in the audit log)" input name="reason" required autocomplete="off"; }
                    div.pager {
                        button type="submit" name="action" value="approve" { "Approve" }
                        button.danger type="submit" name="action" value="reject" { "Reject" }
                    }
                }
            }
        }
    }
}

async fn act(State(console): State<Console>, IdPath(id): IdPath, posted: Posted) -> Response {
    let api = Api::new(&console, &posted.viewer);
    let back = Redirect::to(&format!("/console/workflow-runs/{id}")).into_response();
    let answer = match posted.get("action").unwrap_or_default() {
        "cancel" => {
            api.post_empty::<WorkflowRunView>(&format!("/v1/workflow-runs/{id}/cancel")).await.map(|_| ())
        }
        "resume" => {
            api.post_empty::<WorkflowRunView>(&format!("/v1/workflow-runs/{id}/resume")).await.map(|_| ())
        }
        decision @ ("approve" | "reject") => {
            let validation = posted.get("validation").unwrap_or_default();
            match super::plain_id(validation) {
                Err(_) => Err(Refusal::invalid("no validation named")),
                Ok(v) => {
                    let body =
                        json!({"decision": decision, "reason": posted.get("reason").unwrap_or_default()});
                    api.send::<ValidationView, _>(
                        Method::POST,
                        &format!("/v1/validations/{v}/approvals"),
                        &body,
                    )
                    .await
                    .map(|_| ())
                }
            }
        }
        _ => Err(Refusal::invalid("choose cancel, resume, approve or reject")),
    };
    match answer {
        Ok(()) => back,
        Err(r) => refused(&posted.viewer, Scope::default(), "Refused", &r),
    }
}
