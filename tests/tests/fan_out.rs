//! Fan-out parents end to end: a backtest's and a calibration's children
//! are the tasks of one execution, listed with their states in the run's
//! view (each naming its parent), their costs summing to the run's, and the
//! run's own outputs folded from what they wrote once all succeeded. The
//! fold's numbers are held against the reference computation in Python
//! (`forecast.aggregate`, itself tested against numpy).

use mapi_tests::TestPlatform;
use mapi_tests::backend::{Backend, start};
use reqwest::Method;
use serde_json::{Value, json};

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");

fn example(name: &str) -> String {
    std::fs::read_to_string(format!("{EXAMPLES}/{name}")).expect(name)
}

async fn run(p: &TestPlatform, csv: &str, method: &str, params: Value) -> Value {
    let ds = p.upload(csv).await;
    let body = json!({"method": method, "dataset": ds, "params": params, "timeout_s": 300});
    let (s, made) = p.call(p.token(), Method::POST, &format!("{}/runs", p.project_path()), Some(body)).await;
    assert_eq!(s, 201, "{method}: {made}");
    assert_eq!(made["tasks"], made["params"][if method == "sbc" { "simulations" } else { "origins" }]);
    p.wait_final(made["id"].as_str().expect("id")).await
}

async fn fetch(p: &TestPlatform, run: &Value, name: &str) -> String {
    let out = run["outputs"]
        .as_array()
        .and_then(|o| o.iter().find(|x| x["name"] == name))
        .unwrap_or_else(|| panic!("{name}: {run:#}"));
    p.output(out["url"].as_str().expect("url")).await.text().await.expect("text")
}

/// The children of a finished run: all listed, all in `state`, each naming
/// the run; their charges sum to the run's.
async fn check_children(p: &TestPlatform, run: &Value, state: &str) {
    let children = run["children"].as_array().expect("children");
    assert_eq!(children.len() as u64, run["tasks"].as_u64().expect("tasks"), "{run:#}");
    let mut sum = 0;
    for (i, c) in children.iter().enumerate() {
        assert_eq!((c["index"].as_u64(), c["state"].as_str()), (Some(i as u64), Some(state)), "{c}");
        assert_eq!(c["parent"], run["id"]);
        sum += c["charged_micros"].as_i64().expect("charge");
    }
    assert_eq!(sum, run["cost"]["charged_micros"].as_i64().expect("charged"), "{run:#}");
    let id = run["id"].as_str().expect("id");
    let (s, child) = p.call(p.token(), Method::GET, &format!("/v1/runs/{id}/children/1"), None).await;
    assert_eq!((s, &child), (200, &children[1]));
    let (s, none) = p.call(p.token(), Method::GET, &format!("/v1/runs/{id}/children/999"), None).await;
    assert_eq!(s, 404, "{none}");
}

/// The airline model backtested over 8 origins, 12 steps ahead: every child
/// succeeds, and the run's accuracy per step is what the reference
/// aggregation computes from the children's errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backtest_folds_its_origins_into_accuracy_per_step() {
    let p = start(Backend::LocalProcess, &[], mapi_tests::Options::default()).await;
    let params = json!({"y": "passengers", "time": "month", "method": "arima", "p": 0, "d": 1, "q": 1,
                        "P": 0, "D": 1, "Q": 1, "seasonal_periods": 12, "log": true,
                        "origins": 8, "horizon": 12, "step": 3});
    let done = run(&p, &example("airline_passengers.csv"), "ts.backtest", params).await;
    assert_eq!(done["state"], "succeeded", "{done:#}");
    check_children(&p, &done, "succeeded").await;
    let mut children = Vec::new();
    for i in 0..8 {
        let text = fetch(&p, &done, &format!("{i}/errors.json")).await;
        children.push(serde_json::from_str::<Value>(&text).expect("json"));
    }
    let folded: Value = serde_json::from_str(&fetch(&p, &done, "backtest.json").await).expect("json");
    let csv = fetch(&p, &done, "backtest.csv").await;
    assert!(csv.starts_with("step,n,mean_error,mae,rmse,mape\n1,8,"), "{csv}");
    assert_eq!(csv.lines().count(), 14, "{csv}");

    let reference = std::process::Command::new("/usr/bin/python3")
        .args(["-c", REFERENCE, &serde_json::to_string(&children).expect("json")])
        .env("PYTHONPATH", concat!(env!("CARGO_MANIFEST_DIR"), "/../worker/python/methods"))
        .output()
        .expect("python3");
    assert!(reference.status.success(), "{}", String::from_utf8_lossy(&reference.stderr));
    let reference: Value = serde_json::from_slice(&reference.stdout).expect("json");
    for (got, want) in folded["per_step"]
        .as_array()
        .expect("steps")
        .iter()
        .zip(reference["per_step"].as_array().expect("steps"))
    {
        assert_eq!(got["n"], want["n"]);
        for m in ["mean_error", "mae", "rmse", "mape"] {
            let (g, w) = (got[m].as_f64().expect("number"), want[m].as_f64().expect("number"));
            assert!((g - w).abs() <= 1e-12 * w.abs().max(1.0), "{m}: {g} vs {w}");
        }
    }
    let metrics = &done["aggregate"]["metrics"];
    let want = reference["overall"]["rmse"].as_f64().expect("rmse");
    assert!((metrics["rmse"].as_f64().expect("rmse") - want).abs() <= 1e-12 * want, "{metrics}");
    // The last origin forecasts the series' last 12 months.
    assert_eq!(children[7]["origin"].as_u64(), Some(144 - 12));
}

