//! `mapi workflows`: define workflows (a YAML or JSON file of nodes), run
//! them, watch, cancel and resume their runs.

use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use mapi_api::workflows::{
    CreateWorkflow, Kind, NodeState, NodeView, RunState, StartWorkflow, UpdateWorkflow, WorkflowPage,
    WorkflowRunPage, WorkflowRunView, WorkflowView,
};
use reqwest::Method;
use serde_json::{Value, json};

use crate::client::Client;
use crate::output::{Table, print};
use crate::webhooks::Where;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[derive(Debug, Subcommand)]
pub enum WorkflowsCmd {
    /// Create a workflow from a YAML or JSON file of nodes (editors).
    Create {
        /// A lowercase letter, then up to 62 of a-z, 0-9 and -.
        name: String,
        /// The definition: `nodes:` with run, search.grid, validate and deploy nodes.
        #[arg(long, short = 'f')]
        file: std::path::PathBuf,
        #[command(flatten)]
        at: Where,
    },
    /// The project's workflows.
    Ls {
        #[command(flatten)]
        at: Where,
    },
    /// A workflow's definition, at its latest version or --version N.
    Get {
        name: String,
        #[arg(long)]
        version: Option<u32>,
        #[command(flatten)]
        at: Where,
    },
    /// Replace a workflow's definition: its next version (editors).
    Update {
        name: String,
        #[arg(long, short = 'f')]
        file: std::path::PathBuf,
        /// Refuse if the latest version is not this one (someone else updated it).
        #[arg(long)]
        version: Option<u32>,
        #[command(flatten)]
        at: Where,
    },
    /// Delete a workflow and its versions; its runs stay (admins).
    Rm {
        name: String,
        #[command(flatten)]
        at: Where,
    },
    /// Start a run of a workflow (runners); --watch follows it.
    Run {
        name: String,
        #[arg(long)]
        version: Option<u32>,
        /// Follow it until it ends or waits for a reviewer.
        #[arg(long)]
        watch: bool,
        #[command(flatten)]
        at: Where,
    },
    /// The project's workflow runs, newest first (--workflow NAME: one workflow's).
    Runs {
        #[arg(long)]
        workflow: Option<String>,
        #[command(flatten)]
        at: Where,
    },
    /// A workflow run: each node's state and the runs it made (--watch follows it).
    Status {
        /// The workflow run (wfr_…).
        id: String,
        #[arg(long)]
        watch: bool,
    },
    /// Cancel a workflow run and the runs it started.
    Cancel { id: String },
    /// Resume a failed or cancelled workflow run: only what did not succeed runs again.
    Resume {
        id: String,
        #[arg(long)]
        watch: bool,
    },
}

fn definition(file: &std::path::Path) -> Result<Value> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(Value::String(text))
}

fn describe_workflow(w: &WorkflowView) -> String {
    let mut out = format!("workflow {}  version {} of {}\n", w.name, w.version, w.latest);
    if let Some(d) = &w.definition.description {
        out.push_str(&format!("{d}\n"));
    }
    let mut table = Table::new(&["NODE", "KIND", "NEEDS", "WHAT"]).flex(&[3]);
    for n in &w.definition.nodes {
        let what = match n.kind {
            Kind::Run => format!(
                "{} on {}",
                n.method.clone().unwrap_or_default(),
                n.dataset.clone().unwrap_or_default()
            ),
            Kind::Grid => format!(
                "{} over {} ({} {})",
                n.method.clone().unwrap_or_default(),
                n.grid.as_ref().map(|g| g.keys().cloned().collect::<Vec<_>>().join(", ")).unwrap_or_default(),
                match n.goal.unwrap_or_default() {
                    mapi_api::workflows::Goal::Maximize => "max",
                    mapi_api::workflows::Goal::Minimize => "min",
                },
                n.metric.clone().unwrap_or_default()
            ),
            Kind::Validate => "its model version, under the policy in force".to_owned(),
            Kind::Deploy => format!("promote on {}", n.endpoint.clone().unwrap_or_default()),
        };
        table.row(vec![n.id.clone().into(), n.kind.as_str().into(), n.needs.join(", ").into(), what.into()]);
    }
    out.push_str(&table.render(crate::output::terminal_width(), false));
    out
}

