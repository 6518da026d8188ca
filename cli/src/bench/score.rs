//! `mapi bench score`: scoring an endpoint through the platform beside
//! calling its model server directly (same rows, one request at a time, so
//! the difference is the platform's overhead: authorization, the endpoint's
//! document, the forward and the statistics write), a batch's predictions
//! per second, and the model server's start to its first 200.

use std::path::Path;
use std::time::{Duration, Instant};

use mapi_hosting::server_env;
use mapi_store::sqlite::Durability;
use serde::Serialize;
use serde_json::{Value, json};

use super::{bench_platform, percentile, sync_name, upload_dataset};

const LONGLEY: &str = include_str!("../../../examples/longley.csv");

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The figures of one scoring benchmark.
#[derive(Debug, Serialize)]
pub struct ScoreReport {
    pub scores: usize,
    pub durability: String,
    pub platform_p50_ms: f64,
    pub platform_p99_ms: f64,
    pub direct_p50_ms: f64,
    pub direct_p99_ms: f64,
    pub overhead_p50_ms: f64,
    pub overhead_p99_ms: f64,
    pub batch_rows: usize,
    pub batch_predictions_per_s: f64,
    pub server_start_to_200_ms: f64,
}

fn row() -> Value {
    json!({"gnp_deflator": 100.0, "gnp": 400000.0, "unemployed": 3000.0, "armed_forces": 2500.0, "population": 117000.0, "year": 1955.0})
}

async fn poll(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    done: impl Fn(&Value) -> bool,
) -> Result<Value> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let v: Value = http.get(url).bearer_auth(token).send().await?.json().await?;
        if done(&v) {
            return Ok(v);
        }
        if Instant::now() > deadline {
            return Err(format!("gave up waiting on {url}: {v}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn timed(n: usize, mut send: impl AsyncFnMut() -> Result<()>) -> Result<Vec<Duration>> {
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        send().await?;
        lat.push(t.elapsed());
    }
    lat.sort();
    Ok(lat)
}

/// Runs the scoring benchmark in a fresh home under `dir`.
pub async fn score(dir: &Path, scores: usize, durability: Durability) -> Result<ScoreReport> {
    let platform = bench_platform(&dir.join("score"), sync_name(durability), true, &[], None).await?;
    let (c, http) = (platform.credentials.clone(), reqwest::Client::new());
    let base = format!("{}/v1/tenants/{}/projects/{}", platform.url, c.tenant, c.project);
    let ds = upload_dataset(&http, &base, &c.token, LONGLEY).await?;
    let body =
        json!({"method": "tabular.linear", "dataset": ds, "params": {"y": "employed"}, "timeout_s": 120});
    let run: Value =
        http.post(format!("{base}/runs")).bearer_auth(&c.token).json(&body).send().await?.json().await?;
    let run_url = format!("{}/v1/runs/{}", platform.url, run["id"].as_str().unwrap_or_default());
    let run =
        poll(&http, &run_url, &c.token, |r| r["state"] == "succeeded" || r["state"] == "failed").await?;
    let body = json!({"alias": "bench", "model_version": run["model_version"]});
    let created = http.post(format!("{base}/endpoints")).bearer_auth(&c.token).json(&body).send().await?;
    if !created.status().is_success() {
        return Err(format!("the endpoint was not created ({run}): {}", created.text().await?).into());
    }
    let endpoint =
        poll(&http, &format!("{base}/endpoints/bench"), &c.token, |e| e["status"] != "deploying").await?;
    if endpoint["status"] != "ready" {
        return Err(format!("the endpoint did not get ready: {endpoint}").into());
    }
    let service = endpoint["service"].as_str().unwrap_or_default().to_owned();
    let one = serde_json::to_vec(&json!({"rows": [row()]}))?;
    let through = format!("{base}/endpoints/bench:score");
    let direct = format!(
        "{}{}",
        platform.state.hosting.route(&service, Some("r1")).await?.url,
        server_env::PREDICT_PATH
    );
    let post = |url: String, body: Vec<u8>| {
        let req = http.post(url).bearer_auth(&c.token).header("content-type", "application/json").body(body);
        async move {
            let r = req.send().await?;
            if !r.status().is_success() {
                return Err(format!("score answered {}", r.status()).into());
            }
            r.bytes().await?;
            Ok::<(), Box<dyn std::error::Error>>(())
        }
    };
    timed(50, async || post(through.clone(), one.clone()).await).await?;
    timed(50, async || post(direct.clone(), one.clone()).await).await?;
    let platform_lat = timed(scores, async || post(through.clone(), one.clone()).await).await?;
    let direct_lat = timed(scores, async || post(direct.clone(), one.clone()).await).await?;
    let batch_rows = 10_000;
    let batch = serde_json::to_vec(&json!({"rows": vec![row(); batch_rows]}))?;
    let batch_time = timed(5, async || post(direct.clone(), batch.clone()).await).await?;
    let start = server_start(&platform, &service).await?;
    let (p50, p99) = (percentile(&platform_lat, 0.5), percentile(&platform_lat, 0.99));
    let (d50, d99) = (percentile(&direct_lat, 0.5), percentile(&direct_lat, 0.99));
    platform.shutdown().await;
    Ok(ScoreReport {
        scores,
        durability: sync_name(durability).to_owned(),
        platform_p50_ms: p50,
        platform_p99_ms: p99,
        direct_p50_ms: d50,
        direct_p99_ms: d99,
        overhead_p50_ms: p50 - d50,
        overhead_p99_ms: p99 - d99,
        batch_rows,
        batch_predictions_per_s: batch_rows as f64 / (percentile(&batch_time, 0.5) / 1000.0),
        server_start_to_200_ms: start,
    })
}

/// The median, over five starts, of a model server's start to its first
/// 200 from `/health`, on the revision's staged bundle.
async fn server_start(platform: &mapi_embedded::DevPlatform, service: &str) -> Result<f64> {
    let state = &platform.state;
    let doc: mapi_endpoints::EndpointDoc = mapi_store::typed::get(
        &*state.store,
        &format!("{}:{}:bench", platform.credentials.tenant, platform.credentials.project),
    )
    .await?
    .ok_or("the endpoint's document")?;
    let Some(mapi_endpoints::Serves::Model(revision)) = doc.revision("r1").map(|r| &r.serves) else {
        return Err("revision r1 serving a model version".into());
    };
    let keys = serde_json::to_string(&state.signer.trusted_keys().export())?;
    let objects = state.config.home.join("endpoints").join(service).join("r1").join("objects");
    let worker = mapi_platform::worker_command(None, true);
    let http = reqwest::Client::new();
    let mut times = Vec::new();
    for _ in 0..5 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let started = Instant::now();
        let mut child = tokio::process::Command::new(&worker.program)
            .args(&worker.args)
            .arg("serve")
            .env(server_env::PORT, port.to_string())
            .env(server_env::LISTEN, "127.0.0.1")
            .env(server_env::OBJECTS, &objects)
            .env(server_env::BUNDLE, &revision.bundle)
            .env(server_env::MANIFEST_SHA256, &revision.manifest_sha256)
            .env(server_env::TRUSTED_KEYS, &keys)
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let url = format!("http://127.0.0.1:{port}{}", server_env::HEALTH_PATH);
        loop {
            if let Ok(r) = http.get(&url).send().await
                && r.status().is_success()
            {
                break;
            }
            if started.elapsed() > Duration::from_secs(30) {
                return Err("the model server did not start".into());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        times.push(started.elapsed());
        child.kill().await?;
    }
    times.sort();
    Ok(percentile(&times, 0.5))
}
