//! The development identity provider that `mapi dev` serves.
//!
//! It holds one RSA-2048 key, made on first use and kept in a file (PKCS#8,
//! mode 0600) so tokens and the key id survive restarts; publishes the public
//! half as a JWKS; and issues RS256 ID tokens for the seeded accounts only.
//! Its tokens are verified by the same [`crate::Verifier`] as a real
//! provider's, through the key set at [`JWKS_PATH`]. It exists for local
//! development: anyone who can reach `POST` [`LOGIN_PATH`] can sign in as
//! any seeded account.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use aws_lc_rs::digest::{SHA256, digest};
use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::{KeySize, PublicKeyComponents};
use aws_lc_rs::signature::{KeyPair, RSA_PKCS1_SHA256, RsaKeyPair};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mapi_api::problem::{self, ProblemCode};
use mapi_clock::Clock;
use mapi_domain::Timestamp;
use serde::Deserialize;
use serde_json::{Value, json};
use thiserror::Error;

/// Where the router serves the key set.
pub const JWKS_PATH: &str = "/dev/idp/jwks.json";
/// Where the router issues tokens: `POST {"email": "..."}`.
pub const LOGIN_PATH: &str = "/dev/idp/login";
/// How long tokens from [`LOGIN_PATH`] last.
pub const TOKEN_TTL: Duration = Duration::from_secs(3600);
/// The `Cache-Control` of [`JWKS_PATH`].
pub const JWKS_CACHE_CONTROL: &str = "public, max-age=300";

/// Why the development identity provider could not start or issue a token.
#[derive(Debug, Error)]
pub enum DevIdpError {
    #[error("cannot read or write the development signing key {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the development signing key {path} is not an RSA PKCS#8 key ({reason}); delete it to make a new one"
    )]
    BadKey { path: PathBuf, reason: String },
    #[error("could not generate an RSA key")]
    KeyGeneration,
    #[error("could not sign the token")]
    Signing,
    #[error("no development account {0}")]
    UnknownAccount(String),
}

/// The development identity provider. Cheap to clone.
#[derive(Debug, Clone)]
pub struct DevIdp {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    key: RsaKeyPair,
    issuer: String,
    kid: String,
    /// The public modulus and exponent, base64url without padding.
    n: String,
    e: String,
    /// Lower-cased.
    accounts: Vec<String>,
}

impl DevIdp {
    /// Loads the PKCS#8 key at `key_path`, or generates one and writes it
    /// there (mode 0600, atomically: a temporary file renamed into place).
    /// Account e-mails are compared case-insensitively.
    pub fn open(key_path: &Path, issuer: String, accounts: Vec<String>) -> Result<DevIdp, DevIdpError> {
        let key = match std::fs::read(key_path) {
            Ok(pkcs8) => RsaKeyPair::from_pkcs8(&pkcs8)
                .map_err(|e| DevIdpError::BadKey { path: key_path.to_owned(), reason: e.to_string() })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => generate_and_store(key_path)?,
            Err(source) => return Err(DevIdpError::Io { path: key_path.to_owned(), source }),
        };
        let public = PublicKeyComponents::<Vec<u8>>::from(key.public_key());
        let kid = hex::encode(&digest(&SHA256, &public.n).as_ref()[..8]);
        let accounts = accounts.iter().map(|a| normalize(a)).collect();
        Ok(DevIdp {
            inner: Arc::new(Inner {
                n: URL_SAFE_NO_PAD.encode(&public.n),
                e: URL_SAFE_NO_PAD.encode(&public.e),
                key,
                issuer,
                kid,
                accounts,
            }),
        })
    }

    /// The `iss` of the tokens issued.
    pub fn issuer(&self) -> &str {
        &self.inner.issuer
    }

    /// The key id: the first 16 hex digits of the SHA-256 of the modulus, stable across restarts.
    pub fn kid(&self) -> &str {
        &self.inner.kid
    }

    /// The accounts tokens are issued for, lower-cased.
    pub fn accounts(&self) -> &[String] {
        &self.inner.accounts
    }

