//! The Executor conformance suite against the local-process adapter, with
//! the real `mapi-worker` and bootstrap objects served over HTTP the way the
//! platform serves them, and its log forwarder delivering the events to an
//! endpoint that takes them (as the platform's does), so executions can be
//! forgotten.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use mapi_clock::{Clock, SystemClock};
use mapi_cloudrun::{CloudRunJobsExecutor, Credentials, Settings};
use mapi_domain::{BOOTSTRAP_VERSION, Bootstrap, ProjectId, TenantId, Timestamp};
use mapi_executor::conformance::{Behaviour, Harness};
use mapi_executor::local::forward::LogForwarder;
use mapi_executor::local::{LocalConfig, LocalProcessExecutor};
use mapi_executor::{AttemptSubmit, Executor};
use mapi_objects::fs::FsObjectStore;
use mapi_objects::signed::{Access, UrlSigner, router};
use mapi_objects::{IfGeneration, ObjectKey, ObjectStore, SignedMethod};
use mapi_tests::fake_cloudrun::FakeCloudRun;
use serde_json::json;

struct Local {
    executor: LocalProcessExecutor,
    executor_static_env: BTreeMap<String, String>,
    data: Arc<dyn ObjectStore>,
    boot: Arc<dyn ObjectStore>,
    clock: Arc<dyn Clock>,
    _dir: tempfile::TempDir,
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
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("runsc"))
        .find(|p| p.is_file());
    found.expect("runsc is not installed: `apt-get install runsc` (.ci/run installs it)")
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
        },
        clock.clone(),
    )
    .expect("executor");
    Local { executor, executor_static_env: static_env, data, boot, clock, _dir: dir }
}

#[async_trait]
impl Harness for Local {
    fn executor(&self) -> &dyn Executor {
        &self.executor
    }

    async fn prepare(&self, a: &AttemptSubmit, behaviour: Behaviour) {
        let (method, params) = match behaviour {
            Behaviour::Succeed => ("describe", json!({})),
            Behaviour::Fail => ("diag.fail", json!({"message": "asked to fail"})),
            Behaviour::Sleep { seconds, checkpoint } if checkpoint => {
                ("diag.sleep", json!({"seconds": seconds, "checkpoint_every_s": 0.2}))
            }
            Behaviour::Sleep { seconds, .. } => ("diag.sleep", json!({"seconds": seconds})),
            Behaviour::Allocate { mib } => ("diag.alloc", json!({"mib": mib, "hold_s": 5})),
        };
        let ttl = std::time::Duration::from_secs(600);
        let dataset = ObjectKey::parse(&format!("t/dev/p/default/datasets/{}.csv", a.nonce)).expect("key");
        self.data
            .put(&dataset, Bytes::from_static(b"x,y\n1,2\n3,4\n"), "text/csv", IfGeneration::Any)
            .await
            .expect("dataset");
        let outputs_of: Vec<&str> = mapi_methods::find(method)
            .map(|m| m.outputs.iter().map(|o| o.name).collect())
            .unwrap_or_default();
        for task in 0..a.task_count {
            let dir = format!("t/dev/p/default/runs/{}/a{}/tasks/{task}", a.run, a.attempt);
            let mut outputs = BTreeMap::new();
            for name in &outputs_of {
                let key = ObjectKey::parse(&format!("{dir}/outputs/{name}")).expect("key");
                outputs.insert(
                    (*name).to_owned(),
                    self.data.signed_url(SignedMethod::PutCreateOnly, &key, ttl).await.expect("sign"),
                );
            }
            let ckpt = ObjectKey::parse(&format!("{dir}/checkpoint.json")).expect("key");
            let boot = Bootstrap {
                v: BOOTSTRAP_VERSION,
                tenant: TenantId::parse("dev").expect("tenant"),
                project: ProjectId::parse("default").expect("project"),
                run: a.run.clone(),
                attempt: a.attempt,
                task,
                task_count: a.task_count,
                method: method.to_owned(),
                params: serde_json::from_value(params.clone()).expect("params"),
                timeout_s: u32::try_from(a.timeout.as_secs()).expect("timeout"),
                dataset_url: self.data.signed_url(SignedMethod::Get, &dataset, ttl).await.expect("sign"),
                outputs,
                checkpoint_url: self.data.signed_url(SignedMethod::Put, &ckpt, ttl).await.expect("sign"),
                resume_url: None,
                event_key: mapi_events::AttemptKey::from_bytes([7; 32]).to_hex(),
            };
            let key = ObjectKey::parse(a.nonce.for_task(task).as_str()).expect("key");
            let bytes = Bytes::from(serde_json::to_vec(&boot).expect("json"));
            self.boot.put(&key, bytes, "application/json", IfGeneration::ABSENT).await.expect("bootstrap");
        }
    }

    fn class_s_memory_mib(&self) -> u64 {
        S_MIB
    }

    async fn bootstrap_present(&self, a: &AttemptSubmit, task: u32) -> bool {
        let key = ObjectKey::parse(a.nonce.for_task(task).as_str()).expect("key");
        self.boot.head(&key).await.is_ok()
    }

    async fn written(&self, a: &AttemptSubmit) -> usize {
        let prefix = format!("t/dev/p/default/runs/{}/", a.run);
        self.data.list(&prefix, None, 1000).await.expect("list").objects.len()
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }
}

mod local_process {
    mapi_executor::executor_conformance_suite!(super::local().await);
}

mod gvisor {
    mapi_executor::executor_conformance_suite!(super::gvisor().await);
}

/// The cloudrun-jobs executor over FakeCloudRun: the same objects, the
/// same worker, started by the fake as Cloud Run starts a task, its output
/// read back from the fake's Cloud Logging.
async fn cloudrun() -> CloudRun {
    let base = local().await;
    let mut settings = Settings::new("fake-project");
    settings.env = "test".to_owned();
    settings.timeout_margin = std::time::Duration::from_secs(2);
    let inventory = mapi_cloudrun::Inventory::new(&settings);
    let jobs = inventory.jobs().iter().map(|j| j.id.clone()).collect();
    let fake = FakeCloudRun::start(
        &settings.project,
        &settings.region,
        jobs,
        mapi_tests::worker(),
        base.clock.clone(),
    )
    .await;
    fake.set_static_env(base.executor_static_env.clone());
    fake.set_memory_limit_mib(S_MIB);
    settings.endpoint = Some(fake.url.clone());
    settings.logging_endpoint = Some(fake.logging.url.clone());
    let executor =
        CloudRunJobsExecutor::new(settings, Credentials::Anonymous, base.clock.clone(), Default::default())
            .await
            .expect("executor");
    CloudRun { base, executor, _fake: fake }
}

struct CloudRun {
    base: Local,
    executor: CloudRunJobsExecutor,
    _fake: FakeCloudRun,
}

#[async_trait]
impl Harness for CloudRun {
    fn executor(&self) -> &dyn Executor {
        &self.executor
    }

    async fn prepare(&self, a: &AttemptSubmit, behaviour: Behaviour) {
        self.base.prepare(a, behaviour).await;
    }

    fn class_s_memory_mib(&self) -> u64 {
        S_MIB
    }

    async fn bootstrap_present(&self, a: &AttemptSubmit, task: u32) -> bool {
        self.base.bootstrap_present(a, task).await
    }

    async fn written(&self, a: &AttemptSubmit) -> usize {
        self.base.written(a).await
    }

    fn now(&self) -> Timestamp {
        self.base.now()
    }
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
