//! `mapi runs …`: submit, list, watch, label, log to and read runs, one
//! function per subcommand.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use mapi_api::views::{RunPage, RunView};
use mapi_domain::{ResourceClass, RunState};
use reqwest::Method;

use crate::context::{Ctx, Scope, parse_params};
use crate::error::Result;
use crate::output::{Cell, Table, money};

#[derive(Debug, Subcommand)]
pub(crate) enum RunsCmd {
    /// Submit a run.
    #[command(after_help = "Examples:
  mapi runs submit --method tabular.linear --dataset ds_01… --param y=employed --watch
  mapi runs submit --method describe --dataset ds_01… --class M --timeout 600 --dry-run
  mapi methods show tabular.linear      # its parameters and an example")]
    Submit(SubmitArgs),
    /// Show a run.
    Get(GetArgs),
    /// List runs, newest first.
    Ls(LsArgs),
    /// Cancel a run.
    Cancel(CancelArgs),
    /// Runs side by side: the spec, each param, each metric, the state and the charge
    /// (`≠` marks a field whose values differ).
    #[command(after_help = "Example:\n  mapi runs compare run_01… run_01… run_01…")]
    Compare(CompareArgs),
    /// Retry an ended run: a new run of the same spec, name and tags, admitted under the quotas.
    #[command(after_help = "Example:\n  mapi runs retry run_01… --watch")]
    Retry(RetryArgs),
    /// Name, annotate or tag a run (what is left out is kept; "" clears a name or note).
    #[command(
        after_help = "Example:\n  mapi runs update run_01… --name baseline --tags employment,q3 --note 'before the new deflator'"
    )]
    Update(UpdateArgs),
    /// Log metrics and params to a run: `--metric loss=0.31 --step 3 --param lr=0.01` (any state).
    Log(LogArgs),
    /// Log an image (PNG, JPEG, WebP or GIF, at most 1 MiB) to a run, or replace the one
    /// of its name; with --link, print a download link to a logged image instead.
    #[command(
        after_help = "Examples:\n  mapi runs image run_01… loss.png --step 10\n  mapi runs image run_01… loss.png --link"
    )]
    Image(ImageArgs),
    /// Follow a run until it ends: progress, then state, outputs and cost.
    Watch(WatchArgs),
    /// Print one output file of a finished run; a linear fit's model.json is shown as its
    /// coefficient table on a terminal (--raw for the file itself, --table to force the table).
    Output(OutputArgs),
    /// Print what a run's execution printed (stdout and stderr); -f follows it.
    #[command(after_help = "Examples:
  mapi runs logs run_01…               # the latest attempt, the worker's events in words
  mapi runs logs run_01… --attempt 1 -f
  mapi --json runs logs run_01…        # one JSON object a line")]
    Logs(crate::logs::LogsArgs),
    /// Saved views of the runs table: filters and columns under a name.
    #[command(subcommand)]
    Views(crate::experiments::ViewsCmd),
}

/// The arguments of `mapi runs submit`.
#[derive(Debug, Args)]
pub(crate) struct SubmitArgs {
    /// The method, e.g. tabular.linear.
    #[arg(long)]
    method: String,
    /// The dataset id (ds_…).
    #[arg(long)]
    dataset: String,
    /// A parameter, `name=value`; the value is read as JSON when it parses, else as a string.
    #[arg(long = "param", value_name = "NAME=VALUE")]
    params: Vec<String>,
    /// The resource class: S, M, L, XL or GPU (what the executor offers; `mapi admin executors ls`).
    #[arg(long, default_value = "S")]
    class: ResourceClass,
    /// Timeout in seconds (1 to 86400).
    #[arg(long, default_value_t = 3600)]
    timeout: u32,
    /// Homogeneous tasks of one execution (a fan-out), 1 to 10000.
    #[arg(long, default_value_t = 1)]
    tasks: u32,
    /// Submitting again with the same key returns the same run.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// Watch the run until it ends.
    #[arg(long)]
    watch: bool,
    /// Validate, estimate and check the quotas only: nothing is submitted.
    #[arg(long, conflicts_with = "watch")]
    dry_run: bool,
    #[command(flatten)]
    scope: Scope,
}

