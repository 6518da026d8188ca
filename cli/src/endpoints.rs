//! `mapi endpoints`: serve a model version, score it, promote another
//! version through the gate, roll back, delete.

use std::process::ExitCode;

use clap::Subcommand;
use mapi_api::endpoints::{
    Container, ContainerExample, CreateEndpoint, EndpointPage, EndpointView, PromoteEndpoint, ScaleEndpoint,
    ScoreRequest, served,
};
use reqwest::Method;
use serde_json::{Map, Value};

use crate::client::Client;
use crate::output::{Cell, Table, print};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[derive(Debug, clap::Args)]
pub struct Where {
    #[arg(long, env = "MAPI_TENANT")]
    tenant: Option<String>,
    #[arg(long, env = "MAPI_PROJECT")]
    project: Option<String>,
}

/// What a revision serves: a model version, or your own model-server image.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = true)]
pub struct ServeArgs {
    /// The model version to serve (`mv_…`) on the platform's model server.
    #[arg(long, conflicts_with = "image")]
    model_version: Option<String>,
    /// Your own model-server image: on Cloud Run a pullable reference, on one machine the path
    /// of an OCI image layout (directory or tar), run in a gVisor sandbox without network.
    #[arg(long)]
    image: Option<String>,
    /// The port the image's server listens on.
    #[arg(long, default_value_t = 8080, requires = "image")]
    port: u16,
    /// The path the image's server answers with a 2xx once it can serve.
    #[arg(long, default_value = "/health", requires = "image")]
    health_path: String,
    /// A variable set to one of your secrets: `NAME=SECRET` or `NAME=SECRET:VERSION` (repeatable).
    #[arg(long = "secret", requires = "image", value_name = "NAME=SECRET")]
    secrets: Vec<String>,
    /// A path the smoke test requests after the health check (a 2xx passes).
    #[arg(long, requires = "image")]
    example_path: Option<String>,
    /// The JSON body the smoke test POSTs to --example-path (absent: a GET).
    #[arg(long, requires = "example_path")]
    example_body: Option<String>,
}

impl ServeArgs {
    /// The body's `model_version` and `container`.
    fn body(self) -> Result<(Option<mapi_domain::ModelVersionId>, Option<Container>)> {
        let version = match &self.model_version {
            Some(v) => {
                Some(mapi_domain::ModelVersionId::parse(v).map_err(|e| format!("--model-version: {e}"))?)
            }
            None => None,
        };
        let Some(image) = self.image else { return Ok((version, None)) };
        // A path on this machine (an OCI image layout for local endpoints) is sent whole, so the
        // platform finds it whatever its working directory; a registry reference is sent as is.
        let image = match std::fs::canonicalize(&image) {
            Ok(path) => path.to_string_lossy().into_owned(),
            Err(_) => image,
        };
        let mut secrets = std::collections::BTreeMap::new();
        for s in &self.secrets {
            let (name, secret) =
                s.split_once('=').ok_or_else(|| format!("--secret {s}: give NAME=SECRET"))?;
            secrets.insert(name.to_owned(), secret.to_owned());
        }
        let example = match self.example_path {
            None => None,
            Some(path) => {
                let body = match &self.example_body {
                    Some(b) => Some(
                        serde_json::from_str(b).map_err(|e| format!("--example-body is not JSON: {e}"))?,
                    ),
                    None => None,
                };
                Some(ContainerExample { path, body })
            }
        };
        let container = Container { image, port: self.port, health_path: self.health_path, secrets, example };
        Ok((None, Some(container)))
    }
}

