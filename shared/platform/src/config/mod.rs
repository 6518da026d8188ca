//! `Config`: every setting of the platform, read once at start from the
//! environment, each variable declared once ([`vars`], with its default
//! and meaning) and parsed through its declaration. The README's table of
//! variables is generated from [`variables`].
//!
//! A function reads only the [`Section`]s it uses: the base (profile,
//! home, public URL, secrets, the store) and then,
//! by its [`Uses`], the tenant API's limits, a run's lifecycle timings,
//! sessions, Pub/Sub push authentication, the object store, the queue, the
//! executor, the bundle signer and item jobs. A section it does not use is
//! not read at all (its fields hold their defaults), so a bad item-job
//! setting cannot stop `push-events` from starting, and
//! [`Platform::configured`](crate::Platform::configured) builds no port
//! of a section it does not use.

mod secrets;
#[cfg(test)]
mod tests;
pub mod vars;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use mapi_domain::{ResourceClass, UserId};
use mapi_settings::{Choice, Env, Invalid, Var};
use mapi_store::sqlite::Durability;

pub use mapi_cloudtasks::settings::QueueSettings as CloudTasksConfig;
pub use secrets::Secrets;
pub use vars::VARIABLES;

use self::vars as v;

/// Which deployment this is (`MAPI_PROFILE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// One machine, one developer: secrets are generated and kept in `$MAPI_HOME`.
    Dev,
    /// Many tenants: every secret must come from the environment.
    MultiTenant,
}

impl Choice for Profile {
    const CHOICES: &'static [(&'static str, Self)] =
        &[("dev", Profile::Dev), ("multi-tenant", Profile::MultiTenant)];
}

/// A part of the configuration that a function may or may not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Section {
    /// Upload and body limits, idempotency, the platform's run limit.
    Api,
    /// Event grace, dispatch lease, stall time, infrastructure retries, tick interval, run retention.
    Lifecycle,
    /// Session ID tokens, operators and the development accounts.
    Sessions,
    /// What a Pub/Sub push token must say.
    Push,
    /// `MAPI_OBJECTS` and its adapter.
    Objects,
    /// `MAPI_QUEUE` and its adapter.
    Queue,
    /// `MAPI_EXECUTOR`, its adapter and the shared-tier evidence age.
    Executor,
    /// `MAPI_HOSTING` (where endpoints are served), its adapter and idle time.
    Hosting,
    /// What webhook URLs may reach (`MAPI_WEBHOOKS_ALLOW_LOOPBACK`).
    Webhooks,
    /// `MAPI_SIGNER` and its adapter.
    Signer,
    /// `MAPI_JOB_*`.
    Jobs,
}

/// The sections a function reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Uses(&'static [Section]);

impl Uses {
    /// Every section: `mapi dev` and tests, which serve every function in one process.
    pub const ALL: Uses = Uses(&[
        Section::Api,
        Section::Lifecycle,
        Section::Sessions,
        Section::Push,
        Section::Objects,
        Section::Queue,
        Section::Executor,
        Section::Signer,
        Section::Jobs,
        Section::Hosting,
        Section::Webhooks,
    ]);

    /// These sections (and the base every function reads).
    pub const fn only(sections: &'static [Section]) -> Uses {
        Uses(sections)
    }

    pub fn has(self, section: Section) -> bool {
        self.0.contains(&section)
    }

    /// The object settings are read for the object store and for the
    /// executor (an attempt's bootstrap URL names the bucket).
    fn reads_objects(self) -> bool {
        self.has(Section::Objects) || self.has(Section::Executor)
    }
}

/// What one dataset may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DatasetLimits {
    pub max_columns: usize,
    pub max_rows: usize,
    pub max_cell_bytes: usize,
}

/// A dataset's record names each of its columns (twice: all, and the
/// numeric ones) and a stored record is at most 1 MiB, so with names of up
/// to 256 bytes no setting above 2,000 columns can be honoured.
fn dataset_limits(env: Env<'_>) -> Result<DatasetLimits, ConfigError> {
    let max_columns: usize = v::DATASET_MAX_COLUMNS.parse(env)?;
    if !(1..=2000).contains(&max_columns) {
        return Err(ConfigError::Invalid(format!(
            "{} is {max_columns}: write 1 to 2000 (a dataset's record names each column)",
            v::DATASET_MAX_COLUMNS.name
        )));
    }
    Ok(DatasetLimits {
        max_columns,
        max_rows: v::DATASET_MAX_ROWS.parse(env)?,
        max_cell_bytes: v::DATASET_MAX_CELL_BYTES.parse(env)?,
    })
}

