//! Every variable the platform itself reads, declared once: name, default
//! and meaning. [`Config`](super::Config) parses through these, and the
//! README's table is generated from [`VARIABLES`] with the adapters' own.

use mapi_settings::Var;

// The base every process reads.
pub const PROFILE: Var = Var::new(
    "MAPI_PROFILE",
    "dev",
    "`dev` (one machine; secrets generated in $MAPI_HOME) or `multi-tenant` (secrets required)",
);
pub const HOME: Var =
    Var::new("MAPI_HOME", "./.mapi", "Where the embedded store, queue, objects and executions live");
pub const PUBLIC_URL: Var = Var::derived(
    "MAPI_PUBLIC_URL",
    "http://127.0.0.1:$PORT",
    "Where executions and the CLI reach the platform",
);
pub const INTERNAL_TOKEN: Var = Var::derived(
    "MAPI_INTERNAL_TOKEN",
    "generated (dev)",
    "Bearer token of internal callers: queue, scheduler, and in `dev` the local event push",
);
pub const TOKEN_PEPPER: Var = Var::derived(
    "MAPI_TOKEN_PEPPER",
    "generated (dev)",
    "Hex key of the HMAC under which API tokens are stored",
);
pub const URL_SIGNING_KEY: Var = Var::derived(
    "MAPI_URL_SIGNING_KEY",
    "generated (dev)",
    "Hex key of the local object store's signed URLs",
);
pub const TENANT_DELETION_GRACE_S: Var = Var::new(
    "MAPI_TENANT_DELETION_GRACE_S",
    "604800",
    "How long a tenant's deletion may be cancelled by its admins before the purge deletes its data",
);
pub const STORE: Var =
    Var::new("MAPI_STORE", "sqlite", "Where state lives: `sqlite` (embedded, in MAPI_HOME) or `firestore`");
pub const SQLITE_SYNC: Var = Var::new(
    "MAPI_SQLITE_SYNC",
    "full",
    "SQLite `synchronous`: `full` survives power loss, `normal` only process crashes",
);
pub const GOOGLE_JWKS_URL: Var = Var::new(
    "MAPI_GOOGLE_JWKS_URL",
    mapi_oidc::GOOGLE_JWKS_URL,
    "The source of the OIDC signing keys of push tokens and of Cloud Tasks deliveries",
);

// The tenant API.
pub const MAX_DATASET_BYTES: Var = Var::new(
    "MAPI_MAX_DATASET_BYTES",
    "33554432",
    "Largest dataset upload (Cloud Run refuses HTTP/1 requests over 32 MiB anyway)",
);
pub const DATASET_MAX_COLUMNS: Var = Var::new(
    "MAPI_DATASET_MAX_COLUMNS",
    "1000",
    "Most columns a dataset may have (at most 2000: a dataset's record names each column)",
);
pub const DATASET_MAX_ROWS: Var =
    Var::new("MAPI_DATASET_MAX_ROWS", "10000000", "Most data rows a dataset may have");
pub const DATASET_MAX_CELL_BYTES: Var =
    Var::new("MAPI_DATASET_MAX_CELL_BYTES", "65536", "Largest cell of a dataset, in bytes");
pub const MAX_JSON_BYTES: Var = Var::new("MAPI_MAX_JSON_BYTES", "1048576", "Largest JSON request body");
pub const IDEMPOTENCY_TTL_S: Var =
    Var::new("MAPI_IDEMPOTENCY_TTL_S", "86400", "How long an Idempotency-Key returns the same run");
pub const PLATFORM_CONCURRENT_RUNS: Var = Var::new(
    "MAPI_PLATFORM_CONCURRENT_RUNS",
    "700",
    "Platform-wide limit of concurrent runs (protects the cloud project's quotas)",
);

