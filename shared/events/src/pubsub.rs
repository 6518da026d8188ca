//! How an event line reaches the platform: as a Cloud Logging LogEntry,
//! published by a log sink to Pub/Sub and pushed to `POST /internal/events`.
//!
//! In the cloud Google builds these shapes; locally the executor builds the
//! same ones with [`log_entry`] and [`envelope`], so the server has one path:
//! [`PushEnvelope::parse`] (the envelope, whose subscription is checked
//! first), then [`PushEnvelope::open`] (the message). Field names are exactly
//! Google's.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use mapi_domain::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::LINE_KEY;

/// The LogEntry label Cloud Run Jobs sets to the execution's name.
pub const EXECUTION_LABEL: &str = "run.googleapis.com/execution_name";

/// The Pub/Sub attribute a Cloud Logging sink sets to the entry's timestamp.
pub const TIMESTAMP_ATTRIBUTE: &str = "logging.googleapis.com/timestamp";

/// The `resource.labels.location` of entries built by [`log_entry`], which
/// only the local executor builds (in the cloud, Cloud Logging writes the
/// entry with the job's region).
pub const LOCAL_LOCATION: &str = "local";

/// The JSON body of a Pub/Sub push request. Unknown fields (such as
/// `deliveryAttempt`) are ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushEnvelope {
    pub message: PubsubMessage,
    /// `projects/<project>/subscriptions/<name>`.
    pub subscription: String,
}

/// A pushed Pub/Sub message. Pub/Sub also sends `message_id` and
/// `publish_time` in snake case; those duplicates are ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PubsubMessage {
    /// Standard base64 with padding; absent (empty) for a message without data.
    #[serde(default)]
    pub data: String,
    #[serde(rename = "messageId")]
    pub message_id: String,
    /// RFC 3339, as Pub/Sub writes it.
    #[serde(rename = "publishTime")]
    pub publish_time: String,
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
}

/// A LogEntry as Cloud Run Jobs writes it for one JSON line of stdout:
/// `line_payload` (the whole `{"mapi_event": ...}` object) becomes its
/// `jsonPayload`, labelled with the execution's name.
pub fn log_entry(
    line_payload: &Value,
    execution_name: &str,
    job_name: &str,
    project: &str,
    at: Timestamp,
    insert_id: &str,
) -> Value {
    let mut labels = serde_json::Map::new();
    labels.insert(EXECUTION_LABEL.to_owned(), json!(execution_name));
    json!({
        "insertId": insert_id,
        "jsonPayload": line_payload,
        "resource": {
            "type": "cloud_run_job",
            "labels": { "job_name": job_name, "location": LOCAL_LOCATION, "project_id": project },
        },
        "timestamp": at.to_rfc3339(),
        "severity": "DEFAULT",
        "labels": labels,
        "logName": format!("projects/{project}/logs/run.googleapis.com%2Fstdout"),
        "receiveTimestamp": at.to_rfc3339(),
    })
}

/// The push body a log sink's subscription would POST for `entry`:
/// `data` is the base64 of the entry's JSON, and the entry's timestamp (if
/// any) is copied to the [`TIMESTAMP_ATTRIBUTE`] attribute as a sink does.
pub fn envelope(
    entry: &Value,
    subscription: &str,
    message_id: &str,
    publish_time: Timestamp,
) -> PushEnvelope {
    let attributes = entry
        .get("timestamp")
        .and_then(Value::as_str)
        .map(|t| (TIMESTAMP_ATTRIBUTE.to_owned(), t.to_owned()))
        .into_iter()
        .collect();
    PushEnvelope {
        message: PubsubMessage {
            data: STANDARD.encode(entry.to_string()),
            message_id: message_id.to_owned(),
            publish_time: publish_time.to_rfc3339(),
            attributes,
        },
        subscription: subscription.to_owned(),
    }
}

/// What a push delivered: the raw `mapi_event` object (still to be verified)
/// and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivered {
    /// The raw `mapi_event` object, `sig` included.
    pub event: Value,
    /// The LogEntry's [`EXECUTION_LABEL`], if it had one.
    pub execution_name: Option<String>,
    pub message_id: String,
    pub subscription: String,
}

/// Why a push body carries no event. Every one is permanent: redelivering
/// the same body cannot succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    #[error("push body is not JSON: {0}")]
    NotJson(String),
    #[error("push body is not a Pub/Sub push envelope: {0}")]
    NotEnvelope(String),
    #[error("Pub/Sub message has no data")]
    NoData,
    #[error("message.data is not standard base64: {0}")]
    BadBase64(String),
    #[error("message.data is not a JSON log entry: {0}")]
    EntryNotJson(String),
    #[error("log entry has no jsonPayload.mapi_event object")]
    NoEvent,
}