/// The reference: the Python aggregation the backtest's tests check against numpy.
const REFERENCE: &str = r#"
import json, sys
import forecast
print(json.dumps(forecast.aggregate(json.loads(sys.argv[1]))))
"#;

/// A calibration of an exact posterior: its ranks pass the uniformity test;
/// of an over-confident one (half the spread): they fail it. A child that
/// cannot run fails the run, and the children that completed say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sbc_passes_an_exact_posterior_and_flags_an_overconfident_one() {
    let p = start(Backend::LocalProcess, &[], mapi_tests::Options::default()).await;
    let design =
        "x1,x2\n".to_owned() + &(0..30).map(|i| format!("{},{}\n", i % 7, (i * 5) % 11)).collect::<String>();
    let exact = json!({"model": "linear_regression", "x": ["x1", "x2"], "simulations": 24, "seed": 5});
    let good = run(&p, &design, "sbc", exact).await;
    assert_eq!(good["state"], "succeeded", "{good:#}");
    check_children(&p, &good, "succeeded").await;
    let sbc: Value = serde_json::from_str(&fetch(&p, &good, "sbc.json").await).expect("json");
    for name in ["intercept", "x1", "x2", "sigma"] {
        let param = &sbc["parameters"][name];
        assert_eq!(
            param["counts"].as_array().map(|c| c.iter().filter_map(Value::as_u64).sum::<u64>()),
            Some(24)
        );
        assert!(param["p_value"].as_f64().expect("p") > 1e-3, "{name}: {param}");
    }
    assert!(fetch(&p, &good, "ranks.svg").await.starts_with("<svg"));
    assert_eq!(fetch(&p, &good, "ranks.csv").await.lines().count(), 25);

    let over = json!({"model": "normal_mean", "simulations": 40, "posterior_scale": 0.3, "seed": 5});
    let bad = run(&p, &design, "sbc", over).await;
    assert_eq!(bad["state"], "succeeded", "{bad:#}");
    let p_mu = bad["aggregate"]["metrics"]["p_value_mu"].as_f64().expect("p");
    assert!(p_mu < 1e-4, "an over-confident posterior passed: {bad:#}");

    let wrong = json!({"model": "linear_regression", "x": ["nope"], "simulations": 3});
    let ds = p.upload(&design).await;
    let body = json!({"method": "sbc", "dataset": ds, "params": wrong});
    let (s, refused) =
        p.call(p.token(), Method::POST, &format!("{}/runs", p.project_path()), Some(body)).await;
    assert_eq!(s, 400, "a missing column is refused at submit: {refused}");
    let body = json!({"method": "sbc", "dataset": ds, "params": {"simulations": 3}, "tasks": 5});
    let (s, refused) =
        p.call(p.token(), Method::POST, &format!("{}/runs", p.project_path()), Some(body)).await;
    assert_eq!(s, 400, "{refused}");
    assert!(refused["detail"].as_str().unwrap_or_default().contains("parameter `simulations`"), "{refused}");
}

