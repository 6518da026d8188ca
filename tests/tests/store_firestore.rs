//! The Firestore store against a local Firestore emulator
//! (`@firestore-emulator/server`, see `mapi_tests::firestore_emulator`):
//! the Store conformance cases the emulator can prove, each on its own
//! emulator and project; the cases it cannot prove, each with the reason,
//! in [`EMULATOR_CANNOT_PROVE`] (they stay proven on SQLite and are listed
//! in the module doc of `shared/firestore/src/lib.rs` as checked only
//! against real Firestore); a few adapter checks the conformance cases do
//! not make; and the composite index file the deploy step applies.

use mapi_firestore::FirestoreStore;
use mapi_store::conformance;
use mapi_store::{Direction, DocKey, Op, Precondition, Query, Store, StoreError, StoreExt, Write, transact};
use mapi_tests::firestore_emulator::FirestoreEmulator;
use serde_json::{Value, json};

/// Conformance cases the emulator cannot prove, and why. Each is a
/// limitation of `@firestore-emulator/server` 0.3.15, read from its source
/// and seen in its answers; the adapter sends what real Firestore needs.
const EMULATOR_CANNOT_PROVE: &[(&str, &str)] = &[
    (
        "version_preconditions",
        "the emulator ignores `update_time` preconditions: a write at a stale version succeeds",
    ),
    (
        "delete_semantics",
        "the emulator ignores `update_time` preconditions: a delete at a stale version succeeds",
    ),
    (
        "replace_keeps_create_time",
        "the emulator merges a write's fields into the stored ones instead of replacing the document",
    ),
    (
        "commits_are_atomic",
        "the emulator applies a commit's writes one by one and keeps those before the one that fails",
    ),
    (
        "query_filters_and_orders",
        "the emulator has no dotted field paths, returns documents lacking the ordered field, fails \
         comparing a number with a string, and does not break ties by document name",
    ),
    ("cursors_page_through_every_document_once", "the emulator ignores a query's `start_at` cursor"),
    (
        "transaction_aborts_when_a_read_document_changed",
        "the emulator's transactions detect no conflict: the commit succeeds",
    ),
    (
        "transaction_aborts_on_a_phantom",
        "the emulator's transactions detect no conflict: the commit succeeds",
    ),
    (
        "transactions_serialize_concurrent_increments",
        "the emulator's transactions detect no conflict: concurrent increments are lost",
    ),
    (
        "racing_guarded_increments_never_pass_the_limit",
        "the emulator's transactions detect no conflict: racing guards all read the same count",
    ),
];

async fn fresh() -> (FirestoreEmulator, FirestoreStore) {
    let emulator = FirestoreEmulator::start();
    let store = emulator.store().await;
    (emulator, store)
}

macro_rules! proven {
    ($($case:ident),+ $(,)?) => {
        /// The conformance cases run here.
        const PROVEN: &[&str] = &[$(stringify!($case)),+];
        $(
            #[tokio::test]
            async fn $case() {
                let (_emulator, store) = fresh().await;
                conformance::$case(&store).await;
            }
        )+
    };
}

proven!(
    create_then_get,
    batch_get_keeps_order_and_reports_absent,
    malformed_queries_are_refused,
    transaction_refuses_reads_after_writes,
    transaction_errors_write_nothing,
    increments_create_add_and_combine,
    merges_set_fields_keep_the_others_and_join_increments,
    guarded_increments_fail_the_whole_commit,
    a_refused_commit_applies_nothing_and_its_retry_applies_once,
    a_lost_answer_may_have_applied_and_a_create_only_retry_tells,
    a_marked_increment_whose_answer_was_lost_counts_once,
);

#[test]
fn every_case_is_run_or_listed_with_its_reason() {
    let mut accounted: Vec<&str> = PROVEN.to_vec();
    accounted.extend(EMULATOR_CANNOT_PROVE.iter().map(|(case, _)| *case));
    let mut sorted = accounted.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), accounted.len(), "a case is both run and listed, or listed twice");
    let mut all = conformance::CASES.to_vec();
    all.sort_unstable();
    assert_eq!(sorted, all, "every conformance case is run against the emulator or listed with its reason");
    assert!(EMULATOR_CANNOT_PROVE.iter().all(|(_, why)| !why.is_empty()));
}

