//! Command-line parsing, the dispatch of each command to its module, and
//! the commands with no module of their own (datasets, `use`, `whoami`,
//! `usage`, `api`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mapi_api::views::{DatasetPage, DatasetSummary, DatasetView};
use reqwest::Method;

use crate::client::Client;
use crate::context::{Ctx, Scope, parse_params};
use crate::error::Result;
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
use crate::error::EXIT_CODES;

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the whole platform on this machine (embedded store, queue, objects, executor).
    #[cfg(feature = "platform")]
    Dev(crate::platform::DevArgs),
    /// Sign in: through your browser (the platform's identity provider), `--dev EMAIL` against
    /// `mapi dev`, or `--id-token TOKEN` from your identity provider.
    Login {
        #[arg(long, conflicts_with = "id_token")]
        dev: Option<String>,
        /// Open no browser: print the sign-in link, then read back the address the browser ends on.
        #[arg(long, conflicts_with_all = ["dev", "id_token"])]
        no_browser: bool,
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
    /// Operators: run the security suite's probes through an executor (the only one, unless
    /// named) and print what each tried and whether it was stopped; exits 1 unless all were.
    Security {
        /// The executor (default: this deployment's).
        executor: Option<String>,
    },
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
    Runs(crate::runs::RunsCmd),
    /// Item jobs: a method on every line of a JSON Lines file.
    #[command(subcommand)]
    Jobs(crate::jobs::JobsCmd),
    /// The methods there are: parameters, outputs, examples, and which fit a model.
    #[command(subcommand)]
    Methods(crate::methods::MethodsCmd),
    /// Model versions: succeeded runs' outputs as signed bundles.
    #[command(subcommand)]
    Models(crate::models::ModelsCmd),
    /// Governance policies: what model versions must pass before they serve traffic.
    #[command(subcommand)]
    Policies(crate::governance::PoliciesCmd),
    /// Model endpoints: serve a model version, score it, promote and roll back.
    #[command(subcommand)]
    Endpoints(crate::endpoints::EndpointsCmd),
    /// Workflows: runs, parameter sweeps, validations and deployments chained into one run.
    #[command(subcommand)]
    Workflows(crate::workflows::WorkflowsCmd),
    /// Experiments: named sets of runs (`mapi runs update ID --experiment NAME`).
    #[command(subcommand)]
    Experiments(crate::experiments::ExperimentsCmd),
    /// Webhooks: be told when runs start and end (project admins).
    #[command(subcommand)]
    Webhooks(crate::webhooks::WebhooksCmd),
    /// Plugins: your own methods, published from a directory (project admins).
    #[command(subcommand)]
    Plugins(crate::plugins::PluginsCmd),
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
            ExitCode::from(crate::error::exit_code(&*e))
        }
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
            crate::account::use_scope(&now, &target).await?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Login { dev, id_token, no_browser, print_token } => {
            let url =
                now.url.clone().ok_or("no platform to sign in to: set MAPI_URL (or start `mapi dev`)")?;
            let how = crate::account::SignIn::of(dev, id_token, no_browser);
            crate::account::login(url.trim_end_matches('/'), how, print_token, json).await?;
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
        Command::Security { executor } => {
            crate::account::security(&ctx.client, ctx.json, executor).await?;
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
        Command::Runs(cmd) => crate::runs::run(&ctx, cmd).await,
        Command::Jobs(cmd) => {
            let scope = |tenant, project| ctx.scope(&Scope { tenant, project });
            crate::jobs::run(&ctx.client, scope, parse_params, cmd, ctx.json).await
        }
        Command::Methods(cmd) => {
            let scope = |tenant, project| ctx.scope(&Scope { tenant, project });
            crate::methods::run(&ctx.client, scope, cmd, ctx.json).await
        }
        Command::Models(cmd) => {
            let scope = |tenant, project| ctx.scope(&Scope { tenant, project });
            crate::models::run(&ctx.client, scope, cmd, ctx.json).await
        }
        Command::Policies(cmd) => {
            let scope = |tenant, project| ctx.scope(&Scope { tenant, project });
            crate::governance::policies(&ctx.client, scope, cmd, ctx.json).await
        }
        Command::Endpoints(cmd) => {
            let scope = |tenant, project| ctx.scope(&Scope { tenant, project });
            crate::endpoints::run(&ctx.client, scope, cmd, ctx.json).await
        }
        Command::Workflows(cmd) => {
            let scope = |tenant, project| ctx.scope(&Scope { tenant, project });
            crate::workflows::run(&ctx.client, scope, cmd, ctx.json).await
        }
        Command::Webhooks(cmd) => {
            let scope = |tenant, project| ctx.scope(&Scope { tenant, project });
            crate::webhooks::run(&ctx.client, scope, cmd, ctx.json).await
        }
        Command::Experiments(cmd) => {
            let scope = |tenant, project| ctx.scope(&Scope { tenant, project });
            crate::experiments::experiments(&ctx.client, scope, cmd, ctx.json).await
        }
        Command::Plugins(cmd) => {
            let scope = |tenant, project| ctx.scope(&Scope { tenant, project });
            crate::plugins::run(&ctx.client, scope, cmd, ctx.json).await
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
