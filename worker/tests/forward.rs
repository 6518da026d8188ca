//! `mapi-worker forward` pipes a Unix socket to a TCP port, passes signals
//! on and exits as its program does. The "server" is a TcpListener on port
//! 0 in the test; the program is `sleep` or `sh`.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A forwarder, killed if a test fails before it exits.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

fn forward(uds: &Path, port: u16, command: &[&str]) -> Running {
    let child = Command::new(env!("CARGO_BIN_EXE_mapi-worker"))
        .arg("forward")
        .arg("--uds")
        .arg(uds)
        .args(["--port", &port.to_string(), "--"])
        .args(command)
        .spawn()
        .expect("start mapi-worker forward");
    Running(child)
}

/// Connects to the forwarder's socket once it is there.
fn connect(uds: &Path) -> UnixStream {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match UnixStream::connect(uds) {
            Ok(s) => return s,
            Err(e) if Instant::now() > deadline => panic!("no socket at {}: {e}", uds.display()),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn wait(Running(child): &mut Running) -> ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if Instant::now() > deadline {
            panic!("mapi-worker forward did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(Running(child): &Running, signal: Signal) {
    kill(Pid::from_raw(i32::try_from(child.id()).expect("a pid")), signal).expect("signal");
}

#[test]
fn a_request_through_the_socket_reaches_the_port_and_sigterm_reaches_the_program() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uds = dir.path().join("http.sock");
    // A stale socket from an earlier run is replaced.
    drop(std::os::unix::net::UnixListener::bind(&uds).expect("stale socket"));
    let server = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = server.local_addr().expect("addr").port();
    let mut child = forward(&uds, port, &["sleep", "30"]);

    // The server answers once the client's request has ended (the client
    // closed its writing side): half-closes travel through.
    let answer = std::thread::spawn(move || {
        let (mut conn, _) = server.accept().expect("accept");
        let mut request = String::new();
        conn.read_to_string(&mut request).expect("read the request");
        conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            .expect("answer");
        request
    });
    let mut client = connect(&uds);
    client.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
    client.shutdown(Shutdown::Write).expect("half-close");
    let mut response = String::new();
    client.read_to_string(&mut response).expect("read the answer");
    assert_eq!(answer.join().expect("server"), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(response.starts_with("HTTP/1.1 200 OK") && response.ends_with("\r\n\r\nok"), "{response}");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&uds).expect("socket").permissions());
    assert_eq!(mode & 0o777, 0o666);

    signal(&child, Signal::SIGTERM);
    assert_eq!(wait(&mut child).code(), Some(128 + 15), "sleep was killed by SIGTERM");
}

#[test]
fn a_connection_before_the_server_listens_is_closed_and_the_exit_code_is_the_programs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uds = dir.path().join("http.sock");
    // Nothing listens on port 9 of localhost (a port taken from port 0 and
    // let go could go to a parallel test's listener).
    let port = 9;
    let mut child = forward(&uds, port, &["sleep", "30"]);
    let mut client = connect(&uds);
    let mut response = Vec::new();
    client.read_to_end(&mut response).expect("closed, not reset");
    assert!(response.is_empty());
    signal(&child, Signal::SIGINT);
    assert_eq!(wait(&mut child).code(), Some(128 + 2));

    let mut child = forward(&dir.path().join("b.sock"), port, &["sh", "-c", "exit 7"]);
    assert_eq!(wait(&mut child).code(), Some(7));
    let mut child = forward(&dir.path().join("c.sock"), port, &["/nonexistent/program"]);
    assert_eq!(wait(&mut child).code(), Some(127));
}

#[test]
fn bad_arguments_print_usage_and_exit_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_mapi-worker"))
        .args(["forward", "--uds", "x.sock", "--", "sleep"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("forward --uds PATH --port N -- PROGRAM"));
}
