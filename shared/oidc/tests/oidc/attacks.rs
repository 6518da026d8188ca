//! The verifier accepts genuine tokens and refuses forged, misdirected,
//! expired and incomplete ones with the error naming the failed check.

use std::time::Duration;

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rsa::PublicKeyComponents;
use aws_lc_rs::signature::KeyPair;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use mapi_clock::Clock;
use mapi_oidc::{OidcError, VerifierConfig};
use serde_json::json;

use crate::support::{
    ALICE, AUDIENCE, Fixture, ISSUER, JwksServer, TempDir, b64, open_idp, sign_hs256, sign_raw, sign_rs256,
    unb64, verifier,
};

#[tokio::test]
async fn round_trip_returns_the_claims_with_the_email_lower_cased() {
    let f = Fixture::new(None).await;
    let claims = f.verifier.verify(&f.token("BOB@example.com")).await.expect("verifies");
    assert_eq!(claims.iss, ISSUER);
    assert_eq!(claims.aud, AUDIENCE);
    assert_eq!(claims.email, "bob@example.com");
    assert!(claims.email_verified);
    assert!(claims.sub.starts_with("dev-") && claims.sub.len() == 20, "{}", claims.sub);
    assert_eq!(claims.iat, Some(f.clock.now().as_secs()));
    assert_eq!(claims.exp, f.clock.now().as_secs() + 3600);

    // An audience array containing ours matches; the e-mail is lower-cased by the verifier too.
    let mut c = f.claims();
    c["aud"] = json!(["someone-else", AUDIENCE]);
    c["email"] = json!("Carol@Example.COM");
    let claims = f.verifier.verify(&f.sign(&f.header(), &c)).await.expect("verifies");
    assert_eq!(claims.aud, AUDIENCE);
    assert_eq!(claims.email, "carol@example.com");
    assert_eq!(f.jwks.fetches(), 1);
}

#[tokio::test]
async fn alg_none_is_refused_without_looking_up_a_key() {
    let f = Fixture::new(None).await;
    let header = json!({"alg": "none", "typ": "JWT", "kid": f.idp.kid()});
    let token = format!("{}.{}.", b64(header.to_string()), b64(f.claims().to_string()));
    assert_eq!(f.verifier.verify(&token).await, Err(OidcError::UnsupportedAlgorithm("none".into())));
    let header = json!({"alg": "None", "kid": f.idp.kid()});
    let token = format!("{}.{}.", b64(header.to_string()), b64(f.claims().to_string()));
    assert_eq!(f.verifier.verify(&token).await, Err(OidcError::UnsupportedAlgorithm("None".into())));
    assert_eq!(f.server.hits(), 0);
}

fn pem(label: &str, der: &[u8]) -> Vec<u8> {
    let body = STANDARD.encode(der);
    let lines: Vec<&str> =
        body.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).expect("ascii")).collect();
    format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n")).into_bytes()
}

#[tokio::test]
async fn hs256_keyed_with_the_public_key_is_refused() {
    let f = Fixture::new(None).await;
    let public = f.key.public_key();
    let spki = public.as_der().expect("spki");
    let components = PublicKeyComponents::<Vec<u8>>::from(public);
    let jwks = f.idp.jwks();
    let n_text = jwks["keys"][0]["n"].as_str().expect("n").as_bytes().to_vec();
    let secrets: Vec<Vec<u8>> = vec![
        spki.as_ref().to_vec(),
        pem("PUBLIC KEY", spki.as_ref()),
        public.as_ref().to_vec(),
        pem("RSA PUBLIC KEY", public.as_ref()),
        components.n.clone(),
        n_text,
    ];
    let header = json!({"alg": "HS256", "typ": "JWT", "kid": f.idp.kid()});
    for secret in &secrets {
        let token = sign_hs256(secret, &header, &f.claims());
        assert_eq!(f.verifier.verify(&token).await, Err(OidcError::UnsupportedAlgorithm("HS256".into())));
    }
    for alg in ["RS384", "RS512", "PS256", "ES256", "EdDSA", "rs256"] {
        let header = json!({"alg": alg, "kid": f.idp.kid()});
        let token = sign_rs256(&f.key, &header, &f.claims());
        assert_eq!(f.verifier.verify(&token).await, Err(OidcError::UnsupportedAlgorithm(alg.into())));
    }
    assert_eq!(f.server.hits(), 0, "refused before the key set was consulted");
}