/// Every setting.
#[derive(Clone, Debug)]
pub struct Config {
    /// The sections read; the others hold their defaults.
    pub uses: Uses,
    pub profile: Profile,
    pub home: PathBuf,
    pub port: u16,
    /// Where executions and the CLI reach the platform.
    pub public_url: String,
    /// `MAPI_PUBLIC_URL` was set (otherwise `mapi dev` uses the address it bound).
    pub public_url_set: bool,
    pub secrets: Secrets,
    pub sqlite_durability: Durability,
    /// How long a requested tenant deletion may be cancelled before the purge.
    pub tenant_deletion_grace: Duration,
    /// The connection guard's limits and timeouts, for a process that
    /// serves without the runtime's own configuration (`mapi dev`).
    pub guard: mapi_runtime::GuardConfig,
    pub max_dataset_bytes: usize,
    /// What a dataset may hold, checked while an upload is read.
    pub dataset_limits: DatasetLimits,
    pub max_json_bytes: usize,
    pub max_infra_retries: u32,
    /// How long after an execution succeeded its complete event may arrive.
    pub event_grace: Duration,
    /// How long a dispatcher holds an attempt before the reconciler may take it.
    pub dispatch_lease: Duration,
    /// Bytes of what a plugin prints kept in its task's log.
    pub plugin_log_limit: u64,
    pub idempotency_ttl: Duration,
    /// A running attempt without events for this long is marked stalled.
    pub stall_after: Duration,
    pub tick_interval: Duration,
    /// While work is active, how long after a tick the next one is asked
    /// for (`MAPI_TICK_FOLLOW_UP_S`; zero: none).
    pub tick_follow_up: Duration,
    /// How long after a run ended what its executions left is kept, unless the tenant's quota
    /// policy says otherwise.
    pub run_retention: Duration,
    /// How long audit entries are kept (`MAPI_AUDIT_RETENTION_DAYS`).
    pub audit_retention: Duration,
    /// How long webhook messages are kept (`MAPI_DELIVERY_RETENTION_DAYS`).
    pub delivery_retention: Duration,
    /// How long datasets are kept after their upload (`MAPI_DATASET_RETENTION_DAYS`; `None`:
    /// until deleted).
    pub dataset_retention: Option<Duration>,
    /// How long a model version serving no endpoint keeps its bytes
    /// (`MAPI_MODEL_VERSION_RETENTION_DAYS`; `None`: kept).
    pub model_version_retention: Option<Duration>,
    /// How long a run is kept once its executions were forgotten
    /// (`MAPI_RUN_RECORD_RETENTION_DAYS`; `None`: kept).
    pub run_record_retention: Option<Duration>,
    /// Promotion gate: each step's least time and fewest scores.
    pub endpoints_step: Duration,
    pub endpoints_step_requests: u64,
    /// Promotion gate: the canary's p99 may be this far above the stable one's.
    pub endpoints_p99_slack: Duration,
    /// Active runs one reconcile tick looks at.
    pub tick_max_runs: u32,
    pub worker_bin: Option<PathBuf>,
    pub local_timeout_margin: Duration,
    pub local_grace: Duration,
    /// `MAPI_LOCAL_GPUS`: the GPUs a GPU-class task of the local executors gets; `None`: found at start.
    pub local_gpus: Option<u32>,
    /// `MAPI_PYTHON`: the interpreter local executors run Python methods and plugins on.
    pub python: String,
    /// The regions the local executor reports.
    pub local_regions: Vec<String>,
    /// Which webhook targets are allowed.
    pub webhooks: mapi_webhooks::Policy,
    /// The most first attempts a second one webhook receiver is sent (at least 1).
    pub webhook_receiver_per_second: u32,
    /// Local endpoints' idle time before a server scaled to zero stops.
    pub endpoints_idle: Duration,
    /// The least window of an instance-billed endpoint's idle time one charge covers.
    pub endpoints_charge: Duration,
    pub local_memory_mib: BTreeMap<ResourceClass, u64>,
    /// Platform-wide limit of concurrent runs (protects the cloud project).
    pub platform_concurrent_runs: u32,
    /// Verified e-mails with operator powers (through a session only).
    pub operator_emails: Vec<UserId>,
    /// The OIDC issuer of session tokens; in the dev profile, when unset,
    /// the development identity provider of `mapi dev`.
    pub oidc_issuer: Option<String>,
    pub oidc_audience: String,
    /// Further audiences of session ID tokens (`MAPI_OIDC_CLI_AUDIENCES`).
    pub oidc_cli_audiences: Vec<String>,
    /// The CLI's client secret, if its issuer gave it one.
    pub oidc_cli_client_secret: Option<String>,
    /// Where the issuer's keys are; derived from the issuer when unset.
    pub oidc_jwks_url: Option<String>,
    /// `MAPI_OIDC_DISCOVERY_URL`: where the issuer's discovery document is,
    /// when not under the issuer.
    pub oidc_discovery_url: Option<String>,
    /// The longest a session ID token may live (`exp - iat`).
    pub session_max_lifetime: Duration,
    /// The console's secret at the issuer's token endpoint (`None`: a public client).
    pub oidc_client_secret: Option<String>,
    /// How long a console session lasts.
    pub console_session: Duration,
    /// The accounts the development identity provider signs in (dev profile only).
    pub dev_accounts: Vec<UserId>,
    /// `MAPI_EXECUTOR`: where attempts run.
    pub executor: ExecutorKind,
    /// The cloudrun-jobs executor's settings, when it is selected.
    pub cloudrun: Option<mapi_cloudrun::Settings>,
    /// The gvisor executor's `runsc` (`MAPI_GVISOR_RUNSC`), when it is selected.
    pub gvisor_runsc: Option<PathBuf>,
    /// `MAPI_HOSTING`: where endpoints' model servers run.
    pub hosting: HostingBackend,
    /// `MAPI_QUEUE=cloudtasks`: the Cloud Tasks queue's settings (`None`:
    /// the embedded SQLite queue).
    pub cloudtasks: Option<CloudTasksConfig>,
    /// `MAPI_STORE`: where the platform's state lives.
    pub store_backend: StoreBackend,
    /// `MAPI_OBJECTS`: where objects live.
    pub objects_backend: ObjectsBackend,
    /// `MAPI_EXECUTOR_EVIDENCE_MAX_AGE_S`: how old conformance and security
    /// reports may be for the shared-tier gate.
    pub evidence_max_age: Duration,
    /// The token Pub/Sub pushes must carry; `None` until both
    /// `MAPI_PUBSUB_PUSH_AUDIENCE` and `MAPI_PUBSUB_PUSH_SERVICE_ACCOUNT` are set.
    pub pubsub_push: Option<PushAuthConfig>,
    /// The subscriptions pushes may come from (`projects/P/subscriptions/S`); empty: any.
    pub pubsub_push_subscriptions: Vec<String>,
    /// Where Google's OIDC signing keys are (the keys of push tokens).
    pub google_jwks_url: String,
    /// `MAPI_SIGNER`: what signs model-version bundles.
    pub signer: SignerConfig,
    pub jobs: JobSettings,
}

