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
//! - `events`: Pub/Sub pushes of new events through the whole ingestion
//!   path (push token, envelope, HMAC, dedupe, merge into the store), with a
//!   new token on every push and with one token for all, beside the bare
//!   cost of one RS256 verification measured in the same process.
//! - `jobs`: item jobs: the submit latency of jobs of several sizes with
//!   nothing delivering (the manifest objects and one fan-out task are all
//!   a submit writes), then one job of a trivial method (`item.echo`) from
//!   submit to its last item, with the deliverer running.
//! - `cold-start`: a function binary from process start to its first 200
//!   from `/health`, its size on disk and its resident memory when idle.
//! - `tick`: full sweeps of the reconcile tick over thousands of running
//!   runs on a scripted executor (see [`tick`]).
//! - `console`: the web console's runs list over a store of many runs:
//!   render time and bytes per page, first page, deep pages and filters
//!   (see [`console`]).
//! - `score`: an endpoint scored through the platform beside its model
//!   server called directly, a batch, and the server's start (see [`score`]).
//! - `soak`: hours of steady mixed load on `mapi dev` as its own process:
//!   memory, threads, files, disk and the tail latency of a probe, a
//!   sample a minute, with their slopes (see [`soak`]).

mod console;
mod overhead;
mod score;
mod soak;
mod start;
mod tick;

pub use console::{ConsoleReport, console};
pub use overhead::{OverheadAsk, OverheadReport, overhead};
pub use score::{ScoreReport, score};
pub use soak::{SoakPlan, SoakReport, soak};
pub use start::{StartReport, start};
pub use tick::{TickReport, tick};

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mapi_store::sqlite::{Durability, open_connection};
use serde::Serialize;
use tokio::sync::Mutex;

use mapi_embedded::DevPlatform;

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
    let sync = sync_name(durability);
    // Every run stays queued (nothing dispatches), so concurrency limits
    // are lifted for the measurement; the admission checks still run.
    let lifted = [("MAPI_PLATFORM_CONCURRENT_RUNS", u32::MAX.to_string())];
    let platform = bench_platform(&home, sync, false, &lifted, None).await?;
    let creds = platform.credentials.clone();
    let lifted = mapi_schema::QuotaPolicyDoc {
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
    mapi_schema::put(&*platform.state.store, &lifted).await?;
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
    status_kib(pid, "VmRSS:")
}

/// A line of `/proc/{pid}/status` in KiB (`VmRSS:`, `VmHWM:`); 0 when unknown.
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
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

/// The figures of one event-ingestion benchmark.
#[derive(Debug, Serialize)]
pub struct EventsReport {
    /// Pushes of each kind (after a warm-up of a tenth as many), each a new
    /// event (so each is applied, not a duplicate), in two alternating halves.
    pub events: usize,
    pub concurrency: usize,
    pub durability: String,
    /// The full path with a different token on every push: each one RS256-verified.
    pub distinct_tokens_events_per_s: f64,
    pub distinct_tokens_p50_ms: f64,
    pub distinct_tokens_p99_ms: f64,
    /// CPU time of the process (server and load generator) per event: a
    /// figure that other load on the machine does not inflate the way it
    /// does the rate.
    pub distinct_tokens_cpu_us_per_event: f64,
    /// The full path with one token on every push (as Pub/Sub sends them): verified once.
    pub reused_token_events_per_s: f64,
    pub reused_token_p50_ms: f64,
    pub reused_token_p99_ms: f64,
    pub reused_token_cpu_us_per_event: f64,
    /// One bare RS256 signature verification (`jsonwebtoken`, as the verifier calls it), on one core.
    pub rs256_verify_us: f64,
    /// One `Verifier::verify` (key from the cache, every claim checked), on one core.
    pub verifier_verify_us: f64,
    /// Pushes not answered 200 `applied`.
    pub errors: usize,
}

const PUSH_AUDIENCE: &str = "https://api.example.com/internal/events";
const PUSH_ACCOUNT: &str = "mapi-events-push@mapi-prod-control.iam.gserviceaccount.com";
const PUSH_SUBSCRIPTION: &str = "projects/mapi-prod-control/subscriptions/mapi-run-events-push";
/// Attempts the events are spread over (each push merges into one of their progress documents).
const BENCH_ATTEMPTS: u32 = 64;

/// What one phase measured.
struct Phase {
    elapsed: Duration,
    /// CPU time of this whole process (server and load generator) meanwhile.
    cpu: Duration,
    latencies: Vec<Duration>,
    errors: usize,
}

