//! Who is calling.
//!
//! API tokens are 32 random bytes shown once as `mapi_<64 hex>`; the store
//! keeps only HMAC-SHA256(pepper, token), so a copy of the database does not
//! hold usable tokens. Every tenant-facing handler takes a [`Caller`]; the
//! routes that Cloud Tasks, Cloud Scheduler and Pub/Sub call take an
//! [`InternalCaller`].

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use hmac::{Hmac, KeyInit, Mac};
use mapi_clock::Clock;
use mapi_domain::{ProjectId, TenantId, UserId};
use mapi_problem::ApiError;
use mapi_runs::TokenDoc;
use mapi_store::{Store, StoreExt};
use sha2::Sha256;

/// The secret that token hashes are keyed with (`MAPI_TOKEN_PEPPER`).
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
}

impl std::fmt::Debug for Pepper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pepper(..)")
    }
}

/// What the identity extractors need from the application state.
pub trait IdentityState: Send + Sync {
    fn store(&self) -> &dyn Store;
    fn pepper(&self) -> &Pepper;
    fn clock(&self) -> &dyn Clock;
    /// The shared secret internal callers present (`MAPI_INTERNAL_TOKEN`).
    fn internal_token(&self) -> &str;
}

/// A new token's secret: `mapi_` and 64 hex characters.
pub fn new_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!("mapi_{}", hex::encode(bytes)))
}

/// The authenticated caller of a tenant-facing route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub user: UserId,
    pub tenant: TenantId,
    /// The first 12 hex characters of the token's hash: names the token in
    /// logs and usage without revealing it.
    pub token_id: String,
}

impl Caller {
    /// Refuses access to another tenant's project. Answers NOT_FOUND, not
    /// FORBIDDEN, so a caller cannot probe which other tenants exist.
    pub fn require_project(&self, tenant: &TenantId, project: &ProjectId) -> Result<(), ApiError> {
        if &self.tenant == tenant {
            Ok(())
        } else {
            Err(ApiError::not_found(format!("project {tenant}/{project} not found")))
        }
    }

    /// Refuses a resource of another tenant (NOT_FOUND, as above).
    pub fn require_tenant(&self, tenant: &TenantId, what: &str) -> Result<(), ApiError> {
        if &self.tenant == tenant { Ok(()) } else { Err(ApiError::not_found(format!("{what} not found"))) }
    }
}

fn bearer(parts: &Parts) -> Option<&str> {
    let value = parts.headers.get(axum::http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token.trim())
}

impl<S: IdentityState> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Some(token) = bearer(parts) else {
            return Err(ApiError::unauthenticated(
                "send an API token as `Authorization: Bearer mapi_…` (mapi dev writes one to $MAPI_HOME/credentials.json)",
            ));
        };
        let hash = state.pepper().hash(token);
        let key = mapi_runs::key::<TokenDoc>(&hash).map_err(|e| ApiError::internal(e.to_string()))?;
        let doc = state
            .store()
            .get_one(&key)
            .await
            .map_err(|e| ApiError::internal(format!("token lookup: {e}")))?;
        let Some(doc) = doc else {
            return Err(ApiError::unauthenticated("the API token is not valid"));
        };
        let token: TokenDoc = doc.decode().map_err(|e| ApiError::internal(e.to_string()))?;
        if token.expires_at.is_some_and(|t| t <= state.clock().now()) {
            return Err(ApiError::unauthenticated("the API token has expired: mint a new one"));
        }
        let token_id = token.hash.chars().take(12).collect();
        Ok(Caller { user: token.user, tenant: token.tenant, token_id })
    }
}

/// A call from the platform's own infrastructure (queue deliveries, the
/// scheduler's tick, event pushes), authenticated with the internal token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InternalCaller;

impl<S: IdentityState> FromRequestParts<S> for InternalCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let expected = state.internal_token();
        let given = bearer(parts).unwrap_or_default();
        // Compare MACs of both, so the comparison time does not depend on
        // how much of the token matched.
        let pepper = state.pepper();
        if !expected.is_empty() && pepper.hash(given) == pepper.hash(expected) {
            Ok(InternalCaller)
        } else {
            Err(ApiError::unauthenticated("internal routes need the platform's internal token"))
        }
    }
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
    }

    #[test]
    fn callers_stay_in_their_tenant() {
        let c = Caller {
            user: UserId::parse("a@b.co").expect("user"),
            tenant: TenantId::parse("dev").expect("tenant"),
            token_id: "abc".into(),
        };
        let p = ProjectId::parse("default").expect("project");
        assert!(c.require_project(&TenantId::parse("dev").expect("t"), &p).is_ok());
        let err = c.require_project(&TenantId::parse("acme").expect("t"), &p).expect_err("other tenant");
        assert_eq!(err.code(), mapi_problem::ProblemCode::NotFound);
    }
}
