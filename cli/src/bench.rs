//! `mapi bench`: the measurements behind BENCHMARKS.md, on this machine,
//! over loopback only.
//!
//! - `submit`: authenticated `POST …/runs` against the platform on the
//!   embedded defaults (SQLite with `synchronous=FULL`), from a load
//!   generator in this process with a fixed number of connections; then the
//!   same documents inserted into a fresh SQLite file, one transaction each,
//!   with the same durability settings. Background work (delivery,
//!   forwarding, ticks) is off, so only the submit path is measured; every
//!   run stays queued, so the concurrency limits are lifted (the admission
//!   checks still run, in the same transaction, as for any submit).
//! - `jobs`: item jobs: the submit latency of jobs of several sizes with
//!   nothing delivering (the manifest objects and one fan-out task are all
//!   a submit writes), then one job of a trivial method (`item.echo`) from
//!   submit to its last item, with the deliverer running.
//! - `cold-start`: a function binary from process start to its first 200
//!   from `/health`, its size on disk and its resident memory when idle.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mapi_store::sqlite::{Durability, open_connection};
use serde::Serialize;
use tokio::sync::Mutex;

use crate::dev::DevPlatform;

/// The figures of one submit benchmark.
#[derive(Debug, Serialize)]
pub struct SubmitReport {
    pub runs: usize,
    pub concurrency: usize,
    pub durability: String,
    pub api_runs_per_s: f64,
    pub api_p50_ms: f64,
    pub api_p99_ms: f64,
    pub raw_inserts_per_s: f64,
    pub ratio: f64,
    pub errors: usize,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

/// Runs the submit benchmark in a fresh home under `dir`.
pub async fn submit(
    dir: &Path,
    runs: usize,
    concurrency: usize,
    durability: Durability,
) -> Result<SubmitReport, Box<dyn std::error::Error>> {
    let home = dir.join("home");
    let sync = if durability == Durability::Full { "full" } else { "normal" };
    let config = mapi_platform::Config::from_lookup(&|k| match k {
        "MAPI_HOME" => Some(home.to_string_lossy().into_owned()),
        "MAPI_SQLITE_SYNC" => Some(sync.to_owned()),
        // Every run stays queued (nothing dispatches), so concurrency limits
        // are lifted for the measurement; the admission checks still run.
        "MAPI_PLATFORM_CONCURRENT_RUNS" => Some(u32::MAX.to_string()),
        _ => None,
    })?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let worker = mapi_platform::worker_command(None, true);
    let platform = DevPlatform::start_with(
        config,
        listener,
        worker,
        crate::dev::Options { background: false, ..Default::default() },
    )
    .await?;
    let creds = platform.credentials.clone();
    let lifted = mapi_runs::QuotaPolicyDoc {
        tenant: creds.tenant.clone(),
        policy: mapi_quota::Policy {
            concurrent_runs: Some(u32::MAX),
            requests_per_minute: Some(u32::MAX),
            note: Some("mapi bench: every run stays queued".into()),
            ..mapi_quota::Policy::default()
        },
        set_by: mapi_domain::UserId::parse("bench@dev.local")?,
        set_at: platform.state.clock.now(),
    };
    mapi_store::StoreExt::put(
        &*platform.state.store,
        &mapi_runs::Doc::key(&lifted)?,
        mapi_store::encode(&lifted)?,
        mapi_store::Precondition::None,
    )
    .await?;
    let project = format!("{}/v1/tenants/{}/projects/{}", platform.url, creds.tenant, creds.project);
    let http = reqwest::Client::builder().pool_max_idle_per_host(concurrency).build()?;
    let csv = "x,y\n1,2\n2,4.1\n3,5.9\n4,8.2\n";
    let ds: serde_json::Value = http
        .post(format!("{project}/datasets"))
        .bearer_auth(&creds.token)
        .header("content-type", "text/csv")
        .body(csv)
        .send()
        .await?
        .json()
        .await?;
    let body = serde_json::json!({"method": "tabular.linear", "dataset": ds["id"], "params": {"y": "y"}, "timeout_s": 600});
    let url = format!("{project}/runs");

    let remaining = Arc::new(Mutex::new(runs));
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(runs)));
    let errors = Arc::new(Mutex::new(0usize));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (http, url, body, token) = (http.clone(), url.clone(), body.clone(), creds.token.clone());
        let (remaining, latencies, errors) = (remaining.clone(), latencies.clone(), errors.clone());
        workers.push(tokio::spawn(async move {
            loop {
                {
                    let mut r = remaining.lock().await;
                    if *r == 0 {
                        return;
                    }
                    *r -= 1;
                }
                let t = Instant::now();
                let ok = http
                    .post(&url)
                    .bearer_auth(&token)
                    .json(&body)
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == 201);
                latencies.lock().await.push(t.elapsed());
                if !ok {
                    *errors.lock().await += 1;
                }
            }
        }));
    }
    for w in workers {
        w.await?;
    }
    let api_elapsed = started.elapsed();
    let mut lat = latencies.lock().await.clone();
    lat.sort();

    // The same documents, straight into SQLite.
    let docs = platform
        .state
        .store
        .query(&mapi_store::Query::new("runs"), None)
        .await?
        .into_iter()
        .map(|d| (d.key.id().to_owned(), serde_json::to_string(&d.fields).unwrap_or_default()))
        .collect::<Vec<_>>();
    platform.shutdown().await;
    let raw_path = dir.join("raw.db");
    let docs_len = docs.len();
    let raw_elapsed = tokio::task::spawn_blocking(move || -> Result<Duration, rusqlite::Error> {
        let mut conn = open_connection(&raw_path, durability)?;
        conn.execute_batch(
            "CREATE TABLE documents (collection TEXT NOT NULL, id TEXT NOT NULL, fields TEXT NOT NULL,
             version INTEGER NOT NULL, create_time INTEGER NOT NULL, update_time INTEGER NOT NULL,
             PRIMARY KEY (collection, id)) WITHOUT ROWID",
        )?;
        let t = Instant::now();
        for (i, (id, fields)) in docs.iter().enumerate() {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            tx.execute(
                "INSERT INTO documents VALUES ('runs', ?1, ?2, ?3, 0, 0)",
                rusqlite::params![id, fields, i as i64],
            )?;
            tx.commit()?;
        }
        Ok(t.elapsed())
    })
    .await??;
    let api_rate = runs as f64 / api_elapsed.as_secs_f64();
    let raw_rate = docs_len as f64 / raw_elapsed.as_secs_f64();
    Ok(SubmitReport {
        runs,
        concurrency,
        durability: sync.to_owned(),
        api_runs_per_s: api_rate,
        api_p50_ms: percentile(&lat, 0.5),
        api_p99_ms: percentile(&lat, 0.99),
        raw_inserts_per_s: raw_rate,
        ratio: api_rate / raw_rate,
        errors: *errors.lock().await,
    })
}

