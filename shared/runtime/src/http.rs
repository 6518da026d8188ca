//! What every service's router gets: request instrumentation (a traced span
//! per request, `mapi_http_*` metrics labelled by route template, a Cloud
//! Logging access log line) and the common routes `/health`, `/build-info`
//! and `/metrics`.

use std::net::SocketAddr;
use std::time::Instant;

use axum::Router;
use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use mapi_metrics::{HttpLabels, Metrics, RouteLabels};
use serde::Serialize;
use tracing::field::Empty;
use tracing::{Instrument, Level};

use crate::logging::{HTTP_REQUEST, SPAN_ID, TRACE_ID, TRACE_SAMPLED};
use crate::trace::{TraceContext, parse_cloud_trace, parse_traceparent};

/// The route label of requests no route matched.
pub const UNMATCHED_ROUTE: &str = "unmatched";
/// The content type of `/metrics`.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Routes the platform calls itself; their successes are logged at DEBUG.
const INTERNAL_PREFIX: &str = "/internal/";

/// Routes that are counted but not access-logged.
const QUIET_ROUTES: [&str; 2] = ["/health", "/metrics"];

/// The API version every service serves under.
pub const API_VERSION: &str = "v1";

/// What `/build-info` reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BuildInfo {
    pub service: String,
    pub version: String,
    pub git_commit: String,
    /// When the binary was built (RFC 3339), or `unknown`.
    pub build_time: String,
    pub api_version: &'static str,
}

/// Wraps every route of `router`, including its fallback, in the request
/// instrumentation. Apply it last, after all routes are added.
pub fn instrument(router: Router, metrics: Metrics) -> Router {
    router
        .layer(middleware::map_response(bare_errors_as_problems))
        .layer(middleware::from_fn_with_state(metrics, track))
}

/// A refusal the router makes by itself (a method the route does not
/// take, chiefly) has no body; every refusal a client gets is a problem,
/// so an error answer without a content type gets one, with its status
/// and headers (`Allow`) kept.
async fn bare_errors_as_problems(response: Response) -> Response {
    use mapi_api::problem::{Problem, ProblemCode};
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error())
        || response.headers().contains_key(header::CONTENT_TYPE)
    {
        return response;
    }
    let (code, detail) = match status {
        StatusCode::METHOD_NOT_ALLOWED => {
            let allow = response.headers().get(header::ALLOW).and_then(|v| v.to_str().ok()).unwrap_or("");
            (ProblemCode::MethodNotAllowed, format!("this route takes {allow}: see /openapi.json"))
        }
        StatusCode::NOT_FOUND => (ProblemCode::NotFound, "no such route: see /openapi.json".to_owned()),
        StatusCode::PAYLOAD_TOO_LARGE => {
            (ProblemCode::PayloadTooLarge, "the body is larger than this route accepts".to_owned())
        }
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            (ProblemCode::UnsupportedMediaType, "this route does not take that media type".to_owned())
        }
        s if s.is_server_error() => {
            (ProblemCode::Internal, "the platform failed to handle the request; retry later".to_owned())
        }
        _ => (ProblemCode::InvalidArgument, "the request is not one this route can answer".to_owned()),
    };
    let (mut parts, _) = response.into_parts();
    let body = serde_json::to_vec(&Problem { status: status.as_u16(), ..Problem::new(code, detail) })
        .unwrap_or_default();
    parts
        .headers
        .insert(header::CONTENT_TYPE, axum::http::HeaderValue::from_static("application/problem+json"));
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(body))
}

/// `GET /health`, `GET /build-info` and `GET /metrics`.
pub fn common_routes(build: BuildInfo, metrics: Metrics) -> Router {
    Router::new()
        .route("/health", get(|| async { axum::Json(serde_json::json!({"status": "ok"})) }))
        .route("/build-info", get(move || std::future::ready(axum::Json(build.clone()))))
        .route(
            "/metrics",
            get(move || {
                let body = metrics.render();
                async move { ([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], body).into_response() }
            }),
        )
}

