//! The commands that run the platform itself rather than talk to one:
//! `mapi dev`, `mapi bench` and the hidden `mapi worker`. Built with the
//! `platform` feature (on by default); without it `mapi` is the client
//! alone and compiles none of the control plane.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use mapi_embedded::DevPlatform;

use crate::error::Result;

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
    /// The web console's runs list over many runs: render time, bytes and documents read per page.
    Console {
        /// Runs the store holds.
        #[arg(long, default_value_t = 100_000)]
        runs: usize,
        /// Pages rendered: first pages, pages followed by `next`, and filtered pages.
        #[arg(long, default_value_t = 400)]
        pages: usize,
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
    /// Steady mixed load on `mapi dev` (its own process) for N minutes: memory, threads, files, disk and a probe's latency each minute, with their slopes.
    Soak {
        /// Minutes of load (samples taken).
        #[arg(long, default_value_t = 60)]
        minutes: usize,
        /// Seconds between samples (60: a sample a minute).
        #[arg(long, default_value_t = 60, hide = true)]
        sample_s: u64,
        /// Runs submitted a second.
        #[arg(long, default_value_t = 1.5)]
        runs_per_s: f64,
        /// Items of each job.
        #[arg(long, default_value_t = 500)]
        job_items: usize,
        /// Seconds between jobs.
        #[arg(long, default_value_t = 20)]
        job_every_s: u64,
        /// Seconds the platform idles after the load before its memory is read again.
        #[arg(long, default_value_t = 30, hide = true)]
        idle_s: u64,
    },
    /// Submit to first event of a `describe` execution on local-process and on gvisor (needs
    /// root and `runsc`), sampled in turn.
    Start {
        #[arg(long, default_value_t = 20)]
        samples: usize,
    },
    /// What the platform adds to a run beside the method's own time: `diag.sleep` of each of
    /// `seconds`, a Python method (`sklearn.logistic_regression`) beside the same fit in Python
    /// alone, and a fan-out backtest beside its fits one after another in Python alone.
    Overhead {
        /// Runs of each kind, one after another.
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// `diag.sleep`'s seconds, comma separated.
        #[arg(long, value_delimiter = ',', default_value = "1,60")]
        seconds: Vec<f64>,
        /// Origins (children) of the `ts.backtest` run of the airline model; 0: none.
        #[arg(long, default_value_t = 50)]
        backtest_origins: u32,
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

/// `mapi dev`'s options; each wins over its variable.
#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// The port on 127.0.0.1 (default: PORT, else 8080).
    #[arg(long)]
    port: Option<u16>,
    /// Where the platform keeps its state (default: MAPI_HOME, else ./.mapi).
    #[arg(long)]
    home: Option<PathBuf>,
    /// Start from nothing: delete the home's store, queue, objects, executions and endpoints first.
    #[arg(long)]
    reset: bool,
}

pub async fn dev(args: DevArgs) -> Result<ExitCode> {
    let port = args.port.map(|p| p.to_string());
    let home = args.home.as_ref().map(|h| h.to_string_lossy().into_owned());
    let lookup = |k: &str| match k {
        "PORT" if port.is_some() => port.clone(),
        "MAPI_HOME" if home.is_some() => home.clone(),
        _ => std::env::var(k).ok(),
    };
    let config = mapi_platform::Config::from_lookup(&lookup)?;
    if config.profile != mapi_platform::Profile::Dev {
        return Err("mapi dev runs the dev profile only: its local-process executor and development identity provider never serve many tenants (unset MAPI_PROFILE)".into());
    }
    let runtime = mapi_runtime::RuntimeConfig::from_lookup(lookup)?;
    let human = match runtime.log_format {
        Some(f) => f == mapi_runtime::LogFormat::Human,
        None => std::io::IsTerminal::is_terminal(&std::io::stderr()),
    };
    let (format, filter) = match (human, std::env::var("MAPI_LOG").ok()) {
        (true, None) => (mapi_runtime::LogFormat::Human, format!("info,{}", mapi_runtime::HUMAN_QUIET)),
        (true, Some(f)) => (mapi_runtime::LogFormat::Human, f),
        (false, f) => (mapi_runtime::LogFormat::Json, f.unwrap_or_else(|| "info".into())),
    };
    mapi_runtime::init_logging_as(format, "mapi-dev", &filter, std::io::stderr);
    if args.reset {
        reset(&config.home)?;
    }
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", config.port)).await.map_err(|e| {
        format!("cannot listen on 127.0.0.1:{}: {e} (use --port to pick another)", config.port)
    })?;
    let worker = mapi_platform::worker_command(config.worker_bin.as_deref(), true);
    let (home, accounts) = (config.home.clone(), config.dev_accounts.clone());
    let platform = DevPlatform::start(config, listener, worker).await?;
    // Listening before the URL is printed: whoever reads it may stop us at once.
    let stop = mapi_runtime::shutdown_signal();
    let cli = cli_access(&platform.credentials, &home);
    eprint!("{}", banner(&platform.url, &home, &accounts, format, &cli));
    crate::output::line(&platform.url)?;
    stop.await;
    eprintln!("mapi dev: stopping (executions keep running and are found at the next start)");
    platform.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

