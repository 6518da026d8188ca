//! The commands of identity and administration: `mapi login`, `mapi use`,
//! `mapi whoami`, `mapi tokens …`, `mapi admin tenants …`, `mapi admin
//! audit`, and `mapi api` for any other route.

use crate::output::{Cell, Table, print};
use crate::session::{self, Entry, Resolved};

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};

use crate::client::Client;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[derive(Debug, Subcommand)]
pub enum TokensCmd {
    /// Mint a token acting as you in the current project; prints the secret once.
    Create {
        name: String,
        /// A scope (repeat): admin, models:read, runs:create, score:*, score:<alias>, …
        #[arg(short = 's', long = "scope", required = true)]
        scopes: Vec<String>,
        #[arg(long)]
        expires_in_days: Option<u32>,
        /// Requests a minute.
        #[arg(long)]
        rate_limit: Option<u32>,
        /// vCPU-seconds per budget period.
        #[arg(long)]
        budget: Option<u64>,
        /// day or month.
        #[arg(long)]
        budget_period: Option<String>,
    },
    /// Your tokens in the current project (`--all`: everyone's, for project admins).
    Ls {
        #[arg(long)]
        all: bool,
    },
    /// Revoke a token by its id: every request with it is refused from then on.
    Revoke {
        id: String,
        /// Revoke without asking.
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum TenantsCmd {
    /// Create a tenant (operators).
    Create(TenantsCreateArgs),
    /// Every tenant (operators).
    Ls,
    /// Change a tenant's name, tier, status or residency (operators).
    Update(TenantsUpdateArgs),
    /// Export the tenant's documents and objects (its admins): a manifest
    /// of parts, each with a signed download URL.
    Export(TenantsExportArgs),
    /// Ask for the tenant's deletion (its admins): nothing is reachable from
    /// now on; its data is purged once the grace period is over.
    Delete(TenantsDeleteArgs),
    /// Cancel the tenant's deletion within its grace period (its admins).
    DeleteCancel(TenantsDeleteCancelArgs),
    /// Purge a deleted tenant now that its grace period is over, or retry a
    /// failed purge (operators).
    Purge(TenantsPurgeArgs),
    /// The tenant's deletion: scheduled, purging, or its certificate (operators).
    Deletion(TenantsDeletionArgs),
}

#[derive(Debug, Subcommand)]
pub enum QuotasCmd {
    /// Replace a tenant's policy: the limits given replace the tier's; the others fall back to it.
    Set(Box<QuotasSetArgs>),
    /// Every tenant's limits.
    Ls,
    /// Remove a tenant's override: its tier's defaults apply again.
    Rm(QuotasRmArgs),
}

#[derive(Debug, Subcommand)]
pub enum KillSwitchesCmd {
    /// Show the switches.
    Get,
    /// Set switches (with a reason).
    Set(KillSwitchesSetArgs),
}

#[derive(Debug, Subcommand)]
pub enum ExecutorsCmd {
    /// Each executor: status, caps, health, and whether shared tiers are open (and why not).
    Ls,
    /// Let an executor take new attempts again.
    Enable(ExecutorsEnableArgs),
    /// Stop an executor taking new attempts (incident containment): runs wait in the queue.
    Disable(ExecutorsDisableArgs),
    /// Record the conformance and security reports (a JSON file: target, conformance, security).
    Evidence(ExecutorsEvidenceArgs),
    /// Run the conformance and security suites through the executor and record their reports
    /// (exits 1 when shared tiers stay closed).
    Verify(ExecutorsVerifyArgs),
}

/// The arguments of `mapi admin tenants create`.
#[derive(Debug, clap::Args)]
pub struct TenantsCreateArgs {
    id: String,
    #[arg(long)]
    name: String,
    /// internal, verified, public or self-hosted-trusted.
    #[arg(long)]
    tier: String,
    /// eu, us, asia or a region.
    #[arg(long)]
    residency: String,
    /// Invited as the tenant's admin.
    #[arg(long)]
    admin_email: Option<String>,
    /// Create without asking.
    #[arg(long)]
    yes: bool,
}

/// The arguments of `mapi admin tenants update`.
#[derive(Debug, clap::Args)]
pub struct TenantsUpdateArgs {
    id: String,
    #[arg(long)]
    name: Option<String>,
    #[arg(long)]
    tier: Option<String>,
    /// active, suspended or deleting (suspending and deleting need --reason).
    #[arg(long)]
    status: Option<String>,
    #[arg(long)]
    residency: Option<String>,
    #[arg(long)]
    reason: Option<String>,
    /// Change without asking.
    #[arg(long)]
    yes: bool,
}

/// The arguments of `mapi admin tenants export`.
#[derive(Debug, clap::Args)]
pub struct TenantsExportArgs {
    id: String,
    /// Wait until the export is built and print its manifest.
    #[arg(long)]
    watch: bool,
}

/// The arguments of `mapi admin tenants delete`.
#[derive(Debug, clap::Args)]
pub struct TenantsDeleteArgs {
    id: String,
    /// Why (kept in the deletion certificate).
    #[arg(long)]
    reason: String,
    /// Delete without asking.
    #[arg(long)]
    yes: bool,
}

/// The arguments of `mapi admin tenants delete-cancel`.
#[derive(Debug, clap::Args)]
pub struct TenantsDeleteCancelArgs {
    id: String,
}

/// The arguments of `mapi admin tenants purge`.
#[derive(Debug, clap::Args)]
pub struct TenantsPurgeArgs {
    id: String,
    /// Purge without asking.
    #[arg(long)]
    yes: bool,
}

/// The arguments of `mapi admin tenants deletion`.
#[derive(Debug, clap::Args)]
pub struct TenantsDeletionArgs {
    id: String,
}

/// The arguments of `mapi admin quotas set`.
#[derive(Debug, clap::Args)]
pub struct QuotasSetArgs {
    /// Always `tenant`.
    #[arg(value_parser = ["tenant"])]
    level: String,
    tenant: String,
    #[arg(long)]
    vcpu_seconds_per_day: Option<u64>,
    #[arg(long)]
    vcpu_seconds_per_month: Option<u64>,
    #[arg(long)]
    concurrent_runs: Option<u32>,
    #[arg(long)]
    max_fanout_tasks: Option<u32>,
    /// S, M, L, XL or GPU.
    #[arg(long)]
    max_resource_class: Option<String>,
    /// Bytes, or with a unit: 200GiB, 500MiB.
    #[arg(long)]
    storage: Option<String>,
    #[arg(long)]
    egress_per_month: Option<String>,
    #[arg(long)]
    requests_per_minute: Option<u32>,
    /// Items one item job may hold.
    #[arg(long)]
    max_items_per_job: Option<u64>,
    /// Model-server instances the tenant's endpoints may hold together (the sum of their
    /// --max-instances).
    #[arg(long)]
    endpoint_instances: Option<u32>,
    /// Days a job's objects and documents are kept (at least 1; unset:
    /// the platform's MAPI_JOB_RETENTION_DAYS).
    #[arg(long)]
    job_retention_days: Option<u32>,
    /// Days after a run ended that its logs are kept (at least 1; unset:
    /// the platform's MAPI_RUN_RETENTION_DAYS).
    #[arg(long)]
    run_retention_days: Option<u32>,
    /// Days the tenant's audit entries are kept (at least 1; unset: the
    /// platform's MAPI_AUDIT_RETENTION_DAYS).
    #[arg(long)]
    audit_retention_days: Option<u32>,
    /// Days the tenant's webhook messages and delivery logs are kept (at
    /// least 1; unset: the platform's MAPI_DELIVERY_RETENTION_DAYS).
    #[arg(long)]
    delivery_retention_days: Option<u32>,
    /// Days after its upload a dataset no run reads is kept (at least 1;
    /// unset: the platform's MAPI_DATASET_RETENTION_DAYS, which keeps them).
    #[arg(long)]
    dataset_retention_days: Option<u32>,
    /// Days after its creation a model version serving no endpoint keeps
    /// its bundle and outputs (at least 1; unset: the platform's
    /// MAPI_MODEL_VERSION_RETENTION_DAYS, which keeps them).
    #[arg(long)]
    model_version_retention_days: Option<u32>,
    /// Days a run is kept once its executions were forgotten (at least 1;
    /// unset: the platform's MAPI_RUN_RECORD_RETENTION_DAYS, which keeps
    /// them).
    #[arg(long)]
    run_record_retention_days: Option<u32>,
    #[arg(long)]
    note: Option<String>,
    /// Replace without asking.
    #[arg(long)]
    yes: bool,
}

/// The arguments of `mapi admin quotas rm`.
#[derive(Debug, clap::Args)]
pub struct QuotasRmArgs {
    #[arg(value_parser = ["tenant"])]
    level: String,
    tenant: String,
    /// Remove without asking.
    #[arg(long)]
    yes: bool,
}

/// The arguments of `mapi admin kill-switches set`.
#[derive(Debug, clap::Args)]
pub struct KillSwitchesSetArgs {
    /// on or off: runs of tenant-uploaded plugin code.
    #[arg(long)]
    uploaded_code: Option<String>,
    /// The global spend cap in the price table's currency, like 500 or
    /// 12.5 (0 removes it).
    #[arg(long)]
    spend_cap: Option<String>,
    /// day or month.
    #[arg(long)]
    spend_cap_period: Option<String>,
    #[arg(long)]
    reason: String,
    /// Set without asking.
    #[arg(long)]
    yes: bool,
}

/// The arguments of `mapi admin executors enable`.
#[derive(Debug, clap::Args)]
pub struct ExecutorsEnableArgs {
    name: String,
    #[arg(long)]
    reason: String,
}

/// The arguments of `mapi admin executors disable`.
#[derive(Debug, clap::Args)]
pub struct ExecutorsDisableArgs {
    name: String,
    #[arg(long)]
    reason: String,
    /// Disable without asking.
    #[arg(long)]
    yes: bool,
}

/// The arguments of `mapi admin executors evidence`.
#[derive(Debug, clap::Args)]
pub struct ExecutorsEvidenceArgs {
    name: String,
    #[arg(long)]
    file: std::path::PathBuf,
}

/// The arguments of `mapi admin executors verify`.
#[derive(Debug, clap::Args)]
pub struct ExecutorsVerifyArgs {
    name: String,
}

/// The arguments of `mapi admin audit`.
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    #[arg(long)]
    tenant: Option<String>,
    #[arg(long)]
    project: Option<String>,
    #[arg(long)]
    actor: Option<String>,
    #[arg(long)]
    action: Option<String>,
    /// success, denied or failed.
    #[arg(long)]
    outcome: Option<String>,
    /// RFC 3339.
    #[arg(long)]
    since: Option<String>,
    /// How many entries, newest first (1–200).
    #[arg(short = 'n', long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=200))]
    limit: u32,
}

/// Bytes from `123`, `200GiB`, `500MiB`, `2KiB`.
fn bytes(s: &str) -> Result<u64> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 =
        num.parse().map_err(|_| format!("`{s}` is not a size: write 200GiB, 500MiB or a number of bytes"))?;
    let mult = match unit {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return Err(format!("unknown unit `{unit}`: use B, KiB, MiB, GiB or TiB").into()),
    };
    Ok(n * mult)
}

