//! The cloud-run adapter of the Hosting port against FakeCloudRunServices:
//! the exact bodies it sends (CPU and L4, private and public), rollouts to
//! `Ready` and to `Failed` with Cloud Run's messages, the split moving,
//! Google's errors kept, faults (429, lost answers, unpullable images,
//! crashes), `list` of managed services only, `delete`, and ID tokens for
//! private services (from an injected issuer and from a metadata server
//! through `google-cloud-auth`). The Hosting conformance suite runs on the
//! fake with real model servers (`mapi-worker serve`).
//!
//! Most cases serve with a stand-in model server (a few lines of Python)
//! that reads its manifest through the bucket mount and answers the value
//! in it, so they start in milliseconds and prove the mount's layout.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mapi_clock::{Clock, SystemClock};
use mapi_cloudrun::Credentials;
use mapi_cloudrun::services::{CloudRunHosting, GoogleIdTokens, IdTokens, ServicesSettings, TokenCache};
use mapi_executor::local::layout::Command;
use mapi_hosting::conformance::{self, Fixture};
use mapi_hosting::{
    Accelerator, Access, Hosting, HostingError, ModelRef, RevisionSpec, Rollout, Scaling, ServiceSpec,
    Traffic, wait_ready,
};
use mapi_tests::fake_cloudrun_services::{FakeCloudRunServices, FakeIdTokens, Fault};
use mapi_tests::model_fixture::{self, Bundles};
use serde_json::{Value, json};

const PROJECT: &str = "mapi-test";
const IMAGE: &str = "europe-docker.pkg.dev/mapi-test/mapi/worker:1.4.0";
const BUCKET: &str = "mapi-test-data";
const RUNTIME_ACCOUNT: &str = "mapi-endpoints@mapi-test.iam.gserviceaccount.com";

/// A model server standing in for `mapi-worker serve`: it refuses to start
/// unless the manifest under `MAPI_SERVE_OBJECTS` is the one pinned, and
/// predicts the `value` the manifest holds.
const STAND_IN: &str = r#"
import hashlib, http.server, json, os, pathlib, sys
manifest = pathlib.Path(os.environ["MAPI_SERVE_OBJECTS"], os.environ["MAPI_SERVE_BUNDLE"], "manifest.json")
try:
    data = manifest.read_bytes()
except OSError as e:
    sys.exit(f"refusing to serve: cannot read {manifest}: {e}")
if hashlib.sha256(data).hexdigest() != os.environ["MAPI_SERVE_MANIFEST_SHA256"]:
    sys.exit("refusing to serve: the manifest is not the one pinned")
value, revision = json.loads(data)["value"], os.environ["MAPI_SERVE_REVISION"]
class Handler(http.server.BaseHTTPRequestHandler):
    def answer(self, body):
        b = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def do_GET(self):
        self.answer({"status": "ok", "revision": revision})
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.answer({"predictions": [{"value": value, "std_error": 0.0}], "revision": revision})
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"#;

fn stand_in() -> Command {
    Command { program: "python3".into(), args: vec!["-c".into(), STAND_IN.into()] }
}

const POLL: Duration = Duration::from_millis(50);

/// The fake, its bucket's directory, the adapter on it and the ID token issuer the fake trusts.
struct World {
    fake: FakeCloudRunServices,
    hosting: CloudRunHosting,
    tokens: Arc<FakeIdTokens>,
    bucket: tempfile::TempDir,
}

fn settings(fake: &FakeCloudRunServices, project: &str, image: &str) -> ServicesSettings {
    let mut s = ServicesSettings::new(project, image, BUCKET);
    s.endpoint = Some(fake.url.clone());
    s.service_account = Some(RUNTIME_ACCOUNT.into());
    s
}

async fn adapter(s: ServicesSettings, tokens: Arc<dyn IdTokens>) -> CloudRunHosting {
    CloudRunHosting::new(s, Credentials::Anonymous, tokens, Arc::new(SystemClock)).await.expect("clients")
}

async fn world_with(server: Command) -> World {
    let bucket = tempfile::tempdir().expect("tempdir");
    let tokens = FakeIdTokens::new(Arc::new(SystemClock), Duration::from_secs(3600));
    let fake = FakeCloudRunServices::start(PROJECT, server)
        .await
        .with_bucket_dir(BUCKET, bucket.path())
        .accepting(&tokens);
    let hosting = adapter(settings(&fake, PROJECT, IMAGE), tokens.clone()).await;
    World { fake, hosting, tokens, bucket }
}

async fn world() -> World {
    world_with(stand_in()).await
}

