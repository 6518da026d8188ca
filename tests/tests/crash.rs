//! A crash of the whole platform loses nothing it acknowledged: start
//! `mapi dev` as a child process, submit runs, SIGKILL it while they run,
//! start it again on the same home and port; every accepted run reaches a
//! final state, none twice, each attempt with one execution and at most one
//! ledger charge.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use mapi_tests::{DevProcess, free_port};
use serde_json::{Value, json};

fn creds(home: &Path) -> (String, String) {
    let c: Value =
        serde_json::from_slice(&std::fs::read(home.join("credentials.json")).expect("credentials"))
            .expect("json");
    (
        c["token"].as_str().expect("token").to_owned(),
        format!(
            "/v1/tenants/{}/projects/{}",
            c["tenant"].as_str().unwrap_or(""),
            c["project"].as_str().unwrap_or("")
        ),
    )
}

async fn get(http: &reqwest::Client, url: &str, token: &str) -> Option<Value> {
    let r = http.get(url).bearer_auth(token).send().await.ok()?;
    r.json().await.ok()
}

/// Nonce → number of executions made for it, from the executor's files.
fn executions_per_nonce(home: &Path) -> HashMap<String, usize> {
    let mut count = HashMap::new();
    for e in std::fs::read_dir(home.join("executions")).expect("executions").flatten() {
        if let Ok(bytes) = std::fs::read(e.path().join("spec.json")) {
            let spec: Value = serde_json::from_slice(&bytes).expect("spec");
            *count.entry(spec["nonce"].as_str().unwrap_or_default().to_owned()).or_insert(0) += 1;
        }
    }
    count
}

/// Every execution directory with its files, and the text of the small
/// ones (host, status, the tail of each log): what a stuck run left behind.
fn executions_on_disk(home: &Path) -> String {
    let mut out = String::new();
    for e in std::fs::read_dir(home.join("executions")).into_iter().flatten().flatten() {
        out.push_str(&format!("{}\n", e.path().display()));
        files_under(&e.path(), &e.path(), &mut out);
    }
    out
}

/// Each file under `dir` (its tasks' logs included), named from `root`,
/// with the tail of its text.
fn files_under(root: &Path, dir: &Path, out: &mut String) {
    for f in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = f.path();
        if path.is_dir() {
            files_under(root, &path, out);
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let tail: String = text.chars().rev().take(600).collect::<Vec<_>>().into_iter().rev().collect();
        out.push_str(&format!("  {}: {tail}\n", path.strip_prefix(root).unwrap_or(&path).display()));
    }
}

