//! The platform's metrics, served at `/metrics` in the Prometheus text
//! format. Every metric is declared here, once, with its labels; callers
//! hold a [`Metrics`] (cheap to clone) and never invent names.
//!
//! A label whose values form a closed set is typed: a domain enum
//! ([`RunState`], [`Reason`]) written as its wire name, or one of the label
//! enums below, each written as its own fixed string. A label stays a
//! `String` only when its values are open (configured names, route
//! templates, HTTP methods).

use std::fmt::{self, Write as _};
use std::sync::Arc;

use mapi_domain::{Reason, RunState};
use prometheus_client::encoding::{
    EncodeLabelKey, EncodeLabelSet, EncodeLabelValue, LabelSetEncoder, LabelValueEncoder,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Declares a label enum: one fixed label value per variant, its `as_str`,
/// `Display` and `EncodeLabelValue` (which writes that value).
macro_rules! label_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $wire:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The label value.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $wire),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
                encoder.write_str(self.as_str())
            }
        }
    };
}

/// Writes one `name="value"` label of a label set.
fn encode_label(
    encoder: &mut LabelSetEncoder,
    name: &str,
    value: &impl EncodeLabelValue,
) -> Result<(), fmt::Error> {
    let mut label = encoder.encode_label();
    let mut key = label.encode_label_key()?;
    EncodeLabelKey::encode(&name, &mut key)?;
    let mut value_encoder = key.encode_label_value()?;
    value.encode(&mut value_encoder)?;
    value_encoder.finish()
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    /// The request's HTTP method, as sent: open (HTTP allows extension
    /// methods), so a string.
    pub method: String,
    /// The matched route template (`/v1/runs/{id}`), never the raw path:
    /// open (every router adds its own), so a string.
    pub route: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// The matched route template, as in [`HttpLabels::route`]: a string.
    pub route: String,
}

/// A run's state change: `from` and `to` are [`RunState`] wire names,
/// `reason` a [`Reason`] wire name. A run's first transition has no state
/// before it: `from` is then `none`.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct TransitionLabels {
    pub from: Option<RunState>,
    pub to: RunState,
    pub reason: Reason,
}

impl EncodeLabelSet for TransitionLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), fmt::Error> {
        encode_label(encoder, "from", &self.from.map_or("none", RunState::as_str))?;
        encode_label(encoder, "to", &self.to.as_str())?;
        encode_label(encoder, "reason", &self.reason.as_str())
    }
}

label_enum!(
    /// How one submit to an executor ended.
    SubmitResult {
        /// The executor started the attempt.
        Ok => "ok",
        /// The executor answered 429.
        Throttled => "throttled",
        /// The submit may or may not have made an execution.
        Ambiguous => "ambiguous",
        /// Placement refused the attempt.
        Refused => "refused",
        /// Any other failure.
        Error => "error",
    }
);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExecutorLabels {
    /// The executor's configured name: open, so a string.
    pub executor: String,
    pub result: SubmitResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExecutorName {
    /// The executor's configured name: open, so a string.
    pub executor: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// The queue's configured name (`[a-z0-9-]{1,100}`): open, so a string.
    pub queue: String,
}

label_enum!(
    /// A pushed event that was forged, replayed or late (`sandbox_violations`).
    Violation {
        /// The event names an attempt that does not exist.
        UnknownAttempt => "unknown_attempt",
        /// The event's HMAC does not verify under its attempt's key.
        BadSignature => "bad_signature",
        /// The event comes from another execution than the attempt's.
        WrongExecution => "wrong_execution",
        /// The event arrived after its attempt ended.
        AttemptEnded => "attempt_ended",
    }
);

label_enum!(
    /// A push acknowledged unread (`push_rejected`).
    Rejection {
        /// The envelope, message or event could not be read.
        Malformed => "malformed",
    }
);

/// What happened, in a kind-labelled family: `K` is the family's closed set
/// of kinds ([`Violation`], [`Rejection`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct KindLabels<K> {
    pub kind: K,
}

impl<K: EncodeLabelValue> EncodeLabelSet for KindLabels<K> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), fmt::Error> {
        encode_label(encoder, "kind", &self.kind)
    }
}

