//! Deleting a dataset: kept while a run may still read it (409 naming the
//! run); once deleted its record and object are gone, the storage it counted
//! is given back once, and the deletion is audited.

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