/// SIGKILLs `dev` once run `id` is running (bounded: 60 s).
async fn kill_once_running(http: &reqwest::Client, dev: &mut DevProcess, token: &str, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = get(http, &format!("{}/v1/runs/{id}", dev.url), token).await.unwrap_or_default();
        if r["state"] == "running" {
            break;
        }
        assert!(Instant::now() < deadline, "run {id} did not start: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    dev.child.kill().expect("SIGKILL");
    dev.child.wait().expect("reaped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_accepted_run_ends_once_after_a_crash() {
    let home = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let mut dev = DevProcess::start(home.path(), port, &[]);
    let (token, project) = creds(home.path());
    let http = reqwest::Client::new();
    let csv = include_str!("../../examples/longley.csv");
    let ds: Value = http
        .post(format!("{}{project}/datasets", dev.url))
        .bearer_auth(&token)
        .header("content-type", "text/csv")
        .body(csv)
        .send()
        .await
        .expect("upload")
        .json()
        .await
        .expect("json");
    let mut ids = Vec::new();
    for i in 0..8 {
        let body = if i % 2 == 0 {
            json!({"method": "diag.sleep", "dataset": ds["id"], "params": {"seconds": 3}})
        } else {
            json!({"method": "tabular.linear", "dataset": ds["id"], "params": {"y": "employed"}})
        };
        let r: Value = http
            .post(format!("{}{project}/runs", dev.url))
            .bearer_auth(&token)
            .json(&body)
            .send()
            .await
            .expect("submit")
            .json()
            .await
            .expect("json");
        ids.push(r["id"].as_str().expect("id").to_owned());
    }
    // Kill it while sleeps are running.
    kill_once_running(&http, &mut dev, &token, &ids[0]).await;

    let dev = DevProcess::start(home.path(), port, &[]);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut finals: BTreeMap<String, Value> = BTreeMap::new();
    while finals.len() < ids.len() {
        for id in &ids {
            if let Some(r) = get(&http, &format!("{}/v1/runs/{id}", dev.url), &token).await
                && matches!(r["state"].as_str(), Some("succeeded" | "failed" | "partial" | "cancelled"))
            {
                finals.insert(id.clone(), r);
            }
        }
        if Instant::now() >= deadline {
            let mut open = Vec::new();
            for id in ids.iter().filter(|i| !finals.contains_key(*i)) {
                open.push(get(&http, &format!("{}/v1/runs/{id}", dev.url), &token).await);
            }
            panic!(
                "runs not finished after the restart: {open:#?}\nthe executions on disk:\n{}\nmapi dev's log:\n{}",
                executions_on_disk(home.path()),
                std::fs::read_to_string(DevProcess::log_path(home.path())).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let executions = executions_per_nonce(home.path());
    for (id, run) in &finals {
        assert_eq!(run["state"], "succeeded", "{id}: {run:#}");
        let terminal =
            run["history"].as_array().expect("history").iter().filter(|t| {
                matches!(t["to"].as_str(), Some("succeeded" | "failed" | "partial" | "cancelled"))
            });
        assert_eq!(terminal.count(), 1, "{id} ended more than once: {:#}", run["history"]);
        for a in run["attempts"].as_array().expect("attempts") {
            assert!(a["charge"].is_object(), "{id}: every attempt is metered: {a}");
        }
    }
    // One execution per attempt, counted from the executor's own records.
    let attempts: usize = finals.values().map(|r| r["attempts"].as_array().map_or(0, Vec::len)).sum();
    assert_eq!(executions.len(), attempts, "one nonce per attempt");
    assert!(executions.values().all(|n| *n == 1), "an attempt made two executions: {executions:?}");
    dev.stop();
}

async fn post(http: &reqwest::Client, url: &str, token: &str, body: Value) -> (u16, Value) {
    let r = http.post(url).bearer_auth(token).json(&body).send().await.expect("post");
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// A workflow run survives a crash of the whole platform where it stopped:
/// killed while its first node's run sleeps, the restarted platform moves it
/// to its end with every node run once (one try, one run per child named)
/// and no run made that the workflow run does not name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_platform_resumes_a_workflow_run_with_no_node_run_twice() {
    let home = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let mut dev = DevProcess::start(home.path(), port, &[]);
    let (token, project) = creds(home.path());
    let http = reqwest::Client::new();
    let csv = include_str!("../../examples/longley.csv");
    let r = http
        .post(format!("{}{project}/datasets?name=longley.csv", dev.url))
        .bearer_auth(&token)
        .header("content-type", "text/csv")
        .body(csv)
        .send()
        .await
        .expect("upload");
    assert_eq!(r.status(), 201);
    let definition = json!({"nodes": [
        {"id": "nap", "kind": "run", "method": "diag.sleep", "dataset": "longley.csv", "params": {"seconds": 4}},
        {"id": "grid", "kind": "search.grid", "method": "tabular.linear", "dataset": "longley.csv", "needs": ["nap"],
         "params": {"y": "employed"}, "grid": {"x": [["gnp"], ["gnp", "population"], ["year"]]}, "metric": "r_squared"},
        {"id": "stats", "kind": "run", "method": "describe", "dataset": "longley.csv"},
        {"id": "after", "kind": "run", "method": "describe", "dataset": "longley.csv", "needs": ["grid"]},
    ]});
    let workflows = format!("{}{project}/workflows", dev.url);
    let (s, b) = post(&http, &workflows, &token, json!({"name": "crash", "definition": definition})).await;
    assert_eq!(s, 201, "{b}");
    let (s, started) = post(&http, &format!("{workflows}/crash/runs"), &token, json!({})).await;
    assert_eq!(s, 201, "{started}");
    let id = started["id"].as_str().expect("id").to_owned();
    let nap = started["nodes"][0]["runs"][0]["run"].as_str().expect("the nap's run").to_owned();
    kill_once_running(&http, &mut dev, &token, &nap).await;

    let dev = DevProcess::start(home.path(), port, &[]);
    let deadline = Instant::now() + Duration::from_secs(120);
    let run = loop {
        let r = get(&http, &format!("{}/v1/workflow-runs/{id}", dev.url), &token).await.unwrap_or_default();
        if r["state"].as_str().is_some_and(|s| s != "running") {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "the workflow run did not end after the restart: {r:#}\nmapi dev's log:\n{}",
            std::fs::read_to_string(DevProcess::log_path(home.path())).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(run["state"], "succeeded", "{run:#}");
    let mut named = Vec::new();
    for node in run["nodes"].as_array().expect("nodes") {
        assert_eq!(node["tries"], 1, "{node:#}");
        assert!(node["earlier_runs"].is_null(), "{node:#}");
        for child in node["runs"].as_array().expect("runs") {
            assert_eq!(child["ended"], "succeeded", "{node:#}");
            named.push(child["run"].as_str().expect("run").to_owned());
        }
    }
    assert_eq!(named.len(), 1 + 3 + 1 + 1, "{run:#}");
    let page = get(&http, &format!("{}{project}/runs?page_size=50", dev.url), &token).await.expect("runs");
    let mut made = mapi_tests::run_ids(&page);
    made.sort();
    named.sort();
    assert_eq!(made, named, "every run made is one the workflow run names, once");
    for id in &named {
        let r = get(&http, &format!("{}/v1/runs/{id}", dev.url), &token).await.expect("run");
        let ends =
            r["history"].as_array().expect("history").iter().filter(|t| t["to"] == "succeeded").count();
        assert_eq!(ends, 1, "{id} ended more than once: {:#}", r["history"]);
    }
    let executions = executions_per_nonce(home.path());
    assert!(executions.values().all(|n| *n == 1), "an attempt made two executions: {executions:?}");
    dev.stop();
}
