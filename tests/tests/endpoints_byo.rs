//! Bring-your-own model-server containers on the embedded platform: an
//! image from a local OCI image layout (a toy Open Inference Protocol v2
//! server and the libraries it needs, nothing else) runs in a gVisor
//! sandbox with no network, is scored through the platform's protocol
//! routes (a stock client among the callers), promoted through the gate,
//! rolled back by its smoke test and by hand, and deleted.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mapi_tests::TestPlatform;
use mapi_tests::oci_image::{ImageSpec, archive, build_layout};
use reqwest::Method;
use serde_json::{Value, json};

use crate::endpoints::QUICK_GATE;

/// A toy image whose server answers each row's sum times `scale`, version `version`.
fn toy_image(dir: &Path, name: &str, extra: &[(&str, &str)]) -> PathBuf {
    let layout = dir.join(name);
    let mut env: Vec<(String, String)> = vec![("TOY_VERSION".into(), name.into())];
    env.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    let spec = ImageSpec {
        entrypoint: vec!["/app/server".into()],
        env,
        working_dir: None,
        exposed_port: Some(8000),
    };
    build_layout(&layout, Path::new(env!("CARGO_BIN_EXE_toy_model_server")), &spec, true)
        .expect("an image layout");
    layout
}

fn container(image: &str) -> Value {
    json!({
        "image": image,
        "port": 8000,
        "health_path": "/health",
        "secrets": {"API_KEY": "api-key"},
        "example": {"path": "/v2/models/toy/infer", "body": infer_body(&[1.0])},
    })
}

fn infer_body(xs: &[f64]) -> Value {
    json!({"id": "q", "inputs": [{"name": "x", "shape": [xs.len(), 1], "datatype": "FP64", "data": xs}]})
}

async fn get(p: &TestPlatform, alias: &str) -> Value {
    let (s, e) =
        p.call(p.token(), Method::GET, &format!("{}/endpoints/{alias}", p.project_path()), None).await;
    assert_eq!(s, 200, "{e}");
    e
}

