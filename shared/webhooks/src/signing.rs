//! Signing deliveries the Standard Webhooks way (<https://www.standardwebhooks.com>).
//!
//! The rule: every delivery carries three headers, `webhook-id` (the message
//! id, the same on every retry so receivers can drop duplicates),
//! `webhook-timestamp` (unix seconds when this attempt was signed) and
//! `webhook-signature`. The signed content is the text
//! `"{id}.{timestamp}.{body}"` with the body's exact bytes; the signature is
//! `v1,` followed by the standard base64 of HMAC-SHA256 over that content,
//! keyed with the secret's key bytes. Secrets are written `whsec_` followed
//! by the base64 of the key bytes, and a key is 24 to 64 bytes. The
//! signature header may list several signatures separated by single spaces
//! (during a secret rotation, one per secret); a receiver accepts the
//! delivery if any one of them matches, and refuses it if its timestamp is
//! further than the tolerance from the receiver's clock, in either
//! direction (that bounds replays).

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::WebhookError;

type HmacSha256 = Hmac<Sha256>;

/// The header carrying the message id.
pub const HEADER_ID: &str = "webhook-id";
/// The header carrying the unix time, in seconds, of the signature.
pub const HEADER_TIMESTAMP: &str = "webhook-timestamp";
/// The header carrying the space-separated `v1,…` signatures.
pub const HEADER_SIGNATURE: &str = "webhook-signature";
/// How far, in seconds, a delivery's timestamp may be from the verifier's
/// clock, either way: five minutes, as Standard Webhooks recommends.
pub const DEFAULT_TOLERANCE_S: i64 = 300;

const SECRET_PREFIX: &str = "whsec_";
const SIGNATURE_VERSION: &str = "v1";
const KEY_LEN: std::ops::RangeInclusive<usize> = 24..=64;

/// A webhook signing secret: 24 to 64 key bytes, written `whsec_<base64>`.
///
/// `Debug` shows only the key's length, never the key.
#[derive(Clone)]
pub struct Secret {
    key: Vec<u8>,
    text: String,
}

impl Secret {
    /// A secret from raw key bytes (the caller draws them at random).
    pub fn from_bytes(key: &[u8]) -> Result<Secret, WebhookError> {
        if !KEY_LEN.contains(&key.len()) {
            return Err(WebhookError::SecretLength { len: key.len() });
        }
        let text = format!("{SECRET_PREFIX}{}", STANDARD.encode(key));
        Ok(Secret { key: key.to_vec(), text })
    }

    /// Reads the `whsec_<base64>` form (standard alphabet, padded).
    pub fn parse(text: &str) -> Result<Secret, WebhookError> {
        let encoded = text.strip_prefix(SECRET_PREFIX).ok_or(WebhookError::SecretPrefix)?;
        let key = STANDARD.decode(encoded).map_err(|_| WebhookError::SecretEncoding)?;
        Secret::from_bytes(&key)
    }

    /// The `whsec_…` form, to store or show the tenant once.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    fn keyed_mac(&self) -> HmacSha256 {
        HmacSha256::new_from_slice(&self.key).expect("HMAC takes keys of any length")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret(<redacted, {} bytes>)", self.key.len())
    }
}

/// The three headers of a signed delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Headers {
    /// `webhook-id`.
    pub id: String,
    /// `webhook-timestamp`, unix seconds.
    pub timestamp: i64,
    /// `webhook-signature`: one `v1,…` per secret, separated by a space.
    pub signature: String,
}

impl Headers {
    /// The headers as (name, value) pairs, ready for an HTTP request.
    pub fn pairs(&self) -> [(&'static str, String); 3] {
        [
            (HEADER_ID, self.id.clone()),
            (HEADER_TIMESTAMP, self.timestamp.to_string()),
            (HEADER_SIGNATURE, self.signature.clone()),
        ]
    }
}

/// The headers of a delivery as received, unparsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received<'a> {
    pub id: &'a str,
    pub timestamp: &'a str,
    pub signature: &'a str,
}

/// Why [`verify`] refused a delivery.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the `webhook-timestamp` header must be whole unix seconds")]
    BadTimestamp,
    #[error("the webhook timestamp is {age_s} s from now, beyond the {tolerance_s} s tolerance")]
    OutsideTolerance { age_s: u64, tolerance_s: i64 },
    #[error("the `webhook-signature` header holds no `v1,` signature")]
    NoSignature,
    #[error("no webhook signature matches")]
    Mismatch,
}

