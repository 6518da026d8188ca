//! A tenant's end, over HTTP on the SQLite store: an export built by its
//! task (a manifest of parts whose signed URLs download the tenant's
//! documents and objects, no other tenant's), a deletion that hides the
//! tenant at once and can be cancelled within its grace period, and the
//! purge after it (pushed by the tick in virtual time): afterwards no
//! collection holds anything of the tenant but its tombstone, the
//! certificate and the kept ledger and audit entries, with every e-mail
//! gone from them, and its model servers are deleted (another tenant's
//! stay); a purge killed after its first pages goes on where it
//! stopped to the same certificate, and a further delivery changes nothing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use mapi_clock::VirtualClock;
use mapi_domain::{TenantId, Timestamp};
use mapi_store::{Document, Query, ReadRecord, Store, StoreError, TxnId, Version, Write};
use mapi_tests::{Options, TestPlatform};
use reqwest::Method;
use serde_json::{Value, json};

const ACCOUNTS: &str = "admin@dev.local,dev@dev.local,owner@acme.test,runner@acme.test,owner@other.test";
/// The e-mails that name people in the tenant's entries.
const EMAILS: [&str; 3] = ["owner@acme.test", "runner@acme.test", "admin@dev.local"];
const GRACE: Duration = Duration::from_secs(604_800);

struct World {
    p: TestPlatform,
    clock: Arc<VirtualClock>,
    operator: String,
    admin: String,
    runner: String,
    internal: String,
    dataset: String,
    run: String,
    dev_run: String,
}

async fn world() -> World {
    let clock = Arc::new(VirtualClock::new(Timestamp::from_secs(1_800_000_000)));
    let executor = Arc::new(mapi_executor::scripted::ScriptedExecutor::default());
    let options =
        Options { background: false, executor: Some(executor), clock: clock.clone(), ..Default::default() };
    let env = [("MAPI_DEV_ACCOUNTS", ACCOUNTS), ("MAPI_WEBHOOKS_ALLOW_LOOPBACK", "true")];
    let p = TestPlatform::start_with(&env, options).await;
    let operator = p.login("admin@dev.local").await;
    let admin = p.create_tenant(&operator, "acme", "verified").await;
    let member = json!({"email": "runner@acme.test", "role": "runner"});
    let (s, b) = p.call(&admin, Method::POST, "/v1/tenants/acme/members", Some(member)).await;
    assert_eq!(s, 201, "{b}");
    let runner = p.login("runner@acme.test").await;
    let dataset = p.upload_as(&admin, "/v1/tenants/acme/projects/default", "x,y\n1,2\n2,4\n3,7\n").await;
    let spec = json!({"method": "tabular.linear", "dataset": dataset, "params": {"y": "y"}, "class": "M", "timeout_s": 900});
    let (s, run) = p.call(&admin, Method::POST, "/v1/tenants/acme/projects/default/runs", Some(spec)).await;
    assert_eq!(s, 201, "{run}");
    let run = run["id"].as_str().expect("run id").to_owned();
    let metrics = json!({"metrics": [{"name": "loss", "value": 0.5}], "params": {"lr": 0.1}});
    let (s, b) = p.call(&admin, Method::POST, &format!("/v1/runs/{run}/log"), Some(metrics)).await;
    assert_eq!(s, 200, "{b}");
    let hook = json!({"url": "http://127.0.0.1:9/hook", "events": ["run.succeeded"], "description": "ops"});
    let (s, b) = p.call(&admin, Method::POST, "/v1/tenants/acme/projects/default/webhooks", Some(hook)).await;
    assert_eq!(s, 201, "{b}");
    let study = json!({"name": "study"});
    let (s, b) =
        p.call(&admin, Method::POST, "/v1/tenants/acme/projects/default/experiments", Some(study)).await;
    assert_eq!(s, 201, "{b}");
    let saved = json!({"filters": {"experiment": "study"}});
    let (s, b) =
        p.call(&admin, Method::PUT, "/v1/tenants/acme/projects/default/run-views/study", Some(saved)).await;
    assert_eq!(s, 201, "{b}");
    let mint = json!({"name": "ci", "scopes": ["models:read"]});
    let (s, token) =
        p.call(&admin, Method::POST, "/v1/tenants/acme/projects/default/tokens", Some(mint)).await;
    assert_eq!(s, 201, "{token}");
    let secret = token["secret"].as_str().expect("secret").to_owned();
    let (s, _) = p.call(&secret, Method::GET, "/v1/tenants/acme/projects/default/model-versions", None).await;
    assert_eq!(s, 200, "the token is used once");
    p.submit_job(&admin, "acme", json!({"method": "item.echo", "items": [1, 2]})).await;
    // A ledger entry of an earlier month, as the meter writes them.
    let entry = json!({"tenant": "acme", "project": "default", "run": "run_old", "attempt": 1, "at": "2026-11-01T00:00:00Z"});
    let key = mapi_store::DocKey::new("ledger", "run_old:1").expect("key");
    let fields = entry.as_object().cloned().expect("object");
    mapi_store::StoreExt::create(&*p.platform.state.store, &key, fields).await.expect("ledger entry");
    // The dev tenant's own run and dataset, which no export of acme holds.
    let dev_dataset = p.upload("x,y\n1,2\n2,4\n").await;
    let dev_run = p
        .submit(json!({"method": "tabular.linear", "dataset": dev_dataset, "params": {"y": "y"}, "class": "M", "timeout_s": 900}))
        .await;
    // An endpoint of acme (its document and a statistics shard, as creating and scoring one
    // write them) and a model server of each tenant, as their endpoints made them.
    for (collection, id) in
        [("endpoints", "acme:default:served"), ("endpoint_stats", "acme:default:served:r1:0")]
    {
        let doc = json!({"tenant": "acme", "project": "default", "alias": "served"});
        let key = mapi_store::DocKey::new(collection, id).expect("key");
        let fields = doc.as_object().cloned().expect("object");
        mapi_store::StoreExt::create(&*p.platform.state.store, &key, fields).await.expect("endpoint docs");
    }
    model_server(&p, "acme").await;
    model_server(&p, "dev").await;
    let internal = p.platform.state.config.secrets.internal_token.clone();
    World { p, clock, operator, admin, runner, internal, dataset, run, dev_run }
}