/// `MAPI_STORE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StoreKind {
    Sqlite,
    Firestore,
}

impl Choice for StoreKind {
    const CHOICES: &'static [(&'static str, Self)] =
        &[("sqlite", StoreKind::Sqlite), ("firestore", StoreKind::Firestore)];
}

/// Where the platform's state lives (`MAPI_STORE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreBackend {
    /// The embedded SQLite file under `MAPI_HOME`.
    Sqlite,
    /// Firestore (`MAPI_FIRESTORE_*`).
    Firestore(mapi_firestore::Settings),
}

/// `MAPI_SQLITE_SYNC`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SqliteSync(Durability);

impl Choice for SqliteSync {
    const CHOICES: &'static [(&'static str, Self)] =
        &[("full", SqliteSync(Durability::Full)), ("normal", SqliteSync(Durability::Normal))];
}

/// `MAPI_OBJECTS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ObjectsKind {
    Local,
    Gcs,
}

impl Choice for ObjectsKind {
    const CHOICES: &'static [(&'static str, Self)] =
        &[("local", ObjectsKind::Local), ("gcs", ObjectsKind::Gcs)];
}

/// Where objects live (`MAPI_OBJECTS`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectsBackend {
    /// Files under `MAPI_HOME/objects`, served with the platform's signed URLs.
    Local,
    /// Cloud Storage (`MAPI_GCS_*`): the data bucket's settings, and the
    /// bootstrap bucket's name (same endpoint and signers).
    Gcs { data: mapi_gcs::Settings, bootstrap_bucket: String },
}

impl ObjectsBackend {
    /// The `MAPI_BOOTSTRAP_URL` template a worker reads its bootstrap from:
    /// the platform's own object route, or `gs://{bucket}/{nonce}`.
    pub fn bootstrap_url_template(&self, public_url: &str) -> String {
        match self {
            ObjectsBackend::Local => format!("{public_url}/o/{}/{{nonce}}", crate::BOOTSTRAP_BUCKET),
            ObjectsBackend::Gcs { bootstrap_bucket, .. } => format!("gs://{bootstrap_bucket}/{{nonce}}"),
        }
    }
}

/// `MAPI_SIGNER`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SignerKind {
    Local,
    Kms,
}

impl Choice for SignerKind {
    const CHOICES: &'static [(&'static str, Self)] =
        &[("local", SignerKind::Local), ("kms", SignerKind::Kms)];
}

/// What signs model-version bundles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SignerConfig {
    /// A P-256 PEM key in a file (made there on first use), trusting the
    /// public keys of earlier keys in `trusted`.
    Local { key_file: PathBuf, trusted: Vec<PathBuf> },
    /// A Cloud KMS key version.
    Kms(mapi_signer::kms::KmsSettings),
}

/// `MAPI_QUEUE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum QueueKind {
    Local,
    CloudTasks,
}

impl Choice for QueueKind {
    const CHOICES: &'static [(&'static str, Self)] =
        &[("local", QueueKind::Local), ("cloudtasks", QueueKind::CloudTasks)];
}

/// Where attempts run (`MAPI_EXECUTOR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecutorKind {
    /// A process group per execution on this machine (the embedded default).
    LocalProcess,
    /// Each task in a gVisor sandbox on this machine (`runsc`).
    Gvisor,
    /// A Cloud Run Jobs execution per attempt.
    CloudRunJobs,
}

impl ExecutorKind {
    /// Whether the multi-tenant profile may run tenant work here: `local-process` runs it as
    /// the platform's own user, able to read the platform's store, keys and every other
    /// tenant's files, so it never starts under that profile.
    fn check_multi_tenant(self) -> Result<(), ConfigError> {
        match self {
            ExecutorKind::LocalProcess => Err(ConfigError::Invalid(
                "MAPI_EXECUTOR=local-process runs tenant code as the platform's own user, with no sandbox: MAPI_PROFILE=multi-tenant refuses it; use MAPI_EXECUTOR=gvisor on one machine or MAPI_EXECUTOR=cloudrun-jobs, or MAPI_PROFILE=dev for one person's machine".into(),
            )),
            ExecutorKind::Gvisor | ExecutorKind::CloudRunJobs => Ok(()),
        }
    }

    /// Whether attempts run on this machine (an execution host per attempt).
    pub fn is_local(self) -> bool {
        matches!(self, ExecutorKind::LocalProcess | ExecutorKind::Gvisor)
    }
}

