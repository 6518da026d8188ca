//! Test fixtures: temporary directories, a JWKS server that can be told to
//! fail or to serve other keys and counts its requests, and token builders
//! for crafting hostile tokens.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lc_rs::hmac;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mapi_clock::{Clock, VirtualClock};
use mapi_domain::Timestamp;
use mapi_oidc::dev::DevIdp;
use mapi_oidc::{JwksCache, Verifier, VerifierConfig};
use serde_json::{Value, json};

pub const ISSUER: &str = "https://idp.test";
pub const AUDIENCE: &str = "mapi-test";
pub const ALICE: &str = "alice@example.com";
/// 2001: long past by the system clock, so a verifier that consulted the
/// system clock instead of the injected one would refuse every token.
pub const START: Timestamp = Timestamp::from_secs(1_000_000_000);
pub const HOUR: Duration = Duration::from_secs(3600);

/// A directory removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce).expect("random");
        let path = std::env::temp_dir().join(format!("mapi-oidc-test-{}", hex::encode(nonce)));
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Serves a key set on 127.0.0.1 with a configurable `Cache-Control`.
pub struct JwksServer {
    url: String,
    state: Arc<ServerState>,
}

struct ServerState {
    body: Mutex<Value>,
    cache_control: Option<String>,
    failing: AtomicBool,
    hits: AtomicU64,
}

async fn serve_keys(State(state): State<Arc<ServerState>>) -> Response {
    state.hits.fetch_add(1, Ordering::SeqCst);
    if state.failing.load(Ordering::SeqCst) {
        return (StatusCode::INTERNAL_SERVER_ERROR, "down").into_response();
    }
    let body = state.body.lock().expect("lock").clone();
    let mut response = axum::Json(body).into_response();
    if let Some(cc) = &state.cache_control {
        response.headers_mut().insert(header::CACHE_CONTROL, cc.parse().expect("header value"));
    }
    response
}

impl JwksServer {
    pub async fn start(body: Value, cache_control: Option<&str>) -> JwksServer {
        let state = Arc::new(ServerState {
            body: Mutex::new(body),
            cache_control: cache_control.map(str::to_owned),
            failing: AtomicBool::new(false),
            hits: AtomicU64::new(0),
        });
        let app =
            axum::Router::new().route("/jwks.json", axum::routing::get(serve_keys)).with_state(state.clone());
        let addr = serve(app).await;
        JwksServer { url: format!("http://{addr}/jwks.json"), state }
    }

    pub fn url(&self) -> String {
        self.url.clone()
    }

    pub fn set_body(&self, body: Value) {
        *self.state.body.lock().expect("lock") = body;
    }

    pub fn set_failing(&self, failing: bool) {
        self.state.failing.store(failing, Ordering::SeqCst);
    }

    pub fn hits(&self) -> u64 {
        self.state.hits.load(Ordering::SeqCst)
    }
}

/// Serves `app` on 127.0.0.1 at a free port and returns the address.
pub async fn serve(app: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// The key sets of several providers merged into one.
pub fn merged(idps: &[&DevIdp]) -> Value {
    let keys: Vec<Value> =
        idps.iter().flat_map(|i| i.jwks()["keys"].as_array().cloned().unwrap_or_default()).collect();
    json!({ "keys": keys })
}

/// A development provider with its key in `dir`, and the key pair itself (read back from the file).
pub fn open_idp(dir: &TempDir, name: &str) -> (DevIdp, RsaKeyPair) {
    let path = dir.path().join(name);
    let idp = DevIdp::open(&path, ISSUER.to_owned(), vec![ALICE.to_owned(), "Bob@Example.com".to_owned()])
        .expect("open idp");
    let key = RsaKeyPair::from_pkcs8(&std::fs::read(&path).expect("read key")).expect("pkcs8");
    (idp, key)
}

/// A verifier of `ISSUER` tokens for `AUDIENCE` against the server's key set, in virtual time.
pub struct Fixture {
    pub dir: TempDir,
    pub idp: DevIdp,
    pub key: RsaKeyPair,
    pub server: JwksServer,
    pub clock: Arc<VirtualClock>,
    pub jwks: JwksCache,
    pub verifier: Verifier,
}

impl Fixture {
    pub async fn new(cache_control: Option<&str>) -> Fixture {
        let dir = TempDir::new();
        let (idp, key) = open_idp(&dir, "idp.key");
        let server = JwksServer::start(idp.jwks(), cache_control).await;
        let clock = Arc::new(VirtualClock::new(START));
        let jwks = JwksCache::new(server.url(), reqwest::Client::new(), clock.clone());
        let verifier =
            verifier(&jwks, &clock, VerifierConfig::new(vec![ISSUER.to_owned()], AUDIENCE.to_owned()));
        Fixture { dir, idp, key, server, clock, jwks, verifier }
    }

    /// A genuine token for `email` issued now.
    pub fn token(&self, email: &str) -> String {
        self.idp.issue(email, AUDIENCE, HOUR, self.clock.now()).expect("issue")
    }

    /// The header of a genuine token.
    pub fn header(&self) -> Value {
        json!({"alg": "RS256", "typ": "JWT", "kid": self.idp.kid()})
    }

    /// The claims of a genuine token issued now.
    pub fn claims(&self) -> Value {
        let now = self.clock.now().as_secs();
        json!({
            "iss": ISSUER, "sub": "dev-1", "aud": AUDIENCE, "email": ALICE, "email_verified": true,
            "iat": now, "exp": now + 3600,
        })
    }

    /// `header` and `claims` signed with the provider's own key.
    pub fn sign(&self, header: &Value, claims: &Value) -> String {
        sign_rs256(&self.key, header, claims)
    }
}

pub fn verifier(jwks: &JwksCache, clock: &Arc<VirtualClock>, config: VerifierConfig) -> Verifier {
    let clock: Arc<dyn Clock> = clock.clone();
    Verifier::new(config, jwks.clone(), clock)
}

pub fn b64(bytes: impl AsRef<[u8]>) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

pub fn unb64(s: &str) -> Vec<u8> {
    URL_SAFE_NO_PAD.decode(s).expect("base64url")
}

fn signing_input(header: &Value, claims: &Value) -> String {
    format!("{}.{}", b64(header.to_string()), b64(claims.to_string()))
}

/// A compact JWS signed RS256 with `key`, whatever the header says.
pub fn sign_rs256(key: &RsaKeyPair, header: &Value, claims: &Value) -> String {
    sign_raw(key, &signing_input(header, claims))
}

/// `input` (the encoded `header.payload`) signed RS256 with `key`.
pub fn sign_raw(key: &RsaKeyPair, input: &str) -> String {
    let mut signature = vec![0; key.public_modulus_len()];
    key.sign(&RSA_PKCS1_SHA256, &SystemRandom::new(), input.as_bytes(), &mut signature).expect("sign");
    format!("{input}.{}", b64(signature))
}

/// A compact JWS with an HMAC-SHA256 signature keyed with `secret`.
pub fn sign_hs256(secret: &[u8], header: &Value, claims: &Value) -> String {
    let input = signing_input(header, claims);
    let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, secret), input.as_bytes());
    format!("{input}.{}", b64(tag.as_ref()))
}
