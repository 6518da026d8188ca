//! The README's walkthrough, through the `mapi` binary against a platform
//! started in this process: upload, submit with --watch, read the
//! coefficients, list, and the errors a person sees.

use std::process::Command;

use mapi_tests::{TestPlatform, binary};
use serde_json::Value;

fn mapi(p: &TestPlatform, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(binary("mapi"))
        .args(args)
        .env("MAPI_URL", &p.platform.url)
        .env("MAPI_TOKEN", p.token())
        .env("MAPI_TENANT", "dev")
        .env("MAPI_PROJECT", "default")
        .output()
        .expect("run mapi");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_walkthrough_works() {
    let p = TestPlatform::start(&[]).await;
    let csv = format!("{}/../examples/longley.csv", env!("CARGO_MANIFEST_DIR"));
    let (code, out, err) = mapi(&p, &["--json", "datasets", "upload", &csv]);
    assert_eq!(code, 0, "{err}");
    let ds: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(ds["rows"], 16);
    let ds = ds["id"].as_str().expect("id").to_owned();

    let (code, out, err) = mapi(
        &p,
        &[
            "runs",
            "submit",
            "--method",
            "tabular.linear",
            "--dataset",
            &ds,
            "--param",
            "y=employed",
            "--timeout",
            "120",
            "--watch",
        ],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("state     succeeded"), "{out}");
    assert!(out.contains("USD charged"), "{out}");
    let run =
        out.lines().next().and_then(|l| l.strip_prefix("run       ")).expect("run id line").trim().to_owned();

    let (code, out, _) = mapi(&p, &["runs", "output", &run, "model.json"]);
    assert_eq!(code, 0);
    let model: Value = serde_json::from_str(&out).expect("model.json");
    assert_eq!(model["coefficients"].as_array().map(Vec::len), Some(7));

    let (code, out, _) = mapi(&p, &["runs", "ls"]);
    assert_eq!(code, 0);
    assert!(out.contains(&run) && out.contains("succeeded"), "{out}");

    let (code, _, err) = mapi(&p, &["runs", "submit", "--method", "nope", "--dataset", &ds]);
    assert_eq!(code, 1);
    assert!(err.contains("INVALID_ARGUMENT") && err.contains("unknown method `nope`"), "{err}");

    let (code, out, _) = mapi(&p, &["runs", "submit", "--method", "diag.fail", "--dataset", &ds, "--watch"]);
    assert_eq!(code, 1, "a failed run exits non-zero");
    assert!(out.contains("METHOD_ERROR"), "{out}");
}