#[tokio::test]
async fn another_key_with_the_right_kid_is_a_bad_signature() {
    let f = Fixture::new(None).await;
    let (_, other) = open_idp(&f.dir, "other.key");
    let token = sign_rs256(&other, &f.header(), &f.claims());
    assert_eq!(f.verifier.verify(&token).await, Err(OidcError::BadSignature));
}

#[tokio::test]
async fn tampering_breaks_the_signature() {
    let f = Fixture::new(None).await;
    let token = f.token(ALICE);
    let parts: Vec<&str> = token.split('.').collect();
    let mut claims = f.claims();
    claims["email"] = json!("bob@example.com");
    let tampered = format!("{}.{}.{}", parts[0], b64(claims.to_string()), parts[2]);
    assert_eq!(f.verifier.verify(&tampered).await, Err(OidcError::BadSignature));

    let mut signature = unb64(parts[2]);
    signature[10] ^= 1;
    let flipped = format!("{}.{}.{}", parts[0], parts[1], b64(&signature));
    assert_eq!(f.verifier.verify(&flipped).await, Err(OidcError::BadSignature));
    let truncated = format!("{}.{}.{}", parts[0], parts[1], b64(&signature[..100]));
    assert_eq!(f.verifier.verify(&truncated).await, Err(OidcError::BadSignature));
    assert!(f.verifier.verify(&token).await.is_ok());
}

#[tokio::test]
async fn wrong_issuer_and_wrong_audience_are_refused() {
    let f = Fixture::new(None).await;
    let mut c = f.claims();
    c["iss"] = json!("https://evil.test");
    assert_eq!(
        f.verifier.verify(&f.sign(&f.header(), &c)).await,
        Err(OidcError::WrongIssuer("https://evil.test".into()))
    );
    c.as_object_mut().expect("object").remove("iss");
    assert_eq!(f.verifier.verify(&f.sign(&f.header(), &c)).await, Err(OidcError::WrongIssuer(String::new())));

    for aud in [json!("someone-else"), json!(["a", "b"]), json!([]), json!(format!("{AUDIENCE} "))] {
        let mut c = f.claims();
        c["aud"] = aud;
        assert_eq!(f.verifier.verify(&f.sign(&f.header(), &c)).await, Err(OidcError::WrongAudience));
    }
    let mut c = f.claims();
    c.as_object_mut().expect("object").remove("aud");
    assert_eq!(f.verifier.verify(&f.sign(&f.header(), &c)).await, Err(OidcError::WrongAudience));
    // A genuine token for another audience.
    let other =
        f.idp.issue(ALICE, "another-service", Duration::from_secs(600), f.clock.now()).expect("issue");
    assert_eq!(f.verifier.verify(&other).await, Err(OidcError::WrongAudience));
}

#[tokio::test]
async fn expiry_is_judged_by_the_injected_clock_with_leeway() {
    let f = Fixture::new(Some("max-age=86400")).await;
    let token = f.token(ALICE);
    f.clock.advance(Duration::from_secs(3600 + 59));
    assert!(f.verifier.verify(&token).await.is_ok(), "within the 60 s leeway");
    f.clock.advance(Duration::from_secs(1));
    assert_eq!(f.verifier.verify(&token).await, Err(OidcError::Expired));

    let mut c = f.claims();
    c.as_object_mut().expect("object").remove("exp");
    assert_eq!(f.verifier.verify(&f.sign(&f.header(), &c)).await, Err(OidcError::Malformed));

    // A zero leeway makes the same token expire at exp.
    let strict = VerifierConfig { leeway: Duration::ZERO, ..f.verifier.config().clone() };
    let strict = verifier(&f.jwks, &f.clock, strict);
    let token = f.token(ALICE);
    f.clock.advance(Duration::from_secs(3599));
    assert!(strict.verify(&token).await.is_ok());
    f.clock.advance(Duration::from_secs(1));
    assert_eq!(strict.verify(&token).await, Err(OidcError::Expired));
}

