//! Helpers for the cross-crate suites in `tests/tests/`: where the built
//! binaries are, a platform started in-process on port 0 with a fresh
//! `MAPI_HOME`, and polling with a deadline (never a bare sleep).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use mapi_cli::dev::DevPlatform;
use mapi_executor::local::layout::Command;
use mapi_platform::Config;

/// A binary of this workspace, built by `cargo test --workspace` (the
/// packages that own them have integration tests, so cargo builds them).
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test> → target/<profile>/<name>
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{} is not built: run `cargo test --workspace` (or `cargo build --bins`)",
        path.display()
    );
    path
}

/// The worker command the local executor starts.
pub fn worker() -> Command {
    Command { program: binary("mapi-worker"), args: vec![] }
}

/// A configuration for a test platform in `home`, with `extra` settings.
pub fn config(home: &std::path::Path, extra: &[(&str, &str)]) -> Config {
    let mut vars: HashMap<String, String> = HashMap::new();
    vars.insert("MAPI_HOME".into(), home.to_string_lossy().into_owned());
    vars.insert("MAPI_SQLITE_SYNC".into(), "normal".into());
    vars.insert("MAPI_TICK_INTERVAL_S".into(), "1".into());
    vars.insert("MAPI_LOCAL_GRACE_S".into(), "2".into());
    vars.insert("MAPI_LOCAL_TIMEOUT_MARGIN_S".into(), "2".into());
    for (k, v) in extra {
        vars.insert((*k).into(), (*v).into());
    }
    Config::from_lookup(&|k| vars.get(k).cloned()).expect("test config")
}

/// A platform started in this process on 127.0.0.1:0.
#[derive(Debug)]
pub struct TestPlatform {
    pub platform: DevPlatform,
    pub http: reqwest::Client,
    pub _home: tempfile::TempDir,
}

impl TestPlatform {
    pub async fn start(extra: &[(&str, &str)]) -> TestPlatform {
        let home = tempfile::tempdir().expect("tempdir");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let platform =
            DevPlatform::start(config(home.path(), extra), listener, worker()).await.expect("start");
        TestPlatform { platform, http: reqwest::Client::new(), _home: home }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.platform.url)
    }

    pub fn token(&self) -> &str {
        &self.platform.credentials.token
    }

    pub fn project_path(&self) -> String {
        let c = &self.platform.credentials;
        format!("/v1/tenants/{}/projects/{}", c.tenant, c.project)
    }

    /// Uploads a CSV; returns the dataset id.
    pub async fn upload(&self, csv: &str) -> String {
        let resp = self
            .http
            .post(self.url(&format!("{}/datasets?name=test", self.project_path())))
            .bearer_auth(self.token())
            .header("content-type", "text/csv")
            .body(csv.to_owned())
            .send()
            .await
            .expect("upload");
        assert_eq!(resp.status(), 201, "upload failed: {:?}", resp.text().await);
        let v: serde_json::Value = resp.json().await.expect("json");
        v["id"].as_str().expect("dataset id").to_owned()
    }

    /// Submits a run; returns the run id.
    pub async fn submit(&self, body: serde_json::Value) -> String {
        let resp = self
            .http
            .post(self.url(&format!("{}/runs", self.project_path())))
            .bearer_auth(self.token())
            .json(&body)
            .send()
            .await
            .expect("submit");
        assert_eq!(resp.status(), 201, "submit failed: {:?}", resp.text().await);
        let v: serde_json::Value = resp.json().await.expect("json");
        v["id"].as_str().expect("run id").to_owned()
    }

    pub async fn run(&self, id: &str) -> serde_json::Value {
        let resp = self
            .http
            .get(self.url(&format!("/v1/runs/{id}")))
            .bearer_auth(self.token())
            .send()
            .await
            .expect("get");
        assert_eq!(resp.status(), 200);
        resp.json().await.expect("json")
    }

    /// Polls the run until `pred` holds (bounded by `limit`).
    pub async fn wait_run(
        &self,
        id: &str,
        limit: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + limit;
        loop {
            let r = self.run(id).await;
            if pred(&r) {
                return r;
            }
            assert!(Instant::now() < deadline, "run {id} did not reach the expected state: {r:#}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Polls until the run is in a final state.
    pub async fn wait_final(&self, id: &str) -> serde_json::Value {
        self.wait_run(id, Duration::from_secs(90), |r| {
            matches!(r["state"].as_str(), Some("succeeded" | "failed" | "partial" | "cancelled"))
        })
        .await
    }
}

/// The `(from, to, reason)` of every history entry.
pub fn transitions(run: &serde_json::Value) -> Vec<(String, String, String)> {
    run["history"]
        .as_array()
        .expect("history")
        .iter()
        .map(|t| {
            (
                t["from"].as_str().unwrap_or("·").to_owned(),
                t["to"].as_str().unwrap_or_default().to_owned(),
                t["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Writes the expected history compactly: `[("queued","dispatching","intent_written"), …]`.
pub fn path(steps: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    steps.iter().map(|(a, b, c)| ((*a).to_owned(), (*b).to_owned(), (*c).to_owned())).collect()
}