impl Choice for ExecutorKind {
    const CHOICES: &'static [(&'static str, Self)] = &[
        ("local-process", ExecutorKind::LocalProcess),
        ("gvisor", ExecutorKind::Gvisor),
        ("cloudrun-jobs", ExecutorKind::CloudRunJobs),
    ];
}

/// Where endpoints' model servers run (`MAPI_HOSTING`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostingBackend {
    /// `{worker} serve` processes under `$MAPI_HOME/endpoints/`.
    Local,
    /// Cloud Run services, through the Admin API v2.
    CloudRun(Box<mapi_cloudrun::services::ServicesSettings>),
    /// No host: endpoint routes answer that endpoints are not available.
    None,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HostingKind {
    Local,
    CloudRun,
    None,
}

impl Choice for HostingKind {
    const CHOICES: &'static [(&'static str, Self)] =
        &[("local", HostingKind::Local), ("cloud-run", HostingKind::CloudRun), ("none", HostingKind::None)];
}

/// `MAPI_GVISOR_RUNSC`: a path, or a name looked up on `PATH`.
fn runsc(named: Option<String>) -> Result<PathBuf, ConfigError> {
    let named = named.unwrap_or_else(|| "runsc".to_owned());
    mapi_executor::gvisor::find_program(&named).ok_or_else(|| {
        ConfigError::Invalid(format!(
            "MAPI_EXECUTOR=gvisor needs gVisor's runsc, and {named} was not found: install it (`apt-get install runsc`) or name it in MAPI_GVISOR_RUNSC"
        ))
    })
}

/// `MAPI_HOSTING`, read beside the executor it defaults from: a process
/// that runs attempts on Cloud Run Jobs has no machine of its own to serve
/// models on, so only an explicit `cloud-run` gives it a host.
fn hosting(env: Env<'_>, executor: ExecutorKind) -> Result<HostingBackend, ConfigError> {
    let kind = match (v::HOSTING.get(env), executor) {
        (Some(_), _) => v::HOSTING.choose(env)?,
        (None, ExecutorKind::LocalProcess | ExecutorKind::Gvisor) => HostingKind::Local,
        (None, ExecutorKind::CloudRunJobs) => HostingKind::None,
    };
    Ok(match kind {
        HostingKind::Local => HostingBackend::Local,
        HostingKind::None => HostingBackend::None,
        HostingKind::CloudRun => HostingBackend::CloudRun(Box::new(
            mapi_cloudrun::services::ServicesSettings::from_env(env).map_err(ConfigError::Invalid)?,
        )),
    })
}

/// What the OIDC token of a Pub/Sub push must say, besides being signed by
/// Google and unexpired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushAuthConfig {
    /// The token's `aud`: the audience set on the push subscription.
    pub audience: String,
    /// The token's `email` (verified): the push subscription's service account, lower-cased.
    pub service_account: String,
}

/// The settings of item jobs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSettings {
    /// The platform's cap on items per job (tiers may allow fewer).
    pub max_items: u64,
    /// Largest body of a job submit.
    pub max_body_bytes: usize,
    /// Largest single item, as JSON.
    pub max_item_bytes: usize,
    /// Items a fan-out step enqueues at most.
    pub fanout_batch: u32,
    /// The platform's cap on a tenant's items in flight.
    pub tenant_window: u32,
    /// How long a fan-out step waits when its tenant's window is full.
    pub fanout_wait: Duration,
    /// How long a fan-out step held by the platform's spend cap waits
    /// before it looks again (at most; less when the cap's period ends sooner).
    pub hold_wait: Duration,
    /// Attempts of an item before its error is written.
    pub item_max_attempts: u32,
    /// One attempt's time limit (below the item queue's dispatch deadline).
    pub item_timeout: Duration,
    /// Jobs older than this are deleted by the housekeeper.
    pub retention: Duration,
}

/// The item queue's dispatch deadline: an item's timeout must be below it.
pub const JOB_ITEM_DISPATCH_DEADLINE: Duration = Duration::from_secs(30);

/// A setting that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Invalid(String),
}

impl From<Invalid> for ConfigError {
    fn from(e: Invalid) -> ConfigError {
        ConfigError::Invalid(e.0)
    }
}

/// Which webhook targets are allowed: loopback ones only when asked for,
/// and only on a development platform (a deployed one must never reach its
/// own network).
/// A number of days `var` sets, at least 1.
fn days(var: &Var, env: Env<'_>) -> Result<Duration, ConfigError> {
    Ok(Duration::from_secs(u64::from(at_least_one(var, env)?).saturating_mul(86_400)))
}

/// Days `var` sets where 0 means kept: `None` then.
fn kept_days(var: &Var, env: Env<'_>) -> Result<Option<Duration>, ConfigError> {
    let days = var.parse::<u64>(env)?;
    Ok(Some(Duration::from_secs(days.saturating_mul(86_400))).filter(|d| !d.is_zero()))
}

/// A count `var` sets that must be at least 1.
fn at_least_one(var: &Var, env: Env<'_>) -> Result<u32, ConfigError> {
    match var.parse::<u32>(env)? {
        0 => Err(ConfigError::Invalid(format!("{} must be at least 1", var.name))),
        n => Ok(n),
    }
}

