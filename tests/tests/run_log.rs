//! Logging to a run (`POST /v1/runs/{id}/log`, `GET …/log`): metric series
//! with steps and params, in any state, shown on the run (each metric's
//! value at its highest step) and compared by `mapi runs compare`; bounded
//! per run, refused whole in words; runners and `runs:write` tokens only;
//! another tenant's run does not exist; each log audited `run.log`.

use std::sync::Arc;

use mapi_tests::TestPlatform;
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn metrics_and_params_are_logged_shown_bounded_scoped_and_audited() {
    let executor = Arc::new(mapi_executor::scripted::ScriptedExecutor::default());
    let accounts = "admin@dev.local,dev@dev.local,owner@other.test";
    let options = mapi_tests::Options { background: false, executor: Some(executor), ..Default::default() };
    let p = TestPlatform::start_with(&[("MAPI_DEV_ACCOUNTS", accounts)], options).await;
    let dataset = p.upload("x,y\n1,2\n2,4\n3,7\n").await;
    let id = p.submit(json!({"method": "tabular.linear", "dataset": dataset, "params": {"y": "y"}})).await;
    let log = format!("/v1/runs/{id}/log");

    let first = json!({
        "metrics": [{"name": "loss", "value": 0.9}, {"name": "loss", "value": 0.5}, {"name": "val/acc", "value": 0.7, "step": 3}],
        "params": {"lr": 0.01, "optimizer": "adam"}
    });
    let (s, b) = p.call(p.token(), Method::POST, &log, Some(first)).await;
    assert_eq!(s, 200, "{b}");
    let steps: Vec<u64> =
        b["series"]["loss"].as_array().expect("loss").iter().filter_map(|p| p["step"].as_u64()).collect();
    assert_eq!(steps, [0, 1], "points without a step follow the series' last");
    let (s, b) = p
        .call(
            p.token(),
            Method::POST,
            &log,
            Some(json!({"metrics": [{"name": "loss", "value": 0.8, "step": 0}]})),
        )
        .await;
    assert_eq!(s, 200, "{b}");

    let run = p.run(&id).await;
    assert_eq!(run["state"], "queued", "logging does not touch the run's life");
    assert_eq!(run["logged_metrics"], json!({"loss": 0.5, "val/acc": 0.7}), "the value at the highest step");
    assert_eq!(run["logged_params"], json!({"lr": 0.01, "optimizer": "adam"}));
    let (_, whole) = p.call(p.token(), Method::GET, &log, None).await;
    assert_eq!(whole["series"]["loss"].as_array().map(Vec::len), Some(3), "{whole}");

    // Refused whole, in words; nothing of a refused request is kept.
    let refused = [
        (json!({}), "at least one"),
        (json!({"metrics": [{"name": "a b", "value": 1}]}), "letters, digits"),
        (
            json!({"metrics": [{"name": "ok", "value": 1}], "params": {"p": {"nested": true}}}),
            "a number or true/false",
        ),
        (json!({"metrics": [{"name": "loss", "value": "high"}]}), "metrics[0].value"),
    ];
    for (body, words) in refused {
        let (s, problem) = p.call(p.token(), Method::POST, &log, Some(body.clone())).await;
        assert_eq!((s, problem["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{body}: {problem}");
        assert!(problem["detail"].as_str().unwrap_or_default().contains(words), "{words:?}: {problem}");
    }
    let too_many: Vec<_> = (0..5_001).map(|i| json!({"name": format!("m{}", i % 50), "value": i})).collect();
    for chunk in too_many.chunks(100).take(49) {
        let (s, b) = p.call(p.token(), Method::POST, &log, Some(json!({"metrics": chunk}))).await;
        assert_eq!(s, 200, "{b}");
    }
    let (s, problem) =
        p.call(p.token(), Method::POST, &log, Some(json!({"metrics": too_many[4_900..5_000]}))).await;
    assert_eq!(s, 400, "the 5,000-point bound: {problem}");
    assert!(
        problem["detail"].as_str().unwrap_or_default().contains("at most 5000 metric points"),
        "{problem}"
    );
    let (_, whole) = p.call(p.token(), Method::GET, &log, None).await;
    assert!(whole["series"].get("ok").is_none(), "a refused request added nothing: {whole}");

    // Who may: runs:write tokens log, models:read tokens read; other tenants see nothing.
    let admin = p.login("dev@dev.local").await;
    let tokens = "/v1/tenants/dev/projects/default/tokens";
    let mint = |scope: &str| json!({"name": scope.replace(':', "-"), "scopes": [scope]});
    let (_, reader) = p.call(&admin, Method::POST, tokens, Some(mint("models:read"))).await;
    let (_, writer) = p.call(&admin, Method::POST, tokens, Some(mint("runs:write"))).await;
    let (reader, writer) =
        (reader["secret"].as_str().expect("secret"), writer["secret"].as_str().expect("secret"));
    let one = json!({"params": {"seed": 7}});
    assert_eq!(p.call(reader, Method::POST, &log, Some(one.clone())).await.0, 403);
    assert_eq!(p.call(reader, Method::GET, &log, None).await.0, 200);
    assert_eq!(p.call(writer, Method::POST, &log, Some(one.clone())).await.0, 200);
    let operator = p.login("admin@dev.local").await;
    let other = p.create_tenant(&operator, "other", "verified").await;
    assert_eq!(p.call(&other, Method::POST, &log, Some(one)).await.0, 404);
    assert_eq!(p.call(&other, Method::GET, &log, None).await.0, 404);

    let (_, audit) =
        p.call(&admin, Method::GET, "/v1/tenants/dev/audit?action=run.log&limit=100", None).await;
    let entries = audit["items"].as_array().expect("items");
    assert_eq!(entries.len(), 2 + 49 + 1, "one entry per accepted log: {}", entries.len());
    assert!(entries.iter().all(|e| e["resource"] == format!("runs/{id}")));
}
