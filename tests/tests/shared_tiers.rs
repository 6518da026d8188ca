//! The shared-tier gate and the executors admin: `verified` and `public`
//! tenants' runs are placed only when the executor's caps allow it and
//! fresh passing reports for exactly those caps are on record; until then
//! they wait in the queue and never fail. The operators' switch holds every
//! tier. Every change is audited.

use std::sync::Arc;
use std::time::Duration;

use mapi_clock::VirtualClock;
use mapi_domain::{AttemptNo, RunId, Timestamp};
use mapi_tests::scripted::ScriptedExecutor;
use mapi_tests::{Options, TestPlatform};
use reqwest::Method;
use serde_json::{Value, json};

const OPERATOR: &str = "admin@dev.local";

struct Rig {
    p: TestPlatform,
    clock: Arc<VirtualClock>,
    operator: String,
    verified: String,
}

async fn rig() -> Rig {
    let clock = Arc::new(VirtualClock::new(Timestamp::from_secs(1_800_000_000)));
    let options = Options {
        background: false,
        clock: clock.clone(),
        executor: Some(Arc::new(ScriptedExecutor::default())),
        queue: None,
        entropy: None,
    };
    let p = TestPlatform::start_with(
        &[("MAPI_DEV_ACCOUNTS", "admin@dev.local,dev@dev.local,owner@ver.test")],
        options,
    )
    .await;
    let operator = p.login(OPERATOR).await;
    let verified = p.create_tenant(&operator, "ver", "verified").await;
    Rig { p, clock, operator, verified }
}

impl Rig {
    /// Submits a small run as `token` in `tenant/project`; returns its id.
    async fn submit(&self, token: &str, tenant: &str, project: &str) -> RunId {
        let ds_path = format!("/v1/tenants/{tenant}/projects/{project}/datasets?name=d");
        let resp = self
            .p
            .http
            .post(self.p.url(&ds_path))
            .bearer_auth(token)
            .header("content-type", "text/csv")
            .body("x,y\n1,2\n")
            .send()
            .await
            .expect("upload");
        assert_eq!(resp.status(), 201);
        let ds: Value = resp.json().await.expect("json");
        let body = json!({"method": "describe", "dataset": ds["id"]});
        let path = format!("/v1/tenants/{tenant}/projects/{project}/runs");
        let (s, b) = self.p.call(token, Method::POST, &path, Some(body)).await;
        assert_eq!(s, 201, "{b}");
        RunId::parse(b["id"].as_str().expect("id")).expect("run id")
    }

    async fn executors(&self) -> Value {
        let (s, b) = self.p.call(&self.operator, Method::GET, "/v1/admin/executors", None).await;
        assert_eq!(s, 200, "{b}");
        b[0].clone()
    }

    async fn put_evidence(&self, evidence: &Value) -> (u16, Value) {
        self.p
            .call(
                &self.operator,
                Method::PUT,
                "/v1/admin/executors/scripted/evidence",
                Some(evidence.clone()),
            )
            .await
    }

