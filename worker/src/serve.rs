//! `mapi-worker serve`: the model server of an endpoint's revision.
//!
//! Before it listens, it verifies the model version it is told to serve
//! (see `mapi_hosting::server_env`): the manifest's signature under the
//! trusted keys, that the manifest is the one pinned by its SHA-256, and
//! every artifact's size and SHA-256. Anything else and it refuses to start,
//! printing the reason as its last line and exiting 78 (configuration
//! error), so the host reports the revision failed with that reason.
//!
//! Then it serves on `PORT`:
//! - `GET /health`: the revision, the method and the model's inputs;
//! - `POST /predict` `{"rows": [{column: number, …}, …], "std_errors": bool}`:
//!   `{"predictions": [{"value": …, "std_error": …}], "revision": …}`; a row
//!   with a missing, extra or non-numeric column is a 400 problem naming it.
//!
//! A model version served by Python (its bundle holds a serving descriptor,
//! `mapi_bundles::serving`: a plugin's, or one of the platform's Python
//! methods') is served by the code's own `predict` ([`crate::serve_plugin`];
//! a plugin's only in a sandbox): the same routes, values as the code
//! returns them, no standard errors.
//!
//! SIGTERM (or SIGINT) stops accepting, finishes the requests in flight and exits 0.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use mapi_api::problem::{NOT_JSON, Problem, ProblemCode, is_json};
use mapi_bundles::Key as ObjectKey;
use mapi_hosting::server_env as env;
use mapi_methods::predict::{Model, PredictError};
use mapi_signer::{PublicKey, TrustedKeys};
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// The most rows one request may score.
pub const MAX_ROWS: usize = 10_000;
/// The largest body read.
const MAX_BODY: usize = 8 << 20;

/// Exit code of a server that refused to start (EX_CONFIG).
pub const REFUSED: i32 = 78;

/// What the server serves, verified.
#[derive(Debug)]
pub struct Loaded {
    pub model: Served,
    pub revision: String,
    pub manifest_sha256: String,
}

/// A built-in method's model, or a plugin's.
#[derive(Debug)]
pub enum Served {
    Builtin(Model),
    /// Served by Python: verified and written out; its child starts once the runtime runs.
    Python(crate::serve_plugin::Prepared),
    Running(Box<crate::serve_plugin::PluginModel>),
}

impl Served {
    fn describe(&self) -> Value {
        match self {
            Served::Builtin(m) => {
                json!({"method": m.method(), "predicts": m.response(), "inputs": m.inputs()})
            }
            Served::Python(prepared) => Self::python(&prepared.serving),
            Served::Running(running) => Self::python(&running.serving),
        }
    }

    fn python(s: &mapi_bundles::serving::Serving) -> Value {
        match &s.code {
            mapi_bundles::serving::ServedCode::Plugin { plugin, version, package_sha256, .. } => json!({
                "method": s.method_name(),
                "plugin": {"name": plugin, "version": version, "sha256": package_sha256},
            }),
            mapi_bundles::serving::ServedCode::Builtin { .. } => json!({"method": s.method_name()}),
        }
    }
}

/// Where to find the bundle and what it must be.
#[derive(Debug, Clone)]
pub struct Source {
    pub objects: PathBuf,
    pub bundle: String,
    pub manifest_sha256: String,
    pub trusted_keys: String,
    pub revision: String,
    /// The `runsc` a plugin's model runs under (`MAPI_SERVE_RUNSC`); without one a plugin's model is refused.
    pub runsc: Option<PathBuf>,
}

impl Source {
    /// From the environment the host sets.
    pub fn from_env() -> Result<Source, String> {
        let var = |name: &str| std::env::var(name).map_err(|_| format!("{name} is not set"));
        Ok(Source {
            objects: PathBuf::from(var(env::OBJECTS)?),
            bundle: var(env::BUNDLE)?,
            manifest_sha256: var(env::MANIFEST_SHA256)?,
            trusted_keys: var(env::TRUSTED_KEYS)?,
            revision: std::env::var(env::REVISION).unwrap_or_else(|_| "unnamed".into()),
            runsc: std::env::var_os(env::RUNSC).filter(|v| !v.is_empty()).map(PathBuf::from),
        })
    }
}

fn file_of(root: &Path, key: &ObjectKey) -> PathBuf {
    root.join(key.as_str())
}

