//! A run's name, note and tags: changed by `PATCH /v1/runs/{id}` (runners,
//! the `runs:write` scope), shown by the run and the runs list, audited
//! `run.update`, refused in words when malformed, invisible across tenants;
//! the run's state and `updated_at` do not move.

use std::sync::Arc;

use mapi_tests::TestPlatform;
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn a_run_is_named_noted_and_tagged_by_those_who_may() {
    let executor = Arc::new(mapi_executor::scripted::ScriptedExecutor::default());
    let accounts = "admin@dev.local,dev@dev.local,owner@other.test";
    let options = mapi_tests::Options { background: false, executor: Some(executor), ..Default::default() };
    let p = TestPlatform::start_with(&[("MAPI_DEV_ACCOUNTS", accounts)], options).await;
    let dataset = p.upload("x,y\n1,2\n2,4\n").await;
    let id = p.submit(json!({"method": "describe", "dataset": dataset})).await;
    let before = p.run(&id).await;
    let path = format!("/v1/runs/{id}");

    let change =
        json!({"name": "baseline", "note": "before the new deflator", "tags": ["q3", "employment", "q3"]});
    let (s, run) = p.call(p.token(), Method::PATCH, &path, Some(change)).await;
    assert_eq!(s, 200, "{run}");
    assert_eq!(run["name"], "baseline");
    assert_eq!(run["note"], "before the new deflator");
    assert_eq!(run["tags"], json!(["employment", "q3"]), "sorted, each once");
    assert_eq!((&run["state"], &run["updated_at"]), (&before["state"], &before["updated_at"]));

    // Left out is kept; "" clears.
    let (s, run) = p.call(p.token(), Method::PATCH, &path, Some(json!({"note": ""}))).await;
    assert_eq!(s, 200, "{run}");
    assert!(run.get("note").is_none() && run["name"] == "baseline", "{run}");
    let (_, page) = p.call(p.token(), Method::GET, &format!("{}/runs", p.project_path()), None).await;
    let listed = page["runs"].as_array().and_then(|r| r.iter().find(|r| r["id"] == id.as_str())).cloned();
    let listed = listed.expect("listed");
    assert_eq!((&listed["name"], &listed["tags"]), (&json!("baseline"), &json!(["employment", "q3"])));

    // Malformed changes are refused with what to fix, and change nothing.
    for (body, needle) in [
        (json!({"tags": ["Not A Tag"]}), "`Not A Tag`"),
        (json!({}), "name a field to change"),
        (json!({"name": "x".repeat(201)}), "at most 200"),
    ] {
        let (s, problem) = p.call(p.token(), Method::PATCH, &path, Some(body)).await;
        assert_eq!((s, problem["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{problem}");
        assert!(problem["detail"].as_str().unwrap_or("").contains(needle), "{needle}: {problem}");
    }
    let (s, problem) = p.call(p.token(), Method::PATCH, &path, Some(json!({"state": "succeeded"}))).await;
    assert_eq!(s, 400, "{problem}");
    assert_eq!(p.run(&id).await["name"], "baseline");

    // A token without runs:write, and another tenant, change nothing.
    let admin = p.login("dev@dev.local").await;
    let body = json!({"name": "submit-only", "scopes": ["runs:create"]});
    let (s, t) = p.call(&admin, Method::POST, "/v1/tenants/dev/projects/default/tokens", Some(body)).await;
    assert_eq!(s, 201, "{t}");
    let narrow = t["secret"].as_str().expect("secret");
    let (s, refused) = p.call(narrow, Method::PATCH, &path, Some(json!({"name": "x"}))).await;
    assert_eq!(s, 403, "{refused}");
    let operator = p.login("admin@dev.local").await;
    let other = p.create_tenant(&operator, "other", "verified").await;
    let (s, hidden) = p.call(&other, Method::PATCH, &path, Some(json!({"name": "x"}))).await;
    assert_eq!(s, 404, "another tenant's run does not exist for them: {hidden}");

    let (_, log) = p.call(&admin, Method::GET, "/v1/tenants/dev/audit?action=run.update", None).await;
    let items = log["items"].as_array().expect("items");
    let succeeded: Vec<_> = items.iter().filter(|e| e["outcome"] == "success").collect();
    assert_eq!(succeeded.len(), 2, "{log}");
    assert_eq!(succeeded[1]["detail"], "changed name, note, tags");
    assert_eq!(succeeded[0]["resource"], format!("runs/{id}"));
}
