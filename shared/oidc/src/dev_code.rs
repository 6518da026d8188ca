//! The development identity provider's authorization-code flow: an account
//! picker instead of a password, codes kept in memory for a minute and
//! exchanged once, with the PKCE S256 check and the client's redirect URI
//! held to the provider's own origin (it signs anyone in, so it must not
//! hand codes to another site).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Form;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mapi_domain::Timestamp;
use serde::Deserialize;
use serde_json::json;

use crate::code_flow::{challenge, encode};
use crate::dev::{AUTHORIZE_PATH, DevState, TOKEN_PATH, TOKEN_TTL};

/// How long a code may wait for its exchange.
const CODE_TTL: Duration = Duration::from_secs(60);

/// Codes issued and not yet exchanged.
#[derive(Debug, Clone, Default)]
pub(crate) struct Codes(Arc<Mutex<HashMap<String, Pending>>>);

#[derive(Debug, Clone)]
struct Pending {
    email: String,
    client_id: String,
    redirect_uri: String,
    challenge: String,
    nonce: Option<String>,
    expires: Timestamp,
}

/// An authorization request, as the query (`GET`) or the form (`POST`) carries it.
#[derive(Debug, Deserialize)]
pub(crate) struct AuthRequest {
    response_type: Option<String>,
    client_id: Option<String>,
    redirect_uri: Option<String>,
    state: Option<String>,
    nonce: Option<String>,
    code_challenge: Option<String>,
    code_challenge_method: Option<String>,
    scope: Option<String>,
    /// The account picked (`POST` only).
    email: Option<String>,
}

pub(crate) async fn discovery(State(state): State<DevState>) -> Response {
    let (idp, ..) = state.parts();
    let issuer = idp.issuer();
    let origin = origin_of(issuer).unwrap_or(issuer);
    axum::Json(json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{origin}{AUTHORIZE_PATH}"),
        "token_endpoint": format!("{origin}{TOKEN_PATH}"),
        "jwks_uri": format!("{issuer}/jwks.json"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code"],
        "code_challenge_methods_supported": ["S256"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
        "scopes_supported": ["openid", "email"],
        "token_endpoint_auth_methods_supported": ["none"],
    }))
    .into_response()
}

/// `scheme://host[:port]` of a URL.
fn origin_of(url: &str) -> Option<&str> {
    let after = url.find("://")? + 3;
    let end = url[after..].find('/').map_or(url.len(), |i| after + i);
    Some(&url[..end])
}

