//! The framing of one HTTP/1.1 connection as the guard sees it: bytes in,
//! events out, no I/O and no clock.
//!
//! [`Framing::read`] takes what the client sent, in whatever pieces it
//! arrives, and says what hyper may have: a whole request head once it is
//! complete and good ([`Read::Head`]), body bytes as they come
//! ([`Read::Pass`]), or nothing and why ([`Read::Refused`],
//! [`Read::Broken`]). A head is judged once, with httparse (the parser hyper
//! uses) under the guard's limits, and its framing decides the body:
//! `Content-Length` bytes, chunks to the last one and its trailers, or none.
//!
//! [`Framing::wrote`] follows the answers hyper writes, so the guard knows
//! when every request it passed has been answered in full
//! ([`Framing::answering`]): only then may it time a connection out or
//! write a refusal of its own, which would otherwise cut an answer short or
//! land in the middle of one. An answer's body is framed by the request it
//! answers (none for `HEAD`), its status (none for 1xx, 204 and 304) and its
//! headers; a `101` ends the framing of both directions ([`Wrote::Untracked`]).

use std::collections::VecDeque;
use std::time::Duration;

use axum::http::Uri;

use crate::config::GuardConfig;

/// How much of an oversized head is read, and dropped, to learn its size
/// and to let the client finish sending it before the answer: a client
/// still sending when its connection is closed reads a reset, not the answer.
pub(crate) const OVERSIZED_HEAD_READ: usize = 1 << 20;
/// hyper's limit on the bytes of a chunked body's extensions, mirrored.
const CHUNK_EXTENSION_BYTES: u64 = 16 * 1024;
/// hyper's limit on the bytes of a chunked body's trailers, mirrored.
const TRAILER_BYTES: usize = 16 * 1024;
/// hyper's limit on the number of a chunked body's trailers, mirrored.
const TRAILER_FIELDS: usize = 100;
/// The longest header name hyper takes (`http`'s limit; hyper refuses a
/// longer one by itself): reachable only with `MAPI_MAX_HEADER_BYTES` over 64 KiB.
const MAX_FIELD_NAME_BYTES: usize = (1 << 16) - 1;
/// hyper's largest body length (`u64::MAX` and the one below mean "unknown" to it).
const MAX_CONTENT_LENGTH: u64 = u64::MAX - 2;

/// What the guard does with bytes the client sent.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Read {
    /// The first `n` bytes go to hyper as they are: a body, or a tunnel.
    Pass(usize),
    /// The first `used` bytes ended a good request head; `head`, the whole
    /// of it, goes to hyper.
    Head { used: usize, head: Vec<u8> },
    /// Every byte was taken into a head not yet complete, or dropped (empty
    /// lines before a head, the bytes of an oversized head).
    Held,
    /// The head is refused: the guard answers it and the connection ends.
    Refused(Refusal),
    /// The body's framing is broken: its read fails and the connection ends.
    Broken(BodyError),
}

/// What the read side waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waiting {
    /// The first byte of the next head.
    NextHead,
    /// The rest of a head.
    Head,
    /// The rest of a body.
    Body,
    /// Nothing the guard times: the connection is a tunnel, or done.
    Nothing,
}

/// What an answer's bytes changed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Wrote {
    /// An answer is still being written, or a request waits for its answer.
    Answering,
    /// Every request passed to hyper is answered in full.
    Answered,
    /// The framing ended: from now on bytes pass both ways untracked, and
    /// `held`, the start of a head the guard was holding, goes to hyper.
    Untracked { held: Vec<u8>, why: Untracked },
}

/// Why the framing ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Untracked {
    /// hyper answered `101 Switching Protocols`.
    Upgraded,
    /// An answer's head did not parse (hyper writes none such; if it ever
    /// did, guessing its framing could cut a later answer short).
    Unparsed,
}

/// Why a request head is refused, with what its answer needs to say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The head is over `MAPI_MAX_HEADER_BYTES`.
    HeadTooLarge { size: Size, limit: usize },
    /// The request line alone is over `MAPI_MAX_HEADER_BYTES`, so its URI is
    /// over `MAPI_MAX_URI_BYTES` (`limit`).
    RequestLineTooLong { size: Size, limit: usize },
    /// The URI is over `MAPI_MAX_URI_BYTES`.
    UriTooLong { size: usize, limit: usize },
    /// There are more header fields than `MAPI_MAX_HEADERS`.
    TooManyHeaders { count: usize, limit: usize },
    /// Header field `index` (from 1) has a name over `limit` bytes.
    FieldNameTooLong { index: usize, size: usize, limit: usize },
    /// The head did not end within `MAPI_HEADER_READ_TIMEOUT_S` of its first byte.
    TooSlow { limit: Duration },
    /// The head is not a request hyper would serve.
    Malformed(Malformed),
}

/// A byte count, known or at least.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Size {
    Exactly(usize),
    Over(usize),
}

