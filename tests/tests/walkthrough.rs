//! The README's walkthrough, through the `mapi` binary against a platform
//! started in this process: upload, submit with --watch, read the
//! coefficients, list, and the errors a person sees.

use std::process::Command;

use mapi_tests::{TestPlatform, binary};
use serde_json::Value;

fn mapi(p: &TestPlatform, args: &[&str]) -> (i32, String, String) {
    mapi_as(p, p.token(), args)
}

fn mapi_as(p: &TestPlatform, token: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(binary("mapi"))
        .args(args)
        .env("MAPI_URL", &p.platform.url)
        .env("MAPI_TOKEN", token)
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
    // `-o yaml` streams the log as one YAML sequence, not JSON lines.
    let (code, out, err) = mapi(&p, &["-o", "yaml", "runs", "logs", &run]);
    assert!(code == 0 && out.starts_with("- task: 0\n") && !out.contains("{\"task\""), "{out}{err}");
    assert!(out.lines().all(|l| l.starts_with("- ") || l.starts_with("  ")), "{out}");

    let (code, _, err) = mapi(&p, &["runs", "submit", "--method", "nope", "--dataset", &ds]);
    assert_eq!(code, 2, "not valid: {err}");
    assert!(err.contains("INVALID_ARGUMENT") && err.contains("unknown method `nope`"), "{err}");

    let (code, out, _) = mapi(&p, &["runs", "submit", "--method", "diag.fail", "--dataset", &ds, "--watch"]);
    assert_eq!(code, 1, "a failed run exits non-zero");
    assert!(out.contains("METHOD_ERROR"), "{out}");

    // The README's endpoint section: serve the version, score it, a bad row.
    let version = format!("mv_{}", &run["run_".len()..]);
    let (code, out, err) =
        mapi(&p, &["endpoints", "create", "employment", "--model-version", &version, "--wait"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.starts_with("endpoint employment  ready\n"), "{out}");
    assert!(
        out.contains(&format!("serves   {version} on cpu in europe-west4 (0…3 instances, private)")),
        "{out}"
    );
    let row = "gnp_deflator=100,gnp=400000,unemployed=3000,armed_forces=2500,population=117000,year=1955";
    let (code, out, err) = mapi(&p, &["endpoints", "score", "employment", "--std-errors", "--row", row]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("   0  ") && out.contains("  ± ") && out.ends_with("(revision r1)\n"), "{out}");
    let (code, _, err) = mapi(&p, &["endpoints", "score", "employment", "--row", "gnp=400000"]);
    assert_eq!(code, 2, "not valid: {err}");
    assert!(err.contains("row 0: column `gnp_deflator` is missing"), "{err}");
    let (code, out, _) = mapi(&p, &["endpoints", "ls"]);
    assert_eq!(code, 0);
    assert!(out.contains("employment") && out.contains("ready"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sets_a_tenants_job_retention_from_the_cli() {
    let p = TestPlatform::start(&[]).await;
    let operator = p.login("admin@dev.local").await;
    let set = |days: &str| {
        mapi_as(
            &p,
            &operator,
            &["--json", "admin", "quotas", "set", "tenant", "dev", "--job-retention-days", days, "--yes"],
        )
    };
    let (code, out, err) = set("3");
    assert_eq!(code, 0, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        (v["policy"]["job_retention_days"].as_u64(), v["job_retention_days"].as_u64()),
        (Some(3), Some(3)),
        "{v:#}"
    );
    let (code, out, err) = set("0");
    assert_ne!(code, 0, "0 days is refused: {out}");
    assert!(err.contains("job_retention_days must be at least 1"), "{err}");
}

/// `mapi api GET /openapi.json | head -1`: the reader goes away after one
/// line, and `mapi` ends quietly with 141 (128 + SIGPIPE) instead of a panic;
/// a typo'd subcommand gets a suggestion; an unreachable local platform
/// says to start `mapi dev`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_pipe_a_typo_and_a_stopped_platform_get_plain_answers() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let p = TestPlatform::start(&[]).await;
    let mut child = Command::new(binary("mapi"))
        .args(["api", "GET", "/openapi.json"])
        .env("MAPI_URL", &p.platform.url)
        .env("MAPI_TOKEN", p.token())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mapi");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut first).expect("a line");
    // The reader is dropped here: the pipe is closed with most of the document unread.
    assert_eq!(first.trim(), "{");
    let out =
        tokio::task::spawn_blocking(move || child.wait_with_output()).await.expect("join").expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(141), "{stderr}");

    let (code, out, err) = mapi(&p, &["runs", "ls"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "no runs yet: mapi runs submit --method describe --dataset ds_… --watch\n"),
        "{err}"
    );

    let (code, _, err) = mapi(&p, &["runs", "lst"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("similar subcommand") && err.contains("'ls'"), "{err}");

    let closed = format!("http://127.0.0.1:{}", mapi_tests::free_port());
    let out = Command::new(binary("mapi"))
        .args(["runs", "ls"])
        .env("MAPI_URL", &closed)
        .env("MAPI_TOKEN", "mapi_x")
        .env("MAPI_TENANT", "dev")
        .env("MAPI_PROJECT", "default")
        .output()
        .expect("run mapi");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "unavailable: {err}");
    assert!(err.contains("cannot reach the platform") && err.contains("is `mapi dev` running?"), "{err}");
    assert!(err.to_lowercase().contains("connection refused"), "the cause is said: {err}");

    // Each class of refusal has its exit code (`mapi --help` lists them).
    let (code, _, err) = mapi(&p, &["runs", "get", "run_01arz3ndektsv4rrffq69g5fav"]);
    assert_eq!(code, 3, "not found: {err}");
    let (code, _, err) = mapi(&p, &["runs", "submit", "--method", "describe", "--dataset", "nope!"]);
    assert_eq!(code, 2, "not valid: {err}");
    let out = Command::new(binary("mapi"))
        .args(["runs", "ls"])
        .env("MAPI_URL", &p.platform.url)
        .env("MAPI_TOKEN", "mapi_not_a_token")
        .env("MAPI_TENANT", "dev")
        .env("MAPI_PROJECT", "default")
        .output()
        .expect("run mapi");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "refused: {err}");
    assert!(err.contains("mapi login"), "a bad token says how to sign in again: {err}");
    let (code, help, _) = mapi(&p, &["--help"]);
    assert!(code == 0 && help.contains("3    not found") && help.contains("6    unavailable"), "{help}");
}

/// README lines that once failed as printed: the dry run's estimate, an
/// operator switching `mapi dev`'s executor off and on, cancelling a job
/// that already finished, and the method examples naming the shipped
/// dataset's columns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_lines_work_as_printed() {
    let p = TestPlatform::start(&[]).await;
    let csv = std::env::temp_dir().join(format!("longley-{}.csv", std::process::id()));
    std::fs::write(&csv, include_str!("../../examples/longley.csv")).expect("write");
    let (code, out, err) = mapi(&p, &["--json", "datasets", "upload", csv.to_str().expect("path")]);
    assert_eq!(code, 0, "{out}\n{err}");
    let ds: Value = serde_json::from_str(&out).expect("json");
    let ds = ds["id"].as_str().expect("id");
    let dry = [
        "runs",
        "submit",
        "--method",
        "tabular.linear",
        "--dataset",
        ds,
        "--param",
        "y=employed",
        "--class",
        "M",
        "--timeout",
        "600",
        "--dry-run",
    ];
    let (code, out, err) = mapi(&p, &dry);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("would be admitted; estimate 0.062400 USD at list prices (class M, timeout 600 s); nothing submitted"),
        "{out}"
    );

    let operator = p.login("admin@dev.local").await;
    // Without a terminal to ask on, a switch-off without --yes shows what it would do and does
    // nothing.
    let (code, _, err) =
        mapi_as(&p, &operator, &["admin", "executors", "disable", "local-process", "--reason", "INC-42"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("will take no new attempts") && err.contains("add --yes"), "{err}");
    let (_, listed, _) = mapi_as(&p, &operator, &["--json", "admin", "executors", "ls"]);
    assert!(!listed.contains("\"disabled\""), "nothing was switched off: {listed}");
    let switches: [&[&str]; 2] = [
        &["admin", "executors", "disable", "local-process", "--reason", "INC-42", "--yes"],
        &["admin", "executors", "enable", "local-process", "--reason", "INC-42 over"],
    ];
    for args in switches {
        let (code, out, err) = mapi_as(&p, &operator, args);
        assert_eq!(code, 0, "{args:?}: {out}\n{err}");
    }

    let items = std::env::temp_dir().join(format!("items-{}.jsonl", std::process::id()));
    std::fs::write(&items, "{\"text\": \"jumps\"}\n").expect("write");
    let (code, out, err) = mapi(
        &p,
        &["--json", "jobs", "submit", "text.stats", "--items", items.to_str().expect("path"), "--watch"],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let job: Value = serde_json::from_str(&out).expect("json");
    let (code, _, watched) =
        mapi(&p, &["jobs", "submit", "text.stats", "--items", items.to_str().expect("path"), "--watch"]);
    assert_eq!(code, 0, "{watched}");
    assert!(watched.contains("1/1 done (0 failed)"), "{watched:?}");
    assert!(!watched.contains('\r'), "no redrawn frames when stderr is not a terminal: {watched:?}");
    let (code, _, err) = mapi(&p, &["jobs", "cancel", job["id"].as_str().expect("id")]);
    assert_ne!(code, 0);
    assert!(err.contains("FAILED_PRECONDITION (409)"), "{err}");

    let (code, usage, err) = mapi(&p, &["api", "GET", "/v1/usage"]);
    assert_eq!(code, 0, "{err}");
    let header = include_str!("../../examples/longley.csv").lines().next().expect("header");
    for column in ["\"employed\"", "\"gnp\"", "\"population\""] {
        assert!(usage.contains(column), "the examples name {column}: {usage}");
        assert!(header.contains(column.trim_matches('"')), "{header}");
    }
    let _ = (std::fs::remove_file(csv), std::fs::remove_file(items));
}

/// `mapi dev --port --home` serve there and say so in the banner (with the
/// accounts, the API description and how to stop); human log lines when
/// asked; `--reset` starts from nothing, and refuses a directory that is not
/// a `mapi dev` home.
#[test]
fn mapi_dev_takes_its_port_and_home_prints_a_banner_and_resets() {
    use std::io::{BufRead, BufReader, Read};
    use std::process::Stdio;
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    let config = dir.path().join("config");
    let start = |port: u16, extra: &[&str]| {
        let mut child = Command::new(binary("mapi"))
            .args(["dev", "--port", &port.to_string(), "--home", home.to_str().expect("home")])
            .args(extra)
            .env("MAPI_WORKER_BIN", binary("mapi-worker"))
            .env("MAPI_LOG_FORMAT", "human")
            .env("MAPI_CONFIG_DIR", &config)
            .env_remove("MAPI_HOME")
            .env_remove("PORT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start mapi dev");
        let mut url = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut url).expect("its URL");
        let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        let mut err = String::new();
        child.stderr.take().expect("stderr").read_to_string(&mut err).expect("stderr");
        let status = child.wait().expect("wait");
        (port, url.trim().to_owned(), err, status)
    };
    let (port, url, err, status) = start(mapi_tests::free_port(), &[]);
    assert_eq!(url, format!("http://127.0.0.1:{port}"), "{err}");
    assert!(status.success(), "{err}");
    for shown in [
        format!("mapi dev is up at {url}"),
        format!("{url}/openapi.json"),
        "admin@dev.local, analyst@dev.local, viewer@dev.local, dev@dev.local".to_owned(),
        "signed in as dev@dev.local in dev/default".to_owned(),
        "Ctrl-C".to_owned(),
        "a line per event below".to_owned(),
    ] {
        assert!(err.contains(&shown), "the banner shows {shown}: {err}");
    }
    assert!(!err.contains("\"severity\""), "human lines, not JSON: {err}");
    assert!(home.join("mapi.db").is_file() && home.join("credentials.json").is_file());

    // The CLI's state is in the configuration directory: this platform is current, with the
    // home's token; a restart replaces nothing a person signed in with.
    let read = || -> Value {
        serde_json::from_slice(&std::fs::read(config.join("credentials.json")).expect("config"))
            .expect("json")
    };
    let own: Value =
        serde_json::from_slice(&std::fs::read(home.join("credentials.json")).expect("read")).expect("json");
    let saved = read();
    assert_eq!(saved["current"], url.as_str());
    assert_eq!(saved["platforms"][&url]["token"], own["token"], "{saved:#}");
    let mut signed_in = saved.clone();
    signed_in["platforms"][&url] =
        serde_json::json!({"token": "mapi_sess", "tenant": "acme", "project": "growth", "session": true});
    std::fs::write(config.join("credentials.json"), signed_in.to_string()).expect("write");

    let marker = home.join("objects").join("left-behind");
    std::fs::write(&marker, "x").expect("write");
    let (_, _, err, status) = start(port, &["--reset"]);
    assert!(status.success() && err.contains("reset"), "{err}");
    assert!(err.contains("your `mapi login` session here is kept"), "{err}");
    assert_eq!(read(), signed_in, "the session was not overwritten");
    assert!(!marker.exists(), "--reset removed the objects");
    assert!(home.join("mapi.db").is_file(), "and the platform started afresh");

    let (code, _, err) = {
        let out = Command::new(binary("mapi"))
            .args(["dev", "--home", dir.path().to_str().expect("dir"), "--reset"])
            .env("MAPI_LOG_FORMAT", "json")
            .output()
            .expect("run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("holds no mapi.db, so it is not a mapi dev home; nothing was deleted"), "{err}");
    assert!(home.exists(), "nothing was deleted");
}

/// `mapi runs update` names a run, `mapi runs retry --watch` runs it again
/// under that name, naming the run it retries, and `mapi runs compare` sets
/// the two side by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_named_and_retried_from_the_cli() {
    let p = TestPlatform::start(&[]).await;
    let dataset = p.upload("x,y\n1,2\n2,4\n3,7\n").await;
    let spec = serde_json::json!({"method": "tabular.linear", "dataset": dataset, "params": {"y": "y"}});
    let id = p.submit(spec).await;
    p.wait_final(&id).await;
    let (code, out, err) = mapi(&p, &["runs", "update", &id, "--name", "baseline", "--tags", "q3"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("baseline  tags: q3"), "{out}");
    let (code, out, err) = mapi(&p, &["--json", "runs", "retry", &id, "--watch"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let retried: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        (&retried["state"], &retried["retry_of"]),
        (&Value::from("succeeded"), &Value::from(id.as_str()))
    );
    assert_eq!((&retried["name"], &retried["tags"]), (&Value::from("baseline"), &serde_json::json!(["q3"])));
    let new = retried["id"].as_str().expect("id");
    let (code, out, err) = mapi(&p, &["runs", "compare", &id, new]);
    assert_eq!(code, 0, "{err}");
    for line in ["params.y", "metrics.r_squared", "state"] {
        assert!(
            out.lines().any(|l| l.split_whitespace().next() == Some(line)),
            "{line} alike in both: {out}"
        );
    }
    let other = p.submit(serde_json::json!({"method": "describe", "dataset": dataset})).await;
    p.wait_final(&other).await;
    let (code, out, err) = mapi(&p, &["--json", "runs", "compare", &id, new, &other]);
    assert_eq!(code, 0, "{err}");
    let c: Value = serde_json::from_str(&out).expect("json");
    let rows = c["rows"].as_array().expect("rows");
    let of = |field: &str| rows.iter().find(|r| r["field"] == field).cloned().unwrap_or_default();
    assert_eq!(of("method")["differs"], true, "{out}");
    assert_eq!(of("metrics.r_squared")["values"][2], Value::Null, "describe reports no r²: {out}");
    assert_eq!(of("dataset")["differs"], false, "{out}");
    let (code, _, err) = mapi(&p, &["runs", "compare", &id]);
    assert_ne!(code, 0, "one run is nothing to compare: {err}");
    let (code, _, err) = mapi(&p, &["runs", "retry", "run_01arz3ndektsv4rrffq69g5fav"]);
    assert_ne!(code, 0);
    assert!(err.contains("NOT_FOUND (404)"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_gathered_in_experiments_and_saved_views_from_the_cli() {
    let p = TestPlatform::start(&[]).await;
    let dataset = p.upload("x,y\n1,2\n2,4\n3,7\n").await;
    let fit = p
        .submit(serde_json::json!({"method": "tabular.linear", "dataset": dataset, "params": {"y": "y"}}))
        .await;
    let summary = p.submit(serde_json::json!({"method": "describe", "dataset": dataset})).await;
    let (code, out, err) =
        mapi(&p, &["experiments", "create", "deflator", "--description", "does it matter"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("experiment deflator made"), "{out}");
    let (code, out, err) = mapi(&p, &["runs", "update", &fit, "--experiment", "deflator", "--tags", "q3"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("experiment: deflator"), "{out}");
    let (code, _, err) = mapi(&p, &["runs", "update", &summary, "--experiment", "nowhere"]);
    assert_ne!(code, 0);
    assert!(err.contains("make it first"), "{err}");
    let (code, out, err) = mapi(&p, &["runs", "ls", "--experiment", "deflator"]);
    assert!(code == 0 && out.contains(&fit) && !out.contains(&summary), "{out}{err}");
    let (code, out, _) = mapi(&p, &["experiments", "ls"]);
    assert!(code == 0 && out.contains("deflator") && out.contains("does it matter"), "{out}");
    let (code, _, err) = mapi(&p, &["experiments", "rm", "deflator"]);
    assert_ne!(code, 0, "it holds a run");
    assert!(err.contains("still holds runs"), "{err}");

    let (code, out, err) = mapi(
        &p,
        &["runs", "views", "save", "q3-fits", "--tag", "q3", "--columns", "id,state,metrics.r_squared"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("view q3-fits saved"), "{out}");
    let (code, out, _) = mapi(&p, &["runs", "views", "ls"]);
    assert!(code == 0 && out.contains("tag=q3") && out.contains("metrics.r_squared"), "{out}");
    let (code, out, err) = mapi(&p, &["runs", "ls", "--view", "q3-fits"]);
    assert!(code == 0 && out.contains(&fit) && !out.contains(&summary), "{out}{err}");
    // YAML is the JSON document in its order: the run's id first.
    let (code, yaml, err) = mapi(&p, &["-o", "yaml", "runs", "get", &fit]);
    assert!(code == 0 && yaml.starts_with(&format!("id: {fit}\n")), "{yaml}{err}");
    let header = out.lines().next().unwrap_or_default();
    assert!(
        header.contains("STATE") && header.contains("metrics.r_squared") && !header.contains("METHOD"),
        "the view's columns head the table: {out}"
    );
    let log = serde_json::json!({"metrics": [{"name": "loss", "value": 0.25}]});
    let (s, b) = p.call(p.token(), reqwest::Method::POST, &format!("/v1/runs/{fit}/log"), Some(log)).await;
    assert_eq!(s, 200, "{b}");
    let (code, out, err) =
        mapi(&p, &["runs", "ls", "--columns", "method,metrics.loss", "--sort", "metrics.loss", "--desc"]);
    let first = out.lines().nth(1).unwrap_or_default();
    assert!(code == 0 && first.contains(&fit) && first.contains("0.25"), "sorted by the metric: {out}{err}");
    let (code, _, err) = mapi(&p, &["runs", "views", "save", "bad", "--columns", "cost"]);
    assert_ne!(code, 0);
    assert!(err.contains("is not a column"), "{err}");

    let (code, _, err) = mapi(&p, &["runs", "update", &fit, "--experiment", ""]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = mapi(&p, &["experiments", "rm", "deflator"]);
    assert!(code == 0 && out.contains("deleted experiment deflator"), "{out}{err}");
    let (code, out, err) = mapi(&p, &["runs", "views", "rm", "q3-fits"]);
    assert!(code == 0 && out.contains("deleted view q3-fits"), "{out}{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_made_read_replayed_rotated_and_deleted_from_the_cli() {
    let p = TestPlatform::start(&[("MAPI_WEBHOOKS_ALLOW_LOOPBACK", "true")]).await;
    let url = format!("http://127.0.0.1:{}/", mapi_tests::free_port());
    let (code, _, err) = mapi(&p, &["webhooks", "create", &url, "--events", "run.done"]);
    assert_eq!(code, 1);
    assert!(err.contains("run.done") && err.contains("run.succeeded"), "the valid names: {err}");
    let (code, out, err) = mapi(&p, &["webhooks", "create", &url, "--events", "run.succeeded,run.failed"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("signing secret (shown once, keep it): whsec_"), "{out}");
    let id = out.split_whitespace().nth(1).expect("the webhook's id").to_owned();
    let (code, out, _) = mapi(&p, &["webhooks", "ls"]);
    assert!(code == 0 && out.contains(&id) && out.contains("run.succeeded,run.failed"), "{out}");
    let (_, out, _) = mapi(&p, &["webhooks", "deliveries", &id]);
    assert_eq!(out.trim(), "nothing sent yet");

    let dataset = p.upload("x,y\n1,2\n2,4\n3,7\n").await;
    let run = p
        .submit(serde_json::json!({"method": "tabular.linear", "dataset": dataset, "params": {"y": "y"}}))
        .await;
    p.wait_final(&run).await;
    // Nothing listens at the URL: the message is logged as not answered.
    let started = std::time::Instant::now();
    let log = loop {
        let (code, out, err) = mapi(&p, &["--json", "webhooks", "deliveries", &id]);
        assert_eq!(code, 0, "{err}");
        let page: Value = serde_json::from_str(&out).expect("json");
        if page["deliveries"][0]["attempts"].as_array().is_some_and(|a| !a.is_empty()) {
            break page;
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(60), "an attempt: {page}");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    };
    let message = log["deliveries"][0]["id"].as_str().expect("message id").to_owned();
    let (_, out, _) = mapi(&p, &["webhooks", "deliveries", &id]);
    assert!(out.contains(&message) && out.contains("run.succeeded") && out.contains("no answer"), "{out}");
    let (code, out, err) = mapi(&p, &["webhooks", "replay", &id, &message]);
    assert_eq!(
        (code, out.trim()),
        (0, format!("message {message} will be sent again now").as_str()),
        "{err}"
    );
    let (code, out, _) = mapi(&p, &["webhooks", "rotate", &id]);
    assert!(code == 0 && out.contains("new signing secret (shown once): whsec_"), "{out}");
    let (code, out, _) = mapi(&p, &["--json", "webhooks", "update", &id, "--disable"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(serde_json::from_str::<Value>(&out).expect("json")["enabled"], false);
    let (code, out, _) = mapi(&p, &["webhooks", "rm", &id]);
    assert_eq!((code, out.trim()), (0, format!("deleted {id}").as_str()));
    let (code, _, err) = mapi(&p, &["webhooks", "deliveries", &id]);
    assert_eq!(code, 3, "not found: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dataset_is_downloaded_from_the_cli() {
    let p = TestPlatform::start(&[]).await;
    let csv = "x,y\n1,2\n2,4\n3,7\n";
    let id = p.upload(csv).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("copy.csv");
    let target = file.to_str().expect("path");
    let (code, out, err) = mapi(&p, &["datasets", "download", &id, "--to", target]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with(&format!("wrote {target}")), "{out}");
    assert_eq!(std::fs::read_to_string(&file).expect("the file"), csv);
    let (code, _, err) = mapi(&p, &["datasets", "download", &id, "--to", target]);
    assert_eq!(code, 1);
    assert!(err.contains("exists") && err.contains("--force"), "{err}");
    assert_eq!(mapi(&p, &["datasets", "download", &id, "--to", target, "--force"]).0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_logged_and_compared_from_the_cli() {
    let p = TestPlatform::start(&[]).await;
    let dataset = p.upload("x,y\n1,2\n2,4\n3,7\n").await;
    let spec = serde_json::json!({"method": "tabular.linear", "dataset": dataset, "params": {"y": "y"}});
    let (a, b) = (p.submit(spec.clone()).await, p.submit(spec).await);
    let args = [
        "runs",
        "log",
        &a,
        "--metric",
        "val/loss=0.25",
        "--metric",
        "epochs=3",
        "--step",
        "5",
        "--param",
        "seed=7",
    ];
    let (code, out, err) = mapi(&p, &args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.trim(),
        format!("logged to {a}: 2 points in 2 metrics (epochs=3, val/loss=0.25), 1 params")
    );
    let (code, _, err) = mapi(&p, &["runs", "log", &b, "--metric", "val/loss=low"]);
    assert_eq!(code, 1);
    assert!(err.contains("must be a number"), "{err}");
    assert_eq!(mapi(&p, &["runs", "log", &b, "--metric", "val/loss=0.5"]).0, 0);
    let (code, out, err) = mapi(&p, &["--json", "runs", "compare", &a, &b]);
    assert_eq!(code, 0, "{err}");
    let c: Value = serde_json::from_str(&out).expect("json");
    let row = |field: &str| c["rows"].as_array().expect("rows").iter().find(|r| r["field"] == field).cloned();
    let loss = row("metrics.val/loss").expect("the logged metric is compared");
    assert_eq!(loss["differs"], true, "{loss}");
    assert!(row("params.seed").is_some(), "the logged param is compared: {c}");
}
