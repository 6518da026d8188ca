//! `Config`: every setting of the platform, read once at start from the
//! environment, each with a safe default where one exists. The README's
//! table of variables is checked against [`VARIABLES`] by a test.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mapi_domain::{ResourceClass, UserId};
use mapi_store::sqlite::Durability;
use serde::{Deserialize, Serialize};

/// Which deployment this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// One machine, one developer: secrets are generated and kept in `$MAPI_HOME`.
    Dev,
    /// Many tenants: every secret must come from the environment.
    MultiTenant,
}

/// The platform's secrets.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Secrets {
    /// Presented by the queue, the scheduler and the local event pusher.
    pub internal_token: String,
    /// Keys the stored hashes of API tokens.
    #[serde(with = "hex_bytes")]
    pub token_pepper: Vec<u8>,
    /// Keys the local object store's signed URLs.
    #[serde(with = "hex_bytes")]
    pub url_signing_key: Vec<u8>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secrets(..)")
    }
}

mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        hex::decode(String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// Every setting.
#[derive(Clone, Debug)]
pub struct Config {
    pub profile: Profile,
    pub home: PathBuf,
    pub port: u16,
    /// Where executions and the CLI reach the platform.
    pub public_url: String,
    /// `MAPI_PUBLIC_URL` was set (otherwise `mapi dev` uses the address it bound).
    pub public_url_set: bool,
    pub secrets: Secrets,
    pub sqlite_durability: Durability,
    pub max_dataset_bytes: usize,
    pub max_json_bytes: usize,
    pub max_infra_retries: u32,
    /// How long after an execution succeeded its complete event may arrive.
    pub event_grace: Duration,
    /// How long a dispatcher holds an attempt before the reconciler may take it.
    pub dispatch_lease: Duration,
    pub idempotency_ttl: Duration,
    /// A running attempt without events for this long is marked stalled.
    pub stall_after: Duration,
    pub tick_interval: Duration,
    pub worker_bin: Option<PathBuf>,
    pub local_timeout_margin: Duration,
    pub local_grace: Duration,
    pub local_memory_mib: BTreeMap<ResourceClass, u64>,
    /// Platform-wide limit of concurrent runs (protects the cloud project).
    pub platform_concurrent_runs: u32,
    /// Verified e-mails with operator powers (through a session only).
    pub operator_emails: Vec<UserId>,
    /// The OIDC issuer of session tokens; in the dev profile, when unset,
    /// the development identity provider of `mapi dev`.
    pub oidc_issuer: Option<String>,
    pub oidc_audience: String,
    /// Where the issuer's keys are; derived from the issuer when unset.
    pub oidc_jwks_url: Option<String>,
    /// The accounts the development identity provider signs in (dev profile only).
    pub dev_accounts: Vec<UserId>,
    /// `MAPI_EXECUTOR`: where attempts run.
    pub executor: ExecutorKind,
    /// The cloudrun-jobs executor's settings, when it is selected.
    pub cloudrun: Option<mapi_cloudrun::Settings>,
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
    pub routes: RouteSet,
    pub jobs: JobSettings,
}

/// Where the platform's state lives (`MAPI_STORE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreBackend {
    /// The embedded SQLite file under `MAPI_HOME`.
    Sqlite,
    /// Firestore (`MAPI_FIRESTORE_*`).
    Firestore(mapi_firestore::Settings),
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

/// What signs model-version bundles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SignerConfig {
    /// A P-256 PEM key in a file (made there on first use), trusting the
    /// public keys of earlier keys in `trusted`.
    Local { key_file: PathBuf, trusted: Vec<PathBuf> },
    /// A Cloud KMS key version.
    Kms(mapi_signer::kms::KmsSettings),
}

/// Where the tasks go with `MAPI_QUEUE=cloudtasks` (`MAPI_CLOUDTASKS_*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloudTasksConfig {
    pub project: String,
    pub location: String,
    /// The base URL tasks are delivered to when one host serves every task
    /// route; `MAPI_PUBLIC_URL` when `None`.
    pub target: Option<String>,
    /// The `submit-tasks` service's URL; `target` when `None`.
    pub submit_tasks_url: Option<String>,
    /// The `meter` service's URL; `target` when `None`.
    pub meter_url: Option<String>,
    /// The service account whose OIDC token each delivery carries.
    pub service_account: String,
    /// The token's audience; the target URL when `None`.
    pub audience: Option<String>,
    /// Another endpoint than Google's (a fake, over plain HTTP).
    pub endpoint: Option<String>,
}

impl CloudTasksConfig {
    /// The base URL tasks are delivered to when one host serves them all.
    pub fn target_url(&self, public_url: &str) -> String {
        self.target.clone().unwrap_or_else(|| public_url.to_owned()).trim_end_matches('/').to_owned()
    }

    /// The URL of `service`, where the queues it serves deliver.
    pub fn service_url(&self, service: crate::Service, public_url: &str) -> String {
        let own = match service {
            crate::Service::SubmitTasks => self.submit_tasks_url.as_ref(),
            crate::Service::Meter => self.meter_url.as_ref(),
            _ => None,
        };
        own.map_or_else(|| self.target_url(public_url), |u| u.trim_end_matches('/').to_owned())
    }