/// How a head is malformed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Malformed {
    /// The request line is not `METHOD target HTTP/1.x`.
    RequestLine,
    /// The request-target is not a URI.
    Uri,
    /// Header field `index` (from 1) is not `name: value` with a token name.
    Field { index: usize },
    /// The value of header field `index`, `name`, holds `byte`.
    FieldValue { index: usize, name: String, byte: u8 },
    /// The header fields are malformed somewhere the guard cannot point at.
    Fields,
    /// A `Content-Length` is not a number of bytes.
    ContentLength,
    /// `Content-Length` fields disagree.
    ConflictingContentLengths,
    /// Both `Content-Length` and `Transfer-Encoding`: a front end and hyper
    /// could frame the body differently (request smuggling).
    ContentLengthAndTransferEncoding,
    /// `Transfer-Encoding` does not end with `chunked`.
    NotChunked,
    /// `Transfer-Encoding` in an HTTP/1.0 request.
    TransferEncodingInHttp10,
    /// `CONNECT`: hyper turns one answered 2xx into a tunnel; this is no proxy.
    Connect,
}

/// How a chunked body is broken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BodyError {
    #[error("a chunk size line is not a hexadecimal size ended by CRLF")]
    ChunkSize,
    #[error("a chunk's data is not followed by CRLF")]
    ChunkEnd,
    #[error("a chunk's extensions are over 16 KiB")]
    Extensions,
    #[error("the trailers are over 16 KiB or 100 fields")]
    Trailers,
}

/// One connection's framing, both ways.
#[derive(Debug)]
pub(crate) struct Framing {
    config: GuardConfig,
    reading: Reading,
    writing: Writing,
    /// The requests passed to hyper whose answers are not written in full,
    /// oldest first.
    unanswered: VecDeque<Method>,
}

/// What matters of a request's method to the framing of its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    /// Its answer has no body, whatever its headers say.
    Head,
    Other,
}

#[derive(Debug)]
enum Reading {
    Head(HeadBuf),
    /// A head over the byte limit, counted (not kept) to its end.
    Oversized(Oversized),
    Body(Body),
    Tunnel,
    /// Refused or broken: nothing more is framed.
    Done,
}

#[derive(Debug, Default)]
struct HeadBuf {
    bytes: Vec<u8>,
    scan: HeadScan,
    /// A CR before the head, waiting for the LF of an empty line.
    cr: bool,
}

#[derive(Debug)]
struct Oversized {
    scan: HeadScan,
    /// Whether the request line ended within the limit.
    request_line_ended: bool,
}

#[derive(Debug)]
enum Writing {
    Head {
        bytes: Vec<u8>,
        scan: HeadScan,
    },
    Body(Body),
    /// A body without a length, ended by closing the connection.
    UntilClose,
    Tunnel,
}

impl Writing {
    fn head() -> Writing {
        Writing::Head { bytes: Vec::new(), scan: HeadScan::default() }
    }
}

impl Framing {
    pub(crate) fn new(config: GuardConfig) -> Framing {
        Framing {
            config,
            reading: Reading::Head(HeadBuf::default()),
            writing: Writing::head(),
            unanswered: VecDeque::new(),
        }
    }

    /// Frames `input`, bytes the client sent after everything before.
    /// Call again with what is left after the bytes an event used.
    pub(crate) fn read(&mut self, input: &[u8]) -> Read {
        let Framing { config, reading, unanswered, .. } = self;
        match reading {
            Reading::Head(buf) => {
                let (dropped, input) = buf.skip_empty_lines(input);
                if input.is_empty() {
                    return Read::Held;
                }
                // A head is kept up to the limit; one that does not end within
                // it is oversized, and only counted from then on.
                let room = config.max_header_bytes.saturating_sub(buf.bytes.len());
                let window = &input[..input.len().min(room)];
                if let Some(end) = buf.scan.scan(window) {
                    buf.bytes.extend_from_slice(&window[..end]);
                    let scan = buf.scan;
                    let head = std::mem::take(&mut buf.bytes);
                    *buf = HeadBuf::default();
                    return match judge(&head, &scan, config) {
                        Ok(request) => {
                            unanswered.push_back(request.method);
                            if let Some(body) = request.body {
                                *reading = Reading::Body(body);
                            }
                            Read::Head { used: dropped + end, head }
                        }
                        Err(refusal) => {
                            *reading = Reading::Done;
                            Read::Refused(refusal)
                        }
                    };
                }
                if window.len() == input.len() {
                    buf.bytes.extend_from_slice(window);
                    return Read::Held;
                }
                let request_line_ended = buf.scan.first_line.is_some();
                *reading = Reading::Oversized(Oversized { scan: buf.scan, request_line_ended });
                self.read(&input[window.len()..])
            }
            Reading::Oversized(head) => {
                let room = OVERSIZED_HEAD_READ.saturating_sub(head.scan.len);
                let window = &input[..input.len().min(room)];
                let refusal = match head.scan.scan(window) {
                    Some(_) => head.refusal(config, Size::Exactly(head.scan.len)),
                    None if head.scan.len >= OVERSIZED_HEAD_READ => {
                        head.refusal(config, Size::Over(head.scan.len))
                    }
                    None => return Read::Held,
                };
                *reading = Reading::Done;
                Read::Refused(refusal)
            }
            Reading::Body(body) => match body.advance(input) {
                Ok(Advanced { used, ended }) => {
                    if ended {
                        *reading = Reading::Head(HeadBuf::default());
                    }
                    Read::Pass(used)
                }
                Err(e) => {
                    *reading = Reading::Done;
                    Read::Broken(e)
                }
            },
            Reading::Tunnel => Read::Pass(input.len()),
            Reading::Done => Read::Held,
        }
    }

