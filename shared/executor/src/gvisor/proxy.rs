//! The proxy that applies [`super::channel`]'s rule, on the Unix socket the
//! executor binds into a sandbox. One request per connection: the request's
//! head is read (at most [`MAX_HEAD`] bytes) and checked by
//! [`Allowed::target`]; a refused one is answered `403` and closed, an
//! allowed one is sent to the platform in origin form with `Host` set to the
//! platform and `Connection: close`, followed by exactly the body its
//! `Content-Length` declares (a chunked body is refused), and the
//! platform's answer is passed back until the platform closes. Nothing the
//! client sends after the declared body reaches the platform, so a second
//! request cannot ride behind an allowed one.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::Duration;

use reqwest::Method;

use super::channel::Allowed;

/// The longest request head the proxy reads.
pub const MAX_HEAD: usize = 16 * 1024;

/// How long a connection may sit without a byte before it is dropped.
const IDLE: Duration = Duration::from_secs(60);

/// Headers the proxy sets itself or that speak to the proxy, not the platform.
const DROPPED: [&str; 6] =
    ["host", "connection", "proxy-connection", "proxy-authorization", "keep-alive", "upgrade"];

/// Serves `listener` until accepting fails, a thread per connection; `upstream` is the
/// platform's address (`allowed.host`:`allowed.port` resolved).
///
/// # Errors
///
/// Accepting's.
pub fn serve(listener: &UnixListener, allowed: &Allowed, upstream: SocketAddr) -> io::Result<()> {
    for conn in listener.incoming() {
        let (conn, allowed) = (conn?, allowed.clone());
        std::thread::spawn(move || {
            if let Err(e) = handle(conn, &allowed, upstream) {
                tracing::debug!(error = %e, "a sandbox's proxied request ended early");
            }
        });
    }
    Ok(())
}

/// One connection: check, forward, pass the answer back.
fn handle(mut client: UnixStream, allowed: &Allowed, upstream: SocketAddr) -> io::Result<()> {
    client.set_read_timeout(Some(IDLE))?;
    let (head, mut after) = read_head(&mut client)?;
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let (Ok(httparse::Status::Complete(_)), Some(method), Some(target)) =
        (req.parse(&head), req.method, req.path)
    else {
        return answer(&mut client, 400, "not an HTTP/1.1 request head");
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return answer(&mut client, 400, "not an HTTP method");
    };
    let path = match allowed.target(&method, target) {
        Ok(path) => path,
        Err(refused) => {
            tracing::warn!(%refused, "a sandbox's request to the platform was refused");
            return answer(&mut client, 403, &refused.0);
        }
    };
    let header = |name: &str| req.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name));
    if header("transfer-encoding").is_some() {
        return answer(&mut client, 403, "refused: a body must declare its Content-Length");
    }
    let length = match header("content-length")
        .map(|h| std::str::from_utf8(h.value).ok()?.trim().parse::<u64>().ok())
    {
        None => 0,
        Some(Some(n)) => n,
        Some(None) => return answer(&mut client, 400, "Content-Length is not a number"),
    };
    let mut up = TcpStream::connect(upstream)?;
    up.set_read_timeout(Some(IDLE))?;
    let mut out = format!("{method} {path} HTTP/1.1\r\n");
    for h in req.headers.iter().filter(|h| !DROPPED.iter().any(|d| h.name.eq_ignore_ascii_case(d))) {
        out.push_str(h.name);
        out.push_str(": ");
        out.push_str(&String::from_utf8_lossy(h.value));
        out.push_str("\r\n");
    }
    out.push_str(&format!("Host: {}:{}\r\nConnection: close\r\n\r\n", allowed.host, allowed.port));
    up.write_all(out.as_bytes())?;
    // Exactly the declared body: what came with the head, then the rest from the client.
    after.truncate(usize::try_from(length).unwrap_or(usize::MAX).min(after.len()));
    up.write_all(&after)?;
    let left = length - after.len() as u64;
    let copied = io::copy(&mut (&mut client).take(left), &mut up)?;
    if copied != left {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the body ended before its Content-Length"));
    }
    // No half-close towards the platform: its HTTP server (hyper) drops a connection whose
    // read side ends before it answered; `Connection: close` ends the exchange instead.
    io::copy(&mut up, &mut client)?;
    client.shutdown(Shutdown::Both)
}

/// The request head (through its blank line) and whatever of the body came with it.
fn read_head(client: &mut UnixStream) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let after = buf.split_off(end + 4);
            return Ok((buf, after));
        }
        if buf.len() > MAX_HEAD {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "request head too long"));
        }
        let n = client.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed before the head ended"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A short plain-text answer, then the connection closes.
fn answer(client: &mut UnixStream, status: u16, why: &str) -> io::Result<()> {
    let reason = if status == 403 { "Forbidden" } else { "Bad Request" };
    let body = format!("{why}\n");
    write!(
        client,
        "HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )?;
    client.shutdown(Shutdown::Both)
}

#[cfg(test)]
mod tests;
