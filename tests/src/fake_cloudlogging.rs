//! FakeCloudLogging: the `entries.list` method of the Cloud Logging API v2
//! (`POST /v2/entries:list`, REST/JSON) on 127.0.0.1, written from Google's
//! REST reference rather than from the client crate's types.
//!
//! It keeps log entries in Google's JSON shape ([`FakeCloudLogging::write_line`]
//! writes one as Cloud Run does for a line a Job's task printed: a JSON
//! object line as `jsonPayload`, any other line as `textPayload`), and
//! answers a listing as the service does: the entries of the named projects
//! that match the filter, ordered by timestamp and then insertId, in pages
//! of `pageSize` (50 when unset, at most 1000) with its own opaque page
//! tokens, which continue after the last entry of the page they end and
//! only for the same query. The filter is parsed, not matched as text: the
//! subset it understands is comparisons (`=`, `!=`, `<`, `<=`, `>`, `>=`)
//! of a field path (`resource.labels.job_name`, `labels."a/b"`) with a
//! quoted string, joined by `AND` and `OR`, in parentheses; `timestamp`
//! compares as time. Anything else (`NOT`, `:`, implicit `AND`, a bare
//! value) is answered 400 `INVALID_ARGUMENT` in Google's error shape, as
//! are unknown request fields, a bad `orderBy` or `pageSize` and a page
//! token it did not give for that query. On demand it answers the next
//! calls 429, 403 or 503, or loses their answers mid-body.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{Method, Uri};
use axum::response::{IntoResponse, Response};
use mapi_domain::Timestamp;
use mapi_executor::LogStream;
use serde_json::{Value, json};

use crate::fake_cloudrun::{google_error, lost};

/// A fault for the next listing calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoggingFault {
    /// 429 `RESOURCE_EXHAUSTED` (the read-requests quota).
    Throttle,
    /// 403 `PERMISSION_DENIED`.
    Forbidden,
    /// 503 `UNAVAILABLE`.
    Unavailable,
    /// A 200 whose body breaks off: the answer is lost.
    Drop,
}

/// One `entries.list` call as the fake received it.
#[derive(Clone, Debug)]
pub struct ListCall {
    pub query: String,
    pub body: Value,
    pub status: u16,
}

/// Where a page token continues: the query it belongs to and the last entry it returned.
#[derive(Clone, Debug, PartialEq)]
struct Continuation {
    query: Value,
    after: (i128, String),
}

#[derive(Debug, Default)]
struct LoggingState {
    entries: Vec<Value>,
    serial: u64,
    faults: VecDeque<LoggingFault>,
    tokens: HashMap<String, Continuation>,
    calls: Vec<ListCall>,
}

/// The fake service.
#[derive(Clone, Debug)]
pub struct FakeCloudLogging {
    pub url: String,
    state: Arc<Mutex<LoggingState>>,
}

/// The JSON a request may carry (`projectIds` is the deprecated form of `resourceNames`).
const REQUEST_FIELDS: &[&str] =
    &["resourceNames", "projectIds", "filter", "orderBy", "pageSize", "pageToken"];

