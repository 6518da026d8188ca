//! Extractors whose rejections are problems: `Json` (size-bounded, unknown
//! fields refused by the target type), `Path`, `Query`, and the fallback
//! for unknown routes.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{ApiError, ProblemCode};

/// A JSON body. Rejections become `INVALID_ARGUMENT` (with serde's message,
/// which names the field and position), `UNSUPPORTED_MEDIA_TYPE` or
/// `PAYLOAD_TOO_LARGE`. As a response, serializes `T` as JSON.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(Json(v)),
            Err(JsonRejection::MissingJsonContentType(_)) => Err(ApiError::new(
                ProblemCode::UnsupportedMediaType,
                "send the body as JSON with `content-type: application/json`",
            )),
            Err(JsonRejection::JsonSyntaxError(e)) => {
                Err(ApiError::invalid(format!("the body is not valid JSON: {}", e.body_text())))
            }
            Err(JsonRejection::JsonDataError(e)) => Err(ApiError::invalid(format!(
                "the body does not match the expected shape: {}",
                e.body_text()
                    .trim_start_matches("Failed to deserialize the JSON body into the target type: ")
            ))),
            Err(JsonRejection::BytesRejection(e))
                if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE =>
            {
                Err(ApiError::new(ProblemCode::PayloadTooLarge, "the body is larger than this route accepts"))
            }
            Err(e) => Err(ApiError::invalid(e.body_text())),
        }
    }
}

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// A raw body; a body over the route's limit is `PAYLOAD_TOO_LARGE`.
///
/// The body is read into one buffer sized from `Content-Length`, each frame
/// freed as it is copied, so a request holds its body once: collecting the
/// frames first and joining them after would hold it twice at the end.
#[derive(Debug, Clone, Default)]
pub struct RawBody(pub axum::body::Bytes);

/// The most a declared `Content-Length` reserves up front; a larger body
/// (within the route's limit) grows its buffer as it arrives.
const MAX_RESERVE: usize = 64 * 1024 * 1024;

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, _: &S) -> Result<Self, ApiError> {
        use axum::RequestExt;
        use http_body_util::BodyExt;
        let declared = req
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0);
        let mut body = req.into_limited_body();
        let mut bytes = Vec::with_capacity(declared.min(MAX_RESERVE));
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(body_error)?;
            if let Some(data) = frame.data_ref() {
                bytes.extend_from_slice(data);
            }
        }
        Ok(RawBody(bytes.into()))
    }
}

/// A body that could not be read: over the route's limit, or cut off.
fn body_error(e: axum::Error) -> ApiError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(err) = source {
        if err.is::<http_body_util::LengthLimitError>() {
            return ApiError::new(ProblemCode::PayloadTooLarge, "the body is larger than this route accepts");
        }
        source = err.source();
    }
    ApiError::invalid("the body could not be read to its end: send it again")
}

/// Path parameters; a rejection is `INVALID_ARGUMENT`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Path<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Path(p.0))
            .map_err(|e: PathRejection| ApiError::invalid(format!("invalid path: {}", e.body_text())))
    }
}

/// Query parameters; a rejection is `INVALID_ARGUMENT`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state).await.map(|q| Query(q.0)).map_err(
            |e: QueryRejection| ApiError::invalid(format!("invalid query string: {}", e.body_text())),
        )
    }
}

/// The answer for a path no route matches.
pub async fn fallback_not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no route for `{}`: see /openapi.json for the API", uri.path()))
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::Body;
    use axum::extract::DefaultBodyLimit;
    use axum::routing::post;
    use http_body_util::BodyExt;
    use serde::Deserialize;
    use tower::ServiceExt;

    use super::*;
    use crate::Problem;

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body1 {
        name: String,
        n: u32,
    }

    async fn handler(Json(_): Json<Body1>) -> &'static str {
        "ok"
    }

    async fn call(content_type: Option<&str>, body: &str) -> (u16, Option<Problem>) {
        let app = Router::new()
            .route("/", post(handler))
            .layer(DefaultBodyLimit::max(64))
            .fallback(fallback_not_found);
        let mut req = axum::http::Request::post("/");
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        let resp =
            app.oneshot(req.body(Body::from(body.to_owned())).expect("request")).await.expect("response");
        let status = resp.status().as_u16();
        let is_problem = resp.headers().get("content-type").is_some_and(|v| v == "application/problem+json");
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        (status, is_problem.then(|| serde_json::from_slice(&bytes).expect("problem json")))
    }

    #[tokio::test]
    async fn json_rejections_are_problems_that_say_what_to_fix() {
        let json = Some("application/json");
        assert_eq!(call(json, r#"{"name":"a","n":1}"#).await.0, 200);

        let (s, p) = call(json, r#"{"name":"a","n":1,"nn":2}"#).await;
        let p = p.expect("problem");
        assert_eq!((s, p.code), (400, ProblemCode::InvalidArgument));
        assert!(p.detail.contains("unknown field `nn`"), "{}", p.detail);

        let (s, p) = call(json, r#"{"name":"a","n":-1}"#).await;
        assert_eq!((s, p.expect("problem").code), (400, ProblemCode::InvalidArgument));

        let (s, p) = call(json, r#"{"name":"a","#).await;
        let p = p.expect("problem");
        assert_eq!(s, 400);
        assert!(p.detail.contains("not valid JSON"), "{}", p.detail);

        let (s, p) = call(None, r#"{"name":"a","n":1}"#).await;
        assert_eq!((s, p.expect("problem").code), (415, ProblemCode::UnsupportedMediaType));

        let big = format!(r#"{{"name":"{}","n":1}}"#, "x".repeat(100));
        let (s, p) = call(json, &big).await;
        assert_eq!((s, p.expect("problem").code), (413, ProblemCode::PayloadTooLarge));
    }
}
