//! `mapi models versions`: the model versions of succeeded runs of
//! model-producing methods (signed bundles of their outputs), their
//! verified manifests, download URLs minted only after the manifest
//! verifies, and downloads checked against it ([`crate::download`]).

use crate::output::{self, Table, print};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use mapi_api::views::{ArtifactUrls, ModelVersionPage, ModelVersionView};
use reqwest::Method;

use crate::client::Client;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[derive(Debug, Subcommand)]
pub enum ModelsCmd {
    /// Model versions: succeeded fits' outputs, sealed and signed.
    #[command(subcommand)]
    Versions(VersionsCmd),
    #[command(flatten)]
    Validation(crate::governance::ValidationCmd),
}

#[derive(Debug, Subcommand)]
pub enum VersionsCmd {
    /// List a project's model versions, newest first.
    Ls {
        #[arg(long, default_value_t = 20)]
        limit: u32,
        #[arg(long, env = "MAPI_TENANT")]
        tenant: Option<String>,
        #[arg(long, env = "MAPI_PROJECT")]
        project: Option<String>,
    },
    /// Show a version: its run, signing key and the artifacts of its verified manifest.
    Get { id: String },
    /// Signed download URLs for every artifact (refused if anything fails its integrity check).
    Urls { id: String },
    /// Download every artifact into a directory, each checked against the manifest's size and SHA-256.
    #[command(after_help = DOWNLOAD_EXAMPLES)]
    Download {
        /// The model version's id (mv_…), as `mapi models versions ls` lists it.
        id: String,
        /// Where to write the artifacts (created if missing; default ./<version id>/).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Replace files in DIR whose bytes differ from the version's artifacts.
        #[arg(long)]
        force: bool,
    },
}

const DOWNLOAD_EXAMPLES: &str = "Examples:
  mapi models versions download mv_01…                  # into ./mv_01…/
  mapi models versions download mv_01… --dir model      # into ./model/
  mapi models versions download mv_01… --dir model --force
                                                        # replace files that differ
  mapi --json models versions download mv_01…           # what was written, as JSON

A file already there with the pinned bytes is kept; nothing is written
unless every existing file matches or --force is given.";

fn describe(v: &ModelVersionView) -> String {
    let mut out = format!(
        "model version {}\nrun           {} (attempt {}, {})\ncreated       {}\nmanifest      sha256 {}\nsigned by     {}\nartifacts\n",
        v.id, v.run, v.attempt, v.method, v.created_at, v.manifest_sha256, v.key_version
    );
    for a in &v.artifacts {
        out.push_str(&format!("  {}  {} bytes  sha256 {}\n", a.name, a.size, a.sha256));
    }
    out
}

/// Runs `cmd`; `scope` resolves a tenant and project from flags or the credentials.
pub async fn run(
    client: &Client,
    scope: impl FnOnce(Option<String>, Option<String>) -> Result<(String, String)>,
    cmd: ModelsCmd,
    json: bool,
) -> Result<ExitCode> {
    let cmd = match cmd {
        ModelsCmd::Versions(cmd) => cmd,
        ModelsCmd::Validation(cmd) => return crate::governance::validations(client, cmd, json).await,
    };
    match cmd {
        VersionsCmd::Ls { limit, tenant, project } => {
            let (t, p) = scope(tenant, project)?;
            let req = client
                .request(Method::GET, &format!("/v1/tenants/{t}/projects/{p}/model-versions"))
                .query(&[("page_size", limit.to_string())]);
            let page: ModelVersionPage = client.send(req).await?;
            let mut table =
                Table::new(&["ID", "RUN", "METHOD", "ARTIFACTS", "CREATED"]).right(&[3]).flex(&[2]);
            for v in &page.model_versions {
                table.row(vec![
                    v.id.to_string().into(),
                    v.run.to_string().into(),
                    v.method.as_str().into(),
                    v.artifact_count.to_string().into(),
                    output::ago(v.created_at).into(),
                ]);
            }
            let empty = "no model versions yet: each succeeded run of a method that fits a model makes one (mapi methods ls, column MODEL)";
            print(json, &page, || output::listing(&table, empty))?;
        }
        VersionsCmd::Get { id } => {
            let v: ModelVersionView = client.get(&format!("/v1/model-versions/{id}")).await?;
            print(json, &v, || describe(&v))?;
        }
        VersionsCmd::Urls { id } => {
            let urls: ArtifactUrls =
                client.send(client.request(Method::POST, &format!("/v1/model-versions/{id}/urls"))).await?;
            let mut out = format!("valid for {} s\n", urls.expires_in_s);
            for a in &urls.artifacts {
                out.push_str(&format!("{}  sha256 {}\n  {}\n", a.name, a.sha256, a.url));
            }
            print(json, &urls, || out)?;
        }
        VersionsCmd::Download { id, dir, force } => {
            return crate::download::download(client, &id, dir, force, json).await;
        }
    }
    Ok(ExitCode::SUCCESS)
}
