//! Data residency in placement: a tenant's runs go only to an executor with
//! a region its residency admits. A submit no region here can take is
//! refused in words before anything is charged; a change of residency
//! applies to new runs only; a run stored under a residency the executor
//! cannot serve is failed at dispatch, naming what it needs.

use std::sync::Arc;

use mapi_domain::{AttemptNo, RunId};
use mapi_executor::scripted::ScriptedExecutor;
use mapi_lifecycle::RunDoc;
use mapi_tests::TestPlatform;
use reqwest::Method;
use serde_json::json;

async fn platform() -> TestPlatform {
    let executor = Arc::new(ScriptedExecutor::in_regions(&["europe-west1"]));
    let options = mapi_tests::Options { background: false, executor: Some(executor), ..Default::default() };
    TestPlatform::start_with(&[], options).await
}

fn fit(dataset: &str) -> serde_json::Value {
    json!({"method": "tabular.linear", "dataset": dataset, "params": {"y": "y"}, "class": "S", "timeout_s": 600})
}

async fn set_residency(p: &TestPlatform, operator: &str, residency: &str) {
    let body = json!({"residency": residency});
    let (s, b) = p.call(operator, Method::PATCH, "/v1/admin/tenants/dev", Some(body)).await;
    assert_eq!((s, b["residency"].as_str()), (200, Some(residency)), "{b}");
}

#[tokio::test]
async fn runs_go_only_to_an_executor_in_a_region_the_residency_admits() {
    let p = platform().await;
    let operator = p.login("admin@dev.local").await;
    let dataset = p.upload("x,y\n1,2\n2,4\n3,7\n").await;
    let (_, executors) = p.call(&operator, Method::GET, "/v1/admin/executors", None).await;
    assert_eq!(executors[0]["capabilities"]["regions"], json!(["europe-west1"]), "{executors}");

    // The dev tenant is `eu`: europe-west1 takes its run.
    let queued = p.submit(fit(&dataset)).await;
    let eu_run = RunId::parse(&queued).expect("run id");

    // Moved to `us`: a new run has nowhere to go and is refused, saying
    // what it needs; nothing is queued or charged for it.
    set_residency(&p, &operator, "us").await;
    let runs = format!("{}/runs", p.project_path());
    let (s, problem) = p.call(p.token(), Method::POST, &runs, Some(fit(&dataset))).await;
    assert_eq!((s, problem["code"].as_str()), (409, Some("FAILED_PRECONDITION")), "{problem}");
    let detail = problem["detail"].as_str().unwrap_or_default();
    for words in ["residency is us", "a region in the US (us-…)", "runs in europe-west1"] {
        assert!(detail.contains(words), "{words:?} in {detail}");
    }
    let (_, listed) = p.call(p.token(), Method::GET, &runs, None).await;
    assert_eq!(listed["runs"].as_array().map(Vec::len), Some(1), "{listed}");

    // The run asked under `eu` keeps it: it is placed on europe-west1.
    let (s, b) = p.dispatch(&eu_run, AttemptNo::FIRST).await;
    assert_eq!((s, b["outcome"].as_str()), (200, Some("submitted")), "{b}");

    // One region by name admits exactly that region.
    set_residency(&p, &operator, "europe-west1").await;
    assert_eq!(p.run(&p.submit(fit(&dataset)).await).await["state"], "queued");
    set_residency(&p, &operator, "europe-west4").await;
    let (s, problem) = p.call(p.token(), Method::POST, &runs, Some(fit(&dataset))).await;
    assert_eq!(s, 409, "{problem}");
    assert!(problem["detail"].as_str().unwrap_or_default().contains("the region europe-west4"), "{problem}");
}

#[tokio::test]
async fn a_stored_run_the_executor_cannot_serve_fails_at_dispatch_naming_what_it_needs() {
    let p = platform().await;
    let dataset = p.upload("x,y\n1,2\n2,4\n3,7\n").await;
    let id = p.submit(fit(&dataset)).await;
    // As if the executor had moved out of the run's area after it was asked.
    let store = &*p.platform.state.store;
    let run: RunDoc = mapi_schema::get(store, &id).await.expect("read").expect("the run");
    let mut doc = serde_json::to_value(&run).expect("json");
    doc["residency"] = json!("asia");
    let moved: RunDoc = serde_json::from_value(doc).expect("a run");
    mapi_schema::put(store, &moved).await.expect("write");

    let run_id = RunId::parse(&id).expect("run id");
    let (s, b) = p.dispatch(&run_id, AttemptNo::FIRST).await;
    assert_eq!((s, b["outcome"].as_str()), (200, Some("refused by placement")), "{b}");
    let failed = p.run(&id).await;
    assert_eq!(failed["state"], "failed", "{failed}");
    let text = failed["error"].to_string();
    assert!(text.contains("a region in Asia (asia-…)") && text.contains("europe-west1"), "{failed}");
}