impl PushEnvelope {
    /// Reads the envelope of a push body without looking into the message,
    /// so the subscription can be checked before anything the message says.
    pub fn parse(body: &[u8]) -> Result<PushEnvelope, EnvelopeError> {
        let json: Value = serde_json::from_slice(body).map_err(|e| EnvelopeError::NotJson(e.to_string()))?;
        PushEnvelope::deserialize(&json).map_err(|e| EnvelopeError::NotEnvelope(e.to_string()))
    }

    /// The event the message carries: base64 `message.data`, then the
    /// LogEntry JSON, then its `jsonPayload.mapi_event` object and execution label.
    pub fn open(self) -> Result<Delivered, EnvelopeError> {
        if self.message.data.is_empty() {
            return Err(EnvelopeError::NoData);
        }
        let bytes =
            STANDARD.decode(&self.message.data).map_err(|e| EnvelopeError::BadBase64(e.to_string()))?;
        let entry: Value =
            serde_json::from_slice(&bytes).map_err(|e| EnvelopeError::EntryNotJson(e.to_string()))?;
        let event = entry
            .get("jsonPayload")
            .and_then(|p| p.get(LINE_KEY))
            .filter(|e| e.is_object())
            .cloned()
            .ok_or(EnvelopeError::NoEvent)?;
        let execution_name = entry
            .get("labels")
            .and_then(|l| l.get(EXECUTION_LABEL))
            .and_then(Value::as_str)
            .map(str::to_owned);
        Ok(Delivered {
            event,
            execution_name,
            message_id: self.message.message_id,
            subscription: self.subscription,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{self, GOLDEN_SIG};
    use crate::{line, parse_line, sign, verify};

    const SUB: &str = "projects/mapi-dev/subscriptions/mapi-events-push";

    /// A push body read the way the server reads it: the envelope, then the message.
    fn decode(body: &[u8]) -> Result<Delivered, EnvelopeError> {
        PushEnvelope::parse(body)?.open()
    }

    #[test]
    fn the_envelope_is_read_without_opening_the_message() {
        let body = push_body(json!({"data": "%%% not base64", "messageId": "1", "publishTime": "t"}));
        let envelope = PushEnvelope::parse(&body).expect("the envelope parses");
        assert_eq!(envelope.subscription, SUB);
        assert!(matches!(envelope.open(), Err(EnvelopeError::BadBase64(_))));
        assert!(matches!(PushEnvelope::parse(b"{\"message\": 1}"), Err(EnvelopeError::NotEnvelope(_))));
    }

    fn payload() -> Value {
        let text = line(&sign(fixtures::event(), &fixtures::key()));
        serde_json::from_str(&text).expect("a line is JSON")
    }

    fn entry() -> Value {
        log_entry(&payload(), "fit-abc-x7k2p", "fit-abc", "mapi-dev", fixtures::at(), "65f1a2b3000c1d2e")
    }

    fn push_body(message: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({ "message": message, "subscription": SUB })).expect("json")
    }

    #[test]
    fn log_entry_has_cloud_run_jobs_shape() {
        let e = entry();
        assert_eq!(e["jsonPayload"], payload());
        assert_eq!(e["resource"]["type"], "cloud_run_job");
        assert_eq!(e["resource"]["labels"]["job_name"], "fit-abc");
        assert_eq!(e["resource"]["labels"]["project_id"], "mapi-dev");
        assert_eq!(e["resource"]["labels"]["location"], LOCAL_LOCATION);
        assert_eq!(e["labels"][EXECUTION_LABEL], "fit-abc-x7k2p");
        assert_eq!(e["logName"], "projects/mapi-dev/logs/run.googleapis.com%2Fstdout");
        assert_eq!(e["timestamp"], "2026-11-30T06:15:40.123456Z");
        assert_eq!(e["receiveTimestamp"], "2026-11-30T06:15:40.123456Z");
        assert_eq!(e["severity"], "DEFAULT");
        assert_eq!(e["insertId"], "65f1a2b3000c1d2e");
    }

    #[test]
    fn envelope_then_decode_round_trips() {
        let env = envelope(&entry(), SUB, "2070443601311540", fixtures::at());
        assert_eq!(env.message.attributes[TIMESTAMP_ATTRIBUTE], "2026-11-30T06:15:40.123456Z");
        assert_eq!(env.message.publish_time, "2026-11-30T06:15:40.123456Z");
        let body = serde_json::to_vec(&env).expect("json");
        let got = decode(&body).expect("decodes");
        assert_eq!(
            got,
            Delivered {
                event: parse_line(&line(&sign(fixtures::event(), &fixtures::key()))).expect("event line"),
                execution_name: Some("fit-abc-x7k2p".to_owned()),
                message_id: "2070443601311540".to_owned(),
                subscription: SUB.to_owned(),
            }
        );
        assert_eq!(verify(&got.event, &fixtures::key()), Ok(fixtures::event()));
    }

    #[test]
    fn missing_execution_label_is_none() {
        let mut e = entry();
        e.as_object_mut().expect("object").remove("labels");
        let body = serde_json::to_vec(&envelope(&e, SUB, "1", fixtures::at())).expect("json");
        assert_eq!(decode(&body).expect("decodes").execution_name, None);
    }

    #[test]
    fn each_malformation_has_its_error() {
        let ok_message =
            |data: &str| json!({"data": data, "messageId": "1", "publishTime": "2026-11-30T06:15:40Z"});
        let b64 = |v: &Value| STANDARD.encode(v.to_string());

        assert!(matches!(decode(b"not json"), Err(EnvelopeError::NotJson(_))));
        assert!(matches!(decode(b""), Err(EnvelopeError::NotJson(_))));
        assert!(matches!(decode(b"[1,2]"), Err(EnvelopeError::NotEnvelope(_))));
        let no_id = push_body(json!({"data": "e30=", "publishTime": "2026-11-30T06:15:40Z"}));
        assert!(matches!(decode(&no_id), Err(EnvelopeError::NotEnvelope(m)) if m.contains("messageId")));
        let no_sub = serde_json::to_vec(&json!({"message": ok_message("e30=")})).expect("json");
        assert!(matches!(decode(&no_sub), Err(EnvelopeError::NotEnvelope(m)) if m.contains("subscription")));

        let no_data = push_body(json!({"messageId": "1", "publishTime": "2026-11-30T06:15:40Z"}));
        assert_eq!(decode(&no_data), Err(EnvelopeError::NoData));
        assert_eq!(decode(&push_body(ok_message(""))), Err(EnvelopeError::NoData));

        assert!(matches!(decode(&push_body(ok_message("%%%not base64"))), Err(EnvelopeError::BadBase64(_))));
        let url_safe = "-_8="; // URL-safe alphabet is not standard base64
        assert!(matches!(decode(&push_body(ok_message(url_safe))), Err(EnvelopeError::BadBase64(_))));

        let text = STANDARD.encode("epoch 3 loss=0.25");
        assert!(matches!(decode(&push_body(ok_message(&text))), Err(EnvelopeError::EntryNotJson(_))));

        for entry in [
            json!({"textPayload": "epoch 3"}),
            json!({"jsonPayload": {"message": "hello"}}),
            json!({"jsonPayload": {"mapi_event": "string"}}),
            json!({"jsonPayload": {"mapi_event": [1]}}),
            json!([1]),
        ] {
            assert_eq!(decode(&push_body(ok_message(&b64(&entry)))), Err(EnvelopeError::NoEvent), "{entry}");
        }
    }

    /// A push body as Pub/Sub sends it, typed by hand, with the snake-case
    /// duplicates and `deliveryAttempt`.
    #[test]
    fn real_looking_push_body_decodes() {
        let entry = format!(
            r#"{{"insertId":"65f1a2b3000c1d2e","jsonPayload":{{"mapi_event":{{"v":1,"run":"run_01jd8x9k2m3n4p5q6r7s8t9v0w","attempt":1,"task":2,"seq":2199023255559,"at":"2026-11-30T06:15:40.123456Z","kind":"progress","fraction":0.5,"message":"step 3/10 — ok","sig":"{GOLDEN_SIG}"}}}},"resource":{{"type":"cloud_run_job","labels":{{"job_name":"fit-abc","location":"europe-west1","project_id":"mapi-dev"}}}},"timestamp":"2026-11-30T06:15:40.123456Z","severity":"DEFAULT","labels":{{"instanceId":"0069c7a988","run.googleapis.com/execution_name":"fit-abc-x7k2p","run.googleapis.com/task_attempt":"0","run.googleapis.com/task_index":"2"}},"logName":"projects/mapi-dev/logs/run.googleapis.com%2Fstdout","receiveTimestamp":"2026-11-30T06:15:40.301923417Z"}}"#
        );
        let data = STANDARD.encode(entry);
        let body = format!(
            r#"{{
  "message": {{
    "attributes": {{ "logging.googleapis.com/timestamp": "2026-11-30T06:15:40.123456Z" }},
    "data": "{data}",
    "messageId": "2070443601311540",
    "message_id": "2070443601311540",
    "publishTime": "2026-11-30T06:15:40.512Z",
    "publish_time": "2026-11-30T06:15:40.512Z"
  }},
  "subscription": "projects/mapi-dev/subscriptions/mapi-events-push",
  "deliveryAttempt": 3
}}"#
        );
        let got = decode(body.as_bytes()).expect("decodes");
        assert_eq!(got.execution_name.as_deref(), Some("fit-abc-x7k2p"));
        assert_eq!(got.message_id, "2070443601311540");
        assert_eq!(got.subscription, SUB);
        assert_eq!(verify(&got.event, &fixtures::key()), Ok(fixtures::event()));
    }
}
