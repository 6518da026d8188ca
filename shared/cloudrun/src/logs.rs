//! What an execution's tasks printed, read back from Cloud Logging
//! (`entries.list` of `LoggingServiceV2`), a page at a time.
//!
//! On Cloud Run every line a task prints becomes a log entry of the
//! `cloud_run_job` resource, labelled with the execution's short name and
//! the task's index, in the log `run.googleapis.com%2Fstdout` or `…stderr`
//! (the names are in [`crate::assumptions`]). A JSON line arrives as a
//! `jsonPayload` and is rendered back to one JSON line (keys in order; the
//! fields Cloud Run lifts out of it, such as `severity`, are not put back);
//! any other line is its `textPayload`.
//!
//! The query names the project, the Job, the execution and both logs, and
//! reads from a lower bound on the timestamps (the execution's `createTime`
//! less [`crate::assumptions::LOG_SKEW_BEFORE_CREATION_S`] on the first
//! call), oldest first.
//!
//! The cursor (opaque to callers: `cl1.` and base64url of a small JSON
//! object) carries the execution it was made for, the lower bound of its
//! query, the (timestamp, insertId) of the last entry returned, and
//! Logging's page token when the listing has a next page. A call continues
//! with the page token when there is one (the same query), and otherwise
//! queries again from the last entry's timestamp, skipping the entries at
//! that timestamp up to and including its insertId: entries of equal
//! timestamps are listed in insertId order
//! ([`crate::assumptions::LOG_EQUAL_TIMESTAMPS_BY_INSERT_ID`]), so nothing is
//! returned twice or skipped. That also makes a cursor taken at the end good
//! for a follower: asked again later, it returns what was written since. A
//! page token Logging refuses (expired) falls back to the position.
//!
//! Limits: an entry Logging receives late with a timestamp before the last
//! one a follower was given is not returned to that follower; an entry
//! without a timestamp cannot be placed and is left out.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use google_cloud_gax::error::Error as GaxError;
use google_cloud_logging_v2::client::LoggingServiceV2;
use google_cloud_logging_v2::model::{ListLogEntriesRequest, ListLogEntriesResponse, LogEntry, log_entry};
use google_cloud_wkt::Timestamp as WireTime;
use mapi_domain::Timestamp;
use mapi_executor::{
    ExecutionHandle, ExecutorError, LogLine, LogPage, LogStream, MAX_LOG_PAGE, bounded_line,
};
use serde::{Deserialize, Serialize};

use crate::assumptions;

/// Every cursor this module makes starts so.
const CURSOR_PREFIX: &str = "cl1.";

/// The most `entries.list` calls one page takes (pages of entries it had
/// returned already, or a listing that answers short pages).
const MAX_CALLS: usize = 4;

/// The execution a handle names, split into what the query needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target<'a> {
    pub project: &'a str,
    pub job: &'a str,
    pub execution: &'a str,
}

impl<'a> Target<'a> {
    /// `projects/P/locations/R/jobs/J/executions/E`, or `None` for any other shape.
    pub(crate) fn of(handle: &'a ExecutionHandle) -> Option<Target<'a>> {
        match handle.0.split('/').collect::<Vec<_>>().as_slice() {
            ["projects", p, "locations", r, "jobs", j, "executions", e]
                if [p, r, j, e].iter().all(|s| !s.is_empty()) =>
            {
                Some(Target { project: p, job: j, execution: e })
            }
            _ => None,
        }
    }
}

/// Where an entry stands in the listing's order: timestamp, then insertId.
#[derive(Debug, Clone, PartialEq)]
struct Position {
    at: WireTime,
    insert_id: String,
}

impl Position {
    fn of(entry: &LogEntry) -> Option<Position> {
        Some(Position { at: entry.timestamp?, insert_id: entry.insert_id.clone() })
    }