/// The request middleware: span, metrics, access log.
async fn track(State(metrics): State<Metrics>, request: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = request.method().as_str().to_owned();
    let route = request.extensions().get::<MatchedPath>().map_or(UNMATCHED_ROUTE, |m| m.as_str()).to_owned();
    let path = request.uri().path().to_owned();
    let headers = request.headers();
    let user_agent = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let remote_ip = forwarded_for(headers)
        .or_else(|| request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip().to_string()));

    // ERROR level so the span, and with it trace correlation, exists under
    // any filter that lets an event inside it through; spans are never printed.
    let span = tracing::span!(
        Level::ERROR,
        "request",
        method = %method,
        route = %route,
        trace_id = Empty,
        span_id = Empty,
        trace_sampled = Empty,
    );
    if let Some(trace) = trace_context(headers) {
        span.record(TRACE_ID, trace.trace_id.as_str());
        if let Some(span_id) = &trace.span_id {
            span.record(SPAN_ID, span_id.as_str());
        }
        span.record(TRACE_SAMPLED, trace.sampled);
    }

    let response = next.run(request).instrument(span.clone()).await;
    let elapsed = start.elapsed();
    let status = response.status().as_u16();

    metrics
        .http_requests
        .get_or_create(&HttpLabels { method: method.clone(), route: route.clone(), status })
        .inc();
    metrics
        .http_duration_seconds
        .get_or_create(&RouteLabels { route: route.clone() })
        .observe(elapsed.as_secs_f64());

    if !QUIET_ROUTES.contains(&route.as_str()) {
        let http_request = HttpRequestLog {
            request_method: &method,
            request_url: &path,
            status,
            latency: format!("{:.6}s", elapsed.as_secs_f64()),
            user_agent: user_agent.as_deref(),
            remote_ip: remote_ip.as_deref(),
        };
        let http_request = serde_json::to_string(&http_request).unwrap_or_default();
        let _in_request = span.enter();
        // A 503 with a Retry-After is the platform saying "later" on purpose (a run held by its
        // tier's gate, a cool-down after 429s, a busy store), and its handler logged why; only
        // the other 5xx are errors.
        let later = status == 503 && response.headers().contains_key(header::RETRY_AFTER);
        if later && route.starts_with(INTERNAL_PREFIX) {
            tracing::info!({ HTTP_REQUEST } = %http_request, "{method} {path} {status}");
        } else if later {
            tracing::warn!({ HTTP_REQUEST } = %http_request, "{method} {path} {status}");
        } else if status >= 500 {
            tracing::error!({ HTTP_REQUEST } = %http_request, "{method} {path} {status}");
        } else if route.starts_with(INTERNAL_PREFIX) && status < 300 {
            // The platform's own machinery (queue deliveries, ticks, event
            // pushes) succeeds constantly; its handlers log what matters.
            tracing::debug!({ HTTP_REQUEST } = %http_request, "{method} {path} {status}");
        } else {
            tracing::info!({ HTTP_REQUEST } = %http_request, "{method} {path} {status}");
        }
    }
    response
}

/// Cloud Logging's `HttpRequest`, the fields the access log knows.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct HttpRequestLog<'a> {
    request_method: &'a str,
    request_url: &'a str,
    status: u16,
    latency: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    user_agent: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    remote_ip: Option<&'a str>,
}

/// The trace from `X-Cloud-Trace-Context`, else from `traceparent`.
fn trace_context(headers: &HeaderMap) -> Option<TraceContext> {
    let text = |name: &str| headers.get(name).and_then(|v: &HeaderValue| v.to_str().ok());
    text("x-cloud-trace-context")
        .and_then(parse_cloud_trace)
        .or_else(|| text("traceparent").and_then(parse_traceparent))
}

