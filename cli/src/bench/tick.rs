//! `mapi bench tick`: the reconcile tick's full sweep over many running
//! runs. One run goes through the API (upload, submit, dispatch) on a
//! platform with no background work and a scripted executor (it starts
//! nothing and lists every execution running, as Cloud Run's
//! `executions.list` would); the store then gets copies of it, each with an
//! execution, and `POST /internal/tick` is timed over the lot. What a sweep
//! costs besides time is counted: listings and status reads asked of the
//! executor, store reads and documents read, and the process's memory.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mapi_executor::scripted::ScriptedExecutor;
use serde::Serialize;

use super::{bench_platform, percentile, status_kib, sync_name};

/// The figures of one tick benchmark.
#[derive(Debug, Serialize)]
pub struct TickReport {
    pub durability: String,
    pub active_runs: usize,
    pub sweeps: usize,
    /// Runs the last sweep polled (every active run when one tick sweeps them all).
    pub polled: u64,
    pub sweep_ms_p50: f64,
    pub sweep_ms_max: f64,
    /// Per sweep: executor listings and status reads, store reads and documents read.
    pub listings_per_sweep: f64,
    pub status_reads_per_sweep: f64,
    pub store_reads_per_sweep: f64,
    pub documents_read_per_sweep: f64,
    /// Resident memory before the first sweep and its growth over the peak of the sweeps.
    pub rss_before_kib: u64,
    pub peak_growth_kib: u64,
}

type BenchError = Box<dyn std::error::Error>;

/// `runs` running runs, swept `sweeps` times.
pub async fn tick(
    dir: &std::path::Path,
    runs: usize,
    sweeps: usize,
    durability: mapi_store::sqlite::Durability,
) -> Result<TickReport, BenchError> {
    let sync = sync_name(durability);
    let executor = Arc::new(ScriptedExecutor::default());
    let platform = bench_platform(dir, sync, false, &[], Some(executor.clone())).await?;
    let id = dispatched_run(&platform).await?;
    let entropy = mapi_entropy::OsEntropy;
    mapi_embedded::load::copy_dispatched_run(&platform.state, &*executor, &id, runs, &entropy).await?;
    let counts = platform.state.local.store.clone().ok_or("the embedded store is not SQLite")?;
    let internal = platform.state.config.secrets.internal_token.clone();
    let http = reqwest::Client::new();
    let url = format!("{}{}", platform.url, mapi_reconcile_tick::TICK_PATH);
    let pid = std::process::id();
    let rss_before = status_kib(pid, "VmRSS:");
    let (store_before, reads_before) = (counts.counts(), executor.reads());
    let (mut took, mut polled) = (Vec::with_capacity(sweeps), 0);
    for _ in 0..sweeps {
        let t = Instant::now();
        let r = http.post(&url).bearer_auth(&internal).json(&serde_json::json!({})).send().await?;
        let status = r.status();
        let report: serde_json::Value = r.json().await?;
        took.push(t.elapsed());
        if status != 200 || report["busy"] == true || report["errors"].as_u64() != Some(0) {
            return Err(format!("a tick answered {status}: {report}").into());
        }
        polled = report["polled"].as_u64().unwrap_or(0);
    }
    let peak = status_kib(pid, "VmHWM:");
    let (store, reads) = (counts.counts(), executor.reads());
    platform.shutdown().await;
    took.sort();
    let per = |n: u64| n as f64 / sweeps as f64;
    Ok(TickReport {
        durability: sync.to_owned(),
        active_runs: runs,
        sweeps,
        polled,
        sweep_ms_p50: percentile(&took, 0.5),
        sweep_ms_max: took.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
        listings_per_sweep: per((reads.1 - reads_before.1) as u64),
        status_reads_per_sweep: per((reads.0 - reads_before.0) as u64),
        store_reads_per_sweep: per(store.reads - store_before.reads),
        documents_read_per_sweep: per(store.documents_read - store_before.documents_read),
        rss_before_kib: rss_before,
        peak_growth_kib: peak.saturating_sub(rss_before),
    })
}

/// Uploads a dataset, submits one `describe` run and dispatches it.
pub(super) async fn dispatched_run(
    platform: &mapi_embedded::DevPlatform,
) -> Result<mapi_domain::RunId, BenchError> {
    let http = reqwest::Client::new();
    let c = &platform.credentials;
    let project = format!("{}/v1/tenants/{}/projects/{}", platform.url, c.tenant, c.project);
    let ds: serde_json::Value = http
        .post(format!("{project}/datasets?name=tick"))
        .bearer_auth(&c.token)
        .header("content-type", "text/csv")
        .body("x,y\n1,2\n2,4\n")
        .send()
        .await?
        .json()
        .await?;
    let run: serde_json::Value = http
        .post(format!("{project}/runs"))
        .bearer_auth(&c.token)
        .json(&serde_json::json!({"method": "describe", "dataset": ds["id"]}))
        .send()
        .await?
        .json()
        .await?;
    let id = mapi_domain::RunId::parse(run["id"].as_str().unwrap_or_default())
        .map_err(|_| format!("the submit answered no run id: {run}"))?;
    let task = mapi_schema::tasks::DispatchTask { run: id.clone(), attempt: mapi_domain::AttemptNo::FIRST };
    let r = http
        .post(format!("{}{}", platform.url, mapi_schema::tasks::DISPATCH_PATH))
        .bearer_auth(&platform.state.config.secrets.internal_token)
        .json(&task)
        .timeout(Duration::from_secs(30))
        .send()
        .await?;
    if !r.status().is_success() {
        return Err(format!("the dispatch answered {}", r.status()).into());
    }
    Ok(id)
}
