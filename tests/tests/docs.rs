//! The documents stay true: the README's table of environment variables is
//! the one the code reads, `docs/openapi.json` is the document the platform
//! serves, and the route table (docs/routes.md) is the routers ([`routes`]).
//! `MAPI_UPDATE_DOCS=1 cargo test -p mapi-tests --test suites docs::` rewrites the
//! generated ones after a deliberate change.

#[path = "docs/routes.rs"]
mod routes;

use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn updating() -> bool {
    std::env::var("MAPI_UPDATE_DOCS").is_ok_and(|v| v == "1")
}

fn env_table() -> String {
    let mut t = String::from("| Variable | Default | Meaning |\n|---|---|---|\n");
    for row in mapi_settings::table_rows(mapi_platform::variables()) {
        t.push_str(&row);
        t.push('\n');
    }
    t
}

#[test]
fn readme_lists_every_environment_variable() {
    let path = root().join("README.md");
    let readme = std::fs::read_to_string(&path).expect("README.md");
    let (start, end) = ("<!-- env:start -->\n", "<!-- env:end -->");
    let i = readme.find(start).expect("README has the env:start marker") + start.len();
    let j = readme.find(end).expect("README has the env:end marker");
    let want = env_table();
    if updating() {
        std::fs::write(&path, format!("{}{want}{}", &readme[..i], &readme[j..])).expect("write README");
        return;
    }
    assert_eq!(&readme[i..j], want, "README's variable table is stale: run with MAPI_UPDATE_DOCS=1");
}

#[test]
fn openapi_document_matches_the_snapshot() {
    let path = root().join("docs/openapi.json");
    let doc = serde_json::to_string_pretty(&mapi_embedded::openapi()).expect("openapi json") + "\n";
    if updating() {
        std::fs::write(&path, &doc).expect("write openapi.json");
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(have == doc, "docs/openapi.json is stale: run with MAPI_UPDATE_DOCS=1 and review the diff");
}

#[test]
fn openapi_document_describes_the_runs_api() {
    let doc = serde_json::to_value(mapi_embedded::openapi()).expect("json");
    for path in [
        "/v1/tenants/{tenant}/projects/{project}/runs",
        "/v1/tenants/{tenant}/projects/{project}/datasets",
        "/v1/runs/{id}",
        "/v1/runs/{id}/cancel",
        "/v1/runs/{id}/logs",
        "/v1/tenants/{tenant}/projects/{project}/model-versions",
        "/v1/model-versions/{id}",
        "/v1/model-versions/{id}/urls",
        "/v1/methods",
        "/v1/methods/{name}",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} is missing from the OpenAPI document");
    }
    assert!(doc["components"]["schemas"]["Problem"].is_object());
    for scheme in ["session", "token"] {
        assert!(doc["components"]["securitySchemes"][scheme].is_object(), "{scheme}");
    }
}

#[test]
fn permissions_document_is_current() {
    let path = root().join("docs/permissions.md");
    let doc = mapi_access::permissions_markdown();
    if updating() {
        std::fs::write(&path, &doc).expect("write permissions.md");
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(have == doc, "docs/permissions.md is stale: run with MAPI_UPDATE_DOCS=1");
}

#[test]
fn every_error_the_document_states_is_a_problem_and_credentialed_routes_state_401_and_403() {
    let doc = serde_json::to_value(mapi_embedded::openapi()).expect("json");
    let (mut errors, mut bearer) = (0, 0);
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            let Some(responses) = op["responses"].as_object() else { continue };
            for (status, r) in responses.iter().filter(|(s, _)| s.as_str() >= "400") {
                errors += 1;
                // A shared response is named by reference.
                let r = match r["$ref"].as_str().and_then(|to| to.strip_prefix("#/components/responses/")) {
                    Some(name) => &doc["components"]["responses"][name],
                    None => r,
                };
                let types: Vec<&String> =
                    r["content"].as_object().map(|c| c.keys().collect()).unwrap_or_default();
                assert_eq!(types, ["application/problem+json"], "{method} {path} {status}");
                let schema = &r["content"]["application/problem+json"]["schema"]["$ref"];
                assert_eq!(schema, "#/components/schemas/Problem", "{method} {path} {status}");
            }
            if op["security"].as_array().is_some_and(|s| !s.is_empty()) {
                bearer += 1;
                for status in ["401", "403"] {
                    assert!(responses.contains_key(status), "{method} {path} states no {status}");
                }
            }
            if op.get("requestBody").is_some() {
                assert!(responses.contains_key("415"), "{method} {path} takes a body and states no 415");
            }
        }
    }
    assert!(errors > 300 && bearer > 90, "{errors} error responses, {bearer} bearer operations");
}

#[test]
fn page_sizes_and_limits_state_the_ranges_the_server_enforces() {
    let doc = serde_json::to_value(mapi_embedded::openapi()).expect("json");
    let mut seen = 0;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            for p in op["parameters"].as_array().into_iter().flatten() {
                let max = match (p["name"].as_str(), path.as_str()) {
                    (Some("limit"), "/v1/runs/{id}/logs") => mapi_executor::MAX_LOG_PAGE as u64,
                    (Some("page_size" | "limit"), _) => 200,
                    _ => continue,
                };
                seen += 1;
                let range = (p["schema"]["minimum"].as_u64(), p["schema"]["maximum"].as_u64());
                assert_eq!(range, (Some(1), Some(max)), "{method} {path} {}", p["name"]);
            }
        }
    }
    assert!(seen >= 12, "{seen} page sizes");
}

