//! Hostile input, as tables. Every case is a request a hostile or broken
//! client can send, and the answer it must get. The cases: bodies over
//! each limit, JSON nested 10,000 deep, invalid UTF-8, numbers no field
//! holds, unknown fields, traversal in ids and object paths, ragged CSV,
//! wrong methods, forged credentials, reused idempotency keys, abusive
//! heads, heads trickled a byte at a time, bodies of the standard inference
//! protocols (JSON and binary tensors) that are no request. The answer: the status (a 4xx,
//! never a 5xx), `application/problem+json`, the stable `code`, and a
//! non-empty `detail` in our words rather than a parser's (where a limit
//! is hit, naming its setting).
//!
//! Each family runs on one platform, with its limits set small, and
//! `/health` must answer 200 after it. Every request is written as bytes to
//! a fresh TCP connection, so the server sees exactly what the case says:
//! reqwest would normalise `../`, refuse bad header bytes and frame bodies
//! itself. A test checks every case of its families before it fails, and
//! its message lists each failing case with the answer it got.

use std::net::SocketAddr;
use std::time::Duration;

use futures::StreamExt;
use mapi_tests::TestPlatform;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedReadHalf;

/// A status and the problem code that goes with it.
type Expect = (u16, &'static str);

const INVALID: Expect = (400, "INVALID_ARGUMENT");
const UNAUTHENTICATED: Expect = (401, "UNAUTHENTICATED");
const FORBIDDEN: Expect = (403, "FORBIDDEN");
const NOT_FOUND: Expect = (404, "NOT_FOUND");
const METHOD: Expect = (405, "METHOD_NOT_ALLOWED");
const TIMEOUT: Expect = (408, "REQUEST_TIMEOUT");
const REUSED: Expect = (409, "FAILED_PRECONDITION");
const TOO_LARGE: Expect = (413, "PAYLOAD_TOO_LARGE");
const URI_TOO_LONG: Expect = (414, "URI_TOO_LONG");
const MEDIA: Expect = (415, "UNSUPPORTED_MEDIA_TYPE");
const HEADERS: Expect = (431, "HEADERS_TOO_LARGE");

/// Well-formed ids of things that do not exist.
const RUN: &str = "run_01arz3ndektsv4rrffq69g5fav";
const JOB: &str = "job_01arz3ndektsv4rrffq69g5fav";
const MV: &str = "mv_01arz3ndektsv4rrffq69g5fav";
const DS: &str = "ds_01arz3ndektsv4rrffq69g5fav";

const CSV: &str = "x,y\n1,2\n2,4.1\n3,5.9\n";

/// How long a case may wait for its answer, and a slow one for its close.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);
const CLOSE_WITHIN: Duration = Duration::from_secs(4);
/// The pause between the bytes of a trickled head.
const TRICKLE_GAP: Duration = Duration::from_millis(50);

/// What a detail must not say: a parser's or a framework's own words
/// (serde_json, serde, axum's rejections, Rust's number parsing, httparse).
const PARSER_WORDS: &[&str] = &[
    "failed to deserialize",
    "failed to parse",
    "failed to buffer",
    "expected value",
    "expected ident",
    "expected `",
    "invalid type:",
    "invalid value:",
    "invalid length",
    "invalid number",
    "invalid escape",
    "invalid unicode code point",
    "invalid digit",
    "invalid utf-8",
    "eof while parsing",
    "recursion limit exceeded",
    "trailing characters",
    "trailing comma",
    "key must be a string",
    "lone leading surrogate",
    "unexpected end of hex escape",
    "control character (\\u0000-\\u001f)",
    "number out of range",
    "too large to fit in target type",
    "cannot parse",
    "could not be parsed",
    "invalid url",
    "length limit exceeded",
    "httparse",
    "serde",
];

/// A request as it is written: `host`, `connection: close` and, unless the
/// case frames its body itself, `content-length` are added.
#[derive(Clone, Debug)]
struct Req {
    method: &'static str,
    target: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl Req {
    fn new(method: &'static str, target: impl Into<String>) -> Req {
        Req { method, target: target.into(), headers: Vec::new(), body: Vec::new() }
    }

    fn header(mut self, name: &str, value: impl AsRef<[u8]>) -> Req {
        self.headers.push((name.to_owned(), value.as_ref().to_vec()));
        self
    }

    fn bearer(self, token: &str) -> Req {
        self.header("authorization", format!("Bearer {token}"))
    }

    fn body(self, content_type: impl AsRef<[u8]>, body: impl Into<Vec<u8>>) -> Req {
        let mut r = self.header("content-type", content_type);
        r.body = body.into();
        r
    }

    fn json(self, body: impl Into<Vec<u8>>) -> Req {
        self.body("application/json", body)
    }

    /// The body without a content type.
    fn bare(mut self, body: impl Into<Vec<u8>>) -> Req {
        self.body = body.into();
        self
    }

    /// The body sent chunked, in chunks of 1,000 bytes.
    fn chunked(mut self) -> Req {
        let mut framed = Vec::new();
        for chunk in self.body.chunks(1000) {
            framed.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
            framed.extend_from_slice(chunk);
            framed.extend_from_slice(b"\r\n");
        }
        framed.extend_from_slice(b"0\r\n\r\n");
        self.body = framed;
        self.header("transfer-encoding", "chunked")
    }

    /// The target with `suffix` (a query) appended.
    fn tap_target(mut self, suffix: &str) -> Req {
        self.target.push_str(suffix);
        self
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = format!("{} {} HTTP/1.1\r\nhost: 127.0.0.1\r\n", self.method, self.target).into_bytes();
        let framed = self.headers.iter().any(|(n, _)| {
            n.eq_ignore_ascii_case("content-length") || n.eq_ignore_ascii_case("transfer-encoding")
        });
        for (name, value) in &self.headers {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        if !framed && (!self.body.is_empty() || matches!(self.method, "POST" | "PUT" | "PATCH")) {
            out.extend_from_slice(format!("content-length: {}\r\n", self.body.len()).as_bytes());
        }
        out.extend_from_slice(b"connection: close\r\n\r\n");
        out.extend_from_slice(&self.body);
        out
    }
}

/// How a case's bytes are written.
#[derive(Debug)]
enum Sent {
    /// At once; the connection is then held open without more.
    Bytes(Vec<u8>),
    /// One byte every [`TRICKLE_GAP`].
    Trickled(Vec<u8>),
}

#[derive(Debug)]
struct Case {
    name: String,
    sent: Sent,
    expect: Expect,
    /// What the detail must name (the setting of a limit).
    names: Option<&'static str>,
    /// The connection must close after the answer.
    closes: bool,
}

fn case(name: impl Into<String>, req: Req, expect: Expect) -> Case {
    Case { name: name.into(), sent: Sent::Bytes(req.bytes()), expect, names: None, closes: false }
}

fn raw(name: impl Into<String>, bytes: impl Into<Vec<u8>>, expect: Expect) -> Case {
    Case { name: name.into(), sent: Sent::Bytes(bytes.into()), expect, names: None, closes: false }
}

fn trickled(name: impl Into<String>, bytes: impl Into<Vec<u8>>, expect: Expect) -> Case {
    Case { name: name.into(), sent: Sent::Trickled(bytes.into()), expect, names: None, closes: true }
}

impl Case {
    fn naming(mut self, setting: &'static str) -> Case {
        self.names = Some(setting);
        self
    }

    fn closing(mut self) -> Case {
        self.closes = true;
        self
    }
}

/// An answer as the client read it.
#[derive(Debug)]
struct Answer {
    status: u16,
    content_type: String,
    body: Vec<u8>,
    /// Whether the connection closed after it (asked of some cases only).
    closed: Option<bool>,
}

/// The body of a chunked answer, once it is all there.
fn dechunk(mut bytes: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line = bytes.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&bytes[..line]).ok()?.split(';').next()?.trim();
        let size = usize::from_str_radix(size, 16).ok()?;
        bytes = &bytes[line + 2..];
        if size == 0 {
            return Some(body);
        }
        if bytes.len() < size + 2 {
            return None;
        }
        body.extend_from_slice(&bytes[..size]);
        bytes = &bytes[size + 2..];
    }
}

/// The answer in `buf`, if it is whole (`eof`: nothing more will come).
fn parse_answer(buf: &[u8], eof: bool) -> Result<Option<Answer>, String> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if eof {
            Err(format!(
                "the connection closed after {} bytes without an answer: {:?}",
                buf.len(),
                String::from_utf8_lossy(&buf[..buf.len().min(200)])
            ))
        } else {
            Ok(None)
        };
    };
    let head = String::from_utf8_lossy(&buf[..end]);
    let rest = &buf[end + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("not an HTTP answer: {status_line:?}"))?;
    let (mut content_type, mut length, mut chunked) = (String::new(), None, false);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-type" => content_type = value.to_owned(),
            "content-length" => length = value.parse::<usize>().ok(),
            "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
            _ => {}
        }
    }
    let body = if chunked {
        match dechunk(rest) {
            Some(b) => b,
            None if eof => rest.to_vec(),
            None => return Ok(None),
        }
    } else if let Some(n) = length {
        if rest.len() < n {
            if eof {
                return Err(format!("the answer ended after {} of its {n} body bytes", rest.len()));
            }
            return Ok(None);
        }
        rest[..n].to_vec()
    } else if eof {
        rest.to_vec()
    } else {
        return Ok(None);
    };
    Ok(Some(Answer { status, content_type, body, closed: None }))
}

async fn read_answer(rd: &mut OwnedReadHalf) -> Result<Answer, String> {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        if let Some(answer) = parse_answer(&buf, false)? {
            return Ok(answer);
        }
        match rd.read(&mut chunk).await {
            Ok(0) => return parse_answer(&buf, true)?.ok_or_else(|| "no answer".to_owned()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if !buf.is_empty() => {
                return parse_answer(&buf, true)?.ok_or_else(|| format!("read failed: {e}"));
            }
            Err(e) => return Err(format!("the connection failed before any answer: {e}")),
        }
    }
}

