//! Serving a model with Python: a plugin's `predict` (tenant code), run in a
//! gVisor sandbox the model server talks to over pipes, or one of the
//! platform's own Python methods' (in the same sandbox when the server has
//! one, else as a child process: it is the platform's code).
//!
//! The server has verified the bundle (its signed manifest pins the
//! serving descriptor, the model file and a plugin's package copy); from
//! those bytes alone it unpacks the package (checked whole by
//! `mapi_plugins::package::unpack`), or writes the platform's methods, into
//! a directory of its own and starts
//! `python3 -I -B -u mapi_plugin_serve.py` under `runsc` with no network,
//! an empty read-only root with the system directories, the package, the
//! model file and the serving program bound read-only, its own `/work` and
//! `/tmp` in the sandbox's memory, the unprivileged user and a process
//! limit: what the gvisor executor gives a plugin's run
//! (`mapi_executor::gvisor::Sandbox`). Nothing of the platform (its keys,
//! its home, the bundle's other files) is in the sandbox. A server with no
//! `runsc` (`MAPI_SERVE_RUNSC`) refuses to serve a plugin's model.
//!
//! One request at a time goes to the child: a line of rows in, a line of
//! values out, within [`PREDICT_TIMEOUT`]. A child that does not answer in
//! time, answers what is not a line of JSON, or exits, breaks the server:
//! the request gets a 503 and the server stops, so the host starts a fresh
//! one. What the plugin prints is logged on stderr, each line cut at
//! [`MAX_LINE`] bytes and [`LOG_LIMIT`] bytes in all.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use mapi_bundles::serving::{self, ServedCode, Serving};
use mapi_executor::gvisor::{Sandbox, run_command, task::MAX_PROCESSES};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::Mutex;

use crate::python::{PYTHON, SERVE};
/// Where the package, the model and the serving program are in the sandbox.
const CODE: &str = "/opt/plugin/code";
const MODEL_DIR: &str = "/opt/plugin/model";
const PROGRAM: &str = "/opt/plugin/platform/mapi_plugin_serve.py";

/// How long one request may take in `predict`.
pub const PREDICT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the model may take to load (import, read the model) before the server refuses to start.
pub const LOAD_TIMEOUT: Duration = Duration::from_secs(50);
/// The longest answer read from the child.
const MAX_ANSWER: u64 = 64 << 20;
/// The longest line of the plugin's output logged.
const MAX_LINE: usize = 8 << 10;
/// How much of the plugin's output is logged in all.
const LOG_LIMIT: usize = 4 << 20;

/// A Python model's files, verified, before its child starts.
#[derive(Debug)]
pub struct Prepared {
    pub serving: Serving,
    /// The `predict` entry (`module:function`).
    pub predict: String,
    dir: tempfile::TempDir,
}

impl Prepared {
    /// Whether the code is a tenant's: it then runs only in a sandbox.
    pub fn is_tenant_code(&self) -> bool {
        matches!(self.serving.code, ServedCode::Plugin { .. })
    }
}

/// Writes the code (a plugin's package, unpacked after its checks, or the
/// platform's methods), the model file and the serving program under a
/// directory of the server's own. `files` are the bundle's verified
/// artifacts by key; the error is the reason to refuse.
pub fn prepare(
    serving: Serving,
    files: &BTreeMap<String, Vec<u8>>,
    bundle: &str,
) -> Result<Prepared, String> {
    let model =
        files.get(&serving.model).ok_or_else(|| format!("the bundle has no model file {}", serving.model))?;
    let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
    let dir = tempfile::Builder::new().prefix("mapi-serve-").tempdir().map_err(|e| io("a directory", e))?;
    let (code, model_dir, platform) =
        (dir.path().join("code"), dir.path().join("model"), dir.path().join("platform"));
    for d in [&code, &model_dir, &platform] {
        std::fs::create_dir_all(d).map_err(|e| io("making the model's directories", e))?;
    }
    let predict = match &serving.code {
        ServedCode::Plugin { plugin, version, method, package_sha256 } => {
            let key = serving::key(bundle, serving::PACKAGE);
            let package = files.get(&key).ok_or_else(|| format!("the bundle has no package copy ({key})"))?;
            let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(package));
            if &digest != package_sha256 {
                return Err(format!("the package copy has SHA-256 {digest}, not {package_sha256}"));
            }
            let checked = mapi_plugins::package::unpack(package, &code)
                .map_err(|e| format!("the plugin's package: {e}"))?;
            let found = checked
                .manifest
                .method(method)
                .ok_or_else(|| format!("the plugin has no method {method}"))?;
            found
                .predict
                .clone()
                .ok_or_else(|| format!("method {method} of plugin {plugin} {version} has no predict entry"))?
        }
        ServedCode::Builtin { method } => {
            let predict = mapi_methods::find(method).and_then(|m| m.python).and_then(|p| p.predict);
            crate::python::write_methods(&code).map_err(|e| io("writing the methods", e))?;
            predict
                .ok_or_else(|| {
                    format!("method {method} is not a Python method with a predict in this server")
                })?
                .to_owned()
        }
    };
    std::fs::write(model_dir.join(model_file(&serving)), model).map_err(|e| io("writing the model", e))?;
    std::fs::write(platform.join("mapi_plugin_serve.py"), SERVE).map_err(|e| io("writing the server", e))?;
    // The sandbox's user (nobody) reads what is bound into it.
    readable(dir.path()).map_err(|e| io("opening the model's directory to the sandbox", e))?;
    Ok(Prepared { serving, predict, dir })
}