    /// The audience of the ID tokens deliveries carry, which the task
    /// routes check: the configured one, else the target URL (one
    /// audience for every queue, so a service split off keeps accepting
    /// them as a custom audience).
    pub fn token_audience(&self, public_url: &str) -> String {
        self.audience.clone().unwrap_or_else(|| self.target_url(public_url))
    }
}

/// Where attempts run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecutorKind {
    /// A process group per execution on this machine (the embedded default).
    LocalProcess,
    /// A Cloud Run Jobs execution per attempt.
    CloudRunJobs,
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

/// Which routes a process serves (`MAPI_ROUTES`), so the queue's task
/// routes can run as a second deployment of the same function, scaled on
/// their own, and an expensive item pipeline cannot starve the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteSet {
    /// The API and the task routes.
    All,
    /// The API only: tenant-facing routes, docs, health.
    Api,
    /// The task routes only (`/internal/tasks/...`), and health.
    Tasks,
}

impl RouteSet {
    pub fn serves_api(self) -> bool {
        matches!(self, RouteSet::All | RouteSet::Api)
    }

    pub fn serves_tasks(self) -> bool {
        matches!(self, RouteSet::All | RouteSet::Tasks)
    }
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

/// Where `mapi dev` serves its development identity provider.
pub const DEV_IDP_PREFIX: &str = "/dev/idp";

/// The development identity provider's default accounts.
pub const DEV_ACCOUNTS: &str = "admin@dev.local,analyst@dev.local,viewer@dev.local,dev@dev.local";

/// Every variable of the platform and its adapters, in the README's order.
pub fn variables() -> impl Iterator<Item = &'static (&'static str, &'static str, &'static str)> {
    VARIABLES
        .iter()
        .chain(mapi_cloudrun::settings::VARIABLES)
        .chain(mapi_signer::kms::VARIABLES)
        .chain(mapi_firestore::settings::VARIABLES)
        .chain(mapi_gcs::settings::VARIABLES)
}

