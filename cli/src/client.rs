//! A small typed client of the platform's HTTP API, used by the commands.

use std::time::Duration;

use mapi_api::problem::Problem;
use serde::de::DeserializeOwned;

/// Why a command's request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The platform answered with a problem.
    #[error("{} ({}): {}{}", .0.code, .0.status, .0.detail, sign_in_hint(.0.status))]
    Problem(Box<Problem>),
    /// No answer came: the cause (`Connection refused`, a timeout) is said.
    #[error("cannot reach the platform at {url}: {cause}{hint}", cause = with_causes(source), hint = start_hint(url))]
    Unreachable { url: String, source: reqwest::Error },
    #[error("unexpected answer {status}: {body}")]
    Unexpected { status: u16, body: String },
}

/// An error and every cause under it, `: `-joined (`error sending request
/// for url (…): client error (Connect): tcp connect error: Connection refused`).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let said = c.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = c.source();
    }
    text
}

/// What to do about a 401: the token is missing, wrong, expired or revoked.
fn sign_in_hint(status: u16) -> &'static str {
    if status == 401 { " (sign in again with `mapi login`, or set MAPI_TOKEN to a valid token)" } else { "" }
}

/// What to try when a platform on this machine does not answer.
fn start_hint(url: &str) -> &'static str {
    if is_local(url) { " (is `mapi dev` running? start it in another terminal)" } else { "" }
}

/// `name` (a method's name, an id) as one path segment: anything but a
/// name's own characters is percent-encoded, so a `/`, `?` or `#` in what
/// a person typed cannot reach another route.
pub fn segment(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'_' | b'-' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Whether `url` names a platform on this machine (a loopback host).
pub fn is_local(url: &str) -> bool {
    let host = url.split("://").nth(1).unwrap_or(url);
    ["127.0.0.1", "localhost", "[::1]"].iter().any(|h| host.starts_with(h))
}

/// The platform at `url`, as `token`.
#[derive(Clone, Debug)]
pub struct Client {
    pub url: String,
    token: String,
    http: reqwest::Client,
}

impl Client {
    pub fn new(url: &str, token: &str) -> Client {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(120)).build().unwrap_or_default();
        Client { url: url.trim_end_matches('/').to_owned(), token: token.to_owned(), http }
    }

    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, format!("{}{path}", self.url)).bearer_auth(&self.token)
    }

    /// Sends and decodes a JSON answer; problems become [`ClientError::Problem`].
    pub async fn send<T: DeserializeOwned>(&self, req: reqwest::RequestBuilder) -> Result<T, ClientError> {
        let (status, bytes) = self.answer(req).await?;
        // 204 (a delete) has no body: it reads as `null`, which `()` takes.
        let body: &[u8] = if bytes.is_empty() { b"null" } else { &bytes };
        serde_json::from_slice(body).map_err(|e| ClientError::Unexpected {
            status,
            body: format!("{e}: {}", String::from_utf8_lossy(&bytes).chars().take(200).collect::<String>()),
        })
    }

    /// Sends and returns a 2xx answer's bytes (after any redirect, which
    /// carries the token only to the platform itself); problems become
    /// [`ClientError::Problem`].
    pub async fn bytes(&self, req: reqwest::RequestBuilder) -> Result<Vec<u8>, ClientError> {
        Ok(self.answer(req).await?.1)
    }

    async fn answer(&self, req: reqwest::RequestBuilder) -> Result<(u16, Vec<u8>), ClientError> {
        let resp =
            req.send().await.map_err(|source| ClientError::Unreachable { url: self.url.clone(), source })?;
        let status = resp.status().as_u16();
        let bytes = resp
            .bytes()
            .await
            .map_err(|source| ClientError::Unreachable { url: self.url.clone(), source })?;
        if (200..300).contains(&status) {
            return Ok((status, bytes.to_vec()));
        }
        match serde_json::from_slice::<Problem>(&bytes) {
            Ok(p) => Err(ClientError::Problem(Box::new(p))),
            Err(_) => Err(ClientError::Unexpected {
                status,
                body: String::from_utf8_lossy(&bytes).chars().take(500).collect(),
            }),
        }
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.send(self.request(reqwest::Method::GET, path)).await
    }
}

#[cfg(test)]
mod tests {
    use super::{segment, start_hint, with_causes};

    #[test]
    fn a_name_is_one_path_segment() {
        assert_eq!(segment("tabular.linear"), "tabular.linear");
        assert_eq!(segment("mv_01ARZ3"), "mv_01ARZ3");
        assert_eq!(segment("../usage?x=1#y"), "..%2Fusage%3Fx%3D1%23y");
    }

    #[test]
    fn an_unreachable_local_platform_suggests_starting_mapi_dev() {
        assert!(start_hint("http://127.0.0.1:8080").contains("mapi dev"));
        assert!(start_hint("http://localhost:8080").contains("mapi dev"));
        assert_eq!(start_hint("https://mapi.example.com"), "");
    }

    #[test]
    fn an_error_is_said_with_its_causes() {
        #[derive(Debug, thiserror::Error)]
        #[error("sending failed")]
        struct Outer(#[source] std::io::Error);
        let e = Outer(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused"));
        assert_eq!(with_causes(&e), "sending failed: Connection refused");
    }
}
