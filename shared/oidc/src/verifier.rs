//! `Verifier`: checks an RS256 ID token and returns who it names.
//!
//! The checks run in a fixed order and stop at the first failure: the header
//! parses; `alg` is exactly RS256 (so `none`, HS256 keyed with the public key
//! and every other confusion is refused before any key is looked up); `kid` is
//! present; the key is in the provider's key set; the signature verifies (by
//! `jsonwebtoken`, the one JWT verifier of the workspace); the claims parse
//! and name a `sub`; `iss`; `aud`; `exp`; `iat` and `nbf`; `email`;
//! `email_verified`. Header fields that name keys elsewhere (`jku`, `x5u`,
//! `jwk`, `x5c`) are never read. Times are judged by the injected clock, not
//! by `jsonwebtoken` (whose time checks read the system clock and are
//! switched off).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use mapi_clock::Clock;
use mapi_domain::Timestamp;
use serde::{Deserialize, Serialize};

use crate::{JwksCache, OidcError};

/// How far token times may be off the verifier's clock.
pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(60);
/// Google's key set, for Google-signed tokens (sign-in and Pub/Sub push).
pub const GOOGLE_JWKS_URL: &str = "https://www.googleapis.com/oauth2/v3/certs";
/// The `iss` values Google's ID tokens carry.
pub const GOOGLE_ISSUERS: [&str; 2] = ["https://accounts.google.com", "accounts.google.com"];

/// What a token must say to be accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifierConfig {
    /// Accepted `iss` values (exact match).
    pub issuers: Vec<String>,
    /// The `aud` this service answers to: the token's `aud` must be it (or
    /// one of `other_audiences`), or an array containing one.
    pub audience: String,
    /// Further audiences accepted: other clients of the same service (with
    /// Google, each OAuth client is an audience: the console's web client,
    /// the CLI's desktop client, gcloud's own).
    pub other_audiences: Vec<String>,
    /// Allowed clock skew for `exp`, `iat` and `nbf`.
    pub leeway: Duration,
    /// Whether `email_verified` must be true.
    pub require_verified_email: bool,
    /// The longest a token may live (`exp - iat`); `None`: any. A token
    /// minted to last for years is a stolen session that never ends, so
    /// sessions are bounded; a token without `iat` cannot show its lifetime
    /// and is refused when a bound is set.
    pub max_lifetime: Option<Duration>,
}

impl VerifierConfig {
    /// A configuration with the default leeway that requires verified e-mail addresses.
    pub fn new(issuers: Vec<String>, audience: String) -> VerifierConfig {
        VerifierConfig {
            issuers,
            audience,
            other_audiences: Vec::new(),
            leeway: DEFAULT_LEEWAY,
            require_verified_email: true,
            max_lifetime: None,
        }
    }
}

/// What a verified token says about its bearer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub iss: String,
    pub sub: String,
    /// The audience that matched (one of the configured ones).
    pub aud: String,
    /// Lower-cased.
    pub email: String,
    pub email_verified: bool,
    /// Expiry, seconds since the epoch.
    pub exp: i64,
    /// Issue time, seconds since the epoch, when the token has one.
    pub iat: Option<i64>,
    /// The `nonce` of the authorization request the token answers, if any:
    /// the code flow's caller compares it with the one it sent.
    pub nonce: Option<String>,
}

/// Verifies ID tokens of one provider for one audience. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Verifier {
    config: Arc<VerifierConfig>,
    jwks: JwksCache,
    clock: Arc<dyn Clock>,
    validation: Arc<Validation>,
}

/// The only header fields read. Everything else (`jku`, `x5u`, `jwk`, ...) is ignored.
#[derive(Deserialize)]
struct Header {
    alg: Option<String>,
    kid: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

/// A NumericDate: JSON integer or (rarely) fractional seconds.
#[derive(Deserialize)]
#[serde(untagged)]
enum NumericDate {
    Int(i64),
    Float(f64),
}

impl NumericDate {
    fn secs(&self) -> i64 {
        match *self {
            NumericDate::Int(s) => s,
            // Saturating float-to-int conversion; NaN is 0.
            NumericDate::Float(s) => s.floor() as i64,
        }
    }
}

/// `email_verified` is a boolean, but some providers have sent the string "true".
#[derive(Deserialize)]
#[serde(untagged)]
enum Flag {
    Bool(bool),
    Text(String),
}

impl Flag {
    fn is_true(&self) -> bool {
        match self {
            Flag::Bool(b) => *b,
            Flag::Text(s) => s.eq_ignore_ascii_case("true"),
        }
    }
}

#[derive(Deserialize)]
struct RawClaims {
    iss: Option<String>,
    sub: Option<String>,
    aud: Option<Audience>,
    exp: Option<NumericDate>,
    iat: Option<NumericDate>,
    nbf: Option<NumericDate>,
    email: Option<String>,
    email_verified: Option<Flag>,
    nonce: Option<String>,
}

impl Verifier {
    pub fn new(config: VerifierConfig, jwks: JwksCache, clock: Arc<dyn Clock>) -> Verifier {
        // jsonwebtoken checks the algorithm and the signature only; every
        // claim is checked below, times against the injected clock.
        let mut validation = Validation::new(Algorithm::RS256);
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.required_spec_claims.clear();
        Verifier { config: Arc::new(config), jwks, clock, validation: Arc::new(validation) }
    }

    /// The configuration this verifier checks against.
    pub fn config(&self) -> &VerifierConfig {
        &self.config
    }