    fn key(&self) -> (i64, i32, &str) {
        (self.at.seconds(), self.at.nanos(), &self.insert_id)
    }
}

/// Where the next page starts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Cursor {
    /// The execution's short name: a cursor continues only the execution it was made for.
    execution: String,
    /// The query's lower bound on timestamps; `None` until the execution's creation was read.
    floor: Option<WireTime>,
    /// The last entry returned: it and everything before it are skipped.
    last: Option<Position>,
    /// Logging's token of the next page of the query from `floor`.
    page: Option<String>,
}

/// The cursor as it travels (short keys: it goes in URLs).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireCursor {
    e: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    f: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    l: Option<(String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    p: Option<String>,
}

impl Cursor {
    /// The start of `execution`'s output.
    pub(crate) fn start(execution: &str) -> Cursor {
        Cursor { execution: execution.to_owned(), floor: None, last: None, page: None }
    }

    /// `text` (`None`: the start) for `execution`; a cursor this module did not make for it is
    /// refused.
    pub(crate) fn parse(text: Option<&str>, execution: &str) -> Result<Cursor, ExecutorError> {
        let Some(text) = text else { return Ok(Cursor::start(execution)) };
        let refused = || {
            ExecutorError::Cursor(format!("the log cursor is not one this executor gave out for {execution}"))
        };
        let bytes = text.strip_prefix(CURSOR_PREFIX).and_then(|b| URL_SAFE_NO_PAD.decode(b).ok());
        let wire: WireCursor = bytes.and_then(|b| serde_json::from_slice(&b).ok()).ok_or_else(refused)?;
        let time = |t: &str| WireTime::try_from(t).ok();
        let floor = wire.f.as_deref().map(|f| time(f).ok_or_else(refused)).transpose()?;
        let last = match wire.l {
            Some((at, insert_id)) => Some(Position { at: time(&at).ok_or_else(refused)?, insert_id }),
            None => None,
        };
        // A page token continues a query, which has a lower bound.
        if wire.e != execution || (wire.p.is_some() && floor.is_none()) {
            return Err(refused());
        }
        Ok(Cursor { execution: wire.e, floor, last, page: wire.p })
    }

    pub(crate) fn render(&self) -> String {
        let wire = WireCursor {
            e: self.execution.clone(),
            f: self.floor.map(String::from),
            l: self.last.as_ref().map(|p| (String::from(p.at), p.insert_id.clone())),
            p: self.page.clone(),
        };
        let json = serde_json::to_vec(&wire).unwrap_or_default();
        format!("{CURSOR_PREFIX}{}", URL_SAFE_NO_PAD.encode(json))
    }

    pub(crate) fn has_floor(&self) -> bool {
        self.floor.is_some()
    }

    /// Reads from `created` (less the skew Cloud Run may have) on.
    pub(crate) fn read_from_creation(&mut self, created: WireTime) {
        let skew = i64::try_from(assumptions::LOG_SKEW_BEFORE_CREATION_S).unwrap_or(0);
        self.floor = Some(WireTime::clamp(created.seconds().saturating_sub(skew), created.nanos()));
    }

    /// A page with nothing in it, ending here.
    pub(crate) fn empty_page(&self) -> LogPage {
        LogPage { lines: Vec::new(), cursor: self.render(), more: false }
    }

    /// Continues without a page token: a new query from the last entry's timestamp.
    fn settle(&mut self) {
        self.page = None;
        if let Some(last) = &self.last {
            self.floor = Some(last.at);
        }
    }

    /// Whether `p` was returned already (it is the last entry returned, or before it).
    fn passed(&self, p: &Position) -> bool {
        self.last.as_ref().is_some_and(|l| p.key() <= l.key())
    }
}

/// The page after `at` of `target`'s output, at most `limit` lines (clamped to
/// 1..=[`MAX_LOG_PAGE`]). `at` must have its lower bound ([`Cursor::read_from_creation`]).
pub(crate) async fn read(
    client: &LoggingServiceV2,
    target: &Target<'_>,
    mut at: Cursor,
    limit: usize,
) -> Result<LogPage, ExecutorError> {
    let limit = limit.clamp(1, MAX_LOG_PAGE);
    let mut lines = Vec::new();
    for _ in 0..MAX_CALLS {
        let listed = list(client, target, &mut at, limit).await?;
        let cut = take(&listed.entries, &mut at, &mut lines, limit);
        if cut || listed.next_page_token.is_empty() {
            at.settle();
            return Ok(LogPage { lines, cursor: at.render(), more: cut });
        }
        at.page = Some(listed.next_page_token);
        if lines.len() == limit {
            break;
        }
    }
    Ok(LogPage { lines, cursor: at.render(), more: true })
}