    /// The public key set: `{"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid", "n", "e"}]}`.
    pub fn jwks(&self) -> Value {
        let i = &*self.inner;
        json!({"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": i.kid, "n": i.n, "e": i.e}]})
    }

    /// An RS256 ID token for `email` (one of the accounts) meant for
    /// `audience`, issued at `now` and valid for `ttl`. Its `sub` is stable:
    /// `dev-` and the first 16 hex digits of the SHA-256 of the e-mail.
    pub fn issue(
        &self,
        email: &str,
        audience: &str,
        ttl: Duration,
        now: Timestamp,
    ) -> Result<String, DevIdpError> {
        self.issue_with_nonce(email, audience, ttl, now, None)
    }

    /// [`DevIdp::issue`], with the `nonce` of the authorization request it answers.
    pub fn issue_with_nonce(
        &self,
        email: &str,
        audience: &str,
        ttl: Duration,
        now: Timestamp,
        nonce: Option<&str>,
    ) -> Result<String, DevIdpError> {
        let email = normalize(email);
        if !self.inner.accounts.contains(&email) {
            return Err(DevIdpError::UnknownAccount(email));
        }
        let sub = format!("dev-{}", hex::encode(&digest(&SHA256, email.as_bytes()).as_ref()[..8]));
        let iat = now.as_secs();
        let exp = iat.saturating_add(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX));
        let mut claims = json!({
            "iss": self.inner.issuer,
            "sub": sub,
            "aud": audience,
            "email": email,
            "email_verified": true,
            "iat": iat,
            "exp": exp,
        });
        if let Some(nonce) = nonce {
            claims["nonce"] = json!(nonce);
        }
        self.sign(&self.header(), &claims)
    }

    /// The JOSE header of this provider's tokens: `{"alg": "RS256", "typ": "JWT", "kid"}`.
    pub fn header(&self) -> Value {
        json!({"alg": "RS256", "typ": "JWT", "kid": self.inner.kid})
    }

    /// `header` and `claims` as a compact JWS signed RS256 with this
    /// provider's key, whatever they say: for tests and benchmarks that need
    /// tokens of any shape from a known key (such as Google's push tokens).
    pub fn sign(&self, header: &Value, claims: &Value) -> Result<String, DevIdpError> {
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let mut signature = vec![0; self.inner.key.public_modulus_len()];
        self.inner
            .key
            .sign(&RSA_PKCS1_SHA256, &SystemRandom::new(), signing_input.as_bytes(), &mut signature)
            .map_err(|_| DevIdpError::Signing)?;
        Ok(format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature)))
    }
}

fn normalize(email: &str) -> String {
    email.trim().to_lowercase()
}

/// Generates a key and writes its PKCS#8 DER to `path` with mode 0600, via a temporary file and a rename.
fn generate_and_store(path: &Path) -> Result<RsaKeyPair, DevIdpError> {
    let key = RsaKeyPair::generate(KeySize::Rsa2048).map_err(|_| DevIdpError::KeyGeneration)?;
    let pkcs8 = key.as_der().map_err(|_| DevIdpError::KeyGeneration)?;
    let io = |source| DevIdpError::Io { path: path.to_owned(), source };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut nonce = [0u8; 8];
    getrandom::fill(&mut nonce).map_err(|e| io(std::io::Error::other(e.to_string())))?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", hex::encode(nonce)));
    let written = write_private(&tmp, pkcs8.as_ref()).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(source) = written {
        // Best effort: the temporary file may not exist.
        let _ = std::fs::remove_file(&tmp);
        return Err(io(source));
    }
    tracing::info!(path = %path.display(), "generated the development identity provider's signing key");
    Ok(key)
}

/// Creates `path` (which must not exist) readable by its owner only, and writes and syncs `bytes`.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[derive(Debug, Clone)]
pub(crate) struct RouteState {
    idp: DevIdp,
    audience: Arc<str>,
    clock: Arc<dyn Clock>,
    codes: crate::dev_code::Codes,
}

