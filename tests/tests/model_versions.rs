//! Model versions over HTTP against the platform started in this process,
//! with real worker processes: a succeeded fit's outputs become exactly one
//! signed version, listed, read and downloaded only through its verified
//! manifest; a failed run has none, and neither has a succeeded run of a
//! method that fits no model (`describe`); a redelivered finalization seals
//! nothing twice; a replaced artifact or a changed manifest is refused
//! with `INTEGRITY_FAILURE`, audited, counted, and no URL is minted; a
//! version is invisible to another tenant; and the Cloud KMS signer (over
//! FakeKms) signs versions, a failed signature only delaying the success.

use aws_lc_rs::digest::{SHA256, digest};
use bytes::Bytes;
use mapi_domain::{AttemptNo, ModelVersionId, RunId};
use mapi_executor::ExecutionInfo;
use mapi_objects::{IfGeneration, ObjectKey, ObjectMeta};
use mapi_schema::tasks::{FINALIZE_PATH, FinalizeTask};
use mapi_schema::{AttemptDoc, ModelVersionDoc};
use mapi_signer::Signer;
use mapi_signer::local::LocalSigner;
use mapi_store::Query;
use mapi_tests::TestPlatform;
use mapi_tests::fake_kms::{FakeKms, KmsFault};
use reqwest::Method;
use serde_json::{Value, json};

const LONGLEY: &str = include_str!("../../examples/longley.csv");

