//! Signing in to the console, the session cookie, and CSRF.
//!
//! Sign-in is the OIDC authorization-code flow with PKCE: `/console/sign-in`
//! writes a [`ConsoleLoginDoc`] (keyed by the HMAC of a random `state`, with
//! the PKCE verifier and the nonce), sets the `state` in a short cookie
//! scoped to the callback, and sends the browser to the issuer. The callback
//! takes the login document in one transaction (a code is exchanged once),
//! compares the cookie's state with the answer's, exchanges the code with
//! the verifier, verifies the ID token with the platform's session verifier
//! and its nonce with the one sent, and only then makes a
//! [`ConsoleSessionDoc`].
//!
//! The session cookie is HttpOnly, SameSite=Lax, `Secure` outside the dev
//! profile on plain HTTP, and lasts `MAPI_CONSOLE_SESSION_S`. Each form
//! carries a CSRF token: a keyed hash of the session's secret, which a
//! cross-site page cannot read or compute.

use std::time::Duration;

use axum::extract::{FromRequest, FromRequestParts, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use mapi_domain::UserId;
use mapi_identity::{Audit, Caller, console_caller, request_meta};
use mapi_oidc::code_flow::{self, Client, CodeFlowError};
use mapi_schema::{ConsoleLoginDoc, ConsoleSessionDoc};
use mapi_store::transact;
use serde::Deserialize;

use crate::Console;
use crate::html::{self, Notice};

/// The session cookie's name (with the `__Host-` prefix where cookies are
/// `Secure`: the browser then refuses one set by a sibling domain).
fn session_cookie(console: &Console) -> &'static str {
    if console.secure_cookies() { "__Host-mapi_console" } else { "mapi_console" }
}

const LOGIN_COOKIE: &str = "mapi_console_login";
/// How long a sign-in may take at the identity provider.
const LOGIN_TTL: Duration = Duration::from_secs(600);

/// The value of cookie `name` in the request's `Cookie` headers.
fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

fn set_cookie(console: &Console, name: &str, value: &str, path: &str, max_age: u64) -> HeaderValue {
    let secure = if console.secure_cookies() { "; Secure" } else { "" };
    let text = format!("{name}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Lax{secure}");
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// A console path to come back to: only under `/console`, never another site.
fn safe_return(path: Option<&str>) -> String {
    match path {
        Some(p) if p.starts_with("/console") && !p.starts_with("//") && !p.contains('\\') => p.to_owned(),
        _ => crate::PREFIX.to_owned(),
    }
}

/// A signed-in person: their session's secret (the bearer the console
/// calls the API with), who they are, and the CSRF token of their forms.
#[derive(Clone, Debug)]
pub struct Viewer {
    pub(crate) secret: String,
    pub user: UserId,
    pub operator: bool,
    pub csrf: String,
}

impl Viewer {
    fn new(console: &Console, secret: &str, caller: Caller) -> Viewer {
        // A console session always resolves to a person.
        let (user, operator) = (caller.user().clone(), caller.is_operator());
        Viewer { csrf: csrf_of(console, secret), secret: secret.to_owned(), user, operator }
    }
}

fn csrf_of(console: &Console, secret: &str) -> String {
    console.app.pepper.short_hash("console-csrf", secret)
}

/// Who is signed in, or the way to sign in.
async fn viewer_of(parts: &Parts, console: &Console) -> Result<Viewer, Response> {
    let secret = cookie(&parts.headers, session_cookie(console))
        .filter(|s| s.starts_with(mapi_identity::CONSOLE_SESSION_PREFIX));
    let Some(secret) = secret else { return Err(to_sign_in(parts)) };
    let meta = request_meta(parts, &console.app);
    match console_caller(&console.app, secret, meta).await {
        Ok(caller) => Ok(Viewer::new(console, secret, caller)),
        Err(_) => Err(to_sign_in(parts)),
    }
}

/// A page read without a session goes to sign-in and comes back; a form
/// posted without one is refused (its fields would be lost on the way).
fn to_sign_in(parts: &Parts) -> Response {
    if parts.method == Method::GET {
        let back = parts.uri.path_and_query().map_or(crate::PREFIX, |p| p.as_str());
        let to = format!("/console/sign-in?return_to={}", code_flow::encode(back));
        return Redirect::to(&to).into_response();
    }
    html::message(StatusCode::UNAUTHORIZED, "Signed out", "Your session has ended: sign in again.", None)
}

impl FromRequestParts<Console> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, console: &Console) -> Result<Viewer, Response> {
        viewer_of(parts, console).await
    }
}