/// The model file's name in the sandbox: the output's own name, path-free.
fn model_file(serving: &Serving) -> String {
    let name = serving.model_name.rsplit('/').next().unwrap_or("model");
    if name.is_empty() || name.starts_with('.') { "model".to_owned() } else { name.to_owned() }
}

fn readable(path: &Path) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.is_dir() {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
        for entry in std::fs::read_dir(path)? {
            readable(&entry?.path())?;
        }
    } else if meta.is_file() {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))?;
    }
    Ok(())
}

/// The running child and its pipes.
#[derive(Debug)]
struct Running {
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    _child: Child,
}

/// A plugin model being served.
#[derive(Debug)]
pub struct PluginModel {
    pub serving: Serving,
    child: Mutex<Option<Running>>,
    /// `None`: the child is a process (killed when dropped), not a sandbox.
    runsc: Option<PathBuf>,
    container: String,
    prepared: Prepared,
}

/// Why a request was not answered with values.
#[derive(Debug, PartialEq)]
pub enum Refused {
    /// The rows are wrong (the plugin raised `ValueError`, `KeyError` or `TypeError`).
    Invalid(String),
    /// The model failed on these rows; the server goes on.
    Failed(String),
    /// The child is gone or hung: the server must stop.
    Broken(String),
}

impl PluginModel {
    /// Starts the child (in a sandbox under `runsc`, else as a process: the
    /// platform's code only, a plugin's is refused) and waits until the model
    /// loaded; the error is the reason to refuse to serve.
    pub async fn start(prepared: Prepared, runsc: Option<&Path>) -> Result<PluginModel, String> {
        if prepared.is_tenant_code() && runsc.is_none() {
            return Err(format!(
                "{} is a plugin's model, which runs only in a gVisor sandbox, and {} is not set",
                prepared.serving.method_name(),
                mapi_hosting::server_env::RUNSC
            ));
        }
        let root = prepared.dir.path();
        let model = format!("{}/{}", MODEL_DIR, model_file(&prepared.serving));
        let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
        let container = format!("mapi-serve-{}", std::process::id());
        let mut cmd = match runsc {
            Some(runsc) => {
                let env: BTreeMap<String, String> = [
                    ("PATH", "/usr/local/bin:/usr/bin:/bin"),
                    ("HOME", mapi_executor::gvisor::WORK),
                    ("MPLCONFIGDIR", "/tmp"),
                    ("MAPI_PLUGIN_DIR", CODE),
                    ("MAPI_PREDICT", prepared.predict.as_str()),
                    ("MAPI_MODEL", model.as_str()),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
                let sandbox = Sandbox {
                    args: [PYTHON, "-I", "-B", "-u", PROGRAM].map(str::to_owned).to_vec(),
                    env,
                    work: None,
                    read_only: vec![
                        (root.join("code"), PathBuf::from(CODE)),
                        (root.join("model"), PathBuf::from(MODEL_DIR)),
                        (root.join("platform"), PathBuf::from("/opt/plugin/platform")),
                    ],
                    max_processes: MAX_PROCESSES,
                };
                sandbox
                    .write_bundle(&root.join("bundle"))
                    .map_err(|e| io("writing the sandbox's bundle", e))?;
                let state = root.join("runsc");
                std::fs::create_dir_all(&state).map_err(|e| io("runsc's state", e))?;
                tokio::process::Command::from(run_command(runsc, &state, &root.join("bundle"), &container))
            }
            None => {
                let mut cmd = tokio::process::Command::new(PYTHON);
                cmd.args(["-I", "-B", "-u"])
                    .arg(root.join("platform/mapi_plugin_serve.py"))
                    .env_clear()
                    .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                    .env("HOME", root)
                    .env("MPLCONFIGDIR", root)
                    .env("MAPI_PLUGIN_DIR", root.join("code"))
                    .env("MAPI_PREDICT", &prepared.predict)
                    .env("MAPI_MODEL", root.join("model").join(model_file(&prepared.serving)));
                cmd
            }
        };
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        let program = runsc.map_or(Path::new(PYTHON), |r| r);
        let mut child = cmd.spawn().map_err(|e| io(&format!("starting {}", program.display()), e))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("the model process's pipes did not open".to_owned());
        };
        tokio::spawn(relay(stderr));
        let mut running = Running { stdin, stdout: BufReader::new(stdout), _child: child };
        let ready = tokio::time::timeout(LOAD_TIMEOUT, read_answer(&mut running.stdout)).await;
        let model = PluginModel {
            serving: prepared.serving.clone(),
            child: Mutex::new(Some(running)),
            runsc: runsc.map(Path::to_owned),
            container,
            prepared,
        };
        let refused = match ready {
            Err(_) => format!("the model did not load within {LOAD_TIMEOUT:?}"),
            Ok(Err(why)) => why,
            Ok(Ok(v)) if v.get("ready") == Some(&Value::Bool(true)) => return Ok(model),
            Ok(Ok(v)) => format!(
                "the model did not load: {}",
                v.get("error").and_then(Value::as_str).unwrap_or("it answered something else than ready")
            ),
        };
        model.stop();
        Err(refused)
    }

