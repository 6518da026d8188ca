//! Retrying an ended run (`POST /v1/runs/{id}/retry`, `mapi runs retry`): a
//! new run of the same spec, name and tags that names the run it retries,
//! admitted like any submit (the `runs:create` scope, the runner role, the
//! quotas, an Idempotency-Key replaying the same retry), audited
//! `run.create`; a run that has not ended is refused in words, and another
//! tenant's run does not exist.

use std::sync::Arc;

use mapi_tests::TestPlatform;
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn an_ended_run_is_retried_as_a_new_run_of_the_same_spec_and_labels() {
    let executor = Arc::new(mapi_executor::scripted::ScriptedExecutor::default());
    let accounts = "admin@dev.local,dev@dev.local,owner@other.test";
    let options = mapi_tests::Options { background: false, executor: Some(executor), ..Default::default() };
    let p = TestPlatform::start_with(&[("MAPI_DEV_ACCOUNTS", accounts)], options).await;
    let dataset = p.upload("x,y\n1,2\n2,4\n3,7\n").await;
    let spec = json!({"method": "tabular.linear", "dataset": dataset, "params": {"y": "y"}, "class": "M", "timeout_s": 900});
    let id = p.submit(spec).await;
    let labels = json!({"name": "baseline", "note": "first try", "tags": ["q3"]});
    let (s, _) = p.call(p.token(), Method::PATCH, &format!("/v1/runs/{id}"), Some(labels)).await;
    assert_eq!(s, 200);
    let retry = format!("/v1/runs/{id}/retry");

    // A run that has not ended is refused, saying what to do.
    let (s, problem) = p.call(p.token(), Method::POST, &retry, None).await;
    assert_eq!((s, problem["code"].as_str()), (409, Some("FAILED_PRECONDITION")), "{problem}");
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("still queued") && detail.contains("cancel it"), "{problem}");

    let (s, cancelled) = p.cancel(p.token(), &id).await;
    assert_eq!((s, cancelled["state"].as_str()), (200, Some("cancelled")), "{cancelled}");
    let (s, new) = p.call(p.token(), Method::POST, &retry, None).await;
    assert_eq!(s, 201, "{new}");
    assert_ne!(new["id"], id.as_str());
    assert_eq!(new["retry_of"], id.as_str());
    assert_eq!(new["state"], "queued");
    for field in
        ["method", "dataset", "params", "requested_class", "timeout_s", "tasks", "name", "note", "tags"]
    {
        assert_eq!(new[field], cancelled[field], "{field} is the retried run's");
    }
    assert_eq!(p.run(&id).await["state"], "cancelled", "the retried run is left as it was");
    assert!(p.run(new["id"].as_str().expect("id")).await["retry_of"] == id.as_str());

    // The same Idempotency-Key answers the same retry; another key another one.
    let keyed = |key: &'static str| {
        p.http.post(p.url(&retry)).bearer_auth(p.token()).header("idempotency-key", key).send()
    };
    let first: serde_json::Value = keyed("retry-once").await.expect("retry").json().await.expect("json");
    let again = keyed("retry-once").await.expect("retry");
    assert_eq!(again.status(), 200, "a repeated key replays");
    let again: serde_json::Value = again.json().await.expect("json");
    assert_eq!(again["id"], first["id"]);
    assert_ne!(first["id"], new["id"]);

    // Retrying spends compute: runs:create; a token without it is refused,
    // and another tenant's run does not exist for them.
    let admin = p.login("dev@dev.local").await;
    let mint = |name: &str, scope: &str| json!({"name": name, "scopes": [scope]});
    let tokens = "/v1/tenants/dev/projects/default/tokens";
    let (_, reader) = p.call(&admin, Method::POST, tokens, Some(mint("reader", "models:read"))).await;
    let (s, refused) = p.call(reader["secret"].as_str().expect("secret"), Method::POST, &retry, None).await;
    assert_eq!(s, 403, "{refused}");
    let (_, runner) = p.call(&admin, Method::POST, tokens, Some(mint("runner", "runs:create"))).await;
    let (s, by_token) = p.call(runner["secret"].as_str().expect("secret"), Method::POST, &retry, None).await;
    assert_eq!((s, &by_token["retry_of"]), (201, &json!(id)), "{by_token}");
    let operator = p.login("admin@dev.local").await;
    let other = p.create_tenant(&operator, "other", "verified").await;
    let (s, hidden) = p.call(&other, Method::POST, &retry, None).await;
    assert_eq!(s, 404, "{hidden}");

    let (_, log) = p.call(&admin, Method::GET, "/v1/tenants/dev/audit?action=run.create", None).await;
    let retries = log["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|e| e["detail"].as_str().is_some_and(|d| d.ends_with(&format!("a retry of {id}"))))
        .count();
    assert_eq!(retries, 3, "each retry is audited as the run it made: {log}");

    // The console shows the name, the tags and what a run retries.
    let cookie = format!("mapi_console={}", p.console_session("dev@dev.local").await);
    let page = |path: String| p.http.get(p.url(&path)).header("cookie", cookie.clone()).send();
    let new_id = new["id"].as_str().expect("id");
    let detail = page(format!("/console/runs/{new_id}")).await.expect("page").text().await.expect("html");
    assert!(detail.contains("Retry of") && detail.contains(&format!("/console/runs/{id}")), "{detail}");
    assert!(detail.contains("baseline") && detail.contains("first try"), "{detail}");
    let list =
        page("/console/t/dev/p/default/runs".to_owned()).await.expect("page").text().await.expect("html");
    assert!(
        list.contains(">baseline</a>") && list.contains("tags: q3"),
        "the run is listed by its name: {list}"
    );
}