/// A form posted by a signed-in person with their CSRF token: its fields in
/// order (a name may repeat, as checkboxes do).
#[derive(Debug)]
pub struct Posted {
    pub viewer: Viewer,
    pub fields: Vec<(String, String)>,
}

impl Posted {
    /// The first value of `name`, trimmed; `None` when absent or empty.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.trim()).filter(|v| !v.is_empty())
    }

    /// Every value of `name`.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.fields.iter().filter(|(k, _)| k == name).map(|(_, v)| v.as_str()).collect()
    }
}

/// The largest form the console takes (a dataset upload has its own limit).
const FORM_LIMIT: usize = 256 * 1024;

impl FromRequest<Console> for Posted {
    type Rejection = Response;

    async fn from_request(request: Request, console: &Console) -> Result<Posted, Response> {
        let (parts, body) = request.into_parts();
        let viewer = viewer_of(&parts, console).await?;
        let bad =
            |detail: &str| html::message(StatusCode::BAD_REQUEST, "The form was not sent", detail, None);
        let bytes = axum::body::to_bytes(body, FORM_LIMIT).await.map_err(|_| bad("the form is too large"))?;
        let fields: Vec<(String, String)> = serde_urlencoded::from_bytes(&bytes)
            .map_err(|_| bad("the form's encoding is not one a browser sends"))?;
        check_csrf(&viewer, fields.iter().find(|(k, _)| k == "_csrf").map(|(_, v)| v.as_str()))
            .map_err(IntoResponse::into_response)?;
        Ok(Posted { viewer, fields })
    }
}

/// Refuses a form whose CSRF token is not the viewer's.
pub(crate) fn check_csrf(viewer: &Viewer, given: Option<&str>) -> Result<(), CsrfRefused> {
    if given.is_some_and(|g| mapi_identity::constant_time_eq(g.as_bytes(), viewer.csrf.as_bytes())) {
        return Ok(());
    }
    Err(CsrfRefused)
}

/// A form without this session's CSRF token: refused, changing nothing.
#[derive(Debug)]
pub(crate) struct CsrfRefused;

impl IntoResponse for CsrfRefused {
    fn into_response(self) -> Response {
        html::message(
            StatusCode::FORBIDDEN,
            "The form was refused",
            "The form did not carry this session's security token (was it opened before you signed in again?): reload the page and send it again.",
            None,
        )
    }
}

#[derive(Debug, Deserialize)]
pub struct SignInQuery {
    return_to: Option<String>,
}

/// Starts a sign-in at the issuer.
pub async fn sign_in(State(console): State<Console>, Query(q): Query<SignInQuery>) -> Response {
    match start(&console, safe_return(q.return_to.as_deref())).await {
        Ok(response) => response,
        Err(detail) => html::message(StatusCode::SERVICE_UNAVAILABLE, "Cannot sign in", &detail, None),
    }
}

async fn discovery(console: &Console) -> Result<&code_flow::Discovery, String> {
    let Some(url) = console.app.config.session_discovery_url() else {
        return Err(
            "This deployment has no identity provider (MAPI_OIDC_ISSUER): only API tokens work here.".into(),
        );
    };
    console
        .discovery
        .get_or_try_init(|| code_flow::discover(&console.http, &url))
        .await
        .map_err(|e| format!("The identity provider's discovery document at {url} could not be read: {e}."))
}

fn redirect_uri(console: &Console) -> String {
    format!("{}/console/callback", console.public_url())
}