#[derive(Debug, Subcommand)]
pub enum EndpointsCmd {
    /// Serve a model version, or your own model-server image, as an endpoint (private, CPU,
    /// scaling to zero by default).
    Create {
        alias: String,
        #[command(flatten)]
        serve: ServeArgs,
        /// `cpu` or `l4`.
        #[arg(long, default_value = "cpu")]
        accelerator: String,
        /// `us`, `eu` or a region's name, within the tenant's data residency (default: derived from it).
        #[arg(long)]
        region: Option<String>,
        #[arg(long, default_value_t = 0)]
        min_instances: u32,
        #[arg(long, default_value_t = 3)]
        max_instances: u32,
        /// `private` (scores need a session or a token) or `public` (anyone may score it at the
        /// platform's routes, charged to the tenant; its server stays private).
        #[arg(long, default_value = "private")]
        access: String,
        /// Wait until it is ready (or failed).
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        at: Where,
    },
    /// List a project's endpoints.
    Ls {
        #[command(flatten)]
        at: Where,
    },
    /// Show an endpoint: revisions and traffic, the promotion under way, usage and history.
    Get {
        alias: String,
        #[command(flatten)]
        at: Where,
    },
    /// Score rows: `--row a=1.5,b=2` (repeatable) or `--rows FILE` (a JSON list of objects).
    Score {
        alias: String,
        #[arg(long = "row")]
        row: Vec<String>,
        #[arg(long)]
        rows: Option<std::path::PathBuf>,
        /// Also show each prediction's standard error.
        #[arg(long)]
        std_errors: bool,
        #[command(flatten)]
        at: Where,
    },
    /// Deploy another model version (or image) at 0 % and shift traffic to it through the gate.
    Promote {
        alias: String,
        #[command(flatten)]
        serve: ServeArgs,
        /// Wait until it is promoted or rolled back, printing each step (a step that needs
        /// scores waits for them: send them from elsewhere).
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        at: Where,
    },
    /// Change how many instances an endpoint keeps warm and may scale to.
    Scale {
        alias: String,
        /// Instances kept warm (0 scales to zero when idle); left out, it stays.
        #[arg(long = "min")]
        min_instances: Option<u32>,
        /// The most instances (1–100); left out, it stays.
        #[arg(long = "max")]
        max_instances: Option<u32>,
        #[command(flatten)]
        at: Where,
    },
    /// Return all traffic to the last good revision at once.
    Rollback {
        alias: String,
        #[command(flatten)]
        at: Where,
    },
    /// Delete an endpoint and its service.
    Delete {
        alias: String,
        #[command(flatten)]
        at: Where,
        /// Delete without asking.
        #[arg(long)]
        yes: bool,
    },
}

/// An endpoint in words.
pub fn describe(e: &EndpointView) -> String {
    let mut out = format!(
        "endpoint {}  {}{}\nserves   {} on {} in {} ({}…{} instances, {})\nhost     {} service {}\n",
        e.alias,
        e.status,
        e.message.as_ref().map(|m| format!(": {m}")).unwrap_or_default(),
        served(e.model_version.as_ref(), e.image.as_deref()),
        e.accelerator,
        e.region,
        e.min_instances,
        e.max_instances,
        e.access,
        e.hosting,
        e.service,
    );
    for d in &e.deprecated {
        out.push_str(&format!(
            "WARNING  serves {}, deprecated by {} ({}): promote another version or roll back\n",
            d.model_version, d.by, d.reason
        ));
    }
    out.push_str("revisions\n");
    for r in &e.revisions {
        out.push_str(&format!(
            "  {:<4} {:<30} {:>3} %  {}\n",
            r.tag,
            served(r.model_version.as_ref(), r.image.as_deref()),
            r.traffic_percent,
            r.role
        ));
    }
    if let Some(p) = &e.promotion {
        out.push_str(&format!(
            "promotion {} ({}): {} at {} %\n",
            served(p.model_version.as_ref(), p.image.as_deref()),
            p.tag,
            p.phase,
            p.canary_percent
        ));
    }
    out.push_str(&format!(
        "usage    {} scores, {} errors, {:.3} s compute, {}\n",
        e.usage.requests,
        e.usage.errors,
        e.usage.compute_ms as f64 / 1000.0,
        mapi_cost::format_micros(i64::try_from(e.usage.cost_micros).unwrap_or(i64::MAX), "USD")
    ));
    out.push_str("history\n");
    for ev in e.events.iter().rev().take(10).collect::<Vec<_>>().into_iter().rev() {
        out.push_str(&format!("  {}  {:<17} {}\n", ev.at, ev.kind, ev.detail));
    }
    out
}

