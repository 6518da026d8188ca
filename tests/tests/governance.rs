//! Governance through the API: a project's policy gates which model versions
//! serve traffic; a version is validated (automatic checks on its run's
//! metrics, then reviewers), never approved by its submitter or through a
//! token; a stricter tenant-wide policy needs a new validation; a deprecated
//! version is promoted nowhere. Every decision is audited with its reason.

use mapi_tests::TestPlatform;
use reqwest::Method;
use serde_json::{Value, json};

const LONGLEY: &str = include_str!("../../examples/longley.csv");

async fn fit(p: &TestPlatform) -> String {
    let ds = p.upload(LONGLEY).await;
    let body =
        json!({"method": "tabular.linear", "dataset": ds, "params": {"y": "employed"}, "timeout_s": 120});
    let run = p.wait_final(&p.submit(body).await).await;
    assert_eq!(run["state"], "succeeded", "{run:#}");
    run["model_version"].as_str().expect("a model version").to_owned()
}

fn problem(b: &Value) -> (&str, &str) {
    (b["code"].as_str().unwrap_or_default(), b["detail"].as_str().unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_serves_only_once_a_second_person_approved_it_under_the_policy() {
    let accounts = "dev@dev.local,admin@dev.local,ana@dev.local,rob@dev.local";
    let p = TestPlatform::start(&[("MAPI_DEV_ACCOUNTS", accounts)]).await;
    let dev = p.login("dev@dev.local").await;
    for (email, role, reviewer) in [("ana@dev.local", "editor", true), ("rob@dev.local", "runner", false)] {
        let body = json!({"email": email, "role": role, "reviewer": reviewer});
        let (s, b) = p.call(&dev, Method::POST, "/v1/tenants/dev/members", Some(body)).await;
        assert_eq!(s, 201, "{b}");
    }
    let (ana, rob) = (p.login("ana@dev.local").await, p.login("rob@dev.local").await);
    let version = fit(&p).await;
    let endpoints = format!("{}/endpoints", p.project_path());
    let policy = format!("{}/policy", p.project_path());

    // Project admins set the policy; a runner may not; a policy that cannot be met is refused.
    let rules = json!({"thresholds": ["r_squared >= 0.9"], "approvals": 1, "expires_after_days": 30});
    let (s, b) = p.call(&rob, Method::PUT, &policy, Some(rules.clone())).await;
    assert_eq!(s, 403, "{b}");
    let (s, b) = p.call(&dev, Method::PUT, &policy, Some(json!({"approvals": 9}))).await;
    assert_eq!((s, problem(&b).0), (400, "INVALID_ARGUMENT"), "{b}");
    assert!(problem(&b).1.contains("policy.approvals"), "{b}");
    let (s, b) = p.call(&dev, Method::PUT, &policy, Some(rules)).await;
    assert_eq!((s, b["in_force"]["thresholds"][0].as_str()), (200, Some("r_squared >= 0.9")), "{b}");

    // Not validated: it serves nowhere.
    let create = |alias: &str| json!({"alias": alias, "model_version": version, "max_instances": 1});
    let (s, b) = p.call(p.token(), Method::POST, &endpoints, Some(create("prod"))).await;
    assert_eq!((s, problem(&b).0), (409, "FAILED_PRECONDITION"), "{b}");
    assert!(
        problem(&b).1.contains("governance policy of dev/default")
            && problem(&b).1.contains("mapi models validate"),
        "{b}"
    );

    // A runner submits it; its check ran on the fit's own r_squared.
    let validations = format!("/v1/model-versions/{version}/validations");
    let (s, v) = p.call(&rob, Method::POST, &validations, Some(json!({}))).await;
    assert_eq!((s, v["state"].as_str()), (201, Some("pending")), "{v}");
    assert_eq!(
        (v["checks"][0]["check"].as_str(), v["checks"][0]["passed"].as_bool()),
        (Some("r_squared >= 0.9"), Some(true)),
        "{v}"
    );
    let approvals = format!("/v1/validations/{}/approvals", v["id"].as_str().expect("id"));
    let approve = |reason: &str| Some(json!({"decision": "approve", "reason": reason}));

    // Not the runner (no reviewer capability), not through a token, not without a reason.
    let (s, b) = p.call(&rob, Method::POST, &approvals, approve("looks fine")).await;
    assert_eq!((s, problem(&b).0), (403, "FORBIDDEN"), "{b}");
    let (s, b) = p.call(p.token(), Method::POST, &approvals, approve("from CI")).await;
    assert_eq!((s, problem(&b).0), (403, "FORBIDDEN"), "a token never approves: {b}");
    let (s, b) = p.call(&ana, Method::POST, &approvals, approve(" ")).await;
    assert_eq!((s, problem(&b).0), (400, "INVALID_ARGUMENT"), "{b}");
    // An admin who submits cannot approve their own submission.
    let (s, own) = p.call(&dev, Method::POST, &validations, Some(json!({}))).await;
    assert_eq!(s, 201, "{own}");
    let own_approvals = format!("/v1/validations/{}/approvals", own["id"].as_str().expect("id"));
    let (s, b) = p.call(&dev, Method::POST, &own_approvals, approve("mine is good")).await;
    assert_eq!((s, problem(&b).0), (403, "SELF_APPROVAL_FORBIDDEN"), "{b}");

    // A reviewer approves: the version serves.
    let (s, v) = p.call(&ana, Method::POST, &approvals, approve("residuals are white noise")).await;
    assert_eq!((s, v["state"].as_str()), (200, Some("approved")), "{v}");
    assert_eq!(v["decisions"][0]["by"], "ana@dev.local", "{v}");
    let (s, b) = p.call(p.token(), Method::POST, &endpoints, Some(create("prod"))).await;
    assert_eq!(s, 202, "validated: {b}");
    let (s, log) = p.call(&dev, Method::GET, "/v1/tenants/dev/audit?action=model.approve", None).await;
    assert_eq!(s, 200, "{log}");
    let entry = &log["items"][0];
    assert_eq!(entry["actor"], "ana@dev.local", "{log}");
    assert!(entry["detail"].as_str().is_some_and(|d| d.contains("residuals are white noise")), "{log}");

    // A stricter tenant-wide policy needs a new validation; a project's cannot relax it.
    let (s, b) = p.call(&dev, Method::PUT, "/v1/tenants/dev/policy", Some(json!({"approvals": 2}))).await;
    assert_eq!((s, b["in_force"]["approvals"].as_u64()), (200, Some(2)), "{b}");
    let (s, b) = p.call(&dev, Method::GET, &policy, None).await;
    assert_eq!((s, b["in_force"]["approvals"].as_u64()), (200, Some(2)), "the stricter of both: {b}");
    let (s, b) = p.call(p.token(), Method::POST, &endpoints, Some(create("canary"))).await;
    assert_eq!((s, problem(&b).0), (409, "FAILED_PRECONDITION"), "{b}");
    assert!(problem(&b).1.contains("2 approvals (it had 1)"), "{b}");
    let (s, b) = p.call(&dev, Method::DELETE, "/v1/tenants/dev/policy", None).await;
    assert_eq!(s, 204, "{b}");

    // A deprecated version is promoted nowhere and not validated again.
    let deprecate = format!("/v1/model-versions/{version}/deprecate");
    let (s, b) = p.call(&rob, Method::POST, &deprecate, Some(json!({"reason": "leaks"}))).await;
    assert_eq!(s, 403, "admins deprecate: {b}");
    let (s, b) =
        p.call(&dev, Method::POST, &deprecate, Some(json!({"reason": "trained on leaked rows"}))).await;
    assert_eq!(s, 204, "{b}");
    let (s, b) = p.call(p.token(), Method::POST, &endpoints, Some(create("canary"))).await;
    assert_eq!((s, problem(&b).0), (409, "FAILED_PRECONDITION"), "{b}");
    assert!(
        problem(&b).1.contains("deprecated by dev@dev.local") && problem(&b).1.contains("leaked rows"),
        "{b}"
    );
    let (s, b) = p.call(&rob, Method::POST, &validations, Some(json!({}))).await;
    assert_eq!(s, 409, "{b}");
    let (s, b) = p.call(&dev, Method::GET, &format!("/v1/model-versions/{version}"), None).await;
    assert_eq!((s, b["deprecated"]["reason"].as_str()), (200, Some("trained on leaked rows")), "{b}");
    // The endpoint that serves it says so.
    let (s, e) = p.call(&dev, Method::GET, &format!("{endpoints}/prod"), None).await;
    assert_eq!(s, 200, "{e}");
    assert_eq!(
        (e["deprecated"][0]["model_version"].as_str(), e["deprecated"][0]["reason"].as_str()),
        (Some(version.as_str()), Some("trained on leaked rows")),
        "{e:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_check_fails_the_validation_and_improvements_need_the_endpoint() {
    let p = TestPlatform::start(&[]).await;
    let version = fit(&p).await;
    let policy = format!("{}/policy", p.project_path());
    let strict = json!({"thresholds": ["r_squared >= 0.9999", "rmse < 1"]});
    let (s, b) = p.call(p.token(), Method::PUT, &policy, Some(strict)).await;
    assert_eq!(s, 200, "{b}");
    let validations = format!("/v1/model-versions/{version}/validations");
    let (s, v) = p.call(p.token(), Method::POST, &validations, Some(json!({}))).await;
    assert_eq!((s, v["state"].as_str()), (201, Some("failed")), "{v}");
    let details: Vec<&str> =
        v["checks"].as_array().expect("checks").iter().filter_map(|c| c["detail"].as_str()).collect();
    assert!(details[0].starts_with("r_squared = 0.995"), "{details:?}");
    assert_eq!(details[1], "the run reported no `rmse`");
    let improve = json!({"improvements": [{"metric": "r_squared", "by": 0.01, "better": "higher"}]});
    let (s, b) = p.call(p.token(), Method::PUT, &policy, Some(improve)).await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = p.call(p.token(), Method::POST, &validations, Some(json!({}))).await;
    assert_eq!((s, b["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{b}");
    let (s, b) = p.call(p.token(), Method::POST, &validations, Some(json!({"endpoint": "nothing"}))).await;
    assert_eq!(s, 404, "{b}");
    let (s, list) = p.call(p.token(), Method::GET, &validations, None).await;
    assert_eq!((s, list["validations"].as_array().map(Vec::len)), (200, Some(1)), "{list}");
}

/// The CLI's words for the same: `mapi policies set|get|rm`, `mapi models
/// validate|validations|withdraw|approve`, each as printed in the README.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_sets_a_policy_submits_and_withdraws_a_validation() {
    let p = TestPlatform::start(&[]).await;
    let version = fit(&p).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mapi = |args: &[&str]| {
        let mut c = std::process::Command::new(mapi_tests::binary("mapi"));
        c.args(["--url", &p.platform.url, "--token", p.token()]).args(args).env("MAPI_HOME", dir.path());
        c.env("MAPI_TENANT", "dev").env("MAPI_PROJECT", "default");
        let out = c.output().expect("mapi runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = mapi(&["policies", "set", "--threshold", "r_squared >= 0.9", "--approvals", "1"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("check      r_squared >= 0.9") && out.contains("approvals  1"), "{out}");
    let (code, out, err) = mapi(&["models", "validate", &version]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("pending") && out.contains("pass  r_squared >= 0.9"), "{out}");
    let id = out.split_whitespace().nth(1).expect("the validation's id").to_owned();
    assert!(id.starts_with("val_"), "{out}");
    let (code, out, err) = mapi(&["models", "approve", &id, "--reason", "from my own token"]);
    assert_eq!(code, Some(4), "a token never approves (refused): {out}{err}");
    assert!(err.contains("FORBIDDEN"), "{err}");
    let (code, out, err) = mapi(&["models", "withdraw", &id]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("cancelled"), "{out}");
    let (code, out, _) = mapi(&["models", "validations", &version]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(&id), "{out}");
    let (code, out, err) = mapi(&["policies", "rm"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("nothing: versions serve without validation"), "{out}");
}
