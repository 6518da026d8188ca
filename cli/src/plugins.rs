//! `mapi plugins`: publish a plugin's directory, list, show and delete the
//! project's plugin versions. Publishing checks the directory here first
//! (the same checks the platform makes), so a manifest's mistake is named
//! with its line before anything is sent.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};

use crate::client::Client;
use crate::output::{Table, print};
use crate::webhooks::Where;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[derive(Debug, Subcommand)]
pub enum PluginsCmd {
    /// Publish the plugin in DIR (its mapi-plugin.toml and Python source) as a new version
    /// (project admins; tokens need plugins:publish).
    Publish {
        /// The plugin's directory.
        dir: PathBuf,
        #[command(flatten)]
        at: Where,
    },
    /// The project's plugin versions.
    Ls {
        #[command(flatten)]
        at: Where,
    },
    /// A plugin's versions and the methods each adds.
    Show {
        name: String,
        #[command(flatten)]
        at: Where,
    },
    /// Delete a version of a plugin (runs already submitted keep their package).
    Rm {
        name: String,
        version: String,
        #[command(flatten)]
        at: Where,
    },
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

fn methods_of(p: &Value) -> String {
    let names: Vec<&str> =
        p["methods"].as_array().into_iter().flatten().filter_map(|m| m["name"].as_str()).collect();
    names.join(", ")
}

pub async fn run(
    client: &Client,
    scope: impl Fn(Option<String>, Option<String>) -> Result<(String, String)>,
    cmd: PluginsCmd,
    json_out: bool,
) -> Result<ExitCode> {
    let base = |at: Where| -> Result<String> {
        let (t, p) = scope(at.tenant, at.project)?;
        Ok(format!("/v1/tenants/{t}/projects/{p}/plugins"))
    };
    match cmd {
        PluginsCmd::Publish { dir, at } => {
            let bytes = mapi_plugins::package::pack(&dir)
                .map_err(|e| format!("cannot pack {}: {e}", dir.display()))?;
            let package =
                mapi_plugins::package::read(&bytes).map_err(|e| format!("{}: {e}", dir.display()))?;
            let req = client
                .request(Method::POST, &base(at)?)
                .header("content-type", "application/x-tar")
                .body(bytes);
            let p: Value = client.send(req).await?;
            print(json_out, &p, || {
                let name = &package.manifest.name;
                format!(
                    "published {name} {} (sha256 {}): {}\n",
                    package.manifest.version,
                    &package.sha256[..12],
                    methods_of(&p)
                )
            })?;
        }
        PluginsCmd::Ls { at } => {
            let page: Value = client.get(&base(at)?).await?;
            print(json_out, &page, || {
                let mut table = Table::new(&["NAME", "VERSION", "METHODS", "BY"]).flex(&[2]);
                for p in page["plugins"].as_array().into_iter().flatten() {
                    table.row(vec![
                        text(&p["name"]).into(),
                        text(&p["version"]).into(),
                        methods_of(p).into(),
                        text(&p["created_by"]).into(),
                    ]);
                }
                crate::output::listing(&table, "no plugins yet: mapi plugins publish DIR")
            })?;
        }
        PluginsCmd::Show { name, at } => {
            let page: Value = client.get(&format!("{}/{}", base(at)?, crate::client::segment(&name))).await?;
            print(json_out, &page, || {
                let mut out = String::new();
                for p in page["plugins"].as_array().into_iter().flatten() {
                    out.push_str(&format!(
                        "{} {}  sha256 {}  {} bytes  base {}\n",
                        text(&p["name"]),
                        text(&p["version"]),
                        text(&p["sha256"]),
                        p["size"],
                        text(&p["base"])
                    ));
                    for m in p["methods"].as_array().into_iter().flatten() {
                        let params: Vec<String> = m["params"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .map(|x| format!("{} ({})", text(&x["name"]), text(&x["kind"])))
                            .collect();
                        out.push_str(&format!(
                            "  {}  {}\n    params: {}\n    outputs: {}\n",
                            text(&m["name"]),
                            text(&m["summary"]),
                            if params.is_empty() { "none".to_owned() } else { params.join(", ") },
                            m["outputs"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .filter_map(Value::as_str)
                                .collect::<Vec<_>>()
                                .join(", ")
                        ));
                    }
                }
                out
            })?;
        }
        PluginsCmd::Rm { name, version, at } => {
            let path = format!(
                "{}/{}/{}",
                base(at)?,
                crate::client::segment(&name),
                crate::client::segment(&version)
            );
            client.send::<()>(client.request(Method::DELETE, &path)).await?;
            print(json_out, &json!({"deleted": format!("{name} {version}")}), || {
                format!("deleted {name} {version}\n")
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