fn webhooks_policy(env: Env<'_>, profile: Profile) -> Result<mapi_webhooks::Policy, ConfigError> {
    let allow_loopback = v::WEBHOOKS_ALLOW_LOOPBACK.flag(env)?;
    if allow_loopback && profile != Profile::Dev {
        return Err(ConfigError::Invalid(
            "MAPI_WEBHOOKS_ALLOW_LOOPBACK=true is for local testing: set it only with MAPI_PROFILE=dev"
                .to_owned(),
        ));
    }
    Ok(mapi_webhooks::Policy { allow_loopback })
}

/// Where `mapi dev` serves its development identity provider.
pub const DEV_IDP_PREFIX: &str = "/dev/idp";

/// Every variable of the platform, its runtime and its adapters, in the
/// README's order.
pub fn variables() -> impl Iterator<Item = &'static Var> {
    mapi_runtime::VARIABLES
        .iter()
        .chain(VARIABLES)
        .chain(mapi_cloudtasks::settings::VARIABLES)
        .chain(mapi_cloudrun::settings::VARIABLES)
        .chain(mapi_cloudrun::services::settings::VARIABLES)
        .chain(mapi_signer::kms::VARIABLES)
        .chain(mapi_firestore::settings::VARIABLES)
        .chain(mapi_gcs::settings::VARIABLES)
}

/// An environment in which nothing is set: what an unread section parses.
fn unset(_: &str) -> Option<String> {
    None
}

fn emails(var: &Var, env: Env<'_>, default: &str) -> Result<Vec<UserId>, ConfigError> {
    let raw = var.get(env).unwrap_or_else(|| default.to_owned());
    raw.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| {
            UserId::parse(&e.to_ascii_lowercase())
                .map_err(|err| ConfigError::Invalid(format!("{}: {err}", var.name)))
        })
        .collect()
}

fn memory_map(env: Env<'_>) -> Result<BTreeMap<ResourceClass, u64>, ConfigError> {
    let s = v::LOCAL_MEMORY_MIB.get(env).unwrap_or_default();
    let bad = || {
        ConfigError::Invalid(format!(
            "{} `{s}`: write CLASS=MIB pairs, e.g. S=512,M=1024",
            v::LOCAL_MEMORY_MIB.name
        ))
    };
    let mut out = BTreeMap::new();
    for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (class, mib) = pair.split_once('=').ok_or_else(bad)?;
        let class: ResourceClass = class.trim().parse().map_err(|_| bad())?;
        let mib: u64 = mib.trim().parse().map_err(|_| bad())?;
        if mib == 0 {
            return Err(bad());
        }
        out.insert(class, mib);
    }
    Ok(out)
}

/// `MAPI_PUBSUB_PUSH_AUDIENCE` and `MAPI_PUBSUB_PUSH_SERVICE_ACCOUNT`: both or neither.
fn push_auth(env: Env<'_>) -> Result<Option<PushAuthConfig>, ConfigError> {
    match (v::PUBSUB_PUSH_AUDIENCE.get(env), v::PUBSUB_PUSH_SERVICE_ACCOUNT.get(env)) {
        (None, None) => Ok(None),
        (Some(audience), Some(account)) => {
            let service_account = account.to_lowercase();
            if !service_account.contains('@') || service_account.contains(char::is_whitespace) {
                return Err(ConfigError::Invalid(format!(
                    "{} `{account}` is not an e-mail address",
                    v::PUBSUB_PUSH_SERVICE_ACCOUNT.name
                )));
            }
            Ok(Some(PushAuthConfig { audience, service_account }))
        }
        (Some(_), None) | (None, Some(_)) => Err(ConfigError::Invalid(format!(
            "set both {} and {}, or neither",
            v::PUBSUB_PUSH_AUDIENCE.name,
            v::PUBSUB_PUSH_SERVICE_ACCOUNT.name
        ))),
    }
}

/// `MAPI_PUBSUB_PUSH_SUBSCRIPTIONS`: full subscription names, comma-separated.
fn subscriptions(env: Env<'_>) -> Result<Vec<String>, ConfigError> {
    let var = &v::PUBSUB_PUSH_SUBSCRIPTIONS;
    var.list(env)
        .into_iter()
        .map(|s| {
            let well_formed = matches!(
                s.split('/').collect::<Vec<_>>().as_slice(),
                ["projects", p, "subscriptions", n] if !p.is_empty() && !n.is_empty()
            );
            if well_formed {
                Ok(s)
            } else {
                Err(ConfigError::Invalid(format!(
                    "{}: `{s}` is not `projects/<project>/subscriptions/<name>`",
                    var.name
                )))
            }
        })
        .collect()
}

/// The promotion gate's least time and scores per step, as set, else the
/// profile's: a shared deployment waits a minute and 50 scores of the new
/// revision at each step; one person trying `mapi dev` sees a promotion
/// through in seconds, scored or not (the error and latency rollbacks still
/// judge every score that comes).
fn gate_step(env: Env<'_>, profile: Profile) -> Result<(Duration, u64), ConfigError> {
    let (seconds, requests) = match profile {
        Profile::Dev => (3, 0),
        Profile::MultiTenant => (60, 50),
    };
    let seconds = v::ENDPOINTS_STEP_S.parse_opt::<u64>(env)?.unwrap_or(seconds);
    let requests = v::ENDPOINTS_STEP_REQUESTS.parse_opt::<u64>(env)?.unwrap_or(requests);
    Ok((Duration::from_secs(seconds), requests))
}

