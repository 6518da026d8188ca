//! The HTTP contract: bad input gets a problem with a stable code and a
//! detail that says what to fix; idempotent submits; the service routes.

use mapi_tests::TestPlatform;
use serde_json::{Value, json};

const CSV: &str = "x,y\n1,2\n2,4.1\n3,5.9\n4,8.2\n";

async fn problem(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let ct = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    assert_eq!(ct, "application/problem+json", "status {status}");
    (status, resp.json().await.expect("problem json"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_submits_get_problems_that_say_what_to_fix() {
    let p = TestPlatform::start(&[("MAPI_MAX_JSON_BYTES", "2048")]).await;
    let ds = p.upload(CSV).await;
    let runs = p.url(&format!("{}/runs", p.project_path()));
    let post = |body: String| {
        p.http.post(&runs).bearer_auth(p.token()).header("content-type", "application/json").body(body)
    };

    let cases: Vec<(String, u16, &str, &str)> = vec![
        ("{\"method\": ".into(), 400, "INVALID_ARGUMENT", "not valid JSON"),
        (
            json!({"method": "describe", "dataset": ds, "colour": "red"}).to_string(),
            400,
            "INVALID_ARGUMENT",
            "unknown field `colour`",
        ),
        (
            json!({"method": "describe", "dataset": "ds_01arz3ndektsv4rrffq69g5fav"}).to_string(),
            404,
            "NOT_FOUND",
            "upload it first",
        ),
        (
            json!({"method": "describe", "dataset": "not-an-id"}).to_string(),
            400,
            "INVALID_ARGUMENT",
            "dataset id",
        ),
        (
            json!({"method": "sklearn.forest", "dataset": ds}).to_string(),
            400,
            "INVALID_ARGUMENT",
            "unknown method `sklearn.forest`",
        ),
        (
            json!({"method": "describe", "dataset": ds, "class": "XXL"}).to_string(),
            400,
            "INVALID_ARGUMENT",
            "XXL",
        ),
        (
            json!({"method": "describe", "dataset": ds, "class": "GPU"}).to_string(),
            400,
            "INVALID_ARGUMENT",
            "only dl models run on the GPU class",
        ),
        (
            json!({"method": "describe", "dataset": ds, "timeout_s": 0}).to_string(),
            400,
            "INVALID_ARGUMENT",
            "1 to 86400",
        ),
        (
            json!({"method": "describe", "dataset": ds, "timeout_s": 90000}).to_string(),
            400,
            "INVALID_ARGUMENT",
            "1 to 86400",
        ),
        (
            json!({"method": "tabular.linear", "dataset": ds, "params": {}}).to_string(),
            400,
            "INVALID_ARGUMENT",
            "y",
        ),
        (
            json!({"method": "tabular.linear", "dataset": ds, "params": {"y": "z"}}).to_string(),
            400,
            "INVALID_ARGUMENT",
            "`z`",
        ),
        (
            json!({"method": "describe", "dataset": ds, "params": {"bins": 3}}).to_string(),
            400,
            "INVALID_ARGUMENT",
            "bins",
        ),
        (
            json!({"method": "describe", "dataset": ds, "pad": "x".repeat(4000)}).to_string(),
            413,
            "PAYLOAD_TOO_LARGE",
            "larger",
        ),
    ];
    for (body, status, code, needle) in cases {
        let (s, prob) = problem(post(body.clone()).send().await.expect("send")).await;
        assert_eq!((s, prob["code"].as_str()), (status, Some(code)), "{body}: {prob}");
        let detail = prob["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(needle), "detail of {body:.60} should mention {needle:?}: {detail}");
    }
    let (s, prob) =
        problem(p.http.post(&runs).bearer_auth(p.token()).body("{}").send().await.expect("send")).await;
    assert_eq!((s, prob["code"].as_str()), (415, Some("UNSUPPORTED_MEDIA_TYPE")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_need_a_token_and_stay_in_their_tenant() {
    let p = TestPlatform::start(&[]).await;
    let runs = p.url(&format!("{}/runs", p.project_path()));
    let (s, prob) = problem(p.http.get(&runs).send().await.expect("send")).await;
    assert_eq!((s, prob["code"].as_str()), (401, Some("UNAUTHENTICATED")));
    let (s, _) = problem(p.http.get(&runs).bearer_auth("mapi_00").send().await.expect("send")).await;
    assert_eq!(s, 401);
    let other = p.url("/v1/tenants/acme/projects/default/runs");
    let (s, prob) = problem(p.http.get(&other).bearer_auth(p.token()).send().await.expect("send")).await;
    assert_eq!((s, prob["code"].as_str()), (404, Some("NOT_FOUND")));
    let (s, _) = problem(
        p.http
            .get(p.url("/v1/runs/run_01arz3ndektsv4rrffq69g5fav"))
            .bearer_auth(p.token())
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(s, 404);
    let (s, _) = problem(p.http.get(p.url("/v1/nothing")).send().await.expect("send")).await;
    assert_eq!(s, 404);
    // Internal routes refuse tenant tokens.
    let (s, _) =
        problem(p.http.post(p.url("/internal/tick")).bearer_auth(p.token()).send().await.expect("send"))
            .await;
    assert_eq!(s, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_datasets_are_refused() {
    let p = TestPlatform::start(&[("MAPI_MAX_DATASET_BYTES", "1024")]).await;
    let url = p.url(&format!("{}/datasets", p.project_path()));
    let send = |ct: &str, body: Vec<u8>| {
        p.http.post(&url).bearer_auth(p.token()).header("content-type", ct.to_owned()).body(body).send()
    };
    let (s, prob) = problem(send("text/csv", b"a,b\n1,2\n3\n".to_vec()).await.expect("send")).await;
    assert_eq!((s, prob["code"].as_str()), (400, Some("INVALID_ARGUMENT")));
    assert!(prob["detail"].as_str().unwrap_or_default().contains("line 3"), "{prob}");
    let (s, _) = problem(send("application/json", b"{}".to_vec()).await.expect("send")).await;
    assert_eq!(s, 415);
    let (s, prob) = problem(send("text/csv", vec![b'1'; 4096]).await.expect("send")).await;
    assert_eq!((s, prob["code"].as_str()), (413, Some("PAYLOAD_TOO_LARGE")));
}

/// A dataset is bounded while it is read: past the columns, the rows or
/// the cell size it may hold, an upload is 413 naming the setting, however
/// small its body; listings carry a column count, and a dataset's columns
/// are on its own page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datasets_are_bounded_while_read_and_listed_without_their_columns() {
    let p = TestPlatform::start(&[
        ("MAPI_DATASET_MAX_COLUMNS", "4"),
        ("MAPI_DATASET_MAX_ROWS", "3"),
        ("MAPI_DATASET_MAX_CELL_BYTES", "300"),
    ])
    .await;
    let url = p.url(&format!("{}/datasets", p.project_path()));
    let send = |body: &str| {
        p.http
            .post(&url)
            .bearer_auth(p.token())
            .header("content-type", "text/csv")
            .body(body.to_owned())
            .send()
    };
    let big_cell = format!("a\n{}\n", "1".repeat(301));
    let over = [
        ("a,b,c,d,e\n1,2,3,4,5\n", "MAPI_DATASET_MAX_COLUMNS"),
        ("a\n1\n2\n3\n4\n", "MAPI_DATASET_MAX_ROWS"),
        (big_cell.as_str(), "MAPI_DATASET_MAX_CELL_BYTES"),
    ];
    for (csv, setting) in over {
        let (s, prob) = problem(send(csv).await.expect("send")).await;
        assert_eq!((s, prob["code"].as_str()), (413, Some("PAYLOAD_TOO_LARGE")), "{csv:?}: {prob}");
        assert!(prob["detail"].as_str().unwrap_or_default().contains(setting), "{prob}");
    }
    let long_name = format!("{}\n1\n", "n".repeat(257));
    let (s, prob) = problem(send(&long_name).await.expect("send")).await;
    assert_eq!(s, 400, "{prob}");
    assert!(prob["detail"].as_str().unwrap_or_default().contains("over 256 bytes"), "{prob}");

    let id = p.upload("a,b,c,d\n1,x,3,4\n2,y,3,4\n1,2,3,4\n").await;
    let (s, page) =
        p.call(p.token(), reqwest::Method::GET, &format!("{}/datasets", p.project_path()), None).await;
    assert_eq!(s, 200, "{page}");
    let listed = &page["datasets"][0];
    assert_eq!(
        (listed["id"].as_str(), listed["column_count"].as_u64()),
        (Some(id.as_str()), Some(4)),
        "{page}"
    );
    assert!(listed.get("columns").is_none() && listed.get("numeric_columns").is_none(), "{page}");
    let one = format!("{}/datasets/{id}", p.project_path());
    let (s, d) = p.call(p.token(), reqwest::Method::GET, &one, None).await;
    assert_eq!(s, 200, "{d}");
    assert_eq!(
        (d["columns"].clone(), d["numeric_columns"].clone(), d["rows"].clone()),
        (json!(["a", "b", "c", "d"]), json!(["a", "c", "d"]), json!(3))
    );
    let missing = format!("{}/datasets/ds_nope", p.project_path());
    let (s, d) = p.call(p.token(), reqwest::Method::GET, &missing, None).await;
    assert_eq!((s, d["code"].as_str()), (404, Some("NOT_FOUND")), "{d}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_returns_the_same_run() {
    let p = TestPlatform::start(&[]).await;
    let ds = p.upload(CSV).await;
    let runs = p.url(&format!("{}/runs", p.project_path()));
    let body = json!({"method": "describe", "dataset": ds});
    let send =
        |b: &Value| p.http.post(&runs).bearer_auth(p.token()).header("idempotency-key", "k-1").json(b).send();
    let first = send(&body).await.expect("send");
    assert_eq!(first.status(), 201);
    let first: Value = first.json().await.expect("json");
    let second = send(&body).await.expect("send");
    assert_eq!(second.status(), 200);
    assert_eq!(second.headers()["idempotent-replayed"], "true");
    let second: Value = second.json().await.expect("json");
    assert_eq!(first["id"], second["id"]);
    let other = json!({"method": "describe", "dataset": ds, "timeout_s": 10});
    let (s, prob) = problem(send(&other).await.expect("send")).await;
    assert_eq!((s, prob["code"].as_str()), (409, Some("FAILED_PRECONDITION")));
    let page: Value =
        p.http.get(&runs).bearer_auth(p.token()).send().await.expect("list").json().await.expect("json");
    assert_eq!(page["runs"].as_array().map(Vec::len), Some(1), "one run for one key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_listed_newest_first_in_pages_and_by_state() {
    let p = TestPlatform::start(&[]).await;
    let ds = p.upload(CSV).await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(p.submit(json!({"method": "describe", "dataset": ds})).await);
    }
    ids.reverse();
    let base = p.url(&format!("{}/runs", p.project_path()));
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut req = p.http.get(&base).bearer_auth(p.token()).query(&[("page_size", "2")]);
        if let Some(t) = &token {
            req = req.query(&[("page_token", t.as_str())]);
        }
        let page: Value = req.send().await.expect("list").json().await.expect("json");
        seen.extend(
            page["runs"]
                .as_array()
                .expect("runs")
                .iter()
                .map(|r| r["id"].as_str().unwrap_or_default().to_owned()),
        );
        match page["next_page_token"].as_str() {
            Some(t) => token = Some(t.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, ids);
    for id in &ids {
        p.wait_final(id).await;
    }
    let done: Value = p
        .http
        .get(&base)
        .bearer_auth(p.token())
        .query(&[("state", "succeeded")])
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    assert_eq!(done["runs"].as_array().map(Vec::len), Some(5));
    let (s, _) = problem(
        p.http.get(&base).bearer_auth(p.token()).query(&[("state", "done")]).send().await.expect("send"),
    )
    .await;
    assert_eq!(s, 400);
    let (s, _) = problem(
        p.http
            .get(&base)
            .bearer_auth(p.token())
            .query(&[("page_token", "garbage!")])
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(s, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_build_info_metrics_and_openapi_are_served() {
    let p = TestPlatform::start(&[]).await;
    let health: Value =
        p.http.get(p.url("/health")).send().await.expect("health").json().await.expect("json");
    assert_eq!(health, json!({"status": "ok"}));
    let build: Value =
        p.http.get(p.url("/build-info")).send().await.expect("build").json().await.expect("json");
    assert_eq!(build["api_version"], "v1");
    assert!(build["version"].is_string() && build["git_commit"].is_string());
    let ds = p.upload(CSV).await;
    let id = p.submit(json!({"method": "describe", "dataset": ds})).await;
    p.wait_final(&id).await;
    let metrics = p.http.get(p.url("/metrics")).send().await.expect("metrics").text().await.expect("text");
    for needle in [
        "mapi_run_transitions_total{from=\"running\",to=\"succeeded\",reason=\"completed\"} 1",
        "mapi_executor_submits_total{executor=\"local-process\",result=\"ok\"} 1",
        "mapi_queue_depth{queue=\"dispatch\"}",
        "mapi_http_requests_total{method=\"POST\",route=\"/v1/tenants/{tenant}/projects/{project}/runs\",status=\"201\"} 1",
        "mapi_events_applied_total",
    ] {
        assert!(metrics.contains(needle), "missing {needle} in\n{metrics}");
    }
    let doc: Value =
        p.http.get(p.url("/openapi.json")).send().await.expect("openapi").json().await.expect("json");
    assert!(doc["paths"]["/v1/runs/{id}"].is_object());
}

/// The platform's own address: a browser is sent to the console (which
/// signs it in), any other client is told where things are; never a 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_platforms_address_leads_a_browser_to_the_console() {
    let p = TestPlatform::start(&[]).await;
    let http =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    let browser = http
        .get(p.url("/"))
        .header("accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
        .send()
        .await
        .expect("get");
    assert_eq!(browser.status(), 303);
    assert_eq!(browser.headers().get("location").and_then(|v| v.to_str().ok()), Some("/console"));
    let client = http.get(p.url("/")).send().await.expect("get");
    assert_eq!(client.status(), 200);
    let index: Value = client.json().await.expect("json");
    assert_eq!(
        (index["console"].as_str(), index["openapi"].as_str()),
        (Some("/console"), Some("/openapi.json"))
    );
    let doc = http.get(p.url(index["openapi"].as_str().expect("path"))).send().await.expect("get");
    assert_eq!(doc.status(), 200, "the index's paths answer");
}
