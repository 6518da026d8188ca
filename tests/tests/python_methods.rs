//! The platform's own Python methods (scikit-learn, statsmodels, scipy), end
//! to end: submitted like any method, run by the worker on the machine's
//! Python, their metrics reported as events, their outputs uploaded, their
//! models served by endpoints with their `predict`; and a machine whose
//! Python lacks a package they need lists them as unavailable and refuses
//! their submits, naming what to install. The numbers themselves are held
//! against the libraries called directly and published references by
//! `worker/python/tests` (run by `python_unit_tests` here).

use mapi_tests::TestPlatform;
use mapi_tests::backend::{Backend, start};
use reqwest::Method;
use serde_json::{Value, json};

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");

fn example(name: &str) -> String {
    std::fs::read_to_string(format!("{EXAMPLES}/{name}")).expect(name)
}

async fn fit(p: &TestPlatform, csv: &str, method: &str, params: Value) -> Value {
    let ds = p.upload(csv).await;
    let body = json!({"method": method, "dataset": ds, "params": params, "timeout_s": 300});
    let (s, made) = p.call(p.token(), Method::POST, &format!("{}/runs", p.project_path()), Some(body)).await;
    assert_eq!(s, 201, "{method}: {made}");
    p.wait_final(made["id"].as_str().expect("id")).await
}

fn output<'a>(run: &'a Value, name: &str) -> &'a Value {
    run["outputs"]
        .as_array()
        .and_then(|o| o.iter().find(|x| x["name"] == name))
        .unwrap_or_else(|| panic!("{name}: {run:#}"))
}

