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

/// Audit entries past `MAPI_AUDIT_RETENTION_DAYS` and webhook messages past
/// `MAPI_DELIVERY_RETENTION_DAYS` are deleted by the housekeeper, and only
/// those; a call reads what it deletes and no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_entries_and_webhook_messages_past_their_retention_are_deleted() {
    use mapi_schema::{AuditDoc, DeliveryDoc, Doc};
    use mapi_store::{Precondition, Query, StoreExt};
    let p = TestPlatform::start_with(
        &[("MAPI_WEBHOOKS_ALLOW_LOOPBACK", "true")],
        mapi_tests::Options { background: false, ..mapi_tests::Options::default() },
    )
    .await;
    let state = &p.platform.state;
    let store = &*state.store;
    // Genuine records: a webhook's creation (audited) and its messages (cancelled runs).
    let url = format!("http://127.0.0.1:{}/", mapi_tests::free_port());
    let hooks = format!("{}/webhooks", p.project_path());
    let (s, made) =
        p.call(p.token(), Method::POST, &hooks, Some(json!({"url": url, "events": ["run.cancelled"]}))).await;
    assert_eq!(s, 201, "{made}");
    let dataset = p.upload("x,y\n1,2\n2,4\n3,7\n").await;
    for _ in 0..4 {
        let run =
            p.submit(json!({"method": "tabular.linear", "dataset": dataset, "params": {"y": "y"}})).await;
        p.cancel(p.token(), &run).await;
    }
    mapi_reconcile_tick::webhooks::sweep(state).await.expect("sweep");
    // Age half of each: rewrite their time as the retention's past.
    let age = |collection: &'static str, field: &'static str, days: u64| async move {
        let docs = store.query(&Query::new(collection), None).await.expect("query");
        let old = (state.clock.now() - std::time::Duration::from_secs(days * 86_400)).to_rfc3339();
        let aged = docs.len() / 2;
        for d in &docs[..aged] {
            let mut fields = d.fields.clone();
            fields.insert(field.into(), json!(old));
            store.put(&d.key, fields, Precondition::None).await.expect("age");
        }
        (aged, docs.len())
    };
    let (old_audit, all_audit) = age(AuditDoc::COLLECTION, "at", 401).await;
    let (old_messages, all_messages) = age(DeliveryDoc::COLLECTION, "created_at", 31).await;
    assert!(old_audit >= 1 && old_messages >= 2, "{all_audit} audit entries, {all_messages} messages");

    let internal = state.config.secrets.internal_token.clone();
    let counts = || state.local.store.as_ref().expect("the SQLite store").counts();
    let before = counts().documents_read;
    let (s, done) = p.call(&internal, Method::POST, mapi_tasks::housekeep::HOUSEKEEP_PATH, None).await;
    assert_eq!(s, 200, "{done}");
    let read = counts().documents_read - before;
    assert_eq!(done["deleted_audit_entries"].as_u64(), Some(old_audit as u64), "{done}");
    assert_eq!(done["deleted_deliveries"].as_u64(), Some(old_messages as u64), "{done}");
    assert!(read <= (old_audit + old_messages) as u64 + 2, "{read} documents read to delete {done}");
    let left = |c| async move { store.query(&Query::new(c), None).await.expect("query").len() };
    // The call itself audits nothing; the entries younger than the retention stay.
    assert_eq!(left(AuditDoc::COLLECTION).await, all_audit - old_audit);
    assert_eq!(left(DeliveryDoc::COLLECTION).await, all_messages - old_messages);
    let (s, again) = p.call(&internal, Method::POST, mapi_tasks::housekeep::HOUSEKEEP_PATH, None).await;
    assert_eq!(
        (s, again["deleted_audit_entries"].as_u64(), again["deleted_deliveries"].as_u64()),
        (200, Some(0), Some(0))
    );
}
