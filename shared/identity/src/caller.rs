//! The `Caller` extractor: a session or an API token, authenticated, with
//! the request's IP address and user agent kept as keyed hashes.
//!
//! Every failure answers 401 UNAUTHENTICATED. How it is recorded depends on
//! whom the credential names:
//!
//! - **no one** (a token whose hash matches nothing, a bearer that is
//!   neither a token nor a session, a session token that does not verify,
//!   sessions not configured): counted, and audited once per source a
//!   minute ([`crate::refusals`]). A session that verified but has expired
//!   is one of these: the verifier reports `Expired` without the claims,
//!   and reading the e-mail from an unverified payload here would make
//!   this module a second verifier.
//! - **a known principal** (a token that exists but is revoked or expired,
//!   a token over its rate limit, a verified session with an unusable
//!   e-mail): audited each time, naming the token's owner, tenant and
//!   project where there is a token.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use mapi_domain::UserId;
use mapi_metrics::AuthRefusal;
use mapi_problem::{ApiError, ProblemCode};
use mapi_schema::{ConsoleSessionDoc, Outcome, TokenDoc, TokenMinuteDoc};

use crate::{Audit, IdentityState, audit};

/// Who is calling.
#[derive(Clone, Debug, PartialEq)]
pub enum Principal {
    /// A person, through their verified ID token.
    Session { user: UserId, operator: bool },
    /// An API token, acting as its owner.
    Token(Box<TokenDoc>),
    /// Nobody: a request without credentials, to a route that serves anyone
    /// where the resource says so (a public endpoint's scores; see
    /// [`Anonymous`]). It is no member of anything: authorization looks up
    /// no membership for it and grants it nothing.
    Anonymous,
}

/// The user an anonymous caller stands for where a user must be named: an
/// address under `.invalid` (RFC 2606), which no person can hold, and which
/// authorization never looks up.
static ANONYMOUS: std::sync::LazyLock<UserId> =
    std::sync::LazyLock::new(|| UserId::parse("anonymous@mapi.invalid").expect("a valid address"));

/// The words of a 401 for a request without credentials.
const SEND_CREDENTIALS: &str = "send a session or an API token as `Authorization: Bearer …` (`mapi login`, or the token `mapi dev` writes to $MAPI_HOME/credentials.json)";

/// Hashes of the request's origin, for the audit log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestMeta {
    pub ip_hash: Option<String>,
    pub user_agent_hash: Option<String>,
}

/// The authenticated caller of a tenant-facing route.
#[derive(Clone, Debug, PartialEq)]
pub struct Caller {
    pub principal: Principal,
    pub meta: RequestMeta,
}

impl Caller {
    /// The person acting (the token's owner for a token).
    pub fn user(&self) -> &UserId {
        match &self.principal {
            Principal::Session { user, .. } => user,
            Principal::Token(t) => &t.user,
            Principal::Anonymous => &ANONYMOUS,
        }
    }

    /// A request without credentials.
    pub fn is_anonymous(&self) -> bool {
        matches!(self.principal, Principal::Anonymous)
    }

    /// Refuses a request without credentials (401), where only a known caller may act.
    pub fn require_credentials(&self) -> Result<(), ApiError> {
        if self.is_anonymous() {
            return Err(ApiError::new(ProblemCode::Unauthenticated, SEND_CREDENTIALS));
        }
        Ok(())
    }

    /// An operator acting through a session.
    pub fn is_operator(&self) -> bool {
        matches!(self.principal, Principal::Session { operator: true, .. })
    }

    pub fn token(&self) -> Option<&TokenDoc> {
        match &self.principal {
            Principal::Token(t) => Some(t),
            Principal::Session { .. } | Principal::Anonymous => None,
        }
    }

    /// Refuses a token where only a person may act.
    pub fn require_session(&self, what: &str) -> Result<(), ApiError> {
        match self.principal {
            Principal::Session { .. } => Ok(()),
            Principal::Token(_) => {
                Err(ApiError::forbidden(format!("{what} needs a signed-in person: API tokens cannot do it")))
            }
            Principal::Anonymous => Err(ApiError::new(ProblemCode::Unauthenticated, SEND_CREDENTIALS)),
        }
    }
}