/// The logistic regression of the README: what scikit-learn fits called
/// directly, its ROC plot a PNG, its version served by an endpoint whose
/// scores are scikit-learn's probabilities.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_logistic_regression_fits_what_scikit_learn_fits_and_serves() {
    let p = start(Backend::LocalProcess, &[], mapi_tests::Options::default()).await;
    let csv = example("churn.csv");
    let run = fit(&p, &csv, "sklearn.logistic_regression", json!({"y": "churned", "cv_folds": 5})).await;
    assert_eq!(run["state"], "succeeded", "{run:#}");
    let metrics = &run["progress"]["metrics"];
    for m in ["accuracy", "log_loss", "roc_auc", "cv_accuracy_mean"] {
        assert!(metrics[m].as_f64().is_some(), "{m}: {metrics}");
    }
    let plot = p.output(output(&run, "plot.png")["url"].as_str().expect("url")).await;
    let png = plot.bytes().await.expect("png");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "plot.png is a PNG");
    let model: Value =
        p.output(output(&run, "model.json")["url"].as_str().expect("url")).await.json().await.expect("json");

    let direct = std::process::Command::new("/usr/bin/python3")
        .args(["-c", DIRECT, &format!("{EXAMPLES}/churn.csv")])
        .output()
        .expect("python3");
    assert!(direct.status.success(), "{}", String::from_utf8_lossy(&direct.stderr));
    let direct: Value = serde_json::from_slice(&direct.stdout).expect("json");
    let got = model["coefficients"][0].as_array().expect("coefficients");
    let want = direct["coefficients"].as_array().expect("coefficients");
    assert_eq!(got.len(), want.len(), "{model}");
    for (g, w) in got.iter().zip(want) {
        let (g, w) = (g.as_f64().expect("number"), w.as_f64().expect("number"));
        assert!((g - w).abs() <= 1e-9 * w.abs().max(1.0), "{g} vs scikit-learn's {w}");
    }
    assert!(
        (metrics["roc_auc"].as_f64().expect("auc") - direct["roc_auc"].as_f64().expect("auc")).abs() < 1e-12
    );

    let version = run["model_version"].as_str().expect("a model version");
    let endpoints = format!("{}/endpoints", p.project_path());
    let (s, e) = p
        .call(p.token(), Method::POST, &endpoints, Some(json!({"alias": "churn", "model_version": version})))
        .await;
    assert_eq!(s, 202, "{e}");
    let e = p.wait_endpoint("churn").await;
    assert_eq!(e["status"], "ready", "{e:#}");
    let rows = json!([{"tenure_months": 3, "monthly_charges": 95.0, "support_calls": 6},
                      {"tenure_months": 60, "monthly_charges": 20.0, "support_calls": 0}]);
    let (s, scored) = p
        .call(p.token(), Method::POST, &format!("{endpoints}/churn:score"), Some(json!({"rows": rows})))
        .await;
    assert_eq!(s, 200, "{scored}");
    let want = direct["probabilities"].as_array().expect("probabilities");
    for (i, w) in want.iter().enumerate() {
        let got = scored["predictions"][i]["value"]["probabilities"]["1"].as_f64().expect("probability");
        assert!((got - w.as_f64().expect("number")).abs() < 1e-9, "{got} vs {w}");
    }
    let (s, bad) = p
        .call(
            p.token(),
            Method::POST,
            &format!("{endpoints}/churn:score"),
            Some(json!({"rows": [{"tenure_months": 3}]})),
        )
        .await;
    assert_eq!((s, bad["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{bad}");
}

/// `sklearn.logistic_regression` as the method runs it (hold-out 0.25, stratified, seed 0, 5 folds).
const DIRECT: &str = r#"
import json, sys
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split
t = pd.read_csv(sys.argv[1])
y, x = t["churned"], t.drop(columns=["churned"])
a, b, ya, yb = train_test_split(x.to_numpy(dtype=float), y, test_size=0.25, random_state=0, stratify=y)
m = LogisticRegression(C=1.0, max_iter=1000).fit(a, ya)
rows = [[3, 95.0, 6], [60, 20.0, 0]]
print(json.dumps({"coefficients": m.coef_[0].tolist(), "roc_auc": roc_auc_score(yb, m.predict_proba(b)[:, 1]),
                  "probabilities": m.predict_proba(rows)[:, 1].tolist()}))
"#;

/// Every family runs through the platform on its shipped dataset: the
/// forecast (the airline model of Box and Jenkins, as R's `arima` example
/// fits it: ma1 −0.4018, sma1 −0.5569), the causal estimates, the
/// marketing-mix model, a NIST curve and the tree ensembles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_family_runs_on_its_dataset() {
    let p = start(Backend::LocalProcess, &[], mapi_tests::Options::default()).await;
    let airline = example("airline_passengers.csv");
    let arima = json!({"y": "passengers", "time": "month", "p": 0, "d": 1, "q": 1, "P": 0, "D": 1, "Q": 1,
                       "seasonal_periods": 12, "log": true, "horizon": 24});
    let cases = [
        (airline.clone(), "ts.arima", arima, "aic"),
        (
            airline,
            "ts.ets",
            json!({"y": "passengers", "time": "month", "seasonal_periods": 12, "seasonal": "mul"}),
            "aic",
        ),
        (
            example("did_panel.csv"),
            "causal.did",
            json!({"y": "y", "treated": "treated", "post": "post", "cluster": "unit"}),
            "did_estimate",
        ),
        (
            example("its_series.csv"),
            "causal.interrupted_time_series",
            json!({"y": "y", "time": "t", "intervention": "60"}),
            "level_change",
        ),
        (
            example("mmm.csv"),
            "mmm.adstock_saturation",
            json!({"y": "sales", "channels": ["tv", "radio", "online"], "time": "week"}),
            "r2",
        ),
        (
            example("misra1a.csv"),
            "sci.curve_fit",
            json!({"x": "x", "y": "y", "family": "exponential_association"}),
            "a",
        ),
        (
            example("iris.csv"),
            "sklearn.random_forest",
            json!({"y": "species", "n_estimators": 50}),
            "accuracy",
        ),
        (
            example("longley.csv"),
            "sklearn.gradient_boosting",
            json!({"y": "employed", "task": "regression", "test_size": 0.25}),
            "r2",
        ),
    ];
    let runs = futures::future::join_all(
        cases.iter().map(|(csv, method, params, _)| fit(&p, csv, method, params.clone())),
    )
    .await;
    for ((_, method, _, metric), run) in cases.iter().zip(&runs) {
        assert_eq!(run["state"], "succeeded", "{method}: {run:#}");
        assert!(run["progress"]["metrics"][metric].as_f64().is_some(), "{method}: {metric} in {run:#}");
        assert!(output(run, "plot.png")["size"].as_u64().unwrap_or(0) > 1000, "{method}: {run:#}");
    }
    // The airline model, as published (R's ?arima example, full ML): ma1 −0.4018, sma1 −0.5569.
    let coefficients = p.output(output(&runs[0], "coefficients.csv")["url"].as_str().expect("url")).await;
    let text = coefficients.text().await.expect("csv");
    let estimate = |name: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{name},")))
            .unwrap_or_else(|| panic!("{name}: {text}"));
        line.split(',').nth(1).expect("estimate").parse().expect("number")
    };
    assert!((estimate("ma.L1") + 0.4018).abs() < 5e-4, "{text}");
    assert!((estimate("ma.S.L12") + 0.5569).abs() < 1e-3, "{text}");
    // The NIST certified value of Misra1a's b1 (2.3894212918E+02), to six digits.
    let a = runs[5]["progress"]["metrics"]["a"].as_f64().expect("a");
    assert!((a / 238.94212918 - 1.0).abs() < 1e-6, "{a}");
    // A wrong column is a run error in words, not a traceback.
    let bad = fit(
        &p,
        &example("churn.csv"),
        "sci.curve_fit",
        json!({"x": "tenure_months", "y": "churned", "family": "cubic"}),
    )
    .await;
    assert_eq!(bad["state"], "failed", "{bad:#}");
    let error =
        bad["error"]["message"].as_str().or_else(|| bad["error"].as_str()).unwrap_or_default().to_owned();
    assert!(error.contains("family") && !error.contains("Traceback"), "{bad:#}");
}