/// What to do next about a node, in words.
fn next_step(n: &NodeView) -> String {
    match (n.kind, n.state) {
        (Kind::Validate, NodeState::Running) => format!(
            "waiting for a reviewer: mapi models approve {} --reason \"…\"",
            n.validation.clone().unwrap_or_default()
        ),
        _ => n.detail.clone().unwrap_or_default(),
    }
}

fn describe_run(r: &WorkflowRunView) -> String {
    let mut out = format!(
        "workflow run {}  {}  ({} v{}, attempt {})\nestimate     {:.6} {} (its runs, one attempt each, at list prices)\n",
        r.id,
        r.state.as_str(),
        r.workflow,
        r.version,
        r.attempt,
        r.estimate.amount_micros as f64 / 1e6,
        r.estimate.currency
    );
    let mut table = Table::new(&["NODE", "KIND", "STATE", "DETAIL"]).flex(&[3]);
    for n in &r.nodes {
        table.row(vec![
            n.id.clone().into(),
            n.kind.as_str().into(),
            crate::output::Cell::state(n.state.as_str()),
            next_step(n).into(),
        ]);
        for c in &n.runs {
            let combo = mapi_api::workflows::show_combination(&c.combination);
            let metric = c.metric.map(|m| format!(" {m:.6}")).unwrap_or_default();
            let best = if n.best_run.as_ref() == Some(&c.run) { " best" } else { "" };
            let state = c.ended.clone().unwrap_or_else(|| "running".to_owned());
            table.row(vec![
                format!("  {}", c.run).into(),
                "".into(),
                crate::output::Cell::state(&state),
                format!("{combo}{metric}{best}").into(),
            ]);
        }
        if let Some(v) = &n.model_version {
            table.row(vec!["".into(), "".into(), "".into(), format!("model version {v}").into()]);
        }
    }
    out.push_str(&table.render(crate::output::terminal_width(), crate::output::colour()));
    out
}

/// Whether a watch is over: the run ended, or waits only on people.
fn settled(r: &WorkflowRunView) -> bool {
    r.state != RunState::Running
        || r.nodes.iter().filter(|n| n.state == NodeState::Running).all(|n| n.kind == Kind::Validate)
            && r.nodes.iter().any(|n| n.state == NodeState::Running)
}

