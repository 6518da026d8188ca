//! Helpers for the cross-crate suites in `tests/tests/`: where the built
//! binaries are, a platform started in-process on port 0 with a fresh
//! `MAPI_HOME`, and polling with a deadline (never a bare sleep).
//!
//! The fakes, each on 127.0.0.1 and written from Google's REST reference
//! rather than from the client crates' types: [`fake_cloudrun`] (the Cloud
//! Run Admin API v2: Jobs, executions and tasks run as `mapi-worker`
//! children with Cloud Run's environment, memory limits and timeouts, a log
//! sink, and faults on demand: 429 with `Retry-After`, lost answers, 503,
//! slow answers, OOM as exit 137 or signal 9, vanishing executions; what the
//! tasks print goes to its [`fake_cloudlogging`], Cloud Logging's
//! `entries.list` with a parsed filter, page tokens, 429, 403, 503 and lost
//! answers on demand),
//! [`fake_cloudrun_services`] (the Admin API v2 Services: revisions run as
//! real model-server children behind an IAM-enforcing proxy per service and
//! tag URL, rollouts that succeed or fail with Cloud Run's messages, and
//! 429s, 503s, lost answers, unpullable images and crashes on demand),
//! [`fake_cloudtasks`] (409s, seeded 429s, lost answers, doubled
//! deliveries), [`fake_kms`] (corrupted CRCs, another key version, an
//! unverified digest, a foreign signature), [`google`] (Google's key set and
//! ID tokens for Pub/Sub pushes), [`fake_gcs`] and [`gcs_front`]
//! (fake-gcs-server behind a front that verifies V4 URLs and POST policies)
//! and [`firestore_emulator`]. [`backend`] starts one platform on either
//! executor; [`scripted`] is an executor a suite drives by hand in virtual
//! time; [`chaos`] duplicates and overlaps queue deliveries.
//!
//! The suites (modules of one test binary, `tests/tests/suites.rs`; run one
//! with `cargo test -p mapi-tests --test suites <suite>::`):
//!
//! - Runs end to end: `e2e` (over HTTP, every case on both executors, the
//!   exact history asserted), `cloudrun_runs` (what only Cloud Run has:
//!   adoption after a lost answer, 429s, signal 9, vanished executions,
//!   lease renewal, checkpoint resume after an OOM kill), `cloudrun_load`
//!   (100 fits in virtual time), `delivery` (duplicate and forged
//!   deliveries), `crash` (SIGKILL of `mapi dev` loses nothing
//!   acknowledged), `ticks` (two overlapping ticks do nothing twice),
//!   `walkthrough` (the README's, through the `mapi` binary).
//! - Adapters: `executor_conformance` (local-process, real worker),
//!   `cloudrun` (the executor against FakeCloudRun), `cloudrun_logs` (its
//!   log pages from FakeCloudLogging: cursors, payloads, faults), `cloudtasks` (queue
//!   conformance and an item job on FakeCloudTasks), `signer_kms` (Signer
//!   conformance on FakeKms), `objects_gcs` (ObjectStore conformance on
//!   fake-gcs-server), `store_firestore` (Store conformance on the Firestore
//!   emulator, and the index file), `cloud_platform` (a fit from submit to
//!   `succeeded` on Firestore and Cloud Storage), `adc` (Application Default
//!   Credentials from a fake metadata server named by `GCE_METADATA_HOST`).
//! - Access: `audit_log` (the log as people read it: `items`, `ts`,
//!   `?limit=`, filters), `authz` (every cell of the permission matrix and the scope
//!   table over HTTP), `auth_attacks` (credential attacks), `push_auth`
//!   (push authentication and event attacks against a fake Google, 100 runs'
//!   events delivered 1 to 5 times in any order), `cross_tenant` (nothing
//!   enumerable across tenants), `admin_tour` (the administration
//!   walkthrough against `mapi dev`), `shared_tiers` (the gate and the
//!   executors admin), `governance` (policies, validations by a second
//!   person, deprecation, and the promotions they gate), `workflows` (a
//!   sweep validated by a second person and promoted, failed branches,
//!   resume, cancel, definitions refused by node and field).
//! - Money: `quotas` (racing submits, the tier table, `Retry-After` across
//!   day and month boundaries, the spend cap, retries re-admitted, an item
//!   job refused by each limit a run is), `ledger`
//!   (seeded sequences of attempts, retries, repeated finalizations and
//!   cancels: every attempt metered once), `model_versions` (one signed
//!   version per succeeded fit and none for other methods; integrity
//!   failures refused, audited and counted; `mapi models versions
//!   download` keeps only the pinned bytes).
//! - Item jobs: `jobs` (5,000 items through a chaos proxy duplicating 10 %
//!   and overlapping 2 % of deliveries, a fan-out dying halfway, fairness
//!   between tenants, cancel, retry-failed, the CLI).
//! - Tracking: `run_labels` (a run's name, note and tags: who may change
//!   them, the words of a refusal, the audit); `run_log` (metrics and
//!   params logged to a run: shown, bounded, scoped, audited); `run_retry` (an ended run
//!   retried as a new run of its spec and labels, keyed, scoped, audited);
//!   `run_retention` (the run housekeeper forgets the executions of runs
//!   past each tenant's run retention: their directories go, their logs
//!   answer 410, running runs and runs within it are left alone).
//! - Webhooks: `webhooks` (the README's receiver verifies a run's events,
//!   replays and a rotation; an unreachable receiver retried on the
//!   back-off; private targets refused; who may manage them).
//! - Residency: `residency` (runs placed only on an executor in a region
//!   the tenant's residency admits; refused at submit in words, failed at
//!   dispatch when stored under one the executor cannot serve).
//! - A tenant's end: `tenant_life` (an export's manifest of signed URLs
//!   holding the tenant's documents and objects and no other's; a deletion
//!   cancelled within its grace period, then purged by the tick's task in
//!   virtual time to a certificate, nothing of the tenant left but its
//!   tombstone and the kept, anonymized entries; a killed purge resumed).
//! - Datasets: `datasets` (a deletion refused while a run reads it, then
//!   record, object and counted storage gone once, audited).
//! - Documents: `docs` (the README's variable table, `docs/openapi.json` and
//!   `docs/permissions.md` are the code's; the route table in docs/routes.md is
//!   the routers and the queues' targets), `api` (the HTTP contract:
//!   problems, idempotent submits, the service routes), `methods` (the
//!   method registry over `GET /v1/methods` and `mapi methods`, whose
//!   examples run as printed), `contract` (Schemathesis against `mapi dev`
//!   as an API token, a tenant admin and an operator; a client generated
//!   from the document fits a model).
//! - Hostile clients: `hostile` (531 hostile inputs across every route
//!   family, each a problem with its code), `memory` (the worst bodies keep
//!   `mapi dev`'s peak resident set under a bound).
//! - Costs: `budgets` (documents read and written, commits, syncs and
//!   object files per submit and per item, counted by the adapters and
//!   held under stated budgets); and, in a test binary of its own
//!   (`--test alloc_budget`), the bytes a job holds per item while it runs
//!   and leaves behind, counted by the allocator.
//! - Determinism: `replay` (a seeded entropy gives the same ids and nonces).
//! - Deployment: `terraform` (every `.tf` parses; policy rules over every
//!   resource; contracts between the terraform and the code: settings,
//!   routes, queues, Job names, indexes, the entry's URL map),
//!   `provider_schema` (every argument the terraform sets is one the google
//!   provider documents), `deploy` (`deploy.sh --dry-run` and against
//!   stand-in tools; shellcheck, hadolint and checkov clean).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub mod backend;
pub mod chaos;
pub mod fake_cloudlogging;
pub mod fake_cloudrun;
pub mod fake_cloudrun_services;
pub mod fake_cloudtasks;
pub mod fake_gcs;
pub mod fake_kms;
pub mod fake_monitoring;
pub mod firestore_emulator;
pub mod gcs_front;
pub mod google;
pub mod google_sign_in;
pub mod held;
pub mod model_fixture;
pub mod oci_image;
pub mod python_tools;

