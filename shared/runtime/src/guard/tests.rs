//! The guard against real sockets: [`crate::serve`] on 127.0.0.1 port 0,
//! and clients writing raw bytes so the tests choose every byte. The
//! timeouts run in tokio's virtual time. Each test fails without the guard:
//! hyper would answer with an empty body, or serve, or wait forever.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use mapi_api::problem::{Problem, ProblemCode};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};

use crate::config::GuardConfig;

/// What a test server's handlers tell the test.
type Reports = mpsc::UnboundedSender<Option<std::io::ErrorKind>>;

/// `GET /` says hi, `GET /peer` names the peer, `POST /echo` echoes the
/// body, `POST /sink` reads the body and reports how its read failed.
fn router(reports: Reports) -> Router {
    Router::new()
        .route("/", get(|| async { "hi" }))
        .route("/peer", get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }))
        .route("/echo", post(|body: Bytes| async move { body }))
        .route("/sink", post(sink))
        .with_state(reports)
}

async fn sink(State(reports): State<Reports>, body: Body) -> StatusCode {
    match axum::body::to_bytes(body, usize::MAX).await {
        Ok(_) => StatusCode::OK,
        Err(e) => {
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            let mut kind = None;
            while let Some(e) = source {
                if let Some(io) = e.downcast_ref::<std::io::Error>() {
                    kind = Some(io.kind());
                }
                source = e.source();
            }
            let _ = reports.send(kind);
            StatusCode::BAD_REQUEST
        }
    }
}

/// A server with the default guard; what its handlers report.
async fn server() -> (SocketAddr, mpsc::UnboundedReceiver<Option<std::io::ErrorKind>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (reports, reported) = mpsc::unbounded_channel();
    let shutdown = std::future::pending();
    tokio::spawn(crate::serve(
        listener,
        router(reports),
        shutdown,
        Duration::from_secs(1),
        GuardConfig::default(),
    ));
    (addr, reported)
}

/// One answer as the client read it.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The answer as a problem, checked to be a whole problem+json answer.
    fn problem(&self) -> Problem {
        assert_eq!(self.header("content-type"), Some("application/problem+json"), "{self:?}");
        assert_eq!(self.header("connection"), Some("close"), "{self:?}");
        let problem: Problem = serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not a problem ({e}): {}", String::from_utf8_lossy(&self.body)));
        assert_eq!(problem.status, self.status);
        assert_eq!(problem.code.status().as_u16(), self.status);
        let kind =
            format!("urn:mapi:problem:{}", problem.code.as_str().to_ascii_lowercase().replace('_', "-"));
        assert_eq!(problem.kind, kind);
        problem
    }
}

/// The answers in `bytes`, each framed by its `content-length`; panics on
/// a partial answer.
fn answers(mut bytes: &[u8]) -> Vec<Answer> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let answer = next_answer(bytes)
            .unwrap_or_else(|| panic!("partial answer: {:?}", String::from_utf8_lossy(bytes)));
        bytes = &bytes[answer.1..];
        out.push(answer.0);
    }
    out
}

/// The first whole answer in `bytes` and its length.
fn next_answer(bytes: &[u8]) -> Option<(Answer, usize)> {
    let mut fields = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut fields);
    let httparse::Status::Complete(head) = response.parse(bytes).expect("an answer's head") else {
        return None;
    };
    let headers: Vec<(String, String)> = response
        .headers
        .iter()
        .map(|h| (h.name.to_owned(), String::from_utf8_lossy(h.value).into_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, v)| v.parse().expect("content-length"));
    let body = bytes.get(head..head + length)?.to_vec();
    Some((Answer { status: response.code.expect("status"), headers, body }, head + length))
}

/// Reads until the server closes the connection.
async fn read_to_close(stream: &mut (impl AsyncRead + Unpin)) -> Vec<u8> {
    let mut bytes = Vec::new();
    timeout(Duration::from_secs(30), stream.read_to_end(&mut bytes))
        .await
        .expect("the server closes the connection")
        .expect("read");
    bytes
}

/// Reads one whole answer, and no more.
async fn read_answer(stream: &mut TcpStream) -> Answer {
    let mut bytes = Vec::new();
    loop {
        if !bytes.is_empty()
            && let Some((answer, len)) = next_answer(&bytes)
        {
            assert_eq!(len, bytes.len(), "one answer only");
            return answer;
        }
        let mut chunk = [0; 4096];
        let n = timeout(Duration::from_secs(60), stream.read(&mut chunk))
            .await
            .expect("an answer")
            .expect("read");
        assert!(n > 0, "closed before a whole answer: {:?}", String::from_utf8_lossy(&bytes));
        bytes.extend_from_slice(&chunk[..n]);
    }
}

/// Sends `request` on a new connection; the one answer, a refusal.
async fn refused(request: &[u8]) -> Problem {
    let (addr, _reports) = server().await;
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request).await.expect("write");
    let answers = answers(&read_to_close(&mut stream).await);
    assert_eq!(answers.len(), 1, "{answers:?}");
    answers[0].problem()
}

#[tokio::test]
async fn a_head_over_the_limit_is_431_naming_its_size() {
    let request = format!("GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n", "a".repeat(70_000));
    let problem = refused(request.as_bytes()).await;
    assert_eq!(problem.code, ProblemCode::HeadersTooLarge);
    assert_eq!(
        problem.detail,
        format!(
            "the request's headers are {} bytes: at most 65,536 are accepted (MAPI_MAX_HEADER_BYTES)",
            super::thousands(request.len())
        )
    );
}