async fn start(console: &Console, return_to: String) -> Result<Response, String> {
    let discovery = discovery(console).await?;
    let request = code_flow::Request::new().map_err(|e| e.to_string())?;
    let app = &console.app;
    let login = ConsoleLoginDoc {
        state_hash: app.pepper.hash(&request.state),
        verifier: request.verifier.clone(),
        nonce: request.nonce.clone(),
        return_to,
        expires_at: app.clock.now() + LOGIN_TTL,
    };
    mapi_schema::put(&*app.store, &login)
        .await
        .map_err(|e| format!("The sign-in could not be recorded: {e}."))?;
    let to = request.authorization_url(discovery, &app.config.oidc_audience, &redirect_uri(console));
    let cookie = set_cookie(console, LOGIN_COOKIE, &request.state, "/console/callback", LOGIN_TTL.as_secs());
    Ok((StatusCode::SEE_OTHER, [(header::SET_COOKIE, cookie)], [(header::LOCATION, to)]).into_response())
}

#[derive(Debug, Deserialize)]
pub struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// The issuer's answer: a session, or why not.
pub async fn callback(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(q): Query<CallbackQuery>,
) -> Response {
    match finish(&console, &headers, q).await {
        Ok((secret, return_to)) => {
            let lifetime = console.app.config.console_session.as_secs();
            let session = set_cookie(&console, session_cookie(&console), &secret, "/", lifetime);
            let login = set_cookie(&console, LOGIN_COOKIE, "", "/console/callback", 0);
            let mut response = Redirect::to(&return_to).into_response();
            response.headers_mut().append(header::SET_COOKIE, session);
            response.headers_mut().append(header::SET_COOKIE, login);
            response
        }
        Err(detail) => html::message(
            StatusCode::BAD_REQUEST,
            "Sign-in failed",
            &detail,
            Some(Notice::link("/console/sign-in", "Sign in again")),
        ),
    }
}

async fn finish(
    console: &Console,
    headers: &HeaderMap,
    q: CallbackQuery,
) -> Result<(String, String), String> {
    if let Some(error) = q.error {
        let detail = q.error_description.map(|d| format!(": {d}")).unwrap_or_default();
        return Err(format!("The identity provider refused the sign-in ({error}{detail})."));
    }
    let (Some(code), Some(state)) = (q.code, q.state) else {
        return Err("The identity provider's answer had no code: start again.".into());
    };
    if cookie(headers, LOGIN_COOKIE) != Some(state.as_str()) {
        return Err(
            "This answer is not for a sign-in this browser started (or it took over ten minutes).".into()
        );
    }
    let app = &console.app;
    let login = take_login(console, &state).await?;
    let discovery = discovery(console).await?;
    let client = Client {
        id: &app.config.oidc_audience,
        secret: app.config.oidc_client_secret.as_deref(),
        redirect_uri: &redirect_uri(console),
    };
    let id_token = code_flow::exchange(&console.http, discovery, client, &code, &login.verifier)
        .await
        .map_err(|e: CodeFlowError| format!("The code could not be exchanged: {e}."))?;
    let verifier = app.sessions.as_ref().ok_or("Sessions are not configured on this deployment.")?;
    let claims =
        verifier.verify(&id_token).await.map_err(|e| format!("The ID token was refused: {}.", e.reason()))?;
    if claims.nonce.as_deref() != Some(login.nonce.as_str()) {
        return Err("The ID token does not answer this sign-in (its nonce differs).".into());
    }
    let user = UserId::parse(&claims.email).map_err(|_| "The identity provider's e-mail is not usable.")?;
    let secret = open_session(console, user).await?;
    Ok((secret, login.return_to))
}

/// Reads and deletes the sign-in's document in one transaction.
async fn take_login(console: &Console, state: &str) -> Result<ConsoleLoginDoc, String> {
    let app = &console.app;
    let id = app.pepper.hash(state);
    let id = &id;
    let taken = transact::<_, mapi_store::StoreError, _, _>(&*app.store, |mut tx| async move {
        let found = mapi_schema::tx_get::<ConsoleLoginDoc>(&mut tx, id).await?;
        if found.is_some() {
            tx.delete(&mapi_schema::key::<ConsoleLoginDoc>(id)?);
        }
        Ok(tx.finish(found))
    })
    .await
    .map_err(|e| format!("The sign-in could not be read: {e}."))?;
    match taken {
        Some(l) if l.expires_at > app.clock.now() => Ok(l),
        Some(_) => Err("The sign-in took over ten minutes: start again.".into()),
        None => Err("This sign-in was finished already or never started: start again.".into()),
    }
}