    /// The plugin's values for `rows`, one per row.
    pub async fn predict(&self, rows: &[Map<String, Value>]) -> Result<Vec<Value>, Refused> {
        let mut guard = self.child.lock().await;
        let Some(child) = guard.as_mut() else {
            return Err(Refused::Broken("the model's process stopped".to_owned()));
        };
        let mut line =
            serde_json::to_vec(&json!({"rows": rows})).map_err(|e| Refused::Failed(e.to_string()))?;
        line.push(b'\n');
        let asked = async {
            child.stdin.write_all(&line).await.map_err(|e| format!("the model's process stopped: {e}"))?;
            child.stdin.flush().await.map_err(|e| format!("the model's process stopped: {e}"))?;
            read_answer(&mut child.stdout).await
        };
        let answer = match tokio::time::timeout(PREDICT_TIMEOUT, asked).await {
            Ok(Ok(v)) => v,
            Ok(Err(why)) => return Err(self.broken(&mut guard, why)),
            Err(_) => {
                let why = format!("predict did not answer within {PREDICT_TIMEOUT:?}");
                return Err(self.broken(&mut guard, why));
            }
        };
        judge(answer, rows.len())
    }

    fn broken(&self, child: &mut Option<Running>, why: String) -> Refused {
        *child = None;
        self.stop();
        Refused::Broken(why)
    }

