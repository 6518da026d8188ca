//! A service's instance time, read from Cloud Monitoring: Cloud Run's
//! `run.googleapis.com/container/instance_count` of the service's revisions
//! (a gauge, sampled every 60 s), as the mean count of each whole minute
//! summed over revisions and states, times the minute. A point counts in
//! the window its minute ends in, so consecutive windows count each minute
//! once. Cloud Monitoring shows a sample up to 180 s after it is taken: a
//! window is read only once it ended [`LAG`] ago.

use std::time::Duration;

use google_cloud_monitoring_v3::client::MetricService;
use google_cloud_monitoring_v3::model::aggregation::{Aligner, Reducer};
use google_cloud_monitoring_v3::model::list_time_series_request::TimeSeriesView;
use google_cloud_monitoring_v3::model::typed_value::Value;
use google_cloud_monitoring_v3::model::{Aggregation, TimeInterval};
use mapi_domain::Timestamp;
use mapi_hosting::HostingError;

/// The metric read.
pub const INSTANCE_COUNT: &str = "run.googleapis.com/container/instance_count";
/// How long after a minute ends its sample may still be missing.
pub const LAG: Duration = Duration::from_secs(240);
/// The aligned period: the metric's sampling period.
const MINUTE_S: i64 = 60;

/// The filter of `service`'s instance counts.
pub fn filter(service: &str) -> String {
    format!(
        "metric.type = \"{INSTANCE_COUNT}\" AND resource.type = \"cloud_run_revision\" AND \
         resource.labels.service_name = \"{service}\""
    )
}

/// The instance time of `service` in project `project` within `[from, to)`.
pub async fn read(
    client: &MetricService,
    project: &str,
    service: &str,
    (from, to): (Timestamp, Timestamp),
) -> Result<Duration, HostingError> {
    // From the minute before, so the point whose minute ends just after `from` is in the answer.
    let start = Timestamp::from_secs(from.as_secs() - MINUTE_S);
    let interval =
        TimeInterval::new().set_start_time(crate::wire_time(start)).set_end_time(crate::wire_time(to));
    let aggregation = Aggregation::new()
        .set_alignment_period(google_cloud_wkt::Duration::clamp(MINUTE_S, 0))
        .set_per_series_aligner(Aligner::AlignMean)
        .set_cross_series_reducer(Reducer::ReduceSum);
    let (mut instance_ms, mut token) = (0.0_f64, String::new());
    loop {
        let page = client
            .list_time_series()
            .set_name(format!("projects/{project}"))
            .set_filter(filter(service))
            .set_interval(interval.clone())
            .set_aggregation(aggregation.clone())
            .set_view(TimeSeriesView::Full)
            .set_page_token(token)
            .send()
            .await
            .map_err(|e| super::hosting_error(service, &e))?;
        for point in page.time_series.iter().flat_map(|s| &s.points) {
            let Some(end) = point.interval.as_ref().and_then(|i| i.end_time) else { continue };
            let end = Timestamp::from_micros(end.seconds() * 1_000_000 + i64::from(end.nanos()) / 1000);
            if end <= from || end > to {
                continue;
            }
            let count = match point.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::DoubleValue(v)) => *v,
                #[allow(clippy::cast_precision_loss, reason = "an instance count is small")]
                Some(Value::Int64Value(v)) => *v as f64,
                _ => 0.0,
            };
            instance_ms += count.max(0.0) * (MINUTE_S * 1000) as f64;
        }
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "rounded, not negative")]
    Ok(Duration::from_millis(instance_ms.round() as u64))
}
