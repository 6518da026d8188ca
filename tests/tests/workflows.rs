//! Workflows through the API: a sweep over a parameter grid whose best fit
//! is validated by a second person and then promoted (the README's, from
//! `examples/workflows/sweep.yaml`); a failed node skips what needs it while
//! an independent branch goes on, and a resume runs only what did not
//! succeed; cancel stops every run; definitions are refused with the node
//! and field named; each route enforces the matrix's workflow rows.

use std::time::{Duration, Instant};

use mapi_tests::TestPlatform;
use reqwest::Method;
use serde_json::{Value, json};

const LONGLEY: &str = include_str!("../../examples/longley.csv");
const SWEEP: &str = include_str!("../../examples/workflows/sweep.yaml");

/// Quick promotions: steps of no time that ask no scores.
const GATE: [(&str, &str); 2] = [("MAPI_ENDPOINTS_STEP_S", "0"), ("MAPI_ENDPOINTS_STEP_REQUESTS", "0")];

async fn upload(p: &TestPlatform, token: &str, name: &str, csv: &str) -> String {
    p.upload_named(token, &p.project_path(), name, csv).await
}

/// Polls workflow run `id` until `done` holds (bounded: 120 s).
async fn wait(p: &TestPlatform, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (s, r) = p.call(p.token(), Method::GET, &format!("/v1/workflow-runs/{id}"), None).await;
        assert_eq!(s, 200, "{r}");
        if done(&r) {
            return r;
        }
        assert!(Instant::now() < deadline, "the workflow run did not get there: {r:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A console page as `email` sees it, with the CSRF value its forms carry
/// and the session's cookie.
async fn console_page(p: &TestPlatform, email: &str, path: &str) -> (String, String, String) {
    let cookie = format!("mapi_console={}", p.console_session(email).await);
    let resp = p.http.get(p.url(path)).header("cookie", &cookie).send().await.expect("page");
    assert_eq!(resp.status(), 200, "{path}");
    let page = resp.text().await.expect("html");
    let csrf = page
        .split("name=\"_csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_default()
        .to_owned();
    (page, csrf, cookie)
}

fn node<'a>(r: &'a Value, id: &str) -> &'a Value {
    r["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["id"] == id))
        .unwrap_or_else(|| panic!("{id}: {r:#}"))
}

fn ended(r: &Value) -> bool {
    r["state"] != "running"
}

async fn members(p: &TestPlatform, people: &[(&str, &str, bool)]) {
    let dev = p.login("dev@dev.local").await;
    for (email, role, reviewer) in people {
        let body = json!({"email": email, "role": role, "reviewer": reviewer});
        let (s, b) = p.call(&dev, Method::POST, "/v1/tenants/dev/members", Some(body)).await;
        assert_eq!(s, 201, "{b}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweeps_best_fit_is_validated_by_a_second_person_then_promoted() {
    let accounts = "dev@dev.local,ana@dev.local,rob@dev.local,vic@dev.local";
    let env = [("MAPI_DEV_ACCOUNTS", accounts), ("MAPI_WEBHOOKS_ALLOW_LOOPBACK", "true")];
    let p = TestPlatform::start(&[&GATE[..], &env[..]].concat()).await;
    members(
        &p,
        &[
            ("ana@dev.local", "editor", true),
            ("rob@dev.local", "runner", false),
            ("vic@dev.local", "viewer", false),
        ],
    )
    .await;
    let (ana, rob, vic) =
        (p.login("ana@dev.local").await, p.login("rob@dev.local").await, p.login("vic@dev.local").await);
    let project = p.project_path();

    // An endpoint serving a first fit, then a policy: one reviewer's approval.
    let ds = upload(&p, p.token(), "longley.csv", LONGLEY).await;
    let first = p
        .wait_final(
            &p.submit(
                json!({"method": "tabular.linear", "dataset": ds, "params": {"y": "employed", "x": ["gnp"]}}),
            )
            .await,
        )
        .await;
    let body = json!({"alias": "longley", "model_version": first["model_version"], "max_instances": 1});
    let (s, b) = p.call(p.token(), Method::POST, &format!("{project}/endpoints"), Some(body)).await;
    assert_eq!(s, 202, "{b}");
    assert_eq!(p.wait_endpoint("longley").await["status"], "ready");
    let policy = json!({"thresholds": ["r_squared >= 0.9"], "approvals": 1});
    let (s, b) = p.call(p.token(), Method::PUT, &format!("{project}/policy"), Some(policy)).await;
    assert_eq!(s, 200, "{b}");

    // Told of the workflow's end and the validation's outcome (a receiver
    // that never answers: the delivery log shows what was sent).
    let hooks = format!("{project}/webhooks");
    let url = format!("http://127.0.0.1:{}/", mapi_tests::free_port());
    let hook = json!({"url": url, "events": ["workflow.finished", "validation.decided"]});
    let (s, hook) = p.call(p.token(), Method::POST, &hooks, Some(hook)).await;
    assert_eq!(s, 201, "{hook}");
    let log = format!("{hooks}/{}/deliveries", hook["id"].as_str().expect("id"));

    // Editors (and the roles above them) write workflows; viewers do not.
    let workflows = format!("{project}/workflows");
    let create = json!({"name": "sweep", "definition": SWEEP});
    let (s, b) = p.call(&vic, Method::POST, &workflows, Some(create.clone())).await;
    assert_eq!(s, 403, "{b}");
    let (s, w) = p.call(&ana, Method::POST, &workflows, Some(create.clone())).await;
    assert_eq!((s, w["version"].as_u64()), (201, Some(1)), "{w}");
    let (s, b) = p.call(&ana, Method::POST, &workflows, Some(create)).await;
    assert_eq!((s, b["code"].as_str()), (409, Some("ALREADY_EXISTS")), "{b}");
    let (s, list) = p.call(&vic, Method::GET, &workflows, None).await;
    assert_eq!((s, list["workflows"][0]["name"].as_str()), (200, Some("sweep")), "{list}");

    // Editors do not run; the admin does, and its three fits start at once.
    let start = format!("{workflows}/sweep/runs");
    let (s, b) = p.call(&ana, Method::POST, &start, Some(json!({}))).await;
    assert_eq!(s, 403, "{b}");
    let (s, r) = p.call(p.token(), Method::POST, &start, Some(json!({}))).await;
    assert_eq!((s, r["state"].as_str()), (201, Some("running")), "{r}");
    assert_eq!(node(&r, "sweep")["runs"].as_array().map(Vec::len), Some(3), "{r:#}");
    assert!(r["estimate"]["amount_micros"].as_i64().is_some_and(|m| m > 0), "{r}");
    let id = r["id"].as_str().expect("id").to_owned();

    // The best of the three is validated: it waits for a reviewer.
    let r = wait(&p, &id, |r| node(r, "check")["validation"].is_string() || ended(r)).await;
    let sweep = node(&r, "sweep");
    assert_eq!(sweep["state"], "succeeded", "{r:#}");
    let best = sweep["best_run"].as_str().expect("best run");
    let metrics: Vec<f64> =
        sweep["runs"].as_array().expect("runs").iter().filter_map(|c| c["metric"].as_f64()).collect();
    assert_eq!(metrics.len(), 3, "{sweep:#}");
    let top = sweep["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .max_by(|a, b| a["metric"].as_f64().partial_cmp(&b["metric"].as_f64()).expect("finite"))
        .expect("a run");
    assert_eq!(top["run"].as_str(), Some(best), "the highest r_squared wins: {sweep:#}");
    assert_eq!(top["combination"]["x"].as_array().map(Vec::len), Some(6), "{sweep:#}");
    let child = p.run(best).await;
    assert_eq!(child["state"], "succeeded");
    assert!(child["name"].as_str().is_some_and(|n| n.starts_with("sweep sweep x=")), "{child:#}");
    let version = sweep["model_version"].as_str().expect("version").to_owned();
    assert_eq!(child["model_version"].as_str(), Some(version.as_str()));
    let check = node(&r, "check");
    assert_eq!(
        (check["state"].as_str(), check["model_version"].as_str()),
        (Some("running"), Some(version.as_str()))
    );
    let validation = check["validation"].as_str().expect("validation").to_owned();
    let approvals = format!("/v1/validations/{validation}/approvals");

    // Its starter submitted it: never they approve it; a second person does.
    let dev = p.login("dev@dev.local").await;
    let approve = |reason: &str| Some(json!({"decision": "approve", "reason": reason}));
    let (s, b) = p.call(&dev, Method::POST, &approvals, approve("mine")).await;
    assert_eq!((s, b["code"].as_str()), (403, Some("SELF_APPROVAL_FORBIDDEN")), "{b}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, r) = p.call(p.token(), Method::GET, &format!("/v1/workflow-runs/{id}"), None).await;
    assert_eq!(node(&r, "ship")["state"], "pending", "nothing is promoted before the approval: {r:#}");
    // The reviewer approves in the console: the run's page draws its nodes
    // and shows the validation's checks with the approve form.
    let (page, csrf, cookie) =
        console_page(&p, "ana@dev.local", &format!("/console/workflow-runs/{id}")).await;
    for shown in [
        "Node sweep",
        "Node check",
        "Node ship",
        "r_squared &gt;= 0.9",
        "best",
        "Approve",
        validation.as_str(),
    ] {
        assert!(page.contains(shown), "{shown}: {page}");
    }
    let form = [
        ("_csrf", csrf.as_str()),
        ("action", "approve"),
        ("validation", validation.as_str()),
        ("reason", "every predictor, R² 0.995"),
    ];
    let resp = p
        .http
        .post(p.url(&format!("/console/workflow-runs/{id}/act")))
        .header("cookie", &cookie)
        .form(&form)
        .send()
        .await
        .expect("post");
    assert!(resp.status().is_redirection() || resp.status().is_success(), "{}", resp.status());
    let (s, b) = p.call(&ana, Method::GET, &format!("/v1/validations/{validation}"), None).await;
    assert_eq!((s, b["state"].as_str()), (200, Some("approved")), "{b}");

    // Then it is promoted through the gate, and the workflow run succeeds.
    let r = wait(&p, &id, ended).await;
    assert_eq!(r["state"], "succeeded", "{r:#}");
    assert_eq!(node(&r, "ship")["model_version"].as_str(), Some(version.as_str()));
    let (_, e) = p.call(p.token(), Method::GET, &format!("{project}/endpoints/longley"), None).await;
    assert_eq!(e["model_version"].as_str(), Some(version.as_str()), "{e:#}");

    // One message each, naming the run and the decision.
    let deadline = Instant::now() + Duration::from_secs(60);
    let sent = loop {
        let (_, page) = p.call(p.token(), Method::GET, &log, None).await;
        let sent: Vec<Value> = page["deliveries"].as_array().cloned().unwrap_or_default();
        if sent.len() >= 2 || Instant::now() > deadline {
            break sent;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let of = |event: &str| sent.iter().filter(|m| m["event"] == event).collect::<Vec<_>>();
    let (finished, decided) = (of("workflow.finished"), of("validation.decided"));
    assert_eq!((finished.len(), decided.len()), (1, 1), "{sent:#?}");
    let data = &finished[0]["payload"]["data"]["workflow_run"];
    assert_eq!(
        (data["id"].as_str(), data["state"].as_str()),
        (Some(id.as_str()), Some("succeeded")),
        "{data}"
    );
    assert_eq!(data["nodes"]["ship"], "succeeded", "{data}");
    let data = &decided[0]["payload"]["data"]["validation"];
    assert_eq!(
        (data["state"].as_str(), data["workflow_run"].as_str()),
        (Some("approved"), Some(id.as_str()))
    );
    assert_eq!(data["decisions"][0]["by"], "ana@dev.local", "{data}");

    // The project's page lists the run, the workflow and the policy in force.
    let (page, _, _) = console_page(&p, "vic@dev.local", "/console/t/dev/p/default/workflows").await;
    for shown in [id.as_str(), "sweep", "r_squared &gt;= 0.9", "Approvals by reviewers: 1"] {
        assert!(page.contains(shown), "{shown}: {page}");
    }

    // Listed, audited; ended runs refuse a cancel and a resume.
    let (s, list) = p.call(&vic, Method::GET, &format!("{project}/workflow-runs?workflow=sweep"), None).await;
    assert_eq!((s, list["runs"][0]["id"].as_str()), (200, Some(id.as_str())), "{list}");
    for action in ["cancel", "resume"] {
        let (s, b) = p.call(p.token(), Method::POST, &format!("/v1/workflow-runs/{id}/{action}"), None).await;
        assert_eq!((s, b["code"].as_str()), (409, Some("FAILED_PRECONDITION")), "{action}: {b}");
    }
    let (s, log) = p.call(&dev, Method::GET, "/v1/tenants/dev/audit?action=workflow.run", None).await;
    assert_eq!(
        (s, log["items"][0]["resource"].as_str().map(|r| r.ends_with(&id))),
        (200, Some(true)),
        "{log}"
    );

    // Updates are versions; admins delete, editors do not; the run keeps what it ran.
    let one = format!("{workflows}/sweep");
    let newer = SWEEP.replace("goal: maximize", "goal: minimize");
    let (s, w) = p.call(&ana, Method::PUT, &one, Some(json!({"definition": newer, "version": 1}))).await;
    assert_eq!((s, w["version"].as_u64()), (200, Some(2)), "{w}");
    let (s, b) = p.call(&ana, Method::PUT, &one, Some(json!({"definition": newer, "version": 1}))).await;
    assert_eq!((s, b["code"].as_str()), (409, Some("FAILED_PRECONDITION")), "{b}");
    let (s, w) = p.call(&vic, Method::GET, &format!("{one}?version=1"), None).await;
    assert_eq!(
        (s, w["definition"]["nodes"][0]["goal"].as_str(), w["latest"].as_u64()),
        (200, Some("maximize"), Some(2)),
        "{w}"
    );
    assert_eq!(p.call(&ana, Method::DELETE, &one, None).await.0, 403);
    assert_eq!(p.call(&rob, Method::DELETE, &one, None).await.0, 403);
    assert_eq!(p.call(&dev, Method::DELETE, &one, None).await.0, 204);
    assert_eq!(p.call(&vic, Method::GET, &one, None).await.0, 404);
    let (s, _) = p.call(&vic, Method::GET, &format!("/v1/workflow-runs/{id}"), None).await;
    assert_eq!(s, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_node_skips_its_dependants_and_a_resume_runs_only_what_did_not_succeed() {
    let p = TestPlatform::start(&[]).await;
    let ds = upload(&p, p.token(), "longley.csv", LONGLEY).await;
    let definition = json!({"nodes": [
        {"id": "broken", "kind": "run", "method": "diag.fail", "dataset": ds, "params": {"message": "broken on purpose"}},
        {"id": "after", "kind": "run", "method": "describe", "dataset": ds, "needs": ["broken"]},
        {"id": "stats", "kind": "run", "method": "describe", "dataset": "longley.csv"},
    ]});
    let workflows = format!("{}/workflows", p.project_path());
    let (s, b) = p
        .call(
            p.token(),
            Method::POST,
            &workflows,
            Some(json!({"name": "branches", "definition": definition})),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    let (s, r) =
        p.call(p.token(), Method::POST, &format!("{workflows}/branches/runs"), Some(json!({}))).await;
    assert_eq!(s, 201, "{r}");
    let id = r["id"].as_str().expect("id").to_owned();
    let r = wait(&p, &id, ended).await;
    assert_eq!(r["state"], "failed", "{r:#}");
    let states: Vec<(&str, &str)> = r["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| (n["id"].as_str().unwrap_or(""), n["state"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(states, [("broken", "failed"), ("after", "skipped"), ("stats", "succeeded")], "{r:#}");
    assert!(node(&r, "broken")["detail"].as_str().is_some_and(|d| d.starts_with("its run failed")), "{r:#}");
    let stats_run = node(&r, "stats")["runs"][0]["run"].clone();
    let broken_run = node(&r, "broken")["runs"][0]["run"].clone();

    let (s, r) = p.call(p.token(), Method::POST, &format!("/v1/workflow-runs/{id}/resume"), None).await;
    assert_eq!((s, r["attempt"].as_u64()), (200, Some(2)), "{r}");
    let r = wait(&p, &id, ended).await;
    assert_eq!(r["state"], "failed", "diag.fail fails again: {r:#}");
    let broken = node(&r, "broken");
    assert_eq!((broken["tries"].as_u64(), &broken["earlier_runs"][0]), (Some(2), &broken_run), "{r:#}");
    assert_ne!(broken["runs"][0]["run"], broken_run, "a new run");
    let stats = node(&r, "stats");
    assert_eq!(
        (stats["tries"].as_u64(), &stats["runs"][0]["run"]),
        (Some(1), &stats_run),
        "kept, not run again: {r:#}"
    );
    // The project has exactly the runs the workflow run named: `broken`
    // twice, `stats` once, `after` never.
    let (_, runs) = p.call(p.token(), Method::GET, &format!("{}/runs", p.project_path()), None).await;
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(3), "{runs:#}");
    assert_eq!(node(&r, "after")["tries"].as_u64(), Some(0), "{r:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_every_run_and_bad_definitions_name_the_node_and_field() {
    let p = TestPlatform::start(&[]).await;
    let ds = upload(&p, p.token(), "longley.csv", LONGLEY).await;
    let workflows = format!("{}/workflows", p.project_path());
    let cases = [
        (
            "nodes:\n  - {id: fit, kind: run, method: tabular.linear, dataset: longley.csv, timeout_s: soon}",
            "node `fit`, field `timeout_s`",
        ),
        (
            "nodes:\n  - {id: fit, kind: run, method: tabular.linear, dataset: longley.csv, params: {y: 3}}",
            "node `fit`, field `params`",
        ),
        (
            "nodes:\n  - {id: fit, kind: run, method: tabular.lnear, dataset: longley.csv}",
            "unknown method `tabular.lnear`",
        ),
        (
            "nodes:\n  - {id: ship, kind: deploy, needs: [ghost], endpoint: e}",
            "node `ship`, field `needs[0]`: no node `ghost`",
        ),
        ("nodes: [", "not YAML or JSON"),
    ];
    for (text, says) in cases {
        let (s, b) = p
            .call(p.token(), Method::POST, &workflows, Some(json!({"name": "bad", "definition": text})))
            .await;
        assert_eq!((s, b["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{text}: {b}");
        assert!(b["detail"].as_str().is_some_and(|d| d.contains(says)), "{text}: {b}");
    }
    let definition = json!({"nodes": [
        {"id": "naps", "kind": "search.grid", "method": "diag.sleep", "dataset": ds, "grid": {"seconds": [30, 31]}, "metric": "slept"},
        {"id": "later", "kind": "run", "method": "describe", "dataset": ds, "needs": ["naps"]},
    ]});
    let (s, b) = p
        .call(p.token(), Method::POST, &workflows, Some(json!({"name": "naps", "definition": definition})))
        .await;
    assert_eq!(s, 201, "{b}");
    let (s, r) = p.call(p.token(), Method::POST, &format!("{workflows}/naps/runs"), Some(json!({}))).await;
    assert_eq!(s, 201, "{r}");
    let id = r["id"].as_str().expect("id").to_owned();
    let runs: Vec<String> = node(&r, "naps")["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|c| c["run"].as_str().expect("run").to_owned())
        .collect();
    assert_eq!(runs.len(), 2);
    for run in &runs {
        p.wait_run(run, Duration::from_secs(60), |r| r["state"] == "running").await;
    }
    let (s, r) = p.call(p.token(), Method::POST, &format!("/v1/workflow-runs/{id}/cancel"), None).await;
    assert_eq!((s, r["state"].as_str()), (200, Some("cancelled")), "{r}");
    assert!(r["nodes"].as_array().expect("nodes").iter().all(|n| n["state"] == "cancelled"), "{r:#}");
    for run in &runs {
        assert_eq!(p.wait_final(run).await["state"], "cancelled", "{run}");
    }
}
