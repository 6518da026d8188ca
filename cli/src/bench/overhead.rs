//! `mapi bench overhead`: what the platform adds to a run beside the
//! method's own time, on the embedded defaults (local-process executor,
//! its background work on). Each sample is one run, submitted over
//! loopback and polled every 10 ms until it is final; the times are the
//! run's own history (its `created_at`, the `running` transition when the
//! execution was made, the `succeeded` transition at finalization), on the
//! platform's clock:
//! - `diag.sleep` of `seconds` (a method whose own time is exactly known):
//!   the overhead is the run's whole time less `seconds` (dispatch, the
//!   execution's start and its worker's bootstrap, the events, the
//!   finalization);
//! - a Python method (`sklearn.logistic_regression` on `examples/churn.csv`):
//!   its whole time, and the same fit timed by the interpreter itself in a
//!   fresh process (start, imports, fit), so what the platform adds to a
//!   Python method shows beside what Python costs;
//! - a fan-out parent: `ts.backtest` of the airline model (SARIMA
//!   (0,1,1)(0,1,1)12 on the log, 12 steps ahead) at `backtest_origins`
//!   origins, its children run side by side, beside the same fits one after
//!   another in one Python process.

use std::path::Path;
use std::time::{Duration, Instant};

use mapi_api::views::RunView;
use mapi_domain::run::RunState;
use serde::Serialize;
use serde_json::{Value, json};

use super::{bench_platform, percentile, upload_dataset};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const CHURN: &str = include_str!("../../../examples/churn.csv");
const AIRLINE: &str = include_str!("../../../examples/airline_passengers.csv");

/// What `mapi bench overhead` measures.
#[derive(Debug, Clone, Copy)]
pub struct OverheadAsk<'a> {
    /// Runs of each kind, one after another.
    pub runs: usize,
    /// `diag.sleep`'s seconds.
    pub seconds: &'a [f64],
    /// Origins of the backtest (one run); 0: none.
    pub backtest_origins: u32,
}

/// One kind of run measured.
#[derive(Debug, Serialize)]
pub struct OverheadRow {
    pub method: String,
    /// The method's own time, when it is known (`diag.sleep`'s seconds).
    pub method_s: Option<f64>,
    pub runs: usize,
    /// Submit to the execution made (`running`), p50.
    pub dispatch_p50_ms: f64,
    /// The whole run, submit to `succeeded`, p50 and p95.
    pub total_p50_ms: f64,
    pub total_p95_ms: f64,
    /// The whole run less the method's own time, p50 and p95 (known methods only).
    pub overhead_p50_ms: Option<f64>,
    pub overhead_p95_ms: Option<f64>,
}

/// The figures of `mapi bench overhead`.
#[derive(Debug, Serialize)]
pub struct OverheadReport {
    pub rows: Vec<OverheadRow>,
    /// The Python method's fit timed by `/usr/bin/python3` in a fresh process (start, imports, fit), p50.
    pub python_alone_p50_ms: f64,
    /// The backtest's fits, one after another in one fresh `/usr/bin/python3` (start, imports, fits).
    pub backtest_python_alone_ms: Option<f64>,
}

/// When `run` last went to `to`, in milliseconds of the platform's clock.
fn transition_at(run: &RunView, to: RunState) -> Option<i64> {
    run.history.iter().rev().find(|t| t.to == to).map(|t| t.at.as_millis())
}