/// The secrets, from the environment or in the dev profile from
/// `$MAPI_HOME`. The internal token and the token pepper every service
/// reads (internal callers are checked, and refusals audited, under the
/// pepper); the URL signing key only a process that serves local objects
/// (`local_objects`): with Cloud Storage, signed URLs are Google's, and the
/// key is neither asked for nor read.
fn secrets(
    env: Env<'_>,
    profile: Profile,
    home: &std::path::Path,
    local_objects: bool,
) -> Result<Secrets, ConfigError> {
    let hex = |var: &Var| -> Result<Option<Vec<u8>>, ConfigError> {
        var.get(env)
            .map(|value| {
                hex::decode(value).map_err(|_| ConfigError::Invalid(format!("{} must be hex", var.name)))
            })
            .transpose()
    };
    let (internal_token, pepper) = (v::INTERNAL_TOKEN.get(env), hex(&v::TOKEN_PEPPER)?);
    let url_key = match local_objects {
        true => hex(&v::URL_SIGNING_KEY)?,
        false => None,
    };
    let secrets = match (profile, internal_token, pepper, url_key) {
        (_, Some(internal_token), Some(token_pepper), url_signing_key)
            if url_signing_key.is_some() || !local_objects =>
        {
            Secrets { internal_token, token_pepper, url_signing_key }
        }
        (Profile::Dev, ..) => secrets::dev_secrets(home)?,
        (Profile::MultiTenant, ..) => {
            let mut needed = vec![v::INTERNAL_TOKEN.name, v::TOKEN_PEPPER.name];
            if local_objects {
                needed.push(v::URL_SIGNING_KEY.name);
            }
            return Err(ConfigError::Invalid(format!(
                "the multi-tenant profile needs {}",
                needed.join(", ")
            )));
        }
    };
    let short = |b: &[u8]| b.len() < 16;
    if secrets.internal_token.len() < 16
        || short(&secrets.token_pepper)
        || secrets.url_signing_key.as_deref().is_some_and(short)
    {
        return Err(ConfigError::Invalid("secrets must be at least 16 characters or bytes long".into()));
    }
    Ok(secrets)
}

fn store_backend(env: Env<'_>) -> Result<StoreBackend, ConfigError> {
    Ok(match v::STORE.choose(env)? {
        StoreKind::Sqlite => StoreBackend::Sqlite,
        StoreKind::Firestore => {
            StoreBackend::Firestore(mapi_firestore::Settings::from_env(env).map_err(ConfigError::Invalid)?)
        }
    })
}

fn objects_backend(env: Env<'_>) -> Result<ObjectsBackend, ConfigError> {
    Ok(match v::OBJECTS.choose(env)? {
        ObjectsKind::Local => ObjectsBackend::Local,
        ObjectsKind::Gcs => {
            let data = mapi_gcs::Settings::from_env(env).map_err(ConfigError::Invalid)?;
            let bootstrap_bucket =
                v::GCS_BOOTSTRAP_BUCKET.get(env).unwrap_or_else(|| format!("{}-bootstrap", data.bucket));
            let mut bootstrap = data.clone();
            bootstrap.bucket = bootstrap_bucket.clone();
            bootstrap.validate().map_err(|e| {
                ConfigError::Invalid(format!(
                    "{}: {}",
                    v::GCS_BOOTSTRAP_BUCKET.name,
                    e.replace(mapi_gcs::settings::BUCKET.name, "the bucket")
                ))
            })?;
            ObjectsBackend::Gcs { data, bootstrap_bucket }
        }
    })
}

fn queue(env: Env<'_>) -> Result<Option<CloudTasksConfig>, ConfigError> {
    Ok(match v::QUEUE.choose(env)? {
        QueueKind::Local => None,
        QueueKind::CloudTasks => Some(CloudTasksConfig::from_env(env).map_err(ConfigError::Invalid)?),
    })
}

fn signer(env: Env<'_>, home: &std::path::Path) -> Result<SignerConfig, ConfigError> {
    Ok(match v::SIGNER.choose(env)? {
        SignerKind::Local => SignerConfig::Local {
            key_file: v::SIGNING_KEY_FILE
                .get(env)
                .map_or_else(|| home.join("bundle-signing-key.pem"), PathBuf::from),
            trusted: v::SIGNING_TRUSTED_KEY_FILES.list(env).into_iter().map(PathBuf::from).collect(),
        },
        SignerKind::Kms => {
            SignerConfig::Kms(mapi_signer::kms::KmsSettings::from_env(env).map_err(ConfigError::Invalid)?)
        }
    })
}