/// The arguments of `mapi runs get`.
#[derive(Debug, Args)]
pub(crate) struct GetArgs {
    id: String,
}

/// The arguments of `mapi runs ls`.
#[derive(Debug, Args)]
pub(crate) struct LsArgs {
    #[arg(long)]
    state: Option<RunState>,
    /// Only runs carrying this tag.
    #[arg(long)]
    tag: Option<String>,
    /// Only runs of this experiment.
    #[arg(long)]
    experiment: Option<String>,
    /// NAME=VALUE: only runs whose param NAME is VALUE (not with --tag).
    #[arg(long)]
    param: Option<String>,
    /// NAME OP NUMBER: only runs whose metric NAME compares so, e.g. 'r2>0.9'
    /// (quote it: the shell reads > and <).
    #[arg(long)]
    metric: Option<String>,
    /// The filters and columns of this saved view (`mapi runs views ls`).
    #[arg(long)]
    view: Option<String>,
    /// Comma-separated columns to show instead (e.g. 'name,state,params.alpha,metrics.r2').
    #[arg(long)]
    columns: Option<String>,
    /// Sort the runs listed by this column (a metric, a param, charged, …).
    #[arg(long)]
    sort: Option<String>,
    /// With --sort: largest first.
    #[arg(long, requires = "sort")]
    desc: bool,
    #[arg(long, default_value_t = 20)]
    limit: u32,
    #[command(flatten)]
    scope: Scope,
}

/// The arguments of `mapi runs cancel`.
#[derive(Debug, Args)]
pub(crate) struct CancelArgs {
    id: String,
}

/// The arguments of `mapi runs compare`.
#[derive(Debug, Args)]
pub(crate) struct CompareArgs {
    /// Two or more run ids.
    #[arg(required = true, num_args = 2..=12)]
    ids: Vec<String>,
}

/// The arguments of `mapi runs retry`.
#[derive(Debug, Args)]
pub(crate) struct RetryArgs {
    id: String,
    /// Retrying again with the same key returns the same new run.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// Watch the new run until it ends.
    #[arg(long)]
    watch: bool,
}

/// The arguments of `mapi runs update`.
#[derive(Debug, Args)]
pub(crate) struct UpdateArgs {
    id: String,
    #[arg(long)]
    name: Option<String>,
    #[arg(long)]
    note: Option<String>,
    /// Replaces the run's tags (comma-separated; "" removes them all).
    #[arg(long)]
    tags: Option<String>,
    /// Puts the run in one of the project's experiments ("" takes it out).
    #[arg(long)]
    experiment: Option<String>,
}

/// The arguments of `mapi runs log`.
#[derive(Debug, Args)]
pub(crate) struct LogArgs {
    id: String,
    /// NAME=VALUE (repeatable); each at --step, or after the series' last step.
    #[arg(long = "metric")]
    metrics: Vec<String>,
    #[arg(long)]
    step: Option<u64>,
    /// NAME=VALUE (repeatable): a number, true/false, or text.
    #[arg(long = "param")]
    params: Vec<String>,
}

/// The arguments of `mapi runs image`.
#[derive(Debug, Args)]
pub(crate) struct ImageArgs {
    id: String,
    /// The image file; its name is the image's name unless --name says otherwise.
    file: std::path::PathBuf,
    #[arg(long)]
    name: Option<String>,
    #[arg(long)]
    step: Option<u64>,
    /// Print a link (valid 15 minutes) to the run's image of that name.
    #[arg(long, conflicts_with = "step")]
    link: bool,
}

/// The arguments of `mapi runs watch`.
#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    id: String,
}

