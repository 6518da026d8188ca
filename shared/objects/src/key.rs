//! `ObjectKey`: a validated object name.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ObjectError;

/// An object name: 1..=1024 bytes of `[A-Za-z0-9._=-]` segments separated by
/// single `/`, no `.` or `..` segment. Tighter than Cloud Storage, so every key
/// is also a safe relative file path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey(String);

impl ObjectKey {
    pub fn parse(s: &str) -> Result<ObjectKey, ObjectError> {
        let ok = !s.is_empty()
            && s.len() <= 1024
            && s.split('/').all(|seg| {
                !seg.is_empty()
                    && seg != "."
                    && seg != ".."
                    && seg
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'='))
            });
        if ok {
            Ok(ObjectKey(s.to_owned()))
        } else {
            Err(ObjectError::InvalidArgument(format!(
                "invalid object key `{}`: use `/`-separated segments of letters, digits, `.`, `_`, `-`, `=`",
                s.chars().take(80).collect::<String>()
            )))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `self/child`.
    pub fn join(&self, child: &str) -> Result<ObjectKey, ObjectError> {
        ObjectKey::parse(&format!("{}/{child}", self.0))
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for ObjectKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ObjectKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        ObjectKey::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_safe_paths() {
        assert!(ObjectKey::parse("t/dev/p/default/datasets/ds_1.csv").is_ok());
        for bad in ["", "/a", "a/", "a//b", "a/../b", "..", "a/./b", "a b", "a\\b", "ä"] {
            assert!(ObjectKey::parse(bad).is_err(), "{bad:?}");
        }
    }
}