/// A machine whose Python cannot import the packages a method needs lists
/// the method as unavailable, with what to install, and refuses its submits;
/// the Rust methods go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_method_whose_packages_are_missing_is_listed_unavailable_and_refused() {
    let dir = tempfile::tempdir().expect("dir");
    // Python without its site packages: the standard library only.
    let bare = dir.path().join("python3");
    std::fs::write(&bare, "#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n").expect("write");
    std::fs::set_permissions(&bare, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let python = bare.display().to_string();
    let p = start(Backend::LocalProcess, &[("MAPI_PYTHON", python.as_str())], mapi_tests::Options::default())
        .await;
    let (s, m) = p.call(p.token(), Method::GET, "/v1/methods/sklearn.logistic_regression", None).await;
    assert_eq!(s, 200, "{m}");
    let why = m["unavailable"].as_str().unwrap_or_default();
    assert!(
        why.contains("apt-get install") && why.contains("python3-sklearn") && why.contains(&python),
        "{m}"
    );
    let (_, linear) = p.call(p.token(), Method::GET, "/v1/methods/tabular.linear", None).await;
    assert!(linear.get("unavailable").is_none(), "{linear}");
    let ds = p.upload(&example("churn.csv")).await;
    let body = json!({"method": "sklearn.logistic_regression", "dataset": ds, "params": {"y": "churned"}});
    let (s, refused) =
        p.call(p.token(), Method::POST, &format!("{}/runs", p.project_path()), Some(body)).await;
    assert_eq!(s, 400, "{refused}");
    assert!(refused["detail"].as_str().unwrap_or_default().contains("python3-sklearn"), "{refused}");
    let described = p.submit(json!({"method": "describe", "dataset": ds})).await;
    assert_eq!(p.wait_final(&described).await["state"], "succeeded");
}

/// The Python methods' own tests: each against the library called directly
/// and the published references they name (`worker/python/tests`).
#[test]
fn python_unit_tests() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let out = std::process::Command::new("/usr/bin/python3")
        .args(["-m", "unittest", "discover", "-s", "worker/python/tests", "-t", "worker/python"])
        .current_dir(root)
        .output()
        .expect("python3");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    let ran: u32 = said
        .lines()
        .find_map(|l| l.strip_prefix("Ran ")?.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    assert!(ran >= 90, "the Python tests ran ({ran}): {said}");
}

/// `mapi bench overhead` itself, briefly (one run of each kind, a 0.2 s
/// sleep, a 3-origin backtest): the instrument works and its figures add up;
/// BENCHMARKS.md holds the figures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_overhead_reports_each_kind_of_run() {
    let out = tokio::process::Command::new(mapi_tests::binary("mapi"))
        .args(["--json", "bench", "overhead", "--runs", "1", "--seconds", "0.2", "--backtest-origins", "3"])
        .output()
        .await
        .expect("mapi bench overhead");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_str(&stdout).expect("the report");
    let rows = r["rows"].as_array().expect("rows");
    let methods: Vec<&str> = rows.iter().filter_map(|row| row["method"].as_str()).collect();
    assert_eq!(methods, ["diag.sleep", "sklearn.logistic_regression", "ts.backtest (3 origins)"], "{r}");
    assert!(r["backtest_python_alone_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{r}");
    let sleep = &rows[0];
    let total = sleep["total_p50_ms"].as_f64().expect("total");
    assert!(total >= 200.0, "a 0.2 s sleep takes at least 0.2 s: {sleep}");
    let added = sleep["overhead_p50_ms"].as_f64().expect("overhead");
    assert!((total - 200.0 - added).abs() < 1e-6, "{sleep}");
    assert!(sleep["dispatch_p50_ms"].as_f64().is_some_and(|d| d >= 0.0 && d <= total), "{sleep}");
    assert!(r["python_alone_p50_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{r}");
}
