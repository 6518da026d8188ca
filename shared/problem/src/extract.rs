//! Extractors whose rejections are problems: `Json` (size-bounded, unknown
//! fields refused by the target type), `Path`, `Query`, and the fallback
//! for unknown routes.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{ApiError, ProblemCode};

/// A JSON body. Rejections become `INVALID_ARGUMENT` (in our words: where
/// the document breaks, or which field is wrong and what it must be),
/// `UNSUPPORTED_MEDIA_TYPE` or `PAYLOAD_TOO_LARGE`. As a response,
/// serializes `T` as JSON.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        require_json(req.headers())?;
        let RawBody(bytes) = RawBody::from_request(req, state).await?;
        parse_json(&bytes).map(Json)
    }
}

/// Refuses a body that is not declared as JSON: 415, saying what to send.
pub fn require_json(headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    if mapi_api::problem::is_json(headers) {
        return Ok(());
    }
    Err(ApiError::new(ProblemCode::UnsupportedMediaType, mapi_api::problem::NOT_JSON))
}

/// Parses a JSON body into `T`, refusing in our words.
///
/// A whole number written with a fraction (`3.0`, `1e3`) is an integer, as
/// JSON Schema (and so the API document) counts it: a body refused only for
/// such a number is read again with those numbers as integers. The second
/// reading happens only then, so a body that parses costs one pass.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    match serde_path_to_error::deserialize(&mut de) {
        Ok(value) => {
            de.end().map_err(|e| json_refusal("", &e))?;
            Ok(value)
        }
        Err(e)
            if e.inner().classify() == serde_json::error::Category::Data
                && e.inner().to_string().starts_with("invalid type: floating point") =>
        {
            let mut whole: serde_json::Value =
                serde_json::from_slice(bytes).map_err(|e| json_refusal("", &e))?;
            as_integers(&mut whole);
            serde_path_to_error::deserialize(whole)
                .map_err(|e| json_refusal(&e.path().to_string(), e.inner()))
        }
        Err(e) => Err(json_refusal(&e.path().to_string(), e.inner())),
    }
}

/// Rewrites every whole number within ±2^53 (where a float is exact) as an integer.
fn as_integers(v: &mut serde_json::Value) {
    use serde_json::Value;
    const EXACT: f64 = 9_007_199_254_740_992.0;
    match v {
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|f| n.is_f64() && f.fract() == 0.0 && f.abs() <= EXACT) {
                // In range and whole, so the casts are exact.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let whole = if f >= 0.0 {
                    serde_json::Number::from(f as u64)
                } else {
                    serde_json::Number::from(f as i64)
                };
                *n = whole;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(as_integers),
        Value::Object(fields) => fields.values_mut().for_each(as_integers),
        Value::Null | Value::Bool(_) | Value::String(_) => {}
    }
}

fn json_refusal(path: &str, e: &serde_json::Error) -> ApiError {
    if e.classify() == serde_json::error::Category::Data {
        let detail = crate::wording::reword(path, &e.to_string());
        return ApiError::invalid(format!("the body does not match the expected shape: {detail}"));
    }
    ApiError::invalid(format!("{}: send a JSON document", crate::wording::not_json(e)))
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

/// How the API document states a raw body: a string of bytes
/// (`format: binary`), which generated clients send as a file.
#[derive(Debug)]
pub struct RawBytes;

impl utoipa::PartialSchema for RawBytes {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
            .into()
    }
}

impl utoipa::ToSchema for RawBytes {}

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
        // A declared length over the route's limit can never be read: the
        // answer need not wait for the body (the limit is the hint's upper
        // bound, the limited body's own).
        if let Some(limit) = axum::body::HttpBody::size_hint(&body).upper()
            && declared as u64 > limit
        {
            return Err(ApiError::new(
                ProblemCode::PayloadTooLarge,
                format!("the body is {declared} bytes, larger than the {limit} this route accepts"),
            ));
        }
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

/// A body that could not be read: over the route's limit, stalled past the
/// body-read timeout, or cut off.
fn body_error(e: axum::Error) -> ApiError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(err) = source {
        if err.is::<http_body_util::LengthLimitError>() {
            return ApiError::new(ProblemCode::PayloadTooLarge, "the body is larger than this route accepts");
        }
        if err.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut) {
            return ApiError::new(
                ProblemCode::RequestTimeout,
                "the body stopped arriving (MAPI_BODY_READ_TIMEOUT_S): send it again, without pauses",
            );
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
            .map_err(path_refusal)
    }
}

