//! End to end over HTTP against the platform started in this process (all
//! five functions, the queue's deliverer, the log forwarder and the tick,
//! exactly as `mapi dev` runs them), with real worker processes. Each test
//! asserts the exact sequence of transitions in the run's history, and
//! every case runs three times: on the local-process executor, on gvisor
//! and on cloudrun-jobs over FakeCloudRun (the run-level half of the
//! executor conformance suite; the executor-level half is
//! `executor_conformance`).

use std::time::Duration;

use mapi_schema::layout;
use mapi_tests::backend::{Backend, start};
use mapi_tests::{Options, path, retried_once, transitions, with_start};
use serde_json::{Value, json};

const LONGLEY: &str = include_str!("../../examples/longley.csv");

fn final_error(run: &Value) -> (String, String) {
    (
        run["error"]["code"].as_str().unwrap_or_default().to_owned(),
        run["error"]["message"].as_str().unwrap_or_default().to_owned(),
    )
}

async fn a_linear_fit_succeeds_with_outputs_and_cost(b: Backend) {
    let p = start(b, &[], Options::default()).await;
    let ds = p.upload(LONGLEY).await;
    let id = p
        .submit(
            json!({"method": "tabular.linear", "dataset": ds, "params": {"y": "employed"}, "timeout_s": 120}),
        )
        .await;
    let run = p.wait_final(&id).await;
    assert_eq!(run["state"], "succeeded", "{run:#}");
    assert_eq!(transitions(&run), with_start(&[("running", "succeeded", "completed")]));

    // The coefficients, downloaded through the view's link (redirected to a signed URL).
    let out = &run["outputs"][0];
    assert_eq!(out["name"], "model.json");
    let model: Value = p.output(out["url"].as_str().expect("url")).await.json().await.expect("json");
    let intercept = model["coefficients"][0]["estimate"].as_f64().expect("estimate");
    assert!((intercept - -3_482_258.634_595_82).abs() < 1e-3, "NIST certified intercept, got {intercept}");
    assert!((model["r_squared"].as_f64().expect("r2") - 0.995_479_004_577_296).abs() < 1e-9);

    // Metered once, at the named price table, in integer micros.
    let attempts = run["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 1);
    let charge = &attempts[0]["charge"];
    assert_eq!(charge["price_table"], mapi_cost_table());
    assert!(charge["wall_ms"].as_u64().expect("wall") > 0);
    assert_eq!(run["cost"]["charged_micros"], charge["amount_micros"]);
    assert!(run["progress"]["complete"].as_bool().expect("complete"));
}

fn mapi_cost_table() -> &'static str {
    "cloudrun-tier1-2026-11"
}

async fn a_method_error_fails_the_run_with_its_message(b: Backend) {
    let p = start(b, &[], Options::default()).await;
    let ds = p.upload(LONGLEY).await;
    let id = p
        .submit(json!({"method": "diag.fail", "dataset": ds, "params": {"message": "column `q` is empty"}}))
        .await;
    let run = p.wait_final(&id).await;
    assert_eq!(transitions(&run), with_start(&[("running", "failed", "method_error")]));
    assert_eq!(final_error(&run), ("METHOD_ERROR".into(), "column `q` is empty".into()));
}

async fn cancel_while_running_is_confirmed_before_cancelled(b: Backend) {
    let p = start(b, &[], Options::default()).await;
    let ds = p.upload(LONGLEY).await;
    let id = p.submit(json!({"method": "diag.sleep", "dataset": ds, "params": {"seconds": 60}})).await;
    p.wait_run(&id, Duration::from_secs(30), |r| r["progress"]["started"] == true).await;
    let (status, v) = p.cancel(p.token(), &id).await;
    assert_eq!(status, 202, "a started run is cancelling until the executor confirms");
    assert_eq!(v["state"], "cancelling");
    let run = p.wait_final(&id).await;
    assert_eq!(
        transitions(&run),
        with_start(&[
            ("running", "cancelling", "cancel_requested"),
            ("cancelling", "cancelled", "cancel_confirmed")
        ])
    );
    assert_eq!(p.cancel(p.token(), &id).await.0, 409);
}

