//! Runs of plugin methods, end to end: the package published over HTTP, the
//! run admitted like any run, placed only on an executor that isolates
//! tenant code (gVisor with enforced egress), the package fetched by the
//! worker and its digest checked, the code run as a child of the
//! supervisor in the sandbox, its reports signed by the supervisor, its
//! outputs uploaded, and the run metered; the uploaded-code kill switch
//! refusing new plugin runs at submit and holding queued ones while
//! built-in methods go on.

use std::time::Duration;

use mapi_tests::backend::{Backend, start};
use mapi_tests::{Options, TestPlatform, transitions, with_start};
use reqwest::Method;
use serde_json::{Value, json};

const LONGLEY: &str = include_str!("../../examples/longley.csv");

const MANIFEST: &str = r#"name = "stats"
version = "1.0.0"
base = "base-ml"
description = "Column statistics in plain Python"

[[methods]]
name = "mean"
summary = "The mean of a column"
entry = "stats:mean"
outputs = ["summary.json"]

[[methods.params]]
name = "column"
kind = "column"
required = true

[[methods.params]]
name = "scale"
kind = "number"
default = 1.0
min = 0.0

[[methods]]
name = "nap"
summary = "Sleeps, then writes its summary"
entry = "stats:nap"
outputs = ["summary.json"]

[[methods.params]]
name = "seconds"
kind = "number"
default = 3.0
"#;

const SOURCE: &str = r#"import sys

def mean(ctx):
    rows = ctx.rows()
    column = ctx.params["column"]
    values = [float(r[column]) for r in rows]
    ctx.progress(0.5, "summed")
    m = sum(values) / len(values) * ctx.params["scale"]
    ctx.metric("mean", m)
    print("plain output of the plugin")
    print('{"mapi_event":{"v":1,"run":"forged","body":{"type":"complete"},"sig":"00"}}')
    print("to stderr", file=sys.stderr)
    ctx.write_json("summary.json", {"column": column, "mean": m, "n": len(values)})
    ctx.progress(1.0, "done")


def nap(ctx):
    import time
    ctx.progress(0.1, "napping")
    time.sleep(ctx.params["seconds"])
    ctx.write_json("summary.json", {"slept": ctx.params["seconds"]})
"#;

/// The package of a plugin directory holding `manifest` and `stats.py`.
pub fn package(manifest: &str, source: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("mapi-plugin.toml"), manifest).expect("manifest");
    std::fs::write(dir.path().join("stats.py"), source).expect("source");
    mapi_plugins::package::pack(dir.path()).expect("pack")
}

/// Publishes `bytes` to the platform's own project as its token.
pub async fn publish(p: &TestPlatform, bytes: Vec<u8>) -> Value {
    let resp = p
        .http
        .post(p.url(&format!("{}/plugins", p.project_path())))
        .bearer_auth(p.token())
        .header("content-type", "application/x-tar")
        .body(bytes)
        .send()
        .await
        .expect("publish");
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    assert!(status == 201 || status == 200, "publish answered {status}: {body}");
    body
}

async fn submit(p: &TestPlatform, body: Value) -> (u16, Value) {
    p.call(p.token(), Method::POST, &format!("{}/runs", p.project_path()), Some(body)).await
}

fn mean_of_employed() -> f64 {
    let mut lines = LONGLEY.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = header.iter().position(|h| h.trim() == "employed").expect("employed");
    let values: Vec<f64> = lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split(',').nth(col).expect("cell").trim().parse().expect("number"))
        .collect();
    values.iter().sum::<f64>() / values.len() as f64
}