fn jobs(env: Env<'_>) -> Result<JobSettings, ConfigError> {
    let jobs = JobSettings {
        max_items: v::JOB_MAX_ITEMS.parse(env)?,
        max_body_bytes: v::JOB_MAX_BODY_BYTES.parse(env)?,
        max_item_bytes: v::JOB_MAX_ITEM_BYTES.parse(env)?,
        fanout_batch: v::JOB_FANOUT_BATCH.parse::<u32>(env)?.clamp(1, 1000),
        tenant_window: v::JOB_TENANT_WINDOW.parse::<u32>(env)?.max(1),
        fanout_wait: v::JOB_FANOUT_WAIT_MS.millis(env)?,
        hold_wait: v::JOB_HOLD_WAIT_S.seconds(env)?.max(Duration::from_secs(1)),
        item_max_attempts: v::JOB_ITEM_MAX_ATTEMPTS.parse::<u32>(env)?.max(1),
        item_timeout: v::JOB_ITEM_TIMEOUT_S.seconds(env)?,
        retention: Duration::from_secs(v::JOB_RETENTION_DAYS.parse::<u64>(env)?.saturating_mul(86_400)),
    };
    if jobs.item_timeout.is_zero() || jobs.item_timeout >= JOB_ITEM_DISPATCH_DEADLINE {
        return Err(ConfigError::Invalid(format!(
            "{} must be between 1 and {} (the item queue's dispatch deadline)",
            v::JOB_ITEM_TIMEOUT_S.name,
            JOB_ITEM_DISPATCH_DEADLINE.as_secs() - 1
        )));
    }
    Ok(jobs)
}

impl Config {
    /// The session issuer in force: the configured one, or in the dev
    /// profile the development identity provider at `public_url`.
    pub fn session_issuer(&self) -> Option<String> {
        match (&self.oidc_issuer, self.profile) {
            (Some(i), _) => Some(i.clone()),
            (None, Profile::Dev) => Some(format!("{}{}", self.public_url, DEV_IDP_PREFIX)),
            (None, Profile::MultiTenant) => None,
        }
    }

    /// The OAuth client `mapi login` signs a person in with: the first of
    /// `MAPI_OIDC_CLI_AUDIENCES`, else the console's; `None` without an issuer.
    pub fn cli_client(&self) -> Option<(String, String, Option<String>)> {
        let issuer = self.session_issuer()?;
        let id = self.oidc_cli_audiences.first().unwrap_or(&self.oidc_audience).clone();
        Some((issuer, id, self.oidc_cli_client_secret.clone()))
    }

    /// Where the session issuer's keys are: `MAPI_OIDC_JWKS_URL`, else
    /// Google's published keys for Google's issuer (they are not under the
    /// issuer's own address), else `$issuer/jwks.json`.
    pub fn session_jwks_url(&self) -> Option<String> {
        let issuer_keys = |i: String| match mapi_oidc::GOOGLE_ISSUERS.contains(&i.as_str()) {
            true => mapi_oidc::GOOGLE_JWKS_URL.to_owned(),
            false => format!("{i}/jwks.json"),
        };
        self.oidc_jwks_url.clone().or_else(|| self.session_issuer().map(issuer_keys))
    }

    /// Where the session issuer's discovery document is:
    /// `MAPI_OIDC_DISCOVERY_URL`, else under the issuer (OpenID Connect
    /// Discovery §4).
    pub fn session_discovery_url(&self) -> Option<String> {
        let under =
            |i: String| format!("{}{}", i.trim_end_matches('/'), mapi_oidc::code_flow::DISCOVERY_PATH);
        self.oidc_discovery_url.clone().or_else(|| self.session_issuer().map(under))
    }

