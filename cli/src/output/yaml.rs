//! YAML for `--output yaml`, written from the JSON value the API answered.
//!
//! Block style throughout. A string is written plain only when no YAML reader could take it for
//! something else (a number, a boolean, null, a date, a key, a comment); every other string is
//! written double-quoted in JSON's escaping, which YAML reads the same.

use serde_json::Value;

/// `value` as a YAML document.
pub fn to_string(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(m) if !m.is_empty() => object(&mut out, m, 0),
        Value::Array(a) if !a.is_empty() => array(&mut out, a, 0),
        other => {
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
    out
}

fn object(out: &mut String, map: &serde_json::Map<String, Value>, indent: usize) {
    for (key, value) in map {
        out.push_str(&" ".repeat(indent));
        out.push_str(&string(key));
        out.push(':');
        nested(out, value, indent);
    }
}

fn array(out: &mut String, items: &[Value], indent: usize) {
    for item in items {
        out.push_str(&" ".repeat(indent));
        out.push('-');
        match item {
            // The first key shares the dash's line; the rest line up under it.
            Value::Object(m) if !m.is_empty() => {
                let mut inner = String::new();
                object(&mut inner, m, indent + 2);
                out.push(' ');
                out.push_str(&inner[indent + 2..]);
            }
            other => nested(out, other, indent),
        }
    }
}

/// What follows `key:`: a scalar on the same line, or a block below it.
fn nested(out: &mut String, value: &Value, indent: usize) {
    match value {
        Value::Object(m) if !m.is_empty() => {
            out.push('\n');
            object(out, m, indent + 2);
        }
        Value::Array(a) if !a.is_empty() => {
            out.push('\n');
            array(out, a, indent + 2);
        }
        other => {
            out.push(' ');
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
}

fn scalar(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => string(s),
        Value::Array(_) => "[]".to_owned(),
        Value::Object(_) => "{}".to_owned(),
    }
}

fn string(s: &str) -> String {
    if plain(s) { s.to_owned() } else { Value::String(s.to_owned()).to_string() }
}

/// Words YAML 1.1 or 1.2 readers take for booleans or null.
const RESERVED: &[&str] = &["true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"];

fn plain(s: &str) -> bool {
    let Some(first) = s.chars().next() else { return false };
    let safe_char = |c: char| c.is_ascii_alphanumeric() || "_-./@+()".contains(c) || c == ' ';
    first.is_ascii_alphabetic()
        && !s.ends_with(' ')
        && !s.contains("  ")
        && s.chars().all(safe_char)
        && !RESERVED.contains(&s.to_ascii_lowercase().as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_values_are_written_in_block_style() {
        let v = json!({
            "id": "run_01abc",
            "state": "succeeded",
            "attempts": [{"attempt": 1, "class": "S"}, {"attempt": 2, "class": "M"}],
            "tags": ["a", "b"],
            "error": null,
            "params": {},
            "cost": {"charged_micros": 3, "currency": "USD"}
        });
        let text = to_string(&v);
        let expected = "attempts:\n  - attempt: 1\n    class: S\n  - attempt: 2\n    class: M\n\
                        cost:\n  charged_micros: 3\n  currency: USD\nerror: null\nid: run_01abc\n\
                        params: {}\nstate: succeeded\ntags:\n  - a\n  - b\n";
        assert_eq!(text, expected);
    }

    #[test]
    fn strings_a_reader_could_misread_are_quoted() {
        for s in
            ["", "1.5", "2026-12-02T04:00:30Z", "yes", "No", "a: b", "# x", "-x", " x", "x ", "{", "it's"]
        {
            assert_eq!(string(s), Value::String(s.to_owned()).to_string(), "{s:?}");
        }
        for s in ["employed", "tabular.linear", "dev@dev.local", "model.json (3 KiB)"] {
            assert_eq!(string(s), s, "{s:?}");
        }
        assert_eq!(string("line\nbreak"), "\"line\\nbreak\"");
    }
}