/// The arguments of `mapi runs output`.
#[derive(Debug, Args)]
pub(crate) struct OutputArgs {
    id: String,
    name: String,
    /// The file as it is, even on a terminal.
    #[arg(long, conflicts_with = "table")]
    raw: bool,
    /// The coefficient table of a linear fit's model.json, even into a file or pipe.
    #[arg(long)]
    table: bool,
}

/// Runs `mapi runs CMD`; the process exit code.
pub(crate) async fn run(ctx: &Ctx, cmd: RunsCmd) -> Result<ExitCode> {
    match cmd {
        RunsCmd::Submit(args) => submit(ctx, args).await,
        RunsCmd::Get(args) => get(ctx, args).await,
        RunsCmd::Ls(args) => ls(ctx, args).await,
        RunsCmd::Cancel(args) => cancel(ctx, args).await,
        RunsCmd::Compare(args) => compare(ctx, args).await,
        RunsCmd::Retry(args) => retry(ctx, args).await,
        RunsCmd::Update(args) => update(ctx, args).await,
        RunsCmd::Log(args) => log(ctx, args).await,
        RunsCmd::Image(args) => image(ctx, args).await,
        RunsCmd::Watch(args) => watch_cmd(ctx, args).await,
        RunsCmd::Output(args) => output(ctx, args).await,
        RunsCmd::Logs(args) => crate::logs::logs(&ctx.client, ctx.json, args).await,
        RunsCmd::Views(cmd) => {
            let scope = |tenant, project| ctx.scope(&Scope { tenant, project });
            crate::experiments::views(&ctx.client, scope, cmd, ctx.json).await
        }
    }
}