impl World {
    /// A bundle of run `run` of tenant `acme` whose manifest holds `value`, in the bucket.
    fn model(&self, run: &str, value: f64) -> ModelRef {
        let bundle = format!("t/acme/p/default/runs/{run}/a1/bundle");
        let manifest = json!({ "value": value }).to_string();
        let path = self.bucket.path().join(&bundle).join("manifest.json");
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, &manifest).expect("write");
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, manifest.as_bytes());
        ModelRef {
            bundle,
            manifest_sha256: digest.as_ref().iter().map(|b| format!("{b:02x}")).collect(),
            trusted_keys: "[]".into(),
            files: vec![],
            base: None,
        }
    }

    fn revision(&self, tag: &str, value: f64) -> RevisionSpec {
        // A model version's revision (`model_of` reads its model back).
        RevisionSpec {
            tag: tag.into(),
            serves: mapi_hosting::Serving::Model(self.model(&format!("run-{tag}"), value)),
        }
    }

    async fn ready(&self, name: &str) -> Rollout {
        wait_ready(&self.hosting, &SystemClock, name, POLL, Duration::from_secs(60)).await.expect("get")
    }

    /// The bodies of the calls `method` made to paths ending in `suffix`.
    fn sent(&self, method: &str, suffix: &str) -> Vec<(String, String, Value)> {
        let calls = self.fake.calls().into_iter().filter(|c| c.method == method && c.path.ends_with(suffix));
        calls.map(|c| (c.path, c.query, c.body)).collect()
    }
}

fn spec(name: &str, region: &str, accelerator: Accelerator, access: Access) -> ServiceSpec {
    ServiceSpec {
        name: name.into(),
        region: region.into(),
        accelerator,
        scaling: Scaling { min: 0, max: 2 },
        access,
        labels: BTreeMap::from([
            ("alias".to_owned(), name.to_owned()),
            ("tenant".to_owned(), "acme".to_owned()),
        ]),
    }
}

/// Posts a row to `/predict` through `route`; the status and the body.
async fn predict(h: &CloudRunHosting, service: &str, tag: Option<&str>) -> (u16, Value) {
    let route = h.route(service, tag).await.expect("route");
    let mut req =
        reqwest::Client::new().post(format!("{}/predict", route.url)).json(&json!({"rows": [{"a": 1}]}));
    if let Some(a) = &route.authorization {
        req = req.header("authorization", a);
    }
    let resp = req.send().await.expect("the proxy answers");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn eventually(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(POLL).await;
    }
}

