//! The development identity provider: a persistent key, its JWKS, tokens for
//! seeded accounts only, and the HTTP routes `mapi dev` serves.

use std::sync::Arc;

use aws_lc_rs::digest::{SHA256, digest};
use mapi_clock::{Clock, VirtualClock};
use mapi_oidc::dev::{self, DevIdp, DevIdpError, JWKS_PATH};
use mapi_oidc::{JwksCache, VerifierConfig};
use serde_json::{Value, json};

use crate::support::{ALICE, AUDIENCE, HOUR, ISSUER, START, TempDir, serve, unb64, verifier};

#[test]
fn the_key_persists_with_owner_only_permissions() {
    let dir = TempDir::new();
    let path = dir.path().join("nested").join("idp.key");
    let first = DevIdp::open(&path, ISSUER.into(), vec![ALICE.into()]).expect("open");
    let again = DevIdp::open(&path, ISSUER.into(), vec![ALICE.into()]).expect("reopen");
    assert_eq!(first.kid(), again.kid());
    assert_eq!(first.jwks(), again.jwks());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).expect("metadata").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let entries: Vec<_> = std::fs::read_dir(path.parent().expect("parent")).expect("read dir").collect();
    assert_eq!(entries.len(), 1, "no temporary files left behind");

    let other = DevIdp::open(&dir.path().join("other.key"), ISSUER.into(), vec![]).expect("open");
    assert_ne!(other.kid(), first.kid());
}

#[test]
fn a_corrupt_key_file_is_refused() {
    let dir = TempDir::new();
    let path = dir.path().join("idp.key");
    std::fs::write(&path, b"not a key").expect("write");
    let error = DevIdp::open(&path, ISSUER.into(), vec![]).expect_err("refused");
    assert!(matches!(error, DevIdpError::BadKey { .. }), "{error:?}");
}

#[test]
fn the_jwks_is_base64url_and_the_kid_derives_from_the_modulus() {
    let dir = TempDir::new();
    let idp = DevIdp::open(&dir.path().join("idp.key"), ISSUER.into(), vec![ALICE.into()]).expect("open");
    let jwks = idp.jwks();
    let key = &jwks["keys"][0];
    assert_eq!(
        (key["kty"].as_str(), key["use"].as_str(), key["alg"].as_str()),
        (Some("RSA"), Some("sig"), Some("RS256"))
    );
    assert_eq!(key["kid"], idp.kid());
    assert_eq!(key["e"], "AQAB");
    let n = key["n"].as_str().expect("n");
    assert!(!n.contains(['=', '+', '/']));
    let modulus = unb64(n);
    assert_eq!(modulus.len(), 256, "RSA-2048");
    assert_eq!(idp.kid(), hex::encode(&digest(&SHA256, &modulus).as_ref()[..8]));
}

#[test]
fn only_seeded_accounts_get_tokens_with_a_stable_sub() {
    let dir = TempDir::new();
    let idp = DevIdp::open(&dir.path().join("idp.key"), ISSUER.into(), vec!["Alice@Example.com".into()])
        .expect("open");
    assert_eq!(idp.accounts(), [ALICE]);
    assert_eq!(idp.issuer(), ISSUER);
    let error = idp.issue("mallory@example.com", AUDIENCE, HOUR, START).expect_err("refused");
    assert!(matches!(&error, DevIdpError::UnknownAccount(e) if e == "mallory@example.com"), "{error:?}");

    let claims = |token: &str| -> Value {
        serde_json::from_slice(&unb64(token.split('.').nth(1).expect("payload"))).expect("json")
    };
    let a = claims(&idp.issue(ALICE, AUDIENCE, HOUR, START).expect("issue"));
    let b = claims(&idp.issue(" ALICE@example.com", "x", HOUR, START + HOUR).expect("issue"));
    assert_eq!(a["sub"], b["sub"]);
    assert_eq!(a["exp"].as_i64(), Some(START.as_secs() + 3600));
    assert_eq!(a["email_verified"], true);
}

