//! The platform's state: configuration read once at start ([`Config`]) and
//! the ports wired to their adapters ([`Platform`]). Every function's router
//! takes an [`AppState`]; the same handlers serve the embedded and the
//! cloud adapters, because they only see the ports.
//!
//! Architecture invariant: handlers read configuration from `AppState`,
//! never from the environment.

mod absent;
pub mod config;
mod services;

use std::ops::Deref;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use mapi_clock::Clock;
use mapi_executor::Executor;
use mapi_executor::local::layout::Command;
use mapi_executor::local::{LocalConfig, LocalProcessExecutor};
use mapi_hosting::Hosting;
use mapi_hosting::local::{LocalHosting, ServerCommand};
use mapi_identity::{IdentityState, Pepper};
use mapi_metrics::Metrics;
use mapi_objects::ObjectStore;
use mapi_objects::fs::FsObjectStore;
use mapi_objects::signed::UrlSigner;
use mapi_queue::sqlite::SqliteQueue;
use mapi_queue::{QueueConfig, QueueName, RetryConfig, TaskQueue};
use mapi_signer::Signer;
use mapi_signer::local::LocalSigner;
use mapi_store::Store;
use mapi_store::sqlite::SqliteStore;

pub use absent::Absent;
pub use config::{
    CloudTasksConfig, Config, ConfigError, DEV_IDP_PREFIX, ExecutorKind, HostingBackend,
    JOB_ITEM_DISPATCH_DEADLINE, JobSettings, ObjectsBackend, Profile, PushAuthConfig, Secrets, Section,
    SignerConfig, StoreBackend, Uses, VARIABLES, variables,
};

pub use mapi_schema::{DISPATCH_QUEUE, FINALIZE_QUEUE};
pub use services::{QUEUE_ROUTES, QueueRoute, Service, service_of_queue, service_url};
/// The data bucket's name locally.
pub const DATA_BUCKET: &str = "data";
/// The bootstrap bucket's name locally.
pub const BOOTSTRAP_BUCKET: &str = "bootstrap";

/// Every port, wired.
#[derive(Debug)]
pub struct Platform {
    pub config: Config,
    pub store: Arc<dyn Store>,
    /// The data bucket: datasets and outputs, keys under `t/{tenant}/`.
    pub objects: Arc<dyn ObjectStore>,
    /// The bootstrap bucket: one object per attempt task, keyed by nonce.
    pub bootstrap: Arc<dyn ObjectStore>,
    pub queue: Arc<dyn TaskQueue>,
    pub executor: Arc<dyn Executor>,
    /// Hosts model endpoints (read with the executor's section).
    pub hosting: Arc<dyn Hosting>,
    /// The client scores are forwarded with (connections kept alive).
    pub http: reqwest::Client,
    /// Signs and verifies model-version bundle manifests.
    pub signer: Arc<dyn Signer>,
    pub clock: Arc<dyn Clock>,
    /// Where ids and nonces take their bytes (the operating system's; a
    /// seeded source under test).
    pub entropy: Arc<dyn mapi_entropy::Entropy>,
    pub metrics: Metrics,
    /// Anonymous authentication refusals of this process, counted into
    /// `metrics` and audited once per source a minute.
    pub refusals: mapi_identity::refusals::RefusalLog,
    pub pepper: Pepper,
    /// Verifies session ID tokens; `None` when no issuer is configured.
    pub sessions: Option<mapi_oidc::Verifier>,
    /// Verifies the ID tokens Cloud Tasks sends with each delivery (of
    /// `MAPI_CLOUDTASKS_SERVICE_ACCOUNT` for the tasks' audience); `None`
    /// unless `MAPI_QUEUE=cloudtasks`.
    pub task_invoker: Option<mapi_oidc::ServiceAccountTokens>,
    /// The embedded adapters in use, each present only when its port is
    /// local: what `mapi dev` drives (the queue's deliverer, the
    /// executor's log forwarder, the signed-URL routes).
    pub local: LocalParts,
    /// The minute usage rollups start, once this process has made sure of
    /// it ([`Platform::rollups_started`]).
    pub rollups: RollupsStart,
}

/// What a process knows of the minute usage rollups start: nothing until
/// its first ledger write makes sure of it.
#[derive(Debug, Default)]
pub struct RollupsStart(tokio::sync::OnceCell<mapi_domain::Timestamp>);

