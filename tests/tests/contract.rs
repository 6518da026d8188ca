//! The API is what its OpenAPI document says, proven against a fresh
//! `mapi dev` (the real binary, in its own home) in two ways:
//! - Schemathesis derives requests from `GET /openapi.json` and checks
//!   every answer against the document: all checks, every phase (the
//!   stateful one included), a bounded number of examples, seeded; once
//!   with an API token, once with a tenant admin's session and once with an
//!   operator's. `tests/contract/schemathesis.toml` holds the settings and
//!   each exclusion with its reason; a pass fails on any failure.
//! - A client generated from the document (openapi-python-client) uploads a
//!   dataset, fits `tabular.linear`, waits and reads the fit, through the
//!   generated code only (`tests/contract/generated_client.py`).
//!
//! Both tools are pinned in `tests/contract/requirements.txt` and installed
//! once into their own venv (`mapi_tests::python_tools`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use mapi_tests::{DevProcess, free_port, python_tools};
use serde_json::Value;

const REQUIREMENTS: &str = include_str!("../contract/requirements.txt");
const CONFIG: &str = include_str!("../contract/schemathesis.toml");
/// Examples per operation and phase: enough to reach every status an
/// operation answers with, few enough for CI on two cores.
const MAX_EXAMPLES: &str = "8";
/// Fixed, so a failure is reproduced by running the test again.
const SEED: &str = "2026";

fn contract_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("contract")
}

fn python() -> PathBuf {
    let dir = python_tools::cache_dir("contract", REQUIREMENTS);
    python_tools::venv(&dir, REQUIREMENTS, |_| Ok(()))
        .unwrap_or_else(|e| panic!("installing the contract tools: {e}"))
}

/// The API token `mapi dev` wrote for its CLI.
fn dev_token(home: &Path) -> String {
    let creds: Value =
        serde_json::from_slice(&std::fs::read(home.join("credentials.json")).expect("credentials"))
            .expect("credentials are JSON");
    creds["token"].as_str().expect("a token").to_owned()
}

/// A session of `email`, signed in through `mapi dev`'s identity provider.
fn session(url: &str, email: &str) -> String {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let http = reqwest::Client::new();
        let login: Value = http
            .post(format!("{url}/dev/idp/login"))
            .json(&serde_json::json!({ "email": email }))
            .send()
            .await
            .expect("dev login")
            .json()
            .await
            .expect("an id token");
        let token = login["id_token"].as_str().expect("id_token").to_owned();
        let me = http.post(format!("{url}/v1/sessions")).bearer_auth(&token).send().await.expect("sign in");
        assert_eq!(me.status(), 200, "signing in {email}");
        token
    })
}

/// Runs `cmd`, its output shown when the test fails: (succeeded, output).
fn output_of(cmd: &mut Command) -> (bool, String) {
    let out = cmd.stdin(Stdio::null()).output().expect("start");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn a_client_generated_from_the_document_fits_a_model() {
    let python = python();
    let home = tempfile::tempdir().expect("home");
    let dev = DevProcess::start(home.path(), free_port(), &[]);
    let scratch = tempfile::tempdir().expect("scratch");
    let (ok, out) = output_of(
        Command::new(&python)
            .arg(contract_dir().join("generated_client.py"))
            .env("MAPI_URL", &dev.url)
            .env("MAPI_TOKEN", dev_token(home.path()))
            .env("MAPI_CLIENT_DIR", scratch.path())
            .env("PYTHONDONTWRITEBYTECODE", "1"),
    );
    dev.stop();
    assert!(ok && out.contains("PASS:"), "the generated client failed:\n{out}");
}

/// One Schemathesis pass as `credential`; `extra` is TOML appended to the
/// shared configuration (this pass's own exclusions).
fn schemathesis(python: &Path, url: &str, credential: &str, extra: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("pass dir");
    let config = dir.path().join("schemathesis.toml");
    std::fs::write(&config, format!("{CONFIG}\n{extra}")).expect("config");
    output_of(
        Command::new(python.with_file_name("schemathesis"))
            .args(["--no-color", "--config-file"])
            .arg(&config)
            .args(["run", &format!("{url}/openapi.json")])
            .args(["--phases", "examples,coverage,fuzzing,stateful"])
            .args(["--max-examples", MAX_EXAMPLES, "--seed", SEED, "--workers", "1"])
            .arg("--header")
            .arg(format!("Authorization: Bearer {credential}"))
            .current_dir(dir.path()),
    )
}

#[test]
fn schemathesis_finds_no_answer_the_document_does_not_describe() {
    let python = python();
    let home = tempfile::tempdir().expect("home");
    let dev = DevProcess::start(home.path(), free_port(), &[]);
    let token = dev_token(home.path());
    // The token's pass may not revoke itself: every later case would be a 401.
    let own_token = r#"
[[operations]]
include-name = "DELETE /v1/tenants/{tenant}/projects/{project}/tokens/{id}"
enabled = false
"#;
    // The executor suites run executions for a minute (a fork bomb and a memory bomb among them)
    // and answer 409 while they run: not for fuzzing; their answers are tested in `verify`.
    let suites = r#"
[[operations]]
include-name = "POST /v1/admin/executors/{name}/verify"
enabled = false

[[operations]]
include-name = "POST /v1/admin/executors/{name}/security"
enabled = false
"#;
    let passes = [
        ("an API token", token, own_token),
        ("a tenant admin's session", session(&dev.url, "dev@dev.local"), ""),
        ("an operator's session", session(&dev.url, "admin@dev.local"), suites),
    ];
    let mut failed = Vec::new();
    for (who, credential, extra) in passes {
        let (ok, out) = schemathesis(&python, &dev.url, &credential, extra);
        let summary = out.lines().skip_while(|l| !l.contains("SUMMARY")).collect::<Vec<_>>().join("\n");
        println!("Schemathesis as {who}:\n{summary}");
        if !ok {
            failed.push(format!("as {who}:\n{out}"));
        }
    }
    dev.stop();
    assert!(
        failed.is_empty(),
        "Schemathesis found answers the document does not describe:\n{}",
        failed.join("\n\n")
    );
}
