//! `mapi bench soak`: hours of steady mixed load on `mapi dev`, watched
//! from outside. The platform runs as its own process (this binary's
//! `mapi dev` on a fresh home and a free port of 127.0.0.1), so what is
//! measured is the platform's alone: resident memory (and its anonymous
//! part, without the binary's mapped pages), threads, open files
//! and child processes from `/proc`, and the home's size on disk (data and
//! allocated blocks, by part) once a sample.
//!
//! The load, as a long-lived deployment sees it:
//! - runs at a steady rate (1.5 a second by default), `tabular.linear` and
//!   `describe` in turn, each followed by its client until it ends;
//! - an item job of `item.echo` every 20 s (500 items), followed likewise;
//! - a reader every 3 s, in turn: the project's usage this month by day,
//!   the datasets, the newest job's items;
//! - a probe of the runs list (`page_size=50`) five times a second, whose
//!   latency is the tail the report follows.
//!
//! Each sample (a minute by default) prints one line; the report ends with
//! the slope of each figure (least squares over the samples after the
//! warm-up, the first sixth), memory per 1,000 runs, the probe's p99 in the
//! last sixth over the first, and disk per item. Requests go to 127.0.0.1
//! only, and the whole load is bounded by `--minutes`.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use super::{percentile, status_kib};

/// What drives a soak.
#[derive(Clone, Debug)]
pub struct SoakPlan {
    /// Samples taken; one a `sample` apart.
    pub samples: usize,
    pub sample: Duration,
    pub runs_per_s: f64,
    pub job_items: usize,
    pub job_every: Duration,
    pub probes_per_s: f64,
    pub read_every: Duration,
    /// How long the platform idles after the load before its memory is read again.
    pub idle: Duration,
}

/// One sample: the process and the home as they are, and the traffic since
/// the sample before.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Sample {
    /// Minutes (or samples) since the load started.
    pub at: usize,
    pub rss_mib: f64,
    /// The anonymous part of `rss_mib` (the heap, stacks, caches): what is
    /// left when the binary's and the libraries' mapped pages are not counted.
    pub rss_anon_mib: f64,
    pub threads: u64,
    pub fds: u64,
    /// Live child processes (executions).
    pub children: u64,
    /// The home's bytes of data, and the blocks it takes.
    pub disk_data_mib: f64,
    pub disk_allocated_mib: f64,
    /// Files in the home.
    pub files: u64,
    pub runs_submitted: u64,
    pub runs_ended: u64,
    pub items_ended: u64,
    /// Requests answered 4xx or 5xx, or not answered.
    pub errors: u64,
    pub probes: usize,
    pub probe_p50_ms: f64,
    pub probe_p99_ms: f64,
}

/// The home's size by part: the store, the queue, job objects, run
/// objects, executions, the rest.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DiskParts {
    pub store_bytes: u64,
    pub queue_bytes: u64,
    pub job_objects_bytes: u64,
    pub job_objects_allocated: u64,
    pub job_object_files: u64,
    pub run_objects_bytes: u64,
    pub executions_bytes: u64,
    pub other_bytes: u64,
}

/// A soak's report.
#[derive(Debug, Serialize)]
pub struct SoakReport {
    pub samples: Vec<Sample>,
    /// Samples before this one are the warm-up, left out of the slopes.
    pub warm_up: usize,
    pub rss_mib_per_sample: f64,
    pub rss_mib_per_1000_runs: f64,
    pub rss_anon_mib_per_1000_runs: f64,
    pub threads_per_sample: f64,
    pub fds_per_sample: f64,
    pub disk_allocated_mib_per_sample: f64,
    pub probe_p99_ms_per_sample: f64,
    /// The probe's p99 over all its requests in the first and in the last
    /// sixth of the samples.
    pub probe_p99_first_ms: f64,
    pub probe_p99_last_ms: f64,
    pub probe_p99_ratio: f64,
    /// The home at the end, by part.
    pub disk: DiskParts,
    /// Job objects' bytes per item, and the blocks they take per item.
    pub job_object_bytes_per_item: f64,
    pub job_object_allocated_per_item: f64,
    pub runs_submitted: u64,
    pub runs_succeeded: u64,
    pub runs_ended: u64,
    pub jobs_submitted: u64,
    pub items_ended: u64,
    pub errors: u64,
    /// Resident memory after the idle time without load (30 s by default).
    pub idle_rss_mib: f64,
    /// Lines of the platform's log at `error` level.
    pub log_errors: u64,
}