/// The concrete embedded adapters, for the background work that only the
/// one-machine platform runs. A cloud port has no local part.
#[derive(Clone, Debug, Default)]
pub struct LocalParts {
    /// `MAPI_STORE=sqlite`: the SQLite store (its counts are what the
    /// budget tests read).
    pub store: Option<SqliteStore>,
    /// `MAPI_QUEUE=local`: the SQLite queue.
    pub queue: Option<SqliteQueue>,
    /// `MAPI_EXECUTOR=local-process`: the local-process executor.
    pub executor: Option<LocalProcessExecutor>,
    /// `MAPI_OBJECTS=local`: the two buckets on disk and their URL signer.
    pub objects: Option<LocalObjects>,
    /// Local endpoints: model servers as local processes.
    pub hosting: Option<LocalHosting>,
}

/// The local object stores.
#[derive(Clone, Debug)]
pub struct LocalObjects {
    pub data: FsObjectStore,
    pub bootstrap: FsObjectStore,
    pub signer: UrlSigner,
}

/// The state every router holds.
#[derive(Clone, Debug)]
pub struct AppState(pub Arc<Platform>);

impl Deref for AppState {
    type Target = Platform;
    fn deref(&self) -> &Platform {
        &self.0
    }
}

impl AppState {
    /// Asks for a reconcile tick `MAPI_TICK_FOLLOW_UP_S` from now, so work
    /// just begun or changed (a dispatched attempt, a new item job, an
    /// endpoint change) and work still active (the tick's own follow-up)
    /// move within seconds instead of at Cloud Scheduler's next minute.
    /// Whether it was asked for: never when the setting is zero; a queue
    /// failure is logged, not returned (the scheduler's tick comes anyway).
    pub async fn ask_for_tick(&self) -> bool {
        let after = self.config.tick_follow_up;
        if after.is_zero() {
            return false;
        }
        match mapi_schema::tasks::push_tick(&*self.queue, self.clock.now() + after).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "asking for a tick failed; the scheduler's next tick comes anyway");
                false
            }
        }
    }
}

impl IdentityState for AppState {
    fn store(&self) -> &dyn Store {
        &*self.0.store
    }

    fn pepper(&self) -> &Pepper {
        &self.0.pepper
    }

    fn clock(&self) -> &dyn Clock {
        &*self.0.clock
    }

    fn entropy(&self) -> &dyn mapi_entropy::Entropy {
        &*self.0.entropy
    }

    fn internal_token(&self) -> &str {
        &self.0.config.secrets.internal_token
    }

    fn sessions(&self) -> Option<&mapi_oidc::Verifier> {
        self.0.sessions.as_ref()
    }

    fn is_operator(&self, email: &mapi_domain::UserId) -> bool {
        self.0.config.operator_emails.contains(email)
    }

    fn refusals(&self) -> &mapi_identity::refusals::RefusalLog {
        &self.0.refusals
    }

    fn task_invoker(&self) -> Option<&mapi_oidc::ServiceAccountTokens> {
        self.0.task_invoker.as_ref()
    }
}

