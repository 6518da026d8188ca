//! Memory per request is bounded whatever the body: `mapi dev` runs as a
//! child process, is sent the worst bodies a client can send within the
//! byte limits (a job of tiny items, a CSV of tiny rows, a CSV a million
//! columns wide, three of them at once) and its peak resident set (VmHWM,
//! read from `/proc`, so the figure is the kernel's, not a timing) must
//! stay under a stated bound above its peak before them.
//!
//! The bound: a request holds its body once (up to 32 MiB; it is read into
//! one buffer sized from its length), plus a pointer per item up to the
//! item cap and the row being read; three such requests at once (96 MiB of
//! bodies) stay under [`BOUND_MIB`]. Measured: 90 MiB of growth (44 → 134
//! MiB, debug build). Before bodies were read in bounded memory, one 64 MiB
//! job body took the process from 27 to 1,144 MiB and one such CSV to 605
//! MiB.

use mapi_tests::{DevProcess, free_port};
use serde_json::Value;

/// The most the peak resident set may grow over the whole suite.
const BOUND_MIB: u64 = 160;

/// The default body limit of uploads and job submits.
const BODY: usize = 32 * 1024 * 1024;

/// A kilobyte figure of `/proc/<pid>/status` (`VmRSS`, `VmHWM`).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field}"));
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("a figure in kB")
}

fn tiny_items_job() -> Vec<u8> {
    let head = br#"{"method":"item.echo","items":["#;
    let mut body = Vec::with_capacity(BODY);
    body.extend_from_slice(head);
    while body.len() + 4 < BODY {
        body.extend_from_slice(b"0,");
    }
    body.extend_from_slice(b"0]}");
    body
}

fn tiny_rows_csv() -> Vec<u8> {
    let mut body = Vec::with_capacity(BODY);
    body.extend_from_slice(b"x\n");
    while body.len() + 2 <= BODY {
        body.extend_from_slice(b"1\n");
    }
    body
}

fn wide_csv() -> Vec<u8> {
    let mut body = (0..1_000_000).map(|i| format!("c{i}")).collect::<Vec<_>>().join(",").into_bytes();
    body.push(b'\n');
    body
}

/// A route, the body's content type, the body, and the limit that refuses it.
type WorstBody = (&'static str, &'static str, fn() -> Vec<u8>, &'static str);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worst_bodies_keep_the_peak_resident_set_bounded() {
    let home = tempfile::tempdir().expect("tempdir");
    let dev = DevProcess::start(home.path(), free_port(), &[]);
    let pid = dev.child.id();
    let creds: Value =
        serde_json::from_slice(&std::fs::read(home.path().join("credentials.json")).expect("credentials"))
            .expect("json");
    let token = creds["token"].as_str().expect("token").to_owned();
    let project = format!(
        "{}/v1/tenants/{}/projects/{}",
        dev.url,
        creds["tenant"].as_str().unwrap_or_default(),
        creds["project"].as_str().unwrap_or_default()
    );
    let http = reqwest::Client::new();
    let send = |path: &str, content_type: &str, body: Vec<u8>| {
        http.post(format!("{project}/{path}"))
            .bearer_auth(&token)
            .header("content-type", content_type.to_owned())
            .body(body)
            .send()
    };
    let before = status_kib(pid, "VmHWM");

    let cases: [WorstBody; 3] = [
        ("jobs", "application/json", tiny_items_job, "max_items_per_job"),
        ("datasets", "text/csv", tiny_rows_csv, "MAPI_DATASET_MAX_ROWS"),
        ("datasets", "text/csv", wide_csv, "MAPI_DATASET_MAX_COLUMNS"),
    ];
    for (path, content_type, body, limit) in cases {
        let resp = send(path, content_type, body()).await.expect("send");
        assert_eq!(resp.status().as_u16(), 413, "{limit}");
        let problem: Value = resp.json().await.expect("problem");
        assert!(problem["detail"].as_str().unwrap_or_default().contains(limit), "{problem}");
    }
    let one_at_a_time = status_kib(pid, "VmHWM");
    // Three at once: each holds its own body.
    let (a, b, c) = tokio::join!(
        send("jobs", "application/json", tiny_items_job()),
        send("datasets", "text/csv", tiny_rows_csv()),
        send("jobs", "application/json", tiny_items_job()),
    );
    for r in [a, b, c] {
        assert_eq!(r.expect("send").status().as_u16(), 413);
    }
    let health = http.get(format!("{}/health", dev.url)).send().await.expect("health");
    assert_eq!(health.status().as_u16(), 200, "the server is still healthy");
    let after = status_kib(pid, "VmHWM");
    let mib = |kib: u64| kib / 1024;
    eprintln!(
        "peak resident set: {} MiB before, {} MiB after one of each worst body, {} MiB after three at once",
        mib(before),
        mib(one_at_a_time),
        mib(after)
    );
    assert!(
        mib(after.saturating_sub(before)) < BOUND_MIB,
        "the peak grew by {} MiB (from {} to {} MiB): over the {BOUND_MIB} MiB bound",
        mib(after.saturating_sub(before)),
        mib(before),
        mib(after)
    );
    dev.stop();
}
