//! The API's error type. Every handler of every function returns
//! `Result<_, ApiError>`; every error leaves as `application/problem+json`
//! (RFC 9457) with a stable `code` a program can switch on and a `detail`
//! that tells a person what to fix. Internal errors are logged with their
//! context and answered with a generic detail: nothing internal is echoed.

mod extract;
pub mod openapi;
pub mod wording;

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

pub use extract::{Json, Path, Query, RawBody, RawBytes, fallback_not_found, parse_json, require_json};

pub use mapi_api::problem::{Problem, ProblemCode};

/// The error every handler returns.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A problem to show the caller as it is.
    #[error("{code}: {detail}")]
    Problem { code: ProblemCode, detail: String, retry_after_s: Option<u64> },
    /// A fault of ours: the context and the chain of its source are logged
    /// (its `Display` is both, so a log line of it says what went wrong),
    /// the caller sees a generic detail.
    #[error("internal error: {context}{}", Chain(source.as_deref()))]
    Internal {
        context: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

impl ApiError {
    pub fn new(code: ProblemCode, detail: impl Into<String>) -> ApiError {
        ApiError::Problem { code, detail: detail.into(), retry_after_s: None }
    }

    pub fn invalid(detail: impl Into<String>) -> ApiError {
        ApiError::new(ProblemCode::InvalidArgument, detail)
    }

    pub fn not_found(detail: impl Into<String>) -> ApiError {
        ApiError::new(ProblemCode::NotFound, detail)
    }

    pub fn forbidden(detail: impl Into<String>) -> ApiError {
        ApiError::new(ProblemCode::Forbidden, detail)
    }

    pub fn unauthenticated(detail: impl Into<String>) -> ApiError {
        ApiError::new(ProblemCode::Unauthenticated, detail)
    }

    pub fn precondition(detail: impl Into<String>) -> ApiError {
        ApiError::new(ProblemCode::FailedPrecondition, detail)
    }

    /// 503 with a Retry-After.
    pub fn unavailable(detail: impl Into<String>, retry_after_s: u64) -> ApiError {
        ApiError::Problem {
            code: ProblemCode::Unavailable,
            detail: detail.into(),
            retry_after_s: Some(retry_after_s),
        }
    }

    /// 503 with a Retry-After whose detail is ours: `cause`, what failed
    /// underneath (a port's error), is logged, never echoed to the caller.
    pub fn unavailable_because(
        detail: impl Into<String>,
        retry_after_s: u64,
        cause: &dyn std::fmt::Display,
    ) -> ApiError {
        let detail = detail.into();
        tracing::warn!(error = %cause, %detail, "answered unavailable");
        ApiError::unavailable(detail, retry_after_s)
    }

    pub fn internal(context: impl Into<String>) -> ApiError {
        ApiError::Internal { context: context.into(), source: None }
    }

    /// A fault of ours caused by `source`, which the log keeps.
    pub fn internal_from(
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> ApiError {
        ApiError::Internal { context: context.into(), source: Some(source.into()) }
    }

    /// Whether this is a bug of ours rather than a fault of the moment: a
    /// port refused a use against its rules ([`mapi_store::StoreError::Misuse`]).
    /// Retrying the same request fails the same way.
    pub fn is_bug(&self) -> bool {
        let ApiError::Internal { source: Some(source), .. } = self else {
            return false;
        };
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(source.as_ref());
        while let Some(e) = next {
            if e.downcast_ref::<mapi_store::StoreError>().is_some_and(mapi_store::StoreError::is_misuse) {
                return true;
            }
            next = e.source();
        }
        false
    }

    pub fn code(&self) -> ProblemCode {
        match self {
            ApiError::Problem { code, .. } => *code,
            ApiError::Internal { .. } => ProblemCode::Internal,
        }
    }

    /// The body this error is answered with.
    pub fn problem(&self) -> Problem {
        let (code, detail, retry_after_s) = match self {
            ApiError::Problem { code, detail, retry_after_s } => (*code, detail.clone(), *retry_after_s),
            ApiError::Internal { .. } => (
                ProblemCode::Internal,
                "the platform failed to handle the request; it has been logged, retry later".to_owned(),
                None,
            ),
        };
        Problem { retry_after_s, ..Problem::new(code, detail) }
    }
}

/// An error's chain of sources, each after `: `; a source whose words the
/// chain already says (an error that writes its source into its own
/// message, as many do) is not said again.
struct Chain<'a>(Option<&'a (dyn std::error::Error + Send + Sync + 'static)>);

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut said = String::new();
        let mut next = self.0.map(|e| e as &(dyn std::error::Error + 'static));
        while let Some(e) = next {
            let text = e.to_string();
            if !said.contains(&text) {
                said.push_str(": ");
                said.push_str(&text);
            }
            next = e.source();
        }
        f.write_str(&said)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal { .. } = &self {
            tracing::error!(error = %self, "request failed");
        }
        let problem = self.problem();
        let status = problem.code.status();
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        let mut resp = (status, body).into_response();
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        if let Some(s) = problem.retry_after_s {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if problem.code == ProblemCode::Unauthenticated {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

/// Page sizes of list routes: 50 by default, at most 200.
pub fn page_size(requested: Option<u32>) -> Result<u32, ApiError> {
    count("page_size", requested, 50, 200)
}

/// How many of something a query asks for (`name`): `default` when absent, else 1 to `max`.
pub fn count(name: &str, requested: Option<u32>, default: u32, max: u32) -> Result<u32, ApiError> {
    match requested {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::invalid(format!("{name} {n} is out of range: use 1 to {max}"))),
    }
}

impl From<mapi_store::StoreError> for ApiError {
    fn from(e: mapi_store::StoreError) -> Self {
        use mapi_store::StoreError as E;
        match e {
            E::Aborted | E::Unavailable(_) => ApiError::unavailable("the store is busy: retry shortly", 1),
            E::InvalidArgument(m) if m.starts_with("invalid page_token") => ApiError::invalid(m),
            E::AlreadyExists(key) => {
                ApiError::new(ProblemCode::AlreadyExists, format!("{key} already exists"))
            }
            // Handlers that reserve quota answer this with the refused limit
            // (they re-check); this is the fallback for any that do not.
            E::LimitReached { key, field } => ApiError::new(
                ProblemCode::QuotaExceeded,
                format!("the limit on {field} of {key} was reached by a concurrent request: retry later"),
            ),
            other => ApiError::internal_from("store", other),
        }
    }
}

impl From<mapi_objects::ObjectError> for ApiError {
    fn from(e: mapi_objects::ObjectError) -> Self {
        match e {
            mapi_objects::ObjectError::Unavailable(_) => {
                ApiError::unavailable("the object store is busy: retry shortly", 1)
            }
            other => ApiError::internal_from("objects", other),
        }
    }
}

impl From<mapi_queue::QueueError> for ApiError {
    fn from(e: mapi_queue::QueueError) -> Self {
        match e {
            mapi_queue::QueueError::Unavailable(_) => {
                ApiError::unavailable("the queue is busy: retry shortly", 1)
            }
            other => ApiError::internal_from("queue", other),
        }
    }
}

/// A transition the state machine refused, asked for by the platform's
/// own code: a bug, never the caller's input.
impl From<mapi_domain::TransitionError> for ApiError {
    fn from(e: mapi_domain::TransitionError) -> Self {
        ApiError::internal_from("lifecycle", e)
    }
}

/// Encoding our own values failed: a bug, never the caller's input (which
/// the extractors answer before a handler runs).
impl From<serde_json::Error> for ApiError {
    fn from(e: serde_json::Error) -> Self {
        ApiError::internal_from("json", e)
    }
}

impl From<mapi_entropy::EntropyError> for ApiError {
    fn from(e: mapi_entropy::EntropyError) -> Self {
        ApiError::internal_from("randomness", e)
    }
}

impl From<mapi_domain::IdError> for ApiError {
    fn from(e: mapi_domain::IdError) -> Self {
        ApiError::invalid(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-written expectations for every code: status and wire name.
    #[test]
    fn codes_have_their_documented_status() {
        let spec = [
            ("INVALID_ARGUMENT", 400),
            ("UNAUTHENTICATED", 401),
            ("FORBIDDEN", 403),
            ("NOT_FOUND", 404),
            ("METHOD_NOT_ALLOWED", 405),
            ("REQUEST_TIMEOUT", 408),
            ("ALREADY_EXISTS", 409),
            ("SELF_APPROVAL_FORBIDDEN", 403),
            ("FAILED_PRECONDITION", 409),
            ("INTEGRITY_FAILURE", 409),
            ("GONE", 410),
            ("PRECONDITION_FAILED", 412),
            ("PAYLOAD_TOO_LARGE", 413),
            ("URI_TOO_LONG", 414),
            ("UNSUPPORTED_MEDIA_TYPE", 415),
            ("QUOTA_EXCEEDED", 429),
            ("RATE_LIMITED", 429),
            ("HEADERS_TOO_LARGE", 431),
            ("UNAVAILABLE", 503),
            ("INTERNAL", 500),
        ];
        assert_eq!(spec.len(), ProblemCode::ALL.len());
        for (name, status) in spec {
            let code: ProblemCode = name.parse().expect("known code");
            assert_eq!(code.status().as_u16(), status, "{name}");
        }
    }

    #[test]
    fn internal_errors_do_not_echo_their_context() {
        let p = ApiError::internal("sqlite: disk I/O error at /secret/path").problem();
        assert_eq!(p.code, ProblemCode::Internal);
        assert!(!p.detail.contains("secret"));
    }

    #[test]
    fn problems_serialize_as_rfc9457() {
        let p = ApiError::unavailable("the queue is busy", 5).problem();
        let v = serde_json::to_value(&p).expect("json");
        assert_eq!(v["type"], "urn:mapi:problem:unavailable");
        assert_eq!(v["status"], 503);
        assert_eq!(v["code"], "UNAVAILABLE");
        assert_eq!(v["retry_after_s"], 5);
    }

    #[test]
    fn an_internal_error_keeps_its_source_and_tells_the_caller_nothing() {
        let cause = mapi_store::StoreError::Internal("disk I/O error on mapi.db".into());
        let e = ApiError::from(cause);
        let source = std::error::Error::source(&e).map(ToString::to_string);
        assert!(source.is_some_and(|s| s.contains("disk I/O error")), "{e:?}");
        // What a log line of it shows: the context and the cause.
        assert_eq!(e.to_string(), "internal error: store: store internal error: disk I/O error on mapi.db");
        // A port's error keeps its source, and the chain says each part once.
        let io = std::io::Error::other("No space left on device");
        let kept =
            ApiError::from(mapi_store::StoreError::Internal(mapi_domain::Cause::new("writing page 7", io)));
        assert_eq!(
            kept.to_string(),
            "internal error: store: store internal error: writing page 7: No space left on device"
        );
        let mut chain = std::error::Error::source(&kept);
        let mut found_io = false;
        while let Some(e) = chain {
            found_io |= e
                .downcast_ref::<mapi_domain::Cause>()
                .and_then(|c| c.inner())
                .is_some_and(|i| i.is::<std::io::Error>());
            chain = e.source();
        }
        assert!(found_io, "the io::Error is in the chain, typed");
        let problem = e.problem();
        assert_eq!(problem.code, ProblemCode::Internal);
        assert!(
            !problem.detail.contains("disk") && !problem.detail.contains("mapi.db"),
            "{}",
            problem.detail
        );
        let json: serde_json::Error = serde_json::from_str::<u8>("x").expect_err("not json");
        assert!(std::error::Error::source(&ApiError::from(json)).is_some());
    }

    #[test]
    fn a_misused_store_is_a_bug_and_says_what_was_misused() {
        let misuse = mapi_store::StoreError::Misuse("a transaction read deliveries/x after a write".into());
        let e = ApiError::from(misuse);
        assert!(e.is_bug());
        assert!(e.to_string().contains("a transaction read deliveries/x after a write"), "{e}");
        assert_eq!(e.problem().code, ProblemCode::Internal);
        assert!(!ApiError::from(mapi_store::StoreError::Aborted).is_bug());
        assert!(!ApiError::from(mapi_store::StoreError::Internal("disk".into())).is_bug());
    }
}