/// Appends the entries not passed yet until `limit` lines are held; `true` when an entry was
/// left for the next page.
fn take(entries: &[LogEntry], at: &mut Cursor, lines: &mut Vec<LogLine>, limit: usize) -> bool {
    for entry in entries {
        let Some(position) = Position::of(entry) else { continue };
        if at.passed(&position) {
            continue;
        }
        if lines.len() == limit {
            return true;
        }
        lines.push(line_of(entry));
        at.last = Some(position);
    }
    false
}

/// One `entries.list` call; a page token Logging refuses is dropped for the position.
async fn list(
    client: &LoggingServiceV2,
    target: &Target<'_>,
    at: &mut Cursor,
    limit: usize,
) -> Result<ListLogEntriesResponse, ExecutorError> {
    match send(client, target, at, limit).await {
        Err(e) if at.page.is_some() && e.http_status_code() == Some(400) => {
            tracing::warn!(execution = target.execution, error = %e, "Cloud Logging refused a page token: reading on from the last entry");
            at.settle();
            send(client, target, at, limit).await.map_err(|e| failed(target, &e))
        }
        sent => sent.map_err(|e| failed(target, &e)),
    }
}

async fn send(
    client: &LoggingServiceV2,
    target: &Target<'_>,
    at: &Cursor,
    limit: usize,
) -> Result<ListLogEntriesResponse, GaxError> {
    let floor = at.floor.unwrap_or_default();
    let request = ListLogEntriesRequest::new()
        .set_resource_names([format!("projects/{}", target.project)])
        .set_filter(filter(target, floor))
        .set_order_by("timestamp asc")
        .set_page_size(i32::try_from(limit).unwrap_or(i32::MAX))
        .set_page_token(at.page.clone().unwrap_or_default());
    client.list_log_entries().with_request(request).send().await
}

/// What a failed `entries.list` means: a refused query is this reader's mistake; anything else
/// (no answer, 429, 403, 5xx…) is Cloud Logging unavailable to this caller for now.
fn failed(target: &Target<'_>, e: &GaxError) -> ExecutorError {
    let execution = target.execution;
    match e.http_status_code() {
        Some(400) => ExecutorError::Internal(
            format!("Cloud Logging refused the query for {execution}'s output: {e}").into(),
        ),
        _ => ExecutorError::Unavailable(
            format!("Cloud Logging could not list {execution}'s output: {e}").into(),
        ),
    }
}

/// The entries of `target`'s tasks' stdout and stderr timestamped at or after `floor`.
pub(crate) fn filter(target: &Target<'_>, floor: WireTime) -> String {
    let log = |id: &str| format!("logName={}", quoted(&format!("projects/{}/logs/{id}", target.project)));
    format!(
        "resource.type={} AND resource.labels.job_name={} AND labels.{}={} AND ({} OR {}) AND timestamp>={}",
        quoted(assumptions::LOG_RESOURCE_TYPE),
        quoted(target.job),
        quoted(assumptions::LOG_EXECUTION_LABEL),
        quoted(target.execution),
        log(assumptions::LOG_STDOUT),
        log(assumptions::LOG_STDERR),
        quoted(&String::from(floor)),
    )
}

/// A string literal of the filter language.
fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn line_of(entry: &LogEntry) -> LogLine {
    // Cloud Run labels every line a task prints with its index; one without counts as task 0.
    let task = entry.labels.get(assumptions::LOG_TASK_LABEL).and_then(|t| t.parse().ok()).unwrap_or(0);
    let stream =
        if entry.log_name.ends_with(assumptions::LOG_STDERR) { LogStream::Stderr } else { LogStream::Stdout };
    let at = entry.timestamp.map(|t| {
        Timestamp::from_micros(
            t.seconds().saturating_mul(1_000_000).saturating_add(i64::from(t.nanos() / 1000)),
        )
    });
    LogLine { task, stream, at, text: bounded_line(&text_of(entry)) }
}