/// The least-squares slope of `ys` over `xs`.
pub fn slope(xs: &[f64], ys: &[f64]) -> f64 {
    let n = xs.len().min(ys.len()) as f64;
    if n < 2.0 {
        return 0.0;
    }
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let sxy: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    if sxx == 0.0 { 0.0 } else { sxy / sxx }
}

/// Counts shared by the load's tasks.
#[derive(Debug, Default)]
struct Tally {
    runs_submitted: AtomicU64,
    runs_succeeded: AtomicU64,
    runs_ended: AtomicU64,
    jobs_submitted: AtomicU64,
    items_ended: AtomicU64,
    errors: AtomicU64,
    probe: Mutex<Vec<Duration>>,
    newest_job: Mutex<Option<String>>,
}

impl Tally {
    fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
    fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// The platform under load and how to call it.
#[derive(Clone, Debug)]
struct Api {
    http: reqwest::Client,
    url: String,
    token: String,
    project: String,
    tally: Arc<Tally>,
}

impl Api {
    /// Sends a request; counts it as an error unless 2xx. `None` on error.
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Option<Value> {
        let mut req = self.http.request(method, format!("{}{path}", self.url)).bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let answer = match req.send().await {
            Ok(r) if r.status().is_success() => r.json::<Value>().await.ok(),
            _ => None,
        };
        if answer.is_none() {
            Tally::add(&self.tally.errors, 1);
        }
        answer
    }

    /// Polls `path` every 2 s until `ended` says so (at most 30 minutes).
    async fn follow(&self, path: &str, ended: impl Fn(&Value) -> bool) -> Option<Value> {
        let deadline = Instant::now() + Duration::from_secs(1800);
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_secs(2)).await;
            if let Some(v) = self.call(reqwest::Method::GET, path, None).await
                && ended(&v)
            {
                return Some(v);
            }
        }
        None
    }
}