    /// What the read side waits for.
    pub(crate) fn waiting(&self) -> Waiting {
        match &self.reading {
            Reading::Head(buf) if buf.bytes.is_empty() => Waiting::NextHead,
            Reading::Head(_) | Reading::Oversized(_) => Waiting::Head,
            Reading::Body(_) => Waiting::Body,
            Reading::Tunnel | Reading::Done => Waiting::Nothing,
        }
    }

    /// The refusal of a head that did not end in time: the oversized head
    /// being counted keeps its own, with the size seen so far.
    pub(crate) fn timeout_refusal(&self) -> Refusal {
        match &self.reading {
            Reading::Oversized(head) => head.refusal(&self.config, Size::Over(head.scan.len)),
            _ => Refusal::TooSlow { limit: self.config.header_read_timeout },
        }
    }

    /// Whether a request passed to hyper is not yet answered in full.
    pub(crate) fn answering(&self) -> bool {
        !self.unanswered.is_empty()
            || !matches!(&self.writing, Writing::Head { bytes, .. } if bytes.is_empty())
    }

    /// Whether the framing ended: bytes pass both ways untracked.
    pub(crate) fn untracked(&self) -> bool {
        matches!(self.writing, Writing::Tunnel)
    }

    /// Follows `output`, bytes hyper wrote after everything before.
    pub(crate) fn wrote(&mut self, mut output: &[u8]) -> Wrote {
        while !output.is_empty() {
            match &mut self.writing {
                Writing::Head { bytes, scan } => match scan.scan(output) {
                    None => {
                        bytes.extend_from_slice(output);
                        output = &[];
                    }
                    Some(end) => {
                        bytes.extend_from_slice(&output[..end]);
                        output = &output[end..];
                        let head = std::mem::take(bytes);
                        let lines = scan.lines;
                        self.writing = Writing::head();
                        if let Err(why) = self.answer_head(&head, lines) {
                            return self.untrack(why);
                        }
                    }
                },
                Writing::Body(body) => match body.advance(output) {
                    Ok(Advanced { used, ended }) => {
                        output = &output[used..];
                        if ended {
                            self.writing = Writing::head();
                        }
                    }
                    Err(_) => return self.untrack(Untracked::Unparsed),
                },
                Writing::UntilClose | Writing::Tunnel => output = &[],
            }
        }
        if self.answering() { Wrote::Answering } else { Wrote::Answered }
    }

    /// Sets the framing of the answer whose head is `head`.
    fn answer_head(&mut self, head: &[u8], lines: usize) -> Result<(), Untracked> {
        let mut fields = vec![httparse::EMPTY_HEADER; lines];
        let mut response = httparse::Response::new(&mut fields);
        let (Ok(httparse::Status::Complete(_)), Some(status)) = (response.parse(head), response.code) else {
            return Err(Untracked::Unparsed);
        };
        match status {
            101 => return Err(Untracked::Upgraded),
            100..=199 => return Ok(()),
            _ => {}
        }
        let asked = self.unanswered.pop_front();
        if asked == Some(Method::Head) || status == 204 || status == 304 {
            return Ok(());
        }
        let mut length = None;
        let mut chunked = None;
        for field in response.headers.iter() {
            if field.name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = Some(ends_in_chunked(field.value));
            } else if field.name.eq_ignore_ascii_case("content-length") {
                length = Some(content_length(field.value).ok_or(Untracked::Unparsed)?);
            }
        }
        self.writing = match (chunked, length) {
            (Some(true), _) => Writing::Body(Body::Chunked(Chunked::default())),
            (Some(false), _) | (None, None) => Writing::UntilClose,
            (None, Some(0)) => Writing::head(),
            (None, Some(n)) => Writing::Body(Body::Length(n)),
        };
        Ok(())
    }

    fn untrack(&mut self, why: Untracked) -> Wrote {
        self.writing = Writing::Tunnel;
        let held = match std::mem::replace(&mut self.reading, Reading::Tunnel) {
            Reading::Head(buf) => buf.bytes,
            _ => Vec::new(),
        };
        Wrote::Untracked { held, why }
    }
}

