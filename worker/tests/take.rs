//! Taking the bootstrap when the platform's answers are lost: a task whose
//! pinned DELETE may have applied speaks as the taker, so its attempt is
//! heard from and finalized instead of waited on for its whole timeout; a
//! task whose first DELETE is refused cleanly (another took it) stays
//! silent and does nothing.
//!
//! The platform is a scripted HTTP/1.1 server on 127.0.0.1: the bootstrap
//! route answers GET with the bootstrap and its generation, and each DELETE
//! with the next scripted answer; the dataset is gone (404), so a task that
//! took its bootstrap prints `started`, then `error`, and exits 1.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

/// How the server answers one DELETE.
#[derive(Clone, Copy, Debug)]
enum Delete {
    /// Applies it and closes the connection without an answer.
    Lost,
    Status(u16),
}

/// Reads one request head; its method and path.
fn request(stream: &mut TcpStream) -> Option<(String, String)> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    let line = String::from_utf8_lossy(&head).lines().next()?.to_owned();
    let mut parts = line.split(' ');
    Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
}

fn answer(stream: &mut TcpStream, status: u16, headers: &str, body: &str) {
    let reply = format!(
        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n{headers}\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(reply.as_bytes());
}

/// Serves the bootstrap and the scripted DELETEs; answers the DELETEs it saw.
fn platform(script: Vec<Delete>) -> (String, Arc<Mutex<Vec<Delete>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let bootstrap = serde_json::json!({
        "v": 1, "tenant": "dev", "project": "default", "run": "run_01arz3ndektsv4rrffq69g5fav",
        "attempt": 1, "task": 0, "task_count": 1, "method": "describe", "params": {},
        "timeout_s": 60, "dataset_url": format!("{base}/dataset"), "outputs": {},
        "checkpoint_url": format!("{base}/checkpoint"), "resume_url": null,
        "event_key": "ab".repeat(32),
    })
    .to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        let mut script = script.into_iter();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let Some((method, path)) = request(&mut stream) else { continue };
            match (method.as_str(), path.starts_with("/o/bootstrap/")) {
                ("GET", true) => answer(&mut stream, 200, "x-goog-generation: 7\r\n", &bootstrap),
                ("DELETE", true) => {
                    let next = script.next().unwrap_or(Delete::Status(404));
                    log.lock().expect("log").push(next);
                    match next {
                        Delete::Lost => drop(stream),
                        Delete::Status(s) => answer(&mut stream, s, "", ""),
                    }
                }
                _ => answer(&mut stream, 404, "", ""),
            }
        }
    });
    (base, seen)
}

fn task(base: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mapi-worker"))
        .env_clear()
        .env("MAPI_RUN_ID", "run_01arz3ndektsv4rrffq69g5fav")
        .env("MAPI_NONCE", "0123456789abcdef0123456789abcdef")
        .env("MAPI_BOOTSTRAP_URL", format!("{base}/o/bootstrap/{{nonce}}"))
        .output()
        .expect("run")
}

fn kinds(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| v["mapi_event"]["kind"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn a_delete_whose_answer_was_lost_then_404_takes_the_bootstrap_and_speaks() {
    let (base, seen) = platform(vec![Delete::Lost, Delete::Status(404)]);
    let out = task(&base);
    assert_eq!(kinds(&out), ["started", "error"], "{out:?}");
    assert_eq!(out.status.code(), Some(1), "the gone dataset is the method's error: {out:?}");
    assert_eq!(seen.lock().expect("log").len(), 2, "the lost DELETE was sent again");
}

#[test]
fn a_delete_never_answered_takes_the_bootstrap_and_speaks() {
    let (base, seen) = platform(vec![Delete::Lost; 4]);
    let out = task(&base);
    assert_eq!(kinds(&out), ["started", "error"], "{out:?}");
    assert_eq!(seen.lock().expect("log").len(), 4);
    assert!(String::from_utf8_lossy(&out.stderr).contains("may have applied"), "{out:?}");
}

#[test]
fn a_5xx_then_204_takes_the_bootstrap() {
    let (base, _) = platform(vec![Delete::Status(503), Delete::Status(204)]);
    let out = task(&base);
    assert_eq!(kinds(&out), ["started", "error"], "{out:?}");
}

#[test]
fn a_first_delete_refused_means_a_twin_took_it_and_this_task_stays_silent() {
    for refusal in [404, 412] {
        let (base, seen) = platform(vec![Delete::Status(refusal)]);
        let out = task(&base);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert!(out.stdout.is_empty(), "a twin prints no event: {out:?}");
        assert_eq!(seen.lock().expect("log").len(), 1, "a clean refusal is not sent again");
    }
}
