//! At-least-once parts, exactly-once effects: a dispatch task delivered
//! twice makes one execution; an event delivered twice is applied once; a
//! forged, replayed or late event is acknowledged and changes nothing.

use std::time::Duration;

use mapi_domain::{AttemptNo, RunId, Timestamp};
use mapi_events::{AttemptKey, Event, EventBody, pubsub};
use mapi_schema::AttemptDoc;
use mapi_store::StoreExt;
use mapi_tests::TestPlatform;
use serde_json::{Value, json};

const CSV: &str = "x,y\n1,2\n2,4.1\n3,5.9\n";

async fn attempt(p: &TestPlatform, run: &str, n: u32) -> AttemptDoc {
    let id = AttemptDoc::id_of(&RunId::parse(run).expect("run id"), AttemptNo(n));
    let key = mapi_schema::key::<AttemptDoc>(&id).expect("key");
    p.platform
        .state
        .store
        .get_one(&key)
        .await
        .expect("get")
        .expect("attempt exists")
        .decode()
        .expect("decode")
}

fn internal(p: &TestPlatform) -> String {
    p.platform.state.config.secrets.internal_token.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatch_delivered_twice_makes_one_execution() {
    let p = TestPlatform::start(&[]).await;
    let ds = p.upload(CSV).await;
    let id = p.submit(json!({"method": "diag.sleep", "dataset": ds, "params": {"seconds": 1}})).await;
    // The queue delivers the task; deliver the same task body again, twice at once.
    let body = json!({"run": id, "attempt": 1});
    let send = || p.http.post(p.url("/internal/tasks/dispatch")).bearer_auth(internal(&p)).json(&body).send();
    let (a, b) = tokio::join!(send(), send());
    for r in [a, b] {
        let status = r.expect("send").status().as_u16();
        assert!(status == 200 || status == 503, "a duplicate is a no-op or told to come back: {status}");
    }
    let run = p.wait_final(&id).await;
    assert_eq!(run["state"], "succeeded");
    let again = send().await.expect("send");
    assert_eq!(again.status(), 200, "after the run ended the task is a no-op");
    let a = attempt(&p, &id, 1).await;
    let executions = p.platform.state.executor.list_recent(Timestamp::EPOCH).await.expect("list");
    let mine: Vec<_> = executions.iter().filter(|e| e.nonce.as_ref() == Some(&a.nonce)).collect();
    assert_eq!(mine.len(), 1, "exactly one execution for the attempt: {mine:?}");
    assert_eq!(run["attempts"].as_array().map(Vec::len), Some(1));
}

fn envelope(event: &Value, execution: &str) -> Value {
    let entry = pubsub::log_entry(
        &json!({ "mapi_event": event }),
        execution,
        "local-s",
        "local",
        Timestamp::from_secs(1_800_000_000),
        "x",
    );
    serde_json::to_value(pubsub::envelope(
        &entry,
        "projects/local/subscriptions/test",
        "m-1",
        Timestamp::from_secs(1_800_000_000),
    ))
    .expect("envelope json")
}

async fn push(p: &TestPlatform, body: &Value) -> Value {
    let r = p
        .http
        .post(p.url("/internal/events"))
        .bearer_auth(internal(p))
        .json(body)
        .send()
        .await
        .expect("push");
    assert_eq!(r.status(), 200, "every authenticated push is acknowledged");
    r.json().await.expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_apply_once_and_forgeries_change_nothing() {
    let p = TestPlatform::start(&[]).await;
    let ds = p.upload(CSV).await;
    let id = p.submit(json!({"method": "diag.sleep", "dataset": ds, "params": {"seconds": 60}})).await;
    p.wait_run(&id, Duration::from_secs(30), |r| r["progress"]["started"] == true).await;
    let a = attempt(&p, &id, 1).await;
    let exec = a.handle.clone().expect("handle").0;
    let key = AttemptKey::from_hex(&a.event_key).expect("key");
    let run_id = RunId::parse(&id).expect("run id");
    let event = Event {
        v: 1,
        run: run_id.clone(),
        attempt: AttemptNo(1),
        task: 0,
        seq: 1 << 30,
        at: Timestamp::from_secs(1_800_000_000),
        body: EventBody::Metric { name: "injected".into(), value: 42.0 },
    };
    let signed = serde_json::to_value(mapi_events::sign(event.clone(), &key)).expect("json");
    let events_before = p.run(&id).await["progress"]["events"].as_u64().expect("events");

    assert_eq!(push(&p, &envelope(&signed, &exec)).await["disposition"], "applied");
    assert_eq!(push(&p, &envelope(&signed, &exec)).await["disposition"], "duplicate");
    let run = p.run(&id).await;
    assert_eq!(run["progress"]["metrics"]["injected"], 42.0);

    // Forged: right ids, wrong key.
    let forged = serde_json::to_value(mapi_events::sign(
        Event {
            seq: (1 << 30) + 1,
            body: EventBody::Metric { name: "injected".into(), value: -1.0 },
            ..event.clone()
        },
        &AttemptKey::from_bytes([9; 32]),
    ))
    .expect("json");
    assert_eq!(push(&p, &envelope(&forged, &exec)).await["disposition"], "bad_signature");
    // Replayed into another attempt: the signature covers the attempt.
    let mut replayed = signed.clone();
    replayed["attempt"] = json!(2);
    assert_eq!(push(&p, &envelope(&replayed, &exec)).await["disposition"], "unknown_attempt");
    // From another execution.
    let other = serde_json::to_value(mapi_events::sign(Event { seq: (1 << 30) + 2, ..event.clone() }, &key))
        .expect("json");
    assert_eq!(push(&p, &envelope(&other, "exec-0-deadbeef")).await["disposition"], "wrong_execution");
    // Garbage.
    assert_eq!(push(&p, &json!({"message": {"data": "!!!"}})).await["disposition"], "malformed");

    let after = p.run(&id).await;
    assert_eq!(after["progress"]["metrics"]["injected"], 42.0, "nothing forged got in");
    assert!(after["progress"]["events"].as_u64().expect("events") > events_before);
    let metrics = p.http.get(p.url("/metrics")).send().await.expect("metrics").text().await.expect("text");
    for kind in ["bad_signature", "unknown_attempt", "wrong_execution"] {
        assert!(
            metrics.contains(&format!("mapi_sandbox_violations_total{{kind=\"{kind}\"}} 1")),
            "{kind}:\n{metrics}"
        );
    }
    assert!(metrics.contains("mapi_push_rejected_total{kind=\"malformed\"} 1"));

    // After the attempt ends, even a correctly signed event is refused.
    p.cancel(p.token(), &id).await;
    p.wait_final(&id).await;
    let late =
        serde_json::to_value(mapi_events::sign(Event { seq: (1 << 30) + 3, ..event }, &key)).expect("json");
    assert_eq!(push(&p, &envelope(&late, &exec)).await["disposition"], "attempt_ended");
}
