//! Command-line parsing and the commands.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use mapi_api::views::{DatasetPage, DatasetSummary, DatasetView, RunPage, RunView};
use mapi_domain::{ResourceClass, RunState};
use reqwest::Method;

use crate::client::{Client, ClientError};
use crate::output::{Cell, Format, Table};

#[derive(Debug, Parser)]
#[command(name = "mapi", version, about = "The mapi model API platform", after_help = EXIT_CODES)]
struct Cli {
    /// How to print results: `table` for people, `json` or `yaml` for programs.
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = Format::Table)]
    output: Format,
    /// Print JSON (the same as `--output json`).
    #[arg(long, global = true)]
    json: bool,
    /// The platform's URL (default: the one `mapi dev` wrote).
    #[arg(long, global = true, env = "MAPI_URL")]
    url: Option<String>,
    /// The API token (default: the one `mapi dev` wrote).
    #[arg(long, global = true, env = "MAPI_TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[command(subcommand)]
    command: Command,
}

/// What `mapi --help` says of exit codes.
const EXIT_CODES: &str = "Exit codes:
  0    done (a watched run or job succeeded)
  1    an error, a refusal, or a watched run or job that did not succeed
  2    the command line was wrong (see the message)
  141  the reader of the output went away (`mapi … | head`)

Colour is used on a terminal unless NO_COLOR is set.";

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the whole platform on this machine (embedded store, queue, objects, executor).
    #[cfg(feature = "platform")]
    Dev(crate::platform::DevArgs),
    /// Sign in: `--dev EMAIL` against `mapi dev`, or `--id-token TOKEN` from your identity provider.
    Login {
        #[arg(long, conflicts_with = "id_token")]
        dev: Option<String>,
        /// An OIDC ID token (`-` reads it from standard input).
        #[arg(long)]
        id_token: Option<String>,
        /// Print the session token instead of saving it (for scripts).
        #[arg(long)]
        print_token: bool,
    },
    /// Choose the tenant and project later commands act in: TENANT/PROJECT.
    Use { target: String },
    /// Show who you are: person, operator, token, grants.
    Whoami,
    /// Mint, list and revoke API tokens in the current project.
    #[command(subcommand)]
    Tokens(crate::account::TokensCmd),
    /// Operators and tenant admins: tenants, the audit log.
    #[command(subcommand)]
    Admin(crate::account::AdminCmd),
    /// What compute cost: the current project's usage, or a whole tenant's with --tenant.
    Usage {
        /// How to break the totals down.
        #[arg(long, value_parser = ["resource_class", "token", "day"])]
        group_by: Option<String>,
        /// The whole tenant (tenant admins).
        #[arg(long)]
        tenant: Option<String>,
        /// The UTC day or month so far.
        #[arg(long, default_value = "month", value_parser = ["day", "month"])]
        period: String,
    },
    /// Call any route: `mapi api POST /v1/tenants/acme/projects -d '{…}'`.
    Api {
        method: String,
        path: String,
        #[arg(short = 'd', long)]
        data: Option<String>,
    },
    /// Upload and list datasets.
    #[command(subcommand)]
    Datasets(DatasetsCmd),
    /// Submit, watch and cancel runs.
    #[command(subcommand)]
    Runs(RunsCmd),
    /// Item jobs: a method on every line of a JSON Lines file.
    #[command(subcommand)]
    Jobs(crate::jobs::JobsCmd),
    /// The methods there are: parameters, outputs, examples, and which fit a model.
    #[command(subcommand)]
    Methods(crate::methods::MethodsCmd),
    /// Model versions: succeeded runs' outputs as signed bundles.
    #[command(subcommand)]
    Models(crate::models::ModelsCmd),
    /// Model endpoints: serve a model version, score it, promote and roll back.
    #[command(subcommand)]
    Endpoints(crate::endpoints::EndpointsCmd),
    /// Experiments: named sets of runs (`mapi runs update ID --experiment NAME`).
    #[command(subcommand)]
    Experiments(crate::experiments::ExperimentsCmd),
    /// Webhooks: be told when runs start and end (project admins).
    #[command(subcommand)]
    Webhooks(crate::webhooks::WebhooksCmd),
    /// Print a shell completion script: `mapi completions bash > ~/.local/share/bash-completion/completions/mapi`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Measure this machine (see BENCHMARKS.md).
    #[cfg(feature = "platform")]
    #[command(subcommand)]
    Bench(crate::platform::BenchCmd),
    /// The execution entry point (what `mapi-worker` runs).
    #[cfg(feature = "platform")]
    #[command(hide = true)]
    Worker {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Debug, Args)]