/// Copies the files under `from` into `into`, recursively (what a reader's
/// checkout holds: `examples/`, `clients/python`).
///
/// # Panics
///
/// When a file cannot be read or written: a test setup that cannot go on.
pub fn copy_tree(from: &std::path::Path, into: &std::path::Path) {
    std::fs::create_dir_all(into).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let to = into.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &to);
        } else {
            std::fs::copy(entry.path(), &to).expect("copy");
        }
    }
}
pub mod scripted;

use mapi_embedded::DevPlatform;
pub use mapi_embedded::{Options, QueueWrap};
use mapi_executor::local::layout::Command;
use mapi_platform::Config;

/// A binary of this workspace, built by `cargo test --workspace` (the
/// packages that own them have integration tests, so cargo builds them).
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test> → target/<profile>/<name>
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{} is not built: run `cargo test --workspace` (or `cargo build --bins`)",
        path.display()
    );
    path
}

/// The worker command the local executor starts.
pub fn worker() -> Command {
    Command { program: binary("mapi-worker"), args: vec![] }
}

/// A configuration for a test platform in `home`, with `extra` settings.
pub fn config(home: &std::path::Path, extra: &[(&str, &str)]) -> Config {
    let mut vars: HashMap<String, String> = HashMap::new();
    vars.insert("MAPI_HOME".into(), home.to_string_lossy().into_owned());
    vars.insert("MAPI_SQLITE_SYNC".into(), "normal".into());
    vars.insert("MAPI_TICK_INTERVAL_S".into(), "1".into());
    vars.insert("MAPI_LOCAL_GRACE_S".into(), "2".into());
    vars.insert("MAPI_LOCAL_TIMEOUT_MARGIN_S".into(), "2".into());
    for (k, v) in extra {
        vars.insert((*k).into(), (*v).into());
    }
    Config::from_lookup(&|k| vars.get(k).cloned()).expect("test config")
}

