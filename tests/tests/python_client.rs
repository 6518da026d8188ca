//! The Python client (`clients/python`), installed with pip into a fresh
//! venv as a user would (`pip install ./clients/python`, which fetches its
//! build backend from PyPI; the venv sees Debian's pandas), then its own
//! suite (`clients/python/tests`, standard library `unittest`) run against
//! a platform started here with real workers. Fails unless every test
//! passed, none was skipped, and there were at least 12.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use mapi_tests::{TestPlatform, python_tools};

/// Debian's Python.
const DEBIAN_PYTHON: &str = "/usr/bin/python3";
/// The fewest client tests the suite must run.
const AT_LEAST: usize = 12;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_installs_with_pip_and_passes_its_suite() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let venv = tempfile::tempdir().expect("tempdir");
    let package = root.join("clients/python");
    // Built from a copy: setuptools writes `build/` and `*.egg-info` beside the sources.
    let copy = venv.path().join("mapi-client");
    mapi_tests::copy_tree(&package, &copy);
    let (dir, pkg) = (venv.path().to_owned(), copy);
    tokio::task::spawn_blocking(move || {
        // Debian's Python, whose site packages hold pandas (`apt-get install python3-pandas`).
        python_tools::run(Path::new(DEBIAN_PYTHON), &["-m", "venv", "--system-site-packages", "venv"], &dir)?;
        let pip = ["-m", "pip", "install", "--quiet", "--disable-pip-version-check"];
        let python = dir.join("venv/bin/python");
        let mut args = pip.to_vec();
        let pkg = pkg.to_string_lossy().into_owned();
        args.push(&pkg);
        python_tools::run(&python, &args, &dir)
    })
    .await
    .expect("install")
    .unwrap_or_else(|e| panic!("pip install ./clients/python: {e}"));

    let p = TestPlatform::start(&[]).await;
    let python = venv.path().join("venv/bin/python");
    // Run from outside the checkout: the installed package is what is imported.
    let out = tokio::process::Command::new(&python)
        .args(["-m", "unittest", "discover", "-v", "-s"])
        .arg(package.join("tests"))
        .current_dir(venv.path())
        .env("MAPI_URL", &p.platform.url)
        .env("MAPI_TOKEN", p.token())
        .env("MAPI_TENANT", "dev")
        .env("MAPI_PROJECT", "default")
        .env("MAPI_HOME", venv.path())
        .env("MAPI_CONFIG_DIR", venv.path())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(600), out)
        .await
        .expect("the client suite took over 10 minutes")
        .expect("python");
    let printed = String::from_utf8_lossy(&out.stderr);
    let ran: usize = printed
        .lines()
        .find_map(|l| l.strip_prefix("Ran ").and_then(|r| r.split_whitespace().next()?.parse().ok()))
        .unwrap_or(0);
    assert!(out.status.success(), "the client suite failed:\n{printed}");
    assert!(ran >= AT_LEAST && !printed.contains("skipped"), "only {ran} client tests ran:\n{printed}");
    let imported = std::process::Command::new(&python)
        .args(["-c", "import mapi_client, os; print(os.path.dirname(mapi_client.__file__))"])
        .current_dir(venv.path())
        .output()
        .expect("python");
    let at = String::from_utf8_lossy(&imported.stdout);
    assert!(at.contains("site-packages"), "the installed package is imported, not the checkout's: {at}");
}