/// A backtest whose later origins fit on a value the model cannot take
/// (a zero under a log transform) fails: the earlier children succeeded,
/// the later ones did not, and the error names the origin. Its retry does
/// not refit the child that succeeded: it takes the results it wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backtest_with_a_bad_origin_fails_naming_it() {
    let p = start(Backend::LocalProcess, &[], mapi_tests::Options::default()).await;
    let mut lines: Vec<String> = example("airline_passengers.csv").lines().map(str::to_owned).collect();
    // Row 130 (0-based data row 129) becomes 0: origins fitted on more than 129 observations fail.
    let (month, _) = lines[130].split_once(',').expect("row").to_owned();
    lines[130] = format!("{month},0");
    let csv = lines.join("\n") + "\n";
    let params = json!({"y": "passengers", "time": "month", "method": "arima", "p": 0, "d": 1, "q": 1,
                        "P": 0, "D": 1, "Q": 1, "seasonal_periods": 12, "log": true,
                        "origins": 4, "horizon": 6, "step": 4});
    let done = run(&p, &csv, "ts.backtest", params).await;
    assert_eq!(done["state"], "failed", "{done:#}");
    let states: Vec<&str> =
        done["children"].as_array().expect("children").iter().filter_map(|c| c["state"].as_str()).collect();
    // Origins fit on 126, 130, 134, 138 observations: only the first avoids the zero.
    assert_eq!(states[0], "succeeded", "{done:#}");
    assert!(states[1..].iter().all(|s| *s == "failed"), "{states:?}");
    let error = done["error"]["message"].as_str().unwrap_or_default();
    assert!(error.contains("origin") && error.contains("log"), "{done:#}");
    assert!(done["children"].as_array().expect("children").iter().all(|c| c["reused"] == false));

    let id = done["id"].as_str().expect("id");
    let (s, retry) = p.call(p.token(), Method::POST, &format!("/v1/runs/{id}/retry"), None).await;
    assert_eq!(s, 201, "{retry}");
    let again = p.wait_final(retry["id"].as_str().expect("id")).await;
    assert_eq!(again["state"], "failed", "{again:#}");
    let first = &again["children"][0];
    assert_eq!(
        (first["state"].as_str(), first["reused"].as_bool()),
        (Some("succeeded"), Some(true)),
        "{again:#}"
    );
    assert!(again["children"].as_array().expect("children")[1..].iter().all(|c| c["reused"] == false));
    // What the retry's child 0 holds is, byte for byte, what the first run's wrote.
    let (s, before) = p.call(p.token(), Method::GET, &format!("/v1/runs/{id}/children/0"), None).await;
    assert_eq!((s, before["state"].as_str()), (200, Some("succeeded")));
    let (a, b) = (
        attempt_output(&p, &done, 0, "errors.json").await,
        attempt_output(&p, &again, 0, "errors.json").await,
    );
    assert_eq!(a, b, "the reused result differs");
    // Its task said where its results came from, and fitted nothing.
    let retried = again["id"].as_str().expect("id");
    let (s, logs) = p.call(p.token(), Method::GET, &format!("/v1/runs/{retried}/logs"), None).await;
    assert_eq!(s, 200, "{logs}");
    let task0: Vec<&str> = logs["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .filter(|l| l["task"] == 0)
        .filter_map(|l| l["text"].as_str())
        .collect();
    let took = format!("took the results of run {id} attempt 1");
    assert!(task0.iter().any(|t| t.contains(&took)), "{task0:#?}");
    assert!(!task0.iter().any(|t| t.contains("fitting on")), "child 0 fitted again: {task0:#?}");
}

/// An output of a failed run's child, read from the platform's object
/// store (a failed run's view lists no outputs).
async fn attempt_output(p: &TestPlatform, run: &Value, child: u32, name: &str) -> Vec<u8> {
    let field = |k: &str| run[k].as_str().unwrap_or_else(|| panic!("{k}: {run:#}")).to_owned();
    let attempt = run["attempt"].as_u64().expect("attempt");
    let key = format!(
        "t/{}/p/{}/runs/{}/a{attempt}/tasks/{child}/outputs/{name}",
        field("tenant"),
        field("project"),
        field("id")
    );
    let key = mapi_objects::ObjectKey::parse(&key).expect("key");
    p.platform.state.objects.get(&key, None).await.unwrap_or_else(|e| panic!("{key}: {e}")).1.to_vec()
}

/// Cancelling a fan-out parent cancels its children: its execution stops,
/// the children that had completed stay succeeded, every other is
/// cancelled, and their cost shares still sum to the run's charge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_backtest_cancels_its_children() {
    let p = start(Backend::LocalProcess, &[], mapi_tests::Options::default()).await;
    let ds = p.upload(&example("airline_passengers.csv")).await;
    let params = json!({"y": "passengers", "time": "month", "method": "ets", "seasonal_periods": 12,
                        "origins": 30, "horizon": 12});
    let body = json!({"method": "ts.backtest", "dataset": ds, "params": params, "timeout_s": 300});
    let (s, made) = p.call(p.token(), Method::POST, &format!("{}/runs", p.project_path()), Some(body)).await;
    assert_eq!(s, 201, "{made}");
    let id = made["id"].as_str().expect("id");
    p.wait_run(id, std::time::Duration::from_secs(60), |r| r["state"] == "running").await;
    let (s, asked) = p.cancel(p.token(), id).await;
    assert!(s == 200 || s == 202, "{s}: {asked}");
    let done = p.wait_final(id).await;
    assert_eq!(done["state"], "cancelled", "{done:#}");
    let children = done["children"].as_array().expect("children");
    assert_eq!(children.len(), 30);
    let cancelled = children.iter().filter(|c| c["state"] == "cancelled").count();
    let succeeded = children.iter().filter(|c| c["state"] == "succeeded").count();
    assert_eq!(cancelled + succeeded, 30, "none is left pending or running: {done:#}");
    assert!(cancelled > 0, "30 children on this machine outlast the cancel: {done:#}");
    let sum: i64 = children.iter().filter_map(|c| c["charged_micros"].as_i64()).sum();
    assert_eq!(sum, done["cost"]["charged_micros"].as_i64().expect("charged"), "{done:#}");
}