/// Every variable, its default and meaning: the source of the README's table.
pub const VARIABLES: &[(&str, &str, &str)] = &[
    (
        "MAPI_PROFILE",
        "dev",
        "`dev` (one machine; secrets generated in $MAPI_HOME) or `multi-tenant` (secrets required)",
    ),
    ("MAPI_HOME", "./.mapi", "Where the embedded store, queue, objects and executions live"),
    ("PORT", "8080", "The port to listen on (Cloud Run sets it)"),
    ("MAPI_PUBLIC_URL", "http://127.0.0.1:$PORT", "Where executions and the CLI reach the platform"),
    (
        "MAPI_INTERNAL_TOKEN",
        "generated (dev)",
        "Bearer token of internal callers: queue, scheduler, and in `dev` the local event push",
    ),
    ("MAPI_TOKEN_PEPPER", "generated (dev)", "Hex key of the HMAC under which API tokens are stored"),
    ("MAPI_URL_SIGNING_KEY", "generated (dev)", "Hex key of the local object store's signed URLs"),
    (
        "MAPI_SQLITE_SYNC",
        "full",
        "SQLite `synchronous`: `full` survives power loss, `normal` only process crashes",
    ),
    ("MAPI_MAX_DATASET_BYTES", "67108864", "Largest dataset upload"),
    ("MAPI_MAX_JSON_BYTES", "1048576", "Largest JSON request body"),
    ("MAPI_MAX_INFRA_RETRIES", "2", "Attempts retried after a lost execution or an infrastructure crash"),
    ("MAPI_EVENT_GRACE_S", "120", "How long after an execution succeeded its complete event may arrive"),
    ("MAPI_DISPATCH_LEASE_S", "60", "How long a dispatcher holds an attempt before the reconciler adopts it"),
    ("MAPI_IDEMPOTENCY_TTL_S", "86400", "How long an Idempotency-Key returns the same run"),
    ("MAPI_STALL_AFTER_S", "300", "A running attempt without events for this long is marked stalled"),
    ("MAPI_TICK_INTERVAL_S", "2", "How often `mapi dev` runs the reconcile tick"),
    ("MAPI_WORKER_BIN", "beside the running binary", "The mapi-worker executable the local executor starts"),
    ("MAPI_LOCAL_TIMEOUT_MARGIN_S", "5", "Local executor: the backstop after a run's timeout"),
    ("MAPI_LOCAL_GRACE_S", "5", "Local executor: SIGTERM to SIGKILL"),
    (
        "MAPI_LOCAL_MEMORY_MIB",
        "the class's memory",
        "Local executor: memory limits per class, e.g. `S=512,M=1024`",
    ),
    (
        "MAPI_OPERATOR_EMAILS",
        "admin@dev.local (dev); none",
        "Comma-separated verified e-mails with operator powers, through a session only",
    ),
    (
        "MAPI_OIDC_ISSUER",
        "the dev identity provider (dev); none",
        "Issuer of session ID tokens; without one, only API tokens authenticate",
    ),
    ("MAPI_OIDC_AUDIENCE", "mapi", "The audience session ID tokens must carry"),
    ("MAPI_OIDC_JWKS_URL", "$MAPI_OIDC_ISSUER/jwks.json", "Where the issuer's signing keys are"),
    (
        "MAPI_DEV_ACCOUNTS",
        "admin@dev.local,analyst@dev.local,viewer@dev.local,dev@dev.local",
        "Accounts of the development identity provider (dev profile only)",
    ),
    (
        "MAPI_PLATFORM_CONCURRENT_RUNS",
        "700",
        "Platform-wide limit of concurrent runs (protects the cloud project's quotas)",
    ),
    ("MAPI_EXECUTOR", "local-process", "Where attempts run: `local-process` or `cloudrun-jobs`"),
    ("MAPI_QUEUE", "local", "The task queue: `local` (SQLite, embedded) or `cloudtasks`"),
    ("MAPI_STORE", "sqlite", "Where state lives: `sqlite` (embedded, in MAPI_HOME) or `firestore`"),
    ("MAPI_OBJECTS", "local", "Where objects live: `local` (files in MAPI_HOME) or `gcs`"),
    (
        "MAPI_GCS_BOOTSTRAP_BUCKET",
        "MAPI_GCS_BUCKET with `-bootstrap`",
        "gcs: the bucket of attempt bootstraps (one object per task, taken once)",
    ),
    ("MAPI_CLOUDTASKS_PROJECT", "none (necessary for cloudtasks)", "cloudtasks: the project of the queues"),
    ("MAPI_CLOUDTASKS_LOCATION", "europe-west1", "cloudtasks: the location of the queues"),
    (
        "MAPI_CLOUDTASKS_TARGET_URL",
        "MAPI_PUBLIC_URL",
        "cloudtasks: the base URL tasks are delivered to, when one host serves every task route",
    ),
    (
        "MAPI_SUBMIT_TASKS_URL",
        "MAPI_CLOUDTASKS_TARGET_URL",
        "cloudtasks: the URL of the `submit-tasks` service, where the dispatch, job-fanout and job-items queues deliver",
    ),
    (
        "MAPI_METER_URL",
        "MAPI_CLOUDTASKS_TARGET_URL",
        "cloudtasks: the URL of the `meter` service, where the finalize queue delivers",
    ),
    (
        "MAPI_CLOUDTASKS_SERVICE_ACCOUNT",
        "none (necessary for cloudtasks)",
        "cloudtasks: the service account whose OIDC token each delivery carries",
    ),
    (
        "MAPI_CLOUDTASKS_AUDIENCE",
        "MAPI_CLOUDTASKS_TARGET_URL",
        "cloudtasks: the audience of that token, one for every queue (with one service per queue, a custom audience of each)",
    ),
    (
        "MAPI_CLOUDTASKS_ENDPOINT",
        "https://cloudtasks.googleapis.com",
        "cloudtasks: the API endpoint (a plain `http://` one is a local fake, called without credentials)",
    ),
    (
        "MAPI_EXECUTOR_EVIDENCE_MAX_AGE_S",
        "259200",
        "Age limit of the conformance and security reports that open shared tiers on an executor",
    ),
    (
        "MAPI_PUBSUB_PUSH_AUDIENCE",
        "none",
        "The audience of Pub/Sub push tokens (set with MAPI_PUBSUB_PUSH_SERVICE_ACCOUNT); without the two, only `dev` accepts pushes, with MAPI_INTERNAL_TOKEN",
    ),
    (
        "MAPI_PUBSUB_PUSH_SERVICE_ACCOUNT",
        "none",
        "The verified e-mail of Pub/Sub push tokens: the push subscription's service account (set with MAPI_PUBSUB_PUSH_AUDIENCE)",
    ),
    (
        "MAPI_PUBSUB_PUSH_SUBSCRIPTIONS",
        "any",
        "Accepted push subscriptions (comma-separated `projects/P/subscriptions/S`)",
    ),
    (
        "MAPI_GOOGLE_JWKS_URL",
        "Google's (https://www.googleapis.com/oauth2/v3/certs)",
        "The source of the OIDC signing keys of push tokens",
    ),
    (
        "MAPI_SIGNER",
        "local",
        "What signs model-version bundles: `local` (a PEM key file) or `kms` (Cloud KMS)",
    ),
    (
        "MAPI_SIGNING_KEY_FILE",
        "$MAPI_HOME/bundle-signing-key.pem",
        "local signer: the PKCS#8 P-256 PEM key, made on first use",
    ),
    (
        "MAPI_SIGNING_TRUSTED_KEY_FILES",
        "none",
        "local signer: `PUBLIC KEY` PEM files of earlier keys whose signatures still verify (comma-separated)",
    ),
    (
        "MAPI_ROUTES",
        "all",
        "Routes this process serves: `all`, `api` (tenant-facing) or `tasks` (queue callbacks), so task routes can be a second deployment",
    ),
    ("MAPI_JOB_MAX_ITEMS", "100000", "Platform cap on items per job (tiers may allow fewer)"),
    ("MAPI_JOB_MAX_BODY_BYTES", "67108864", "Largest body of a job submit"),
    ("MAPI_JOB_MAX_ITEM_BYTES", "65536", "Largest single item of a job, as JSON"),
    ("MAPI_JOB_FANOUT_BATCH", "100", "Items one fan-out step enqueues at most"),
    (
        "MAPI_JOB_TENANT_WINDOW",
        "200",
        "Platform cap on a tenant's items in flight (enqueued, not finished); keeps tenants fair",
    ),
    ("MAPI_JOB_FANOUT_WAIT_MS", "200", "How long a fan-out step waits when its tenant's window is full"),
    ("MAPI_JOB_ITEM_MAX_ATTEMPTS", "3", "Attempts of an item before its error is written"),
    (
        "MAPI_JOB_ITEM_TIMEOUT_S",
        "20",
        "Time limit of one item attempt (below the item queue's 30 s dispatch deadline)",
    ),
    (
        "MAPI_JOB_RETENTION_DAYS",
        "30",
        "Job objects and documents older than this are deleted by the housekeeper, unless the tenant's quota policy sets `job_retention_days`",
    ),
    ("MAPI_LOG", "info", "Log filter (tracing-subscriber syntax)"),
    ("MAPI_DRAIN_TIMEOUT_S", "10", "How long in-flight requests may finish after SIGTERM"),
];