struct Scope {
    /// Tenant (default: from the credentials, or MAPI_TENANT).
    #[arg(long, env = "MAPI_TENANT")]
    tenant: Option<String>,
    /// Project (default: from the credentials, or MAPI_PROJECT).
    #[arg(long, env = "MAPI_PROJECT")]
    project: Option<String>,
}

#[derive(Debug, Subcommand)]
enum DatasetsCmd {
    /// Upload a CSV file.
    Upload {
        file: PathBuf,
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        scope: Scope,
    },
    /// List datasets, newest first.
    Ls {
        #[command(flatten)]
        scope: Scope,
    },
    /// Show a dataset with its columns.
    Get {
        id: String,
        #[command(flatten)]
        scope: Scope,
    },
    /// Download a dataset's file (every download is audited).
    Download {
        id: String,
        /// Where to write it (default `ID.csv`); an existing file is kept unless --force.
        #[arg(long = "to", value_name = "FILE")]
        to: Option<PathBuf>,
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        scope: Scope,
    },
    /// Delete a dataset (admins): its file goes, and its size no longer counts against the storage quota.
    Rm {
        id: String,
        #[command(flatten)]
        scope: Scope,
        /// Delete without asking.
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Debug, Subcommand)]
enum RunsCmd {
    /// Submit a run.
    #[command(after_help = "Examples:
  mapi runs submit --method tabular.linear --dataset ds_01… --param y=employed --watch
  mapi runs submit --method describe --dataset ds_01… --class M --timeout 600 --dry-run
  mapi methods show tabular.linear      # its parameters and an example")]
    Submit {
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
    },
    /// Show a run.
    Get { id: String },
    /// List runs, newest first.
    Ls {
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
        /// The filters of this saved view (`mapi runs views ls`).
        #[arg(long)]
        view: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: u32,
        #[command(flatten)]
        scope: Scope,
    },
    /// Cancel a run.
    Cancel { id: String },
    /// Runs side by side: the spec, each param, each metric, the state and the charge
    /// (`≠` marks a field whose values differ).
    #[command(after_help = "Example:\n  mapi runs compare run_01… run_01… run_01…")]
    Compare {
        /// Two or more run ids.
        #[arg(required = true, num_args = 2..=12)]
        ids: Vec<String>,
    },
    /// Retry an ended run: a new run of the same spec, name and tags, admitted under the quotas.
    #[command(after_help = "Example:\n  mapi runs retry run_01… --watch")]
    Retry {
        id: String,
        /// Retrying again with the same key returns the same new run.
        #[arg(long)]
        idempotency_key: Option<String>,
        /// Watch the new run until it ends.
        #[arg(long)]
        watch: bool,
    },
    /// Name, annotate or tag a run (what is left out is kept; "" clears a name or note).
    #[command(
        after_help = "Example:\n  mapi runs update run_01… --name baseline --tags employment,q3 --note 'before the new deflator'"
    )]
    Update {
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
    },
    /// Log metrics and params to a run: `--metric loss=0.31 --step 3 --param lr=0.01` (any state).
    Log {
        id: String,
        /// NAME=VALUE (repeatable); each at --step, or after the series' last step.
        #[arg(long = "metric")]
        metrics: Vec<String>,
        #[arg(long)]
        step: Option<u64>,
        /// NAME=VALUE (repeatable): a number, true/false, or text.
        #[arg(long = "param")]
        params: Vec<String>,
    },
    /// Log an image (PNG, JPEG, WebP or GIF, at most 1 MiB) to a run, or replace the one
    /// of its name; with --link, print a download link to a logged image instead.
    #[command(
        after_help = "Examples:\n  mapi runs image run_01… loss.png --step 10\n  mapi runs image run_01… loss.png --link"
    )]
    Image {
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
    },
    /// Follow a run until it ends: progress, then state, outputs and cost.
    Watch { id: String },
    /// Print one output file of a finished run; a linear fit's model.json is shown as its
    /// coefficient table on a terminal (--raw for the file itself, --table to force the table).
    Output {
        id: String,
        name: String,
        /// The file as it is, even on a terminal.
        #[arg(long, conflicts_with = "table")]
        raw: bool,
        /// The coefficient table of a linear fit's model.json, even into a file or pipe.
        #[arg(long)]
        table: bool,
    },
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