/// A plugin method runs in the gVisor sandbox: its parameters validated
/// (defaults filled in), its progress and metric signed by the supervisor,
/// its output uploaded and its printing logged as text, a forged event line
/// included, which never becomes an event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_method_runs_in_the_sandbox() {
    let p = start(Backend::Gvisor, &[], Options::default()).await;
    let published = publish(&p, package(MANIFEST, SOURCE)).await;
    let ds = p.upload(LONGLEY).await;

    let (s, bad) =
        submit(&p, json!({"method": "p.stats.mean", "dataset": ds, "params": {"column": "nope"}})).await;
    assert_eq!((s, bad["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{bad}");
    assert!(bad["detail"].as_str().unwrap_or_default().contains("nope"), "the column is named: {bad}");
    let (s, bad) = submit(&p, json!({"method": "p.stats.median", "dataset": ds, "params": {}})).await;
    assert_eq!(s, 400, "{bad}");
    assert!(
        bad["detail"].as_str().unwrap_or_default().contains("p.stats.mean"),
        "the methods are listed: {bad}"
    );
    let (s, bad) = submit(&p, json!({"method": "p.nothing.here", "dataset": ds, "params": {}})).await;
    assert!(s == 400 && bad["detail"].as_str().unwrap_or_default().contains("mapi plugins publish"), "{bad}");

    let (s, made) = submit(
        &p,
        json!({"method": "p.stats.mean", "dataset": ds, "params": {"column": "employed"}, "timeout_s": 120}),
    )
    .await;
    assert_eq!(s, 201, "{made}");
    assert_eq!(made["plugin"]["version"], "1.0.0", "the run records the version it runs: {made}");
    assert_eq!(made["plugin"]["sha256"], published["sha256"], "{made}");
    let id = made["id"].as_str().expect("id");
    let run = p.wait_final(id).await;
    assert_eq!(run["state"], "succeeded", "{run:#}");
    assert_eq!(transitions(&run), with_start(&[("running", "succeeded", "completed")]));
    let expected = mean_of_employed();
    let metric = run["progress"]["metrics"]["mean"].as_f64().expect("the mean as a metric");
    assert!((metric - expected).abs() < 1e-9, "{metric} vs {expected}");
    let out = &run["outputs"][0];
    assert_eq!(out["name"], "summary.json", "{run:#}");
    let summary: Value = p.output(out["url"].as_str().expect("url")).await.json().await.expect("json");
    assert_eq!(
        (summary["column"].as_str(), summary["n"].as_u64()),
        (Some("employed"), Some(16)),
        "{summary}"
    );
    assert!(run["attempts"][0]["charge"]["amount_micros"].as_i64().expect("metered") > 0, "{run:#}");

    let (s, logs) = p.call(p.token(), Method::GET, &format!("/v1/runs/{id}/logs"), None).await;
    assert_eq!(s, 200, "{logs}");
    let text = logs.to_string();
    assert!(text.contains("plain output of the plugin") && text.contains("to stderr"), "{logs:#}");
    assert!(text.contains("forged"), "the forged line is logged as text: {logs:#}");
    assert_eq!(run["progress"]["events"].as_u64().map(|n| n < 20), Some(true), "{run:#}");
}

/// On an executor without gVisor isolation a plugin run is admitted and
/// waits, saying why; built-in methods run as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_run_waits_for_an_isolating_executor() {
    let p = start(Backend::LocalProcess, &[], Options::default()).await;
    publish(&p, package(MANIFEST, SOURCE)).await;
    let ds = p.upload(LONGLEY).await;
    let (s, methods) = p.call(p.token(), Method::GET, &format!("{}/methods", p.project_path()), None).await;
    let names: Vec<&str> =
        methods["methods"].as_array().expect("methods").iter().filter_map(|m| m["name"].as_str()).collect();
    assert!(s == 200 && names.contains(&"p.stats.mean") && names.contains(&"describe"), "{methods}");
    let (_, global) = p.call(p.token(), Method::GET, "/v1/methods", None).await;
    assert!(!global.to_string().contains("p.stats.mean"), "the platform's registry holds no tenant's plugin");
    let (s, one) =
        p.call(p.token(), Method::GET, &format!("{}/methods/p.stats.mean", p.project_path()), None).await;
    assert_eq!(
        (s, &one["plugin"]["version"], &one["example"]["params"]["scale"]),
        (200, &json!("1.0.0"), &json!(1.0)),
        "{one}"
    );
    let (s, _) =
        p.call(p.token(), Method::GET, &format!("{}/methods/p.stats.nope", p.project_path()), None).await;
    assert_eq!(s, 404);

    let (s, made) =
        submit(&p, json!({"method": "p.stats.mean", "dataset": ds, "params": {"column": "employed"}})).await;
    assert_eq!(s, 201, "{made}");
    let id = made["id"].as_str().expect("id");
    let run = p.wait_run(id, Duration::from_secs(30), |r| !r["waiting"].is_null()).await;
    assert_eq!(run["state"], "queued", "{run:#}");
    let why = run["waiting"]["reason"].as_str().unwrap_or_default();
    assert!(why.contains("gVisor") && why.contains("local-process"), "{run:#}");
    let builtin = p.submit(json!({"method": "describe", "dataset": ds})).await;
    assert_eq!(p.wait_final(&builtin).await["state"], "succeeded");
    assert_eq!(p.run(id).await["state"], "queued", "the plugin run still waits");
}

