//! Why a token was refused: one variant per check, each with a stable reason
//! for audit logs. Messages name the failed check, never the token itself.

use thiserror::Error;

/// A refused token, or a key set that could not be had.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OidcError {
    #[error("the token is not a well-formed JWT")]
    Malformed,
    #[error("the token's algorithm {0:?} is not accepted (only RS256 is)")]
    UnsupportedAlgorithm(String),
    #[error("the token has no key id (kid)")]
    MissingKeyId,
    #[error("the identity provider has no key {0:?}")]
    UnknownKey(String),
    #[error("the token's signature does not verify")]
    BadSignature,
    #[error("the token's issuer {0:?} is not accepted")]
    WrongIssuer(String),
    #[error("the token is not meant for this audience")]
    WrongAudience,
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid yet")]
    NotYetValid,
    #[error("the token lives longer than {0} s (exp - iat), or has no iat to tell")]
    LifetimeTooLong(u64),
    #[error("the token carries no e-mail address")]
    NoEmail,
    #[error("the token's e-mail address is not verified")]
    EmailNotVerified,
    #[error("the identity provider's key set is unavailable: {0}")]
    JwksUnavailable(String),
}

impl OidcError {
    /// A stable snake_case reason for audit logs and metrics labels.
    pub fn reason(&self) -> &'static str {
        match self {
            OidcError::Malformed => "malformed",
            OidcError::UnsupportedAlgorithm(_) => "unsupported_algorithm",
            OidcError::MissingKeyId => "missing_key_id",
            OidcError::UnknownKey(_) => "unknown_key",
            OidcError::BadSignature => "bad_signature",
            OidcError::WrongIssuer(_) => "wrong_issuer",
            OidcError::WrongAudience => "wrong_audience",
            OidcError::Expired => "expired",
            OidcError::NotYetValid => "not_yet_valid",
            OidcError::LifetimeTooLong(_) => "lifetime_too_long",
            OidcError::NoEmail => "no_email",
            OidcError::EmailNotVerified => "email_not_verified",
            OidcError::JwksUnavailable(_) => "jwks_unavailable",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_distinct_snake_case() {
        let all = [
            OidcError::Malformed,
            OidcError::UnsupportedAlgorithm("none".into()),
            OidcError::MissingKeyId,
            OidcError::UnknownKey("k".into()),
            OidcError::BadSignature,
            OidcError::WrongIssuer("i".into()),
            OidcError::WrongAudience,
            OidcError::Expired,
            OidcError::NotYetValid,
            OidcError::LifetimeTooLong(86_400),
            OidcError::NoEmail,
            OidcError::EmailNotVerified,
            OidcError::JwksUnavailable("down".into()),
        ];
        let mut reasons: Vec<&str> = all.iter().map(OidcError::reason).collect();
        assert!(reasons.iter().all(|r| r.chars().all(|c| c.is_ascii_lowercase() || c == '_')));
        reasons.sort_unstable();
        reasons.dedup();
        assert_eq!(reasons.len(), all.len());
        assert_eq!(OidcError::UnsupportedAlgorithm("none".into()).reason(), "unsupported_algorithm");
    }
}
