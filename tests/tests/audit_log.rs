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

/// A tenant's quota policy sets its own audit and delivery retention: the
/// tenant's records follow it, shorter or longer than the platform's, and
/// another tenant's and the platform's own entries keep the platform's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_own_retention_ages_its_records_and_no_one_elses() {
    use mapi_schema::{AuditDoc, DeliveryDoc, Doc};
    use mapi_store::{Precondition, Query, StoreExt};
    let p = TestPlatform::start_with(
        &[("MAPI_WEBHOOKS_ALLOW_LOOPBACK", "true"), ("MAPI_DEV_ACCOUNTS", "admin@dev.local,dev@dev.local")],
        mapi_tests::Options { background: false, ..mapi_tests::Options::default() },
    )
    .await;
    let state = &p.platform.state;
    let store = &*state.store;
    let operator = p.login("admin@dev.local").await;
    // 0 would delete the tenant's records at the next housekeeping: refused, naming the field.
    for field in ["audit_retention_days", "delivery_retention_days"] {
        let (s, problem) =
            p.call(&operator, Method::PUT, "/v1/admin/quotas/dev", Some(json!({field: 0}))).await;
        assert_eq!((s, problem["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{problem}");
        assert!(problem["detail"].as_str().unwrap_or_default().contains(field), "{problem}");
    }
    // dev keeps audit entries 10 days (shorter than the platform's 400) and
    // webhook messages 90 days (longer than the platform's 30).
    let policy = json!({"audit_retention_days": 10, "delivery_retention_days": 90});
    let (s, limits) = p.call(&operator, Method::PUT, "/v1/admin/quotas/dev", Some(policy)).await;
    assert_eq!(s, 200, "{limits}");
    assert_eq!(
        (limits["audit_retention_days"].as_u64(), limits["delivery_retention_days"].as_u64()),
        (Some(10), Some(90))
    );
    let url = format!("http://127.0.0.1:{}/", mapi_tests::free_port());
    let hooks = format!("{}/webhooks", p.project_path());
    let (s, made) =
        p.call(p.token(), Method::POST, &hooks, Some(json!({"url": url, "events": ["run.cancelled"]}))).await;
    assert_eq!(s, 201, "{made}");
    let dataset = p.upload("x,y\n1,2\n2,4\n3,7\n").await;
    let run = p.submit(json!({"method": "tabular.linear", "dataset": dataset, "params": {"y": "y"}})).await;
    p.cancel(p.token(), &run).await;
    mapi_reconcile_tick::webhooks::sweep(state).await.expect("sweep");
    // Every record is made older: audit entries 11 days, messages 31 days.
    let age = |collection: &'static str, field: &'static str, days: u64| async move {
        let old = (state.clock.now() - std::time::Duration::from_secs(days * 86_400)).to_rfc3339();
        let mut by_tenant = std::collections::BTreeMap::<String, usize>::new();
        for d in store.query(&Query::new(collection), None).await.expect("query") {
            let mut fields = d.fields.clone();
            fields.insert(field.into(), json!(old));
            store.put(&d.key, fields, Precondition::None).await.expect("age");
            let tenant = d.fields.get("tenant").and_then(|t| t.as_str()).unwrap_or("(platform)").to_owned();
            *by_tenant.entry(tenant).or_default() += 1;
        }
        by_tenant
    };
    let audit = age(AuditDoc::COLLECTION, "at", 11).await;
    let messages = age(DeliveryDoc::COLLECTION, "created_at", 31).await;
    let devs_audit = audit.get("dev").copied().unwrap_or_default();
    assert!(devs_audit >= 2 && audit.len() >= 2, "dev's and others' audit entries: {audit:?}");
    assert!(messages.get("dev").copied().unwrap_or_default() >= 1, "{messages:?}");
    let internal = state.config.secrets.internal_token.clone();
    let (s, done) = p.call(&internal, Method::POST, mapi_tasks::housekeep::HOUSEKEEP_PATH, None).await;
    assert_eq!(s, 200, "{done}");
    // dev's audit entries are past its 10 days; everyone else's are within 400.
    assert_eq!(done["deleted_audit_entries"].as_u64(), Some(devs_audit as u64), "{done} of {audit:?}");
    // dev's messages are within its 90 days although past the platform's 30.
    assert_eq!(done["deleted_deliveries"].as_u64(), Some(0), "{done}");
    let left = store.query(&Query::new(AuditDoc::COLLECTION), None).await.expect("query");
    assert!(left.iter().all(|d| d.fields.get("tenant").and_then(|t| t.as_str()) != Some("dev")));
    assert_eq!(left.len(), audit.values().sum::<usize>() - devs_audit);
}
