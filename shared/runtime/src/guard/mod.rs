//! The connection guard: every connection is read through it before hyper
//! sees a byte, so every refusal of the HTTP layer is answered with
//! `application/problem+json`, and no client holds a connection by being
//! slow. [`GuardedListener`] wraps the TCP listener [`crate::serve`] is
//! given; its connections are [`GuardedStream`]s ([`stream`]), whose
//! framing ([`framing`]) is a pure state machine.
//!
//! The rules:
//!
//! - A request head reaches hyper whole, and only if it is good. The guard
//!   frames HTTP/1.1 requests itself: it holds a head until its empty line,
//!   judges it once with httparse (the parser hyper uses) under our limits,
//!   passes it, then passes the body as its framing says (`Content-Length`
//!   bytes, or chunks up to the last and its trailers, or none) and waits
//!   for the next head: keep-alive and pipelining are framed exactly.
//! - A refused head is answered by the guard, straight to the socket: a
//!   whole HTTP/1.1 response with `content-type: application/problem+json`,
//!   `content-length` and `connection: close`, whose body is a
//!   [`mapi_api::problem::Problem`]. hyper then reads EOF and closes
//!   quietly. What the client still sends is read and dropped for up to 2 s
//!   (1 MiB), so it reads the answer and not a reset.
//! - A head over `MAPI_MAX_HEADER_BYTES` (64 KiB) can never be served, so
//!   it is not kept: it is counted (to 1 MiB) to name its size, then
//!   answered 431 `HEADERS_TOO_LARGE`, as are more header fields than
//!   `MAPI_MAX_HEADERS` (100) and a header name hyper cannot take (over
//!   65,535 bytes, possible only with a head limit over 64 KiB). A URI over
//!   `MAPI_MAX_URI_BYTES` (8 KiB), or a request line over the head limit,
//!   is answered 414 `URI_TOO_LONG`. A head that does not end within
//!   `MAPI_HEADER_READ_TIMEOUT_S` (10 s) of its first byte is answered 408
//!   `REQUEST_TIMEOUT`.
//! - Whatever hyper would refuse with an empty body, the guard refuses
//!   first, 400 `INVALID_ARGUMENT` with a detail saying what to fix: a
//!   request line that is not one, a URI `http::Uri` does not parse, a bad
//!   header name or value, a `Content-Length` that is not digits,
//!   `Content-Length`s that disagree, a `Transfer-Encoding` not ending in
//!   `chunked` or in HTTP/1.0. It also refuses what hyper would serve but
//!   we will not: `Content-Length` with `Transfer-Encoding` (where a front
//!   end and hyper may frame the body differently) and `CONNECT` (hyper
//!   turns one answered 2xx into a tunnel; this is no proxy). Our limits
//!   are below hyper's own, which `axum::serve` does not let us set (100
//!   header fields, a read buffer of 8 KiB + 400 KiB, a URI of 65,534
//!   bytes): `config.rs` keeps every setting within them.
//! - A body is hyper's once its head is passed: a broken chunked framing,
//!   or no body byte for `MAPI_BODY_READ_TIMEOUT_S` (30 s) while the body
//!   is read, fails the body's read (`InvalidData`, `TimedOut`), and the
//!   handler answers, or not, as it does for any failed read.
//! - A connection waiting for its next request with no byte arriving is
//!   closed, silently, after `MAPI_IDLE_TIMEOUT_S` (620 s).
//! - The guard never cuts into an answer. It follows what hyper writes and
//!   holds a refusal of its own until every request it passed is answered
//!   in full; neither the idle nor the header timeout runs while one is
//!   being answered (hyper reads then only to notice a client closing), so
//!   a long handler or a streamed answer is never timed out here.
//! - Upgrades: an `Upgrade` header is ignored (RFC 9110 §7.8 lets a server),
//!   and hyper upgrades only on a `101` answer, which no route gives. If
//!   one ever does, the guard sees the 101 and passes both ways untracked.
//!
//! Architecture invariant: hyper never refuses a request head by itself;
//! every refusal of the HTTP layer is a `Problem`.

mod framing;
mod stream;
#[cfg(test)]
mod tests;

use std::io;
use std::net::SocketAddr;

use axum::serve::Listener;
use mapi_api::problem::{Problem, ProblemCode};
use tokio::net::{TcpListener, TcpStream};

use self::framing::{Malformed, Refusal, Size};
pub use self::stream::GuardedStream;
use crate::config::{GuardConfig, HEADER_READ_TIMEOUT_S, MAX_HEADER_BYTES, MAX_HEADERS, MAX_URI_BYTES};

/// A TCP listener whose connections are guarded.
#[derive(Debug)]
pub struct GuardedListener {
    listener: TcpListener,
    config: GuardConfig,
}

impl GuardedListener {
    pub(crate) fn new(listener: TcpListener, config: GuardConfig) -> GuardedListener {
        GuardedListener { listener, config }
    }
}

