//! Google's sign-in (OAuth 2.0 for web server and desktop apps, OpenID
//! Connect) on 127.0.0.1, as a relying party meets it: the discovery
//! document, the authorization endpoint (`/o/oauth2/v2/auth`) and the token
//! endpoint (`/token`), for the OAuth clients registered with it. One
//! person is signed in at Google and consents at once. It refuses what
//! Google refuses, with Google's errors: an unknown `client_id` (401
//! `invalid_client`, "The OAuth client was not found."), a `redirect_uri`
//! not registered for the client (400 `redirect_uri_mismatch`), a wrong
//! client secret (401 `invalid_client`), and a code used twice, for another
//! client or redirect, or with a verifier that does not match its S256
//! challenge (400 `invalid_grant`). Its ID tokens have Google's shape:
//! `iss` `https://accounts.google.com`, `aud` and `azp` the client id,
//! `sub`, `email`, `email_verified`, `hd`, `at_hash`, `nonce`, an hour's
//! lifetime, signed RS256 with a key its own key set serves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aws_lc_rs::digest::{SHA256, digest};
use axum::extract::{Form, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use mapi_oidc::dev::DevIdp;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::google::{GOOGLE_ISSUER, KeySetServer, b64url, provider};

/// One OAuth client registered at the fake: its id, its secret (a Web
/// client's; Google gives a Desktop client one too), and the redirect URIs
/// it may use (a Desktop client may use any loopback port).
#[derive(Clone, Debug)]
pub struct OAuthClient {
    pub id: String,
    pub secret: String,
    pub redirect_uris: Vec<String>,
}

/// The person signed in at Google.
#[derive(Clone, Debug)]
pub struct Person {
    pub email: String,
    pub sub: String,
    /// The Google Workspace domain (`hd`), if the account has one.
    pub hd: Option<String>,
}

#[derive(Debug)]
struct Pending {
    client: String,
    redirect_uri: String,
    nonce: Option<String>,
    challenge: String,
}

#[derive(Debug)]
struct SignInState {
    base: String,
    jwks_uri: String,
    clients: Mutex<Vec<OAuthClient>>,
    person: Person,
    idp: DevIdp,
    codes: Mutex<HashMap<String, Pending>>,
    issued: Mutex<u64>,
}

/// The running fake: its base URL and key set.
#[derive(Debug)]
pub struct GoogleSignIn {
    pub base: String,
    pub keys: KeySetServer,
    state: Arc<SignInState>,
    _dir: tempfile::TempDir,
}

impl GoogleSignIn {
    pub async fn start(clients: Vec<OAuthClient>, person: Person) -> GoogleSignIn {
        let dir = tempfile::tempdir().expect("tempdir");
        let (idp, _) = provider(&dir, "google-sign-in.key");
        let keys = KeySetServer::start(idp.jwks()).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let state = Arc::new(SignInState {
            base: base.clone(),
            jwks_uri: keys.url.clone(),
            clients: Mutex::new(clients),
            person,
            idp,
            codes: Mutex::new(HashMap::new()),
            issued: Mutex::new(0),
        });
        let app = axum::Router::new()
            .route("/.well-known/openid-configuration", axum::routing::get(discovery))
            .route("/o/oauth2/v2/auth", axum::routing::get(authorize))
            .route("/token", axum::routing::post(token))
            .with_state(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        GoogleSignIn { base, keys, state, _dir: dir }
    }

    /// Where a relying party reads the discovery document.
    pub fn discovery_url(&self) -> String {
        format!("{}/.well-known/openid-configuration", self.base)
    }

    /// Registers another client (as its console's redirect URI is known
    /// once the platform listens).
    pub fn register(&self, client: OAuthClient) {
        self.state.clients.lock().expect("lock").push(client);
    }

    /// ID tokens issued so far.
    pub fn issued(&self) -> u64 {
        *self.state.issued.lock().expect("lock")
    }
}

impl SignInState {
    fn client(&self, id: &str) -> Option<OAuthClient> {
        self.clients.lock().expect("lock").iter().find(|c| c.id == id).cloned()
    }
}

async fn discovery(State(s): State<Arc<SignInState>>) -> Response {
    axum::Json(json!({
        "issuer": GOOGLE_ISSUER,
        "authorization_endpoint": format!("{}/o/oauth2/v2/auth", s.base),
        "token_endpoint": format!("{}/token", s.base),
        "jwks_uri": s.jwks_uri,
        "response_types_supported": ["code", "token", "id_token", "code token", "code id_token", "token id_token", "code token id_token", "none"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
        "scopes_supported": ["openid", "email", "profile"],
        "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic"],
        "code_challenge_methods_supported": ["plain", "S256"],
        "grant_types_supported": ["authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:device_code", "urn:ietf:params:oauth:grant-type:jwt-bearer"],
    }))
    .into_response()
}

#[derive(Debug, Deserialize)]
struct AuthQuery {
    client_id: Option<String>,
    redirect_uri: Option<String>,
    response_type: Option<String>,
    scope: Option<String>,
    state: Option<String>,
    nonce: Option<String>,
    code_challenge: Option<String>,
    code_challenge_method: Option<String>,
}

/// Google's error page for a request it cannot send back.
fn error_page(status: StatusCode, error: &str, detail: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        format!("Error {}: {error}\n{detail}", status.as_u16()),
    )
        .into_response()
}

fn loopback(uri: &str) -> bool {
    uri.starts_with("http://127.0.0.1:")
        || uri.starts_with("http://localhost:")
        || uri.starts_with("http://[::1]:")
}

/// What a Desktop client registers in place of redirect URIs: Google sends
/// its people back to any loopback address and port.
pub const ANY_LOOPBACK: &str = "http://127.0.0.1/*";

/// Whether `client` may send the person back to `uri`: registered, or a
/// loopback address for a Desktop client ([`ANY_LOOPBACK`]).
fn allowed(client: &OAuthClient, uri: &str) -> bool {
    client.redirect_uris.iter().any(|r| r == uri || (r == ANY_LOOPBACK && loopback(uri)))
}

async fn authorize(State(s): State<Arc<SignInState>>, Query(q): Query<AuthQuery>) -> Response {
    let id = q.client_id.unwrap_or_default();
    let Some(client) = s.client(&id) else {
        return error_page(StatusCode::UNAUTHORIZED, "invalid_client", "The OAuth client was not found.");
    };
    let redirect = q.redirect_uri.unwrap_or_default();
    if !allowed(&client, &redirect) {
        let detail = format!(
            "You can't sign in to this app because it doesn't comply with Google's OAuth 2.0 policy. redirect_uri={redirect}"
        );
        return error_page(StatusCode::BAD_REQUEST, "redirect_uri_mismatch", &detail);
    }
    let back = |pairs: &[(&str, &str)]| {
        let sep = if redirect.contains('?') { '&' } else { '?' };
        let to = format!("{redirect}{sep}{}", mapi_oidc::code_flow::form(pairs));
        (StatusCode::FOUND, [(header::LOCATION, to)]).into_response()
    };
    let state = q.state.unwrap_or_default();
    let scopes: Vec<&str> = q.scope.as_deref().unwrap_or_default().split(' ').collect();
    if q.response_type.as_deref() != Some("code") || !scopes.contains(&"openid") {
        return back(&[("error", "invalid_request"), ("state", &state)]);
    }
    let challenge = match (q.code_challenge, q.code_challenge_method.as_deref()) {
        (Some(c), Some("S256")) => c,
        _ => return back(&[("error", "invalid_request"), ("state", &state)]),
    };
    let code = format!("4/0A{}", b64url(rand_bytes()));
    let pending =
        Pending { client: client.id.clone(), redirect_uri: redirect.clone(), nonce: q.nonce, challenge };
    s.codes.lock().expect("lock").insert(code.clone(), pending);
    back(&[
        ("state", &state),
        ("code", &code),
        ("scope", "email openid https://www.googleapis.com/auth/userinfo.email"),
        ("authuser", "0"),
        ("prompt", "consent"),
    ])
}

#[derive(Debug, Deserialize)]
struct TokenForm {
    grant_type: Option<String>,
    code: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
    redirect_uri: Option<String>,
    code_verifier: Option<String>,
}

fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    (status, axum::Json(json!({"error": error, "error_description": description}))).into_response()
}

