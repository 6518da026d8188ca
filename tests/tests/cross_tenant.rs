//! Nothing is enumerable across tenants: for every route that takes an id,
//! a caller of tenant B asking for tenant A's things gets exactly the answer
//! a missing thing gets (same status, same code, same words but the id).

use mapi_tests::TestPlatform;
use reqwest::Method;
use serde_json::{Value, json};

/// The answer with the ids in it replaced, so a missing and a hidden thing compare equal.
fn normalized((status, body): (u16, Value), ids: &[&str]) -> (u16, String, String) {
    let mut detail = body["detail"].as_str().unwrap_or_default().to_owned();
    for id in ids {
        detail = detail.replace(id, "<id>");
    }
    (status, body["code"].as_str().unwrap_or_default().to_owned(), detail)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_ids_answer_as_missing_ones() {
    let p =
        TestPlatform::start(&[("MAPI_DEV_ACCOUNTS", "admin@dev.local,dev@dev.local,owner@other.test")]).await;
    // Tenant A is `dev`; tenant B is `other`, whose admin (`owner@other.test`) is Eve.
    let operator = p.login("admin@dev.local").await;
    let eve = p.create_tenant(&operator, "other", "internal").await;

    // Tenant A's things.
    let ds = p.upload("x,y\n1,2\n2,3\n3,5\n").await;
    let run = p.submit(json!({"method": "describe", "dataset": ds})).await;
    let dev = p.login("dev@dev.local").await;
    let (_, tok) = p
        .call(
            &dev,
            Method::POST,
            "/v1/tenants/dev/projects/default/tokens",
            Some(json!({"name": "t", "scopes": ["models:read"]})),
        )
        .await;
    let token_id = tok["token"]["id"].as_str().expect("token id").to_owned();

    let missing_run = "run_01arz3ndektsv4rrffq69g5fav";
    let cases: Vec<(Method, String, String, Option<Value>)> = vec![
        (Method::GET, format!("/v1/runs/{run}"), format!("/v1/runs/{missing_run}"), None),
        (Method::POST, format!("/v1/runs/{run}/cancel"), format!("/v1/runs/{missing_run}/cancel"), None),
        (Method::GET, format!("/v1/runs/{run}/logs"), format!("/v1/runs/{missing_run}/logs"), None),
        (
            Method::GET,
            "/v1/tenants/dev/projects/default/runs".into(),
            "/v1/tenants/nosuch/projects/default/runs".into(),
            None,
        ),
        (
            Method::GET,
            "/v1/tenants/dev/projects/default/datasets".into(),
            "/v1/tenants/nosuch/projects/default/datasets".into(),
            None,
        ),
        (
            Method::POST,
            "/v1/tenants/dev/projects/default/runs".into(),
            "/v1/tenants/nosuch/projects/default/runs".into(),
            Some(json!({"method": "describe", "dataset": ds})),
        ),
        (Method::GET, "/v1/tenants/dev".into(), "/v1/tenants/nosuch".into(), None),
        (Method::GET, "/v1/tenants/dev/projects".into(), "/v1/tenants/nosuch/projects".into(), None),
        (
            Method::GET,
            "/v1/tenants/dev/projects/default".into(),
            "/v1/tenants/nosuch/projects/default".into(),
            None,
        ),
        (Method::GET, "/v1/tenants/dev/members".into(), "/v1/tenants/nosuch/members".into(), None),
        (
            Method::GET,
            "/v1/tenants/dev/projects/default/members".into(),
            "/v1/tenants/nosuch/projects/default/members".into(),
            None,
        ),
        (
            Method::GET,
            "/v1/tenants/dev/projects/default/tokens".into(),
            "/v1/tenants/nosuch/projects/default/tokens".into(),
            None,
        ),
        (
            Method::DELETE,
            format!("/v1/tenants/dev/projects/default/tokens/{token_id}"),
            "/v1/tenants/nosuch/projects/default/tokens/000000000000".into(),
            None,
        ),
        (
            Method::DELETE,
            "/v1/tenants/dev/projects/default/members/dev@dev.local".into(),
            "/v1/tenants/nosuch/projects/default/members/dev@dev.local".into(),
            None,
        ),
        (Method::GET, "/v1/tenants/dev/audit".into(), "/v1/tenants/nosuch/audit".into(), None),
        (
            Method::POST,
            "/v1/tenants/dev/projects/default/access-checks".into(),
            "/v1/tenants/nosuch/projects/default/access-checks".into(),
            Some(json!({"resource": "run", "action": "read"})),
        ),
    ];
    let ids = [run.as_str(), missing_run, "dev", "nosuch", &token_id, "000000000000"];
    for (method, hidden, missing, body) in &cases {
        let a = normalized(p.call(&eve, method.clone(), hidden, body.clone()).await, &ids);
        let b = normalized(p.call(&eve, method.clone(), missing, body.clone()).await, &ids);
        assert_eq!(a.0, 404, "{method} {hidden}: {a:?}");
        assert_eq!(a, b, "{method} {hidden} answers differently from {missing}");
    }
    // And tenant A's own caller still sees its things.
    assert_eq!(p.call(&dev, Method::GET, &format!("/v1/runs/{run}"), None).await.0, 200);
    eprintln!("cross-tenant: {} routes", cases.len());
}
