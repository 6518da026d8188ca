//! A fake of Cloud Monitoring's `projects.timeSeries.list` (REST, as the
//! official client calls it) for one metric, Cloud Run's
//! `run.googleapis.com/container/instance_count` of `cloud_run_revision`
//! resources, sampled from the Services fake's instance lifetimes. It
//! answers the aggregation the platform asks for (`ALIGN_MEAN` over whole
//! minutes, `REDUCE_SUM` over revisions and states) newest point first, a
//! page at a time, and refuses what Monitoring refuses (no filter, another
//! metric, a misaligned period) with Google's error shape. A request may be
//! answered 429 once ([`FakeMonitoring::throttle_next`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use mapi_domain::Timestamp;
use serde_json::{Value, json};

use crate::fake_cloudrun_services::Lifetimes;

/// The metric sampled.
pub const INSTANCE_COUNT: &str = "run.googleapis.com/container/instance_count";

/// Points per page.
const PAGE: usize = 50;

#[derive(Clone)]
struct Fake {
    lifetimes: Lifetimes,
    throttle: Arc<AtomicBool>,
    calls: Arc<AtomicU32>,
}

/// The running fake.
#[derive(Clone)]
pub struct FakeMonitoring {
    /// Its root, for the client's endpoint.
    pub url: String,
    fake: Fake,
}

impl std::fmt::Debug for FakeMonitoring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeMonitoring").field("url", &self.url).finish_non_exhaustive()
    }
}

impl FakeMonitoring {
    /// Serves on 127.0.0.1, sampling `lifetimes`.
    pub async fn start(lifetimes: Lifetimes) -> FakeMonitoring {
        let fake = Fake {
            lifetimes,
            throttle: Arc::new(AtomicBool::new(false)),
            calls: Arc::new(AtomicU32::new(0)),
        };
        let app = Router::new()
            .route("/v3/projects/{project}/timeSeries", axum::routing::get(list))
            .with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeMonitoring { url, fake }
    }

    /// The next request is answered 429 RESOURCE_EXHAUSTED.
    pub fn throttle_next(&self) {
        self.fake.throttle.store(true, Ordering::SeqCst);
    }

    /// How many list requests came.
    pub fn calls(&self) -> u32 {
        self.fake.calls.load(Ordering::SeqCst)
    }
}

fn google(status: u16, code: &str, message: &str) -> Response {
    let body = json!({"error": {"code": status, "message": message, "status": code}});
    (StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST), axum::Json(body)).into_response()
}

fn parse_time(v: Option<&String>) -> Option<Timestamp> {
    Timestamp::parse_rfc3339(v?).ok()
}

fn millis(ms: i64) -> Timestamp {
    Timestamp::from_micros(ms * 1000)
}

/// The value of `key = "value"` in a filter.
fn label<'a>(filter: &'a str, key: &str) -> Option<&'a str> {
    let at = filter.find(&format!("{key} = \""))? + key.len() + 4;
    let rest = &filter[at..];
    Some(&rest[..rest.find('"')?])
}

async fn list(
    State(fake): State<Fake>,
    Path(_project): Path<String>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Response {
    fake.calls.fetch_add(1, Ordering::SeqCst);
    if fake.throttle.swap(false, Ordering::SeqCst) {
        return google(429, "RESOURCE_EXHAUSTED", "Quota exceeded for quota metric 'Time series queries'.");
    }
    let filter = q.get("filter").map(String::as_str).unwrap_or_default();
    if filter.is_empty() {
        return google(400, "INVALID_ARGUMENT", "Field filter had an invalid value: a filter is required.");
    }
    if label(filter, "metric.type") != Some(INSTANCE_COUNT)
        || label(filter, "resource.type") != Some("cloud_run_revision")
    {
        return google(
            400,
            "INVALID_ARGUMENT",
            &format!("this fake answers only {INSTANCE_COUNT} of cloud_run_revision: {filter}"),
        );
    }
    let Some(service) = label(filter, "resource.labels.service_name") else {
        return google(
            400,
            "INVALID_ARGUMENT",
            "this fake answers one service's series: name resource.labels.service_name",
        );
    };
    let (Some(start), Some(end)) =
        (parse_time(q.get("interval.startTime")), parse_time(q.get("interval.endTime")))
    else {
        return google(
            400,
            "INVALID_ARGUMENT",
            "Field interval had an invalid value: startTime and endTime are required.",
        );
    };
    let period = q.get("aggregation.alignmentPeriod").and_then(|p| p.strip_suffix('s')?.parse::<i64>().ok());
    if period != Some(60)
        // Enums come by name or by number (as Google's REST mapping accepts both).
        || !matches!(q.get("aggregation.perSeriesAligner").map(String::as_str), Some("ALIGN_MEAN" | "12"))
        || !matches!(q.get("aggregation.crossSeriesReducer").map(String::as_str), Some("REDUCE_SUM" | "4"))
    {
        let asked: Vec<String> = q
            .iter()
            .filter(|(k, _)| k.starts_with("aggregation."))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        return google(
            400,
            "INVALID_ARGUMENT",
            &format!("this fake answers a 60s ALIGN_MEAN summed with REDUCE_SUM, not {asked:?}"),
        );
    }
    // Points end on whole minutes within (start, end]; each is the mean count over its minute.
    let lifetimes = (fake.lifetimes)(service);
    let now = mapi_clock::Clock::now(&mapi_clock::SystemClock);
    let mut points = Vec::new();
    let mut e = (start.as_millis().div_euclid(60_000) + 1) * 60_000;
    while e <= end.as_millis() {
        let (a, b) = (e - 60_000, e);
        let up: i64 = lifetimes
            .iter()
            .map(|(s, stop)| {
                let stop = stop.unwrap_or(now).as_millis();
                (stop.min(b) - s.as_millis().max(a)).max(0)
            })
            .sum();
        points.push((millis(a), millis(b), up as f64 / 60_000.0));
        e += 60_000;
    }
    points.reverse();
    let skip: usize = q.get("pageToken").and_then(|t| t.parse().ok()).unwrap_or(0);
    let page: Vec<Value> = points
        .iter()
        .skip(skip)
        .take(PAGE)
        .map(|(a, b, v)| json!({"interval": {"startTime": a.to_rfc3339(), "endTime": b.to_rfc3339()}, "value": {"doubleValue": v}}))
        .collect();
    let next = if skip + PAGE < points.len() { (skip + PAGE).to_string() } else { String::new() };
    if page.is_empty() {
        return axum::Json(json!({"nextPageToken": next})).into_response();
    }
    axum::Json(json!({
        "timeSeries": [{
            "metric": {"type": INSTANCE_COUNT},
            "resource": {"type": "cloud_run_revision", "labels": {"service_name": service}},
            "metricKind": "GAUGE",
            "valueType": "DOUBLE",
            "points": page,
        }],
        "nextPageToken": next,
    }))
    .into_response()
}
