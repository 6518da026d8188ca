//! Google's side of a Pub/Sub push, on 127.0.0.1: an RSA key made for the
//! test, its key set served like `https://www.googleapis.com/oauth2/v3/certs`
//! (counting requests, failing on demand), Google-style ID tokens of a push
//! service account, and push bodies built by hand exactly as Pub/Sub sends
//! them (not with the code under test).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use aws_lc_rs::signature::RsaKeyPair;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use mapi_domain::Timestamp;
use mapi_oidc::dev::DevIdp;
use serde_json::{Value, json};

/// The push settings of a production deployment: audience, push service
/// account and subscription.
pub const AUDIENCE: &str = "https://api.example.com/internal/events";
pub const PUSH_ACCOUNT: &str = "mapi-events-push@mapi-prod-control.iam.gserviceaccount.com";
pub const SUBSCRIPTION: &str = "projects/mapi-prod-control/subscriptions/mapi-run-events-push";
/// The `iss` of Google's ID tokens.
pub const GOOGLE_ISSUER: &str = "https://accounts.google.com";
/// What Google's certs endpoint answers (the max-age varies).
pub const CACHE_CONTROL: &str = "public, max-age=3600, must-revalidate, no-transform";

/// A key set server that counts its requests and can be told to fail.
#[derive(Debug)]
pub struct KeySetServer {
    pub url: String,
    state: Arc<KeySetState>,
}

#[derive(Debug)]
struct KeySetState {
    body: std::sync::Mutex<Value>,
    failing: AtomicBool,
    hits: AtomicU64,
}

async fn serve_keys(State(state): State<Arc<KeySetState>>) -> Response {
    state.hits.fetch_add(1, Ordering::SeqCst);
    if state.failing.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, "down").into_response();
    }
    let body = state.body.lock().expect("lock").clone();
    ([(header::CACHE_CONTROL, CACHE_CONTROL)], axum::Json(body)).into_response()
}

impl KeySetServer {
    pub async fn start(body: Value) -> KeySetServer {
        let state = Arc::new(KeySetState {
            body: std::sync::Mutex::new(body),
            failing: AtomicBool::new(false),
            hits: AtomicU64::new(0),
        });
        let app = axum::Router::new()
            .route("/oauth2/v3/certs", axum::routing::get(serve_keys))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        KeySetServer { url: format!("http://{addr}/oauth2/v3/certs"), state }
    }

    /// Requests served so far.
    pub fn hits(&self) -> u64 {
        self.state.hits.load(Ordering::SeqCst)
    }

    /// Answer 503 (or serve the keys again).
    pub fn set_failing(&self, failing: bool) {
        self.state.failing.store(failing, Ordering::SeqCst);
    }

    pub fn set_body(&self, body: Value) {
        *self.state.body.lock().expect("lock") = body;
    }
}

/// An identity provider standing in for Google, with its own key set server.
#[derive(Debug)]
pub struct FakeGoogle {
    pub idp: DevIdp,
    /// The RSA key pair itself (for attacks that need the public key's bytes).
    pub key: RsaKeyPair,
    pub keys: KeySetServer,
    _dir: tempfile::TempDir,
}

/// A provider whose RSA key is generated now, in `dir`.
pub fn provider(dir: &tempfile::TempDir, name: &str) -> (DevIdp, RsaKeyPair) {
    let path = dir.path().join(name);
    let idp = DevIdp::open(&path, GOOGLE_ISSUER.to_owned(), vec![]).expect("generate a key");
    let key = RsaKeyPair::from_pkcs8(&std::fs::read(&path).expect("read key")).expect("pkcs8");
    (idp, key)
}

impl FakeGoogle {
    pub async fn start() -> FakeGoogle {
        let dir = tempfile::tempdir().expect("tempdir");
        let (idp, key) = provider(&dir, "google.key");
        let keys = KeySetServer::start(idp.jwks()).await;
        FakeGoogle { idp, key, keys, _dir: dir }
    }

    /// The platform settings for pushes of [`PUSH_ACCOUNT`] to [`AUDIENCE`]
    /// from [`SUBSCRIPTION`], with this provider's key set.
    pub fn settings(&self) -> Vec<(&'static str, String)> {
        vec![
            ("MAPI_PUBSUB_PUSH_AUDIENCE", AUDIENCE.to_owned()),
            ("MAPI_PUBSUB_PUSH_SERVICE_ACCOUNT", PUSH_ACCOUNT.to_owned()),
            ("MAPI_PUBSUB_PUSH_SUBSCRIPTIONS", SUBSCRIPTION.to_owned()),
            ("MAPI_GOOGLE_JWKS_URL", self.keys.url.clone()),
        ]
    }