label_enum!(
    /// The push-authentication check that refused a push
    /// (`push_auth_refused`). Token failures carry the token verifier's
    /// reason, `token_malformed` for a token that is not a JWT.
    PushAuthReason {
        NotConfigured => "not_configured",
        MissingToken => "missing_token",
        BadInternalToken => "bad_internal_token",
        TokenMalformed => "token_malformed",
        UnsupportedAlgorithm => "unsupported_algorithm",
        MissingKeyId => "missing_key_id",
        UnknownKey => "unknown_key",
        BadSignature => "bad_signature",
        WrongIssuer => "wrong_issuer",
        WrongAudience => "wrong_audience",
        Expired => "expired",
        NotYetValid => "not_yet_valid",
        LifetimeTooLong => "lifetime_too_long",
        NoEmail => "no_email",
        EmailNotVerified => "email_not_verified",
        JwksUnavailable => "jwks_unavailable",
        WrongServiceAccount => "wrong_service_account",
        SubscriptionNotAllowed => "subscription_not_allowed",
    }
);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: PushAuthReason,
}

label_enum!(
    /// Why an anonymous caller was refused (`auth_refused`): the credential
    /// names no one. Refusals of a known token or session are not counted
    /// here; they are audited one by one.
    AuthRefusal {
        /// A `mapi_…` token whose hash matches no token.
        UnknownToken => "unknown_token",
        /// A bearer that is neither an API token nor a session.
        NotACredential => "not_a_credential",
        /// A session token that does not verify (its expiry included).
        BadSession => "bad_session",
        /// A session token where sessions are not configured.
        NoSessions => "no_sessions",
    }
);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AuthRefusedLabels {
    pub reason: AuthRefusal,
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
    pub sandbox_violations: Family<KindLabels<Violation>, Counter>,
    pub push_rejected: Family<KindLabels<Rejection>, Counter>,
    /// Pushes refused with 401/403 by push authentication, by the failed check.
    pub push_auth_refused: Family<ReasonLabels, Counter>,
    /// Anonymous callers refused with 401 (`mapi_auth_refused_total{reason}`),
    /// each one counted while the audit log keeps one entry per source a minute.
    pub auth_refused: Family<AuthRefusedLabels, Counter>,
    /// Model-version bundles refused because they failed their integrity
    /// check (`mapi_bundle_integrity_failures_total`), each also an `ALARM`.
    pub bundle_integrity_failures: Counter,
    /// Webhook sweeps that failed (`mapi_webhook_sweep_failures_total`): the
    /// webhook's new events wait for a sweep that commits.
    pub webhook_sweep_failures: Counter,
    /// Webhook sweeps that failed again after failing tick after tick
    /// (`mapi_webhook_sweep_alarms_total`), each also an `ALARM` line.
    pub webhook_sweep_alarms: Counter,
    /// Spend-cap alarms announced (`mapi_spend_cap_alarms_total`): the
    /// platform's spend reached 70 % or 90 % of its cap, an `ALARM` line each.
    pub spend_cap_alarms: Counter,
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
        let sandbox_violations = Family::<KindLabels<Violation>, Counter>::default();
        r.register(
            "sandbox_violations",
            "Events that were forged, replayed or late: acknowledged and ignored",
            sandbox_violations.clone(),
        );
        let push_rejected = Family::<KindLabels<Rejection>, Counter>::default();
        r.register("push_rejected", "Push deliveries refused or acknowledged unread", push_rejected.clone());
        let push_auth_refused = Family::<ReasonLabels, Counter>::default();
        r.register(
            "push_auth_refused",
            "Pushes refused (401/403) by push authentication, by the failed check",
            push_auth_refused.clone(),
        );
        let auth_refused = Family::<AuthRefusedLabels, Counter>::default();
        r.register(
            "auth_refused",
            "Anonymous callers refused (401) whose credential names no one, by reason",
            auth_refused.clone(),
        );
        let bundle_integrity_failures = Counter::default();
        r.register(
            "bundle_integrity_failures",
            "Model-version bundles refused: a manifest did not verify or an artifact changed",
            bundle_integrity_failures.clone(),
        );
        let webhook_sweep_failures = Counter::default();
        r.register(
            "webhook_sweep_failures",
            "Webhook sweeps that failed: the webhook's new events wait for the next sweep",
            webhook_sweep_failures.clone(),
        );
        let webhook_sweep_alarms = Counter::default();
        r.register(
            "webhook_sweep_alarms",
            "Webhook sweeps that failed again after failing tick after tick (an ALARM line each)",
            webhook_sweep_alarms.clone(),
        );
        let spend_cap_alarms = Counter::default();
        r.register(
            "spend_cap_alarms",
            "Times the platform's spend reached 70 % or 90 % of its cap (an ALARM line each)",
            spend_cap_alarms.clone(),
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
            auth_refused,
            bundle_integrity_failures,
            webhook_sweep_failures,
            webhook_sweep_alarms,
            spend_cap_alarms,
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
    pub fn transition(&self, from: Option<RunState>, to: RunState, reason: Reason) {
        self.run_transitions.get_or_create(&TransitionLabels { from, to, reason }).inc();
    }

    /// Counts one occurrence of `kind` in a kind-labelled family.
    pub fn count<K: Clone + std::hash::Hash + Eq>(family: &Family<KindLabels<K>, Counter>, kind: K) {
        family.get_or_create(&KindLabels { kind }).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text_with_labels() {
        let m = Metrics::new();
        m.transition(Some(RunState::Queued), RunState::Dispatching, Reason::IntentWritten);
        m.transition(None, RunState::Queued, Reason::Submitted);
        Metrics::count(&m.sandbox_violations, Violation::BadSignature);
        Metrics::count(&m.push_rejected, Rejection::Malformed);
        m.http_duration_seconds.get_or_create(&RouteLabels { route: "/health".into() }).observe(0.002);
        let text = m.render();
        assert!(text.contains(
            "mapi_run_transitions_total{from=\"queued\",to=\"dispatching\",reason=\"intent_written\"} 1"
        ));
        assert!(
            text.contains("mapi_run_transitions_total{from=\"none\",to=\"queued\",reason=\"submitted\"} 1")
        );
        assert!(text.contains("mapi_sandbox_violations_total{kind=\"bad_signature\"} 1"));
        assert!(text.contains("mapi_push_rejected_total{kind=\"malformed\"} 1"));
        assert!(text.contains("mapi_http_duration_seconds_bucket"));
        assert!(text.ends_with("# EOF\n"));
    }

    /// Every typed label value is written as the string it had as a free
    /// string, byte for byte.
    #[test]
    fn typed_labels_write_their_wire_strings() {
        let m = Metrics::new();
        for r in SubmitResult::ALL {
            m.executor_submits
                .get_or_create(&ExecutorLabels { executor: "local-process".into(), result: *r })
                .inc();
        }
        for v in Violation::ALL {
            Metrics::count(&m.sandbox_violations, *v);
        }
        for r in PushAuthReason::ALL {
            m.push_auth_refused.get_or_create(&ReasonLabels { reason: *r }).inc();
        }
        for r in AuthRefusal::ALL {
            m.auth_refused.get_or_create(&AuthRefusedLabels { reason: *r }).inc();
        }
        for (from, to, reasons) in mapi_domain::run::TRANSITIONS {
            for reason in *reasons {
                m.transition(Some(*from), *to, *reason);
            }
        }
        let text = m.render();
        for result in ["ok", "throttled", "ambiguous", "refused", "error"] {
            let line =
                format!("mapi_executor_submits_total{{executor=\"local-process\",result=\"{result}\"}} 1");
            assert!(text.contains(&line), "{line} in {text}");
        }
        for kind in ["unknown_attempt", "bad_signature", "wrong_execution", "attempt_ended"] {
            let line = format!("mapi_sandbox_violations_total{{kind=\"{kind}\"}} 1");
            assert!(text.contains(&line), "{line} in {text}");
        }
        let reasons = [
            "not_configured",
            "missing_token",
            "bad_internal_token",
            "token_malformed",
            "unsupported_algorithm",
            "missing_key_id",
            "unknown_key",
            "bad_signature",
            "wrong_issuer",
            "wrong_audience",
            "expired",
            "not_yet_valid",
            "lifetime_too_long",
            "no_email",
            "email_not_verified",
            "jwks_unavailable",
            "wrong_service_account",
            "subscription_not_allowed",
        ];
        assert_eq!(reasons.len(), PushAuthReason::ALL.len());
        for reason in reasons {
            let line = format!("mapi_push_auth_refused_total{{reason=\"{reason}\"}} 1");
            assert!(text.contains(&line), "{line} in {text}");
        }
        let refusals = ["unknown_token", "not_a_credential", "bad_session", "no_sessions"];
        assert_eq!(refusals.len(), AuthRefusal::ALL.len());
        for reason in refusals {
            let line = format!("mapi_auth_refused_total{{reason=\"{reason}\"}} 1");
            assert!(text.contains(&line), "{line} in {text}");
        }
        for (from, to, reasons) in mapi_domain::run::TRANSITIONS {
            for reason in *reasons {
                let line = format!(
                    "mapi_run_transitions_total{{from=\"{from}\",to=\"{to}\",reason=\"{reason}\"}} 1"
                );
                assert!(text.contains(&line), "{line} in {text}");
            }
        }
    }
}