    /// Verifies `token` and returns its claims, or the first check it fails.
    pub async fn verify(&self, token: &str) -> Result<Claims, OidcError> {
        let header = parse_header(token)?;
        let alg = header.alg.ok_or(OidcError::Malformed)?;
        if alg != "RS256" {
            return Err(OidcError::UnsupportedAlgorithm(alg));
        }
        let kid = header.kid.filter(|k| !k.is_empty()).ok_or(OidcError::MissingKeyId)?;
        let key = self.jwks.key(&kid).await?;
        let raw = jsonwebtoken::decode::<RawClaims>(token, &key, &self.validation)
            .map_err(|e| match e.kind() {
                ErrorKind::InvalidSignature | ErrorKind::InvalidRsaKey(_) => OidcError::BadSignature,
                _ => OidcError::Malformed,
            })?
            .claims;
        self.check(raw)
    }

    fn check(&self, raw: RawClaims) -> Result<Claims, OidcError> {
        let config = &*self.config;
        let sub = raw.sub.filter(|s| !s.is_empty()).ok_or(OidcError::Malformed)?;
        let iss = raw.iss.unwrap_or_default();
        if !config.issuers.contains(&iss) {
            return Err(OidcError::WrongIssuer(iss));
        }
        let mut accepted = std::iter::once(&config.audience).chain(&config.other_audiences);
        let matched = accepted
            .find(|a| match &raw.aud {
                Some(Audience::One(aud)) => aud == *a,
                Some(Audience::Many(auds)) => auds.contains(a),
                None => false,
            })
            .cloned()
            .ok_or(OidcError::WrongAudience)?;
        let now = self.clock.now();
        let exp = raw.exp.as_ref().map(NumericDate::secs).ok_or(OidcError::Malformed)?;
        if now >= at(exp) + config.leeway {
            return Err(OidcError::Expired);
        }
        let iat = raw.iat.as_ref().map(NumericDate::secs);
        let nbf = raw.nbf.as_ref().map(NumericDate::secs);
        if [iat, nbf].into_iter().flatten().any(|t| at(t) > now + config.leeway) {
            return Err(OidcError::NotYetValid);
        }
        if let Some(max) = config.max_lifetime {
            let lifetime =
                iat.map(|iat| Duration::from_secs(u64::try_from(exp.saturating_sub(iat)).unwrap_or(0)));
            // `exp - iat` is a span of the issuer's own clock: the leeway for
            // skew between clocks has no place in it, so the bound is exact.
            if lifetime.is_none_or(|l| l > max) {
                return Err(OidcError::LifetimeTooLong(max.as_secs()));
            }
        }
        let email = raw.email.map(|e| e.trim().to_lowercase()).filter(|e| !e.is_empty());
        let email = email.ok_or(OidcError::NoEmail)?;
        let email_verified = raw.email_verified.as_ref().is_some_and(Flag::is_true);
        if config.require_verified_email && !email_verified {
            return Err(OidcError::EmailNotVerified);
        }
        Ok(Claims { iss, sub, aud: matched, email, email_verified, exp, iat, nonce: raw.nonce })
    }
}

/// The instant `secs` seconds after the epoch, saturating.
fn at(secs: i64) -> Timestamp {
    Timestamp::from_micros(secs.saturating_mul(1_000_000))
}

/// Parses the JOSE header of a compact JWS with exactly three parts.
fn parse_header(token: &str) -> Result<Header, OidcError> {
    let mut parts = token.split('.');
    let (Some(header), Some(_payload), Some(_signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(OidcError::Malformed);
    };
    let bytes = URL_SAFE_NO_PAD.decode(header).map_err(|_| OidcError::Malformed)?;
    serde_json::from_slice(&bytes).map_err(|_| OidcError::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(v: &serde_json::Value) -> String {
        URL_SAFE_NO_PAD.encode(v.to_string())
    }

    #[test]
    fn header_needs_three_parts_of_base64url_json() {
        let h = b64(&serde_json::json!({"alg": "RS256", "kid": "k", "jku": "https://evil"}));
        let parsed = parse_header(&format!("{h}.e30.sig")).expect("parses");
        assert_eq!(parsed.alg.as_deref(), Some("RS256"));
        assert_eq!(parsed.kid.as_deref(), Some("k"));
        for bad in
            ["", "abc", &format!("{h}.e30"), &format!("{h}.e30.sig.x"), "!!.e30.sig", "bm90IGpzb24.e30.x"]
        {
            assert!(matches!(parse_header(bad), Err(OidcError::Malformed)), "{bad}");
        }
    }

    #[test]
    fn numeric_dates_and_flags_are_lenient_in_form_only() {
        let raw: RawClaims =
            serde_json::from_str(r#"{"exp": 1700000000.9, "iat": 1699999000, "email_verified": "TRUE"}"#)
                .expect("parses");
        assert_eq!(raw.exp.as_ref().map(NumericDate::secs), Some(1_700_000_000));
        assert_eq!(raw.iat.as_ref().map(NumericDate::secs), Some(1_699_999_000));
        assert!(raw.email_verified.as_ref().is_some_and(Flag::is_true));
        let raw: RawClaims = serde_json::from_str(r#"{"email_verified": "false"}"#).expect("parses");
        assert!(!raw.email_verified.as_ref().is_some_and(Flag::is_true));
        assert!(serde_json::from_str::<RawClaims>(r#"{"exp": "soon"}"#).is_err());
    }

    #[test]
    fn at_saturates() {
        assert_eq!(at(i64::MAX), Timestamp::from_micros(i64::MAX));
        assert_eq!(at(2), Timestamp::from_secs(2));
    }
}
