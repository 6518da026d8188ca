//! What every command that talks to a platform is given: the client, where
//! it acts (the tenant and project of the credentials, or `--tenant` and
//! `--project`) and how it prints; and the parsing of `NAME=VALUE`
//! arguments.

use std::collections::BTreeMap;

use clap::Args;

use crate::client::Client;
use crate::error::Result;

/// The client and the session of one command.
pub(crate) struct Ctx {
    pub(crate) client: Client,
    pub(crate) now: crate::session::Resolved,
    pub(crate) json: bool,
}

impl Ctx {
    pub(crate) fn scope(&self, s: &Scope) -> Result<(String, String)> {
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

    pub(crate) fn print<T: serde::Serialize>(&self, value: &T, human: impl FnOnce() -> String) -> Result<()> {
        crate::output::print(self.json, value, human)
    }
}

#[derive(Debug, Args)]
pub(crate) struct Scope {
    /// Tenant (default: from the credentials, or MAPI_TENANT).
    #[arg(long, env = "MAPI_TENANT")]
    pub(crate) tenant: Option<String>,
    /// Project (default: from the credentials, or MAPI_PROJECT).
    #[arg(long, env = "MAPI_PROJECT")]
    pub(crate) project: Option<String>,
}

/// `NAME=VALUE` arguments as params: a value is read as JSON when it
/// parses, else as a string.
pub(crate) fn parse_params(raw: &[String]) -> Result<BTreeMap<String, serde_json::Value>> {
    let mut out = BTreeMap::new();
    for p in raw {
        let (k, v) = p.split_once('=').ok_or_else(|| format!("--param `{p}`: write NAME=VALUE"))?;
        let value = serde_json::from_str(v).unwrap_or_else(|_| serde_json::Value::String(v.to_owned()));
        out.insert(k.to_owned(), value);
    }
    Ok(out)
}
