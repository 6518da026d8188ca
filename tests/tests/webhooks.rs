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
    _dir: tempfile::TempDir,
}

impl Receiver {
    fn start(secret: &str, port: u16) -> Receiver {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("receiver.py");
        std::fs::write(&path, receiver_source()).expect("write receiver.py");
        let mut child = Command::new("python3")
            .arg(&path)
            .env("WEBHOOK_SECRET", secret)
            .env("PORT", port.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs the receiver");
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