#[tokio::test]
async fn tokens_from_the_future_are_refused_beyond_leeway() {
    let f = Fixture::new(None).await;
    let now = f.clock.now().as_secs();
    for (claim, offset, ok) in [("iat", 61, false), ("iat", 60, true), ("nbf", 61, false), ("nbf", 30, true)]
    {
        let mut c = f.claims();
        c[claim] = json!(now + offset);
        c["exp"] = json!(now + 7200);
        let result = f.verifier.verify(&f.sign(&f.header(), &c)).await;
        if ok {
            assert!(result.is_ok(), "{claim} +{offset}: {result:?}");
        } else {
            assert_eq!(result, Err(OidcError::NotYetValid), "{claim} +{offset}");
        }
    }
}

#[tokio::test]
async fn email_must_be_present_and_verified() {
    let f = Fixture::new(None).await;
    let mut c = f.claims();
    c["email_verified"] = json!(false);
    let unverified = f.sign(&f.header(), &c);
    assert_eq!(f.verifier.verify(&unverified).await, Err(OidcError::EmailNotVerified));
    c["email_verified"] = json!("false");
    assert_eq!(f.verifier.verify(&f.sign(&f.header(), &c)).await, Err(OidcError::EmailNotVerified));
    c.as_object_mut().expect("object").remove("email_verified");
    assert_eq!(f.verifier.verify(&f.sign(&f.header(), &c)).await, Err(OidcError::EmailNotVerified));

    let lenient = VerifierConfig { require_verified_email: false, ..f.verifier.config().clone() };
    let claims = verifier(&f.jwks, &f.clock, lenient).verify(&unverified).await.expect("verifies");
    assert!(!claims.email_verified);

    for email in [None, Some(json!("")), Some(json!("  "))] {
        let mut c = f.claims();
        match email {
            Some(e) => c["email"] = e,
            None => {
                c.as_object_mut().expect("object").remove("email");
            }
        }
        assert_eq!(f.verifier.verify(&f.sign(&f.header(), &c)).await, Err(OidcError::NoEmail));
    }
}

#[tokio::test]
async fn a_missing_or_unknown_kid_is_refused() {
    let f = Fixture::new(None).await;
    for header in [json!({"alg": "RS256", "typ": "JWT"}), json!({"alg": "RS256", "kid": ""})] {
        assert_eq!(f.verifier.verify(&f.sign(&header, &f.claims())).await, Err(OidcError::MissingKeyId));
    }
    assert_eq!(f.server.hits(), 0);
    let header = json!({"alg": "RS256", "kid": "no-such-key"});
    assert_eq!(
        f.verifier.verify(&f.sign(&header, &f.claims())).await,
        Err(OidcError::UnknownKey("no-such-key".into()))
    );
}

#[tokio::test]
async fn key_urls_in_the_header_are_never_fetched() {
    let f = Fixture::new(None).await;
    let attacker_dir = TempDir::new();
    let (attacker, attacker_key) = open_idp(&attacker_dir, "attacker.key");
    let evil = JwksServer::start(attacker.jwks(), None).await;
    let jwk = attacker.jwks()["keys"][0].clone();

    // The attacker's own kid, its key set offered by URL and inline.
    let header =
        json!({"alg": "RS256", "kid": attacker.kid(), "jku": evil.url(), "x5u": evil.url(), "jwk": jwk});
    let token = sign_rs256(&attacker_key, &header, &f.claims());
    assert_eq!(f.verifier.verify(&token).await, Err(OidcError::UnknownKey(attacker.kid().into())));
    // The genuine kid with the attacker's signature.
    let header = json!({"alg": "RS256", "kid": f.idp.kid(), "jku": evil.url(), "jwk": jwk});
    let token = sign_rs256(&attacker_key, &header, &f.claims());
    assert_eq!(f.verifier.verify(&token).await, Err(OidcError::BadSignature));
    // A genuine signature with a jku header is still judged by the configured key set only.
    let header = json!({"alg": "RS256", "kid": f.idp.kid(), "jku": evil.url()});
    assert!(f.verifier.verify(&f.sign(&header, &f.claims())).await.is_ok());

    assert_eq!(evil.hits(), 0, "the attacker's server was contacted");
    assert!(f.server.hits() >= 1);
}

