//! Model endpoints end to end over HTTP on the embedded platform (local
//! hosting, real model servers): a fit served and scored, a second version
//! promoted through the gate and rolled back, refusals audited, a deleted
//! endpoint gone.

use std::time::Duration;

use std::sync::Arc;

use mapi_clock::SystemClock;
use mapi_store::Query;
use mapi_tests::fake_cloudrun_services::{FakeCloudRunServices, FakeIdTokens, Fault};
use mapi_tests::{TestPlatform, worker};
use reqwest::Method;
use serde_json::{Value, json};

const LONGLEY: &str = include_str!("../../examples/longley.csv");

/// Fits `employed` on every other column; the succeeded run's model version.
async fn fit(p: &TestPlatform, csv: &str) -> String {
    let ds = p.upload(csv).await;
    let id = p
        .submit(
            json!({"method": "tabular.linear", "dataset": ds, "params": {"y": "employed"}, "timeout_s": 120}),
        )
        .await;
    let run = p.wait_final(&id).await;
    assert_eq!(run["state"], "succeeded", "{run:#}");
    run["model_version"].as_str().expect("a model version").to_owned()
}

fn endpoints(p: &TestPlatform) -> String {
    format!("{}/endpoints", p.project_path())
}

/// Polls the endpoint until `done` holds (a bounded wait).
async fn wait_for(p: &TestPlatform, alias: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let (s, e) = p.call(p.token(), Method::GET, &format!("{}/{alias}", endpoints(p)), None).await;
        assert_eq!(s, 200, "{e}");
        if done(&e) {
            return e;
        }
        assert!(std::time::Instant::now() < deadline, "the endpoint did not get there: {e:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A row of Longley's predictors.
fn row() -> Value {
    json!({"gnp_deflator": 100.0, "gnp": 400000.0, "unemployed": 3000.0, "armed_forces": 2500.0, "population": 117000.0, "year": 1955.0})
}

async fn score(p: &TestPlatform, token: &str, alias: &str, body: Value) -> (u16, Value) {
    p.call(token, Method::POST, &format!("{}/{alias}:score", endpoints(p)), Some(body)).await
}

fn history(e: &Value) -> Vec<String> {
    e["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|v| v["kind"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// The gate's steps as short as a test can wait.
/// Steps of no time and 4 scores. The canary's latency is not judged here:
/// on a loaded test machine a revision's p99 is the machine's, not the
/// revision's (the gate's latency rule is proved in `mapi-rollout`'s tests
/// and its seeded promotions).
pub(crate) const QUICK_GATE: [(&str, &str); 3] = [
    ("MAPI_ENDPOINTS_STEP_S", "0"),
    ("MAPI_ENDPOINTS_STEP_REQUESTS", "4"),
    ("MAPI_ENDPOINTS_P99_SLACK_MS", "600000"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fit_is_served_scored_promoted_through_the_gate_and_rolled_back() {
    let p = TestPlatform::start(&QUICK_GATE).await;
    assert_eq!(p.platform.state.hosting.name(), "local");
    serve_promote_and_roll_back(&p, &|| {}).await;
}

/// The same flow with the platform's endpoints on Cloud Run services (the
/// Admin API fake running the real model server per revision), private
/// scores carrying ID tokens from the metadata server (a fake issuer the
/// services check).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_flow_runs_on_cloud_run_services() {
    let tokens = FakeIdTokens::new(Arc::new(SystemClock), Duration::from_secs(3600));
    let metadata = tokens.serve_metadata().await;
    let fake = FakeCloudRunServices::start("mapi-endpoints", worker()).await.accepting(&tokens);
    let settings = on_cloud_run(&fake.url, &metadata);
    let p = TestPlatform::start(&settings).await;
    assert_eq!(p.platform.state.hosting.name(), "cloud-run");
    // The data bucket, as the services' Cloud Storage volume shows it.
    let fake = fake.with_bucket_store(p.platform.state.objects.clone());
    // The host does not take the first change of bounds: the tick repeats it.
    serve_promote_and_roll_back(&p, &|| fake.inject(Fault::Unavailable)).await;
    assert!(tokens.minted() >= 1, "private scores carried ID tokens");
    let made =
        fake.calls().into_iter().filter(|c| c.method == "POST" && c.path.ends_with("/services")).count();
    assert_eq!(made, 1, "one service for the endpoint, its versions revisions of it");
    assert!(fake.services().is_empty(), "its service is deleted: {:?}", fake.services());
}

/// The platform's settings for endpoints on the Services fake at `api` in
/// project `mapi-endpoints`, ID tokens from the metadata server at
/// `metadata`, and the quick gate.
pub(crate) fn on_cloud_run<'a>(api: &'a str, metadata: &'a str) -> Vec<(&'a str, &'a str)> {
    let mut settings = vec![
        ("MAPI_HOSTING", "cloud-run"),
        ("MAPI_ENDPOINTS_PROJECT", "mapi-endpoints"),
        ("MAPI_ENDPOINTS_SERVER_IMAGE", "europe-docker.pkg.dev/mapi/mapi/worker:test"),
        ("MAPI_ENDPOINTS_BUCKET", mapi_platform::DATA_BUCKET),
        ("MAPI_ENDPOINTS_API_ENDPOINT", api),
        ("MAPI_ENDPOINTS_METADATA_URL", metadata),
    ];
    settings.extend(QUICK_GATE);
    settings
}

/// Serves a fit, scores it, promotes a second version through the gate
/// while scores arrive, rolls it back, changes its bounds (after
/// `before_scale`) and deletes the endpoint.
async fn serve_promote_and_roll_back(p: &TestPlatform, before_scale: &dyn Fn()) {
    let first = fit(p, LONGLEY).await;
    let header = LONGLEY.lines().next().expect("header");
    assert!(header.contains("employed") && header.contains("gnp_deflator"), "{header}");

    // The dev tenant's data stays in the EU: a model of it is not served from the US.
    let abroad = json!({"alias": "employment", "model_version": first, "region": "us"});
    let (s, refused) = p.call(p.token(), Method::POST, &endpoints(p), Some(abroad)).await;
    assert_eq!((s, refused["code"].as_str()), (409, Some("FAILED_PRECONDITION")), "{refused}");
    let detail = refused["detail"].as_str().expect("detail");
    assert!(detail.contains("us-central1") && detail.contains("residency eu"), "{detail}");
    let body = json!({"alias": "employment", "model_version": first});
    let (s, e) = p.call(p.token(), Method::POST, &endpoints(p), Some(body.clone())).await;
    assert_eq!((s, e["status"].as_str()), (202, Some("deploying")), "{e}");
    let (s, again) = p.call(p.token(), Method::POST, &endpoints(p), Some(body)).await;
    assert_eq!((s, again["code"].as_str()), (409, Some("ALREADY_EXISTS")), "{again}");
    let e = wait_for(p, "employment", |e| e["status"] != "deploying").await;
    assert_eq!(e["status"], "ready", "{e:#}");
    assert_eq!(
        (e["accelerator"].as_str(), e["region"].as_str(), e["access"].as_str()),
        (Some("cpu"), Some("europe-west4"), Some("private")),
        "an eu tenant's endpoint lands in the EU region with L4 GPUs"
    );

    let (s, answer) =
        score(p, p.token(), "employment", json!({"rows": [row(), row()], "std_errors": true})).await;
    assert_eq!(s, 200, "{answer}");
    let predictions = answer["predictions"].as_array().expect("predictions");
    assert_eq!(predictions.len(), 2);
    assert!(predictions[0]["value"].as_f64().is_some_and(|v| v > 50_000.0 && v < 80_000.0), "{answer}");
    assert!(predictions[0]["std_error"].as_f64().is_some_and(|se| se > 0.0), "{answer}");
    assert_eq!(answer["revision"], "r1");

    // A row without a column is refused with the column named.
    let mut short = row();
    short.as_object_mut().expect("row").remove("year");
    let (s, problem) = score(p, p.token(), "employment", json!({"rows": [short]})).await;
    assert_eq!(s, 400, "{problem}");
    assert!(problem["detail"].as_str().expect("detail").contains("column `year` is missing"), "{problem}");

    // An answer's bytes leave the platform: the tenant's egress of the month
    // counts exactly them, in the commit that meters the score.
    let month = mapi_quota::counters::tenant_period(
        &mapi_domain::TenantId::parse("dev").expect("dev"),
        mapi_quota::Period::Month,
        p.platform.state.clock.now(),
    );
    let egress = || async {
        mapi_quota::counters::read(&*p.platform.state.store, &month).await.expect("counter").egress_bytes
    };
    let before = egress().await;
    let answered = p
        .http
        .post(p.url(&format!("{}/employment:score", endpoints(p))))
        .bearer_auth(p.token())
        .json(&json!({"rows": [row(), row()]}))
        .send()
        .await
        .expect("score");
    assert_eq!(answered.status(), 200);
    let sent = answered.bytes().await.expect("body").len() as i64;
    assert_eq!(egress().await - before, sent, "the answer's {sent} bytes are the egress counted");

    // A row whose prediction no 64-bit float holds is refused naming the
    // column that took it there, never answered `null`.
    let mut huge = row();
    huge["year"] = json!(1e308);
    let (s, problem) =
        score(p, p.token(), "employment", json!({"rows": [row(), huge], "std_errors": true})).await;
    assert_eq!((s, problem["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{problem}");
    let detail = problem["detail"].as_str().expect("detail");
    assert!(detail.contains("row 1: column `year`") && detail.contains("64-bit float"), "{problem}");

    // A row naming a column twice is refused, not read as its last value.
    let twice = r#"{"rows": [{"gnp_deflator": 100.0, "gnp": 400000.0, "unemployed": 3000.0, "armed_forces": 2500.0, "population": 117000.0, "year": 1955.0, "year": 1990.0}]}"#;
    let resp = p
        .http
        .post(p.url(&format!("{}/employment:score", endpoints(p))))
        .bearer_auth(p.token())
        .header("content-type", "application/json")
        .body(twice)
        .send()
        .await
        .expect("score");
    assert_eq!(resp.status(), 400);
    let problem: Value = resp.json().await.expect("problem");
    assert_eq!(problem["code"], "INVALID_ARGUMENT", "{problem}");
    assert!(problem["detail"].as_str().expect("detail").contains("`year` is given twice"), "{problem}");

    // A second version, promoted through the gate while scores arrive.
    let second = fit(p, &LONGLEY.replacen("60323,", "60400,", 1)).await;
    assert_ne!(first, second);
    let (s, e) = p
        .call(
            p.token(),
            Method::POST,
            &format!("{}/employment:promote", endpoints(p)),
            Some(json!({"model_version": second})),
        )
        .await;
    assert_eq!((s, e["promotion"]["phase"].as_str()), (202, Some("smoke")), "{e}");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let mut served_by_r2 = 0;
    let e = loop {
        let (s, a) = score(p, p.token(), "employment", json!({"rows": [row()]})).await;
        assert_eq!(s, 200, "scores keep answering during the promotion: {a}");
        served_by_r2 += usize::from(a["revision"] == "r2");
        let (_, e) = p.call(p.token(), Method::GET, &format!("{}/employment", endpoints(p)), None).await;
        if e["promotion"].is_null() {
            break e;
        }
        assert!(std::time::Instant::now() < deadline, "the promotion did not finish: {e:#}");
        // Paced: two requests every 50 ms stay far below the tenant's
        // 6,000 a minute however long a loaded machine takes to promote.
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(e["model_version"], second.as_str(), "promoted: {e:#}");
    assert!(served_by_r2 > 0, "the canary served scores before it took all traffic");
    let kinds = history(&e);
    for kind in ["promotion_started", "smoke", "traffic", "promoted"] {
        assert!(kinds.iter().any(|k| k == kind), "{kind} in {kinds:?}");
    }
    let traffic: Vec<(String, u64)> = e["revisions"]
        .as_array()
        .expect("revisions")
        .iter()
        .map(|r| (r["tag"].as_str().unwrap_or("").to_owned(), r["traffic_percent"].as_u64().unwrap_or(0)))
        .collect();
    assert_eq!(traffic, [("r1".to_owned(), 0), ("r2".to_owned(), 100)]);

    // Rollback returns everything to the previous revision at once.
    let (s, e) =
        p.call(p.token(), Method::POST, &format!("{}/employment:rollback", endpoints(p)), None).await;
    assert_eq!(s, 202, "{e}");
    assert_eq!(e["model_version"], first.as_str(), "{e:#}");
    let (s, a) = score(p, p.token(), "employment", json!({"rows": [row()]})).await;
    assert_eq!((s, a["revision"].as_str()), (200, Some("r1")), "{a}");

    // Bounds change without a new revision, admitted as a creation is; a change the host did
    // not take is repeated by the tick until the host holds the document's bounds.
    let scale = format!("{}/employment:scale", endpoints(p));
    let (s, refused) = p.call(p.token(), Method::POST, &scale, Some(json!({"min_instances": 4}))).await;
    assert_eq!((s, refused["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{refused}");
    assert!(
        refused["detail"].as_str().is_some_and(|d| d.contains("min_instances ≤ max_instances")),
        "{refused}"
    );
    before_scale();
    let (s, scaled) =
        p.call(p.token(), Method::POST, &scale, Some(json!({"min_instances": 1, "max_instances": 2}))).await;
    assert_eq!(
        (s, scaled["min_instances"].as_u64(), scaled["max_instances"].as_u64()),
        (202, Some(1), Some(2)),
        "{scaled}"
    );
    let service = scaled["service"].as_str().expect("service").to_owned();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while p.platform.state.hosting.get(&service).await.map(|s| s.scaling).ok()
        != Some(mapi_hosting::Scaling { min: 1, max: 2 })
    {
        assert!(std::time::Instant::now() < deadline, "the host never got the new bounds");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let e = wait_for(p, "employment", |e| history(e).iter().any(|k| k == "scaled")).await;
    assert_eq!(e["revisions"].as_array().map(Vec::len), Some(2), "no new revision: {e:#}");
    let (s, a) = score(p, p.token(), "employment", json!({"rows": [row()]})).await;
    assert_eq!((s, a["revision"].as_str()), (200, Some("r1")), "it serves on: {a}");
    let requests = e["usage"]["requests"].as_u64().expect("requests");
    assert!(requests >= 5, "scores are counted: {e:#}");
    // The scores are in the project's usage, request-billed: each at least
    // 100 ms of 1 vCPU and 2 GiB, and the request fee (3,300 nano-USD).
    let (s, u) =
        p.call(p.token(), Method::GET, &format!("{}/usage?group_by=kind", p.project_path()), None).await;
    assert_eq!(s, 200, "{u}");
    let group = u["groups"].as_array().expect("groups").iter().find(|g| g["key"] == "score").cloned();
    let scores = group.unwrap_or_else(|| panic!("a score group: {u:#}"))["totals"].clone();
    let metered = scores["scores"].as_u64().expect("scores");
    assert!(metered > requests, "every score is metered, the last one too: {metered} of {scores}");
    assert!(scores["vcpu_ms"].as_u64().is_some_and(|ms| ms >= 100 * metered), "{scores}");
    assert_eq!(scores["gib_ms"].as_u64(), scores["vcpu_ms"].as_u64().map(|v| 2 * v), "{scores}");
    // The report is the ledger's entries, each rounded once; together they
    // hold at least the fee and 100 ms of every score, in nano-units.
    let q = Query::new(<mapi_schema::ScoreLedgerEntry as mapi_schema::Doc>::COLLECTION);
    let entries: Vec<mapi_schema::ScoreLedgerEntry> = p
        .platform
        .state
        .store
        .query(&q, None)
        .await
        .expect("ledger")
        .iter()
        .map(|d| d.decode().expect("entry"))
        .collect();
    let nanos: u64 = entries.iter().map(|e| e.cost_nanos).sum();
    assert!(nanos >= 3_300 * metered, "{nanos} nano-USD for {metered} scores");
    let rounded: i64 = entries.iter().map(mapi_schema::ScoreLedgerEntry::cost_micros).sum();
    assert_eq!(scores["cost_micros"].as_i64(), Some(rounded), "the report adds the entries: {scores}");
    assert_eq!(entries.iter().map(|e| e.requests).sum::<u64>(), metered);

    let (s, e) = p.call(p.token(), Method::DELETE, &format!("{}/employment", endpoints(p)), None).await;
    assert_eq!((s, e["status"].as_str()), (202, Some("deleting")), "{e}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (s, _) = p.call(p.token(), Method::GET, &format!("{}/employment", endpoints(p)), None).await;
        if s == 404 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the endpoint was not deleted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(p.platform.state.hosting.list().await.expect("list").len(), 0, "its service is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scores_by_a_viewer_a_token_without_the_scope_or_another_tenant_are_refused_and_audited() {
    let accounts = "dev@dev.local,admin@dev.local,viewer@test.local,owner@away.test";
    let p = TestPlatform::start(&[("MAPI_DEV_ACCOUNTS", accounts)]).await;
    let version = fit(&p, LONGLEY).await;
    let (s, e) = p
        .call(
            p.token(),
            Method::POST,
            &endpoints(&p),
            Some(json!({"alias": "prod", "model_version": version})),
        )
        .await;
    assert_eq!(s, 202, "{e}");
    wait_for(&p, "prod", |e| e["status"] == "ready").await;

    let dev = p.login("dev@dev.local").await;
    let (s, b) = p
        .call(
            &dev,
            Method::POST,
            "/v1/tenants/dev/members",
            Some(json!({"email": "viewer@test.local", "role": "viewer"})),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    let viewer = p.login("viewer@test.local").await;
    let token = |scopes: Value| {
        let (p, dev) = (&p, &dev);
        async move {
            let (s, b) = p
                .call(
                    dev,
                    Method::POST,
                    &format!("{}/tokens", p.project_path()),
                    Some(json!({"name": "t", "scopes": scopes})),
                )
                .await;
            assert_eq!(s, 201, "{b}");
            b["secret"].as_str().expect("secret").to_owned()
        }
    };
    let unscoped = token(json!(["models:read"])).await;
    let other_alias = token(json!(["score:other"])).await;
    let this_alias = token(json!(["score:prod"])).await;
    let operator = p.login("admin@dev.local").await;
    let (s, b) = p
        .call(
            &operator,
            Method::POST,
            "/v1/admin/tenants",
            Some(json!({"id": "away", "name": "Away", "tier": "internal", "residency": "eu", "admin_email": "owner@away.test"})),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    let stranger = p.login("owner@away.test").await;

    let body = json!({"rows": [row()]});
    assert_eq!(score(&p, &viewer, "prod", body.clone()).await.0, 403, "a viewer may read, not score");
    assert_eq!(score(&p, &unscoped, "prod", body.clone()).await.0, 403, "models:read does not score");
    assert_eq!(score(&p, &other_alias, "prod", body.clone()).await.0, 403, "score:other is another endpoint");
    assert_eq!(score(&p, &stranger, "prod", body.clone()).await.0, 404, "another tenant cannot see it");
    let (s, a) = score(&p, &this_alias, "prod", body).await;
    assert_eq!(s, 200, "score:prod scores prod: {a}");

    let q = Query::new(<mapi_schema::AuditDoc as mapi_schema::Doc>::COLLECTION);
    let audit = p.platform.state.store.query(&q, None).await.expect("audit");
    let refused: Vec<mapi_schema::AuditDoc> = audit
        .iter()
        .map(|d| d.decode::<mapi_schema::AuditDoc>().expect("decode"))
        .filter(|a| a.action == "endpoint.run" && a.outcome != mapi_schema::Outcome::Success)
        .collect();
    assert_eq!(refused.len(), 4, "every refused score is audited: {refused:#?}");
    let e = wait_for(&p, "prod", |_| true).await;
    assert_eq!(e["usage"]["requests"], 1, "refused scores reached no server: {e:#}");

    // A token's rate limit and the tenant's quotas hold for scores, before
    // anything is sent to the server.
    let (s, b) = p
        .call(
            &dev,
            Method::POST,
            &format!("{}/tokens", p.project_path()),
            Some(json!({"name": "slow", "scopes": ["score:prod"], "rate_limit_per_minute": 1})),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    let slow = b["secret"].as_str().expect("secret").to_owned();
    let body = json!({"rows": [row()]});
    assert_eq!(score(&p, &slow, "prod", body.clone()).await.0, 200);
    let (s, b) = score(&p, &slow, "prod", body.clone()).await;
    assert_eq!((s, b["code"].as_str()), (429, Some("RATE_LIMITED")), "{b}");
    let (s, b) = p
        .call(&operator, Method::PUT, "/v1/admin/quotas/dev", Some(json!({"vcpu_seconds_per_day": 0})))
        .await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = score(&p, &this_alias, "prod", body).await;
    assert_eq!((s, b["code"].as_str()), (429, Some("QUOTA_EXCEEDED")), "{b}");
    let detail = b["detail"].as_str().expect("detail");
    assert!(detail.contains("is 0;") && detail.contains("this score needs compute"), "{b}");
    let e = wait_for(&p, "prod", |_| true).await;
    assert_eq!(e["usage"]["requests"], 2, "the refused scores reached no server: {e:#}");
}

/// A tenant's endpoints live under its quotas and its state: the instances
/// they may scale to together are limited (`endpoint_instances`; refused
/// naming it, nothing made; a promotion is admitted on the limits of its
/// day), and a suspended tenant's endpoints score nothing, in any protocol,
/// until it is active again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_hold_instances_within_the_quota_and_a_suspended_tenant_scores_nothing() {
    let p = TestPlatform::start(&QUICK_GATE).await;
    let version = fit(&p, LONGLEY).await;
    let operator = p.login("admin@dev.local").await;
    let quota = json!({"endpoint_instances": 4});
    let (s, set) = p.call(&operator, Method::PUT, "/v1/admin/quotas/dev", Some(quota)).await;
    assert_eq!(s, 200, "{set}");
    let make =
        |alias: &str, max: u32| json!({"alias": alias, "model_version": version, "max_instances": max});
    let (s, first) = p.call(p.token(), Method::POST, &endpoints(&p), Some(make("first", 3))).await;
    assert_eq!(s, 202, "{first}");
    let (s, refused) = p.call(p.token(), Method::POST, &endpoints(&p), Some(make("second", 2))).await;
    assert_eq!((s, refused["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{refused}");
    let detail = refused["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(
            "endpoint_instances is 4: the tenant's endpoints hold 3 instances and this one asks for up to 2"
        ),
        "{refused}"
    );
    let (s, none) = p.call(p.token(), Method::GET, &format!("{}/second", endpoints(&p)), None).await;
    assert_eq!(s, 404, "nothing was made: {none}");
    let (s, second) = p.call(p.token(), Method::POST, &endpoints(&p), Some(make("second", 1))).await;
    assert_eq!(s, 202, "within the limit: {second}");
    // A change of bounds is admitted the same way: room the other endpoints hold is not given twice.
    let scale = format!("{}/second:scale", endpoints(&p));
    let (s, refused) = p.call(p.token(), Method::POST, &scale, Some(json!({"max_instances": 2}))).await;
    assert_eq!((s, refused["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{refused}");
    assert!(
        refused["detail"].as_str().is_some_and(|d| d.contains(
            "endpoint_instances is 4: the tenant's endpoints hold 3 instances and this one asks for up to 2"
        )),
        "{refused}"
    );
    let (s, scaled) = p.call(p.token(), Method::POST, &scale, Some(json!({"min_instances": 1}))).await;
    assert_eq!(
        (s, scaled["min_instances"].as_u64(), scaled["max_instances"].as_u64()),
        (202, Some(1), Some(1)),
        "{scaled}"
    );
    wait_for(&p, "first", |e| e["status"] == "ready").await;
    let (s, b) = score(&p, p.token(), "first", json!({"rows": [row()]})).await;
    assert_eq!(s, 200, "{b}");
    let suspend = json!({"status": "suspended", "reason": "unpaid invoice"});
    let (s, b) = p.call(&operator, Method::PATCH, "/v1/admin/tenants/dev", Some(suspend)).await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = score(&p, p.token(), "first", json!({"rows": [row()]})).await;
    assert_eq!((s, b["code"].as_str()), (403, Some("FORBIDDEN")), "{b}");
    assert!(b["detail"].as_str().is_some_and(|d| d.contains("suspended")), "{b}");
    let infer = format!("{}/v1/models/first:predict", p.project_path());
    let (s, b) = p.call(p.token(), Method::POST, &infer, Some(json!({"instances": [row()]}))).await;
    assert_eq!((s, b["code"].as_str()), (403, Some("FORBIDDEN")), "the protocols too: {b}");
    let e = wait_for(&p, "first", |_| true).await;
    assert_eq!(e["usage"]["requests"], 1, "a suspended tenant's scores reach no server: {e:#}");
    let active = json!({"status": "active"});
    let (s, b) = p.call(&operator, Method::PATCH, "/v1/admin/tenants/dev", Some(active)).await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = score(&p, p.token(), "first", json!({"rows": [row()]})).await;
    assert_eq!(s, 200, "active again: {b}");

    // A promotion is new compute, admitted on today's limits: under a lowered limit it is refused.
    let newer = fit(&p, LONGLEY).await;
    let promote = format!("{}/first:promote", endpoints(&p));
    for (limit, want) in [(3, 400), (4, 202)] {
        let quota = json!({"endpoint_instances": limit});
        let (s, set) = p.call(&operator, Method::PUT, "/v1/admin/quotas/dev", Some(quota)).await;
        assert_eq!(s, 200, "{set}");
        let (s, b) = p.call(p.token(), Method::POST, &promote, Some(json!({"model_version": newer}))).await;
        assert_eq!(s, want, "limit {limit}: {b}");
        if s == 400 {
            let detail = b["detail"].as_str().unwrap_or_default();
            assert!(
                detail.contains("endpoint_instances is 3: the tenant's endpoints hold 1 instances and this one asks for up to 3"),
                "{b}"
            );
            let e = wait_for(&p, "first", |_| true).await;
            assert!(e["promotion"].is_null() && e["revisions"].as_array().map(Vec::len) == Some(1), "{e:#}");
        }
    }
}

/// The Open Inference Protocol v2, KServe v1 and MLflow's scoring formats
/// reach an endpoint through the platform's route: the same predictions as
/// its own `:score`, counted in the same statistics, and refused the same
/// way without credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standard_protocols_score_through_the_platform() {
    let p = TestPlatform::start(&QUICK_GATE).await;
    let version = fit(&p, LONGLEY).await;
    let body = json!({"alias": "employment", "model_version": version});
    let (s, e) = p.call(p.token(), Method::POST, &endpoints(&p), Some(body)).await;
    assert_eq!(s, 202, "{e}");
    wait_for(&p, "employment", |e| e["status"] == "ready").await;
    let base = p.project_path();
    let mut second = row();
    second["year"] = json!(1960.0);
    let (s, own) =
        score(&p, p.token(), "employment", json!({"rows": [row(), second], "std_errors": true})).await;
    assert_eq!(s, 200, "{own}");
    let values: Vec<f64> = own["predictions"]
        .as_array()
        .expect("predictions")
        .iter()
        .map(|v| v["value"].as_f64().expect("value"))
        .collect();
    let errors: Vec<Value> =
        own["predictions"].as_array().expect("predictions").iter().map(|v| v["std_error"].clone()).collect();

    // v2: health, metadata, readiness, infer (a column per input, one nested by row).
    for path in ["v2/health/ready", "v2/health/live", "v2/models/employment/ready"] {
        let (s, b) = p.call(p.token(), Method::GET, &format!("{base}/{path}"), None).await;
        assert_eq!(s, 200, "{path}: {b}");
    }
    let (s, meta) = p.call(p.token(), Method::GET, &format!("{base}/v2/models/employment"), None).await;
    assert_eq!(
        (s, meta["name"].as_str(), meta["versions"][0].as_str()),
        (200, Some("employment"), Some(version.as_str())),
        "{meta}"
    );
    let names: Vec<&str> =
        meta["inputs"].as_array().expect("inputs").iter().filter_map(|i| i["name"].as_str()).collect();
    assert!(names.contains(&"gnp") && names.contains(&"year") && names.len() == 6, "{meta}");
    let columns = ["gnp_deflator", "gnp", "unemployed", "armed_forces", "population", "year"];
    let inputs: Vec<Value> = columns
        .iter()
        .map(|c| json!({"name": c, "shape": [2, 1], "datatype": "FP64", "data": [[row()[c]], [second[c]]]}))
        .collect();
    let infer = json!({"id": "q1", "inputs": inputs, "outputs": [{"name": "value"}, {"name": "std_error"}]});
    let (s, v2) = p
        .call(p.token(), Method::POST, &format!("{base}/v2/models/employment/infer"), Some(infer.clone()))
        .await;
    assert_eq!(s, 200, "{v2}");
    assert_eq!(
        (v2["id"].as_str(), v2["model_name"].as_str(), v2["model_version"].as_str()),
        (Some("q1"), Some("employment"), Some(version.as_str()))
    );
    assert_eq!(
        v2["outputs"][0],
        json!({"name": "value", "datatype": "FP64", "shape": [2], "data": values}),
        "{v2}"
    );
    assert_eq!(v2["outputs"][1]["data"], json!(errors), "{v2}");
    let mut ragged = infer.clone();
    ragged["inputs"][0]["shape"] = json!([3]);
    let (s, b) =
        p.call(p.token(), Method::POST, &format!("{base}/v2/models/employment/infer"), Some(ragged)).await;
    assert_eq!((s, b["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{b}");
    assert!(b["detail"].as_str().expect("detail").contains("gnp_deflator"), "names the input: {b}");

    // KServe v1 and MLflow: plain values.
    let instances = json!({"instances": [row(), second]});
    let (s, v1) = p
        .call(
            p.token(),
            Method::POST,
            &format!("{base}/v1/models/employment:predict"),
            Some(instances.clone()),
        )
        .await;
    assert_eq!((s, &v1["predictions"]), (200, &json!(values)), "{v1}");
    let split = json!({"dataframe_split": {"columns": columns, "data": [columns.map(|c| row()[c].clone()), columns.map(|c| second[c].clone())]}});
    for payload in [
        split,
        json!({"dataframe_records": [row(), second]}),
        instances.clone(),
        json!({"inputs": [row(), second]}),
    ] {
        let (s, m) = p
            .call(
                p.token(),
                Method::POST,
                &format!("{}/employment/invocations", endpoints(&p)),
                Some(payload.clone()),
            )
            .await;
        assert_eq!((s, &m["predictions"]), (200, &json!(values)), "{payload}: {m}");
    }

    // The same gate: no credentials, no score (and the server is not woken).
    let anonymous = p
        .http
        .post(p.url(&format!("{base}/v2/models/employment/infer")))
        .json(&infer)
        .send()
        .await
        .expect("send");
    assert_eq!(anonymous.status(), 401);
    let (s, b) =
        p.call(p.token(), Method::POST, &format!("{base}/v1/models/nope:predict"), Some(instances)).await;
    assert_eq!((s, b["code"].as_str()), (404, Some("NOT_FOUND")), "{b}");
    // Refusals speak each protocol's error shape too: `error` (v1, v2), `error_code` and `message` (MLflow).
    assert!(b["error"].as_str().is_some_and(|e| e.contains("nope")), "{b}");
    let (s, b) = p
        .call(p.token(), Method::POST, &format!("{}/employment/invocations", endpoints(&p)), Some(json!({})))
        .await;
    assert_eq!((s, b["error_code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{b}");
    assert!(b["message"].as_str().is_some_and(|m| m.contains("exactly one of")), "{b}");

    // Counted as scores of the endpoint: 1 own + 1 v2 + 1 v1 + 4 MLflow (the refused ones are not).
    let e = wait_for(&p, "employment", |_| true).await;
    assert_eq!(e["usage"]["requests"], 7, "{e:#}");

    // Triton's stock client, unchanged: JSON and binary tensors, and its way of reading a refusal.
    let env = vec![
        ("MAPI_URL", p.platform.url.clone()),
        ("MAPI_TOKEN", p.token().to_owned()),
        ("MAPI_BASE", base.clone()),
        ("MAPI_ALIAS", "employment".to_owned()),
        ("MAPI_ROWS", json!([row(), second]).to_string()),
        ("MAPI_WANT", json!(values).to_string()),
    ];
    mapi_tests::python_tools::stock_client("triton_client.py", env).await;
    let e = wait_for(&p, "employment", |_| true).await;
    assert_eq!(e["usage"]["requests"], 10, "three infers of Triton's client counted: {e:#}");
}

/// An L4 endpoint is instance-billed: the time its server is up and serving
/// no score is charged by the tick, from the local host's process
/// lifetimes, and shows in the project's usage as its own kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_l4_time_appears_in_usage() {
    let p = TestPlatform::start(&[("MAPI_ENDPOINTS_CHARGE_S", "1")]).await;
    let version = fit(&p, LONGLEY).await;
    let body = json!({"alias": "gpu", "model_version": version, "accelerator": "l4", "min_instances": 1, "max_instances": 1});
    let started = std::time::Instant::now();
    let (s, e) = p.call(p.token(), Method::POST, &endpoints(&p), Some(body)).await;
    assert_eq!(s, 202, "{e}");
    wait_for(&p, "gpu", |e| e["status"] == "ready").await;
    let (s, a) = score(&p, p.token(), "gpu", json!({"rows": [row()]})).await;
    assert_eq!(s, 200, "{a}");
    let q = Query::new(<mapi_schema::InstanceLedgerEntry as mapi_schema::Doc>::COLLECTION);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let entries = loop {
        let docs = p.platform.state.store.query(&q, None).await.expect("entries");
        let entries: Vec<mapi_schema::InstanceLedgerEntry> =
            docs.iter().map(|d| d.decode().expect("an entry")).collect();
        if entries.iter().map(|e| e.idle_ms).sum::<u64>() >= 2_000 {
            break entries;
        }
        assert!(std::time::Instant::now() < deadline, "no idle time charged: {entries:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Windows follow each other; each charges its instance time less its scores' time.
    let mut windows: Vec<_> = entries.iter().map(|e| (e.from, e.to)).collect();
    windows.sort();
    assert!(
        windows.windows(2).all(|w| w[0].1 == w[1].0),
        "windows neither overlap nor leave gaps: {windows:?}"
    );
    let up: u64 = entries.iter().map(|e| e.instance_ms).sum();
    assert!(
        up <= u64::try_from(started.elapsed().as_millis()).expect("ms"),
        "no more than the wall time: {up}"
    );
    for e in &entries {
        assert_eq!(e.idle_ms, e.instance_ms.saturating_sub(e.busy_ms), "{e:?}");
        assert_eq!(e.accelerator_ms, e.idle_ms, "{e:?}");
    }
    let (s, u) =
        p.call(p.token(), Method::GET, &format!("{}/usage?group_by=kind", p.project_path()), None).await;
    assert_eq!(s, 200, "{u}");
    let idle = u["groups"].as_array().expect("groups").iter().find(|g| g["key"] == "instance").cloned();
    let idle = idle.unwrap_or_else(|| panic!("an instance group: {u:#}"))["totals"].clone();
    assert!(idle["accelerator_ms"].as_u64().is_some_and(|ms| ms >= 2_000), "{idle}");
    assert!(idle["cost_micros"].as_i64().is_some_and(|c| c > 0), "{idle}");
}

/// A CPU endpoint is request-billed: while it may scale to zero its idle
/// time costs nothing; once it keeps an instance warm, that instance's idle
/// time is charged at the idle rate, from the moment its minimum rose.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_cpu_endpoint_is_charged_its_minimum_idle_time() {
    let p = TestPlatform::start(&[("MAPI_ENDPOINTS_CHARGE_S", "1")]).await;
    let version = fit(&p, LONGLEY).await;
    let body = json!({"alias": "warm", "model_version": version, "max_instances": 1});
    let (s, e) = p.call(p.token(), Method::POST, &endpoints(&p), Some(body)).await;
    assert_eq!(s, 202, "{e}");
    wait_for(&p, "warm", |e| e["status"] == "ready").await;
    let (s, a) = score(&p, p.token(), "warm", json!({"rows": [row()]})).await;
    assert_eq!(s, 200, "{a}");
    let q = Query::new(<mapi_schema::InstanceLedgerEntry as mapi_schema::Doc>::COLLECTION);
    let entries = || async {
        let docs = p.platform.state.store.query(&q, None).await.expect("entries");
        docs.iter().map(|d| d.decode().expect("an entry")).collect::<Vec<mapi_schema::InstanceLedgerEntry>>()
    };
    // Its server is up (scored a moment ago) and ticks pass: nothing is charged without a minimum.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(entries().await.is_empty(), "{:#?}", entries().await);

    let raised = p.platform.state.clock.now();
    let scale = format!("{}/warm:scale", endpoints(&p));
    let (s, e) = p.call(p.token(), Method::POST, &scale, Some(json!({"min_instances": 1}))).await;
    assert_eq!(s, 202, "{e}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let charged = loop {
        let charged = entries().await;
        if charged.iter().map(|e| e.idle_ms).sum::<u64>() >= 1_500 {
            break charged;
        }
        assert!(std::time::Instant::now() < deadline, "no idle time charged: {charged:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for e in &charged {
        assert!(e.from >= raised, "charged from the moment its minimum rose: {e:?}");
        let window = u64::try_from(e.to.since(e.from).as_millis()).expect("ms");
        assert!(e.idle_ms <= window, "one warm instance at most: {e:?}");
        assert_eq!(
            (e.accelerator_ms, e.price_table.as_str()),
            (0, "cloudrun-requests-tier1-2026-11"),
            "{e:?}"
        );
        // The idle rate: 2,500 nano-units per vCPU-second and per GiB-second, 1 vCPU and 2 GiB.
        assert_eq!(e.cost_nanos, e.idle_ms * (2_500 + 2 * 2_500) / 1000, "{e:?}");
    }
}

/// A public endpoint is public at the platform's routes only: anyone scores
/// it there without credentials (in every protocol), admitted under the
/// tenant's limits and charged to it, while its model server stays private.
/// Nothing else of it is open: its other actions, a private endpoint and a
/// missing one all answer 401 alike, and credentials that do not verify are
/// refused, never read as none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_public_endpoint_scores_anyone_at_the_platforms_route_only() {
    let p = TestPlatform::start(&QUICK_GATE).await;
    let version = fit(&p, LONGLEY).await;
    for (alias, access) in [("open", "public"), ("closed", "private")] {
        let body = json!({"alias": alias, "model_version": version, "access": access, "max_instances": 1});
        let (s, e) = p.call(p.token(), Method::POST, &endpoints(&p), Some(body)).await;
        assert_eq!((s, e["access"].as_str()), (202, Some(access)), "{e}");
        wait_for(&p, alias, |e| e["status"] == "ready").await;
    }
    let anyone = |path: String, body: Value| {
        let req = p.http.post(p.url(&path)).json(&body);
        async move {
            let resp = req.send().await.expect("answer");
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let base = p.project_path();
    let (s, a) = anyone(format!("{}/open:score", endpoints(&p)), json!({"rows": [row()]})).await;
    assert_eq!(s, 200, "{a}");
    assert!(a["predictions"][0]["value"].as_f64().is_some_and(|v| v > 50_000.0), "{a}");
    let (s, a) = anyone(format!("{base}/v1/models/open:predict"), json!({"instances": [row()]})).await;
    assert_eq!(s, 200, "KServe v1: {a}");
    let (s, a) =
        anyone(format!("{}/open/invocations", endpoints(&p)), json!({"dataframe_records": [row()]})).await;
    assert_eq!(s, 200, "MLflow: {a}");
    let meta = p.http.get(p.url(&format!("{base}/v2/models/open"))).send().await.expect("metadata");
    assert_eq!(meta.status(), 200, "its v2 metadata is as open as its scores");

    // Nothing else is open, and a private or missing alias looks the same.
    let mut refusals = Vec::new();
    for path in ["closed:score", "nothing:score", "open:promote", "open:rollback", "open:scale"] {
        let (s, b) = anyone(format!("{}/{path}", endpoints(&p)), json!({"rows": [row()]})).await;
        assert_eq!((s, b["code"].as_str()), (401, Some("UNAUTHENTICATED")), "{path}: {b}");
        refusals.push(b["detail"].clone());
    }
    assert!(refusals.windows(2).all(|w| w[0] == w[1]), "one answer for all: {refusals:?}");
    let (s, b) = anyone(format!("{base}/v1/models/closed:predict"), json!({"instances": [row()]})).await;
    assert_eq!(s, 401, "{b}");
    let get = p.http.get(p.url(&format!("{}/open", endpoints(&p)))).send().await.expect("get");
    assert_eq!(get.status(), 401, "reading the endpoint needs credentials");
    let forged = p
        .http
        .post(p.url(&format!("{}/open:score", endpoints(&p))))
        .bearer_auth("mapi_not-a-token")
        .json(&json!({"rows": [row()]}))
        .send()
        .await
        .expect("answer");
    assert_eq!(forged.status(), 401, "credentials that do not verify are refused, not read as none");

    // Counted and charged to the tenant, with no token named.
    let e = wait_for(&p, "open", |e| e["usage"]["requests"].as_u64() >= Some(3)).await;
    assert_eq!(e["usage"]["requests"], 3, "{e:#}");
    let q = Query::new(<mapi_schema::ScoreLedgerEntry as mapi_schema::Doc>::COLLECTION);
    let docs = p.platform.state.store.query(&q, None).await.expect("ledger");
    let entries: Vec<mapi_schema::ScoreLedgerEntry> =
        docs.iter().map(|d| d.decode().expect("entry")).collect();
    assert_eq!(entries.iter().map(|e| e.requests).sum::<u64>(), 3, "{entries:#?}");
    assert!(
        entries.iter().all(|e| e.tenant.as_str() == "dev" && e.token.is_none() && e.cost_nanos > 0),
        "{entries:#?}"
    );

    // A suspended tenant's public endpoint scores nothing either.
    let operator = p.login("admin@dev.local").await;
    let suspend = json!({"status": "suspended", "reason": "unpaid invoice"});
    let (s, b) = p.call(&operator, Method::PATCH, "/v1/admin/tenants/dev", Some(suspend)).await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = anyone(format!("{}/open:score", endpoints(&p)), json!({"rows": [row()]})).await;
    assert_eq!((s, b["code"].as_str()), (403, Some("FORBIDDEN")), "{b}");
    assert!(b["detail"].as_str().is_some_and(|d| d.contains("suspended")), "{b}");
}