// A run's lifecycle.
pub const MAX_INFRA_RETRIES: Var = Var::new(
    "MAPI_MAX_INFRA_RETRIES",
    "2",
    "Attempts retried after a lost execution or an infrastructure crash",
);
pub const EVENT_GRACE_S: Var = Var::new(
    "MAPI_EVENT_GRACE_S",
    "120",
    "How long after an execution succeeded its complete event may arrive",
);
pub const DISPATCH_LEASE_S: Var = Var::new(
    "MAPI_DISPATCH_LEASE_S",
    "60",
    "How long a dispatcher holds an attempt before the reconciler adopts it",
);
pub const PLUGIN_LOG_LIMIT_BYTES: Var = Var::new(
    "MAPI_PLUGIN_LOG_LIMIT_BYTES",
    "4194304",
    "Bytes of what a plugin prints kept in its task's log; the rest is counted and dropped",
);
pub const STALL_AFTER_S: Var =
    Var::new("MAPI_STALL_AFTER_S", "300", "A running attempt without events for this long is marked stalled");
pub const TICK_MAX_RUNS: Var = Var::new(
    "MAPI_TICK_MAX_RUNS",
    "20000",
    "Active runs one reconcile tick looks at; the next tick goes on from where it stopped",
);
pub const ENDPOINTS_STEP_S: Var = Var::derived(
    "MAPI_ENDPOINTS_STEP_S",
    "60 (dev: 3)",
    "Promotion gate: the least time each traffic step (5, 25, 50 %) lasts",
);
pub const ENDPOINTS_STEP_REQUESTS: Var = Var::derived(
    "MAPI_ENDPOINTS_STEP_REQUESTS",
    "50 (dev: 0)",
    "Promotion gate: the fewest scores the new revision answers in each step",
);
pub const ENDPOINTS_P99_SLACK_MS: Var = Var::new(
    "MAPI_ENDPOINTS_P99_SLACK_MS",
    "10",
    "Promotion gate: how far above the stable revision's p99 the new one's may be, whatever the ratio",
);
pub const TICK_INTERVAL_S: Var =
    Var::new("MAPI_TICK_INTERVAL_S", "2", "How often `mapi dev` runs the reconcile tick");
pub const TICK_FOLLOW_UP_S: Var = Var::new(
    "MAPI_TICK_FOLLOW_UP_S",
    "3",
    "While work is active (runs, open item jobs, endpoints, new webhook messages), each reconcile tick asks for the next this many seconds later through the `tick` queue, and a dispatch, a new item job or an endpoint change asks for one, so progress does not wait for Cloud Scheduler's minute (0: the scheduler's ticks only)",
);
pub const AUDIT_RETENTION_DAYS: Var = Var::new(
    "MAPI_AUDIT_RETENTION_DAYS",
    "400",
    "Days an audit entry is kept before the housekeeper deletes it (at least 1; the default keeps more than a year), unless its tenant's quota policy sets `audit_retention_days`",
);
pub const DATASET_RETENTION_DAYS: Var = Var::new(
    "MAPI_DATASET_RETENTION_DAYS",
    "0",
    "Days after its upload a dataset no run reads is deleted by the housekeeper (its object, record and storage), unless its tenant's quota policy sets `dataset_retention_days`; 0 keeps datasets until they are deleted",
);
pub const MODEL_VERSION_RETENTION_DAYS: Var = Var::new(
    "MAPI_MODEL_VERSION_RETENTION_DAYS",
    "0",
    "Days after its creation a model version that serves no endpoint keeps its bytes: then the housekeeper deletes its bundle and the outputs it seals, and the version, kept as a record, can no longer be served, unless its tenant's quota policy sets `model_version_retention_days`; 0 keeps them",
);
pub const RUN_RECORD_RETENTION_DAYS: Var = Var::new(
    "MAPI_RUN_RECORD_RETENTION_DAYS",
    "0",
    "Days after the run housekeeper forgot a run's executions (`MAPI_RUN_RETENTION_DAYS` after its end) that the run is kept: then it goes with its documents and objects (its ledger entries stay), unless its model version serves an endpoint or its tenant's quota policy sets `run_record_retention_days`; 0 keeps runs",
);
pub const DELIVERY_RETENTION_DAYS: Var = Var::new(
    "MAPI_DELIVERY_RETENTION_DAYS",
    "30",
    "Days a webhook message and its delivery log are kept before the housekeeper deletes them (at least 1; a message is retried for a day at most), unless its tenant's quota policy sets `delivery_retention_days`",
);
pub const RUN_RETENTION_DAYS: Var = Var::new(
    "MAPI_RUN_RETENTION_DAYS",
    "30",
    "Days after a run ended before the run housekeeper removes what its executions left (their logs included; the run, its ledger entries and outputs stay), unless the tenant's quota policy sets `run_retention_days`",
);