impl FakeCloudLogging {
    /// Serves `entries.list` on 127.0.0.1:0.
    pub async fn start() -> FakeCloudLogging {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the logging fake");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let fake = FakeCloudLogging { url, state: Arc::default() };
        let app = Router::new().fallback(handle).with_state(fake.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        fake
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LoggingState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Answers the next `n` listing calls with `fault`.
    pub fn fail_next(&self, fault: LoggingFault, n: usize) {
        self.lock().faults.extend(std::iter::repeat_n(fault, n));
    }

    /// Forgets every page token it gave (as expired tokens are).
    pub fn expire_page_tokens(&self) {
        self.lock().tokens.clear();
    }

    /// Every listing call received, oldest first.
    pub fn calls(&self) -> Vec<ListCall> {
        self.lock().calls.clone()
    }

    /// Every entry kept, in the order written.
    pub fn entries(&self) -> Vec<Value> {
        self.lock().entries.clone()
    }

    /// Keeps `entry` as it is (a test's own timestamp or insertId).
    pub fn write(&self, entry: Value) {
        self.lock().entries.push(entry);
    }

    /// A new insertId; ids given later sort after earlier ones.
    pub fn next_insert_id(&self) -> String {
        let mut s = self.lock();
        s.serial += 1;
        format!("fake{:012}", s.serial)
    }

    /// Writes `line`, printed by task `task` of `execution` (a full execution name) at `at`, as
    /// Cloud Run does.
    pub fn write_line(&self, execution: &str, task: u32, stream: LogStream, at: Timestamp, line: &str) {
        let entry = task_entry(execution, task, stream, &at.to_rfc3339(), &self.next_insert_id(), line);
        self.write(entry);
    }
}

/// The entry Cloud Run writes for `line` of a task of `execution`
/// (`projects/P/locations/R/jobs/J/executions/E`), at `at` (RFC 3339).
pub fn task_entry(
    execution: &str,
    task: u32,
    stream: LogStream,
    at: &str,
    insert_id: &str,
    line: &str,
) -> Value {
    let part = |i: usize| execution.split('/').nth(i).unwrap_or_default();
    let (project, region, job, short) = (part(1), part(3), part(5), part(7));
    let log = match stream {
        LogStream::Stdout => "run.googleapis.com%2Fstdout",
        LogStream::Stderr => "run.googleapis.com%2Fstderr",
    };
    let mut entry = json!({
        "insertId": insert_id,
        "logName": format!("projects/{project}/logs/{log}"),
        "resource": {
            "type": "cloud_run_job",
            "labels": {"job_name": job, "location": region, "project_id": project},
        },
        "labels": {
            "run.googleapis.com/execution_name": short,
            "run.googleapis.com/task_index": task.to_string(),
            "run.googleapis.com/task_attempt": "0",
        },
        "timestamp": at,
        "receiveTimestamp": at,
    });
    match serde_json::from_str::<Value>(line) {
        Ok(object @ Value::Object(_)) => entry["jsonPayload"] = object,
        _ => entry["textPayload"] = json!(line),
    }
    entry
}

async fn handle(
    State(fake): State<FakeCloudLogging>,
    method: Method,
    uri: Uri,
    body: bytes::Bytes,
) -> Response {
    if method != Method::POST || uri.path() != "/v2/entries:list" {
        return google_error(404, "NOT_FOUND", &format!("no such method: {method} {}", uri.path()));
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let fault = fake.lock().faults.pop_front();
    let resp = match fault {
        Some(f) => faulted(f),
        None => list(&fake, &body),
    };
    let call =
        ListCall { query: uri.query().unwrap_or_default().to_owned(), body, status: resp.status().as_u16() };
    fake.lock().calls.push(call);
    resp
}

fn faulted(fault: LoggingFault) -> Response {
    match fault {
        LoggingFault::Throttle => google_error(
            429,
            "RESOURCE_EXHAUSTED",
            "Quota exceeded for quota metric 'Read requests' of service 'logging.googleapis.com'",
        ),
        LoggingFault::Forbidden => {
            google_error(403, "PERMISSION_DENIED", "Permission 'logging.logEntries.list' denied on resource")
        }
        LoggingFault::Unavailable => {
            google_error(503, "UNAVAILABLE", "The service is currently unavailable.")
        }
        LoggingFault::Drop => lost(),
    }
}

fn invalid(message: &str) -> Response {
    google_error(400, "INVALID_ARGUMENT", message)
}

/// A listing request, checked.
struct Listing {
    projects: Vec<String>,
    filter: Expr,
    descending: bool,
    size: usize,
    token: Option<String>,
    /// What a page token must continue: the request less its page size and token.
    query: Value,
}

fn parse_request(body: &Value) -> Result<Listing, String> {
    let Some(obj) = body.as_object() else { return Err("the body is not a ListLogEntriesRequest".into()) };
    if let Some(k) = obj.keys().find(|k| !REQUEST_FIELDS.contains(&k.as_str())) {
        return Err(format!("Invalid JSON payload received. Unknown name \"{k}\""));
    }
    let projects = projects_of(body)?;
    let filter = parse_filter(body["filter"].as_str().unwrap_or_default())?;
    let descending = match body["orderBy"].as_str().unwrap_or_default() {
        "" | "timestamp asc" => false,
        "timestamp desc" => true,
        other => {
            return Err(format!(
                "Invalid orderBy \"{other}\": only \"timestamp asc\" and \"timestamp desc\""
            ));
        }
    };
    let size = match body["pageSize"].as_i64().unwrap_or(0) {
        0 => 50,
        n if (1..=1000).contains(&n) => usize::try_from(n).unwrap_or(50),
        n => return Err(format!("pageSize {n} is out of range (1 to 1000)")),
    };
    let token = body["pageToken"].as_str().filter(|t| !t.is_empty()).map(str::to_owned);
    let query =
        json!({"resourceNames": body["resourceNames"], "filter": body["filter"], "orderBy": body["orderBy"]});
    Ok(Listing { projects, filter, descending, size, token, query })
}

fn projects_of(body: &Value) -> Result<Vec<String>, String> {
    let names: Vec<&str> =
        body["resourceNames"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    if names.is_empty() {
        return Err("resourceNames is required".into());
    }
    names
        .iter()
        .map(|n| {
            n.strip_prefix("projects/")
                .filter(|p| !p.is_empty() && !p.contains('/'))
                .map(str::to_owned)
                .ok_or_else(|| format!("Invalid resource name \"{n}\""))
        })
        .collect()
}

fn list(fake: &FakeCloudLogging, body: &Value) -> Response {
    let listing = match parse_request(body) {
        Ok(l) => l,
        Err(message) => return invalid(&message),
    };
    let mut s = fake.lock();
    let after = match &listing.token {
        None => None,
        Some(t) => match s.tokens.get(t) {
            Some(c) if c.query == listing.query => Some(c.after.clone()),
            _ => return invalid("The page token is invalid or does not belong to this query."),
        },
    };
    let rest = matching(&s.entries, &listing, after.as_ref());
    let page: Vec<Value> = rest.iter().take(listing.size).map(|(_, e)| e.clone()).collect();
    // A next page only when entries remain past this one; its token continues after this page.
    let next = rest.get(listing.size).and(rest.get(listing.size.saturating_sub(1))).map(|(p, _)| p.clone());
    let mut answer = json!({"entries": page});
    if let Some(after) = next {
        s.serial += 1;
        let token = format!("page-{}-{}", s.serial, s.tokens.len());
        s.tokens.insert(token.clone(), Continuation { query: listing.query.clone(), after });
        answer["nextPageToken"] = json!(token);
    }
    axum::Json(answer).into_response()
}

/// The entries `listing` selects past `after`, in its order, with their positions.
fn matching(
    entries: &[Value],
    listing: &Listing,
    after: Option<&(i128, String)>,
) -> Vec<((i128, String), Value)> {
    let mut found: Vec<((i128, String), Value)> = entries
        .iter()
        .filter(|e| in_projects(e, &listing.projects) && listing.filter.matches(e))
        .filter_map(|e| Some((position(e)?, e.clone())))
        .filter(|(p, _)| after.is_none_or(|a| if listing.descending { p < a } else { p > a }))
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    if listing.descending {
        found.reverse();
    }
    found
}

fn in_projects(entry: &Value, projects: &[String]) -> bool {
    let log = entry["logName"].as_str().unwrap_or_default();
    projects.iter().any(|p| log.starts_with(&format!("projects/{p}/logs/")))
}

/// The order of the listing: timestamp (nanoseconds), then insertId.
fn position(entry: &Value) -> Option<(i128, String)> {
    let at = nanos(entry["timestamp"].as_str()?)?;
    Some((at, entry["insertId"].as_str().unwrap_or_default().to_owned()))
}

fn nanos(rfc3339: &str) -> Option<i128> {
    let t = time::OffsetDateTime::parse(rfc3339, &time::format_description::well_known::Rfc3339).ok()?;
    Some(t.unix_timestamp_nanos())
}

/// A parsed filter.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    All,
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Compare { path: Vec<String>, op: Op, value: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Expr {
    fn matches(&self, entry: &Value) -> bool {
        match self {
            Expr::All => true,
            Expr::And(a, b) => a.matches(entry) && b.matches(entry),
            Expr::Or(a, b) => a.matches(entry) || b.matches(entry),
            Expr::Compare { path, op, value } => compare(entry, path, *op, value),
        }
    }
}

fn compare(entry: &Value, path: &[String], op: Op, value: &str) -> bool {
    let Some(field) = path.iter().try_fold(entry, |v, k| v.get(k.as_str())) else { return false };
    let field = match field {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return false,
    };
    let ordering = if matches!(path, [p] if p == "timestamp" || p == "receiveTimestamp") {
        match (nanos(&field), nanos(value)) {
            (Some(a), Some(b)) => a.cmp(&b),
            _ => return false,
        }
    } else {
        field.as_str().cmp(value)
    };
    use std::cmp::Ordering::{Equal, Greater, Less};
    match op {
        Op::Eq => ordering == Equal,
        Op::Ne => ordering != Equal,
        Op::Lt => ordering == Less,
        Op::Le => ordering != Greater,
        Op::Gt => ordering == Greater,
        Op::Ge => ordering != Less,
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Text(String),
    Dot,
    Open,
    Close,
    Op(Op),
}

fn tokens(filter: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = filter.chars().collect();
    let (mut out, mut i) = (Vec::new(), 0);
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let (token, used) = match c {
            c if c.is_whitespace() => (None, 1),
            '(' => (Some(Token::Open), 1),
            ')' => (Some(Token::Close), 1),
            '.' => (Some(Token::Dot), 1),
            '=' => (Some(Token::Op(Op::Eq)), 1),
            '!' if next == Some('=') => (Some(Token::Op(Op::Ne)), 2),
            '<' if next == Some('=') => (Some(Token::Op(Op::Le)), 2),
            '>' if next == Some('=') => (Some(Token::Op(Op::Ge)), 2),
            '<' => (Some(Token::Op(Op::Lt)), 1),
            '>' => (Some(Token::Op(Op::Gt)), 1),
            '"' => {
                let (text, used) = string_at(&chars[i..])?;
                (Some(Token::Text(text)), used)
            }
            c if c.is_alphanumeric() || c == '_' || c == '-' => {
                let len =
                    chars[i..].iter().take_while(|c| c.is_alphanumeric() || **c == '_' || **c == '-').count();
                (Some(Token::Word(chars[i..i + len].iter().collect())), len)
            }
            other => return Err(format!("Unparseable filter: unexpected '{other}' at {i}")),
        };
        out.extend(token);
        i += used;
    }
    Ok(out)
}

/// The string literal opening `chars`, and how many characters it took.
fn string_at(chars: &[char]) -> Result<(String, usize), String> {
    let (mut text, mut i) = (String::new(), 1);
    while let Some(&c) = chars.get(i) {
        match c {
            '"' => return Ok((text, i + 1)),
            '\\' => {
                text.extend(chars.get(i + 1));
                i += 2;
            }
            c => {
                text.push(c);
                i += 1;
            }
        }
    }
    Err("Unparseable filter: unterminated string".into())
}

/// Parses the subset of the filter language this fake understands.
pub fn parse_filter(filter: &str) -> Result<Expr, String> {
    let tokens = tokens(filter)?;
    if tokens.is_empty() {
        return Ok(Expr::All);
    }
    let mut p = Parser { tokens, at: 0 };
    let e = p.or()?;
    match p.tokens.get(p.at) {
        None => Ok(e),
        Some(t) => Err(format!("Unparseable filter: unexpected {t:?} (this fake knows no implicit AND)")),
    }
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn peek_word(&self, w: &str) -> bool {
        matches!(self.tokens.get(self.at), Some(Token::Word(x)) if x == w)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.at).cloned();
        self.at += 1;
        t
    }

    fn or(&mut self) -> Result<Expr, String> {
        let mut e = self.and()?;
        while self.peek_word("OR") {
            self.at += 1;
            e = Expr::Or(Box::new(e), Box::new(self.and()?));
        }
        Ok(e)
    }

    fn and(&mut self) -> Result<Expr, String> {
        let mut e = self.unary()?;
        while self.peek_word("AND") {
            self.at += 1;
            e = Expr::And(Box::new(e), Box::new(self.unary()?));
        }
        Ok(e)
    }

    fn unary(&mut self) -> Result<Expr, String> {
        if self.tokens.get(self.at) == Some(&Token::Open) {
            self.at += 1;
            let e = self.or()?;
            return match self.next() {
                Some(Token::Close) => Ok(e),
                t => Err(format!("Unparseable filter: expected ')', found {t:?}")),
            };
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<Expr, String> {
        let path = self.path()?;
        let op = match self.next() {
            Some(Token::Op(op)) => op,
            t => {
                return Err(format!("Unparseable filter: expected a comparison after {path:?}, found {t:?}"));
            }
        };
        match self.next() {
            Some(Token::Text(value)) => Ok(Expr::Compare { path, op, value }),
            t => Err(format!("Unparseable filter: this fake compares with quoted strings only, found {t:?}")),
        }
    }

    fn path(&mut self) -> Result<Vec<String>, String> {
        let mut path = Vec::new();
        loop {
            match self.next() {
                Some(Token::Word(w)) if !matches!(w.as_str(), "AND" | "OR" | "NOT") => path.push(w),
                Some(Token::Text(t)) if !path.is_empty() => path.push(t),
                t => return Err(format!("Unparseable filter: expected a field, found {t:?}")),
            }
            if self.tokens.get(self.at) != Some(&Token::Dot) {
                return Ok(path);
            }
            self.at += 1;
        }
    }
}