/// Whether `url` is an `http` address of this machine's loopback
/// interface, where a native client listens for its code (RFC 8252 §7.3):
/// the code reaches only this machine, and PKCE binds it to the client.
fn loopback(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else { return false };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = match authority.rsplit_once(':') {
        Some((h, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => authority,
    };
    matches!(host, "127.0.0.1" | "[::1]" | "localhost")
}

/// A request this provider can answer, or what is wrong with it.
fn checked<'a>(state: &DevState, r: &'a AuthRequest) -> Result<(&'a str, &'a str, &'a str), String> {
    let (idp, audience, ..) = state.parts();
    if r.response_type.as_deref() != Some("code") {
        return Err("response_type must be `code`".into());
    }
    if r.client_id.as_deref() != Some(audience) {
        return Err(format!("client_id must be `{audience}`, the audience of this platform's sessions"));
    }
    if !r.scope.as_deref().unwrap_or_default().split(' ').any(|s| s == "openid") {
        return Err("scope must include `openid`".into());
    }
    let redirect = r.redirect_uri.as_deref().ok_or("redirect_uri is required")?;
    let own = origin_of(redirect).is_some() && origin_of(redirect) == origin_of(idp.issuer());
    if !own && !loopback(redirect) {
        return Err("redirect_uri must be on this platform's own address, or a loopback address of \
                    this machine (http://127.0.0.1:PORT/…, as a command-line client listens)"
            .into());
    }
    if r.code_challenge_method.as_deref() != Some("S256") {
        return Err("PKCE is required: code_challenge_method must be `S256`".into());
    }
    let challenge =
        r.code_challenge.as_deref().filter(|c| c.len() == 43).ok_or("code_challenge is required")?;
    let state = r.state.as_deref().filter(|s| !s.is_empty()).ok_or("state is required")?;
    Ok((redirect, challenge, state))
}

/// The account picker.
pub(crate) async fn picker(State(state): State<DevState>, Query(r): Query<AuthRequest>) -> Response {
    if let Err(why) = checked(&state, &r) {
        return page(StatusCode::BAD_REQUEST, "Sign-in request refused", &format!("<p>{}</p>", escape(&why)));
    }
    let (idp, ..) = state.parts();
    let hidden: String = [
        ("response_type", &r.response_type),
        ("client_id", &r.client_id),
        ("redirect_uri", &r.redirect_uri),
        ("scope", &r.scope),
        ("state", &r.state),
        ("nonce", &r.nonce),
        ("code_challenge", &r.code_challenge),
        ("code_challenge_method", &r.code_challenge_method),
    ]
    .iter()
    .filter_map(|(k, v)| {
        v.as_ref().map(|v| format!(r#"<input type="hidden" name="{k}" value="{}">"#, escape(v)))
    })
    .collect();
    let buttons: String = idp
        .accounts()
        .iter()
        .map(|a| {
            format!(r#"<li><button type="submit" name="email" value="{0}">{0}</button></li>"#, escape(a))
        })
        .collect();
    let body = format!(
        r#"<p>This is the development identity provider of <code>mapi dev</code>: it signs in any of its accounts without a password.</p>
<form method="post" action="{AUTHORIZE_PATH}">{hidden}<fieldset><legend>Sign in as</legend><ul>{buttons}</ul></fieldset></form>"#
    );
    page(StatusCode::OK, "Choose an account", &body)
}

/// An account was picked: a code for the client, back at its redirect URI.
pub(crate) async fn authorize(State(state): State<DevState>, Form(r): Form<AuthRequest>) -> Response {
    let (redirect, challenge, client_state) = match checked(&state, &r) {
        Ok(ok) => ok,
        Err(why) => {
            return page(
                StatusCode::BAD_REQUEST,
                "Sign-in request refused",
                &format!("<p>{}</p>", escape(&why)),
            );
        }
    };
    let (idp, audience, clock, codes) = state.parts();
    let email = r.email.as_deref().unwrap_or_default().trim().to_lowercase();
    if !idp.accounts().contains(&email) {
        return page(StatusCode::BAD_REQUEST, "No such account", "<p>Pick one of the accounts listed.</p>");
    }
    let mut bytes = [0u8; 32];
    if getrandom::fill(&mut bytes).is_err() {
        return page(StatusCode::INTERNAL_SERVER_ERROR, "Sign-in failed", "<p>No randomness for a code.</p>");
    }
    let code = URL_SAFE_NO_PAD.encode(bytes);
    let now = clock.now();
    let pending = Pending {
        email,
        client_id: audience.to_owned(),
        redirect_uri: redirect.to_owned(),
        challenge: challenge.to_owned(),
        nonce: r.nonce.clone(),
        expires: now + CODE_TTL,
    };
    if let Ok(mut map) = codes.0.lock() {
        map.retain(|_, p| p.expires > now);
        map.insert(code.clone(), pending);
    }
    let sep = if redirect.contains('?') { '&' } else { '?' };
    let location = format!("{redirect}{sep}code={}&state={}", encode(&code), encode(client_state));
    (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response()
}

#[derive(Debug, Deserialize)]
pub(crate) struct TokenRequest {
    grant_type: Option<String>,
    code: Option<String>,
    redirect_uri: Option<String>,
    client_id: Option<String>,
    code_verifier: Option<String>,
}

/// The code exchanged, once, for an ID token carrying the request's nonce,
/// answered as OAuth 2.0 and OpenID Connect say a token response is
/// (RFC 6749 §5.1, OIDC Core §3.1.3.3): an `access_token` (opaque: this
/// provider serves no resource but the ID token's platform), `token_type`
/// `Bearer`, `expires_in`, the `scope` granted and the `id_token`, with
/// `Cache-Control: no-store` and `Pragma: no-cache`, so a stock client
/// library completes the flow against it.
pub(crate) async fn token(State(state): State<DevState>, Form(t): Form<TokenRequest>) -> Response {
    let (idp, audience, clock, codes) = state.parts();
    if t.grant_type.as_deref() != Some("authorization_code") {
        return oauth_error("unsupported_grant_type", "grant_type must be authorization_code");
    }
    let now = clock.now();
    let taken = codes.0.lock().ok().and_then(|mut m| m.remove(t.code.as_deref().unwrap_or_default()));
    let Some(p) = taken.filter(|p| p.expires > now) else {
        return oauth_error("invalid_grant", "the code is unknown, used or expired");
    };
    if t.client_id.as_deref() != Some(&p.client_id) || t.redirect_uri.as_deref() != Some(&p.redirect_uri) {
        return oauth_error(
            "invalid_grant",
            "client_id and redirect_uri must be the authorization request's",
        );
    }
    if t.code_verifier.as_deref().map(challenge).as_deref() != Some(&p.challenge) {
        return oauth_error("invalid_grant", "the code_verifier does not match the code_challenge");
    }
    let mut access = [0u8; 32];
    let issued = getrandom::fill(&mut access).map_err(|e| e.to_string()).and_then(|()| {
        idp.issue_with_nonce(&p.email, audience, TOKEN_TTL, now, p.nonce.as_deref())
            .map_err(|e| e.to_string())
    });
    match issued {
        Ok(id_token) => no_store(
            StatusCode::OK,
            json!({
                "access_token": URL_SAFE_NO_PAD.encode(access),
                "token_type": "Bearer",
                "expires_in": TOKEN_TTL.as_secs(),
                "scope": "openid email",
                "id_token": id_token,
            }),
        ),
        Err(e) => {
            tracing::error!(error = %e, "the development identity provider could not issue a token");
            no_store(StatusCode::INTERNAL_SERVER_ERROR, json!({"error": "server_error"}))
        }
    }
}

/// A token endpoint's answer: never cached (RFC 6749 §5.1 and §5.2).
fn no_store(status: StatusCode, body: serde_json::Value) -> Response {
    (status, [(header::CACHE_CONTROL, "no-store"), (header::PRAGMA, "no-cache")], axum::Json(body))
        .into_response()
}

/// An RFC 6749 §5.2 error answer.
fn oauth_error(error: &str, description: &str) -> Response {
    no_store(StatusCode::BAD_REQUEST, json!({"error": error, "error_description": description}))
}

fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let html = format!(
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>{title} · mapi dev identity provider</title>
<style>body{{font:16px/1.5 system-ui,sans-serif;max-width:36rem;margin:3rem auto;padding:0 1rem;color:#1a1a1a}}ul{{list-style:none;padding:0}}li{{margin:.5rem 0}}button{{font:inherit;padding:.5rem 1rem;border:1px solid #1f4e8c;background:#1f4e8c;color:#fff;border-radius:4px;cursor:pointer;min-width:16rem;text-align:left}}button:focus-visible{{outline:3px solid #f0a500;outline-offset:2px}}fieldset{{border:1px solid #767676;border-radius:4px}}</style></head>
<body><main><h1>{title}</h1>{body}</main></body></html>"#
    );
    (status, [(header::CACHE_CONTROL, "no-store")], Html(html)).into_response()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

#[cfg(test)]
mod tests {
    use super::loopback;

    #[test]
    fn only_this_machine_s_loopback_over_http_is_a_native_client_s_redirect() {
        for ok in [
            "http://127.0.0.1:53682/callback",
            "http://[::1]:8080/cb",
            "http://localhost:9/",
            "http://127.0.0.1/x",
        ] {
            assert!(loopback(ok), "{ok}");
        }
        for bad in [
            "https://127.0.0.1:1/cb",
            "http://127.0.0.1.evil.test/cb",
            "http://evil.test/?127.0.0.1",
            "http://127.0.0.2:80/",
            "http://localhost.evil.test:80/",
            "http://user@evil.test:1/",
        ] {
            assert!(!loopback(bad), "{bad}");
        }
    }
}
