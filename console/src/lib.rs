//! The web console: pages for people, served under `/console` by the admin
//! function (and by `mapi dev`).
//!
//! - **A client of the API.** Every page is rendered from the platform's
//!   own public API, called over HTTP at `MAPI_PUBLIC_URL` with the
//!   person's console session as the bearer ([`api`]). The console decides
//!   nothing: a viewer refused an action is refused by the API, and the
//!   page shows the API's status and detail.
//! - **Signed in through OIDC.** The authorization-code flow with PKCE
//!   against the configured issuer (the development identity provider in
//!   `mapi dev`) makes a console session: a random secret in an HttpOnly,
//!   SameSite=Lax cookie (Secure outside dev), stored only as its HMAC and
//!   deleted at sign-out ([`session`]). API tokens never sign in here.
//! - **Forms carry a CSRF token** derived from the session secret; a `POST`
//!   without the right one changes nothing ([`session::Posted`]).
//! - **Server-rendered HTML** ([`html`], maud), readable with JavaScript
//!   off; a few lines of the console's own JavaScript re-render the live
//!   sections (a run, its log, a job, an endpoint, a workflow run, an
//!   export) from their fragments until they are final, and follow a log.
//!   Charts are SVG drawn on the server ([`chart`]).

pub mod api;
pub mod chart;
pub mod html;
mod pages;
pub mod session;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use mapi_platform::AppState;

/// Where the console is.
pub const PREFIX: &str = "/console";

/// What every console handler has: the platform's state and the HTTP
/// client it calls the API with.
#[derive(Clone, Debug)]
pub struct Console {
    pub app: AppState,
    http: reqwest::Client,
    discovery: Arc<tokio::sync::OnceCell<mapi_oidc::code_flow::Discovery>>,
}

impl Console {
    pub fn new(app: AppState) -> Console {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .unwrap_or_default();
        Console { app, http, discovery: Arc::default() }
    }

    /// The platform's public URL, without a trailing slash.
    pub fn public_url(&self) -> &str {
        self.app.config.public_url.trim_end_matches('/')
    }

    /// The bytes at `url` (an object's signed link, which carries its own
    /// authority), up to `limit`, and whether there were more.
    pub async fn fetch_bytes(&self, url: &str, limit: usize) -> Result<(Vec<u8>, bool), api::Refusal> {
        let unreachable = |e: reqwest::Error| api::Refusal {
            status: axum::http::StatusCode::BAD_GATEWAY,
            code: "UNAVAILABLE".into(),
            detail: format!("the object store could not be read ({e})"),
        };
        let mut response = self.http.get(url).send().await.map_err(unreachable)?;
        if !response.status().is_success() {
            return Err(api::Refusal {
                status: axum::http::StatusCode::BAD_GATEWAY,
                code: "UNAVAILABLE".into(),
                detail: format!("the object store answered {}", response.status().as_u16()),
            });
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
            bytes.extend_from_slice(&chunk);
            if bytes.len() > limit {
                bytes.truncate(limit);
                return Ok((bytes, true));
            }
        }
        Ok((bytes, false))
    }

    /// Cookies are `Secure` everywhere but the dev profile on plain HTTP.
    pub fn secure_cookies(&self) -> bool {
        self.app.config.profile != mapi_platform::Profile::Dev || self.public_url().starts_with("https://")
    }
}

/// The console's routes.
pub fn router(app: AppState) -> Router {
    let max_dataset_bytes = app.config.max_dataset_bytes;
    let console = Console::new(app);
    Router::new()
        .route("/console", get(pages::home))
        .route("/console/assets/console.css", get(html::stylesheet))
        .route("/console/assets/console.js", get(html::script))
        .route("/console/sign-in", get(session::sign_in))
        .route("/console/callback", get(session::callback))
        .route("/console/sign-out", post(session::sign_out))
        .merge(pages::routes(max_dataset_bytes))
        .route("/console/{*rest}", get(pages::not_found))
        .with_state(console)
}