/// A platform started in this process on 127.0.0.1:0.
#[derive(Debug)]
pub struct TestPlatform {
    pub platform: DevPlatform,
    pub http: reqwest::Client,
    pub _home: tempfile::TempDir,
}

impl TestPlatform {
    pub async fn start(extra: &[(&str, &str)]) -> TestPlatform {
        TestPlatform::start_with(extra, Options::default()).await
    }

    /// Starts with `options`: a virtual clock, or nothing in the background.
    pub async fn start_with(extra: &[(&str, &str)], options: Options) -> TestPlatform {
        // `MAPI_TEST_LOG=info,mapi_queue=debug cargo test …` shows the
        // platform's log lines (JSON, to stdout, captured per test).
        if let Ok(filter) = std::env::var("MAPI_TEST_LOG") {
            mapi_runtime::init_logging("mapi-test", None, &filter);
        }
        let home = tempfile::tempdir().expect("tempdir");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let platform = DevPlatform::start_with(config(home.path(), extra), listener, worker(), options)
            .await
            .expect("start");
        TestPlatform { platform, http: reqwest::Client::new(), _home: home }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.platform.url)
    }

    pub fn token(&self) -> &str {
        &self.platform.credentials.token
    }

    /// A run output through the `url` the run's view gives it (the platform's route, which counts
    /// the download as egress and redirects to the bytes), as the platform's API token.
    pub async fn output(&self, url: &str) -> reqwest::Response {
        self.http.get(url).bearer_auth(self.token()).send().await.expect("an output's download")
    }

    pub fn project_path(&self) -> String {
        let c = &self.platform.credentials;
        format!("/v1/tenants/{}/projects/{}", c.tenant, c.project)
    }

    /// Uploads a CSV; returns the dataset id.
    pub async fn upload(&self, csv: &str) -> String {
        self.upload_as(self.token(), &self.project_path(), csv).await
    }

    /// Uploads `csv` as a dataset of the project at `project_path`
    /// (`/v1/tenants/T/projects/P`) with `token`; returns its id.
    pub async fn upload_as(&self, token: &str, project_path: &str, csv: &str) -> String {
        self.upload_named(token, project_path, "test", csv).await
    }

    /// [`TestPlatform::upload_as`], under `name` (how a workflow node may name it).
    pub async fn upload_named(&self, token: &str, project_path: &str, name: &str, csv: &str) -> String {
        let resp = self
            .http
            .post(self.url(&format!("{project_path}/datasets?name={name}")))
            .bearer_auth(token)
            .header("content-type", "text/csv")
            .body(csv.to_owned())
            .send()
            .await
            .expect("upload");
        assert_eq!(resp.status(), 201, "upload failed: {:?}", resp.text().await);
        let v: serde_json::Value = resp.json().await.expect("json");
        v["id"].as_str().expect("dataset id").to_owned()
    }

    /// Submits a run; returns the run id.
    pub async fn submit(&self, body: serde_json::Value) -> String {
        let resp = self
            .http
            .post(self.url(&format!("{}/runs", self.project_path())))
            .bearer_auth(self.token())
            .json(&body)
            .send()
            .await
            .expect("submit");
        assert_eq!(resp.status(), 201, "submit failed: {:?}", resp.text().await);
        let v: serde_json::Value = resp.json().await.expect("json");
        v["id"].as_str().expect("run id").to_owned()
    }

    /// Signs `email` in through the development identity provider; the session token.
    /// As `operator`, a new tenant `id` of `tier` whose admin is
    /// `owner@{id}.test` (a dev account the platform must know), with a
    /// `default` project; returns the admin's session token.
    pub async fn create_tenant(&self, operator: &str, id: &str, tier: &str) -> String {
        let admin = format!("owner@{id}.test");
        let body =
            serde_json::json!({"id": id, "name": id, "tier": tier, "residency": "eu", "admin_email": admin});
        let (s, b) = self.call(operator, reqwest::Method::POST, "/v1/admin/tenants", Some(body)).await;
        assert_eq!(s, 201, "create tenant: {b}");
        let token = self.login(&admin).await;
        let project = serde_json::json!({"id": "default", "name": "D"});
        let path = format!("/v1/tenants/{id}/projects");
        let (s, b) = self.call(&token, reqwest::Method::POST, &path, Some(project)).await;
        assert_eq!(s, 201, "create project: {b}");
        token
    }

    /// Submits an item job as `token` to `tenant/default`; returns its id.
    /// A job starts `enqueuing`.
    pub async fn submit_job(&self, token: &str, tenant: &str, body: serde_json::Value) -> String {
        let path = format!("/v1/tenants/{tenant}/projects/default/jobs");
        let (status, v) = self.call(token, reqwest::Method::POST, &path, Some(body)).await;
        assert_eq!(status, 201, "submit: {v}");
        assert_eq!(v["state"], "enqueuing", "a job starts enqueuing: {v}");
        v["id"].as_str().expect("job id").to_owned()
    }

    /// Polls an item job until it is final (bounded by `limit`).
    pub async fn wait_job(&self, token: &str, id: &str, limit: Duration) -> serde_json::Value {
        let deadline = Instant::now() + limit;
        loop {
            let (status, v) = self.call(token, reqwest::Method::GET, &format!("/v1/jobs/{id}"), None).await;
            assert_eq!(status, 200, "{v}");
            if job_is_final(&v) {
                return v;
            }
            assert!(Instant::now() < deadline, "job {id} did not finish: {v:#}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A console session of `email` for ten minutes, as the sign-in makes one:
    /// the secret for the `mapi_console` cookie.
    pub async fn console_session(&self, email: &str) -> String {
        let state = &self.platform.state;
        let secret = mapi_identity::new_console_session().expect("secret");
        let now = state.clock.now();
        let session = mapi_schema::ConsoleSessionDoc {
            hash: state.pepper.hash(&secret),
            user: mapi_domain::UserId::parse(email).expect("user"),
            created_at: now,
            expires_at: now + Duration::from_secs(600),
        };
        mapi_schema::put(&*state.store, &session).await.expect("session");
        secret
    }

    pub async fn login(&self, email: &str) -> String {
        let resp = self
            .http
            .post(self.url("/dev/idp/login"))
            .json(&serde_json::json!({ "email": email }))
            .send()
            .await
            .expect("dev login");
        assert_eq!(resp.status(), 200, "dev login of {email}: {:?}", resp.text().await);
        let v: serde_json::Value = resp.json().await.expect("json");
        let token = v["id_token"].as_str().expect("id_token").to_owned();
        let (status, body) = self.call(&token, reqwest::Method::POST, "/v1/sessions", None).await;
        assert_eq!(status, 200, "sign-in of {email}: {body}");
        token
    }

    /// Calls a route as `token`; the status and the JSON body (`null` when none).
    pub async fn call(
        &self,
        token: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        let mut req = self.http.request(method, self.url(path)).bearer_auth(token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(serde_json::Value::Null))
    }

    /// Cancels run `id` as `token`; the status and the body.
    pub async fn cancel(&self, token: &str, id: &str) -> (u16, serde_json::Value) {
        self.call(token, reqwest::Method::POST, &format!("/v1/runs/{id}/cancel"), None).await
    }

    pub async fn run(&self, id: &str) -> serde_json::Value {
        let resp = self
            .http
            .get(self.url(&format!("/v1/runs/{id}")))
            .bearer_auth(self.token())
            .send()
            .await
            .expect("get");
        assert_eq!(resp.status(), 200);
        resp.json().await.expect("json")
    }

    /// Polls the run until `pred` holds (bounded by `limit`).
    pub async fn wait_run(
        &self,
        id: &str,
        limit: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + limit;
        loop {
            let r = self.run(id).await;
            if pred(&r) {
                return r;
            }
            assert!(Instant::now() < deadline, "run {id} did not reach the expected state: {r:#}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Polls endpoint `alias` of the project until it is no longer deploying
    /// (bounded: 120 s); its view.
    pub async fn wait_endpoint(&self, alias: &str) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        let path = format!("{}/endpoints/{alias}", self.project_path());
        loop {
            let (s, e) = self.call(self.token(), reqwest::Method::GET, &path, None).await;
            assert_eq!(s, 200, "{e}");
            if e["status"] != "deploying" {
                return e;
            }
            assert!(Instant::now() < deadline, "endpoint {alias} did not get ready: {e:#}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Polls until the run is in a final state.
    pub async fn wait_final(&self, id: &str) -> serde_json::Value {
        self.wait_run(id, Duration::from_secs(90), |r| {
            matches!(r["state"].as_str(), Some("succeeded" | "failed" | "partial" | "cancelled"))
        })
        .await
    }
}

/// `mapi dev` as a child process on `port`, in `home`.
#[derive(Debug)]
pub struct DevProcess {
    pub child: std::process::Child,
    pub url: String,
}

impl DevProcess {
    pub fn start(home: &std::path::Path, port: u16, extra: &[(&str, &str)]) -> DevProcess {
        // A restart right after a SIGKILL may find the port still held for a
        // moment (a child caught between fork and exec keeps a copy of every
        // descriptor); that is not what any suite tests, so a refused bind is
        // tried again for a few seconds before it fails the test.
        for _ in 0..20 {
            match Self::try_start(home, port, extra) {
                Ok(dev) => return dev,
                Err(tail) if tail.contains("Address already in use") => {
                    std::thread::sleep(Duration::from_millis(250));
                }
                Err(tail) => panic!("mapi dev on port {port} did not start; the end of its log:\n{tail}"),
            }
        }
        panic!("mapi dev could not listen on port {port} for 5 s; its holders:\n{}", port_holders(port))
    }

    fn try_start(home: &std::path::Path, port: u16, extra: &[(&str, &str)]) -> Result<DevProcess, String> {
        use std::io::BufRead;
        let mut cmd = std::process::Command::new(binary("mapi"));
        // The CLI's configuration of this platform stays in its home, not the user's.
        cmd.arg("dev")
            .env("MAPI_HOME", home)
            .env("MAPI_CONFIG_DIR", Self::config_dir(home))
            .env("PORT", port.to_string())
            .env("MAPI_WORKER_BIN", binary("mapi-worker"))
            .env("MAPI_TICK_INTERVAL_S", "1")
            .env("MAPI_LOCAL_GRACE_S", "2")
            .env("MAPI_DISPATCH_LEASE_S", "5")
            .env("MAPI_LOG", "warn")
            .env_remove("MAPI_URL")
            .env_remove("MAPI_TOKEN")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(Self::log_file(home));
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start mapi dev");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        std::io::BufReader::new(stdout).read_line(&mut line).expect("mapi dev prints its URL");
        let url = line.trim().to_owned();
        if url.starts_with("http") {
            return Ok(DevProcess { child, url });
        }
        let _ = child.wait();
        let log = std::fs::read_to_string(Self::log_path(home)).unwrap_or_default();
        Err(log.chars().rev().take(4000).collect::<Vec<_>>().into_iter().rev().collect())
    }

    /// Where the CLI keeps its state for a `mapi dev` started in `home`: pass it as
    /// `MAPI_CONFIG_DIR` to the CLI.
    pub fn config_dir(home: &std::path::Path) -> std::path::PathBuf {
        home.join("cli-config")
    }

    /// What `mapi dev` started in `home` logs (warnings and errors), kept
    /// across its restarts: `mapi-dev.log` beside its state.
    pub fn log_path(home: &std::path::Path) -> std::path::PathBuf {
        home.join("mapi-dev.log")
    }

    fn log_file(home: &std::path::Path) -> std::process::Stdio {
        match std::fs::OpenOptions::new().create(true).append(true).open(Self::log_path(home)) {
            Ok(f) => f.into(),
            Err(_) => std::process::Stdio::null(),
        }
    }

    /// Stops it with SIGTERM and waits.
    pub fn stop(mut self) {
        let _ = std::process::Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}

/// A test that panics still ends its platform: a leaked `mapi dev` would
/// keep its port, its home and every file descriptor it inherited (a build
/// lock among them) until the machine restarts.
impl Drop for DevProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The sockets on `port` and the processes holding them, as `ss` tells.
fn port_holders(port: u16) -> String {
    std::process::Command::new("ss")
        .args(["-tanp", &format!("sport = :{port}")])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_else(|e| format!("(ss did not run: {e})"))
}

/// A port free now, for a child process that must keep it across restarts.
///
/// Taken below the kernel's ephemeral range (32768–60999 on Linux): every
/// listener bound to port 0 (a test platform, a local model server) gets one
/// from that range, so none can take this port while its owner restarts.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u16 = 20_000;
    const SPAN: u16 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Processes running suites at once start apart; within one, ports are handed out in turn.
    let start = std::process::id();
    for _ in 0..SPAN {
        let offset = start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % u32::from(SPAN);
        let port = LOW + u16::try_from(offset).unwrap_or(0);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {LOW}..{}", LOW + SPAN)
}

/// The ids of a page of the runs list, in its order.
pub fn run_ids(page: &serde_json::Value) -> Vec<String> {
    page["runs"].as_array().expect("runs").iter().map(|r| r["id"].as_str().expect("id").to_owned()).collect()
}

/// The `(from, to, reason)` of every history entry.
pub fn transitions(run: &serde_json::Value) -> Vec<(String, String, String)> {
    run["history"]
        .as_array()
        .expect("history")
        .iter()
        .map(|t| {
            (
                t["from"].as_str().unwrap_or("·").to_owned(),
                t["to"].as_str().unwrap_or_default().to_owned(),
                t["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// How every run that reaches an execution begins.
pub const START: [(&str, &str, &str); 3] = [
    ("·", "queued", "submitted"),
    ("queued", "dispatching", "intent_written"),
    ("dispatching", "running", "execution_created"),
];

/// [`START`], then `rest`.
pub fn with_start(rest: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    let mut all = START.to_vec();
    all.extend_from_slice(rest);
    path(&all)
}

/// [`START`], back to the queue for `reason`, started again, then `end`:
/// the history of a run retried once.
pub fn retried_once(reason: &str, end: (&str, &str, &str)) -> Vec<(String, String, String)> {
    let mut all = START.to_vec();
    all.push(("running", "queued", reason));
    all.extend_from_slice(&START[1..]);
    all.push(end);
    path(&all)
}

/// Whether a job view is in a final state.
pub fn job_is_final(v: &serde_json::Value) -> bool {
    matches!(v["state"].as_str(), Some("succeeded" | "completed_with_errors" | "failed"))
}

/// Writes the expected history compactly: `[("queued","dispatching","intent_written"), …]`.
pub fn path(steps: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    steps.iter().map(|(a, b, c)| ((*a).to_owned(), (*b).to_owned(), (*c).to_owned())).collect()
}
