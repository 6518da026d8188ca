//! The stdout line format: `{"mapi_event":{...}}` on one line.
//!
//! Cloud Logging turns a JSON stdout line into the LogEntry's `jsonPayload`,
//! so the sink filter `jsonPayload.mapi_event:*` picks event lines out of all
//! other output.

use serde::Serialize;
use serde_json::Value;

use crate::SignedEvent;

/// The key an event line carries its event under.
pub const LINE_KEY: &str = "mapi_event";

#[derive(Serialize)]
struct Line<'a> {
    mapi_event: &'a SignedEvent,
}

/// The stdout line for `signed`, without a trailing newline. JSON escapes
/// every control character, so the line never contains a newline.
pub fn line(signed: &SignedEvent) -> String {
    serde_json::to_string(&Line { mapi_event: signed }).expect("an event serializes")
}

/// The raw `mapi_event` object of a stdout line, or `None` if the line is
/// other output (not JSON, not an object, no `mapi_event` object).
pub fn parse_line(line: &str) -> Option<Value> {
    let line = line.trim();
    if !line.starts_with('{') || !line.contains(LINE_KEY) {
        return None;
    }
    match serde_json::from_str::<Value>(line).ok()? {
        Value::Object(mut obj) => obj.remove(LINE_KEY).filter(Value::is_object),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{self, GOLDEN_SIG};
    use crate::{EventBody, sign, verify};

    #[test]
    fn line_is_one_json_object_keyed_mapi_event() {
        let mut event = fixtures::event();
        event.body = EventBody::Error { message: "two\nlines\r\n".into() };
        let signed = sign(event.clone(), &fixtures::key());
        let text = line(&signed);
        assert!(!text.contains('\n') && !text.contains('\r'));
        assert!(text.starts_with("{\"mapi_event\":{") && text.ends_with("}}"));
        let raw = parse_line(&text).expect("an event line");
        assert_eq!(verify(&raw, &fixtures::key()), Ok(event));
    }

    #[test]
    fn golden_line_parses() {
        let text = format!(
            "{{\"mapi_event\":{{\"v\":1,\"run\":\"run_01jd8x9k2m3n4p5q6r7s8t9v0w\",\"attempt\":1,\"task\":2,\
             \"seq\":2199023255559,\"at\":\"2026-11-30T06:15:40.123456Z\",\"kind\":\"progress\",\
             \"fraction\":0.5,\"message\":\"step 3/10 — ok\",\"sig\":\"{GOLDEN_SIG}\"}}}}\n"
        );
        let raw = parse_line(&text).expect("an event line");
        assert_eq!(verify(&raw, &fixtures::key()), Ok(fixtures::event()));
    }

    #[test]
    fn other_output_is_not_an_event() {
        for other in [
            "",
            "epoch 3 loss=0.25",
            "mapi_event",
            "{\"level\":\"info\",\"msg\":\"hello\"}",
            "{\"mapi_event\":\"not an object\"}",
            "{\"mapi_event\":[1]}",
            "{\"mapi_event\":{\"v\":1}",
            "[{\"mapi_event\":{}}]",
        ] {
            assert_eq!(parse_line(other), None, "{other:?}");
        }
        assert_eq!(parse_line("  {\"mapi_event\":{\"v\":1}}  "), Some(serde_json::json!({"v": 1})));
    }
}