fn sha256_hex(bytes: &[u8]) -> String {
    digest(&SHA256, bytes).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Submits a linear fit and waits until it ends; the run's view.
async fn fit(p: &TestPlatform) -> Value {
    let ds = p.upload(LONGLEY).await;
    let id = p
        .submit(
            json!({"method": "tabular.linear", "dataset": ds, "params": {"y": "employed"}, "timeout_s": 120}),
        )
        .await;
    p.wait_final(&id).await
}

async fn fetch(p: &TestPlatform, url: &str) -> Vec<u8> {
    let resp = p.output(url).await;
    assert_eq!(resp.status(), 200, "{url}");
    resp.bytes().await.expect("bytes").to_vec()
}

/// Every object under the run's bundle prefix.
async fn bundle_objects(p: &TestPlatform, run: &Value) -> Vec<ObjectMeta> {
    let prefix = format!(
        "t/{}/p/{}/runs/{}/bundle/",
        run["tenant"].as_str().expect("tenant"),
        run["project"].as_str().expect("project"),
        run["id"].as_str().expect("id")
    );
    p.platform.state.objects.list(&prefix, None, 100).await.expect("list").objects
}

/// Every model-version document in the store.
async fn version_docs(p: &TestPlatform) -> Vec<ModelVersionDoc> {
    let q = Query::new(<ModelVersionDoc as mapi_schema::Doc>::COLLECTION);
    let docs = p.platform.state.store.query(&q, None).await.expect("query");
    docs.iter().map(|d| d.decode().expect("decode")).collect()
}

async fn list_versions(p: &TestPlatform) -> Value {
    let (s, page) =
        p.call(p.token(), Method::GET, &format!("{}/model-versions", p.project_path()), None).await;
    assert_eq!(s, 200, "{page}");
    page
}

/// The finalize task of the run's current attempt, as the reconciler pushed it.
async fn finalize_task(p: &TestPlatform, run: &Value) -> FinalizeTask {
    let id = RunId::parse(run["id"].as_str().expect("id")).expect("run id");
    let attempt = AttemptNo(u32::try_from(run["attempt"].as_u64().expect("attempt")).expect("attempt"));
    let doc: AttemptDoc = mapi_schema::get(&*p.platform.state.store, &AttemptDoc::id_of(&id, attempt))
        .await
        .expect("get")
        .expect("attempt");
    let execution = ExecutionInfo {
        handle: doc.handle.clone().expect("handle"),
        nonce: Some(doc.nonce.clone()),
        run: Some(id.clone()),
        created: doc.submitted_at.expect("submitted"),
        started: doc.started,
        finished: doc.finished,
        task_count: doc.task_count,
        status: doc.status.clone().expect("status"),
    };
    FinalizeTask { run: id, attempt, execution }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successful_fit_becomes_exactly_one_signed_version() {
    let p = TestPlatform::start(&[]).await;
    let run = fit(&p).await;
    assert_eq!(run["state"], "succeeded", "{run:#}");
    let run_id = RunId::parse(run["id"].as_str().expect("id")).expect("run id");
    let id = ModelVersionId::of_run(&run_id).to_string();
    assert_eq!(run["model_version"], id.as_str(), "the run names its version");

    let page = list_versions(&p).await;
    let listed: Vec<&str> =
        page["model_versions"].as_array().expect("list").iter().filter_map(|v| v["id"].as_str()).collect();
    assert_eq!(listed, [id.as_str()]);

    // The manifest lists every output the run shows, with the SHA-256 of its bytes.
    let (s, version) = p.call(p.token(), Method::GET, &format!("/v1/model-versions/{id}"), None).await;
    assert_eq!(s, 200, "{version}");
    assert_eq!(version["run"], run["id"]);
    assert_eq!(version["method"], "tabular.linear");
    assert!(version["key_version"].as_str().expect("key version").starts_with("local/"), "{version}");
    let outputs = run["outputs"].as_array().expect("outputs");
    assert!(!outputs.is_empty(), "{run:#}");
    let artifacts = version["artifacts"].as_array().expect("artifacts");
    let mut expected = Vec::new();
    for out in outputs {
        let bytes = fetch(&p, out["url"].as_str().expect("url")).await;
        expected.push((
            out["name"].as_str().expect("name").to_owned(),
            bytes.len() as u64,
            sha256_hex(&bytes),
        ));
    }
    expected.sort();
    let mut pinned: Vec<(String, u64, String)> = artifacts
        .iter()
        .map(|a| {
            (
                a["name"].as_str().expect("name").to_owned(),
                a["size"].as_u64().expect("size"),
                a["sha256"].as_str().expect("sha256").to_owned(),
            )
        })
        .collect();
    pinned.sort();
    assert_eq!(pinned, expected);

    // The recorded SHA-256 is the stored manifest's; a signature lies beside it.
    let objects = bundle_objects(&p, &run).await;
    let names: Vec<&str> = objects.iter().map(|o| o.key.as_str().rsplit('/').next().unwrap_or("")).collect();
    assert_eq!(names, ["manifest.json", "manifest.sig.json"]);
    let (_, manifest) = p.platform.state.objects.get(&objects[0].key, None).await.expect("manifest");
    assert_eq!(version["manifest_sha256"], sha256_hex(&manifest).as_str());

    // The URLs fetch exactly the pinned bytes.
    let (s, urls) = p.call(p.token(), Method::POST, &format!("/v1/model-versions/{id}/urls"), None).await;
    assert_eq!(s, 200, "{urls}");
    let urls = urls["artifacts"].as_array().expect("artifacts");
    assert_eq!(urls.len(), artifacts.len());
    for a in urls {
        let bytes = fetch(&p, a["url"].as_str().expect("url")).await;
        assert_eq!(a["sha256"], sha256_hex(&bytes).as_str(), "{a}");
    }

    // The CLI shows the same.
    let home = tempfile::tempdir().expect("tempdir");
    let mapi = |args: &[&str]| {
        let mut c = tokio::process::Command::new(mapi_tests::binary("mapi"));
        c.args(["--url", &p.platform.url, "--token", p.token()]).args(args).env("MAPI_HOME", home.path());
        c.output()
    };
    let out = mapi(&["--json", "models", "versions", "ls", "--tenant", "dev", "--project", "default"])
        .await
        .expect("mapi models versions ls");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listed: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(listed["model_versions"][0]["id"], id.as_str());
    let out = mapi(&["models", "versions", "get", &id]).await.expect("mapi models versions get");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains(&format!("model version {id}")), "{text}");
    for (name, _, sha) in &expected {
        assert!(text.contains(&format!("{name}  ")) && text.contains(sha.as_str()), "{name} {sha}: {text}");
    }
    let out = mapi(&["--json", "models", "versions", "urls", &id]).await.expect("mapi models versions urls");
    let minted: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let url = minted["artifacts"][0]["url"].as_str().expect("url");
    assert_eq!(minted["artifacts"][0]["sha256"], sha256_hex(&fetch(&p, url).await).as_str());

    // A redelivered finalization makes no second version and no second manifest.
    let task = finalize_task(&p, &run).await;
    let internal = p.platform.state.config.secrets.internal_token.clone();
    for _ in 0..2 {
        let (s, answer) = p
            .call(&internal, Method::POST, FINALIZE_PATH, Some(serde_json::to_value(&task).expect("task")))
            .await;
        assert_eq!((s, answer["outcome"].as_str()), (200, Some("already finalized")), "{answer}");
    }
    let docs = version_docs(&p).await;
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0].id.as_str(), id);
    let again = bundle_objects(&p, &run).await;
    assert_eq!(again, objects, "the bundle's objects are the ones first written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_has_no_version() {
    let p = TestPlatform::start(&[]).await;
    let ds = p.upload(LONGLEY).await;
    let id = p.submit(json!({"method": "diag.fail", "dataset": ds, "params": {"message": "no"}})).await;
    let run = p.wait_final(&id).await;
    assert_eq!(run["state"], "failed", "{run:#}");
    assert!(run["model_version"].is_null(), "{run:#}");
    assert_eq!(list_versions(&p).await["model_versions"], json!([]));
    assert!(version_docs(&p).await.is_empty());
    assert!(bundle_objects(&p, &run).await.is_empty(), "nothing was sealed");
    let missing = ModelVersionId::of_run(&RunId::parse(&id).expect("run id"));
    let (s, body) = p.call(p.token(), Method::GET, &format!("/v1/model-versions/{missing}"), None).await;
    assert_eq!((s, body["code"].as_str()), (404, Some("NOT_FOUND")), "{body}");
}