/// The uploaded-code kill switch, off: a new plugin run is refused at
/// submit (403 naming the switch), a queued one is never leased and waits
/// saying why, a running one finishes, and built-in methods keep running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_uploaded_code_switch_stops_new_plugin_work_and_spares_built_ins() {
    let (queue, hold) = mapi_tests::held::hold(mapi_schema::DISPATCH_QUEUE);
    hold.set(false);
    let extra = [("MAPI_DEV_ACCOUNTS", "admin@dev.local,dev@dev.local"), ("MAPI_DISPATCH_LEASE_S", "5")];
    let p = start(Backend::Gvisor, &extra, Options { queue: Some(queue), ..Options::default() }).await;
    let operator = p.login("admin@dev.local").await;
    publish(&p, package(MANIFEST, SOURCE)).await;
    let ds = p.upload(LONGLEY).await;
    let (s, napping) = submit(&p, json!({"method": "p.stats.nap", "dataset": ds, "params": {}})).await;
    assert_eq!(s, 201, "{napping}");
    let napping = napping["id"].as_str().expect("id").to_owned();
    p.wait_run(&napping, Duration::from_secs(30), |r| r["progress"]["started"] == true).await;
    // Admitted while the switch is on, not yet dispatched.
    hold.set(true);
    let (s, queued) =
        submit(&p, json!({"method": "p.stats.mean", "dataset": ds, "params": {"column": "employed"}})).await;
    assert_eq!(s, 201, "{queued}");
    let queued = queued["id"].as_str().expect("id").to_owned();

    let off = json!({"untrusted_execution_enabled": false, "reason": "a plugin misbehaves"});
    let (s, v) = p.call(&operator, Method::PUT, "/v1/admin/kill-switches", Some(off)).await;
    assert_eq!(s, 200, "{v}");
    let (s, refused) =
        submit(&p, json!({"method": "p.stats.mean", "dataset": ds, "params": {"column": "employed"}})).await;
    assert_eq!((s, refused["code"].as_str()), (403, Some("FORBIDDEN")), "{refused}");
    assert!(refused["detail"].as_str().unwrap_or_default().contains("untrusted_execution"), "{refused}");
    hold.set(false);

    let run = p.wait_final(&napping).await;
    assert_eq!(run["state"], "succeeded", "a plugin run already running finishes: {run:#}");
    let held = p
        .wait_run(&queued, Duration::from_secs(60), |r| {
            r["waiting"]["reason"].as_str().is_some_and(|w| w.contains("untrusted_execution"))
        })
        .await;
    assert_eq!(held["state"], "queued", "{held:#}");
    assert!(held["attempts"].as_array().is_none_or(Vec::is_empty), "never leased: {held:#}");
    let builtin = p.submit(json!({"method": "describe", "dataset": ds})).await;
    assert_eq!(p.wait_final(&builtin).await["state"], "succeeded", "built-in methods keep running");
    assert_eq!(p.run(&queued).await["state"], "queued");
}

