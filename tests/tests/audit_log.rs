//! The audit log as people read it: `items` newest first, each with `ts`
//! and its resource as kind and id; `?limit=` (the same as `page_size`),
//! filters by project, actor, action, outcome and time; another tenant's
//! log refused.

use mapi_tests::TestPlatform;
use reqwest::Method;
use serde_json::{Value, json};

async fn log(p: &TestPlatform, token: &str, query: &str) -> (u16, Value) {
    p.call(token, Method::GET, &format!("/v1/tenants/dev/audit{query}"), None).await
}

#[tokio::test]
async fn the_audit_log_reads_as_the_guide_shows_it() {
    let accounts = "admin@dev.local,dev@dev.local,viewer@dev.local,owner@other.test";
    let p = TestPlatform::start(&[("MAPI_DEV_ACCOUNTS", accounts)]).await;
    let admin = p.login("dev@dev.local").await;
    let since = p.platform.state.clock.now().to_rfc3339();
    for name in ["a", "b", "c"] {
        let body = json!({"name": format!("audit-{name}"), "scopes": ["models:read"]});
        let (s, t) =
            p.call(&admin, Method::POST, "/v1/tenants/dev/projects/default/tokens", Some(body)).await;
        assert_eq!(s, 201, "{t}");
    }

    let (s, page) = log(&p, &admin, "?limit=2&action=token.create").await;
    assert_eq!(s, 200, "{page}");
    let items = page["items"].as_array().expect("items");
    assert_eq!(items.len(), 2, "{page}");
    assert!(page["next_page_token"].is_string(), "a third entry waits on the next page: {page}");
    let ts: Vec<&str> = items.iter().map(|e| e["ts"].as_str().expect("ts")).collect();
    assert!(ts[0] >= ts[1], "newest first: {ts:?}");
    for e in items {
        assert_eq!(e["resource_kind"], "tokens", "{e}");
        assert!(e["resource_id"].as_str().is_some_and(|id| !id.is_empty()), "{e}");
        assert_eq!(e["resource"], format!("tokens/{}", e["resource_id"].as_str().unwrap_or("")));
        assert_eq!(e["actor"], "dev@dev.local");
        assert_eq!(e["outcome"], "success");
        assert!(e.get("at").is_none() && e.get("entries").is_none(), "one name for each field: {e}");
    }

    // The same page by its other name; both names, disagreeing, are refused in words.
    let (s, same) = log(&p, &admin, "?page_size=2&action=token.create").await;
    assert_eq!((s, &same["items"]), (200, &page["items"]));
    let (s, both) = log(&p, &admin, "?page_size=3&limit=2").await;
    assert_eq!((s, both["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{both}");
    assert!(both["detail"].as_str().unwrap_or("").contains("page_size or limit"), "{both}");
    let (s, zero) = log(&p, &admin, "?limit=0").await;
    assert_eq!(s, 400, "{zero}");

    // Filters: by time, actor, project and outcome, each narrowing the same set.
    let q = format!("?action=token.create&since={}", urlencode(&since));
    let (s, after) = log(&p, &admin, &q).await;
    assert_eq!((s, after["items"].as_array().map(Vec::len)), (200, Some(3)), "{after}");
    let (_, by_other) = log(&p, &admin, "?action=token.create&actor=viewer%40dev.local").await;
    assert_eq!(by_other["items"].as_array().map(Vec::len), Some(0), "{by_other}");
    let (_, denied) = log(&p, &admin, "?action=token.create&outcome=denied").await;
    assert_eq!(denied["items"].as_array().map(Vec::len), Some(0), "{denied}");
    let (_, elsewhere) = log(&p, &admin, "?action=token.create&project=nope").await;
    assert_eq!(elsewhere["items"].as_array().map(Vec::len), Some(0), "{elsewhere}");
    let (s, bad) = log(&p, &admin, "?outcome=maybe").await;
    assert_eq!(s, 400, "{bad}");

    // A tenant admin reads only their own tenant's log.
    let operator = p.login("admin@dev.local").await;
    let other = p.create_tenant(&operator, "other", "verified").await;
    let (s, own) = p.call(&other, Method::GET, "/v1/tenants/other/audit?limit=1", None).await;
    assert_eq!((s, own["items"].as_array().map(Vec::len)), (200, Some(1)), "{own}");
    let (s, foreign) = p.call(&admin, Method::GET, "/v1/tenants/other/audit", None).await;
    assert!(s == 403 || s == 404, "{s} {foreign}");
    let (s, foreign) = p.call(&other, Method::GET, "/v1/tenants/dev/audit", None).await;
    assert!(s == 403 || s == 404, "{s} {foreign}");
}

fn urlencode(s: &str) -> String {
    s.replace(':', "%3A").replace('+', "%2B")
}
