//! `mapi experiments` (named sets of a project's runs) and `mapi runs
//! views` (saved views of the runs table): make, list, change and delete
//! them. A run joins an experiment with `mapi runs update ID --experiment
//! NAME`; `mapi runs ls --experiment NAME` and `--view NAME` list by them.

use std::process::ExitCode;

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};

use crate::client::Client;
use crate::output::{Table, print};
use crate::webhooks::Where;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[derive(Debug, Subcommand)]
pub enum ExperimentsCmd {
    /// Make an experiment: a named set of runs (runners).
    Create {
        /// 1 to 64 of a-z, 0-9, -, _ and .
        name: String,
        #[arg(long)]
        description: Option<String>,
        #[command(flatten)]
        at: Where,
    },
    /// The project's experiments.
    Ls {
        #[command(flatten)]
        at: Where,
    },
    /// Change an experiment's description.
    Update {
        name: String,
        #[arg(long)]
        description: String,
        #[command(flatten)]
        at: Where,
    },
    /// Delete an experiment that holds no run.
    Rm {
        name: String,
        #[command(flatten)]
        at: Where,
    },
}

#[derive(Debug, Subcommand)]
pub enum ViewsCmd {
    /// Save the runs table's filters and columns under a name (replacing one of that name).
    Save {
        name: String,
        #[arg(long)]
        state: Option<String>,
        #[arg(long)]
        method: Option<String>,
        #[arg(long)]
        tag: Option<String>,
        #[arg(long)]
        experiment: Option<String>,
        /// NAME=VALUE: runs whose param NAME is VALUE.
        #[arg(long)]
        param: Option<String>,
        /// NAME OP NUMBER: runs whose metric NAME compares so, e.g. 'r2>0.9'.
        #[arg(long)]
        metric: Option<String>,
        /// Comma-separated: id, name, method, dataset, state, class, attempt,
        /// created_at, created_by, charged, tags, experiment, params.NAME, metrics.NAME.
        #[arg(long, value_delimiter = ',')]
        columns: Option<Vec<String>>,
        #[command(flatten)]
        at: Where,
    },
    /// The project's saved views.
    Ls {
        #[command(flatten)]
        at: Where,
    },
    /// Delete a saved view.
    Rm {
        name: String,
        #[command(flatten)]
        at: Where,
    },
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// Deletes the `what` called `name` at `path` and says so.
async fn remove(client: &Client, path: &str, what: &str, name: &str, json_out: bool) -> Result<()> {
    client.send::<()>(client.request(Method::DELETE, path)).await?;
    print(json_out, &json!({"deleted": name}), || format!("deleted {what} {name}\n"))?;
    Ok(())
}

pub async fn experiments(
    client: &Client,
    scope: impl Fn(Option<String>, Option<String>) -> Result<(String, String)>,
    cmd: ExperimentsCmd,
    json_out: bool,
) -> Result<ExitCode> {
    let base = |at: Where| -> Result<String> {
        let (t, p) = scope(at.tenant, at.project)?;
        Ok(format!("/v1/tenants/{t}/projects/{p}/experiments"))
    };
    match cmd {
        ExperimentsCmd::Create { name, description, at } => {
            let body = json!({"name": name, "description": description});
            let made: Value = client.send(client.request(Method::POST, &base(at)?).json(&body)).await?;
            print(json_out, &made, || {
                format!("experiment {name} made: mapi runs update RUN_ID --experiment {name}\n")
            })?;
        }
        ExperimentsCmd::Ls { at } => {
            let page: Value = client.get(&base(at)?).await?;
            print(json_out, &page, || {
                let mut table = Table::new(&["NAME", "DESCRIPTION", "BY", "CREATED"]).flex(&[1]);
                for e in page["experiments"].as_array().into_iter().flatten() {
                    let created =
                        serde_json::from_value::<mapi_domain::Timestamp>(e["created_at"].clone()).ok();
                    table.row(vec![
                        text(&e["name"]).into(),
                        text(&e["description"]).into(),
                        text(&e["created_by"]).into(),
                        created.map(crate::output::ago).unwrap_or_default().into(),
                    ]);
                }
                crate::output::listing(&table, "no experiments yet: mapi experiments create NAME")
            })?;
        }
        ExperimentsCmd::Update { name, description, at } => {
            let path = format!("{}/{name}", base(at)?);
            let body = json!({"description": description});
            let e: Value = client.send(client.request(Method::PATCH, &path).json(&body)).await?;
            print(json_out, &e, || format!("experiment {name} updated\n"))?;
        }
        ExperimentsCmd::Rm { name, at } => {
            remove(client, &format!("{}/{name}", base(at)?), "experiment", &name, json_out).await?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn views(
    client: &Client,
    scope: impl Fn(Option<String>, Option<String>) -> Result<(String, String)>,
    cmd: ViewsCmd,
    json_out: bool,
) -> Result<ExitCode> {
    let base = |at: Where| -> Result<String> {
        let (t, p) = scope(at.tenant, at.project)?;
        Ok(format!("/v1/tenants/{t}/projects/{p}/run-views"))
    };
    match cmd {
        ViewsCmd::Save { name, state, method, tag, experiment, param, metric, columns, at } => {
            let filters = json!({
                "state": state, "method": method, "tag": tag, "experiment": experiment, "param": param,
                "metric": metric,
            });
            let filters: serde_json::Map<String, Value> = filters
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let body = json!({"filters": filters, "columns": columns});
            let path = format!("{}/{name}", base(at)?);
            let v: Value = client.send(client.request(Method::PUT, &path).json(&body)).await?;
            print(json_out, &v, || format!("view {name} saved: mapi runs ls --view {name}\n"))?;
        }
        ViewsCmd::Ls { at } => {
            let page: Value = client.get(&base(at)?).await?;
            print(json_out, &page, || {
                let mut table = Table::new(&["NAME", "FILTERS", "COLUMNS"]).flex(&[1, 2]);
                for v in page["views"].as_array().into_iter().flatten() {
                    let filters: Vec<String> = v["filters"]
                        .as_object()
                        .into_iter()
                        .flatten()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                        .collect();
                    let columns: Vec<&str> =
                        v["columns"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
                    table.row(vec![
                        text(&v["name"]).into(),
                        filters.join(" ").into(),
                        columns.join(",").into(),
                    ]);
                }
                crate::output::listing(
                    &table,
                    "no saved views yet: mapi runs views save NAME --state succeeded",
                )
            })?;
        }
        ViewsCmd::Rm { name, at } => {
            remove(client, &format!("{}/{name}", base(at)?), "view", &name, json_out).await?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