/// The README's plugin (`examples/plugins/churn`: a scikit-learn logistic
/// regression) fits in the sandbox exactly what scikit-learn fits called
/// directly on the same table, reports its metrics, and its run becomes a
/// model version that an endpoint serves with the plugin's own `predict`
/// (in a sandbox): its scores are scikit-learn's probabilities, a row it
/// cannot read is a 400 with the plugin's words, and while uploaded code is
/// switched off its scores are refused and no plugin model is deployed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_plugin_fits_what_scikit_learn_fits_and_its_model_serves() {
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");
    let extra = [("MAPI_DEV_ACCOUNTS", "admin@dev.local,dev@dev.local")];
    let p = start(Backend::Gvisor, &extra, Options::default()).await;
    let dir = std::path::Path::new(examples).join("plugins/churn");
    publish(&p, mapi_plugins::package::pack(&dir).expect("pack")).await;
    let csv = std::fs::read_to_string(format!("{examples}/churn.csv")).expect("churn.csv");
    let ds = p.upload(&csv).await;
    let body =
        json!({"method": "p.churn.logit", "dataset": ds, "params": {"y": "churned"}, "timeout_s": 300});
    let (s, made) = submit(&p, body).await;
    assert_eq!(s, 201, "{made}");
    let run = p.wait_final(made["id"].as_str().expect("id")).await;
    assert_eq!(run["state"], "succeeded", "{run:#}");
    let metrics = &run["progress"]["metrics"];
    let auc = metrics["roc_auc"].as_f64().expect("roc_auc");
    assert!(auc > 0.7 && metrics["accuracy"].as_f64().is_some(), "{metrics}");
    let fitted: Value =
        p.output(run["outputs"][0]["url"].as_str().expect("url")).await.json().await.expect("json");

    // The same fit, scikit-learn called directly with the host's Python.
    let direct = std::process::Command::new("/usr/bin/python3")
        .args(["-c", DIRECT_FIT, &format!("{examples}/churn.csv")])
        .output()
        .expect("python3");
    assert!(direct.status.success(), "{}", String::from_utf8_lossy(&direct.stderr));
    let direct: Value = serde_json::from_slice(&direct.stdout).expect("json");
    for (name, want) in direct["coefficients"].as_object().expect("coefficients") {
        let got = fitted["coefficients"][name].as_f64().expect(name);
        assert!((got - want.as_f64().expect("number")).abs() < 1e-9, "{name}: {got} vs {want}");
    }
    assert!((auc - direct["roc_auc"].as_f64().expect("auc")).abs() < 1e-12);

    let version = run["model_version"].as_str().expect("a model version");
    let endpoints = format!("{}/endpoints", p.project_path());
    let create = json!({"alias": "churn", "model_version": version});
    let (s, e) = p.call(p.token(), Method::POST, &endpoints, Some(create.clone())).await;
    assert_eq!((s, e["status"].as_str()), (202, Some("deploying")), "{e}");
    let e = p.wait_endpoint("churn").await;
    assert_eq!(e["status"], "ready", "{e:#}");

    // Its scores are what scikit-learn's predict_proba says for the same rows.
    let rows = first_rows(&csv, 5);
    let (s, scored) = score(&p, "churn", json!({"rows": rows})).await;
    assert_eq!(s, 200, "{scored}");
    let want = direct["probabilities"].as_array().expect("probabilities");
    let got = scored["predictions"].as_array().expect("predictions");
    assert_eq!(got.len(), want.len(), "{scored}");
    for (g, w) in got.iter().zip(want) {
        let (g, w) = (g["value"].as_f64().expect("value"), w.as_f64().expect("number"));
        assert!((g - w).abs() < 1e-9, "{g} vs scikit-learn's {w}");
    }
    let (s, bad) = score(&p, "churn", json!({"rows": [{"tenure_months": 3}]})).await;
    assert_eq!((s, bad["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{bad}");
    assert!(bad["detail"].as_str().unwrap_or_default().contains("monthly_charges"), "{bad}");

    // Uploaded code off: the plugin's model stops scoring and is not deployed again.
    let operator = p.login("admin@dev.local").await;
    let switch = |on: bool| json!({"untrusted_execution_enabled": on, "reason": "a plugin misbehaves"});
    let (s, v) = p.call(&operator, Method::PUT, "/v1/admin/kill-switches", Some(switch(false))).await;
    assert_eq!(s, 200, "{v}");
    let (s, refused) = score(&p, "churn", json!({"rows": rows})).await;
    assert_eq!((s, refused["code"].as_str()), (403, Some("FORBIDDEN")), "{refused}");
    assert!(refused["detail"].as_str().unwrap_or_default().contains("untrusted_execution"), "{refused}");
    let again = json!({"alias": "churn-2", "model_version": version});
    let (s, refused) = p.call(p.token(), Method::POST, &endpoints, Some(again)).await;
    assert_eq!((s, refused["code"].as_str()), (403, Some("FORBIDDEN")), "{refused}");
    let (s, v) = p.call(&operator, Method::PUT, "/v1/admin/kill-switches", Some(switch(true))).await;
    assert_eq!(s, 200, "{v}");
    let (s, scored) = score(&p, "churn", json!({"rows": rows})).await;
    assert_eq!(s, 200, "switched on again: {scored}");
}

async fn score(p: &TestPlatform, alias: &str, body: Value) -> (u16, Value) {
    let path = format!("{}/endpoints/{alias}:score", p.project_path());
    p.call(p.token(), Method::POST, &path, Some(body)).await
}

/// The first `n` rows of a CSV of numbers, as score rows, without its `churned` column.
fn first_rows(csv: &str, n: usize) -> Vec<Value> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    lines
        .take(n)
        .map(|l| {
            let row: serde_json::Map<String, Value> = header
                .iter()
                .zip(l.split(','))
                .filter(|(h, _)| **h != "churned")
                .map(|(h, v)| ((*h).to_owned(), json!(v.parse::<f64>().expect("number"))))
                .collect();
            Value::Object(row)
        })
        .collect()
}