/// Follows the promotion `e` started until it ends (the endpoint then has
/// no promotion, and its last event says how), printing each phase and step
/// as it is reached (not with `--json`).
async fn until_promotion_ends(
    client: &Client,
    url: &str,
    mut e: EndpointView,
    json: bool,
) -> Result<EndpointView> {
    let mut shown = None;
    while let Some(p) = &e.promotion {
        let now = (p.phase.clone(), p.canary_percent);
        if !json && shown.as_ref() != Some(&now) {
            let what = served(p.model_version.as_ref(), p.image.as_deref());
            println!("promotion {what} ({}): {} at {} %", p.tag, p.phase, p.canary_percent);
        }
        shown = Some(now);
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        e = client.get(url).await?;
    }
    Ok(e)
}

/// Whether the endpoint's last event is a promotion that ended well.
fn promoted(e: &EndpointView) -> bool {
    e.events.last().is_some_and(|ev| ev.kind == "promoted")
}

/// `a=1.5,b=2` as a row.
fn parse_row(s: &str) -> Result<Map<String, Value>> {
    let mut row = Map::new();
    for pair in s.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').ok_or_else(|| format!("`{pair}` is not column=number"))?;
        let n: f64 = v.trim().parse().map_err(|_| format!("`{v}` (column {k}) is not a number"))?;
        row.insert(k.trim().to_owned(), Value::from(n));
    }
    Ok(row)
}

fn rows_of(row: &[String], file: Option<&std::path::Path>) -> Result<Vec<Map<String, Value>>> {
    let mut rows: Vec<Map<String, Value>> = row.iter().map(|r| parse_row(r)).collect::<Result<_>>()?;
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let more: Vec<Map<String, Value>> = serde_json::from_str(&text).map_err(|_| {
            format!("{}: write a JSON list of objects, e.g. [{{\"a\": 1.5}}]", path.display())
        })?;
        rows.extend(more);
    }
    if rows.is_empty() {
        return Err("give rows to score: --row a=1.5,b=2 or --rows FILE".into());
    }
    Ok(rows)
}