/// A method that fits no model succeeds with its outputs and no version:
/// no bundle, no record, nothing listed beside the fit's version, nothing
/// sealed by a redelivered finalization, and the CLI names no model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_describe_run_succeeds_with_no_version() {
    let p = TestPlatform::start(&[]).await;
    let fitted = fit(&p).await;
    let ds = p.upload(LONGLEY).await;
    let id = p.submit(json!({"method": "describe", "dataset": ds, "timeout_s": 120})).await;
    let run = p.wait_final(&id).await;
    assert_eq!(run["state"], "succeeded", "{run:#}");
    assert!(run["model_version"].is_null(), "{run:#}");
    let outputs: Vec<&str> =
        run["outputs"].as_array().expect("outputs").iter().filter_map(|o| o["name"].as_str()).collect();
    assert_eq!(outputs, ["summary.json"], "{run:#}");
    assert!(bundle_objects(&p, &run).await.is_empty(), "nothing was sealed");
    let missing = ModelVersionId::of_run(&RunId::parse(&id).expect("run id"));
    let (s, body) = p.call(p.token(), Method::GET, &format!("/v1/model-versions/{missing}"), None).await;
    assert_eq!((s, body["code"].as_str()), (404, Some("NOT_FOUND")), "{body}");

    // The listing shows the fit's version and nothing of the describe run.
    let page = list_versions(&p).await;
    let listed: Vec<&str> =
        page["model_versions"].as_array().expect("list").iter().filter_map(|v| v["run"].as_str()).collect();
    assert_eq!(listed, [fitted["id"].as_str().expect("fit id")], "{page:#}");

    // A redelivered finalization seals nothing either.
    let task = finalize_task(&p, &run).await;
    let internal = p.platform.state.config.secrets.internal_token.clone();
    let (s, answer) = p
        .call(&internal, Method::POST, FINALIZE_PATH, Some(serde_json::to_value(&task).expect("task")))
        .await;
    assert_eq!((s, answer["outcome"].as_str()), (200, Some("already finalized")), "{answer}");
    let docs = version_docs(&p).await;
    assert_eq!(docs.iter().map(|d| d.run.as_str()).collect::<Vec<_>>(), listed);
    assert!(bundle_objects(&p, &run).await.is_empty());

    // The CLI's description has outputs and no model line; the fit's has one.
    let home = tempfile::tempdir().expect("tempdir");
    let described = |run: &str| {
        let out = std::process::Command::new(mapi_tests::binary("mapi"))
            .args(["--url", &p.platform.url, "--token", p.token(), "runs", "get", run])
            .env("MAPI_HOME", home.path())
            .output()
            .expect("mapi runs get");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = described(&id);
    assert!(text.contains("summary.json") && text.contains("state     succeeded"), "{text}");
    assert!(!text.lines().any(|l| l.starts_with("model ")), "{text}");
    let text = described(fitted["id"].as_str().expect("fit id"));
    assert!(text.lines().any(|l| l.starts_with("model     mv_")), "{text}");
}

/// The audit entries of `action`, as an operator reads them.
async fn audited(p: &TestPlatform, operator: &str, action: &str) -> Vec<Value> {
    let (s, log) =
        p.call(operator, Method::GET, &format!("/v1/admin/audit?page_size=200&action={action}"), None).await;
    assert_eq!(s, 200, "{log}");
    log["items"].as_array().expect("items").clone()
}

