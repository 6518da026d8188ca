//! A run's name, note and tags: changed by `PATCH /v1/runs/{id}` (runners,
//! the `runs:write` scope), shown by the run and the runs list, audited
//! `run.update`, refused in words when malformed, invisible across tenants;
//! the run's state and `updated_at` do not move.

use std::sync::Arc;

use mapi_tests::{TestPlatform, run_ids as ids};
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

#[tokio::test]
async fn the_runs_list_finds_runs_by_tag_a_page_at_a_time() {
    let executor = Arc::new(mapi_executor::scripted::ScriptedExecutor::default());
    let options = mapi_tests::Options { background: false, executor: Some(executor), ..Default::default() };
    let p = TestPlatform::start_with(&[], options).await;
    let dataset = p.upload("x,y\n1,2\n2,4\n").await;
    let mut tagged = Vec::new();
    for i in 0..5 {
        let id = p.submit(json!({"method": "describe", "dataset": dataset})).await;
        let tags = if i % 2 == 0 { json!(["nightly", "q3"]) } else { json!(["q3"]) };
        let (s, b) =
            p.call(p.token(), Method::PATCH, &format!("/v1/runs/{id}"), Some(json!({"tags": tags}))).await;
        assert_eq!(s, 200, "{b}");
        if i % 2 == 0 {
            tagged.push(id);
        }
    }
    tagged.reverse();
    let runs = format!("{}/runs", p.project_path());
    let (mut seen, mut token) = (Vec::new(), None::<String>);
    loop {
        let mut path = format!("{runs}?tag=nightly&page_size=2");
        if let Some(t) = &token {
            path.push_str(&format!("&page_token={t}"));
        }
        let (s, page) = p.call(p.token(), Method::GET, &path, None).await;
        assert_eq!(s, 200, "{page}");
        seen.extend(ids(&page));
        match page["next_page_token"].as_str() {
            Some(t) => token = Some(t.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, tagged, "the tagged runs, newest first, each once");
    let (_, page) = p.call(p.token(), Method::GET, &format!("{runs}?tag=q3&state=queued"), None).await;
    assert_eq!(page["runs"].as_array().map(Vec::len), Some(5), "with another filter: {page}");
    let (_, page) = p.call(p.token(), Method::GET, &format!("{runs}?tag=nowhere"), None).await;
    assert_eq!(page["runs"], json!([]), "{page}");
    let (s, problem) = p.call(p.token(), Method::GET, &format!("{runs}?tag=Not%20a%20tag"), None).await;
    assert_eq!((s, problem["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{problem}");
    assert!(problem["detail"].as_str().is_some_and(|d| d.contains("is not a tag")), "{problem}");
}

#[tokio::test]
async fn the_runs_list_finds_runs_by_a_params_value() {
    let executor = Arc::new(mapi_executor::scripted::ScriptedExecutor::default());
    let options = mapi_tests::Options { background: false, executor: Some(executor), ..Default::default() };
    let p = TestPlatform::start_with(&[], options).await;
    let dataset = p.upload("x,y,z\n1,2,3\n2,4,5\n3,7,8\n").await;
    let on_y = p.submit(json!({"method": "tabular.linear", "dataset": dataset, "params": {"y": "y"}})).await;
    let on_z = p.submit(json!({"method": "tabular.linear", "dataset": dataset, "params": {"y": "z"}})).await;
    let bare = p
        .submit(
            json!({"method": "tabular.linear", "dataset": dataset, "params": {"y": "y", "intercept": false}}),
        )
        .await;
    let runs = format!("{}/runs", p.project_path());
    let (s, page) = p.call(p.token(), Method::GET, &format!("{runs}?param=y=y"), None).await;
    assert_eq!((s, ids(&page)), (200, vec![bare.clone(), on_y.clone()]), "{page}");
    let (_, page) = p.call(p.token(), Method::GET, &format!("{runs}?param=y=z"), None).await;
    assert_eq!(ids(&page), [on_z], "{page}");
    let (_, page) =
        p.call(p.token(), Method::GET, &format!("{runs}?param=intercept=false&state=queued"), None).await;
    assert_eq!(ids(&page), [bare], "a boolean as JSON writes it, with another filter: {page}");
    for (query, words) in [("param=novalue", "NAME=VALUE"), ("param=y=y&tag=q3", "not both")] {
        let (s, problem) = p.call(p.token(), Method::GET, &format!("{runs}?{query}"), None).await;
        assert_eq!((s, problem["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{query}: {problem}");
        assert!(problem["detail"].as_str().is_some_and(|d| d.contains(words)), "{query}: {problem}");
    }
}
