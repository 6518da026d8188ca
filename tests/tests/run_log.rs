//! Logging to a run (`POST /v1/runs/{id}/log`, `GET …/log`): metric series
//! with steps and params, in any state, shown on the run (each metric's
//! value at its highest step) and compared by `mapi runs compare`; bounded
//! per run, refused whole in words; runners and `runs:write` tokens only;
//! another tenant's run does not exist; each log audited `run.log`. Images
//! (`PUT /v1/runs/{id}/images/{name}`): told by their bytes, at most 1 MiB,
//! replaced by name, linked with an `artifact.link` audit entry.

use std::sync::Arc;

use mapi_tests::TestPlatform;
use reqwest::Method;
use serde_json::{Value, json};

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

/// The first bytes of a PNG file and a little more: what the platform reads
/// to tell an image's type.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0";

async fn put_image(p: &TestPlatform, token: &str, path: &str, bytes: Vec<u8>) -> (u16, Value) {
    let resp = p.http.put(p.url(path)).bearer_auth(token).body(bytes).send().await.expect("put");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn images_are_logged_told_by_their_bytes_bounded_and_linked_with_an_audit_entry() {
    let executor = Arc::new(mapi_executor::scripted::ScriptedExecutor::default());
    let accounts = "admin@dev.local,dev@dev.local,owner@other.test";
    let options = mapi_tests::Options { background: false, executor: Some(executor), ..Default::default() };
    let p = TestPlatform::start_with(&[("MAPI_DEV_ACCOUNTS", accounts)], options).await;
    let dataset = p.upload("x,y\n1,2\n2,4\n3,7\n").await;
    let id = p.submit(json!({"method": "describe", "dataset": dataset})).await;
    let image = format!("/v1/runs/{id}/images/loss.png");

    let (s, log) = put_image(&p, p.token(), &format!("{image}?step=3"), PNG.to_vec()).await;
    assert_eq!(s, 200, "{log}");
    let logged = &log["images"]["loss.png"];
    assert_eq!(
        (&logged["content_type"], &logged["size"], &logged["step"]),
        (&json!("image/png"), &json!(PNG.len()), &json!(3))
    );
    let (s, log) = put_image(&p, p.token(), &image, [PNG, b"more"].concat()).await;
    assert_eq!((s, log["images"].as_object().map(|m| m.len())), (200, Some(1)), "replaced by name: {log}");

    let refused = [
        (b"<svg onload=alert(1)/>".to_vec(), 415, "PNG, JPEG, WebP or GIF"),
        ([PNG, &vec![0u8; 1_048_577]].concat(), 413, ""),
    ];
    for (bytes, status, words) in refused {
        let (s, problem) = put_image(&p, p.token(), &format!("/v1/runs/{id}/images/other.png"), bytes).await;
        assert_eq!(s, status, "{problem}");
        assert!(problem["detail"].as_str().unwrap_or_default().contains(words), "{problem}");
    }
    let (s, problem) =
        put_image(&p, p.token(), &format!("/v1/runs/{id}/images/a%20b.png"), PNG.to_vec()).await;
    assert_eq!((s, problem["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{problem}");
    let (_, whole) = p.call(p.token(), Method::GET, &format!("/v1/runs/{id}/log"), None).await;
    assert_eq!(whole["images"].as_object().map(|m| m.len()), Some(1), "refusals added nothing: {whole}");

    let (s, link) = p.call(p.token(), Method::POST, &format!("{image}/url"), None).await;
    assert_eq!((s, link["content_type"].as_str()), (200, Some("image/png")), "{link}");
    let bytes = p
        .http
        .get(link["url"].as_str().expect("url"))
        .send()
        .await
        .expect("get")
        .bytes()
        .await
        .expect("bytes");
    assert_eq!(&bytes[..], &[PNG, b"more"].concat()[..], "the bytes last logged");
    let (s, _) = p.call(p.token(), Method::POST, &format!("/v1/runs/{id}/images/none.png/url"), None).await;
    assert_eq!(s, 404);
    let operator = p.login("admin@dev.local").await;
    let other = p.create_tenant(&operator, "other", "verified").await;
    assert_eq!(put_image(&p, &other, &image, PNG.to_vec()).await.0, 404);
    assert_eq!(p.call(&other, Method::POST, &format!("{image}/url"), None).await.0, 404);

    let admin = p.login("dev@dev.local").await;
    let (_, audit) = p.call(&admin, Method::GET, "/v1/tenants/dev/audit?action=run.log", None).await;
    assert_eq!(audit["items"].as_array().map(Vec::len), Some(2), "one entry per image logged: {audit}");
    let (_, audit) = p.call(&admin, Method::GET, "/v1/tenants/dev/audit?action=artifact.link", None).await;
    assert_eq!(audit["items"].as_array().map(Vec::len), Some(1), "one entry per link given: {audit}");
}