    /// Stops the sandbox (best effort: it may have exited); a process child ends when dropped.
    pub fn stop(&self) {
        let Some(runsc) = &self.runsc else { return };
        let state = self.prepared.dir.path().join("runsc");
        for args in [
            vec!["kill", "--all", self.container.as_str(), "KILL"],
            vec!["delete", "--force", self.container.as_str()],
        ] {
            let _ = mapi_executor::gvisor::runsc_command(runsc, &state)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// What one answer of the child means for a request of `rows` rows.
fn judge(answer: Value, rows: usize) -> Result<Vec<Value>, Refused> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    if let Some(v) = answer.get("invalid") {
        return Err(Refused::Invalid(text(v)));
    }
    if let Some(v) = answer.get("failed") {
        return Err(Refused::Failed(format!("the model's predict failed: {}", text(v))));
    }
    match answer.get("predictions").and_then(Value::as_array) {
        Some(values) if values.len() == rows => Ok(values.clone()),
        Some(values) => Err(Refused::Failed(format!(
            "the model's predict returned {} values for {rows} rows: it must return one per row",
            values.len()
        ))),
        None => {
            Err(Refused::Broken("the model's process answered something else than predictions".to_owned()))
        }
    }
}

/// Reads one line of JSON (at most [`MAX_ANSWER`] bytes) from the child.
async fn read_answer(stdout: &mut BufReader<ChildStdout>) -> Result<Value, String> {
    let mut line = Vec::new();
    let read = (&mut *stdout).take(MAX_ANSWER).read_until(b'\n', &mut line).await;
    match read {
        Ok(0) => Err("the model's process exited".to_owned()),
        Ok(_) if !line.ends_with(b"\n") => {
            Err(format!("the model's answer is longer than {MAX_ANSWER} bytes"))
        }
        Ok(_) => serde_json::from_slice(&line)
            .map_err(|_| "the model's process answered what is not JSON".to_owned()),
        Err(e) => Err(format!("reading the model's answer: {e}")),
    }
}

/// Logs what the plugin (and runsc) print, bounded.
async fn relay(stderr: tokio::process::ChildStderr) {
    let mut reader = BufReader::new(stderr);
    let mut logged = 0usize;
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader).take(MAX_LINE as u64).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if !line.ends_with(b"\n") {
            // The rest of a long line is not logged.
            let mut rest = Vec::new();
            let _ = reader.read_until(b'\n', &mut rest).await;
        }
        if logged >= LOG_LIMIT {
            continue;
        }
        logged += line.len();
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end();
        let message = if logged >= LOG_LIMIT {
            format!("plugin: {text} (the plugin's output past {LOG_LIMIT} bytes is not logged)")
        } else {
            format!("plugin: {text}")
        };
        eprintln!("{}", json!({"severity": "INFO", "message": message}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_judged_by_their_shape() {
        assert_eq!(judge(json!({"predictions": [1, "a"]}), 2), Ok(vec![json!(1), json!("a")]));
        assert_eq!(
            judge(json!({"invalid": "KeyError: 'x'"}), 1),
            Err(Refused::Invalid("KeyError: 'x'".into()))
        );
        assert!(matches!(judge(json!({"failed": "boom"}), 1), Err(Refused::Failed(m)) if m.contains("boom")));
        assert!(
            matches!(judge(json!({"predictions": [1]}), 2), Err(Refused::Failed(m)) if m.contains("one per row"))
        );
        assert!(matches!(judge(json!({"ready": true}), 1), Err(Refused::Broken(_))));
    }

    #[tokio::test]
    async fn a_plugins_model_never_starts_outside_a_sandbox() {
        let dir = tempfile::tempdir().expect("dir");
        let manifest = "name = \"p\"\nversion = \"1.0.0\"\nbase = \"base-ml\"\n\n[[methods]]\nname = \"m\"\n\
                        entry = \"code:fit\"\noutputs = [\"model.json\"]\nmodel = \"model.json\"\npredict = \"code:predict\"\n";
        std::fs::write(dir.path().join(mapi_plugins::manifest::FILE), manifest).expect("manifest");
        std::fs::write(
            dir.path().join("code.py"),
            "def fit(ctx):\n    pass\n\ndef predict(m, rows):\n    return rows\n",
        )
        .expect("code");
        let package = mapi_plugins::package::pack(dir.path()).expect("pack");
        let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&package));
        let serving = Serving {
            code: ServedCode::Plugin {
                plugin: "p".into(),
                version: "1.0.0".into(),
                method: "m".into(),
                package_sha256: sha,
            },
            model: "t/a/model.json".into(),
            model_name: "model.json".into(),
        };
        let files = BTreeMap::from([
            ("t/a/model.json".to_owned(), b"{}".to_vec()),
            (serving::key("t/a/bundle", serving::PACKAGE), package),
        ]);
        let prepared = prepare(serving, &files, "t/a/bundle").expect("prepared");
        assert!(prepared.is_tenant_code());
        let refused = PluginModel::start(prepared, None).await.expect_err("no sandbox, no start");
        assert!(refused.contains("runs only in a gVisor sandbox") && refused.contains("p.p.m"), "{refused}");
    }

    #[test]
    fn the_model_file_keeps_its_own_name_only() {
        let mut s = Serving {
            code: ServedCode::Builtin { method: "m".into() },
            model: "k".into(),
            model_name: "model.json".into(),
        };
        assert_eq!(model_file(&s), "model.json");
        s.model_name = "a/../../x.pkl".into();
        assert_eq!(model_file(&s), "x.pkl");
        s.model_name = "..".into();
        assert_eq!(model_file(&s), "model");
    }
}