#[tokio::test]
async fn garbage_is_malformed_and_errors_never_echo_the_token() {
    let f = Fixture::new(None).await;
    let header = b64(f.header().to_string());
    let cases = [
        "garbage".to_owned(),
        String::new(),
        "a.b.c".to_owned(),
        "..".to_owned(),
        format!("{header}.e30"),
        format!("{header}.e30.sig.extra"),
        format!("{}.e30.sig", b64("[1, 2]")),
        format!("{}.e30.sig", b64(r#"{"kid": "x"}"#)),
        format!("Bearer {}", f.token(ALICE)),
    ];
    for token in &cases {
        assert_eq!(f.verifier.verify(token).await, Err(OidcError::Malformed), "{token:?}");
    }
    // Correctly signed, but the payload is not a claims object.
    for payload in ["not json", "[]", r#"{"iss": 7}"#] {
        let input = format!("{header}.{}", b64(payload));
        let token = sign_raw(&f.key, &input);
        assert_eq!(f.verifier.verify(&token).await, Err(OidcError::Malformed), "{payload}");
    }
    let mut c = f.claims();
    c.as_object_mut().expect("object").remove("sub");
    assert_eq!(f.verifier.verify(&f.sign(&f.header(), &c)).await, Err(OidcError::Malformed));

    let mut c = f.claims();
    c["iss"] = json!("https://evil.test");
    let token = f.sign(&f.header(), &c);
    let error = f.verifier.verify(&token).await.expect_err("refused");
    assert_eq!(error.reason(), "wrong_issuer");
    let message = error.to_string();
    assert!(!message.contains(&token) && !message.contains(token.split('.').nth(2).expect("sig")));
}

/// A session token minted to live for ten years is a stolen session that
/// never ends: with a bound on `exp - iat`, it is refused however far its
/// `exp` is, as is a token without `iat`; one within the bound verifies.
#[tokio::test]
async fn a_token_that_lives_longer_than_the_bound_is_refused() {
    let f = Fixture::new(None).await;
    let day = Duration::from_secs(86_400);
    let bounded = VerifierConfig { max_lifetime: Some(day), ..f.verifier.config().clone() };
    let bounded = verifier(&f.jwks, &f.clock, bounded);
    let now = f.clock.now().as_secs();
    let mut c = f.claims();
    c["iat"] = json!(now);
    c["exp"] = json!(now + 10 * 365 * 86_400);
    let decade = f.sign(&f.header(), &c);
    assert!(f.verifier.verify(&decade).await.is_ok(), "without a bound, only expiry counts");
    assert_eq!(bounded.verify(&decade).await, Err(OidcError::LifetimeTooLong(86_400)));
    c["exp"] = json!(now + 86_400);
    assert!(bounded.verify(&f.sign(&f.header(), &c)).await.is_ok(), "exactly a day");
    c["exp"] = json!(now + 86_401);
    let a_second_more = f.sign(&f.header(), &c);
    assert_eq!(
        bounded.verify(&a_second_more).await,
        Err(OidcError::LifetimeTooLong(86_400)),
        "the bound is exact"
    );
    c.as_object_mut().expect("object").remove("iat");
    let no_iat = f.sign(&f.header(), &c);
    assert_eq!(bounded.verify(&no_iat).await, Err(OidcError::LifetimeTooLong(86_400)));
}