/// Verifies the bundle and loads its model; the error is the reason to refuse.
pub fn load(source: &Source) -> Result<Loaded, String> {
    let prefix =
        ObjectKey::parse(&source.bundle).map_err(|e| format!("{} is not an object key: {e}", env::BUNDLE))?;
    let keys: Vec<PublicKey> = serde_json::from_str(&source.trusted_keys)
        .map_err(|_| format!("{} is not a JSON list of public keys", env::TRUSTED_KEYS))?;
    let keys = TrustedKeys::import(&keys).map_err(|e| format!("{}: {e}", env::TRUSTED_KEYS))?;
    let read = |key: &ObjectKey| {
        let path = file_of(&source.objects, key);
        std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))
    };
    let [manifest_key, signature_key] = mapi_bundles::manifest_keys(&prefix).map_err(|e| e.to_string())?;
    let manifest = read(&manifest_key)?;
    let signature = read(&signature_key)?;
    let artifacts =
        mapi_bundles::verify_copy(&prefix, &manifest, &signature, &source.manifest_sha256, &keys, |k| {
            read(k)
        })
        .map_err(|e| e.to_string())?;
    let descriptor = mapi_bundles::serving::key(prefix.as_str(), mapi_bundles::serving::DESCRIPTOR);
    let model = match artifacts.iter().find(|(a, _)| a.key.as_str() == descriptor) {
        Some((_, bytes)) => python_model(&prefix, bytes, &artifacts)?,
        None => {
            let (_, model) =
                artifacts.iter().find(|(a, _)| a.key.as_str().ends_with("/model.json")).ok_or_else(|| {
                    format!("bundle {prefix} has no model.json: its method makes no servable model")
                })?;
            Served::Builtin(Model::load(model).map_err(|e| e.to_string())?)
        }
    };
    Ok(Loaded { model, revision: source.revision.clone(), manifest_sha256: source.manifest_sha256.clone() })
}

/// A model served by Python from its verified bundle (a plugin's starts only in a sandbox:
/// `PluginModel::start`).
fn python_model(
    prefix: &ObjectKey,
    descriptor: &[u8],
    artifacts: &[(mapi_bundles::Artifact, Vec<u8>)],
) -> Result<Served, String> {
    let serving = mapi_bundles::serving::Serving::from_bytes(descriptor)?;
    let files = artifacts.iter().map(|(a, b)| (a.key.to_string(), b.clone())).collect();
    Ok(Served::Python(crate::serve_plugin::prepare(serving, &files, prefix.as_str())?))
}

/// The server's routes over a loaded model.
pub fn router(loaded: Arc<Loaded>) -> Router {
    Router::new()
        .route(env::HEALTH_PATH, get(health))
        .route(env::PREDICT_PATH, post(predict))
        .fallback(|| async {
            problem(ProblemCode::NotFound, "the model server serves GET /health and POST /predict")
        })
        .with_state(loaded)
}

