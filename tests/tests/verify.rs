//! `mapi admin executors verify NAME` on a running platform: the suites run
//! through its own executor and their reports are recorded. On gvisor both
//! pass, the shared tiers open and a verified tenant's waiting run then
//! executes; on local-process the probes get through, the tiers stay shut
//! and the verified tenant's run keeps waiting with the reason. The
//! suites' executions' events are acknowledged as theirs, never counted as
//! sandbox violations.

use std::process::Command;
use std::time::Duration;

use mapi_tests::{TestPlatform, binary};
use reqwest::Method;
use serde_json::{Value, json};

const ACCOUNTS: (&str, &str) = ("MAPI_DEV_ACCOUNTS", "admin@dev.local,dev@dev.local,owner@ver.test");

/// `mapi` as `token` against `p`: exit code, stdout, stderr.
fn mapi_as(p: &TestPlatform, token: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(binary("mapi"))
        .args(args)
        .env("MAPI_URL", &p.platform.url)
        .env("MAPI_TOKEN", token)
        .output()
        .expect("run mapi");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// A verified tenant's run of `describe`; its id.
async fn verified_run(p: &TestPlatform, owner: &str) -> String {
    let ds = p.upload_as(owner, "/v1/tenants/ver/projects/default", "x,y\n1,2\n3,4\n").await;
    let body = json!({"method": "describe", "dataset": ds});
    let (s, b) = p.call(owner, Method::POST, "/v1/tenants/ver/projects/default/runs", Some(body)).await;
    assert_eq!(s, 201, "{b}");
    b["id"].as_str().expect("run id").to_owned()
}

/// Polls the run as `owner` until `pred` holds (bounded by `limit`).
async fn wait_run(
    p: &TestPlatform,
    owner: &str,
    id: &str,
    limit: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let (s, r) = p.call(owner, Method::GET, &format!("/v1/runs/{id}"), None).await;
        assert_eq!(s, 200, "{r}");
        if pred(&r) {
            return r;
        }
        assert!(std::time::Instant::now() < deadline, "run {id} did not get there: {r:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn sandbox_violations(p: &TestPlatform) -> String {
    let metrics = p.http.get(p.url("/metrics")).send().await.expect("metrics").text().await.expect("text");
    metrics.lines().filter(|l| l.starts_with("mapi_sandbox_violations")).collect::<Vec<_>>().join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_on_gvisor_opens_the_shared_tiers_on_real_reports() {
    let p = TestPlatform::start(&[("MAPI_EXECUTOR", "gvisor"), ("MAPI_LOCAL_MEMORY_MIB", "S=128"), ACCOUNTS])
        .await;
    let operator = p.login("admin@dev.local").await;
    let owner = p.create_tenant(&operator, "ver", "verified").await;
    let run = verified_run(&p, &owner).await;
    let waiting =
        wait_run(&p, &owner, &run, Duration::from_secs(20), |r| r["waiting"]["reason"].is_string()).await;
    assert_eq!(waiting["state"], "queued", "{waiting}");

    let (code, out, err) = mapi_as(&p, &operator, &["admin", "executors", "verify", "gvisor"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("shared tiers open"), "{out}");
    assert!(!out.contains("FAILED") && !out.contains("GOT THROUGH") && !out.contains("DID NOT RUN"), "{out}");
    let (s, listed) = p.call(&operator, Method::GET, "/v1/admin/executors", None).await;
    assert_eq!((s, &listed[0]["shared_tiers_enabled"]), (200, &json!(true)), "{listed}");
    let (_, audit) = p.call(&operator, Method::GET, "/v1/admin/audit?action=executor.verify", None).await;
    assert!(audit.to_string().contains("executor.verify"), "{audit}");

    let done = wait_run(&p, &owner, &run, Duration::from_secs(60), |r| r["state"] == "succeeded").await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(sandbox_violations(&p).await, "", "the suites' events are not violations");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_on_local_process_records_failing_probes_and_the_tiers_stay_shut() {
    let p = TestPlatform::start(&[("MAPI_LOCAL_MEMORY_MIB", "S=128"), ACCOUNTS]).await;
    let operator = p.login("admin@dev.local").await;
    let owner = p.create_tenant(&operator, "ver", "verified").await;
    let run = verified_run(&p, &owner).await;

    // One run of the suites at a time: a second is refused while the first runs.
    let first = {
        let url = p.url("/v1/admin/executors/local-process/verify");
        let (http, operator) = (p.http.clone(), operator.clone());
        tokio::spawn(
            async move { http.post(url).bearer_auth(operator).send().await.map(|r| r.status().as_u16()) },
        )
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (s, b) = p.call(&operator, Method::POST, "/v1/admin/executors/local-process/security", None).await;
    assert_eq!(s, 409, "{b}");
    assert!(b["detail"].as_str().unwrap_or_default().contains("running"), "{b}");
    assert_eq!(first.await.expect("join").expect("the first verify answers"), 200);

    let (code, out, err) =
        mapi_as(&p, &operator, &["--json", "admin", "executors", "verify", "local-process"]);
    assert_eq!(code, 1, "shared tiers stay closed: {out}\n{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    let through: Vec<&str> = v["security"]["probes"]
        .as_array()
        .expect("probes")
        .iter()
        .filter(|p| p["ran"] == true && p["blocked"] == false)
        .filter_map(|p| p["name"].as_str())
        .collect();
    for probe in
        ["http_egress", "dns_egress", "metadata_token", "platform_home", "other_run", "write_outside"]
    {
        assert!(through.contains(&probe), "{probe} got through local-process: {through:?}");
    }
    assert_eq!(v["executor"]["security_passed"], false, "{v}");
    assert_eq!(v["executor"]["shared_tiers_enabled"], false, "{v}");

    let (code, out, _) = mapi_as(&p, &operator, &["security"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("http_egress") && out.contains("GOT THROUGH"), "{out}");

    let still =
        wait_run(&p, &owner, &run, Duration::from_secs(20), |r| r["waiting"]["reason"].is_string()).await;
    assert_eq!(still["state"], "queued", "{still}");
    let why = still["waiting"]["reason"].as_str().unwrap_or_default();
    assert!(why.contains("shared tiers are not open"), "the run says why: {still}");
    assert_eq!(sandbox_violations(&p).await, "", "the suites' events are not violations");
}