/// Runs `plan` against a fresh `mapi dev` (this binary) in `dir`.
pub async fn soak(dir: &Path, plan: SoakPlan) -> Result<SoakReport, Box<dyn std::error::Error>> {
    let home = dir.join("home");
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let log_path = dir.join("platform.log");
    let log = std::fs::File::create(&log_path)?;
    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .args(["dev", "--port", &port.to_string(), "--home"])
        .arg(&home)
        .env("MAPI_LOG", "warn")
        .env("MAPI_LOG_FORMAT", "json")
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().ok_or("mapi dev did not start")?;
    let url = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build()?;
    let started = Instant::now();
    while !http.get(format!("{url}/health")).send().await.is_ok_and(|r| r.status() == 200) {
        if started.elapsed() > Duration::from_secs(60) {
            return Err("mapi dev did not answer /health within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let creds: mapi_api::credentials::Credentials =
        serde_json::from_slice(&std::fs::read(home.join("credentials.json"))?)?;
    let api = Api {
        http,
        url,
        token: creds.token.clone(),
        project: format!("/v1/tenants/{}/projects/{}", creds.tenant, creds.project),
        tally: Arc::new(Tally::default()),
    };
    let csv = include_str!("../../../examples/longley.csv");
    let ds = api
        .http
        .post(format!("{}{}/datasets", api.url, api.project))
        .bearer_auth(&api.token)
        .header("content-type", "text/csv")
        .body(csv)
        .send()
        .await?
        .json::<Value>()
        .await?["id"]
        .clone();
    let until = Instant::now() + plan.sample * u32::try_from(plan.samples)?;
    let load = vec![
        tokio::spawn(runs(api.clone(), ds.clone(), plan.runs_per_s, until)),
        tokio::spawn(jobs(api.clone(), plan.job_items, plan.job_every, until)),
        tokio::spawn(reads(api.clone(), plan.read_every, until)),
        tokio::spawn(probe(api.clone(), plan.probes_per_s, until)),
    ];
    let mut samples = Vec::with_capacity(plan.samples);
    let mut probes = Vec::with_capacity(plan.samples);
    let mut next = Instant::now();
    for at in 1..=plan.samples {
        next += plan.sample;
        tokio::time::sleep_until(next.into()).await;
        let (s, probed) = sample(pid, &home, &api.tally, at).await;
        probes.push(probed);
        crate::output::line(&format!(
            "{at:>4}  rss {:>7.1} MiB (anon {:>6.1})  threads {:>3}  fds {:>4}  children {:>2}  disk {:>8.1} MiB ({:>8.1} allocated, {:>7} files)  runs {:>6}/{:<6}  items {:>8}  errors {:>3}  probe p50 {:>6.1} ms  p99 {:>7.1} ms",
            s.rss_mib,
            s.rss_anon_mib,
            s.threads,
            s.fds,
            s.children,
            s.disk_data_mib,
            s.disk_allocated_mib,
            s.files,
            s.runs_ended,
            s.runs_submitted,
            s.items_ended,
            s.errors,
            s.probe_p50_ms,
            s.probe_p99_ms
        ))?;
        samples.push(s);
    }
    for task in load {
        task.abort();
    }
    // What the load left in flight ends; then the process idles.
    tokio::time::sleep(plan.idle).await;
    let idle_rss_mib = status_kib(pid, "VmRSS:") as f64 / 1024.0;
    let disk = parts(&home);
    // Counted before the process stops: its followers' calls fail after.
    let mut report = report(samples, &probes, &api.tally, idle_rss_mib, disk);
    child.kill().await?;
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    report.log_errors = log.lines().filter(|l| l.contains("\"ERROR\"")).count() as u64;
    Ok(report)
}

/// The p99 of every latency of `samples`, pooled.
fn pooled_p99(samples: &[Vec<Duration>]) -> f64 {
    let mut all: Vec<Duration> = samples.concat();
    all.sort();
    percentile(&all, 0.99)
}

fn report(
    samples: Vec<Sample>,
    probes: &[Vec<Duration>],
    tally: &Tally,
    idle_rss_mib: f64,
    disk: DiskParts,
) -> SoakReport {
    let sixth = samples.len().div_ceil(6).max(1);
    let warm_up = sixth.min(samples.len().saturating_sub(2));
    let steady = &samples[warm_up..];
    let of = |f: fn(&Sample) -> f64| steady.iter().map(f).collect::<Vec<f64>>();
    let at = of(|s| s.at as f64);
    let rss = of(|s| s.rss_mib);
    let first = pooled_p99(&probes[..sixth.min(probes.len())]);
    let last = pooled_p99(&probes[probes.len().saturating_sub(sixth)..]);
    let items = Tally::get(&tally.items_ended).max(1) as f64;
    SoakReport {
        warm_up,
        rss_mib_per_sample: slope(&at, &rss),
        rss_mib_per_1000_runs: slope(&of(|s| s.runs_ended as f64 / 1000.0), &rss),
        rss_anon_mib_per_1000_runs: slope(&of(|s| s.runs_ended as f64 / 1000.0), &of(|s| s.rss_anon_mib)),
        threads_per_sample: slope(&at, &of(|s| s.threads as f64)),
        fds_per_sample: slope(&at, &of(|s| s.fds as f64)),
        disk_allocated_mib_per_sample: slope(&at, &of(|s| s.disk_allocated_mib)),
        probe_p99_ms_per_sample: slope(&at, &of(|s| s.probe_p99_ms)),
        probe_p99_first_ms: first,
        probe_p99_last_ms: last,
        probe_p99_ratio: if first > 0.0 { last / first } else { 0.0 },
        job_object_bytes_per_item: disk.job_objects_bytes as f64 / items,
        job_object_allocated_per_item: disk.job_objects_allocated as f64 / items,
        disk,
        runs_submitted: Tally::get(&tally.runs_submitted),
        runs_succeeded: Tally::get(&tally.runs_succeeded),
        runs_ended: Tally::get(&tally.runs_ended),
        jobs_submitted: Tally::get(&tally.jobs_submitted),
        items_ended: Tally::get(&tally.items_ended),
        errors: Tally::get(&tally.errors),
        idle_rss_mib,
        log_errors: 0,
        samples,
    }
}

/// The process and the home now, and the probe's latencies since the last sample.
async fn sample(pid: u32, home: &Path, tally: &Tally, at: usize) -> (Sample, Vec<Duration>) {
    let mut probe = std::mem::take(&mut *tally.probe.lock().await);
    probe.sort();
    let home = home.to_owned();
    let (data, allocated, files) =
        tokio::task::spawn_blocking(move || walk(&home, &mut |_, _, _| {})).await.unwrap_or_default();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    let s = Sample {
        at,
        rss_mib: status_kib(pid, "VmRSS:") as f64 / 1024.0,
        rss_anon_mib: status_kib(pid, "RssAnon:") as f64 / 1024.0,
        threads: status_kib(pid, "Threads:"),
        fds,
        children: children_of(pid),
        disk_data_mib: data as f64 / 1048576.0,
        disk_allocated_mib: allocated as f64 / 1048576.0,
        files,
        runs_submitted: Tally::get(&tally.runs_submitted),
        runs_ended: Tally::get(&tally.runs_ended),
        items_ended: Tally::get(&tally.items_ended),
        errors: Tally::get(&tally.errors),
        probes: probe.len(),
        probe_p50_ms: percentile(&probe, 0.5),
        probe_p99_ms: percentile(&probe, 0.99),
    };
    (s, probe)
}

/// Processes whose parent is `pid`.
fn children_of(pid: u32) -> u64 {
    let Ok(procs) = std::fs::read_dir("/proc") else { return 0 };
    let parent = pid.to_string();
    procs
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
        .filter(|e| {
            std::fs::read_to_string(e.path().join("stat")).ok().is_some_and(|stat| {
                stat.rsplit_once(") ").and_then(|(_, rest)| rest.split_whitespace().nth(1))
                    == Some(parent.as_str())
            })
        })
        .count() as u64
}

/// Bytes, allocated bytes and files under `dir`; `each` sees every file.
fn walk(dir: &Path, each: &mut dyn FnMut(&Path, u64, u64)) -> (u64, u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut stack: Vec<PathBuf> = vec![dir.to_owned()];
    let (mut data, mut allocated, mut files) = (0, 0, 0);
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.filter_map(Result::ok) {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                stack.push(e.path());
            } else {
                let blocks = m.blocks() * 512;
                each(&e.path(), m.len(), blocks);
                (data, allocated, files) = (data + m.len(), allocated + blocks, files + 1);
            }
        }
    }
    (data, allocated, files)
}

/// The home's bytes by part.
fn parts(home: &Path) -> DiskParts {
    let mut p = DiskParts::default();
    walk(home, &mut |path, bytes, blocks| {
        let rel = path.strip_prefix(home).unwrap_or(path).to_string_lossy();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.starts_with("mapi.db") {
            p.store_bytes += bytes;
        } else if name.starts_with("queue.db") {
            p.queue_bytes += bytes;
        } else if rel.starts_with("objects") && rel.contains("/jobs/") {
            p.job_objects_bytes += bytes;
            p.job_objects_allocated += blocks;
            p.job_object_files += 1;
        } else if rel.starts_with("objects") && rel.contains("/runs/") {
            p.run_objects_bytes += bytes;
        } else if rel.starts_with("executions") {
            p.executions_bytes += bytes;
        } else {
            p.other_bytes += bytes;
        }
    });
    p
}

/// Sleeps until `at` (a steady schedule: a slow request does not shift the next).
async fn tick(at: &mut Instant, every: Duration) {
    *at += every;
    tokio::time::sleep_until((*at).into()).await;
}

/// Runs at `per_s`, `tabular.linear` and `describe` in turn, each followed until it ends.
async fn runs(api: Api, ds: Value, per_s: f64, until: Instant) {
    let every = Duration::from_secs_f64(1.0 / per_s.max(0.001));
    let mut at = Instant::now();
    let mut n = 0u64;
    while at + every < until {
        tick(&mut at, every).await;
        n += 1;
        let body = if n.is_multiple_of(2) {
            json!({"method": "tabular.linear", "dataset": ds, "params": {"y": "employed"}})
        } else {
            json!({"method": "describe", "dataset": ds})
        };
        let api = api.clone();
        tokio::spawn(async move {
            let path = format!("{}/runs", api.project);
            let Some(run) = api.call(reqwest::Method::POST, &path, Some(body)).await else { return };
            Tally::add(&api.tally.runs_submitted, 1);
            let Some(id) = run["id"].as_str() else { return };
            let terminal = |v: &Value| {
                matches!(v["state"].as_str(), Some("succeeded" | "failed" | "partial" | "cancelled"))
            };
            if let Some(v) = api.follow(&format!("/v1/runs/{id}"), terminal).await {
                Tally::add(&api.tally.runs_ended, 1);
                Tally::add(&api.tally.runs_succeeded, u64::from(v["state"] == "succeeded"));
            }
        });
    }
}

/// An item job of `items` every `every`, each followed until it ends.
async fn jobs(api: Api, items: usize, every: Duration, until: Instant) {
    let body = json!({
        "method": "item.echo",
        "items": (0..items).map(|i| json!({"i": i})).collect::<Vec<_>>(),
    });
    let mut at = Instant::now();
    while at + every < until {
        tick(&mut at, every).await;
        let (api, body) = (api.clone(), body.clone());
        tokio::spawn(async move {
            let path = format!("{}/jobs", api.project);
            let Some(job) = api.call(reqwest::Method::POST, &path, Some(body)).await else { return };
            Tally::add(&api.tally.jobs_submitted, 1);
            let Some(id) = job["id"].as_str() else { return };
            *api.tally.newest_job.lock().await = Some(id.to_owned());
            let ended = |v: &Value| {
                matches!(v["state"].as_str(), Some("succeeded" | "failed" | "completed_with_errors"))
            };
            if let Some(v) = api.follow(&format!("/v1/jobs/{id}"), ended).await {
                let counts = &v["counts"];
                let n = counts["succeeded"].as_u64().unwrap_or(0) + counts["failed"].as_u64().unwrap_or(0);
                Tally::add(&api.tally.items_ended, n);
            }
        });
    }
}

/// A reader every `every`: usage, datasets, the newest job's items, in turn.
async fn reads(api: Api, every: Duration, until: Instant) {
    let mut at = Instant::now();
    let mut turn = VecDeque::from(["usage", "datasets", "items"]);
    while at + every < until {
        tick(&mut at, every).await;
        turn.rotate_left(1);
        let path = match turn[0] {
            "usage" => format!("{}/usage?period=month&group_by=day", api.project),
            "datasets" => format!("{}/datasets", api.project),
            _ => match api.tally.newest_job.lock().await.clone() {
                Some(job) => format!("/v1/jobs/{job}/items?page_size=100"),
                None => continue,
            },
        };
        api.call(reqwest::Method::GET, &path, None).await;
    }
}

/// The runs list, `per_s` times a second, each latency kept for the sample.
async fn probe(api: Api, per_s: f64, until: Instant) {
    let every = Duration::from_secs_f64(1.0 / per_s.max(0.001));
    let path = format!("{}/runs?page_size=50", api.project);
    let mut at = Instant::now();
    while at + every < until {
        tick(&mut at, every).await;
        let t = Instant::now();
        if api.call(reqwest::Method::GET, &path, None).await.is_some() {
            api.tally.probe.lock().await.push(t.elapsed());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::slope;

    #[test]
    fn the_slope_is_least_squares() {
        assert_eq!(slope(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0]), 2.0);
        assert_eq!(slope(&[1.0, 2.0, 3.0, 4.0], &[5.0, 5.0, 5.0, 5.0]), 0.0);
        assert!((slope(&[0.0, 1.0, 2.0, 3.0], &[1.0, 3.0, 2.0, 4.0]) - 0.8).abs() < 1e-12);
        assert_eq!(slope(&[1.0], &[3.0]), 0.0, "one point has no slope");
    }
}