async fn health(State(m): State<Arc<Loaded>>) -> Response {
    let mut body = json!({"status": "ok", "revision": m.revision, "manifest_sha256": m.manifest_sha256});
    if let (Some(b), Value::Object(about)) = (body.as_object_mut(), m.model.describe()) {
        b.extend(about);
    }
    axum::Json(body).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PredictBody {
    #[serde(deserialize_with = "mapi_domain::unique::objects")]
    rows: Vec<Map<String, Value>>,
    #[serde(default)]
    std_errors: bool,
}

async fn predict(State(m): State<Arc<Loaded>>, headers: HeaderMap, body: Bytes) -> Response {
    if !is_json(&headers) {
        return problem(ProblemCode::UnsupportedMediaType, NOT_JSON);
    }
    if body.len() > MAX_BODY {
        return problem(
            ProblemCode::PayloadTooLarge,
            format!("send at most {} MiB per request", MAX_BODY >> 20),
        );
    }
    let Ok(req) = serde_json::from_slice::<PredictBody>(&body) else {
        return problem(
            ProblemCode::InvalidArgument,
            "send {\"rows\": [{column: number, …}, …]} with an optional \"std_errors\": true",
        );
    };
    if req.rows.is_empty() || req.rows.len() > MAX_ROWS {
        return problem(
            ProblemCode::InvalidArgument,
            format!("send 1 to {MAX_ROWS} rows, not {}", req.rows.len()),
        );
    }
    let model = match &m.model {
        Served::Builtin(model) => model,
        Served::Running(plugin) => return plugin_predict(&m, plugin, &req).await,
        Served::Python(_) => return problem(ProblemCode::Unavailable, "the model is still loading"),
    };
    match model.predict(&req.rows, req.std_errors) {
        Ok(predictions) => {
            let predictions: Vec<Value> = predictions
                .iter()
                .map(|p| match p.std_error {
                    Some(se) => json!({"value": p.value, "std_error": se}),
                    None => json!({"value": p.value}),
                })
                .collect();
            axum::Json(json!({"predictions": predictions, "revision": m.revision})).into_response()
        }
        Err(PredictError::Input(detail) | PredictError::Model(detail)) => {
            problem(ProblemCode::InvalidArgument, detail)
        }
    }
}

/// A plugin model's answer; a broken child stops the server (the host starts a fresh one).
async fn plugin_predict(
    m: &Loaded,
    plugin: &crate::serve_plugin::PluginModel,
    req: &PredictBody,
) -> Response {
    use crate::serve_plugin::Refused;
    if req.std_errors {
        return problem(
            ProblemCode::InvalidArgument,
            "a plugin's model gives values only: leave out std_errors",
        );
    }
    match plugin.predict(&req.rows).await {
        Ok(values) => {
            let predictions: Vec<Value> = values.into_iter().map(|v| json!({"value": v})).collect();
            axum::Json(json!({"predictions": predictions, "revision": m.revision})).into_response()
        }
        Err(Refused::Invalid(detail)) => problem(ProblemCode::InvalidArgument, detail),
        Err(Refused::Failed(detail)) => problem(ProblemCode::Internal, detail),
        Err(Refused::Broken(detail)) => {
            say("ERROR", &format!("stopping: {detail}"));
            BROKEN.notify_one();
            problem(ProblemCode::Unavailable, format!("{detail}; retry"))
        }
    }
}

/// Told when a plugin model's process broke: the server stops.
static BROKEN: tokio::sync::Notify = tokio::sync::Notify::const_new();

fn problem(code: ProblemCode, detail: impl Into<String>) -> Response {
    let body = serde_json::to_vec(&Problem::new(code, detail)).unwrap_or_default();
    let status = StatusCode::from_u16(code.status().as_u16()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, [(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"))], body)
        .into_response()
}

fn say(level: &str, message: &str) {
    eprintln!("{}", json!({"severity": level, "message": message}));
}

/// `mapi-worker serve`: verify, then serve until SIGTERM. Returns the exit code.
pub fn main() -> i32 {
    let source = Source::from_env();
    let loaded = match source.clone().and_then(|s| load(&s)) {
        Ok(l) => l,
        Err(reason) => {
            say("ERROR", &format!("refusing to serve: {reason}"));
            return REFUSED;
        }
    };
    let port: u16 = match std::env::var(env::PORT).map(|p| p.parse()) {
        Ok(Ok(p)) => p,
        _ => {
            say("ERROR", "refusing to serve: PORT is not set to a port number");
            return REFUSED;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            say("ERROR", &format!("cannot start the runtime: {e}"));
            return 1;
        }
    };
    runtime.block_on(async move {
        let loaded = match start(loaded, source.ok().and_then(|s| s.runsc)).await {
            Ok(l) => Arc::new(l),
            Err(reason) => {
                say("ERROR", &format!("refusing to serve: {reason}"));
                return REFUSED;
            }
        };
        let host = std::env::var(env::LISTEN).unwrap_or_else(|_| "0.0.0.0".into());
        let listener = match tokio::net::TcpListener::bind((host.as_str(), port)).await {
            Ok(l) => l,
            Err(e) => {
                say("ERROR", &format!("cannot listen on port {port}: {e}"));
                return 1;
            }
        };
        say(
            "INFO",
            &format!("serving {} (revision {}) on port {port}", loaded.model.describe(), loaded.revision),
        );
        let served = axum::serve(listener, router(loaded.clone())).with_graceful_shutdown(stopped()).await;
        if let Served::Running(plugin) = &loaded.model {
            plugin.stop();
        }
        match served {
            Ok(()) => 0,
            Err(e) => {
                say("ERROR", &format!("server failed: {e}"));
                1
            }
        }
    })
}

/// Starts a Python model's child; a Rust-served model is ready as loaded.
async fn start(loaded: Loaded, runsc: Option<PathBuf>) -> Result<Loaded, String> {
    let Loaded { model, revision, manifest_sha256 } = loaded;
    let model = match model {
        Served::Python(prepared) => Served::Running(Box::new(
            crate::serve_plugin::PluginModel::start(prepared, runsc.as_deref()).await?,
        )),
        other => other,
    };
    Ok(Loaded { model, revision, manifest_sha256 })
}

async fn stopped() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => say("INFO", "stopping: finishing the requests in flight"),
        _ = int.recv() => say("INFO", "stopping: finishing the requests in flight"),
        () = BROKEN.notified() => {}
    }
}