/// Why the platform could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot open the store: {0}")]
    Store(#[from] mapi_store::StoreError),
    #[error("cannot open the object store: {0}")]
    Objects(#[from] mapi_objects::ObjectError),
    #[error("cannot open the queue: {0}")]
    Queue(#[from] mapi_queue::QueueError),
    #[error("cannot start the executor: {0}")]
    Executor(#[from] mapi_executor::ExecutorError),
    #[error(transparent)]
    CloudRun(#[from] mapi_cloudrun::BuildError),
    #[error("cannot open the endpoints' host: {0}")]
    Hosting(#[from] mapi_hosting::HostingError),
    #[error("cannot start the bundle signer: {0}")]
    Signer(#[from] mapi_signer::SignError),
    #[error("cannot start the Cloud Storage object store: {0}")]
    Gcs(#[from] mapi_gcs::BuildError),
}

/// The credentials of a Google client towards `endpoint`: none only
/// towards a plain-HTTP one (which can only be a local fake), Application
/// Default Credentials otherwise (Google's endpoint when `None`). Each
/// client crate has its own `Credentials`; this is the one rule for all.
fn credentials<C>(endpoint: Option<&str>, anonymous: C, application_default: C) -> C {
    if endpoint.is_some_and(|e| e.starts_with("http://")) { anonymous } else { application_default }
}

/// The signer `config` selects: the local key (made on first use), or the
/// Cloud KMS key version with its public keys loaded (anonymous only
/// towards a plain-HTTP endpoint, which can only be a local fake).
pub async fn signer(config: &Config) -> Result<Arc<dyn Signer>, StartError> {
    Ok(match &config.signer {
        SignerConfig::Local { key_file, trusted } => Arc::new(LocalSigner::open(key_file, true, trusted)?),
        SignerConfig::Kms(settings) => {
            let credentials = credentials(
                settings.endpoint.as_deref(),
                mapi_signer::kms::Credentials::Anonymous,
                mapi_signer::kms::Credentials::ApplicationDefault,
            );
            Arc::new(mapi_signer::kms::KmsSigner::connect(settings.clone(), credentials).await?)
        }
    })
}

/// The verifier of session tokens, when an issuer is configured.
pub fn session_verifier(config: &Config, clock: Arc<dyn Clock>) -> Option<mapi_oidc::Verifier> {
    let issuer = config.session_issuer()?;
    let jwks_url = config.session_jwks_url()?;
    let jwks = mapi_oidc::JwksCache::lazy(jwks_url, Duration::from_secs(10), clock.clone());
    // Google's ID tokens carry either spelling of its issuer.
    let issuers = match mapi_oidc::GOOGLE_ISSUERS.contains(&issuer.as_str()) {
        true => mapi_oidc::GOOGLE_ISSUERS.map(str::to_owned).to_vec(),
        false => vec![issuer],
    };
    let verifier_config = mapi_oidc::VerifierConfig {
        max_lifetime: Some(config.session_max_lifetime),
        other_audiences: config.oidc_cli_audiences.clone(),
        ..mapi_oidc::VerifierConfig::new(issuers, config.oidc_audience.clone())
    };
    Some(mapi_oidc::Verifier::new(verifier_config, jwks, clock))
}

/// The retry policy of both queues: quick first retries, then at most a minute apart.
fn queue_config(name: &str) -> Result<QueueConfig, mapi_queue::QueueError> {
    Ok(QueueConfig {
        name: QueueName::new(name)?,
        retry: RetryConfig {
            max_attempts: 0,
            min_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(60),
            max_doublings: 6,
        },
        max_concurrent_dispatches: 16,
        // Our handlers answer in milliseconds; a delivery lost with a
        // crashed deliverer is due again after this plus the lease margin.
        dispatch_deadline: Duration::from_secs(30),
        dedup_window: Duration::from_secs(3600),
    })
}

/// The item jobs' queues: fan-out steps, and items (many at once, with a
/// dispatch deadline above the item timeout, quick retries).
pub fn job_queue_configs() -> Result<Vec<QueueConfig>, mapi_queue::QueueError> {
    let fanout = queue_config(mapi_jobs::tasks::FANOUT_QUEUE)?;
    let items = QueueConfig {
        retry: RetryConfig {
            max_attempts: 0,
            min_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(10),
            max_doublings: 5,
        },
        max_concurrent_dispatches: 32,
        dispatch_deadline: JOB_ITEM_DISPATCH_DEADLINE,
        ..queue_config(mapi_jobs::tasks::ITEMS_QUEUE)?
    };
    Ok(vec![fanout, items])
}

/// Every queue the platform pushes to: dispatch, finalize, webhooks, the
/// follow-up ticks, workflow runs' advances, the item jobs' two, and tenants' exports and purges (one at a time each:
/// they are rare and long, and a purge's deliveries must not overlap).
pub fn queue_configs() -> Result<Vec<QueueConfig>, mapi_queue::QueueError> {
    let one_at_a_time = |name: &str| -> Result<QueueConfig, mapi_queue::QueueError> {
        Ok(QueueConfig { max_concurrent_dispatches: 1, ..queue_config(name)? })
    };
    let control = vec![
        queue_config(DISPATCH_QUEUE)?,
        queue_config(FINALIZE_QUEUE)?,
        queue_config(mapi_schema::WEBHOOKS_QUEUE)?,
        // Follow-up ticks: one at a time (a second would find the lease held).
        // A tick that runs past the deadline is delivered again and answers
        // `busy` while the first holds the lease.
        QueueConfig { max_concurrent_dispatches: 1, ..queue_config(mapi_schema::TICK_QUEUE)? },
        // Workflow runs' advances: two of one run at once are safe (each
        // commit re-reads the run), but rarely useful.
        queue_config(mapi_schema::WORKFLOWS_QUEUE)?,
    ];
    let tenants = vec![one_at_a_time(mapi_schema::EXPORT_QUEUE)?, one_at_a_time(mapi_schema::PURGE_QUEUE)?];
    Ok([control, job_queue_configs()?, tenants].concat())
}

/// The Cloud Tasks adapter's settings: each queue delivers to the service
/// that serves its route ([`QUEUE_ROUTES`]), every delivery with one token
/// audience.
pub fn cloudtasks_settings(
    ct: &CloudTasksConfig,
    public_url: &str,
) -> Result<mapi_cloudtasks::Settings, mapi_queue::QueueError> {
    let targets =
        QUEUE_ROUTES.iter().map(|q| (q.queue.to_owned(), service_url(ct, q.service, public_url))).collect();
    Ok(mapi_cloudtasks::Settings {
        project: ct.project.clone(),
        location: ct.location.clone(),
        targets,
        audience: ct.token_audience(public_url),
        service_account_email: ct.service_account.clone(),
        endpoint: ct.endpoint.clone(),
        queues: queue_configs()?,
    })
}

/// Every index the store needs: the runs', the other documents' and the jobs'.
pub fn indexes() -> Vec<mapi_store::Index> {
    [mapi_lifecycle::INDEXES, mapi_schema::INDEXES, mapi_jobs::INDEXES].concat()
}

/// Every index of an array's elements the store needs (Firestore's only:
/// see [`mapi_store::ContainsIndex`]).
pub fn contains_indexes() -> Vec<mapi_store::ContainsIndex> {
    mapi_lifecycle::CONTAINS_INDEXES.to_vec()
}

/// Every field Firestore is not to index on its own (Firestore's only:
/// see [`mapi_store::Unindexed`]).
pub fn unindexed() -> Vec<mapi_store::Unindexed> {
    [mapi_lifecycle::UNINDEXED, mapi_jobs::UNINDEXED].concat()
}

/// The ports of one platform.
struct Ports {
    store: Arc<dyn Store>,
    objects: Arc<dyn ObjectStore>,
    bootstrap: Arc<dyn ObjectStore>,
    queue: Arc<dyn TaskQueue>,
    executor: Arc<dyn Executor>,
    hosting: Arc<dyn Hosting>,
    signer: Arc<dyn Signer>,
}

/// `MAPI_HOME`, made if missing: only a local adapter needs it.
fn home(config: &Config) -> Result<PathBuf, StartError> {
    let home = config.home.clone();
    std::fs::create_dir_all(&home)
        .map_err(|e| ConfigError::Invalid(format!("MAPI_HOME {}: {e}", home.display())))?;
    Ok(home)
}

/// The SQLite store in `$MAPI_HOME/mapi.db`.
fn local_store(config: &Config, clock: &Arc<dyn Clock>) -> Result<SqliteStore, StartError> {
    let db = home(config)?.join("mapi.db");
    Ok(SqliteStore::open(&db, clock.clone(), &indexes(), config.sqlite_durability)?)
}

/// The SQLite queue in `$MAPI_HOME/queue.db`, its own file (one writer per
/// file), holding any tasks an older home left in `mapi.db`.
fn local_queue(config: &Config, clock: &Arc<dyn Clock>) -> Result<SqliteQueue, StartError> {
    let home = home(config)?;
    let queue = SqliteQueue::open(&home.join("queue.db"), clock.clone(), queue_configs()?)?;
    queue.adopt(&home.join("mapi.db"))?;
    Ok(queue)
}

/// The two buckets under `$MAPI_HOME/objects/`, with the URL signer their
/// signed-URL routes check.
fn local_objects(config: &Config, clock: &Arc<dyn Clock>) -> Result<LocalObjects, StartError> {
    let root = home(config)?.join("objects");
    // Config::read asks for the key wherever local objects are served.
    let key = config.secrets.url_signing_key.clone().ok_or_else(|| {
        ConfigError::Invalid(format!("local objects need {}", config::vars::URL_SIGNING_KEY.name))
    })?;
    let signer = UrlSigner::new(key, &config.public_url);
    let data = FsObjectStore::open(&root, DATA_BUCKET, signer.clone(), clock.clone())?;
    let bootstrap = FsObjectStore::open(&root, BOOTSTRAP_BUCKET, signer.clone(), clock.clone())?;
    Ok(LocalObjects { data, bootstrap, signer })
}

/// The local-process executor (the gvisor executor with `MAPI_EXECUTOR=gvisor`), its
/// executions under `$MAPI_HOME/executions/`.
fn local_executor(
    config: &Config,
    clock: &Arc<dyn Clock>,
    worker: Command,
) -> Result<LocalProcessExecutor, StartError> {
    let mut static_env = std::collections::BTreeMap::new();
    static_env.insert("MAPI_PYTHON".to_owned(), config.python.clone());
    static_env.insert(
        "MAPI_BOOTSTRAP_URL".to_owned(),
        config.objects_backend.bootstrap_url_template(&config.public_url),
    );
    if let ObjectsBackend::Gcs { data, .. } = &config.objects_backend
        && let Some(endpoint) = &data.endpoint
    {
        // The worker reads `gs://` bootstraps from the same service.
        static_env.insert("MAPI_GCS_ENDPOINT".to_owned(), endpoint.clone());
    }
    let local = LocalConfig {
        dir: home(config)?.join("executions"),
        host: worker.clone(),
        task: worker,
        static_env,
        timeout_margin: config.local_timeout_margin,
        grace: config.local_grace,
        memory_mib: config.local_memory_mib.clone(),
        regions: config.local_regions.clone(),
        runsc: config.gvisor_runsc.clone(),
        unavailable: python_unavailable(&config.python),
        gpus: config.local_gpus.unwrap_or_else(|| usable_gpus(&config.python)),
    };
    Ok(LocalProcessExecutor::new(local, clock.clone())?)
}

/// The GPUs the local executors can give a GPU-class task: those
/// `nvidia-smi` lists that the interpreter's PyTorch can use (Debian's
/// `python3-torch` is built without CUDA: on such a machine GPU-class runs
/// use the CPU, warned). PyTorch is asked only where a GPU is listed.
fn usable_gpus(interpreter: &str) -> u32 {
    let listed = mapi_executor::local::visible_gpus();
    if listed == 0 {
        return 0;
    }
    let probe = "import torch\nprint(torch.cuda.device_count() if torch.cuda.is_available() else 0)";
    let usable = std::process::Command::new(interpreter)
        .args(["-I", "-c", probe])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse::<u32>().ok())
        .unwrap_or(0);
    if usable == 0 {
        tracing::warn!(
            interpreter,
            listed,
            "nvidia-smi lists GPUs, and this interpreter's PyTorch cannot use them: GPU-class runs use the CPU"
        );
    }
    usable.min(listed)
}

/// The Python methods the local executors' interpreter (`MAPI_PYTHON`) cannot
/// run, asked once at start: which of the packages they import it finds
/// (without importing them).
fn python_unavailable(interpreter: &str) -> std::collections::BTreeMap<String, String> {
    let modules: Vec<&str> = mapi_methods::python_packages().iter().map(|p| p.module).collect();
    let probe = "import importlib.util, sys\nfor m in sys.argv[1:]:\n    if importlib.util.find_spec(m):\n        print(m)";
    let found = std::process::Command::new(interpreter)
        .args(["-I", "-c", probe])
        .args(&modules)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().map(str::to_owned).collect())
        .unwrap_or_default();
    let unavailable = mapi_methods::python_unavailable(&found, interpreter);
    if !unavailable.is_empty() {
        tracing::warn!(interpreter, methods = ?unavailable.keys().collect::<Vec<_>>(), "Python methods unavailable on this machine");
    }
    unavailable
}

/// The file (under `$MAPI_HOME`) local container endpoints read tenants'
/// secrets from: a JSON object of tenants, each an object of secret names
/// and values.
pub const ENDPOINT_SECRETS: &str = "endpoint-secrets.json";

/// Local endpoints under `$MAPI_HOME/endpoints/`, each revision served by
/// `{worker} serve`; a plugin's model under the gvisor executor's `runsc`
/// (with another executor, local endpoints refuse plugins' models).
fn local_hosting(
    config: &Config,
    clock: &Arc<dyn Clock>,
    worker: &Command,
) -> Result<LocalHosting, StartError> {
    let mut args = worker.args.clone();
    args.push("serve".into());
    // Tenants' containers run under gVisor: the gvisor executor's runsc, or one on PATH.
    let runsc = config.gvisor_runsc.clone().or_else(|| mapi_executor::gvisor::find_program("runsc"));
    let containers = runsc.and_then(|runsc| {
        mapi_hosting::sandboxed::ContainerRuntime::new(runsc, worker.program.clone(), worker.args.clone())
    });
    let home = home(config)?;
    let server = ServerCommand {
        program: worker.program.clone(),
        args,
        sandbox: config.gvisor_runsc.clone(),
        containers,
        secrets: home.join(ENDPOINT_SECRETS),
        // Many tenants on one machine: each runs only the images under its own directory.
        images: (config.profile == config::Profile::MultiTenant).then(|| home.join("images")),
    };
    Ok(LocalHosting::open(&home.join("endpoints"), server, config.endpoints_idle, clock.clone())?)
}

/// Endpoints as Cloud Run services. Private ones are scored with ID tokens
/// from the metadata server when one is named, else from Application
/// Default Credentials.
async fn cloudrun_hosting(
    settings: mapi_cloudrun::services::ServicesSettings,
    clock: &Arc<dyn Clock>,
) -> Result<mapi_cloudrun::services::CloudRunHosting, StartError> {
    use mapi_cloudrun::services::{CloudRunHosting, GoogleIdTokens};
    let credentials = credentials(
        settings.endpoint.as_deref(),
        mapi_cloudrun::Credentials::Anonymous,
        mapi_cloudrun::Credentials::ApplicationDefault,
    );
    let id_tokens = match &settings.metadata_url {
        Some(root) => GoogleIdTokens::metadata_server(root.clone()),
        None => GoogleIdTokens::application_default(),
    };
    Ok(CloudRunHosting::new(settings, credentials, Arc::new(id_tokens), clock.clone()).await?)
}

/// The data and bootstrap buckets in Cloud Storage.
async fn gcs_buckets(
    data: mapi_gcs::Settings,
    bootstrap_bucket: String,
) -> Result<(Arc<dyn ObjectStore>, Arc<dyn ObjectStore>), StartError> {
    let credentials = credentials(
        data.endpoint.as_deref(),
        mapi_gcs::Credentials::Anonymous,
        mapi_gcs::Credentials::ApplicationDefault,
    );
    let mut bootstrap = data.clone();
    bootstrap.bucket = bootstrap_bucket;
    Ok((
        Arc::new(mapi_gcs::GcsObjectStore::new(data, credentials).await?),
        Arc::new(mapi_gcs::GcsObjectStore::new(bootstrap, credentials).await?),
    ))
}

/// The Cloud Run Jobs executor, its 429s counted in the platform's metrics.
async fn cloudrun_executor(
    settings: mapi_cloudrun::Settings,
    metrics: &Metrics,
    clock: &Arc<dyn Clock>,
) -> Result<mapi_cloudrun::CloudRunJobsExecutor, StartError> {
    let credentials = credentials(
        settings.endpoint.as_deref(),
        mapi_cloudrun::Credentials::Anonymous,
        mapi_cloudrun::Credentials::ApplicationDefault,
    );
    let throttled = metrics
        .executor_submit_throttled
        .get_or_create(&mapi_metrics::ExecutorName { executor: mapi_cloudrun::NAME.to_owned() })
        .clone();
    Ok(mapi_cloudrun::CloudRunJobsExecutor::new(settings, credentials, clock.clone(), throttled).await?)
}

impl Platform {
    /// The ports a committed step's follow-ups are carried out through.
    pub fn outbox(&self) -> mapi_lifecycle::Outbox<'_> {
        mapi_lifecycle::Outbox { queue: &*self.queue, executor: &*self.executor, bootstrap: &*self.bootstrap }
    }

    /// The platform on embedded adapters under `config.home`: SQLite store
    /// in `mapi.db` and queue in `queue.db`, objects under `objects/`, executions under
    /// `executions/`. `worker` is how to start `mapi-worker`. The signer
    /// is the local key (`MAPI_SIGNER=kms` is connected by
    /// [`Platform::configured`]).
    pub fn embedded(config: Config, clock: Arc<dyn Clock>, worker: Command) -> Result<Platform, StartError> {
        let signer: Arc<dyn Signer> = match &config.signer {
            SignerConfig::Local { key_file, trusted } => {
                Arc::new(LocalSigner::open(key_file, true, trusted)?)
            }
            SignerConfig::Kms(_) => {
                return Err(
                    ConfigError::Invalid("MAPI_SIGNER=kms: start with Platform::configured".into()).into()
                );
            }
        };
        Platform::embedded_with(config, clock, worker, signer)
    }

    fn embedded_with(
        config: Config,
        clock: Arc<dyn Clock>,
        worker: Command,
        bundle_signer: Arc<dyn Signer>,
    ) -> Result<Platform, StartError> {
        let objects = local_objects(&config, &clock)?;
        let queue = local_queue(&config, &clock)?;
        let hosting = local_hosting(&config, &clock, &worker)?;
        let executor = local_executor(&config, &clock, worker)?;
        let store = local_store(&config, &clock)?;
        let ports = Ports {
            store: Arc::new(store.clone()),
            objects: Arc::new(objects.data.clone()),
            bootstrap: Arc::new(objects.bootstrap.clone()),
            queue: Arc::new(queue.clone()),
            executor: Arc::new(executor.clone()),
            hosting: Arc::new(hosting.clone()),
            signer: bundle_signer,
        };
        let local = LocalParts {
            store: Some(store),
            queue: Some(queue),
            executor: Some(executor),
            objects: Some(objects),
            hosting: Some(hosting),
        };
        Ok(Platform::assemble(config, clock, ports, local, Metrics::new()))
    }

    /// The ports wired as `config` selects each: `MAPI_STORE`,
    /// `MAPI_OBJECTS`, `MAPI_QUEUE`, `MAPI_EXECUTOR` and `MAPI_SIGNER`
    /// (Google's clients with Application Default Credentials, anonymous
    /// only towards a plain-HTTP endpoint, which can only be a local fake).
    /// Each port is built from its own setting, so a process on Firestore,
    /// Cloud Storage, Cloud Tasks and Cloud Run Jobs opens no SQLite file
    /// and no local directory; a port of a section the configuration did
    /// not read (`config.uses`) is not built at all ([`Absent`]).
    pub async fn configured(
        config: Config,
        clock: Arc<dyn Clock>,
        worker: Command,
    ) -> Result<Platform, StartError> {
        let uses = config.uses;
        let metrics = Metrics::new();
        let mut local = LocalParts::default();
        let store: Arc<dyn Store> = match &config.store_backend {
            StoreBackend::Sqlite => {
                let store = local_store(&config, &clock)?;
                local.store = Some(store.clone());
                Arc::new(store)
            }
            StoreBackend::Firestore(settings) => {
                let credentials = mapi_firestore::Credentials::for_settings(settings);
                Arc::new(mapi_firestore::FirestoreStore::connect(settings, credentials).await?)
            }
        };
        let signer: Arc<dyn Signer> = match uses.has(Section::Signer) {
            true => signer(&config).await?,
            false => Arc::new(Absent { port: "bundle signer" }),
        };
        let (objects, bootstrap): (Arc<dyn ObjectStore>, Arc<dyn ObjectStore>) =
            match (uses.has(Section::Objects), config.objects_backend.clone()) {
                (false, _) => {
                    (Arc::new(Absent { port: "object store" }), Arc::new(Absent { port: "object store" }))
                }
                (true, ObjectsBackend::Local) => {
                    let parts = local_objects(&config, &clock)?;
                    let pair = (Arc::new(parts.data.clone()) as _, Arc::new(parts.bootstrap.clone()) as _);
                    local.objects = Some(parts);
                    pair
                }
                (true, ObjectsBackend::Gcs { data, bootstrap_bucket }) => {
                    gcs_buckets(data, bootstrap_bucket).await?
                }
            };
        let queue: Arc<dyn TaskQueue> = match (uses.has(Section::Queue), &config.cloudtasks) {
            (false, _) => Arc::new(Absent { port: "task queue" }),
            (true, None) => {
                let q = local_queue(&config, &clock)?;
                local.queue = Some(q.clone());
                Arc::new(q)
            }
            (true, Some(ct)) => {
                let credentials = credentials(
                    ct.endpoint.as_deref(),
                    mapi_cloudtasks::Credentials::Anonymous,
                    mapi_cloudtasks::Credentials::ApplicationDefault,
                );
                let settings = cloudtasks_settings(ct, &config.public_url)?;
                Arc::new(mapi_cloudtasks::CloudTasksQueue::new(settings, credentials, clock.clone()).await?)
            }
        };
        let hosting: Arc<dyn Hosting> = match (uses.has(Section::Hosting), &config.hosting) {
            (true, HostingBackend::Local) => {
                let h = local_hosting(&config, &clock, &worker)?;
                local.hosting = Some(h.clone());
                Arc::new(h)
            }
            (true, HostingBackend::CloudRun(settings)) => {
                Arc::new(cloudrun_hosting((**settings).clone(), &clock).await?)
            }
            _ => Arc::new(Absent { port: "endpoints' host" }),
        };
        let executor: Arc<dyn Executor> = match (uses.has(Section::Executor), config.cloudrun.clone()) {
            (false, _) => Arc::new(Absent { port: "executor" }),
            (true, None) => {
                let e = local_executor(&config, &clock, worker)?;
                local.executor = Some(e.clone());
                Arc::new(e)
            }
            (true, Some(settings)) => Arc::new(cloudrun_executor(settings, &metrics, &clock).await?),
        };
        let ports = Ports { store, objects, bootstrap, queue, executor, hosting, signer };
        Ok(Platform::assemble(config, clock, ports, local, metrics))
    }

    fn assemble(
        config: Config,
        clock: Arc<dyn Clock>,
        ports: Ports,
        local: LocalParts,
        metrics: Metrics,
    ) -> Platform {
        let pepper = Pepper::new(config.secrets.token_pepper.clone());
        let sessions = match config.uses.has(Section::Sessions) {
            true => session_verifier(&config, clock.clone()),
            false => None,
        };
        let task_invoker = config.cloudtasks.as_ref().map(|ct| {
            mapi_oidc::ServiceAccountTokens::google(
                config.google_jwks_url.clone(),
                ct.token_audience(&config.public_url),
                ct.service_account.clone(),
                clock.clone(),
            )
        });
        let Ports { store, objects, bootstrap, queue, executor, hosting, signer } = ports;
        Platform {
            sessions,
            task_invoker,
            store,
            objects,
            bootstrap,
            queue,
            executor,
            hosting,
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(5))
                .timeout(Duration::from_secs(300))
                .build()
                .unwrap_or_default(),
            signer,
            clock,
            entropy: Arc::new(mapi_entropy::OsEntropy),
            refusals: mapi_identity::refusals::RefusalLog::new(&metrics),
            metrics,
            pepper,
            local,
            config,
            rollups: RollupsStart::default(),
        }
    }

    /// The minute usage rollups start (`mapi_schema::usage::RollupsSince`):
    /// recorded by the first process that writes a ledger entry, read once
    /// per process. Every ledger writer calls it before its commit, so no
    /// entry without its rollup is written after that minute; starting a
    /// process needs no store.
    pub async fn rollups_started(&self) -> Result<mapi_domain::Timestamp, mapi_store::StoreError> {
        let ensure = || mapi_schema::usage::RollupsSince::ensure(&*self.store, self.clock.now());
        self.rollups.0.get_or_try_init(ensure).await.copied()
    }

    /// Where `mapi dev` writes the CLI's credentials.
    pub fn credentials_path(&self) -> PathBuf {
        self.config.home.join("credentials.json")
    }
}

/// How to start the worker: `MAPI_WORKER_BIN` when set, else the
/// `mapi-worker` binary beside the running executable, else (for the `mapi`
/// CLI, which has a `worker` subcommand) the running executable itself,
/// else `mapi-worker` from `PATH`.
pub fn worker_command(configured: Option<&std::path::Path>, self_is_worker: bool) -> Command {
    if let Some(p) = configured {
        return Command { program: p.to_owned(), args: vec![] };
    }
    if let Ok(exe) = std::env::current_exe() {
        let sibling = exe.with_file_name("mapi-worker");
        if sibling.is_file() {
            return Command { program: sibling, args: vec![] };
        }
        if self_is_worker {
            return Command { program: exe, args: vec!["worker".to_owned()] };
        }
    }
    Command { program: PathBuf::from("mapi-worker"), args: vec![] }
}

/// The whole `main` of a function binary: the sections of the
/// configuration `service` uses, from the environment; the ports they
/// select; the function's router (and its
/// OpenAPI document at `/openapi.json`), served by the shared runtime.
pub async fn serve_function(
    info: mapi_runtime::ServiceInfo,
    service: Service,
    router: fn(AppState) -> axum::Router,
    openapi: fn() -> utoipa::openapi::OpenApi,
) -> std::process::ExitCode {
    let config = match Config::from_env_for(service.uses()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{}: configuration error: {e}", info.name);
            return std::process::ExitCode::from(2);
        }
    };
    let worker = worker_command(config.worker_bin.as_deref(), false);
    let platform = match Platform::configured(config, Arc::new(mapi_clock::SystemClock), worker).await {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{}: cannot start: {e}", info.name);
            return std::process::ExitCode::from(1);
        }
    };
    let metrics = platform.metrics.clone();
    let json_limit = platform.config.max_json_bytes;
    // The API description is built and encoded on its first request, once:
    // building it is a few milliseconds a start need not pay.
    let doc: Arc<std::sync::OnceLock<axum::body::Bytes>> = Arc::default();
    let described = move || {
        let doc = doc.clone();
        async move {
            let body = doc.get_or_init(|| serde_json::to_vec(&openapi()).unwrap_or_default().into()).clone();
            ([(axum::http::header::CONTENT_TYPE, "application/json")], body)
        }
    };
    // Every body is bounded: routes that take larger ones (uploads, job
    // submits) set their own limit, which the innermost layer keeps.
    let app = router(AppState(Arc::new(platform)))
        .route("/openapi.json", axum::routing::get(described))
        .layer(axum::extract::DefaultBodyLimit::max(json_limit));
    match mapi_runtime::run(info, metrics, app).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}: {e}", info.name);
            std::process::ExitCode::from(1)
        }
    }
}