#[derive(Debug, Subcommand)]
pub enum AdminCmd {
    /// Tenants.
    #[command(subcommand)]
    Tenants(TenantsCmd),
    /// Quota overrides per tenant.
    #[command(subcommand)]
    Quotas(QuotasCmd),
    /// The platform's kill switches.
    #[command(subcommand)]
    KillSwitches(KillSwitchesCmd),
    /// Executors: health, the operators' switch, shared-tier evidence.
    #[command(subcommand)]
    Executors(ExecutorsCmd),
    /// The audit log: a tenant's (`--tenant`, tenant admins and operators) or everything (operators).
    Audit(AuditArgs),
}

/// How `mapi login` gets its ID token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignIn {
    /// Through the browser (`no_browser`: the person pastes the address back).
    Browser { no_browser: bool },
    /// From the development identity provider of `mapi dev`.
    Dev(String),
    /// Given (`-`: read from standard input).
    IdToken(String),
}

impl SignIn {
    pub fn of(dev: Option<String>, id_token: Option<String>, no_browser: bool) -> SignIn {
        match (dev, id_token) {
            (Some(email), _) => SignIn::Dev(email),
            (None, Some(t)) => SignIn::IdToken(t),
            (None, None) => SignIn::Browser { no_browser },
        }
    }
}

/// `mapi login`: sign in through the browser, with `--dev EMAIL` from the
/// development identity provider of `mapi dev`, or with an ID token.
pub async fn login(url: &str, how: SignIn, print_token: bool, json_out: bool) -> Result<()> {
    let http = reqwest::Client::new();
    let token = match how {
        SignIn::Browser { no_browser } => crate::browser_login::id_token(url, no_browser).await?,
        SignIn::Dev(email) => {
            let resp =
                http.post(format!("{url}/dev/idp/login")).json(&json!({"email": email})).send().await?;
            let status = resp.status();
            let body: Value = resp.json().await.unwrap_or_default();
            if !status.is_success() {
                return Err(format!(
                    "the development identity provider refused: {}",
                    body["detail"].as_str().unwrap_or("unknown error")
                )
                .into());
            }
            body["id_token"].as_str().ok_or("the identity provider sent no id_token")?.to_owned()
        }
        SignIn::IdToken(t) if t == "-" => {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
            s.trim().to_owned()
        }
        SignIn::IdToken(t) => t,
    };
    let client = Client::new(url, &token);
    let me: Value = client.send(client.request(Method::POST, "/v1/sessions")).await?;
    if print_token {
        crate::output::line(&token)?;
        return Ok(());
    }
    // A new sign-in starts in the first place this person may act, never in the last one's.
    let grant = me["grants"].as_array().and_then(|g| g.first());
    let tenant = grant.and_then(|g| g["tenant"].as_str()).map(str::to_owned);
    let mut project = grant.and_then(|g| g["project"].as_str()).map(str::to_owned);
    if let (Some(t), None) = (&tenant, &project) {
        project = first_project(&client, t).await;
    }
    let mut saved = session::load();
    let entry = Entry { token, tenant: tenant.clone(), project: project.clone(), session: true };
    saved.platforms.insert(url.to_owned(), entry);
    saved.current = Some(url.to_owned());
    session::save(&saved)?;
    print(json_out, &me, || {
        let place = match (tenant, project) {
            (Some(t), Some(p)) => format!("using {t}/{p} (change with `mapi use TENANT/PROJECT`)"),
            (Some(t), None) => format!("in tenant {t}: choose a project with `mapi use {t}/PROJECT`"),
            _ => "with no tenant yet: an operator or tenant admin adds you".to_owned(),
        };
        format!(
            "signed in as {}{}; {place}\n",
            me["user"].as_str().unwrap_or("?"),
            if me["operator"] == true { " (operator)" } else { "" },
        )
    })?;
    Ok(())
}