impl HeadBuf {
    /// Drops the empty lines before a request line, as hyper skips them;
    /// returns how many bytes it dropped and what is left.
    fn skip_empty_lines<'a>(&mut self, mut input: &'a [u8]) -> (usize, &'a [u8]) {
        if !self.bytes.is_empty() {
            return (0, input);
        }
        let mut dropped = 0;
        while let Some((&b, rest)) = input.split_first() {
            match (b, self.cr) {
                (b'\n', _) => self.cr = false,
                (b'\r', false) => self.cr = true,
                _ => break,
            }
            input = rest;
            dropped += 1;
        }
        if self.cr && !input.is_empty() {
            // A CR not followed by LF starts the head: hyper finds it malformed.
            self.cr = false;
            self.bytes.push(b'\r');
            self.scan.scan(b"\r");
        }
        (dropped, input)
    }
}

impl Oversized {
    fn refusal(&self, config: &GuardConfig, size: Size) -> Refusal {
        if self.request_line_ended {
            return Refusal::HeadTooLarge { size, limit: config.max_header_bytes };
        }
        let size = self.scan.first_line.map_or(size, Size::Exactly);
        Refusal::RequestLineTooLong { size, limit: config.max_uri_bytes }
    }
}

/// Finds the empty line that ends a head, a byte at a time, so a head that
/// arrives in pieces is scanned once. Lines end in CRLF or LF, as httparse
/// reads them.
#[derive(Clone, Copy, Debug, Default)]
struct HeadScan {
    /// Bytes scanned.
    len: usize,
    /// Lines ended: the start line and each header field.
    lines: usize,
    /// The first line's length, its line end included, once it ended.
    first_line: Option<usize>,
    line: Line,
}

/// What the line being scanned holds so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Line {
    #[default]
    Text,
    Empty,
    EmptyCr,
}

impl HeadScan {
    /// Scans `input`: the bytes up to and including the head's end, if it
    /// ends within them.
    fn scan(&mut self, input: &[u8]) -> Option<usize> {
        for (i, &b) in input.iter().enumerate() {
            self.len += 1;
            self.line = match (b, self.line) {
                (b'\n', Line::Empty | Line::EmptyCr) => return Some(i + 1),
                (b'\n', Line::Text) => {
                    self.lines += 1;
                    self.first_line.get_or_insert(self.len);
                    Line::Empty
                }
                (b'\r', Line::Empty) => Line::EmptyCr,
                _ => Line::Text,
            };
        }
        None
    }
}

/// A good request head's consequences.
struct Request {
    method: Method,
    body: Option<Body>,
}

/// Judges a whole head: what hyper would refuse, or our limits do, is refused.
fn judge(head: &[u8], scan: &HeadScan, config: &GuardConfig) -> Result<Request, Refusal> {
    let mut fields = vec![httparse::EMPTY_HEADER; config.max_headers];
    let mut request = httparse::Request::new(&mut fields);
    let parsed = request.parse(head);
    if let Some(path) = request.path
        && path.len() > config.max_uri_bytes
    {
        return Err(Refusal::UriTooLong { size: path.len(), limit: config.max_uri_bytes });
    }
    let malformed = |m| Err(Refusal::Malformed(m));
    match parsed {
        Ok(httparse::Status::Complete(_)) => {}
        Err(httparse::Error::TooManyHeaders) => {
            let count = scan.lines.saturating_sub(1);
            return Err(Refusal::TooManyHeaders { count, limit: config.max_headers });
        }
        Err(httparse::Error::HeaderName | httparse::Error::HeaderValue) => return malformed(bad_field(head)),
        Err(httparse::Error::NewLine) if request.version.is_some() => return malformed(bad_field(head)),
        Err(httparse::Error::Token) if request.method.is_some() => return malformed(target_error(head)),
        // The scan found an end httparse does not (a lone CR before it), or
        // the request line is not one.
        _ => return malformed(Malformed::RequestLine),
    }
    let (Some(method), Some(path), Some(version)) = (request.method, request.path, request.version) else {
        return malformed(Malformed::RequestLine);
    };
    if method == "CONNECT" {
        return malformed(Malformed::Connect);
    }
    if Uri::try_from(path).is_err() {
        return malformed(Malformed::Uri);
    }
    let mut length: Option<u64> = None;
    let mut chunked: Option<bool> = None;
    for (i, field) in request.headers.iter().enumerate() {
        if field.name.len() > MAX_FIELD_NAME_BYTES {
            let (index, size) = (i + 1, field.name.len());
            return Err(Refusal::FieldNameTooLong { index, size, limit: MAX_FIELD_NAME_BYTES });
        }
        if field.name.eq_ignore_ascii_case("content-length") {
            let Some(n) = content_length(field.value) else {
                return malformed(Malformed::ContentLength);
            };
            if length.is_some_and(|l| l != n) {
                return malformed(Malformed::ConflictingContentLengths);
            }
            length = Some(n);
        } else if field.name.eq_ignore_ascii_case("transfer-encoding") {
            if version == 0 {
                return malformed(Malformed::TransferEncodingInHttp10);
            }
            // As hyper: the last field decides.
            chunked = Some(ends_in_chunked(field.value));
        }
    }
    let body = match (length, chunked) {
        (Some(_), Some(_)) => return malformed(Malformed::ContentLengthAndTransferEncoding),
        (None, Some(false)) => return malformed(Malformed::NotChunked),
        (None, Some(true)) => Some(Body::Chunked(Chunked::default())),
        (None | Some(0), None) => None,
        (Some(n), None) => Some(Body::Length(n)),
    };
    let method = if method == "HEAD" { Method::Head } else { Method::Other };
    Ok(Request { method, body })
}

