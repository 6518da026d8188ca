//! The relying party's half of the OIDC authorization-code flow with PKCE
//! (RFC 6749 §4.1, RFC 7636 with `S256`, OpenID Connect Core §3.1): the
//! secrets one sign-in needs, the URL the browser is sent to, and the
//! exchange of the code for an ID token at the issuer's token endpoint.
//! The ID token is then verified by the same [`crate::Verifier`] as every
//! session, and its `nonce` compared with the one sent.

use aws_lc_rs::digest::{SHA256, digest};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use thiserror::Error;

/// Where an issuer's discovery document is, under the issuer URL.
pub const DISCOVERY_PATH: &str = "/.well-known/openid-configuration";

/// Why a sign-in could not go on.
#[derive(Debug, Error)]
pub enum CodeFlowError {
    #[error("no randomness for the sign-in's secrets")]
    Random,
    #[error("the identity provider could not be reached: {0}")]
    Unreachable(#[source] reqwest::Error),
    #[error("the identity provider answered {status}: {detail}")]
    Refused { status: u16, detail: String },
    #[error("the identity provider's answer is not what OpenID Connect specifies")]
    Malformed,
}

/// The endpoints of an issuer's discovery document that the flow uses.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Discovery {
    pub issuer: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
}

/// The secrets of one authorization request: `state` (binds the answer to
/// the browser that asked), `nonce` (binds the ID token to the request) and
/// the PKCE verifier (binds the code to whoever holds it). Each is 32
/// random bytes, base64url without padding (43 characters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub state: String,
    pub nonce: String,
    pub verifier: String,
}

impl Request {
    pub fn new() -> Result<Request, CodeFlowError> {
        Ok(Request { state: random()?, nonce: random()?, verifier: random()? })
    }

    /// The browser's destination: the authorization endpoint asking for
    /// `openid email` with this request's state, nonce and S256 challenge.
    pub fn authorization_url(&self, discovery: &Discovery, client_id: &str, redirect_uri: &str) -> String {
        let query = [
            ("response_type", "code"),
            ("client_id", client_id),
            ("redirect_uri", redirect_uri),
            ("scope", "openid email"),
            ("state", &self.state),
            ("nonce", &self.nonce),
            ("code_challenge", &challenge(&self.verifier)),
            ("code_challenge_method", "S256"),
        ];
        let sep = if discovery.authorization_endpoint.contains('?') { '&' } else { '?' };
        format!("{}{sep}{}", discovery.authorization_endpoint, form(&query))
    }
}

/// The S256 challenge of a verifier: base64url(SHA-256(verifier)).
pub fn challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(digest(&SHA256, verifier.as_bytes()))
}

fn random() -> Result<String, CodeFlowError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|_| CodeFlowError::Random)?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// `application/x-www-form-urlencoded` of the pairs.
pub fn form(pairs: &[(&str, &str)]) -> String {
    pairs.iter().map(|(k, v)| format!("{}={}", encode(k), encode(v))).collect::<Vec<_>>().join("&")
}

/// Percent-encodes everything but the unreserved characters of RFC 3986.
pub fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => out.push(char::from(b)),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Reads the issuer's discovery document at `url` (the issuer's URL and
/// [`DISCOVERY_PATH`]).
pub async fn discover(http: &reqwest::Client, url: &str) -> Result<Discovery, CodeFlowError> {
    let answer = http.get(url).send().await.map_err(CodeFlowError::Unreachable)?;
    let status = answer.status();
    let body = answer.bytes().await.map_err(CodeFlowError::Unreachable)?;
    if !status.is_success() {
        return Err(refused(status.as_u16(), &body));
    }
    serde_json::from_slice(&body).map_err(|_| CodeFlowError::Malformed)
}

/// What the token endpoint needs besides the code.
#[derive(Clone, Copy, Debug)]
pub struct Client<'a> {
    pub id: &'a str,
    /// A confidential client's secret, sent in the body
    /// (`client_secret_post`); a public client has none.
    pub secret: Option<&'a str>,
    pub redirect_uri: &'a str,
}

#[derive(Deserialize)]
struct TokenAnswer {
    id_token: String,
}

/// Exchanges `code` for the ID token, proving the request with `verifier`.
pub async fn exchange(
    http: &reqwest::Client,
    discovery: &Discovery,
    client: Client<'_>,
    code: &str,
    verifier: &str,
) -> Result<String, CodeFlowError> {
    let mut pairs = vec![
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", client.redirect_uri),
        ("client_id", client.id),
        ("code_verifier", verifier),
    ];
    if let Some(secret) = client.secret {
        pairs.push(("client_secret", secret));
    }
    let answer = http
        .post(&discovery.token_endpoint)
        .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(reqwest::header::ACCEPT, "application/json")
        .body(form(&pairs))
        .send()
        .await
        .map_err(CodeFlowError::Unreachable)?;
    let status = answer.status();
    let body = answer.bytes().await.map_err(CodeFlowError::Unreachable)?;
    if !status.is_success() {
        return Err(refused(status.as_u16(), &body));
    }
    let token: TokenAnswer = serde_json::from_slice(&body).map_err(|_| CodeFlowError::Malformed)?;
    Ok(token.id_token)
}

/// An error answer: OAuth's `error` and `error_description` when the body
/// has them (RFC 6749 §5.2), else its first 200 characters.
fn refused(status: u16, body: &[u8]) -> CodeFlowError {
    #[derive(Deserialize)]
    struct OAuthError {
        error: String,
        error_description: Option<String>,
    }
    let detail = match serde_json::from_slice::<OAuthError>(body) {
        Ok(e) => match e.error_description {
            Some(d) => format!("{}: {d}", e.error),
            None => e.error,
        },
        Err(_) => String::from_utf8_lossy(body).chars().take(200).collect(),
    };
    CodeFlowError::Refused { status, detail }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_challenge_is_rfc_7636s_s256() {
        // RFC 7636, appendix B.
        let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        assert_eq!(challenge(verifier), "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
    }

    #[test]
    fn a_request_is_fresh_each_time_and_its_url_carries_everything() {
        let a = Request::new().expect("request");
        let b = Request::new().expect("request");
        assert_ne!(a, b);
        assert_eq!(a.verifier.len(), 43);
        let discovery = Discovery {
            issuer: "https://idp.example".into(),
            authorization_endpoint: "https://idp.example/auth".into(),
            token_endpoint: "https://idp.example/token".into(),
        };
        let url = a.authorization_url(&discovery, "mapi", "https://mapi.example/console/callback");
        assert!(url.starts_with("https://idp.example/auth?response_type=code&client_id=mapi&"));
        assert!(url.contains("redirect_uri=https%3A%2F%2Fmapi.example%2Fconsole%2Fcallback"));
        assert!(url.contains(&format!("code_challenge={}", challenge(&a.verifier))));
        assert!(url.contains("code_challenge_method=S256") && url.contains("scope=openid%20email"));
        assert!(!url.contains(&a.verifier), "the verifier never leaves the relying party");
    }

    #[test]
    fn an_oauth_error_is_reported_in_its_own_words() {
        let e = refused(400, br#"{"error":"invalid_grant","error_description":"the code was used"}"#);
        assert_eq!(e.to_string(), "the identity provider answered 400: invalid_grant: the code was used");
        assert!(refused(502, b"bad gateway").to_string().ends_with("bad gateway"));
    }
}