/// The figures of one cold-start benchmark.
#[derive(Debug, Serialize)]
pub struct ColdStartReport {
    pub binary: String,
    pub size_bytes: u64,
    pub samples: usize,
    pub start_to_health_ms_p50: f64,
    pub start_to_health_ms_max: f64,
    pub idle_rss_kib: u64,
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Starts `binary` `samples` times with a fresh home each time.
pub async fn cold_start(
    dir: &Path,
    binary: &Path,
    samples: usize,
) -> Result<ColdStartReport, Box<dyn std::error::Error>> {
    let http = reqwest::Client::builder().timeout(Duration::from_millis(200)).build()?;
    let mut times = Vec::new();
    let mut rss = 0;
    for i in 0..samples {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let home = dir.join(format!("cold-{i}"));
        let t = Instant::now();
        let mut child = tokio::process::Command::new(binary)
            .env("PORT", port.to_string())
            .env("MAPI_HOME", &home)
            .env("MAPI_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let url = format!("http://127.0.0.1:{port}/health");
        loop {
            if http.get(&url).send().await.is_ok_and(|r| r.status() == 200) {
                break;
            }
            if t.elapsed() > Duration::from_secs(30) {
                return Err(format!("{} did not answer /health within 30 s", binary.display()).into());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        times.push(t.elapsed());
        if i == samples - 1 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            rss = child.id().map_or(0, rss_kib);
        }
        child.kill().await?;
    }
    times.sort();
    Ok(ColdStartReport {
        binary: binary.display().to_string(),
        size_bytes: std::fs::metadata(binary)?.len(),
        samples,
        start_to_health_ms_p50: percentile(&times, 0.5),
        start_to_health_ms_max: times.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
        idle_rss_kib: rss,
    })
}

/// Submit latency of one job size.
#[derive(Debug, Serialize)]
pub struct JobSubmitLatency {
    pub items: usize,
    pub body_bytes: usize,
    pub samples: usize,
    pub p50_ms: f64,
    pub max_ms: f64,
}

/// The figures of one item-job benchmark.
#[derive(Debug, Serialize)]
pub struct JobsReport {
    pub durability: String,
    pub submit: Vec<JobSubmitLatency>,
    pub e2e_items: usize,
    pub e2e_seconds: f64,
    pub e2e_items_per_s: f64,
}

async fn bench_platform(
    home: &Path,
    sync: &str,
    background: bool,
) -> Result<DevPlatform, Box<dyn std::error::Error>> {
    let config = mapi_platform::Config::from_lookup(&|k| match k {
        "MAPI_HOME" => Some(home.to_string_lossy().into_owned()),
        "MAPI_SQLITE_SYNC" => Some(sync.to_owned()),
        "MAPI_LOG" => Some("warn".to_owned()),
        _ => None,
    })?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let worker = mapi_platform::worker_command(None, true);
    let options = crate::dev::Options { background, ..Default::default() };
    Ok(DevPlatform::start_with(config, listener, worker, options).await?)
}

fn job_body(items: usize) -> Vec<u8> {
    let items: Vec<serde_json::Value> = (0..items).map(|i| serde_json::json!({"i": i})).collect();
    serde_json::to_vec(&serde_json::json!({"method": "item.echo", "items": items})).unwrap_or_default()
}

/// Item jobs on the embedded defaults: the submit latency of each size in
/// `sizes` with nothing delivering (so only the submit is measured: the
/// manifest objects and one fan-out task), then, on a fresh platform with
/// its deliverer, one job of `e2e_items` of `item.echo` from submit to the
/// last item.
pub async fn jobs(
    dir: &Path,
    sizes: &[usize],
    samples: usize,
    e2e_items: usize,
    durability: Durability,
) -> Result<JobsReport, Box<dyn std::error::Error>> {
    let sync = if durability == Durability::Full { "full" } else { "normal" };
    let http = reqwest::Client::new();
    let platform = bench_platform(&dir.join("submit"), sync, false).await?;
    let creds = platform.credentials.clone();
    let url = format!("{}/v1/tenants/{}/projects/{}/jobs", platform.url, creds.tenant, creds.project);
    let mut submit = Vec::new();
    for &n in sizes {
        let body = job_body(n);
        let mut lat = Vec::new();
        for _ in 0..samples {
            let t = Instant::now();
            let r = http
                .post(&url)
                .bearer_auth(&creds.token)
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await?;
            let status = r.status();
            let text = r.text().await?;
            lat.push(t.elapsed());
            if status != 201 {
                return Err(format!("a {n}-item submit answered {status}: {text}").into());
            }
        }
        lat.sort();
        submit.push(JobSubmitLatency {
            items: n,
            body_bytes: body.len(),
            samples,
            p50_ms: percentile(&lat, 0.5),
            max_ms: lat.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
        });
    }
    platform.shutdown().await;

    let platform = bench_platform(&dir.join("e2e"), sync, true).await?;
    let creds = platform.credentials.clone();
    let url = format!("{}/v1/tenants/{}/projects/{}/jobs", platform.url, creds.tenant, creds.project);
    let t = Instant::now();
    let created: serde_json::Value = http
        .post(&url)
        .bearer_auth(&creds.token)
        .header("content-type", "application/json")
        .body(job_body(e2e_items))
        .send()
        .await?
        .json()
        .await?;
    let id = created["id"].as_str().ok_or("the submit answered no job id")?.to_owned();
    let job_url = format!("{}/v1/jobs/{id}", platform.url);
    loop {
        let v: serde_json::Value = http.get(&job_url).bearer_auth(&creds.token).send().await?.json().await?;
        match v["state"].as_str() {
            Some("succeeded") => break,
            Some("failed" | "completed_with_errors") => {
                return Err(format!("the job ended {}", v["state"]).into());
            }
            _ => {}
        }
        if t.elapsed() > Duration::from_secs(1800) {
            return Err("the job did not finish within 30 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let e2e = t.elapsed().as_secs_f64();
    platform.shutdown().await;
    Ok(JobsReport {
        durability: sync.to_owned(),
        submit,
        e2e_items,
        e2e_seconds: e2e,
        e2e_items_per_s: e2e_items as f64 / e2e,
    })
}