/// Signs one delivery attempt with each of `secrets`, in order (the
/// current secret first, then one still in its grace period).
///
/// An empty `secrets` gives an empty signature header, which no receiver
/// accepts; [`crate::signing_secrets`] always returns at least one.
pub fn sign(secrets: &[&Secret], msg_id: &str, timestamp: i64, body: &[u8]) -> Headers {
    let signature = secrets
        .iter()
        .map(|secret| {
            let tag = content_mac(secret, msg_id, timestamp, body).finalize().into_bytes();
            format!("{SIGNATURE_VERSION},{}", STANDARD.encode(tag))
        })
        .collect::<Vec<_>>()
        .join(" ");
    Headers { id: msg_id.to_owned(), timestamp, signature }
}

/// Verifies a received delivery against `secret`, as a receiver would.
///
/// The timestamp must be within `tolerance_s` of `now_unix` either way; then
/// every `v1,` entry of the signature header is compared, in constant time,
/// with the expected MAC, and one match is enough. Entries of any other
/// version, or that are not base64, never match.
pub fn verify(
    secret: &Secret,
    headers: &Received<'_>,
    body: &[u8],
    now_unix: i64,
    tolerance_s: i64,
) -> Result<(), VerifyError> {
    let timestamp = parse_timestamp(headers.timestamp)?;
    let age_s = now_unix.abs_diff(timestamp);
    if age_s > u64::try_from(tolerance_s).unwrap_or(0) {
        return Err(VerifyError::OutsideTolerance { age_s, tolerance_s });
    }
    let expected = content_mac(secret, headers.id, timestamp, body);
    let mut any_v1 = false;
    for entry in headers.signature.split(' ') {
        let Some(encoded) = entry.strip_prefix("v1,") else { continue };
        any_v1 = true;
        let Ok(tag) = STANDARD.decode(encoded) else { continue };
        if expected.clone().verify_slice(&tag).is_ok() {
            return Ok(());
        }
    }
    Err(if any_v1 { VerifyError::Mismatch } else { VerifyError::NoSignature })
}

fn parse_timestamp(text: &str) -> Result<i64, VerifyError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(VerifyError::BadTimestamp);
    }
    text.parse().map_err(|_| VerifyError::BadTimestamp)
}

