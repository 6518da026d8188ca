//! The whole platform on the cloud adapters: state in Firestore (the local
//! emulator), objects in Cloud Storage (fake-gcs-server, behind a front
//! that checks V4 signatures as Cloud Storage does). A fit is submitted
//! through the API, its bootstrap is written to and taken from the
//! bootstrap bucket (`gs://`), its dataset and outputs move through signed
//! URLs, and it reaches `succeeded` with its outputs downloadable.
//!
//! The emulator cannot prove everything the store promises (see
//! `store_firestore.rs` and the `mapi-firestore` module doc): this test
//! proves the wiring, `MAPI_STORE=firestore` and `MAPI_OBJECTS=gcs` from
//! configuration to a final state, not Firestore's transactions.

use mapi_tests::fake_gcs::{FakeGcs, GcsProxy};
use mapi_tests::firestore_emulator::FirestoreEmulator;
use mapi_tests::gcs_front::{SigningFront, TestAccount};
use mapi_tests::{Options, TestPlatform, transitions, with_start};
use serde_json::{Value, json};

const LONGLEY: &str = include_str!("../../examples/longley.csv");
const DATA: &str = "mapi-test-data";
const BOOTSTRAP: &str = "mapi-test-bootstrap";
const API: &str = "api@fake.iam.gserviceaccount.com";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fit_succeeds_on_firestore_and_cloud_storage() {
    let firestore = tokio::task::spawn_blocking(FirestoreEmulator::start).await.expect("emulator");
    let gcs = FakeGcs::start(DATA).await;
    let made = reqwest::Client::new()
        .post(format!("{}/storage/v1/b", gcs.url))
        .json(&json!({ "name": BOOTSTRAP }))
        .send()
        .await
        .expect("make the bootstrap bucket");
    assert!(made.status().is_success(), "{}", made.status());
    let proxy = GcsProxy::start(&gcs.url).await;
    let api = TestAccount::new(API, true);
    let front = SigningFront::start(&gcs.url, vec![api.clone()]).await;
    let keys = tempfile::tempdir().expect("tempdir");
    let key_file = keys.path().join("api.json");
    std::fs::write(&key_file, api.key_file_json()).expect("key file");
    let key_file = key_file.to_string_lossy().into_owned();
    let project = format!("mapi-platform-{}", std::process::id());
    let settings = [
        ("MAPI_STORE", "firestore"),
        ("MAPI_FIRESTORE_PROJECT", project.as_str()),
        ("MAPI_FIRESTORE_ENDPOINT", firestore.endpoint.as_str()),
        ("MAPI_OBJECTS", "gcs"),
        ("MAPI_GCS_BUCKET", DATA),
        ("MAPI_GCS_BOOTSTRAP_BUCKET", BOOTSTRAP),
        ("MAPI_GCS_ENDPOINT", proxy.url.as_str()),
        ("MAPI_GCS_URL_BASE", front.url.as_str()),
        ("MAPI_GCS_SIGNING_KEY_FILE", key_file.as_str()),
    ];
    let p = TestPlatform::start_with(&settings, Options::default()).await;
    let state = &p.platform.state;
    assert_eq!(state.objects.bucket(), DATA, "the data bucket is Cloud Storage's");
    assert_eq!(state.bootstrap.bucket(), BOOTSTRAP);
    assert!(format!("{:?}", state.store).contains("Firestore"), "the store is Firestore: {:?}", state.store);

    let ds = p.upload(LONGLEY).await;
    let id = p
        .submit(
            json!({"method": "tabular.linear", "dataset": ds, "params": {"y": "employed"}, "timeout_s": 120}),
        )
        .await;
    let run = p.wait_final(&id).await;
    assert_eq!(run["state"], "succeeded", "{run:#}");
    assert_eq!(transitions(&run), with_start(&[("running", "succeeded", "completed")]));

    // The output, downloaded through the platform's route, which sends to its V4 URL (checked by
    // the front).
    let out = &run["outputs"][0];
    let link = out["url"].as_str().expect("url");
    let once =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    let sent = once.get(link).bearer_auth(p.token()).send().await.expect("get");
    assert_eq!(sent.status(), 303, "{link}");
    let url = sent.headers()["location"].to_str().expect("location").to_owned();
    assert!(url.starts_with(&front.url) && url.contains("X-Goog-Signature="), "a V4 URL: {url}");
    let model: Value = p.http.get(&url).send().await.expect("get").json().await.expect("json");
    let intercept = model["coefficients"][0]["estimate"].as_f64().expect("estimate");
    assert!((intercept - -3_482_258.634_595_82).abs() < 1e-3, "NIST certified intercept, got {intercept}");

    // The objects are in Cloud Storage; the bootstrap was taken.
    let outputs =
        state.objects.list(&format!("t/{}/", p.platform.credentials.tenant), None, 100).await.expect("list");
    assert!(
        outputs.objects.iter().any(|o| o.key.as_str().ends_with("model.json")),
        "the output is in the data bucket: {outputs:?}"
    );
    let left = state.bootstrap.list("", None, 10).await.expect("list bootstraps");
    assert!(left.objects.is_empty(), "the worker took its bootstrap: {left:?}");
}

