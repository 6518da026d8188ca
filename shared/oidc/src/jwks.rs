//! `JwksCache`: an identity provider's signing keys, fetched over HTTP and
//! cached by `kid`.
//!
//! Freshness follows the response's `Cache-Control: max-age` (minus `Age`),
//! [`DEFAULT_MAX_AGE`] when absent, at most [`MAX_MAX_AGE`]. A stale cache is
//! refreshed before it is used. A `kid` the cache does not know triggers a
//! refetch (keys rotate), at most once every [`MIN_REFETCH`], so tokens with
//! made-up key ids cannot make the verifier hammer the provider. When a fetch
//! fails the keys already held keep working (stale-if-error) and fetches are
//! retried no more often than every [`MIN_REFETCH`]. Only RSA signing keys are
//! kept. One mutex serialises lookups and fetches, so concurrent callers that
//! all find the cache stale cause one fetch, not many.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use jsonwebtoken::DecodingKey;
use mapi_clock::Clock;
use mapi_domain::Timestamp;
use reqwest::header::{AGE, CACHE_CONTROL, HeaderMap};
use serde::Deserialize;
use tokio::sync::Mutex;

use crate::OidcError;

/// Freshness of a key set whose response carried no `max-age`.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(300);
/// The longest a key set is trusted without asking again, whatever the provider says.
pub const MAX_MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// The least time between refetches caused by unknown key ids, and between retries after a failed fetch.
pub const MIN_REFETCH: Duration = Duration::from_secs(30);

/// A key set larger than this is refused (Google's is about 2 KiB).
const MAX_BODY: usize = 1 << 20;
/// The wall-clock bound on one fetch, so a hung provider cannot hold the cache's lock forever.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The signing keys of one identity provider. Cheap to clone: clones share the cache.
#[derive(Debug, Clone)]
pub struct JwksCache {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    url: String,
    /// Built on the first fetch when not given: building a client loads the
    /// system's CA certificates, milliseconds a process start need not pay.
    http: OnceLock<reqwest::Client>,
    timeout: Duration,
    clock: Arc<dyn Clock>,
    fetches: AtomicU64,
    /// The keys were given ([`JwksCache::fixed`]): nothing is ever fetched.
    fixed: std::sync::atomic::AtomicBool,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    keys: HashMap<String, DecodingKey>,
    /// Until when the keys are fresh; `None` before the first successful fetch.
    fresh_until: Option<Timestamp>,
    /// When the last fetch (of any kind) was attempted.
    last_attempt: Option<Timestamp>,
    /// Why the last fetch failed; `None` when it succeeded.
    last_error: Option<String>,
    /// When an unknown key id last caused a refetch.
    last_refetch: Option<Timestamp>,
}

impl State {
    /// Whether a failed fetch happened less than [`MIN_REFETCH`] ago.
    fn backing_off(&self, now: Timestamp) -> bool {
        self.last_error.is_some() && self.last_attempt.is_some_and(|t| now < t + MIN_REFETCH)
    }
}

impl Inner {
    fn http(&self) -> &reqwest::Client {
        self.http.get_or_init(|| reqwest::Client::builder().timeout(self.timeout).build().unwrap_or_default())
    }
}

impl JwksCache {
    /// A cache of the key set at `url` (nothing is fetched until a key is asked for).
    pub fn new(url: String, http: reqwest::Client, clock: Arc<dyn Clock>) -> JwksCache {
        let cache = JwksCache::lazy(url, Duration::ZERO, clock);
        let _ = cache.inner.http.set(http);
        cache
    }

