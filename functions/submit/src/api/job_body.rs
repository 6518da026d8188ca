//! Reading a job submit's body in bounded memory.
//!
//! A body of tiny items (`[0,0,0,…]`) is a few bytes per item, while an item
//! parsed into a JSON value is tens of bytes: parsing first and counting
//! after lets a 64 MiB body take a gigabyte. So the items are counted while
//! they are read, and the reading stops at the first item past the
//! platform's cap (`MAPI_JOB_MAX_ITEMS`); the items that are kept are
//! borrowed slices of the body (`RawValue`), never copies or trees. What
//! such a request costs is its body plus one pointer per item, at most.
//!
//! Every refusal is worded here, not by the parser: it says what to send.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;

use mapi_problem::{ApiError, ProblemCode};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

/// A job submit, its items still the body's bytes.
#[derive(Debug)]
pub struct JobBody<'a> {
    pub method: String,
    pub items: Vec<&'a RawValue>,
    pub params: BTreeMap<String, Value>,
}

const SHAPE: &str = r#"send {"method": "<item method>", "items": [<item>, …], "options": {"params": {…}}}"#;

/// Why a body was refused while it was read.
#[derive(Debug, Clone, PartialEq)]
enum Refusal {
    /// More items than the platform takes in one job.
    TooManyItems,
    /// Our own wording of a shape error.
    Shape(String),
}

/// Parses a job submit of at most `max_items` items, each at most
/// `max_item_bytes` bytes.
pub fn parse(body: &[u8], max_items: u64, max_item_bytes: usize) -> Result<JobBody<'_>, ApiError> {
    let refusal = Cell::new(None);
    let mut de = serde_json::Deserializer::from_slice(body);
    let parsed = BodySeed { max_items, refusal: &refusal }.deserialize(&mut de).and_then(|b| {
        de.end()?;
        Ok(b)
    });
    let body = match (parsed, refusal.take()) {
        (Ok(b), _) => b,
        (Err(_), Some(Refusal::TooManyItems)) => {
            return Err(ApiError::new(
                ProblemCode::PayloadTooLarge,
                format!(
                    "The platform limit max_items_per_job is {max_items} and the job has more items: split the job"
                ),
            ));
        }
        (Err(_), Some(Refusal::Shape(detail))) => return Err(ApiError::invalid(detail)),
        (Err(e), None) => return Err(ApiError::invalid(syntax(&e))),
    };
    if body.items.is_empty() {
        return Err(ApiError::invalid("`items` is empty: a job needs at least one item"));
    }
    if let Some((idx, item)) = body.items.iter().enumerate().find(|(_, i)| i.get().len() > max_item_bytes) {
        return Err(ApiError::invalid(format!(
            "item {idx} is {} bytes: the largest item is {max_item_bytes} bytes (MAPI_JOB_MAX_ITEM_BYTES)",
            item.get().len()
        )));
    }
    // The items were only delimited while the body was read; each is read
    // through once more, keeping nothing, so one the worker could not read
    // (nested too deep, a lone surrogate escape) is refused now.
    for (idx, item) in body.items.iter().enumerate() {
        let text = item.get();
        let scan = scan(text);
        if let Some(number) = scan.out_of_range {
            return Err(ApiError::invalid(format!(
                "item {idx} holds the number `{}`, outside the range of a 64-bit float (±1.8e308): \
                 send a finite number, or the value as a string",
                number.chars().take(64).collect::<String>()
            )));
        }
        let why = if scan.depth > MAX_DEPTH {
            "nests deeper than 128 levels"
        } else if text.contains("\\u") && serde_json::from_str::<Value>(text).is_err() {
            "cannot be read as JSON (an escape does not name a character)"
        } else {
            continue;
        };
        return Err(ApiError::invalid(format!("item {idx} {why}: send it as plain JSON")));
    }
    Ok(body)
}

/// The nesting a worker's JSON reader takes.
const MAX_DEPTH: usize = 128;

/// What one pass over an item's JSON text finds.
#[derive(Debug, Default, PartialEq)]
struct Scan<'a> {
    /// How deep it nests its lists and objects.
    depth: usize,
    /// The first number a 64-bit float cannot hold (`1e999`), which the
    /// worker's JSON reader would refuse.
    out_of_range: Option<&'a str>,
}