#[tokio::test]
async fn too_many_headers_are_431() {
    let fields: String = (0..101).map(|i| format!("X-{i}: {i}\r\n")).collect();
    let problem = refused(format!("GET / HTTP/1.1\r\n{fields}\r\n").as_bytes()).await;
    assert_eq!(problem.code, ProblemCode::HeadersTooLarge);
    assert_eq!(
        problem.detail,
        "the request has 101 header fields: at most 100 are accepted (MAPI_MAX_HEADERS)"
    );
}

#[tokio::test]
async fn a_10_kib_uri_is_414() {
    let problem =
        refused(format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(10 * 1024)).as_bytes()).await;
    assert_eq!(problem.code, ProblemCode::UriTooLong);
    assert_eq!(
        problem.detail,
        "the request's URI is 10,241 bytes: at most 8,192 are accepted (MAPI_MAX_URI_BYTES)"
    );
}

#[tokio::test]
async fn a_nul_in_a_header_value_is_400() {
    let problem = refused(b"GET / HTTP/1.1\r\nHost: t\r\nX-Test: a\0b\r\n\r\n").await;
    assert_eq!(problem.code, ProblemCode::InvalidArgument);
    assert!(
        problem.detail.starts_with("the value of header field 2 (`X-Test`) holds the byte 0x00"),
        "{problem:?}"
    );
}

#[tokio::test]
async fn a_garbage_request_line_is_400() {
    let problem = refused(b"\x16\x03\x01 hello there\r\n\r\n").await;
    assert_eq!(problem.code, ProblemCode::InvalidArgument);
    assert!(problem.detail.starts_with("the request line is not `METHOD /path HTTP/1.1`"), "{problem:?}");
}

#[tokio::test]
async fn content_length_with_transfer_encoding_is_400() {
    let problem = refused(
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    )
    .await;
    assert_eq!(problem.code, ProblemCode::InvalidArgument);
    assert_eq!(problem.detail, "the request has both Content-Length and Transfer-Encoding: send one of them");
}

/// Four pipelined requests, bodies of each framing among them, are
/// answered in order on one connection; the fifth's head is too large, and
/// its refusal follows the fourth answer whole.
#[tokio::test]
async fn pipelined_requests_are_framed_across_keep_alive() {
    let (addr, _reports) = server().await;
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let me = stream.local_addr().expect("local addr");
    let requests = [
        "GET /peer HTTP/1.1\r\nHost: t\r\n\r\n".to_owned(),
        "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello".to_owned(),
        "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
         5;x=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n"
            .to_owned(),
        "GET / HTTP/1.1\r\nHost: t\r\n\r\n".to_owned(),
        format!("GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n", "a".repeat(70_000)),
    ];
    stream.write_all(requests.concat().as_bytes()).await.expect("write");
    let answers = answers(&read_to_close(&mut stream).await);
    let got: Vec<(u16, String)> =
        answers.iter().map(|a| (a.status, String::from_utf8_lossy(&a.body).into_owned())).collect();
    assert_eq!(got.len(), 5, "{got:?}");
    assert_eq!(
        got[..4],
        [
            (200, me.to_string()),
            (200, "hello".to_owned()),
            (200, "hello world".to_owned()),
            (200, "hi".to_owned())
        ]
    );
    assert_eq!(answers[4].problem().code, ProblemCode::HeadersTooLarge);
}

#[tokio::test(start_paused = true)]
async fn a_head_trickled_a_byte_a_second_is_408_after_the_header_timeout() {
    let (addr, _reports) = server().await;
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut read, mut write) = stream.into_split();
    let started = Instant::now();
    let trickle = tokio::spawn(async move {
        for b in b"GET / HTTP/1.1\r\nHost: t\r\nX-Slow: a long header sent slowly\r\n\r\n" {
            if write.write_all(&[*b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        panic!("the whole head was sent, never answered");
    });
    let answers = answers(&read_to_close(&mut read).await);
    let waited = started.elapsed();
    assert_eq!(answers.len(), 1, "{answers:?}");
    let problem = answers[0].problem();
    assert_eq!(problem.code, ProblemCode::RequestTimeout);
    assert!(
        problem.detail.contains("10 s") && problem.detail.contains("MAPI_HEADER_READ_TIMEOUT_S"),
        "{problem:?}"
    );
    assert!(
        (Duration::from_secs(10)..Duration::from_secs(11)).contains(&waited),
        "answered after {waited:?}"
    );
    assert!(!trickle.is_finished(), "answered before the head was sent");
    trickle.abort();
}

#[tokio::test(start_paused = true)]
async fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let (addr, _reports) = server().await;
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await.expect("write");
    let answer = read_answer(&mut stream).await;
    assert_eq!((answer.status, answer.body.as_slice()), (200, b"hi".as_slice()));
    let idle = Instant::now();
    let mut byte = [0; 1];
    assert!(
        timeout(Duration::from_secs(619), stream.read(&mut byte)).await.is_err(),
        "still open after 619 s idle"
    );
    let n = timeout(Duration::from_secs(5), stream.read(&mut byte))
        .await
        .expect("closed by 624 s idle")
        .expect("read");
    assert_eq!(n, 0, "closed silently");
    assert!(idle.elapsed() >= Duration::from_secs(620), "closed after {:?}", idle.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_body_that_stops_arriving_fails_its_read_after_the_body_timeout() {
    let (addr, mut reports) = server().await;
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(b"POST /sink HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n0123456789")
        .await
        .expect("write");
    let started = Instant::now();
    let kind = timeout(Duration::from_secs(60), reports.recv())
        .await
        .expect("the body's read fails")
        .expect("a report");
    assert_eq!(kind, Some(std::io::ErrorKind::TimedOut));
    let waited = started.elapsed();
    assert!((Duration::from_secs(30)..Duration::from_secs(31)).contains(&waited), "failed after {waited:?}");
    drop(stream);
}
