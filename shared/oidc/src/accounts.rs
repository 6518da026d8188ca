//! Google-signed ID tokens of one service account for one audience: what
//! Pub/Sub push subscriptions and Cloud Tasks HTTP targets send.
//!
//! Such a caller reuses one token for many requests, so a token that passed
//! every check is remembered by its SHA-256 until the verifier would start
//! refusing it ([`VerifiedTokens`]). A remembered token therefore stays good
//! until its expiry (at most an hour for Google's) even if Google withdraws
//! its key meanwhile; only successes are remembered, so a refusal (say,
//! while the key set cannot be fetched) does not stick.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mapi_clock::Clock;
use mapi_domain::Timestamp;
use sha2::{Digest, Sha256};

use crate::{GOOGLE_ISSUERS, JwksCache, OidcError, Verifier, VerifierConfig};

/// How many verified tokens are remembered at most. Each Google caller
/// sends one token at a time (renewed before it expires), so a handful are
/// live; the bound only matters against a flood of distinct valid tokens.
pub const VERIFIED_TOKENS_CAPACITY: usize = 1024;

/// The bound on one key-set fetch.
const JWKS_TIMEOUT: Duration = Duration::from_secs(10);

/// Tokens that passed every check, by their SHA-256, each until the instant
/// the verifier would start refusing it (`exp` plus the leeway). At most
/// `capacity` are kept: when full, the expired ones go, then the one that
/// expires soonest.
#[derive(Debug)]
pub struct VerifiedTokens {
    capacity: usize,
    entries: Mutex<HashMap<[u8; 32], Timestamp>>,
}

impl VerifiedTokens {
    pub fn new(capacity: usize) -> VerifiedTokens {
        VerifiedTokens { capacity: capacity.max(1), entries: Mutex::new(HashMap::new()) }
    }

    fn key(token: &str) -> [u8; 32] {
        Sha256::digest(token.as_bytes()).into()
    }

    /// Whether `token` verified before and is still valid at `now`.
    pub fn contains(&self, token: &str, now: Timestamp) -> bool {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.get(&Self::key(token)).is_some_and(|until| now < *until)
    }

    /// Remembers `token` as valid until `until`.
    pub fn insert(&self, token: &str, until: Timestamp, now: Timestamp) {
        let key = Self::key(token);
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if !entries.contains_key(&key) && entries.len() >= self.capacity {
            entries.retain(|_, u| now < *u);
            if entries.len() >= self.capacity
                && let Some(soonest) = entries.iter().min_by_key(|(_, u)| **u).map(|(k, _)| *k)
            {
                entries.remove(&soonest);
            }
        }
        entries.insert(key, until);
    }

    /// How many tokens are remembered.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Why a service account's token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccountRefusal {
    /// The token does not verify (signature, issuer, audience, expiry, …).
    #[error("the token is refused: {0}")]
    Token(OidcError),
    /// An authentic token of another account.
    #[error("the token is not the service account's")]
    WrongServiceAccount,
}

/// Accepts Google-signed ID tokens of one service account for one audience.
#[derive(Debug)]
pub struct ServiceAccountTokens {
    verifier: Verifier,
    service_account: String,
    verified: VerifiedTokens,
    clock: Arc<dyn Clock>,
}

impl ServiceAccountTokens {
    /// Tokens of `service_account` for `audience`, signed by a key of the
    /// set at `jwks_url` (Google's, or a fake's in tests), judged by `clock`.
    pub fn google(
        jwks_url: String,
        audience: String,
        service_account: String,
        clock: Arc<dyn Clock>,
    ) -> ServiceAccountTokens {
        let jwks = JwksCache::lazy(jwks_url, JWKS_TIMEOUT, clock.clone());
        let issuers = GOOGLE_ISSUERS.iter().map(|i| (*i).to_owned()).collect();
        ServiceAccountTokens {
            verifier: Verifier::new(VerifierConfig::new(issuers, audience), jwks, clock.clone()),
            service_account: service_account.to_lowercase(),
            verified: VerifiedTokens::new(VERIFIED_TOKENS_CAPACITY),
            clock,
        }
    }

    /// The account whose tokens are accepted.
    pub fn service_account(&self) -> &str {
        &self.service_account
    }

    /// The audience the tokens must name.
    pub fn audience(&self) -> &str {
        &self.verifier.config().audience
    }

    /// Checks `token`: remembered, or verified now (and then remembered).
    pub async fn check(&self, token: &str) -> Result<(), AccountRefusal> {
        let now = self.clock.now();
        if self.verified.contains(token, now) {
            return Ok(());
        }
        let claims = self.verifier.verify(token).await.map_err(AccountRefusal::Token)?;
        if claims.email != self.service_account {
            return Err(AccountRefusal::WrongServiceAccount);
        }
        // Saturating: `exp` is the token's to choose (a signed one, but still).
        let exp = Timestamp::from_micros(claims.exp.saturating_mul(1_000_000));
        let until = exp + self.verifier.config().leeway;
        self.verified.insert(token, until, now);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_secs(secs)
    }

    #[test]
    fn verified_tokens_last_until_their_expiry() {
        let cache = VerifiedTokens::new(8);
        assert!(!cache.contains("a.b.c", t(0)));
        cache.insert("a.b.c", t(100), t(0));
        assert!(cache.contains("a.b.c", t(99)));
        assert!(!cache.contains("a.b.c", t(100)), "expired at its instant");
        assert!(!cache.contains("a.b.d", t(0)), "keyed by the whole token");
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn verified_tokens_are_bounded_expired_first_then_soonest_expiring() {
        let cache = VerifiedTokens::new(3);
        cache.insert("expired", t(10), t(0));
        cache.insert("late", t(1000), t(0));
        cache.insert("soon", t(500), t(0));
        // Full: the expired one makes room.
        cache.insert("new", t(900), t(20));
        assert_eq!(cache.len(), 3);
        assert!(!cache.contains("expired", t(5)));
        // Full of live tokens: the one expiring soonest goes.
        cache.insert("newer", t(800), t(30));
        assert_eq!(cache.len(), 3);
        assert!(!cache.contains("soon", t(30)));
        for kept in ["late", "new", "newer"] {
            assert!(cache.contains(kept, t(30)), "{kept}");
        }
        for _ in 0..100 {
            cache.insert("late", t(1000), t(30));
        }
        assert_eq!(cache.len(), 3, "re-inserting a token does not grow the cache");
    }
}
