//! Deleting a dataset: kept while a run may still read it (409 naming the
//! run); once deleted its record and object are gone, the storage it counted
//! is given back once, and the deletion is audited. Downloading one: a
//! signed link to its bytes, audited before it is given, to the project only;
//! a finished run's outputs, each download audited and counted as egress.

use std::sync::Arc;

use mapi_domain::TenantId;
use mapi_objects::ObjectKey;
use mapi_tests::TestPlatform;
use reqwest::Method;
use serde_json::json;

async fn stored_bytes(p: &TestPlatform) -> i64 {
    let name = mapi_quota::counters::tenant(&TenantId::parse("dev").expect("tenant"));
    mapi_quota::counters::read(&*p.platform.state.store, &name).await.expect("counter").storage_bytes
}

#[tokio::test]
async fn a_deleted_dataset_is_gone_and_its_storage_given_back_once() {
    let executor = Arc::new(mapi_executor::scripted::ScriptedExecutor::default());
    let options = mapi_tests::Options { background: false, executor: Some(executor), ..Default::default() };
    let p = TestPlatform::start_with(&[], options).await;
    let before = stored_bytes(&p).await;
    let csv = "x,y\n1,2\n2,4\n3,7\n";
    let id = p.upload(csv).await;
    assert_eq!(stored_bytes(&p).await - before, csv.len() as i64, "the upload counts its bytes");
    let path = format!("{}/datasets/{id}", p.project_path());
    let state = &p.platform.state;
    let object = mapi_schema::get::<mapi_schema::DatasetDoc>(&*state.store, &id).await.expect("get");
    let object = object.expect("stored");

    // A queued run reads it: the dataset stays, and the refusal names the run.
    let run = p.submit(json!({"method": "describe", "dataset": id})).await;
    let (s, refused) = p.call(p.token(), Method::DELETE, &path, None).await;
    assert_eq!((s, refused["code"].as_str()), (409, Some("FAILED_PRECONDITION")), "{refused}");
    assert!(refused["detail"].as_str().unwrap_or("").contains(&run), "{refused}");
    let (s, _) = p.call(p.token(), Method::GET, &path, None).await;
    assert_eq!(s, 200, "refused, nothing was deleted");

    let (s, cancelled) = p.cancel(p.token(), &run).await;
    assert!(s < 300, "{cancelled}");
    assert_eq!(p.run(&run).await["state"], "cancelled", "a queued run cancels at once");
    let (s, body) = p.call(p.token(), Method::DELETE, &path, None).await;
    assert_eq!(s, 204, "{body}");
    assert_eq!(stored_bytes(&p).await, before, "its storage no longer counts");
    assert_eq!(p.call(p.token(), Method::GET, &path, None).await.0, 404);
    let key = ObjectKey::parse(&object.object).expect("key");
    assert!(p.platform.state.objects.get(&key, None).await.is_err(), "its object is gone");

    // Again: not found, and nothing given back twice.
    assert_eq!(p.call(p.token(), Method::DELETE, &path, None).await.0, 404);
    assert_eq!(stored_bytes(&p).await, before);
    let admin = p.login("dev@dev.local").await;
    let (_, log) = p.call(&admin, Method::GET, "/v1/tenants/dev/audit?action=dataset.delete", None).await;
    let items = log["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{log}");
    assert_eq!(items[0]["resource"], format!("datasets/{id}"));
}