impl Listener for GuardedListener {
    type Io = GuardedStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        // axum's own accept: it retries, and backs off on errors such as EMFILE.
        let (io, peer) = Listener::accept(&mut self.listener).await;
        (GuardedStream::new(io, peer, self.config), peer)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

/// The code of a refusal's answer and the answer's bytes, a whole response.
fn answer(refusal: &Refusal) -> (ProblemCode, Vec<u8>) {
    let code = refusal.code();
    let status = code.status().as_u16();
    let problem = Problem::new(code, refusal.detail());
    // A struct of strings and numbers always serializes.
    let body = serde_json::to_vec(&problem).unwrap_or_default();
    let mut bytes = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        code.title(),
        body.len()
    )
    .into_bytes();
    bytes.extend_from_slice(&body);
    (code, bytes)
}

impl Refusal {
    fn code(&self) -> ProblemCode {
        match self {
            Refusal::HeadTooLarge { .. }
            | Refusal::TooManyHeaders { .. }
            | Refusal::FieldNameTooLong { .. } => ProblemCode::HeadersTooLarge,
            Refusal::RequestLineTooLong { .. } | Refusal::UriTooLong { .. } => ProblemCode::UriTooLong,
            Refusal::TooSlow { .. } => ProblemCode::RequestTimeout,
            Refusal::Malformed(_) => ProblemCode::InvalidArgument,
        }
    }

    /// What to fix, naming the limit and its setting.
    fn detail(&self) -> String {
        match self {
            Refusal::HeadTooLarge { size, limit } => format!(
                "the request's headers are {}: at most {} are accepted ({})",
                size_text(*size),
                thousands(*limit),
                MAX_HEADER_BYTES.name
            ),
            Refusal::RequestLineTooLong { size, limit } => format!(
                "the request line is {}: a URI of at most {} bytes is accepted ({})",
                size_text(*size),
                thousands(*limit),
                MAX_URI_BYTES.name
            ),
            Refusal::UriTooLong { size, limit } => format!(
                "the request's URI is {} bytes: at most {} are accepted ({})",
                thousands(*size),
                thousands(*limit),
                MAX_URI_BYTES.name
            ),
            Refusal::TooManyHeaders { count, limit } => format!(
                "the request has {} header fields: at most {} are accepted ({})",
                thousands(*count),
                thousands(*limit),
                MAX_HEADERS.name
            ),
            Refusal::FieldNameTooLong { index, size, limit } => format!(
                "the name of header field {index} is {} bytes: at most {} are accepted",
                thousands(*size),
                thousands(*limit)
            ),
            Refusal::TooSlow { limit } => format!(
                "the request's headers did not arrive within {} s of their first byte ({}): send a request's head without pausing",
                limit.as_secs(),
                HEADER_READ_TIMEOUT_S.name
            ),
            Refusal::Malformed(m) => m.detail(),
        }
    }
}

impl Malformed {
    fn detail(&self) -> String {
        match self {
            Malformed::RequestLine => {
                "the request line is not `METHOD /path HTTP/1.1`: send a method, a space, \
                the URI, a space and HTTP/1.1 (or HTTP/1.0), ended by CRLF"
                    .to_owned()
            }
            Malformed::Uri => {
                "the request's URI is not a valid URI: send an absolute path such as /v1/tenants, \
                with any byte outside printable ASCII percent-encoded"
                    .to_owned()
            }
            Malformed::Field { index } => format!(
                "header field {index} is not `name: value` with a name of letters, digits and !#$%&'*+-.^_`|~ only"
            ),
            Malformed::FieldValue { index, name, byte } => format!(
                "the value of header field {index} (`{name}`) holds the byte 0x{byte:02x}: a header value is printable \
                 ASCII, spaces and tabs"
            ),
            Malformed::Fields => {
                "the request's header fields are not `name: value` lines ended by CRLF".to_owned()
            }
            Malformed::ContentLength => {
                "Content-Length must be one whole number of bytes, such as 1024".to_owned()
            }
            Malformed::ConflictingContentLengths => {
                "the request has Content-Length fields with different values: send one".to_owned()
            }
            Malformed::ContentLengthAndTransferEncoding => {
                "the request has both Content-Length and Transfer-Encoding: send one of them".to_owned()
            }
            Malformed::NotChunked => {
                "Transfer-Encoding must end with chunked: the request's body has no other framing".to_owned()
            }
            Malformed::TransferEncodingInHttp10 => {
                "Transfer-Encoding needs HTTP/1.1: an HTTP/1.0 request sends Content-Length instead"
                    .to_owned()
            }
            Malformed::Connect => "CONNECT is not served: this is an API, not a proxy".to_owned(),
        }
    }
}

fn size_text(size: Size) -> String {
    match size {
        Size::Exactly(n) => format!("{} bytes", thousands(n)),
        Size::Over(n) => format!("over {} bytes", thousands(n)),
    }
}

/// `70312` as `70,312`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
