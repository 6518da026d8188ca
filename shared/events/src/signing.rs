//! Signing and verifying events, and reading their routing ids.
//!
//! `sig = hex(HMAC-SHA256(key, canonical_json(event object without "sig")))`.
//! [`verify`] recomputes the MAC over the *raw* object as received (minus
//! `sig`), so any field, known or not, is covered, and only then reads it into
//! an [`Event`].

use hmac::{Hmac, KeyInit, Mac};
use mapi_domain::{AttemptNo, RunId};
use serde_json::{Map, Value};
use sha2::Sha256;

use crate::{AttemptKey, Event, EventError, SignedEvent, VERSION, canonical_json};

type HmacSha256 = Hmac<Sha256>;

fn mac_over(raw: &Value, key: &AttemptKey) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(key.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(canonical_json(raw).as_bytes());
    mac
}

/// Signs `event` under `key`.
pub fn sign(event: Event, key: &AttemptKey) -> SignedEvent {
    let raw = serde_json::to_value(&event).expect("an event serializes");
    let sig = hex::encode(mac_over(&raw, key).finalize().into_bytes());
    SignedEvent { event, sig }
}

/// Verifies the raw `mapi_event` object as received and reads it.
///
/// A `v` other than [`VERSION`] is refused before the MAC (a later version
/// may sign differently); a missing `sig` is [`EventError::Malformed`]; a
/// `sig` that is not 64 lowercase hex digits or does not match is
/// [`EventError::BadSignature`] (compared in constant time); then the event
/// is read strictly (unknown fields, non-finite numbers refused).
pub fn verify(raw: &Value, key: &AttemptKey) -> Result<Event, EventError> {
    let obj = as_object(raw)?;
    if let Some(v) = obj.get("v").and_then(Value::as_u64)
        && v != u64::from(VERSION)
    {
        return Err(EventError::UnsupportedVersion(u32::try_from(v).unwrap_or(u32::MAX)));
    }
    let mut rest = obj.clone();
    let sig = match rest.remove("sig") {
        None => return Err(EventError::Malformed("no `sig`".to_owned())),
        Some(Value::String(sig)) => sig,
        Some(_) => return Err(EventError::BadSignature),
    };
    let tag = decode_sig(&sig).ok_or(EventError::BadSignature)?;
    let rest = Value::Object(rest);
    mac_over(&rest, key).verify_slice(&tag).map_err(|_| EventError::BadSignature)?;
    Event::from_json(&rest)
}

fn decode_sig(sig: &str) -> Option<[u8; 32]> {
    let lower_hex = sig.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if sig.len() != 64 || !lower_hex {
        return None;
    }
    let mut tag = [0u8; 32];
    hex::decode_to_slice(sig, &mut tag).ok()?;
    Some(tag)
}

/// The routing ids of an unverified event: (run, attempt, task, seq). The
/// server needs them to look up the key; trust them only after [`verify`].
pub fn peek_ids(raw: &Value) -> Result<(RunId, AttemptNo, u32, u64), EventError> {
    let obj = as_object(raw)?;
    let run = obj.get("run").and_then(Value::as_str).ok_or_else(|| missing("run", "a string"))?;
    let run = RunId::parse(run).map_err(|e| EventError::Malformed(e.to_string()))?;
    let attempt = u32_field(obj, "attempt")?;
    let task = u32_field(obj, "task")?;
    let seq = obj.get("seq").and_then(Value::as_u64).ok_or_else(|| missing("seq", "an unsigned integer"))?;
    Ok((run, AttemptNo(attempt), task, seq))
}

fn as_object(raw: &Value) -> Result<&Map<String, Value>, EventError> {
    raw.as_object().ok_or_else(|| EventError::Malformed("an event is a JSON object".to_owned()))
}

fn u32_field(obj: &Map<String, Value>, field: &'static str) -> Result<u32, EventError> {
    obj.get(field)
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| missing(field, "an unsigned 32-bit integer"))
}