/// The CPU time this process has used, all threads, user and system, from
/// `/proc/self/stat` (in USER_HZ = 100 ticks a second on Linux); zero elsewhere.
fn process_cpu() -> Duration {
    let ticks = std::fs::read_to_string("/proc/self/stat").ok().and_then(|stat| {
        let fields: Vec<&str> = stat.rsplit_once(") ")?.1.split_whitespace().collect();
        Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
    });
    Duration::from_millis(ticks.unwrap_or(0) * 10)
}

impl Phase {
    /// Several phases as one: their times, latencies and errors summed.
    fn merged(phases: Vec<Phase>) -> Phase {
        let mut all =
            Phase { elapsed: Duration::ZERO, cpu: Duration::ZERO, latencies: Vec::new(), errors: 0 };
        for p in phases {
            all.elapsed += p.elapsed;
            all.cpu += p.cpu;
            all.latencies.extend(p.latencies);
            all.errors += p.errors;
        }
        all.latencies.sort();
        all
    }
}

/// Sends every `(token, body)` to `url` over `concurrency` connections.
async fn drive(
    http: &reqwest::Client,
    url: &str,
    pushes: Vec<(String, String)>,
    concurrency: usize,
) -> Phase {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let pushes = Arc::new(pushes);
    let next = Arc::new(AtomicUsize::new(0));
    let cpu = process_cpu();
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (http, url, pushes, next) = (http.clone(), url.to_owned(), pushes.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            let (mut latencies, mut errors) = (Vec::new(), 0usize);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((token, body)) = pushes.get(i) else { break };
                let t = Instant::now();
                let response = http
                    .post(&url)
                    .bearer_auth(token)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await;
                let applied = match response {
                    Ok(r) if r.status() == 200 => r.text().await.is_ok_and(|t| t.contains("\"applied\"")),
                    _ => false,
                };
                latencies.push(t.elapsed());
                errors += usize::from(!applied);
            }
            (latencies, errors)
        }));
    }
    let mut phase = Phase { elapsed: Duration::ZERO, cpu: Duration::ZERO, latencies: Vec::new(), errors: 0 };
    for w in workers {
        let (latencies, errors) = w.await.unwrap_or_default();
        phase.latencies.extend(latencies);
        phase.errors += errors;
    }
    phase.elapsed = started.elapsed();
    phase.cpu = process_cpu().saturating_sub(cpu);
    phase.latencies.sort();
    phase
}

