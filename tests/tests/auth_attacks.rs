//! Attacks on credentials: expired, revoked, tampered and misplaced API
//! tokens; session tokens with `alg: none`, HS256 keyed with the RSA public
//! key, the wrong audience or issuer, an unverified e-mail, a foreign key.
//! Every one is refused and counted; known tokens are audited one by one,
//! anonymous refusals once per source a minute with a summary of the rest.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use mapi_tests::TestPlatform;
use reqwest::Method;
use serde_json::{Value, json};

fn jwt_parts(header: &Value, claims: &Value) -> String {
    format!("{}.{}", B64.encode(header.to_string()), B64.encode(claims.to_string()))
}

/// Signs `claims` RS256 with the dev identity provider's own key, read from
/// its key file: a token the platform's keys verify, saying what we want.
fn sign_with_dev_key(p: &TestPlatform, kid: &str, claims: &Value) -> String {
    use aws_lc_rs::rand::SystemRandom;
    use aws_lc_rs::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
    let der = std::fs::read(p.platform.state.config.home.join("dev-idp-key.der")).expect("dev key");
    let key = RsaKeyPair::from_pkcs8(&der).expect("pkcs8");
    let input = jwt_parts(&json!({"alg": "RS256", "typ": "JWT", "kid": kid}), claims);
    let mut sig = vec![0u8; key.public_modulus_len()];
    key.sign(&RSA_PKCS1_SHA256, &SystemRandom::new(), input.as_bytes(), &mut sig).expect("sign");
    format!("{input}.{}", B64.encode(sig))
}

fn hs256(key: &[u8], header: &Value, claims: &Value) -> String {
    use aws_lc_rs::hmac;
    let input = jwt_parts(header, claims);
    let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), input.as_bytes());
    format!("{input}.{}", B64.encode(tag.as_ref()))
}