/// The credential of an `Authorization: Bearer …` header, trimmed.
pub fn bearer(parts: &Parts) -> Option<&str> {
    let value = parts.headers.get(axum::http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token.trim())
}

/// The client's address: the LAST `X-Forwarded-For` entry, else the peer.
///
/// Google's front ends (Cloud Run's, a load balancer's) append the address
/// they received the request from, so the last entry is the one the closest
/// proxy wrote; every entry before it is whatever the client sent.
fn client_ip(parts: &Parts) -> Option<String> {
    let forwarded = parts.headers.get("x-forwarded-for").and_then(|v| v.to_str().ok());
    forwarded
        .and_then(|v| v.rsplit(',').next())
        .map(str::trim)
        .filter(|ip| !ip.is_empty())
        .map(str::to_owned)
        .or_else(|| {
            parts
                .extensions
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                .map(|c| c.0.ip().to_string())
        })
}

/// The request's origin, hashed.
pub fn request_meta<S: IdentityState>(parts: &Parts, state: &S) -> RequestMeta {
    let user_agent = parts.headers.get(axum::http::header::USER_AGENT).and_then(|v| v.to_str().ok());
    RequestMeta {
        ip_hash: client_ip(parts).map(|ip| state.pepper().short_hash("ip", &ip)),
        user_agent_hash: user_agent.map(|ua| state.pepper().short_hash("ua", ua)),
    }
}

/// A refusal whose credential names no one: counted under `reason`, and
/// audited once per source a minute.
async fn refuse_anonymous<S: IdentityState>(
    state: &S,
    meta: &RequestMeta,
    reason: AuthRefusal,
    action: &str,
    resource: String,
    detail: &str,
) -> ApiError {
    let mut entry = Audit::anonymous(action, resource)
        .outcome(Outcome::Denied, ProblemCode::Unauthenticated)
        .detail(detail);
    entry.meta = meta.clone();
    crate::refusals::record(state, reason, entry).await;
    ApiError::unauthenticated(detail.to_owned())
}

/// An entry about a refused use of `token`, naming its owner, tenant and
/// project.
fn token_refusal(
    token: &TokenDoc,
    action: &str,
    problem: ProblemCode,
    detail: &str,
    meta: &RequestMeta,
) -> Audit {
    let mut entry = Audit::anonymous(action, format!("tokens/{}", token.public_id()))
        .tenant(&token.tenant)
        .project(&token.project)
        .outcome(Outcome::Denied, problem)
        .detail(detail);
    entry.actor = Some(token.user.clone());
    entry.token = Some(token.public_id().to_owned());
    entry.meta = meta.clone();
    entry
}

async fn token_caller<S: IdentityState>(
    state: &S,
    secret: &str,
    meta: RequestMeta,
) -> Result<Caller, ApiError> {
    let hash = state.pepper().hash(secret);
    let found: Option<TokenDoc> = mapi_schema::get(state.store(), &hash)
        .await
        .map_err(|e| ApiError::internal_from("token lookup", e))?;
    let Some(token) = found else {
        let resource = format!("tokens/{}", &hash[..12]);
        let detail = "the API token is not valid";
        return Err(refuse_anonymous(
            state,
            &meta,
            AuthRefusal::UnknownToken,
            "token.use_failed",
            resource,
            detail,
        )
        .await);
    };
    let stale = if token.revoked_at.is_some() {
        Some("the API token was revoked")
    } else if token.expires_at <= state.clock().now() {
        Some("the API token has expired: mint a new one")
    } else {
        None
    };
    if let Some(detail) = stale {
        audit(state, token_refusal(&token, "token.use_failed", ProblemCode::Unauthenticated, detail, &meta))
            .await;
        return Err(ApiError::unauthenticated(detail));
    }
    if let Some(limit) = token.rate_limit_per_minute {
        within_rate_limit(state, &token, limit, &meta).await?;
    }
    Ok(Caller { principal: Principal::Token(Box::new(token)), meta })
}