/// What `examples/plugins/churn/model.py` fits, written out with scikit-learn
/// alone, and its probabilities for the first five rows.
const DIRECT_FIT: &str = r#"
import json, sys
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split
t = pd.read_csv(sys.argv[1])
y, x = t["churned"], t.drop(columns=["churned"])
a, b, ya, yb = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
m = LogisticRegression(max_iter=1000).fit(a, ya)
print(json.dumps({"coefficients": dict(zip(x.columns, m.coef_[0].tolist())), "roc_auc": roc_auc_score(yb, m.predict_proba(b)[:, 1]), "probabilities": m.predict_proba(x.head(5))[:, 1].tolist()}))
"#;

const PROBE_MANIFEST: &str = r#"name = "probe"
version = "1.0.0"
base = "base-ml"

[[methods]]
name = "fit"
entry = "stats:fit"
outputs = ["model.json"]
model = "model.json"
predict = "stats:predict"

[[methods.params]]
name = "platform"
kind = "text"
required = true

[[methods.params]]
name = "home"
kind = "text"
required = true
"#;

/// A model whose `predict` reports what it can reach from the model server's sandbox.
const PROBE_SOURCE: &str = r#"import os, socket

def fit(ctx):
    ctx.write_json("model.json", {"platform": ctx.params["platform"], "home": ctx.params["home"]})

def attempt(f):
    try:
        f()
        return "done"
    except Exception as e:
        return "refused: " + type(e).__name__