    /// Reads every section from the process environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_env_for(Uses::ALL)
    }

    /// Reads the sections `uses` names from the process environment.
    pub fn from_env_for(uses: Uses) -> Result<Config, ConfigError> {
        Config::read(&|k| std::env::var(k).ok(), uses)
    }

    /// Reads every section through `get` (tests pass a map).
    pub fn from_lookup(get: Env<'_>) -> Result<Config, ConfigError> {
        Config::read(get, Uses::ALL)
    }

    /// Reads the base and the sections `uses` names through `env`; every
    /// other section is parsed from an empty environment (its defaults).
    pub fn read(env: Env<'_>, uses: Uses) -> Result<Config, ConfigError> {
        let section = |s: Section| -> Env<'_> { if uses.has(s) { env } else { &unset } };
        let profile: Profile = v::PROFILE.choose(env)?;
        let home = PathBuf::from(v::HOME.raw(env).unwrap_or_default());
        let port: u16 = mapi_runtime::config::PORT.parse(env)?;
        let public_url_set = v::PUBLIC_URL.get(env).is_some();
        let public_url = v::PUBLIC_URL
            .get(env)
            .unwrap_or_else(|| format!("http://127.0.0.1:{port}"))
            .trim_end_matches('/')
            .to_owned();
        let (api, life, sessions) =
            (section(Section::Api), section(Section::Lifecycle), section(Section::Sessions));
        let (push, exec) = (section(Section::Push), section(Section::Executor));
        let (hosted, hooks) = (section(Section::Hosting), section(Section::Webhooks));
        let objects = if uses.reads_objects() { env } else { &unset };
        let executor: ExecutorKind = v::EXECUTOR.choose(exec)?;
        if profile == Profile::MultiTenant && uses.has(Section::Executor) {
            executor.check_multi_tenant()?;
        }
        let cloudrun = match executor {
            ExecutorKind::CloudRunJobs => {
                Some(mapi_cloudrun::Settings::from_env(exec).map_err(ConfigError::Invalid)?)
            }
            ExecutorKind::LocalProcess | ExecutorKind::Gvisor => None,
        };
        let runsc_named = v::GVISOR_RUNSC.get(exec);
        let gvisor_runsc = match executor {
            ExecutorKind::Gvisor => Some(runsc(runsc_named)?),
            ExecutorKind::LocalProcess | ExecutorKind::CloudRunJobs => None,
        };
        let objects_backend = objects_backend(objects)?;
        let local_objects = uses.has(Section::Objects) && matches!(objects_backend, ObjectsBackend::Local);
        let gate = gate_step(life, profile)?;
        Ok(Config {
            uses,
            secrets: secrets(env, profile, &home, local_objects)?,
            guard: mapi_runtime::GuardConfig::from_env(env)?,
            sqlite_durability: v::SQLITE_SYNC.choose::<SqliteSync>(env)?.0,
            tenant_deletion_grace: v::TENANT_DELETION_GRACE_S.seconds(env)?,
            store_backend: store_backend(env)?,
            google_jwks_url: v::GOOGLE_JWKS_URL.raw(env).unwrap_or_default(),
            max_dataset_bytes: v::MAX_DATASET_BYTES.parse(api)?,
            dataset_limits: dataset_limits(api)?,
            max_json_bytes: v::MAX_JSON_BYTES.parse(api)?,
            idempotency_ttl: v::IDEMPOTENCY_TTL_S.seconds(api)?,
            platform_concurrent_runs: v::PLATFORM_CONCURRENT_RUNS.parse(api)?,
            max_infra_retries: v::MAX_INFRA_RETRIES.parse(life)?,
            event_grace: v::EVENT_GRACE_S.seconds(life)?,
            dispatch_lease: v::DISPATCH_LEASE_S.seconds(life)?,
            plugin_log_limit: v::PLUGIN_LOG_LIMIT_BYTES.parse(life)?,
            stall_after: v::STALL_AFTER_S.seconds(life)?,
            endpoints_step: gate.0,
            endpoints_step_requests: gate.1,
            endpoints_p99_slack: v::ENDPOINTS_P99_SLACK_MS.millis(life)?,
            tick_interval: v::TICK_INTERVAL_S.seconds(life)?,
            tick_follow_up: v::TICK_FOLLOW_UP_S.seconds(life)?,
            audit_retention: days(&v::AUDIT_RETENTION_DAYS, life)?,
            delivery_retention: days(&v::DELIVERY_RETENTION_DAYS, life)?,
            dataset_retention: kept_days(&v::DATASET_RETENTION_DAYS, life)?,
            model_version_retention: kept_days(&v::MODEL_VERSION_RETENTION_DAYS, life)?,
            run_record_retention: kept_days(&v::RUN_RECORD_RETENTION_DAYS, life)?,
            run_retention: Duration::from_secs(
                v::RUN_RETENTION_DAYS.parse::<u64>(life)?.saturating_mul(86_400),
            ),
            tick_max_runs: v::TICK_MAX_RUNS.parse(life)?,
            operator_emails: emails(
                &v::OPERATOR_EMAILS,
                sessions,
                if profile == Profile::Dev { "admin@dev.local" } else { "" },
            )?,
            oidc_issuer: v::OIDC_ISSUER.get(sessions).map(|s| s.trim_end_matches('/').to_owned()),
            oidc_audience: v::OIDC_AUDIENCE.raw(sessions).unwrap_or_default(),
            oidc_cli_audiences: v::OIDC_CLI_AUDIENCES.list(sessions),
            oidc_cli_client_secret: v::OIDC_CLI_CLIENT_SECRET.get(sessions),
            oidc_jwks_url: v::OIDC_JWKS_URL.get(sessions),
            oidc_discovery_url: v::OIDC_DISCOVERY_URL.get(sessions),
            session_max_lifetime: v::SESSION_MAX_LIFETIME_S.seconds(sessions)?,
            oidc_client_secret: v::OIDC_CLIENT_SECRET.get(sessions),
            console_session: v::CONSOLE_SESSION_S.seconds(sessions)?,
            dev_accounts: emails(&v::DEV_ACCOUNTS, sessions, v::DEV_ACCOUNTS.default_text())?,
            pubsub_push: push_auth(push)?,
            pubsub_push_subscriptions: subscriptions(push)?,
            executor,
            cloudrun,
            gvisor_runsc,
            hosting: hosting(hosted, executor)?,
            worker_bin: v::WORKER_BIN.get(exec).map(PathBuf::from),
            local_timeout_margin: v::LOCAL_TIMEOUT_MARGIN_S.seconds(exec)?,
            local_grace: v::LOCAL_GRACE_S.seconds(exec)?,
            local_gpus: v::LOCAL_GPUS.parse_opt(exec)?,
            python: v::PYTHON.raw(exec).unwrap_or_default(),
            local_regions: v::LOCAL_REGIONS.list(exec),
            webhooks: webhooks_policy(hooks, profile)?,
            webhook_receiver_per_second: at_least_one(&v::WEBHOOK_RECEIVER_PER_SECOND, hooks)?,
            endpoints_idle: v::ENDPOINTS_IDLE_S.seconds(hosted)?,
            endpoints_charge: v::ENDPOINTS_CHARGE_S.seconds(hosted)?.max(Duration::from_secs(1)),
            local_memory_mib: memory_map(exec)?,
            evidence_max_age: v::EXECUTOR_EVIDENCE_MAX_AGE_S.seconds(exec)?,
            objects_backend,
            cloudtasks: queue(section(Section::Queue))?,
            signer: signer(section(Section::Signer), &home)?,
            jobs: jobs(section(Section::Jobs))?,
            profile,
            home,
            port,
            public_url,
            public_url_set,
        })
    }
}
