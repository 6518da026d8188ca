//! The body of every error answer (`application/problem+json`, RFC 9457)
//! and its stable codes.

use serde::{Deserialize, Serialize};

mapi_domain::wire_enum!(
    /// Stable problem codes. Never renamed: clients switch on them.
    ProblemCode {
        /// 400: the request is malformed or a value is out of range.
        InvalidArgument => "INVALID_ARGUMENT",
        /// 401: no valid credentials.
        Unauthenticated => "UNAUTHENTICATED",
        /// 403: the caller may not do this.
        Forbidden => "FORBIDDEN",
        /// 403: a person may not approve or reject a validation they submitted.
        SelfApprovalForbidden => "SELF_APPROVAL_FORBIDDEN",
        /// 404: no such resource (or the caller may not know it exists).
        NotFound => "NOT_FOUND",
        /// 405: the route exists but not with this method.
        MethodNotAllowed => "METHOD_NOT_ALLOWED",
        /// 408: the request's headers did not arrive in time; the
        /// connection is closed.
        RequestTimeout => "REQUEST_TIMEOUT",
        /// 409: the resource exists already.
        AlreadyExists => "ALREADY_EXISTS",
        /// 409: the resource's state does not allow this now.
        FailedPrecondition => "FAILED_PRECONDITION",
        /// 409: stored data failed its integrity check (a model version's
        /// manifest does not verify, or an artifact is not the one it pins).
        /// Not the caller's to fix and not transient: retrying is refused
        /// the same way, so it is not a 5xx that clients retry.
        IntegrityFailure => "INTEGRITY_FAILURE",
        /// 410: what was asked for existed but was removed for good under a
        /// retention rule (a run's logs past its tenant's run retention):
        /// asking again will not bring it back.
        Gone => "GONE",
        /// 412: the request's precondition (an object generation to
        /// match) does not hold.
        PreconditionFailed => "PRECONDITION_FAILED",
        /// 413: the body is too large.
        PayloadTooLarge => "PAYLOAD_TOO_LARGE",
        /// 414: the request's URI is longer than the server accepts.
        UriTooLong => "URI_TOO_LONG",
        /// 415: the body has the wrong media type.
        UnsupportedMediaType => "UNSUPPORTED_MEDIA_TYPE",
        /// 429: a quota would be exceeded.
        QuotaExceeded => "QUOTA_EXCEEDED",
        /// 429: too many requests in the window.
        RateLimited => "RATE_LIMITED",
        /// 431: the request's headers are too large, or too many.
        HeadersTooLarge => "HEADERS_TOO_LARGE",
        /// 503: a dependency is unavailable; retry.
        Unavailable => "UNAVAILABLE",
        /// 500: a fault of the platform.
        Internal => "INTERNAL",
    }
);

impl ProblemCode {
    pub fn status(self) -> http::StatusCode {
        match self {
            ProblemCode::InvalidArgument => http::StatusCode::BAD_REQUEST,
            ProblemCode::Unauthenticated => http::StatusCode::UNAUTHORIZED,
            ProblemCode::Forbidden | ProblemCode::SelfApprovalForbidden => http::StatusCode::FORBIDDEN,
            ProblemCode::NotFound => http::StatusCode::NOT_FOUND,
            ProblemCode::MethodNotAllowed => http::StatusCode::METHOD_NOT_ALLOWED,
            ProblemCode::RequestTimeout => http::StatusCode::REQUEST_TIMEOUT,
            ProblemCode::AlreadyExists | ProblemCode::FailedPrecondition | ProblemCode::IntegrityFailure => {
                http::StatusCode::CONFLICT
            }
            ProblemCode::Gone => http::StatusCode::GONE,
            ProblemCode::PreconditionFailed => http::StatusCode::PRECONDITION_FAILED,
            ProblemCode::PayloadTooLarge => http::StatusCode::PAYLOAD_TOO_LARGE,
            ProblemCode::UriTooLong => http::StatusCode::URI_TOO_LONG,
            ProblemCode::UnsupportedMediaType => http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ProblemCode::QuotaExceeded | ProblemCode::RateLimited => http::StatusCode::TOO_MANY_REQUESTS,
            ProblemCode::HeadersTooLarge => http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ProblemCode::Unavailable => http::StatusCode::SERVICE_UNAVAILABLE,
            ProblemCode::Internal => http::StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The status line's reason phrase, the problem's title.
    pub fn title(self) -> &'static str {
        self.status().canonical_reason().unwrap_or("Error")
    }
}

/// The body of every error response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Problem {
    /// A URI naming the problem type: `urn:mapi:problem:<code>`.
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    pub code: ProblemCode,
    /// What went wrong and what to do about it.
    pub detail: String,
    /// Seconds to wait before retrying, when the answer is 429 or 503.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<u64>,
}

impl Problem {
    /// The problem answering `code`, with its type URI, title and status.
    pub fn new(code: ProblemCode, detail: impl Into<String>) -> Problem {
        Problem {
            kind: format!("urn:mapi:problem:{}", code.as_str().to_ascii_lowercase().replace('_', "-")),
            title: code.title().to_owned(),
            status: code.status().as_u16(),
            code,
            detail: detail.into(),
            retry_after_s: None,
        }
    }
}

/// What to send instead of a body that is not JSON (the detail of its 415).
pub const NOT_JSON: &str = "send the body as JSON with `content-type: application/json`";

/// Whether a request says its body is JSON (`application/json` or
/// `application/…+json`, UTF-8). JSON is UTF-8 (RFC 8259): a body declared
/// in another charset is not one this platform reads.
pub fn is_json(headers: &http::HeaderMap) -> bool {
    let Some(value) = headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let mut params = value.split(';');
    let essence = params.next().unwrap_or("").trim().to_ascii_lowercase();
    let utf8 = params.all(|p| match p.split_once('=') {
        Some((k, v)) if k.trim().eq_ignore_ascii_case("charset") => {
            v.trim().trim_matches('"').eq_ignore_ascii_case("utf-8")
        }
        _ => true,
    });
    utf8 && (essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json")))
}