async fn post_login(client: &reqwest::Client, base: &str, body: &str) -> reqwest::Response {
    client
        .post(format!("{base}{}", dev::LOGIN_PATH))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .expect("login request")
}

#[tokio::test]
async fn the_router_issues_tokens_that_verify_against_its_jwks() {
    let dir = TempDir::new();
    let idp = DevIdp::open(
        &dir.path().join("idp.key"),
        ISSUER.into(),
        vec![ALICE.into(), "bob@example.com".into()],
    )
    .expect("open");
    let clock = Arc::new(VirtualClock::new(START));
    let app_clock: Arc<dyn Clock> = clock.clone();
    let addr = serve(dev::router(idp.clone(), AUDIENCE.into(), app_clock)).await;
    let base = format!("http://{addr}");
    let client = reqwest::Client::new();

    let response = client.get(format!("{base}{JWKS_PATH}")).send().await.expect("jwks request");
    assert_eq!(response.status(), 200);
    let cache_control = response.headers().get("cache-control").and_then(|v| v.to_str().ok());
    assert_eq!(cache_control, Some("public, max-age=300"));
    assert_eq!(response.json::<Value>().await.expect("json"), idp.jwks());

    let response = post_login(&client, &base, r#"{"email": "Alice@Example.com"}"#).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.expect("json");
    assert_eq!((&body["token_type"], &body["expires_in"]), (&json!("Bearer"), &json!(3600)));
    let token = body["id_token"].as_str().expect("id_token");

    let jwks = JwksCache::new(format!("{base}{JWKS_PATH}"), client.clone(), clock.clone());
    let v = verifier(&jwks, &clock, VerifierConfig::new(vec![ISSUER.into()], AUDIENCE.into()));
    let claims = v.verify(token).await.expect("verifies");
    assert_eq!((claims.email.as_str(), claims.iat), (ALICE, Some(START.as_secs())));

    let response = post_login(&client, &base, r#"{"email": "mallory@example.com"}"#).await;
    assert_eq!(response.status(), 404);
    let content_type = response.headers().get("content-type").and_then(|v| v.to_str().ok());
    assert_eq!(content_type, Some("application/problem+json"));
    let problem: Value = response.json().await.expect("json");
    assert_eq!(problem["type"], "urn:mapi:problem:not-found");
    assert_eq!(
        (&problem["title"], &problem["status"], &problem["code"]),
        (&json!("Not Found"), &json!(404), &json!("NOT_FOUND"))
    );
    assert_eq!(
        problem["detail"],
        "no development account mallory@example.com: use one of alice@example.com, bob@example.com"
    );

    for bad in ["", "{", r#"{"mail": "alice@example.com"}"#, r#"{"email": 7}"#] {
        let response = post_login(&client, &base, bad).await;
        assert_eq!(response.status(), 400, "{bad:?}");
        let problem: Value = response.json().await.expect("json");
        assert_eq!(
            (&problem["code"], &problem["type"]),
            (&json!("INVALID_ARGUMENT"), &json!("urn:mapi:problem:invalid-argument"))
        );
    }
}

/// The provider at a loopback address, its issuer under it as `mapi dev` mounts it.
async fn code_flow_provider() -> (String, DevIdp, Arc<VirtualClock>, TempDir) {
    let dir = TempDir::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let idp = DevIdp::open(&dir.path().join("idp.key"), format!("{base}/dev/idp"), vec![ALICE.into()])
        .expect("open");
    let clock = Arc::new(VirtualClock::new(START));
    let app_clock: Arc<dyn Clock> = clock.clone();
    let app = dev::router(idp.clone(), AUDIENCE.into(), app_clock);
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, idp, clock, dir)
}

/// Picks `email` at the authorization URL; the redirect's `code` and `state`.
async fn pick(http: &reqwest::Client, url: &str, email: &str) -> Result<(String, String), u16> {
    let page = http.get(url).send().await.expect("picker");
    if page.status() != 200 {
        return Err(page.status().as_u16());
    }
    let (endpoint, query) = url.split_once('?').expect("query");
    let answer = http
        .post(endpoint)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("{query}&email={}", mapi_oidc::code_flow::encode(email)))
        .send()
        .await
        .expect("authorize");
    if answer.status() != 303 {
        return Err(answer.status().as_u16());
    }
    let location = answer.headers()["location"].to_str().expect("location").to_owned();
    let param = |k: &str| {
        location.split(['?', '&']).find_map(|p| p.strip_prefix(&format!("{k}="))).expect("param").to_owned()
    };
    Ok((param("code"), param("state")))
}