/// The project a tenant-wide grant starts in: `default` when the tenant has one, else its
/// first; none when it has none (or they cannot be listed).
async fn first_project(client: &Client, tenant: &str) -> Option<String> {
    let list: Value = client.get(&format!("/v1/tenants/{tenant}/projects")).await.ok()?;
    let ids: Vec<&str> = list["projects"].as_array()?.iter().filter_map(|p| p["project"].as_str()).collect();
    ids.iter().find(|id| **id == "default").or(ids.first()).map(|id| (*id).to_owned())
}

/// `mapi use TENANT/PROJECT`.
pub async fn use_scope(now: &Resolved, target: &str) -> Result<()> {
    let (t, p) = target.split_once('/').ok_or("write TENANT/PROJECT, e.g. acme/growth")?;
    mapi_domain::TenantId::parse(t).map_err(|e| format!("tenant `{t}`: {e}"))?;
    mapi_domain::ProjectId::parse(p).map_err(|e| format!("project `{p}`: {e}"))?;
    let (Some(url), Some(token)) = (&now.url, &now.token) else {
        return Err("not signed in to any platform: run `mapi login` (or start `mapi dev`) first".into());
    };
    may_act_in(&Client::new(url, token), t, p).await?;
    let mut saved = session::load();
    // A saved entry keeps its own token (a MAPI_TOKEN of this one command is not remembered).
    let (token, session) = match saved.platforms.get(url) {
        Some(e) => (e.token.clone(), e.session),
        None => (token.clone(), false),
    };
    let entry = Entry { token, tenant: Some(t.to_owned()), project: Some(p.to_owned()), session };
    saved.platforms.insert(url.clone(), entry);
    saved.current = Some(url.clone());
    session::save(&saved)?;
    eprintln!("using {t}/{p} on {url}");
    Ok(())
}

/// Refuses a tenant and project the caller has no role in (or, for a
/// tenant-wide role, a project the tenant does not have), naming the ones
/// they may choose; an operator's session may choose any that exists.
async fn may_act_in(client: &Client, t: &str, p: &str) -> Result<()> {
    let me: Value = client.get("/v1/whoami").await?;
    let grants: Vec<&Value> = me["grants"].as_array().into_iter().flatten().collect();
    let tenant_wide = grants.iter().any(|g| g["tenant"] == t && g["project"].is_null());
    if grants.iter().any(|g| g["tenant"] == t && g["project"] == p) {
        return Ok(());
    }
    if tenant_wide || me["operator"] == true {
        let projects: Value = client.get(&format!("/v1/tenants/{t}/projects")).await?;
        let names = projects["projects"].as_array().into_iter().flatten();
        if names.clone().any(|x| x["project"] == p) {
            return Ok(());
        }
        let known: Vec<&str> = names.filter_map(|x| x["project"].as_str()).collect();
        return Err(format!("tenant {t} has no project {p}; its projects: {}", known.join(", ")).into());
    }
    let mine: Vec<String> = grants
        .iter()
        .map(|g| match g["project"].as_str() {
            Some(project) => format!("{}/{project}", g["tenant"].as_str().unwrap_or("?")),
            None => format!("{}/*", g["tenant"].as_str().unwrap_or("?")),
        })
        .collect();
    let yours = if mine.is_empty() { "none yet".to_owned() } else { mine.join(", ") };
    Err(format!("you have no role in {t}/{p}; where you do: {yours}").into())
}

/// `mapi whoami`.
pub async fn whoami(client: &Client, now: &Resolved, json_out: bool) -> Result<()> {
    let me: Value = client.get("/v1/whoami").await?;
    print(json_out, &me, || {
        let mut out = format!(
            "{} ({}{}) on {}\n",
            me["user"].as_str().unwrap_or("?"),
            me["kind"].as_str().unwrap_or("?"),
            if me["operator"] == true { ", operator" } else { "" },
            client.url
        );
        out.push_str(&acting_in(&me, now));
        if let Some(t) = me["token"].as_object() {
            out.push_str(&format!(
                "token {} \"{}\" in {}/{}, scopes {}\n",
                t["id"].as_str().unwrap_or(""),
                t["name"].as_str().unwrap_or(""),
                t["tenant"].as_str().unwrap_or(""),
                t["project"].as_str().unwrap_or(""),
                t["scopes"]
                    .as_array()
                    .map(|s| s.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" "))
                    .unwrap_or_default()
            ));
        }
        for g in me["grants"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "  {}/{}  {}{}\n",
                g["tenant"].as_str().unwrap_or(""),
                g["project"].as_str().unwrap_or("(tenant-wide)"),
                g["role"].as_str().unwrap_or(""),
                if g["reviewer"] == true { " +reviewer" } else { "" }
            ));
        }
        out
    })?;
    Ok(())
}

/// The line saying where commands act, and as what role there.
fn acting_in(me: &Value, now: &Resolved) -> String {
    let (Some(t), Some(p)) = (&now.tenant, &now.project) else {
        return "no tenant and project chosen: `mapi use TENANT/PROJECT`\n".to_owned();
    };
    let grants = me["grants"].as_array().into_iter().flatten();
    let here =
        |g: &&Value| g["tenant"] == t.as_str() && (g["project"] == p.as_str() || g["project"].is_null());
    let role = grants.filter(here).filter_map(|g| g["role"].as_str()).collect::<Vec<_>>().join(", ");
    let role = if role.is_empty() { "no role there".to_owned() } else { role };
    format!("acting in {t}/{p} as {role}\n")
}