async fn status(p: &TestPlatform, token: &str, path: &str) -> (u16, Value) {
    p.call(token, Method::GET, path, None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_and_stale_credentials_are_refused_and_audited() {
    let p = TestPlatform::start(&[]).await;
    let state = &p.platform.state;
    let runs = format!("{}/runs", p.project_path());
    let now = state.clock.now().as_secs();
    let issuer = state.config.session_issuer().expect("dev issuer");
    let jwks: Value =
        p.http.get(p.url("/dev/idp/jwks.json")).send().await.expect("jwks").json().await.expect("json");
    let kid = jwks["keys"][0]["kid"].as_str().expect("kid").to_owned();
    let n = B64.decode(jwks["keys"][0]["n"].as_str().expect("n")).expect("n bytes");
    let good = json!({"iss": issuer, "sub": "x", "aud": "mapi", "email": "analyst@dev.local", "email_verified": true,
                      "iat": now, "exp": now + 600});

    // A correctly signed session works, so the refusals below are about the attack.
    let fine = sign_with_dev_key(&p, &kid, &good);
    assert_eq!(status(&p, &fine, "/v1/whoami").await.0, 200);

    let mut attacks: Vec<(&str, String)> = vec![
        ("alg none", format!("{}.", jwt_parts(&json!({"alg": "none", "typ": "JWT", "kid": kid}), &good))),
        ("HS256 keyed with the RSA modulus", hs256(&n, &json!({"alg": "HS256", "kid": kid}), &good)),
        (
            "HS256 keyed with the JWKS text",
            hs256(jwks.to_string().as_bytes(), &json!({"alg": "HS256", "kid": kid}), &good),
        ),
        ("wrong audience", sign_with_dev_key(&p, &kid, &with(&good, &[("aud", json!("someone-else"))]))),
        (
            "wrong issuer",
            sign_with_dev_key(&p, &kid, &with(&good, &[("iss", json!("https://evil.example"))])),
        ),
        ("unverified e-mail", sign_with_dev_key(&p, &kid, &with(&good, &[("email_verified", json!(false))]))),
        (
            "expired",
            sign_with_dev_key(
                &p,
                &kid,
                &with(&good, &[("exp", json!(now - 3600)), ("iat", json!(now - 7200))]),
            ),
        ),
        ("tampered payload", {
            let t = sign_with_dev_key(&p, &kid, &good);
            let mut parts: Vec<String> = t.split('.').map(str::to_owned).collect();
            parts[1] = B64.encode(with(&good, &[("email", json!("admin@dev.local"))]).to_string());
            parts.join(".")
        }),
    ];
    attacks.push(("unknown key id", sign_with_dev_key(&p, "not-a-kid", &good)));
    for (what, token) in &attacks {
        let (s, body) = status(&p, token, &runs).await;
        assert_eq!((s, body["code"].as_str()), (401, Some("UNAUTHENTICATED")), "{what}: {body}");
    }

    // API tokens: tampered, revoked, expired, and used outside their project.
    let dev = p.token().to_owned();
    let mut tampered = dev.clone();
    let last = tampered.pop().expect("char");
    tampered.push(if last == '0' { '1' } else { '0' });
    assert_eq!(status(&p, &tampered, &runs).await.0, 401, "tampered secret");

    let session = p.login("dev@dev.local").await;
    let (s, created) = p
        .call(
            &session,
            Method::POST,
            &format!("{}/tokens", p.project_path()),
            Some(json!({"name": "short", "scopes": ["runs:create"]})),
        )
        .await;
    assert_eq!(s, 201, "{created}");
    let secret = created["secret"].as_str().expect("secret").to_owned();
    let id = created["token"]["id"].as_str().expect("id").to_owned();
    assert_eq!(status(&p, &secret, &runs).await.0, 200);
    let other_project = "/v1/tenants/dev/projects/other/runs";
    let (s, _) = p
        .call(
            &session,
            Method::POST,
            "/v1/tenants/dev/projects",
            Some(json!({"id": "other", "name": "Other"})),
        )
        .await;
    assert_eq!(s, 201);
    let (s, body) = status(&p, &secret, other_project).await;
    assert_eq!(
        (s, body["code"].as_str()),
        (403, Some("FORBIDDEN")),
        "a token is bound to its project: {body}"
    );
    let (s, _) = p.call(&session, Method::DELETE, &format!("{}/tokens/{id}", p.project_path()), None).await;
    assert_eq!(s, 204);
    assert_eq!(status(&p, &secret, &runs).await.0, 401, "revoked: refused at the next request");

    // Expired: a token whose expiry has passed (written as the store would hold it).
    let expired_secret = mapi_identity::new_token().expect("secret");
    let doc = mapi_schema::TokenDoc {
        hash: state.pepper.hash(&expired_secret),
        tenant: mapi_domain::TenantId::parse("dev").expect("t"),
        project: mapi_domain::ProjectId::parse("default").expect("p"),
        user: mapi_domain::UserId::parse("dev@dev.local").expect("u"),
        name: "old".into(),
        scopes: vec![mapi_access::Scope::Admin],
        created_at: state.clock.now() - Duration::from_secs(200 * 86_400),
        expires_at: state.clock.now() - Duration::from_secs(86_400),
        revoked_at: None,
        revoked_by: None,
        rate_limit_per_minute: None,
        budget: None,
    };
    let key = mapi_schema::Doc::key(&doc).expect("key");
    mapi_store::StoreExt::create(&*state.store, &key, mapi_store::encode(&doc).expect("fields"))
        .await
        .expect("insert");
    let (s, body) = status(&p, &expired_secret, &runs).await;
    assert_eq!(s, 401);
    assert!(body["detail"].as_str().unwrap_or_default().contains("expired"), "{body}");

    // Every refusal is counted. An anonymous one (no such token, a session
    // that does not verify) is audited once per source a minute, with a
    // summary counting the rest once the minute is over; a refusal of a
    // known token is audited one by one.
    let anonymous = attacks.len() + 1;
    mapi_identity::refusals::flush(state, state.clock.now() + Duration::from_secs(60)).await;
    let metrics = p.http.get(p.url("/metrics")).send().await.expect("metrics").text().await.expect("text");
    let counted: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("mapi_auth_refused_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(counted as usize, anonymous, "{metrics}");
    let operator = p.login("admin@dev.local").await;
    let (s, log) = p.call(&operator, Method::GET, "/v1/admin/audit?page_size=200&outcome=denied", None).await;
    assert_eq!(s, 200, "{log}");
    let entries = log["items"].as_array().expect("items");
    let count = |action: &str, needle: &str| {
        entries
            .iter()
            .filter(|e| e["action"] == action && e["detail"].as_str().unwrap_or_default().contains(needle))
            .count()
    };
    let firsts = count("auth.session_refused", "") + count("token.use_failed", "not valid");
    let summarised: usize = entries
        .iter()
        .filter(|e| e["action"] == "auth.refused_summary")
        .filter_map(|e| e["detail"].as_str()?.split(' ').next()?.parse::<usize>().ok())
        .sum();
    assert!(firsts >= 1 && firsts < anonymous, "one entry per source a minute, not per refusal: {log:#}");
    assert_eq!(firsts + summarised, anonymous, "the summaries count the rest: {log:#}");
    assert!(count("token.use_failed", "revoked") >= 1, "revoked");
    assert!(count("token.use_failed", "expired") >= 1, "expired");
    assert!(
        entries.iter().any(|e| e["action"] == "run.read" && e["problem"] == "FORBIDDEN"),
        "the misplaced token"
    );
    assert!(
        entries.iter().all(|e| e["ip_hash"].as_str().is_some_and(|h| h.len() == 16)),
        "IPs are kept as keyed hashes only"
    );
}

/// `v` with some claims replaced.
fn with(v: &Value, changes: &[(&str, Value)]) -> Value {
    let mut out = v.clone();
    for (k, x) in changes {
        out[*k] = x.clone();
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_over_its_per_minute_limit_waits_for_the_next_minute() {
    let p = TestPlatform::start(&[]).await;
    let session = p.login("dev@dev.local").await;
    let body = json!({"name": "limited", "scopes": ["runs:create"], "rate_limit_per_minute": 3});
    let (s, created) =
        p.call(&session, Method::POST, &format!("{}/tokens", p.project_path()), Some(body)).await;
    assert_eq!(s, 201, "{created}");
    let secret = created["secret"].as_str().expect("secret").to_owned();
    let runs = p.url(&format!("{}/runs", p.project_path()));
    let minute = || p.platform.state.clock.now().as_secs() / 60;
    // A burst of four inside one UTC minute: three pass, the fourth is refused.
    // A burst that straddles a minute boundary proves nothing, so try again.
    for _ in 0..3 {
        let start = minute();
        let mut statuses = Vec::new();
        let mut retry_after = None;
        for _ in 0..4 {
            let r = p.http.get(&runs).bearer_auth(&secret).send().await.expect("get");
            statuses.push(r.status().as_u16());
            if r.status() == 429 {
                retry_after =
                    r.headers().get("retry-after").and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
            }
        }
        if minute() != start {
            continue;
        }
        assert_eq!(statuses, [200, 200, 200, 429]);
        assert!(
            retry_after.is_some_and(|s| (1..=60).contains(&s)),
            "Retry-After until the minute ends: {retry_after:?}"
        );
        return;
    }
    panic!("three bursts in a row straddled a minute boundary");
}

/// A scope named twice grants nothing more, and every request a token
/// makes reads its scopes: 10,000 copies of one scope mint a token holding
/// it once, and more than 64 distinct scopes are refused with the limit named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scopes_are_kept_once_and_bounded() {
    let p = TestPlatform::start(&[]).await;
    let session = p.login("dev@dev.local").await;
    let path = format!("{}/tokens", p.project_path());
    // At most 64 scopes are given (what the API document's maxItems says),
    // copies counted; a scope given more than once is kept once.
    let flood = json!({"name": "flood", "scopes": vec!["runs:create"; 10_000]});
    let (s, refused) = p.call(&session, Method::POST, &path, Some(flood)).await;
    assert_eq!((s, &refused["code"]), (400, &json!("INVALID_ARGUMENT")), "{refused}");
    let detail = refused["detail"].as_str().expect("detail");
    assert!(detail.contains("10000 scopes") && detail.contains("at most 64"), "{detail}");
    let copies = json!({"name": "copies", "scopes": vec!["runs:create"; 64]});
    let (s, created) = p.call(&session, Method::POST, &path, Some(copies)).await;
    assert_eq!(s, 201, "{created}");
    let scopes = created["token"]["scopes"].as_array().expect("scopes");
    assert_eq!((scopes.len(), &scopes[0]), (1, &json!("runs:create")), "each scope once");
    let (s, list) = p.call(&session, Method::GET, &path, None).await;
    assert_eq!(s, 200, "{list}");
    let stored = list["tokens"].as_array().expect("tokens");
    let mine = stored.iter().find(|t| t["name"] == "copies").expect("the token");
    assert_eq!(mine["scopes"], json!(["runs:create"]), "stored once: {mine}");

    let many: Vec<String> = (0..65).map(|i| format!("score:m{i}")).collect();
    let (s, refused) =
        p.call(&session, Method::POST, &path, Some(json!({"name": "many", "scopes": many}))).await;
    assert_eq!((s, &refused["code"]), (400, &json!("INVALID_ARGUMENT")), "{refused}");
    let detail = refused["detail"].as_str().expect("detail");
    assert!(detail.contains("65 scopes") && detail.contains("at most 64"), "{detail}");
    let sixty_four: Vec<String> = (0..64).map(|i| format!("score:m{i}")).collect();
    let (s, b) =
        p.call(&session, Method::POST, &path, Some(json!({"name": "most", "scopes": sixty_four}))).await;
    assert_eq!(s, 201, "exactly at the limit: {b}");
    p.platform.shutdown().await;
}