async fn token(State(s): State<Arc<SignInState>>, Form(t): Form<TokenForm>) -> Response {
    let id = t.client_id.unwrap_or_default();
    let Some(client) = s.client(&id) else {
        return oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", "The OAuth client was not found.");
    };
    if t.client_secret.as_deref() != Some(client.secret.as_str()) {
        return oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", "Unauthorized");
    }
    if t.grant_type.as_deref() != Some("authorization_code") {
        return oauth_error(StatusCode::BAD_REQUEST, "unsupported_grant_type", "Invalid grant_type: ");
    }
    // A code is good once, whatever the outcome.
    let Some(p) = t.code.and_then(|c| s.codes.lock().expect("lock").remove(&c)) else {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", "Malformed auth code.");
    };
    let verified = t.code_verifier.is_some_and(|v| b64url(digest(&SHA256, v.as_bytes())) == p.challenge);
    if p.client != client.id || t.redirect_uri.as_deref() != Some(p.redirect_uri.as_str()) || !verified {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", "Bad Request");
    }
    let access_token = format!("ya29.a0{}", b64url(rand_bytes()));
    let at_hash = b64url(&digest(&SHA256, access_token.as_bytes()).as_ref()[..16]);
    let now = mapi_clock::Clock::now(&mapi_clock::SystemClock).as_secs();
    let mut claims = json!({
        "iss": GOOGLE_ISSUER,
        "azp": client.id,
        "aud": client.id,
        "sub": s.person.sub,
        "email": s.person.email,
        "email_verified": true,
        "at_hash": at_hash,
        "iat": now,
        "exp": now + 3600,
    });
    if let Some(hd) = &s.person.hd {
        claims["hd"] = json!(hd);
    }
    if let Some(nonce) = p.nonce {
        claims["nonce"] = json!(nonce);
    }
    let id_token = s.idp.sign(&s.idp.header(), &claims).expect("sign");
    *s.issued.lock().expect("lock") += 1;
    let answer: Value = json!({
        "access_token": access_token,
        "expires_in": 3599,
        "scope": "openid https://www.googleapis.com/auth/userinfo.email",
        "token_type": "Bearer",
        "id_token": id_token,
    });
    (
        [
            (header::CACHE_CONTROL, "no-cache, no-store, max-age=0, must-revalidate"),
            (header::PRAGMA, "no-cache"),
        ],
        axum::Json(answer),
    )
        .into_response()
}

fn rand_bytes() -> [u8; 24] {
    use aws_lc_rs::rand::SecureRandom;
    let mut b = [0u8; 24];
    aws_lc_rs::rand::SystemRandom::new().fill(&mut b).expect("random");
    b
}