// Sessions.
pub const OPERATOR_EMAILS: Var = Var::derived(
    "MAPI_OPERATOR_EMAILS",
    "admin@dev.local (dev); none",
    "Comma-separated verified e-mails with operator powers, through a session only",
);
pub const OIDC_ISSUER: Var = Var::derived(
    "MAPI_OIDC_ISSUER",
    "the dev identity provider (dev); none",
    "Issuer of session ID tokens; without one, only API tokens authenticate",
);
pub const OIDC_AUDIENCE: Var =
    Var::new("MAPI_OIDC_AUDIENCE", "mapi", "The audience session ID tokens must carry");
pub const OIDC_CLI_AUDIENCES: Var = Var::new(
    "MAPI_OIDC_CLI_AUDIENCES",
    "",
    "Further audiences whose ID tokens open sessions, comma-separated: with Google, the CLI's desktop client id first (`mapi login` signs in with it) and gcloud's (`mapi login --id-token \"$(gcloud auth print-identity-token)\"`)",
);
pub const OIDC_CLI_CLIENT_SECRET: Var = Var::derived(
    "MAPI_OIDC_CLI_CLIENT_SECRET",
    "none (a public client)",
    "The CLI's client secret at the issuer's token endpoint, if the issuer gave it one (Google does to a Desktop client, and does not treat it as a secret)",
);
pub const OIDC_JWKS_URL: Var =
    Var::derived("MAPI_OIDC_JWKS_URL", "$MAPI_OIDC_ISSUER/jwks.json", "Where the issuer's signing keys are");
pub const OIDC_DISCOVERY_URL: Var = Var::derived(
    "MAPI_OIDC_DISCOVERY_URL",
    "$MAPI_OIDC_ISSUER/.well-known/openid-configuration",
    "Where the issuer's discovery document is (the console's sign-in reads its endpoints there); set only to reach a stand-in of the issuer",
);
pub const SESSION_MAX_LIFETIME_S: Var = Var::new(
    "MAPI_SESSION_MAX_LIFETIME_S",
    "86400",
    "The longest a session ID token may live (`exp - iat`); longer ones, and ones without `iat`, are refused",
);
pub const OIDC_CLIENT_SECRET: Var = Var::derived(
    "MAPI_OIDC_CLIENT_SECRET",
    "none (a public client)",
    "The console's client secret at the issuer's token endpoint, if the issuer gave it one (the client id is MAPI_OIDC_AUDIENCE)",
);
pub const CONSOLE_SESSION_S: Var = Var::new(
    "MAPI_CONSOLE_SESSION_S",
    "3600",
    "How long a web console session lasts after sign-in; signing out ends it at once",
);
pub const DEV_ACCOUNTS: Var = Var::new(
    "MAPI_DEV_ACCOUNTS",
    "admin@dev.local,analyst@dev.local,viewer@dev.local,dev@dev.local",
    "Accounts of the development identity provider (dev profile only)",
);

