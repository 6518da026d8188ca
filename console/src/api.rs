//! The console's client of the platform's API: the person's session secret
//! as the bearer, answers decoded into the fields a page shows, and a
//! refusal kept as the API gave it (status, problem code, detail), so the
//! page explains exactly what the API said.

use axum::http::StatusCode;
use reqwest::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Console;
use crate::session::Viewer;

/// The API's refusal, or why it could not be asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    /// The problem's stable code (`FORBIDDEN`, `NOT_FOUND`, …).
    pub code: String,
    pub detail: String,
}

impl Refusal {
    /// A form the console itself refuses before asking the API (400
    /// `INVALID_ARGUMENT`, as the API would say it), with what to fix.
    pub fn invalid(detail: impl Into<String>) -> Refusal {
        Refusal { status: StatusCode::BAD_REQUEST, code: "INVALID_ARGUMENT".into(), detail: detail.into() }
    }

    fn unreachable(e: &reqwest::Error) -> Refusal {
        Refusal {
            status: StatusCode::BAD_GATEWAY,
            code: "UNAVAILABLE".into(),
            detail: format!("the platform's API could not be reached ({e})"),
        }
    }
}

/// Calls the API as one person.
#[derive(Clone, Debug)]
pub struct Api<'c> {
    console: &'c Console,
    secret: String,
}

impl<'c> Api<'c> {
    pub fn new(console: &'c Console, viewer: &Viewer) -> Api<'c> {
        Api::for_secret(console, &viewer.secret)
    }

    pub(crate) fn for_secret(console: &'c Console, secret: &str) -> Api<'c> {
        Api { console, secret: secret.to_owned() }
    }

    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.console
            .http
            .request(method, format!("{}{path}", self.console.public_url()))
            .bearer_auth(&self.secret)
    }

    /// `GET path` (with its query).
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, Refusal> {
        answer(self.request(Method::GET, path)).await
    }

    /// `GET path` of a body that is not JSON (an item's NDJSON log), as text.
    pub async fn text(&self, path: &str) -> Result<String, Refusal> {
        let response = self.request(Method::GET, path).send().await.map_err(|e| Refusal::unreachable(&e))?;
        if response.status().is_success() {
            return response.text().await.map_err(|e| Refusal::unreachable(&e));
        }
        refusal(response).await
    }

    /// `GET path` of a route that answers `303 See Other` (an output's download): where it sends.
    pub async fn redirect(&self, path: &str) -> Result<String, Refusal> {
        let response = self.request(Method::GET, path).send().await.map_err(|e| Refusal::unreachable(&e))?;
        let location = response.headers().get(reqwest::header::LOCATION).and_then(|l| l.to_str().ok());
        match (response.status().as_u16(), location) {
            (303, Some(l)) => Ok(l.to_owned()),
            _ => refusal(response).await,
        }
    }

    /// `method path` with a JSON body.
    pub async fn send<T: DeserializeOwned, B: Serialize + ?Sized>(
        &self,
        method: Method,
        path: &str,
        body: &B,
    ) -> Result<T, Refusal> {
        answer(self.request(method, path).json(body)).await
    }

    /// `POST path` without a body.
    pub async fn post_empty<T: DeserializeOwned>(&self, path: &str) -> Result<T, Refusal> {
        answer(self.request(Method::POST, path)).await
    }

    /// `DELETE path`; the answer's body is not needed.
    pub async fn delete(&self, path: &str) -> Result<(), Refusal> {
        answer::<serde_json::Value>(self.request(Method::DELETE, path)).await.map(|_| ())
    }

    /// `POST path` with raw bytes of `content_type` (a dataset upload).
    pub async fn upload<T: DeserializeOwned>(
        &self,
        path: &str,
        content_type: &str,
        bytes: Vec<u8>,
    ) -> Result<T, Refusal> {
        answer(
            self.request(Method::POST, path).header(reqwest::header::CONTENT_TYPE, content_type).body(bytes),
        )
        .await
    }
}

async fn answer<T: DeserializeOwned>(request: reqwest::RequestBuilder) -> Result<T, Refusal> {
    let response = request.send().await.map_err(|e| Refusal::unreachable(&e))?;
    if !response.status().is_success() {
        return refusal(response).await;
    }
    let bytes = response.bytes().await.map_err(|e| Refusal::unreachable(&e))?;
    let body = if bytes.is_empty() { b"null".as_slice() } else { &bytes };
    serde_json::from_slice(body).map_err(|e| Refusal {
        status: StatusCode::BAD_GATEWAY,
        code: "INTERNAL".into(),
        detail: format!("the API's answer is not what the console expects ({e})"),
    })
}

/// An error answer as a refusal: the problem's code and detail.
async fn refusal<T>(response: reqwest::Response) -> Result<T, Refusal> {
    let status = StatusCode::from_u16(response.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let bytes = response.bytes().await.map_err(|e| Refusal::unreachable(&e))?;
    let problem: Option<mapi_api::problem::Problem> = serde_json::from_slice(&bytes).ok();
    Err(match problem {
        Some(p) => Refusal { status, code: p.code.as_str().to_owned(), detail: p.detail },
        None => Refusal {
            status,
            code: status.as_str().into(),
            detail: "the API refused without saying why".into(),
        },
    })
}

/// `?k=v&…` of the pairs whose value is present and not empty.
pub fn query(pairs: &[(&str, Option<&str>)]) -> String {
    let kept: Vec<(&str, &str)> =
        pairs.iter().filter_map(|(k, v)| v.filter(|v| !v.is_empty()).map(|v| (*k, v))).collect();
    if kept.is_empty() { String::new() } else { format!("?{}", mapi_oidc::code_flow::form(&kept)) }
}