/// `mapi tokens …` in `tenant/project`.
pub async fn tokens(
    client: &Client,
    tenant: &str,
    project: &str,
    cmd: TokensCmd,
    json_out: bool,
) -> Result<()> {
    let base = format!("/v1/tenants/{tenant}/projects/{project}/tokens");
    match cmd {
        TokensCmd::Create { name, scopes, expires_in_days, rate_limit, budget, budget_period } => {
            let body = json!({
                "name": name, "scopes": scopes, "expires_in_days": expires_in_days,
                "rate_limit_per_minute": rate_limit, "budget_vcpu_seconds": budget, "budget_period": budget_period,
            });
            let created: Value = client.send(client.request(Method::POST, &base).json(&body)).await?;
            if json_out {
                crate::output::line(&serde_json::to_string_pretty(&created)?)?;
            } else {
                eprintln!(
                    "token {} created, expires {}; the secret is shown once:",
                    created["token"]["id"].as_str().unwrap_or("?"),
                    created["token"]["expires_at"].as_str().unwrap_or("?")
                );
                crate::output::line(created["secret"].as_str().unwrap_or(""))?;
            }
        }
        TokensCmd::Ls { all } => {
            let path = if all { format!("{base}?all=true") } else { base };
            let list: Value = client.get(&path).await?;
            print(json_out, &list, || tokens_table(&list))?;
        }
        TokensCmd::Revoke { id, yes } => {
            let change =
                format!("token {id} will be revoked: every request made with it is refused from then on");
            crate::confirm::confirm(&change, yes)?;
            let resp = client.request(Method::DELETE, &format!("{base}/{id}")).send().await?;
            if !resp.status().is_success() {
                let body: Value = resp.json().await.unwrap_or_default();
                return Err(format!(
                    "{}: {}",
                    body["code"].as_str().unwrap_or("error"),
                    body["detail"].as_str().unwrap_or("")
                )
                .into());
            }
            eprintln!("token {id} revoked");
        }
    }
    Ok(())
}

fn text(v: &Value) -> Cell {
    Cell::from(v.as_str().unwrap_or(""))
}

/// `mapi tokens ls` as a table.
fn tokens_table(list: &Value) -> String {
    let mut table = Table::new(&["ID", "NAME", "USER", "EXPIRES", "STATE", "SCOPES"]).flex(&[1, 5]);
    for t in list["tokens"].as_array().into_iter().flatten() {
        let scopes: Vec<&str> =
            t["scopes"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let state = if t["revoked_at"].is_null() { "active" } else { "revoked" };
        let expires = t["expires_at"].as_str().map_or("", |e| e.get(..10).unwrap_or(e));
        table.row(vec![
            text(&t["id"]),
            text(&t["name"]),
            text(&t["user"]),
            expires.into(),
            Cell::styled(state, (state == "revoked").then_some(crate::output::Style::Dim)),
            scopes.join(" ").into(),
        ]);
    }
    crate::output::listing(&table, "no tokens yet: mapi tokens create NAME -s SCOPE")
}

/// `mapi admin tenants ls` as a table.
fn tenants_table(page: &Value) -> String {
    let mut table = Table::new(&["ID", "NAME", "TIER", "STATUS", "RESIDENCY", "ADMIN"]).flex(&[1, 5]);
    for t in page["tenants"].as_array().into_iter().flatten() {
        table.row(vec![
            text(&t["id"]),
            text(&t["name"]),
            text(&t["tier"]),
            Cell::state(t["status"].as_str().unwrap_or("")),
            text(&t["residency"]),
            text(&t["admin_email"]),
        ]);
    }
    crate::output::listing(
        &table,
        "no tenants yet: mapi admin tenants create ID --name … --tier … --residency …",
    )
}

/// The policy fields `quotas set` replaces, in the order a diff shows them.
const POLICY_FIELDS: &[&str] = &[
    "vcpu_seconds_per_day",
    "vcpu_seconds_per_month",
    "concurrent_runs",
    "max_fanout_tasks",
    "max_resource_class",
    "storage_bytes",
    "egress_bytes_per_month",
    "requests_per_minute",
    "max_items_per_job",
    "endpoint_instances",
    "job_retention_days",
    "run_retention_days",
    "audit_retention_days",
    "delivery_retention_days",
    "dataset_retention_days",
    "model_version_retention_days",
    "run_record_retention_days",
    "note",
];

/// A tenant's quota override as it is (`null` when it has none).
async fn override_of(client: &Client, tenant: &str) -> Result<Value> {
    let list: Value = client.get("/v1/admin/quotas").await?;
    let found = list["tenants"].as_array().into_iter().flatten().find(|t| t["tenant"] == tenant);
    match found {
        Some(t) => Ok(t["policy"].clone()),
        None => Err(format!("no tenant {tenant}: `mapi admin tenants ls` lists them").into()),
    }
}

/// `base` with the non-null fields of `change` put over it.
fn merged(base: &Value, change: &Value) -> Value {
    let mut out = base.clone();
    if let (Some(o), Some(c)) = (out.as_object_mut(), change.as_object()) {
        c.iter().filter(|(_, v)| !v.is_null()).for_each(|(k, v)| {
            o.insert(k.clone(), v.clone());
        });
    }
    out
}

/// Shows what a tenant update changes and asks, unless `yes` or nothing changes.
async fn confirm_tenant_change(client: &Client, id: &str, body: &Value, yes: bool) -> Result<()> {
    let now: Value = client.get(&format!("/v1/tenants/{id}")).await?;
    let lines =
        crate::confirm::diff(&["name", "tier", "status", "residency"], &now, &merged(&now, body), "—");
    if lines.is_empty() {
        return Ok(());
    }
    crate::confirm::confirm(&format!("tenant {id} will change:\n{}", lines.join("\n")), yes)
}

/// An export in words: its state and, once ready, each part's URL.
fn export_in_words(e: &Value) -> String {
    let mut out = format!(
        "export {} of {} is {}\n",
        e["id"].as_str().unwrap_or("?"),
        e["tenant"].as_str().unwrap_or("?"),
        e["state"].as_str().unwrap_or("?")
    );
    if let Some(why) = e["error"].as_str() {
        out.push_str(&format!("  {why}\n"));
    }
    if e["state"] == "ready" {
        out.push_str(&format!(
            "  {} documents, {} objects; the URLs work until {}\n",
            e["documents"],
            e["objects"],
            e["expires_at"].as_str().unwrap_or("?")
        ));
        for part in e["parts"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "  {} ({} lines, {} bytes)\n    {}\n",
                part["name"].as_str().unwrap_or("?"),
                part["count"],
                part["size"],
                part["url"].as_str().unwrap_or("?")
            ));
        }
    }
    out
}