    fn evidence(&self, caps: &Value) -> Value {
        let now = mapi_clock::Clock::now(&*self.clock);
        let cases: Vec<Value> = mapi_executor::conformance_cases::CASES
            .iter()
            .map(|n| json!({"name": n, "passed": true}))
            .collect();
        let probes: Vec<Value> = mapi_executor::evidence::REQUIRED_PROBES
            .iter()
            .map(|n| json!({"name": n, "ran": true, "blocked": true}))
            .collect();
        json!({
            "target": {"executor": "scripted", "caps": caps, "remote_control_api": true, "enforces_memory_limit": true},
            "conformance": {"executor": "scripted", "finished_at": now, "cases": cases},
            "security": {"finished_at": now, "probes": probes},
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verified_runs_wait_for_fresh_evidence_of_exactly_the_current_caps_and_never_fail() {
    let r = rig().await;
    let dev = r.p.token().to_owned();
    let internal = r.submit(&dev, "dev", "default").await;
    let verified = r.submit(&r.verified, "ver", "default").await;

    // No evidence: the internal tenant's run goes, the verified one waits.
    assert_eq!(r.p.dispatch(&internal, AttemptNo::FIRST).await.0, 200);
    let (s, b) = r.p.dispatch(&verified, AttemptNo::FIRST).await;
    assert_eq!(s, 503, "{b}");
    assert!(b["detail"].as_str().unwrap_or_default().contains("no conformance"), "{b}");
    let view = r.executors().await;
    assert_eq!(
        (view["shared_tiers_enabled"].as_bool(), view["conformance_passed"].as_bool()),
        (Some(false), Some(false))
    );
    assert!(view["message"].as_str().unwrap_or_default().contains("no conformance"), "{view}");
    let caps = view["capabilities"].clone();

    // A skipped probe is not evidence.
    let mut skipped = r.evidence(&caps);
    skipped["security"]["probes"][0]["ran"] = json!(false);
    let (s, v) = r.put_evidence(&skipped).await;
    assert_eq!(
        (s, &v["shared_tiers_enabled"], &v["security_passed"]),
        (200, &json!(false), &json!(false)),
        "{v}"
    );
    assert_eq!(r.p.dispatch(&verified, AttemptNo::FIRST).await.0, 503);

    // Evidence for other caps does not count.
    let mut other = caps.clone();
    other["classes"] = json!(["S"]);
    let (s, v) = r.put_evidence(&r.evidence(&other)).await;
    assert_eq!((s, &v["shared_tiers_enabled"]), (200, &json!(false)));
    assert!(v["message"].as_str().unwrap_or_default().contains("other caps"), "{v}");

    // Reports of another executor are refused.
    let mut wrong = r.evidence(&caps);
    wrong["target"]["executor"] = json!("local-process");
    assert_eq!(r.put_evidence(&wrong).await.0, 400);

    // Fresh, passing, for these caps: the waiting run goes.
    let (s, v) = r.put_evidence(&r.evidence(&caps)).await;
    assert_eq!((s, &v["shared_tiers_enabled"]), (200, &json!(true)), "{v}");
    let (s, b) = r.p.dispatch(&verified, AttemptNo::FIRST).await;
    assert_eq!((s, b["outcome"].as_str()), (200, Some("submitted")), "{b}");

    // Three days later the evidence is stale: new verified runs wait again.
    r.clock.advance(Duration::from_secs(3 * 86_400 + 1));
    let owner = r.p.login("owner@ver.test").await;
    let later = r.submit(&owner, "ver", "default").await;
    let (s, b) = r.p.dispatch(&later, AttemptNo::FIRST).await;
    assert_eq!(s, 503);
    assert!(b["detail"].as_str().unwrap_or_default().contains("too old"), "{b}");
    let run = r.p.call(&owner, Method::GET, &format!("/v1/runs/{later}"), None).await.1;
    assert_eq!(run["state"], "queued", "waiting, not failed: {run}");
    let why = run["waiting"]["reason"].as_str().unwrap_or_default();
    assert!(why.contains("shared tiers are not open") && why.contains("too old"), "the run says why: {run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_switch_holds_every_tier_and_every_change_is_audited() {
    let r = rig().await;
    let dev = r.p.token().to_owned();
    let id = r.submit(&dev, "dev", "default").await;
    let path = "/v1/admin/executors/scripted";

    // Only operators; a reason is required; unknown executors are 404.
    assert_eq!(
        r.p.call(&dev, Method::PUT, path, Some(json!({"enabled": false, "reason": "x"}))).await.0,
        403
    );
    assert_eq!(
        r.p.call(&r.operator, Method::PUT, path, Some(json!({"enabled": false, "reason": " "}))).await.0,
        400
    );
    let nope = json!({"enabled": false, "reason": "incident"});
    assert_eq!(r.p.call(&r.operator, Method::PUT, "/v1/admin/executors/gke", Some(nope)).await.0, 404);

    let (s, v) = r
        .p
        .call(&r.operator, Method::PUT, path, Some(json!({"enabled": false, "reason": "INC-42 containment"})))
        .await;
    assert_eq!((s, v["status"].as_str()), (200, Some("disabled")), "{v}");
    let (s, b) = r.p.dispatch(&id, AttemptNo::FIRST).await;
    assert_eq!(s, 503, "even internal runs wait while the executor is disabled: {b}");
    assert!(b["detail"].as_str().unwrap_or_default().contains("INC-42"), "{b}");
    let queued = r.p.call(&dev, Method::GET, &format!("/v1/runs/{id}"), None).await.1;
    let again = json!({"method": "describe", "dataset": queued["dataset"]});
    let (s, dry) =
        r.p.call(&dev, Method::POST, "/v1/tenants/dev/projects/default/runs?dry_run=true", Some(again)).await;
    assert_eq!((s, dry["admitted"].as_bool()), (200, Some(true)), "{dry}");
    assert_eq!(
        dry["would_wait"], "executor scripted is disabled by an operator: INC-42 containment",
        "{dry}"
    );
    let run = r.p.call(&dev, Method::GET, &format!("/v1/runs/{id}"), None).await.1;
    assert_eq!(
        run["waiting"]["reason"], "executor scripted is disabled by an operator: INC-42 containment",
        "the run says why it waits: {run}"
    );
    let since = run["waiting"]["since"].clone();
    assert_eq!(r.p.dispatch(&id, AttemptNo::FIRST).await.0, 503);
    let run = r.p.call(&dev, Method::GET, &format!("/v1/runs/{id}"), None).await.1;
    assert_eq!(run["waiting"]["since"], since, "the same wait keeps its start");

    // Switched back on, the executor is offered the runs it held at once
    // (a dispatch pushed now), not after the held dispatch's retry or the
    // tick's re-push a lease later.
    let queue = &r.p.platform.state.queue;
    let dispatch = mapi_queue::QueueName::new(mapi_schema::DISPATCH_QUEUE).expect("queue name");
    let before = queue.depth(&dispatch).await.expect("depth");
    let (s, _) =
        r.p.call(&r.operator, Method::PUT, path, Some(json!({"enabled": true, "reason": "resolved"}))).await;
    assert_eq!(s, 200);
    assert_eq!(queue.depth(&dispatch).await.expect("depth"), before + 1, "the held run's dispatch is pushed");
    let (s, _) =
        r.p.call(&r.operator, Method::PUT, path, Some(json!({"enabled": true, "reason": "again"}))).await;
    assert_eq!(s, 200);
    assert_eq!(
        queue.depth(&dispatch).await.expect("depth"),
        before + 1,
        "only a switch from off offers runs"
    );
    assert_eq!(r.p.dispatch(&id, AttemptNo::FIRST).await.0, 200);
    let run = r.p.call(&dev, Method::GET, &format!("/v1/runs/{id}"), None).await.1;
    assert!(run.get("waiting").is_none(), "a placed run waits for nothing: {run}");

    let (_, log) = r.p.call(&r.operator, Method::GET, "/v1/admin/audit", None).await;
    let actions: Vec<&str> =
        log["items"].as_array().expect("audit entries").iter().filter_map(|e| e["action"].as_str()).collect();
    assert!(actions.contains(&"executor.disable") && actions.contains(&"executor.enable"), "{actions:?}");
    let view = r.executors().await;
    assert_eq!(view["health"]["running"], 1, "{view}");
    assert!(view["health"]["submits"]["throttled_last_hour"].is_u64());
}