    /// As [`JwksCache::new`], with a client of its own, built (with
    /// `timeout` on each request) when the first key is asked for.
    pub fn lazy(url: String, timeout: Duration, clock: Arc<dyn Clock>) -> JwksCache {
        JwksCache {
            inner: Arc::new(Inner {
                url,
                http: OnceLock::new(),
                timeout,
                clock,
                fetches: AtomicU64::new(0),
                fixed: std::sync::atomic::AtomicBool::new(false),
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// A cache that holds `key_set` (a JSON Web Key Set) and never fetches:
    /// for an issuer whose keys the process has at start (a simulation's
    /// development issuer, which serves nothing). An unknown key id is
    /// refused as any other: `UnknownKey`.
    ///
    /// # Errors
    ///
    /// The key set does not parse (the detail says why).
    pub fn fixed(key_set: &[u8], clock: Arc<dyn Clock>) -> Result<JwksCache, String> {
        let keys = parse_key_set(key_set)?;
        let cache = JwksCache::lazy(String::new(), Duration::ZERO, clock);
        cache.inner.fixed.store(true, Ordering::Relaxed);
        if let Ok(mut st) = cache.inner.state.try_lock() {
            st.keys = keys;
        }
        Ok(cache)
    }

    /// The key set's address.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The key for `kid`: from the cache while it is fresh; a stale cache is
    /// refreshed first; an unknown `kid` causes a refetch (at most one every
    /// [`MIN_REFETCH`]). When a fetch fails, keys already cached keep working;
    /// the fetch error is returned only when `kid` is not cached.
    pub async fn key(&self, kid: &str) -> Result<DecodingKey, OidcError> {
        let mut st = self.inner.state.lock().await;
        if self.inner.fixed.load(Ordering::Relaxed) {
            return st.keys.get(kid).cloned().ok_or_else(|| OidcError::UnknownKey(kid.to_owned()));
        }
        let now = self.inner.clock.now();
        let mut fetched = false;
        if st.fresh_until.is_none_or(|t| now >= t) && !st.backing_off(now) {
            self.refresh(&mut st, now).await;
            fetched = true;
        }
        if let Some(key) = st.keys.get(kid) {
            return Ok(key.clone());
        }
        let may_refetch =
            !fetched && !st.backing_off(now) && st.last_refetch.is_none_or(|t| now >= t + MIN_REFETCH);
        if may_refetch {
            tracing::debug!(url = %self.inner.url, kid, "unknown key id: refetching the key set");
            st.last_refetch = Some(now);
            self.refresh(&mut st, now).await;
            if let Some(key) = st.keys.get(kid) {
                return Ok(key.clone());
            }
        }
        match &st.last_error {
            Some(error) => Err(OidcError::JwksUnavailable(error.clone())),
            None => Err(OidcError::UnknownKey(kid.to_owned())),
        }
    }

    /// How many HTTP fetches were attempted (successful or not).
    pub fn fetches(&self) -> u64 {
        self.inner.fetches.load(Ordering::Relaxed)
    }

    /// Fetches the key set and records the outcome in `st`.
    async fn refresh(&self, st: &mut State, now: Timestamp) {
        self.inner.fetches.fetch_add(1, Ordering::Relaxed);
        st.last_attempt = Some(now);
        match self.fetch().await {
            Ok((keys, max_age)) => {
                tracing::debug!(url = %self.inner.url, keys = keys.len(), max_age_s = max_age.as_secs(), "fetched key set");
                st.keys = keys;
                st.fresh_until = Some(now + max_age);
                st.last_error = None;
            }
            Err(error) => {
                tracing::warn!(url = %self.inner.url, %error, cached_keys = st.keys.len(), "key set fetch failed");
                st.last_error = Some(error);
            }
        }
    }

    async fn fetch(&self) -> Result<(HashMap<String, DecodingKey>, Duration), String> {
        let mut response = self
            .inner
            .http()
            .get(&self.inner.url)
            .timeout(FETCH_TIMEOUT)
            .send()
            .await
            .map_err(|e| format!("fetching {} failed: {e}", self.inner.url))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("{} answered {status}", self.inner.url));
        }
        let max_age = freshness(response.headers());
        let mut body = Vec::new();
        while let Some(chunk) =
            response.chunk().await.map_err(|e| format!("reading {} failed: {e}", self.inner.url))?
        {
            if body.len() + chunk.len() > MAX_BODY {
                return Err(format!("{} sent a key set over {MAX_BODY} bytes", self.inner.url));
            }
            body.extend_from_slice(&chunk);
        }
        let keys = parse_key_set(&body).map_err(|e| format!("{} sent a bad key set: {e}", self.inner.url))?;
        Ok((keys, max_age))
    }
}

/// How long a response stays fresh: `max-age` less `Age`, default and cap applied.
fn freshness(headers: &HeaderMap) -> Duration {
    let max_age = headers
        .get_all(CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|directive| {
            let (name, value) = directive.trim().split_once('=')?;
            name.trim()
                .eq_ignore_ascii_case("max-age")
                .then(|| value.trim().trim_matches('"').parse::<u64>().ok())?
        })
        .map_or(DEFAULT_MAX_AGE, Duration::from_secs);
    let age = headers
        .get(AGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_secs);
    max_age.min(MAX_MAX_AGE).saturating_sub(age)
}

#[derive(Deserialize)]
struct KeySet {
    keys: Vec<serde_json::Value>,
}

/// One entry of a key set, as far as this crate cares.
#[derive(Deserialize)]
struct RsaJwk {
    kty: String,
    kid: Option<String>,
    #[serde(rename = "use")]
    usage: Option<String>,
    alg: Option<String>,
    n: Option<String>,
    e: Option<String>,
}

/// The RS256-capable keys of a JWKS document, by `kid`. Entries of other
/// types, without a `kid`, meant for encryption or unparsable are skipped.
fn parse_key_set(body: &[u8]) -> Result<HashMap<String, DecodingKey>, String> {
    let set: KeySet = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let mut keys = HashMap::new();
    for entry in set.keys {
        let Ok(jwk) = serde_json::from_value::<RsaJwk>(entry) else { continue };
        let usable = jwk.kty == "RSA"
            && jwk.usage.as_deref().is_none_or(|u| u == "sig")
            && jwk.alg.as_deref().is_none_or(|a| a == "RS256");
        let (true, Some(kid), Some(n), Some(e)) = (usable, jwk.kid, jwk.n, jwk.e) else { continue };
        match DecodingKey::from_rsa_components(&n, &e) {
            Ok(key) => {
                keys.insert(kid, key);
            }
            Err(error) => tracing::warn!(kid, %error, "skipping an unparsable key"),
        }
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    fn headers(pairs: &[(reqwest::header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(name.clone(), HeaderValue::from_str(value).expect("header value"));
        }
        h
    }

    #[test]
    fn freshness_reads_max_age_and_applies_default_cap_and_age() {
        assert_eq!(freshness(&HeaderMap::new()), DEFAULT_MAX_AGE);
        assert_eq!(freshness(&headers(&[(CACHE_CONTROL, "no-transform")])), DEFAULT_MAX_AGE);
        let google = headers(&[(CACHE_CONTROL, "public, max-age=22231, must-revalidate, no-transform")]);
        assert_eq!(freshness(&google), Duration::from_secs(22231));
        assert_eq!(freshness(&headers(&[(CACHE_CONTROL, "Max-Age = 10")])), Duration::from_secs(10));
        assert_eq!(freshness(&headers(&[(CACHE_CONTROL, "max-age=9999999")])), MAX_MAX_AGE);
        assert_eq!(freshness(&headers(&[(CACHE_CONTROL, "max-age=junk")])), DEFAULT_MAX_AGE);
        let aged = headers(&[(CACHE_CONTROL, "max-age=600"), (AGE, "100")]);
        assert_eq!(freshness(&aged), Duration::from_secs(500));
        let too_old = headers(&[(CACHE_CONTROL, "max-age=60"), (AGE, "100")]);
        assert_eq!(freshness(&too_old), Duration::ZERO);
    }

    #[test]
    fn key_set_keeps_only_rsa_signing_keys_with_ids() {
        let body = serde_json::json!({"keys": [
            {"kty": "RSA", "kid": "a", "use": "sig", "alg": "RS256", "n": "AQAB", "e": "AQAB"},
            {"kty": "RSA", "kid": "b", "n": "AQAB", "e": "AQAB"},
            {"kty": "RSA", "kid": "enc", "use": "enc", "n": "AQAB", "e": "AQAB"},
            {"kty": "RSA", "kid": "ps", "alg": "PS256", "n": "AQAB", "e": "AQAB"},
            {"kty": "RSA", "n": "AQAB", "e": "AQAB"},
            {"kty": "EC", "kid": "ec", "crv": "P-256", "x": "AQAB", "y": "AQAB"},
            {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
            {"kty": "RSA", "kid": "bad", "n": "!!", "e": "AQAB"},
            "not an object"
        ]});
        let keys = parse_key_set(body.to_string().as_bytes()).expect("parses");
        let mut kids: Vec<&str> = keys.keys().map(String::as_str).collect();
        kids.sort_unstable();
        assert_eq!(kids, ["a", "b"]);
        assert!(parse_key_set(b"{\"nokeys\": []}").is_err());
        assert!(parse_key_set(b"<html>").is_err());
    }
}
