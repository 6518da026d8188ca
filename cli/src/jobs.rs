//! `mapi jobs`: submit an item job from a JSON Lines file, and follow it.

use crate::output::{Cell, Table, print};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};

use crate::client::{Client, ClientError};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[derive(Debug, Subcommand)]
pub enum JobsCmd {
    /// Submit a job: METHOD on every line of a JSON Lines file.
    Submit {
        /// An item method (`mapi api GET /v1/usage` lists them).
        method: String,
        /// One JSON item per line; blank lines are skipped.
        #[arg(long)]
        items: PathBuf,
        /// A parameter of the method, NAME=VALUE (VALUE as JSON, else a string); repeatable.
        #[arg(long = "param", short = 'p')]
        params: Vec<String>,
        /// Follow the job until it finishes.
        #[arg(long)]
        watch: bool,
        #[arg(long, env = "MAPI_TENANT")]
        tenant: Option<String>,
        #[arg(long, env = "MAPI_PROJECT")]
        project: Option<String>,
    },
    /// A job's state, counts, timings and cost.
    Get { id: String },
    /// Follow a job until it finishes.
    Watch { id: String },
    /// A job's finished items with their results or errors.
    Items {
        id: String,
        /// succeeded or failed.
        #[arg(long)]
        state: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[arg(long)]
        page_token: Option<String>,
    },
    /// One item's log: a JSON line per attempt.
    Log { id: String, idx: u64 },
    /// Cancel a job.
    Cancel { id: String },
    /// Re-run only the failed items.
    RetryFailed { id: String },
}

fn is_final(v: &Value) -> bool {
    matches!(v["state"].as_str(), Some("succeeded" | "completed_with_errors" | "failed"))
}

fn describe(v: &Value) -> String {
    let c = &v["counts"];
    format!(
        "job       {}\nmethod    {}\nstate     {}\nitems     {} total: {} succeeded, {} failed, {} running, {} pending, {} cancelled\nround     {}\ncreated   {}\nfinished  {}\ncost      {} ms of method time, {} at list prices\n",
        v["id"].as_str().unwrap_or("?"),
        v["method"].as_str().unwrap_or("?"),
        v["state"].as_str().unwrap_or("?"),
        c["total"],
        c["succeeded"],
        c["failed"],
        c["running"],
        c["pending"],
        c["cancelled"],
        v["round"],
        v["created_at"].as_str().unwrap_or("?"),
        v["finished_at"].as_str().unwrap_or("-"),
        v["cost"]["duration_ms"],
        mapi_cost::format_micros(v["cost"]["cost_micros"].as_i64().unwrap_or(0), "USD"),
    )
}

