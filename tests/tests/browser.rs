//! The web console in a real browser: the Python suite in `tests/browser/`
//! (Playwright from PyPI driving Debian's chromium, axe-core from npm)
//! against a platform started in this process with real workers.
//!
//! The harness installs the pinned packages once into
//! `$HOME/.cache/mapi-emulators/browser-<hash of the pins>/` (a venv and a
//! `node_modules`) under a file lock, seeds the accounts the tests sign in
//! as (a viewer and a runner of the `dev` tenant; `admin@dev.local` is the
//! dev operator), runs pytest with a JUnit report, and fails unless every
//! test passed and there were at least 30. Screenshots of every page are
//! kept under `$CARGO_TARGET_TMPDIR/console-screenshots/`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use mapi_access::Role;
use mapi_domain::{TenantId, UserId};
use mapi_schema::MembershipDoc;
use mapi_tests::{TestPlatform, python_tools};

const REQUIREMENTS: &str = include_str!("../browser/requirements.txt");
const PACKAGE_JSON: &str = include_str!("../browser/package.json");
/// Where Debian's package puts the browser (`apt-get install chromium`).
const CHROMIUM: &str = "/usr/bin/chromium";
/// The fewest browser tests the suite must run.
const AT_LEAST: usize = 30;

fn suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("browser")
}

