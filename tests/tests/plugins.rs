//! Plugins over HTTP: a project admin (or a `plugins:publish` token)
//! publishes a package, which is checked whole (a manifest's mistake named
//! by its line), kept immutable per version (the same package again is the
//! same version; other contents are refused), listed, shown and deleted,
//! each publish and delete audited; a runner and a viewer may only read,
//! another tenant sees nothing.

use std::sync::Arc;

use mapi_tests::{Options, TestPlatform};
use reqwest::Method;
use serde_json::{Value, json};

const ACCOUNTS: &str = "admin@dev.local,dev@dev.local,owner@acme.test,runner@acme.test,owner@other.test";
const BASE: &str = "/v1/tenants/acme/projects/default";

const MANIFEST: &str = r#"name = "churn"
version = "1.0.0"
base = "base-ml"
description = "Churn models"

[[methods]]
name = "logit"
summary = "A logistic regression"
entry = "model:fit"
outputs = ["model.json"]
model = "model.json"

[[methods.params]]
name = "y"
kind = "column"
required = true
"#;

/// The package of a plugin directory holding `manifest` and `model.py`.
fn package(manifest: &str, source: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("mapi-plugin.toml"), manifest).expect("manifest");
    std::fs::write(dir.path().join("model.py"), source).expect("source");
    mapi_plugins::package::pack(dir.path()).expect("pack")
}