/// Reads `text` (JSON the parser already delimited) once: its depth, and
/// its first number out of a float's range. Only a number with an exponent
/// or of more than 300 digits can be out of range, so only those are parsed.
fn scan(text: &str) -> Scan<'_> {
    let mut out = Scan::default();
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match (in_string, escaped, b) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (true, false, b'"') => in_string = false,
            (true, false, _) => {}
            (false, _, b'"') => in_string = true,
            (false, _, b'[' | b'{') => {
                depth += 1;
                out.depth = out.depth.max(depth);
            }
            (false, _, b']' | b'}') => depth = depth.saturating_sub(1),
            (false, _, b'-' | b'0'..=b'9') => {
                let start = i;
                while i + 1 < bytes.len()
                    && matches!(bytes[i + 1], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                {
                    i += 1;
                }
                let number = &text[start..=i];
                let may_overflow = number.len() > 300 || number.bytes().any(|c| c == b'e' || c == b'E');
                if out.out_of_range.is_none()
                    && may_overflow
                    && number.parse::<f64>().is_ok_and(|f| !f.is_finite())
                {
                    out.out_of_range = Some(number);
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// A parser error in our words: where it is and what to send.
fn syntax(e: &serde_json::Error) -> String {
    if e.classify() == serde_json::error::Category::Data {
        return format!("the body does not have a job's shape: {SHAPE}");
    }
    format!("{}: {SHAPE}", mapi_problem::wording::not_json(e))
}

struct BodySeed<'r> {
    max_items: u64,
    refusal: &'r Cell<Option<Refusal>>,
}

impl BodySeed<'_> {
    fn refuse<E: de::Error>(&self, r: Refusal) -> E {
        let message = match &r {
            Refusal::TooManyItems => "too many items".to_owned(),
            Refusal::Shape(s) => s.clone(),
        };
        self.refusal.set(Some(r));
        E::custom(message)
    }

    fn shape<E: de::Error>(&self, detail: impl Into<String>) -> E {
        self.refuse(Refusal::Shape(detail.into()))
    }
}

impl<'de> DeserializeSeed<'de> for BodySeed<'_> {
    type Value = JobBody<'de>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for BodySeed<'_> {
    type Value = JobBody<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a job object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut method, mut items, mut params) = (None, None, None);
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let first = match key.as_ref() {
                "method" => method.replace(self.method(map.next_value()?)?).is_none(),
                "items" => {
                    let seed = ItemsSeed { max: self.max_items, refusal: self.refusal };
                    items.replace(map.next_value_seed(seed)?).is_none()
                }
                "options" => {
                    let seed = OptionsSeed { refusal: self.refusal };
                    params.replace(map.next_value_seed(seed)?).is_none()
                }
                other => {
                    let other: String = other.chars().take(64).collect();
                    return Err(self.shape(format!(
                        "unknown field `{other}`: a job has `method`, `items` and `options`"
                    )));
                }
            };
            if !first {
                return Err(self.shape(format!("`{key}` is given twice: give it once")));
            }
        }
        let method = method.ok_or_else(|| self.shape("`method` is missing: name an item method"))?;
        let items = items.ok_or_else(|| self.shape("`items` is missing: send the items as a list"))?;
        Ok(JobBody { method, items, params: params.unwrap_or_default() })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        Err(self.shape(format!("the body is a list, not a job: {SHAPE}")))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Err(self.shape(format!("the body is a string, not a job: {SHAPE}")))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Err(self.shape(format!("the body is a boolean, not a job: {SHAPE}")))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Err(self.shape(format!("the body is a number, not a job: {SHAPE}")))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Err(self.shape(format!("the body is a number, not a job: {SHAPE}")))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Err(self.shape(format!("the body is a number, not a job: {SHAPE}")))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Err(self.shape(format!("the body is null, not a job: {SHAPE}")))
    }
}

impl BodySeed<'_> {
    fn method<E: de::Error>(&self, v: Value) -> Result<String, E> {
        match v {
            Value::String(s) => Ok(s),
            _ => Err(self.shape("`method` must be a string naming an item method")),
        }
    }
}

/// A job's `options`: `params` only, each param named once.
struct OptionsSeed<'r> {
    refusal: &'r Cell<Option<Refusal>>,
}

impl OptionsSeed<'_> {
    fn shape<E: de::Error>(&self, detail: impl Into<String>) -> E {
        BodySeed { max_items: 0, refusal: self.refusal }.shape(detail)
    }
}

impl<'de> DeserializeSeed<'de> for OptionsSeed<'_> {
    type Value = BTreeMap<String, Value>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// `options.params`, each key once.
struct Params(BTreeMap<String, Value>);

impl<'de> serde::Deserialize<'de> for Params {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        mapi_domain::unique::btree(d).map(Params)
    }
}