/// What `mapi dev` keeps in its home; `--reset` removes these and nothing
/// else (its keys and secrets stay, so bundles signed before still verify).
const HOME_ENTRIES: &[&str] = &[
    "mapi.db",
    "mapi.db-wal",
    "mapi.db-shm",
    "queue.db",
    "queue.db-wal",
    "queue.db-shm",
    "objects",
    "executions",
    "endpoints",
    "credentials.json",
];

/// Empties a `mapi dev` home. A directory that holds no store is left
/// alone: `--home` may point at the wrong place, and nothing there is ours.
fn reset(home: &std::path::Path) -> Result<()> {
    if !home.exists() {
        return Ok(());
    }
    if !home.join("mapi.db").is_file() {
        return Err(format!(
            "--reset: {} holds no mapi.db, so it is not a mapi dev home; nothing was deleted",
            home.display()
        )
        .into());
    }
    for entry in HOME_ENTRIES {
        let path = home.join(entry);
        let removed =
            if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
        match removed {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(format!("--reset: cannot remove {}: {e}", path.display()).into());
            }
            _ => {}
        }
    }
    eprintln!("mapi dev: reset {}", home.display());
    Ok(())
}

/// Gives the CLI this platform's token in the user's configuration (never over a person's
/// session there); the banner's sentence on how the CLI reaches it.
fn cli_access(creds: &mapi_api::credentials::Credentials, home: &std::path::Path) -> String {
    let me = std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_else(|_| "mapi".into());
    let mut saved = crate::session::load();
    let written = crate::session::register_dev(&mut saved, creds);
    match crate::session::save(&saved) {
        Ok(()) if written => format!(
            "signed in as dev@dev.local in {}/{}; in another terminal: {me} runs ls",
            creds.tenant, creds.project
        ),
        Ok(()) => format!("your `mapi login` session here is kept ({me} whoami shows it)"),
        // Without a configuration directory the CLI still finds the home's own file.
        Err(e) => format!("{e}; in another terminal: MAPI_HOME={} {me} runs ls", home.display()),
    }
}

/// What a person needs to start: where the platform is, how to reach it,
/// who can sign in, where its state is, how to stop it.
fn banner(
    url: &str,
    home: &std::path::Path,
    accounts: &[mapi_domain::UserId],
    format: mapi_runtime::LogFormat,
    cli: &str,
) -> String {
    let accounts: Vec<String> = accounts.iter().map(ToString::to_string).collect();
    let logs = match format {
        mapi_runtime::LogFormat::Human => "a line per event below; MAPI_LOG=debug adds one per request",
        mapi_runtime::LogFormat::Json => {
            "Cloud Logging JSON on stderr (MAPI_LOG_FORMAT=human for short lines)"
        }
    };
    let lines = [
        format!("mapi dev is up at {url}"),
        format!("  console    {url}/console (sign in as one of the accounts below)"),
        format!("  API        {url}/openapi.json (the description), {url}/v1/usage (methods and examples)"),
        format!("  CLI        {cli}"),
        "             (`cargo install --path cli` puts a `mapi` on your PATH)".to_owned(),
        format!("  accounts   {} (mapi login --dev EMAIL)", accounts.join(", ")),
        format!("  state      {} (start afresh with --reset)", home.display()),
        format!("  logs       {logs}"),
        "  stop       Ctrl-C (executions keep running and are found at the next start)".to_owned(),
    ];
    format!("\n{}\n\n", lines.join("\n"))
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
        BenchCmd::Console { runs, pages, sync } => serde_json::to_value(
            crate::bench::console(dir.path(), runs.max(1), pages.max(1), durability(&sync)?).await?,
        )?,
        BenchCmd::Score { scores, sync } => {
            serde_json::to_value(crate::bench::score(dir.path(), scores.max(1), durability(&sync)?).await?)?
        }
        BenchCmd::Soak { minutes, sample_s, runs_per_s, job_items, job_every_s, idle_s } => {
            let plan = crate::bench::SoakPlan {
                samples: minutes.max(1),
                sample: std::time::Duration::from_secs(sample_s.max(1)),
                runs_per_s,
                job_items: job_items.max(1),
                job_every: std::time::Duration::from_secs(job_every_s.max(1)),
                probes_per_s: 5.0,
                read_every: std::time::Duration::from_secs(3),
                idle: std::time::Duration::from_secs(idle_s),
            };
            serde_json::to_value(crate::bench::soak(dir.path(), plan).await?)?
        }
        BenchCmd::Start { samples } => {
            serde_json::to_value(crate::bench::start(dir.path(), samples.max(1)).await?)?
        }
        BenchCmd::Overhead { runs, seconds, backtest_origins } => {
            let asked = crate::bench::OverheadAsk { runs: runs.max(1), seconds: &seconds, backtest_origins };
            serde_json::to_value(crate::bench::overhead(dir.path(), asked).await?)?
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
