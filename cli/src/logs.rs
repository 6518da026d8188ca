//! `mapi runs logs`: what an attempt's execution printed, paged through the
//! API, followed while the attempt runs.
//!
//! Lines the task printed to stdout go to stdout, stderr's to stderr. The
//! worker's own event lines (`{"mapi_event":…}`) are shown in words unless
//! `--raw`; `--json` prints each line as one JSON object, `--output yaml`
//! as one item of a YAML sequence.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use mapi_api::views::{LogLineView, RunLogs, RunView};

use crate::client::Client;
use crate::error::Result;
use crate::output;

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The run (run_…).
    pub id: String,
    /// The attempt to read (1 is the first; default: the latest).
    #[arg(long)]
    pub attempt: Option<u32>,
    /// Keep printing what the attempt prints until it ends.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Print the worker's event lines as it printed them (JSON), not in words.
    #[arg(long)]
    pub raw: bool,
}

/// How often a follower asks for new lines.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);

pub async fn logs(client: &Client, json: bool, args: LogsArgs) -> Result<ExitCode> {
    let run: RunView = client.get(&format!("/v1/runs/{}", args.id)).await?;
    let show = Show { json, raw: args.raw, fan_out: run.tasks > 1 };
    let mut cursor = String::new();
    let mut printed = 0usize;
    loop {
        let page = page(client, &args, &cursor).await?;
        for line in &page.lines {
            show.line(line)?;
        }
        printed += page.lines.len();
        cursor.clone_from(&page.cursor);
        if page.more {
            continue;
        }
        if !args.follow || page.finished {
            if printed == 0 && !json {
                eprintln!("{}", nothing_printed(&page, args.follow));
            }
            return Ok(ExitCode::SUCCESS);
        }
        tokio::time::sleep(FOLLOW_EVERY).await;
    }
}

async fn page(client: &Client, args: &LogsArgs, cursor: &str) -> Result<RunLogs> {
    let mut query = vec![("limit", "1000".to_owned())];
    if let Some(a) = args.attempt {
        query.push(("attempt", a.to_string()));
    }
    if !cursor.is_empty() {
        query.push(("cursor", cursor.to_owned()));
    }
    let req = client.request(reqwest::Method::GET, &format!("/v1/runs/{}/logs", args.id)).query(&query);
    Ok(client.send(req).await?)
}

fn nothing_printed(page: &RunLogs, followed: bool) -> String {
    match (&page.execution, page.finished) {
        (None, false) => format!(
            "attempt {} of {} has not started yet: nothing printed (follow it with -f)",
            page.attempt, page.run
        ),
        (None, true) => format!("attempt {} of {} never started: nothing printed", page.attempt, page.run),
        (Some(_), false) if !followed => {
            format!("attempt {} of {} printed nothing yet (follow it with -f)", page.attempt, page.run)
        }
        (Some(_), _) => format!("attempt {} of {} printed nothing", page.attempt, page.run),
    }
}

struct Show {
    json: bool,
    raw: bool,
    fan_out: bool,
}

impl Show {
    fn line(&self, line: &LogLineView) -> Result<()> {
        if self.json {
            return output::record(line);
        }
        let event = if self.raw { None } else { event_in_words(&line.text) };
        let task = if self.fan_out { format!("[task {}] ", line.task) } else { String::new() };
        let text = format!("{task}{}", event.as_deref().unwrap_or(&line.text));
        if line.stream == "stderr" {
            eprintln!("{text}");
            Ok(())
        } else {
            output::line(&text)
        }
    }
}

pub use mapi_api::words::event_in_words;
