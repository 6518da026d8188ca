//! Our words for what a deserializer refuses.
//!
//! A problem's detail tells a client what to fix, in the platform's words:
//! serde's messages name Rust types (`u32`), its own grammar ("invalid
//! type: …, expected …") and change between versions. So the messages
//! serde's derives produce are recognized here and said again; a message
//! that is not one of them came from our own types' `Deserialize` (a
//! `TenantId` that does not parse, say) and is already ours.

/// `message` (one of serde's, or our own types') in our words, for the
/// value at `path` (`items[3].x`; empty for the whole input).
pub fn reword(path: &str, message: &str) -> String {
    let message = strip_position(message);
    let what = if path.is_empty() || path == "." { String::new() } else { format!("`{path}`: ") };
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let (field, expected) = split_tick(rest);
        return format!("{what}unknown field `{field}`: {}", choices("the fields are", expected));
    }
    if let Some(rest) = message.strip_prefix("unknown variant `") {
        let (value, expected) = split_tick(rest);
        return format!("{what}`{value}` is not {}", choices("one of", expected));
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        return format!("{what}`{}` is missing", rest.trim_end_matches('`'));
    }
    if let Some(rest) = message.strip_prefix("duplicate field `") {
        return format!("{what}`{}` is given twice: give it once", rest.trim_end_matches('`'));
    }
    // A whole number the target cannot hold is out of its range.
    if let Some(rest) = message.strip_prefix("invalid value: integer `")
        && let Some((n, expected)) = rest.split_once("`, expected ")
        && n.parse::<i128>().is_ok_and(|n| n >= 0)
        && kind(expected).starts_with("a whole number")
    {
        return format!("{what}is out of range (got {n})");
    }
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = message.strip_prefix(prefix)
            && let Some((got, expected)) = rest.split_once(", expected ")
        {
            return format!("{what}must be {} (got {got})", kind(expected));
        }
    }
    if let Some(rest) = message.strip_prefix("invalid length ")
        && let Some((got, expected)) = rest.split_once(", expected ")
    {
        return format!("{what}must have {} (got {got})", kind(expected));
    }
    let known = [
        ("invalid digit found in string", "must be a whole number"),
        ("cannot parse integer from empty string", "must be a whole number, not empty"),
        ("number too large to fit in target type", "is out of range"),
        ("number too small to fit in target type", "is out of range"),
        ("invalid float literal", "must be a number"),
        ("provided string was not `true` or `false`", "must be `true` or `false`"),
    ];
    if let Some((_, ours)) = known.iter().find(|(serde, _)| message == *serde) {
        return format!("{what}{ours}");
    }
    format!("{what}{message}")
}

/// A JSON document that does not parse, in our words: where it breaks.
/// (A document that parses but has the wrong shape is [`reword`]'s.)
pub fn not_json(e: &serde_json::Error) -> String {
    let (line, column) = (e.line(), e.column());
    match e.classify() {
        serde_json::error::Category::Eof => {
            format!("the body is not valid JSON: it ends early (line {line}, column {column})")
        }
        // The parser's own words are not shown; this one is only recognized.
        _ if e.to_string().starts_with("recursion limit exceeded") => {
            format!("the body nests deeper than 128 levels at line {line}, column {column}")
        }
        _ => format!("the body is not valid JSON at line {line}, column {column}"),
    }
}

/// A message without the parser's " at line L column C".
fn strip_position(message: &str) -> &str {
    match message.rfind(" at line ") {
        Some(i) if message[i..].contains(" column ") => &message[..i],
        _ => message,
    }
}

/// `x`, expected … → (`x`, "…").
fn split_tick(rest: &str) -> (&str, &str) {
    match rest.split_once('`') {
        Some((name, tail)) => (name, tail.trim_start_matches(',').trim()),
        None => (rest, ""),
    }
}

/// serde's list of expected names, in our words.
fn choices(lead: &str, expected: &str) -> String {
    if let Some(list) = expected.strip_prefix("expected one of ") {
        return format!("{lead} {list}");
    }
    if let Some(one) = expected.strip_prefix("expected ") {
        return format!("{lead} {one}");
    }
    "no field is taken here".to_owned()
}

/// What serde says it expected, as a client would say it.
fn kind(expected: &str) -> String {
    let expected = expected.trim();
    let named = match expected {
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a whole number, 0 or more",
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "a whole number",
        "f32" | "f64" => "a number",
        "a boolean" | "bool" => "`true` or `false`",
        "a string" | "a borrowed string" | "a character" => "a string",
        "a sequence" => "a list",
        "a map" => "an object",
        _ => "",
    };
    if !named.is_empty() {
        return named.to_owned();
    }
    if let Some(rest) = expected.strip_prefix("struct ") {
        return format!("an object ({rest})");
    }
    if expected.starts_with("enum ") {
        return "one of the documented values".to_owned();
    }
    expected.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_messages_are_said_again_in_our_words() {
        let cases = [
            (
                "",
                "unknown field `nn`, expected `name` or `n` at line 1 column 20",
                "unknown field `nn`: the fields are `name` or `n`",
            ),
            (
                "",
                "unknown field `x`, expected one of `a`, `b`, `c`",
                "unknown field `x`: the fields are `a`, `b`, `c`",
            ),
            ("", "unknown field `x`, there are no fields", "unknown field `x`: no field is taken here"),
            (
                "class",
                "unknown variant `XXL`, expected one of `S`, `M`",
                "`class`: `XXL` is not one of `S`, `M`",
            ),
            ("", "missing field `method`", "`method` is missing"),
            (
                "n",
                "invalid type: string \"x\", expected u32 at line 1 column 9",
                "`n`: must be a whole number, 0 or more (got string \"x\")",
            ),
            (
                "n",
                "invalid value: integer `-1`, expected u32",
                "`n`: must be a whole number, 0 or more (got integer `-1`)",
            ),
            ("page_size", "invalid digit found in string", "`page_size`: must be a whole number"),
            (
                "n",
                "invalid value: integer `4294967296`, expected u32",
                "`n`: is out of range (got 4294967296)",
            ),
            ("tags", "invalid type: map, expected a sequence", "`tags`: must be a list (got map)"),
            ("", "the tenant id must be 3 to 40 characters", "the tenant id must be 3 to 40 characters"),
        ];
        for (path, serde, ours) in cases {
            let said = reword(path, serde);
            assert_eq!(said, ours, "{serde}");
            for leak in ["invalid type", "invalid value", "expected u32", " at line "] {
                assert!(!said.contains(leak), "{said}");
            }
        }
    }
}
