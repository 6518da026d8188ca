//! Governance from the command line: `mapi models validate|validations|
//! approve|reject|withdraw|deprecate` and `mapi policies get|set|rm`.

use std::process::ExitCode;

use clap::Subcommand;
use mapi_api::governance::{
    Better, DecideValidation, DeprecateVersion, Improvement, Policy, PolicyView, SubmitValidation,
    ValidationPage, ValidationView, Verdict,
};
use reqwest::Method;

use crate::client::Client;
use crate::output::print;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Validations of model versions (flattened into `mapi models`).
#[derive(Debug, Subcommand)]
pub enum ValidationCmd {
    /// Submit a model version for validation against the governance policy in force.
    Validate {
        /// The model version (mv_…).
        id: String,
        /// The endpoint it is to serve (needed when the policy asks an improvement over the version serving).
        #[arg(long)]
        endpoint: Option<String>,
    },
    /// A model version's validations, newest first.
    Validations { id: String },
    /// Approve a pending validation (a reviewer, signed in, not its submitter).
    Approve {
        /// The validation (val_…).
        validation: String,
        /// Why: kept with the decision and in the audit log.
        #[arg(long)]
        reason: String,
    },
    /// Reject a pending validation (a reviewer, signed in, not its submitter).
    Reject {
        validation: String,
        #[arg(long)]
        reason: String,
    },
    /// Withdraw a pending validation.
    Withdraw { validation: String },
    /// Deprecate a model version: it may no longer be promoted (admins).
    Deprecate {
        id: String,
        #[arg(long)]
        reason: String,
    },
}

/// `mapi policies`: what model versions must pass before they serve traffic.
#[derive(Debug, Subcommand)]
pub enum PoliciesCmd {
    /// Show the project's policy (or the tenant-wide one) and what is in force.
    Get {
        #[command(flatten)]
        at: Where,
    },
    /// Set (replace) the project's policy, or with --tenant-wide the tenant's.
    Set {
        /// A bound on a metric of the version's run, e.g. `r_squared >= 0.9` (repeatable).
        #[arg(long = "threshold")]
        thresholds: Vec<String>,
        /// An improvement over the version serving: METRIC:BY:higher or METRIC:BY:lower (repeatable).
        #[arg(long = "improve")]
        improvements: Vec<String>,
        /// Reviewers' approvals required (0–5).
        #[arg(long, default_value_t = 0)]
        approvals: u32,
        /// Days an approval admits promotions.
        #[arg(long)]
        expires_after_days: Option<u32>,
        #[command(flatten)]
        at: Where,
    },
    /// Remove the project's policy, or with --tenant-wide the tenant's.
    Rm {
        #[command(flatten)]
        at: Where,
    },
}

/// Which policy: a project's, or the tenant-wide one.
#[derive(Debug, clap::Args)]
pub struct Where {
    /// The tenant-wide policy rather than the project's.
    #[arg(long)]
    tenant_wide: bool,
    #[arg(long, env = "MAPI_TENANT")]
    tenant: Option<String>,
    #[arg(long, env = "MAPI_PROJECT")]
    project: Option<String>,
}

fn describe_validation(v: &ValidationView) -> String {
    let s = &v.validation;
    let mut out = format!(
        "validation {}  {}\nversion    {}{}\nsubmitted  by {} at {}\n",
        v.id,
        s.state.as_str(),
        v.model_version,
        v.endpoint.as_ref().map(|e| format!(" for endpoint {e}")).unwrap_or_default(),
        s.submitted_by,
        s.submitted_at
    );
    out.push_str(&format!("approvals  {} of {}\n", s.approvals(), s.policy.approvals));
    for c in &s.checks {
        out.push_str(&format!("  {}  {}  ({})\n", if c.passed { "pass" } else { "FAIL" }, c.check, c.detail));
    }
    for d in &s.decisions {
        let verdict = if d.approve { "approved" } else { "rejected" };
        out.push_str(&format!("  {verdict} by {}: {}\n", d.by, d.reason));
    }
    if let Some(e) = s.expires_at {
        out.push_str(&format!("expires    {e}\n"));
    }
    out
}

fn describe_policy(p: &PolicyView) -> String {
    let name = match &p.project {
        Some(project) => format!("project {}/{project}", p.tenant),
        None => format!("tenant {} (every project)", p.tenant),
    };
    let mut out = match &p.policy {
        Some(_) => format!("policy of {name}\n"),
        None => format!("no policy of its own for {name}\n"),
    };
    let f = &p.in_force;
    if f.is_empty() {
        out.push_str("in force   nothing: versions serve without validation\n");
        return out;
    }
    out.push_str("in force\n");
    for t in &f.thresholds {
        out.push_str(&format!("  check      {t}\n"));
    }
    for i in &f.improvements {
        out.push_str(&format!("  improve    {} by ≥ {} ({} is better)\n", i.metric, i.by, better(i.better)));
    }
    out.push_str(&format!("  approvals  {}\n", f.approvals));
    if let Some(d) = f.expires_after_days {
        out.push_str(&format!("  expires    after {d} days\n"));
    }
    out
}

