//! Canonical JSON: the exact bytes an event's signature covers.
//!
//! Object keys are sorted by their UTF-8 bytes at every depth, explicitly, so
//! the result does not depend on serde_json's map ordering (another crate in
//! the build may enable `preserve_order`). No whitespace; arrays keep their
//! order; numbers print as serde_json prints them; strings escape `"`, `\`
//! and the control characters below U+0020 exactly as serde_json does
//! (`\b \t \n \f \r`, otherwise `\u00xx` in lowercase hex) and keep every other
//! character, non-ASCII included, as raw UTF-8.

use serde_json::Value;

/// The canonical text of `v`.
pub fn canonical_json(v: &Value) -> String {
    let mut out = String::new();
    write_value(v, &mut out);
    out
}

fn write_value(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_str(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (k, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_str(k, out);
                out.push(':');
                write_value(item, out);
            }
            out.push('}');
        }
    }
}

fn write_str(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{08}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{0c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if u32::from(c) < 0x20 => {
                let b = u32::from(c) as usize;
                out.push_str("\\u00");
                out.push(char::from(HEX[b >> 4]));
                out.push(char::from(HEX[b & 15]));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, json};

    use super::*;
    use crate::fixtures::{self, GOLDEN};

    #[test]
    fn sorts_keys_at_every_depth_and_keeps_array_order() {
        let v = json!({
            "b": {"z": 1, "a": [3, {"y": true, "x": null}, 1], "m": {"d": 1, "c": 2}},
            "a": "x",
            "B": 2,
            "aa": [],
            "": {}
        });
        assert_eq!(
            canonical_json(&v),
            r#"{"":{},"B":2,"a":"x","aa":[],"b":{"a":[3,{"x":null,"y":true},1],"m":{"c":2,"d":1},"z":1}}"#
        );
    }

    #[test]
    fn sorts_by_utf8_bytes() {
        // 'é' (C3 A9) sorts after 'z' (7A) and before '😀' (F0 ...), and
        // "a" before "a\u{0}" (prefix first).
        let v = json!({"😀": 1, "é": 2, "z": 3, "a\u{0}": 4, "a": 5, "Z": 6});
        assert_eq!(canonical_json(&v), "{\"Z\":6,\"a\":5,\"a\\u0000\":4,\"z\":3,\"é\":2,\"😀\":1}");
    }

    #[test]
    fn escapes_like_serde_json_and_keeps_unicode() {
        let s = "q\"b\\s/\u{08}\u{0c}\n\r\t\u{01}\u{1f}\u{7f}é—😀";
        let expected = "\"q\\\"b\\\\s/\\b\\f\\n\\r\\t\\u0001\\u001f\u{7f}é—😀\"";
        assert_eq!(canonical_json(&json!(s)), expected);
        assert_eq!(canonical_json(&json!(s)), serde_json::to_string(s).expect("serializes"));
    }

    #[test]
    fn numbers_and_literals_print_as_serde_json_does() {
        let v = json!([0, -1, 18_446_744_073_709_551_615_u64, 0.5, 1.0, -2.25e-8, 1e21, true, false, null]);
        assert_eq!(canonical_json(&v), "[0,-1,18446744073709551615,0.5,1.0,-2.25e-8,1e+21,true,false,null]");
        assert_eq!(canonical_json(&v), serde_json::to_string(&v).expect("serializes"));
    }

    #[test]
    fn no_whitespace_even_when_input_had_some() {
        let v: Value = serde_json::from_str("{ \"b\" : [ 1 , 2 ] ,\n \"a\" : { } }").expect("json");
        assert_eq!(canonical_json(&v), r#"{"a":{},"b":[1,2]}"#);
    }

    #[test]
    fn golden_event() {
        let v = serde_json::to_value(fixtures::event()).expect("serializes");
        assert_eq!(canonical_json(&v), GOLDEN);
    }

    #[test]
    fn map_insertion_order_does_not_matter() {
        let Value::Object(forward) = serde_json::to_value(fixtures::event()).expect("serializes") else {
            panic!("an event serializes as an object");
        };
        let mut entries: Vec<(String, Value)> = forward.into_iter().collect();
        entries.sort_by(|a, b| b.0.cmp(&a.0));
        let mut reversed = Map::new();
        for (k, v) in entries {
            reversed.insert(k, v);
        }
        assert_eq!(canonical_json(&Value::Object(reversed)), GOLDEN);
    }
}