fn exit_for(v: &Value) -> ExitCode {
    if v["state"] == "succeeded" { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

async fn watch(client: &Client, id: &str, quiet: bool) -> Result<Value> {
    // A terminal redraws one line; a file or pipe gets a line per change.
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut last = String::new();
    loop {
        let v: Value = client.get(&format!("/v1/jobs/{id}")).await?;
        if !quiet {
            let c = &v["counts"];
            let line = format!(
                "{:<22} {}/{} done ({} failed)",
                v["state"].as_str().unwrap_or("?"),
                c["succeeded"].as_u64().unwrap_or(0) + c["failed"].as_u64().unwrap_or(0),
                c["total"],
                c["failed"]
            );
            match (terminal, line != last) {
                (true, _) => eprint!("\r{line}   "),
                (false, true) => eprintln!("{line}"),
                (false, false) => {}
            }
            last = line;
        }
        if is_final(&v) {
            if !quiet && terminal {
                eprintln!();
            }
            return Ok(v);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A page of items as a table; `jobs items` shows the next page's token under it.
fn items_table(page: &Value) -> String {
    let mut table =
        Table::new(&["IDX", "STATE", "ROUND", "ATT", "RESULT OR ERROR"]).right(&[0, 2, 3]).flex(&[4]);
    // Numbers as they are: `Value`'s Display ignores widths, so every cell is a string first.
    let number = |v: &Value| v.as_u64().map_or_else(|| "?".to_owned(), |n| n.to_string());
    for i in page["items"].as_array().into_iter().flatten() {
        let state = i["state"].as_str().unwrap_or("?");
        let what = if state == "succeeded" {
            i["result"].to_string()
        } else if i["error"].is_object() {
            format!(
                "{}: {}",
                i["error"]["type"].as_str().unwrap_or("?"),
                i["error"]["message"].as_str().unwrap_or("?")
            )
        } else {
            String::new()
        };
        table.row(vec![
            number(&i["idx"]).into(),
            Cell::state(state),
            number(&i["round"]).into(),
            number(&i["attempts"]).into(),
            what.into(),
        ]);
    }
    let mut out = crate::output::listing(&table, "no items in this state");
    if let Some(t) = page["next_page_token"].as_str() {
        out.push_str(&format!("more: --page-token {t}\n"));
    }
    out
}

/// Reads one JSON item per non-blank line.
pub fn read_items(path: &std::path::Path) -> Result<Vec<Value>> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| serde_json::from_str(l).map_err(|e| not_an_item(path, n + 1, &e).into()))
        .collect()
}

/// Names the file, line and column of a line that is not one JSON value, in our words.
fn not_an_item(path: &std::path::Path, line: usize, e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let what = match e.classify() {
        Category::Eof => "ends before its JSON value does",
        Category::Syntax if e.to_string().starts_with("trailing characters") => {
            "holds more than one JSON value"
        }
        _ => "is not valid JSON",
    };
    format!(
        "{} line {line} {what} (near column {}): put exactly one JSON value on each line, e.g. {{\"x\": 3}}",
        path.display(),
        e.column()
    )
}

pub async fn run(
    client: &Client,
    scope: impl FnOnce(Option<String>, Option<String>) -> Result<(String, String)>,
    params: impl FnOnce(&[String]) -> Result<std::collections::BTreeMap<String, Value>>,
    cmd: JobsCmd,
    json_out: bool,
) -> Result<ExitCode> {
    match cmd {
        JobsCmd::Submit { method, items, params: raw, watch: follow, tenant, project } => {
            let (t, p) = scope(tenant, project)?;
            let body =
                json!({"method": method, "items": read_items(&items)?, "options": {"params": params(&raw)?}});
            let v: Value = client
                .send(client.request(Method::POST, &format!("/v1/tenants/{t}/projects/{p}/jobs")).json(&body))
                .await?;
            let id = v["id"].as_str().unwrap_or_default().to_owned();
            if !follow {
                print(json_out, &v, || format!("submitted {id} ({} items)\n", v["counts"]["total"]))?;
                return Ok(ExitCode::SUCCESS);
            }
            if !json_out {
                eprintln!("submitted {id}");
            }
            let done = watch(client, &id, json_out).await?;
            print(json_out, &done, || describe(&done))?;
            Ok(exit_for(&done))
        }
        JobsCmd::Get { id } => {
            let v: Value = client.get(&format!("/v1/jobs/{id}")).await?;
            print(json_out, &v, || describe(&v))?;
            Ok(ExitCode::SUCCESS)
        }
        JobsCmd::Watch { id } => {
            let done = watch(client, &id, json_out).await?;
            print(json_out, &done, || describe(&done))?;
            Ok(exit_for(&done))
        }
        JobsCmd::Items { id, state, limit, page_token } => {
            let mut req = client
                .request(Method::GET, &format!("/v1/jobs/{id}/items"))
                .query(&[("page_size", limit.to_string())]);
            if let Some(s) = state {
                req = req.query(&[("state", s)]);
            }
            if let Some(t) = page_token {
                req = req.query(&[("page_token", t)]);
            }
            let v: Value = client.send(req).await?;
            print(json_out, &v, || items_table(&v))?;
            Ok(ExitCode::SUCCESS)
        }
        JobsCmd::Log { id, idx } => {
            let resp = client
                .request(Method::GET, &format!("/v1/jobs/{id}/items/{idx}/log"))
                .send()
                .await
                .map_err(|source| ClientError::Unreachable { url: client.url.clone(), source })?;
            let ok = resp.status().is_success();
            let text = resp.text().await?;
            if ok {
                crate::output::write(&text)?;
                Ok(ExitCode::SUCCESS)
            } else {
                let detail = serde_json::from_str::<Value>(&text)
                    .ok()
                    .and_then(|v| v["detail"].as_str().map(str::to_owned));
                Err(detail.unwrap_or(text).into())
            }
        }
        JobsCmd::Cancel { id } => {
            let v: Value =
                client.send(client.request(Method::POST, &format!("/v1/jobs/{id}/cancel"))).await?;
            print(json_out, &v, || {
                format!("{id} is {}: cancel requested\n", v["state"].as_str().unwrap_or("?"))
            })?;
            Ok(ExitCode::SUCCESS)
        }
        JobsCmd::RetryFailed { id } => {
            let v: Value =
                client.send(client.request(Method::POST, &format!("/v1/jobs/{id}/retry-failed"))).await?;
            print(json_out, &v, || format!("{id}: failed items enqueued again (round {})\n", v["round"]))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::read_items;

    #[test]
    fn a_bad_items_line_is_named_by_file_line_and_column_in_our_words() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("items.jsonl");
        std::fs::write(&path, "{\"x\": 1}\n\n{\"x\": nope}\n").expect("write");
        let err = read_items(&path).expect_err("line 3 is bad").to_string();
        assert!(err.contains("items.jsonl line 3 is not valid JSON (near column 8)"), "{err}");
        assert!(!err.contains("expected"), "no parser wording: {err}");
        std::fs::write(&path, "{\"x\": 1} {\"x\": 2}\n{\"x\":").expect("write");
        let err = read_items(&path).expect_err("bad").to_string();
        assert!(err.contains("line 1 holds more than one JSON value"), "{err}");
        std::fs::write(&path, "{\"x\":").expect("write");
        let err = read_items(&path).expect_err("bad").to_string();
        assert!(err.contains("line 1 ends before its JSON value does"), "{err}");
        std::fs::write(&path, "{\"x\": 1}\n3\n").expect("write");
        assert_eq!(read_items(&path).expect("fine").len(), 2);
    }
}