fn missing(field: &str, what: &str) -> EventError {
    EventError::Malformed(format!("`{field}` must be {what}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::fixtures::{self, GOLDEN, GOLDEN_SIG};
    use crate::{EventBody, task_seq};

    fn signed_raw() -> Value {
        serde_json::to_value(sign(fixtures::event(), &fixtures::key())).expect("serializes")
    }

    /// Re-signs an edited raw object the way `sign` would (MAC over all but `sig`).
    fn resign(mut raw: Value, key: &AttemptKey) -> Value {
        let obj = raw.as_object_mut().expect("object");
        obj.remove("sig");
        let sig = hex::encode(mac_over(&Value::Object(obj.clone()), key).finalize().into_bytes());
        obj.insert("sig".to_owned(), json!(sig));
        raw
    }

    #[test]
    fn known_answer_signature() {
        let signed = sign(fixtures::event(), &fixtures::key());
        assert_eq!(signed.sig, GOLDEN_SIG);
        // The same MAC computed directly over the hand-written canonical text.
        let mut mac = HmacSha256::new_from_slice(&fixtures::key().as_bytes()[..]).expect("key");
        mac.update(GOLDEN.as_bytes());
        assert_eq!(hex::encode(mac.finalize().into_bytes()), GOLDEN_SIG);
    }

    #[test]
    fn hmac_sha256_matches_rfc_4231_case_2() {
        let mut mac = HmacSha256::new_from_slice(b"Jefe").expect("key");
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn round_trip() {
        assert_eq!(verify(&signed_raw(), &fixtures::key()), Ok(fixtures::event()));
        for body in [
            EventBody::Started,
            EventBody::Metric { name: "loss".into(), value: 0.125 },
            EventBody::Checkpoint { generation: 1_700_000_000_000_001 },
            EventBody::Output { name: "out/model.bin".into(), size: u64::MAX, generation: Some(i64::MAX) },
            EventBody::Complete { outputs: None },
            EventBody::Error { message: "line 1\nline \"2\"\u{1}".into() },
        ] {
            let event = Event { body, ..fixtures::event() };
            let raw = serde_json::to_value(sign(event.clone(), &fixtures::key())).expect("serializes");
            assert_eq!(verify(&raw, &fixtures::key()), Ok(event));
        }
    }

    #[test]
    fn tampering_with_any_field_fails() {
        let key = fixtures::key();
        let edits: [(&str, Value); 7] = [
            ("seq", json!(task_seq(2, 8))),
            ("run", json!("run_01jd8x9k2m3n4p5q6r7s8t9v0x")),
            ("fraction", json!(0.51)),
            ("task", json!(1)),
            ("at", json!("2026-11-30T06:15:41.123456Z")),
            ("message", json!("step 3/10 - ok")),
            ("extra", json!(true)),
        ];
        for (field, value) in edits {
            let mut raw = signed_raw();
            raw[field] = value;
            assert_eq!(verify(&raw, &key), Err(EventError::BadSignature), "tampered {field}");
        }
        let mut raw = signed_raw();
        raw.as_object_mut().expect("object").remove("message");
        assert_eq!(verify(&raw, &key), Err(EventError::BadSignature), "removed a field");
    }

    #[test]
    fn relabelled_attempt_fails() {
        let mut raw = signed_raw();
        raw["attempt"] = json!(2);
        assert_eq!(verify(&raw, &fixtures::key()), Err(EventError::BadSignature));
    }

    #[test]
    fn a_different_key_fails() {
        let other = AttemptKey::from_bytes([7; 32]);
        assert_eq!(verify(&signed_raw(), &other), Err(EventError::BadSignature));
    }

    #[test]
    fn sig_must_be_present_and_well_formed() {
        let key = fixtures::key();
        let mut raw = signed_raw();
        raw.as_object_mut().expect("object").remove("sig");
        assert_eq!(verify(&raw, &key), Err(EventError::Malformed("no `sig`".into())));
        for bad in [json!(GOLDEN_SIG.to_uppercase()), json!(&GOLDEN_SIG[..62]), json!(null), json!(1)] {
            let mut raw = signed_raw();
            raw["sig"] = bad;
            assert_eq!(verify(&raw, &key), Err(EventError::BadSignature));
        }
        assert!(matches!(verify(&json!("x"), &key), Err(EventError::Malformed(_))));
    }

    #[test]
    fn correctly_signed_but_invalid_events_are_still_refused() {
        let key = fixtures::key();
        let mut extra = signed_raw();
        extra["extra"] = json!(1);
        assert_eq!(
            verify(&resign(extra, &key), &key),
            Err(EventError::Malformed("unknown field `extra`".into()))
        );

        let nan = Event {
            body: EventBody::Progress { fraction: f64::NAN, message: "m".into() },
            ..fixtures::event()
        };
        let raw = serde_json::to_value(sign(nan, &key)).expect("serializes");
        assert_eq!(verify(&raw, &key), Err(EventError::NonFinite("fraction")));

        let mut v2 = signed_raw();
        v2["v"] = json!(2);
        assert_eq!(verify(&resign(v2.clone(), &key), &key), Err(EventError::UnsupportedVersion(2)));
        assert_eq!(verify(&v2, &key), Err(EventError::UnsupportedVersion(2)), "refused before the MAC");
    }

    #[test]
    fn peek_ids_reads_routing_ids_without_the_key() {
        let ids = peek_ids(&signed_raw()).expect("ids");
        assert_eq!(ids, (fixtures::run(), AttemptNo(1), 2, task_seq(2, 7)));
        for (field, bad) in [
            ("run", json!("nope")),
            ("attempt", json!(-1)),
            ("task", json!(1_u64 << 32)),
            ("seq", json!("1")),
        ] {
            let mut raw = signed_raw();
            raw[field] = bad;
            assert!(matches!(peek_ids(&raw), Err(EventError::Malformed(_))), "bad {field}");
        }
        assert!(matches!(peek_ids(&json!(null)), Err(EventError::Malformed(_))));
    }
}

#[cfg(test)]
mod transport {
    use super::*;
    use crate::{EventBody, fixtures};

    /// A signed event still verifies after the trip through a stdout line,
    /// a Cloud Logging entry and a JSON parser, whatever its floats are.
    #[test]
    fn awkward_floats_survive_json_transport() {
        let key = fixtures::key();
        let mut rng = mapi_entropy::SplitMix64::new(0x9e37_79b9_7f4a_7c15);
        for i in 0..2000u64 {
            // SplitMix64 bits → a float anywhere in [0, 1), including tiny ones.
            let z = rng.next_u64();
            let f = (z >> 11) as f64 / (1u64 << 53) as f64 / 10f64.powi((i % 12) as i32);
            let mut e = fixtures::event();
            e.body = EventBody::Progress { fraction: f, message: String::new() };
            let signed = sign(e, &key);
            let line = crate::line(&signed);
            let raw = crate::parse_line(&line).expect("event line");
            assert!(verify(&raw, &key).is_ok(), "fraction {f:e} does not survive transport");
        }
    }
}
