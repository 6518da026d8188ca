//! The guard's stream: what hyper reads and writes instead of the socket.
//!
//! Reads go through the [`Framing`]: bytes from the socket are framed,
//! and hyper gets what the framing passes. A refused head is answered here,
//! straight to the socket, and hyper then reads EOF. Writes go to the socket
//! as they are, and the framing follows them to know when every request is
//! answered.
//!
//! The timers run only while hyper waits on a read, and each only in the
//! wait it bounds: the idle timeout while the next head has not begun and
//! every answer is written, the header timeout from a head's first byte
//! (and, if an answer is being written then, once it is), the body timeout
//! from the moment a body read finds nothing to read to its next byte. They
//! are tokio's timers, so tests run them in virtual time.

use std::io;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::answer;
use super::framing::{Framing, Read, Refusal, Untracked, Waiting, Wrote};
use crate::config::{BODY_READ_TIMEOUT_S, GuardConfig};

/// How long a refused connection is read, and what it sends dropped, after
/// its answer: a client still sending when its connection closes reads a
/// reset instead of the answer.
const LINGER: Duration = Duration::from_secs(2);
/// The most bytes dropped so.
const LINGER_BYTES: usize = 1 << 20;
/// The most bytes read from the socket at once.
const READ_CHUNK: usize = 16 * 1024;

/// A connection, guarded.
#[derive(Debug)]
pub struct GuardedStream<S> {
    io: S,
    peer: SocketAddr,
    config: GuardConfig,
    framing: Framing,
    /// Read from the socket, not yet framed.
    unframed: Buffer,
    /// Framed, not yet read by hyper.
    ready: Buffer,
    phase: Phase,
    timer: Pin<Box<Sleep>>,
    /// When the connection began to wait for its next head.
    idle_since: Option<Instant>,
    /// When the head being read began.
    head_since: Option<Instant>,
    /// When a body read last found nothing to read.
    body_wait_since: Option<Instant>,
    /// hyper's task, woken when an answer is written in full: a held
    /// refusal or a timer may then go ahead.
    reader: Option<Waker>,
    shut_down: bool,
}

#[derive(Debug)]
enum Phase {
    Framing,
    /// Answering a refused head: `answer` is written from `written` on,
    /// once every request hyper was given is answered.
    Refusing {
        answer: Vec<u8>,
        written: usize,
    },
    /// The answer is written and the write side shut: what the client still
    /// sends is dropped until it closes, `until` passes or [`LINGER_BYTES`]
    /// are dropped.
    Lingering {
        until: Instant,
        dropped: usize,
    },
    /// hyper reads EOF.
    Closed,
}

/// Which wait ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expiry {
    Idle,
    Head,
    Body,
}