fn content_mac(secret: &Secret, msg_id: &str, timestamp: i64, body: &[u8]) -> HmacSha256 {
    let mut mac = secret.keyed_mac();
    mac.update(format!("{msg_id}.{timestamp}.").as_bytes());
    mac.update(body);
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    const VECTOR_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const VECTOR_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const VECTOR_TS: i64 = 1_614_265_330;
    const VECTOR_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const VECTOR_SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn vector_secret() -> Secret {
        Secret::parse(VECTOR_SECRET).expect("the published secret parses")
    }

    fn received<'a>(id: &'a str, timestamp: &'a str, signature: &'a str) -> Received<'a> {
        Received { id, timestamp, signature }
    }

    #[test]
    fn standard_webhooks_test_vector() {
        let secret = vector_secret();
        let headers = sign(&[&secret], VECTOR_ID, VECTOR_TS, VECTOR_BODY);
        assert_eq!(headers.signature, VECTOR_SIG);
        assert_eq!(headers.id, VECTOR_ID);
        assert_eq!(headers.timestamp, VECTOR_TS);
        let got = received(VECTOR_ID, "1614265330", VECTOR_SIG);
        assert_eq!(verify(&secret, &got, VECTOR_BODY, VECTOR_TS, DEFAULT_TOLERANCE_S), Ok(()));
    }

    #[test]
    fn header_pairs_use_the_standard_names() {
        let headers = sign(&[&vector_secret()], VECTOR_ID, VECTOR_TS, VECTOR_BODY);
        let pairs = headers.pairs();
        assert_eq!(pairs[0], ("webhook-id", VECTOR_ID.to_owned()));
        assert_eq!(pairs[1], ("webhook-timestamp", "1614265330".to_owned()));
        assert_eq!(pairs[2], ("webhook-signature", VECTOR_SIG.to_owned()));
    }

    #[test]
    fn a_tampered_body_fails() {
        let got = received(VECTOR_ID, "1614265330", VECTOR_SIG);
        let tampered = br#"{"test": 2432232315}"#;
        assert_eq!(verify(&vector_secret(), &got, tampered, VECTOR_TS, 300), Err(VerifyError::Mismatch));
    }

    #[test]
    fn a_tampered_id_or_timestamp_fails() {
        let secret = vector_secret();
        let other_id = received("msg_other", "1614265330", VECTOR_SIG);
        assert_eq!(verify(&secret, &other_id, VECTOR_BODY, VECTOR_TS, 300), Err(VerifyError::Mismatch));
        let other_ts = received(VECTOR_ID, "1614265331", VECTOR_SIG);
        assert_eq!(verify(&secret, &other_ts, VECTOR_BODY, VECTOR_TS, 300), Err(VerifyError::Mismatch));
    }

    #[test]
    fn a_wrong_secret_fails() {
        let other = Secret::from_bytes(&[7; 32]).expect("32 bytes");
        let got = received(VECTOR_ID, "1614265330", VECTOR_SIG);
        assert_eq!(verify(&other, &got, VECTOR_BODY, VECTOR_TS, 300), Err(VerifyError::Mismatch));
    }

    #[test]
    fn timestamps_beyond_the_tolerance_fail_either_way() {
        let secret = vector_secret();
        let got = received(VECTOR_ID, "1614265330", VECTOR_SIG);
        for (now, ok) in [(VECTOR_TS + 300, true), (VECTOR_TS - 300, true), (VECTOR_TS + 301, false)] {
            assert_eq!(verify(&secret, &got, VECTOR_BODY, now, DEFAULT_TOLERANCE_S).is_ok(), ok, "now {now}");
        }
        assert_eq!(
            verify(&secret, &got, VECTOR_BODY, VECTOR_TS - 301, DEFAULT_TOLERANCE_S),
            Err(VerifyError::OutsideTolerance { age_s: 301, tolerance_s: 300 })
        );
    }

    #[test]
    fn malformed_timestamps_fail() {
        let secret = vector_secret();
        for ts in ["", "-1614265330", "1614265330.0", " 1614265330", "99999999999999999999"] {
            let got = received(VECTOR_ID, ts, VECTOR_SIG);
            assert_eq!(
                verify(&secret, &got, VECTOR_BODY, VECTOR_TS, 300),
                Err(VerifyError::BadTimestamp),
                "{ts:?}"
            );
        }
    }

    #[test]
    fn any_listed_signature_may_match() {
        let secret = vector_secret();
        let wrong =
            sign(&[&Secret::from_bytes(&[1; 24]).expect("24 bytes")], VECTOR_ID, VECTOR_TS, VECTOR_BODY);
        let header = format!("{} {VECTOR_SIG}", wrong.signature);
        let got = received(VECTOR_ID, "1614265330", &header);
        assert_eq!(verify(&secret, &got, VECTOR_BODY, VECTOR_TS, 300), Ok(()));
    }

    #[test]
    fn signing_with_two_secrets_lists_both_in_order() {
        let current = Secret::from_bytes(&[2; 32]).expect("32 bytes");
        let previous = vector_secret();
        let headers = sign(&[&current, &previous], VECTOR_ID, VECTOR_TS, VECTOR_BODY);
        let entries: Vec<&str> = headers.signature.split(' ').collect();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1], VECTOR_SIG);
        let got = received(VECTOR_ID, "1614265330", &headers.signature);
        assert_eq!(verify(&current, &got, VECTOR_BODY, VECTOR_TS, 300), Ok(()));
        assert_eq!(verify(&previous, &got, VECTOR_BODY, VECTOR_TS, 300), Ok(()));
    }

    #[test]
    fn only_v1_entries_count() {
        let secret = vector_secret();
        let v2 = VECTOR_SIG.replacen("v1,", "v2,", 1);
        let got = received(VECTOR_ID, "1614265330", &v2);
        assert_eq!(verify(&secret, &got, VECTOR_BODY, VECTOR_TS, 300), Err(VerifyError::NoSignature));
        let garbage = received(VECTOR_ID, "1614265330", "v1,not*base64 v1a,x");
        assert_eq!(verify(&secret, &garbage, VECTOR_BODY, VECTOR_TS, 300), Err(VerifyError::Mismatch));
        let truncated = &VECTOR_SIG[..VECTOR_SIG.len() - 4];
        let short = received(VECTOR_ID, "1614265330", truncated);
        assert_eq!(verify(&secret, &short, VECTOR_BODY, VECTOR_TS, 300), Err(VerifyError::Mismatch));
    }

    #[test]
    fn secrets_round_trip_and_hide_their_key() {
        let secret = vector_secret();
        assert_eq!(secret.as_str(), VECTOR_SECRET);
        assert_eq!(secret.to_string(), VECTOR_SECRET);
        let debug = format!("{secret:?}");
        assert_eq!(debug, "Secret(<redacted, 24 bytes>)");
        assert!(!debug.contains("MfKQ"));
        let made = Secret::from_bytes(&[0xfb; 64]).expect("64 bytes");
        assert_eq!(Secret::parse(made.as_str()).expect("round trip").as_str(), made.as_str());
    }

    #[test]
    fn bad_secrets_are_refused() {
        assert_eq!(Secret::from_bytes(&[0; 23]).err(), Some(WebhookError::SecretLength { len: 23 }));
        assert_eq!(Secret::from_bytes(&[0; 65]).err(), Some(WebhookError::SecretLength { len: 65 }));
        assert_eq!(Secret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").err(), Some(WebhookError::SecretPrefix));
        assert_eq!(Secret::parse("whsec_not base64!").err(), Some(WebhookError::SecretEncoding));
        assert_eq!(Secret::parse("whsec_AAAA").err(), Some(WebhookError::SecretLength { len: 3 }));
    }
}