#[tokio::test]
async fn the_code_flow_with_pkce_issues_a_token_with_the_nonce_once() {
    use mapi_oidc::code_flow::{self, Client, CodeFlowError, Request};
    let (base, _idp, clock, _dir) = code_flow_provider().await;
    let http =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    let issuer = format!("{base}/dev/idp");
    let discovery = code_flow::discover(&http, &format!("{issuer}{}", code_flow::DISCOVERY_PATH))
        .await
        .expect("discovery");
    assert_eq!(discovery.issuer, issuer);
    let redirect = format!("{base}/console/callback");
    let client = Client { id: AUDIENCE, secret: None, redirect_uri: &redirect };

    let request = Request::new().expect("request");
    let (code, state) = pick(&http, &request.authorization_url(&discovery, AUDIENCE, &redirect), ALICE)
        .await
        .expect("a code");
    assert_eq!(state, request.state, "the state comes back as sent");
    let wrong = code_flow::exchange(&http, &discovery, client, &code, "not-the-verifier").await;
    assert!(matches!(wrong, Err(CodeFlowError::Refused { status: 400, .. })), "{wrong:?}");
    let burnt = code_flow::exchange(&http, &discovery, client, &code, &request.verifier).await;
    assert!(matches!(burnt, Err(CodeFlowError::Refused { .. })), "a code presented once is gone: {burnt:?}");

    let request = Request::new().expect("request");
    let (code, _) = pick(&http, &request.authorization_url(&discovery, AUDIENCE, &redirect), ALICE)
        .await
        .expect("a code");
    let token =
        code_flow::exchange(&http, &discovery, client, &code, &request.verifier).await.expect("token");
    let jwks = JwksCache::new(format!("{issuer}/jwks.json"), http.clone(), clock.clone());
    let v = verifier(&jwks, &clock, VerifierConfig::new(vec![issuer.clone()], AUDIENCE.into()));
    let claims = v.verify(&token).await.expect("verifies");
    assert_eq!((claims.email.as_str(), claims.nonce.as_deref()), (ALICE, Some(request.nonce.as_str())));
    let again = code_flow::exchange(&http, &discovery, client, &code, &request.verifier).await;
    assert!(again.is_err(), "a code is exchanged once");
}

#[tokio::test]
async fn the_code_flow_refuses_other_sites_no_pkce_and_unknown_accounts() {
    use mapi_oidc::code_flow::{self, Request};
    let (base, _idp, _clock, _dir) = code_flow_provider().await;
    let http =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    let discovery = code_flow::discover(&http, &format!("{base}/dev/idp{}", code_flow::DISCOVERY_PATH))
        .await
        .expect("discovery");
    let request = Request::new().expect("request");
    let elsewhere = request.authorization_url(&discovery, AUDIENCE, "https://evil.example/callback");
    assert_eq!(pick(&http, &elsewhere, ALICE).await, Err(400), "no code for another site");
    let own = request.authorization_url(&discovery, AUDIENCE, &format!("{base}/console/callback"));
    let without_pkce = own.replace("code_challenge_method=S256", "code_challenge_method=plain");
    assert_eq!(pick(&http, &without_pkce, ALICE).await, Err(400), "PKCE S256 is required");
    let other_client = own.replace(&format!("client_id={AUDIENCE}"), "client_id=someone-else");
    assert_eq!(pick(&http, &other_client, ALICE).await, Err(400), "only this platform's client");
    assert_eq!(pick(&http, &own, "mallory@example.com").await, Err(400), "only its own accounts");
}
