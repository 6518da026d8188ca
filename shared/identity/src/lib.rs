//! Who is calling, and whether they may.
//!
//! - A **session** is a person's OIDC ID token, verified at each request
//!   against the identity provider's keys. Operators are the verified
//!   e-mails in `MAPI_OPERATOR_EMAILS`, and only through a session.
//! - A **console session** is a person signed in to the web console (the
//!   OIDC authorization-code flow with PKCE): a random secret in an
//!   HttpOnly cookie, stored only as its HMAC with its user and expiry, and
//!   acting as that person exactly as their ID token would. Signing out
//!   deletes it.
//! - An **API token** is 32 random bytes shown once as `mapi_<64 hex>`; the
//!   store keeps only HMAC-SHA256(pepper, token). It acts as its owner in
//!   one project, limited by its scopes, until it expires or is revoked.
//! - [`authorize`] reads the tenant and the caller's memberships at each
//!   request and asks `mapi_access::decide`; refusals are audited.
//! - [`audit`] writes the audit log; IP addresses and user agents are kept
//!   only as keyed hashes.
//! - A refused authentication that names no one is counted, and audited
//!   once per source a minute ([`refusals`]); one of a known token is
//!   audited each time, naming the token's owner.

mod audit;
mod authorize;
mod caller;
pub mod refusals;

use std::sync::Arc;

use hmac::{Hmac, KeyInit, Mac};
use mapi_clock::Clock;
use mapi_domain::UserId;
use mapi_oidc::Verifier;
use mapi_store::Store;
use sha2::Sha256;

pub use audit::{Audit, audit};
pub use authorize::{Granted, Target, authorize, authorize_operator, check, membership_of};
pub use caller::{
    Anonymous, Caller, InternalCaller, Principal, RequestMeta, bearer, console_caller, request_meta,
};

/// The secret that token hashes, and the hashes of IP addresses and user
/// agents, are keyed with (`MAPI_TOKEN_PEPPER`).
#[derive(Clone)]
pub struct Pepper(Arc<Vec<u8>>);

impl Pepper {
    pub fn new(secret: Vec<u8>) -> Pepper {
        Pepper(Arc::new(secret))
    }

    /// The stored form of a token: hex HMAC-SHA256.
    pub fn hash(&self, token: &str) -> String {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!("HMAC takes any key"));
        mac.update(token.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// A short keyed hash, for values kept only to be compared (IP addresses,
    /// user agents): the same value gives the same hash, the hash does not
    /// give the value back.
    pub fn short_hash(&self, kind: &str, value: &str) -> String {
        let full = self.hash(&format!("{kind}\n{value}"));
        full[..16].to_owned()
    }
}

impl std::fmt::Debug for Pepper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pepper(..)")
    }
}

/// What the identity extractors and [`authorize`] need from the application state.
pub trait IdentityState: Send + Sync {
    fn store(&self) -> &dyn Store;
    fn pepper(&self) -> &Pepper;
    fn clock(&self) -> &dyn Clock;
    /// The randomness audit entry ids are drawn from (the platform's
    /// injected source).
    fn entropy(&self) -> &dyn mapi_entropy::Entropy;
    /// The shared secret internal callers present (`MAPI_INTERNAL_TOKEN`).
    fn internal_token(&self) -> &str;
    /// The verifier of session tokens; `None` when sessions are not configured.
    fn sessions(&self) -> Option<&Verifier>;
    /// Whether a verified e-mail is an operator's.
    fn is_operator(&self, email: &UserId) -> bool;
    /// The process's window of anonymous authentication refusals (one per
    /// state, shared by every request).
    fn refusals(&self) -> &refusals::RefusalLog;
    /// The verifier of the ID tokens a task queue (Cloud Tasks) sends to
    /// internal routes; `None`: only the internal token is accepted there.
    fn task_invoker(&self) -> Option<&mapi_oidc::ServiceAccountTokens> {
        None
    }
}

/// Whether `a` and `b` are equal, in a time that depends on their lengths only.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// How a console session's secret begins (an API token's begins `mapi_`).
pub const CONSOLE_SESSION_PREFIX: &str = "mapis_";

/// A new console session's secret: [`CONSOLE_SESSION_PREFIX`] and 64 hex characters.
pub fn new_console_session() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!("{CONSOLE_SESSION_PREFIX}{}", hex::encode(bytes)))
}

/// A new token's secret: `mapi_` and 64 hex characters.
pub fn new_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!("mapi_{}", hex::encode(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_hashes_depend_on_the_pepper() {
        let a = new_token().expect("token");
        let b = new_token().expect("token");
        assert_ne!(a, b);
        assert!(a.starts_with("mapi_") && a.len() == 69);
        let p1 = Pepper::new(b"one".to_vec());
        let p2 = Pepper::new(b"two".to_vec());
        assert_eq!(p1.hash(&a), p1.hash(&a));
        assert_ne!(p1.hash(&a), p2.hash(&a));
        assert_eq!(p1.hash(&a).len(), 64);
        assert!(!format!("{p1:?}").contains("one"));
        assert_ne!(p1.short_hash("ip", "10.0.0.1"), p1.short_hash("ua", "10.0.0.1"));
        assert_eq!(p1.short_hash("ip", "10.0.0.1").len(), 16);
    }
}
