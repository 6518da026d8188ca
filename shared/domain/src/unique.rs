//! JSON objects whose keys are each given once.
//!
//! The rule: a request's object (a score row, a run's params) that names
//! the same key twice is refused, never read as its last value: JSON leaves
//! duplicate names to the reader, and one that keeps the last silently
//! drops what the client also sent. Use with `#[serde(deserialize_with)]`.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserializer;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// An object, each key once.
pub fn object<'de, D: Deserializer<'de>>(d: D) -> Result<Map<String, Value>, D::Error> {
    d.deserialize_map(Keys)
}

/// An object, each key once, as a sorted map.
pub fn btree<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, Value>, D::Error> {
    Ok(object(d)?.into_iter().collect())
}

/// A list of objects, each key of each once.
pub fn objects<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Map<String, Value>>, D::Error> {
    d.deserialize_seq(Objects)
}

struct Keys;

impl<'de> Visitor<'de> for Keys {
    type Value = Map<String, Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!("`{key}` is given twice: give it once")));
            }
            let value = map.next_value()?;
            out.insert(key, value);
        }
        Ok(out)
    }
}

struct Objects;

/// One element of [`objects`].
struct Unique(Map<String, Value>);

impl<'de> serde::Deserialize<'de> for Unique {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        object(d).map(Unique)
    }
}

impl<'de> Visitor<'de> for Objects {
    type Value = Vec<Map<String, Value>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(Unique(m)) = seq.next_element()? {
            out.push(m);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    struct Body {
        #[serde(deserialize_with = "objects")]
        rows: Vec<Map<String, Value>>,
        #[serde(default, deserialize_with = "btree")]
        params: BTreeMap<String, Value>,
    }

    #[test]
    fn a_key_given_twice_is_refused_and_once_is_read() {
        let b: Body =
            serde_json::from_str(r#"{"rows": [{"a": 1, "b": 2}, {}], "params": {"k": [1]}}"#).expect("ok");
        assert_eq!(b.rows.len(), 2);
        assert_eq!(b.rows[0]["b"], 2);
        assert_eq!(b.params["k"], serde_json::json!([1]));
        let b: Body = serde_json::from_str(r#"{"rows": []}"#).expect("no params");
        assert!(b.params.is_empty());
        for body in
            [r#"{"rows": [{"a": 1}, {"a": 1, "a": 2}]}"#, r#"{"rows": [], "params": {"a": 1, "a": 1}}"#]
        {
            let e = serde_json::from_str::<Body>(body).expect_err(body).to_string();
            assert!(e.starts_with("`a` is given twice: give it once"), "{body}: {e}");
        }
        let e = serde_json::from_str::<Body>(r#"{"rows": [1]}"#).expect_err("not an object").to_string();
        assert!(e.contains("expected an object"), "{e}");
    }
}