/// Counts this request against the token's per-minute limit; over it,
/// 429 RATE_LIMITED with the seconds until the minute ends.
async fn within_rate_limit<S: IdentityState>(
    state: &S,
    token: &TokenDoc,
    limit: u32,
    meta: &RequestMeta,
) -> Result<(), ApiError> {
    let now = state.clock().now();
    let minute = now.as_secs().div_euclid(60);
    let id = format!("{}:{minute}", token.public_id());
    let (id_ref, token_id) = (&id, token.public_id());
    let counted = mapi_store::transact::<_, ApiError, _, _>(state.store(), |mut tx| async move {
        let mut doc = mapi_schema::tx_get::<TokenMinuteDoc>(&mut tx, id_ref)
            .await?
            .unwrap_or(TokenMinuteDoc { token: token_id.to_owned(), minute, requests: 0 });
        if doc.requests >= limit {
            return Ok(tx.finish(false));
        }
        doc.requests += 1;
        mapi_schema::tx_put(&mut tx, &doc)?;
        Ok(tx.finish(true))
    })
    .await?;
    if counted {
        return Ok(());
    }
    let retry = u64::try_from(60 - now.as_secs().rem_euclid(60)).unwrap_or(60);
    let detail = format!("token limit: {limit} requests a minute; retry in {retry} s");
    audit(state, token_refusal(token, "token.rate_limited", ProblemCode::RateLimited, &detail, meta)).await;
    Err(ApiError::Problem { code: ProblemCode::RateLimited, detail, retry_after_s: Some(retry) })
}

async fn session_caller<S: IdentityState>(
    state: &S,
    jwt: &str,
    meta: RequestMeta,
) -> Result<Caller, ApiError> {
    let refused = "auth.session_refused";
    let Some(verifier) = state.sessions() else {
        let detail = "sessions are not configured on this deployment: use an API token";
        return Err(refuse_anonymous(
            state,
            &meta,
            AuthRefusal::NoSessions,
            refused,
            "sessions".into(),
            detail,
        )
        .await);
    };
    let claims = match verifier.verify(jwt).await {
        Ok(c) => c,
        Err(e) => {
            let detail = format!("the session is not valid ({}): sign in again", e.reason());
            return Err(refuse_anonymous(
                state,
                &meta,
                AuthRefusal::BadSession,
                refused,
                "sessions".into(),
                &detail,
            )
            .await);
        }
    };
    let user = match UserId::parse(&claims.email) {
        Ok(u) => u,
        Err(_) => {
            // Verified by the provider: a known principal, audited each time.
            let detail = "the session's e-mail is not usable";
            let mut entry = Audit::anonymous(refused, "sessions")
                .outcome(Outcome::Denied, ProblemCode::Unauthenticated)
                .detail(detail);
            entry.meta = meta;
            audit(state, entry).await;
            return Err(ApiError::unauthenticated(detail));
        }
    };
    let operator = state.is_operator(&user);
    Ok(Caller { principal: Principal::Session { user, operator }, meta })
}

/// The person of a console session, while it exists and has not expired.
/// A session that matches nothing names no one (signed out, or never made).
pub async fn console_caller<S: IdentityState>(
    state: &S,
    secret: &str,
    meta: RequestMeta,
) -> Result<Caller, ApiError> {
    let hash = state.pepper().hash(secret);
    let found: Option<ConsoleSessionDoc> = mapi_schema::get(state.store(), &hash)
        .await
        .map_err(|e| ApiError::internal_from("console session lookup", e))?;
    match found {
        Some(s) if s.expires_at > state.clock().now() => {
            let operator = state.is_operator(&s.user);
            Ok(Caller { principal: Principal::Session { user: s.user, operator }, meta })
        }
        _ => Err(refuse_anonymous(
            state,
            &meta,
            AuthRefusal::BadSession,
            "auth.session_refused",
            "console_sessions".into(),
            "the console session has ended: sign in again",
        )
        .await),
    }
}