type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

fn parse<T: std::str::FromStr>(get: Lookup<'_>, name: &str, default: T) -> Result<T, ConfigError> {
    match get(name) {
        None => Ok(default),
        Some(v) if v.trim().is_empty() => Ok(default),
        Some(v) => {
            v.trim().parse().map_err(|_| ConfigError::Invalid(format!("{name} has an invalid value `{v}`")))
        }
    }
}

fn seconds(get: Lookup<'_>, name: &str, default: u64) -> Result<Duration, ConfigError> {
    parse(get, name, default).map(Duration::from_secs)
}

fn memory_map(s: &str) -> Result<BTreeMap<ResourceClass, u64>, ConfigError> {
    let bad = || {
        ConfigError::Invalid(format!("MAPI_LOCAL_MEMORY_MIB `{s}`: write CLASS=MIB pairs, e.g. S=512,M=1024"))
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

fn emails(get: Lookup<'_>, name: &str, default: &str) -> Result<Vec<UserId>, ConfigError> {
    let raw = get(name).unwrap_or_else(|| default.to_owned());
    raw.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| {
            UserId::parse(&e.to_ascii_lowercase())
                .map_err(|err| ConfigError::Invalid(format!("{name}: {err}")))
        })
        .collect()
}

/// `MAPI_PUBSUB_PUSH_AUDIENCE` and `MAPI_PUBSUB_PUSH_SERVICE_ACCOUNT`: both or neither.
fn push_auth(get: Lookup<'_>) -> Result<Option<PushAuthConfig>, ConfigError> {
    let value = |name| get(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    match (value("MAPI_PUBSUB_PUSH_AUDIENCE"), value("MAPI_PUBSUB_PUSH_SERVICE_ACCOUNT")) {
        (None, None) => Ok(None),
        (Some(audience), Some(account)) => {
            let service_account = account.to_lowercase();
            if !service_account.contains('@') || service_account.contains(char::is_whitespace) {
                return Err(ConfigError::Invalid(format!(
                    "MAPI_PUBSUB_PUSH_SERVICE_ACCOUNT `{account}` is not an e-mail address"
                )));
            }
            Ok(Some(PushAuthConfig { audience, service_account }))
        }
        (Some(_), None) | (None, Some(_)) => Err(ConfigError::Invalid(
            "set both MAPI_PUBSUB_PUSH_AUDIENCE and MAPI_PUBSUB_PUSH_SERVICE_ACCOUNT, or neither".into(),
        )),
    }
}

/// `MAPI_PUBSUB_PUSH_SUBSCRIPTIONS`: full subscription names, comma-separated.
fn subscriptions(get: Lookup<'_>) -> Result<Vec<String>, ConfigError> {
    let raw = get("MAPI_PUBSUB_PUSH_SUBSCRIPTIONS").unwrap_or_default();
    raw.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            let well_formed = matches!(
                s.split('/').collect::<Vec<_>>().as_slice(),
                ["projects", p, "subscriptions", n] if !p.is_empty() && !n.is_empty()
            );
            if well_formed {
                Ok(s.to_owned())
            } else {
                Err(ConfigError::Invalid(format!(
                    "MAPI_PUBSUB_PUSH_SUBSCRIPTIONS: `{s}` is not `projects/<project>/subscriptions/<name>`"
                )))
            }
        })
        .collect()
}

fn random_secret() -> Result<Vec<u8>, ConfigError> {
    let mut b = vec![0u8; 32];
    getrandom::fill(&mut b).map_err(|e| ConfigError::Invalid(format!("no randomness: {e}")))?;
    Ok(b)
}