/// What each operation says it takes (a session only, or a session or an
/// API token) is what it does: with the platform's own admin token, an
/// operation for sessions only answers 403, and any other does not. Checked
/// on every operation without a body (a body is read before the decision),
/// with the dev tenant and project and well-formed ids of nothing.
#[tokio::test]
async fn each_operation_takes_the_credentials_the_document_says() {
    let p = mapi_tests::TestPlatform::start(&[]).await;
    let doc = serde_json::to_value(mapi_embedded::openapi()).expect("json");
    let nothing = |prefix: &str| format!("{prefix}{}", "0".repeat(26));
    let (mut sessions_only, mut either) = (0, 0);
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            let Some(security) = op["security"].as_array() else { continue };
            if op.get("requestBody").is_some() || security.is_empty() {
                continue;
            }
            let token_taken = security.iter().any(|r| r.get("token").is_some());
            let segments: Vec<&str> = path.split('/').collect();
            let concrete: Vec<String> = segments
                .iter()
                .enumerate()
                .map(|(i, s)| match *s {
                    "{tenant}" => "dev".to_owned(),
                    "{project}" => "default".to_owned(),
                    "{email}" => "nobody@dev.local".to_owned(),
                    "{idx}" => "0".to_owned(),
                    "{delivery}" => nothing("msg_"),
                    "{id}" => match segments[i - 1] {
                        "runs" => nothing("run_"),
                        "jobs" => nothing("job_"),
                        "datasets" => nothing("ds_"),
                        "webhooks" => nothing("wh_"),
                        "model-versions" => nothing("mv_"),
                        _ => "000000000000".to_owned(),
                    },
                    s if s.starts_with('{') => "x".to_owned(),
                    s => s.to_owned(),
                })
                .collect();
            let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
            let (status, body) = p.call(p.token(), m, &concrete.join("/"), None).await;
            if token_taken {
                either += 1;
                assert_ne!(status, 403, "{method} {path} says it takes a token, and refused one: {body}");
            } else {
                sessions_only += 1;
                assert_eq!(status, 403, "{method} {path} says it takes only a session; a token got: {body}");
            }
        }
    }
    assert!(sessions_only >= 15 && either >= 30, "{sessions_only} sessions-only, {either} either");
}

/// The words of one shell command line: whitespace splits, double and
/// single quotes group, and a command substitution `"$(…)"` stands for one
/// word (what it would print).
fn shell_words(line: &str) -> Vec<String> {
    let (mut words, mut word, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, '"' | '\'') => (quote, any) = (Some(c), true),
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '$') if chars.peek() == Some(&'(') => {
                let mut depth = 0;
                for c in chars.by_ref() {
                    match c {
                        '(' => depth += 1,
                        ')' if depth == 1 => break,
                        ')' => depth -= 1,
                        _ => {}
                    }
                }
                word.push_str("substituted");
            }
            (None, c) if c.is_whitespace() => {
                if any || !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                any = false;
            }
            (_, c) => word.push(c),
        }
    }
    if any || !word.is_empty() {
        words.push(word);
    }
    words
}

/// Every `mapi` line of the runbooks and of docs/retention.md is a command
/// the CLI takes: run with
/// no platform to reach, each gets past its argument parsing (a command
/// line the CLI refuses exits 2) and fails only for the platform missing.
#[test]
fn every_mapi_line_of_the_runbooks_is_a_command_the_cli_takes() {
    let dir = root().join("docs/runbooks");
    let mut checked = 0;
    let mut bad = Vec::new();
    let mut pages: Vec<_> =
        std::fs::read_dir(&dir).expect("docs/runbooks").map(|e| e.expect("entry").path()).collect();
    pages.sort();
    pages.push(root().join("docs/retention.md"));
    for page in pages {
        let text = std::fs::read_to_string(&page).expect("read");
        let mut in_block = false;
        for line in text.lines() {
            if line.starts_with("```") {
                in_block = !in_block;
                continue;
            }
            let Some(args) = line.strip_prefix("mapi ").filter(|_| in_block) else { continue };
            let home = tempfile::tempdir().expect("home");
            let out = std::process::Command::new(mapi_tests::binary("mapi"))
                .args(shell_words(args))
                .env("MAPI_URL", "http://127.0.0.1:9")
                .env("MAPI_TOKEN", "mapi_nothing_listens")
                .env("HOME", home.path())
                .env("XDG_CONFIG_HOME", home.path())
                .stdin(std::process::Stdio::null())
                .output()
                .expect("run mapi");
            checked += 1;
            if out.status.code() == Some(2) || out.status.code().is_none() {
                let name = page.file_name().unwrap_or_default().to_string_lossy().into_owned();
                bad.push(format!("{name}: `{line}`: {}", String::from_utf8_lossy(&out.stderr)));
            }
        }
    }
    assert!(checked >= 20, "the runbooks' commands were found ({checked})");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn shell_words_group_quotes_and_substitutions() {
    assert_eq!(
        shell_words(
            r#"login --id-token "$(gcloud auth print-identity-token)" --reason "incident 42: x" 'a b'"#
        ),
        ["login", "--id-token", "substituted", "--reason", "incident 42: x", "a b"]
    );
}