/// A deletion in words: its state, when the purge may start, and once
/// purged the certificate's counts.
fn deletion_in_words(d: &Value) -> String {
    let tenant = d["tenant"].as_str().unwrap_or("?");
    let mut out = format!(
        "deletion of {tenant}: {}, asked by {} at {} ({})\n",
        d["state"].as_str().unwrap_or("?"),
        d["requested_by"].as_str().unwrap_or("?"),
        d["requested_at"].as_str().unwrap_or("?"),
        d["reason"].as_str().unwrap_or("")
    );
    match d["state"].as_str() {
        Some("scheduled") => out.push_str(&format!(
            "  its admins may cancel until {}: mapi admin tenants delete-cancel {tenant}\n",
            d["purge_after"].as_str().unwrap_or("?")
        )),
        Some("purged") => {
            out.push_str(&format!("  purged at {}\n", d["purged_at"].as_str().unwrap_or("?")));
            for (side, what) in [("deleted", "deleted"), ("kept", "kept (anonymized)")] {
                for (name, n) in d[side].as_object().into_iter().flatten() {
                    out.push_str(&format!("  {what:<18} {name:<18} {n}\n"));
                }
            }
        }
        _ => {}
    }
    if let Some(e) = d["last_error"].as_str() {
        out.push_str(&format!("  the last delivery failed: {e}; retry: mapi admin tenants purge {tenant}\n"));
    }
    out
}

/// Asks for an export and, with `watch`, waits until it is built.
async fn export(client: &Client, id: &str, watch: bool) -> Result<Value> {
    let mut e: Value =
        client.send(client.request(Method::POST, &format!("/v1/tenants/{id}/exports"))).await?;
    let path = format!("/v1/tenants/{id}/exports/{}", e["id"].as_str().unwrap_or_default());
    while watch && e["state"] == "building" {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        e = client.get(&path).await?;
    }
    Ok(e)
}