/// A new session for `user`, its sign-in audited; then the API's own
/// sign-in records the person and claims their invitations.
async fn open_session(console: &Console, user: UserId) -> Result<String, String> {
    let app = &console.app;
    let secret = mapi_identity::new_console_session().map_err(|_| "No randomness for a session.")?;
    let now = app.clock.now();
    let doc = ConsoleSessionDoc {
        hash: app.pepper.hash(&secret),
        user: user.clone(),
        created_at: now,
        expires_at: now + app.config.console_session,
    };
    let record = Audit::anonymous("auth.console_sign_in", format!("users/{user}"))
        .actor(&user)
        .into_doc(now, &*app.entropy);
    let (doc, record) = (&doc, &record);
    transact::<_, mapi_store::StoreError, _, _>(&*app.store, |mut tx| async move {
        mapi_schema::tx_create(&mut tx, doc)?;
        mapi_schema::tx_create(&mut tx, record)?;
        Ok(tx.finish(()))
    })
    .await
    .map_err(|e| format!("The session could not be recorded: {e}."))?;
    let api = crate::api::Api::for_secret(console, &secret);
    api.post_empty::<serde_json::Value>("/v1/sessions").await.map_err(|r| r.detail)?;
    Ok(secret)
}

/// Ends the session everywhere: its document is deleted, so the secret
/// stops working for the console and the API alike.
pub async fn sign_out(State(console): State<Console>, posted: Posted) -> Response {
    let app = &console.app;
    let hash = app.pepper.hash(&posted.viewer.secret);
    let user = posted.viewer.user.clone();
    let record = Audit::anonymous("auth.console_sign_out", format!("users/{user}"))
        .actor(&user)
        .into_doc(app.clock.now(), &*app.entropy);
    let (hash, record) = (&hash, &record);
    let ended = transact::<_, mapi_store::StoreError, _, _>(&*app.store, |mut tx| async move {
        tx.delete(&mapi_schema::key::<ConsoleSessionDoc>(hash)?);
        mapi_schema::tx_create(&mut tx, record)?;
        Ok(tx.finish(()))
    })
    .await;
    if let Err(e) = ended {
        tracing::error!(error = %e, "a console session could not be ended");
        return html::message(
            StatusCode::SERVICE_UNAVAILABLE,
            "Not signed out",
            "Try again in a moment.",
            None,
        );
    }
    let clear = set_cookie(&console, session_cookie(&console), "", "/", 0);
    let mut page = html::message(
        StatusCode::OK,
        "Signed out",
        "Your session has ended on this platform.",
        Some(Notice::link("/console/sign-in", "Sign in again")),
    );
    page.headers_mut().append(header::SET_COOKIE, clear);
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_console_paths_are_returned_to() {
        assert_eq!(safe_return(Some("/console/runs/run_1?x=1")), "/console/runs/run_1?x=1");
        for hostile in ["https://evil.example/", "//evil.example/console", "/consolex\\evil", "/v1/whoami"] {
            assert_eq!(safe_return(Some(hostile)), "/console", "{hostile}");
        }
        assert_eq!(safe_return(None), "/console");
    }

    #[test]
    fn the_cookie_is_found_among_others_and_headers() {
        let mut headers = HeaderMap::new();
        headers.append(header::COOKIE, HeaderValue::from_static("a=1; mapi_console=mapis_x"));
        headers.append(header::COOKIE, HeaderValue::from_static("mapi_console_login=s"));
        assert_eq!(cookie(&headers, "mapi_console"), Some("mapis_x"));
        assert_eq!(cookie(&headers, "mapi_console_login"), Some("s"));
        assert_eq!(cookie(&headers, "missing"), None);
    }
}
