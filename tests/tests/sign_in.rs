//! Sign-in with stock clients: a standard OpenID Connect client library
//! completes the authorization-code flow against the development identity
//! provider, and the ID token it gets signs a person in to the platform.

use std::process::Command;

use mapi_tests::TestPlatform;
use serde_json::Value;

/// Authlib, a widely used Python OAuth/OIDC client, and what it needs, pinned.
const AUTHLIB: &str = "Authlib==1.3.2\nrequests==2.32.3\ncryptography==43.0.3\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stock_oidc_client_library_signs_in_against_the_dev_identity_provider() {
    let p = TestPlatform::start(&[]).await;
    let dir = mapi_tests::python_tools::cache_dir("authlib", AUTHLIB);
    let python = mapi_tests::python_tools::venv(&dir, AUTHLIB, |_| Ok(())).expect("Authlib installs");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/oidc_stock_client.py");
    let issuer = format!("{}/dev/idp", p.platform.url);
    let audience = p.platform.state.config.oidc_audience.clone();
    let redirect = format!("{}/console/callback", p.platform.url);
    let args = [script.to_owned(), issuer, audience, redirect, "dev@dev.local".to_owned()];
    let out = tokio::task::spawn_blocking(move || Command::new(python).args(args).output())
        .await
        .expect("join")
        .expect("run the client");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the library did not complete sign-in:\n{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["token_type"], "Bearer", "{v}");
    assert_eq!(
        (v["has_access_token"].as_bool(), v["nonce_matches"].as_bool()),
        (Some(true), Some(true)),
        "{v}"
    );
    assert_eq!(v["email"], "dev@dev.local");
    assert!(v["expires_in"].as_u64().is_some_and(|s| s > 0), "{v}");
    assert_eq!(
        (v["replay_status"].as_u64(), v["replay_error"].as_str()),
        (Some(400), Some("invalid_grant")),
        "{v}"
    );
    assert_eq!(v["replay_cache_control"], "no-store", "an error answer is not cached either");

    // The ID token the library got is a session's credential on the platform.
    let id_token = v["id_token"].as_str().expect("id_token");
    let (status, body) = p.call(id_token, reqwest::Method::POST, "/v1/sessions", None).await;
    assert_eq!(status, 200, "{body}");
}