/// Runs `cmd`; `scope` resolves a tenant and project from flags or the credentials.
pub async fn run(
    client: &Client,
    scope: impl Fn(Option<String>, Option<String>) -> Result<(String, String)>,
    cmd: EndpointsCmd,
    json: bool,
) -> Result<ExitCode> {
    let base = |at: Where| -> Result<String> {
        let (t, p) = scope(at.tenant, at.project)?;
        Ok(format!("/v1/tenants/{t}/projects/{p}/endpoints"))
    };
    match cmd {
        EndpointsCmd::Create {
            alias,
            serve,
            accelerator,
            region,
            min_instances,
            max_instances,
            access,
            wait,
            at,
        } => {
            let base = base(at)?;
            let (model_version, container) = serve.body()?;
            let body = CreateEndpoint {
                alias: alias.clone(),
                model_version,
                container,
                accelerator: accelerator.parse().map_err(|e| format!("--accelerator: {e}"))?,
                region,
                min_instances,
                max_instances,
                access: access.parse().map_err(|e| format!("--access: {e}"))?,
            };
            let mut e: EndpointView = client.send(client.request(Method::POST, &base).json(&body)).await?;
            while wait && e.status == mapi_domain::endpoint::EndpointStatus::Deploying {
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                e = client.get(&format!("{base}/{alias}")).await?;
            }
            print(json, &e, || describe(&e))?;
            if e.status == mapi_domain::endpoint::EndpointStatus::Failed {
                return Ok(ExitCode::FAILURE);
            }
        }
        EndpointsCmd::Ls { at } => {
            let page: EndpointPage = client.get(&base(at)?).await?;
            let mut table = Table::new(&["ALIAS", "STATUS", "MODEL VERSION", "HW", "REGION", "SCORES"])
                .right(&[5])
                .flex(&[0]);
            for e in &page.endpoints {
                table.row(vec![
                    e.alias.to_string().into(),
                    Cell::state(e.status.as_str()),
                    served(e.model_version.as_ref(), e.image.as_deref()).into(),
                    e.accelerator.as_str().into(),
                    e.region.as_str().into(),
                    e.usage.requests.to_string().into(),
                ]);
            }
            let empty = "no endpoints yet: mapi endpoints create ALIAS --model-version mv_…";
            print(json, &page, || crate::output::listing(&table, empty))?;
        }
        EndpointsCmd::Get { alias, at } => {
            let e: EndpointView = client.get(&format!("{}/{alias}", base(at)?)).await?;
            print(json, &e, || describe(&e))?;
        }
        EndpointsCmd::Score { alias, row, rows, std_errors, at } => {
            let body = ScoreRequest { rows: rows_of(&row, rows.as_deref())?, std_errors };
            let url = format!("{}/{alias}:score", base(at)?);
            let answer: Value = client.send(client.request(Method::POST, &url).json(&body)).await?;
            let mut out = String::new();
            let revision = answer["revision"].as_str().unwrap_or("?");
            for (i, p) in answer["predictions"].as_array().into_iter().flatten().enumerate() {
                // A plugin's model may answer any JSON value: it is shown as JSON.
                let value = p["value"].as_f64().map_or_else(|| p["value"].to_string(), |v| format!("{v:.6}"));
                match p["std_error"].as_f64() {
                    Some(se) => out.push_str(&format!("{i:>4}  {value}  ± {se:.6}\n")),
                    None => out.push_str(&format!("{i:>4}  {value}\n")),
                }
            }
            out.push_str(&format!("(revision {revision})\n"));
            print(json, &answer, || out)?;
        }
        EndpointsCmd::Promote { alias, serve, wait, at } => {
            let (model_version, container) = serve.body()?;
            let body = PromoteEndpoint { model_version, container };
            let base = base(at)?;
            let url = format!("{base}/{alias}:promote");
            let mut e: EndpointView = client.send(client.request(Method::POST, &url).json(&body)).await?;
            if wait {
                e = until_promotion_ends(client, &format!("{base}/{alias}"), e, json).await?;
            }
            print(json, &e, || describe(&e))?;
            if wait && !promoted(&e) {
                return Ok(ExitCode::FAILURE);
            }
        }
        EndpointsCmd::Scale { alias, min_instances, max_instances, at } => {
            let body = ScaleEndpoint { min_instances, max_instances };
            let url = format!("{}/{alias}:scale", base(at)?);
            let e: EndpointView = client.send(client.request(Method::POST, &url).json(&body)).await?;
            print(json, &e, || describe(&e))?;
        }
        EndpointsCmd::Rollback { alias, at } => {
            let url = format!("{}/{alias}:rollback", base(at)?);
            let e: EndpointView = client.send(client.request(Method::POST, &url)).await?;
            print(json, &e, || describe(&e))?;
        }
        EndpointsCmd::Delete { alias, at, yes } => {
            let change =
                format!("endpoint {alias} will be deleted: its service stops and scores are refused");
            crate::confirm::confirm(&change, yes)?;
            let url = format!("{}/{alias}", base(at)?);
            let e: EndpointView = client.send(client.request(Method::DELETE, &url)).await?;
            print(json, &e, || format!("endpoint {} is {}\n", e.alias, e.status))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
