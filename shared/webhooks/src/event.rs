//! What webhooks subscribe to, and the payload every delivery carries.
//!
//! The rule: a webhook subscribes to event types by their wire names
//! (`run.succeeded`, `quota.warning`, …). Each delivery's body is the
//! Standard Webhooks envelope `{"type": …, "timestamp": …, "data": …}`, with
//! the time the event happened in RFC 3339 UTC and the event's own fields
//! under `data`. A quota warning's rule (70 % and 90 % of a limit) is
//! `mapi_quota::nearness`'s.

use std::fmt;
use std::str::FromStr;

use mapi_domain::Timestamp;
use serde::{Deserialize, Serialize};

/// An event a webhook can subscribe to.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
pub enum EventType {
    #[serde(rename = "run.succeeded")]
    RunSucceeded,
    #[serde(rename = "run.failed")]
    RunFailed,
    #[serde(rename = "run.cancelled")]
    RunCancelled,
    #[serde(rename = "run.partial")]
    RunPartial,
    #[serde(rename = "run.started")]
    RunStarted,
    #[serde(rename = "job.finished")]
    JobFinished,
    #[serde(rename = "endpoint.ready")]
    EndpointReady,
    #[serde(rename = "endpoint.failed")]
    EndpointFailed,
    #[serde(rename = "quota.warning")]
    QuotaWarning,
    /// A workflow run ended (each attempt of a resumed one ends once).
    #[serde(rename = "workflow.finished")]
    WorkflowFinished,
    /// A validation of a model version reached its outcome: approved,
    /// rejected, failed its checks, or withdrawn.
    #[serde(rename = "validation.decided")]
    ValidationDecided,
}

impl EventType {
    /// Every event type, in the order the API lists them.
    pub const ALL: [EventType; 11] = [
        EventType::RunSucceeded,
        EventType::RunFailed,
        EventType::RunCancelled,
        EventType::RunPartial,
        EventType::RunStarted,
        EventType::JobFinished,
        EventType::EndpointReady,
        EventType::EndpointFailed,
        EventType::QuotaWarning,
        EventType::WorkflowFinished,
        EventType::ValidationDecided,
    ];

    /// The event a run's entering `state` is, if webhooks hear of it: a
    /// run starting to run, and each way it ends.
    pub fn of_run_state(state: mapi_domain::RunState) -> Option<EventType> {
        use mapi_domain::RunState as S;
        match state {
            S::Running => Some(EventType::RunStarted),
            S::Succeeded => Some(EventType::RunSucceeded),
            S::Failed => Some(EventType::RunFailed),
            S::Partial => Some(EventType::RunPartial),
            S::Cancelled => Some(EventType::RunCancelled),
            S::Queued | S::Dispatching | S::Cancelling => None,
        }
    }

    /// The wire name, as serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::RunSucceeded => "run.succeeded",
            EventType::RunFailed => "run.failed",
            EventType::RunCancelled => "run.cancelled",
            EventType::RunPartial => "run.partial",
            EventType::RunStarted => "run.started",
            EventType::JobFinished => "job.finished",
            EventType::EndpointReady => "endpoint.ready",
            EventType::EndpointFailed => "endpoint.failed",
            EventType::QuotaWarning => "quota.warning",
            EventType::WorkflowFinished => "workflow.finished",
            EventType::ValidationDecided => "validation.decided",
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is no event type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown webhook event type `{name}`; valid types are: {}", valid_names())]
pub struct UnknownEventType {
    pub name: String,
}

fn valid_names() -> String {
    EventType::ALL.map(EventType::as_str).join(", ")
}

impl FromStr for EventType {
    type Err = UnknownEventType;

    /// Exact wire names only (case matters, as on the wire).
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        EventType::ALL
            .into_iter()
            .find(|t| t.as_str() == name)
            .ok_or_else(|| UnknownEventType { name: name.to_owned() })
    }
}

/// A delivery's body: `{"type": …, "timestamp": …, "data": …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// When the event happened, RFC 3339 UTC.
    pub timestamp: String,
    pub data: serde_json::Value,
}

impl Envelope {
    pub fn new(event_type: EventType, at: Timestamp, data: serde_json::Value) -> Envelope {
        Envelope { event_type, timestamp: at.to_rfc3339(), data }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn wire_names_round_trip() {
        for t in EventType::ALL {
            assert_eq!(serde_json::to_value(t).expect("serializes"), json!(t.as_str()));
            assert_eq!(t.as_str().parse::<EventType>(), Ok(t));
            assert_eq!(serde_json::from_value::<EventType>(json!(t.as_str())).expect("reads"), t);
            assert_eq!(t.to_string(), t.as_str());
        }
        assert_eq!(EventType::RunSucceeded.as_str(), "run.succeeded");
        assert_eq!(EventType::QuotaWarning.as_str(), "quota.warning");
    }

    #[test]
    fn unknown_names_list_the_valid_ones() {
        let err = "run.done".parse::<EventType>().expect_err("unknown");
        assert_eq!(
            err.to_string(),
            "unknown webhook event type `run.done`; valid types are: run.succeeded, run.failed, \
             run.cancelled, run.partial, run.started, job.finished, endpoint.ready, endpoint.failed, \
             quota.warning, workflow.finished, validation.decided"
        );
        assert!("RUN.SUCCEEDED".parse::<EventType>().is_err());
        assert!(serde_json::from_value::<EventType>(json!("run.done")).is_err());
    }

    #[test]
    fn the_envelope_has_the_standard_shape() {
        let at = Timestamp::from_micros(1_614_265_330_000_000);
        let envelope = Envelope::new(EventType::RunSucceeded, at, json!({"run": "run_1"}));
        let text = serde_json::to_string(&envelope).expect("serializes");
        assert_eq!(
            text,
            r#"{"type":"run.succeeded","timestamp":"2021-02-25T15:02:10.000000Z","data":{"run":"run_1"}}"#
        );
        assert_eq!(serde_json::from_str::<Envelope>(&text).expect("reads"), envelope);
    }
}
