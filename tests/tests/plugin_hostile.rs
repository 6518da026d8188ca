//! Hostile plugins: each case a method of one plugin
//! (`tests/fixtures/hostile-plugin`), run in the gVisor sandbox beside an
//! honest run of another tenant, with the limits made small (128 MiB a
//! task, 64 KiB of plugin log). Each is contained: the run ends as the
//! outcome table says, what it tried is refused, the platform answers, and
//! the honest run succeeds.

use std::time::Duration;

use mapi_tests::backend::{Backend, start};
use mapi_tests::{Options, TestPlatform};
use reqwest::Method;
use serde_json::{Value, json};

const LONGLEY: &str = include_str!("../../examples/longley.csv");
const ACCOUNTS: &str = "admin@dev.local,dev@dev.local,owner@other.test";
const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/hostile-plugin");
/// What a task's environment may name: nothing secret (the event key comes
/// with the bootstrap, into the supervisor's memory alone).
const NOT_SECRET: &[&str] = &[
    "HOME",
    "PATH",
    "SSL_CERT_FILE",
    "MAPI_RUN_ID",
    "MAPI_PYTHON",
    "MAPI_NONCE",
    "MAPI_BOOTSTRAP_URL",
    "MAPI_WORKER_PROXY_SOCKET",
];
/// The log limit the platform runs with here, in bytes.
const LOG_LIMIT: u64 = 65_536;

async fn submit(p: &TestPlatform, method: &str, ds: &str, params: Value, timeout_s: u32) -> String {
    submit_as(p, method, ds, params, timeout_s, "S").await
}

async fn submit_as(
    p: &TestPlatform,
    method: &str,
    ds: &str,
    params: Value,
    timeout_s: u32,
    class: &str,
) -> String {
    let body = json!({"method": format!("p.hostile.{method}"), "dataset": ds, "params": params,
        "timeout_s": timeout_s, "class": class});
    let (s, made) = p.call(p.token(), Method::POST, &format!("{}/runs", p.project_path()), Some(body)).await;
    assert_eq!(s, 201, "{method}: {made}");
    made["id"].as_str().expect("id").to_owned()
}

fn error_of(run: &Value) -> (&str, &str) {
    (run["error"]["code"].as_str().unwrap_or_default(), run["error"]["message"].as_str().unwrap_or_default())
}

async fn seen(p: &TestPlatform, run: &Value) -> Value {
    assert_eq!(run["state"], "succeeded", "{run:#}");
    let url = run["outputs"][0]["url"].as_str().expect("seen.json");
    p.output(url).await.json().await.expect("json")
}

/// Every attempt the probe recorded was blocked.
fn all_blocked(seen: &Value, case: &str) {
    let entries = seen.as_object().expect("entries");
    assert!(!entries.is_empty(), "{case}: no attempt recorded");
    for (name, what) in entries {
        let what = what.as_str().unwrap_or_default();
        assert!(what.starts_with("blocked:"), "{case}: {name} was not blocked: {what}\n{seen:#}");
    }
}

