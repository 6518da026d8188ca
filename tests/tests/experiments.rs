//! Experiments and saved views of the runs table, over HTTP: runners make,
//! change and delete them (a viewer and a `models:read` token may only
//! read; another tenant sees none), each change audited; a run joins an
//! experiment that exists, named in the same commit; the runs list takes
//! an experiment and a saved view's filters (a filter given replaces the
//! view's); an experiment that holds runs is not deleted.

use std::sync::Arc;

use mapi_tests::{Options, TestPlatform, run_ids as ids};
use reqwest::Method;
use serde_json::json;

const ACCOUNTS: &str =
    "admin@dev.local,dev@dev.local,owner@acme.test,runner@acme.test,viewer@acme.test,owner@other.test";
const BASE: &str = "/v1/tenants/acme/projects/default";

struct World {
    p: TestPlatform,
    runner: String,
    viewer: String,
    other: String,
    runs: Vec<String>,
}

async fn world() -> World {
    let executor = Arc::new(mapi_executor::scripted::ScriptedExecutor::default());
    let options = Options { background: false, executor: Some(executor), ..Default::default() };
    let p = TestPlatform::start_with(&[("MAPI_DEV_ACCOUNTS", ACCOUNTS)], options).await;
    let operator = p.login("admin@dev.local").await;
    let admin = p.create_tenant(&operator, "acme", "verified").await;
    for (email, role) in [("runner@acme.test", "runner"), ("viewer@acme.test", "viewer")] {
        let body = json!({"email": email, "role": role});
        let (s, b) = p.call(&admin, Method::POST, "/v1/tenants/acme/members", Some(body)).await;
        assert_eq!(s, 201, "{b}");
    }
    let runner = p.login("runner@acme.test").await;
    let viewer = p.login("viewer@acme.test").await;
    let other = p.create_tenant(&operator, "other", "verified").await;
    let dataset = p.upload_as(&admin, BASE, "x,y\n1,2\n2,4\n").await;
    let mut runs = Vec::new();
    for method in ["describe", "describe", "tabular.linear"] {
        let spec = json!({"method": method, "dataset": dataset, "params": if method == "describe" { json!({}) } else { json!({"y": "y"}) }});
        let (s, run) = p.call(&runner, Method::POST, &format!("{BASE}/runs"), Some(spec)).await;
        assert_eq!(s, 201, "{run}");
        runs.push(run["id"].as_str().expect("id").to_owned());
    }
    World { p, runner, viewer, other, runs }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_experiment_holds_the_runs_that_join_it_and_goes_only_once_empty() {
    let w = world().await;
    let (p, experiments) = (&w.p, format!("{BASE}/experiments"));
    let study = json!({"name": "deflator-study", "description": "does the deflator matter?"});
    let (s, b) = p.call(&w.viewer, Method::POST, &experiments, Some(study.clone())).await;
    assert_eq!(s, 403, "a viewer makes no experiment: {b}");
    let (s, b) = p.call(&w.other, Method::POST, &experiments, Some(study.clone())).await;
    assert_eq!(s, 404, "another tenant sees no project: {b}");
    let (s, made) = p.call(&w.runner, Method::POST, &experiments, Some(study.clone())).await;
    assert_eq!((s, made["name"].as_str()), (201, Some("deflator-study")), "{made}");
    let (s, again) = p.call(&w.runner, Method::POST, &experiments, Some(study)).await;
    assert_eq!((s, again["code"].as_str()), (409, Some("ALREADY_EXISTS")), "{again}");
    let (s, bad) = p.call(&w.runner, Method::POST, &experiments, Some(json!({"name": "Q3 Study"}))).await;
    assert_eq!(s, 400, "{bad}");
    assert!(bad["detail"].as_str().is_some_and(|d| d.contains("is not a name")), "{bad}");

    // A run joins an experiment that exists, and only such a one.
    let join = |e: &str| json!({"experiment": e});
    let (s, b) =
        p.call(&w.runner, Method::PATCH, &format!("/v1/runs/{}", w.runs[0]), Some(join("nowhere"))).await;
    assert_eq!(s, 400, "{b}");
    assert!(b["detail"].as_str().is_some_and(|d| d.contains("make it first")), "{b}");
    for run in &w.runs[..2] {
        let (s, b) =
            p.call(&w.runner, Method::PATCH, &format!("/v1/runs/{run}"), Some(join("deflator-study"))).await;
        assert_eq!((s, b["experiment"].as_str()), (200, Some("deflator-study")), "{b}");
    }
    let (s, page) =
        p.call(&w.viewer, Method::GET, &format!("{BASE}/runs?experiment=deflator-study"), None).await;
    assert_eq!(s, 200, "{page}");
    assert_eq!(ids(&page), [w.runs[1].clone(), w.runs[0].clone()], "its runs, newest first");
    assert!(page["runs"][0]["experiment"] == "deflator-study", "{page}");

    let one = format!("{experiments}/deflator-study");
    let (s, b) = p.call(&w.runner, Method::PATCH, &one, Some(json!({"description": "it does"}))).await;
    assert_eq!((s, b["description"].as_str()), (200, Some("it does")), "{b}");
    let (s, listed) = p.call(&w.viewer, Method::GET, &experiments, None).await;
    assert_eq!((s, listed["experiments"].as_array().map(Vec::len)), (200, Some(1)), "{listed}");

    let (s, held) = p.call(&w.runner, Method::DELETE, &one, None).await;
    assert_eq!((s, held["code"].as_str()), (409, Some("FAILED_PRECONDITION")), "{held}");
    for run in &w.runs[..2] {
        let (s, b) = p.call(&w.runner, Method::PATCH, &format!("/v1/runs/{run}"), Some(join(""))).await;
        assert!(s == 200 && b.get("experiment").is_none(), "{b}");
    }
    let (s, b) = p.call(&w.viewer, Method::DELETE, &one, None).await;
    assert_eq!(s, 403, "{b}");
    let (s, _) = p.call(&w.runner, Method::DELETE, &one, None).await;
    assert_eq!(s, 204);
    let (s, gone) = p.call(&w.runner, Method::GET, &one, None).await;
    assert_eq!(s, 404, "{gone}");

    let (_, log) = p
        .call(&p.login("owner@acme.test").await, Method::GET, "/v1/tenants/acme/audit?limit=100", None)
        .await;
    let actions: Vec<&str> =
        log["items"].as_array().expect("items").iter().filter_map(|e| e["action"].as_str()).collect();
    for action in ["experiment.create", "experiment.update", "experiment.delete"] {
        assert_eq!(actions.iter().filter(|a| **a == action).count(), 1, "{action} once: {actions:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_view_is_a_named_set_of_filters_the_runs_list_takes() {
    let w = world().await;
    let p = &w.p;
    let view = format!("{BASE}/run-views/fits");
    let body = json!({"filters": {"method": "tabular.linear"}, "columns": ["id", "state", "params.y", "metrics.r_squared"]});
    let (s, b) = p.call(&w.viewer, Method::PUT, &view, Some(body.clone())).await;
    assert_eq!(s, 403, "a viewer saves no view: {b}");
    let (s, saved) = p.call(&w.runner, Method::PUT, &view, Some(body)).await;
    assert_eq!((s, &saved["columns"][2]), (201, &json!("params.y")), "{saved}");
    let (s, page) = p.call(&w.viewer, Method::GET, &format!("{BASE}/runs?view=fits"), None).await;
    assert_eq!((s, ids(&page)), (200, vec![w.runs[2].clone()]), "the view's filters: {page}");
    // The view's param and metric columns come with each run, logged values first.
    assert_eq!(page["runs"][0]["values"], json!({"params.y": "y"}), "the view's columns: {page}");
    let log =
        json!({"metrics": [{"name": "r_squared", "value": 0.25, "step": 1}], "params": {"y": "logged"}});
    let (s, b) = p.call(&w.runner, Method::POST, &format!("/v1/runs/{}/log", w.runs[2]), Some(log)).await;
    assert_eq!(s, 200, "{b}");
    let (s, page) = p.call(&w.viewer, Method::GET, &format!("{BASE}/runs?view=fits"), None).await;
    assert_eq!(
        (s, &page["runs"][0]["values"]),
        (200, &json!({"params.y": "logged", "metrics.r_squared": 0.25})),
        "{page}"
    );
    let (s, page) =
        p.call(&w.viewer, Method::GET, &format!("{BASE}/runs?columns=metrics.r_squared"), None).await;
    let with: Vec<&serde_json::Value> =
        page["runs"].as_array().into_iter().flatten().filter(|r| r.get("values").is_some()).collect();
    assert_eq!((s, with.len()), (200, 1), "only the run with the metric carries a value: {page}");
    let (s, bad) = p.call(&w.viewer, Method::GET, &format!("{BASE}/runs?columns=cost"), None).await;
    assert_eq!(s, 400, "{bad}");
    let (s, page) =
        p.call(&w.viewer, Method::GET, &format!("{BASE}/runs?view=fits&method=describe"), None).await;
    assert_eq!((s, ids(&page).len()), (200, 2), "a filter given replaces the view's: {page}");
    let (s, missing) = p.call(&w.viewer, Method::GET, &format!("{BASE}/runs?view=nothing"), None).await;
    assert_eq!(s, 404, "{missing}");

    // Saved again: replaced, with the default columns when none are named.
    let (s, replaced) =
        p.call(&w.runner, Method::PUT, &view, Some(json!({"filters": {"state": "queued"}}))).await;
    assert_eq!((s, &replaced["created_at"]), (200, &saved["created_at"]), "{replaced}");
    assert!(replaced["columns"].as_array().is_some_and(|c| c.len() > 3 && c[0] == "id"), "{replaced}");
    let refused = [
        (json!({"columns": ["cost"]}), "is not a column"),
        (json!({"filters": {"tag": "Not A Tag"}}), "is not a tag"),
        (json!({"filters": {"colour": "red"}}), ""),
    ];
    for (body, words) in refused {
        let (s, problem) = p.call(&w.runner, Method::PUT, &view, Some(body.clone())).await;
        assert_eq!((s, problem["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{body}: {problem}");
        assert!(problem["detail"].as_str().is_some_and(|d| d.contains(words)), "{body}: {problem}");
    }
    let (s, listed) = p.call(&w.other, Method::GET, &format!("{BASE}/run-views"), None).await;
    assert_eq!(s, 404, "{listed}");
    let (s, listed) = p.call(&w.viewer, Method::GET, &format!("{BASE}/run-views"), None).await;
    assert_eq!((s, listed["views"].as_array().map(Vec::len)), (200, Some(1)), "{listed}");
    let (s, _) = p.call(&w.runner, Method::DELETE, &view, None).await;
    assert_eq!(s, 204);
    let (s, _) = p.call(&w.runner, Method::DELETE, &view, None).await;
    assert_eq!(s, 404, "deleted once");
}