/// A service on the platform's host with `tenant`'s labels (its bundle is
/// no model: it never gets ready, and it exists, as a failed one does).
async fn model_server(p: &TestPlatform, tenant: &str) {
    use mapi_hosting::{Accelerator, Access, ModelRef, RevisionSpec, Scaling, ServiceSpec};
    let (t, project) = (
        TenantId::parse(tenant).expect("tenant"),
        mapi_domain::ProjectId::parse("default").expect("project"),
    );
    let spec = ServiceSpec {
        name: mapi_endpoints::service_name(&t, &project, "served"),
        region: "europe-west4".into(),
        accelerator: Accelerator::Cpu,
        scaling: Scaling { min: 0, max: 1 },
        access: Access::Private,
        labels: mapi_endpoints::labels(&t, &project, "served"),
    };
    let model = ModelRef {
        bundle: format!("t/{tenant}/default/runs/none/bundle"),
        manifest_sha256: "0".repeat(64),
        trusted_keys: "[]".into(),
        files: Vec::new(),
        base: None,
    };
    let revision = RevisionSpec { tag: "r1".into(), serves: mapi_hosting::Serving::Model(model) };
    p.platform.state.hosting.create(&spec, &revision).await.expect("a model server");
}

/// The tenants whose model servers the host has.
async fn served(p: &TestPlatform) -> Vec<String> {
    let services = p.platform.state.hosting.list().await.expect("the host's services");
    let mut tenants: Vec<String> =
        services.iter().filter_map(|s| s.labels.get(mapi_endpoints::TENANT_LABEL).cloned()).collect();
    tenants.sort();
    tenants
}