/// Query parameters; a rejection is `INVALID_ARGUMENT`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        if let Some(query) = parts.uri.query()
            && !decodes_to_utf8(query)
        {
            return Err(ApiError::invalid(
                "the query string is not UTF-8 once percent-decoded: encode its values as UTF-8",
            ));
        }
        axum::extract::Query::<T>::from_request_parts(parts, state).await.map(|q| Query(q.0)).map_err(
            |e: QueryRejection| {
                let text = e.body_text();
                let message = text.trim_start_matches("Failed to deserialize query string: ");
                // `name: message` when the deserializer knew the parameter.
                let (path, message) = match message.split_once(": ") {
                    Some((p, m)) if !p.is_empty() && !p.contains(' ') => (p, m),
                    _ => ("", message),
                };
                ApiError::invalid(format!("invalid query string: {}", crate::wording::reword(path, message)))
            },
        )
    }
}

/// Whether a query string percent-decodes (`+` as a space) to UTF-8. The
/// form decoder would replace bad bytes with U+FFFD, silently changing
/// what was asked.
fn decodes_to_utf8(query: &str) -> bool {
    let hex = |b: u8| (b as char).to_digit(16);
    let bytes = query.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(hi), Some(lo)) => {
                decoded.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                decoded.push(b);
                i += 1;
            }
        }
    }
    std::str::from_utf8(&decoded).is_ok()
}

/// A path that does not deserialize, in our words.
fn path_refusal(e: PathRejection) -> ApiError {
    use axum::extract::path::ErrorKind;
    let PathRejection::FailedToDeserializePathParams(e) = e else {
        return ApiError::invalid("the path is missing a part this route needs");
    };
    let detail = match e.kind() {
        ErrorKind::InvalidUtf8InPathParam { key } => format!("path segment `{key}` is not UTF-8 text"),
        ErrorKind::ParseErrorAtKey { key, value, .. } => {
            format!("path segment `{key}` cannot be `{}`", value.chars().take(64).collect::<String>())
        }
        ErrorKind::ParseErrorAtIndex { value, .. } | ErrorKind::ParseError { value, .. } => {
            format!("path segment `{}` is not valid here", value.chars().take(64).collect::<String>())
        }
        ErrorKind::Message(m) => crate::wording::reword("", m),
        ErrorKind::DeserializeError { key, message, .. } => crate::wording::reword(key, message),
        _ => "a path segment is not valid here".to_owned(),
    };
    ApiError::invalid(format!("invalid path: {detail}"))
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

    #[derive(Debug, Deserialize, PartialEq)]
    struct Counts {
        n: u32,
        k: Vec<i64>,
        x: f64,
        any: serde_json::Value,
    }

    #[test]
    fn whole_numbers_with_a_fraction_are_integers() {
        let c: Counts =
            parse_json(br#"{"n": 3.0, "k": [-2.0, 1e3], "x": 2.5, "any": 7.0}"#).expect("whole numbers");
        assert_eq!(c, Counts { n: 3, k: vec![-2, 1000], x: 2.5, any: serde_json::json!(7) });
        let c: Counts = parse_json(br#"{"n": 3, "k": [], "x": 2.0, "any": 7.0}"#).expect("as written");
        assert_eq!(c.any, serde_json::json!(7.0), "a body that parses is read once, as written");
        let refused = parse_json::<Counts>(br#"{"n": 3.5, "k": [], "x": 0, "any": null}"#).expect_err("3.5");
        assert!(refused.to_string().contains("`n`"), "{refused}");
        assert!(
            parse_json::<Counts>(br#"{"n": 1e20, "k": [], "x": 0, "any": null}"#).is_err(),
            "out of range"
        );
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

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Q {
        name: Option<String>,
        n: Option<u32>,
    }

    async fn query(uri: &str) -> (u16, Option<Problem>) {
        async fn h(Query(_): Query<Q>, Path(_): Path<String>) -> &'static str {
            "ok"
        }
        let app = Router::new().route("/q/{id}", axum::routing::get(h));
        let resp = app
            .oneshot(axum::http::Request::get(uri).body(Body::empty()).expect("request"))
            .await
            .expect("response");
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        (status, serde_json::from_slice(&bytes).ok())
    }

    #[tokio::test]
    async fn query_and_path_rejections_are_in_our_words() {
        assert_eq!(query("/q/a?name=caf%C3%A9&n=1").await.0, 200, "UTF-8 percent-encoded is fine");
        let cases = [
            ("/q/a?name=%FF%FE", "not UTF-8 once percent-decoded"),
            ("/q/a?n=x", "`n`: must be a whole number"),
            ("/q/a?zz=1", "unknown field `zz`: the fields are"),
            ("/q/%FF", "path segment `id` is not UTF-8 text"),
        ];
        for (uri, expected) in cases {
            let (status, p) = query(uri).await;
            let p = p.unwrap_or_else(|| panic!("{uri}: not a problem"));
            assert_eq!((status, p.code), (400, ProblemCode::InvalidArgument), "{uri}");
            assert!(p.detail.contains(expected), "{uri}: {}", p.detail);
            assert!(!p.detail.contains("Failed to deserialize"), "{uri}: {}", p.detail);
        }
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