/// Runs the command line; the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    #[cfg(feature = "platform")]
    if let Command::Worker { args } = cli.command {
        return crate::platform::worker(args);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

pub(crate) type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

struct Ctx {
    client: Client,
    now: crate::session::Resolved,
    json: bool,
}

impl Ctx {
    fn scope(&self, s: &Scope) -> Result<(String, String)> {
        let tenant = s.tenant.clone().or_else(|| self.now.tenant.clone());
        let project = s.project.clone().or_else(|| self.now.project.clone());
        match (tenant, project) {
            (Some(t), Some(p)) => Ok((t, p)),
            _ => {
                Err("no tenant and project chosen: `mapi use TENANT/PROJECT`, or give --tenant and --project"
                    .into())
            }
        }
    }

    fn print<T: serde::Serialize>(&self, value: &T, human: impl FnOnce() -> String) -> Result<()> {
        crate::output::print(self.json, value, human)
    }
}

async fn run(cli: Cli) -> Result<ExitCode> {
    let format = if cli.json { Format::Json } else { cli.output };
    crate::output::set_format(format);
    let json = format != Format::Table;
    let now = crate::session::resolve(
        cli.url.clone(),
        cli.token.clone(),
        &crate::session::load(),
        crate::session::dev_home().as_ref(),
    );
    match cli.command {
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(
                shell,
                &mut <Cli as clap::CommandFactory>::command(),
                "mapi",
                &mut script,
            );
            crate::output::write_bytes(&script)?;
            return Ok(ExitCode::SUCCESS);
        }
        #[cfg(feature = "platform")]
        Command::Dev(args) => return crate::platform::dev(args).await,
        #[cfg(feature = "platform")]
        Command::Bench(b) => return crate::platform::bench(b, json).await,
        Command::Use { target } => {
            crate::account::use_scope(&now, &target)?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Login { dev, id_token, print_token } => {
            let url =
                now.url.clone().ok_or("no platform to sign in to: set MAPI_URL (or start `mapi dev`)")?;
            crate::account::login(url.trim_end_matches('/'), dev, id_token, print_token, json).await?;
            return Ok(ExitCode::SUCCESS);
        }
        _ => {}
    }
    let (Some(url), Some(token)) = (now.url.clone(), now.token.clone()) else {
        return Err(match &now.url {
            Some(url) => format!("not signed in to {url}: `mapi login`, or set MAPI_TOKEN"),
            None => "no platform to talk to: start `mapi dev`, or `mapi login` with MAPI_URL set".to_owned(),
        }
        .into());
    };
    let ctx = Ctx { client: Client::new(&url, &token), now, json };
    match cli.command {
        #[cfg(feature = "platform")]
        Command::Dev(_) | Command::Bench(_) | Command::Worker { .. } => Ok(ExitCode::SUCCESS),
        Command::Use { .. } | Command::Login { .. } | Command::Completions { .. } => Ok(ExitCode::SUCCESS),
        Command::Whoami => {
            crate::account::whoami(&ctx.client, &ctx.now, ctx.json).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Tokens(cmd) => {
            let (t, p) = ctx.scope(&Scope { tenant: None, project: None })?;
            crate::account::tokens(&ctx.client, &t, &p, cmd, ctx.json).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Admin(cmd) => {
            crate::account::admin(&ctx.client, cmd, ctx.json).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Usage { group_by, tenant, period } => {
            let scope = ctx.scope(&Scope { tenant: None, project: None })?;
            crate::account::usage(&ctx.client, scope, tenant, &period, group_by, ctx.json).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Api { method, path, data } => {
            let ok = crate::account::api(&ctx.client, &method, &path, data).await?;
            Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        Command::Datasets(cmd) => datasets(&ctx, cmd).await,
        Command::Runs(cmd) => runs(&ctx, cmd).await,
        Command::Jobs(cmd) => {
            let scope = |tenant, project| ctx.scope(&Scope { tenant, project });
            crate::jobs::run(&ctx.client, scope, parse_params, cmd, ctx.json).await
        }
        Command::Methods(cmd) => crate::methods::run(&ctx.client, cmd, ctx.json).await,
        Command::Models(cmd) => {
            let scope = |tenant, project| ctx.scope(&Scope { tenant, project });
            crate::models::run(&ctx.client, scope, cmd, ctx.json).await
        }
        Command::Endpoints(cmd) => {
            let scope = |tenant, project| ctx.scope(&Scope { tenant, project });
            crate::endpoints::run(&ctx.client, scope, cmd, ctx.json).await
        }
        Command::Webhooks(cmd) => {
            let scope = |tenant, project| ctx.scope(&Scope { tenant, project });
            crate::webhooks::run(&ctx.client, scope, cmd, ctx.json).await
        }
        Command::Experiments(cmd) => {
            let scope = |tenant, project| ctx.scope(&Scope { tenant, project });
            crate::experiments::experiments(&ctx.client, scope, cmd, ctx.json).await
        }
    }
}

fn dataset_row(d: &DatasetSummary) -> Vec<Cell> {
    vec![
        d.id.to_string().into(),
        d.name.as_str().into(),
        d.rows.to_string().into(),
        crate::output::size(d.size).into(),
        d.column_count.to_string().into(),
        crate::output::ago(d.created_at).into(),
    ]
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(n - 1).collect::<String>())
    }
}

async fn datasets(ctx: &Ctx, cmd: DatasetsCmd) -> Result<ExitCode> {
    match cmd {
        DatasetsCmd::Upload { file, name, scope } => {
            let (t, p) = ctx.scope(&scope)?;
            let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            let name = name.unwrap_or_else(|| {
                file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
            });
            let req = ctx
                .client
                .request(Method::POST, &format!("/v1/tenants/{t}/projects/{p}/datasets"))
                .query(&[("name", name)])
                .header("content-type", "text/csv")
                .body(bytes);
            let d: DatasetView = ctx.client.send(req).await?;
            ctx.print(&d, || {
                format!("uploaded {} ({} rows, columns {})\n", d.id, d.rows, d.columns.join(", "))
            })?;
        }
        DatasetsCmd::Ls { scope } => {
            let (t, p) = ctx.scope(&scope)?;
            let page: DatasetPage = ctx.client.get(&format!("/v1/tenants/{t}/projects/{p}/datasets")).await?;
            ctx.print(&page, || {
                let mut table = Table::new(&["ID", "NAME", "ROWS", "SIZE", "COLUMNS", "UPLOADED"])
                    .right(&[2, 3, 4])
                    .flex(&[1]);
                page.datasets.iter().for_each(|d| table.row(dataset_row(d)));
                crate::output::listing(&table, "no datasets yet: mapi datasets upload FILE.csv")
            })?;
        }
        DatasetsCmd::Get { id, scope } => {
            let (t, p) = ctx.scope(&scope)?;
            let d: DatasetView =
                ctx.client.get(&format!("/v1/tenants/{t}/projects/{p}/datasets/{id}")).await?;
            ctx.print(&d, || {
                let numeric = |c: &String| if d.numeric_columns.contains(c) { "numeric" } else { "text" };
                let size = crate::output::size(d.size);
                let mut out = format!("{} {} ({} rows, {size})\n", d.id, d.name, d.rows);
                d.columns.iter().for_each(|c| out.push_str(&format!("  {c:<32} {}\n", numeric(c))));
                out
            })?;
        }
        DatasetsCmd::Download { id, to, force, scope } => {
            let (t, p) = ctx.scope(&scope)?;
            let output = to.unwrap_or_else(|| PathBuf::from(format!("{id}.csv")));
            if output.exists() && !force {
                return Err(format!(
                    "{} exists: choose another --to, or --force to replace it",
                    output.display()
                )
                .into());
            }
            let path = format!("/v1/tenants/{t}/projects/{p}/datasets/{id}/url");
            let link: mapi_api::views::DatasetUrl =
                ctx.client.send(ctx.client.request(Method::POST, &path)).await?;
            let answer = reqwest::get(&link.url).await.map_err(|e| format!("downloading {id}: {e}"))?;
            if !answer.status().is_success() {
                return Err(format!("downloading {id}: the object store answered {}", answer.status()).into());
            }
            let bytes = answer.bytes().await.map_err(|e| format!("downloading {id}: {e}"))?;
            std::fs::write(&output, &bytes).map_err(|e| format!("{}: {e}", output.display()))?;
            let done = serde_json::json!({"dataset": id, "path": output, "bytes": bytes.len()});
            ctx.print(&done, || {
                format!("wrote {} ({})\n", output.display(), crate::output::size(bytes.len() as u64))
            })?;
        }
        DatasetsCmd::Rm { id, scope, yes } => {
            let (t, p) = ctx.scope(&scope)?;
            crate::confirm::confirm(&format!("dataset {id} will be deleted, with its file"), yes)?;
            let path = format!("/v1/tenants/{t}/projects/{p}/datasets/{id}");
            ctx.client.send::<()>(ctx.client.request(reqwest::Method::DELETE, &path)).await?;
            let done = serde_json::json!({"deleted": id});
            ctx.print(&done, || format!("deleted {id}\n"))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn parse_params(raw: &[String]) -> Result<BTreeMap<String, serde_json::Value>> {
    let mut out = BTreeMap::new();
    for p in raw {
        let (k, v) = p.split_once('=').ok_or_else(|| format!("--param `{p}`: write NAME=VALUE"))?;
        let value = serde_json::from_str(v).unwrap_or_else(|_| serde_json::Value::String(v.to_owned()));
        out.insert(k.to_owned(), value);
    }
    Ok(out)
}

pub(crate) fn money(micros: i64, currency: &str) -> String {
    mapi_cost::format_micros(micros, currency)
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
            out.push_str(&format!("  {}  class {}  {}  {}\n", a.attempt, a.class, exec, charge));
        }
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
            let fraction = r.progress.as_ref().map_or(0.0, |p| p.fraction).clamp(0.0, 1.0);
            let filled = (fraction * 30.0).round() as usize;
            let message = match &r.waiting {
                Some(w) => format!("waiting: {}", w.reason),
                None => r.progress.as_ref().and_then(|p| p.message.clone()).unwrap_or_default(),
            };
            // A terminal shows the time since submit; a file or pipe gets a line per change only.
            let elapsed = if terminal { format!("{:>6} ", since(r.created_at)) } else { String::new() };
            let line = format!(
                "\r[{}{}] {:>3.0}% {elapsed}{:<11} {}",
                "#".repeat(filled),
                ".".repeat(30 - filled),
                fraction * 100.0,
                r.state.as_str(),
                truncate(&message, if r.waiting.is_some() { 80 } else { 40 })
            );
            if line != last_line {
                if terminal {
                    eprint!("{line:<130}");
                } else {
                    eprintln!("{}", line.trim_start_matches('\r').trim_end());
                }
                let _ = std::io::stderr().flush();
                last_line = line;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
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

async fn runs(ctx: &Ctx, cmd: RunsCmd) -> Result<ExitCode> {
    match cmd {
        RunsCmd::Submit {
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
        } => {
            let (t, p) = ctx.scope(&scope)?;
            let body = serde_json::json!({
                "method": method, "dataset": dataset, "params": parse_params(&params)?,
                "class": class, "timeout_s": timeout, "tasks": tasks,
            });
            let mut req =
                ctx.client.request(Method::POST, &format!("/v1/tenants/{t}/projects/{p}/runs")).json(&body);
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
                    let wait =
                        v["would_wait"].as_str().map(|w| format!("would wait: {w}\n")).unwrap_or_default();
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
        RunsCmd::Get { id } => {
            let r: RunView = ctx.client.get(&format!("/v1/runs/{id}")).await?;
            ctx.print(&r, || describe_run(&r))?;
            Ok(ExitCode::SUCCESS)
        }
        RunsCmd::Ls { state, tag, experiment, param, metric, view, limit, scope } => {
            let (t, p) = ctx.scope(&scope)?;
            let filters = [
                ("state", state.map(|s| s.as_str().to_owned())),
                ("tag", tag.clone()),
                ("experiment", experiment.clone()),
                ("param", param.clone()),
                ("metric", metric.clone()),
                ("view", view.clone()),
            ];
            let page =
                runs_up_to(ctx, &format!("/v1/tenants/{t}/projects/{p}/runs"), &filters, limit).await?;
            ctx.print(&page, || {
                let mut table = Table::new(&["ID", "METHOD", "STATE", "CLASS", "ATT", "CREATED", "CHARGED"])
                    .right(&[4, 6])
                    .flex(&[1]);
                for r in &page.runs {
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
                let narrowed = tag.is_some()
                    || experiment.is_some()
                    || param.is_some()
                    || metric.is_some()
                    || view.is_some();
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
        RunsCmd::Cancel { id } => {
            let r: RunView =
                ctx.client.send(ctx.client.request(Method::POST, &format!("/v1/runs/{id}/cancel"))).await?;
            ctx.print(&r, || format!("{} is {}\n", r.id, r.state))?;
            Ok(ExitCode::SUCCESS)
        }
        RunsCmd::Compare { ids } => {
            let mut runs = Vec::with_capacity(ids.len());
            for id in &ids {
                runs.push(ctx.client.get::<RunView>(&format!("/v1/runs/{id}")).await?);
            }
            let c = crate::compare::compare(&runs);
            ctx.print(&c, || crate::output::listing(&crate::compare::table(&c), "nothing to compare"))?;
            Ok(ExitCode::SUCCESS)
        }
        RunsCmd::Retry { id, idempotency_key, watch: follow } => {
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
        RunsCmd::Log { id, metrics, step, params } => {
            let mut input =
                mapi_api::tracking::LogInput { params: parse_params(&params)?, ..Default::default() };
            for m in &metrics {
                let (name, value) =
                    m.split_once('=').ok_or_else(|| format!("--metric `{m}`: write NAME=VALUE"))?;
                let value: f64 =
                    value.parse().map_err(|_| format!("--metric `{m}`: the value must be a number"))?;
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
        RunsCmd::Image { id, file, name, step, link } => {
            let name = match name {
                Some(n) => n,
                None => {
                    file.file_name().and_then(|n| n.to_str()).ok_or("name the image with --name")?.to_owned()
                }
            };
            if link {
                let req = ctx.client.request(Method::POST, &format!("/v1/runs/{id}/images/{name}/url"));
                let url: serde_json::Value = ctx.client.send(req).await?;
                ctx.print(&url, || format!("{}\n", url["url"].as_str().unwrap_or_default()))?;
                return Ok(ExitCode::SUCCESS);
            }
            let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            let mut req =
                ctx.client.request(Method::PUT, &format!("/v1/runs/{id}/images/{name}")).body(bytes);
            if let Some(s) = step {
                req = req.query(&[("step", s)]);
            }
            let log: mapi_api::tracking::RunLog = ctx.client.send(req).await?;
            ctx.print(&log, || format!("logged image {name} to {id} ({} images)\n", log.images.len()))?;
            Ok(ExitCode::SUCCESS)
        }
        RunsCmd::Update { id, name, note, tags, experiment } => {
            let tags = tags
                .map(|t| t.split(',').map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned).collect());
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
        RunsCmd::Logs(args) => crate::logs::logs(&ctx.client, ctx.json, args).await,
        RunsCmd::Views(cmd) => {
            let scope = |tenant, project| ctx.scope(&Scope { tenant, project });
            crate::experiments::views(&ctx.client, scope, cmd, ctx.json).await
        }
        RunsCmd::Watch { id } => {
            let done = watch(ctx, &id).await?;
            ctx.print(&done, || describe_run(&done))?;
            Ok(exit_for(&done))
        }
        RunsCmd::Output { id, name, raw, table } => {
            let r: RunView = ctx.client.get(&format!("/v1/runs/{id}")).await?;
            let Some(out) = r.outputs.iter().find(|o| o.name == name) else {
                let names: Vec<&str> = r.outputs.iter().map(|o| o.name.as_str()).collect();
                return Err(format!("run {id} has no output `{name}` (it has: {})", names.join(", ")).into());
            };
            let bytes = reqwest::get(&out.url)
                .await
                .map_err(|source| ClientError::Unreachable { url: out.url.clone(), source })?
                .bytes()
                .await?;
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
    }
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