/// The client address as the first `X-Forwarded-For` entry (set by Cloud
/// Run's front end; client-supplied entries make it untrustworthy for
/// anything but logs).
fn forwarded_for(headers: &HeaderMap) -> Option<String> {
    let value = headers.get("x-forwarded-for")?.to_str().ok()?;
    let first = value.split(',').next()?.trim();
    (!first.is_empty()).then(|| first.to_owned())
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::extract::Path;
    use axum::http::StatusCode;
    use serde_json::Value;
    use tower::ServiceExt;

    use super::*;
    use crate::logging::tests::{Buf, capture};

    /// Captures this thread's logs. Every test here installs one: tracing caches
    /// per call site whether anyone listens, and a test thread without a
    /// subscriber registering the access-log call site could cache "no one"
    /// while another test's subscriber is the only one registered.
    fn capture_logs(project: Option<&str>) -> (tracing::subscriber::DefaultGuard, Buf) {
        let (subscriber, buf) = capture(project);
        (tracing::subscriber::set_default(subscriber), buf)
    }

    fn build() -> BuildInfo {
        BuildInfo {
            service: "submit".into(),
            version: "1.2.3".into(),
            git_commit: "abc123".into(),
            build_time: "2026-12-06T04:00:00Z".into(),
            api_version: "v1",
        }
    }

    fn app(metrics: &Metrics) -> Router {
        let routes = Router::new()
            .route("/things/{id}", get(|Path(id): Path<String>| async move { id }))
            .route("/boom", get(|| async { StatusCode::INTERNAL_SERVER_ERROR }));
        instrument(routes.merge(common_routes(build(), metrics.clone())), metrics.clone())
    }

    async fn call(app: &Router, request: axum::http::Request<Body>) -> (StatusCode, HeaderMap, String) {
        let response = app.clone().oneshot(request).await.expect("infallible");
        let status = response.status();
        let headers = response.headers().clone();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("body");
        (status, headers, String::from_utf8(body.to_vec()).expect("utf-8 body"))
    }

    async fn get_path(app: &Router, path: &str) -> (StatusCode, HeaderMap, String) {
        call(app, axum::http::Request::get(path).body(Body::empty()).expect("request")).await
    }

    #[tokio::test]
    async fn health_is_ok() {
        let _logs = capture_logs(None);
        let app = app(&Metrics::new());
        let (status, _, body) = get_path(&app, "/health").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(serde_json::from_str::<Value>(&body).expect("json"), serde_json::json!({"status": "ok"}));
    }

    #[tokio::test]
    async fn build_info_shape() {
        let _logs = capture_logs(None);
        let app = app(&Metrics::new());
        let (status, _, body) = get_path(&app, "/build-info").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            serde_json::from_str::<Value>(&body).expect("json"),
            serde_json::json!({"service": "submit", "version": "1.2.3", "git_commit": "abc123", "build_time": "2026-12-06T04:00:00Z", "api_version": "v1"})
        );
    }

    #[tokio::test]
    async fn metrics_count_requests_by_route_template() {
        let _logs = capture_logs(None);
        let metrics = Metrics::new();
        let app = app(&metrics);
        get_path(&app, "/health").await;
        get_path(&app, "/things/42").await;
        get_path(&app, "/things/43").await;
        get_path(&app, "/no/such/path").await;
        let (status, headers, body) = get_path(&app, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers[header::CONTENT_TYPE], OPENMETRICS_CONTENT_TYPE);
        assert!(
            body.contains(r#"mapi_http_requests_total{method="GET",route="/health",status="200"} 1"#),
            "{body}"
        );
        assert!(
            body.contains(r#"mapi_http_requests_total{method="GET",route="/things/{id}",status="200"} 2"#),
            "{body}"
        );
        assert!(
            body.contains(r#"mapi_http_requests_total{method="GET",route="unmatched",status="404"} 1"#),
            "{body}"
        );
        assert!(body.contains(r#"mapi_http_duration_seconds_count{route="/things/{id}"} 2"#), "{body}");
        assert!(!body.contains("/things/42"), "raw paths must never become labels: {body}");
    }

    #[tokio::test]
    async fn access_log_carries_http_request_and_trace() {
        let (_default, logs) = capture_logs(Some("mapi-prod"));
        let app = app(&Metrics::new());
        let request = axum::http::Request::get("/things/42?verbose=1")
            .header("x-cloud-trace-context", "105445aa7843bc8bf206b12000100000/1;o=1")
            .header("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")
            .header(header::USER_AGENT, "mapi-cli/0.1")
            .header("x-forwarded-for", "203.0.113.7, 10.0.0.1")
            .body(Body::empty())
            .expect("request");
        let (status, _, _) = call(&app, request).await;
        assert_eq!(status, StatusCode::OK);
        get_path(&app, "/health").await;
        get_path(&app, "/metrics").await;

        let lines = logs.lines();
        assert_eq!(lines.len(), 1, "only /things is access-logged: {lines:?}");
        let line = &lines[0];
        assert_eq!(line["severity"], "INFO");
        assert_eq!(line["message"], "GET /things/42 200");
        assert_eq!(line["method"], "GET");
        assert_eq!(line["route"], "/things/{id}");
        assert_eq!(
            line["logging.googleapis.com/trace"],
            "projects/mapi-prod/traces/105445aa7843bc8bf206b12000100000"
        );
        assert_eq!(line["logging.googleapis.com/spanId"], "0000000000000001");
        assert_eq!(line["logging.googleapis.com/trace_sampled"], true);
        let http = line["httpRequest"].as_object().expect("httpRequest is an object");
        assert_eq!(http["requestMethod"], "GET");
        assert_eq!(http["requestUrl"], "/things/42");
        assert_eq!(http["status"], 200);
        assert_eq!(http["userAgent"], "mapi-cli/0.1");
        assert_eq!(http["remoteIp"], "203.0.113.7");
        let latency = http["latency"].as_str().expect("latency is a string");
        let seconds = latency.strip_suffix('s').expect("latency ends in s");
        assert_eq!(seconds.split_once('.').map(|(_, frac)| frac.len()), Some(6), "{latency}");
        seconds.parse::<f64>().expect("latency is a number of seconds");
    }

    #[tokio::test]
    async fn traceparent_is_used_without_cloud_trace_header_and_5xx_logs_error() {
        let (_default, logs) = capture_logs(None);
        let app = app(&Metrics::new());
        let request = axum::http::Request::get("/boom")
            .header("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")
            .body(Body::empty())
            .expect("request");
        let (status, _, _) = call(&app, request).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        let lines = logs.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0]["severity"], "ERROR");
        assert_eq!(lines[0]["logging.googleapis.com/trace"], "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(lines[0]["logging.googleapis.com/spanId"], "b7ad6b7169203331");
        assert_eq!(lines[0]["logging.googleapis.com/trace_sampled"], false);
        let http = lines[0]["httpRequest"].as_object().expect("httpRequest is an object");
        assert_eq!(http["status"], 500);
        assert!(!http.contains_key("userAgent") && !http.contains_key("remoteIp"), "{http:?}");
    }

    #[tokio::test]
    async fn handler_logs_inside_the_request_carry_its_trace() {
        let (_default, logs) = capture_logs(None);
        let app = instrument(
            Router::new().route(
                "/work",
                get(|| async {
                    tracing::warn!(step = 2, "inside handler");
                }),
            ),
            Metrics::new(),
        );
        let request = axum::http::Request::get("/work")
            .header("x-cloud-trace-context", "105445aa7843bc8bf206b12000100000")
            .body(Body::empty())
            .expect("request");
        call(&app, request).await;
        let lines = logs.lines();
        assert_eq!(lines.len(), 2, "handler line and access line: {lines:?}");
        assert_eq!(lines[0]["message"], "inside handler");
        assert_eq!(lines[0]["severity"], "WARNING");
        assert_eq!(lines[0]["step"], 2);
        assert_eq!(lines[0]["route"], "/work");
        assert_eq!(lines[0]["logging.googleapis.com/trace"], "105445aa7843bc8bf206b12000100000");
        assert!(!lines[0].contains_key("logging.googleapis.com/spanId"));
    }

    #[tokio::test]
    async fn remote_ip_falls_back_to_the_peer_address() {
        let (_default, logs) = capture_logs(None);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let app = app(&Metrics::new());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(crate::serve(
            listener,
            app,
            async move {
                let _ = stop_rx.await;
            },
            std::time::Duration::from_secs(5),
            crate::GuardConfig::default(),
        ));
        let body = reqwest::get(format!("http://{addr}/things/7")).await.expect("response").text().await;
        assert_eq!(body.expect("body"), "7");
        stop_tx.send(()).expect("server is listening for shutdown");
        server.await.expect("serve task").expect("serve result");
        let access: Vec<_> = logs.lines().into_iter().filter(|l| l.contains_key("httpRequest")).collect();
        assert_eq!(access.len(), 1, "{access:?}");
        assert_eq!(access[0]["httpRequest"]["remoteIp"], "127.0.0.1");
    }
}