/// Stalled, not lost: a run whose method prints nothing for longer than `MAPI_STALL_AFTER_S` is
/// marked stalled while the executor says it is alive, and goes on to succeed in its one attempt.
async fn a_silent_run_is_stalled_not_lost(b: Backend) {
    let p = start(b, &[("MAPI_STALL_AFTER_S", "1")], Options::default()).await;
    let ds = p.upload(LONGLEY).await;
    let params = json!({"seconds": 5, "progress_every_s": 3600});
    let id = p.submit(json!({"method": "diag.sleep", "dataset": ds, "params": params})).await;
    let stalled = p.wait_run(&id, Duration::from_secs(30), |r| r["stalled"] == true).await;
    assert_eq!(stalled["state"], "running", "silence marks the run stalled; the executor says it is alive");
    let run = p.wait_final(&id).await;
    assert_eq!(transitions(&run), with_start(&[("running", "succeeded", "completed")]));
    assert_eq!(run["attempts"].as_array().map(Vec::len), Some(1), "never retried");
}

/// Generation verification, run level: an output replaced after its task wrote it (here between
/// the run's last event and its finalization, which the test holds back) is detected by the
/// generation the task reported; the attempt is retried as an infrastructure failure and the run
/// succeeds on fresh outputs.
async fn an_output_replaced_after_it_was_written_is_detected(b: Backend) {
    let (queue, hold) = mapi_tests::held::hold(mapi_schema::FINALIZE_QUEUE);
    let p = start(b, &[], Options { queue: Some(queue), ..Options::default() }).await;
    let ds = p.upload(LONGLEY).await;
    let id = p.submit(json!({"method": "describe", "dataset": ds})).await;
    let done = p.wait_run(&id, Duration::from_secs(30), |r| r["progress"]["complete"] == true).await;
    assert_eq!(done["state"], "running", "held before its finalization: {done:#}");
    let run = mapi_domain::RunId::parse(&id).expect("run id");
    let c = &p.platform.platform.credentials;
    let dir = layout::task_dir(&c.tenant, &c.project, &run, mapi_domain::AttemptNo(1), 0, 1);
    let key = mapi_objects::ObjectKey::parse(&layout::output(&dir, "summary.json")).expect("key");
    let objects = &p.platform.platform.state.objects;
    let written = objects.head(&key).await.expect("the task wrote its output");
    let replaced = objects
        .put(&key, bytes::Bytes::from_static(b"{}"), "application/json", mapi_objects::IfGeneration::Any)
        .await
        .expect("replace");
    assert_ne!(replaced.generation, written.generation);
    hold.set(false);
    let run = p.wait_final(&id).await;
    assert_eq!(
        transitions(&run),
        retried_once("infrastructure_failure", ("running", "succeeded", "completed"))
    );
    let summary =
        p.output(run["outputs"][0]["url"].as_str().expect("url")).await.bytes().await.expect("body");
    assert_ne!(&summary[..], b"{}", "the run's output is the retry's own");
}

async fn a_queued_run_is_cancelled_at_once(b: Backend) {
    let p = start(b, &[], Options::default()).await;
    let ds = p.upload(LONGLEY).await;
    // Submit, then cancel before the deliverer dispatches (the race is
    // decided in the store: either the cancel or the dispatch commits first).
    let id = p.submit(json!({"method": "diag.sleep", "dataset": ds, "params": {"seconds": 30}})).await;
    let (status, _) = p.cancel(p.token(), &id).await;
    let run = p.wait_final(&id).await;
    assert_eq!(run["state"], "cancelled");
    let t = transitions(&run);
    if status == 200 {
        assert_eq!(t, path(&[("·", "queued", "submitted"), ("queued", "cancelled", "cancel_requested")]));
    } else {
        assert_eq!(status, 202);
        assert!(t.contains(&("cancelling".into(), "cancelled".into(), "cancel_confirmed".into())), "{t:?}");
    }
}

async fn a_run_past_its_timeout_fails_with_timeout(b: Backend) {
    let p = start(b, &[], Options::default()).await;
    let ds = p.upload(LONGLEY).await;
    let id = p
        .submit(json!({"method": "diag.sleep", "dataset": ds, "params": {"seconds": 30}, "timeout_s": 1}))
        .await;
    let run = p.wait_final(&id).await;
    assert_eq!(transitions(&run), with_start(&[("running", "failed", "timeout")]));
    assert_eq!(final_error(&run).0, "TIMEOUT");
}

async fn a_timeout_after_a_checkpoint_ends_partial(b: Backend) {
    let p = start(b, &[], Options::default()).await;
    let ds = p.upload(LONGLEY).await;
    let params = json!({"seconds": 30, "checkpoint_every_s": 0.2});
    let id = p.submit(json!({"method": "diag.sleep", "dataset": ds, "params": params, "timeout_s": 1})).await;
    let run = p.wait_final(&id).await;
    assert_eq!(transitions(&run), with_start(&[("running", "partial", "checkpoint_flushed")]));
    assert!(run["progress"]["checkpoint"].as_i64().is_some(), "the checkpoint event arrived: {run:#}");
}