def predict(model, rows):
    host, port = model["platform"].rsplit(":", 1)
    found = {
        "platform": attempt(lambda: socket.create_connection((host, int(port)), timeout=3)),
        "internet": attempt(lambda: socket.create_connection(("1.1.1.1", 53), timeout=3)),
        "metadata": attempt(lambda: socket.create_connection(("169.254.169.254", 80), timeout=3)),
        "home": attempt(lambda: os.listdir(model["home"])),
        "own code": attempt(lambda: open(os.path.join(os.getcwd(), "stats.py"), "a").close()),
        "environment": sorted(os.environ),
        "uid": os.getuid(),
    }
    print("probed", found)
    return [found for _ in rows]
"#;

/// A plugin's `predict` serves in a sandbox of its own: no network (the
/// platform's address, the internet, the metadata server), none of the
/// platform's files, its code read-only, an unprivileged user, and an
/// environment that names nothing of the server's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_predict_serves_in_a_sandbox() {
    let p = start(Backend::Gvisor, &[], Options::default()).await;
    publish(&p, package(PROBE_MANIFEST, PROBE_SOURCE)).await;
    let ds = p.upload(LONGLEY).await;
    let platform = p.url("").trim_start_matches("http://").trim_end_matches('/').to_owned();
    let home = p._home.path().display().to_string();
    let params = json!({"platform": platform, "home": home});
    let (s, made) = submit(&p, json!({"method": "p.probe.fit", "dataset": ds, "params": params})).await;
    assert_eq!(s, 201, "{made}");
    let run = p.wait_final(made["id"].as_str().expect("id")).await;
    assert_eq!(run["state"], "succeeded", "{run:#}");
    let create = json!({"alias": "probe", "model_version": run["model_version"]});
    let (s, e) =
        p.call(p.token(), Method::POST, &format!("{}/endpoints", p.project_path()), Some(create)).await;
    assert_eq!(s, 202, "{e}");
    assert_eq!(p.wait_endpoint("probe").await["status"], "ready");
    let (s, scored) = score(&p, "probe", json!({"rows": [{"x": 1}]})).await;
    assert_eq!(s, 200, "{scored}");
    let found = &scored["predictions"][0]["value"];
    for reach in ["platform", "internet", "metadata", "home", "own code"] {
        let said = found[reach].as_str().unwrap_or_default();
        assert!(said.starts_with("refused"), "{reach}: {said} ({found})");
    }
    assert_eq!(found["uid"], 65_534, "{found}");
    let names: Vec<&str> =
        found["environment"].as_array().expect("env").iter().filter_map(Value::as_str).collect();
    for name in &names {
        assert!(
            !name.starts_with("MAPI_SERVE") && !name.contains("KEY") && !name.contains("TOKEN"),
            "{names:?}"
        );
    }
    let (s, health) = p.call(p.token(), Method::GET, "/health", None).await;
    assert_eq!(s, 200, "the platform stays healthy: {health}");
}

/// On cloudrun-jobs (over the fake), a plugin run goes to the Job of the base
/// its manifest names, whatever its method's namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_run_goes_to_the_job_of_its_base() {
    let p = start(Backend::CloudRunJobs, &[], Options::default()).await;
    publish(&p, package(MANIFEST, SOURCE)).await;
    let ds = p.upload(LONGLEY).await;
    let body =
        json!({"method": "p.stats.mean", "dataset": ds, "params": {"column": "employed"}, "timeout_s": 120});
    let (s, made) = submit(&p, body).await;
    assert_eq!(s, 201, "{made}");
    let id = made["id"].as_str().expect("id");
    let run = p.wait_final(id).await;
    assert_eq!(run["state"], "succeeded", "{run:#}");
    let executions: Vec<String> =
        p.fake().executions().into_iter().filter(|(_, _, run)| run == id).map(|(name, _, _)| name).collect();
    assert_eq!(executions.len(), 1, "{executions:?}");
    assert!(executions[0].contains("/jobs/mapi-test-base-ml-s/"), "{executions:?}");
}