/// What is wrong with a request line whose method httparse read and whose
/// target it did not: the target's bytes, if the line has the shape
/// `METHOD target HTTP/x`, or else the line.
fn target_error(head: &[u8]) -> Malformed {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let parts: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    match parts.as_slice() {
        [_, _, version] if version.starts_with(b"HTTP/") => Malformed::Uri,
        _ => Malformed::RequestLine,
    }
}

/// The first header field httparse refuses, found again to be named.
fn bad_field(head: &[u8]) -> Malformed {
    for (i, line) in head.split(|&b| b == b'\n').skip(1).enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            break;
        }
        let index = i + 1;
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Malformed::Field { index };
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if name.is_empty() || !name.iter().all(|&b| is_token(b)) {
            return Malformed::Field { index };
        }
        if let Some(&byte) = value.iter().find(|&&b| !is_value_byte(b)) {
            let name = String::from_utf8_lossy(&name[..name.len().min(64)]).into_owned();
            return Malformed::FieldValue { index, name, byte };
        }
    }
    Malformed::Fields
}

/// A header name's bytes (RFC 9110 tchar), as httparse accepts them.
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A header value's bytes, as httparse accepts them.
fn is_value_byte(b: u8) -> bool {
    b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80
}

/// A `Content-Length` value as hyper reads it: digits only, no sign, no list.
fn content_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    value
        .iter()
        .try_fold(0u64, |n, &b| {
            let digit = b.is_ascii_digit().then(|| u64::from(b - b'0'))?;
            n.checked_mul(10)?.checked_add(digit)
        })
        .filter(|&n| n <= MAX_CONTENT_LENGTH)
}

/// Whether a `Transfer-Encoding` value ends with `chunked`, as hyper reads it.
fn ends_in_chunked(value: &[u8]) -> bool {
    let visible = value.iter().all(|&b| b == b'\t' || (b' '..=b'~').contains(&b));
    visible
        && std::str::from_utf8(value)
            .ok()
            .and_then(|v| v.rsplit(',').next())
            .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"))
}

/// The body of a message, as far as it is still to come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Body {
    /// This many bytes.
    Length(u64),
    Chunked(Chunked),
}

/// How far [`Body::advance`] got.
struct Advanced {
    /// The bytes of the input that belong to the body.
    used: usize,
    /// Whether the body ended with them.
    ended: bool,
}

impl Body {
    fn advance(&mut self, input: &[u8]) -> Result<Advanced, BodyError> {
        match self {
            Body::Length(left) => {
                let used = input.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                *left -= used as u64;
                Ok(Advanced { used, ended: *left == 0 })
            }
            Body::Chunked(chunked) => chunked.advance(input),
        }
    }
}

/// A chunked body's framing, with hyper's grammar and limits, so both end
/// a body at the same byte and refuse the same bodies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Chunked {
    at: Chunk,
    /// The chunk size being read, then the data left of the chunk.
    size: u64,
    extension_bytes: u64,
    trailer_bytes: usize,
    trailers: usize,
}

/// Where a chunked body is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Chunk {
    /// Before a chunk size's first digit.
    #[default]
    Start,
    Size,
    /// Spaces after the size.
    SizeSpace,
    Extension,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    /// After the last chunk's line, or a trailer's: CR of the end, or a trailer.
    EndCr,
    Trailer,
    TrailerLf,
    EndLf,
    End,
}

impl Chunked {
    fn advance(&mut self, input: &[u8]) -> Result<Advanced, BodyError> {
        let mut used = 0;
        while used < input.len() {
            if self.at == Chunk::Data {
                let n = (input.len() - used).min(usize::try_from(self.size).unwrap_or(usize::MAX));
                self.size -= n as u64;
                used += n;
                if self.size == 0 {
                    self.at = Chunk::DataCr;
                }
                continue;
            }
            self.at = self.step(input[used])?;
            used += 1;
            if self.at == Chunk::End {
                return Ok(Advanced { used, ended: true });
            }
        }
        Ok(Advanced { used, ended: false })
    }

