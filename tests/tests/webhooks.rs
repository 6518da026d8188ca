//! Webhooks on a running platform: the README's receiver (its Python, run
//! as printed) verifies real deliveries of a run's events; replays reach it
//! with the same `webhook-id`; a rotated secret keeps the old one signing
//! beside the new; an unreachable receiver is retried on the back-off and
//! logged; URLs into private, loopback or link-local networks are refused
//! in words; only project admins (or `webhooks:manage` tokens) of the
//! project see or change its webhooks; the secret is never read back.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mapi_tests::{Options, TestPlatform, free_port};
use reqwest::Method;
use serde_json::{Value, json};

/// The README's receiver, as printed.
fn receiver_source() -> String {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).expect("README");
    let section = readme.split("## Webhooks: told when a run ends").nth(1).expect("the webhooks section");
    let code = section.split("```python\n").nth(1).expect("the receiver's code block");
    code.split("\n```").next().expect("the block's end").to_owned()
}

/// The README's receiver, running with `secret` on `port`; the lines it prints.
struct Receiver {
    child: Child,
    lines: Arc<Mutex<Vec<Value>>>,
    _dir: Option<tempfile::TempDir>,
}

impl Receiver {
    fn start(secret: &str, port: u16) -> Receiver {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("receiver.py");
        std::fs::write(&path, receiver_source()).expect("write receiver.py");
        let child = Command::new("python3")
            .arg(&path)
            .env("WEBHOOK_SECRET", secret)
            .env("PORT", port.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs the receiver");
        Receiver::attach(child, port, Some(dir))
    }

    /// Reads the lines `child`, a receiver listening on `port`, prints.
    fn attach(mut child: Child, port: u16, dir: Option<tempfile::TempDir>) -> Receiver {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (out, seen) = (child.stdout.take().expect("stdout"), lines.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let value = serde_json::from_str(&line).unwrap_or(Value::String(line));
                seen.lock().expect("lines").push(value);
            }
        });
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(started.elapsed() < Duration::from_secs(10), "the receiver listens");
            std::thread::sleep(Duration::from_millis(50));
        }
        Receiver { child, lines, _dir: dir }
    }

    /// Waits until the receiver printed `n` lines for which `matches` holds.
    async fn wait_for(&self, n: usize, matches: impl Fn(&Value) -> bool) -> Vec<Value> {
        let started = Instant::now();
        loop {
            let found: Vec<Value> =
                self.lines.lock().expect("lines").iter().filter(|l| matches(l)).cloned().collect();
            if found.len() >= n {
                return found;
            }
            let all = self.lines.lock().expect("lines").clone();
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{n} verified deliveries; the receiver printed {all:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn loopback_platform() -> TestPlatform {
    TestPlatform::start_with(&[("MAPI_WEBHOOKS_ALLOW_LOOPBACK", "true")], Options::default()).await
}

async fn create(p: &TestPlatform, token: &str, body: Value) -> (u16, Value) {
    p.call(token, Method::POST, &format!("{}/webhooks", p.project_path()), Some(body)).await
}

async fn deliveries(p: &TestPlatform, hook: &str) -> Vec<Value> {
    let path = format!("{}/webhooks/{hook}/deliveries", p.project_path());
    let (s, page) = p.call(p.token(), Method::GET, &path, None).await;
    assert_eq!(s, 200, "{page}");
    page["deliveries"].as_array().expect("deliveries").clone()
}

/// Waits until the log of `hook` holds a message for which `ready` holds.
async fn wait_log(p: &TestPlatform, hook: &str, ready: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let log = deliveries(p, hook).await;
        if ready(&log) {
            return log;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the delivery log: {log:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn finished_fit(p: &TestPlatform) -> String {
    let dataset = p.upload("x,y\n1,2\n2,4\n3,7\n4,8\n").await;
    let id = p.submit(json!({"method": "tabular.linear", "dataset": dataset, "params": {"y": "y"}})).await;
    assert_eq!(p.wait_final(&id).await["state"], "succeeded");
    id
}

#[tokio::test]
async fn the_readme_receiver_verifies_a_runs_events_their_replays_and_a_rotation() {
    let p = loopback_platform().await;
    let port = free_port();
    let (s, made) = create(&p, p.token(), json!({"url": format!("http://127.0.0.1:{port}/"), "events": ["run.succeeded", "run.started"], "description": "ci"})).await;
    assert_eq!(s, 201, "{made}");
    let (hook, secret) =
        (made["id"].as_str().expect("id").to_owned(), made["secret"].as_str().expect("secret").to_owned());
    assert!(secret.starts_with("whsec_"), "{made}");
    assert_eq!(made["events"], json!(["run.succeeded", "run.started"]));
    let receiver = Receiver::start(&secret, port);

    let run = finished_fit(&p).await;
    let ours = |l: &Value| l["run"] == run.as_str();
    let got = receiver.wait_for(2, ours).await;
    let types: Vec<&str> = got.iter().filter_map(|l| l["type"].as_str()).collect();
    assert!(types.contains(&"run.started") && types.contains(&"run.succeeded"), "{got:?}");

    let log = wait_log(&p, &hook, |l| l.len() == 2 && l.iter().all(|m| m["state"] == "delivered")).await;
    for m in &log {
        assert_eq!(m["attempts"][0]["status"], 204, "{m}");
        assert_eq!(m["subject"], format!("runs/{run}"));
        assert_eq!(m["payload"]["data"]["run"]["id"], run.as_str());
        assert!(got.iter().any(|l| l["id"] == m["id"]), "the receiver saw {} under its webhook-id", m["id"]);
    }
    let succeeded = log.iter().find(|m| m["event"] == "run.succeeded").expect("the success message");
    let message = succeeded["id"].as_str().expect("id").to_owned();
    assert_eq!(succeeded["payload"]["data"]["run"]["state"], "succeeded");

    // A replay is the same message again: the same webhook-id.
    let replay = format!("{}/webhooks/{hook}/deliveries/{message}/replay", p.project_path());
    let (s, b) = p.call(p.token(), Method::POST, &replay, None).await;
    assert_eq!(s, 202, "{b}");
    receiver.wait_for(2, |l| l["id"] == message.as_str()).await;

    // After a rotation both secrets sign for a while: the receiver still
    // holding the old one verifies, and so does one given the new one.
    let rotate = format!("{}/webhooks/{hook}/rotate", p.project_path());
    let (s, rotated) = p.call(p.token(), Method::POST, &rotate, None).await;
    assert_eq!(s, 200, "{rotated}");
    let fresh = rotated["secret"].as_str().expect("secret").to_owned();
    assert_ne!(fresh, secret);
    assert_eq!(p.call(p.token(), Method::POST, &replay, None).await.0, 202);
    receiver.wait_for(3, |l| l["id"] == message.as_str()).await;
    drop(receiver);
    let renewed = Receiver::start(&fresh, port);
    assert_eq!(p.call(p.token(), Method::POST, &replay, None).await.0, 202);
    renewed.wait_for(1, |l| l["id"] == message.as_str()).await;
    let log = wait_log(&p, &hook, |l| {
        l.iter()
            .any(|m| m["id"] == message.as_str() && m["attempts"].as_array().is_some_and(|a| a.len() == 4))
    })
    .await;
    let attempts = &log.iter().find(|m| m["id"] == message.as_str()).expect("message")["attempts"];
    let replays: Vec<&Value> =
        attempts.as_array().expect("attempts").iter().filter(|a| a["replay"] == true).collect();
    assert_eq!(replays.len(), 3);
    assert!(replays.iter().all(|a| a["status"] == 204), "{attempts}");

    // Each body a receiver answered left the platform: the tenant's egress
    // of the month counts it, and only those.
    let stored = p
        .platform
        .state
        .store
        .query(&mapi_store::Query::new(<mapi_schema::DeliveryDoc as mapi_schema::Doc>::COLLECTION), None)
        .await
        .expect("query");
    let sent: u64 = stored
        .iter()
        .map(|d| d.decode::<mapi_schema::DeliveryDoc>().expect("a message"))
        .map(|m| m.payload.len() as u64 * m.attempts.iter().filter(|a| a.status.is_some()).count() as u64)
        .sum();
    let month = mapi_quota::counters::tenant_period(
        &mapi_domain::TenantId::parse("dev").expect("dev"),
        mapi_quota::Period::Month,
        p.platform.state.clock.now(),
    );
    let counted = mapi_quota::counters::read(&*p.platform.state.store, &month).await.expect("counter");
    assert!(
        sent > 0 && counted.egress_bytes == sent as i64,
        "{} bytes counted, {sent} sent",
        counted.egress_bytes
    );

    // The secret is shown at creation and rotation only.
    let (_, listed) = p.call(p.token(), Method::GET, &format!("{}/webhooks", p.project_path()), None).await;
    let (_, one) =
        p.call(p.token(), Method::GET, &format!("{}/webhooks/{hook}", p.project_path()), None).await;
    for read in [&listed, &one] {
        let text = read.to_string();
        assert!(!text.contains(&secret) && !text.contains(&fresh) && !text.contains("whsec_"), "{text}");
    }
    assert!(one["previous_secret_valid_until"].is_string(), "{one}");
    let admin = p.login("dev@dev.local").await;
    let (_, audit) = p.call(&admin, Method::GET, "/v1/tenants/dev/audit?limit=50", None).await;
    let actions: Vec<&str> =
        audit["items"].as_array().expect("items").iter().filter_map(|e| e["action"].as_str()).collect();
    for action in ["webhook.create", "webhook.replay", "webhook.rotate"] {
        assert!(actions.contains(&action), "{action} audited: {actions:?}");
    }
}

#[tokio::test]
async fn an_unreachable_receiver_is_retried_on_the_back_off_and_logged() {
    let p = loopback_platform().await;
    // Nothing listens on this port.
    let url = format!("http://127.0.0.1:{}/", free_port());
    let (s, made) = create(&p, p.token(), json!({"url": url, "events": ["run.succeeded"]})).await;
    assert_eq!(s, 201, "{made}");
    let hook = made["id"].as_str().expect("id").to_owned();
    finished_fit(&p).await;
    let log = wait_log(&p, &hook, |l| {
        l.first().is_some_and(|m| m["attempts"].as_array().is_some_and(|a| a.len() >= 2))
    })
    .await;
    let m = &log[0];
    assert_eq!(m["state"], "pending", "still being tried: {m}");
    let attempts = m["attempts"].as_array().expect("attempts");
    let at = |i: usize| {
        mapi_domain::Timestamp::parse_rfc3339(attempts[i]["at"].as_str().expect("at")).expect("time")
    };
    for a in attempts {
        assert!(a["status"].is_null(), "{a}");
        assert!(a["error"].as_str().is_some_and(|e| e.starts_with("no answer")), "{a}");
    }
    assert_eq!((attempts[0]["attempt"].as_u64(), attempts[1]["attempt"].as_u64()), (Some(1), Some(2)));
    let waited = at(1).since(at(0));
    assert!(waited >= Duration::from_secs(5), "the first retry waits 5 s: {waited:?}");
    let next = mapi_domain::Timestamp::parse_rfc3339(m["next_at"].as_str().expect("next_at")).expect("time");
    assert!(next.since(at(1)) >= Duration::from_secs(10), "the second waits 10 s: {m}");
}

#[tokio::test]
async fn urls_into_private_networks_are_refused_and_only_project_admins_manage_webhooks() {
    // A platform without the loopback setting: what a deployment refuses.
    let accounts = "admin@dev.local,dev@dev.local,owner@other.test";
    let p = TestPlatform::start_with(&[("MAPI_DEV_ACCOUNTS", accounts)], Options::default()).await;
    let refused = [
        ("http://example.com/hook", "https"),
        ("https://10.0.0.5/hook", "private"),
        ("https://169.254.169.254/computeMetadata/v1/", "link-local"),
        ("https://127.0.0.1/hook", "loopback"),
        ("http://127.0.0.1:9/hook", "https"),
        ("https://localhost/hook", "localhost"),
        ("https://[::1]/hook", "loopback"),
        ("https://user:pass@example.com/", "user name or password"),
    ];
    for (url, words) in refused {
        let (s, problem) = create(&p, p.token(), json!({"url": url, "events": ["run.failed"]})).await;
        assert_eq!((s, problem["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{url}: {problem}");
        let detail = problem["detail"].as_str().unwrap_or_default().to_lowercase();
        assert!(detail.contains(words), "{url}: {words:?} in {detail}");
    }
    for (events, words) in [(json!([]), "at least one"), (json!(["run.done"]), "run.done")] {
        let (s, problem) =
            create(&p, p.token(), json!({"url": "https://hooks.example.com/", "events": events})).await;
        assert_eq!(s, 400, "{problem}");
        assert!(problem["detail"].as_str().unwrap_or_default().contains(words), "{words:?}: {problem}");
    }
    let (s, made) =
        create(&p, p.token(), json!({"url": "https://hooks.example.com/mapi", "events": ["run.failed"]}))
            .await;
    assert_eq!(s, 201, "{made}");
    let hook = made["id"].as_str().expect("id");
    let one = format!("{}/webhooks/{hook}", p.project_path());

    // Tokens: webhooks:manage may, other scopes may not.
    let tokens = format!("{}/tokens", p.project_path());
    let mint = |scope: &str| json!({"name": scope.replace(':', "-"), "scopes": [scope]});
    let admin = p.login("dev@dev.local").await;
    let (_, manager) = p.call(&admin, Method::POST, &tokens, Some(mint("webhooks:manage"))).await;
    let (_, runner) = p.call(&admin, Method::POST, &tokens, Some(mint("runs:create"))).await;
    let (manager, runner) =
        (manager["secret"].as_str().expect("secret"), runner["secret"].as_str().expect("secret"));
    assert_eq!(p.call(manager, Method::GET, &one, None).await.0, 200);
    let (s, b) = p.call(runner, Method::GET, &one, None).await;
    assert_eq!(s, 403, "{b}");
    let (s, b) =
        create(&p, runner, json!({"url": "https://hooks.example.com/x", "events": ["run.failed"]})).await;
    assert_eq!(s, 403, "{b}");

    // Another tenant's admin finds nothing of it.
    let operator = p.login("admin@dev.local").await;
    let other = p.create_tenant(&operator, "other", "verified").await;
    let (s, b) = p.call(&other, Method::GET, &one, None).await;
    assert!(s == 403 || s == 404, "{s} {b}");
    let theirs = "/v1/tenants/other/projects/default/webhooks";
    let (s, mine) = p.call(&other, Method::GET, theirs, None).await;
    assert_eq!((s, &mine["webhooks"]), (200, &json!([])), "{mine}");
    let (s, b) = p.call(&other, Method::DELETE, &one.replace("/dev/", "/other/"), None).await;
    assert_eq!(s, 404, "{b}");

    // Turned off, changed, deleted.
    let (s, off) = p
        .call(
            p.token(),
            Method::PATCH,
            &one,
            Some(json!({"enabled": false, "events": ["run.failed", "run.cancelled"]})),
        )
        .await;
    assert_eq!(
        (s, &off["enabled"], &off["events"]),
        (200, &json!(false), &json!(["run.failed", "run.cancelled"])),
        "{off}"
    );
    assert_eq!(p.call(p.token(), Method::DELETE, &one, None).await.0, 204);
    assert_eq!(p.call(p.token(), Method::GET, &one, None).await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_becomes_ready_is_a_message_once() {
    let p = loopback_platform().await;
    let url = format!("http://127.0.0.1:{}/", free_port());
    let events = json!(["endpoint.ready", "endpoint.failed"]);
    let (s, made) = create(&p, p.token(), json!({"url": url, "events": events})).await;
    assert_eq!(s, 201, "{made}");
    let hook = made["id"].as_str().expect("id").to_owned();
    let dataset = p.upload(include_str!("../../examples/longley.csv")).await;
    let spec = json!({"method": "tabular.linear", "dataset": dataset, "params": {"y": "employed"}});
    let run = p.wait_final(&p.submit(spec).await).await;
    let version = run["model_version"].as_str().expect("a model version");
    let endpoints = format!("{}/endpoints", p.project_path());
    let body = json!({"alias": "hooked", "model_version": version});
    let (s, e) = p.call(p.token(), Method::POST, &endpoints, Some(body)).await;
    assert_eq!(s, 202, "{e}");
    let log = wait_log(&p, &hook, |log| log.iter().any(|m| m["event"] == "endpoint.ready")).await;
    let ready: Vec<&Value> = log.iter().filter(|m| m["event"] == "endpoint.ready").collect();
    assert_eq!(ready.len(), 1, "one message for one readiness: {log:#?}");
    let m = ready[0];
    assert_eq!(m["subject"], "endpoints/hooked", "{m}");
    assert_eq!(m["payload"]["type"], "endpoint.ready", "{m}");
    assert_eq!(m["payload"]["data"]["endpoint"]["alias"], "hooked", "{m}");
    assert_eq!(m["payload"]["data"]["endpoint"]["status"], "ready", "{m}");
    assert!(log.iter().all(|m| m["event"] != "run.succeeded"), "not subscribed to runs: {log:#?}");
    // Later sweeps look again within their look-back and make no second message.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let again = deliveries(&p, &hook).await;
    assert_eq!(again.iter().filter(|m| m["event"] == "endpoint.ready").count(), 1, "{again:#?}");
    let (s, _) = p.call(p.token(), Method::DELETE, &format!("{endpoints}/hooked"), None).await;
    assert_eq!(s, 202);
}

#[tokio::test]
async fn a_job_that_finishes_is_a_message_once_per_round() {
    let p = loopback_platform().await;
    let url = format!("http://127.0.0.1:{}/", free_port());
    let (s, made) = create(&p, p.token(), json!({"url": url, "events": ["job.finished"]})).await;
    assert_eq!(s, 201, "{made}");
    let hook = made["id"].as_str().expect("id").to_owned();
    let items = json!([{"i": 0}, {"i": 1, "fail_rounds": 1}, {"i": 2}, {"i": 3}]);
    let body = json!({"method": "diag.item", "items": items, "options": {"params": {"message": "bad item"}}});
    let id = p.submit_job(p.token(), "dev", body).await;
    let job = p.wait_job(p.token(), &id, Duration::from_secs(60)).await;
    assert_eq!(job["state"], "completed_with_errors", "{job}");
    let finished =
        |log: &[Value]| log.iter().filter(|m| m["event"] == "job.finished").cloned().collect::<Vec<_>>();
    let log = wait_log(&p, &hook, |log| !finished(log).is_empty()).await;
    let first = finished(&log);
    assert_eq!(first.len(), 1, "{log:#?}");
    let data = &first[0]["payload"]["data"]["job"];
    assert_eq!(first[0]["subject"], format!("jobs/{id}"), "{}", first[0]);
    assert_eq!(
        (&data["id"], &data["state"], &data["round"]),
        (&json!(id), &json!("completed_with_errors"), &json!(0))
    );
    assert_eq!((data["counts"]["succeeded"].as_u64(), data["counts"]["failed"].as_u64()), (Some(3), Some(1)));

    // retry-failed opens a second round, whose end is a second message.
    let (s, r) = p.call(p.token(), Method::POST, &format!("/v1/jobs/{id}/retry-failed"), None).await;
    assert_eq!(s, 200, "{r}");
    let log = wait_log(&p, &hook, |log| finished(log).len() == 2).await;
    let second: Vec<Value> =
        finished(&log).into_iter().filter(|m| m["payload"]["data"]["job"]["round"] == 1).collect();
    assert_eq!(second.len(), 1, "{log:#?}");
    assert_eq!(second[0]["payload"]["data"]["job"]["state"], "succeeded", "{}", second[0]);
    // Later sweeps look again within their look-back and make no third message.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(finished(&deliveries(&p, &hook).await).len(), 2);
}

#[tokio::test]
async fn a_quota_reaching_seventy_and_ninety_percent_warns_once_at_each() {
    let p = loopback_platform().await;
    let operator = p.login("admin@dev.local").await;
    let policy = json!({"storage_bytes": 1000});
    let (s, b) = p.call(&operator, Method::PUT, "/v1/admin/quotas/dev", Some(policy)).await;
    assert_eq!(s, 200, "{b}");
    let url = format!("http://127.0.0.1:{}/", free_port());
    let (s, made) = create(&p, p.token(), json!({"url": url, "events": ["quota.warning"]})).await;
    assert_eq!(s, 201, "{made}");
    let hook = made["id"].as_str().expect("id").to_owned();
    let warnings = |log: &[Value]| {
        let mut w: Vec<u64> = log
            .iter()
            .filter(|m| m["event"] == "quota.warning")
            .filter_map(|m| m["payload"]["data"]["quota"]["warning"].as_u64())
            .collect();
        w.sort_unstable();
        w
    };
    let rows = |n: usize| format!("x\n{}", "1234567\n".repeat(n));
    p.upload(&rows(95)).await; // 762 of 1,000 bytes
    let log = wait_log(&p, &hook, |log| !warnings(log).is_empty()).await;
    assert_eq!(warnings(&log), [70], "{log:#?}");
    let m = log.iter().find(|m| m["event"] == "quota.warning").expect("a warning");
    assert_eq!(m["subject"], "quotas/storage_bytes", "{m}");
    let quota = &m["payload"]["data"]["quota"];
    assert_eq!(
        (&quota["limit"], &quota["value"], &quota["used"]),
        (&json!("storage_bytes"), &json!(1000), &json!(762))
    );
    p.upload(&rows(20)).await; // 924
    let log = wait_log(&p, &hook, |log| warnings(log).len() == 2).await;
    assert_eq!(warnings(&log), [70, 90], "{log:#?}");
    // Still past both thresholds: later sweeps find the same two messages.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(warnings(&deliveries(&p, &hook).await), [70, 90]);
}

/// The Standard Webhooks reference library, pinned.
const STANDARD_WEBHOOKS: &str = "standardwebhooks==1.3.0\n";

/// A receiver of several webhooks (one URL path each) that verifies every
/// delivery with the Standard Webhooks library from PyPI; the lines it prints.
fn standard_receiver(secrets: &Value, port: u16) -> Receiver {
    let dir = mapi_tests::python_tools::cache_dir("standardwebhooks", STANDARD_WEBHOOKS);
    let python =
        mapi_tests::python_tools::venv(&dir, STANDARD_WEBHOOKS, |_| Ok(())).expect("the library installs");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/standard_webhooks_receiver.py");
    let child = Command::new(python)
        .arg(script)
        .env("SECRETS", secrets.to_string())
        .env("PORT", port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the receiver starts");
    Receiver::attach(child, port, None)
}

/// The events a webhook of `events` hears of `run`: one per entry of its
/// history into a state a webhook can hear of.
fn run_events(run: &Value, events: &[&str]) -> Vec<(String, String)> {
    let id = run["id"].as_str().expect("id");
    run["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter_map(|t| {
            let event = match t["to"].as_str()? {
                "running" => "run.started",
                "succeeded" => "run.succeeded",
                "failed" => "run.failed",
                "partial" => "run.partial",
                "cancelled" => "run.cancelled",
                _ => return None,
            };
            events.contains(&event).then(|| (event.to_owned(), format!("runs/{id}")))
        })
        .collect()
}

/// A burst of every kind of event reaches several webhooks at once: every
/// event is one message of each webhook that subscribes to it, delivered
/// once under its id and verified by the Standard Webhooks library. (A
/// sweep that made two messages in one commit once failed on every tick,
/// and its webhook heard nothing again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bursts_of_every_event_reach_several_webhooks_once_each_verified_by_the_reference_library() {
    let p = loopback_platform().await;
    let port = free_port();
    let every: Vec<&str> = vec![
        "run.started",
        "run.succeeded",
        "run.failed",
        "run.partial",
        "run.cancelled",
        "job.finished",
        "endpoint.ready",
        "endpoint.failed",
        "quota.warning",
    ];
    let hooks: [(&str, Vec<&str>); 3] = [
        ("/every", every.clone()),
        ("/ends", vec!["job.finished", "run.succeeded"]),
        (
            "/runs-and-endpoints",
            every.iter().copied().filter(|e| e.starts_with("run.") || e.starts_with("endpoint.")).collect(),
        ),
    ];
    let mut secrets = serde_json::Map::new();
    let mut ids = Vec::new();
    for (path, events) in &hooks {
        let url = format!("http://127.0.0.1:{port}{path}");
        let (s, made) = create(&p, p.token(), json!({"url": url, "events": events})).await;
        assert_eq!(s, 201, "{made}");
        secrets.insert((*path).to_owned(), made["secret"].clone());
        ids.push(made["id"].as_str().expect("id").to_owned());
    }
    let receiver = standard_receiver(&Value::Object(secrets), port);

    // The stored-bytes limit, so the uploads below pass 70 % of it (and not 90 %).
    let small = "x,y\n1,2\n2,4\n3,7\n4,8\n";
    let longley = include_str!("../../examples/longley.csv");
    let limit = (small.len() + longley.len()) * 10 / 8;
    let operator = p.login("admin@dev.local").await;
    let (s, b) =
        p.call(&operator, Method::PUT, "/v1/admin/quotas/dev", Some(json!({"storage_bytes": limit}))).await;
    assert_eq!(s, 200, "{b}");

    // The burst: runs that succeed, fail, end partial and are cancelled,
    // two jobs, and a fit served as an endpoint, all submitted back to back.
    let (ds, fit_ds) = (p.upload(small).await, p.upload(longley).await);
    let mut runs = Vec::new();
    for _ in 0..4 {
        runs.push(p.submit(json!({"method": "describe", "dataset": ds})).await);
    }
    runs.push(p.submit(json!({"method": "diag.fail", "dataset": ds})).await);
    let partial = json!({"seconds": 30, "checkpoint_every_s": 0.2});
    runs.push(
        p.submit(json!({"method": "diag.sleep", "dataset": ds, "params": partial, "timeout_s": 1})).await,
    );
    let cancelled = p.submit(json!({"method": "diag.sleep", "dataset": ds, "params": {"seconds": 60}})).await;
    runs.push(cancelled.clone());
    let fit =
        p.submit(json!({"method": "tabular.linear", "dataset": fit_ds, "params": {"y": "employed"}})).await;
    runs.push(fit.clone());
    let mut jobs = Vec::new();
    for _ in 0..2 {
        let body = json!({"method": "diag.item", "items": [{"i": 0}, {"i": 1}, {"i": 2}]});
        jobs.push(p.submit_job(p.token(), "dev", body).await);
    }
    p.wait_run(&cancelled, Duration::from_secs(30), |r| r["state"] == "running").await;
    assert_eq!(p.cancel(p.token(), &cancelled).await.0, 202);
    let version = p.wait_final(&fit).await["model_version"].as_str().expect("a model version").to_owned();
    let endpoints = format!("{}/endpoints", p.project_path());
    let body = json!({"alias": "burst", "model_version": version});
    let (s, e) = p.call(p.token(), Method::POST, &endpoints, Some(body)).await;
    assert_eq!(s, 202, "{e}");

    let mut finished = Vec::new();
    for id in &runs {
        finished.push(p.wait_final(id).await);
    }
    for id in &jobs {
        p.wait_job(p.token(), id, Duration::from_secs(60)).await;
    }
    let ready = Instant::now();
    loop {
        let (_, e) = p.call(p.token(), Method::GET, &format!("{endpoints}/burst"), None).await;
        if e["status"] == "ready" {
            break;
        }
        assert!(ready.elapsed() < Duration::from_secs(60), "the endpoint became ready: {e}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The local host offers no way to make a deploy fail on purpose: the
    // endpoint's document says so as the reconciler writes a failure (an
    // inactive copy, so the tick's endpoint sweep leaves it alone).
    let store = &*p.platform.state.store;
    let id = mapi_endpoints::endpoint_id(
        &"dev".parse().expect("tenant"),
        &"default".parse().expect("project"),
        "burst",
    );
    let mut broken: mapi_endpoints::EndpointDoc =
        mapi_schema::get(store, &id).await.expect("read").expect("the endpoint");
    broken.id = id.replace("burst", "broken");
    broken.alias = "broken".to_owned();
    broken.events.clear();
    broken.status = mapi_domain::endpoint::EndpointStatus::Failed;
    broken.active = false;
    broken.event(p.platform.state.clock.now(), "failed", "the model server exited before it was ready");
    mapi_schema::put(store, &broken).await.expect("write");

    // What each webhook must hear: every run's transitions it subscribes
    // to, each job's end, each endpoint's readiness or failure, the quota.
    for ((path, events), hook) in hooks.iter().zip(&ids) {
        let mut want: Vec<(String, String)> = finished.iter().flat_map(|r| run_events(r, events)).collect();
        if events.contains(&"job.finished") {
            want.extend(jobs.iter().map(|j| ("job.finished".to_owned(), format!("jobs/{j}"))));
        }
        if events.contains(&"endpoint.ready") {
            want.push(("endpoint.ready".to_owned(), "endpoints/burst".to_owned()));
        }
        if events.contains(&"endpoint.failed") {
            want.push(("endpoint.failed".to_owned(), "endpoints/broken".to_owned()));
        }
        if events.contains(&"quota.warning") {
            want.push(("quota.warning".to_owned(), "quotas/storage_bytes".to_owned()));
        }
        want.sort();
        let heard = |m: &Value| {
            (m["event"].as_str().unwrap_or("").to_owned(), m["subject"].as_str().unwrap_or("").to_owned())
        };
        let log = wait_log(&p, hook, |log| {
            log.len() >= want.len() && log.iter().all(|m| m["state"] == "delivered")
        })
        .await;
        let mut got: Vec<(String, String)> = log.iter().map(heard).collect();
        got.sort();
        assert_eq!(got, want, "{path}: one message per event it subscribes to");
        let verified = receiver.wait_for(want.len(), |l| l["path"] == *path).await;
        for m in &log {
            let id = m["id"].as_str().expect("id");
            let times: Vec<&Value> = verified.iter().filter(|l| l["id"] == id).collect();
            assert_eq!(times.len(), 1, "{path}: {id} ({}) delivered once: {verified:#?}", m["event"]);
            assert_eq!(times[0]["type"], m["event"], "{path}: {id}");
        }
    }
    let refused: Vec<Value> = receiver
        .lines
        .lock()
        .expect("lines")
        .iter()
        .filter(|l| l.get("refused").is_some())
        .cloned()
        .collect();
    assert!(refused.is_empty(), "every delivery verified: {refused:#?}");
    assert_eq!(p.platform.state.metrics.webhook_sweep_failures.get(), 0, "no sweep failed");
    let (s, _) = p.call(p.token(), Method::DELETE, &format!("{endpoints}/burst"), None).await;
    assert_eq!(s, 202);
}

/// A webhook's sweep that fails tick after tick is counted each time, kept
/// on the webhook (so the count outlives a process), and from the fifth
/// failure in a row an alarm; the first sweep that commits clears it, and
/// the events that waited are made then.
#[tokio::test]
async fn a_sweep_failing_tick_after_tick_alarms_and_its_recovery_clears_it() {
    use mapi_reconcile_tick::webhooks::{ALARM_AFTER, sweep};
    use mapi_store::StoreExt;
    let p = TestPlatform::start_with(
        &[("MAPI_WEBHOOKS_ALLOW_LOOPBACK", "true")],
        Options { background: false, ..Options::default() },
    )
    .await;
    let state = &p.platform.state;
    let url = format!("http://127.0.0.1:{}/", free_port());
    let (s, made) = create(&p, p.token(), json!({"url": url, "events": ["run.started"]})).await;
    assert_eq!(s, 201, "{made}");
    let hook = made["id"].as_str().expect("id").to_owned();
    // A run document the sweep cannot read makes every sweep of the project fail.
    let key = mapi_store::DocKey::new("runs", "run_unreadable").expect("key");
    let mut fields = serde_json::Map::new();
    fields.insert("tenant".into(), json!("dev"));
    fields.insert("project".into(), json!("default"));
    fields.insert("updated_at".into(), json!(state.clock.now().to_rfc3339()));
    let store = &*state.store;
    store.put(&key, fields, mapi_store::Precondition::None).await.expect("write");
    let failing = || async {
        let doc: mapi_schema::WebhookDoc =
            mapi_schema::get(store, &hook).await.expect("read").expect("webhook");
        doc.failing
    };
    for n in 1..=ALARM_AFTER + 1 {
        let swept = sweep(state).await.expect("the sweep itself goes on");
        assert_eq!(swept.errors, 1, "sweep {n}");
        let f = failing().await.expect("kept on the webhook");
        assert_eq!(f.count, n);
        assert!(f.error.contains("does not decode"), "{}", f.error);
    }
    assert_eq!(state.metrics.webhook_sweep_failures.get(), u64::from(ALARM_AFTER + 1));
    assert_eq!(state.metrics.webhook_sweep_alarms.get(), 2, "the fifth and the sixth");
    store.delete(&key, mapi_store::Precondition::None).await.expect("delete");
    assert_eq!(sweep(state).await.expect("sweep").errors, 0);
    assert_eq!(failing().await, None, "cleared by the sweep that committed");
}

/// A burst of events reaches one receiver as a steady stream: the sweep
/// gives each new message's first attempt the receiver's next slot, at most
/// `MAPI_WEBHOOK_RECEIVER_PER_SECOND` a second, and a later sweep's messages
/// wait for the earlier ones' slots; the queue holds each attempt until its
/// slot.
#[tokio::test]
async fn a_burst_to_one_receiver_is_paced_at_its_rate() {
    use mapi_reconcile_tick::webhooks::sweep;
    let p = TestPlatform::start_with(
        &[("MAPI_WEBHOOKS_ALLOW_LOOPBACK", "true"), ("MAPI_WEBHOOK_RECEIVER_PER_SECOND", "4")],
        Options { background: false, ..Options::default() },
    )
    .await;
    let state = &p.platform.state;
    let url = format!("http://127.0.0.1:{}/", free_port());
    let (s, made) = create(&p, p.token(), json!({"url": url, "events": ["run.cancelled"]})).await;
    assert_eq!(s, 201, "{made}");
    let hook = made["id"].as_str().expect("id").to_owned();
    let dataset = p.upload("x,y\n1,2\n2,4\n3,7\n").await;
    let cancelled_runs = |n: usize| {
        let (p, dataset) = (&p, dataset.clone());
        async move {
            for _ in 0..n {
                let run = p
                    .submit(json!({"method": "tabular.linear", "dataset": dataset, "params": {"y": "y"}}))
                    .await;
                let (s, b) = p.cancel(p.token(), &run).await;
                assert!(s == 200 || s == 202, "{b}");
            }
        }
    };
    let slots =
        || async {
            let q = mapi_store::Query::new(<mapi_schema::DeliveryDoc as mapi_schema::Doc>::COLLECTION)
                .filter("webhook", mapi_store::Op::Eq, hook.as_str());
            let mut at: Vec<mapi_domain::Timestamp> = state
                .store
                .query(&q, None)
                .await
                .expect("query")
                .into_iter()
                .map(|d| d.decode::<mapi_schema::DeliveryDoc>().expect("delivery").next_at.expect("due"))
                .collect();
            at.sort();
            at
        };

    cancelled_runs(6).await;
    let before = state.clock.now();
    sweep(state).await.expect("sweep");
    let first = slots().await;
    assert_eq!(first.len(), 6, "one message a cancelled run");
    assert!(first[0] >= before, "the first slot is now");
    let step = Duration::from_millis(250);
    for pair in first.windows(2) {
        assert_eq!(pair[1].since(pair[0]), step, "{first:?}");
    }
    cancelled_runs(2).await;
    sweep(state).await.expect("sweep");
    let all = slots().await;
    assert_eq!(all.len(), 8);
    assert_eq!(all[6], first[5] + step, "the later burst waits for the earlier one's slots");
    assert_eq!(all[7], first[5] + step + step);
    let doc: mapi_schema::WebhookDoc =
        mapi_schema::get(&*state.store, &hook).await.expect("read").expect("hook");
    assert_eq!(doc.paced_until, Some(all[7] + step));
}
