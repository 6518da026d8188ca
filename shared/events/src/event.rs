//! The event vocabulary: [`Event`], its [`EventBody`], the [`SignedEvent`]
//! the worker prints, and [`EventError`].
//!
//! Reading an event is strict: unknown fields (top level or of the body's
//! kind), a version other than [`VERSION`] and non-finite numbers are refused.
//! Serde writes a non-finite `f64` as `null`, so a `null` where a number
//! belongs is reported as [`EventError::NonFinite`].

use mapi_domain::{AttemptNo, RunId, Timestamp};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// The event format version this crate writes and reads.
pub const VERSION: u32 = 1;

/// What happened. On the wire: the tag `kind` (snake case) next to the
/// event's own fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventBody {
    /// The method began.
    Started,
    /// How far the task is, `fraction` in [0, 1] (clamped when merged).
    Progress { fraction: f64, message: String },
    /// A named measurement.
    Metric { name: String, value: f64 },
    /// A checkpoint object was written, with this object generation.
    Checkpoint { generation: i64 },
    /// An output file was written. `generation` is the object generation the
    /// store answered the write with; it is absent only when the task found
    /// the output already written by an earlier try of the same task (the
    /// create-only write answered 412), which reported its generation then.
    /// The finalization seals the outputs at exactly these generations and
    /// fails the attempt when a stored output is not one of them.
    Output {
        name: String,
        size: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        generation: Option<i64>,
    },
    /// The method finished successfully, all outputs written: `outputs` of
    /// them, each reported by its own `output` event (absent from workers
    /// that do not count them). The task counts as complete only once that
    /// many of its outputs are merged, so the verdict never sees a
    /// completion ahead of an output whose event is late.
    Complete {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outputs: Option<u32>,
    },
    /// The method failed.
    Error { message: String },
}

/// One event of one task of one run attempt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// Always [`VERSION`].
    pub v: u32,
    pub run: RunId,
    pub attempt: AttemptNo,
    /// The task index within the attempt's execution.
    pub task: u32,
    /// Unique within the attempt; see [`crate::task_seq`].
    pub seq: u64,
    pub at: Timestamp,
    #[serde(flatten)]
    pub body: EventBody,
}

/// An event with its signature: hex HMAC-SHA256 over the canonical JSON of
/// the event. Produced by [`crate::sign`]; read back only through
/// [`crate::verify`], so it deliberately has no `Deserialize`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SignedEvent {
    #[serde(flatten)]
    pub event: Event,
    /// 64 lowercase hex digits.
    pub sig: String,
}

/// Why an event was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    #[error("the event's signature does not verify")]
    BadSignature,
    #[error("malformed event: {0}")]
    Malformed(String),
    #[error("unsupported event version {0}")]
    UnsupportedVersion(u32),
    #[error("event field `{0}` is not a finite number")]
    NonFinite(&'static str),
}

/// The permissive serde shape behind [`Event`]'s strict `Deserialize`.
#[derive(Deserialize)]
struct EventRepr {
    v: u32,
    run: RunId,
    attempt: AttemptNo,
    task: u32,
    seq: u64,
    at: Timestamp,
    #[serde(flatten)]
    body: EventBody,
}

impl Event {
    /// Checks what the types cannot: the version and that numbers are finite.
    pub fn validate(&self) -> Result<(), EventError> {
        if self.v != VERSION {
            return Err(EventError::UnsupportedVersion(self.v));
        }
        match &self.body {
            EventBody::Progress { fraction, .. } if !fraction.is_finite() => {
                Err(EventError::NonFinite("fraction"))
            }
            EventBody::Metric { value, .. } if !value.is_finite() => Err(EventError::NonFinite("value")),
            _ => Ok(()),
        }
    }

    /// Reads an event from its JSON object (without `sig`), strictly.
    pub(crate) fn from_json(raw: &Value) -> Result<Event, EventError> {
        let Value::Object(obj) = raw else {
            return Err(EventError::Malformed("an event is a JSON object".to_owned()));
        };
        let number_field = match obj.get("kind").and_then(Value::as_str) {
            Some("progress") => Some("fraction"),
            Some("metric") => Some("value"),
            _ => None,
        };
        if let Some(field) = number_field
            && obj.get(field).is_some_and(Value::is_null)
        {
            return Err(EventError::NonFinite(field));
        }
        let repr = EventRepr::deserialize(raw).map_err(|e| EventError::Malformed(e.to_string()))?;
        let event = Event {
            v: repr.v,
            run: repr.run,
            attempt: repr.attempt,
            task: repr.task,
            seq: repr.seq,
            at: repr.at,
            body: repr.body,
        };
        event.validate()?;
        // Every field the event reads back is one it writes: a field the
        // typed event does not write is unknown (top level or for its kind).
        let known = serde_json::to_value(&event).expect("a validated event serializes");
        if let Some(unknown) = obj.keys().find(|k| known.get(k.as_str()).is_none()) {
            return Err(EventError::Malformed(format!("unknown field `{unknown}`")));
        }
        Ok(event)
    }
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Value::deserialize(d)?;
        Event::from_json(&raw).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::fixtures;

    fn with_body(body: EventBody) -> Event {
        Event { body, ..fixtures::event() }
    }

    fn raw(body: EventBody) -> Value {
        serde_json::to_value(with_body(body)).expect("serializes")
    }