    /// The state after `b`, which is not chunk data.
    fn step(&mut self, b: u8) -> Result<Chunk, BodyError> {
        use Chunk::*;
        let hex = (b as char).to_digit(16).map(u64::from);
        Ok(match (self.at, b, hex) {
            (Start, _, Some(digit)) => {
                self.size = digit;
                Size
            }
            (Start, _, None) => return Err(BodyError::ChunkSize),
            (Size, _, Some(digit)) => {
                self.size = self
                    .size
                    .checked_mul(16)
                    .and_then(|s| s.checked_add(digit))
                    .ok_or(BodyError::ChunkSize)?;
                Size
            }
            (Size | SizeSpace, b' ' | b'\t', _) => SizeSpace,
            (Size | SizeSpace, b';', _) => Extension,
            (Size | SizeSpace | Extension, b'\r', _) => SizeLf,
            (Size | SizeSpace, ..) | (Extension, b'\n', _) => return Err(BodyError::ChunkSize),
            (Extension, ..) => {
                self.extension_bytes += 1;
                if self.extension_bytes >= CHUNK_EXTENSION_BYTES {
                    return Err(BodyError::Extensions);
                }
                Extension
            }
            (SizeLf, b'\n', _) if self.size == 0 => EndCr,
            (SizeLf, b'\n', _) => Data,
            (SizeLf, ..) => return Err(BodyError::ChunkSize),
            (DataCr, b'\r', _) => DataLf,
            (DataLf, b'\n', _) => Start,
            (DataCr | DataLf, ..) => return Err(BodyError::ChunkEnd),
            (EndCr, b'\r', _) => EndLf,
            (EndCr | Trailer, ..) => {
                self.trailer_byte()?;
                if b == b'\r' { TrailerLf } else { Trailer }
            }
            (TrailerLf, b'\n', _) => {
                self.trailers += 1;
                self.trailer_byte()?;
                if self.trailers > TRAILER_FIELDS {
                    return Err(BodyError::Trailers);
                }
                EndCr
            }
            (TrailerLf, ..) => return Err(BodyError::Trailers),
            (EndLf, b'\n', _) => End,
            (EndLf, ..) => return Err(BodyError::ChunkEnd),
            // Data is skipped in bulk by `advance`, which stops at End.
            (Data, ..) => {
                self.size -= 1;
                if self.size == 0 { DataCr } else { Data }
            }
            (End, ..) => End,
        })
    }