/// Runs `method` with `params` on `dataset` `runs` times, one after another: (dispatch, total) each.
async fn sample(
    http: &reqwest::Client,
    (base, root): (&str, &str),
    token: &str,
    (method, params, dataset): (&str, &Value, &Value),
    runs: usize,
) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let (mut dispatch, mut total) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let body = json!({"method": method, "dataset": dataset, "params": params, "timeout_s": 600});
        let made: Value =
            http.post(format!("{base}/runs")).bearer_auth(token).json(&body).send().await?.json().await?;
        let id = made["id"].as_str().ok_or_else(|| format!("the submit was refused: {made}"))?.to_owned();
        let url = format!("{root}/v1/runs/{id}");
        let deadline = Instant::now() + Duration::from_secs(900);
        let run = loop {
            let run: Value = http.get(&url).bearer_auth(token).send().await?.json().await?;
            if matches!(run["state"].as_str(), Some("succeeded" | "failed" | "cancelled" | "partial")) {
                break run;
            }
            if Instant::now() > deadline || run.get("state").is_none() {
                return Err(format!("run {id} did not end: {run}").into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        if run["state"] != "succeeded" {
            return Err(format!("run {id} of {method} did not succeed: {run}").into());
        }
        let run: RunView = serde_json::from_value(run)?;
        let created = run.created_at.as_millis();
        let (running, done) =
            (transition_at(&run, RunState::Running), transition_at(&run, RunState::Succeeded));
        let (running, done) =
            (running.ok_or("no running transition")?, done.ok_or("no succeeded transition")?);
        let ms = |d: i64| Duration::from_millis(u64::try_from(d.max(0)).unwrap_or(0));
        dispatch.push(ms(running - created));
        total.push(ms(done - created));
    }
    dispatch.sort();
    total.sort();
    Ok((dispatch, total))
}

fn row(
    method: &str,
    method_s: Option<f64>,
    (dispatch, total): (Vec<Duration>, Vec<Duration>),
) -> OverheadRow {
    let less = |p: f64| method_s.map(|s| percentile(&total, p) - s * 1000.0);
    OverheadRow {
        method: method.to_owned(),
        method_s,
        runs: total.len(),
        dispatch_p50_ms: percentile(&dispatch, 0.5),
        total_p50_ms: percentile(&total, 0.5),
        total_p95_ms: percentile(&total, 0.95),
        overhead_p50_ms: less(0.5),
        overhead_p95_ms: less(0.95),
    }
}

/// Measures `runs` runs of `diag.sleep` for each of `seconds`, and of the Python method.
///
/// # Errors
///
/// A platform that does not start, a refused submit or a run that does not succeed.
pub async fn overhead(dir: &Path, ask: OverheadAsk<'_>) -> Result<OverheadReport> {
    let OverheadAsk { runs, seconds, backtest_origins } = ask;
    let platform = bench_platform(&dir.join("overhead"), "full", true, &[], None).await?;
    let (c, http) = (platform.credentials.clone(), reqwest::Client::new());
    let base = format!("{}/v1/tenants/{}/projects/{}", platform.url, c.tenant, c.project);
    let ds = upload_dataset(&http, &base, &c.token, CHURN).await?;
    let dataset = &ds;
    let mut rows = Vec::new();
    for s in seconds {
        let params = json!({"seconds": s});
        let runs =
            sample(&http, (&base, &platform.url), &c.token, ("diag.sleep", &params, dataset), runs).await?;
        rows.push(row("diag.sleep", Some(*s), runs));
    }
    let params = json!({"y": "churned"});
    let method = "sklearn.logistic_regression";
    let sampled = sample(&http, (&base, &platform.url), &c.token, (method, &params, dataset), runs).await?;
    rows.push(row(method, None, sampled));
    let mut backtest_python_alone_ms = None;
    if backtest_origins > 0 {
        let airline = upload_dataset(&http, &base, &c.token, AIRLINE).await?;
        let params = json!({"y": "passengers", "time": "month", "method": "arima", "p": 0, "d": 1, "q": 1,
                            "P": 0, "D": 1, "Q": 1, "seasonal_periods": 12, "log": true, "horizon": 12,
                            "origins": backtest_origins});
        let method = "ts.backtest";
        let sampled = sample(&http, (&base, &platform.url), &c.token, (method, &params, &airline), 1).await?;
        rows.push(row(&format!("{method} ({backtest_origins} origins)"), None, sampled));
        backtest_python_alone_ms = Some(backtest_alone(dir, backtest_origins)?);
    }
    Ok(OverheadReport { rows, python_alone_p50_ms: python_alone(dir, runs)?, backtest_python_alone_ms })
}

/// The backtest's fits (origin i fitted on the first 144 − 12 − (K − 1 − i)
/// months) one after another in one fresh `/usr/bin/python3`.
fn backtest_alone(dir: &Path, origins: u32) -> Result<f64> {
    let csv = dir.join("airline.csv");
    std::fs::write(&csv, AIRLINE)?;
    let fits = "import sys\nimport numpy as np, pandas as pd\n\
                from statsmodels.tsa.statespace.sarimax import SARIMAX\n\
                y = np.log(pd.read_csv(sys.argv[1])['passengers'].to_numpy(float))\n\
                K, h, n = int(sys.argv[2]), 12, len(y)\n\
                for i in range(K):\n    ni = n - h - (K - 1 - i)\n    \
                SARIMAX(y[:ni], order=(0, 1, 1), seasonal_order=(0, 1, 1, 12)).fit(disp=False).get_forecast(h)\n";
    let t = Instant::now();
    let out = std::process::Command::new("/usr/bin/python3")
        .args(["-I", "-c", fits])
        .arg(&csv)
        .arg(origins.to_string())
        .output()?;
    if !out.status.success() {
        return Err(format!("/usr/bin/python3: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(t.elapsed().as_secs_f64() * 1000.0)
}

/// The same fit as the Python method's, timed around a fresh `/usr/bin/python3` process.
fn python_alone(dir: &Path, runs: usize) -> Result<f64> {
    let csv = dir.join("churn.csv");
    std::fs::write(&csv, CHURN)?;
    let fit = "import sys\nimport pandas as pd\nfrom sklearn.linear_model import LogisticRegression\n\
               from sklearn.model_selection import train_test_split\nt = pd.read_csv(sys.argv[1])\n\
               y, x = t['churned'], t.drop(columns=['churned'])\n\
               a, b, ya, yb = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)\n\
               LogisticRegression(max_iter=1000).fit(a, ya)\n";
    let mut took = Vec::new();
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        let out =
            std::process::Command::new("/usr/bin/python3").args(["-I", "-c", fit]).arg(&csv).output()?;
        if !out.status.success() {
            return Err(format!("/usr/bin/python3: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        took.push(t.elapsed());
    }
    took.sort();
    Ok(percentile(&took, 0.5))
}
