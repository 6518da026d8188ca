//! Ids and nonces come from the platform's injected entropy: two platforms
//! on the same seed and the same virtual clock make the same dataset, run
//! and job ids, the same attempt nonce and the same audit entry ids; another
//! seed makes others.

use std::sync::Arc;

use mapi_clock::VirtualClock;
use mapi_domain::{AttemptNo, RunId, Timestamp};
use mapi_entropy::SeededEntropy;
use mapi_schema::{AttemptDoc, AuditDoc, Doc};
use mapi_tests::scripted::ScriptedExecutor;
use mapi_tests::{Options, TestPlatform};
use serde_json::json;

/// What one platform made: dataset, run and job ids, the attempt's nonce,
/// and the ids of its audit entries (in id order).
async fn ids_from(seed: u64) -> (String, String, String, String, Vec<String>) {
    let clock = Arc::new(VirtualClock::new(Timestamp::parse_rfc3339("2026-12-01T08:00:00Z").expect("time")));
    let options = Options {
        background: false,
        clock,
        executor: Some(Arc::new(ScriptedExecutor::default())),
        queue: None,
        entropy: Some(Arc::new(SeededEntropy::new(seed))),
    };
    let p = TestPlatform::start_with(&[], options).await;
    let ds = p.upload("x,y\n1,2\n2,3\n3,5\n").await;
    let run = RunId::parse(&p.submit(json!({"method": "describe", "dataset": ds})).await).expect("run id");
    assert_eq!(p.dispatch(&run, AttemptNo::FIRST).await.0, 200);
    let attempt: AttemptDoc =
        mapi_schema::get(&*p.platform.state.store, &AttemptDoc::id_of(&run, AttemptNo::FIRST))
            .await
            .expect("read")
            .expect("attempt");
    let job = p.submit_job(p.token(), "dev", json!({"method": "item.echo", "items": [1, 2]})).await;
    let audit = p
        .platform
        .state
        .store
        .query(&mapi_store::Query::new(AuditDoc::COLLECTION), None)
        .await
        .expect("audit log");
    let mut audit: Vec<String> = audit.iter().map(|d| d.decode::<AuditDoc>().expect("entry").id).collect();
    audit.sort_unstable();
    p.platform.shutdown().await;
    (ds, run.to_string(), job, attempt.nonce.to_string(), audit)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_seed_makes_the_same_ids() {
    let a = ids_from(42).await;
    // The run's and the job's creation, at least.
    assert!(a.4.len() >= 2, "audit entries: {:?}", a.4);
    assert_eq!(a, ids_from(42).await, "a seed replays every id, nonce and audit entry id");
    let other = ids_from(43).await;
    assert!(a.0 != other.0 && a.1 != other.1 && a.2 != other.2 && a.3 != other.3, "{a:?} vs {other:?}");
    // Same clock, so the same times: the random suffixes differ.
    assert_eq!(a.4.len(), other.4.len(), "{a:?} vs {other:?}");
    assert!(a.4.iter().zip(&other.4).all(|(x, y)| x != y), "{a:?} vs {other:?}");
}
