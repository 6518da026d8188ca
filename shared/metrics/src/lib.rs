//! The platform's metrics, served at `/metrics` in the Prometheus text
//! format. Every metric is declared here, once, with its labels; callers
//! hold a [`Metrics`] (cheap to clone) and never invent names.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub method: String,
    /// The matched route template (`/v1/runs/{id}`), never the raw path.
    pub route: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransitionLabels {
    pub from: String,
    pub to: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExecutorLabels {
    pub executor: String,
    /// `ok`, `throttled`, `ambiguous`, `refused`, `error`.
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExecutorName {
    pub executor: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// What happened: for violations `bad_signature`, `unknown_attempt`,
    /// `attempt_ended`, `wrong_execution`; for envelopes `malformed`.
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// The check that failed, e.g. `unsupported_algorithm`, `wrong_audience`,
    /// `wrong_service_account`, `subscription_not_allowed`.
    pub reason: String,
}

/// All metrics of one process.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Arc<Registry>,
    pub http_requests: Family<HttpLabels, Counter>,
    pub http_duration_seconds: Family<RouteLabels, Histogram>,
    pub run_transitions: Family<TransitionLabels, Counter>,
    pub queue_depth: Family<QueueLabels, Gauge>,
    pub queue_deliveries: Family<QueueLabels, Counter>,
    pub executor_submits: Family<ExecutorLabels, Counter>,
    /// `mapi_executor_submit_throttled_total{executor}`, watched by the MapiJobsRun429 alert.
    pub executor_submit_throttled: Family<ExecutorName, Counter>,
    pub events_applied: Counter,
    pub events_duplicate: Counter,
    pub sandbox_violations: Family<KindLabels, Counter>,
    pub push_rejected: Family<KindLabels, Counter>,
    /// Pushes refused with 401/403 by push authentication, by the failed check.
    pub push_auth_refused: Family<ReasonLabels, Counter>,
    /// Model-version bundles refused because they failed their integrity
    /// check (`mapi_bundle_integrity_failures_total`), each also an `ALARM`.
    pub bundle_integrity_failures: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut r = Registry::with_prefix("mapi");
        let http_requests = Family::<HttpLabels, Counter>::default();
        r.register("http_requests", "HTTP requests served", http_requests.clone());
        let http_duration_seconds = Family::<RouteLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        r.register("http_duration_seconds", "HTTP request latency", http_duration_seconds.clone());
        let run_transitions = Family::<TransitionLabels, Counter>::default();
        r.register("run_transitions", "Run state transitions", run_transitions.clone());
        let queue_depth = Family::<QueueLabels, Gauge>::default();
        r.register("queue_depth", "Tasks waiting in a queue", queue_depth.clone());
        let queue_deliveries = Family::<QueueLabels, Counter>::default();
        r.register("queue_deliveries", "Task deliveries attempted", queue_deliveries.clone());
        let executor_submits = Family::<ExecutorLabels, Counter>::default();
        r.register("executor_submits", "Attempts submitted to an executor", executor_submits.clone());
        let executor_submit_throttled = Family::<ExecutorName, Counter>::default();
        r.register(
            "executor_submit_throttled",
            "Executor submits answered 429",
            executor_submit_throttled.clone(),
        );
        let events_applied = Counter::default();
        r.register("events_applied", "Container events merged into progress", events_applied.clone());
        let events_duplicate = Counter::default();
        r.register("events_duplicate", "Container events dropped as duplicates", events_duplicate.clone());
        let sandbox_violations = Family::<KindLabels, Counter>::default();
        r.register(
            "sandbox_violations",
            "Events that were forged, replayed or late: acknowledged and ignored",
            sandbox_violations.clone(),
        );
        let push_rejected = Family::<KindLabels, Counter>::default();
        r.register("push_rejected", "Push deliveries refused or acknowledged unread", push_rejected.clone());
        let push_auth_refused = Family::<ReasonLabels, Counter>::default();
        r.register(
            "push_auth_refused",
            "Pushes refused (401/403) by push authentication, by the failed check",
            push_auth_refused.clone(),
        );
        let bundle_integrity_failures = Counter::default();
        r.register(
            "bundle_integrity_failures",
            "Model-version bundles refused: a manifest did not verify or an artifact changed",
            bundle_integrity_failures.clone(),
        );
        Metrics {
            registry: Arc::new(r),
            http_requests,
            http_duration_seconds,
            run_transitions,
            queue_depth,
            queue_deliveries,
            executor_submits,
            executor_submit_throttled,
            events_applied,
            events_duplicate,
            sandbox_violations,
            push_rejected,
            push_auth_refused,
            bundle_integrity_failures,
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    /// Counts one run transition.
    pub fn transition(&self, from: &str, to: &str, reason: &str) {
        self.run_transitions
            .get_or_create(&TransitionLabels {
                from: from.to_owned(),
                to: to.to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Counts one occurrence of `kind` in a kind-labelled family.
    pub fn count(family: &Family<KindLabels, Counter>, kind: &str) {
        family.get_or_create(&KindLabels { kind: kind.to_owned() }).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text_with_labels() {
        let m = Metrics::new();
        m.transition("queued", "dispatching", "intent_written");
        Metrics::count(&m.sandbox_violations, "bad_signature");
        m.http_duration_seconds.get_or_create(&RouteLabels { route: "/health".into() }).observe(0.002);
        let text = m.render();
        assert!(text.contains(
            "mapi_run_transitions_total{from=\"queued\",to=\"dispatching\",reason=\"intent_written\"} 1"
        ));
        assert!(text.contains("mapi_sandbox_violations_total{kind=\"bad_signature\"} 1"));
        assert!(text.contains("mapi_http_duration_seconds_bucket"));
        assert!(text.ends_with("# EOF\n"));
    }
}