/// On Cloud Run a worker takes its `gs://` bootstrap with its own service
/// account: an access token from the metadata server (here a fake one,
/// named by `GCE_METADATA_HOST`) on every Cloud Storage request.
#[tokio::test]
async fn a_worker_takes_a_gs_bootstrap_with_the_metadata_servers_token() {
    use axum::http::{HeaderMap, StatusCode};
    use std::sync::{Arc, Mutex};

    type Seen = Arc<Mutex<Vec<(String, String)>>>;
    let seen: Seen = Arc::default();
    let app = axum::Router::new()
        .route(
            "/computeMetadata/v1/instance/service-accounts/default/token",
            axum::routing::get(|headers: HeaderMap| async move {
                if headers.get("metadata-flavor").and_then(|v| v.to_str().ok()) != Some("Google") {
                    return (StatusCode::FORBIDDEN, axum::Json(json!({"error": "Metadata-Flavor missing"})));
                }
                (
                    StatusCode::OK,
                    axum::Json(
                        json!({"access_token": "ya29.worker", "expires_in": 3599, "token_type": "Bearer"}),
                    ),
                )
            }),
        )
        .route(
            "/storage/v1/b/{bucket}/o/{object}",
            axum::routing::get({
                let seen = seen.clone();
                move |axum::extract::Path((bucket, object)): axum::extract::Path<(String, String)>,
                      headers: HeaderMap| async move {
                    let auth =
                        headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                    seen.lock().expect("seen").push((format!("{bucket}/{object}"), auth.clone()));
                    if auth != "Bearer ya29.worker" {
                        return StatusCode::UNAUTHORIZED;
                    }
                    // Already taken by another execution: the worker does nothing.
                    StatusCode::NOT_FOUND
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    let out = tokio::process::Command::new(mapi_tests::binary("mapi-worker"))
        .env_clear()
        .env("MAPI_RUN_ID", "run_01arz3ndektsv4rrffq69g5fav")
        .env("MAPI_NONCE", "0123456789abcdef0123456789abcdef")
        .env("MAPI_BOOTSTRAP_URL", "gs://mapi-test-bootstrap/{nonce}")
        .env("MAPI_GCS_ENDPOINT", format!("http://{addr}"))
        .env("GCE_METADATA_HOST", addr.to_string())
        .output()
        .await
        .expect("run the worker");
    assert_eq!(out.status.code(), Some(0), "a bootstrap already taken: exit 0 doing nothing: {out:?}");
    assert!(out.stdout.is_empty(), "no event printed");
    let seen = seen.lock().expect("seen").clone();
    assert_eq!(
        seen,
        vec![(
            "mapi-test-bootstrap/0123456789abcdef0123456789abcdef".to_owned(),
            "Bearer ya29.worker".to_owned()
        )],
        "one read of the task's own object, with the metadata server's token"
    );
}

/// Each port is built from its own setting: a process configured for
/// Firestore, Cloud Storage, Cloud Tasks, Cloud Run Jobs and Cloud KMS opens
/// no SQLite file and makes no local directory (its `MAPI_HOME` is never
/// created); the same configuration with the local queue does make it, so
/// the check can fail. The cloud clients connect lazily: only KMS is asked
/// anything at start (its public keys), by a fake.
#[tokio::test]
async fn a_cloud_configured_platform_opens_no_local_file() {
    use std::sync::Arc;
    let kms = mapi_tests::fake_kms::FakeKms::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    let home_s = home.to_string_lossy().into_owned();
    let key = kms.version(1);
    let closed = "http://127.0.0.1:9";
    let cloud = vec![
        ("MAPI_HOME", home_s.as_str()),
        ("MAPI_PROFILE", "multi-tenant"),
        ("MAPI_INTERNAL_TOKEN", "an-internal-token-of-enough-length"),
        ("MAPI_TOKEN_PEPPER", "00112233445566778899aabbccddeeff"),
        ("MAPI_URL_SIGNING_KEY", "ffeeddccbbaa99887766554433221100"),
        ("MAPI_STORE", "firestore"),
        ("MAPI_FIRESTORE_PROJECT", "mapi-test"),
        ("MAPI_FIRESTORE_ENDPOINT", closed),
        ("MAPI_OBJECTS", "gcs"),
        ("MAPI_GCS_BUCKET", DATA),
        ("MAPI_GCS_ENDPOINT", closed),
        ("MAPI_GCS_SIGNING_SERVICE_ACCOUNT", API),
        ("MAPI_QUEUE", "cloudtasks"),
        ("MAPI_CLOUDTASKS_PROJECT", "mapi-test"),
        ("MAPI_CLOUDTASKS_SERVICE_ACCOUNT", "tasks@mapi-test.iam.gserviceaccount.com"),
        ("MAPI_CLOUDTASKS_ENDPOINT", closed),
        ("MAPI_EXECUTOR", "cloudrun-jobs"),
        ("MAPI_CLOUDRUN_PROJECT", "mapi-test"),
        ("MAPI_CLOUDRUN_ENDPOINT", closed),
        ("MAPI_SIGNER", "kms"),
        ("MAPI_KMS_KEY_VERSION", key.as_str()),
        ("MAPI_KMS_ENDPOINT", kms.url.as_str()),
    ];
    let get =
        |vars: &[(&str, &str)], k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned());
    let config = mapi_platform::Config::from_lookup(&|k| get(&cloud, k)).expect("a cloud configuration");
    let clock = Arc::new(mapi_clock::SystemClock);
    let platform = mapi_platform::Platform::configured(config, clock.clone(), mapi_tests::worker())
        .await
        .expect("start");
    assert!(!home.exists(), "MAPI_HOME was made by a cloud-configured platform");
    let local = &platform.local;
    assert!(local.queue.is_none() && local.executor.is_none() && local.objects.is_none(), "{local:?}");
    for (port, name) in [
        (format!("{:?}", platform.store), "Firestore"),
        (format!("{:?}", platform.queue), "CloudTasks"),
        (format!("{:?}", platform.executor), "CloudRun"),
    ] {
        assert!(port.contains(name), "{name} expected: {port}");
    }
    assert_eq!(platform.objects.bucket(), DATA);

    let mut with_local_queue = cloud.clone();
    with_local_queue.retain(|(k, _)| !k.starts_with("MAPI_CLOUDTASKS") && *k != "MAPI_QUEUE");
    let config = mapi_platform::Config::from_lookup(&|k| get(&with_local_queue, k)).expect("config");
    let platform =
        mapi_platform::Platform::configured(config, clock, mapi_tests::worker()).await.expect("start");
    assert!(home.join("queue.db").is_file(), "the local queue lives in MAPI_HOME");
    assert!(platform.local.queue.is_some() && platform.local.executor.is_none());
    assert!(!home.join("objects").exists() && !home.join("executions").exists(), "only the queue is local");
}

/// Each function reads only the sections of the configuration it uses and
/// builds only their ports: with broken settings of item jobs, the
/// executor, the queue, the objects and the signer, `push-events` starts
/// (on the embedded store), holds no client for those ports and answers
/// what each would have done with an error naming the port, while
/// `submit`, which uses them all, refuses the same environment naming the
/// first broken variable it reads.
#[tokio::test]
async fn a_function_reads_only_what_it_uses() {
    use std::sync::Arc;

    use mapi_platform::{Config, Platform, Service};
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    let home_s = home.to_string_lossy().into_owned();
    let broken = [
        ("MAPI_HOME", home_s.as_str()),
        ("MAPI_JOB_ITEM_TIMEOUT_S", "99"),
        ("MAPI_EXECUTOR", "cloudrun-jobs"),
        ("MAPI_CLOUDRUN_SUBMITS_PER_MINUTE", "9999"),
        ("MAPI_QUEUE", "pubsub"),
        ("MAPI_OBJECTS", "gcs"),
        ("MAPI_SIGNER", "kms"),
        ("MAPI_MAX_JSON_BYTES", "lots"),
    ];
    let get = |k: &str| broken.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned());
    let e = Config::read(&get, Service::Submit.uses()).expect_err("submit uses every section");
    assert!(broken[1..].iter().any(|(name, _)| e.to_string().contains(name)), "{e}");
    let asked = mapi_settings::names_read(&get, |env| {
        Config::read(env, Service::PushEvents.uses()).expect("push-events reads none of them");
    });
    for unread in ["MAPI_JOB_ITEM_TIMEOUT_S", "MAPI_EXECUTOR", "MAPI_QUEUE", "MAPI_OBJECTS", "MAPI_SIGNER"] {
        assert!(!asked.contains(unread), "push-events read {unread}");
    }
    assert!(asked.contains("MAPI_PUBSUB_PUSH_AUDIENCE") && asked.contains("MAPI_STORE"), "{asked:?}");

    let config = Config::read(&get, Service::PushEvents.uses()).expect("config");
    let clock = Arc::new(mapi_clock::SystemClock);
    let platform =
        Platform::configured(config, clock, mapi_tests::worker()).await.expect("push-events starts");
    let local = &platform.local;
    assert!(local.queue.is_none() && local.executor.is_none() && local.objects.is_none(), "{local:?}");
    assert!(home.join("mapi.db").is_file(), "the store it does use is opened");
    assert!(!home.join("objects").exists() && !home.join("executions").exists());
    assert!(platform.sessions.is_none(), "push-events verifies no session");
    let key = mapi_objects::ObjectKey::parse("t/acme/x").expect("key");
    let e = platform.objects.head(&key).await.expect_err("no object store");
    assert!(e.to_string().contains("does not use the object store"), "{e}");
    let q = mapi_queue::QueueName::new("dispatch").expect("queue");
    let e = platform.queue.depth(&q).await.expect_err("no queue");
    assert!(e.to_string().contains("does not use the task queue"), "{e}");
    assert!(platform.executor.check_placement(mapi_domain::ResourceClass::S, "describe").is_err());
}