impl<S> GuardedStream<S> {
    pub(crate) fn new(io: S, peer: SocketAddr, config: GuardConfig) -> Self {
        GuardedStream {
            io,
            peer,
            config,
            framing: Framing::new(config),
            unframed: Buffer::default(),
            ready: Buffer::default(),
            phase: Phase::Framing,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            idle_since: None,
            head_since: None,
            body_wait_since: None,
            reader: None,
            shut_down: false,
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> GuardedStream<S> {
    fn read(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            match self.phase {
                Phase::Closed => return Poll::Ready(Ok(())),
                Phase::Refusing { .. } => {
                    ready!(self.poll_refuse(cx));
                    continue;
                }
                Phase::Lingering { .. } => {
                    ready!(self.poll_linger(cx));
                    self.phase = Phase::Closed;
                    continue;
                }
                Phase::Framing => {}
            }
            if !self.ready.is_empty() {
                let n = self.ready.len().min(buf.remaining());
                buf.put_slice(&self.ready.as_slice()[..n]);
                self.ready.consume(n);
                return Poll::Ready(Ok(()));
            }
            if !self.unframed.is_empty() {
                self.frame()?;
                continue;
            }
            if self.framing.untracked() {
                return Pin::new(&mut self.io).poll_read(cx, buf);
            }
            let mut chunk = [MaybeUninit::uninit(); READ_CHUNK];
            let mut chunk = ReadBuf::uninit(&mut chunk);
            match Pin::new(&mut self.io).poll_read(cx, &mut chunk) {
                Poll::Ready(Ok(())) if chunk.filled().is_empty() => self.phase = Phase::Closed,
                Poll::Ready(Ok(())) => {
                    self.unframed.extend(chunk.filled());
                    self.body_wait_since = None;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    self.reader = Some(cx.waker().clone());
                    match self.expired(cx) {
                        None => return Poll::Pending,
                        Some(Expiry::Idle) => {
                            tracing::debug!(peer = %self.peer, "closing an idle connection");
                            self.phase = Phase::Closed;
                        }
                        Some(Expiry::Head) => self.refuse(self.framing.timeout_refusal()),
                        Some(Expiry::Body) => {
                            self.phase = Phase::Closed;
                            let secs = self.config.body_read_timeout.as_secs();
                            return Poll::Ready(Err(io::Error::new(
                                io::ErrorKind::TimedOut,
                                format!(
                                    "no byte of the request body arrived for {secs} s ({})",
                                    BODY_READ_TIMEOUT_S.name
                                ),
                            )));
                        }
                    }
                }
            }
        }
    }

    /// Frames the bytes read and not yet framed.
    fn frame(&mut self) -> io::Result<()> {
        match self.framing.read(self.unframed.as_slice()) {
            // A body read whole: no copy.
            Read::Pass(n) if n == self.unframed.len() && self.ready.is_empty() => {
                std::mem::swap(&mut self.ready, &mut self.unframed);
            }
            Read::Pass(n) => {
                self.ready.extend(&self.unframed.as_slice()[..n]);
                self.unframed.consume(n);
            }
            Read::Head { used, head } => {
                self.ready.extend(&head);
                self.unframed.consume(used);
                (self.idle_since, self.head_since) = (None, None);
            }
            Read::Held => {
                self.unframed.consume(self.unframed.len());
                if self.framing.waiting() == Waiting::Head && self.head_since.is_none() {
                    (self.idle_since, self.head_since) = (None, Some(Instant::now()));
                }
            }
            Read::Refused(refusal) => self.refuse(refusal),
            Read::Broken(e) => {
                self.phase = Phase::Closed;
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("the request body's chunked framing is broken: {e}"),
                ));
            }
        }
        Ok(())
    }

    /// Whether the wait the read side is in ran out; if not, the timer
    /// wakes the task when it does.
    fn expired(&mut self, cx: &mut Context<'_>) -> Option<Expiry> {
        let now = Instant::now();
        let answering = self.framing.answering();
        let (expiry, at) = match self.framing.waiting() {
            Waiting::NextHead if !answering => {
                (Expiry::Idle, *self.idle_since.get_or_insert(now) + self.config.idle_timeout)
            }
            Waiting::Head if !answering => {
                (Expiry::Head, *self.head_since.get_or_insert(now) + self.config.header_read_timeout)
            }
            Waiting::Body => {
                (Expiry::Body, *self.body_wait_since.get_or_insert(now) + self.config.body_read_timeout)
            }
            // hyper reads while it answers only to notice a client closing:
            // a long handler or a streamed answer is not the client's delay.
            Waiting::NextHead | Waiting::Head | Waiting::Nothing => {
                self.idle_since = None;
                return None;
            }
        };
        if expiry != Expiry::Idle {
            self.idle_since = None;
        }
        poll_at(&mut self.timer, at, cx).is_ready().then_some(expiry)
    }

    fn refuse(&mut self, refusal: Refusal) {
        let (code, answer) = answer(&refusal);
        tracing::info!(peer = %self.peer, status = code.status().as_u16(), code = %code, "refused a request head");
        self.unframed = Buffer::default();
        self.phase = Phase::Refusing { answer, written: 0 };
    }