// The executor.
pub const EXECUTOR: Var = Var::new(
    "MAPI_EXECUTOR",
    "local-process",
    "Where attempts run: `local-process` (no sandbox: refused under `MAPI_PROFILE=multi-tenant`), `gvisor` (each task in a gVisor sandbox on this machine, as root) or `cloudrun-jobs`",
);
pub const GVISOR_RUNSC: Var = Var::new(
    "MAPI_GVISOR_RUNSC",
    "runsc",
    "The gvisor executor's `runsc` program: a path, or a name looked up on `PATH`",
);
pub const PYTHON: Var = Var::new(
    "MAPI_PYTHON",
    "/usr/bin/python3",
    "Local executors: the Python that Python methods and plugins run on (with Debian's numpy, pandas, scikit-learn, scipy, statsmodels, matplotlib)",
);
pub const WORKER_BIN: Var = Var::derived(
    "MAPI_WORKER_BIN",
    "beside the running binary",
    "The mapi-worker executable the local executor starts",
);
pub const LOCAL_TIMEOUT_MARGIN_S: Var =
    Var::new("MAPI_LOCAL_TIMEOUT_MARGIN_S", "5", "Local executor: the backstop after a run's timeout");
pub const LOCAL_GRACE_S: Var = Var::new("MAPI_LOCAL_GRACE_S", "5", "Local executor: SIGTERM to SIGKILL");
pub const LOCAL_GPUS: Var = Var::derived(
    "MAPI_LOCAL_GPUS",
    "the GPUs nvidia-smi lists that MAPI_PYTHON's PyTorch can use",
    "Local executor: GPUs a GPU-class task gets (0: GPU-class runs use the CPU, warned GPU_UNAVAILABLE)",
);
pub const WEBHOOKS_ALLOW_LOOPBACK: Var = Var::new(
    "MAPI_WEBHOOKS_ALLOW_LOOPBACK",
    "false",
    "Webhooks may be `http` URLs on this machine's loopback addresses, for local testing (only with `MAPI_PROFILE=dev`); otherwise only `https` URLs of public addresses",
);
pub const WEBHOOK_RECEIVER_PER_SECOND: Var = Var::new(
    "MAPI_WEBHOOK_RECEIVER_PER_SECOND",
    "10",
    "The most first attempts of webhook messages a second one receiver (one webhook's URL) is sent; a burst waits its turn, and retries keep its spacing",
);
pub const LOCAL_REGIONS: Var = Var::new(
    "MAPI_LOCAL_REGIONS",
    "europe-west1,us-central1,asia-northeast1",
    "Local executor: the regions it stands in for (comma-separated); a tenant's runs go only to an executor with a region its residency admits",
);
pub const ENDPOINTS_CHARGE_S: Var = Var::new(
    "MAPI_ENDPOINTS_CHARGE_S",
    "60",
    "Instance-billed (L4) endpoints: their idle instance time is charged in windows of at least this long, by the reconcile tick",
);
pub const ENDPOINTS_IDLE_S: Var = Var::new(
    "MAPI_ENDPOINTS_IDLE_S",
    "900",
    "Local endpoints: a model server of an endpoint with `min_instances` 0 stops after this idle time",
);
pub const HOSTING: Var = Var::derived(
    "MAPI_HOSTING",
    "`local` with the local-process executor, else `none`",
    "Where endpoints' model servers run: `local` (processes on this machine), `cloud-run` (Cloud Run services) or `none`",
);
pub const LOCAL_MEMORY_MIB: Var = Var::derived(
    "MAPI_LOCAL_MEMORY_MIB",
    "the class's memory",
    "Local executor: memory limits per class, e.g. `S=512,M=1024`",
);
pub const EXECUTOR_EVIDENCE_MAX_AGE_S: Var = Var::new(
    "MAPI_EXECUTOR_EVIDENCE_MAX_AGE_S",
    "259200",
    "Age limit of the conformance and security reports that open shared tiers on an executor",
);

// The queue and objects.
pub const QUEUE: Var =
    Var::new("MAPI_QUEUE", "local", "The task queue: `local` (SQLite, embedded) or `cloudtasks`");
pub const OBJECTS: Var =
    Var::new("MAPI_OBJECTS", "local", "Where objects live: `local` (files in MAPI_HOME) or `gcs`");