/// The cases not proven here are named, in backticks, in the Firestore
/// adapter's module doc (its `//!` lines).
#[test]
fn the_adapter_doc_lists_the_cases_checked_only_against_real_firestore() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/firestore/src/lib.rs");
    let source = std::fs::read_to_string(path).expect("shared/firestore/src/lib.rs");
    let doc: String =
        source.lines().filter_map(|l| l.trim_start().strip_prefix("//!")).collect::<Vec<_>>().join("\n");
    for (case, _) in EMULATOR_CANNOT_PROVE {
        assert!(doc.contains(&format!("`{case}`")), "the mapi-firestore module doc does not list `{case}`");
    }
}

fn key(id: &str) -> DocKey {
    DocKey::new("things", id).expect("key")
}

fn fields(v: Value) -> mapi_store::Fields {
    mapi_store::encode(&v).expect("object")
}

fn ids(docs: &[mapi_store::Document]) -> Vec<String> {
    docs.iter().map(|d| d.key.id().to_owned()).collect()
}

/// `exists` preconditions, which the emulator does check, answer the
/// port's errors for the right document, and a refused write changes nothing.
#[tokio::test]
async fn exists_preconditions_answer_for_the_document_concerned() {
    let (_emulator, s) = fresh().await;
    s.create(&key("a"), fields(json!({"n": 1}))).await.expect("create");
    assert_eq!(
        s.put(&key("nope"), fields(json!({"n": 1})), Precondition::Exists).await,
        Err(StoreError::NotFound(key("nope")))
    );
    assert_eq!(s.delete(&key("nope"), Precondition::Exists).await, Err(StoreError::NotFound(key("nope"))));
    s.delete(&key("nope"), Precondition::None).await.expect("deleting a missing document succeeds");
    let two = [
        Write::Put { key: key("b"), fields: fields(json!({"n": 2})), precondition: Precondition::None },
        Write::Put { key: key("a"), fields: fields(json!({"n": 3})), precondition: Precondition::Absent },
    ];
    assert_eq!(s.commit(None, &two).await, Err(StoreError::AlreadyExists(key("a"))));
    assert_eq!(s.get_one(&key("a")).await.expect("get").expect("a").fields["n"], 1);
    s.put(&key("a"), fields(json!({"n": 4})), Precondition::Exists).await.expect("exists");
    s.delete(&key("a"), Precondition::Exists).await.expect("delete");
    assert!(s.get_one(&key("a")).await.expect("get").is_none());
}

/// Queries on top-level fields of one type, without ties: what the
/// emulator evaluates as Firestore does.
#[tokio::test]
async fn queries_filter_order_and_limit() {
    let (_emulator, s) = fresh().await;
    for (id, group, n) in [("t1", "a", 3), ("t2", "a", 1), ("t3", "b", 2), ("t4", "a", 2), ("t5", "a", 5)] {
        s.create(&key(id), fields(json!({"group": group, "n": n}))).await.expect("seed");
    }
    s.create(&DocKey::new("others", "o1").expect("key"), fields(json!({"group": "a", "n": 1})))
        .await
        .expect("seed");
    let q = Query::new("things").filter("group", Op::Eq, "a").order_by("n", Direction::Asc);
    assert_eq!(ids(&s.query(&q, None).await.expect("query")), ["t2", "t4", "t1", "t5"]);
    let desc = Query::new("things").filter("group", Op::Eq, "a").order_by("n", Direction::Desc).limit(2);
    assert_eq!(ids(&s.query(&desc, None).await.expect("query")), ["t5", "t1"]);
    let range =
        Query::new("things").filter("n", Op::Ge, 2).filter("n", Op::Lt, 5).order_by("n", Direction::Asc);
    assert_eq!(ids(&s.query(&range, None).await.expect("query")), ["t3", "t4", "t1"]);
    let within = Query::new("things").filter("n", Op::In, json!([1, 5])).order_by("n", Direction::Asc);
    assert_eq!(ids(&s.query(&within, None).await.expect("query")), ["t2", "t5"]);
    let text = Query::new("things").filter("n", Op::Eq, "3");
    assert!(s.query(&text, None).await.expect("query").is_empty(), "\"3\" is not 3");
    let docs = s.query(&Query::new("things").filter("n", Op::Eq, 3), None).await.expect("query");
    assert_eq!(ids(&docs), ["t1"]);
    let read = s.get_one(&key("t1")).await.expect("get").expect("t1");
    assert_eq!(docs[0], read, "a query answers the same document, version and times as a read");
}