    fn read(v: Value) -> Result<Event, EventError> {
        Event::from_json(&v)
    }

    #[test]
    fn every_kind_round_trips_with_its_wire_shape() {
        let bodies = [
            (EventBody::Started, json!({"kind": "started"})),
            (
                EventBody::Progress { fraction: 0.25, message: "m".into() },
                json!({"kind": "progress", "fraction": 0.25, "message": "m"}),
            ),
            (
                EventBody::Metric { name: "loss".into(), value: -1.5 },
                json!({"kind": "metric", "name": "loss", "value": -1.5}),
            ),
            (EventBody::Checkpoint { generation: 17 }, json!({"kind": "checkpoint", "generation": 17})),
            (
                EventBody::Output { name: "model.bin".into(), size: 42, generation: Some(7) },
                json!({"kind": "output", "name": "model.bin", "size": 42, "generation": 7}),
            ),
            (
                EventBody::Output { name: "model.bin".into(), size: 42, generation: None },
                json!({"kind": "output", "name": "model.bin", "size": 42}),
            ),
            (EventBody::Complete { outputs: None }, json!({"kind": "complete"})),
            (EventBody::Complete { outputs: Some(2) }, json!({"kind": "complete", "outputs": 2})),
            (EventBody::Error { message: "boom".into() }, json!({"kind": "error", "message": "boom"})),
        ];
        for (body, expected_body) in bodies {
            let v = raw(body.clone());
            let mut expected = json!({
                "v": 1, "run": "run_01jd8x9k2m3n4p5q6r7s8t9v0w", "attempt": 1, "task": 2,
                "seq": 2_199_023_255_559_u64, "at": "2026-11-30T06:15:40.123456Z"
            });
            for (k, x) in expected_body.as_object().expect("object") {
                expected[k] = x.clone();
            }
            assert_eq!(v, expected);
            assert_eq!(read(v.clone()), Ok(with_body(body.clone())));
            let via_serde: Event = serde_json::from_value(v).expect("deserializes");
            assert_eq!(via_serde, with_body(body));
        }
    }

    #[test]
    fn unknown_fields_are_refused() {
        let mut top = raw(EventBody::Started);
        top["extra"] = json!(1);
        assert_eq!(read(top), Err(EventError::Malformed("unknown field `extra`".into())));

        let mut of_other_kind = raw(EventBody::Started);
        of_other_kind["fraction"] = json!(0.5);
        assert_eq!(read(of_other_kind), Err(EventError::Malformed("unknown field `fraction`".into())));

        let mut in_progress = raw(EventBody::Progress { fraction: 0.5, message: "m".into() });
        in_progress["size"] = json!(3);
        assert_eq!(read(in_progress), Err(EventError::Malformed("unknown field `size`".into())));

        let mut signed = raw(EventBody::Complete { outputs: None });
        signed["sig"] = json!("00");
        assert!(serde_json::from_value::<Event>(signed).is_err(), "an Event has no sig");
    }

    #[test]
    fn missing_or_mistyped_fields_are_malformed() {
        for field in ["v", "run", "attempt", "task", "seq", "at", "kind"] {
            let mut v = raw(EventBody::Complete { outputs: None });
            v.as_object_mut().expect("object").remove(field);
            assert!(matches!(read(v), Err(EventError::Malformed(_))), "without {field}");
        }
        let mut v = raw(EventBody::Progress { fraction: 0.5, message: "m".into() });
        v.as_object_mut().expect("object").remove("message");
        assert!(matches!(read(v), Err(EventError::Malformed(_))));
        for (field, bad) in [("run", json!("run_x")), ("seq", json!(-1)), ("kind", json!("dance"))] {
            let mut v = raw(EventBody::Complete { outputs: None });
            v[field] = bad;
            assert!(matches!(read(v), Err(EventError::Malformed(_))), "bad {field}");
        }
        assert!(matches!(read(json!([1])), Err(EventError::Malformed(_))));
    }

    #[test]
    fn other_versions_are_refused() {
        let mut v = raw(EventBody::Complete { outputs: None });
        v["v"] = json!(2);
        assert_eq!(read(v), Err(EventError::UnsupportedVersion(2)));
        assert_eq!(Event { v: 0, ..fixtures::event() }.validate(), Err(EventError::UnsupportedVersion(0)));
    }

    #[test]
    fn non_finite_numbers_are_refused() {
        let nan = with_body(EventBody::Progress { fraction: f64::NAN, message: "m".into() });
        assert_eq!(nan.validate(), Err(EventError::NonFinite("fraction")));
        // serde_json writes the NaN as null; reading it back names the field.
        let v = serde_json::to_value(&nan).expect("serializes");
        assert_eq!(v["fraction"], Value::Null);
        assert_eq!(read(v), Err(EventError::NonFinite("fraction")));

        let inf = with_body(EventBody::Metric { name: "loss".into(), value: f64::INFINITY });
        assert_eq!(inf.validate(), Err(EventError::NonFinite("value")));
        let v = serde_json::to_value(&inf).expect("serializes");
        assert_eq!(read(v), Err(EventError::NonFinite("value")));

        let mut huge = raw(EventBody::Metric { name: "loss".into(), value: 1.0 });
        huge["value"] = json!(f64::MAX);
        assert!(read(huge).is_ok(), "large but finite is fine");
    }
}