/// Every line of the run's log (all pages), and the whole as one text.
async fn log_text(p: &TestPlatform, id: &str) -> (Vec<String>, String) {
    let (mut lines, mut cursor) = (Vec::new(), String::new());
    for _ in 0..1000 {
        let path = format!("/v1/runs/{id}/logs?limit=500&cursor={cursor}");
        let (s, page) = p.call(p.token(), Method::GET, &path, None).await;
        assert_eq!(s, 200, "{page}");
        let got = page["lines"].as_array().expect("lines");
        lines.extend(got.iter().map(|l| l["text"].as_str().unwrap_or_default().to_owned()));
        cursor = page["cursor"].as_str().unwrap_or_default().to_owned();
        if page["more"] != true && got.is_empty() {
            break;
        }
    }
    let text = lines.join("\n");
    (lines, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_plugins_are_contained() {
    let limit = LOG_LIMIT.to_string();
    let extra = [
        ("MAPI_DEV_ACCOUNTS", ACCOUNTS),
        ("MAPI_LOCAL_MEMORY_MIB", "S=128,M=128,L=1024"),
        ("MAPI_PLUGIN_LOG_LIMIT_BYTES", limit.as_str()),
    ];
    let p = start(Backend::Gvisor, &extra, Options::default()).await;
    let operator = p.login("admin@dev.local").await;
    // Another tenant, whose honest run goes on beside the hostile ones.
    let other = p.create_tenant(&operator, "other", "internal").await;
    let other_ds = p.upload_as(&other, "/v1/tenants/other/projects/default", LONGLEY).await;
    let store = &p.platform.platform.state.store;
    let other_doc =
        mapi_schema::get::<mapi_schema::DatasetDoc>(&**store, &other_ds).await.expect("read").expect("doc");
    super::plugin_runs::publish(&p, pack()).await;
    let ds = p.upload(LONGLEY).await;
    let platform = p.url("").trim_start_matches("http://").to_owned();
    let home = p._home.path().display().to_string();

    let network = submit(&p, "network", &ds, json!({"platform": platform}), 60).await;
    let snoop =
        submit(&p, "snoop", &ds, json!({"platform": platform, "home": home, "other": other_doc.object}), 60)
            .await;
    // On class L (1 GiB here), so the process limit, not memory, is what stops it.
    let forkbomb = submit_as(&p, "forkbomb", &ds, json!({}), 60, "L").await;
    let membomb = submit(&p, "membomb", &ds, json!({}), 60).await;
    let diskbomb = submit(&p, "diskbomb", &ds, json!({}), 60).await;
    let spin = submit(&p, "spin", &ds, json!({}), 2).await;
    let chatty = submit(&p, "chatty", &ds, json!({}), 60).await;
    let forger = submit(&p, "forger", &ds, json!({}), 60).await;
    let silent = submit(&p, "silent", &ds, json!({}), 60).await;
    let linker = submit(&p, "linker", &ds, json!({}), 60).await;
    let body = json!({"method": "tabular.linear", "dataset": other_ds, "params": {"y": "employed"}});
    let (s, honest) =
        p.call(&other, Method::POST, "/v1/tenants/other/projects/default/runs", Some(body)).await;
    assert_eq!(s, 201, "{honest}");
    let honest = honest["id"].as_str().expect("id").to_owned();

    let wait = |id: String| {
        let p = &p;
        async move {
            p.wait_run(&id, Duration::from_secs(120), |r| {
                matches!(r["state"].as_str(), Some("succeeded" | "failed" | "partial" | "cancelled"))
            })
            .await
        }
    };
    all_blocked(&seen(&p, &wait(network).await).await, "network");
    let snooped = seen(&p, &wait(snoop).await).await;
    all_blocked(&snooped["blocked"], "snoop");
    // gVisor lets a process of the supervisor's user read its environment: it holds no secret.
    let names: Vec<&str> = snooped["supervisor_environment"]
        .as_array()
        .expect("names")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for name in &names {
        assert!(
            NOT_SECRET.contains(name) || name.starts_with("CLOUD_RUN_"),
            "the supervisor's environment holds {name}: {names:?}"
        );
    }

    let run = wait(forkbomb).await;
    assert_eq!(run["state"], "failed", "{run:#}");
    let (code, message) = error_of(&run);
    assert!(code == "METHOD_ERROR" && message.contains("fork refused after"), "{run:#}");

    for (case, id) in [("membomb", membomb), ("diskbomb", diskbomb)] {
        let run = wait(id).await;
        assert_eq!(
            (run["state"].as_str(), error_of(&run).0),
            (Some("failed"), "RESOURCE_EXHAUSTED"),
            "{case}: {run:#}"
        );
        assert_eq!(
            run["attempts"].as_array().map(Vec::len),
            Some(2),
            "{case}: retried once on the next class"
        );
    }

    let run = wait(spin).await;
    assert_eq!((run["state"].as_str(), error_of(&run).0), (Some("failed"), "TIMEOUT"), "{run:#}");

    let run = wait(chatty.clone()).await;
    assert_eq!(run["state"], "succeeded", "{run:#}");
    let (lines, text) = log_text(&p, &chatty).await;
    // What the plugin printed, as the supervisor logged it: past the limit, one line at most.
    let printed = |l: &String| {
        let v: Value = serde_json::from_str(l).unwrap_or(Value::Null);
        (v["component"] == "plugin").then(|| v["message"].as_str().map_or(0, str::len) as u64)
    };
    let plugin_bytes: u64 = lines.iter().filter_map(printed).sum();
    assert!(
        plugin_bytes > 0 && plugin_bytes <= LOG_LIMIT + 8_192,
        "{plugin_bytes} bytes of plugin output were logged"
    );
    assert!(text.contains("past the log limit"), "the drop is said: {text}");

    let run = wait(forger.clone()).await;
    assert_eq!(run["state"], "failed", "forged complete events change nothing: {run:#}");
    assert_eq!(
        error_of(&run),
        ("METHOD_ERROR", "the plugin failed: RuntimeError: the forger gives up"),
        "{run:#}"
    );
    assert!(run["outputs"].as_array().is_none_or(Vec::is_empty), "{run:#}");
    let (_, text) = log_text(&p, &forger).await;
    assert!(text.contains("mapi_event"), "the forged lines are logged as text: {text}");
    // The one that reached the supervisor's stdout was refused by its signature, and audited.
    let (s, audit) =
        p.call(&operator, Method::GET, "/v1/admin/audit?action=event.refused&limit=50", None).await;
    assert_eq!(s, 200, "{audit}");
    let refused = audit["items"].as_array().expect("items").iter().any(|e| {
        e["resource"].as_str().is_some_and(|r| r.contains(forger.as_str()))
            && e["detail"].as_str().is_some_and(|d| d.contains("bad_signature"))
    });
    assert!(refused, "the forged event is in the audit log: {audit:#}");

    let run = wait(linker).await;
    let (code, message) = error_of(&run);
    assert!(
        code == "METHOD_ERROR" && message.contains("is a link, not a file"),
        "an output is never a link: {run:#}"
    );

    let run = wait(silent).await;
    let (code, message) = error_of(&run);
    assert!(code == "METHOD_ERROR" && message.contains("without writing its output `seen.json`"), "{run:#}");

    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let run = loop {
        let (_, run) = p.call(&other, Method::GET, &format!("/v1/runs/{honest}"), None).await;
        if run["state"] == "succeeded" || run["state"] == "failed" || std::time::Instant::now() > deadline {
            break run;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(run["state"], "succeeded", "another tenant's run beside them: {run:#}");
    let health = p.http.get(p.url("/health")).send().await.expect("health");
    assert_eq!(health.status(), 200, "the platform answers");
}

/// The fixture directory, packed.
fn pack() -> Vec<u8> {
    mapi_plugins::package::pack(std::path::Path::new(FIXTURE)).expect("pack the hostile plugin")
}