fn better(b: Better) -> &'static str {
    match b {
        Better::Higher => "higher",
        Better::Lower => "lower",
    }
}

fn improvement(s: &str) -> Result<Improvement> {
    let wrong =
        || format!("--improve {s}: write METRIC:BY:higher or METRIC:BY:lower (e.g. r_squared:0.01:higher)");
    let mut parts = s.split(':');
    let (Some(metric), Some(by), Some(dir), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(wrong().into());
    };
    let better = match dir {
        "higher" => Better::Higher,
        "lower" => Better::Lower,
        _ => return Err(wrong().into()),
    };
    Ok(Improvement { metric: metric.to_owned(), by: by.parse().map_err(|_| wrong())?, better })
}

/// Runs a validation command.
pub async fn validations(client: &Client, cmd: ValidationCmd, json: bool) -> Result<ExitCode> {
    let decide = |validation: String, decision: Verdict, reason: String| async move {
        let body = DecideValidation { decision, reason };
        let url = format!("/v1/validations/{validation}/approvals");
        client.send::<ValidationView>(client.request(Method::POST, &url).json(&body)).await
    };
    let v: ValidationView = match cmd {
        ValidationCmd::Validate { id, endpoint } => {
            let url = format!("/v1/model-versions/{id}/validations");
            client.send(client.request(Method::POST, &url).json(&SubmitValidation { endpoint })).await?
        }
        ValidationCmd::Validations { id } => {
            let page: ValidationPage = client.get(&format!("/v1/model-versions/{id}/validations")).await?;
            let text = || page.validations.iter().map(describe_validation).collect::<Vec<_>>().join("\n");
            print(json, &page, || {
                if page.validations.is_empty() { format!("no validations of {id} yet\n") } else { text() }
            })?;
            return Ok(ExitCode::SUCCESS);
        }
        ValidationCmd::Approve { validation, reason } => decide(validation, Verdict::Approve, reason).await?,
        ValidationCmd::Reject { validation, reason } => decide(validation, Verdict::Reject, reason).await?,
        ValidationCmd::Withdraw { validation } => {
            client.send(client.request(Method::POST, &format!("/v1/validations/{validation}/cancel"))).await?
        }
        ValidationCmd::Deprecate { id, reason } => {
            let url = format!("/v1/model-versions/{id}/deprecate");
            client.send::<()>(client.request(Method::POST, &url).json(&DeprecateVersion { reason })).await?;
            print(json, &serde_json::json!({"deprecated": id}), || {
                format!("model version {id} is deprecated\n")
            })?;
            return Ok(ExitCode::SUCCESS);
        }
    };
    print(json, &v, || describe_validation(&v))?;
    Ok(ExitCode::SUCCESS)
}

/// Runs a policies command; `scope` resolves a tenant and project from flags or the credentials.
pub async fn policies(
    client: &Client,
    scope: impl FnOnce(Option<String>, Option<String>) -> Result<(String, String)>,
    cmd: PoliciesCmd,
    json: bool,
) -> Result<ExitCode> {
    let at = match &cmd {
        PoliciesCmd::Get { at } | PoliciesCmd::Set { at, .. } | PoliciesCmd::Rm { at } => at,
    };
    let (t, p) = scope(at.tenant.clone(), at.project.clone())?;
    let path = if at.tenant_wide {
        format!("/v1/tenants/{t}/policy")
    } else {
        format!("/v1/tenants/{t}/projects/{p}/policy")
    };
    let view: PolicyView = match cmd {
        PoliciesCmd::Get { .. } => client.get(&path).await?,
        PoliciesCmd::Set { thresholds, improvements, approvals, expires_after_days, .. } => {
            let mut parsed = Vec::with_capacity(thresholds.len());
            for t in &thresholds {
                parsed.push(t.parse().map_err(|e| format!("--threshold: {e}"))?);
            }
            let improvements = improvements.iter().map(|s| improvement(s)).collect::<Result<Vec<_>>>()?;
            let policy = Policy { thresholds: parsed, improvements, approvals, expires_after_days };
            client.send(client.request(Method::PUT, &path).json(&policy)).await?
        }
        PoliciesCmd::Rm { .. } => {
            client.send::<()>(client.request(Method::DELETE, &path)).await?;
            client.get(&path).await?
        }
    };
    print(json, &view, || describe_policy(&view))?;
    Ok(ExitCode::SUCCESS)
}
