//! The key-set cache: freshness from Cache-Control, refetch on rotation at
//! most every 30 s, stale keys kept while the provider is down. All in
//! virtual time; the server counts the requests.

use std::sync::Arc;
use std::time::Duration;

use mapi_clock::{Clock, VirtualClock};
use mapi_oidc::{JwksCache, MIN_REFETCH, OidcError, VerifierConfig};
use serde_json::json;

use crate::support::{ALICE, AUDIENCE, Fixture, HOUR, ISSUER, START, merged, open_idp, verifier};

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn a_fresh_cache_is_not_refetched() {
    let f = Fixture::new(Some("public, max-age=600")).await;
    let token = f.token(ALICE);
    for _ in 0..12 {
        f.verifier.verify(&token).await.expect("verifies");
        f.clock.advance(Duration::from_secs(49));
    }
    assert_eq!(f.clock.now(), START + Duration::from_secs(588));
    assert_eq!((f.jwks.fetches(), f.server.hits()), (1, 1));
    f.clock.advance(Duration::from_secs(12));
    f.verifier.verify(&token).await.expect("verifies");
    f.verifier.verify(&token).await.expect("verifies");
    assert_eq!((f.jwks.fetches(), f.server.hits()), (2, 2), "one refetch once max-age passed");
}

#[tokio::test]
async fn max_age_comes_from_the_header() {
    let f = Fixture::new(Some("max-age=10")).await;
    let token = f.token(ALICE);
    f.verifier.verify(&token).await.expect("verifies");
    f.clock.advance(9 * SECOND);
    f.verifier.verify(&token).await.expect("verifies");
    assert_eq!(f.jwks.fetches(), 1);
    f.clock.advance(SECOND);
    f.verifier.verify(&token).await.expect("verifies");
    assert_eq!(f.jwks.fetches(), 2);
}

#[tokio::test]
async fn max_age_defaults_to_300_s_and_is_capped_at_a_day() {
    let f = Fixture::new(None).await;
    let token = f.token(ALICE);
    f.verifier.verify(&token).await.expect("verifies");
    f.clock.advance(299 * SECOND);
    f.verifier.verify(&token).await.expect("verifies");
    assert_eq!(f.jwks.fetches(), 1);
    f.clock.advance(SECOND);
    f.verifier.verify(&token).await.expect("verifies");
    assert_eq!(f.jwks.fetches(), 2);

    let f = Fixture::new(Some("max-age=31536000")).await;
    let key = f.jwks.key(f.idp.kid()).await;
    assert!(key.is_ok());
    f.clock.advance(24 * HOUR - SECOND);
    assert!(f.jwks.key(f.idp.kid()).await.is_ok());
    assert_eq!(f.jwks.fetches(), 1);
    f.clock.advance(SECOND);
    assert!(f.jwks.key(f.idp.kid()).await.is_ok());
    assert_eq!(f.jwks.fetches(), 2);
}

#[tokio::test]
async fn rotated_keys_are_found_with_at_most_one_refetch_per_30_s() {
    let f = Fixture::new(Some("max-age=3600")).await;
    let (second, _) = open_idp(&f.dir, "second.key");
    let (third, _) = open_idp(&f.dir, "third.key");
    let first_token = f.token(ALICE);
    f.verifier.verify(&first_token).await.expect("verifies");
    assert_eq!(f.jwks.fetches(), 1);

    // The provider adds a key; a token signed with it causes one refetch.
    f.server.set_body(merged(&[&f.idp, &second]));
    let second_token = second.issue(ALICE, AUDIENCE, HOUR, f.clock.now()).expect("issue");
    f.verifier.verify(&second_token).await.expect("the new key is fetched");
    assert_eq!(f.jwks.fetches(), 2);

    // Another new key within 30 s of that refetch: no refetch.
    f.server.set_body(merged(&[&f.idp, &second, &third]));
    let third_token = third.issue(ALICE, AUDIENCE, HOUR, f.clock.now()).expect("issue");
    f.clock.advance(MIN_REFETCH - SECOND);
    assert_eq!(f.verifier.verify(&third_token).await, Err(OidcError::UnknownKey(third.kid().into())));
    assert_eq!(f.verifier.verify(&third_token).await, Err(OidcError::UnknownKey(third.kid().into())));
    assert_eq!(f.jwks.fetches(), 2);
    f.verifier.verify(&first_token).await.expect("known keys still work");

    f.clock.advance(SECOND);
    f.verifier.verify(&third_token).await.expect("refetched after 30 s");
    assert_eq!((f.jwks.fetches(), f.server.hits()), (3, 3));

    // A key the provider dropped stops working at the next fetch.
    f.server.set_body(merged(&[&third]));
    f.clock.advance(HOUR);
    let token = f.token(ALICE);
    assert_eq!(f.verifier.verify(&token).await, Err(OidcError::UnknownKey(f.idp.kid().into())));
}