async fn submit(ctx: &Ctx, args: SubmitArgs) -> Result<ExitCode> {
    let SubmitArgs {
        method,
        dataset,
        params,
        class,
        timeout,
        tasks,
        idempotency_key,
        watch: follow,
        dry_run,
        scope,
    } = args;
    let (t, p) = ctx.scope(&scope)?;
    let body = serde_json::json!({
        "method": method, "dataset": dataset, "params": parse_params(&params)?,
        "class": class, "timeout_s": timeout, "tasks": tasks,
    });
    let mut req = ctx.client.request(Method::POST, &format!("/v1/tenants/{t}/projects/{p}/runs")).json(&body);
    if dry_run {
        let v: serde_json::Value = ctx.client.send(req.query(&[("dry_run", "true")])).await?;
        let admitted = v["admitted"].as_bool().unwrap_or(false);
        ctx.print(&v, || {
            let estimate = format!(
                "estimate {} at list prices (class {}, timeout {} s); nothing submitted",
                money(
                    v["estimate"]["amount_micros"].as_i64().unwrap_or(0),
                    v["estimate"]["currency"].as_str().unwrap_or("USD")
                ),
                v["class"].as_str().unwrap_or("?"),
                v["timeout_s"]
            );
            let wait = v["would_wait"].as_str().map(|w| format!("would wait: {w}\n")).unwrap_or_default();
            if admitted {
                format!("would be admitted; {estimate}\n{wait}")
            } else {
                format!(
                    "would be refused ({}): {}\n{estimate}\n",
                    v["refusal"]["code"].as_str().unwrap_or("?"),
                    v["refusal"]["detail"].as_str().unwrap_or("?")
                )
            }
        })?;
        return Ok(if admitted { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }
    if let Some(k) = idempotency_key {
        req = req.header("idempotency-key", k);
    }
    let r: RunView = ctx.client.send(req).await?;
    if !follow {
        ctx.print(&r, || {
            format!(
                "submitted {} ({}); estimate {} at list prices\n",
                r.id,
                r.state,
                money(r.cost.estimate_micros, &r.cost.currency)
            )
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    if !ctx.json {
        eprintln!("submitted {}", r.id);
    }
    let done = watch(ctx, r.id.as_str()).await?;
    ctx.print(&done, || describe_run(&done))?;
    Ok(exit_for(&done))
}

async fn get(ctx: &Ctx, args: GetArgs) -> Result<ExitCode> {
    let GetArgs { id } = args;
    let r: RunView = ctx.client.get(&format!("/v1/runs/{id}")).await?;
    ctx.print(&r, || describe_run(&r))?;
    Ok(ExitCode::SUCCESS)
}

async fn ls(ctx: &Ctx, args: LsArgs) -> Result<ExitCode> {
    let LsArgs { state, tag, experiment, param, metric, view, columns, sort, desc, limit, scope } = args;
    let (t, p) = ctx.scope(&scope)?;
    let shown: Option<Vec<String>> = match (&columns, &view) {
        (Some(c), _) => {
            Some(c.split(',').map(str::trim).filter(|c| !c.is_empty()).map(str::to_owned).collect())
        }
        (None, Some(v)) => {
            #[derive(serde::Deserialize)]
            struct Saved {
                columns: Vec<String>,
            }
            let saved: Saved = ctx.client.get(&format!("/v1/tenants/{t}/projects/{p}/run-views/{v}")).await?;
            Some(saved.columns)
        }
        (None, None) => None,
    };
    let filters = [
        ("state", state.map(|s| s.as_str().to_owned())),
        ("tag", tag.clone()),
        ("experiment", experiment.clone()),
        ("param", param.clone()),
        ("metric", metric.clone()),
        ("view", view.clone()),
        ("columns", columns.clone()),
    ];
    let mut page = runs_up_to(ctx, &format!("/v1/tenants/{t}/projects/{p}/runs"), &filters, limit).await?;
    if let Some(by) = &sort {
        mapi_api::views::sort_runs(&mut page.runs, by, desc);
    }
    ctx.print(&page, || {
        let table = match &shown {
            Some(columns) => chosen_columns(&page.runs, columns),
            None => default_columns(&page.runs),
        };
        let narrowed =
            tag.is_some() || experiment.is_some() || param.is_some() || metric.is_some() || view.is_some();
        let empty = match (state, narrowed) {
            (Some(s), true) => format!("no {s} runs match"),
            (Some(s), false) => format!("no {s} runs"),
            (None, true) => "no runs match".to_owned(),
            (None, false) => {
                "no runs yet: mapi runs submit --method describe --dataset ds_… --watch".to_owned()
            }
        };
        crate::output::listing(&table, &empty)
    })?;
    Ok(ExitCode::SUCCESS)
}

fn default_columns(runs: &[mapi_api::views::RunSummary]) -> Table {
    let mut table = Table::new(&["ID", "METHOD", "STATE", "CLASS", "ATT", "CREATED", "CHARGED"])
        .right(&[4, 6])
        .flex(&[1]);
    for r in runs {
        table.row(vec![
            r.id.to_string().into(),
            r.method.as_str().into(),
            Cell::state(r.state.as_str()),
            r.class.as_str().into(),
            r.attempt.0.to_string().into(),
            crate::output::ago(r.created_at).into(),
            money(r.charged_micros, "USD").into(),
        ]);
    }
    table
}

/// The runs under the columns a view (or `--columns`) names, the run's id first.
fn chosen_columns(runs: &[mapi_api::views::RunSummary], columns: &[String]) -> Table {
    use mapi_api::views::Column;
    let columns: Vec<&String> = columns.iter().filter(|c| c.as_str() != "id").collect();
    let headers: Vec<String> = std::iter::once("ID".to_owned())
        .chain(columns.iter().map(|c| if c.contains('.') { (*c).clone() } else { c.to_uppercase() }))
        .collect();
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    let numeric: Vec<usize> = columns
        .iter()
        .enumerate()
        .filter(|(_, c)| c.starts_with("metrics.") || matches!(c.as_str(), "attempt" | "charged"))
        .map(|(i, _)| i + 1)
        .collect();
    let mut table = Table::new(&headers).right(&numeric);
    for r in runs {
        let mut cells: Vec<Cell> = vec![r.id.to_string().into()];
        for c in &columns {
            cells.push(match (c.as_str(), r.column(c)) {
                ("state", _) => Cell::state(r.state.as_str()),
                ("created_at", _) => crate::output::ago(r.created_at).into(),
                ("charged", _) => money(r.charged_micros, "USD").into(),
                (_, Column::Number(n)) => mapi_api::words::number(n).into(),
                (_, Column::Text(t)) => t.into(),
                (_, Column::Missing) => "—".into(),
            });
        }
        table.row(cells);
    }
    table
}

async fn cancel(ctx: &Ctx, args: CancelArgs) -> Result<ExitCode> {
    let CancelArgs { id } = args;
    let r: RunView =
        ctx.client.send(ctx.client.request(Method::POST, &format!("/v1/runs/{id}/cancel"))).await?;
    ctx.print(&r, || format!("{} is {}\n", r.id, r.state))?;
    Ok(ExitCode::SUCCESS)
}

async fn compare(ctx: &Ctx, args: CompareArgs) -> Result<ExitCode> {
    let CompareArgs { ids } = args;
    let mut runs = Vec::with_capacity(ids.len());
    for id in &ids {
        runs.push(ctx.client.get::<RunView>(&format!("/v1/runs/{id}")).await?);
    }
    let c = crate::compare::compare(&runs);
    ctx.print(&c, || crate::output::listing(&crate::compare::table(&c), "nothing to compare"))?;
    Ok(ExitCode::SUCCESS)
}

async fn retry(ctx: &Ctx, args: RetryArgs) -> Result<ExitCode> {
    let RetryArgs { id, idempotency_key, watch: follow } = args;
    let mut req = ctx.client.request(Method::POST, &format!("/v1/runs/{id}/retry"));
    if let Some(key) = idempotency_key {
        req = req.header("Idempotency-Key", key);
    }
    let r: RunView = ctx.client.send(req).await?;
    if !follow {
        ctx.print(&r, || format!("{} retries {id}: {}\n", r.id, r.state))?;
        return Ok(ExitCode::SUCCESS);
    }
    let done = watch(ctx, r.id.as_str()).await?;
    ctx.print(&done, || describe_run(&done))?;
    Ok(exit_for(&done))
}

async fn update(ctx: &Ctx, args: UpdateArgs) -> Result<ExitCode> {
    let UpdateArgs { id, name, note, tags, experiment } = args;
    let tags =
        tags.map(|t| t.split(',').map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned).collect());
    let change = mapi_api::labels::LabelChange { name, note, tags, experiment };
    if change.is_empty() {
        return Err("name something to change: --name, --note, --tags or --experiment".into());
    }
    let req = ctx.client.request(Method::PATCH, &format!("/v1/runs/{id}")).json(&change);
    let r: RunView = ctx.client.send(req).await?;
    ctx.print(&r, || {
        let name = r.labels.name.as_deref().unwrap_or("(no name)");
        let experiment = match &r.labels.experiment {
            Some(e) => format!("  experiment: {e}"),
            None => String::new(),
        };
        format!(
            "{} {name}  tags: {}{experiment}\n",
            r.id,
            if r.labels.tags.is_empty() { "none".to_owned() } else { r.labels.tags.join(", ") }
        )
    })?;
    Ok(ExitCode::SUCCESS)
}

async fn log(ctx: &Ctx, args: LogArgs) -> Result<ExitCode> {
    let LogArgs { id, metrics, step, params } = args;
    let mut input = mapi_api::tracking::LogInput { params: parse_params(&params)?, ..Default::default() };
    for m in &metrics {
        let (name, value) = m.split_once('=').ok_or_else(|| format!("--metric `{m}`: write NAME=VALUE"))?;
        let value: f64 = value.parse().map_err(|_| format!("--metric `{m}`: the value must be a number"))?;
        input.metrics.push(mapi_api::tracking::MetricInput { name: name.to_owned(), value, step });
    }
    let req = ctx.client.request(Method::POST, &format!("/v1/runs/{id}/log")).json(&input);
    let log: mapi_api::tracking::RunLog = ctx.client.send(req).await?;
    ctx.print(&log, || {
        let latest: Vec<String> = log.latest().iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(
            "logged to {id}: {} points in {} metrics ({}), {} params\n",
            log.points(),
            log.series.len(),
            latest.join(", "),
            log.params.len()
        )
    })?;
    Ok(ExitCode::SUCCESS)
}

async fn image(ctx: &Ctx, args: ImageArgs) -> Result<ExitCode> {
    let ImageArgs { id, file, name, step, link } = args;
    let name = match name {
        Some(n) => n,
        None => file.file_name().and_then(|n| n.to_str()).ok_or("name the image with --name")?.to_owned(),
    };
    if link {
        let req = ctx.client.request(Method::POST, &format!("/v1/runs/{id}/images/{name}/url"));
        let url: serde_json::Value = ctx.client.send(req).await?;
        ctx.print(&url, || format!("{}\n", url["url"].as_str().unwrap_or_default()))?;
        return Ok(ExitCode::SUCCESS);
    }
    let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut req = ctx.client.request(Method::PUT, &format!("/v1/runs/{id}/images/{name}")).body(bytes);
    if let Some(s) = step {
        req = req.query(&[("step", s)]);
    }
    let log: mapi_api::tracking::RunLog = ctx.client.send(req).await?;
    ctx.print(&log, || format!("logged image {name} to {id} ({} images)\n", log.images.len()))?;
    Ok(ExitCode::SUCCESS)
}

async fn watch_cmd(ctx: &Ctx, args: WatchArgs) -> Result<ExitCode> {
    let WatchArgs { id } = args;
    let done = watch(ctx, &id).await?;
    ctx.print(&done, || describe_run(&done))?;
    Ok(exit_for(&done))
}

async fn output(ctx: &Ctx, args: OutputArgs) -> Result<ExitCode> {
    let OutputArgs { id, name, raw, table } = args;
    let r: RunView = ctx.client.get(&format!("/v1/runs/{id}")).await?;
    let Some(out) = r.outputs.iter().find(|o| o.name == name) else {
        let names: Vec<&str> = r.outputs.iter().map(|o| o.name.as_str()).collect();
        return Err(format!("run {id} has no output `{name}` (it has: {})", names.join(", ")).into());
    };
    // Through the platform's route (the output counts as the tenant's egress), redirected to the bytes.
    let path = format!("/v1/runs/{}/outputs/{}", crate::client::segment(&id), out.name);
    let bytes = ctx.client.bytes(ctx.client.request(reqwest::Method::GET, &path)).await?;
    // A file redirected somewhere stays the file; a person at a terminal reads the table.
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let summary = (table || (terminal && !raw && !ctx.json))
        .then(|| crate::model_view::linear_summary(&bytes))
        .flatten();
    match summary {
        Some(text) => crate::output::write(&text)?,
        None if table => {
            return Err(format!("{name} of {id} is not a linear fit's model: drop --table").into());
        }
        None => crate::output::write_bytes(&bytes)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// A run as a person reads it.
pub fn describe_run(r: &RunView) -> String {
    let mut out = String::new();
    out.push_str(&format!("run       {}\n", r.id));
    out.push_str(&format!(
        "state     {}{}\n",
        r.state,
        if r.stalled { " (stalled: no events lately)" } else { "" }
    ));
    out.push_str(&format!(
        "method    {} on {} (class {}, timeout {} s)\n",
        r.method, r.dataset, r.class, r.timeout_s
    ));
    if let Some(code) = &r.plugin {
        let sha = code.sha256.get(..12).unwrap_or(&code.sha256);
        out.push_str(&format!("plugin    {} {} (sha256 {sha}…, in a sandbox)\n", code.name, code.version));
    }
    if let Some(p) = &r.progress {
        out.push_str(&format!(
            "progress  {:.0}% {}\n",
            p.fraction * 100.0,
            p.message.clone().unwrap_or_default()
        ));
    }
    if let Some(w) = &r.waiting {
        out.push_str(&format!("waiting   since {}: {}\n", w.since, w.reason));
    }
    for w in &r.warnings {
        out.push_str(&format!("warning   {}: {}\n", w.code, w.message));
    }
    if let Some(backend) = r.params.get("dl.backend").and_then(|v| v.as_str()) {
        out.push_str(&format!("backend   {backend}\n"));
    }
    if let Some(e) = &r.error {
        out.push_str(&format!("error     {}: {}\n", e.code, e.message));
    }
    out.push_str(&format!(
        "cost      {} charged; estimate {} ({})\n",
        money(r.cost.charged_micros, &r.cost.currency),
        money(r.cost.estimate_micros, &r.cost.currency),
        r.cost.note
    ));
    out.push_str("history\n");
    for t in &r.history {
        let from = t.from.map_or("·".to_owned(), |s| s.to_string());
        out.push_str(&format!("  {}  {from} → {}  ({}, attempt {})\n", t.at, t.to, t.reason, t.attempt));
    }
    if !r.attempts.is_empty() {
        out.push_str("attempts\n");
        for a in &r.attempts {
            let charge = a.charge.as_ref().map_or("-".to_owned(), |c| money(c.amount_micros, &c.currency));
            let exec = a.execution.as_ref().map_or("-".to_owned(), |h| h.to_string());
            let gpus = if a.class.gpus() > 0 { format!(" ({} GPU)", a.gpus) } else { String::new() };
            out.push_str(&format!("  {}  class {}{gpus}  {}  {}\n", a.attempt, a.class, exec, charge));
        }
    }
    if let Some(a) = &r.aggregate {
        out.push_str("aggregate\n");
        for (name, value) in &a.metrics {
            out.push_str(&format!("  {name} = {value}\n"));
        }
    }
    if !r.children.is_empty() {
        out.push_str(&children_line(r));
    }
    if !r.outputs.is_empty() {
        out.push_str("outputs\n");
        for o in &r.outputs {
            let size = crate::output::size(o.size);
            out.push_str(&format!("  {} ({size}): mapi runs output {} {}\n", o.name, r.id, o.name));
        }
    }
    if let Some(v) = &r.model_version {
        out.push_str(&format!("model     {v}: mapi models versions get {v}\n"));
    }
    out
}

/// A fan-out parent's children in one line: how many are in each state.
fn children_line(r: &RunView) -> String {
    let mut counts: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for c in &r.children {
        let state = serde_json::to_value(c.state).ok().and_then(|v| v.as_str().map(str::to_owned));
        *counts.entry(state.unwrap_or_default()).or_default() += 1;
    }
    let parts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    format!(
        "children  {} ({}): mapi api GET /v1/runs/{}/children/INDEX\n",
        r.children.len(),
        parts.join(", "),
        r.id
    )
}

/// Follows run `id` until it ends; Ctrl-C stops following (the run goes on) and says how to
/// follow it again.
async fn watch(ctx: &Ctx, id: &str) -> Result<RunView> {
    tokio::select! {
        r = follow(ctx, id) => r,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("\nstill running: mapi runs watch {id}");
            std::process::exit(130)
        }
    }
}

async fn follow(ctx: &Ctx, id: &str) -> Result<RunView> {
    use std::io::Write;
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut last_line = String::new();
    loop {
        let r: RunView = ctx.client.get(&format!("/v1/runs/{id}")).await?;
        if r.state.is_terminal() {
            if !ctx.json && !last_line.is_empty() && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
                eprintln!();
            }
            return Ok(r);
        }
        if !ctx.json {
            // A terminal shows the time since submit; a file or pipe gets a line per change only.
            let width = if terminal { crate::output::stderr_width() } else { None };
            let elapsed = if terminal { Some(since(r.created_at)) } else { None };
            let fraction = r.progress.as_ref().map_or(0.0, |p| p.fraction);
            let message = match &r.waiting {
                Some(w) => format!("waiting: {}", w.reason),
                None => r.progress.as_ref().and_then(|p| p.message.clone()).unwrap_or_default(),
            };
            let line = watch_frame(
                (fraction, r.state.as_str(), &message),
                elapsed.as_deref(),
                width.unwrap_or(usize::MAX),
            );
            if line != last_line {
                if terminal {
                    // Back to the line's start and cleared to its end: one line, redrawn.
                    eprint!("\r{line}\x1b[K");
                } else {
                    eprintln!("{line}");
                }
                let _ = std::io::stderr().flush();
                last_line = line;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One frame of `runs watch`: a bar, the percent, the time since submit
/// (on a terminal), the state and what the run says, in fewer than
/// `width` characters (the bar narrows first, then the words are cut).
fn watch_frame((fraction, state, message): (f64, &str, &str), elapsed: Option<&str>, width: usize) -> String {
    let fraction = fraction.clamp(0.0, 1.0);
    let bar = if width >= 100 { 30 } else { 20 };
    let filled = (fraction * bar as f64).round() as usize;
    let elapsed = elapsed.map_or(String::new(), |e| format!("{e:>6} "));
    let line = format!(
        "[{}{}] {:>3.0}% {elapsed}{:<11} {message}",
        "#".repeat(filled),
        ".".repeat(bar - filled),
        fraction * 100.0,
        state,
    );
    let line = line.trim_end();
    // The last column is left free: a terminal wraps a line that fills it.
    crate::output::truncate(line, width.saturating_sub(1).max(10))
}

/// Time since `t`: `42 s`, `3m05s`, `1h02m`.
fn since(t: mapi_domain::Timestamp) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let s = (now - t.as_micros() / 1_000_000).max(0);
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

fn exit_for(r: &RunView) -> ExitCode {
    if r.state == RunState::Succeeded { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// Requests of one `mapi runs ls`: a metric filter may answer short pages
/// (each examines a bounded number of runs), so pages are followed until
/// `limit` runs are found or this many pages were read.
const RUN_PAGES_PER_LISTING: usize = 20;

/// Up to `limit` runs of the listing at `path` with `filters`, newest
/// first, following short pages; the last page's token stays in the answer.
async fn runs_up_to(
    ctx: &Ctx,
    path: &str,
    filters: &[(&str, Option<String>)],
    limit: u32,
) -> Result<RunPage> {
    let mut all = RunPage { runs: Vec::new(), next_page_token: None };
    for _ in 0..RUN_PAGES_PER_LISTING {
        // The API's largest page is 200.
        let wanted = limit.saturating_sub(u32::try_from(all.runs.len()).unwrap_or(u32::MAX)).min(200);
        let mut req = ctx.client.request(Method::GET, path).query(&[("page_size", wanted.to_string())]);
        for (name, value) in filters {
            if let Some(v) = value {
                req = req.query(&[(name, v.as_str())]);
            }
        }
        if let Some(token) = &all.next_page_token {
            req = req.query(&[("page_token", token.as_str())]);
        }
        let page: RunPage = ctx.client.send(req).await?;
        all.runs.extend(page.runs);
        all.next_page_token = page.next_page_token;
        if all.next_page_token.is_none() || all.runs.len() >= limit as usize {
            break;
        }
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::watch_frame;

    #[test]
    fn a_watch_frame_fits_an_80_column_terminal() {
        let long =
            "waiting: executor local-process is disabled by an operator: INC-42 containment, and more words";
        for width in [40, 80, 120] {
            let frame = watch_frame((0.42, "queued", long), Some("1m05s"), width);
            assert!(frame.chars().count() < width, "{width}: {frame}");
            assert!(frame.starts_with('[') && frame.contains(" 42% "), "{frame}");
        }
        let piped = watch_frame((1.0, "running", "done"), None, usize::MAX);
        assert_eq!(piped, format!("[{}] 100% running     done", "#".repeat(30)));
    }
}
