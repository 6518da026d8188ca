//! The `mapi-worker` binary's entry points refuse what they cannot run.

use std::process::Command;

#[test]
fn unknown_arguments_print_usage_and_exit_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_mapi-worker")).arg("bogus").output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage: mapi-worker"));
}

#[test]
fn a_task_without_its_environment_exits_as_a_setup_failure() {
    let out = Command::new(env!("CARGO_BIN_EXE_mapi-worker")).env_clear().output().expect("run");
    assert_eq!(out.status.code(), Some(mapi_worker::supervisor::EXIT_SETUP));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line: serde_json::Value =
        serde_json::from_str(stderr.lines().next().expect("a log line")).expect("JSON log");
    assert_eq!(line["severity"], "ERROR");
    assert!(line["message"].as_str().unwrap_or_default().contains("MAPI_NONCE"), "{line}");
    assert!(out.stdout.is_empty(), "no event without a bootstrap");
}

#[test]
fn a_missing_bootstrap_means_a_duplicate_that_does_no_work() {
    // Nothing listens on port 9 of localhost: the GET fails, and after its
    // retries the worker gives up as a setup failure, printing no event.
    let out = Command::new(env!("CARGO_BIN_EXE_mapi-worker"))
        .env_clear()
        .env("MAPI_RUN_ID", "run_01arz3ndektsv4rrffq69g5fav")
        .env("MAPI_NONCE", "0123456789abcdef0123456789abcdef")
        .env("MAPI_BOOTSTRAP_URL", "gs://bucket/{nonce}")
        .env("MAPI_GCS_ENDPOINT", "http://127.0.0.1:9")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(mapi_worker::supervisor::EXIT_SETUP));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read the bootstrap"), "{out:?}");
    assert!(out.stdout.is_empty());
}

#[test]
fn a_bootstrap_url_of_another_scheme_is_a_setup_failure() {
    let out = Command::new(env!("CARGO_BIN_EXE_mapi-worker"))
        .env_clear()
        .env("MAPI_RUN_ID", "run_01arz3ndektsv4rrffq69g5fav")
        .env("MAPI_NONCE", "0123456789abcdef0123456789abcdef")
        .env("MAPI_BOOTSTRAP_URL", "ftp://bucket/{nonce}")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(mapi_worker::supervisor::EXIT_SETUP));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unsupported bootstrap URL"), "{out:?}");
    assert!(out.stdout.is_empty());
}