    fn trailer_byte(&mut self) -> Result<(), BodyError> {
        self.trailer_bytes += 1;
        if self.trailer_bytes >= TRAILER_BYTES { Err(BodyError::Trailers) } else { Ok(()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> GuardConfig {
        GuardConfig { max_uri_bytes: 16, max_header_bytes: 96, max_headers: 3, ..GuardConfig::default() }
    }

    /// What a run of pieces came to: the bytes hyper got, the heads among
    /// them, and how it ended.
    #[derive(Debug, Default, PartialEq, Eq)]
    struct Run {
        passed: Vec<u8>,
        heads: usize,
        end: Option<Result<Refusal, BodyError>>,
    }

    /// Feeds `pieces` as the guard's stream does: each piece until it is used.
    fn run(framing: &mut Framing, pieces: &[&[u8]]) -> Run {
        let mut out = Run::default();
        for piece in pieces {
            let mut input = *piece;
            while !input.is_empty() {
                match framing.read(input) {
                    Read::Pass(n) => {
                        assert!(n > 0, "a pass uses a byte");
                        out.passed.extend_from_slice(&input[..n]);
                        input = &input[n..];
                    }
                    Read::Head { used, head } => {
                        out.passed.extend_from_slice(&head);
                        out.heads += 1;
                        input = &input[used..];
                    }
                    Read::Held => break,
                    Read::Refused(r) => {
                        out.end = Some(Ok(r));
                        return out;
                    }
                    Read::Broken(e) => {
                        out.end = Some(Err(e));
                        return out;
                    }
                }
            }
        }
        out
    }

    fn fresh(input: &[&[u8]]) -> Run {
        run(&mut Framing::new(config()), input)
    }

    const PIPELINE: &[u8] = b"GET /a HTTP/1.1\r\nHost: t\r\n\r\n\
        POST /b HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello\
        POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n6 \r\n world\r\n0\r\nT: 1\r\n\r\n\
        GET /d HTTP/1.0\n\n";

    #[test]
    fn pipelined_requests_pass_whole_at_every_split() {
        let whole = fresh(&[PIPELINE]);
        assert_eq!(whole, Run { passed: PIPELINE.to_vec(), heads: 4, end: None });
        for i in 0..=PIPELINE.len() {
            let (a, b) = PIPELINE.split_at(i);
            assert_eq!(fresh(&[a, b]), whole, "split at {i}");
        }
        let bytes: Vec<&[u8]> = PIPELINE.chunks(1).collect();
        assert_eq!(fresh(&bytes), whole, "a byte at a time");
    }

    #[test]
    fn a_head_goes_to_hyper_only_whole() {
        let mut framing = Framing::new(config());
        let head = b"GET /a HTTP/1.1\r\nHost: t\r\n\r\n";
        for i in 0..head.len() - 1 {
            assert_eq!(framing.read(&head[i..=i]), Read::Held, "byte {i}");
            assert_eq!(framing.waiting(), Waiting::Head);
        }
        assert_eq!(framing.read(&head[head.len() - 1..]), Read::Head { used: 1, head: head.to_vec() });
        assert_eq!(framing.waiting(), Waiting::NextHead);
        assert!(framing.answering());
    }

    #[test]
    fn empty_lines_before_a_head_are_dropped() {
        let got = fresh(&[b"\r\n\n\r", b"\nGET / HTTP/1.1\r\n\r\n"]);
        assert_eq!(got, Run { passed: b"GET / HTTP/1.1\r\n\r\n".to_vec(), heads: 1, end: None });
        let mut framing = Framing::new(config());
        assert_eq!(framing.read(b"\r\n\r\n"), Read::Held);
        assert_eq!(framing.waiting(), Waiting::NextHead, "empty lines start no head");
    }

    /// Every refusal of a head, whatever its split: (head, refusal).
    fn refusals() -> Vec<(Vec<u8>, Refusal)> {
        use Malformed as M;
        let bad = |m| Refusal::Malformed(m);
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(100)).into_bytes();
        let long_line = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(200)).into_bytes();
        vec![
            (big.clone(), Refusal::HeadTooLarge { size: Size::Exactly(big.len()), limit: 96 }),
            (
                long_line.clone(),
                Refusal::RequestLineTooLong { size: Size::Exactly(long_line.len() - 2), limit: 16 },
            ),
            (
                format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(16)).into_bytes(),
                Refusal::UriTooLong { size: 17, limit: 16 },
            ),
            (
                b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n".to_vec(),
                Refusal::TooManyHeaders { count: 4, limit: 3 },
            ),
            (b"hello world\r\n\r\n".to_vec(), bad(M::RequestLine)),
            (b"GET / HTTP/2.0\r\n\r\n".to_vec(), bad(M::RequestLine)),
            (b"\rGET / HTTP/1.1\r\n\r\n".to_vec(), bad(M::RequestLine)),
            (b"GET /a\x01 HTTP/1.1\r\n\r\n".to_vec(), bad(M::Uri)),
            (b"GET http:// HTTP/1.1\r\n\r\n".to_vec(), bad(M::Uri)),
            (
                b"GET / HTTP/1.1\r\nA: 1\r\nX-Test: a\0b\r\n\r\n".to_vec(),
                bad(M::FieldValue { index: 2, name: "X-Test".into(), byte: 0 }),
            ),
            (b"GET / HTTP/1.1\r\nBad Name: 1\r\n\r\n".to_vec(), bad(M::Field { index: 1 })),
            (b"GET / HTTP/1.1\r\nno colon\r\n\r\n".to_vec(), bad(M::Field { index: 1 })),
            (b"POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n".to_vec(), bad(M::ContentLength)),
            (b"POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n".to_vec(), bad(M::ContentLength)),
            (
                b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n".to_vec(),
                bad(M::ContentLength),
            ),
            (
                b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n".to_vec(),
                bad(M::ConflictingContentLengths),
            ),
            (
                b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
                bad(M::ContentLengthAndTransferEncoding),
            ),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n".to_vec(), bad(M::NotChunked)),
            (
                b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
                bad(M::TransferEncodingInHttp10),
            ),
            (b"CONNECT a.example:443 HTTP/1.1\r\n\r\n".to_vec(), bad(M::Connect)),
        ]
    }

    #[test]
    fn refusals_are_the_same_at_every_split() {
        for (head, refusal) in refusals() {
            let name = String::from_utf8_lossy(&head[..head.len().min(40)]).into_owned();
            assert_eq!(fresh(&[&head]).end, Some(Ok(refusal.clone())), "{name}");
            for i in 0..=head.len() {
                let (a, b) = head.split_at(i);
                assert_eq!(fresh(&[a, b]).end, Some(Ok(refusal.clone())), "{name} split at {i}");
            }
        }
    }

    #[test]
    fn a_header_name_hyper_cannot_take_is_refused() {
        let config = GuardConfig { max_header_bytes: 80 * 1024, ..config() };
        let name = "n".repeat(MAX_FIELD_NAME_BYTES);
        let head = |name: &str| format!("GET / HTTP/1.1\r\nA: 1\r\n{name}: 1\r\n\r\n").into_bytes();
        let mut framing = Framing::new(config);
        assert!(matches!(framing.read(&head(&name)), Read::Head { .. }), "the longest name passes");
        let refusal =
            Refusal::FieldNameTooLong { index: 2, size: name.len() + 1, limit: MAX_FIELD_NAME_BYTES };
        assert_eq!(run(&mut Framing::new(config), &[&head(&format!("{name}n"))]).end, Some(Ok(refusal)));
    }

