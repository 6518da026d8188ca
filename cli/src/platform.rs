//! The commands that run the platform itself rather than talk to one:
//! `mapi dev`, `mapi bench` and the hidden `mapi worker`. Built with the
//! `platform` feature (on by default); without it `mapi` is the client
//! alone and compiles none of the control plane.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use mapi_embedded::DevPlatform;

use crate::commands::Result;

#[derive(Debug, Subcommand)]
pub enum BenchCmd {
    /// Submit throughput over loopback, beside raw SQLite inserts of the same documents.
    Submit {
        #[arg(long, default_value_t = 2000)]
        runs: usize,
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        /// SQLite synchronous setting for both sides: full or normal.
        #[arg(long, default_value = "full")]
        sync: String,
    },
    /// Event ingestion over loopback (push token, envelope, HMAC, dedupe,
    /// merge), with distinct and with reused push tokens, beside one bare RS256 verification.
    Events {
        /// Pushes per phase.
        #[arg(long, default_value_t = 5000)]
        events: usize,
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        /// SQLite synchronous setting: full or normal.
        #[arg(long, default_value = "full")]
        sync: String,
    },
    /// Item jobs: submit latency per job size, and items per second end to end.
    Jobs {
        /// Job sizes whose submit latency is measured.
        #[arg(long, value_delimiter = ',', default_value = "10,1000,100000")]
        sizes: Vec<usize>,
        #[arg(long, default_value_t = 5)]
        samples: usize,
        /// Items of the job measured end to end.
        #[arg(long, default_value_t = 5000)]
        e2e_items: usize,
        /// SQLite synchronous setting: full or normal.
        #[arg(long, default_value = "full")]
        sync: String,
    },
    /// Full sweeps of the reconcile tick over running runs on a scripted executor: time, listings, reads, memory.
    Tick {
        /// Running runs the store holds.
        #[arg(long, default_value_t = 10_000)]
        runs: usize,
        /// Sweeps timed.
        #[arg(long, default_value_t = 5)]
        sweeps: usize,
        /// SQLite synchronous setting: full or normal.
        #[arg(long, default_value = "full")]
        sync: String,
    },
    /// Endpoint scoring through the platform vs the model server directly, a batch, the server's start.
    Score {
        /// Scores timed on each side.
        #[arg(long, default_value_t = 2000)]
        scores: usize,
        /// SQLite synchronous setting: full or normal.
        #[arg(long, default_value = "full")]
        sync: String,
    },
    /// Process start to first 200 from /health, binary size, idle memory.
    ColdStart {
        /// A function binary, e.g. target/release/mapi-submit.
        binary: PathBuf,
        #[arg(long, default_value_t = 10)]
        samples: usize,
    },
}

/// The execution entry point (`mapi-worker`), embedded so `mapi dev` needs
/// no second binary.
pub fn worker(args: Vec<String>) -> ExitCode {
    ExitCode::from(u8::try_from(mapi_worker::main_with_args(args)).unwrap_or(1))
}

pub async fn dev() -> Result<ExitCode> {
    let config = mapi_platform::Config::from_env()?;
    if config.profile != mapi_platform::Profile::Dev {
        return Err("mapi dev runs the dev profile only: its local-process executor and development identity provider never serve many tenants (unset MAPI_PROFILE)".into());
    }
    let filter = std::env::var("MAPI_LOG").unwrap_or_else(|_| "info".into());
    mapi_runtime::init_logging_to("mapi-dev", None, &filter, std::io::stderr);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", config.port)).await.map_err(|e| {
        format!("cannot listen on 127.0.0.1:{}: {e} (set PORT to use another port)", config.port)
    })?;
    let worker = mapi_platform::worker_command(config.worker_bin.as_deref(), true);
    let home = config.home.clone();
    let platform = DevPlatform::start(config, listener, worker).await?;
    eprintln!("mapi dev: the platform is up at {}", platform.url);
    eprintln!(
        "  state in {}; CLI credentials in {}",
        home.display(),
        home.join("credentials.json").display()
    );
    eprintln!(
        "  try: mapi datasets upload data.csv; mapi runs submit --method describe --dataset ds_… --watch"
    );
    crate::output::line(&platform.url)?;
    mapi_runtime::shutdown_signal().await;
    eprintln!("mapi dev: stopping (executions keep running and are found at the next start)");
    platform.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

fn durability(sync: &str) -> Result<mapi_store::sqlite::Durability> {
    match sync {
        "full" => Ok(mapi_store::sqlite::Durability::Full),
        "normal" => Ok(mapi_store::sqlite::Durability::Normal),
        other => Err(format!("--sync {other}: use full or normal").into()),
    }
}

pub async fn bench(cmd: BenchCmd, json: bool) -> Result<ExitCode> {
    let dir = tempfile::tempdir()?;
    let report = match cmd {
        BenchCmd::Submit { runs, concurrency, sync } => serde_json::to_value(
            crate::bench::submit(dir.path(), runs, concurrency.max(1), durability(&sync)?).await?,
        )?,
        BenchCmd::Events { events, concurrency, sync } => serde_json::to_value(
            crate::bench::events(dir.path(), events.max(1), concurrency.max(1), durability(&sync)?).await?,
        )?,
        BenchCmd::Jobs { sizes, samples, e2e_items, sync } => serde_json::to_value(
            crate::bench::jobs(dir.path(), &sizes, samples.max(1), e2e_items.max(1), durability(&sync)?)
                .await?,
        )?,
        BenchCmd::Tick { runs, sweeps, sync } => serde_json::to_value(
            crate::bench::tick(dir.path(), runs.max(1), sweeps.max(1), durability(&sync)?).await?,
        )?,
        BenchCmd::Score { scores, sync } => {
            serde_json::to_value(crate::bench::score(dir.path(), scores.max(1), durability(&sync)?).await?)?
        }
        BenchCmd::ColdStart { binary, samples } => {
            serde_json::to_value(crate::bench::cold_start(dir.path(), &binary, samples.max(1)).await?)?
        }
    };
    if json {
        crate::output::line(&serde_json::to_string_pretty(&report)?)?;
    } else if let Some(map) = report.as_object() {
        for (k, v) in map {
            crate::output::line(&format!("{k:<24} {v}"))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