#[tokio::test]
async fn known_keys_keep_working_while_the_provider_is_down() {
    let f = Fixture::new(Some("max-age=10")).await;
    let (second, _) = open_idp(&f.dir, "second.key");
    let token = f.token(ALICE);
    f.verifier.verify(&token).await.expect("verifies");
    f.server.set_failing(true);
    f.clock.advance(11 * SECOND);
    f.verifier.verify(&token).await.expect("stale-if-error");
    assert_eq!(f.jwks.fetches(), 2, "the stale cache was refreshed (and that failed)");

    let unknown = second.issue(ALICE, AUDIENCE, HOUR, f.clock.now()).expect("issue");
    let error = f.verifier.verify(&unknown).await.expect_err("refused");
    assert!(matches!(error, OidcError::JwksUnavailable(_)), "{error:?}");
    assert!(error.to_string().contains("500"), "{error}");
    // Failed fetches are not retried more often than every 30 s.
    f.clock.advance(MIN_REFETCH - SECOND);
    f.verifier.verify(&token).await.expect("stale-if-error");
    assert!(matches!(f.verifier.verify(&unknown).await, Err(OidcError::JwksUnavailable(_))));
    assert_eq!((f.jwks.fetches(), f.server.hits()), (2, 2));

    // Recovery: the next fetch finds the new key set.
    f.server.set_failing(false);
    f.server.set_body(merged(&[&f.idp, &second]));
    f.clock.advance(SECOND);
    f.verifier.verify(&unknown).await.expect("verifies after recovery");
    assert_eq!(f.jwks.fetches(), 3);
}

#[tokio::test]
async fn bad_key_sets_and_unreachable_providers_are_unavailable() {
    let f = Fixture::new(Some("max-age=10")).await;
    let token = f.token(ALICE);
    f.verifier.verify(&token).await.expect("verifies");
    f.server.set_body(json!({"not": "a key set"}));
    f.clock.advance(11 * SECOND);
    f.verifier.verify(&token).await.expect("stale-if-error on bad JSON");
    assert_eq!(f.jwks.fetches(), 2);

    // Nothing cached: the failure is the answer.
    let f = Fixture::new(None).await;
    f.server.set_failing(true);
    let error = f.verifier.verify(&f.token(ALICE)).await.expect_err("refused");
    assert_eq!(error.reason(), "jwks_unavailable");

    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let closed = format!("http://{}/jwks.json", listener.local_addr().expect("addr"));
    drop(listener);
    let clock = Arc::new(VirtualClock::new(START));
    let jwks = JwksCache::new(closed, reqwest::Client::new(), clock.clone());
    let v = verifier(&jwks, &clock, VerifierConfig::new(vec![ISSUER.into()], AUDIENCE.into()));
    assert!(matches!(v.verify(&f.token(ALICE)).await, Err(OidcError::JwksUnavailable(_))));
    assert_eq!(jwks.fetches(), 1);
}

#[tokio::test]
async fn concurrent_verifications_share_one_fetch() {
    let f = Fixture::new(None).await;
    let token = f.token(ALICE);
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (v, t) = (f.verifier.clone(), token.clone());
            tokio::spawn(async move { v.verify(&t).await })
        })
        .collect();
    for task in tasks {
        task.await.expect("joined").expect("verifies");
    }
    assert_eq!((f.jwks.fetches(), f.server.hits()), (1, 1));
}