async fn integrity_failures(p: &TestPlatform) -> u64 {
    let text = p.http.get(p.url("/metrics")).send().await.expect("metrics").text().await.expect("text");
    text.lines()
        .find_map(|l| l.strip_prefix("mapi_bundle_integrity_failures_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_artifact_or_manifest_is_refused_audited_and_never_linked() {
    let p = TestPlatform::start(&[]).await;
    let operator = p.login("admin@dev.local").await;
    let run = fit(&p).await;
    assert_eq!(run["state"], "succeeded", "{run:#}");
    let id = run["model_version"].as_str().expect("version").to_owned();
    let urls_path = format!("/v1/model-versions/{id}/urls");
    assert_eq!(p.call(p.token(), Method::POST, &urls_path, None).await.0, 200, "intact, it is served");
    assert_eq!(integrity_failures(&p).await, 0);

    // The artifact is overwritten behind the platform's back.
    let (_, version) = p.call(p.token(), Method::GET, &format!("/v1/model-versions/{id}"), None).await;
    let key = ObjectKey::parse(version["artifacts"][0]["key"].as_str().expect("key")).expect("object key");
    let objects = &p.platform.state.objects;
    let (_, original) = objects.get(&key, None).await.expect("artifact");
    objects
        .put(&key, Bytes::from_static(b"{\"coefficients\":[]}"), "application/json", IfGeneration::Any)
        .await
        .expect("overwrite");
    let (s, body) = p.call(p.token(), Method::POST, &urls_path, None).await;
    assert_eq!((s, body["code"].as_str()), (409, Some("INTEGRITY_FAILURE")), "{body}");
    assert!(!body.to_string().contains("http"), "no URL in a refusal: {body}");
    let entries = audited(&p, &operator, "model_version.urls").await;
    assert_eq!(entries.len(), 2, "the links minted, then the refusal: {entries:#?}");
    assert_eq!(entries[1]["outcome"], "success", "newest first: {entries:#?}");
    let entries = audited(&p, &operator, "model_version.urls&outcome=failed").await;
    assert_eq!(entries.len(), 1, "{entries:#?}");
    let e = &entries[0];
    assert_eq!(e["outcome"], "failed");
    assert_eq!(e["problem"], "INTEGRITY_FAILURE");
    assert_eq!(e["resource"], format!("model_versions/{id}").as_str());
    assert_eq!(e["tenant"], run["tenant"]);
    assert!(e["actor"].is_string(), "who asked: {e}");
    assert!(e["detail"].as_str().expect("detail").contains(key.as_str()), "what failed: {e}");
    assert_eq!(integrity_failures(&p).await, 1);

    // The same bytes again are a new generation: still not what was signed.
    objects.put(&key, original, "application/json", IfGeneration::Any).await.expect("restore bytes");
    let (s, body) = p.call(p.token(), Method::POST, &urls_path, None).await;
    assert_eq!((s, body["code"].as_str()), (409, Some("INTEGRITY_FAILURE")), "{body}");

    // The manifest as it was, but signed by a key the platform does not trust.
    let bundle = version["bundle"].as_str().expect("bundle");
    let manifest_key = ObjectKey::parse(&format!("{bundle}/manifest.json")).expect("manifest key");
    let sig_key = ObjectKey::parse(&format!("{bundle}/manifest.sig.json")).expect("signature key");
    let (_, manifest_bytes) = objects.get(&manifest_key, None).await.expect("manifest");
    let (_, genuine) = objects.get(&sig_key, None).await.expect("signature");
    let stranger = LocalSigner::from_pem(&LocalSigner::generate_pem().expect("pem"), &[]).expect("signer");
    let foreign = serde_json::to_vec(&stranger.sign(&manifest_bytes).await.expect("sign")).expect("json");
    objects
        .put(&sig_key, Bytes::from(foreign), "application/json", IfGeneration::Any)
        .await
        .expect("replace");
    let (s, body) = p.call(p.token(), Method::GET, &format!("/v1/model-versions/{id}"), None).await;
    assert_eq!((s, body["code"].as_str()), (409, Some("INTEGRITY_FAILURE")), "{body}");
    objects.put(&sig_key, genuine, "application/json", IfGeneration::Any).await.expect("restore signature");
    let (s, body) = p.call(p.token(), Method::GET, &format!("/v1/model-versions/{id}"), None).await;
    assert_eq!(s, 200, "the genuine signature verifies again: {body}");

    // A manifest changed by one byte no longer verifies: not even read.
    let bytes = manifest_bytes;
    let forged = String::from_utf8(bytes.to_vec()).expect("utf8").replacen("\"size\":", "\"size\":1", 1);
    objects
        .put(&manifest_key, Bytes::from(forged), "application/json", IfGeneration::Any)
        .await
        .expect("forge");
    let (s, body) = p.call(p.token(), Method::GET, &format!("/v1/model-versions/{id}"), None).await;
    assert_eq!((s, body["code"].as_str()), (409, Some("INTEGRITY_FAILURE")), "{body}");
    assert_eq!(audited(&p, &operator, "model_version.read").await.len(), 2);
    assert_eq!(audited(&p, &operator, "model_version.urls&outcome=failed").await.len(), 2);
    assert_eq!(integrity_failures(&p).await, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_is_invisible_to_another_tenant() {
    let p =
        TestPlatform::start(&[("MAPI_DEV_ACCOUNTS", "admin@dev.local,dev@dev.local,owner@other.test")]).await;
    let operator = p.login("admin@dev.local").await;
    let eve = p.create_tenant(&operator, "other", "internal").await;

    let run = fit(&p).await;
    let id = run["model_version"].as_str().expect("version").to_owned();
    let missing = "mv_01arz3ndektsv4rrffq69g5fav";
    let answer = |(s, b): (u16, Value), id: &str| {
        (
            s,
            b["code"].as_str().unwrap_or_default().to_owned(),
            b["detail"].as_str().unwrap_or_default().replace(id, "<id>"),
        )
    };
    for (method, path) in
        [(Method::GET, "/v1/model-versions/{}"), (Method::POST, "/v1/model-versions/{}/urls")]
    {
        let theirs = answer(p.call(&eve, method.clone(), &path.replace("{}", &id), None).await, &id);
        let nothing = answer(p.call(&eve, method.clone(), &path.replace("{}", missing), None).await, missing);
        assert_eq!(theirs.0, 404, "{path}: {theirs:?}");
        assert_eq!(theirs, nothing, "{path}: another tenant's version answers as a missing one");
    }
    let (s, _) = p.call(&eve, Method::GET, &format!("{}/model-versions", p.project_path()), None).await;
    assert_eq!(s, 404, "another tenant's project cannot be listed");
    let (s, page) =
        p.call(&eve, Method::GET, "/v1/tenants/other/projects/default/model-versions", None).await;
    assert_eq!((s, page["model_versions"].clone()), (200, json!([])), "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kms_signs_versions_and_a_failed_signature_only_delays_the_success() {
    let kms = FakeKms::start().await;
    let active = kms.version(1);
    let p = TestPlatform::start(&[
        ("MAPI_SIGNER", "kms"),
        ("MAPI_KMS_KEY_VERSION", active.as_str()),
        ("MAPI_KMS_ENDPOINT", kms.url.as_str()),
    ])
    .await;
    // The first signature KMS returns is corrupt: that seal fails (the
    // manifest is stored, unsigned), the finalization answers 503 and is
    // redelivered, and the next seal signs the stored manifest.
    kms.fail_next(KmsFault::CorruptSignatureCrc);
    let run = fit(&p).await;
    assert_eq!(run["state"], "succeeded", "{run:#}");
    let signs = kms.calls().iter().filter(|c| c.method == "asymmetricSign").count();
    assert_eq!(signs, 2, "one refused signature, one kept");
    let id = run["model_version"].as_str().expect("version").to_owned();
    let (s, version) = p.call(p.token(), Method::GET, &format!("/v1/model-versions/{id}"), None).await;
    assert_eq!(s, 200, "{version}");
    assert_eq!(version["key_version"], active.as_str());
    let (s, urls) = p.call(p.token(), Method::POST, &format!("/v1/model-versions/{id}/urls"), None).await;
    assert_eq!(s, 200, "{urls}");
    assert_eq!(version_docs(&p).await.len(), 1);
    assert_eq!(bundle_objects(&p, &run).await.len(), 2);
}

/// Model versions are the matrix's `model` resource: a token scoped
/// `models:read` (or `score:*`) reads them; one scoped only for datasets
/// or workflows does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_scopes_follow_the_model_row_of_the_matrix() {
    let p = TestPlatform::start(&[]).await;
    let run = fit(&p).await;
    let id = run["model_version"].as_str().expect("version").to_owned();
    let session = p.login("dev@dev.local").await;
    for (scopes, allowed) in [
        (json!(["models:read"]), true),
        (json!(["score:*"]), true),
        (json!(["datasets:write"]), false),
        (json!(["workflows:run"]), false),
    ] {
        let (s, created) = p
            .call(
                &session,
                Method::POST,
                &format!("{}/tokens", p.project_path()),
                Some(json!({"name": "scoped", "scopes": scopes})),
            )
            .await;
        assert_eq!(s, 201, "{created}");
        let secret = created["secret"].as_str().expect("secret").to_owned();
        let (get, body) = p.call(&secret, Method::GET, &format!("/v1/model-versions/{id}"), None).await;
        let (list, _) =
            p.call(&secret, Method::GET, &format!("{}/model-versions", p.project_path()), None).await;
        if allowed {
            assert_eq!((get, list), (200, 200), "{scopes}: {body}");
        } else {
            assert_eq!((get, list), (403, 403), "{scopes}: {body}");
        }
    }
}

/// Runs `mapi` with `args` in `cwd` against `url` as `token`; status, stdout, stderr.
async fn mapi_in(url: &str, token: &str, cwd: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let home = cwd.join(".no-home");
    let out = tokio::process::Command::new(mapi_tests::binary("mapi"))
        .args(["--url", url, "--token", token])
        .args(args)
        .current_dir(cwd)
        .env("MAPI_HOME", home)
        .output()
        .await
        .expect("run mapi");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// Every file under `dir`, relative, sorted.
fn files_under(dir: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                todo.push(path);
            } else {
                found.push(path.strip_prefix(dir).expect("under").to_string_lossy().into_owned());
            }
        }
    }
    found.sort();
    found
}

/// `mapi models versions download` writes the fit's outputs, byte for
/// byte, into `./<version id>/` (or `--dir`), one line per file; a second
/// download keeps the files; a file changed since is refused without
/// `--force` and replaced with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_downloads_a_version_into_a_directory_checked_against_its_manifest() {
    let p = TestPlatform::start(&[]).await;
    let run = fit(&p).await;
    assert_eq!(run["state"], "succeeded", "{run:#}");
    let id = run["model_version"].as_str().expect("version").to_owned();
    let mut outputs = Vec::new();
    for out in run["outputs"].as_array().expect("outputs") {
        let bytes = fetch(&p, out["url"].as_str().expect("url")).await;
        outputs.push((out["name"].as_str().expect("name").to_owned(), bytes));
    }
    outputs.sort();
    let cwd = tempfile::tempdir().expect("tempdir");
    let (url, token) = (p.platform.url.clone(), p.token().to_owned());
    let download = async |args: &[&str]| {
        let mut all = vec!["models", "versions", "download", id.as_str()];
        all.extend_from_slice(args);
        mapi_in(&url, &token, cwd.path(), &all).await
    };
    let (code, out, err) = download(&[]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    let dir = cwd.path().join(&id);
    let names: Vec<String> = outputs.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(files_under(&dir), names, "the artifacts and nothing else (no temporary file)");
    for (name, bytes) in &outputs {
        assert_eq!(&std::fs::read(dir.join(name)).expect("downloaded"), bytes, "{name}");
        let line = out.lines().find(|l| l.starts_with(&format!("{id}/{name}  "))).expect("a line per file");
        assert!(line.ends_with(" bytes") || line.ends_with(" KiB"), "a human size: {line}");
    }
    assert_eq!(out.lines().count(), outputs.len(), "{out}");

    let (code, out, err) = download(&[]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().all(|l| l.ends_with("(already there)")), "{out}");

    let (name, genuine) = &outputs[0];
    let changed = dir.join(name);
    std::fs::write(&changed, b"{\"coefficients\": []}").expect("change a file");
    let (code, _, err) = download(&[]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&changed.strip_prefix(cwd.path()).expect("rel").display().to_string()), "{err}");
    assert!(err.contains("--force"), "says what to do: {err}");
    assert_eq!(std::fs::read(&changed).expect("kept"), b"{\"coefficients\": []}", "untouched");
    let (code, out, err) = download(&["--force"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(&std::fs::read(&changed).expect("replaced"), genuine);
    assert!(out.lines().any(|l| l.starts_with(&format!("{id}/{name}  ")) && !l.ends_with("(already there)")));

    let (code, out, err) = mapi_in(
        &url,
        &token,
        cwd.path(),
        &["--json", "models", "versions", "download", &id, "--dir", "elsewhere/model"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(report["model_version"], id.as_str());
    let files = report["files"].as_array().expect("files");
    assert_eq!(files.len(), outputs.len());
    for (f, (name, bytes)) in files.iter().zip(&outputs) {
        assert_eq!((f["name"].as_str(), f["outcome"].as_str()), (Some(name.as_str()), Some("written")));
        assert_eq!(f["sha256"], sha256_hex(bytes).as_str());
        assert_eq!(std::fs::read(cwd.path().join("elsewhere/model").join(name)).expect("file"), *bytes);
    }
}

/// A platform that answers the `urls` route with what the test sets, and
/// serves blobs: `good` and `bad` (same length, other bytes), `long`, and
/// `gone` (403, as an expired URL).
async fn fake_platform(answer: std::sync::Arc<std::sync::Mutex<Value>>) -> String {
    use axum::routing::{get, post};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let app = axum::Router::new()
        .route(
            "/v1/model-versions/{id}/urls",
            post(async move || axum::Json(answer.lock().expect("answer").clone())),
        )
        .route(
            "/blob/{which}",
            get(async |axum::extract::Path(which): axum::extract::Path<String>| match which.as_str() {
                "good" => (http::StatusCode::OK, "hello"),
                "bad" => (http::StatusCode::OK, "HELLO"),
                "long" => (http::StatusCode::OK, "hello, and more"),
                _ => (http::StatusCode::FORBIDDEN, "expired"),
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

/// What the CLI does with bytes that are not the ones the manifest pins,
/// a name that would leave the directory, and a URL that answers 403: it
/// fails naming the artifact, and keeps nothing under its name (a verified
/// file before it stays).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_that_is_not_the_pinned_bytes_is_not_kept() {
    let answer = std::sync::Arc::new(std::sync::Mutex::new(Value::Null));
    let base = fake_platform(answer.clone()).await;
    let id = "mv_01arz3ndektsv4rrffq69g5fav";
    let artifact = |name: &str, blob: &str| json!({"name": name, "size": 5, "sha256": sha256_hex(b"hello"), "url": format!("{base}/blob/{blob}")});
    let cases = [
        ("bad", vec![artifact("model.json", "good"), artifact("metrics.json", "bad")], "metrics.json"),
        ("long", vec![artifact("metrics.json", "long")], "metrics.json"),
        ("gone", vec![artifact("metrics.json", "gone")], "metrics.json"),
        ("escape", vec![artifact("../escape.json", "good")], "../escape.json"),
    ];
    for (case, artifacts, named) in cases {
        *answer.lock().expect("answer") =
            json!({"model_version": id, "expires_in_s": 900, "artifacts": artifacts});
        let cwd = tempfile::tempdir().expect("tempdir");
        let (code, out, err) =
            mapi_in(&base, "mapi_x", cwd.path(), &["models", "versions", "download", id, "--dir", "out"])
                .await;
        assert_eq!(code, 1, "{case}: {out}\n{err}");
        assert!(err.contains(named), "{case}: names the artifact: {err}");
        let out_dir = cwd.path().join("out");
        let kept = if out_dir.exists() { files_under(&out_dir) } else { Vec::new() };
        let verified: Vec<String> = if case == "bad" { vec!["model.json".to_owned()] } else { Vec::new() };
        assert_eq!(kept, verified, "{case}: only verified files, no temporary one");
        assert!(!cwd.path().join("escape.json").exists(), "{case}");
        if case == "bad" {
            assert_eq!(std::fs::read(out_dir.join("model.json")).expect("verified"), b"hello");
            assert!(err.contains("manifest pins"), "{err}");
        }
    }
}

/// The file a local object store keeps `key`'s bytes of `generation` in, under the platform's home.
fn blob_file(p: &TestPlatform, key: &str, generation: i64) -> std::path::PathBuf {
    let name = format!("{}#{generation}", key.rsplit('/').next().expect("name"));
    let mut stack = vec![p._home.path().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n.to_string_lossy() == name)
                && path.to_string_lossy().contains(key.rsplit_once('/').expect("dir").0)
            {
                return path;
            }
        }
    }
    panic!("no file holds {key} at generation {generation}");
}

/// Bytes changed on disk under the same generation (the metadata the store
/// keeps still matches) are found by their content: no link is minted, and
/// serving the version is refused too, each refusal audited and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_changed_in_place_are_refused_for_links_and_for_serving_audited_and_counted() {
    let p = TestPlatform::start(&[]).await;
    let operator = p.login("admin@dev.local").await;
    let run = fit(&p).await;
    let id = run["model_version"].as_str().expect("version").to_owned();
    let (_, version) = p.call(p.token(), Method::GET, &format!("/v1/model-versions/{id}"), None).await;
    let artifact = version["artifacts"]
        .as_array()
        .expect("artifacts")
        .iter()
        .find(|a| a["name"] == "model.json")
        .expect("model.json")
        .clone();
    let key = artifact["key"].as_str().expect("key");
    let file = blob_file(&p, key, artifact["generation"].as_i64().expect("generation"));
    let bytes = std::fs::read(&file).expect("read");
    // One digit changed: same size, same generation, other bytes.
    let at = bytes.iter().position(u8::is_ascii_digit).expect("a digit");
    let mut changed = bytes.clone();
    changed[at] = if bytes[at] == b'9' { b'8' } else { bytes[at] + 1 };
    std::fs::write(&file, &changed).expect("edit in place");

    let (s, body) = p.call(p.token(), Method::POST, &format!("/v1/model-versions/{id}/urls"), None).await;
    assert_eq!((s, body["code"].as_str()), (409, Some("INTEGRITY_FAILURE")), "{body}");
    assert_eq!(integrity_failures(&p).await, 1);

    let endpoints = format!("{}/endpoints", p.project_path());
    let serve = json!({"alias": "changed", "model_version": id});
    let (s, body) = p.call(p.token(), Method::POST, &endpoints, Some(serve)).await;
    assert_eq!((s, body["code"].as_str()), (409, Some("INTEGRITY_FAILURE")), "{body}");
    assert_eq!(integrity_failures(&p).await, 2, "the endpoint's refusal is counted");
    let entries = audited(&p, &operator, "endpoint.create&outcome=failed").await;
    assert_eq!(entries.len(), 1, "and audited: {entries:#?}");
    assert_eq!(entries[0]["problem"], "INTEGRITY_FAILURE");
    assert!(entries[0]["detail"].as_str().expect("detail").contains(key), "{entries:#?}");
    let (s, list) = p.call(p.token(), Method::GET, &endpoints, None).await;
    assert_eq!((s, list["endpoints"].as_array().map(Vec::len)), (200, Some(0)), "nothing was made: {list}");

    std::fs::write(&file, &bytes).expect("restore");
    let (s, body) = p.call(p.token(), Method::POST, &format!("/v1/model-versions/{id}/urls"), None).await;
    assert_eq!(s, 200, "the signed bytes are linked again: {body}");
}

/// A bundle verifies outside the platform: `examples/verify_bundle.py`
/// (Python's `cryptography`, none of mapi's code) checks the signed manifest
/// against the JSON Web Key Set the platform serves without credentials, and
/// every downloaded artifact against the manifest; a key set pinned earlier
/// that holds another key under the signer's id fails it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_verifies_in_python_against_the_published_keys() {
    use base64::Engine;
    let p = TestPlatform::start(&[]).await;
    let run = fit(&p).await;
    let id = run["model_version"].as_str().expect("version").to_owned();

    let resp = p.http.get(p.url("/v1/signing-keys")).send().await.expect("keys");
    assert_eq!(resp.status(), 200, "public keys need no credentials");
    let keys: Value = resp.json().await.expect("json");
    let active = keys["active"].as_str().expect("active").to_owned();
    let key = keys["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .find(|k| k["kid"] == active.as_str())
        .expect("active key");
    assert_eq!(
        (key["kty"].as_str(), key["crv"].as_str(), key["alg"].as_str()),
        (Some("EC"), Some("P-256"), Some("ES256"))
    );
    assert!(
        keys.to_string().find("PRIVATE").is_none() && key.get("d").is_none(),
        "public parts only: {keys}"
    );

    let (s, signed) =
        p.call(p.token(), Method::GET, &format!("/v1/model-versions/{id}/manifest"), None).await;
    assert_eq!(s, 200, "{signed}");
    assert_eq!(signed["signature"]["key_version"], active.as_str());
    let sha = digest(&SHA256, signed["manifest"].as_str().expect("manifest").as_bytes());
    let sha: String = sha.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(signed["manifest_sha256"], sha.as_str(), "the exact signed bytes");

    let verifier = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/verify_bundle.py");
    let verify = |extra: &[&str]| {
        std::process::Command::new("/usr/bin/python3")
            .arg(&verifier)
            .args(["--url", &p.platform.url, "--token", p.token()])
            .args(extra)
            .arg(&id)
            .output()
            .expect("python3")
    };
    // The platform serves this process's runtime: the verifier runs off it.
    let out = tokio::task::block_in_place(|| verify(&[]));
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{said}");
    assert!(said.contains(&format!("verified {id}")) && said.contains(&active), "{said}");

    // Pinned earlier: another key under the same id. The signature must not verify.
    let stranger = LocalSigner::from_pem(&LocalSigner::generate_pem().expect("pem"), &[]).expect("signer");
    let mapi_signer::KeyMaterial::Ec { x, y } =
        stranger.trusted_keys().export()[0].material().expect("material")
    else {
        panic!("a local key is EC")
    };
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let mut other = key.clone();
    (other["x"], other["y"]) = (json!(b64(&x)), json!(b64(&y)));
    let pinned = json!({"keys": [other], "active": active});
    let file = tempfile::NamedTempFile::new().expect("temp");
    std::fs::write(file.path(), pinned.to_string()).expect("write");
    let path = file.path().to_string_lossy().into_owned();
    let out = tokio::task::block_in_place(|| verify(&["--keys", &path]));
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("signature does not verify"), "{said}");
}