/// A tenant's effective limits in words: one `name: value` line each.
fn limits_in_words(tenant: &str, t: &Value) -> String {
    let mut out = format!("quotas of {tenant} ({} tier):\n", t["tier"].as_str().unwrap_or("?"));
    for (name, value) in t["effective"].as_object().into_iter().flatten() {
        let shown = match value {
            Value::Null => "no limit".to_owned(),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.push_str(&format!("  {name:<24} {shown}\n"));
    }
    out.push_str(&format!("  {:<24} {} days\n", "jobs kept", t["job_retention_days"]));
    out.push_str(&format!("  {:<24} {} days\n", "run logs kept", t["run_retention_days"]));
    out.push_str(&format!("  {:<24} {} days\n", "audit entries kept", t["audit_retention_days"]));
    out.push_str(&format!("  {:<24} {} days\n", "webhook messages kept", t["delivery_retention_days"]));
    let kept = |field: &str, after: &str, otherwise: &str| match t[field].as_u64() {
        Some(d) => format!("{d} days after {after}"),
        None => otherwise.to_owned(),
    };
    let rows = [
        ("datasets kept", kept("dataset_retention_days", "upload", "until deleted")),
        ("unserved model versions", kept("model_version_retention_days", "creation", "kept")),
        ("runs kept", kept("run_record_retention_days", "their logs go", "until deleted")),
    ];
    for (what, shown) in rows {
        out.push_str(&format!("  {what:<24} {shown}\n"));
    }
    out
}

/// The kill switches (`GET /v1/admin/kill-switches`) in words.
fn switches_in_words(k: &Value) -> String {
    let s = &k["switches"];
    let cap = s["spend_cap_micros"].as_i64().map_or("none".to_owned(), |m| {
        format!(
            "{} per {}",
            mapi_cost::format_micros(m, mapi_cost::CURRENT.currency),
            s["spend_cap_period"].as_str().unwrap_or("month")
        )
    });
    format!(
        "uploaded code: {}\nspend cap: {cap}\nreason: {}\n",
        if s["untrusted_execution_enabled"] == true { "on" } else { "off" },
        k["reason"].as_str().unwrap_or("-")
    )
}

/// `mapi admin …`: one function per subcommand.
pub async fn admin(client: &Client, cmd: AdminCmd, json_out: bool) -> Result<()> {
    match cmd {
        AdminCmd::Tenants(TenantsCmd::Create(args)) => tenants_create(client, json_out, args).await,
        AdminCmd::Tenants(TenantsCmd::Ls) => tenants_ls(client, json_out).await,
        AdminCmd::Tenants(TenantsCmd::Update(args)) => tenants_update(client, json_out, args).await,
        AdminCmd::Tenants(TenantsCmd::Export(args)) => tenants_export(client, json_out, args).await,
        AdminCmd::Tenants(TenantsCmd::Delete(args)) => tenants_delete(client, json_out, args).await,
        AdminCmd::Tenants(TenantsCmd::DeleteCancel(args)) => {
            tenants_delete_cancel(client, json_out, args).await
        }
        AdminCmd::Tenants(TenantsCmd::Purge(args)) => tenants_purge(client, json_out, args).await,
        AdminCmd::Tenants(TenantsCmd::Deletion(args)) => tenants_deletion(client, json_out, args).await,
        AdminCmd::Quotas(QuotasCmd::Set(args)) => quotas_set(client, json_out, *args).await,
        AdminCmd::Quotas(QuotasCmd::Ls) => quotas_ls(client, json_out).await,
        AdminCmd::Quotas(QuotasCmd::Rm(args)) => quotas_rm(client, json_out, args).await,
        AdminCmd::KillSwitches(KillSwitchesCmd::Get) => kill_switches_get(client, json_out).await,
        AdminCmd::KillSwitches(KillSwitchesCmd::Set(args)) => kill_switches_set(client, json_out, args).await,
        AdminCmd::Executors(ExecutorsCmd::Ls) => executors_ls(client, json_out).await,
        AdminCmd::Executors(ExecutorsCmd::Enable(args)) => executors_enable(client, json_out, args).await,
        AdminCmd::Executors(ExecutorsCmd::Disable(args)) => executors_disable(client, json_out, args).await,
        AdminCmd::Executors(ExecutorsCmd::Evidence(args)) => executors_evidence(client, json_out, args).await,
        AdminCmd::Executors(ExecutorsCmd::Verify(args)) => executors_verify(client, json_out, args).await,
        AdminCmd::Audit(args) => audit(client, json_out, args).await,
    }
}

/// `mapi admin tenants create`.
async fn tenants_create(client: &Client, json_out: bool, args: TenantsCreateArgs) -> Result<()> {
    let TenantsCreateArgs { id, name, tier, residency, admin_email, yes } = args;
    let admin = admin_email.as_deref().map_or(String::new(), |e| format!(", {e} invited as its admin"));
    let change = format!("tenant {id} will be created: {name:?}, {tier} tier, {residency} residency{admin}");
    crate::confirm::confirm(&change, yes)?;
    let body =
        json!({"id": id, "name": name, "tier": tier, "residency": residency, "admin_email": admin_email});
    let t: Value = client.send(client.request(Method::POST, "/v1/admin/tenants").json(&body)).await?;
    print(json_out, &t, || {
        format!(
            "tenant {} created ({} tier, {} residency)\n",
            t["id"].as_str().unwrap_or("?"),
            t["tier"].as_str().unwrap_or("?"),
            t["residency"].as_str().unwrap_or("?")
        )
    })?;
    Ok(())
}

/// `mapi admin tenants ls`.
async fn tenants_ls(client: &Client, json_out: bool) -> Result<()> {
    let page: Value = client.get("/v1/admin/tenants").await?;
    print(json_out, &page, || tenants_table(&page))?;
    Ok(())
}

/// `mapi admin tenants update`.
async fn tenants_update(client: &Client, json_out: bool, args: TenantsUpdateArgs) -> Result<()> {
    let TenantsUpdateArgs { id, name, tier, status, residency, reason, yes } = args;
    let body =
        json!({"name": name, "tier": tier, "status": status, "residency": residency, "reason": reason});
    let body: Value = body
        .as_object()
        .map(|m| m.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    confirm_tenant_change(client, &id, &body, yes).await?;
    let t: Value =
        client.send(client.request(Method::PATCH, &format!("/v1/admin/tenants/{id}")).json(&body)).await?;
    print(json_out, &t, || {
        format!(
            "tenant {} is {} ({} tier)\n",
            t["id"].as_str().unwrap_or("?"),
            t["status"].as_str().unwrap_or("?"),
            t["tier"].as_str().unwrap_or("?")
        )
    })?;
    Ok(())
}

/// `mapi admin tenants export`.
async fn tenants_export(client: &Client, json_out: bool, args: TenantsExportArgs) -> Result<()> {
    let TenantsExportArgs { id, watch } = args;
    let e = export(client, &id, watch).await?;
    print(json_out, &e, || export_in_words(&e))?;
    Ok(())
}

/// `mapi admin tenants delete`.
async fn tenants_delete(client: &Client, json_out: bool, args: TenantsDeleteArgs) -> Result<()> {
    let TenantsDeleteArgs { id, reason, yes } = args;
    let change = format!(
        "tenant {id} will be deleted: nothing of it is reachable from now on, and its data is purged once the grace period is over"
    );
    crate::confirm::confirm(&change, yes)?;
    let body = json!({"reason": reason});
    let d: Value =
        client.send(client.request(Method::POST, &format!("/v1/tenants/{id}/deletion")).json(&body)).await?;
    print(json_out, &d, || deletion_in_words(&d))?;
    Ok(())
}

/// `mapi admin tenants delete-cancel`.
async fn tenants_delete_cancel(client: &Client, json_out: bool, args: TenantsDeleteCancelArgs) -> Result<()> {
    let TenantsDeleteCancelArgs { id } = args;
    let path = format!("/v1/tenants/{id}/deletion/cancel");
    let d: Value = client.send(client.request(Method::POST, &path)).await?;
    print(json_out, &d, || deletion_in_words(&d))?;
    Ok(())
}

/// `mapi admin tenants purge`.
async fn tenants_purge(client: &Client, json_out: bool, args: TenantsPurgeArgs) -> Result<()> {
    let TenantsPurgeArgs { id, yes } = args;
    crate::confirm::confirm(&format!("every document and object of tenant {id} will be deleted"), yes)?;
    let path = format!("/v1/tenants/{id}/deletion/purge");
    let d: Value = client.send(client.request(Method::POST, &path)).await?;
    print(json_out, &d, || match d["state"].as_str() {
        Some("purged") => deletion_in_words(&d),
        _ => format!("the purge of {id} is on its way: mapi admin tenants deletion {id}\n"),
    })?;
    Ok(())
}

/// `mapi admin tenants deletion`.
async fn tenants_deletion(client: &Client, json_out: bool, args: TenantsDeletionArgs) -> Result<()> {
    let TenantsDeletionArgs { id } = args;
    let d: Value = client.get(&format!("/v1/tenants/{id}/deletion")).await?;
    print(json_out, &d, || deletion_in_words(&d))?;
    Ok(())
}

/// `mapi admin quotas set`.
async fn quotas_set(client: &Client, json_out: bool, args: QuotasSetArgs) -> Result<()> {
    let QuotasSetArgs {
        tenant,
        vcpu_seconds_per_day,
        vcpu_seconds_per_month,
        concurrent_runs,
        max_fanout_tasks,
        max_resource_class,
        storage,
        egress_per_month,
        requests_per_minute,
        max_items_per_job,
        endpoint_instances,
        job_retention_days,
        run_retention_days,
        audit_retention_days,
        delivery_retention_days,
        dataset_retention_days,
        model_version_retention_days,
        run_record_retention_days,
        note,
        yes,
        ..
    } = args;
    let body = json!({
        "vcpu_seconds_per_day": vcpu_seconds_per_day, "vcpu_seconds_per_month": vcpu_seconds_per_month,
        "concurrent_runs": concurrent_runs, "max_fanout_tasks": max_fanout_tasks,
        "max_resource_class": max_resource_class, "storage_bytes": storage.as_deref().map(bytes).transpose()?,
        "egress_bytes_per_month": egress_per_month.as_deref().map(bytes).transpose()?,
        "requests_per_minute": requests_per_minute, "max_items_per_job": max_items_per_job,
        "endpoint_instances": endpoint_instances,
        "job_retention_days": job_retention_days, "run_retention_days": run_retention_days,
        "audit_retention_days": audit_retention_days, "delivery_retention_days": delivery_retention_days,
        "dataset_retention_days": dataset_retention_days,
        "model_version_retention_days": model_version_retention_days,
        "run_record_retention_days": run_record_retention_days, "note": note,
    });
    let before = override_of(client, &tenant).await?;
    let lines = crate::confirm::diff(POLICY_FIELDS, &before, &body, "the tier's");
    let change = if lines.is_empty() {
        format!("the quota override of {tenant} stays as it is")
    } else {
        format!(
            "the quota override of {tenant} will be replaced (limits not given fall back to the tier's):\n{}",
            lines.join("\n")
        )
    };
    crate::confirm::confirm(&change, yes || lines.is_empty())?;
    let t: Value =
        client.send(client.request(Method::PUT, &format!("/v1/admin/quotas/{tenant}")).json(&body)).await?;
    print(json_out, &t, || limits_in_words(&tenant, &t))?;
    Ok(())
}

/// `mapi admin quotas ls`.
async fn quotas_ls(client: &Client, json_out: bool) -> Result<()> {
    let list: Value = client.get("/v1/admin/quotas").await?;
    print(json_out, &list, || {
        let mut out = format!(
            "{:<20} {:<20} {:>10} {:>12} {:>6} {:>6} {:>5} {:>8} {:>9}  OVERRIDE\n",
            "TENANT", "TIER", "VCPU-S/DAY", "VCPU-S/MONTH", "CONC", "FANOUT", "CLASS", "REQ/MIN", "ITEMS/JOB"
        );
        let cell = |v: &Value| {
            if v.is_null() { "—".to_owned() } else { v.to_string().trim_matches('"').to_owned() }
        };
        for t in list["tenants"].as_array().into_iter().flatten() {
            let e = &t["effective"];
            out.push_str(&format!(
                "{:<20} {:<20} {:>10} {:>12} {:>6} {:>6} {:>5} {:>8} {:>9}  {}\n",
                t["tenant"].as_str().unwrap_or(""),
                t["tier"].as_str().unwrap_or(""),
                cell(&e["vcpu_seconds_per_day"]),
                cell(&e["vcpu_seconds_per_month"]),
                cell(&e["concurrent_runs"]),
                cell(&e["max_fanout_tasks"]),
                cell(&e["max_resource_class"]),
                cell(&e["requests_per_minute"]),
                cell(&e["max_items_per_job"]),
                if t["policy"].is_null() { "" } else { "yes" }
            ));
        }
        out
    })?;
    Ok(())
}

/// `mapi admin quotas rm`.
async fn quotas_rm(client: &Client, json_out: bool, args: QuotasRmArgs) -> Result<()> {
    let QuotasRmArgs { tenant, yes, .. } = args;
    let before = override_of(client, &tenant).await?;
    let lines = crate::confirm::diff(POLICY_FIELDS, &before, &Value::Null, "the tier's");
    let change = format!("the quota override of {tenant} will be removed:\n{}", lines.join("\n"));
    crate::confirm::confirm(&change, yes)?;
    let t: Value = client.send(client.request(Method::DELETE, &format!("/v1/admin/quotas/{tenant}"))).await?;
    print(json_out, &t, || {
        format!("quotas of {tenant} are the {} tier's again\n", t["tier"].as_str().unwrap_or("?"))
    })?;
    Ok(())
}

/// `mapi admin kill-switches get`.
async fn kill_switches_get(client: &Client, json_out: bool) -> Result<()> {
    let k: Value = client.get("/v1/admin/kill-switches").await?;
    print(json_out, &k, || switches_in_words(&k))?;
    Ok(())
}

/// `mapi admin kill-switches set`.
async fn kill_switches_set(client: &Client, json_out: bool, args: KillSwitchesSetArgs) -> Result<()> {
    let KillSwitchesSetArgs { uploaded_code, spend_cap, spend_cap_period, reason, yes } = args;
    let on = match uploaded_code.as_deref() {
        None => None,
        Some("on") => Some(true),
        Some("off") => Some(false),
        Some(other) => return Err(format!("--uploaded-code {other}: use on or off").into()),
    };
    let body = json!({
        "untrusted_execution_enabled": on,
        "spend_cap_micros": spend_cap.as_deref().map(mapi_cost::parse_micros).transpose()?,
        "spend_cap_period": spend_cap_period, "reason": reason,
    });
    let now: Value = client.get("/v1/admin/kill-switches").await?;
    let after = merged(&now["switches"], &body);
    let fields = ["untrusted_execution_enabled", "spend_cap_micros", "spend_cap_period"];
    let lines = crate::confirm::diff(&fields, &now["switches"], &after, "none");
    crate::confirm::confirm(&format!("the kill switches will change:\n{}", lines.join("\n")), yes)?;
    let k: Value = client.send(client.request(Method::PUT, "/v1/admin/kill-switches").json(&body)).await?;
    print(json_out, &k, || switches_in_words(&k))?;
    Ok(())
}

/// `mapi admin executors ls`.
async fn executors_ls(client: &Client, json_out: bool) -> Result<()> {
    let list: Value = client.get("/v1/admin/executors").await?;
    print(json_out, &list, || {
        let mut out = String::new();
        for e in list.as_array().into_iter().flatten() {
            let h = &e["health"];
            out.push_str(&format!(
                "{}  {}  isolation {}  running {}  queued {}  failed/h {}  jobs.run {}/{} a minute  429s/h {}\n  shared tiers: {} ({})\n",
                e["name"].as_str().unwrap_or("?"),
                e["status"].as_str().unwrap_or("?"),
                e["capabilities"]["isolation"].as_str().unwrap_or("?"),
                h["running"],
                h["queued"],
                h["failures_last_hour"],
                h["submits"]["submits_last_minute"],
                h["submits"]["submits_per_minute_limit"].as_u64().map_or("-".to_owned(), |l| l.to_string()),
                h["submits"]["throttled_last_hour"],
                if e["shared_tiers_enabled"] == true { "open" } else { "closed" },
                e["message"].as_str().unwrap_or(""),
            ));
        }
        out
    })?;
    Ok(())
}

/// `mapi admin executors enable`.
async fn executors_enable(client: &Client, json_out: bool, args: ExecutorsEnableArgs) -> Result<()> {
    let ExecutorsEnableArgs { name, reason } = args;
    executors_switch(client, json_out, &name, reason, true).await
}

/// `mapi admin executors disable`, after asking.
async fn executors_disable(client: &Client, json_out: bool, args: ExecutorsDisableArgs) -> Result<()> {
    let ExecutorsDisableArgs { name, reason, yes } = args;
    let change =
        format!("executor {name} will take no new attempts: queued runs wait until it is enabled again");
    crate::confirm::confirm(&change, yes)?;
    executors_switch(client, json_out, &name, reason, false).await
}

/// Switches executor `name` on or off, saying why.
async fn executors_switch(
    client: &Client,
    json_out: bool,
    name: &str,
    reason: String,
    enabled: bool,
) -> Result<()> {
    let body = json!({"enabled": enabled, "reason": reason});
    let e: Value =
        client.send(client.request(Method::PUT, &format!("/v1/admin/executors/{name}")).json(&body)).await?;
    print(json_out, &e, || format!("{name} is {}\n", e["status"].as_str().unwrap_or("?")))?;
    Ok(())
}

/// `mapi admin executors verify`: both suites, their cases and probes, and the gate after.
async fn executors_verify(client: &Client, json_out: bool, args: ExecutorsVerifyArgs) -> Result<()> {
    let name = args.name;
    let v: Value =
        client.send(client.request(Method::POST, &format!("/v1/admin/executors/{name}/verify"))).await?;
    print(json_out, &v, || {
        let mut out = String::new();
        for c in v["conformance"]["cases"].as_array().into_iter().flatten() {
            let mark = if c["passed"] == true { "passed" } else { "FAILED" };
            out.push_str(&format!("conformance  {:<48} {mark}", c["name"].as_str().unwrap_or("?")));
            if let Some(d) = c["detail"].as_str() {
                out.push_str(&format!("  {d}"));
            }
            out.push('\n');
        }
        out.push_str(&probe_lines(&v["security"]));
        let e = &v["executor"];
        out.push_str(&format!(
            "{name}: conformance {}, security {}; shared tiers {} ({})\n",
            if e["conformance_passed"] == true { "passed" } else { "FAILED" },
            if e["security_passed"] == true { "passed" } else { "FAILED" },
            if e["shared_tiers_enabled"] == true { "open" } else { "closed" },
            e["message"].as_str().unwrap_or(""),
        ));
        out
    })?;
    if v["executor"]["shared_tiers_enabled"] == true {
        Ok(())
    } else {
        Err(format!("shared tiers stay closed on {name}: the reports are recorded, see above").into())
    }
}

/// One line per probe of a security report.
pub(crate) fn probe_lines(report: &Value) -> String {
    let mut out = String::new();
    for p in report["probes"].as_array().into_iter().flatten() {
        let verdict = match (p["ran"] == true, p["blocked"] == true) {
            (false, _) => "DID NOT RUN",
            (true, true) => "blocked",
            (true, false) => "GOT THROUGH",
        };
        out.push_str(&format!(
            "security     {:<48} {verdict}  {}\n",
            p["name"].as_str().unwrap_or("?"),
            p["detail"].as_str().unwrap_or("")
        ));
    }
    out
}

/// `mapi security [EXECUTOR]`: the security suite alone, its report in the shape evidence
/// records (exits 1 unless it passed).
pub async fn security(client: &Client, json_out: bool, executor: Option<String>) -> Result<()> {
    let name = match executor {
        Some(name) => name,
        None => {
            let list: Value = client.get("/v1/admin/executors").await?;
            list[0]["name"].as_str().ok_or("this deployment lists no executor")?.to_owned()
        }
    };
    let report: Value =
        client.send(client.request(Method::POST, &format!("/v1/admin/executors/{name}/security"))).await?;
    print(json_out, &report, || probe_lines(&report))?;
    if report["passed"] == true {
        Ok(())
    } else {
        Err(format!("the security suite did not pass on {name}: a probe got through or did not run").into())
    }
}

/// `mapi admin executors evidence`.
async fn executors_evidence(client: &Client, json_out: bool, args: ExecutorsEvidenceArgs) -> Result<()> {
    let ExecutorsEvidenceArgs { name, file } = args;
    let raw = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let body: Value =
        serde_json::from_slice(&raw).map_err(|e| format!("{} is not JSON: {e}", file.display()))?;
    let e: Value = client
        .send(client.request(Method::PUT, &format!("/v1/admin/executors/{name}/evidence")).json(&body))
        .await?;
    print(json_out, &e, || {
        format!(
            "evidence recorded for {name}: conformance {}, security {}; shared tiers {} ({})\n",
            if e["conformance_passed"] == true { "passed" } else { "not passed" },
            if e["security_passed"] == true { "passed" } else { "not passed" },
            if e["shared_tiers_enabled"] == true { "open" } else { "closed" },
            e["message"].as_str().unwrap_or("")
        )
    })?;
    Ok(())
}

/// `mapi admin audit`.
async fn audit(client: &Client, json_out: bool, args: AuditArgs) -> Result<()> {
    let AuditArgs { tenant, project, actor, action, outcome, since, limit } = args;
    let path = match &tenant {
        Some(t) => format!("/v1/tenants/{t}/audit"),
        None => "/v1/admin/audit".to_owned(),
    };
    let mut query: Vec<(&str, String)> = vec![("limit", limit.to_string())];
    for (k, v) in
        [("project", project), ("actor", actor), ("action", action), ("outcome", outcome), ("since", since)]
    {
        if let Some(v) = v {
            query.push((k, v));
        }
    }
    let page: Value = client.send(client.request(Method::GET, &path).query(&query)).await?;
    print(json_out, &page, || {
        let mut out = String::new();
        for e in page["items"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "{}  {:<8} {:<26} {:<24} {:<36} {}{}{}\n",
                e["ts"].as_str().unwrap_or(""),
                e["outcome"].as_str().unwrap_or(""),
                e["action"].as_str().unwrap_or(""),
                e["actor"].as_str().unwrap_or(e["actor_kind"].as_str().unwrap_or("")),
                format!(
                    "{}:{}",
                    e["resource_kind"].as_str().unwrap_or(""),
                    e["resource_id"].as_str().unwrap_or("")
                ),
                if e["operator"] == true { "[operator] " } else { "" },
                e["problem"].as_str().map(|p| format!("{p} ")).unwrap_or_default(),
                e["detail"].as_str().unwrap_or("")
            ));
        }
        out
    })?;
    Ok(())
}

