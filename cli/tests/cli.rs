//! The `mapi` binary's own behaviour without a platform.

use std::process::Command;

#[test]
fn help_lists_the_commands() {
    let out = Command::new(env!("CARGO_BIN_EXE_mapi")).arg("--help").output().expect("run");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for cmd in ["dev", "datasets", "runs", "whoami"] {
        assert!(text.contains(cmd), "{cmd} missing from:\n{text}");
    }
    assert!(!text.contains("worker"), "the worker entry point is hidden");
}

#[test]
fn without_a_platform_the_cli_says_what_to_do() {
    let home = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_mapi"))
        .args(["runs", "ls"])
        .env("MAPI_HOME", home.path())
        // Nothing the person running the tests saved may answer for the platform.
        .env("MAPI_CONFIG_DIR", home.path().join("config"))
        .env_remove("MAPI_URL")
        .env_remove("MAPI_TOKEN")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("start `mapi dev`"));
}

#[test]
fn bad_arguments_are_refused_before_any_request() {
    let out = Command::new(env!("CARGO_BIN_EXE_mapi"))
        .args(["runs", "submit", "--method", "describe", "--dataset", "ds_x", "--class", "XXL"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("XXL"));
}