/// Whether the server closes the connection (EOF or reset) in time.
async fn closes(rd: &mut OwnedReadHalf) -> bool {
    let wait = async {
        let mut chunk = [0u8; 1024];
        loop {
            match rd.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(CLOSE_WITHIN, wait).await.is_ok()
}

/// Writes a case to a new connection and reads its answer.
async fn exchange(addr: SocketAddr, case: &Case) -> Result<Answer, String> {
    let stream = TcpStream::connect(addr).await.map_err(|e| format!("connect: {e}"))?;
    let (mut rd, mut wr) = stream.into_split();
    let (bytes, gap) = match &case.sent {
        Sent::Bytes(b) => (b.clone(), None),
        Sent::Trickled(b) => (b.clone(), Some(TRICKLE_GAP)),
    };
    // The writer keeps its half open after writing: no FIN, as a slow or
    // stuck client would.
    let writer = tokio::spawn(async move {
        match gap {
            None => {
                let _ = wr.write_all(&bytes).await;
            }
            Some(gap) => {
                for b in bytes {
                    if wr.write_all(&[b]).await.is_err() {
                        break;
                    }
                    tokio::time::sleep(gap).await;
                }
            }
        }
        std::future::pending::<()>().await;
        drop(wr);
    });
    let answer = match tokio::time::timeout(ANSWER_WITHIN, read_answer(&mut rd)).await {
        Ok(a) => a,
        Err(_) => Err(format!("no answer within {} s", ANSWER_WITHIN.as_secs())),
    };
    let answer = match answer {
        Ok(mut a) if case.closes => {
            a.closed = Some(closes(&mut rd).await);
            Ok(a)
        }
        other => other,
    };
    writer.abort();
    answer
}

/// serde_json's position, `at line 1 column 9` (our own wording has a comma).
fn has_parser_position(detail: &str) -> bool {
    detail.match_indices(" at line ").any(|(i, m)| {
        let rest = &detail[i + m.len()..];
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        digits > 0 && rest[digits..].starts_with(" column ")
    })
}

/// What is wrong with `answer` for `case`, if anything.
fn judge(case: &Case, answer: &Answer) -> Vec<String> {
    let (status, code) = case.expect;
    let mut wrong = Vec::new();
    if answer.status != status {
        wrong.push(format!("status {} instead of {status}", answer.status));
    }
    let essence = answer.content_type.split(';').next().unwrap_or_default().trim();
    if !essence.eq_ignore_ascii_case("application/problem+json") {
        wrong.push(format!("content-type {:?}", answer.content_type));
    }
    match serde_json::from_slice::<Value>(&answer.body) {
        Ok(problem) => {
            if problem["code"].as_str() != Some(code) {
                wrong.push(format!("code {} instead of {code}", problem["code"]));
            }
            let detail = problem["detail"].as_str().unwrap_or_default();
            if detail.trim().is_empty() {
                wrong.push("no detail".to_owned());
            }
            let lower = detail.to_ascii_lowercase();
            let parser: Vec<&str> = PARSER_WORDS.iter().copied().filter(|w| lower.contains(w)).collect();
            if !parser.is_empty() || has_parser_position(detail) {
                wrong.push(format!("the detail has a parser's wording ({parser:?})"));
            }
            if let Some(setting) = case.names
                && !detail.contains(setting)
            {
                wrong.push(format!("the detail does not name {setting}"));
            }
        }
        Err(_) => wrong.push("the body is not a JSON problem".to_owned()),
    }
    if case.closes && answer.closed != Some(true) {
        wrong.push(format!("the connection was not closed within {} s", CLOSE_WITHIN.as_secs()));
    }
    wrong
}

/// Runs `cases` against `p`, `at_once` of them concurrently (1: in order),
/// then asks `/health`; one line per failing case.
async fn run(p: &TestPlatform, family: &str, cases: Vec<Case>, at_once: usize) -> Vec<String> {
    let addr: SocketAddr =
        p.platform.url.trim_start_matches("http://").parse().expect("the platform's address");
    let total = cases.len();
    let answers: Vec<(Case, Result<Answer, String>)> = futures::stream::iter(cases)
        .map(|c| async move {
            let a = exchange(addr, &c).await;
            (c, a)
        })
        .buffered(at_once.max(1))
        .collect()
        .await;
    let mut failures = Vec::new();
    for (c, answer) in answers {
        let (status, code) = c.expect;
        let why = match &answer {
            Ok(a) => {
                let wrong = judge(&c, a);
                if wrong.is_empty() {
                    continue;
                }
                let head = &a.body[..a.body.len().min(200)];
                format!(
                    "{}; got {} {:?} {:?}",
                    wrong.join(", "),
                    a.status,
                    a.content_type,
                    String::from_utf8_lossy(head)
                )
            }
            Err(e) => e.clone(),
        };
        failures.push(format!("[{family}] {} (want {status} {code}): {why}", c.name));
    }
    let health = p.http.get(p.url("/health")).send().await.map(|r| r.status().as_u16());
    if !matches!(health, Ok(200)) {
        failures.push(format!("[{family}] /health after the family answered {health:?}"));
    }
    eprintln!("hostile {family}: {total} cases, {} failing", failures.len());
    failures
}

fn verdict(failures: &[String]) {
    assert!(failures.is_empty(), "{} failing:\n{}", failures.len(), failures.join("\n"));
}

/// Who the cases act as, and what exists to act on.
#[derive(Debug)]
struct Ctx {
    /// The seeded API token (`admin` scope on dev/default).
    token: String,
    /// An operator's session.
    operator: String,
    /// dev@dev.local's session (tokens are made by people).
    person: String,
    /// `/v1/tenants/dev/projects/default`.
    project: String,
    /// An uploaded dataset.
    dataset: String,
}

impl Ctx {
    async fn new(p: &TestPlatform) -> Ctx {
        let dataset = p.upload(CSV).await;
        Ctx {
            token: p.token().to_owned(),
            operator: p.login("admin@dev.local").await,
            person: p.login("dev@dev.local").await,
            project: p.project_path(),
            dataset,
        }
    }

    /// A path under the project.
    fn at(&self, rest: &str) -> String {
        format!("{}{rest}", self.project)
    }

    fn get(&self, target: impl Into<String>) -> Req {
        Req::new("GET", target).bearer(&self.token)
    }

    fn send(&self, method: &'static str, target: impl Into<String>) -> Req {
        Req::new(method, target).bearer(&self.token)
    }

    fn post(&self, target: impl Into<String>, body: impl Into<Vec<u8>>) -> Req {
        Req::new("POST", target).bearer(&self.token).json(body)
    }

    fn admin(&self, method: &'static str, target: impl Into<String>, body: impl Into<Vec<u8>>) -> Req {
        Req::new(method, target).bearer(&self.operator).json(body)
    }

    /// As the tenant's admin, signed in: tenant-level routes refuse tokens.
    fn person(&self, method: &'static str, target: impl Into<String>, body: impl Into<Vec<u8>>) -> Req {
        Req::new(method, target).bearer(&self.person).json(body)
    }

    /// `POST …/runs` with `body`.
    fn run(&self, body: impl Into<Vec<u8>>) -> Req {
        self.post(self.at("/runs"), body)
    }

    /// `POST …/jobs` with `body`.
    fn job(&self, body: impl Into<Vec<u8>>) -> Req {
        self.post(self.at("/jobs"), body)
    }

    /// `POST …/datasets` with a CSV body.
    fn csv(&self, body: impl Into<Vec<u8>>) -> Req {
        self.send("POST", self.at("/datasets?name=hostile")).body("text/csv", body)
    }

    /// A run spec of `describe` on the dataset, with `extra` fields.
    fn spec(&self, extra: &str) -> String {
        format!(r#"{{"method":"describe","dataset":"{}"{extra}}}"#, self.dataset)
    }

    /// A run spec of `method` on the dataset.
    fn spec_of(&self, method: &str) -> String {
        format!(r#"{{"method":"{method}","dataset":"{}"}}"#, self.dataset)
    }
}

fn deep_array(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

fn deep_object(depth: usize) -> String {
    format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth))
}

/// `text` in UTF-16LE with a byte-order mark.
fn utf16le(text: &str) -> Vec<u8> {
    let mut out = vec![0xff, 0xfe];
    out.extend(text.encode_utf16().flat_map(u16::to_le_bytes));
    out
}

fn utf16be(text: &str) -> Vec<u8> {
    text.encode_utf16().flat_map(u16::to_be_bytes).collect()
}

/// `before`, then `bytes`, then `after`.
fn splice(before: &str, bytes: &[u8], after: &str) -> Vec<u8> {
    [before.as_bytes(), bytes, after.as_bytes()].concat()
}

// ---------------------------------------------------------------- families

/// Bodies over each limit, huge query values, very long ids.
fn sizes(c: &Ctx) -> Vec<Case> {
    let pad = "x".repeat(4000);
    let big_spec = c.spec(&format!(r#","params":{{"pad":"{pad}"}}"#));
    let big_job = format!(r#"{{"method":"item.echo","items":["{}"]}}"#, "x".repeat(8000));
    let tiny_items = format!(r#"{{"method":"item.echo","items":[{}0]}}"#, "0,".repeat(999));
    let long = "a".repeat(7000);
    let big = |extra: &str| format!(r#"{{"name":"{pad}"{extra}}}"#);
    vec![
        case("runs: a spec over MAPI_MAX_JSON_BYTES", c.run(big_spec.clone()), TOO_LARGE),
        case("runs: a spec over the limit, chunked", c.run(big_spec.clone()).chunked(), TOO_LARGE),
        case(
            "runs: a Content-Length of 1 TB declared",
            c.run(c.spec("")).header("content-length", "1000000000000"),
            TOO_LARGE,
        ),
        case("jobs: a body over MAPI_JOB_MAX_BODY_BYTES", c.job(big_job.clone()), TOO_LARGE),
        case("jobs: a body over the limit, chunked", c.job(big_job).chunked(), TOO_LARGE),
        case(
            "jobs: six items, over MAPI_JOB_MAX_ITEMS=5",
            c.job(r#"{"method":"item.echo","items":[1,2,3,4,5,6]}"#),
            TOO_LARGE,
        )
        .naming("max_items_per_job"),
        case("jobs: 1,000 tiny items within the body limit", c.job(tiny_items), TOO_LARGE)
            .naming("max_items_per_job"),
        case(
            "datasets: an upload over MAPI_MAX_DATASET_BYTES",
            c.csv(format!("a\n{}", "1\n".repeat(8000))),
            TOO_LARGE,
        ),
        case(
            "datasets: an upload over the limit, chunked",
            c.csv(format!("a\n{}", "1\n".repeat(8000))).chunked(),
            TOO_LARGE,
        ),
        case(
            "datasets: a name of 7,000 characters",
            c.send("POST", c.at(&format!("/datasets?name={long}"))).body("text/csv", CSV),
            INVALID,
        ),
        case(
            "datasets: a name of 201 characters",
            c.send("POST", c.at(&format!("/datasets?name={}", "n".repeat(201)))).body("text/csv", CSV),
            INVALID,
        ),
        case("runs: a 7,000-character run id", c.get(format!("/v1/runs/run_{long}")), NOT_FOUND),
        case(
            "runs: cancel of a 7,000-character run id",
            c.send("POST", format!("/v1/runs/{long}/cancel")),
            NOT_FOUND,
        ),
        case("jobs: a 7,000-character job id", c.get(format!("/v1/jobs/job_{long}")), NOT_FOUND),
        case("jobs: items of a 7,000-character job id", c.get(format!("/v1/jobs/{long}/items")), NOT_FOUND),
        case(
            "model versions: a 7,000-character id",
            c.get(format!("/v1/model-versions/mv_{long}")),
            NOT_FOUND,
        ),
        case(
            "datasets: a 7,000-character dataset id",
            c.get(c.at(&format!("/datasets/ds_{long}"))),
            NOT_FOUND,
        ),
        case(
            "runs: a 7,000-character tenant id",
            c.get(format!("/v1/tenants/{long}/projects/default/runs")),
            INVALID,
        ),
        case(
            "members: a 7,000-character e-mail",
            Req::new("DELETE", format!("/v1/tenants/dev/members/{long}%40dev.local")).bearer(&c.person),
            INVALID,
        ),
        case("runs: a method name of 1,900 characters", c.run(c.spec_of(&"m".repeat(1900))), INVALID),
        case(
            "jobs: a method name of 3,000 characters",
            c.job(format!(r#"{{"method":"{}","items":[1]}}"#, "m".repeat(3000))),
            INVALID,
        ),
        case(
            "runs: dry_run of 7,000 characters",
            c.run(c.spec("")).tap_target(&format!("?dry_run={long}")),
            INVALID,
        ),
        case("usage: an `at` of 7,000 characters", c.get(c.at(&format!("/usage?at={long}"))), INVALID),
        case(
            "admin: a tenant over MAPI_MAX_JSON_BYTES",
            c.admin("POST", "/v1/admin/tenants", big("")),
            TOO_LARGE,
        ),
        case(
            "admin: a quota policy over the limit",
            c.admin("PUT", "/v1/admin/quotas/dev", format!(r#"{{"note":"{pad}"}}"#)),
            TOO_LARGE,
        ),
        case(
            "admin: kill switches over the limit",
            c.admin("PUT", "/v1/admin/kill-switches", format!(r#"{{"reason":"{pad}"}}"#)),
            TOO_LARGE,
        ),
        case(
            "admin: an executor switch over the limit",
            c.admin(
                "PUT",
                "/v1/admin/executors/local-process",
                format!(r#"{{"enabled":true,"reason":"{pad}"}}"#),
            ),
            TOO_LARGE,
        ),
        case(
            "access checks: a check over the limit",
            c.person(
                "POST",
                "/v1/tenants/dev/access-checks",
                format!(r#"{{"resource":"run","action":"read","endpoint":"{pad}"}}"#),
            ),
            TOO_LARGE,
        ),
        case(
            "tokens: a token request over the limit",
            Req::new("POST", c.at("/tokens")).bearer(&c.person).json(big(r#","scopes":["runs:create"]"#)),
            TOO_LARGE,
        ),
        case(
            "projects: a project over the limit",
            c.person("POST", "/v1/tenants/dev/projects", big(r#","id":"big""#)),
            TOO_LARGE,
        ),
        case(
            "members: a member over the limit",
            c.person(
                "POST",
                "/v1/tenants/dev/members",
                format!(r#"{{"email":"{pad}@dev.local","role":"viewer"}}"#),
            ),
            TOO_LARGE,
        ),
        case(
            "dev idp: a login over MAPI_MAX_JSON_BYTES",
            Req::new("POST", "/dev/idp/login").json(format!(r#"{{"email":"dev@dev.local","pad":"{pad}"}}"#)),
            TOO_LARGE,
        ),
    ]
}

/// CSV that is not a table, or more table than a dataset may hold
/// (columns 4, rows 5, cells 300 bytes, uploads 8 KiB).
fn csv_shapes(c: &Ctx) -> Vec<Case> {
    let names: Vec<String> = (0..1000).map(|i| format!("c{i:03}")).collect();
    vec![
        case("csv: a row shorter than the header", c.csv("a,b\n1,2\n3\n"), INVALID),
        case("csv: a row longer than the header", c.csv("a,b\n1,2\n3,4,5\n"), INVALID),
        case("csv: an unclosed quote", c.csv("a,b\n\"1,2\n3,4\n"), INVALID),
        case("csv: a quoted field that swallows a row", c.csv("a,b\n\"1,2\"\n"), INVALID),
        case("csv: an empty body", c.csv(""), INVALID),
        case("csv: only a byte-order mark", c.csv(b"\xef\xbb\xbf".to_vec()), INVALID),
        case("csv: only blank lines", c.csv("\n\n\n"), INVALID),
        // Blank lines are skipped, so "\n1,2\n" has the header `1,2` (the
        // documented rule); a header of empty names is refused.
        case("csv: a header of empty names", c.csv(",,\n1,2,3\n"), INVALID),
        case("csv: duplicate columns", c.csv("a,a\n1,2\n"), INVALID),
        case("csv: duplicate columns differing in quotes", c.csv("a,\"a\"\n1,2\n"), INVALID),
        case("csv: an empty column name", c.csv("a,,b\n1,2,3\n"), INVALID),
        case("csv: a column name of 257 bytes", c.csv(format!("{}\n1\n", "n".repeat(257))), INVALID),
        case(
            "csv: five columns, over MAPI_DATASET_MAX_COLUMNS=4",
            c.csv("a,b,c,d,e\n1,2,3,4,5\n"),
            TOO_LARGE,
        )
        .naming("MAPI_DATASET_MAX_COLUMNS"),
        case("csv: a header of 1,000 columns", c.csv(format!("{}\n", names.join(","))), TOO_LARGE)
            .naming("MAPI_DATASET_MAX_COLUMNS"),
        case("csv: six rows, over MAPI_DATASET_MAX_ROWS=5", c.csv("a\n1\n2\n3\n4\n5\n6\n"), TOO_LARGE)
            .naming("MAPI_DATASET_MAX_ROWS"),
        case("csv: 1,000 tiny rows", c.csv(format!("a\n{}", "1\n".repeat(1000))), TOO_LARGE)
            .naming("MAPI_DATASET_MAX_ROWS"),
        case("csv: a cell of 301 bytes", c.csv(format!("a\n{}\n", "1".repeat(301))), TOO_LARGE)
            .naming("MAPI_DATASET_MAX_CELL_BYTES"),
        case(
            "csv: a quoted cell of 301 bytes over several lines",
            c.csv(format!("a\n\"{}\"\n", "1\n".repeat(150) + "x")),
            TOO_LARGE,
        )
        .naming("MAPI_DATASET_MAX_CELL_BYTES"),
    ]
}

/// JSON nested 10,000 deep in every kind of body.
fn nesting(c: &Ctx) -> Vec<Case> {
    let (arr, obj) = (deep_array(10_000), deep_object(10_000));
    let mixed = format!("{}1{}", r#"[{"a":"#.repeat(5_000), "}]".repeat(5_000));
    vec![
        case(
            "runs: a params value 10,000 arrays deep",
            c.run(c.spec(&format!(r#","params":{{"x":{arr}}}"#))),
            INVALID,
        ),
        case(
            "runs: a params value 10,000 objects deep",
            c.run(c.spec(&format!(r#","params":{{"x":{obj}}}"#))),
            INVALID,
        ),
        case(
            "runs: params itself 10,000 objects deep",
            c.run(c.spec(&format!(r#","params":{obj}"#))),
            INVALID,
        ),
        case("runs: a body 10,000 arrays deep", c.run(arr.clone()), INVALID),
        case(
            "runs: arrays and objects 10,000 deep",
            c.run(c.spec(&format!(r#","params":{{"x":{mixed}}}"#))),
            INVALID,
        ),
        case("runs: the method 10,000 arrays deep", c.run(format!(r#"{{"method":{arr}}}"#)), INVALID),
        case(
            "jobs: an item 10,000 arrays deep",
            c.job(format!(r#"{{"method":"item.echo","items":[{arr}]}}"#)),
            INVALID,
        ),
        case(
            "jobs: an item 10,000 objects deep",
            c.job(format!(r#"{{"method":"item.echo","items":[{obj}]}}"#)),
            INVALID,
        ),
        case(
            "jobs: items 10,000 arrays deep",
            c.job(format!(r#"{{"method":"item.echo","items":{arr}}}"#)),
            INVALID,
        ),
        case(
            "jobs: options.params 10,000 deep",
            c.job(format!(r#"{{"method":"item.echo","items":[1],"options":{{"params":{{"x":{obj}}}}}}}"#)),
            INVALID,
        ),
        case("jobs: a body 10,000 arrays deep", c.job(arr.clone()), INVALID),
        case(
            "admin: a tenant's name 10,000 deep",
            c.admin("POST", "/v1/admin/tenants", format!(r#"{{"id":"deep","name":{arr}}}"#)),
            INVALID,
        ),
        case(
            "admin: a quota note 10,000 deep",
            c.admin("PUT", "/v1/admin/quotas/dev", format!(r#"{{"note":{obj}}}"#)),
            INVALID,
        ),
        case(
            "admin: a kill-switch reason 10,000 deep",
            c.admin("PUT", "/v1/admin/kill-switches", format!(r#"{{"reason":{arr}}}"#)),
            INVALID,
        ),
        case(
            "admin: evidence 10,000 deep",
            c.admin("PUT", "/v1/admin/executors/local-process/evidence", format!(r#"{{"target":{obj}}}"#)),
            INVALID,
        ),
        case(
            "access checks: an endpoint 10,000 deep",
            c.person("POST", "/v1/tenants/dev/access-checks", format!(r#"{{"endpoint":{arr}}}"#)),
            INVALID,
        ),
        case(
            "projects: a project 10,000 deep",
            c.person("POST", "/v1/tenants/dev/projects", obj.clone()),
            INVALID,
        ),
        case(
            "members: a member 10,000 deep",
            c.person("POST", "/v1/tenants/dev/members", format!(r#"{{"email":{arr}}}"#)),
            INVALID,
        ),
        case(
            "tokens: scopes 10,000 deep",
            Req::new("POST", c.at("/tokens"))
                .bearer(&c.person)
                .json(format!(r#"{{"name":"t","scopes":{arr}}}"#)),
            INVALID,
        ),
        case(
            "dev idp: a login 10,000 deep",
            Req::new("POST", "/dev/idp/login").json(format!(r#"{{"email":{arr}}}"#)),
            INVALID,
        ),
    ]
}

/// Bytes that are not UTF-8 JSON, CSV or query text; bodies in the wrong
/// media type.
fn encodings(c: &Ctx) -> Vec<Case> {
    let ds = &c.dataset;
    let method = |bytes: &[u8]| splice(r#"{"method":""#, bytes, &format!(r#"","dataset":"{ds}"}}"#));
    let item = |bytes: &[u8]| splice(r#"{"method":"item.echo","items":[""#, bytes, r#""]}"#);
    let spec = c.spec("");
    let job = r#"{"method":"item.echo","items":[{"text":"hi"}]}"#;
    let upload = |query: &str| c.send("POST", c.at(&format!("/datasets?name={query}"))).body("text/csv", CSV);
    let mut cases = vec![
        case("runs: invalid UTF-8 in a string", c.run(method(b"\xff\xfe")), INVALID),
        case("runs: overlong UTF-8 for `/`", c.run(method(b"\xc0\xaf")), INVALID),
        case("runs: a surrogate encoded in UTF-8", c.run(method(b"\xed\xa0\x80")), INVALID),
        case("runs: a raw NUL inside a string", c.run(method(b"desc\x00ribe")), INVALID),
        case(
            "runs: a NUL between tokens",
            c.run(splice("{\"method\":\"describe\",", b"\x00", &format!("\"dataset\":\"{ds}\"}}"))),
            INVALID,
        ),
        case("runs: an escaped NUL in the method", c.run(method(b"describe\\u0000")), INVALID),
        case("runs: a lone surrogate escape", c.run(method(b"\\ud800")), INVALID),
        case("runs: an invalid escape", c.run(method(b"\\x41")), INVALID),
        case("runs: a UTF-8 byte-order mark first", c.run(splice("", b"\xef\xbb\xbf", &spec)), INVALID),
        case("runs: the spec in UTF-16LE", c.run(utf16le(&spec)), INVALID),
        case("runs: the spec in UTF-16BE without a mark", c.run(utf16be(&spec)), INVALID),
        case(
            "runs: charset=utf-16 declared",
            c.send("POST", c.at("/runs")).body("application/json; charset=utf-16", utf16le(&spec)),
            MEDIA,
        ),
        case("jobs: invalid UTF-8 in an item", c.job(item(b"\xff\xfe")), INVALID),
        case("jobs: overlong UTF-8 in an item", c.job(item(b"\xc0\xaf")), INVALID),
        case("jobs: a raw NUL in an item", c.job(item(b"a\x00b")), INVALID),
        case("jobs: a lone surrogate escape in an item", c.job(item(b"\\udc00")), INVALID),
        case("jobs: a UTF-8 byte-order mark first", c.job(splice("", b"\xef\xbb\xbf", job)), INVALID),
        case("jobs: the body in UTF-16LE", c.job(utf16le(job)), INVALID),
        case("datasets: invalid UTF-8 in a cell", c.csv(b"a,b\n1,\xff\xfe\n".to_vec()), INVALID),
        case("datasets: invalid UTF-8 in a column name", c.csv(b"a,\xff\n1,2\n".to_vec()), INVALID),
        case("datasets: overlong UTF-8 in a cell", c.csv(b"a,b\n1,\xc0\xaf\n".to_vec()), INVALID),
        case("datasets: a NUL in a cell", c.csv(b"a,b\n1,2\x003\n".to_vec()), INVALID),
        case("datasets: a NUL in a column name", c.csv(b"a,b\x00c\n1,2\n".to_vec()), INVALID),
        case("datasets: the CSV in UTF-16LE", c.csv(utf16le(CSV)), INVALID),
        case("datasets: ?name=%FF%FE", upload("%FF%FE"), INVALID),
        case("datasets: ?name= overlong UTF-8", upload("%C0%AF"), INVALID),
        case("datasets: ?name= a NUL", upload("ok%00"), INVALID),
        case("runs: ?state=%FF", c.get(c.at("/runs?state=%FF")), INVALID),
        case("runs: ?page_token=%FF%FE", c.get(c.at("/runs?page_token=%FF%FE")), INVALID),
        case(
            "audit: ?action=%FF%FE",
            Req::new("GET", "/v1/admin/audit?action=%FF%FE").bearer(&c.operator),
            INVALID,
        ),
        case("runs: a run id that decodes to invalid UTF-8", c.get("/v1/runs/%FF%FE"), INVALID),
        case(
            "admin: invalid UTF-8 in a tenant's name",
            c.admin(
                "POST",
                "/v1/admin/tenants",
                splice(r#"{"id":"enc","name":""#, b"\xff", r#"","tier":"verified","residency":"eu"}"#),
            ),
            INVALID,
        ),
        case(
            "admin: a raw NUL in a quota note",
            c.admin("PUT", "/v1/admin/quotas/dev", splice(r#"{"note":""#, b"\x00", r#""}"#)),
            INVALID,
        ),
        case(
            "access checks: a byte-order mark first",
            c.person(
                "POST",
                "/v1/tenants/dev/access-checks",
                splice("", b"\xef\xbb\xbf", r#"{"resource":"run","action":"read"}"#),
            ),
            INVALID,
        ),
        case(
            "dev idp: invalid UTF-8 in the e-mail",
            Req::new("POST", "/dev/idp/login").json(splice(r#"{"email":""#, b"dev\xff@dev.local", r#""}"#)),
            INVALID,
        ),
    ];
    // Wrong and missing media types.
    let media: Vec<(&str, Req)> = vec![
        ("runs: text/plain", c.send("POST", c.at("/runs")).body("text/plain", spec.clone())),
        ("runs: no content type", c.send("POST", c.at("/runs")).bare(spec.clone())),
        (
            "runs: a form",
            c.send("POST", c.at("/runs")).body("application/x-www-form-urlencoded", "method=describe"),
        ),
        (
            "runs: multipart",
            c.send("POST", c.at("/runs")).body("multipart/form-data; boundary=x", spec.clone()),
        ),
        ("runs: an empty content type", c.send("POST", c.at("/runs")).body("", spec.clone())),
        ("runs: content type `json`", c.send("POST", c.at("/runs")).body("json", spec.clone())),
        (
            "runs: application/json-seq",
            c.send("POST", c.at("/runs")).body("application/json-seq", spec.clone()),
        ),
        ("jobs: text/plain", c.send("POST", c.at("/jobs")).body("text/plain", job)),
        ("jobs: no content type", c.send("POST", c.at("/jobs")).bare(job)),
        ("jobs: application/x-ndjson", c.send("POST", c.at("/jobs")).body("application/x-ndjson", job)),
        ("datasets: application/json", c.send("POST", c.at("/datasets")).body("application/json", CSV)),
        ("datasets: no content type", c.send("POST", c.at("/datasets")).bare(CSV)),
        ("datasets: image/png", c.send("POST", c.at("/datasets")).body("image/png", CSV)),
        (
            "datasets: multipart",
            c.send("POST", c.at("/datasets")).body("multipart/form-data; boundary=x", CSV),
        ),
        (
            "admin: a tenant as text/plain",
            Req::new("POST", "/v1/admin/tenants").bearer(&c.operator).body("text/plain", r#"{"id":"m"}"#),
        ),
        (
            "admin: a quota policy as a form",
            Req::new("PUT", "/v1/admin/quotas/dev")
                .bearer(&c.operator)
                .body("application/x-www-form-urlencoded", "note=x"),
        ),
        (
            "admin: kill switches without a content type",
            Req::new("PUT", "/v1/admin/kill-switches").bearer(&c.operator).bare(r#"{"reason":"x"}"#),
        ),
        (
            "admin: evidence without a content type",
            Req::new("PUT", "/v1/admin/executors/local-process/evidence").bearer(&c.operator).bare("{}"),
        ),
        (
            "access checks: text/plain",
            Req::new("POST", "/v1/tenants/dev/access-checks")
                .bearer(&c.person)
                .body("text/plain", r#"{"resource":"run","action":"read"}"#),
        ),
        (
            "tokens: without a content type",
            Req::new("POST", c.at("/tokens"))
                .bearer(&c.person)
                .bare(r#"{"name":"t","scopes":["runs:create"]}"#),
        ),
        (
            "projects: text/csv",
            Req::new("POST", "/v1/tenants/dev/projects")
                .bearer(&c.person)
                .body("text/csv", r#"{"id":"m","name":"M"}"#),
        ),
        (
            "dev idp: a login as text/plain",
            Req::new("POST", "/dev/idp/login").body("text/plain", r#"{"email":"dev@dev.local"}"#),
        ),
    ];
    cases.extend(media.into_iter().map(|(name, req)| case(name, req, MEDIA)));
    cases
}

/// Numbers no field holds: negative, fractional, huge, not numbers.
fn numbers(c: &Ctx) -> Vec<Case> {
    let mut cases = Vec::new();
    for v in [
        "-1",
        "1.5",
        "1e400",
        "18446744073709551616",
        "4294967296",
        "\"NaN\"",
        "NaN",
        "Infinity",
        "\"60\"",
        "null",
        "0x10",
        // A whole number written with an exponent is an integer (as JSON
        // Schema counts it): 1e5 is refused for its range, 2.5e0 for its fraction.
        "1e5",
        "2.5e0",
    ] {
        cases.push(case(
            format!("runs: timeout_s {v}"),
            c.run(c.spec(&format!(r#","timeout_s":{v}"#))),
            INVALID,
        ));
    }
    for v in ["-1", "0", "2.5", "1e400", "18446744073709551616", "\"NaN\"", "10001", "true"] {
        cases.push(case(format!("runs: tasks {v}"), c.run(c.spec(&format!(r#","tasks":{v}"#))), INVALID));
    }
    for v in ["-1", "0", "1.5", "1e400", "18446744073709551616", "NaN", "201", ""] {
        cases.push(case(
            format!("runs: ?page_size={v}"),
            c.get(c.at(&format!("/runs?page_size={v}"))),
            INVALID,
        ));
    }
    let pages: Vec<(&str, Req)> = vec![
        ("datasets: ?page_size=-1", c.get(c.at("/datasets?page_size=-1"))),
        ("datasets: ?page_size=NaN", c.get(c.at("/datasets?page_size=NaN"))),
        ("model versions: ?page_size=0", c.get(c.at("/model-versions?page_size=0"))),
        ("model versions: ?page_size=1e400", c.get(c.at("/model-versions?page_size=1e400"))),
        ("job items: ?page_size=-1", c.get(format!("/v1/jobs/{JOB}/items?page_size=-1"))),
        ("tenants: ?page_size=NaN", Req::new("GET", "/v1/admin/tenants?page_size=NaN").bearer(&c.operator)),
        (
            "audit: ?page_size=18446744073709551616",
            Req::new("GET", "/v1/admin/audit?page_size=18446744073709551616").bearer(&c.operator),
        ),
        (
            "tenant audit: ?page_size=0",
            Req::new("GET", "/v1/tenants/dev/audit?page_size=0").bearer(&c.person),
        ),
        ("item log: index -1", c.get(format!("/v1/jobs/{JOB}/items/-1/log"))),
        ("item log: index 1e400", c.get(format!("/v1/jobs/{JOB}/items/1e400/log"))),
        ("item log: index 2^64", c.get(format!("/v1/jobs/{JOB}/items/18446744073709551616/log"))),
        ("item log: index NaN", c.get(format!("/v1/jobs/{JOB}/items/NaN/log"))),
        ("usage: ?at=yesterday", c.get(c.at("/usage?at=yesterday"))),
        ("usage: ?at=1e400", c.get(c.at("/usage?at=1e400"))),
        ("usage: ?period=year", c.get(c.at("/usage?period=year"))),
        ("usage: ?group_by=colour", c.get(c.at("/usage?group_by=colour"))),
        ("audit: ?since=not-a-time", Req::new("GET", "/v1/admin/audit?since=not-a-time").bearer(&c.operator)),
        ("audit: ?outcome=maybe", Req::new("GET", "/v1/admin/audit?outcome=maybe").bearer(&c.operator)),
        ("runs: ?dry_run=maybe", c.run(c.spec("")).tap_target("?dry_run=maybe")),
        ("tokens: ?all=2", Req::new("GET", c.at("/tokens?all=2")).bearer(&c.person)),
    ];
    cases.extend(pages.into_iter().map(|(name, req)| case(name, req, INVALID)));
    let token = |field: &str, v: &str| {
        Req::new("POST", c.at("/tokens"))
            .bearer(&c.person)
            .json(format!(r#"{{"name":"n","scopes":["runs:create"],"{field}":{v}}}"#))
    };
    for (field, v) in [
        ("expires_in_days", "-1"),
        ("expires_in_days", "1e400"),
        ("expires_in_days", "0"),
        ("rate_limit_per_minute", "18446744073709551616"),
        ("rate_limit_per_minute", "\"NaN\""),
        ("budget_vcpu_seconds", "-1"),
        ("budget_vcpu_seconds", "0.5"),
    ] {
        cases.push(case(format!("tokens: {field} {v}"), token(field, v), INVALID));
    }
    // Operators' limits last: were one taken, it would not change the cases above.
    for (field, v) in [
        ("vcpu_seconds_per_day", "-1"),
        ("vcpu_seconds_per_day", "1.5"),
        ("vcpu_seconds_per_day", "1e400"),
        ("vcpu_seconds_per_day", "18446744073709551616"),
        ("vcpu_seconds_per_month", "\"NaN\""),
        ("concurrent_runs", "4294967296"),
        ("max_fanout_tasks", "-3"),
        ("requests_per_minute", "\"60\""),
        ("storage_bytes", "1e19"),
        ("max_items_per_job", "-5"),
        ("job_retention_days", "0"),
        ("job_retention_days", "4294967296"),
        ("run_retention_days", "0"),
        ("run_retention_days", "-1"),
        ("audit_retention_days", "0"),
        ("delivery_retention_days", "0"),
        ("dataset_retention_days", "0"),
        ("model_version_retention_days", "0"),
        ("run_record_retention_days", "0"),
    ] {
        let policy = format!(r#"{{"{field}":{v}}}"#);
        cases.push(case(
            format!("quotas: {field} {v}"),
            c.admin("PUT", "/v1/admin/quotas/dev", policy),
            INVALID,
        ));
    }
    for v in ["1e400", "9223372036854775808", "\"NaN\"", "-1", "1.5"] {
        let body = format!(r#"{{"spend_cap_micros":{v},"spend_cap_period":"day","reason":"hostile"}}"#);
        cases.push(case(
            format!("kill switches: spend_cap_micros {v}"),
            c.admin("PUT", "/v1/admin/kill-switches", body),
            INVALID,
        ));
    }
    cases.push(case(
        "kill switches: spend_cap_period year",
        c.admin(
            "PUT",
            "/v1/admin/kill-switches",
            r#"{"spend_cap_micros":1,"spend_cap_period":"year","reason":"hostile"}"#,
        ),
        INVALID,
    ));
    cases
}

/// An unknown field in every JSON body; an unknown parameter in every query.
fn unknown_fields(c: &Ctx) -> Vec<Case> {
    let colour = r#","colour":"red""#;
    let person = |method: &'static str, target: String, body: &str| {
        Req::new(method, target).bearer(&c.person).json(body.to_owned())
    };
    let bodies: Vec<(&str, Req)> = vec![
        ("runs: a spec", c.run(c.spec(colour))),
        ("runs: a parameter describe does not take", c.run(c.spec(r#","params":{"colour":"red"}"#))),
        ("jobs: a job", c.job(format!(r#"{{"method":"item.echo","items":[1]{colour}}}"#))),
        (
            "jobs: options",
            c.job(format!(r#"{{"method":"item.echo","items":[1],"options":{{"params":{{}}{colour}}}}}"#)),
        ),
        (
            "jobs: a parameter item.echo does not take",
            c.job(r#"{"method":"item.echo","items":[1],"options":{"params":{"colour":"red"}}}"#),
        ),
        (
            "admin: a new tenant",
            c.admin(
                "POST",
                "/v1/admin/tenants",
                format!(r#"{{"id":"acme","name":"A","tier":"verified","residency":"eu"{colour}}}"#),
            ),
        ),
        (
            "admin: a tenant's management",
            c.admin("PATCH", "/v1/admin/tenants/dev", format!(r#"{{"name":"D"{colour}}}"#)),
        ),
        ("tenants: an update", c.admin("PATCH", "/v1/tenants/dev", format!(r#"{{"name":"D"{colour}}}"#))),
        (
            "admin: a quota policy",
            c.admin("PUT", "/v1/admin/quotas/dev", format!(r#"{{"note":"n"{colour}}}"#)),
        ),
        (
            "admin: kill switches",
            c.admin("PUT", "/v1/admin/kill-switches", format!(r#"{{"reason":"r"{colour}}}"#)),
        ),
        (
            "admin: an executor switch",
            c.admin(
                "PUT",
                "/v1/admin/executors/local-process",
                format!(r#"{{"enabled":true,"reason":"r"{colour}}}"#),
            ),
        ),
        (
            "admin: evidence",
            c.admin("PUT", "/v1/admin/executors/local-process/evidence", r#"{"colour":"red"}"#),
        ),
        (
            "members: a new member",
            c.person(
                "POST",
                "/v1/tenants/dev/members",
                format!(r#"{{"email":"new@dev.local","role":"viewer"{colour}}}"#),
            ),
        ),
        (
            "members: an update",
            c.admin("PATCH", "/v1/tenants/dev/members/dev@dev.local", r#"{"colour":"red"}"#),
        ),
        (
            "projects: a new project",
            c.person("POST", "/v1/tenants/dev/projects", format!(r#"{{"id":"p2","name":"P"{colour}}}"#)),
        ),
        ("projects: an update", c.admin("PATCH", c.project.clone(), format!(r#"{{"name":"D"{colour}}}"#))),
        (
            "project members: a new member",
            c.post(c.at("/members"), format!(r#"{{"email":"new@dev.local","role":"viewer"{colour}}}"#)),
        ),
        (
            "project members: an update",
            c.admin("PATCH", c.at("/members/dev@dev.local"), r#"{"colour":"red"}"#),
        ),
        (
            "tokens: a new token",
            person("POST", c.at("/tokens"), &format!(r#"{{"name":"t","scopes":["runs:create"]{colour}}}"#)),
        ),
        (
            "access checks: of the tenant",
            c.person(
                "POST",
                "/v1/tenants/dev/access-checks",
                format!(r#"{{"resource":"run","action":"read"{colour}}}"#),
            ),
        ),
        (
            "access checks: of the project",
            c.post(c.at("/access-checks"), format!(r#"{{"resource":"run","action":"read"{colour}}}"#)),
        ),
        (
            "dev idp: a login",
            Req::new("POST", "/dev/idp/login").json(format!(r#"{{"email":"dev@dev.local"{colour}}}"#)),
        ),
    ];
    let queries: Vec<(&str, Req)> = vec![
        ("runs: list ?colour=red", c.get(c.at("/runs?colour=red"))),
        ("runs: submit ?colour=red", c.run(c.spec("")).tap_target("?colour=red")),
        ("datasets: list ?colour=red", c.get(c.at("/datasets?colour=red"))),
        ("datasets: upload ?colour=red", c.send("POST", c.at("/datasets?colour=red")).body("text/csv", CSV)),
        ("model versions: list ?colour=red", c.get(c.at("/model-versions?colour=red"))),
        ("job items: ?colour=red", c.get(format!("/v1/jobs/{JOB}/items?colour=red"))),
        ("audit: ?colour=red", Req::new("GET", "/v1/admin/audit?colour=red").bearer(&c.operator)),
        ("tenant audit: ?colour=red", Req::new("GET", "/v1/tenants/dev/audit?colour=red").bearer(&c.person)),
        ("tenants: list ?colour=red", Req::new("GET", "/v1/admin/tenants?colour=red").bearer(&c.operator)),
        ("tokens: list ?colour=red", Req::new("GET", c.at("/tokens?colour=red")).bearer(&c.person)),
        ("usage: of the project ?colour=red", c.get(c.at("/usage?colour=red"))),
        (
            "usage: of the tenant ?colour=red",
            Req::new("GET", "/v1/tenants/dev/usage?colour=red").bearer(&c.person),
        ),
        ("runs: list ?page_size=1&page_size=2", c.get(c.at("/runs?page_size=1&page_size=2"))),
    ];
    bodies
        .into_iter()
        .chain(queries)
        .map(|(name, req)| case(format!("unknown field, {name}"), req, INVALID))
        .collect()
}

/// `../`, encoded or not, in ids, names and object paths; ids with
/// spaces, slashes, unicode.
fn traversal(c: &Ctx) -> Vec<Case> {
    let not_found: Vec<(&str, Req)> = vec![
        ("runs: ..%2f..%2fadmin", c.get("/v1/runs/..%2f..%2fadmin")),
        ("runs: %2e%2e%2f%2e%2e%2fetc%2fpasswd", c.get("/v1/runs/%2e%2e%2f%2e%2e%2fetc%2fpasswd")),
        ("runs: ../../etc/passwd", c.get("/v1/runs/../../etc/passwd")),
        ("runs: an id ending in /..", c.get(format!("/v1/runs/{RUN}/.."))),
        ("runs: cancel of ..%2f..", c.send("POST", "/v1/runs/..%2f../cancel")),
        ("runs: an id with a space", c.get("/v1/runs/run_01arz3ndektsv4rrf%20q69g5fav")),
        ("runs: an id with an encoded slash", c.get("/v1/runs/run_01arz3ndekt%2Fsv4rrffq69g5fav")),
        ("runs: an id in unicode", c.get("/v1/runs/run_%C3%A9%C3%A9%C3%A9")),
        ("runs: an id with a NUL", c.get("/v1/runs/run_%00")),
        ("jobs: ..%2F..%2Fsecrets", c.get("/v1/jobs/..%2F..%2Fsecrets")),
        ("jobs: item log of ..%2f", c.get("/v1/jobs/..%2f..%2f/items/0/log")),
        ("model versions: %2e%2e", c.get("/v1/model-versions/%2e%2e")),
        ("model versions: urls of ..%2fmv", c.send("POST", "/v1/model-versions/..%2fmv/urls")),
        ("datasets: ..%2f..%2fmapi.db", c.get(c.at("/datasets/..%2f..%2fmapi.db"))),
        ("datasets: an id in unicode", c.get(c.at("/datasets/ds_%E2%80%AE"))),
        ("tokens: revoke ..%2f..%2f", Req::new("DELETE", c.at("/tokens/..%2f..%2f")).bearer(&c.person)),
        (
            "executors: ..%2flocal-process",
            c.admin(
                "PUT",
                "/v1/admin/executors/..%2flocal-process",
                r#"{"enabled":false,"reason":"hostile"}"#,
            ),
        ),
        ("paths: //v1/whoami", c.get("//v1/whoami")),
        ("paths: /v1/./whoami/..", c.get("/v1/./whoami/..")),
        ("paths: an absolute-form target", c.get(format!("http://evil.example/v1/runs/{RUN}"))),
        ("objects: a bucket that does not exist", Req::new("GET", "/o/nope/key")),
        ("objects: a bootstrap name that does not exist", Req::new("GET", "/o/bootstrap/0123abcd")),
    ];
    let invalid: Vec<(&str, Req)> = vec![
        ("runs: a tenant ..%2f..%2fadmin", c.get("/v1/tenants/..%2f..%2fadmin/projects/default/runs")),
        ("runs: a tenant %2e%2e", c.get("/v1/tenants/%2e%2e/projects/default/runs")),
        ("runs: a project ..", c.get("/v1/tenants/dev/projects/../runs")),
        ("runs: a project with a space", c.get("/v1/tenants/dev/projects/de%20fault/runs")),
        ("runs: a project in unicode", c.get("/v1/tenants/dev/projects/d%C3%A9faut/runs")),
        ("runs: a dataset ../../etc/passwd", c.run(r#"{"method":"describe","dataset":"../../etc/passwd"}"#)),
        ("runs: a dataset ds_..%2f..", c.run(r#"{"method":"describe","dataset":"ds_..%2f.."}"#)),
        (
            "runs: a dataset with spaces",
            c.run(r#"{"method":"describe","dataset":"ds_01arz3nd ktsv4rrffq69g5fav"}"#),
        ),
        (
            "runs: a dataset in unicode",
            c.run(r#"{"method":"describe","dataset":"ds_ééééééééééééééééééééééééé"}"#),
        ),
        ("runs: a method ../describe", c.run(c.spec_of("../describe"))),
        (
            "datasets: a name ../../etc/passwd with a NUL",
            c.send("POST", c.at("/datasets?name=..%2f..%2fetc%2fpasswd%00")).body("text/csv", CSV),
        ),
        (
            "members: ..%2f..%2fadmin%40dev.local",
            Req::new("DELETE", "/v1/tenants/dev/members/..%2f..%2fadmin%40dev.local").bearer(&c.person),
        ),
        ("quotas: a tenant ..%2fdev", c.admin("PUT", "/v1/admin/quotas/..%2fdev", r#"{"note":"n"}"#)),
        (
            "admin: a new tenant ../x",
            c.admin(
                "POST",
                "/v1/admin/tenants",
                r#"{"id":"../x","name":"X","tier":"verified","residency":"eu"}"#,
            ),
        ),
        (
            "admin: a new tenant in unicode",
            c.admin(
                "POST",
                "/v1/admin/tenants",
                r#"{"id":"äcme","name":"X","tier":"verified","residency":"eu"}"#,
            ),
        ),
        (
            "projects: a new project ../default",
            c.person("POST", "/v1/tenants/dev/projects", r#"{"id":"../default","name":"X"}"#),
        ),
        (
            "projects: a new project with a slash",
            c.person("POST", "/v1/tenants/dev/projects", r#"{"id":"a/b","name":"X"}"#),
        ),
        (
            "members: a new member ../@x",
            c.person("POST", "/v1/tenants/dev/members", r#"{"email":"../@x","role":"viewer"}"#),
        ),
        ("objects: GET /o/data/..%2f..%2fsecrets.json", Req::new("GET", "/o/data/..%2f..%2fsecrets.json")),
        ("objects: GET /o/data/../../../etc/passwd", Req::new("GET", "/o/data/../../../etc/passwd")),
        (
            "objects: GET /o/bootstrap/%2e%2e%2f%2e%2e%2fmapi.db",
            Req::new("GET", "/o/bootstrap/%2e%2e%2f%2e%2e%2fmapi.db"),
        ),
        ("objects: GET /o/bootstrap/..%2fsecrets.json", Req::new("GET", "/o/bootstrap/..%2fsecrets.json")),
        (
            "objects: PUT /o/data/..%2fx",
            Req::new("PUT", "/o/data/..%2fx?method=PUT&expires=1&sig=00").body("text/plain", "x"),
        ),
        (
            "objects: DELETE /o/bootstrap/../x",
            Req::new("DELETE", "/o/bootstrap/../x").header("x-goog-if-generation-match", "1"),
        ),
        ("objects: a key with a space", Req::new("GET", "/o/bootstrap/a%20b")),
    ];
    let forbidden: Vec<(&str, Req)> = vec![
        ("objects: a data object without a signature", Req::new("GET", "/o/data/t/a/in.csv")),
        (
            "objects: a data object with a forged signature",
            Req::new("GET", "/o/data/t/a/in.csv?method=GET&expires=99999999999&sig=00"),
        ),
        (
            "objects: a data object with a signature that is not hex",
            Req::new("GET", "/o/data/t/a/in.csv?method=GET&expires=99999999999&sig=zz"),
        ),
        (
            "objects: a PUT to the bootstrap bucket",
            Req::new("PUT", "/o/bootstrap/0123abcd").body("text/plain", "x"),
        ),
    ];
    let mut cases: Vec<Case> = Vec::new();
    cases.extend(not_found.into_iter().map(|(n, r)| case(format!("traversal, {n}"), r, NOT_FOUND)));
    cases.extend(invalid.into_iter().map(|(n, r)| case(format!("traversal, {n}"), r, INVALID)));
    cases.extend(forbidden.into_iter().map(|(n, r)| case(format!("traversal, {n}"), r, FORBIDDEN)));
    cases
}

/// A method no route of the path takes, on every route; paths no route has.
fn methods(c: &Ctx) -> Vec<Case> {
    let p = &c.project;
    let wrong: Vec<(&'static str, String)> = vec![
        ("DELETE", format!("{p}/datasets")),
        ("PUT", format!("{p}/datasets/{DS}")),
        ("DELETE", format!("{p}/runs")),
        ("PUT", format!("/v1/runs/{RUN}")),
        ("DELETE", format!("/v1/runs/{RUN}")),
        ("GET", format!("/v1/runs/{RUN}/cancel")),
        ("POST", format!("{p}/model-versions")),
        ("DELETE", format!("/v1/model-versions/{MV}")),
        ("GET", format!("/v1/model-versions/{MV}/urls")),
        ("DELETE", format!("{p}/jobs")),
        ("DELETE", format!("/v1/jobs/{JOB}")),
        ("POST", format!("/v1/jobs/{JOB}/items")),
        ("POST", format!("/v1/jobs/{JOB}/items/0/log")),
        ("GET", format!("/v1/jobs/{JOB}/cancel")),
        ("GET", format!("/v1/jobs/{JOB}/retry-failed")),
        ("POST", "/v1/usage".to_owned()),
        ("POST", "/v1/methods".to_owned()),
        ("DELETE", "/v1/methods/describe".to_owned()),
        ("POST", "/manifest".to_owned()),
        ("POST", format!("{p}/usage")),
        ("POST", "/v1/tenants/dev/usage".to_owned()),
        ("GET", "/v1/sessions".to_owned()),
        ("POST", "/v1/whoami".to_owned()),
        ("POST", "/v1/admin/executors".to_owned()),
        ("GET", "/v1/admin/executors/local-process".to_owned()),
        ("GET", "/v1/admin/executors/local-process/evidence".to_owned()),
        ("DELETE", "/v1/admin/tenants".to_owned()),
        ("POST", "/v1/admin/tenants/dev".to_owned()),
        ("POST", "/v1/admin/audit".to_owned()),
        ("POST", "/v1/admin/quotas".to_owned()),
        ("GET", "/v1/admin/quotas/dev".to_owned()),
        ("POST", "/v1/admin/kill-switches".to_owned()),
        ("DELETE", "/v1/tenants/dev".to_owned()),
        ("PUT", "/v1/tenants/dev/members".to_owned()),
        ("GET", "/v1/tenants/dev/members/dev@dev.local".to_owned()),
        ("PUT", "/v1/tenants/dev/projects".to_owned()),
        ("POST", p.clone()),
        ("PUT", format!("{p}/members")),
        ("GET", format!("{p}/members/dev@dev.local")),
        ("DELETE", format!("{p}/tokens")),
        ("GET", format!("{p}/tokens/tok")),
        ("POST", "/v1/tenants/dev/audit".to_owned()),
        ("GET", "/v1/tenants/dev/access-checks".to_owned()),
        ("GET", format!("{p}/access-checks")),
        ("GET", "/internal/events".to_owned()),
        ("GET", "/internal/tick".to_owned()),
        ("GET", "/internal/tasks/dispatch".to_owned()),
        ("GET", "/internal/tasks/finalize".to_owned()),
        ("GET", "/internal/tasks/jobs/fanout".to_owned()),
        ("GET", "/internal/tasks/jobs/item".to_owned()),
        ("GET", "/internal/tasks/jobs/housekeep".to_owned()),
        ("POST", "/health".to_owned()),
        ("POST", "/metrics".to_owned()),
        ("POST", "/openapi.json".to_owned()),
        ("DELETE", "/build-info".to_owned()),
        ("GET", "/dev/idp/login".to_owned()),
        ("POST", "/dev/idp/jwks.json".to_owned()),
        ("POST", "/o/data/t/a/in.csv".to_owned()),
        ("PATCH", "/o/bootstrap/0123abcd".to_owned()),
        ("OPTIONS", format!("{p}/runs")),
        ("TRACE", "/v1/whoami".to_owned()),
        ("BREW", format!("/v1/runs/{RUN}")),
        // The platform's own address answers GET only (a browser is sent to the console).
        ("POST", "/".to_owned()),
    ];
    let unknown: Vec<String> = vec![
        "/v1/nothing".to_owned(),
        "/v2/whoami".to_owned(),
        "/v1".to_owned(),
        "/v1/runs".to_owned(),
        format!("{p}/nothing"),
        format!("{p}/runs/{RUN}"),
        format!("/v1/runs/{RUN}/nothing"),
        format!("/v1/jobs/{JOB}/items/0"),
        "/internal/nothing".to_owned(),
        "/dev/idp/nothing".to_owned(),
        "/o".to_owned(),
        "/v1/admin".to_owned(),
        "/health/".to_owned(),
        "/%00".to_owned(),
    ];
    let mut cases: Vec<Case> = wrong
        .into_iter()
        .map(|(m, path)| case(format!("method, {m} {path}"), c.send(m, path.clone()), METHOD))
        .collect();
    cases.extend(
        unknown
            .into_iter()
            .map(|path| case(format!("unknown path, GET {path}"), c.get(path.clone()), NOT_FOUND)),
    );
    cases.push(case("unknown path, POST /v1/nothing", c.post("/v1/nothing", "{}"), NOT_FOUND));
    cases
}

/// No credential, empty ones, junk ones, the wrong scheme, a huge one, on
/// every route family; the internal routes as an outside attacker sees them.
fn credentials(c: &Ctx) -> Vec<Case> {
    let p = &c.project;
    let routes: Vec<(&'static str, String, Option<&str>)> = vec![
        ("GET", format!("{p}/runs"), None),
        ("POST", format!("{p}/runs"), Some(r#"{"method":"describe"}"#)),
        ("GET", format!("/v1/runs/{RUN}"), None),
        ("POST", format!("{p}/datasets"), None),
        ("GET", format!("{p}/datasets/{DS}"), None),
        ("POST", format!("{p}/jobs"), Some(r#"{"method":"item.echo","items":[1]}"#)),
        ("GET", format!("/v1/jobs/{JOB}/items"), None),
        ("GET", format!("{p}/model-versions"), None),
        ("POST", format!("/v1/model-versions/{MV}/urls"), None),
        ("GET", format!("{p}/usage"), None),
        ("GET", "/v1/methods/describe".to_owned(), None),
        ("GET", "/v1/whoami".to_owned(), None),
        ("POST", "/v1/sessions".to_owned(), None),
        ("GET", "/v1/admin/tenants".to_owned(), None),
        ("PUT", "/v1/admin/kill-switches".to_owned(), Some(r#"{"reason":"r"}"#)),
        ("GET", "/v1/tenants/dev/audit".to_owned(), None),
    ];
    let garbage_jwt = "eyJub3QiOiJqc29uIg.bm90IGEgY2xhaW0.c2lnbmF0dXJl";
    let schemes: Vec<(&str, Option<String>)> = vec![
        ("no Authorization", None),
        ("an empty bearer", Some("Bearer ".to_owned())),
        ("`Bearer mapi_` and junk", Some("Bearer mapi_zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz".to_owned())),
        ("a JWT of three garbage parts", Some(format!("Bearer {garbage_jwt}"))),
        ("the Basic scheme", Some("Basic ZGV2QGRldi5sb2NhbDpwYXNzd29yZA==".to_owned())),
    ];
    let mut cases = Vec::new();
    for &(method, ref path, body) in &routes {
        for (what, auth) in &schemes {
            let mut req = Req::new(method, path.clone());
            if let Some(a) = auth {
                req = req.header("authorization", a);
            }
            if let Some(b) = body {
                req = req.json(b);
            }
            cases.push(case(format!("auth, {what}: {method} {path}"), req, UNAUTHENTICATED));
        }
    }
    let runs = format!("{p}/runs");
    let extra: Vec<(&str, Req)> = vec![
        (
            "a 100 KiB bearer",
            Req::new("GET", runs.clone()).bearer(&format!("mapi_{}", "a".repeat(100 * 1024))),
        ),
        (
            "a 100 KiB JWT",
            Req::new("GET", "/v1/whoami").bearer(&format!(
                "{}.{}.{}",
                "a".repeat(40_000),
                "b".repeat(40_000),
                "c".repeat(22_000)
            )),
        ),
        ("`Bearer` without a credential", Req::new("GET", runs.clone()).header("authorization", "Bearer")),
        ("`Bearer` and spaces", Req::new("GET", runs.clone()).header("authorization", "Bearer      ")),
        ("`Bearer mapi_` alone", Req::new("GET", runs.clone()).bearer("mapi_")),
        ("a JWT of three empty parts", Req::new("GET", runs.clone()).bearer("..")),
        ("a JWT of four parts", Req::new("GET", runs.clone()).bearer(&format!("{garbage_jwt}.x"))),
        (
            "alg none with an empty signature",
            Req::new("GET", runs.clone()).bearer("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0."),
        ),
        (
            "the seeded token with junk after it",
            Req::new("GET", runs.clone()).bearer(&format!("{}zz", c.token)),
        ),
        ("the seeded token twice", Req::new("GET", runs.clone()).bearer(&format!("{} {}", c.token, c.token))),
        (
            "the Token scheme",
            Req::new("GET", runs.clone()).header("authorization", format!("Token {}", c.token)),
        ),
        (
            "the token without a scheme",
            Req::new("GET", runs.clone()).header("authorization", c.token.clone()),
        ),
        (
            "the Digest scheme",
            Req::new("GET", "/v1/whoami").header("authorization", "Digest username=\"dev\", response=\"x\""),
        ),
    ];
    cases.extend(extra.into_iter().map(|(what, req)| case(format!("auth, {what}"), req, UNAUTHENTICATED)));
    let internal = [
        "/internal/tasks/dispatch",
        "/internal/tasks/finalize",
        "/internal/tasks/jobs/fanout",
        "/internal/tasks/jobs/item",
        "/internal/tasks/jobs/housekeep",
        "/internal/tick",
        "/internal/events",
    ];
    for path in internal {
        let body = r#"{"run":"run_01arz3ndektsv4rrffq69g5fav"}"#;
        cases.push(case(
            format!("internal, no token: POST {path}"),
            Req::new("POST", path).json(body),
            UNAUTHENTICATED,
        ));
        cases.push(case(
            format!("internal, a tenant's API token: POST {path}"),
            Req::new("POST", path).bearer(&c.token).json(body),
            UNAUTHENTICATED,
        ));
        cases.push(case(
            format!("internal, a junk token: POST {path}"),
            Req::new("POST", path).bearer("internal-token-guess").json(body),
            UNAUTHENTICATED,
        ));
    }
    cases.push(case(
        "internal, an operator's session: POST /internal/tick",
        Req::new("POST", "/internal/tick").bearer(&c.operator),
        UNAUTHENTICATED,
    ));
    cases
}

/// Keys no submit takes, and a key reused with another body (the first
/// use of each is made before the table).
fn idempotency(c: &Ctx, run_key: &str, job_key: &str) -> Vec<Case> {
    let spec = c.spec("");
    let job = r#"{"method":"item.echo","items":[1,2]}"#;
    let long = "k".repeat(256);
    vec![
        case("runs: a key of 256 characters", c.run(spec.clone()).header("idempotency-key", &long), INVALID),
        case(
            "runs: a key of non-ASCII bytes",
            c.run(spec.clone()).header("idempotency-key", b"cl\xc3\xa9"),
            INVALID,
        ),
        case("runs: an empty key", c.run(spec.clone()).header("idempotency-key", ""), INVALID),
        case(
            "runs: a key with a control byte",
            c.run(spec.clone()).header("idempotency-key", b"k\x01k"),
            INVALID,
        ),
        case(
            "runs: the same key with another body",
            c.run(c.spec(r#","timeout_s":10"#)).header("idempotency-key", run_key),
            REUSED,
        ),
        case(
            "runs: the same key with another class",
            c.run(c.spec(r#","class":"M""#)).header("idempotency-key", run_key),
            REUSED,
        ),
        case("jobs: a key of 256 characters", c.job(job).header("idempotency-key", &long), INVALID),
        case("jobs: a key of non-ASCII bytes", c.job(job).header("idempotency-key", b"cl\xc3\xa9"), INVALID),
        case("jobs: an empty key", c.job(job).header("idempotency-key", ""), INVALID),
        case(
            "jobs: the same key with another body",
            c.job(r#"{"method":"item.echo","items":[1,2,3]}"#).header("idempotency-key", job_key),
            REUSED,
        ),
        case(
            "jobs: the same key with other params",
            c.job(r#"{"method":"text.stats","items":[{"text":"a"}]}"#).header("idempotency-key", job_key),
            REUSED,
        ),
    ]
}

/// Heads no server should serve, written straight to the socket; bodies
/// whose chunked framing breaks.
fn heads(c: &Ctx) -> Vec<Case> {
    let head = |extra: &str| format!("GET /health HTTP/1.1\r\nhost: x\r\n{extra}connection: close\r\n\r\n");
    let post = |extra: &str, body: &str| {
        format!("POST /v1/whoami HTTP/1.1\r\nhost: x\r\n{extra}connection: close\r\n\r\n{body}")
    };
    let fields = |n: usize| (0..n).map(|i| format!("x-h{i}: 1\r\n")).collect::<String>();
    let large_fields = (0..80).map(|i| format!("x-f{i}: {}\r\n", "v".repeat(900))).collect::<String>();
    vec![
        raw(
            "a head of 70 KiB in one header",
            head(&format!("x-pad: {}\r\n", "a".repeat(70 * 1024))),
            HEADERS,
        ),
        raw(
            "a 100 KiB bearer",
            head(&format!("authorization: Bearer mapi_{}\r\n", "a".repeat(100 * 1024))),
            HEADERS,
        ),
        raw("a head of 72 KiB in 80 headers", head(&large_fields), HEADERS),
        raw("101 header fields", head(&fields(99)), HEADERS),
        raw("500 header fields", head(&fields(500)), HEADERS),
        raw(
            "a URI of 8,193 bytes",
            format!("GET /health?{} HTTP/1.1\r\nhost: x\r\n\r\n", "a".repeat(8193 - 8)),
            URI_TOO_LONG,
        ),
        raw(
            "a URI of 10 KiB",
            format!("GET /v1/runs/{} HTTP/1.1\r\nhost: x\r\n\r\n", "a".repeat(10 * 1024)),
            URI_TOO_LONG,
        ),
        raw(
            "a request line of 70 KiB",
            format!("GET /{} HTTP/1.1\r\nhost: x\r\n\r\n", "a".repeat(70 * 1024)),
            URI_TOO_LONG,
        ),
        raw(
            "a NUL in a header value",
            splice("GET /health HTTP/1.1\r\nhost: x\r\nx-a: a", b"\x00", "b\r\n\r\n"),
            INVALID,
        ),
        raw("a header name with a space", head("x bad: 1\r\n"), INVALID),
        raw("a header line without a colon", head("garbage\r\n"), INVALID),
        raw("an empty header name", head(": value\r\n"), INVALID),
        raw("a CR alone in a header value", head("x-a: a\rb\r\n"), INVALID),
        raw("a folded header line", head("x-a: 1\r\n  folded\r\n"), INVALID),
        // Bytes 0x80 to 0xFF are obs-text, which RFC 9110 lets a field value
        // hold: refused where the field is read, not by the guard.
        case(
            "a 0xFF byte in the content type",
            c.send("POST", c.at("/runs")).body(b"application/json\xff", c.spec("")),
            MEDIA,
        ),
        raw(
            "a bearer of 0xFF bytes",
            splice("GET /v1/whoami HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ", b"\xff\xfe", "\r\n\r\n"),
            UNAUTHENTICATED,
        ),
        raw("a garbage request line", "HELLO\r\n\r\n", INVALID),
        raw("a TLS ClientHello", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n".to_vec(), INVALID),
        raw("HTTP/9.9", "GET /health HTTP/9.9\r\nhost: x\r\n\r\n", INVALID),
        raw("no HTTP version", "GET /health\r\n\r\n", INVALID),
        raw("a space in the URI", "GET /v1/runs/a b HTTP/1.1\r\nhost: x\r\n\r\n", INVALID),
        raw(
            "raw 0xFF bytes in the query",
            splice("GET /health?name=", b"\xff\xfe", " HTTP/1.1\r\nhost: x\r\n\r\n"),
            INVALID,
        ),
        raw(
            "Content-Length and Transfer-Encoding",
            post("content-length: 3\r\ntransfer-encoding: chunked\r\n", "0\r\n\r\n"),
            INVALID,
        ),
        raw(
            "two different Content-Lengths",
            post("content-length: 2\r\ncontent-length: 3\r\n", "{}"),
            INVALID,
        ),
        raw("Content-Length abc", post("content-length: abc\r\n", ""), INVALID),
        raw("Content-Length -1", post("content-length: -1\r\n", ""), INVALID),
        raw("Content-Length of 2^80", post("content-length: 1208925819614629174706176\r\n", ""), INVALID),
        raw("Content-Length 1,2", post("content-length: 1,2\r\n", "{}"), INVALID),
        raw("Transfer-Encoding gzip", post("transfer-encoding: gzip\r\n", ""), INVALID),
        raw("Transfer-Encoding chunked, gzip", post("transfer-encoding: chunked, gzip\r\n", ""), INVALID),
        raw(
            "Transfer-Encoding in HTTP/1.0",
            "POST /v1/whoami HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
            INVALID,
        ),
        raw("CONNECT", "CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n", INVALID),
        case(
            "a dataset whose chunk size is not hex",
            c.csv("zz\r\na,b\r\n0\r\n\r\n").header("transfer-encoding", "chunked"),
            INVALID,
        ),
        case(
            "a run spec whose chunk size is not hex",
            c.run("zz\r\n{}\r\n0\r\n\r\n").header("transfer-encoding", "chunked"),
            INVALID,
        ),
        case(
            "a run spec whose chunk is longer than its size",
            c.run("2\r\n{}}}}\r\n0\r\n\r\n").header("transfer-encoding", "chunked"),
            INVALID,
        ),
    ]
}

/// Heads and bodies that arrive too slowly (header timeout 1 s).
fn slow(c: &Ctx) -> Vec<Case> {
    let p = &c.project;
    let stalled_body = |target: String, ct: &str| {
        format!(
            "POST {target} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-type: {ct}\r\ncontent-length: 100\r\nconnection: close\r\n\r\n0123456789",
            c.token
        )
    };
    vec![
        trickled(
            "a head trickled a byte every 50 ms",
            "GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\nuser-agent: slowloris\r\naccept: */*\r\nx-pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n",
            TIMEOUT,
        ),
        trickled(
            "an authenticated POST head trickled",
            format!(
                "POST {p}/runs HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{{}}",
                c.token
            ),
            TIMEOUT,
        ),
        raw("a request line cut off, then silence", "GET /hea", TIMEOUT).closing(),
        raw("a head without its empty line, then silence", "GET /health HTTP/1.1\r\nhost: x\r\n", TIMEOUT)
            .closing(),
        raw(
            "a dataset body stalled after 10 of 100 bytes",
            stalled_body(format!("{p}/datasets"), "text/csv"),
            TIMEOUT,
        ),
        raw(
            "a run spec stalled after 10 of 100 bytes",
            stalled_body(format!("{p}/runs"), "application/json"),
            TIMEOUT,
        ),
    ]
}

/// Bodies of the standard inference protocols that are no request, sent to
/// a ready endpoint (`alias`), so each reaches the parsing it must fail.
fn protocols(c: &Ctx, alias: &str) -> Vec<Case> {
    let v2 = c.at(&format!("/v2/models/{alias}/infer"));
    let v1 = c.at(&format!("/v1/models/{alias}:predict"));
    let mlflow = c.at(&format!("/endpoints/{alias}/invocations"));
    let binary = |len: &str, body: &[u8]| {
        Req::new("POST", v2.clone())
            .bearer(&c.token)
            .header("inference-header-content-length", len)
            .body("application/octet-stream", body.to_vec())
    };
    let tensor = |datatype: &str, size: usize| {
        format!(
            r#"{{"inputs":[{{"name":"x","shape":[1],"datatype":"{datatype}","parameters":{{"binary_data_size":{size}}}}}]}}"#
        )
    };
    let with_bytes = |head: String, raw: &[u8]| {
        let mut body = head.clone().into_bytes();
        body.extend_from_slice(raw);
        (head.len().to_string(), body)
    };
    let (short_len, short) = with_bytes(tensor("FP64", 8), &[0; 4]);
    let (long_len, long) = with_bytes(tensor("FP64", 8), &[0; 12]);
    let (odd_len, odd) = with_bytes(tensor("FP64", 3), &[0; 3]);
    let (fp8_len, fp8) = with_bytes(tensor("FP8", 1), &[0]);
    let (cut_len, cut) = with_bytes(tensor("BYTES", 6), &[9, 0, 0, 0, b'a', b'b']);
    let rows = format!(
        r#"{{"inputs":[{{"name":"x","shape":[10001],"datatype":"FP64","data":[{}]}}]}}"#,
        vec!["0"; 10_001].join(",")
    );
    vec![
        case("v2: no inputs", c.post(v2.clone(), "{}"), INVALID),
        case("v2: empty inputs", c.post(v2.clone(), r#"{"inputs":[]}"#), INVALID),
        case("v2: a body that is no JSON", c.post(v2.clone(), "inputs"), INVALID),
        case("v2: invalid UTF-8", c.post(v2.clone(), b"{\"inputs\":\"\xff\"}".to_vec()), INVALID),
        case("v2: nested 10,000 deep", c.post(v2.clone(), deep_array(10_000)), INVALID),
        case(
            "v2: a matrix input",
            c.post(
                v2.clone(),
                r#"{"inputs":[{"name":"x","shape":[2,3],"datatype":"FP64","data":[1,2,3,4,5,6]}]}"#,
            ),
            INVALID,
        ),
        case(
            "v2: data short of its shape",
            c.post(v2.clone(), r#"{"inputs":[{"name":"x","shape":[3],"datatype":"FP64","data":[1,2]}]}"#),
            INVALID,
        ),
        case(
            "v2: no rows",
            c.post(v2.clone(), r#"{"inputs":[{"name":"x","shape":[0],"datatype":"FP64","data":[]}]}"#),
            INVALID,
        ),
        case("v2: 10,001 rows", c.post(v2.clone(), rows), INVALID),
        case("v2 binary: a length that is no number", binary("abc", b"{}"), INVALID),
        case("v2 binary: a negative length", binary("-1", b"{}"), INVALID),
        case("v2 binary: a length past u64", binary("99999999999999999999999", b"{}"), INVALID),
        case("v2 binary: a length past the body", binary("5", b"{}"), INVALID),
        case("v2 binary: a JSON part that is no JSON", binary("2", b"{x\x00\x00"), INVALID),
        case("v2 binary: a tensor cut short", binary(&short_len, &short), INVALID),
        case("v2 binary: bytes after the last tensor", binary(&long_len, &long), INVALID),
        case("v2 binary: FP64 of 3 bytes", binary(&odd_len, &odd), INVALID),
        case("v2 binary: an unknown datatype", binary(&fp8_len, &fp8), INVALID),
        case("v2 binary: a BYTES element past its tensor", binary(&cut_len, &cut), INVALID),
        case("v1: instances that are arrays", c.post(v1.clone(), r#"{"instances":[[1,2]]}"#), INVALID),
        case("v1: instances that are a string", c.post(v1.clone(), r#"{"instances":"x"}"#), INVALID),
        case("v1: a body that is a list", c.post(v1.clone(), "[]"), INVALID),
        case("v1: a column the model lacks", c.post(v1.clone(), r#"{"instances":[{"nope":1}]}"#), INVALID),
        case("v1: no such verb", c.post(c.at(&format!("/v1/models/{alias}:explain")), "{}"), NOT_FOUND),
        case("mlflow: two formats", c.post(mlflow.clone(), r#"{"instances":[],"inputs":[]}"#), INVALID),
        case(
            "mlflow: a ragged dataframe_split",
            c.post(mlflow.clone(), r#"{"dataframe_split":{"columns":["a"],"data":[[1,2]]}}"#),
            INVALID,
        ),
        case(
            "mlflow: ragged input columns",
            c.post(mlflow.clone(), r#"{"inputs":{"a":[1],"b":[1,2]}}"#),
            INVALID,
        ),
        case("mlflow: records that are numbers", c.post(mlflow, r#"{"dataframe_records":[1]}"#), INVALID),
    ]
}

// ------------------------------------------------------------------- tests

/// The standard protocols' routes, on a ready endpoint of a fitted model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_bodies_that_are_no_request_are_refused() {
    let p = TestPlatform::start(&[]).await;
    let c = Ctx::new(&p).await;
    let id = p.submit(json!({"method": "tabular.linear", "dataset": c.dataset, "params": {"y": "y"}})).await;
    let fit = p.wait_final(&id).await;
    let version = fit["model_version"].as_str().unwrap_or_else(|| panic!("a model version: {fit:#}"));
    let body = json!({"alias": "hostile", "model_version": version});
    let made = p.http.post(p.url(&c.at("/endpoints"))).bearer_auth(&c.token).json(&body).send().await;
    assert_eq!(made.expect("create").status(), 202);
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let e: Value = p
            .http
            .get(p.url(&c.at("/endpoints/hostile")))
            .bearer_auth(&c.token)
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json");
        if e["status"] == "ready" {
            break;
        }
        assert!(e["status"] != "failed" && std::time::Instant::now() < deadline, "{e:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    verdict(&run(&p, "protocols", protocols(&c, "hostile"), 1).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_each_limit_and_csv_that_is_no_table_are_refused() {
    let p = TestPlatform::start(&[
        ("MAPI_MAX_JSON_BYTES", "2048"),
        ("MAPI_JOB_MAX_BODY_BYTES", "4096"),
        ("MAPI_JOB_MAX_ITEMS", "5"),
        ("MAPI_MAX_DATASET_BYTES", "8192"),
        ("MAPI_DATASET_MAX_COLUMNS", "4"),
        ("MAPI_DATASET_MAX_ROWS", "5"),
        ("MAPI_DATASET_MAX_CELL_BYTES", "300"),
    ])
    .await;
    let c = Ctx::new(&p).await;
    let mut failures = run(&p, "sizes", sizes(&c), 1).await;
    failures.extend(run(&p, "csv", csv_shapes(&c), 1).await);
    verdict(&failures);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_json_and_bad_encodings_are_refused() {
    let p = TestPlatform::start(&[]).await;
    let c = Ctx::new(&p).await;
    let mut failures = run(&p, "nesting", nesting(&c), 1).await;
    failures.extend(run(&p, "encodings", encodings(&c), 1).await);
    verdict(&failures);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numbers_no_field_holds_and_unknown_fields_are_refused() {
    let p = TestPlatform::start(&[]).await;
    let c = Ctx::new(&p).await;
    let mut failures = run(&p, "unknown fields", unknown_fields(&c), 1).await;
    failures.extend(run(&p, "numbers", numbers(&c), 1).await);
    verdict(&failures);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traversal_wrong_methods_and_unknown_paths_are_refused() {
    let p = TestPlatform::start(&[]).await;
    let c = Ctx::new(&p).await;
    let mut failures = run(&p, "traversal", traversal(&c), 1).await;
    failures.extend(run(&p, "methods", methods(&c), 1).await);
    verdict(&failures);
}

/// The head limit is raised so a 100 KiB credential reaches the
/// authentication it must fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_junk_and_misplaced_credentials_are_refused() {
    let p = TestPlatform::start(&[("MAPI_MAX_HEADER_BYTES", "262144")]).await;
    let c = Ctx::new(&p).await;
    verdict(&run(&p, "auth", credentials(&c), 1).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_and_reused_idempotency_keys_are_refused() {
    let p = TestPlatform::start(&[]).await;
    let c = Ctx::new(&p).await;
    let first = |target: String, body: Value| {
        p.http
            .post(p.url(&target))
            .bearer_auth(&c.token)
            .header("idempotency-key", "hostile-1")
            .json(&body)
            .send()
    };
    let r = first(c.at("/runs"), json!({"method": "describe", "dataset": c.dataset})).await.expect("run");
    assert_eq!(r.status(), 201, "the key's first run: {:?}", r.text().await);
    let r = first(c.at("/jobs"), json!({"method": "item.echo", "items": [1, 2]})).await.expect("job");
    assert_eq!(r.status(), 201, "the key's first job: {:?}", r.text().await);
    verdict(&run(&p, "idempotency", idempotency(&c, "hostile-1", "hostile-1"), 1).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abusive_heads_are_answered_with_problems() {
    let p = TestPlatform::start(&[]).await;
    let c = Ctx::new(&p).await;
    verdict(&run(&p, "headers", heads(&c), 1).await);
}

/// Bounded: each case waits at most [`ANSWER_WITHIN`] for its answer and
/// [`CLOSE_WITHIN`] for the close, and the cases run at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_timed_out_and_disconnected() {
    let p =
        TestPlatform::start(&[("MAPI_HEADER_READ_TIMEOUT_S", "1"), ("MAPI_BODY_READ_TIMEOUT_S", "1")]).await;
    let c = Ctx::new(&p).await;
    let cases = slow(&c);
    let n = cases.len();
    verdict(&run(&p, "slow", cases, n).await);
}