pub const GCS_BOOTSTRAP_BUCKET: Var = Var::derived(
    "MAPI_GCS_BOOTSTRAP_BUCKET",
    "MAPI_GCS_BUCKET with `-bootstrap`",
    "gcs: the bucket of attempt bootstraps (one object per task, taken once)",
);

// Pub/Sub pushes.
pub const PUBSUB_PUSH_AUDIENCE: Var = Var::derived(
    "MAPI_PUBSUB_PUSH_AUDIENCE",
    "none",
    "The audience of Pub/Sub push tokens (set with MAPI_PUBSUB_PUSH_SERVICE_ACCOUNT); without the two, only `dev` accepts pushes, with MAPI_INTERNAL_TOKEN",
);
pub const PUBSUB_PUSH_SERVICE_ACCOUNT: Var = Var::derived(
    "MAPI_PUBSUB_PUSH_SERVICE_ACCOUNT",
    "none",
    "The verified e-mail of Pub/Sub push tokens: the push subscription's service account (set with MAPI_PUBSUB_PUSH_AUDIENCE)",
);
pub const PUBSUB_PUSH_SUBSCRIPTIONS: Var = Var::derived(
    "MAPI_PUBSUB_PUSH_SUBSCRIPTIONS",
    "any",
    "Accepted push subscriptions (comma-separated `projects/P/subscriptions/S`)",
);

// The bundle signer.
pub const SIGNER: Var = Var::new(
    "MAPI_SIGNER",
    "local",
    "What signs model-version bundles: `local` (a PEM key file) or `kms` (Cloud KMS)",
);
pub const SIGNING_KEY_FILE: Var = Var::derived(
    "MAPI_SIGNING_KEY_FILE",
    "$MAPI_HOME/bundle-signing-key.pem",
    "local signer: the PKCS#8 P-256 PEM key, made on first use",
);
pub const SIGNING_TRUSTED_KEY_FILES: Var = Var::derived(
    "MAPI_SIGNING_TRUSTED_KEY_FILES",
    "none",
    "local signer: `PUBLIC KEY` PEM files of earlier keys whose signatures still verify (comma-separated)",
);

// Item jobs.
pub const JOB_MAX_ITEMS: Var =
    Var::new("MAPI_JOB_MAX_ITEMS", "100000", "Platform cap on items per job (tiers may allow fewer)");
pub const JOB_MAX_BODY_BYTES: Var = Var::new(
    "MAPI_JOB_MAX_BODY_BYTES",
    "33554432",
    "Largest body of a job submit (Cloud Run refuses HTTP/1 requests over 32 MiB anyway)",
);
pub const JOB_MAX_ITEM_BYTES: Var =
    Var::new("MAPI_JOB_MAX_ITEM_BYTES", "65536", "Largest single item of a job, as JSON");
pub const JOB_FANOUT_BATCH: Var =
    Var::new("MAPI_JOB_FANOUT_BATCH", "100", "Items one fan-out step enqueues at most (1 to 1000)");
pub const JOB_TENANT_WINDOW: Var = Var::new(
    "MAPI_JOB_TENANT_WINDOW",
    "200",
    "Platform cap on a tenant's items in flight (enqueued, not finished); keeps tenants fair",
);
pub const JOB_FANOUT_WAIT_MS: Var = Var::new(
    "MAPI_JOB_FANOUT_WAIT_MS",
    "200",
    "How long a fan-out step waits when its tenant's window is full",
);
pub const JOB_HOLD_WAIT_S: Var = Var::new(
    "MAPI_JOB_HOLD_WAIT_S",
    "30",
    "How long a fan-out step held by the platform's spend cap waits before it looks again",
);
pub const JOB_ITEM_MAX_ATTEMPTS: Var =
    Var::new("MAPI_JOB_ITEM_MAX_ATTEMPTS", "3", "Attempts of an item before its error is written");
