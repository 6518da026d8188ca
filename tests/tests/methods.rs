//! The method registry over HTTP and through the `mapi` binary, against
//! the platform started in this process: `GET /v1/methods` lists every
//! registered method as the registry describes it (parameters, outputs,
//! whether it fits a model, an example that validates), `GET
//! /v1/methods/{name}` shows one, an unknown name is a 404 naming every
//! method, and neither answers without a credential; `mapi methods ls|show`
//! print the same, and the example `show` prints runs as printed.

use std::collections::BTreeMap;
use std::path::Path;

use mapi_methods::{Input, MethodSpec};
use mapi_tests::{TestPlatform, binary};
use reqwest::Method;
use serde_json::{Value, json};

const LONGLEY: &str = include_str!("../../examples/longley.csv");

fn input(spec: &MethodSpec) -> &'static str {
    match spec.input {
        Input::Dataset => "dataset",
        Input::Item => "item",
    }
}

/// The registry's JSON literal, parsed.
fn literal(text: &str) -> Value {
    serde_json::from_str(text).expect("the registry's literals are JSON")
}

/// The view `GET /v1/methods` gave of `spec` says what the registry says.
fn check_view(v: &Value, spec: &MethodSpec) {
    let name = spec.name;
    assert_eq!(v["name"], name);
    assert_eq!(v["input"], input(spec), "{name}");
    assert_eq!(v["summary"], spec.summary, "{name}");
    assert_eq!(v["produces_model"], spec.produces_model(), "{name}");
    assert_eq!(v["model_file"], spec.model.map_or(Value::Null, |m| json!(m.file)), "{name}");
    let params = v["params"].as_array().expect("params");
    assert_eq!(params.len(), spec.params.len(), "{name}");
    for (p, want) in params.iter().zip(spec.params) {
        assert_eq!(p["name"], want.name, "{name}");
        assert_eq!(p["kind"], serde_json::to_value(want.kind).expect("kind"), "{name}.{}", want.name);
        assert_eq!(p["required"], want.required, "{name}.{}", want.name);
        assert_eq!(p["default"], want.default.map_or(Value::Null, literal), "{name}.{}", want.name);
        assert_eq!((p["min"].as_f64(), p["max"].as_f64()), (want.min, want.max), "{name}.{}", want.name);
        assert_eq!(p["description"], want.doc, "{name}.{}", want.name);
    }
    let outputs: Vec<&str> =
        v["outputs"].as_array().expect("outputs").iter().filter_map(|o| o["name"].as_str()).collect();
    assert_eq!(outputs, spec.outputs.iter().map(|o| o.name).collect::<Vec<_>>(), "{name}");
    let example: BTreeMap<String, Value> =
        serde_json::from_value(v["example"]["params"].clone()).expect("example params");
    assert!(mapi_methods::validate(spec, &example).is_ok(), "{name}: the example validates");
    assert_eq!(v["example"]["item"], spec.example_item.map_or(Value::Null, literal), "{name}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_routes_show_the_live_registry_and_name_every_method_for_an_unknown_one() {
    let p = TestPlatform::start(&[]).await;
    let (s, list) = p.call(p.token(), Method::GET, "/v1/methods", None).await;
    assert_eq!(s, 200, "{list}");
    assert_eq!(list["registry_version"], mapi_methods::registry_version());
    let views = list["methods"].as_array().expect("methods");
    let names: Vec<&str> = views.iter().filter_map(|m| m["name"].as_str()).collect();
    assert_eq!(names, mapi_methods::all().iter().map(|m| m.name).collect::<Vec<_>>());
    for (v, spec) in views.iter().zip(mapi_methods::all()) {
        check_view(v, spec);
        let (s, one) = p.call(p.token(), Method::GET, &format!("/v1/methods/{}", spec.name), None).await;
        assert_eq!((s, &one), (200, v), "GET /v1/methods/{} is its entry in the list", spec.name);
    }
    let models: Vec<&str> =
        views.iter().filter(|m| m["produces_model"] == true).filter_map(|m| m["name"].as_str()).collect();
    assert!(models.contains(&"tabular.linear") && !models.contains(&"describe"), "{models:?}");

    let long = "x".repeat(300);
    for unknown in ["tabular.nope", "Describe", long.as_str()] {
        let (s, body) = p.call(p.token(), Method::GET, &format!("/v1/methods/{unknown}"), None).await;
        assert_eq!((s, body["code"].as_str()), (404, Some("NOT_FOUND")), "{body}");
        let detail = body["detail"].as_str().expect("detail");
        for name in &names {
            assert!(detail.contains(&format!("`{name}`")), "{unknown}: {detail}");
        }
        assert!(detail.len() < 600, "a long name is not repeated whole: {detail}");
    }
    for path in ["/v1/methods", "/v1/methods/describe"] {
        let resp = p.http.get(p.url(path)).send().await.expect("anonymous");
        assert_eq!(resp.status(), 401, "{path} needs a credential");
    }

    // `GET /v1/usage` says the same of each method's model.
    let usage = p.http.get(p.url("/v1/usage")).send().await.expect("usage").text().await.expect("text");
    for spec in mapi_methods::all() {
        let section = usage
            .split("\n## ")
            .find(|s| s.starts_with(&format!("{} (", spec.name)))
            .unwrap_or_else(|| panic!("{} is in the usage text", spec.name));
        let says = section.contains("\nModel: yes");
        assert_eq!(says, spec.produces_model(), "{}: {section}", spec.name);
    }
}

/// Runs `mapi` with `args` in `cwd` against `p`; status, stdout, stderr.
async fn mapi(p: &TestPlatform, cwd: &Path, args: &[&str]) -> (i32, String, String) {
    let mut c = tokio::process::Command::new(binary("mapi"));
    c.args(args).current_dir(cwd);
    sh_env(&mut c, p, cwd);
    let out = c.output().await.expect("run mapi");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// The environment `mapi` reads, with the built `mapi` first on `PATH`.
fn sh_env(c: &mut tokio::process::Command, p: &TestPlatform, home: &Path) {
    let bin = binary("mapi");
    let dir = bin.parent().expect("bin dir");
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    c.env("PATH", path)
        .env("MAPI_URL", &p.platform.url)
        .env("MAPI_TOKEN", p.token())
        .env("MAPI_TENANT", "dev")
        .env("MAPI_PROJECT", "default")
        .env("MAPI_HOME", home);
}

/// Runs `script` with `sh` in `cwd`, as a person pastes it.
async fn sh(p: &TestPlatform, cwd: &Path, script: &str, dataset: &str) -> (i32, String, String) {
    let mut c = tokio::process::Command::new("sh");
    c.args(["-c", script]).current_dir(cwd).env("DATASET", dataset);
    sh_env(&mut c, p, cwd);
    let out = c.output().await.expect("run sh");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// The lines of `show`'s output under its `example` heading.
fn example_of(shown: &str) -> String {
    let (_, rest) = shown.split_once("\nexample").expect("an example section");
    let lines: Vec<&str> = rest.lines().skip(1).map(str::trim).collect();
    lines.join("\n")
}

fn row_words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_lists_and_shows_methods_and_their_examples_run_as_printed() {
    let p = TestPlatform::start(&[]).await;
    let cwd = tempfile::tempdir().expect("tempdir");
    let cwd = cwd.path();
    let (code, out, err) = mapi(&p, cwd, &["methods", "ls"]).await;
    assert_eq!(code, 0, "{err}");
    let mut lines = out.lines();
    assert_eq!(row_words(lines.next().expect("header")), ["NAME", "INPUT", "MODEL", "SUMMARY"]);
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), mapi_methods::all().len(), "{out}");
    for (row, spec) in rows.iter().zip(mapi_methods::all()) {
        let words = row_words(row);
        let model = if spec.produces_model() { "yes" } else { "no" };
        assert_eq!(words[..3], [spec.name, input(spec), model], "{row}");
        let start: String = spec.summary.chars().take(40).collect();
        assert!(row.contains(&start), "{row}");
    }
    let (_, api) = p.call(p.token(), Method::GET, "/v1/methods", None).await;
    let (code, out, err) = mapi(&p, cwd, &["--json", "methods", "ls"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).expect("JSON"), api, "--json is the API's JSON");

    let spec = mapi_methods::find("tabular.linear").expect("linear");
    let (code, shown, err) = mapi(&p, cwd, &["methods", "show", spec.name]).await;
    assert_eq!(code, 0, "{err}");
    assert!(shown.contains("\nmodel  yes") && shown.contains("model.json (application/json): "), "{shown}");
    let table: Vec<&str> = shown.lines().skip_while(|l| *l != "parameters").skip(1).collect();
    assert_eq!(row_words(table[0]), ["NAME", "KIND", "REQUIRED", "DEFAULT", "DESCRIPTION"], "{shown}");
    for (line, param) in table[1..].iter().zip(spec.params) {
        let required = if param.required { "yes" } else { "no" };
        let default = param.default.map_or("-".to_owned(), |d| literal(d).to_string());
        let kind = serde_json::to_value(param.kind).expect("kind");
        assert_eq!(
            row_words(line)[..4],
            [param.name, kind.as_str().expect("kind"), required, default.as_str()],
            "{shown}"
        );
    }
    let ds = p.upload(LONGLEY).await;
    let example = example_of(&shown);
    assert!(example.starts_with("mapi runs submit --method tabular.linear --dataset"), "{example}");
    let (code, out, err) = sh(&p, cwd, &example, &ds).await;
    assert_eq!(code, 0, "{example}\n{out}\n{err}");
    assert!(out.contains("state     succeeded") && out.contains("\nmodel     mv_"), "{out}");
    let run = out.lines().next().and_then(|l| l.strip_prefix("run       ")).expect("run line").trim();
    let want = mapi_methods::validate(spec, &serde_json::from_str(spec.example).expect("example"))
        .expect("the example validates");
    assert_eq!(
        p.run(run).await["params"],
        serde_json::to_value(want).expect("params"),
        "the example's params"
    );

    // An item method's example writes its item and submits a job.
    let (code, shown, err) = mapi(&p, cwd, &["methods", "show", "text.stats"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(shown.contains("\nmodel  no"), "{shown}");
    let example = example_of(&shown);
    assert!(example.contains("> items.jsonl\nmapi jobs submit text.stats --items items.jsonl"), "{example}");
    let (code, out, err) = sh(&p, cwd, &example, &ds).await;
    assert_eq!(code, 0, "{example}\n{out}\n{err}");
    assert!(err.contains("1/1 done (0 failed)"), "{out}\n{err}");
    let written = std::fs::read_to_string(cwd.join("items.jsonl")).expect("items.jsonl");
    let item = spec_item("text.stats");
    assert_eq!(serde_json::from_str::<Value>(written.trim()).expect("an item"), item);

    let (code, out, err) = mapi(&p, cwd, &["--json", "methods", "show", "describe"]).await;
    assert_eq!(code, 0, "{err}");
    let (_, one) = p.call(p.token(), Method::GET, "/v1/methods/describe", None).await;
    assert_eq!(serde_json::from_str::<Value>(&out).expect("JSON"), one);

    let (code, _, err) = mapi(&p, cwd, &["methods", "show", "tabular.nope"]).await;
    assert_eq!(code, 3, "not found: {err}");
    assert!(err.contains("NOT_FOUND (404)") && err.contains("`tabular.linear`"), "{err}");
    let (code, _, err) = mapi(&p, cwd, &["methods", "show", "../usage"]).await;
    assert_eq!(code, 3, "not found: {err}");
    assert!(err.contains("NOT_FOUND (404)") && err.contains("no method `../usage`"), "{err}");
}

fn spec_item(name: &str) -> Value {
    let spec = mapi_methods::find(name).expect("method");
    literal(spec.example_item.expect("an item method"))
}