/// Reads and queries inside a transaction go through the transaction's
/// handle, the commit consumes it, and a finished handle is refused.
#[tokio::test]
async fn transactions_read_then_commit_once() {
    let (_emulator, s) = fresh().await;
    s.create(&key("a"), fields(json!({"group": "g", "n": 1}))).await.expect("create");
    let total: Result<i64, StoreError> = transact(&s, |mut tx| async move {
        let a = tx.get(&key("a")).await?.expect("a");
        let listed = tx.query(&Query::new("things").filter("group", Op::Eq, "g")).await?;
        let n = a.fields["n"].as_i64().expect("n") + listed.len() as i64;
        tx.put(&key("sum"), fields(json!({"n": n})), Precondition::Absent);
        tx.increment(&key("a"), "seen", 1, Some(1));
        Ok(tx.finish(n))
    })
    .await;
    assert_eq!(total, Ok(2));
    assert_eq!(s.get_one(&key("sum")).await.expect("get").expect("sum").fields["n"], 2);
    assert_eq!(s.get_one(&key("a")).await.expect("get").expect("a").fields["seen"], 1);
    // The guard is checked inside the caller's transaction too.
    let again: Result<(), StoreError> = transact(&s, |mut tx| async move {
        tx.get(&key("a")).await?;
        tx.increment(&key("a"), "seen", 1, Some(1));
        Ok(tx.finish(()))
    })
    .await;
    assert_eq!(again, Err(StoreError::LimitReached { key: key("a"), field: "seen".into() }));
    let id = s.begin().await.expect("begin");
    s.commit(Some((id, &[])), &[]).await.expect("an empty commit");
    assert!(matches!(s.get(&[key("a")], Some(id)).await, Err(StoreError::InvalidArgument(_))));
    s.rollback(id).await.expect("rolling back a finished transaction is harmless");
}

/// The versions the commit answers are the ones reads return, and a
/// version precondition that holds is accepted.
#[tokio::test]
async fn committed_versions_are_the_read_versions() {
    let (_emulator, s) = fresh().await;
    let writes = [
        Write::Put { key: key("a"), fields: fields(json!({"n": 1})), precondition: Precondition::Absent },
        Write::Increment { key: key("c"), field: "n".into(), delta: 2, at_most: None },
        Write::Delete { key: key("gone"), precondition: Precondition::None },
    ];
    let v = s.commit(None, &writes).await.expect("commit");
    assert_eq!(v.len(), 3);
    assert!(v[2].is_none(), "a delete has no version");
    let docs = s.get(&[key("a"), key("c")], None).await.expect("get");
    assert_eq!(docs[0].as_ref().map(|d| d.version), v[0]);
    assert_eq!(docs[1].as_ref().map(|d| d.version), v[1]);
    let a = docs[0].clone().expect("a");
    s.put(&key("a"), fields(json!({"n": 2})), Precondition::Version(a.version))
        .await
        .expect("current version");
    let after = s.get_one(&key("a")).await.expect("get").expect("a");
    assert_eq!(after.fields["n"], 2);
    assert_eq!(after.create_time, a.create_time);
}

/// The index file the deploy step applies is exactly the platform's
/// declared composite indexes (the same list SQLite creates), rendered by
/// the adapter. `MAPI_UPDATE_DOCS=1` rewrites it, as it does the docs.
#[test]
fn the_index_file_is_the_declared_indexes() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../terraform/firestore.indexes.json");
    let expected = mapi_firestore::wire::indexes_file(
        &mapi_platform::indexes(),
        &mapi_platform::contains_indexes(),
        &mapi_platform::unindexed(),
    );
    let pretty = serde_json::to_string_pretty(&expected).expect("json");
    if std::env::var_os("MAPI_UPDATE_DOCS").is_some() {
        std::fs::write(path, format!("{pretty}\n")).expect("write the index file");
    }
    let on_disk = std::fs::read_to_string(path).unwrap_or_default();
    let parsed: Value = serde_json::from_str(&on_disk).unwrap_or(Value::Null);
    assert_eq!(parsed, expected, "terraform/firestore.indexes.json is stale; it should read:\n{pretty}\n");
    let listed = expected["indexes"].as_array().map_or(0, Vec::len);
    assert!(listed > 10, "the platform's queries need composite indexes: {listed}");
}