impl<'de> Visitor<'de> for OptionsSeed<'_> {
    type Value = BTreeMap<String, Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an options object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut params = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key != "params" {
                let other: String = key.chars().take(64).collect();
                return Err(self.shape(format!("unknown option `{other}`: the options are `params`")));
            }
            let read = match map.next_value::<Params>() {
                Ok(Params(p)) => p,
                Err(e) => {
                    let text = e.to_string();
                    return Err(match text.split_once(" is given twice") {
                        Some((key, _)) => {
                            self.shape(format!("`options.params`: {key} is given twice: give it once"))
                        }
                        None if text.starts_with("invalid type") => {
                            self.shape("`options.params` must be an object")
                        }
                        // A syntax error (or one too deep), worded where the body's are.
                        None => e,
                    });
                }
            };
            if params.replace(read).is_some() {
                return Err(self.shape("`options.params` is given twice: give it once"));
            }
        }
        Ok(params.unwrap_or_default())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        Err(self.not_an_object())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Err(self.not_an_object())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Err(self.not_an_object())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Err(self.not_an_object())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Err(self.not_an_object())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Err(self.not_an_object())
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Err(self.not_an_object())
    }
}

impl OptionsSeed<'_> {
    fn not_an_object<E: de::Error>(&self) -> E {
        self.shape(r#"`options` must be an object: {"params": {…}}"#)
    }
}

/// The items, counted while they are read.
struct ItemsSeed<'r> {
    max: u64,
    refusal: &'r Cell<Option<Refusal>>,
}

impl<'de> DeserializeSeed<'de> for ItemsSeed<'_> {
    type Value = Vec<&'de RawValue>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ItemsSeed<'_> {
    type Value = Vec<&'de RawValue>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of items")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = seq.next_element::<&'de RawValue>()? {
            if items.len() as u64 >= self.max {
                self.refusal.set(Some(Refusal::TooManyItems));
                return Err(de::Error::custom("too many items"));
            }
            items.push(item);
        }
        Ok(items)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Err(self.not_a_list())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Err(self.not_a_list())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Err(self.not_a_list())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Err(self.not_a_list())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Err(self.not_a_list())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Err(self.not_a_list())
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Err(self.not_a_list())
    }
}