/// Every stored document: (collection, id, fields as text).
fn documents(p: &TestPlatform) -> Vec<(String, String, String)> {
    let db = rusqlite::Connection::open(p._home.path().join("mapi.db")).expect("open the store");
    let mut stmt =
        db.prepare("SELECT collection, id, fields FROM documents ORDER BY collection, id").expect("sql");
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

/// Whether a document is acme's: it names the tenant, or its id does.
fn of_acme(id: &str, fields: &str) -> bool {
    let v: Value = serde_json::from_str(fields).expect("fields");
    v["tenant"] == "acme" || id == "acme" || id.contains("tenant:acme") || id.contains("acme.test")
}

/// acme's documents per collection, and its counters and token usage by id.
fn census(p: &TestPlatform) -> BTreeMap<String, u64> {
    let docs = documents(p);
    let tokens: Vec<String> = docs
        .iter()
        .filter(|(c, _, f)| c == "tokens" && of_acme("", f))
        .map(|(_, id, _)| id[..12].to_owned())
        .collect();
    let mut out = BTreeMap::new();
    for (c, id, f) in &docs {
        let named = match c.as_str() {
            "counters" => {
                id == "tenant:acme"
                    || id.starts_with("tenant:acme#")
                    || id.starts_with("tenant:acme@")
                    || tokens.iter().any(|t| id.starts_with(&format!("token:{t}@")))
            }
            "token_minutes" => tokens.iter().any(|t| id.starts_with(&format!("{t}:"))),
            "tenants" | "tenant_deletions" | "users" | "console_sessions" => false,
            _ => serde_json::from_str::<Value>(f).expect("fields")["tenant"] == "acme",
        };
        if named {
            *out.entry(c.clone()).or_default() += 1;
        }
    }
    out
}

async fn objects_under(p: &TestPlatform, prefix: &str) -> Vec<String> {
    let (mut keys, mut token) = (Vec::new(), None::<String>);
    loop {
        let page = p.platform.state.objects.list(prefix, token.as_deref(), 500).await.expect("list");
        keys.extend(page.objects.iter().map(|o| o.key.as_str().to_owned()));
        match page.next_page_token {
            Some(t) => token = Some(t),
            None => return keys,
        }
    }
}

async fn export(w: &World) -> Value {
    let (s, asked) = w.p.call(&w.admin, Method::POST, "/v1/tenants/acme/exports", None).await;
    assert_eq!((s, asked["state"].as_str()), (202, Some("building")), "{asked}");
    let id = asked["id"].as_str().expect("export id").to_owned();
    let body = json!({"tenant": "acme", "export": id});
    let (s, built) = w.p.call(&w.internal, Method::POST, "/internal/tasks/tenants/export", Some(body)).await;
    assert_eq!((s, built["state"].as_str()), (200, Some("ready")), "{built}");
    let (s, got) = w.p.call(&w.admin, Method::GET, &format!("/v1/tenants/acme/exports/{id}"), None).await;
    assert_eq!(s, 200, "{got}");
    got
}

async fn download(p: &TestPlatform, url: &str) -> Vec<u8> {
    let resp = p.http.get(url).send().await.expect("download");
    assert_eq!(resp.status(), 200, "{url}");
    resp.bytes().await.expect("bytes").to_vec()
}

fn lines(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(bytes).lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_holds_the_tenants_documents_and_objects_and_no_one_elses() {
    let w = world().await;
    let p = &w.p;
    // A runner may not; another tenant's admin does not see the tenant.
    let (s, b) = p.call(&w.runner, Method::POST, "/v1/tenants/acme/exports", None).await;
    assert_eq!(s, 403, "{b}");
    let other = p.create_tenant(&w.operator, "other", "verified").await;
    let (s, b) = p.call(&other, Method::POST, "/v1/tenants/acme/exports", None).await;
    assert_eq!(s, 404, "{b}");

    let (s, first) = p.call(&w.admin, Method::POST, "/v1/tenants/acme/exports", None).await;
    assert_eq!(s, 202, "{first}");
    let (s, again) = p.call(&w.admin, Method::POST, "/v1/tenants/acme/exports", None).await;
    assert_eq!((s, &again["id"]), (200, &first["id"]), "a second request answers the one building: {again}");
    let id = first["id"].as_str().expect("id");
    let (s, hidden) = p.call(&other, Method::GET, &format!("/v1/tenants/acme/exports/{id}"), None).await;
    assert_eq!(s, 404, "{hidden}");
    let body = json!({"tenant": "acme", "export": id});
    let (s, built) =
        p.call(&w.internal, Method::POST, "/internal/tasks/tenants/export", Some(body.clone())).await;
    assert_eq!((s, built["state"].as_str()), (200, Some("ready")), "{built}");
    let (s, redelivered) =
        p.call(&w.internal, Method::POST, "/internal/tasks/tenants/export", Some(body)).await;
    assert_eq!((s, &redelivered), (200, &built), "a redelivery of a finished export changes nothing");
    let (s, manifest) = p.call(&w.admin, Method::GET, &format!("/v1/tenants/acme/exports/{id}"), None).await;
    assert_eq!(s, 200, "{manifest}");
    assert!(manifest["expires_at"].is_string(), "{manifest}");

    let (mut docs, mut objects) = (Vec::new(), Vec::new());
    for part in manifest["parts"].as_array().expect("parts") {
        let got = lines(&download(p, part["url"].as_str().expect("url")).await);
        assert_eq!(got.len() as u64, part["count"].as_u64().expect("count"), "{part}");
        match part["kind"].as_str() {
            Some("documents") => docs.extend(got),
            Some("objects") => objects.extend(got),
            k => panic!("a part of kind {k:?}"),
        }
    }
    assert_eq!(docs.len() as u64, manifest["documents"].as_u64().expect("documents"));
    let find =
        |collection: &str, id: &str| docs.iter().any(|d| d["collection"] == collection && d["id"] == id);
    assert!(find("runs", &w.run), "the run is exported");
    assert!(find("datasets", &w.dataset), "the dataset is exported");
    assert!(
        find("tenants", "acme")
            && find("ledger", "run_old:1")
            && find("memberships", "acme:*:runner@acme.test")
    );
    assert!(!find("runs", &w.dev_run), "the dev tenant's run is not acme's");
    assert!(find("run_logs", &w.run), "what was logged to the run is exported");
    assert!(
        find("endpoints", "acme:default:served") && find("endpoint_stats", "acme:default:served:r1:0"),
        "the endpoint and its statistics are exported"
    );
    let hook = docs.iter().find(|d| d["collection"] == "webhooks").expect("the webhook is exported");
    assert!(
        hook["fields"]["url"].is_string() && hook["fields"].get("secret").is_none(),
        "a webhook's secret is shown once, never exported: {hook}"
    );
    for d in &docs {
        let mine = d["fields"]["tenant"] == "acme" || (d["collection"] == "tenants" && d["id"] == "acme");
        assert!(mine, "only acme's documents: {d}");
    }
    let keys: Vec<&str> = objects.iter().map(|o| o["key"].as_str().expect("key")).collect();
    assert!(keys.iter().all(|k| k.starts_with("t/acme/")), "{keys:?}");
    assert!(keys.iter().any(|k| k.ends_with(&format!("datasets/{}.csv", w.dataset))), "{keys:?}");
    assert_eq!(keys.len(), objects_under(p, "t/acme/").await.len(), "every object of the tenant");
    for o in &objects {
        let bytes = download(p, o["url"].as_str().expect("url")).await;
        assert_eq!(bytes.len() as u64, o["size"].as_u64().expect("size"), "{o}");
    }
    let csv =
        objects.iter().find(|o| o["key"].as_str().is_some_and(|k| k.contains("datasets/"))).expect("csv");
    assert_eq!(download(p, csv["url"].as_str().expect("url")).await, b"x,y\n1,2\n2,4\n3,7\n");

    let (_, log) = p.call(&w.admin, Method::GET, "/v1/tenants/acme/audit?action=tenant.export", None).await;
    let items = log["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "one export asked, one audited: {log}");
    assert_eq!(items[0]["actor"], "owner@acme.test");
}

/// What the tick and the purge leave: nothing of acme but its tombstone,
/// the certificate and the kept entries, which name nobody.
async fn assert_nothing_left(p: &TestPlatform) {
    for (c, id, f) in documents(p) {
        if !of_acme(&id, &f) || matches!(c.as_str(), "users" | "console_sessions") {
            continue;
        }
        assert!(
            matches!(
                c.as_str(),
                "tenants"
                    | "tenant_deletions"
                    | "ledger"
                    | "item_ledger"
                    | "item_ledger_minutes"
                    | "score_ledger"
                    | "instance_ledger"
                    | "audit"
            ),
            "{c}/{id} is left: {f}"
        );
        if c != "tenant_deletions" {
            for email in EMAILS {
                assert!(!f.contains(email), "{c}/{id} still names {email}: {f}");
            }
        }
    }
    let tombstone: Value = documents(p)
        .into_iter()
        .find(|(c, id, _)| c == "tenants" && id == "acme")
        .map(|(_, _, f)| serde_json::from_str(&f).expect("fields"))
        .expect("the tombstone");
    assert_eq!((tombstone["status"].as_str(), &tombstone["admin_email"]), (Some("deleting"), &Value::Null));
    assert_eq!(objects_under(p, "t/acme/").await, Vec::<String>::new());
    assert_eq!(objects_under(p, "exports/acme/").await, Vec::<String>::new());
    assert_eq!(served(p).await, ["dev"], "acme's model server is gone, the dev tenant's stays");
}

/// The certificate's counts are what was there before the purge.
fn assert_counts(cert: &Value, before: &BTreeMap<String, u64>, objects: usize, exported: usize) {
    let kept = ["ledger", "item_ledger", "item_ledger_minutes", "score_ledger", "instance_ledger", "audit"];
    for (collection, n) in before {
        let side = if kept.contains(&collection.as_str()) { "kept" } else { "deleted" };
        assert_eq!(cert[side][collection].as_u64(), Some(*n), "{side} {collection}: {cert:#}");
    }
    assert_eq!(cert["deleted"]["objects"].as_u64(), Some(objects as u64), "{cert:#}");
    assert_eq!(cert["deleted"]["export_objects"].as_u64(), Some(exported as u64), "{cert:#}");
    assert_eq!(cert["deleted"]["model_servers"].as_u64(), Some(1), "acme's one model server: {cert:#}");
    let listed: u64 =
        cert["deleted"].as_object().expect("deleted").values().filter_map(Value::as_u64).sum::<u64>()
            + cert["kept"].as_object().expect("kept").values().filter_map(Value::as_u64).sum::<u64>();
    assert_eq!(
        listed,
        before.values().sum::<u64>() + (objects + exported + 1) as u64,
        "nothing else counted: {cert:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_hides_the_tenant_is_cancelled_within_its_grace_then_purged_to_a_certificate() {
    let w = world().await;
    let p = &w.p;
    export(&w).await;
    let reason = json!({"reason": "we are closing"});
    let (s, b) = p.call(&w.runner, Method::POST, "/v1/tenants/acme/deletion", Some(reason.clone())).await;
    assert_eq!(s, 403, "a runner may not delete the tenant: {b}");
    let (s, d) = p.call(&w.admin, Method::POST, "/v1/tenants/acme/deletion", Some(reason.clone())).await;
    assert_eq!((s, d["state"].as_str()), (202, Some("scheduled")), "{d}");
    for (who, path) in [
        (&w.admin, "/v1/tenants/acme".to_owned()),
        (&w.admin, format!("/v1/runs/{}", w.run)),
        (&w.runner, "/v1/tenants/acme/projects/default/datasets".to_owned()),
        (&w.admin, "/v1/tenants/acme/deletion".to_owned()),
    ] {
        let (s, b) = p.call(who, Method::GET, &path, None).await;
        assert_eq!(s, 404, "members see nothing of a deleting tenant: {path}: {b}");
    }
    let (s, b) = p.call(&w.runner, Method::POST, "/v1/tenants/acme/deletion/cancel", None).await;
    assert_eq!(s, 404, "only its admins may cancel: {b}");
    let (s, early) = p.call(&w.operator, Method::POST, "/v1/tenants/acme/deletion/purge", None).await;
    assert_eq!((s, early["code"].as_str()), (409, Some("FAILED_PRECONDITION")), "{early}");
    let (s, c) = p.call(&w.admin, Method::POST, "/v1/tenants/acme/deletion/cancel", None).await;
    assert_eq!((s, c["state"].as_str()), (200, Some("cancelled")), "{c}");
    let (s, t) = p.call(&w.admin, Method::GET, "/v1/tenants/acme", None).await;
    assert_eq!((s, t["status"].as_str()), (200, Some("active")), "{t}");
    let (s, b) = p.call(&w.runner, Method::GET, "/v1/tenants/acme/projects/default/datasets", None).await;
    assert_eq!(s, 200, "{b}");

    let (s, d) = p.call(&w.admin, Method::POST, "/v1/tenants/acme/deletion", Some(reason)).await;
    assert_eq!(s, 202, "{d}");
    // Within the grace period the tick pushes nothing; past it, the purge.
    let (s, tick) = p.call(&w.internal, Method::POST, "/internal/tick", Some(json!({}))).await;
    assert_eq!((s, tick["tenant_tasks"].as_u64()), (200, Some(0)), "{tick}");
    w.clock.advance(GRACE + Duration::from_secs(1));
    // Sessions of a week ago have expired: sign in again.
    let (admin, operator) = (p.login("owner@acme.test").await, p.login("admin@dev.local").await);
    let w = World { admin, operator, ..w };
    let p = &w.p;
    let (s, late) = p.call(&w.admin, Method::POST, "/v1/tenants/acme/deletion/cancel", None).await;
    assert_eq!((s, late["code"].as_str()), (409, Some("FAILED_PRECONDITION")), "{late}");
    let before = census(p);
    assert!(before["runs"] >= 1 && before["datasets"] >= 1 && before["audit"] >= 5 && before["ledger"] == 1);
    assert!(before["run_logs"] == 1 && before["webhooks"] == 1, "{before:?}");
    assert!(before["experiments"] == 1 && before["run_views"] == 1, "{before:?}");
    let objects = objects_under(p, "t/acme/").await.len();
    let exported = objects_under(p, "exports/acme/").await.len();
    assert!(objects >= 2 && exported >= 2, "{objects} objects, {exported} export parts");

    let (s, tick) = p.call(&w.internal, Method::POST, "/internal/tick", Some(json!({}))).await;
    assert_eq!((s, tick["tenant_tasks"].as_u64()), (200, Some(1)), "the tick pushes the due purge: {tick}");
    let queue = mapi_queue::QueueName::new(mapi_schema::PURGE_QUEUE).expect("queue");
    let depth = p.platform.state.queue.depth(&queue).await.expect("depth");
    assert_eq!(depth, 1, "the purge is a task on its queue");
    let (s, cert) = p
        .call(&w.internal, Method::POST, "/internal/tasks/tenants/purge", Some(json!({"tenant": "acme"})))
        .await;
    assert_eq!((s, cert["state"].as_str()), (200, Some("purged")), "{cert:#}");

    assert_nothing_left(p).await;
    let (s, read) = p.call(&w.operator, Method::GET, "/v1/tenants/acme/deletion", None).await;
    assert_eq!((s, &read), (200, &cert), "operators read the certificate");
    assert_eq!(
        (read["requested_by"].as_str(), read["reason"].as_str()),
        (Some("owner@acme.test"), Some("we are closing"))
    );
    assert!(read["purged_at"].is_string());
    assert_counts(&read, &before, objects, exported);
    let (s, b) = p.call(&w.admin, Method::GET, "/v1/tenants/acme/deletion", None).await;
    assert_eq!(s, 404, "the former admin reads nothing: {b}");
    let again = json!({"id": "acme", "name": "acme", "tier": "verified", "residency": "eu"});
    let (s, b) = p.call(&w.operator, Method::POST, "/v1/admin/tenants", Some(again)).await;
    assert_eq!(s, 409, "the id is never reused: {b}");
    assert_eq!(census(p).get("runs"), None, "the census finds no run left");
    let (s, b) = p.call(p.token(), Method::GET, &format!("/v1/runs/{}", w.dev_run), None).await;
    assert_eq!(s, 200, "the dev tenant keeps its run: {b}");
}

/// A store whose commits fail once `left` of them have been made: a purge
/// killed partway.
#[derive(Debug)]
struct Killed {
    inner: Arc<dyn Store>,
    left: AtomicU32,
}

#[async_trait]
impl Store for Killed {
    async fn get(
        &self,
        keys: &[mapi_store::DocKey],
        txn: Option<TxnId>,
    ) -> Result<Vec<Option<Document>>, StoreError> {
        self.inner.get(keys, txn).await
    }

    async fn query(&self, query: &Query, txn: Option<TxnId>) -> Result<Vec<Document>, StoreError> {
        self.inner.query(query, txn).await
    }

    async fn begin(&self) -> Result<TxnId, StoreError> {
        self.inner.begin().await
    }

    async fn commit(
        &self,
        txn: Option<(TxnId, &[ReadRecord])>,
        writes: &[Write],
    ) -> Result<Vec<Option<Version>>, StoreError> {
        if self.left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_err() {
            return Err(StoreError::Unavailable("the purge was killed".into()));
        }
        self.inner.commit(txn, writes).await
    }

    async fn rollback(&self, txn: TxnId) -> Result<(), StoreError> {
        self.inner.rollback(txn).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_purge_goes_on_where_it_stopped_to_the_same_certificate() {
    let w = world().await;
    let p = &w.p;
    export(&w).await;
    let (s, d) =
        p.call(&w.admin, Method::POST, "/v1/tenants/acme/deletion", Some(json!({"reason": "done"}))).await;
    assert_eq!(s, 202, "{d}");
    w.clock.advance(GRACE);
    let operator = p.login("admin@dev.local").await;
    let w = World { operator, ..w };
    let p = &w.p;
    let before = census(p);
    let objects = objects_under(p, "t/acme/").await.len();
    let exported = objects_under(p, "exports/acme/").await.len();

    // Killed after its start and the first page of objects was recorded:
    // the objects are deleted but not yet counted.
    let state = &p.platform.state;
    let killed = Killed { inner: state.store.clone(), left: AtomicU32::new(2) };
    let ports = mapi_tasks::purge::Ports {
        store: &killed,
        objects: &*state.objects,
        hosting: &*state.hosting,
        pepper: &state.pepper,
        now: state.clock.now(),
    };
    let acme = TenantId::parse("acme").expect("tenant");
    let stopped = mapi_tasks::purge::run(ports, &acme, 200).await;
    assert!(stopped.is_err(), "the purge was killed: {stopped:?}");
    assert!(objects_under(p, "t/acme/").await.is_empty(), "its first page of objects went");
    let (_, midway) = p.call(&w.operator, Method::GET, "/v1/tenants/acme/deletion", None).await;
    assert_eq!(midway["state"], "purging", "{midway}");
    assert_eq!(midway["progress"]["pending"].as_array().map(Vec::len), Some(objects), "{midway}");
    assert_eq!(census(p), before, "no document went yet");

    // The operator retries it: the next delivery finishes it, counting each thing once.
    let (s, retried) = p.call(&w.operator, Method::POST, "/v1/tenants/acme/deletion/purge", None).await;
    assert_eq!(s, 202, "{retried}");
    // The retry is audited in the tenant's log, before the purge reaches it.
    let mut expected = before.clone();
    *expected.entry("audit".to_owned()).or_default() += 1;
    assert_eq!(census(p), expected);
    let purge = json!({"tenant": "acme"});
    let (s, cert) =
        p.call(&w.internal, Method::POST, "/internal/tasks/tenants/purge", Some(purge.clone())).await;
    assert_eq!((s, cert["state"].as_str()), (200, Some("purged")), "{cert:#}");
    assert_eq!(cert["purge_runs"], 2, "{cert:#}");
    assert_counts(&cert, &expected, objects, exported);
    assert_nothing_left(p).await;
    let (s, after) = p.call(&w.internal, Method::POST, "/internal/tasks/tenants/purge", Some(purge)).await;
    assert_eq!((s, &after), (200, &cert), "a delivery after the end changes nothing");
    let (s, b) = p.call(&w.operator, Method::POST, "/v1/tenants/acme/deletion/purge", None).await;
    assert_eq!((s, &b), (200, &cert), "a purged tenant answers its certificate");
}

/// A host that deletes the first service asked and then loses its answer,
/// as a delivery killed while the host deleted.
#[derive(Debug)]
struct LostDeletion {
    inner: Arc<dyn mapi_hosting::Hosting>,
    lost: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl mapi_hosting::Hosting for LostDeletion {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    async fn create(
        &self,
        spec: &mapi_hosting::ServiceSpec,
        first: &mapi_hosting::RevisionSpec,
    ) -> Result<(), mapi_hosting::HostingError> {
        self.inner.create(spec, first).await
    }
    async fn add_revision(
        &self,
        service: &str,
        revision: &mapi_hosting::RevisionSpec,
    ) -> Result<(), mapi_hosting::HostingError> {
        self.inner.add_revision(service, revision).await
    }
    async fn set_traffic(
        &self,
        service: &str,
        traffic: &[mapi_hosting::Traffic],
    ) -> Result<(), mapi_hosting::HostingError> {
        self.inner.set_traffic(service, traffic).await
    }
    async fn set_scaling(
        &self,
        service: &str,
        scaling: mapi_hosting::Scaling,
    ) -> Result<(), mapi_hosting::HostingError> {
        self.inner.set_scaling(service, scaling).await
    }
    async fn get(&self, service: &str) -> Result<mapi_hosting::ServiceState, mapi_hosting::HostingError> {
        self.inner.get(service).await
    }
    async fn list(&self) -> Result<Vec<mapi_hosting::ServiceState>, mapi_hosting::HostingError> {
        self.inner.list().await
    }
    async fn delete(&self, service: &str) -> Result<(), mapi_hosting::HostingError> {
        self.inner.delete(service).await?;
        if self.lost.swap(false, Ordering::SeqCst) {
            let lost = mapi_domain::Cause::new("the answer", std::io::Error::other("connection reset"));
            return Err(mapi_hosting::HostingError::Unavailable(lost));
        }
        Ok(())
    }
    async fn route(
        &self,
        service: &str,
        tag: Option<&str>,
    ) -> Result<mapi_hosting::Route, mapi_hosting::HostingError> {
        self.inner.route(service, tag).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_server_deleted_by_a_delivery_that_lost_the_answer_is_counted_once() {
    let w = world().await;
    let p = &w.p;
    let (s, d) =
        p.call(&w.admin, Method::POST, "/v1/tenants/acme/deletion", Some(json!({"reason": "done"}))).await;
    assert_eq!(s, 202, "{d}");
    w.clock.advance(GRACE);
    let state = &p.platform.state;
    let host = LostDeletion { inner: state.hosting.clone(), lost: true.into() };
    let ports = mapi_tasks::purge::Ports {
        store: &*state.store,
        objects: &*state.objects,
        hosting: &host,
        pepper: &state.pepper,
        now: state.clock.now(),
    };
    let acme = TenantId::parse("acme").expect("tenant");
    let stopped = mapi_tasks::purge::run(ports, &acme, 1000).await;
    assert!(stopped.is_err(), "the delivery failed with the lost answer: {stopped:?}");
    assert_eq!(served(p).await, ["dev"], "the host deleted acme's server all the same");
    let purge = json!({"tenant": "acme"});
    let (s, cert) = p.call(&w.internal, Method::POST, "/internal/tasks/tenants/purge", Some(purge)).await;
    assert_eq!((s, cert["state"].as_str()), (200, Some("purged")), "{cert:#}");
    assert_eq!(cert["deleted"]["model_servers"], 1, "deleted once, counted once: {cert:#}");
    assert_nothing_left(p).await;
}