/// The provider's routes: `GET` [`JWKS_PATH`] (with [`JWKS_CACHE_CONTROL`])
/// and `POST` [`LOGIN_PATH`] with `{"email": "..."}`, answering
/// `{"id_token", "token_type": "Bearer", "expires_in"}`, 404 for an unknown
/// account and 400 for a bad body (both `application/problem+json`). The
/// tokens are for `audience` and stamped with `clock`.
///
/// It also serves the authorization-code flow (with PKCE) for the web
/// console: discovery, an account picker at [`AUTHORIZE_PATH`] and the
/// token endpoint at [`TOKEN_PATH`] ([`crate::dev_code`]).
pub fn router(idp: DevIdp, audience: String, clock: Arc<dyn Clock>) -> Router {
    let state = RouteState { idp, audience: audience.into(), clock, codes: Default::default() };
    Router::new()
        .route(JWKS_PATH, get(serve_jwks))
        .route(LOGIN_PATH, post(login))
        .route(DISCOVERY_PATH, get(crate::dev_code::discovery))
        .route(AUTHORIZE_PATH, get(crate::dev_code::picker).post(crate::dev_code::authorize))
        .route(TOKEN_PATH, post(crate::dev_code::token))
        .with_state(state)
}

/// The issuer's discovery document.
pub const DISCOVERY_PATH: &str = "/dev/idp/.well-known/openid-configuration";
/// The authorization endpoint: `GET` shows the accounts, `POST` picks one.
pub const AUTHORIZE_PATH: &str = "/dev/idp/authorize";
/// The token endpoint: a code and its PKCE verifier for an ID token.
pub const TOKEN_PATH: &str = "/dev/idp/token";

impl RouteState {
    pub(crate) fn parts(&self) -> (&DevIdp, &str, &dyn Clock, &crate::dev_code::Codes) {
        (&self.idp, &self.audience, &*self.clock, &self.codes)
    }
}

pub(crate) use RouteState as DevState;

async fn serve_jwks(State(state): State<RouteState>) -> Response {
    ([(header::CACHE_CONTROL, JWKS_CACHE_CONTROL)], axum::Json(state.idp.jwks())).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginRequest {
    email: String,
}

async fn login(
    State(state): State<RouteState>,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    if !problem::is_json(&headers) {
        return answer(ProblemCode::UnsupportedMediaType, problem::NOT_JSON.to_owned());
    }
    let Ok(body) = body else {
        return answer(ProblemCode::PayloadTooLarge, "the body is larger than this route accepts".to_owned());
    };
    let Ok(request) = serde_json::from_slice::<LoginRequest>(&body) else {
        return answer(
            ProblemCode::InvalidArgument,
            r#"the body must be JSON {"email": "<a development account>"}"#.to_owned(),
        );
    };
    match state.idp.issue(&request.email, &state.audience, TOKEN_TTL, state.clock.now()) {
        Ok(id_token) => axum::Json(json!({
            "id_token": id_token,
            "token_type": "Bearer",
            "expires_in": TOKEN_TTL.as_secs(),
        }))
        .into_response(),
        Err(DevIdpError::UnknownAccount(email)) => {
            let detail = if state.idp.accounts().is_empty() {
                format!("no development account {email}: none are configured")
            } else {
                format!("no development account {email}: use one of {}", state.idp.accounts().join(", "))
            };
            answer(ProblemCode::NotFound, detail)
        }
        Err(error) => {
            tracing::error!(%error, "the development identity provider could not issue a token");
            answer(ProblemCode::Internal, "could not issue a token".to_owned())
        }
    }
}

/// The platform's problem answer for `code`.
pub(crate) fn answer(code: ProblemCode, detail: String) -> Response {
    let body = serde_json::to_vec(&problem::Problem::new(code, detail)).unwrap_or_default();
    (code.status(), [(header::CONTENT_TYPE, "application/problem+json")], body).into_response()
}