/// The dev profile's secrets: from `$MAPI_HOME/secrets.json`, made on first use.
fn dev_secrets(home: &Path) -> Result<Secrets, ConfigError> {
    let path = home.join("secrets.json");
    let err = |e: std::io::Error| ConfigError::Invalid(format!("{}: {e}", path.display()));
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            ConfigError::Invalid(format!("{} is damaged ({e}): delete it to regenerate", path.display()))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(home).map_err(err)?;
            let secrets = Secrets {
                internal_token: hex::encode(random_secret()?),
                token_pepper: random_secret()?,
                url_signing_key: random_secret()?,
            };
            let json =
                serde_json::to_vec_pretty(&secrets).map_err(|e| ConfigError::Invalid(e.to_string()))?;
            let tmp = home.join(".secrets.json.tmp");
            {
                use std::io::Write;
                use std::os::unix::fs::OpenOptionsExt;
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&tmp)
                    .map_err(err)?;
                f.write_all(&json).map_err(err)?;
                f.sync_all().map_err(err)?;
            }
            std::fs::rename(&tmp, &path).map_err(err)?;
            Ok(secrets)
        }
        Err(e) => Err(err(e)),
    }
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

    /// Where the session issuer's keys are.
    pub fn session_jwks_url(&self) -> Option<String> {
        self.oidc_jwks_url.clone().or_else(|| self.session_issuer().map(|i| format!("{i}/jwks.json")))
    }

    /// Reads the process environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_lookup(&|k| std::env::var(k).ok())
    }

    /// Reads settings through `get` (tests pass a map).
    pub fn from_lookup(get: Lookup<'_>) -> Result<Config, ConfigError> {
        let profile = match get("MAPI_PROFILE").as_deref().map(str::trim) {
            None | Some("") | Some("dev") => Profile::Dev,
            Some("multi-tenant") => Profile::MultiTenant,
            Some(other) => {
                return Err(ConfigError::Invalid(format!(
                    "MAPI_PROFILE `{other}`: use `dev` or `multi-tenant`"
                )));
            }
        };
        let home = PathBuf::from(
            get("MAPI_HOME").filter(|s| !s.trim().is_empty()).unwrap_or_else(|| "./.mapi".into()),
        );
        let port: u16 = parse(get, "PORT", 8080)?;
        let public_url_set = get("MAPI_PUBLIC_URL").is_some_and(|s| !s.trim().is_empty());
        let public_url = get("MAPI_PUBLIC_URL")
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| format!("http://127.0.0.1:{port}"))
            .trim_end_matches('/')
            .to_owned();
        let from_env = (get("MAPI_INTERNAL_TOKEN"), get("MAPI_TOKEN_PEPPER"), get("MAPI_URL_SIGNING_KEY"));
        let secrets = match (profile, from_env) {
            (_, (Some(internal_token), Some(pepper), Some(url_key))) => Secrets {
                internal_token,
                token_pepper: hex::decode(pepper.trim())
                    .map_err(|_| ConfigError::Invalid("MAPI_TOKEN_PEPPER must be hex".into()))?,
                url_signing_key: hex::decode(url_key.trim())
                    .map_err(|_| ConfigError::Invalid("MAPI_URL_SIGNING_KEY must be hex".into()))?,
            },
            (Profile::Dev, _) => dev_secrets(&home)?,
            (Profile::MultiTenant, _) => {
                return Err(ConfigError::Invalid(
                    "the multi-tenant profile needs MAPI_INTERNAL_TOKEN, MAPI_TOKEN_PEPPER and MAPI_URL_SIGNING_KEY".into(),
                ));
            }
        };
        if secrets.internal_token.len() < 16
            || secrets.token_pepper.len() < 16
            || secrets.url_signing_key.len() < 16
        {
            return Err(ConfigError::Invalid("secrets must be at least 16 characters or bytes long".into()));
        }
        let sqlite_durability = match get("MAPI_SQLITE_SYNC").as_deref().map(str::trim) {
            None | Some("") | Some("full") => Durability::Full,
            Some("normal") => Durability::Normal,
            Some(other) => {
                return Err(ConfigError::Invalid(format!("MAPI_SQLITE_SYNC `{other}`: use full or normal")));
            }
        };
        let executor = match get("MAPI_EXECUTOR").as_deref().map(str::trim) {
            None | Some("") | Some("local-process") => ExecutorKind::LocalProcess,
            Some("cloudrun-jobs") => ExecutorKind::CloudRunJobs,
            Some(other) => {
                return Err(ConfigError::Invalid(format!(
                    "MAPI_EXECUTOR `{other}`: use local-process or cloudrun-jobs"
                )));
            }
        };
        let cloudrun = match executor {
            ExecutorKind::CloudRunJobs => {
                Some(mapi_cloudrun::Settings::from_env(get).map_err(ConfigError::Invalid)?)
            }
            ExecutorKind::LocalProcess => None,
        };
        let cloudtasks = match get("MAPI_QUEUE").as_deref().map(str::trim) {
            None | Some("") | Some("local") => None,
            Some("cloudtasks") => {
                let get = |k: &str| get(k).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
                let need = |k: &str| {
                    get(k).ok_or_else(|| ConfigError::Invalid(format!("MAPI_QUEUE=cloudtasks needs {k}")))
                };
                Some(CloudTasksConfig {
                    project: need("MAPI_CLOUDTASKS_PROJECT")?,
                    location: get("MAPI_CLOUDTASKS_LOCATION").unwrap_or_else(|| "europe-west1".to_owned()),
                    target: get("MAPI_CLOUDTASKS_TARGET_URL"),
                    submit_tasks_url: get("MAPI_SUBMIT_TASKS_URL"),
                    meter_url: get("MAPI_METER_URL"),
                    service_account: need("MAPI_CLOUDTASKS_SERVICE_ACCOUNT")?,
                    audience: get("MAPI_CLOUDTASKS_AUDIENCE"),
                    endpoint: get("MAPI_CLOUDTASKS_ENDPOINT"),
                })
            }
            Some(other) => {
                return Err(ConfigError::Invalid(format!("MAPI_QUEUE `{other}`: use local or cloudtasks")));
            }
        };
        let store_backend = match get("MAPI_STORE").as_deref().map(str::trim) {
            None | Some("") | Some("sqlite") => StoreBackend::Sqlite,
            Some("firestore") => StoreBackend::Firestore(
                mapi_firestore::Settings::from_env(get).map_err(|e| ConfigError::Invalid(e.to_string()))?,
            ),
            Some(other) => {
                return Err(ConfigError::Invalid(format!("MAPI_STORE `{other}`: use sqlite or firestore")));
            }
        };
        let objects_backend = match get("MAPI_OBJECTS").as_deref().map(str::trim) {
            None | Some("") | Some("local") => ObjectsBackend::Local,
            Some("gcs") => {
                let data = mapi_gcs::Settings::from_env(get).map_err(ConfigError::Invalid)?;
                let bootstrap_bucket = get("MAPI_GCS_BOOTSTRAP_BUCKET")
                    .map(|b| b.trim().to_owned())
                    .filter(|b| !b.is_empty())
                    .unwrap_or_else(|| format!("{}-bootstrap", data.bucket));
                let mut bootstrap = data.clone();
                bootstrap.bucket = bootstrap_bucket.clone();
                bootstrap.validate().map_err(|e| {
                    ConfigError::Invalid(format!(
                        "MAPI_GCS_BOOTSTRAP_BUCKET: {}",
                        e.replace("MAPI_GCS_BUCKET", "the bucket")
                    ))
                })?;
                ObjectsBackend::Gcs { data, bootstrap_bucket }
            }
            Some(other) => {
                return Err(ConfigError::Invalid(format!("MAPI_OBJECTS `{other}`: use local or gcs")));
            }
        };
        let signer = match get("MAPI_SIGNER").as_deref().map(str::trim) {
            None | Some("") | Some("local") => SignerConfig::Local {
                key_file: get("MAPI_SIGNING_KEY_FILE")
                    .filter(|s| !s.trim().is_empty())
                    .map(PathBuf::from)
                    .unwrap_or_else(|| home.join("bundle-signing-key.pem")),
                trusted: get("MAPI_SIGNING_TRUSTED_KEY_FILES")
                    .unwrap_or_default()
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(PathBuf::from)
                    .collect(),
            },
            Some("kms") => {
                SignerConfig::Kms(mapi_signer::kms::KmsSettings::from_env(get).map_err(ConfigError::Invalid)?)
            }
            Some(other) => {
                return Err(ConfigError::Invalid(format!("MAPI_SIGNER `{other}`: use local or kms")));
            }
        };
        let routes = match get("MAPI_ROUTES").as_deref().map(str::trim) {
            None | Some("") | Some("all") => RouteSet::All,
            Some("api") => RouteSet::Api,
            Some("tasks") => RouteSet::Tasks,
            Some(other) => {
                return Err(ConfigError::Invalid(format!("MAPI_ROUTES `{other}`: use all, api or tasks")));
            }
        };
        let jobs = JobSettings {
            max_items: parse(get, "MAPI_JOB_MAX_ITEMS", 100_000)?,
            max_body_bytes: parse(get, "MAPI_JOB_MAX_BODY_BYTES", 64 * 1024 * 1024)?,
            max_item_bytes: parse(get, "MAPI_JOB_MAX_ITEM_BYTES", 64 * 1024)?,
            fanout_batch: parse::<u32>(get, "MAPI_JOB_FANOUT_BATCH", 100)?.clamp(1, 1000),
            tenant_window: parse::<u32>(get, "MAPI_JOB_TENANT_WINDOW", 200)?.max(1),
            fanout_wait: Duration::from_millis(parse(get, "MAPI_JOB_FANOUT_WAIT_MS", 200)?),
            item_max_attempts: parse::<u32>(get, "MAPI_JOB_ITEM_MAX_ATTEMPTS", 3)?.max(1),
            item_timeout: seconds(get, "MAPI_JOB_ITEM_TIMEOUT_S", 20)?,
            retention: Duration::from_secs(parse::<u64>(get, "MAPI_JOB_RETENTION_DAYS", 30)? * 86_400),
        };
        if jobs.item_timeout.is_zero() || jobs.item_timeout >= JOB_ITEM_DISPATCH_DEADLINE {
            return Err(ConfigError::Invalid(format!(
                "MAPI_JOB_ITEM_TIMEOUT_S must be between 1 and {} (the item queue's dispatch deadline)",
                JOB_ITEM_DISPATCH_DEADLINE.as_secs() - 1
            )));
        }
        Ok(Config {
            signer,
            routes,
            jobs,
            profile,
            home,
            port,
            public_url,
            public_url_set,
            secrets,
            sqlite_durability,
            max_dataset_bytes: parse(get, "MAPI_MAX_DATASET_BYTES", 64 * 1024 * 1024)?,
            max_json_bytes: parse(get, "MAPI_MAX_JSON_BYTES", 1024 * 1024)?,
            max_infra_retries: parse(get, "MAPI_MAX_INFRA_RETRIES", 2)?,
            event_grace: seconds(get, "MAPI_EVENT_GRACE_S", 120)?,
            dispatch_lease: seconds(get, "MAPI_DISPATCH_LEASE_S", 60)?,
            idempotency_ttl: seconds(get, "MAPI_IDEMPOTENCY_TTL_S", 86_400)?,
            stall_after: seconds(get, "MAPI_STALL_AFTER_S", 300)?,
            tick_interval: seconds(get, "MAPI_TICK_INTERVAL_S", 2)?,
            worker_bin: get("MAPI_WORKER_BIN").filter(|s| !s.trim().is_empty()).map(PathBuf::from),
            local_timeout_margin: seconds(get, "MAPI_LOCAL_TIMEOUT_MARGIN_S", 5)?,
            local_grace: seconds(get, "MAPI_LOCAL_GRACE_S", 5)?,
            local_memory_mib: memory_map(&get("MAPI_LOCAL_MEMORY_MIB").unwrap_or_default())?,
            platform_concurrent_runs: parse(
                get,
                "MAPI_PLATFORM_CONCURRENT_RUNS",
                mapi_quota::PLATFORM_CONCURRENT_RUNS,
            )?,
            operator_emails: emails(
                get,
                "MAPI_OPERATOR_EMAILS",
                if profile == Profile::Dev { "admin@dev.local" } else { "" },
            )?,
            oidc_issuer: get("MAPI_OIDC_ISSUER")
                .filter(|s| !s.trim().is_empty())
                .map(|s| s.trim_end_matches('/').to_owned()),
            oidc_audience: get("MAPI_OIDC_AUDIENCE")
                .filter(|s| !s.trim().is_empty())
                .unwrap_or_else(|| "mapi".into()),
            oidc_jwks_url: get("MAPI_OIDC_JWKS_URL").filter(|s| !s.trim().is_empty()),
            dev_accounts: emails(get, "MAPI_DEV_ACCOUNTS", DEV_ACCOUNTS)?,
            executor,
            cloudrun,
            cloudtasks,
            store_backend,
            objects_backend,
            evidence_max_age: seconds(get, "MAPI_EXECUTOR_EVIDENCE_MAX_AGE_S", 3 * 86_400)?,
            pubsub_push: push_auth(get)?,
            pubsub_push_subscriptions: subscriptions(get)?,
            google_jwks_url: get("MAPI_GOOGLE_JWKS_URL")
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| mapi_oidc::GOOGLE_JWKS_URL.to_owned()),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn with(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let m: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_lookup(&|k| m.get(k).cloned())
    }

    #[test]
    fn the_queue_is_local_unless_cloudtasks_is_chosen_with_its_settings() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        let home_s = home.to_string_lossy().into_owned();
        assert_eq!(with(&[("MAPI_HOME", &home_s)]).expect("defaults").cloudtasks, None);
        let e = with(&[("MAPI_HOME", &home_s), ("MAPI_QUEUE", "cloudtasks")]).expect_err("no project");
        assert!(e.to_string().contains("MAPI_CLOUDTASKS_PROJECT"), "{e}");
        let e = with(&[("MAPI_HOME", &home_s), ("MAPI_QUEUE", "pubsub")]).expect_err("unknown");
        assert!(e.to_string().contains("MAPI_QUEUE"), "{e}");
        let c = with(&[
            ("MAPI_HOME", &home_s),
            ("MAPI_QUEUE", "cloudtasks"),
            ("MAPI_CLOUDTASKS_PROJECT", "mapi-prod"),
            ("MAPI_CLOUDTASKS_SERVICE_ACCOUNT", "tasks@mapi-prod.iam.gserviceaccount.com"),
            ("MAPI_CLOUDTASKS_ENDPOINT", "http://127.0.0.1:9999"),
            ("MAPI_METER_URL", "https://meter.example"),
        ])
        .expect("cloudtasks");
        assert_eq!(
            c.cloudtasks,
            Some(CloudTasksConfig {
                project: "mapi-prod".into(),
                location: "europe-west1".into(),
                target: None,
                submit_tasks_url: None,
                meter_url: Some("https://meter.example".into()),
                service_account: "tasks@mapi-prod.iam.gserviceaccount.com".into(),
                audience: None,
                endpoint: Some("http://127.0.0.1:9999".into()),
            })
        );
    }

    #[test]
    fn defaults_need_no_environment_and_secrets_persist() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        let home_s = home.to_string_lossy().into_owned();
        let a = with(&[("MAPI_HOME", &home_s)]).expect("defaults");
        assert_eq!((a.port, a.public_url.as_str(), a.profile), (8080, "http://127.0.0.1:8080", Profile::Dev));
        assert_eq!(a.sqlite_durability, Durability::Full);
        let b = with(&[("MAPI_HOME", &home_s), ("PORT", "9000")]).expect("again");
        assert_eq!(a.secrets, b.secrets, "dev secrets are kept in MAPI_HOME");
        assert_eq!(b.public_url, "http://127.0.0.1:9000");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(home.join("secrets.json")).expect("file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn bad_values_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().to_string_lossy().into_owned();
        let e = with(&[("MAPI_HOME", &home), ("PORT", "eighty")]).expect_err("bad port");
        assert!(e.to_string().contains("PORT"), "{e}");
        let e = with(&[("MAPI_HOME", &home), ("MAPI_LOCAL_MEMORY_MIB", "S=lots")]).expect_err("bad map");
        assert!(e.to_string().contains("S=512"), "{e}");
        let e = with(&[("MAPI_PROFILE", "multi-tenant"), ("MAPI_HOME", &home)]).expect_err("no secrets");
        assert!(e.to_string().contains("MAPI_INTERNAL_TOKEN"), "{e}");
        let m = with(&[("MAPI_HOME", &home), ("MAPI_LOCAL_MEMORY_MIB", "S=64, m=256")]).expect("map");
        assert_eq!(m.local_memory_mib.get(&ResourceClass::M), Some(&256));
    }

    #[test]
    fn push_authentication_needs_both_settings_and_well_formed_subscriptions() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().to_string_lossy().into_owned();
        let d = with(&[("MAPI_HOME", &home)]).expect("defaults");
        assert_eq!(d.pubsub_push, None);
        assert!(d.pubsub_push_subscriptions.is_empty(), "any subscription by default");
        assert_eq!(d.google_jwks_url, "https://www.googleapis.com/oauth2/v3/certs");

        let audience = ("MAPI_PUBSUB_PUSH_AUDIENCE", "https://api.example.com/internal/events");
        let account = ("MAPI_PUBSUB_PUSH_SERVICE_ACCOUNT", "Mapi-Events-Push@p.iam.gserviceaccount.com");
        for half in [audience, account] {
            let e = with(&[("MAPI_HOME", &home), half]).expect_err("one of the two");
            assert!(e.to_string().contains("set both"), "{e}");
        }
        let subs = "projects/p/subscriptions/a, projects/p/subscriptions/b";
        let c = with(&[
            ("MAPI_HOME", &home),
            audience,
            account,
            ("MAPI_PUBSUB_PUSH_SUBSCRIPTIONS", subs),
            ("MAPI_GOOGLE_JWKS_URL", "http://127.0.0.1:9/jwks"),
        ])
        .expect("configured");
        let push = c.pubsub_push.expect("push auth");
        assert_eq!(push.audience, "https://api.example.com/internal/events");
        assert_eq!(push.service_account, "mapi-events-push@p.iam.gserviceaccount.com");
        assert_eq!(c.pubsub_push_subscriptions, ["projects/p/subscriptions/a", "projects/p/subscriptions/b"]);
        assert_eq!(c.google_jwks_url, "http://127.0.0.1:9/jwks");

        for bad in ["mapi-run-events-push", "projects/p/topics/t", "projects//subscriptions/s"] {
            let e = with(&[("MAPI_HOME", &home), ("MAPI_PUBSUB_PUSH_SUBSCRIPTIONS", bad)]).expect_err(bad);
            assert!(e.to_string().contains(bad), "{e}");
        }
        let e = with(&[("MAPI_HOME", &home), ("MAPI_SIGNER", "kms")]).expect_err("no key version");
        assert!(e.to_string().contains("MAPI_KMS_KEY_VERSION"), "{e}");
        let v = "projects/p/locations/l/keyRings/r/cryptoKeys/k/cryptoKeyVersions/2";
        let k =
            with(&[("MAPI_HOME", &home), ("MAPI_SIGNER", "kms"), ("MAPI_KMS_KEY_VERSION", v)]).expect("kms");
        assert!(matches!(k.signer, SignerConfig::Kms(ref s) if s.key_version == v));
        let e = with(&[("MAPI_HOME", &home), audience, ("MAPI_PUBSUB_PUSH_SERVICE_ACCOUNT", "nobody")])
            .expect_err("not an e-mail");
        assert!(e.to_string().contains("nobody"), "{e}");
    }
}
