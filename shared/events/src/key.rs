//! `AttemptKey`: the 32-byte secret that signs one attempt's events.
//!
//! The dispatcher generates it and hands it only to that attempt's bootstrap;
//! the platform keeps a copy to verify. Its `Debug` never prints the bytes and
//! its wire form (serde, [`AttemptKey::to_hex`]) is 64 lowercase hex digits.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A 32-byte HMAC-SHA256 key for one attempt.
#[derive(Clone)]
pub struct AttemptKey([u8; 32]);

/// The text is not 64 lowercase hex digits. Never echoes the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an attempt key is 64 lowercase hex digits")]
pub struct KeyError;

impl AttemptKey {
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        AttemptKey(bytes)
    }

    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses exactly 64 lowercase hex digits.
    pub fn from_hex(s: &str) -> Result<Self, KeyError> {
        let lower_hex = s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if s.len() != 64 || !lower_hex {
            return Err(KeyError);
        }
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(s, &mut bytes).map_err(|_| KeyError)?;
        Ok(AttemptKey(bytes))
    }
}

impl fmt::Debug for AttemptKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AttemptKey(..)")
    }
}

impl Serialize for AttemptKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for AttemptKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        AttemptKey::from_hex(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    const HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    #[test]
    fn hex_round_trip() {
        let key = fixtures::key();
        assert_eq!(key.to_hex(), HEX);
        let back = AttemptKey::from_hex(HEX).expect("valid hex");
        assert_eq!(back.as_bytes(), key.as_bytes());
    }

    #[test]
    fn from_hex_refuses_anything_but_64_lowercase_hex() {
        let upper = HEX.to_uppercase();
        let short = &HEX[..62];
        let long = format!("{HEX}00");
        let not_hex = format!("{}zz", &HEX[..62]);
        for bad in ["", short, &long, &upper, &not_hex, &format!("{}é", &HEX[..62])] {
            assert_eq!(AttemptKey::from_hex(bad).err(), Some(KeyError), "{bad:?} must be refused");
        }
    }

    #[test]
    fn debug_hides_the_key() {
        let shown = format!("{:?}", fixtures::key());
        assert_eq!(shown, "AttemptKey(..)");
        assert!(!shown.contains("0102"));
    }

    #[test]
    fn serde_is_hex_and_errors_do_not_echo() {
        let json = serde_json::to_string(&fixtures::key()).expect("serializes");
        assert_eq!(json, format!("\"{HEX}\""));
        let back: AttemptKey = serde_json::from_str(&json).expect("deserializes");
        assert_eq!(back.to_hex(), HEX);
        let secretish = format!("\"{}\"", &HEX[..63]);
        let err = serde_json::from_str::<AttemptKey>(&secretish).expect_err("refused").to_string();
        assert!(!err.contains(&HEX[..63]), "error must not echo the key text: {err}");
    }
}