async fn sigterm_with_a_checkpoint_ends_partial(b: Backend) {
    let p = start(b, &[], Options::default()).await;
    let ds = p.upload(LONGLEY).await;
    let params = json!({"seconds": 60, "checkpoint_every_s": 0.2});
    let id = p.submit(json!({"method": "diag.sleep", "dataset": ds, "params": params})).await;
    p.wait_run(&id, Duration::from_secs(30), |r| r["progress"]["checkpoint"].is_i64()).await;
    // The cancel reaches the worker as SIGTERM from the execution host.
    assert_eq!(p.cancel(p.token(), &id).await.0, 202);
    let run = p.wait_final(&id).await;
    assert_eq!(
        transitions(&run),
        with_start(&[
            ("running", "cancelling", "cancel_requested"),
            ("cancelling", "partial", "checkpoint_flushed")
        ])
    );
}

async fn out_of_memory_retries_once_on_the_next_class(b: Backend) {
    let p = start(b, &[("MAPI_LOCAL_MEMORY_MIB", "S=64,M=1024")], Options::default()).await;
    let ds = p.upload(LONGLEY).await;
    let id =
        p.submit(json!({"method": "diag.alloc", "dataset": ds, "params": {"mib": 160, "hold_s": 0.5}})).await;
    let run = p.wait_final(&id).await;
    assert_eq!(transitions(&run), retried_once("resource_exhausted", ("running", "succeeded", "completed")));
    let attempts = run["attempts"].as_array().expect("attempts");
    let classes: Vec<&str> = attempts.iter().map(|a| a["class"].as_str().unwrap_or_default()).collect();
    assert_eq!(classes, ["S", "M"]);
    assert_eq!(attempts[0]["status"]["exit_code"], 137);
    assert!(attempts.iter().all(|a| a["charge"]["amount_micros"].is_i64()), "both attempts are metered");
    assert_eq!((run["class"].as_str(), run["requested_class"].as_str()), (Some("M"), Some("S")));
}

async fn a_second_out_of_memory_fails_the_run(b: Backend) {
    let p = start(b, &[("MAPI_LOCAL_MEMORY_MIB", "S=64,M=64")], Options::default()).await;
    let ds = p.upload(LONGLEY).await;
    let id =
        p.submit(json!({"method": "diag.alloc", "dataset": ds, "params": {"mib": 160, "hold_s": 0.5}})).await;
    let run = p.wait_final(&id).await;
    let t = transitions(&run);
    assert_eq!(t.last(), Some(&("running".into(), "failed".into(), "resource_exhausted".into())), "{t:?}");
    assert_eq!(run["attempts"].as_array().map(Vec::len), Some(2));
    assert_eq!(final_error(&run).0, "RESOURCE_EXHAUSTED");
}

async fn a_fan_out_runs_every_task_in_one_execution(b: Backend) {
    let p = start(b, &[], Options::default()).await;
    let ds = p.upload(LONGLEY).await;
    let id = p.submit(json!({"method": "describe", "dataset": ds, "tasks": 3})).await;
    let run = p.wait_final(&id).await;
    assert_eq!(transitions(&run), with_start(&[("running", "succeeded", "completed")]));
    assert_eq!(run["progress"]["task_count"], 3, "{run:#}");
    let names: Vec<&str> =
        run["outputs"].as_array().expect("outputs").iter().filter_map(|o| o["name"].as_str()).collect();
    for task in ["0/", "1/", "2/"] {
        assert!(names.iter().any(|n| n.starts_with(task)), "task {task} wrote its outputs: {names:?}");
    }
    assert_eq!(run["attempts"][0]["charge"]["tasks"], 3, "every task is metered: {run:#}");
    if let Some(fake) = &p.fake {
        assert_eq!(fake.executions().len(), 1, "the tasks of one execution");
    }
}

