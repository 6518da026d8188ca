//! Logging to a run (`POST /v1/runs/{id}/log`, `GET …/log`): metric series
//! with steps and params, in any state, shown on the run (each metric's
//! value at its highest step) and compared by `mapi runs compare`; bounded
//! per run, refused whole in words; runners and `runs:write` tokens only;
//! another tenant's run does not exist; each log audited `run.log`. Images
//! (`PUT /v1/runs/{id}/images/{name}`): told by their bytes, at most 1 MiB,
//! replaced by name, linked with an `artifact.link` audit entry.

use std::sync::Arc;

use mapi_tests::{TestPlatform, run_ids as ids};
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

#[tokio::test]
async fn the_runs_list_finds_runs_by_a_logged_metric_a_page_at_a_time() {
    let executor = Arc::new(mapi_executor::scripted::ScriptedExecutor::default());
    let options = mapi_tests::Options { background: false, executor: Some(executor), ..Default::default() };
    let p = TestPlatform::start_with(&[], options).await;
    let dataset = p.upload("x,y\n1,2\n2,4\n").await;
    // Oldest first: r² 0.95, 0.5, none, 0.99, 0.91.
    let mut runs = Vec::new();
    for r2 in [Some(0.95), Some(0.5), None, Some(0.99), Some(0.91)] {
        let id = p.submit(json!({"method": "describe", "dataset": dataset})).await;
        if let Some(v) = r2 {
            let body = json!({"metrics": [{"name": "r_squared", "value": v}]});
            let (s, b) = p.call(p.token(), Method::POST, &format!("/v1/runs/{id}/log"), Some(body)).await;
            assert_eq!(s, 200, "{b}");
        }
        runs.push(id);
    }
    let list = format!("{}/runs", p.project_path());
    let (s, first) =
        p.call(p.token(), Method::GET, &format!("{list}?metric=r_squared>0.9&page_size=2"), None).await;
    assert_eq!((s, ids(&first)), (200, vec![runs[4].clone(), runs[3].clone()]), "newest first: {first}");
    let token = first["next_page_token"].as_str().expect("a next page");
    let (_, second) = p
        .call(
            p.token(),
            Method::GET,
            &format!("{list}?metric=r_squared>0.9&page_size=2&page_token={token}"),
            None,
        )
        .await;
    assert_eq!(ids(&second), [runs[0].clone()], "{second}");
    assert!(second.get("next_page_token").is_none_or(Value::is_null), "the last page: {second}");

    for (query, want) in [
        ("metric=metrics.r_squared<=0.5", vec![runs[1].clone()]),
        ("metric=r_squared=0.99&state=queued", vec![runs[3].clone()]),
        ("metric=r_squared!=0.95&page_size=10", vec![runs[4].clone(), runs[3].clone(), runs[1].clone()]),
        ("metric=loss<1", vec![]),
    ] {
        let (s, page) = p.call(p.token(), Method::GET, &format!("{list}?{query}"), None).await;
        assert_eq!((s, ids(&page)), (200, want), "{query}: {page}");
    }
    // A saved view keeps a metric filter like any other.
    let view = json!({"filters": {"metric": "r_squared>=0.95"}});
    let (s, b) =
        p.call(p.token(), Method::PUT, &format!("{}/run-views/good", p.project_path()), Some(view)).await;
    assert_eq!(s, 201, "{b}");
    let (_, page) = p.call(p.token(), Method::GET, &format!("{list}?view=good"), None).await;
    assert_eq!(ids(&page), [runs[3].clone(), runs[0].clone()], "{page}");
    for bad in ["r_squared", "r_squared>high", "r%20squared>1", "r_squared=>1"] {
        let (s, problem) = p.call(p.token(), Method::GET, &format!("{list}?metric={bad}"), None).await;
        assert_eq!((s, problem["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{bad}: {problem}");
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(detail.starts_with("metric filter `"), "{bad}: {detail}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metric_filter_reads_a_bounded_number_of_documents_per_page() {
    let executor = Arc::new(mapi_executor::scripted::ScriptedExecutor::default());
    let options =
        mapi_tests::Options { background: false, executor: Some(executor.clone()), ..Default::default() };
    let p = TestPlatform::start_with(&[], options).await;
    let dataset = p.upload("x,y\n1,2\n2,4\n").await;
    let wanted = p.submit(json!({"method": "describe", "dataset": dataset})).await;
    let body = json!({"metrics": [{"name": "r_squared", "value": 0.97}]});
    let (s, b) = p.call(p.token(), Method::POST, &format!("/v1/runs/{wanted}/log"), Some(body)).await;
    assert_eq!(s, 200, "{b}");
    // 1,100 runs without the metric, created before and after it.
    let other = mapi_domain::RunId::parse(&p.submit(json!({"method": "describe", "dataset": dataset})).await)
        .expect("id");
    assert_eq!(p.dispatch(&other, mapi_domain::AttemptNo::FIRST).await.0, 200);
    let entropy = mapi_entropy::SeededEntropy::new(3);
    mapi_embedded::load::copy_dispatched_run(&p.platform.state, &*executor, &other, 1_100, &entropy)
        .await
        .expect("copies");

    let counts = p.platform.state.local.store.clone().expect("the SQLite store");
    let list = format!("{}/runs?metric=r_squared>0.9&page_size=10", p.project_path());
    let (mut found, mut pages, mut token) = (Vec::new(), 0, None::<String>);
    loop {
        let url = match &token {
            Some(t) => format!("{list}&page_token={t}"),
            None => list.clone(),
        };
        let before = counts.counts().documents_read;
        let (s, page) = p.call(p.token(), Method::GET, &url, None).await;
        let read = counts.counts().documents_read - before;
        assert_eq!(s, 200, "{page}");
        // 500 runs examined (in chunks of 100, each read with one more to
        // tell whether the chunk is the last), each with its log and its
        // progress, and the caller's access.
        assert!(read <= 505 + 2 * 500 + 20, "page {pages} read {read} documents");
        pages += 1;
        found.extend(ids(&page));
        match page["next_page_token"].as_str() {
            Some(t) => token = Some(t.to_owned()),
            None => break,
        }
        assert!(pages < 10, "1,102 runs are examined in 3 pages of at most 500");
    }
    assert_eq!(found, [wanted], "found once, on whichever page holds it");
    assert_eq!(pages, 3, "1,102 runs, at most 500 examined per page");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runs_list_finds_fits_by_the_statistics_their_method_reported() {
    let p = TestPlatform::start(&[]).await;
    let close = p.upload("x,y\n1,2\n2,4.01\n3,6\n4,8.02\n5,9.99\n").await;
    let loose = p.upload("x,y\n1,2\n2,1\n3,5\n4,3\n5,2\n").await;
    let mut fits = Vec::new();
    for dataset in [&close, &loose] {
        let id =
            p.submit(json!({"method": "tabular.linear", "dataset": dataset, "params": {"y": "y"}})).await;
        assert_eq!(p.wait_final(&id).await["state"], "succeeded");
        fits.push(id);
    }
    let list = format!("{}/runs", p.project_path());
    for (query, want) in [
        ("metric=r_squared>0.99", vec![fits[0].clone()]),
        ("metric=adj_r_squared<0.5", vec![fits[1].clone()]),
        ("metric=aic>-1e9", vec![fits[1].clone(), fits[0].clone()]),
    ] {
        let (s, page) = p.call(p.token(), Method::GET, &format!("{list}?{query}"), None).await;
        assert_eq!((s, ids(&page)), (200, want), "{query}: {page}");
    }
    // A value logged to the run stands before the one its method reported.
    let body = json!({"metrics": [{"name": "r_squared", "value": 0.1}]});
    let (s, b) = p.call(p.token(), Method::POST, &format!("/v1/runs/{}/log", fits[0]), Some(body)).await;
    assert_eq!(s, 200, "{b}");
    let (_, page) = p.call(p.token(), Method::GET, &format!("{list}?metric=r_squared>0.99"), None).await;
    assert_eq!(ids(&page), Vec::<String>::new(), "{page}");
}
