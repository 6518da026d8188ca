//! The Executor conformance suite against the local-process adapter, with
//! the real `mapi-worker` and bootstrap objects served over HTTP the way the
//! platform serves them, and its log forwarder delivering the events to an
//! endpoint that takes them (as the platform's does), so executions can be
//! forgotten.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use mapi_clock::{Clock, SystemClock};
use mapi_cloudrun::{CloudRunJobsExecutor, Credentials, Settings};
use mapi_domain::Timestamp;
use mapi_executor::conformance::ports::PortsHarness;
use mapi_executor::conformance::{Behaviour, Harness, Stored, Throttling};
use mapi_executor::local::forward::LogForwarder;
use mapi_executor::local::{LocalConfig, LocalProcessExecutor};
use mapi_executor::security::suite::Targets;
use mapi_executor::{AttemptSubmit, Executor};
use mapi_objects::ObjectStore;
use mapi_objects::fs::FsObjectStore;
use mapi_objects::signed::{Access, UrlSigner, router};
use mapi_tests::fake_cloudrun::{FakeCloudRun, Fault};

/// The harness on object stores served as the platform serves them, with the executor under
/// test and the log forwarder of its executions.
struct Local {
    ports: PortsHarness,
    executor_static_env: BTreeMap<String, String>,
    dir: tempfile::TempDir,
}

const S_MIB: u64 = 64;

/// Where the harness's event endpoint listens.
const EVENTS: &str = "/internal/events";

async fn local() -> Local {
    on(None).await
}

/// runsc, from Debian's `runsc` package: a machine without it fails the gvisor cases, never
/// skips them (`.ci/run` installs it).
fn runsc() -> std::path::PathBuf {
    mapi_executor::gvisor::find_program("runsc")
        .expect("runsc is not installed: `apt-get install runsc` (.ci/run installs it)")
}

/// The gvisor executor: the local host running each task in a gVisor sandbox.
async fn gvisor() -> Local {
    on(Some(runsc())).await
}

async fn on(runsc: Option<std::path::PathBuf>) -> Local {
    let dir = tempfile::tempdir().expect("tempdir");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let signer = UrlSigner::new(b"conformance-key".to_vec(), &base);
    let data: Arc<dyn ObjectStore> = Arc::new(
        FsObjectStore::open(&dir.path().join("objects"), "data", signer.clone(), clock.clone())
            .expect("data"),
    );
    let boot: Arc<dyn ObjectStore> = Arc::new(
        FsObjectStore::open(&dir.path().join("objects"), "bootstrap", signer.clone(), clock.clone())
            .expect("boot"),
    );
    let app = router(
        vec![(data.clone(), Access::Signed), (boot.clone(), Access::SecretNames)],
        signer,
        clock.clone(),
        1 << 20,
    )
    .route(EVENTS, axum::routing::post(|| async { axum::http::StatusCode::NO_CONTENT }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let forwarder = LogForwarder::new(
        &dir.path().join("executions"),
        reqwest::Client::new(),
        format!("{base}{EVENTS}"),
        "conformance".to_owned(),
        clock.clone(),
    );
    tokio::spawn(forwarder.run(std::future::pending()));
    let static_env =
        BTreeMap::from([("MAPI_BOOTSTRAP_URL".to_owned(), format!("{base}/o/bootstrap/{{nonce}}"))]);
    let executor = LocalProcessExecutor::new(
        LocalConfig {
            dir: dir.path().join("executions"),
            host: mapi_tests::worker(),
            task: mapi_tests::worker(),
            static_env: static_env.clone(),
            timeout_margin: std::time::Duration::from_secs(2),
            grace: std::time::Duration::from_secs(2),
            memory_mib: BTreeMap::from([(mapi_domain::ResourceClass::S, S_MIB)]),
            regions: vec!["europe-west1".to_owned()],
            runsc,
            unavailable: BTreeMap::new(),
            gpus: 0,
        },
        clock.clone(),
    )
    .expect("executor");
    let ports = PortsHarness {
        executor: Arc::new(executor.clone()),
        data,
        bootstrap: boot,
        clock,
        class_s_mib: S_MIB,
        ledger: None,
    };
    Local { ports, executor_static_env: static_env, dir }
}

mod local_process {
    mapi_executor::executor_conformance_suite!(super::local().await.ports);
}

mod gvisor {
    mapi_executor::executor_conformance_suite!(super::gvisor().await.ports);
}

/// The cloudrun-jobs executor over FakeCloudRun: the same objects, the
/// same worker, started by the fake as Cloud Run starts a task, its output
/// read back from the fake's Cloud Logging.
async fn cloudrun() -> CloudRun {
    let base = local().await;
    let mut settings = Settings::new("fake-project");
    settings.env = "test".to_owned();
    settings.timeout_margin = std::time::Duration::from_secs(2);
    // The 429 case's back-off, short: two retries, from 100 ms.
    settings.max_429_retries = 2;
    settings.backoff_base = std::time::Duration::from_millis(100);
    settings.backoff_cap = std::time::Duration::from_secs(1);
    let inventory = mapi_cloudrun::Inventory::new(&settings);
    let jobs = inventory.jobs().iter().map(|j| j.id.clone()).collect();
    let fake = FakeCloudRun::start(
        &settings.project,
        &settings.region,
        jobs,
        mapi_tests::worker(),
        base.ports.clock.clone(),
    )
    .await;
    fake.set_static_env(base.executor_static_env.clone());
    fake.set_memory_limit_mib(S_MIB);
    settings.endpoint = Some(fake.url.clone());
    settings.logging_endpoint = Some(fake.logging.url.clone());
    let executor = CloudRunJobsExecutor::new(
        settings,
        Credentials::Anonymous,
        base.ports.clock.clone(),
        Default::default(),
    )
    .await
    .expect("executor");
    CloudRun { base, executor, fake }
}

struct CloudRun {
    base: Local,
    executor: CloudRunJobsExecutor,
    fake: FakeCloudRun,
}

#[async_trait]
impl Harness for CloudRun {
    fn executor(&self) -> &dyn Executor {
        &self.executor
    }

    async fn prepare(&self, a: &AttemptSubmit, behaviour: Behaviour) {
        self.base.ports.prepare(a, behaviour).await;
    }

    fn class_s_memory_mib(&self) -> u64 {
        S_MIB
    }

    async fn bootstrap_present(&self, a: &AttemptSubmit, task: u32) -> bool {
        self.base.ports.bootstrap_present(a, task).await
    }

    async fn written(&self, a: &AttemptSubmit) -> usize {
        self.base.ports.written(a).await
    }

    async fn output(&self, a: &AttemptSubmit, task: u32, name: &str) -> Option<Stored> {
        self.base.ports.output(a, task, name).await
    }

    fn throttling(&self) -> Throttling {
        Throttling::Injectable { max_429_retries: 2 }
    }

    async fn throttle_next(&self, answers: u32) {
        for _ in 0..answers {
            self.fake.inject(Fault::Throttle { retry_after_s: 0 });
        }
    }

    fn now(&self) -> Timestamp {
        self.base.ports.now()
    }
}

/// The security suite's targets on the harness's machine: a home with a store and a key, the
/// executions directory, this process as the host process.
fn targets(h: &Local) -> Targets {
    let home = h.dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let files = ["mapi.db", "signing.key"].map(|f| home.join(f));
    for f in &files {
        std::fs::write(f, "the platform's own").expect("a platform file");
    }
    Targets {
        platform_files: files.to_vec(),
        executions_dir: Some(h.dir.path().join("executions")),
        host_pid: Some(std::process::id()),
        write_dir: Some(home),
        same_machine: true,
    }
}

/// On gvisor every probe runs and is stopped: the report is evidence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_security_suite_passes_on_gvisor() {
    let h = gvisor().await;
    let report = mapi_executor::security::suite::run(&h.ports, &targets(&h)).await;
    let names: Vec<&str> = report.probes.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, mapi_executor::security::PROBES);
    for p in &report.probes {
        assert!(p.ran && p.blocked, "{p:?}");
    }
    assert!(report.passed());
}

