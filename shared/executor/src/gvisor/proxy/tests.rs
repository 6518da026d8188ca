use std::net::TcpListener;
use std::sync::mpsc;

use super::*;

/// A stand-in for the platform: answers each connection `200 ok` after reading what the proxy
/// sent until it went quiet for 300 ms (or closed its side), and reports those bytes.
fn platform() -> (SocketAddr, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let mut conn = conn.expect("accept");
            conn.set_read_timeout(Some(Duration::from_millis(300))).expect("timeout");
            let mut got = Vec::new();
            let mut chunk = [0u8; 4096];
            while let Ok(n @ 1..) = conn.read(&mut chunk) {
                got.extend_from_slice(&chunk[..n]);
            }
            conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                .expect("write");
            let _ = tx.send(String::from_utf8_lossy(&got).into_owned());
        }
    });
    (addr, rx)
}

/// A proxy for `allowed` in front of `upstream`; the socket's path.
fn proxy(dir: &std::path::Path, upstream: SocketAddr) -> std::path::PathBuf {
    let socket = dir.join("platform.sock");
    let listener = UnixListener::bind(&socket).expect("bind the socket");
    let allowed =
        Allowed { host: "127.0.0.1".into(), port: upstream.port(), bootstrap: "/o/bootstrap/n0nce1".into() };
    std::thread::spawn(move || serve(&listener, &allowed, upstream));
    socket
}

fn ask(socket: &std::path::Path, request: &str) -> String {
    let mut conn = UnixStream::connect(socket).expect("connect");
    conn.write_all(request.as_bytes()).expect("send");
    let mut answer = String::new();
    conn.read_to_string(&mut answer).expect("answer");
    answer
}

#[test]
fn an_allowed_request_reaches_the_platform_in_origin_form_and_its_answer_comes_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (addr, seen) = platform();
    let socket = proxy(dir.path(), addr);
    let target = format!("http://127.0.0.1:{}/o/bootstrap/n0nce1", addr.port());
    let answer =
        ask(&socket, &format!("GET {target} HTTP/1.1\r\nHost: x\r\nProxy-Connection: keep-alive\r\n\r\n"));
    assert!(answer.starts_with("HTTP/1.1 200 OK") && answer.ends_with("ok"), "{answer}");
    let sent = seen.recv_timeout(Duration::from_secs(5)).expect("the platform was asked");
    let expected = format!(
        "GET /o/bootstrap/n0nce1 HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
        addr.port()
    );
    assert_eq!(sent, expected);
}

#[test]
fn a_refused_request_never_reaches_the_platform() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (addr, seen) = platform();
    let socket = proxy(dir.path(), addr);
    for target in [
        format!("http://127.0.0.1:{}/v1/whoami", addr.port()),
        format!("http://127.0.0.1:{}/o/bootstrap/another", addr.port()),
        "http://169.254.169.254/computeMetadata/v1/".to_owned(),
    ] {
        let answer = ask(&socket, &format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n"));
        assert!(answer.starts_with("HTTP/1.1 403 Forbidden"), "{target}: {answer}");
    }
    let answer = ask(&socket, "CONNECT 127.0.0.1:22 HTTP/1.1\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(seen.recv_timeout(Duration::from_millis(300)).is_err(), "the platform heard nothing");
}

#[test]
fn only_the_declared_body_follows_an_allowed_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (addr, seen) = platform();
    let socket = proxy(dir.path(), addr);
    let put = format!(
        "http://127.0.0.1:{}/o/data/t/dev/p/default/runs/run_1/a1/outputs/m.json?method=PUT&expires=9&sig=ab",
        addr.port()
    );
    let smuggled = "GET /v1/whoami HTTP/1.1\r\nHost: x\r\n\r\n";
    let answer = ask(&socket, &format!("PUT {put} HTTP/1.1\r\nContent-Length: 2\r\n\r\n{{}}{smuggled}"));
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    let sent = seen.recv_timeout(Duration::from_secs(5)).expect("the platform was asked");
    assert!(sent.starts_with("PUT /o/data/t/dev/") && sent.ends_with("\r\n\r\n{}"), "{sent}");
    assert!(!sent.contains("whoami"), "{sent}");
    let chunked = format!("PUT {put} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{{}}\r\n0\r\n\r\n");
    assert!(ask(&socket, &chunked).starts_with("HTTP/1.1 403"));
    assert!(seen.recv_timeout(Duration::from_millis(300)).is_err(), "a chunked body is not sent on");
}