async fn a_cancel_stops_every_task_of_a_fan_out(b: Backend) {
    let p = start(b, &[], Options::default()).await;
    let ds = p.upload(LONGLEY).await;
    let id =
        p.submit(json!({"method": "diag.sleep", "dataset": ds, "params": {"seconds": 60}, "tasks": 2})).await;
    p.wait_run(&id, Duration::from_secs(30), |r| r["progress"]["started"] == true).await;
    assert_eq!(p.cancel(p.token(), &id).await.0, 202);
    let run = p.wait_final(&id).await;
    assert_eq!(
        transitions(&run),
        with_start(&[
            ("running", "cancelling", "cancel_requested"),
            ("cancelling", "cancelled", "cancel_confirmed")
        ])
    );
}

/// What the execution printed is read through the API a page at a time, the worker's events
/// among it, and bad paging is answered in words.
async fn a_runs_logs_are_read_page_by_page(b: Backend) {
    let p = start(b, &[], Options::default()).await;
    let ds = p.upload(LONGLEY).await;
    let id = p.submit(json!({"method": "diag.fail", "dataset": ds, "params": {"message": "no rows"}})).await;
    assert_eq!(p.wait_final(&id).await["state"], "failed");
    let logs = |query: &str| {
        let path = format!("/v1/runs/{id}/logs{query}");
        let p = &p;
        async move { p.call(p.token(), reqwest::Method::GET, &path, None).await }
    };
    let (status, whole) = logs("").await;
    assert_eq!(status, 200, "{whole:#}");
    assert_eq!((whole["attempt"].as_u64(), whole["finished"].as_bool()), (Some(1), Some(true)));
    let texts: Vec<&str> =
        whole["lines"].as_array().expect("lines").iter().filter_map(|l| l["text"].as_str()).collect();
    let kinds: Vec<String> = texts
        .iter()
        .filter_map(|t| serde_json::from_str::<Value>(t).ok())
        .filter_map(|v| v["mapi_event"]["kind"].as_str().map(str::to_owned))
        .collect();
    assert!(kinds.starts_with(&["started".to_owned()]) && kinds.contains(&"error".to_owned()), "{kinds:?}");
    assert!(texts.iter().any(|t| t.contains("no rows")), "the method's message is in its output");

    // One line a page reads the same lines.
    let (mut cursor, mut paged) = (String::new(), Vec::new());
    for _ in 0..=texts.len() {
        let (status, page) = logs(&format!("?limit=1&cursor={}", encoded(&cursor))).await;
        assert_eq!(status, 200, "{page:#}");
        paged.extend(page["lines"].as_array().expect("lines").iter().map(|l| l["text"].clone()));
        cursor = page["cursor"].as_str().expect("cursor").to_owned();
        if page["more"] != true {
            break;
        }
    }
    assert_eq!(
        paged,
        whole["lines"].as_array().expect("lines").iter().map(|l| l["text"].clone()).collect::<Vec<_>>()
    );

    let (status, bad) = logs("?cursor=nonsense%21").await;
    assert_eq!((status, bad["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{bad:#}");
    assert!(bad["detail"].as_str().unwrap_or_default().contains("cursor"), "{bad:#}");
    let (status, bad) = logs("?limit=0").await;
    assert_eq!(status, 400, "{bad:#}");
    let (status, none) = logs("?attempt=2").await;
    assert_eq!(status, 404, "{none:#}");
    assert!(none["detail"].as_str().unwrap_or_default().contains("attempts are 1 to 1"), "{none:#}");
}

/// `s` as a query value: every byte but unreserved ones percent-encoded.
fn encoded(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

macro_rules! on_backend {
    ($backend:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                super::$case($backend).await;
            }
        )+
    };
}

macro_rules! run_conformance {
    ($backend:expr) => {
        on_backend!($backend; a_linear_fit_succeeds_with_outputs_and_cost, a_method_error_fails_the_run_with_its_message, cancel_while_running_is_confirmed_before_cancelled, a_silent_run_is_stalled_not_lost, an_output_replaced_after_it_was_written_is_detected, a_queued_run_is_cancelled_at_once, a_run_past_its_timeout_fails_with_timeout, a_timeout_after_a_checkpoint_ends_partial, sigterm_with_a_checkpoint_ends_partial, out_of_memory_retries_once_on_the_next_class, a_second_out_of_memory_fails_the_run, a_fan_out_runs_every_task_in_one_execution, a_cancel_stops_every_task_of_a_fan_out, a_runs_logs_are_read_page_by_page);
    };
}

mod local_process {
    run_conformance!(mapi_tests::backend::Backend::LocalProcess);
}

mod gvisor {
    run_conformance!(mapi_tests::backend::Backend::Gvisor);
}

mod cloudrun_jobs {
    run_conformance!(mapi_tests::backend::Backend::CloudRunJobs);
}