#[tokio::test]
async fn a_download_link_is_audited_before_it_is_given_and_only_to_the_project() {
    let accounts = "admin@dev.local,dev@dev.local,owner@other.test";
    let p =
        TestPlatform::start_with(&[("MAPI_DEV_ACCOUNTS", accounts)], mapi_tests::Options::default()).await;
    let csv = "x,y\n1,2\n2,4\n3,7\n";
    let id = p.upload(csv).await;
    let path = format!("{}/datasets/{id}/url", p.project_path());
    let (s, link) = p.call(p.token(), reqwest::Method::POST, &path, None).await;
    assert_eq!(
        (s, &link["dataset"], &link["expires_in_s"]),
        (200, &serde_json::json!(id), &serde_json::json!(900)),
        "{link}"
    );
    let body = p.http.get(link["url"].as_str().expect("url")).send().await.expect("download");
    assert_eq!(body.status(), 200);
    assert_eq!(body.text().await.expect("text"), csv, "the bytes uploaded");

    let admin = p.login("dev@dev.local").await;
    let (_, log) =
        p.call(&admin, reqwest::Method::GET, "/v1/tenants/dev/audit?action=dataset.download", None).await;
    let entries = log["items"].as_array().expect("items");
    assert_eq!(entries.len(), 1, "{log}");
    assert_eq!(entries[0]["resource"], format!("datasets/{id}"));
    assert!(entries[0]["detail"].as_str().is_some_and(|d| d.contains("valid 900 s")), "{log}");

    let operator = p.login("admin@dev.local").await;
    let other = p.create_tenant(&operator, "other", "verified").await;
    let (s, b) = p.call(&other, reqwest::Method::POST, &path, None).await;
    assert!(s == 403 || s == 404, "{s} {b}");
    let (s, b) = p.call(&operator, reqwest::Method::POST, &path, None).await;
    assert_eq!(s, 404, "operators never read tenant content: {b}");
    let (_, log) =
        p.call(&admin, reqwest::Method::GET, "/v1/tenants/dev/audit?action=dataset.download", None).await;
    assert_eq!(log["items"].as_array().map(Vec::len), Some(1), "refusals mint nothing: {log}");
}

/// A run's view lists its outputs with the platform's route each downloads through: viewing
/// mints, audits and counts nothing; each download is audited (`artifact.download`), its bytes
/// counted against the tenant's egress of the month, and refused naming the limit once spent.
#[tokio::test]
async fn each_download_of_a_runs_output_is_audited_and_counted_as_egress() {
    let p = TestPlatform::start(&[]).await;
    let dataset = p.upload("x,y\n1,2\n2,4\n3,7\n4,8\n").await;
    let id = p.submit(json!({"method": "tabular.linear", "dataset": dataset, "params": {"y": "y"}})).await;
    let queued = p.run(&id).await;
    assert_eq!(queued["outputs"], json!([]), "no outputs before the run ends: {queued}");
    let done = p.wait_final(&id).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    p.run(&id).await;
    let admin = p.login("dev@dev.local").await;
    let audit = "/v1/tenants/dev/audit?action=artifact.download";
    let (_, log) = p.call(&admin, reqwest::Method::GET, audit, None).await;
    assert_eq!(log["items"].as_array().map(Vec::len), Some(0), "views download nothing: {log}");

    let out = &done["outputs"][0];
    let (name, size) = (out["name"].as_str().expect("name"), out["size"].as_u64().expect("size"));
    let url = out["url"].as_str().expect("url");
    assert_eq!(url, p.url(&format!("/v1/runs/{id}/outputs/{name}")), "the platform's route");
    let bytes = p.output(url).await.bytes().await.expect("bytes");
    assert_eq!(bytes.len() as u64, size);
    let (_, log) = p.call(&admin, reqwest::Method::GET, audit, None).await;
    let items = log["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{log}");
    assert_eq!(items[0]["resource"], format!("runs/{id}"));
    let detail = items[0]["detail"].as_str().unwrap_or_default();
    assert!(detail.starts_with(&format!("output {name} ({size} bytes)")), "{log}");
    // Names that are no output of the run, however they are spelled, are not found.
    let odd =
        ["nope.json", "..%2f..%2fmapi.db", "%2e%2e/%2e%2e/secrets.json", "0/model.json", "model.json%00"];
    for name in odd {
        let path = format!("/v1/runs/{id}/outputs/{name}");
        let (s, problem) = p.call(p.token(), reqwest::Method::GET, &path, None).await;
        assert_eq!((s, problem["code"].as_str()), (404, Some("NOT_FOUND")), "{name}: {problem}");
    }

    // The month's egress, with room for what left and less than one more download: refused, named.
    let operator = p.login("admin@dev.local").await;
    let room = json!({"egress_bytes_per_month": size + size / 2});
    let (s, b) = p.call(&operator, reqwest::Method::PUT, "/v1/admin/quotas/dev", Some(room)).await;
    assert_eq!(s, 200, "{b}");
    let refused = p.output(url).await;
    assert_eq!(refused.status(), 429);
    let problem: serde_json::Value = refused.json().await.expect("problem");
    assert_eq!(problem["code"], "QUOTA_EXCEEDED", "{problem}");
    assert!(problem["detail"].as_str().unwrap_or_default().contains("egress_bytes_per_month"), "{problem}");
}

