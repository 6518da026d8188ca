//! The worker's way to the platform from inside a gVisor sandbox, which has
//! no network: the executor serves a proxy on a Unix socket bound into the
//! sandbox (its path in `MAPI_WORKER_PROXY_SOCKET`; the rule of what passes is
//! `mapi_executor::gvisor::channel`). reqwest speaks to a proxy over TCP, so
//! the worker listens on the sandbox's own loopback and pipes each
//! connection to the socket; every request of its HTTP client goes there.
//! Without the variable (local-process, Cloud Run) the client is direct.

use std::path::PathBuf;

/// The variable naming the proxy's socket inside the sandbox.
pub const PROXY_SOCKET: &str = "MAPI_WORKER_PROXY_SOCKET";

/// The worker's HTTP client: through the proxy's socket when `MAPI_WORKER_PROXY_SOCKET` names
/// one, else direct.
///
/// # Errors
///
/// The loopback listener's or the client's, in words.
pub async fn http_client(get: &dyn Fn(&str) -> Option<String>) -> Result<reqwest::Client, String> {
    let Some(socket) = get(PROXY_SOCKET).filter(|s| !s.is_empty()) else {
        return Ok(reqwest::Client::new());
    };
    let port = bridge(PathBuf::from(&socket)).await.map_err(|e| format!("the bridge to {socket}: {e}"))?;
    let proxy =
        reqwest::Proxy::all(format!("http://127.0.0.1:{port}")).map_err(|e| crate::error_chain(&e))?;
    reqwest::Client::builder().proxy(proxy).build().map_err(|e| crate::error_chain(&e))
}

/// Listens on the loopback and pipes each connection to `socket`; the port.
async fn bridge(socket: PathBuf) -> std::io::Result<u16> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let socket = socket.clone();
            tokio::spawn(async move {
                if let Ok(mut unix) = tokio::net::UnixStream::connect(&socket).await {
                    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
                }
            });
        }
    });
    Ok(port)
}

#[cfg(test)]
mod tests {
    use std::net::{SocketAddr, TcpListener};
    use std::os::unix::net::UnixListener;

    use mapi_executor::gvisor::channel::Allowed;

    use super::*;

    /// A stand-in for the platform's object route: answers `200 taken` to each connection.
    fn platform() -> SocketAddr {
        use std::io::{Read, Write};
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let mut conn = conn.expect("accept");
                // The request head is enough (a direct client keeps its side open).
                let (mut got, mut byte) = (Vec::new(), [0u8; 1]);
                while !got.ends_with(b"\r\n\r\n") && conn.read(&mut byte).expect("read") == 1 {
                    got.push(byte[0]);
                }
                let body = if got.starts_with(b"GET /o/bootstrap/n0nce1 ") { "taken" } else { "wrong" };
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                conn.write_all(answer.as_bytes()).expect("write");
            }
        });
        addr
    }

    /// The worker's client, through the bridge and the executor's proxy, reaches its bootstrap
    /// and is refused anything else.
    #[tokio::test]
    async fn the_client_reaches_the_platform_only_through_the_proxy() {
        let dir = tempfile::tempdir().expect("tempdir");
        let upstream = platform();
        let socket = dir.path().join("platform.sock");
        let listener = UnixListener::bind(&socket).expect("bind the socket");
        let allowed = Allowed {
            host: "127.0.0.1".into(),
            port: upstream.port(),
            bootstrap: "/o/bootstrap/n0nce1".into(),
        };
        std::thread::spawn(move || mapi_executor::gvisor::proxy::serve(&listener, &allowed, upstream));
        let path = socket.display().to_string();
        let http = http_client(&|k| (k == PROXY_SOCKET).then(|| path.clone())).await.expect("client");
        let base = format!("http://127.0.0.1:{}", upstream.port());
        let r = http.get(format!("{base}/o/bootstrap/n0nce1")).send().await.expect("the bootstrap");
        assert_eq!((r.status().as_u16(), r.text().await.expect("body")), (200, "taken".to_owned()));
        let r = http.get(format!("{base}/v1/whoami")).send().await.expect("an answer");
        assert_eq!(r.status().as_u16(), 403);
        let direct = http_client(&|_| None).await.expect("a direct client");
        let r = direct.get(format!("{base}/o/bootstrap/n0nce1")).send().await.expect("direct");
        assert_eq!(r.status().as_u16(), 200, "without the variable the client is direct");
    }
}
