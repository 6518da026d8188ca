//! The GPU class on one machine, end to end: a `dl.cnn_classifier` run of
//! class GPU on the local-process executor of a machine without a GPU runs on
//! the CPU with the warning `GPU_UNAVAILABLE` and `dl.backend` recorded as
//! `cpu`, is charged the class's vCPUs and memory and no accelerator time,
//! and its model scores through an endpoint; a public-tier tenant's GPU
//! submit is refused naming `max_resource_class`; a run stopped mid-training
//! flushes its checkpoint (`partial`), and its retry resumes from it.
//!
//! They hold the CPU path (`MAPI_LOCAL_GPUS=0`, whatever the machine has);
//! `benches/gpu-check.sh` checks the GPU path where a GPU is visible.

use std::time::Duration;

use mapi_tests::TestPlatform;
use mapi_tests::backend::{Backend, start};
use reqwest::Method;
use serde_json::{Value, json};

const DIGITS: &str = include_str!("../../examples/digits.csv");

async fn submit(p: &TestPlatform, token: &str, project: &str, body: Value) -> (u16, Value) {
    p.call(token, Method::POST, &format!("{project}/runs"), Some(body)).await
}

fn output<'a>(run: &'a Value, name: &str) -> &'a Value {
    run["outputs"]
        .as_array()
        .and_then(|o| o.iter().find(|x| x["name"] == name))
        .unwrap_or_else(|| panic!("{name}: {run:#}"))
}