/// `mapi usage`: a project's usage, or the whole tenant's with `--tenant`.
pub async fn usage(
    client: &Client,
    tenant_project: (String, String),
    tenant_wide: Option<String>,
    period: &str,
    group_by: Option<String>,
    json_out: bool,
) -> Result<()> {
    let path = match &tenant_wide {
        Some(t) => format!("/v1/tenants/{t}/usage"),
        None => format!("/v1/tenants/{}/projects/{}/usage", tenant_project.0, tenant_project.1),
    };
    let mut query = vec![("period", period.to_owned())];
    if let Some(g) = group_by {
        query.push(("group_by", g));
    }
    let r: Value = client.send(client.request(Method::GET, &path).query(&query)).await?;
    let money = |m: &Value| {
        mapi_cost::format_micros(m.as_i64().unwrap_or(0), r["currency"].as_str().unwrap_or("USD"))
    };
    let secs = |ms: &Value| format!("{:.1}", ms.as_u64().unwrap_or(0) as f64 / 1000.0);
    print(json_out, &r, || {
        let t = &r["totals"];
        let mut out = format!(
            "{} {} {} → {}\ncost {}  vCPU-s {}  GiB-s {}  runs {}  attempts {}\n",
            r["tenant"].as_str().unwrap_or(""),
            r["project"].as_str().map(|p| format!("/{p}")).unwrap_or_else(|| " (whole tenant)".to_owned()),
            r["start"].as_str().unwrap_or(""),
            r["end"].as_str().unwrap_or(""),
            money(&t["cost_micros"]),
            secs(&t["vcpu_ms"]),
            secs(&t["gib_ms"]),
            t["runs"],
            t["attempts"]
        );
        for g in r["groups"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "  {:<24} {:>18}  vCPU-s {:>10}  runs {}\n",
                g["key"].as_str().unwrap_or(""),
                money(&g["totals"]["cost_micros"]),
                secs(&g["totals"]["vcpu_ms"]),
                g["totals"]["runs"]
            ));
        }
        for q in r["quotas"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "  quota {:<24} {} of {} ({:.0} %){}\n",
                q["limit"].as_str().unwrap_or(""),
                q["used"],
                q["value"],
                q["fraction"].as_f64().unwrap_or(0.0) * 100.0,
                q["warning"].as_u64().map(|w| format!("  ⚠ past {w} %")).unwrap_or_default()
            ));
        }
        out.push_str(&format!("{}\n", r["note"].as_str().unwrap_or("")));
        out
    })?;
    Ok(())
}

/// `mapi api METHOD PATH [-d JSON]`: any route, as the current credentials.
pub async fn api(client: &Client, method: &str, path: &str, data: Option<String>) -> Result<bool> {
    let method = Method::from_bytes(method.to_ascii_uppercase().as_bytes())?;
    let mut req = client.request(method, path);
    if let Some(d) = data {
        let body: Value = serde_json::from_str(&d).map_err(|e| format!("-d is not JSON: {e}"))?;
        req = req.json(&body);
    }
    let resp = req.send().await?;
    let ok = resp.status().is_success();
    let text = resp.text().await?;
    match serde_json::from_str::<Value>(&text) {
        Ok(v) => crate::output::line(&serde_json::to_string_pretty(&v)?)?,
        Err(_) if !text.is_empty() => crate::output::line(&text)?,
        Err(_) => {}
    }
    Ok(ok)
}