/// The line as printed: the text, or the JSON object rendered back to one line.
fn text_of(entry: &LogEntry) -> String {
    match &entry.payload {
        Some(log_entry::Payload::TextPayload(text)) => text.strip_suffix('\n').unwrap_or(text).to_owned(),
        Some(log_entry::Payload::JsonPayload(object)) => serde_json::to_string(object).unwrap_or_default(),
        Some(log_entry::Payload::ProtoPayload(any)) => serde_json::to_string(any).unwrap_or_default(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> WireTime {
        WireTime::try_from(s).expect("time")
    }

    #[test]
    fn cursors_round_trip_and_refuse_what_they_did_not_make() {
        let c = Cursor {
            execution: "j-1".to_owned(),
            floor: Some(at("2026-01-02T03:04:05.123456789Z")),
            last: Some(Position { at: at("2026-01-02T03:04:06Z"), insert_id: "a\"b".to_owned() }),
            page: Some("tok:1".to_owned()),
        };
        assert_eq!(Cursor::parse(Some(&c.render()), "j-1").expect("ours"), c);
        assert_eq!(Cursor::parse(None, "j-1").expect("start"), Cursor::start("j-1"));
        assert!(matches!(Cursor::parse(Some(&c.render()), "j-2"), Err(ExecutorError::Cursor(_))));
        let forged = |json: &str| format!("{CURSOR_PREFIX}{}", URL_SAFE_NO_PAD.encode(json));
        for bad in [
            String::new(),
            "not-a-cursor!".to_owned(),
            c.render().trim_start_matches(CURSOR_PREFIX).to_owned(),
            format!("{CURSOR_PREFIX}!!"),
            forged(r#"{"e":"j-1","x":1}"#),
            forged(r#"{"e":"j-1","f":"yesterday"}"#),
            forged(r#"{"e":"j-1","p":"tok"}"#),
        ] {
            assert!(matches!(Cursor::parse(Some(&bad), "j-1"), Err(ExecutorError::Cursor(_))), "{bad}");
        }
    }

    #[test]
    fn entries_up_to_the_last_one_returned_are_passed() {
        let mut c = Cursor::start("j-1");
        c.last = Some(Position { at: at("2026-01-02T03:04:05Z"), insert_id: "b".to_owned() });
        let p = |t: &str, id: &str| Position { at: at(t), insert_id: id.to_owned() };
        assert!(c.passed(&p("2026-01-02T03:04:05Z", "a")));
        assert!(c.passed(&p("2026-01-02T03:04:05Z", "b")));
        assert!(!c.passed(&p("2026-01-02T03:04:05Z", "c")));
        assert!(c.passed(&p("2026-01-02T03:04:04.999Z", "z")));
        assert!(!c.passed(&p("2026-01-02T03:04:05.000001Z", "a")));
    }

    #[test]
    fn the_filter_names_the_execution_both_logs_and_the_lower_bound() {
        let handle = ExecutionHandle("projects/p/locations/r/jobs/j/executions/j-abc".to_owned());
        let target = Target::of(&handle).expect("a full name");
        let f = filter(&target, at("2026-01-02T03:04:05Z"));
        assert_eq!(
            f,
            "resource.type=\"cloud_run_job\" AND resource.labels.job_name=\"j\" AND \
             labels.\"run.googleapis.com/execution_name\"=\"j-abc\" AND \
             (logName=\"projects/p/logs/run.googleapis.com%2Fstdout\" OR \
             logName=\"projects/p/logs/run.googleapis.com%2Fstderr\") AND timestamp>=\"2026-01-02T03:04:05Z\""
        );
        for bad in ["exec-0", "projects/p/locations/r/jobs/j/executions/", "projects/p/locations/r/jobs/j"] {
            assert_eq!(Target::of(&ExecutionHandle(bad.to_owned())), None, "{bad}");
        }
    }
}