async fn metrics_json(p: &TestPlatform, run: &Value) -> Value {
    p.output(output(run, "metrics.json")["url"].as_str().expect("url")).await.json().await.expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_run_without_a_gpu_runs_on_the_cpu_warned_charged_no_accelerator_and_serves() {
    let accounts = ("MAPI_DEV_ACCOUNTS", "admin@dev.local,dev@dev.local,owner@pub.test");
    // As on a machine without a GPU, whatever this one has.
    let env = [accounts, ("MAPI_LOCAL_GPUS", "0"), ("MAPI_WEBHOOKS_ALLOW_LOOPBACK", "true")];
    let p = start(Backend::LocalProcess, &env, mapi_tests::Options::default()).await;
    assert_eq!(p.platform.platform.state.executor.capabilities().gpus, 0);
    // A webhook told of runs that succeed (its receiver is not there: the message is logged all the same).
    let hook = json!({"url": "http://127.0.0.1:1/", "events": ["run.succeeded"]});
    let (s, hook) =
        p.call(p.token(), Method::POST, &format!("{}/webhooks", p.project_path()), Some(hook)).await;
    assert_eq!(s, 201, "{hook}");
    let ds = p.upload(DIGITS).await;
    let params = json!({"y": "digit", "epochs": 3});
    let body = json!({"method": "dl.cnn_classifier", "dataset": ds, "class": "GPU", "params": params});
    let (s, made) = submit(&p, p.token(), &p.project_path(), body).await;
    assert_eq!(s, 201, "{made}");
    // The estimate is the class for its whole timeout, accelerator included.
    let timeout = Duration::from_secs(made["timeout_s"].as_u64().expect("timeout"));
    let estimate = mapi_cost::CURRENT.charge(mapi_domain::ResourceClass::GPU, 1, timeout);
    assert!(estimate.accelerator_ms > 0);
    assert_eq!(made["cost"]["estimate_micros"], estimate.amount_micros, "{made}");

    let run = p.wait_final(made["id"].as_str().expect("id")).await;
    assert_eq!(run["state"], "succeeded", "{run:#}");
    assert_eq!(run["params"]["dl.backend"], "cpu", "the backend used is recorded");
    let [warning] = run["warnings"].as_array().expect("warnings").as_slice() else {
        panic!("one warning: {run:#}")
    };
    assert_eq!((warning["code"].as_str(), warning["attempt"].as_u64()), (Some("GPU_UNAVAILABLE"), Some(1)));
    // The webhook's data and the console's page say so too.
    let deliveries = format!("{}/webhooks/{}/deliveries", p.project_path(), hook["id"].as_str().expect("id"));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let message = loop {
        let (_, page) = p.call(p.token(), Method::GET, &deliveries, None).await;
        let found = page["deliveries"]
            .as_array()
            .and_then(|l| l.iter().find(|m| m["event"] == "run.succeeded").cloned());
        if let Some(m) = found {
            break m;
        }
        assert!(std::time::Instant::now() < deadline, "no run.succeeded message: {page:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let data = &message["payload"]["data"]["run"];
    assert_eq!(
        (data["class"].as_str(), data["warnings"][0]["code"].as_str()),
        (Some("GPU"), Some("GPU_UNAVAILABLE")),
        "{message:#}"
    );
    let cookie = format!("mapi_console={}", p.console_session("dev@dev.local").await);
    let id = run["id"].as_str().expect("id");
    let page = p
        .http
        .get(p.url(&format!("/console/runs/{id}")))
        .header("cookie", cookie)
        .send()
        .await
        .expect("page");
    let html = page.text().await.expect("html");
    assert!(html.contains("GPU_UNAVAILABLE") && html.contains("Backend: cpu"), "{html}");

    let metrics = metrics_json(&p, &run).await;
    assert_eq!(
        (metrics["backend"].as_str(), metrics["history"].as_array().map(Vec::len)),
        (Some("cpu"), Some(3))
    );
    assert!(metrics["holdout_accuracy"].as_f64().is_some_and(|a| a > 0.8), "{metrics}");

    // Charged: 8 vCPUs and 32 GiB for the attempt's wall time, zero GPUs, no accelerator-seconds.
    let attempt = &run["attempts"][0];
    let charge = &attempt["charge"];
    assert_eq!((attempt["gpus"].as_u64(), charge["gpus"].as_u64()), (Some(0), Some(0)), "{attempt:#}");
    let wall = charge["wall_ms"].as_u64().expect("wall");
    assert!(wall > 0, "{charge}");
    assert_eq!(charge["accelerator_ms"], 0, "{charge}");
    assert_eq!((charge["vcpu_ms"].as_u64(), charge["gib_ms"].as_u64()), (Some(8 * wall), Some(32 * wall)));
    let on_cpu =
        mapi_cost::CURRENT.charge_used(mapi_domain::ResourceClass::GPU, 0, 1, Duration::from_millis(wall));
    assert_eq!(charge["amount_micros"], on_cpu.amount_micros, "{charge}");
    assert_eq!(run["cost"]["charged_micros"], on_cpu.amount_micros);

    // The model scores through an endpoint (the model server on the CPU too).
    let version = run["model_version"].as_str().expect("a model version");
    let endpoints = format!("{}/endpoints", p.project_path());
    let (s, e) = p
        .call(p.token(), Method::POST, &endpoints, Some(json!({"alias": "digits", "model_version": version})))
        .await;
    assert_eq!(s, 202, "{e}");
    let e = p.wait_endpoint("digits").await;
    assert_eq!(e["status"], "ready", "{e:#}");
    let rows: Vec<Value> = DIGITS
        .lines()
        .skip(1)
        .take(20)
        .map(|line| {
            let cells: Vec<f64> = line.split(',').map(|c| c.parse().expect("number")).collect();
            let pixels: serde_json::Map<String, Value> =
                (0..64).map(|i| (format!("p{i}"), json!(cells[i]))).collect();
            Value::Object(pixels)
        })
        .collect();
    let labels: Vec<i64> = DIGITS
        .lines()
        .skip(1)
        .take(20)
        .map(|l| l.rsplit(',').next().expect("digit").parse().expect("int"))
        .collect();
    let (s, scored) = p
        .call(p.token(), Method::POST, &format!("{endpoints}/digits:score"), Some(json!({"rows": rows})))
        .await;
    assert_eq!(s, 200, "{scored}");
    let predictions = scored["predictions"].as_array().expect("predictions");
    assert_eq!(predictions.len(), 20);
    let right =
        predictions.iter().zip(&labels).filter(|(p, l)| p["value"]["class"].as_i64() == Some(**l)).count();
    assert!(right >= 16, "{right} of 20 digits scored right after 3 epochs: {scored}");

    // A public-tier tenant stops at class S: its GPU submit is refused naming the limit.
    let operator = p.login("admin@dev.local").await;
    let public = p.create_tenant(&operator, "pub", "public").await;
    let ds = p.upload_as(&public, "/v1/tenants/pub/projects/default", DIGITS).await;
    let body =
        json!({"method": "dl.cnn_classifier", "dataset": ds, "class": "GPU", "params": {"y": "digit"}});
    let (s, refused) = submit(&p, &public, "/v1/tenants/pub/projects/default", body).await;
    assert_eq!((s, refused["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{refused}");
    assert!(refused["detail"].as_str().is_some_and(|d| d.contains("max_resource_class")), "{refused}");
    // And `gpu` on a class without one is refused at submit, naming the parameter.
    let body =
        json!({"method": "dl.mlp_classifier", "dataset": ds, "params": {"y": "digit", "dl.backend": "gpu"}});
    let (s, bad) = submit(&p, &public, "/v1/tenants/pub/projects/default", body).await;
    assert_eq!((s, bad["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{bad}");
    assert!(
        bad["detail"].as_str().is_some_and(|d| d.contains("dl.backend") && d.contains("class GPU")),
        "{bad}"
    );

    // An L4 endpoint is the GPU class under the same limit: with this tenant's largest class
    // set to L, serving the model on an L4 is refused naming the limit, and nothing is made.
    let policy = json!({"max_resource_class": "L"});
    let (s, set) = p.call(&operator, Method::PUT, "/v1/admin/quotas/dev", Some(policy)).await;
    assert_eq!(s, 200, "{set}");
    let l4 = json!({"alias": "digits-l4", "model_version": version, "accelerator": "l4"});
    let (s, refused) = p.call(p.token(), Method::POST, &endpoints, Some(l4)).await;
    assert_eq!((s, refused["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{refused}");
    let detail = refused["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("max_resource_class is L and the endpoint's instances are GPU"), "{refused}");
    let (s, none) = p.call(p.token(), Method::GET, &format!("{endpoints}/digits-l4"), None).await;
    assert_eq!(s, 404, "nothing was made: {none}");
}

/// Cancelled mid-training, the method saves where it is and stops (exit 16:
/// `partial`); the run's retry resumes from that checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_run_flushes_its_checkpoint_and_its_retry_resumes_from_it() {
    let p = start(Backend::LocalProcess, &[], mapi_tests::Options::default()).await;
    let ds = p.upload(DIGITS).await;
    let params = json!({"y": "digit", "epochs": 400, "test_size": 0});
    let body = json!({"method": "dl.mlp_classifier", "dataset": ds, "params": params});
    let (s, made) = submit(&p, p.token(), &p.project_path(), body).await;
    assert_eq!(s, 201, "{made}");
    let id = made["id"].as_str().expect("id").to_owned();
    // Stop it once a few epochs are done.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let run = p.run(&id).await;
        let epoch = run["progress"]["metrics"]["epoch"].as_f64().unwrap_or(0.0);
        if epoch >= 3.0 {
            break;
        }
        assert!(
            run["state"] == "running" || run["state"] == "dispatching" || run["state"] == "queued",
            "{run:#}"
        );
        assert!(std::time::Instant::now() < deadline, "no epoch done: {run:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (s, c) = p.cancel(p.token(), &id).await;
    assert_eq!(s, 202, "{c}");
    let stopped = p.wait_final(&id).await;
    assert_eq!(stopped["state"], "partial", "the checkpoint was flushed: {stopped:#}");
    let last = stopped["history"].as_array().and_then(|h| h.last()).expect("history");
    assert_eq!(last["reason"], "checkpoint_flushed", "{stopped:#}");
    let stopped_at = stopped["progress"]["metrics"]["epoch"].as_f64().expect("epoch");

    let (s, retried) =
        p.call(p.token(), Method::POST, &format!("/v1/runs/{id}/retry"), Some(json!({}))).await;
    assert_eq!(s, 201, "{retried}");
    let run = p.wait_final(retried["id"].as_str().expect("id")).await;
    assert_eq!(run["state"], "succeeded", "{run:#}");
    let metrics = metrics_json(&p, &run).await;
    assert_eq!(metrics["resumed"], true, "{metrics}");
    let from = metrics["resumed_from_epoch"].as_f64().expect("resumed_from_epoch");
    assert!(from >= stopped_at, "resumed at epoch {from}, the stop had done {stopped_at}");
    assert_eq!(metrics["history"].as_array().map(Vec::len), Some(400), "the whole history, both attempts'");
}