/// On local-process the probes run and get through (it has no sandbox), so the report is no
/// evidence: each probe's test here is its guard removed. Only memory is enforced there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_security_suite_fails_on_local_process() {
    let h = local().await;
    let report = mapi_executor::security::suite::run(&h.ports, &targets(&h)).await;
    let through: Vec<&str> =
        report.probes.iter().filter(|p| p.ran && !p.blocked).map(|p| p.name.as_str()).collect();
    let mut expected: Vec<&str> = mapi_executor::security::PROBES.to_vec();
    expected.retain(|p| *p != "memory_bomb");
    if !nix_is_root() {
        expected.retain(|p| *p != "privileges");
    }
    assert_eq!(through, expected, "{report:#?}");
    assert!(report.probes.iter().all(|p| p.ran), "{report:#?}");
    assert!(!report.passed());
}

/// On cloudrun-jobs (the fake) the same probes run as a job; the suite's listeners are not on
/// the job's machine in a real project, so there the network probes count as not run and the
/// report is no evidence of egress (a real project's witness is the operator's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_security_probes_run_as_a_cloud_run_job() {
    let h = cloudrun().await;
    let report = mapi_executor::security::suite::run(&h, &Targets::default()).await;
    let ran: Vec<&str> = report.probes.iter().filter(|p| p.ran).map(|p| p.name.as_str()).collect();
    assert_eq!(ran, ["privileges", "fork_bomb", "memory_bomb"], "{report:#?}");
    let http = report.probes.iter().find(|p| p.name == "http_egress").expect("http_egress");
    assert!(http.detail.as_deref().is_some_and(|d| d.contains("connection")), "the probe ran: {http:?}");
    assert!(!report.passed());
}

/// Whether this test runs as root (then a process of local-process is root too).
fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

mod cloudrun_jobs {
    mapi_executor::executor_conformance_suite!(super::cloudrun().await);
}

/// The suite's report for cloudrun-jobs: every case passed, in the shape
/// `PUT /v1/admin/executors/cloudrun-jobs/evidence` records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cloudrun_suite_report_is_recordable_evidence() {
    let h = cloudrun().await;
    let report = mapi_executor::conformance::run_all(&h, || h.now()).await;
    assert!(report.passed(), "{report:#?}");
    let names: Vec<&str> = report.cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, mapi_executor::conformance_cases::CASES);
    assert_eq!(report.executor, "cloudrun-jobs");
    let json = serde_json::to_value(&report).expect("json");
    let back: mapi_executor::evidence::ConformanceReport = serde_json::from_value(json).expect("round trip");
    assert_eq!(back, report);
}