impl ItemsSeed<'_> {
    fn not_a_list<E: de::Error>(&self) -> E {
        let detail = "`items` must be a list: each element is one item";
        self.refusal.set(Some(Refusal::Shape(detail.to_owned())));
        E::custom(detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(body: &str) -> (ProblemCode, String) {
        match parse(body.as_bytes(), 3, 1024) {
            Err(ApiError::Problem { code, detail, .. }) => (code, detail),
            other => panic!("expected a problem for {body}, got {other:?}"),
        }
    }

    #[test]
    fn items_are_borrowed_from_the_body_as_sent() {
        let body = br#"{"method":"item.echo","items":[1,{"a": [2]},"x"],"options":{"params":{"k":1}}}"#;
        let job = parse(body, 3, 16).expect("a good body");
        assert_eq!(job.method, "item.echo");
        let items: Vec<&str> = job.items.iter().map(|i| i.get()).collect();
        assert_eq!(items, ["1", r#"{"a": [2]}"#, r#""x""#]);
        assert_eq!(job.params.get("k"), Some(&Value::from(1)));
        let start = body.as_ptr() as usize;
        let first = job.items[0].get().as_ptr() as usize;
        assert!((start..start + body.len()).contains(&first), "items are slices of the body, not copies");
    }

    #[test]
    fn items_over_the_item_size_are_refused() {
        let Err(ApiError::Problem { detail, .. }) =
            parse(br#"{"method":"m","items":["0123456789abcdefg"]}"#, 3, 16)
        else {
            panic!("an item over 16 bytes accepted")
        };
        assert!(detail.contains("item 0 is 19 bytes"), "{detail}");
    }

    #[test]
    fn reading_stops_at_the_first_item_over_the_cap() {
        let (code, detail) = refusal(r#"{"method":"m","items":[0,0,0,0"#);
        // The body is cut off after the fourth item: had the parser read on,
        // it would have answered that the body ends early.
        assert_eq!(code, ProblemCode::PayloadTooLarge);
        assert!(detail.contains("max_items_per_job is 3"), "{detail}");
        assert!(parse(br#"{"method":"m","items":[0,0,0]}"#, 3, 16).is_ok());
    }

    #[test]
    fn shapes_are_refused_in_our_words() {
        let cases = [
            (r#"{"method":"m","items":[]}"#, "`items` is empty"),
            (r#"{"method":"m"}"#, "`items` is missing"),
            (r#"{"items":[1]}"#, "`method` is missing"),
            (r#"{"method":1,"items":[1]}"#, "`method` must be a string"),
            (r#"{"method":"m","items":{"a":1}}"#, "`items` must be a list"),
            (r#"{"method":"m","items":7}"#, "`items` must be a list"),
            (r#"{"method":"m","items":[1],"x":1}"#, "unknown field `x`"),
            (r#"{"method":"m","method":"n","items":[1]}"#, "`method` is given twice"),
            (r#"{"method":"m","items":[1],"options":{"p":1}}"#, "unknown option `p`"),
            (r#"{"method":"m","items":[1],"options":{"params":[]}}"#, "`options.params` must be an object"),
            (r#"{"method":"m","items":[1],"options":3}"#, "`options` must be an object"),
            (
                r#"{"method":"m","items":[1],"options":{"params":{"k":1,"k":2}}}"#,
                "`options.params`: `k` is given twice",
            ),
            (
                r#"{"method":"m","items":[1],"options":{"params":{},"params":{}}}"#,
                "`options.params` is given twice",
            ),
            (r#"[1,2]"#, "the body is a list"),
            (r#"null"#, "the body is null"),
            (r#"{"method":"m","items":[1]} trailing"#, "not valid JSON at line 1"),
            (r#"{"method":"m","items":[1"#, "it ends early"),
        ];
        let deep = format!(
            r#"{{"method":"m","items":[1],"options":{{"params":{{"k":{}{}}}}}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let deep_item = format!(r#"{{"method":"m","items":[{}{}]}}"#, "[".repeat(200), "]".repeat(200));
        let cases = cases.iter().copied().chain([
            (deep.as_str(), "nests deeper than 128 levels"),
            (deep_item.as_str(), "item 0 nests deeper than 128 levels"),
            (r#"{"method":"m","items":["\udc00"]}"#, "item 0 cannot be read as JSON"),
        ]);
        for (body, expected) in cases {
            let (code, detail) = refusal(body);
            assert_eq!(code, ProblemCode::InvalidArgument, "{body}");
            assert!(detail.contains(expected), "{body}: {detail}");
            assert!(!detail.contains("expected"), "{body}: the parser's wording leaked: {detail}");
        }
    }

    #[test]
    fn invalid_utf8_in_a_string_is_refused() {
        let mut body = br#"{"method":"m","items":[""#.to_vec();
        body.extend_from_slice(&[0xff, 0xfe]);
        body.extend_from_slice(br#""]}"#);
        let Err(ApiError::Problem { code, detail, .. }) = parse(&body, 3, 16) else {
            panic!("invalid UTF-8 accepted")
        };
        assert_eq!(code, ProblemCode::InvalidArgument);
        assert!(detail.contains("not valid JSON"), "{detail}");
    }

    /// A number the worker's reader cannot hold is refused at submit, naming
    /// the item and the number; the same number in a string, a tiny one
    /// (read as 0) and the largest finite ones are items like any other.
    #[test]
    fn numbers_out_of_a_floats_range_are_refused_naming_the_item() {
        let long = "9".repeat(400);
        let refused = [
            (r#"[1, {"x": 1e999}]"#.to_owned(), "item 1 holds the number `1e999`"),
            (r#"[-1E+400]"#.to_owned(), "item 0 holds the number `-1E+400`"),
            (r#"[[0, [2.5e309]]]"#.to_owned(), "item 0 holds the number `2.5e309`"),
            (format!("[0, 0, {long}]"), "item 2 holds the number `9999"),
        ];
        for (items, expected) in &refused {
            let body = format!(r#"{{"method":"m","items":{items}}}"#);
            let Err(ApiError::Problem { code, detail, .. }) = parse(body.as_bytes(), 3, 1024) else {
                panic!("{items}: accepted")
            };
            assert_eq!(code, ProblemCode::InvalidArgument, "{items}");
            assert!(detail.contains(expected), "{items}: {detail}");
            assert!(detail.contains("64-bit float"), "{items}: {detail}");
        }
        let accepted = [
            r#"["1e999", {"k": "-1e999"}]"#,
            r#"[1e-999, -0, 0.0]"#,
            r#"[1.7976931348623157e308, -1.7976931348623157e308]"#,
            r#"[{"e": 1e5, "E": [2E-3]}]"#,
        ];
        for items in accepted {
            let body = format!(r#"{{"method":"m","items":{items}}}"#);
            let job = parse(body.as_bytes(), 3, 1024).unwrap_or_else(|e| panic!("{items}: {e}"));
            for item in &job.items {
                serde_json::from_str::<Value>(item.get()).expect("each accepted item reads as JSON");
            }
        }
    }
}