    /// Writes the answer to a refused head, once no other answer is being
    /// written, and shuts the write side; then lingers.
    fn poll_refuse(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.framing.answering() {
            self.reader = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let Phase::Refusing { answer, written } = &mut self.phase else {
            return Poll::Ready(());
        };
        let sent = loop {
            if *written == answer.len() {
                break Ok(());
            }
            match ready!(Pin::new(&mut self.io).poll_write(cx, &answer[*written..])) {
                Ok(0) => break Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => *written += n,
                Err(e) => break Err(e),
            }
        };
        let sent = match sent {
            Ok(()) => ready!(Pin::new(&mut self.io).poll_flush(cx)),
            Err(e) => Err(e),
        };
        let sent = match sent {
            Ok(()) => ready!(Pin::new(&mut self.io).poll_shutdown(cx)),
            Err(e) => Err(e),
        };
        self.shut_down = true;
        self.phase = match sent {
            Ok(()) => Phase::Lingering { until: Instant::now() + LINGER, dropped: 0 },
            Err(e) => {
                // The client is gone: nothing to tell it, nor hyper.
                tracing::debug!(peer = %self.peer, error = %e, "a refusal could not be written");
                Phase::Closed
            }
        };
        Poll::Ready(())
    }

    /// Drops what the client still sends after its answer, for a while.
    fn poll_linger(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Phase::Lingering { until, dropped } = &mut self.phase else {
            return Poll::Ready(());
        };
        let mut chunk = [MaybeUninit::uninit(); READ_CHUNK];
        while *dropped < LINGER_BYTES {
            let mut chunk = ReadBuf::uninit(&mut chunk);
            match Pin::new(&mut self.io).poll_read(cx, &mut chunk) {
                Poll::Ready(Ok(())) if !chunk.filled().is_empty() => *dropped += chunk.filled().len(),
                Poll::Ready(_) => return Poll::Ready(()),
                Poll::Pending => return poll_at(&mut self.timer, *until, cx),
            }
        }
        Poll::Ready(())
    }

    /// Follows what hyper wrote.
    fn wrote(&mut self, bytes: &[u8]) {
        match self.framing.wrote(bytes) {
            Wrote::Answering => return,
            Wrote::Answered => {}
            Wrote::Untracked { held, why } => {
                match why {
                    Untracked::Upgraded => {
                        tracing::debug!(peer = %self.peer, "a connection switched protocols")
                    }
                    Untracked::Unparsed => {
                        tracing::warn!(peer = %self.peer, "an answer's framing was not understood; the connection is no longer guarded")
                    }
                }
                self.ready.extend(&held);
            }
        }
        if let Some(reader) = self.reader.take() {
            reader.wake();
        }
    }
}

/// Polls `timer` set to `at`.
fn poll_at(timer: &mut Pin<Box<Sleep>>, at: Instant, cx: &mut Context<'_>) -> Poll<()> {
    if timer.deadline() != at {
        timer.as_mut().reset(at);
    }
    timer.as_mut().poll(cx)
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for GuardedStream<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.get_mut().read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for GuardedStream<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(Pin::new(&mut this.io).poll_write(cx, buf))?;
        this.wrote(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(Pin::new(&mut this.io).poll_write_vectored(cx, bufs))?;
        let mut left = n;
        for buf in bufs {
            if left == 0 {
                break;
            }
            let used = buf.len().min(left);
            this.wrote(&buf[..used]);
            left -= used;
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.shut_down {
            return Poll::Ready(Ok(()));
        }
        ready!(Pin::new(&mut this.io).poll_shutdown(cx))?;
        this.shut_down = true;
        Poll::Ready(Ok(()))
    }
}

/// Bytes consumed from the front.
#[derive(Debug, Default)]
struct Buffer {
    bytes: Vec<u8>,
    start: usize,
}

impl Buffer {
    fn as_slice(&self) -> &[u8] {
        &self.bytes[self.start..]
    }

    fn len(&self) -> usize {
        self.bytes.len() - self.start
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn extend(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.bytes.len() {
            self.bytes.clear();
            self.start = 0;
        }
    }
}