/// Runs the event-ingestion benchmark in a fresh home under `dir`: Pub/Sub
/// pushes with Google-style tokens (from a stand-in for Google serving its
/// key set on 127.0.0.1) through push authentication, the envelope, the
/// HMAC, the dedupe and the merge into the store; first with a new token on
/// every push, then with one token for all; and, in the same process, the
/// bare cost of one RS256 verification.
pub async fn events(
    dir: &Path,
    events: usize,
    concurrency: usize,
    durability: Durability,
) -> Result<EventsReport, Box<dyn std::error::Error>> {
    use mapi_clock::Clock;
    use mapi_domain::{AttemptNo, Nonce, ProjectId, ResourceClass, RunId, TenantId};
    use mapi_events::{AttemptKey, EventBody, EventSequencer, pubsub};

    // Google, played by the development identity provider with Google's issuer.
    let clock: Arc<dyn Clock> = Arc::new(mapi_clock::SystemClock);
    let idp =
        mapi_oidc::dev::DevIdp::open(&dir.join("google.key"), mapi_oidc::GOOGLE_ISSUERS[0].into(), vec![])?;
    let google = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let jwks_url = format!("http://{}{}", google.local_addr()?, mapi_oidc::dev::JWKS_PATH);
    let google_routes = mapi_oidc::dev::router(idp.clone(), PUSH_AUDIENCE.into(), clock.clone());
    let google_server = tokio::spawn(async move { axum::serve(google, google_routes).await });

    let home = dir.join("home");
    let sync = sync_name(durability);
    let push = [
        ("MAPI_PUBSUB_PUSH_AUDIENCE", PUSH_AUDIENCE.to_owned()),
        ("MAPI_PUBSUB_PUSH_SERVICE_ACCOUNT", PUSH_ACCOUNT.to_owned()),
        ("MAPI_PUBSUB_PUSH_SUBSCRIPTIONS", PUSH_SUBSCRIPTION.to_owned()),
        ("MAPI_GOOGLE_JWKS_URL", jwks_url.clone()),
    ];
    let platform = bench_platform(&home, sync, false, &push, None).await?;

    // Running attempts, as the dispatcher writes them.
    let now = clock.now();
    let mut sequencers = Vec::new();
    let mut executions = Vec::new();
    for i in 0..BENCH_ATTEMPTS {
        let mut entropy = [0u8; 10];
        entropy[..4].copy_from_slice(&i.to_be_bytes());
        let run = RunId::generate(now, entropy);
        let mut key = [7u8; 32];
        key[..4].copy_from_slice(&i.to_be_bytes());
        let key = AttemptKey::from_bytes(key);
        let execution = format!("bench-{i}-x7k2p");
        let attempt = mapi_schema::AttemptDoc {
            run: run.clone(),
            tenant: TenantId::parse(mapi_embedded::DEV_TENANT)?,
            project: ProjectId::parse(mapi_embedded::DEV_PROJECT)?,
            attempt: AttemptNo(1),
            nonce: Nonce::from_bytes([0; 16]),
            class: ResourceClass::S,
            task_count: 1,
            event_key: key.to_hex(),
            created_at: now,
            lease_until: now + Duration::from_secs(3600),
            handle: Some(mapi_executor::ExecutionHandle(execution.clone())),
            submitted_at: Some(now),
            finished_seen_at: None,
            bootstrapped_at: None,
            taken_unheard: None,
            retiring_at: None,
            started: Some(now),
            finished: None,
            status: None,
            finalized: false,
            reused: Vec::new(),
            gpus: None,
        };
        mapi_schema::put(&*platform.state.store, &attempt).await?;
        sequencers.push(EventSequencer::new(run, AttemptNo(1), 0, key));
        executions.push(execution);
    }
    // New events, spread over the attempts, each in the push body Pub/Sub would send.
    let mut bodies = |n: usize| -> Result<Vec<String>, serde_json::Error> {
        (0..n)
            .map(|i| {
                let a = i % sequencers.len();
                let fraction = (i / sequencers.len()) as f64 / n as f64;
                let signed =
                    sequencers[a].next(now, EventBody::Progress { fraction, message: "step".into() });
                let line = serde_json::json!({ mapi_events::LINE_KEY: signed });
                let entry = pubsub::log_entry(
                    &line,
                    &executions[a],
                    "bench",
                    "mapi-prod-control",
                    now,
                    &i.to_string(),
                );
                serde_json::to_string(&pubsub::envelope(&entry, PUSH_SUBSCRIPTION, &i.to_string(), now))
            })
            .collect()
    };
    // Google's push tokens: distinct ones differ in their issue and expiry times.
    let token = |i: usize| {
        let iat = now.as_secs() - i64::try_from(i % 1800).unwrap_or(0);
        let exp = iat + 3600 + i64::try_from(i / 1800).unwrap_or(0);
        let claims = serde_json::json!({
            "aud": PUSH_AUDIENCE, "azp": "113774264463038321964", "email": PUSH_ACCOUNT,
            "email_verified": true, "exp": exp, "iat": iat,
            "iss": mapi_oidc::GOOGLE_ISSUERS[0], "sub": "113774264463038321964",
        });
        idp.sign(&idp.header(), &claims)
    };

    let url = format!("{}{}", platform.url, mapi_push_events::EVENTS_PATH);
    let http = reqwest::Client::builder().pool_max_idle_per_host(concurrency).build()?;
    // Warm up (the key set fetched, connections open, the store's pages
    // cached), then alternate the two kinds in halves, so neither is
    // favoured by going first or by a passing load on the machine.
    let warm = token(2 * events)?;
    let warm_up: Vec<(String, String)> =
        bodies(events / 10 + 1)?.into_iter().map(|b| (warm.clone(), b)).collect();
    drive(&http, &url, warm_up, concurrency).await;
    let one = token(2 * events + 1)?;
    let (mut distinct, mut reused) = (Vec::new(), Vec::new());
    let mut next_token = 0;
    for half in [events / 2, events - events / 2] {
        let pushes = bodies(half)?
            .into_iter()
            .map(|b| {
                next_token += 1;
                Ok((token(next_token)?, b))
            })
            .collect::<Result<Vec<_>, mapi_oidc::dev::DevIdpError>>()?;
        distinct.push(drive(&http, &url, pushes, concurrency).await);
        let pushes = bodies(half)?.into_iter().map(|b| (one.clone(), b)).collect();
        reused.push(drive(&http, &url, pushes, concurrency).await);
    }
    let (distinct, reused) = (Phase::merged(distinct), Phase::merged(reused));

    // The bare cost of one verification, with the same key and a token of the same shape.
    let sample = token(0)?;
    let jwk = &idp.jwks()["keys"][0];
    let key = jsonwebtoken::DecodingKey::from_rsa_components(
        jwk["n"].as_str().unwrap_or_default(),
        jwk["e"].as_str().unwrap_or_default(),
    )?;
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
    validation.validate_exp = false;
    validation.validate_aud = false;
    validation.required_spec_claims.clear();
    const ROUNDS: u32 = 2000;
    let t = Instant::now();
    for _ in 0..ROUNDS {
        jsonwebtoken::decode::<serde_json::Value>(&sample, &key, &validation)?;
    }
    let rs256 = t.elapsed() / ROUNDS;
    let jwks = mapi_oidc::JwksCache::new(jwks_url.clone(), reqwest::Client::new(), clock.clone());
    let issuers = mapi_oidc::GOOGLE_ISSUERS.iter().map(|i| (*i).to_owned()).collect();
    let verifier = mapi_oidc::Verifier::new(
        mapi_oidc::VerifierConfig::new(issuers, PUSH_AUDIENCE.into()),
        jwks,
        clock.clone(),
    );
    verifier.verify(&sample).await?;
    let t = Instant::now();
    for _ in 0..ROUNDS {
        verifier.verify(&sample).await?;
    }
    let full_verify = t.elapsed() / ROUNDS;
    platform.shutdown().await;
    google_server.abort();

    let rate = |p: &Phase| events as f64 / p.elapsed.as_secs_f64();
    let cpu = |p: &Phase| p.cpu.as_secs_f64() * 1e6 / events as f64;
    Ok(EventsReport {
        events,
        concurrency,
        durability: sync.to_owned(),
        distinct_tokens_events_per_s: rate(&distinct),
        distinct_tokens_p50_ms: percentile(&distinct.latencies, 0.5),
        distinct_tokens_p99_ms: percentile(&distinct.latencies, 0.99),
        distinct_tokens_cpu_us_per_event: cpu(&distinct),
        reused_token_events_per_s: rate(&reused),
        reused_token_p50_ms: percentile(&reused.latencies, 0.5),
        reused_token_p99_ms: percentile(&reused.latencies, 0.99),
        reused_token_cpu_us_per_event: cpu(&reused),
        rs256_verify_us: rs256.as_secs_f64() * 1e6,
        verifier_verify_us: full_verify.as_secs_f64() * 1e6,
        errors: distinct.errors + reused.errors,
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

/// The `MAPI_SQLITE_SYNC` value of `durability`, as the reports name it.
fn sync_name(durability: Durability) -> &'static str {
    if durability == Durability::Full { "full" } else { "normal" }
}

/// The platform a benchmark measures: the embedded defaults in `home` with
/// `sync`, plus the `extra` settings, with its background work on or off,
/// on `executor` when one is given.
async fn bench_platform(
    home: &Path,
    sync: &str,
    background: bool,
    extra: &[(&str, String)],
    executor: Option<Arc<dyn mapi_executor::Executor>>,
) -> Result<DevPlatform, Box<dyn std::error::Error>> {
    let config = mapi_platform::Config::from_lookup(&|k| match k {
        "MAPI_HOME" => Some(home.to_string_lossy().into_owned()),
        "MAPI_SQLITE_SYNC" => Some(sync.to_owned()),
        "MAPI_LOG" => Some("warn".to_owned()),
        _ => extra.iter().find(|(name, _)| *name == k).map(|(_, v)| v.clone()),
    })?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let worker = mapi_platform::worker_command(None, true);
    let options = mapi_embedded::Options { background, executor, ..Default::default() };
    Ok(DevPlatform::start_with(config, listener, worker, options).await?)
}

/// Uploads `csv` as a dataset of the platform's own project (`base` is the project's API path); its id.
async fn upload_dataset(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    csv: &'static str,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let ds: serde_json::Value = http
        .post(format!("{base}/datasets"))
        .bearer_auth(token)
        .header("content-type", "text/csv")
        .body(csv)
        .send()
        .await?
        .json()
        .await?;
    Ok(ds["id"].clone())
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
    let sync = sync_name(durability);
    let http = reqwest::Client::new();
    let platform = bench_platform(&dir.join("submit"), sync, false, &[], None).await?;
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

    let platform = bench_platform(&dir.join("e2e"), sync, true, &[], None).await?;
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