fn env(pairs: &[(&str, &str)]) -> Value {
    Value::Array(pairs.iter().map(|(n, v)| json!({"name": n, "value": v})).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bodies_sent_are_the_seeds_for_cpu_and_l4_private_and_public() {
    let w = world().await;
    let mut cpu = spec("ep-laya", "us", Accelerator::Cpu, Access::Private);
    cpu.scaling = Scaling { min: 1, max: 3 };
    let r1 = w.revision("r1", 2.5);
    w.hosting.create(&cpu, &r1).await.expect("create cpu");
    let l4 = spec("ep-qwen", "eu", Accelerator::L4, Access::Public);
    let q1 = w.revision("q1", 7.0);
    w.hosting.create(&l4, &q1).await.expect("create l4");

    let sent = w.sent("POST", "/services");
    assert_eq!(sent.len(), 2, "{sent:?}");
    let (path, query, body) = &sent[0];
    assert_eq!(path, "/v2/projects/mapi-test/locations/us-central1/services");
    assert!(query.contains("serviceId=ep-laya"), "{query}");
    let probe = json!({"httpGet": {"path": "/health", "port": 8080}, "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 60});
    let mount = json!([{"name": "bundles", "mountPath": "/objects/t/acme"}]);
    let volumes = json!([{"name": "bundles", "gcs": {"bucket": BUCKET, "readOnly": true, "mountOptions": ["only-dir=t/acme"]}}]);
    let env_of = |m: &ModelRef, tag: &str| {
        env(&[
            ("MAPI_SERVE_OBJECTS", "/objects"),
            ("MAPI_SERVE_BUNDLE", &m.bundle),
            ("MAPI_SERVE_MANIFEST_SHA256", &m.manifest_sha256),
            ("MAPI_SERVE_TRUSTED_KEYS", "[]"),
            ("MAPI_SERVE_REVISION", tag),
        ])
    };
    // Enums go as numbers: the client asks `$alt=json;enum-encoding=int`
    // (2 is TRAFFIC_TARGET_ALLOCATION_TYPE_REVISION).
    assert_eq!(
        *body,
        json!({
            "labels": {"alias": "ep-laya", "tenant": "acme", "managed-by": "mapi"},
            "template": {
                "revision": "ep-laya-r1",
                "serviceAccount": RUNTIME_ACCOUNT,
                "containers": [{
                    "image": IMAGE,
                    "args": ["serve"],
                    "env": env_of(model_of(&r1), "r1"),
                    "resources": {"limits": {"cpu": "1", "memory": "2Gi"}, "cpuIdle": true},
                    "ports": [{"containerPort": 8080}],
                    "volumeMounts": mount,
                    "startupProbe": probe,
                }],
                "volumes": volumes,
            },
            "traffic": [{"type": 2, "revision": "ep-laya-r1", "percent": 100, "tag": "r1"}],
            // The bounds are the service's, shared by the revisions taking traffic: a tagged
            // revision at 0 % keeps no instance warm.
            "scaling": {"minInstanceCount": 1, "maxInstanceCount": 3},
        }),
        "a private CPU service: no invokerIamDisabled, request-billed"
    );
    let (path, _, body) = &sent[1];
    assert_eq!(path, "/v2/projects/mapi-test/locations/europe-west4/services");
    assert_eq!(
        *body,
        json!({
            "labels": {"alias": "ep-qwen", "tenant": "acme", "managed-by": "mapi"},
            "template": {
                "revision": "ep-qwen-q1",
                "serviceAccount": RUNTIME_ACCOUNT,
                "containers": [{
                    "image": IMAGE,
                    "args": ["serve"],
                    "env": env_of(model_of(&q1), "q1"),
                    // cpuIdle false (instance billing, as a GPU needs) is the default, so it is not sent.
                    "resources": {"limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}},
                    "ports": [{"containerPort": 8080}],
                    "volumeMounts": mount,
                    "startupProbe": probe,
                }],
                "volumes": volumes,
                "nodeSelector": {"accelerator": "nvidia-l4"},
                "gpuZonalRedundancyDisabled": true,
            },
            "traffic": [{"type": 2, "revision": "ep-qwen-q1", "percent": 100, "tag": "q1"}],
            "scaling": {"maxInstanceCount": 2},
            "invokerIamDisabled": true,
        }),
        "a public L4 service (min 0 is the default, so it is not sent)"
    );
    assert_eq!(w.ready("ep-laya").await, Rollout::Ready);
    assert_eq!(w.ready("ep-qwen").await, Rollout::Ready);
    // New bounds patch the service's scaling alone: no template, so no new revision.
    w.hosting.set_scaling("ep-laya", Scaling { min: 0, max: 5 }).await.expect("scale");
    let patched = w.sent("PATCH", "/services/ep-laya");
    let (_, query, body) = patched.last().expect("a patch");
    assert!(query.contains("updateMask=scaling"), "{query}");
    assert_eq!(body["scaling"], json!({"maxInstanceCount": 5}), "{body}");
    assert!(body.get("template").is_none() && body.get("traffic").is_none(), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_rolls_out_then_a_revision_joins_at_zero_and_the_split_moves() {
    let w = world().await;
    let s = spec("ep-split", "eu", Accelerator::Cpu, Access::Private);
    w.hosting.create(&s, &w.revision("r1", 2.5)).await.expect("create");
    assert_eq!(
        w.hosting.get("ep-split").await.expect("get").rollout,
        Rollout::Reconciling,
        "until the probe answers"
    );
    assert_eq!(w.ready("ep-split").await, Rollout::Ready);
    let state = w.hosting.get("ep-split").await.expect("get");
    assert_eq!(state.traffic, vec![Traffic { tag: "r1".into(), percent: 100 }]);
    assert_eq!(state.labels.get("managed-by").map(String::as_str), Some("mapi"));
    assert!(state.url.as_deref().is_some_and(|u| u.starts_with("http://127.0.0.1:")), "{state:?}");
    let (status, body) = predict(&w.hosting, "ep-split", None).await;
    assert_eq!(
        (status, body["predictions"][0]["value"].as_f64(), body["revision"].as_str()),
        (200, Some(2.5), Some("r1")),
        "the manifest read through the bucket mount: {body}"
    );

    w.hosting.add_revision("ep-split", &w.revision("r2", 3.5)).await.expect("add");
    let state = w.hosting.get("ep-split").await.expect("get");
    assert_eq!(state.rollout, Rollout::Reconciling);
    assert_eq!(
        state.traffic,
        vec![Traffic { tag: "r1".into(), percent: 100 }, Traffic { tag: "r2".into(), percent: 0 }],
        "a new revision joins at 0 %"
    );
    let (_, query, patch) = w.sent("PATCH", "/services/ep-split").pop().expect("a patch");
    assert!(query.starts_with("updateMask=template%2Ctraffic&"), "{query}");
    assert_eq!(patch["template"]["revision"], "ep-split-r2");
    assert_eq!(
        patch["traffic"],
        json!([
            {"type": 2, "revision": "ep-split-r1", "percent": 100, "tag": "r1"},
            {"type": 2, "revision": "ep-split-r2", "tag": "r2"},
        ]),
        "percent 0 is the default, so it is not sent"
    );
    assert_eq!(w.ready("ep-split").await, Rollout::Ready);
    let (status, body) = predict(&w.hosting, "ep-split", Some("r2")).await;
    assert_eq!((status, body["revision"].as_str()), (200, Some("r2")), "its tag URL reaches it alone");

    let split = [Traffic { tag: "r1".into(), percent: 95 }, Traffic { tag: "r2".into(), percent: 5 }];
    w.hosting.set_traffic("ep-split", &split).await.expect("split");
    let (_, query, patch) = w.sent("PATCH", "/services/ep-split").pop().expect("a patch");
    assert!(query.starts_with("updateMask=traffic&"), "{query}");
    assert_eq!(
        patch.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["name".to_owned(), "traffic".to_owned()]),
        "only the traffic: {patch}"
    );
    let state = w.hosting.get("ep-split").await.expect("get");
    assert_eq!(state.traffic, split.to_vec());
    assert_eq!(state.rollout, Rollout::Ready, "moving the split starts no revision");
    let names: Vec<(&str, &str, bool, &Rollout)> = state
        .revisions
        .iter()
        .map(|r| (r.tag.as_str(), r.name.as_str(), r.url.is_some(), &r.rollout))
        .collect();
    assert_eq!(
        names,
        vec![("r1", "ep-split-r1", true, &Rollout::Ready), ("r2", "ep-split-r2", true, &Rollout::Ready)]
    );
    let mut by_revision = BTreeMap::<String, u32>::new();
    for _ in 0..100 {
        let (status, body) = predict(&w.hosting, "ep-split", None).await;
        assert_eq!(status, 200);
        *by_revision.entry(body["revision"].as_str().unwrap_or_default().to_owned()).or_default() += 1;
    }
    assert_eq!(
        by_revision,
        BTreeMap::from([("r1".to_owned(), 95), ("r2".to_owned(), 5)]),
        "the fake splits 100 requests exactly"
    );

    let unknown = [Traffic { tag: "r9".into(), percent: 100 }];
    assert!(matches!(w.hosting.set_traffic("ep-split", &unknown).await, Err(HostingError::Invalid(_))));
    let bad = [Traffic { tag: "r1".into(), percent: 90 }];
    assert!(matches!(w.hosting.set_traffic("ep-split", &bad).await, Err(HostingError::Invalid(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_that_cannot_be_pulled_fails_the_rollout_with_cloud_runs_message() {
    let w = world().await;
    let private_image = "ghcr.io/acme/private-server:1";
    let fake = FakeCloudRunServices::start(PROJECT, stand_in())
        .await
        .with_bucket_dir(BUCKET, w.bucket.path())
        .with_unpullable(private_image);
    let h = adapter(settings(&fake, PROJECT, private_image), w.tokens.clone()).await;
    h.create(&spec("ep-pull", "us", Accelerator::Cpu, Access::Private), &w.revision("r1", 1.0))
        .await
        .expect("accepted");
    let rollout = wait_ready(&h, &SystemClock, "ep-pull", POLL, Duration::from_secs(30)).await.expect("get");
    assert_eq!(
        rollout,
        Rollout::Failed(format!(
            "Revision 'ep-pull-r1' is not ready and cannot serve traffic. Image '{private_image}' not found."
        ))
    );
    assert_eq!(fake.running(), 0, "nothing started");

    // A revision added to a serving service fails on its own; the split keeps serving.
    w.hosting
        .create(&spec("ep-keep", "us", Accelerator::Cpu, Access::Private), &w.revision("r1", 1.0))
        .await
        .expect("create");
    assert_eq!(w.ready("ep-keep").await, Rollout::Ready);
    w.fake.inject(Fault::ImagePull);
    w.hosting.add_revision("ep-keep", &w.revision("r2", 2.0)).await.expect("add");
    let Rollout::Failed(message) = w.ready("ep-keep").await else {
        panic!("the new revision cannot be pulled")
    };
    assert!(
        message.contains("Image 'europe-docker.pkg.dev/mapi-test/mapi/worker:1.4.0' not found"),
        "{message}"
    );
    let state = w.hosting.get("ep-keep").await.expect("get");
    assert_eq!(state.revision("r1").map(|r| &r.rollout), Some(&Rollout::Ready));
    assert!(matches!(state.revision("r2").map(|r| &r.rollout), Some(Rollout::Failed(m)) if *m == message));
    assert_eq!(predict(&w.hosting, "ep-keep", None).await.1["revision"], "r1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_exits_fails_its_rollout_with_its_last_line() {
    let w = world().await;
    let mut r1 = w.revision("r1", 1.0);
    let mapi_hosting::Serving::Model(m) = &mut r1.serves else { panic!("a model revision") };
    m.manifest_sha256 = "0".repeat(64);
    w.hosting.create(&spec("ep-exit", "us", Accelerator::Cpu, Access::Private), &r1).await.expect("accepted");
    let Rollout::Failed(message) = w.ready("ep-exit").await else {
        panic!("a server that exits is not ready")
    };
    assert!(
        message.starts_with("Revision 'ep-exit-r1' is not ready and cannot serve traffic. The user-provided container failed to start and listen on the port defined provided by the PORT=8080 environment variable"),
        "{message}"
    );
    assert!(
        message.ends_with("refusing to serve: the manifest is not the one pinned"),
        "the server's reason: {message}"
    );
    let state = w.hosting.get("ep-exit").await.expect("get");
    assert_eq!(state.revision("r1").map(|r| r.rollout.clone()), Some(Rollout::Failed(message)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_and_unavailable_calls_change_nothing() {
    let w = world().await;
    let s = spec("ep-busy", "us", Accelerator::Cpu, Access::Private);
    w.fake.inject(Fault::Throttle { retry_after_s: 7 });
    let e = w.hosting.create(&s, &w.revision("r1", 1.0)).await.expect_err("429");
    assert!(
        matches!(&e, HostingError::Throttled(m) if m.to_string().contains("Quota exceeded") && m.to_string().contains("retry after 7 s")),
        "{e:?}"
    );
    assert!(e.is_retryable());
    w.fake.inject(Fault::Unavailable);
    let e = w.hosting.create(&s, &w.revision("r1", 1.0)).await.expect_err("503");
    assert!(matches!(&e, HostingError::Unavailable(m) if m.to_string().contains("503 UNAVAILABLE")), "{e:?}");
    assert!(w.fake.services().is_empty(), "neither made anything");
    w.hosting.create(&s, &w.revision("r1", 1.0)).await.expect("the repeat is made");
    assert_eq!(
        w.fake.services(),
        vec!["projects/mapi-test/locations/us-central1/services/ep-busy".to_owned()]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_answer_is_unavailable_and_the_repeat_makes_no_duplicate() {
    let w = world().await;
    let s = spec("ep-lost", "us", Accelerator::Cpu, Access::Private);
    w.fake.inject(Fault::LoseAnswer);
    let e = w.hosting.create(&s, &w.revision("r1", 1.0)).await.expect_err("the answer is lost");
    assert!(matches!(e, HostingError::Unavailable(_)), "{e:?}");
    assert!(
        matches!(w.hosting.create(&s, &w.revision("r1", 1.0)).await, Err(HostingError::AlreadyExists(n)) if n == "ep-lost")
    );
    assert_eq!(w.fake.services().len(), 1);
    assert_eq!(w.ready("ep-lost").await, Rollout::Ready);

    w.fake.inject(Fault::LoseAnswer);
    let e = w.hosting.add_revision("ep-lost", &w.revision("r2", 2.0)).await.expect_err("the answer is lost");
    assert!(matches!(e, HostingError::Unavailable(_)), "{e:?}");
    assert_eq!(w.fake.revisions_of("ep-lost"), ["ep-lost-r1", "ep-lost-r2"], "the change was made");
    w.hosting.add_revision("ep-lost", &w.revision("r2", 2.0)).await.expect("the repeat succeeds");
    assert_eq!(w.sent("PATCH", "/services/ep-lost").len(), 1, "the repeat found its tag and sent nothing");
    assert_eq!(w.fake.revisions_of("ep-lost"), ["ep-lost-r1", "ep-lost-r2"], "no duplicate");
    assert_eq!(w.ready("ep-lost").await, Rollout::Ready);

    let split = [Traffic { tag: "r2".into(), percent: 100 }];
    w.fake.inject(Fault::LoseAnswer);
    assert!(matches!(w.hosting.set_traffic("ep-lost", &split).await, Err(HostingError::Unavailable(_))));
    w.hosting.set_traffic("ep-lost", &split).await.expect("the repeat succeeds");
    let state = w.hosting.get("ep-lost").await.expect("get");
    assert_eq!(
        state.traffic,
        vec![Traffic { tag: "r1".into(), percent: 0 }, Traffic { tag: "r2".into(), percent: 100 }]
    );
    assert_eq!(state.revisions.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l4_outside_the_gpu_regions_and_bad_names_are_refused_before_any_call() {
    let w = world().await;
    let e = w
        .hosting
        .create(&spec("ep-gpu", "europe-west2", Accelerator::L4, Access::Private), &w.revision("r1", 1.0))
        .await
        .expect_err("no L4 there");
    assert_eq!(
        e,
        HostingError::Invalid(
            "region europe-west2 has no L4 GPUs: use one of asia-southeast1, asia-south1, europe-west1, europe-west4, us-central1, us-east4".into()
        )
    );
    let e = w
        .hosting
        .create(&spec("Bad_Name", "us", Accelerator::Cpu, Access::Private), &w.revision("r1", 1.0))
        .await;
    assert!(matches!(e, Err(HostingError::Invalid(_))), "{e:?}");
    let e = w
        .hosting
        .create(&spec("ep-mars", "mars", Accelerator::Cpu, Access::Private), &w.revision("r1", 1.0))
        .await;
    assert!(matches!(e, Err(HostingError::Invalid(_))), "{e:?}");
    let mut outside = w.revision("r1", 1.0);
    let mapi_hosting::Serving::Model(m) = &mut outside.serves else { panic!("a model revision") };
    m.bundle = "shared/bundle".into();
    let e = w.hosting.create(&spec("ep-where", "us", Accelerator::Cpu, Access::Private), &outside).await;
    assert!(
        matches!(e, Err(HostingError::Invalid(m)) if m.contains("t/{tenant}")),
        "a bundle outside a tenant"
    );
    assert!(w.fake.calls().is_empty(), "nothing was sent: {:?}", w.fake.calls());
    w.hosting
        .create(&spec("ep-gpu", "europe-west1", Accelerator::L4, Access::Private), &w.revision("r1", 1.0))
        .await
        .expect("a named GPU region");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_returns_only_the_managed_services_of_every_region() {
    let w = world().await;
    w.hosting
        .create(&spec("ep-b", "eu", Accelerator::Cpu, Access::Private), &w.revision("r1", 1.0))
        .await
        .expect("create");
    w.hosting
        .create(&spec("ep-a", "us", Accelerator::Cpu, Access::Public), &w.revision("r1", 1.0))
        .await
        .expect("create");
    // A service another tool made, beside them.
    let other = json!({
        "labels": {"team": "web"},
        "template": {"containers": [{"image": "us-docker.pkg.dev/cloudrun/container/hello"}]},
    });
    let resp = reqwest::Client::new()
        .post(format!("{}/v2/projects/{PROJECT}/locations/us-central1/services?serviceId=hello", w.fake.url))
        .json(&other)
        .send()
        .await
        .expect("create another service");
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    assert_eq!(w.fake.services().len(), 3);
    let listed = w.hosting.list().await.expect("list");
    let names: Vec<&str> = listed.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["ep-a", "ep-b"]);
    assert!(
        listed.iter().all(|s| s.traffic == vec![Traffic { tag: "r1".into(), percent: 100 }]),
        "{listed:?}"
    );
    assert!(
        listed.iter().all(|s| s.revisions.len() == 1 && s.revisions[0].name == format!("{}-r1", s.name)),
        "{listed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_service_is_not_found_and_its_servers_stop() {
    let w = world().await;
    w.hosting
        .create(&spec("ep-gone", "eu", Accelerator::Cpu, Access::Private), &w.revision("r1", 1.0))
        .await
        .expect("create");
    assert_eq!(w.ready("ep-gone").await, Rollout::Ready);
    let url = w.hosting.route("ep-gone", None).await.expect("route").url;
    assert_eq!(w.fake.running(), 1);
    w.hosting.delete("ep-gone").await.expect("delete");
    assert!(matches!(w.hosting.get("ep-gone").await, Err(HostingError::NotFound(n)) if n == "ep-gone"));
    assert!(matches!(w.hosting.delete("ep-gone").await, Err(HostingError::NotFound(_))));
    assert!(
        matches!(w.hosting.route("ep-gone", None).await, Err(HostingError::NotFound(_))),
        "no stale route"
    );
    assert!(w.hosting.list().await.expect("list").is_empty());
    eventually("the server stops", Duration::from_secs(10), || w.fake.running() == 0).await;
    let refused =
        reqwest::Client::new().get(format!("{url}/health")).timeout(Duration::from_secs(5)).send().await;
    assert!(refused.is_err() || refused.is_ok_and(|r| r.status() == 404), "its URL no longer serves");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_services_want_an_id_token_for_their_url_and_public_ones_none() {
    let w = world().await;
    w.hosting
        .create(&spec("ep-private", "us", Accelerator::Cpu, Access::Private), &w.revision("r1", 1.0))
        .await
        .expect("create");
    w.hosting
        .create(&spec("ep-public", "us", Accelerator::Cpu, Access::Public), &w.revision("r1", 1.0))
        .await
        .expect("create");
    assert_eq!(w.ready("ep-private").await, Rollout::Ready);
    assert_eq!(w.ready("ep-public").await, Rollout::Ready);
    let service_url = w.hosting.get("ep-private").await.expect("get").url.expect("a URL");

    let route = w.hosting.route("ep-private", None).await.expect("route");
    assert_eq!(route.url, service_url);
    let token =
        route.authorization.as_deref().and_then(|a| a.strip_prefix("Bearer ")).expect("a bearer token");
    assert_eq!(
        w.tokens.audience_of(token).as_deref(),
        Some(service_url.as_str()),
        "its audience is the service URL"
    );
    let tagged = w.hosting.route("ep-private", Some("r1")).await.expect("route to the tag");
    assert_ne!(tagged.url, service_url, "the tag has its own URL");
    assert_eq!(tagged.authorization, route.authorization, "with the service URL's token, from the cache");
    assert_eq!(w.tokens.minted(), 1, "minted once, then cached");

    let http = reqwest::Client::new();
    let call = |url: String, auth: Option<String>| {
        let mut req = http.post(format!("{url}/predict")).json(&json!({"rows": []}));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        async move { req.send().await.expect("the proxy answers").status().as_u16() }
    };
    assert_eq!(call(service_url.clone(), None).await, 403, "no token");
    let other = w.tokens.mint("https://elsewhere.example").await.expect("mint");
    assert_eq!(
        call(service_url.clone(), Some(format!("Bearer {}", other.token))).await,
        403,
        "another audience"
    );
    assert_eq!(call(service_url.clone(), route.authorization.clone()).await, 200);
    assert_eq!(call(tagged.url.clone(), None).await, 403, "the tag URL is private too");
    assert_eq!(call(tagged.url, tagged.authorization).await, 200);

    let public = w.hosting.route("ep-public", None).await.expect("route");
    assert_eq!(public.authorization, None, "a public service needs no token");
    assert_eq!(call(public.url, None).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_keep_googles_http_status_and_code() {
    let w = world().await;
    let h = adapter(settings(&w.fake, "someone-elses", IMAGE), w.tokens.clone()).await;
    let e = h.create(&spec("ep-x", "us", Accelerator::Cpu, Access::Private), &w.revision("r1", 1.0)).await;
    match e {
        Err(HostingError::Api { status, code, message }) => {
            assert_eq!((status, code.as_str()), (403, "PERMISSION_DENIED"));
            assert!(message.contains("run.services.update"), "Google's message: {message}");
        }
        other => panic!("a 403 keeps its status and code: {other:?}"),
    }
    assert!(matches!(h.get("ep-x").await, Err(HostingError::Api { status: 403, .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_that_crashes_once_ready_is_started_again_by_the_next_request() {
    let w = world().await;
    w.fake.inject(Fault::CrashAfterReady);
    w.hosting
        .create(&spec("ep-crash", "us", Accelerator::Cpu, Access::Public), &w.revision("r1", 4.0))
        .await
        .expect("create");
    assert_eq!(w.ready("ep-crash").await, Rollout::Ready);
    eventually("the container exits once ready", Duration::from_secs(10), || w.fake.running() == 0).await;
    assert_eq!(
        w.hosting.get("ep-crash").await.expect("get").rollout,
        Rollout::Ready,
        "a crash is not a failed rollout"
    );
    let (status, body) = predict(&w.hosting, "ep-crash", None).await;
    assert_eq!((status, body["predictions"][0]["value"].as_f64()), (200, Some(4.0)), "{body}");
    assert_eq!(w.fake.instance_starts("ep-crash-r1"), 2, "a new instance served it");
}

/// A metadata server that mints ID tokens (JWT-shaped, with `aud` and `exp`)
/// for `/computeMetadata/v1/instance/service-accounts/default/identity`.
async fn metadata_server(issued: Arc<Mutex<Vec<(String, String)>>>) -> String {
    let app = axum::Router::new().fallback(
        move |uri: axum::http::Uri,
              headers: axum::http::HeaderMap,
              q: axum::extract::Query<BTreeMap<String, String>>| {
            let issued = issued.clone();
            async move {
                let flavor = headers.get("metadata-flavor").and_then(|v| v.to_str().ok());
                if uri.path() != "/computeMetadata/v1/instance/service-accounts/default/identity"
                    || flavor != Some("Google")
                {
                    return (axum::http::StatusCode::NOT_FOUND, String::new());
                }
                let audience = q.get("audience").cloned().unwrap_or_default();
                let b64 = |v: Value| mapi_tests::google::b64url(v.to_string());
                let exp = SystemClock.now().as_secs() + 3600;
                let n = issued.lock().expect("issued").len();
                let token = format!(
                    "{}.{}.sig",
                    b64(json!({"alg": "RS256"})),
                    b64(json!({"aud": audience, "exp": exp, "n": n}))
                );
                issued.lock().expect("issued").push((token.clone(), audience));
                (axum::http::StatusCode::OK, token)
            }
        },
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", l.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(l, app).await });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn google_cloud_auth_mints_the_id_tokens_from_the_metadata_server() {
    if std::env::var_os("GCE_METADATA_HOST").is_some() {
        // google-cloud-auth would ask that host instead; the adc suite sets it only in a child.
        return;
    }
    let issued = Arc::new(Mutex::new(Vec::new()));
    let metadata = metadata_server(issued.clone()).await;
    let bucket = tempfile::tempdir().expect("tempdir");
    let seen = issued.clone();
    let fake = FakeCloudRunServices::start(PROJECT, stand_in())
        .await
        .with_bucket_dir(BUCKET, bucket.path())
        .with_invoker_check(Arc::new(move |token, audience| {
            seen.lock().expect("issued").iter().any(|(t, a)| t == token && a == audience)
        }));
    let google: Arc<dyn IdTokens> = Arc::new(GoogleIdTokens::metadata_server(metadata));
    let h = adapter(settings(&fake, PROJECT, IMAGE), google.clone()).await;
    let w = World {
        fake,
        hosting: h,
        tokens: FakeIdTokens::new(Arc::new(SystemClock), Duration::from_secs(1)),
        bucket,
    };
    w.hosting
        .create(&spec("ep-mds", "us", Accelerator::Cpu, Access::Private), &w.revision("r1", 6.0))
        .await
        .expect("create");
    assert_eq!(w.ready("ep-mds").await, Rollout::Ready);
    let (status, body) = predict(&w.hosting, "ep-mds", None).await;
    assert_eq!((status, body["predictions"][0]["value"].as_f64()), (200, Some(6.0)), "{body}");
    let url = w.hosting.get("ep-mds").await.expect("get").url.expect("url");
    let issued_now: Vec<String> = issued.lock().expect("issued").iter().map(|(_, a)| a.clone()).collect();
    assert_eq!(issued_now, vec![url.clone()], "one token, for the service URL");
    predict(&w.hosting, "ep-mds", None).await;
    assert_eq!(issued.lock().expect("issued").len(), 1, "cached until a minute before its exp");
    // The token's expiry is read from its exp claim.
    let minted = google.mint(&url).await.expect("mint");
    assert!(minted.expires.as_secs() > SystemClock.now().as_secs() + 3000, "{minted:?}");
    let cache = TokenCache::new(google, Arc::new(SystemClock));
    assert!(cache.get(&url).await.expect("token").contains('.'));
}

/// The shared conformance suite with real model servers (`mapi-worker
/// serve`): bundles sealed and signed as the platform seals them, their
/// files in the bucket by key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cloud_run_adapter_conforms_with_real_model_servers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bundles = Bundles::new(&dir.path().join("objects"));
    let model = model_fixture::fit(model_fixture::DATA);
    let good = bundles.seal("r1", &model).await;
    let second = bundles.seal("r2", &model_fixture::fit(model_fixture::DATA_2)).await;
    let tampered = model_fixture::tampered(&bundles.seal("r3", &model).await);
    let bucket = dir.path().join("bucket");
    for m in [&good, &second, &tampered] {
        model_fixture::write_files(&bucket, m);
    }
    let f = Fixture { good, second, tampered, example: model_fixture::example(&model), prefix: "ep".into() };
    let server = Command { program: mapi_tests::binary("mapi-worker"), args: vec![] };
    let tokens = FakeIdTokens::new(Arc::new(SystemClock), Duration::from_secs(3600));
    let fake = FakeCloudRunServices::start(PROJECT, server)
        .await
        .with_bucket_dir(BUCKET, &bucket)
        .accepting(&tokens);
    let h = adapter(settings(&fake, PROJECT, IMAGE), tokens).await;
    conformance::run_all(&h, &SystemClock, &f).await;
    eventually("every server stops with its service", Duration::from_secs(10), || fake.running() == 0).await;
}

/// The model a revision of a model version serves.
fn model_of(r: &RevisionSpec) -> &mapi_hosting::ModelRef {
    let mapi_hosting::Serving::Model(m) = &r.serves else { panic!("a model revision") };
    m
}

/// A service's instance time is read from Cloud Monitoring (the fake samples
/// known lifetimes): each whole minute's mean instance count times the
/// minute, in the window the minute ends in, over pages; a 429 is
/// `Throttled` and the next read answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_time_is_read_from_cloud_monitorings_instance_counts() {
    use mapi_domain::Timestamp;
    use mapi_tests::fake_monitoring::FakeMonitoring;
    fn minute(m: i64) -> Timestamp {
        Timestamp::from_secs(1_700_000_000 - 1_700_000_000 % 60 + m * 60)
    }
    fn second(s: i64) -> Timestamp {
        Timestamp::from_secs(minute(0).as_secs() + s)
    }
    let lifetimes: mapi_tests::fake_cloudrun_services::Lifetimes =
        Arc::new(move |service: &str| match service {
            "ep-gpu" => vec![
                (second(30), Some(second(150))),
                (second(60), Some(second(120))),
                (minute(0), Some(minute(100))),
            ],
            _ => vec![],
        });
    let monitoring = FakeMonitoring::start(lifetimes).await;
    let fake = FakeCloudRunServices::start(PROJECT, mapi_tests::worker()).await;
    let mut s = settings(&fake, PROJECT, IMAGE);
    s.monitoring_endpoint = Some(monitoring.url.clone());
    let tokens = FakeIdTokens::new(Arc::new(SystemClock), Duration::from_secs(3600));
    let hosting = adapter(s, tokens).await;
    let read = |from: Timestamp, to: Timestamp| {
        let hosting = &hosting;
        async move { hosting.instance_time("ep-gpu", (from, to)).await.expect("read").expect("reported") }
    };
    // Minutes ending at 1, 2 and 3: 30 + 0 + 60 s, 60 + 60 + 60 s, 30 + 0 + 60 s.
    assert_eq!(read(minute(0), minute(3)).await, Duration::from_secs(360));
    // Consecutive windows count each minute once.
    assert_eq!(read(minute(0), minute(1)).await + read(minute(1), minute(3)).await, Duration::from_secs(360));
    // 101 minutes (from the one before the window, whose end is not in it) come in three pages.
    let before = monitoring.calls();
    assert_eq!(read(minute(0), minute(100)).await, Duration::from_secs(360 + 97 * 60));
    assert_eq!(monitoring.calls() - before, 3, "three pages");
    let none = hosting.instance_time("ep-cpu", (minute(0), minute(3))).await.expect("read");
    assert_eq!(none, Some(Duration::ZERO));
    monitoring.throttle_next();
    let throttled = hosting.instance_time("ep-gpu", (minute(0), minute(3))).await;
    assert!(matches!(throttled, Err(HostingError::Throttled(_))), "{throttled:?}");
    assert_eq!(read(minute(0), minute(3)).await, Duration::from_secs(360));
}
