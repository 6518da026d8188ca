//! ID tokens for private services: Cloud Run admits a request to a service
//! without `invokerIamDisabled` only with `Authorization: Bearer <ID token>`
//! whose audience is the service's URL, of an identity allowed to invoke it.
//!
//! The source is a port ([`IdTokens`]) so tests mint their own; in the
//! cloud it is [`GoogleIdTokens`] (`google-cloud-auth`'s ID token
//! credentials: Application Default Credentials, which on Cloud Run is the
//! metadata server). [`TokenCache`] keeps each audience's token until one
//! minute before it expires; callers take it per request and never store it.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use google_cloud_auth::credentials::idtoken::{self, IDTokenCredentials};
use mapi_clock::Clock;
use mapi_domain::Timestamp;
use mapi_hosting::HostingError;

/// How long before its expiry a cached token is replaced.
pub const REFRESH_BEFORE: Duration = Duration::from_secs(60);

/// An ID token and when it expires.
#[derive(Clone, PartialEq, Eq)]
pub struct IdToken {
    pub token: String,
    pub expires: Timestamp,
}

impl Debug for IdToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdToken").field("expires", &self.expires).finish_non_exhaustive()
    }
}

/// Where ID tokens come from.
#[async_trait]
pub trait IdTokens: Send + Sync + Debug {
    /// A fresh token for `audience`. `Unavailable` when the source did not
    /// answer (retry); `Api` when it refused (the credentials are wrong).
    async fn mint(&self, audience: &str) -> Result<IdToken, HostingError>;
}

/// Tokens by audience, each until [`REFRESH_BEFORE`] its expiry.
#[derive(Debug)]
pub struct TokenCache {
    source: Arc<dyn IdTokens>,
    clock: Arc<dyn Clock>,
    tokens: Mutex<HashMap<String, IdToken>>,
}

impl TokenCache {
    pub fn new(source: Arc<dyn IdTokens>, clock: Arc<dyn Clock>) -> TokenCache {
        TokenCache { source, clock, tokens: Mutex::new(HashMap::new()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, IdToken>> {
        self.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A token for `audience` valid for at least [`REFRESH_BEFORE`].
    pub async fn get(&self, audience: &str) -> Result<String, HostingError> {
        let fresh = |t: &IdToken| self.clock.now() + REFRESH_BEFORE < t.expires;
        if let Some(t) = self.lock().get(audience).filter(|t| fresh(t)) {
            return Ok(t.token.clone());
        }
        let minted = self.source.mint(audience).await?;
        let token = minted.token.clone();
        if fresh(&minted) {
            self.lock().insert(audience.to_owned(), minted);
        }
        Ok(token)
    }
}

/// Which Google credentials mint the tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Source {
    /// Application Default Credentials (the metadata server on Cloud Run,
    /// a service-account key file elsewhere).
    ApplicationDefault,
    /// The metadata server at this root (`GCE_METADATA_HOST` still wins).
    MetadataServer(String),
}

/// ID tokens from `google-cloud-auth`, one credentials object per audience
/// (each caches its own token as well).
#[derive(Debug)]
pub struct GoogleIdTokens {
    source: Source,
    credentials: Mutex<HashMap<String, IDTokenCredentials>>,
}

impl GoogleIdTokens {
    /// Through Application Default Credentials.
    pub fn application_default() -> GoogleIdTokens {
        GoogleIdTokens { source: Source::ApplicationDefault, credentials: Mutex::new(HashMap::new()) }
    }

    /// From the metadata server at `root` (e.g. `http://127.0.0.1:8089`).
    pub fn metadata_server(root: impl Into<String>) -> GoogleIdTokens {
        GoogleIdTokens {
            source: Source::MetadataServer(root.into()),
            credentials: Mutex::new(HashMap::new()),
        }
    }

    fn credentials(&self, audience: &str) -> Result<IDTokenCredentials, HostingError> {
        let mut all = self.credentials.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = all.get(audience) {
            return Ok(c.clone());
        }
        let built = match &self.source {
            Source::ApplicationDefault => idtoken::Builder::new(audience).build(),
            Source::MetadataServer(root) => idtoken::mds::Builder::new(audience).with_endpoint(root).build(),
        };
        let c = built.map_err(|e| HostingError::Api {
            status: 401,
            code: "UNAUTHENTICATED".into(),
            message: format!("no credentials mint ID tokens here: {e}"),
        })?;
        all.insert(audience.to_owned(), c.clone());
        Ok(c)
    }
}

/// The `exp` claim of a JWT (not verified: it is our own token, read only
/// to know when to replace it).
pub fn expiry_of(jwt: &str) -> Option<Timestamp> {
    let payload = jwt.split('.').nth(1)?;
    let bytes =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    Some(Timestamp::from_secs(claims["exp"].as_i64()?))
}

#[async_trait]
impl IdTokens for GoogleIdTokens {
    async fn mint(&self, audience: &str) -> Result<IdToken, HostingError> {
        let token = self.credentials(audience)?.id_token().await.map_err(|e| {
            if e.is_transient() {
                HostingError::Unavailable(mapi_domain::Cause::new(
                    format!("minting an ID token for {audience}"),
                    e,
                ))
            } else {
                HostingError::Api {
                    status: 401,
                    code: "UNAUTHENTICATED".into(),
                    message: format!("minting an ID token for {audience}: {e}"),
                }
            }
        })?;
        let expires = expiry_of(&token).ok_or_else(|| {
            HostingError::Unavailable(
                format!("the ID token minted for {audience} has no readable exp").into(),
            )
        })?;
        Ok(IdToken { token, expires })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use mapi_clock::VirtualClock;

    use super::*;

    #[derive(Debug, Default)]
    struct Counting(AtomicU64);

    #[async_trait]
    impl IdTokens for Counting {
        async fn mint(&self, audience: &str) -> Result<IdToken, HostingError> {
            let n = self.0.fetch_add(1, Ordering::SeqCst);
            Ok(IdToken { token: format!("{audience}#{n}"), expires: Timestamp::from_secs(1_000 + 3_600) })
        }
    }

    #[tokio::test]
    async fn a_token_is_reused_until_a_minute_before_it_expires() {
        let source = Arc::new(Counting::default());
        let clock = Arc::new(VirtualClock::new(Timestamp::from_secs(1_000)));
        let cache = TokenCache::new(source.clone(), clock.clone());
        assert_eq!(cache.get("https://a").await.expect("token"), "https://a#0");
        assert_eq!(cache.get("https://b").await.expect("token"), "https://b#1", "one per audience");
        clock.advance(Duration::from_secs(3_600 - 61));
        assert_eq!(cache.get("https://a").await.expect("token"), "https://a#0", "61 s left: kept");
        clock.advance(Duration::from_secs(1));
        assert_eq!(cache.get("https://a").await.expect("token"), "https://a#2", "60 s left: replaced");
    }

    #[test]
    fn the_expiry_is_the_exp_claim() {
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let jwt = format!("{}.{}.sig", b64(r#"{"alg":"RS256"}"#), b64(r#"{"aud":"x","exp":1800000000}"#));
        assert_eq!(expiry_of(&jwt), Some(Timestamp::from_secs(1_800_000_000)));
        assert_eq!(expiry_of("not-a-jwt"), None);
    }
}