/// Polls the endpoint until `done` holds, sending a score each time (the gate counts them).
async fn until(p: &TestPlatform, alias: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let e = get(p, alias).await;
        if done(&e) {
            return e;
        }
        assert!(std::time::Instant::now() < deadline, "the endpoint did not get there: {e:#}");
        if e["status"] == "ready" {
            infer(p, alias, &[1.0]).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn infer(p: &TestPlatform, alias: &str, xs: &[f64]) -> (u16, Value) {
    let path = format!("{}/v2/models/{alias}/infer", p.project_path());
    p.call(p.token(), Method::POST, &path, Some(infer_body(xs))).await
}

/// The sums the endpoint answers for rows 1, 2 and 3.5.
async fn sums(p: &TestPlatform, alias: &str) -> Value {
    let (s, v2) = infer(p, alias, &[1.0, 2.0, 3.5]).await;
    assert_eq!(s, 200, "{v2}");
    v2["outputs"][0]["data"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_is_served_sandboxed_scored_in_its_protocol_promoted_and_rolled_back() {
    let p = TestPlatform::start(&QUICK_GATE).await;
    let images = tempfile::tempdir().expect("tempdir");
    let v1 = toy_image(images.path(), "v1", &[]);
    let v2 = images.path().join("v2.tar");
    archive(&toy_image(images.path(), "v2", &[("TOY_SCALE", "2")]), &v2).expect("an image archive");
    let broken = toy_image(images.path(), "broken", &[("TOY_FAIL_INFER", "1")]);
    let tenant = &p.platform.credentials.tenant;
    let secrets = json!({tenant.to_string(): {"api-key": "s3cret"}, "other": {"api-key": "not-yours"}});
    std::fs::write(p._home.path().join("endpoint-secrets.json"), secrets.to_string()).expect("secrets file");
    let [v1, v2, broken] = [v1, v2, broken].map(|i| i.to_string_lossy().into_owned());
    let route = serve_promote_and_roll_back(&p, [&v1, &v2, &broken], true).await;
    let gone = p.http.get(format!("{}/health", route.url)).send().await;
    assert!(gone.is_err(), "the sandbox still answers after the endpoint was deleted");
}

/// In the sandbox: the tenant's secret is there, the network is not.
async fn sandboxed(p: &TestPlatform, route: &mapi_hosting::Route) {
    let secret = p.http.get(format!("{}/env/API_KEY", route.url)).send().await.expect("env");
    assert_eq!(secret.text().await.expect("text"), "s3cret");
    let own = p.platform.url.trim_start_matches("http://").to_owned();
    for addr in ["1.1.1.1:53", own.as_str()] {
        let net = p.http.get(format!("{}/net?addr={addr}", route.url)).send().await.expect("net");
        let net = net.text().await.expect("text");
        assert!(net.starts_with("refused"), "the sandbox reached {addr}: {net}");
    }
}

/// The same flow with the endpoint on Cloud Run services (the Admin API
/// fake running each registered image's program, its secrets resolved from
/// Secret Manager references): the revision runs as the tenant's account.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_container_flow_runs_on_cloud_run_services() {
    use mapi_tests::fake_cloudrun_services::{FakeCloudRunServices, FakeIdTokens};
    let tokens = FakeIdTokens::new(std::sync::Arc::new(mapi_clock::SystemClock), Duration::from_secs(3600));
    let metadata = tokens.serve_metadata().await;
    let toy = Path::new(env!("CARGO_BIN_EXE_toy_model_server"));
    let fake = FakeCloudRunServices::start("mapi-endpoints", mapi_tests::worker()).await.accepting(&tokens);
    let mut settings = crate::endpoints::on_cloud_run(&fake.url, &metadata);
    settings.extend([
        ("MAPI_ENDPOINTS_CONTAINER_SERVICE_ACCOUNT", "ep-{tenant}@mapi-endpoints.iam.gserviceaccount.com"),
        ("MAPI_ENDPOINTS_CONTAINER_IMAGES", "europe-docker.pkg.dev/mapi-endpoints/tenant-{tenant}/"),
    ]);
    let p = TestPlatform::start(&settings).await;
    let tenant = p.platform.credentials.tenant.to_string();
    let repository = format!("europe-docker.pkg.dev/mapi-endpoints/tenant-{tenant}");
    let [v1, v2, broken] = ["v1", "v2", "broken"].map(|v| format!("{repository}/toy:{v}"));
    let fake = fake
        .with_secret(&format!("mapi-{tenant}-api-key"), "s3cret")
        .with_image(&v1, toy, &[("TOY_VERSION", "v1")])
        .with_image(&v2, toy, &[("TOY_VERSION", "v2"), ("TOY_SCALE", "2")])
        .with_image(&broken, toy, &[("TOY_VERSION", "broken"), ("TOY_FAIL_INFER", "1")]);
    // Another tenant's image is not this tenant's to run.
    let theirs = container("europe-docker.pkg.dev/mapi-endpoints/tenant-other/toy:v1");
    let body = json!({"alias": "theirs", "container": theirs});
    let (s, b) =
        p.call(p.token(), Method::POST, &format!("{}/endpoints", p.project_path()), Some(body)).await;
    assert_eq!((s, b["code"].as_str()), (403, Some("FORBIDDEN")), "{b}");
    assert!(b["detail"].as_str().is_some_and(|d| d.contains("not an image of tenant")), "{b}");
    serve_promote_and_roll_back(&p, [&v1, &v2, &broken], false).await;
    let created = fake.calls().into_iter().find(|c| c.method == "POST" && c.path.ends_with("/services"));
    let body = created.map(|c| c.body.to_string()).unwrap_or_default();
    assert!(
        body.contains(&format!("ep-{tenant}@mapi-endpoints.iam.gserviceaccount.com"))
            && body.contains(&format!("mapi-{tenant}-api-key"))
            && !body.contains("s3cret"),
        "the tenant's account, the secret by reference and never its value: {body}"
    );
    assert!(fake.services().is_empty(), "its service is deleted: {:?}", fake.services());
}

/// Serves image `v1`, scores it in its protocols (a stock client among the
/// callers), promotes `v2` through the gate, has `broken` rolled back by its
/// smoke test, rolls back to `v1` by hand and deletes the endpoint; with
/// `in_sandbox`, checks from the host what revision r1 can reach. Answers r1's route.
async fn serve_promote_and_roll_back(
    p: &TestPlatform,
    [v1, v2, broken]: [&str; 3],
    in_sandbox: bool,
) -> mapi_hosting::Route {
    let endpoints = format!("{}/endpoints", p.project_path());

    let body = json!({"alias": "toy", "container": container(v1)});
    let (s, e) = p.call(p.token(), Method::POST, &endpoints, Some(body)).await;
    assert_eq!(s, 202, "{e}");
    assert_eq!(e["image"], json!(v1), "{e}");
    let e = until(p, "toy", |e| e["status"] != "deploying").await;
    assert_eq!(e["status"], "ready", "{e:#}");
    assert_eq!(sums(p, "toy").await, json!([1.0, 2.0, 3.5]));

    // The request reached the container unchanged, and its answer came back as it was.
    let (s, v1_answer) = infer(p, "toy", &[4.0]).await;
    assert_eq!(
        (s, v1_answer["model_version"].as_str(), v1_answer["id"].as_str()),
        (200, Some("v1"), Some("q"))
    );
    let kserve = format!("{}/v1/models/toy:predict", p.project_path());
    let (s, v1_predict) =
        p.call(p.token(), Method::POST, &kserve, Some(json!({"instances": [[1.0, 2.0]]}))).await;
    assert_eq!((s, &v1_predict["predictions"]), (200, &json!([3.0])), "{v1_predict}");
    // The platform's own score body is for its own model server.
    let (s, b) = p
        .call(p.token(), Method::POST, &format!("{endpoints}/toy:score"), Some(json!({"rows": [{"x": 1}]})))
        .await;
    assert_eq!(s, 409, "{b}");
    assert!(b["detail"].as_str().is_some_and(|d| d.contains("/v2/models/toy/infer")), "{b}");

    // In the sandbox: the tenant's secret is there, the network is not.
    let route = p.platform.state.hosting.route(e["service"].as_str().expect("service"), Some("r1")).await;
    let route = route.expect("a route to r1");
    if in_sandbox {
        sandboxed(p, &route).await;
    }

    // Triton's stock client scores it unchanged (JSON tensors).
    let env = vec![
        ("MAPI_URL", p.platform.url.clone()),
        ("MAPI_TOKEN", p.token().to_owned()),
        ("MAPI_BASE", p.project_path()),
        ("MAPI_ALIAS", "toy".to_owned()),
    ];
    mapi_tests::python_tools::stock_client("triton_container.py", env).await;

    // Another image through the gate: it serves 100 % once promoted.
    let promote = format!("{endpoints}/toy:promote");
    let (s, e) = p.call(p.token(), Method::POST, &promote, Some(json!({"container": container(v2)}))).await;
    assert_eq!(s, 202, "{e}");
    let e = until(p, "toy", |e| e["promotion"].is_null()).await;
    assert_eq!(
        (e["image"].as_str(), e["revisions"][1]["role"].as_str()),
        (Some(v2), Some("stable")),
        "{e:#}"
    );
    assert_eq!(sums(p, "toy").await, json!([2.0, 4.0, 7.0]));

    // A revision whose example fails never takes traffic: its smoke test rolls it back.
    let (s, e) =
        p.call(p.token(), Method::POST, &promote, Some(json!({"container": container(broken)}))).await;
    assert_eq!(s, 202, "{e}");
    let e = until(p, "toy", |e| e["promotion"].is_null()).await;
    let kinds: Vec<&str> =
        e["events"].as_array().expect("events").iter().filter_map(|v| v["kind"].as_str()).collect();
    assert!(kinds.contains(&"rolled_back"), "{e:#}");
    assert_eq!(e["image"], json!(v2), "{e:#}");
    assert_eq!(sums(p, "toy").await, json!([2.0, 4.0, 7.0]));

    // By hand: back to the first image.
    let (s, e) = p.call(p.token(), Method::POST, &format!("{endpoints}/toy:rollback"), None).await;
    assert_eq!(s, 202, "{e}");
    assert_eq!(e["image"], json!(v1), "{e:#}");
    assert_eq!(sums(p, "toy").await, json!([1.0, 2.0, 3.5]));

    // A promotion of a model version to a container endpoint is refused, naming why.
    let (s, b) = p
        .call(
            p.token(),
            Method::POST,
            &promote,
            Some(json!({"model_version": "mv_01jabcdefghjkmnpqrstvwxyz0"})),
        )
        .await;
    assert_eq!(s, 400, "{b}");
    assert!(b["detail"].as_str().is_some_and(|d| d.contains("serves a container")), "{b}");

    let (s, e) = p.call(p.token(), Method::DELETE, &format!("{endpoints}/toy"), None).await;
    assert_eq!(s, 202, "{e}");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (s, _) = p.call(p.token(), Method::GET, &format!("{endpoints}/toy"), None).await;
        if s == 404 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the endpoint was not deleted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    route
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_that_cannot_run_fails_with_the_reason_and_bad_fields_are_named() {
    let p = TestPlatform::start(&QUICK_GATE).await;
    let images = tempfile::tempdir().expect("tempdir");
    let endpoints = format!("{}/endpoints", p.project_path());
    // No secrets file entry for the tenant: the revision fails, naming the secret.
    let v1 = toy_image(images.path(), "v1", &[]);
    let body = json!({"alias": "nosecret", "container": container(&v1.to_string_lossy())});
    let (s, e) = p.call(p.token(), Method::POST, &endpoints, Some(body)).await;
    assert_eq!(s, 202, "{e}");
    let e = until(&p, "nosecret", |e| e["status"] != "deploying").await;
    assert_eq!(e["status"], "failed", "{e:#}");
    assert!(e["message"].as_str().is_some_and(|m| m.contains("secret api-key")), "{e:#}");
    // Not an image layout at all.
    let body =
        json!({"alias": "notimage", "container": {"image": images.path().join("nothing"), "port": 8000}});
    let (s, e) = p.call(p.token(), Method::POST, &endpoints, Some(body)).await;
    assert_eq!(s, 202, "{e}");
    let e = until(&p, "notimage", |e| e["status"] != "deploying").await;
    assert!(
        e["message"].as_str().is_some_and(|m| m.contains("does not exist") && m.contains("OCI image layout")),
        "{e:#}"
    );
    // A directory that is no image layout.
    let body = json!({"alias": "notlayout", "container": {"image": images.path(), "port": 8000}});
    let (s, e) = p.call(p.token(), Method::POST, &endpoints, Some(body)).await;
    assert_eq!(s, 202, "{e}");
    let e = until(&p, "notlayout", |e| e["status"] != "deploying").await;
    assert!(e["message"].as_str().is_some_and(|m| m.contains("not an OCI image layout")), "{e:#}");

    for (container, names) in [
        (json!({"image": "x", "secrets": {"lower": "s"}}), "lower"),
        (json!({"image": "x", "secrets": {"PORT": "s"}}), "PORT"),
        (json!({"image": "x", "secrets": {"TOKEN": "a/b"}}), "a/b"),
        (json!({"image": "x", "health_path": "health"}), "health_path"),
        (json!({"image": "has space"}), "container.image"),
    ] {
        let body = json!({"alias": "bad", "container": container});
        let (s, b) = p.call(p.token(), Method::POST, &endpoints, Some(body)).await;
        assert_eq!((s, b["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{b}");
        assert!(b["detail"].as_str().is_some_and(|d| d.contains(names)), "{names}: {b}");
    }
    let both = json!({"alias": "bad", "model_version": "mv_01jabcdefghjkmnpqrstvwxyz0", "container": {"image": "x"}});
    let (s, b) = p.call(p.token(), Method::POST, &endpoints, Some(both)).await;
    assert!(s == 400 && b["detail"].as_str().is_some_and(|d| d.contains("exactly one")), "{b}");
}