/// Retention: by default a dataset is kept until deleted; once a tenant's
/// quota policy sets `dataset_retention_days`, the housekeeper deletes its
/// datasets uploaded longer ago than that which no run reads (record,
/// object, storage given back, audited `dataset.expire`), keeps one a run
/// still reads for a later call, and leaves younger ones alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datasets_past_their_tenants_retention_that_no_run_reads_are_deleted() {
    use mapi_store::{Precondition, StoreExt};
    let executor = Arc::new(mapi_executor::scripted::ScriptedExecutor::default());
    let options = mapi_tests::Options { background: false, executor: Some(executor), ..Default::default() };
    let p =
        TestPlatform::start_with(&[("MAPI_DEV_ACCOUNTS", "admin@dev.local,dev@dev.local")], options).await;
    let state = &p.platform.state;
    let (old_csv, read_csv) = ("x,y\n1,2\n2,4\n3,7\n", "x,y\n1,3\n2,5\n3,8\n4,9\n");
    let (old, read, fresh) = (p.upload(old_csv).await, p.upload(read_csv).await, p.upload("x\n1\n").await);
    let run = p.submit(json!({"method": "describe", "dataset": read})).await;
    // Eleven days pass for two of them.
    let eleven_days_ago = (state.clock.now() - std::time::Duration::from_secs(11 * 86_400)).to_rfc3339();
    for id in [&old, &read] {
        let key = mapi_schema::key::<mapi_schema::DatasetDoc>(id).expect("key");
        let doc = state.store.get_one(&key).await.expect("get").expect("stored");
        let mut fields = doc.fields.clone();
        fields.insert("created_at".into(), json!(eleven_days_ago));
        state.store.put(&key, fields, Precondition::None).await.expect("age");
    }
    let internal = state.config.secrets.internal_token.clone();
    let housekeep = || async {
        let (s, done) = p.call(&internal, Method::POST, mapi_tasks::housekeep::HOUSEKEEP_PATH, None).await;
        assert_eq!(s, 200, "{done}");
        (done["deleted_datasets"].as_u64(), done["kept_datasets"].as_u64())
    };
    assert_eq!(housekeep().await, (Some(0), Some(0)), "the platform keeps datasets by default");

    let operator = p.login("admin@dev.local").await;
    let zero = json!({"dataset_retention_days": 0});
    let (s, problem) = p.call(&operator, Method::PUT, "/v1/admin/quotas/dev", Some(zero)).await;
    assert_eq!((s, problem["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{problem}");
    let ten = json!({"dataset_retention_days": 10});
    let (s, limits) = p.call(&operator, Method::PUT, "/v1/admin/quotas/dev", Some(ten)).await;
    assert_eq!((s, limits["dataset_retention_days"].as_u64()), (200, Some(10)), "{limits}");

    let before = stored_bytes(&p).await;
    let object =
        mapi_schema::get::<mapi_schema::DatasetDoc>(&*state.store, &old).await.expect("get").expect("doc");
    assert_eq!(housekeep().await, (Some(1), Some(1)), "the old one goes; the one a run reads stays");
    assert_eq!(stored_bytes(&p).await, before - old_csv.len() as i64, "its storage is given back");
    let path = |id: &str| format!("{}/datasets/{id}", p.project_path());
    assert_eq!(p.call(p.token(), Method::GET, &path(&old), None).await.0, 404);
    let key = ObjectKey::parse(&object.object).expect("key");
    assert!(state.objects.get(&key, None).await.is_err(), "its object is gone");
    for kept in [&read, &fresh] {
        assert_eq!(p.call(p.token(), Method::GET, &path(kept), None).await.0, 200, "{kept} stays");
    }
    let admin = p.login("dev@dev.local").await;
    let (_, log) = p.call(&admin, Method::GET, "/v1/tenants/dev/audit?action=dataset.expire", None).await;
    let items = log["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{log}");
    assert_eq!(items[0]["resource"], format!("datasets/{old}"));
    assert!(items[0]["detail"].as_str().is_some_and(|d| d.contains("retention of 10 days")), "{log}");

    // Once the run no longer reads it, the next call deletes it too.
    p.cancel(p.token(), &run).await;
    assert_eq!(housekeep().await, (Some(1), Some(0)));
    assert_eq!(p.call(p.token(), Method::GET, &path(&read), None).await.0, 404);
}