    #[test]
    fn a_good_head_after_a_good_one_is_judged_alone() {
        // The second request is refused; the first passed whole.
        let got = fresh(&[b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nContent-Length: x\r\n\r\n"]);
        assert_eq!(got.passed, b"GET / HTTP/1.1\r\n\r\n");
        assert_eq!(got.end, Some(Ok(Refusal::Malformed(Malformed::ContentLength))));
    }

    #[test]
    fn an_oversized_head_is_counted_to_its_end_or_the_read_limit() {
        let mut framing = Framing::new(config());
        assert_eq!(framing.read(b"GET / HTTP/1.1\r\nX: "), Read::Held);
        let filler = vec![b'a'; OVERSIZED_HEAD_READ];
        assert_eq!(
            framing.read(&filler),
            Read::Refused(Refusal::HeadTooLarge { size: Size::Over(OVERSIZED_HEAD_READ), limit: 96 })
        );
        let mut framing = Framing::new(config());
        assert_eq!(framing.read(b"GET / HTTP/1.1\r\nX: "), Read::Held);
        assert_eq!(framing.read(&filler[..200]), Read::Held);
        assert_eq!(framing.waiting(), Waiting::Head);
        assert_eq!(
            framing.timeout_refusal(),
            Refusal::HeadTooLarge { size: Size::Over(219), limit: 96 },
            "a timeout keeps the oversized head's refusal"
        );
        assert_eq!(
            Framing::new(config()).timeout_refusal(),
            Refusal::TooSlow { limit: Duration::from_secs(10) }
        );
    }

    #[test]
    fn broken_chunked_bodies_break_the_read() {
        let cases: [(&[u8], BodyError); 6] = [
            (b"x\r\n", BodyError::ChunkSize),
            (b"5\n", BodyError::ChunkSize),
            (b"5 5\r\n", BodyError::ChunkSize),
            (b"11111111111111111\r\n", BodyError::ChunkSize),
            (b"1\r\nab", BodyError::ChunkEnd),
            (b"0\r\nT: 1\rx", BodyError::Trailers),
        ];
        for (body, error) in cases {
            let head: &[u8] = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
            assert_eq!(fresh(&[head, body]).end, Some(Err(error)), "{}", String::from_utf8_lossy(body));
        }
        let long_extension = format!("1;{}\r\n", "e".repeat(CHUNK_EXTENSION_BYTES as usize));
        let head: &[u8] = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(fresh(&[head, long_extension.as_bytes()]).end, Some(Err(BodyError::Extensions)));
    }

    /// The framing of answers, at every split: each answer's end is where
    /// the request it answers says, and `answering` tells.
    #[test]
    fn answers_are_followed_to_their_end() {
        let requests: &[u8] =
            b"HEAD / HTTP/1.1\r\n\r\nPOST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx\
            GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n";
        let answers: [&[u8]; 5] = [
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            b"HTTP/1.1 204 No Content\r\ncontent-length: 9\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        ];
        let all = answers.concat();
        for i in 0..=all.len() {
            let mut framing = Framing::new(config());
            assert_eq!(run(&mut framing, &[requests]).heads, 5);
            let (a, b) = all.split_at(i);
            let first = framing.wrote(a);
            assert_eq!(first == Wrote::Answered, i == all.len(), "split at {i}");
            assert_eq!(framing.wrote(b), Wrote::Answered, "split at {i}");
            assert!(!framing.answering());
        }
        let mut framing = Framing::new(config());
        run(&mut framing, &[requests]);
        let mut ends = Vec::new();
        for answer in answers {
            ends.push(framing.wrote(answer));
        }
        assert_eq!(ends.last(), Some(&Wrote::Answered));
        assert!(ends[..4].iter().all(|w| *w == Wrote::Answering), "{ends:?}");
    }

    #[test]
    fn a_switch_of_protocols_ends_the_framing() {
        let mut framing = Framing::new(config());
        run(&mut framing, &[b"GET / HTTP/1.1\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\nGET /held"]);
        assert_eq!(
            framing.wrote(b"HTTP/1.1 101 Switching Protocols\r\n\r\n"),
            Wrote::Untracked { held: b"GET /held".to_vec(), why: Untracked::Upgraded }
        );
        assert!(framing.untracked());
        assert_eq!(framing.read(b"\0\x01 anything"), Read::Pass(11));
        assert_eq!(framing.waiting(), Waiting::Nothing);
    }

    #[test]
    fn an_answer_that_does_not_parse_ends_the_framing() {
        let mut framing = Framing::new(config());
        run(&mut framing, &[b"GET / HTTP/1.1\r\n\r\n"]);
        assert_eq!(
            framing.wrote(b"garbage\r\n\r\n"),
            Wrote::Untracked { held: Vec::new(), why: Untracked::Unparsed }
        );
    }
}
