//! Serving with graceful drain: on shutdown stop accepting, let in-flight
//! requests finish for at most the drain timeout, then return, so a Cloud Run
//! instance answers everything it accepted within the 10 s after SIGTERM.
//! Every connection is read through the connection guard ([`crate::guard`]).

use std::future::{Future, IntoFuture};
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::serve::ListenerExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::oneshot;

use crate::config::GuardConfig;
use crate::guard::{GuardedListener, GuardedStream};

/// Serves `router` on `listener` until `shutdown` resolves, then stops
/// accepting connections and waits up to `drain_timeout` for in-flight
/// requests. Requests still running after that are abandoned (their tasks end
/// with the runtime). Handlers see the peer as `ConnectInfo<SocketAddr>`.
/// Every connection is held to `guard`'s limits and timeouts. The first
/// call in a process also bounds what the allocator keeps
/// ([`crate::memory::keep_bounded`]).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    drain_timeout: Duration,
    guard: GuardConfig,
) -> io::Result<()> {
    crate::memory::keep_bounded();
    let (draining_tx, draining_rx) = oneshot::channel::<()>();
    let signal = async move {
        shutdown.await;
        // The receiver is gone only if `serve` itself was dropped.
        let _ = draining_tx.send(());
    };
    let listener = GuardedListener::new(listener, guard).tap_io(keep_connect_info);
    let server = axum::serve(listener, router.into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(signal)
        .into_future();
    tokio::pin!(server);
    tokio::select! {
        biased;
        result = &mut server => return result,
        _ = draining_rx => {}
    }
    tracing::info!(
        drain_timeout_s = drain_timeout.as_secs_f64(),
        "shutting down, draining in-flight requests"
    );
    match tokio::time::timeout(drain_timeout, server).await {
        Ok(result) => result,
        Err(_) => {
            tracing::warn!(
                drain_timeout_s = drain_timeout.as_secs_f64(),
                "drain timeout elapsed with requests in flight, abandoning them"
            );
            Ok(())
        }
    }
}

/// Taps nothing. axum gives `ConnectInfo<SocketAddr>` for a bare
/// `TcpListener`, or for any listener behind `tap_io` (whose address is a
/// `SocketAddr`), not for a listener of ours: the orphan rule keeps us from
/// implementing `Connected` for `SocketAddr` ourselves.
fn keep_connect_info(_: &mut GuardedStream<TcpStream>) {}

/// Resolves on the first SIGTERM (what Cloud Run sends) or SIGINT. It
/// listens from the call, not from the first poll, so a signal that comes
/// between the two (a supervisor that stops the process as soon as it has
/// read its URL) still stops it gracefully.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send {
    let term = wait_for(SignalKind::terminate(), "SIGTERM");
    let int = wait_for(SignalKind::interrupt(), "SIGINT");
    async move {
        let name = tokio::select! {
            name = term => name,
            name = int => name,
        };
        tracing::info!(signal = name, "shutdown signal received");
    }
}

/// Resolves when `kind` arrives, listening from the call; never, if it
/// cannot be listened for.
fn wait_for(kind: SignalKind, name: &'static str) -> impl std::future::Future<Output = &'static str> + Send {
    let stream = signal(kind);
    async move {
        match stream {
            Ok(mut stream) => {
                stream.recv().await;
                name
            }
            Err(e) => {
                tracing::error!(signal = name, error = %e, "cannot listen for signal");
                std::future::pending().await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use axum::routing::get;
    use tokio::sync::Notify;

    use super::*;

    /// A router whose `/slow` tells `started` it has begun, then waits for `release`.
    fn slow_router(started: Arc<Notify>, release: Arc<Notify>) -> Router {
        Router::new().route(
            "/slow",
            get(move || {
                let (started, release) = (started.clone(), release.clone());
                async move {
                    started.notify_one();
                    release.notified().await;
                    "done"
                }
            }),
        )
    }

    async fn local() -> (TcpListener, SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        (listener, addr)
    }

    /// Connects until the listener is gone; fails the test if it never goes.
    async fn until_refused(addr: SocketAddr) {
        let refused = async {
            loop {
                match tokio::net::TcpStream::connect(addr).await {
                    Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => break,
                    // Accepted into the backlog of a listener that then closed.
                    Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
                    Err(e) => panic!("unexpected connect error: {e}"),
                    Ok(stream) => drop(stream),
                }
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), refused).await.expect("listener closed after shutdown");
    }

    #[tokio::test]
    async fn in_flight_request_completes_after_shutdown() {
        let (listener, addr) = local().await;
        let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            listener,
            slow_router(started.clone(), release.clone()),
            async move {
                let _ = stop_rx.await;
            },
            Duration::from_secs(30),
            GuardConfig::default(),
        ));
        let client = tokio::spawn(async move {
            let response = reqwest::get(format!("http://{addr}/slow")).await.expect("response");
            (response.status().as_u16(), response.text().await.expect("body"))
        });
        started.notified().await;

        stop_tx.send(()).expect("server is listening for shutdown");
        until_refused(addr).await;
        // A bounded look for a wrong early return; the drain timeout is 30 s.
        let mut server = server;
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut server).await.is_err(),
            "serve must wait for the in-flight request"
        );

        release.notify_one();
        assert_eq!(client.await.expect("client task"), (200, "done".to_owned()));
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("serve returns once drained")
            .expect("serve task")
            .expect("serve result");
    }

    #[tokio::test]
    async fn idle_server_returns_promptly_on_shutdown() {
        let (listener, addr) = local().await;
        let router = Router::new().route("/", get(|| async { "hi" }));
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            listener,
            router,
            async move {
                let _ = stop_rx.await;
            },
            Duration::from_secs(30),
            GuardConfig::default(),
        ));
        let body =
            reqwest::get(format!("http://{addr}/")).await.expect("response").text().await.expect("body");
        assert_eq!(body, "hi");
        stop_tx.send(()).expect("server is listening for shutdown");
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("serve returns without waiting for the drain timeout")
            .expect("serve task")
            .expect("serve result");
    }

    #[tokio::test]
    async fn stuck_request_is_abandoned_after_drain_timeout() {
        let (listener, addr) = local().await;
        let started = Arc::new(Notify::new());
        let never_released = Arc::new(Notify::new());
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let drain = Duration::from_millis(100);
        let server = tokio::spawn(serve(
            listener,
            slow_router(started.clone(), never_released),
            async move {
                let _ = stop_rx.await;
            },
            drain,
            GuardConfig::default(),
        ));
        let client = tokio::spawn(reqwest::get(format!("http://{addr}/slow")));
        started.notified().await;

        let stopped_at = Instant::now();
        stop_tx.send(()).expect("server is listening for shutdown");
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("serve returns after the drain timeout")
            .expect("serve task")
            .expect("serve result");
        assert!(stopped_at.elapsed() >= drain, "serve returned before the drain timeout");
        assert!(!client.is_finished(), "the stuck request never got an answer");
        client.abort();
    }

    #[tokio::test]
    async fn shutdown_signal_resolves_on_sigterm() {
        let mut signal = Box::pin(shutdown_signal());
        // The first poll installs the handlers, so SIGTERM cannot kill the test process.
        assert!(tokio::time::timeout(Duration::ZERO, &mut signal).await.is_err(), "no signal yet");
        let status = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
        tokio::time::timeout(Duration::from_secs(5), signal).await.expect("SIGTERM resolves shutdown_signal");
    }
}