impl<S: IdentityState> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let meta = request_meta(parts, state);
        match bearer(parts) {
            Some(t) if t.starts_with("mapi_") => token_caller(state, t, meta).await,
            Some(t) if t.starts_with(crate::CONSOLE_SESSION_PREFIX) => console_caller(state, t, meta).await,
            Some(t) if t.split('.').count() == 3 => session_caller(state, t, meta).await,
            Some(_) => Err(refuse_anonymous(
                state,
                &meta,
                AuthRefusal::NotACredential,
                "auth.failed",
                "credentials".into(),
                "the bearer credential is neither an API token nor a session",
            )
            .await),
            None => Err(ApiError::new(ProblemCode::Unauthenticated, SEND_CREDENTIALS)),
        }
    }
}

/// A caller of a route that may serve anyone: the [`Caller`] its
/// credentials name, or, with no `Authorization` header at all,
/// [`Principal::Anonymous`]. Credentials that do not verify are refused as
/// everywhere (never read as no credentials). The handler decides what an
/// anonymous caller may do (a public endpoint's scores, nothing else).
#[derive(Clone, Debug, PartialEq)]
pub struct Anonymous(pub Caller);

impl<S: IdentityState> FromRequestParts<S> for Anonymous {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        if parts.headers.contains_key(axum::http::header::AUTHORIZATION) {
            return Ok(Anonymous(Caller::from_request_parts(parts, state).await?));
        }
        let meta = request_meta(parts, state);
        Ok(Anonymous(Caller { principal: Principal::Anonymous, meta }))
    }
}

/// A call from the platform's own infrastructure (queue deliveries, the
/// scheduler's tick, event pushes), authenticated with the internal token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InternalCaller;

impl<S: IdentityState> FromRequestParts<S> for InternalCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let expected = state.internal_token();
        let given = bearer(parts).unwrap_or_default();
        // Compare MACs of both, so the comparison time does not depend on
        // how much of the token matched.
        let pepper = state.pepper();
        if !expected.is_empty() && pepper.hash(given) == pepper.hash(expected) {
            return Ok(InternalCaller);
        }
        let Some(invoker) = state.task_invoker() else {
            return Err(ApiError::unauthenticated("internal routes need the platform's internal token"));
        };
        if given.is_empty() {
            return Err(ApiError::unauthenticated(
                "internal routes need `Authorization: Bearer` with the internal token or the task queue's ID token",
            ));
        }
        match invoker.check(given).await {
            Ok(()) => Ok(InternalCaller),
            Err(refusal) => {
                tracing::warn!(detail = %refusal, "internal route refused a bearer token");
                Err(ApiError::unauthenticated(format!(
                    "internal routes need the internal token or an ID token of {} for {}: {refusal}",
                    invoker.service_account(),
                    invoker.audience()
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(forwarded: Option<&str>) -> Parts {
        let mut request = axum::http::Request::builder();
        if let Some(v) = forwarded {
            request = request.header("x-forwarded-for", v);
        }
        let mut parts = request.body(()).expect("request").into_parts().0;
        let peer: std::net::SocketAddr = "192.0.2.1:4000".parse().expect("address");
        parts.extensions.insert(axum::extract::ConnectInfo(peer));
        parts
    }

    #[test]
    fn the_client_is_the_last_forwarded_entry_not_the_first() {
        let spoofed = parts(Some("198.51.100.66, 203.0.113.7"));
        assert_eq!(client_ip(&spoofed).as_deref(), Some("203.0.113.7"), "the client's own entry is ignored");
        assert_eq!(client_ip(&parts(Some("203.0.113.7"))).as_deref(), Some("203.0.113.7"));
        assert_eq!(
            client_ip(&parts(Some("198.51.100.66, "))).as_deref(),
            Some("192.0.2.1"),
            "empty: the peer"
        );
        assert_eq!(client_ip(&parts(None)).as_deref(), Some("192.0.2.1"), "no header: the peer");
    }
}