/// The venv's Python and the path of `axe.min.js`, installed once.
fn install() -> Result<(PathBuf, PathBuf), String> {
    let dir = python_tools::cache_dir("browser", &format!("{REQUIREMENTS}{PACKAGE_JSON}"));
    let python = python_tools::venv(&dir, REQUIREMENTS, |dir| {
        std::fs::write(dir.join("package.json"), PACKAGE_JSON).map_err(|e| e.to_string())?;
        let npm = ["install", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"];
        python_tools::run(Path::new("npm"), &npm, dir)
    })?;
    Ok((python, dir.join("node_modules/axe-core/axe.min.js")))
}

/// The accounts the suite signs in as, besides the seeded admin.
async fn seed_accounts(p: &TestPlatform) {
    let store = &*p.platform.state.store;
    let now = p.platform.state.clock.now();
    let tenant = TenantId::parse("dev").expect("tenant");
    for (email, role) in [("viewer@dev.local", Role::Viewer), ("analyst@dev.local", Role::Runner)] {
        let m = MembershipDoc {
            tenant: tenant.clone(),
            project: None,
            email: UserId::parse(email).expect("email"),
            role,
            reviewer: false,
            claimed: false,
            created_at: now,
            created_by: UserId::parse("dev@dev.local").expect("email"),
        };
        mapi_schema::put(store, &m).await.expect("seed a member");
    }
}

/// (tests, failures + errors) of a JUnit report.
fn tally(junit: &str) -> (usize, usize) {
    let number = |name: &str| -> usize {
        let Some(at) = junit.find("<testsuite ") else { return 0 };
        let head = &junit[at..junit[at..].find('>').map_or(junit.len(), |e| at + e)];
        head.split(&format!(" {name}=\""))
            .nth(1)
            .and_then(|r| r.split('"').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    (number("tests"), number("failures") + number("errors"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_works_in_a_real_browser() {
    let chromium = std::env::var("MAPI_CHROMIUM").unwrap_or_else(|_| CHROMIUM.to_owned());
    assert!(
        Path::new(&chromium).is_file(),
        "the browser suite needs Debian's chromium at {chromium} (apt-get install chromium; .ci/run installs it)"
    );
    let (python, axe) =
        tokio::task::spawn_blocking(install).await.expect("install").unwrap_or_else(|e| panic!("{e}"));
    let p = TestPlatform::start(&[]).await;
    seed_accounts(&p).await;
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    let report = tempfile::NamedTempFile::new().expect("report file");
    // MAPI_BROWSER_K runs only the tests pytest's `-k` picks (a developer's
    // loop); the whole suite's size is then not asserted.
    let only = std::env::var("MAPI_BROWSER_K").ok().filter(|k| !k.is_empty());
    let mut pytest = tokio::process::Command::new(&python);
    pytest.args(["-m", "pytest", "-q", "-x"]);
    if let Some(k) = &only {
        pytest.args(["-k", k]);
    }
    let mut child = pytest
        .arg("--junitxml")
        .arg(report.path())
        .current_dir(suite_dir())
        .env("MAPI_URL", &p.platform.url)
        .env("MAPI_TOKEN", p.token())
        .env("MAPI_CHROMIUM", &chromium)
        .env("MAPI_AXE", &axe)
        .env("MAPI_SCREENSHOTS", &shots)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start pytest");
    let status = tokio::time::timeout(Duration::from_secs(900), child.wait())
        .await
        .expect("the browser suite took over 15 minutes")
        .expect("pytest");
    let junit = std::fs::read_to_string(report.path()).unwrap_or_default();
    let (tests, failed) = tally(&junit);
    assert!(status.success() && failed == 0, "the browser suite failed ({status}); its output is above");
    assert!(
        only.is_some() || tests >= AT_LEAST,
        "only {tests} browser tests ran; the suite must have at least {AT_LEAST}"
    );
}

#[test]
fn a_junit_report_is_tallied() {
    let report = r#"<?xml version="1.0"?><testsuites><testsuite name="pytest" errors="1" failures="2" skipped="0" tests="31" time="3"></testsuite></testsuites>"#;
    assert_eq!(tally(report), (31, 3));
    assert_eq!(tally(""), (0, 0));
}

/// What one page of the console's runs list costs, counted: the store's
/// documents read and the bytes sent, for the first page and one deep in
/// the history, over a store of 2,000 runs (`mapi bench console` times the
/// same page over 100,000).
#[tokio::test]
async fn a_runs_page_reads_and_sends_a_bounded_amount_however_long_the_history() {
    use std::sync::Arc;
    let executor = Arc::new(mapi_executor::scripted::ScriptedExecutor::default());
    let options =
        mapi_tests::Options { background: false, executor: Some(executor.clone()), ..Default::default() };
    let p = TestPlatform::start_with(&[], options).await;
    let dataset = p.upload("x,y\n1,2\n2,4\n").await;
    let id = p.submit(serde_json::json!({"method": "describe", "dataset": dataset})).await;
    let task = mapi_schema::tasks::DispatchTask {
        run: mapi_domain::RunId::parse(&id).expect("id"),
        attempt: mapi_domain::AttemptNo::FIRST,
    };
    let internal = p.platform.state.config.secrets.internal_token.clone();
    let r =
        p.http.post(p.url(mapi_schema::tasks::DISPATCH_PATH)).bearer_auth(&internal).json(&task).send().await;
    assert!(r.expect("dispatch").status().is_success());
    let state = &p.platform.state;
    mapi_embedded::load::copy_dispatched_run(state, &*executor, &task.run, 2_000, &mapi_entropy::OsEntropy)
        .await
        .expect("copies");
    let secret = p.console_session("dev@dev.local").await;
    let counts = state.local.store.clone().expect("sqlite");
    let http =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    let mut path = "/console/t/dev/p/default/runs".to_owned();
    for page in 1..=20 {
        let before = counts.counts().documents_read;
        let r = http
            .get(p.url(&path))
            .header("cookie", format!("mapi_console={secret}"))
            .send()
            .await
            .expect("page");
        assert_eq!(r.status(), 200, "page {page}");
        let body = r.text().await.expect("body");
        let read = counts.counts().documents_read - before;
        // 50 runs, and for each of the page's two API calls (the runs, the
        // project's saved views for the view picker) the session, the
        // caller's membership and the tenant, and no more.
        assert!(read <= 64, "page {page} read {read} documents");
        assert!(body.len() <= 200 * 1024, "page {page} is {} bytes", body.len());
        assert_eq!(body.matches("name=\"run\"").count(), 50, "page {page} lists 50 runs");
        let at = body.find("rel=\"next\"").expect("a next page");
        let start = body[..at].rfind("href=\"").expect("href") + 6;
        let end = start + body[start..].find('"').expect("end");
        path = format!("/console/t/dev/p/default/runs{}", body[start..end].replace("&amp;", "&"));
    }
}