pub const JOB_ITEM_TIMEOUT_S: Var = Var::new(
    "MAPI_JOB_ITEM_TIMEOUT_S",
    "20",
    "Time limit of one item attempt (below the item queue's 30 s dispatch deadline)",
);
pub const JOB_RETENTION_DAYS: Var = Var::new(
    "MAPI_JOB_RETENTION_DAYS",
    "30",
    "Job objects and documents older than this are deleted by the housekeeper, unless the tenant's quota policy sets `job_retention_days`",
);

/// Every variable of the platform itself, in the README's order (`PORT`,
/// `MAPI_LOG` and `MAPI_DRAIN_TIMEOUT_S` are the runtime's).
pub const VARIABLES: &[Var] = &[
    PROFILE,
    HOME,
    PUBLIC_URL,
    INTERNAL_TOKEN,
    TOKEN_PEPPER,
    URL_SIGNING_KEY,
    TENANT_DELETION_GRACE_S,
    SQLITE_SYNC,
    MAX_DATASET_BYTES,
    DATASET_MAX_COLUMNS,
    DATASET_MAX_ROWS,
    DATASET_MAX_CELL_BYTES,
    MAX_JSON_BYTES,
    MAX_INFRA_RETRIES,
    EVENT_GRACE_S,
    DISPATCH_LEASE_S,
    PLUGIN_LOG_LIMIT_BYTES,
    IDEMPOTENCY_TTL_S,
    STALL_AFTER_S,
    TICK_INTERVAL_S,
    TICK_FOLLOW_UP_S,
    RUN_RETENTION_DAYS,
    AUDIT_RETENTION_DAYS,
    DATASET_RETENTION_DAYS,
    MODEL_VERSION_RETENTION_DAYS,
    RUN_RECORD_RETENTION_DAYS,
    DELIVERY_RETENTION_DAYS,
    ENDPOINTS_STEP_S,
    ENDPOINTS_STEP_REQUESTS,
    ENDPOINTS_P99_SLACK_MS,
    ENDPOINTS_CHARGE_S,
    TICK_MAX_RUNS,
    WORKER_BIN,
    LOCAL_TIMEOUT_MARGIN_S,
    LOCAL_GRACE_S,
    LOCAL_GPUS,
    LOCAL_REGIONS,
    GVISOR_RUNSC,
    PYTHON,
    WEBHOOKS_ALLOW_LOOPBACK,
    WEBHOOK_RECEIVER_PER_SECOND,
    ENDPOINTS_IDLE_S,
    HOSTING,
    LOCAL_MEMORY_MIB,
    OPERATOR_EMAILS,
    OIDC_ISSUER,
    OIDC_AUDIENCE,
    OIDC_CLI_AUDIENCES,
    OIDC_CLI_CLIENT_SECRET,
    OIDC_JWKS_URL,
    OIDC_DISCOVERY_URL,
    SESSION_MAX_LIFETIME_S,
    OIDC_CLIENT_SECRET,
    CONSOLE_SESSION_S,
    DEV_ACCOUNTS,
    PLATFORM_CONCURRENT_RUNS,
    EXECUTOR,
    QUEUE,
    STORE,
    OBJECTS,
    GCS_BOOTSTRAP_BUCKET,
    EXECUTOR_EVIDENCE_MAX_AGE_S,
    PUBSUB_PUSH_AUDIENCE,
    PUBSUB_PUSH_SERVICE_ACCOUNT,
    PUBSUB_PUSH_SUBSCRIPTIONS,
    GOOGLE_JWKS_URL,
    SIGNER,
    SIGNING_KEY_FILE,
    SIGNING_TRUSTED_KEY_FILES,
    JOB_MAX_ITEMS,
    JOB_MAX_BODY_BYTES,
    JOB_MAX_ITEM_BYTES,
    JOB_FANOUT_BATCH,
    JOB_TENANT_WINDOW,
    JOB_FANOUT_WAIT_MS,
    JOB_HOLD_WAIT_S,
    JOB_ITEM_MAX_ATTEMPTS,
    JOB_ITEM_TIMEOUT_S,
    JOB_RETENTION_DAYS,
];