    /// The claims of the token Pub/Sub mints for a push subscription, issued at `now`.
    pub fn claims(&self, now: Timestamp) -> Value {
        let now = now.as_secs();
        json!({
            "aud": AUDIENCE,
            "azp": "113774264463038321964",
            "email": PUSH_ACCOUNT,
            "email_verified": true,
            "exp": now + 3600,
            "iat": now,
            "iss": GOOGLE_ISSUER,
            "sub": "113774264463038321964",
        })
    }

    /// `claims` signed RS256 with Google's key and `kid`.
    pub fn token(&self, claims: &Value) -> String {
        self.idp.sign(&self.idp.header(), claims).expect("sign")
    }

    /// An ID token Google mints for `service_account` with `audience` at
    /// `now` (what Cloud Tasks and Cloud Scheduler send to HTTP targets).
    pub fn id_token(&self, service_account: &str, audience: &str, now: Timestamp) -> String {
        let claims = with(
            &self.claims(now),
            &[("aud", json!(audience)), ("email", json!(service_account)), ("azp", json!(service_account))],
        );
        self.token(&claims)
    }

    /// A genuine push token issued at `now`.
    pub fn push_token(&self, now: Timestamp) -> String {
        self.token(&self.claims(now))
    }
}

/// `claims` with `changes` applied (`Value::Null` removes the claim).
pub fn with(claims: &Value, changes: &[(&str, Value)]) -> Value {
    let mut c = claims.clone();
    for (k, v) in changes {
        match v {
            Value::Null => {
                c.as_object_mut().expect("object").remove(*k);
            }
            v => c[*k] = v.clone(),
        }
    }
    c
}

/// base64url without padding, as in a JWT.
pub fn b64url(bytes: impl AsRef<[u8]>) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The LogEntry Cloud Logging writes for one stdout line `{"mapi_event": event}`
/// of task `task` of a Cloud Run Jobs execution.
pub fn log_entry(event: &Value, execution: &str, task: u32, at: Timestamp) -> Value {
    let job = execution.rsplit_once('-').map_or(execution, |(job, _)| job);
    json!({
        "insertId": format!("{:016x}", at.as_micros()),
        "jsonPayload": { "mapi_event": event },
        "resource": {
            "type": "cloud_run_job",
            "labels": { "job_name": job, "location": "europe-west1", "project_id": "mapi-prod-control" },
        },
        "timestamp": at.to_rfc3339(),
        "severity": "DEFAULT",
        "labels": {
            "instanceId": "0069c7a98876d5a9e6f4c3b2",
            "run.googleapis.com/execution_name": execution,
            "run.googleapis.com/task_attempt": "0",
            "run.googleapis.com/task_index": task.to_string(),
        },
        "logName": "projects/mapi-prod-control/logs/run.googleapis.com%2Fstdout",
        "receiveTimestamp": at.to_rfc3339(),
    })
}

/// The body Pub/Sub POSTs for a message whose data is `data` (any bytes),
/// from `subscription`: both spellings of the id and time, and the
/// delivery attempt, as Pub/Sub sends them.
pub fn envelope_of(data: &[u8], subscription: &str, message_id: &str, at: Timestamp) -> Value {
    json!({
        "message": {
            "attributes": { "logging.googleapis.com/timestamp": at.to_rfc3339() },
            "data": STANDARD.encode(data),
            "messageId": message_id,
            "message_id": message_id,
            "publishTime": at.to_rfc3339(),
            "publish_time": at.to_rfc3339(),
        },
        "subscription": subscription,
        "deliveryAttempt": 1,
    })
}

/// The push of one event line: its LogEntry, base64, in Pub/Sub's envelope from [`SUBSCRIPTION`].
pub fn push_body(event: &Value, execution: &str, task: u32, message_id: &str, at: Timestamp) -> Value {
    let entry = log_entry(event, execution, task, at);
    envelope_of(entry.to_string().as_bytes(), SUBSCRIPTION, message_id, at)
}