async fn publish(p: &TestPlatform, token: &str, bytes: Vec<u8>) -> (u16, Value) {
    let resp = p
        .http
        .post(p.url(&format!("{BASE}/plugins")))
        .bearer_auth(token)
        .header("content-type", "application/x-tar")
        .body(bytes)
        .send()
        .await
        .expect("publish");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_version_is_published_once_read_by_all_and_deleted_by_admins() {
    let executor = Arc::new(mapi_executor::scripted::ScriptedExecutor::default());
    let options = Options { background: false, executor: Some(executor), ..Default::default() };
    let p = TestPlatform::start_with(&[("MAPI_DEV_ACCOUNTS", ACCOUNTS)], options).await;
    let operator = p.login("admin@dev.local").await;
    let admin = p.create_tenant(&operator, "acme", "verified").await;
    let body = json!({"email": "runner@acme.test", "role": "runner"});
    let (s, b) = p.call(&admin, Method::POST, "/v1/tenants/acme/members", Some(body)).await;
    assert_eq!(s, 201, "{b}");
    let runner = p.login("runner@acme.test").await;
    let other = p.create_tenant(&operator, "other", "verified").await;
    let source = "def fit(ctx):\n    ctx.write_json('model.json', {})\n";

    let (s, b) = publish(&p, &runner, package(MANIFEST, source)).await;
    assert_eq!(s, 403, "a runner publishes nothing: {b}");
    let (s, b) = publish(&p, &other, package(MANIFEST, source)).await;
    assert_eq!(s, 404, "another tenant sees no project: {b}");
    let (s, bad) = publish(&p, &admin, package(&MANIFEST.replace("base-ml", "ubuntu"), source)).await;
    assert_eq!((s, bad["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{bad}");
    let detail = bad["detail"].as_str().unwrap_or_default();
    assert!(detail.starts_with("mapi-plugin.toml line 3: base `ubuntu` is not a base image"), "{bad}");
    let (s, bad) = publish(&p, &admin, b"not a tar at all".to_vec()).await;
    assert_eq!(s, 400, "{bad}");

    let (s, made) = publish(&p, &admin, package(MANIFEST, source)).await;
    assert_eq!(s, 201, "{made}");
    assert_eq!((made["name"].as_str(), made["version"].as_str()), (Some("churn"), Some("1.0.0")));
    assert_eq!(made["methods"][0]["name"], "p.churn.logit", "{made}");
    assert_eq!(made["methods"][0]["params"][0]["kind"], "column", "{made}");
    let (s, same) = publish(&p, &admin, package(MANIFEST, source)).await;
    assert_eq!((s, &same["sha256"]), (200, &made["sha256"]), "the same package is the same version: {same}");
    let (s, changed) = publish(&p, &admin, package(MANIFEST, "def fit(ctx):\n    pass\n")).await;
    assert_eq!((s, changed["code"].as_str()), (409, Some("ALREADY_EXISTS")), "{changed}");
    let next = MANIFEST.replace("1.0.0", "1.1.0");
    let (s, b) = publish(&p, &admin, package(&next, "def fit(ctx):\n    pass\n")).await;
    assert_eq!(s, 201, "{b}");

    let (s, page) = p.call(&runner, Method::GET, &format!("{BASE}/plugins"), None).await;
    assert_eq!(s, 200, "{page}");
    let versions: Vec<&str> =
        page["plugins"].as_array().expect("plugins").iter().filter_map(|v| v["version"].as_str()).collect();
    assert_eq!(versions.len(), 2, "{page}");
    let (s, shown) = p.call(&runner, Method::GET, &format!("{BASE}/plugins/churn"), None).await;
    let newest: Vec<&str> =
        shown["plugins"].as_array().expect("plugins").iter().filter_map(|v| v["version"].as_str()).collect();
    assert_eq!((s, newest), (200, vec!["1.1.0", "1.0.0"]), "newest version first: {shown}");
    let (s, b) = p.call(&runner, Method::GET, &format!("{BASE}/plugins/nope"), None).await;
    assert_eq!(s, 404, "{b}");
    let (s, b) = p.call(&other, Method::GET, &format!("{BASE}/plugins"), None).await;
    assert_eq!(s, 404, "{b}");

    let one = format!("{BASE}/plugins/churn/1.0.0");
    let (s, b) = p.call(&runner, Method::DELETE, &one, None).await;
    assert_eq!(s, 403, "{b}");
    let (s, _) = p.call(&admin, Method::DELETE, &one, None).await;
    assert_eq!(s, 204);
    let (s, b) = p.call(&admin, Method::DELETE, &one, None).await;
    assert_eq!(s, 404, "{b}");
    let (s, b) = p.call(&admin, Method::DELETE, &format!("{BASE}/plugins/%C3%B0/0.1.0"), None).await;
    assert_eq!(s, 404, "a name no manifest can have names nothing: {b}");

    // A token with plugins:publish publishes; one without may not.
    let token_body = json!({"name": "ci", "scopes": ["plugins:publish"]});
    let (s, t) = p.call(&admin, Method::POST, &format!("{BASE}/tokens"), Some(token_body)).await;
    assert_eq!(s, 201, "{t}");
    let ci = t["secret"].as_str().expect("secret").to_owned();
    let (s, b) = publish(&p, &ci, package(&MANIFEST.replace("1.0.0", "2.0.0"), source)).await;
    assert_eq!(s, 201, "{b}");
    let read_only = json!({"name": "reader", "scopes": ["models:read"]});
    let (s, t) = p.call(&admin, Method::POST, &format!("{BASE}/tokens"), Some(read_only)).await;
    assert_eq!(s, 201, "{t}");
    let reader = t["secret"].as_str().expect("secret").to_owned();
    let (s, b) = publish(&p, &reader, package(&MANIFEST.replace("1.0.0", "3.0.0"), source)).await;
    assert_eq!(s, 403, "{b}");

    let (_, log) = p.call(&admin, Method::GET, "/v1/tenants/acme/audit?limit=100", None).await;
    let entries = log["items"].as_array().expect("items");
    let count = |action: &str, outcome: &str| {
        entries.iter().filter(|e| e["action"] == action && e["outcome"] == outcome).count()
    };
    assert_eq!((count("plugin.publish", "success"), count("plugin.delete", "success")), (3, 1), "{log:#}");
    let refused = (count("plugin.create", "denied"), count("plugin.delete", "denied"));
    assert!(refused.0 >= 2 && refused.1 == 1, "refusals are audited too: {refused:?} {log:#}");
}

/// `mapi plugins publish DIR` checks the directory before sending it (a manifest's mistake is
/// named with its line and nothing is published), publishes it, and `ls`, `show` and `rm` read
/// and delete what it published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_publishes_a_directory_and_names_a_manifests_mistake_by_its_line() {
    let executor = Arc::new(mapi_executor::scripted::ScriptedExecutor::default());
    let options = Options { background: false, executor: Some(executor), ..Default::default() };
    let p = TestPlatform::start_with(&[], options).await;
    let home = tempfile::tempdir().expect("home");
    let plugin = tempfile::tempdir().expect("plugin");
    std::fs::write(plugin.path().join("model.py"), "def fit(ctx):\n    pass\n").expect("source");
    let dir = plugin.path().to_str().expect("path").to_owned();
    let mapi = |args: Vec<&str>| {
        let mut c = tokio::process::Command::new(mapi_tests::binary("mapi"));
        c.args(["--url", &p.platform.url, "--token", p.token()])
            .args(args)
            .args(["--tenant", "dev", "--project", "default"])
            .env("MAPI_HOME", home.path());
        c.output()
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();

    std::fs::write(plugin.path().join("mapi-plugin.toml"), MANIFEST.replace("base-ml", "ubuntu"))
        .expect("manifest");
    let out = mapi(vec!["plugins", "publish", &dir]).await.expect("mapi");
    assert_ne!(out.status.code(), Some(0));
    assert!(text(&out.stderr).contains("mapi-plugin.toml line 3: base `ubuntu`"), "{}", text(&out.stderr));

    std::fs::write(plugin.path().join("mapi-plugin.toml"), MANIFEST).expect("manifest");
    let out = mapi(vec!["plugins", "publish", &dir]).await.expect("mapi");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("published churn 1.0.0 (sha256 "), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("p.churn.logit"), "{}", text(&out.stdout));
    let out = mapi(vec!["plugins", "ls"]).await.expect("mapi");
    assert!(
        text(&out.stdout).contains("churn") && text(&out.stdout).contains("1.0.0"),
        "{}",
        text(&out.stdout)
    );
    let out = mapi(vec!["plugins", "show", "churn"]).await.expect("mapi");
    assert!(text(&out.stdout).contains("y (column)"), "{}", text(&out.stdout));
    // The project's methods: the built-ins and its plugins'.
    let out = mapi(vec!["methods", "ls"]).await.expect("mapi");
    let listed = text(&out.stdout);
    assert!(listed.contains("p.churn.logit") && listed.contains("tabular.linear"), "{listed}");
    let out = mapi(vec!["methods", "show", "p.churn.logit"]).await.expect("mapi");
    let shown = text(&out.stdout);
    assert!(shown.contains("plugin churn 1.0.0") && shown.contains("--param y=COLUMN"), "{shown}");
    let out = mapi(vec!["plugins", "rm", "churn", "1.0.0"]).await.expect("mapi");
    assert_eq!((out.status.code(), text(&out.stdout)), (Some(0), "deleted churn 1.0.0\n".to_owned()));
    let out = mapi(vec!["plugins", "ls"]).await.expect("mapi");
    assert!(text(&out.stdout).contains("no plugins yet"), "{}", text(&out.stdout));
}