async fn watch(client: &Client, id: &str) -> Result<WorkflowRunView> {
    loop {
        let r: WorkflowRunView = client.get(&format!("/v1/workflow-runs/{id}")).await?;
        if settled(&r) {
            return Ok(r);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The exit status of a shown run: a failed or cancelled one is a failure.
fn status(r: &WorkflowRunView) -> ExitCode {
    match r.state {
        RunState::Failed | RunState::Cancelled => ExitCode::FAILURE,
        RunState::Running | RunState::Succeeded => ExitCode::SUCCESS,
    }
}

pub async fn run(
    client: &Client,
    scope: impl Fn(Option<String>, Option<String>) -> Result<(String, String)>,
    cmd: WorkflowsCmd,
    json_out: bool,
) -> Result<ExitCode> {
    let base = |at: Where| -> Result<String> {
        let (t, p) = scope(at.tenant, at.project)?;
        Ok(format!("/v1/tenants/{t}/projects/{p}"))
    };
    let shown = |r: WorkflowRunView| -> Result<ExitCode> {
        print(json_out, &r, || describe_run(&r))?;
        Ok(status(&r))
    };
    match cmd {
        WorkflowsCmd::Create { name, file, at } => {
            let body = CreateWorkflow { name, definition: definition(&file)? };
            let url = format!("{}/workflows", base(at)?);
            let w: WorkflowView = client.send(client.request(Method::POST, &url).json(&body)).await?;
            print(json_out, &w, || describe_workflow(&w))?;
        }
        WorkflowsCmd::Ls { at } => {
            let page: WorkflowPage = client.get(&format!("{}/workflows", base(at)?)).await?;
            print(json_out, &page, || {
                let mut table = Table::new(&["NAME", "VERSION", "NODES", "UPDATED BY", "UPDATED"]);
                for w in &page.workflows {
                    table.row(vec![
                        w.name.clone().into(),
                        w.version.to_string().into(),
                        w.definition.nodes.len().to_string().into(),
                        w.updated_by.to_string().into(),
                        crate::output::ago(w.updated_at).into(),
                    ]);
                }
                crate::output::listing(&table, "no workflows yet: mapi workflows create NAME --file FILE")
            })?;
        }
        WorkflowsCmd::Get { name, version, at } => {
            let mut url = format!("{}/workflows/{name}", base(at)?);
            if let Some(v) = version {
                url.push_str(&format!("?version={v}"));
            }
            let w: WorkflowView = client.get(&url).await?;
            print(json_out, &w, || describe_workflow(&w))?;
        }
        WorkflowsCmd::Update { name, file, version, at } => {
            let body = UpdateWorkflow { definition: definition(&file)?, version };
            let url = format!("{}/workflows/{name}", base(at)?);
            let w: WorkflowView = client.send(client.request(Method::PUT, &url).json(&body)).await?;
            print(json_out, &w, || describe_workflow(&w))?;
        }
        WorkflowsCmd::Rm { name, at } => {
            let url = format!("{}/workflows/{name}", base(at)?);
            client.send::<()>(client.request(Method::DELETE, &url)).await?;
            print(json_out, &json!({"deleted": name}), || format!("deleted workflow {name}\n"))?;
        }
        WorkflowsCmd::Run { name, version, watch: follow, at } => {
            let url = format!("{}/workflows/{name}/runs", base(at)?);
            let body = StartWorkflow { version };
            let r: WorkflowRunView = client.send(client.request(Method::POST, &url).json(&body)).await?;
            return shown(if follow { watch(client, &r.id).await? } else { r });
        }
        WorkflowsCmd::Runs { workflow, at } => {
            let mut url = format!("{}/workflow-runs", base(at)?);
            if let Some(w) = &workflow {
                url.push_str(&format!("?workflow={w}"));
            }
            let page: WorkflowRunPage = client.get(&url).await?;
            print(json_out, &page, || {
                let mut table = Table::new(&["ID", "WORKFLOW", "STATE", "NODES", "STARTED"]);
                for r in &page.runs {
                    let done = r.nodes.iter().filter(|n| n.state == NodeState::Succeeded).count();
                    table.row(vec![
                        r.id.clone().into(),
                        format!("{} v{}", r.workflow, r.version).into(),
                        crate::output::Cell::state(r.state.as_str()),
                        format!("{done}/{} succeeded", r.nodes.len()).into(),
                        crate::output::ago(r.created_at).into(),
                    ]);
                }
                crate::output::listing(&table, "no workflow runs yet: mapi workflows run NAME")
            })?;
        }
        WorkflowsCmd::Status { id, watch: follow } => {
            let r = if follow {
                watch(client, &id).await?
            } else {
                client.get(&format!("/v1/workflow-runs/{id}")).await?
            };
            return shown(r);
        }
        WorkflowsCmd::Cancel { id } => {
            let url = format!("/v1/workflow-runs/{id}/cancel");
            return shown(client.send(client.request(Method::POST, &url)).await?);
        }
        WorkflowsCmd::Resume { id, watch: follow } => {
            let url = format!("/v1/workflow-runs/{id}/resume");
            let r: WorkflowRunView = client.send(client.request(Method::POST, &url)).await?;
            return shown(if follow { watch(client, &r.id).await? } else { r });
        }
    }
    Ok(ExitCode::SUCCESS)
}
